/*
 * scoreboard.c -- the pool's shared segment, as the service uses it.
 *
 * shm.c lays the segment out and manages its tables; this file maps it
 * (MAP_SHARED, before the master forks, so every worker sees the same
 * pages), sizes it from the configuration, and reads the scoreboard at its
 * front: one slot per worker, with the worker's pid, what it is doing and
 * since when, plus the pool's counters.  The master writes the pids; each
 * worker writes its own slot; /metrics and /status read them all.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>

#include "service.h"

/* Whether a writer recorded in a shared entry still runs (see shm.c). */
static int
scoreboard_pid_alive(int32_t pid)
{
    return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH);
}

/* The pool's key filter (keyfilter.c) and ring of large rule sets
 * (arena.c); a process maps one pool. */
static struct keyfilter scoreboard_filter;
static size_t scoreboard_filter_size;
static struct arena scoreboard_arena;
static size_t scoreboard_arena_size;

/* A shared mapping of its own of size bytes, or NULL (logged). */
static void *
scoreboard_region(size_t size, const char *what)
{
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE,
        MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    if (base == MAP_FAILED) {
        log_error("mmap of %zu bytes for the %s: %s", size, what,
            strerror(errno));
        return NULL;
    }
    return base;
}

int
scoreboard_map(struct shm *m, const struct rl_config *cfg)
{
    size_t counts[SHM_NTABLES], size;
    void *base;

    counts[SHM_KEYS] = (size_t)cfg->key_cache_size;
    counts[SHM_UNKNOWN] = (size_t)cfg->key_cache_negative_size;
    counts[SHM_TENANTS] = (size_t)cfg->rule_cache_size;
    counts[SHM_OVERLIMIT] = (size_t)cfg->overlimit_cache_size;
    size = shm_size(sizeof(struct scoreboard), counts);
    /* Fresh anonymous pages read as zero and cost nothing until touched. */
    base = mmap(NULL, size, PROT_READ | PROT_WRITE,
        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        log_error("mmap of %zu bytes for the shared segment: %s", size,
            strerror(errno));
        return -1;
    }
    if (shm_init(m, base, size, sizeof(struct scoreboard), counts) == -1) {
        munmap(base, size);
        log_error("shared segment: layout failed");
        return -1;
    }
    m->pid_alive = scoreboard_pid_alive;
    log_debug("shared segment: %zu bytes (%zu keys, %zu unknown keys, %zu "
        "tenants)", size, counts[SHM_KEYS], counts[SHM_UNKNOWN],
        counts[SHM_TENANTS]);
    /* The filter of active keys: a mapping of its own, so that its size
     * does not change the segment's layout. */
    if ((size = keyfilter_size((size_t)cfg->key_filter_mb << 20)) > 0) {
        if ((base = scoreboard_region(size, "key filter")) == NULL) {
            scoreboard_unmap(m);
            return -1;
        }
        keyfilter_init(&scoreboard_filter, base, size);
        scoreboard_filter_size = size;
        m->keyfilter = &scoreboard_filter;
    }
    if ((size = arena_size((size_t)cfg->rule_cache_shared_mb << 20)) > 0) {
        if ((base = scoreboard_region(size, "shared rules")) == NULL) {
            scoreboard_unmap(m);
            return -1;
        }
        arena_init(&scoreboard_arena, base, size);
        scoreboard_arena_size = size;
        m->arena = &scoreboard_arena;
    }
    return 0;
}

void
scoreboard_unmap(struct shm *m)
{
    if (m->keyfilter != NULL && m->keyfilter->base != NULL) {
        munmap(m->keyfilter->base, scoreboard_filter_size);
        m->keyfilter->base = NULL;
        m->keyfilter = NULL;
    }
    if (m->arena != NULL && m->arena->base != NULL) {
        munmap(m->arena->base, scoreboard_arena_size);
        m->arena->base = NULL;
        m->arena = NULL;
    }
    if (m->base != NULL)
        munmap(m->base, shm_total(m));
    memset(m, 0, sizeof(*m));
}

void
scoreboard_count(const struct scoreboard *b, unsigned long *live,
    unsigned long *active)
{
    int i, st;

    *live = *active = 0;
    if (b->workers == 0) {
        /* No master: this process is the pool, and it is on a request. */
        *live = *active = 1;
        return;
    }
    for (i = 0; i < RL_MAX_WORKERS; i++) {
        if (b->slots[i].pid == 0)
            continue;
        (*live)++;
        st = b->slots[i].state;
        *active += st == SLOT_READING || st == SLOT_BUSY;
    }
}

