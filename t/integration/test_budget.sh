#!/bin/sh
# The counter budget against the real stack: a tenant whose checks each
# bring a new subject makes a new Redis key every time, and without a
# bound fills Redis for every tenant (with maxmemory set, every check of
# every tenant then gets 503).  Here a tenant past its budget gets 429
# counter_budget_exceeded for new subjects only, its old subjects go on,
# ratelimitctl's budget takes effect at once, and a spray of 20,000 new
# subjects with Redis maxmemory set leaves another tenant's checks at 200
# (its p99 before and during the spray is printed, not asserted, with its
# p99 during as many checks of one old subject, the same load without new
# keys, for comparison).  Run by t/integration/run.sh (TESTS=budget).
# shellcheck disable=SC2317 # helpers called through `check`

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

LOADGEN=$ROOT/t/lib/loadgen.py
# The spray, the budget of the tenant that sprays, and the room left in
# Redis above what it uses when the spray starts: 20,000 new counters
# (about 230 bytes each, 4.6 MB) do not fit in it, 2,000 do.
SPRAY=20000
SPRAY_BUDGET=2000
HEADROOM=$((2 * 1024 * 1024))
# The spray's pace: on a 2-core machine an unpaced spray (about 4,000
# checks a second) takes both cores from everything else, the steady
# tenant's checks included, whatever Redis does; BUDGET_SPRAY_RATE=0 sends
# it unpaced all the same.
SPRAY_RATE=${BUDGET_SPRAY_RATE:-1000}

# The spray goes through a pool of its own, on the stack's Redis, whose
# Redis command timeout is a second: on a loaded 2-core machine the
# stack's 50 ms gives the odd 503 that has nothing to do with Redis memory.
BP=$((PORT + 161))

SAVED_MAXMEMORY=$(rcli CONFIG GET maxmemory | sed -n 2p)
SAVED_POLICY=$(rcli CONFIG GET maxmemory-policy | sed -n 2p)
restore_memory() {
    rcli CONFIG SET maxmemory "${SAVED_MAXMEMORY:-0}" >/dev/null 2>&1
    rcli CONFIG SET maxmemory-policy "${SAVED_POLICY:-noeviction}" \
        >/dev/null 2>&1
}
serve_dir ratelimit-budget
trap 'restore_memory; end_pids $PIDS; rm -rf "$D" "$T_TMP"' EXIT

# new_tenant_id NAME: adds the tenant and prints its id.
new_tenant_id() {
    ctl tenant add "$1" | awk '$1 == "id" { print $2; exit }'
}

# lg OUT KEY BODY [ARG...]: t/lib/loadgen.py run against the spray's pool;
# prints its summary.
lg() {
    lg_out=$1
    lg_key=$2
    lg_body=$3
    shift 3
    python3 "$LOADGEN" run --port "$BP" --key "$lg_key" --body "$lg_body" \
        --out "$lg_out" "$@"
}

# stat FILE NAME [ARG...]: one field of loadgen's stats of FILE.
stat() {
    st_file=$1
    st_name=$2
    shift 2
    python3 "$LOADGEN" stats "$st_file" "$@" | python3 -c \
        'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$st_name"
}

# counters TENANT_ID: how many Redis keys the tenant has: its counters,
# its reply slots (one per worker) and its budget's two keys (a SCAN of a
# keyspace of some tens of thousands).
counters() {
    rcli --scan --pattern "rl:{$1}:*" | wc -l | tr -d ' '
}

# steady_load OUT KEY BODY DONE: the steady tenant's load beside the
# spray's (200 checks a second on 4 connections) until the file DONE
# exists, at most 72 s (beyond the spray's own bound of 60 + 5 s): loadgen
# runs of 5 s, each started 4 s after the one before, so that one is always
# sending whatever a run takes to start, and none is left running for long
# once the spray is over (one run of a fixed 40 s went on for 20 s after
# it).  OUT gets the lines of every run.  Run it in the background.
steady_load() {
    sl_i=0
    while [ "$sl_i" -lt 18 ] && [ ! -e "$4" ]; do
        lg "$1.$sl_i" "$2" "$3" --rate 200 --requests 1000 --duration 5 \
            --concurrency 4 >/dev/null &
        sl_next=$(($(now_ms) + 4000))
        while [ ! -e "$4" ] && [ "$(now_ms)" -lt "$sl_next" ]; do
            sleep 0.1
        done
        sl_i=$((sl_i + 1))
    done
    wait
    cat "$1".[0-9]* >"$1"
}

