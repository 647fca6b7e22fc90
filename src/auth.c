/*
 * auth.c -- from a raw API key to a tenant and its rules, through the
 * worker's caches.
 *
 * A key is hashed once (SHA-256, as stored in api_keys.key_hash) and looked
 * up in a bounded cache; PostgreSQL is asked only on a miss or when the
 * entry has expired.  Unknown keys are cached too, for a shorter time, so
 * a client spraying random keys costs PostgreSQL one query per key per
 * negative TTL at most, and the cache's size bound keeps memory flat.
 * When PostgreSQL cannot be reached, entries that have expired are still
 * used for keys that were known, so traffic from known keys survives an
 * outage; anything not known answers "unavailable".
 */
#include <stdlib.h>
#include <string.h>

#include "service.h"

int
service_init(struct service *svc, const struct rl_config *cfg)
{
    memset(svc, 0, sizeof(*svc));
    svc->cfg = cfg;
    redis_store_init(&svc->redis, cfg);
    pg_store_init(&svc->pg, cfg);
    svc->keys = cache_create((size_t)cfg->key_cache_size, free);
    svc->rules = cache_create(4096, pg_store_rules_free);
    if (svc->keys == NULL || svc->rules == NULL) {
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
    cache_free(svc->keys);
    cache_free(svc->rules);
    svc->keys = NULL;
    svc->rules = NULL;
}

/* Drops both caches when PostgreSQL told us something changed. */
static void
auth_sync(struct service *svc)
{
    if (pg_store_poll(&svc->pg)) {
        cache_clear(svc->keys);
        cache_clear(svc->rules);
    }
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

/*
 * Looks up cache_key in the key cache, asking PostgreSQL through lookup on
 * a miss or expiry.  Known entries that have expired are still used while
 * PostgreSQL is unavailable.
 */
static int
auth_lookup(struct service *svc, const char *cache_key, const char *arg,
    int (*lookup)(struct pg_store *, const char *, struct key_info *),
    struct key_info *info)
{
    struct key_info *ki, fresh;
    int64_t now = util_now_ms();
    int stale = 0;

    auth_sync(svc);
    ki = cache_get(svc->keys, cache_key, now, &stale);
    if (ki != NULL && !stale) {
        *info = *ki;
        return auth_result(ki);
    }
    if (lookup(&svc->pg, arg, &fresh) != STORE_OK) {
        if (ki != NULL && ki->found) {
            log_debug("%.10s...: using the cached entry while PostgreSQL "
                "is unavailable", cache_key);
            *info = *ki;
            return auth_result(ki);
        }
        return AUTH_UNAVAILABLE;
    }
    /* A reconnect may have cleared the cache; what we hold is fresh. */
    auth_sync(svc);
    *info = fresh;
    if ((ki = malloc(sizeof(*ki))) != NULL) {
        *ki = fresh;
        cache_put(svc->keys, cache_key, ki, now, 1000 * (fresh.found ?
            svc->cfg->key_cache_ttl : svc->cfg->key_cache_negative_ttl));
    }
    return auth_result(&fresh);
}

int
auth_check_key(struct service *svc, const char *key, size_t len,
    struct key_info *info)
{
    char hash[65];

    if (len == 0)
        return AUTH_NO_KEY;
    util_sha256_hex(key, len, hash);
    return auth_lookup(svc, hash, hash, pg_store_key, info);
}

int
auth_tenant_by_name(struct service *svc, const char *name,
    struct key_info *info)
{
    char cache_key[RL_NAME_MAX * 2 + 8];

    /* Key hashes are 64 hex digits, so "tenant:" cannot collide. */
    snprintf(cache_key, sizeof(cache_key), "tenant:%s", name);
    return auth_lookup(svc, cache_key, name, pg_store_tenant, info);
}

const struct tenant_rules *
auth_tenant_rules(struct service *svc, const char *tenant_id)
{
    struct tenant_rules *tr, *fresh;
    int64_t now = util_now_ms();
    int stale = 0;

    tr = cache_get(svc->rules, tenant_id, now, &stale);
    if (tr != NULL && !stale)
        return tr;
    if (pg_store_rules(&svc->pg, tenant_id, &fresh) != STORE_OK)
        return tr;      /* stale rules beat no rules; NULL if none */
    auth_sync(svc);
    if (cache_put(svc->rules, tenant_id, fresh, now,
        1000 * svc->cfg->rule_cache_ttl) == -1)
        return NULL;
    return fresh;
}
