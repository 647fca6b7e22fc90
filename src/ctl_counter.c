/*
 * ctl_counter.c -- counter show and counter reset: the Redis state of the
 * limits a check of a route decides.
 *
 * The limits are found as the service finds them (the most specific
 * matching rule and the "always" rules that match, rules_match), and each
 * counter's key is made by limiter_key(), the function that names it for
 * the service: what it counts (--count) decides whether --subject, --key
 * or --address matter.  Redis is reached with the configuration file's
 * redis settings (single, sentinel or cluster) through the Redis client
 * (redis.h).
 * A concurrency limit's counter is a set of leases (lua/concurrency.lua):
 * show lists the live ones with their age (since taken or last extended)
 * and the time until they expire.  A token bucket's is a string of three
 * packed doubles (lua/token_bucket.lua), shown as its two numbers; the
 * other algorithms keep hashes, shown field by field.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <json-c/json.h>

#include "ctl.h"
#include "redis.h"

struct ctl_counter {
    long long rule_id;
    struct rl_rule rule;        /* id and per_route */
    struct rl_limit limit;
    char algorithm[32];
    char key[RL_UUID_LEN + 160];
};

/*
 * Finds the counters a check of ROUTE (a->pos[1]) of TENANT (a->pos[0])
 * touches, for the subject or client the options name.  *out is calloc()ed
 * (free it).  Returns 0, or an exit status after printing why.
 */
