/*
 * master.c -- the pre-forked pool.
 *
 * The master never serves a request.  It forks `workers` processes that
 * all accept on the same listening socket, and then waits for signals:
 *
 *   SIGCHLD          reap; respawn the worker in its slot (a slot whose
 *                    workers keep dying right after start waits 10 ms,
 *                    doubling up to 1 s, so a crash loop cannot spin, while
 *                    the other slots keep serving); each death is one line
 *                    of the master's at warn, each stop that was asked for
 *                    (by the master, or by a stop signal to the whole
 *                    group while the pool stops) one at info
 *   SIGTERM, SIGINT  fast stop: the workers end at once (SIGTERM, whose
 *                    default action they keep), requests in hand are cut
 *   SIGQUIT          graceful stop: every worker finishes the request in
 *                    hand (it is sent SIGQUIT); after a grace period the
 *                    rest are killed
 *   SIGHUP, SIGUSR2  re-read the configuration; on success, replace the
 *                    workers one at a time (master_roll), each passing
 *                    its kept connections to the others
 *   SIGUSR1          reopen the logs (logrotate's signal)
 *   others           the catchable signals whose default would end the
 *                    master silently (SIGALRM, SIGIO, ...) are logged and
 *                    ignored
 *
 * Several times a second it also kills a worker that has been answering
 * one request longer than request_timeout, or reading one longer than
 * fcgi_read_timeout_ms plus a second (the worker enforces that deadline
 * itself; this is the backstop should a peer trickle a large body).  The
 * scoreboard that makes this possible is the front of the shared segment
 * made before fork (scoreboard.c).
 *
 * With workers = 0 there is no master: the process serves requests itself
 * (Apache mod_fcgid manages processes and must not see them fork).
 *
 * Should the master itself die (SIGKILL, the OOM killer), its workers are
 * told by the kernel (PR_SET_PDEATHSIG), finish the request in hand and
 * leave, except the first to claim the master's place: it executes
 * ratelimit-fcgi again with the same command line and the listening socket
 * kept open (RATELIMIT_FCGI_LISTEN_FD), and the new master starts a new
 * pool.  Web servers that start us themselves do not start us again
 * (lighttpd 1.4.69 answers "all handlers down" for good once the socket
 * refuses), so the socket must never close.  A master made this way stops
 * when the process that started the first one (the web server) is gone.
 * Its parent is init (or a subreaper), so it cannot be found as the web
 * server's child: it rewrites pid_file (main.c), through which signals
 * reach it.
 *
 * Process titles, as php-fpm and nginx have them: ps shows the master as
 * "ratelimit-fcgi: master process (CONFIG)" and a worker as
 * "ratelimit-fcgi: worker (CONFIG)", CONFIG being the file given with -c,
 * so that `pgrep -f CONFIG` still finds the whole pool.  Linux has no
 * setproctitle(3): /proc/PID/cmdline is read from the memory that held
 * the command line and the environment at exec, which the kernel lays
 * out as one run of strings.  The environment is copied elsewhere, and
 * the title is written over the run (a longer title is cut to fit).  The
 * command line is copied first, for a takeover's exec.  The comm (top,
 * pkill -x, pid_file's check in main.c) is set to "ratelimit-fcgi" in
 * every process, also after a takeover's exec of /proc/self/exe, which
 * would otherwise name the new master "exe".
 */
#define _GNU_SOURCE             /* program_invocation_name */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "service.h"

#define MASTER_GRACE_MS 10000       /* graceful stop, then SIGKILL */
#define MASTER_FAST_MS 1000         /* fast stop, then SIGKILL */
#define MASTER_FAST_EXIT_MS 1000    /* a worker dying this soon is failing */
#define MASTER_BACKOFF_MIN_MS 10    /* first respawn delay of a failing slot */
#define MASTER_BACKOFF_MAX_MS 1000
#define MASTER_TICK_MS 200
#define MASTER_RETIRE_MS 2000       /* a reload's worker to pass on its
                                       connections and leave */

struct master_slot {
    int64_t started_ms;
    int64_t next_spawn_ms;      /* not before (monotonic) */
    int failures;               /* fast abnormal exits in a row */
    int sent;                   /* SIGQUIT, SIGTERM or SIGKILL, when the
                                   master sent its worker one (a stop, a
                                   deadline), or SIGUSR2 (a reload) */
    unsigned gen;               /* the configuration its worker runs */
    int64_t retire_ms;          /* when it was sent SIGUSR2 */
};

