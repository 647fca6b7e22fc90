/*
 * redis_store.c -- the worker's connections to Redis and the one script.
 *
 * redis_type says where the script runs.  single: one server.  sentinel:
 * the master that Redis Sentinel names; the worker asks one sentinel at a
 * time (SENTINEL get-master-addr-by-name), checks the answer with ROLE on
 * connect, and asks again when the master fails, answers READONLY or
 * LOADING, or turns out to be a replica.  cluster: each worker reads the
 * slot map (CLUSTER SLOTS) from a node it knows, sends a check to the
 * primary owning the slot of the check's keys (they all carry the tenant's
 * hash tag), and keeps one connection per primary it has needed, opened
 * when first needed.  MOVED updates the slot and goes to the named node
 * (and the map is read again before the next check); ASK goes there once,
 * after ASKING; TRYAGAIN (a slot half moved) is retried a few milliseconds
 * later within the command timeout; a failure or CLUSTERDOWN has the map
 * read again.  Topology lookups are at most one per REDIS_LOOKUP_MS per
 * worker, so a failover costs 503s, not a storm of lookups.
 *
 * Each connection is a blocking hiredis context, opened after fork.  Both
 * the connect and every command are bounded by the configured timeouts
 * (hiredis 0.14 applies the connect timeout only to connect(), so the
 * command timeout is set again after every connect).  After any failure
 * the context is dropped -- hiredis contexts are dead after an I/O error.
 * A new connection sends AUTH (redis_password), SELECT (redis_db), ROLE
 * (sentinel) and SCRIPT LOAD in one round trip.  With redis_tls (and
 * redis_sentinel_tls for the sentinels) TLS is started on the context's
 * socket right after the connect (redis_tls.c), the handshake within the
 * connect timeout; every command of this file is sent and answered
 * through redis_get_reply(), which is redisGetReply() without TLS, so
 * everything above it works the same either way.  A TLS failure is a
 * failed connect (the back-off, without the probe: the node listens), its
 * reason "redis tls: ..." in rs->error.
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
 * A check's script call charges; when its connection dies before the reply
 * came (the server closed it: a restart, a failover, CLIENT KILL, the idle
 * timeout), it may or may not have run.  Every call carries the process's
 * reply slot (limiter_request_key: a key named by 64 random bits drawn
 * when the process starts) and an id (a counter, no system call); in the
 * slot lua/check.lua keeps the id and reply of the process's last call
 * that charged, for three seconds.  So the call is sent once more on a
 * new connection, marked as sent again (limiter_resend), and the script
 * replays the stored reply if the slot holds the call's id: a check is
 * never charged twice.  One slot per process and tenant is enough, since
 * a worker sends nothing else between a call and its resend.  A timeout
 * is not retried: the budget of a check is one command timeout, and a
 * Redis too slow to answer is not helped by more load.  The target of an
 * ASK gets the call without its reply slot and its counter budget's keys
 * (limiter_unkey): an importing node answers TRYAGAIN to a call whose keys
 * it does not all have, and those may well not be among them.
 *
 * The script is run with EVALSHA.  Redis forgets scripts on restart,
 * failover and SCRIPT FLUSH; a NOSCRIPT reply is answered by one EVAL of
 * the full text (which also puts it back in the script cache).
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

#include <hiredis/hiredis.h>
#include <openssl/sha.h>

#include "redis.h"

/* A call whose connection died is sent again only this soon after it was
 * first sent (the resend itself, after the reconnect, is what must be
 * this soon): lua/check.lua keeps a reply for 3 s (REPLAY_TTL_MS). */
#define REDIS_RESEND_MS 1000

/* How many connections a check or a readiness probe tries when Redis
 * closes them under it: the first, and one new one. */
#define REDIS_MAX_TRIES 2

/* Redirections (MOVED, ASK) one check follows. */
#define REDIS_MAX_REDIRECTS 5

/* A TRYAGAIN is retried after this long, while the command timeout
 * lasts. */
#define REDIS_TRYAGAIN_MS 5

/* At most one topology lookup (slot map, sentinel) per this long. */
#define REDIS_LOOKUP_MS 100

/* What redis_node_connect() found, besides STORE_OK and
 * STORE_UNAVAILABLE: Redis accepted the connection and closed it before
 * the set-up was answered.  A new connection may work. */
#define REDIS_CLOSED (-10)

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

static void
redis_node_close(struct redis_node *n)
{
    redis_tls_free(n->tls);
    n->tls = NULL;
    if (n->ctx != NULL)
        redisFree(n->ctx);
    n->ctx = NULL;
    redis_node_probe_stop(n);
}

static void
redis_sentinel_close(struct redis_store *rs)
{
    redis_tls_free(rs->sentinel_tls);
    rs->sentinel_tls = NULL;
    if (rs->sentinel != NULL)
        redisFree(rs->sentinel);
    rs->sentinel = NULL;
}

/* Makes n a node at addr, with no connection and no back-off. */
static void
redis_node_set(struct redis_node *n, const char *addr)
{
    redis_node_close(n);
    memset(n, 0, sizeof(*n));
    n->probe_fd = -1;
    util_copy(n->addr, sizeof(n->addr), addr);
    redis_node_sockaddr(n);
}

