/*
 * algo.c -- the rate-limit algorithms, in one table.
 *
 * Everything the C side knows about an algorithm is here: its name, its
 * parameters (the ratelimitctl option, the column of the limits table, the
 * field of /v1/config, the bounds of validate.c), how a limit becomes the
 * four script arguments of lua/check.lua, the quota and window it announces
 * in RateLimit-Policy, and which limits loaded from PostgreSQL can be
 * decided at all.  The service (limiter.c, response.c, views.c,
 * pg_store.c) and the admin tool (ctl_limit.c) read this table; adding an
 * algorithm means a row here, its Lua file and its CHECK in the schema.
 * A concurrency limit is one too: it counts requests in flight, whose
 * leases lease.c releases; algo_is_concurrency() tells the few places
 * that treat it apart (it takes a slot whatever the cost).
 * The calendars of fixed windows live here too, with the longest length
 * of each.
 */
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "ratelimit.h"

/* ------------------------------------------------------------------ */
/* Calendars */

static const struct {
    const char *name;
    long long seconds;          /* the longest: a month has 31 days */
} algo_calendars[] = {
    { NULL, 0 },
    { "minute", 60 },
    { "hour", 3600 },
    { "day", 86400 },
    { "month", 2678400 },
};

#define ALGO_NCALENDARS \
    ((int)(sizeof(algo_calendars) / sizeof(algo_calendars[0])))

const char *
algo_calendar_name(int calendar)
{
    if (calendar < 1 || calendar >= ALGO_NCALENDARS)
        return "unknown";
    return algo_calendars[calendar].name;
}

int
algo_calendar_parse(const char *name)
{
    int i;

    for (i = 1; i < ALGO_NCALENDARS; i++)
        if (strcmp(name, algo_calendars[i].name) == 0)
            return i;
    return -1;
}

static const char *const algo_counts[] = { "subject", "key", "tenant" };

const char *
algo_count_name(int count)
{
    if (count < 0 || count > RL_COUNT_TENANT)
        return "unknown";
    return algo_counts[count];
}

int
algo_count_parse(const char *name)
{
    int i;

    for (i = 0; i <= RL_COUNT_TENANT; i++)
        if (strcmp(name, algo_counts[i]) == 0)
            return i;
    return -1;
}

long long
algo_calendar_seconds(int calendar)
{
    if (calendar < 1 || calendar >= ALGO_NCALENDARS)
        return 0;
    return algo_calendars[calendar].seconds;
}

/* ------------------------------------------------------------------ */
/* What differs between the algorithms beyond their parameters */

/* RateLimit-Policy of a token bucket: the quota is the capacity (limit),
 * the window the time to refill it, in whole seconds, at least 1. */
static void
algo_token_bucket_policy(const struct rl_limit *l, long long limit,
    long long *q, long long *w)
{
    double secs = (double)l->bucket_capacity / l->refill_rate;

    (void)limit;
    *q = l->bucket_capacity;
    *w = secs < 1 ? 1 : (long long)(secs + 0.999999);
}

static void
algo_sliding_window_policy(const struct rl_limit *l, long long limit,
    long long *q, long long *w)
{
    (void)limit;
    *q = l->limit_count;
    *w = l->window_seconds;
}

/* GCRA is a bucket of burst + 1 refilled one request per spacing t: the
 * quota is burst + 1 (what may pass at once, the largest cost, and the
 * "limit" of the answer), the window the time to earn all of it back,
 * (burst + 1) * t rounded up to whole seconds. */
static void
algo_gcra_policy(const struct rl_limit *l, long long limit, long long *q,
    long long *w)
{
    long long t;

    (void)limit;
    *q = l->burst + 1;
    t = l->limit_count > 0 ? (l->period_us + l->limit_count - 1) /
        l->limit_count : l->period_us;
    *w = ((l->burst + 1) * t + 999999) / 1000000;
    if (*w < 1)
        *w = 1;
}

/* A month announces its longest length, 31 days. */
static void
algo_fixed_window_policy(const struct rl_limit *l, long long limit,
    long long *q, long long *w)
{
    long long s = algo_calendar_seconds(l->calendar);

    (void)limit;
    *q = l->limit_count;
    *w = s > 0 ? s : 1;
}

/* A concurrency limit: the quota is the leases at once, the window the
 * lease's time to live in whole seconds (when a slot held by a client
 * that never releases is free again). */
