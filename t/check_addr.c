/*
 * check_addr.c -- trusted proxies and the client address (src/addr.c).
 *
 * The client address is what anonymous authorizer requests are counted
 * by, and what status_allow and metrics_allow are matched against, so a
 * client must not be able to pick it: X-Forwarded-For counts only when the
 * peer is a trusted proxy, and then only its rightmost address that is not
 * itself trusted.  From any other peer the header makes the client
 * unknown: a proxy's own address is never taken for its client's.
 */
#include <string.h>

#include <check.h>

#include "ratelimit.h"

static struct addr_net nets[32];
static char err[160];

static int
parse(const char *s)
{
    err[0] = '\0';
    return addr_parse_list(s, nets, 32, err, sizeof(err));
}

START_TEST(test_parse_list)
{
    ck_assert_int_eq(parse(""), 0);
    ck_assert_int_eq(parse("127.0.0.1"), 1);
    ck_assert_int_eq(parse("127.0.0.1, 10.0.0.0/8 ::1,fd00::/8"), 4);
    ck_assert_int_eq(nets[1].prefix, 8);
    ck_assert_int_eq(nets[2].prefix, 128);
}
END_TEST

START_TEST(test_parse_errors)
{
    ck_assert_int_eq(parse("127.0.0.1, localhost"), -1);
    ck_assert_str_eq(err, "\"localhost\" is not an address or network");
    ck_assert_int_eq(parse("10.0.0.0/33"), -1);
    ck_assert_int_eq(parse("::1/129"), -1);
    ck_assert_int_eq(parse("10.0.0.0/"), -1);
    ck_assert_int_eq(parse("10.0.0.0/8x"), -1);
    ck_assert_int_eq(parse("300.1.1.1"), -1);
}
END_TEST

START_TEST(test_parse_too_many)
{
    char list[33 * 16] = "";
    int i;

    for (i = 0; i < 33; i++)
        strcat(list, "10.0.0.1 ");
    ck_assert_int_eq(parse(list), -1);
    ck_assert_str_eq(err, "more than 32 entries");
}
END_TEST

START_TEST(test_match)
{
    ck_assert_int_eq(parse("10.1.0.0/16, 192.168.1.7, fd00::/8, 10.2.3.4/31"),
        4);
    ck_assert_int_eq(addr_match(nets, 4, "10.1.255.255"), 1);
    ck_assert_int_eq(addr_match(nets, 4, "10.2.0.0"), 0);
    ck_assert_int_eq(addr_match(nets, 4, "192.168.1.7"), 1);
    ck_assert_int_eq(addr_match(nets, 4, "192.168.1.8"), 0);
    ck_assert_int_eq(addr_match(nets, 4, "fd12::1"), 1);
    ck_assert_int_eq(addr_match(nets, 4, "fe80::1"), 0);
    /* /31: the prefix ends inside a byte. */
    ck_assert_int_eq(addr_match(nets, 4, "10.2.3.5"), 1);
    ck_assert_int_eq(addr_match(nets, 4, "10.2.3.6"), 0);
    /* An IPv4-mapped IPv6 peer is matched as IPv4. */
    ck_assert_int_eq(addr_match(nets, 4, "::ffff:192.168.1.7"), 1);
    ck_assert_int_eq(addr_match(nets, 4, "not-an-ip"), 0);
    ck_assert_int_eq(addr_match(nets, 4, NULL), 0);
    ck_assert_int_eq(addr_match(nets, 0, "192.168.1.7"), 0);
}
END_TEST

static char out[64];

/* addr_client with the nets parsed last; its address is in out. */
static int
client(const char *peer, const char *xff, int n)
{
    return addr_client(peer, xff, nets, n, out, sizeof(out));
}

START_TEST(test_client_untrusted_peer)
{
    ck_assert_int_eq(parse("127.0.0.2"), 1);
    ck_assert_int_eq(client("127.0.0.3", NULL, 1), 0);
    ck_assert_str_eq(out, "127.0.0.3");
    /* The header of an untrusted peer is not believed, and says that the
     * peer may be a proxy: the client is unknown, counted as the peer. */
    ck_assert_int_eq(client("127.0.0.3", "1.2.3.4", 1), -1);
    ck_assert_str_eq(out, "127.0.0.3");
    ck_assert_int_eq(client("127.0.0.3", "127.0.0.3", 1), -1);
    ck_assert_str_eq(out, "127.0.0.3");
    /* An empty header names no one. */
    ck_assert_int_eq(client("127.0.0.3", "", 1), 0);
    ck_assert_int_eq(client("127.0.0.3", " , ,", 1), 0);
    ck_assert_str_eq(out, "127.0.0.3");
    ck_assert_int_eq(client(NULL, NULL, 1), 0);
    ck_assert_str_eq(out, "");
    ck_assert_int_eq(client(NULL, "1.2.3.4", 1), -1);
}
END_TEST

