/*
 * check_response.c -- tests of src/response.c: the status, headers and
 * JSON body of a decision, JSON errors, and header hygiene.
 *
 * The RateLimit and RateLimit-Policy fields are checked with a small parser
 * of the Structured Field Lists they must be (RFC 8941): items that are
 * sf-strings with ";key=integer" parameters, separated by ", ".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <json-c/json.h>

#include <check.h>              /* t/check.h: the suites, then Check */

#include "ratelimit.h"
#include "fixtures.h"

#define SF_MAX_ITEMS 8
#define SF_MAX_PARAMS 4

struct sf_param {
    char key[16];
    long long value;
};

struct sf_item {
    char name[RL_NAME_MAX];
    int nparams;
    struct sf_param params[SF_MAX_PARAMS];
};

/*
 * Parses s as a List of sf-string items with integer parameters into items.
 * Returns the number of items, or -1 (with the reason in why) when s is not
 * such a list.
 */
static int
sf_list_parse(const char *s, struct sf_item *items, int max, const char **why)
{
    const char *p = s;
    int n = 0;
    size_t len;

    *why = "";
    for (;;) {
        struct sf_item *it;

        if (n == max) {
            *why = "too many items";
            return -1;
        }
        it = &items[n];
        memset(it, 0, sizeof(*it));
        if (*p != '"') {
            *why = "an item is not an sf-string";
            return -1;
        }
        p++;
        len = 0;
        while (*p != '"') {
            if (*p == '\\') {
                p++;
                if (*p != '"' && *p != '\\') {
                    *why = "bad escape in an sf-string";
                    return -1;
                }
            } else if (*p < 0x20 || *p > 0x7e) {
                *why = "an sf-string holds a byte outside 0x20-0x7e";
                return -1;
            }
            if (len + 1 >= sizeof(it->name)) {
                *why = "name too long";
                return -1;
            }
            it->name[len++] = *p++;
        }
        p++;
        while (*p == ';') {
            struct sf_param *pa;
            const char *q;
            int digits = 0;
            char *end;

            p++;
            if (it->nparams == SF_MAX_PARAMS) {
                *why = "too many parameters";
                return -1;
            }
            pa = &it->params[it->nparams++];
            len = 0;
            if (!((*p >= 'a' && *p <= 'z') || *p == '*')) {
                *why = "a parameter key does not start with lcalpha or '*'";
                return -1;
            }
            while ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
                *p == '_' || *p == '-' || *p == '.' || *p == '*') {
                if (len + 1 >= sizeof(pa->key)) {
                    *why = "parameter key too long";
                    return -1;
                }
                pa->key[len++] = *p++;
            }
            if (*p != '=') {
                *why = "a parameter has no '=' value";
                return -1;
            }
            p++;
            q = *p == '-' ? p + 1 : p;
            while (q[digits] >= '0' && q[digits] <= '9')
                digits++;
            if (digits < 1 || digits > 15) {
                *why = "a parameter value is not an sf-integer";
                return -1;
            }
            pa->value = strtoll(p, &end, 10);
            p = end;
        }
        n++;
        if (*p == '\0')
            return n;
        if (p[0] != ',' || p[1] != ' ') {
            *why = "items are not separated by \", \"";
            return -1;
        }
        p += 2;
    }
}

/* The value of parameter key of it; fails the test when it is missing. */
static long long
sf_param(const struct sf_item *it, const char *key)
{
    int i;

    for (i = 0; i < it->nparams; i++)
        if (strcmp(it->params[i].key, key) == 0)
            return it->params[i].value;
    ck_abort_msg("item \"%s\" has no parameter %s", it->name, key);
    return 0;
}

/* Copies the value of header name (the first of that name) into out.
 * Returns how many lines carry that name. */
static int
header_value(const struct rl_response *r, const char *name, char *out,
    size_t outlen)
{
    const char *p = r->headers.data, *eol;
    size_t nlen = strlen(name);
    int count = 0;

    out[0] = '\0';
    if (p == NULL)
        return 0;
    while (*p != '\0') {
        eol = strstr(p, "\r\n");
        ck_assert_msg(eol != NULL, "header block does not end in CRLF: %s",
            r->headers.data);
        if ((size_t)(eol - p) > nlen + 1 && strncasecmp(p, name, nlen) == 0 &&
            p[nlen] == ':' && p[nlen + 1] == ' ') {
            if (count == 0)
                snprintf(out, outlen, "%.*s", (int)(eol - p - nlen - 2),
                    p + nlen + 2);
            count++;
        }
        p = eol + 2;
    }
    return count;
}

/* The value of a header that must appear exactly once. */
static void
header_once(const struct rl_response *r, const char *name, char *out,
    size_t outlen)
{
    ck_assert_msg(header_value(r, name, out, outlen) == 1,
        "header %s is not there exactly once in:\n%s", name, r->headers.data);
}

/* Parses the RateLimit-Policy and RateLimit headers into the two arrays;
 * both must be valid lists naming the same limits.  Returns the count. */
static int
sf_headers(const struct rl_response *r, struct sf_item *policy,
    struct sf_item *state)
{
    char v[1024];
    const char *why;
    int np, ns, i;

    header_once(r, "RateLimit-Policy", v, sizeof(v));
    np = sf_list_parse(v, policy, SF_MAX_ITEMS, &why);
    ck_assert_msg(np > 0, "RateLimit-Policy \"%s\": %s", v, why);
    header_once(r, "RateLimit", v, sizeof(v));
    ns = sf_list_parse(v, state, SF_MAX_ITEMS, &why);
    ck_assert_msg(ns > 0, "RateLimit \"%s\": %s", v, why);
    ck_assert_int_eq(np, ns);
    for (i = 0; i < np; i++)
        ck_assert_str_eq(policy[i].name, state[i].name);
    return np;
}