static int
ctl_counter_find(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a, struct ctl_counter **out, int *nout)
{
    const char *subject = ctl_args_value(cmd, a, "subject");
    const char *key = ctl_args_value(cmd, a, "key");
    const char *address = ctl_args_value(cmd, a, "address");
    char id[RL_UUID_LEN + 1], err[256], ids[1024], best_id[24];
    const char *params[3] = { id, ids, best_id };
    struct check_request req;
    struct rl_rule *rules = NULL;
    struct ctl_counter *c;
    long long key_id;
    PGresult *res;
    size_t used;
    int i, n = 0, best, rc;

    *out = NULL;
    *nout = 0;
    if (validate_tenant_name("tenant name", a->pos[0], err,
        sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    memset(&req, 0, sizeof(req));
    if (a->pos[1][0] == '\0' || strlen(a->pos[1]) > RL_ROUTE_MAX)
        return ctl_usage_error(cmd, "ROUTE must be 1 to %d bytes",
            RL_ROUTE_MAX);
    snprintf(req.route, sizeof(req.route), "%s", a->pos[1]);
    if (subject != NULL) {
        if (strlen(subject) > RL_SUBJECT_MAX)
            return ctl_usage_error(cmd, "--subject is longer than %d bytes",
                RL_SUBJECT_MAX);
        snprintf(req.subject, sizeof(req.subject), "%s", subject);
        req.has_subject = 1;
    }
    if (key != NULL && address != NULL)
        return ctl_usage_error(cmd, "--key and --address exclude each other");
    if (key != NULL) {
        if (validate_id("--key", key, &key_id, err, sizeof(err)) == -1)
            return ctl_usage_error(cmd, "%s", err);
        snprintf(req.identity, sizeof(req.identity), "key:%lld", key_id);
    } else if (address != NULL) {
        if (strlen(address) > 64)
            return ctl_usage_error(cmd, "--address is too long");
        snprintf(req.identity, sizeof(req.identity), "addr:%s", address);
    }
    req.cost = 1;
    if ((rc = ctl_db_connect(ctl)) != 0)
        return rc;
    if ((rc = ctl_db_tenant_id(ctl, a->pos[0], id)) != 0)
        return rc;
    if (ctl_guard_load(ctl, id, &rules, &n) == -1)
        return ctl_db_fail(ctl);
    if ((best = rules_match(rules, n, req.route)) < 0) {
        free(rules);
        return ctl_fail("no rule of %s matches %s: it has no counters",
            a->pos[0], req.route);
    }
    snprintf(best_id, sizeof(best_id), "%lld", rules[best].id);
    ids[0] = '{';
    used = 1;
    for (i = 0; i < n; i++)
        if (i == best || (rules[i].always &&
            rules_pattern_matches(rules[i].pattern, req.route))) {
            snprintf(ids + used, sizeof(ids) - used, "%s%lld",
                used > 1 ? "," : "", rules[i].id);
            used += strlen(ids + used);
        }
    snprintf(ids + used, sizeof(ids) - used, "}");
    free(rules);
    res = ctl_db_query(ctl, "SELECT r.id, r.per, l.id, l.name, l.algorithm, "
        CTL_LIMIT_PARAMS_SQL ", l.count_scope "
        "FROM rules r JOIN limits l ON l.rule_id = r.id "
        "WHERE r.tenant_id = $1::uuid AND r.id = ANY ($2::bigint[]) "
        "ORDER BY r.id <> $3::bigint, r.id, l.id", 3, params);
    if (res == NULL)
        return ctl_db_fail(ctl);
    if ((*out = calloc((size_t)PQntuples(res) + 1, sizeof(**out))) ==
        NULL) {
        PQclear(res);
        return ctl_fail("out of memory");
    }
    for (i = 0; i < PQntuples(res); i++) {
        c = &(*out)[i];
        c->rule.id = strtoll(PQgetvalue(res, i, 0), NULL, 10);
        c->rule.per_route = strcmp(PQgetvalue(res, i, 1), "route") == 0;
        c->limit.id = strtoll(PQgetvalue(res, i, 2), NULL, 10);
        snprintf(c->limit.name, sizeof(c->limit.name), "%s",
            PQgetvalue(res, i, 3));
        snprintf(c->algorithm, sizeof(c->algorithm), "%s",
            PQgetvalue(res, i, 4));
        c->limit.algorithm = algo_parse(c->algorithm);
        ctl_db_limit_params(res, i, 5, &c->limit);
        c->limit.count = algo_count_parse(PQgetvalue(res, i, 12));
        if (limiter_key(id, &c->rule, &c->limit, &req, c->key,
            sizeof(c->key)) == -1) {
            PQclear(res);
            free(*out);
            *out = NULL;
            return ctl_fail("limit %lld cannot be used", c->limit.id);
        }
    }
    *nout = PQntuples(res);
    PQclear(res);
    return 0;
}

/* One command about key; NULL after printing why. */
static redisReply *
ctl_counter_ask(struct redis_store *rs, const char *key, const char *cmd0)
{
    const char *argv[2] = { cmd0, key };
    size_t argvlen[2] = { strlen(cmd0), strlen(key) };
    redisReply *r = redis_store_command(rs, key, 2, argv, argvlen);

    if (r == NULL)
        ctl_warn("redis: %s", rs->error[0] ? rs->error :
            "redis unreachable");
    else if (r->type == REDIS_REPLY_ERROR) {
        ctl_warn("redis %s: %s", cmd0, r->str);
        freeReplyObject(r);
        r = NULL;
    }
    return r;
}

/* A value of a counter's hash for --json: the scripts store numbers (a
 * whole number, or a token bucket's tokens as "%.17g"); anything else, a
 * value edited by hand, stays a string. */
static struct json_object *
ctl_counter_json_value(const char *v)
{
    char *end;
    long long n;
    double d;

    if (*v == '\0')
        return json_object_new_string(v);
    n = strtoll(v, &end, 10);
    if (*end == '\0')
        return json_object_new_int64(n);
    d = strtod(v, &end);
    if (*end == '\0' && d == d && d - d == 0)
        return json_object_new_double(d);
    return json_object_new_string(v);
}

/*
 * The state of a token bucket stored as a string at key (lua/token_bucket.lua:
 * 24 bytes, tokens, ts and the key's expiry as big-endian doubles; the
 * expiry is PTTL's to show) into text (state[len]) and st.  Returns 1 when key holds a string, 0 when it holds something else
 * or nothing (the caller reads it as a hash), -1 after printing why.
 */
static int
ctl_counter_bucket(struct redis_store *rs, const char *key, char *state,
    size_t len, struct json_object *st)
{
    redisReply *r;
    double tokens, ts;

    if ((r = ctl_counter_ask(rs, key, "TYPE")) == NULL)
        return -1;
    if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "string") != 0) {
        freeReplyObject(r);
        return 0;
    }
    freeReplyObject(r);
    if ((r = ctl_counter_ask(rs, key, "GET")) == NULL)
        return -1;
    if (r->type != REDIS_REPLY_STRING || r->len != 24) {
        snprintf(state, len, "(unreadable: %zu bytes)",
            r->type == REDIS_REPLY_STRING ? r->len : (size_t)0);
        freeReplyObject(r);
        return 1;
    }
    tokens = util_be_double((const unsigned char *)r->str);
    ts = util_be_double((const unsigned char *)r->str + 8);
    freeReplyObject(r);
    snprintf(state, len, "tokens=%.17g ts=%.0f", tokens, ts);
    json_object_object_add(st, "tokens", json_object_new_double(tokens));
    json_object_object_add(st, "ts", json_object_new_int64((long long)ts));
    return 1;
}

