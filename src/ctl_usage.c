/*
 * ctl_usage.c -- usage TENANT: how much of each limit of a tenant is used
 * and left now, when it is whole again, and, for limits over a day or a
 * month, when it runs out at the rate it is being used.
 *
 * Nothing is charged.  The tenant's counters are found with SCAN over its
 * hash tag (rl:{tenant-id}:*, all in one Redis Cluster slot) and each one
 * is asked with the check script itself as a peek (lua/check.lua: a peek
 * never writes), so the numbers are the ones the next check would see,
 * computed by the same code, on Redis time.  A limit that counts per
 * subject or per key has a counter for each; the busiest (least left) is
 * shown, with how many there are.  A limit without a counter is whole.
 * Redis is reached as counter show reaches it (ctl_counter.c): the
 * configuration's redis settings, through the Redis client (redis.h),
 * whose script call runs the peek as the service runs a check.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>
#include <json-c/json.h>

#include "ctl.h"
#include "redis.h"

/* Counters read at most: a tenant with more subjects is shown on these. */
#define USAGE_MAX_KEYS 10000
#define USAGE_DAY 86400LL

/* One limit of the tenant and what its counters say. */
struct usage_limit {
    long long rule_id;
    char route[RL_ROUTE_MAX + 1];
    int enabled, shadow;
    struct rl_limit limit;
    char params[128];           /* "20 per 10 s", as rule list shows it */
    int counters;               /* counters found in Redis */
    int read;                   /* a peek answered */
    long long quota, left, reset_ms;    /* of the busiest counter */
    long long now_ms;           /* Redis time of that peek */
};

/* The limits of the tenant with id tid, enabled or not, by rule and limit
 * id.  *out is calloc()ed.  0, or an exit status after printing why. */
static int
usage_load(struct ctl *ctl, const char *tid, struct usage_limit **out,
    int *nout)
{
    const char *params[1] = { tid };
    const struct algo *alg;
    char text[ALGO_MAX_PARAMS][ALGO_TEXT_MAX];
    struct usage_limit *u;
    PGresult *res;
    int i, k;

    res = ctl_db_query(ctl, "SELECT r.id, r.route_pattern, r.enabled, "
        "r.shadow, l.id, l.name, l.algorithm, " CTL_LIMIT_PARAMS_SQL ", "
        "l.count_scope FROM rules r JOIN limits l ON l.rule_id = r.id "
        "WHERE r.tenant_id = $1::uuid ORDER BY r.id, l.id", 1, params);
    if (res == NULL)
        return ctl_db_fail(ctl);
    if ((*out = calloc((size_t)PQntuples(res) + 1, sizeof(**out))) == NULL) {
        PQclear(res);
        return ctl_fail("out of memory");
    }
    for (i = 0; i < PQntuples(res); i++) {
        u = &(*out)[i];
        u->rule_id = strtoll(PQgetvalue(res, i, 0), NULL, 10);
        snprintf(u->route, sizeof(u->route), "%s", PQgetvalue(res, i, 1));
        u->enabled = PQgetvalue(res, i, 2)[0] == 't';
        u->shadow = PQgetvalue(res, i, 3)[0] == 't';
        u->limit.id = strtoll(PQgetvalue(res, i, 4), NULL, 10);
        snprintf(u->limit.name, sizeof(u->limit.name), "%s",
            PQgetvalue(res, i, 5));
        u->limit.algorithm = algo_parse(PQgetvalue(res, i, 6));
        ctl_db_limit_params(res, i, 7, &u->limit);
        u->limit.count = algo_count_parse(PQgetvalue(res, i, 14));
        if ((alg = algo_get(u->limit.algorithm)) == NULL)
            continue;
        for (k = 0; k < ALGO_MAX_PARAMS; k++) {
            text[k][0] = '\0';
            if (k < alg->nparams)
                algo_param_text(&alg->param[k], &u->limit, ALGO_TEXT_HUMAN,
                    text[k], sizeof(text[k]));
        }
        snprintf(u->params, sizeof(u->params), alg->describe, text[0],
            text[1], text[2]);
    }
    *nout = PQntuples(res);
    PQclear(res);
    return 0;
}

