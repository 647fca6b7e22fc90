#!/bin/sh
# Tests for the Redis check script (lua/token_bucket.lua, lua/sliding_window.lua,
# lua/gcra.lua, lua/fixed_window.lua and lua/check.lua, concatenated as the
# build does). Starts a private, throw-away redis-server on
# 127.0.0.1:${LUA_TEST_REDIS_PORT:-16399}, loads the script and runs it with
# EVALSHA through redis-cli. Tests that need exact times pass the script's
# test hook, a last argument "__now_us=<microseconds>" that replaces Redis
# TIME. Prints one line per test and "N passed, M failed"; exits non-zero if
# any test failed.
# Usage, from the repository root: sh t/lua_test.sh

set -u

cd "$(dirname "$0")/.." || exit 1

PORT=${LUA_TEST_REDIS_PORT:-16399}
TMP=$(mktemp -d) || exit 1
REDIS_PID=
passed=0
failed=0

cleanup() {
    if [ -n "$REDIS_PID" ]; then
        kill "$REDIS_PID" 2>/dev/null
        wait "$REDIS_PID" 2>/dev/null
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bail() {
    echo "Bail out! $*"
    if [ -f "$TMP/redis.log" ]; then
        sed 's/^/# /' "$TMP/redis.log"
    fi
    exit 1
}

cli() {
    redis-cli -h 127.0.0.1 -p "$PORT" "$@"
}

# --- Server and script -------------------------------------------------------

redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --daemonize no --dir "$TMP" --pidfile "$TMP/redis.pid" \
    --logfile "$TMP/redis.log" &
REDIS_PID=$!

tries=0
until [ "$(cli PING 2>/dev/null)" = PONG ]; do
    tries=$((tries + 1))
    if [ "$tries" -ge 50 ] || ! kill -0 "$REDIS_PID" 2>/dev/null; then
        bail "redis-server did not start on port $PORT"
    fi
    sleep 0.1
done
# Make sure the server answering is ours and not another one on the port.
if ! cli INFO server | tr -d '\r' | grep -qx "process_id:$REDIS_PID"; then
    bail "port $PORT is answered by another redis-server"
fi

SCRIPT=$(cat lua/token_bucket.lua lua/sliding_window.lua lua/gcra.lua \
    lua/fixed_window.lua lua/check.lua) ||
    bail "cannot read lua/*.lua"
SHA=$(cli SCRIPT LOAD "$SCRIPT")
if ! echo "$SHA" | grep -qx '[0-9a-f]\{40\}'; then
    bail "SCRIPT LOAD failed: $SHA"
fi

# --- Helpers -----------------------------------------------------------------

# check NKEYS KEY... COST PEEK N ALGO P1 P2 P3 SHADOW ... [__now_us=US]: runs
# the script once and prints the reply on one line, fields separated by
# spaces.
check() {
    cli EVALSHA "$SHA" "$@" | paste -sd ' ' -
}

# check_times COUNT NKEYS KEY... ARGS...: runs the script COUNT times over one
# connection, back to back, and prints one reply per line. Used where the
# calls must not be spread out by starting redis-cli each time.
check_times() {
    count=$1
    shift
    width=$((2 + 5 * $1))
    i=0
    while [ "$i" -lt "$count" ]; do
        echo "EVALSHA $SHA $*"
        i=$((i + 1))
    done | cli | awk -v w="$width" '
        { line = (NR % w == 1) ? $0 : line " " $0 }
        NR % w == 0 { print line }'
}

# field REPLY K: the K-th field (1-based) of a reply printed by check. For
# limit i, allowed/limit/remaining/reset_ms/retry_ms are fields 5i-2 .. 5i+2.
field() {
    echo "$1" | awk -v k="$2" '{ print $k }'
}

# nth LINES N: the N-th line of a multi-line value.
nth() {
    echo "$1" | sed -n "${2}p"
}

# state KEY: the hash stored at KEY on one line, "" if there is none.
state() {
    cli HGETALL "$1" | paste -sd ' ' -
}

# Redis time in milliseconds.
redis_now_ms() {
    cli TIME | awk 'NR == 1 { s = $1 } NR == 2 { printf "%.0f\n", s * 1000 + int($1 / 1000) }'
}

# expect_pttl KEY TTL_MS T0_MS: KEY was given a TTL of TTL_MS at Redis time
# T0_MS or later, so its PTTL is at most TTL_MS, and at least TTL_MS less the
# time since T0_MS. Time is read right after PTTL, on the same connection,
# so that a busy machine cannot make this fail.
expect_pttl() {
    out=$(printf 'PTTL %s\nTIME\n' "$1" | cli)
    ms=$(echo "$out" | awk 'NR == 2 { s = $1 } NR == 3 {
        printf "%.0f\n", s * 1000 + int($1 / 1000) }')
    expect_range "PTTL of $1" "$(nth "$out" 1)" $(($2 - (ms - $3) - 1)) "$2"
}

# sleep_until_window_offset WINDOW_MS OFFSET_MS: sleeps until the next moment,
# by Redis time, that is OFFSET_MS into a window of WINDOW_MS.
sleep_until_window_offset() {
    now=$(redis_now_ms)
    sleep "$(awk -v now="$now" -v w="$1" -v o="$2" 'BEGIN {
        d = o - now % w; if (d <= 0) d += w; printf "%.3f\n", d / 1000 }')"
}

# Assertions. Tests run in a subshell, so failing one exits that test only,
# with the detail on standard output.
fail() {
    echo "$*"
    exit 1
}

expect_eq() {
    [ "$2" = "$3" ] || fail "$1: got '$2', want '$3'"
}

# expect_range WHAT VALUE LOW HIGH: LOW <= VALUE <= HIGH (decimals allowed).
expect_range() {
    if ! echo "$2" | grep -qx -- '-\{0,1\}[0-9][0-9]*\(\.[0-9]*\)\{0,1\}' ||
       ! awk -v v="$2" -v lo="$3" -v hi="$4" \
           'BEGIN { exit !(v + 0 >= lo + 0 && v + 0 <= hi + 0) }'; then
        fail "$1: got '$2', want $3..$4"
    fi
}

# expect_state KEY BEFORE: the hash at KEY is still BEFORE (from state).
expect_state() {
    expect_eq "state of $1" "$(state "$1")" "$2"
}

calc() {
    awk "BEGIN { printf \"%.3f\n\", $1 }"
}

run() {
    name=$1
    shift
    if detail=$("$@" 2>&1); then
        passed=$((passed + 1))
        echo "ok - $name"
    else
        failed=$((failed + 1))
        echo "not ok - $name: $(echo "$detail" | paste -sd ' ' -)"
    fi
}

TB5="1 0 1 token_bucket 5 20 0 0"

# --- Token bucket ------------------------------------------------------------

test_tb_allows_capacity() {
    # shellcheck disable=SC2086 # $TB5 is a list of arguments.
    out=$(check_times 6 1 tb:count $TB5)
    i=1
    for want in 4 3 2 1 0; do
        r=$(nth "$out" $i)
        expect_eq "call $i allowed" "$(field "$r" 1)" 1
        expect_eq "call $i allowed_1" "$(field "$r" 3)" 1
        expect_eq "call $i limit" "$(field "$r" 4)" 5
        expect_eq "call $i remaining" "$(field "$r" 5)" "$want"
        expect_eq "call $i retry_after_ms" "$(field "$r" 7)" 0
        i=$((i + 1))
    done
    r=$(nth "$out" 6)
    expect_eq "call 6 allowed" "$(field "$r" 1)" 0
    expect_eq "call 6 allowed_1" "$(field "$r" 3)" 0
    expect_eq "call 6 remaining" "$(field "$r" 5)" 0
    expect_range "call 6 retry_after_ms" "$(field "$r" 7)" 1 50
    # Empty bucket at 20/s: full again in 250 ms.
    expect_range "call 6 reset_ms" "$(field "$r" 6)" 240 250
}

