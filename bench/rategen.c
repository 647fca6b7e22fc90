/*
 * rategen.c -- an open-loop, constant-arrival-rate HTTP/1.1 load generator.
 *
 * Request i is due at t0 + i/RATE and is sent when it is due, whether or
 * not the earlier ones have been answered, so a slow server cannot slow
 * the offered load down (no coordinated omission).  Each latency runs from
 * the request's scheduled time to the end of its response, so any queueing,
 * in the server or in this program, shows in the figures.
 *
 * One thread, epoll, non-blocking keep-alive connections with one request
 * in flight on each (no pipelining).  A due request takes an idle
 * connection, or opens a new one while fewer than MAXCONN are open, or
 * waits in order for one to come free.  epoll_pwait2()'s timeout, in
 * nanoseconds with the timer slack set to 1 ns, wakes the loop when the
 * next request is due, but not more often than every MIN_STEP_NS: above
 * that rate every wake sends all that are due.  The generator shares the
 * machine with what it measures, so it spends as few system calls as it
 * can: one wait per wake, one sendmsg and (mostly) one read per request.
 *
 * Build: cc -std=c99 -D_GNU_SOURCE -O2 -Wall -Wextra -o rategen rategen.c -lm
 * Run `rategen -h` for the manual.
 */
#include <sys/types.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/uio.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define NSEC            1000000000ULL
#define MAX_RATE        1000000
#define MAX_SECONDS     600
#define MAX_CONN        10000
#define MAX_BODY        (64 * 1024)
#define MAX_HEADERS     32
#define MAX_SUBST       64              /* %n in one body */
#define MAX_EXPECT      32
#define MAX_TIMEOUT_MS  600000
#define RBUF_SIZE       8192            /* longest response line */
#define MIN_STEP_NS     100000ULL       /* wake at most every 100 us */
#define LATE_NS         1000000ULL      /* a send later than this is late */
#define MAX_EVENTS      256
#define FD_SPARE        16

enum cstate {
    CS_FREE,
    CS_CONNECTING,
    CS_WRITING,
    CS_READING,
    CS_IDLE
};

enum pstate {
    PS_STATUS,
    PS_HEADER,
    PS_BODY,
    PS_CHUNK_SIZE,
    PS_CHUNK_DATA,
    PS_CHUNK_END,
    PS_TRAILER,
    PS_UNTIL_CLOSE,
    PS_DONE
};

enum outcome {
    OUT_SOCKET,
    OUT_TIMEOUT
};

struct conn {
    struct conn *prev;          /* in the idle or busy list */
    struct conn *next;          /* ... or the free list */
    int          fd;
    enum cstate  state;
    uint64_t     req;           /* request index, while busy */
    uint64_t     sched;         /* its scheduled time, ns */
    uint64_t     lag;           /* from then to its hand-over, ns */
    uint64_t     idle_since;    /* when it last became idle, ns */
    size_t               woff;          /* bytes of it written */
    size_t               wlen;          /* its length */
    char                 clen[32];      /* Content-Length value CRLF CRLF */
    size_t               clenlen;
    char                 num[24];       /* what %n becomes */
    size_t               numlen;
    enum pstate  ps;            /* response parser */
    int          status;
    int          keepalive;
    int          chunked;
    int          have_len;
    uint64_t     remain;        /* body or chunk bytes to come */
    size_t               rlen;
    char                 rbuf[RBUF_SIZE];
};

struct connlist {
    struct conn *head;
    struct conn *tail;
};

/* Options. */
static uint64_t          opt_rate;
static uint64_t          opt_seconds;
static uint64_t          opt_warmup;
static uint64_t          opt_maxconn = 256;
static uint64_t          opt_timeout_ms = 2000;
static uint64_t          opt_idle_ms = 2000;
static uint64_t          opt_start;
static const char       *opt_method;
static const char       *opt_headers[MAX_HEADERS];
static int               opt_nheaders;
static const char       *opt_body;
static const char       *opt_trace;
static FILE             *trace;
static unsigned char     expect[600];
static struct sockaddr_in target;
static char             *target_name;   /* host[:port] as in the URL */
static char             *target_path;

/* The request, less its per-request parts. */
static char             *req_head;
static size_t            req_headlen;
static int               req_has_len;
static int               req_is_head;
static const char       *body_seg[MAX_SUBST + 1];
static size_t            body_seglen[MAX_SUBST + 1];
static int               body_nsubst;
static size_t            body_fixed;

/* The run. */
static struct conn      *conns;
static struct conn      *freelist;
static struct connlist   idle;
static struct connlist   busy;
static int               epfd = -1;
static uint64_t          timeout_ns;
static uint64_t          idle_ns;
static uint64_t          t0;
static uint64_t          total;         /* requests, warm-up included */
static uint64_t          warm;          /* the first timed request */
static uint64_t          next_send;
static uint64_t          due;
static uint64_t          nopen;
static uint64_t          peak_open;
static uint64_t          opened;
static int               error_shown;

/* Results of the timed part. */
static uint64_t          st_sent;
static uint64_t          st_completed;
static uint64_t          st_ok;
static uint64_t          st_status_err;
static uint64_t          st_by_status[600];     /* the unexpected ones */
static uint64_t          st_sock_err;
static uint64_t          st_timeouts;
static uint64_t          st_late;
static uint64_t          st_lag_max;
static uint64_t          st_last_done;
static uint32_t         *lat;
static uint64_t          nlat;