/* Issue 30: nginx on the same host forwards a client at 203.0.113.7, and
 * the peer is its 127.0.0.1, inside the default status_allow. */
START_TEST(test_client_forwarded_by_loopback)
{
    /* No trusted_proxies (the default): the client is unknown. */
    ck_assert_int_eq(client("127.0.0.1", "203.0.113.7", 0), -1);
    ck_assert_str_eq(out, "127.0.0.1");
    /* The proxy in trusted_proxies: the client it names. */
    ck_assert_int_eq(parse("127.0.0.1, ::1"), 2);
    ck_assert_int_eq(client("127.0.0.1", "203.0.113.7", 2), 0);
    ck_assert_str_eq(out, "203.0.113.7");
    ck_assert_int_eq(client("::1", "203.0.113.7, 127.0.0.1", 2), 0);
    ck_assert_str_eq(out, "203.0.113.7");
    ck_assert_int_eq(client("::ffff:127.0.0.1", "203.0.113.7", 2), 0);
    ck_assert_str_eq(out, "203.0.113.7");
    /* A genuine loopback client, through the proxy or not. */
    ck_assert_int_eq(client("127.0.0.1", "127.0.0.1", 2), 0);
    ck_assert_str_eq(out, "127.0.0.1");
    ck_assert_int_eq(client("127.0.0.1", NULL, 2), 0);
    ck_assert_str_eq(out, "127.0.0.1");
}
END_TEST

START_TEST(test_client_trusted_peer)
{
    char longest[80];

    ck_assert_int_eq(parse("127.0.0.2, 10.0.0.0/8"), 2);
    /* The rightmost address that is not a trusted proxy. */
    ck_assert_int_eq(client("127.0.0.2", "6.6.6.6, 1.2.3.4", 2), 0);
    ck_assert_str_eq(out, "1.2.3.4");
    ck_assert_int_eq(client("127.0.0.2", "6.6.6.6, 1.2.3.4, 10.0.0.9", 2),
        0);
    ck_assert_str_eq(out, "1.2.3.4");
    ck_assert_int_eq(client("127.0.0.2", "2001:db8::1", 2), 0);
    ck_assert_str_eq(out, "2001:db8::1");
    /* Only trusted proxies in the header: the first of them is where the
     * request began, not the peer. */
    ck_assert_int_eq(client("127.0.0.2", "10.0.0.1,10.0.0.2", 2), 0);
    ck_assert_str_eq(out, "10.0.0.1");
    ck_assert_int_eq(client("127.0.0.2", " , ,", 2), 0);
    ck_assert_str_eq(out, "127.0.0.2");
    /* Garbage where the client should be is not an address: the client
     * is unknown, counted as the peer. */
    ck_assert_int_eq(client("127.0.0.2", "1.2.3.4, evil", 2), -1);
    ck_assert_str_eq(out, "127.0.0.2");
    ck_assert_int_eq(client("127.0.0.2", "evil, 10.0.0.1", 2), -1);
    ck_assert_str_eq(out, "127.0.0.2");
    ck_assert_int_eq(client("127.0.0.2", "203.0.113.7:5555", 2), -1);
    ck_assert_int_eq(client("127.0.0.2", "unknown", 2), -1);
    memset(longest, '1', sizeof(longest) - 1);
    longest[sizeof(longest) - 1] = '\0';
    ck_assert_int_eq(client("127.0.0.2", longest, 2), -1);
    ck_assert_str_eq(out, "127.0.0.2");
}
END_TEST

Suite *
addr_suite(void)
{
    Suite *s = suite_create("addr");
    TCase *tc = tcase_create("addr");

    tcase_add_test(tc, test_parse_list);
    tcase_add_test(tc, test_parse_errors);
    tcase_add_test(tc, test_parse_too_many);
    tcase_add_test(tc, test_match);
    tcase_add_test(tc, test_client_untrusted_peer);
    tcase_add_test(tc, test_client_forwarded_by_loopback);
    tcase_add_test(tc, test_client_trusted_peer);
    suite_add_tcase(s, tc);
    return s;
}