void
redis_store_init(struct redis_store *rs, const struct rl_config *cfg,
    struct rl_counters *counters)
{
    unsigned char md[SHA_DIGEST_LENGTH], seed[8];
    size_t i;

    memset(rs, 0, sizeof(*rs));
    rs->cfg = cfg;
    rs->counters = counters;
    if (strcmp(cfg->redis_type, "cluster") == 0)
        rs->type = REDIS_CLUSTER;
    else if (strcmp(cfg->redis_type, "sentinel") == 0)
        rs->type = REDIS_SENTINEL;
    else
        rs->type = REDIS_SINGLE;
    for (i = 0; i < REDIS_MAX_NODES; i++)
        rs->node[i].probe_fd = -1;
    rs->naddrs = util_split_list(cfg->redis, rs->addrs, RL_REDIS_MAX_ADDRS);
    if (rs->naddrs < 0)         /* config.c refuses such a list */
        rs->naddrs = 0;
    /* single: the server; cluster: the seeds, as the first nodes. */
    if (rs->type == REDIS_SINGLE && rs->naddrs > 0)
        redis_node_set(&rs->node[0], rs->addrs[0]);
    if (rs->type == REDIS_CLUSTER)
        for (i = 0; i < (size_t)rs->naddrs; i++)
            redis_node_set(&rs->node[i], rs->addrs[i]);
    SHA1((const unsigned char *)embedded_check_lua,
        strlen(embedded_check_lua), md);
    util_hex(md, sizeof(md), rs->sha);
    /* The reply slot: 64 random bits per process (the calls' ids are a
     * counter).  Should the random source fail, the pid and the clock
     * still tell processes apart on one host. */
    if (util_random(seed, sizeof(seed)) == -1) {
        uint64_t v = ((uint64_t)getpid() << 40) ^ (uint64_t)util_now_ms();

        log_warn("redis: no random bytes for the reply slot; using the pid");
        for (i = 0; i < sizeof(seed); i++)
            seed[i] = (unsigned char)(v >> (8 * i));
    }
    util_hex(seed, sizeof(seed), rs->id_prefix);
}