static const char help_text[] =
"NAME\n"
"     rategen - open-loop constant-rate HTTP/1.1 load generator\n"
"\n"
"SYNOPSIS\n"
"     rategen -r RATE -d SECONDS [-c MAXCONN] [-w WARMUP] [-t TIMEOUT_MS]\n"
"             [-k IDLE_MS] [-m METHOD] [-H 'Name: value'] ... [-b BODY]\n"
"             [-s START_INDEX] [-e STATUS[,STATUS...]] [-o TRACE] URL\n"
"\n"
"DESCRIPTION\n"
"     rategen sends requests to URL at a fixed rate: request i is due at\n"
"     t0 + i/RATE, and is sent when due whether or not earlier requests\n"
"     have been answered (open loop).  Its latency runs from its scheduled\n"
"     time to the end of its response, so queueing in the server or in\n"
"     rategen itself is counted, not hidden.\n"
"\n"
"     It uses keep-alive HTTP/1.1 connections with TCP_NODELAY and one\n"
"     request in flight on each.  A due request takes an idle connection,\n"
"     or opens a new one while fewer than MAXCONN are open, or else waits\n"
"     in a FIFO queue, still timed from its scheduled time.  A request whose\n"
"     connection fails or closes before the whole response is read is a\n"
"     socket error; it is not retried.\n"
"\n"
"     URL is http://HOST[:PORT][/PATH], HOST a numeric IPv4 address or\n"
"     localhost.  https is not supported.\n"
"\n"
"OPTIONS\n"
"     -r RATE        Requests per second, 1 to 1000000.  Required.\n"
"     -d SECONDS     Length of the timed part, 1 to 600.  Required.\n"
"     -c MAXCONN     Most connections open at once, 1 to 10000 (256).\n"
"                    The open-file limit is raised as needed.\n"
"     -w WARMUP      Seconds, 0 to 600 (0), sent at the same rate before\n"
"                    the timed part; their results are dropped, their\n"
"                    connections kept.\n"
"     -t TIMEOUT_MS  A request not answered this long after its scheduled\n"
"                    time, 1 to 600000 (2000), is a timeout; its\n"
"                    connection is closed.\n"
"     -k IDLE_MS     A connection left idle this long, 0 to 600000 (2000),\n"
"                    is closed; 0 keeps idle ones open.  Keep it under the\n"
"                    server's keep-alive timeout (lighttpd's is 5 s): a\n"
"                    request sent on a connection that the server is\n"
"                    closing at that moment is lost.\n"
"     -m METHOD      Request method (GET, or POST when -b is given).\n"
"     -H HEADER      A header line 'Name: value' to send; up to 32.  Host\n"
"                    is sent unless given here; Content-Length and\n"
"                    Transfer-Encoding may not be given.\n"
"     -b BODY        Request body, at most 65536 bytes, sent with a\n"
"                    Content-Length.  Each %n in it becomes the decimal\n"
"                    number START_INDEX + i, different for every request\n"
"                    (warm-up ones included).\n"
"     -s START_INDEX First number for %n (0).\n"
"     -e STATUSES    Comma-separated statuses that count as ok (200).\n"
"                    Others are status errors.\n"
"     -o TRACE       Write one line per completed timed request to the\n"
"                    file TRACE: \"DUE_US LATENCY_US STATUS LAG_US\", DUE_US\n"
"                    its scheduled time from the start of the timed part,\n"
"                    LAG_US how late rategen handed it to a connection\n"
"                    (part of LATENCY_US), in the order the responses\n"
"                    came.  It shows whether slow answers come together\n"
"                    (a stall) or spread out, and how much of the wait was\n"
"                    rategen's own.\n"
"     -h             Print this text.\n"
"\n"
"OUTPUT\n"
"     At the end one line on standard output, every figure for the timed\n"
"     part only:\n"
"\n"
"     RATE offered=R seconds=S sent=N completed=N achieved=F ok=N\n"
"          status_errors=N socket_errors=N timeouts=N p50_us=N p95_us=N\n"
"          p99_us=N p999_us=N max_us=N conns=N opened=N\n"
"          send_lag_max_us=N late_sends=N\n"
"\n"
"     sent        requests written to a connection (or connecting one);\n"
"     completed   responses read whole, of any status: ok + status_errors;\n"
"     achieved    ok responses per second over SECONDS, or over the time\n"
"                 from the first scheduled request to the last completed\n"
"                 response when that is longer;\n"
"     socket_errors  connect, send or receive failures, early closes,\n"
"                 malformed responses;\n"
"     timeouts    requests past TIMEOUT_MS, queued or in flight;\n"
"     pNN_us, max_us  exact latency percentiles (nearest rank) over the\n"
"                 completed responses, microseconds;\n"
"     conns       the most connections open at once (whole run);\n"
"     opened      connections opened (whole run);\n"
"     send_lag_max_us  the largest delay from a request's scheduled time\n"
"                 to its hand-over to a connection, which includes any\n"
"                 wait for a free connection when MAXCONN are busy;\n"
"     late_sends  requests handed over more than 1 ms late.\n"
"\n"
"     Every timed request ends as exactly one of ok, status_errors,\n"
"     socket_errors or timeouts.  A short summary goes to standard error,\n"
"     with the count of every status that was not expected.\n"
"\n"
"EXIT STATUS\n"
"     0 when the run was made, whatever its errors; 1 when it could not be\n"
"     made (no connection at start, no memory, file limit); 2 on a usage\n"
"     error.\n"
"\n"
"EXAMPLES\n"
"     rategen -r 5000 -d 10 -w 2 http://127.0.0.1:8080/\n"
"     rategen -r 2000 -d 30 -e 200,429 -H 'Content-Type: application/json'\n"
"         -b '{\"subject\":\"user-%n\"}' http://127.0.0.1:8080/v1/check\n";

static void
usage(void)
{
    fputs("usage: rategen -r RATE -d SECONDS [-c MAXCONN] [-w WARMUP] "
        "[-t TIMEOUT_MS]\n"
        "               [-k IDLE_MS] [-m METHOD] [-H 'Name: value']... "
        "[-b BODY]\n"
        "               [-s START_INDEX] [-e STATUS,...] [-o TRACE] URL\n"
        "       rategen -h\n", stderr);
    exit(2);
}

