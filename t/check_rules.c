/*
 * check_rules.c -- tests of src/rules.c: which rule applies to a route
 * (exact, then the longest prefix, then "*"; ties by priority, then id,
 * whatever the order of the array), the plan of limits a check decides
 * ("always" rules included, policy names unique, never more than
 * RL_MAX_LIMITS and never a part of the limits), the search for routes
 * whose plan a change of the rules would make overflow, and the names of
 * algorithms and calendars.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>              /* t/check.h: the suites, then Check */

#include "ratelimit.h"
#include "fixtures.h"

/* The id of the matching rule, or -1. */
static long long
match_id(const struct rl_rule *rules, int n, const char *route)
{
    int i = rules_match(rules, n, route);

    ck_assert_int_ge(i, -1);
    ck_assert_int_lt(i, n);
    return i == -1 ? -1 : rules[i].id;
}

/* rules reversed into out. */
static void
reverse(const struct rl_rule *rules, int n, struct rl_rule *out)
{
    int i;

    for (i = 0; i < n; i++)
        out[i] = rules[n - 1 - i];
}

/* The six orders of three rules. */
static const int orders[6][3] = {
    { 0, 1, 2 }, { 0, 2, 1 }, { 1, 0, 2 }, { 1, 2, 0 }, { 2, 0, 1 }, { 2, 1, 0 },
};

START_TEST(test_exact_prefix_star)
{
    struct rl_rule base[3], r[3];
    int i;

    fixture_rule_init(&base[0], 1, "*", 0);
    fixture_rule_init(&base[1], 2, "/api*", 0);
    fixture_rule_init(&base[2], 3, "/api/x", 0);
    for (i = 0; i < 3; i++)
        r[i] = base[orders[_i][i]];
    ck_assert_int_eq(match_id(r, 3, "/api/x"), 3);
    ck_assert_int_eq(match_id(r, 3, "/api/y"), 2);
    ck_assert_int_eq(match_id(r, 3, "/api"), 2);
    ck_assert_int_eq(match_id(r, 3, "/api/x/1"), 2);
    ck_assert_int_eq(match_id(r, 3, "/other"), 1);
}
END_TEST

START_TEST(test_longer_prefix_wins)
{
    struct rl_rule base[3], r[3];
    int i;

    fixture_rule_init(&base[0], 1, "/a*", 0);
    fixture_rule_init(&base[1], 2, "/api*", 0);
    fixture_rule_init(&base[2], 3, "/api/v1/*", 0);
    for (i = 0; i < 3; i++)
        r[i] = base[orders[_i][i]];
    ck_assert_int_eq(match_id(r, 3, "/api/v1/users"), 3);
    ck_assert_int_eq(match_id(r, 3, "/api/v2/users"), 2);
    ck_assert_int_eq(match_id(r, 3, "/apple"), 1);
    ck_assert_int_eq(match_id(r, 3, "/b"), -1);
}
END_TEST

START_TEST(test_priority_does_not_beat_specificity)
{
    struct rl_rule r[3], rev[3];

    fixture_rule_init(&r[0], 1, "*", 100);
    fixture_rule_init(&r[1], 2, "/a*", 50);
    fixture_rule_init(&r[2], 3, "/a/b", 0);
    reverse(r, 3, rev);
    ck_assert_int_eq(match_id(r, 3, "/a/b"), 3);
    ck_assert_int_eq(match_id(rev, 3, "/a/b"), 3);
    ck_assert_int_eq(match_id(r, 3, "/a/c"), 2);
    ck_assert_int_eq(match_id(rev, 3, "/a/c"), 2);
}
END_TEST

START_TEST(test_tie_priority)
{
    struct rl_rule r[2], rev[2];

    fixture_rule_init(&r[0], 1, "/a*", 1);
    fixture_rule_init(&r[1], 2, "/a*", 5);
    reverse(r, 2, rev);
    ck_assert_int_eq(match_id(r, 2, "/abc"), 2);
    ck_assert_int_eq(match_id(rev, 2, "/abc"), 2);

    /* Priority beats the lower id. */
    fixture_rule_init(&r[0], 1, "/x", 1);
    fixture_rule_init(&r[1], 9, "/x", 2);
    reverse(r, 2, rev);
    ck_assert_int_eq(match_id(r, 2, "/x"), 9);
    ck_assert_int_eq(match_id(rev, 2, "/x"), 9);

    /* Negative priorities order too. */
    fixture_rule_init(&r[0], 1, "*", -3);
    fixture_rule_init(&r[1], 2, "*", -1);
    reverse(r, 2, rev);
    ck_assert_int_eq(match_id(r, 2, "/x"), 2);
    ck_assert_int_eq(match_id(rev, 2, "/x"), 2);
}
END_TEST