static struct json_object *
body_json(const struct rl_response *r)
{
    struct json_object *o;

    ck_assert_ptr_nonnull(r->body.data);
    o = json_tokener_parse(r->body.data);
    ck_assert_msg(o != NULL, "body is not JSON: %s", r->body.data);
    ck_assert_msg(json_object_is_type(o, json_type_object),
        "body is not an object: %s", r->body.data);
    return o;
}

static struct json_object *
member(struct json_object *o, const char *key, enum json_type type)
{
    struct json_object *v;

    ck_assert_msg(json_object_object_get_ex(o, key, &v), "no \"%s\" in %s",
        key, json_object_to_json_string(o));
    ck_assert_msg(json_object_is_type(v, type), "\"%s\" has the wrong type "
        "in %s", key, json_object_to_json_string(o));
    return v;
}

static long long
member_int(struct json_object *o, const char *key)
{
    return (long long)json_object_get_int64(member(o, key, json_type_int));
}

static int
member_bool(struct json_object *o, const char *key)
{
    return json_object_get_boolean(member(o, key, json_type_boolean));
}

static const char *
member_str(struct json_object *o, const char *key)
{
    return json_object_get_string(member(o, key, json_type_string));
}

/* A rule with one token bucket "default" of capacity 10, 2 per second. */
static void
rule_one(struct rl_rule *rule)
{
    fixture_rule_init(rule, 1, "", 0);
    rule->nlimits = 1;
    fixture_limit_tb(&rule->limits[0], 1, "default", 10, 2.0);
}

/* "per_second": token bucket 5 at 5/s; "per_minute": 100 per 60 s. */
static void
rule_two(struct rl_rule *rule)
{
    fixture_rule_init(rule, 2, "", 0);
    rule->nlimits = 2;
    fixture_limit_tb(&rule->limits[0], 1, "per_second", 5, 5.0);
    fixture_limit_sw(&rule->limits[1], 2, "per_minute", 100, 60);
}

#define NOW_MS 1700000000999LL  /* now_s is 1700000000 */
#define NOW_S 1700000000LL

START_TEST(test_allowed_single)
{
    struct rl_rule rule;
    struct rl_plan plan;
    struct rl_decision d;
    struct rl_response r;
    struct sf_item policy[SF_MAX_ITEMS], st[SF_MAX_ITEMS];
    struct json_object *o;
    char v[256];

    rule_one(&rule);
    fixture_plan_of(&plan, &rule);
    fixture_decision(&d, 1, NOW_MS, 1);
    fixture_state(&d.st[0], 1, 10, 9, 2001, 0);
    response_init(&r);
    response_decision(&r, &plan, &d);

    ck_assert_int_eq(r.status, 200);
    header_once(&r, "X-RateLimit-Limit", v, sizeof(v));
    ck_assert_str_eq(v, "10");
    header_once(&r, "X-RateLimit-Remaining", v, sizeof(v));
    ck_assert_str_eq(v, "9");
    header_once(&r, "X-RateLimit-Reset", v, sizeof(v));
    ck_assert_int_eq(strtoll(v, NULL, 10), NOW_S + 3);
    ck_assert_int_eq(header_value(&r, "Retry-After", v, sizeof(v)), 0);

    header_once(&r, "RateLimit-Policy", v, sizeof(v));
    ck_assert_str_eq(v, "\"default\";q=10;w=5");
    header_once(&r, "RateLimit", v, sizeof(v));
    ck_assert_str_eq(v, "\"default\";r=9;t=3");
    ck_assert_int_eq(sf_headers(&r, policy, st), 1);
    ck_assert_str_eq(policy[0].name, "default");
    ck_assert_int_eq(sf_param(&policy[0], "q"), 10);
    ck_assert_int_eq(sf_param(&policy[0], "w"), 5);
    ck_assert_int_eq(sf_param(&st[0], "r"), 9);
    ck_assert_int_eq(sf_param(&st[0], "t"), 3);

    o = body_json(&r);
    ck_assert_int_eq(member_bool(o, "allowed"), 1);
    ck_assert_int_eq(member_int(o, "limit"), 10);
    ck_assert_int_eq(member_int(o, "remaining"), 9);
    ck_assert_int_eq(member_int(o, "reset_at"), NOW_S + 3);
    ck_assert_int_eq(member_int(o, "retry_after"), 0);
    ck_assert_int_eq(member_int(o, "retry_after_ms"), 0);
    ck_assert_str_eq(member_str(o, "algorithm"), "token_bucket");
    ck_assert_int_eq(json_object_object_get_ex(o, "error", NULL), 0);
    ck_assert_int_eq(json_object_object_get_ex(o, "message", NULL), 0);
    ck_assert_ptr_null(r.error);
    ck_assert_int_eq(json_object_object_get_ex(o, "policies", NULL), 0);
    ck_assert_int_eq(json_object_object_get_ex(o, "denied_by", NULL), 0);
    ck_assert_int_eq(json_object_object_get_ex(o, "shadow_denied", NULL), 0);
    json_object_put(o);
    response_free(&r);
}
END_TEST

START_TEST(test_zero_remaining_kept)
{
    struct rl_rule rule;
    struct rl_plan plan;
    struct rl_decision d;
    struct rl_response r;
    struct sf_item policy[SF_MAX_ITEMS], st[SF_MAX_ITEMS];
    struct json_object *o;
    char v[256];

    rule_one(&rule);
    fixture_plan_of(&plan, &rule);
    fixture_decision(&d, 1, NOW_MS, 1);
    fixture_state(&d.st[0], 1, 10, 0, 5000, 0);
    response_init(&r);
    response_decision(&r, &plan, &d);
    ck_assert_int_eq(r.status, 200);
    header_once(&r, "X-RateLimit-Remaining", v, sizeof(v));
    ck_assert_str_eq(v, "0");
    ck_assert_int_eq(sf_headers(&r, policy, st), 1);
    ck_assert_int_eq(sf_param(&st[0], "r"), 0);
    ck_assert_int_eq(sf_param(&st[0], "t"), 5);
    o = body_json(&r);
    ck_assert_int_eq(member_int(o, "remaining"), 0);
    ck_assert_int_eq(member_int(o, "retry_after"), 0);
    json_object_put(o);
    response_free(&r);
}
END_TEST

