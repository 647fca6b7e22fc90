/*
 * check_limiter.c -- tests of src/limiter.c: the EVALSHA arguments of a
 * check (layout, keys, parameters as lua/check.lua accepts them), the
 * decoding of the script's reply, shadow limits, and the choice of the
 * limit the X-RateLimit-* headers describe.  Also, in a test case of its
 * own, the decision behind src/log.c's limit of one line per call site
 * and second (log_limit_event, log_limit_overdue): it keeps the Redis
 * store's errors from writing a line per request.
 *
 * Plans are put together by hand here, so that these tests do not depend
 * on rules_plan() (tested in check_rules.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>              /* t/check.h: the suites, then Check */

#include "ratelimit.h"
#include "fixtures.h"

#define SHA "0123456789abcdef0123456789abcdef01234567"
#define TENANT "7f0c2d3e-1a2b-4c5d-8e9f-0a1b2c3d4e5f"

static void
request_set(struct check_request *req, const char *route,
    const char *subject, long long cost, int peek)
{
    memset(req, 0, sizeof(*req));
    snprintf(req->route, sizeof(req->route), "%s", route);
    if (subject != NULL) {
        snprintf(req->subject, sizeof(req->subject), "%s", subject);
        req->has_subject = 1;
    }
    req->cost = cost;
    req->peek = peek;
}

/* Rule 42 with "burst" (id 7, a token bucket of 10 at 2 per second) and
 * "minute" (id 8, 100 per 60 s), its plan, and a check of cost 3 on
 * /api/orders. */
static void
rule_42(struct rl_rule *rule, struct rl_plan *plan, struct check_request *req)
{
    fixture_rule_init(rule, 42, "*", 0);
    rule->nlimits = 2;
    fixture_limit_tb(&rule->limits[0], 7, "burst", 10, 2.0);
    fixture_limit_sw(&rule->limits[1], 8, "minute", 100, 60);
    fixture_plan_of(plan, rule);
    request_set(req, "/api/orders", NULL, 3, 0);
}

/* argv must equal want (argc strings) and argvlen must be their lengths. */
static void
assert_argv(const struct limiter_call *call, const char *const *want,
    int argc)
{
    int i;

    ck_assert_int_eq(call->argc, argc);
    for (i = 0; i < argc; i++) {
        ck_assert_msg(strcmp(call->argv[i], want[i]) == 0,
            "argv[%d] is \"%s\", want \"%s\"", i, call->argv[i], want[i]);
        ck_assert_uint_eq(call->argvlen[i], strlen(want[i]));
    }
}

/* The first 32 hex characters of SHA-256 of s. */
static void
hash32(const char *s, char out[33])
{
    char hex[65];

    util_sha256_hex(s, strlen(s), hex);
    memcpy(out, hex, 32);
    out[32] = '\0';
}

START_TEST(test_build_layout)
{
    static const char *const want[] = {
        "2",
        "rl:{" TENANT "}:42:7", "rl:{" TENANT "}:42:8",
        "3", "0", "2",
        "token_bucket", "10", "2", "0", "0",
        "sliding_window", "100", "60", "0", "0",
    };
    struct rl_rule rule;
    struct rl_plan plan;
    struct check_request req;
    struct limiter_call call;

    rule_42(&rule, &plan, &req);
    ck_assert_int_eq(limiter_build(TENANT, &plan, &req, &call), 0);
    assert_argv(&call, want, (int)(sizeof(want) / sizeof(want[0])));
}
END_TEST

START_TEST(test_build_peek_and_one_limit)
{
    static const char *const want[] = {
        "1", "rl:{t1}:1:9", "1000000", "1", "1",
        "sliding_window", "5", "1", "0", "0",
    };
    struct rl_rule rule;
    struct rl_plan plan;
    struct check_request req;
    struct limiter_call call;

    fixture_rule_init(&rule, 1, "*", 0);
    rule.nlimits = 1;
    fixture_limit_sw(&rule.limits[0], 9, "second", 5, 1);
    fixture_plan_of(&plan, &rule);
    request_set(&req, "/", NULL, 1000000, 1);
    ck_assert_int_eq(limiter_build("t1", &plan, &req, &call), 0);
    assert_argv(&call, want, (int)(sizeof(want) / sizeof(want[0])));
}
END_TEST

/* ratelimitctl's peek at one counter: its key as given, cost 1, a peek,
 * one limit, not shadow; a check's call could carry it. */
START_TEST(test_peek_layout)
{
    static const char *const want[] = {
        "1", "rl:{t1}:1:9:s0123", "1", "1", "1",
        "sliding_window", "5", "1", "0", "0",
    };
    struct rl_limit limit;
    struct limiter_call call;
    char key[4000];

    fixture_limit_sw(&limit, 9, "second", 5, 1);
    ck_assert_int_eq(limiter_peek("rl:{t1}:1:9:s0123", &limit, &call), 0);
    assert_argv(&call, want, (int)(sizeof(want) / sizeof(want[0])));
    ck_assert_int_eq(call.nlimits, 1);
    ck_assert_int_eq(call.keyed, 0);
    /* a key longer than a call holds, and an unusable limit */
    memset(key, 'k', sizeof(key) - 1);
    key[sizeof(key) - 1] = '\0';
    ck_assert_int_eq(limiter_peek(key, &limit, &call), -1);
    limit.algorithm = -1;
    ck_assert_int_eq(limiter_peek("rl:{t1}:1:9", &limit, &call), -1);
}
END_TEST

START_TEST(test_build_gcra_fixed_window)
{
    static const char *const want[] = {
        "3", "rl:{t}:3:1", "rl:{t}:3:2", "rl:{t}:3:3",
        "1", "0", "3",
        "gcra", "10", "1000000", "5", "0",
        "fixed_window", "1000", "day", "0", "0",
        "fixed_window", "1000000000000", "month", "0", "0",
    };
    struct rl_rule rule;
    struct rl_plan plan;
    struct check_request req;
    struct limiter_call call;

    fixture_rule_init(&rule, 3, "*", 0);
    rule.nlimits = 3;
    fixture_limit_gcra(&rule.limits[0], 1, "pace", 10, 1000000, 5);
    fixture_limit_fw(&rule.limits[1], 2, "daily", 1000, RL_CAL_DAY);
    fixture_limit_fw(&rule.limits[2], 3, "monthly", 1000000000000LL,
        RL_CAL_MONTH);
    fixture_plan_of(&plan, &rule);
    request_set(&req, "/", NULL, 1, 0);
    ck_assert_int_eq(limiter_build("t", &plan, &req, &call), 0);
    assert_argv(&call, want, (int)(sizeof(want) / sizeof(want[0])));

    /* A burst of 0 is sent as "0" (the script takes a count). */
    rule.limits[0].burst = 0;
    ck_assert_int_eq(limiter_build("t", &plan, &req, &call), 0);
    ck_assert_str_eq(call.argv[10], "0");
}
END_TEST

START_TEST(test_build_calendars)
{
    const struct fixture_calendar *cal = fixture_calendars;
    struct rl_rule rule;
    struct rl_plan plan;
    struct check_request req;
    struct limiter_call call;
    size_t i;

    fixture_rule_init(&rule, 3, "*", 0);
    rule.nlimits = 1;
    request_set(&req, "/", NULL, 1, 0);
    for (i = 0; i < sizeof(fixture_calendars) / sizeof(cal[0]); i++) {
        fixture_limit_fw(&rule.limits[0], 1, "w", 5, cal[i].calendar);
        fixture_plan_of(&plan, &rule);
        ck_assert_int_eq(limiter_build("t", &plan, &req, &call), 0);
        ck_assert_str_eq(call.argv[7], cal[i].name);
    }
    /* A fixed window without a known calendar cannot be sent. */
    fixture_limit_fw(&rule.limits[0], 1, "w", 5, 0);
    ck_assert_int_eq(limiter_build("t", &plan, &req, &call), -1);
    fixture_limit_fw(&rule.limits[0], 1, "w", 5, RL_CAL_MONTH + 1);
    ck_assert_int_eq(limiter_build("t", &plan, &req, &call), -1);
}
END_TEST

