/*
 * pg_store.c -- the worker's connection to PostgreSQL.
 *
 * PostgreSQL is asked only on cache misses: one query for a key, one for a
 * tenant's rules with their limits, one for a tenant by name.  Every
 * exchange goes through libpq's asynchronous API and poll() with a
 * deadline, so that no request waits more than pg_query_timeout_ms in all,
 * connect included, whether PostgreSQL is stopped (refused at once),
 * unreachable or frozen (no answer at all): at the deadline the connection
 * is dropped and the caller answers from what the pool already knows.
 *
 * On connect the worker also LISTENs on "ratelimit_changes"; the triggers
 * of schema/001 notify it when keys, tenants, rules or limits change, and
 * pg_store_poll() picks the notifications up from the socket without a
 * round trip.  The worker keeps that socket in its epoll set, so the
 * socket is read only when something came (a request does not spend a
 * system call on finding nothing).  A new connection also counts as a
 * change (what was missed while disconnected is unknown).  Between
 * requests pg_store_tick() advances a new connection without waiting
 * (libpq's non-blocking connect, then LISTEN), so LISTEN is back within
 * about a second of PostgreSQL's return, not at the next cache miss, and
 * a PostgreSQL that does not answer at all never holds a worker outside a
 * request.
 *
 * After a failure no new connection is tried for PG_BACKOFF_MS, so an
 * outage costs one fast failure per request, not one deadline each.
 *
 * The filter of active keys (keyfilter.c) is kept here too: one worker
 * reads every active key's hash between requests whenever it is not
 * complete, each notification of a key adds its hash, and a lost
 * connection marks it incomplete.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "service.h"

#define PG_BACKOFF_MS 500
#define PG_PENDING 1                /* pg_store_advance: still connecting */
#define PG_TICK_WAIT_MS 50          /* an idle worker's wait for a step */

/* Where the connection stands (struct pg_store's state). */
enum { PGS_NONE = 0, PGS_CONNECTING, PGS_LISTENING, PGS_READY };

/* A tenant's counter budget: -1 for NULL, the configuration's
 * (schema/006_counter_budget.sql). */
static const char sql_key[] =
    "SELECT k.id, k.key_prefix, k.tenant_id::text, k.role, k.status, "
    "t.status, t.name, coalesce(t.counter_budget, -1) "
    "FROM api_keys k JOIN tenants t ON t.id = k.tenant_id "
    "WHERE k.key_hash = $1";

static const char sql_tenant[] =
    "SELECT id::text, status, coalesce(counter_budget, -1) FROM tenants "
    "WHERE name = $1";

/* The keys served lately: a bookkeeping write, which notifies no worker
 * (schema/001_init.sql). */
static const char sql_used[] =
    "UPDATE api_keys SET last_used_at = now() "
    "WHERE id = ANY ($1::bigint[]) RETURNING id";

/* The key filter's rows (keyfilter.c), read within PG_FILTER_BUILD_MS:
 * about 1 s a million keys here. */
static const char sql_active_keys[] =
    "SELECT key_hash FROM api_keys WHERE status = 'active'";
#define PG_FILTER_BUILD_MS 10000

/* last_used_at: each key at most once a minute, a batch at most once a
 * second. */
#define PG_USED_EVERY_MS 60000
#define PG_USED_WRITE_MS 1000

static const char sql_rules[] =
    "SELECT r.id, r.route_pattern, r.priority, r.shadow, r.failure_mode, "
    "r.per, r.always, l.id, l.name, l.algorithm, "
    "coalesce(l.limit_count, 0), coalesce(l.window_seconds, 0), "
    "coalesce(l.bucket_capacity, 0), coalesce(l.refill_rate, 0), "
    "coalesce(l.period_us, 0), coalesce(l.burst, 0), "
    "coalesce(l.calendar, ''), l.count_scope "
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
    ps->state = PGS_NONE;
}

int
pg_store_down(const struct pg_store *ps)
{
    return ps->failing;
}

/*
 * Records a failure: reason is the short text /health/ready may show,
 * detail (libpq's message, with host and port) goes to the log only.  The
 * connection is dropped and the back-off starts.  Returns
 * STORE_UNAVAILABLE.
 */