void
redis_store_close(struct redis_store *rs)
{
    int i;

    for (i = 0; i < REDIS_MAX_NODES; i++)
        redis_node_close(&rs->node[i]);
    redis_sentinel_close(rs);
    if (rs->tls_ctx != NULL)
        redis_tls_context_free(rs->tls_ctx);
    rs->tls_ctx = NULL;
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

/*
 * Opens a blocking connection to addr, both timeouts set, and with TLS to
 * the data nodes (sentinel 0) or to the sentinels (sentinel 1) when that
 * is configured, starts TLS on it (*tls; NULL without TLS), the handshake
 * within the connect timeout.  NULL when out of memory; otherwise check
 * c->err, and redis_tls_error(*tls) for a TLS failure.
 */
static redisContext *
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

/* Sends the commands appended to c (over TLS when tls is not NULL) and
 * reads the next reply, as redisGetReply(): REDIS_OK with *r set, or
 * REDIS_ERR with c->err and errno telling why.  Every command of this
 * file goes through here. */
static int
redis_get_reply(redisContext *c, struct redis_tls *tls, redisReply **r)
{
    if (tls == NULL)
        return redisGetReply(c, (void **)r);
    return redis_tls_get_reply(tls, c, (void **)r);
}

/* redisCommand() through redis_get_reply(). */
static redisReply *
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

/* After a failure in the sentinel or cluster modes: the topology is to be
 * looked up again before the next check. */
static void
redis_topology_stale(struct redis_store *rs)
{
    if (rs->type == REDIS_SENTINEL)
        rs->master_known = 0;
    else if (rs->type == REDIS_CLUSTER)
        rs->map_stale = 1;
}

/*
 * Records a failure of what (a command, or "connect") on n and drops the
 * connection.  With backoff, no blocking connect to n is made for
 * redis_backoff_ms, and with probing (it did not listen) a non-blocking
 * probe may end that early; a failed command starts no back-off, since the
 * next request's fresh connect tells at once whether the node is down or
 * was only slow this once.  err is errno right after the failed call.
 * Returns STORE_UNAVAILABLE, for "return redis_node_fail(...)".
 */
static int
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

/* Sends AUTH with the given user (may be empty) and password, when there
 * is a password, as the next pipelined command of c.  Returns 1 when it
 * was appended. */
static int
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

/*
 * Connects to n (unless connected) and sets the connection up in one round
 * trip: AUTH, SELECT, ROLE (sentinel mode: it must be a master) and SCRIPT
 * LOAD.  Returns STORE_OK, STORE_UNAVAILABLE (with the back-off started or
 * running), or REDIS_CLOSED when the server closed the new connection
 * before answering (no back-off: it accepted us, so it is up).
 */
static int
redis_node_connect(struct redis_store *rs, struct redis_node *n)
{
    const struct rl_config *cfg = rs->cfg;
    const char *step[4];
    struct redis_tls *tls;
    redisContext *c;
    redisReply *r;
    int64_t now_ms;
    int i, nsteps = 0, err, bad = 0;
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
    redisAppendCommand(c, "SCRIPT LOAD %s", embedded_check_lua);
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
                bad = i + 1;
            } else if (strcmp(step[i], "ROLE") == 0 &&
                (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
                r->element[0]->type != REDIS_REPLY_STRING ||
                strcmp(r->element[0]->str, "master") != 0)) {
                snprintf(why, sizeof(why), "ROLE is not master");
                bad = i + 1;
            } else if (strcmp(step[i], "SCRIPT LOAD") == 0 &&
                (r->type != REDIS_REPLY_STRING ||
                strcmp(r->str, rs->sha) != 0)) {
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
        if (strncmp(why, "LOADING", 7) == 0)
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

/* ------------------------------------------------------------ sentinel */

/* Drops the sentinel connection after a failure; a TLS failure is kept
 * as the reason (rs->error) for when no sentinel answers.  Returns -2
 * after a TLS failure, else -1. */
static int
redis_sentinel_fail(struct redis_store *rs)
{
    const char *tls = redis_tls_error(rs->sentinel_tls);
    int rc = -1;

    if (tls[0] != '\0') {
        snprintf(rs->error, sizeof(rs->error), "redis sentinel tls: %s",
            tls);
        rc = -2;
    }
    redis_sentinel_close(rs);
    return rc;
}

/* Opens a connection to the sentinel at addrs[i], authenticated when
 * redis_sentinel_password is set.  Returns 0, or -1 (logged; -2 when TLS
 * failed). */
static int
redis_sentinel_open(struct redis_store *rs, int i)
{
    const struct rl_config *cfg = rs->cfg;
    struct redis_tls *tls;
    redisContext *c;
    redisReply *r;
    int at = rs->sentinel_at;

    if (rs->sentinel != NULL && rs->sentinel_at == i)
        return 0;
    redis_sentinel_close(rs);
    if ((c = redis_open(rs, rs->addrs[i], 1, &tls)) == NULL)
        return -1;
    /* Kept even when it fails, for redis_sentinel_fail() to say why. */
    rs->sentinel = c;
    rs->sentinel_tls = tls;
    rs->sentinel_at = i;
    if (c->err) {
        log_warn("redis sentinel %s: %s%s", rs->addrs[i],
            redis_tls_error(tls)[0] ? "TLS: " : "", c->errstr);
        goto fail;
    }
    if (redis_append_auth(c, cfg->redis_sentinel_username,
        cfg->redis_sentinel_password)) {
        if (redis_get_reply(c, tls, &r) != REDIS_OK) {
            log_warn("redis sentinel %s AUTH: %s%s", rs->addrs[i],
                redis_tls_error(tls)[0] ? "TLS: " : "", c->errstr);
            goto fail;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            log_error("redis sentinel %s AUTH: %s", rs->addrs[i], r->str);
            freeReplyObject(r);
            goto fail;
        }
        freeReplyObject(r);
    }
    return 0;
fail:
    /* The next sentinel to ask is still the one after the last that
     * answered (the lookup's loop counts from it). */
    rs->sentinel_at = at;
    return redis_sentinel_fail(rs);
}

/*
 * Asks the sentinels, one at a time starting with the last that answered,
 * for the address of the master named redis_sentinel_master, and makes
 * node[0] that address (a new address: a new connection, no back-off).
 * Returns STORE_OK or STORE_UNAVAILABLE with the reason.
 */
static int
redis_sentinel_lookup(struct redis_store *rs)
{
    const char *name = rs->cfg->redis_sentinel_master;
    struct redis_node *n = &rs->node[0];
    char addr[RL_REDIS_ADDR_MAX];
    int64_t now_ms = util_now_ms();
    int k, i, rc, unknown = 0, got = 0, tls_failed = 0;
    redisReply *r;

    if (now_ms < rs->lookup_at_ms) {
        if (rs->error[0] == '\0')
            snprintf(rs->error, sizeof(rs->error), "no master for %s", name);
        return STORE_UNAVAILABLE;
    }
    rs->lookup_at_ms = now_ms + REDIS_LOOKUP_MS;
    __atomic_add_fetch(&rs->counters->redis_lookups, 1, __ATOMIC_RELAXED);
    for (k = 0; k < rs->naddrs && !got; k++) {
        i = (rs->sentinel_at + k) % rs->naddrs;
        if ((rc = redis_sentinel_open(rs, i)) < 0) {
            tls_failed |= rc == -2;
            continue;
        }
        r = redis_command(rs->sentinel, rs->sentinel_tls,
            "SENTINEL get-master-addr-by-name %s", name);
        if (r == NULL) {
            log_warn("redis sentinel %s: %s", rs->addrs[i],
                ((redisContext *)rs->sentinel)->errstr);
            tls_failed |= redis_sentinel_fail(rs) == -2;
            continue;
        }
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[0]->type == REDIS_REPLY_STRING &&
            r->element[1]->type == REDIS_REPLY_STRING) {
            snprintf(addr, sizeof(addr),
                strchr(r->element[0]->str, ':') != NULL ? "[%s]:%s" :
                "%s:%s", r->element[0]->str, r->element[1]->str);
            got = 1;
        } else if (r->type == REDIS_REPLY_NIL) {
            unknown = 1;
            log_error("redis sentinel %s does not know a master named %s",
                rs->addrs[i], name);
        } else
            log_error("redis sentinel %s: %s", rs->addrs[i],
                r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        freeReplyObject(r);
    }
    if (!got) {
        if (unknown)
            snprintf(rs->error, sizeof(rs->error), "no master for %s", name);
        else if (!tls_failed)
            snprintf(rs->error, sizeof(rs->error), "redis sentinels "
                "unreachable");
        return STORE_UNAVAILABLE;
    }
    if (strcmp(addr, n->addr) != 0) {
        if (n->addr[0] != '\0')
            log_info("redis: the sentinels name %s as master %s (was %s)",
                addr, name, n->addr);
        redis_node_set(n, addr);
    }
    rs->master_known = 1;
    return STORE_OK;
}

/* ------------------------------------------------------------- cluster */

/* The node at addr, added when it is new (a free entry, else one that no
 * slot points to).  NULL when the table is full of nodes in use. */
static struct redis_node *
redis_cluster_node(struct redis_store *rs, const char *addr,
    const unsigned char *map)
{
    unsigned char used[REDIS_MAX_NODES];
    int i, free_at = -1;

    for (i = 0; i < REDIS_MAX_NODES; i++) {
        if (strcmp(rs->node[i].addr, addr) == 0)
            return &rs->node[i];
        if (rs->node[i].addr[0] == '\0' && free_at < 0)
            free_at = i;
    }
    if (free_at < 0) {
        memset(used, 0, sizeof(used));
        for (i = 0; i < CLUSTER_SLOTS; i++) {
            if (map[i] != 0)
                used[map[i] - 1] = 1;
            if (rs->slots[i] != 0)
                used[rs->slots[i] - 1] = 1;
        }
        for (i = 0; i < REDIS_MAX_NODES && free_at < 0; i++)
            if (!used[i])
                free_at = i;
        if (free_at < 0)
            return NULL;
    }
    redis_node_set(&rs->node[free_at], addr);
    return &rs->node[free_at];
}

/* "host:port" of a node as CLUSTER SLOTS or a redirection names it; an
 * empty host means the node that was asked (host of asked). */
static void
redis_cluster_addr(char *out, size_t outlen, const char *host, long port,
    const char *asked)
{
    char ahost[256];
    int aport;

    if (host[0] == '\0' || strcmp(host, "?") == 0) {
        if (util_split_hostport(asked, ahost, sizeof(ahost), &aport) == -1)
            util_copy(ahost, sizeof(ahost), "127.0.0.1");
        host = ahost;
    }
    snprintf(out, outlen, strchr(host, ':') != NULL ? "[%s]:%ld" : "%s:%ld",
        host, port);
}

/* Reads a CLUSTER SLOTS reply from node `from` into the slot map.  Returns
 * 0, or -1 when the reply has another shape. */
static int
redis_cluster_parse(struct redis_store *rs, const redisReply *r,
    const struct redis_node *from)
{
    unsigned char map[CLUSTER_SLOTS];
    char addr[RL_REDIS_ADDR_MAX], asked[RL_REDIS_ADDR_MAX];
    const redisReply *e, *m;
    struct redis_node *n;
    long long lo, hi, s;
    size_t i;
    int covered = 0, k;

    if (r->type != REDIS_REPLY_ARRAY)
        return -1;
    /* from may be reused for another node below, when the table is full */
    util_copy(asked, sizeof(asked), from->addr);
    memset(map, 0, sizeof(map));
    for (i = 0; i < r->elements; i++) {
        e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER)
            return -1;
        m = e->element[2];
        if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
            m->element[0]->type != REDIS_REPLY_STRING ||
            m->element[1]->type != REDIS_REPLY_INTEGER)
            return -1;
        lo = e->element[0]->integer;
        hi = e->element[1]->integer;
        if (lo < 0 || hi >= CLUSTER_SLOTS || lo > hi)
            return -1;
        redis_cluster_addr(addr, sizeof(addr), m->element[0]->str,
            (long)m->element[1]->integer, asked);
        if ((n = redis_cluster_node(rs, addr, map)) == NULL) {
            log_error("redis cluster: more than %d nodes", REDIS_MAX_NODES);
            return -1;
        }
        k = (int)(n - rs->node) + 1;
        for (s = lo; s <= hi; s++) {
            if (map[s] == 0)
                covered++;
            map[s] = (unsigned char)k;
        }
    }
    memcpy(rs->slots, map, sizeof(map));
    rs->covered = covered;
    return 0;
}

