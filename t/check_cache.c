/*
 * check_cache.c -- tests of src/cache.c: lookups, expiry at an explicit
 * time, stale lookups, the capacity bound with least-recently-used
 * eviction, and that every value the cache lets go of is freed once.
 *
 * Values are addresses of static ints; the free function only counts, so
 * a test can tell which value was let go of and how often.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <check.h>              /* t/check.h: the suites, then Check */

#include "ratelimit.h"

static int v1, v2, v3, v4;
static int nfreed;
static void *last_freed;

static void
count_free(void *v)
{
    nfreed++;
    last_freed = v;
}

static void
reset_counts(void)
{
    nfreed = 0;
    last_freed = NULL;
}

START_TEST(test_put_get)
{
    struct cache *c = cache_create(8, count_free);

    ck_assert_ptr_nonnull(c);
    ck_assert_uint_eq(cache_count(c), 0);
    ck_assert_ptr_null(cache_get(c, "a", 0, NULL));
    ck_assert_int_eq(cache_put(c, "a", &v1, 1000, 500), 0);
    ck_assert_int_eq(cache_put(c, "b", &v2, 1000, 500), 0);
    ck_assert_uint_eq(cache_count(c), 2);
    ck_assert_ptr_eq(cache_get(c, "a", 1000, NULL), &v1);
    ck_assert_ptr_eq(cache_get(c, "b", 1200, NULL), &v2);
    ck_assert_ptr_null(cache_get(c, "c", 1000, NULL));
    ck_assert_ptr_null(cache_get(c, "", 1000, NULL));
    ck_assert_ptr_null(cache_get(c, "aa", 1000, NULL));
    ck_assert_int_eq(nfreed, 0);
    cache_free(c);
    ck_assert_int_eq(nfreed, 2);
}
END_TEST

START_TEST(test_expiry_exact)
{
    struct cache *c = cache_create(8, count_free);

    ck_assert_int_eq(cache_put(c, "k", &v1, 1000, 500), 0);
    ck_assert_ptr_eq(cache_get(c, "k", 1000, NULL), &v1);
    ck_assert_ptr_eq(cache_get(c, "k", 1499, NULL), &v1);
    /* Expired once now >= expires. */
    ck_assert_ptr_null(cache_get(c, "k", 1500, NULL));
    ck_assert_ptr_null(cache_get(c, "k", 99999, NULL));
    /* An expired entry stays until replaced or evicted. */
    ck_assert_uint_eq(cache_count(c), 1);
    ck_assert_int_eq(nfreed, 0);

    /* A TTL of zero is expired at once. */
    ck_assert_int_eq(cache_put(c, "z", &v2, 2000, 0), 0);
    ck_assert_ptr_null(cache_get(c, "z", 2000, NULL));
    cache_free(c);
}
END_TEST

START_TEST(test_expiry_large_times)
{
    struct cache *c = cache_create(8, count_free);
    int64_t now = INT64_C(1700000000000);

    ck_assert_int_eq(cache_put(c, "k", &v1, now, INT64_C(86400000)), 0);
    ck_assert_ptr_eq(cache_get(c, "k", now + INT64_C(86399999), NULL), &v1);
    ck_assert_ptr_null(cache_get(c, "k", now + INT64_C(86400000), NULL));
    cache_free(c);
}
END_TEST

START_TEST(test_stale)
{
    struct cache *c = cache_create(8, count_free);
    int stale;

    ck_assert_int_eq(cache_put(c, "k", &v1, 1000, 500), 0);
    stale = -1;
    ck_assert_ptr_eq(cache_get(c, "k", 1499, &stale), &v1);
    ck_assert_int_eq(stale, 0);
    stale = -1;
    ck_assert_ptr_eq(cache_get(c, "k", 1500, &stale), &v1);
    ck_assert_int_eq(stale, 1);
    /* A fresh lookup after a stale one still misses... */
    ck_assert_ptr_null(cache_get(c, "k", 1600, NULL));
    /* ...and the stale value is still there for the next stale lookup. */
    stale = 0;
    ck_assert_ptr_eq(cache_get(c, "k", 100000, &stale), &v1);
    ck_assert_int_eq(stale, 1);
    /* A miss is a miss, stale or not. */
    ck_assert_ptr_null(cache_get(c, "other", 1000, &stale));
    /* Putting it again makes it fresh. */
    ck_assert_int_eq(cache_put(c, "k", &v2, 100000, 10), 0);
    stale = -1;
    ck_assert_ptr_eq(cache_get(c, "k", 100005, &stale), &v2);
    ck_assert_int_eq(stale, 0);
    cache_free(c);
}
END_TEST

