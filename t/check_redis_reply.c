/*
 * check_redis_reply.c -- what a reply of Redis says (src/redis_reply.c):
 * the kind of each error reply the Redis client acts on, with the slot and
 * node of a redirection, the check's short reasons, and the check script's
 * reply decoded into a decision.
 *
 * The replies are made by hand as hiredis hands them over; the error
 * texts are those Redis 7 sends.
 */
#include <string.h>

#include <check.h>
#include <hiredis/hiredis.h>

#include "redis.h"

static redisReply
error_reply(const char *text)
{
    redisReply r;

    memset(&r, 0, sizeof(r));
    r.type = REDIS_REPLY_ERROR;
    r.str = (char *)text;
    r.len = strlen(text);
    return r;
}

static const struct {
    const char *text;
    enum redis_reply_kind kind;
} errors[] = {
    { "TRYAGAIN Multiple keys request during rehashing of slot",
      REPLY_TRYAGAIN },
    { "NOSCRIPT No matching script. Please use EVAL.", REPLY_NOSCRIPT },
    { "READONLY You can't write against a read only replica.",
      REPLY_READONLY },
    { "LOADING Redis is loading the dataset in memory", REPLY_LOADING },
    { "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is "
      "set to 'no'.", REPLY_MASTERDOWN },
    { "CLUSTERDOWN The cluster is down", REPLY_CLUSTERDOWN },
    { "CLUSTERDOWN Hash slot not served", REPLY_CLUSTERDOWN },
    { "BUSY Redis is busy running a script. You can only call SCRIPT KILL "
      "or SHUTDOWN NOSAVE.", REPLY_BUSY },
    { "OOM command not allowed when used memory > 'maxmemory'.", REPLY_OOM },
    /* errors of no kind the client acts on */
    { "ERR ratelimit: cost must be an integer >= 1", REPLY_ERROR },
    { "WRONGTYPE Operation against a key holding the wrong kind of value",
      REPLY_ERROR },
    { "BUSYKEY Target key name already exists.", REPLY_ERROR },
    { "NOAUTH Authentication required.", REPLY_ERROR },
    { "", REPLY_ERROR },
    /* MOVED and ASK only with their space; a bad one is no redirection */
    { "MOVED", REPLY_ERROR },
    { "ASKING is not a redirection", REPLY_ERROR },
    { "MOVED 16384 127.0.0.1:7000", REPLY_BAD_REDIRECT },
    { "MOVED x 127.0.0.1:7000", REPLY_BAD_REDIRECT },
    { "ASK 12 nohostport", REPLY_BAD_REDIRECT },
    { "ASK 12 ", REPLY_BAD_REDIRECT },
};

START_TEST(test_error_kinds)
{
    redisReply r = error_reply(errors[_i].text);
    struct redis_redirect to;

    ck_assert_msg(redis_reply_classify(&r, &to) == errors[_i].kind,
        "\"%s\": kind %d, want %d", errors[_i].text,
        redis_reply_classify(&r, &to), errors[_i].kind);
    /* The redirection is optional to ask for. */
    ck_assert_int_eq(redis_reply_classify(&r, NULL), errors[_i].kind);
}
END_TEST

START_TEST(test_redirects)
{
    redisReply r = error_reply("MOVED 3999 127.0.0.1:6381");
    struct redis_redirect to;

    ck_assert_int_eq(redis_reply_classify(&r, &to), REPLY_MOVED);
    ck_assert_int_eq(to.slot, 3999);
    ck_assert_str_eq(to.addr, "127.0.0.1:6381");
    r = error_reply("ASK 0 10.1.2.3:7002");
    ck_assert_int_eq(redis_reply_classify(&r, &to), REPLY_ASK);
    ck_assert_int_eq(to.slot, 0);
    ck_assert_str_eq(to.addr, "10.1.2.3:7002");
    /* Redis 7 names the node asked as ":port". */
    r = error_reply("MOVED 16383 :7001");
    ck_assert_int_eq(redis_reply_classify(&r, &to), REPLY_MOVED);
    ck_assert_int_eq(to.slot, 16383);
    ck_assert_str_eq(to.addr, ":7001");
    ck_assert_int_eq(redis_reply_classify(&r, NULL), REPLY_MOVED);
}
END_TEST

