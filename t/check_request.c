/*
 * check_request.c -- tests of src/request.c: the JSON body of a check
 * (route, subject, cost, peek and their bounds; strict RFC 8259, raw
 * control characters in strings refused) and the choice of the API key
 * among the request headers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>              /* t/check.h: the suites, then Check */

#include "ratelimit.h"

static int
parse(const char *body, struct check_request *req, char *err, size_t errlen)
{
    err[0] = '\0';
    return request_parse_check(body, strlen(body), req, err, errlen);
}

static void
parse_ok(const char *body, struct check_request *req)
{
    char err[256];

    ck_assert_msg(parse(body, req, err, sizeof(err)) == 0,
        "body %s: %s", body, err);
}

/* Asserts that body is refused with a reason for the client. */
static void
parse_bad(const char *body)
{
    struct check_request req;
    char err[256];

    ck_assert_msg(parse(body, &req, err, sizeof(err)) == -1,
        "body %s was accepted", body);
    ck_assert_msg(err[0] != '\0', "body %s: no reason given", body);
}

/* A body whose route is a string of n copies of c between pad. */
static char *
body_with_route(size_t n, char c, const char *pad)
{
    size_t plen = strlen(pad);
    char *b = malloc(n + 2 * plen + 32), *p;

    ck_assert_ptr_nonnull(b);
    p = b;
    p += sprintf(p, "{\"route\":\"%s", pad);
    memset(p, c, n);
    p += n;
    sprintf(p, "%s\"}", pad);
    return b;
}

static char *
body_with_subject(size_t n)
{
    char *b = malloc(n + 64), *p;

    ck_assert_ptr_nonnull(b);
    p = b + sprintf(b, "{\"route\":\"/a\",\"subject\":\"");
    memset(p, 's', n);
    sprintf(p + n, "\"}");
    return b;
}

START_TEST(test_valid_body)
{
    struct check_request req;

    parse_ok("{\"route\":\"/api/orders\",\"subject\":\"user-42\","
        "\"cost\":3,\"peek\":true}", &req);
    ck_assert_str_eq(req.route, "/api/orders");
    ck_assert_str_eq(req.subject, "user-42");
    ck_assert_int_eq(req.has_subject, 1);
    ck_assert_int_eq(req.cost, 3);
    ck_assert_int_eq(req.peek, 1);
}
END_TEST

START_TEST(test_minimal_body_defaults)
{
    struct check_request req;

    memset(&req, 0x5a, sizeof(req));
    parse_ok("{\"route\":\"/a\"}", &req);
    ck_assert_str_eq(req.route, "/a");
    ck_assert_int_eq(req.has_subject, 0);
    ck_assert_int_eq(req.cost, 1);
    ck_assert_int_eq(req.peek, 0);
}
END_TEST

START_TEST(test_route_trimmed)
{
    struct check_request req;

    parse_ok("{\"route\":\"  \\t/api/x y \\n \"}", &req);
    ck_assert_str_eq(req.route, "/api/x y");
}
END_TEST

START_TEST(test_route_empty)
{
    parse_bad("{\"route\":\"\"}");
    parse_bad("{\"route\":\"   \"}");
    parse_bad("{\"route\":\" \\t\\r\\n \"}");
}
END_TEST

START_TEST(test_route_length)
{
    struct check_request req;
    char err[256];
    char *b;

    b = body_with_route(RL_ROUTE_MAX, 'r', "");
    parse_ok(b, &req);
    ck_assert_uint_eq(strlen(req.route), RL_ROUTE_MAX);
    ck_assert_int_eq(req.route[0], 'r');
    ck_assert_int_eq(req.route[RL_ROUTE_MAX - 1], 'r');
    free(b);

    /* The bound applies after trimming. */
    b = body_with_route(RL_ROUTE_MAX, 'r', "   ");
    parse_ok(b, &req);
    ck_assert_uint_eq(strlen(req.route), RL_ROUTE_MAX);
    free(b);

    b = body_with_route(RL_ROUTE_MAX + 1, 'r', "");
    ck_assert_int_eq(parse(b, &req, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "512"));
    free(b);
}
END_TEST

START_TEST(test_route_missing_or_not_string)
{
    parse_bad("{}");
    parse_bad("{\"subject\":\"u\"}");
    parse_bad("{\"Route\":\"/a\"}");
    parse_bad("{\"route\":null}");
    parse_bad("{\"route\":42}");
    parse_bad("{\"route\":true}");
    parse_bad("{\"route\":[\"/a\"]}");
    parse_bad("{\"route\":{\"path\":\"/a\"}}");
}
END_TEST

