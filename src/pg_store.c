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
 * A server that answers, but slowly (a lock, a loaded machine), gives up
 * a statement by itself first: every connection runs with
 * statement_timeout at half of pg_query_timeout_ms (pg_store_statement_ms),
 * and a statement it cancels fails alone while the connection stays, and
 * with it the pool's key filter (a connection made again marks the filter
 * incomplete, see pg_store_advance; doc/design.md, "libpq").
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
 * A server that answers but refuses what the service needs is told apart
 * from one that is down: a wrong password, a missing role or database, a
 * schema that was never migrated or is older than this build, missing
 * grants.  The connect checks the schema and the grants in the same round
 * trip as LISTEN (sql_check, from the catalog: no table is read), then,
 * when schema_migrations may be read, its version.  Such a failure is
 * logged once, with its fix, and makes /health/ready answer 503
 * ("postgresql misconfigured: ...") instead of "degraded"; requests are
 * answered as in an outage (what the pool knows, else a fast 503).
 * pg_store_selftest() runs the same checks for ratelimit-fcgi -C.
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

#include "pg_store.h"

#define PG_BACKOFF_MS 500
#define PG_MISCONFIG_BACKOFF_MS 2000    /* after a misconfiguration */
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
 * (schema/001_init.sql).  The self-test prepares sql_used; the worker
 * sends the same UPDATE with the ids written in (whole numbers of its
 * own) as a simple query (pg_store_write_used), which the connection's
 * statement_timeout bounds like every other statement. */
#define SQL_USED_UPDATE \
    "UPDATE api_keys SET last_used_at = now() WHERE id = ANY "
static const char sql_used[] = SQL_USED_UPDATE "($1::bigint[])";
static const char sql_used_head[] = SQL_USED_UPDATE "('{";
static const char sql_used_tail[] = "}'::bigint[])";

/* The key filter's rows (keyfilter.c), read within PG_FILTER_BUILD_MS:
 * about 1 s a million keys here.  The read may take longer than the
 * connection's statement_timeout, so it lifts it for itself (and puts it
 * back), in the same round trip. */
#define PG_FILTER_BUILD_MS 10000
#define SQL_ACTIVE_KEYS "SELECT key_hash FROM api_keys WHERE status = 'active'"
static const char sql_active_keys[] = SQL_ACTIVE_KEYS;
static const char sql_filter_read[] =
    "SET statement_timeout = %d; " SQL_ACTIVE_KEYS "; "
    "SET statement_timeout = %ld";

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

/*
 * What the service needs of the schema, from the catalog (no privilege on
 * the tables is needed to ask): the tables it reads that are missing, those
 * it may not read, whether it may write api_keys.last_used_at, whether
 * schema_migrations exists and may be read, and the role.  Objects are
 * found as the service's queries find them (search_path).
 */
#define PG_TABLES "'{tenants,api_keys,rules,limits}'::text[]"
#define PG_SQL_CHECK \
    "SELECT array_to_string(ARRAY(SELECT t FROM unnest(" PG_TABLES ") t " \
    "WHERE to_regclass(t) IS NULL), ', '), " \
    "array_to_string(ARRAY(SELECT t FROM unnest(" PG_TABLES ") t " \
    "WHERE NOT has_table_privilege(to_regclass(t), 'SELECT')), ', '), " \
    "coalesce(has_column_privilege(to_regclass('api_keys'), " \
    "'last_used_at', 'UPDATE'), true), " \
    "to_regclass('schema_migrations') IS NOT NULL, " \
    "coalesce(has_table_privilege(to_regclass('schema_migrations'), " \
    "'SELECT'), false), current_user"

static const char sql_listen_check[] =
    "SET statement_timeout = %ld; LISTEN ratelimit_changes; " PG_SQL_CHECK;

static const char sql_version[] =
    "SELECT coalesce(max(version), 0) FROM schema_migrations";

/* A misconfiguration: a short reason (for /health/ready: no address) and
 * its fix (for the log and the self-test). */
struct pg_problem {
    char reason[128];
    char fix[320];
};

/* The schema version this build needs: its newest embedded migration. */
static int
pg_store_schema_needed(void)
{
    const struct embedded_migration *m;
    int v = 0;

    for (m = embedded_migrations; m->name != NULL; m++)
        v = m->version;
    return v;
}