static char **master_argv;      /* a copy of the command line */
static char *master_title_at;   /* the memory ps shows, or NULL */
static size_t master_title_len;

/* Catchable signals whose default action would end (or stop) the master
 * without a word: taken, logged and ignored.  Ends with 0. */
static const int master_ignored[] = {
    SIGALRM, SIGVTALRM, SIGPROF, SIGIO, SIGPWR, SIGXCPU, SIGXFSZ, SIGSTKFLT,
    SIGTTIN, SIGTTOU, SIGTSTP, 0
};

/* A copy of the NULL-terminated vector v, strings included, or NULL. */
static char **
master_strv_copy(char **v)
{
    char **copy;
    size_t n, i;

    for (n = 0; v[n] != NULL; n++)
        ;
    if ((copy = calloc(n + 1, sizeof(*copy))) == NULL)
        return NULL;
    for (i = 0; i < n; i++)
        if ((copy[i] = strdup(v[i])) == NULL)
            return NULL;        /* at start: the process ends soon */
    return copy;
}

/*
 * Keeps a copy of the command line (for master_takeover) and claims the
 * memory of argv's strings, and of the environment's strings that follow
 * them without a gap, for the process title: the environment is moved to
 * copies first, as are glibc's program_invocation_name and
 * program_invocation_short_name, which point into argv[0].  Call it once,
 * before anything else keeps a pointer into argv.  Without memory for the
 * copies there is no title, and argv is kept as it is.
 */
void
master_set_argv(char **argv)
{
    extern char **environ;
    char **env, *end, *name;
    size_t i;

    prctl(PR_SET_NAME, "ratelimit-fcgi", 0, 0, 0);
    master_argv = argv;
    if (argv == NULL || argv[0] == NULL ||
        (master_argv = master_strv_copy(argv)) == NULL) {
        master_argv = argv;
        return;
    }
    end = argv[0] + strlen(argv[0]) + 1;
    for (i = 1; argv[i] != NULL && argv[i] == end; i++)
        end += strlen(argv[i]) + 1;
    if (argv[i] == NULL && environ != NULL)
        for (i = 0; environ[i] != NULL && environ[i] == end; i++)
            end += strlen(environ[i]) + 1;
    if (environ != NULL) {
        if ((env = master_strv_copy(environ)) == NULL)
            return;
        environ = env;
    }
    if ((name = strdup(program_invocation_name)) != NULL) {
        program_invocation_name = name;
        program_invocation_short_name = strrchr(name, '/') != NULL ?
            strrchr(name, '/') + 1 : name;
    }
    master_title_at = argv[0];
    master_title_len = (size_t)(end - argv[0]);
}

/*
 * Sets the process title to "ratelimit-fcgi: " and the rest, cut to the
 * memory there is.  What follows the title is zeroed: /proc/PID/cmdline
 * then ends with the title, whether it fits in argv's part of the memory
 * (the kernel shows that part whole) or runs into the environment's (the
 * kernel shows it up to the first zero byte).
 */
static void
master_title(const char *fmt, ...)
{
    char title[512];
    size_t n;
    va_list ap;
    int len;

    if (master_title_at == NULL || master_title_len < 2)
        return;
    len = snprintf(title, sizeof(title), "ratelimit-fcgi: ");
    va_start(ap, fmt);
    vsnprintf(title + len, sizeof(title) - (size_t)len, fmt, ap);
    va_end(ap);
    n = strlen(title);
    if (n > master_title_len - 1)
        n = master_title_len - 1;
    memcpy(master_title_at, title, n);
    memset(master_title_at + n, 0, master_title_len - n);
}

/* How a title names the pool: its configuration file as given. */
static const char *
master_config_name(const struct rl_config *cfg)
{
    return cfg->path[0] != '\0' ? cfg->path : "no configuration file";
}

struct master {
    struct rl_config *cfg;
    int listen_fd;
    pid_t watch;                /* stop when this process is gone */
    struct shm shm;
    struct scoreboard *board;
    struct master_slot slot[RL_MAX_WORKERS];
    int handoff[2];             /* kept connections passed between workers
                                   (worker.c), or -1 */
    unsigned gen;               /* configurations read (master_reload) */
    /* Deaths logged one by one in the current second, and those past the
     * budget (the pool's size), counted for one line after it. */
    int64_t deaths_since_ms;
    int deaths_logged;
    unsigned long deaths_held;
};

