/*
 * check_stats.c -- tests of src/stats.c: latency buckets and quantiles,
 * the per-second history ring (with Redis and PostgreSQL times), the
 * (tenant, rule) table, its minute window and what a rule had left, the
 * tenants /metrics shows (one series a name, whoever had it before), and
 * the pool-wide bound on denial log lines.
 */
#include <stdlib.h>
#include <string.h>

#include <check.h>              /* t/check.h: the suites, then Check */

#include "ratelimit.h"

static struct rl_stats *
stats_new(void)
{
    struct rl_stats *st = calloc(1, sizeof(*st));

    ck_assert_ptr_nonnull(st);
    return st;
}

START_TEST(test_status_index)
{
    ck_assert_int_eq(stats_status_code[stats_status_index(200)], 200);
    ck_assert_int_eq(stats_status_code[stats_status_index(429)], 429);
    ck_assert_int_eq(stats_status_code[stats_status_index(503)], 503);
    ck_assert_int_eq(stats_status_index(418), STATS_STATUSES - 1);
}
END_TEST

START_TEST(test_hist_buckets)
{
    struct rl_stats *st = stats_new();

    stats_hist_add(&st->check, 0);          /* first bucket */
    stats_hist_add(&st->check, 50);         /* on the bound: still first */
    stats_hist_add(&st->check, 51);         /* second */
    stats_hist_add(&st->check, 1000000);    /* the last bound */
    stats_hist_add(&st->check, 1000001);    /* +Inf */
    ck_assert_uint_eq(st->check.bucket[0], 2);
    ck_assert_uint_eq(st->check.bucket[1], 1);
    ck_assert_uint_eq(st->check.bucket[STATS_BUCKETS - 2], 1);
    ck_assert_uint_eq(st->check.bucket[STATS_BUCKETS - 1], 1);
    ck_assert_uint_eq(st->check.count, 5);
    ck_assert_uint_eq(st->check.sum_us, 2000102);
    free(st);
}
END_TEST

START_TEST(test_quantile)
{
    uint32_t b[STATS_BUCKETS];

    memset(b, 0, sizeof(b));
    ck_assert(stats_quantile(b, 0.5) < 0);
    /* 100 observations in (100, 200] us: the median is halfway. */
    b[2] = 100;
    ck_assert(stats_quantile(b, 0.5) > 149.0 &&
        stats_quantile(b, 0.5) < 151.0);
    ck_assert(stats_quantile(b, 0.99) > 197.0 &&
        stats_quantile(b, 0.99) <= 200.0);
    /* One slow one among 100: p99 stays low, the max bucket is seen
     * only above it. */
    b[2] = 99;
    b[12] = 1;                              /* (7500, 10000] */
    ck_assert(stats_quantile(b, 0.99) <= 200.0);
    ck_assert(stats_quantile(b, 1.0) > 7500.0);
    /* All in +Inf: its lower bound is the answer. */
    memset(b, 0, sizeof(b));
    b[STATS_BUCKETS - 1] = 3;
    ck_assert(stats_quantile(b, 0.5) == 1000000.0);
}
END_TEST

