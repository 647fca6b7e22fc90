/*
 * redis_store.c -- the worker's connection to Redis and the one script.
 *
 * Each worker owns one blocking hiredis context, opened after fork.  Both
 * the connect and every command are bounded by the configured timeouts
 * (hiredis 0.14 applies the connect timeout only to connect(), so the
 * command timeout is set again after every connect).  After any failure
 * the context is dropped -- hiredis contexts are dead after an I/O error.
 *
 * Connects that fail start a back-off: no blocking connect for
 * redis_backoff_ms, and a check answers "unavailable" at once, so an
 * outage costs a client one fast 503, not a hanging socket.  Meanwhile,
 * when Redis did not listen (refused, unreachable, closed on us), every
 * request looks at a non-blocking connect to the last address Redis had:
 * once that one is accepted, Redis is back, and the worker connects at
 * once instead of answering 503s for the rest of the back-off.  A Redis
 * that answers but fails (an error to SCRIPT LOAD, a timeout) is not
 * probed: it is retried when the back-off ends.
 *
 * A check's script call charges; when its connection dies before the reply
 * came (the server closed it: a restart, a failover, CLIENT KILL, the idle
 * timeout), it may or may not have run.  Every call carries a request key
 * of its own (limiter_request_key: a per-process random prefix and a
 * counter, no system call), under which lua/check.lua keeps the reply of a
 * call that charged for three seconds.  So the call is sent once more on a
 * new connection, marked as sent again (limiter_resend), and the script
 * replays the stored reply if there is one: a check is never charged
 * twice.  Only the resend looks for a stored reply, so a first send costs
 * the script no extra read.  A timeout is not retried: the budget of a
 * check is one command timeout, and a Redis too slow to answer is not
 * helped by more load.
 *
 * The script is loaded with SCRIPT LOAD on every connect and run with
 * EVALSHA.  Redis forgets scripts on restart, failover and SCRIPT FLUSH; a
 * NOSCRIPT reply is answered by one EVAL of the full text (which also puts
 * it back in the script cache) and the check goes on.
 *
 * rs->error is a short reason without addresses, since /health/ready shows
 * it; the details (hiredis' text, Redis' error replies) go to the log,
 * whose lines log_emit limits to one per call site and second.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <openssl/sha.h>

#include "service.h"

/* A call whose connection died is sent again only this soon after it was
 * first sent (the resend itself, after the reconnect, is what must be
 * this soon): lua/check.lua keeps a reply for 3 s (REPLAY_TTL_MS). */
#define REDIS_RESEND_MS 1000

/* How many connections a check or a readiness probe tries when Redis
 * closes them under it: the first, and one new one. */
#define REDIS_MAX_TRIES 2

/* What redis_store_connect() found, besides STORE_OK and
 * STORE_UNAVAILABLE: Redis accepted the connection and closed it before
 * SCRIPT LOAD was answered.  A new connection may work. */
#define REDIS_CLOSED (-10)

/*
 * The address to probe before any connect has worked: a Unix socket path
 * or a numeric address is known from the configuration; a host name is
 * learnt from the first connection (the probe never waits on DNS).
 */
static void
redis_store_addr(struct redis_store *rs)
{
    const char *addr = rs->cfg->redis, *colon;
    struct sockaddr_storage ss;
    struct sockaddr_un *un = (struct sockaddr_un *)&ss;
    struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    char host[64];
    size_t n;
    int port;

    memset(&ss, 0, sizeof(ss));
    if (strncmp(addr, "unix:", 5) == 0) {
        if ((n = strlen(addr + 5)) >= sizeof(un->sun_path))
            return;
        un->sun_family = AF_UNIX;
        memcpy(un->sun_path, addr + 5, n + 1);
        memcpy(rs->peer, &ss, sizeof(*un));
        rs->peer_len = sizeof(*un);
        return;
    }
    if ((colon = strrchr(addr, ':')) == NULL ||
        (port = atoi(colon + 1)) <= 0 || port > 65535)
        return;
    n = (size_t)(colon - addr);
    if (addr[0] == '[' && n >= 2) {
        addr++;
        n -= 2;
    }
    if (n >= sizeof(host))
        return;
    memcpy(host, addr, n);
    host[n] = '\0';
    if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)port);
        n = sizeof(*in4);
    } else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        n = sizeof(*in6);
    } else
        return;
    memcpy(rs->peer, &ss, n);
    rs->peer_len = (unsigned)n;
}

