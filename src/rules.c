/*
 * rules.c -- which of a tenant's rules applies to a route.
 *
 * A pattern "*" matches every route, a pattern ending in '*' matches the
 * routes that start with what comes before it, and any other pattern must
 * equal the route.  The most specific rule wins: an exact match beats any
 * prefix, a longer prefix beats a shorter one, and "*" comes last.  Ties
 * are broken by the higher priority and then by the lower rule id, so the
 * answer never depends on the order rows came back from PostgreSQL.
 *
 * A tenant may have up to RL_MAX_RULES rules, so a check does not look at
 * each of them: rules_index_build() sorts the exact patterns and the
 * prefixes once, when the rules are loaded, and a route is then matched by
 * one binary search for itself and one for each length of prefix that
 * some rule has, from the longest down (see doc/design.md, "Rules").
 * Without an index (index NULL) the same functions look at every rule;
 * the unit tests hold the two ways to the same answers.
 */
#define _GNU_SOURCE             /* qsort_r */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
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

/* Whether rule a is chosen before rule b of the same rank. */
static int
rules_before(const struct rl_rule *a, const struct rl_rule *b)
{
    return a->priority > b->priority ||
        (a->priority == b->priority && a->id < b->id);
}

/* rules_match(), with exact_ok as for rules_rank(), looking at every
 * rule. */
static int
rules_best_scan(const struct rl_rule *rules, int n, const char *route,
    int exact_ok)
{
    long rank, best_rank = -1;
    int i, best = -1;

    for (i = 0; i < n; i++) {
        rank = rules_rank(rules[i].pattern, route, exact_ok);
        if (rank < 0)
            continue;
        if (best == -1 || rank > best_rank ||
            (rank == best_rank && rules_before(&rules[i], &rules[best]))) {
            best = i;
            best_rank = rank;
        }
    }
    return best;
}

/* ------------------------------------------------------------------ */
/* The index */

struct rules_index {
    const struct rl_rule *rules;
    int n;
    int *exact;                 /* exact patterns: pattern, then chosen
                                   first */
    int nexact;
    int *prefix;                /* "p*" (p not empty): p, then chosen
                                   first */
    int nprefix;
    int *always;                /* the "always" rules, in array order */
    int nalways;
    int star;                   /* the "*" rule chosen first, or -1 */
    int nlens;                  /* the lengths of the prefixes p, longest
                                   first */
    int *lens;
};

/* The part of a rule's pattern a route must begin with (p of "p*"), or
 * the whole pattern when exact. */
static size_t
rules_body(const struct rl_rule *r, int *kind)
{
    size_t len = strlen(r->pattern);

    if (len == 1 && r->pattern[0] == '*') {
        *kind = 0;
        return 0;
    }
    if (len > 0 && r->pattern[len - 1] == '*') {
        *kind = 1;
        return len - 1;
    }
    *kind = 2;
    return len;
}

/* Orders s (len bytes) against t (tlen bytes): bytes, then length. */
static int
rules_cmp_bytes(const char *s, size_t len, const char *t, size_t tlen)
{
    int c = memcmp(s, t, len < tlen ? len : tlen);

    if (c != 0)
        return c;
    return len < tlen ? -1 : len > tlen;
}

/* qsort_r()'s comparison of two rule indices (arg: the rules): by body,
 * then the one chosen first. */
static int
rules_cmp_index(const void *a, const void *b, void *arg)
{
    const struct rl_rule *rules = arg;
    const struct rl_rule *ra = &rules[*(const int *)a];
    const struct rl_rule *rb = &rules[*(const int *)b];
    int kind, c;
    size_t la = rules_body(ra, &kind), lb = rules_body(rb, &kind);

    if ((c = rules_cmp_bytes(ra->pattern, la, rb->pattern, lb)) != 0)
        return c;
    if (rules_before(ra, rb))
        return -1;
    return rules_before(rb, ra);
}