START_TEST(test_denied)
{
    struct rl_rule rule;
    struct rl_plan plan;
    struct rl_decision d;
    struct rl_response r;
    struct sf_item policy[SF_MAX_ITEMS], st[SF_MAX_ITEMS];
    struct json_object *o, *arr;
    char v[256];

    rule_one(&rule);
    fixture_plan_of(&plan, &rule);
    fixture_decision(&d, 0, NOW_MS, 1);
    fixture_state(&d.st[0], 0, 10, 0, 5000, 1500);
    response_init(&r);
    response_decision(&r, &plan, &d);
    ck_assert_int_eq(r.status, 429);
    header_once(&r, "Retry-After", v, sizeof(v));
    ck_assert_str_eq(v, "2");
    header_once(&r, "X-RateLimit-Remaining", v, sizeof(v));
    ck_assert_str_eq(v, "0");
    header_once(&r, "X-RateLimit-Reset", v, sizeof(v));
    ck_assert_int_eq(strtoll(v, NULL, 10), NOW_S + 5);
    ck_assert_int_eq(sf_headers(&r, policy, st), 1);
    ck_assert_int_eq(sf_param(&st[0], "r"), 0);
    ck_assert_int_eq(sf_param(&st[0], "t"), 2);
    o = body_json(&r);
    ck_assert_str_eq(member_str(o, "error"), "rate_limited");
    ck_assert_str_eq(member_str(o, "message"),
        "too many requests for limit \"default\"; try again in 2 s");
    ck_assert_str_eq(r.error, "rate_limited");
    ck_assert_int_eq(member_bool(o, "allowed"), 0);
    ck_assert_int_eq(member_int(o, "remaining"), 0);
    ck_assert_int_eq(member_int(o, "retry_after"), 2);
    ck_assert_int_eq(member_int(o, "retry_after_ms"), 1500);
    arr = member(o, "denied_by", json_type_array);
    ck_assert_uint_eq(json_object_array_length(arr), 1);
    ck_assert_str_eq(json_object_get_string(json_object_array_get_idx(arr, 0)),
        "default");
    ck_assert_int_eq(json_object_object_get_ex(o, "policies", NULL), 0);
    json_object_put(o);
    response_free(&r);
}
END_TEST

/* retry_after_ms, reset_ms, the Retry-After (and retry_after) they give,
 * and the body's retry_after_ms. */
static const struct {
    long long retry_after_ms;
    long long reset_ms;
    long long want;
    long long want_ms;
} retry_cases[] = {
    { 1500, 5000, 2, 1500 },
    { 1000, 5000, 1, 1000 },
    { 1001, 5000, 2, 1001 },
    { 20, 20, 1, 20 },              /* GCRA at 50/s: the next slot */
    { 1, 5000, 1, 1 },
    { 0, 5000, 1, 1 },              /* at least 1 */
    { -1, 4200, -1, -1 },           /* never at this cost: no time to wait */
    { -1, 0, -1, -1 },
    { 3600000, 3600000, 3600, 3600000 },
};

START_TEST(test_retry_after)
{
    struct rl_rule rule;
    struct rl_plan plan;
    struct rl_decision d;
    struct rl_response r;
    struct json_object *o;
    char v[256], want[32];

    rule_one(&rule);
    fixture_plan_of(&plan, &rule);
    fixture_decision(&d, 0, NOW_MS, 1);
    fixture_state(&d.st[0], 0, 10, 0, retry_cases[_i].reset_ms,
        retry_cases[_i].retry_after_ms);
    ck_assert_int_eq(response_retry_after_s(&d.st[0]), retry_cases[_i].want);
    response_init(&r);
    response_decision(&r, &plan, &d);
    ck_assert_int_eq(r.status, 429);
    if (retry_cases[_i].want == -1)
        ck_assert_int_eq(header_value(&r, "Retry-After", v, sizeof(v)), 0);
    else {
        header_once(&r, "Retry-After", v, sizeof(v));
        snprintf(want, sizeof(want), "%lld", retry_cases[_i].want);
        ck_assert_str_eq(v, want);
    }
    o = body_json(&r);
    ck_assert_str_eq(member_str(o, "error"), "rate_limited");
    ck_assert_int_eq(member_int(o, "retry_after"), retry_cases[_i].want);
    ck_assert_int_eq(member_int(o, "retry_after_ms"), retry_cases[_i].want_ms);
    if (retry_cases[_i].want == -1)
        ck_assert_str_eq(member_str(o, "message"), "a request of this cost "
            "can never pass limit \"default\"");
    else if (retry_cases[_i].want_ms < 1000) {
        snprintf(want, sizeof(want), "in %lld ms", retry_cases[_i].want_ms);
        ck_assert_ptr_nonnull(strstr(member_str(o, "message"), want));
    } else {
        snprintf(want, sizeof(want), "in %lld s", retry_cases[_i].want);
        ck_assert_ptr_nonnull(strstr(member_str(o, "message"), want));
    }
    json_object_put(o);
    response_free(&r);
}
END_TEST

/* A sliding window's full reset can lie a window and more ahead; the t of
 * RateLimit never announces more than the policy's w. */
