-- The rate-limit check: decides all limits of one rule in one call.
--
-- This is the driver of the script made by concatenating token_bucket.lua,
-- sliding_window.lua, gcra.lua, fixed_window.lua and this file. It
-- validates the arguments, reads the Redis clock once, asks every limit
-- whether it allows the cost, and only if every enforced limit does (and
-- this is not a peek) charges the cost. A denial writes nothing at all; a
-- peek never writes.
--
-- KEYS[i] is the state key (a hash) of limit i; nothing else is touched.
-- ARGV[1] = cost (integer >= 1), ARGV[2] = "1" to peek or "0" to commit,
-- ARGV[3] = n, the number of limits (= #KEYS, 1..8), then five arguments
-- per limit: algorithm name, p1, p2, p3, shadow.
--   token_bucket:   p1 = capacity (integer), p2 = refill rate per second
--                   (decimal, e.g. "0.5"), p3 = "0"
--   sliding_window: p1 = limit (integer), p2 = window in seconds (integer),
--                   p3 = "0"
--   gcra:           p1 = limit (integer, requests per period), p2 = period
--                   in microseconds (integer), p3 = burst (integer >= 0;
--                   burst + 1 requests may pass at once)
--   fixed_window:   p1 = limit (integer), p2 = "minute", "hour", "day" or
--                   "month" (UTC calendar windows), p3 = "0"
-- Integers are decimal digits only, at most 15 of them. shadow is "1" for a
-- limit that is evaluated and counted but never enforced, otherwise "0".
--
-- Enforced (non-shadow) limits decide: the request is allowed when every
-- one of them allows it (so also when all limits are shadow limits). An
-- allowed request that is not a peek is charged to every enforced limit and
-- to every shadow limit that allows it on its own; a shadow limit that
-- would deny is not charged.
--
-- The reply is a flat array of integers:
--   allowed (1 if every enforced limit allows), now_ms (Redis time), then
--   for each limit: allowed_i, limit_i, remaining_i, reset_ms_i,
--   retry_after_ms_i.
-- allowed_i is the limit's own verdict, also for a shadow limit. limit_i is
-- the number of requests the limit lets through at once: the capacity, the
-- limit, or burst + 1 for gcra. remaining_i is what is left once the cost
-- is charged when the limit allows it (even if another limit denies or this
-- is a peek), otherwise what is available now, rounded down. reset_ms_i is
-- the time until the limit would be fully reset with no more requests,
-- computed on the same state as remaining_i: until the bucket is full, until
-- neither window counts anything any more, until the TAT is reached; for
-- fixed_window it is always the time until the current window ends.
-- retry_after_ms_i is 0 if the limit allows, the time until this cost would
-- pass if it denies, and -1 if the cost can never pass. Every key written
-- gets a TTL. Bad arguments give an error reply beginning "ERR ratelimit: ".
--
-- Test hook: one more argument after the last limit, "__now_us=<digits>",
-- replaces Redis TIME with that time in microseconds (unix epoch), so that
-- tests can place calls exactly at window edges. It is accepted only as the
-- very last of exactly 3 + 5 * n + 1 arguments; production callers never
-- send it.

local CHECK_MAX_LIMITS = 8
local CHECK_MAX_MS = 1e15
-- The latest time the test hook accepts (2^52 microseconds, in 2112), so
-- that sums of times and durations stay exact.
local CHECK_MAX_NOW_US = 2 ^ 52
local CHECK_NOW_PREFIX = '__now_us='

local check_algorithms = {
    token_bucket = token_bucket,
    sliding_window = sliding_window,
    gcra = gcra,
    fixed_window = fixed_window,
}

local function check_error(message)
    return redis.error_reply('ERR ratelimit: ' .. message)
end

-- Parses a strictly formatted number: kind 'integer' takes decimal digits
-- only, 'decimal' also a fraction ("2", "0.5", ".5"), 'count' digits only
-- and also zero. Returns nil for anything else, for zero (except as a
-- count), and for values too large to stay exact.
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
    if v == nil or v < 0 or (v == 0 and kind ~= 'count') then
        return nil
    end
    return v
end

-- Parses one algorithm parameter described by spec (an entry of the
-- algorithm's params). Returns its value, or nil and an error message.
local function check_parse_param(s, spec)
    if spec.kind == 'zero' then
        if s ~= '0' then
            return nil, spec.name .. ' must be 0'
        end
        return 0
    end
    if spec.kind == 'name' then
        for _, name in ipairs(spec.names) do
            if s == name then
                return s
            end
        end
        return nil, spec.name .. ' must be one of ' ..
            table.concat(spec.names, ', ')
    end
    local v = check_parse_number(s, spec.kind)
    if v == nil then
        if spec.kind == 'count' then
            return nil, spec.name .. ' must be an integer >= 0'
        end
        return nil, spec.name .. ' must be a positive ' .. spec.kind
    end
    return v
end

-- Parses the test hook argument. Returns the time in microseconds, or nil.
local function check_parse_now(s)
    if s:sub(1, #CHECK_NOW_PREFIX) ~= CHECK_NOW_PREFIX then
        return nil
    end
    local digits = s:sub(#CHECK_NOW_PREFIX + 1)
    if not digits:match('^%d+$') or #digits > 16 then
        return nil
    end
    local v = tonumber(digits)
    if v > CHECK_MAX_NOW_US then
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
    local now_us
    if #argv == 3 + 5 * n + 1 then
        now_us = check_parse_now(argv[#argv])
        if now_us == nil then
            return check_error('expected 5 arguments per limit (or a last ' ..
                CHECK_NOW_PREFIX .. '<microseconds> test argument)')
        end
    elseif #argv ~= 3 + 5 * n then
        return check_error('expected 5 arguments per limit')
    end

    local limits = {}
    for i = 1, n do
        local base = 4 + 5 * (i - 1)
        local algorithm = check_algorithms[argv[base]]
        if algorithm == nil then
            return check_error('unknown algorithm for limit ' .. i)
        end
        local p = {}
        for j = 1, 3 do
            local spec = algorithm.params[j]
            local v, message = check_parse_param(argv[base + j], spec)
            if v == nil then
                return check_error('limit ' .. i .. ': ' .. message)
            end
            p[spec.name] = v
        end
        if algorithm.prepare ~= nil then
            local message = algorithm.prepare(p)
            if message ~= nil then
                return check_error('limit ' .. i .. ': ' .. message)
            end
        end
        local shadow = argv[base + 4]
        if shadow ~= '0' and shadow ~= '1' then
            return check_error('limit ' .. i .. ': shadow must be 0 or 1')
        end
        limits[i] = { algorithm = algorithm, p = p, shadow = shadow == '1' }
    end

    if now_us == nil then
        local time = redis.call('TIME')
        now_us = tonumber(time[1]) * 1e6 + tonumber(time[2])
    end

    -- Evaluate every limit first; write only once all enforced ones allow.
    local results = {}
    local allowed = true
    for i = 1, n do
        local l = limits[i]
        results[i] = l.algorithm.evaluate(keys[i], l.p, cost, now_us)
        if not results[i].allowed and not l.shadow then
            allowed = false
        end
    end
    if allowed and peek == '0' then
        -- Every enforced limit allows here, so this charges all of them and
        -- the shadow limits that allow.
        for i = 1, n do
            local l = limits[i]
            if results[i].allowed then
                l.algorithm.commit(keys[i], l.p, results[i], now_us)
            end
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