START_TEST(test_tie_lower_id)
{
    struct rl_rule base[3], r[3];
    int i;

    fixture_rule_init(&base[0], 7, "/a*", 4);
    fixture_rule_init(&base[1], 3, "/a*", 4);
    fixture_rule_init(&base[2], 5, "/a*", 4);
    for (i = 0; i < 3; i++)
        r[i] = base[orders[_i][i]];
    ck_assert_int_eq(match_id(r, 3, "/a"), 3);

    fixture_rule_init(&base[0], 7, "*", 0);
    fixture_rule_init(&base[1], 3000000000LL, "*", 0);
    fixture_rule_init(&base[2], 5, "*", 0);
    for (i = 0; i < 3; i++)
        r[i] = base[orders[_i][i]];
    ck_assert_int_eq(match_id(r, 3, "/a"), 5);
}
END_TEST

START_TEST(test_no_match)
{
    struct rl_rule r[3];

    fixture_rule_init(&r[0], 1, "/a", 0);
    fixture_rule_init(&r[1], 2, "/b*", 0);
    fixture_rule_init(&r[2], 3, "/c/d", 0);
    ck_assert_int_eq(rules_match(r, 3, "/c"), -1);
    ck_assert_int_eq(rules_match(r, 3, "/ab"), -1);
    ck_assert_int_eq(rules_match(r, 3, "/c/d/e"), -1);
    ck_assert_int_eq(rules_match(r, 3, "/A"), -1);
    ck_assert_int_eq(rules_match(r, 3, "b"), -1);
}
END_TEST

START_TEST(test_star_alone)
{
    struct rl_rule r[1];

    fixture_rule_init(&r[0], 1, "*", 0);
    ck_assert_int_eq(rules_match(r, 1, "/anything/at/all"), 0);
    ck_assert_int_eq(rules_match(r, 1, "/"), 0);
    ck_assert_int_eq(rules_match(r, 1, "x"), 0);
    ck_assert_int_eq(rules_match(r, 1, "*"), 0);
}
END_TEST

START_TEST(test_prefix_pattern)
{
    struct rl_rule r[1];

    fixture_rule_init(&r[0], 1, "/a*", 0);
    ck_assert_int_eq(rules_match(r, 1, "/a"), 0);
    ck_assert_int_eq(rules_match(r, 1, "/abc"), 0);
    ck_assert_int_eq(rules_match(r, 1, "/a/b/c"), 0);
    ck_assert_int_eq(rules_match(r, 1, "/b"), -1);
    ck_assert_int_eq(rules_match(r, 1, "/"), -1);
    ck_assert_int_eq(rules_match(r, 1, "/A"), -1);
}
END_TEST

START_TEST(test_star_inside_is_literal)
{
    struct rl_rule r[1];

    /* Only a trailing '*' is a wildcard. */
    fixture_rule_init(&r[0], 1, "/a*/b", 0);
    ck_assert_int_eq(rules_match(r, 1, "/a*/b"), 0);
    ck_assert_int_eq(rules_match(r, 1, "/ax/b"), -1);
}
END_TEST

START_TEST(test_exact_beats_longest_prefix)
{
    char route[RL_ROUTE_MAX + 1], prefix[RL_ROUTE_MAX + 1];
    struct rl_rule r[2], rev[2];

    /* The longest prefix a pattern can hold still loses to an exact
     * match. */
    memset(route, 'r', RL_ROUTE_MAX);
    route[0] = '/';
    route[RL_ROUTE_MAX] = '\0';
    memcpy(prefix, route, RL_ROUTE_MAX - 1);
    prefix[RL_ROUTE_MAX - 1] = '*';
    prefix[RL_ROUTE_MAX] = '\0';
    fixture_rule_init(&r[0], 1, route, 0);
    fixture_rule_init(&r[1], 2, prefix, 0);
    reverse(r, 2, rev);
    ck_assert_int_eq(match_id(r, 2, route), 1);
    ck_assert_int_eq(match_id(rev, 2, route), 1);
}
END_TEST

START_TEST(test_empty_rule_list)
{
    struct rl_rule r[1];

    fixture_rule_init(&r[0], 1, "*", 0);
    ck_assert_int_eq(rules_match(r, 0, "/a"), -1);
    ck_assert_int_eq(rules_match(NULL, 0, "/a"), -1);
}
END_TEST

START_TEST(test_algorithm_names)
{
    static const struct {
        int algorithm;
        const char *name;
    } algos[] = {
        { RL_ALGO_TOKEN_BUCKET, "token_bucket" },
        { RL_ALGO_SLIDING_WINDOW, "sliding_window" },
        { RL_ALGO_GCRA, "gcra" },
        { RL_ALGO_FIXED_WINDOW, "fixed_window" },
    };
    size_t i;

    for (i = 0; i < sizeof(algos) / sizeof(algos[0]); i++) {
        ck_assert_str_eq(algo_name(algos[i].algorithm),
            algos[i].name);
        ck_assert_int_eq(algo_parse(algos[i].name),
            algos[i].algorithm);
        ck_assert_int_eq(algo_parse(
            algo_name(algos[i].algorithm)), algos[i].algorithm);
    }
}
END_TEST

