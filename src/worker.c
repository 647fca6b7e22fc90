/*
 * worker.c -- one worker: accepting FastCGI connections and answering.
 *
 * The worker opens its own Redis and PostgreSQL connections (lazily, after
 * fork; nothing is inherited from the master).  It accepts connections
 * itself rather than inside libfcgi, so that every connection has a
 * deadline: a request must arrive whole within fcgi_read_timeout_ms of the
 * accept (or, on a kept connection, of its first byte), and a kept
 * connection may idle fcgi_keepalive_timeout_ms between requests.  Before
 * libfcgi reads anything the worker peeks at the records and lets fcgi.c
 * judge them, so malformed or hostile records (the ones that make
 * Debian's libfcgi abort, management records that leak) never reach it.
 * libfcgi then parses the request, which is already waiting in the socket
 * buffer, api.c answers it and the answer is written with FCGX_PutStr.
 *
 * A connection whose request is not whole yet does not hold the worker,
 * and neither does a kept-alive connection (FCGI_KEEP_CONN, nginx's
 * upstream keepalive) between its requests: it waits in the worker's
 * epoll set (edge-triggered, one event for each arrival) among up to
 * worker_connections such connections, and the worker goes on accepting
 * and answering others, whichever has a whole request.  A waiting
 * connection is dropped at its deadline or, when all the entries are
 * taken and a new connection needs one, an idle kept one goes first (of
 * those, the one that has carried the fewest requests, then the one idle
 * longest: a web server's busy connections stay, a silent client's go),
 * else the one that has waited longest for the rest of a request.
 * So a peer that sends half a request, or keeps connections and goes
 * silent, costs entries and descriptors, never a worker, and everybody
 * else is answered at once.  Web servers send a request in one write, so
 * in practice the first peek after accept finds it whole.
 *
 * Closing a kept connection races with the web server, which may be
 * sending its next request on it: the request would be lost (nginx does
 * not retry a POST on another connection once it has sent it).  So an
 * idle kept connection is only closed when nothing waits on it: a worker
 * that finds the start of a request there first answers it (see
 * worker_conn_drop_idle).  And a worker that leaves while the pool goes
 * on (a reload, max_requests, max_worker_rss_mb) closes none: it hands
 * its kept connections to the others, passing the descriptors over the
 * pool's hand-off socket (a datagram socket pair the master made before
 * forking), so the web server never sees them close; a request it sends
 * meanwhile waits in the socket until the worker that takes the
 * connection looks at it.
 *
 * The scoreboard slot says what the worker is doing (idle, reading,
 * answering) and since when, so that the master can kill a worker stuck
 * past a deadline.  Between requests, and at least once a second, the
 * worker does its housekeeping (service_tick: PostgreSQL reconnect and
 * notifications).  It leaves after max_requests (postponed while
 * PostgreSQL is unreachable, since a new worker could not learn anything
 * new) or when its memory passes max_worker_rss_mb.
 *
 * Signals: SIGQUIT asks for a graceful stop, and so does RL_SIG_MASTER_GONE,
 * sent by the kernel when the master dies; SIGUSR1 asks for the logs to be
 * reopened; SIGUSR2, from the master in a reload, asks the worker to leave
 * while the pool goes on, as after max_requests (its kept connections go
 * to the others, waiting while the hand-off queue is full, where a stop
 * closes them).  They stay blocked and are read from a signalfd that sits in
 * the worker's epoll set, so a signal never interrupts a read or write in
 * the middle of a request (libfcgi does not retry one) and blocking them
 * costs no system call per request: the requests under way complete, then
 * the worker leaves.  In a pool SIGTERM and SIGINT are the fast stop, as in php-fpm:
 * their default action ends the worker at once, request or not.  A lone
 * process (workers = 0) treats them as SIGQUIT.
 *
 * The PostgreSQL socket sits in the same epoll set: a change notification
 * (or a broken connection) marks it readable, and only then does the next
 * request read it (pg_store_poll).
 */
#define _GNU_SOURCE             /* accept4 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcgiapp.h>

#include "service.h"

/* Bytes of an oversized body we read and drop before giving up on it. */
#define WORKER_DRAIN_MAX (16L * 1024 * 1024)
#define WORKER_TICK_MS 1000         /* housekeeping when idle */
#define WORKER_ACCEPT_PAUSE_MS 100  /* after EMFILE, ENFILE */

/* What an epoll event is about (the low byte of its data). */
enum {
    WORKER_EV_LISTEN = 0, WORKER_EV_SIGNAL, WORKER_EV_PG, WORKER_EV_HANDOFF,
    WORKER_EV_CONN
};
#define WORKER_EVENTS 16            /* events taken per epoll_wait */

/* An answer this small, the first on its connection, goes into an empty
 * socket buffer and cannot block; a larger one, or one on a kept
 * connection (whose peer may not be reading), is written under
 * SO_SNDTIMEO. */
#define WORKER_UNTIMED_MAX 4096

/* Kept connections a worker takes from the hand-off socket per wake-up
 * (a few, so that they spread over the pool). */
#define WORKER_HANDOFF_BATCH 4

/* How soon a worker that leaves while the pool goes on tries again to
 * hand off a kept connection when the hand-off socket's queue is full
 * (Linux queues net.unix.max_dgram_qlen datagrams, 10 by default, and a
 * worker may keep more connections than that). */
#define WORKER_HANDOFF_RETRY_MS 5

/* How often a busy worker looks at its memory (max_worker_rss_mb). */
#define WORKER_RSS_CHECK_MS 100

/* What goes with a connection's descriptor over the hand-off socket: a
 * kept one's state, or a new one's (fresh) acceptance time. */
struct worker_handoff {
    unsigned long requests;
    int64_t accepted_ms;        /* monotonic, the same clock in each worker */
    unsigned char tcp;
    unsigned char timed;
    unsigned char fresh;        /* just accepted, no request answered yet */
};

/* A connection the worker has accepted and waits on for a whole request
 * (the first, or the next on a kept connection), without sitting on it. */
