-- The clock of the production script: Redis TIME, and no other.
--
-- check.lua reads the time through the two functions below. The build puts
-- this file just before check.lua in the script the service embeds
-- ($(BUILD)/check.lua); the tests' script ($(BUILD)/check_test.lua) has
-- clock_test.lua there instead, which defines the same two functions but
-- also takes a time given by the caller. So the embedded script accepts
-- exactly the arguments check.lua describes (3 + 5 * n, one more with a
-- reply slot) and never runs on any time but Redis'.
--
-- clock_extra_arguments(argv, argc, expected) is called only when a call
-- has argc arguments where its limits (and reply slot) take expected. It
-- returns the error message for the call (check.lua puts "ERR ratelimit: "
-- before it), or nil when the clock takes the arguments beyond the limits
-- as its own; this one takes none.
--
-- clock_now_us() returns the time in microseconds since the Unix epoch.

local function clock_extra_arguments(argv, argc, expected)
    return 'expected 5 arguments per limit'
end

local function clock_now_us()
    -- Lua converts the two decimal strings of TIME itself.
    local time = redis.call('TIME')
    return time[1] * 1e6 + time[2]
end
