/*
 * rules.c -- which of a tenant's rules applies to a route.
 *
 * A pattern "*" matches every route, a pattern ending in '*' matches the
 * routes that start with what comes before it, and any other pattern must
 * equal the route.  The most specific rule wins: an exact match beats any
 * prefix, a longer prefix beats a shorter one, and "*" comes last.  Ties
 * are broken by the higher priority and then by the lower rule id, so the
 * answer never depends on the order rows came back from PostgreSQL.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "ratelimit.h"

/*
 * Specificity of pattern for route: -1 when it does not match; otherwise
 * a rank where larger is more specific.  "*" ranks 0, a prefix ranks
 * 1 + its length, and an exact match ranks above every prefix.  With
 * exact_ok 0 an exact pattern matches nothing: rules_overflow() uses that
 * to stand for the routes that begin with route and are no rule's exact
 * pattern.
 */
static long
rules_rank(const char *pattern, const char *route, int exact_ok)
{
    size_t plen = strlen(pattern);

    if (plen == 1 && pattern[0] == '*')
        return 0;
    if (plen > 0 && pattern[plen - 1] == '*') {
        if (strncmp(pattern, route, plen - 1) == 0)
            return 1 + (long)(plen - 1);
        return -1;
    }
    if (exact_ok && strcmp(pattern, route) == 0)
        return 2 + RL_ROUTE_MAX;
    return -1;
}

/* rules_match(), with exact_ok as for rules_rank(). */
static int
rules_best(const struct rl_rule *rules, int n, const char *route,
    int exact_ok)
{
    long rank, best_rank = -1;
    int i, best = -1;

    for (i = 0; i < n; i++) {
        rank = rules_rank(rules[i].pattern, route, exact_ok);
        if (rank < 0)
            continue;
        if (best == -1 || rank > best_rank ||
            (rank == best_rank && (rules[i].priority > rules[best].priority ||
            (rules[i].priority == rules[best].priority &&
            rules[i].id < rules[best].id)))) {
            best = i;
            best_rank = rank;
        }
    }
    return best;
}

int
rules_match(const struct rl_rule *rules, int n, const char *route)
{
    return rules_best(rules, n, route, 1);
}

int
rules_pattern_matches(const char *pattern, const char *route)
{
    return rules_rank(pattern, route, 1) >= 0;
}

int
rules_shadowed_by(const struct rl_rule *rules, int n, int i)
{
    int j, by = -1;

    if (rules[i].always)
        return -1;
    for (j = 0; j < n; j++) {
        if (j == i || strcmp(rules[j].pattern, rules[i].pattern) != 0)
            continue;
        if (rules[j].priority < rules[i].priority ||
            (rules[j].priority == rules[i].priority &&
            rules[j].id > rules[i].id))
            continue;
        /* j is chosen before i wherever i matches; the first of those. */
        if (by == -1 || rules[j].priority > rules[by].priority ||
            (rules[j].priority == rules[by].priority &&
            rules[j].id < rules[by].id))
            by = j;
    }
    return by;
}

/*
 * Whether rule i takes part in the check of route whose most specific rule
 * is best: it is best, or an "always" rule whose pattern matches.
 */
static int
rules_in_plan(const struct rl_rule *rules, int i, int best, const char *route,
    int exact_ok)
{
    return i == best || (rules[i].always &&
        rules_rank(rules[i].pattern, route, exact_ok) >= 0);
}

/*
 * The number of limits the check of route decides, however many that is:
 * those of its most specific rule (*best, -1 when none matches) and of
 * every other matching "always" rule.
 */
static long
rules_needed(const struct rl_rule *rules, int n, const char *route,
    int exact_ok, int *best)
{
    long needed = 0;
    int i;

    *best = rules_best(rules, n, route, exact_ok);
    if (*best == -1)
        return 0;
    for (i = 0; i < n; i++)
        if (rules_in_plan(rules, i, *best, route, exact_ok) &&
            rules[i].nlimits > 0)
            needed += rules[i].nlimits;
    return needed;
}

/* Adds the limits of rule to plan (rules_plan has made sure they fit). */
static void
rules_plan_add(struct rl_plan *plan, const struct rl_rule *rule)
{
    int i;

    for (i = 0; i < rule->nlimits; i++) {
        plan->rule[plan->n] = rule;
        plan->limit[plan->n] = &rule->limits[i];
        plan->n++;
    }
}