static void __attribute__((format(printf, 2, 3), noreturn))
die(int code, const char *fmt, ...)
{
    va_list ap;

    fputs("rategen: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(code);
}

static uint64_t
now_ns(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_MONOTONIC, &ts) == -1)
        die(1, "clock_gettime: %s", strerror(errno));
    return (uint64_t)ts.tv_sec * NSEC + (uint64_t)ts.tv_nsec;
}

static uint64_t
sched_ns(uint64_t i)
{
    return t0 + i * NSEC / opt_rate;
}

/* How many requests are due at now. */
static uint64_t
due_count(uint64_t now)
{
    uint64_t n;

    if (now < t0)
        return 0;
    n = (now - t0) * opt_rate / NSEC + 1;
    return n < total ? n : total;
}

/* The first socket error is shown; the rest are only counted. */
static void
note_error(const char *what, int err)
{
    if (error_shown)
        return;
    error_shown = 1;
    if (err != 0)
        fprintf(stderr, "rategen: first socket error: %s: %s\n", what,
            strerror(err));
    else
        fprintf(stderr, "rategen: first socket error: %s\n", what);
}

static void
list_append(struct connlist *l, struct conn *c)
{
    c->next = NULL;
    c->prev = l->tail;
    if (l->tail != NULL)
        l->tail->next = c;
    else
        l->head = c;
    l->tail = c;
}

static void
list_push(struct connlist *l, struct conn *c)
{
    c->prev = NULL;
    c->next = l->head;
    if (l->head != NULL)
        l->head->prev = c;
    else
        l->tail = c;
    l->head = c;
}

static void
list_remove(struct connlist *l, struct conn *c)
{
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        l->head = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    else
        l->tail = c->prev;
    c->prev = c->next = NULL;
}

static struct conn *
conn_open(void)
{
    struct epoll_event ev;
    struct conn *c;
    int fd, one = 1, saved;
    const char *what;

    if ((c = freelist) == NULL) {
        note_error("no free connection slot", 0);
        return NULL;
    }
    what = "socket";
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd == -1)
        goto fail;
    what = "setsockopt TCP_NODELAY";
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == -1)
        goto fail;
    what = "connect";
    if (connect(fd, (struct sockaddr *)&target, sizeof(target)) == 0)
        c->state = CS_WRITING;
    else if (errno == EINPROGRESS)
        c->state = CS_CONNECTING;
    else
        goto fail;
    what = "epoll_ctl";
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.ptr = c;
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == -1)
        goto fail;
    freelist = c->next;
    c->prev = c->next = NULL;
    c->fd = fd;
    c->rlen = 0;
    opened++;
    if (++nopen > peak_open)
        peak_open = nopen;
    return c;

fail:
    saved = errno;
    if (fd != -1)
        (void)close(fd);
    c->state = CS_FREE;
    note_error(what, saved);
    errno = saved;
    return NULL;
}

static void
conn_close(struct conn *c)
{
    switch (c->state) {
    case CS_CONNECTING:
    case CS_WRITING:
    case CS_READING:
        list_remove(&busy, c);
        break;
    case CS_IDLE:
        list_remove(&idle, c);
        break;
    case CS_FREE:
        return;
    }
    (void)close(c->fd);
    c->fd = -1;
    c->state = CS_FREE;
    c->rlen = 0;
    c->next = freelist;
    freelist = c;
    nopen--;
}

static void
req_fail(struct conn *c, enum outcome o, const char *what, int err)
{
    if (c->req >= warm) {
        if (o == OUT_TIMEOUT)
            st_timeouts++;
        else
            st_sock_err++;
    }
    if (o == OUT_SOCKET)
        note_error(what, err);
    conn_close(c);
}

