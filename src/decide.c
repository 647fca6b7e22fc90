/*
 * decide.c -- the decision: who is asking, which limits apply, what Redis
 * says, and the answer.
 *
 * Every way into a decision goes through here: the check API
 * (decide_check), the authorizer (authorizer.c) and the configuration
 * reads (views.c).  The steps are always the same:
 *
 *   identify   the API key (or the anonymous tenant) -> the tenant, through
 *              what the pool knows (the shared tables of shm.c), asking the
 *              key store only when that has no fresh answer; 401, 403 or
 *              503 when it fails
 *   plan       the tenant's rules (a per-worker cache in front of the
 *              shared tenants table) and the limits for the route
 *   script     one call of the limit store decides all of them
 *   answer     200 or 429 with the headers, or fail open, 503 and why
 *
 * The stores are a seam of function pointers (struct decide_store): the
 * service plugs in PostgreSQL and Redis (service.c), the unit tests plug
 * in fakes, so that every row of doc/api.md's status table is tested
 * without a network.  Nothing in this file does I/O of its own.
 *
 * What the pool knows: known keys and keys PostgreSQL did not know live in
 * two tables, so random keys can never push out a key in use.  An entry
 * is fresh for key_cache_ttl (unknown keys: key_cache_negative_ttl) and as
 * long as no change was notified since it was fetched; stale entries are
 * still used when the key store cannot be reached.  Lookups of keys the
 * pool does not know at all are limited per worker to key_lookup_rate a
 * second, unless the filter of active keys (keyfilter.c) vouches for the
 * key; past that such a key is answered 401 when the filter is complete
 * (PostgreSQL has said there is no such active key) and 503
 * key_lookup_deferred otherwise: a valid key is never called invalid
 * without PostgreSQL's word (doc/design.md, "Keys the pool has not seen").
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/sha.h>

#include "decide.h"
#include "lease.h"

_Static_assert(sizeof(struct key_info) <= SHM_KEY_VALUE_MAX,
    "struct key_info must fit in a shared key entry");

#define STAT(dc, field) do { if ((dc)->stats != NULL) \
    __atomic_add_fetch(&(dc)->stats->field, 1, __ATOMIC_RELAXED); } while (0)

/* Adds the time since t0 to the request's PostgreSQL time. */
static void
decide_pg_time(struct decider *dc, int64_t t0)
{
    int64_t us = util_now_us() - t0;

    dc->trace.pg_us += us;
    if (dc->stats != NULL)
        stats_hist_add(&dc->stats->pg, (uint64_t)us);
}

void
decide_rules_free(void *p)
{
    struct tenant_rules *tr = p;

    if (tr == NULL)
        return;
    rules_index_free(tr->index);
    free(tr->rules);
    free(tr);
}

int
decide_init(struct decider *dc, const struct rl_config *cfg,
    struct rl_counters *counters, struct shm *shm,
    const struct decide_store *store)
{
    memset(dc, 0, sizeof(*dc));
    dc->cfg = cfg;
    dc->counters = counters;
    dc->shm = shm;
    dc->store = *store;
    dc->lookup_tokens = (double)cfg->key_lookup_rate;
    dc->lookup_refill_ms = util_now_ms();
    if ((dc->rules = cache_create(1024, decide_rules_free)) == NULL)
        return -1;
    cache_set_max_cost(dc->rules, (size_t)cfg->rule_cache_worker_mb << 20);
    return 0;
}

void
decide_free(struct decider *dc)
{
    cache_free(dc->rules);
    dc->rules = NULL;
}

void
decide_sync(struct decider *dc)
{
    struct store_change ch[STORE_CHANGES_MAX];
    int i, n = dc->store.changed(dc->store.ctx, ch, STORE_CHANGES_MAX);

    if (n < 0) {
        shm_changed(dc->shm);
        cache_clear(dc->rules);
        return;
    }
    /* Only what was named: a key, or one tenant's rules (in the pool's
     * tables through its stripe, here by its entry). */
    for (i = 0; i < n; i++) {
        if (ch[i].kind == STORE_CHANGE_KEY)
            shm_changed_key(dc->shm, ch[i].key);
        else {
            shm_changed_tenant(dc->shm, ch[i].tenant);
            cache_remove(dc->rules, ch[i].tenant);
        }
    }
}