START_TEST(test_build_shadow_flag)
{
    struct rl_rule enforced, shadow;
    struct rl_plan plan;
    struct check_request req;
    struct limiter_call call;

    fixture_rule_init(&enforced, 1, "*", 0);
    enforced.nlimits = 1;
    fixture_limit_tb(&enforced.limits[0], 1, "a", 10, 1);
    fixture_rule_init(&shadow, 2, "*", 0);
    shadow.shadow = 1;
    shadow.nlimits = 1;
    fixture_limit_sw(&shadow.limits[0], 2, "b", 10, 1);
    memset(&plan, 0, sizeof(plan));
    fixture_plan_add(&plan, &enforced);
    fixture_plan_add(&plan, &shadow);
    request_set(&req, "/", NULL, 1, 0);
    ck_assert_int_eq(limiter_build("t", &plan, &req, &call), 0);
    ck_assert_int_eq(call.argc, 1 + 2 + 3 + 5 * 2);
    ck_assert_str_eq(call.argv[1], "rl:{t}:1:1");
    ck_assert_str_eq(call.argv[2], "rl:{t}:2:2");
    ck_assert_str_eq(call.argv[6], "token_bucket");
    ck_assert_str_eq(call.argv[10], "0");
    ck_assert_str_eq(call.argv[11], "sliding_window");
    ck_assert_str_eq(call.argv[15], "1");
}
END_TEST

START_TEST(test_build_per_route_and_subject)
{
    struct rl_rule rule;
    struct rl_plan plan;
    struct check_request req;
    struct limiter_call call;
    char r[33], s[33], want[256];

    fixture_rule_init(&rule, 5, "*", 0);
    rule.nlimits = 2;
    fixture_limit_tb(&rule.limits[0], 11, "a", 10, 1);
    fixture_limit_tb(&rule.limits[1], 12, "b", 20, 1);
    fixture_plan_of(&plan, &rule);
    hash32("/api/orders/17", r);
    hash32("user@example.com", s);

    /* per_route only. */
    rule.per_route = 1;
    request_set(&req, "/api/orders/17", NULL, 1, 0);
    ck_assert_int_eq(limiter_build("t", &plan, &req, &call), 0);
    snprintf(want, sizeof(want), "rl:{t}:5:11:r%s", r);
    ck_assert_str_eq(call.argv[1], want);
    snprintf(want, sizeof(want), "rl:{t}:5:12:r%s", r);
    ck_assert_str_eq(call.argv[2], want);

    /* subject only. */
    rule.per_route = 0;
    request_set(&req, "/api/orders/17", "user@example.com", 1, 0);
    ck_assert_int_eq(limiter_build("t", &plan, &req, &call), 0);
    snprintf(want, sizeof(want), "rl:{t}:5:11:s%s", s);
    ck_assert_str_eq(call.argv[1], want);
    ck_assert_uint_eq(call.argvlen[1], strlen(want));

    /* Both: route first, then subject. */
    rule.per_route = 1;
    ck_assert_int_eq(limiter_build("t", &plan, &req, &call), 0);
    snprintf(want, sizeof(want), "rl:{t}:5:11:r%s:s%s", r, s);
    ck_assert_str_eq(call.argv[1], want);
    snprintf(want, sizeof(want), "rl:{t}:5:12:r%s:s%s", r, s);
    ck_assert_str_eq(call.argv[2], want);

    /* Neither: the route does not enter the key. */
    rule.per_route = 0;
    request_set(&req, "/api/orders/17", NULL, 1, 0);
    ck_assert_int_eq(limiter_build("t", &plan, &req, &call), 0);
    ck_assert_str_eq(call.argv[1], "rl:{t}:5:11");
}
END_TEST

START_TEST(test_build_per_route_is_per_rule)
{
    struct rl_rule routed, global;
    struct rl_plan plan;
    struct check_request req;
    struct limiter_call call;
    char r[33], want[256];

    /* Only the limits of a per-route rule get the route in their key. */
    fixture_rule_init(&global, 1, "*", 0);
    global.nlimits = 1;
    fixture_limit_fw(&global.limits[0], 10, "daily", 1000, RL_CAL_DAY);
    fixture_rule_init(&routed, 2, "*", 0);
    routed.per_route = 1;
    routed.nlimits = 1;
    fixture_limit_tb(&routed.limits[0], 20, "burst", 10, 1);
    memset(&plan, 0, sizeof(plan));
    fixture_plan_add(&plan, &global);
    fixture_plan_add(&plan, &routed);
    request_set(&req, "/x", NULL, 1, 0);
    hash32("/x", r);
    ck_assert_int_eq(limiter_build("t", &plan, &req, &call), 0);
    ck_assert_str_eq(call.argv[1], "rl:{t}:1:10");
    snprintf(want, sizeof(want), "rl:{t}:2:20:r%s", r);
    ck_assert_str_eq(call.argv[2], want);
}
END_TEST

START_TEST(test_build_has_subject_governs)
{
    struct rl_rule rule;
    struct rl_plan plan;
    struct check_request req;
    struct limiter_call call;

    fixture_rule_init(&rule, 5, "*", 0);
    rule.nlimits = 1;
    fixture_limit_tb(&rule.limits[0], 11, "a", 10, 1);
    fixture_plan_of(&plan, &rule);
    request_set(&req, "/a", "someone", 1, 0);
    req.has_subject = 0;
    ck_assert_int_eq(limiter_build("t", &plan, &req, &call), 0);
    ck_assert_str_eq(call.argv[1], "rl:{t}:5:11");
}
END_TEST

START_TEST(test_build_keys_are_bounded)
{
    struct rl_rule rule;
    struct rl_plan plan;
    struct check_request req;
    struct limiter_call call;
    char first[256];
    size_t base = strlen("rl:{t}:5:11");

    fixture_rule_init(&rule, 5, "*", 0);
    rule.per_route = 1;
    rule.nlimits = 1;
    fixture_limit_tb(&rule.limits[0], 11, "a", 10, 1);
    fixture_plan_of(&plan, &rule);
    memset(&req, 0, sizeof(req));
    memset(req.route, 'r', RL_ROUTE_MAX);
    memset(req.subject, 's', RL_SUBJECT_MAX);
    req.has_subject = 1;
    req.cost = 1;
    ck_assert_int_eq(limiter_build("t", &plan, &req, &call), 0);
    ck_assert_uint_eq(call.argvlen[1], base + 2 + 32 + 2 + 32);
    ck_assert_ptr_null(strstr(call.argv[1], "rrr"));
    ck_assert_ptr_null(strstr(call.argv[1], "sss"));

    /* Different routes and subjects give different keys. */
    snprintf(first, sizeof(first), "%s", call.argv[1]);
    req.route[0] = 'x';
    ck_assert_int_eq(limiter_build("t", &plan, &req, &call), 0);
    ck_assert_str_ne(call.argv[1], first);
    snprintf(first, sizeof(first), "%s", call.argv[1]);
    req.subject[0] = 'x';
    ck_assert_int_eq(limiter_build("t", &plan, &req, &call), 0);
    ck_assert_str_ne(call.argv[1], first);
}
END_TEST

