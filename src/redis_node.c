/*
 * redis_node.c -- the Redis client's lowest layer above TLS: one node and
 * the worker's connection to it.
 *
 * Each connection is a blocking hiredis context, opened after fork.  Both
 * the connect and every command are bounded by the configured timeouts
 * (hiredis 0.14 applies the connect timeout only to connect(), so the
 * command timeout is set again after every connect).  After any failure
 * the context is dropped -- hiredis contexts are dead after an I/O error.
 * A new connection sends AUTH (redis_password), SELECT (redis_db), ROLE
 * (sentinel) and SCRIPT LOAD of the check script in one round trip.  With
 * redis_tls (and redis_sentinel_tls for the sentinels) TLS is started on
 * the context's socket right after the connect (redis_tls.c), the
 * handshake within the connect timeout; every command of the client is
 * sent and answered through redis_get_reply(), which is redisGetReply()
 * without TLS, so everything above it works the same either way.  A TLS
 * failure is a failed connect (the back-off, without the probe: the node
 * listens), its reason "redis tls: ..." in rs->error.
 *
 * Connects that fail start a back-off for that node: no blocking connect
 * for redis_backoff_ms, and a check answers "unavailable" at once, so an
 * outage costs a client one fast 503, not a hanging socket.  Meanwhile,
 * when the node did not listen (refused, unreachable, closed on us), every
 * request looks at a non-blocking connect to it: once that one is
 * accepted, the worker connects at once instead of answering 503s for the
 * rest of the back-off.  A node that answers but fails (an error to SCRIPT
 * LOAD, a timeout) is not probed: it is retried when the back-off ends.
 *
 * rs->error is a short reason without addresses, since /health/ready shows
 * it; the details (hiredis' text, Redis' error replies) go to the log,
 * whose lines log_emit limits to one per call site and second.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "redis_client.h"

/* The address of addr for the probe, when it is a Unix socket path or a
 * numeric address (the probe never waits on DNS; a host name's address is
 * learnt from the first connection). */
static void
redis_node_sockaddr(struct redis_node *n)
{
    const char *addr = n->addr;
    struct sockaddr_storage ss;
    struct sockaddr_un *un = (struct sockaddr_un *)&ss;
    struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    char host[64];
    size_t len;
    int port;

    memset(&ss, 0, sizeof(ss));
    n->peer_len = 0;
    if (strncmp(addr, "unix:", 5) == 0) {
        if ((len = strlen(addr + 5)) >= sizeof(un->sun_path))
            return;
        un->sun_family = AF_UNIX;
        memcpy(un->sun_path, addr + 5, len + 1);
        memcpy(n->peer, &ss, sizeof(*un));
        n->peer_len = sizeof(*un);
        return;
    }
    if (util_split_hostport(addr, host, sizeof(host), &port) == -1)
        return;
    if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)port);
        len = sizeof(*in4);
    } else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        len = sizeof(*in6);
    } else
        return;
    memcpy(n->peer, &ss, len);
    n->peer_len = (unsigned)len;
}

static void
redis_node_probe_stop(struct redis_node *n)
{
    if (n->probe_fd >= 0)
        close(n->probe_fd);
    n->probe_fd = -1;
}

void
redis_node_close(struct redis_node *n)
{
    redis_tls_free(n->tls);
    n->tls = NULL;
    if (n->ctx != NULL)
        redisFree(n->ctx);
    n->ctx = NULL;
    redis_node_probe_stop(n);
}

void
redis_node_set(struct redis_node *n, const char *addr)
{
    redis_node_close(n);
    memset(n, 0, sizeof(*n));
    n->probe_fd = -1;
    util_copy(n->addr, sizeof(n->addr), addr);
    redis_node_sockaddr(n);
}

static struct timeval
ms_to_tv(long ms)
{
    struct timeval tv;

    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    return tv;
}

int
redis_closed(const redisContext *c, int err)
{
    return c->err == REDIS_ERR_EOF || (c->err == REDIS_ERR_IO &&
        (err == ECONNRESET || err == EPIPE));
}

