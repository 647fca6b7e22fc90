-- GCRA (generic cell rate algorithm) for the rate-limit check script.
--
-- The limit is "limit" requests per "period" microseconds, with a burst of
-- "burst" requests on top. Requests are spaced by the emission interval
-- T = ceil(period / limit) microseconds (rounding up never lets more than
-- the limit through), and the state of one limit is a Redis hash with one
-- field, "tat": the theoretical arrival time, in microseconds, at which the
-- limit would be back to idle. A request of cost c moves the TAT c * T
-- further; it passes when the new TAT is at most tau + T ahead of now,
-- where tau = burst * T. So a burst of 0 lets one request through every T,
-- strictly spaced, and a burst of B lets B + 1 through at once.
--
-- All times are integer microseconds. Lua numbers are doubles: integers are
-- exact up to 2^53, and floor or ceil of a quotient of integers below 2^52
-- is exact too. prepare() bounds tau + T by GCRA_MAX_US, so every
-- difference and quotient below stays in that range.
--
-- This file only defines the local table gcra; check.lua, which is
-- concatenated after it, parses the arguments and drives it.

local gcra = {
    -- What p1, p2 and p3 are, so that check.lua can validate them.
    params = {
        { name = 'limit', kind = 'integer' },
        { name = 'period', kind = 'integer' },
        { name = 'burst', kind = 'count' },
    },
}

-- The longest a limit may take to go from fully used to idle, tau + T, in
-- microseconds: about 31 years.
local GCRA_MAX_US = 1e15

-- Rounds a duration in microseconds up to whole milliseconds; negative
-- durations (the TAT is already past) count as 0.
local function gcra_ceil_ms(us)
    if us <= 0 then
        return 0
    end
    return math.ceil(us / 1000)
end

-- Checks the parameters beyond their syntax and adds what evaluate() needs
-- to p: p.interval (T) and p.tau. Returns nil if they are usable, otherwise
-- an error message.
function gcra.prepare(p)
    p.interval = math.ceil(p.period / p.limit)
    if (p.burst + 1) * p.interval > GCRA_MAX_US then
        return '(burst + 1) * period / limit must be at most ' ..
            string.format('%.0f', GCRA_MAX_US) .. ' microseconds'
    end
    p.tau = p.burst * p.interval
    return nil
end

-- Decides one limit without writing anything. p holds the parameters by
-- name and the values added by prepare(). Returns a table with allowed
-- (boolean), limit, remaining, reset_ms and retry_ms (integers, as
-- described in check.lua) and tat, the TAT to store on commit.
function gcra.evaluate(key, p, cost, now_us)
    local t, tau = p.interval, p.tau
    -- A TAT from the future (the clock went backwards after a failover, or
    -- the parameters changed) is kept: that never forgets requests.
    local tat0 = tonumber(redis.call('HGET', key, 'tat')) or now_us
    tat0 = math.max(tat0, now_us)

    local r = { limit = p.burst + 1 }
    local after = tat0
    if cost > p.burst + 1 then
        -- More than a full burst can never pass; cost * T is not even
        -- computed, as it could be far out of range.
        r.allowed = false
        r.retry_ms = -1
    else
        local new_tat = tat0 + cost * t
        local ahead = new_tat - now_us
        if ahead <= tau + t then
            r.allowed = true
            r.tat = new_tat
            r.retry_ms = 0
            after = new_tat
        else
            r.allowed = false
            r.retry_ms = math.max(1, gcra_ceil_ms(ahead - (tau + t)))
        end
    end
    r.remaining = math.max(0,
        math.floor((tau + t - (after - now_us)) / t))
    r.reset_ms = gcra_ceil_ms(after - now_us)
    return r
end

-- Charges the cost decided by evaluate(). Once the TAT is past the state is
-- the same as no state, so the key expires a second after that.
function gcra.commit(key, p, r, now_us)
    redis.call('HSET', key, 'tat', string.format('%.0f', r.tat))
    local ttl_ms = gcra_ceil_ms(r.tat - now_us) + 1000
    redis.call('PEXPIRE', key, string.format('%.0f', ttl_ms))
end
