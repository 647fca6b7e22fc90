/*
 * redis_client.h -- what the Redis client's files share, and nothing
 * outside them includes: the node connection (redis_node.c) under the
 * topology (redis_topology.c) under the calls (redis_call.c), with TLS
 * (redis_tls.c) under all of them.  Each layer calls only the ones below
 * it.  The client's public face is redis.h.
 */
#ifndef REDIS_CLIENT_H
#define REDIS_CLIENT_H

#include <hiredis/hiredis.h>

#include "redis.h"

struct redis_tls;               /* redis_tls.c */

/* How many connections a check or a readiness probe tries when Redis
 * closes them under it: the first, and one new one. */
#define REDIS_MAX_TRIES 2

/* What redis_node_connect() found, besides STORE_OK and
 * STORE_UNAVAILABLE: Redis accepted the connection and closed it before
 * the set-up was answered.  A new connection may work. */
#define REDIS_CLOSED (-10)

/* After a failure in the sentinel or cluster modes: the topology is to be
 * looked up again before the next check. */
static inline void
redis_topology_stale(struct redis_store *rs)
{
    if (rs->type == REDIS_SENTINEL)
        rs->master_known = 0;
    else if (rs->type == REDIS_CLUSTER)
        rs->map_stale = 1;
}

/* ------------------------------------------------------------------ */
/* redis_node.c: one node's connection */

/* Makes n a node at addr, with no connection and no back-off. */
void redis_node_set(struct redis_node *n, const char *addr);

/* Drops n's connection (and its probe), keeping its back-off. */
void redis_node_close(struct redis_node *n);

/*
 * Opens a blocking connection to addr, both timeouts set, and with TLS to
 * the data nodes (sentinel 0) or to the sentinels (sentinel 1) when that
 * is configured, starts TLS on it (*tls; NULL without TLS), the handshake
 * within the connect timeout.  NULL when out of memory; otherwise check
 * c->err, and redis_tls_error(*tls) for a TLS failure.
 */
redisContext *redis_open(struct redis_store *rs, const char *addr,
    int sentinel, struct redis_tls **tls);

/* Sends the commands appended to c (over TLS when tls is not NULL) and
 * reads the next reply, as redisGetReply(): REDIS_OK with *r set, or
 * REDIS_ERR with c->err and errno telling why.  Every command of the
 * client goes through here. */
int redis_get_reply(redisContext *c, struct redis_tls *tls, redisReply **r);

/* redisCommand() through redis_get_reply(). */
redisReply *redis_command(redisContext *c, struct redis_tls *tls,
    const char *fmt, ...);

/* Sends AUTH with the given user (may be empty) and password, when there
 * is a password, as the next pipelined command of c.  Returns 1 when it
 * was appended. */
int redis_append_auth(redisContext *c, const char *user,
    const char *password);

/*
 * Whether a failed command met a connection the server closed (end of
 * file, reset, broken pipe).  The command may or may not have run.  err is
 * errno right after the failed call.
 */
int redis_closed(const redisContext *c, int err);

/*
 * Records a failure of what (a command, or "connect") on n and drops the
 * connection.  With backoff, no blocking connect to n is made for
 * redis_backoff_ms, and with probing (it did not listen) a non-blocking
 * probe may end that early; a failed command starts no back-off, since the
 * next request's fresh connect tells at once whether the node is down or
 * was only slow this once.  err is errno right after the failed call.
 * Returns STORE_UNAVAILABLE, for "return redis_node_fail(...)".
 */
int redis_node_fail(struct redis_store *rs, struct redis_node *n,
    const char *what, int err, int backoff, int probing);

/*
 * Connects to n (unless connected) and sets the connection up in one round
 * trip: AUTH, SELECT, ROLE (sentinel mode: it must be a master) and SCRIPT
 * LOAD of the check script.  Returns STORE_OK, STORE_UNAVAILABLE (with the
 * back-off started or running), or REDIS_CLOSED when the server closed the
 * new connection before answering (no back-off: it accepted us, so it is
 * up).
 */
