-- The counter budget of a tenant, for the rate-limit check script.
--
-- A tenant may create at most "budget" counters (Redis keys of its limits
-- that are named after what its callers send) in each budget window of
-- "window" seconds, aligned on the epoch; check.lua describes what is
-- counted and when this is asked. The state is two keys in the tenant's
-- hash-tag slot, both written only when counters are created and both
-- expiring at the end of the window:
--
--   names  a HyperLogLog of the names of the counters created this window,
--          whose PFCOUNT is about how many distinct ones there were
--          (within about 1 %): a counter that expires and comes back in the
--          same window counts once;
--   made   how many counters were created this window, each time one was:
--          never less than the distinct ones.
--
-- The exact count spares the estimate: while "made" leaves room for the
-- new counters, so does the number of distinct ones, and no PFCOUNT is
-- needed. PFCOUNT of a HyperLogLog that has changed since it was last
-- counted reads all of it (in its dense form, 16384 registers: tens of
-- microseconds), so a tenant below its budget pays a GET, a PFADD and an
-- INCRBY for a new counter, and only one that has created more than its
-- budget (counters that expired and came back, or more distinct ones than
-- the budget) pays the count. A refused call adds nothing to the
-- HyperLogLog, so that the next refusal finds its count cached.
--
-- This file only defines the local function budget_admit(); check.lua,
-- which is concatenated after it, calls it (see token_bucket.lua for why
-- there are no tables but the one made for PFADD).

local budget_admit
if need_budget then
    -- Decides whether the counters named in made (a list of the keys the call
    -- would create, at least one) may be created, with names and made_key the
    -- budget's two keys, budget and window the validated numbers. Admitted,
    -- they are counted (PFADD, INCRBY; the first counters of a window give
    -- both keys their TTL, until the window ends) and nil is returned.
    -- Refused, when the tenant has already created budget distinct counters
    -- this window, nothing is written and the time in milliseconds until the
    -- window ends is returned: the remaining TTL of the made key, which ends
    -- with the window that the clock of its first write saw (or, should the
    -- key have no TTL, the time to the end of the window by this clock). The
    -- count may end up a few over the budget: a call creating k counters is
    -- admitted while fewer than budget were created.
    function budget_admit(names, made_key, budget, window, made, now_us)
        local k = #made
        local window_us = window * 1e6
        local until_end_ms = math.ceil((window_us - now_us % window_us) / 1000)
        local created = tonumber(redis.call('GET', made_key)) or 0
        if created + k > budget and
                redis.call('PFCOUNT', names) >= budget then
            local ttl_ms = redis.call('PTTL', made_key)
            if ttl_ms > 0 then
                return ttl_ms
            end
            return until_end_ms
        end
        redis.call('PFADD', names, unpack(made))
        if redis.call('INCRBY', made_key, k) == k then
            redis.call('PEXPIRE', names, until_end_ms)
            redis.call('PEXPIRE', made_key, until_end_ms)
        end
        return nil
    end
end
