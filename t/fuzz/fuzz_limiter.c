/*
 * fuzz_limiter.c -- limiter_decode() on any reply, as hiredis hands over
 * the script's array of integers, then limiter_primary() on what it
 * accepted.
 *
 * Input: one byte for the number of limits the caller expects (0 to 9,
 * so that wrong counts are tried too), then the reply, 8 bytes per
 * integer.  Promises checked: an accepted reply is the counter budget's
 * refusal (-1, now, a wait of at least 0: no limit decided, nothing
 * allowed) or has exactly the expected shape (2 + 5 per limit, and one
 * more after them when the call carried a lease: the expired leases it
 * dropped, at least 0), allowed is 0 or 1, a denial has a denying
 * limit, no count or wait is negative except the retry_after -1 of a cost
 * that can never pass; the primary limit is one of them, and a denying one
 * when the verdict is a denial.
 */
#include <string.h>

#include "fuzz.h"
#include "ratelimit.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rl_decision d;
    long long *v;
    size_t n, i;
    int nlimits, any_denied = 0, primary;

    if (size < 1)
        return 0;
    nlimits = data[0] % (RL_MAX_LIMITS + 2);
    n = (size - 1) / sizeof(long long);
    /* A heap block of exactly n integers, so that reading past is caught. */
    if ((v = malloc(n > 0 ? n * sizeof(*v) : 1)) == NULL)
        return 0;
    memcpy(v, data + 1, n * sizeof(*v));
    if (limiter_decode(v, n, nlimits, &d) == -1) {
        free(v);
        return 0;
    }
    fuzz_assert(nlimits >= 1 && nlimits <= RL_MAX_LIMITS);
    if (d.over_budget) {
        fuzz_assert(n == 3 && v[0] == -1);
        fuzz_assert(d.now_ms == v[1] && d.budget_retry_ms == v[2] &&
            d.budget_retry_ms >= 0);
        fuzz_assert(d.nlimits == 0 && !d.allowed);
        free(v);
        return 0;
    }
    if (n == 3 + 5 * (size_t)nlimits)
        fuzz_assert(d.lease_dropped == v[n - 1] && d.lease_dropped >= 0);
    else
        fuzz_assert(n == 2 + 5 * (size_t)nlimits && d.lease_dropped == 0);
    fuzz_assert(d.nlimits == nlimits);
    fuzz_assert(d.allowed == 0 || d.allowed == 1);
    fuzz_assert(d.now_ms == v[1]);
    for (i = 0; i < (size_t)nlimits; i++) {
        fuzz_assert(d.st[i].allowed == 0 || d.st[i].allowed == 1);
        fuzz_assert(d.st[i].shadow == 0);
        fuzz_assert(d.st[i].limit >= 0 && d.st[i].remaining >= 0 &&
            d.st[i].reset_ms >= 0 && d.st[i].retry_after_ms >= -1);
        any_denied |= !d.st[i].allowed;
    }
    if (!d.allowed)
        fuzz_assert(any_denied);
    primary = limiter_primary(&d);
    fuzz_assert(primary >= 0 && primary < nlimits);
    if (!d.allowed)
        fuzz_assert(!d.st[primary].allowed);
    free(v);
    return 0;
}
