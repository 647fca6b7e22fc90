/*
 * redis.h -- the Redis client: one worker's (or ratelimitctl's)
 * connections to Redis, the topology (one server, the master the
 * sentinels name, or a cluster's primaries) and the calls of the embedded
 * scripts.  Its answers are the stores' (store.h).  redis_store.c is the
 * client; redis_tls.c is its lowest layer, TLS under hiredis.
 */
#ifndef REDIS_H
#define REDIS_H

#include "ratelimit.h"
#include "store.h"

/* Nodes a worker knows: cluster primaries and seeds, or the one server. */
#define REDIS_MAX_NODES 64

enum { REDIS_SINGLE, REDIS_CLUSTER, REDIS_SENTINEL };

/* One Redis server and the worker's connection to it. */
struct redis_node {
    char addr[RL_REDIS_ADDR_MAX]; /* "host:port" or "unix:/path";
                                   "" = a free entry */
    void *ctx;                  /* redisContext, NULL when disconnected */
    int64_t retry_at_ms;        /* while connects fail: no blocking connect
                                   before this (monotonic); 0 = none */
    int probing;                /* it did not listen: probe meanwhile */
    int probe_fd;               /* a non-blocking connect in flight, or -1 */
    int64_t probe_start_ms;
    unsigned char peer[128];    /* its address (a struct sockaddr), for the
                                   probe */
    unsigned peer_len;          /* 0 = none yet */
    int needed;                 /* cluster: a check was sent to it */
    void *tls;                  /* struct redis_tls over ctx, or NULL */
};

struct redis_store {
    const struct rl_config *cfg;
    struct rl_counters *counters;
    int type;                   /* REDIS_SINGLE, ... */
    char sha[41];               /* SHA-1 of embedded_check_lua */
    char id_prefix[17];         /* random, per process: the reply slot */
    unsigned long long id_next; /* the next call id */
    char error[160];            /* the last failure, short and without
                                   addresses: /health/ready shows it */
    /* The configured addresses: the server, the seeds or the sentinels. */
    char addrs[RL_REDIS_MAX_ADDRS][RL_REDIS_ADDR_MAX];
    int naddrs;
    /* single and sentinel: node[0]; cluster: seeds and primaries. */
    struct redis_node node[REDIS_MAX_NODES];
    int64_t lookup_at_ms;       /* no topology lookup before this */
    int moved_seen;             /* single: the server is a cluster node */
    /* cluster: the slot map, node index + 1 per slot (0 = no owner). */
    unsigned char slots[CLUSTER_SLOTS];
    int map_loaded;
    int map_stale;              /* a redirection or failure: read it anew */
    int covered;                /* slots with an owner */
    /* sentinel: one connection, to one sentinel at a time */
    void *sentinel;             /* redisContext or NULL */
    int sentinel_at;            /* index in addrs of that sentinel */
    int master_known;           /* node[0] is the master the sentinels
                                   named (and still to be checked) */
    void *sentinel_tls;         /* struct redis_tls over sentinel, or NULL */
    void *tls_ctx;              /* SSL_CTX, made at the first TLS connect */
};

/* Call after fork: the reply slot's name is drawn here.  counters gets
 * the redirections and topology lookups. */
void redis_store_init(struct redis_store *rs, const struct rl_config *cfg,
    struct rl_counters *counters);
void redis_store_close(struct redis_store *rs);

/* Runs the check script, with the process's reply slot and an id of its
 * own (see limiter_request_key), so that a call whose connection died before its
 * reply came is sent once more on a new connection without being charged
 * twice.  On STORE_OK, fills d.  STORE_UNAVAILABLE means Redis could not be
 * reached or did not answer in time (or connects are failing and Redis
 * does not listen yet); STORE_BAD_REPLY means Redis answered an error (out
 * of memory, say) or something the script never returns.  NOSCRIPT is
 * handled inside, with one EVAL.  rs->error holds the short reason. */
int redis_store_check(struct redis_store *rs, struct limiter_call *call,
    int nlimits, struct rl_decision *d);

/* Readiness: connected (a connection Redis closed is reopened once, as for
 * a check) and the script is loaded.  Returns STORE_OK or
 * STORE_UNAVAILABLE with a short reason in rs->error: "redis unreachable",
 * "redis timed out" or "redis script not loaded" (details go to the log
 * only). */
int redis_store_ready(struct redis_store *rs);

/* Between requests: in sentinel mode, asks the sentinel already connected
 * whether the master is still the one in use (at most every 100 ms), and
 * follows a new one before the next check. */
void redis_store_tick(struct redis_store *rs);

/* One command about key (argv as redisCommandArgv takes it), sent where
 * key lives: the server, the master the sentinels name, or the cluster
 * primary owning its slot (MOVED and ASK followed).  Returns the reply
 * (a redisReply; freeReplyObject() it) or NULL with rs->error set.  For
 * ratelimitctl's counter commands. */
struct redisReply;
struct redisReply *redis_store_command(struct redis_store *rs,
    const char *key, int argc, const char **argv, const size_t *argvlen);

/* ------------------------------------------------------------------ */
/* redis_tls.c: TLS under hiredis 0.14's protocol code */

struct redis_tls;
struct redisContext;

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

#endif /* REDIS_H */
