/*
 * ctl_db.c -- ratelimitctl's connection to PostgreSQL, and its output.
 *
 * The configuration file gives pg_conninfo and pg_connect_timeout_ms; the
 * rest of a connection comes from libpq's PG* environment variables.  A
 * failed connect names the address, the file read (or that none was) and,
 * for a wrong password or a missing database or role, the fix; a missing
 * schema says "run ratelimitctl migrate".  The connection to Redis of the
 * counter commands is made (and checked, before any output) here too.
 * The service's log lines of the shared code are silenced: the tool's
 * user reads its own one-line messages only.
 * Statements are sent with their values as parameters, never inside the
 * SQL text.  A failing statement leaves its first line, SQLSTATE and
 * broken constraint on the struct ctl, so that a command can turn a known
 * failure (a duplicate name, say) into a message of its own and print any
 * other as it is.  The output helpers print a result as an aligned table
 * (the list commands) or as "name  value" lines (what a change made), and
 * with --json as one typed, versioned JSON object (ctl.h says how; the
 * schemas are in doc/schemas/).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <json-c/json.h>

#include "ctl.h"
#include "redis.h"


/* Notices ("relation already exists, skipping") are dropped. */
static void
ctl_db_ignore_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

/* Keeps the first line of msg as the current error. */
void
ctl_db_set_error(struct ctl *ctl, const char *msg)
{
    size_t n;

    if (msg == NULL || *msg == '\0')
        msg = "unknown database error";
    if (strncmp(msg, "ERROR:  ", 8) == 0)
        msg += 8;
    n = strcspn(msg, "\n");
    if (n >= sizeof(ctl->err))
        n = sizeof(ctl->err) - 1;
    memcpy(ctl->err, msg, n);
    ctl->err[n] = '\0';
}

void
ctl_db_set_result_error(struct ctl *ctl, const PGresult *res,
    const char *sql)
{
    const char *primary = NULL, *state = NULL, *pos = NULL, *constraint = NULL;
    long offset, line;
    const char *p;

    if (res != NULL) {
        primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
        state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        pos = PQresultErrorField(res, PG_DIAG_STATEMENT_POSITION);
        constraint = PQresultErrorField(res, PG_DIAG_CONSTRAINT_NAME);
    }
    ctl_db_set_error(ctl, primary != NULL ? primary :
        PQerrorMessage(ctl->conn));
    snprintf(ctl->sqlstate, sizeof(ctl->sqlstate), "%s", state ? state : "");
    snprintf(ctl->constraint, sizeof(ctl->constraint), "%s",
        constraint ? constraint : "");
    ctl->err_line = 0;
    if (pos != NULL && sql != NULL) {
        /* The position counts characters; the migrations are ASCII. */
        offset = strtol(pos, NULL, 10);
        line = 1;
        for (p = sql; *p != '\0' && p - sql < offset - 1; p++)
            if (*p == '\n')
                line++;
        ctl->err_line = (int)line;
    }
}

/* Which configuration the connection came from, for its errors: the
 * file read, or that none was (libpq's defaults and PG* variables). */
static const char *
ctl_db_config_read(const struct ctl *ctl)
{
    return ctl->cfg.path[0] != '\0' ? ctl->cfg.path : NULL;
}

/* Prints the current database error; returns CTL_EXIT_FAIL.  A schema
 * that is missing (SQLSTATE 42P01, a table that does not exist) or older
 * than this program (42703, a column) says what to run, and which
 * configuration's database it is. */
int
ctl_db_fail(const struct ctl *ctl)
{
    const char *path = ctl_db_config_read(ctl);

    if (strcmp(ctl->sqlstate, "42P01") == 0 ||
        strcmp(ctl->sqlstate, "42703") == 0)
        return ctl_fail("%s: the schema is %s: run '" CTL_NAME " migrate' "
            "(configuration %s%s)", ctl->err,
            strcmp(ctl->sqlstate, "42P01") == 0 ? "missing" :
            "older than this program", path != NULL ? path : "none read",
            path != NULL ? "" : ": libpq's defaults and PG* variables");
    return ctl_fail("%s", ctl->err);
}

/* Where the connection went: "host:port", or "socket DIR/.s.PGSQL.PORT"
 * for a Unix socket (libpq's host is then a directory). */