START_TEST(test_algorithm_unknown)
{
    ck_assert_str_eq(algo_name(0), "unknown");
    ck_assert_str_eq(algo_name(RL_ALGO_CONCURRENCY + 1),
        "unknown");
    ck_assert_str_eq(algo_name(-1), "unknown");
    ck_assert_int_eq(algo_parse("unknown"), -1);
    ck_assert_int_eq(algo_parse(""), -1);
    ck_assert_int_eq(algo_parse("Token_Bucket"), -1);
    ck_assert_int_eq(algo_parse("token_bucket "), -1);
    ck_assert_int_eq(algo_parse("leaky_bucket"), -1);
}
END_TEST

START_TEST(test_calendar_names)
{
    const struct fixture_calendar *cal = fixture_calendars;
    size_t i;

    for (i = 0; i < sizeof(fixture_calendars) / sizeof(cal[0]); i++) {
        ck_assert_str_eq(algo_calendar_name(cal[i].calendar), cal[i].name);
        ck_assert_int_eq(algo_calendar_parse(cal[i].name), cal[i].calendar);
    }
    ck_assert_str_eq(algo_calendar_name(0), "unknown");
    ck_assert_str_eq(algo_calendar_name(RL_CAL_MONTH + 1), "unknown");
    ck_assert_int_eq(algo_calendar_parse("week"), -1);
    ck_assert_int_eq(algo_calendar_parse("Day"), -1);
    ck_assert_int_eq(algo_calendar_parse(""), -1);
    ck_assert_int_eq(algo_calendar_parse("unknown"), -1);
}
END_TEST

START_TEST(test_plan_most_specific_only)
{
    static const char *const one[] = { "default" };
    static const char *const two[] = { "burst", "minute" };
    struct rl_rule r[2];
    struct rl_plan plan;

    fixture_rule_init(&r[0], 1, "*", 0);
    fixture_rule_limits(&r[0], 1, one, 10);
    fixture_rule_init(&r[1], 2, "/api*", 0);
    fixture_rule_limits(&r[1], 2, two, 20);
    ck_assert_int_eq(rules_plan(r, 2, "/api/x", &plan), 2);
    ck_assert_int_eq(plan.n, 2);
    ck_assert_ptr_eq(plan.rule[0], &r[1]);
    ck_assert_ptr_eq(plan.rule[1], &r[1]);
    ck_assert_ptr_eq(plan.limit[0], &r[1].limits[0]);
    ck_assert_ptr_eq(plan.limit[1], &r[1].limits[1]);
    ck_assert_str_eq(plan.name[0], "burst");
    ck_assert_str_eq(plan.name[1], "minute");

    ck_assert_int_eq(rules_plan(r, 2, "/other", &plan), 1);
    ck_assert_ptr_eq(plan.rule[0], &r[0]);
    ck_assert_str_eq(plan.name[0], "default");
}
END_TEST

START_TEST(test_plan_no_match)
{
    static const char *const one[] = { "default" };
    struct rl_rule r[1];
    struct rl_plan plan;

    fixture_rule_init(&r[0], 1, "/a", 0);
    fixture_rule_limits(&r[0], 1, one, 10);
    plan.n = 5;
    ck_assert_int_eq(rules_plan(r, 1, "/b", &plan), 0);
    ck_assert_int_eq(plan.n, 0);
    ck_assert_int_eq(rules_plan(r, 0, "/a", &plan), 0);
    ck_assert_int_eq(plan.n, 0);
}
END_TEST

START_TEST(test_plan_always_rules)
{
    static const char *const a[] = { "burst" };
    static const char *const b[] = { "daily" };
    static const char *const c[] = { "other" };
    static const char *const d[] = { "fallback" };
    struct rl_rule r[4];
    struct rl_plan plan;
    int i, has_daily = 0, has_burst = 0;

    fixture_rule_init(&r[0], 1, "/api*", 0);
    fixture_rule_limits(&r[0], 1, a, 10);
    fixture_rule_init(&r[1], 2, "*", 0);
    r[1].always = 1;
    fixture_rule_limits(&r[1], 1, b, 20);
    /* An always rule whose pattern does not match adds nothing. */
    fixture_rule_init(&r[2], 3, "/admin*", 0);
    r[2].always = 1;
    fixture_rule_limits(&r[2], 1, c, 30);
    /* A matching rule that is neither the best nor "always" adds nothing. */
    fixture_rule_init(&r[3], 4, "/a*", 0);
    fixture_rule_limits(&r[3], 1, d, 40);

    ck_assert_int_eq(rules_plan(r, 4, "/api/x", &plan), 2);
    for (i = 0; i < plan.n; i++) {
        has_burst |= plan.limit[i] == &r[0].limits[0];
        has_daily |= plan.limit[i] == &r[1].limits[0];
        ck_assert_ptr_eq(plan.limit[i], &plan.rule[i]->limits[0]);
    }
    ck_assert_int_eq(has_burst, 1);
    ck_assert_int_eq(has_daily, 1);
    /* The most specific rule comes first. */
    ck_assert_ptr_eq(plan.rule[0], &r[0]);

    /* The always rule alone, when it is also the best match: once. */
    ck_assert_int_eq(rules_plan(r, 4, "/zzz", &plan), 1);
    ck_assert_ptr_eq(plan.rule[0], &r[1]);
    ck_assert_str_eq(plan.name[0], "daily");
}
END_TEST

