/*
 * service.h -- the parts of ratelimit-fcgi that do I/O: the Redis and
 * PostgreSQL stores, authentication, the API router, the worker loop and
 * the master.  The pure parts they build on are declared in ratelimit.h.
 */
#ifndef SERVICE_H
#define SERVICE_H

#include <signal.h>
#include <sys/types.h>

#include "ratelimit.h"

/* ------------------------------------------------------------------ */
/* redis_store.c */

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

enum { STORE_OK = 0, STORE_UNAVAILABLE = -1, STORE_BAD_REPLY = -2 };

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

/* ------------------------------------------------------------------ */
/* pg_store.c */

struct key_info {
    int found;
    long long key_id;
    char key_prefix[16];
    char tenant_id[RL_UUID_LEN + 1];
    char tenant_name[129];
    int admin;
    int revoked;
    int suspended;
    int anonymous;              /* the anonymous tenant, not a key */
    long long counter_budget;   /* the tenant's own; -1: the configuration's
                                   tenant_counter_budget */
};

/* What a change notification named (pg_store_poll, decide_sync). */
struct store_change {
    int kind;                   /* STORE_CHANGE_* */
    unsigned char key[32];      /* a key's: its SHA-256 */
    char tenant[RL_UUID_LEN + 1]; /* a tenant's rules or limits: its id */
};

enum { STORE_CHANGE_KEY = 1, STORE_CHANGE_TENANT };
#define STORE_CHANGES_MAX 64

struct tenant_rules {
    int n;
    int too_many;               /* the store had more than RL_MAX_RULES:
                                   every check of the tenant is refused */
    uint64_t generation;        /* shm change generation when fetched */
    struct rl_rule *rules;
    struct rules_index *index;  /* of rules, made by decide.c */
};

/* Keys served, for api_keys.last_used_at: written in batches between
 * requests, at most once per key and PG_USED_EVERY_MS. */
#define PG_USED_PENDING 512     /* ids waiting for the next write */
#define PG_USED_SEEN 2048       /* ids written lately (a hash table) */

struct pg_used_seen {
    long long id;               /* 0 = free */
    int64_t at_ms;              /* when it was last queued */
};

struct pg_store {
    void *conn;                 /* PGconn, NULL when disconnected */
    const struct rl_config *cfg;
    int state;                  /* PGS_* in pg_store.c */
    int polling;                /* libpq's connect polling status */
    int result_ok;              /* LISTEN answered OK */
    int was_ready;              /* it has been connected before */
    int64_t started_ms;         /* when the connect began */
    int64_t retry_at_ms;        /* no connect attempt before (monotonic) */
    int failing;                /* the last attempt to use it failed */
    int notified;               /* a change notification arrived */
    unsigned serial;            /* counts connections made */
    unsigned watched;           /* serial of the connection watched */
    int readable;               /* the watcher saw its socket readable */
    struct keyfilter *filter;   /* the pool's filter of active keys, or
                                   NULL */
    char error[160];            /* short reason, for /health/ready */
    int misconfigured;          /* the last failure was a misconfiguration
                                   (error says which): /health/ready 503 */
    int check_step;             /* the connect's schema check: 0 the
                                   catalog's answer awaited, 1 the version
                                   to ask, 2 asked */
    char logged[160];           /* the misconfiguration logged last: each
                                   is logged once, with its fix */
    long long used[PG_USED_PENDING];
    int nused;
    int64_t used_write_at_ms;   /* no batch write before this */
    struct pg_used_seen seen[PG_USED_SEEN];
};

void pg_store_init(struct pg_store *ps, const struct rl_config *cfg);
void pg_store_close(struct pg_store *ps);

/* 1 while PostgreSQL is known to be unreachable (the last attempt to
 * reach it failed), else 0. */
int pg_store_down(const struct pg_store *ps);

/* Between requests: takes a lost connection a step further towards being
 * connected and LISTENing again, waiting a little only when idle is set;
 * on a ready connection, writes the batch of keys served (at most once a
 * second).  Never called with a request in hand. */
void pg_store_tick(struct pg_store *ps, int idle);

/* A key was served: queues its id for last_used_at, unless it was queued
 * in the last minute.  No I/O. */
void pg_store_used(struct pg_store *ps, long long key_id);

/* Looks up a key by its SHA-256 hex.  Returns STORE_OK (out->found says
 * whether it exists) or STORE_UNAVAILABLE. */