START_TEST(test_effective_window_capped)
{
    struct rl_rule rule;
    struct rl_plan plan;
    struct rl_decision d;
    struct rl_response r;
    struct sf_item policy[SF_MAX_ITEMS], st[SF_MAX_ITEMS];

    memset(&rule, 0, sizeof(rule));
    rule.id = 3;
    rule.nlimits = 1;
    rule.limits[0].id = 1;
    strcpy(rule.limits[0].name, "perminute");
    rule.limits[0].algorithm = RL_ALGO_SLIDING_WINDOW;
    rule.limits[0].limit_count = 8;
    rule.limits[0].window_seconds = 60;
    fixture_plan_of(&plan, &rule);
    fixture_decision(&d, 1, NOW_MS, 1);
    fixture_state(&d.st[0], 1, 8, 7, 105500, 0);
    response_init(&r);
    response_decision(&r, &plan, &d);
    ck_assert_int_eq(sf_headers(&r, policy, st), 1);
    ck_assert_int_eq(sf_param(&policy[0], "w"), 60);
    ck_assert_int_eq(sf_param(&st[0], "t"), 60);
    response_free(&r);

    fixture_state(&d.st[0], 1, 8, 7, 30500, 0);
    response_init(&r);
    response_decision(&r, &plan, &d);
    ck_assert_int_eq(sf_headers(&r, policy, st), 1);
    ck_assert_int_eq(sf_param(&st[0], "t"), 31);
    response_free(&r);
}
END_TEST

START_TEST(test_two_limits)
{
    struct rl_rule rule;
    struct rl_plan plan;
    struct rl_decision d;
    struct rl_response r;
    struct sf_item policy[SF_MAX_ITEMS], st[SF_MAX_ITEMS];
    struct json_object *o, *arr, *p;
    char v[256];

    rule_two(&rule);
    fixture_plan_of(&plan, &rule);
    fixture_decision(&d, 1, NOW_MS, 2);
    fixture_state(&d.st[0], 1, 5, 4, 200, 0);
    fixture_state(&d.st[1], 1, 100, 2, 60000, 0);
    response_init(&r);
    response_decision(&r, &plan, &d);
    ck_assert_int_eq(r.status, 200);

    /* X-RateLimit-* describe the limit with the least remaining. */
    header_once(&r, "X-RateLimit-Limit", v, sizeof(v));
    ck_assert_str_eq(v, "100");
    header_once(&r, "X-RateLimit-Remaining", v, sizeof(v));
    ck_assert_str_eq(v, "2");
    header_once(&r, "X-RateLimit-Reset", v, sizeof(v));
    ck_assert_int_eq(strtoll(v, NULL, 10), NOW_S + 60);

    header_once(&r, "RateLimit-Policy", v, sizeof(v));
    ck_assert_str_eq(v, "\"per_second\";q=5;w=1, \"per_minute\";q=100;w=60");
    header_once(&r, "RateLimit", v, sizeof(v));
    ck_assert_str_eq(v, "\"per_second\";r=4;t=1, \"per_minute\";r=2;t=60");
    ck_assert_int_eq(sf_headers(&r, policy, st), 2);
    ck_assert_str_eq(policy[0].name, "per_second");
    ck_assert_str_eq(policy[1].name, "per_minute");

    o = body_json(&r);
    ck_assert_int_eq(member_bool(o, "allowed"), 1);
    ck_assert_int_eq(member_int(o, "remaining"), 2);
    ck_assert_str_eq(member_str(o, "algorithm"), "sliding_window");
    arr = member(o, "policies", json_type_array);
    ck_assert_uint_eq(json_object_array_length(arr), 2);
    p = json_object_array_get_idx(arr, 0);
    ck_assert_str_eq(member_str(p, "name"), "per_second");
    ck_assert_str_eq(member_str(p, "algorithm"), "token_bucket");
    ck_assert_int_eq(member_int(p, "limit"), 5);
    ck_assert_int_eq(member_int(p, "remaining"), 4);
    ck_assert_int_eq(member_bool(p, "allowed"), 1);
    p = json_object_array_get_idx(arr, 1);
    ck_assert_str_eq(member_str(p, "name"), "per_minute");
    ck_assert_str_eq(member_str(p, "algorithm"), "sliding_window");
    ck_assert_int_eq(member_int(p, "limit"), 100);
    ck_assert_int_eq(member_int(p, "remaining"), 2);
    ck_assert_int_eq(member_int(p, "reset_at"), NOW_S + 60);
    json_object_put(o);
    response_free(&r);
}
END_TEST

START_TEST(test_two_limits_one_denies)
{
    struct rl_rule rule;
    struct rl_plan plan;
    struct rl_decision d;
    struct rl_response r;
    struct sf_item policy[SF_MAX_ITEMS], st[SF_MAX_ITEMS];
    struct json_object *o, *arr;
    char v[256];

    rule_two(&rule);
    fixture_plan_of(&plan, &rule);
    fixture_decision(&d, 0, NOW_MS, 2);
    fixture_state(&d.st[0], 0, 5, 0, 1000, 400);
    fixture_state(&d.st[1], 1, 100, 0, 60000, 0);
    response_init(&r);
    response_decision(&r, &plan, &d);
    ck_assert_int_eq(r.status, 429);
    header_once(&r, "X-RateLimit-Limit", v, sizeof(v));
    ck_assert_str_eq(v, "5");
    header_once(&r, "Retry-After", v, sizeof(v));
    ck_assert_str_eq(v, "1");
    ck_assert_int_eq(sf_headers(&r, policy, st), 2);
    ck_assert_int_eq(sf_param(&st[0], "r"), 0);
    ck_assert_int_eq(sf_param(&st[0], "t"), 1);
    ck_assert_int_eq(sf_param(&st[1], "r"), 0);
    ck_assert_int_eq(sf_param(&st[1], "t"), 60);
    o = body_json(&r);
    ck_assert_int_eq(member_bool(o, "allowed"), 0);
    ck_assert_str_eq(member_str(o, "algorithm"), "token_bucket");
    arr = member(o, "policies", json_type_array);
    ck_assert_uint_eq(json_object_array_length(arr), 2);
    ck_assert_int_eq(member_bool(json_object_array_get_idx(arr, 0),
        "allowed"), 0);
    ck_assert_int_eq(member_bool(json_object_array_get_idx(arr, 1),
        "allowed"), 1);
    arr = member(o, "denied_by", json_type_array);
    ck_assert_uint_eq(json_object_array_length(arr), 1);
    ck_assert_str_eq(json_object_get_string(json_object_array_get_idx(arr, 0)),
        "per_second");
    json_object_put(o);
    response_free(&r);
}
END_TEST