test_tb_refill() {
    # shellcheck disable=SC2086
    out=$(check_times 6 1 tb:refill $TB5)
    r=$(nth "$out" 6)
    t6=$(field "$r" 2)
    expect_eq "6th call allowed" "$(field "$r" 1)" 0
    retry=$(field "$r" 7)
    expect_range "retry_after_ms" "$retry" 1 50
    # Waiting retry_after_ms (plus a few ms for redis-cli to start) is enough.
    sleep "$(calc "($retry + 3) / 1000")"
    # shellcheck disable=SC2086
    r=$(check 1 tb:refill $TB5)
    expect_eq "allowed after retry_after_ms" "$(field "$r" 1)" 1
    # A busy machine may sleep longer: one token per 50 ms that passed by
    # Redis time is back, less the one just taken (the bound allows for the
    # times being whole milliseconds).
    expect_range "remaining after refill" "$(field "$r" 5)" 0 \
        $((($(field "$r" 2) - t6) / 50))
}

test_tb_refill_cap() {
    # shellcheck disable=SC2086
    out=$(check_times 5 1 tb:cap $TB5)
    expect_eq "5th call remaining" "$(field "$(nth "$out" 5)" 5)" 0
    # A full refill takes 250 ms; uncapped, 400 ms would give 8 tokens.
    sleep 0.4
    # shellcheck disable=SC2086
    r=$(check 1 tb:cap $TB5)
    expect_eq "allowed" "$(field "$r" 1)" 1
    expect_eq "remaining" "$(field "$r" 5)" 4
    expect_range "reset_ms" "$(field "$r" 6)" 49 50
    expect_range "stored tokens" "$(cli HGET tb:cap tokens)" 3.99 4.1
}

test_tb_ttl() {
    t0=$(redis_now_ms)
    # shellcheck disable=SC2086
    r=$(check 1 tb:ttl $TB5)
    expect_eq "allowed" "$(field "$r" 1)" 1
    # From empty to full: 5 / 20 s = 250 ms, plus 1 s.
    expect_pttl tb:ttl 1250 "$t0"
}

test_tb_cost_above_capacity() {
    # shellcheck disable=SC2086
    check 1 tb:big $TB5 >/dev/null
    before=$(cli HGETALL tb:big | paste -sd ' ' -)
    r=$(check 1 tb:big 6 0 1 token_bucket 5 20 0 0)
    after=$(cli HGETALL tb:big | paste -sd ' ' -)
    expect_eq "allowed" "$(field "$r" 1)" 0
    expect_eq "allowed_1" "$(field "$r" 3)" 0
    expect_eq "retry_after_ms" "$(field "$r" 7)" -1
    expect_eq "state" "$after" "$before"
    r=$(check 1 tb:big-new 6 0 1 token_bucket 5 20 0 0)
    expect_eq "retry_after_ms on a new key" "$(field "$r" 7)" -1
    expect_eq "new key created" "$(cli EXISTS tb:big-new)" 0
}

test_tb_denial_charges_nothing() {
    # At 0.001 tokens/s nothing refills noticeably during the test.
    out=$(check_times 2 1 tb:deny 1 0 1 token_bucket 2 0.001 0 0)
    expect_eq "2nd call remaining" "$(field "$(nth "$out" 2)" 5)" 0
    before=$(cli HGETALL tb:deny | paste -sd ' ' -)
    r=$(check 1 tb:deny 1 0 1 token_bucket 2 0.001 0 0)
    after=$(cli HGETALL tb:deny | paste -sd ' ' -)
    expect_eq "allowed" "$(field "$r" 1)" 0
    expect_eq "state" "$after" "$before"
    # One token at 0.001/s takes 1000 s.
    expect_range "retry_after_ms" "$(field "$r" 7)" 999000 1000000
}

test_peek_writes_nothing() {
    r=$(check 1 peek:tb 1 1 1 token_bucket 5 0.001 0 0)
    expect_eq "peek allowed" "$(field "$r" 1)" 1
    expect_eq "peek remaining" "$(field "$r" 5)" 4
    expect_eq "key after peek on a new key" "$(cli EXISTS peek:tb)" 0
    r=$(check 1 peek:sw 1 1 1 sliding_window 3 10 0 0)
    expect_eq "window peek remaining" "$(field "$r" 5)" 2
    expect_eq "window key after peek" "$(cli EXISTS peek:sw)" 0

    check 1 peek:tb 1 0 1 token_bucket 5 0.001 0 0 >/dev/null
    before=$(cli HGETALL peek:tb | paste -sd ' ' -)
    r=$(check 1 peek:tb 1 1 1 token_bucket 5 0.001 0 0)
    after=$(cli HGETALL peek:tb | paste -sd ' ' -)
    expect_eq "peek on existing key remaining" "$(field "$r" 5)" 3
    expect_eq "state after peek" "$after" "$before"
    # A peek that would be denied writes nothing either.
    r=$(check 1 peek:tb 5 1 1 token_bucket 5 0.001 0 0)
    expect_eq "denied peek allowed" "$(field "$r" 1)" 0
    expect_eq "state after denied peek" \
        "$(cli HGETALL peek:tb | paste -sd ' ' -)" "$before"
}

# --- Sliding window ----------------------------------------------------------

SW3="1 0 1 sliding_window 3 2 0 0"

# Runs 3 allowed and 1 denied call early in a 2 s window. The retry of the
# 4th waits for the next window, until the 3 counted weigh 2 or less:
# (2000 - offset) + 2000 / 3 ms.
test_sw_limit() {
    sleep_until_window_offset 2000 100
    # shellcheck disable=SC2086
    out=$(check_times 4 1 sw:a $SW3)
    i=1
    for want in 2 1 0; do
        r=$(nth "$out" $i)
        expect_eq "call $i allowed" "$(field "$r" 1)" 1
        expect_eq "call $i limit" "$(field "$r" 4)" 3
        expect_eq "call $i remaining" "$(field "$r" 5)" "$want"
        i=$((i + 1))
    done
    r=$(nth "$out" 4)
    expect_eq "call 4 allowed" "$(field "$r" 1)" 0
    expect_eq "call 4 remaining" "$(field "$r" 5)" 0
    offset=$(( $(field "$r" 2) % 2000 ))
    expect_range "call 4 offset in window" "$offset" 0 1000
    expect_range "call 4 retry_after_ms" "$(field "$r" 7)" \
        "$(calc "2000 - $offset + 2000 / 3 - 1")" \
        "$(calc "2000 - $offset + 2000 / 3 + 1")"
    # Counted in this window, weighs until the end of the next one.
    expect_range "call 4 reset_ms" "$(field "$r" 6)" \
        $((4000 - offset - 1)) $((4000 - offset + 1))
    # Two windows plus one second, from the 3rd call or earlier.
    expect_pttl sw:a 5000 "$(field "$r" 2)"
}

# Right after the rollover the 3 requests of the previous window weigh
# almost fully: nothing passes until they weigh 2, at a third of the window.
test_sw_rollover() {
    sleep_until_window_offset 2000 100
    # shellcheck disable=SC2086
    r=$(check 1 sw:a $SW3)
    offset=$(( $(field "$r" 2) % 2000 ))
    expect_range "offset in window" "$offset" 0 600
    expect_eq "allowed" "$(field "$r" 1)" 0
    expect_eq "remaining" "$(field "$r" 5)" 0
    expect_range "retry_after_ms" "$(field "$r" 7)" \
        "$(calc "2000 / 3 - $offset - 1")" "$(calc "2000 / 3 - $offset + 1")"
    # Only the previous window counts, until the end of this one.
    expect_range "reset_ms" "$(field "$r" 6)" \
        $((2000 - offset - 1)) $((2000 - offset + 1))
    expect_eq "stored prev" "$(cli HGET sw:a prev)" 0
    expect_eq "stored cur" "$(cli HGET sw:a cur)" 3
}

