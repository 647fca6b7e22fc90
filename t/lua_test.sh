#!/bin/sh
# Tests for the Redis check script (lua/token_bucket.lua, lua/sliding_window.lua
# and lua/check.lua, concatenated as the build does). Starts a private,
# throw-away redis-server on 127.0.0.1:${LUA_TEST_REDIS_PORT:-16399}, loads the
# script and runs it with EVALSHA through redis-cli. Prints one line per test
# and "N passed, M failed"; exits non-zero if any test failed.
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

SCRIPT=$(cat lua/token_bucket.lua lua/sliding_window.lua lua/check.lua) ||
    bail "cannot read lua/*.lua"
SHA=$(cli SCRIPT LOAD "$SCRIPT")
if ! echo "$SHA" | grep -qx '[0-9a-f]\{40\}'; then
    bail "SCRIPT LOAD failed: $SHA"
fi

# --- Helpers -----------------------------------------------------------------

# check NKEYS KEY... COST PEEK N ALGO P1 P2 ...: runs the script once and
# prints the reply on one line, fields separated by spaces.
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

# Redis time in milliseconds.
redis_now_ms() {
    cli TIME | awk 'NR == 1 { s = $1 } NR == 2 { printf "%.0f\n", s * 1000 + int($1 / 1000) }'
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

TB5="1 0 1 token_bucket 5 20"

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
    expect_eq "6th call allowed" "$(field "$r" 1)" 0
    retry=$(field "$r" 7)
    expect_range "retry_after_ms" "$retry" 1 50
    # Waiting retry_after_ms (plus a few ms for redis-cli to start) is enough.
    sleep "$(calc "($retry + 3) / 1000")"
    # shellcheck disable=SC2086
    r=$(check 1 tb:refill $TB5)
    expect_eq "allowed after retry_after_ms" "$(field "$r" 1)" 1
    expect_range "remaining after refill" "$(field "$r" 5)" 0 1
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
    # shellcheck disable=SC2086
    r=$(check 1 tb:ttl $TB5)
    expect_eq "allowed" "$(field "$r" 1)" 1
    # From empty to full: 5 / 20 s = 250 ms, plus 1 s.
    expect_range "PTTL" "$(cli PTTL tb:ttl)" 1000 1250
}

test_tb_cost_above_capacity() {
    # shellcheck disable=SC2086
    check 1 tb:big $TB5 >/dev/null
    before=$(cli HGETALL tb:big | paste -sd ' ' -)
    r=$(check 1 tb:big 6 0 1 token_bucket 5 20)
    after=$(cli HGETALL tb:big | paste -sd ' ' -)
    expect_eq "allowed" "$(field "$r" 1)" 0
    expect_eq "allowed_1" "$(field "$r" 3)" 0
    expect_eq "retry_after_ms" "$(field "$r" 7)" -1
    expect_eq "state" "$after" "$before"
    r=$(check 1 tb:big-new 6 0 1 token_bucket 5 20)
    expect_eq "retry_after_ms on a new key" "$(field "$r" 7)" -1
    expect_eq "new key created" "$(cli EXISTS tb:big-new)" 0
}

test_tb_denial_charges_nothing() {
    # At 0.001 tokens/s nothing refills noticeably during the test.
    out=$(check_times 2 1 tb:deny 1 0 1 token_bucket 2 0.001)
    expect_eq "2nd call remaining" "$(field "$(nth "$out" 2)" 5)" 0
    before=$(cli HGETALL tb:deny | paste -sd ' ' -)
    r=$(check 1 tb:deny 1 0 1 token_bucket 2 0.001)
    after=$(cli HGETALL tb:deny | paste -sd ' ' -)
    expect_eq "allowed" "$(field "$r" 1)" 0
    expect_eq "state" "$after" "$before"
    # One token at 0.001/s takes 1000 s.
    expect_range "retry_after_ms" "$(field "$r" 7)" 999000 1000000
}

test_peek_writes_nothing() {
    r=$(check 1 peek:tb 1 1 1 token_bucket 5 0.001)
    expect_eq "peek allowed" "$(field "$r" 1)" 1
    expect_eq "peek remaining" "$(field "$r" 5)" 4
    expect_eq "key after peek on a new key" "$(cli EXISTS peek:tb)" 0
    r=$(check 1 peek:sw 1 1 1 sliding_window 3 10)
    expect_eq "window peek remaining" "$(field "$r" 5)" 2
    expect_eq "window key after peek" "$(cli EXISTS peek:sw)" 0

    check 1 peek:tb 1 0 1 token_bucket 5 0.001 >/dev/null
    before=$(cli HGETALL peek:tb | paste -sd ' ' -)
    r=$(check 1 peek:tb 1 1 1 token_bucket 5 0.001)
    after=$(cli HGETALL peek:tb | paste -sd ' ' -)
    expect_eq "peek on existing key remaining" "$(field "$r" 5)" 3
    expect_eq "state after peek" "$after" "$before"
    # A peek that would be denied writes nothing either.
    r=$(check 1 peek:tb 5 1 1 token_bucket 5 0.001)
    expect_eq "denied peek allowed" "$(field "$r" 1)" 0
    expect_eq "state after denied peek" \
        "$(cli HGETALL peek:tb | paste -sd ' ' -)" "$before"
}