START_TEST(test_route_nul)
{
    parse_bad("{\"route\":\"/a\\u0000b\"}");
}
END_TEST

START_TEST(test_subject_length)
{
    struct check_request req;
    char *b;

    b = body_with_subject(RL_SUBJECT_MAX);
    parse_ok(b, &req);
    ck_assert_int_eq(req.has_subject, 1);
    ck_assert_uint_eq(strlen(req.subject), RL_SUBJECT_MAX);
    free(b);

    b = body_with_subject(RL_SUBJECT_MAX + 1);
    parse_bad(b);
    free(b);
}
END_TEST

START_TEST(test_subject_absent_null_empty)
{
    struct check_request req;

    parse_ok("{\"route\":\"/a\",\"subject\":null}", &req);
    ck_assert_int_eq(req.has_subject, 0);
    parse_ok("{\"route\":\"/a\"}", &req);
    ck_assert_int_eq(req.has_subject, 0);
    parse_ok("{\"route\":\"/a\",\"subject\":\"\"}", &req);
    ck_assert_int_eq(req.has_subject, 0);
}
END_TEST

START_TEST(test_subject_bad)
{
    parse_bad("{\"route\":\"/a\",\"subject\":5}");
    parse_bad("{\"route\":\"/a\",\"subject\":false}");
    parse_bad("{\"route\":\"/a\",\"subject\":[\"u\"]}");
    parse_bad("{\"route\":\"/a\",\"subject\":\"u\\u0000v\"}");
}
END_TEST

/* Costs that are accepted, and the cost they mean. */
static const struct {
    const char *cost;
    long long want;
} good_costs[] = {
    { NULL, 1 },
    { "null", 1 },
    { "1", 1 },
    { "1000000", 1000000 },
    { "1000000.0", 1000000 },
    { "7.0", 7 },
    { "1e3", 1000 },
    { "250", 250 },
};

START_TEST(test_cost_good)
{
    struct check_request req;
    char body[128];

    if (good_costs[_i].cost == NULL)
        snprintf(body, sizeof(body), "{\"route\":\"/a\"}");
    else
        snprintf(body, sizeof(body), "{\"route\":\"/a\",\"cost\":%s}",
            good_costs[_i].cost);
    parse_ok(body, &req);
    ck_assert_int_eq(req.cost, good_costs[_i].want);
}
END_TEST

/* Costs refused: not a whole number from 1 to 1000000.  0 and negative
 * costs used to count as 1. */
static const char *const bad_costs[] = {
    "0", "-0", "-5", "-2.0", "0.0", "-1e3", "-9223372036854775808",
    "-99999999999999999999",
    "1000001", "1000000.5", "2.5", "0.5", "1e7", "1e300",
    "9223372036854775807", "99999999999999999999",
    "\"3\"", "\"x\"", "true", "[3]", "{\"n\":3}",
};

START_TEST(test_cost_bad)
{
    struct check_request req;
    char body[128], err[128];

    snprintf(body, sizeof(body), "{\"route\":\"/a\",\"cost\":%s}",
        bad_costs[_i]);
    parse_bad(body);
    /* The reason names the field, whichever path refused it. */
    ck_assert_int_eq(request_parse_check(body, strlen(body), &req, err,
        sizeof(err)), -1);
    ck_assert_msg(strncmp(err, "\"cost\" ", 7) == 0, "%s: %s", body, err);
}
END_TEST

/* Why a cost is refused. */
START_TEST(test_cost_reasons)
{
    static const struct {
        const char *cost, *err;
    } cases[] = {
        { "0", "\"cost\" must be at least 1 (a whole number from 1 to "
          "1000000; leave it out to count 1)" },
        { "-3", "\"cost\" must be at least 1 (a whole number from 1 to "
          "1000000; leave it out to count 1)" },
        { "-3.0", "\"cost\" must be at least 1 (a whole number from 1 to "
          "1000000; leave it out to count 1)" },
        { "1000001", "\"cost\" is larger than 1000000" },
        { "1.5", "\"cost\" must be a whole number from 1 to 1000000" },
        { "\"x\"", "\"cost\" must be a number: a whole number from 1 to "
          "1000000" },
    };
    struct check_request req;
    char body[128], err[128];
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(body, sizeof(body), "{\"route\":\"/a\",\"cost\":%s}",
            cases[i].cost);
        ck_assert_int_eq(request_parse_check(body, strlen(body), &req, err,
            sizeof(err)), -1);
        ck_assert_str_eq(err, cases[i].err);
    }
}
END_TEST