# Halfway through, the previous 3 weigh 1.5: one more passes (2.5 <= 3), a
# second does not (3.5 > 3) until they weigh 1, at two thirds of the window.
test_sw_weighting() {
    sleep_until_window_offset 2000 1000
    # shellcheck disable=SC2086
    out=$(check_times 2 1 sw:a $SW3)
    r=$(nth "$out" 1)
    offset=$(( $(field "$r" 2) % 2000 ))
    expect_range "offset in window" "$offset" 800 1200
    expect_eq "1st allowed" "$(field "$r" 1)" 1
    expect_eq "1st remaining" "$(field "$r" 5)" 0
    r=$(nth "$out" 2)
    expect_eq "2nd allowed" "$(field "$r" 1)" 0
    offset=$(( $(field "$r" 2) % 2000 ))
    retry=$(field "$r" 7)
    expect_range "2nd retry_after_ms" "$retry" \
        "$(calc "4000 / 3 - $offset - 1")" "$(calc "4000 / 3 - $offset + 1")"
    expect_eq "stored prev" "$(cli HGET sw:a prev)" 3
    expect_eq "stored cur" "$(cli HGET sw:a cur)" 1
    sleep "$(calc "($retry + 3) / 1000")"
    # shellcheck disable=SC2086
    r=$(check 1 sw:a $SW3)
    expect_eq "allowed after retry_after_ms" "$(field "$r" 1)" 1
}

test_sw_cost_above_limit() {
    r=$(check 1 sw:big 4 0 1 sliding_window 3 2 0 0)
    expect_eq "allowed" "$(field "$r" 1)" 0
    expect_eq "retry_after_ms" "$(field "$r" 7)" -1
    expect_eq "key created" "$(cli EXISTS sw:big)" 0
}

# --- Exact times --------------------------------------------------------------
#
# These pass __now_us, so every field of the reply is known exactly. N is a
# time well inside a minute (2028-02-29 00:00:20 UTC), in microseconds; its
# milliseconds are N / 1000.

N=1835395220000000
NMS=1835395220000

# Empty at N, a 20/s bucket has one token again 50 ms later, not 1 µs before.
test_tb_exact() {
    a="1 0 1 token_bucket 5 20 0 0"
    # shellcheck disable=SC2086
    out=$(check_times 6 1 tb:exact $a "__now_us=$N")
    expect_eq "5th call" "$(nth "$out" 5)" "1 $NMS 1 5 0 250 0"
    expect_eq "6th call" "$(nth "$out" 6)" "0 $NMS 0 5 0 250 50"
    # shellcheck disable=SC2086
    r=$(check 1 tb:exact $a "__now_us=$((N + 49999))")
    expect_eq "1 µs early" "$r" "0 $((NMS + 49)) 0 5 0 201 1"
    # shellcheck disable=SC2086
    r=$(check 1 tb:exact $a "__now_us=$((N + 50000))")
    expect_eq "on time" "$r" "1 $((NMS + 50)) 1 5 0 250 0"
    expect_eq "stored" "$(state tb:exact)" "tokens 0 ts $((N + 50000))"
}

# Three requests in the last microsecond of a 2 s window (N is at a window
# start) weigh 3 at the start of the next, and 2 (so one more passes) once a
# third of it is over: after 666666.67 µs.
test_sw_exact() {
    a="1 0 1 sliding_window 3 2 0 0"
    # shellcheck disable=SC2086
    out=$(check_times 4 1 sw:exact $a "__now_us=$((N - 1))")
    expect_eq "3rd call" "$(nth "$out" 3)" "1 $((NMS - 1)) 1 3 0 2001 0"
    expect_eq "4th call" "$(nth "$out" 4)" "0 $((NMS - 1)) 0 3 0 2001 667"
    # shellcheck disable=SC2086
    r=$(check 1 sw:exact $a "__now_us=$N")
    expect_eq "at the window start" "$r" "0 $NMS 0 3 0 2000 667"
    # shellcheck disable=SC2086
    r=$(check 1 sw:exact $a "__now_us=$((N + 666666))")
    expect_eq "1 µs early" "$r" "0 $((NMS + 666)) 0 3 0 1334 1"
    # shellcheck disable=SC2086
    r=$(check 1 sw:exact $a "__now_us=$((N + 666667))")
    expect_eq "on time" "$r" "1 $((NMS + 666)) 1 3 0 3334 0"
}

# --- GCRA --------------------------------------------------------------------

# 10 per second is one every T = 100000 µs; burst 2 lets 3 through at once.
G10B2="1 0 1 gcra 10 1000000 2 0"

test_gcra_burst() {
    t0=$(redis_now_ms)
    # shellcheck disable=SC2086
    out=$(check_times 4 1 g:a $G10B2 "__now_us=$N")
    expect_eq "call 1" "$(nth "$out" 1)" "1 $NMS 1 3 2 100 0"
    expect_eq "call 2" "$(nth "$out" 2)" "1 $NMS 1 3 1 200 0"
    expect_eq "call 3" "$(nth "$out" 3)" "1 $NMS 1 3 0 300 0"
    expect_eq "call 4" "$(nth "$out" 4)" "0 $NMS 0 3 0 300 100"
    expect_eq "stored" "$(state g:a)" "tat $((N + 300000))"
    # Idle again 300 ms after now, plus 1 s.
    expect_pttl g:a 1300 "$t0"
}

# Continues test_gcra_burst: one request more every T.
test_gcra_refill() {
    # shellcheck disable=SC2086
    r=$(check 1 g:a $G10B2 "__now_us=$((N + 99999))")
    expect_eq "1 µs early" "$r" "0 $((NMS + 99)) 0 3 0 201 1"
    expect_eq "stored after denial" "$(state g:a)" "tat $((N + 300000))"
    # shellcheck disable=SC2086
    r=$(check 1 g:a $G10B2 "__now_us=$((N + 100000))")
    expect_eq "on time" "$r" "1 $((NMS + 100)) 1 3 0 300 0"
    # shellcheck disable=SC2086
    r=$(check 1 g:a $G10B2 "__now_us=$((N + 150000))")
    expect_eq "half an interval later" "$r" "0 $((NMS + 150)) 0 3 0 250 50"
    # Once the TAT is past, the whole burst is back.
    # shellcheck disable=SC2086
    r=$(check 1 g:a $G10B2 "__now_us=$((N + 5000000))")
    expect_eq "idle" "$r" "1 $((NMS + 5000)) 1 3 2 100 0"
    expect_eq "stored when idle" "$(state g:a)" "tat $((N + 5100000))"
}

# 2 per second, burst 0: one every 500000 µs and never two closer.
test_gcra_burst_zero() {
    a="1 0 1 gcra 2 1000000 0 0"
    # shellcheck disable=SC2086
    r=$(check 1 g:b0 $a "__now_us=$N")
    expect_eq "first" "$r" "1 $NMS 1 1 0 500 0"
    # shellcheck disable=SC2086
    r=$(check 1 g:b0 $a "__now_us=$((N + 499999))")
    expect_eq "T - 1 µs later" "$r" "0 $((NMS + 499)) 0 1 0 1 1"
    # shellcheck disable=SC2086
    r=$(check 1 g:b0 $a "__now_us=$((N + 500000))")
    expect_eq "T later" "$r" "1 $((NMS + 500)) 1 1 0 500 0"
    expect_eq "stored" "$(state g:b0)" "tat $((N + 1000000))"
}

# 3 per 1000 µs: T = ceil(1000 / 3) = 334 µs, never 333, which would let a
# 4th request into a millisecond now and then.
test_gcra_interval_rounding() {
    a="1 0 1 gcra 3 1000 0 0"
    # shellcheck disable=SC2086
    check 1 g:round $a "__now_us=$N" >/dev/null
    expect_eq "stored" "$(state g:round)" "tat $((N + 334))"
    # shellcheck disable=SC2086
    r=$(check 1 g:round $a "__now_us=$((N + 333))")
    expect_eq "333 µs later allowed" "$(field "$r" 1)" 0
    # shellcheck disable=SC2086
    r=$(check 1 g:round $a "__now_us=$((N + 334))")
    expect_eq "334 µs later allowed" "$(field "$r" 1)" 1
}