START_TEST(test_build_max_limits)
{
    struct rl_rule rule;
    struct rl_plan plan;
    struct check_request req;
    struct limiter_call call;
    char want[256], r[33], s[33];
    int i;

    fixture_rule_init(&rule, 9223372036854775807LL, "*", 0);
    rule.per_route = 1;
    rule.nlimits = RL_MAX_LIMITS;
    for (i = 0; i < RL_MAX_LIMITS; i++)
        fixture_limit_tb(&rule.limits[i], 9223372036854775000LL + i, "l",
            1000000000000LL, 12345678.5);
    fixture_plan_of(&plan, &rule);
    request_set(&req, "/r", "subject", 5, 0);
    hash32("/r", r);
    hash32("subject", s);
    ck_assert_int_eq(limiter_build(TENANT, &plan, &req, &call), 0);
    /* All but the five arguments of the budget, the three of a lease and
     * the two of the reply slot and the call id. */
    ck_assert_int_eq(call.argc, LIMITER_MAX_ARGS - 10);
    ck_assert_str_eq(call.argv[0], "8");
    snprintf(want, sizeof(want), "rl:{%s}:9223372036854775807:"
        "9223372036854775007:r%s:s%s", TENANT, r, s);
    ck_assert_str_eq(call.argv[1 + 7], want);
    ck_assert_str_eq(call.argv[1 + 8], "5");
    ck_assert_str_eq(call.argv[1 + 8 + 2], "8");
    ck_assert_str_eq(call.argv[LIMITER_MAX_ARGS - 15], "token_bucket");
    ck_assert_str_eq(call.argv[LIMITER_MAX_ARGS - 14], "1000000000000");
    ck_assert_str_eq(call.argv[LIMITER_MAX_ARGS - 13], "12345678.5");
    ck_assert_str_eq(call.argv[LIMITER_MAX_ARGS - 12], "0");
    ck_assert_str_eq(call.argv[LIMITER_MAX_ARGS - 11], "0");
    /* The largest call still takes the largest budget, a lease, the
     * longest slot and id. */
    ck_assert_int_eq(limiter_budget(&call, &plan, 1000000000), 0);
    snprintf(want, sizeof(want), "rl:{%s}:lease:"
        "0123456789abcdef0123456789abcdef", TENANT);
    ck_assert_int_eq(limiter_lease(&call, want,
        "0123456789abcdef0123456789abcdef", 3600000), 0);
    ck_assert_int_eq(limiter_request_key(&call,
        "0123456789abcdef0123456789abcdef01234567",
        "76543210fedcba9876543210fedcba9876543210"), 0);
    ck_assert_int_eq(call.argc, LIMITER_MAX_ARGS);
    ck_assert_str_eq(call.argv[0], "12");
    ck_assert_str_eq(call.argv[1 + 10], want);
    snprintf(want, sizeof(want), "rl:{%s}:9223372036854775807:"
        "9223372036854775007:r%s:s%s", TENANT, r, s);
    ck_assert_str_eq(call.argv[1 + 7], want);
    snprintf(want, sizeof(want), "rl:{%s}:budget:names", TENANT);
    ck_assert_str_eq(call.argv[1 + 8], want);
    snprintf(want, sizeof(want), "rl:{%s}:req:"
        "0123456789abcdef0123456789abcdef01234567", TENANT);
    ck_assert_str_eq(call.argv[1 + 11], want);
    ck_assert_str_eq(call.argv[1 + 12], "5");
    ck_assert_str_eq(call.argv[1 + 13], "3");
    ck_assert_str_eq(call.argv[LIMITER_MAX_ARGS - 7], "0");
    ck_assert_str_eq(call.argv[LIMITER_MAX_ARGS - 6], "1000000000");
    ck_assert_str_eq(call.argv[LIMITER_MAX_ARGS - 5], "3600");
    ck_assert_str_eq(call.argv[LIMITER_MAX_ARGS - 4], "11111111");
    ck_assert_str_eq(call.argv[LIMITER_MAX_ARGS - 3],
        "0123456789abcdef0123456789abcdef");
    ck_assert_str_eq(call.argv[LIMITER_MAX_ARGS - 2], "3600000");
    ck_assert_str_eq(call.argv[LIMITER_MAX_ARGS - 1],
        "76543210fedcba9876543210fedcba9876543210");
}
END_TEST

/* The reply slot goes in after the limits' keys, with their hash tag, and
 * the call's id last; the key count grows by one and nothing else moves. */
START_TEST(test_request_key_layout)
{
    static const char *const want[] = {
        "3",
        "rl:{" TENANT "}:42:7", "rl:{" TENANT "}:42:8",
        "rl:{" TENANT "}:req:5f3a9c0e12ab44d1",
        "3", "0", "2",
        "token_bucket", "10", "2", "0", "0",
        "sliding_window", "100", "60", "0", "0",
        "1f",
    };
    struct rl_rule rule;
    struct rl_plan plan;
    struct check_request req;
    struct limiter_call call;

    rule_42(&rule, &plan, &req);
    ck_assert_int_eq(limiter_build(TENANT, &plan, &req, &call), 0);
    ck_assert_int_eq(limiter_request_key(&call, "5f3a9c0e12ab44d1", "1f"),
        0);
    assert_argv(&call, want, (int)(sizeof(want) / sizeof(want[0])));
    /* Once only: a second key would be taken for a limit's. */
    ck_assert_int_eq(limiter_request_key(&call, "5f3a9c0e12ab44d1", "20"),
        -1);
    assert_argv(&call, want, (int)(sizeof(want) / sizeof(want[0])));
}
END_TEST

/* A resend changes the peek argument "0" to "2", and nothing else. */
START_TEST(test_resend)
{
    static const char *const want[] = {
        "3",
        "rl:{" TENANT "}:42:7", "rl:{" TENANT "}:42:8",
        "rl:{" TENANT "}:req:ab",
        "3", "2", "2",
        "token_bucket", "10", "2", "0", "0",
        "sliding_window", "100", "60", "0", "0",
        "1",
    };
    struct rl_rule rule;
    struct rl_plan plan;
    struct check_request req;
    struct limiter_call call;

    rule_42(&rule, &plan, &req);
    ck_assert_int_eq(limiter_build(TENANT, &plan, &req, &call), 0);
    /* Without a reply slot there is nothing to replay from. */
    ck_assert_int_eq(limiter_resend(&call), -1);
    ck_assert_str_eq(call.argv[2 + 2], "0");
    ck_assert_int_eq(limiter_request_key(&call, "ab", "1"), 0);
    ck_assert_int_eq(limiter_resend(&call), 0);
    assert_argv(&call, want, (int)(sizeof(want) / sizeof(want[0])));
    /* A second resend is the same. */
    ck_assert_int_eq(limiter_resend(&call), 0);
    assert_argv(&call, want, (int)(sizeof(want) / sizeof(want[0])));
}
END_TEST