START_TEST(test_peek)
{
    struct check_request req;

    parse_ok("{\"route\":\"/a\",\"peek\":true}", &req);
    ck_assert_int_eq(req.peek, 1);
    parse_ok("{\"route\":\"/a\",\"peek\":false}", &req);
    ck_assert_int_eq(req.peek, 0);
    parse_ok("{\"route\":\"/a\",\"peek\":null}", &req);
    ck_assert_int_eq(req.peek, 0);
    parse_bad("{\"route\":\"/a\",\"peek\":\"yes\"}");
    parse_bad("{\"route\":\"/a\",\"peek\":1}");
    parse_bad("{\"route\":\"/a\",\"peek\":\"true\"}");
}
END_TEST

START_TEST(test_invalid_json)
{
    parse_bad("{\"route\":\"/a\"");
    parse_bad("{\"route\":/a}");
    parse_bad("{route:\"/a\"}");
    parse_bad("route=/a");
    parse_bad("\"/a\"");
    parse_bad("null");
    parse_bad("42");
}
END_TEST

/* What json-c accepts unless told to be strict, and JSON (RFC 8259) does
 * not: single quotes, trailing commas, comments, leading zeros,
 * capitalised literals. */
START_TEST(test_json_extensions_refused)
{
    parse_bad("{'route':'/a'}");
    parse_bad("{\"route\":\"/a\",}");
    parse_bad("{\"route\":\"/a\" /* comment */}");
    parse_bad("{\"route\":\"/a\" // comment\n}");
    parse_bad("{\"route\":\"/a\",\"cost\":012}");
    parse_bad("{\"route\":\"/a\",\"peek\":True}");
}
END_TEST

/* RFC 8259: every byte below 0x20 inside a string must be escaped;
 * json-c, even strict, takes them raw.  Outside strings only space, tab,
 * CR and LF may stand between tokens. */
START_TEST(test_control_characters)
{
    struct check_request req;
    char body[64], err[256];
    int c, n;

    for (c = 1; c < 0x20; c++) {
        /* In the route, the subject and a member name. */
        n = snprintf(body, sizeof(body), "{\"route\":\"/a%cb\"}", c);
        ck_assert_int_eq(request_parse_check(body, (size_t)n, &req, err,
            sizeof(err)), -1);
        ck_assert_msg(strstr(err, "control character") != NULL,
            "byte 0x%02x: %s", c, err);
        n = snprintf(body, sizeof(body),
            "{\"route\":\"/a\",\"subject\":\"u%c\"}", c);
        ck_assert_int_eq(request_parse_check(body, (size_t)n, &req, err,
            sizeof(err)), -1);
        ck_assert_msg(strstr(err, "control character") != NULL,
            "byte 0x%02x: %s", c, err);
        n = snprintf(body, sizeof(body), "{\"x%c\":1,\"route\":\"/a\"}", c);
        ck_assert_int_eq(request_parse_check(body, (size_t)n, &req, err,
            sizeof(err)), -1);
        /* Escaped, the same character is fine. */
        n = snprintf(body, sizeof(body), "{\"route\":\"/a\\u%04xb\"}", c);
        ck_assert_int_eq(request_parse_check(body, (size_t)n, &req, err,
            sizeof(err)), 0);
        ck_assert_int_eq((unsigned char)req.route[2], c);
    }
    /* After an escaped quote or backslash the string goes on (or ends). */
    parse_bad("{\"route\":\"/a\\\"\x01\"}");
    parse_bad("{\"route\":\"/a\\\\\",\"subject\":\"\x1f\"}");
    parse_ok("{\"route\":\"/a\\\\\",\"subject\":\"\\\"\"}", &req);
    ck_assert_str_eq(req.route, "/a\\");
    ck_assert_str_eq(req.subject, "\"");
    parse_ok("{\"route\":\"/a\\tb\\n\"}", &req);
    ck_assert_str_eq(req.route, "/a\tb");
    /* DEL is no control character to JSON. */
    parse_ok("{\"route\":\"/a\x7f\"}", &req);
    ck_assert_str_eq(req.route, "/a\x7f");
    /* Between tokens: JSON's white space only. */
    parse_ok("{\n\t\"route\" :\r\n\"/a\"\t}", &req);
    ck_assert_str_eq(req.route, "/a");
    parse_bad("{\"route\":\v\"/a\"}");
    parse_bad("{\"route\":\f\"/a\"}");
    parse_bad("{\"route\":\x01\"/a\"}");
    parse_bad("{\"route\":\"/a\"}\v");
}
END_TEST