/*
 * In a worker whose master died: becomes a new master by executing
 * ratelimit-fcgi again with the listening socket open.  Returns only on
 * failure, with the exit status.
 */
static int
master_takeover(struct master *m)
{
    char fd[16], pid[16];
    pid_t parent = m->board->master_parent;
    int flags;

    log_warn("the master is gone; worker %ld starts a new master in its "
        "place", (long)getpid());
    flags = fcntl(m->listen_fd, F_GETFD);
    if (flags == -1 || fcntl(m->listen_fd, F_SETFD, flags & ~FD_CLOEXEC) ==
        -1 || master_argv == NULL) {
        log_error("cannot start a new master: %s", master_argv == NULL ?
            "no command line" : strerror(errno));
        return 1;
    }
    snprintf(fd, sizeof(fd), "%d", m->listen_fd);
    setenv("RATELIMIT_FCGI_LISTEN_FD", fd, 1);
    /* Watch the web server that started the first master, if it still
     * runs and is not init (or a subreaper that adopted the master); 0
     * when there is none to watch. */
    snprintf(pid, sizeof(pid), "%ld", parent > 1 && kill(parent, 0) == 0 ?
        (long)parent : 0L);
    setenv("RATELIMIT_FCGI_WATCH_PID", pid, 1);
    log_flush();
    fflush(NULL);
    execv("/proc/self/exe", master_argv);
    log_error("cannot start a new master: exec: %s", strerror(errno));
    return 1;
}