/* The most leases counter show lists one by one. */
#define CTL_COUNTER_LEASES 20

/*
 * The live leases of concurrency counter c, held by tenant_id, at Redis
 * time: into text (state[len]) and, when st is not NULL, st's "held" and
 * "leases" (each with its id, age_ms and expires_in_ms).  Returns 0, or -1
 * after printing why.
 */
static int
ctl_counter_leases(struct redis_store *rs, const struct ctl_counter *c,
    const char *tenant_id, char *state, size_t len, struct json_object *st)
{
    const char *zr[4] = { "ZRANGE", c->key, "0", "-1" };
    const char *ws = "WITHSCORES", *tm = "TIME";
    const char *argv[5];
    size_t argvlen[5], used = 0, j;
    struct json_object *list = NULL, *o;
    redisReply *r, *t;
    long long now_ms, expiry, ttl_ms = (c->limit.period_us + 999) / 1000;
    int i, held = 0;

    for (i = 0; i < 4; i++) {
        argv[i] = zr[i];
        argvlen[i] = strlen(zr[i]);
    }
    argv[4] = ws;
    argvlen[4] = strlen(ws);
    argv[0] = tm;
    argvlen[0] = strlen(tm);
    /* The time first (where the key lives), then the set. */
    if ((t = redis_store_command(rs, c->key, 1, argv, argvlen)) == NULL ||
        t->type != REDIS_REPLY_ARRAY || t->elements != 2) {
        ctl_warn("redis TIME: %s", rs->error[0] ? rs->error :
            "unexpected reply");
        if (t != NULL)
            freeReplyObject(t);
        return -1;
    }
    now_ms = strtoll(t->element[0]->str, NULL, 10) * 1000 +
        strtoll(t->element[1]->str, NULL, 10) / 1000;
    freeReplyObject(t);
    argv[0] = zr[0];
    argvlen[0] = strlen(zr[0]);
    if ((r = redis_store_command(rs, c->key, 5, argv, argvlen)) == NULL ||
        r->type != REDIS_REPLY_ARRAY) {
        ctl_warn("redis ZRANGE: %s", r == NULL ? rs->error :
            r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        if (r != NULL)
            freeReplyObject(r);
        return -1;
    }
    if (st != NULL)
        list = json_object_new_array();
    state[0] = '\0';
    for (j = 0; j + 1 < r->elements; j += 2) {
        expiry = strtoll(r->element[j + 1]->str, NULL, 10);
        if (expiry <= now_ms)
            continue;           /* expired: counts for nothing */
        held++;
        if (list != NULL) {
            char id[RL_UUID_LEN + 2 + 64];

            snprintf(id, sizeof(id), "%s.%s", tenant_id,
                r->element[j]->str);
            o = json_object_new_object();
            json_object_object_add(o, "lease", json_object_new_string(id));
            json_object_object_add(o, "age_ms", json_object_new_int64(
                ttl_ms - (expiry - now_ms) > 0 ?
                ttl_ms - (expiry - now_ms) : 0));
            json_object_object_add(o, "expires_in_ms",
                json_object_new_int64(expiry - now_ms));
            json_object_array_add(list, o);
        } else if (held <= CTL_COUNTER_LEASES && used < len)
            used += (size_t)snprintf(state + used, len - used,
                " %s.%.8s.. age=%lldms expires_in=%lldms", tenant_id,
                r->element[j]->str, ttl_ms - (expiry - now_ms) > 0 ?
                ttl_ms - (expiry - now_ms) : 0, expiry - now_ms);
    }
    freeReplyObject(r);
    if (st != NULL) {
        json_object_object_add(st, "held", json_object_new_int(held));
        json_object_object_add(st, "leases", list);
        return 0;
    }
    if (held > CTL_COUNTER_LEASES && used < len)
        used += (size_t)snprintf(state + used, len - used,
            " ... and %d more", held - CTL_COUNTER_LEASES);
    {
        char head[32];
        size_t hl = (size_t)snprintf(head, sizeof(head), "held=%d", held);

        if (hl + used + 1 <= len) {
            memmove(state + hl, state, used + 1);
            memcpy(state, head, hl);
        }
    }
    return 0;
}

int
ctl_counter_show(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    struct ctl_counter *cs;
    struct redis_store rs;
    struct rl_counters counters;
    struct json_object *rows = NULL, *o, *st;
    redisReply *r, *t;
    char state[2048], tenant_id[RL_UUID_LEN + 1];
    size_t used, j;
    int i, n, rc, bucket, fail = 0;

    if ((rc = ctl_counter_find(ctl, cmd, a, &cs, &n)) != 0)
        return rc;
    if ((rc = ctl_db_tenant_id(ctl, a->pos[0], tenant_id)) != 0) {
        free(cs);
        return rc;
    }
    if ((rc = ctl_db_redis_open(ctl, &rs, &counters)) != 0) {
        free(cs);
        return rc;
    }
    if (ctl_db_is_json())
        rows = json_object_new_array();
    else
        printf("%-8s  %-16s  %-14s  %-7s  %-10s  %s\n", "LIMIT_ID", "LIMIT",
            "ALGORITHM", "COUNT", "TTL_MS", "STATE");
    for (i = 0; i < n && !fail; i++) {
        if (algo_is_concurrency(&cs[i].limit)) {
            st = json_object_new_object();
            if (ctl_counter_leases(&rs, &cs[i], tenant_id, state,
                sizeof(state), rows != NULL ? st : NULL) == -1 ||
                (t = ctl_counter_ask(&rs, cs[i].key, "PTTL")) == NULL) {
                json_object_put(st);
                fail = 1;
                break;
            }
            r = NULL;
            goto print;
        }
        st = json_object_new_object();
        if ((bucket = ctl_counter_bucket(&rs, cs[i].key, state,
            sizeof(state), st)) != 0) {
            if (bucket == -1 ||
                (t = ctl_counter_ask(&rs, cs[i].key, "PTTL")) == NULL) {
                json_object_put(st);
                fail = 1;
                break;
            }
            r = NULL;
            goto print;
        }
        json_object_put(st);
        if ((r = ctl_counter_ask(&rs, cs[i].key, "HGETALL")) == NULL ||
            (t = ctl_counter_ask(&rs, cs[i].key, "PTTL")) == NULL) {
            if (r != NULL)
                freeReplyObject(r);
            fail = 1;
            break;
        }
        state[0] = '\0';
        used = 0;
        st = json_object_new_object();
        for (j = 0; r->type == REDIS_REPLY_ARRAY && j + 1 < r->elements;
            j += 2) {
            used += (size_t)snprintf(state + used, used < sizeof(state) ?
                sizeof(state) - used : 0, "%s%s=%s", j > 0 ? " " : "",
                r->element[j]->str, r->element[j + 1]->str);
            json_object_object_add(st, r->element[j]->str,
                ctl_counter_json_value(r->element[j + 1]->str));
        }
print:
        if (rows != NULL) {
            o = json_object_new_object();
            json_object_object_add(o, "limit_id",
                json_object_new_int64(cs[i].limit.id));
            json_object_object_add(o, "limit",
                json_object_new_string(cs[i].limit.name));
            json_object_object_add(o, "rule_id",
                json_object_new_int64(cs[i].rule.id));
            json_object_object_add(o, "algorithm",
                json_object_new_string(cs[i].algorithm));
            json_object_object_add(o, "count",
                json_object_new_string(algo_count_name(cs[i].limit.count)));
            json_object_object_add(o, "parameters",
                ctl_db_json_params(&cs[i].limit));
            json_object_object_add(o, "key",
                json_object_new_string(cs[i].key));
            json_object_object_add(o, "ttl_ms", t->integer > 0 ?
                json_object_new_int64(t->integer) : NULL);
            json_object_object_add(o, "state", st);
            json_object_array_add(rows, o);
        } else {
            json_object_put(st);
            printf("%-8lld  %-16s  %-14s  %-7s  %-10lld  %s\n",
                cs[i].limit.id, cs[i].limit.name, cs[i].algorithm,
                algo_count_name(cs[i].limit.count),
                t->integer > 0 ? t->integer : 0LL,
                state[0] != '\0' ? state : "(no counter: full)");
        }
        if (r != NULL)
            freeReplyObject(r);
        freeReplyObject(t);
    }
    redis_store_close(&rs);
    free(cs);
    if (fail) {
        if (rows != NULL)
            json_object_put(rows);
        return CTL_EXIT_FAIL;
    }
    if (rows != NULL) {
        o = ctl_db_json_doc();
        json_object_object_add(o, "tenant", json_object_new_string(
            a->pos[0]));
        json_object_object_add(o, "route", json_object_new_string(
            a->pos[1]));
        json_object_object_add(o, "counters", rows);
        ctl_db_json_print(o);
    }
    return CTL_EXIT_OK;
}

int
ctl_counter_reset(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    struct ctl_counter *cs;
    struct redis_store rs;
    struct rl_counters counters;
    redisReply *r;
    int i, n, rc, cleared = 0;

    if ((rc = ctl_counter_find(ctl, cmd, a, &cs, &n)) != 0)
        return rc;
    if ((rc = ctl_db_redis_open(ctl, &rs, &counters)) != 0) {
        free(cs);
        return rc;
    }
    for (i = 0; i < n; i++) {
        if ((r = ctl_counter_ask(&rs, cs[i].key, "DEL")) == NULL) {
            redis_store_close(&rs);
            free(cs);
            return CTL_EXIT_FAIL;
        }
        if (r->integer > 0) {
            cleared++;
            printf("limit %lld (%s): counter cleared\n", cs[i].limit.id,
                cs[i].limit.name);
        }
        freeReplyObject(r);
    }
    /* The pool may remember a denial of these counters (the over-limit
     * cache): a change notification makes every worker forget. */
    if (ctl_db_command(ctl, "SELECT pg_notify('ratelimit_changes', "
        "'counters:' || $1)", 1, (const char *const *)&a->pos[0]) == -1)
        ctl_warn("the pool was not told (%s): a denial it remembers holds "
            "until its Retry-After", PQerrorMessage(ctl->conn));
    printf("%d of %d counters cleared (the others were full already)\n",
        cleared, n);
    redis_store_close(&rs);
    free(cs);
    return CTL_EXIT_OK;
}