void
scoreboard_exited(struct scoreboard *b, const struct scoreboard_slot *s,
    int status)
{
    int cause;

    if (WIFSIGNALED(status))
        cause = s->leaving == EXIT_TIMEOUT ? EXIT_TIMEOUT : EXIT_CRASH;
    else if (WEXITSTATUS(status) != 0)
        cause = EXIT_CRASH;
    else if (s->leaving >= 0 && s->leaving < EXIT_N)
        cause = s->leaving;
    else
        cause = EXIT_STOPPED;
    __atomic_add_fetch(&b->stats.exits[cause], 1, __ATOMIC_RELAXED);
}

/* A Unix listening socket's queue, from the kernel's socket diagnostics
 * (the same numbers `ss -xl` shows): pending connections and backlog. */
static int
scoreboard_unix_queue(int fd, unsigned long *queue, unsigned long *backlog)
{
    struct {
        struct nlmsghdr nlh;
        struct unix_diag_req r;
    } req;
    union {
        struct nlmsghdr nlh;
        char bytes[4096];
    } ans;
    struct unix_diag_msg *msg;
    struct unix_diag_rqlen *rq;
    struct rtattr *rta;
    struct stat sb;
    ssize_t n;
    int nl, len, found = -1;

    if (fstat(fd, &sb) == -1 ||
        (nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC,
        NETLINK_SOCK_DIAG)) == -1)
        return -1;
    memset(&req, 0, sizeof(req));
    req.nlh.nlmsg_len = sizeof(req);
    req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.nlh.nlmsg_flags = NLM_F_REQUEST;
    req.r.sdiag_family = AF_UNIX;
    req.r.udiag_states = ~0u;
    req.r.udiag_ino = (uint32_t)sb.st_ino;
    req.r.udiag_show = UDIAG_SHOW_RQLEN;
    req.r.udiag_cookie[0] = req.r.udiag_cookie[1] = ~0u;
    if (send(nl, &req, sizeof(req), 0) != (ssize_t)sizeof(req) ||
        (n = recv(nl, &ans, sizeof(ans), 0)) < (ssize_t)NLMSG_LENGTH(
        sizeof(*msg)) || !NLMSG_OK(&ans.nlh, (size_t)n) ||
        ans.nlh.nlmsg_type != SOCK_DIAG_BY_FAMILY) {
        close(nl);
        return -1;
    }
    close(nl);
    msg = NLMSG_DATA(&ans.nlh);
    rta = (struct rtattr *)(msg + 1);
    len = (int)(ans.nlh.nlmsg_len - NLMSG_LENGTH(sizeof(*msg)));
    for (; RTA_OK(rta, len); rta = RTA_NEXT(rta, len))
        if (rta->rta_type == UNIX_DIAG_RQLEN &&
            RTA_PAYLOAD(rta) >= sizeof(*rq)) {
            rq = RTA_DATA(rta);
            *queue = rq->udiag_rqueue;
            *backlog = rq->udiag_wqueue;
            found = 0;
        }
    return found;
}

int
scoreboard_listen_queue(int listen_fd, unsigned long *queue,
    unsigned long *backlog)
{
    struct sockaddr_storage ss;
    struct tcp_info ti;
    socklen_t len = sizeof(ss);

    *queue = 0;
    *backlog = 0;
    if (listen_fd < 0 || getsockname(listen_fd, (struct sockaddr *)&ss,
        &len) == -1)
        return -1;
    if (ss.ss_family == AF_UNIX)
        return scoreboard_unix_queue(listen_fd, queue, backlog);
    len = sizeof(ti);
    memset(&ti, 0, sizeof(ti));
    if (getsockopt(listen_fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == -1)
        return -1;
    /* On a listening socket: the accept queue and its bound. */
    *queue = ti.tcpi_unacked;
    *backlog = ti.tcpi_sacked;
    return 0;
}

static void
scoreboard_max(uint64_t *p, uint64_t v)
{
    uint64_t was = __atomic_load_n(p, __ATOMIC_RELAXED);

    while (v > was && !__atomic_compare_exchange_n(p, &was, v, 0,
        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

void
scoreboard_sample(struct scoreboard *b, int listen_fd, int64_t now_ms)
{
    static int64_t last_ms;
    unsigned long live, active, queue, backlog;

    if (now_ms - last_ms < 1000)
        return;
    last_ms = now_ms;
    scoreboard_count(b, &live, &active);
    scoreboard_max(&b->stats.max_active, active);
    if (b->workers > 0 && active >= (unsigned long)b->workers)
        __atomic_add_fetch(&b->stats.max_children_reached, 1,
            __ATOMIC_RELAXED);
    if (scoreboard_listen_queue(listen_fd, &queue, &backlog) == 0) {
        __atomic_store_n(&b->stats.listen_queue, queue, __ATOMIC_RELAXED);
        __atomic_store_n(&b->stats.listen_queue_len, backlog,
            __ATOMIC_RELAXED);
        scoreboard_max(&b->stats.max_listen_queue, queue);
    }
}
