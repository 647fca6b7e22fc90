/*
 * check_algo.c -- the algorithm table of src/algo.c.
 *
 * Each algorithm's name round trip, the script arguments and the
 * RateLimit-Policy of a limit, the fields of its JSON, which limits can be
 * decided, the options ratelimitctl reads into it with their bounds, and
 * that the table holds together (one %s per parameter, distinct columns).
 */
#include <string.h>

#include <check.h>              /* t/check.h: the suites, then Check */
#include <json-c/json.h>

#include "ratelimit.h"
#include "fixtures.h"

/* Limits without id or name, as values. */
static struct rl_limit
tb(long long capacity, double rate)
{
    struct rl_limit l;

    fixture_limit_tb(&l, 0, "", capacity, rate);
    return l;
}

static struct rl_limit
sw(long long count, long long window)
{
    struct rl_limit l;

    fixture_limit_sw(&l, 0, "", count, window);
    return l;
}

static struct rl_limit
gcra(long long count, long long period_us, long long burst)
{
    struct rl_limit l;

    fixture_limit_gcra(&l, 0, "", count, period_us, burst);
    return l;
}

static struct rl_limit
fw(long long count, int calendar)
{
    struct rl_limit l;

    fixture_limit_fw(&l, 0, "", count, calendar);
    return l;
}

/* The script arguments of l joined with spaces, or "-" when refused. */
static const char *
args_of(const struct rl_limit *l)
{
    static char out[4 * ALGO_TEXT_MAX];
    char args[ALGO_SCRIPT_ARGS][ALGO_TEXT_MAX];

    if (algo_script_args(l, args) == -1)
        return "-";
    snprintf(out, sizeof(out), "%s %s %s %s", args[0], args[1], args[2],
        args[3]);
    return out;
}

/* The JSON fields algo_json_add() gives l, as compact text. */
static const char *
json_of(const struct rl_limit *l)
{
    static char out[256];
    struct json_object *o = json_object_new_object();

    algo_json_add(o, l);
    snprintf(out, sizeof(out), "%s",
        json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    json_object_put(o);
    return out;
}

static const struct algo_param *
param_of(int id, const char *option)
{
    const struct algo *a = algo_get(id);
    int i;

    for (i = 0; a != NULL && i < a->nparams; i++)
        if (strcmp(a->param[i].option, option) == 0)
            return &a->param[i];
    return NULL;
}

START_TEST(test_names)
{
    static const struct {
        int id;
        const char *name;
    } names[] = {
        { RL_ALGO_TOKEN_BUCKET, "token_bucket" },
        { RL_ALGO_SLIDING_WINDOW, "sliding_window" },
        { RL_ALGO_GCRA, "gcra" },
        { RL_ALGO_FIXED_WINDOW, "fixed_window" },
        { RL_ALGO_CONCURRENCY, "concurrency" },
    };
    const struct algo *a;
    size_t i;
    int n;

    ck_assert_int_eq(algo_count(), 5);
    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        ck_assert_str_eq(algo_name(names[i].id), names[i].name);
        ck_assert_int_eq(algo_parse(names[i].name), names[i].id);
        ck_assert_ptr_eq(algo_find(names[i].name), algo_get(names[i].id));
        ck_assert_ptr_eq(algo_at((int)i), algo_get(names[i].id));
    }
    for (n = 0; (a = algo_at(n)) != NULL; n++)
        ck_assert_int_eq(algo_parse(algo_name(a->id)), a->id);
    ck_assert_int_eq(n, algo_count());
    ck_assert_ptr_null(algo_at(-1));
    ck_assert_ptr_null(algo_get(0));
    ck_assert_ptr_null(algo_get(RL_ALGO_CONCURRENCY + 1));
    ck_assert_str_eq(algo_name(0), "unknown");
    ck_assert_str_eq(algo_name(-1), "unknown");
    ck_assert_int_eq(algo_parse("unknown"), -1);
    ck_assert_int_eq(algo_parse("GCRA"), -1);
    ck_assert_int_eq(algo_parse("gcra "), -1);
    ck_assert_int_eq(algo_parse(""), -1);
    ck_assert_ptr_null(algo_find("leaky_bucket"));
}
END_TEST