static int
pg_store_fail(struct pg_store *ps, const char *reason, const char *what,
    const char *detail)
{
    char line[256], *nl;

    snprintf(ps->error, sizeof(ps->error), "%s", reason);
    snprintf(line, sizeof(line), "%s", detail != NULL && *detail ? detail :
        "failed");
    if ((nl = strchr(line, '\n')) != NULL)
        *nl = '\0';
    log_warn("postgresql %s: %s", what, line);
    pg_store_close(ps);
    ps->failing = 1;
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

/* Waits until the connection's socket is readable (or writable) or the
 * deadline passes; a deadline already past only looks.  Returns 1 when
 * ready, 0 otherwise. */
static int
pg_store_wait(PGconn *c, int for_write, int64_t deadline)
{
    struct pollfd p;
    int64_t left;
    int n;

    p.fd = PQsocket(c);
    p.events = for_write ? POLLOUT : POLLIN;
    if (p.fd < 0)
        return 0;
    do {
        left = deadline - util_now_ms();
        n = poll(&p, 1, left > 0 ? (int)left : 0);
    } while (n == -1 && errno == EINTR);
    return n > 0;
}

/*
 * Sends sql (with at most one parameter) and collects its result by the
 * deadline.  Returns the last result (the caller clears it), or NULL when
 * the connection broke or the deadline passed; then *broken says whether
 * the connection was found closed (and so the query never ran).
 */
static PGresult *
pg_store_run(PGconn *c, const char *sql, const char *param,
    int64_t deadline, int *broken, const char **why)
{
    PGresult *res = NULL, *r;
    int f;

    *broken = 0;
    *why = "timed out";
    if (!PQsendQueryParams(c, sql, param != NULL, NULL,
        param != NULL ? &param : NULL, NULL, NULL, 0)) {
        *broken = PQstatus(c) == CONNECTION_BAD;
        *why = PQerrorMessage(c);
        return NULL;
    }
    while ((f = PQflush(c)) == 1)
        if (!pg_store_wait(c, 1, deadline))
            return NULL;
    if (f == -1) {
        *broken = 1;
        *why = PQerrorMessage(c);
        return NULL;
    }
    for (;;) {
        if (!PQconsumeInput(c)) {
            *broken = 1;
            *why = PQerrorMessage(c);
            PQclear(res);
            return NULL;
        }
        while (!PQisBusy(c)) {
            if ((r = PQgetResult(c)) == NULL)
                return res;
            PQclear(res);
            res = r;
        }
        if (!pg_store_wait(c, 0, deadline)) {
            PQclear(res);
            return NULL;
        }
    }
}

/*
 * Takes the connection as far as it goes by the deadline: starts a
 * connection when there is none (unless backing off), drives libpq's
 * non-blocking connect, then sends LISTEN and collects its result.  With
 * a deadline already past it only does what needs no waiting, which is
 * how a connection is made between requests without ever blocking a
 * worker.  Returns STORE_OK when the connection is ready for queries,
 * STORE_UNAVAILABLE when it failed (or we are backing off), and
 * PG_PENDING when it is still under way at the deadline.
 */
static int
pg_store_advance(struct pg_store *ps, int64_t deadline)
{
    const char *keys[] = { "dbname", "application_name", NULL };
    const char *vals[3];
    PGresult *r;
    int f;

    if (ps->state == PGS_READY) {
        if (PQstatus(ps->conn) == CONNECTION_OK)
            return STORE_OK;
        pg_store_close(ps);
    }
    if (ps->state == PGS_NONE) {
        if (ps->retry_at_ms != 0 && util_now_ms() < ps->retry_at_ms)
            return STORE_UNAVAILABLE;
        vals[0] = ps->cfg->pg_conninfo;
        vals[1] = "ratelimit-fcgi";
        vals[2] = NULL;
        ps->conn = PQconnectStartParams(keys, vals, 1);
        ps->serial++;
        if (ps->conn == NULL)
            return pg_store_fail(ps, "postgresql unreachable", "connect",
                "out of memory");
        ps->state = PGS_CONNECTING;
        ps->polling = PGRES_POLLING_WRITING;
        ps->started_ms = util_now_ms();
        if (PQstatus(ps->conn) == CONNECTION_BAD)
            return pg_store_fail(ps, "postgresql unreachable", "connect",
                PQerrorMessage(ps->conn));
    }
    while (ps->state == PGS_CONNECTING) {
        if (ps->polling == PGRES_POLLING_FAILED)
            return pg_store_fail(ps, "postgresql unreachable", "connect",
                PQerrorMessage(ps->conn));
        if (ps->polling == PGRES_POLLING_OK) {
            PQsetnonblocking(ps->conn, 1);
            PQsetNoticeProcessor(ps->conn, pg_store_notice, NULL);
            if (!PQsendQuery(ps->conn, "LISTEN ratelimit_changes"))
                return pg_store_fail(ps, "postgresql unreachable", "LISTEN",
                    PQerrorMessage(ps->conn));
            ps->state = PGS_LISTENING;
            ps->result_ok = 0;
            break;
        }
        if (!pg_store_wait(ps->conn, ps->polling == PGRES_POLLING_WRITING,
            deadline))
            goto pending;
        ps->polling = PQconnectPoll(ps->conn);
    }
    while (ps->state == PGS_LISTENING) {
        if ((f = PQflush(ps->conn)) == -1 || !PQconsumeInput(ps->conn))
            return pg_store_fail(ps, "postgresql unreachable", "LISTEN",
                PQerrorMessage(ps->conn));
        while (f == 0 && !PQisBusy(ps->conn)) {
            if ((r = PQgetResult(ps->conn)) == NULL) {
                if (!ps->result_ok)
                    return pg_store_fail(ps, "postgresql unreachable",
                        "LISTEN", "no result");
                ps->state = PGS_READY;
                break;
            }
            if (PQresultStatus(r) == PGRES_COMMAND_OK)
                ps->result_ok = 1;
            else {
                pg_store_fail(ps, "postgresql unreachable", "LISTEN",
                    PQresultErrorMessage(r));
                PQclear(r);
                return STORE_UNAVAILABLE;
            }
            PQclear(r);
        }
        if (ps->state == PGS_LISTENING &&
            !pg_store_wait(ps->conn, f == 1, deadline))
            goto pending;
    }
    if (ps->failing)
        log_info("postgresql: connected again");
    ps->failing = 0;
    ps->retry_at_ms = 0;
    ps->error[0] = '\0';
    /* After a lost connection, whatever changed while nobody may have
     * been listening is unknown: what the pool knows is checked afresh.  A
     * worker's first connection changes nothing: the pool was listening. */
    if (ps->was_ready) {
        ps->notified = 1;
        /* Keys added meanwhile may be missing from the filter too. */
        keyfilter_incomplete(ps->filter);
    }
    ps->was_ready = 1;
    return STORE_OK;
pending:
    if (util_now_ms() - ps->started_ms >= ps->cfg->pg_connect_timeout_ms)
        return pg_store_fail(ps, "postgresql unreachable", "connect",
            "timed out");
    return PG_PENDING;
}

static PGresult *
pg_store_exec(struct pg_store *ps, const char *what, const char *sql,
    const char *param)
{
    int64_t deadline = util_now_ms() + ps->cfg->pg_query_timeout_ms;
    PGresult *res;
    const char *why;
    int reused = ps->state == PGS_READY, attempt, broken, rc;

    for (attempt = 0; attempt < 2; attempt++) {
        if ((rc = pg_store_advance(ps, deadline)) == PG_PENDING)
            pg_store_fail(ps, "postgresql unreachable", "connect",
                "timed out");
        if (rc != STORE_OK)
            return NULL;
        res = pg_store_run(ps->conn, sql, param, deadline, &broken, &why);
        if (res != NULL && PQresultStatus(res) == PGRES_TUPLES_OK) {
            ps->failing = 0;
            return res;
        }
        /* A connection that broke while idle (PostgreSQL restarted): the
         * lookups are read-only, so one retry on a new one is safe. */
        if (res == NULL && broken && attempt == 0 && reused) {
            log_info("postgresql: the connection was closed; reconnecting");
            pg_store_close(ps);
            continue;
        }
        if (res != NULL) {
            pg_store_fail(ps, "postgresql query failed", what,
                PQresultErrorMessage(res));
            PQclear(res);
        } else
            pg_store_fail(ps, "postgresql unreachable", what, why);
        return NULL;
    }
    return NULL;
}

/*
 * Between requests: a lost connection is made again, a step at a time, so
 * that LISTEN is back soon after PostgreSQL is.  Right after a request the
 * worker only takes the steps that need no waiting; when it is idle it
 * waits up to PG_TICK_WAIT_MS for each, so a healthy server is connected
 * within one idle tick, while a server that does not answer at all costs
 * an idle worker a few milliseconds a second and a busy one nothing.
 */
void
pg_store_used(struct pg_store *ps, long long key_id)
{
    int64_t now_ms = util_now_ms();
    struct pg_used_seen *s, *slot = NULL;
    unsigned h = (unsigned)(key_id * 2654435761u) % PG_USED_SEEN;
    int i;

    /* A few probes; when all are taken, the oldest is forgotten (at
     * worst its key is written again within the minute). */
    for (i = 0; i < 8; i++) {
        s = &ps->seen[(h + (unsigned)i) % PG_USED_SEEN];
        if (s->id == key_id) {
            if (now_ms - s->at_ms < PG_USED_EVERY_MS)
                return;
            slot = s;
            break;
        }
        if (slot == NULL || s->id == 0 ||
            (slot->id != 0 && s->at_ms < slot->at_ms))
            slot = s;
    }
    if (ps->nused == PG_USED_PENDING)
        return;                 /* full: it comes again with its next use */
    slot->id = key_id;
    slot->at_ms = now_ms;
    ps->used[ps->nused++] = key_id;
}

/*
 * Writes last_used_at of the keys queued, in one statement, on a ready
 * connection, at most once per PG_USED_WRITE_MS.  A failure keeps the
 * batch for the next time (and is handled as any failed query: the
 * connection is remade between requests).
 */
static void
pg_store_write_used(struct pg_store *ps)
{
    char ids[PG_USED_PENDING * 21 + 3];
    size_t used = 0;
    PGresult *res;
    int i;

    ids[used++] = '{';
    for (i = 0; i < ps->nused; i++)
        used += (size_t)snprintf(ids + used, sizeof(ids) - used, "%s%lld",
            i > 0 ? "," : "", ps->used[i]);
    snprintf(ids + used, sizeof(ids) - used, "}");
    ps->used_write_at_ms = util_now_ms() + PG_USED_WRITE_MS;
    if ((res = pg_store_exec(ps, "last_used_at", sql_used, ids)) == NULL)
        return;
    PQclear(res);
    ps->nused = 0;
}

/* Whether process pid still runs (a builder of the key filter). */
static int
pg_store_pid_alive(int32_t pid)
{
    return kill((pid_t)pid, 0) == 0 || errno != ESRCH;
}

/*
 * Reads the hash of every active key into the key filter, a row at a time
 * (libpq's single-row mode: the client's memory does not grow with the
 * keys), within PG_FILTER_BUILD_MS.  Returns 1 when every row was read.
 * A failure or a timeout drops the connection: a query may still be
 * running on it.
 */
static int
pg_store_filter_read(struct pg_store *ps)
{
    int64_t deadline = util_now_ms() + PG_FILTER_BUILD_MS;
    PGresult *r;
    long n = 0, bad = 0;
    int ok = 0, f;

    if (!PQsendQuery(ps->conn, sql_active_keys) ||
        !PQsetSingleRowMode(ps->conn))
        goto fail;
    while ((f = PQflush(ps->conn)) == 1)
        if (!pg_store_wait(ps->conn, 1, deadline))
            goto fail;
    if (f == -1)
        goto fail;
    for (;;) {
        if (!PQconsumeInput(ps->conn))
            goto fail;
        while (!PQisBusy(ps->conn)) {
            if ((r = PQgetResult(ps->conn)) == NULL) {
                if (ok)
                    log_info("key filter: %ld active keys read", n);
                else
                    pg_store_fail(ps, "postgresql unreachable",
                        "key filter", "no result");
                if (bad > 0)
                    log_warn("key filter: %ld key hashes are not 64 hex "
                        "digits", bad);
                return ok;
            }
            if (PQresultStatus(r) == PGRES_SINGLE_TUPLE) {
                n++;
                if (keyfilter_add_hex(ps->filter, PQgetvalue(r, 0, 0)) == -1)
                    bad++;
            } else if (PQresultStatus(r) == PGRES_TUPLES_OK)
                ok = 1;
            else {
                pg_store_fail(ps, "postgresql unreachable", "key filter",
                    PQresultErrorMessage(r));
                PQclear(r);
                return 0;
            }
            PQclear(r);
        }
        if (!pg_store_wait(ps->conn, 0, deadline)) {
            pg_store_fail(ps, "postgresql unreachable", "key filter",
                "timed out");
            return 0;
        }
    }
fail:
    pg_store_fail(ps, "postgresql unreachable", "key filter",
        PQerrorMessage(ps->conn));
    return 0;
}

void
pg_store_tick(struct pg_store *ps, int idle)
{
    int32_t pid;

    if (ps->state != PGS_READY)
        pg_store_advance(ps, idle ? util_now_ms() + PG_TICK_WAIT_MS : 0);
    else if (ps->nused > 0 && util_now_ms() >= ps->used_write_at_ms)
        pg_store_write_used(ps);
    else if (ps->filter != NULL && !keyfilter_complete(ps->filter) &&
        keyfilter_claim(ps->filter, pid = (int32_t)getpid(), util_now_ms(),
        pg_store_pid_alive))
        keyfilter_release(ps->filter, pid, pg_store_filter_read(ps),
            util_now_ms());
}

int
pg_store_key(struct pg_store *ps, const char *hash, struct key_info *out)
{
    PGresult *res;

    memset(out, 0, sizeof(*out));
    if ((res = pg_store_exec(ps, "key lookup", sql_key, hash)) == NULL)
        return STORE_UNAVAILABLE;
    if (PQntuples(res) == 1) {
        out->found = 1;
        out->key_id = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        util_copy(out->key_prefix, sizeof(out->key_prefix),
            PQgetvalue(res, 0, 1));
        util_copy(out->tenant_id, sizeof(out->tenant_id),
            PQgetvalue(res, 0, 2));
        out->admin = strcmp(PQgetvalue(res, 0, 3), "admin") == 0;
        out->revoked = strcmp(PQgetvalue(res, 0, 4), "active") != 0;
        out->suspended = strcmp(PQgetvalue(res, 0, 5), "active") != 0;
        util_copy(out->tenant_name, sizeof(out->tenant_name),
            PQgetvalue(res, 0, 6));
        out->counter_budget = strtoll(PQgetvalue(res, 0, 7), NULL, 10);
    }
    PQclear(res);
    return STORE_OK;
}

int
pg_store_tenant(struct pg_store *ps, const char *name, struct key_info *out)
{
    PGresult *res;

    memset(out, 0, sizeof(*out));
    if ((res = pg_store_exec(ps, "tenant lookup", sql_tenant, name)) == NULL)
        return STORE_UNAVAILABLE;
    if (PQntuples(res) == 1) {
        out->found = 1;
        util_copy(out->tenant_id, sizeof(out->tenant_id),
            PQgetvalue(res, 0, 0));
        out->suspended = strcmp(PQgetvalue(res, 0, 1), "active") != 0;
        util_copy(out->tenant_name, sizeof(out->tenant_name), name);
        out->counter_budget = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
    }
    PQclear(res);
    return STORE_OK;
}

/* Limit names go into RateLimit headers as sf-strings and into JSON: keep
 * them to a safe alphabet. */
static void
limit_name(char *dst, size_t size, const char *src)
{
    size_t i;

    util_copy(dst, size, *src ? src : "default");
    for (i = 0; dst[i] != '\0'; i++)
        if (!validate_limit_name_char((unsigned char)dst[i]))
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

    if ((res = pg_store_exec(ps, "rules lookup", sql_rules, tenant_id)) ==
        NULL)
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
                /* Never a part of the rules: what the rest would deny
                 * would be let through.  The schema refuses this many
                 * (schema/004_rule_bound.sql); decide.c answers 503. */
                log_error("tenant %s has more than %d enabled rules; every "
                    "check of it is answered 503 until some are removed",
                    tenant_id, RL_MAX_RULES);
                tr->too_many = 1;
                break;
            }
            rule = &tr->rules[tr->n++];
            rule->id = rule_id;
            util_copy(rule->pattern, sizeof(rule->pattern),
                PQgetvalue(res, i, 1));
            rule->priority = atoi(PQgetvalue(res, i, 2));
            rule->shadow = PQgetvalue(res, i, 3)[0] == 't';
            rule->fail_open = strcmp(PQgetvalue(res, i, 4), "open") == 0;
            rule->per_route = strcmp(PQgetvalue(res, i, 5), "route") == 0;
            rule->always = PQgetvalue(res, i, 6)[0] == 't';
        }
        if (rule->nlimits == RL_MAX_LIMITS) {
            log_error("rule %lld has more than %d limits; the checks it "
                "takes part in are answered 503", rule->id, RL_MAX_LIMITS);
            rule->broken = 1;
            continue;
        }
        l = &rule->limits[rule->nlimits];
        l->id = strtoll(PQgetvalue(res, i, 7), NULL, 10);
        limit_name(l->name, sizeof(l->name), PQgetvalue(res, i, 8));
        l->algorithm = algo_parse(PQgetvalue(res, i, 9));
        l->limit_count = strtoll(PQgetvalue(res, i, 10), NULL, 10);
        l->window_seconds = strtoll(PQgetvalue(res, i, 11), NULL, 10);
        l->bucket_capacity = strtoll(PQgetvalue(res, i, 12), NULL, 10);
        l->refill_rate = strtod(PQgetvalue(res, i, 13), NULL);
        l->period_us = strtoll(PQgetvalue(res, i, 14), NULL, 10);
        l->burst = strtoll(PQgetvalue(res, i, 15), NULL, 10);
        l->calendar = algo_calendar_parse(PQgetvalue(res, i, 16));
        l->count = algo_count_parse(PQgetvalue(res, i, 17));
        if (!algo_limit_valid(l)) {
            log_error("limit %lld of rule %lld: unknown algorithm \"%s\" "
                "or calendar; the checks the rule takes part in are "
                "answered 503", l->id, rule->id, PQgetvalue(res, i, 9));
            rule->broken = 1;
            continue;
        }
        rule->nlimits++;
    }
    PQclear(res);
    *out = tr;
    return STORE_OK;
}

