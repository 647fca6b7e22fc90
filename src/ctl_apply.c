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
 * file twice changes nothing the second time.  The file is checked whole
 * first (see "Reading the file"): a mistake in it exits 2, and nothing
 * is written.  Everything happens in one
 * transaction under the plan guard (ctl_guard.c); --dry-run prints the
 * same changes and rolls back.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "ctl.h"

/* The version of the file tenant export writes; a file without one is
 * read as this version. */
#define APPLY_FILE_VERSION 1

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
    json_object_object_add(o, "version",
        json_object_new_int(APPLY_FILE_VERSION));
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

/*
 * The whole file is checked before the database is touched, so that a
 * mistake in it exits 2 and changes nothing.  Its syntax first (json-c's
 * tokener, strict: no comments, no trailing commas); an error names the
 * line and column of the file and what the tokener expected.  Then every
 * object: a key it does not know (most often a typing mistake, which
 * json-c would otherwise ignore in silence) is refused with the nearest
 * key it knows; a value of the wrong type says what was expected and what
 * was found; a value out of bounds says the bounds.  Every message starts
 * with the JSON path of what it is about ("$.rules[2].failure_mode").
 */

#define APPLY_FILE_MAX (64L * 1024 * 1024)
#define APPLY_PATH_MAX 128

/* The known keys of a rule and of the file; a limit's are made from the
 * algorithms (apply_limit_keys). */
static const char *const apply_file_keys[] = { "version", "tenant", "rules",
    NULL };
static const char *const apply_rule_keys[] = { "route", "priority",
    "enabled", "always", "shadow", "failure_mode", "per", "limits", NULL };
static const char *const apply_limit_base_keys[] = { "name", "algorithm",
    "count", NULL };

/* What a value of type t is called in messages. */
static const char *
apply_type_name(enum json_type t, int expected)
{
    switch (t) {
    case json_type_null:
        return "null";
    case json_type_boolean:
        return "true or false";
    case json_type_double:
        return expected ? "a number" : "a decimal number";
    case json_type_int:
        return "a whole number";
    case json_type_object:
        return "an object";
    case json_type_array:
        return "an array";
    case json_type_string:
        return "a string";
    }
    return "an unknown type";
}

/* A key of the file, fit to print: at most 40 bytes, anything but
 * printable ASCII shown as '?'. */
static void
apply_key_text(const char *key, char *buf, size_t len)
{
    size_t i;

    for (i = 0; key[i] != '\0' && i + 1 < len && i < 40; i++)
        buf[i] = key[i] > ' ' && key[i] < 127 ? key[i] : '?';
    buf[i] = '\0';
    if (key[i] != '\0' && len > 4 && i + 4 <= len)
        memcpy(buf + (i > len - 4 ? len - 4 : i), "...", 4);
}

/* Whether key is one of known (NULL ended). */
static int
apply_key_in(const char *key, const char *const *known)
{
    int i;

    for (i = 0; known[i] != NULL; i++)
        if (strcmp(key, known[i]) == 0)
            return 1;
    return 0;
}

/*
 * Refuses a member of object o (at path at) that is not one of known:
 * "at.key: unknown key; did you mean K?" when a known key is close enough
 * to be the one meant, else the list of the known keys.  0, or -1 with err.
 */
static int
apply_known_keys(struct json_object *o, const char *at,
    const char *const *known, char *err, size_t errlen)
{
    struct json_object_iterator it = json_object_iter_begin(o);
    struct json_object_iterator end = json_object_iter_end(o);
    const char *key, *best;
    char shown[48], list[256];
    size_t d, bestd, used;
    int i;

    for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
        key = json_object_iter_peek_name(&it);
        if (apply_key_in(key, known))
            continue;
        best = NULL;
        bestd = SIZE_MAX;
        for (i = 0; known[i] != NULL; i++)
            if ((d = util_edit_distance(key, known[i])) < bestd) {
                bestd = d;
                best = known[i];
            }
        apply_key_text(key, shown, sizeof(shown));
        /* Close enough: a third of the key's letters wrong, at most. */
        if (best != NULL && bestd * 3 <= strlen(best) + 2) {
            snprintf(err, errlen, "%s.%s: unknown key; did you mean %s?", at,
                shown, best);
            return -1;
        }
        list[0] = '\0';
        for (i = 0, used = 0; known[i] != NULL && used < sizeof(list); i++) {
            snprintf(list + used, sizeof(list) - used, "%s%s",
                i > 0 ? ", " : "", known[i]);
            used += strlen(list + used);
        }
        snprintf(err, errlen, "%s.%s: unknown key (the keys here are %s)",
            at, shown, list);
        return -1;
    }
    return 0;
}