START_TEST(test_policy_window)
{
    static const struct {
        long long capacity;
        double rate;
        long long w;
    } cases[] = {
        { 10, 2.0, 5 }, { 10, 3.0, 4 }, { 1, 10.0, 1 }, { 60, 1.0, 60 },
        { 10, 0.1, 100 }, { 7, 0.5, 14 },
    };
    struct rl_rule rule;
    struct rl_plan plan;
    struct rl_decision d;
    struct rl_response r;
    struct sf_item policy[SF_MAX_ITEMS], st[SF_MAX_ITEMS];
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rule_one(&rule);
        fixture_plan_of(&plan, &rule);
        rule.limits[0].bucket_capacity = cases[i].capacity;
        rule.limits[0].refill_rate = cases[i].rate;
        fixture_decision(&d, 1, NOW_MS, 1);
        fixture_state(&d.st[0], 1, cases[i].capacity, 0, 1000, 0);
        response_init(&r);
        response_decision(&r, &plan, &d);
        ck_assert_int_eq(sf_headers(&r, policy, st), 1);
        ck_assert_msg(sf_param(&policy[0], "w") == cases[i].w,
            "capacity %lld at %g/s: w=%lld, want %lld", cases[i].capacity,
            cases[i].rate, sf_param(&policy[0], "w"), cases[i].w);
        ck_assert_int_eq(sf_param(&policy[0], "q"), cases[i].capacity);
        response_free(&r);
    }
}
END_TEST

START_TEST(test_shadow_denial)
{
    struct rl_rule enforced, shadow;
    struct rl_plan plan;
    struct rl_decision d;
    struct rl_response r;
    struct sf_item policy[SF_MAX_ITEMS], st[SF_MAX_ITEMS];
    struct json_object *o, *arr, *p;
    char v[256];

    /* The enforced limit allows, a shadow limit would deny: 200, and the
     * body says what the shadow limit would have done. */
    rule_one(&enforced);
    rule_one(&shadow);
    shadow.id = 2;
    shadow.shadow = 1;
    strcpy(shadow.limits[0].name, "trial");
    shadow.limits[0].id = 2;
    memset(&plan, 0, sizeof(plan));
    plan.n = 2;
    plan.rule[0] = &enforced;
    plan.limit[0] = &enforced.limits[0];
    strcpy(plan.name[0], "default");
    plan.rule[1] = &shadow;
    plan.limit[1] = &shadow.limits[0];
    strcpy(plan.name[1], "trial");
    fixture_decision(&d, 1, NOW_MS, 2);
    fixture_state(&d.st[0], 1, 10, 6, 2000, 0);
    fixture_state(&d.st[1], 0, 10, 0, 5000, 1000);
    ck_assert_int_eq(limiter_apply_shadow(&plan, &d), 1);
    response_init(&r);
    response_decision(&r, &plan, &d);
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq(header_value(&r, "Retry-After", v, sizeof(v)), 0);
    header_once(&r, "X-RateLimit-Remaining", v, sizeof(v));
    ck_assert_str_eq(v, "6");
    ck_assert_int_eq(sf_headers(&r, policy, st), 2);
    ck_assert_str_eq(policy[1].name, "trial");

    o = body_json(&r);
    ck_assert_int_eq(member_bool(o, "allowed"), 1);
    ck_assert_int_eq(member_int(o, "remaining"), 6);
    ck_assert_int_eq(member_bool(o, "shadow_denied"), 1);
    ck_assert_int_eq(json_object_object_get_ex(o, "denied_by", NULL), 0);
    arr = member(o, "policies", json_type_array);
    ck_assert_uint_eq(json_object_array_length(arr), 2);
    p = json_object_array_get_idx(arr, 1);
    ck_assert_str_eq(member_str(p, "name"), "trial");
    ck_assert_int_eq(member_bool(p, "shadow"), 1);
    ck_assert_int_eq(member_bool(p, "allowed"), 0);
    p = json_object_array_get_idx(arr, 0);
    ck_assert_int_eq(json_object_object_get_ex(p, "shadow", NULL), 0);
    json_object_put(o);
    response_free(&r);
}
END_TEST