/* A whole response was read.  Returns -1 if the connection was closed. */
static int
req_done(struct conn *c)
{
    uint64_t now, us;

    if (c->req >= warm) {
        now = now_ns();
        us = (now - c->sched) / 1000;
        lat[nlat++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
        st_completed++;
        if (c->status < 600 && expect[c->status])
            st_ok++;
        else {
            st_status_err++;
            st_by_status[c->status < 600 ? c->status : 0]++;
        }
        st_last_done = now;
        if (trace != NULL)
            fprintf(trace, "%" PRIu64 " %" PRIu64 " %d %" PRIu64 "\n",
                (c->sched - t0) / 1000 - opt_warmup * 1000000, us,
                c->status, c->lag / 1000);
    }
    /*
     * Close unless the server keeps it alive, the request was written
     * whole and nothing came after the response.
     */
    if (!c->keepalive || c->state != CS_READING || c->rlen > 0) {
        conn_close(c);
        return -1;
    }
    list_remove(&busy, c);
    c->state = CS_IDLE;
    c->idle_since = now_ns();
    list_push(&idle, c);
    return 0;
}

/* Does the comma-separated list v hold token tok (any case)? */
static int
has_token(const char *v, size_t len, const char *tok)
{
    size_t i = 0, b, e, tlen = strlen(tok);

    while (i < len) {
        while (i < len && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        b = i;
        while (i < len && v[i] != ',')
            i++;
        e = i;
        while (e > b && (v[e - 1] == ' ' || v[e - 1] == '\t'))
            e--;
        if (e - b == tlen && strncasecmp(v + b, tok, tlen) == 0)
            return 1;
    }
    return 0;
}

static int
name_is(const char *name, size_t len, const char *want)
{
    return strlen(want) == len && strncasecmp(name, want, len) == 0;
}

static int
resp_header(struct conn *c, const char *line, size_t len)
{
    const char *colon, *v;
    size_t nlen, vlen, i;
    uint64_t n;

    if (line[0] == ' ' || line[0] == '\t')
        return 0;               /* obsolete line folding: ignored */
    if ((colon = memchr(line, ':', len)) == NULL || colon == line)
        return -1;
    nlen = (size_t)(colon - line);
    v = colon + 1;
    vlen = len - nlen - 1;
    while (vlen > 0 && (*v == ' ' || *v == '\t')) {
        v++;
        vlen--;
    }
    while (vlen > 0 && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
        vlen--;
    if (name_is(line, nlen, "content-length")) {
        if (vlen == 0 || vlen > 18)
            return -1;
        n = 0;
        for (i = 0; i < vlen; i++) {
            if (v[i] < '0' || v[i] > '9')
                return -1;
            n = n * 10 + (uint64_t)(v[i] - '0');
        }
        if (c->have_len && c->remain != n)
            return -1;
        c->have_len = 1;
        c->remain = n;
    } else if (name_is(line, nlen, "transfer-encoding")) {
        if (has_token(v, vlen, "chunked"))
            c->chunked = 1;
    } else if (name_is(line, nlen, "connection")) {
        if (has_token(v, vlen, "keep-alive"))
            c->keepalive = 1;
        if (has_token(v, vlen, "close"))
            c->keepalive = 0;
    }
    return 0;
}

static int
resp_headers_end(struct conn *c)
{
    if (c->status < 200) {
        if (c->status == 101)
            return -1;  /* no upgrades asked for */
        c->ps = PS_STATUS;      /* an interim response */
        return 0;
    }
    if (req_is_head || c->status == 204 || c->status == 304)
        c->ps = PS_DONE;
    else if (c->chunked)
        c->ps = PS_CHUNK_SIZE;
    else if (c->have_len)
        c->ps = c->remain > 0 ? PS_BODY : PS_DONE;
    else {
        c->keepalive = 0;
        c->ps = PS_UNTIL_CLOSE;
    }
    return 0;
}

static int
chunk_size(struct conn *c, const char *line, size_t len)
{
    uint64_t n = 0;
    size_t i;
    int d;

    for (i = 0; i < len; i++) {
        if (line[i] >= '0' && line[i] <= '9')
            d = line[i] - '0';
        else if (line[i] >= 'a' && line[i] <= 'f')
            d = line[i] - 'a' + 10;
        else if (line[i] >= 'A' && line[i] <= 'F')
            d = line[i] - 'A' + 10;
        else
            break;
        if (n > (UINT64_MAX >> 4))
            return -1;
        n = (n << 4) | (uint64_t)d;
    }
    if (i == 0 || (i < len && line[i] != ';' && line[i] != ' ' &&
        line[i] != '\t'))
        return -1;
    if (n == 0)
        c->ps = PS_TRAILER;
    else {
        c->remain = n;
        c->ps = PS_CHUNK_DATA;
    }
    return 0;
}

static int
resp_line(struct conn *c, const char *line, size_t len)
{
    switch (c->ps) {
    case PS_STATUS:
        if (len == 0)
            return 0;   /* a stray CRLF before it */
        if (len < 12 || memcmp(line, "HTTP/1.", 7) != 0 ||
            line[7] < '0' || line[7] > '9' || line[8] != ' ' ||
            line[9] < '1' || line[9] > '9' ||
            line[10] < '0' || line[10] > '9' ||
            line[11] < '0' || line[11] > '9' ||
            (len > 12 && line[12] != ' '))
            return -1;
        c->status = (line[9] - '0') * 100 + (line[10] - '0') * 10 +
            (line[11] - '0');
        c->keepalive = line[7] != '0';
        c->chunked = 0;
        c->have_len = 0;
        c->remain = 0;
        c->ps = PS_HEADER;
        return 0;
    case PS_HEADER:
        if (len == 0)
            return resp_headers_end(c);
        return resp_header(c, line, len);
    case PS_CHUNK_SIZE:
        return chunk_size(c, line, len);
    case PS_CHUNK_END:
        if (len != 0)
            return -1;
        c->ps = PS_CHUNK_SIZE;
        return 0;
    case PS_TRAILER:
        if (len == 0)
            c->ps = PS_DONE;
        return 0;
    default:
        return -1;
    }
}

/*
 * Consume what is in rbuf.  Returns 1 when the response is complete (any
 * bytes after it stay in rbuf), 0 when more is needed, -1 when it is
 * malformed.
 */
static int
resp_parse(struct conn *c)
{
    size_t off = 0, n, len;
    const char *line, *nl;

    while (c->ps != PS_DONE && off < c->rlen) {
        switch (c->ps) {
        case PS_BODY:
        case PS_CHUNK_DATA:
            n = c->rlen - off;
            if (n > c->remain)
                n = (size_t)c->remain;
            off += n;
            c->remain -= n;
            if (c->remain == 0)
                c->ps = c->ps == PS_BODY ? PS_DONE :
                    PS_CHUNK_END;
            break;
        case PS_UNTIL_CLOSE:
            off = c->rlen;
            break;
        default:
            line = c->rbuf + off;
            nl = memchr(line, '\n', c->rlen - off);
            if (nl == NULL)
                goto partial;
            len = (size_t)(nl - line);
            off += len + 1;
            if (len > 0 && line[len - 1] == '\r')
                len--;
            if (resp_line(c, line, len) == -1)
                return -1;
            break;
        }
    }
partial:
    if (off > 0) {
        memmove(c->rbuf, c->rbuf + off, c->rlen - off);
        c->rlen -= off;
    }
    if (c->ps == PS_DONE)
        return 1;
    if (c->rlen == sizeof(c->rbuf))
        return -1;              /* a line longer than rbuf */
    return 0;
}

/*
 * Read until the socket has no more (edge-triggered), or until a response
 * is complete with room left over in the read: the server sends nothing
 * more until the next request, and whatever it does send (a close) comes
 * as a new edge.  That spares a read that would only find EAGAIN.
 */
static void
conn_read(struct conn *c)
{
    ssize_t n;
    size_t room;
    int r;

    for (;;) {
        room = sizeof(c->rbuf) - c->rlen;
        n = read(c->fd, c->rbuf + c->rlen, room);
        if (n == -1) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            if (c->state == CS_IDLE)
                conn_close(c);
            else
                req_fail(c, OUT_SOCKET, "read", errno);
            return;
        }
        if (n == 0) {
            if (c->state == CS_IDLE)
                conn_close(c);
            else if (c->ps == PS_UNTIL_CLOSE)
                (void)req_done(c);
            else
                req_fail(c, OUT_SOCKET,
                    "connection closed before the whole "
                    "response", 0);
            return;
        }
        if (c->state == CS_IDLE) {
            conn_close(c);      /* unasked-for data */
            return;
        }
        c->rlen += (size_t)n;
        r = resp_parse(c);
        if (r == -1) {
            req_fail(c, OUT_SOCKET, "malformed response", 0);
            return;
        }
        if (r == 1 && (req_done(c) == -1 || (size_t)n < room))
            return;
    }
}

/* Write what is left of the request.  Returns -1 if it closed c. */
static int
conn_send(struct conn *c)
{
    struct iovec iov[3 + 2 * MAX_SUBST];
    struct msghdr msg;
    size_t skip;
    ssize_t n;
    int niov, i, k;

    while (c->woff < c->wlen) {
        niov = 0;
        iov[niov].iov_base = req_head;
        iov[niov++].iov_len = req_headlen;
        if (req_has_len) {
            iov[niov].iov_base = c->clen;
            iov[niov++].iov_len = c->clenlen;
        }
        for (k = 0; k <= body_nsubst; k++) {
            iov[niov].iov_base = (void *)(uintptr_t)body_seg[k];
            iov[niov++].iov_len = body_seglen[k];
            if (k < body_nsubst) {
                iov[niov].iov_base = c->num;
                iov[niov++].iov_len = c->numlen;
            }
        }
        skip = c->woff;
        for (i = 0; i < niov && skip >= iov[i].iov_len; i++)
            skip -= iov[i].iov_len;
        if (i == niov)
            break;              /* cannot happen: woff < wlen */
        iov[i].iov_base = (char *)iov[i].iov_base + skip;
        iov[i].iov_len -= skip;
        memset(&msg, 0, sizeof(msg));
        msg.msg_iov = iov + i;
        msg.msg_iovlen = (size_t)(niov - i);
        n = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
        if (n == -1) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;       /* EPOLLOUT will come */
            req_fail(c, OUT_SOCKET, "send", errno);
            return -1;
        }
        c->woff += (size_t)n;
    }
    c->state = CS_READING;
    return 0;
}

static void
conn_event(struct conn *c, uint32_t ev)
{
    socklen_t len;
    int err;

    if (c->state == CS_FREE)
        return;         /* closed earlier in this batch */
    if (c->state == CS_CONNECTING) {
        if ((ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0)
            return;
        err = 0;
        len = sizeof(err);
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) == -1)
            err = errno;
        if (err != 0) {
            req_fail(c, OUT_SOCKET, "connect", err);
            return;
        }
        c->state = CS_WRITING;
    }
    if (c->state == CS_WRITING && conn_send(c) == -1)
        return;
    if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        conn_read(c);
}

