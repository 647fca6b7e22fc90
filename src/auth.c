/*
 * auth.c -- from a raw API key to a tenant and its rules, through what the
 * pool knows.
 *
 * A key is hashed once (SHA-256, as stored in api_keys.key_hash) and looked
 * up in the pool's shared tables (shm.c): known keys in one, keys that
 * PostgreSQL did not know in another, so a flood of random keys can never
 * push out a key that is in use.  PostgreSQL is asked only when neither
 * table has a fresh answer: an entry is fresh for key_cache_ttl (unknown
 * keys: key_cache_negative_ttl) and as long as no change was notified
 * since it was fetched.  What one worker learns, every worker knows,
 * including a worker started during a PostgreSQL outage.
 *
 * Lookups of keys the pool does not know at all are limited per worker to
 * key_lookup_rate a second (a token bucket as deep as one second of it):
 * past that, such a key is answered 401 without a query, so spraying
 * random keys cannot turn into a flood of queries.  Keys the pool knows
 * are always refreshed.
 *
 * When PostgreSQL cannot be reached, known entries that are no longer
 * fresh are still used, so traffic from known keys survives an outage;
 * anything not known answers "unavailable".  Tenants' rules work the same
 * way: a per-worker cache of the unpacked rules in front of the shared
 * tenants table.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/sha.h>

#include "service.h"

_Static_assert(sizeof(struct key_info) <= SHM_KEY_VALUE_MAX,
    "struct key_info must fit in a shared key entry");

int
service_init(struct service *svc, const struct rl_config *cfg,
    struct shm *shm)
{
    memset(svc, 0, sizeof(*svc));
    svc->cfg = cfg;
    svc->shm = shm;
    svc->board = shm->board;
    svc->counters = &svc->board->counters;
    svc->lookup_tokens = (double)cfg->key_lookup_rate;
    svc->lookup_refill_ms = util_now_ms();
    redis_store_init(&svc->redis, cfg);
    pg_store_init(&svc->pg, cfg);
    svc->rules = cache_create(1024, pg_store_rules_free);
    if (svc->rules == NULL) {
        service_free(svc);
        return -1;
    }
    return 0;
}

void
service_free(struct service *svc)
{
    redis_store_close(&svc->redis);
    pg_store_close(&svc->pg);
    cache_free(svc->rules);
    svc->rules = NULL;
}

/* When PostgreSQL told us something changed (or we reconnected and may
 * have missed it), every entry the pool holds becomes stale. */
static void
auth_sync(struct service *svc)
{
    if (pg_store_poll(&svc->pg)) {
        shm_changed(svc->shm);
        cache_clear(svc->rules);
    }
}

void
service_tick(struct service *svc, int idle)
{
    pg_store_tick(&svc->pg, idle);
    auth_sync(svc);
}

static int
auth_result(const struct key_info *ki)
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
auth_lookup_allowed(struct service *svc, int64_t now)
{
    double rate = (double)svc->cfg->key_lookup_rate;

    if (rate <= 0)
        return 1;
    svc->lookup_tokens += rate * (double)(now - svc->lookup_refill_ms) / 1000;
    if (svc->lookup_tokens > rate)
        svc->lookup_tokens = rate;
    svc->lookup_refill_ms = now;
    if (svc->lookup_tokens < 1)
        return 0;
    svc->lookup_tokens -= 1;
    return 1;
}

/*
 * Looks up the entry with this id in the pool's tables, asking PostgreSQL
 * through lookup (with arg) when there is no fresh answer.
 */
static int
auth_lookup(struct service *svc, const unsigned char id[32], const char *arg,
    int (*lookup)(struct pg_store *, const char *, struct key_info *),
    struct key_info *info)
{
    struct key_info known, fresh;
    struct shm_meta meta, nmeta;
    int64_t now = util_now_ms();
    uint64_t gen;
    int have;

    auth_sync(svc);
    gen = shm_generation(svc->shm);
    have = shm_get(svc->shm, SHM_KEYS, id, &known, sizeof(known), &meta) &&
        meta.len == sizeof(known);
    if (have && meta.generation == gen &&
        now - meta.stamp < 1000 * svc->cfg->key_cache_ttl) {
        *info = known;
        return auth_result(&known);
    }
    if (shm_get(svc->shm, SHM_UNKNOWN, id, NULL, 0, &nmeta) &&
        nmeta.generation == gen && now < nmeta.stamp)
        return AUTH_UNKNOWN;
    if (!have && !auth_lookup_allowed(svc, now)) {
        COUNT(svc, key_lookups_limited);
        return AUTH_UNKNOWN;
    }
    COUNT(svc, key_lookups);
    if (lookup(&svc->pg, arg, &fresh) != STORE_OK) {
        if (have) {
            log_debug("%.10s...: using what the pool knew while PostgreSQL "
                "is unavailable", known.key_prefix);
            *info = known;
            return auth_result(&known);
        }
        return AUTH_UNAVAILABLE;
    }
    /* A reconnect may have bumped the generation: what we hold is fresh
     * as of the generation we read before asking. */
    auth_sync(svc);
    *info = fresh;
    if (fresh.found)
        shm_put(svc->shm, SHM_KEYS, id, &fresh, sizeof(fresh), now, gen,
            (int32_t)getpid());
    else
        shm_put(svc->shm, SHM_UNKNOWN, id, NULL, 0,
            now + 1000 * svc->cfg->key_cache_negative_ttl + 1, gen,
            (int32_t)getpid());
    return auth_result(&fresh);
}

