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
#include <stdio.h>
#include <string.h>

#include "ratelimit.h"

static const char *const algorithm_names[] = {
    NULL, "token_bucket", "sliding_window", "gcra", "fixed_window",
};

static const char *const calendar_names[] = {
    NULL, "minute", "hour", "day", "month",
};

#define NALGORITHMS ((int)(sizeof(algorithm_names) / sizeof(algorithm_names[0])))
#define NCALENDARS ((int)(sizeof(calendar_names) / sizeof(calendar_names[0])))

const char *
rules_algorithm_name(int algorithm)
{
    if (algorithm < 1 || algorithm >= NALGORITHMS)
        return "unknown";
    return algorithm_names[algorithm];
}

int
rules_algorithm_parse(const char *name)
{
    int i;

    for (i = 1; i < NALGORITHMS; i++)
        if (strcmp(name, algorithm_names[i]) == 0)
            return i;
    return -1;
}

const char *
rules_calendar_name(int calendar)
{
    if (calendar < 1 || calendar >= NCALENDARS)
        return "unknown";
    return calendar_names[calendar];
}

int
rules_calendar_parse(const char *name)
{
    int i;

    for (i = 1; i < NCALENDARS; i++)
        if (strcmp(name, calendar_names[i]) == 0)
            return i;
    return -1;
}

/*
 * Specificity of pattern for route: -1 when it does not match; otherwise
 * a rank where larger is more specific.  "*" ranks 0, a prefix ranks
 * 1 + its length, and an exact match ranks above every prefix.
 */
static long
rules_rank(const char *pattern, const char *route)
{
    size_t plen = strlen(pattern);

    if (plen == 1 && pattern[0] == '*')
        return 0;
    if (plen > 0 && pattern[plen - 1] == '*') {
        if (strncmp(pattern, route, plen - 1) == 0)
            return 1 + (long)(plen - 1);
        return -1;
    }
    if (strcmp(pattern, route) == 0)
        return 2 + RL_ROUTE_MAX;
    return -1;
}

int
rules_match(const struct rl_rule *rules, int n, const char *route)
{
    long rank, best_rank = -1;
    int i, best = -1;

    for (i = 0; i < n; i++) {
        rank = rules_rank(rules[i].pattern, route);
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

/* Adds the limits of rule to plan, as far as there is room. */
static void
rules_plan_add(struct rl_plan *plan, const struct rl_rule *rule)
{
    int i;

    for (i = 0; i < rule->nlimits && plan->n < RL_MAX_LIMITS; i++) {
        plan->rule[plan->n] = rule;
        plan->limit[plan->n] = &rule->limits[i];
        plan->n++;
    }
}

int
rules_plan(const struct rl_rule *rules, int n, const char *route,
    struct rl_plan *plan)
{
    int i, j, best, dup;

    plan->n = 0;
    best = rules_match(rules, n, route);
    if (best != -1)
        rules_plan_add(plan, &rules[best]);
    for (i = 0; i < n; i++)
        if (i != best && rules[i].always &&
            rules_rank(rules[i].pattern, route) >= 0)
            rules_plan_add(plan, &rules[i]);
    /* Policy names must be unique within one answer: when two rules both
     * have a limit called "default", both are qualified by their rule id. */
    for (i = 0; i < plan->n; i++) {
        for (dup = 0, j = 0; j < plan->n && !dup; j++)
            dup = j != i &&
                strcmp(plan->limit[i]->name, plan->limit[j]->name) == 0;
        if (dup)
            snprintf(plan->name[i], sizeof(plan->name[i]), "r%lld-%s",
                plan->rule[i]->id, plan->limit[i]->name);
        else
            snprintf(plan->name[i], sizeof(plan->name[i]), "%s",
                plan->limit[i]->name);
    }
    return plan->n;
}