START_TEST(test_history_ring)
{
    struct rl_stats *st = stats_new();
    const struct stats_second *row;
    int64_t t = 1800000000;

    stats_record(st, t, OUT_ALLOWED, 120);
    stats_record(st, t, OUT_ALLOWED, 130);
    stats_record(st, t, OUT_DENIED, 90);
    stats_record(st, t + 1, OUT_UNAVAILABLE, 5000);
    row = stats_second_at(st, t);
    ck_assert_ptr_nonnull(row);
    ck_assert_uint_eq(row->outcome[OUT_ALLOWED], 2);
    ck_assert_uint_eq(row->outcome[OUT_DENIED], 1);
    ck_assert_uint_eq(row->bucket[1], 1);   /* 90 us */
    ck_assert_uint_eq(row->bucket[2], 2);   /* 120, 130 us */
    row = stats_second_at(st, t + 1);
    ck_assert_ptr_nonnull(row);
    ck_assert_uint_eq(row->outcome[OUT_UNAVAILABLE], 1);
    ck_assert_uint_eq(row->outcome[OUT_ALLOWED], 0);
    /* A second nobody wrote reads as nothing. */
    ck_assert_ptr_null(stats_second_at(st, t - 5));
    /* STATS_HISTORY seconds later the row is reused, and zeroed. */
    stats_record(st, t + STATS_HISTORY, OUT_NO_RULE, 10);
    ck_assert_ptr_null(stats_second_at(st, t));
    row = stats_second_at(st, t + STATS_HISTORY);
    ck_assert_ptr_nonnull(row);
    ck_assert_uint_eq(row->outcome[OUT_ALLOWED], 0);
    ck_assert_uint_eq(row->outcome[OUT_NO_RULE], 1);
    /* The clock going back does not overwrite a newer row. */
    stats_record(st, t, OUT_ALLOWED, 10);
    ck_assert_ptr_null(stats_second_at(st, t));
    free(st);
}
END_TEST

START_TEST(test_pairs)
{
    struct rl_stats *st = stats_new();
    const char *id = "00000000-0000-0000-0000-000000000001";
    int64_t t = 1800000000;
    int i, found = 0;

    ck_assert_int_eq(stats_pair_count(st, id, "acme", 7, 0, 0, t), 0);
    ck_assert_int_eq(stats_pair_count(st, id, "acme", 7, 1, 0, t), 0);
    ck_assert_int_eq(stats_pair_count(st, id, "acme", 7, 1, 0, t + 30), 0);
    ck_assert_int_eq(stats_pair_count(st, id, "acme", 8, 1, 3, t), 0);
    for (i = 0; i < STATS_PAIRS; i++) {
        const struct stats_pair *p = &st->pairs[i];

        if (!p->ready || p->rule != 7)
            continue;
        found++;
        ck_assert_str_eq(p->tenant, "acme");
        ck_assert_str_eq(p->tenant_id, id);
        ck_assert_uint_eq(p->allowed, 1);
        ck_assert_uint_eq(p->denied, 2);
        ck_assert_uint_eq(stats_pair_recent(p, t + 30), 2);
        /* The first denial has left the minute. */
        ck_assert_uint_eq(stats_pair_recent(p, t + 60), 1);
        ck_assert_uint_eq(stats_pair_recent(p, t + 200), 0);
    }
    ck_assert_int_eq(found, 1);
    free(st);
}
END_TEST

/* What a pair keeps for the dashboard: what was left after its last
 * decision, allowed or denied, and its decisions and denials by second. */
START_TEST(test_pairs_window_remaining)
{
    struct rl_stats *st = stats_new();
    const char *id = "00000000-0000-0000-0000-000000000001";
    uint64_t checks[STATS_WINDOW], denied[STATS_WINDOW];
    const struct stats_pair *p = NULL;
    int64_t t = 1800000000;
    int i;

    stats_pair_count(st, id, "acme", 7, 1, 0, t);
    stats_pair_count(st, id, "acme", 7, 1, 0, t);
    stats_pair_count(st, id, "acme", 7, 0, 4, t + 10);
    for (i = 0; i < STATS_PAIRS; i++)
        if (st->pairs[i].ready)
            p = &st->pairs[i];
    ck_assert_ptr_nonnull(p);
    /* A denial's 0 does not stay once a check was allowed. */
    ck_assert_int_eq(p->remaining, 4);
    memset(checks, 0, sizeof(checks));
    memset(denied, 0, sizeof(denied));
    stats_pair_window(p, t + 10, checks, denied);
    ck_assert_uint_eq(checks[STATS_WINDOW - 11], 2);
    ck_assert_uint_eq(denied[STATS_WINDOW - 11], 2);
    ck_assert_uint_eq(checks[STATS_WINDOW - 1], 1);
    ck_assert_uint_eq(denied[STATS_WINDOW - 1], 0);
    /* A minute later the first second has left the window. */
    memset(checks, 0, sizeof(checks));
    memset(denied, 0, sizeof(denied));
    stats_pair_window(p, t + STATS_WINDOW, checks, denied);
    ck_assert_uint_eq(checks[STATS_WINDOW - 1 - (STATS_WINDOW - 10)], 1);
    for (i = 0; i < STATS_WINDOW; i++)
        ck_assert_uint_eq(denied[i], 0);
    free(st);
}
END_TEST