START_TEST(test_trailing_garbage)
{
    parse_bad("{\"route\":\"/a\"} x");
    parse_bad("{\"route\":\"/a\"}}");
    parse_bad("{\"route\":\"/a\"}{\"route\":\"/b\"}");
    parse_bad("{\"route\":\"/a\"}\n,");
}
END_TEST

START_TEST(test_surrounding_whitespace)
{
    struct check_request req;

    parse_ok("{\"route\":\"/a\"}  \r\n\t", &req);
    ck_assert_str_eq(req.route, "/a");
    parse_ok("\n  {\"route\":\"/b\"}\n", &req);
    ck_assert_str_eq(req.route, "/b");
}
END_TEST

START_TEST(test_top_level_array)
{
    parse_bad("[{\"route\":\"/a\"}]");
    parse_bad("[]");
}
END_TEST

START_TEST(test_empty_body)
{
    struct check_request req;
    char err[256] = "";

    ck_assert_int_eq(request_parse_check("", 0, &req, err, sizeof(err)), -1);
    ck_assert_str_ne(err, "");
    /* The length counts, not a NUL: nothing is read past len. */
    ck_assert_int_eq(request_parse_check("{\"route\":\"/a\"}", 0, &req, err,
        sizeof(err)), -1);
    parse_bad("   ");
}
END_TEST

START_TEST(test_length_is_respected)
{
    static const char body[] = "{\"route\":\"/a\"}GARBAGE";
    struct check_request req;
    char err[256];

    ck_assert_int_eq(request_parse_check(body, 14, &req, err, sizeof(err)), 0);
    ck_assert_str_eq(req.route, "/a");
    ck_assert_int_eq(request_parse_check(body, 13, &req, err, sizeof(err)),
        -1);
}
END_TEST

START_TEST(test_nul_byte_in_body)
{
    static const char b1[] = "{\"route\":\"/a\"}\0";
    static const char b2[] = "{\"route\":\0\"/a\"}";
    static const char b3[] = "{\"route\":\"/a\0b\"}";
    struct check_request req;
    char err[256];

    ck_assert_int_eq(request_parse_check(b1, sizeof(b1) - 1, &req, err,
        sizeof(err)), -1);
    ck_assert_int_eq(request_parse_check(b2, sizeof(b2) - 1, &req, err,
        sizeof(err)), -1);
    ck_assert_int_eq(request_parse_check(b3, sizeof(b3) - 1, &req, err,
        sizeof(err)), -1);
}
END_TEST

START_TEST(test_deep_nesting)
{
    struct check_request req;

    /* Shallow nesting in an unknown member is fine... */
    parse_ok("{\"route\":\"/a\",\"x\":[[{\"y\":[1]}]]}", &req);
    ck_assert_str_eq(req.route, "/a");
    /* ...nesting deeper than 8 is refused. */
    parse_bad("{\"route\":\"/a\",\"x\":[[[[[[[[[1]]]]]]]]]}");
    parse_bad("{\"route\":\"/a\",\"x\":{\"a\":{\"b\":{\"c\":{\"d\":{\"e\":"
        "{\"f\":{\"g\":{\"h\":1}}}}}}}}}");
    parse_bad("[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[");
}
END_TEST

START_TEST(test_error_does_not_echo_body)
{
    struct check_request req;
    char err[256];

    ck_assert_int_eq(parse("{\"route\":\"SECRETROUTE\",\"cost\":\"SECRETCOST\"}",
        &req, err, sizeof(err)), -1);
    ck_assert_ptr_null(strstr(err, "SECRET"));
    ck_assert_int_eq(parse("{\"route\":\"SECRETROUTE\" SECRETJUNK", &req, err,
        sizeof(err)), -1);
    ck_assert_ptr_null(strstr(err, "SECRET"));
}
END_TEST