struct worker_conn {
    int fd;                     /* -1: a free entry */
    int tcp;
    int watched;                /* in the epoll set */
    int kept;                   /* it has carried a request (FCGI_KEEP_CONN) */
    unsigned long requests;     /* requests it has carried */
    int timed;                  /* SO_SNDTIMEO is set on it */
    int started;                /* its request is under way: accepted, or
                                   its first byte has come */
    int64_t request_ms;         /* when that request started (monotonic) */
    int64_t deadline_ms;        /* dropped then, unless a request is whole */
};

struct worker {
    const struct rl_config *cfg;
    int listen_fd;
    int epfd;
    struct scoreboard_slot *slot;
    struct scoreboard *board;
    struct service svc;
    struct rl_response resp;
    FCGX_Request fr;
    int sigfd;                  /* the blocked signals, to read */
    int handoff_send;           /* the pool's hand-off socket pair, or -1 */
    int handoff_recv;
    int handoff_watched;        /* handoff_recv is in the epoll set */
    sigset_t oldmask;           /* the signal mask before the worker's */
    int pg_fd;                  /* the PostgreSQL socket watched, or -1 */
    unsigned pg_serial;         /* its connection's serial */
    struct worker_conn *conns;  /* worker_connections entries */
    int conns_max;
    int nconns;                 /* entries in use */
    int leaving;                /* no more connections taken */
    unsigned long served;
    int64_t rss_checked_ms;     /* when max_worker_rss_mb was last checked */
    int postponed;              /* recycling put off: PostgreSQL is down */
    struct addr_net web_servers[32];
    int nweb;
    char *body;
    /* The read-ahead window: a whole request's parameters and a body of
     * the usual size. */
    unsigned char peek[FCGI_PARAMS_MAX + 16384];
};

static volatile sig_atomic_t worker_stop;
/* The master's SIGUSR2 (a reload): leave while the pool goes on. */
static volatile sig_atomic_t worker_retire;
static volatile sig_atomic_t worker_orphaned;
static volatile sig_atomic_t worker_reopen;

static void
worker_on_reopen(int sig)
{
    (void)sig;
    worker_reopen = 1;
}

static void
worker_on_stop(int sig)
{
    (void)sig;
    worker_stop = 1;
}

/* The master died: leave like on a stop, then see about replacing it. */
static void
worker_on_master_gone(int sig)
{
    (void)sig;
    worker_orphaned = 1;
    worker_stop = 1;
}