/* A peek is sent again as a peek: it stores nothing to replay. */
START_TEST(test_resend_peek)
{
    struct rl_rule rule;
    struct rl_plan plan;
    struct check_request req;
    struct limiter_call call;

    fixture_rule_init(&rule, 1, "*", 0);
    rule.nlimits = 1;
    fixture_limit_sw(&rule.limits[0], 9, "second", 5, 1);
    fixture_plan_of(&plan, &rule);
    request_set(&req, "/", NULL, 1, 1);
    ck_assert_int_eq(limiter_build("t1", &plan, &req, &call), 0);
    ck_assert_int_eq(limiter_request_key(&call, "p", "7"), 0);
    ck_assert_str_eq(call.argv[3], "1");
    ck_assert_int_eq(limiter_resend(&call), 0);
    ck_assert_str_eq(call.argv[2], "rl:{t1}:req:p");
    ck_assert_str_eq(call.argv[3], "1");
    ck_assert_str_eq(call.argv[4], "1");
    ck_assert_str_eq(call.argv[call.argc - 1], "7");
}
END_TEST

/* limiter_unkey takes the reply slot and id out again: the call is as
 * limiter_build made it; a call sent again, or one without the key, is
 * left alone. */
START_TEST(test_unkey)
{
    struct limiter_call call, built;
    struct rl_rule rule;
    struct rl_plan plan;
    struct check_request req;
    int i;

    fixture_rule_init(&rule, 1, "*", 0);
    rule.nlimits = 2;
    fixture_limit_sw(&rule.limits[0], 9, "second", 5, 1);
    fixture_limit_sw(&rule.limits[1], 10, "minute", 50, 1);
    fixture_plan_of(&plan, &rule);
    request_set(&req, "/", "subj", 1, 0);
    ck_assert_int_eq(limiter_build("t1", &plan, &req, &built), 0);
    /* (argv points into the call's own store: no struct copy) */
    ck_assert_int_eq(limiter_build("t1", &plan, &req, &call), 0);
    ck_assert_int_eq(limiter_unkey(&call), -1);
    ck_assert_int_eq(limiter_request_key(&call, "r", "1"), 0);
    ck_assert_int_eq(call.argc, built.argc + 2);
    ck_assert_int_eq(limiter_unkey(&call), 0);
    ck_assert_int_eq(call.argc, built.argc);
    for (i = 0; i < call.argc; i++) {
        ck_assert_uint_eq(call.argvlen[i], built.argvlen[i]);
        ck_assert_int_eq(memcmp(call.argv[i], built.argv[i],
            built.argvlen[i]), 0);
    }
    ck_assert_int_eq(limiter_unkey(&call), -1);
    /* Sent again: the slot is what makes the resend safe; it stays. */
    ck_assert_int_eq(limiter_request_key(&call, "r", "2"), 0);
    ck_assert_int_eq(limiter_resend(&call), 0);
    ck_assert_int_eq(limiter_unkey(&call), -1);
    ck_assert_int_eq(call.argc, built.argc + 2);
}
END_TEST

/* The counter budget goes in after the limits' keys (its two keys, with
 * their hash tag) and after their arguments (budget, window, mask); the
 * reply slot then goes after every key; a resend and limiter_unkey find
 * their places past the budget. */
START_TEST(test_budget_layout)
{
    static const char *const want[] = {
        "5",
        "rl:{" TENANT "}:42:7", "rl:{" TENANT "}:42:8:sHASH",
        "rl:{" TENANT "}:budget:names", "rl:{" TENANT "}:budget:made",
        "rl:{" TENANT "}:req:ab",
        "3", "2", "2",
        "token_bucket", "10", "2", "0", "0",
        "sliding_window", "100", "60", "0", "0",
        "250", "3600", "01",
        "9",
    };
    struct rl_rule rule;
    struct rl_plan plan;
    struct check_request req;
    struct limiter_call call, built;
    char key2[128], s[33];
    const char *w[sizeof(want) / sizeof(want[0])];
    int i, n = (int)(sizeof(want) / sizeof(want[0]));

    rule_42(&rule, &plan, &req);
    rule.limits[0].count = RL_COUNT_TENANT;
    req.has_subject = 1;
    strcpy(req.subject, "alice");
    hash32("alice", s);
    snprintf(key2, sizeof(key2), "rl:{" TENANT "}:42:8:s%s", s);
    for (i = 0; i < n; i++)
        w[i] = i == 2 ? key2 : want[i];
    ck_assert_int_eq(limiter_build(TENANT, &plan, &req, &call), 0);
    ck_assert_int_eq(limiter_budget(&call, &plan, 250), 0);
    ck_assert_int_eq(call.argc, n - 2);
    ck_assert_str_eq(call.argv[0], "4");
    /* Once only; and not after the reply slot. */
    ck_assert_int_eq(limiter_budget(&call, &plan, 250), -1);
    ck_assert_int_eq(limiter_request_key(&call, "ab", "9"), 0);
    ck_assert_int_eq(limiter_resend(&call), 0);
    assert_argv(&call, w, n);
    ck_assert_int_eq(limiter_budget(&call, &plan, 250), -1);

    /* Taken out again, the slot takes the budget with it: the call is as
     * limiter_build made it. */
    ck_assert_int_eq(limiter_build(TENANT, &plan, &req, &built), 0);
    ck_assert_int_eq(limiter_build(TENANT, &plan, &req, &call), 0);
    ck_assert_int_eq(limiter_budget(&call, &plan, 250), 0);
    ck_assert_int_eq(limiter_request_key(&call, "ab", "9"), 0);
    ck_assert_int_eq(limiter_unkey(&call), 0);
    ck_assert_int_eq(call.argc, built.argc);
    for (i = 0; i < call.argc; i++) {
        ck_assert_uint_eq(call.argvlen[i], built.argvlen[i]);
        ck_assert_int_eq(memcmp(call.argv[i], built.argv[i],
            built.argvlen[i]), 0);
    }
    ck_assert_int_eq(limiter_unkey(&call), -1);
    /* Sent again, it keeps both. */
    ck_assert_int_eq(limiter_build(TENANT, &plan, &req, &call), 0);
    ck_assert_int_eq(limiter_budget(&call, &plan, 250), 0);
    ck_assert_int_eq(limiter_request_key(&call, "ab", "9"), 0);
    ck_assert_int_eq(limiter_resend(&call), 0);
    ck_assert_int_eq(limiter_unkey(&call), -1);
    ck_assert_int_eq(call.argc, n);
}
END_TEST

/* No budget (0), or no counter named after what callers send: the call is
 * left as it is. */
START_TEST(test_budget_none)
{
    struct rl_rule rule;
    struct rl_plan plan;
    struct check_request req;
    struct limiter_call call;

    rule_42(&rule, &plan, &req);
    ck_assert_int_eq(limiter_build(TENANT, &plan, &req, &call), 0);
    ck_assert_int_eq(limiter_budget(&call, &plan, 0), 0);
    ck_assert_int_eq(call.argc, 16);
    ck_assert_str_eq(call.argv[0], "2");
    rule.limits[0].count = RL_COUNT_TENANT;
    rule.limits[1].count = RL_COUNT_TENANT;
    ck_assert_int_eq(limiter_budget(&call, &plan, 100), 0);
    ck_assert_int_eq(call.argc, 16);
    /* A route counted per route is named after what callers send. */
    rule.per_route = 1;
    ck_assert_int_eq(limiter_build(TENANT, &plan, &req, &call), 0);
    ck_assert_int_eq(limiter_budget(&call, &plan, 100), 0);
    ck_assert_int_eq(call.argc, 21);
    ck_assert_str_eq(call.argv[call.argc - 1], "11");
}
END_TEST

/* What each limit counts: the subject (else who asks), who asks, or the
 * tenant as a whole. */
