/*
 * ctl_rule.c -- the rule and limit commands of ratelimitctl.
 *
 * A rule is a route pattern of a tenant with its switches (enabled,
 * always, shadow, failure mode, per) and one to RL_MAX_LIMITS limits; a
 * limit is a name, an algorithm and exactly that algorithm's parameters
 * (schema/002_limits.sql enforces the same, whoever writes to the tables).
 * The algorithms, their options, columns and bounds are algo.c's table.
 *
 * A change of the rules after which some route's check would need more
 * limits than one check decides (RL_MAX_LIMITS) is refused with status 2
 * and nothing changed: see "The plan guard" below.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "ctl.h"

/* ------------------------------------------------------------------ */
/* The plan guard */

/*
 * One check decides the limits of the most specific matching rule and of
 * every other matching "always" rule together, at most RL_MAX_LIMITS of
 * them; the service answers a route that needs more 503 "misconfigured"
 * rather than drop one.  So every command that can give a route more
 * limits -- rule add, rule set (--enabled, --always, --priority: another
 * rule may win), rule remove (another rule of the same pattern may take
 * over) and limit add -- runs in one transaction that locks the tenant's
 * row (two such commands for one tenant take turns), reads the tenant's
 * rules the way the service does, makes the change, reads them again and
 * asks rules_overflow() whether some route now needs more than
 * RL_MAX_LIMITS, and more than before.  If so, nothing is committed and
 * the command exits 2, naming the routes and the rules.  A change that
 * leaves a plan too big but no bigger (a step towards repairing rules
 * written with psql) goes through.
 */

/*
 * Reads the rules of tenant_id that the service would use -- enabled, with
 * at least one limit, at most RL_MAX_LIMITS limits each (pg_store.c), and
 * RL_MAX_RULES + 1 at most (more than RL_MAX_RULES: the service answers
 * every check of the tenant 503) -- with what matching needs: id, pattern,
 * priority, always and the number of limits.  *out is calloc()ed (free it)
 * and may be NULL when *n is 0.  Returns 0, or -1 with the error in ctl.
 */
int
ctl_rule_guard_load(struct ctl *ctl, const char *tenant_id,
    struct rl_rule **out, int *n)
{
    char max_rules[16];
    const char *params[2] = { tenant_id, max_rules };
    struct rl_rule *rules;
    PGresult *res;
    long long nlimits;
    int i;

    *out = NULL;
    *n = 0;
    /* One more than the service loads: a tenant past the bound is told
     * apart (the service then decides none of its checks). */
    snprintf(max_rules, sizeof(max_rules), "%d", RL_MAX_RULES + 1);
    res = ctl_db_query(ctl, "SELECT r.id, r.route_pattern, r.priority, "
        "  r.always, count(*) "
        "FROM rules r JOIN limits l ON l.rule_id = r.id "
        "WHERE r.tenant_id = $1::uuid AND r.enabled "
        "GROUP BY r.id ORDER BY r.id LIMIT $2::integer", 2, params);
    if (res == NULL)
        return -1;
    if (PQntuples(res) == 0) {
        PQclear(res);
        return 0;
    }
    if ((rules = calloc((size_t)PQntuples(res), sizeof(*rules))) == NULL) {
        PQclear(res);
        ctl_db_set_error(ctl, "out of memory");
        return -1;
    }
    for (i = 0; i < PQntuples(res); i++) {
        rules[i].id = strtoll(PQgetvalue(res, i, 0), NULL, 10);
        snprintf(rules[i].pattern, sizeof(rules[i].pattern), "%s",
            PQgetvalue(res, i, 1));
        rules[i].priority = atoi(PQgetvalue(res, i, 2));
        rules[i].always = PQgetvalue(res, i, 3)[0] == 't';
        nlimits = strtoll(PQgetvalue(res, i, 4), NULL, 10);
        rules[i].nlimits = nlimits > RL_MAX_LIMITS ? RL_MAX_LIMITS :
            (int)nlimits;
    }
    *out = rules;
    *n = PQntuples(res);
    PQclear(res);
    return 0;
}

/*
 * Opens the guarded transaction for the tenant with id tenant_id, which
 * the caller has looked up inside it: locks the tenant's row and reads
 * its rules.  Returns 0, or CTL_EXIT_FAIL after rolling back and printing
 * why.
 */
static int
ctl_rule_guard_lock(struct ctl *ctl, struct ctl_rule_guard *g,
    const char *tenant_id)
{
    const char *params[1] = { tenant_id };

    snprintf(g->tenant_id, sizeof(g->tenant_id), "%s", tenant_id);
    if (ctl_db_command(ctl, "SELECT 1 FROM tenants WHERE id = $1::uuid "
        "FOR NO KEY UPDATE", 1, params) == -1 ||
        ctl_rule_guard_load(ctl, g->tenant_id, &g->before,
        &g->nbefore) == -1) {
        ctl_db_rollback(ctl);
        return ctl_db_fail(ctl);
    }
    return 0;
}

/*
 * Begins a guarded change of the tenant that sql (with one parameter)
 * finds.  Returns 0, or CTL_EXIT_FAIL after printing why (missing when it
 * finds nothing, or the database error), with nothing left open.
 */
static int
ctl_rule_guard_begin_by(struct ctl *ctl, struct ctl_rule_guard *g,
    const char *sql, const char *param, const char *missing)
{
    const char *params[1] = { param };
    char id[RL_UUID_LEN + 1];
    PGresult *res;

    memset(g, 0, sizeof(*g));
    if (ctl_db_begin(ctl) == -1)
        return ctl_db_fail(ctl);
    if ((res = ctl_db_query(ctl, sql, 1, params)) == NULL) {
        ctl_db_rollback(ctl);
        return ctl_db_fail(ctl);
    }
    if (PQntuples(res) == 0) {
        PQclear(res);
        ctl_db_rollback(ctl);
        return ctl_fail("%s", missing);
    }
    util_copy(id, sizeof(id), PQgetvalue(res, 0, 0));
    PQclear(res);
    return ctl_rule_guard_lock(ctl, g, id);
}

/* Begins a guarded change of the tenant named name. */
int
ctl_rule_guard_begin_tenant(struct ctl *ctl, struct ctl_rule_guard *g,
    const char *name)
{
    char missing[RL_NAME_MAX * 2 + 64];

    snprintf(missing, sizeof(missing), "no tenant named \"%s\" (see '"
        CTL_NAME " tenant list')", name);
    return ctl_rule_guard_begin_by(ctl, g,
        "SELECT id FROM tenants WHERE name = $1", name, missing);
}

/* Begins a guarded change of the rule with id rule_id and its tenant. */
static int
ctl_rule_guard_begin_rule(struct ctl *ctl, struct ctl_rule_guard *g,
    long long rule_id)
{
    char rule[24], missing[64];

    snprintf(rule, sizeof(rule), "%lld", rule_id);
    snprintf(missing, sizeof(missing), "no rule with id %lld", rule_id);
    return ctl_rule_guard_begin_by(ctl, g,
        "SELECT tenant_id FROM rules WHERE id = $1::bigint", rule, missing);
}