void
redis_store_init(struct redis_store *rs, const struct rl_config *cfg)
{
    unsigned char md[SHA_DIGEST_LENGTH], seed[8];
    size_t i;

    memset(rs, 0, sizeof(*rs));
    rs->cfg = cfg;
    rs->probe_fd = -1;
    SHA1((const unsigned char *)embedded_check_lua,
        strlen(embedded_check_lua), md);
    util_hex(md, sizeof(md), rs->sha);
    /* Request ids: 64 random bits per process, then a counter.  Should the
     * random source fail, the pid and the clock still tell processes
     * apart on one host. */
    if (util_random(seed, sizeof(seed)) == -1) {
        uint64_t v = ((uint64_t)getpid() << 40) ^ (uint64_t)util_now_ms();

        log_warn("redis: no random bytes for request ids; using the pid");
        for (i = 0; i < sizeof(seed); i++)
            seed[i] = (unsigned char)(v >> (8 * i));
    }
    util_hex(seed, sizeof(seed), rs->id_prefix);
    redis_store_addr(rs);
}

static void
redis_store_probe_stop(struct redis_store *rs)
{
    if (rs->probe_fd >= 0)
        close(rs->probe_fd);
    rs->probe_fd = -1;
}

void
redis_store_close(struct redis_store *rs)
{
    if (rs->ctx != NULL)
        redisFree(rs->ctx);
    rs->ctx = NULL;
    redis_store_probe_stop(rs);
}

static struct timeval
ms_to_tv(long ms)
{
    struct timeval tv;

    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    return tv;
}

/*
 * Whether a failed command met a connection the server closed (end of
 * file, reset, broken pipe).  The command may or may not have run.  err is
 * errno right after the failed call.
 */
static int
redis_store_closed(const redisContext *c, int err)
{
    return c->err == REDIS_ERR_EOF || (c->err == REDIS_ERR_IO &&
        (err == ECONNRESET || err == EPIPE));
}

static int
redis_store_timed_out(const redisContext *c, int err)
{
    return c->err == REDIS_ERR_IO && (err == EAGAIN || err == EWOULDBLOCK);
}

/*
 * Records a failure of what (a command, or "connect") and drops the
 * connection.  With backoff, no blocking connect is made for
 * redis_backoff_ms, and with probing (Redis did not listen) a
 * non-blocking probe may end that early; a failed command starts no
 * back-off, since the next request's fresh connect tells at once whether
 * Redis is down or was only slow this once.  err is errno right after
 * the failed call.  Returns STORE_UNAVAILABLE, for "return
 * redis_store_fail(...)".
 */
static int
redis_store_fail(struct redis_store *rs, const char *what, int err,
    int backoff, int probing)
{
    const redisContext *c = rs->ctx;
    const char *detail = "failed";

    if (c != NULL && c->err) {
        detail = c->errstr;
        snprintf(rs->error, sizeof(rs->error), "%s",
            redis_store_timed_out(c, err) ? "redis timed out" :
            "redis unreachable");
    } else
        snprintf(rs->error, sizeof(rs->error), "redis unreachable");
    if (!backoff)
        log_warn("redis %s (%s): %s", what, rs->cfg->redis, detail);
    else if (rs->retry_at_ms == 0)
        log_warn("redis %s (%s): %s; answering 503 for up to %ld ms before "
            "connecting again%s", what, rs->cfg->redis, detail,
            rs->cfg->redis_backoff_ms, probing && rs->peer_len > 0 ?
            ", or until it accepts connections again" : "");
    redis_store_close(rs);
    if (backoff) {
        rs->retry_at_ms = util_now_ms() + rs->cfg->redis_backoff_ms;
        rs->probing = probing && rs->peer_len > 0;
    }
    return STORE_UNAVAILABLE;
}