START_TEST(test_count_scopes)
{
    struct limiter_call call;
    struct rl_rule rule;
    struct rl_plan plan;
    struct check_request req;
    char s[33], k[33], want[96];

    fixture_rule_init(&rule, 1, "*", 0);
    rule.nlimits = 3;
    fixture_limit_sw(&rule.limits[0], 10, "per-subject", 5, 1);
    fixture_limit_sw(&rule.limits[1], 11, "per-key", 5, 1);
    rule.limits[1].count = RL_COUNT_KEY;
    fixture_limit_sw(&rule.limits[2], 12, "tenant", 5, 1);
    rule.limits[2].count = RL_COUNT_TENANT;
    fixture_plan_of(&plan, &rule);
    hash32("alice", s);
    hash32("key:42", k);

    request_set(&req, "/", "alice", 1, 0);
    snprintf(req.identity, sizeof(req.identity), "key:42");
    ck_assert_int_eq(limiter_build("t1", &plan, &req, &call), 0);
    snprintf(want, sizeof(want), "rl:{t1}:1:10:s%s", s);
    ck_assert_str_eq(call.argv[1], want);
    snprintf(want, sizeof(want), "rl:{t1}:1:11:s%s", k);
    ck_assert_str_eq(call.argv[2], want);
    ck_assert_str_eq(call.argv[3], "rl:{t1}:1:12");

    /* Without a subject, a subject limit counts who asks. */
    request_set(&req, "/", NULL, 1, 0);
    snprintf(req.identity, sizeof(req.identity), "key:42");
    ck_assert_int_eq(limiter_build("t1", &plan, &req, &call), 0);
    snprintf(want, sizeof(want), "rl:{t1}:1:10:s%s", k);
    ck_assert_str_eq(call.argv[1], want);
    snprintf(want, sizeof(want), "rl:{t1}:1:11:s%s", k);
    ck_assert_str_eq(call.argv[2], want);
    ck_assert_str_eq(call.argv[3], "rl:{t1}:1:12");

    /* Nobody known: every limit counts the tenant. */
    request_set(&req, "/", NULL, 1, 0);
    ck_assert_int_eq(limiter_build("t1", &plan, &req, &call), 0);
    ck_assert_str_eq(call.argv[1], "rl:{t1}:1:10");
    ck_assert_str_eq(call.argv[2], "rl:{t1}:1:11");
}
END_TEST

START_TEST(test_request_key_one_limit)
{
    static const char *const want[] = {
        "2", "rl:{t1}:1:9:sabc", "rl:{t1}:req:x-1",
        "1", "1", "1", "sliding_window", "5", "1", "0", "0", "c.d",
    };
    struct limiter_call call;
    struct rl_rule rule;
    struct rl_plan plan;
    struct check_request req;
    char s[33], key[64];

    fixture_rule_init(&rule, 1, "*", 0);
    rule.nlimits = 1;
    fixture_limit_sw(&rule.limits[0], 9, "second", 5, 1);
    fixture_plan_of(&plan, &rule);
    request_set(&req, "/", "subj", 1, 1);
    ck_assert_int_eq(limiter_build("t1", &plan, &req, &call), 0);
    hash32("subj", s);
    snprintf(key, sizeof(key), "rl:{t1}:1:9:s%s", s);
    ck_assert_str_eq(call.argv[1], key);
    ck_assert_int_eq(limiter_request_key(&call, "x-1", "c.d"), 0);
    ck_assert_int_eq(call.argc, (int)(sizeof(want) / sizeof(want[0])));
    ck_assert_str_eq(call.argv[0], "2");
    ck_assert_str_eq(call.argv[1], key);
    ck_assert_str_eq(call.argv[2], want[2]);
    ck_assert_uint_eq(call.argvlen[2], strlen(want[2]));
    ck_assert_str_eq(call.argv[3], "1");
    ck_assert_str_eq(call.argv[10], "0");
    ck_assert_str_eq(call.argv[11], want[11]);
    ck_assert_uint_eq(call.argvlen[11], strlen(want[11]));
}
END_TEST

START_TEST(test_request_key_bad)
{
    struct limiter_call call, before;
    struct rl_rule rule;
    struct rl_plan plan;
    struct check_request req;
    char long_id[LIMITER_ID_MAX + 2];

    fixture_rule_init(&rule, 1, "*", 0);
    rule.nlimits = 1;
    fixture_limit_sw(&rule.limits[0], 9, "second", 5, 1);
    fixture_plan_of(&plan, &rule);
    request_set(&req, "/", NULL, 1, 0);
    ck_assert_int_eq(limiter_build("t1", &plan, &req, &call), 0);
    memcpy(&before, &call, sizeof(call));
    memset(long_id, 'a', sizeof(long_id) - 1);
    long_id[sizeof(long_id) - 1] = '\0';
    ck_assert_int_eq(limiter_request_key(&call, "", "1"), -1);
    ck_assert_int_eq(limiter_request_key(&call, long_id, "1"), -1);
    ck_assert_int_eq(limiter_request_key(&call, "a b", "1"), -1);
    ck_assert_int_eq(limiter_request_key(&call, "a:b", "1"), -1);
    ck_assert_int_eq(limiter_request_key(&call, "a}b", "1"), -1);
    ck_assert_int_eq(limiter_request_key(&call, "s", ""), -1);
    ck_assert_int_eq(limiter_request_key(&call, "s", long_id), -1);
    ck_assert_int_eq(limiter_request_key(&call, "s", "1 2"), -1);
    /* Nothing changed by a refusal. */
    ck_assert_int_eq(call.argc, before.argc);
    ck_assert_int_eq(memcmp(call.argv, before.argv, sizeof(call.argv)), 0);
    ck_assert_int_eq(memcmp(call.store, before.store, sizeof(call.store)),
        0);
    /* Not a call of limiter_build's. */
    call.argc = 0;
    ck_assert_int_eq(limiter_request_key(&call, "s", "id"), -1);
}
END_TEST

/*
 * The refill rate must be what lua/check.lua parses as a "decimal": digits,
 * optionally a '.' and more digits, at most 15 characters, no exponent.
 */
static int
lua_decimal(const char *s)
{
    size_t i = 0, n = strlen(s);

    if (n == 0 || n > 15)
        return 0;
    while (s[i] >= '0' && s[i] <= '9')
        i++;
    if (s[i] == '.') {
        i++;
        while (s[i] >= '0' && s[i] <= '9')
            i++;
    }
    return i == n && strcmp(s, ".") != 0;
}

static const struct {
    double rate;
    const char *want;           /* NULL: only check it parses back closely */
} rates[] = {
    { 2.0, "2" },
    { 0.5, "0.5" },
    { 0.1, "0.1" },
    { 0.2, "0.2" },
    { 1.1, "1.1" },
    { 1.25, "1.25" },
    { 1000.0, "1000" },
    { 0.000001, "0.000001" },
    { 12345678.123456, "12345678.123456" },
    { 100000000.0, "100000000" },
    { 1.0 / 3.0, NULL },
    { 2.0 / 3.0, NULL },
    { 1e-5, NULL },
    { 7.000000001, NULL },
};

START_TEST(test_build_refill_rate)
{
    struct rl_rule rule;
    struct rl_plan plan;
    struct check_request req;
    struct limiter_call call;
    const char *arg;
    double back;

    fixture_rule_init(&rule, 1, "*", 0);
    rule.nlimits = 1;
    fixture_limit_tb(&rule.limits[0], 1, "a", 10, rates[_i].rate);
    fixture_plan_of(&plan, &rule);
    request_set(&req, "/a", NULL, 1, 0);
    ck_assert_int_eq(limiter_build("t", &plan, &req, &call), 0);
    ck_assert_int_eq(call.argc, 10);
    arg = call.argv[7];
    ck_assert_msg(lua_decimal(arg), "rate %.17g is sent as \"%s\", which "
        "lua/check.lua refuses", rates[_i].rate, arg);
    back = strtod(arg, NULL);
    if (rates[_i].want != NULL) {
        ck_assert_str_eq(arg, rates[_i].want);
        /* Exactly the double the rule holds. */
        ck_assert_msg(back == rates[_i].rate, "\"%s\" parses to %.17g, not "
            "%.17g", arg, back, rates[_i].rate);
    } else {
        ck_assert_msg(fabs(back - rates[_i].rate) <= 5e-7, "\"%s\" is too "
            "far from %.17g", arg, rates[_i].rate);
    }
}
END_TEST

