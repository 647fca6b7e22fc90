/*
 * fuzz_rules.c -- rules_match(), rules_plan(), the indexed plan
 * (rules_index_plan, which must agree with rules_plan) and
 * rules_overflow() on rule sets and routes made of the input.
 *
 * Input: one byte for the number of rules (up to 12), then per rule a
 * flags byte (bit 0 always, bit 1 also in the set "before", bit 2 with
 * another number of limits there, bit 3 only in "before", bits 4-7 the
 * number of limits, 0 to 8),
 * a priority byte, an id byte, a length byte and the pattern; the rest is
 * the route.  Patterns and routes are spelled with "/ab*" only, so that
 * they overlap often.
 *
 * Promises checked, against a plain matcher written here: the best rule
 * matches and none is more specific; a plan holds the best rule's limits
 * and those of every other matching always rule, or is refused (-1)
 * exactly when they are more than RL_MAX_LIMITS; policy names are unique.
 * And rules_overflow() is sound: whenever this route needs more than
 * RL_MAX_LIMITS limits under "after", and more than under "before", it
 * reports an overflow at least that big.
 */
#include <string.h>

#include "fuzz.h"
#include "ratelimit.h"

#define FUZZ_RULES 12
#define FUZZ_PATTERN 8
#define FUZZ_ROUTE 16

static const char fuzz_alphabet[] = "/ab*";

/* Rank of pattern for route as rules.c documents it, or -1. */
static long
fuzz_rank(const char *pattern, const char *route)
{
    size_t n = strlen(pattern);

    if (strcmp(pattern, "*") == 0)
        return 0;
    if (n > 0 && pattern[n - 1] == '*')
        return strncmp(pattern, route, n - 1) == 0 ? (long)n : -1;
    return strcmp(pattern, route) == 0 ? 100000 : -1;
}

/* Copies up to max bytes of the input, mapped to the alphabet. */
static void
fuzz_text(const uint8_t **p, const uint8_t *end, size_t len, char *out)
{
    size_t i;

    for (i = 0; i < len && *p < end; i++, (*p)++)
        out[i] = fuzz_alphabet[**p % 4];
    out[i] = '\0';
}

/* Limits the check of route needs under rules, by the plain matcher. */
static int
fuzz_needed(const struct rl_rule *rules, int n, const char *route, int *best)
{
    long rank, best_rank = -1;
    int i, needed = 0;

    *best = -1;
    for (i = 0; i < n; i++) {
        rank = fuzz_rank(rules[i].pattern, route);
        if (rank < 0)
            continue;
        if (*best == -1 || rank > best_rank || (rank == best_rank &&
            (rules[i].priority > rules[*best].priority ||
            (rules[i].priority == rules[*best].priority &&
            rules[i].id < rules[*best].id)))) {
            *best = i;
            best_rank = rank;
        }
    }
    for (i = 0; i < n && *best != -1; i++)
        if (i == *best || (rules[i].always &&
            fuzz_rank(rules[i].pattern, route) >= 0))
            needed += rules[i].nlimits;
    return needed;
}

/* rules_plan() against the plain matcher, and the indexed plan against
 * rules_plan(); returns what it needs. */
static int
fuzz_plan(const struct rl_rule *rules, int n, const char *route)
{
    struct rl_plan plan, indexed;
    struct rules_index *ix;
    int rc, best, needed, i, j;

    needed = fuzz_needed(rules, n, route, &best);
    fuzz_assert(rules_match(rules, n, route) == best);
    rc = rules_plan(rules, n, route, &plan);
    if ((ix = rules_index_build(rules, n)) != NULL) {
        fuzz_assert(rules_index_plan(ix, route, &indexed) == rc);
        fuzz_assert(indexed.n == plan.n && indexed.needed == plan.needed);
        fuzz_assert(rc != -1 || indexed.rule[0] == plan.rule[0]);
        for (i = 0; i < plan.n; i++)
            fuzz_assert(indexed.rule[i] == plan.rule[i] &&
                indexed.limit[i] == plan.limit[i] &&
                strcmp(indexed.name[i], plan.name[i]) == 0);
        rules_index_free(ix);
    }
    if (best == -1) {
        fuzz_assert(rc == 0 && plan.n == 0);
        return 0;
    }
    fuzz_assert(plan.needed == needed);
    if (needed > RL_MAX_LIMITS) {
        fuzz_assert(rc == -1 && plan.n == 0 && plan.rule[0] == &rules[best]);
        return needed;
    }
    fuzz_assert(rc == needed && plan.n == needed);
    for (i = 0; i < plan.n; i++) {
        fuzz_assert(plan.rule[i] >= rules && plan.rule[i] < rules + n);
        fuzz_assert(plan.limit[i] >= plan.rule[i]->limits &&
            plan.limit[i] < plan.rule[i]->limits + plan.rule[i]->nlimits);
        fuzz_assert(plan.rule[i] == &rules[best] ||
            (plan.rule[i]->always &&
            fuzz_rank(plan.rule[i]->pattern, route) >= 0));
        for (j = 0; j < i; j++) {
            fuzz_assert(plan.limit[i] != plan.limit[j]);
            fuzz_assert(strcmp(plan.name[i], plan.name[j]) != 0);
        }
    }
    /* The best rule's limits first (the service has no rule without). */
    if (rules[best].nlimits > 0)
        fuzz_assert(plan.rule[0] == &rules[best]);
    return needed;
}

