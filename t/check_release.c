/*
 * check_release.c -- tests of src/release_line.c: the lines a web server
 * logs for ratelimit-release, bare (lighttpd's and Apache's pipes) and
 * behind nginx's RFC 3164 syslog header; what is a lease, what is no
 * lease, and what is a bad line, at every bound.
 */
#include <string.h>

#include <check.h>              /* t/check.h: the suites, then Check */

#include "ratelimit.h"
#include "release.h"

static enum release_kind
parse(const char *s, struct release_line *l)
{
    return release_line_parse(s, strlen(s), l);
}

START_TEST(test_lease_only)
{
    struct release_line l;

    ck_assert_int_eq(parse("lease=t7.a1b2c3", &l), RELEASE_LINE_LEASE);
    ck_assert_str_eq(l.lease, "t7.a1b2c3");
    ck_assert_int_eq(l.cost, -1);
    ck_assert_ptr_null(l.reason);
}
END_TEST

START_TEST(test_lease_and_cost_any_order)
{
    struct release_line l;

    ck_assert_int_eq(parse("cost=350 lease=abc-1:2_3.4\n", &l),
        RELEASE_LINE_LEASE);
    ck_assert_str_eq(l.lease, "abc-1:2_3.4");
    ck_assert_int_eq(l.cost, 350);
    ck_assert_int_eq(parse("\tlease=x\t cost=0 \r\n", &l),
        RELEASE_LINE_LEASE);
    ck_assert_str_eq(l.lease, "x");
    ck_assert_int_eq(l.cost, 0);
}
END_TEST

START_TEST(test_other_fields_ignored)
{
    struct release_line l;

    ck_assert_int_eq(parse("status=499 lease=L1 uri=/a=b cost=- t=0.5", &l),
        RELEASE_LINE_LEASE);
    ck_assert_str_eq(l.lease, "L1");
    ck_assert_int_eq(l.cost, -1);
    ck_assert_ptr_null(l.reason);
}
END_TEST

START_TEST(test_no_lease)
{
    struct release_line l;

    /* The web servers' "no value": a request that held none. */
    ck_assert_int_eq(parse("lease=- cost=-", &l), RELEASE_LINE_NONE);
    ck_assert_int_eq(parse("lease= cost=12", &l), RELEASE_LINE_NONE);
    ck_assert_int_eq(parse("lease=-\n", &l), RELEASE_LINE_NONE);
    ck_assert_str_eq(l.lease, "");
}
END_TEST

START_TEST(test_cost_bounds)
{
    struct release_line l;
    char line[64];

    snprintf(line, sizeof(line), "lease=a cost=%d", RL_COST_MAX);
    ck_assert_int_eq(parse(line, &l), RELEASE_LINE_LEASE);
    ck_assert_int_eq(l.cost, RL_COST_MAX);
    ck_assert_ptr_null(l.reason);
    /* A cost past the bound, negative, fractional, two values (nginx
     * joins the headers of two upstreams with ", "), or huge: the lease
     * is still released, without a cost, and the reason says so. */
    snprintf(line, sizeof(line), "lease=a cost=%d", RL_COST_MAX + 1);
    ck_assert_int_eq(parse(line, &l), RELEASE_LINE_LEASE);
    ck_assert_int_eq(l.cost, -1);
    ck_assert_ptr_nonnull(l.reason);
    ck_assert_str_eq(l.lease, "a");
    ck_assert_int_eq(parse("lease=a cost=-5", &l), RELEASE_LINE_LEASE);
    ck_assert_int_eq(l.cost, -1);
    ck_assert_ptr_nonnull(l.reason);
    ck_assert_int_eq(parse("lease=a cost=1.5", &l), RELEASE_LINE_LEASE);
    ck_assert_ptr_nonnull(l.reason);
    ck_assert_int_eq(parse("lease=a cost=99999999999999999999999", &l),
        RELEASE_LINE_LEASE);
    ck_assert_int_eq(l.cost, -1);
    ck_assert_ptr_nonnull(l.reason);
    ck_assert_int_eq(parse("lease=a cost=", &l), RELEASE_LINE_LEASE);
    ck_assert_int_eq(l.cost, -1);
    ck_assert_ptr_null(l.reason);
}
END_TEST

START_TEST(test_lease_bounds)
{
    struct release_line l;
    char line[RELEASE_LEASE_MAX + 32];

    memset(line, 0, sizeof(line));
    memcpy(line, "lease=", 6);
    memset(line + 6, 'z', RELEASE_LEASE_MAX);
    ck_assert_int_eq(parse(line, &l), RELEASE_LINE_LEASE);
    ck_assert_int_eq((int)strlen(l.lease), RELEASE_LEASE_MAX);
    line[6 + RELEASE_LEASE_MAX] = 'z';
    ck_assert_int_eq(parse(line, &l), RELEASE_LINE_BAD);
    ck_assert_ptr_nonnull(l.reason);
    ck_assert_int_eq(parse("lease=a/b", &l), RELEASE_LINE_BAD);
    ck_assert_int_eq(parse("lease=a\"b", &l), RELEASE_LINE_BAD);
    ck_assert_int_eq(parse("lease=\\x22", &l), RELEASE_LINE_BAD);
}
END_TEST