/* Closes the connections to nodes that no slot points to any more
 * (replicas now, or gone): one connection per primary. */
static void
redis_cluster_prune(struct redis_store *rs)
{
    unsigned char used[REDIS_MAX_NODES];
    int i;

    memset(used, 0, sizeof(used));
    for (i = 0; i < CLUSTER_SLOTS; i++)
        if (rs->slots[i] != 0)
            used[rs->slots[i] - 1] = 1;
    for (i = 0; i < REDIS_MAX_NODES; i++)
        if (!used[i] && rs->node[i].ctx != NULL) {
            redis_node_close(&rs->node[i]);
            rs->node[i].needed = 0;
        }
}

/* Asks node n for the slot map.  Returns 0, or -1 (logged). */
static int
redis_cluster_ask(struct redis_store *rs, struct redis_node *n)
{
    redisReply *r;
    int rc;

    if (redis_node_connect(rs, n) != STORE_OK)
        return -1;
    if ((r = redis_command(n->ctx, n->tls, "CLUSTER SLOTS")) == NULL) {
        redis_node_fail(rs, n, "CLUSTER SLOTS", errno, 0, 0);
        return -1;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        log_error("redis CLUSTER SLOTS (%s): %s%s", n->addr, r->str,
            strstr(r->str, "cluster support disabled") != NULL ?
            " (redis_type = cluster, but it is not a cluster node)" : "");
        snprintf(rs->error, sizeof(rs->error), "redis is not a cluster");
        freeReplyObject(r);
        return -1;
    }
    rc = redis_cluster_parse(rs, r, n);
    freeReplyObject(r);
    if (rc == -1)
        log_error("redis CLUSTER SLOTS (%s): a reply of unexpected shape",
            n->addr);
    return rc;
}