struct rules_index *
rules_index_build(const struct rl_rule *rules, int n)
{
    struct rules_index *ix;
    unsigned char seen[RL_ROUTE_MAX + 1] = { 0 };
    size_t len;
    int i, kind;

    if ((ix = calloc(1, sizeof(*ix))) == NULL)
        return NULL;
    ix->rules = rules;
    ix->n = n;
    ix->star = -1;
    if (n > 0 && ((ix->exact = malloc((size_t)n * sizeof(int))) == NULL ||
        (ix->prefix = malloc((size_t)n * sizeof(int))) == NULL ||
        (ix->always = malloc((size_t)n * sizeof(int))) == NULL)) {
        rules_index_free(ix);
        return NULL;
    }
    for (i = 0; i < n; i++) {
        len = rules_body(&rules[i], &kind);
        if (rules[i].always)
            ix->always[ix->nalways++] = i;
        if (kind == 0) {
            if (ix->star == -1 || rules_before(&rules[i], &rules[ix->star]))
                ix->star = i;
        } else if (kind == 1) {
            ix->prefix[ix->nprefix++] = i;
            if (len <= RL_ROUTE_MAX)
                seen[len] = 1;
        } else {
            ix->exact[ix->nexact++] = i;
        }
    }
    if (ix->nexact > 1)
        qsort_r(ix->exact, (size_t)ix->nexact, sizeof(int), rules_cmp_index,
            (void *)rules);
    if (ix->nprefix > 1)
        qsort_r(ix->prefix, (size_t)ix->nprefix, sizeof(int),
            rules_cmp_index, (void *)rules);
    for (i = RL_ROUTE_MAX; i > 0; i--)
        ix->nlens += seen[i];
    if (ix->nlens > 0 &&
        (ix->lens = malloc((size_t)ix->nlens * sizeof(int))) == NULL) {
        rules_index_free(ix);
        return NULL;
    }
    for (ix->nlens = 0, i = RL_ROUTE_MAX; i > 0; i--)
        if (seen[i])
            ix->lens[ix->nlens++] = i;
    return ix;
}

size_t
rules_index_bytes(const struct rules_index *ix)
{
    return ix == NULL ? 0 : sizeof(*ix) + sizeof(int) *
        ((size_t)ix->nexact + (size_t)ix->nprefix + (size_t)ix->nalways +
        (size_t)ix->nlens);
}

void
rules_index_free(struct rules_index *ix)
{
    if (ix == NULL)
        return;
    free(ix->exact);
    free(ix->prefix);
    free(ix->always);
    free(ix->lens);
    free(ix);
}

/* The first entry of sorted (n indices) whose body is key (len bytes), or
 * -1. */
static int
rules_find(const struct rl_rule *rules, const int *sorted, int n,
    const char *key, size_t len)
{
    int lo = 0, hi = n, mid, kind;
    const struct rl_rule *r;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        r = &rules[sorted[mid]];
        if (rules_cmp_bytes(r->pattern, rules_body(r, &kind), key, len) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == n)
        return -1;
    r = &rules[sorted[lo]];
    return rules_cmp_bytes(r->pattern, rules_body(r, &kind), key, len) == 0 ?
        sorted[lo] : -1;
}

/* rules_match(), with exact_ok as for rules_rank(): through ix when there
 * is one, else by looking at every rule. */
static int
rules_best(const struct rules_index *ix, const struct rl_rule *rules, int n,
    const char *route, int exact_ok)
{
    size_t len;
    int i, found;

    if (ix == NULL)
        return rules_best_scan(rules, n, route, exact_ok);
    len = strlen(route);
    if (exact_ok &&
        (found = rules_find(rules, ix->exact, ix->nexact, route, len)) >= 0)
        return found;
    for (i = 0; i < ix->nlens; i++)
        if ((size_t)ix->lens[i] <= len && (found = rules_find(rules,
            ix->prefix, ix->nprefix, route, (size_t)ix->lens[i])) >= 0)
            return found;
    return ix->star;
}

