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
#include <string.h>

#include "ratelimit.h"

static const char *const algorithm_names[] = {
    NULL, "token_bucket", "sliding_window",
};

const char *
rules_algorithm_name(int algorithm)
{
    if (algorithm < RL_ALGO_TOKEN_BUCKET || algorithm > RL_ALGO_SLIDING_WINDOW)
        return "unknown";
    return algorithm_names[algorithm];
}

int
rules_algorithm_parse(const char *name)
{
    int i;

    for (i = RL_ALGO_TOKEN_BUCKET; i <= RL_ALGO_SLIDING_WINDOW; i++)
        if (strcmp(name, algorithm_names[i]) == 0)
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