/*
 * Reads the slot map anew, at most once per REDIS_LOOKUP_MS: from a node
 * already connected if there is one, else from the known nodes and the
 * seeds in turn.  Returns 0 when the map was read, -1 when no node gave
 * it, -2 when it is too soon to ask.
 */
static int
redis_cluster_lookup(struct redis_store *rs)
{
    int64_t now_ms = util_now_ms();
    struct redis_node *n;
    int i, pass;

    if (now_ms < rs->lookup_at_ms)
        return -2;
    rs->lookup_at_ms = now_ms + REDIS_LOOKUP_MS;
    __atomic_add_fetch(&rs->counters->redis_lookups, 1, __ATOMIC_RELAXED);
    for (pass = 0; pass < 3; pass++)
        for (i = 0; i < REDIS_MAX_NODES + RL_REDIS_MAX_ADDRS; i++) {
            if (i < REDIS_MAX_NODES) {
                n = &rs->node[i];
                /* connected ones first, then the others */
                if (n->addr[0] == '\0' || pass == 2 ||
                    (pass == 0) != (n->ctx != NULL))
                    continue;
            } else {
                /* last, a seed the table has lost */
                if (pass != 2 || i - REDIS_MAX_NODES >= rs->naddrs)
                    continue;
                n = redis_cluster_node(rs, rs->addrs[i - REDIS_MAX_NODES],
                    rs->slots);
                if (n == NULL || n->ctx != NULL)
                    continue;
            }
            if (redis_cluster_ask(rs, n) == 0) {
                rs->map_loaded = 1;
                rs->map_stale = 0;
                redis_cluster_prune(rs);
                if (rs->covered < CLUSTER_SLOTS)
                    log_warn("redis cluster: %d of %d slots have no primary",
                        CLUSTER_SLOTS - rs->covered, CLUSTER_SLOTS);
                return 0;
            }
        }
    return -1;
}

/* ------------------------------------------------------------ checks */

/* After a node failed under a check: the topology is to be looked up
 * again at once (not waiting for REDIS_LOOKUP_MS), once.  Returns 1 when
 * a lookup found where to go (the caller routes again). */
static int
redis_reroute(struct redis_store *rs)
{
    /* Not more than one lookup per 10 ms, whatever fails. */
    if (util_now_ms() < rs->lookup_at_ms - REDIS_LOOKUP_MS + 10)
        return 0;
    redis_topology_stale(rs);
    rs->lookup_at_ms = 0;
    if (rs->type == REDIS_SENTINEL)
        return redis_sentinel_lookup(rs) == STORE_OK;
    return redis_cluster_lookup(rs) == 0;
}

/* The node a check of slot goes to; NULL with rs->error set. */
static struct redis_node *
redis_route(struct redis_store *rs, unsigned slot)
{
    struct redis_node *n;

    /* A node in its back-off may have been replaced meanwhile (that is
     * what a failover does): while it is, the topology is looked up again
     * (at most once per REDIS_LOOKUP_MS), so the new one is used as soon
     * as the cluster or the sentinels name it. */
    switch (rs->type) {
    case REDIS_SENTINEL:
        n = &rs->node[0];
        if ((!rs->master_known || (n->ctx == NULL && n->retry_at_ms != 0)) &&
            redis_sentinel_lookup(rs) != STORE_OK && !rs->master_known)
            return NULL;
        return n;
    case REDIS_CLUSTER:
        if (!rs->map_loaded || rs->map_stale ||
            (rs->slots[slot] != 0 &&
            rs->node[rs->slots[slot] - 1].ctx == NULL &&
            rs->node[rs->slots[slot] - 1].retry_at_ms != 0))
            redis_cluster_lookup(rs);
        if (!rs->map_loaded) {
            if (rs->error[0] == '\0')
                snprintf(rs->error, sizeof(rs->error), "redis cluster "
                    "unreachable");
            return NULL;
        }
        if (rs->slots[slot] == 0) {
            snprintf(rs->error, sizeof(rs->error), "cluster slots "
                "uncovered");
            return NULL;
        }
        n = &rs->node[rs->slots[slot] - 1];
        n->needed = 1;
        return n;
    default:
        return &rs->node[0];
    }
}

static int
redis_store_decode(struct redis_store *rs, redisReply *r, int nlimits,
    struct rl_decision *d)
{
    long long v[LIMITER_REPLY_MAX];
    size_t i;

    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(rs->error, sizeof(rs->error), "redis error reply");
        log_error("redis script: %s", r->str);
        return STORE_BAD_REPLY;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements > LIMITER_REPLY_MAX)
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