int
rules_match(const struct rl_rule *rules, int n, const char *route)
{
    return rules_best(NULL, rules, n, route, 1);
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
 * The rules that may take part in a plan besides its most specific one:
 * the "always" rules when there is an index (*list, the number returned),
 * else every rule (*list NULL, n returned).
 */
static int
rules_others(const struct rules_index *ix, int n, const int **list)
{
    if (ix == NULL) {
        *list = NULL;
        return n;
    }
    *list = ix->always;
    return ix->nalways;
}

/*
 * The number of limits the check of route decides, however many that is:
 * those of its most specific rule (*best, -1 when none matches) and of
 * every other matching "always" rule.
 */
static long
rules_needed(const struct rules_index *ix, const struct rl_rule *rules,
    int n, const char *route, int exact_ok, int *best)
{
    const int *list;
    long needed = 0;
    int i, k, m;

    *best = rules_best(ix, rules, n, route, exact_ok);
    if (*best == -1)
        return 0;
    m = rules_others(ix, n, &list);
    for (k = 0; k < m; k++) {
        i = list != NULL ? list[k] : k;
        if (i != *best && rules_in_plan(rules, i, *best, route, exact_ok) &&
            rules[i].nlimits > 0)
            needed += rules[i].nlimits;
    }
    if (rules[*best].nlimits > 0)
        needed += rules[*best].nlimits;
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

/* rules_plan(), through ix when there is one. */
static int
rules_plan_with(const struct rules_index *ix, const struct rl_rule *rules,
    int n, const char *route, struct rl_plan *plan)
{
    const int *list;
    long needed;
    int i, k, m, best;

    plan->n = 0;
    needed = rules_needed(ix, rules, n, route, 1, &best);
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
    m = rules_others(ix, n, &list);
    for (k = 0; k < m; k++) {
        i = list != NULL ? list[k] : k;
        if (i != best && rules_in_plan(rules, i, best, route, 1))
            rules_plan_add(plan, &rules[i]);
    }
    /* Nor a rule of which a limit could not be loaded. */
    for (i = 0; i < plan->n; i++)
        if (plan->rule[i]->broken) {
            plan->rule[0] = plan->rule[i];
            plan->needed = -1;
            plan->n = 0;
            return -1;
        }
    rules_plan_names(plan);
    return plan->n;
}

int
rules_plan(const struct rl_rule *rules, int n, const char *route,
    struct rl_plan *plan)
{
    return rules_plan_with(NULL, rules, n, route, plan);
}

int
rules_index_plan(const struct rules_index *ix, const char *route,
    struct rl_plan *plan)
{
    return rules_plan_with(ix, ix->rules, ix->n, route, plan);
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
rules_overflow_class(const struct rules_index *ixb,
    const struct rules_index *ixa, const char *pattern,
    struct rl_overflow *o, int *found)
{
    char route[RL_ROUTE_MAX + 1];
    size_t len = strlen(pattern);
    const int *list;
    int exact_ok = 1, best, i, k, m;
    long needed, was;

    if (len > 0 && pattern[len - 1] == '*') {
        len--;
        exact_ok = 0;
    }
    if (len > RL_ROUTE_MAX)
        len = RL_ROUTE_MAX;
    memcpy(route, pattern, len);
    route[len] = '\0';
    needed = rules_needed(ixa, ixa->rules, ixa->n, route, exact_ok, &best);
    if (needed <= RL_MAX_LIMITS || (*found && needed <= o->needed))
        return;
    was = rules_needed(ixb, ixb->rules, ixb->n, route, exact_ok, &i);
    if (needed <= was)
        return;
    *found = 1;
    memcpy(o->route, route, len + 1);
    o->prefix = !exact_ok;
    o->needed = needed > INT_MAX ? INT_MAX : (int)needed;
    o->before = (int)was;
    o->nrules = 0;
    o->rule[o->nrules++] = best;
    m = rules_others(ixa, ixa->n, &list);
    for (k = 0; k < m && o->nrules < RL_MAX_RULES; k++) {
        i = list[k];
        if (i != best && rules_in_plan(ixa->rules, i, best, route, exact_ok))
            o->rule[o->nrules++] = i;
    }
}

int
rules_overflow(const struct rl_rule *before, int nbefore,
    const struct rl_rule *after, int nafter, struct rl_overflow *o)
{
    struct rules_index *ixb, *ixa;
    int i, found = 0;

    memset(o, 0, sizeof(*o));
    ixb = rules_index_build(before, nbefore);
    ixa = rules_index_build(after, nafter);
    if (ixb == NULL || ixa == NULL) {
        /* Out of memory: refuse, rather than let a change through
         * unchecked. */
        rules_index_free(ixb);
        rules_index_free(ixa);
        o->needed = -1;
        return 1;
    }
    for (i = 0; i < nafter; i++)
        rules_overflow_class(ixb, ixa, after[i].pattern, o, &found);
    for (i = 0; i < nbefore; i++)
        rules_overflow_class(ixb, ixa, before[i].pattern, o, &found);
    rules_index_free(ixb);
    rules_index_free(ixa);
    return found;
}