static int
redis_timed_out(const redisContext *c, int err)
{
    return c->err == REDIS_ERR_IO && (err == EAGAIN || err == EWOULDBLOCK);
}

redisContext *
redis_open(struct redis_store *rs, const char *addr, int sentinel,
    struct redis_tls **tls)
{
    const struct rl_config *cfg = rs->cfg;
    int64_t deadline_ms = util_now_ms() + cfg->redis_connect_timeout_ms;
    const char *name;
    char host[256];
    redisContext *c;
    int port;

    *tls = NULL;
    host[0] = '\0';
    if (strncmp(addr, "unix:", 5) == 0)
        c = redisConnectUnixWithTimeout(addr + 5,
            ms_to_tv(cfg->redis_connect_timeout_ms));
    else {
        if (util_split_hostport(addr, host, sizeof(host), &port) == -1) {
            util_copy(host, sizeof(host), addr);
            port = 0;
        }
        c = redisConnectWithTimeout(host, port,
            ms_to_tv(cfg->redis_connect_timeout_ms));
    }
    if (c != NULL && !c->err &&
        redisSetTimeout(c, ms_to_tv(cfg->redis_command_timeout_ms)) !=
        REDIS_OK && !c->err) {
        c->err = REDIS_ERR_IO;
        snprintf(c->errstr, sizeof(c->errstr), "cannot set the timeout");
    }
    if (c != NULL && !c->err && config_redis_tls(cfg, sentinel)) {
        /* The name to verify: redis_tls_server_name for the data nodes
         * when set, else the host of the address. */
        name = !sentinel && cfg->redis_tls_server_name[0] != '\0' ?
            cfg->redis_tls_server_name : host;
        if ((*tls = redis_tls_start(&rs->tls_ctx, cfg, c, name,
            deadline_ms)) == NULL) {
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

int
redis_get_reply(redisContext *c, struct redis_tls *tls, redisReply **r)
{
    if (tls == NULL)
        return redisGetReply(c, (void **)r);
    return redis_tls_get_reply(tls, c, (void **)r);
}

redisReply *
redis_command(redisContext *c, struct redis_tls *tls, const char *fmt, ...)
{
    redisReply *r;
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = redisvAppendCommand(c, fmt, ap);
    va_end(ap);
    if (rc != REDIS_OK || redis_get_reply(c, tls, &r) != REDIS_OK)
        return NULL;
    return r;
}

int
redis_node_fail(struct redis_store *rs, struct redis_node *n,
    const char *what, int err, int backoff, int probing)
{
    const redisContext *c = n->ctx;
    const char *detail = "failed", *tls = redis_tls_error(n->tls);
    char tlsdetail[160];

    if (tls[0] != '\0') {
        /* TLS refused: the node listens, so it is not probed. */
        snprintf(tlsdetail, sizeof(tlsdetail), "TLS: %s", tls);
        detail = tlsdetail;
        snprintf(rs->error, sizeof(rs->error), "redis tls: %s", tls);
        probing = 0;
    } else if (c != NULL && c->err) {
        detail = c->errstr;
        snprintf(rs->error, sizeof(rs->error), "%s",
            redis_timed_out(c, err) ? "redis timed out" :
            "redis unreachable");
    } else
        snprintf(rs->error, sizeof(rs->error), "redis unreachable");
    if (!backoff)
        log_warn("redis %s (%s): %s", what, n->addr, detail);
    else if (n->retry_at_ms == 0)
        log_warn("redis %s (%s): %s; answering 503 for up to %ld ms before "
            "connecting again%s", what, n->addr, detail,
            rs->cfg->redis_backoff_ms, probing && n->peer_len > 0 ?
            ", or until it accepts connections again" : "");
    redis_node_close(n);
    if (backoff) {
        n->retry_at_ms = util_now_ms() + rs->cfg->redis_backoff_ms;
        n->probing = probing && n->peer_len > 0;
    }
    redis_topology_stale(rs);
    return STORE_UNAVAILABLE;
}

/* Remembers the address of the server c is connected to, for the probe. */
static void
redis_node_peer(struct redis_node *n, const redisContext *c)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);

    if (getpeername(c->fd, (struct sockaddr *)&ss, &len) == 0 &&
        len <= sizeof(n->peer)) {
        memcpy(n->peer, &ss, len);
        n->peer_len = len;
    }
}

/*
 * During a back-off after n did not listen: whether it accepts connections
 * again, without waiting.  A non-blocking connect to its address is
 * started and then looked at (poll with no timeout) on this and later
 * requests; one that has been pending for longer than the connect timeout
 * is started anew.  Returns 1 when a connect was accepted.
 */
static int
redis_node_probe(const struct redis_store *rs, struct redis_node *n,
    int64_t now_ms)
{
    struct sockaddr_storage ss;
    struct pollfd pfd;
    socklen_t len;
    int fd, soerr;

    if (n->probe_fd >= 0 &&
        now_ms - n->probe_start_ms > rs->cfg->redis_connect_timeout_ms)
        redis_node_probe_stop(n);
    if (n->probe_fd < 0) {
        memcpy(&ss, n->peer, n->peer_len);
        fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
            0);
        if (fd == -1)
            return 0;
        if (connect(fd, (struct sockaddr *)&ss, n->peer_len) == 0) {
            close(fd);
            return 1;
        }
        if (errno != EINPROGRESS && errno != EAGAIN) {
            close(fd);
            return 0;
        }
        n->probe_fd = fd;
        n->probe_start_ms = now_ms;
    }
    pfd.fd = n->probe_fd;
    pfd.events = POLLOUT;
    pfd.revents = 0;
    if (poll(&pfd, 1, 0) != 1)
        return 0;
    soerr = 0;
    len = sizeof(soerr);
    if (getsockopt(n->probe_fd, SOL_SOCKET, SO_ERROR, &soerr, &len) == -1)
        soerr = errno;
    redis_node_probe_stop(n);
    return soerr == 0;
}