START_TEST(test_api_key_x_api_key_wins)
{
    const char *key = NULL;

    ck_assert_int_eq(request_api_key("k1", "Bearer k2", &key), 2);
    ck_assert_ptr_nonnull(key);
    ck_assert_int_eq(strncmp(key, "k1", 2), 0);
    ck_assert_int_eq(request_api_key("abc", NULL, &key), 3);
    ck_assert_int_eq(strncmp(key, "abc", 3), 0);
}
END_TEST

START_TEST(test_api_key_bearer)
{
    const char *key = NULL;

    ck_assert_int_eq(request_api_key(NULL, "Bearer xyz", &key), 3);
    ck_assert_int_eq(strncmp(key, "xyz", 3), 0);
    key = NULL;
    ck_assert_int_eq(request_api_key(NULL, "bearer xyz", &key), 3);
    ck_assert_int_eq(strncmp(key, "xyz", 3), 0);
    key = NULL;
    ck_assert_int_eq(request_api_key(NULL, "BEARER  xyz", &key), 3);
    ck_assert_int_eq(strncmp(key, "xyz", 3), 0);
    /* An empty X-API-Key does not hide the Authorization header. */
    key = NULL;
    ck_assert_int_eq(request_api_key("", "Bearer k2", &key), 2);
    ck_assert_int_eq(strncmp(key, "k2", 2), 0);
}
END_TEST

START_TEST(test_api_key_none)
{
    const char *key = NULL;

    ck_assert_int_eq(request_api_key(NULL, "Basic abc", &key), 0);
    ck_assert_int_eq(request_api_key(NULL, "Bearerxyz", &key), 0);
    ck_assert_int_eq(request_api_key(NULL, "Bearer ", &key), 0);
    ck_assert_int_eq(request_api_key(NULL, "Bearer", &key), 0);
    ck_assert_int_eq(request_api_key(NULL, "", &key), 0);
    ck_assert_int_eq(request_api_key("", "", &key), 0);
    ck_assert_int_eq(request_api_key("", NULL, &key), 0);
    ck_assert_int_eq(request_api_key(NULL, NULL, &key), 0);
}
END_TEST

START_TEST(test_api_key_length)
{
    char k[RL_KEY_MAX + 16], auth[RL_KEY_MAX + 32];
    const char *key = NULL;

    memset(k, 'k', RL_KEY_MAX);
    k[RL_KEY_MAX] = '\0';
    ck_assert_int_eq(request_api_key(k, NULL, &key), RL_KEY_MAX);
    ck_assert_ptr_eq(key, k);
    snprintf(auth, sizeof(auth), "Bearer %s", k);
    ck_assert_int_eq(request_api_key(NULL, auth, &key), RL_KEY_MAX);

    k[RL_KEY_MAX] = 'k';
    k[RL_KEY_MAX + 1] = '\0';
    ck_assert_int_eq(request_api_key(k, NULL, &key), -1);
    snprintf(auth, sizeof(auth), "Bearer %s", k);
    ck_assert_int_eq(request_api_key(NULL, auth, &key), -1);
}
END_TEST

START_TEST(test_api_key_trailing_space)
{
    char k[RL_KEY_MAX + 16];
    const char *key = NULL;

    ck_assert_int_eq(request_api_key("abc \t\r\n", NULL, &key), 3);
    ck_assert_int_eq(request_api_key(NULL, "Bearer abc  ", &key), 3);
    ck_assert_int_eq(strncmp(key, "abc", 3), 0);
    /* Trailing white space does not count towards the bound. */
    memset(k, 'k', RL_KEY_MAX);
    strcpy(k + RL_KEY_MAX, "   ");
    ck_assert_int_eq(request_api_key(k, NULL, &key), RL_KEY_MAX);
}
END_TEST

static const struct {
    const char *in;
    const char *want;           /* NULL: refused */
} norm_cases[] = {
    { "/protected/index.html", "/protected/index.html" },
    { "/%70rotected/index.html", "/protected/index.html" },
    { "/%70%72otected/x", "/protected/x" },
    { "//protected//x", "/protected/x" },
    { "/a/../protected/x", "/protected/x" },
    { "/./protected/./x", "/protected/x" },
    { "/%2e%2e/protected", "/protected" },
    { "/../../protected", "/protected" },
    { "/a/b/..", "/a/" },
    { "/a/.", "/a/" },
    { "/", "/" },
    { "/..", "/" },
    { "/a%2Fb", "/a%2Fb" },
    { "/a%2fb", "/a%2Fb" },
    { "/a%20b", "/a b" },
    { "/a..b/.c", "/a..b/.c" },
    { "/a%00b", NULL },
    { "/a%zzb", NULL },
    { "/a%2", NULL },
    { "/a%", NULL },
    { "relative", NULL },
    { "", NULL },
};