static int
worker_signals(struct worker *w, int pooled)
{
    struct sigaction sa;
    sigset_t set;

    /* The handlers only run if a signal comes before it is blocked below
     * or after the worker has unblocked it on its way out. */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = worker_on_stop;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    sigaction(SIGQUIT, &sa, NULL);
    if (pooled)
        sa.sa_handler = SIG_DFL;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = worker_on_master_gone;
    sigaction(RL_SIG_MASTER_GONE, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGPIPE, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    /* In a pool SIGUSR2 comes from the master (a reload: see below);
     * alone, the process ignores it as it does SIGHUP. */
    sigaction(SIGUSR2, &sa, NULL);
    /* The master passes SIGUSR1 on: the logs are reopened between
     * requests. */
    sa.sa_handler = worker_on_reopen;
    sigaction(SIGUSR1, &sa, NULL);
    sigemptyset(&set);
    if (!pooled) {
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
    }
    sigaddset(&set, SIGQUIT);
    sigaddset(&set, RL_SIG_MASTER_GONE);
    sigaddset(&set, SIGUSR1);
    if (pooled)
        sigaddset(&set, SIGUSR2);
    if (sigprocmask(SIG_BLOCK, &set, &w->oldmask) == -1 ||
        (w->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC)) == -1) {
        log_error("signalfd: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* Takes the signals that have come off the signalfd. */
static void
worker_signals_read(struct worker *w)
{
    struct signalfd_siginfo si;

    while (read(w->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGUSR1)
            worker_reopen = 1;
        else if (si.ssi_signo == SIGUSR2)
            worker_retire = 1;
        else if ((int)si.ssi_signo == RL_SIG_MASTER_GONE)
            worker_on_master_gone(RL_SIG_MASTER_GONE);
        else
            worker_stop = 1;
    }
}

/*
 * Keeps the socket of the PostgreSQL connection in the epoll set, adding
 * a new connection's (a closed socket leaves the set by itself).  If it
 * cannot be added, pg_store_poll reads the socket on every request, as it
 * does for a connection not watched.
 */
static void
worker_watch_pg(struct worker *w)
{
    struct epoll_event ev;
    unsigned serial;
    int fd = pg_store_socket(&w->svc.pg, &serial);

    if (fd == w->pg_fd && serial == w->pg_serial)
        return;
    w->pg_fd = -1;
    w->pg_serial = serial;
    pg_store_watch(&w->svc.pg, 0);
    if (fd < 0)
        return;
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN;
    ev.data.u64 = WORKER_EV_PG;
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) == -1) {
        log_warn("epoll_ctl (postgresql socket): %s", strerror(errno));
        return;
    }
    w->pg_fd = fd;
    pg_store_watch(&w->svc.pg, serial);
}

/*
 * Whether the worker should leave to be replaced: after max_requests
 * (unless PostgreSQL is unreachable: a fresh worker could learn nothing
 * new, and the outage is when a warm worker is worth most), or when its
 * peak resident memory has passed max_worker_rss_mb.  The memory is looked
 * at after a worker's first request and then at most every
 * WORKER_RSS_CHECK_MS (getrusage() is a system call, and memory does not
 * grow much in that time).
 */
static int
worker_rss_due(struct worker *w)
{
    int64_t now = util_now_ms();

    if (w->served > 1 && now - w->rss_checked_ms < WORKER_RSS_CHECK_MS)
        return 0;
    w->rss_checked_ms = now;
    return 1;
}

static int
worker_should_leave(struct worker *w)
{
    const struct rl_config *cfg = w->cfg;
    struct rusage ru;

    if (cfg->max_worker_rss_mb > 0 && w->served > 0 && worker_rss_due(w) &&
        getrusage(RUSAGE_SELF, &ru) == 0 &&
        ru.ru_maxrss / 1024 >= cfg->max_worker_rss_mb) {
        log_info("worker %ld: resident memory %ld MB passed "
            "max_worker_rss_mb (%ld); exiting to be replaced",
            (long)getpid(), ru.ru_maxrss / 1024, cfg->max_worker_rss_mb);
        COUNT(&w->svc, worker_rss_exits);
        w->slot->leaving = EXIT_MEMORY;
        return 1;
    }
    if (cfg->max_requests <= 0 || w->served < (unsigned long)cfg->max_requests)
        return 0;
    if (pg_store_down(&w->svc.pg)) {
        if (!w->postponed)
            log_info("worker %ld: max_requests reached, but PostgreSQL is "
                "unreachable; staying until it is back", (long)getpid());
        w->postponed = 1;
        return 0;
    }
    log_info("worker %ld: served max_requests (%ld); exiting to be "
        "replaced", (long)getpid(), cfg->max_requests);
    w->slot->leaving = EXIT_MAX_REQUESTS;
    return 1;
}

/*
 * Reads the request body into buf (of max + 1 bytes).  Returns the length;
 * sets *too_large when the body is longer than max, after reading and
 * dropping a bounded amount of it so the web server is not cut off.
 */
static size_t
worker_read_body(FCGX_Stream *in, const char *content_length, char *buf,
    long max, int *too_large)
{
    char sink[4096];
    long declared = -1, total = 0;
    int n;

    *too_large = 0;
    if (content_length != NULL && *content_length != '\0')
        declared = strtol(content_length, NULL, 10);
    if (declared > max) {
        *too_large = 1;
    } else {
        n = FCGX_GetStr(buf, (int)max + 1, in);
        if (n < 0)
            n = 0;
        if (n > max)
            *too_large = 1;
        else {
            buf[n] = '\0';
            return (size_t)n;
        }
        total = n;
    }
    while (total < WORKER_DRAIN_MAX &&
        (n = FCGX_GetStr(sink, sizeof(sink), in)) > 0)
        total += n;
    buf[0] = '\0';
    return 0;
}

static void
worker_write(FCGX_Request *fr, const struct rl_response *resp, int head)
{
    char status[21];

    /* Piece by piece into libfcgi's buffer, without printf (every
     * answer). */
    util_lltoa(resp->status, status);
    FCGX_PutS("Status: ", fr->out);
    FCGX_PutS(status, fr->out);
    FCGX_PutS(" ", fr->out);
    FCGX_PutS(response_reason(resp->status), fr->out);
    FCGX_PutS("\r\nContent-Type: ", fr->out);
    FCGX_PutS(resp->content_type, fr->out);
    FCGX_PutS(resp->no_store ? "\r\nCache-Control: no-store\r\n" : "\r\n",
        fr->out);
    if (resp->headers.len > 0)
        FCGX_PutStr(resp->headers.data, (int)resp->headers.len, fr->out);
    FCGX_PutStr("\r\n", 2, fr->out);
    if (!head && resp->body.len > 0)
        FCGX_PutStr(resp->body.data, (int)resp->body.len, fr->out);
}

/* The FastCGI parameters a request is read from, in one pass over the
 * environment (FCGX_GetParam() walks all of it for each name).  As with
 * FCGX_GetParam(), the first of a name wins. */
enum {
    P_ROLE, P_METHOD, P_URI, P_SCRIPT, P_API_KEY, P_AUTHORIZATION, P_ADDR,
    P_FORWARDED, P_REQUEST_ID, P_X_REQUEST_ID, P_DOCUMENT_URI, P_COUNT
};

static void
worker_params(char **envp, const char *value[P_COUNT])
{
    static const struct {
        const char *name;
        size_t len;
    } names[P_COUNT] = {
#define P(s) { s, sizeof(s) - 1 }
        P("FCGI_ROLE"), P("REQUEST_METHOD"), P("REQUEST_URI"),
        P("SCRIPT_NAME"), P("HTTP_X_API_KEY"), P("HTTP_AUTHORIZATION"),
        P("REMOTE_ADDR"), P("HTTP_X_FORWARDED_FOR"), P("REQUEST_ID"),
        P("HTTP_X_REQUEST_ID"), P("DOCUMENT_URI"),
#undef P
    };
    const char *e;
    int i;

    for (i = 0; i < P_COUNT; i++)
        value[i] = NULL;
    for (; envp != NULL && (e = *envp) != NULL; envp++)
        for (i = 0; i < P_COUNT; i++)
            if (e[0] == names[i].name[0] && value[i] == NULL &&
                strncmp(e, names[i].name, names[i].len) == 0 &&
                e[names[i].len] == '=') {
                value[i] = e + names[i].len + 1;
                break;
            }
}

/* Fills req from the FastCGI parameters. */
static void
worker_request(const struct rl_config *cfg, FCGX_Request *fr,
    struct http_request *req)
{
    const char *uri, *q, *doc, *v[P_COUNT];

    memset(req, 0, sizeof(*req));
    worker_params(fr->envp, v);
    req->authorizer = v[P_ROLE] != NULL &&
        strcmp(v[P_ROLE], "AUTHORIZER") == 0;
    req->method = v[P_METHOD];
    if (req->method == NULL)
        req->method = "GET";
    uri = v[P_URI];
    if (uri == NULL || *uri == '\0')
        uri = v[P_SCRIPT];
    if (uri == NULL)
        uri = "/";
    q = strchr(uri, '?');
    req->path = uri;
    req->path_len = q ? (size_t)(q - uri) : strlen(uri);
    req->query = q ? q + 1 : "";
    req->x_api_key = v[P_API_KEY];
    req->authorization = v[P_AUTHORIZATION];
    req->remote_addr = v[P_ADDR];
    req->x_forwarded_for = v[P_FORWARDED];
    if (log_access_on()) {
        req->request_id = v[P_REQUEST_ID];
        if (req->request_id == NULL)
            req->request_id = v[P_X_REQUEST_ID];
    }
    /* An nginx auth_request subrequest: REQUEST_URI is the original
     * request's, while the subrequest's own location is DOCUMENT_URI. */
    if (!req->authorizer && cfg->authorizer_path[0] != '\0') {
        doc = v[P_DOCUMENT_URI];
        if (doc == NULL)
            doc = v[P_SCRIPT];
        req->auth_subrequest = doc != NULL &&
            strcmp(doc, cfg->authorizer_path) == 0;
    }
}

/*
 * FCGI_WEB_SERVER_ADDRS names the web servers allowed to connect.  libfcgi
 * would check it in its own accept, for IPv4 peers only; the worker
 * accepts by itself, so it checks both families here.  Returns 1 when the
 * peer may talk to us.
 */
static int
worker_peer_allowed(const struct addr_net *nets, int n,
    const struct sockaddr_storage *ss)
{
    char ip[INET6_ADDRSTRLEN];
    const void *a;

    if (n <= 0 || (ss->ss_family != AF_INET && ss->ss_family != AF_INET6))
        return 1;
    a = ss->ss_family == AF_INET ?
        (const void *)&((const struct sockaddr_in *)ss)->sin_addr :
        (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr;
    if (inet_ntop(ss->ss_family, a, ip, sizeof(ip)) == NULL)
        return 0;
    if (addr_match(nets, n, ip))
        return 1;
    log_warn("connection from %s refused: not in FCGI_WEB_SERVER_ADDRS", ip);
    return 0;
}

static void
worker_state(struct scoreboard_slot *slot, int state)
{
    slot->state_since_ms = util_now_ms();
    slot->state = state;
}

/* The epoll data of a waiting connection: its entry and its descriptor
 * (an event for an entry that has since changed hands is ignored). */
static uint64_t
worker_conn_key(const struct worker *w, const struct worker_conn *c)
{
    return ((uint64_t)(uint32_t)c->fd << 32) |
        ((uint64_t)(c - w->conns) << 8) | WORKER_EV_CONN;
}

/*
 * Takes one connection off the listening socket, if there is one (the
 * socket is non-blocking and watched with EPOLLEXCLUSIVE, so one
 * connection wakes one idle worker).  Returns its descriptor, or -1.  On
 * EMFILE and ENFILE the worker pauses rather than spins; *fatal is set
 * when accepting cannot work.
 */
static int
worker_accept(struct worker *w, struct sockaddr_storage *ss, int *fatal)
{
    socklen_t len = sizeof(*ss);
    int fd;

    *fatal = 0;
    memset(ss, 0, sizeof(*ss));
    fd = accept4(w->listen_fd, (struct sockaddr *)ss, &len, SOCK_CLOEXEC);
    if (fd >= 0)
        return fd;
    switch (errno) {
    case EAGAIN:
    case EINTR:
    case ECONNABORTED:
    case EPROTO:
        return -1;
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
    case ENOMEM:
        log_warn("accept: %s; pausing for %d ms", strerror(errno),
            WORKER_ACCEPT_PAUSE_MS);
        poll(NULL, 0, WORKER_ACCEPT_PAUSE_MS);
        return -1;
    default:
        log_error("accept: %s", strerror(errno));
        *fatal = 1;
        return -1;
    }
}

/* Reads off and drops n bytes that are known to be waiting on fd. */
static int
worker_discard(int fd, size_t n)
{
    char sink[4096];
    ssize_t r;

    while (n > 0) {
        r = recv(fd, sink, n < sizeof(sink) ? n : sizeof(sink), MSG_DONTWAIT);
        if (r <= 0)
            return -1;
        n -= (size_t)r;
    }
    return 0;
}

/*
 * Peeks at what waits on fd (MSG_PEEK: libfcgi reads it later) and lets
 * fcgi.c judge it, reading off the leftovers of an earlier request first.
 * Never waits.  Returns 1 when a whole request is there (*s filled), 0
 * when it is not yet (*got: the bytes of it that are), and -1 when the
 * connection is to be dropped: the peer closed it, or its records were
 * refused (logged).
 */
static int
worker_peek(struct worker *w, int fd, struct fcgi_scan *s, size_t *got)
{
    ssize_t n;
    int rc;

    *got = 0;
    for (;;) {
        n = recv(fd, w->peek, sizeof(w->peek), MSG_PEEK | MSG_DONTWAIT);
        if (n == 0)
            return -1;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        }
        rc = fcgi_scan(w->peek, (size_t)n, 1, s);
        if (rc == FCGI_SCAN_DONE)
            return 1;
        if (rc == FCGI_SCAN_BAD) {
            COUNT(&w->svc, fcgi_refused);
            log_warn("FastCGI connection dropped: %s", s->error);
            return -1;
        }
        if (s->skip > 0) {
            if (worker_discard(fd, s->skip) == -1)
                return -1;
            continue;
        }
        if ((size_t)n == sizeof(w->peek)) {
            /* A body larger than the window: libfcgi reads the rest,
             * each read bounded by SO_RCVTIMEO. */
            if (s->params_end > 0)
                return 1;
            COUNT(&w->svc, fcgi_refused);
            log_warn("FastCGI connection dropped: the parameters are larger "
                "than %d bytes", FCGI_PARAMS_MAX);
            return -1;
        }
        *got = (size_t)n;
        return 0;
    }
}

static void
worker_set_timeout(int fd, int opt, long ms)
{
    struct timeval tv;

    if (ms < 1)
        ms = 1;
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof(tv));
}