START_TEST(test_capacity_evicts_lru)
{
    struct cache *c = cache_create(3, count_free);

    ck_assert_int_eq(cache_put(c, "a", &v1, 0, 1000), 0);
    ck_assert_int_eq(cache_put(c, "b", &v2, 0, 1000), 0);
    ck_assert_int_eq(cache_put(c, "c", &v3, 0, 1000), 0);
    ck_assert_uint_eq(cache_count(c), 3);
    ck_assert_int_eq(nfreed, 0);
    /* Without lookups, the oldest goes. */
    ck_assert_int_eq(cache_put(c, "d", &v4, 0, 1000), 0);
    ck_assert_uint_eq(cache_count(c), 3);
    ck_assert_int_eq(nfreed, 1);
    ck_assert_ptr_eq(last_freed, &v1);
    ck_assert_ptr_null(cache_get(c, "a", 1, NULL));
    ck_assert_ptr_eq(cache_get(c, "b", 1, NULL), &v2);
    ck_assert_ptr_eq(cache_get(c, "c", 1, NULL), &v3);
    ck_assert_ptr_eq(cache_get(c, "d", 1, NULL), &v4);
    cache_free(c);
}
END_TEST

START_TEST(test_cost_bound)
{
    struct cache *c = cache_create(100, count_free);

    cache_set_max_cost(c, 100);
    ck_assert_int_eq(cache_put_cost(c, "a", &v1, 40, 0, 1000), 0);
    ck_assert_int_eq(cache_put_cost(c, "b", &v2, 40, 0, 1000), 0);
    ck_assert_uint_eq(cache_cost(c), 80);
    /* "a" was used last: "b" goes to make room for 30 more. */
    ck_assert_ptr_eq(cache_get(c, "a", 1, NULL), &v1);
    ck_assert_int_eq(cache_put_cost(c, "c", &v3, 30, 0, 1000), 0);
    ck_assert_int_eq(nfreed, 1);
    ck_assert_ptr_eq(last_freed, &v2);
    ck_assert_uint_eq(cache_cost(c), 70);
    /* Replacing an entry counts its new cost only. */
    ck_assert_int_eq(cache_put_cost(c, "c", &v3, 60, 0, 1000), 0);
    ck_assert_uint_eq(cache_cost(c), 100);
    ck_assert_uint_eq(cache_count(c), 2);
    /* Larger than the bound by itself: kept, alone. */
    ck_assert_int_eq(cache_put_cost(c, "d", &v4, 150, 0, 1000), 0);
    ck_assert_uint_eq(cache_count(c), 1);
    ck_assert_uint_eq(cache_cost(c), 150);
    ck_assert_ptr_eq(cache_get(c, "d", 1, NULL), &v4);
    cache_remove(c, "d");
    ck_assert_uint_eq(cache_cost(c), 0);
    cache_free(c);
}
END_TEST

START_TEST(test_get_refreshes_recency)
{
    struct cache *c = cache_create(2, count_free);

    ck_assert_int_eq(cache_put(c, "a", &v1, 0, 1000), 0);
    ck_assert_int_eq(cache_put(c, "b", &v2, 0, 1000), 0);
    /* "a" is now the most recently used: "b" is the victim. */
    ck_assert_ptr_eq(cache_get(c, "a", 1, NULL), &v1);
    ck_assert_int_eq(cache_put(c, "c", &v3, 0, 1000), 0);
    ck_assert_int_eq(nfreed, 1);
    ck_assert_ptr_eq(last_freed, &v2);
    ck_assert_ptr_null(cache_get(c, "b", 1, NULL));
    ck_assert_ptr_eq(cache_get(c, "a", 1, NULL), &v1);
    ck_assert_ptr_eq(cache_get(c, "c", 1, NULL), &v3);
    ck_assert_uint_eq(cache_count(c), 2);

    /* A stale lookup counts as a use too. */
    ck_assert_ptr_eq(cache_get(c, "a", 5000, &(int){ 0 }), &v1);
    ck_assert_int_eq(cache_put(c, "d", &v4, 0, 1000), 0);
    ck_assert_ptr_eq(last_freed, &v3);
    cache_free(c);
}
END_TEST

START_TEST(test_put_existing_when_full)
{
    struct cache *c = cache_create(2, count_free);

    ck_assert_int_eq(cache_put(c, "a", &v1, 0, 1000), 0);
    ck_assert_int_eq(cache_put(c, "b", &v2, 0, 1000), 0);
    /* Replacing a key of a full cache evicts nothing else. */
    ck_assert_int_eq(cache_put(c, "a", &v3, 0, 1000), 0);
    ck_assert_uint_eq(cache_count(c), 2);
    ck_assert_int_eq(nfreed, 1);
    ck_assert_ptr_eq(last_freed, &v1);
    ck_assert_ptr_eq(cache_get(c, "a", 1, NULL), &v3);
    ck_assert_ptr_eq(cache_get(c, "b", 1, NULL), &v2);
    cache_free(c);
}
END_TEST

START_TEST(test_replace_frees_old)
{
    struct cache *c = cache_create(8, count_free);

    ck_assert_int_eq(cache_put(c, "k", &v1, 0, 1000), 0);
    ck_assert_int_eq(cache_put(c, "k", &v2, 0, 1000), 0);
    ck_assert_int_eq(nfreed, 1);
    ck_assert_ptr_eq(last_freed, &v1);
    ck_assert_uint_eq(cache_count(c), 1);
    ck_assert_ptr_eq(cache_get(c, "k", 1, NULL), &v2);
    cache_free(c);
    ck_assert_int_eq(nfreed, 2);
    ck_assert_ptr_eq(last_freed, &v2);
}
END_TEST