/*
 * Asks the counter key of limit l with a peek of cost 1, through the
 * Redis client's script call.  Returns 0 with the limit's state and Redis
 * time in d, -1 after printing why (Redis unreachable: stop), or -2 for a
 * counter the script refused (a counter of another algorithm, left by
 * "limit set": skipped).
 */
static int
usage_peek(struct redis_store *rs, const char *key, const struct rl_limit *l,
    struct rl_decision *d)
{
    struct limiter_call call;
    redisReply *r;

    if (limiter_peek(key, l, &call) == -1) {
        ctl_warn("limit %lld cannot be used", l->id);
        return -2;
    }
    if ((r = redis_store_script(rs, &rs->check, call.argc, call.argv,
        call.argvlen)) == NULL) {
        ctl_warn("redis: %s", rs->error[0] ? rs->error :
            "redis unreachable");
        return -1;
    }
    if (redis_reply_decision(r, 1, d) == -1 || d->over_budget) {
        ctl_warn("limit %lld: counter %s: %s", l->id, key,
            r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        freeReplyObject(r);
        return -2;
    }
    freeReplyObject(r);
    return 0;
}

/* Peeks at key for u and keeps it when it is the busiest so far.  0, or
 * -1 when Redis is unreachable. */
static int
usage_read(struct redis_store *rs, const char *key, struct usage_limit *u)
{
    struct rl_decision d;
    long long left;
    int rc;

    if ((rc = usage_peek(rs, key, &u->limit, &d)) != 0)
        return rc == -1 ? -1 : 0;
    /* A peek that allows reports what is left after its cost of 1. */
    left = d.st[0].allowed ? d.st[0].remaining + 1 : d.st[0].remaining;
    if (left > d.st[0].limit)
        left = d.st[0].limit;
    if (!u->read || left < u->left) {
        u->read = 1;
        u->quota = d.st[0].limit;
        u->left = left;
        u->reset_ms = d.st[0].reset_ms;
        u->now_ms = d.now_ms;
    }
    return 0;
}

/* The limit a counter key "rl:{tid}:RULE:LIMIT[:...]" belongs to, or
 * NULL (the reply slots rl:{tid}:req:..., a removed limit). */
static struct usage_limit *
usage_owner(const char *key, size_t taglen, struct usage_limit *us, int n)
{
    long long rule, limit;
    char *end;
    int i;

    if (strlen(key) <= taglen || key[taglen] < '0' || key[taglen] > '9')
        return NULL;
    rule = strtoll(key + taglen, &end, 10);
    if (*end != ':' || end[1] < '0' || end[1] > '9')
        return NULL;
    limit = strtoll(end + 1, &end, 10);
    if (*end != '\0' && *end != ':')
        return NULL;
    for (i = 0; i < n; i++)
        if (us[i].rule_id == rule && us[i].limit.id == limit)
            return &us[i];
    return NULL;
}

/* Finds every counter of the tenant and reads it; then the limits without
 * one are read as whole.  0, or an exit status after printing why. */
static int
usage_scan(struct redis_store *rs, const char *tid, struct usage_limit *us,
    int n)
{
    char tag[RL_UUID_LEN + 8], pattern[RL_UUID_LEN + 16], cursor[32];
    char key[RL_UUID_LEN + 64];
    const char *argv[6] = { "SCAN", cursor, "MATCH", pattern, "COUNT",
        "1000" };
    size_t argvlen[6];
    struct usage_limit *u;
    redisReply *r, *keys;
    int i, seen = 0, more = 1;
    size_t j;

    snprintf(tag, sizeof(tag), "rl:{%s}:", tid);
    snprintf(pattern, sizeof(pattern), "%s*", tag);
    snprintf(cursor, sizeof(cursor), "0");
    while (more) {
        for (i = 0; i < 6; i++)
            argvlen[i] = strlen(argv[i]);
        /* The tag routes SCAN to the node that owns the tenant's slot. */
        if ((r = redis_store_command(rs, tag, 6, argv, argvlen)) == NULL)
            return ctl_fail("redis: %s", rs->error[0] ? rs->error :
                "redis unreachable");
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_STRING ||
            r->element[1]->type != REDIS_REPLY_ARRAY) {
            ctl_warn("redis SCAN: %s", r->type == REDIS_REPLY_ERROR ?
                r->str : "unexpected reply");
            freeReplyObject(r);
            return CTL_EXIT_FAIL;
        }
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        more = strcmp(cursor, "0") != 0;
        keys = r->element[1];
        for (j = 0; j < keys->elements; j++) {
            if (keys->element[j]->type != REDIS_REPLY_STRING ||
                (u = usage_owner(keys->element[j]->str, strlen(tag), us,
                n)) == NULL)
                continue;
            if (++seen > USAGE_MAX_KEYS) {
                more = 0;
                break;
            }
            u->counters++;
            if (usage_read(rs, keys->element[j]->str, u) == -1) {
                freeReplyObject(r);
                return CTL_EXIT_FAIL;
            }
        }
        freeReplyObject(r);
    }
    if (seen > USAGE_MAX_KEYS)
        ctl_warn("more than %d counters: the first %d were read",
            USAGE_MAX_KEYS, USAGE_MAX_KEYS);
    /* No counter: the limit is whole (a key that does not exist reads as
     * such). */
    for (i = 0; i < n; i++)
        if (!us[i].read && algo_get(us[i].limit.algorithm) != NULL) {
            snprintf(key, sizeof(key), "%s%lld:%lld", tag, us[i].rule_id,
                us[i].limit.id);
            if (usage_read(rs, key, &us[i]) == -1)
                return CTL_EXIT_FAIL;
        }
    return 0;
}