static pid_t
master_spawn(struct master *m, int i, const sigset_t *oldmask)
{
    struct scoreboard_slot *slot = &m->board->slots[i];
    pid_t pid;
    int rc;

    memset(slot, 0, sizeof(*slot));
    m->slot[i].sent = 0;
    m->slot[i].gen = m->gen;
    /* Lines the log held back are written now, by the master: a worker
     * forked with them pending would write them as its own when it
     * leaves. */
    log_flush();
    fflush(NULL);
    if ((pid = fork()) == -1) {
        log_error("fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        /* The worker hears of the master's death, even by SIGKILL. */
        prctl(PR_SET_PDEATHSIG, RL_SIG_MASTER_GONE);
        if (getppid() != m->board->master)
            _exit(0);
        master_title("worker (%s)", master_config_name(m->cfg));
        /* A reload's SIGUSR2 that comes before the worker takes it
         * (worker.c) is lost, not fatal: the master then stops it. */
        signal(SIGUSR2, SIG_IGN);
        sigprocmask(SIG_SETMASK, oldmask, NULL);
        slot->pid = getpid();
        rc = worker_run(m->cfg, m->listen_fd, slot, &m->shm,
            m->handoff[0] >= 0 ? m->handoff : NULL);
        if (rc == WORKER_TAKEOVER)
            rc = master_takeover(m);
        log_flush();
        /* exit(), not _exit(): a sanitizer build checks for leaks at exit,
         * and stdio was flushed before fork. */
        exit(rc);
    }
    slot->pid = pid;
    m->slot[i].started_ms = util_now_ms();
    return pid;
}

static int
master_alive(const struct master *m)
{
    long i;
    int n = 0;

    for (i = 0; i < RL_MAX_WORKERS; i++)
        n += m->board->slots[i].pid != 0;
    return n;
}

static void
master_signal_all(struct master *m, int sig)
{
    long i;

    for (i = 0; i < RL_MAX_WORKERS; i++)
        if (m->board->slots[i].pid != 0) {
            if (sig == SIGQUIT || sig == SIGTERM || sig == SIGKILL)
                m->slot[i].sent = sig;
            kill(m->board->slots[i].pid, sig);
        }
}

/* Whether a stop signal (SIGTERM, SIGINT, SIGQUIT) waits for the master:
 * one sent to the whole process group (^C in a terminal) or control group
 * (systemd) reaches the workers too, which may end before the master has
 * taken its own. */
static int
master_stop_pending(void)
{
    sigset_t pending;

    if (sigpending(&pending) == -1)
        return 0;
    return sigismember(&pending, SIGTERM) == 1 ||
        sigismember(&pending, SIGINT) == 1 ||
        sigismember(&pending, SIGQUIT) == 1;
}

/* Ends the second of master_log_death's budget, once it is over, with
 * one line for the deaths past the budget. */
static void
master_deaths_report(struct master *m)
{
    int64_t now = util_now_ms();

    if (now - m->deaths_since_ms < 1000)
        return;
    if (m->deaths_held > 0)
        log_warn("%lu more workers died in the second before (not logged "
            "one by one; see ratelimit_worker_crashes_total)",
            m->deaths_held);
    m->deaths_since_ms = now;
    m->deaths_logged = 0;
    m->deaths_held = 0;
}

/*
 * Logs a worker's end.  A stop that was asked for is one line at info:
 * the master sent the signal that ended it (a fast stop's SIGTERM, a
 * SIGKILL at a deadline, logged at warn when it was sent), or it left
 * after the master's SIGQUIT (a graceful stop, a reload), or, while the
 * pool is stopping (stopping), a stop signal ended it that was sent to
 * the whole group.  A worker that leaves by itself (max_requests) is a
 * debug line.  Anything else is a death: one line at warn, naming the
 * worker, at most the pool's size such lines a second (a pool that keeps
 * dying is not a line per death), the rest counted in one line after the
 * second.
 */
static void
master_log_death(struct master *m, int i, pid_t pid, int status,
    int stopping)
{
    int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;

    /* The lines of stops asked for are not held back by the log's limit
     * per call site, so that each names its worker: there is one per
     * worker the master stopped, on an operator's signal or a deadline. */
    if (sig != 0 && (sig == m->slot[i].sent || (stopping &&
        (sig == SIGTERM || sig == SIGINT || sig == SIGQUIT)))) {
        log_emit(RL_LOG_INFO | RL_LOG_UNLIMITED, __FILE__, __LINE__,
            "worker %ld stopped by signal %d (%s)%s", (long)pid, sig,
            strsignal(sig), sig == m->slot[i].sent ? ", sent by the master" :
            " during the pool's stop");
        return;
    }
    if (sig == 0 && WEXITSTATUS(status) == 0) {
        if (m->slot[i].sent != 0 || stopping)
            log_emit(RL_LOG_INFO | RL_LOG_UNLIMITED, __FILE__, __LINE__,
                "worker %ld stopped, as the master asked", (long)pid);
        else
            log_debug("worker %ld exited", (long)pid);
        return;
    }
    master_deaths_report(m);
    if (m->deaths_logged >= (m->cfg->workers > 0 ? m->cfg->workers : 1)) {
        m->deaths_held++;
        return;
    }
    m->deaths_logged++;
    /* Bounded above, so the log's limit per call site does not apply:
     * each death gets a line of its own, with its own pid. */
    if (WIFSIGNALED(status))
        log_emit(RL_LOG_WARN | RL_LOG_UNLIMITED, __FILE__, __LINE__,
            "worker %ld killed by signal %d (%s)", (long)pid,
            WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        log_emit(RL_LOG_WARN | RL_LOG_UNLIMITED, __FILE__, __LINE__,
            "worker %ld exited with status %d", (long)pid,
            WEXITSTATUS(status));
}

/*
 * Reaps exited workers.  A worker that dies abnormally soon after it
 * started puts its slot on a back-off (10 ms, doubling to 1 s) so that a
 * flood of requests that crash workers cannot make the master fork in a
 * tight loop; each slot backs off on its own, so the pool is never emptied
 * by a pause, and a normal exit (max_requests, reload) resets the slot.
 */
static void
master_reap(struct master *m, int stopping)
{
    struct master_slot *ms;
    pid_t pid;
    int status, i, abnormal, asked;
    int64_t now = util_now_ms(), delay;

    /* A stop the master has not taken yet is a stop all the same. */
    asked = stopping || master_stop_pending();

    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (i = 0; i < RL_MAX_WORKERS; i++)
            if (m->board->slots[i].pid == pid)
                break;
        if (i == RL_MAX_WORKERS)
            continue;
        scoreboard_exited(m->board, &m->board->slots[i], status);
        m->board->slots[i].pid = 0;
        m->board->slots[i].state = SLOT_IDLE;
        ms = &m->slot[i];
        abnormal = WIFSIGNALED(status) || WEXITSTATUS(status) != 0;
        if (abnormal)
            __atomic_add_fetch(&m->board->counters.worker_crashes, 1,
                __ATOMIC_RELAXED);
        master_log_death(m, i, pid, status, asked);
        if (asked)
            continue;
        if (abnormal && now - ms->started_ms < MASTER_FAST_EXIT_MS) {
            delay = (int64_t)MASTER_BACKOFF_MIN_MS << (ms->failures < 7 ?
                ms->failures : 7);
            if (delay > MASTER_BACKOFF_MAX_MS)
                delay = MASTER_BACKOFF_MAX_MS;
            ms->failures++;
            ms->next_spawn_ms = now + delay;
            if (ms->failures >= 3)
                log_warn("slot %d: workers keep failing right after start "
                    "(%d in a row); next respawn in %lld ms", i,
                    ms->failures, (long long)delay);
        } else {
            ms->failures = 0;
            ms->next_spawn_ms = 0;
        }
    }
}

/* Kills workers stuck past a deadline: answering longer than
 * request_timeout, or reading a request longer than fcgi_read_timeout_ms
 * and a second. */
static void
master_enforce_timeout(struct master *m)
{
    struct scoreboard_slot *s;
    int64_t now = util_now_ms(), age;
    int i;

    for (i = 0; i < m->cfg->workers; i++) {
        s = &m->board->slots[i];
        if (s->pid == 0)
            continue;
        age = now - s->state_since_ms;
        if (s->state == SLOT_BUSY && m->cfg->request_timeout > 0 &&
            age > 1000 * m->cfg->request_timeout) {
            log_warn("worker %ld on one request for more than %ld s "
                "(request_timeout); killing it", (long)s->pid,
                m->cfg->request_timeout);
        } else if (s->state == SLOT_READING &&
            age > m->cfg->fcgi_read_timeout_ms + 1000) {
            log_warn("worker %ld reading one request for more than %ld ms "
                "(fcgi_read_timeout_ms); killing it", (long)s->pid,
                m->cfg->fcgi_read_timeout_ms);
        } else
            continue;
        s->leaving = EXIT_TIMEOUT;
        m->slot[i].sent = SIGKILL;
        kill(s->pid, SIGKILL);
        s->state = SLOT_IDLE;
    }
}

/*
 * A reload replaces the workers one at a time, so that the others take
 * the kept FastCGI connections of the one leaving (worker.c's hand-off)
 * and the pool keeps serving with all but one of its workers.  Once every
 * slot has a worker, one still running an older configuration is sent
 * SIGUSR2: it stops taking connections, passes its kept ones to the
 * others (waiting while the hand-off queue is full, where a stop would
 * close them), finishes what it has in hand and leaves, and the loop
 * starts its replacement, with the configuration read last; then the
 * next.  One that has not left MASTER_RETIRE_MS later is sent SIGQUIT,
 * which closes what it could not pass on.  A reload during the round
 * starts it again for every worker of an older configuration.
 */
static void
master_roll(struct master *m)
{
    struct master_slot *ms;
    int64_t now = util_now_ms();
    long i, next = -1;
    pid_t pid;

    for (i = 0; i < m->cfg->workers; i++) {
        ms = &m->slot[i];
        if ((pid = m->board->slots[i].pid) == 0)
            return;             /* a slot waits for its worker */
        if (ms->sent == SIGUSR2) {
            if (now - ms->retire_ms >= MASTER_RETIRE_MS) {
                log_info("worker %ld has not left %d ms after the reload "
                    "asked it to; stopping it", (long)pid,
                    MASTER_RETIRE_MS);
                ms->sent = SIGQUIT;
                kill(pid, SIGQUIT);
            }
            return;
        }
        if (ms->sent != 0)
            return;             /* on its way out already */
        if (ms->gen != m->gen && next < 0)
            next = i;
    }
    if (next < 0)
        return;
    ms = &m->slot[next];
    ms->sent = SIGUSR2;
    ms->retire_ms = now;
    kill(m->board->slots[next].pid, SIGUSR2);
}

/* Milliseconds until the next thing the loop must do by itself. */
static long
master_wait_ms(const struct master *m)
{
    int64_t now = util_now_ms(), wait = MASTER_TICK_MS;
    int i;

    for (i = 0; i < m->cfg->workers; i++)
        if (m->board->slots[i].pid == 0 && m->slot[i].next_spawn_ms > now &&
            m->slot[i].next_spawn_ms - now < wait)
            wait = m->slot[i].next_spawn_ms - now;
    return (long)(wait < 1 ? 1 : wait);
}

static void
master_reload(struct master *m)
{
    struct rl_config fresh;
    char err[2048];

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
    /* Privileges were dropped at start, and the pid file is written. */
    if (strcmp(fresh.user, m->cfg->user) != 0 ||
        strcmp(fresh.group, m->cfg->group) != 0 ||
        strcmp(fresh.allow_root, m->cfg->allow_root) != 0 ||
        strcmp(fresh.pid_file, m->cfg->pid_file) != 0)
        log_warn("SIGHUP: user, group, allow_root and pid_file cannot "
            "change without a restart; keeping them");
    memcpy(fresh.user, m->cfg->user, sizeof(fresh.user));
    memcpy(fresh.group, m->cfg->group, sizeof(fresh.group));
    memcpy(fresh.allow_root, m->cfg->allow_root, sizeof(fresh.allow_root));
    memcpy(fresh.pid_file, m->cfg->pid_file, sizeof(fresh.pid_file));
    if (fresh.workers == 0) {
        log_warn("SIGHUP: workers = 0 needs a restart; keeping %ld",
            m->cfg->workers);
        fresh.workers = m->cfg->workers;
    }
    /* The shared segment was sized at start. */
    if (fresh.key_cache_size != m->cfg->key_cache_size ||
        fresh.key_cache_negative_size != m->cfg->key_cache_negative_size ||
        fresh.rule_cache_size != m->cfg->rule_cache_size) {
        log_warn("SIGHUP: key_cache_size, key_cache_negative_size and "
            "rule_cache_size cannot change without a restart; keeping them");
        fresh.key_cache_size = m->cfg->key_cache_size;
        fresh.key_cache_negative_size = m->cfg->key_cache_negative_size;
        fresh.rule_cache_size = m->cfg->rule_cache_size;
    }
    /* The over-limit table too; turning it off (0) works at once. */
    if (fresh.overlimit_cache_size != m->cfg->overlimit_cache_size &&
        fresh.overlimit_cache_size != 0) {
        log_warn("SIGHUP: overlimit_cache_size can only be set to 0 "
            "without a restart; keeping %ld", m->cfg->overlimit_cache_size);
        fresh.overlimit_cache_size = m->cfg->overlimit_cache_size;
    }
    *m->cfg = fresh;
    m->board->workers = (int)fresh.workers;
    /* What the pool learnt from PostgreSQL is checked again. */
    shm_changed(&m->shm);
    log_set_level(fresh.log_level);
    log_info("SIGHUP: configuration reloaded; replacing workers one at "
        "a time");
    /* master_roll() replaces the workers, which inherit the new
     * configuration through fork. */
    m->gen++;
}

/* The process a master made by a takeover watches (see master_takeover),
 * from the environment, which is then cleared for the workers. */
static pid_t
master_watched(void)
{
    const char *w = getenv("RATELIMIT_FCGI_WATCH_PID");
    pid_t pid = w != NULL ? (pid_t)atol(w) : 0;

    if (w == NULL)
        return 0;
    unsetenv("RATELIMIT_FCGI_WATCH_PID");
    /* Its parent is now init (or a subreaper), not the process that
     * started the pool: pid_file, rewritten by main(), names it. */
    if (pid > 1)
        log_info("master %ld: took over from a master that died; will stop "
            "when process %ld is gone", (long)getpid(), (long)pid);
    else
        log_info("master %ld: took over from a master that died",
            (long)getpid());
    return pid;
}

int
master_run(struct rl_config *cfg, int listen_fd)
{
    static struct master m;
    sigset_t set, oldmask;
    siginfo_t info;
    struct timespec tick;
    int64_t deadline = 0, now;
    long wait;
    int sig, i, rc, stopping = 0;

    memset(&m, 0, sizeof(m));
    m.cfg = cfg;
    m.listen_fd = listen_fd;
    if (scoreboard_map(&m.shm, cfg) == -1)
        return 1;
    m.board = m.shm.board;
    m.board->start_s = util_wall_s();
    m.board->workers = (int)cfg->workers;
    m.board->master = getpid();
    m.board->master_parent = getppid();
    m.watch = master_watched();

    if (cfg->workers == 0) {
        master_title("single process (%s)", master_config_name(cfg));
        rc = worker_run(cfg, listen_fd, NULL, &m.shm, NULL);
        scoreboard_unmap(&m.shm);
        log_flush();
        return rc;
    }

    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGQUIT);
    sigaddset(&set, SIGHUP);
    for (i = 0; master_ignored[i] != 0; i++)
        sigaddset(&set, master_ignored[i]);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
    sigprocmask(SIG_BLOCK, &set, &oldmask);
    signal(SIGPIPE, SIG_IGN);

    /* A worker that leaves while the pool goes on hands its kept FastCGI
     * connections to the others through this pair (see worker.c). */
    if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, m.handoff) == -1) {
        log_warn("socketpair (hand-off of kept connections): %s",
            strerror(errno));
        m.handoff[0] = m.handoff[1] = -1;
    }
    master_title("master process (%s)", master_config_name(cfg));
    log_info("master %ld: starting %ld workers", (long)getpid(), cfg->workers);
    for (;;) {
        master_reap(&m, stopping);
        if (stopping) {
            if (master_alive(&m) == 0)
                break;
            if (util_now_ms() >= deadline) {
                log_warn("workers still busy at the stop's deadline; "
                    "killing them");
                master_signal_all(&m, SIGKILL);
                deadline = util_now_ms() + MASTER_GRACE_MS;
            }
        } else if (!master_stop_pending()) {
            /* (A stop signal waiting is taken below first: no worker is
             * started only to be stopped.) */
            now = util_now_ms();
            for (i = 0; i < cfg->workers; i++)
                if (m.board->slots[i].pid == 0 &&
                    now >= m.slot[i].next_spawn_ms)
                    master_spawn(&m, i, &oldmask);
            /* Slots above a lowered worker count (after SIGHUP) drain. */
            for (i = (int)cfg->workers; i < RL_MAX_WORKERS; i++)
                if (m.board->slots[i].pid != 0) {
                    m.slot[i].sent = SIGQUIT;
                    kill(m.board->slots[i].pid, SIGQUIT);
                }
            master_roll(&m);
        }
        master_enforce_timeout(&m);
        master_deaths_report(&m);
        scoreboard_sample(m.board, m.listen_fd, util_now_ms());
        /* Who started us may change (a shell exits, init adopts us). */
        m.board->master_parent = getppid();
        if (!stopping && m.watch > 1 && kill(m.watch, 0) == -1 &&
            errno == ESRCH) {
            log_info("master: process %ld, which started the pool, is gone; "
                "stopping gracefully", (long)m.watch);
            stopping = 1;
            deadline = util_now_ms() + MASTER_GRACE_MS;
            master_signal_all(&m, SIGQUIT);
        }

        wait = master_wait_ms(&m);
        tick.tv_sec = wait / 1000;
        tick.tv_nsec = (wait % 1000) * 1000000L;
        sig = sigtimedwait(&set, &info, &tick);
        if (sig == SIGTERM || sig == SIGINT) {
            /* Also after a graceful stop began: TERM cuts it short. */
            if (stopping != 2) {
                log_info("master: %s, stopping fast", strsignal(sig));
                stopping = 2;
                deadline = util_now_ms() + MASTER_FAST_MS;
                master_signal_all(&m, SIGTERM);
            }
        } else if (sig == SIGQUIT) {
            if (!stopping) {
                log_info("master: %s, stopping gracefully", strsignal(sig));
                stopping = 1;
                deadline = util_now_ms() + MASTER_GRACE_MS;
                master_signal_all(&m, SIGQUIT);
            }
        } else if ((sig == SIGHUP || sig == SIGUSR2) && !stopping)
            master_reload(&m);
        else if (sig == SIGUSR1) {
            log_reopen();
            master_signal_all(&m, SIGUSR1);
            log_info("master: SIGUSR1, logs reopened");
        } else if (sig > 0 && sig != SIGCHLD && sig != SIGHUP &&
            sig != SIGUSR2)
            log_warn("master: signal %d (%s) ignored", sig, strsignal(sig));
    }
    log_info("master %ld: stopped", (long)getpid());
    log_flush();
    scoreboard_unmap(&m.shm);
    return 0;
}
