/*
 * stats.c -- what the pool has done, counted in the shared segment.
 *
 * Every worker adds to the same struct rl_stats (scoreboard.c puts it in
 * the MAP_SHARED segment), and /metrics, /status and the dashboard read
 * it.  Nothing here takes a lock: counters are atomic adds, and the two
 * rings (per second for STATS_HISTORY seconds; per pair for the last
 * STATS_WINDOW seconds) are claimed by compare-and-swap of the second a
 * row is for.  The one who moves a row to a new second zeroes it; an add
 * racing with that zeroing can be lost, which costs a count, never a
 * crash or a wrong row.  To keep that rare, whoever writes second s also
 * readies the row of s + 1.
 *
 * (tenant, rule) pairs live in an open-addressed table of STATS_PAIRS
 * slots: a pair claims a free slot by compare-and-swap of its hash, then
 * writes its names and sets ready.  Readers skip slots not ready.  A pair
 * that finds no slot in STATS_PROBE places is counted in pairs_full only.
 */
#include <string.h>

#include "ratelimit.h"

const uint32_t stats_bucket_us[STATS_BUCKETS - 1] = {
    50, 100, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000, 7500,
    10000, 25000, 50000, 100000, 250000, 500000, 1000000
};

const char *const stats_outcome_name[OUT_N] = {
    "allowed", "denied", "no_rule", "fail_open", "unavailable", "other_4xx"
};

const int stats_status_code[STATS_STATUSES - 1] = {
    200, 204, 400, 401, 403, 404, 405, 413, 429, 500, 502, 503, 504
};

const char *const stats_exit_name[EXIT_N] = {
    "stopped", "max_requests", "memory", "timeout", "crash"
};

#define ADD(p, n) __atomic_add_fetch((p), (n), __ATOMIC_RELAXED)

int
stats_status_index(int status)
{
    int i;

    for (i = 0; i < STATS_STATUSES - 1; i++)
        if (stats_status_code[i] == status)
            return i;
    return STATS_STATUSES - 1;
}