int pg_store_key(struct pg_store *ps, const char *hash, struct key_info *out);

/* Looks up a tenant by name (for the anonymous tenant).  STORE_OK (with
 * out->found, tenant_id and suspended set) or STORE_UNAVAILABLE. */
int pg_store_tenant(struct pg_store *ps, const char *name,
    struct key_info *out);

/* Loads the enabled rules of a tenant, with their limits.  On STORE_OK
 * *out is a new allocation the caller frees with decide_rules_free. */
int pg_store_rules(struct pg_store *ps, const char *tenant_id,
    struct tenant_rules **out);

/* Reads change notifications that have arrived, without a round trip,
 * into out (at most max): returns how many, or -1 when what changed is
 * not known (a new connection, a notification that names nothing, more
 * than max).  While a watcher keeps the socket in its poll set
 * (pg_store_socket, pg_store_watch), the socket is read only after the
 * watcher has seen it readable. */
int pg_store_poll(struct pg_store *ps, struct store_change *out, int max);

/* The socket of a connection that is LISTENing, with the connection's
 * serial number in *serial (a new connection may reuse the number), or -1
 * while there is none. */
int pg_store_socket(const struct pg_store *ps, unsigned *serial);

/* The watcher now has the connection of this serial in its poll set; 0
 * says it has none. */
void pg_store_watch(struct pg_store *ps, unsigned serial);

/* The watcher saw the socket readable: the next pg_store_poll reads it. */
void pg_store_readable(struct pg_store *ps);

/* Readiness: one "SELECT 1".  STORE_OK or STORE_UNAVAILABLE; then
 * ps->misconfigured says whether PostgreSQL answered but refuses what the
 * service needs (authentication, database, role, schema, grants). */
int pg_store_ready(struct pg_store *ps);

/* ratelimit-fcgi -C: connects as the service would and checks the schema
 * version and the grants, printing one line per failure (with its fix) on
 * out, each after prefix.  Returns the number of failures. */
int pg_store_selftest(const struct rl_config *cfg, FILE *out,
    const char *prefix);

/* Every call above that needs PostgreSQL is bounded by pg_query_timeout_ms
 * in all (connect included); past it the connection is dropped and the
 * call answers STORE_UNAVAILABLE. */

/* ------------------------------------------------------------------ */
/* A request as worker.c hands it over, independent of libfcgi */

struct http_request {
    const char *method;
    const char *path;           /* without the query string */
    size_t path_len;
    const char *query;
    const char *x_api_key;
    const char *authorization;
    const char *body;
    size_t body_len;
    int body_too_large;
    int authorizer;             /* FCGI_ROLE=AUTHORIZER */
    int auth_subrequest;        /* Responder on authorizer_path (nginx) */
    const char *remote_addr;
    const char *x_forwarded_for;
    int nul_in_key;             /* the key's parameter held a NUL byte */
    int nul_in_param;           /* another parameter held a NUL byte */
    const char *request_id;     /* the web server's, for the access log */
};

/* ------------------------------------------------------------------ */
/* decide.c: the decision behind a seam of stores (no I/O of its own) */

/* Pool-wide counters, in the shared scoreboard (see /metrics). */
struct rl_counters {
    unsigned long requests;
    unsigned long allowed;
    unsigned long denied;
    unsigned long no_rule;
    unsigned long unavailable;
    unsigned long fail_open;
    unsigned long shadow_denied;
    unsigned long redis_errors;
    unsigned long script_errors;    /* Redis answered the script wrongly */
    unsigned long misconfigured;    /* plans refused: too many limits */
    unsigned long fcgi_refused;     /* connections dropped: bad records */
    unsigned long worker_crashes;   /* workers that died abnormally */
    unsigned long worker_rss_exits; /* workers replaced for their memory */
    unsigned long key_lookups;      /* key store lookups */
    unsigned long key_lookups_limited; /* unknown keys refused unasked */
    unsigned long key_lookups_deferred; /* of those, answered 503: the key
                                           filter could not vouch either
                                           way */
    unsigned long redis_redirects;  /* MOVED and ASK followed */
    unsigned long redis_lookups;    /* slot maps read, sentinels asked */
    unsigned long overlimit_hits;   /* denials answered from the cache */
    unsigned long overlimit_inserts;
    unsigned long overlimit_evictions;
    unsigned long over_budget;      /* checks refused by a counter budget */
};

