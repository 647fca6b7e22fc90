/*
 * store_redis.c -- the worker's connection to Redis and the one script.
 *
 * Each worker owns one blocking hiredis context, opened after fork.  Both
 * the connect and every command are bounded by the configured timeouts
 * (hiredis 0.14 applies the connect timeout only to connect(), so the
 * command timeout is set again after every connect).  After any failure
 * the context is dropped -- hiredis contexts are dead after an I/O error --
 * and the worker answers "unavailable" at once until redis_backoff_ms has
 * passed, so an outage costs a client one fast 503, not a hanging socket.
 *
 * The script is loaded with SCRIPT LOAD on every connect and run with
 * EVALSHA.  Redis forgets scripts on restart, failover and SCRIPT FLUSH; a
 * NOSCRIPT reply is answered by one EVAL of the full text (which also puts
 * it back in the script cache) and the check goes on.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>
#include <openssl/sha.h>

#include "service.h"

void
redis_store_init(struct redis_store *rs, const struct rl_config *cfg)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char md[SHA_DIGEST_LENGTH];
    size_t i;

    memset(rs, 0, sizeof(*rs));
    rs->cfg = cfg;
    SHA1((const unsigned char *)embedded_check_lua,
        strlen(embedded_check_lua), md);
    for (i = 0; i < SHA_DIGEST_LENGTH; i++) {
        rs->sha[2 * i] = hex[md[i] >> 4];
        rs->sha[2 * i + 1] = hex[md[i] & 15];
    }
    rs->sha[40] = '\0';
}

void
redis_store_close(struct redis_store *rs)
{
    if (rs->ctx != NULL)
        redisFree(rs->ctx);
    rs->ctx = NULL;
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
 * Drops the connection.  A failure to connect (or to load the script right
 * after) starts the back-off, so a dead Redis costs no connect attempt per
 * request; a failed command does not, since the next request's fresh
 * connect tells at once whether Redis is down or was only slow this once.
 * Returns STORE_UNAVAILABLE so callers can "return redis_store_fail(...)".
 */
static int
redis_store_fail(struct redis_store *rs, const char *what, int backoff)
{
    const char *detail = "";

    if (rs->ctx != NULL && ((redisContext *)rs->ctx)->err)
        detail = ((redisContext *)rs->ctx)->errstr;
    snprintf(rs->error, sizeof(rs->error), "redis %s: %s", what,
        *detail ? detail : "failed");
    if (!backoff)
        log_warn("%s", rs->error);
    else if (rs->retry_at_ms == 0)
        log_warn("%s; answering 503 for %ld ms before reconnecting",
            rs->error, rs->cfg->redis_backoff_ms);
    redis_store_close(rs);
    if (backoff)
        rs->retry_at_ms = util_now_ms() + rs->cfg->redis_backoff_ms;
    return STORE_UNAVAILABLE;
}

/* Connects (unless connected) and loads the script.  STORE_OK or
 * STORE_UNAVAILABLE. */
static int
redis_store_connect(struct redis_store *rs)
{
    const char *addr = rs->cfg->redis;
    char host[256];
    const char *colon;
    redisContext *c;
    redisReply *r;
    size_t n;

    if (rs->ctx != NULL)
        return STORE_OK;
    if (rs->retry_at_ms != 0 && util_now_ms() < rs->retry_at_ms)
        return STORE_UNAVAILABLE;
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
        snprintf(rs->error, sizeof(rs->error), "redis connect: out of memory");
        rs->retry_at_ms = util_now_ms() + rs->cfg->redis_backoff_ms;
        return STORE_UNAVAILABLE;
    }
    rs->ctx = c;
    if (c->err)
        return redis_store_fail(rs, "connect", 1);
    if (redisSetTimeout(c, ms_to_tv(rs->cfg->redis_command_timeout_ms)) !=
        REDIS_OK)
        return redis_store_fail(rs, "set timeout", 1);
    r = redisCommand(c, "SCRIPT LOAD %s", embedded_check_lua);
    if (r == NULL)
        return redis_store_fail(rs, "SCRIPT LOAD", 1);
    if (r->type != REDIS_REPLY_STRING || strcmp(r->str, rs->sha) != 0) {
        snprintf(rs->error, sizeof(rs->error), "redis SCRIPT LOAD: %s",
            r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        freeReplyObject(r);
        redis_store_close(rs);
        log_error("%s", rs->error);
        rs->retry_at_ms = util_now_ms() + rs->cfg->redis_backoff_ms;
        return STORE_UNAVAILABLE;
    }
    freeReplyObject(r);
    if (rs->retry_at_ms != 0)
        log_info("redis: connected to %s again", rs->cfg->redis);
    rs->retry_at_ms = 0;
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
        snprintf(rs->error, sizeof(rs->error), "redis script: %s", r->str);
        log_error("%s", rs->error);
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
    snprintf(rs->error, sizeof(rs->error), "redis script: reply of "
        "unexpected shape");
    log_error("%s", rs->error);
    return STORE_BAD_REPLY;
}

