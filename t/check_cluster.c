/*
 * check_cluster.c -- Redis Cluster's hash slots and redirections
 * (src/cluster.c), and the list of addresses of the "redis" key.
 *
 * The expected slots are what a Redis 7.0 server answers to CLUSTER
 * KEYSLOT for the same keys.
 */
#include <string.h>

#include <check.h>

#include "ratelimit.h"

static const struct {
    const char *key;
    unsigned slot;
} slots[] = {
    { "foo", 12182 },
    { "123456789", 12739 },
    { "user1000", 3443 },
    { "{user1000}.following", 3443 },       /* the tag alone */
    { "foo{}{bar}", 8363 },                 /* an empty tag: all of it */
    { "foo{{bar}}zap", 4015 },              /* the tag is "{bar" */
    { "{bar", 4015 },
    { "foo{bar}{zap}", 5061 },              /* the first tag only */
    { "bar", 5061 },
    { "{}", 15257 },
    { "", 0 },
    { "rl:{6ec97ac8-6d8a-4475-8c4c-f82a6c494a42}:3:3:s1", 9470 },
    { "6ec97ac8-6d8a-4475-8c4c-f82a6c494a42", 9470 },
};

START_TEST(test_keyslot)
{
    const char *k = slots[_i].key;

    ck_assert_msg(cluster_keyslot(k, strlen(k)) == slots[_i].slot,
        "slot of \"%s\": %u, want %u", k, cluster_keyslot(k, strlen(k)),
        slots[_i].slot);
}
END_TEST

/* The length counts, not a NUL: a key is bytes. */
START_TEST(test_keyslot_length)
{
    ck_assert_uint_eq(cluster_keyslot("foobar", 3), 12182);
    ck_assert_uint_eq(cluster_keyslot("{user1000}", 9),
        cluster_keyslot("{user1000", 9));
    ck_assert_uint_ne(cluster_keyslot("{user1000}", 9), 3443);
}
END_TEST

START_TEST(test_redirect)
{
    char addr[64];
    int slot = -1;

    ck_assert_int_eq(cluster_redirect("MOVED 3999 127.0.0.1:6381", &slot,
        addr, sizeof(addr)), CLUSTER_MOVED);
    ck_assert_int_eq(slot, 3999);
    ck_assert_str_eq(addr, "127.0.0.1:6381");
    ck_assert_int_eq(cluster_redirect("ASK 0 [::1]:7002", &slot, addr,
        sizeof(addr)), CLUSTER_ASK);
    ck_assert_int_eq(slot, 0);
    ck_assert_str_eq(addr, "[::1]:7002");
    /* Redis 7 names the node asked as ":port" when it has no endpoint. */
    ck_assert_int_eq(cluster_redirect("MOVED 16383 :7000", &slot, addr,
        sizeof(addr)), CLUSTER_MOVED);
    ck_assert_int_eq(slot, 16383);
    ck_assert_str_eq(addr, ":7000");
    /* Not a redirection. */
    ck_assert_int_eq(cluster_redirect("ERR unknown command", &slot, addr,
        sizeof(addr)), 0);
    ck_assert_int_eq(cluster_redirect("TRYAGAIN Multiple keys", &slot,
        addr, sizeof(addr)), 0);
    ck_assert_int_eq(cluster_redirect("MOVEDX 1 a:1", &slot, addr,
        sizeof(addr)), 0);
}
END_TEST

START_TEST(test_redirect_bad)
{
    static const char *const bad[] = {
        "MOVED 16384 127.0.0.1:6379",       /* no such slot */
        "MOVED -1 127.0.0.1:6379",
        "MOVED x 127.0.0.1:6379",
        "MOVED 12",
        "MOVED 12 ",
        "ASK 12 nocolon",
        "MOVED 12 0123456789012345678901234567890123456789:1",
    };
    char addr[32];
    int slot = 7;
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(cluster_redirect(bad[i], &slot, addr, sizeof(addr)) ==
            -1, "\"%s\" accepted", bad[i]);
    ck_assert_int_eq(slot, 7);
}
END_TEST

START_TEST(test_split_list)
{
    char out[RL_REDIS_MAX_ADDRS][RL_REDIS_ADDR_MAX];
    char many[RL_REDIS_MAX_ADDRS * 8 + 16], longer[RL_REDIS_ADDR_MAX + 8];
    int i;

    ck_assert_int_eq(util_split_list("127.0.0.1:7000", out, 4), 1);
    ck_assert_str_eq(out[0], "127.0.0.1:7000");
    ck_assert_int_eq(util_split_list(" a:1 ,b:2,, c:3 ,", out, 4), 3);
    ck_assert_str_eq(out[0], "a:1");
    ck_assert_str_eq(out[1], "b:2");
    ck_assert_str_eq(out[2], "c:3");
    ck_assert_int_eq(util_split_list("", out, 4), 0);
    ck_assert_int_eq(util_split_list(" , ", out, 4), 0);
    ck_assert_int_eq(util_split_list("a:1,b:2,c:3", out, 2), -1);
    many[0] = '\0';
    for (i = 0; i <= RL_REDIS_MAX_ADDRS; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "h:%d,",
            i + 1);
    ck_assert_int_eq(util_split_list(many, out, RL_REDIS_MAX_ADDRS), -1);
    memset(longer, 'x', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    ck_assert_int_eq(util_split_list(longer, out, 4), -1);
}
END_TEST

Suite *
cluster_suite(void)
{
    Suite *s = suite_create("cluster");
    TCase *tc = tcase_create("slots");

    tcase_add_loop_test(tc, test_keyslot, 0,
        (int)(sizeof(slots) / sizeof(slots[0])));
    tcase_add_test(tc, test_keyslot_length);
    tcase_add_test(tc, test_redirect);
    tcase_add_test(tc, test_redirect_bad);
    tcase_add_test(tc, test_split_list);
    suite_add_tcase(s, tc);
    return s;
}
