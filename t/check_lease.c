/*
 * check_lease.c -- tests of src/lease.c: lease ids (made, split, refused
 * at every wrong shape), the lease's time to live for a plan, the
 * arguments of a release and an extension, the reading of their replies,
 * and the call a check with a lease makes (limiter_lease, with its resend
 * and its refusal to be stripped of its keys).
 */
#include <string.h>

#include <check.h>              /* t/check.h: the suites, then Check */

#include "fixtures.h"
#include "lease.h"

#define TENANT "0b6c3f2e-5d9a-4c1b-8e7f-2a9d4c6b1e03"

START_TEST(test_id_make_parse)
{
    char id[LEASE_ID_LEN + 1], id2[LEASE_ID_LEN + 1];
    char tenant[RL_UUID_LEN + 1], random[LEASE_RANDOM_HEX + 1];
    char key[LEASE_KEY_MAX + 1];

    ck_assert_int_eq(lease_id_make(TENANT, id), 0);
    ck_assert_uint_eq(strlen(id), LEASE_ID_LEN);
    ck_assert_int_eq(lease_id_parse(id, strlen(id), tenant, random), 0);
    ck_assert_str_eq(tenant, TENANT);
    ck_assert_uint_eq(strlen(random), LEASE_RANDOM_HEX);
    lease_key(tenant, random, key);
    ck_assert_int_eq(strncmp(key, "rl:{" TENANT "}:lease:", 4 +
        RL_UUID_LEN + 8), 0);
    ck_assert_str_eq(key + 4 + RL_UUID_LEN + 8, random);
    ck_assert_uint_le(strlen(key), LEASE_KEY_MAX);
    /* Two ids are two random parts. */
    ck_assert_int_eq(lease_id_make(TENANT, id2), 0);
    ck_assert_str_ne(id, id2);
    /* A tenant id that is no UUID makes none. */
    ck_assert_int_eq(lease_id_make("tenant", id), -1);
}
END_TEST

START_TEST(test_id_refused)
{
    static const char *const bad[] = {
        "",
        TENANT,
        TENANT ".",
        TENANT ".0123456789abcdef0123456789abcde",         /* 31 */
        TENANT ".0123456789abcdef0123456789abcdef0",       /* 33 */
        TENANT ".0123456789ABCDEF0123456789abcdef",        /* capitals */
        TENANT "-0123456789abcdef0123456789abcdef",        /* no dot */
        "0b6c3f2e-5d9a-4c1b-8e7f-2a9d4c6b1e0g.0123456789abcdef0123456789abcdef",
        "0b6c3f2e 5d9a-4c1b-8e7f-2a9d4c6b1e03.0123456789abcdef0123456789abcdef",
        "0b6c3f2e-5d9a-4c1b-8e7f-2a9d4c6b1e03.0123456789abcdef0123456789abcde\n",
    };
    char tenant[RL_UUID_LEN + 1], random[LEASE_RANDOM_HEX + 1];
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(lease_id_parse(bad[i], strlen(bad[i]), tenant,
            random) == -1, "%s taken", bad[i]);
    /* A NUL inside is no id either (the length is the caller's). */
    ck_assert_int_eq(lease_id_parse(TENANT ".0123456789abcdef\0"
        "123456789abcdef", LEASE_ID_LEN, tenant, random), -1);
}
END_TEST

START_TEST(test_ttl_for)
{
    struct rl_rule rule;
    struct rl_plan plan;

    fixture_rule_init(&rule, 1, "*", 0);
    rule.nlimits = 1;
    fixture_limit_tb(&rule.limits[0], 1, "a", 10, 1);
    fixture_plan_of(&plan, &rule);
    ck_assert_int_eq(lease_ttl_for(&plan, 0), 0);
    ck_assert_int_eq(lease_ttl_for(&plan, 1), LEASE_RESERVE_TTL_MS);
    rule.nlimits = 3;
    rule.limits[1] = rule.limits[0];
    rule.limits[1].algorithm = RL_ALGO_CONCURRENCY;
    rule.limits[1].limit_count = 5;
    rule.limits[1].period_us = 60000000;
    rule.limits[2] = rule.limits[1];
    rule.limits[2].period_us = 90000001;    /* rounded up to the ms */
    fixture_plan_of(&plan, &rule);
    ck_assert_int_eq(lease_ttl_for(&plan, 0), 90001);
    ck_assert_int_eq(lease_ttl_for(&plan, 1), 90001);
}
END_TEST

START_TEST(test_call_args)
{
    const char *argv[5];
    size_t argvlen[5];
    char store[128];

    ck_assert_int_eq(lease_call_args("rl:{t}:lease:ab", "ab", 'r', 350,
        store, argv, argvlen), 5);
    ck_assert_str_eq(argv[0], "1");
    ck_assert_str_eq(argv[1], "rl:{t}:lease:ab");
    ck_assert_str_eq(argv[2], "350");
    ck_assert_uint_eq(argvlen[2], 3);
    ck_assert_str_eq(argv[3], "r");
    ck_assert_str_eq(argv[4], "ab");
    lease_call_args("rl:{t}:lease:ab", "ab", 'r', -1, store, argv, argvlen);
    ck_assert_str_eq(argv[2], "-");
    lease_call_args("rl:{t}:lease:ab", "ab", 'e', 0, store, argv, argvlen);
    ck_assert_str_eq(argv[2], "0");
    ck_assert_str_eq(argv[3], "e");
}
END_TEST