int redis_node_connect(struct redis_store *rs, struct redis_node *n);

/* Sends argv on n's connection, after ASKING when asking.  Returns the
 * reply (of the command, not of ASKING), or NULL with *err set to errno. */
redisReply *redis_node_send(struct redis_node *n, int argc,
    const char **argv, const size_t *argvlen, int asking, int *err);

/* Whether the check script is in n's cache (connecting first, with one
 * new connection if the server closed the first); loads it when it is not
 * (flushed or restarted).  STORE_OK or STORE_UNAVAILABLE. */
int redis_node_ready(struct redis_store *rs, struct redis_node *n);

/* Sends cmd on n (connecting first), with one new connection if the
 * server closed the first.  Returns the reply or NULL (STORE_UNAVAILABLE,
 * rs->error set). */
redisReply *redis_node_ask(struct redis_store *rs, struct redis_node *n,
    const char *cmd);

/* ------------------------------------------------------------------ */
/* redis_topology.c: which nodes, and which one a call goes to */

/* From rs->cfg: the type, the configured addresses and the first nodes
 * (single: the server; cluster: the seeds). */
void redis_topology_init(struct redis_store *rs);

/* Every connection closed, and the TLS settings freed. */
void redis_topology_close(struct redis_store *rs);

/* The node a call of slot goes to; NULL with rs->error set. */
struct redis_node *redis_route(struct redis_store *rs, unsigned slot);

/* After a node failed under a check: the topology is to be looked up
 * again at once (not waiting for REDIS_LOOKUP_MS), once.  Returns 1 when
 * a lookup found where to go (the caller routes again). */
int redis_reroute(struct redis_store *rs);

/*
 * Follows the redirection to (kind REPLY_MOVED or REPLY_ASK, of reply r)
 * from node n.  Returns the node to send to next, with *asking set for an
 * ASK, or NULL when it cannot be followed (rs->error says why).
 */
struct redis_node *redis_follow(struct redis_store *rs,
    const struct redis_node *n, const redisReply *r,
    enum redis_reply_kind kind, const struct redis_redirect *to,
    int *asking);

/* ------------------------------------------------------------------ */
/* redis_tls.c: TLS under hiredis 0.14's protocol code, the lowest layer */

/*
 * Starts TLS on c, a hiredis context whose connect succeeded: the
 * handshake, non-blocking and bounded by deadline_ms (monotonic, as
 * util_now_ms).  *ctxp is the process's TLS settings (an SSL_CTX, made
 * from cfg's redis_tls_* keys when NULL; redis_tls_context_free() it).
 * server_name is sent as SNI (unless an address) and verified against the
 * certificate (redis_tls_verify).  Returns the connection (free it with
 * redis_tls_free() before redisFree(c)), or NULL when out of memory; when
 * it failed, c->err is set and redis_tls_error() says why.
 */
struct redis_tls *redis_tls_start(void **ctxp, const struct rl_config *cfg,
    struct redisContext *c, const char *server_name, int64_t deadline_ms);

/* The TLS failure of t, short and without addresses ("certificate verify
 * failed (hostname mismatch)", "handshake timed out"); "" when none (or t
 * is NULL). */
const char *redis_tls_error(const struct redis_tls *t);

/* redisGetReply() for a context under TLS: writes c->obuf with SSL_write,
 * reads with SSL_read into c's reader until a reply is complete.  Returns
 * REDIS_OK with *reply set, or REDIS_ERR with c->err and errno as
 * redisGetReply() leaves them (a closed connection, a timeout), or
 * REDIS_ERR_OTHER for a TLS failure (redis_tls_error()). */
int redis_tls_get_reply(struct redis_tls *t, struct redisContext *c,
    void **reply);

void redis_tls_free(struct redis_tls *t);
void redis_tls_context_free(void *ctx);

#endif /* REDIS_CLIENT_H */
