/*
 * release_main.c -- ratelimit-release: frees the leases of requests that
 * ended, from the lines the web server logs at the end of each request.
 *
 * In authorizer mode the client never sees its lease: the web server took
 * it when it asked ratelimit-fcgi, and the web server's own end-of-request
 * hook, its access log, is what hands it back.  nginx writes the line to
 * a syslog Unix socket (access_log syslog:server=unix:PATH), which this
 * program binds (-s); lighttpd and Apache start it as a piped access log
 * and write lines to its stdin.  Each line (release.h) names the lease
 * and maybe the request's actual cost; the lease is released through the
 * service's Redis client with the service's configuration (no API key:
 * whoever can write to the socket or the pipe can free leases).
 *
 * One process, one loop: read a line, release, and retry what Redis could
 * not take, a bounded number of times (-r) with a growing pause, after
 * which the lease is left to its ttl, and the log says so.  Bad lines are
 * counted; the first of each interval (-i) is logged with its reason, the
 * counts once an interval when they moved.  Main reads as a checklist:
 * flags, configuration, log, socket, the configuration's "user" when
 * started as root, loop.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "lease.h"
#include "ratelimit.h"
#include "redis.h"
#include "release.h"

#define DEFAULT_CONFIG "/etc/ratelimit-fcgi/ratelimit.conf"
/* Releases waiting for another try, at most; more are left to their ttl. */
#define RELEASE_PENDING_MAX 4096
/* The first retry waits this long, each next one twice as long, up to
 * RELEASE_PAUSE_MAX_MS. */
#define RELEASE_PAUSE_MS 50
#define RELEASE_PAUSE_MAX_MS 2000

static void
usage(FILE *fp)
{
    fprintf(fp,
"Usage: ratelimit-release [-c FILE] [-s PATH [-m MODE] [-g GROUP]]\n"
"                         [-r TRIES] [-i SECONDS] [-n]\n"
"       ratelimit-release -h | -v\n"
"Frees the leases of requests that ended (concurrency limits in authorizer\n"
"mode), from the line the web server logs at the end of each request:\n"
"    lease=ID [cost=N] [NAME=VALUE...]\n"
"\"lease=-\" (no lease) is skipped; cost (the actual cost, settled on the\n"
"rate limits charged at the check) is optional.  An RFC 3164 syslog header\n"
"before the fields is skipped.\n"
"  -c, --config FILE    the service's configuration, for Redis and the log\n"
"                       (default " DEFAULT_CONFIG ")\n"
"  -s, --socket PATH    read datagrams on this Unix socket (nginx:\n"
"                       access_log syslog:server=unix:PATH); without it,\n"
"                       lines on stdin (lighttpd, Apache: a piped log)\n"
"  -m, --socket-mode M  the socket's mode, octal (default 0660)\n"
"  -g, --socket-group G the socket's group: the web server's (www-data)\n"
"  -r, --retries N      tries of a release Redis cannot take now, 1 to 100\n"
"                       (default 8, over about 5 s); then the lease is left\n"
"                       to its ttl\n"
"  -i, --interval S     the counts are logged every S seconds when they\n"
"                       moved, with the first bad line of each (default 60)\n"
"  -n, --dry-run        no Redis: print what each line means and release\n"
"                       nothing (to try a web server's log format)\n"
"  -h, --help           show this help and exit\n"
"  -v, --version        show the version and exit\n"
"Exit status: 0 at the end of stdin or on SIGTERM, 1 on a bad option or\n"
"configuration, or a socket that cannot be bound.\n"
"Configurations for nginx, lighttpd and Apache: man ratelimit-release\n");
}

struct release_pending {
    char lease[RELEASE_LEASE_MAX + 1];
    long long cost;
    int tries;                  /* made so far */
    int64_t due_ms;             /* the next one, util_now_ms() */
};

struct release_counts {
    unsigned long released, gone, none, bad, retried, abandoned, bad_cost;
};

struct release_ctx {
    struct rl_config cfg;
    struct redis_store rs;
    struct rl_counters counters;
    int dry_run;
    int tries;                  /* -r */
    long interval_ms;           /* -i */
    struct release_pending *pending;
    int npending;
    struct release_counts n, logged;
    int64_t report_at_ms;
    int bad_logged;             /* a bad line logged in this interval */
};