START_TEST(test_calendars)
{
    static const struct {
        int calendar;
        const char *name;
        long long seconds;
    } cal[] = {
        { RL_CAL_MINUTE, "minute", 60 }, { RL_CAL_HOUR, "hour", 3600 },
        { RL_CAL_DAY, "day", 86400 }, { RL_CAL_MONTH, "month", 2678400 },
    };
    size_t i;

    for (i = 0; i < sizeof(cal) / sizeof(cal[0]); i++) {
        ck_assert_str_eq(algo_calendar_name(cal[i].calendar), cal[i].name);
        ck_assert_int_eq(algo_calendar_parse(cal[i].name), cal[i].calendar);
        ck_assert_int_eq(algo_calendar_seconds(cal[i].calendar),
            cal[i].seconds);
    }
    ck_assert_str_eq(algo_calendar_name(0), "unknown");
    ck_assert_str_eq(algo_calendar_name(RL_CAL_MONTH + 1), "unknown");
    ck_assert_int_eq(algo_calendar_seconds(0), 0);
    ck_assert_int_eq(algo_calendar_seconds(-1), 0);
    ck_assert_int_eq(algo_calendar_parse("week"), -1);
}
END_TEST

START_TEST(test_script_args)
{
    struct rl_limit l;

    l = tb(10, 0.5);
    ck_assert_str_eq(args_of(&l), "token_bucket 10 0.5 0");
    l = tb(1000000000000LL, 100000000);
    ck_assert_str_eq(args_of(&l), "token_bucket 1000000000000 100000000 0");
    l = sw(100, 60);
    ck_assert_str_eq(args_of(&l), "sliding_window 100 60 0");
    l = gcra(10, 1000000, 5);
    ck_assert_str_eq(args_of(&l), "gcra 10 1000000 5");
    l = gcra(3, 1500000, 0);
    ck_assert_str_eq(args_of(&l), "gcra 3 1500000 0");
    l = fw(50, RL_CAL_MINUTE);
    ck_assert_str_eq(args_of(&l), "fixed_window 50 minute 0");
    l = fw(1000000000000LL, RL_CAL_MONTH);
    ck_assert_str_eq(args_of(&l), "fixed_window 1000000000000 month 0");
}
END_TEST

/* A refill rate is written with six decimals at most, trailing zeros
 * dropped; one the script cannot take refuses the whole limit. */
START_TEST(test_script_args_refused)
{
    struct rl_limit l;

    l = tb(5, 0.000001);
    ck_assert_str_eq(args_of(&l), "token_bucket 5 0.000001 0");
    l = tb(5, 2.25);
    ck_assert_str_eq(args_of(&l), "token_bucket 5 2.25 0");
    l = tb(5, 1.0000004);
    ck_assert_str_eq(args_of(&l), "token_bucket 5 1 0");
    l = tb(5, 0.0000004);
    ck_assert_str_eq(args_of(&l), "-");
    l = tb(5, 0);
    ck_assert_str_eq(args_of(&l), "-");
    l = tb(5, -1);
    ck_assert_str_eq(args_of(&l), "-");
    l = tb(5, 100000000.5);
    ck_assert_str_eq(args_of(&l), "-");
    l = fw(5, 0);
    ck_assert_str_eq(args_of(&l), "-");
    l = fw(5, RL_CAL_MONTH + 1);
    ck_assert_str_eq(args_of(&l), "-");
    l = sw(5, 5);
    l.algorithm = 0;
    ck_assert_str_eq(args_of(&l), "-");
    l.algorithm = RL_ALGO_CONCURRENCY + 1;
    ck_assert_str_eq(args_of(&l), "-");
}
END_TEST

START_TEST(test_policy)
{
    struct rl_limit l;
    long long q, w;

    l = tb(10, 0.5);
    algo_policy(&l, 10, &q, &w);
    ck_assert_int_eq(q, 10);
    ck_assert_int_eq(w, 20);
    l = tb(10, 3);
    algo_policy(&l, 10, &q, &w);
    ck_assert_int_eq(w, 4);
    l = tb(1, 100);
    algo_policy(&l, 1, &q, &w);
    ck_assert_int_eq(q, 1);
    ck_assert_int_eq(w, 1);
    l = sw(100, 60);
    algo_policy(&l, 100, &q, &w);
    ck_assert_int_eq(q, 100);
    ck_assert_int_eq(w, 60);
    /* GCRA: burst + 1 at once, earned back in (burst + 1) spacings. */
    l = gcra(10, 1000000, 5);
    algo_policy(&l, 6, &q, &w);
    ck_assert_int_eq(q, 6);
    ck_assert_int_eq(w, 1);
    ck_assert_int_eq(algo_quota(&l), 6);
    l = gcra(1, 100000, 0);
    algo_policy(&l, 1, &q, &w);
    ck_assert_int_eq(q, 1);
    ck_assert_int_eq(w, 1);
    l = gcra(100, 360000000000LL, 99);      /* 100 per 100 h, burst 99 */
    algo_policy(&l, 100, &q, &w);
    ck_assert_int_eq(q, 100);
    ck_assert_int_eq(w, 360000);
    l = gcra(3, 1500000, 4);                /* one per 0.5 s, 5 at once */
    algo_policy(&l, 5, &q, &w);
    ck_assert_int_eq(q, 5);
    ck_assert_int_eq(w, 3);
    ck_assert_int_eq(algo_quota(&l), 5);
    ck_assert_int_eq(algo_quota(&(struct rl_limit){ .algorithm = 0 }), 0);
    l = fw(50, RL_CAL_HOUR);
    algo_policy(&l, 50, &q, &w);
    ck_assert_int_eq(q, 50);
    ck_assert_int_eq(w, 3600);
    l = fw(50, RL_CAL_MONTH);
    algo_policy(&l, 50, &q, &w);
    ck_assert_int_eq(w, 2678400);
    l = fw(50, 0);
    algo_policy(&l, 50, &q, &w);
    ck_assert_int_eq(w, 1);
    ck_assert_int_eq(algo_quota(&l), 50);
    l = tb(12, 1);
    ck_assert_int_eq(algo_quota(&l), 12);
    l.algorithm = 0;
    algo_policy(&l, 7, &q, &w);
    ck_assert_int_eq(q, 7);
    ck_assert_int_eq(w, 1);
}
END_TEST

