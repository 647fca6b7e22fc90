/*
 * check_util.c -- tests of src/util.c: SHA-256 in hex, bounded copies,
 * host:port splitting, the clocks, the OS random generator, the escapes
 * that keep a log line or a /status field on one line, and numbers in
 * decimal.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <check.h>              /* t/check.h: the suites, then Check */

#include "ratelimit.h"

START_TEST(test_sha256_empty)
{
    char hex[65];

    memset(hex, 'x', sizeof(hex));
    util_sha256_hex("", 0, hex);
    ck_assert_str_eq(hex,
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}
END_TEST

START_TEST(test_sha256_abc)
{
    char hex[65];

    util_sha256_hex("abc", 3, hex);
    ck_assert_str_eq(hex,
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}
END_TEST

START_TEST(test_sha256_uses_len_not_nul)
{
    char a[65], b[65];

    /* Only len bytes count, NUL bytes included. */
    util_sha256_hex("abcdef", 3, a);
    ck_assert_str_eq(a,
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    util_sha256_hex("a\0b", 3, b);
    util_sha256_hex("a", 1, a);
    ck_assert_str_ne(a, b);
    ck_assert_uint_eq(strlen(b), 64);
}
END_TEST

/* The memo gives util_sha256's digest for every input, whether it is the
 * last one again, a prefix of it, longer than it keeps, or new. */
START_TEST(test_sha256_memo)
{
    struct sha256_memo m;
    unsigned char big[300], want[32], got[32];
    static const struct {
        size_t off, len;
    } seq[] = { { 0, 5 }, { 0, 5 }, { 0, 4 }, { 1, 4 }, { 0, 256 },
        { 0, 256 }, { 0, 257 }, { 0, 257 }, { 0, 300 }, { 0, 0 },
        { 0, 0 }, { 0, 5 } };
    size_t i;

    memset(&m, 0, sizeof(m));
    for (i = 0; i < sizeof(big); i++)
        big[i] = (unsigned char)(i * 7 + 3);
    for (i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
        util_sha256(big + seq[i].off, seq[i].len, want);
        util_sha256_memo(&m, big + seq[i].off, seq[i].len, got);
        ck_assert_mem_eq(got, want, 32);
    }
    /* The same bytes changed in place are not mistaken for the last. */
    big[2] ^= 1;
    util_sha256(big, 5, want);
    util_sha256_memo(&m, big, 5, got);
    ck_assert_mem_eq(got, want, 32);
}
END_TEST

START_TEST(test_random_fills)
{
    unsigned char a[64], b[64], zero[64];

    memset(a, 0, sizeof(a));
    memset(b, 0, sizeof(b));
    memset(zero, 0, sizeof(zero));
    ck_assert_int_eq(util_random(a, sizeof(a)), 0);
    ck_assert_int_eq(util_random(b, sizeof(b)), 0);
    /* Each has a 2^-512 chance of being all zero or equal by luck. */
    ck_assert_int_ne(memcmp(a, zero, sizeof(a)), 0);
    ck_assert_int_ne(memcmp(b, zero, sizeof(b)), 0);
    ck_assert_int_ne(memcmp(a, b, sizeof(a)), 0);
}
END_TEST

START_TEST(test_random_fills_the_tail)
{
    unsigned char a[1000], zero[32];

    /* The last bytes are written too, not just the first read's worth. */
    memset(a, 0, sizeof(a));
    memset(zero, 0, sizeof(zero));
    ck_assert_int_eq(util_random(a, sizeof(a)), 0);
    ck_assert_int_ne(memcmp(a + sizeof(a) - 32, zero, 32), 0);
    ck_assert_int_eq(util_random(a, 0), 0);
}
END_TEST

START_TEST(test_clocks)
{
    int64_t t1, t2;

    t1 = util_now_ms();
    t2 = util_now_ms();
    ck_assert_int_ge(t2, t1);
    ck_assert_int_gt(util_wall_s(), 1600000000);
}
END_TEST

START_TEST(test_split_hostport)
{
    char host[16];
    int port = 0;

    ck_assert_int_eq(util_split_hostport("127.0.0.1:6379", host,
        sizeof(host), &port), 0);
    ck_assert_str_eq(host, "127.0.0.1");
    ck_assert_int_eq(port, 6379);
    ck_assert_int_eq(util_split_hostport("[::1]:9000", host, sizeof(host),
        &port), 0);
    ck_assert_str_eq(host, "::1");
    ck_assert_int_eq(port, 9000);
    ck_assert_int_eq(util_split_hostport("localhost:1", host, sizeof(host),
        &port), 0);
    ck_assert_int_eq(util_split_hostport("localhost:65535", host,
        sizeof(host), &port), 0);
    ck_assert_int_eq(port, 65535);
    /* Refused: no port, port 0 or too high, not a number, no host, an
     * IPv6 address without brackets, a host too long for the buffer. */
    ck_assert_int_eq(util_split_hostport("localhost", host, sizeof(host),
        &port), -1);
    ck_assert_int_eq(util_split_hostport("localhost:", host, sizeof(host),
        &port), -1);
    ck_assert_int_eq(util_split_hostport("h:0", host, sizeof(host), &port),
        -1);
    ck_assert_int_eq(util_split_hostport("h:65536", host, sizeof(host),
        &port), -1);
    ck_assert_int_eq(util_split_hostport("h:80x", host, sizeof(host), &port),
        -1);
    ck_assert_int_eq(util_split_hostport(":80", host, sizeof(host), &port),
        -1);
    ck_assert_int_eq(util_split_hostport("::1:80", host, sizeof(host),
        &port), -1);
    ck_assert_int_eq(util_split_hostport("[::1:80", host, sizeof(host),
        &port), -1);
    ck_assert_int_eq(util_split_hostport("abcdefghijklmnop:80", host,
        sizeof(host), &port), -1);
}
END_TEST

START_TEST(test_copy)
{
    char small[4];

    ck_assert_int_eq((int)util_copy(small, sizeof(small), "ab"), 2);
    ck_assert_str_eq(small, "ab");
    ck_assert_int_eq((int)util_copy(small, sizeof(small), "abcdef"), 6);
    ck_assert_str_eq(small, "abc");
    ck_assert_int_eq((int)util_copy(small, sizeof(small), "abc"), 3);
    ck_assert_str_eq(small, "abc");
}
END_TEST

START_TEST(test_escape_char)
{
    char e[5];

    ck_assert_int_eq((int)util_escape_char('a', e), 0);
    ck_assert_str_eq(e, "");
    ck_assert_int_eq((int)util_escape_char(' ', e), 0);
    ck_assert_int_eq((int)util_escape_char(0xc3, e), 0);
    ck_assert_int_eq((int)util_escape_char('\r', e), 2);
    ck_assert_str_eq(e, "\\r");
    ck_assert_int_eq((int)util_escape_char('\n', e), 2);
    ck_assert_str_eq(e, "\\n");
    ck_assert_int_eq((int)util_escape_char('\t', e), 2);
    ck_assert_str_eq(e, "\\t");
    ck_assert_int_eq((int)util_escape_char('\\', e), 2);
    ck_assert_str_eq(e, "\\\\");
    ck_assert_int_eq((int)util_escape_char(0x01, e), 4);
    ck_assert_str_eq(e, "\\x01");
    ck_assert_int_eq((int)util_escape_char(0x1b, e), 4);
    ck_assert_str_eq(e, "\\x1b");
    ck_assert_int_eq((int)util_escape_char(0x7f, e), 4);
    ck_assert_str_eq(e, "\\x7f");
}
END_TEST

START_TEST(test_escape_line)
{
    static const char forged[] = "/x\r\nidle processes:       999\r\n";
    char out[128];

    /* A CR/LF that would start a line of its own stays on this one. */
    ck_assert_int_eq((int)util_escape(out, sizeof(out), forged,
        strlen(forged)), 35);
    ck_assert_str_eq(out, "/x\\r\\nidle processes:       999\\r\\n");
    ck_assert_ptr_null(strchr(out, '\n'));
    ck_assert_ptr_null(strchr(out, '\r'));
    /* An escape the text wrote itself is told from one made here. */
    util_escape(out, sizeof(out), "a\\nb", 4);
    ck_assert_str_eq(out, "a\\\\nb");
    /* len, not the NUL, ends the input; bytes from 0x80 pass. */
    util_escape(out, sizeof(out), "\x00\x7f\xc3\xa9", 4);
    ck_assert_str_eq(out, "\\x00\\x7f\xc3\xa9");
    ck_assert_int_eq((int)util_escape(out, sizeof(out), "", 0), 0);
    ck_assert_str_eq(out, "");
}
END_TEST

START_TEST(test_escape_cut)
{
    char out[8], big[3000];
    size_t n;

    /* Exactly what fits is not cut. */
    ck_assert_int_eq((int)util_escape(out, sizeof(out), "abcdefg", 7), 7);
    ck_assert_str_eq(out, "abcdefg");
    /* One more byte: cut, with the marker, within size. */
    ck_assert_int_eq((int)util_escape(out, sizeof(out), "abcdefgh", 8), 7);
    ck_assert_str_eq(out, "abcd...");
    /* Never inside an escape. */
    util_escape(out, sizeof(out), "abc\ndefgh", 9);
    ck_assert_str_eq(out, "abc...");
    util_escape(out, sizeof(out), "ab\x01xxxxx", 8);
    ck_assert_str_eq(out, "ab...");
    /* Nor inside a UTF-8 sequence (U+20AC: e2 82 ac). */
    util_escape(out, sizeof(out), "abc\xe2\x82\xac" "de", 8);
    ck_assert_str_eq(out, "abc...");
    util_escape(out, sizeof(out), "a\xe2\x82\xac" "bcde", 8);
    ck_assert_str_eq(out, "a\xe2\x82\xac...");
    /* Too small for the marker: what fits whole, else nothing. */
    ck_assert_int_eq((int)util_escape(out, 3, "ab", 2), 2);
    ck_assert_str_eq(out, "ab");
    ck_assert_int_eq((int)util_escape(out, 3, "abc", 3), 0);
    ck_assert_str_eq(out, "");
    ck_assert_int_eq((int)util_escape(out, 0, "abc", 3), 0);
    /* A long text of control bytes stays within size. */
    memset(big, '\n', sizeof(big));
    n = util_escape(out, sizeof(out), big, sizeof(big));
    ck_assert_int_eq((int)n, 7);
    ck_assert_str_eq(out, "\\n\\n...");
}
END_TEST

/* The hint's distance: edits, not positions; too long is far. */
START_TEST(test_edit_distance)
{
    char longer[80];

    ck_assert_uint_eq(util_edit_distance("workers", "workers"), 0);
    ck_assert_uint_eq(util_edit_distance("wrokers", "workers"), 2);
    ck_assert_uint_eq(util_edit_distance("failur_mode", "failure_mode"), 1);
    ck_assert_uint_eq(util_edit_distance("", "abc"), 3);
    ck_assert_uint_eq(util_edit_distance("kitten", "sitting"), 3);
    memset(longer, 'a', 70);
    longer[70] = '\0';
    ck_assert(util_edit_distance(longer, "a") == SIZE_MAX);
}
END_TEST

/* util_lltoa writes what printf's %lld does, at every length and at the
 * ends of the range. */
START_TEST(test_lltoa)
{
    char got[21], want[32];
    long long v, p = 1;
    unsigned long long x = 88172645463325252ULL;
    int i, k;

    /* p is 10^i, up to 10^18: 10^19 is past LLONG_MAX. */
    for (i = 0; i < 19; i++) {
        long long around[] = { p - 1, p, p + 1, -(p - 1), -p, -(p + 1) };

        for (k = 0; k < 6; k++) {
            v = around[k];
            snprintf(want, sizeof(want), "%lld", v);
            ck_assert_uint_eq(util_lltoa(v, got), strlen(want));
            ck_assert_str_eq(got, want);
        }
        if (i < 18)
            p *= 10;
    }
    for (k = 0; k < 3; k++) {
        v = k == 0 ? LLONG_MAX : k == 1 ? LLONG_MIN : LLONG_MIN + 1;
        snprintf(want, sizeof(want), "%lld", v);
        ck_assert_uint_eq(util_lltoa(v, got), strlen(want));
        ck_assert_str_eq(got, want);
    }
    /* xorshift64: numbers of every length and sign. */
    for (i = 0; i < 20000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v = (long long)(x >> (x % 64));
        if ((x & 1) && v != LLONG_MIN)
            v = -v;
        snprintf(want, sizeof(want), "%lld", v);
        ck_assert_uint_eq(util_lltoa(v, got), strlen(want));
        ck_assert_str_eq(got, want);
    }
}
END_TEST

Suite *
util_suite(void)
{
    Suite *s = suite_create("util");
    TCase *tc;

    tc = tcase_create("sha256");
    tcase_add_test(tc, test_sha256_empty);
    tcase_add_test(tc, test_sha256_abc);
    tcase_add_test(tc, test_sha256_uses_len_not_nul);
    tcase_add_test(tc, test_sha256_memo);
    tcase_add_test(tc, test_split_hostport);
    tcase_add_test(tc, test_copy);
    tcase_add_test(tc, test_lltoa);
    suite_add_tcase(s, tc);

    tc = tcase_create("escape");
    tcase_add_test(tc, test_escape_char);
    tcase_add_test(tc, test_escape_line);
    tcase_add_test(tc, test_escape_cut);
    suite_add_tcase(s, tc);

    tc = tcase_create("os");
    tcase_add_test(tc, test_random_fills);
    tcase_add_test(tc, test_random_fills_the_tail);
    tcase_add_test(tc, test_clocks);
    tcase_add_test(tc, test_edit_distance);
    suite_add_tcase(s, tc);
    return s;
}