/*
 * Tells a misconfiguration from an outage, by the SQLSTATE of a failed
 * query or, for a failed connect (libpq gives no SQLSTATE then), by the
 * server's message.  c names the role and the database in the fix (may be
 * NULL).  Returns 1 with p filled, or 0 when it is no misconfiguration.
 */
static int
pg_store_classify(PGconn *c, const char *state, const char *msg,
    struct pg_problem *p)
{
    const char *role = c != NULL && PQuser(c) != NULL && *PQuser(c) ?
        PQuser(c) : "the service's role";
    const char *db = c != NULL && PQdb(c) != NULL && *PQdb(c) ? PQdb(c) :
        "ratelimit";
    const char *pd;

    if (state == NULL)
        state = "";
    if (msg == NULL)
        msg = "";
    if (strcmp(state, "28P01") == 0 ||
        strstr(msg, "password authentication failed") != NULL ||
        strstr(msg, "no password supplied") != NULL ||
        strstr(msg, "authentication failed for user") != NULL) {
        snprintf(p->reason, sizeof(p->reason), "authentication failed");
        snprintf(p->fix, sizeof(p->fix), "check the password in "
            "pg_conninfo (or PGPASSWORD, ~/.pgpass) and the server's "
            "pg_hba.conf line for role %s", role);
    } else if (strcmp(state, "3D000") == 0 ||
        (strstr(msg, "database \"") != NULL &&
        strstr(msg, "does not exist") != NULL)) {
        snprintf(p->reason, sizeof(p->reason), "database does not exist");
        snprintf(p->fix, sizeof(p->fix), "create the database (CREATE "
            "DATABASE %s), or name the right one with dbname= in "
            "pg_conninfo", db);
    } else if (strstr(msg, "role \"") != NULL &&
        strstr(msg, "does not exist") != NULL) {
        snprintf(p->reason, sizeof(p->reason), "role does not exist");
        snprintf(p->fix, sizeof(p->fix), "create the role (CREATE ROLE %s "
            "LOGIN), or name the right one with user= in pg_conninfo", role);
    } else if (strstr(msg, "no pg_hba.conf entry") != NULL) {
        snprintf(p->reason, sizeof(p->reason), "refused by pg_hba.conf");
        snprintf(p->fix, sizeof(p->fix), "add a line for role %s and "
            "database %s to the server's pg_hba.conf", role, db);
    } else if (strstr(msg, "is not permitted to log in") != NULL) {
        snprintf(p->reason, sizeof(p->reason), "role may not log in");
        snprintf(p->fix, sizeof(p->fix), "ALTER ROLE %s LOGIN", role);
    } else if (strcmp(state, "42P01") == 0) {
        snprintf(p->reason, sizeof(p->reason), "schema missing");
        snprintf(p->fix, sizeof(p->fix), "run ratelimitctl migrate");
    } else if (strcmp(state, "42703") == 0 || strcmp(state, "42883") == 0) {
        snprintf(p->reason, sizeof(p->reason), "schema out of date");
        snprintf(p->fix, sizeof(p->fix), "run ratelimitctl migrate");
    } else if (strstr(msg, "permission denied for database") != NULL) {
        snprintf(p->reason, sizeof(p->reason), "permission denied for the "
            "database");
        snprintf(p->fix, sizeof(p->fix), "GRANT CONNECT ON DATABASE %s TO "
            "%s", db, role);
    } else if (strcmp(state, "42501") == 0) {
        /* "permission denied for table tenants": names no address. */
        pd = strstr(msg, "permission denied");
        snprintf(p->reason, sizeof(p->reason), "%.*s", (int)strcspn(pd !=
            NULL ? pd : "permission denied", "\n"), pd != NULL ? pd :
            "permission denied");
        snprintf(p->fix, sizeof(p->fix), "GRANT SELECT ON tenants, api_keys, "
            "rules, limits TO %s; GRANT UPDATE (last_used_at) ON api_keys "
            "TO %s", role, role);
    } else
        return 0;
    return 1;
}

/*
 * Reads the row of PG_SQL_CHECK into at most max problems.  *versioned
 * says whether schema_migrations may be read (then its version is worth
 * asking); with strict, a schema_migrations that is missing or may not be
 * read is a problem too (the self-test: the version cannot be checked).
 * Returns how many problems.
 */