/* A rule that never applies: another one with its pattern comes first
 * (higher priority, or equal and a lower id); an "always" rule applies
 * anyway. */
START_TEST(test_shadowed_by)
{
    struct rl_rule r[6];

    fixture_rule_init(&r[0], 10, "/api/*", 0);
    fixture_rule_init(&r[1], 11, "/api/*", 0);      /* after 10 */
    fixture_rule_init(&r[2], 12, "/api/*", 5);      /* first of all */
    fixture_rule_init(&r[3], 13, "/api/x*", 0);     /* another pattern */
    fixture_rule_init(&r[4], 14, "*", 0);
    r[4].always = 1;
    fixture_rule_init(&r[5], 15, "*", 0);           /* after 14 */

    ck_assert_int_eq(rules_shadowed_by(r, 6, 0), 2);
    ck_assert_int_eq(rules_shadowed_by(r, 6, 1), 2);
    ck_assert_int_eq(rules_shadowed_by(r, 6, 2), -1);
    ck_assert_int_eq(rules_shadowed_by(r, 6, 3), -1);
    ck_assert_int_eq(rules_shadowed_by(r, 6, 4), -1);
    /* An always rule chosen first shadows an ordinary one. */
    ck_assert_int_eq(rules_shadowed_by(r, 6, 5), 4);
    /* Without the priority 5 rule, 10 comes before 11. */
    ck_assert_int_eq(rules_shadowed_by(r, 2, 1), 0);
    ck_assert_int_eq(rules_shadowed_by(r, 2, 0), -1);
    /* What the service does agrees: 11 is never the match. */
    ck_assert_int_eq(rules_match(r, 2, "/api/anything"), 0);
    ck_assert_int_eq(rules_pattern_matches("/api/*", "/api/"), 1);
    ck_assert_int_eq(rules_pattern_matches("/api/*", "/ap"), 0);
    ck_assert_int_eq(rules_pattern_matches("/api", "/api/x"), 0);
    ck_assert_int_eq(rules_pattern_matches("*", "/"), 1);
}
END_TEST

START_TEST(test_plan_unique_names)
{
    static const char *const a[] = { "default", "minute" };
    static const char *const b[] = { "default" };
    struct rl_rule r[2];
    struct rl_plan plan;
    int i, j;

    fixture_rule_init(&r[0], 7, "/api*", 0);
    fixture_rule_limits(&r[0], 2, a, 10);
    fixture_rule_init(&r[1], 9, "*", 0);
    r[1].always = 1;
    fixture_rule_limits(&r[1], 1, b, 20);
    ck_assert_int_eq(rules_plan(r, 2, "/api", &plan), 3);
    for (i = 0; i < plan.n; i++)
        for (j = i + 1; j < plan.n; j++)
            ck_assert_str_ne(plan.name[i], plan.name[j]);
    for (i = 0; i < plan.n; i++) {
        if (plan.limit[i] == &r[0].limits[0])
            ck_assert_str_eq(plan.name[i], "r7-default");
        else if (plan.limit[i] == &r[0].limits[1])
            ck_assert_str_eq(plan.name[i], "minute");
        else
            ck_assert_str_eq(plan.name[i], "r9-default");
    }
}
END_TEST

START_TEST(test_plan_unique_names_qualified_clash)
{
    static const char *const a[] = { "default" };
    static const char *const b[] = { "default", "r7-default" };
    struct rl_rule r[2];
    struct rl_plan plan;

    /* Qualifying rule 7's "default" gives "r7-default", which rule 9 has
     * as a name of its own: that one is qualified too. */
    fixture_rule_init(&r[0], 7, "/api*", 0);
    fixture_rule_limits(&r[0], 1, a, 10);
    fixture_rule_init(&r[1], 9, "*", 0);
    r[1].always = 1;
    fixture_rule_limits(&r[1], 2, b, 20);
    ck_assert_int_eq(rules_plan(r, 2, "/api", &plan), 3);
    ck_assert_str_eq(plan.name[0], "r7-default");
    ck_assert_str_eq(plan.name[1], "r9-default");
    ck_assert_str_eq(plan.name[2], "r9-r7-default");
    /* Without the clash, names stay as they are. */
    ck_assert_int_eq(rules_plan(r, 2, "/other", &plan), 2);
    ck_assert_str_eq(plan.name[0], "default");
    ck_assert_str_eq(plan.name[1], "r7-default");
}
END_TEST