/* Closes a connection at the end of its last request.  A TCP peer may
 * still be sending (the tail of a body we dropped); closing with unread
 * data would reset the connection and could destroy our answer in flight,
 * so what is waiting is read off first. */
static void
worker_close(int fd, int tcp)
{
    char sink[4096];
    int i;

    if (tcp && shutdown(fd, SHUT_WR) == 0)
        for (i = 0; i < 16 && recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0;
            i++)
            ;
    close(fd);
}

/* Ends a connection and frees its entry; with closed set, libfcgi has
 * already closed the descriptor (which also took it out of the epoll
 * set). */
static void
worker_conn_end(struct worker *w, struct worker_conn *c, int closed)
{
    if (c->fd < 0)
        return;
    if (!closed) {
        if (c->watched)
            epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        worker_close(c->fd, c->tcp);
    }
    c->fd = -1;
    c->watched = 0;
    w->nconns--;
}

/* Puts descriptor fd, with *h, on the hand-off socket: 1 when it went, -1
 * when the socket's queue is full for now, 0 when it cannot go. */
static int
worker_handoff_send(struct worker *w, int fd, struct worker_handoff *h)
{
    struct msghdr msg;
    struct iovec iov;
    struct cmsghdr *cm;
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;

    if (w->handoff_send < 0)
        return 0;
    memset(&msg, 0, sizeof(msg));
    memset(&ctl, 0, sizeof(ctl));
    iov.iov_base = h;
    iov.iov_len = sizeof(*h);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof(ctl.buf);
    cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    if (sendmsg(w->handoff_send, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) == -1) {
        log_debug("FastCGI: hand-off of a connection: %s", strerror(errno));
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS ?
            -1 : 0;
    }
    return 1;
}

