-- The rate-limit check: decides all limits of one rule in one call.
--
-- This is the driver of the script made by concatenating need.lua,
-- token_bucket.lua, sliding_window.lua, gcra.lua, fixed_window.lua,
-- concurrency.lua, budget.lua, clock.lua, lease.lua and this file (the
-- Makefile's LUA; the tests' script has clock_test.lua in place of
-- clock.lua). A call whose ARGV[2] is "r" or "e" is a lease's release or
-- extension, which lease.lua describes and runs; everything below is
-- about checks. It validates the arguments, reads the clock once (Redis
-- TIME, through clock_now_us()), asks every limit whether it allows
-- the cost, and only if every enforced limit does (and this is not a peek,
-- and the tenant's counter budget lets it create the counters it would)
-- charges the cost. A denial writes nothing at all; a peek never writes.
--
-- KEYS[i] is the state key (a hash; a sorted set for a concurrency limit)
-- of limit i. Then, optional and in this order: the tenant's two counter
-- budget keys (see "The counter budget" below), the record of the lease
-- the call takes (with ARGV[2] "3" or "4" only; see "Leases" below), and
-- the caller's reply slot, which makes a call that charges safe to send
-- twice (see "Sent twice" below). So a call has n keys, n + 1 (the reply
-- slot), n + 2 (the budget) or n + 3 (both), one more with a lease, all
-- in the same {tenant} hash-tag slot. Nothing else is touched.
-- ARGV[1] = cost (integer >= 1), ARGV[2] = "1" to peek, "0" to commit or
-- "2" to commit a call sent again (see "Sent twice"; needs the reply
-- slot), "3" and "4" the same as "0" and "2" with a lease, ARGV[3] = n,
-- the number of limits (1..8; #KEYS is n to n + 4, as above), then five
-- arguments per limit: algorithm name, p1, p2, p3, shadow; with the
-- budget keys three more: the budget, its window and the mask (see "The
-- counter budget"); with a lease two more: its id, 1 to 40 of
-- [0-9a-zA-Z.-], and its time to live in milliseconds (1000..3600000);
-- and with the reply slot one more, last: the call's id, 1 to 40 of
-- [0-9a-zA-Z.-].
--   token_bucket:   p1 = capacity (integer), p2 = refill rate per second
--                   (decimal, e.g. "0.5"), p3 = "0"
--   sliding_window: p1 = limit (integer), p2 = window in seconds (integer),
--                   p3 = "0"
--   gcra:           p1 = limit (integer, requests per period), p2 = period
--                   in microseconds (integer), p3 = burst (integer >= 0;
--                   burst + 1 requests may pass at once)
--   fixed_window:   p1 = limit (integer), p2 = "minute", "hour", "day" or
--                   "month" (UTC calendar windows), p3 = "0"
--   concurrency:    p1 = max (integer, leases at once), p2 = the lease's
--                   time to live in microseconds (1000000..3600000000),
--                   p3 = "0"; a call that commits with one needs a lease
-- Integers are decimal digits only, at most 15 of them. shadow is "1" for a
-- limit that is evaluated and counted but never enforced, otherwise "0".
--
-- Enforced (non-shadow) limits decide: the request is allowed when every
-- one of them allows it (so also when all limits are shadow limits). An
-- allowed request that is not a peek is charged to every enforced limit and
-- to every shadow limit that allows it on its own; a shadow limit that
-- would deny is not charged.
--
-- The reply is a string of whole numbers, each a big-endian IEEE double
-- (struct.pack('>d'), 8 bytes, exact for every value here):
--   allowed (1 if every enforced limit allows), now_ms (Redis time), then
--   for each limit: allowed_i, limit_i, remaining_i, reset_ms_i,
--   retry_after_ms_i.
-- allowed_i is the limit's own verdict, also for a shadow limit. limit_i is
-- the number of requests the limit lets through at once: the capacity, the
-- limit, or burst + 1 for gcra. remaining_i is what is left once the cost
-- is charged when the limit allows it and the call is allowed or a peek;
-- on a denial (which charges nothing) it is what is available now, for
-- every limit; rounded down. reset_ms_i is
-- the time until the limit would be fully reset with no more requests,
-- computed on the same state as remaining_i: until the bucket is full, until
-- neither window counts anything any more, until the TAT is reached; for
-- fixed_window it is always the time until the current window ends.
-- retry_after_ms_i is 0 if the limit allows, the time until this cost would
-- pass if it denies, and -1 if the cost can never pass. Every key written
-- gets a TTL, no longer than its state matters. Bad arguments give an error
-- reply beginning "ERR ratelimit: ". A call the counter budget refuses gets
-- the reply of three numbers -1, now_ms, retry_after_ms instead (see
-- below). A call with a lease has one more number at the end of its
-- reply: the number of the tenant's leases that expired unreleased, which
-- it dropped from the tenant's set of leases (lease.lua; 0 on a denial).
--
-- Leases: a call with ARGV[2] "3" (or "4", sent again) takes a lease if
-- it is allowed: one slot on each concurrency limit that allows it (the
-- lease's id is the member added to the limit's set, scored by its
-- expiry), and the record of the lease (lease.lua) naming those sets and
-- every other limit charged, with the cost, so that a release can free
-- the slots and settle the cost. A concurrency limit counts one per
-- request whatever the cost. A denial takes nothing and writes no record.
--
-- The counter budget: every counter is a Redis key that lives until its
-- TTL, and a caller who sends a new subject (or route, or anonymous
-- address) with every check would make a new key every time, filling
-- Redis for every tenant. So a call may carry its tenant's budget: at
-- most "budget" counters a window (the budget window, in seconds, aligned
-- on the epoch) may be created, counting each counter once however often
-- it expires and comes back. The two keys are the tenant's: a
-- HyperLogLog of the names of the counters created this window (an
-- estimate of how many distinct ones, within about 1 %) and the exact
-- number of counters created (each time one was), both expiring at the
-- end of the window. The mask has one character per limit, "1" when the
-- limit's counter is named after what the caller sends (a subject, a key,
-- a route: those are what the budget bounds), "0" when it is not (one
-- counter for the whole tenant, bounded by its rules). Only a call that
-- would charge, and would create one or more "1" counters that do not
-- exist, looks at the budget (budget.lua): a call on existing counters
-- pays nothing for it. Past the budget such a call is refused as a whole,
-- writing nothing, with the time until the window ends.
--
-- Sent twice: a client whose connection dies after sending a call cannot
-- know whether the script ran, and sends it again with the same reply slot
-- and id and ARGV[2] = "2". The reply slot is the caller's own (one per
-- client process and tenant), and a caller sends nothing else between a
-- call and its resend, so the slot needs to hold only the caller's last
-- call that charged: that call's id and reply, for REPLAY_TTL_MS. A call
-- with "2" that finds its own id there returns the stored reply as it is,
-- writing nothing, so a check is never charged twice; one that finds
-- another id or nothing (the first call never ran, or was a denial) is
-- decided as a "0" would be. Only a "2" looks. A denial and a peek charge
-- nothing and store nothing, so that sending them again decides afresh.
-- The slot holds the id, a space, then the reply as it was sent. One key
-- per caller, overwritten by each call that charges, costs Redis neither
-- a new key nor an expiry per check. A call with a lease ("3", "4") keeps
-- its reply in the lease's record instead, which exists only if the call
-- ran and charged: its resend ("4") looks there, and it writes no reply
-- slot.
--
-- Why the reply is packed: Redis turns a table the script returns into
-- its reply element by element, which cost a one-limit check more than
-- a GET does; a string is sent as it is, and it is also what the reply
-- slot stores, packed once. (struct.pack costs a third of what
-- string.format costs.) redis_reply_decision() (src/redis_reply.c)
-- unpacks it for limiter_decode() (src/limiter.c).
--
-- The arguments are exactly these 3 + 5 * n, three more with the budget,
-- two more with a lease and one more with the reply slot. (The tests'
-- script also takes one more, a time that replaces Redis TIME: see
-- clock_test.lua.)
--
-- Redis runs the whole script on every call, so this driver is straight-line
-- code that dispatches on the algorithm name with if/elseif. It makes no
-- tables but the reply and, for a call that may write, one list of what to
-- store, and it calls as few functions as it can: the validation checks a
-- number's syntax with one pattern, and a valid number is converted where
-- it is used by arithmetic (s + 0), which gives what tonumber(s) gives but
-- costs half as much (tonumber() converts the string twice).

local keys, argv = KEYS, ARGV
local argc = #argv

if argv[2] == 'r' or argv[2] == 'e' then
    return lease_call(keys, argv)
end

-- How long the reply of a call that charged is kept in the reply slot. A
-- client sends a call again right after it has reconnected, within its
-- connect and command timeouts (tens of milliseconds), and never later
-- than a second after the first send (redis_call.c); three seconds leave
-- room for that. A slot whose caller goes on checking never expires; one
-- whose caller stopped is gone three seconds later. (A string: Redis
-- prints a number given to redis.call() with snprintf, as
-- concurrency.lua says.)
local REPLAY_TTL_MS = '3000'

local function check_error(message)
    return redis.error_reply('ERR ratelimit: ' .. message)
end

-- Integers are decimal digits only, at most 15 of them so that they stay
-- exact; a positive one has a digit other than 0, which the pattern
-- '^0*[1-9]%d*$' (at most 15 characters) checks in one go. The usual cost
-- of 1 needs no pattern at all.
local cost = argv[1]
if cost == '1' then
    cost = 1
elseif cost ~= nil and #cost <= 15 and cost:find('^0*[1-9]%d*$') then
    cost = cost + 0
else
    return check_error('cost must be an integer >= 1')
end
local peek = argv[2]
local leased = peek == '3' or peek == '4'
local resent = peek == '2' or peek == '4'
if resent or leased then
    peek = '0'
elseif peek ~= '0' and peek ~= '1' then
    return check_error('peek must be 0, 1, 2, 3 or 4')
end
local n = argv[3]
if n == '1' then
    n = 1
elseif n ~= nil and #n <= 15 and n:find('^0*[1-8]$') then
    n = n + 0
else
    return check_error('number of limits must be 1..8')
end
-- The keys after the limits' (see the top): none, the reply slot, the
-- two budget keys, or the budget keys and the reply slot; with a lease,
-- its record before the reply slot.
local nkeys = #keys
local extra = nkeys - n
local once, budget_names, budget_made, lease_key
if leased then
    extra = extra - 1
end
if extra == 1 then
    once = keys[nkeys]
elseif extra == 2 or extra == 3 then
    budget_names, budget_made = keys[n + 1], keys[n + 2]
    if extra == 3 then
        once = keys[nkeys]
    end
elseif extra ~= 0 then
    return check_error('number of limits does not match number of keys')
end
if leased then
    lease_key = keys[nkeys - (once and 1 or 0)]
end
if resent and once == nil then
    return check_error('peek 2 (sent again) needs the reply slot')
end
local expected = 3 + 5 * n
if budget_names ~= nil then
    expected = expected + 3
end
local lease_id, lease_ttl_ms
if leased then
    lease_id, lease_ttl_ms = argv[expected + 1], argv[expected + 2]
    expected = expected + 2
    if lease_id == nil or #lease_id > 40 or
            not lease_id:find('^[%w.-]+$') then
        return check_error('the lease id must be 1 to 40 of [0-9a-zA-Z.-]')
    elseif lease_ttl_ms == nil or #lease_ttl_ms > 7 or
            not lease_ttl_ms:find('^%d+$') or
            lease_ttl_ms + 0 < 1000 or lease_ttl_ms + 0 > 3600000 then
        return check_error('the lease ttl must be 1000..3600000 ms')
    end
    lease_ttl_ms = lease_ttl_ms + 0
end
local rid
if once ~= nil then
    expected = expected + 1
    rid = argv[expected]
    if rid == nil or #rid > 40 or not rid:find('^[%w.-]+$') then
        return check_error('the call id must be 1 to 40 of [0-9a-zA-Z.-]')
    end
end
if argc ~= expected then
    -- The clock decides: clock.lua refuses every other count.
    local message = clock_extra_arguments(argv, argc, expected)
    if message ~= nil then
        return check_error(message)
    end
end

-- The budget's arguments come after the limits': the budget and its
-- window, positive integers, checked where they are used (below, before
-- anything is written, so that a call on existing counters does not pay
-- for it), and the mask, n characters 0 or 1, checked here.
local budget_mask
if budget_names ~= nil then
    budget_mask = argv[6 + 5 * n]
    if #budget_mask ~= n or budget_mask:find('[^01]') then
        return check_error('the budget mask must be one 0 or 1 per limit')
    end
end

-- Validate every limit before anything is read or written. Limit i has
-- its algorithm at argv[5 * i - 1], then p1, p2, p3 and shadow. A decimal
-- (the rate) is digits with at most one '.', at most 15 characters, and
-- positive when some digit is not 0.
for i = 1, n do
    local base = 5 * i - 1
    local algorithm = argv[base]
    local p1, p2, p3 = argv[base + 1], argv[base + 2], argv[base + 3]
    local message
    if algorithm == 'token_bucket' then
        if #p1 > 15 or not p1:find('^0*[1-9]%d*$') then
            message = 'capacity must be a positive integer'
        elseif #p2 > 15 or not p2:find('^%d*%.?%d*$') or
                not p2:find('[1-9]') then
            message = 'rate must be a positive decimal'
        elseif p3 ~= '0' then
            message = 'p3 must be 0'
        end
    elseif algorithm == 'sliding_window' then
        if #p1 > 15 or not p1:find('^0*[1-9]%d*$') then
            message = 'limit must be a positive integer'
        elseif #p2 > 15 or not p2:find('^0*[1-9]%d*$') then
            message = 'window must be a positive integer'
        elseif p3 ~= '0' then
            message = 'p3 must be 0'
        end
    elseif algorithm == 'gcra' then
        if #p1 > 15 or not p1:find('^0*[1-9]%d*$') then
            message = 'limit must be a positive integer'
        elseif #p2 > 15 or not p2:find('^0*[1-9]%d*$') then
            message = 'period must be a positive integer'
        elseif #p3 > 15 or not p3:find('^%d+$') then
            message = 'burst must be an integer >= 0'
        elseif (p3 + 1) * math.ceil(p2 / p1) > 1e15 then
            -- tau + T, the longest the limit may take to go from fully
            -- used to idle, is at most about 31 years (see gcra.lua).
            message = '(burst + 1) * period / limit must be at most ' ..
                '1000000000000000 microseconds'
        end
    elseif algorithm == 'fixed_window' then
        if #p1 > 15 or not p1:find('^0*[1-9]%d*$') then
            message = 'limit must be a positive integer'
        elseif p2 ~= 'minute' and p2 ~= 'hour' and p2 ~= 'day' and
                p2 ~= 'month' then
            message = 'unit must be one of minute, hour, day, month'
        elseif p3 ~= '0' then
            message = 'p3 must be 0'
        end
    elseif algorithm == 'concurrency' then
        if #p1 > 15 or not p1:find('^0*[1-9]%d*$') then
            message = 'max must be a positive integer'
        elseif #p2 > 15 or not p2:find('^%d+$') or p2 + 0 < 1000000 or
                p2 + 0 > 3600000000 then
            message = 'lease ttl must be 1000000..3600000000 microseconds'
        elseif p3 ~= '0' then
            message = 'p3 must be 0'
        elseif peek == '0' and not leased then
            message = 'a concurrency limit takes a lease (peek 3 or 4)'
        end
    else
        return check_error('unknown algorithm for limit ' .. i)
    end
    local shadow = argv[base + 4]
    if message == nil and shadow ~= '0' and shadow ~= '1' then
        message = 'shadow must be 0 or 1'
    end
    if message ~= nil then
        return check_error('limit ' .. i .. ': ' .. message)
    end
end

-- A call sent again after its first send charged: the first reply, again.
-- (A stored reply is 2 + 5 * n doubles, one more with a lease.)
local width = 2 + 5 * n
if leased then
    width = width + 1
end
if resent and leased then
    local stored = lease_replay(lease_key, width)
    if stored then
        return stored
    end
elseif resent then
    local stored = redis.call('GET', once)
    if stored and #stored == #rid + 1 + 8 * width and
            stored:sub(1, #rid + 1) == rid .. ' ' then
        return stored:sub(#rid + 2)
    end
end

local now_us = clock_now_us()

-- Evaluate every limit first, straight into the reply; write only once all
-- enforced ones allow. pending[4 * i - 3 ..] keeps what the commit function
-- of limit i takes after the key (a peek needs none of it). The two tables
-- are made at the size of one limit or of three, since growing a table
-- costs more than filling it; the reply's slots are nil until filled, and
-- Redis ends the reply at the first nil. The parameters are valid numbers
-- now (but for the unit of fixed_window).
--
-- Durations are capped so that absurd parameters (a huge capacity with a
-- tiny rate) cannot overflow Redis' conversion to a 64-bit integer.
--
-- made lists the counters the budget counts that this call would create:
-- those of limits that allow, marked "1" in the mask, and found fresh (no
-- state stored). It is made only when there is one.
local reply, pending, made
if n == 1 then
    reply = { 1, 0, nil, nil, nil, nil, nil }
    if peek == '0' then
        pending = { false, false, false, false }
    end
else
    reply = { 1, 0, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil,
        nil, nil, nil, nil }
    if peek == '0' then
        pending = { false, false, false, false, false, false, false, false,
            false, false, false, false }
    end
end
-- (now_us - now_us % 1000) / 1000 is math.floor(now_us / 1000) for a whole
-- now_us (Lua computes % with that very floor), without a function call.
reply[2] = (now_us - now_us % 1000) / 1000
for i = 1, n do
    local base = 5 * i - 1
    local algorithm = argv[base]
    local p1, p2 = argv[base + 1] + 0, argv[base + 2]
    local allowed, limit, remaining, reset_ms, retry_ms, fresh, s1, s2, s3,
        s4
    if algorithm == 'token_bucket' then
        allowed, limit, remaining, reset_ms, retry_ms, fresh, s1, s2, s3,
            s4 = token_bucket_evaluate(keys[i], p1, p2 + 0, cost, now_us)
    elseif algorithm == 'sliding_window' then
        allowed, limit, remaining, reset_ms, retry_ms, fresh, s1, s2, s3,
            s4 = sliding_window_evaluate(keys[i], p1, p2 + 0, cost, now_us)
    elseif algorithm == 'gcra' then
        allowed, limit, remaining, reset_ms, retry_ms, fresh, s1 =
            gcra_evaluate(keys[i], p1, p2 + 0, argv[base + 3] + 0, cost,
                now_us)
    elseif algorithm == 'concurrency' then
        allowed, limit, remaining, reset_ms, retry_ms, fresh, s1, s2, s3 =
            concurrency_evaluate(keys[i], p1, math.ceil(p2 / 1000), now_us)
    else
        allowed, limit, remaining, reset_ms, retry_ms, fresh, s1, s2, s3 =
            fixed_window_evaluate(keys[i], p1, p2, cost, now_us)
    end
    if not allowed and argv[base + 4] == '0' then
        reply[1] = 0
    end
    if fresh and allowed and budget_mask ~= nil and
            budget_mask:byte(i) == 49 then
        if made == nil then
            made = { keys[i] }
        else
            made[#made + 1] = keys[i]
        end
    end
    if 1e15 < reset_ms then
        reset_ms = 1e15
    end
    if 1e15 < retry_ms then
        retry_ms = 1e15
    end
    local r = 5 * i - 2
    reply[r] = allowed and 1 or 0
    reply[r + 1] = limit
    reply[r + 2] = remaining
    reply[r + 3] = reset_ms
    reply[r + 4] = retry_ms
    if pending ~= nil then
        local p = 4 * i - 3
        pending[p], pending[p + 1], pending[p + 2], pending[p + 3] =
            s1, s2, s3, s4
    end
end

-- A denial charges nothing, so a limit that would have allowed the cost
-- reports what it has now, not what it would have left: it is evaluated
-- again at no cost (reads only, and only on a denial).
if reply[1] == 0 and peek == '0' then
    for i = 1, n do
        local r = 5 * i - 2
        if reply[r] == 1 then
            local base = 5 * i - 1
            local algorithm = argv[base]
            local p1, p2 = argv[base + 1] + 0, argv[base + 2]
            local remaining, reset_ms, _
            if algorithm == 'token_bucket' then
                _, _, remaining, reset_ms =
                    token_bucket_evaluate(keys[i], p1, p2 + 0, 0, now_us)
            elseif algorithm == 'sliding_window' then
                _, _, remaining, reset_ms =
                    sliding_window_evaluate(keys[i], p1, p2 + 0, 0, now_us)
            elseif algorithm == 'gcra' then
                _, _, remaining, reset_ms =
                    gcra_evaluate(keys[i], p1, p2 + 0, argv[base + 3] + 0, 0,
                        now_us)
            elseif algorithm == 'concurrency' then
                -- (what it reported: it takes no slot when it allows.)
                remaining, reset_ms = reply[r + 2] + 1, reply[r + 3]
            else
                _, _, remaining, reset_ms =
                    fixed_window_evaluate(keys[i], p1, p2, 0, now_us)
            end
            if 1e15 < reset_ms then
                reset_ms = 1e15
            end
            reply[r + 2] = remaining
            reply[r + 3] = reset_ms
        end
    end
end

-- A call that would create counters the budget counts asks it first;
-- refused, it writes nothing.
if made ~= nil and reply[1] == 1 and pending ~= nil then
    local budget, window = argv[4 + 5 * n], argv[5 + 5 * n]
    if #budget > 15 or not budget:find('^0*[1-9]%d*$') then
        return check_error('the counter budget must be a positive integer')
    elseif #window > 15 or not window:find('^0*[1-9]%d*$') then
        return check_error('the budget window must be a positive integer')
    end
    local wait_ms = budget_admit(budget_names, budget_made, budget + 0,
        window + 0, made, now_us)
    if wait_ms ~= nil then
        return struct.pack('>ddd', -1, reply[2], wait_ms)
    end
end

-- With a lease, the reply ends with the tenant's expired leases dropped.
local dropped, slots, charged = 0, nil, nil
if reply[1] == 1 and pending ~= nil then
    -- Every enforced limit allows here, so this charges all of them and
    -- the shadow limits that allow. A lease's record lists the sets it
    -- took a slot on and the other limits it charged.
    if leased then
        slots, charged = {}, {}
    end
    for i = 1, n do
        if reply[5 * i - 2] == 1 then
            local base = 5 * i - 1
            local algorithm = argv[base]
            local p = 4 * i - 3
            if leased then
                if algorithm == 'concurrency' then
                    slots[#slots + 1] = keys[i]
                else
                    local c = #charged
                    charged[c + 1], charged[c + 2], charged[c + 3],
                        charged[c + 4], charged[c + 5], charged[c + 6] =
                        keys[i], algorithm, argv[base + 1], argv[base + 2],
                        argv[base + 3], (algorithm == 'sliding_window' or
                        algorithm == 'fixed_window') and pending[p] or 0
                end
            end
            if algorithm == 'token_bucket' then
                token_bucket_commit(keys[i], pending[p], pending[p + 1],
                    pending[p + 2], pending[p + 3])
            elseif algorithm == 'sliding_window' then
                sliding_window_commit(keys[i], pending[p], pending[p + 1],
                    pending[p + 2], pending[p + 3])
            elseif algorithm == 'gcra' then
                gcra_commit(keys[i], pending[p], now_us)
            elseif algorithm == 'concurrency' then
                concurrency_commit(keys[i], lease_id, pending[p],
                    pending[p + 1], pending[p + 2], now_us)
            else
                fixed_window_commit(keys[i], pending[p], pending[p + 1],
                    pending[p + 2])
            end
        end
    end
    if leased then
        dropped = lease_join(lease_key, lease_id, now_us, lease_ttl_ms)
    end
end
if leased then
    reply[width] = dropped
end
-- One limit, the usual case, has its format written out.
local packed = struct.pack(width == 7 and '>ddddddd' or
    '>' .. string.rep('d', width), unpack(reply, 1, width))
-- (Allowed and not a peek: the call charged, as above.) A lease's record
-- keeps the reply in place of the reply slot.
if reply[1] == 1 and pending ~= nil then
    if leased then
        lease_record(lease_key, now_us, lease_ttl_ms, cost, slots, charged,
            packed)
    elseif once ~= nil then
        redis.call('SET', once, rid .. ' ' .. packed, 'PX', REPLAY_TTL_MS)
    end
end
return packed
