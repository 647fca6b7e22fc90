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
/* store_redis.c */

struct redis_store {
    void *ctx;                  /* redisContext, NULL when disconnected */
    const struct rl_config *cfg;
    char sha[41];               /* SHA-1 of embedded_check_lua */
    int64_t retry_at_ms;        /* no reconnect before (monotonic) */
    char error[160];            /* the last failure, for logs and /ready */
};

enum { STORE_OK = 0, STORE_UNAVAILABLE = -1, STORE_BAD_REPLY = -2 };

void redis_store_init(struct redis_store *rs, const struct rl_config *cfg);
void redis_store_close(struct redis_store *rs);

/* Runs the check script.  On STORE_OK, fills d.  STORE_UNAVAILABLE means
 * Redis could not be reached (or we are backing off after a failure);
 * STORE_BAD_REPLY means Redis answered something the script should never
 * return.  NOSCRIPT is handled inside, with one EVAL. */
int redis_store_check(struct redis_store *rs, struct limiter_call *call,
    int nlimits, struct rl_decision *d);

/* Readiness: connected, PING answers and the script is loaded.  Returns
 * STORE_OK or STORE_UNAVAILABLE with the reason in rs->error. */
int redis_store_ready(struct redis_store *rs);

/* ------------------------------------------------------------------ */
/* store_pg.c */

struct key_info {
    int found;
    long long key_id;
    char key_prefix[16];
    char tenant_id[RL_UUID_LEN + 1];
    char tenant_name[129];
    int admin;
    int revoked;
    int suspended;
};

struct tenant_rules {
    int n;
    struct rl_rule *rules;
};

struct pg_store {
    void *conn;                 /* PGconn, NULL when disconnected */
    const struct rl_config *cfg;
    int64_t retry_at_ms;
    int notified;               /* a change notification arrived */
    unsigned long queries;      /* round trips made, for the tests' logs */
    char error[160];
};

void pg_store_init(struct pg_store *ps, const struct rl_config *cfg);
void pg_store_close(struct pg_store *ps);

/* Looks up a key by its SHA-256 hex.  Returns STORE_OK (out->found says
 * whether it exists) or STORE_UNAVAILABLE. */
int pg_store_key(struct pg_store *ps, const char *hash, struct key_info *out);

/* Looks up a tenant by name (for the anonymous tenant).  STORE_OK (with
 * out->found, tenant_id and suspended set) or STORE_UNAVAILABLE. */
int pg_store_tenant(struct pg_store *ps, const char *name,
    struct key_info *out);

/* Loads the enabled rules of a tenant, with their limits.  On STORE_OK
 * *out is a new allocation the caller frees with pg_store_rules_free. */
int pg_store_rules(struct pg_store *ps, const char *tenant_id,
    struct tenant_rules **out);
void pg_store_rules_free(void *p);

/* Reads change notifications that have arrived, without a round trip.
 * Returns 1 when caches should be dropped, else 0. */
int pg_store_poll(struct pg_store *ps);

/* Readiness: one "SELECT 1".  STORE_OK or STORE_UNAVAILABLE. */
int pg_store_ready(struct pg_store *ps);

/* ------------------------------------------------------------------ */
/* auth.c: API key -> tenant, through the per-process cache */

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
    unsigned long pg_queries;
};

#define COUNT(svc, field) \
    __atomic_add_fetch(&(svc)->counters->field, 1, __ATOMIC_RELAXED)

struct scoreboard;

struct service {
    const struct rl_config *cfg;
    struct rl_counters *counters;
    struct scoreboard *board;
    struct redis_store redis;
    struct pg_store pg;
    struct cache *keys;         /* sha256 hex -> struct key_info */
    struct cache *rules;        /* tenant id -> struct tenant_rules */
};

int service_init(struct service *svc, const struct rl_config *cfg);
void service_free(struct service *svc);

enum auth_result {
    AUTH_OK = 0,
    AUTH_NO_KEY,
    AUTH_UNKNOWN,
    AUTH_REVOKED,
    AUTH_SUSPENDED,
    AUTH_UNAVAILABLE,
};

/* Resolves a raw API key; on every result but AUTH_NO_KEY and
 * AUTH_UNAVAILABLE, *info is a copy of what is known of the key. */
int auth_check_key(struct service *svc, const char *key, size_t len,
    struct key_info *info);

/* Resolves a tenant by name through the same cache; results as for a key
 * (AUTH_UNKNOWN when there is no such tenant). */
int auth_tenant_by_name(struct service *svc, const char *name,
    struct key_info *info);

/* The tenant's rules, cached; NULL when PostgreSQL is needed and down. */
const struct tenant_rules *auth_tenant_rules(struct service *svc,
    const char *tenant_id);

/* ------------------------------------------------------------------ */
/* api.c: the HTTP surface, independent of libfcgi */

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
};

void api_handle(struct service *svc, const struct http_request *req,
    struct rl_response *resp);

/* ------------------------------------------------------------------ */
/* listen.c */

/* Returns a listening socket for cfg->listen (fd 0 when it is empty), or
 * -1 with a message in err. */
int listen_open(const struct rl_config *cfg, char *err, size_t errlen);
void listen_cleanup(const struct rl_config *cfg);

/* ------------------------------------------------------------------ */
/* worker.c and master.c */

struct scoreboard_slot {
    pid_t pid;
    int busy;
    int64_t request_start_ms;   /* monotonic, while busy */
    unsigned long requests;
};

struct scoreboard {
    int64_t start_s;
    unsigned long accepted;
    int workers;                /* configured pool size; 0 = no master */
    struct rl_counters counters;
    struct scoreboard_slot slots[256];
};

/* Serves requests on listen_fd until told to stop or max_requests is
 * reached.  slot may be NULL (no master).  Returns the exit status. */
int worker_run(const struct rl_config *cfg, int listen_fd,
    struct scoreboard_slot *slot, struct scoreboard *board);

/* Runs the pool (or, with workers = 0, a worker in this process).  *cfg
 * may be replaced on SIGHUP.  Returns the exit status. */
int master_run(struct rl_config *cfg, int listen_fd);

#endif /* SERVICE_H */