/*
 * Whether a failed command met a connection the server had closed (end of
 * file, reset, broken pipe): then it was not executed.  A timeout is not
 * such a case -- the script may be running -- and is never retried.
 */
static int
redis_store_closed(const redisContext *c, int err)
{
    return c->err == REDIS_ERR_EOF || (c->err == REDIS_ERR_IO &&
        (err == ECONNRESET || err == EPIPE));
}

int
redis_store_check(struct redis_store *rs, struct limiter_call *call,
    int nlimits, struct rl_decision *d)
{
    redisReply *r;
    int rc, reused;

    reused = rs->ctx != NULL;
    if (redis_store_connect(rs) != STORE_OK)
        return STORE_UNAVAILABLE;
    r = redisCommandArgv(rs->ctx, call->argc, call->argv, call->argvlen);
    if (r == NULL && reused && redis_store_closed(rs->ctx, errno)) {
        /* Redis restarted (or a failover closed us) while this worker was
         * idle: the command never reached the old server.  One fresh
         * connection and one retry, so a restart costs no 503s. */
        log_info("redis: the connection was closed (%s); reconnecting",
            ((redisContext *)rs->ctx)->errstr);
        redis_store_close(rs);
        if (redis_store_connect(rs) != STORE_OK)
            return STORE_UNAVAILABLE;
        r = redisCommandArgv(rs->ctx, call->argc, call->argv, call->argvlen);
    }
    if (r == NULL)
        return redis_store_fail(rs, "EVALSHA", 0);
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
        const char *sha = call->argv[1];
        size_t shalen = call->argvlen[1];

        freeReplyObject(r);
        log_info("redis: script cache was emptied; loading it again");
        call->argv[0] = "EVAL";
        call->argvlen[0] = 4;
        call->argv[1] = embedded_check_lua;
        call->argvlen[1] = strlen(embedded_check_lua);
        r = redisCommandArgv(rs->ctx, call->argc, call->argv, call->argvlen);
        call->argv[0] = "EVALSHA";
        call->argvlen[0] = 7;
        call->argv[1] = sha;
        call->argvlen[1] = shalen;
        if (r == NULL)
            return redis_store_fail(rs, "EVAL", 0);
    }
    rc = redis_store_decode(rs, r, nlimits, d);
    freeReplyObject(r);
    return rc;
}

int
redis_store_ready(struct redis_store *rs)
{
    redisReply *r;
    int ok;

    if (redis_store_connect(rs) != STORE_OK)
        return STORE_UNAVAILABLE;
    r = redisCommand(rs->ctx, "SCRIPT EXISTS %s", rs->sha);
    if (r == NULL)
        return redis_store_fail(rs, "SCRIPT EXISTS", 0);
    ok = r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
        r->element[0]->type == REDIS_REPLY_INTEGER &&
        r->element[0]->integer == 1;
    freeReplyObject(r);
    if (!ok) {
        /* Flushed or restarted: load it again now, ready only if that
         * works. */
        r = redisCommand(rs->ctx, "SCRIPT LOAD %s", embedded_check_lua);
        if (r == NULL)
            return redis_store_fail(rs, "SCRIPT LOAD", 0);
        ok = r->type == REDIS_REPLY_STRING;
        freeReplyObject(r);
        if (!ok) {
            snprintf(rs->error, sizeof(rs->error), "redis: script not loaded");
            return STORE_UNAVAILABLE;
        }
    }
    return STORE_OK;
}
