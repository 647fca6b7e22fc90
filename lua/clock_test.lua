-- The clock of the tests' script: Redis TIME, or a time the caller gives.
--
-- The build puts this file instead of clock.lua just before check.lua in
-- $(BUILD)/check_test.lua, the script that t/lua_test.py and
-- scripts/accuracy load; it defines the same two functions as clock.lua
-- (see there), and is never embedded in the service.
--
-- Test hook: one more argument after the last limit (and the call id, with
-- a reply slot), "__now_us=<digits>", replaces Redis TIME with that time in
-- microseconds (unix epoch), so that tests can place calls exactly at
-- window edges. It is accepted only as the very last argument, one more
-- than check.lua takes, with at most 16 digits, and
-- no later than 2^52 microseconds (in 2112), so that sums of times and
-- durations stay exact.

-- The time the hook gave, if it did; nil means Redis TIME. Redis runs the
-- whole script afresh on every call, so this never outlives the call.
local clock_given_us

local function clock_extra_arguments(argv, argc, expected)
    if argc ~= expected + 1 then
        return 'expected 5 arguments per limit'
    end
    local digits = argv[argc]:match('^__now_us=(%d+)$')
    if digits ~= nil and #digits <= 16 then
        local now_us = digits + 0
        if now_us <= 2 ^ 52 then
            clock_given_us = now_us
            return nil
        end
    end
    return 'expected 5 arguments per limit (or a last ' ..
        '__now_us=<microseconds> test argument)'
end

local function clock_now_us()
    if clock_given_us ~= nil then
        return clock_given_us
    end
    -- Lua converts the two decimal strings of TIME itself.
    local time = redis.call('TIME')
    return time[1] * 1e6 + time[2]
end