# 1 per 500 µs: durations round up to 1 ms, the request passes every 500 µs.
test_gcra_sub_ms() {
    a="1 0 1 gcra 1 500 0 0"
    t0=$(redis_now_ms)
    # shellcheck disable=SC2086
    r=$(check 1 g:sub $a "__now_us=$N")
    expect_eq "first" "$r" "1 $NMS 1 1 0 1 0"
    # shellcheck disable=SC2086
    r=$(check 1 g:sub $a "__now_us=$((N + 499))")
    expect_eq "499 µs later" "$r" "0 $NMS 0 1 0 1 1"
    # shellcheck disable=SC2086
    r=$(check 1 g:sub $a "__now_us=$((N + 500))")
    expect_eq "500 µs later" "$r" "1 $NMS 1 1 0 1 0"
    # shellcheck disable=SC2086
    r=$(check 1 g:sub $a "__now_us=$((N + 1000))")
    expect_eq "1000 µs later" "$r" "1 $((NMS + 1)) 1 1 0 1 0"
    expect_eq "stored" "$(state g:sub)" "tat $((N + 1500))"
    # 1 ms until idle, plus 1 s.
    expect_pttl g:sub 1001 "$t0"
}

# Burst 4 (5 at once), cost 3: the second cost 3 would need 6.
test_gcra_cost() {
    a="3 0 1 gcra 10 1000000 4 0"
    # shellcheck disable=SC2086
    out=$(check_times 2 1 g:cost $a "__now_us=$N")
    expect_eq "first" "$(nth "$out" 1)" "1 $NMS 1 5 2 300 0"
    expect_eq "second" "$(nth "$out" 2)" "0 $NMS 0 5 2 300 100"
    expect_eq "stored" "$(state g:cost)" "tat $((N + 300000))"
}

test_gcra_cost_above_burst() {
    r=$(check 1 g:big 3 0 1 gcra 10 1000000 1 0 "__now_us=$N")
    expect_eq "new key" "$r" "0 $NMS 0 2 2 0 -1"
    expect_eq "new key created" "$(cli EXISTS g:big)" 0
    check 1 g:big 1 0 1 gcra 10 1000000 1 0 "__now_us=$N" >/dev/null
    before=$(state g:big)
    r=$(check 1 g:big 3 0 1 gcra 10 1000000 1 0 "__now_us=$N")
    expect_eq "existing key" "$r" "0 $NMS 0 2 1 100 -1"
    expect_state g:big "$before"
}

# Without the hook: 10 per second, burst 0, twice back to back.
test_gcra_real_time() {
    t0=$(redis_now_ms)
    out=$(check_times 2 1 g:real 1 0 1 gcra 10 1000000 0 0)
    expect_eq "1st allowed" "$(field "$(nth "$out" 1)" 1)" 1
    r=$(nth "$out" 2)
    expect_eq "2nd allowed" "$(field "$r" 1)" 0
    retry=$(field "$r" 7)
    expect_range "2nd retry_after_ms" "$retry" 1 100
    expect_pttl g:real 1100 "$t0"
    sleep "$(calc "($retry + 3) / 1000")"
    r=$(check 1 g:real 1 0 1 gcra 10 1000000 0 0)
    expect_eq "allowed after retry_after_ms" "$(field "$r" 1)" 1
}

# --- Fixed window ------------------------------------------------------------

# N is 20 s into a minute: 40 s are left.
test_fw_limit() {
    a="1 0 1 fixed_window 3 minute 0 0"
    t0=$(redis_now_ms)
    # shellcheck disable=SC2086
    out=$(check_times 4 1 fw:a $a "__now_us=$N")
    expect_eq "call 1" "$(nth "$out" 1)" "1 $NMS 1 3 2 40000 0"
    expect_eq "call 2" "$(nth "$out" 2)" "1 $NMS 1 3 1 40000 0"
    expect_eq "call 3" "$(nth "$out" 3)" "1 $NMS 1 3 0 40000 0"
    expect_eq "call 4" "$(nth "$out" 4)" "0 $NMS 0 3 0 40000 40000"
    expect_eq "stored" "$(state fw:a)" "win 1835395200 count 3"
    expect_pttl fw:a 41000 "$t0"
    # shellcheck disable=SC2086
    r=$(check 1 fw:a $a "__now_us=$((N + 39999999))")
    expect_eq "last µs of the minute" "$r" "0 $((NMS + 39999)) 0 3 0 1 1"
    expect_eq "stored after denials" "$(state fw:a)" "win 1835395200 count 3"
}

test_fw_cost_above_limit() {
    r=$(check 1 fw:big 4 0 1 fixed_window 3 minute 0 0 "__now_us=$N")
    expect_eq "new key" "$r" "0 $NMS 0 3 3 40000 -1"
    expect_eq "new key created" "$(cli EXISTS fw:big)" 0
    check 1 fw:big 1 0 1 fixed_window 3 minute 0 0 "__now_us=$N" >/dev/null
    before=$(state fw:big)
    r=$(check 1 fw:big 3 0 1 fixed_window 3 minute 0 0 "__now_us=$N")
    expect_eq "cost 3 after 1" "$r" "0 $NMS 0 3 2 40000 40000"
    r=$(check 1 fw:big 4 0 1 fixed_window 3 minute 0 0 "__now_us=$N")
    expect_eq "cost 4 after 1" "$r" "0 $NMS 0 3 2 40000 -1"
    expect_state fw:big "$before"
}

# fw_edge UNIT BOUNDARY_S NEXT_MS: with a limit of 2 per UNIT, uses both
# 1 µs before the window boundary BOUNDARY_S, is denied there, and is
# allowed again at the boundary, where the new window lasts NEXT_MS.
fw_edge() {
    key=fw:edge:$1
    a="1 0 1 fixed_window 2 $1 0 0"
    b_us=$(($2 * 1000000))
    b_ms=$(($2 * 1000))
    # shellcheck disable=SC2086
    r=$(check 1 "$key" 2 0 1 fixed_window 2 "$1" 0 0 "__now_us=$((b_us - 1))")
    expect_eq "$1: cost 2 1 µs before" "$r" "1 $((b_ms - 1)) 1 2 0 1 0"
    # shellcheck disable=SC2086
    r=$(check 1 "$key" $a "__now_us=$((b_us - 1))")
    expect_eq "$1: cost 1 1 µs before" "$r" "0 $((b_ms - 1)) 0 2 0 1 1"
    # shellcheck disable=SC2086
    r=$(check 1 "$key" $a "__now_us=$b_us")
    expect_eq "$1: at the boundary" "$r" "1 $b_ms 1 2 1 $3 0"
    expect_eq "$1: stored" "$(state "$key")" "win $2 count 1"
}

# 2028-02-29 00:01:00, 01:00:00 and 00:00:00 UTC.
test_fw_edge_minute() {
    fw_edge minute 1835395260 60000
}

test_fw_edge_hour() {
    fw_edge hour 1835398800 3600000
}

test_fw_edge_day() {
    fw_edge day 1835395200 86400000
}

# From Feb 29 2028 23:59:59.999999 to Mar 1 2028 00:00:00 UTC; March has
# 31 days.
test_fw_edge_month() {
    fw_edge month 1835481600 2678400000
}

# fw_month START_S NEXT_S DAYS: a request at the first microsecond of a
# month (START_S) has DAYS days to wait; the last microsecond before NEXT_S
# is still in that month; NEXT_S starts a new one.
fw_month() {
    key=fw:month:$1
    a="1 0 1 fixed_window 3 month 0 0"
    # shellcheck disable=SC2086
    r=$(check 1 "$key" $a "__now_us=$(($1 * 1000000))")
    expect_eq "$1: first µs" "$r" "1 $(($1 * 1000)) 1 3 2 $(($3 * 86400000)) 0"
    # shellcheck disable=SC2086
    r=$(check 1 "$key" $a "__now_us=$(($2 * 1000000 - 1))")
    expect_eq "$1: last µs" "$r" "1 $(($2 * 1000 - 1)) 1 3 1 1 0"
    # shellcheck disable=SC2086
    r=$(check 1 "$key" $a "__now_us=$(($2 * 1000000))")
    expect_eq "$1: next month remaining" "$(field "$r" 5)" 2
    expect_eq "$1: next month stored" "$(state "$key")" "win $2 count 1"
}