/* A rule with n limits named l0 .. l<n-1>. */
static void
rule_with(struct rl_rule *r, long long id, const char *pattern, int always,
    int n)
{
    fixture_rule_init(r, id, pattern, 0);
    r->always = always;
    fixture_rule_limits(r, n, NULL, id * 100);
}

START_TEST(test_plan_overflow)
{
    struct rl_rule r[2];
    struct rl_plan plan;

    /* The case that used to drop the quota: a rule with 8 limits and a
     * tenant-wide "always" quota.  Nothing is decided, rather than the
     * first 8 of 9 limits. */
    rule_with(&r[0], 1, "/x", 0, RL_MAX_LIMITS);
    rule_with(&r[1], 2, "*", 1, 1);
    plan.n = 5;
    ck_assert_int_eq(rules_plan(r, 2, "/x", &plan), -1);
    ck_assert_int_eq(plan.n, 0);
    ck_assert_int_eq(plan.needed, RL_MAX_LIMITS + 1);
    ck_assert_ptr_eq(plan.rule[0], &r[0]);
    /* Other routes only have the quota. */
    ck_assert_int_eq(rules_plan(r, 2, "/y", &plan), 1);
    ck_assert_ptr_eq(plan.limit[0], &r[1].limits[0]);
    ck_assert_int_eq(plan.needed, 1);

    /* 7 + 3 is as much too many as 8 + 1. */
    rule_with(&r[0], 1, "/a", 0, RL_MAX_LIMITS - 1);
    rule_with(&r[1], 2, "*", 1, 3);
    ck_assert_int_eq(rules_plan(r, 2, "/a", &plan), -1);
    ck_assert_int_eq(plan.needed, RL_MAX_LIMITS + 2);
    ck_assert_int_eq(rules_plan(r, 2, "/b", &plan), 3);
}
END_TEST

START_TEST(test_plan_overflow_always_only)
{
    struct rl_rule r[3];
    struct rl_plan plan;

    /* Two "always" rules, the more specific one also the best. */
    rule_with(&r[0], 1, "*", 1, 5);
    rule_with(&r[1], 2, "/api*", 1, 4);
    /* A matching rule that is neither the best nor "always" counts for
     * nothing, however many limits it has. */
    rule_with(&r[2], 3, "/a*", 0, RL_MAX_LIMITS);
    ck_assert_int_eq(rules_plan(r, 3, "/api/x", &plan), -1);
    ck_assert_ptr_eq(plan.rule[0], &r[1]);
    ck_assert_int_eq(plan.needed, 9);
    ck_assert_int_eq(rules_plan(r, 3, "/x", &plan), 5);
    /* "/a/x": "/a*" (8) is the best, plus "*" (5). */
    ck_assert_int_eq(rules_plan(r, 3, "/a/x", &plan), -1);
    r[0].nlimits = 0;
    ck_assert_int_eq(rules_plan(r, 3, "/a/x", &plan), RL_MAX_LIMITS);
    ck_assert_int_eq(rules_plan(r, 3, "/api/x", &plan), 4);
}
END_TEST

START_TEST(test_plan_exactly_max)
{
    struct rl_rule r[4];
    struct rl_plan plan;
    int i;

    /* 5 + 2 + 1 = 8: all of them, the best rule's first, then the always
     * rules in the order of the array. */
    rule_with(&r[0], 1, "/a", 0, 5);
    rule_with(&r[1], 2, "*", 1, 2);
    rule_with(&r[2], 3, "/a*", 1, 1);
    rule_with(&r[3], 4, "/b*", 1, RL_MAX_LIMITS);
    ck_assert_int_eq(rules_plan(r, 4, "/a", &plan), RL_MAX_LIMITS);
    ck_assert_int_eq(plan.n, RL_MAX_LIMITS);
    ck_assert_int_eq(plan.needed, RL_MAX_LIMITS);
    for (i = 0; i < 5; i++)
        ck_assert_ptr_eq(plan.limit[i], &r[0].limits[i]);
    ck_assert_ptr_eq(plan.limit[5], &r[1].limits[0]);
    ck_assert_ptr_eq(plan.limit[6], &r[1].limits[1]);
    ck_assert_ptr_eq(plan.limit[7], &r[2].limits[0]);
    for (i = 0; i < plan.n; i++)
        ck_assert_ptr_eq(plan.rule[i], i < 5 ? &r[0] : i < 7 ? &r[1] : &r[2]);
    /* One rule of 8 limits alone. */
    ck_assert_int_eq(rules_plan(&r[3], 1, "/b/c", &plan), RL_MAX_LIMITS);
    /* ... but with the "*" quota on top, 10. */
    ck_assert_int_eq(rules_plan(r, 4, "/b/c", &plan), -1);
    ck_assert_int_eq(plan.needed, RL_MAX_LIMITS + 2);
}
END_TEST