static int
decide_result(const struct key_info *ki)
{
    if (!ki->found)
        return AUTH_UNKNOWN;
    if (ki->revoked)
        return AUTH_REVOKED;
    if (ki->suspended)
        return AUTH_SUSPENDED;
    return AUTH_OK;
}

/* One more lookup of a key the pool does not know, if the worker's rate
 * allows it. */
static int
decide_lookup_allowed(struct decider *dc, int64_t now)
{
    double rate = (double)dc->cfg->key_lookup_rate;

    if (rate <= 0)
        return 1;
    dc->lookup_tokens += rate * (double)(now - dc->lookup_refill_ms) / 1000;
    if (dc->lookup_tokens > rate)
        dc->lookup_tokens = rate;
    dc->lookup_refill_ms = now;
    if (dc->lookup_tokens < 1)
        return 0;
    dc->lookup_tokens -= 1;
    return 1;
}

/*
 * Finds the entry with this id in the pool's tables, asking the store
 * through lookup (with arg) when there is no fresh answer.  Returns an
 * AUTH_* result; *info is filled unless AUTH_UNAVAILABLE.
 */
static int
decide_lookup(struct decider *dc, const unsigned char id[32], const char *arg,
    int (*lookup)(void *, const char *, struct key_info *), int is_key,
    struct key_info *info)
{
    struct key_info known, fresh;
    struct shm_meta meta, nmeta;
    int64_t now = util_now_ms(), t0;
    uint64_t gen;
    int have, rc, seen;

    decide_sync(dc);
    gen = shm_generation_key(dc->shm, id);
    have = shm_get(dc->shm, SHM_KEYS, id, &known, sizeof(known), &meta) &&
        meta.len == sizeof(known);
    if (have && meta.generation == gen &&
        now - meta.stamp < 1000 * dc->cfg->key_cache_ttl) {
        STAT(dc, key_hits);
        *info = known;
        return decide_result(&known);
    }
    memset(info, 0, sizeof(*info));
    if (shm_get(dc->shm, SHM_UNKNOWN, id, NULL, 0, &nmeta) &&
        nmeta.generation == gen && now < nmeta.stamp)
        return AUTH_UNKNOWN;
    /* Unknown to the pool: a key the filter vouches for is asked about
     * at once; any other only within key_lookup_rate, and past it is
     * invalid when the filter is complete, else asked about later.
     * Without a filter, or for a tenant name, every answer is "later":
     * only PostgreSQL says that a key does not exist. */
    if (!have && (seen = is_key ? keyfilter_test(dc->shm->keyfilter, id) :
        KEYFILTER_UNKNOWN) != KEYFILTER_MAYBE &&
        !decide_lookup_allowed(dc, now)) {
        COUNT(dc, key_lookups_limited);
        if (seen == KEYFILTER_ABSENT)
            return AUTH_UNKNOWN;
        COUNT(dc, key_lookups_deferred);
        return AUTH_DEFERRED;
    }
    COUNT(dc, key_lookups);
    STAT(dc, key_misses);
    t0 = util_now_us();
    rc = lookup(dc->store.ctx, arg, &fresh);
    decide_pg_time(dc, t0);
    if (rc != STORE_OK) {
        if (have) {
            log_debug("%.10s...: using what the pool knew while the key "
                "store is unavailable", known.key_prefix);
            *info = known;
            return decide_result(&known);
        }
        return AUTH_UNAVAILABLE;
    }
    /* A reconnect may have bumped the generation: what we hold is fresh
     * as of the generation read before asking. */
    decide_sync(dc);
    *info = fresh;
    if (fresh.found)
        shm_put(dc->shm, SHM_KEYS, id, &fresh, sizeof(fresh), now, gen,
            (int32_t)getpid());
    else
        shm_put(dc->shm, SHM_UNKNOWN, id, NULL, 0,
            now + 1000 * dc->cfg->key_cache_negative_ttl + 1, gen,
            (int32_t)getpid());
    return decide_result(&fresh);
}

int
decide_key(struct decider *dc, const char *key, size_t len,
    struct key_info *info)
{
    unsigned char md[SHA256_DIGEST_LENGTH];
    char hash[2 * SHA256_DIGEST_LENGTH + 1];

    if (len == 0)
        return AUTH_NO_KEY;
    util_sha256((const unsigned char *)key, len, md);
    util_hex(md, sizeof(md), hash);
    return decide_lookup(dc, md, hash, dc->store.key, 1, info);
}

