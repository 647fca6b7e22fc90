-- Fixed calendar windows for the rate-limit check script.
--
-- The limit is "limit" requests per UTC calendar minute, hour, day or month
-- ("unit"), by Redis time. The state of one limit is a Redis hash with the
-- fields "win", the start of the window last written (unix seconds), and
-- "count", the requests counted in it. A stored window other than the
-- current one counts nothing. A request of cost c passes when
-- count + c <= limit; everything resets at the next window boundary.
--
-- Minutes, hours and days are fixed numbers of seconds, since unix time has
-- no leap seconds. Months are found from the civil (proleptic Gregorian)
-- date, with the integer day arithmetic of Howard Hinnant's
-- days_from_civil and civil_from_days.
--
-- This file only defines the local table fixed_window; check.lua, which is
-- concatenated after it, parses the arguments and drives it.

local fixed_window = {
    -- What p1, p2 and p3 are, so that check.lua can validate them.
    params = {
        { name = 'limit', kind = 'integer' },
        { name = 'unit', kind = 'name',
          names = { 'minute', 'hour', 'day', 'month' } },
        { name = 'p3', kind = 'zero' },
    },
}

-- Lengths of the units that are a fixed number of seconds.
local FIXED_WINDOW_SECONDS = { minute = 60, hour = 3600, day = 86400 }

-- Returns the number of days from 1970-01-01 to the date y-m-d (month
-- 1..12, day 1..31), negative before 1970.
local function fixed_window_days_from_civil(y, m, d)
    if m <= 2 then
        y = y - 1
    end
    local era = math.floor(y / 400)
    local yoe = y - era * 400                               -- [0, 399]
    local mp = (m + 9) % 12                                 -- March = 0
    local doy = math.floor((153 * mp + 2) / 5) + d - 1      -- [0, 365]
    local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) +
        doy                                                 -- [0, 146096]
    return era * 146097 + doe - 719468
end

-- Returns the date (year, month 1..12, day 1..31) that is z days after
-- 1970-01-01.
local function fixed_window_civil_from_days(z)
    z = z + 719468
    local era = math.floor(z / 146097)
    local doe = z - era * 146097                            -- [0, 146096]
    local yoe = math.floor((doe - math.floor(doe / 1460) +
        math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
    local doy = doe - (365 * yoe + math.floor(yoe / 4) -
        math.floor(yoe / 100))                              -- [0, 365]
    local mp = math.floor((5 * doy + 2) / 153)              -- March = 0
    local d = doy - math.floor((153 * mp + 2) / 5) + 1
    local m = mp < 10 and mp + 3 or mp - 9
    local y = yoe + era * 400
    if m <= 2 then
        y = y + 1
    end
    return y, m, d
end

-- Returns the start of the window holding now_s and the start of the next
-- one, in unix seconds.
local function fixed_window_bounds(unit, now_s)
    local length = FIXED_WINDOW_SECONDS[unit]
    if length ~= nil then
        local start = now_s - now_s % length
        return start, start + length
    end
    local y, m = fixed_window_civil_from_days(math.floor(now_s / 86400))
    local next_y, next_m = y, m + 1
    if next_m > 12 then
        next_y, next_m = y + 1, 1
    end
    return fixed_window_days_from_civil(y, m, 1) * 86400,
        fixed_window_days_from_civil(next_y, next_m, 1) * 86400
end

-- Decides one limit without writing anything. p holds the parameters by
-- name (p.limit, p.unit). Returns a table with allowed (boolean), limit,
-- remaining, reset_ms and retry_ms (integers, as described in check.lua)
-- and win, count, the state to store on commit.
function fixed_window.evaluate(key, p, cost, now_us)
    local start, next_start = fixed_window_bounds(p.unit,
        math.floor(now_us / 1e6))
    local stored = redis.call('HMGET', key, 'win', 'count')
    local count = 0
    if tonumber(stored[1]) == start then
        count = tonumber(stored[2]) or 0
    end

    -- At least a microsecond is left until the boundary: this is >= 1 ms.
    local until_next_ms = math.ceil((next_start * 1e6 - now_us) / 1000)
    local r = { limit = p.limit, win = start, reset_ms = until_next_ms }
    if count + cost <= p.limit then
        r.allowed = true
        r.count = count + cost
        r.remaining = p.limit - count - cost
        r.retry_ms = 0
    else
        r.allowed = false
        r.remaining = math.max(0, p.limit - count)
        if cost > p.limit then
            r.retry_ms = -1
        else
            r.retry_ms = until_next_ms
        end
    end
    return r
end

-- Charges the cost decided by evaluate(). The count means nothing after the
-- window, so the key expires a second after its end (r.reset_ms is always
-- the time until then).
function fixed_window.commit(key, p, r, now_us)
    redis.call('HSET', key,
        'win', string.format('%.0f', r.win),
        'count', string.format('%.0f', r.count))
    redis.call('PEXPIRE', key, string.format('%.0f', r.reset_ms + 1000))
end