/* Redis and PostgreSQL times by second, a store not used left out. */
START_TEST(test_history_stores)
{
    struct rl_stats *st = stats_new();
    const struct stats_second *row;
    int64_t t = 1800000000;

    stats_record_stores(st, t, 120, 0);
    stats_record_stores(st, t, 90, 2500);
    stats_record_stores(st, t, 0, 0);
    row = stats_second_at(st, t);
    ck_assert_ptr_nonnull(row);
    ck_assert_uint_eq(row->redis[1], 1);    /* 90 us */
    ck_assert_uint_eq(row->redis[2], 1);    /* 120 us */
    ck_assert_uint_eq(row->pg[9], 1);       /* (2000, 3000] */
    ck_assert(stats_quantile(row->pg, 0.5) > 2000.0);
    /* The row reused STATS_HISTORY seconds later starts from nothing. */
    stats_record(st, t + STATS_HISTORY, OUT_ALLOWED, 10);
    row = stats_second_at(st, t + STATS_HISTORY);
    ck_assert_ptr_nonnull(row);
    ck_assert_uint_eq(row->redis[1] + row->redis[2] + row->pg[9], 0);
    free(st);
}
END_TEST

START_TEST(test_pairs_full)
{
    struct rl_stats *st = stats_new();
    char id[RL_UUID_LEN + 1];
    int i, refused = 0;

    for (i = 0; i < STATS_PAIRS + 100; i++) {
        snprintf(id, sizeof(id), "%036d", i);
        refused += stats_pair_count(st, id, "t", 1, 0, 0, 1) == -1;
    }
    ck_assert_int_ge(refused, 100);
    ck_assert_uint_eq(st->pairs_full, (uint64_t)refused);
    free(st);
}
END_TEST

/* The owner of a name for stats_tenants(), from a table; counts the
 * questions.  An answer of -1 for a name says nothing can be known. */
struct owners {
    const char *name[4], *id[4];
    int answer[4];
    int asked;
};

static int
owners_of(void *arg, const char *tenant, char id[RL_UUID_LEN + 1])
{
    struct owners *o = arg;
    int i;

    o->asked++;
    for (i = 0; i < 4 && o->name[i] != NULL; i++)
        if (strcmp(o->name[i], tenant) == 0) {
            if (o->answer[i] == 1)
                snprintf(id, RL_UUID_LEN + 1, "%s", o->id[i]);
            return o->answer[i];
        }
    return 0;
}

#define ID1 "00000000-0000-0000-0000-000000000001"
#define ID2 "00000000-0000-0000-0000-000000000002"
#define ID3 "00000000-0000-0000-0000-000000000003"

/* acme (ID1) removed and made again (ID2); ID3 renamed from old to new. */
static void
pairs_history(struct rl_stats *st)
{
    int64_t t = 1800000000;

    stats_pair_count(st, ID1, "acme", 7, 0, 0, t);
    stats_pair_count(st, ID1, "acme", 7, 0, 0, t);
    stats_pair_count(st, ID1, "acme", 7, 1, 0, t);
    stats_pair_count(st, ID2, "acme", 9, 0, 0, t);
    stats_pair_count(st, ID3, "old", 11, 0, 0, t);
    stats_pair_count(st, ID3, "new", 11, 1, 0, t);
}