/* A node that answered but cannot be used (wrong password, not a master,
 * the script refused): no connect to it for redis_backoff_ms, no probe. */
static int
redis_node_refuse(struct redis_store *rs, struct redis_node *n,
    const char *reason)
{
    snprintf(rs->error, sizeof(rs->error), "%s", reason);
    redis_node_close(n);
    n->retry_at_ms = util_now_ms() + rs->cfg->redis_backoff_ms;
    n->probing = 0;
    redis_topology_stale(rs);
    return STORE_UNAVAILABLE;
}

int
redis_append_auth(redisContext *c, const char *user, const char *password)
{
    if (password[0] == '\0')
        return 0;
    if (user[0] != '\0')
        redisAppendCommand(c, "AUTH %s %s", user, password);
    else
        redisAppendCommand(c, "AUTH %s", password);
    return 1;
}

int
redis_node_connect(struct redis_store *rs, struct redis_node *n)
{
    const struct rl_config *cfg = rs->cfg;
    const char *step[4];
    struct redis_tls *tls;
    redisContext *c;
    redisReply *r;
    int64_t now_ms;
    int i, nsteps = 0, err, bad = 0;
    enum redis_reply_kind kind = REPLY_ANSWER;
    char why[200];

    if (n->ctx != NULL)
        return STORE_OK;
    if (n->retry_at_ms != 0 && (now_ms = util_now_ms()) < n->retry_at_ms &&
        !(n->probing && redis_node_probe(rs, n, now_ms))) {
        if (rs->error[0] == '\0')
            snprintf(rs->error, sizeof(rs->error), "redis unreachable");
        return STORE_UNAVAILABLE;
    }
    redis_node_probe_stop(n);
    if ((c = redis_open(rs, n->addr, 0, &tls)) == NULL) {
        log_error("redis connect: out of memory");
        return redis_node_refuse(rs, n, "redis unreachable");
    }
    n->ctx = c;
    n->tls = tls;
    if (c->err)
        return redis_node_fail(rs, n, "connect", errno, 1, 1);
    if (redis_append_auth(c, cfg->redis_username, cfg->redis_password))
        step[nsteps++] = "AUTH";
    if (cfg->redis_db != 0 && rs->type != REDIS_CLUSTER) {
        redisAppendCommand(c, "SELECT %ld", cfg->redis_db);
        step[nsteps++] = "SELECT";
    }
    if (rs->type == REDIS_SENTINEL) {
        redisAppendCommand(c, "ROLE");
        step[nsteps++] = "ROLE";
    }
    redisAppendCommand(c, "SCRIPT LOAD %s", rs->check.text);
    step[nsteps++] = "SCRIPT LOAD";
    /* Every reply is read, so that the connection stays in step even when
     * one of them is refused; the first refusal is the reason. */
    why[0] = '\0';
    for (i = 0; i < nsteps; i++) {
        if (redis_get_reply(c, tls, &r) != REDIS_OK) {
            err = errno;
            /* (A server that closes under a TLS failure -- a client
             * certificate it wants -- refuses us: the back-off.) */
            if (redis_closed(c, err) && redis_tls_error(tls)[0] == '\0') {
                redis_node_fail(rs, n, step[i], err, 0, 0);
                return REDIS_CLOSED;
            }
            return redis_node_fail(rs, n, step[i], err, 1, 0);
        }
        if (bad == 0) {
            if (r->type == REDIS_REPLY_ERROR) {
                snprintf(why, sizeof(why), "%s", r->str);
                kind = redis_reply_classify(r, NULL);
                bad = i + 1;
            } else if (strcmp(step[i], "ROLE") == 0 &&
                (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
                r->element[0]->type != REDIS_REPLY_STRING ||
                strcmp(r->element[0]->str, "master") != 0)) {
                snprintf(why, sizeof(why), "ROLE is not master");
                bad = i + 1;
            } else if (strcmp(step[i], "SCRIPT LOAD") == 0 &&
                (r->type != REDIS_REPLY_STRING ||
                strcmp(r->str, rs->check.sha) != 0)) {
                snprintf(why, sizeof(why), "unexpected reply");
                bad = i + 1;
            }
        }
        freeReplyObject(r);
    }
    if (bad != 0) {
        const char *what = step[bad - 1];

        log_error("redis %s (%s): \"%s\"%s; answering 503 for %ld ms "
            "before connecting again", what, n->addr, why,
            strcmp(what, "AUTH") == 0 ? " (check redis_username and "
            "redis_password)" : strcmp(what, "SELECT") == 0 ? " (check "
            "redis_db)" : "", cfg->redis_backoff_ms);
        if (strcmp(what, "AUTH") == 0)
            return redis_node_refuse(rs, n, "redis authentication failed");
        if (strcmp(what, "SELECT") == 0)
            return redis_node_refuse(rs, n, "redis_db refused");
        if (strcmp(what, "ROLE") == 0) {
            char reason[160];

            snprintf(reason, sizeof(reason), "redis master %s is a replica",
                cfg->redis_sentinel_master);
            return redis_node_refuse(rs, n, reason);
        }
        if (kind == REPLY_LOADING)
            return redis_node_refuse(rs, n, "redis loading");
        return redis_node_refuse(rs, n, "redis script not loaded");
    }
    if (n->retry_at_ms != 0)
        log_info("redis: connected to %s again", n->addr);
    redis_node_peer(n, c);
    n->retry_at_ms = 0;
    n->probing = 0;
    rs->error[0] = '\0';
    return STORE_OK;
}