#define COUNT(x, field) \
    __atomic_add_fetch(&(x)->counters->field, 1, __ATOMIC_RELAXED)

/*
 * The stores a decision needs.  key, tenant and rules answer STORE_OK or
 * STORE_UNAVAILABLE (rules: *out a new allocation, freed with
 * decide_rules_free); script answers STORE_OK with d filled,
 * STORE_UNAVAILABLE, STORE_BAD_REPLY or DECIDE_STORE_UNUSABLE (the call
 * could not even be built); changed fills out with at most max changes
 * the key store notified since it was last asked, and answers how many,
 * or -1 when what changed is not known (anything may have).
 */
struct decide_store {
    void *ctx;
    int (*key)(void *ctx, const char *hash, struct key_info *out);
    int (*tenant)(void *ctx, const char *name, struct key_info *out);
    int (*rules)(void *ctx, const char *tenant_id, struct tenant_rules **out);
    int (*script)(void *ctx, struct limiter_call *call, int nlimits,
        struct rl_decision *d);
    int (*changed)(void *ctx, struct store_change *out, int max);
    void (*used)(void *ctx, long long key_id);  /* a key was served */
};

#define DECIDE_STORE_UNUSABLE (-3)

/*
 * What one request came to, for the access log, the slow log, the
 * per-tenant counters and the history: filled by decide.c as it goes,
 * cleared by the worker before each request.
 */
struct rl_trace {
    int check;                  /* a check or an authorizer decision */
    int outcome;                /* enum stats_outcome; -1: from the status */
    char tenant_id[RL_UUID_LEN + 1];
    char tenant[129];
    char key_prefix[16];
    char route[RL_ROUTE_MAX + 1];   /* the route checked, once identified */
    long long rule;             /* the rule that decided; 0: none */
    char limit[RL_NAME_MAX + 24];   /* the limit that denied */
    long long remaining;
    long long retry_after_ms;
    int64_t redis_us;           /* in the script call */
    int64_t pg_us;              /* in key and rule lookups */
    int cached;                 /* denied from the over-limit cache */
};

struct decider {
    const struct rl_config *cfg;
    struct rl_counters *counters;
    struct rl_stats *stats;     /* NULL: not counted (unit tests) */
    struct rl_trace trace;
    struct shm *shm;            /* keys, unknown keys, rules of the pool */
    struct decide_store store;
    struct cache *rules;        /* tenant id -> struct tenant_rules */
    double lookup_tokens;       /* lookups of unknown keys still allowed */
    int64_t lookup_refill_ms;
    long long misconfigured_rule;   /* logged once per rule and generation */
    uint64_t misconfigured_gen;
    long long counter_budget;   /* of the tenant decide_identify found last,
                                   for decide_limits; 0 = unlimited */
};

enum auth_result {
    AUTH_OK = 0,
    AUTH_NO_KEY,
    AUTH_TOO_LONG,
    AUTH_UNKNOWN,
    AUTH_REVOKED,
    AUTH_SUSPENDED,
    AUTH_UNAVAILABLE,
    AUTH_DEFERRED,              /* not known, and no lookup allowed now */
};

enum decide_result {
    DECIDE_OK,                  /* d holds the decision */
    DECIDE_NO_RULE,             /* nothing applies: allowed, no script call */
    DECIDE_NO_RULES,            /* the rules are unknown and unreachable */
    DECIDE_UNAVAILABLE,         /* the limit store is down, fail closed */
    DECIDE_FAIL_OPEN,           /* it is down, and every rule fails open */
    DECIDE_MISCONFIGURED,       /* more limits apply than one check holds */
    DECIDE_SCRIPT_ERROR,        /* the store answered with an error */
    DECIDE_COST_EXCEEDS,        /* the cost is more than limit plan->over
                                   can ever pass: no script call */
    DECIDE_OVER_BUDGET,         /* it would create counters past the
                                   tenant's counter budget: refused, the
                                   wait in trace.retry_after_ms */
};

/* decide_identify flags */
#define DECIDE_CHECKING 1       /* admin keys are refused (403) */
#define DECIDE_ANONYMOUS 2      /* no key: the anonymous tenant, if set */

int decide_init(struct decider *dc, const struct rl_config *cfg,
    struct rl_counters *counters, struct shm *shm,
    const struct decide_store *store);
