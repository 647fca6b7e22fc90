/*
 * check_validate.c -- tests of src/validate.c: the checks of typed values
 * that the admin tool applies before it touches the database.  Each check
 * is tried just inside and just outside each of its bounds, and the
 * messages are compared whole where ratelimitctl prints them as they are.
 */
#include <limits.h>
#include <string.h>

#include <check.h>              /* t/check.h: the suites, then Check */

#include "ratelimit.h"

/* A string of n copies of c (n < sizeof(buf)). */
static const char *
repeat(char *buf, char c, size_t n)
{
    memset(buf, c, n);
    buf[n] = '\0';
    return buf;
}

/* ------------------------------------------------------------------ */
/* UTF-8 */

START_TEST(test_utf8_length_counts_code_points)
{
    ck_assert_int_eq(validate_utf8_length(""), 0);
    ck_assert_int_eq(validate_utf8_length("acme"), 4);
    ck_assert_int_eq(validate_utf8_length("caf\xc3\xa9"), 4);    /* café */
    ck_assert_int_eq(validate_utf8_length("\xe2\x82\xac"), 1);   /* € */
    ck_assert_int_eq(validate_utf8_length("\xf0\x9f\x98\x80"), 1);
    ck_assert_int_eq(validate_utf8_length("\xf4\x8f\xbf\xbf"), 1);  /* max */
    ck_assert_int_eq(validate_utf8_length("\xc2\xa0"), 1);       /* U+00A0 */
}
END_TEST

START_TEST(test_utf8_length_refuses_controls)
{
    ck_assert_int_eq(validate_utf8_length("a\tb"), -1);
    ck_assert_int_eq(validate_utf8_length("a\nb"), -1);
    ck_assert_int_eq(validate_utf8_length("\x1f"), -1);
    ck_assert_int_eq(validate_utf8_length("\x7f"), -1);          /* DEL */
    ck_assert_int_eq(validate_utf8_length("\xc2\x80"), -1);      /* C1 */
    ck_assert_int_eq(validate_utf8_length("\xc2\x9f"), -1);
    ck_assert_int_eq(validate_utf8_length(" ~"), 2);             /* edges */
}
END_TEST

START_TEST(test_utf8_length_refuses_malformed)
{
    ck_assert_int_eq(validate_utf8_length("\x80"), -1);       /* stray cont. */
    ck_assert_int_eq(validate_utf8_length("\xc0\xaf"), -1);   /* overlong / */
    ck_assert_int_eq(validate_utf8_length("\xc1\xbf"), -1);
    ck_assert_int_eq(validate_utf8_length("\xe0\x9f\xbf"), -1);  /* overlong */
    ck_assert_int_eq(validate_utf8_length("\xf0\x8f\xbf\xbf"), -1);
    ck_assert_int_eq(validate_utf8_length("\xed\xa0\x80"), -1);  /* D800 */
    ck_assert_int_eq(validate_utf8_length("\xed\xbf\xbf"), -1);  /* DFFF */
    ck_assert_int_eq(validate_utf8_length("\xef\xbf\xbf"), 1);   /* FFFF */
    ck_assert_int_eq(validate_utf8_length("\xf4\x90\x80\x80"), -1);
    ck_assert_int_eq(validate_utf8_length("\xf5\x80\x80\x80"), -1);
    ck_assert_int_eq(validate_utf8_length("\xff"), -1);
    ck_assert_int_eq(validate_utf8_length("a\xc3"), -1);      /* truncated */
    ck_assert_int_eq(validate_utf8_length("\xe2\x82"), -1);
    ck_assert_int_eq(validate_utf8_length("\xe2\x82x"), -1);
}
END_TEST

