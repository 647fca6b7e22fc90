/*
 * check_shm.c -- the shared segment's tables and the packing of rules
 * (src/shm.c).
 *
 * The tables are exercised in an ordinary allocation, except for the
 * concurrency test, which forks writers over a real MAP_SHARED mapping and
 * checks that a reader never keeps a half-written entry.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "ratelimit.h"
#include "fixtures.h"

static void
id_of(unsigned char id[32], unsigned n)
{
    /* Same low 8 bytes modulo a small set count puts ids in one set. */
    memset(id, 0, 32);
    memcpy(id + 8, &n, sizeof(n));
}

START_TEST(test_put_get)
{
    size_t counts[SHM_NTABLES] = { 8, 8, 4 }, size;
    struct shm m, again;
    struct shm_meta meta;
    unsigned char id[32];
    char v[64];
    void *base = fixture_shm_region(128, counts, &size);

    ck_assert_int_eq(shm_init(&m, base, size, 128, counts), 0);
    ck_assert_int_eq(shm_attach(&again, base, size), 0);
    ck_assert_ptr_eq(again.board, m.board);
    ck_assert_int_eq(shm_attach(&again, base, size - 1), -1);
    id_of(id, 1);
    ck_assert_int_eq(shm_get(&m, SHM_KEYS, id, v, sizeof(v), &meta), 0);
    ck_assert_int_eq(shm_put(&m, SHM_KEYS, id, "hello", 6, 100, 1, 1), 0);
    ck_assert_int_eq(shm_get(&m, SHM_KEYS, id, v, sizeof(v), &meta), 1);
    ck_assert_str_eq(v, "hello");
    ck_assert_int_eq((int)meta.stamp, 100);
    ck_assert_int_eq((int)meta.generation, 1);
    /* Tables are apart: the same id is absent from the others. */
    ck_assert_int_eq(shm_get(&m, SHM_UNKNOWN, id, v, sizeof(v), &meta), 0);
    ck_assert_int_eq(shm_put(&m, SHM_UNKNOWN, id, NULL, 0, 500, 1, 1), 0);
    ck_assert_int_eq(shm_get(&m, SHM_UNKNOWN, id, v, sizeof(v), &meta), 1);
    ck_assert_int_eq((int)meta.len, 0);
    /* Replacing keeps one entry. */
    ck_assert_int_eq(shm_put(&m, SHM_KEYS, id, "world", 6, 200, 2, 1), 0);
    ck_assert_int_eq(shm_get(&m, SHM_KEYS, id, v, sizeof(v), &meta), 1);
    ck_assert_str_eq(v, "world");
    ck_assert_int_eq((int)meta.generation, 2);
    shm_remove(&m, SHM_KEYS, id, 1);
    ck_assert_int_eq(shm_get(&m, SHM_KEYS, id, v, sizeof(v), &meta), 0);
    /* Too large a value, or no stamp, is refused. */
    ck_assert_int_eq(shm_put(&m, SHM_UNKNOWN, id, "x", 1, 1, 1, 1), -1);
    ck_assert_int_eq(shm_put(&m, SHM_KEYS, id, "x", 1, 0, 1, 1), -1);
    free(base);
}
END_TEST

START_TEST(test_generation)
{
    size_t counts[SHM_NTABLES] = { 4, 4, 4 }, size;
    struct shm m;
    void *base = fixture_shm_region(128, counts, &size);
    uint64_t g;

    ck_assert_int_eq(shm_init(&m, base, size, 128, counts), 0);
    g = shm_generation(&m);
    shm_changed(&m);
    ck_assert(shm_generation(&m) == g + 1);
    free(base);
}
END_TEST

/* A full set gives up its oldest stamp, and only within its own table:
 * unknown keys never push out known ones. */