static volatile sig_atomic_t release_stop;

static void
release_on_signal(int sig)
{
    (void)sig;
    release_stop = 1;
}

enum { RELEASE_DONE = 0, RELEASE_GONE = 1, RELEASE_BAD = 2,
    RELEASE_AGAIN = -1 };

/*
 * One release through the service's Redis client (lease_call.c):
 * RELEASE_DONE, or RELEASE_GONE when there is no such lease (released
 * already, expired, never taken), RELEASE_BAD when the id has not the
 * shape of a lease id, or RELEASE_AGAIN when Redis could not take it now
 * (unreachable, or an error answered).
 */
static int
release_one(struct release_ctx *rc, const char *lease, long long cost)
{
    struct lease_outcome out;

    switch (lease_release(&rc->rs, lease, strlen(lease), cost, NULL, &out)) {
    case LEASE_DONE:
        return RELEASE_DONE;
    case LEASE_UNKNOWN:
    case LEASE_RELEASED:
    case LEASE_EXPIRED:
        log_debug("lease %s: %s", lease, lease_result_name(out.result));
        return RELEASE_GONE;
    case LEASE_BAD_ID:
        return RELEASE_BAD;
    case LEASE_UNAVAILABLE:
    case LEASE_SCRIPT_ERROR:
    default:
        log_debug("lease %s: %s (%s)", lease, lease_result_name(out.result),
            rc->rs.error);
        return RELEASE_AGAIN;
    }
}

static void
release_report(struct release_ctx *rc, int64_t now_ms, int force)
{
    if (!force && now_ms < rc->report_at_ms)
        return;
    rc->report_at_ms = now_ms + rc->interval_ms;
    rc->bad_logged = 0;
    if (memcmp(&rc->n, &rc->logged, sizeof(rc->n)) == 0)
        return;
    rc->logged = rc->n;
    log_info("released %lu, unknown or expired %lu, no lease %lu, bad "
        "lines %lu, bad costs %lu, retries %lu, left to their ttl %lu; "
        "waiting for a retry %d", rc->n.released, rc->n.gone, rc->n.none,
        rc->n.bad, rc->n.bad_cost, rc->n.retried, rc->n.abandoned,
        rc->npending);
}

/* Keeps a release that Redis could not take for another try, or gives
 * it up to the lease's ttl. */
static void
release_defer(struct release_ctx *rc, const char *lease, long long cost,
    int tries, int64_t now_ms)
{
    struct release_pending *p;
    long pause;

    if (tries >= rc->tries || rc->npending == RELEASE_PENDING_MAX) {
        rc->n.abandoned++;
        log_warn("lease %s: not released after %d tries (%s): left to "
            "its ttl", lease, tries, tries >= rc->tries ? "Redis "
            "unavailable" : "too many waiting");
        return;
    }
    pause = RELEASE_PAUSE_MS;
    for (int i = 1; i < tries && pause < RELEASE_PAUSE_MAX_MS; i++)
        pause *= 2;
    if (pause > RELEASE_PAUSE_MAX_MS)
        pause = RELEASE_PAUSE_MAX_MS;
    p = &rc->pending[rc->npending++];
    util_copy(p->lease, sizeof(p->lease), lease);
    p->cost = cost;
    p->tries = tries;
    p->due_ms = now_ms + pause;
}

static void
release_try(struct release_ctx *rc, const char *lease, long long cost,
    int tries)
{
    switch (release_one(rc, lease, cost)) {
    case RELEASE_DONE:
        rc->n.released++;
        break;
    case RELEASE_GONE:
        rc->n.gone++;
        break;
    case RELEASE_BAD:
        rc->n.bad++;
        if (!rc->bad_logged) {
            rc->bad_logged = 1;
            log_warn("bad line (lease %s is not a lease id), the first of "
                "this interval", lease);
        }
        break;
    default:
        release_defer(rc, lease, cost, tries + 1, util_now_ms());
        break;
    }
}

/* Retries what is due.  Returns the milliseconds until the next one is
 * due, or -1 when none is waiting. */