START_TEST(test_bad_lines)
{
    struct release_line l;

    ck_assert_int_eq(parse("", &l), RELEASE_LINE_BAD);
    ck_assert_str_eq(l.reason, "no lease= field");
    ck_assert_int_eq(parse("\n", &l), RELEASE_LINE_BAD);
    ck_assert_int_eq(parse("cost=3", &l), RELEASE_LINE_BAD);
    ck_assert_int_eq(parse("127.0.0.1 - - [05/Dec/2026] \"GET /\" 200", &l),
        RELEASE_LINE_BAD);
    ck_assert_int_eq(parse("lease=a lease=b", &l), RELEASE_LINE_BAD);
    ck_assert_int_eq(parse("lease=a cost=1 cost=2", &l), RELEASE_LINE_BAD);
    ck_assert_int_eq(parse("lease=a =b", &l), RELEASE_LINE_BAD);
    ck_assert_int_eq(parse("lease=a stray", &l), RELEASE_LINE_BAD);
    ck_assert_str_eq(l.lease, "");
    ck_assert_int_eq(l.cost, -1);
}
END_TEST

START_TEST(test_length_bound)
{
    static char line[RELEASE_LINE_MAX + 2];
    struct release_line l;

    memset(line, ' ', sizeof(line) - 1);
    memcpy(line, "lease=a", 7);
    ck_assert_int_eq(release_line_parse(line, RELEASE_LINE_MAX, &l),
        RELEASE_LINE_LEASE);
    ck_assert_int_eq(release_line_parse(line, RELEASE_LINE_MAX + 1, &l),
        RELEASE_LINE_BAD);
}
END_TEST

START_TEST(test_not_past_len)
{
    struct release_line l;

    /* The bytes after len are not read: "lease=ab" cut to "lease=a". */
    ck_assert_int_eq(release_line_parse("lease=ab cost=3", 7, &l),
        RELEASE_LINE_LEASE);
    ck_assert_str_eq(l.lease, "a");
    ck_assert_int_eq(l.cost, -1);
    /* A NUL inside is a byte like any other, not an end. */
    ck_assert_int_eq(release_line_parse("lease=a\0b", 9, &l),
        RELEASE_LINE_BAD);
}
END_TEST

START_TEST(test_syslog_header)
{
    struct release_line l;

    /* nginx: access_log syslog:server=unix:...,tag=ratelimit */
    ck_assert_int_eq(parse("<190>Dec  5 17:59:00 web1 ratelimit: "
        "lease=L9 cost=40", &l), RELEASE_LINE_LEASE);
    ck_assert_str_eq(l.lease, "L9");
    ck_assert_int_eq(l.cost, 40);
    /* ... with nohostname */
    ck_assert_int_eq(parse("<190>Dec 15 07:09:00 nginx: lease=L9", &l),
        RELEASE_LINE_LEASE);
    ck_assert_str_eq(l.lease, "L9");
    ck_assert_int_eq(parse("<7>Dec 15 07:09:00 h nginx: lease=-", &l),
        RELEASE_LINE_NONE);
    /* A message's own ": " comes after the tag's. */
    ck_assert_int_eq(parse("<190>Dec 15 07:09:00 h t: lease=a x=y: z=1", &l),
        RELEASE_LINE_LEASE);
    ck_assert_str_eq(l.lease, "a");
}
END_TEST

START_TEST(test_syslog_broken)
{
    struct release_line l;

    ck_assert_int_eq(parse("<190>Dec 15 07:09:00 lease=a", &l),
        RELEASE_LINE_BAD);
    ck_assert_int_eq(parse("<>x: lease=a", &l), RELEASE_LINE_BAD);
    ck_assert_int_eq(parse("<1900>x: lease=a", &l), RELEASE_LINE_BAD);
    ck_assert_int_eq(parse("<19", &l), RELEASE_LINE_BAD);
    ck_assert_int_eq(parse("<", &l), RELEASE_LINE_BAD);
    ck_assert_int_eq(parse("<1>x:", &l), RELEASE_LINE_BAD);
    ck_assert_int_eq(parse("<1>x: ", &l), RELEASE_LINE_BAD);
    ck_assert_str_eq(l.reason, "no lease= field");
}
END_TEST

Suite *
release_suite(void)
{
    Suite *s = suite_create("release");
    TCase *tc = tcase_create("line");

    tcase_add_test(tc, test_lease_only);
    tcase_add_test(tc, test_lease_and_cost_any_order);
    tcase_add_test(tc, test_other_fields_ignored);
    tcase_add_test(tc, test_no_lease);
    tcase_add_test(tc, test_cost_bounds);
    tcase_add_test(tc, test_lease_bounds);
    tcase_add_test(tc, test_bad_lines);
    tcase_add_test(tc, test_length_bound);
    tcase_add_test(tc, test_not_past_len);
    tcase_add_test(tc, test_syslog_header);
    tcase_add_test(tc, test_syslog_broken);
    suite_add_tcase(s, tc);
    return s;
}