/*
 * Member key of object o (at path at), which must be of type want (a
 * whole number does for json_type_double).  Returns 1 with *v, 0 when it
 * is absent and not required, or -1 with err: missing, or of another
 * type.
 */
static int
apply_member(struct json_object *o, const char *at, const char *key,
    enum json_type want, int required, struct json_object **v, char *err,
    size_t errlen)
{
    if (!json_object_object_get_ex(o, key, v)) {
        if (!required)
            return 0;
        snprintf(err, errlen, "%s: missing key %s (%s)", at, key,
            apply_type_name(want, 1));
        return -1;
    }
    if (json_object_is_type(*v, want) || (want == json_type_double &&
        json_object_is_type(*v, json_type_int)))
        return 1;
    snprintf(err, errlen, "%s.%s: expected %s, found %s", at, key,
        apply_type_name(want, 1),
        apply_type_name(json_object_get_type(*v), 0));
    return -1;
}

/* A string member, def when absent; NULL with err when it is not a
 * string (or is missing and def is NULL). */
static const char *
apply_string(struct json_object *o, const char *at, const char *key,
    const char *def, char *err, size_t errlen)
{
    struct json_object *v;
    int rc = apply_member(o, at, key, json_type_string, def == NULL, &v,
        err, errlen);

    return rc == 1 ? json_object_get_string(v) : rc == 0 ? def : NULL;
}

/* A boolean member into *out (def when absent); 0, or -1 with err. */
static int
apply_boolean(struct json_object *o, const char *at, const char *key,
    int def, int *out, char *err, size_t errlen)
{
    struct json_object *v;
    int rc = apply_member(o, at, key, json_type_boolean, 0, &v, err, errlen);

    if (rc == -1)
        return -1;
    *out = rc == 1 ? json_object_get_boolean(v) : def;
    return 0;
}

/* "a, b and c": the JSON names of alg's parameters. */
static void
apply_param_names(const struct algo *alg, char *buf, size_t len)
{
    size_t used = 0;
    int i;

    buf[0] = '\0';
    for (i = 0; i < alg->nparams && used < len; i++) {
        snprintf(buf + used, len - used, "%s%s%s", i == 0 ? "" :
            i + 1 == alg->nparams ? " and " : ", ",
            alg->param[i].optional ? "optionally " : "", alg->param[i].json);
        used += strlen(buf + used);
    }
}

/* The keys a limit may have: its own and the parameters of every
 * algorithm, each once; keys must hold ALGO_MAX_PARAMS * algo_count() + 4
 * entries. */
static void
apply_limit_keys(const char **keys)
{
    const struct algo *alg;
    int i, j, n = 0;

    for (i = 0; apply_limit_base_keys[i] != NULL; i++)
        keys[n++] = apply_limit_base_keys[i];
    for (i = 0; (alg = algo_at(i)) != NULL; i++)
        for (j = 0; j < alg->nparams; j++) {
            keys[n] = NULL;
            if (!apply_key_in(alg->param[j].json, keys))
                keys[n++] = alg->param[j].json;
        }
    keys[n] = NULL;
}

/* Drops the "--option: " that algo.c's and validate.c's messages begin
 * with, when a JSON path names the value instead. */
static const char *
apply_without_option(const char *msg)
{
    const char *colon = strstr(msg, ": ");

    return strncmp(msg, "--", 2) == 0 && colon != NULL ? colon + 2 : msg;
}

/* One parameter p of the limit lo (at path at) into al, its text as
 * algo_param_parse takes it in text.  0, or -1 with err. */
