/*
 * fixtures.h -- the test fixtures that more than one suite uses: limits of
 * each algorithm, rules, plans, limit states and shared-memory regions,
 * built by hand so that a suite does not depend on the module that would
 * otherwise build them (rules_plan(), the stores).
 */
#ifndef RL_T_FIXTURES_H
#define RL_T_FIXTURES_H

#include <stddef.h>

#include "ratelimit.h"

/* A limit of each algorithm, every other field zero; name is copied (cut
 * to fit). */
void fixture_limit_tb(struct rl_limit *l, long long id, const char *name,
    long long capacity, double rate);
void fixture_limit_sw(struct rl_limit *l, long long id, const char *name,
    long long count, long long window);
void fixture_limit_gcra(struct rl_limit *l, long long id, const char *name,
    long long count, long long period_us, long long burst);
void fixture_limit_fw(struct rl_limit *l, long long id, const char *name,
    long long count, int calendar);

/* A rule without limits: every field zero but id, pattern and priority.
 * The pattern must fit (a failed check otherwise). */
void fixture_rule_init(struct rl_rule *r, long long id, const char *pattern,
    int priority);

/* Gives r n sliding-window limits of 10 per 60 s with ids id_base,
 * id_base + 1, ...; named names[0..n-1], or "l0", "l1", ... when names is
 * NULL. */
void fixture_rule_limits(struct rl_rule *r, int n, const char *const *names,
    long long id_base);

/* Appends every limit of rule to plan under the limits' own names (a
 * failed check past RL_MAX_LIMITS); fixture_plan_of empties plan first. */
void fixture_plan_add(struct rl_plan *plan, const struct rl_rule *rule);
void fixture_plan_of(struct rl_plan *plan, const struct rl_rule *rule);

/* A decision of nlimits states, all zero (fill them with fixture_state). */
void fixture_decision(struct rl_decision *d, int allowed, long long now_ms,
    int nlimits);

/* One limit's state in a decision, shadow 0. */
void fixture_state(struct rl_limit_state *st, int allowed, long long limit,
    long long remaining, long long reset_ms, long long retry_after_ms);

/* The calendars of fixed windows with their names in the script's
 * arguments and in ratelimitctl. */
struct fixture_calendar {
    int calendar;
    const char *name;
};
extern const struct fixture_calendar fixture_calendars[4];

/* A zeroed allocation the size of a shared segment with a header of
 * header bytes and tables of counts entries; its size in *size.  Free it
 * with free(). */
void *fixture_shm_region(size_t header, const size_t counts[SHM_NTABLES],
    size_t *size);

#endif /* RL_T_FIXTURES_H */