static int
stats_bucket(uint64_t us)
{
    int lo = 0, hi = STATS_BUCKETS - 1, mid;

    /* The first bucket whose bound is at least us. */
    while (lo < hi) {
        mid = (lo + hi) / 2;
        if (us <= stats_bucket_us[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

void
stats_hist_add(struct stats_hist *h, uint64_t us)
{
    ADD(&h->bucket[stats_bucket(us)], 1);
    ADD(&h->sum_us, us);
    ADD(&h->count, 1);
}

/* Moves the row of second s to s, zeroing it, unless it is there. */
static struct stats_second *
stats_row(struct rl_stats *st, int64_t s)
{
    struct stats_second *row = &st->history[(uint64_t)s % STATS_HISTORY];
    uint64_t was = __atomic_load_n(&row->second, __ATOMIC_ACQUIRE);

    if (was != (uint64_t)s && was < (uint64_t)s &&
        __atomic_compare_exchange_n(&row->second, &was, (uint64_t)s, 0,
        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        memset(row->outcome, 0, sizeof(row->outcome));
        memset(row->bucket, 0, sizeof(row->bucket));
    }
    return row;
}

void
stats_record(struct rl_stats *st, int64_t now_s, int outcome, uint64_t us)
{
    struct stats_second *row;

    if (outcome < 0 || outcome >= OUT_N || now_s <= 0)
        return;
    row = stats_row(st, now_s);
    if (__atomic_load_n(&row->second, __ATOMIC_ACQUIRE) != (uint64_t)now_s)
        return;                 /* the clock went back: not counted */
    ADD(&row->outcome[outcome], 1);
    ADD(&row->bucket[stats_bucket(us)], 1);
    stats_row(st, now_s + 1);
}

const struct stats_second *
stats_second_at(const struct rl_stats *st, int64_t s)
{
    const struct stats_second *row;

    if (s <= 0)
        return NULL;
    row = &st->history[(uint64_t)s % STATS_HISTORY];
    return __atomic_load_n(&row->second, __ATOMIC_ACQUIRE) == (uint64_t)s ?
        row : NULL;
}

double
stats_quantile(const uint32_t bucket[STATS_BUCKETS], double q)
{
    uint64_t total = 0, seen = 0, want;
    double lo, hi;
    int i;

    for (i = 0; i < STATS_BUCKETS; i++)
        total += bucket[i];
    if (total == 0)
        return -1;
    want = (uint64_t)(q * (double)total + 0.999999);
    if (want < 1)
        want = 1;
    for (i = 0; i < STATS_BUCKETS; i++) {
        if (seen + bucket[i] >= want)
            break;
        seen += bucket[i];
    }
    /* The +Inf bucket has no bound: its lower one is the best we know
     * (also should rounding leave want past the total). */
    if (i >= STATS_BUCKETS - 1)
        return stats_bucket_us[STATS_BUCKETS - 2];
    lo = i == 0 ? 0 : stats_bucket_us[i - 1];
    hi = stats_bucket_us[i];
    return lo + (hi - lo) * (double)(want - seen) / (double)bucket[i];
}

static uint64_t
stats_pair_hash(const char *tenant_id, long long rule)
{
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p;
    unsigned long long r = (unsigned long long)rule;
    int i;

    for (p = (const unsigned char *)tenant_id; *p != '\0'; p++)
        h = (h ^ *p) * 1099511628211ull;
    for (i = 0; i < 8; i++, r >>= 8)
        h = (h ^ (r & 0xff)) * 1099511628211ull;
    return h | 1;               /* never 0, the free mark */
}

static struct stats_pair *
stats_pair_find(struct rl_stats *st, const char *tenant_id,
    const char *tenant, long long rule)
{
    struct stats_pair *p;
    uint64_t h = stats_pair_hash(tenant_id, rule), was;
    int i;

    for (i = 0; i < STATS_PROBE; i++) {
        p = &st->pairs[(h + (uint64_t)i) % STATS_PAIRS];
        was = __atomic_load_n(&p->hash, __ATOMIC_ACQUIRE);
        if (was == 0) {
            if (!__atomic_compare_exchange_n(&p->hash, &was, h, 0,
                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                if (was != h)
                    continue;
                return p;       /* someone else claimed it for us */
            }
            p->rule = rule;
            snprintf(p->tenant_id, sizeof(p->tenant_id), "%s", tenant_id);
            snprintf(p->tenant, sizeof(p->tenant), "%s", tenant);
            __atomic_store_n(&p->ready, 1, __ATOMIC_RELEASE);
            return p;
        }
        if (was == h)
            return p;
    }
    return NULL;
}

int
stats_pair_count(struct rl_stats *st, const char *tenant_id,
    const char *tenant, long long rule, int denied, long long remaining,
    int64_t now_s)
{
    struct stats_pair *p;
    uint32_t i = (uint32_t)((uint64_t)now_s % STATS_WINDOW), was;

    if ((p = stats_pair_find(st, tenant_id, tenant, rule)) == NULL) {
        ADD(&st->pairs_full, 1);
        return -1;
    }
    if (!denied) {
        ADD(&p->allowed, 1);
        return 0;
    }
    ADD(&p->denied, 1);
    __atomic_store_n(&p->remaining, (int64_t)remaining, __ATOMIC_RELAXED);
    was = __atomic_load_n(&p->win_second[i], __ATOMIC_ACQUIRE);
    if (was != (uint32_t)now_s && __atomic_compare_exchange_n(
        &p->win_second[i], &was, (uint32_t)now_s, 0, __ATOMIC_ACQ_REL,
        __ATOMIC_ACQUIRE))
        __atomic_store_n(&p->win_denied[i], 0, __ATOMIC_RELAXED);
    ADD(&p->win_denied[i], 1);
    return 0;
}

uint64_t
stats_pair_recent(const struct stats_pair *p, int64_t now_s)
{
    uint64_t n = 0;
    uint32_t s;
    int i;

    for (i = 0; i < STATS_WINDOW; i++) {
        s = __atomic_load_n(&p->win_second[i], __ATOMIC_ACQUIRE);
        if (s != 0 && (int64_t)s > now_s - STATS_WINDOW && (int64_t)s <= now_s)
            n += __atomic_load_n(&p->win_denied[i], __ATOMIC_RELAXED);
    }
    return n;
}

int
stats_deny_log(struct rl_stats *st, int64_t now_s, long per_second,
    unsigned long *suppressed)
{
    uint64_t was = __atomic_load_n(&st->deny_second, __ATOMIC_ACQUIRE);

    *suppressed = 0;
    if (per_second <= 0)
        return 0;
    if (was != (uint64_t)now_s && __atomic_compare_exchange_n(
        &st->deny_second, &was, (uint64_t)now_s, 0, __ATOMIC_ACQ_REL,
        __ATOMIC_ACQUIRE)) {
        *suppressed = __atomic_exchange_n(&st->deny_suppressed, 0,
            __ATOMIC_ACQ_REL);
        __atomic_store_n(&st->deny_lines, 0, __ATOMIC_RELEASE);
    }
    if (ADD(&st->deny_lines, 1) <= (uint32_t)per_second)
        return 1;
    ADD(&st->deny_suppressed, 1);
    return 0;
}