void decide_free(struct decider *dc);
void decide_rules_free(void *p);

/* Takes the store's change notifications into account. */
void decide_sync(struct decider *dc);

/* A raw API key, or a tenant by name, through what the pool knows: an
 * AUTH_* result; *info is a copy of what is known unless AUTH_NO_KEY or
 * AUTH_UNAVAILABLE. */
int decide_key(struct decider *dc, const char *key, size_t len,
    struct key_info *info);
int decide_tenant(struct decider *dc, const char *name,
    struct key_info *info);

/* The tenant's rules; NULL when they are unknown and unreachable. */
const struct tenant_rules *decide_rules(struct decider *dc,
    const char *tenant_id);

/* Who asks: 0 with *ki filled, or -1 with the 401/403/503 answer in
 * resp. */
int decide_identify(struct decider *dc, const struct http_request *req,
    int flags, struct key_info *ki, struct rl_response *resp);

/* The limits of creq for the tenant, decided: a DECIDE_* result; on
 * DECIDE_OK plan and d describe the decision (shadow limits marked). */
int decide_limits(struct decider *dc, const char *tenant_id,
    const struct check_request *creq, struct rl_plan *plan,
    struct rl_decision *d);

/* Writes the 503 for a DECIDE_* failure and returns 1; 0 (nothing
 * written) for DECIDE_OK, DECIDE_NO_RULE and DECIDE_FAIL_OPEN. */
int decide_answer_failure(struct decider *dc, int rc,
    struct rl_response *resp);
void decide_unavailable(struct decider *dc, struct rl_response *resp,
    enum rl_refusal which);

/* POST /v1/check, the whole answer. */
void decide_check(struct decider *dc, const struct http_request *req,
    struct rl_response *resp);

/* ------------------------------------------------------------------ */
/* authorizer.c */

/* The authorizer decision on the original request. */
void authorizer_decide(struct decider *dc, const struct http_request *req,
    struct rl_response *resp);

/* nginx auth_request takes only 2xx, 401 and 403: maps the rest to 403
 * with X-RateLimit-Status. */
void authorizer_nginx(struct rl_response *resp);

/* ------------------------------------------------------------------ */
/* service.c: a worker's stores plugged into the decision */

struct scoreboard;
struct scoreboard_slot;

struct service {
    const struct rl_config *cfg;
    struct rl_counters *counters;
    struct scoreboard *board;
    struct shm *shm;
    struct redis_store redis;
    struct pg_store pg;
    struct decider decider;
};

int service_init(struct service *svc, const struct rl_config *cfg,
    struct shm *shm);
void service_free(struct service *svc);

/* Housekeeping between requests (PostgreSQL reconnect, notifications);
 * idle says no request is waiting. */
void service_tick(struct service *svc, int idle);

/* ------------------------------------------------------------------ */
/* api.c: the HTTP surface, independent of libfcgi */


void api_handle(struct service *svc, const struct http_request *req,
    struct rl_response *resp);

/* ------------------------------------------------------------------ */
/* views.c: health, metrics, status, configuration reads */

void views_live(struct rl_response *resp);
void views_ready(struct service *svc, struct rl_response *resp);
/* /metrics and /status for viewer: NULL for the operator (the whole
 * pool), else an admin key's tenant, which sees the pool's totals and its
 * own tenant, and nothing that names or describes another. */
void views_metrics(struct service *svc, const struct key_info *viewer,
    struct rl_response *resp);
void views_status(struct service *svc, const struct http_request *req,
    const struct key_info *viewer, struct rl_response *resp);
void views_config(struct service *svc, const struct http_request *req,
    struct rl_response *resp);
void views_dashboard(struct rl_response *resp);

/* ------------------------------------------------------------------ */
/* util.c: escapes for text that must stay on one line */

/* The escape of byte c in a log line or a /status field: "\t", "\n",
 * "\r", "\\" for a backslash, "\xNN" for the other bytes below 0x20 and
 * 0x7f; written to out, NUL terminated.  Returns its length, or 0 (out
 * empty) when c stands for itself. */
size_t util_escape_char(unsigned char c, char out[5]);

/* s (len bytes) escaped so into out[size], NUL terminated.  What does not
 * fit is cut before an escape or a UTF-8 sequence, and "..." marks the cut
 * (when size >= 4).  Returns the length written. */