/*
 * For a limit over a day or more (a fixed window of a calendar day or
 * month, a sliding window of a day or more): when what is left runs out
 * at the rate it has been used (since the window began; over the last
 * window for a sliding one).  Returns that time in ms since the epoch, 0
 * when it lasts until the reset (or nothing is used), -1 for any other
 * limit.
 */
static long long
usage_exhausted_at(const struct usage_limit *u)
{
    const struct rl_limit *l = &u->limit;
    long long used = u->quota - u->left, now_s = u->now_ms / 1000;
    double elapsed_s, at_ms;
    struct tm tm;
    time_t t = (time_t)now_s;

    if (l->algorithm == RL_ALGO_FIXED_WINDOW &&
        (l->calendar == RL_CAL_DAY || l->calendar == RL_CAL_MONTH)) {
        gmtime_r(&t, &tm);
        tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
        if (l->calendar == RL_CAL_MONTH)
            tm.tm_mday = 1;
        elapsed_s = (double)u->now_ms / 1000.0 - (double)timegm(&tm);
    } else if (l->algorithm == RL_ALGO_SLIDING_WINDOW &&
        l->window_seconds >= USAGE_DAY)
        elapsed_s = (double)l->window_seconds;
    else
        return -1;
    if (used <= 0 || elapsed_s <= 0)
        return 0;
    at_ms = (double)u->now_ms + (double)u->left * elapsed_s * 1000.0 /
        (double)used;
    if (at_ms >= (double)(u->now_ms + u->reset_ms))
        return 0;
    return (long long)at_ms;
}

/* A reset time means something: the limit is partly used, or it is a
 * calendar window, which starts again at its end whatever happens. */
static int
usage_has_reset(const struct usage_limit *u)
{
    return u->left < u->quota ||
        u->limit.algorithm == RL_ALGO_FIXED_WINDOW;
}