int
decide_tenant(struct decider *dc, const char *name, struct key_info *info)
{
    char tag[RL_NAME_MAX * 2 + 24];
    unsigned char id[SHA256_DIGEST_LENGTH];

    /* Key ids are hashes of keys; this is the hash of another text, so
     * the two cannot meet by accident. */
    snprintf(tag, sizeof(tag), "tenant-by-name:%s", name);
    util_sha256((const unsigned char *)tag, strlen(tag), id);
    return decide_lookup(dc, id, name, dc->store.tenant, 0, info);
}

/* The tenants table's id for a tenant's rules. */
static void
decide_rules_id(const char *tenant_id, unsigned char id[32])
{
    static struct sha256_memo memo;
    char tag[RL_UUID_LEN + 8];

    memcpy(tag, "rules:", 6);
    util_copy(tag + 6, sizeof(tag) - 6, tenant_id);
    util_sha256_memo(&memo, tag, strlen(tag), id);
}

/* What a tenant's rules hold in a worker's memory (its cache's bound). */
static size_t
decide_rules_bytes(const struct tenant_rules *tr)
{
    return sizeof(*tr) + (size_t)tr->n * sizeof(*tr->rules) +
        rules_index_bytes(tr->index);
}

/* Unpacks the shared entry of a tenant's rules into a new allocation. */
static struct tenant_rules *
decide_rules_unpack(const unsigned char *blob, size_t len, uint64_t gen)
{
    struct tenant_rules *tr;
    int n = shm_rules_count(blob, len);

    if (n < 0 || n > RL_MAX_RULES || (tr = calloc(1, sizeof(*tr))) == NULL)
        return NULL;
    if ((n > 0 && (tr->rules = calloc((size_t)n, sizeof(*tr->rules))) ==
        NULL) || shm_rules_unpack(blob, len, tr->rules, n) != n ||
        (tr->index = rules_index_build(tr->rules, n)) == NULL) {
        decide_rules_free(tr);
        return NULL;
    }
    tr->n = n;
    tr->generation = gen;
    return tr;
}

/*
 * A tenant whose rules pack to more than a shared entry holds has them in
 * the pool's ring (arena.c); its entry then holds this reference.  (A
 * packing starts with its number of rules, at most RL_MAX_RULES, so it is
 * never taken for one.)
 */
struct rules_ref {
    uint32_t magic;
    uint32_t pad;
    uint64_t pos;
    uint64_t len;
};

#define RULES_REF_MAGIC 0x524c5252u     /* "RLRR" */

/* Unpacks the shared entry blob (len bytes), following a reference to the
 * ring; NULL when what it names is gone. */
static struct tenant_rules *
decide_rules_shared(struct decider *dc, const unsigned char *blob,
    size_t len, uint64_t gen)
{
    struct tenant_rules *tr;
    struct rules_ref ref;
    unsigned char *big;

    if (len != sizeof(ref))
        return decide_rules_unpack(blob, len, gen);
    memcpy(&ref, blob, sizeof(ref));
    if (ref.magic != RULES_REF_MAGIC)
        return decide_rules_unpack(blob, len, gen);
    if (ref.len > arena_max(dc->shm->arena) ||
        (big = malloc((size_t)ref.len)) == NULL)
        return NULL;
    tr = arena_get(dc->shm->arena, ref.pos, big, (size_t)ref.len) == 0 ?
        decide_rules_unpack(big, (size_t)ref.len, gen) : NULL;
    free(big);
    return tr;
}

/* Shares a tenant's rules with the pool: in its entry when they fit
 * (blob, SHM_TENANT_VALUE_MAX bytes, is the room), else in the ring with
 * a reference in the entry. */
