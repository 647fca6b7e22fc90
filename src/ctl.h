/*
 * ctl.h -- what the files of the admin tool, ratelimitctl, share.
 *
 * ratelimitctl applies the schema migrations and manages tenants, their
 * API keys and their rules in PostgreSQL; ratelimitctl.8 is its manual.
 * Each run does one command.  Every argument is checked before the
 * database is touched, so a typing mistake exits with status 2 and changes
 * nothing; every change that takes more than one statement runs in one
 * transaction, so a failure leaves nothing half-written.  User-supplied
 * values reach the server only as query parameters, never inside SQL text.
 * Workers pick up the changes through the triggers of schema/001_init.sql,
 * which NOTIFY them.
 *
 * The files: ctl.c (the command table, global options, messages, main),
 * ctl_args.c (one command's arguments), ctl_db.c (connection, queries,
 * transactions, output), ctl_migrate.c, ctl_tenant.c (tenants and keys),
 * ctl_rule.c (rules), ctl_limit.c (a limit's options and the limit
 * commands), ctl_guard.c (the plan guard, which keeps every check within
 * RL_MAX_LIMITS), ctl_counter.c, ctl_apply.c (export and apply) and
 * ctl_usage.c.  The checks of typed values are validate.c's,
 * shared with the service.  Functions return an exit status (CTL_EXIT_*)
 * after printing why, unless their comment says otherwise.
 */
#ifndef CTL_H
#define CTL_H

#include <stdio.h>

#include <libpq-fe.h>

#include "ratelimit.h"

#define CTL_NAME "ratelimitctl"
#define CTL_DEFAULT_CONFIG "/etc/ratelimit-fcgi/ratelimit.conf"
/* Used without -c when CTL_DEFAULT_CONFIG does not exist: the file
 * "make run" writes, relative to the current directory. */
#define CTL_DEV_CONFIG "var/ratelimit.conf"

#define CTL_EXIT_OK 0
#define CTL_EXIT_FAIL 1         /* runtime and database errors */
#define CTL_EXIT_USAGE 2        /* bad command line */

#define CTL_MAX_POSITIONAL 2
#define CTL_MAX_OPTIONS 32

/* ------------------------------------------------------------------ */
/* Commands and the state of one run */

struct ctl_option {
    const char *name;           /* without the leading "--" */
    int has_value;
};

/* One command's arguments, as ctl_args_parse() split them. */
struct ctl_args {
    const char *pos[CTL_MAX_POSITIONAL];
    int npos;
    const char *value[CTL_MAX_OPTIONS]; /* by index in the command's options */
    int given[CTL_MAX_OPTIONS];
};

struct ctl;
struct ctl_command;

typedef int (*ctl_run_fn)(struct ctl *, const struct ctl_command *,
    const struct ctl_args *);

struct ctl_command {
    const char *noun;
    const char *verb;           /* NULL for one-word commands */
    const char *synopsis;       /* the arguments after the command words */
    const char *positional[CTL_MAX_POSITIONAL + 1];  /* names, NULL ended */
    const struct ctl_option *options;                /* NULL-name ended */
    ctl_run_fn run;
};

/* The state of one run: where the configuration is and the connection. */
struct ctl {
    const char *config_path;
    int config_given;           /* -c was used: the file must exist */
    struct rl_config cfg;
    PGconn *conn;
    char err[512];              /* the last database error, one line */
    char sqlstate[6];
    char constraint[64];        /* the constraint it broke, or "" */
    int err_line;               /* line of a failing migration, or 0 */
};

/* ------------------------------------------------------------------ */
/* ctl.c: messages */

/* Prints "ratelimitctl: message" on stderr. */
void ctl_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ctl_warn(), then returns CTL_EXIT_FAIL. */
int ctl_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints the message, the command's usage line (cmd may be NULL) and a
 * pointer to --help; returns CTL_EXIT_USAGE. */