/* The ids of o's rules (indices into rules), as "id,id,...". */
static const char *
overflow_ids(const struct rl_overflow *o, const struct rl_rule *rules)
{
    static char buf[256];
    size_t used = 0;
    int i;

    buf[0] = '\0';
    for (i = 0; i < o->nrules && used < sizeof(buf) - 24; i++)
        used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%s%lld",
            i > 0 ? "," : "", rules[o->rule[i]].id);
    return buf;
}

START_TEST(test_overflow_prefix_and_exact)
{
    struct rl_rule r[3];
    struct rl_overflow o;

    /* Routes beginning with "/a" get 8 + 1. */
    rule_with(&r[0], 1, "/a*", 0, RL_MAX_LIMITS);
    rule_with(&r[1], 2, "*", 1, 1);
    ck_assert_int_eq(rules_overflow(NULL, 0, r, 2, &o), 1);
    ck_assert_str_eq(o.route, "/a");
    ck_assert_int_eq(o.prefix, 1);
    ck_assert_int_eq(o.needed, RL_MAX_LIMITS + 1);
    ck_assert_int_eq(o.before, 0);
    ck_assert_str_eq(overflow_ids(&o, r), "1,2");

    /* An exact rule of one limit takes "/a" itself out of that class, but
     * "/a/x" is still there. */
    rule_with(&r[2], 3, "/a", 0, 1);
    ck_assert_int_eq(rules_overflow(NULL, 0, r, 3, &o), 1);
    ck_assert_str_eq(o.route, "/a");
    ck_assert_int_eq(o.prefix, 1);

    /* An exact route that overflows, while "*" alone does not. */
    rule_with(&r[0], 1, "/e", 0, 2);
    rule_with(&r[1], 2, "*", 1, RL_MAX_LIMITS - 1);
    ck_assert_int_eq(rules_overflow(NULL, 0, r, 2, &o), 1);
    ck_assert_str_eq(o.route, "/e");
    ck_assert_int_eq(o.prefix, 0);
    ck_assert_int_eq(o.needed, RL_MAX_LIMITS + 1);
    ck_assert_str_eq(overflow_ids(&o, r), "1,2");
}
END_TEST

START_TEST(test_overflow_not_too_strict)
{
    struct rl_rule r[4];
    struct rl_overflow o;

    /* Limits of rules that never share a check are never added up. */
    rule_with(&r[0], 1, "/a*", 0, RL_MAX_LIMITS);
    rule_with(&r[1], 2, "/b*", 1, RL_MAX_LIMITS);
    rule_with(&r[2], 3, "/c", 1, RL_MAX_LIMITS);
    rule_with(&r[3], 4, "/cd*", 0, RL_MAX_LIMITS);
    ck_assert_int_eq(rules_overflow(NULL, 0, r, 4, &o), 0);
    /* A more specific rule that is not "always" replaces the rule below
     * it: "/a/x*" with 8 under "/a*" with 8 is fine. */
    rule_with(&r[1], 2, "/a/x*", 0, RL_MAX_LIMITS);
    ck_assert_int_eq(rules_overflow(NULL, 0, r, 4, &o), 0);
    /* Exactly 8 together is fine. */
    rule_with(&r[0], 1, "/a*", 1, 4);
    rule_with(&r[1], 2, "/a/x*", 0, 4);
    ck_assert_int_eq(rules_overflow(NULL, 0, r, 2, &o), 0);
    /* One more is not, on the routes that begin with "/a/x" only. */
    r[1].nlimits = 5;
    ck_assert_int_eq(rules_overflow(NULL, 0, r, 2, &o), 1);
    ck_assert_str_eq(o.route, "/a/x");
    ck_assert_int_eq(o.prefix, 1);
    ck_assert_str_eq(overflow_ids(&o, r), "2,1");
}
END_TEST

START_TEST(test_overflow_compared_with_before)
{
    struct rl_rule before[2], after[2];
    struct rl_overflow o;

    /* Already 10 before, 10 after: not made worse, not refused. */
    rule_with(&before[0], 1, "/a*", 0, RL_MAX_LIMITS);
    rule_with(&before[1], 2, "*", 1, 2);
    ck_assert_int_eq(rules_overflow(before, 2, before, 2, &o), 0);
    /* Fewer than before, still too many: allowed (a step towards a fix). */
    memcpy(after, before, sizeof(after));
    after[1].nlimits = 1;
    ck_assert_int_eq(rules_overflow(before, 2, after, 2, &o), 0);
    /* More than before: refused, saying how many there were. */
    ck_assert_int_eq(rules_overflow(after, 2, before, 2, &o), 1);
    ck_assert_str_eq(o.route, "/a");
    ck_assert_int_eq(o.needed, RL_MAX_LIMITS + 2);
    ck_assert_int_eq(o.before, RL_MAX_LIMITS + 1);
}
END_TEST