size_t util_escape(char *out, size_t size, const char *s, size_t len);

/* ------------------------------------------------------------------ */
/* observe.c: after each request, the counters, history and logs */

/* Counts what req came to (resp, the decider's trace) in the pool's
 * statistics, writes its access log line, its denial and slow log lines,
 * and notes it in slot (may be NULL).  total_us: from its first byte read
 * to its answer made. */
void observe_request(struct service *svc, const struct http_request *req,
    const struct rl_response *resp, int64_t total_us,
    struct scoreboard_slot *slot);

/* Clears the trace before a request. */
void observe_begin(struct service *svc);

/* ------------------------------------------------------------------ */
/* listen.c */

/* Returns a listening socket for cfg->listen (fd 0 when it is empty), or
 * -1 with a message in err. */
int listen_open(const struct rl_config *cfg, char *err, size_t errlen);
void listen_cleanup(const struct rl_config *cfg);

/* ------------------------------------------------------------------ */
/* worker.c and master.c */

#define RL_MAX_WORKERS 256

enum slot_state {
    SLOT_IDLE = 0,              /* waiting for a connection */
    SLOT_READING,               /* reading a request, within its deadline */
    SLOT_BUSY,                  /* deciding and answering */
    SLOT_KEEPALIVE,             /* idle on a kept connection */
};

struct scoreboard_slot {
    pid_t pid;
    int state;                  /* enum slot_state */
    int64_t state_since_ms;     /* monotonic */
    unsigned long requests;
    int64_t start_s;            /* when the worker started (wall clock) */
    int leaving;                /* enum stats_exit: why it is leaving */
    /* The request in hand, or else the last one (/status?full).  Read
     * without a lock: a reader may see a mix of two requests' texts. */
    int64_t request_us;         /* how long the last one took */
    long content_length;
    char method[8];
    char uri[64];
    char tenant[64];
};

struct scoreboard {
    int64_t start_s;
    unsigned long accepted;
    int workers;                /* configured pool size; 0 = no master */
    pid_t master;               /* the master; a worker that takes over
                                   from a dead one swaps in its own pid */
    pid_t master_parent;        /* who started the master (its parent) */
    struct rl_counters counters;
    struct scoreboard_slot slots[RL_MAX_WORKERS];
    struct rl_stats stats;
};

/* Counts the live workers and those on a request (reading or busy). */
void scoreboard_count(const struct scoreboard *b, unsigned long *live,
    unsigned long *active);

/* The master's bookkeeping: a worker in slot s exited with status (a
 * waitpid status), counted by cause; and, at most once a second, the
 * samples of php-fpm's pool fields (active processes, the listen queue of
 * listen_fd) at monotonic time now_ms. */
void scoreboard_exited(struct scoreboard *b, const struct scoreboard_slot *s,
    int status);
void scoreboard_sample(struct scoreboard *b, int listen_fd, int64_t now_ms);

/* The listen queue of listen_fd now and its backlog: 0 and -1 when the
 * socket's kind does not tell. */
int scoreboard_listen_queue(int listen_fd, unsigned long *queue,
    unsigned long *backlog);

/* Maps the pool's shared segment for cfg (scoreboard and tables) into m.
 * Returns 0, or -1 with a message logged. */
int scoreboard_map(struct shm *m, const struct rl_config *cfg);
void scoreboard_unmap(struct shm *m);

/* The signal a worker gets when its master dies (PR_SET_PDEATHSIG). */
#define RL_SIG_MASTER_GONE (SIGRTMIN + 1)

/* worker_run's answer when its master died and this worker was chosen to
 * start a new master in its place (see master.c). */
#define WORKER_TAKEOVER 100

/* Serves requests on listen_fd until told to stop, max_requests is
 * reached or its memory passes max_worker_rss_mb.  slot may be NULL (no
 * master).  Returns the exit status, or WORKER_TAKEOVER. */
int worker_run(const struct rl_config *cfg, int listen_fd,
    struct scoreboard_slot *slot, struct shm *shm);

/* The command line, for a worker that starts a new master (main.c). */
void master_set_argv(char **argv);

/* Runs the pool (or, with workers = 0, a worker in this process).  *cfg
 * may be replaced on SIGHUP.  Returns the exit status. */
int master_run(struct rl_config *cfg, int listen_fd);

#endif /* SERVICE_H */
