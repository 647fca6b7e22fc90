/*
 * check_fcgi.c -- the FastCGI read-ahead scanner (src/fcgi.c).
 *
 * Requests are built record by record in a buffer, then scanned whole and
 * cut at every length, so that "complete", "more needed" and "refused" are
 * each seen where they must be, including for the records that make
 * Debian's libfcgi abort.
 */
#include <string.h>

#include <check.h>

#include "ratelimit.h"

struct wire {
    unsigned char b[8192];
    size_t n;
};

static void
record(struct wire *w, int type, int id, const void *content, size_t len,
    int pad)
{
    unsigned char *h = w->b + w->n;

    h[0] = 1;
    h[1] = (unsigned char)type;
    h[2] = (unsigned char)(id >> 8);
    h[3] = (unsigned char)id;
    h[4] = (unsigned char)(len >> 8);
    h[5] = (unsigned char)len;
    h[6] = (unsigned char)pad;
    h[7] = 0;
    memcpy(h + 8, content, len);
    memset(h + 8 + len, 0, (size_t)pad);
    w->n += 8 + len + (size_t)pad;
}

static void
begin(struct wire *w, int id, int role, int keep)
{
    unsigned char body[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };

    body[0] = (unsigned char)(role >> 8);
    body[1] = (unsigned char)role;
    body[2] = keep ? 1 : 0;
    record(w, 1, id, body, 8, 0);
}

/* One name-value pair, short length forms. */
static size_t
pair(unsigned char *out, const char *name, const char *value, size_t vlen)
{
    size_t nlen = strlen(name);

    out[0] = (unsigned char)nlen;
    out[1] = (unsigned char)vlen;
    memcpy(out + 2, name, nlen);
    memcpy(out + 2 + nlen, value, vlen);
    return 2 + nlen + vlen;
}

/* A BEGIN_REQUEST of id and role, a PARAMS record with the one pair
 * name=value (vlen bytes of value), and the empty PARAMS record that ends
 * the stream. */
static void
one_param_request(struct wire *w, int id, int role, const char *name,
    const char *value, size_t vlen)
{
    unsigned char p[64];
    size_t n;

    memset(w, 0, sizeof(*w));
    begin(w, id, role, 0);
    n = pair(p, name, value, vlen);
    record(w, 4, id, p, n, 0);
    record(w, 4, id, "", 0, 0);
}

static void
normal_request(struct wire *w, int keep, const char *body)
{
    unsigned char p[512];
    size_t n = 0;

    memset(w, 0, sizeof(*w));
    begin(w, 1, 1, keep);
    n += pair(p + n, "REQUEST_METHOD", "POST", 4);
    n += pair(p + n, "REQUEST_URI", "/v1/check", 9);
    record(w, 4, 1, p, n, 3);
    record(w, 4, 1, "", 0, 0);
    if (*body != '\0')
        record(w, 5, 1, body, strlen(body), 0);
    record(w, 5, 1, "", 0, 0);
}

START_TEST(test_complete_request)
{
    struct wire w;
    struct fcgi_scan s;

    normal_request(&w, 1, "{\"route\":\"/a\"}");
    ck_assert_int_eq(fcgi_scan(w.b, w.n, 1, &s), FCGI_SCAN_DONE);
    ck_assert_int_eq(s.request_id, 1);
    ck_assert_int_eq(s.role, 1);
    ck_assert_int_eq(s.keep_conn, 1);
    ck_assert_int_eq(s.nparams, 2);
    ck_assert_int_eq((int)s.stdin_len, 14);
    ck_assert_int_eq((int)s.stdin_end, (int)w.n);
    ck_assert_int_eq(s.nul_in_key, 0);
    /* Without want_stdin it is done at the end of PARAMS. */
    ck_assert_int_eq(fcgi_scan(w.b, w.n, 0, &s), FCGI_SCAN_DONE);
    ck_assert_int_eq((int)s.stdin_end, 0);
    ck_assert_int_lt((int)s.params_end, (int)w.n);
}
END_TEST

START_TEST(test_every_prefix_wants_more)
{
    struct wire w;
    struct fcgi_scan s;
    size_t cut;

    normal_request(&w, 0, "{}");
    for (cut = 0; cut < w.n; cut++)
        ck_assert_msg(fcgi_scan(w.b, cut, 1, &s) == FCGI_SCAN_MORE,
            "a request cut at %zu bytes of %zu is not complete", cut, w.n);
    ck_assert_int_eq(fcgi_scan(w.b, w.n, 1, &s), FCGI_SCAN_DONE);
}
END_TEST

START_TEST(test_authorizer_needs_no_stdin)
{
    struct wire w;
    struct fcgi_scan s;

    one_param_request(&w, 7, 2, "REQUEST_URI", "/x", 2);
    ck_assert_int_eq(fcgi_scan(w.b, w.n, 1, &s), FCGI_SCAN_DONE);
    ck_assert_int_eq(s.role, 2);
}
END_TEST

/* The record that aborts Debian's libfcgi: two four-byte lengths of 2^30
 * in an eight-byte PARAMS record. */
