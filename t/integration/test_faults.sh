#!/bin/sh
# Faults against the real stack: Redis losing its scripts, Redis stopped
# and started again, PostgreSQL stopped and started again, and a worker
# killed.  The service must fail closed and fast (503 with Retry-After),
# recover by itself without a restart, and keep serving what it has cached.
# Run by t/integration/run.sh after test_api.sh.
# shellcheck disable=SC2317 # helpers called through `check`

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

# all_status CODE: every request of the last batch answered CODE.
all_status() {
    as_total=$(wc -l <"$T_TMP/statuses" | tr -d ' ')
    [ "$as_total" -gt 0 ] && [ "$(count_status "$1")" = "$as_total" ]
}

statuses() {
    tr '\n' ' ' <"$T_TMP/statuses"
}

# ready_200: /health/ready answers 200.
ready_200() {
    req GET /health/ready
    [ "$STATUS" = 200 ]
}

lighttpd_before=$(lighttpd_pid)
pids_before=$(fcgi_pids | tr '\n' ' ')
check "$WORKERS workers and a master run ($pids_before)" \
    eq "$(count_lines "$(fcgi_pids)")" $((WORKERS + 1))

# ---------------------------------------------------------------- SCRIPT FLUSH

rcli SCRIPT FLUSH >/dev/null
body=$(check_body /faults/flush "$(uniq_name flush)")
par_checks 16 4 "$DEMO_KEY" "$body"
check "after SCRIPT FLUSH: checks answer 200 ($(statuses))" all_status 200
before=$(script_calls)
seq_checks 10 "$DEMO_KEY" "$body"
after=$(script_calls)
check "after SCRIPT FLUSH: still 200" all_status 200
check "after SCRIPT FLUSH: scripts are cached again (10 checks, $((after - before)) script calls)" \
    le $((after - before)) $((10 + WORKERS))

# ---------------------------------------------------------------- Redis restart

# Every worker holds a connection; Redis restarts while they are idle.  The
# first command on each old connection meets a closed socket: the worker
# must reconnect and retry at once, not answer 503.
par_checks 16 4 "$DEMO_KEY" "$body"
stack restart-redis >/dev/null
check "Redis restarted" eq "$(rcli ping 2>/dev/null)" PONG
par_checks 24 6 "$DEMO_KEY" "$body"
check "after a Redis restart: no 503, all 200 ($(statuses))" all_status 200

# ---------------------------------------------------------------- Redis down

stack stop-redis >/dev/null
check "Redis is stopped" ne "$(rcli ping 2>/dev/null)" PONG

body=$(check_body /faults/redis "$(uniq_name redis)")
codes=
times=
slow=0
no_retry=0
errors=
i=0
while [ "$i" -lt 10 ]; do
    check_req "$DEMO_KEY" "$body"
    codes="$codes $STATUS"
    times="$times $TIME"
    lt_num "$TIME" 0.1 || slow=$((slow + 1))
    ge "$(header Retry-After)" 1 || no_retry=$((no_retry + 1))
    errors="$errors $(json_field error)"
    i=$((i + 1))
done
check "Redis down: 10 checks answer 503 ($codes)" \
    eq "$codes" " 503 503 503 503 503 503 503 503 503 503"
check "Redis down: error service_unavailable" \
    eq "$errors" "$(printf ' %s' service_unavailable service_unavailable \
        service_unavailable service_unavailable service_unavailable \
        service_unavailable service_unavailable service_unavailable \
        service_unavailable service_unavailable)"
check "Redis down: every 503 has Retry-After >= 1" eq "$no_retry" 0
check "Redis down: every 503 in under 100 ms ($times)" eq "$slow" 0

req GET /health/ready
check "Redis down: /health/ready is 503" eq "$STATUS" 503
check "Redis down: /health/ready gives a reason" ne "$BODY" ""

# ---------------------------------------------------------------- Redis back

stack start-redis >/dev/null
check "Redis is started again" eq "$(rcli ping 2>/dev/null)" PONG
check "Redis back: a check answers 200 within 5 s" \
    retry 50 check_200 "$DEMO_KEY" "$body"
check "Redis back: /health/ready 200 within 5 s" retry 50 ready_200
# Every worker gets back on its own: after the back-off, all checks pass.
sleep 1
par_checks 24 6 "$DEMO_KEY" "$body"
check "Redis back: all checks answer 200 ($(statuses))" all_status 200
check "Redis back: lighttpd was not restarted" \
    eq "$(lighttpd_pid)" "$lighttpd_before"
check "Redis back: no ratelimit-fcgi process was restarted" \
    eq "$(fcgi_pids | tr '\n' ' ')" "$pids_before"

# ---------------------------------------------------------------- PostgreSQL

new_key=$(new_key demo-corp)
check "a new key for demo-corp is made" matches "$new_key" '^rl_'
body=$(check_body /faults/pg "$(uniq_name pg)")
# Every worker learns the demo key (and the tenant's rules).
par_checks 40 8 "$DEMO_KEY" "$body"
check "before PostgreSQL stops: the demo key works" all_status 200

stack stop-pg >/dev/null
check "PostgreSQL is stopped" \
    ne "$(psql_q 'SELECT 1' 2>/dev/null)" 1

par_checks 16 4 "$DEMO_KEY" "$body"
check "PostgreSQL down: a cached key still gets 200 ($(statuses))" \
    all_status 200
# Past the caches' 2 s TTL, what a worker knows is still used while
# PostgreSQL cannot be asked.
sleep 2.5
par_checks 16 4 "$DEMO_KEY" "$body"
check "PostgreSQL down: the cached key still gets 200 past its TTL ($(statuses))" \
    all_status 200
check_req "$new_key" "$body"
check "PostgreSQL down: a never-seen key gets 503" eq "$STATUS" 503
check "PostgreSQL down: error service_unavailable" \
    eq "$(json_field error)" service_unavailable
check "PostgreSQL down: Retry-After >= 1" ge "$(header Retry-After)" 1

stack start-pg >/dev/null
check "PostgreSQL is started again" eq "$(psql_q 'SELECT 1')" 1
check "PostgreSQL back: the new key works within 10 s" \
    retry 100 check_200 "$new_key" "$body"
par_checks 16 4 "$new_key" "$body"
check "PostgreSQL back: the new key works on every try ($(statuses))" \
    all_status 200

# ---------------------------------------------------------------- worker kill

master=$(fcgi_master_pid)
workers=$(fcgi_worker_pids)
check "$WORKERS workers before the kill ($(printf '%s' "$workers" | tr '\n' ' '))" \
    eq "$(count_lines "$workers")" "$WORKERS"
victim=$(printf '%s\n' "$workers" | head -n 1)
if [ -n "$victim" ]; then
    kill -KILL "$victim"
fi
body=$(check_body /faults/kill "$(uniq_name kill)")
par_checks 20 4 "$DEMO_KEY" "$body"
check "worker killed: requests still succeed ($(statuses))" all_status 200

check "worker killed: the master respawns it within 5 s" \
    retry 50 replaced "$victim" "$WORKERS"
check "worker killed: the master is the same" eq "$(fcgi_master_pid)" "$master"
par_checks 20 4 "$DEMO_KEY" "$body"
check "worker killed: requests succeed after the respawn" all_status 200

finish