/* Give request i, due at s, to c and count its send lag. */
static void
req_start(struct conn *c, uint64_t i, uint64_t s)
{
    size_t blen;
    int n;

    c->req = i;
    c->sched = s;
    c->woff = 0;
    c->ps = PS_STATUS;
    c->status = 0;
    c->rlen = 0;
    c->numlen = 0;
    c->clenlen = 0;
    if (body_nsubst > 0) {
        n = snprintf(c->num, sizeof(c->num), "%" PRIu64,
            opt_start + i);
        c->numlen = n > 0 ? (size_t)n : 0;
    }
    blen = body_fixed + (size_t)body_nsubst * c->numlen;
    if (req_has_len) {
        n = snprintf(c->clen, sizeof(c->clen), "%zu\r\n\r\n", blen);
        c->clenlen = n > 0 ? (size_t)n : 0;
    }
    c->wlen = req_headlen + c->clenlen + blen;
    list_append(&busy, c);
}

/* Send every request that is due, in order, as connections allow. */
static void
dispatch(uint64_t now)
{
    struct conn *c;
    uint64_t s, lag;

    due = due_count(now);
    while (next_send < due) {
        s = sched_ns(next_send);
        if (s + timeout_ns <= now) {
            /* It waited its whole timeout in the queue. */
            if (next_send >= warm)
                st_timeouts++;
            next_send++;
            continue;
        }
        if ((c = idle.head) != NULL) {
            list_remove(&idle, c);
            c->state = CS_WRITING;
        } else if (nopen < opt_maxconn) {
            if ((c = conn_open()) == NULL) {
                if (next_send >= warm)
                    st_sock_err++;
                next_send++;
                continue;
            }
        } else
            break;              /* queued until one is free */
        req_start(c, next_send, s);
        if (next_send >= warm) {
            st_sent++;
            lag = now_ns() - s;
            c->lag = lag;
            if (lag > st_lag_max)
                st_lag_max = lag;
            if (lag > LATE_NS)
                st_late++;
        }
        next_send++;
        if (c->state == CS_WRITING)
            (void)conn_send(c);
    }
}

/* Time out requests in flight; busy is in order of scheduled time. */
static void
expire(uint64_t now)
{
    struct conn *c;

    while ((c = busy.head) != NULL && c->sched + timeout_ns <= now)
        req_fail(c, OUT_TIMEOUT, NULL, 0);
}

/*
 * Close the connections idle for IDLE_MS; idle is newest first.  A server
 * closes an idle keep-alive connection on its own clock (lighttpd after
 * 5 s, nginx after 75 s), and a request sent on one just as it does is
 * lost: a client that lets go first never meets that race.
 */
static void
reap_idle(uint64_t now)
{
    struct conn *c;

    if (opt_idle_ms == 0)
        return;
    while ((c = idle.tail) != NULL && c->idle_since + idle_ns <= now)
        conn_close(c);
}

