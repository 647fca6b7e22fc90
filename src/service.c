/*
 * service.c -- one worker's service: its stores, plugged into the
 * decision.
 *
 * decide.c decides without doing I/O; here its seam (struct
 * decide_store) is filled with the real stores: API keys, tenants and
 * rules from PostgreSQL (pg_store.c), the check script in Redis (the
 * Redis client of redis.h, with the arguments limiter.c builds), and
 * PostgreSQL's change notifications.  service_tick() is the housekeeping
 * a worker does between requests.
 */
#include <string.h>

#include "service.h"

static int
service_key(void *ctx, const char *hash, struct key_info *out)
{
    struct service *svc = ctx;

    return pg_store_key(&svc->pg, hash, out);
}

static int
service_tenant(void *ctx, const char *name, struct key_info *out)
{
    struct service *svc = ctx;

    return pg_store_tenant(&svc->pg, name, out);
}

static int
service_rules(void *ctx, const char *tenant_id, struct tenant_rules **out)
{
    struct service *svc = ctx;

    return pg_store_rules(&svc->pg, tenant_id, out);
}

static int
service_script(void *ctx, struct limiter_call *call, int nlimits,
    struct rl_decision *d)
{
    struct service *svc = ctx;

    return redis_store_check(&svc->redis, call, nlimits, d);
}

static int
service_changed(void *ctx, struct store_change *out, int max)
{
    struct service *svc = ctx;

    return pg_store_poll(&svc->pg, out, max);
}

static void
service_used(void *ctx, long long key_id)
{
    struct service *svc = ctx;

    pg_store_used(&svc->pg, key_id);
}

int
service_init(struct service *svc, const struct rl_config *cfg,
    struct shm *shm)
{
    struct decide_store store;

    memset(svc, 0, sizeof(*svc));
    svc->cfg = cfg;
    svc->shm = shm;
    svc->board = shm->board;
    svc->counters = &svc->board->counters;
    redis_store_init(&svc->redis, cfg, svc->counters);
    pg_store_init(&svc->pg, cfg);
    svc->pg.filter = shm->keyfilter;
    svc->pg.counters = svc->counters;
    store.ctx = svc;
    store.key = service_key;
    store.tenant = service_tenant;
    store.rules = service_rules;
    store.script = service_script;
    store.changed = service_changed;
    store.used = service_used;
    if (decide_init(&svc->decider, cfg, svc->counters, shm, &store) == -1)
        return -1;
    svc->decider.stats = &svc->board->stats;
    return 0;
}

void
service_free(struct service *svc)
{
    redis_store_close(&svc->redis);
    pg_store_close(&svc->pg);
    decide_free(&svc->decider);
}

void
service_tick(struct service *svc, int idle)
{
    pg_store_tick(&svc->pg, idle);
    redis_store_tick(&svc->redis);
    /* After a request the notifications wait for the next one, which
     * reads them before it looks anything up (one system call fewer per
     * request); an idle worker reads them here. */
    if (idle)
        decide_sync(&svc->decider);
}