START_TEST(test_normalize_path)
{
    char out[64];
    const char *in = norm_cases[_i].in;
    int n = request_normalize_path(in, strlen(in), out, sizeof(out));

    if (norm_cases[_i].want == NULL) {
        ck_assert_msg(n == -1, "\"%s\" gave \"%s\"", in, out);
        return;
    }
    ck_assert_int_eq(n, (int)strlen(norm_cases[_i].want));
    ck_assert_str_eq(out, norm_cases[_i].want);
}
END_TEST

START_TEST(test_normalize_path_bounds)
{
    char out[8];

    ck_assert_int_eq(request_normalize_path("/abcdef", 7, out, sizeof(out)),
        7);
    ck_assert_int_eq(request_normalize_path("/abcdefg", 8, out, sizeof(out)),
        -1);
    /* Decoding only shortens, but "%2F" must still fit. */
    ck_assert_int_eq(request_normalize_path("/abc%2F", 7, out, sizeof(out)),
        7);
    ck_assert_int_eq(request_normalize_path("/abcd%2F", 8, out, sizeof(out)),
        -1);
}
END_TEST

/*
 * The fast path and json-c agree.  Random bodies are put together from
 * pieces that the fast path reads (flat objects, plain strings, small
 * integers, true, false, null) and pieces that it leaves to json-c
 * (escapes, non-ASCII, fractions, exponents, nesting, odd white space,
 * names given twice, broken syntax); every body must get the same answer
 * from request_parse_check() as from request_parse_check_json() alone:
 * the same verdict, the same fields, the same reason.
 */
static unsigned long fast_seed = 12345;

static unsigned
fast_rand(unsigned n)
{
    fast_seed = fast_seed * 6364136223846793005UL + 1442695040888963407UL;
    return (unsigned)(fast_seed >> 33) % n;
}

static const char *const fast_spaces[] = {
    "", "", "", " ", "  ", "\t", "\n", "\r\n", "\v", "\f",
};
static const char *const fast_names[] = {
    "route", "route", "subject", "subject", "cost", "peek", "x", "",
    "Route", "route ", "r\\u006fute", "subj", "pee\\u006b", "c\\nost",
    "reserve", "reserv\\u0065",
};
static const char *const fast_values[] = {
    "\"/a\"", "\"/bench\"", "\"  /b  \"", "\"\"", "\" \"", "\"user-42\"",
    "\"/\xc3\xbc\"", "\"/a\\n\"", "\"\\u0041\"", "\"/x\ty\"", "\"/a\\\"b\"",
    "\"\\u0000\"", "\"/\x7f\"", "0", "-0", "1", "-1", "5", "999999999",
    "1000000", "1000001", "1234567890", "-999999999", "1.0", "1e2", "01",
    "-", "1.5", "2E0", "1.", "true", "false", "null", "tru", "nul",
    "falsey", "{}", "[]", "{\"a\":1}", "[1,2]", "\"/a", "'/a'",
};

/* Values that make a valid body, for each name (route, subject, cost,
 * peek, reserve, another). */
static const char *const fast_good[6][4] = {
    { "\"/a\"", "\"/bench\"", "\"  /b c \"", "\"/v1/x?y=1\"" },
    { "\"user-42\"", "\"\"", "null", "\"a b\"" },
    { "1", "3", "1000000", "null" },
    { "true", "false", "null", "true" },
    { "true", "false", "null", "true" },
    { "1", "\"z\"", "null", "false" },
};
static const char *const fast_good_names[6] = {
    "route", "subject", "cost", "peek", "reserve", "other",
};

/* A string of n bytes of c, quoted, into buf. */
static void
fast_long(char *buf, size_t size, size_t n, char c)
{
    size_t i;

    if (n + 3 > size)
        n = size - 3;
    buf[0] = '"';
    for (i = 0; i < n; i++)
        buf[1 + i] = c;
    buf[1 + n] = '"';
    buf[2 + n] = '\0';
}

static void
fast_body(char *b, size_t size)
{
    char lv[700];
    int i, members = (int)fast_rand(5);
    size_t n = 0;

#define PUT(str) do { \
        const char *put_s = (str); \
        size_t put_n = strlen(put_s); \
        if (n + put_n + 1 < size) { \
            memcpy(b + n, put_s, put_n); \
            n += put_n; \
        } \
    } while (0)