used_memory() {
    rcli INFO memory | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }'
}

refused_total() {
    fetch "$BASE_URL/metrics"
    printf '%s\n' "$BODY" |
        awk '$1 == "ratelimit_budget_refusals_total" { print $2 }'
}

# ------------------------------------------------- a budget of 3 counters

small=$(uniq_name budget-small)
other=$(uniq_name budget-other)
new_tenant "$small"
new_tenant "$other"
new_sw_rule "$small" '/api/*' 100 60
new_sw_rule "$other" '/api/*' 100 60
small_key=$(new_key "$small")
other_key=$(new_key "$other")
ctl tenant budget "$small" 3 >/dev/null
avoid_edge 3600 30
# shellcheck disable=SC2034 # read inside an eval below
refused_before=$(refused_total)

for s in s1 s2 s3; do
    check_req "$small_key" "$(check_body /api/x "$s")"
    check "a new subject within the budget is allowed ($s)" eq "$STATUS" 200
done
check_req "$small_key" "$(check_body /api/x s4)"
check "the 4th new subject is refused: 429" eq "$STATUS" 429
check "with the error counter_budget_exceeded" \
    eq "$(json_field error)" counter_budget_exceeded
retry_after=$(header Retry-After)
# shellcheck disable=SC2016 # expanded by the eval, when the check runs
check "and Retry-After until the hour ends ($retry_after s)" \
    eval 'ge "$retry_after" 1 && le "$retry_after" 3600'
check_req "$small_key" "$(check_body /api/x s1)"
check "an old subject goes on" eq "$STATUS" 200
check "and is counted as before" eq "$(json_field remaining)" 98
check_req "$small_key" '{"route":"/api/x","subject":"s5","peek":true}'
check "a peek of a new subject is answered (it creates nothing)" \
    eq "$STATUS" 200
for s in s1 s2 s3 s4; do
    check_req "$other_key" "$(check_body /api/x "$s")"
    check "another tenant's new subjects are allowed ($s)" eq "$STATUS" 200
done
# shellcheck disable=SC2016 # expanded by the eval, when the check runs
check "/metrics counts the refusal" \
    eval 'ge "$(refused_total)" "$((${refused_before:-0} + 1))"'
ctl tenant budget "$small" 4 >/dev/null
check "a larger budget takes effect at once: the 4th subject passes" \
    retry 30 check_200 "$small_key" "$(check_body /api/x s4)"
check_req "$small_key" "$(check_body /api/x s6)"
check "and the 5th is refused" eq "$STATUS" 429

# ---------------------------------- a spray with Redis maxmemory set

private_app budget "$BP" redis_command_timeout_ms=1000 ||
    fail "the spray's pool starts" "$(show_logs "$D")"

spray=$(uniq_name budget-spray)
steady=$(uniq_name budget-steady)
busy=$(uniq_name budget-busy)
spray_id=$(new_tenant_id "$spray")
new_tenant "$steady"
new_tenant "$busy"
# A day-long sliding window: counters that live (up to two days) long after
# the spray, as in the report.
ctl rule add "$spray" --route '/api/*' --algorithm sliding_window \
    --limit 100 --window 86400 >/dev/null
ctl rule add "$steady" --route '/api/*' --algorithm sliding_window \
    --limit 100000000 --window 86400 >/dev/null
ctl rule add "$busy" --route '/api/*' --algorithm sliding_window \
    --limit 100000000 --window 86400 >/dev/null
spray_key=$(new_key "$spray")
steady_key=$(new_key "$steady")
busy_key=$(new_key "$busy")
ctl tenant budget "$spray" "$SPRAY_BUDGET" >/dev/null
steady_body=$(check_body /api/x steady-user)
spray_body=$(check_body /api/x spray)

lg "$T_TMP/before" "$steady_key" "$steady_body" --rate 200 \
    --requests 1000 --duration 20 --concurrency 4 >/dev/null
check "before the spray, the steady tenant's checks are all 200" \
    eq "$(stat "$T_TMP/before" s200)" 1000