static void
decide_rules_share(struct decider *dc, const unsigned char id[32],
    const struct tenant_rules *tr, unsigned char *blob, int64_t now,
    uint64_t gen)
{
    struct rules_ref ref;
    unsigned char *big;
    long len;

    if (tr->too_many)
        return;     /* the packing has no room to say so */
    if ((len = shm_rules_pack(tr->rules, tr->n, blob,
        SHM_TENANT_VALUE_MAX)) >= 0) {
        shm_put(dc->shm, SHM_TENANTS, id, blob, (size_t)len, now, gen,
            (int32_t)getpid());
        return;
    }
    memset(&ref, 0, sizeof(ref));
    ref.magic = RULES_REF_MAGIC;
    ref.len = shm_rules_packed_size(tr->rules, tr->n);
    if (ref.len > arena_max(dc->shm->arena) ||
        (big = malloc((size_t)ref.len)) == NULL) {
        log_debug("%d rules: too large for rule_cache_shared_mb", tr->n);
        return;
    }
    shm_rules_pack(tr->rules, tr->n, big, (size_t)ref.len);
    ref.pos = arena_put(dc->shm->arena, big, (size_t)ref.len);
    free(big);
    if (ref.pos != 0)
        shm_put(dc->shm, SHM_TENANTS, id, &ref, sizeof(ref), now, gen,
            (int32_t)getpid());
}

const struct tenant_rules *
decide_rules(struct decider *dc, const char *tenant_id)
{
    static unsigned char blob[SHM_TENANT_VALUE_MAX];
    struct tenant_rules *tr, *fresh;
    struct shm_meta meta;
    unsigned char id[32];
    int64_t now = util_now_ms(), ttl = 1000 * dc->cfg->rule_cache_ttl, t0;
    uint64_t gen;
    int stale = 0, shared, rc;

    /* No decide_sync here: every caller has just identified the tenant
     * through decide_key or decide_tenant, which took the notifications
     * in; one more look at the socket per check would be a wasted read. */
    gen = shm_generation_tenant(dc->shm, tenant_id);
    tr = cache_get(dc->rules, tenant_id, now, &stale);
    if (tr != NULL && !stale && tr->generation == gen) {
        STAT(dc, rule_hits);
        return tr;
    }
    decide_rules_id(tenant_id, id);
    shared = shm_get(dc->shm, SHM_TENANTS, id, blob, sizeof(blob), &meta);
    if (shared && meta.generation == gen && now - meta.stamp < ttl &&
        (fresh = decide_rules_shared(dc, blob, meta.len, gen)) != NULL) {
        /* Another worker fetched them: ours until theirs expire. */
        STAT(dc, rule_hits);
        if (cache_put_cost(dc->rules, tenant_id, fresh,
            decide_rules_bytes(fresh), now, ttl - (now - meta.stamp)) == -1)
            return NULL;
        return fresh;
    }
    STAT(dc, rule_misses);
    t0 = util_now_us();
    rc = dc->store.rules(dc->store.ctx, tenant_id, &fresh);
    decide_pg_time(dc, t0);
    if (rc != STORE_OK) {
        /* The store is down: stale rules beat no rules. */
        if (tr != NULL)
            return tr;
        if (shared && (fresh = decide_rules_shared(dc, blob, meta.len,
            meta.generation)) != NULL) {
            if (cache_put_cost(dc->rules, tenant_id, fresh,
                decide_rules_bytes(fresh), now, 0) == -1)
                return NULL;
            return fresh;
        }
        return NULL;
    }
    fresh->generation = gen;
    if (fresh->index == NULL &&
        (fresh->index = rules_index_build(fresh->rules, fresh->n)) == NULL) {
        decide_rules_free(fresh);
        return NULL;
    }
    decide_sync(dc);
    decide_rules_share(dc, id, fresh, blob, now, gen);
    if (cache_put_cost(dc->rules, tenant_id, fresh,
        decide_rules_bytes(fresh), now, ttl) == -1)
        return NULL;
    return fresh;
}

/* ------------------------------------------------------------------ */
/* Answers */

void
decide_unavailable(struct decider *dc, struct rl_response *resp,
    enum rl_refusal which)
{
    COUNT(dc, unavailable);
    response_refuse(resp, which, NULL);
    response_header(resp, "Retry-After", "%ld",
        dc->cfg->retry_after_unavailable);
}

/*
 * Answers a failed identification: 401 for a missing, unknown, revoked or
 * unusable key, 403 for a suspended tenant, 503 when the key store is
 * down.  Returns 0 for AUTH_OK (nothing written), else -1.
 */