#define SP() PUT(fast_spaces[fast_rand( \
        sizeof(fast_spaces) / sizeof(fast_spaces[0]))])

    SP();
    if (fast_rand(30) != 0)
        PUT("{");
    /* Half the bodies are mostly valid: a route first, then members of
     * the right types, now and then one of anything. */
    if (fast_rand(2) == 0) {
        int k;

        PUT("\"route\"");
        SP();
        PUT(":");
        SP();
        PUT(fast_good[0][fast_rand(4)]);
        for (i = 0; i < members; i++) {
            SP();
            PUT(",");
            SP();
            k = (int)fast_rand(6);
            PUT("\"");
            PUT(fast_good_names[k]);
            PUT("\":");
            SP();
            if (fast_rand(10) == 0)
                PUT(fast_values[fast_rand(sizeof(fast_values) /
                    sizeof(fast_values[0]))]);
            else
                PUT(fast_good[k][fast_rand(4)]);
        }
        members = 0;
    }
    for (i = 0; i < members; i++) {
        SP();
        PUT("\"");
        PUT(fast_names[fast_rand(sizeof(fast_names) /
            sizeof(fast_names[0]))]);
        PUT("\"");
        SP();
        if (fast_rand(40) != 0)
            PUT(":");
        SP();
        switch (fast_rand(12)) {
        case 0:
            fast_long(lv, sizeof(lv), 250 + fast_rand(300), 'r');
            PUT(lv);
            break;
        case 1:
            fast_long(lv, sizeof(lv), 505 + fast_rand(15), '/');
            PUT(lv);
            break;
        default:
            PUT(fast_values[fast_rand(sizeof(fast_values) /
                sizeof(fast_values[0]))]);
        }
        SP();
        if (i + 1 < members || fast_rand(40) == 0)
            PUT(",");
    }
    SP();
    if (fast_rand(30) != 0)
        PUT("}");
    SP();
    if (fast_rand(40) == 0)
        PUT("x");
    b[n] = '\0';
    /* Now and then cut short. */
    if (n > 0 && fast_rand(30) == 0)
        b[fast_rand((unsigned)n)] = '\0';
#undef PUT
#undef SP
}

START_TEST(test_fast_path_agrees)
{
    char body[2048], err1[256], err2[256];
    struct check_request r1, r2;
    int i, rc1, rc2, ok = 0;

    for (i = 0; i < 200000; i++) {
        fast_body(body, sizeof(body));
        err1[0] = err2[0] = '\0';
        rc1 = request_parse_check(body, strlen(body), &r1, err1,
            sizeof(err1));
        rc2 = request_parse_check_json(body, strlen(body), &r2, err2,
            sizeof(err2));
        ck_assert_msg(rc1 == rc2, "body %s: %d against json-c's %d (%s%s)",
            body, rc1, rc2, err1, err2);
        if (rc1 == 0) {
            ok++;
            ck_assert_msg(strcmp(r1.route, r2.route) == 0 &&
                strcmp(r1.subject, r2.subject) == 0 &&
                r1.has_subject == r2.has_subject && r1.cost == r2.cost &&
                r1.peek == r2.peek && r1.reserve == r2.reserve,
                "body %s: fields differ", body);
        } else
            ck_assert_msg(strcmp(err1, err2) == 0, "body %s: %s against "
                "json-c's %s", body, err1, err2);
    }
    /* Both kinds were there in numbers. */
    ck_assert_int_ge(ok, 5000);
    ck_assert_int_le(ok, 195000);
}
END_TEST

/* A body cut short inside a \u surrogate pair leaves nothing behind for
 * the next body (json-c's tokener, kept across bodies, would have put a
 * U+FFFD before the next one's first \u escape). */
START_TEST(test_cut_body_leaves_nothing)
{
    static const char *const cut[] = {
        "{\"route\":\"/\\ud800",
        "{\"route\":\"/\\ud800\\u",
        "{\"route\":\"/a\", \"x\":\"\\ud83d",
    };
    struct check_request req;
    char err[256];
    size_t i;

    for (i = 0; i < sizeof(cut) / sizeof(cut[0]); i++) {
        ck_assert_int_eq(parse(cut[i], &req, err, sizeof(err)), -1);
        parse_ok("{\"route\":\"/\\u00e9\"}", &req);
        ck_assert_str_eq(req.route, "/\xc3\xa9");
    }
}
END_TEST