static int
pg_store_check_row(const PGresult *r, struct pg_problem *p, int max,
    int strict, int *versioned)
{
    const char *missing, *denied, *role;
    int n = 0, has_migrations;

    *versioned = 0;
    if (PQntuples(r) != 1 || PQnfields(r) != 6)
        return 0;
    missing = PQgetvalue(r, 0, 0);
    denied = PQgetvalue(r, 0, 1);
    has_migrations = PQgetvalue(r, 0, 3)[0] == 't';
    role = PQgetvalue(r, 0, 5);
    if (*missing != '\0') {
        /* All four, or some (a schema made by hand, say). */
        if (strcmp(missing, "tenants, api_keys, rules, limits") == 0)
            snprintf(p[n].reason, sizeof(p[n].reason), "schema missing");
        else
            snprintf(p[n].reason, sizeof(p[n].reason), "schema incomplete "
                "(no table %s)", missing);
        snprintf(p[n].fix, sizeof(p[n].fix), "run ratelimitctl migrate");
        return 1;
    }
    if (*denied != '\0' && n < max) {
        snprintf(p[n].reason, sizeof(p[n].reason), "permission denied for "
            "table %s", denied);
        snprintf(p[n].fix, sizeof(p[n].fix), "GRANT SELECT ON %s TO %s",
            denied, role);
        n++;
    }
    if (PQgetvalue(r, 0, 2)[0] != 't' && n < max) {
        snprintf(p[n].reason, sizeof(p[n].reason), "permission denied to "
            "update api_keys.last_used_at");
        snprintf(p[n].fix, sizeof(p[n].fix), "GRANT UPDATE (last_used_at) "
            "ON api_keys TO %s", role);
        n++;
    }
    if (PQgetvalue(r, 0, 4)[0] == 't')
        *versioned = 1;
    else if (strict && n < max) {
        if (!has_migrations) {
            snprintf(p[n].reason, sizeof(p[n].reason), "no table "
                "schema_migrations: the schema was not made by ratelimitctl "
                "migrate");
            snprintf(p[n].fix, sizeof(p[n].fix), "run ratelimitctl migrate");
        } else {
            snprintf(p[n].reason, sizeof(p[n].reason), "permission denied "
                "for table schema_migrations: the schema version cannot be "
                "checked");
            snprintf(p[n].fix, sizeof(p[n].fix), "GRANT SELECT ON "
                "schema_migrations TO %s", role);
        }
        n++;
    }
    return n;
}

/* Compares the version sql_version read with this build's.  Returns 1
 * with p filled when the schema is older, else 0. */
static int
pg_store_check_version(const PGresult *r, struct pg_problem *p)
{
    int have, need = pg_store_schema_needed();

    if (PQntuples(r) != 1)
        return 0;
    have = atoi(PQgetvalue(r, 0, 0));
    if (have >= need)
        return 0;
    snprintf(p->reason, sizeof(p->reason), "schema version %d, this build "
        "needs %d", have, need);
    snprintf(p->fix, sizeof(p->fix), "run ratelimitctl migrate");
    return 1;
}

void
pg_store_init(struct pg_store *ps, const struct rl_config *cfg)
{
    memset(ps, 0, sizeof(*ps));
    ps->cfg = cfg;
}

/*
 * The connection's statement_timeout: half the time a worker waits for an
 * answer (at least 10 ms), so that a statement PostgreSQL is slow to run
 * is given up by PostgreSQL, with the connection still usable, before the
 * worker's own deadline would drop the connection.
 */
static long
pg_store_statement_ms(const struct pg_store *ps)
{
    return ps->cfg->pg_query_timeout_ms / 2 > 10 ?
        ps->cfg->pg_query_timeout_ms / 2 : 10;
}

/* Whether r is the error of a statement cancelled by statement_timeout. */
static int
pg_store_cancelled(const PGresult *r)
{
    const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);

    return state != NULL && strcmp(state, "57014") == 0;
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
    ps->misconfigured = 0;
    ps->retry_at_ms = util_now_ms() + PG_BACKOFF_MS;
    return STORE_UNAVAILABLE;
}

/*
 * Records a misconfiguration: /health/ready shows "postgresql
 * misconfigured: " and p's reason; the log has the reason, the server's
 * message (detail) and the fix, once for as long as the reason stays the
 * same.  The connection is dropped and a longer back-off starts.  Returns
 * STORE_UNAVAILABLE.
 */