static void
run(void)
{
    struct epoll_event ev[MAX_EVENTS];
    struct timespec ts;
    uint64_t now, wake, t;
    int i, n;

    for (;;) {
        now = now_ns();
        expire(now);
        dispatch(now);
        reap_idle(now);
        if (next_send >= total && busy.head == NULL)
            break;

        wake = UINT64_MAX;
        if (due < total)
            wake = sched_ns(due);
        if (next_send < due &&
            (t = sched_ns(next_send) + timeout_ns) < wake)
            wake = t;
        if (busy.head != NULL &&
            (t = busy.head->sched + timeout_ns) < wake)
            wake = t;
        if (opt_idle_ms != 0 && idle.tail != NULL &&
            (t = idle.tail->idle_since + idle_ns) < wake)
            wake = t;
        if (wake < now + MIN_STEP_NS)
            wake = now + MIN_STEP_NS;
        if (wake == UINT64_MAX) {
            ts.tv_sec = 3600;   /* cannot happen: something is pending */
            ts.tv_nsec = 0;
        } else {
            now = now_ns();
            t = wake > now ? wake - now : 0;
            ts.tv_sec = (time_t)(t / NSEC);
            ts.tv_nsec = (long)(t % NSEC);
        }
        n = epoll_pwait2(epfd, ev, MAX_EVENTS, &ts, NULL);
        if (n == -1) {
            if (errno == EINTR)
                continue;
            die(1, "epoll_pwait2: %s", strerror(errno));
        }
        for (i = 0; i < n; i++)
            conn_event(ev[i].data.ptr, ev[i].events);
    }
}

/* The first connection, made before the clock starts: can we run at all? */
static void
first_connect(const char *url)
{
    struct pollfd pfd;
    struct conn *c;
    socklen_t len;
    int err, r;

    error_shown = 1;    /* said below instead */
    if ((c = conn_open()) == NULL)
        die(1, "cannot connect to %s: %s", url, strerror(errno));
    if (c->state == CS_CONNECTING) {
        pfd.fd = c->fd;
        pfd.events = POLLOUT;
        pfd.revents = 0;
        do
            r = poll(&pfd, 1, (int)opt_timeout_ms);
        while (r == -1 && errno == EINTR);
        if (r == -1)
            die(1, "poll: %s", strerror(errno));
        if (r == 0)
            die(1, "cannot connect to %s: timed out after %" PRIu64
                " ms", url, opt_timeout_ms);
        err = 0;
        len = sizeof(err);
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) == -1)
            err = errno;
        if (err != 0)
            die(1, "cannot connect to %s: %s", url, strerror(err));
    }
    /* It was in no list yet. */
    c->state = CS_IDLE;
    c->idle_since = now_ns();
    list_push(&idle, c);
}

static uint64_t
parse_num(const char *s, uint64_t min, uint64_t max, const char *what)
{
    unsigned long long v;
    char *end;

    if (*s < '0' || *s > '9') {
        fprintf(stderr, "rategen: %s: not a number: %s\n", what, s);
        usage();
    }
    errno = 0;
    v = strtoull(s, &end, 10);
    if (*end != '\0') {
        fprintf(stderr, "rategen: %s: not a number: %s\n", what, s);
        usage();
    }
    if (errno == ERANGE || v < min || v > max) {
        fprintf(stderr, "rategen: %s must be %" PRIu64 " to %" PRIu64
            ": %s\n", what, min, max, s);
        usage();
    }
    return (uint64_t)v;
}

static void
parse_expect(const char *s)
{
    char buf[8];
    const char *p = s, *q;
    size_t len;
    int n = 0;

    memset(expect, 0, sizeof(expect));
    for (;;) {
        q = strchr(p, ',');
        len = q != NULL ? (size_t)(q - p) : strlen(p);
        if (len == 0 || len >= sizeof(buf)) {
            fprintf(stderr, "rategen: -e: bad status list: %s\n", s);
            usage();
        }
        memcpy(buf, p, len);
        buf[len] = '\0';
        expect[parse_num(buf, 100, 599, "-e status")] = 1;
        if (++n > MAX_EXPECT) {
            fprintf(stderr, "rategen: -e: more than %d statuses\n",
                MAX_EXPECT);
            usage();
        }
        if (q == NULL)
            break;
        p = q + 1;
    }
}

static void
parse_url(const char *url)
{
    const char *p, *hend, *path;
    char *host;
    size_t hlen, i;
    uint64_t port = 80;

    if (strncasecmp(url, "https://", 8) == 0)
        die(2, "https is not supported, only plain http://: %s", url);
    if (strncasecmp(url, "http://", 7) != 0)
        die(2, "URL must be http://HOST[:PORT][/PATH]: %s", url);
    p = url + 7;
    hend = p + strcspn(p, ":/?#@[");
    if (*hend == '@' || *hend == '[')
        die(2, "URL: user info and IPv6 hosts are not supported: %s",
            url);
    hlen = (size_t)(hend - p);
    if (hlen == 0)
        die(2, "URL has no host: %s", url);
    if ((host = malloc(hlen + 1)) == NULL)
        die(1, "out of memory");
    memcpy(host, p, hlen);
    host[hlen] = '\0';
    memset(&target, 0, sizeof(target));
    target.sin_family = AF_INET;
    if (strcasecmp(host, "localhost") == 0)
        target.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    else if (inet_pton(AF_INET, host, &target.sin_addr) != 1)
        die(2, "URL host must be a numeric IPv4 address or localhost: "
            "%s", host);
    free(host);

    path = hend;
    if (*hend == ':') {
        char portbuf[8];
        size_t plen = strcspn(hend + 1, "/?#");

        if (plen == 0 || plen >= sizeof(portbuf))
            die(2, "URL has a bad port: %s", url);
        memcpy(portbuf, hend + 1, plen);
        portbuf[plen] = '\0';
        port = parse_num(portbuf, 1, 65535, "URL port");
        path = hend + 1 + plen;
    }
    target.sin_port = htons((uint16_t)port);
    hlen = (size_t)(path - p);
    if ((target_name = malloc(hlen + 1)) == NULL)
        die(1, "out of memory");
    memcpy(target_name, p, hlen);
    target_name[hlen] = '\0';

    hlen = strcspn(path, "#");
    if ((target_path = malloc(hlen + 2)) == NULL)
        die(1, "out of memory");
    i = 0;
    if (*path != '/')
        target_path[i++] = '/';
    memcpy(target_path + i, path, hlen);
    target_path[i + hlen] = '\0';
    for (i = 0; target_path[i] != '\0'; i++)
        if ((unsigned char)target_path[i] <= ' ' ||
            target_path[i] == 0x7f)
            die(2, "URL path has a space or control character: %s",
                url);
}