/*
 * Passes c, a kept connection with no request under way, to another
 * worker of the pool: its descriptor goes over the hand-off socket (with
 * what its entry knows: TCP or not, SO_SNDTIMEO set or not, the requests
 * it has carried), and the worker that receives it carries on as if the
 * connection had always been its own.  This worker's copy is closed
 * without a shutdown, which would reach the web server.  Returns 1 when
 * it was passed, -1 when the socket's queue is full for now, 0 when it
 * cannot be passed (no pool, another error): c is untouched then.
 */
static int
worker_conn_hand_off(struct worker *w, struct worker_conn *c)
{
    struct worker_handoff h;
    int rc;

    memset(&h, 0, sizeof(h));
    h.requests = c->requests;
    h.tcp = (unsigned char)c->tcp;
    h.timed = (unsigned char)c->timed;
    if ((rc = worker_handoff_send(w, c->fd, &h)) != 1)
        return rc;
    /* The connection stays open elsewhere, so closing this descriptor
     * would not take it out of the epoll set by itself. */
    if (c->watched)
        epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    c->watched = 0;
    w->nconns--;
    return 1;
}

/* Takes one connection off the hand-off socket: returns its descriptor
 * (and fills *h, as worker_handoff_send sent it), or -1 when none
 * waits. */