START_TEST(test_display_width)
{
    ck_assert_uint_eq(validate_display_width(""), 0);
    ck_assert_uint_eq(validate_display_width("ID"), 2);
    ck_assert_uint_eq(validate_display_width("caf\xc3\xa9"), 4);
    ck_assert_uint_eq(validate_display_width("\xf0\x9f\x98\x80!"), 2);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Names and routes */

START_TEST(test_tenant_name_bounds)
{
    char err[256], buf[300];
    int i;

    ck_assert_int_eq(validate_tenant_name("tenant name", "a", err,
        sizeof(err)), 0);
    ck_assert_int_eq(validate_tenant_name("tenant name", repeat(buf, 'a', 128),
        err, sizeof(err)), 0);
    ck_assert_int_eq(validate_tenant_name("tenant name", repeat(buf, 'a', 129),
        err, sizeof(err)), -1);
    ck_assert_str_eq(err, "tenant name: must be 1 to 128 characters "
        "(got 129)");
    ck_assert_int_eq(validate_tenant_name("tenant name", "", err,
        sizeof(err)), -1);
    ck_assert_str_eq(err, "tenant name: must be 1 to 128 characters "
        "(got 0)");

    /* 128 two-byte characters are 128 characters, not 256. */
    buf[0] = '\0';
    for (i = 0; i < 128; i++)
        strcat(buf, "\xc3\xa9");
    ck_assert_int_eq(validate_tenant_name("tenant name", buf, err,
        sizeof(err)), 0);
}
END_TEST

START_TEST(test_tenant_name_text)
{
    char err[256];

    ck_assert_int_eq(validate_tenant_name("tenant name", "Acme Corp.", err,
        sizeof(err)), 0);
    ck_assert_int_eq(validate_tenant_name("tenant name", "-dash", err,
        sizeof(err)), 0);
    ck_assert_int_eq(validate_tenant_name("tenant name", " acme", err,
        sizeof(err)), -1);
    ck_assert_str_eq(err, "tenant name: must not begin or end with a space");
    ck_assert_int_eq(validate_tenant_name("tenant name", "acme ", err,
        sizeof(err)), -1);
    ck_assert_int_eq(validate_tenant_name("tenant name", "ac\x01me", err,
        sizeof(err)), -1);
    ck_assert_str_eq(err, "tenant name: not UTF-8 text, or contains control "
        "characters");
    ck_assert_int_eq(validate_tenant_name("anonymous_tenant", "\xff", err,
        sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "anonymous_tenant: "));
}
END_TEST

START_TEST(test_route_bounds)
{
    char err[256], buf[600];

    buf[0] = '/';
    repeat(buf + 1, 'a', 511);
    ck_assert_int_eq(validate_route("--route", buf, err, sizeof(err)), 0);
    repeat(buf + 1, 'a', 512);
    ck_assert_int_eq(validate_route("--route", buf, err, sizeof(err)), -1);
    ck_assert_str_eq(err, "--route: must be 1 to 512 bytes (got 513)");
    ck_assert_int_eq(validate_route("--route", "", err, sizeof(err)), -1);
    ck_assert_str_eq(err, "--route: must be 1 to 512 bytes (got 0)");
}
END_TEST

START_TEST(test_route_stars_and_text)
{
    char err[256];

    ck_assert_int_eq(validate_route("--route", "*", err, sizeof(err)), 0);
    ck_assert_int_eq(validate_route("--route", "/api/*", err, sizeof(err)), 0);
    ck_assert_int_eq(validate_route("--route", "GET /x", err, sizeof(err)), 0);
    ck_assert_int_eq(validate_route("--route", "/a*b", err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "may only be the last character"));
    ck_assert_int_eq(validate_route("--route", "**", err, sizeof(err)), -1);
    ck_assert_int_eq(validate_route("--route", " /a", err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "must not begin or end with a space"));
    ck_assert_int_eq(validate_route("--route", "/a ", err, sizeof(err)), -1);
    ck_assert_int_eq(validate_route("--route", "/a\tb", err, sizeof(err)), -1);
    ck_assert_str_eq(err, "--route: not UTF-8 text, or contains control "
        "characters");
}
END_TEST

START_TEST(test_limit_name)
{
    char err[256], buf[100];

    ck_assert_int_eq(validate_limit_name("--name", "per-day_2.x", err,
        sizeof(err)), 0);
    ck_assert_int_eq(validate_limit_name("--name", repeat(buf, 'z', 64), err,
        sizeof(err)), 0);
    ck_assert_int_eq(validate_limit_name("--name", repeat(buf, 'z', 65), err,
        sizeof(err)), -1);
    ck_assert_str_eq(err, "--name: must be 1 to 64 characters");
    ck_assert_int_eq(validate_limit_name("--name", "", err, sizeof(err)), -1);
    ck_assert_int_eq(validate_limit_name("--name", "a b", err, sizeof(err)),
        -1);
    ck_assert_str_eq(err, "--name: only letters, digits, \"_\", \".\" and "
        "\"-\" are allowed");
    ck_assert_int_eq(validate_limit_name("--name", "caf\xc3\xa9", err,
        sizeof(err)), -1);
}
END_TEST

START_TEST(test_limit_name_char)
{
    const char *ok = "azAZ09_.-";
    const char *bad = " /*:@[`{~";

    for (; *ok != '\0'; ok++)
        ck_assert_msg(validate_limit_name_char(*ok), "'%c' refused", *ok);
    for (; *bad != '\0'; bad++)
        ck_assert_msg(!validate_limit_name_char(*bad), "'%c' taken", *bad);
    ck_assert_int_eq(validate_limit_name_char(0xc3), 0);
    ck_assert_int_eq(validate_limit_name_char('\0'), 0);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Numbers */

START_TEST(test_integer_bounds)
{
    char err[256];
    long long v = 7;

    ck_assert_int_eq(validate_integer("--limit", "1", 1, 10, &v, err,
        sizeof(err)), 0);
    ck_assert_int_eq(v, 1);
    ck_assert_int_eq(validate_integer("--limit", "10", 1, 10, &v, err,
        sizeof(err)), 0);
    ck_assert_int_eq(v, 10);
    v = 7;
    ck_assert_int_eq(validate_integer("--limit", "0", 1, 10, &v, err,
        sizeof(err)), -1);
    ck_assert_str_eq(err, "--limit: 0 is out of range (1 to 10)");
    ck_assert_int_eq(v, 7);
    ck_assert_int_eq(validate_integer("--limit", "11", 1, 10, &v, err,
        sizeof(err)), -1);
    ck_assert_int_eq(validate_integer("--priority", "-1000000",
        -VALIDATE_PRIORITY_MAX, VALIDATE_PRIORITY_MAX, &v, err,
        sizeof(err)), 0);
    ck_assert_int_eq(v, -1000000);
    ck_assert_int_eq(validate_integer("--priority", "-1000001",
        -VALIDATE_PRIORITY_MAX, VALIDATE_PRIORITY_MAX, &v, err,
        sizeof(err)), -1);
    ck_assert_str_eq(err, "--priority: -1000001 is out of range "
        "(-1000000 to 1000000)");
    ck_assert_int_eq(validate_integer("--limit", "1000000000000", 1,
        VALIDATE_COUNT_MAX, &v, err, sizeof(err)), 0);
    ck_assert_int_eq(validate_integer("--limit", "1000000000001", 1,
        VALIDATE_COUNT_MAX, &v, err, sizeof(err)), -1);
}
END_TEST

START_TEST(test_integer_syntax)
{
    char err[256];
    long long v;

    ck_assert_int_eq(validate_integer("--limit", "abc", 1, 10, &v, err,
        sizeof(err)), -1);
    ck_assert_str_eq(err, "--limit: \"abc\" is not a whole number");
    ck_assert_int_eq(validate_integer("--limit", "", 1, 10, &v, err,
        sizeof(err)), -1);
    ck_assert_int_eq(validate_integer("--limit", "-", 1, 10, &v, err,
        sizeof(err)), -1);
    ck_assert_int_eq(validate_integer("--limit", "+5", 1, 10, &v, err,
        sizeof(err)), -1);
    ck_assert_int_eq(validate_integer("--limit", " 5", 1, 10, &v, err,
        sizeof(err)), -1);
    ck_assert_int_eq(validate_integer("--limit", "5 ", 1, 10, &v, err,
        sizeof(err)), -1);
    ck_assert_int_eq(validate_integer("--limit", "1.5", 1, 10, &v, err,
        sizeof(err)), -1);
    ck_assert_int_eq(validate_integer("--limit", "0x5", 1, 10, &v, err,
        sizeof(err)), -1);
    ck_assert_int_eq(validate_integer("--limit", "007", 1, 10, &v, err,
        sizeof(err)), 0);
    ck_assert_int_eq(v, 7);
    /* Beyond long long is out of range, not wrapped. */
    ck_assert_int_eq(validate_integer("--limit", "99999999999999999999", 1,
        LLONG_MAX, &v, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "out of range"));
}
END_TEST

START_TEST(test_id)
{
    char err[256];
    long long v;

    ck_assert_int_eq(validate_id("RULE_ID", "1", &v, err, sizeof(err)), 0);
    ck_assert_int_eq(v, 1);
    ck_assert_int_eq(validate_id("RULE_ID", "9223372036854775807", &v, err,
        sizeof(err)), 0);
    ck_assert_int_eq(v, LLONG_MAX);
    ck_assert_int_eq(validate_id("RULE_ID", "9223372036854775808", &v, err,
        sizeof(err)), -1);
    ck_assert_int_eq(validate_id("RULE_ID", "0", &v, err, sizeof(err)), -1);
    ck_assert_str_eq(err, "RULE_ID: 0 is out of range (1 to "
        "9223372036854775807)");
    ck_assert_int_eq(validate_id("KEY_ID", "x", &v, err, sizeof(err)), -1);
    ck_assert_str_eq(err, "KEY_ID: \"x\" is not a whole number");
}
END_TEST

START_TEST(test_decimal)
{
    char err[256];
    double d = 0;

    ck_assert_int_eq(validate_decimal("--refill-rate", "0.5", 1e-6, 1e8, &d,
        err, sizeof(err)), 0);
    ck_assert_double_eq(d, 0.5);
    ck_assert_int_eq(validate_decimal("--refill-rate", "1e3", 1e-6, 1e8, &d,
        err, sizeof(err)), 0);
    ck_assert_double_eq(d, 1000.0);
    ck_assert_int_eq(validate_decimal("--refill-rate", "0.000001",
        VALIDATE_RATE_MIN, VALIDATE_RATE_MAX, &d, err, sizeof(err)), 0);
    ck_assert_int_eq(validate_decimal("--refill-rate", "100000000",
        VALIDATE_RATE_MIN, VALIDATE_RATE_MAX, &d, err, sizeof(err)), 0);
    ck_assert_int_eq(validate_decimal("--refill-rate", "100000001",
        VALIDATE_RATE_MIN, VALIDATE_RATE_MAX, &d, err, sizeof(err)), -1);
    ck_assert_str_eq(err, "--refill-rate: 100000001 is out of range "
        "(1e-06 to 1e+08)");
    ck_assert_int_eq(validate_decimal("--refill-rate", "0.0000009",
        VALIDATE_RATE_MIN, VALIDATE_RATE_MAX, &d, err, sizeof(err)), -1);
    ck_assert_int_eq(validate_decimal("--refill-rate", "1e999", 1e-6, 1e8,
        &d, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "out of range"));
}
END_TEST

START_TEST(test_decimal_syntax)
{
    static const char *const bad[] = { "", "nan", "inf", "-inf", "0x10",
        " 1", "1 ", "1,5", "1.2.3", "e", ".", "--1", NULL };
    char err[256];
    double d;
    int i;

    for (i = 0; bad[i] != NULL; i++) {
        ck_assert_msg(validate_decimal("--refill-rate", bad[i], -1e9, 1e9,
            &d, err, sizeof(err)) == -1, "\"%s\" taken", bad[i]);
        ck_assert_msg(strstr(err, "is not a decimal number") != NULL,
            "\"%s\": %s", bad[i], err);
    }
}
END_TEST

/* ------------------------------------------------------------------ */
/* Durations and GCRA */

START_TEST(test_duration_units)
{
    static const struct {
        const char *s;
        long long us;
    } ok[] = {
        { "1us", 1 }, { "500us", 500 }, { "2ms", 2000 }, { "1s", 1000000 },
        { "1m", 60000000 }, { "2h", 7200000000LL },
        { "366d", 31622400000000LL }, { "31622400s", 31622400000000LL },
        { "31622400000000us", 31622400000000LL },
    };
    char err[256];
    long long us;
    size_t i;

    for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        ck_assert_msg(validate_duration("--period", ok[i].s, &us, err,
            sizeof(err)) == 0, "%s: %s", ok[i].s, err);
        ck_assert_int_eq(us, ok[i].us);
    }
}
END_TEST

START_TEST(test_duration_refused)
{
    static const char *const syntax[] = { "", "5", "5x", "s", "1 s", "-1s",
        "1.5s", "1S", "1sec", "1mss", NULL };
    static const char *const range[] = { "0s", "0us", "367d",
        "31622400000001us", "8785h", "999999999999999999999999999999us",
        NULL };
    char err[256];
    long long us;
    int i;

    for (i = 0; syntax[i] != NULL; i++) {
        ck_assert_int_eq(validate_duration("--period", syntax[i], &us, err,
            sizeof(err)), -1);
        ck_assert_msg(strstr(err, "is not a duration") != NULL, "%s: %s",
            syntax[i], err);
    }
    ck_assert_int_eq(validate_duration("--period", "5x", &us, err,
        sizeof(err)), -1);
    ck_assert_str_eq(err, "--period: \"5x\" is not a duration (a whole "
        "number with one of the units us, ms, s, m, h, d, as in 500us, 2ms, "
        "1s or 1m)");
    for (i = 0; range[i] != NULL; i++) {
        ck_assert_int_eq(validate_duration("--period", range[i], &us, err,
            sizeof(err)), -1);
        ck_assert_msg(strstr(err, "out of range (1us to 366d)") != NULL,
            "%s: %s", range[i], err);
    }
}
END_TEST

START_TEST(test_duration_format_round_trip)
{
    static const long long values[] = { 1, 999, 1000, 1500, 60000000,
        90000000, 3600000000LL, 86400000000LL, 31622400000000LL };
    char buf[32], err[256];
    long long us;
    size_t i;

    validate_duration_format(1500, buf, sizeof(buf));
    ck_assert_str_eq(buf, "1500us");
    validate_duration_format(90000000, buf, sizeof(buf));
    ck_assert_str_eq(buf, "90s");
    validate_duration_format(86400000000LL * 2, buf, sizeof(buf));
    ck_assert_str_eq(buf, "2d");
    for (i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        validate_duration_format(values[i], buf, sizeof(buf));
        ck_assert_int_eq(validate_duration("--period", buf, &us, err,
            sizeof(err)), 0);
        ck_assert_int_eq(us, values[i]);
    }
}
END_TEST

START_TEST(test_gcra)
{
    char err[512];

    /* One request per microsecond is the most GCRA can space. */
    ck_assert_int_eq(validate_gcra("1ms", 1000, 1000, 0, err, sizeof(err)),
        0);
    ck_assert_int_eq(validate_gcra("999us", 1000, 999, 0, err, sizeof(err)),
        -1);
    ck_assert_str_eq(err, "--limit 1000 per --period 999us is more than one "
        "request per microsecond, which gcra cannot space out; use a longer "
        "--period or sliding_window");
    /* 366 days apart: (burst + 1) spacings up to 10^15 us. */
    ck_assert_int_eq(validate_gcra("366d", 1, 31622400000000LL, 30, err,
        sizeof(err)), 0);
    ck_assert_int_eq(validate_gcra("366d", 1, 31622400000000LL, 31, err,
        sizeof(err)), -1);
    ck_assert_str_eq(err, "--burst 31: 32 requests spaced 31622400000000us "
        "apart take longer than gcra's limit of 10^15us (about 31 years); "
        "use a smaller --burst or a shorter --period");
    /* The spacing is rounded up: 3 per 10us are 4us apart. */
    ck_assert_int_eq(validate_gcra("10us", 3, 10, 249999999999999LL, err,
        sizeof(err)), 0);
    ck_assert_int_eq(validate_gcra("10us", 3, 10, 250000000000000LL, err,
        sizeof(err)), -1);
    ck_assert_int_eq(validate_gcra("1ms", 1, 1000, VALIDATE_BURST_MAX,
        err, sizeof(err)), 0);
    ck_assert_int_eq(validate_gcra("1s", 1, 1000000, VALIDATE_BURST_MAX,
        err, sizeof(err)), -1);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Words */

START_TEST(test_on_off)
{
    char err[256];
    int on = -1;

    ck_assert_int_eq(validate_on_off("--shadow", "on", &on, err,
        sizeof(err)), 0);
    ck_assert_int_eq(on, 1);
    ck_assert_int_eq(validate_on_off("--shadow", "off", &on, err,
        sizeof(err)), 0);
    ck_assert_int_eq(on, 0);
    on = 5;
    ck_assert_int_eq(validate_on_off("--shadow", "yes", &on, err,
        sizeof(err)), -1);
    ck_assert_str_eq(err, "--shadow: \"yes\" is not on or off");
    ck_assert_int_eq(on, 5);
    ck_assert_int_eq(validate_on_off("--shadow", "ON", &on, err,
        sizeof(err)), -1);
    ck_assert_int_eq(validate_on_off("--shadow", "o", &on, err,
        sizeof(err)), -1);
    ck_assert_int_eq(validate_on_off("--shadow", "", &on, err,
        sizeof(err)), -1);
}
END_TEST

START_TEST(test_failure_mode_and_per)
{
    char err[256];

    ck_assert_int_eq(validate_failure_mode("--failure-mode", "closed", err,
        sizeof(err)), 0);
    ck_assert_int_eq(validate_failure_mode("--failure-mode", "open", err,
        sizeof(err)), 0);
    ck_assert_int_eq(validate_failure_mode("--failure-mode", "Open", err,
        sizeof(err)), -1);
    ck_assert_str_eq(err, "--failure-mode: \"Open\" is not closed or open");
    ck_assert_int_eq(validate_per("--per", "rule", err, sizeof(err)), 0);
    ck_assert_int_eq(validate_per("--per", "route", err, sizeof(err)), 0);
    ck_assert_int_eq(validate_per("--per", "tenant", err, sizeof(err)), -1);
    ck_assert_str_eq(err, "--per: \"tenant\" is not rule or route");
    ck_assert_int_eq(validate_per("--per", "", err, sizeof(err)), -1);
}
END_TEST

START_TEST(test_short_error_buffer)
{
    char err[8];

    /* The message is cut to the buffer, never written past it. */
    memset(err, 'x', sizeof(err));
    ck_assert_int_eq(validate_per("--per", "tenant", err, sizeof(err)), -1);
    ck_assert_str_eq(err, "--per: ");
}
END_TEST

START_TEST(test_duration_unit)
{
    ck_assert_int_eq(validate_duration_unit(""), 1000000);
    ck_assert_int_eq(validate_duration_unit("s"), 1000000);
    ck_assert_int_eq(validate_duration_unit("ms"), 1000);
    ck_assert_int_eq(validate_duration_unit("us"), 1);
    ck_assert(validate_duration_unit("d") == 86400000000LL);
    ck_assert_int_eq(validate_duration_unit("x"), -1);
    ck_assert_int_eq(validate_duration_unit("sec"), -1);
}
END_TEST

Suite *
validate_suite(void)
{
    Suite *s = suite_create("validate");
    TCase *tc;

    tc = tcase_create("utf8");
    tcase_add_test(tc, test_utf8_length_counts_code_points);
    tcase_add_test(tc, test_utf8_length_refuses_controls);
    tcase_add_test(tc, test_utf8_length_refuses_malformed);
    tcase_add_test(tc, test_display_width);
    suite_add_tcase(s, tc);

    tc = tcase_create("names");
    tcase_add_test(tc, test_tenant_name_bounds);
    tcase_add_test(tc, test_tenant_name_text);
    tcase_add_test(tc, test_route_bounds);
    tcase_add_test(tc, test_route_stars_and_text);
    tcase_add_test(tc, test_limit_name);
    tcase_add_test(tc, test_limit_name_char);
    suite_add_tcase(s, tc);

    tc = tcase_create("numbers");
    tcase_add_test(tc, test_integer_bounds);
    tcase_add_test(tc, test_integer_syntax);
    tcase_add_test(tc, test_id);
    tcase_add_test(tc, test_decimal);
    tcase_add_test(tc, test_decimal_syntax);
    suite_add_tcase(s, tc);

    tc = tcase_create("durations");
    tcase_add_test(tc, test_duration_units);
    tcase_add_test(tc, test_duration_refused);
    tcase_add_test(tc, test_duration_format_round_trip);
    tcase_add_test(tc, test_gcra);
    suite_add_tcase(s, tc);

    tc = tcase_create("words");
    tcase_add_test(tc, test_on_off);
    tcase_add_test(tc, test_failure_mode_and_per);
    tcase_add_test(tc, test_short_error_buffer);
    tcase_add_test(tc, test_duration_unit);
    suite_add_tcase(s, tc);
    return s;
}
