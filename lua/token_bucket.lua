-- Token bucket algorithm for the rate-limit check script.
--
-- The state of one limit is a Redis hash with two fields: "tokens", the
-- number of tokens left at the last write (a float), and "ts", the Redis time
-- of that write in microseconds. Tokens refill lazily at "rate" per second up
-- to "capacity", and a bucket that does not exist yet is full. A request of
-- cost c passes when at least c tokens are available.
--
-- This file only defines the local functions token_bucket_evaluate() and
-- token_bucket_commit(). The build concatenates it with the other algorithms
-- and check.lua into one script; check.lua validates the arguments, calls
-- evaluate for every limit, then commit for every limit it charges. Redis
-- runs the whole script on every call, so everything defined at the top level
-- is made anew each time: the files define a few plain functions and no
-- tables, and return several values instead of building result tables.

-- Decides one limit without writing anything. capacity and rate are the
-- validated p1 and p2. Returns allowed (boolean), limit, remaining, reset_ms
-- and retry_ms (integers, as described in check.lua), then what
-- token_bucket_commit() takes after the key: left, the exact tokens to store,
-- and ttl_ms.
--
-- Token counts are floats: 1e-9 absorbs their rounding error when comparing,
-- and durations in milliseconds are rounded up ignoring float noise of up to
-- a nanosecond (the 1e-6 below), so that exactly 50 ms does not become 51.
-- Bounds are applied with comparisons rather than math.max and math.min,
-- which cost a function call each; "if not (x > 0) then x = 0" is exactly
-- math.max(0, x), also for NaN and -0, and the other files write them the
-- same way.
local function token_bucket_evaluate(key, capacity, rate, cost, now_us)
    local stored = redis.call('HMGET', key, 'tokens', 'ts')
    local tokens = tonumber(stored[1])
    local ts = tonumber(stored[2])
    if tokens == nil or ts == nil then
        tokens = capacity
    else
        -- A clock that went backwards (failover) refills nothing. A
        -- negative or unreadable count of tokens counts as none.
        local elapsed_us = now_us - ts
        if not (elapsed_us > 0) then
            elapsed_us = 0
        end
        if not (tokens > 0) then
            tokens = 0
        end
        tokens = tokens + elapsed_us * rate / 1e6
        if not (tokens < capacity) then
            tokens = capacity
        end
    end

    local allowed, left, retry_ms
    if tokens + 1e-9 >= cost then
        allowed = true
        left = tokens - cost
        if not (left > 0) then
            left = 0
        end
        retry_ms = 0
    else
        allowed = false
        left = tokens
        if cost > capacity then
            retry_ms = -1
        else
            retry_ms = math.ceil((cost - tokens) * 1000 / rate - 1e-6)
            if not (retry_ms > 1) then
                retry_ms = 1
            end
        end
    end
    local reset_ms = math.ceil((capacity - left) * 1000 / rate - 1e-6)
    if reset_ms < 0 then
        reset_ms = 0
    end
    -- The key expires once an empty bucket would have refilled completely,
    -- when it is the same as a new one. The TTL is capped (at about 30000
    -- years) so that absurd parameters cannot make PEXPIRE fail after
    -- another limit has already been written.
    local ttl_ms = math.ceil(capacity * 1000 / rate) + 1000
    if 1e15 < ttl_ms then
        ttl_ms = 1e15
    end
    return allowed, capacity, math.floor(left + 1e-9), reset_ms, retry_ms,
        left, ttl_ms
end

-- Charges the cost decided by token_bucket_evaluate(), storing left tokens
-- at now_us.
--
-- Whole numbers are stored as string.format('%.0f') writes them. A whole
-- number from 0 up to 2^53 passed to redis.call() as a number becomes the
-- same digits on every Redis version, and more cheaply, so the algorithms
-- pass such numbers as they are: ttl_ms and now_us always are. The float
-- left is formatted here, so that it is stored the same on every Redis
-- version (newer ones would write a fraction in a shorter form).
local function token_bucket_commit(key, left, ttl_ms, now_us)
    redis.call('HSET', key,
        'tokens', string.format('%.17g', left), 'ts', now_us)
    redis.call('PEXPIRE', key, ttl_ms)
end