START_TEST(test_tenants_current_owner)
{
    static struct stats_pair_row rows[STATS_PAIRS];
    static struct stats_tenant ten[STATS_PAIRS];
    struct rl_stats *st = stats_new();
    struct owners o = { { "acme", "old", "new" }, { ID2, NULL, ID3 },
        { 1, 0, 1 }, 0 };
    int n, nt;

    pairs_history(st);
    n = stats_pairs_copy(st, NULL, rows);
    ck_assert_int_eq(n, 4);
    /* By name: the same name is never two tenants, a rename is the new
     * name only, the removed tenant's counts are gone. */
    nt = stats_tenants(st, rows, n, -1, owners_of, &o, ten);
    ck_assert_int_eq(nt, 2);
    ck_assert_int_eq(o.asked, 3);
    ck_assert_str_eq(ten[0].rows[0].tenant, "acme");
    ck_assert_int_eq(ten[0].n, 1);
    ck_assert_int_eq(ten[0].rows[0].rule, 9);
    ck_assert_uint_eq(ten[0].allowed, 1);
    ck_assert_uint_eq(ten[0].denied, 0);
    ck_assert_str_eq(ten[1].rows[0].tenant, "new");
    ck_assert_uint_eq(ten[1].denied, 1);
    /* The slots of ID1's acme and of old are retired: gone from the next
     * copy, and not asked about again. */
    ck_assert_int_eq(stats_pairs_copy(st, NULL, rows), 2);
    /* A retired pair counted again starts afresh. */
    ck_assert_int_eq(stats_pair_count(st, ID1, "acme", 7, 0, 0, 1), 0);
    n = stats_pairs_copy(st, ID1, rows);
    ck_assert_int_eq(n, 1);
    ck_assert_uint_eq(rows[0].allowed, 1);
    ck_assert_uint_eq(rows[0].denied, 0);
    free(st);
}
END_TEST

START_TEST(test_tenants_unknown_owner)
{
    static struct stats_pair_row rows[STATS_PAIRS];
    static struct stats_tenant ten[STATS_PAIRS];
    struct rl_stats *st = stats_new();
    struct owners o = { { "acme" }, { NULL }, { -1 }, 0 };
    int n, nt, i;

    pairs_history(st);
    /* ID1 and ID2 both count rule 9 under acme (as two workers placing a
     * pair at once would, or a rule moved): one row. */
    stats_pair_count(st, ID1, "acme", 9, 1, 0, 1800000000);
    n = stats_pairs_copy(st, NULL, rows);
    ck_assert_int_eq(n, 5);
    /* PostgreSQL cannot say: asked once, then every row is shown, each
     * name and rule once. */
    nt = stats_tenants(st, rows, n, -1, owners_of, &o, ten);
    ck_assert_int_eq(o.asked, 1);
    ck_assert_int_eq(nt, 3);
    ck_assert_str_eq(ten[0].rows[0].tenant, "acme");
    ck_assert_int_eq(ten[0].n, 2);
    ck_assert_int_eq(ten[0].rows[0].rule, 7);
    ck_assert_int_eq(ten[0].rows[1].rule, 9);
    ck_assert_uint_eq(ten[0].rows[1].allowed, 1);
    ck_assert_uint_eq(ten[0].rows[1].denied, 1);
    ck_assert_uint_eq(ten[0].allowed, 3);
    ck_assert_uint_eq(ten[0].denied, 2);
    for (i = 1; i < nt; i++)
        ck_assert_int_eq(ten[i].n, 1);
    /* Nothing was retired. */
    ck_assert_int_eq(stats_pairs_copy(st, NULL, rows), 5);
    free(st);
}
END_TEST

START_TEST(test_tenants_top)
{
    static struct stats_pair_row rows[STATS_PAIRS];
    static struct stats_tenant ten[STATS_PAIRS];
    struct rl_stats *st = stats_new();
    struct owners o = { { "acme", "old", "new" }, { ID1, NULL, ID3 },
        { 1, 0, 1 }, 0 };
    int n, nt;

    pairs_history(st);
    n = stats_pairs_copy(st, NULL, rows);
    /* acme has the most checks, ID1's (3) before ID2's (1) ... */
    nt = stats_tenants(st, rows, n, 1, owners_of, &o, ten);
    ck_assert_int_eq(nt, 1);
    ck_assert_int_eq(o.asked, 1);
    ck_assert_uint_eq(ten[0].allowed, 2);
    ck_assert_uint_eq(ten[0].denied, 1);
    /* ... and of one viewer's tenant only when asked so. */
    ck_assert_int_eq(stats_pairs_copy(st, ID3, rows), 2);
    ck_assert_int_eq(stats_tenants(st, rows, 0, 1, owners_of, &o, ten), 0);
    ck_assert_int_eq(stats_tenants(st, rows, 2, 0, owners_of, &o, ten), 0);
    free(st);
}
END_TEST

