-- Leases: what a check holds after its answer, for the rate-limit script.
--
-- A check that takes a slot on a concurrency limit, or that asks to
-- reserve its cost, gets a lease: an id, and a record in Redis saying
-- what the check holds (its slots) and what it charged (the rate limits
-- it was charged to, with the cost). The record is a string key,
-- rl:{tenant}:lease:<id>, in the tenant's hash-tag slot like every other
-- key of the tenant; its value is a MessagePack list (cmsgpack, which
-- keeps numbers exact):
--
--   expiry_ms, ttl_ms, cost, nslots, then nslots concurrency keys, then
--   six values per rate limit charged: key, algorithm, p1, p2, p3 and the
--   window the charge went to (the window's number or start, for the two
--   window algorithms; 0 otherwise).
--
-- A second MessagePack object follows the list: the check's reply as it
-- was sent (check.lua), which a resend of the check returns. The record
-- is the proof that the check ran, so a check with a lease needs no reply
-- slot written (an extension rewrites the record without it: by then the
-- check was answered).
--
-- expiry_ms is when the lease expires (Redis time): its slots are free
-- then, as concurrency.lua counts them. The record lives LEASE_GRACE_MS
-- longer, so that a release that comes too late is told "expired", not
-- "unknown"; a release replaces it with the tombstone "released" for as
-- long, so that a second release is told so.
--
-- Every lease of a tenant is also in the tenant's set of leases,
-- rl:{tenant}:leases, scored by its expiry like the concurrency sets: it
-- says how many leases the tenant holds (ZCOUNT from now, what /metrics
-- shows), and the expired members a new lease drops from it are the
-- leases that were never released (counted once each, as leaks).
--
-- The same script runs the release and the extension (one EVALSHA each):
-- check.lua hands such a call to lease_call() before anything else. The
-- call is KEYS = { the record }, ARGV = { value, op, id }, with op "r"
-- (release) or "e" (extend) and id the lease's id (the member of the
-- concurrency sets). For a release, value is the actual cost ("-" for
-- none): every slot is freed, and with a cost the difference between the
-- cost and what was charged is settled on every rate limit charged (see
-- lease_settle). For an extension, value is the new time to live in
-- milliseconds (1000..3600000, or "-" for the lease's own): every slot
-- and the record then expire that long from now. The reply is a flat
-- array of integers: status, now_ms, then for a release the slots freed
-- and the cost settled (cost - charged, 0 without a cost), for an
-- extension the new time to live. status is 1 (done), 0 (no such lease),
-- -1 (released already) or -2 (expired); on anything but 1 nothing was
-- written. Every key the record names must carry the record's own hash
-- tag (the tenant's), or the call is refused as an error: a record only
-- ever names its own tenant's counters. (The record's keys are read from
-- it, not passed as KEYS: they are in the same slot as the record, which
-- Redis Cluster serves from the same node.)

-- How long a record is kept past its lease's expiry, and a tombstone
-- after a release.
local LEASE_GRACE_MS = 60000

-- The longest time to live of a lease, and the shortest, in milliseconds
-- (the bounds of a concurrency limit's lease ttl, and of an extension).
local LEASE_TTL_MIN_MS, LEASE_TTL_MAX_MS = 1000, 3600000

-- How long the tenant's set of leases lives after its last write: the
-- longest lease and its grace, as the string redis.call() takes (see
-- concurrency_evaluate() for why a string).
local LEASE_SET_TTL_MS = '3660000'

-- LEASE_GRACE_MS as that string, for the tombstone of a release.
local LEASE_GRACE_TEXT = '60000'

local lease_set_of, lease_join, lease_record, lease_replay
if need_lease_record then
    -- The tenant's set of leases for the record key (rl:{t}:lease:ID).
    function lease_set_of(key)
        return key:match('^(rl:{[^}]*}:)lease:') .. 'leases'
    end

    -- Adds lease id, with record key and ttl_ms, that a check has just
    -- taken to the tenant's set, which lives as long as the longest lease
    -- could. Returns the number of the tenant's leases that expired
    -- unreleased, dropped from the set.
    function lease_join(key, id, now_us, ttl_ms)
        local now_ms = (now_us - now_us % 1000) / 1000
        local set = lease_set_of(key)
        local dropped = redis.call('ZREMRANGEBYSCORE', set, '-inf',
            string.format('%d', now_ms))
        redis.call('ZADD', set, now_ms + ttl_ms, id)
        redis.call('PEXPIRE', set, LEASE_SET_TTL_MS)
        return dropped
    end

    -- Writes the record of that lease: key, the lease's ttl_ms, the check's
    -- cost, slots (the list of concurrency keys it took a slot on, possibly
    -- empty), charged (the flat list of six values per rate limit it
    -- charged, possibly empty) and the check's packed reply.
    function lease_record(key, now_us, ttl_ms, cost, slots, charged, reply)
        local now_ms = (now_us - now_us % 1000) / 1000
        local record = { now_ms + ttl_ms, ttl_ms, cost, #slots }
        for i = 1, #slots do
            record[#record + 1] = slots[i]
        end
        for i = 1, #charged do
            record[#record + 1] = charged[i]
        end
        redis.call('SET', key, cmsgpack.pack(record, reply), 'PX',
            ttl_ms + LEASE_GRACE_MS)
    end

    -- The reply of the check that wrote record key, when it is there and
    -- width doubles long (check.lua's resend); nil otherwise.
    function lease_replay(key, width)
        local stored = redis.call('GET', key)
        if stored and stored ~= 'released' then
            local _, reply = cmsgpack.unpack(stored)
            if type(reply) == 'string' and #reply == 8 * width then
                return reply
            end
        end
        return nil
    end
end

local lease_settle, lease_call
if need_lease_call then
    -- Settles delta (the actual cost minus what was charged: more is charged,
    -- less is refunded) on one rate limit. Every algorithm first brings its
    -- state to now (its evaluate at cost 0, which writes nothing), then:
    --   token_bucket   takes delta tokens (gives them back, up to the
    --                  capacity); the count may go below zero, a debt that the
    --                  refill pays back before the next check passes
    --   gcra           moves the TAT by delta emission intervals
    --   sliding_window an extra charge is counted in the current window; a
    --                  refund comes off the window it was charged to while
    --                  that is the current or the previous one (never below 0)
    --   fixed_window   an extra charge is counted in the current window; a
    --                  refund comes off the count while the window it was
    --                  charged to is still the current one (never below 0)
    function lease_settle(key, algorithm, p1, p2, p3, win, delta, now_us)
        if algorithm == 'token_bucket' then
            local capacity, rate = p1 + 0, p2 + 0
            local _, _, _, _, _, _, left, _, at_us =
                token_bucket_evaluate(key, capacity, rate, 0, now_us)
            left = left - delta
            if left > capacity then
                left = capacity
            end
            -- (A new TTL, two seconds past full, as token_bucket.lua sets.)
            local ttl_ms = math.ceil((capacity - left) * 1000 / rate - 1e-6) +
                2000
            if 1e15 < ttl_ms then
                ttl_ms = 1e15
            end
            token_bucket_commit(key, left, ttl_ms, at_us,
                now_us / 1000 + ttl_ms)
        elseif algorithm == 'gcra' then
            local limit, period = p1 + 0, p2 + 0
            local _, _, _, _, _, _, tat =
                gcra_evaluate(key, limit, period, p3 + 0, 0, now_us)
            gcra_commit(key, tat + delta * math.ceil(period / limit), now_us)
        elseif algorithm == 'sliding_window' then
            local _, _, _, _, _, _, current, cur, prev, ttl_ms =
                sliding_window_evaluate(key, p1 + 0, p2 + 0, 0, now_us)
            if delta > 0 then
                cur = cur + delta
            elseif win == current then
                cur = cur + delta
                if cur < 0 then
                    cur = 0
                end
            elseif win == current - 1 then
                prev = prev + delta
                if prev < 0 then
                    prev = 0
                end
                if not ttl_ms then
                    redis.call('HSET', key, 'prev',
                        string.format('%.0f', prev))
                end
            else
                return
            end
            sliding_window_commit(key, current, cur, prev, ttl_ms)
        elseif algorithm == 'fixed_window' then
            local _, _, _, _, _, _, start, count, ttl_ms =
                fixed_window_evaluate(key, p1 + 0, p2, 0, now_us)
            if delta > 0 then
                count = count + delta
            elseif win == start then
                count = count + delta
                if count < 0 then
                    count = 0
                end
            else
                return
            end
            fixed_window_commit(key, start, count, ttl_ms)
        end
    end

    -- The release ("r") and the extension ("e") of a lease; see the top.
    function lease_call(keys, argv)
        local argc = #argv
        if #keys ~= 1 then
            return redis.error_reply('ERR ratelimit: a lease call has one key')
        end
        if argc ~= 3 then
            local message = clock_extra_arguments(argv, argc, 3)
            if message ~= nil then
                return redis.error_reply('ERR ratelimit: a lease call ' ..
                    'takes three arguments: value, op, id')
            end
        end
        local key, value, op, id = keys[1], argv[1], argv[2], argv[3]
        if #id > 64 or not id:find('^[%w.-]+$') then
            return redis.error_reply('ERR ratelimit: bad lease id')
        end
        if value ~= '-' and (#value > 15 or not value:find('^%d+$')) then
            return redis.error_reply('ERR ratelimit: the value must be an ' ..
                'integer >= 0 or -')
        end
        local tag = key:match('^(rl:{[^}]*}:)lease:')
        if tag == nil then
            return redis.error_reply('ERR ratelimit: not a lease key')
        end
        if op == 'e' and value ~= '-' and (value + 0 < LEASE_TTL_MIN_MS or
                value + 0 > LEASE_TTL_MAX_MS) then
            return redis.error_reply('ERR ratelimit: the time to live must ' ..
                'be 1000..3600000 ms')
        end
        local now_us = clock_now_us()
        local now_ms = (now_us - now_us % 1000) / 1000
        local stored = redis.call('GET', key)
        if not stored then
            return { 0, now_ms }
        elseif stored == 'released' then
            return { -1, now_ms }
        end
        local record = cmsgpack.unpack(stored)
        local expiry_ms, nslots = record[1], record[4]
        if expiry_ms <= now_ms then
            return { -2, now_ms }
        end
        local first_charge = 5 + nslots
        for i = 5, #record, 1 do
            if (i < first_charge or (i - first_charge) % 6 == 0) and
                    record[i]:sub(1, #tag) ~= tag then
                return redis.error_reply('ERR ratelimit: the lease names a ' ..
                    'key of another tenant')
            end
        end
        if op == 'e' then
            local ttl_ms = record[2]
            if value ~= '-' then
                ttl_ms = value + 0
            end
            local new_expiry = now_ms + ttl_ms
            for i = 5, first_charge - 1 do
                redis.call('ZADD', record[i], 'XX', new_expiry, id)
                if redis.call('PTTL', record[i]) < ttl_ms + 1000 then
                    redis.call('PEXPIRE', record[i], ttl_ms + 1000)
                end
            end
            record[1] = new_expiry
            redis.call('SET', key, cmsgpack.pack(record), 'PX',
                ttl_ms + LEASE_GRACE_MS)
            -- (The set lives as long as its longest lease could: the
            -- extended one may now outlive the last write's expiry.)
            local set = lease_set_of(key)
            redis.call('ZADD', set, 'XX', new_expiry, id)
            redis.call('PEXPIRE', set, LEASE_SET_TTL_MS)
            return { 1, now_ms, ttl_ms }
        end
        local freed = 0
        for i = 5, first_charge - 1 do
            freed = freed + redis.call('ZREM', record[i], id)
        end
        local delta = 0
        if value ~= '-' then
            delta = value - record[3]
            if delta ~= 0 then
                for i = first_charge, #record - 5, 6 do
                    lease_settle(record[i], record[i + 1], record[i + 2],
                        record[i + 3], record[i + 4], record[i + 5], delta,
                        now_us)
                end
            end
        end
        redis.call('SET', key, 'released', 'PX', LEASE_GRACE_TEXT)
        redis.call('ZREM', lease_set_of(key), id)
        return { 1, now_ms, freed, delta }
    end
end