/* A command in the Redis protocol (RESP), written into out without
 * hiredis' general formatter, which costs several times more.  Returns
 * its length, or 0 when it does not fit (the caller lets hiredis do it). */
static size_t
redis_format(int argc, const char **argv, const size_t *argvlen, char *out,
    size_t size)
{
    size_t len = 0;
    int i;

    if (size < 24)
        return 0;
    out[len++] = '*';
    len += util_lltoa(argc, out + len);
    out[len++] = '\r';
    out[len++] = '\n';
    for (i = 0; i < argc; i++) {
        if (argvlen[i] > size || size - len < argvlen[i] + 32)
            return 0;
        out[len++] = '$';
        len += util_lltoa((long long)argvlen[i], out + len);
        out[len++] = '\r';
        out[len++] = '\n';
        memcpy(out + len, argv[i], argvlen[i]);
        len += argvlen[i];
        out[len++] = '\r';
        out[len++] = '\n';
    }
    return len;
}

redisReply *
redis_node_send(struct redis_node *n, int argc, const char **argv,
    const size_t *argvlen, int asking, int *err)
{
    redisContext *c = n->ctx;
    struct redis_tls *tls = n->tls;
    char cmd[sizeof(((struct limiter_call *)0)->store) +
        32 * (LIMITER_MAX_ARGS + 3)];
    redisReply *r;
    size_t len;

    if (asking) {
        redisAppendCommand(c, "ASKING");
        redisAppendCommandArgv(c, argc, argv, argvlen);
        if (redis_get_reply(c, tls, &r) != REDIS_OK) {
            *err = errno;
            return NULL;
        }
        freeReplyObject(r);
        if (redis_get_reply(c, tls, &r) != REDIS_OK)
            r = NULL;
    } else if ((len = redis_format(argc, argv, argvlen, cmd, sizeof(cmd))) >
        0) {
        if (redisAppendFormattedCommand(c, cmd, len) != REDIS_OK ||
            redis_get_reply(c, tls, &r) != REDIS_OK)
            r = NULL;
    } else if (redisAppendCommandArgv(c, argc, argv, argvlen) != REDIS_OK ||
        redis_get_reply(c, tls, &r) != REDIS_OK)
        r = NULL;
    *err = errno;
    return r;
}

