/*
 * store_pg.c -- the worker's connection to PostgreSQL.
 *
 * PostgreSQL is asked only on cache misses: one prepared statement for a
 * key, one for a tenant's rules with their limits.  On connect the worker
 * also LISTENs on "ratelimit_changes"; the triggers of schema/001 notify it
 * when keys, tenants, rules or limits change, and pg_store_poll() picks the
 * notifications up from the socket without a round trip, so a revoked key
 * stops working at the next request instead of at cache expiry.
 *
 * A failed connection is dropped and not retried before a short back-off,
 * so an outage costs one fast failure per request, not a connect timeout.
 */
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "service.h"

#define PG_BACKOFF_MS 250

static const char sql_key[] =
    "SELECT k.id, k.key_prefix, k.tenant_id::text, k.role, k.status, "
    "t.status, t.name FROM api_keys k JOIN tenants t ON t.id = k.tenant_id "
    "WHERE k.key_hash = $1";

static const char sql_tenant[] =
    "SELECT id::text, status FROM tenants WHERE name = $1";

static const char sql_rules[] =
    "SELECT r.id, r.route_pattern, r.priority, r.shadow, r.failure_mode, "
    "r.per, r.always, l.id, l.name, l.algorithm, "
    "coalesce(l.limit_count, 0), coalesce(l.window_seconds, 0), "
    "coalesce(l.bucket_capacity, 0), coalesce(l.refill_rate, 0), "
    "coalesce(l.period_us, 0), coalesce(l.burst, 0), "
    "coalesce(l.calendar, '') "
    "FROM rules r JOIN limits l ON l.rule_id = r.id "
    "WHERE r.tenant_id = $1::uuid AND r.enabled ORDER BY r.id, l.id";

void
pg_store_init(struct pg_store *ps, const struct rl_config *cfg)
{
    memset(ps, 0, sizeof(*ps));
    ps->cfg = cfg;
}

void
pg_store_close(struct pg_store *ps)
{
    if (ps->conn != NULL)
        PQfinish(ps->conn);
    ps->conn = NULL;
}

static int
pg_store_fail(struct pg_store *ps, const char *what, const char *detail)
{
    char *nl;

    snprintf(ps->error, sizeof(ps->error), "postgresql %s: %s", what,
        detail != NULL && *detail ? detail : "failed");
    if ((nl = strchr(ps->error, '\n')) != NULL)
        *nl = '\0';
    log_warn("%s", ps->error);
    pg_store_close(ps);
    ps->retry_at_ms = util_now_ms() + PG_BACKOFF_MS;
    return STORE_UNAVAILABLE;
}

/* libpq's notices (e.g. "terminating connection due to administrator
 * command") go through our log, one line each. */
static void
pg_store_notice(void *arg, const char *message)
{
    (void)arg;
    log_info("postgresql: %s", message);
}

static int
pg_store_prepare(struct pg_store *ps, const char *name, const char *sql,
    int nparams)
{
    PGresult *res = PQprepare(ps->conn, name, sql, nparams, NULL);
    int ok = PQresultStatus(res) == PGRES_COMMAND_OK;

    if (!ok)
        pg_store_fail(ps, "prepare", PQresultErrorMessage(res));
    PQclear(res);
    return ok ? STORE_OK : STORE_UNAVAILABLE;
}

static int
pg_store_connect(struct pg_store *ps)
{
    const char *keys[] = { "dbname", "connect_timeout",
        "application_name", NULL };
    const char *vals[4];
    char timeout[24];
    PGresult *res;
    int ok;

    if (ps->conn != NULL) {
        if (PQstatus(ps->conn) == CONNECTION_OK)
            return STORE_OK;
        pg_store_close(ps);
    }
    if (ps->retry_at_ms != 0 && util_now_ms() < ps->retry_at_ms)
        return STORE_UNAVAILABLE;
    /* libpq counts whole seconds (and treats 1 as 2). */
    snprintf(timeout, sizeof(timeout), "%ld",
        (ps->cfg->pg_connect_timeout_ms + 999) / 1000);
    vals[0] = ps->cfg->pg_conninfo;
    vals[1] = timeout;
    vals[2] = "ratelimit-fcgi";
    vals[3] = NULL;
    ps->conn = PQconnectdbParams(keys, vals, 1);
    if (ps->conn == NULL || PQstatus(ps->conn) != CONNECTION_OK)
        return pg_store_fail(ps, "connect",
            ps->conn ? PQerrorMessage(ps->conn) : "out of memory");
    PQsetNoticeProcessor(ps->conn, pg_store_notice, NULL);
    if (pg_store_prepare(ps, "rl_key", sql_key, 1) != STORE_OK ||
        pg_store_prepare(ps, "rl_rules", sql_rules, 1) != STORE_OK ||
        pg_store_prepare(ps, "rl_tenant", sql_tenant, 1) != STORE_OK)
        return STORE_UNAVAILABLE;
    res = PQexec(ps->conn, "LISTEN ratelimit_changes");
    ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    if (!ok)
        pg_store_fail(ps, "LISTEN", PQresultErrorMessage(res));
    PQclear(res);
    if (!ok)
        return STORE_UNAVAILABLE;
    if (ps->retry_at_ms != 0)
        log_info("postgresql: connected again");
    ps->retry_at_ms = 0;
    ps->error[0] = '\0';
    /* Whatever changed while we were away is unknown: start afresh. */
    ps->notified = 1;
    return STORE_OK;
}