static int
worker_handoff_recv(struct worker *w, struct worker_handoff *h)
{
    struct msghdr msg;
    struct iovec iov;
    struct cmsghdr *cm;
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    ssize_t n;
    int fd = -1;

    memset(&msg, 0, sizeof(msg));
    memset(h, 0, sizeof(*h));
    iov.iov_base = h;
    iov.iov_len = sizeof(*h);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof(ctl.buf);
    n = recvmsg(w->handoff_recv, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0)
        return -1;
    cm = CMSG_FIRSTHDR(&msg);
    if (cm != NULL && cm->cmsg_level == SOL_SOCKET &&
        cm->cmsg_type == SCM_RIGHTS && cm->cmsg_len == CMSG_LEN(sizeof(int)))
        memcpy(&fd, CMSG_DATA(cm), sizeof(int));
    /* Only the pool's workers write there; should a message be cut short
     * all the same, its connection is not taken. */
    if (fd >= 0 && (size_t)n != sizeof(*h)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* A request begins on c at since_ms (monotonic): it must arrive whole
 * within fcgi_read_timeout_ms of then. */
static void
worker_conn_request(struct worker *w, struct worker_conn *c, int64_t since_ms)
{
    c->started = 1;
    c->request_ms = since_ms;
    c->deadline_ms = since_ms + w->cfg->fcgi_read_timeout_ms;
}

/* Answers one request that libfcgi has read the parameters of. */
static void
worker_serve(struct worker *w, const struct fcgi_scan *s,
    struct worker_conn *c)
{
    struct http_request req;
    FCGX_Request *fr = &w->fr;
    int64_t t0 = util_now_us();
    int too_large = 0;

    __atomic_add_fetch(&w->board->accepted, 1, __ATOMIC_RELAXED);
    worker_request(w->cfg, fr, &req);
    req.nul_in_key = s->nul_in_key;
    req.nul_in_param = s->nul_in_value;
    /* An authorizer gets no request body. */
    req.body_len = req.authorizer ? 0 : worker_read_body(fr->in,
        FCGX_GetParam("CONTENT_LENGTH", fr->envp), w->body,
        w->cfg->max_body_size, &too_large);
    req.body = w->body;
    req.body_too_large = too_large;
    worker_state(w->slot, SLOT_BUSY);
    response_reset(&w->resp);
    observe_begin(&w->svc);
    api_handle(&w->svc, &req, &w->resp);
    observe_request(&w->svc, &req, &w->resp, util_now_us() - t0, w->slot);
    if (!c->timed && (c->kept || w->resp.headers.len + w->resp.body.len >
        WORKER_UNTIMED_MAX)) {
        worker_set_timeout(c->fd, SO_SNDTIMEO, w->cfg->fcgi_read_timeout_ms);
        c->timed = 1;
    }
    worker_write(fr, &w->resp, strcmp(req.method, "HEAD") == 0);
}

/*
 * Hands the whole request waiting on c to libfcgi and answers it.
 * libfcgi is given the connection as if it had kept it from an earlier
 * request (ipcFd set, keepConnection on), and "detached" so that when it
 * closes a connection itself it does not linger for up to 2 s reading
 * what the peer sends.  Returns 1 when the connection stays for another
 * request (FCGI_KEEP_CONN), 0 when it is to be closed, -1 when libfcgi
 * closed it (an I/O error).
 */
static int
worker_conn_serve(struct worker *w, struct worker_conn *c,
    const struct fcgi_scan *s)
{
    FCGX_Request *fr = &w->fr;
    int keep, rc;

    /* The master's backstop counts from the request's start. */
    w->slot->state_since_ms = c->request_ms;
    w->slot->state = SLOT_READING;
    if (s->stdin_end == 0 && s->role == 1)
        worker_set_timeout(c->fd, SO_RCVTIMEO,
            (long)(c->deadline_ms - util_now_ms()));
    fr->ipcFd = c->fd;
    fr->keepConnection = 1;
    fr->detached = 1;
    if (FCGX_Accept_r(fr) != 0) {
        log_warn("FastCGI request refused by libfcgi");
        rc = -1;
    } else {
        keep = fr->keepConnection;
        worker_serve(w, s, c);
        fr->keepConnection = 1;
        fr->detached = 1;
        FCGX_Finish_r(fr);
        w->served++;
        w->slot->requests = w->served;
        rc = fr->ipcFd < 0 ? -1 : keep;
    }
    fr->ipcFd = -1;
    fr->keepConnection = 0;
    worker_state(w->slot, SLOT_IDLE);
    return rc;
}

/*
 * Watches the hand-off socket while the worker has a free entry, and not
 * while all are taken: a handed-off connection never makes room for
 * itself by closing one of the worker's own (which nginx may be reusing
 * at that moment); it waits for a worker with room.
 */
static void
worker_handoff_watch(struct worker *w)
{
    struct epoll_event ev;
    int want = !w->leaving && w->nconns < w->conns_max;

    /* The others read it to decide whether to pass a connection they
     * have no room for (worker_conn_place). */
    __atomic_store_n(&w->slot->room, want && w->handoff_recv >= 0,
        __ATOMIC_RELAXED);
    if (w->handoff_recv < 0 || want == w->handoff_watched)
        return;
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN | EPOLLEXCLUSIVE;
    ev.data.u64 = WORKER_EV_HANDOFF;
    if (epoll_ctl(w->epfd, want ? EPOLL_CTL_ADD : EPOLL_CTL_DEL,
        w->handoff_recv, want ? &ev : NULL) == -1) {
        log_warn("epoll_ctl (hand-off socket): %s", strerror(errno));
        return;
    }
    w->handoff_watched = want;
}

/* The worker stops taking connections, its own or handed off: it
 * finishes the requests under way and then leaves (see worker_run). */
static void
worker_leave(struct worker *w)
{
    w->leaving = 1;
    epoll_ctl(w->epfd, EPOLL_CTL_DEL, w->listen_fd, NULL);
    worker_handoff_watch(w);
}

/*
 * Looks at connection c, after it was accepted or when its peer sent
 * something (events, from epoll; 0 after accept): answers every whole
 * request waiting on it, and otherwise leaves it waiting, watched by
 * epoll, for the rest.  Nothing here waits for the peer.  Returns 1 when
 * a request was answered.
 */
static int
worker_conn_poll(struct worker *w, struct worker_conn *c, uint32_t events)
{
    struct epoll_event ev;
    struct fcgi_scan s;
    size_t got;
    int rc, served = 0;

    for (;;) {
        rc = worker_peek(w, c->fd, &s, &got);
        /* An incomplete request from a peer that has gone can never
         * complete. */
        if (rc == 0 && (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
            rc = -1;
        if (rc == -1) {
            worker_conn_end(w, c, 0);
            return served;
        }
        /* On a kept connection the read deadline starts with the next
         * request's first byte. */
        if (!c->started && (rc == 1 || got > 0))
            worker_conn_request(w, c, util_now_ms());
        if (rc == 0) {
            if (!c->watched) {
                memset(&ev, 0, sizeof(ev));
                /* Edge-triggered: an event for each arrival, since what
                 * is already there stays (peeked, not read). */
                ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
                ev.data.u64 = worker_conn_key(w, c);
                if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, c->fd, &ev) == -1) {
                    log_warn("epoll_ctl (connection): %s", strerror(errno));
                    worker_conn_end(w, c, 0);
                    return served;
                }
                c->watched = 1;
            }
            return served;
        }
        rc = worker_conn_serve(w, c, &s);
        served = 1;
        if (rc == 1 && !w->leaving && worker_should_leave(w))
            worker_leave(w);
        if (rc != 1) {
            worker_conn_end(w, c, rc == -1);
            return served;
        }
        c->kept = 1;
        c->requests++;
        c->started = 0;
        c->deadline_ms = util_now_ms() + w->cfg->fcgi_keepalive_timeout_ms;
        /* A worker on its way out passes the connection on, or closes
         * it after its answer when it cannot.  One that leaves while the
         * pool goes on keeps it while the hand-off queue is full, waiting
         * for its next request like any kept connection, and
         * worker_conn_expire tries again: closing it now would race with
         * the web server's next request. */
        if (w->leaving || worker_stop) {
            rc = worker_conn_hand_off(w, c);
            if (rc == 1)
                return served;
            if (rc == 0 || worker_stop) {
                COUNT(&w->svc, fcgi_unpassed);
                worker_conn_end(w, c, 0);
                return served;
            }
        }
        events = 0;
    }
}

/*
 * Drops c, a kept connection waiting for its next request, unless that
 * request has begun to arrive (the web server may have sent it just now):
 * then c's read deadline starts, and the epoll event of the arrival,
 * still to come, answers it.  Returns 1 when c was dropped.
 */
static int
worker_conn_drop_idle(struct worker *w, struct worker_conn *c)
{
    char b;

    if (recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 1) {
        worker_conn_request(w, c, util_now_ms());
        return 0;
    }
    worker_conn_end(w, c, 0);
    return 1;
}

/*
 * Frees an entry for a new connection when all are taken: an idle kept
 * connection gives up its entry (the web server opens another when it
 * needs one), the one that has carried the fewest requests and then the
 * one idle longest, so that a client that opens connections and goes
 * silent loses its own before a web server's busy ones; else the
 * connection that has waited longest for the rest of a request.  Returns
 * the free entry.
 */
static struct worker_conn *
worker_conn_evict(struct worker *w)
{
    struct worker_conn *c, *idle, *oldest;
    int i;

    for (;;) {
        idle = oldest = NULL;
        for (i = 0; i < w->conns_max; i++) {
            c = &w->conns[i];
            if (c->fd < 0)
                return c;
            if (!c->started) {
                if (idle == NULL || c->requests < idle->requests ||
                    (c->requests == idle->requests &&
                    c->deadline_ms < idle->deadline_ms))
                    idle = c;
            } else if (oldest == NULL || c->request_ms < oldest->request_ms)
                oldest = c;
        }
        if (idle == NULL)
            break;
        /* Each round either frees idle's entry or makes it a request under
         * way: the loop ends. */
        if (worker_conn_drop_idle(w, idle)) {
            log_debug("FastCGI: %d connections held; closed an idle kept "
                "one", w->conns_max);
            COUNT(&w->svc, fcgi_evicted);
            return idle;
        }
    }
    log_warn("FastCGI: %d connections wait for a whole request in worker "
        "%ld; dropping the one that waited longest", w->conns_max,
        (long)getpid());
    COUNT(&w->svc, fcgi_evicted);
    worker_conn_end(w, oldest, 0);
    return oldest;
}

/* An entry among those the worker holds for connection fd
 * (worker_conn_evict frees one when all are taken). */
static struct worker_conn *
worker_conn_new(struct worker *w, int fd, int tcp)
{
    struct worker_conn *c = NULL;
    int i;

    for (i = 0; i < w->conns_max && c == NULL; i++)
        if (w->conns[i].fd < 0)
            c = &w->conns[i];
    if (c == NULL)
        c = worker_conn_evict(w);
    memset(c, 0, sizeof(*c));
    c->fd = fd;
    c->tcp = tcp;
    w->nconns++;
    return c;
}

/* A connection just accepted: a whole request within
 * fcgi_read_timeout_ms.  Returns 1 when a request was answered. */
static int
worker_conn_start(struct worker *w, int fd, int tcp)
{
    struct worker_conn *c = worker_conn_new(w, fd, tcp);

    worker_conn_request(w, c, util_now_ms());
    return worker_conn_poll(w, c, 0);
}

/* Another live worker of the pool takes hand-offs (its room, published by
 * worker_handoff_watch; it may be a moment old). */
static int
worker_room_elsewhere(const struct worker *w)
{
    const struct scoreboard_slot *s;
    pid_t self = getpid();
    int i;

    if (w->board == NULL || w->board->workers == 0)
        return 0;
    for (i = 0; i < RL_MAX_WORKERS; i++) {
        s = &w->board->slots[i];
        if (s->pid != 0 && s->pid != self &&
            __atomic_load_n(&s->room, __ATOMIC_RELAXED))
            return 1;
    }
    return 0;
}

/*
 * A connection just accepted, fd: this worker takes it while it has a
 * free entry.  When all are taken and another worker has room, the
 * connection goes there over the hand-off socket, unread: making room here
 * would mean closing an idle kept connection, which races with the web
 * server's next request on it (nginx answers 502 for a request written
 * into a connection closed under it).  Only when the whole pool is full
 * does worker_conn_evict close one.  Returns 1 when a request was
 * answered.
 */
static int
worker_conn_place(struct worker *w, int fd, int tcp)
{
    struct worker_handoff h;

    if (w->nconns >= w->conns_max && worker_room_elsewhere(w)) {
        memset(&h, 0, sizeof(h));
        h.tcp = (unsigned char)tcp;
        h.fresh = 1;
        h.accepted_ms = util_now_ms();
        if (worker_handoff_send(w, fd, &h) == 1) {
            close(fd);
            return 0;
        }
    }
    return worker_conn_start(w, fd, tcp);
}

/* Connections that another worker handed off (kept ones from a worker on
 * its way out, new ones from a worker with no room): each is taken, while
 * there is a free entry, as if this worker had accepted it, idle or with
 * a request waiting.  Returns 1 when a request was answered. */
static int
worker_handoff_take(struct worker *w)
{
    struct worker_conn *c;
    struct worker_handoff h;
    int fd, i, served = 0;

    for (i = 0; i < WORKER_HANDOFF_BATCH && !w->leaving && !worker_stop &&
        w->nconns < w->conns_max; i++) {
        if ((fd = worker_handoff_recv(w, &h)) < 0)
            break;
        c = worker_conn_new(w, fd, h.tcp);
        c->timed = h.timed;
        c->requests = h.requests;
        if (h.fresh) {
            /* Its first request's deadline counts from its acceptance. */
            worker_conn_request(w, c, h.accepted_ms);
        } else {
            c->kept = 1;
            c->deadline_ms = util_now_ms() +
                w->cfg->fcgi_keepalive_timeout_ms;
        }
        served |= worker_conn_poll(w, c, 0);
    }
    return served;
}

/* An epoll event for a waiting connection.  Returns 1 when a request was
 * answered. */
static int
worker_conn_event(struct worker *w, uint64_t key, uint32_t events)
{
    struct worker_conn *c;
    uint32_t i = (uint32_t)(key >> 8) & 0xffffff;

    if (i >= (uint32_t)w->conns_max)
        return 0;
    c = &w->conns[i];
    if (c->fd < 0 || !c->watched || (uint32_t)c->fd != (uint32_t)(key >> 32))
        return 0;
    return worker_conn_poll(w, c, events);
}

/* Ends the connections past their deadline, and once the worker is
 * leaving the kept ones that wait for nothing (each as
 * worker_conn_drop_idle does).  Returns the milliseconds until the next
 * deadline, at most WORKER_TICK_MS. */
static long
worker_conn_expire(struct worker *w)
{
    struct worker_conn *c;
    int64_t now = util_now_ms(), wait = WORKER_TICK_MS;
    int i;

    for (i = 0; i < w->conns_max && w->nconns > 0; i++) {
        c = &w->conns[i];
        if (c->fd < 0)
            continue;
        if (!c->started && w->leaving) {
            int h = worker_conn_hand_off(w, c);

            if (h == 1)
                continue;
            /* The hand-off queue is full: try again soon, until the
             * connection's own deadline, rather than close it (see
             * worker_conn_poll). */
            if (h == -1 && !worker_stop && now < c->deadline_ms) {
                if (WORKER_HANDOFF_RETRY_MS < wait)
                    wait = WORKER_HANDOFF_RETRY_MS;
                continue;
            }
        }
        if (!c->started && (w->leaving || now >= c->deadline_ms)) {
            int leaving = now < c->deadline_ms;

            if (worker_conn_drop_idle(w, c)) {
                log_debug("FastCGI kept connection closed: idle past its "
                    "deadline, or the worker leaves");
                if (leaving)
                    COUNT(&w->svc, fcgi_unpassed);
                continue;
            }
        } else if (now >= c->deadline_ms) {
            log_debug("FastCGI connection closed: no whole request within "
                "fcgi_read_timeout_ms");
            worker_conn_end(w, c, 0);
            continue;
        }
        if (c->deadline_ms - now < wait)
            wait = c->deadline_ms - now;
    }
    return (long)wait;
}

int
worker_run(const struct rl_config *cfg, int listen_fd,
    struct scoreboard_slot *slot, struct shm *shm, const int *handoff)
{
    static struct worker w;     /* large: the peek window */
    static struct scoreboard_slot solo_slot;
    struct sockaddr_storage ss;
    struct epoll_event ev, events[WORKER_EVENTS];
    const char *allowed = getenv("FCGI_WEB_SERVER_ADDRS");
    char err[160];
    int fd, fatal = 0, flags, rc = 0, i, n, incoming, served;
    long wait;
    pid_t master_pid = shm->board != NULL ?
        ((struct scoreboard *)shm->board)->master : 0;

    memset(&w, 0, sizeof(w));
    w.cfg = cfg;
    w.listen_fd = listen_fd;
    w.slot = slot != NULL ? slot : &solo_slot;
    w.board = shm->board;
    w.conns_max = (int)cfg->worker_connections;
    if ((w.conns = calloc((size_t)w.conns_max, sizeof(*w.conns))) == NULL) {
        log_error("worker: out of memory");
        return 1;
    }
    for (i = 0; i < w.conns_max; i++)
        w.conns[i].fd = -1;
    if (FCGX_Init() != 0) {
        log_error("FCGX_Init failed");
        return 1;
    }
    w.sigfd = -1;
    w.pg_fd = -1;
    w.handoff_send = handoff != NULL ? handoff[1] : -1;
    w.handoff_recv = handoff != NULL ? handoff[0] : -1;
    if (worker_signals(&w, slot != NULL) == -1)
        return 1;
    if (allowed != NULL && *allowed != '\0' &&
        (w.nweb = addr_parse_list(allowed, w.web_servers, 32, err,
        sizeof(err))) == -1) {
        log_error("FCGI_WEB_SERVER_ADDRS: %s", err);
        return 1;
    }
    flags = fcntl(listen_fd, F_GETFL);
    if (flags == -1 || fcntl(listen_fd, F_SETFL, flags | O_NONBLOCK) == -1 ||
        (w.epfd = epoll_create1(EPOLL_CLOEXEC)) == -1) {
        log_error("listening socket: %s", strerror(errno));
        return 1;
    }
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN | EPOLLEXCLUSIVE;
    ev.data.u64 = WORKER_EV_LISTEN;
    if (epoll_ctl(w.epfd, EPOLL_CTL_ADD, listen_fd, &ev) == -1) {
        log_error("epoll_ctl: %s", strerror(errno));
        close(w.epfd);
        return 1;
    }
    ev.events = EPOLLIN;
    ev.data.u64 = WORKER_EV_SIGNAL;
    if (epoll_ctl(w.epfd, EPOLL_CTL_ADD, w.sigfd, &ev) == -1) {
        log_error("epoll_ctl: %s", strerror(errno));
        close(w.epfd);
        return 1;
    }
    /* Connections handed off by a worker that leaves wake one worker with
     * room, as new ones do (worker_handoff_watch); without the socket, a
     * worker closes its kept connections when it leaves. */
    worker_handoff_watch(&w);
    if (service_init(&w.svc, cfg, shm) == -1 ||
        (w.body = malloc((size_t)cfg->max_body_size + 1)) == NULL) {
        log_error("worker: out of memory");
        close(w.epfd);
        return 1;
    }
    response_init(&w.resp);
    FCGX_InitRequest(&w.fr, -1, 0);
    w.slot->start_s = util_wall_s();
    __atomic_add_fetch(&w.board->stats.worker_starts, 1, __ATOMIC_RELAXED);
    (void)log_access_open(cfg->access_log);
    log_debug("worker %ld ready", (long)getpid());
    /* One loop for the listening socket, the signals, PostgreSQL and the
     * connections waiting for a whole request.  A stop, max_requests or
     * max_worker_rss_mb makes the worker leave: it takes no more
     * connections, answers the requests under way (each within its
     * deadline) and closes the kept connections that wait for nothing. */
    for (;;) {
        if (!w.leaving && (worker_stop || worker_retire ||
            worker_should_leave(&w)))
            worker_leave(&w);
        wait = worker_conn_expire(&w);
        if (w.leaving && w.nconns == 0)
            break;
        worker_handoff_watch(&w);
        worker_watch_pg(&w);
        n = epoll_wait(w.epfd, events, WORKER_EVENTS, (int)wait);
        if (n == -1) {
            if (errno != EINTR) {
                log_error("epoll_wait: %s", strerror(errno));
                rc = 1;
                break;
            }
            n = 0;
        }
        incoming = served = 0;
        for (i = 0; i < n; i++) {
            switch ((uint32_t)events[i].data.u64 & 0xff) {
            case WORKER_EV_SIGNAL:
                worker_signals_read(&w);
                break;
            case WORKER_EV_PG:
                pg_store_readable(&w.svc.pg);
                break;
            case WORKER_EV_LISTEN:
                incoming = 1;
                break;
            case WORKER_EV_HANDOFF:
                served |= worker_handoff_take(&w);
                break;
            default:
                served |= worker_conn_event(&w, events[i].data.u64,
                    events[i].events);
            }
        }
        if (incoming && !w.leaving && !worker_stop &&
            (fd = worker_accept(&w, &ss, &fatal)) >= 0) {
            if (!worker_peer_allowed(w.web_servers, w.nweb, &ss))
                close(fd);
            else {
                if (ss.ss_family == AF_INET || ss.ss_family == AF_INET6) {
                    int one = 1;

                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one,
                        sizeof(one));
                }
                served |= worker_conn_place(&w, fd, ss.ss_family != AF_UNIX);
            }
        }
        if (fatal) {
            rc = 1;
            break;
        }
        /* Idle: nothing answered and nothing waiting, so the housekeeping
         * may wait a little (PostgreSQL's reconnect). */
        service_tick(&w.svc, !served && !incoming && w.nconns == 0);
        if (worker_reopen) {
            worker_reopen = 0;
            log_reopen();
        }
    }
    for (i = 0; i < w.conns_max; i++)
        worker_conn_end(&w, &w.conns[i], 0);
    free(w.conns);
    FCGX_Free(&w.fr, 0);
    response_free(&w.resp);
    service_free(&w.svc);
    free(w.body);
    close(w.epfd);
    /* What is still pending reaches the handlers. */
    close(w.sigfd);
    sigprocmask(SIG_SETMASK, &w.oldmask, NULL);
    /* The master died (SIGKILL, the OOM killer): one orphaned worker, the
     * first to claim the master's place in the scoreboard, starts a new
     * master on the same socket; the others just leave.  The socket stays
     * open all along, so the web server only sees a short wait. */
    if (worker_orphaned && slot != NULL && master_pid > 0 &&
        __atomic_compare_exchange_n(&w.board->master, &master_pid, getpid(),
        0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        rc = WORKER_TAKEOVER;
    return rc;
}