/* Remembers the address of the server c is connected to, for the probe. */
static void
redis_store_peer(struct redis_store *rs, const redisContext *c)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);

    if (getpeername(c->fd, (struct sockaddr *)&ss, &len) == 0 &&
        len <= sizeof(rs->peer)) {
        memcpy(rs->peer, &ss, len);
        rs->peer_len = len;
    }
}

/*
 * During a back-off after Redis did not listen: whether it accepts
 * connections again, without waiting.  A non-blocking connect to the last
 * address is started and then looked at (poll with no timeout) on this
 * and later requests; one that has been pending for longer than the
 * connect timeout is started anew.  Returns 1 when a connect was accepted.
 */
static int
redis_store_probe(struct redis_store *rs, int64_t now_ms)
{
    struct sockaddr_storage ss;
    struct pollfd pfd;
    socklen_t len;
    int fd, soerr;

    if (rs->probe_fd >= 0 &&
        now_ms - rs->probe_start_ms > rs->cfg->redis_connect_timeout_ms)
        redis_store_probe_stop(rs);
    if (rs->probe_fd < 0) {
        memcpy(&ss, rs->peer, rs->peer_len);
        fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
            0);
        if (fd == -1)
            return 0;
        if (connect(fd, (struct sockaddr *)&ss, rs->peer_len) == 0) {
            close(fd);
            return 1;
        }
        if (errno != EINPROGRESS && errno != EAGAIN) {
            close(fd);
            return 0;
        }
        rs->probe_fd = fd;
        rs->probe_start_ms = now_ms;
    }
    pfd.fd = rs->probe_fd;
    pfd.events = POLLOUT;
    pfd.revents = 0;
    if (poll(&pfd, 1, 0) != 1)
        return 0;
    soerr = 0;
    len = sizeof(soerr);
    if (getsockopt(rs->probe_fd, SOL_SOCKET, SO_ERROR, &soerr, &len) == -1)
        soerr = errno;
    redis_store_probe_stop(rs);
    return soerr == 0;
}

/*
 * Connects (unless connected) and loads the script.  Returns STORE_OK,
 * STORE_UNAVAILABLE (with the back-off started or running), or
 * REDIS_CLOSED when Redis closed the new connection before SCRIPT LOAD was
 * answered (no back-off: it accepted us, so it is up).
 */
