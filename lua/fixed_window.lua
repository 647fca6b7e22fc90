-- Fixed calendar windows for the rate-limit check script.
--
-- The limit is "limit" requests per UTC calendar minute, hour, day or month
-- ("unit"), by Redis time. The state of one limit is a Redis hash with the
-- fields "win", the start of the window last written (unix seconds), and
-- "count", the requests counted in it. A stored window other than the
-- current one counts nothing, but for the next one: see "A clock that goes
-- back" below. A request of cost c passes when count + c <= limit;
-- everything resets at the next window boundary.
--
-- Minutes, hours and days are fixed numbers of seconds, since unix time has
-- no leap seconds. Months are found from the civil (proleptic Gregorian)
-- date, with the integer day arithmetic of Howard Hinnant's
-- days_from_civil and civil_from_days.
--
-- A clock that goes back: Redis time is the clock of whichever node is the
-- master, and after a failover (or with two nodes whose clocks differ,
-- failing over back and forth) it may be behind the one that wrote the
-- key. A call that finds the window after its own stored keeps counting in
-- that window, as if its clock were the later one, so that a clock
-- flapping across a boundary does not start a fresh window (with a count
-- of 0) at every jump. Only the next window is kept: a stored window
-- further ahead (a clock that went back by more than a whole window, or
-- one that was years ahead) is replaced by the current one as before, so
-- that a count from a wrong clock holds for at most two windows. The key
-- keeps the TTL that the later clock gave it, which ends a second after
-- that window, so it lives exactly as long as it counts (Redis stores an
-- expiry as a unix time, and since 7.0 sends it to replicas as one).
--
-- This file only defines the local functions fixed_window_evaluate() and
-- fixed_window_commit() and the two date helpers below; check.lua, which is
-- concatenated after it, validates the arguments and drives them (see
-- token_bucket.lua for why there are no tables).

local fixed_window_days_from_civil, fixed_window_civil_from_days
local fixed_window_evaluate, fixed_window_commit
if need_fixed_window then
    -- Returns the number of days from 1970-01-01 to the date y-m-d (month
    -- 1..12, or 13 for January of the year after; day 1..31), negative before
    -- 1970.
    function fixed_window_days_from_civil(y, m, d)
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
    function fixed_window_civil_from_days(z)
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

    -- Decides one limit without writing anything. limit and unit ("minute",
    -- "hour", "day" or "month") are the validated p1 and p2. Returns allowed
    -- (boolean), limit, remaining, reset_ms and retry_ms (integers, as
    -- described in check.lua), fresh (true when no state is stored: a charge
    -- creates the key), then what fixed_window_commit() takes after the key:
    -- win and count, the state to store, and ttl_ms (false when the key keeps
    -- its TTL).
    function fixed_window_evaluate(key, limit, unit, cost, now_us)
        -- The start of the window holding now and the start of the next one,
        -- in unix seconds. now_s is math.floor(now_us / 1e6), without a
        -- function call (see the reply in check.lua).
        local now_s = (now_us - now_us % 1e6) / 1e6
        local start, next_start
        if unit == 'month' then
            local y, m =
                fixed_window_civil_from_days(math.floor(now_s / 86400))
            local next_y, next_m = y, m + 1
            if next_m > 12 then
                next_y, next_m = y + 1, 1
            end
            start = fixed_window_days_from_civil(y, m, 1) * 86400
            next_start =
                fixed_window_days_from_civil(next_y, next_m, 1) * 86400
        else
            local length = 86400
            if unit == 'minute' then
                length = 60
            elseif unit == 'hour' then
                length = 3600
            end
            start = now_s - now_s % length
            next_start = start + length
        end

        local stored = redis.call('HMGET', key, 'win', 'count')
        local stored_win = tonumber(stored[1])
        local count = 0
        if stored_win == start then
            count = tonumber(stored[2]) or 0
        elseif stored_win == next_start then
            -- The clock went back from the next window (see the top of this
            -- file): that window goes on counting, and ends when this clock
            -- reaches its end. A month starts on a whole day, and the month
            -- after December is month 13 to fixed_window_days_from_civil().
            count = tonumber(stored[2]) or 0
            if unit == 'month' then
                local y, m = fixed_window_civil_from_days(next_start / 86400)
                start = next_start
                next_start = fixed_window_days_from_civil(y, m + 1, 1) * 86400
            else
                start, next_start = next_start, 2 * next_start - start
            end
        end

        -- At least a microsecond is left until the boundary: this is >= 1 ms.
        local until_next_ms = math.ceil((next_start * 1e6 - now_us) / 1000)
        local allowed, remaining, retry_ms
        if count + cost <= limit then
            allowed = true
            remaining = limit - count - cost
            retry_ms = 0
        else
            allowed = false
            remaining = limit - count
            if not (remaining > 0) then
                remaining = 0
            end
            if cost > limit then
                retry_ms = -1
            else
                retry_ms = until_next_ms
            end
        end
        -- The count means nothing after the window, so the key expires a
        -- second after its end. A key of this window already has that TTL,
        -- from the write that began the window: the commit keeps it (false)
        -- and writes only the count. (So does a key of the next window found
        -- after the clock went back: its TTL is the later clock's.)
        local ttl_ms = false
        if stored_win ~= start then
            ttl_ms = until_next_ms + 1000
        end
        return allowed, limit, remaining, until_next_ms, retry_ms,
            stored[1] == false, start, count + cost, ttl_ms
    end

    -- Charges the cost decided by fixed_window_evaluate(). Whole numbers are
    -- passed to Redis as in sliding_window_commit(): win and ttl_ms always are
    -- such numbers, count unless the stored state was edited by hand.
    function fixed_window_commit(key, win, count, ttl_ms)
        if not (count % 1 == 0 and 1 / count > 0 and count < 2 ^ 53) then
            count = string.format('%.0f', count)
        end
        if ttl_ms then
            redis.call('HSET', key, 'win', win, 'count', count)
            redis.call('PEXPIRE', key, ttl_ms)
        else
            redis.call('HSET', key, 'count', count)
        end
    end
end