static int
apply_read_param(struct json_object *lo, const char *at,
    const struct algo_param *p, struct apply_limit *al, char *text,
    size_t textlen, char *err, size_t errlen)
{
    enum json_type want = p->kind == ALGO_KIND_CALENDAR ? json_type_string :
        p->kind == ALGO_KIND_RATE ? json_type_double : json_type_int;
    char path[APPLY_PATH_MAX + 64], e2[256];
    struct json_object *v;
    long long x;
    int rc;

    if ((rc = apply_member(lo, at, p->json, want, !p->optional, &v, err,
        errlen)) == -1) {
        if (!json_object_object_get_ex(lo, p->json, &v))
            snprintf(err, errlen, "%s: missing key %s (%s, which %s "
                "needs)", at, p->json, apply_type_name(want, 1),
                al->alg->name);
        return -1;
    }
    snprintf(path, sizeof(path), "%s.%s", at, p->json);
    if (rc == 0) {
        snprintf(text, textlen, "0");
        return 0;
    }
    if (want == json_type_int) {
        x = (long long)json_object_get_int64(v);
        if ((double)x < p->min || (double)x > p->max) {
            snprintf(err, errlen, "%s: %lld is out of range (%.0f to %.0f%s)",
                path, x, p->min, p->max, p->kind == ALGO_KIND_DURATION ?
                " microseconds" : "");
            return -1;
        }
        snprintf(text, textlen, "%lld%s", x,
            p->kind == ALGO_KIND_DURATION ? "us" : "");
    } else if (want == json_type_double)
        snprintf(text, textlen, "%.17g", json_object_get_double(v));
    else
        snprintf(text, textlen, "%s", json_object_get_string(v));
    if (algo_param_parse(p, text, &al->l, e2, sizeof(e2)) == -1) {
        snprintf(err, errlen, "%s: %s", path, apply_without_option(e2));
        return -1;
    }
    return 0;
}

/* The limit lo (at path at) into al; 0, or -1 with err. */
static int
apply_read_limit(struct json_object *lo, const char *at,
    struct apply_limit *al, char *err, size_t errlen)
{
    const char *keys[ALGO_MAX_PARAMS * 8 + 4], *typed[ALGO_MAX_PARAMS];
    char text[ALGO_MAX_PARAMS][ALGO_TEXT_MAX], path[APPLY_PATH_MAX + 64];
    char names[160], e2[256];
    struct json_object_iterator it, end;
    const struct algo *other;
    const char *name, *alg, *count, *key;
    int i, own;

    memset(al, 0, sizeof(*al));
    if (!json_object_is_type(lo, json_type_object)) {
        snprintf(err, errlen, "%s: expected an object, found %s", at,
            apply_type_name(json_object_get_type(lo), 0));
        return -1;
    }
    if (algo_count() * ALGO_MAX_PARAMS + 4 > (int)(sizeof(keys) /
        sizeof(keys[0]))) {
        snprintf(err, errlen, "internal error: too many parameters");
        return -1;
    }
    apply_limit_keys(keys);
    if (apply_known_keys(lo, at, keys, err, errlen) == -1)
        return -1;
    if ((name = apply_string(lo, at, "name", NULL, err, errlen)) == NULL)
        return -1;
    snprintf(path, sizeof(path), "%s.name", at);
    if (validate_limit_name(path, name, err, errlen) == -1)
        return -1;
    snprintf(al->name, sizeof(al->name), "%s", name);
    if ((alg = apply_string(lo, at, "algorithm", NULL, err, errlen)) == NULL)
        return -1;
    if ((al->alg = algo_find(alg)) == NULL) {
        names[0] = '\0';
        for (i = 0; (other = algo_at(i)) != NULL; i++)
            snprintf(names + strlen(names), sizeof(names) - strlen(names),
                "%s%s", i > 0 ? ", " : "", other->name);
        apply_key_text(alg, e2, 48);
        snprintf(err, errlen, "%s.algorithm: \"%s\" is not one of %s", at,
            e2, names);
        return -1;
    }
    al->l.algorithm = al->alg->id;
    /* A parameter of another algorithm would be ignored: refuse it. */
    it = json_object_iter_begin(lo);
    end = json_object_iter_end(lo);
    for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
        key = json_object_iter_peek_name(&it);
        for (own = 0, i = 0; i < al->alg->nparams; i++)
            own |= strcmp(key, al->alg->param[i].json) == 0;
        if (own || apply_key_in(key, apply_limit_base_keys))
            continue;
        apply_param_names(al->alg, names, sizeof(names));
        snprintf(err, errlen, "%s.%s: not a parameter of %s (it takes %s)",
            at, key, al->alg->name, names);
        return -1;
    }
    for (i = 0; i < al->alg->nparams; i++) {
        if (apply_read_param(lo, at, &al->alg->param[i], al, text[i],
            sizeof(text[i]), err, errlen) == -1)
            return -1;
        typed[i] = text[i];
    }
    if (al->alg->check != NULL && al->alg->check(&al->l, typed, e2,
        sizeof(e2)) == -1) {
        snprintf(err, errlen, "%s: %s", at, e2);
        return -1;
    }
    if ((count = apply_string(lo, at, "count", "subject", err,
        errlen)) == NULL)
        return -1;
    snprintf(path, sizeof(path), "%s.count", at);
    if (validate_count(path, count, err, errlen) == -1)
        return -1;
    al->l.count = algo_count_parse(count);
    snprintf(al->l.name, sizeof(al->l.name), "%s", name);
    return 0;
}