START_TEST(test_policy_gcra_fixed_window)
{
    static const struct {
        int algorithm;
        long long count, period_us, burst;
        int calendar;
        long long q, w;
    } cases[] = {
        /* GCRA: burst + 1, earned back in (burst + 1) spacings. */
        { RL_ALGO_GCRA, 10, 1000000, 5, 0, 6, 1 },
        { RL_ALGO_GCRA, 100, 60000000, 0, 0, 1, 1 },
        { RL_ALGO_GCRA, 100, 60000000, 99, 0, 100, 60 },
        { RL_ALGO_GCRA, 1, 100000, 0, 0, 1, 1 },
        { RL_ALGO_GCRA, 3, 1500000, 5, 0, 6, 3 },
        { RL_ALGO_FIXED_WINDOW, 50, 0, 0, RL_CAL_MINUTE, 50, 60 },
        { RL_ALGO_FIXED_WINDOW, 50, 0, 0, RL_CAL_HOUR, 50, 3600 },
        { RL_ALGO_FIXED_WINDOW, 50, 0, 0, RL_CAL_DAY, 50, 86400 },
        { RL_ALGO_FIXED_WINDOW, 50, 0, 0, RL_CAL_MONTH, 50, 2678400 },
    };
    struct rl_rule rule;
    struct rl_plan plan;
    struct rl_decision d;
    struct rl_response r;
    struct sf_item policy[SF_MAX_ITEMS], st[SF_MAX_ITEMS];
    struct json_object *o;
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rule_one(&rule);
        rule.limits[0].algorithm = cases[i].algorithm;
        rule.limits[0].bucket_capacity = 0;
        rule.limits[0].refill_rate = 0;
        rule.limits[0].limit_count = cases[i].count;
        rule.limits[0].period_us = cases[i].period_us;
        rule.limits[0].burst = cases[i].burst;
        rule.limits[0].calendar = cases[i].calendar;
        fixture_plan_of(&plan, &rule);
        fixture_decision(&d, 1, NOW_MS, 1);
        fixture_state(&d.st[0], 1, cases[i].algorithm == RL_ALGO_GCRA ?
            cases[i].burst + 1 : cases[i].count, 0, 1000, 0);
        response_init(&r);
        response_decision(&r, &plan, &d);
        ck_assert_int_eq(sf_headers(&r, policy, st), 1);
        /* The quota is the answer's "limit" and X-RateLimit-Limit. */
        ck_assert_int_eq(d.st[0].limit, cases[i].q);
        ck_assert_msg(sf_param(&policy[0], "q") == cases[i].q &&
            sf_param(&policy[0], "w") == cases[i].w,
            "case %zu: q=%lld w=%lld, want q=%lld w=%lld", i,
            sf_param(&policy[0], "q"), sf_param(&policy[0], "w"),
            cases[i].q, cases[i].w);
        o = body_json(&r);
        ck_assert_str_eq(member_str(o, "algorithm"),
            algo_name(cases[i].algorithm));
        json_object_put(o);
        response_free(&r);
    }
}
END_TEST