# The same load as the spray's, on one old subject: what the machine does
# to the steady tenant's p99 without a new key.
t_busy=$(now_ms)
steady_load "$T_TMP/busy-steady" "$steady_key" "$steady_body" \
    "$T_TMP/busy.done" &
steady_pid=$!
sleep 1
lg "$T_TMP/busy" "$busy_key" "$(check_body /api/x busy-user)" \
    --requests "$SPRAY" --rate "$SPRAY_RATE" --duration 60 \
    --concurrency 8 >/dev/null
t_busy_end=$(now_ms)
: >"$T_TMP/busy.done"
wait "$steady_pid"
p99_busy=$(stat "$T_TMP/busy-steady" p99_ms --from "$t_busy" \
    --to "$t_busy_end")

rcli CONFIG SET maxmemory-policy noeviction >/dev/null
limit=$(($(used_memory) + HEADROOM))
rcli CONFIG SET maxmemory "$limit" >/dev/null
echo "    maxmemory $limit bytes ($HEADROOM above what Redis used)"

t_spray=$(now_ms)
steady_load "$T_TMP/during" "$steady_key" "$steady_body" \
    "$T_TMP/during.done" &
steady_pid=$!
sleep 1
spray_out=$(lg "$T_TMP/spray" "$spray_key" "$spray_body" \
    --new-subjects "spray-$$" --requests "$SPRAY" --rate "$SPRAY_RATE" \
    --duration 60 --concurrency 8)
t_end=$(now_ms)
: >"$T_TMP/during.done"
wait "$steady_pid"
echo "    spray: $spray_out"

sprayed=$(stat "$T_TMP/spray" requests)
spray_200=$(stat "$T_TMP/spray" s200)
spray_429=$(stat "$T_TMP/spray" s429)
spray_503=$(stat "$T_TMP/spray" s503)
during=$(stat "$T_TMP/during" requests --from "$t_spray" --to "$t_end")
during_200=$(stat "$T_TMP/during" s200 --from "$t_spray" --to "$t_end")
p99_before=$(stat "$T_TMP/before" p99_ms)
p99_during=$(stat "$T_TMP/during" p99_ms --from "$t_spray" --to "$t_end")
echo "    spraying tenant: $sprayed checks, $spray_200 x 200, $spray_429 x 429, $spray_503 x 503"
echo "    steady tenant during the spray: $during checks, $during_200 x 200"
echo "    steady tenant p99: ${p99_before} ms before, ${p99_during} ms during the spray (${p99_busy} ms during as many checks of one old subject)"
echo "    Redis: $(used_memory) bytes used of $limit"

check "the spray was sent ($sprayed of $SPRAY)" eq "$sprayed" "$SPRAY"
# shellcheck disable=SC2016 # expanded by the eval, when the check runs
check "the steady tenant's checks during the spray are all 200 ($during_200 of $during)" \
    eval '[ "$during" -gt 0 ] && [ "$during_200" = "$during" ]'
check "the spraying tenant got no 503 ($spray_503)" eq "$spray_503" 0
check "it created about its budget, not more ($spray_200 allowed; budget $SPRAY_BUDGET)" \
    le "$spray_200" $((SPRAY_BUDGET + SPRAY_BUDGET / 50 + 8))
check "and was refused the rest ($spray_429)" \
    eq "$((spray_200 + spray_429))" "$sprayed"
spray_keys=$(counters "$spray_id")
# shellcheck disable=SC2016 # expanded by the eval, when the check runs
check "its keys in Redis are bounded by its budget ($spray_keys)" \
    eval 'ge "$spray_keys" "$spray_200" &&
        le "$spray_keys" $((SPRAY_BUDGET + SPRAY_BUDGET / 50 + 8 + WORKERS + 2))'
check "Redis stayed under maxmemory" le "$(used_memory)" "$limit"
lg "$T_TMP/after" "$steady_key" "$(check_body /api/x steady-new)" \
    --requests 200 --concurrency 4 >/dev/null
check "after it, the steady tenant's checks (a new subject too) are 200" \
    eq "$(stat "$T_TMP/after" s200)" 200
restore_memory
stop_private

fault_row "a tenant sprays $SPRAY new subjects (budget $SPRAY_BUDGET) with Redis maxmemory set: another tenant's checks (p99 ${p99_before} ms before, ${p99_during} ms during; ${p99_busy} ms under as many checks of an old subject)" \
    "$during" "$((during - during_200))" -

finish