/* The rule ro (at path at) into r; 0, or -1 with err. */
static int
apply_read_rule(struct json_object *ro, const char *at, struct apply_rule *r,
    char *err, size_t errlen)
{
    char path[APPLY_PATH_MAX + 32], lat[APPLY_PATH_MAX + 32];
    const char *route, *fm, *per;
    struct json_object *v, *ls;
    long long prio = 0;
    size_t i, n;
    int j, rc;

    memset(r, 0, sizeof(*r));
    if (!json_object_is_type(ro, json_type_object)) {
        snprintf(err, errlen, "%s: expected an object, found %s", at,
            apply_type_name(json_object_get_type(ro), 0));
        return -1;
    }
    if (apply_known_keys(ro, at, apply_rule_keys, err, errlen) == -1)
        return -1;
    if ((route = apply_string(ro, at, "route", NULL, err, errlen)) == NULL)
        return -1;
    snprintf(path, sizeof(path), "%s.route", at);
    if (validate_route(path, route, err, errlen) == -1)
        return -1;
    snprintf(r->route, sizeof(r->route), "%s", route);
    if ((rc = apply_member(ro, at, "priority", json_type_int, 0, &v, err,
        errlen)) == -1)
        return -1;
    if (rc == 1 && ((prio = json_object_get_int64(v)) <
        -VALIDATE_PRIORITY_MAX || prio > VALIDATE_PRIORITY_MAX)) {
        snprintf(err, errlen, "%s.priority: %lld is out of range (-%d to "
            "%d)", at, prio, VALIDATE_PRIORITY_MAX, VALIDATE_PRIORITY_MAX);
        return -1;
    }
    r->priority = (int)prio;
    if (apply_boolean(ro, at, "enabled", 1, &r->enabled, err, errlen) == -1 ||
        apply_boolean(ro, at, "always", 0, &r->always, err, errlen) == -1 ||
        apply_boolean(ro, at, "shadow", 0, &r->shadow, err, errlen) == -1)
        return -1;
    if ((fm = apply_string(ro, at, "failure_mode", "closed", err,
        errlen)) == NULL)
        return -1;
    snprintf(path, sizeof(path), "%s.failure_mode", at);
    if (validate_failure_mode(path, fm, err, errlen) == -1)
        return -1;
    if ((per = apply_string(ro, at, "per", "rule", err, errlen)) == NULL)
        return -1;
    snprintf(path, sizeof(path), "%s.per", at);
    if (validate_per(path, per, err, errlen) == -1)
        return -1;
    snprintf(r->failure_mode, sizeof(r->failure_mode), "%s", fm);
    snprintf(r->per, sizeof(r->per), "%s", per);
    if (apply_member(ro, at, "limits", json_type_array, 1, &ls, err,
        errlen) == -1)
        return -1;
    if ((n = json_object_array_length(ls)) < 1 || n > RL_MAX_LIMITS) {
        snprintf(err, errlen, "%s.limits: a rule has 1 to %d limits, not "
            "%zu", at, RL_MAX_LIMITS, n);
        return -1;
    }
    for (i = 0; i < n; i++) {
        snprintf(lat, sizeof(lat), "%s.limits[%zu]", at, i);
        if (apply_read_limit(json_object_array_get_idx(ls, i), lat,
            &r->limits[i], err, errlen) == -1)
            return -1;
        for (j = 0; j < (int)i; j++)
            if (strcmp(r->limits[j].name, r->limits[i].name) == 0) {
                snprintf(err, errlen, "%s.name: %s.limits[%d] has the "
                    "name %s already", lat, at, j, r->limits[i].name);
                return -1;
            }
    }
    r->nlimits = (int)n;
    return 0;
}