static void
algo_concurrency_policy(const struct rl_limit *l, long long limit,
    long long *q, long long *w)
{
    (void)limit;
    *q = l->limit_count;
    *w = (l->period_us + 999999) / 1000000;
    if (*w < 1)
        *w = 1;
}

/* GCRA must be able to space the requests out: validate_gcra(). */
static int
algo_gcra_check(const struct rl_limit *l, const char *const *typed,
    char *err, size_t errlen)
{
    return validate_gcra(typed[1], l->limit_count, l->period_us, l->burst,
        err, errlen);
}

/* ------------------------------------------------------------------ */
/* The table */

#define ALGO_FIELD(f) offsetof(struct rl_limit, f)

#define ALGO_PARAM_LIMIT \
    { "limit", "N", "limit_count", "limit", ALGO_KIND_COUNT, \
      1, VALIDATE_COUNT_MAX, 0, ALGO_FIELD(limit_count) }

static const struct algo algo_table[] = {
    { RL_ALGO_TOKEN_BUCKET, "token_bucket", 2, {
        { "capacity", "N", "bucket_capacity", "capacity", ALGO_KIND_COUNT,
          1, VALIDATE_COUNT_MAX, 0, ALGO_FIELD(bucket_capacity) },
        { "refill-rate", "R", "refill_rate", "refill_rate", ALGO_KIND_RATE,
          VALIDATE_RATE_MIN, VALIDATE_RATE_MAX, 0, ALGO_FIELD(refill_rate) },
      }, "capacity %s, refill %s/s",
      algo_token_bucket_policy, NULL },
    { RL_ALGO_SLIDING_WINDOW, "sliding_window", 2, {
        ALGO_PARAM_LIMIT,
        { "window", "DURATION", "window_seconds", "window_seconds",
          ALGO_KIND_COUNT, 1, VALIDATE_WINDOW_MAX, 0,
          ALGO_FIELD(window_seconds) },
      }, "%s per %s s",
      algo_sliding_window_policy, NULL },
    { RL_ALGO_GCRA, "gcra", 3, {
        ALGO_PARAM_LIMIT,
        { "period", "DURATION", "period_us", "period_us", ALGO_KIND_DURATION,
          1, VALIDATE_PERIOD_MAX, 0, ALGO_FIELD(period_us) },
        { "burst", "B", "burst", "burst", ALGO_KIND_COUNT,
          0, VALIDATE_BURST_MAX, 1, ALGO_FIELD(burst) },
      }, "%s per %s, burst %s",
      algo_gcra_policy, algo_gcra_check },
    { RL_ALGO_FIXED_WINDOW, "fixed_window", 2, {
        ALGO_PARAM_LIMIT,
        { "calendar", NULL, "calendar", "calendar", ALGO_KIND_CALENDAR,
          RL_CAL_MINUTE, RL_CAL_MONTH, 0, ALGO_FIELD(calendar) },
      }, "%s per calendar %s",
      algo_fixed_window_policy, NULL },
    /* Leases: lua/concurrency.lua, lease.c.  The columns are those of
     * other algorithms, with their own bounds (schema/007_leases.sql). */
    { RL_ALGO_CONCURRENCY, "concurrency", 2, {
        { "max", "N", "limit_count", "max", ALGO_KIND_COUNT,
          1, VALIDATE_CONCURRENCY_MAX, 0, ALGO_FIELD(limit_count) },
        { "lease-ttl", "DURATION", "period_us", "lease_ttl_us",
          ALGO_KIND_DURATION, VALIDATE_LEASE_TTL_MIN, VALIDATE_LEASE_TTL_MAX,
          0, ALGO_FIELD(period_us) },
      }, "at most %s in flight, lease %s",
      algo_concurrency_policy, NULL },
};

#define ALGO_N ((int)(sizeof(algo_table) / sizeof(algo_table[0])))

int
algo_count(void)
{
    return ALGO_N;
}

const struct algo *
algo_at(int i)
{
    return i >= 0 && i < ALGO_N ? &algo_table[i] : NULL;
}

const struct algo *
algo_get(int id)
{
    int i;

    for (i = 0; i < ALGO_N; i++)
        if (algo_table[i].id == id)
            return &algo_table[i];
    return NULL;
}

const struct algo *
algo_find(const char *name)
{
    int i;

    for (i = 0; i < ALGO_N; i++)
        if (strcmp(name, algo_table[i].name) == 0)
            return &algo_table[i];
    return NULL;
}

