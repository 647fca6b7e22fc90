/*
 * redis.h -- the Redis client, which both programs use: the service for
 * its checks and readiness, ratelimitctl for its counter and usage
 * commands.  It is three layers in three files: one node's connection
 * (redis_node.c, with TLS under it in redis_tls.c), the topology -- one
 * server, the master the sentinels name, or a cluster's primaries and slot
 * map -- (redis_topology.c) and the calls (redis_call.c), which read
 * Redis's replies through the pure classifier of redis_reply.c.  This
 * header is all that code outside the client needs; redis_client.h is
 * what its files share.  Its answers are the stores' (store.h).
 */
#ifndef REDIS_H
#define REDIS_H

#include "ratelimit.h"
#include "store.h"

struct redisReply;

/* A Lua script the client runs: its text and that text's SHA-1, which
 * EVALSHA names it by. */
struct redis_script {
    const char *text;           /* NUL-terminated, kept (not copied) */
    char sha[41];               /* lowercase hex */
};

/* Makes s the script of text (embedded_check_lua, say: embedded.c's
 * scripts live as long as the process). */
void redis_script_init(struct redis_script *s, const char *text);

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
    struct redis_script check;  /* the check script (embedded_check_lua) */
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
 * own (see limiter_request_key), so that a call whose connection died
 * before its reply came is sent once more on a new connection without
 * being charged twice.  On STORE_OK, fills d.  STORE_UNAVAILABLE means
 * Redis could not be reached or did not answer in time (or connects are
 * failing and Redis does not listen yet); STORE_BAD_REPLY means Redis
 * answered an error (out of memory, say) or something the script never
 * returns.  NOSCRIPT is handled inside, with one EVAL.  rs->error holds
 * the short reason. */
int redis_store_check(struct redis_store *rs, struct limiter_call *call,
    int nlimits, struct rl_decision *d);

/* The most keys and arguments redis_store_script() sends (argc). */
#define REDIS_SCRIPT_MAX_ARGS LIMITER_MAX_ARGS

/*
 * Runs script once with the keys and arguments in argv, which are what
 * follows the script's SHA-1 in EVALSHA: argv[0] the number of keys, then
 * the keys, then the arguments (argc strings of argvlen bytes; the layout
 * of struct limiter_call).  It is sent where its first key (argv[1])
 * lives, as redis_store_command() sends a command, MOVED and ASK
 * followed; NOSCRIPT is answered with one EVAL of the text, which loads
 * it.  Returns the reply (freeReplyObject() it: it may be an error reply,
 * which redis_reply_classify() reads) or NULL with rs->error set, when
 * Redis could not be reached or the connection failed (nothing is sent
 * again: for a call that charges, and must not be charged twice, that is
 * redis_store_check()'s reply slot).  With the client's check script:
 *
 *     struct limiter_call call;
 *     limiter_peek(key, &limit, &call);
 *     r = redis_store_script(rs, &rs->check, call.argc, call.argv,
 *         call.argvlen);
 *
 * and with another embedded script, made once by redis_script_init():
 *
 *     static struct redis_script release;
 *     if (release.text == NULL)
 *         redis_script_init(&release, embedded_release_lua);
 *     r = redis_store_script(rs, &release, argc, argv, argvlen);
 */
struct redisReply *redis_store_script(struct redis_store *rs,
    const struct redis_script *script, int argc, const char **argv,
    const size_t *argvlen);

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
struct redisReply *redis_store_command(struct redis_store *rs,
    const char *key, int argc, const char **argv, const size_t *argvlen);

/* ------------------------------------------------------------------ */
/* redis_reply.c: what a reply of Redis says (pure) */

/* The kinds of reply the client tells apart.  An error reply's kind is
 * its first word; a redirection's slot and node are read too. */
enum redis_reply_kind {
    REPLY_ANSWER = 0,           /* no error and not nil: the answer */
    REPLY_NIL,
    REPLY_ERROR,                /* an error of no kind below */
    REPLY_MOVED,                /* the slot lives elsewhere now */
    REPLY_ASK,                  /* the slot is moving: this once, there */
    REPLY_BAD_REDIRECT,         /* MOVED or ASK that does not parse */
    REPLY_TRYAGAIN,             /* a slot half moved: later */
    REPLY_NOSCRIPT,             /* the script cache does not have it */
    REPLY_READONLY,             /* a replica */
    REPLY_LOADING,              /* loading its data set */
    REPLY_MASTERDOWN,           /* a replica whose master is gone */
    REPLY_CLUSTERDOWN,          /* the cluster is down */
    REPLY_BUSY,                 /* a script running too long */
    REPLY_OOM,                  /* out of memory */
    REPLY_KINDS
};

/* Where a MOVED or ASK sends a call. */
struct redis_redirect {
    int slot;
    char addr[RL_REDIS_ADDR_MAX];  /* "host:port", ":port" (the node that
                                      was asked: Redis 7) */
};

/* The kind of reply r (NULL: REPLY_ERROR); *to is filled for
 * REPLY_MOVED and REPLY_ASK (to may be NULL). */
enum redis_reply_kind redis_reply_classify(const struct redisReply *r,
    struct redis_redirect *to);

/* Whether a reply of that kind says the node cannot serve writes now,
 * however healthy the connection (READONLY, LOADING, MASTERDOWN,
 * CLUSTERDOWN): the check gives up on it and the topology is read again.
 * The short reason, for rs->error, of a check ending on a reply of that
 * kind ("redis loading"); NULL for the kinds that end no check so. */
int redis_reply_not_serving(enum redis_reply_kind kind);
const char *redis_reply_reason(enum redis_reply_kind kind);

/* The check script's reply for nlimits limits into d: 0, or -1 when it
 * is an error reply or of another shape than lua/check.lua answers. */
int redis_reply_decision(const struct redisReply *r, int nlimits,
    struct rl_decision *d);

#endif /* REDIS_H */