START_TEST(test_build_bad_rate)
{
    static const double bad[] = { 0.0, -1.0, 1e-9, NAN, INFINITY, 1e300 };
    struct rl_rule rule;
    struct rl_plan plan;
    struct check_request req;
    struct limiter_call call;
    size_t i;

    fixture_rule_init(&rule, 1, "*", 0);
    rule.nlimits = 1;
    fixture_plan_of(&plan, &rule);
    request_set(&req, "/a", NULL, 1, 0);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fixture_limit_tb(&rule.limits[0], 1, "a", 10, bad[i]);
        ck_assert_msg(limiter_build("t", &plan, &req, &call) == -1,
            "rate %g was accepted as \"%s\"", bad[i],
            call.argc > 7 ? call.argv[5] : "");
    }
}
END_TEST

START_TEST(test_build_empty_plan)
{
    struct rl_plan plan;
    struct check_request req;
    struct limiter_call call;

    memset(&plan, 0, sizeof(plan));
    request_set(&req, "/a", NULL, 1, 0);
    ck_assert_int_eq(limiter_build("t", &plan, &req, &call), -1);
    plan.n = -1;
    ck_assert_int_eq(limiter_build("t", &plan, &req, &call), -1);
    plan.n = RL_MAX_LIMITS + 1;
    ck_assert_int_eq(limiter_build("t", &plan, &req, &call), -1);
}
END_TEST

START_TEST(test_build_unknown_algorithm)
{
    struct rl_rule rule;
    struct rl_plan plan;
    struct check_request req;
    struct limiter_call call;

    fixture_rule_init(&rule, 1, "*", 0);
    rule.nlimits = 2;
    fixture_limit_tb(&rule.limits[0], 1, "a", 10, 1);
    fixture_limit_sw(&rule.limits[1], 2, "b", 10, 1);
    fixture_plan_of(&plan, &rule);
    request_set(&req, "/a", NULL, 1, 0);
    ck_assert_int_eq(limiter_build("t", &plan, &req, &call), 0);
    rule.limits[1].algorithm = 0;
    ck_assert_int_eq(limiter_build("t", &plan, &req, &call), -1);
    rule.limits[1].algorithm = RL_ALGO_CONCURRENCY + 1;
    ck_assert_int_eq(limiter_build("t", &plan, &req, &call), -1);
    rule.limits[1].algorithm = RL_ALGO_SLIDING_WINDOW;
    rule.limits[0].algorithm = -1;
    ck_assert_int_eq(limiter_build("t", &plan, &req, &call), -1);
}
END_TEST

START_TEST(test_decode_one)
{
    static const long long v[] = { 1, 1700000000123LL, 1, 10, 9, 500, 0 };
    struct rl_decision d;

    ck_assert_int_eq(limiter_decode(v, 7, 1, &d), 0);
    ck_assert_int_eq(d.allowed, 1);
    ck_assert_int_eq(d.now_ms, 1700000000123LL);
    ck_assert_int_eq(d.nlimits, 1);
    ck_assert_int_eq(d.st[0].allowed, 1);
    ck_assert_int_eq(d.st[0].shadow, 0);
    ck_assert_int_eq(d.st[0].limit, 10);
    ck_assert_int_eq(d.st[0].remaining, 9);
    ck_assert_int_eq(d.st[0].reset_ms, 500);
    ck_assert_int_eq(d.st[0].retry_after_ms, 0);
}
END_TEST

START_TEST(test_decode_two)
{
    static const long long v[] = {
        0, 1700000000999LL,
        1, 10, 9, 500, 0,
        0, 100, 0, 60000, 1500,
    };
    struct rl_decision d;

    ck_assert_int_eq(limiter_decode(v, 12, 2, &d), 0);
    ck_assert_int_eq(d.allowed, 0);
    ck_assert_int_eq(d.now_ms, 1700000000999LL);
    ck_assert_int_eq(d.nlimits, 2);
    ck_assert_int_eq(d.st[0].allowed, 1);
    ck_assert_int_eq(d.st[0].limit, 10);
    ck_assert_int_eq(d.st[0].remaining, 9);
    ck_assert_int_eq(d.st[1].allowed, 0);
    ck_assert_int_eq(d.st[1].limit, 100);
    ck_assert_int_eq(d.st[1].remaining, 0);
    ck_assert_int_eq(d.st[1].reset_ms, 60000);
    ck_assert_int_eq(d.st[1].retry_after_ms, 1500);
}
END_TEST

/* The counter budget's refusal: -1, now_ms and the wait, for any number of
 * limits; nothing else of that length. */
START_TEST(test_decode_over_budget)
{
    static const long long v[] = { -1, 1700000000123LL, 3581000 };
    static const long long negative[] = { -1, 1700000000123LL, -1 };
    static const long long zero[] = { 0, 1700000000123LL, 3581000 };
    struct rl_decision d;

    ck_assert_int_eq(limiter_decode(v, 3, 1, &d), 0);
    ck_assert_int_eq(d.over_budget, 1);
    ck_assert_int_eq(d.now_ms, 1700000000123LL);
    ck_assert_int_eq(d.budget_retry_ms, 3581000);
    ck_assert_int_eq(d.allowed, 0);
    ck_assert_int_eq(limiter_decode(v, 3, RL_MAX_LIMITS, &d), 0);
    ck_assert_int_eq(d.over_budget, 1);
    ck_assert_int_eq(limiter_decode(negative, 3, 1, &d), -1);
    ck_assert_int_eq(limiter_decode(zero, 3, 1, &d), -1);
    ck_assert_int_eq(limiter_decode(v, 2, 1, &d), -1);
    ck_assert_int_eq(limiter_decode(v, 3, 0, &d), -1);
}
END_TEST

START_TEST(test_decode_never)
{
    static const long long v[] = { 0, 1, 0, 5, 0, 2000, -1 };
    struct rl_decision d;

    ck_assert_int_eq(limiter_decode(v, 7, 1, &d), 0);
    ck_assert_int_eq(d.st[0].retry_after_ms, -1);
}
END_TEST

START_TEST(test_decode_wrong_length)
{
    static const long long v[] = {
        1, 1, 1, 10, 9, 500, 0, 1, 10, 9, 500, 0, 0,
    };
    struct rl_decision d;

    ck_assert_int_eq(limiter_decode(v, 6, 1, &d), -1);
    /* One number more is the reply of a call with a lease: the expired
     * leases it dropped, last. */
    ck_assert_int_eq(limiter_decode(v, 8, 1, &d), 0);
    ck_assert_int_eq(d.lease_dropped, 1);
    ck_assert_int_eq(limiter_decode(v, 9, 1, &d), -1);
    ck_assert_int_eq(limiter_decode(v, 0, 1, &d), -1);
    ck_assert_int_eq(limiter_decode(v, 7, 2, &d), -1);
    ck_assert_int_eq(limiter_decode(v, 11, 2, &d), -1);
    ck_assert_int_eq(limiter_decode(v, 14, 2, &d), -1);
    ck_assert_int_eq(limiter_decode(v, 2, 0, &d), -1);
    ck_assert_int_eq(limiter_decode(v, 12, 2, &d), 0);
}
END_TEST

