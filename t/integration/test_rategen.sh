#!/bin/sh
# The benchmark's open-loop generator (bench/rategen.c, built as
# $BUILD/rategen) against a private pool behind lighttpd: it sends the
# number of requests its rate and duration make, counts statuses, numbers
# subjects with %n, refuses bad options, and, being open loop, keeps
# sending while the server stalls and counts the stall in the latency.
# Also the benchmark's wakelag ($BUILD/wakelag).

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack
serve_dir rl-rategen

RATEGEN=$BUILD/rategen
P_GEN=$((PORT + 141))

# field NAME: NAME's value in the RATE line of $D/gen.out.
field() {
    awk -v want="$1" '$1 == "RATE" {
        for (i = 2; i <= NF; i++)
            if (index($i, want "=") == 1)
                print substr($i, length(want) + 2)
    }' "$D/gen.out"
}

# gen ARGS...: runs rategen (bounded) with its output in $D/gen.out and
# $D/gen.err; GEN_RC is its exit status.
gen() {
    GEN_RC=0
    timeout 60 "$RATEGEN" "$@" >"$D/gen.out" 2>"$D/gen.err" || GEN_RC=$?
}

check "rategen is built" test -x "$RATEGEN"

# The benchmark's measure of how late the machine wakes a sleeper.
WAKE=$(timeout 20 "$BUILD/wakelag" 1) || WAKE="failed: $?"
check "wakelag 1: one WAKE line ($WAKE)" matches "$WAKE" \
    '^WAKE seconds=1 sleeps=[0-9]+ late_1ms=[0-9]+ late_2ms=[0-9]+ late_5ms=[0-9]+ max_late_us=[0-9]+$'
# At most 1000 sleeps of 1 ms fit in 1 s; a loaded test machine may wake
# late, but not for most of a second.
check "wakelag 1: 100 to 1000 sleeps" awk -v w="$WAKE" 'BEGIN {
    split(w, f, "[ =]"); exit !(f[5] >= 100 && f[5] <= 1000) }'
for bad in 0 61x 601 ""; do
    rc=0
    timeout 20 "$BUILD/wakelag" $bad >/dev/null 2>"$D/wake.err" || rc=$?
    check "wakelag '$bad': usage error (exit 2)" eq "$rc" 2
done
check "wakelag: the usage says what it takes" contains \
    "$(cat "$D/wake.err")" "usage: wakelag SECONDS"

gen -r 0 -d 1 "http://127.0.0.1:$P_GEN/"
check "a rate of 0 is refused (exit 2)" eq "$GEN_RC" 2
check "and says why" contains "$(cat "$D/gen.err")" "rategen:"
gen -r 10 -d 1 "https://127.0.0.1:$P_GEN/"
check "https is refused (exit 2)" eq "$GEN_RC" 2
gen -r 10 -d 1 "http://127.0.0.1:$P_GEN/"
check "nothing listening: exit 1" eq "$GEN_RC" 1

private_app gen "$P_GEN" workers=2 ||
    fail "rategen: the private application starts behind lighttpd"

SUBJ=$(uniq_name gen)
gen -r 200 -d 2 -H "X-API-Key: $DEMO_KEY" -H "Content-Type: application/json" \
    -b "{\"route\":\"/bench\",\"subject\":\"$SUBJ-%n\"}" \
    "http://127.0.0.1:$P_GEN/v1/check"
check "200/s for 2 s: exit 0" eq "$GEN_RC" 0
check "200/s for 2 s: 400 sent" eq "$(field sent)" 400
check "200/s for 2 s: 400 answered 200" eq "$(field ok)" 400
check "200/s for 2 s: no error" eq \
    "$(field status_errors)/$(field socket_errors)/$(field timeouts)" 0/0/0
check "200/s for 2 s: achieved 190-200/s" matches "$(field achieved)" \
    '^(19[0-9]|200)(\.[0-9]*)?$'
check "200/s for 2 s: 0 < p50 <= p99 <= max" awk -v a="$(field p50_us)" \
    -v b="$(field p99_us)" -v c="$(field max_us)" \
    'BEGIN { exit !(a > 0 && a <= b && b <= c) }'