/* Whatever is not an error is the answer, but nil. */
START_TEST(test_answers)
{
    redisReply r, *elements[1], one;

    memset(&r, 0, sizeof(r));
    ck_assert_int_eq(redis_reply_classify(NULL, NULL), REPLY_ERROR);
    r.type = REDIS_REPLY_NIL;
    ck_assert_int_eq(redis_reply_classify(&r, NULL), REPLY_NIL);
    r.type = REDIS_REPLY_INTEGER;
    ck_assert_int_eq(redis_reply_classify(&r, NULL), REPLY_ANSWER);
    r.type = REDIS_REPLY_STATUS;
    r.str = (char *)"OK";
    ck_assert_int_eq(redis_reply_classify(&r, NULL), REPLY_ANSWER);
    /* a string that reads like an error is still a string */
    r.type = REDIS_REPLY_STRING;
    r.str = (char *)"MOVED 1 127.0.0.1:7000";
    ck_assert_int_eq(redis_reply_classify(&r, NULL), REPLY_ANSWER);
    one = error_reply("LOADING Redis is loading the dataset in memory");
    elements[0] = &one;
    r.type = REDIS_REPLY_ARRAY;
    r.elements = 1;
    r.element = elements;
    ck_assert_int_eq(redis_reply_classify(&r, NULL), REPLY_ANSWER);
}
END_TEST

/* The kinds that give a node up have their reason; TRYAGAIN has one but
 * keeps the node; the others end no check by themselves. */
START_TEST(test_reasons)
{
    int k;

    for (k = 0; k < REPLY_KINDS; k++) {
        int gives_up = k == REPLY_READONLY || k == REPLY_LOADING ||
            k == REPLY_MASTERDOWN || k == REPLY_CLUSTERDOWN;

        ck_assert_int_eq(redis_reply_not_serving(k), gives_up);
        if (gives_up || k == REPLY_TRYAGAIN)
            ck_assert_ptr_nonnull(redis_reply_reason(k));
        else
            ck_assert_ptr_null(redis_reply_reason(k));
    }
    ck_assert_str_eq(redis_reply_reason(REPLY_TRYAGAIN), "redis slot moving");
    ck_assert_str_eq(redis_reply_reason(REPLY_LOADING), "redis loading");
    ck_assert_str_eq(redis_reply_reason(REPLY_CLUSTERDOWN),
        "redis cluster down");
    ck_assert_str_eq(redis_reply_reason(REPLY_READONLY),
        "redis not a master");
    ck_assert_str_eq(redis_reply_reason(REPLY_MASTERDOWN),
        "redis not a master");
}
END_TEST

/* A big-endian IEEE double x at p, as struct.pack('>d') writes it. */
static void
put_double(unsigned char *p, double x)
{
    unsigned long long u;
    int k;

    memcpy(&u, &x, sizeof(u));
    for (k = 7; k >= 0; k--, u >>= 8)
        p[k] = (unsigned char)(u & 0xff);
}

/* The script's reply of the n numbers v made in r, packed into buf (room
 * for 48). */
static void
packed(redisReply *r, unsigned char *buf, const double *v, size_t n)
{
    size_t i;

    memset(r, 0, sizeof(*r));
    r->type = REDIS_REPLY_STRING;
    r->len = 8 * n;
    r->str = (char *)buf;
    for (i = 0; i < n; i++)
        put_double(buf + 8 * i, v[i]);
}