test_fw_month_lengths() {
    fw_month 1830297600 1832976000 31  # January 2028
    fw_month 1832976000 1835481600 29  # February 2028, a leap year
    fw_month 1801440000 1803859200 28  # February 2027
    fw_month 1827619200 1830297600 31  # December 2027 to January 2028
    fw_month 949363200 951868800 29    # February 2000 (divisible by 400)
    fw_month 4105123200 4107542400 28  # February 2100 (by 100, not 400)
}

# Without the hook: the reset and the retry are the rest of the minute. The
# two calls must fall into one minute, so the last second of one is skipped.
test_fw_real_time() {
    if [ $(( $(redis_now_ms) % 60000 )) -ge 59000 ]; then
        sleep 1.1
    fi
    t0=$(redis_now_ms)
    out=$(check_times 2 1 fw:real 1 0 1 fixed_window 1 minute 0 0)
    expect_eq "1st allowed" "$(field "$(nth "$out" 1)" 1)" 1
    r=$(nth "$out" 2)
    expect_eq "2nd allowed" "$(field "$r" 1)" 0
    left=$((60000 - $(field "$r" 2) % 60000))
    expect_range "retry_after_ms" "$(field "$r" 7)" "$left" $((left + 1))
    expect_range "reset_ms" "$(field "$r" 6)" "$left" $((left + 1))
    # The key expires 1 s after the end of the minute (within 1 ms).
    expect_pttl fw:real $((left + $(field "$r" 2) - t0 + 1001)) "$t0"
}

# --- Several limits ----------------------------------------------------------

test_all_or_nothing() {
    args="2 aon:tb aon:sw 1 0 2 token_bucket 10 0.001 0 0"
    args="$args sliding_window 3 60 0 0"
    # shellcheck disable=SC2086
    out=$(check_times 3 $args)
    for i in 1 2 3; do
        r=$(nth "$out" $i)
        expect_eq "call $i allowed" "$(field "$r" 1)" 1
        expect_eq "call $i bucket remaining" "$(field "$r" 5)" $((10 - i))
        expect_eq "call $i window remaining" "$(field "$r" 10)" $((3 - i))
    done
    expect_range "tokens after 3" "$(cli HGET aon:tb tokens)" 7 7.01
    tb_before=$(cli HGETALL aon:tb | paste -sd ' ' -)
    sw_before=$(cli HGETALL aon:sw | paste -sd ' ' -)
    # shellcheck disable=SC2086
    r=$(check $args)
    expect_eq "reply length" "$(echo "$r" | awk '{ print NF }')" 12
    expect_eq "allowed" "$(field "$r" 1)" 0
    expect_eq "bucket allowed_1" "$(field "$r" 3)" 1
    expect_eq "bucket retry_after_ms" "$(field "$r" 7)" 0
    expect_eq "window allowed_2" "$(field "$r" 8)" 0
    expect_eq "window limit" "$(field "$r" 9)" 3
    expect_range "window retry_after_ms" "$(field "$r" 12)" 1 120000
    expect_range "tokens after denial" "$(cli HGET aon:tb tokens)" 7 7.01
    expect_eq "bucket state" "$(cli HGETALL aon:tb | paste -sd ' ' -)" \
        "$tb_before"
    expect_eq "window state" "$(cli HGETALL aon:sw | paste -sd ' ' -)" \
        "$sw_before"
}

# gcra lets 3 through, the others more: the 4th call is denied by gcra
# alone and changes nothing anywhere.
test_all_or_nothing_four() {
    keys="aon4:tb aon4:sw aon4:g aon4:fw"
    args="1 0 4 token_bucket 10 0.001 0 0 sliding_window 5 60 0 0"
    args="$args gcra 1 3600000000 2 0 fixed_window 5 day 0 0 __now_us=$N"
    # shellcheck disable=SC2086
    out=$(check_times 4 4 $keys $args)
    for i in 1 2 3; do
        r=$(nth "$out" $i)
        expect_eq "call $i allowed" "$(field "$r" 1)" 1
        expect_eq "call $i allowed_i" "$(field "$r" 3) $(field "$r" 8)" \
            "1 1"
        expect_eq "call $i allowed_i" "$(field "$r" 13) $(field "$r" 18)" \
            "1 1"
    done
    r=$(nth "$out" 4)
    expect_eq "reply length" "$(echo "$r" | awk '{ print NF }')" 22
    expect_eq "call 4 allowed" "$(field "$r" 1)" 0
    expect_eq "call 4 allowed_i" \
        "$(field "$r" 3) $(field "$r" 8) $(field "$r" 13) $(field "$r" 18)" \
        "1 1 0 1"
    expect_eq "call 4 remaining_i" \
        "$(field "$r" 5) $(field "$r" 10) $(field "$r" 15) $(field "$r" 20)" \
        "6 1 0 1"
    expect_eq "bucket" "$(state aon4:tb)" "tokens 7 ts $N"
    expect_eq "window" "$(state aon4:sw)" "win 30589920 cur 3 prev 0"
    expect_eq "gcra" "$(state aon4:g)" "tat $((N + 3 * 3600000000))"
    expect_eq "fixed window" "$(state aon4:fw)" "win 1835395200 count 3"
    for k in $keys; do
        expect_range "PTTL of $k" "$(cli PTTL "$k")" 1 99999999999
    done
}

# --- Shadow limits -----------------------------------------------------------

# An enforced limit of 5 per minute with a shadow limit of 1 per second.
SHADOW="1 0 2 fixed_window 5 minute 0 0 gcra 1 1000000 0 1"

test_shadow_denies() {
    t0=$(redis_now_ms)
    # shellcheck disable=SC2086
    r=$(check 2 sh:fw sh:g $SHADOW "__now_us=$N")
    expect_eq "both allow" "$r" "1 $NMS 1 5 4 40000 0 1 1 0 1000 0"
    expect_eq "shadow charged" "$(state sh:g)" "tat $((N + 1000000))"
    expect_pttl sh:g 2000 "$t0"
    # shellcheck disable=SC2086
    out=$(check_times 2 2 sh:fw sh:g $SHADOW "__now_us=$((N + 1000))")
    expect_eq "shadow denies" "$(nth "$out" 1)" \
        "1 $((NMS + 1)) 1 5 3 39999 0 0 1 0 999 999"
    expect_eq "shadow denies again" "$(nth "$out" 2)" \
        "1 $((NMS + 1)) 1 5 2 39999 0 0 1 0 999 999"
    expect_eq "enforced charged" "$(state sh:fw)" "win 1835395200 count 3"
    expect_eq "shadow not charged" "$(state sh:g)" "tat $((N + 1000000))"
}

# The enforced limit (1 per minute) denies, the shadow one (burst 5) would
# allow: nothing is written, the shadow limit is not charged either.
test_shadow_enforced_denies() {
    a="1 0 2 fixed_window 1 minute 0 0 gcra 10 1000000 5 1"
    # shellcheck disable=SC2086
    out=$(check_times 2 2 sh2:fw sh2:g $a "__now_us=$N")
    expect_eq "first" "$(nth "$out" 1)" "1 $NMS 1 1 0 40000 0 1 6 5 100 0"
    expect_eq "second" "$(nth "$out" 2)" \
        "0 $NMS 0 1 0 40000 40000 1 6 4 200 0"
    expect_eq "enforced" "$(state sh2:fw)" "win 1835395200 count 1"
    expect_eq "shadow" "$(state sh2:g)" "tat $((N + 100000))"
}

