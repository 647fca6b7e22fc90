-- Sliding window algorithm for the rate-limit check script.
--
-- This is the two-counter approximation of a sliding window: time is cut
-- into fixed windows of "window" seconds, and the state of one limit is a
-- Redis hash with the fields "win" (the index of the window last written,
-- floor(time / window)), "cur" (requests counted in that window) and "prev"
-- (requests counted in the window before it). The count over the last
-- window is estimated as prev * (1 - elapsed / window) + cur, where elapsed
-- is the time since the current window began: the previous window's
-- requests are assumed to be spread evenly and slide out as time goes on.
-- A request of cost c passes when estimate + c <= limit.
--
-- This file only defines the local table sliding_window; check.lua, which is
-- concatenated after it, parses the arguments and drives it.

local sliding_window = {
    -- What p1, p2 and p3 are, so that check.lua can validate them.
    params = {
        { name = 'limit', kind = 'integer' },
        { name = 'window', kind = 'integer' },
        { name = 'p3', kind = 'zero' },
    },
}

-- The estimate is a float; this absorbs its rounding error when comparing.
local SLIDING_WINDOW_EPSILON = 1e-9

-- Rounds a duration in microseconds up to milliseconds, ignoring float
-- noise far below the microsecond resolution of Redis TIME.
local function sliding_window_ceil_ms(us)
    local r = math.ceil(us / 1000 - 1e-6)
    if r < 0 then
        return 0
    end
    return r
end

-- Time in microseconds from now until cost more can pass, for a denied
-- request with cost <= limit. Inside the current window only prev decays;
-- if cur + cost alone is over the limit, the request has to wait for the
-- next window, where cur becomes prev and decays in turn.
local function sliding_window_wait_us(limit, window_us, elapsed_us, prev, cur,
                                      cost)
    if cur + cost <= limit then
        -- Solve prev * (1 - t / window) + cur + cost = limit for t. Since
        -- the request is denied now, prev > 0 and t > elapsed.
        local t = window_us * (1 - (limit - cur - cost) / prev)
        return t - elapsed_us
    end
    -- In the next window the estimate is cur * (1 - t / window) + cost.
    local t = window_us * (1 - (limit - cost) / cur)
    return (window_us - elapsed_us) + t
end

-- Decides one limit without writing anything. p holds the parameters by
-- name (p.limit, p.window). Returns a table with allowed (boolean), limit,
-- remaining, reset_ms and retry_ms (integers, as described in check.lua)
-- and win, cur, prev, the state to store on commit.
function sliding_window.evaluate(key, p, cost, now_us)
    local limit, window = p.limit, p.window
    local window_us = window * 1e6
    local current = math.floor(now_us / window_us)
    local elapsed_us = now_us - current * window_us

    local stored = redis.call('HMGET', key, 'win', 'cur', 'prev')
    local win = tonumber(stored[1])
    local cur = tonumber(stored[2]) or 0
    local prev = tonumber(stored[3]) or 0
    if win == nil then
        cur, prev = 0, 0
    elseif win == current - 1 then
        cur, prev = 0, cur
    elseif win < current - 1 then
        cur, prev = 0, 0
    end
    -- A window index from the future (the clock went backwards after a
    -- failover) is kept as the current one: that never forgets requests.

    local estimate = prev * (1 - elapsed_us / window_us) + cur
    local r = { limit = limit, win = current, prev = prev }
    local counted = cur
    if estimate + cost <= limit + SLIDING_WINDOW_EPSILON then
        r.allowed = true
        r.cur = cur + cost
        counted = cur + cost
        estimate = estimate + cost
        r.retry_ms = 0
    else
        r.allowed = false
        if cost > limit then
            r.retry_ms = -1
        else
            r.retry_ms = math.max(1, sliding_window_ceil_ms(
                sliding_window_wait_us(limit, window_us, elapsed_us, prev,
                    cur, cost)))
        end
    end
    r.remaining = math.max(0,
        math.floor(limit - estimate + SLIDING_WINDOW_EPSILON))

    -- Fully reset means the estimate is 0: requests counted in the current
    -- window weigh until the end of the next one, the previous window's
    -- until the end of this one.
    local until_end_us = window_us - elapsed_us
    if counted > 0 then
        r.reset_ms = sliding_window_ceil_ms(until_end_us + window_us)
    elseif prev > 0 then
        r.reset_ms = sliding_window_ceil_ms(until_end_us)
    else
        r.reset_ms = 0
    end
    return r
end

-- Charges the cost decided by evaluate(). What is counted in the current
-- window matters until the end of the next one, at most two windows away.
-- The TTL is capped as in token_bucket.commit().
function sliding_window.commit(key, p, r, now_us)
    redis.call('HSET', key,
        'win', string.format('%.0f', r.win),
        'cur', string.format('%.0f', r.cur),
        'prev', string.format('%.0f', r.prev))
    local ttl_ms = math.min(2 * p.window * 1000 + 1000, 1e15)
    redis.call('PEXPIRE', key, string.format('%.0f', ttl_ms))
end