/* Writes ms since the epoch as "2026-12-03T18:40:00Z". */
static void
usage_time(long long ms, char *buf, size_t len)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void
usage_print_json(const char *tenant, const char *tid, struct usage_limit *us,
    int n)
{
    struct json_object *o = ctl_db_json_doc(), *a, *lo;
    char when[32];
    long long at, now_ms = 0;
    int i;

    a = json_object_new_array();
    for (i = 0; i < n; i++) {
        struct usage_limit *u = &us[i];

        if (u->read && u->now_ms > now_ms)
            now_ms = u->now_ms;
        lo = json_object_new_object();
        json_object_object_add(lo, "rule_id", json_object_new_int64(
            u->rule_id));
        json_object_object_add(lo, "route", json_object_new_string(u->route));
        json_object_object_add(lo, "enabled",
            json_object_new_boolean(u->enabled));
        json_object_object_add(lo, "shadow",
            json_object_new_boolean(u->shadow));
        json_object_object_add(lo, "limit_id",
            json_object_new_int64(u->limit.id));
        json_object_object_add(lo, "limit",
            json_object_new_string(u->limit.name));
        json_object_object_add(lo, "algorithm", json_object_new_string(
            algo_name(u->limit.algorithm)));
        json_object_object_add(lo, "parameters",
            ctl_db_json_params(&u->limit));
        json_object_object_add(lo, "count", json_object_new_string(
            algo_count_name(u->limit.count)));
        json_object_object_add(lo, "counters",
            json_object_new_int(u->counters));
        /* Without a peek nothing is known: the members are null. */
        json_object_object_add(lo, "quota", u->read ?
            json_object_new_int64(u->quota) : NULL);
        json_object_object_add(lo, "used", u->read ?
            json_object_new_int64(u->quota - u->left) : NULL);
        json_object_object_add(lo, "left", u->read ?
            json_object_new_int64(u->left) : NULL);
        usage_time(u->now_ms + u->reset_ms, when, sizeof(when));
        json_object_object_add(lo, "reset_at", u->read &&
            usage_has_reset(u) ? json_object_new_string(when) : NULL);
        json_object_object_add(lo, "reset_ms", u->read &&
            usage_has_reset(u) ? json_object_new_int64(u->reset_ms) : NULL);
        /* Only a limit over a day or a month is projected; null when it
         * is not, or does not run out before it is whole again. */
        at = u->read ? usage_exhausted_at(u) : 0;
        if (at > 0)
            usage_time(at, when, sizeof(when));
        json_object_object_add(lo, "exhausted_at", at > 0 ?
            json_object_new_string(when) : NULL);
        json_object_array_add(a, lo);
    }
    json_object_object_add(o, "tenant", json_object_new_string(tenant));
    json_object_object_add(o, "tenant_id", json_object_new_string(tid));
    /* Redis's time of the latest peek; null when no counter was read. */
    if (now_ms > 0)
        usage_time(now_ms, when, sizeof(when));
    json_object_object_add(o, "now", now_ms > 0 ?
        json_object_new_string(when) : NULL);
    json_object_object_add(o, "limits", a);
    ctl_db_json_print(o);
}

