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
-- This file only defines the local functions sliding_window_evaluate() and
-- sliding_window_commit(); check.lua, which is concatenated after it,
-- validates the arguments and drives them (see token_bucket.lua for why
-- there are no tables).

local sliding_window_evaluate, sliding_window_commit
if need_sliding_window then
    -- Decides one limit without writing anything. limit and window are the
    -- validated p1 and p2. Returns allowed (boolean), limit, remaining,
    -- reset_ms and retry_ms (integers, as described in check.lua), fresh (true
    -- when no state is stored: a charge creates the key), then what
    -- sliding_window_commit() takes after the key: win, cur and prev, the
    -- state to store, and ttl_ms (false when the key keeps its TTL).
    --
    -- The estimate is a float: 1e-9 absorbs its rounding error when comparing,
    -- and durations in microseconds are rounded up to milliseconds ignoring
    -- float noise far below the microsecond resolution of Redis TIME (the 1e-6
    -- below, in milliseconds).
    function sliding_window_evaluate(key, limit, window, cost, now_us)
        local window_us = window * 1e6
        -- math.floor(now_us / window_us), without a function call (see the
        -- reply in check.lua).
        local current = (now_us - now_us % window_us) / window_us
        local elapsed_us = now_us - current * window_us

        local stored = redis.call('HMGET', key, 'win', 'cur', 'prev')
        local win = tonumber(stored[1])
        local cur, prev = 0, 0
        if win == nil or win < current - 1 then
            -- Nothing stored, or nothing that still counts.
        elseif win == current - 1 then
            prev = tonumber(stored[2]) or 0
        else
            -- A window index from the future (the clock went backwards after
            -- a failover) is kept as the current one: that never forgets
            -- requests. The next window stays the stored one, evaluated as at
            -- its start, where prev weighs fully (the reply's durations are
            -- counted from there, so they are short by as much as this clock
            -- is behind), so that a clock flapping back and forth across a
            -- boundary neither weighs prev by the earlier clock nor, when it
            -- is back, moves cur to prev. A window further ahead (a clock
            -- that was off by more than a window) is not kept as a window: it
            -- is rewritten as the current one.
            cur = tonumber(stored[2]) or 0
            prev = tonumber(stored[3]) or 0
            if win == current + 1 then
                current = win
                elapsed_us = 0
            end
        end

        local estimate = prev * (1 - elapsed_us / window_us) + cur
        local allowed, counted, retry_ms
        if estimate + cost <= limit + 1e-9 then
            allowed = true
            counted = cur + cost
            estimate = estimate + cost
            retry_ms = 0
        else
            allowed = false
            counted = cur
            if cost > limit then
                retry_ms = -1
            else
                -- The time until cost more can pass. Inside the current window
                -- only prev decays; if cur + cost alone is over the limit, the
                -- request has to wait for the next window, where cur becomes
                -- prev and decays in turn.
                local wait_us
                if cur + cost <= limit then
                    -- Solve prev * (1 - t / window) + cur + cost = limit for
                    -- t. Since the request is denied now, prev > 0 and t >
                    -- elapsed.
                    wait_us = window_us * (1 - (limit - cur - cost) / prev) -
                        elapsed_us
                else
                    -- In the next window the estimate is
                    -- cur * (1 - t / window) + cost.
                    wait_us = (window_us - elapsed_us) +
                        window_us * (1 - (limit - cost) / cur)
                end
                retry_ms = math.ceil(wait_us / 1000 - 1e-6)
                if not (retry_ms > 1) then
                    retry_ms = 1
                end
            end
        end
        local remaining = math.floor(limit - estimate + 1e-9)
        if not (remaining > 0) then
            remaining = 0
        end

        -- Fully reset means the estimate is 0: requests counted in the current
        -- window weigh until the end of the next one, the previous window's
        -- until the end of this one.
        local until_end_us = window_us - elapsed_us
        local reset_ms = 0
        if counted > 0 then
            reset_ms = math.ceil((until_end_us + window_us) / 1000 - 1e-6)
        elseif prev > 0 then
            reset_ms = math.ceil(until_end_us / 1000 - 1e-6)
        end
        if reset_ms < 0 then
            reset_ms = 0
        end
        -- What is counted in the current window matters until the end of the
        -- next one, and no longer: the key expires a second after that. The
        -- TTL is capped as in token_bucket_evaluate().
        --
        -- A key whose window is already the current one got its TTL from the
        -- write that began this window, which is at least as far as the
        -- counts of this window matter: the commit keeps it (ttl_ms false)
        -- and writes only cur, saving a command. So does a key of the next
        -- window found after the clock went back: its TTL is the later
        -- clock's.
        local ttl_ms = false
        if win ~= current then
            ttl_ms = math.ceil((until_end_us + window_us) / 1000 - 1e-6) + 1000
            if 1e15 < ttl_ms then
                ttl_ms = 1e15
            end
        end
        return allowed, limit, remaining, reset_ms, retry_ms,
            stored[1] == false, current, counted, prev, ttl_ms
    end

    -- Charges the cost decided by sliding_window_evaluate(). Whole numbers are
    -- passed to Redis as numbers as in token_bucket_commit(): win and ttl_ms
    -- always are such numbers, and cur and prev too unless the stored state
    -- was edited by hand (a fraction, -0, something huge), which is formatted
    -- with '%.0f' as it always was. The test "x % 1 == 0 and 1 / x > 0 and x <
    -- 2 ^ 53" picks exactly the numbers from 0 up to 2^53: 1 / x is -inf for
    -- -0, and NaN and the infinities fail x % 1 == 0.
    function sliding_window_commit(key, win, cur, prev, ttl_ms)
        if not (cur % 1 == 0 and 1 / cur > 0 and cur < 2 ^ 53) then
            cur = string.format('%.0f', cur)
        end
        if not (prev % 1 == 0 and 1 / prev > 0 and prev < 2 ^ 53) then
            prev = string.format('%.0f', prev)
        end
        if ttl_ms then
            redis.call('HSET', key, 'win', win, 'cur', cur, 'prev', prev)
            redis.call('PEXPIRE', key, ttl_ms)
        else
            redis.call('HSET', key, 'cur', cur)
        end
    end
end