static int
decide_auth_answer(struct decider *dc, struct rl_response *resp, int rc)
{
    switch (rc) {
    case AUTH_OK:
        return 0;
    case AUTH_NO_KEY:
        response_refuse(resp, RL_REFUSE_KEY_MISSING, NULL);
        return -1;
    case AUTH_TOO_LONG:
        response_refuse(resp, RL_REFUSE_KEY_TOO_LONG, NULL);
        return -1;
    case AUTH_UNKNOWN:
    case AUTH_REVOKED:
        response_refuse(resp, RL_REFUSE_KEY_INVALID, NULL);
        return -1;
    case AUTH_SUSPENDED:
        response_refuse(resp, RL_REFUSE_TENANT_SUSPENDED, NULL);
        return -1;
    case AUTH_DEFERRED:
        /* Not "invalid": nobody has said so yet. */
        response_refuse(resp, RL_REFUSE_KEY_DEFERRED, NULL);
        response_header(resp, "Retry-After", "1");
        return -1;
    default:
        decide_unavailable(dc, resp, RL_REFUSE_KEY_STORE);
        return -1;
    }
}

int
decide_identify(struct decider *dc, const struct http_request *req,
    int flags, struct key_info *ki, struct rl_response *resp)
{
    const char *key = NULL;
    int keylen, rc;

    memset(ki, 0, sizeof(*ki));
    keylen = request_api_key(req->x_api_key, req->authorization, &key);
    if (keylen == -1)
        rc = AUTH_TOO_LONG;
    else if (req->nul_in_key)
        /* libfcgi cut the key at the NUL: what is left is not the key. */
        rc = AUTH_UNKNOWN;
    else if (keylen > 0)
        rc = decide_key(dc, key, (size_t)keylen, ki);
    else if ((flags & DECIDE_ANONYMOUS) &&
        dc->cfg->anonymous_tenant[0] != '\0') {
        rc = decide_tenant(dc, dc->cfg->anonymous_tenant, ki);
        if (rc == AUTH_UNKNOWN) {
            log_error("anonymous_tenant \"%s\" does not exist",
                dc->cfg->anonymous_tenant);
            rc = AUTH_UNAVAILABLE;
        }
        ki->anonymous = 1;
    } else
        rc = AUTH_NO_KEY;
    if (rc != AUTH_UNAVAILABLE && ki->found) {
        memcpy(dc->trace.tenant_id, ki->tenant_id, sizeof(ki->tenant_id));
        memcpy(dc->trace.tenant, ki->tenant_name, sizeof(ki->tenant_name));
        memcpy(dc->trace.key_prefix, ki->key_prefix,
            sizeof(ki->key_prefix));
    }
    if (decide_auth_answer(dc, resp, rc) == -1)
        return -1;
    dc->counter_budget = ki->counter_budget >= 0 ? ki->counter_budget :
        dc->cfg->tenant_counter_budget;
    if (!ki->anonymous && ki->key_id > 0 && dc->store.used != NULL)
        dc->store.used(dc->store.ctx, ki->key_id);
    if ((flags & DECIDE_CHECKING) && ki->admin) {
        response_refuse(resp, RL_REFUSE_ADMIN_KEY_CHECKS, NULL);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* The over-limit cache */

/*
 * A denial Redis gave, remembered by the pool until the time it holds:
 * the counters of a check are named by its call's keys, so their SHA-256
 * is the entry's id; the entry's stamp is the monotonic time until which
 * the denial holds (the largest Retry-After of the limits that denied),
 * and a check of the same counters with at least the same cost before
 * then is denied again from here, without Redis.  Only denials are kept,
 * never past that time, and none fetched under an older generation of
 * the tenant (a change of its rules; a reload).
 */
struct overlimit {
    long long cost;             /* denied at this cost (and more) */
    int64_t stored_ms;          /* monotonic, when it was stored */
    struct rl_decision d;
};

/* The id of the counters of call: SHA-256 of its keys, which
 * limiter_build() lays out one after the other, NUL-separated. */
static void
decide_overlimit_id(const struct limiter_call *call, unsigned char id[32])
{
    static struct sha256_memo memo;
    int n = call->nlimits;
    const char *first, *end;

    if (n < 1 || n >= call->argc) {
        memset(id, 0, 32);
        return;
    }
    first = call->argv[1];
    end = call->argv[n] + call->argvlen[n];
    util_sha256_memo(&memo, first, (size_t)(end - first), id);
}

/* A remembered denial of the counters of call for cost into d, with its
 * times counted down.  1 on a hit; id is set either way. */
static int
decide_overlimit_get(struct decider *dc, const struct limiter_call *call,
    long long cost, uint64_t gen, unsigned char id[32], struct rl_decision *d)
{
    struct overlimit o;
    struct shm_meta meta;
    int64_t now, gone;
    int i;

    decide_overlimit_id(call, id);
    if (!shm_get(dc->shm, SHM_OVERLIMIT, id, &o, sizeof(o), &meta) ||
        meta.len != sizeof(o) || meta.generation != gen)
        return 0;
    now = util_now_ms();
    if (now >= meta.stamp || cost < o.cost)
        return 0;
    gone = now - o.stored_ms;
    *d = o.d;
    d->now_ms += gone;
    for (i = 0; i < d->nlimits; i++) {
        d->st[i].reset_ms = d->st[i].reset_ms > gone ?
            d->st[i].reset_ms - gone : 0;
        if (!d->st[i].allowed && d->st[i].retry_after_ms > 0)
            d->st[i].retry_after_ms = d->st[i].retry_after_ms > gone ?
                d->st[i].retry_after_ms - gone : 1;
    }
    return 1;
}

/* Remembers denial d of cost, when its Retry-After is long enough. */
static void
decide_overlimit_put(struct decider *dc, const unsigned char id[32],
    long long cost, uint64_t gen, const struct rl_decision *d)
{
    struct overlimit o;
    long long wait = 0;
    int i, rc;

    for (i = 0; i < d->nlimits; i++) {
        if (d->st[i].allowed || d->st[i].shadow)
            continue;
        if (d->st[i].retry_after_ms < 0)
            return;
        if (d->st[i].retry_after_ms > wait)
            wait = d->st[i].retry_after_ms;
    }
    if (wait < dc->cfg->overlimit_cache_min_ms)
        return;
    memset(&o, 0, sizeof(o));
    o.cost = cost;
    o.stored_ms = util_now_ms();
    o.d = *d;
    rc = shm_put(dc->shm, SHM_OVERLIMIT, id, &o, sizeof(o),
        o.stored_ms + wait, gen, (int32_t)getpid());
    if (rc >= 0)
        COUNT(dc, overlimit_inserts);
    if (rc == 1)
        COUNT(dc, overlimit_evictions);
}

/* ------------------------------------------------------------------ */
/* Limits */

/* Notes in the trace what decision d was, and which limit denied. */
static void
decide_trace_decision(struct decider *dc, const struct rl_plan *plan,
    const struct rl_decision *d)
{
    struct rl_trace *t = &dc->trace;
    int i;

    t->outcome = d->allowed ? OUT_ALLOWED : OUT_DENIED;
    for (i = 0; i < d->nlimits && i < plan->n; i++) {
        if (d->allowed || (!d->st[i].allowed && !d->st[i].shadow)) {
            t->rule = plan->rule[i]->id;
            util_copy(t->limit, sizeof(t->limit), plan->name[i]);
            t->remaining = d->st[i].remaining;
            t->retry_after_ms = d->st[i].retry_after_ms;
            return;
        }
    }
}

int
decide_limits(struct decider *dc, const char *tenant_id,
    const struct check_request *creq, struct rl_plan *plan,
    struct rl_decision *d)
{
    const struct tenant_rules *tr;
    struct limiter_call call;
    unsigned char id[32];
    char lease_id[LEASE_ID_LEN + 1], lease_tenant[RL_UUID_LEN + 1];
    char lease_random[LEASE_RANDOM_HEX + 1], lease_rkey[LEASE_KEY_MAX + 1];
    long long lease_ttl = 0;
    int64_t t0;
    int i, rc, fail_open, cache = dc->cfg->overlimit_cache_size > 0 &&
        !creq->peek;

    util_copy(dc->trace.route, sizeof(dc->trace.route), creq->route);
    if ((tr = decide_rules(dc, tenant_id)) == NULL)
        return DECIDE_NO_RULES;
    dc->trace.check = 1;
    if (tr->too_many) {
        /* Some of its rules are not loaded: answering from the others
         * would let through what those deny. */
        COUNT(dc, misconfigured);
        plan->n = 0;
        return DECIDE_MISCONFIGURED;
    }
    switch (rules_index_plan(tr->index, creq->route, plan)) {
    case 0:
        COUNT(dc, no_rule);
        dc->trace.outcome = OUT_NO_RULE;
        return DECIDE_NO_RULE;
    case -1:
        /* Deciding on some of the limits would let through what the rest
         * forbid: refuse, and say so once per rule and generation. */
        COUNT(dc, misconfigured);
        if (dc->misconfigured_rule != plan->rule[0]->id ||
            dc->misconfigured_gen != tr->generation) {
            dc->misconfigured_rule = plan->rule[0]->id;
            dc->misconfigured_gen = tr->generation;
            if (plan->needed == -1)
                log_error("tenant %s route %s: rule %lld has a limit this "
                    "service could not load; answering 503", tenant_id,
                    creq->route, plan->rule[0]->id);
            else
                log_error("tenant %s route %s: rule %lld and the always "
                    "rules that match have %d limits, more than the %d one "
                    "check can decide; answering 503", tenant_id,
                    creq->route, plan->rule[0]->id, plan->needed,
                    RL_MAX_LIMITS);
        }
        return DECIDE_MISCONFIGURED;
    }
    dc->trace.rule = plan->rule[0]->id;
    /* A cost above what an enforced limit lets through at once can never
     * pass: no answer with a time to wait, no script call.  (A shadow
     * limit decides nothing; a concurrency limit takes one slot whatever
     * the cost.) */
    for (i = 0; i < plan->n; i++)
        if (!plan->rule[i]->shadow && !algo_is_concurrency(plan->limit[i]) &&
            creq->cost > algo_quota(plan->limit[i])) {
            plan->over = i;
            return DECIDE_COST_EXCEEDS;
        }
    /* A check that takes a slot, or reserves its cost, takes a lease.  A
     * rule with a concurrency limit is never answered from the over-limit
     * cache: a release frees a slot at once, long before any wait a
     * denial could name. */
    if (lease_ttl_for(plan, 0) > 0)
        cache = 0;
    d->lease[0] = '\0';
    if (!creq->peek && (lease_ttl = lease_ttl_for(plan, creq->reserve)) > 0) {
        if (lease_id_make(tenant_id, lease_id) == -1 ||
            lease_id_parse(lease_id, strlen(lease_id), lease_tenant,
            lease_random) == -1) {
            log_error("tenant %s: cannot make a lease id", tenant_id);
            return DECIDE_SCRIPT_ERROR;
        }
        lease_key(lease_tenant, lease_random, lease_rkey);
    }
    if (limiter_build(tenant_id, plan, creq, &call) == -1 ||
        limiter_budget(&call, plan, dc->counter_budget) == -1 ||
        (lease_ttl > 0 && limiter_lease(&call, lease_rkey, lease_random,
        lease_ttl) == -1)) {
        log_error("rule %lld: cannot build the script call",
            plan->rule[0]->id);
        rc = DECIDE_STORE_UNUSABLE;
    } else if (cache && decide_overlimit_get(dc, &call, creq->cost,
        shm_generation_tenant(dc->shm, tenant_id), id, d)) {
        /* Known to be over the limit until later: no Redis call. */
        COUNT(dc, overlimit_hits);
        COUNT(dc, denied);
        dc->trace.cached = 1;
        decide_trace_decision(dc, plan, d);
        return DECIDE_OK;
    } else {
        t0 = util_now_us();
        rc = dc->store.script(dc->store.ctx, &call, plan->n, d);
        dc->trace.redis_us = util_now_us() - t0;
        if (dc->stats != NULL)
            stats_hist_add(&dc->stats->redis, (uint64_t)dc->trace.redis_us);
    }
    if (rc == STORE_BAD_REPLY) {
        /* Redis answered, but not what the script answers: a bug or an
         * operator's problem (e.g. out of memory), never a reason to let
         * requests through. */
        COUNT(dc, script_errors);
        return DECIDE_SCRIPT_ERROR;
    }
    if (rc != STORE_OK) {
        COUNT(dc, redis_errors);
        /* Open only when every rule involved says so: one closed rule
         * is enough to keep the door shut. */
        for (fail_open = 1, i = 0; i < plan->n; i++)
            fail_open = fail_open && plan->rule[i]->fail_open;
        if (fail_open) {
            COUNT(dc, fail_open);
            dc->trace.outcome = OUT_FAIL_OPEN;
            log_warn("redis unavailable: rule %lld fails open",
                plan->rule[0]->id);
            return DECIDE_FAIL_OPEN;
        }
        return DECIDE_UNAVAILABLE;
    }
    if (d->over_budget) {
        /* New counters past the tenant's budget: nothing was written. */
        COUNT(dc, over_budget);
        dc->trace.retry_after_ms = d->budget_retry_ms;
        return DECIDE_OVER_BUDGET;
    }
    if (limiter_apply_shadow(plan, d)) {
        COUNT(dc, shadow_denied);
        for (i = 0; i < plan->n; i++)
            if (d->st[i].shadow && !d->st[i].allowed)
                log_info("shadow: tenant %s rule %lld limit \"%s\" would "
                    "have denied", dc->trace.tenant[0] != '\0' ?
                    dc->trace.tenant : tenant_id, plan->rule[i]->id,
                    plan->name[i]);
    }
    if (d->allowed && lease_ttl > 0) {
        /* The script took the lease: its id goes back to the client. */
        memcpy(d->lease, lease_id, sizeof(lease_id));
        d->lease_ttl_ms = lease_ttl;
        COUNT(dc, leases_taken);
        if (d->lease_dropped > 0)
            __atomic_add_fetch(&dc->counters->leases_expired,
                (unsigned long)d->lease_dropped, __ATOMIC_RELAXED);
    }
    if (d->allowed)
        COUNT(dc, allowed);
    else {
        COUNT(dc, denied);
        if (cache)
            /* Under the rules it was decided by: stale at once if they
             * are already (served while the store was down). */
            decide_overlimit_put(dc, id, creq->cost, tr->generation, d);
    }
    decide_trace_decision(dc, plan, d);
    return DECIDE_OK;
}

int
decide_answer_failure(struct decider *dc, int rc, struct rl_response *resp)
{
    switch (rc) {
    case DECIDE_NO_RULES:
        decide_unavailable(dc, resp, RL_REFUSE_RULE_STORE);
        return 1;
    case DECIDE_UNAVAILABLE:
        decide_unavailable(dc, resp, RL_REFUSE_LIMIT_STORE);
        return 1;
    case DECIDE_MISCONFIGURED:
        decide_unavailable(dc, resp, RL_REFUSE_MISCONFIGURED);
        return 1;
    case DECIDE_SCRIPT_ERROR:
        decide_unavailable(dc, resp, RL_REFUSE_SCRIPT_ERROR);
        return 1;
    case DECIDE_COST_EXCEEDS:
        response_refuse(resp, RL_REFUSE_COST_EXCEEDS, NULL);
        return 1;
    case DECIDE_OVER_BUDGET:
        response_over_budget(resp, dc->trace.retry_after_ms);
        return 1;
    }
    return 0;
}


void
decide_check(struct decider *dc, const struct http_request *req,
    struct rl_response *resp)
{
    struct check_request creq;
    struct rl_decision d;
    struct rl_plan plan;
    struct key_info ki;
    char err[128];
    int rc;

    if (req->body_too_large) {
        snprintf(err, sizeof(err), "request body is larger than %ld bytes",
            dc->cfg->max_body_size);
        response_refuse(resp, RL_REFUSE_BODY_TOO_LARGE, err);
        return;
    }
    if (decide_identify(dc, req, DECIDE_CHECKING, &ki, resp) == -1)
        return;
    if (request_parse_check(req->body, req->body_len, &creq, err,
        sizeof(err)) == -1) {
        response_refuse(resp, RL_REFUSE_INVALID_REQUEST, err);
        return;
    }
    /* "key:<id>" (no printf on every check) */
    memcpy(creq.identity, "key:", 4);
    util_lltoa(ki.key_id, creq.identity + 4);
    rc = decide_limits(dc, ki.tenant_id, &creq, &plan, &d);
    if (rc == DECIDE_COST_EXCEEDS) {
        response_cost_exceeds(resp, plan.name[plan.over],
            algo_quota(plan.limit[plan.over]), creq.cost);
        return;
    }
    if (decide_answer_failure(dc, rc, resp))
        return;
    switch (rc) {
    case DECIDE_NO_RULE:
        /* Limiting is opt-in: no rule, no Redis call. */
        buf_puts(&resp->body, "{\"allowed\":true}\n");
        return;
    case DECIDE_FAIL_OPEN:
        buf_puts(&resp->body, "{\"allowed\":true,\"fail_open\":true}\n");
        response_header(resp, "X-RateLimit-Status", "fail-open");
        return;
    }
    response_decision(resp, &plan, &d);
}