static int
pg_store_misconfig(struct pg_store *ps, const struct pg_problem *p,
    const char *detail)
{
    char line[256];

    snprintf(line, sizeof(line), "%s", detail != NULL && *detail ? detail :
        "");
    line[strcspn(line, "\n")] = '\0';
    if (strcmp(ps->logged, p->reason) != 0) {
        log_error("postgresql misconfigured: %s%s%s%s; fix: %s", p->reason,
            *line ? " (" : "", line, *line ? ")" : "", p->fix);
        util_copy(ps->logged, sizeof(ps->logged), p->reason);
    }
    pg_store_close(ps);
    snprintf(ps->error, sizeof(ps->error), "postgresql misconfigured: %s",
        p->reason);
    ps->failing = 1;
    ps->misconfigured = 1;
    ps->retry_at_ms = util_now_ms() + PG_MISCONFIG_BACKOFF_MS;
    return STORE_UNAVAILABLE;
}

/* A failed connect: a misconfiguration when the server's message says so,
 * else "postgresql unreachable". */
static int
pg_store_fail_connect(struct pg_store *ps, const char *what)
{
    struct pg_problem p;
    const char *msg = PQerrorMessage(ps->conn);

    if (pg_store_classify(ps->conn, NULL, msg, &p))
        return pg_store_misconfig(ps, &p, msg);
    return pg_store_fail(ps, "postgresql unreachable", what, msg);
}

/* A query PostgreSQL answered with an error: a misconfiguration by its
 * SQLSTATE (missing schema, permission denied), else reason. */
static int
pg_store_fail_result(struct pg_store *ps, const char *reason,
    const char *what, const PGresult *r)
{
    struct pg_problem p;

    if (pg_store_classify(ps->conn, PQresultErrorField(r, PG_DIAG_SQLSTATE),
        PQresultErrorMessage(r), &p))
        return pg_store_misconfig(ps, &p, PQresultErrorMessage(r));
    return pg_store_fail(ps, reason, what, PQresultErrorMessage(r));
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
 * Sends sql (with at most one parameter; without one, as a simple query,
 * which may hold several statements) and collects its result by the
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
    if (param != NULL ? !PQsendQueryParams(c, sql, 1, NULL, &param, NULL,
        NULL, 0) : !PQsendQuery(c, sql)) {
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
    char sql[sizeof(sql_listen_check) + 24];
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
            return pg_store_fail_connect(ps, "connect");
    }
    while (ps->state == PGS_CONNECTING) {
        if (ps->polling == PGRES_POLLING_FAILED)
            return pg_store_fail_connect(ps, "connect");
        if (ps->polling == PGRES_POLLING_OK) {
            PQsetnonblocking(ps->conn, 1);
            PQsetNoticeProcessor(ps->conn, pg_store_notice, NULL);
            /* statement_timeout, LISTEN and the schema check, in one
             * round trip. */
            snprintf(sql, sizeof(sql), sql_listen_check,
                pg_store_statement_ms(ps));
            if (!PQsendQuery(ps->conn, sql))
                return pg_store_fail(ps, "postgresql unreachable", "LISTEN",
                    PQerrorMessage(ps->conn));
            ps->state = PGS_LISTENING;
            ps->result_ok = 0;
            ps->check_step = 0;
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
                if (ps->check_step == 1) {
                    /* schema_migrations may be read: its version. */
                    if (!PQsendQuery(ps->conn, sql_version) ||
                        (f = PQflush(ps->conn)) == -1)
                        return pg_store_fail(ps, "postgresql unreachable",
                            "schema version", PQerrorMessage(ps->conn));
                    ps->check_step = 2;
                    ps->result_ok = 0;
                    continue;
                }
                ps->state = PGS_READY;
                break;
            }
            if (PQresultStatus(r) == PGRES_TUPLES_OK) {
                struct pg_problem p;
                int versioned = 0, bad;

                bad = ps->check_step == 0 ?
                    pg_store_check_row(r, &p, 1, 0, &versioned) :
                    pg_store_check_version(r, &p);
                PQclear(r);
                if (bad)
                    return pg_store_misconfig(ps, &p, NULL);
                if (ps->check_step == 0 && versioned)
                    ps->check_step = 1;
                ps->result_ok = 1;
                continue;
            }
            if (PQresultStatus(r) != PGRES_COMMAND_OK) {
                pg_store_fail_result(ps, "postgresql unreachable", "LISTEN",
                    r);
                PQclear(r);
                return STORE_UNAVAILABLE;
            }
            PQclear(r);
        }
        if (ps->state == PGS_LISTENING &&
            !pg_store_wait(ps->conn, f == 1, deadline))
            goto pending;
    }
    if (ps->logged[0] != '\0')
        log_info("postgresql: connected; no longer misconfigured (%s)",
            ps->logged);
    else if (ps->failing)
        log_info("postgresql: connected again");
    ps->failing = 0;
    ps->misconfigured = 0;
    ps->logged[0] = '\0';
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