START_TEST(test_pairs_retire_reuse)
{
    static struct stats_pair_row rows[STATS_PAIRS];
    struct rl_stats *st = stats_new();
    char id[RL_UUID_LEN + 1];
    uint64_t full;
    int i, n;

    for (i = 0; i < STATS_PAIRS + 100; i++) {
        snprintf(id, sizeof(id), "%036d", i);
        (void)stats_pair_count(st, id, "t", 1, 0, 0, 1);
    }
    full = st->pairs_full;
    ck_assert_uint_gt(full, 0);
    /* A retire with a hash the slot no longer holds does nothing. */
    n = stats_pairs_copy(st, NULL, rows);
    stats_pair_retire(st, rows[0].slot, rows[0].hash + 2);
    ck_assert_int_eq(stats_pairs_copy(st, NULL, rows), n);
    for (i = 0; i < n; i++)
        stats_pair_retire(st, rows[i].slot, rows[i].hash);
    ck_assert_int_eq(stats_pairs_copy(st, NULL, rows), 0);
    /* The retired slots are taken again. */
    for (i = 0; i < STATS_PAIRS / 2; i++) {
        snprintf(id, sizeof(id), "x%035d", i);
        ck_assert_int_eq(stats_pair_count(st, id, "u", 2, 1, 0, 1), 0);
    }
    ck_assert_uint_eq(st->pairs_full, full);
    n = stats_pairs_copy(st, NULL, rows);
    ck_assert_int_eq(n, STATS_PAIRS / 2);
    for (i = 0; i < n; i++) {
        ck_assert_str_eq(rows[i].tenant, "u");
        ck_assert_uint_eq(rows[i].allowed, 0);
        ck_assert_uint_eq(rows[i].denied, 1);
    }
    free(st);
}
END_TEST

START_TEST(test_deny_log_bound)
{
    struct rl_stats *st = stats_new();
    unsigned long suppressed, total = 0;
    int i, logged = 0;

    for (i = 0; i < 25; i++) {
        logged += stats_deny_log(st, 100, 10, &suppressed);
        total += suppressed;
    }
    ck_assert_int_eq(logged, 10);
    ck_assert_uint_eq(total, 0);
    /* The next second: allowed again, and told what was held back. */
    ck_assert_int_eq(stats_deny_log(st, 101, 10, &suppressed), 1);
    ck_assert_uint_eq(suppressed, 15);
    ck_assert_int_eq(stats_deny_log(st, 101, 10, &suppressed), 1);
    ck_assert_uint_eq(suppressed, 0);
    /* 0: never. */
    ck_assert_int_eq(stats_deny_log(st, 102, 0, &suppressed), 0);
    free(st);
}
END_TEST

Suite *
stats_suite(void)
{
    Suite *s = suite_create("stats");
    TCase *tc = tcase_create("stats");

    tcase_add_test(tc, test_status_index);
    tcase_add_test(tc, test_hist_buckets);
    tcase_add_test(tc, test_quantile);
    tcase_add_test(tc, test_history_ring);
    tcase_add_test(tc, test_pairs);
    tcase_add_test(tc, test_pairs_window_remaining);
    tcase_add_test(tc, test_history_stores);
    tcase_add_test(tc, test_pairs_full);
    tcase_add_test(tc, test_tenants_current_owner);
    tcase_add_test(tc, test_tenants_unknown_owner);
    tcase_add_test(tc, test_tenants_top);
    tcase_add_test(tc, test_pairs_retire_reuse);
    tcase_add_test(tc, test_deny_log_bound);
    suite_add_tcase(s, tc);
    return s;
}