START_TEST(test_overflow_removal)
{
    struct rl_rule before[3], after[3];
    struct rl_overflow o;

    /* Removing a rule can make a plan bigger: two rules for "/a", the one
     * that wins the tie has 1 limit, the other 8. */
    rule_with(&before[0], 1, "/a", 0, 1);
    before[0].priority = 5;
    rule_with(&before[1], 2, "/a", 0, RL_MAX_LIMITS);
    rule_with(&before[2], 3, "*", 1, 1);
    ck_assert_int_eq(rules_overflow(NULL, 0, before, 3, &o), 0);
    /* The priority of the other one raised: the same as removing. */
    memcpy(after, before, sizeof(after));
    after[1].priority = 6;
    ck_assert_int_eq(rules_overflow(before, 3, after, 3, &o), 1);
    ck_assert_str_eq(o.route, "/a");
    ck_assert_int_eq(o.prefix, 0);
    ck_assert_int_eq(o.before, 2);
    ck_assert_str_eq(overflow_ids(&o, after), "2,3");
    ck_assert_int_eq(rules_overflow(before, 3, &before[1], 2, &o), 1);

    /* An exact rule removed from under a prefix rule that already
     * overflows: the routes that begin with "/a" needed 9 before and after,
     * but "/a/x" itself needed 2 and now needs 9.  Only the patterns of the
     * rules before the change show that class. */
    rule_with(&before[0], 1, "/a/x", 0, 1);
    rule_with(&before[1], 2, "/a*", 0, RL_MAX_LIMITS);
    rule_with(&before[2], 3, "*", 1, 1);
    ck_assert_int_eq(rules_overflow(before, 3, &before[1], 2, &o), 1);
    ck_assert_str_eq(o.route, "/a/x");
    ck_assert_int_eq(o.prefix, 0);
    ck_assert_int_eq(o.before, 2);
    ck_assert_str_eq(overflow_ids(&o, &before[1]), "2,3");
}
END_TEST

/* A pattern for the random rule sets: "*", a prefix or an exact route
 * over a small alphabet, so that patterns collide and nest often. */
static void
random_pattern(char *out, unsigned *seed)
{
    static const char alphabet[] = "/ab";
    int len = 1 + (int)(rand_r(seed) % 5), i, kind = (int)(rand_r(seed) % 8);

    if (kind == 0) {
        strcpy(out, "*");
        return;
    }
    for (i = 0; i < len; i++)
        out[i] = alphabet[rand_r(seed) % 3];
    out[len] = '\0';
    if (kind <= 4)
        strcat(out, "*");
}

/* The plans of the same route with and without the index are the same:
 * same return, same needed, same limits in the same order, same names. */
static void
same_plans(const struct rules_index *ix, const struct rl_rule *r, int n,
    const char *route)
{
    struct rl_plan a, b;
    int ra, rb, i;

    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    ra = rules_plan(r, n, route, &a);
    rb = rules_index_plan(ix, route, &b);
    ck_assert_msg(ra == rb, "route %s: %d without the index, %d with it",
        route, ra, rb);
    ck_assert_int_eq(a.needed, b.needed);
    ck_assert_int_eq(a.n, b.n);
    if (ra == -1)
        ck_assert(a.rule[0] == b.rule[0]);
    for (i = 0; i < a.n; i++) {
        ck_assert(a.rule[i] == b.rule[i]);
        ck_assert(a.limit[i] == b.limit[i]);
        ck_assert_str_eq(a.name[i], b.name[i]);
    }
}

START_TEST(test_index_agrees)
{
    static struct rl_rule r[64];
    char pattern[16], route[16];
    unsigned seed = 7;
    struct rules_index *ix;
    int round, n, i, k;

    /* 400 random rule sets, each matched against 60 random routes and
     * against every pattern itself: ties of priority and id, duplicates,
     * "always" and broken rules, overflowing plans. */
    for (round = 0; round < 400; round++) {
        n = (int)(rand_r(&seed) % 64);
        for (i = 0; i < n; i++) {
            random_pattern(pattern, &seed);
            rule_with(&r[i], 1 + (long long)(rand_r(&seed) % 40), pattern,
                rand_r(&seed) % 5 == 0, 1 + (int)(rand_r(&seed) % 3));
            r[i].priority = (int)(rand_r(&seed) % 3);
            r[i].broken = rand_r(&seed) % 30 == 0;
        }
        ck_assert_ptr_nonnull(ix = rules_index_build(r, n));
        for (k = 0; k < 60; k++) {
            random_pattern(route, &seed);
            if (route[strlen(route) - 1] == '*')
                route[strlen(route) - 1] = '\0';
            if (route[0] == '\0')
                strcpy(route, "/");
            same_plans(ix, r, n, route);
        }
        for (i = 0; i < n; i++)
            same_plans(ix, r, n, r[i].pattern);
        rules_index_free(ix);
    }
}
END_TEST