static PGresult *
pg_store_exec(struct pg_store *ps, const char *stmt, const char *param)
{
    PGresult *res;
    int reused = ps->conn != NULL, attempt;

    for (attempt = 0; attempt < 2; attempt++) {
        if (pg_store_connect(ps) != STORE_OK)
            return NULL;
        ps->queries++;
        res = PQexecPrepared(ps->conn, stmt, 1, &param, NULL, NULL, 0);
        if (PQresultStatus(res) == PGRES_TUPLES_OK)
            return res;
        /* A connection that broke while idle (PostgreSQL restarted): the
         * lookups are read-only, so one retry on a new one is safe. */
        if (attempt == 0 && reused && PQstatus(ps->conn) == CONNECTION_BAD) {
            log_info("postgresql: the connection was closed; reconnecting");
            PQclear(res);
            pg_store_close(ps);
            continue;
        }
        pg_store_fail(ps, stmt, PQresultErrorMessage(res));
        PQclear(res);
        return NULL;
    }
    return NULL;
}

static void
copy_str(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);

    if (n >= size)
        n = size - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

int
pg_store_key(struct pg_store *ps, const char *hash, struct key_info *out)
{
    PGresult *res;

    memset(out, 0, sizeof(*out));
    if ((res = pg_store_exec(ps, "rl_key", hash)) == NULL)
        return STORE_UNAVAILABLE;
    if (PQntuples(res) == 1) {
        out->found = 1;
        out->key_id = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        copy_str(out->key_prefix, sizeof(out->key_prefix),
            PQgetvalue(res, 0, 1));
        copy_str(out->tenant_id, sizeof(out->tenant_id),
            PQgetvalue(res, 0, 2));
        out->admin = strcmp(PQgetvalue(res, 0, 3), "admin") == 0;
        out->revoked = strcmp(PQgetvalue(res, 0, 4), "active") != 0;
        out->suspended = strcmp(PQgetvalue(res, 0, 5), "active") != 0;
        copy_str(out->tenant_name, sizeof(out->tenant_name),
            PQgetvalue(res, 0, 6));
    }
    PQclear(res);
    return STORE_OK;
}

int
pg_store_tenant(struct pg_store *ps, const char *name, struct key_info *out)
{
    PGresult *res;

    memset(out, 0, sizeof(*out));
    if ((res = pg_store_exec(ps, "rl_tenant", name)) == NULL)
        return STORE_UNAVAILABLE;
    if (PQntuples(res) == 1) {
        out->found = 1;
        copy_str(out->tenant_id, sizeof(out->tenant_id),
            PQgetvalue(res, 0, 0));
        out->suspended = strcmp(PQgetvalue(res, 0, 1), "active") != 0;
        copy_str(out->tenant_name, sizeof(out->tenant_name), name);
    }
    PQclear(res);
    return STORE_OK;
}

void
pg_store_rules_free(void *p)
{
    struct tenant_rules *tr = p;

    if (tr == NULL)
        return;
    free(tr->rules);
    free(tr);
}

/* Limit names go into RateLimit headers as sf-strings and into JSON: keep
 * them to a safe alphabet. */
static void
limit_name(char *dst, size_t size, const char *src)
{
    size_t i;

    copy_str(dst, size, *src ? src : "default");
    for (i = 0; dst[i] != '\0'; i++)
        if (!((dst[i] >= 'a' && dst[i] <= 'z') ||
            (dst[i] >= 'A' && dst[i] <= 'Z') ||
            (dst[i] >= '0' && dst[i] <= '9') || strchr("_-.", dst[i])))
            dst[i] = '_';
}

