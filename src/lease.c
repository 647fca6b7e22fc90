/*
 * lease.c -- the pure parts of leases: their ids, the arguments of the
 * script call that releases or extends one, and the reading of its reply.
 *
 * A lease id is "<tenant id>.<32 hex digits>": the tenant's id names the
 * Redis hash-tag slot of the lease's record, rl:{<tenant>}:lease:<hex>,
 * and the random part (128 bits) is the record's name and the member the
 * lease holds in each concurrency limit's set (lua/lease.lua).  Nothing
 * here does I/O; lease_call.c sends the call, lease_api.c answers the
 * endpoints.  See lease.h.
 */
#include <stdio.h>
#include <string.h>

#include "lease.h"

const char *
lease_result_name(enum lease_result r)
{
    switch (r) {
    case LEASE_DONE:
        return "released";
    case LEASE_UNKNOWN:
        return "unknown";
    case LEASE_RELEASED:
        return "released_already";
    case LEASE_EXPIRED:
        return "expired";
    case LEASE_BAD_ID:
        return "bad_id";
    case LEASE_UNAVAILABLE:
        return "unavailable";
    default:
        return "script_error";
    }
}

int
lease_id_make(const char *tenant_id, char *id)
{
    unsigned char r[LEASE_RANDOM_HEX / 2];
    size_t t = strlen(tenant_id);

    if (t != RL_UUID_LEN || util_random(r, sizeof(r)) == -1)
        return -1;
    memcpy(id, tenant_id, t);
    id[t] = '.';
    util_hex(r, sizeof(r), id + t + 1);
    return 0;
}

/* Whether s[0..n) is all lowercase hex digits, or (uuid) a UUID's hex
 * digits and dashes where a UUID has them. */
static int
lease_hex_ok(const char *s, size_t n, int uuid)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (uuid && (i == 8 || i == 13 || i == 18 || i == 23)) {
            if (s[i] != '-')
                return 0;
        } else if (!((s[i] >= '0' && s[i] <= '9') ||
            (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    }
    return 1;
}

int
lease_id_parse(const char *id, size_t len, char *tenant, char *random)
{
    if (len != LEASE_ID_LEN || id[RL_UUID_LEN] != '.' ||
        !lease_hex_ok(id, RL_UUID_LEN, 1) ||
        !lease_hex_ok(id + RL_UUID_LEN + 1, LEASE_RANDOM_HEX, 0))
        return -1;
    memcpy(tenant, id, RL_UUID_LEN);
    tenant[RL_UUID_LEN] = '\0';
    memcpy(random, id + RL_UUID_LEN + 1, LEASE_RANDOM_HEX);
    random[LEASE_RANDOM_HEX] = '\0';
    return 0;
}

void
lease_key(const char *tenant, const char *random, char *key)
{
    snprintf(key, LEASE_KEY_MAX + 1, "rl:{%s}:lease:%s", tenant, random);
}

long long
lease_ttl_for(const struct rl_plan *plan, int reserve)
{
    long long ttl_us = 0;
    int i, any = 0;

    for (i = 0; i < plan->n; i++)
        if (algo_is_concurrency(plan->limit[i])) {
            any = 1;
            if (plan->limit[i]->period_us > ttl_us)
                ttl_us = plan->limit[i]->period_us;
        }
    if (!any)
        return reserve ? LEASE_RESERVE_TTL_MS : 0;
    return (ttl_us + 999) / 1000;
}

int
lease_call_args(const char *key, const char *random, int op,
    long long value, char store[128], const char *argv[5], size_t argvlen[5])
{
    size_t n;

    argv[0] = "1";
    argvlen[0] = 1;
    argv[1] = key;
    argvlen[1] = strlen(key);
    if (value < 0) {
        argv[2] = "-";
        argvlen[2] = 1;
    } else {
        n = util_lltoa(value, store);
        argv[2] = store;
        argvlen[2] = n;
    }
    argv[3] = op == 'e' ? "e" : "r";
    argvlen[3] = 1;
    argv[4] = random;
    argvlen[4] = strlen(random);
    return 5;
}

int
lease_decode(const long long *v, size_t n, int op, struct lease_outcome *out)
{
    memset(out, 0, sizeof(*out));
    if (n < 2)
        return -1;
    out->now_ms = v[1];
    switch (v[0]) {
    case 1:
        break;
    case 0:
        out->result = LEASE_UNKNOWN;
        return n == 2 ? 0 : -1;
    case -1:
        out->result = LEASE_RELEASED;
        return n == 2 ? 0 : -1;
    case -2:
        out->result = LEASE_EXPIRED;
        return n == 2 ? 0 : -1;
    default:
        return -1;
    }
    out->result = LEASE_DONE;
    if (op == 'e') {
        if (n != 3 || v[2] < LEASE_TTL_MIN_MS || v[2] > LEASE_TTL_MAX_MS)
            return -1;
        out->ttl_ms = v[2];
        return 0;
    }
    if (n != 4 || v[2] < 0)
        return -1;
    out->freed = v[2];
    out->settled = v[3];
    return 0;
}