/*
 * Notes what one notification names (schema/005_notify_changes.sql):
 * "api_keys:TENANT:HASH:STATUS" a key, "rules:TENANT" and
 * "limits:TENANT:RULE" a tenant's rules; anything else (a tenant's own
 * row, a payload from an older schema) may change anything: 0 then.
 * A key's hash joins the key filter while the key is active.
 */
static int
pg_store_note(struct pg_store *ps, const char *payload,
    struct store_change *c)
{
    const char *p, *end;

    memset(c, 0, sizeof(*c));
    if (strncmp(payload, "api_keys:", 9) == 0) {
        if ((p = strchr(payload + 9, ':')) == NULL ||
            (end = strchr(p + 1, ':')) == NULL ||
            util_unhex(p + 1, (size_t)(end - p - 1), c->key,
            sizeof(c->key)) == -1)
            return 0;
        if (strcmp(end + 1, "active") == 0)
            keyfilter_add(ps->filter, c->key);
        c->kind = STORE_CHANGE_KEY;
        return 1;
    }
    if (strncmp(payload, "rules:", 6) == 0)
        p = payload + 6;
    else if (strncmp(payload, "limits:", 7) == 0)
        p = payload + 7;
    else
        return 0;
    if (strlen(p) < RL_UUID_LEN || (p[RL_UUID_LEN] != '\0' &&
        p[RL_UUID_LEN] != ':'))
        return 0;
    memcpy(c->tenant, p, RL_UUID_LEN);
    c->tenant[RL_UUID_LEN] = '\0';
    c->kind = STORE_CHANGE_TENANT;
    return 1;
}