/* Where byte off of buf is: line and column, from 1 (a column counts
 * characters: the continuation bytes of UTF-8 do not count). */
static void
apply_position(const char *buf, size_t off, long *line, long *col)
{
    size_t i;

    *line = 1;
    *col = 1;
    for (i = 0; i < off; i++) {
        if (buf[i] == '\n') {
            (*line)++;
            *col = 1;
        } else if (((unsigned char)buf[i] & 0xC0) != 0x80)
            (*col)++;
    }
}

/* Reads all of file path into *buf (NUL ended) and *len.  0, or -1 with
 * err (the file cannot be read, or is too large). */
static int
apply_slurp(const char *path, char **buf, size_t *len, char *err,
    size_t errlen)
{
    FILE *fp = fopen(path, "rb");
    size_t cap = 65536, n = 0, got;
    char *b = NULL, *nb;

    if (fp == NULL) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    for (;;) {
        if ((nb = realloc(b, cap + 1)) == NULL) {
            snprintf(err, errlen, "%s: out of memory", path);
            break;
        }
        b = nb;
        got = fread(b + n, 1, cap - n, fp);
        n += got;
        if (n < cap) {
            if (ferror(fp)) {
                snprintf(err, errlen, "%s: %s", path, strerror(errno));
                break;
            }
            fclose(fp);
            b[n] = '\0';
            *buf = b;
            *len = n;
            return 0;
        }
        if (cap >= (size_t)APPLY_FILE_MAX) {
            snprintf(err, errlen, "%s: larger than %ld MiB", path,
                APPLY_FILE_MAX / 1024 / 1024);
            break;
        }
        cap *= 2;
    }
    fclose(fp);
    free(b);
    return -1;
}

/*
 * Parses file path into *doc.  Returns 0; CTL_EXIT_FAIL when it cannot be
 * read; CTL_EXIT_USAGE when it is not JSON (err: "path:line:column: ...").
 */
static int
apply_parse(const char *path, struct json_object **doc, char *err,
    size_t errlen)
{
    enum json_tokener_error jerr;
    struct json_tokener *tok;
    const char *why = NULL;
    char *buf;
    size_t len, end;
    long line, col;

    *doc = NULL;
    if (apply_slurp(path, &buf, &len, err, errlen) == -1)
        return CTL_EXIT_FAIL;
    if ((tok = json_tokener_new()) == NULL) {
        free(buf);
        snprintf(err, errlen, "%s: out of memory", path);
        return CTL_EXIT_FAIL;
    }
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    end = strlen(buf);          /* a NUL byte ends the text */
    *doc = json_tokener_parse_ex(tok, buf, (int)(end > INT_MAX ? INT_MAX :
        end));
    jerr = json_tokener_get_error(tok);
    if (*doc != NULL)
        end = json_tokener_get_parse_end(tok);
    if (jerr == json_tokener_continue || (jerr == json_tokener_success &&
        *doc == NULL))
        why = end < len ? "a NUL byte" : "unexpected end of the file";
    else if (jerr != json_tokener_success) {
        end = json_tokener_get_parse_end(tok);
        why = json_tokener_error_desc(jerr);
    } else {
        end += strspn(buf + end, " \t\r\n");
        if (end < len)
            why = "more text after the end of the JSON value";
    }
    if (why != NULL) {
        apply_position(buf, end, &line, &col);
        snprintf(err, errlen, "%s:%ld:%ld: not valid JSON: %s", path, line,
            col, why);
        json_object_put(*doc);
        *doc = NULL;
    }
    json_tokener_free(tok);
    free(buf);
    return why != NULL ? CTL_EXIT_USAGE : 0;
}

/*
 * Reads file path into want (at most APPLY_MAX_RULES) and *tenant (its
 * text lives in *doc; json_object_put it).  Returns the number of rules,
 * or -1 after printing why with *rc the exit status (nothing has been
 * written).
 */