START_TEST(test_remove)
{
    struct cache *c = cache_create(8, count_free);

    ck_assert_int_eq(cache_put(c, "a", &v1, 0, 1000), 0);
    ck_assert_int_eq(cache_put(c, "b", &v2, 0, 1000), 0);
    cache_remove(c, "a");
    ck_assert_int_eq(nfreed, 1);
    ck_assert_ptr_eq(last_freed, &v1);
    ck_assert_uint_eq(cache_count(c), 1);
    ck_assert_ptr_null(cache_get(c, "a", 1, NULL));
    ck_assert_ptr_null(cache_get(c, "a", 1, &(int){ 0 }));
    ck_assert_ptr_eq(cache_get(c, "b", 1, NULL), &v2);
    /* Removing what is not there does nothing. */
    cache_remove(c, "a");
    cache_remove(c, "zzz");
    ck_assert_int_eq(nfreed, 1);
    ck_assert_uint_eq(cache_count(c), 1);
    cache_free(c);
}
END_TEST

START_TEST(test_clear)
{
    struct cache *c = cache_create(8, count_free);

    ck_assert_int_eq(cache_put(c, "a", &v1, 0, 1000), 0);
    ck_assert_int_eq(cache_put(c, "b", &v2, 0, 1000), 0);
    ck_assert_int_eq(cache_put(c, "c", &v3, 0, 1000), 0);
    cache_clear(c);
    ck_assert_uint_eq(cache_count(c), 0);
    ck_assert_int_eq(nfreed, 3);
    ck_assert_ptr_null(cache_get(c, "a", 1, NULL));
    ck_assert_ptr_null(cache_get(c, "b", 1, &(int){ 0 }));
    /* Still usable afterwards. */
    ck_assert_int_eq(cache_put(c, "a", &v4, 0, 1000), 0);
    ck_assert_ptr_eq(cache_get(c, "a", 1, NULL), &v4);
    ck_assert_uint_eq(cache_count(c), 1);
    cache_free(c);
    ck_assert_int_eq(nfreed, 4);
}
END_TEST

START_TEST(test_no_free_function)
{
    struct cache *c = cache_create(1, NULL);

    ck_assert_int_eq(cache_put(c, "a", &v1, 0, 1000), 0);
    ck_assert_int_eq(cache_put(c, "a", &v2, 0, 1000), 0);
    ck_assert_int_eq(cache_put(c, "b", &v3, 0, 1000), 0);
    ck_assert_uint_eq(cache_count(c), 1);
    ck_assert_ptr_null(cache_get(c, "a", 1, NULL));
    ck_assert_ptr_eq(cache_get(c, "b", 1, NULL), &v3);
    cache_remove(c, "b");
    ck_assert_uint_eq(cache_count(c), 0);
    cache_free(c);
    ck_assert_int_eq(nfreed, 0);
    /* Like free(3), cache_free takes NULL. */
    cache_free(NULL);
}
END_TEST

START_TEST(test_many_keys)
{
    struct cache *c = cache_create(1000, count_free);
    char key[32];
    intptr_t i;

    /* Far more keys than buckets or capacity: chains and evictions. */
    for (i = 0; i < 5000; i++) {
        snprintf(key, sizeof(key), "key-%ld", (long)i);
        ck_assert_int_eq(cache_put(c, key, (void *)(i + 1), i, 100000), 0);
        ck_assert_uint_le(cache_count(c), 1000);
    }
    ck_assert_uint_eq(cache_count(c), 1000);
    ck_assert_int_eq(nfreed, 4000);
    for (i = 0; i < 5000; i++) {
        snprintf(key, sizeof(key), "key-%ld", (long)i);
        if (i < 4000)
            ck_assert_ptr_null(cache_get(c, key, 5000, NULL));
        else
            ck_assert_ptr_eq(cache_get(c, key, 5000, NULL), (void *)(i + 1));
    }
    cache_free(c);
    ck_assert_int_eq(nfreed, 5000);
}
END_TEST

Suite *
cache_suite(void)
{
    Suite *s = suite_create("cache");
    TCase *tc;

    tc = tcase_create("cache");
    tcase_add_checked_fixture(tc, reset_counts, NULL);
    tcase_add_test(tc, test_put_get);
    tcase_add_test(tc, test_expiry_exact);
    tcase_add_test(tc, test_expiry_large_times);
    tcase_add_test(tc, test_stale);
    tcase_add_test(tc, test_capacity_evicts_lru);
    tcase_add_test(tc, test_cost_bound);
    tcase_add_test(tc, test_get_refreshes_recency);
    tcase_add_test(tc, test_put_existing_when_full);
    tcase_add_test(tc, test_replace_frees_old);
    tcase_add_test(tc, test_remove);
    tcase_add_test(tc, test_clear);
    tcase_add_test(tc, test_no_free_function);
    tcase_add_test(tc, test_many_keys);
    suite_add_tcase(s, tc);
    return s;
}
