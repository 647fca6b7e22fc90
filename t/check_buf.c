/*
 * check_buf.c -- tests of src/buf.c: the growable byte buffer.
 */
#include <string.h>

#include <check.h>              /* t/check.h: the suites, then Check */

#include "ratelimit.h"

START_TEST(test_buf_init_empty)
{
    struct rl_buf b;

    buf_init(&b);
    ck_assert_ptr_null(b.data);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_uint_eq(b.cap, 0);
    ck_assert_int_eq(buf_puts(&b, ""), 0);
    ck_assert_ptr_nonnull(b.data);
    ck_assert_str_eq(b.data, "");
    buf_free(&b);
    ck_assert_ptr_null(b.data);
    ck_assert_uint_eq(b.len, 0);
}
END_TEST

START_TEST(test_buf_printf_grows)
{
    struct rl_buf b;
    char chunk[301], want[1300];
    int i;

    memset(chunk, 'a', 300);
    chunk[300] = '\0';
    buf_init(&b);
    want[0] = '\0';
    for (i = 0; i < 4; i++) {
        chunk[0] = (char)('0' + i);
        ck_assert_int_eq(buf_printf(&b, "%s", chunk), 0);
        strcat(want, chunk);
        ck_assert_uint_eq(b.len, 300u * (size_t)(i + 1));
        ck_assert_uint_gt(b.cap, b.len);
        ck_assert_str_eq(b.data, want);
    }
    ck_assert_int_eq(buf_printf(&b, "-%d-%s", 42, "end"), 0);
    strcat(want, "-42-end");
    ck_assert_str_eq(b.data, want);
    ck_assert_uint_eq(b.len, strlen(want));
    buf_free(&b);
}
END_TEST

START_TEST(test_buf_printf_one_large)
{
    struct rl_buf b;
    char big[5001];

    memset(big, 'z', 5000);
    big[5000] = '\0';
    buf_init(&b);
    ck_assert_int_eq(buf_puts(&b, "<"), 0);
    ck_assert_int_eq(buf_printf(&b, "%s>", big), 0);
    ck_assert_uint_eq(b.len, 5002);
    ck_assert_int_eq(b.data[0], '<');
    ck_assert_int_eq(b.data[5000], 'z');
    ck_assert_int_eq(b.data[5001], '>');
    ck_assert_int_eq(b.data[5002], '\0');
    buf_free(&b);
}
END_TEST

START_TEST(test_buf_append_binary_and_reset)
{
    struct rl_buf b;

    buf_init(&b);
    ck_assert_int_eq(buf_append(&b, "a\0b", 3), 0);
    ck_assert_uint_eq(b.len, 3);
    ck_assert_int_eq(memcmp(b.data, "a\0b", 4), 0);
    buf_reset(&b);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_str_eq(b.data, "");
    ck_assert_int_eq(buf_puts(&b, "again"), 0);
    ck_assert_str_eq(b.data, "again");
    buf_free(&b);
}
END_TEST

Suite *
buf_suite(void)
{
    Suite *s = suite_create("buf");
    TCase *tc;

    tc = tcase_create("buf");
    tcase_add_test(tc, test_buf_init_empty);
    tcase_add_test(tc, test_buf_printf_grows);
    tcase_add_test(tc, test_buf_printf_one_large);
    tcase_add_test(tc, test_buf_append_binary_and_reset);
    suite_add_tcase(s, tc);
    return s;
}
