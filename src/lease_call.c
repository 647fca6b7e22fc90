/*
 * lease_call.c -- releases and extends leases through the Redis client.
 *
 * One EVALSHA of the check script per call (lua/lease.lua runs it), sent
 * by redis_store_script() to where the lease's tenant lives: the server,
 * the master the sentinels name, or the cluster primary of the tenant's
 * slot.  A NOSCRIPT reply (Redis restarted, failed over or flushed its
 * scripts) is answered by one EVAL of the script's text, as for a check.
 * The caller needs only a Redis client made from the service's
 * configuration (lease.h says how); the API (lease_api.c) and a reader of
 * the web servers' logs both come through here.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "lease.h"
#include "redis.h"

/* A release (op 'r') or an extension (op 'e') of lease id. */
static enum lease_result
lease_run(struct redis_store *rs, const char *id, size_t len, int op,
    long long value, const char *tenant_id, struct lease_outcome *out)
{
    char tenant[RL_UUID_LEN + 1], random[LEASE_RANDOM_HEX + 1];
    char key[LEASE_KEY_MAX + 1], store[128];
    const char *argv[5];
    size_t argvlen[5], i;
    long long v[4];
    redisReply *r;
    int argc;

    memset(out, 0, sizeof(*out));
    if (lease_id_parse(id, len, tenant, random) == -1)
        return out->result = LEASE_BAD_ID;
    /* Another tenant's lease is not there for this one. */
    if (tenant_id != NULL && strcmp(tenant_id, tenant) != 0)
        return out->result = LEASE_UNKNOWN;
    lease_key(tenant, random, key);
    argc = lease_call_args(key, random, op, value, store, argv, argvlen);
    if ((r = redis_store_script(rs, &rs->check, argc, argv, argvlen)) ==
        NULL)
        return out->result = LEASE_UNAVAILABLE;
    if (r->type == REDIS_REPLY_ERROR) {
        log_error("redis lease script: %s", r->str);
        snprintf(rs->error, sizeof(rs->error), "redis error reply");
        freeReplyObject(r);
        return out->result = LEASE_SCRIPT_ERROR;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->elements > 4)
        goto bad;
    for (i = 0; i < r->elements; i++) {
        if (r->element[i]->type != REDIS_REPLY_INTEGER)
            goto bad;
        v[i] = r->element[i]->integer;
    }
    if (lease_decode(v, r->elements, op, out) == -1)
        goto bad;
    freeReplyObject(r);
    return out->result;
bad:
    log_error("redis lease script: reply of unexpected shape");
    snprintf(rs->error, sizeof(rs->error), "redis bad reply");
    freeReplyObject(r);
    memset(out, 0, sizeof(*out));
    return out->result = LEASE_SCRIPT_ERROR;
}

long long
lease_held(struct redis_store *rs, const char *tenant_id)
{
    char key[RL_UUID_LEN + 16], from[24];
    const char *argv[4] = { "ZCOUNT", key, from, "+inf" };
    size_t argvlen[4];
    struct timespec ts;
    redisReply *r;
    long long n = -1;
    int i;

    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(key, sizeof(key), "rl:{%s}:leases", tenant_id);
    snprintf(from, sizeof(from), "(%lld", (long long)ts.tv_sec * 1000 +
        ts.tv_nsec / 1000000);
    for (i = 0; i < 4; i++)
        argvlen[i] = strlen(argv[i]);
    if ((r = redis_store_command(rs, key, 4, argv, argvlen)) == NULL)
        return -1;
    if (r->type == REDIS_REPLY_INTEGER)
        n = r->integer;
    freeReplyObject(r);
    return n;
}

enum lease_result
lease_release(struct redis_store *rs, const char *id, size_t len,
    long long cost, const char *tenant_id, struct lease_outcome *out)
{
    return lease_run(rs, id, len, 'r', cost < 0 ? -1 : cost, tenant_id,
        out);
}

enum lease_result
lease_extend(struct redis_store *rs, const char *id, size_t len,
    long long ttl_ms, const char *tenant_id, struct lease_outcome *out)
{
    return lease_run(rs, id, len, 'e', ttl_ms < 0 ? -1 : ttl_ms, tenant_id,
        out);
}