START_TEST(test_json)
{
    struct rl_limit l;

    l = tb(10, 0.5);
    ck_assert_str_eq(json_of(&l), "{\"capacity\":10,\"refill_rate\":0.5,"
        "\"count\":\"subject\"}");
    l = sw(100, 60);
    l.count = RL_COUNT_TENANT;
    ck_assert_str_eq(json_of(&l), "{\"limit\":100,\"window_seconds\":60,"
        "\"count\":\"tenant\"}");
    l = gcra(10, 1000000, 5);
    l.count = RL_COUNT_KEY;
    ck_assert_str_eq(json_of(&l),
        "{\"limit\":10,\"period_us\":1000000,\"burst\":5,\"count\":\"key\"}");
    l = fw(50, RL_CAL_DAY);
    ck_assert_str_eq(json_of(&l), "{\"limit\":50,\"calendar\":\"day\","
        "\"count\":\"subject\"}");
    l.algorithm = 0;
    ck_assert_str_eq(json_of(&l), "{}");
    ck_assert_str_eq(algo_count_name(RL_COUNT_TENANT), "tenant");
    ck_assert_int_eq(algo_count_parse("key"), RL_COUNT_KEY);
    ck_assert_int_eq(algo_count_parse("subject"), RL_COUNT_SUBJECT);
    ck_assert_int_eq(algo_count_parse("tenants"), -1);
    ck_assert_str_eq(algo_count_name(7), "unknown");
}
END_TEST

START_TEST(test_valid)
{
    struct rl_limit l;

    l = tb(10, 0.5);
    ck_assert_int_eq(algo_limit_valid(&l), 1);
    l = sw(100, 60);
    ck_assert_int_eq(algo_limit_valid(&l), 1);
    l = gcra(10, 1000000, 0);
    ck_assert_int_eq(algo_limit_valid(&l), 1);
    l = fw(50, RL_CAL_MINUTE);
    ck_assert_int_eq(algo_limit_valid(&l), 1);
    l = fw(50, RL_CAL_MONTH);
    ck_assert_int_eq(algo_limit_valid(&l), 1);
    /* What pg_store.c leaves for a calendar it does not know. */
    l = fw(50, -1);
    ck_assert_int_eq(algo_limit_valid(&l), 0);
    l = fw(50, RL_CAL_MONTH + 1);
    ck_assert_int_eq(algo_limit_valid(&l), 0);
    /* A calendar is only looked at for fixed windows. */
    l = sw(100, 60);
    l.calendar = -1;
    ck_assert_int_eq(algo_limit_valid(&l), 1);
    l.algorithm = -1;
    ck_assert_int_eq(algo_limit_valid(&l), 0);
    l.algorithm = RL_ALGO_CONCURRENCY + 1;
    ck_assert_int_eq(algo_limit_valid(&l), 0);
}
END_TEST

/* Parses text for the option of algorithm id into a fresh limit; returns
 * what algo_param_parse() does. */
static int
parse(int id, const char *option, const char *text, struct rl_limit *l,
    char *err, size_t errlen)
{
    const struct algo_param *p = param_of(id, option);

    ck_assert_ptr_nonnull(p);
    memset(l, 0, sizeof(*l));
    err[0] = '\0';
    return algo_param_parse(p, text, l, err, errlen);
}