static long
release_retry_due(struct release_ctx *rc)
{
    struct release_pending p;
    int64_t now = util_now_ms(), next = -1;
    int i = 0;

    while (i < rc->npending) {
        if (rc->pending[i].due_ms > now) {
            if (next == -1 || rc->pending[i].due_ms < next)
                next = rc->pending[i].due_ms;
            i++;
            continue;
        }
        p = rc->pending[i];
        rc->pending[i] = rc->pending[--rc->npending];
        rc->n.retried++;
        release_try(rc, p.lease, p.cost, p.tries);
        now = util_now_ms();
        /* What release_try queued again is at the end, due later. */
    }
    return next == -1 ? -1 : next > now ? (long)(next - now) : 0;
}

/*
 * Started as root (as lighttpd and Apache start a piped log) with "user"
 * set in the configuration, switches to that user and "group" (or the
 * user's primary group) for good, once the log and the socket are open.
 * Returns 0, or -1 with the reason logged.
 */
static int
release_drop_privileges(const struct rl_config *cfg)
{
    struct passwd *pw;
    struct group *gr;
    gid_t gid;

    if (geteuid() != 0)
        return 0;
    if (cfg->user[0] == '\0') {
        log_warn("running as root: set \"user\" in the configuration to "
            "the account to run as");
        return 0;
    }
    if ((pw = getpwnam(cfg->user)) == NULL) {
        log_error("no user %s", cfg->user);
        return -1;
    }
    gid = pw->pw_gid;
    if (cfg->group[0] != '\0') {
        if ((gr = getgrnam(cfg->group)) == NULL) {
            log_error("no group %s", cfg->group);
            return -1;
        }
        gid = gr->gr_gid;
    }
    if (initgroups(cfg->user, gid) == -1 || setgid(gid) == -1 ||
        setuid(pw->pw_uid) == -1) {
        log_error("cannot switch to user %s: %s", cfg->user,
            strerror(errno));
        return -1;
    }
    if (pw->pw_uid != 0 && (setuid(0) != -1 || geteuid() == 0)) {
        log_error("switched to user %s, but root can be regained: "
            "refusing to run", cfg->user);
        return -1;
    }
    return 0;
}

/* One line or datagram. */
static void
release_line(struct release_ctx *rc, const char *text, size_t len)
{
    struct release_line l;
    char shown[256];

    switch (release_line_parse(text, len, &l)) {
    case RELEASE_LINE_NONE:
        rc->n.none++;
        if (rc->dry_run)
            printf("no lease\n");
        return;
    case RELEASE_LINE_BAD:
        rc->n.bad++;
        if (rc->dry_run)
            printf("bad line: %s\n", l.reason);
        if (!rc->bad_logged) {
            rc->bad_logged = 1;
            util_escape(shown, sizeof(shown), text,
                len < 160 ? len : 160);
            log_warn("bad line (%s), the first of this interval: \"%s%s\"",
                l.reason, shown, len > 160 ? "..." : "");
        }
        return;
    case RELEASE_LINE_LEASE:
        break;
    }
    if (l.reason != NULL) {
        rc->n.bad_cost++;
        log_warn("lease %s: %s", l.lease, l.reason);
    }
    if (rc->dry_run) {
        if (l.cost != -1)
            printf("release %s cost %lld\n", l.lease, l.cost);
        else
            printf("release %s\n", l.lease);
        rc->n.released++;
        return;
    }
    release_try(rc, l.lease, l.cost, 0);
}

/*
 * Binds the datagram socket at path, mode and group as asked.  A stale
 * socket file (nobody bound to it) is replaced; one in use, or any other
 * kind of file, is refused.  Returns the descriptor, or -1 with the
 * reason logged.
 */
static int
release_bind(const char *path, mode_t mode, const char *group)
{
    struct sockaddr_un sa;
    struct stat st;
    struct group *gr = NULL;
    int fd, probe;

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        log_error("socket %s: the path is longer than %zu bytes", path,
            sizeof(sa.sun_path) - 1);
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path));
    if (group != NULL && (gr = getgrnam(group)) == NULL) {
        log_error("socket %s: no group %s", path, group);
        return -1;
    }
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            log_error("socket %s: a file that is not a socket is there; "
                "left alone", path);
            return -1;
        }
        probe = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (probe != -1 && connect(probe, (struct sockaddr *)&sa,
            sizeof(sa)) == 0) {
            close(probe);
            log_error("socket %s: in use by a running reader", path);
            return -1;
        }
        if (probe != -1)
            close(probe);
        (void)unlink(path);
    }
    if ((fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) == -1 ||
        bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == -1) {
        log_error("socket %s: %s", path, strerror(errno));
        if (fd != -1)
            close(fd);
        return -1;
    }
    if ((gr != NULL && chown(path, (uid_t)-1, gr->gr_gid) == -1) ||
        chmod(path, mode) == -1) {
        log_error("socket %s: %s", path, strerror(errno));
        close(fd);
        (void)unlink(path);
        return -1;
    }
    return fd;
}

