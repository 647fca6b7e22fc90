/*
 * ctl_apply.c -- a tenant's rules as a JSON file: tenant export and
 * tenant apply, so that the rules can live in version control.
 *
 *   {"tenant": "acme", "rules": [
 *     {"route": "/api/x", "priority": 0, "enabled": true, "always": false,
 *      "shadow": false, "failure_mode": "closed", "per": "rule",
 *      "limits": [{"name": "burst", "algorithm": "gcra", "limit": 10,
 *                  "period_us": 1000000, "burst": 5, "count": "subject"}]}]}
 *
 * A limit's parameters carry the names of the config API (algo.c's table:
 * capacity, refill_rate, limit, window_seconds, period_us, burst,
 * calendar).  Keys are not part of it: they are secrets.
 *
 * apply makes the tenant's rules what the file says, and nothing more:
 * a rule of the file is the existing rule with its route, "always" and
 * priority (the first one not taken yet), whose switches are set and whose
 * limits are matched by name, changed in place when they differ (their
 * counters stay), added or removed; other rules of the tenant are
 * removed; rules of the file that match none are added.  Applying the same
 * file twice changes nothing the second time.  Everything happens in one
 * transaction under the plan guard (ctl_rule.c); --dry-run prints the
 * same changes and rolls back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "ctl.h"

#define APPLY_MAX_RULES RL_MAX_RULES

struct apply_limit {
    long long id;               /* existing: its id; wanted: 0 */
    char name[RL_NAME_MAX + 1];
    const struct algo *alg;
    struct rl_limit l;
    int taken;
};

struct apply_rule {
    long long id;
    char route[RL_ROUTE_MAX + 1];
    int priority, enabled, always, shadow;
    char failure_mode[8], per[8];
    struct apply_limit limits[RL_MAX_LIMITS];
    int nlimits;
    int taken;
};

/* ------------------------------------------------------------------ */
/* Reading the database */

/* Reads the tenant's rules (all of them, disabled ones too) with their
 * limits.  Returns the number, or -1 (error in ctl). */
static int
apply_load(struct ctl *ctl, const char *tenant_id, struct apply_rule *rules,
    int max)
{
    const char *params[1] = { tenant_id };
    struct apply_rule *r = NULL;
    struct apply_limit *al;
    PGresult *res;
    long long id;
    int i, n = 0;

    res = ctl_db_query(ctl, "SELECT r.id, r.route_pattern, r.priority, "
        "r.enabled, r.always, r.shadow, r.failure_mode, r.per, l.id, l.name, "
        "l.algorithm, " CTL_LIMIT_PARAMS_SQL ", l.count_scope "
        "FROM rules r LEFT JOIN limits l ON l.rule_id = r.id "
        "WHERE r.tenant_id = $1::uuid ORDER BY r.id, l.id", 1, params);
    if (res == NULL)
        return -1;
    for (i = 0; i < PQntuples(res); i++) {
        id = strtoll(PQgetvalue(res, i, 0), NULL, 10);
        if (r == NULL || r->id != id) {
            if (n == max)
                break;
            r = &rules[n++];
            memset(r, 0, sizeof(*r));
            r->id = id;
            util_copy(r->route, sizeof(r->route), PQgetvalue(res, i, 1));
            r->priority = atoi(PQgetvalue(res, i, 2));
            r->enabled = PQgetvalue(res, i, 3)[0] == 't';
            r->always = PQgetvalue(res, i, 4)[0] == 't';
            r->shadow = PQgetvalue(res, i, 5)[0] == 't';
            snprintf(r->failure_mode, sizeof(r->failure_mode), "%s",
                PQgetvalue(res, i, 6));
            snprintf(r->per, sizeof(r->per), "%s", PQgetvalue(res, i, 7));
        }
        if (PQgetisnull(res, i, 8) || r->nlimits == RL_MAX_LIMITS)
            continue;
        al = &r->limits[r->nlimits++];
        al->id = strtoll(PQgetvalue(res, i, 8), NULL, 10);
        snprintf(al->name, sizeof(al->name), "%s", PQgetvalue(res, i, 9));
        al->alg = algo_find(PQgetvalue(res, i, 10));
        al->l.algorithm = al->alg != NULL ? al->alg->id : 0;
        ctl_db_limit_params(res, i, 11, &al->l);
        al->l.count = algo_count_parse(PQgetvalue(res, i, 18));
        util_copy(al->l.name, sizeof(al->l.name), PQgetvalue(res, i, 9));
    }
    PQclear(res);
    return n;
}

