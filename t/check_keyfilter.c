/*
 * check_keyfilter.c -- tests of src/keyfilter.c: a key added is always
 * found, a key not added is absent once the filter is complete and
 * unknown before, hex that is not a SHA-256 is refused, false positives
 * stay as rare as the sizing says, and one builder at a time (a dead one
 * replaced, a failed build waited out).
 */
#include <stdlib.h>
#include <string.h>

#include <check.h>              /* t/check.h: the suites, then Check */

#include "ratelimit.h"

static struct keyfilter kf;
static void *region;

/* A filter of bytes bytes of bits, zero filled as from mmap. */
static void
filter_new(size_t bytes)
{
    size_t size = keyfilter_size(bytes);

    region = calloc(1, size);
    ck_assert_ptr_nonnull(region);
    ck_assert_int_eq(keyfilter_init(&kf, region, size), 0);
}

static void
teardown(void)
{
    free(region);
    region = NULL;
}

/* The SHA-256 of the text "key-<i>". */
static void
key_md(int i, unsigned char md[32])
{
    char text[32];

    snprintf(text, sizeof(text), "key-%d", i);
    util_sha256(text, strlen(text), md);
}

static int alive_result;

static int
alive(int32_t pid)
{
    (void)pid;
    return alive_result;
}

START_TEST(test_added_found)
{
    unsigned char md[32];
    char hex[80];
    int i;

    filter_new(1 << 16);
    key_md(1, md);
    ck_assert_int_eq(keyfilter_test(&kf, md), KEYFILTER_UNKNOWN);
    ck_assert_int_eq(keyfilter_complete(&kf), 0);
    keyfilter_add(&kf, md);
    ck_assert_int_eq(keyfilter_test(&kf, md), KEYFILTER_MAYBE);
    /* Through the hex a notification carries, either case. */
    key_md(2, md);
    util_hex(md, sizeof(md), hex);
    for (i = 0; hex[i] != '\0'; i++)
        if (i % 2 == 0 && hex[i] >= 'a')
            hex[i] = (char)(hex[i] - 'a' + 'A');
    ck_assert_int_eq(keyfilter_add_hex(&kf, hex), 0);
    ck_assert_int_eq(keyfilter_test(&kf, md), KEYFILTER_MAYBE);
    /* Not a SHA-256: refused, nothing added. */
    ck_assert_int_eq(keyfilter_add_hex(&kf, "abc"), -1);
    hex[10] = 'g';
    ck_assert_int_eq(keyfilter_add_hex(&kf, hex), -1);
    hex[10] = 'a';
    strcat(hex, "0");
    ck_assert_int_eq(keyfilter_add_hex(&kf, hex), -1);
    ck_assert_int_eq(keyfilter_add_hex(&kf, ""), -1);
}
END_TEST

START_TEST(test_complete_absent)
{
    unsigned char md[32];

    filter_new(1 << 16);
    key_md(1, md);
    keyfilter_add(&kf, md);
    ck_assert_int_eq(keyfilter_claim(&kf, 100, 0, alive), 1);
    keyfilter_release(&kf, 100, 1, 0);
    ck_assert_int_eq(keyfilter_complete(&kf), 1);
    key_md(2, md);
    ck_assert_int_eq(keyfilter_test(&kf, md), KEYFILTER_ABSENT);
    /* A lost connection: what is not in it is unknown again, and what
     * is stays. */
    keyfilter_incomplete(&kf);
    ck_assert_int_eq(keyfilter_test(&kf, md), KEYFILTER_UNKNOWN);
    key_md(1, md);
    ck_assert_int_eq(keyfilter_test(&kf, md), KEYFILTER_MAYBE);
    /* Without a filter nothing is ever absent. */
    ck_assert_int_eq(keyfilter_test(NULL, md), KEYFILTER_UNKNOWN);
    ck_assert_int_eq(keyfilter_complete(NULL), 0);
}
END_TEST

START_TEST(test_false_positives)
{
    unsigned char md[32];
    int i, maybe = 0;

    /* 4 bits a key, 256 KiB: 50,000 keys fill about 9 % of the bits, so
     * about 1 random key in 15,000 passes.  Allow ten times that. */
    filter_new(256 << 10);
    for (i = 0; i < 50000; i++) {
        key_md(i, md);
        keyfilter_add(&kf, md);
    }
    for (i = 0; i < 50000; i++) {
        key_md(i, md);
        ck_assert_int_eq(keyfilter_test(&kf, md), KEYFILTER_MAYBE);
    }
    keyfilter_release(&kf, 0, 1, 0);
    for (i = 50000; i < 150000; i++) {
        key_md(i, md);
        maybe += keyfilter_test(&kf, md) == KEYFILTER_MAYBE;
    }
    ck_assert_int_lt(maybe, 70);
}
END_TEST

START_TEST(test_one_builder)
{
    filter_new(4096);
    alive_result = 1;
    ck_assert_int_eq(keyfilter_claim(&kf, 100, 0, alive), 1);
    ck_assert_int_eq(keyfilter_claim(&kf, 200, 0, alive), 0);
    /* The builder died: taken over. */
    alive_result = 0;
    ck_assert_int_eq(keyfilter_claim(&kf, 200, 0, alive), 1);
    alive_result = 1;
    /* A release by someone else changes nothing of the claim. */
    keyfilter_release(&kf, 100, 0, 0);
    ck_assert_int_eq(keyfilter_claim(&kf, 300, 5000, alive), 0);
    /* A failed build: the next waits a second. */
    keyfilter_release(&kf, 200, 0, 10000);
    ck_assert_int_eq(keyfilter_claim(&kf, 300, 10500, alive), 0);
    ck_assert_int_eq(keyfilter_claim(&kf, 300, 11000, alive), 1);
    keyfilter_release(&kf, 300, 1, 11200);
    /* Complete: nothing to build. */
    ck_assert_int_eq(keyfilter_claim(&kf, 400, 20000, alive), 0);
    keyfilter_incomplete(&kf);
    ck_assert_int_eq(keyfilter_claim(&kf, 400, 20000, alive), 1);
}
END_TEST

START_TEST(test_too_small)
{
    char buf[64];

    ck_assert_int_eq(keyfilter_size(0), 0);
    ck_assert_int_eq(keyfilter_init(&kf, buf, sizeof(buf)), -1);
    ck_assert_ptr_null(kf.base);
    ck_assert_int_eq(keyfilter_claim(&kf, 1, 0, NULL), 0);
}
END_TEST

Suite *
keyfilter_suite(void)
{
    Suite *s = suite_create("keyfilter");
    TCase *tc = tcase_create("keyfilter");

    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, test_added_found);
    tcase_add_test(tc, test_complete_absent);
    tcase_add_test(tc, test_false_positives);
    tcase_add_test(tc, test_one_builder);
    tcase_add_test(tc, test_too_small);
    suite_add_tcase(s, tc);
    return s;
}