START_TEST(test_eviction)
{
    size_t counts[SHM_NTABLES] = { SHM_WAYS, SHM_WAYS, 4 }, size;
    struct shm m;
    struct shm_meta meta;
    unsigned char id[32];
    char v[8];
    unsigned i;
    void *base = fixture_shm_region(128, counts, &size);

    ck_assert_int_eq(shm_init(&m, base, size, 128, counts), 0);
    for (i = 0; i < SHM_WAYS; i++) {
        id_of(id, i);
        ck_assert_int_eq(shm_put(&m, SHM_KEYS, id, "k", 2, 10 + i, 1, 1), 0);
    }
    /* 1000 ids into a small table: most push another out (1). */
    for (i = 100; i < 1100; i++) {
        id_of(id, i);
        ck_assert_int_ge(shm_put(&m, SHM_UNKNOWN, id, NULL, 0, 99, 1, 1), 0);
    }
    for (i = 0; i < SHM_WAYS; i++) {
        id_of(id, i);
        ck_assert_int_eq(shm_get(&m, SHM_KEYS, id, v, sizeof(v), &meta), 1);
    }
    id_of(id, SHM_WAYS);
    /* A full set: the oldest goes, and shm_put says so. */
    ck_assert_int_eq(shm_put(&m, SHM_KEYS, id, "k", 2, 50, 1, 1), 1);
    /* Its own entry again: nobody is pushed out. */
    ck_assert_int_eq(shm_put(&m, SHM_KEYS, id, "k", 2, 51, 1, 1), 0);
    id_of(id, 0);           /* stamp 10, the oldest */
    ck_assert_int_eq(shm_get(&m, SHM_KEYS, id, v, sizeof(v), &meta), 0);
    id_of(id, 1);
    ck_assert_int_eq(shm_get(&m, SHM_KEYS, id, v, sizeof(v), &meta), 1);
    free(base);
}
END_TEST

static int dead_pid_alive(int32_t pid) { (void)pid; return 0; }
static int live_pid_alive(int32_t pid) { (void)pid; return 1; }

/* An entry left odd (its writer died in the middle) reads as absent, and
 * is taken over only when its writer is gone. */
START_TEST(test_dead_writer)
{
    size_t counts[SHM_NTABLES] = { 4, 4, 4 }, size;
    struct shm m;
    struct shm_meta meta;
    unsigned char id[32];
    uint32_t *seq;
    char v[8];
    void *base = fixture_shm_region(128, counts, &size);

    ck_assert_int_eq(shm_init(&m, base, size, 128, counts), 0);
    id_of(id, 7);
    ck_assert_int_eq(shm_put(&m, SHM_KEYS, id, "a", 2, 5, 1, 42), 0);
    seq = (uint32_t *)m.table[SHM_KEYS];     /* the set's first way */
    ck_assert_int_eq(*seq % 2, 0);
    (*seq)++;
    ck_assert_int_eq(shm_get(&m, SHM_KEYS, id, v, sizeof(v), &meta), 0);
    m.pid_alive = live_pid_alive;
    ck_assert_int_eq(shm_put(&m, SHM_KEYS, id, "b", 2, 6, 1, 43), -1);
    m.pid_alive = dead_pid_alive;
    ck_assert_int_eq(shm_put(&m, SHM_KEYS, id, "b", 2, 6, 1, 43), 0);
    ck_assert_int_eq(shm_get(&m, SHM_KEYS, id, v, sizeof(v), &meta), 1);
    ck_assert_str_eq(v, "b");
    free(base);
}
END_TEST

/* Two writers and a reader over MAP_SHARED: every value a reader keeps is
 * whole (its bytes all equal the first). */
START_TEST(test_concurrent)
{
    size_t counts[SHM_NTABLES] = { 4, 4, 4 }, size;
    struct shm m;
    struct shm_meta meta;
    unsigned char id[32], v[SHM_KEY_VALUE_MAX], w[SHM_KEY_VALUE_MAX];
    pid_t kids[2];
    int i, k, status, torn = 0, seen = 0;
    size_t j;
    void *base;

    size = shm_size(128, counts);
    base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
        -1, 0);
    ck_assert(base != MAP_FAILED);
    ck_assert_int_eq(shm_init(&m, base, size, 128, counts), 0);
    id_of(id, 3);
    for (k = 0; k < 2; k++) {
        if ((kids[k] = fork()) == 0) {
            for (i = 0; i < 200000; i++) {
                memset(w, 'a' + (i + k) % 26, sizeof(w));
                shm_put(&m, SHM_KEYS, id, w, sizeof(w), i + 1, 1, getpid());
            }
            _exit(0);
        }
    }
    /* Read while the writers run (bounded, should they hang). */
    for (i = 0; i < 50000000 && waitpid(-1, &status, WNOHANG) == 0; i++) {
        if (shm_get(&m, SHM_KEYS, id, v, sizeof(v), &meta) != 1)
            continue;
        seen++;
        for (j = 1; j < sizeof(v); j++)
            if (v[j] != v[0]) {
                torn++;
                break;
            }
    }
    for (k = 0; k < 2; k++)
        waitpid(kids[k], &status, 0);
    ck_assert_int_eq(torn, 0);
    ck_assert_int_gt(seen, 0);
    munmap(base, size);
}
END_TEST