static struct json_object *
apply_rule_json(const struct apply_rule *r)
{
    struct json_object *o = json_object_new_object(), *ls, *lo;
    int i;

    json_object_object_add(o, "route", json_object_new_string(r->route));
    json_object_object_add(o, "priority", json_object_new_int(r->priority));
    json_object_object_add(o, "enabled", json_object_new_boolean(r->enabled));
    json_object_object_add(o, "always", json_object_new_boolean(r->always));
    json_object_object_add(o, "shadow", json_object_new_boolean(r->shadow));
    json_object_object_add(o, "failure_mode",
        json_object_new_string(r->failure_mode));
    json_object_object_add(o, "per", json_object_new_string(r->per));
    ls = json_object_new_array();
    for (i = 0; i < r->nlimits; i++) {
        lo = json_object_new_object();
        json_object_object_add(lo, "name",
            json_object_new_string(r->limits[i].name));
        json_object_object_add(lo, "algorithm", json_object_new_string(
            r->limits[i].alg != NULL ? r->limits[i].alg->name : "unknown"));
        algo_json_add(lo, &r->limits[i].l);
        json_object_array_add(ls, lo);
    }
    json_object_object_add(o, "limits", ls);
    return o;
}

int
ctl_tenant_export(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    static struct apply_rule rules[APPLY_MAX_RULES];
    struct json_object *o, *rs;
    char id[RL_UUID_LEN + 1], err[256];
    int i, n, rc;

    if (validate_tenant_name("tenant name", a->pos[0], err,
        sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if ((rc = ctl_db_connect(ctl)) != 0)
        return rc;
    if ((rc = ctl_db_tenant_id(ctl, a->pos[0], id)) != 0)
        return rc;
    if ((n = apply_load(ctl, id, rules, APPLY_MAX_RULES)) == -1)
        return ctl_db_fail(ctl);
    o = json_object_new_object();
    json_object_object_add(o, "tenant", json_object_new_string(a->pos[0]));
    rs = json_object_new_array();
    for (i = 0; i < n; i++)
        json_object_array_add(rs, apply_rule_json(&rules[i]));
    json_object_object_add(o, "rules", rs);
    puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
        JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
    return CTL_EXIT_OK;
}

/* ------------------------------------------------------------------ */
/* Reading the file */

/* Member name of o as a string, or def when absent; NULL when it is there
 * but not a string. */
static const char *
apply_str(struct json_object *o, const char *name, const char *def)
{
    struct json_object *v;

    if (!json_object_object_get_ex(o, name, &v))
        return def;
    return json_object_is_type(v, json_type_string) ?
        json_object_get_string(v) : NULL;
}

/* Member name of o as a boolean (def when absent); -1 when not one. */
static int
apply_bool(struct json_object *o, const char *name, int def)
{
    struct json_object *v;

    if (!json_object_object_get_ex(o, name, &v))
        return def;
    return json_object_is_type(v, json_type_boolean) ?
        json_object_get_boolean(v) : -1;
}

/* One limit of the file into al; 0, or -1 with err. */
static int
apply_read_limit(struct json_object *lo, struct apply_limit *al, char *err,
    size_t errlen)
{
    const char *name = apply_str(lo, "name", NULL);
    const char *alg = apply_str(lo, "algorithm", NULL);
    const char *count = apply_str(lo, "count", "subject");
    const char *typed[ALGO_MAX_PARAMS];
    char text[ALGO_MAX_PARAMS][ALGO_TEXT_MAX];
    const struct algo_param *p;
    struct json_object *v;
    int i;

    memset(al, 0, sizeof(*al));
    if (name == NULL || validate_limit_name("name", name, err, errlen) == -1)
        return name == NULL ? (snprintf(err, errlen, "a limit needs a "
            "\"name\""), -1) : -1;
    snprintf(al->name, sizeof(al->name), "%s", name);
    if (alg == NULL || (al->alg = algo_find(alg)) == NULL) {
        snprintf(err, errlen, "limit %s: \"algorithm\" must be one of "
            "token_bucket, sliding_window, gcra, fixed_window", name);
        return -1;
    }
    al->l.algorithm = al->alg->id;
    for (i = 0; i < al->alg->nparams; i++) {
        p = &al->alg->param[i];
        if (!json_object_object_get_ex(lo, p->json, &v)) {
            if (!p->optional) {
                snprintf(err, errlen, "limit %s: %s needs \"%s\"", name,
                    al->alg->name, p->json);
                return -1;
            }
            snprintf(text[i], sizeof(text[i]), "0");
        } else if (p->kind == ALGO_KIND_CALENDAR &&
            json_object_is_type(v, json_type_string))
            snprintf(text[i], sizeof(text[i]), "%s",
                json_object_get_string(v));
        else if (p->kind == ALGO_KIND_RATE &&
            (json_object_is_type(v, json_type_double) ||
            json_object_is_type(v, json_type_int)))
            snprintf(text[i], sizeof(text[i]), "%.6f",
                json_object_get_double(v));
        else if (p->kind != ALGO_KIND_CALENDAR &&
            json_object_is_type(v, json_type_int))
            snprintf(text[i], sizeof(text[i]), "%lld%s",
                (long long)json_object_get_int64(v),
                p->kind == ALGO_KIND_DURATION ? "us" : "");
        else {
            snprintf(err, errlen, "limit %s: \"%s\" has the wrong type",
                name, p->json);
            return -1;
        }
        typed[i] = text[i];
        if (algo_param_parse(p, text[i], &al->l, err, errlen) == -1)
            return -1;
    }
    if (al->alg->check != NULL && al->alg->check(&al->l, typed, err,
        errlen) == -1)
        return -1;
    if (count == NULL || validate_count("count", count, err, errlen) == -1)
        return count == NULL ? (snprintf(err, errlen, "limit %s: \"count\" "
            "must be a string", name), -1) : -1;
    al->l.count = algo_count_parse(count);
    snprintf(al->l.name, sizeof(al->l.name), "%s", name);
    return 0;
}

/* One rule of the file into r; 0, or -1 with err. */
static int
apply_read_rule(struct json_object *ro, struct apply_rule *r, char *err,
    size_t errlen)
{
    const char *route = apply_str(ro, "route", NULL);
    const char *fm = apply_str(ro, "failure_mode", "closed");
    const char *per = apply_str(ro, "per", "rule");
    struct json_object *v, *ls;
    char e2[200];
    long long prio = 0;
    size_t i, n;
    int j;

    memset(r, 0, sizeof(*r));
    if (route == NULL || validate_route("route", route, err, errlen) == -1)
        return route == NULL ? (snprintf(err, errlen, "a rule needs a "
            "\"route\""), -1) : -1;
    snprintf(r->route, sizeof(r->route), "%s", route);
    if (json_object_object_get_ex(ro, "priority", &v)) {
        if (!json_object_is_type(v, json_type_int) ||
            (prio = json_object_get_int64(v)) < -VALIDATE_PRIORITY_MAX ||
            prio > VALIDATE_PRIORITY_MAX) {
            snprintf(err, errlen, "rule %s: \"priority\" must be a whole "
                "number from -%d to %d", route, VALIDATE_PRIORITY_MAX,
                VALIDATE_PRIORITY_MAX);
            return -1;
        }
    }
    r->priority = (int)prio;
    r->enabled = apply_bool(ro, "enabled", 1);
    r->always = apply_bool(ro, "always", 0);
    r->shadow = apply_bool(ro, "shadow", 0);
    if (r->enabled < 0 || r->always < 0 || r->shadow < 0) {
        snprintf(err, errlen, "rule %s: enabled, always and shadow are "
            "true or false", route);
        return -1;
    }
    if (fm == NULL || validate_failure_mode("failure_mode", fm, err,
        errlen) == -1 || per == NULL || validate_per("per", per, err,
        errlen) == -1) {
        if (fm == NULL || per == NULL)
            snprintf(err, errlen, "rule %s: failure_mode and per are "
                "strings", route);
        return -1;
    }
    snprintf(r->failure_mode, sizeof(r->failure_mode), "%s", fm);
    snprintf(r->per, sizeof(r->per), "%s", per);
    if (!json_object_object_get_ex(ro, "limits", &ls) ||
        !json_object_is_type(ls, json_type_array) ||
        (n = json_object_array_length(ls)) < 1 || n > RL_MAX_LIMITS) {
        snprintf(err, errlen, "rule %s: \"limits\" must list 1 to %d limits",
            route, RL_MAX_LIMITS);
        return -1;
    }
    for (i = 0; i < n; i++) {
        if (apply_read_limit(json_object_array_get_idx(ls, i),
            &r->limits[i], e2, sizeof(e2)) == -1) {
            snprintf(err, errlen, "rule %s: %s", route, e2);
            return -1;
        }
        for (j = 0; j < (int)i; j++)
            if (strcmp(r->limits[j].name, r->limits[i].name) == 0) {
                snprintf(err, errlen, "rule %s: two limits are named %s",
                    route, r->limits[i].name);
                return -1;
            }
    }
    r->nlimits = (int)n;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Applying */

static void
apply_describe(const struct apply_limit *al, char *buf, size_t len)
{
    struct ctl_rule_limit_spec s;

    memset(&s, 0, sizeof(s));
    s.name = al->name;
    s.count = algo_count_name(al->l.count);
    s.algorithm = al->alg;
    s.limit = al->l;
    ctl_rule_limit_describe(&s, buf, len);
}

/* Whether two limits decide alike (algorithm, parameters, count). */
static int
apply_same_limit(const struct apply_limit *a, const struct apply_limit *b)
{
    char ta[ALGO_TEXT_MAX], tb[ALGO_TEXT_MAX];
    int i;

    if (a->alg != b->alg || a->l.count != b->l.count)
        return 0;
    for (i = 0; i < a->alg->nparams; i++) {
        algo_param_text(&a->alg->param[i], &a->l, ALGO_TEXT_SQL, ta,
            sizeof(ta));
        algo_param_text(&a->alg->param[i], &b->l, ALGO_TEXT_SQL, tb,
            sizeof(tb));
        if (strcmp(ta, tb) != 0)
            return 0;
    }
    return 1;
}

static int
apply_insert_limit(struct ctl *ctl, long long rule_id,
    const struct apply_limit *al)
{
    struct ctl_rule_limit_spec s;
    char rule[24];
    PGresult *res;

    memset(&s, 0, sizeof(s));
    s.name = al->name;
    s.count = algo_count_name(al->l.count);
    s.algorithm = al->alg;
    s.limit = al->l;
    snprintf(rule, sizeof(rule), "%lld", rule_id);
    if ((res = ctl_rule_insert_limit(ctl, rule, &s)) == NULL)
        return -1;
    PQclear(res);
    return 0;
}

/* Makes existing rule have (the switches and limits of) want.  Prints
 * the changes; counts them in *changes. */
static int
apply_update_rule(struct ctl *ctl, struct apply_rule *have,
    const struct apply_rule *want, int *changes)
{
    char id[24], lid[24], d1[256], d2[256];
    const char *params[5];
    struct apply_limit *hl;
    int i, j;

    snprintf(id, sizeof(id), "%lld", have->id);
    if (have->enabled != want->enabled || have->shadow != want->shadow ||
        strcmp(have->failure_mode, want->failure_mode) != 0 ||
        strcmp(have->per, want->per) != 0) {
        printf("~ rule %s (%s): enabled %s, shadow %s, failure_mode %s, "
            "per %s\n", id, want->route, want->enabled ? "on" : "off",
            want->shadow ? "on" : "off", want->failure_mode, want->per);
        params[0] = id;
        params[1] = want->enabled ? "true" : "false";
        params[2] = want->shadow ? "true" : "false";
        params[3] = want->failure_mode;
        params[4] = want->per;
        if (ctl_db_command(ctl, "UPDATE rules SET enabled = $2::boolean, "
            "shadow = $3::boolean, failure_mode = $4, per = $5 "
            "WHERE id = $1::bigint", 5, params) == -1)
            return -1;
        (*changes)++;
    }
    for (i = 0; i < want->nlimits; i++) {
        for (hl = NULL, j = 0; j < have->nlimits; j++)
            if (strcmp(have->limits[j].name, want->limits[i].name) == 0)
                hl = &have->limits[j];
        apply_describe(&want->limits[i], d2, sizeof(d2));
        if (hl == NULL) {
            printf("+ rule %s (%s): limit %s\n", id, want->route, d2);
            if (apply_insert_limit(ctl, have->id, &want->limits[i]) == -1)
                return -1;
            (*changes)++;
            continue;
        }
        hl->taken = 1;
        if (hl->alg != NULL && apply_same_limit(hl, &want->limits[i]))
            continue;
        if (hl->alg != NULL)
            apply_describe(hl, d1, sizeof(d1));
        else
            snprintf(d1, sizeof(d1), "%s: unknown", hl->name);
        printf("~ rule %s (%s): limit %lld %s -> %s\n", id, want->route,
            hl->id, d1, d2);
        snprintf(lid, sizeof(lid), "%lld", hl->id);
        if (ctl_rule_write_limit(ctl, lid, NULL,
            algo_count_name(want->limits[i].l.count), want->limits[i].alg,
            &want->limits[i].l) != 0)
            return -1;
        (*changes)++;
    }
    for (j = 0; j < have->nlimits; j++)
        if (!have->limits[j].taken) {
            printf("- rule %s (%s): limit %lld %s\n", id, have->route,
                have->limits[j].id, have->limits[j].name);
            snprintf(lid, sizeof(lid), "%lld", have->limits[j].id);
            params[0] = lid;
            if (ctl_db_command(ctl, "DELETE FROM limits WHERE id = "
                "$1::bigint", 1, params) == -1)
                return -1;
            (*changes)++;
        }
    return 0;
}

static int
apply_add_rule(struct ctl *ctl, const char *tenant_id,
    const struct apply_rule *want)
{
    char prio[24], d[256];
    const char *params[8];
    PGresult *res;
    long long id;
    int i;

    snprintf(prio, sizeof(prio), "%d", want->priority);
    params[0] = tenant_id;
    params[1] = want->route;
    params[2] = prio;
    params[3] = want->shadow ? "true" : "false";
    params[4] = want->failure_mode;
    params[5] = want->per;
    params[6] = want->always ? "true" : "false";
    params[7] = want->enabled ? "true" : "false";
    res = ctl_db_query(ctl, "INSERT INTO rules (tenant_id, route_pattern, "
        "priority, shadow, failure_mode, per, always, enabled) VALUES "
        "($1::uuid, $2, $3::integer, $4::boolean, $5, $6, $7::boolean, "
        "$8::boolean) RETURNING id", 8, params);
    if (res == NULL)
        return -1;
    id = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    printf("+ rule %lld (%s, priority %d%s%s)\n", id, want->route,
        want->priority, want->always ? ", always" : "",
        want->enabled ? "" : ", disabled");
    for (i = 0; i < want->nlimits; i++) {
        apply_describe(&want->limits[i], d, sizeof(d));
        printf("+ rule %lld (%s): limit %s\n", id, want->route, d);
        if (apply_insert_limit(ctl, id, &want->limits[i]) == -1)
            return -1;
    }
    return 0;
}

int
ctl_tenant_apply(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    static struct apply_rule want[APPLY_MAX_RULES], have[APPLY_MAX_RULES];
    int dry = ctl_args_flag(cmd, a, "dry-run");
    struct json_object *doc, *rs;
    const char *tenant, *params[1];
    char err[512], id[24];
    struct ctl_rule_guard g;
    int i, j, nwant, nhave, changes = 0, rc;
    size_t n;

    if ((doc = json_object_from_file(a->pos[0])) == NULL)
        return ctl_fail("%s: %s", a->pos[0], json_util_get_last_err());
    if (!json_object_is_type(doc, json_type_object) ||
        (tenant = apply_str(doc, "tenant", NULL)) == NULL ||
        validate_tenant_name("tenant", tenant, err, sizeof(err)) == -1 ||
        !json_object_object_get_ex(doc, "rules", &rs) ||
        !json_object_is_type(rs, json_type_array) ||
        (n = json_object_array_length(rs)) > APPLY_MAX_RULES) {
        json_object_put(doc);
        return ctl_usage_error(cmd, "%s: expected {\"tenant\": NAME, "
            "\"rules\": [at most %d rules]}", a->pos[0], APPLY_MAX_RULES);
    }
    for (i = 0; i < (int)n; i++)
        if (apply_read_rule(json_object_array_get_idx(rs, (size_t)i),
            &want[i], err, sizeof(err)) == -1) {
            json_object_put(doc);
            return ctl_usage_error(cmd, "%s: rule %d: %s", a->pos[0], i + 1,
                err);
        }
    nwant = (int)n;
    if ((rc = ctl_db_connect(ctl)) != 0)
        goto out;
    /* A new tenant is added first; a dry run only says it would be. */
    params[0] = tenant;
    if ((n = (size_t)ctl_db_query_rows(ctl, "SELECT 1 FROM tenants WHERE "
        "name = $1", 1, params)) == (size_t)-1) {
        rc = ctl_db_fail(ctl);
        goto out;
    }
    if (n == 0 && dry) {
        printf("+ tenant %s\n", tenant);
        for (i = 0; i < nwant; i++)
            printf("+ rule (%s, priority %d%s) with %d limit%s\n",
                want[i].route, want[i].priority,
                want[i].always ? ", always" : "", want[i].nlimits,
                want[i].nlimits == 1 ? "" : "s");
        printf("%s: %d changes (dry run: nothing written)\n", tenant,
            nwant + 1);
        rc = CTL_EXIT_OK;
        goto out;
    }
    if (n == 0 && ctl_db_command(ctl, "INSERT INTO tenants (name) VALUES "
        "($1) ON CONFLICT (name) DO NOTHING", 1, params) == -1) {
        rc = ctl_db_fail(ctl);
        goto out;
    }
    if (n == 0)
        printf("+ tenant %s\n", tenant);
    if ((rc = ctl_rule_guard_begin_tenant(ctl, &g, tenant)) != 0)
        goto out;
    if ((nhave = apply_load(ctl, g.tenant_id, have, APPLY_MAX_RULES)) == -1)
        goto db_err;
    for (i = 0; i < nwant; i++) {
        for (j = 0; j < nhave; j++)
            if (!have[j].taken && strcmp(have[j].route, want[i].route) == 0
                && have[j].always == want[i].always &&
                have[j].priority == want[i].priority)
                break;
        if (j < nhave) {
            have[j].taken = 1;
            if (apply_update_rule(ctl, &have[j], &want[i], &changes) == -1)
                goto db_err;
        } else {
            if (apply_add_rule(ctl, g.tenant_id, &want[i]) == -1)
                goto db_err;
            changes++;
        }
    }
    for (j = 0; j < nhave; j++)
        if (!have[j].taken) {
            printf("- rule %lld (%s) with its limits\n", have[j].id,
                have[j].route);
            snprintf(id, sizeof(id), "%lld", have[j].id);
            params[0] = id;
            if (ctl_db_command(ctl, "DELETE FROM rules WHERE id = "
                "$1::bigint", 1, params) == -1)
                goto db_err;
            changes++;
        }
    if (dry || changes == 0) {
        ctl_rule_guard_abort(ctl, &g);
        printf("%s: %d change%s%s\n", tenant, changes, changes == 1 ? "" :
            "s", dry && changes > 0 ? " (dry run: nothing written)" : "");
        rc = CTL_EXIT_OK;
        goto out;
    }
    if ((rc = ctl_rule_guard_end(ctl, &g)) == CTL_EXIT_OK)
        printf("%s: %d change%s applied\n", tenant, changes,
            changes == 1 ? "" : "s");
    goto out;
db_err:
    ctl_rule_guard_abort(ctl, &g);
    rc = ctl_db_fail(ctl);
out:
    json_object_put(doc);
    return rc;
}