START_TEST(test_decode_inconsistent)
{
    static const long long denied_by_nobody[] = {
        0, 1, 1, 10, 9, 500, 0, 1, 10, 9, 500, 0,
    };
    static const long long bad_flag[] = { 2, 1, 1, 10, 9, 500, 0 };
    static const long long bad_part_flag[] = { 1, 1, 2, 10, 9, 500, 0 };
    static const long long minus_flag[] = { -1, 1, 1, 10, 9, 500, 0 };
    struct rl_decision d;

    /* A denial must come from some limit. */
    ck_assert_int_eq(limiter_decode(denied_by_nobody, 12, 2, &d), -1);
    ck_assert_int_eq(limiter_decode(bad_flag, 7, 1, &d), -1);
    ck_assert_int_eq(limiter_decode(bad_part_flag, 7, 1, &d), -1);
    ck_assert_int_eq(limiter_decode(minus_flag, 7, 1, &d), -1);
}
END_TEST

START_TEST(test_decode_shadow_denial_allowed)
{
    /* Allowed overall although limit 2 denies: only a shadow limit can do
     * that, and the plan (not the reply) says which limits are shadow. */
    static const long long v[] = {
        1, 1, 1, 10, 9, 500, 0, 0, 10, 0, 500, 100,
    };
    struct rl_decision d;

    ck_assert_int_eq(limiter_decode(v, 12, 2, &d), 0);
    ck_assert_int_eq(d.allowed, 1);
    ck_assert_int_eq(d.st[1].allowed, 0);
    ck_assert_int_eq(d.st[0].shadow, 0);
    ck_assert_int_eq(d.st[1].shadow, 0);
}
END_TEST

START_TEST(test_decode_negative)
{
    long long v[7];
    struct rl_decision d;
    int field;

    /* limit, remaining, reset_ms must be >= 0; retry_after_ms >= -1. */
    for (field = 3; field <= 6; field++) {
        long long good[7] = { 0, 1, 0, 10, 0, 500, 100 };

        memcpy(v, good, sizeof(v));
        ck_assert_int_eq(limiter_decode(v, 7, 1, &d), 0);
        v[field] = field == 6 ? -2 : -1;
        ck_assert_msg(limiter_decode(v, 7, 1, &d) == -1,
            "negative field %d accepted", field);
    }
}
END_TEST

START_TEST(test_apply_shadow)
{
    static const long long v[] = {
        1, 1, 1, 10, 9, 500, 0, 0, 10, 0, 500, 100,
    };
    struct rl_rule enforced, shadow;
    struct rl_plan plan;
    struct rl_decision d;

    fixture_rule_init(&enforced, 1, "*", 0);
    enforced.nlimits = 1;
    fixture_limit_tb(&enforced.limits[0], 1, "a", 10, 1);
    fixture_rule_init(&shadow, 2, "*", 0);
    shadow.shadow = 1;
    shadow.nlimits = 1;
    fixture_limit_tb(&shadow.limits[0], 2, "b", 10, 1);
    memset(&plan, 0, sizeof(plan));
    fixture_plan_add(&plan, &enforced);
    fixture_plan_add(&plan, &shadow);

    ck_assert_int_eq(limiter_decode(v, 12, 2, &d), 0);
    ck_assert_int_eq(limiter_apply_shadow(&plan, &d), 1);
    ck_assert_int_eq(d.st[0].shadow, 0);
    ck_assert_int_eq(d.st[1].shadow, 1);

    /* A shadow limit that allows is marked but reports no denial. */
    d.st[1].allowed = 1;
    ck_assert_int_eq(limiter_apply_shadow(&plan, &d), 0);
    ck_assert_int_eq(d.st[1].shadow, 1);

    /* An enforced denial is not a shadow denial. */
    d.allowed = 0;
    d.st[0].allowed = 0;
    ck_assert_int_eq(limiter_apply_shadow(&plan, &d), 0);
}
END_TEST

/* A state of a limit of 100 that resets in 1 s. */
static void
state(struct rl_limit_state *st, int allowed, long long remaining,
    long long retry_after_ms)
{
    fixture_state(st, allowed, 100, remaining, 1000, retry_after_ms);
}

/* limiter_primary over the states in every rotation: the index it picks
 * must follow the state the test wants. */
static void
assert_primary(const struct rl_limit_state *st, int n, int want)
{
    struct rl_decision d;
    int shift, i;

    for (shift = 0; shift < n; shift++) {
        fixture_decision(&d, 0, 0, n);
        for (i = 0; i < n; i++)
            d.st[(i + shift) % n] = st[i];
        d.allowed = 1;
        for (i = 0; i < n; i++)
            d.allowed = d.allowed && (st[i].allowed || st[i].shadow);
        ck_assert_msg(limiter_primary(&d) == (want + shift) % n,
            "rotation %d: picked %d, want %d", shift, limiter_primary(&d),
            (want + shift) % n);
    }
}

START_TEST(test_primary_single)
{
    struct rl_limit_state st[1];

    state(&st[0], 1, 5, 0);
    assert_primary(st, 1, 0);
    state(&st[0], 0, 0, 100);
    assert_primary(st, 1, 0);
}
END_TEST

START_TEST(test_primary_denying_beats_allowing)
{
    struct rl_limit_state st[3];

    state(&st[0], 1, 0, 0);
    state(&st[1], 0, 50, 100);
    state(&st[2], 1, 1, 0);
    assert_primary(st, 3, 1);
}
END_TEST

START_TEST(test_primary_least_remaining)
{
    struct rl_limit_state st[3];

    state(&st[0], 1, 5, 0);
    state(&st[1], 1, 2, 0);
    state(&st[2], 1, 7, 0);
    assert_primary(st, 3, 1);
}
END_TEST

START_TEST(test_primary_longest_retry)
{
    struct rl_limit_state st[3];

    state(&st[0], 0, 0, 100);
    state(&st[1], 0, 0, 3000);
    state(&st[2], 0, 0, 200);
    assert_primary(st, 3, 1);

    /* -1, "never at this cost", beats any wait. */
    state(&st[0], 0, 0, 100);
    state(&st[1], 0, 0, -1);
    state(&st[2], 0, 0, 5000000);
    assert_primary(st, 3, 1);

    /* Allowing limits do not interfere. */
    state(&st[0], 1, 0, 0);
    state(&st[1], 0, 0, 10);
    state(&st[2], 0, 0, 20);
    assert_primary(st, 3, 2);
}
END_TEST

START_TEST(test_primary_enforced_before_shadow)
{
    struct rl_limit_state st[3];

    /* A denying shadow limit does not describe the answer... */
    state(&st[0], 1, 50, 0);
    state(&st[1], 0, 0, 9000);
    st[1].shadow = 1;
    state(&st[2], 1, 40, 0);
    assert_primary(st, 3, 2);

    /* ...even against an enforced one that denies for less long. */
    state(&st[0], 0, 0, 10);
    state(&st[1], 0, 0, -1);
    st[1].shadow = 1;
    state(&st[2], 1, 40, 0);
    assert_primary(st, 3, 0);

    /* With only shadow limits, the usual order applies among them. */
    state(&st[0], 1, 5, 0);
    st[0].shadow = 1;
    state(&st[1], 0, 0, 100);
    st[1].shadow = 1;
    assert_primary(st, 2, 1);
}
END_TEST

