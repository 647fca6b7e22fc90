-- Which functions a call of the rate-limit script needs.
--
-- Redis runs the whole script on every call, and each time a function's
-- definition runs, Lua makes a new closure (an allocation, and later work
-- for the collector): defining every algorithm's functions cost a
-- one-limit check about a tenth of its instructions in Redis. So this
-- file, the first of the script (the Makefile's LUA), reads which
-- algorithms the call names, and every file after it defines its
-- functions only when its flag below is set (the others stay nil). It
-- reads ARGV as check.lua describes it, and validates nothing: check.lua
-- refuses a bad call before it calls any function, so a flag set for a
-- call that is then refused costs a closure and no more, and a call that
-- is not refused names only algorithms this file saw. A release with a
-- cost (lease.lua) may settle a charge on any algorithm, so it needs them
-- all; a release without one and an extension need none.
local need_token_bucket, need_sliding_window, need_gcra, need_fixed_window
local need_concurrency, need_budget, need_lease_record, need_lease_call
do
    local argv = ARGV
    local op = argv[2]
    if op == 'r' or op == 'e' then
        if op == 'r' and argv[1] ~= '-' then
            need_token_bucket, need_sliding_window, need_gcra = true, true,
                true
            need_fixed_window = true
        end
        need_lease_record, need_lease_call = true, true
    else
        local n = tonumber(argv[3])
        if n ~= nil and n >= 1 and n <= 8 then
            for i = 1, n do
                local algorithm = argv[5 * i - 1]
                if algorithm == 'token_bucket' then
                    need_token_bucket = true
                elseif algorithm == 'sliding_window' then
                    need_sliding_window = true
                elseif algorithm == 'gcra' then
                    need_gcra = true
                elseif algorithm == 'fixed_window' then
                    need_fixed_window = true
                elseif algorithm == 'concurrency' then
                    need_concurrency = true
                end
            end
            -- The budget's two keys come after the limits' (check.lua).
            need_budget = #KEYS >= n + 2
        end
        need_lease_record = op == '3' or op == '4'
    end
end