/* Abandons a guarded change (after a failed statement, say). */
void
ctl_rule_guard_abort(struct ctl *ctl, struct ctl_rule_guard *g)
{
    ctl_db_rollback(ctl);
    free(g->before);
    g->before = NULL;
}

/* Prints why a change was refused: the routes, the limits, the rules. */
static void
ctl_rule_guard_explain(const struct rl_overflow *o,
    const struct rl_rule *rules)
{
    const struct rl_rule *r;
    int i;

    if (!o->prefix)
        ctl_warn("refused: after this change a check of the route \"%s\" "
            "would need %d limits, more than the %d one check decides "
            "(it needs %d now):", o->route, o->needed, RL_MAX_LIMITS,
            o->before);
    else if (o->route[0] == '\0')
        ctl_warn("refused: after this change a check of a route that only "
            "\"*\" rules match would need %d limits, more than the %d one "
            "check decides (it needs %d now):", o->needed, RL_MAX_LIMITS,
            o->before);
    else
        ctl_warn("refused: after this change a check of a route beginning "
            "with \"%s\" would need %d limits, more than the %d one check "
            "decides (it needs %d now):", o->route, o->needed,
            RL_MAX_LIMITS, o->before);
    for (i = 0; i < o->nrules; i++) {
        r = &rules[o->rule[i]];
        fprintf(stderr, "    rule %lld  %s  %d limit%s  (%s)\n", r->id,
            r->pattern, r->nlimits, r->nlimits == 1 ? "" : "s",
            i == 0 ? "the most specific rule" : "always");
    }
    fputs(CTL_NAME ": the service would answer such a check 503 "
        "\"misconfigured\"; nothing was changed (give the rules fewer "
        "limits, or fewer \"always\" rules that match the same routes)\n",
        stderr);
}

/*
 * Ends a guarded change: reads the tenant's rules again and commits, or,
 * when some route's check would now need too many limits, rolls back and
 * explains.  Returns 0, CTL_EXIT_USAGE (refused) or CTL_EXIT_FAIL
 * (database error), having printed why.
 */
int
ctl_rule_guard_end(struct ctl *ctl, struct ctl_rule_guard *g)
{
    struct rl_overflow *o;
    struct rl_rule *after;
    int nafter, rc = 0;

    if (ctl_rule_guard_load(ctl, g->tenant_id, &after, &nafter) == -1) {
        ctl_rule_guard_abort(ctl, g);
        return ctl_db_fail(ctl);
    }
    if ((o = malloc(sizeof(*o))) == NULL) {
        free(after);
        ctl_rule_guard_abort(ctl, g);
        return ctl_fail("out of memory");
    }
    if (rules_overflow(g->before, g->nbefore, after, nafter, o)) {
        ctl_rule_guard_abort(ctl, g);
        ctl_rule_guard_explain(o, after);
        rc = CTL_EXIT_USAGE;
    } else if (ctl_db_commit(ctl) == -1) {
        ctl_rule_guard_abort(ctl, g);
        rc = ctl_db_fail(ctl);
    }
    free(o);
    free(after);
    free(g->before);
    g->before = NULL;
    return rc;
}

/*
 * Ends a guarded change whose statement returned res: none of its rows
 * when the rule was removed by someone else since the first look.  On
 * CTL_EXIT_OK the change is committed and res is the caller's to read and
 * clear; otherwise res is cleared, the change rolled back and why printed.
 */
static int
ctl_rule_guard_finish(struct ctl *ctl, struct ctl_rule_guard *g,
    PGresult *res, long long rule_id)
{
    int rc;

    if (PQntuples(res) == 0) {
        PQclear(res);
        ctl_rule_guard_abort(ctl, g);
        return ctl_fail("no rule with id %lld", rule_id);
    }
    if ((rc = ctl_rule_guard_end(ctl, g)) != 0) {
        PQclear(res);
        return rc;
    }
    return CTL_EXIT_OK;
}

/* ------------------------------------------------------------------ */
/* rule and limit */


/* What "rule add" stores in rules, and its first limit. */
struct ctl_rule_spec {
    const char *tenant;
    const char *route;
    const char *failure_mode;
    const char *per;
    int shadow;
    int always;
    char priority[24];
    struct ctl_rule_limit_spec limit;
};

/* validate_on_off() into "true" or "false" (query parameters of boolean
 * columns). */
static int
ctl_rule_on_off(const char *what, const char *s, const char **out,
    char *err, size_t errlen)
{
    int on;

    if (validate_on_off(what, s, &on, err, errlen) == -1)
        return -1;
    *out = on ? "true" : "false";
    return 0;
}

/* Writes the names of the algorithms as "a, b, c or d" into buf, for
 * messages. */
static void
ctl_rule_algorithm_names(char *buf, size_t len)
{
    size_t used = 0;
    int i, n = algo_count();

    buf[0] = '\0';
    for (i = 0; i < n && used < len; i++) {
        snprintf(buf + used, len - used, "%s%s",
            i == 0 ? "" : i == n - 1 ? " or " : ", ", algo_at(i)->name);
        used += strlen(buf + used);
    }
}

/* 1 when the option named opt sets a parameter of a. */
static int
ctl_rule_takes(const struct algo *a, const char *opt)
{
    int i;

    for (i = 0; i < a->nparams; i++)
        if (strcmp(a->param[i].option, opt) == 0)
            return 1;
    return 0;
}

/*
 * Refuses a parameter option of another algorithm than alg: so a mistyped
 * command never stores something other than what was meant.  The options
 * are looked at in the order of the table.  Returns 0, or CTL_EXIT_USAGE
 * after printing why.
 */
static int
ctl_rule_foreign_options(const struct ctl_command *cmd,
    const struct ctl_args *a, const struct algo *alg)
{
    const struct algo *other;
    const char *opt;
    char takes[160];
    int i, j, k, seen;

    for (i = 0; (other = algo_at(i)) != NULL; i++)
        for (j = 0; j < other->nparams; j++) {
            opt = other->param[j].option;
            /* Each option once, where the table names it first. */
            seen = 0;
            for (k = 0; k < i && !seen; k++)
                seen = ctl_rule_takes(algo_at(k), opt);
            if (seen || ctl_args_value(cmd, a, opt) == NULL ||
                ctl_rule_takes(alg, opt))
                continue;
            algo_takes(alg, takes, sizeof(takes));
            return ctl_usage_error(cmd, "--%s: not an option of %s (it "
                "takes %s)", opt, alg->name, takes);
        }
    return 0;
}

/*
 * Checks the options that describe one limit (--name, --algorithm and the
 * algorithm's parameters) into spec.  default_name stands in for a missing
 * --name; when it is NULL, --name is required.  Returns 0, or
 * CTL_EXIT_USAGE after printing why.
 */