START_TEST(test_huge_lengths_refused)
{
    static const unsigned char lens[8] = { 0xc0, 0, 0, 0, 0xc0, 0, 0, 0 };
    struct wire w;
    struct fcgi_scan s;

    memset(&w, 0, sizeof(w));
    begin(&w, 1, 1, 0);
    record(&w, 4, 1, lens, 8, 0);
    /* Refused at once, before the end of PARAMS: no stream may be that
     * long, so there is nothing to wait for... */
    ck_assert_int_eq(fcgi_scan(w.b, w.n, 0, &s), FCGI_SCAN_BAD);
    ck_assert_ptr_nonnull(s.error);
    record(&w, 4, 1, "", 0, 0);
    /* ...and of course once the stream is known to hold less. */
    ck_assert_int_eq(fcgi_scan(w.b, w.n, 0, &s), FCGI_SCAN_BAD);
}
END_TEST

START_TEST(test_pair_across_records)
{
    struct wire w;
    struct fcgi_scan s;
    unsigned char p[64];
    size_t n;

    memset(&w, 0, sizeof(w));
    begin(&w, 1, 1, 0);
    n = pair(p, "HTTP_X_API_KEY", "abc\0def", 7);
    record(&w, 4, 1, p, 5, 1);
    record(&w, 4, 1, p + 5, n - 5, 0);
    record(&w, 4, 1, "", 0, 0);
    record(&w, 5, 1, "", 0, 0);
    ck_assert_int_eq(fcgi_scan(w.b, w.n, 1, &s), FCGI_SCAN_DONE);
    ck_assert_int_eq(s.nparams, 1);
    ck_assert_int_eq(s.nul_in_key, 1);
    ck_assert_int_eq(s.nul_in_value, 0);
}
END_TEST

/* A request whose one pair p (n bytes) is split into two PARAMS records
 * at byte at, padded with pad1 and pad2 bytes. */
static void
split_pair_request(struct wire *w, const unsigned char *p, size_t n,
    size_t at, int pad1, int pad2)
{
    memset(w, 0, sizeof(*w));
    begin(w, 1, 1, 0);
    record(w, 4, 1, p, at, pad1);
    record(w, 4, 1, p + at, n - at, pad2);
    record(w, 4, 1, "", 0, 0);
    record(w, 5, 1, "", 0, 0);
}

/* The pair split into two records at every place: in the lengths, the
 * name and the value, on both sides of the NUL. */
START_TEST(test_pair_split_anywhere)
{
    struct wire w;
    struct fcgi_scan s;
    unsigned char p[64];
    size_t n, at;

    n = pair(p, "HTTP_X_API_KEY", "abc\0def", 7);
    for (at = 1; at < n; at++) {
        split_pair_request(&w, p, n, at, 0, 3);
        ck_assert_int_eq(fcgi_scan(w.b, w.n, 1, &s), FCGI_SCAN_DONE);
        ck_assert_int_eq(s.nparams, 1);
        ck_assert_int_eq(s.nul_in_key, 1);
        ck_assert_int_eq(s.nul_in_value, 0);
    }
    n = pair(p, "REQUEST_URI", "/abc", 4);
    for (at = 1; at < n; at++) {
        split_pair_request(&w, p, n, at, 1, 0);
        ck_assert_int_eq(fcgi_scan(w.b, w.n, 1, &s), FCGI_SCAN_DONE);
        ck_assert_int_eq(s.nul_in_key + s.nul_in_value, 0);
    }
}
END_TEST

START_TEST(test_nul_in_other_value)
{
    struct wire w;
    struct fcgi_scan s;

    one_param_request(&w, 1, 1, "REQUEST_URI", "/a\0b", 4);
    ck_assert_int_eq(fcgi_scan(w.b, w.n, 0, &s), FCGI_SCAN_DONE);
    ck_assert_int_eq(s.nul_in_key, 0);
    ck_assert_int_eq(s.nul_in_value, 1);
}
END_TEST