redisReply *
redis_node_ask(struct redis_store *rs, struct redis_node *n, const char *cmd)
{
    redisReply *r;
    int attempt, rc, err;

    for (attempt = 1; ; attempt++) {
        rc = redis_node_connect(rs, n);
        if (rc == STORE_UNAVAILABLE)
            return NULL;
        if (rc == STORE_OK) {
            r = redis_command(n->ctx, n->tls, cmd);
            err = errno;
            if (r != NULL)
                return r;
            if (attempt == REDIS_MAX_TRIES ||
                !redis_closed(n->ctx, err)) {
                redis_node_fail(rs, n, cmd, err, 0, 0);
                return NULL;
            }
            log_info("redis (%s): the connection was closed (%s); "
                "reconnecting", n->addr, ((redisContext *)n->ctx)->errstr);
            redis_node_close(n);
        } else if (attempt == REDIS_MAX_TRIES)
            return NULL;
    }
}

int
redis_node_ready(struct redis_store *rs, struct redis_node *n)
{
    char cmd[64];
    redisReply *r;
    int ok;

    snprintf(cmd, sizeof(cmd), "SCRIPT EXISTS %s", rs->check.sha);
    if ((r = redis_node_ask(rs, n, cmd)) == NULL)
        return STORE_UNAVAILABLE;
    ok = r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
        r->element[0]->type == REDIS_REPLY_INTEGER &&
        r->element[0]->integer == 1;
    freeReplyObject(r);
    if (ok)
        return STORE_OK;
    r = redis_command(n->ctx, n->tls, "SCRIPT LOAD %s", rs->check.text);
    if (r == NULL)
        return redis_node_fail(rs, n, "SCRIPT LOAD", errno, 0, 0);
    ok = r->type == REDIS_REPLY_STRING;
    if (!ok)
        log_error("redis SCRIPT LOAD (%s): %s", n->addr,
            r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    if (!ok) {
        snprintf(rs->error, sizeof(rs->error), "redis script not loaded");
        return STORE_UNAVAILABLE;
    }
    return STORE_OK;
}