START_TEST(test_index_many_rules)
{
    struct rl_rule *r = calloc(RL_MAX_RULES, sizeof(*r));
    struct rules_index *ix;
    struct rl_plan plan;
    char pattern[32];
    int i;

    /* The tenant of the finding: one prefix rule per route /r/N/ and a
     * catch-all; every one of them, the last ones included, is found. */
    ck_assert_ptr_nonnull(r);
    for (i = 0; i < RL_MAX_RULES - 1; i++) {
        snprintf(pattern, sizeof(pattern), "/r/%d/*", i + 1);
        rule_with(&r[i], i + 1, pattern, 0, 1);
    }
    rule_with(&r[RL_MAX_RULES - 1], RL_MAX_RULES, "*", 0, 1);
    ck_assert_ptr_nonnull(ix = rules_index_build(r, RL_MAX_RULES));
    for (i = 0; i < RL_MAX_RULES - 1; i += 997) {
        snprintf(pattern, sizeof(pattern), "/r/%d/x", i + 1);
        ck_assert_int_eq(rules_index_plan(ix, pattern, &plan), 1);
        ck_assert(plan.rule[0]->id == i + 1);
    }
    snprintf(pattern, sizeof(pattern), "/r/%d/x", RL_MAX_RULES - 1);
    ck_assert_int_eq(rules_index_plan(ix, pattern, &plan), 1);
    ck_assert(plan.rule[0]->id == RL_MAX_RULES - 1);
    ck_assert_int_eq(rules_index_plan(ix, "/elsewhere", &plan), 1);
    ck_assert(plan.rule[0]->id == RL_MAX_RULES);
    rules_index_free(ix);
    free(r);
}
END_TEST

START_TEST(test_plan_broken)
{
    struct rl_rule r[3];
    struct rl_plan plan;

    /* A rule with a limit that could not be loaded decides nothing, nor
     * does any check it takes part in as an "always" rule; other routes
     * are decided as before. */
    rule_with(&r[0], 1, "/x", 0, 1);
    rule_with(&r[1], 2, "/y*", 1, 1);
    rule_with(&r[2], 3, "/z", 0, 2);
    r[1].broken = 1;
    ck_assert_int_eq(rules_plan(r, 3, "/x", &plan), 1);
    ck_assert_int_eq(rules_plan(r, 3, "/y1", &plan), -1);
    ck_assert_int_eq(plan.needed, -1);
    ck_assert(plan.rule[0] == &r[1]);
    r[1].broken = 0;
    r[2].broken = 1;
    ck_assert_int_eq(rules_plan(r, 3, "/z", &plan), -1);
    ck_assert(plan.rule[0] == &r[2]);
    ck_assert_int_eq(rules_plan(r, 3, "/y1", &plan), 1);
}
END_TEST

Suite *
rules_suite(void)
{
    Suite *s = suite_create("rules");
    TCase *tc;

    tc = tcase_create("match");
    tcase_add_loop_test(tc, test_exact_prefix_star, 0, 6);
    tcase_add_loop_test(tc, test_longer_prefix_wins, 0, 6);
    tcase_add_test(tc, test_priority_does_not_beat_specificity);
    tcase_add_test(tc, test_tie_priority);
    tcase_add_loop_test(tc, test_tie_lower_id, 0, 6);
    tcase_add_test(tc, test_no_match);
    tcase_add_test(tc, test_star_alone);
    tcase_add_test(tc, test_prefix_pattern);
    tcase_add_test(tc, test_star_inside_is_literal);
    tcase_add_test(tc, test_exact_beats_longest_prefix);
    tcase_add_test(tc, test_empty_rule_list);
    suite_add_tcase(s, tc);

    tc = tcase_create("plan");
    tcase_add_test(tc, test_plan_most_specific_only);
    tcase_add_test(tc, test_plan_no_match);
    tcase_add_test(tc, test_plan_always_rules);
    tcase_add_test(tc, test_shadowed_by);
    tcase_add_test(tc, test_plan_unique_names);
    tcase_add_test(tc, test_plan_unique_names_qualified_clash);
    tcase_add_test(tc, test_plan_overflow);
    tcase_add_test(tc, test_plan_overflow_always_only);
    tcase_add_test(tc, test_plan_exactly_max);
    tcase_add_test(tc, test_plan_broken);
    tcase_add_test(tc, test_index_agrees);
    tcase_add_test(tc, test_index_many_rules);
    suite_add_tcase(s, tc);

    tc = tcase_create("overflow");
    tcase_add_test(tc, test_overflow_prefix_and_exact);
    tcase_add_test(tc, test_overflow_not_too_strict);
    tcase_add_test(tc, test_overflow_compared_with_before);
    tcase_add_test(tc, test_overflow_removal);
    suite_add_tcase(s, tc);

    tc = tcase_create("names");
    tcase_add_test(tc, test_algorithm_names);
    tcase_add_test(tc, test_algorithm_unknown);
    tcase_add_test(tc, test_calendar_names);
    suite_add_tcase(s, tc);
    return s;
}