START_TEST(test_bounds)
{
    struct rl_limit l;
    char err[256];

    ck_assert_int_eq(parse(RL_ALGO_TOKEN_BUCKET, "capacity", "1", &l, err,
        sizeof(err)), 0);
    ck_assert_int_eq(l.bucket_capacity, 1);
    ck_assert_int_eq(parse(RL_ALGO_TOKEN_BUCKET, "capacity",
        "1000000000000", &l, err, sizeof(err)), 0);
    ck_assert_int_eq(l.bucket_capacity, VALIDATE_COUNT_MAX);
    ck_assert_int_eq(parse(RL_ALGO_TOKEN_BUCKET, "capacity", "0", &l, err,
        sizeof(err)), -1);
    ck_assert_str_eq(err, "--capacity: 0 is out of range (1 to "
        "1000000000000)");
    ck_assert_int_eq(parse(RL_ALGO_TOKEN_BUCKET, "capacity",
        "1000000000001", &l, err, sizeof(err)), -1);

    ck_assert_int_eq(parse(RL_ALGO_TOKEN_BUCKET, "refill-rate", "0.000001",
        &l, err, sizeof(err)), 0);
    ck_assert(l.refill_rate == 0.000001);
    ck_assert_int_eq(parse(RL_ALGO_TOKEN_BUCKET, "refill-rate", "1e8", &l,
        err, sizeof(err)), 0);
    ck_assert_int_eq(parse(RL_ALGO_TOKEN_BUCKET, "refill-rate",
        "0.0000009", &l, err, sizeof(err)), -1);
    ck_assert_int_eq(parse(RL_ALGO_TOKEN_BUCKET, "refill-rate",
        "100000001", &l, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "--refill-rate: "));

    ck_assert_int_eq(parse(RL_ALGO_SLIDING_WINDOW, "limit", "0", &l, err,
        sizeof(err)), -1);
    ck_assert_int_eq(parse(RL_ALGO_SLIDING_WINDOW, "window", "31622400", &l,
        err, sizeof(err)), 0);
    ck_assert_int_eq(l.window_seconds, VALIDATE_WINDOW_MAX);
    ck_assert_int_eq(parse(RL_ALGO_SLIDING_WINDOW, "window", "31622401", &l,
        err, sizeof(err)), -1);
    ck_assert_int_eq(parse(RL_ALGO_SLIDING_WINDOW, "window", "0", &l, err,
        sizeof(err)), -1);

    ck_assert_int_eq(parse(RL_ALGO_GCRA, "period", "1us", &l, err,
        sizeof(err)), 0);
    ck_assert_int_eq(l.period_us, 1);
    ck_assert_int_eq(parse(RL_ALGO_GCRA, "period", "366d", &l, err,
        sizeof(err)), 0);
    ck_assert_int_eq(l.period_us, VALIDATE_PERIOD_MAX);
    ck_assert_int_eq(parse(RL_ALGO_GCRA, "period", "367d", &l, err,
        sizeof(err)), -1);
    ck_assert_str_eq(err, "--period: 367d is out of range (1us to 366d)");
    ck_assert_int_eq(parse(RL_ALGO_GCRA, "burst", "0", &l, err,
        sizeof(err)), 0);
    ck_assert_int_eq(parse(RL_ALGO_GCRA, "burst", "1000000000", &l, err,
        sizeof(err)), 0);
    ck_assert_int_eq(l.burst, VALIDATE_BURST_MAX);
    ck_assert_int_eq(parse(RL_ALGO_GCRA, "burst", "-1", &l, err,
        sizeof(err)), -1);
    ck_assert_int_eq(parse(RL_ALGO_GCRA, "burst", "1000000001", &l, err,
        sizeof(err)), -1);

    ck_assert_int_eq(parse(RL_ALGO_FIXED_WINDOW, "calendar", "day", &l, err,
        sizeof(err)), 0);
    ck_assert_int_eq(l.calendar, RL_CAL_DAY);
    ck_assert_int_eq(parse(RL_ALGO_FIXED_WINDOW, "calendar", "week", &l,
        err, sizeof(err)), -1);
    ck_assert_str_eq(err, "--calendar: \"week\" is not minute, hour, day or "
        "month");
}
END_TEST

