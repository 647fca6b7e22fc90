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
 * slots, keyed by the tenant's id, its name and the rule: a tenant renamed
 * starts pairs of its new name.  A pair claims a free slot by
 * compare-and-swap of its hash, then writes its names and sets ready.
 * Readers skip slots not ready.  A pair that finds no slot in STATS_PROBE
 * places is counted in pairs_full only.  Each pair keeps what was left
 * after its last decision, and its decisions and denials of each of the
 * last STATS_WINDOW seconds (what the dashboard's tenant view draws).
 *
 * /metrics names a pair by its tenant's name and rule, so two pairs that
 * share them (a tenant removed and created again under its name) must not
 * be two series.  stats_tenants() asks who has each name now, drops the
 * pairs of any other tenant and retires their slots, and merges what is
 * left by name and rule.  A retired slot keeps a mark (STATS_PAIR_GONE) so
 * that the probes of the pairs after it still reach them, and is taken
 * again by the next pair that needs a slot there.
 */
#include <stdlib.h>
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
        memset(row->redis, 0, sizeof(row->redis));
        memset(row->pg, 0, sizeof(row->pg));
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

void
stats_record_stores(struct rl_stats *st, int64_t now_s, uint64_t redis_us,
    uint64_t pg_us)
{
    struct stats_second *row;

    if (now_s <= 0 || (redis_us == 0 && pg_us == 0))
        return;
    row = stats_row(st, now_s);
    if (__atomic_load_n(&row->second, __ATOMIC_ACQUIRE) != (uint64_t)now_s)
        return;
    if (redis_us > 0)
        ADD(&row->redis[stats_bucket(redis_us)], 1);
    if (pg_us > 0)
        ADD(&row->pg[stats_bucket(pg_us)], 1);
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

/* A retired slot's hash: even, so never a pair's (stats_pair_hash). */
#define STATS_PAIR_GONE 2

static uint64_t
stats_pair_hash(const char *tenant_id, const char *tenant, long long rule)
{
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p;
    unsigned long long r = (unsigned long long)rule;
    int i;

    for (p = (const unsigned char *)tenant_id; *p != '\0'; p++)
        h = (h ^ *p) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;      /* no byte of a UTF-8 text */
    for (p = (const unsigned char *)tenant; *p != '\0'; p++)
        h = (h ^ *p) * 1099511628211ull;
    for (i = 0; i < 8; i++, r >>= 8)
        h = (h ^ (r & 0xff)) * 1099511628211ull;
    return h | 1;               /* never 0, the free mark, nor GONE */
}

/* Takes slot p, free or retired (was), for the pair of hash h; returns 0
 * when another took it first (*was is then what it holds). */
static int
stats_pair_claim(struct stats_pair *p, uint64_t *was, uint64_t h,
    const char *tenant_id, const char *tenant, long long rule)
{
    int retired = *was == STATS_PAIR_GONE;

    if (!__atomic_compare_exchange_n(&p->hash, was, h, 0, __ATOMIC_ACQ_REL,
        __ATOMIC_ACQUIRE))
        return 0;
    if (retired) {
        /* Its counts were another pair's.  An add racing with this, by a
         * worker that found the retired pair a moment ago, costs a count. */
        __atomic_store_n(&p->allowed, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&p->denied, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&p->remaining, 0, __ATOMIC_RELAXED);
        memset(p->win_second, 0, sizeof(p->win_second));
        memset(p->win_denied, 0, sizeof(p->win_denied));
        memset(p->win_checks, 0, sizeof(p->win_checks));
    }
    p->rule = rule;
    snprintf(p->tenant_id, sizeof(p->tenant_id), "%s", tenant_id);
    snprintf(p->tenant, sizeof(p->tenant), "%s", tenant);
    __atomic_store_n(&p->ready, 1, __ATOMIC_RELEASE);
    return 1;
}

/* The slot of the pair, claimed if it has none: the first free or retired
 * one of its probes, once no probe holds it.  Two workers placing the same
 * new pair at once may each take a slot; stats_tenants() merges them. */
static struct stats_pair *
stats_pair_find(struct rl_stats *st, const char *tenant_id,
    const char *tenant, long long rule)
{
    struct stats_pair *p, *reuse;
    uint64_t h = stats_pair_hash(tenant_id, tenant, rule), was;
    int i, again;

    for (again = 0; again < 2; again++) {
        reuse = NULL;
        for (i = 0; i < STATS_PROBE; i++) {
            p = &st->pairs[(h + (uint64_t)i) % STATS_PAIRS];
            was = __atomic_load_n(&p->hash, __ATOMIC_ACQUIRE);
            if (was == h)
                return p;
            if (was == STATS_PAIR_GONE && reuse == NULL)
                reuse = p;
            if (was == 0)
                break;          /* the pair is not further on */
        }
        if (reuse != NULL) {
            was = STATS_PAIR_GONE;
            if (stats_pair_claim(reuse, &was, h, tenant_id, tenant, rule) ||
                was == h)
                return reuse;
        } else if (i < STATS_PROBE) {
            was = 0;
            if (stats_pair_claim(p, &was, h, tenant_id, tenant, rule) ||
                was == h)
                return p;       /* ours, or someone else claimed it for us */
        } else
            return NULL;
        /* Another pair took the slot first: look once more. */
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
    /* What is left after every decision, not only a denial's (which is
     * what the denying limit has left: mostly 0). */
    __atomic_store_n(&p->remaining, (int64_t)remaining, __ATOMIC_RELAXED);
    ADD(denied ? &p->denied : &p->allowed, 1);
    was = __atomic_load_n(&p->win_second[i], __ATOMIC_ACQUIRE);
    if (was != (uint32_t)now_s && __atomic_compare_exchange_n(
        &p->win_second[i], &was, (uint32_t)now_s, 0, __ATOMIC_ACQ_REL,
        __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&p->win_denied[i], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&p->win_checks[i], 0, __ATOMIC_RELAXED);
    }
    ADD(&p->win_checks[i], 1);
    if (denied)
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

void
stats_pair_window(const struct stats_pair *p, int64_t now_s,
    uint64_t checks[STATS_WINDOW], uint64_t denied[STATS_WINDOW])
{
    int64_t first = now_s - STATS_WINDOW + 1, s;
    int i;

    for (i = 0; i < STATS_WINDOW; i++) {
        s = __atomic_load_n(&p->win_second[i], __ATOMIC_ACQUIRE);
        if (s == 0 || s < first || s > now_s)
            continue;
        checks[s - first] += __atomic_load_n(&p->win_checks[i],
            __ATOMIC_RELAXED);
        denied[s - first] += __atomic_load_n(&p->win_denied[i],
            __ATOMIC_RELAXED);
    }
}

void
stats_pair_retire(struct rl_stats *st, int slot, uint64_t hash)
{
    struct stats_pair *p;
    uint32_t one = 1;
    uint64_t h = hash;

    if (slot < 0 || slot >= STATS_PAIRS || hash == 0 ||
        hash == STATS_PAIR_GONE)
        return;
    p = &st->pairs[slot];
    if (__atomic_load_n(&p->hash, __ATOMIC_ACQUIRE) != hash)
        return;
    /* ready 1 -> 0 first: one retirer at a time, and a slot marked GONE is
     * never ready.  Should the slot have been retired and taken by another
     * pair since it was read (its ready would then be that pair's), the
     * hash no longer matches and ready is given back. */
    if (!__atomic_compare_exchange_n(&p->ready, &one, 0, 0, __ATOMIC_ACQ_REL,
        __ATOMIC_ACQUIRE))
        return;
    if (!__atomic_compare_exchange_n(&p->hash, &h, STATS_PAIR_GONE, 0,
        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        __atomic_store_n(&p->ready, 1, __ATOMIC_RELEASE);
}

/* Rows by tenant name, then tenant id, then rule. */
static int
stats_row_cmp(const void *a, const void *b)
{
    const struct stats_pair_row *x = a, *y = b;
    int c = strcmp(x->tenant, y->tenant);

    if (c == 0)
        c = strcmp(x->tenant_id, y->tenant_id);
    return c != 0 ? c : (x->rule > y->rule) - (x->rule < y->rule);
}

int
stats_pairs_copy(const struct rl_stats *st, const char *tenant_id,
    struct stats_pair_row *out)
{
    const struct stats_pair *p;
    struct stats_pair_row *r;
    int i, n = 0;

    for (i = 0; i < STATS_PAIRS; i++) {
        p = &st->pairs[i];
        if (!__atomic_load_n(&p->ready, __ATOMIC_ACQUIRE))
            continue;
        r = &out[n];
        r->slot = i;
        r->hash = __atomic_load_n(&p->hash, __ATOMIC_ACQUIRE);
        r->rule = p->rule;
        memcpy(r->tenant_id, p->tenant_id, sizeof(r->tenant_id));
        r->tenant_id[sizeof(r->tenant_id) - 1] = '\0';
        memcpy(r->tenant, p->tenant, sizeof(r->tenant));
        r->tenant[sizeof(r->tenant) - 1] = '\0';
        r->allowed = __atomic_load_n(&p->allowed, __ATOMIC_RELAXED);
        r->denied = __atomic_load_n(&p->denied, __ATOMIC_RELAXED);
        /* Read again: a slot retired and taken by another pair meanwhile
         * may have given a mix of the two. */
        if (!__atomic_load_n(&p->ready, __ATOMIC_ACQUIRE) ||
            __atomic_load_n(&p->hash, __ATOMIC_ACQUIRE) != r->hash)
            continue;
        if (tenant_id == NULL || strcmp(r->tenant_id, tenant_id) == 0)
            n++;
    }
    qsort(out, (size_t)n, sizeof(*out), stats_row_cmp);
    return n;
}

/* A group of rows of one name while stats_tenants() ranks them. */
struct stats_rank {
    int first, n;
    uint64_t total;
    int asked, done;
};

/* Whether group a goes before group b: more checks, then by name. */
static int
stats_rank_before(const struct stats_pair_row *rows,
    const struct stats_rank *a, const struct stats_rank *b)
{
    if (a->total != b->total)
        return a->total > b->total;
    return strcmp(rows[a->first].tenant, rows[b->first].tenant) < 0;
}

/* Rows of a group by rule, for merging. */
static int
stats_rule_cmp(const void *a, const void *b)
{
    const struct stats_pair_row *x = a, *y = b;

    return (x->rule > y->rule) - (x->rule < y->rule);
}

int
stats_tenants(struct rl_stats *st, struct stats_pair_row *rows, int n,
    long top, stats_owner_fn owner, void *arg,
    struct stats_tenant *out)
{
    static struct stats_rank rank[STATS_PAIRS];
    char id[RL_UUID_LEN + 1];
    struct stats_rank *g, *best;
    int ng = 0, nout = 0, i, j, k, live;

    if (top == 0)
        return 0;
    for (i = 0; i < n; i++) {
        if (ng == 0 || strcmp(rows[i].tenant, rows[rank[ng - 1].first].tenant)
            != 0) {
            memset(&rank[ng], 0, sizeof(rank[ng]));
            rank[ng++].first = i;
        }
        rank[ng - 1].n++;
        rank[ng - 1].total += rows[i].allowed + rows[i].denied;
    }
    /* The group with the most checks next, each asked about once before it
     * is taken; asking only ever lowers a total, so the order is exact. */
    for (;;) {
        best = NULL;
        for (i = 0; i < ng; i++)
            if (!rank[i].done && (best == NULL ||
                stats_rank_before(rows, &rank[i], best)))
                best = &rank[i];
        if (best == NULL)
            break;
        g = best;
        if (!g->asked && owner != NULL) {
            g->asked = 1;
            k = owner(arg, rows[g->first].tenant, id);
            if (k < 0)
                owner = NULL;   /* not known now: everything is shown */
            if (k != 0 && k != 1)
                continue;
            g->total = 0;
            for (i = g->first, live = 0; i < g->first + g->n; i++) {
                if (k == 1 && strcmp(rows[i].tenant_id, id) == 0) {
                    rows[g->first + live++] = rows[i];
                    g->total += rows[i].allowed + rows[i].denied;
                } else
                    stats_pair_retire(st, rows[i].slot, rows[i].hash);
            }
            g->n = live;
            if (live == 0)
                g->done = 1;
            continue;
        }
        g->done = 1;
        /* One row a rule: pairs of one name and rule in several slots (a
         * tenant's id unknown, two workers placing a pair at once) are
         * added up. */
        qsort(&rows[g->first], (size_t)g->n, sizeof(*rows), stats_rule_cmp);
        for (i = g->first, j = g->first; i < g->first + g->n; i++) {
            if (j > g->first && rows[j - 1].rule == rows[i].rule) {
                rows[j - 1].allowed += rows[i].allowed;
                rows[j - 1].denied += rows[i].denied;
            } else
                rows[j++] = rows[i];
        }
        out[nout].rows = &rows[g->first];
        out[nout].n = j - g->first;
        out[nout].allowed = out[nout].denied = 0;
        for (i = g->first; i < j; i++) {
            out[nout].allowed += rows[i].allowed;
            out[nout].denied += rows[i].denied;
        }
        if (++nout == top)
            break;
    }
    return nout;
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
