-- Token bucket algorithm for the rate-limit check script.
--
-- The state of one limit is a Redis string of 24 bytes, three big-endian
-- IEEE doubles (struct.pack('>ddd')): the number of tokens left at the
-- last write ("tokens", a float), the Redis time of that write in
-- microseconds ("ts", a whole number, exact in a double until the year
-- 2255) and when the key expires, in milliseconds of Redis time ("exp",
-- as the last write that set its TTL put it). Tokens refill lazily at
-- "rate" per second up to "capacity", and a bucket that does not exist
-- yet is full. A request of cost c passes when at least c tokens are
-- available.
--
-- Why a string, and packed: a check reads the state with one GET and
-- writes it with one SET, where a hash took HMGET, HSET and PEXPIRE; and
-- packing the numbers costs Redis a small part of what printing them as
-- decimal text ("%.17g") and reading them back did. Why exp: a SET that
-- keeps the key's TTL (KEEPTTL) costs Redis half of one that sets it (PX,
-- and the number printed), so a charge sets the TTL only when the key
-- would otherwise expire before the bucket is full again, and then sets
-- it a second longer than needed; the charges of the next second keep it.
-- Measured with callgrind in redis-server, a one-limit check went from
-- 130,000 to about 100,000 instructions (doc/performance.md). Earlier
-- versions stored a hash with the fields "tokens" and "ts" as decimal
-- text; such a bucket is still read (GET fails on it, and HMGET reads it)
-- and the next charge replaces it with the string.
--
-- This file only defines the local functions token_bucket_evaluate() and
-- token_bucket_commit(), and only for a call that needs them (need.lua).
-- The build concatenates it with the other algorithms and check.lua into
-- one script; check.lua validates the arguments, calls evaluate for every
-- limit, then commit for every limit it charges. Redis runs the whole
-- script on every call, so everything defined at the top level is made
-- anew each time: the files define a few plain functions, only those the
-- call needs, and no tables, and return several values instead of
-- building result tables.

local token_bucket_evaluate, token_bucket_commit
if need_token_bucket then
    -- Decides one limit without writing anything. capacity and rate are the
    -- validated p1 and p2. Returns allowed (boolean), limit, remaining,
    -- reset_ms and retry_ms (integers, as described in check.lua), fresh (true
    -- when no bucket is stored: a charge creates the key), then what
    -- token_bucket_commit() takes after the key: left, the exact tokens to
    -- store, ttl_ms (or false), at_us, the time to store with them, and
    -- exp_ms, the key's expiry to store.
    --
    -- A clock that goes back (failover to a node whose clock is behind) finds
    -- a "ts" ahead of now. The bucket then refills nothing until the clock
    -- reaches ts, and a charge keeps ts rather than store the earlier now:
    -- otherwise the next call on the clock ahead would refill the time between
    -- the two clocks once more, and a clock flapping between them would refill
    -- it on every flap. So the stored time never moves backwards, and the wait
    -- until ts counts in reset_ms, retry_ms and the TTL. A ts further ahead
    -- than the time an empty bucket takes to fill (capacity / rate) is
    -- forgotten, keeping its tokens, as the script did before: the clock went
    -- back by more than that, or wrote ts while it was that far ahead (a node
    -- a year ahead put right), and a bucket that refills nothing for longer
    -- than a full refill would deny a client below its rate. A charge made on
    -- a clock ahead thus withholds at most one full refill. All of this is
    -- only on the path where the clock did not move forward.
    --
    -- Token counts are floats: 1e-9 absorbs their rounding error when
    -- comparing, and durations in milliseconds are rounded up ignoring float
    -- noise of up to a nanosecond (the 1e-6 below), so that exactly 50 ms does
    -- not become 51. Bounds are applied with comparisons rather than math.max
    -- and math.min, which cost a function call each; "if not (x > 0) then x =
    -- 0" is exactly math.max(0, x), also for NaN and -0, and the other files
    -- write them the same way.
    function token_bucket_evaluate(key, capacity, rate, cost, now_us)
        local stored = redis.pcall('GET', key)
        local fresh = stored == false
        local tokens, ts, exp_ms
        if type(stored) == 'string' then
            if #stored == 24 then
                tokens, ts, exp_ms = struct.unpack('>ddd', stored)
            end
        elseif not fresh then
            -- A hash (WRONGTYPE): a bucket an earlier version wrote.
            stored = redis.call('HMGET', key, 'tokens', 'ts')
            tokens, ts = tonumber(stored[1]), tonumber(stored[2])
        end
        local at_us, ahead_ms = now_us, 0
        if tokens == nil or ts == nil then
            tokens = capacity
        else
            -- A clock that went backwards (failover) refills nothing, and ts
            -- is kept if it is at most a full refill ahead (see above; a NaN
            -- ts is not). A ts written by hand as a fraction is kept as the
            -- whole number after it. An unreadable count of tokens
            -- (NaN, minus infinity) counts as none; a negative one is a debt
            -- (a lease settled above what it reserved: lease.lua), which the
            -- refill pays back before anything passes.
            local elapsed_us = now_us - ts
            if not (elapsed_us > 0) then
                if -elapsed_us <= capacity * 1e6 / rate then
                    at_us = ts
                    ahead_ms = -elapsed_us / 1000
                    if not (ts % 1 == 0) then
                        at_us = math.ceil(ts)
                    end
                end
                elapsed_us = 0
            end
            if not (tokens > -1e15) then
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
                retry_ms = math.ceil((cost - tokens) * 1000 / rate + ahead_ms -
                    1e-6)
                if not (retry_ms > 1) then
                    retry_ms = 1
                end
            end
        end
        local reset_ms = math.ceil((capacity - left) * 1000 / rate + ahead_ms -
            1e-6)
        if reset_ms < 0 then
            reset_ms = 0
        end
        -- The key expires one to two seconds after the bucket is full again
        -- (reset_ms, which counts the wait until a ts ahead), when it is the
        -- same as a new one: a bucket charged once is kept for the refill of
        -- that cost, not for that of a whole bucket. A charge keeps the
        -- key's TTL when it lasts at least a second past reset_ms (ttl_ms
        -- false), and otherwise sets it to two seconds past (see the top).
        -- The TTL is capped (at about 30000 years) so that absurd
        -- parameters cannot make SET fail after another limit has already
        -- been written.
        local now_ms = now_us / 1000
        local ttl_ms = reset_ms + 1000
        if exp_ms ~= nil and exp_ms >= now_ms + ttl_ms then
            ttl_ms = false
        else
            ttl_ms = ttl_ms + 1000
            if 1e15 < ttl_ms then
                ttl_ms = 1e15
            end
            exp_ms = now_ms + ttl_ms
        end
        local remaining = math.floor(left + 1e-9)
        if not (remaining > 0) then
            remaining = 0
        end
        return allowed, capacity, remaining, reset_ms, retry_ms,
            fresh, left, ttl_ms, at_us, exp_ms
    end

    -- Charges the cost decided by token_bucket_evaluate(), storing left tokens
    -- at at_us (now, or the stored time if that is ahead of now) and the
    -- key's expiry exp_ms: with the TTL ttl_ms, a whole number, or keeping
    -- the key's TTL when ttl_ms is false.
    function token_bucket_commit(key, left, ttl_ms, at_us, exp_ms)
        local state = struct.pack('>ddd', left, at_us, exp_ms)
        if ttl_ms then
            redis.call('SET', key, state, 'PX', ttl_ms)
        else
            redis.call('SET', key, state, 'KEEPTTL')
        end
    end
end