static void
sample_rules(struct rl_rule *r)
{
    fixture_rule_init(&r[0], 11, "/api/*", -3);
    r[0].shadow = 1;
    r[0].per_route = 1;
    r[0].nlimits = 2;
    fixture_limit_gcra(&r[0].limits[0], 101, "burst", 10, 1000000, 5);
    fixture_limit_fw(&r[0].limits[1], 102, "daily", 10000, RL_CAL_DAY);
    fixture_rule_init(&r[1], 12, "*", 0);
    r[1].fail_open = 1;
    r[1].always = 1;
    r[1].broken = 1;
    r[1].nlimits = 1;
    fixture_limit_tb(&r[1].limits[0], 103, "tb", 7, 0.25);
    r[1].limits[0].window_seconds = 9;
}

START_TEST(test_rules_round_trip)
{
    struct rl_rule in[2], out[2];
    unsigned char buf[4096];
    long n;
    int i, j;

    sample_rules(in);
    n = shm_rules_pack(in, 2, buf, sizeof(buf));
    ck_assert_int_gt(n, 0);
    memset(out, 0x5a, sizeof(out));
    ck_assert_int_eq(shm_rules_count(buf, (size_t)n), 2);
    ck_assert_int_eq(shm_rules_count(buf, 3), -1);
    ck_assert_int_eq(shm_rules_unpack(buf, (size_t)n, out, 2), 2);
    for (i = 0; i < 2; i++) {
        ck_assert(out[i].id == in[i].id);
        ck_assert_str_eq(out[i].pattern, in[i].pattern);
        ck_assert_int_eq(out[i].priority, in[i].priority);
        ck_assert_int_eq(out[i].shadow, in[i].shadow);
        ck_assert_int_eq(out[i].fail_open, in[i].fail_open);
        ck_assert_int_eq(out[i].per_route, in[i].per_route);
        ck_assert_int_eq(out[i].always, in[i].always);
        ck_assert_int_eq(out[i].broken, in[i].broken);
        ck_assert_int_eq(out[i].nlimits, in[i].nlimits);
        for (j = 0; j < in[i].nlimits; j++)
            ck_assert(out[i].limits[j].id == in[i].limits[j].id &&
                strcmp(out[i].limits[j].name, in[i].limits[j].name) == 0 &&
                out[i].limits[j].algorithm == in[i].limits[j].algorithm &&
                out[i].limits[j].limit_count == in[i].limits[j].limit_count &&
                out[i].limits[j].window_seconds ==
                    in[i].limits[j].window_seconds &&
                out[i].limits[j].bucket_capacity ==
                    in[i].limits[j].bucket_capacity &&
                out[i].limits[j].refill_rate == in[i].limits[j].refill_rate &&
                out[i].limits[j].period_us == in[i].limits[j].period_us &&
                out[i].limits[j].burst == in[i].limits[j].burst &&
                out[i].limits[j].calendar == in[i].limits[j].calendar);
    }
    /* Every shorter prefix, a longer buffer and too small a maximum are
     * refused. */
    for (i = 0; i < n; i++)
        ck_assert_int_eq(shm_rules_unpack(buf, (size_t)i, out, 2), -1);
    ck_assert_int_eq(shm_rules_unpack(buf, (size_t)n + 1, out, 2), -1);
    ck_assert_int_eq(shm_rules_unpack(buf, (size_t)n, out, 1), -1);
    /* Packing into too little room fails rather than truncates. */
    ck_assert_int_eq(shm_rules_pack(in, 2, buf, (size_t)n - 1), -1);
}
END_TEST

Suite *
shm_suite(void)
{
    Suite *s = suite_create("shm");
    TCase *tc = tcase_create("tables");

    tcase_add_test(tc, test_put_get);
    tcase_add_test(tc, test_generation);
    tcase_add_test(tc, test_eviction);
    tcase_add_test(tc, test_dead_writer);
    tcase_add_test(tc, test_concurrent);
    tcase_add_test(tc, test_rules_round_trip);
    suite_add_tcase(s, tc);
    return s;
}