test_shadow_only() {
    a="1 0 1 gcra 1 1000000 0 1"
    # shellcheck disable=SC2086
    out=$(check_times 2 1 sh3:g $a "__now_us=$N")
    expect_eq "first" "$(nth "$out" 1)" "1 $NMS 1 1 0 1000 0"
    expect_eq "second" "$(nth "$out" 2)" "1 $NMS 0 1 0 1000 1000"
    expect_eq "stored" "$(state sh3:g)" "tat $((N + 1000000))"
}

test_shadow_peek() {
    a="1 1 2 fixed_window 5 minute 0 0 gcra 1 1000000 0 1"
    # shellcheck disable=SC2086
    r=$(check 2 sh4:fw sh4:g $a "__now_us=$N")
    expect_eq "peek" "$r" "1 $NMS 1 5 4 40000 0 1 1 0 1000 0"
    expect_eq "keys written" "$(cli EXISTS sh4:fw sh4:g)" 0
}

# --- Sent twice: the request key KEYS[n + 1] and peek 2 --------------------

# A call that charged, sent again with the same request key and peek 2,
# gets the first reply again and charges nothing; another request key is a
# new request.
FW2="1 0 1 fixed_window 2 minute 0 0"
FW2_AGAIN="1 2 1 fixed_window 2 minute 0 0"

test_replay_allowed() {
    t0=$(redis_now_ms)
    # shellcheck disable=SC2086 # $FW2 is a list of arguments.
    first=$(check 2 rp:fw rp:once:a $FW2 "__now_us=$N")
    expect_eq "first" "$first" "1 $NMS 1 2 1 40000 0"
    expect_eq "charged once" "$(state rp:fw)" "win 1835395200 count 1"
    expect_eq "reply stored" "$(cli GET rp:once:a)" "1 $NMS 1 2 1 40000 0 "
    expect_pttl rp:once:a 3000 "$t0"
    # A millisecond later, as a resend after a reconnect would be.
    # shellcheck disable=SC2086
    again=$(check 2 rp:fw rp:once:a $FW2_AGAIN "__now_us=$((N + 1000))")
    expect_eq "sent again: the first reply" "$again" "$first"
    expect_eq "sent again: not charged" "$(state rp:fw)" \
        "win 1835395200 count 1"
    # shellcheck disable=SC2086
    r=$(check 2 rp:fw rp:once:b $FW2 "__now_us=$((N + 2000))")
    expect_eq "another request" "$r" "1 $((NMS + 2)) 1 2 0 39998 0"
    expect_eq "charged" "$(state rp:fw)" "win 1835395200 count 2"
    # The limit is used up now; the first request still gets its answer.
    # shellcheck disable=SC2086
    again=$(check 2 rp:fw rp:once:a $FW2_AGAIN "__now_us=$((N + 3000))")
    expect_eq "sent again after the limit is used up" "$again" "$first"
    expect_eq "still charged twice in all" "$(state rp:fw)" \
        "win 1835395200 count 2"
}

# Only peek 2 looks for a stored reply (a first call's id is new); a
# peek 2 that finds none is decided and charged as a first call.
test_replay_only_when_sent_again() {
    # shellcheck disable=SC2086
    check 2 ro:fw ro:once:a $FW2 "__now_us=$N" >/dev/null
    # shellcheck disable=SC2086
    r=$(check 2 ro:fw ro:once:a $FW2 "__now_us=$N")
    expect_eq "peek 0 decides again" "$r" "1 $NMS 1 2 0 40000 0"
    expect_eq "and charges" "$(state ro:fw)" "win 1835395200 count 2"
    cli DEL ro:fw >/dev/null
    # shellcheck disable=SC2086
    r=$(check 2 ro:fw ro:once:n $FW2_AGAIN "__now_us=$N")
    expect_eq "sent again, first never ran" "$r" "1 $NMS 1 2 1 40000 0"
    expect_eq "charged once" "$(state ro:fw)" "win 1835395200 count 1"
    expect_eq "stored" "$(cli GET ro:once:n)" "1 $NMS 1 2 1 40000 0 "
}

# A denial charges nothing and stores nothing: sent again, it is decided
# again (here: denied again, and once the window has passed, allowed and
# charged once).
test_replay_denial() {
    # shellcheck disable=SC2086
    check 1 rd:fw 2 0 1 fixed_window 2 minute 0 0 "__now_us=$N" >/dev/null
    before=$(state rd:fw)
    # shellcheck disable=SC2086
    r=$(check 2 rd:fw rd:once:c $FW2 "__now_us=$N")
    expect_eq "denied" "$r" "0 $NMS 0 2 0 40000 40000"
    # shellcheck disable=SC2086
    r=$(check 2 rd:fw rd:once:c $FW2_AGAIN "__now_us=$N")
    expect_eq "denied again" "$r" "0 $NMS 0 2 0 40000 40000"
    expect_eq "nothing charged" "$(state rd:fw)" "$before"
    expect_eq "nothing stored" "$(cli EXISTS rd:once:c)" 0
    # shellcheck disable=SC2086
    r=$(check 2 rd:fw rd:once:c $FW2_AGAIN "__now_us=$((N + 40000000))")
    expect_eq "next minute" "$r" "1 $((NMS + 40000)) 1 2 1 60000 0"
    # shellcheck disable=SC2086
    r=$(check 2 rd:fw rd:once:c $FW2_AGAIN "__now_us=$((N + 40000000))")
    expect_eq "next minute, sent again" "$r" "1 $((NMS + 40000)) 1 2 1 60000 0"
    expect_eq "charged once" "$(state rd:fw)" "win 1835395260 count 1"
}

# A peek charges nothing and stores nothing, with or without a request key.
test_replay_peek() {
    # shellcheck disable=SC2086
    check 1 rk:fw 1 0 1 fixed_window 2 minute 0 0 "__now_us=$N" >/dev/null
    before=$(state rk:fw)
    for what in peek "peek again"; do
        r=$(check 2 rk:fw rk:once:p 1 1 1 fixed_window 2 minute 0 0 \
            "__now_us=$N")
        expect_eq "$what" "$r" "1 $NMS 1 2 0 40000 0"
    done
    expect_eq "nothing charged" "$(state rk:fw)" "$before"
    expect_eq "nothing stored" "$(cli EXISTS rk:once:p)" 0
    # A peek with the key of a request that charged is not a resend of it.
    # shellcheck disable=SC2086
    check 2 rk:fw rk:once:q $FW2 "__now_us=$N" >/dev/null
    r=$(check 2 rk:fw rk:once:q 1 1 1 fixed_window 2 minute 0 0 \
        "__now_us=$N")
    expect_eq "peek after the limit is used up" "$r" \
        "0 $NMS 0 2 0 40000 40000"
}

# Several limits, one of them a shadow limit whose cost can never pass
# (retry_after_ms -1): every field of the reply comes back as it was.
test_replay_several() {
    a="2 0 2 gcra 10 1000000 4 0 fixed_window 1 minute 0 1"
    # shellcheck disable=SC2086
    first=$(check 3 rs:g rs:fw rs:once:m $a "__now_us=$N")
    expect_eq "first" "$first" "1 $NMS 1 5 3 200 0 0 1 1 40000 -1"
    g=$(state rs:g)
    a="2 2 2 gcra 10 1000000 4 0 fixed_window 1 minute 0 1"
    # shellcheck disable=SC2086
    again=$(check 3 rs:g rs:fw rs:once:m $a "__now_us=$((N + 7))")
    expect_eq "sent again" "$again" "$first"
    expect_eq "gcra charged once" "$(state rs:g)" "$g"
    expect_eq "shadow limit not charged" "$(cli EXISTS rs:fw)" 0
}

# With Redis TIME: the resend, 20 ms later, answers with the first call's
# time, so it is the stored reply and not a new decision.
test_replay_real_time() {
    # shellcheck disable=SC2086
    first=$(check 2 rt:tb rt:once:t 1 0 1 token_bucket 5 0.5 0 0)
    tokens=$(cli HGET rt:tb tokens)
    sleep 0.02
    # shellcheck disable=SC2086
    again=$(check 2 rt:tb rt:once:t 1 2 1 token_bucket 5 0.5 0 0)
    expect_eq "sent again" "$again" "$first"
    expect_eq "charged once" "$(cli HGET rt:tb tokens)" "$tokens"
    expect_eq "remaining" "$(field "$first" 5)" 4
}