START_TEST(test_sf_checker_rejects)
{
    static const char *const bad[] = {
        "", "default;q=1", "\"a\";q=1,\"b\";q=2", "\"a\";Q=1",
        "\"a\";q=1.5", "\"a\";q=", "\"a\";q", "\"a\" ;q=1", "\"a\";q=1, ",
        "\"a\";q=1234567890123456", "\"a\\n\"",
    };
    static const char *const good[] = {
        "\"a\"", "\"a\";q=1", "\"a\";q=-1;w=2, \"b\\\"c\";t=0",
    };
    struct sf_item items[SF_MAX_ITEMS];
    const char *why;
    size_t i;

    /* The checker itself must tell good from bad. */
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(sf_list_parse(bad[i], items, SF_MAX_ITEMS, &why) == -1,
            "accepted %s", bad[i]);
    for (i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        ck_assert_msg(sf_list_parse(good[i], items, SF_MAX_ITEMS, &why) > 0,
            "refused %s: %s", good[i], why);
    ck_assert_int_eq(sf_list_parse(good[2], items, SF_MAX_ITEMS, &why), 2);
    ck_assert_str_eq(items[1].name, "b\"c");
    ck_assert_int_eq(sf_param(&items[0], "q"), -1);
}
END_TEST

/*
 * The body as json-c prints it: the way response_decision() built it
 * before it wrote the body itself.  The test below makes random decisions
 * and wants the very same bytes from both.
 */
static long long
reference_retry_ms(const struct rl_limit_state *st)
{
    if (st->retry_after_ms == -1)
        return -1;
    return st->retry_after_ms < 1 ? 1 : st->retry_after_ms;
}

static struct json_object *
reference_state(struct json_object *o, const struct rl_limit *l,
    const struct rl_limit_state *st, long long now_s)
{
    if (o == NULL)
        o = json_object_new_object();
    json_object_object_add(o, "allowed", json_object_new_boolean(st->allowed));
    json_object_object_add(o, "limit", json_object_new_int64(st->limit));
    json_object_object_add(o, "remaining",
        json_object_new_int64(st->remaining));
    json_object_object_add(o, "reset_at",
        json_object_new_int64(response_reset_at(now_s, st)));
    json_object_object_add(o, "retry_after",
        json_object_new_int64(st->allowed ? 0 : response_retry_after_s(st)));
    json_object_object_add(o, "retry_after_ms",
        json_object_new_int64(st->allowed ? 0 : reference_retry_ms(st)));
    json_object_object_add(o, "algorithm",
        json_object_new_string(algo_name(l->algorithm)));
    return o;
}

static char *
reference_body(const struct rl_plan *plan, const struct rl_decision *d)
{
    struct json_object *o, *p, *arr, *denied = NULL;
    const struct rl_limit_state *st;
    long long now_s = d->now_ms / 1000;
    int i, primary = limiter_primary(d), shadow_denied = 0;
    const char *js;
    char *out;
    size_t len;

    st = &d->st[primary];
    o = json_object_new_object();
    if (!d->allowed) {
        char msg[256];

        json_object_object_add(o, "error",
            json_object_new_string("rate_limited"));
        if (reference_retry_ms(st) == -1)
            snprintf(msg, sizeof(msg), "a request of this cost can never "
                "pass limit \"%s\"", plan->name[primary]);
        else if (reference_retry_ms(st) < 1000)
            snprintf(msg, sizeof(msg), "too many requests for limit \"%s\"; "
                "try again in %lld ms", plan->name[primary],
                reference_retry_ms(st));
        else
            snprintf(msg, sizeof(msg), "too many requests for limit \"%s\"; "
                "try again in %lld s", plan->name[primary],
                response_retry_after_s(st));
        json_object_object_add(o, "message", json_object_new_string(msg));
    }
    reference_state(o, plan->limit[primary], st, now_s);
    json_object_object_add(o, "allowed", json_object_new_boolean(d->allowed));
    if (!d->allowed) {
        json_object_object_add(o, "retry_after",
            json_object_new_int64(response_retry_after_s(st)));
        json_object_object_add(o, "retry_after_ms",
            json_object_new_int64(reference_retry_ms(st)));
    }
    for (i = 0; i < d->nlimits; i++) {
        if (d->st[i].allowed)
            continue;
        if (d->st[i].shadow) {
            shadow_denied = 1;
            continue;
        }
        if (denied == NULL)
            denied = json_object_new_array();
        json_object_array_add(denied, json_object_new_string(plan->name[i]));
    }
    if (denied != NULL)
        json_object_object_add(o, "denied_by", denied);
    if (shadow_denied)
        json_object_object_add(o, "shadow_denied",
            json_object_new_boolean(1));
    if (d->nlimits > 1 || shadow_denied) {
        arr = json_object_new_array();
        for (i = 0; i < d->nlimits; i++) {
            p = reference_state(NULL, plan->limit[i], &d->st[i], now_s);
            json_object_object_add(p, "name",
                json_object_new_string(plan->name[i]));
            if (d->st[i].shadow)
                json_object_object_add(p, "shadow",
                    json_object_new_boolean(1));
            json_object_array_add(arr, p);
        }
        json_object_object_add(o, "policies", arr);
    }
    js = json_object_to_json_string_ext(o,
        JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    len = strlen(js);
    if ((out = malloc(len + 2)) != NULL) {
        memcpy(out, js, len);
        memcpy(out + len, "\n", 2);
    }
    json_object_put(o);
    return out;
}

static long long
random_value(unsigned *seed)
{
    static const long long edges[] = { 0, 1, -1, 999, 1000, 1001,
        999999999999999LL, 1000000000000000LL, 9223372036854775807LL };

    if (rand_r(seed) % 3 == 0)
        return edges[rand_r(seed) % (sizeof(edges) / sizeof(edges[0]))];
    return rand_r(seed) % 100000;
}

START_TEST(test_body_matches_json_c)
{
    static const char *const names[] = { "default", "per_second", "a.b-c_9",
        "x" };
    struct rl_rule rule;
    struct rl_plan plan;
    struct rl_decision d;
    struct rl_response r;
    unsigned seed = 20261204;
    char *want;
    int round, i, n;

    fixture_rule_init(&rule, 1, "", 0);
    rule.nlimits = 4;
    fixture_limit_tb(&rule.limits[0], 1, "default", 10, 2.0);
    fixture_limit_sw(&rule.limits[1], 2, "per_second", 100, 60);
    fixture_limit_tb(&rule.limits[2], 3, "a.b-c_9", 5, 0.5);
    fixture_limit_sw(&rule.limits[3], 4, "x", 7, 3600);
    response_init(&r);
    for (round = 0; round < 5000; round++) {
        n = 1 + (int)(rand_r(&seed) % 4);
        memset(&plan, 0, sizeof(plan));
        plan.n = n;
        fixture_decision(&d, 1, 1700000000000LL + rand_r(&seed) % 100000, n);
        for (i = 0; i < n; i++) {
            plan.rule[i] = &rule;
            plan.limit[i] = &rule.limits[i];
            strcpy(plan.name[i], names[i]);
            fixture_state(&d.st[i], rand_r(&seed) % 2, random_value(&seed),
                random_value(&seed), random_value(&seed),
                random_value(&seed));
            d.st[i].shadow = rand_r(&seed) % 4 == 0;
            if (!d.st[i].allowed && !d.st[i].shadow)
                d.allowed = 0;
        }
        response_reset(&r);
        response_decision(&r, &plan, &d);
        want = reference_body(&plan, &d);
        ck_assert_ptr_nonnull(want);
        ck_assert_str_eq(r.body.data, want);
        free(want);
    }
    response_free(&r);
}
END_TEST

START_TEST(test_json_str_escapes)
{
    static const char *const texts[] = { "", "plain", "a\"b", "back\\slash",
        "tab\tnl\ncr\r", "\x01\x1f\x7f", "/slash/", "caf\xc3\xa9" };
    struct rl_buf b;
    struct json_object *o;
    size_t i;

    buf_init(&b);
    for (i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        buf_reset(&b);
        ck_assert_int_eq(buf_json_str(&b, texts[i]), 0);
        o = json_tokener_parse(b.data);
        ck_assert_ptr_nonnull(o);
        ck_assert_str_eq(json_object_get_string(o), texts[i]);
        json_object_put(o);
    }
    buf_free(&b);
}
END_TEST

START_TEST(test_error_body)
{
    struct rl_response r;
    struct json_object *o;
    char v[256];

    response_init(&r);
    response_error(&r, 400, "bad_request", "\"route\" is required");
    ck_assert_int_eq(r.status, 400);
    ck_assert_str_eq(r.content_type, "application/json");
    o = body_json(&r);
    ck_assert_str_eq(member_str(o, "error"), "bad_request");
    ck_assert_str_eq(member_str(o, "message"), "\"route\" is required");
    ck_assert_int_eq(json_object_object_length(o), 2);
    json_object_put(o);
    ck_assert_int_eq(header_value(&r, "WWW-Authenticate", v, sizeof(v)), 0);

    /* A second error replaces the body, it does not append to it. */
    response_error(&r, 503, "unavailable", "line1\nline2\t\\ </script>");
    ck_assert_int_eq(r.status, 503);
    o = body_json(&r);
    ck_assert_str_eq(member_str(o, "error"), "unavailable");
    ck_assert_str_eq(member_str(o, "message"), "line1\nline2\t\\ </script>");
    json_object_put(o);
    /* Control characters are escaped inside the JSON text. */
    ck_assert_ptr_null(strchr(r.body.data, '\t'));
    ck_assert_uint_gt(r.body.len, 1);
    ck_assert_ptr_null(memchr(r.body.data, '\n', r.body.len - 1));
    response_free(&r);
}
END_TEST

/* Every 401 says how to authenticate (RFC 9110, RFC 6750); no other
 * status does. */
START_TEST(test_unauthorized_challenge)
{
    struct rl_response r;
    struct json_object *o;
    char v[256];

    response_init(&r);
    response_error(&r, 401, "unauthorized", "invalid API key");
    ck_assert_int_eq(r.status, 401);
    header_once(&r, "WWW-Authenticate", v, sizeof(v));
    ck_assert_str_eq(v, "Bearer realm=\"ratelimit-fcgi\"");
    o = body_json(&r);
    ck_assert_str_eq(member_str(o, "error"), "unauthorized");
    ck_assert_str_eq(member_str(o, "message"), "invalid API key");
    json_object_put(o);
    response_reset(&r);
    response_error(&r, 403, "forbidden", "an admin key is needed");
    ck_assert_int_eq(header_value(&r, "WWW-Authenticate", v, sizeof(v)), 0);
    response_free(&r);
}
END_TEST

/* The refusal table: every row filled, each status a client or server
 * error, every 401 with its challenge, and a message of the moment in place
 * of the row's. */
START_TEST(test_refusal_table)
{
    struct rl_response r;
    struct json_object *o;
    const char *code, *msg;
    char v[256];
    int i, status, n401 = 0;

    response_init(&r);
    for (i = 0; i < RL_REFUSAL_COUNT; i++) {
        status = response_refusal((enum rl_refusal)i, &code, &msg);
        ck_assert_msg(status >= 400 && status <= 599, "row %d: %d", i, status);
        ck_assert_msg(code != NULL && code[0] != '\0', "row %d: no code", i);
        ck_assert_msg(msg != NULL && msg[0] != '\0', "row %d: no message", i);
        response_reset(&r);
        ck_assert_int_eq(response_refuse(&r, (enum rl_refusal)i, NULL), status);
        ck_assert_int_eq(r.status, status);
        o = body_json(&r);
        ck_assert_str_eq(member_str(o, "error"), code);
        ck_assert_str_eq(member_str(o, "message"), msg);
        json_object_put(o);
        if (status == 401) {
            n401++;
            header_once(&r, "WWW-Authenticate", v, sizeof(v));
        }
    }
    ck_assert_int_eq(n401, 3);
    response_reset(&r);
    response_refuse(&r, RL_REFUSE_METHOD, "PUT is not allowed on /v1/check");
    ck_assert_int_eq(r.status, 405);
    o = body_json(&r);
    ck_assert_str_eq(member_str(o, "error"), "method_not_allowed");
    ck_assert_str_eq(member_str(o, "message"), "PUT is not allowed on /v1/check");
    json_object_put(o);
    response_free(&r);
}
END_TEST

START_TEST(test_header_crlf)
{
    struct rl_response r;

    response_init(&r);
    response_header(&r, "X-Test", "a\r\nInjected: %s\n", "yes\r");
    ck_assert_str_eq(r.headers.data, "X-Test: a  Injected: yes  \r\n");
    response_header(&r, "X-Count", "%d", 42);
    ck_assert_str_eq(r.headers.data,
        "X-Test: a  Injected: yes  \r\nX-Count: 42\r\n");
    response_free(&r);
}
END_TEST

START_TEST(test_init_reset_reason)
{
    struct rl_response r;

    response_init(&r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.content_type, "application/json");
    response_error(&r, 429, "x", "y");
    response_header(&r, "A", "b");
    r.content_type = "text/plain";
    response_reset(&r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.content_type, "application/json");
    ck_assert_uint_eq(r.headers.len, 0);
    ck_assert_uint_eq(r.body.len, 0);
    response_free(&r);

    ck_assert_str_eq(response_reason(200), "OK");
    ck_assert_str_eq(response_reason(400), "Bad Request");
    ck_assert_str_eq(response_reason(401), "Unauthorized");
    ck_assert_str_eq(response_reason(413), "Content Too Large");
    ck_assert_str_eq(response_reason(429), "Too Many Requests");
    ck_assert_str_eq(response_reason(503), "Service Unavailable");
    ck_assert_str_eq(response_reason(299), "Unknown");
}
END_TEST

Suite *
response_suite(void)
{
    Suite *s = suite_create("response");
    TCase *tc;

    tc = tcase_create("decision");
    tcase_add_test(tc, test_allowed_single);
    tcase_add_test(tc, test_zero_remaining_kept);
    tcase_add_test(tc, test_denied);
    tcase_add_test(tc, test_effective_window_capped);
    tcase_add_loop_test(tc, test_retry_after, 0,
        (int)(sizeof(retry_cases) / sizeof(retry_cases[0])));
    tcase_add_test(tc, test_two_limits);
    tcase_add_test(tc, test_two_limits_one_denies);
    tcase_add_test(tc, test_policy_window);
    tcase_add_test(tc, test_shadow_denial);
    tcase_add_test(tc, test_policy_gcra_fixed_window);
    tcase_add_test(tc, test_sf_checker_rejects);
    suite_add_tcase(s, tc);

    tc = tcase_create("plain");
    tcase_add_test(tc, test_body_matches_json_c);
    tcase_add_test(tc, test_json_str_escapes);
    tcase_add_test(tc, test_error_body);
    tcase_add_test(tc, test_unauthorized_challenge);
    tcase_add_test(tc, test_refusal_table);
    tcase_add_test(tc, test_header_crlf);
    tcase_add_test(tc, test_init_reset_reason);
    suite_add_tcase(s, tc);
    return s;
}