START_TEST(test_decode)
{
    static const long long done[] = { 1, 5000, 2, -650 };
    static const long long ext[] = { 1, 5000, 60000 };
    static const long long gone[] = { 0, 5000 }, twice[] = { -1, 5000 },
        late[] = { -2, 5000 };
    static const long long bad1[] = { 2, 5000 }, bad2[] = { 1, 5000, -1, 0 },
        bad3[] = { 1, 5000, 999 };
    struct lease_outcome o;

    ck_assert_int_eq(lease_decode(done, 4, 'r', &o), 0);
    ck_assert_int_eq(o.result, LEASE_DONE);
    ck_assert_int_eq(o.now_ms, 5000);
    ck_assert_int_eq(o.freed, 2);
    ck_assert_int_eq(o.settled, -650);
    ck_assert_int_eq(lease_decode(ext, 3, 'e', &o), 0);
    ck_assert_int_eq(o.ttl_ms, 60000);
    ck_assert_int_eq(lease_decode(gone, 2, 'r', &o), 0);
    ck_assert_int_eq(o.result, LEASE_UNKNOWN);
    ck_assert_int_eq(lease_decode(twice, 2, 'e', &o), 0);
    ck_assert_int_eq(o.result, LEASE_RELEASED);
    ck_assert_int_eq(lease_decode(late, 2, 'r', &o), 0);
    ck_assert_int_eq(o.result, LEASE_EXPIRED);
    ck_assert_str_eq(lease_result_name(LEASE_EXPIRED), "expired");
    /* Shapes the script never answers. */
    ck_assert_int_eq(lease_decode(bad1, 2, 'r', &o), -1);
    ck_assert_int_eq(lease_decode(bad2, 4, 'r', &o), -1);
    ck_assert_int_eq(lease_decode(bad3, 3, 'e', &o), -1);
    ck_assert_int_eq(lease_decode(done, 3, 'r', &o), -1);
    ck_assert_int_eq(lease_decode(ext, 4, 'e', &o), -1);
    ck_assert_int_eq(lease_decode(gone, 1, 'r', &o), -1);
    ck_assert_int_eq(lease_decode(done, 4, 'e', &o), -1);
}
END_TEST

START_TEST(test_limiter_lease)
{
    struct limiter_call call;
    struct check_request req;
    struct rl_rule rule;
    struct rl_plan plan;
    char key[LEASE_KEY_MAX + 1];

    fixture_rule_init(&rule, 1, "*", 0);
    rule.nlimits = 1;
    fixture_limit_tb(&rule.limits[0], 1, "a", 10, 1);
    rule.limits[0].algorithm = RL_ALGO_CONCURRENCY;
    rule.limits[0].limit_count = 5;
    rule.limits[0].period_us = 60000000;
    fixture_plan_of(&plan, &rule);
    memset(&req, 0, sizeof(req));
    strcpy(req.route, "/a");
    req.cost = 1;
    lease_key(TENANT, "0123456789abcdef0123456789abcdef", key);
    ck_assert_int_eq(limiter_build(TENANT, &plan, &req, &call), 0);
    ck_assert_str_eq(call.argv[3], "0");
    ck_assert_int_eq(limiter_lease(&call, key,
        "0123456789abcdef0123456789abcdef", 60000), 0);
    /* n, key, record, cost, "3", n, the limit's five, random, ttl */
    ck_assert_int_eq(call.argc, 13);
    ck_assert_str_eq(call.argv[0], "2");
    ck_assert_str_eq(call.argv[2], key);
    ck_assert_str_eq(call.argv[4], "3");
    ck_assert_str_eq(call.argv[6], "concurrency");
    ck_assert_str_eq(call.argv[7], "5");
    ck_assert_str_eq(call.argv[8], "60000000");
    ck_assert_str_eq(call.argv[11], "0123456789abcdef0123456789abcdef");
    ck_assert_str_eq(call.argv[12], "60000");
    /* Once only; then the reply slot goes after the record. */
    ck_assert_int_eq(limiter_lease(&call, key, "ab", 60000), -1);
    ck_assert_int_eq(limiter_request_key(&call, "slot", "7"), 0);
    ck_assert_str_eq(call.argv[0], "3");
    ck_assert_str_eq(call.argv[2], key);
    ck_assert_str_eq(call.argv[3], "rl:{" TENANT "}:req:slot");
    ck_assert_str_eq(call.argv[call.argc - 1], "7");
    /* Sent again: "4"; never stripped of its keys for an ASK. */
    ck_assert_int_eq(limiter_resend(&call), 0);
    ck_assert_str_eq(call.argv[5], "4");
    ck_assert_int_eq(limiter_unkey(&call), -1);
    /* A peek takes no lease; nor a ttl out of bounds. */
    req.peek = 1;
    ck_assert_int_eq(limiter_build(TENANT, &plan, &req, &call), 0);
    ck_assert_int_eq(limiter_lease(&call, key, "ab", 60000), -1);
    req.peek = 0;
    ck_assert_int_eq(limiter_build(TENANT, &plan, &req, &call), 0);
    ck_assert_int_eq(limiter_lease(&call, key, "ab", 999), -1);
    ck_assert_int_eq(limiter_lease(&call, key, "ab", 3600001), -1);
    ck_assert_int_eq(limiter_lease(&call, key, "a b", 60000), -1);
}
END_TEST

Suite *
lease_suite(void)
{
    Suite *s = suite_create("lease");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, test_id_make_parse);
    tcase_add_test(tc, test_id_refused);
    tcase_add_test(tc, test_ttl_for);
    tcase_add_test(tc, test_call_args);
    tcase_add_test(tc, test_decode);
    tcase_add_test(tc, test_limiter_lease);
    suite_add_tcase(s, tc);
    return s;
}