static int
redis_store_connect(struct redis_store *rs)
{
    const char *addr = rs->cfg->redis;
    char host[256];
    const char *colon;
    redisContext *c;
    redisReply *r;
    int64_t now_ms;
    size_t n;
    int err;

    if (rs->ctx != NULL)
        return STORE_OK;
    if (rs->retry_at_ms != 0 && (now_ms = util_now_ms()) < rs->retry_at_ms &&
        !(rs->probing && redis_store_probe(rs, now_ms)))
        return STORE_UNAVAILABLE;
    redis_store_probe_stop(rs);
    if (strncmp(addr, "unix:", 5) == 0)
        c = redisConnectUnixWithTimeout(addr + 5,
            ms_to_tv(rs->cfg->redis_connect_timeout_ms));
    else {
        colon = strrchr(addr, ':');
        n = (size_t)(colon - addr);
        if (addr[0] == '[' && n >= 2) {     /* [::1]:6379 */
            addr++;
            n -= 2;
        }
        if (n >= sizeof(host))
            n = sizeof(host) - 1;
        memcpy(host, addr, n);
        host[n] = '\0';
        c = redisConnectWithTimeout(host, atoi(colon + 1),
            ms_to_tv(rs->cfg->redis_connect_timeout_ms));
    }
    if (c == NULL) {
        log_error("redis connect: out of memory");
        snprintf(rs->error, sizeof(rs->error), "redis unreachable");
        rs->retry_at_ms = util_now_ms() + rs->cfg->redis_backoff_ms;
        rs->probing = 0;
        return STORE_UNAVAILABLE;
    }
    rs->ctx = c;
    if (c->err)
        return redis_store_fail(rs, "connect", errno, 1, 1);
    if (redisSetTimeout(c, ms_to_tv(rs->cfg->redis_command_timeout_ms)) !=
        REDIS_OK)
        return redis_store_fail(rs, "set timeout", errno, 1, 0);
    r = redisCommand(c, "SCRIPT LOAD %s", embedded_check_lua);
    if (r == NULL) {
        err = errno;
        if (redis_store_closed(c, err)) {
            redis_store_fail(rs, "SCRIPT LOAD", err, 0, 0);
            return REDIS_CLOSED;
        }
        return redis_store_fail(rs, "SCRIPT LOAD", err, 1, 0);
    }
    if (r->type != REDIS_REPLY_STRING || strcmp(r->str, rs->sha) != 0) {
        log_error("redis SCRIPT LOAD (%s): %s; answering 503 for %ld ms "
            "before connecting again", rs->cfg->redis,
            r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply",
            rs->cfg->redis_backoff_ms);
        snprintf(rs->error, sizeof(rs->error), "redis script not loaded");
        freeReplyObject(r);
        redis_store_close(rs);
        rs->retry_at_ms = util_now_ms() + rs->cfg->redis_backoff_ms;
        rs->probing = 0;
        return STORE_UNAVAILABLE;
    }
    freeReplyObject(r);
    if (rs->retry_at_ms != 0)
        log_info("redis: connected to %s again", rs->cfg->redis);
    redis_store_peer(rs, c);
    rs->retry_at_ms = 0;
    rs->probing = 0;
    rs->error[0] = '\0';
    return STORE_OK;
}

static int
redis_store_decode(struct redis_store *rs, redisReply *r, int nlimits,
    struct rl_decision *d)
{
    long long v[2 + 5 * RL_MAX_LIMITS];
    size_t i;

    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(rs->error, sizeof(rs->error), "redis error reply");
        log_error("redis script: %s", r->str);
        return STORE_BAD_REPLY;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements > 2 + 5 * RL_MAX_LIMITS)
        goto bad;
    for (i = 0; i < r->elements; i++) {
        if (r->element[i]->type != REDIS_REPLY_INTEGER)
            goto bad;
        v[i] = r->element[i]->integer;
    }
    if (limiter_decode(v, r->elements, nlimits, d) == -1)
        goto bad;
    return STORE_OK;
bad:
    snprintf(rs->error, sizeof(rs->error), "redis bad reply");
    log_error("redis script: reply of unexpected shape");
    return STORE_BAD_REPLY;
}

/* Sends call once: EVALSHA of the script with the call's keys and
 * arguments, and on NOSCRIPT one EVAL of its text.  Returns the reply, or
 * NULL with *err set to errno after the failed call. */
static redisReply *
redis_store_run(struct redis_store *rs, const struct limiter_call *call,
    int *err)
{
    const char *argv[LIMITER_MAX_ARGS + 2];
    size_t argvlen[LIMITER_MAX_ARGS + 2];
    redisReply *r;

    argv[0] = "EVALSHA";
    argvlen[0] = 7;
    argv[1] = rs->sha;
    argvlen[1] = 40;
    memcpy(argv + 2, call->argv, (size_t)call->argc * sizeof(argv[0]));
    memcpy(argvlen + 2, call->argvlen,
        (size_t)call->argc * sizeof(argvlen[0]));
    r = redisCommandArgv(rs->ctx, call->argc + 2, argv, argvlen);
    *err = errno;
    if (r == NULL || r->type != REDIS_REPLY_ERROR ||
        strncmp(r->str, "NOSCRIPT", 8) != 0)
        return r;
    freeReplyObject(r);
    log_info("redis: script cache was emptied; loading it again");
    argv[0] = "EVAL";
    argvlen[0] = 4;
    argv[1] = embedded_check_lua;
    argvlen[1] = strlen(embedded_check_lua);
    r = redisCommandArgv(rs->ctx, call->argc + 2, argv, argvlen);
    *err = errno;
    return r;
}