# --- Sliding window ----------------------------------------------------------

SW3="1 0 1 sliding_window 3 2"

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
    # Two windows plus one second.
    expect_range "PTTL" "$(cli PTTL sw:a)" 4000 5000
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
    r=$(check 1 sw:big 4 0 1 sliding_window 3 2)
    expect_eq "allowed" "$(field "$r" 1)" 0
    expect_eq "retry_after_ms" "$(field "$r" 7)" -1
    expect_eq "key created" "$(cli EXISTS sw:big)" 0
}

# --- Several limits ----------------------------------------------------------

test_all_or_nothing() {
    args="2 aon:tb aon:sw 1 0 2 token_bucket 10 0.001 sliding_window 3 60"
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

# --- Arguments ---------------------------------------------------------------

# expect_error WHAT ARGS...: the script answers with an error for ARGS.
expect_error() {
    what=$1
    shift
    got=$(check "$@")
    case $got in
        "ERR ratelimit: "*) ;;
        *) fail "$what: got '$got', want an 'ERR ratelimit: ' error" ;;
    esac
}

test_argument_errors() {
    expect_error "n does not match keys" 1 e:a 1 0 2 token_bucket 5 1
    expect_error "more keys than n" 2 e:a e:b 1 0 1 token_bucket 5 1
    expect_error "non-numeric cost" 1 e:a x 0 1 token_bucket 5 1
    expect_error "zero cost" 1 e:a 0 0 1 token_bucket 5 1
    expect_error "fractional cost" 1 e:a 1.5 0 1 token_bucket 5 1
    expect_error "bad peek flag" 1 e:a 1 2 1 token_bucket 5 1
    expect_error "unknown algorithm" 1 e:a 1 0 1 leaky_bucket 5 1
    expect_error "zero capacity" 1 e:a 1 0 1 token_bucket 0 1
    expect_error "negative rate" 1 e:a 1 0 1 token_bucket 5 -1
    expect_error "zero rate" 1 e:a 1 0 1 token_bucket 5 0.0
    expect_error "non-numeric rate" 1 e:a 1 0 1 token_bucket 5 abc
    expect_error "zero limit" 1 e:a 1 0 1 sliding_window 0 10
    expect_error "fractional window" 1 e:a 1 0 1 sliding_window 3 1.5
    expect_error "missing parameter" 1 e:a 1 0 1 sliding_window 3
    expect_error "extra argument" 1 e:a 1 0 1 sliding_window 3 10 x
    expect_error "no limits" 0 1 0 0
    expect_error "more than 8 limits" 9 k1 k2 k3 k4 k5 k6 k7 k8 k9 1 0 9 \
        token_bucket 1 1 token_bucket 1 1 token_bucket 1 1 \
        token_bucket 1 1 token_bucket 1 1 token_bucket 1 1 \
        token_bucket 1 1 token_bucket 1 1 token_bucket 1 1
    expect_eq "keys written by bad calls" "$(cli EXISTS e:a e:b k1 k9)" 0
}

run "token bucket: capacity 5 allows 5 then denies" test_tb_allows_capacity
run "token bucket: refill allows again after retry_after_ms" test_tb_refill
run "token bucket: refill stops at capacity" test_tb_refill_cap
run "token bucket: TTL is set and bounded" test_tb_ttl
run "token bucket: cost above capacity never passes, writes nothing" \
    test_tb_cost_above_capacity
run "a denial consumes nothing" test_tb_denial_charges_nothing
run "peek writes nothing" test_peek_writes_nothing
run "sliding window: limit 3 allows 3 then denies" test_sw_limit
run "sliding window: after rollover the previous window weighs in" \
    test_sw_rollover
run "sliding window: weighting at half the window" test_sw_weighting
run "sliding window: cost above limit never passes" test_sw_cost_above_limit
run "all-or-nothing across a token bucket and a sliding window" \
    test_all_or_nothing
run "bad arguments give ERR ratelimit: errors" test_argument_errors

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