/* Sends argv on n's connection, after ASKING when asking.  Returns the
 * reply (of the command, not of ASKING), or NULL with *err set to errno. */
static redisReply *
redis_send(struct redis_node *n, int argc, const char **argv,
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

/* The next call id of this process, its counter in hex, into id[size]
 * (no printf: one per check). */
static void
redis_request_id(struct redis_store *rs, char *id, size_t size)
{
    static const char hex[] = "0123456789abcdef";
    char digits[16];
    unsigned long long v = rs->id_next++;
    size_t n = 0, k = 0;

    do {
        digits[k++] = hex[v & 15];
        v >>= 4;
    } while (v != 0);
    if (k >= size)
        k = 0;
    while (k > 0)
        id[n++] = digits[--k];
    id[n] = '\0';
}

/* Sends call once to n: EVALSHA of the script with the call's keys and
 * arguments, and on NOSCRIPT one EVAL of its text.  Returns the reply, or
 * NULL with *err set to errno after the failed call. */
static redisReply *
redis_run(struct redis_store *rs, struct redis_node *n,
    const struct limiter_call *call, int asking, int *err)
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
    r = redis_send(n, call->argc + 2, argv, argvlen, asking, err);
    if (r == NULL || r->type != REDIS_REPLY_ERROR ||
        strncmp(r->str, "NOSCRIPT", 8) != 0)
        return r;
    freeReplyObject(r);
    log_info("redis (%s): script cache was emptied; loading it again",
        n->addr);
    argv[0] = "EVAL";
    argvlen[0] = 4;
    argv[1] = embedded_check_lua;
    argvlen[1] = strlen(embedded_check_lua);
    return redis_send(n, call->argc + 2, argv, argvlen, asking, err);
}

/* Whether an error reply says the node cannot serve writes now, however
 * healthy the connection: a replica (READONLY), a server loading its data
 * (LOADING), a replica whose master is gone (MASTERDOWN), a cluster that
 * is down (CLUSTERDOWN). */
static int
redis_not_serving(const char *msg)
{
    return strncmp(msg, "READONLY", 8) == 0 ||
        strncmp(msg, "LOADING", 7) == 0 ||
        strncmp(msg, "MASTERDOWN", 10) == 0 ||
        strncmp(msg, "CLUSTERDOWN", 11) == 0;
}

/*
 * Follows a redirection of reply r (MOVED or ASK) from node n.  Returns
 * the node to send to next, with *asking set for an ASK, or NULL when r is
 * no redirection (or one that cannot be followed: rs->error says why).
 */
static struct redis_node *
redis_redirect(struct redis_store *rs, const struct redis_node *n,
    const redisReply *r, int *asking)
{
    char where[RL_REDIS_ADDR_MAX], addr[RL_REDIS_ADDR_MAX];
    struct redis_node *to;
    char *colon;
    int kind, slot;

    kind = cluster_redirect(r->str, &slot, where, sizeof(where));
    if (kind <= 0)
        return NULL;
    if (rs->type != REDIS_CLUSTER) {
        /* A cluster node configured as a single server. */
        log_error("redis (%s) answered \"%s\": it is a Redis Cluster node; "
            "set redis_type = cluster", n->addr, r->str);
        snprintf(rs->error, sizeof(rs->error), "redis is a cluster; set "
            "redis_type = cluster");
        rs->moved_seen = 1;
        return NULL;
    }
    colon = strrchr(where, ':');
    *colon = '\0';
    redis_cluster_addr(addr, sizeof(addr), where, atol(colon + 1), n->addr);
    if ((to = redis_cluster_node(rs, addr, rs->slots)) == NULL) {
        snprintf(rs->error, sizeof(rs->error), "redis cluster too large");
        return NULL;
    }
    __atomic_add_fetch(&rs->counters->redis_redirects, 1, __ATOMIC_RELAXED);
    if (kind == CLUSTER_MOVED) {
        rs->slots[slot] = (unsigned char)(to - rs->node + 1);
        rs->map_stale = 1;
        *asking = 0;
    } else
        *asking = 1;
    to->needed = 1;
    return to;
}