int
redis_store_check(struct redis_store *rs, struct limiter_call *call,
    int nlimits, struct rl_decision *d)
{
    char id[LIMITER_ID_MAX + 1];
    redisReply *r = NULL;
    int64_t first_ms = 0;
    int attempt, rc, err = 0, keyed;

    snprintf(id, sizeof(id), "%s.%llx", rs->id_prefix, rs->id_next++);
    keyed = limiter_request_key(call, id) == 0;
    if (!keyed)
        log_error("redis: cannot add a request key to the call; a lost "
            "reply will not be sent again");
    for (attempt = 1; ; attempt++) {
        rc = redis_store_connect(rs);
        if (rc == STORE_UNAVAILABLE)
            return STORE_UNAVAILABLE;
        if (rc == STORE_OK) {
            if (first_ms == 0)
                first_ms = util_now_ms();
            else if (util_now_ms() - first_ms > REDIS_RESEND_MS) {
                /* The script may have forgotten the first reply by now
                 * (a connect slower than a second, say). */
                log_warn("redis: a check could not be sent again within "
                    "%d ms", REDIS_RESEND_MS);
                snprintf(rs->error, sizeof(rs->error), "redis unreachable");
                return STORE_UNAVAILABLE;
            }
            if ((r = redis_store_run(rs, call, &err)) != NULL)
                break;
            if (!redis_store_closed(rs->ctx, err))
                return redis_store_fail(rs, "EVALSHA", err, 0, 0);
            /* Closed with the call in flight: it may have run. */
            if (attempt == REDIS_MAX_TRIES || !keyed)
                return redis_store_fail(rs, "EVALSHA", err, 0, 0);
            log_warn("redis: the connection was closed with a check in "
                "flight (%s); sending it again on a new connection",
                ((redisContext *)rs->ctx)->errstr);
            redis_store_close(rs);
            limiter_resend(call);
        } else if (attempt == REDIS_MAX_TRIES)  /* REDIS_CLOSED */
            return STORE_UNAVAILABLE;
    }
    rc = redis_store_decode(rs, r, nlimits, d);
    freeReplyObject(r);
    return rc;
}

int
redis_store_ready(struct redis_store *rs)
{
    redisReply *r;
    int attempt, rc, err, ok;

    for (attempt = 1; ; attempt++) {
        rc = redis_store_connect(rs);
        if (rc == STORE_UNAVAILABLE)
            return STORE_UNAVAILABLE;
        if (rc == STORE_OK) {
            r = redisCommand(rs->ctx, "SCRIPT EXISTS %s", rs->sha);
            err = errno;
            if (r != NULL)
                break;
            if (attempt == REDIS_MAX_TRIES ||
                !redis_store_closed(rs->ctx, err))
                return redis_store_fail(rs, "SCRIPT EXISTS", err, 0, 0);
            log_info("redis: the connection was closed (%s); reconnecting",
                ((redisContext *)rs->ctx)->errstr);
            redis_store_close(rs);
        } else if (attempt == REDIS_MAX_TRIES)
            return STORE_UNAVAILABLE;
    }
    ok = r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
        r->element[0]->type == REDIS_REPLY_INTEGER &&
        r->element[0]->integer == 1;
    freeReplyObject(r);
    if (!ok) {
        /* Flushed or restarted: load it again now, ready only if that
         * works. */
        r = redisCommand(rs->ctx, "SCRIPT LOAD %s", embedded_check_lua);
        if (r == NULL)
            return redis_store_fail(rs, "SCRIPT LOAD", errno, 0, 0);
        ok = r->type == REDIS_REPLY_STRING;
        if (!ok)
            log_error("redis SCRIPT LOAD: %s", r->type == REDIS_REPLY_ERROR ?
                r->str : "unexpected reply");
        freeReplyObject(r);
        if (!ok) {
            snprintf(rs->error, sizeof(rs->error), "redis script not loaded");
            return STORE_UNAVAILABLE;
        }
    }
    return STORE_OK;
}