static int
is_tchar(int ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
        (ch >= '0' && ch <= '9') || (ch != '\0' &&
        strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

/* Check a -H value; returns 1 if it is a Host header. */
static int
check_header(const char *h)
{
    const char *colon;
    size_t i, nlen;

    if ((colon = strchr(h, ':')) == NULL || colon == h)
        die(2, "-H must be 'Name: value': %s", h);
    nlen = (size_t)(colon - h);
    for (i = 0; i < nlen; i++)
        if (!is_tchar((unsigned char)h[i]))
            die(2, "-H: bad header name: %s", h);
    for (i = 0; h[i] != '\0'; i++)
        if (h[i] == '\r' || h[i] == '\n')
            die(2, "-H: header has a line break: %s", h);
    if (name_is(h, nlen, "content-length") ||
        name_is(h, nlen, "transfer-encoding"))
        die(2, "-H: %.*s is set by rategen itself", (int)nlen, h);
    return name_is(h, nlen, "host");
}

static void
build_request(void)
{
    const char *p, *q;
    size_t len, bodylen;
    int i, have_host = 0, n;
    char *w;

    if (opt_method == NULL)
        opt_method = opt_body != NULL ? "POST" : "GET";
    if (*opt_method == '\0' || strlen(opt_method) > 32)
        die(2, "-m: bad method: %s", opt_method);
    for (p = opt_method; *p != '\0'; p++)
        if (!is_tchar((unsigned char)*p))
            die(2, "-m: bad method: %s", opt_method);
    req_is_head = strcmp(opt_method, "HEAD") == 0;
    req_has_len = opt_body != NULL ||
        (strcmp(opt_method, "GET") != 0 && !req_is_head);

    for (i = 0; i < opt_nheaders; i++)
        have_host |= check_header(opt_headers[i]);

    len = strlen(opt_method) + strlen(target_path) + 32;
    if (!have_host)
        len += strlen(target_name) + 8;
    for (i = 0; i < opt_nheaders; i++)
        len += strlen(opt_headers[i]) + 2;
    len += 32;
    if ((req_head = malloc(len)) == NULL)
        die(1, "out of memory");
    w = req_head;
    n = snprintf(w, len, "%s %s HTTP/1.1\r\n", opt_method, target_path);
    w += n;
    len -= (size_t)n;
    if (!have_host) {
        n = snprintf(w, len, "Host: %s\r\n", target_name);
        w += n;
        len -= (size_t)n;
    }
    for (i = 0; i < opt_nheaders; i++) {
        n = snprintf(w, len, "%s\r\n", opt_headers[i]);
        w += n;
        len -= (size_t)n;
    }
    n = snprintf(w, len, "%s", req_has_len ? "Content-Length: " : "\r\n");
    w += n;
    req_headlen = (size_t)(w - req_head);

    /* The body, cut at each %n. */
    body_seg[0] = "";
    body_seglen[0] = 0;
    body_nsubst = 0;
    body_fixed = 0;
    if (opt_body == NULL)
        return;
    bodylen = strlen(opt_body);
    if (bodylen > MAX_BODY)
        die(2, "-b: body is longer than %d bytes", MAX_BODY);
    p = opt_body;
    while ((q = strstr(p, "%n")) != NULL) {
        if (body_nsubst == MAX_SUBST)
            die(2, "-b: more than %d %%n in the body", MAX_SUBST);
        body_seg[body_nsubst] = p;
        body_seglen[body_nsubst] = (size_t)(q - p);
        body_fixed += (size_t)(q - p);
        body_nsubst++;
        p = q + 2;
    }
    body_seg[body_nsubst] = p;
    body_seglen[body_nsubst] = strlen(p);
    body_fixed += body_seglen[body_nsubst];
}

static void
raise_nofile(void)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)opt_maxconn + FD_SPARE;

    if (getrlimit(RLIMIT_NOFILE, &rl) == -1)
        die(1, "getrlimit: %s", strerror(errno));
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur >= need)
        return;
    if (rl.rlim_cur == RLIM_INFINITY)
        return;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need)
        die(1, "-c %" PRIu64 " needs %llu open files, but the hard "
            "limit is %llu", opt_maxconn, (unsigned long long)need,
            (unsigned long long)rl.rlim_max);
    rl.rlim_cur = rl.rlim_max != RLIM_INFINITY ? rl.rlim_max : need;
    if (setrlimit(RLIMIT_NOFILE, &rl) == -1)
        die(1, "setrlimit RLIMIT_NOFILE: %s", strerror(errno));
}

static int
cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return x < y ? -1 : x > y;
}

/* Nearest rank: the smallest value with at least num/den of all at or below. */
static uint32_t
pct(uint64_t num, uint64_t den)
{
    uint64_t rank;

    if (nlat == 0)
        return 0;
    rank = (nlat * num + den - 1) / den;
    if (rank == 0)
        rank = 1;
    return lat[rank - 1];
}