int
redis_store_check(struct redis_store *rs, struct limiter_call *call,
    int nlimits, struct rl_decision *d)
{
    char id[LIMITER_ID_MAX + 1];
    struct redis_node *n = NULL, *to;
    redisReply *r = NULL;
    int64_t first_ms = 0, deadline_ms;
    int tries = 0, redirects = 0, asking = 0, rc, err = 0, keyed, resent = 0;
    int rerouted = 0;
    unsigned slot = 0;

    redis_request_id(rs, id, sizeof(id));
    keyed = limiter_request_key(call, rs->id_prefix, id) == 0;
    if (!keyed)
        log_error("redis: cannot add the reply slot to the call; a lost "
            "reply will not be sent again");
    if (rs->type == REDIS_CLUSTER && call->argc > 1)
        slot = cluster_keyslot(call->argv[1], call->argvlen[1]);
    deadline_ms = util_now_ms() + rs->cfg->redis_command_timeout_ms;
    for (;;) {
        if (n == NULL && (n = redis_route(rs, slot)) == NULL)
            return STORE_UNAVAILABLE;
        rc = redis_node_connect(rs, n);
        if (rc == STORE_UNAVAILABLE && rs->type != REDIS_SINGLE &&
            !rerouted && redis_reroute(rs)) {
            /* The node is gone: it may have been replaced already (a
             * pool idle through a failover finds out only now). */
            rerouted = 1;
            n = NULL;
            continue;
        }
        if (rc == STORE_UNAVAILABLE)
            return STORE_UNAVAILABLE;
        if (rc == REDIS_CLOSED) {
            if (++tries == REDIS_MAX_TRIES)
                return STORE_UNAVAILABLE;
            continue;
        }
        if (first_ms == 0)
            first_ms = util_now_ms();
        else if (resent && util_now_ms() - first_ms > REDIS_RESEND_MS) {
            /* The script may have forgotten the first reply by now (a
             * connect slower than a second, say). */
            log_warn("redis: a check could not be sent again within %d ms",
                REDIS_RESEND_MS);
            snprintf(rs->error, sizeof(rs->error), "redis unreachable");
            return STORE_UNAVAILABLE;
        }
        if ((r = redis_run(rs, n, call, asking, &err)) == NULL) {
            if (!redis_closed(n->ctx, err))
                return redis_node_fail(rs, n, "EVALSHA", err, 0, 0);
            /* Closed with the call in flight: it may have run. */
            if (++tries == REDIS_MAX_TRIES || !keyed)
                return redis_node_fail(rs, n, "EVALSHA", err, 0, 0);
            log_warn("redis (%s): the connection was closed with a check "
                "in flight (%s); sending it again on a new connection",
                n->addr, ((redisContext *)n->ctx)->errstr);
            redis_node_close(n);
            limiter_resend(call);
            resent = 1;
            /* Where the keys live now: the same node, or the replica that
             * took its place (its copy of the reply slot, if the first
             * send ran and was replicated, keeps the resend exact). */
            if (rs->type != REDIS_SINGLE && !rerouted && redis_reroute(rs)) {
                rerouted = 1;
                n = NULL;
            }
            continue;
        }
        if (r->type != REDIS_REPLY_ERROR)
            break;
        if ((to = redis_redirect(rs, n, r, &asking)) != NULL &&
            redirects < REDIS_MAX_REDIRECTS) {
            redirects++;
            /* Sent back and forth: the nodes do not agree yet on who has
             * the slot (a resharding half told); give them a moment. */
            if (redirects >= 2 &&
                util_now_ms() + REDIS_TRYAGAIN_MS < deadline_ms)
                poll(NULL, 0, REDIS_TRYAGAIN_MS);
            /* The target of an ASK is importing the slot: it runs a call
             * only if it has every key, and the reply slot may not be
             * there. */
            if (asking && keyed && !resent && limiter_unkey(call) == 0)
                keyed = 0;
            freeReplyObject(r);
            n = to;
            continue;
        }
        if (to != NULL || strncmp(r->str, "MOVED ", 6) == 0 ||
            strncmp(r->str, "ASK ", 4) == 0) {
            if (to != NULL) {
                log_warn("redis: a check was redirected %d times",
                    redirects);
                snprintf(rs->error, sizeof(rs->error), "redis cluster "
                    "redirects");
            }
            freeReplyObject(r);
            return STORE_UNAVAILABLE;
        }
        if (strncmp(r->str, "TRYAGAIN", 8) == 0 && keyed && !resent &&
            limiter_unkey(call) == 0) {
            /* A slot being migrated: a node runs a call only with all its
             * keys, and the reply slot may not be here; without it the
             * counters may all be (no replay for this call then). */
            keyed = 0;
            freeReplyObject(r);
            asking = 0;
            continue;
        }
        if (strncmp(r->str, "TRYAGAIN", 8) == 0 &&
            util_now_ms() + REDIS_TRYAGAIN_MS < deadline_ms) {
            /* A slot half moved: the migration goes on meanwhile. */
            freeReplyObject(r);
            poll(NULL, 0, REDIS_TRYAGAIN_MS);
            asking = 0;
            n = NULL;
            continue;
        }
        if (strncmp(r->str, "TRYAGAIN", 8) == 0 ||
            redis_not_serving(r->str)) {
            log_warn("redis (%s): %s", n->addr, r->str);
            snprintf(rs->error, sizeof(rs->error), "%s",
                strncmp(r->str, "TRYAGAIN", 8) == 0 ? "redis slot moving" :
                strncmp(r->str, "LOADING", 7) == 0 ? "redis loading" :
                strncmp(r->str, "CLUSTERDOWN", 11) == 0 ?
                "redis cluster down" : "redis not a master");
            if (strncmp(r->str, "TRYAGAIN", 8) != 0) {
                redis_node_close(n);
                redis_topology_stale(rs);
            }
            freeReplyObject(r);
            return STORE_UNAVAILABLE;
        }
        break;
    }
    rs->moved_seen = 0;
    rc = redis_store_decode(rs, r, nlimits, d);
    freeReplyObject(r);
    return rc;
}

/* ------------------------------------------------------------ readiness */

