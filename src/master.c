/*
 * master.c -- the pre-forked pool.
 *
 * The master never serves a request.  It forks `workers` processes that
 * all accept on the same listening socket, and then waits for signals:
 *
 *   SIGCHLD          reap; respawn the worker (throttled when workers keep
 *                    dying right after start, so a crash loop cannot spin)
 *   SIGTERM, SIGINT, graceful stop: every worker finishes the request in
 *   SIGQUIT          hand; after a grace period the rest are killed
 *   SIGHUP           re-read the configuration; on success, replace the
 *                    workers one by one as they finish (gracefully)
 *
 * Once a second it also kills a worker that has been on one request
 * longer than request_timeout: libfcgi has no I/O timeouts of its own, so
 * a stalled peer would otherwise hold a worker forever.  The scoreboard
 * that makes this possible is a MAP_SHARED page made before fork.
 *
 * With workers = 0 there is no master: the process serves requests itself
 * (Apache mod_fcgid manages processes and must not see them fork).
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "service.h"

#define MASTER_GRACE_MS 10000       /* graceful stop, then SIGKILL */
#define MASTER_FAST_EXIT_MS 1000    /* a worker dying this soon is failing */
#define MASTER_FAST_EXITS 5         /* tolerated in a row before throttling */

struct master {
    struct rl_config *cfg;
    int listen_fd;
    struct scoreboard *board;
    int64_t started_ms[256];
    int fast_exits;
    int64_t next_spawn_ms;
};

static pid_t
master_spawn(struct master *m, int i, const sigset_t *oldmask)
{
    struct scoreboard_slot *slot = &m->board->slots[i];
    pid_t pid;
    int rc;

    memset(slot, 0, sizeof(*slot));
    fflush(NULL);
    if ((pid = fork()) == -1) {
        log_error("fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        /* The worker goes when the master goes, even by SIGKILL. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() == 1)
            _exit(0);
        sigprocmask(SIG_SETMASK, oldmask, NULL);
        slot->pid = getpid();
        rc = worker_run(m->cfg, m->listen_fd, slot, m->board);
        /* exit(), not _exit(): a sanitizer build checks for leaks at exit,
         * and stdio was flushed before fork. */
        exit(rc);
    }
    slot->pid = pid;
    m->started_ms[i] = util_now_ms();
    return pid;
}

static int
master_alive(const struct master *m)
{
    long i;
    int n = 0;

    for (i = 0; i < 256; i++)
        n += m->board->slots[i].pid != 0;
    return n;
}

static void
master_signal_all(const struct master *m, int sig)
{
    long i;

    for (i = 0; i < 256; i++)
        if (m->board->slots[i].pid != 0)
            kill(m->board->slots[i].pid, sig);
}

static void
master_reap(struct master *m, int stopping)
{
    pid_t pid;
    int status, i;
    int64_t now = util_now_ms();

    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (i = 0; i < 256; i++)
            if (m->board->slots[i].pid == pid)
                break;
        if (i == 256)
            continue;
        m->board->slots[i].pid = 0;
        if (WIFSIGNALED(status))
            log_warn("worker %ld killed by signal %d", (long)pid,
                WTERMSIG(status));
        else if (WEXITSTATUS(status) != 0)
            log_warn("worker %ld exited with status %d", (long)pid,
                WEXITSTATUS(status));
        else
            log_debug("worker %ld exited", (long)pid);
        if (stopping)
            continue;
        if (now - m->started_ms[i] < MASTER_FAST_EXIT_MS &&
            (WIFSIGNALED(status) || WEXITSTATUS(status) != 0)) {
            if (++m->fast_exits > MASTER_FAST_EXITS) {
                int64_t delay = 1000LL << (m->fast_exits - MASTER_FAST_EXITS);

                if (delay > 30000 || delay <= 0)
                    delay = 30000;
                m->next_spawn_ms = now + delay;
                log_error("workers keep failing right after start (%d in a "
                    "row); next respawn in %lld ms", m->fast_exits,
                    (long long)delay);
            }
        } else
            m->fast_exits = 0;
    }
}