int
auth_check_key(struct service *svc, const char *key, size_t len,
    struct key_info *info)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char md[SHA256_DIGEST_LENGTH];
    char hash[65];
    size_t i;

    if (len == 0)
        return AUTH_NO_KEY;
    SHA256((const unsigned char *)key, len, md);
    for (i = 0; i < SHA256_DIGEST_LENGTH; i++) {
        hash[2 * i] = hex[md[i] >> 4];
        hash[2 * i + 1] = hex[md[i] & 15];
    }
    hash[64] = '\0';
    return auth_lookup(svc, md, hash, pg_store_key, info);
}

int
auth_tenant_by_name(struct service *svc, const char *name,
    struct key_info *info)
{
    char tag[RL_NAME_MAX * 2 + 8];
    unsigned char id[SHA256_DIGEST_LENGTH];

    /* Key ids are hashes of keys; this is the hash of another text, so
     * the two cannot meet by accident. */
    snprintf(tag, sizeof(tag), "tenant-by-name:%s", name);
    SHA256((const unsigned char *)tag, strlen(tag), id);
    return auth_lookup(svc, id, name, pg_store_tenant, info);
}

/* The tenants table's id for a tenant's rules. */
static void
auth_rules_id(const char *tenant_id, unsigned char id[32])
{
    char tag[RL_UUID_LEN + 8];

    snprintf(tag, sizeof(tag), "rules:%s", tenant_id);
    SHA256((const unsigned char *)tag, strlen(tag), id);
}

/* Unpacks the shared entry of a tenant's rules into a new allocation. */
static struct tenant_rules *
auth_rules_unpack(const unsigned char *blob, size_t len, uint64_t gen)
{
    struct tenant_rules *tr;
    int n;

    if ((tr = calloc(1, sizeof(*tr))) == NULL ||
        (tr->rules = calloc(RL_MAX_RULES, sizeof(*tr->rules))) == NULL) {
        free(tr);
        return NULL;
    }
    if ((n = shm_rules_unpack(blob, len, tr->rules, RL_MAX_RULES)) < 0) {
        pg_store_rules_free(tr);
        return NULL;
    }
    tr->n = n;
    tr->generation = gen;
    return tr;
}

const struct tenant_rules *
auth_tenant_rules(struct service *svc, const char *tenant_id)
{
    static unsigned char blob[SHM_TENANT_VALUE_MAX];
    struct tenant_rules *tr, *fresh;
    struct shm_meta meta;
    unsigned char id[32];
    int64_t now = util_now_ms(), ttl = 1000 * svc->cfg->rule_cache_ttl;
    uint64_t gen;
    long len;
    int stale = 0, shared;

    auth_sync(svc);
    gen = shm_generation(svc->shm);
    tr = cache_get(svc->rules, tenant_id, now, &stale);
    if (tr != NULL && !stale && tr->generation == gen)
        return tr;
    auth_rules_id(tenant_id, id);
    shared = shm_get(svc->shm, SHM_TENANTS, id, blob, sizeof(blob), &meta);
    if (shared && meta.generation == gen && now - meta.stamp < ttl &&
        (fresh = auth_rules_unpack(blob, meta.len, gen)) != NULL) {
        /* Another worker fetched them: ours until theirs expire. */
        if (cache_put(svc->rules, tenant_id, fresh, now,
            ttl - (now - meta.stamp)) == -1)
            return NULL;
        return fresh;
    }
    if (pg_store_rules(&svc->pg, tenant_id, &fresh) != STORE_OK) {
        /* PostgreSQL is down: stale rules beat no rules. */
        if (tr != NULL)
            return tr;
        if (shared && (fresh = auth_rules_unpack(blob, meta.len,
            meta.generation)) != NULL) {
            if (cache_put(svc->rules, tenant_id, fresh, now, 0) == -1)
                return NULL;
            return fresh;
        }
        return NULL;
    }
    fresh->generation = gen;
    auth_sync(svc);
    if ((len = shm_rules_pack(fresh->rules, fresh->n, blob,
        sizeof(blob))) >= 0)
        shm_put(svc->shm, SHM_TENANTS, id, blob, (size_t)len, now, gen,
            (int32_t)getpid());
    else
        log_debug("tenant %s: rules too large to share with the pool",
            tenant_id);
    if (cache_put(svc->rules, tenant_id, fresh, now, ttl) == -1)
        return NULL;
    return fresh;
}