/*
 * Sends cmd on n (connecting first), with one new connection if the
 * server closed the first.  Returns the reply or NULL (STORE_UNAVAILABLE,
 * rs->error set).
 */
static redisReply *
redis_ask(struct redis_store *rs, struct redis_node *n, const char *cmd)
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

/* Whether the script is in n's cache; loads it when it is not (flushed or
 * restarted).  STORE_OK or STORE_UNAVAILABLE. */
static int
redis_node_ready(struct redis_store *rs, struct redis_node *n)
{
    char cmd[64];
    redisReply *r;
    int ok;

    snprintf(cmd, sizeof(cmd), "SCRIPT EXISTS %s", rs->sha);
    if ((r = redis_ask(rs, n, cmd)) == NULL)
        return STORE_UNAVAILABLE;
    ok = r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
        r->element[0]->type == REDIS_REPLY_INTEGER &&
        r->element[0]->integer == 1;
    freeReplyObject(r);
    if (ok)
        return STORE_OK;
    r = redis_command(n->ctx, n->tls, "SCRIPT LOAD %s", embedded_check_lua);
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

int
redis_store_ready(struct redis_store *rs)
{
    struct redis_node *n;
    unsigned char used[REDIS_MAX_NODES];
    redisReply *r;
    int i, master, rc;

    switch (rs->type) {
    case REDIS_SENTINEL:
        if ((n = redis_route(rs, 0)) == NULL)
            return STORE_UNAVAILABLE;
        /* The master may have been demoted since the connect. */
        if ((r = redis_ask(rs, n, "ROLE")) == NULL)
            return STORE_UNAVAILABLE;
        master = r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
            r->element[0]->type == REDIS_REPLY_STRING &&
            strcmp(r->element[0]->str, "master") == 0;
        freeReplyObject(r);
        if (!master) {
            log_warn("redis (%s): ROLE is not master any more", n->addr);
            redis_node_close(n);
            rs->master_known = 0;
            snprintf(rs->error, sizeof(rs->error), "redis master %s is a "
                "replica", rs->cfg->redis_sentinel_master);
            return STORE_UNAVAILABLE;
        }
        return redis_node_ready(rs, n);
    case REDIS_CLUSTER:
        /* The map as the cluster has it now (at most one lookup per
         * REDIS_LOOKUP_MS), all slots served, every primary that checks
         * needed reachable. */
        /* No node gave the map just now (all down, say): not ready,
         * whatever the map learnt before says. */
        rc = redis_cluster_lookup(rs);
        if (rc == -1 || (rc == -2 && !rs->map_loaded)) {
            if (rc == -2 || rs->error[0] == '\0')
                snprintf(rs->error, sizeof(rs->error), "redis cluster "
                    "unreachable");
            return STORE_UNAVAILABLE;
        }
        if (rs->covered < CLUSTER_SLOTS) {
            snprintf(rs->error, sizeof(rs->error), "cluster slots "
                "uncovered (%d of %d)", CLUSTER_SLOTS - rs->covered,
                CLUSTER_SLOTS);
            return STORE_UNAVAILABLE;
        }
        memset(used, 0, sizeof(used));
        for (i = 0; i < CLUSTER_SLOTS; i++)
            used[rs->slots[i] - 1] = 1;
        for (i = 0; i < REDIS_MAX_NODES; i++)
            if (used[i] && rs->node[i].needed &&
                redis_node_ready(rs, &rs->node[i]) != STORE_OK)
                return STORE_UNAVAILABLE;
        return STORE_OK;
    default:
        if (rs->moved_seen) {
            snprintf(rs->error, sizeof(rs->error), "redis is a cluster; "
                "set redis_type = cluster");
            return STORE_UNAVAILABLE;
        }
        return redis_node_ready(rs, &rs->node[0]);
    }
}

/* ------------------------------------------------------------ commands */

redisReply *
redis_store_command(struct redis_store *rs, const char *key, int argc,
    const char **argv, const size_t *argvlen)
{
    struct redis_node *n, *to;
    redisReply *r;
    int redirects, asking = 0, err;

    n = redis_route(rs, rs->type == REDIS_CLUSTER ?
        cluster_keyslot(key, strlen(key)) : 0);
    for (redirects = 0; n != NULL; redirects++) {
        if (redis_node_connect(rs, n) != STORE_OK)
            return NULL;
        if ((r = redis_send(n, argc, argv, argvlen, asking,
            &err)) == NULL) {
            redis_node_fail(rs, n, argv[0], err, 0, 0);
            return NULL;
        }
        if (r->type != REDIS_REPLY_ERROR || redirects == REDIS_MAX_REDIRECTS ||
            (to = redis_redirect(rs, n, r, &asking)) == NULL)
            return r;
        freeReplyObject(r);
        n = to;
    }
    return NULL;
}

void
redis_store_tick(struct redis_store *rs)
{
    /* Sentinel: the sentinels may have named another master while the
     * old one still takes writes (a planned failover demotes it only
     * seconds later, and what it took then is lost): ask again, at most
     * every REDIS_LOOKUP_MS, on the sentinel connection already open. */
    if (rs->type == REDIS_SENTINEL && rs->master_known &&
        rs->sentinel != NULL && util_now_ms() >= rs->lookup_at_ms)
        redis_sentinel_lookup(rs);
}
