/*
 * ctl_rule.c -- the rule commands of ratelimitctl: rule add, set, list,
 * match and remove.
 *
 * A rule is a route pattern of a tenant with its switches (enabled,
 * always, shadow, failure mode, per) and one to RL_MAX_LIMITS limits
 * (ctl_limit.c: a limit's options and the limit commands).
 *
 * A change of the rules after which some route's check would need more
 * limits than one check decides (RL_MAX_LIMITS) is refused with status 2
 * and nothing changed: the plan guard (ctl_guard.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "ctl.h"

/* What "rule add" stores in rules, and its first limit. */
struct ctl_rule_spec {
    const char *tenant;
    const char *route;
    const char *failure_mode;
    const char *per;
    int shadow;
    int always;
    char priority[24];
    struct ctl_limit_spec limit;
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
    if ((rc = ctl_limit_spec_parse(cmd, a, "default", &spec->limit)) != 0)
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
    struct ctl_guard g;
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

    if ((rc = ctl_guard_begin_tenant(ctl, &g, s.tenant)) != 0)
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
            ctl_guard_abort(ctl, &g);
            return ctl_db_fail(ctl);
        }
        if (PQntuples(res) > 0) {
            snprintf(rule_id, sizeof(rule_id), "%s", PQgetvalue(res, 0, 0));
            PQclear(res);
            ctl_guard_abort(ctl, &g);
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
        ctl_guard_abort(ctl, &g);
        return ctl_db_fail(ctl);
    }
    snprintf(rule_id, sizeof(rule_id), "%s", PQgetvalue(res, 0, 0));
    PQclear(res);

    res = ctl_limit_insert(ctl, rule_id, &s.limit);
    if (res == NULL) {
        ctl_guard_abort(ctl, &g);
        return ctl_db_fail(ctl);
    }
    PQclear(res);
    if ((rc = ctl_guard_end(ctl, &g)) != 0)
        return rc;

    ctl_limit_describe(&s.limit, desc, sizeof(desc));
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
    struct ctl_guard g;
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
    if ((rc = ctl_guard_begin_rule(ctl, &g, id)) != 0)
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
        ctl_guard_abort(ctl, &g);
        return ctl_db_fail(ctl);
    }
    if ((rc = ctl_guard_finish(ctl, &g, res, id)) != CTL_EXIT_OK)
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
    if (ctl_guard_load(ctl, id, &rules, &n) == -1)
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
    struct ctl_guard g;
    long long id;
    int rc, n;

    if ((rc = ctl_db_parse_id_connect(ctl, cmd, "RULE_ID", a->pos[0],
        &id)) != 0)
        return rc;
    /* Guarded too: when two rules tie for a route, removing the winner
     * hands the route to the other one, which may have more limits. */
    if ((rc = ctl_guard_begin_rule(ctl, &g, id)) != 0)
        return rc;
    /* The rule's limits go with it (ON DELETE CASCADE), atomically. */
    n = ctl_db_query_rows(ctl, "DELETE FROM rules WHERE id = $1::bigint "
        "RETURNING id", 1, params);
    if (n <= 0) {
        ctl_guard_abort(ctl, &g);
        if (n == -1)
            return ctl_db_fail(ctl);
        return ctl_fail("no rule with id %lld", id);
    }
    if ((rc = ctl_guard_end(ctl, &g)) != 0)
        return rc;
    printf("rule %lld removed\n", id);
    return CTL_EXIT_OK;
}
