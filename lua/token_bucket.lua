-- Token bucket algorithm for the rate-limit check script.
--
-- The state of one limit is a Redis hash with two fields: "tokens", the
-- number of tokens left at the last write (a float), and "ts", the Redis time
-- of that write in microseconds. Tokens refill lazily at "rate" per second up
-- to "capacity", and a bucket that does not exist yet is full. A request of
-- cost c passes when at least c tokens are available.
--
-- This file only defines the local table token_bucket. The build
-- concatenates it with the other algorithms and check.lua into one script;
-- check.lua parses the arguments and calls evaluate() for every limit, then
-- commit() for every limit it charges.

local token_bucket = {
    -- What p1, p2 and p3 are, so that check.lua can validate them.
    params = {
        { name = 'capacity', kind = 'integer' },
        { name = 'rate', kind = 'decimal' },
        { name = 'p3', kind = 'zero' },
    },
}

-- Token counts are floats; this absorbs their rounding error when comparing.
local TOKEN_BUCKET_EPSILON = 1e-9

-- Rounds a duration in milliseconds up, ignoring float noise of up to a
-- nanosecond so that exactly 50 ms does not become 51.
local function token_bucket_ceil_ms(ms)
    local r = math.ceil(ms - 1e-6)
    if r < 0 then
        return 0
    end
    return r
end

-- Decides one limit without writing anything. p holds the parameters by
-- name (p.capacity, p.rate). Returns a table with allowed (boolean), limit,
-- remaining, reset_ms and retry_ms (integers, as described in check.lua)
-- and left, the exact tokens to store on commit.
function token_bucket.evaluate(key, p, cost, now_us)
    local capacity, rate = p.capacity, p.rate
    local stored = redis.call('HMGET', key, 'tokens', 'ts')
    local tokens = tonumber(stored[1])
    local ts = tonumber(stored[2])
    if tokens == nil or ts == nil then
        tokens = capacity
    else
        -- A clock that went backwards (failover) refills nothing.
        local elapsed_us = math.max(0, now_us - ts)
        tokens = math.min(capacity,
            math.max(0, tokens) + elapsed_us * rate / 1e6)
    end

    local r = { limit = capacity }
    if tokens + TOKEN_BUCKET_EPSILON >= cost then
        r.allowed = true
        r.left = math.max(0, tokens - cost)
        r.retry_ms = 0
    else
        r.allowed = false
        r.left = tokens
        if cost > capacity then
            r.retry_ms = -1
        else
            r.retry_ms = math.max(1,
                token_bucket_ceil_ms((cost - tokens) * 1000 / rate))
        end
    end
    r.remaining = math.floor(r.left + TOKEN_BUCKET_EPSILON)
    r.reset_ms = token_bucket_ceil_ms((capacity - r.left) * 1000 / rate)
    return r
end

-- Charges the cost decided by evaluate(). The key expires once an empty
-- bucket would have refilled completely, when it is the same as a new one.
-- The TTL is capped (at about 30000 years) so that absurd parameters cannot
-- make PEXPIRE fail after another limit has already been written.
function token_bucket.commit(key, p, r, now_us)
    redis.call('HSET', key,
        'tokens', string.format('%.17g', r.left),
        'ts', string.format('%.0f', now_us))
    local ttl_ms = math.min(math.ceil(p.capacity * 1000 / p.rate) + 1000,
        1e15)
    redis.call('PEXPIRE', key, string.format('%.0f', ttl_ms))
end