static void
master_enforce_timeout(struct master *m)
{
    struct scoreboard_slot *s;
    int64_t now = util_now_ms();
    int i;

    if (m->cfg->request_timeout == 0)
        return;
    for (i = 0; i < m->cfg->workers; i++) {
        s = &m->board->slots[i];
        if (s->pid != 0 && s->busy &&
            now - s->request_start_ms > 1000 * m->cfg->request_timeout) {
            log_warn("worker %ld on one request for more than %ld s "
                "(request_timeout); killing it", (long)s->pid,
                m->cfg->request_timeout);
            kill(s->pid, SIGKILL);
            s->busy = 0;
        }
    }
}

static void
master_reload(struct master *m)
{
    struct rl_config fresh;
    char err[512];

    if (m->cfg->path[0] == '\0') {
        log_warn("SIGHUP: no configuration file to re-read");
        return;
    }
    config_defaults(&fresh);
    if (config_load(&fresh, m->cfg->path, err, sizeof(err)) == -1) {
        log_error("SIGHUP: %s; keeping the running configuration", err);
        return;
    }
    if (strcmp(fresh.listen, m->cfg->listen) != 0)
        log_warn("SIGHUP: \"listen\" cannot change without a restart; "
            "keeping %s", m->cfg->listen[0] ? m->cfg->listen : "fd 0");
    memcpy(fresh.listen, m->cfg->listen, sizeof(fresh.listen));
    if (fresh.workers == 0) {
        log_warn("SIGHUP: workers = 0 needs a restart; keeping %ld",
            m->cfg->workers);
        fresh.workers = m->cfg->workers;
    }
    *m->cfg = fresh;
    m->board->workers = (int)fresh.workers;
    log_set_level(fresh.log_level);
    log_info("SIGHUP: configuration reloaded; replacing workers");
    /* Workers finish their request and exit; the loop respawns them with
     * the new configuration, which they inherit through fork. */
    master_signal_all(m, SIGTERM);
}

int
master_run(struct rl_config *cfg, int listen_fd)
{
    struct master m;
    sigset_t set, oldmask;
    siginfo_t info;
    struct timespec tick = { 1, 0 };
    int64_t deadline = 0;
    int sig, i, stopping = 0;

    if (cfg->workers == 0)
        return worker_run(cfg, listen_fd, NULL, NULL);

    memset(&m, 0, sizeof(m));
    m.cfg = cfg;
    m.listen_fd = listen_fd;
    m.board = mmap(NULL, sizeof(*m.board), PROT_READ | PROT_WRITE,
        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m.board == MAP_FAILED) {
        log_error("mmap: %s", strerror(errno));
        return 1;
    }
    memset(m.board, 0, sizeof(*m.board));
    m.board->start_s = util_wall_s();
    m.board->workers = (int)cfg->workers;

    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGQUIT);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, &oldmask);
    signal(SIGPIPE, SIG_IGN);

    log_info("master %ld: starting %ld workers", (long)getpid(), cfg->workers);
    for (;;) {
        master_reap(&m, stopping);
        if (stopping) {
            if (master_alive(&m) == 0)
                break;
            if (util_now_ms() >= deadline) {
                log_warn("workers still busy after %d ms; killing them",
                    MASTER_GRACE_MS);
                master_signal_all(&m, SIGKILL);
                deadline = util_now_ms() + MASTER_GRACE_MS;
            }
        } else if (util_now_ms() >= m.next_spawn_ms) {
            for (i = 0; i < cfg->workers; i++)
                if (m.board->slots[i].pid == 0)
                    master_spawn(&m, i, &oldmask);
            /* Slots above a lowered worker count (after SIGHUP) drain. */
            for (i = (int)cfg->workers; i < 256; i++)
                if (m.board->slots[i].pid != 0)
                    kill(m.board->slots[i].pid, SIGTERM);
        }
        master_enforce_timeout(&m);

        sig = sigtimedwait(&set, &info, &tick);
        if (sig == SIGTERM || sig == SIGINT || sig == SIGQUIT) {
            if (!stopping) {
                log_info("master: signal %d, stopping gracefully", sig);
                stopping = 1;
                deadline = util_now_ms() + MASTER_GRACE_MS;
                master_signal_all(&m, SIGTERM);
            }
        } else if (sig == SIGHUP && !stopping)
            master_reload(&m);
    }
    log_info("master %ld: stopped", (long)getpid());
    munmap(m.board, sizeof(*m.board));
    return 0;
}