static void
ctl_db_address(const struct ctl *ctl, char *buf, size_t len)
{
    const char *host = ctl->conn != NULL ? PQhost(ctl->conn) : NULL;
    const char *port = ctl->conn != NULL ? PQport(ctl->conn) : NULL;

    if (host == NULL || *host == '\0')
        host = "localhost";
    if (port == NULL || *port == '\0')
        port = "5432";
    if (host[0] == '/' || host[0] == '@')
        snprintf(buf, len, "socket %s/.s.PGSQL.%s", host, port);
    else
        snprintf(buf, len, "%s:%s", host, port);
}

/*
 * Prints why the connection failed, naming the configuration file read
 * (or that none was) and, for the failures that are a setting's, the
 * fix.  Returns CTL_EXIT_FAIL.
 */
static int
ctl_db_connect_fail(const struct ctl *ctl)
{
    const char *path = ctl_db_config_read(ctl), *fix = NULL;
    const char *msg = ctl->err;
    char where[300];

    if (strstr(msg, "password authentication failed") != NULL ||
        strstr(msg, "no password supplied") != NULL ||
        strstr(msg, "authentication failed for user") != NULL)
        fix = "check the password in pg_conninfo, PGPASSWORD or ~/.pgpass, "
            "and the server's pg_hba.conf";
    else if (strstr(msg, "database \"") != NULL &&
        strstr(msg, "does not exist") != NULL)
        fix = "create the database (CREATE DATABASE), or name the right one "
            "with dbname= in pg_conninfo";
    else if (strstr(msg, "role \"") != NULL &&
        strstr(msg, "does not exist") != NULL)
        fix = "create the role, or name the right one with user= in "
            "pg_conninfo (or PGUSER)";
    else if (strstr(msg, "no pg_hba.conf entry") != NULL)
        fix = "add a line for this role and database to the server's "
            "pg_hba.conf";
    ctl_db_address(ctl, where, sizeof(where));
    return ctl_fail("cannot connect to PostgreSQL at %s (configuration %s%s)"
        ": %s%s%s", where, path != NULL ? path : "none read",
        path != NULL ? "" : ": libpq's defaults and PG* variables", msg,
        fix != NULL ? "; fix: " : "", fix != NULL ? fix : "");
}

/*
 * Loads the configuration and connects.  Returns 0, or CTL_EXIT_FAIL after
 * printing why.
 */
int
ctl_db_connect(struct ctl *ctl)
{
    const char *keywords[5], *values[5];
    char err[600], timeout[32];
    long seconds;

    /* The shared code (the Redis client, config.c) logs through log.c for
     * the service; the admin tool says what went wrong in its own one
     * line, so that nothing of the service's log reaches its user. */
    log_set_level(-1);
    config_defaults(&ctl->cfg);
    /* Without -c: the system's file, else the development stack's (what
     * "make run" writes in the source tree), else the defaults. */
    if (!ctl->config_given && access(ctl->config_path, F_OK) != 0 &&
        access(CTL_DEV_CONFIG, F_OK) == 0)
        ctl->config_path = CTL_DEV_CONFIG;
    if (ctl->config_given || access(ctl->config_path, F_OK) == 0) {
        if (config_load(&ctl->cfg, ctl->config_path, err, sizeof(err)) == -1)
            return ctl_fail("%s", err);
    }
    seconds = (ctl->cfg.pg_connect_timeout_ms + 999) / 1000;
    snprintf(timeout, sizeof(timeout), "%ld", seconds < 1 ? 1 : seconds);

    /* Later keywords win: a connect_timeout inside pg_conninfo overrides
     * the one derived from pg_connect_timeout_ms. */
    keywords[0] = "connect_timeout";
    values[0] = timeout;
    keywords[1] = "fallback_application_name";
    values[1] = CTL_NAME;
    keywords[2] = "dbname";
    values[2] = ctl->cfg.pg_conninfo;
    keywords[3] = NULL;
    values[3] = NULL;
    ctl->conn = PQconnectdbParams(keywords, values, 1);
    if (ctl->conn == NULL)
        return ctl_fail("out of memory");
    if (PQstatus(ctl->conn) != CONNECTION_OK) {
        ctl_db_set_error(ctl, PQerrorMessage(ctl->conn));
        return ctl_db_connect_fail(ctl);
    }
    /* "relation already exists, skipping" and the like are not news. */
    PQsetNoticeProcessor(ctl->conn, ctl_db_ignore_notice, NULL);
    return 0;
}