# %n made a new subject of each request, numbered from 0: subjects 0 and
# 399 have been counted once, 400 never.
peek() {
    fetch "http://127.0.0.1:$P_GEN/v1/check" -X POST \
        -H "X-API-Key: $DEMO_KEY" -H "Content-Type: application/json" \
        --data-raw "{\"route\":\"/bench\",\"subject\":\"$SUBJ-$1\",\"peek\":true}"
    echo $(($(json_field limit) - $(json_field remaining)))
}
# (A peek's remaining is what would be left after it: limit - remaining is
# one more than what was counted.)
check "%n: subject 0 was counted once" eq "$(peek 0)" 2
check "%n: subject 399 was counted once" eq "$(peek 399)" 2
check "%n: subject 400 was never sent" eq "$(peek 400)" 1

gen -r 100 -d 1 "http://127.0.0.1:$P_GEN/no/such/path"
check "404s: counted as status errors" eq "$(field status_errors)" 100
check "404s: the summary counts them by status" contains \
    "$(cat "$D/gen.err")" "status 404: 100 times"
gen -r 100 -d 1 -e 404 "http://127.0.0.1:$P_GEN/no/such/path"
check "404s with -e 404: all ok" eq "$(field ok)/$(field status_errors)" 100/0
check "404s with -e 404: no status counted as unexpected" not_contains \
    "$(cat "$D/gen.err")" "times"

# Idle connections: 4 requests a second are 250 ms apart.  With -k 100
# every one finds its connection closed by rategen and opens a new one;
# with -k 0 one connection carries them all (lighttpd keeps it 5 s).
gen -r 4 -d 2 -k 100 "http://127.0.0.1:$P_GEN/health/live"
check "-k 100: every request on a new connection (opened $(field opened))" \
    ge "$(field opened)" 8
check "-k 100: and none lost" eq "$(field ok)" 8
gen -r 4 -d 2 -k 0 "http://127.0.0.1:$P_GEN/health/live"
check "-k 0: one connection for all" eq "$(field opened)" 1
check "-k 0: and none lost" eq "$(field ok)" 8
gen -r 4 -d 1 -k 600001 "http://127.0.0.1:$P_GEN/health/live"
check "-k over 600000 is refused (exit 2)" eq "$GEN_RC" 2

# Open loop: lighttpd is stopped for 400 ms in the middle of a run.  The
# requests due meanwhile are still sent on time (the connections and the
# kernel take them), and their latency, counted from when they were due,
# shows the stall; the others are fast.
timeout 60 "$RATEGEN" -r 500 -d 2 -o "$D/trace" -H "X-API-Key: $DEMO_KEY" \
    -H "Content-Type: application/json" \
    -b "{\"route\":\"/bench\",\"subject\":\"$SUBJ-stall\"}" \
    "http://127.0.0.1:$P_GEN/v1/check" >"$D/gen.out" 2>"$D/gen.err" &
gen_pid=$!
sleep 0.8
kill -STOP "$LT_PID"
sleep 0.4
kill -CONT "$LT_PID"
wait "$gen_pid" || true
check "stall: all 1000 sent on schedule and answered" eq \
    "$(field sent)/$(field ok)" 1000/1000
check "stall: the largest latency shows it (>= 300 ms: $(field max_us) us)" \
    ge "$(field max_us)" 300000
check "stall: the median does not ($(field p50_us) us)" le \
    "$(field p50_us)" 100000
# -o: one line per request, "due_us latency_us status lag_us"; the slow
# ones are those due while lighttpd was stopped (0.8 to 1.2 s into the run,
# give or take the sleeps), and only those; and they were slow in lighttpd,
# not in rategen, which sent them on time.
check "-o: a line for each of the 1000 requests" eq "$(wc -l <"$D/trace")" 1000
# shellcheck disable=SC2016  # awk's own $1, not the shell's
check "-o: every one due within the 2 s and answered 200" awk '
    $1 < 0 || $1 >= 2000000 || $3 != 200 || $4 > $2 { bad = 1 }
    END { exit bad }' "$D/trace"
# shellcheck disable=SC2016  # awk's own $1, not the shell's
check "-o: those slower than 100 ms were due in 0.5-1.5 s, sent on time" awk '
    $2 > 100000 { n++; if ($1 < 500000 || $1 > 1500000) bad = 1 }
    $2 > 100000 && $4 > 50000 { bad = 1 }
    END { exit bad || n < 100 }' "$D/trace"
gen -r 10 -d 1 -o "$D/no/such/dir/trace" "http://127.0.0.1:$P_GEN/health/live"
check "-o to a file that cannot be made: exit 1" eq "$GEN_RC" 1
check "-o to a file that cannot be made: says which" contains \
    "$(cat "$D/gen.err")" "no/such/dir/trace"
stop_private
