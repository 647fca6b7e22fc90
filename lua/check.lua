-- The rate-limit check: decides all limits of one rule in one call.
--
-- This is the driver of the script made by concatenating token_bucket.lua,
-- sliding_window.lua and this file. It validates the arguments, reads the
-- Redis clock once, asks every limit whether it allows the cost, and only
-- if all of them do (and this is not a peek) charges the cost to every
-- limit. A denial writes nothing at all; a peek never writes.
--
-- KEYS[i] is the state key (a hash) of limit i; nothing else is touched.
-- ARGV[1] = cost (integer >= 1), ARGV[2] = "1" to peek or "0" to commit,
-- ARGV[3] = n, the number of limits (= #KEYS, 1..8), then three arguments
-- per limit: algorithm name, p1, p2.
--   token_bucket:   p1 = capacity (integer), p2 = refill rate per second
--                   (decimal, e.g. "0.5")
--   sliding_window: p1 = limit (integer), p2 = window in seconds (integer)
--
-- The reply is a flat array of integers:
--   allowed (1 if every limit allows), now_ms (Redis time), then for each
--   limit: allowed_i, limit_i, remaining_i, reset_ms_i, retry_after_ms_i.
-- remaining_i is what is left once the cost is charged when the limit
-- allows it (even if another limit denies or this is a peek), otherwise
-- what is available now, rounded down. reset_ms_i is the time until the
-- limit would be fully reset with no more requests, computed on the same
-- state as remaining_i: until the bucket is full, or until neither window
-- counts anything any more. retry_after_ms_i is 0 if the limit allows, the
-- time until this cost would pass if it denies, and -1 if the cost can never
-- pass. Bad arguments give an error reply beginning "ERR ratelimit: ".

local CHECK_MAX_LIMITS = 8
local CHECK_MAX_MS = 1e15

local check_algorithms = {
    token_bucket = token_bucket,
    sliding_window = sliding_window,
}

local function check_error(message)
    return redis.error_reply('ERR ratelimit: ' .. message)
end

-- Parses a strictly formatted positive number: kind 'integer' takes decimal
-- digits only, 'decimal' also a fraction ("2", "0.5", ".5"). Returns nil for
-- anything else, for zero, and for values too large to stay exact.
local function check_parse_number(s, kind)
    if type(s) ~= 'string' or #s > 15 then
        return nil
    end
    if not (s:match('^%d+$') or
            (kind == 'decimal' and
             (s:match('^%d+%.%d*$') or s:match('^%.%d+$')))) then
        return nil
    end
    local v = tonumber(s)
    if v == nil or v <= 0 then
        return nil
    end
    return v
end

local function check_run(keys, argv)
    local cost = check_parse_number(argv[1], 'integer')
    if cost == nil then
        return check_error('cost must be an integer >= 1')
    end
    local peek = argv[2]
    if peek ~= '0' and peek ~= '1' then
        return check_error('peek must be 0 or 1')
    end
    local n = check_parse_number(argv[3], 'integer')
    if n == nil or n > CHECK_MAX_LIMITS then
        return check_error('number of limits must be 1..' .. CHECK_MAX_LIMITS)
    end
    if n ~= #keys then
        return check_error('number of limits does not match number of keys')
    end
    if #argv ~= 3 + 3 * n then
        return check_error('expected 3 arguments per limit')
    end

    local limits = {}
    for i = 1, n do
        local base = 4 + 3 * (i - 1)
        local algorithm = check_algorithms[argv[base]]
        if algorithm == nil then
            return check_error('unknown algorithm for limit ' .. i)
        end
        local p = {}
        for j = 1, 2 do
            local spec = algorithm.params[j]
            p[j] = check_parse_number(argv[base + j], spec.kind)
            if p[j] == nil then
                return check_error('limit ' .. i .. ': ' .. spec.name ..
                    ' must be a positive ' .. spec.kind)
            end
        end
        limits[i] = { algorithm = algorithm, p1 = p[1], p2 = p[2] }
    end

    local time = redis.call('TIME')
    local now_us = tonumber(time[1]) * 1e6 + tonumber(time[2])

    -- Evaluate every limit first; write only once all of them allow.
    local results = {}
    local allowed = true
    for i = 1, n do
        local l = limits[i]
        results[i] = l.algorithm.evaluate(keys[i], l.p1, l.p2, cost, now_us)
        if not results[i].allowed then
            allowed = false
        end
    end
    if allowed and peek == '0' then
        for i = 1, n do
            local l = limits[i]
            l.algorithm.commit(keys[i], l.p1, l.p2, results[i], now_us)
        end
    end

    -- Durations are capped so that absurd parameters (a huge capacity with
    -- a tiny rate) cannot overflow Redis' conversion to a 64-bit integer.
    local reply = { allowed and 1 or 0, math.floor(now_us / 1000) }
    for i = 1, n do
        local r = results[i]
        reply[#reply + 1] = r.allowed and 1 or 0
        reply[#reply + 1] = r.limit
        reply[#reply + 1] = r.remaining
        reply[#reply + 1] = math.min(r.reset_ms, CHECK_MAX_MS)
        reply[#reply + 1] = math.min(r.retry_ms, CHECK_MAX_MS)
    end
    return reply
end

return check_run(KEYS, ARGV)