static void
report(void)
{
    uint64_t start, span;
    double achieved = 0.0;
    int i;

    qsort(lat, (size_t)nlat, sizeof(lat[0]), cmp_u32);
    /*
     * Over the timed part's own length, or longer when the last
     * response came after it: (n - 1)/RATE would overstate short runs.
     */
    start = sched_ns(warm);
    span = opt_seconds * NSEC;
    if (st_last_done > start && st_last_done - start > span)
        span = st_last_done - start;
    achieved = (double)st_ok * 1e9 / (double)span;
    if (printf("RATE offered=%" PRIu64 " seconds=%" PRIu64 " sent=%" PRIu64
        " completed=%" PRIu64 " achieved=%.1f ok=%" PRIu64
        " status_errors=%" PRIu64 " socket_errors=%" PRIu64
        " timeouts=%" PRIu64 " p50_us=%" PRIu32 " p95_us=%" PRIu32
        " p99_us=%" PRIu32 " p999_us=%" PRIu32 " max_us=%" PRIu32
        " conns=%" PRIu64 " opened=%" PRIu64 " send_lag_max_us=%" PRIu64
        " late_sends=%" PRIu64 "\n",
        opt_rate, opt_seconds, st_sent, st_completed, achieved, st_ok,
        st_status_err, st_sock_err, st_timeouts, pct(50, 100),
        pct(95, 100), pct(99, 100), pct(999, 1000), pct(1, 1),
        peak_open, opened, st_lag_max / 1000, st_late) < 0 ||
        fflush(stdout) == EOF)
        die(1, "writing the result: %s", strerror(errno));
    fprintf(stderr, "rategen: %" PRIu64 "/s for %" PRIu64 " s: %.1f/s ok; "
        "%" PRIu64 " ok, %" PRIu64 " errors; p50 %.3f ms, p99 %.3f ms, "
        "max %.3f ms\n", opt_rate, opt_seconds, achieved, st_ok,
        st_status_err + st_sock_err + st_timeouts, pct(50, 100) / 1e3,
        pct(99, 100) / 1e3, pct(1, 1) / 1e3);
    for (i = 0; i < 600; i++) {
        if (st_by_status[i] == 0)
            continue;
        if (i == 0)
            fprintf(stderr, "rategen: status 600 or over: %" PRIu64
                " times\n", st_by_status[i]);
        else
            fprintf(stderr, "rategen: status %d: %" PRIu64 " times\n", i,
                st_by_status[i]);
    }
}

int
main(int argc, char *argv[])
{
    uint64_t i, timed;
    int ch, have_r = 0, have_d = 0;

    expect[200] = 1;
    while ((ch = getopt(argc, argv, "r:d:c:w:t:k:m:H:b:s:e:o:h")) != -1) {
        switch (ch) {
        case 'r':
            opt_rate = parse_num(optarg, 1, MAX_RATE, "-r RATE");
            have_r = 1;
            break;
        case 'd':
            opt_seconds = parse_num(optarg, 1, MAX_SECONDS,
                "-d SECONDS");
            have_d = 1;
            break;
        case 'c':
            opt_maxconn = parse_num(optarg, 1, MAX_CONN,
                "-c MAXCONN");
            break;
        case 'w':
            opt_warmup = parse_num(optarg, 0, MAX_SECONDS,
                "-w WARMUP");
            break;
        case 't':
            opt_timeout_ms = parse_num(optarg, 1, MAX_TIMEOUT_MS,
                "-t TIMEOUT_MS");
            break;
        case 'k':
            opt_idle_ms = parse_num(optarg, 0, MAX_TIMEOUT_MS,
                "-k IDLE_MS");
            break;
        case 'm':
            opt_method = optarg;
            break;
        case 'H':
            if (opt_nheaders == MAX_HEADERS) {
                fprintf(stderr, "rategen: more than %d -H\n",
                    MAX_HEADERS);
                usage();
            }
            opt_headers[opt_nheaders++] = optarg;
            break;
        case 'b':
            opt_body = optarg;
            break;
        case 's':
            opt_start = parse_num(optarg, 0, UINT64_MAX,
                "-s START_INDEX");
            break;
        case 'e':
            parse_expect(optarg);
            break;
        case 'o':
            opt_trace = optarg;
            break;
        case 'h':
            if (fputs(help_text, stdout) == EOF ||
                fflush(stdout) == EOF)
                die(1, "writing the help: %s",
                    strerror(errno));
            return 0;
        default:
            usage();
        }
    }
    argc -= optind;
    argv += optind;
    if (!have_r || !have_d) {
        fprintf(stderr, "rategen: -r and -d are required\n");
        usage();
    }
    if (argc != 1) {
        fprintf(stderr, "rategen: %s\n", argc == 0 ? "no URL" :
            "more than one URL");
        usage();
    }
    parse_url(argv[0]);
    build_request();

    warm = opt_warmup * opt_rate;
    timed = opt_seconds * opt_rate;
    total = warm + timed;
    if (total - 1 > UINT64_MAX - opt_start)
        die(2, "-s START_INDEX + requests overflows");
    timeout_ns = opt_timeout_ms * 1000000ULL;
    idle_ns = opt_idle_ms * 1000000ULL;

    if (opt_trace != NULL && (trace = fopen(opt_trace, "w")) == NULL)
        die(1, "%s: %s", opt_trace, strerror(errno));
    raise_nofile();
    if ((lat = malloc((size_t)timed * sizeof(lat[0]))) == NULL)
        die(1, "cannot allocate %" PRIu64 " latencies", timed);
    if ((conns = calloc((size_t)opt_maxconn, sizeof(conns[0]))) == NULL)
        die(1, "cannot allocate %" PRIu64 " connections", opt_maxconn);
    for (i = opt_maxconn; i > 0; i--) {
        conns[i - 1].fd = -1;
        conns[i - 1].state = CS_FREE;
        conns[i - 1].next = freelist;
        freelist = &conns[i - 1];
    }
    if ((epfd = epoll_create1(EPOLL_CLOEXEC)) == -1)
        die(1, "epoll_create1: %s", strerror(errno));
    /* A sleep may end this much after its time (50 us by default). */
    (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);

    first_connect(argv[0]);
    error_shown = 0;
    t0 = now_ns();
    run();
    if (trace != NULL && (ferror(trace) | fclose(trace)) != 0)
        die(1, "writing %s failed", opt_trace);
    report();
    return 0;
}