# --- Arguments ---------------------------------------------------------------

# expect_error WHAT MESSAGE ARGS...: the script answers ARGS with the error
# "ERR ratelimit: " followed by text containing MESSAGE.
expect_error() {
    what=$1
    message=$2
    shift 2
    got=$(check "$@")
    case $got in
        "ERR ratelimit: "*"$message"*) ;;
        *) fail "$what: got '$got', want 'ERR ratelimit: ...$message...'" ;;
    esac
}

# shellcheck disable=SC2086 # $tb is a list of arguments.
test_argument_errors() {
    tb="token_bucket 5 1 0 0"
    expect_error "n does not match keys" "does not match" \
        1 e:a 1 0 2 $tb $tb
    expect_error "more keys than n + 1" "does not match" \
        3 e:a e:b e:c 1 0 1 $tb
    expect_error "non-numeric cost" "cost" 1 e:a x 0 1 $tb
    expect_error "zero cost" "cost" 1 e:a 0 0 1 $tb
    expect_error "fractional cost" "cost" 1 e:a 1.5 0 1 $tb
    expect_error "bad peek flag" "peek must be" 1 e:a 1 3 1 $tb
    expect_error "peek 2 without the request key" "needs the request key" \
        1 e:a 1 2 1 $tb
    expect_error "unknown algorithm" "unknown algorithm" \
        1 e:a 1 0 1 leaky_bucket 5 1 0 0
    expect_error "zero capacity" "capacity" 1 e:a 1 0 1 token_bucket 0 1 0 0
    expect_error "negative rate" "rate" 1 e:a 1 0 1 token_bucket 5 -1 0 0
    expect_error "zero rate" "rate" 1 e:a 1 0 1 token_bucket 5 0.0 0 0
    expect_error "non-numeric rate" "rate" \
        1 e:a 1 0 1 token_bucket 5 abc 0 0
    expect_error "token bucket p3 not 0" "p3 must be 0" \
        1 e:a 1 0 1 token_bucket 5 1 1 0
    expect_error "zero limit" "limit" 1 e:a 1 0 1 sliding_window 0 10 0 0
    expect_error "fractional window" "window" \
        1 e:a 1 0 1 sliding_window 3 1.5 0 0
    expect_error "sliding window p3 not 0" "p3 must be 0" \
        1 e:a 1 0 1 sliding_window 3 10 00 0
    expect_error "gcra zero limit" "limit" 1 e:a 1 0 1 gcra 0 1000 0 0
    expect_error "gcra zero period" "period" 1 e:a 1 0 1 gcra 1 0 0 0
    expect_error "gcra fractional period" "period" \
        1 e:a 1 0 1 gcra 1 0.5 0 0
    expect_error "gcra negative burst" "burst" 1 e:a 1 0 1 gcra 1 1000 -1 0
    expect_error "gcra non-numeric burst" "burst" \
        1 e:a 1 0 1 gcra 1 1000 x 0
    expect_error "gcra burst too long" "at most" \
        1 e:a 1 0 1 gcra 1 1000000 999999999999 0
    expect_error "fixed window unknown unit" "unit" \
        1 e:a 1 0 1 fixed_window 5 week 0 0
    expect_error "fixed window unit in capitals" "unit" \
        1 e:a 1 0 1 fixed_window 5 Minute 0 0
    expect_error "fixed window seconds as unit" "unit" \
        1 e:a 1 0 1 fixed_window 5 60 0 0
    expect_error "fixed window p3 not 0" "p3 must be 0" \
        1 e:a 1 0 1 fixed_window 5 day 1 0
    expect_error "shadow not 0 or 1" "shadow" 1 e:a 1 0 1 token_bucket 5 1 0 2
    expect_error "shadow empty" "shadow" 1 e:a 1 0 1 token_bucket 5 1 0 ''
    expect_error "missing parameter" "5 arguments" \
        1 e:a 1 0 1 sliding_window 3 10 0
    expect_error "v1 layout" "5 arguments" 1 e:a 1 0 1 sliding_window 3 10
    expect_error "extra argument" "5 arguments" \
        1 e:a 1 0 1 sliding_window 3 10 0 0 x
    expect_error "two extra arguments" "5 arguments" \
        1 e:a 1 0 1 $tb __now_us=1 __now_us=1
    expect_error "hook without digits" "5 arguments" 1 e:a 1 0 1 $tb __now_us=
    expect_error "hook not an integer" "5 arguments" \
        1 e:a 1 0 1 $tb __now_us=1.5
    expect_error "negative hook" "5 arguments" 1 e:a 1 0 1 $tb __now_us=-1
    expect_error "hook too late" "5 arguments" \
        1 e:a 1 0 1 $tb __now_us=9999999999999999
    expect_error "hook not last" "5 arguments" \
        2 e:a e:b 1 0 2 $tb __now_us=1 $tb
    expect_error "no limits" "number of limits" 0 1 0 0
    expect_error "more than 8 limits" "number of limits" \
        9 k1 k2 k3 k4 k5 k6 k7 k8 k9 1 0 9 \
        $tb $tb $tb $tb $tb $tb $tb $tb $tb
    expect_eq "keys written by bad calls" "$(cli EXISTS e:a e:b e:c k1 k9)" 0
}

# The number syntax is exactly the documented one: decimal digits (and for
# the rate one '.'), at most 15 characters. Everything else that Lua's
# tonumber() would take (signs, spaces, hex, exponents, inf, nan, a
# fraction where an integer is due) is rejected.
# shellcheck disable=SC2086 # $tb is a list of arguments.
test_number_syntax() {
    tb="token_bucket 5 1 0 0"
    for v in +1 -1 ' 1' '1 ' 0x1 1e0 1E0 1.0 1. .5 inf nan '' \
        0000000000000001; do
        expect_error "cost '$v'" "cost must be an integer >= 1" \
            1 e:n "$v" 0 1 $tb
    done
    for v in 0 00 9 09 +1 1.0 1e0 ' 1' 0000000000000001; do
        expect_error "n '$v'" "number of limits must be 1..8" \
            1 e:n 1 0 "$v" $tb
    done
    for v in +5 -5 ' 5' '5 ' 0x5 5e0 5.0 5. 0 0000000000000000 \
        1000000000000000 inf; do
        expect_error "capacity '$v'" \
            "limit 1: capacity must be a positive integer" \
            1 e:n 1 0 1 token_bucket "$v" 1 0 0
        expect_error "window '$v'" \
            "limit 1: window must be a positive integer" \
            1 e:n 1 0 1 sliding_window 3 "$v" 0 0
        expect_error "period '$v'" \
            "limit 1: period must be a positive integer" \
            1 e:n 1 0 1 gcra 1 "$v" 0 0
        expect_error "fixed window limit '$v'" \
            "limit 1: limit must be a positive integer" \
            1 e:n 1 0 1 fixed_window "$v" day 0 0
    done
    for v in -0 +0 ' 0' 0x0 0e0 0.0 '' 0000000000000000; do
        expect_error "burst '$v'" "limit 1: burst must be an integer >= 0" \
            1 e:n 1 0 1 gcra 1 1000 "$v" 0
    done
    for v in 1e3 1E3 +1 -1 0x1p3 0x10 ' 1' '1 ' 0 0.0 00.00 . '' 1.5. \
        1..5 inf nan 0.00000000000001 1234567890123456; do
        expect_error "rate '$v'" "limit 1: rate must be a positive decimal" \
            1 e:n 1 0 1 token_bucket 5 "$v" 0 0
    done
    for v in __now_us=+1 __now_us=1e3 __now_us=0x10 '__now_us=1 ' \
        ' __now_us=1' __now_us=4503599627370497 __now_us=00000000000000001; do
        expect_error "hook '$v'" "5 arguments" 1 e:n 1 0 1 $tb "$v"
    done
    expect_eq "keys written by bad numbers" "$(cli EXISTS e:n)" 0

    # Leading zeros are digits like any other.
    r=$(check 1 num:cost 001 0 01 token_bucket 005 20 0 0 "__now_us=$N")
    expect_eq "cost 001, n 01, capacity 005" "$r" "1 $NMS 1 5 4 50 0"
    r=$(check 1 num:burst 1 0 1 gcra 10 1000000 00 0 "__now_us=$N")
    expect_eq "burst 00" "$r" "1 $NMS 1 1 0 100 0"
    r=$(check 8 num:1 num:2 num:3 num:4 num:5 num:6 num:7 num:8 1 1 08 \
        $tb $tb $tb $tb $tb $tb $tb $tb "__now_us=$N")
    expect_eq "n 08" "$(echo "$r" | awk '{ print NF }')" 42
    # 15 digits are still exact.
    r=$(check 1 num:big 1 1 1 token_bucket 999999999999999 1 0 0 \
        "__now_us=$N")
    expect_eq "15-digit capacity" "$r" \
        "1 $NMS 1 999999999999999 999999999999998 1000 0"
    # Rates: the time to refill one token is 1000 / rate ms, rounded up.
    for pair in .5:2000 5.:200 007.5:134 0.5:2000; do
        rate=${pair%%:*}
        r=$(check 1 "num:rate:$rate" 1 0 1 token_bucket 1 "$rate" 0 0 \
            "__now_us=$N")
        expect_eq "rate $rate" "$r" "1 $NMS 1 1 0 ${pair#*:} 0"
    done
    # The smallest rate with 15 characters: the reset and the TTL are
    # capped at 10^15 ms.
    t0=$(redis_now_ms)
    r=$(check 1 num:slow 1 0 1 token_bucket 1 0.0000000000001 0 0 \
        "__now_us=$N")
    expect_eq "slowest rate" "$r" "1 $NMS 1 1 0 1000000000000000 0"
    expect_pttl num:slow 1000000000000000 "$t0"
    # The hook: leading zeros, and the latest time it takes, 2^52 µs.
    r=$(check 1 num:hook0 1 0 1 fixed_window 3 minute 0 0 __now_us=00001)
    expect_eq "hook 00001" "$r" "1 0 1 3 2 60000 0"
    r=$(check 1 num:hook1 1 0 1 gcra 1 1000 0 0 __now_us=4503599627370496)
    expect_eq "hook 2^52" "$r" "1 4503599627370 1 1 0 1 0"
    expect_eq "state at 2^52" "$(state num:hook1)" "tat 4503599627371496"
}

