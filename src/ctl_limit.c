/*
 * ctl_limit.c -- a limit as ratelimitctl takes it, and the limit commands.
 *
 * A limit is a name, an algorithm and exactly that algorithm's parameters
 * (schema/002_limits.sql enforces the same, whoever writes to the tables);
 * the options that set them, their columns and bounds are algo.c's table.
 * The options are checked here for rule add (ctl_rule.c) and limit add,
 * and written for rule add, limit add, limit set and tenant apply.  A
 * limit added goes through the plan guard (ctl_guard.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

/* ------------------------------------------------------------------ */
/* One limit's options */

/* Writes the names of the algorithms as "a, b, c or d" into buf, for
 * messages. */
static void
ctl_limit_algorithm_names(char *buf, size_t len)
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
ctl_limit_takes(const struct algo *a, const char *opt)
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
ctl_limit_foreign_options(const struct ctl_command *cmd,
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
                seen = ctl_limit_takes(algo_at(k), opt);
            if (seen || ctl_args_value(cmd, a, opt) == NULL ||
                ctl_limit_takes(alg, opt))
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
int
ctl_limit_spec_parse(const struct ctl_command *cmd, const struct ctl_args *a,
    const char *default_name, struct ctl_limit_spec *spec)
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

    ctl_limit_algorithm_names(names, sizeof(names));
    if (algorithm == NULL)
        return ctl_usage_error(cmd, "missing --algorithm (%s)", names);
    if ((alg = algo_find(algorithm)) == NULL)
        return ctl_usage_error(cmd, "--algorithm: \"%s\" is not %s",
            algorithm, names);
    spec->algorithm = alg;
    spec->limit.algorithm = alg->id;

    if ((rc = ctl_limit_foreign_options(cmd, a, alg)) != 0)
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
ctl_limit_describe(const struct ctl_limit_spec *s, char *buf,
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
ctl_limit_insert(struct ctl *ctl, const char *rule_id,
    const struct ctl_limit_spec *s)
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

/* ------------------------------------------------------------------ */
/* limit add, limit remove, limit set */

int
ctl_limit_add(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    struct ctl_limit_spec s;
    struct ctl_guard g;
    const char *names[3] = { "id", "rule", "limit" };
    const char *values[3];
    char err[256], desc[160], rule[24];
    long long rule_id;
    PGresult *res;
    int rc;

    if (validate_id("RULE_ID", a->pos[0], &rule_id, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    snprintf(rule, sizeof(rule), "%lld", rule_id);
    if ((rc = ctl_limit_spec_parse(cmd, a, NULL, &s)) != 0)
        return rc;
    if ((rc = ctl_db_connect(ctl)) != 0)
        return rc;

    /* The trigger limits_per_rule_max counts the rule's limits under a
     * lock on the rule; the guard looks at the checks the rule is in. */
    if ((rc = ctl_guard_begin_rule(ctl, &g, rule_id)) != 0)
        return rc;
    res = ctl_limit_insert(ctl, rule, &s);
    if (res == NULL) {
        ctl_guard_abort(ctl, &g);
        if (strcmp(ctl->constraint, "limits_name_unique") == 0)
            return ctl_fail("rule %lld already has a limit named \"%s\" "
                "(see '" CTL_NAME " rule list TENANT')", rule_id, s.name);
        if (strcmp(ctl->constraint, "limits_per_rule_max") == 0)
            return ctl_fail("%s: remove one first ('" CTL_NAME
                " limit remove LIMIT_ID')", ctl->err);
        return ctl_db_fail(ctl);
    }
    if ((rc = ctl_guard_finish(ctl, &g, res, rule_id)) != CTL_EXIT_OK)
        return rc;
    ctl_limit_describe(&s, desc, sizeof(desc));
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
ctl_limit_remove(struct ctl *ctl, const struct ctl_command *cmd,
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
ctl_limit_write(struct ctl *ctl, const char *limit_id, const char *name,
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
ctl_limit_set(struct ctl *ctl, const struct ctl_command *cmd,
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
    struct ctl_limit_spec s;
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
        ctl_limit_algorithm_names(desc, sizeof(desc));
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
    if ((rc = ctl_limit_foreign_options(cmd, a, alg)) != 0) {
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

    if ((rc = ctl_limit_write(ctl, a->pos[0], name, count, alg,
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
    ctl_limit_describe(&s, desc, sizeof(desc));
    values[0] = a->pos[0];
    values[1] = rule;
    values[2] = desc;
    ctl_db_print_fields(names, values, 3);
    return CTL_EXIT_OK;
db_err:
    ctl_db_rollback(ctl);
    return ctl_db_fail(ctl);
}
