/*
 * fixtures.c -- the test fixtures shared by the suites (see fixtures.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>              /* t/check.h: the suites, then Check */

#include "fixtures.h"

const struct fixture_calendar fixture_calendars[4] = {
    { RL_CAL_MINUTE, "minute" }, { RL_CAL_HOUR, "hour" },
    { RL_CAL_DAY, "day" }, { RL_CAL_MONTH, "month" },
};

static void
fixture_limit_base(struct rl_limit *l, long long id, const char *name,
    int algorithm)
{
    memset(l, 0, sizeof(*l));
    l->id = id;
    snprintf(l->name, sizeof(l->name), "%s", name);
    l->algorithm = algorithm;
}

void
fixture_limit_tb(struct rl_limit *l, long long id, const char *name,
    long long capacity, double rate)
{
    fixture_limit_base(l, id, name, RL_ALGO_TOKEN_BUCKET);
    l->bucket_capacity = capacity;
    l->refill_rate = rate;
}

void
fixture_limit_sw(struct rl_limit *l, long long id, const char *name,
    long long count, long long window)
{
    fixture_limit_base(l, id, name, RL_ALGO_SLIDING_WINDOW);
    l->limit_count = count;
    l->window_seconds = window;
}

void
fixture_limit_gcra(struct rl_limit *l, long long id, const char *name,
    long long count, long long period_us, long long burst)
{
    fixture_limit_base(l, id, name, RL_ALGO_GCRA);
    l->limit_count = count;
    l->period_us = period_us;
    l->burst = burst;
}

void
fixture_limit_fw(struct rl_limit *l, long long id, const char *name,
    long long count, int calendar)
{
    fixture_limit_base(l, id, name, RL_ALGO_FIXED_WINDOW);
    l->limit_count = count;
    l->calendar = calendar;
}

void
fixture_rule_init(struct rl_rule *r, long long id, const char *pattern,
    int priority)
{
    memset(r, 0, sizeof(*r));
    r->id = id;
    ck_assert_uint_lt(strlen(pattern), sizeof(r->pattern));
    strcpy(r->pattern, pattern);
    r->priority = priority;
}

void
fixture_rule_limits(struct rl_rule *r, int n, const char *const *names,
    long long id_base)
{
    char name[RL_NAME_MAX];
    int i;

    r->nlimits = n;
    for (i = 0; i < n; i++) {
        if (names != NULL)
            snprintf(name, sizeof(name), "%s", names[i]);
        else
            snprintf(name, sizeof(name), "l%d", i);
        fixture_limit_sw(&r->limits[i], id_base + i, name, 10, 60);
    }
}

void
fixture_plan_add(struct rl_plan *plan, const struct rl_rule *rule)
{
    int i;

    for (i = 0; i < rule->nlimits; i++) {
        ck_assert_int_lt(plan->n, RL_MAX_LIMITS);
        plan->rule[plan->n] = rule;
        plan->limit[plan->n] = &rule->limits[i];
        snprintf(plan->name[plan->n], sizeof(plan->name[plan->n]), "%s",
            rule->limits[i].name);
        plan->n++;
    }
}

void
fixture_plan_of(struct rl_plan *plan, const struct rl_rule *rule)
{
    memset(plan, 0, sizeof(*plan));
    fixture_plan_add(plan, rule);
}

void
fixture_decision(struct rl_decision *d, int allowed, long long now_ms,
    int nlimits)
{
    memset(d, 0, sizeof(*d));
    d->allowed = allowed;
    d->now_ms = now_ms;
    d->nlimits = nlimits;
}

void
fixture_state(struct rl_limit_state *st, int allowed, long long limit,
    long long remaining, long long reset_ms, long long retry_after_ms)
{
    memset(st, 0, sizeof(*st));
    st->allowed = allowed;
    st->limit = limit;
    st->remaining = remaining;
    st->reset_ms = reset_ms;
    st->retry_after_ms = retry_after_ms;
}

void *
fixture_shm_region(size_t header, const size_t counts[SHM_NTABLES],
    size_t *size)
{
    void *p;

    *size = shm_size(header, counts);
    p = calloc(1, *size);
    ck_assert_ptr_nonnull(p);
    return p;
}