/* The table: one row per limit, columns as wide as their widest cell. */
#define USAGE_COLS 12
static void
usage_print_table(struct usage_limit *us, int n)
{
    static const char *const heads[USAGE_COLS] = { "RULE", "ROUTE", "LIMIT",
        "ALGORITHM", "PARAMETERS", "COUNT", "COUNTERS", "USED", "LEFT",
        "RESET", "EXHAUSTED_AT", "NOTE" };
    char (*cell)[USAGE_COLS][RL_ROUTE_MAX + 1];
    size_t width[USAGE_COLS], used;
    char line[USAGE_COLS * (RL_ROUTE_MAX + 3)];
    long long at;
    int i, c, busiest = 0;

    if ((cell = calloc((size_t)n + 1, sizeof(*cell))) == NULL) {
        ctl_warn("out of memory");
        return;
    }
    for (c = 0; c < USAGE_COLS; c++) {
        snprintf(cell[0][c], sizeof(cell[0][c]), "%s", heads[c]);
        width[c] = strlen(heads[c]);
    }
    for (i = 0; i < n; i++) {
        struct usage_limit *u = &us[i];
        char (*row)[RL_ROUTE_MAX + 1] = cell[i + 1];

        snprintf(row[0], sizeof(row[0]), "%lld", u->rule_id);
        snprintf(row[1], sizeof(row[1]), "%s", u->route);
        snprintf(row[2], sizeof(row[2]), "%s", u->limit.name);
        snprintf(row[3], sizeof(row[3]), "%s", algo_name(u->limit.algorithm));
        snprintf(row[4], sizeof(row[4]), "%s", u->params);
        snprintf(row[5], sizeof(row[5]), "%s",
            algo_count_name(u->limit.count));
        snprintf(row[6], sizeof(row[6]), "%d", u->counters);
        snprintf(row[7], sizeof(row[7]), "-");
        snprintf(row[8], sizeof(row[8]), "-");
        snprintf(row[9], sizeof(row[9]), "-");
        snprintf(row[10], sizeof(row[10]), "-");
        if (u->read) {
            snprintf(row[7], sizeof(row[7]), "%lld", u->quota - u->left);
            snprintf(row[8], sizeof(row[8]), "%lld", u->left);
            if (usage_has_reset(u))
                usage_time(u->now_ms + u->reset_ms, row[9], sizeof(row[9]));
            if ((at = usage_exhausted_at(u)) > 0)
                usage_time(at, row[10], sizeof(row[10]));
            else if (at == 0)
                snprintf(row[10], sizeof(row[10]), "not before reset");
        }
        snprintf(row[11], sizeof(row[11]), "%s%s%s", !u->enabled ?
            "disabled" : "", !u->enabled && u->shadow ? ", " : "",
            u->shadow ? "shadow" : "");
        if (u->counters > 1 && u->read) {
            snprintf(row[11] + strlen(row[11]), sizeof(row[11]) -
                strlen(row[11]), "%sbusiest counter", row[11][0] ? ", " : "");
            busiest = 1;
        }
        for (c = 0; c < USAGE_COLS; c++)
            if (strlen(row[c]) > width[c])
                width[c] = strlen(row[c]);
    }
    for (i = 0; i <= n; i++) {
        line[0] = '\0';
        for (c = 0, used = 0; c < USAGE_COLS; c++)
            used += (size_t)snprintf(line + used, sizeof(line) - used,
                "%-*s  ", (int)width[c], cell[i][c]);
        while (used > 0 && line[used - 1] == ' ')
            line[--used] = '\0';
        puts(line);
    }
    free(cell);
    if (busiest)
        printf("(a limit counted per subject or key has one counter each: "
            "the one with the least left is shown)\n");
}

int
ctl_usage_run(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    char tid[RL_UUID_LEN + 1], err[256];
    struct usage_limit *us = NULL;
    struct redis_store rs;
    struct rl_counters counters;
    int n = 0, rc;

    if (validate_tenant_name("tenant name", a->pos[0], err,
        sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if ((rc = ctl_db_connect(ctl)) != 0)
        return rc;
    if ((rc = ctl_db_tenant_id(ctl, a->pos[0], tid)) != 0)
        return rc;
    if ((rc = usage_load(ctl, tid, &us, &n)) != 0)
        return rc;
    if (n > 0 && (rc = ctl_db_redis_open(ctl, &rs, &counters)) != 0) {
        free(us);
        return rc;
    }
    rc = n > 0 ? usage_scan(&rs, tid, us, n) : 0;
    if (n > 0)
        redis_store_close(&rs);
    if (rc == 0) {
        if (ctl_db_is_json())
            usage_print_json(a->pos[0], tid, us, n);
        else if (n == 0)
            printf("%s has no rules: nothing is limited\n", a->pos[0]);
        else
            usage_print_table(us, n);
    }
    free(us);
    return rc;
}