/* 1 when some rule of rules has the exact pattern s. */
static int
fuzz_is_exact(const struct rl_rule *rules, int n, const char *s)
{
    int i;

    for (i = 0; i < n; i++)
        if (strcmp(rules[i].pattern, s) == 0)
            return 1;
    return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct rl_rule after[FUZZ_RULES], before[FUZZ_RULES], r;
    static struct rl_overflow o;
    const uint8_t *p = data, *end = data + size;
    char route[FUZZ_ROUTE + 1];
    size_t len;
    long long previous_id = 0;
    int nrules, n = 0, nbefore = 0, i, k, flags, need_after, need_before,
        found;

    if (size < 1)
        return 0;
    nrules = *p++ % (FUZZ_RULES + 1);
    for (i = 0; i < nrules; i++) {
        if (end - p < 4)
            return 0;
        memset(&r, 0, sizeof(r));
        flags = *p++;
        r.always = flags & 1;
        r.nlimits = (flags >> 4) % (RL_MAX_LIMITS + 1);
        r.priority = *p++ % 3;
        r.id = (long long)*p++ * FUZZ_RULES + i;
        len = *p++ % (FUZZ_PATTERN + 1);
        fuzz_text(&p, end, len, r.pattern);
        /* Names unique within the rule, as the schema has them, and
         * shared between rules; from the fifth on, spelled the way a
         * qualified name of the previous rule is.  All 8 are named, for
         * the copy in "before" may have more. */
        for (k = 0; k < RL_MAX_LIMITS; k++) {
            r.limits[k].id = r.id * 10 + k;
            if (k < 4 || i == 0)
                snprintf(r.limits[k].name, sizeof(r.limits[k].name), "l%d",
                    k);
            else
                snprintf(r.limits[k].name, sizeof(r.limits[k].name),
                    "r%lld-l%d", previous_id, k - 4);
        }
        previous_id = r.id;
        /* Bit 3: a rule the change removed (or disabled); else bit 1: a
         * rule there before as well, bit 2: with another count then. */
        if (flags & 8) {
            before[nbefore++] = r;
            continue;
        }
        after[n++] = r;
        if (flags & 2) {
            before[nbefore] = r;
            if (flags & 4)
                before[nbefore].nlimits = RL_MAX_LIMITS - r.nlimits;
            nbefore++;
        }
    }
    fuzz_text(&p, end, FUZZ_ROUTE, route);

    need_after = fuzz_plan(after, n, route);
    need_before = fuzz_plan(before, nbefore, route);

    found = rules_overflow(NULL, 0, after, n, &o);
    if (need_after > RL_MAX_LIMITS)
        fuzz_assert(found && o.needed >= need_after);
    found = rules_overflow(before, nbefore, after, n, &o);
    if (need_after > RL_MAX_LIMITS && need_after > need_before)
        fuzz_assert(found && o.needed >= need_after);
    if (!found)
        return 0;
    /* What it reports is real: the route, or one that begins with it. */
    fuzz_assert(o.needed > RL_MAX_LIMITS && o.needed > o.before);
    fuzz_assert(o.nrules >= 1 && o.rule[0] >= 0 && o.rule[0] < n);
    if (!o.prefix || (o.route[0] != '\0' && !fuzz_is_exact(after, n,
        o.route) && !fuzz_is_exact(before, nbefore, o.route))) {
        fuzz_assert(fuzz_plan(after, n, o.route) == o.needed);
        fuzz_assert(fuzz_plan(before, nbefore, o.route) == o.before);
    }
    return 0;
}