int
pg_store_rules(struct pg_store *ps, const char *tenant_id,
    struct tenant_rules **out)
{
    struct tenant_rules *tr;
    struct rl_rule *rule = NULL;
    struct rl_limit *l;
    PGresult *res;
    long long rule_id;
    int i, n;

    if ((res = pg_store_exec(ps, "rl_rules", tenant_id)) == NULL)
        return STORE_UNAVAILABLE;
    n = PQntuples(res);
    if ((tr = calloc(1, sizeof(*tr))) == NULL ||
        (n > 0 && (tr->rules = calloc((size_t)n, sizeof(*tr->rules))) ==
        NULL)) {
        free(tr);
        PQclear(res);
        return STORE_UNAVAILABLE;
    }
    for (i = 0; i < n; i++) {
        rule_id = strtoll(PQgetvalue(res, i, 0), NULL, 10);
        if (rule == NULL || rule->id != rule_id) {
            if (tr->n == RL_MAX_RULES) {
                log_warn("tenant %s has more than %d rules; the rest are "
                    "ignored", tenant_id, RL_MAX_RULES);
                break;
            }
            rule = &tr->rules[tr->n++];
            rule->id = rule_id;
            copy_str(rule->pattern, sizeof(rule->pattern),
                PQgetvalue(res, i, 1));
            rule->priority = atoi(PQgetvalue(res, i, 2));
            rule->shadow = PQgetvalue(res, i, 3)[0] == 't';
            rule->fail_open = strcmp(PQgetvalue(res, i, 4), "open") == 0;
            rule->per_route = strcmp(PQgetvalue(res, i, 5), "route") == 0;
            rule->always = PQgetvalue(res, i, 6)[0] == 't';
        }
        if (rule->nlimits == RL_MAX_LIMITS) {
            log_warn("rule %lld has more than %d limits; the rest are "
                "ignored", rule->id, RL_MAX_LIMITS);
            continue;
        }
        l = &rule->limits[rule->nlimits];
        l->id = strtoll(PQgetvalue(res, i, 7), NULL, 10);
        limit_name(l->name, sizeof(l->name), PQgetvalue(res, i, 8));
        l->algorithm = rules_algorithm_parse(PQgetvalue(res, i, 9));
        l->limit_count = strtoll(PQgetvalue(res, i, 10), NULL, 10);
        l->window_seconds = strtoll(PQgetvalue(res, i, 11), NULL, 10);
        l->bucket_capacity = strtoll(PQgetvalue(res, i, 12), NULL, 10);
        l->refill_rate = strtod(PQgetvalue(res, i, 13), NULL);
        l->period_us = strtoll(PQgetvalue(res, i, 14), NULL, 10);
        l->burst = strtoll(PQgetvalue(res, i, 15), NULL, 10);
        l->calendar = rules_calendar_parse(PQgetvalue(res, i, 16));
        if (l->algorithm < 0 || (l->algorithm == RL_ALGO_FIXED_WINDOW &&
            l->calendar < 0)) {
            log_warn("limit %lld of rule %lld: unknown algorithm \"%s\" or "
                "calendar; ignored", l->id, rule->id, PQgetvalue(res, i, 9));
            continue;
        }
        rule->nlimits++;
    }
    PQclear(res);
    *out = tr;
    return STORE_OK;
}

int
pg_store_poll(struct pg_store *ps)
{
    PGnotify *n;
    int changed = ps->notified;

    ps->notified = 0;
    if (ps->conn == NULL)
        return changed;
    if (PQconsumeInput(ps->conn) == 0) {
        /* The connection broke; the next query reconnects.  The caches
         * stay: they are what keeps known keys working during an outage,
         * and they are dropped once a new connection is made. */
        pg_store_close(ps);
        return changed;
    }
    while ((n = PQnotifies(ps->conn)) != NULL) {
        log_debug("postgresql: change notified (%s)", n->extra);
        changed = 1;
        PQfreemem(n);
    }
    return changed;
}

int
pg_store_ready(struct pg_store *ps)
{
    PGresult *res;
    int ok;

    if (pg_store_connect(ps) != STORE_OK)
        return STORE_UNAVAILABLE;
    res = PQexec(ps->conn, "SELECT 1");
    ok = PQresultStatus(res) == PGRES_TUPLES_OK;
    if (!ok)
        pg_store_fail(ps, "SELECT 1", PQresultErrorMessage(res));
    PQclear(res);
    return ok ? STORE_OK : STORE_UNAVAILABLE;
}
