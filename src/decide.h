/*
 * decide.h -- the decision behind a seam of stores (decide.c, no I/O of
 * its own) and the authorizer's answer built on it (authorizer.c): a
 * request as the worker hands it over, the seam (struct decide_store),
 * what one request came to (struct rl_trace) and the decision's calls.
 */
#ifndef DECIDE_H
#define DECIDE_H

#include "ratelimit.h"
#include "store.h"

/* A request as worker.c hands it over, independent of libfcgi. */
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

#endif /* DECIDE_H */
