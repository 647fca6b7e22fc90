-- Concurrency (in-flight) limits for the rate-limit check script.
--
-- A concurrency limit lets at most "max" requests be in flight at once.
-- Its state is a Redis sorted set: one member per live lease (the lease's
-- id, see lease.lua), scored by the lease's expiry in milliseconds of
-- Redis time. A lease is live while its expiry is after now; an expired
-- member counts for nothing and is dropped by the next call that takes a
-- slot on the same counter (never by a denial or a peek, which write
-- nothing). A check that every limit allows takes one slot on each
-- concurrency limit, whatever its cost: the cost is what rate limits
-- count; a concurrency limit counts requests. The key expires a second
-- after its last lease would, so an idle counter does not outlive its
-- leases.
--
-- This file only defines the local functions concurrency_evaluate() and
-- concurrency_commit(), which check.lua calls as it does the other
-- algorithms' (see token_bucket.lua for why there are no tables).

local concurrency_evaluate, concurrency_commit
if need_concurrency then
    -- Decides one concurrency limit without writing anything. max is the
    -- validated p1, ttl_ms the lease's time to live in milliseconds (p2, given
    -- in microseconds, rounded up). Returns allowed, limit (max), remaining,
    -- reset_ms, retry_ms and fresh as the other algorithms do, then what
    -- concurrency_commit() takes after the key: the new lease's expiry, the
    -- TTL of the key and whether expired members are there to drop.
    --
    -- remaining is the slots left once this one is taken (when allowed) or
    -- the slots free now. reset_ms is the time until every lease held expires
    -- (the one taken included). A denial's retry_ms is the time until the
    -- earliest lease expires, but at most a second: a slot is freed by a
    -- release far more often than by an expiry, and no clock foretells a
    -- release. (That earliest lease is read only for a denial. Numbers
    -- known in advance are passed to redis.call() as strings: Redis prints
    -- a number it is given with snprintf, which costs as much as a small
    -- command; now is printed once, as a whole number.)
    function concurrency_evaluate(key, max, ttl_ms, now_us)
        local now_ms = (now_us - now_us % 1000) / 1000
        local total = redis.call('ZCARD', key)
        local held, last_ms, after_now = 0, now_ms, nil
        if total > 0 then
            after_now = string.format('(%d', now_ms)
            held = redis.call('ZCOUNT', key, after_now, '+inf')
            if held > 0 then
                local last = redis.call('ZRANGE', key, '-1', '-1',
                    'WITHSCORES')
                last_ms = last[2] + 0
            end
        end
        local allowed = held < max
        local remaining, retry_ms = max - held, 0
        local expiry_ms = now_ms + ttl_ms
        if allowed then
            remaining = remaining - 1
            if last_ms < expiry_ms then
                last_ms = expiry_ms
            end
        else
            if not (remaining > 0) then
                remaining = 0
            end
            local first = redis.call('ZRANGEBYSCORE', key, after_now,
                '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
            retry_ms = first[2] - now_ms
            if not (retry_ms < 1000) then
                retry_ms = 1000
            end
            if not (retry_ms > 1) then
                retry_ms = 1
            end
        end
        local reset_ms = last_ms - now_ms
        return allowed, max, remaining, reset_ms, retry_ms, total == 0,
            expiry_ms, reset_ms + 1000, total > held
    end

    -- Takes the slot concurrency_evaluate() allowed, for lease id: drops the
    -- expired members first (when it saw some), adds the lease with its
    -- expiry and sets the key's TTL.
    function concurrency_commit(key, id, expiry_ms, ttl_ms, stale, now_us)
        if stale then
            redis.call('ZREMRANGEBYSCORE', key, '-inf',
                (now_us - now_us % 1000) / 1000)
        end
        redis.call('ZADD', key, expiry_ms, id)
        redis.call('PEXPIRE', key, ttl_ms)
    end
end