int ctl_usage_error(const struct ctl_command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prints "noun verb synopsis" and a newline. */
void ctl_print_command(const struct ctl_command *cmd, FILE *fp);

/* ------------------------------------------------------------------ */
/* ctl_args.c: one command's arguments */

/*
 * Splits argv (the words after the command) into positional arguments and
 * the command's options.  Returns 0, CTL_EXIT_USAGE after printing why, or
 * -1 when --help was asked for (the usage has then been printed).
 */
int ctl_args_parse(const struct ctl_command *cmd, int argc, char **argv,
    struct ctl_args *a);

/* The value of option name (without "--"), or NULL when it was not given
 * or is not one of cmd's. */
const char *ctl_args_value(const struct ctl_command *cmd,
    const struct ctl_args *a, const char *name);

/* 1 when option name was given, else 0. */
int ctl_args_flag(const struct ctl_command *cmd, const struct ctl_args *a,
    const char *name);

/*
 * The value of an algorithm's parameter p as algo_param_parse() takes it.
 * A duration (--window, --period) is a number of seconds ("60") or a
 * whole number with a unit ("500ms", "1s", "5m", "1h", "1d"); --window,
 * counted in whole seconds, takes no unit below the second.  It is
 * written into buf in the parameter's own unit (seconds, or microseconds
 * with "us").  Other values are returned as they are.  Returns the text,
 * or NULL with err (which says what is accepted).
 */
struct algo_param;
const char *ctl_args_param_text(const struct algo_param *p,
    const char *value, char *buf, size_t len, char *err, size_t errlen);

/* ------------------------------------------------------------------ */
/* ctl_db.c: the database and output */

/* Loads the configuration and connects.  From then on the service's log
 * lines (log.c, written by the shared code) are silenced. */
int ctl_db_connect(struct ctl *ctl);

/* After ctl_db_connect: opens rs (redis.h) as the configuration says
 * and checks that Redis answers (PING).  Returns 0, or CTL_EXIT_FAIL
 * after printing one line that names the address and the configuration
 * file (rs is then closed). */
struct redis_store;
struct rl_counters;
int ctl_db_redis_open(struct ctl *ctl, struct redis_store *rs,
    struct rl_counters *counters);

/* Keeps the first line of msg (without "ERROR:  ") as the current error. */
void ctl_db_set_error(struct ctl *ctl, const char *msg);

/* Keeps the error of res (which may be NULL): its message, SQLSTATE,
 * constraint and, when sql is given, the line of sql it points at. */
void ctl_db_set_result_error(struct ctl *ctl, const PGresult *res,
    const char *sql);

/* Prints the current database error; returns CTL_EXIT_FAIL. */
int ctl_db_fail(const struct ctl *ctl);

/* Runs one parameterized statement.  Returns its result (tuples or command
 * OK; the caller PQclear()s it), or NULL with the error kept in ctl. */
PGresult *ctl_db_query(struct ctl *ctl, const char *sql, int nparams,
    const char *const *params);

/* Runs a statement whose result is of no interest.  Returns 0 or -1 with
 * the error kept in ctl. */
int ctl_db_command(struct ctl *ctl, const char *sql, int nparams,
    const char *const *params);

/* Runs a statement for the number of rows it returns (or changes, with
 * RETURNING).  Returns that number, or -1 with the error kept in ctl. */
int ctl_db_query_rows(struct ctl *ctl, const char *sql, int nparams,
    const char *const *params);

/* BEGIN and COMMIT: 0, or -1 with the error kept in ctl. */
int ctl_db_begin(struct ctl *ctl);
int ctl_db_commit(struct ctl *ctl);

/* Abandons the open transaction, keeping the error that caused it. */
void ctl_db_rollback(struct ctl *ctl);

/* Looks up a tenant by name into id (a UUID). */
int ctl_db_tenant_id(struct ctl *ctl, const char *name,
    char id[RL_UUID_LEN + 1]);

/* Checks the row id s (what names it in messages) into *id, then
 * connects. */
int ctl_db_parse_id_connect(struct ctl *ctl, const struct ctl_command *cmd,
    const char *what, const char *s, long long *id);

/*
 * --json.  Every output is one JSON object whose first member is
 * "version" (CTL_JSON_VERSION); doc/schemas/ holds a JSON Schema for each
 * command's.  Values are typed: numbers, true/false, null for what is
 * absent, times as ISO 8601 UTC ("2026-12-04T18:32:11Z"), a limit's
 * parameters as an object named as in /v1/config (algo.c's table).  A
 * change of an output that can break a reader raises the version.
 */
#define CTL_JSON_VERSION 1

/* A timestamptz column as JSON wants it: text "YYYY-MM-DDTHH:MM:SSZ". */
#define CTL_DB_JSON_TIME(col) \
    "to_char((" col ") AT TIME ZONE 'UTC', " \
    "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"

void ctl_db_set_json(int on);
int ctl_db_is_json(void);
struct json_object;

/* A new output object: {"version": CTL_JSON_VERSION}. */
struct json_object *ctl_db_json_doc(void);

/*
 * Adds row r of res to o: one member per header, named by the header in
 * lower case; int columns as numbers, bool as true/false, NULL as null,
 * the rest as strings.  The header "PARAMETERS" takes the column of a
 * limit's algorithm and the CTL_LIMIT_PARAMS_SQL columns after it (8 in
 * all) and becomes the object of ctl_db_json_params.  headers ends with
 * NULL; columns after it are not output.
 */
void ctl_db_json_row(const PGresult *res, int r, const char *const *headers,
    struct json_object *o);
/* Every row of res, as ctl_db_json_row makes them, in an array. */
struct json_object *ctl_db_json_rows(const PGresult *res,
    const char *const *headers);

/* The parameters of l as an object ({"limit": 10, "window_seconds": 60}),
 * named and typed by its algorithm's row of algo.c; null (NULL) for an
 * unknown algorithm. */
struct rl_limit;
struct json_object *ctl_db_json_params(const struct rl_limit *l);

/* Writes o as one line and frees it. */
void ctl_db_json_print(struct json_object *o);

/* The parameter columns of limits l, in the order ctl_db_limit_params
 * reads them (7 columns). */
#define CTL_LIMIT_PARAMS_SQL \
    "coalesce(l.limit_count, 0), coalesce(l.window_seconds, 0), " \
    "coalesce(l.bucket_capacity, 0), coalesce(l.refill_rate, 0), " \
    "coalesce(l.period_us, 0), coalesce(l.burst, 0), " \
    "coalesce(l.calendar, '')"

/* Reads the CTL_LIMIT_PARAMS_SQL columns from column col of row into l. */
void ctl_db_limit_params(const PGresult *res, int row, int col,
    struct rl_limit *l);

/* Prints "name  value" lines with the values aligned. */
void ctl_db_print_fields(const char *const *names,
    const char *const *values, int n);

/* Runs a query and prints its rows as a table under headers. */
int ctl_db_print_query(struct ctl *ctl, const char *sql, int nparams,
    const char *const *params, const char *const *headers);

/*
 * A list command's two outputs: the table (sql under headers) and --json
 * (json_sql's rows under json_headers, see ctl_db_json_row, in the array
 * member of the output object).
 */
struct ctl_db_listing {
    const char *sql;
    const char *const *headers;
    const char *json_sql;
    const char *const *json_headers;    /* NULL ended */
    const char *member;
};

/* Prints the listing: the table, or {"version": 1, "tenant": tenant
 * (unless NULL), member: [rows]}.  The queries take params. */
int ctl_db_print_listing(struct ctl *ctl, const struct ctl_db_listing *l,
    const char *tenant, int nparams, const char *const *params);

/* "key list TENANT" and "rule list TENANT": checks the name, connects,
 * looks the tenant up and prints the listing, whose queries' $1 is the
 * tenant's id. */
int ctl_db_print_tenant_query(struct ctl *ctl, const struct ctl_command *cmd,
    const char *tenant, const struct ctl_db_listing *l);

/* ------------------------------------------------------------------ */
/* The commands (ctl_run_fn): ctl_migrate.c, ctl_tenant.c, ctl_rule.c,
 * ctl_limit.c, ctl_counter.c, ctl_apply.c, ctl_usage.c */

int ctl_migrate_run(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);

int ctl_tenant_add(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);
int ctl_tenant_list(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);
/* tenant suspend / tenant resume: the status is the command's verb. */
int ctl_tenant_status(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);
/* tenant budget NAME COUNT|default: the tenant's counter budget. */
int ctl_tenant_budget(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);
int ctl_tenant_show(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);
int ctl_tenant_remove(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);
int ctl_tenant_export(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);
int ctl_tenant_apply(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);
int ctl_tenant_key_create(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);
int ctl_tenant_key_list(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);
int ctl_tenant_key_revoke(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);

/* ctl_guard.c, the plan guard (see there): a change of a tenant's rules in
 * one transaction, refused when a check would need too many limits. */
struct ctl_guard {
    char tenant_id[RL_UUID_LEN + 1];
    struct rl_rule *before;
    int nbefore;
};

int ctl_guard_begin_tenant(struct ctl *ctl, struct ctl_guard *g,
    const char *name);
/* The same for the rule with id rule_id and its tenant. */
int ctl_guard_begin_rule(struct ctl *ctl, struct ctl_guard *g,
    long long rule_id);
void ctl_guard_abort(struct ctl *ctl, struct ctl_guard *g);
/* Commits, or rolls back and explains; an exit status. */
int ctl_guard_end(struct ctl *ctl, struct ctl_guard *g);
/* Ends a change whose statement returned res (no rows: the rule is gone):
 * CTL_EXIT_OK with res the caller's, or res cleared and an exit status. */
int ctl_guard_finish(struct ctl *ctl, struct ctl_guard *g, PGresult *res,
    long long rule_id);

/*
 * One limit's checked parameters.  Its algorithm (algo.c) says which of
 * them are set; the others stay 0 and their columns NULL.
 */
struct ctl_limit_spec {
    const char *name;
    const char *count;          /* "subject", "key" or "tenant" */
    const struct algo *algorithm;
    struct rl_limit limit;
};

/* ctl_limit.c.  Checks the options of one limit (--name, --algorithm, the
 * algorithm's parameters) into spec; default_name stands in for a missing
 * --name (NULL: required).  0, or CTL_EXIT_USAGE after printing why. */
int ctl_limit_spec_parse(const struct ctl_command *cmd,
    const struct ctl_args *a, const char *default_name,
    struct ctl_limit_spec *spec);

/* Inserts a limit into the rule rule_id (decimal); a result with its id
 * (PQclear it), none when there is no such rule, or NULL (error in ctl). */
PGresult *ctl_limit_insert(struct ctl *ctl, const char *rule_id,
    const struct ctl_limit_spec *s);

/* "name: algorithm parameters, counted per X", as rule add prints it. */
void ctl_limit_describe(const struct ctl_limit_spec *s, char *buf,
    size_t len);

/* Rewrites limit limit_id: name and count unless NULL, the algorithm and
 * its parameters from l (the other algorithms' columns NULL).  0, -1 (a
 * database error, in ctl) or -2 (a parameter that cannot be written). */
int ctl_limit_write(struct ctl *ctl, const char *limit_id,
    const char *name, const char *count, const struct algo *alg,
    const struct rl_limit *l);

/* The rules of tenant_id the service would use, with what matching needs
 * (id, pattern, priority, always, number of limits).  *out is calloc()ed
 * (free it).  0, or -1 with the error in ctl. */
int ctl_guard_load(struct ctl *ctl, const char *tenant_id,
    struct rl_rule **out, int *n);

int ctl_counter_show(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);
int ctl_counter_reset(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);
/* ctl_usage.c */
int ctl_usage_run(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);

int ctl_rule_add(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);
int ctl_rule_list(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);
int ctl_rule_match(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);
int ctl_rule_set(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);
int ctl_rule_remove(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);
int ctl_limit_add(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);
int ctl_limit_set(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);
int ctl_limit_remove(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a);

#endif /* CTL_H */