/*
 * Gives the limits of plan unique policy names.  A limit keeps its own
 * name unless another limit of the plan is called the same; then it is
 * qualified by its rule's id: two "default"s become "r7-default" and
 * "r9-default".  A qualified name can equal another limit's own name (rule
 * 9 may have a limit called "r7-default"), which is then qualified as
 * well, until nothing is left to qualify.  Qualified names differ from each
 * other, since a rule's limits have different names and rules different
 * ids, and own names left differ from every other name.
 */
static void
rules_plan_names(struct rl_plan *plan)
{
    int qualified[RL_MAX_LIMITS] = { 0 };
    int i, j, changed;

    do {
        changed = 0;
        for (i = 0; i < plan->n; i++) {
            if (qualified[i])
                snprintf(plan->name[i], sizeof(plan->name[i]), "r%lld-%s",
                    plan->rule[i]->id, plan->limit[i]->name);
            else
                util_copy(plan->name[i], sizeof(plan->name[i]),
                    plan->limit[i]->name);
        }
        for (i = 0; i < plan->n; i++) {
            if (qualified[i])
                continue;
            for (j = 0; j < plan->n; j++)
                if (j != i && strcmp(plan->limit[i]->name,
                    plan->name[j]) == 0) {
                    qualified[i] = changed = 1;
                    break;
                }
        }
    } while (changed);
}

int
rules_plan(const struct rl_rule *rules, int n, const char *route,
    struct rl_plan *plan)
{
    long needed;
    int i, best;

    plan->n = 0;
    needed = rules_needed(rules, n, route, 1, &best);
    plan->needed = needed > INT_MAX ? INT_MAX : (int)needed;
    if (best == -1)
        return 0;
    /* Never a part of the limits: a check that decided only some of them
     * would let through what a dropped limit should deny. */
    if (needed > RL_MAX_LIMITS) {
        plan->rule[0] = &rules[best];
        return -1;
    }
    rules_plan_add(plan, &rules[best]);
    for (i = 0; i < n; i++)
        if (i != best && rules_in_plan(rules, i, best, route, 1))
            rules_plan_add(plan, &rules[i]);
    rules_plan_names(plan);
    return plan->n;
}

/*
 * The routes are split into classes that every rule treats alike: for each
 * exact pattern E, the route E; for each prefix pattern "p*" (and "*", with
 * p empty), the routes that begin with p, are no exact pattern and begin
 * with no longer prefix.  A route of the class of p matches exactly the
 * prefix patterns whose p' begins p, and "*" -- the same as the string p
 * itself matched with exact patterns switched off.  Built from the patterns
 * of both rule sets, the classes are alike under both, so comparing the
 * two plans of each class compares every route's.  (A class may be empty,
 * say when every route beginning with p is some rule's exact pattern; it
 * is still compared, which errs on the side of refusing.)
 */
static void
rules_overflow_class(const struct rl_rule *before, int nbefore,
    const struct rl_rule *after, int nafter, const char *pattern,
    struct rl_overflow *o, int *found)
{
    char route[RL_ROUTE_MAX + 1];
    size_t len = strlen(pattern);
    int exact_ok = 1, best, i;
    long needed, was;

    if (len > 0 && pattern[len - 1] == '*') {
        len--;
        exact_ok = 0;
    }
    if (len > RL_ROUTE_MAX)
        len = RL_ROUTE_MAX;
    memcpy(route, pattern, len);
    route[len] = '\0';
    needed = rules_needed(after, nafter, route, exact_ok, &best);
    if (needed <= RL_MAX_LIMITS || (*found && needed <= o->needed))
        return;
    was = rules_needed(before, nbefore, route, exact_ok, &i);
    if (needed <= was)
        return;
    *found = 1;
    memcpy(o->route, route, len + 1);
    o->prefix = !exact_ok;
    o->needed = needed > INT_MAX ? INT_MAX : (int)needed;
    o->before = (int)was;
    o->nrules = 0;
    o->rule[o->nrules++] = best;
    for (i = 0; i < nafter && o->nrules < RL_MAX_RULES; i++)
        if (i != best && rules_in_plan(after, i, best, route, exact_ok))
            o->rule[o->nrules++] = i;
}

int
rules_overflow(const struct rl_rule *before, int nbefore,
    const struct rl_rule *after, int nafter, struct rl_overflow *o)
{
    int i, found = 0;

    memset(o, 0, sizeof(*o));
    for (i = 0; i < nafter; i++)
        rules_overflow_class(before, nbefore, after, nafter,
            after[i].pattern, o, &found);
    for (i = 0; i < nbefore; i++)
        rules_overflow_class(before, nbefore, after, nafter,
            before[i].pattern, o, &found);
    return found;
}