# A state edited by hand is read as before and written back as '%.0f'
# formats it (half to even); NaN tokens count as none, a NaN window index
# as the current window.
test_state_edited_by_hand() {
    # The 2 s window holding N has the index 917697610.
    cli HSET hand:sw win 917697610 cur 1.5 prev -0 >/dev/null
    r=$(check 1 hand:sw 1 0 1 sliding_window 10 2 0 0 "__now_us=$N")
    expect_eq "sliding window reply" "$r" "1 $NMS 1 10 7 4000 0"
    expect_eq "sliding window state" "$(state hand:sw)" \
        "win 917697610 cur 2 prev -0"
    cli HSET hand:sw2 win nan cur 2 prev 1 >/dev/null
    r=$(check 1 hand:sw2 1 0 1 sliding_window 10 2 0 0 "__now_us=$N")
    expect_eq "NaN window reply" "$r" "1 $NMS 1 10 6 4000 0"
    expect_eq "NaN window state" "$(state hand:sw2)" \
        "win 917697610 cur 3 prev 1"
    cli HSET hand:fw win 1835395200 count 0.5 >/dev/null
    r=$(check 1 hand:fw 1 0 1 fixed_window 10 minute 0 0 "__now_us=$N")
    expect_eq "fixed window reply" "$r" "1 $NMS 1 10 8 40000 0"
    expect_eq "fixed window state" "$(state hand:fw)" \
        "win 1835395200 count 2"
    cli HSET hand:g tat "$N.5" >/dev/null
    r=$(check 1 hand:g 1 0 1 gcra 10 1000000 2 0 "__now_us=$N")
    expect_eq "gcra reply" "$r" "1 $NMS 1 3 1 101 0"
    expect_eq "gcra state" "$(state hand:g)" "tat $((N + 100000))"
    cli HSET hand:tb tokens nan ts "$N" >/dev/null
    r=$(check 1 hand:tb 1 0 1 token_bucket 5 20 0 0 "__now_us=$N")
    expect_eq "NaN tokens reply" "$r" "0 $NMS 0 5 0 250 50"
    expect_eq "NaN tokens state" "$(state hand:tb)" "tokens nan ts $N"
}

run "token bucket: capacity 5 allows 5 then denies" test_tb_allows_capacity
run "token bucket: refill allows again after retry_after_ms" test_tb_refill
run "token bucket: refill stops at capacity" test_tb_refill_cap
run "token bucket: TTL is set and bounded" test_tb_ttl
run "token bucket: cost above capacity never passes, writes nothing" \
    test_tb_cost_above_capacity
run "token bucket: refill edge at exact times" test_tb_exact
run "a denial consumes nothing" test_tb_denial_charges_nothing
run "peek writes nothing" test_peek_writes_nothing
run "sliding window: limit 3 allows 3 then denies" test_sw_limit
run "sliding window: after rollover the previous window weighs in" \
    test_sw_rollover
run "sliding window: weighting at half the window" test_sw_weighting
run "sliding window: cost above limit never passes" test_sw_cost_above_limit
run "sliding window: window edge at exact times" test_sw_exact
run "gcra: burst 2 lets 3 through, then denies" test_gcra_burst
run "gcra: refills one emission interval at a time" test_gcra_refill
run "gcra: burst 0 spaces requests strictly" test_gcra_burst_zero
run "gcra: emission interval rounds up" test_gcra_interval_rounding
run "gcra: period under a millisecond" test_gcra_sub_ms
run "gcra: a cost above 1 moves the TAT by cost intervals" test_gcra_cost
run "gcra: cost above burst + 1 never passes, writes nothing" \
    test_gcra_cost_above_burst
run "gcra: Redis TIME and retry_after_ms" test_gcra_real_time
run "fixed window: limit 3 per minute, denial charges nothing" \
    test_fw_limit
run "fixed window: cost above limit never passes, writes nothing" \
    test_fw_cost_above_limit
run "fixed window: minute edge" test_fw_edge_minute
run "fixed window: hour edge" test_fw_edge_hour
run "fixed window: day edge" test_fw_edge_day
run "fixed window: month edge, Feb 29 2028 to Mar 1" test_fw_edge_month
run "fixed window: month lengths" test_fw_month_lengths
run "fixed window: Redis TIME and retry_after_ms" test_fw_real_time
run "all-or-nothing across a token bucket and a sliding window" \
    test_all_or_nothing
run "all-or-nothing across four algorithms" test_all_or_nothing_four
run "shadow: a denying shadow limit does not block and is not charged" \
    test_shadow_denies
run "shadow: a denial by an enforced limit charges no shadow limit" \
    test_shadow_enforced_denies
run "shadow: only shadow limits never deny" test_shadow_only
run "shadow: a peek writes nothing" test_shadow_peek
run "sent twice: a charging call is replayed with peek 2, charged once" \
    test_replay_allowed
run "sent twice: only peek 2 replays; with nothing stored it decides" \
    test_replay_only_when_sent_again
run "sent twice: a denial is decided again, stores nothing" \
    test_replay_denial
run "sent twice: a peek stores nothing" test_replay_peek
run "sent twice: several limits and -1 come back exactly" \
    test_replay_several
run "sent twice: with Redis TIME, the first reply comes back" \
    test_replay_real_time
run "bad arguments give ERR ratelimit: errors" test_argument_errors
run "numbers: exactly digits (and one . in a rate), at most 15" \
    test_number_syntax
run "a state edited by hand is read and rewritten as before" \
    test_state_edited_by_hand

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