int
ctl_db_redis_open(struct ctl *ctl, struct redis_store *rs,
    struct rl_counters *counters)
{
    const char *argv[1] = { "PING" };
    size_t argvlen[1] = { 4 };
    const char *path = ctl_db_config_read(ctl);
    redisReply *r;

    memset(counters, 0, sizeof(*counters));
    redis_store_init(rs, &ctl->cfg, counters);
    /* Sent where a counter of the tenant "ctl" would live: any node does
     * for a PING, and a cluster or sentinel setup is looked up first. */
    r = redis_store_command(rs, "rl:{ctl}", 1, argv, argvlen);
    if (r != NULL && r->type != REDIS_REPLY_ERROR) {
        freeReplyObject(r);
        return 0;
    }
    ctl_fail("cannot connect to Redis at %s (redis_type %s, configuration "
        "%s): %s", ctl->cfg.redis, ctl->cfg.redis_type,
        path != NULL ? path : "none read: the defaults", r != NULL ?
        r->str : rs->error[0] != '\0' ? rs->error : "redis unreachable");
    if (r != NULL)
        freeReplyObject(r);
    redis_store_close(rs);
    return CTL_EXIT_FAIL;
}

/*
 * Runs one parameterized statement.  Returns its result (tuples or command
 * OK; the caller PQclear()s it), or NULL with the error kept in ctl.
 */
PGresult *
ctl_db_query(struct ctl *ctl, const char *sql, int nparams,
    const char *const *params)
{
    PGresult *res;
    ExecStatusType st;

    res = PQexecParams(ctl->conn, sql, nparams, NULL, params, NULL, NULL, 0);
    st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
        return res;
    ctl_db_set_result_error(ctl, res, NULL);
    PQclear(res);
    return NULL;
}

/* Runs a statement whose result is of no interest.  Returns 0 or -1. */
int
ctl_db_command(struct ctl *ctl, const char *sql, int nparams,
    const char *const *params)
{
    PGresult *res = ctl_db_query(ctl, sql, nparams, params);

    if (res == NULL)
        return -1;
    PQclear(res);
    return 0;
}

int
ctl_db_begin(struct ctl *ctl)
{
    return ctl_db_command(ctl, "BEGIN", 0, NULL);
}

int
ctl_db_commit(struct ctl *ctl)
{
    return ctl_db_command(ctl, "COMMIT", 0, NULL);
}

/* Abandons the open transaction, keeping the error that caused it. */
void
ctl_db_rollback(struct ctl *ctl)
{
    PGresult *res = PQexec(ctl->conn, "ROLLBACK");

    PQclear(res);
}

/*
 * Looks up a tenant by name into id (a UUID).  Returns 0, or CTL_EXIT_FAIL
 * after printing why (unknown tenant or database error).
 */