int
pg_store_poll(struct pg_store *ps, struct store_change *out, int max)
{
    PGnotify *n;
    int count = ps->notified ? -1 : 0;

    ps->notified = 0;
    if (ps->state != PGS_READY)
        return count;
    if ((ps->watched != ps->serial || ps->readable) &&
        PQconsumeInput(ps->conn) == 0) {
        /* The connection broke; the next query reconnects.  The caches
         * stay: they are what keeps known keys working during an outage,
         * and they are dropped once a new connection is made. */
        pg_store_close(ps);
        return count;
    }
    ps->readable = 0;
    /* Also what a query's answer brought along, already read.  Every
     * notification is taken off the connection, even when count already
     * says "anything": none may wait for the next request. */
    while ((n = PQnotifies(ps->conn)) != NULL) {
        log_debug("postgresql: change notified (%s)", n->extra);
        if (count >= 0 && (count == max ||
            !pg_store_note(ps, n->extra, &out[count])))
            count = -1;
        else if (count >= 0)
            count++;
        else if (strncmp(n->extra, "api_keys:", 9) == 0) {
            struct store_change c;

            pg_store_note(ps, n->extra, &c);    /* the key filter */
        }
        PQfreemem(n);
    }
    return count;
}

int
pg_store_socket(const struct pg_store *ps, unsigned *serial)
{
    *serial = ps->serial;
    return ps->state == PGS_READY ? PQsocket(ps->conn) : -1;
}

void
pg_store_watch(struct pg_store *ps, unsigned serial)
{
    ps->watched = serial;
}

void
pg_store_readable(struct pg_store *ps)
{
    ps->readable = 1;
}

int
pg_store_ready(struct pg_store *ps)
{
    PGresult *res = pg_store_exec(ps, "SELECT 1", "SELECT 1", NULL);

    PQclear(res);
    return res != NULL ? STORE_OK : STORE_UNAVAILABLE;
}
