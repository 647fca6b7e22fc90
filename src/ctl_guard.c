/*
 * ctl_guard.c -- the plan guard of ratelimitctl: no change of a tenant's
 * rules may leave a route needing more limits than one check decides.
 *
 * Used by every command that can give a route more limits (rule add, rule
 * set, rule remove, limit add: ctl_rule.c and ctl_limit.c) and by tenant
 * apply (ctl_apply.c); counter show reads the rules through it as the
 * service does (ctl_counter.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

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
ctl_guard_load(struct ctl *ctl, const char *tenant_id,
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
ctl_guard_lock(struct ctl *ctl, struct ctl_guard *g,
    const char *tenant_id)
{
    const char *params[1] = { tenant_id };

    snprintf(g->tenant_id, sizeof(g->tenant_id), "%s", tenant_id);
    if (ctl_db_command(ctl, "SELECT 1 FROM tenants WHERE id = $1::uuid "
        "FOR NO KEY UPDATE", 1, params) == -1 ||
        ctl_guard_load(ctl, g->tenant_id, &g->before,
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
ctl_guard_begin_by(struct ctl *ctl, struct ctl_guard *g,
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
    return ctl_guard_lock(ctl, g, id);
}

/* Begins a guarded change of the tenant named name. */
int
ctl_guard_begin_tenant(struct ctl *ctl, struct ctl_guard *g,
    const char *name)
{
    char missing[RL_NAME_MAX * 2 + 64];

    snprintf(missing, sizeof(missing), "no tenant named \"%s\" (see '"
        CTL_NAME " tenant list')", name);
    return ctl_guard_begin_by(ctl, g,
        "SELECT id FROM tenants WHERE name = $1", name, missing);
}

/* Begins a guarded change of the rule with id rule_id and its tenant. */
int
ctl_guard_begin_rule(struct ctl *ctl, struct ctl_guard *g,
    long long rule_id)
{
    char rule[24], missing[64];

    snprintf(rule, sizeof(rule), "%lld", rule_id);
    snprintf(missing, sizeof(missing), "no rule with id %lld", rule_id);
    return ctl_guard_begin_by(ctl, g,
        "SELECT tenant_id FROM rules WHERE id = $1::bigint", rule, missing);
}

/* Abandons a guarded change (after a failed statement, say). */
void
ctl_guard_abort(struct ctl *ctl, struct ctl_guard *g)
{
    ctl_db_rollback(ctl);
    free(g->before);
    g->before = NULL;
}

/* Prints why a change was refused: the routes, the limits, the rules. */
static void
ctl_guard_explain(const struct rl_overflow *o,
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
ctl_guard_end(struct ctl *ctl, struct ctl_guard *g)
{
    struct rl_overflow *o;
    struct rl_rule *after;
    int nafter, rc = 0;

    if (ctl_guard_load(ctl, g->tenant_id, &after, &nafter) == -1) {
        ctl_guard_abort(ctl, g);
        return ctl_db_fail(ctl);
    }
    if ((o = malloc(sizeof(*o))) == NULL) {
        free(after);
        ctl_guard_abort(ctl, g);
        return ctl_fail("out of memory");
    }
    if (rules_overflow(g->before, g->nbefore, after, nafter, o)) {
        ctl_guard_abort(ctl, g);
        ctl_guard_explain(o, after);
        rc = CTL_EXIT_USAGE;
    } else if (ctl_db_commit(ctl) == -1) {
        ctl_guard_abort(ctl, g);
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
int
ctl_guard_finish(struct ctl *ctl, struct ctl_guard *g,
    PGresult *res, long long rule_id)
{
    int rc;

    if (PQntuples(res) == 0) {
        PQclear(res);
        ctl_guard_abort(ctl, g);
        return ctl_fail("no rule with id %lld", rule_id);
    }
    if ((rc = ctl_guard_end(ctl, g)) != 0) {
        PQclear(res);
        return rc;
    }
    return CTL_EXIT_OK;
}
