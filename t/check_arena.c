/*
 * check_arena.c -- tests of src/arena.c: a value put is got back whole,
 * a value the ring has since written over is refused (never a torn or a
 * newer value returned), a value larger than a quarter of the ring is not
 * taken, and positions that name nothing are refused.
 */
#include <stdlib.h>
#include <string.h>

#include <check.h>              /* t/check.h: the suites, then Check */

#include "ratelimit.h"

static struct arena ar;
static void *region;

static void
arena_new(size_t bytes)
{
    size_t size = arena_size(bytes);

    region = calloc(1, size);
    ck_assert_ptr_nonnull(region);
    ck_assert_int_eq(arena_init(&ar, region, size), 0);
}

static void
teardown(void)
{
    free(region);
    region = NULL;
}

/* A value of len bytes, all c. */
static unsigned char *
value(size_t len, int c)
{
    unsigned char *v = malloc(len);

    ck_assert_ptr_nonnull(v);
    memset(v, c, len);
    return v;
}

START_TEST(test_put_get)
{
    unsigned char *a = value(1000, 'a'), *b = value(3, 'b'), out[1000];
    uint64_t pa, pb;

    arena_new(1 << 16);
    pa = arena_put(&ar, a, 1000);
    pb = arena_put(&ar, b, 3);
    ck_assert(pa != 0 && pb != 0 && pa != pb);
    ck_assert_int_eq(arena_get(&ar, pa, out, 1000), 0);
    ck_assert_int_eq(memcmp(out, a, 1000), 0);
    ck_assert_int_eq(arena_get(&ar, pb, out, 3), 0);
    ck_assert_int_eq(memcmp(out, b, 3), 0);
    /* The wrong length, a position that names nothing, none at all. */
    ck_assert_int_eq(arena_get(&ar, pa, out, 999), -1);
    ck_assert_int_eq(arena_get(&ar, pa + 16, out, 3), -1);
    ck_assert_int_eq(arena_get(&ar, 0, out, 3), -1);
    ck_assert_int_eq(arena_get(&ar, pb + 4096, out, 3), -1);
    free(a);
    free(b);
}
END_TEST

START_TEST(test_overwritten)
{
    unsigned char *v = value(4000, 'x'), out[4000];
    uint64_t first, pos[40];
    int i, ok = 0;

    arena_new(1 << 16);
    first = arena_put(&ar, v, 4000);
    /* 40 more values of 4,000 bytes: the ring of 64 KiB has gone round
     * more than twice; the first is gone, the last is there. */
    for (i = 0; i < 40; i++) {
        v[0] = (unsigned char)i;
        pos[i] = arena_put(&ar, v, 4000);
        ck_assert(pos[i] != 0);
    }
    ck_assert_int_eq(arena_get(&ar, first, out, 4000), -1);
    /* Of the 40, only those of the last lap are still there, each with
     * its own first byte, and never an older one after a newer one. */
    for (i = 0; i < 40; i++)
        if (arena_get(&ar, pos[i], out, 4000) == 0) {
            ck_assert_int_eq(out[0], i);
            ok++;
        } else
            ck_assert_int_eq(ok, 0);
    ck_assert_int_ge(ok, 10);
    ck_assert_int_le(ok, 16);
    ck_assert_int_eq(arena_get(&ar, pos[39], out, 4000), 0);
    free(v);
}
END_TEST

START_TEST(test_too_large)
{
    unsigned char *v = value(20000, 'y');

    arena_new(1 << 16);
    ck_assert_uint_eq(arena_max(&ar), (1 << 14) - 16);
    ck_assert(arena_put(&ar, v, 20000) == 0);
    ck_assert(arena_put(&ar, v, arena_max(&ar)) != 0);
    ck_assert(arena_put(NULL, v, 10) == 0);
    ck_assert_uint_eq(arena_size(0), 0);
    free(v);
}
END_TEST

Suite *
arena_suite(void)
{
    Suite *s = suite_create("arena");
    TCase *tc = tcase_create("arena");

    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, test_put_get);
    tcase_add_test(tc, test_overwritten);
    tcase_add_test(tc, test_too_large);
    suite_add_tcase(s, tc);
    return s;
}