static int
apply_read_file(const char *path, struct json_object **doc,
    const char **tenant, struct apply_rule *want, int *rc)
{
    char err[768], e2[512], at[APPLY_PATH_MAX];
    struct json_object *rs, *ver;
    size_t i, n;
    int has;

    if ((*rc = apply_parse(path, doc, err, sizeof(err))) != 0) {
        ctl_warn("%s", err);
        return -1;
    }
    *rc = CTL_EXIT_USAGE;
    if (!json_object_is_type(*doc, json_type_object)) {
        snprintf(e2, sizeof(e2), "$: expected an object, found %s",
            apply_type_name(json_object_get_type(*doc), 0));
        goto bad;
    }
    if (apply_known_keys(*doc, "$", apply_file_keys, e2, sizeof(e2)) == -1 ||
        (has = apply_member(*doc, "$", "version", json_type_int, 0, &ver, e2,
        sizeof(e2))) == -1)
        goto bad;
    if (has && json_object_get_int64(ver) != APPLY_FILE_VERSION) {
        snprintf(e2, sizeof(e2), "$.version: this ratelimitctl reads "
            "version %d, not %lld", APPLY_FILE_VERSION,
            (long long)json_object_get_int64(ver));
        goto bad;
    }
    if ((*tenant = apply_string(*doc, "$", "tenant", NULL, e2,
        sizeof(e2))) == NULL ||
        validate_tenant_name("$.tenant", *tenant, e2, sizeof(e2)) == -1 ||
        apply_member(*doc, "$", "rules", json_type_array, 1, &rs, e2,
        sizeof(e2)) == -1)
        goto bad;
    if ((n = json_object_array_length(rs)) > APPLY_MAX_RULES) {
        snprintf(e2, sizeof(e2), "$.rules: at most %d rules, not %zu",
            APPLY_MAX_RULES, n);
        goto bad;
    }
    for (i = 0; i < n; i++) {
        snprintf(at, sizeof(at), "$.rules[%zu]", i);
        if (apply_read_rule(json_object_array_get_idx(rs, i), at, &want[i],
            e2, sizeof(e2)) == -1)
            goto bad;
    }
    *rc = CTL_EXIT_OK;
    return (int)n;
bad:
    ctl_warn("%s: %s", path, e2);
    return -1;
}

/* ------------------------------------------------------------------ */
/* Applying */

static void
apply_describe(const struct apply_limit *al, char *buf, size_t len)
{
    struct ctl_limit_spec s;

    memset(&s, 0, sizeof(s));
    s.name = al->name;
    s.count = algo_count_name(al->l.count);
    s.algorithm = al->alg;
    s.limit = al->l;
    ctl_limit_describe(&s, buf, len);
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
    struct ctl_limit_spec s;
    char rule[24];
    PGresult *res;

    memset(&s, 0, sizeof(s));
    s.name = al->name;
    s.count = algo_count_name(al->l.count);
    s.algorithm = al->alg;
    s.limit = al->l;
    snprintf(rule, sizeof(rule), "%lld", rule_id);
    if ((res = ctl_limit_insert(ctl, rule, &s)) == NULL)
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
        if (ctl_limit_write(ctl, lid, NULL,
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
    struct json_object *doc;
    const char *tenant = NULL, *params[1];
    char id[24];
    struct ctl_guard g;
    int i, j, nwant, nhave, changes = 0, rc;
    size_t n;

    nwant = apply_read_file(a->pos[0], &doc, &tenant, want, &rc);
    if (nwant == -1) {
        json_object_put(doc);
        return rc;
    }
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
    if ((rc = ctl_guard_begin_tenant(ctl, &g, tenant)) != 0)
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
        ctl_guard_abort(ctl, &g);
        printf("%s: %d change%s%s\n", tenant, changes, changes == 1 ? "" :
            "s", dry && changes > 0 ? " (dry run: nothing written)" : "");
        rc = CTL_EXIT_OK;
        goto out;
    }
    if ((rc = ctl_guard_end(ctl, &g)) == CTL_EXIT_OK)
        printf("%s: %d change%s applied\n", tenant, changes,
            changes == 1 ? "" : "s");
    goto out;
db_err:
    ctl_guard_abort(ctl, &g);
    rc = ctl_db_fail(ctl);
out:
    json_object_put(doc);
    return rc;
}