/* Bodies the fast path reads, with what they mean. */
START_TEST(test_fast_path_plain)
{
    struct check_request req;

    parse_ok("{\"route\":\"/bench\",\"subject\":\"bench\"}", &req);
    ck_assert_str_eq(req.route, "/bench");
    ck_assert_str_eq(req.subject, "bench");
    ck_assert_int_eq(req.has_subject, 1);
    ck_assert_int_eq(req.cost, 1);
    ck_assert_int_eq(req.peek, 0);
    parse_ok(" { \"peek\" : true , \"cost\" : 999999 , \"x\" : null ,"
        " \"route\" : \"  /a b  \" , \"subject\" : \"\" }\r\n", &req);
    ck_assert_str_eq(req.route, "/a b");
    ck_assert_int_eq(req.has_subject, 0);
    ck_assert_int_eq(req.cost, 999999);
    ck_assert_int_eq(req.peek, 1);
    parse_ok("{\"route\":\"/a\",\"cost\":7,\"subject\":null,"
        "\"peek\":false}", &req);
    ck_assert_int_eq(req.cost, 7);
    ck_assert_int_eq(req.has_subject, 0);
    ck_assert_int_eq(req.peek, 0);
    /* A name given twice: json-c's answer, the last one. */
    parse_ok("{\"route\":\"/a\",\"route\":\"/b\"}", &req);
    ck_assert_str_eq(req.route, "/b");
}
END_TEST

Suite *
request_suite(void)
{
    Suite *s = suite_create("request");
    TCase *tc;

    tc = tcase_create("body");
    tcase_add_test(tc, test_valid_body);
    tcase_add_test(tc, test_minimal_body_defaults);
    tcase_add_test(tc, test_invalid_json);
    tcase_add_test(tc, test_json_extensions_refused);
    tcase_add_test(tc, test_control_characters);
    tcase_add_test(tc, test_trailing_garbage);
    tcase_add_test(tc, test_surrounding_whitespace);
    tcase_add_test(tc, test_top_level_array);
    tcase_add_test(tc, test_empty_body);
    tcase_add_test(tc, test_length_is_respected);
    tcase_add_test(tc, test_nul_byte_in_body);
    tcase_add_test(tc, test_deep_nesting);
    tcase_add_test(tc, test_error_does_not_echo_body);
    suite_add_tcase(s, tc);

    tc = tcase_create("route");
    tcase_add_test(tc, test_route_trimmed);
    tcase_add_test(tc, test_route_empty);
    tcase_add_test(tc, test_route_length);
    tcase_add_test(tc, test_route_missing_or_not_string);
    tcase_add_test(tc, test_route_nul);
    suite_add_tcase(s, tc);

    tc = tcase_create("subject");
    tcase_add_test(tc, test_subject_length);
    tcase_add_test(tc, test_subject_absent_null_empty);
    tcase_add_test(tc, test_subject_bad);
    suite_add_tcase(s, tc);

    tc = tcase_create("cost_peek");
    tcase_add_loop_test(tc, test_cost_good, 0,
        (int)(sizeof(good_costs) / sizeof(good_costs[0])));
    tcase_add_loop_test(tc, test_cost_bad, 0,
        (int)(sizeof(bad_costs) / sizeof(bad_costs[0])));
    tcase_add_test(tc, test_cost_reasons);
    tcase_add_test(tc, test_peek);
    suite_add_tcase(s, tc);

    tc = tcase_create("fast_path");
    tcase_add_test(tc, test_fast_path_agrees);
    tcase_add_test(tc, test_fast_path_plain);
    tcase_add_test(tc, test_cut_body_leaves_nothing);
    suite_add_tcase(s, tc);

    tc = tcase_create("api_key");
    tcase_add_test(tc, test_api_key_x_api_key_wins);
    tcase_add_test(tc, test_api_key_bearer);
    tcase_add_test(tc, test_api_key_none);
    tcase_add_test(tc, test_api_key_length);
    tcase_add_test(tc, test_api_key_trailing_space);
    tcase_add_loop_test(tc, test_normalize_path, 0,
        (int)(sizeof(norm_cases) / sizeof(norm_cases[0])));
    tcase_add_test(tc, test_normalize_path_bounds);
    suite_add_tcase(s, tc);
    return s;
}
