/*
 * lease.h -- leases: what a check holds after its answer (a slot on each
 * concurrency limit, the cost it reserved), and their release.
 *
 * A check that takes a slot on a concurrency limit, or that asks to
 * reserve its cost ("reserve": true), is answered with a lease id; the
 * lease's record is in Redis (lua/lease.lua).  Releasing it frees its
 * slots and, given the actual cost, settles the difference on the rate
 * limits the check was charged to; extending it moves its expiry.  Both
 * are one EVALSHA of the check script.  lease.c has the pure parts (ids,
 * the call's arguments, the reply), lease_call.c sends the call through
 * the Redis client, lease_api.c answers POST /v1/release and /v1/extend.
 */
#ifndef LEASE_H
#define LEASE_H

#include "ratelimit.h"

/* The random part of a lease id: 128 bits in hex.  A lease id is
 * "<tenant id>.<random part>": the tenant's id (a UUID) says in which
 * Redis hash-tag slot its record is, so that whoever holds an id can
 * release it without knowing whose it is (lease_release() below). */
#define LEASE_RANDOM_HEX 32
#define LEASE_ID_LEN (RL_UUID_LEN + 1 + LEASE_RANDOM_HEX)

/* The time to live of a lease that holds no slot (a check that reserved
 * its cost on a rule without a concurrency limit): 5 minutes.  A lease
 * with slots lives as long as the longest lease ttl of its limits. */
#define LEASE_RESERVE_TTL_MS 300000LL

/* The bounds of an extension's time to live, in milliseconds (those of a
 * concurrency limit's lease ttl). */
#define LEASE_TTL_MIN_MS 1000LL
#define LEASE_TTL_MAX_MS 3600000LL

/* The longest record key: rl:{<tenant>}:lease:<random part>. */
#define LEASE_KEY_MAX (4 + RL_UUID_LEN + 8 + LEASE_RANDOM_HEX + 1)

/* What a release or an extension came to. */
enum lease_result {
    LEASE_DONE = 0,             /* released, or extended */
    LEASE_UNKNOWN,              /* no such lease (or another tenant's) */
    LEASE_RELEASED,             /* released already */
    LEASE_EXPIRED,              /* its ttl passed before the call */
    LEASE_BAD_ID,               /* not a lease id */
    LEASE_UNAVAILABLE,          /* Redis could not be reached in time */
    LEASE_SCRIPT_ERROR,         /* Redis answered an error, or nonsense */
};

struct lease_outcome {
    enum lease_result result;
    long long now_ms;           /* Redis time (LEASE_DONE .. EXPIRED) */
    long long freed;            /* release: slots freed */
    long long settled;          /* release: cost - charged (0 without one) */
    long long ttl_ms;           /* extension: the new time to live */
};

/* A short name of r for logs and metrics: "released", "unknown",
 * "released_already", "expired", "bad_id", "unavailable",
 * "script_error". */
const char *lease_result_name(enum lease_result r);

/* A new lease id for tenant_id into id[LEASE_ID_LEN + 1].  Returns 0, or
 * -1 when no random bytes could be had. */
int lease_id_make(const char *tenant_id, char *id);

/* Splits lease id (len bytes) into its tenant id and random part, both
 * NUL-terminated (tenant[RL_UUID_LEN + 1], random[LEASE_RANDOM_HEX + 1]).
 * Returns 0, or -1 when it has not the shape lease_id_make() gives. */
int lease_id_parse(const char *id, size_t len, char *tenant, char *random);

/* The record key of a lease, into key[LEASE_KEY_MAX + 1]. */
void lease_key(const char *tenant, const char *random, char *key);

/* The lease's time to live for plan: the longest lease ttl of its
 * concurrency limits, or LEASE_RESERVE_TTL_MS when it has none; 0 when a
 * check of plan takes no lease (no concurrency limit, and reserve not
 * asked). */
long long lease_ttl_for(const struct rl_plan *plan, int reserve);

/* The arguments of the script call that releases (op 'r', value the
 * actual cost, or -1 for none) or extends (op 'e', value the new time to
 * live in ms, or -1 for the lease's own) the lease whose record is key
 * and whose random part is random.  argv[] points into store, which must
 * outlive them.  Returns argc (5: the key count, the key, value, op, id). */
int lease_call_args(const char *key, const char *random, int op,
    long long value, char store[128], const char *argv[5],
    size_t argvlen[5]);

/* Reads the script's reply to such a call (its integers, n of them) into
 * out.  Returns 0, or -1 when it has not the shape of one. */
int lease_decode(const long long *v, size_t n, int op,
    struct lease_outcome *out);

/*
 * lease_call.c: releases (or extends) a lease by its id, with one EVALSHA
 * of the check script on the Redis that holds the lease's tenant.
 *
 * rs is a Redis client of this service (struct redis_store, service.h),
 * made with redis_store_init() after fork from the service's
 * configuration -- nothing else is needed: no API key, no PostgreSQL.  A
 * process that reads the web servers' logs and releases what they name
 * does:
 *
 *     struct rl_config cfg;        (config_load() of ratelimit.conf)
 *     struct rl_counters counters; (may be a private, zeroed one)
 *     struct redis_store rs;
 *     struct lease_outcome out;
 *
 *     redis_store_init(&rs, &cfg, &counters);
 *     lease_release(&rs, id, strlen(id), -1, NULL, &out);
 *     if (out.result != LEASE_DONE)
 *         ... lease_result_name(out.result), and rs.error when
 *             LEASE_UNAVAILABLE or LEASE_SCRIPT_ERROR ...
 *     redis_store_close(&rs);
 *
 * cost is the actual cost to settle (0 .. RL_COST_MAX), or -1 to free the
 * slots and leave what was charged as it is.  tenant_id, when not NULL,
 * is the tenant allowed to release it: a lease of another tenant is
 * LEASE_UNKNOWN without any Redis call (the API passes the caller's
 * tenant; a log reader passes NULL).  Returns out->result.  A call whose
 * connection dies on the way is not sent again: it may have run, and a
 * second release would be told LEASE_RELEASED; the lease then frees its
 * slots at its ttl at the latest.
 */
struct redis_store;
enum lease_result lease_release(struct redis_store *rs, const char *id,
    size_t len, long long cost, const char *tenant_id,
    struct lease_outcome *out);

/* The same for an extension: ttl_ms is the new time to live from now
 * (LEASE_TTL_MIN_MS .. LEASE_TTL_MAX_MS), or -1 for the lease's own. */
enum lease_result lease_extend(struct redis_store *rs, const char *id,
    size_t len, long long ttl_ms, const char *tenant_id,
    struct lease_outcome *out);

/* The leases tenant_id holds now, across every pool: how many of its set
 * of leases (rl:{tenant}:leases, lua/lease.lua) expire after this host's
 * clock, with one ZCOUNT.  -1 when Redis does not answer. */
long long lease_held(struct redis_store *rs, const char *tenant_id);

#endif