/* The loop over datagrams (fd a socket) or stdin's lines, until SIGTERM
 * or the end of stdin, and then until the retries are done or given up.
 * Lines longer than RELEASE_LINE_MAX are bad lines, and so is a datagram
 * cut short. */
static void
release_loop(struct release_ctx *rc, int fd, int is_socket)
{
    static char buf[RELEASE_LINE_MAX + 2];
    size_t have = 0;
    int skipping = 0, eof = 0;
    struct pollfd pfd;
    long wait_ms, due;
    ssize_t n;
    char *nl;

    for (;;) {
        due = release_retry_due(rc);
        release_report(rc, util_now_ms(), 0);
        if (release_stop || (eof && rc->npending == 0))
            break;
        wait_ms = rc->report_at_ms - util_now_ms();
        if (wait_ms < 0)
            wait_ms = 0;
        if (due != -1 && due < wait_ms)
            wait_ms = due;
        pfd.fd = fd;
        pfd.events = POLLIN;
        pfd.revents = 0;
        if (eof) {
            /* stdin ended: only the retries are left. */
            if (wait_ms > 0)
                (void)poll(NULL, 0, (int)wait_ms);
            continue;
        }
        if (poll(&pfd, 1, (int)wait_ms) <= 0)
            continue;
        if (is_socket) {
            n = recv(fd, buf, RELEASE_LINE_MAX + 1, MSG_TRUNC);
            if (n == -1)
                continue;
            /* MSG_TRUNC: n is the datagram's length, cut or not. */
            release_line(rc, buf, (size_t)n > RELEASE_LINE_MAX + 1 ?
                RELEASE_LINE_MAX + 1 : (size_t)n);
            continue;
        }
        n = read(fd, buf + have, sizeof(buf) - have);
        if (n == -1 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0) {
            if (have > 0 && !skipping)
                release_line(rc, buf, have);
            have = 0;
            eof = 1;
            continue;
        }
        have += (size_t)n;
        while ((nl = memchr(buf, '\n', have)) != NULL) {
            size_t len = (size_t)(nl - buf) + 1;

            if (skipping)
                skipping = 0;       /* the end of a line too long */
            else
                release_line(rc, buf, len);
            memmove(buf, buf + len, have - len);
            have -= len;
        }
        if (have == sizeof(buf)) {
            /* No newline in RELEASE_LINE_MAX + 2 bytes: a bad line; the
             * rest of it, up to its newline, is skipped. */
            if (!skipping)
                release_line(rc, buf, have);
            skipping = 1;
            have = 0;
        }
    }
    if (rc->npending > 0) {
        log_warn("stopping with %d releases waiting for a retry: left to "
            "their ttl", rc->npending);
        rc->n.abandoned += (unsigned long)rc->npending;
        rc->npending = 0;
    }
    release_report(rc, util_now_ms(), 1);
}