START_TEST(test_gcra_check)
{
    const struct algo *a = algo_get(RL_ALGO_GCRA);
    const char *typed[ALGO_MAX_PARAMS] = { "10", "1s", "5" };
    struct rl_limit l = gcra(10, 1000000, 5);
    char err[256];

    ck_assert_ptr_nonnull(a->check);
    ck_assert_int_eq(a->check(&l, typed, err, sizeof(err)), 0);
    /* More than one request per microsecond. */
    l = gcra(2000, 1000, 0);
    typed[1] = "1ms";
    ck_assert_int_eq(a->check(&l, typed, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "--period 1ms"));
    ck_assert_ptr_null(algo_get(RL_ALGO_TOKEN_BUCKET)->check);
}
END_TEST

START_TEST(test_text)
{
    const struct algo *a;
    struct rl_limit l;
    char buf[ALGO_TEXT_MAX];

    l = gcra(10, 60000000, 2);
    a = algo_get(RL_ALGO_GCRA);
    ck_assert_int_eq(algo_param_text(&a->param[1], &l, ALGO_TEXT_SQL, buf,
        sizeof(buf)), 0);
    ck_assert_str_eq(buf, "60000000");
    ck_assert_int_eq(algo_param_text(&a->param[1], &l, ALGO_TEXT_HUMAN, buf,
        sizeof(buf)), 0);
    ck_assert_str_eq(buf, "1m");
    l = tb(5, 0.1);
    a = algo_get(RL_ALGO_TOKEN_BUCKET);
    ck_assert_int_eq(algo_param_text(&a->param[1], &l, ALGO_TEXT_SQL, buf,
        sizeof(buf)), 0);
    ck_assert_str_eq(buf, "0.10000000000000001");
    ck_assert_int_eq(algo_param_text(&a->param[1], &l, ALGO_TEXT_SCRIPT, buf,
        sizeof(buf)), 0);
    ck_assert_str_eq(buf, "0.1");
    /* "5" and its NUL do not fit in one byte. */
    ck_assert_int_eq(algo_param_text(&a->param[0], &l, ALGO_TEXT_SQL, buf,
        1), -1);
}
END_TEST

START_TEST(test_takes)
{
    static const struct {
        int id;
        const char *takes;
    } cases[] = {
        { RL_ALGO_TOKEN_BUCKET, "--capacity N and --refill-rate R" },
        { RL_ALGO_SLIDING_WINDOW, "--limit N and --window DURATION" },
        { RL_ALGO_GCRA,
          "--limit N and --period DURATION, optionally --burst B" },
        { RL_ALGO_FIXED_WINDOW,
          "--limit N and --calendar minute|hour|day|month" },
    };
    char buf[160];
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        algo_takes(algo_get(cases[i].id), buf, sizeof(buf));
        ck_assert_str_eq(buf, cases[i].takes);
    }
}
END_TEST

/* Every row of the table is whole: a %s per parameter in its describe
 * format, distinct options and columns, bounds in order, and a
 * RateLimit-Policy. */
START_TEST(test_table)
{
    const struct algo *a;
    const char *f;
    int i, j, k, n;

    for (i = 0; (a = algo_at(i)) != NULL; i++) {
        ck_assert_int_gt(a->id, 0);
        ck_assert_int_ge(a->nparams, 1);
        ck_assert_int_le(a->nparams, ALGO_MAX_PARAMS);
        ck_assert_ptr_nonnull(a->policy);
        for (n = 0, f = a->describe; (f = strstr(f, "%s")) != NULL; f += 2)
            n++;
        ck_assert_int_eq(n, a->nparams);
        ck_assert_ptr_null(strchr(a->describe, '\''));
        for (j = 0; j < a->nparams; j++) {
            ck_assert(a->param[j].min <= a->param[j].max);
            ck_assert_ptr_nonnull(a->param[j].option);
            ck_assert_ptr_nonnull(a->param[j].column);
            ck_assert_ptr_nonnull(a->param[j].json);
            for (k = 0; k < j; k++) {
                ck_assert_str_ne(a->param[j].option, a->param[k].option);
                ck_assert_str_ne(a->param[j].column, a->param[k].column);
            }
        }
        for (k = 0; k < i; k++)
            ck_assert_int_ne(algo_at(k)->id, a->id);
    }
}
END_TEST

Suite *
algo_suite(void)
{
    Suite *s = suite_create("algo");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, test_names);
    tcase_add_test(tc, test_calendars);
    tcase_add_test(tc, test_script_args);
    tcase_add_test(tc, test_script_args_refused);
    tcase_add_test(tc, test_policy);
    tcase_add_test(tc, test_json);
    tcase_add_test(tc, test_valid);
    tcase_add_test(tc, test_bounds);
    tcase_add_test(tc, test_gcra_check);
    tcase_add_test(tc, test_text);
    tcase_add_test(tc, test_takes);
    tcase_add_test(tc, test_table);
    suite_add_tcase(s, tc);
    return s;
}
