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
-- is exact too. check.lua rejects parameters that make tau + T longer than
-- 1e15 microseconds (about 31 years), so every difference and quotient
-- below stays in that range.
--
-- This file only defines the local functions gcra_evaluate() and
-- gcra_commit(); check.lua, which is concatenated after it, validates the
-- arguments and drives them (see token_bucket.lua for why there are no
-- tables).

local gcra_evaluate, gcra_commit
if need_gcra then
    -- Decides one limit without writing anything. limit, period and burst are
    -- the validated p1, p2 and p3. Returns allowed (boolean), limit,
    -- remaining, reset_ms and retry_ms (integers, as described in check.lua),
    -- fresh (true when no TAT is stored: a charge creates the key), then what
    -- gcra_commit() takes after the key: tat, the TAT to store.
    --
    -- Durations in microseconds are rounded up to whole milliseconds, and
    -- negative ones (the TAT is already past) count as 0.
    function gcra_evaluate(key, limit, period, burst, cost, now_us)
        local t = math.ceil(period / limit)
        local tau = burst * t
        -- A TAT from the future (the clock went backwards after a failover, or
        -- the parameters changed) is kept: that never forgets requests.
        local stored = redis.call('HGET', key, 'tat')
        local tat0 = tonumber(stored) or now_us
        if now_us > tat0 then
            tat0 = now_us
        end

        local allowed, retry_ms, new_tat
        local after = tat0
        if cost > burst + 1 then
            -- More than a full burst can never pass; cost * T is not even
            -- computed, as it could be far out of range.
            allowed = false
            retry_ms = -1
        else
            new_tat = tat0 + cost * t
            local ahead = new_tat - now_us
            if ahead <= tau + t then
                allowed = true
                retry_ms = 0
                after = new_tat
            else
                allowed = false
                retry_ms = math.ceil((ahead - (tau + t)) / 1000)
                if not (retry_ms > 1) then
                    retry_ms = 1
                end
            end
        end
        local remaining = math.floor((tau + t - (after - now_us)) / t)
        if not (remaining > 0) then
            remaining = 0
        end
        local reset_ms = after - now_us
        if reset_ms <= 0 then
            reset_ms = 0
        else
            reset_ms = math.ceil(reset_ms / 1000)
        end
        return allowed, burst + 1, remaining, reset_ms, retry_ms,
            stored == false, new_tat
    end

    -- Charges the cost decided by gcra_evaluate(). Once the TAT is past the
    -- state is the same as no state, so the key expires a second after that.
    -- Whole numbers are passed to Redis as in sliding_window_commit(): the TAT
    -- is formatted only if the stored state was edited by hand.
    function gcra_commit(key, tat, now_us)
        local ttl_ms = tat - now_us
        if ttl_ms <= 0 then
            ttl_ms = 1000
        else
            ttl_ms = math.ceil(ttl_ms / 1000) + 1000
        end
        if not (tat % 1 == 0 and 1 / tat > 0 and tat < 2 ^ 53) then
            tat = string.format('%.0f', tat)
        end
        redis.call('HSET', key, 'tat', tat)
        redis.call('PEXPIRE', key, ttl_ms)
    end
end