int
main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "config", required_argument, NULL, 'c' },
        { "socket", required_argument, NULL, 's' },
        { "socket-mode", required_argument, NULL, 'm' },
        { "socket-group", required_argument, NULL, 'g' },
        { "retries", required_argument, NULL, 'r' },
        { "interval", required_argument, NULL, 'i' },
        { "dry-run", no_argument, NULL, 'n' },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'v' },
        { NULL, 0, NULL, 0 }
    };
    static struct release_ctx rc;
    const char *path = DEFAULT_CONFIG, *sock = NULL, *group = NULL;
    char err[1024], *end;
    struct sigaction sa;
    long mode = 0660, v;
    int c, fd, is_socket, type;
    socklen_t typelen = sizeof(type);

    rc.tries = 8;
    rc.interval_ms = 60000;
    while ((c = getopt_long(argc, argv, "c:s:m:g:r:i:nhv", longopts,
        NULL)) != -1) {
        switch (c) {
        case 'c':
            path = optarg;
            break;
        case 's':
            sock = optarg;
            break;
        case 'm':
            errno = 0;
            mode = strtol(optarg, &end, 8);
            if (errno != 0 || *end != '\0' || end == optarg || mode < 0 ||
                mode > 0777) {
                fprintf(stderr, "ratelimit-release: --socket-mode %s: not "
                    "an octal mode from 0 to 0777\n", optarg);
                return 1;
            }
            break;
        case 'g':
            group = optarg;
            break;
        case 'r':
        case 'i':
            errno = 0;
            v = strtol(optarg, &end, 10);
            if (errno != 0 || *end != '\0' || end == optarg || v < 1 ||
                v > (c == 'r' ? 100 : 86400)) {
                fprintf(stderr, "ratelimit-release: %s %s: not a whole "
                    "number from 1 to %d\n", c == 'r' ? "--retries" :
                    "--interval", optarg, c == 'r' ? 100 : 86400);
                return 1;
            }
            if (c == 'r')
                rc.tries = (int)v;
            else
                rc.interval_ms = v * 1000;
            break;
        case 'n':
            rc.dry_run = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'v':
            printf("ratelimit-release %s\n", RL_VERSION);
            return 0;
        default:
            fprintf(stderr, "Try 'ratelimit-release --help'.\n");
            return 1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ratelimit-release: unexpected argument '%s'\n"
            "Try 'ratelimit-release --help'.\n", argv[optind]);
        return 1;
    }

    config_defaults(&rc.cfg);
    if (!rc.dry_run &&
        config_load(&rc.cfg, path, err, sizeof(err)) == -1) {
        fprintf(stderr, "ratelimit-release: %s\n", err);
        return 1;
    }
    if (log_init("ratelimit-release", rc.dry_run ? "stderr" :
        rc.cfg.log_target, rc.cfg.log_level) == -1) {
        fprintf(stderr, "ratelimit-release: log %s: %s\n",
            rc.cfg.log_target, strerror(errno));
        return 1;
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = release_on_signal;
    sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGTERM, &sa, NULL);
    (void)sigaction(SIGINT, &sa, NULL);
    /* A web server that restarts its loggers ends them with SIGTERM or
     * closes the pipe; a SIGHUP is not meant for us. */
    sa.sa_handler = SIG_IGN;
    (void)sigaction(SIGHUP, &sa, NULL);
    (void)sigaction(SIGPIPE, &sa, NULL);

    /* Without -s, stdin: lines from a pipe, or datagrams when it is a
     * datagram socket (systemd's ListenDatagram= with
     * StandardInput=socket). */
    fd = STDIN_FILENO;
    is_socket = 0;
    if (sock != NULL) {
        if ((fd = release_bind(sock, (mode_t)mode, group)) == -1)
            return 1;
        is_socket = 1;
    } else if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &typelen) == 0 &&
        type == SOCK_DGRAM)
        is_socket = 1;
    if (!rc.dry_run && release_drop_privileges(&rc.cfg) == -1)
        return 1;
    if ((rc.pending = calloc(RELEASE_PENDING_MAX,
        sizeof(*rc.pending))) == NULL) {
        log_error("out of memory");
        return 1;
    }
    if (!rc.dry_run)
        redis_store_init(&rc.rs, &rc.cfg, &rc.counters);
    if (rc.dry_run)
        setvbuf(stdout, NULL, _IOLBF, 0);
    log_info("reading %s%s (configuration %s, %d tries a release)",
        sock != NULL ? "datagrams on " : is_socket ? "datagrams on stdin" :
        "lines on stdin", sock != NULL ? sock : "", rc.dry_run ?
        "none: dry run" : path, rc.tries);
    rc.report_at_ms = util_now_ms() + rc.interval_ms;

    release_loop(&rc, fd, is_socket);

    if (!rc.dry_run)
        redis_store_close(&rc.rs);
    if (sock != NULL)
        (void)unlink(sock);
    free(rc.pending);
    log_flush();
    return 0;
}