START_TEST(test_decision)
{
    static const double one[7] = { 1, 1733000000123.0, 1, 10, 9, 1000, 0 };
    static const double denied[12] = { 0, 5, 1, 10, 9, 100, 0,
        0, 3, 0, 2000, 1500 };
    static const double budget[3] = { -1, 5, 600000 };
    static const double many[48] = { 0 };
    double odd[7];
    unsigned char buf[8 * 48];
    redisReply r, e;
    struct rl_decision d;

    packed(&r, buf, one, 7);
    ck_assert_int_eq(redis_reply_decision(&r, 1, &d), 0);
    ck_assert_int_eq(d.allowed, 1);
    ck_assert_int_eq(d.now_ms, 1733000000123LL);
    ck_assert_int_eq(d.nlimits, 1);
    ck_assert_int_eq(d.st[0].limit, 10);
    ck_assert_int_eq(d.st[0].remaining, 9);
    ck_assert_int_eq(d.st[0].reset_ms, 1000);
    /* the same reply is no answer for two limits */
    ck_assert_int_eq(redis_reply_decision(&r, 2, &d), -1);
    packed(&r, buf, denied, 12);
    ck_assert_int_eq(redis_reply_decision(&r, 2, &d), 0);
    ck_assert_int_eq(d.allowed, 0);
    ck_assert_int_eq(d.st[1].allowed, 0);
    ck_assert_int_eq(d.st[1].retry_after_ms, 1500);
    packed(&r, buf, budget, 3);
    ck_assert_int_eq(redis_reply_decision(&r, 1, &d), 0);
    ck_assert_int_eq(d.over_budget, 1);
    ck_assert_int_eq(d.budget_retry_ms, 600000);
    /* a fraction is truncated toward zero, as Redis turns numbers into
     * integers */
    memcpy(odd, one, sizeof(odd));
    odd[4] = 8.999;
    odd[5] = 1000.5;
    packed(&r, buf, odd, 7);
    ck_assert_int_eq(redis_reply_decision(&r, 1, &d), 0);
    ck_assert_int_eq(d.st[0].remaining, 8);
    ck_assert_int_eq(d.st[0].reset_ms, 1000);
    /* not finite, or beyond 2^53: unreadable */
    odd[5] = 1.0 / 0.0;
    packed(&r, buf, odd, 7);
    ck_assert_int_eq(redis_reply_decision(&r, 1, &d), -1);
    odd[5] = 0.0 / 0.0;
    packed(&r, buf, odd, 7);
    ck_assert_int_eq(redis_reply_decision(&r, 1, &d), -1);
    odd[5] = 9007199254740992.0;
    packed(&r, buf, odd, 7);
    ck_assert_int_eq(redis_reply_decision(&r, 1, &d), -1);
    /* a length that is not whole doubles */
    packed(&r, buf, one, 7);
    r.len = 55;
    ck_assert_int_eq(redis_reply_decision(&r, 1, &d), -1);
    /* more numbers than any check has */
    packed(&r, buf, many, LIMITER_REPLY_MAX + 1);
    ck_assert_int_eq(redis_reply_decision(&r, RL_MAX_LIMITS, &d), -1);
    /* an array of integers (what the script answered before), an error,
     * nil, nothing */
    memset(&e, 0, sizeof(e));
    e.type = REDIS_REPLY_ARRAY;
    ck_assert_int_eq(redis_reply_decision(&e, 1, &d), -1);
    e = error_reply("ERR ratelimit: cost must be an integer >= 1");
    ck_assert_int_eq(redis_reply_decision(&e, 1, &d), -1);
    memset(&e, 0, sizeof(e));
    e.type = REDIS_REPLY_NIL;
    ck_assert_int_eq(redis_reply_decision(&e, 1, &d), -1);
    ck_assert_int_eq(redis_reply_decision(NULL, 1, &d), -1);
}
END_TEST

Suite *
redis_reply_suite(void)
{
    Suite *s = suite_create("redis_reply");
    TCase *tc = tcase_create("core");

    tcase_add_loop_test(tc, test_error_kinds, 0,
        (int)(sizeof(errors) / sizeof(errors[0])));
    tcase_add_test(tc, test_redirects);
    tcase_add_test(tc, test_answers);
    tcase_add_test(tc, test_reasons);
    tcase_add_test(tc, test_decision);
    suite_add_tcase(s, tc);
    return s;
}