static int
ctl_rule_limit_spec(const struct ctl_command *cmd, const struct ctl_args *a,
    const char *default_name, struct ctl_rule_limit_spec *spec)
{
    const char *algorithm = ctl_args_value(cmd, a, "algorithm");
    const char *typed[ALGO_MAX_PARAMS], *v;
    const struct algo_param *p;
    const struct algo *alg;
    char err[256], names[128], takes[160], text[ALGO_TEXT_MAX];
    int i, rc;

    memset(spec, 0, sizeof(*spec));
    spec->name = ctl_args_value(cmd, a, "name");
    if (spec->name == NULL) {
        if (default_name == NULL)
            return ctl_usage_error(cmd, "missing --name LIMITNAME (the "
                "limits of a rule need names of their own)");
        spec->name = default_name;
    }
    if (validate_limit_name("--name", spec->name, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);

    ctl_rule_algorithm_names(names, sizeof(names));
    if (algorithm == NULL)
        return ctl_usage_error(cmd, "missing --algorithm (%s)", names);
    if ((alg = algo_find(algorithm)) == NULL)
        return ctl_usage_error(cmd, "--algorithm: \"%s\" is not %s",
            algorithm, names);
    spec->algorithm = alg;
    spec->limit.algorithm = alg->id;

    if ((rc = ctl_rule_foreign_options(cmd, a, alg)) != 0)
        return rc;
    for (i = 0; i < alg->nparams; i++) {
        p = &alg->param[i];
        if (!p->optional && ctl_args_value(cmd, a, p->option) == NULL) {
            algo_takes(alg, takes, sizeof(takes));
            return ctl_usage_error(cmd, "%s needs %s (--%s is missing)",
                alg->name, takes, p->option);
        }
    }

    /* Only the algorithm's own options are left; parse those given (an
     * optional one left out stays 0). */
    for (i = 0; i < alg->nparams; i++) {
        p = &alg->param[i];
        typed[i] = ctl_args_value(cmd, a, p->option);
        if (typed[i] != NULL && ((v = ctl_args_param_text(p, typed[i], text,
            sizeof(text), err, sizeof(err))) == NULL ||
            algo_param_parse(p, v, &spec->limit, err, sizeof(err)) == -1))
            return ctl_usage_error(cmd, "%s", err);
    }
    if (alg->check != NULL && alg->check(&spec->limit, typed, err,
        sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    spec->count = ctl_args_value(cmd, a, "count");
    if (spec->count == NULL)
        spec->count = "subject";
    if (validate_count("--count", spec->count, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    spec->limit.count = algo_count_parse(spec->count);
    return 0;
}

/* Describes a checked limit the way "rule list" shows it. */
void
ctl_rule_limit_describe(const struct ctl_rule_limit_spec *s, char *buf,
    size_t len)
{
    const struct algo *alg = s->algorithm;
    char text[ALGO_MAX_PARAMS][ALGO_TEXT_MAX];
    int i, n;

    for (i = 0; i < ALGO_MAX_PARAMS; i++) {
        text[i][0] = '\0';
        if (i < alg->nparams)
            algo_param_text(&alg->param[i], &s->limit, ALGO_TEXT_HUMAN,
                text[i], sizeof(text[i]));
    }
    n = snprintf(buf, len, "%s: %s ", s->name, alg->name);
    if (n < 0 || (size_t)n >= len)
        return;
    snprintf(buf + n, len - (size_t)n, alg->describe, text[0], text[1],
        text[2]);
    n = (int)strlen(buf);
    snprintf(buf + n, len - (size_t)n, ", counted per %s", s->count);
}

/*
 * Inserts a checked limit into the rule with id rule_id (decimal): the
 * columns of its algorithm's parameters, the others left NULL.  Returns
 * the result, with one row holding the new limit's id, or none when there
 * is no such rule (the caller PQclear()s it); or NULL with the error in
 * ctl.
 */
PGresult *
ctl_rule_insert_limit(struct ctl *ctl, const char *rule_id,
    const struct ctl_rule_limit_spec *s)
{
    static const char *const cast[] = { "", "bigint", "double precision",
        "bigint", "text" };
    const struct algo *alg = s->algorithm;
    const char *params[4 + ALGO_MAX_PARAMS];
    char text[ALGO_MAX_PARAMS][ALGO_TEXT_MAX];
    char columns[256], values[256];
    char sql[768];
    size_t cu = 0, vu = 0;
    int i;

    params[0] = rule_id;
    params[1] = s->name;
    params[2] = alg->name;
    params[3 + alg->nparams] = s->count;
    columns[0] = values[0] = '\0';
    for (i = 0; i < alg->nparams; i++) {
        if (algo_param_text(&alg->param[i], &s->limit, ALGO_TEXT_SQL,
            text[i], sizeof(text[i])) == -1) {
            ctl_db_set_error(ctl, "limit parameter out of range");
            ctl->constraint[0] = '\0';
            return NULL;
        }
        params[3 + i] = text[i];
        snprintf(columns + cu, sizeof(columns) - cu, ", %s",
            alg->param[i].column);
        cu += strlen(columns + cu);
        snprintf(values + vu, sizeof(values) - vu, ", $%d::%s", 4 + i,
            cast[alg->param[i].kind]);
        vu += strlen(values + vu);
    }
    snprintf(sql, sizeof(sql), "INSERT INTO limits (rule_id, name, "
        "algorithm%s, count_scope) SELECT r.id, $2, $3%s, $%d FROM rules r "
        "WHERE r.id = $1::bigint RETURNING id", columns, values,
        4 + alg->nparams);
    return ctl_db_query(ctl, sql, 4 + alg->nparams, params);
}

/* Checks "rule add"'s arguments into spec.  Returns 0 or CTL_EXIT_USAGE
 * after printing why. */
static int
ctl_rule_spec(const struct ctl_command *cmd, const struct ctl_args *a,
    struct ctl_rule_spec *spec)
{
    const char *priority = ctl_args_value(cmd, a, "priority");
    char err[256];
    long long v;
    int rc;

    memset(spec, 0, sizeof(*spec));
    spec->tenant = a->pos[0];
    spec->route = ctl_args_value(cmd, a, "route");
    spec->failure_mode = ctl_args_value(cmd, a, "failure-mode");
    spec->per = ctl_args_value(cmd, a, "per");
    spec->shadow = ctl_args_flag(cmd, a, "shadow");
    spec->always = ctl_args_flag(cmd, a, "always");

    if (validate_tenant_name("tenant name", spec->tenant, err,
        sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if (spec->route == NULL)
        return ctl_usage_error(cmd, "missing --route PATTERN");
    if (validate_route("--route", spec->route, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if ((rc = ctl_rule_limit_spec(cmd, a, "default", &spec->limit)) != 0)
        return rc;

    v = 0;
    if (priority != NULL && validate_integer("--priority", priority,
        -VALIDATE_PRIORITY_MAX, VALIDATE_PRIORITY_MAX, &v, err,
        sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    snprintf(spec->priority, sizeof(spec->priority), "%lld", v);

    if (spec->failure_mode == NULL)
        spec->failure_mode = "closed";
    if (validate_failure_mode("--failure-mode", spec->failure_mode, err,
        sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if (spec->per == NULL)
        spec->per = "rule";
    if (validate_per("--per", spec->per, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    return 0;
}

int
ctl_rule_add(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    struct ctl_rule_spec s;
    struct ctl_rule_guard g;
    const char *params[7];
    const char *names[5] = { "id", "tenant", "route", "always", "limit" };
    const char *values[5];
    char rule_id[24], desc[160];
    PGresult *res;
    int rc;

    if ((rc = ctl_rule_spec(cmd, a, &s)) != 0)
        return rc;
    if ((rc = ctl_db_connect(ctl)) != 0)
        return rc;

    if ((rc = ctl_rule_guard_begin_tenant(ctl, &g, s.tenant)) != 0)
        return rc;
    params[0] = g.tenant_id;
    params[1] = s.route;
    params[2] = s.priority;
    /* A second rule with the pattern and priority of an enabled one comes
     * after it and would never apply (an "always" one applies anyway). */
    if (!s.always && !ctl_args_flag(cmd, a, "force")) {
        res = ctl_db_query(ctl, "SELECT id FROM rules WHERE tenant_id = "
            "$1::uuid AND route_pattern = $2 AND priority = $3::integer "
            "AND enabled ORDER BY id LIMIT 1", 3, params);
        if (res == NULL) {
            ctl_rule_guard_abort(ctl, &g);
            return ctl_db_fail(ctl);
        }
        if (PQntuples(res) > 0) {
            snprintf(rule_id, sizeof(rule_id), "%s", PQgetvalue(res, 0, 0));
            PQclear(res);
            ctl_rule_guard_abort(ctl, &g);
            fprintf(stderr, CTL_NAME ": rule add: rule %s of %s already has "
                "route '%s' and priority %s and is chosen first: this rule "
                "would never apply. Give one of them another --priority, "
                "disable rule %s (rule set %s --enabled off), or add this "
                "one anyway with --force\n", rule_id, s.tenant, s.route,
                s.priority, rule_id, rule_id);
            return CTL_EXIT_USAGE;
        }
        PQclear(res);
    }
    params[3] = s.shadow ? "true" : "false";
    params[4] = s.failure_mode;
    params[5] = s.per;
    params[6] = s.always ? "true" : "false";
    res = ctl_db_query(ctl,
        "INSERT INTO rules (tenant_id, route_pattern, priority, shadow, "
        "                   failure_mode, per, always) "
        "VALUES ($1::uuid, $2, $3::integer, $4::boolean, $5, $6, "
        "        $7::boolean) RETURNING id", 7, params);
    if (res == NULL) {
        ctl_rule_guard_abort(ctl, &g);
        return ctl_db_fail(ctl);
    }
    snprintf(rule_id, sizeof(rule_id), "%s", PQgetvalue(res, 0, 0));
    PQclear(res);

    res = ctl_rule_insert_limit(ctl, rule_id, &s.limit);
    if (res == NULL) {
        ctl_rule_guard_abort(ctl, &g);
        return ctl_db_fail(ctl);
    }
    PQclear(res);
    if ((rc = ctl_rule_guard_end(ctl, &g)) != 0)
        return rc;

    ctl_rule_limit_describe(&s.limit, desc, sizeof(desc));
    values[0] = rule_id;
    values[1] = s.tenant;
    values[2] = s.route;
    values[3] = s.always ? "yes" : "no";
    values[4] = desc;
    ctl_db_print_fields(names, values, 5);
    return CTL_EXIT_OK;
}

/* rule set: only the options given change; there must be at least one. */
int
ctl_rule_set(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    static const char *const names[] = { "id", "enabled", "always", "shadow",
        "failure-mode", "per", "priority", "route" };
    const char *enabled = ctl_args_value(cmd, a, "enabled");
    const char *always = ctl_args_value(cmd, a, "always");
    const char *shadow = ctl_args_value(cmd, a, "shadow");
    const char *failure_mode = ctl_args_value(cmd, a, "failure-mode");
    const char *per = ctl_args_value(cmd, a, "per");
    const char *priority = ctl_args_value(cmd, a, "priority");
    const char *route = ctl_args_value(cmd, a, "route");
    const char *params[8], *values[8];
    char err[256], prio[24];
    struct ctl_rule_guard g;
    long long id, v;
    PGresult *res;
    int rc, i;

    if (validate_id("RULE_ID", a->pos[0], &id, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if (enabled == NULL && always == NULL && shadow == NULL &&
        failure_mode == NULL && per == NULL && priority == NULL &&
        route == NULL)
        return ctl_usage_error(cmd, "nothing to set: give at least one of "
            "--enabled, --always, --shadow, --failure-mode, --per, "
            "--priority, --route");
    params[0] = a->pos[0];
    for (i = 1; i < 8; i++)
        params[i] = NULL;
    if (route != NULL) {
        if (validate_route("--route", route, err, sizeof(err)) == -1)
            return ctl_usage_error(cmd, "%s", err);
        params[7] = route;
    }
    if (enabled != NULL && ctl_rule_on_off("--enabled", enabled,
        &params[1], err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if (always != NULL && ctl_rule_on_off("--always", always, &params[2],
        err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if (shadow != NULL && ctl_rule_on_off("--shadow", shadow, &params[3],
        err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if (failure_mode != NULL) {
        if (validate_failure_mode("--failure-mode", failure_mode, err,
            sizeof(err)) == -1)
            return ctl_usage_error(cmd, "%s", err);
        params[4] = failure_mode;
    }
    if (per != NULL) {
        if (validate_per("--per", per, err, sizeof(err)) == -1)
            return ctl_usage_error(cmd, "%s", err);
        params[5] = per;
    }
    if (priority != NULL) {
        if (validate_integer("--priority", priority, -VALIDATE_PRIORITY_MAX,
            VALIDATE_PRIORITY_MAX, &v, err, sizeof(err)) == -1)
            return ctl_usage_error(cmd, "%s", err);
        snprintf(prio, sizeof(prio), "%lld", v);
        params[6] = prio;
    }
    if ((rc = ctl_db_connect(ctl)) != 0)
        return rc;
    if ((rc = ctl_rule_guard_begin_rule(ctl, &g, id)) != 0)
        return rc;

    /* One statement: a NULL parameter keeps the column as it is.  A rule
     * left unchanged keeps its updated_at and notifies nobody. */
    res = ctl_db_query(ctl,
        "UPDATE rules SET "
        "  enabled = coalesce($2::boolean, enabled), "
        "  always = coalesce($3::boolean, always), "
        "  shadow = coalesce($4::boolean, shadow), "
        "  failure_mode = coalesce($5, failure_mode), "
        "  per = coalesce($6, per), "
        "  priority = coalesce($7::integer, priority), "
        "  route_pattern = coalesce($8, route_pattern) "
        "WHERE id = $1::bigint "
        "RETURNING id, "
        "  CASE WHEN enabled THEN 'on' ELSE 'off' END, "
        "  CASE WHEN always THEN 'on' ELSE 'off' END, "
        "  CASE WHEN shadow THEN 'on' ELSE 'off' END, "
        "  failure_mode, per, priority, route_pattern", 8, params);
    if (res == NULL) {
        ctl_rule_guard_abort(ctl, &g);
        return ctl_db_fail(ctl);
    }
    if ((rc = ctl_rule_guard_finish(ctl, &g, res, id)) != CTL_EXIT_OK)
        return rc;
    for (i = 0; i < 8; i++)
        values[i] = PQgetvalue(res, 0, i);
    ctl_db_print_fields(names, values, 8);
    PQclear(res);
    return CTL_EXIT_OK;
}

/*
 * Appends to sql (size len, used so far *used) what "rule list" shows of
 * parameter p: its column; a GCRA period in the largest unit that divides
 * it, the way --period takes it (validate_duration_format does the same).
 */
static void
ctl_rule_list_param(char *sql, size_t len, size_t *used,
    const struct algo_param *p)
{
    if (p->kind == ALGO_KIND_DURATION)
        snprintf(sql + *used, len - *used,
            "CASE WHEN l.%s %% 86400000000 = 0 "
            "       THEN (l.%s / 86400000000) || 'd' "
            "     WHEN l.%s %% 3600000000 = 0 "
            "       THEN (l.%s / 3600000000) || 'h' "
            "     WHEN l.%s %% 60000000 = 0 "
            "       THEN (l.%s / 60000000) || 'm' "
            "     WHEN l.%s %% 1000000 = 0 "
            "       THEN (l.%s / 1000000) || 's' "
            "     WHEN l.%s %% 1000 = 0 "
            "       THEN (l.%s / 1000) || 'ms' "
            "     ELSE l.%s || 'us' END", p->column, p->column, p->column,
            p->column, p->column, p->column, p->column, p->column,
            p->column, p->column, p->column);
    else
        snprintf(sql + *used, len - *used, "l.%s", p->column);
    *used += strlen(sql + *used);
}

/*
 * Appends the SQL expression of "rule list"'s PARAMETERS for alg: its
 * describe format with each "%s" replaced by the parameter's column, the
 * text between them as string literals, joined with ||.
 */
static void
ctl_rule_list_describe(char *sql, size_t len, size_t *used,
    const struct algo *alg)
{
    const char *f = alg->describe, *next;
    int i = 0, first = 1;
    size_t n;

    while (*f != '\0' && *used < len) {
        next = strstr(f, "%s");
        n = next != NULL ? (size_t)(next - f) : strlen(f);
        if (n > 0) {
            snprintf(sql + *used, len - *used, "%s'%.*s'",
                first ? "" : " || ", (int)n, f);
            *used += strlen(sql + *used);
            first = 0;
        }
        if (next == NULL)
            break;
        if (i < alg->nparams) {
            snprintf(sql + *used, len - *used, "%s", first ? "" : " || ");
            *used += strlen(sql + *used);
            ctl_rule_list_param(sql, len, used, &alg->param[i++]);
            first = 0;
        }
        f = next + 2;
    }
}

/* Appends "CASE l.algorithm WHEN ... END": a limit's parameters as "rule
 * list" shows them. */
static void
ctl_rule_params_sql(char *sql, size_t len, size_t *used)
{
    const struct algo *alg;
    int i;

    snprintf(sql + *used, len - *used, "CASE l.algorithm ");
    *used += strlen(sql + *used);
    for (i = 0; (alg = algo_at(i)) != NULL && *used < len; i++) {
        snprintf(sql + *used, len - *used, "WHEN '%s' THEN ", alg->name);
        *used += strlen(sql + *used);
        ctl_rule_list_describe(sql, len, used, alg);
        snprintf(sql + *used, len - *used, " ");
        *used += strlen(sql + *used);
    }
    snprintf(sql + *used, len - *used, "END");
    *used += strlen(sql + *used);
}

/*
 * The id of the rule that shadows rule r, one that never applies
 * (rules_shadowed_by in SQL): enabled, not "always", and another enabled
 * rule with limits has its pattern and comes first (higher priority, or
 * equal and lower id).  NULL otherwise.
 */
#define CTL_RULE_SHADOWER_SQL \
    "(SELECT o.id FROM rules o " \
    "  WHERE r.enabled AND NOT r.always AND o.tenant_id = r.tenant_id " \
    "    AND o.id <> r.id AND o.enabled " \
    "    AND o.route_pattern = r.route_pattern " \
    "    AND (o.priority > r.priority OR " \
    "         (o.priority = r.priority AND o.id < r.id)) " \
    "    AND EXISTS (SELECT 1 FROM limits x WHERE x.rule_id = o.id) " \
    "  ORDER BY o.priority DESC, o.id LIMIT 1)"

/* "rule list --json": one object per limit (a rule without limits: one
 * with null limit members). */
static const char *const ctl_rule_list_json_headers[] = { "ID", "ROUTE",
    "PRIORITY", "ENABLED", "ALWAYS", "SHADOW", "FAILURE", "PER", "LIMIT_ID",
    "LIMIT", "ALGORITHM", "COUNT", "PARAMETERS", "SHADOWED_BY", NULL };

#define CTL_RULE_LIST_JSON_SQL \
    "SELECT r.id, r.route_pattern, r.priority, r.enabled, r.always, " \
    "  r.shadow, r.failure_mode, r.per, l.id, l.name, l.algorithm, " \
    "  l.count_scope, l.algorithm, " CTL_LIMIT_PARAMS_SQL ", " \
    "  " CTL_RULE_SHADOWER_SQL " " \
    "FROM rules r LEFT JOIN limits l ON l.rule_id = r.id " \
    "WHERE r.tenant_id = $1::uuid ORDER BY r.id, l.id"

int
ctl_rule_list(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    static const char *const headers[] = { "ID", "ROUTE", "PRIORITY",
        "ENABLED", "ALWAYS", "SHADOW", "FAILURE", "PER", "LIMIT_ID", "LIMIT",
        "ALGORITHM", "COUNT", "PARAMETERS", "NOTE" };
    struct ctl_db_listing listing = { NULL, headers, CTL_RULE_LIST_JSON_SQL,
        ctl_rule_list_json_headers, "rules" };
    char sql[4096];
    size_t used;

    snprintf(sql, sizeof(sql), "SELECT r.id, r.route_pattern, r.priority, "
        "  CASE WHEN r.enabled THEN 'yes' ELSE 'no' END, "
        "  CASE WHEN r.always THEN 'yes' ELSE 'no' END, "
        "  CASE WHEN r.shadow THEN 'yes' ELSE 'no' END, "
        "  r.failure_mode, r.per, l.id, l.name, l.algorithm, l.count_scope, ");
    used = strlen(sql);
    ctl_rule_params_sql(sql, sizeof(sql), &used);
    snprintf(sql + used, sizeof(sql) - used, ", "
        "coalesce('shadowed by rule ' || " CTL_RULE_SHADOWER_SQL ", '') "
        "FROM rules r LEFT JOIN limits l ON l.rule_id = r.id "
        "WHERE r.tenant_id = $1::uuid ORDER BY r.id, l.id");
    listing.sql = sql;
    return ctl_db_print_tenant_query(ctl, cmd, a->pos[0], &listing);
}

/* rule match --json: {"version":1, "tenant":..., "route":...,
 * "rule":ID or null, "limits":[rows of ctl_rule_match_json_headers],
 * "too_many_limits":bool, "not_used":[{"rule":ID, "route":PATTERN,
 * "shadowed_by":ID or null}]}. */
static const char *const ctl_rule_match_json_headers[] = { "RULE", "ROUTE",
    "PRIORITY", "ALWAYS", "WHY", "LIMIT_ID", "LIMIT", "ALGORITHM", "COUNT",
    "PARAMETERS", NULL };

#define CTL_RULE_MATCH_JSON_SQL \
    "SELECT r.id, r.route_pattern, r.priority, r.always, " \
    "  CASE WHEN r.id = $3::bigint THEN 'most-specific' " \
    "       ELSE 'always' END, " \
    "  l.id, l.name, l.algorithm, l.count_scope, l.algorithm, " \
    CTL_LIMIT_PARAMS_SQL " " \
    "FROM rules r JOIN limits l ON l.rule_id = r.id " \
    "WHERE r.tenant_id = $1::uuid AND r.id = ANY ($2::bigint[]) " \
    "ORDER BY r.id <> $3::bigint, r.id, l.id"

static int
ctl_rule_match_json(struct ctl *ctl, const struct rl_rule *rules, int n,
    int best, const char *route, const char *tenant,
    const char *const *params, long needed)
{
    struct json_object *o = ctl_db_json_doc(), *nu, *e;
    PGresult *res;
    int i, by;

    if ((res = ctl_db_query(ctl, CTL_RULE_MATCH_JSON_SQL, 3, params)) ==
        NULL) {
        json_object_put(o);
        return ctl_db_fail(ctl);
    }
    json_object_object_add(o, "tenant", json_object_new_string(tenant));
    json_object_object_add(o, "route", json_object_new_string(route));
    json_object_object_add(o, "rule", json_object_new_int64(rules[best].id));
    json_object_object_add(o, "limits",
        ctl_db_json_rows(res, ctl_rule_match_json_headers));
    PQclear(res);
    json_object_object_add(o, "too_many_limits",
        json_object_new_boolean(needed > RL_MAX_LIMITS));
    nu = json_object_new_array();
    for (i = 0; i < n; i++) {
        if (i == best || rules[i].always ||
            !rules_pattern_matches(rules[i].pattern, route))
            continue;
        by = rules_shadowed_by(rules, n, i);
        e = json_object_new_object();
        json_object_object_add(e, "rule", json_object_new_int64(rules[i].id));
        json_object_object_add(e, "route",
            json_object_new_string(rules[i].pattern));
        json_object_object_add(e, "shadowed_by", by >= 0 ?
            json_object_new_int64(rules[by].id) : NULL);
        json_object_array_add(nu, e);
    }
    json_object_object_add(o, "not_used", nu);
    ctl_db_json_print(o);
    return CTL_EXIT_OK;
}

/*
 * rule match TENANT ROUTE: what the service decides for a check of ROUTE,
 * and why -- the most specific rule, the "always" rules that join it, the
 * limits of each; then the rules that match but are not used.
 */
int
ctl_rule_match(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    static const char *const headers[] = { "RULE", "ROUTE", "PRIORITY",
        "ALWAYS", "WHY", "LIMIT_ID", "LIMIT", "ALGORITHM", "COUNT",
        "PARAMETERS" };
    const char *tenant = a->pos[0], *route = a->pos[1];
    char id[RL_UUID_LEN + 1], err[256], sql[4096], ids[1024], best_id[24];
    const char *params[3] = { id, ids, best_id };
    struct rl_rule *rules = NULL;
    size_t used = 0;
    long needed = 0;
    int i, n = 0, best, by, rc;

    if (validate_tenant_name("tenant name", tenant, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if (route[0] == '\0' || strlen(route) > RL_ROUTE_MAX)
        return ctl_usage_error(cmd, "ROUTE must be 1 to %d bytes",
            RL_ROUTE_MAX);
    if ((rc = ctl_db_connect(ctl)) != 0)
        return rc;
    if ((rc = ctl_db_tenant_id(ctl, tenant, id)) != 0)
        return rc;
    if (ctl_rule_guard_load(ctl, id, &rules, &n) == -1)
        return ctl_db_fail(ctl);
    if (n > RL_MAX_RULES) {
        free(rules);
        return ctl_fail("tenant %s has more than %d enabled rules: the "
            "service answers every check of it 503 misconfigured until "
            "some are removed", tenant, RL_MAX_RULES);
    }
    best = rules_match(rules, n, route);
    if (best < 0) {
        if (ctl_db_is_json()) {
            struct json_object *o = ctl_db_json_doc();

            json_object_object_add(o, "tenant",
                json_object_new_string(tenant));
            json_object_object_add(o, "route", json_object_new_string(route));
            json_object_object_add(o, "rule", NULL);
            json_object_object_add(o, "limits", json_object_new_array());
            json_object_object_add(o, "too_many_limits",
                json_object_new_boolean(0));
            json_object_object_add(o, "not_used", json_object_new_array());
            ctl_db_json_print(o);
        } else
            printf("no rule of %s matches %s: its checks are allowed "
                "without a Redis call\n", tenant, route);
        free(rules);
        return CTL_EXIT_OK;
    }
    snprintf(best_id, sizeof(best_id), "%lld", rules[best].id);
    ids[0] = '{';
    used = 1;
    for (i = 0; i < n; i++)
        if (i == best || (rules[i].always &&
            rules_pattern_matches(rules[i].pattern, route))) {
            snprintf(ids + used, sizeof(ids) - used, "%s%lld",
                used > 1 ? "," : "", rules[i].id);
            used += strlen(ids + used);
            needed += rules[i].nlimits;
        }
    snprintf(ids + used, sizeof(ids) - used, "}");
    if (!ctl_db_is_json())
        printf("route %s of tenant %s: rule %lld, the most specific match, "
            "and the \"always\" rules that match; their limits are "
            "decided together\n", route, tenant, rules[best].id);
    snprintf(sql, sizeof(sql), "SELECT r.id, r.route_pattern, r.priority, "
        "  CASE WHEN r.always THEN 'yes' ELSE 'no' END, "
        "  CASE WHEN r.id = $3::bigint THEN 'most-specific' "
        "       ELSE 'always' END, "
        "  l.id, l.name, l.algorithm, l.count_scope, ");
    used = strlen(sql);
    ctl_rule_params_sql(sql, sizeof(sql), &used);
    snprintf(sql + used, sizeof(sql) - used, " "
        "FROM rules r JOIN limits l ON l.rule_id = r.id "
        "WHERE r.tenant_id = $1::uuid AND r.id = ANY ($2::bigint[]) "
        "ORDER BY r.id <> $3::bigint, r.id, l.id");
    if (ctl_db_is_json()) {
        rc = ctl_rule_match_json(ctl, rules, n, best, route, tenant,
            params, needed);
        free(rules);
        return rc;
    }
    if ((rc = ctl_db_print_query(ctl, sql, 3, params, headers)) != 0) {
        free(rules);
        return rc;
    }
    if (needed > RL_MAX_LIMITS)
        printf("these are %ld limits, more than the %d one check decides: "
            "the service answers its checks 503 misconfigured\n", needed,
            RL_MAX_LIMITS);
    for (i = 0; i < n; i++) {
        if (i == best || rules[i].always ||
            !rules_pattern_matches(rules[i].pattern, route))
            continue;
        by = rules_shadowed_by(rules, n, i);
        if (by >= 0)
            printf("not used: rule %lld (%s) matches, but is shadowed by "
                "rule %lld (same pattern, chosen first)\n", rules[i].id,
                rules[i].pattern, rules[by].id);
        else
            printf("not used: rule %lld (%s) matches, but rule %lld is "
                "more specific or comes first\n", rules[i].id,
                rules[i].pattern, rules[best].id);
    }
    free(rules);
    return CTL_EXIT_OK;
}

int
ctl_rule_remove(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    const char *params[1] = { a->pos[0] };
    struct ctl_rule_guard g;
    long long id;
    int rc, n;

    if ((rc = ctl_db_parse_id_connect(ctl, cmd, "RULE_ID", a->pos[0],
        &id)) != 0)
        return rc;
    /* Guarded too: when two rules tie for a route, removing the winner
     * hands the route to the other one, which may have more limits. */
    if ((rc = ctl_rule_guard_begin_rule(ctl, &g, id)) != 0)
        return rc;
    /* The rule's limits go with it (ON DELETE CASCADE), atomically. */
    n = ctl_db_query_rows(ctl, "DELETE FROM rules WHERE id = $1::bigint "
        "RETURNING id", 1, params);
    if (n <= 0) {
        ctl_rule_guard_abort(ctl, &g);
        if (n == -1)
            return ctl_db_fail(ctl);
        return ctl_fail("no rule with id %lld", id);
    }
    if ((rc = ctl_rule_guard_end(ctl, &g)) != 0)
        return rc;
    printf("rule %lld removed\n", id);
    return CTL_EXIT_OK;
}

int
ctl_rule_limit_add(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    struct ctl_rule_limit_spec s;
    struct ctl_rule_guard g;
    const char *names[3] = { "id", "rule", "limit" };
    const char *values[3];
    char err[256], desc[160], rule[24];
    long long rule_id;
    PGresult *res;
    int rc;

    if (validate_id("RULE_ID", a->pos[0], &rule_id, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    snprintf(rule, sizeof(rule), "%lld", rule_id);
    if ((rc = ctl_rule_limit_spec(cmd, a, NULL, &s)) != 0)
        return rc;
    if ((rc = ctl_db_connect(ctl)) != 0)
        return rc;

    /* The trigger limits_per_rule_max counts the rule's limits under a
     * lock on the rule; the guard looks at the checks the rule is in. */
    if ((rc = ctl_rule_guard_begin_rule(ctl, &g, rule_id)) != 0)
        return rc;
    res = ctl_rule_insert_limit(ctl, rule, &s);
    if (res == NULL) {
        ctl_rule_guard_abort(ctl, &g);
        if (strcmp(ctl->constraint, "limits_name_unique") == 0)
            return ctl_fail("rule %lld already has a limit named \"%s\" "
                "(see '" CTL_NAME " rule list TENANT')", rule_id, s.name);
        if (strcmp(ctl->constraint, "limits_per_rule_max") == 0)
            return ctl_fail("%s: remove one first ('" CTL_NAME
                " limit remove LIMIT_ID')", ctl->err);
        return ctl_db_fail(ctl);
    }
    if ((rc = ctl_rule_guard_finish(ctl, &g, res, rule_id)) != CTL_EXIT_OK)
        return rc;
    ctl_rule_limit_describe(&s, desc, sizeof(desc));
    values[0] = PQgetvalue(res, 0, 0);
    values[1] = rule;
    values[2] = desc;
    ctl_db_print_fields(names, values, 3);
    PQclear(res);
    return CTL_EXIT_OK;
}

/*
 * limit remove: a rule keeps at least one limit.  The rule's row is locked
 * before its limits are counted, so two removals of a rule's last two
 * limits cannot both succeed.
 */
int
ctl_rule_limit_remove(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    const char *params[2];
    char rule_id[24], name[RL_NAME_MAX + 1];
    long long id, nlimits;
    PGresult *res;
    int rc;

    if ((rc = ctl_db_parse_id_connect(ctl, cmd, "LIMIT_ID", a->pos[0],
        &id)) != 0)
        return rc;

    params[0] = a->pos[0];
    if (ctl_db_begin(ctl) == -1)
        return ctl_db_fail(ctl);
    res = ctl_db_query(ctl, "SELECT rule_id FROM limits WHERE id = $1::bigint",
        1, params);
    if (res == NULL)
        goto db_err;
    if (PQntuples(res) == 0) {
        PQclear(res);
        ctl_db_rollback(ctl);
        return ctl_fail("no limit with id %lld", id);
    }
    snprintf(rule_id, sizeof(rule_id), "%s", PQgetvalue(res, 0, 0));
    PQclear(res);

    params[1] = rule_id;
    if (ctl_db_command(ctl, "SELECT 1 FROM rules WHERE id = $1::bigint "
        "FOR NO KEY UPDATE", 1, &params[1]) == -1 ||
        (res = ctl_db_query(ctl, "SELECT count(*) FROM limits "
        "WHERE rule_id = $1::bigint", 1, &params[1])) == NULL)
        goto db_err;
    nlimits = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    if (nlimits <= 1) {
        ctl_db_rollback(ctl);
        return ctl_fail("limit %lld is the last limit of rule %s, and a rule "
            "needs at least one: remove the whole rule with '" CTL_NAME
            " rule remove %s'", id, rule_id, rule_id);
    }

    res = ctl_db_query(ctl, "DELETE FROM limits "
        "WHERE id = $1::bigint AND rule_id = $2::bigint RETURNING name",
        2, params);
    if (res == NULL)
        goto db_err;
    if (PQntuples(res) == 0) {
        /* Removed or moved by someone else since the first look. */
        PQclear(res);
        ctl_db_rollback(ctl);
        return ctl_fail("no limit with id %lld in rule %s", id, rule_id);
    }
    snprintf(name, sizeof(name), "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    if (ctl_db_commit(ctl) == -1)
        goto db_err;
    printf("limit %lld (%s) removed from rule %s\n", id, name, rule_id);
    return CTL_EXIT_OK;

db_err:
    ctl_db_rollback(ctl);
    return ctl_db_fail(ctl);
}


int
ctl_rule_write_limit(struct ctl *ctl, const char *limit_id, const char *name,
    const char *count, const struct algo *alg, const struct rl_limit *l)
{
    const char *params[4 + 8];
    char sqlv[8][ALGO_TEXT_MAX], sql[1024], set[512], mark[64];
    const struct algo *other;
    const struct algo_param *mine;
    size_t used = 0;
    int i, j, k, np = 4;

    params[0] = limit_id;
    params[1] = name;
    params[2] = count;
    params[3] = alg->name;
    set[0] = '\0';
    /* Every parameter column of every algorithm: this one's values, the
     * others NULL. */
    for (i = 0; (other = algo_at(i)) != NULL; i++)
        for (j = 0; j < other->nparams; j++) {
            snprintf(mark, sizeof(mark), " %s = ", other->param[j].column);
            if (strstr(set, mark) != NULL)
                continue;       /* a column shared by algorithms */
            for (mine = NULL, k = 0; k < alg->nparams; k++)
                if (strcmp(alg->param[k].column,
                    other->param[j].column) == 0)
                    mine = &alg->param[k];
            if (mine == NULL) {
                used += (size_t)snprintf(set + used, sizeof(set) - used,
                    ",%sNULL", mark);
                continue;
            }
            if (np - 4 >= 8 || algo_param_text(mine, l, ALGO_TEXT_SQL,
                sqlv[np - 4], sizeof(sqlv[0])) == -1)
                return -2;
            params[np] = sqlv[np - 4];
            used += (size_t)snprintf(set + used, sizeof(set) - used,
                ",%s$%d::%s", mark, np + 1,
                mine->kind == ALGO_KIND_RATE ? "double precision" :
                mine->kind == ALGO_KIND_CALENDAR ? "text" : "bigint");
            np++;
        }
    snprintf(sql, sizeof(sql), "UPDATE limits SET name = coalesce($2, name), "
        "count_scope = coalesce($3, count_scope), algorithm = $4%s "
        "WHERE id = $1::bigint", set);
    return ctl_db_command(ctl, sql, np, params) == -1 ? -1 : 0;
}

/*
 * limit set LIMIT_ID [--name N] [--count C] [--algorithm A] [parameters]:
 * changes a limit in place (its counters in Redis stay, under the same
 * id).  Parameters not given keep their values; with another --algorithm,
 * that algorithm's parameters are required and the old ones are cleared.
 */
int
ctl_rule_limit_set(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    static const char *const names[] = { "id", "rule", "limit" };
    const char *name = ctl_args_value(cmd, a, "name");
    const char *count = ctl_args_value(cmd, a, "count");
    const char *algorithm = ctl_args_value(cmd, a, "algorithm");
    const char *typed[ALGO_MAX_PARAMS], *values[3], *params[1], *v;
    char text[ALGO_MAX_PARAMS][ALGO_TEXT_MAX];
    char err[256], desc[256], rule[24];
    char old_name[RL_NAME_MAX + 1], old_count[16], old_alg[32];
    struct ctl_rule_limit_spec s;
    const struct algo *alg, *other;
    const struct algo_param *p;
    long long id;
    PGresult *res;
    int i, j, rc, given = 0, changed_alg;

    if (validate_id("LIMIT_ID", a->pos[0], &id, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if (name != NULL && validate_limit_name("--name", name, err,
        sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if (count != NULL && validate_count("--count", count, err,
        sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if (algorithm != NULL && algo_find(algorithm) == NULL) {
        ctl_rule_algorithm_names(desc, sizeof(desc));
        return ctl_usage_error(cmd, "--algorithm: \"%s\" is not %s",
            algorithm, desc);
    }
    for (i = 0; (other = algo_at(i)) != NULL; i++)
        for (j = 0; j < other->nparams; j++)
            given |= ctl_args_value(cmd, a, other->param[j].option) != NULL;
    if (name == NULL && count == NULL && algorithm == NULL && !given)
        return ctl_usage_error(cmd, "nothing to set: give --name, --count, "
            "--algorithm or parameters of the limit's algorithm");
    if ((rc = ctl_db_connect(ctl)) != 0)
        return rc;
    if (ctl_db_begin(ctl) == -1)
        return ctl_db_fail(ctl);
    params[0] = a->pos[0];
    res = ctl_db_query(ctl, "SELECT l.rule_id, l.algorithm, "
        CTL_LIMIT_PARAMS_SQL ", l.name, l.count_scope "
        "FROM limits l WHERE l.id = $1::bigint FOR UPDATE", 1, params);
    if (res == NULL)
        goto db_err;
    if (PQntuples(res) == 0) {
        PQclear(res);
        ctl_db_rollback(ctl);
        return ctl_fail("no limit with id %lld", id);
    }
    memset(&s, 0, sizeof(s));
    snprintf(rule, sizeof(rule), "%s", PQgetvalue(res, 0, 0));
    snprintf(old_alg, sizeof(old_alg), "%s", PQgetvalue(res, 0, 1));
    snprintf(old_name, sizeof(old_name), "%s", PQgetvalue(res, 0, 9));
    snprintf(old_count, sizeof(old_count), "%s", PQgetvalue(res, 0, 10));
    changed_alg = algorithm != NULL && strcmp(algorithm, old_alg) != 0;
    if (!changed_alg) {
        ctl_db_limit_params(res, 0, 2, &s.limit);
    }
    PQclear(res);
    if ((alg = algo_find(changed_alg ? algorithm : old_alg)) == NULL) {
        ctl_db_rollback(ctl);
        return ctl_fail("limit %lld has an unknown algorithm", id);
    }
    s.algorithm = alg;
    s.limit.algorithm = alg->id;
    if ((rc = ctl_rule_foreign_options(cmd, a, alg)) != 0) {
        ctl_db_rollback(ctl);
        return rc;
    }
    for (i = 0; i < alg->nparams; i++) {
        p = &alg->param[i];
        typed[i] = ctl_args_value(cmd, a, p->option);
        if (typed[i] == NULL && changed_alg && !p->optional) {
            ctl_db_rollback(ctl);
            algo_takes(alg, err, sizeof(err));
            return ctl_usage_error(cmd, "%s needs %s (--%s is missing)",
                alg->name, err, p->option);
        }
        if (typed[i] != NULL) {
            if ((v = ctl_args_param_text(p, typed[i], text[i],
                sizeof(text[i]), err, sizeof(err))) == NULL ||
                algo_param_parse(p, v, &s.limit, err, sizeof(err)) == -1) {
                ctl_db_rollback(ctl);
                return ctl_usage_error(cmd, "%s", err);
            }
        } else {
            algo_param_text(p, &s.limit, ALGO_TEXT_HUMAN, text[i],
                sizeof(text[i]));
            typed[i] = text[i];
        }
    }
    if (alg->check != NULL && alg->check(&s.limit, typed, err,
        sizeof(err)) == -1) {
        ctl_db_rollback(ctl);
        return ctl_usage_error(cmd, "%s", err);
    }

    if ((rc = ctl_rule_write_limit(ctl, a->pos[0], name, count, alg,
        &s.limit)) != 0) {
        if (rc == -1 && strcmp(ctl->constraint, "limits_name_unique") == 0) {
            ctl_db_rollback(ctl);
            return ctl_fail("rule %s already has a limit named \"%s\"",
                rule, name);
        }
        if (rc == -1)
            goto db_err;
        ctl_db_rollback(ctl);
        return ctl_fail("limit parameter out of range");
    }
    if (ctl_db_commit(ctl) == -1)
        return ctl_db_fail(ctl);
    s.name = name != NULL ? name : old_name;
    s.count = count != NULL ? count : old_count;
    s.limit.count = algo_count_parse(s.count);
    ctl_rule_limit_describe(&s, desc, sizeof(desc));
    values[0] = a->pos[0];
    values[1] = rule;
    values[2] = desc;
    ctl_db_print_fields(names, values, 3);
    return CTL_EXIT_OK;
db_err:
    ctl_db_rollback(ctl);
    return ctl_db_fail(ctl);
}