const char *
algo_name(int id)
{
    const struct algo *a = algo_get(id);

    return a != NULL ? a->name : "unknown";
}

int
algo_parse(const char *name)
{
    const struct algo *a = algo_find(name);

    return a != NULL ? a->id : -1;
}

/* ------------------------------------------------------------------ */
/* Parameter values */

static long long *
algo_integer(const struct algo_param *p, struct rl_limit *l)
{
    return (long long *)(void *)((char *)l + p->offset);
}

static long long
algo_integer_of(const struct algo_param *p, const struct rl_limit *l)
{
    return *(const long long *)(const void *)((const char *)l + p->offset);
}

static double
algo_double_of(const struct algo_param *p, const struct rl_limit *l)
{
    return *(const double *)(const void *)((const char *)l + p->offset);
}

static int
algo_int_of(const struct algo_param *p, const struct rl_limit *l)
{
    return *(const int *)(const void *)((const char *)l + p->offset);
}

/*
 * A refill rate as the script wants it: plain decimal digits, at most 15
 * characters, no exponent.  Six decimals (a millionth of a token per
 * second) is the precision kept; trailing zeros are dropped.
 */
static int
algo_rate_script(double rate, char *buf, size_t len)
{
    char tmp[64];
    size_t n;

    if (!(rate > 0) || rate > VALIDATE_RATE_MAX)
        return -1;
    n = (size_t)snprintf(tmp, sizeof(tmp), "%.6f", rate);
    while (n > 0 && tmp[n - 1] == '0')
        n--;
    if (n > 0 && tmp[n - 1] == '.')
        n--;
    if (n == 0 || (n == 1 && tmp[0] == '0') || n >= len)
        return -1;
    memcpy(buf, tmp, n);
    buf[n] = '\0';
    return 0;
}

/* v in decimal into buf[len] (these build every check's arguments, so no
 * printf); -1 when it does not fit. */
static int
algo_integer_text(long long v, char *buf, size_t len)
{
    char digits[21];
    size_t n = util_lltoa(v, digits);

    if (n >= len)
        return -1;
    memcpy(buf, digits, n + 1);
    return 0;
}