int
ctl_db_tenant_id(struct ctl *ctl, const char *name,
    char id[RL_UUID_LEN + 1])
{
    const char *params[1] = { name };
    PGresult *res;

    res = ctl_db_query(ctl, "SELECT id FROM tenants WHERE name = $1", 1,
        params);
    if (res == NULL)
        return ctl_db_fail(ctl);
    if (PQntuples(res) == 0) {
        PQclear(res);
        return ctl_fail("no tenant named \"%s\" (see '" CTL_NAME
            " tenant list')", name);
    }
    snprintf(id, RL_UUID_LEN + 1, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    return 0;
}

/*
 * The start of the commands that take a row id: parses s into id (what
 * names the argument in messages), then connects.  Returns 0, or an exit
 * status after printing why.
 */
int
ctl_db_parse_id_connect(struct ctl *ctl, const struct ctl_command *cmd,
    const char *what, const char *s, long long *id)
{
    char err[256];

    if (validate_id(what, s, id, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    return ctl_db_connect(ctl);
}

/*
 * Runs a statement for the number of rows it returns (or changes, with
 * RETURNING).  Returns that number, or -1 with the error kept in ctl.
 */
int
ctl_db_query_rows(struct ctl *ctl, const char *sql, int nparams,
    const char *const *params)
{
    PGresult *res = ctl_db_query(ctl, sql, nparams, params);
    int n;

    if (res == NULL)
        return -1;
    n = PQntuples(res);
    PQclear(res);
    return n;
}

/* ------------------------------------------------------------------ */
/* Output */

/*
 * Prints a result as a table under the given headers (one per column):
 * columns separated by two spaces, NULL shown as "-".
 */
static void
ctl_db_print_table(const PGresult *res, const char *const *headers)
{
    int ncols = PQnfields(res), nrows = PQntuples(res), r, c, last;
    size_t width[16], w;
    const char *v;

    if (ncols > 16)
        ncols = 16;
    for (c = 0; c < ncols; c++)
        width[c] = validate_display_width(headers[c]);
    for (r = 0; r < nrows; r++)
        for (c = 0; c < ncols; c++) {
            v = PQgetisnull(res, r, c) ? "-" : PQgetvalue(res, r, c);
            if ((w = validate_display_width(v)) > width[c])
                width[c] = w;
        }
    for (r = -1; r < nrows; r++) {
        /* No blanks after the last column that has something. */
        last = ncols - 1;
        while (r >= 0 && last > 0 && !PQgetisnull(res, r, last) &&
            PQgetvalue(res, r, last)[0] == '\0')
            last--;
        for (c = 0; c <= last; c++) {
            if (r < 0)
                v = headers[c];
            else
                v = PQgetisnull(res, r, c) ? "-" : PQgetvalue(res, r, c);
            fputs(v, stdout);
            if (c < last)
                printf("%*s",
                    (int)(width[c] - validate_display_width(v) + 2), "");
        }
        putchar('\n');
    }
}

/* --json: tables and fields are written as JSON instead. */
static int ctl_db_json;

void
ctl_db_set_json(int on)
{
    ctl_db_json = on;
}

int
ctl_db_is_json(void)
{
    return ctl_db_json;
}

/* A field name from a header: "LAST_USED" -> "last_used". */
static void
ctl_db_json_name(const char *header, char *out, size_t len)
{
    size_t i;

    for (i = 0; header[i] != '\0' && i + 1 < len; i++)
        out[i] = (char)tolower((unsigned char)header[i]);
    out[i] = '\0';
}

struct json_object *
ctl_db_json_doc(void)
{
    struct json_object *o = json_object_new_object();

    json_object_object_add(o, "version",
        json_object_new_int(CTL_JSON_VERSION));
    return o;
}

/* One value of a result as JSON: integers and decimals as numbers,
 * booleans as such, NULL as null, the rest as strings. */
static struct json_object *
ctl_db_json_value(const PGresult *res, int r, int c)
{
    const char *v;

    if (PQgetisnull(res, r, c))
        return NULL;
    v = PQgetvalue(res, r, c);
    switch (PQftype(res, c)) {
    case 20:                    /* int8 */
    case 21:                    /* int2 */
    case 23:                    /* int4 */
        return json_object_new_int64(strtoll(v, NULL, 10));
    case 700:                   /* float4 */
    case 701:                   /* float8 */
    case 1700:                  /* numeric */
        return json_object_new_double(strtod(v, NULL));
    case 16:                    /* bool */
        return json_object_new_boolean(v[0] == 't');
    default:
        return json_object_new_string(v);
    }
}

struct json_object *
ctl_db_json_params(const struct rl_limit *l)
{
    struct json_object *o;

    if (algo_get(l->algorithm) == NULL)
        return NULL;
    o = json_object_new_object();
    algo_json_add(o, l);
    /* What a limit counts is a member of its own beside the parameters. */
    json_object_object_del(o, "count");
    return o;
}

void
ctl_db_json_row(const PGresult *res, int r, const char *const *headers,
    struct json_object *o)
{
    int ncols = PQnfields(res), c, h;
    struct rl_limit l;
    char name[64];

    for (h = 0, c = 0; c < ncols && headers[h] != NULL; h++, c++) {
        ctl_db_json_name(headers[h], name, sizeof(name));
        if (strcmp(headers[h], "PARAMETERS") == 0 && c + 7 < ncols) {
            memset(&l, 0, sizeof(l));
            l.algorithm = PQgetisnull(res, r, c) ? -1 :
                algo_parse(PQgetvalue(res, r, c));
            ctl_db_limit_params(res, r, c + 1, &l);
            json_object_object_add(o, name, ctl_db_json_params(&l));
            c += 7;
            continue;
        }
        json_object_object_add(o, name, ctl_db_json_value(res, r, c));
    }
}

struct json_object *
ctl_db_json_rows(const PGresult *res, const char *const *headers)
{
    struct json_object *rows = json_object_new_array(), *o;
    int r;

    for (r = 0; r < PQntuples(res); r++) {
        o = json_object_new_object();
        ctl_db_json_row(res, r, headers, o);
        json_object_array_add(rows, o);
    }
    return rows;
}

void
ctl_db_json_print(struct json_object *o)
{
    puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
        JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
}

void
ctl_db_limit_params(const PGresult *res, int row, int col,
    struct rl_limit *l)
{
    l->limit_count = strtoll(PQgetvalue(res, row, col), NULL, 10);
    l->window_seconds = strtoll(PQgetvalue(res, row, col + 1), NULL, 10);
    l->bucket_capacity = strtoll(PQgetvalue(res, row, col + 2), NULL, 10);
    l->refill_rate = strtod(PQgetvalue(res, row, col + 3), NULL);
    l->period_us = strtoll(PQgetvalue(res, row, col + 4), NULL, 10);
    l->burst = strtoll(PQgetvalue(res, row, col + 5), NULL, 10);
    l->calendar = algo_calendar_parse(PQgetvalue(res, row, col + 6));
}

/* Prints "name  value" lines with the values aligned. */
void
ctl_db_print_fields(const char *const *names,
    const char *const *values, int n)
{
    size_t width = 0;
    int i;

    for (i = 0; i < n; i++)
        if (strlen(names[i]) > width)
            width = strlen(names[i]);
    for (i = 0; i < n; i++)
        printf("%-*s  %s\n", (int)width, names[i], values[i]);
}

/*
 * Runs a query and prints its rows as a table under headers (the "list"
 * commands).  Returns CTL_EXIT_OK, or CTL_EXIT_FAIL after printing the
 * database error.
 */
int
ctl_db_print_query(struct ctl *ctl, const char *sql, int nparams,
    const char *const *params, const char *const *headers)
{
    PGresult *res = ctl_db_query(ctl, sql, nparams, params);

    if (res == NULL)
        return ctl_db_fail(ctl);
    ctl_db_print_table(res, headers);
    PQclear(res);
    return CTL_EXIT_OK;
}

int
ctl_db_print_listing(struct ctl *ctl, const struct ctl_db_listing *l,
    const char *tenant, int nparams, const char *const *params)
{
    struct json_object *o;
    PGresult *res;

    if (!ctl_db_json)
        return ctl_db_print_query(ctl, l->sql, nparams, params, l->headers);
    if ((res = ctl_db_query(ctl, l->json_sql, nparams, params)) == NULL)
        return ctl_db_fail(ctl);
    o = ctl_db_json_doc();
    if (tenant != NULL)
        json_object_object_add(o, "tenant", json_object_new_string(tenant));
    json_object_object_add(o, l->member,
        ctl_db_json_rows(res, l->json_headers));
    PQclear(res);
    ctl_db_json_print(o);
    return CTL_EXIT_OK;
}

/*
 * "key list TENANT" and "rule list TENANT": checks the name, connects,
 * looks the tenant up and prints the rows of sql, whose $1 is the tenant's
 * id, under headers.  Returns an exit status, having printed why on
 * failure.
 */
int
ctl_db_print_tenant_query(struct ctl *ctl, const struct ctl_command *cmd,
    const char *tenant, const struct ctl_db_listing *l)
{
    char id[RL_UUID_LEN + 1], err[256];
    const char *params[1] = { id };
    int rc;

    if (validate_tenant_name("tenant name", tenant, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if ((rc = ctl_db_connect(ctl)) != 0)
        return rc;
    if ((rc = ctl_db_tenant_id(ctl, tenant, id)) != 0)
        return rc;
    return ctl_db_print_listing(ctl, l, tenant, 1, params);
}