/* ---------------------------------------------------------------- log */

static struct log_limit ll;

static void
log_limit_reset(void)
{
    memset(&ll, 0, sizeof(ll));
}

/* One event; returns 1 when it is written (with *rep set), 0 when held. */
static int
log_event(const char *file, int line, int64_t now_ms, unsigned long *rep)
{
    *rep = 12345;
    return log_limit_event(&ll, file, line, now_ms, rep) >= 0;
}

START_TEST(test_log_one_line_per_second)
{
    unsigned long rep;
    int64_t t;

    log_limit_reset();
    ck_assert_int_eq(log_event("store_redis.c", 170, 5000, &rep), 1);
    ck_assert_uint_eq(rep, 0);
    /* 74,622 more in the next 999 ms: all held. */
    for (t = 5000; t < 6000; t++)
        ck_assert_int_eq(log_event("store_redis.c", 170, t, &rep), 0);
    /* The next second's first one is written, with the count. */
    ck_assert_int_eq(log_event("store_redis.c", 170, 6000, &rep), 1);
    ck_assert_uint_eq(rep, 1000);
    ck_assert_int_eq(log_event("store_redis.c", 170, 6999, &rep), 0);
    ck_assert_int_eq(log_event("store_redis.c", 170, 8000, &rep), 1);
    ck_assert_uint_eq(rep, 1);
    /* Quiet for a while: written, nothing held in between. */
    ck_assert_int_eq(log_event("store_redis.c", 170, 9000, &rep), 1);
    ck_assert_uint_eq(rep, 0);
}
END_TEST

START_TEST(test_log_sites_are_separate)
{
    char copy[32];
    unsigned long rep;

    log_limit_reset();
    ck_assert_int_eq(log_event("store_redis.c", 170, 0, &rep), 1);
    ck_assert_int_eq(log_event("store_redis.c", 171, 0, &rep), 1);
    ck_assert_int_eq(log_event("store_pg.c", 170, 0, &rep), 1);
    ck_assert_int_eq(log_event("store_redis.c", 170, 1, &rep), 0);
    ck_assert_int_eq(log_event("store_pg.c", 170, 1, &rep), 0);
    /* A site is its file name, not the pointer to it. */
    strcpy(copy, "store_redis.c");
    ck_assert_int_eq(log_event(copy, 171, 2, &rep), 0);
    ck_assert_int_eq(log_event("store_redis.c", 171, 1000, &rep), 1);
    ck_assert_uint_eq(rep, 1);
}
END_TEST

START_TEST(test_log_overdue)
{
    unsigned long rep;
    int i;

    log_limit_reset();
    ck_assert_int_eq(log_limit_overdue(&ll, 0, &rep), -1);
    ck_assert_int_eq(log_event("a.c", 1, 100, &rep), 1);
    ck_assert_int_eq(log_event("b.c", 2, 100, &rep), 1);
    /* Nothing held: nothing overdue, however long after. */
    ck_assert_int_eq(log_limit_overdue(&ll, 100000, &rep), -1);
    for (i = 0; i < 3; i++)
        ck_assert_int_eq(log_event("a.c", 1, 200 + i, &rep), 0);
    /* The site's second is not over yet. */
    ck_assert_int_eq(log_limit_overdue(&ll, 1099, &rep), -1);
    i = log_limit_overdue(&ll, 1100, &rep);
    ck_assert_int_ge(i, 0);
    ck_assert_str_eq(ll.site[i].file, "a.c");
    ck_assert_int_eq(ll.site[i].line, 1);
    ck_assert_uint_eq(rep, 3);
    /* Reported once; the next event is written with nothing to report. */
    ck_assert_int_eq(log_limit_overdue(&ll, 1100, &rep), -1);
    ck_assert_int_eq(log_event("a.c", 1, 1100, &rep), 1);
    ck_assert_uint_eq(rep, 0);
}
END_TEST

START_TEST(test_log_full_table)
{
    unsigned long rep;
    int i;

    log_limit_reset();
    for (i = 0; i < LOG_LIMIT_SITES; i++)
        ck_assert_int_eq(log_event("x.c", i, 1000 + i, &rep), 1);
    /* One more site takes the slot of the one written longest ago... */
    ck_assert_int_eq(log_event("y.c", 1, 2000, &rep), 1);
    ck_assert_int_eq(log_event("y.c", 1, 2001, &rep), 0);
    /* ...which is new again when it comes back; the others are known. */
    ck_assert_int_eq(log_event("x.c", 0, 2002, &rep), 1);
    ck_assert_int_eq(log_event("x.c", LOG_LIMIT_SITES - 1, 2003, &rep), 0);
}
END_TEST

Suite *
limiter_suite(void)
{
    Suite *s = suite_create("limiter");
    TCase *tc;

    tc = tcase_create("build");
    tcase_add_test(tc, test_build_layout);
    tcase_add_test(tc, test_build_peek_and_one_limit);
    tcase_add_test(tc, test_peek_layout);
    tcase_add_test(tc, test_build_gcra_fixed_window);
    tcase_add_test(tc, test_build_calendars);
    tcase_add_test(tc, test_build_shadow_flag);
    tcase_add_test(tc, test_build_per_route_and_subject);
    tcase_add_test(tc, test_build_per_route_is_per_rule);
    tcase_add_test(tc, test_build_has_subject_governs);
    tcase_add_test(tc, test_build_keys_are_bounded);
    tcase_add_test(tc, test_build_max_limits);
    tcase_add_loop_test(tc, test_build_refill_rate, 0,
        (int)(sizeof(rates) / sizeof(rates[0])));
    tcase_add_test(tc, test_build_bad_rate);
    tcase_add_test(tc, test_build_empty_plan);
    tcase_add_test(tc, test_build_unknown_algorithm);
    tcase_add_test(tc, test_request_key_layout);
    tcase_add_test(tc, test_request_key_one_limit);
    tcase_add_test(tc, test_request_key_bad);
    tcase_add_test(tc, test_resend);
    tcase_add_test(tc, test_resend_peek);
    tcase_add_test(tc, test_unkey);
    tcase_add_test(tc, test_count_scopes);
    tcase_add_test(tc, test_budget_layout);
    tcase_add_test(tc, test_budget_none);
    suite_add_tcase(s, tc);

    tc = tcase_create("decode");
    tcase_add_test(tc, test_decode_one);
    tcase_add_test(tc, test_decode_two);
    tcase_add_test(tc, test_decode_never);
    tcase_add_test(tc, test_decode_over_budget);
    tcase_add_test(tc, test_decode_wrong_length);
    tcase_add_test(tc, test_decode_inconsistent);
    tcase_add_test(tc, test_decode_shadow_denial_allowed);
    tcase_add_test(tc, test_decode_negative);
    tcase_add_test(tc, test_apply_shadow);
    suite_add_tcase(s, tc);

    tc = tcase_create("primary");
    tcase_add_test(tc, test_primary_single);
    tcase_add_test(tc, test_primary_denying_beats_allowing);
    tcase_add_test(tc, test_primary_least_remaining);
    tcase_add_test(tc, test_primary_longest_retry);
    tcase_add_test(tc, test_primary_enforced_before_shadow);
    suite_add_tcase(s, tc);

    tc = tcase_create("log limit");
    tcase_add_test(tc, test_log_one_line_per_second);
    tcase_add_test(tc, test_log_sites_are_separate);
    tcase_add_test(tc, test_log_overdue);
    tcase_add_test(tc, test_log_full_table);
    suite_add_tcase(s, tc);
    return s;
}