int
algo_param_text(const struct algo_param *p, const struct rl_limit *l,
    int style, char *buf, size_t len)
{
    int c, n;

    switch (p->kind) {
    case ALGO_KIND_RATE:
        if (style == ALGO_TEXT_SCRIPT)
            return algo_rate_script(algo_double_of(p, l), buf, len);
        n = snprintf(buf, len, "%.17g", algo_double_of(p, l));
        break;
    case ALGO_KIND_CALENDAR:
        c = algo_int_of(p, l);
        if (algo_calendar_seconds(c) == 0)
            return -1;
        n = snprintf(buf, len, "%s", algo_calendar_name(c));
        break;
    case ALGO_KIND_DURATION:
        if (style == ALGO_TEXT_HUMAN) {
            validate_duration_format(algo_integer_of(p, l), buf, len);
            return 0;
        }
        /* microseconds, as any integer */
        /* FALLTHROUGH */
    default:
        return algo_integer_text(algo_integer_of(p, l), buf, len);
    }
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

int
algo_param_parse(const struct algo_param *p, const char *text,
    struct rl_limit *l, char *err, size_t errlen)
{
    char what[32], names[64];
    int c, i;

    snprintf(what, sizeof(what), "--%s", p->option);
    switch (p->kind) {
    case ALGO_KIND_RATE:
        return validate_decimal(what, text, p->min, p->max,
            (double *)(void *)((char *)l + p->offset), err, errlen);
    case ALGO_KIND_DURATION:
        if (validate_duration(what, text, algo_integer(p, l), err,
            errlen) == -1)
            return -1;
        /* Within the parameter's own bounds too (a lease's 1s to 1h). */
        if (*algo_integer(p, l) < (long long)p->min ||
            *algo_integer(p, l) > (long long)p->max) {
            validate_duration_format((long long)p->min, names,
                sizeof(names) / 2);
            validate_duration_format((long long)p->max, names +
                sizeof(names) / 2, sizeof(names) / 2);
            snprintf(err, errlen, "%s: %s is out of range (%s to %s)", what,
                text, names, names + sizeof(names) / 2);
            return -1;
        }
        return 0;
    case ALGO_KIND_CALENDAR:
        if ((c = algo_calendar_parse(text)) < 0) {
            names[0] = '\0';
            for (i = 1; i < ALGO_NCALENDARS; i++)
                snprintf(names + strlen(names), sizeof(names) -
                    strlen(names), "%s%s", i == 1 ? "" :
                    i == ALGO_NCALENDARS - 1 ? " or " : ", ",
                    algo_calendars[i].name);
            snprintf(err, errlen, "%s: \"%s\" is not %s", what, text, names);
            return -1;
        }
        *(int *)(void *)((char *)l + p->offset) = c;
        return 0;
    default:
        return validate_integer(what, text, (long long)p->min,
            (long long)p->max, algo_integer(p, l), err, errlen);
    }
}

void
algo_takes(const struct algo *a, char *buf, size_t len)
{
    const struct algo_param *p;
    char metavar[64];
    size_t used = 0;
    int i, seen = 0, c;

    buf[0] = '\0';
    for (i = 0; i < a->nparams && used < len; i++) {
        p = &a->param[i];
        if (p->metavar != NULL) {
            snprintf(metavar, sizeof(metavar), "%s", p->metavar);
        } else {
            metavar[0] = '\0';
            for (c = 1; c < ALGO_NCALENDARS; c++)
                snprintf(metavar + strlen(metavar), sizeof(metavar) -
                    strlen(metavar), "%s%s", c == 1 ? "" : "|",
                    algo_calendars[c].name);
        }
        snprintf(buf + used, len - used, "%s--%s %s",
            p->optional ? ", optionally " : seen == 0 ? "" : " and ",
            p->option, metavar);
        used += strlen(buf + used);
        seen += !p->optional;
    }
}

/* ------------------------------------------------------------------ */
/* The service's uses */

int
algo_script_args(const struct rl_limit *l,
    char args[ALGO_SCRIPT_ARGS][ALGO_TEXT_MAX])
{
    const struct algo *a = algo_get(l->algorithm);
    int i;

    if (a == NULL)
        return -1;
    util_copy(args[0], ALGO_TEXT_MAX, a->name);
    for (i = 0; i < ALGO_SCRIPT_ARGS - 1; i++) {
        if (i >= a->nparams)
            memcpy(args[i + 1], "0", 2);
        else if (algo_param_text(&a->param[i], l, ALGO_TEXT_SCRIPT,
            args[i + 1], ALGO_TEXT_MAX) == -1)
            return -1;
    }
    return 0;
}

void
algo_policy(const struct rl_limit *l, long long limit, long long *q,
    long long *w)
{
    const struct algo *a = algo_get(l->algorithm);

    if (a == NULL) {
        *q = limit;
        *w = 1;
        return;
    }
    a->policy(l, limit, q, w);
}

long long
algo_quota(const struct rl_limit *l)
{
    long long q, w;

    if (algo_get(l->algorithm) == NULL)
        return 0;
    algo_policy(l, 0, &q, &w);
    return q;
}

void
algo_json_add(struct json_object *o, const struct rl_limit *l)
{
    const struct algo *a = algo_get(l->algorithm);
    const struct algo_param *p;
    struct json_object *v;
    int i;

    if (a == NULL)
        return;
    for (i = 0; i < a->nparams; i++) {
        p = &a->param[i];
        switch (p->kind) {
        case ALGO_KIND_RATE:
            v = json_object_new_double(algo_double_of(p, l));
            break;
        case ALGO_KIND_CALENDAR:
            v = json_object_new_string(algo_calendar_name(
                algo_int_of(p, l)));
            break;
        default:
            v = json_object_new_int64(algo_integer_of(p, l));
            break;
        }
        json_object_object_add(o, p->json, v);
    }
    json_object_object_add(o, "count",
        json_object_new_string(algo_count_name(l->count)));
}

int
algo_limit_valid(const struct rl_limit *l)
{
    const struct algo *a = algo_get(l->algorithm);
    int i;

    if (a == NULL || l->count < 0 || l->count > RL_COUNT_TENANT)
        return 0;
    for (i = 0; i < a->nparams; i++)
        if (a->param[i].kind == ALGO_KIND_CALENDAR &&
            algo_calendar_seconds(algo_int_of(&a->param[i], l)) == 0)
            return 0;
    return 1;
}

int
algo_is_concurrency(const struct rl_limit *l)
{
    return l->algorithm == RL_ALGO_CONCURRENCY;
}