/*
 * Logs a statement PostgreSQL gave up (what: which), at most once a second
 * per worker, with the number of those not logged since: a lock held for
 * a minute must not write a line for every request it slows.
 */
static void
pg_store_slow(struct pg_store *ps, const char *what)
{
    int64_t now_ms = util_now_ms();
    char more[64];

    if (ps->counters != NULL)
        COUNT(ps, pg_statement_timeouts);
    if (ps->slow_logged_ms != 0 && now_ms - ps->slow_logged_ms < 1000) {
        ps->slow_quiet++;
        return;
    }
    more[0] = '\0';
    if (ps->slow_quiet > 0)
        snprintf(more, sizeof(more), "; %lu more since the last such line",
            ps->slow_quiet);
    log_warn("postgresql %s: not answered within %ld ms (statement_timeout), "
        "the connection kept%s", what, pg_store_statement_ms(ps), more);
    ps->slow_logged_ms = now_ms;
    ps->slow_quiet = 0;
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
        if (res != NULL && pg_store_cancelled(res)) {
            /* PostgreSQL gave up the statement (statement_timeout): this
             * request goes without, the connection stays. */
            pg_store_slow(ps, what);
            PQclear(res);
            return NULL;
        }
        if (res != NULL) {
            pg_store_fail_result(ps, "postgresql query failed", what, res);
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
    char sql[sizeof(sql_used_head) + PG_USED_PENDING * 21 +
        sizeof(sql_used_tail)];
    const char *why;
    size_t used;
    PGresult *res;
    int i, broken;

    /* A write slowed down (a loaded machine, a lock) is given up by
     * PostgreSQL alone (statement_timeout), before the worker's own
     * deadline would drop the connection. */
    used = (size_t)snprintf(sql, sizeof(sql), "%s", sql_used_head);
    for (i = 0; i < ps->nused; i++)
        used += (size_t)snprintf(sql + used, sizeof(sql) - used, "%s%lld",
            i > 0 ? "," : "", ps->used[i]);
    snprintf(sql + used, sizeof(sql) - used, "%s", sql_used_tail);
    ps->used_write_at_ms = util_now_ms() + PG_USED_WRITE_MS;
    res = pg_store_run(ps->conn, sql, NULL,
        util_now_ms() + ps->cfg->pg_query_timeout_ms, &broken, &why);
    if (res == NULL) {
        pg_store_fail(ps, "postgresql unreachable", "last_used_at", why);
        return;
    }
    if (PQresultStatus(res) == PGRES_COMMAND_OK)
        ps->nused = 0;
    else if (pg_store_cancelled(res)) {
        /* Cancelled by statement_timeout: the batch waits for the next
         * write, a second later. */
        if (ps->counters != NULL)
            COUNT(ps, pg_statement_timeouts);
        log_info("postgresql last_used_at: not written within %ld ms; "
            "tried again with the next batch", pg_store_statement_ms(ps));
    }
    else
        pg_store_fail_result(ps, "postgresql query failed", "last_used_at",
            res);
    PQclear(res);
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
    int64_t start = util_now_ms(), deadline = start + PG_FILTER_BUILD_MS;
    char sql[sizeof(sql_filter_read) + 24];
    PGresult *r;
    long n = 0, bad = 0;
    int ok = 0, f;

    snprintf(sql, sizeof(sql), sql_filter_read, PG_FILTER_BUILD_MS,
        pg_store_statement_ms(ps));
    if (!PQsendQuery(ps->conn, sql) || !PQsetSingleRowMode(ps->conn))
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
                    log_info("key filter: %ld active keys read in %lld ms",
                        n, (long long)(util_now_ms() - start));
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
            else if (PQresultStatus(r) != PGRES_COMMAND_OK) {
                /* (COMMAND_OK: the two SETs around the SELECT.) */
                pg_store_fail_result(ps, "postgresql unreachable",
                    "key filter", r);
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

/* The service's statements, prepared (not run) by the self-test: a
 * column they name that the schema lacks fails here. */
static const char *const pg_statements[] = {
    sql_key, sql_tenant, sql_rules, sql_used, sql_active_keys, NULL,
};

/* Prints one self-test failure; returns 1. */
static int
pg_store_report(FILE *out, const char *prefix, const struct pg_problem *p,
    const char *detail)
{
    char line[256];

    snprintf(line, sizeof(line), "%s", detail != NULL ? detail : "");
    line[strcspn(line, "\n")] = '\0';
    fprintf(out, "%spostgresql misconfigured: %s%s%s%s; fix: %s\n", prefix,
        p->reason, *line ? " (" : "", line, *line ? ")" : "", p->fix);
    return 1;
}

int
pg_store_selftest(const struct rl_config *cfg, FILE *out, const char *prefix)
{
    const char *keys[] = { "connect_timeout", "application_name", "dbname",
        NULL };
    const char *vals[4];
    const char *const *sql;
    struct pg_problem p[4];
    char timeout[32], line[256];
    long seconds = (cfg->pg_connect_timeout_ms + 999) / 1000;
    PGconn *c;
    PGresult *r;
    int bad = 0, versioned = 0, i, n;

    snprintf(timeout, sizeof(timeout), "%ld", seconds < 1 ? 1 : seconds);
    vals[0] = timeout;
    vals[1] = "ratelimit-fcgi";
    vals[2] = cfg->pg_conninfo;
    vals[3] = NULL;
    if ((c = PQconnectdbParams(keys, vals, 1)) == NULL) {
        fprintf(out, "%spostgresql: out of memory\n", prefix);
        return 1;
    }
    if (PQstatus(c) != CONNECTION_OK) {
        if (pg_store_classify(c, NULL, PQerrorMessage(c), &p[0]))
            bad = pg_store_report(out, prefix, &p[0], PQerrorMessage(c));
        else {
            snprintf(line, sizeof(line), "%s", PQerrorMessage(c));
            line[strcspn(line, "\n")] = '\0';
            fprintf(out, "%spostgresql unreachable (%s); fix: check "
                "pg_conninfo and that the server runs and listens there\n",
                prefix, line);
            bad = 1;
        }
        PQfinish(c);
        return bad;
    }
    r = PQexec(c, PG_SQL_CHECK);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        if (!pg_store_classify(c, PQresultErrorField(r, PG_DIAG_SQLSTATE),
            PQresultErrorMessage(r), &p[0])) {
            snprintf(p[0].reason, sizeof(p[0].reason), "the schema check "
                "failed");
            snprintf(p[0].fix, sizeof(p[0].fix), "see the message");
        }
        bad += pg_store_report(out, prefix, &p[0], PQresultErrorMessage(r));
        PQclear(r);
        PQfinish(c);
        return bad;
    }
    n = pg_store_check_row(r, p, 4, 1, &versioned);
    /* With tables missing nothing else is worth saying. */
    if (n == 1 && strcmp(p[0].fix, "run ratelimitctl migrate") == 0 &&
        strncmp(p[0].reason, "schema", 6) == 0) {
        PQclear(r);
        PQfinish(c);
        return pg_store_report(out, prefix, &p[0], NULL);
    }
    PQclear(r);
    for (i = 0; i < n; i++)
        bad += pg_store_report(out, prefix, &p[i], NULL);
    if (versioned) {
        r = PQexec(c, sql_version);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            if (pg_store_classify(c, PQresultErrorField(r,
                PG_DIAG_SQLSTATE), PQresultErrorMessage(r), &p[0]))
                bad += pg_store_report(out, prefix, &p[0],
                    PQresultErrorMessage(r));
        } else if (pg_store_check_version(r, &p[0]))
            bad += pg_store_report(out, prefix, &p[0], NULL);
        PQclear(r);
    }
    /* The statements themselves (a column an older schema lacks), once
     * the schema's version is not already known to be wrong. */
    for (sql = pg_statements; bad == 0 && *sql != NULL; sql++) {
        r = PQprepare(c, "", *sql, 0, NULL);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            if (!pg_store_classify(c, PQresultErrorField(r,
                PG_DIAG_SQLSTATE), PQresultErrorMessage(r), &p[0])) {
                snprintf(p[0].reason, sizeof(p[0].reason), "a query of "
                    "the service fails");
                snprintf(p[0].fix, sizeof(p[0].fix), "see the message");
            }
            bad += pg_store_report(out, prefix, &p[0],
                PQresultErrorMessage(r));
        }
        PQclear(r);
    }
    PQfinish(c);
    return bad;
}