START_TEST(test_refusals)
{
    struct wire w;
    struct fcgi_scan s;
    unsigned char p[64];
    size_t n;

    /* A management record (request id 0), even before it is whole. */
    memset(&w, 0, sizeof(w));
    record(&w, 200, 0, "abcdefgh", 8, 0);
    ck_assert_int_eq(fcgi_scan(w.b, w.n, 0, &s), FCGI_SCAN_BAD);
    ck_assert_int_eq(fcgi_scan(w.b, 8, 0, &s), FCGI_SCAN_BAD);

    /* Another version. */
    normal_request(&w, 0, "");
    w.b[0] = 2;
    ck_assert_int_eq(fcgi_scan(w.b, w.n, 1, &s), FCGI_SCAN_BAD);

    /* The Filter role. */
    memset(&w, 0, sizeof(w));
    begin(&w, 1, 3, 0);
    ck_assert_int_eq(fcgi_scan(w.b, w.n, 0, &s), FCGI_SCAN_BAD);

    /* PARAMS first. */
    memset(&w, 0, sizeof(w));
    record(&w, 4, 1, "", 0, 0);
    ck_assert_int_eq(fcgi_scan(w.b, w.n, 0, &s), FCGI_SCAN_BAD);

    /* Records of another request in the middle. */
    memset(&w, 0, sizeof(w));
    begin(&w, 1, 1, 0);
    n = pair(p, "A", "b", 1);
    record(&w, 4, 2, p, n, 0);
    ck_assert_int_eq(fcgi_scan(w.b, w.n, 0, &s), FCGI_SCAN_BAD);

    /* STDIN before the end of PARAMS. */
    memset(&w, 0, sizeof(w));
    begin(&w, 1, 1, 0);
    record(&w, 5, 1, "x", 1, 0);
    ck_assert_int_eq(fcgi_scan(w.b, w.n, 0, &s), FCGI_SCAN_BAD);

    /* A value length one past the stream. */
    memset(&w, 0, sizeof(w));
    begin(&w, 1, 1, 0);
    n = pair(p, "A", "bc", 2);
    p[1] = 3;
    record(&w, 4, 1, p, n, 0);
    record(&w, 4, 1, "", 0, 0);
    ck_assert_int_eq(fcgi_scan(w.b, w.n, 0, &s), FCGI_SCAN_BAD);

    /* An empty name. */
    one_param_request(&w, 1, 1, "", "x", 1);
    ck_assert_int_eq(fcgi_scan(w.b, w.n, 0, &s), FCGI_SCAN_BAD);
}
END_TEST

START_TEST(test_params_limit)
{
    static unsigned char big[65535];
    static unsigned char wire[3 * 65600];
    struct fcgi_scan s;
    size_t n = 0;
    int i;

    /* Two records of 65535 bytes pass FCGI_PARAMS_MAX before any pair is
     * read: refused as soon as the second header is seen whole. */
    memset(big, 'a', sizeof(big));
    memcpy(wire, "\1\1\0\1\0\10\0\0\0\1\0\0\0\0\0\0", 16);
    n = 16;
    for (i = 0; i < 2; i++) {
        memcpy(wire + n, "\1\4\0\1\377\377\0\0", 8);
        memcpy(wire + n + 8, big, sizeof(big));
        n += 8 + sizeof(big);
    }
    ck_assert_int_eq(fcgi_scan(wire, n, 0, &s), FCGI_SCAN_BAD);
}
END_TEST

/* A pair that fits the limit but not yet the bytes sent is waited for; one
 * that cannot fit the limit is refused before the stream ends. */
START_TEST(test_partial_pairs)
{
    /* name 1 byte; value 4096 bytes announced, 1 byte of it sent */
    static const unsigned char fits[] = { 1, 0x80, 0, 0x10, 0, 'A', 'b' };
    /* name 1 byte; value 65536 bytes: more than any stream may hold */
    static const unsigned char cannot[] = { 1, 0x80, 1, 0, 0, 'A' };
    struct wire w;
    struct fcgi_scan s;

    memset(&w, 0, sizeof(w));
    begin(&w, 1, 1, 0);
    record(&w, 4, 1, fits, sizeof(fits), 0);
    ck_assert_int_eq(fcgi_scan(w.b, w.n, 0, &s), FCGI_SCAN_MORE);
    memset(&w, 0, sizeof(w));
    begin(&w, 1, 1, 0);
    record(&w, 4, 1, cannot, sizeof(cannot), 0);
    ck_assert_int_eq(fcgi_scan(w.b, w.n, 0, &s), FCGI_SCAN_BAD);
}
END_TEST

/* The leftover empty STDIN of an earlier request on a kept connection is
 * reported for the caller to read off. */
START_TEST(test_leftover_stdin_skipped)
{
    struct wire w, next;
    struct fcgi_scan s;

    memset(&w, 0, sizeof(w));
    record(&w, 5, 3, "", 0, 0);
    ck_assert_int_eq(fcgi_scan(w.b, w.n, 1, &s), FCGI_SCAN_MORE);
    ck_assert_int_eq((int)s.skip, 8);
    normal_request(&next, 0, "");
    memcpy(w.b + w.n, next.b, next.n);
    w.n += next.n;
    ck_assert_int_eq(fcgi_scan(w.b, w.n, 1, &s), FCGI_SCAN_MORE);
    ck_assert_int_eq((int)s.skip, 8);
    ck_assert_int_eq(fcgi_scan(w.b + 8, w.n - 8, 1, &s), FCGI_SCAN_DONE);
}
END_TEST

Suite *
fcgi_suite(void)
{
    Suite *s = suite_create("fcgi");
    TCase *tc = tcase_create("scan");

    tcase_add_test(tc, test_complete_request);
    tcase_add_test(tc, test_every_prefix_wants_more);
    tcase_add_test(tc, test_authorizer_needs_no_stdin);
    tcase_add_test(tc, test_huge_lengths_refused);
    tcase_add_test(tc, test_pair_across_records);
    tcase_add_test(tc, test_pair_split_anywhere);
    tcase_add_test(tc, test_nul_in_other_value);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_params_limit);
    tcase_add_test(tc, test_leftover_stdin_skipped);
    tcase_add_test(tc, test_partial_pairs);
    suite_add_tcase(s, tc);
    return s;
}
