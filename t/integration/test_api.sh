#!/bin/sh
# The check API against the real stack (lighttpd -> ratelimit-fcgi ->
# PostgreSQL and Redis): every status of the API's table, the demo rules,
# exactness under concurrency, the Redis and PostgreSQL budgets of a check,
# and that revoking a key or suspending a tenant takes effect.  Run by
# t/integration/run.sh, which starts the stack with short caches
# (key_cache_ttl = 2) and PostgreSQL's log_statement = all.

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

# expect_error NAME STATUS CODE: the last response is that error.
expect_error() {
    check "$1: status $2" eq "$STATUS" "$2"
    check "$1: error $3" eq "$(json_field error)" "$3"
    check "$1: has a message" matches "$(json_field message)" '^[^<].*'
    check "$1: JSON content type" contains "$(header Content-Type)" \
        application/json
}

SUBJECT=$(uniq_name subj)

# ---------------------------------------------------------------- health

req GET /health/live
check "GET /health/live is 200" eq "$STATUS" 200
req GET /health/ready
check "GET /health/ready is 200" eq "$STATUS" 200

# ---------------------------------------------------------------- routing

req GET /no/such/path
check "unknown path: 404" eq "$STATUS" 404
check "unknown path: error not_found" eq "$(json_field error)" not_found

req POST /v1/nope "$(check_body /a)" "X-API-Key: $DEMO_KEY" \
    "Content-Type: application/json"
check "POST to an unknown path: 404" eq "$STATUS" 404

req GET /v1/check - "X-API-Key: $DEMO_KEY"
check "GET /v1/check: 405" eq "$STATUS" 405
check "GET /v1/check: error method_not_allowed" \
    eq "$(json_field error)" method_not_allowed
check "GET /v1/check: Allow names POST" contains "$(header Allow)" POST

# ---------------------------------------------------------------- auth

req POST /v1/check "$(check_body /api/orders/1 "$SUBJECT")" \
    "Content-Type: application/json"
expect_error "no key" 401 unauthorized

check_req rl_no_such_key_0123456789 "$(check_body /api/orders/1 "$SUBJECT")"
expect_error "unknown key" 401 unauthorized

req POST /v1/check "$(check_body /api/orders/1 "$SUBJECT")" \
    "Authorization: Bearer rl_no_such_key_0123456789" \
    "Content-Type: application/json"
expect_error "unknown Bearer key" 401 unauthorized

req POST /v1/check "$(check_body /api/orders/1 "$SUBJECT")" \
    "Authorization: Bearer $DEMO_KEY" "Content-Type: application/json"
check "Authorization: Bearer KEY works" eq "$STATUS" 200
check "Bearer: allowed" eq "$(json_field allowed)" true

check_req "$DEMO_ADMIN_KEY" "$(check_body /api/orders/1 "$SUBJECT")"
expect_error "admin key" 403 admin_key_cannot_check

# ---------------------------------------------------------------- validation

check_req "$DEMO_KEY" '{"route":'
expect_error "truncated JSON" 400 invalid_request

check_req "$DEMO_KEY" 'route=/a'
expect_error "not JSON" 400 invalid_request

check_req "$DEMO_KEY" '["/a"]'
expect_error "JSON array" 400 invalid_request

check_req "$DEMO_KEY" ''
expect_error "empty body" 400 invalid_request

check_req "$DEMO_KEY" "{\"subject\":\"$SUBJECT\"}"
expect_error "route missing" 400 invalid_request

check_req "$DEMO_KEY" "$(check_body "" "$SUBJECT")"
expect_error "empty route" 400 invalid_request

check_req "$DEMO_KEY" "$(check_body "   " "$SUBJECT")"
expect_error "blank route" 400 invalid_request

route512=/$(printf '%511s' '' | tr ' ' r)
route513=/$(printf '%512s' '' | tr ' ' r)
check_req "$DEMO_KEY" "$(check_body "$route513" "$SUBJECT")"
expect_error "route of 513 bytes" 400 invalid_request

check_req "$DEMO_KEY" "$(check_body "$route512" "$SUBJECT")"
check "route of 512 bytes: 200" eq "$STATUS" 200

check_req "$DEMO_KEY" "$(check_body "  $route512  " "$SUBJECT")"
check "route of 512 bytes plus blanks: 200 (trimmed)" eq "$STATUS" 200

subject256=$(printf '%256s' '' | tr ' ' s)
subject257=$(printf '%257s' '' | tr ' ' s)
check_req "$DEMO_KEY" "$(check_body /api/orders/1 "$subject257")"
expect_error "subject of 257 bytes" 400 invalid_request

check_req "$DEMO_KEY" "$(check_body /api/orders/1 "$subject256")"
check "subject of 256 bytes: 200" eq "$STATUS" 200

check_req "$DEMO_KEY" "$(check_body /api/orders/1 "$SUBJECT" 1000001)"
expect_error "cost 1000001" 400 invalid_request

# A cost of exactly the maximum is valid; the demo "*" rule (1000 an hour)
# can never grant it: 400 cost_exceeds_limit naming the limit, which no
# client retries (not a 429 that a client would wait on).
check_req "$DEMO_KEY" "$(check_body /misc/1 "$SUBJECT" 1000000)"
expect_error "cost 1000000 on a limit of 1000" 400 cost_exceeds_limit
check "cost 1000000: the body names the limit and its largest cost" \
    eq "$(json_field limit) $(json_field max_cost) $(json_field cost)" \
    "default 1000 1000000"
check "cost 1000000: and no Retry-After header" eq "$(header Retry-After)" ""
check_req "$DEMO_KEY" "$(check_body /misc/1 "$(uniq_name whole)" 1000)"
check "cost 1000, the whole limit, on a fresh subject: 200" eq "$STATUS" 200

# A valid JSON body of exactly 9000 bytes (max_body_size is 8192).
head="{\"route\":\"/a\",\"subject\":\"$SUBJECT\",\"pad\":\""
pad=$(printf "%$((9000 - ${#head} - 2))s" '' | tr ' ' p)
big="$head$pad\"}"
check "the big body is 9000 bytes" eq "${#big}" 9000
check_req "$DEMO_KEY" "$big"
expect_error "body of 9000 bytes" 413 invalid_request

# ---------------------------------------------------------------- allow/deny

# The demo token bucket: capacity 10, refilling 2 a second.  Eleven checks
# from one curl process take a few milliseconds, so the 11th is denied.
subj=$(uniq_name pay)
# The clock is read before the batch: the checks below take a while on a
# loaded machine, and reset_at is relative to the first request.
now=$(date +%s)
seq_checks 11 "$DEMO_KEY" "$(check_body /api/payments/1 "$subj")"
i=1
statuses=
remainings=
while [ "$i" -le 11 ]; do
    statuses="$statuses $(batch_status "$i")"
    remainings="$remainings $(json_field remaining "$(batch_body "$i")")"
    i=$((i + 1))
done
check "payments: 10 x 200 then 429 ($statuses)" \
    eq "$statuses" " 200 200 200 200 200 200 200 200 200 200 429"
check "payments: remaining counts 9..0 ($remainings)" \
    eq "$remainings" " 9 8 7 6 5 4 3 2 1 0 0"

first=$(batch_body 1)
check "allowed: body allowed true" eq "$(json_field allowed "$first")" true
check "allowed: limit 10" eq "$(json_field limit "$first")" 10
check "allowed: algorithm token_bucket" \
    eq "$(json_field algorithm "$first")" token_bucket
check "allowed: retry_after 0 is present" \
    eq "$(json_field retry_after "$first")" 0
reset_at=$(json_field reset_at "$first")
check "allowed: reset_at is unix seconds ($reset_at)" \
    ge "$reset_at" $((now - 5))
check "allowed: reset_at within an hour" le "$reset_at" $((now + 3600))
check "allowed: X-RateLimit-Limit 10" eq "$(batch_header 1 X-RateLimit-Limit)" 10
check "allowed: X-RateLimit-Remaining 9" \
    eq "$(batch_header 1 X-RateLimit-Remaining)" 9
reset=$(batch_header 1 X-RateLimit-Reset)
check "allowed: X-RateLimit-Reset is unix seconds ($reset)" \
    ge "$reset" $((now - 5))
check "allowed: X-RateLimit-Reset within an hour" le "$reset" $((now + 3600))
check "allowed: JSON content type" \
    contains "$(batch_header 1 Content-Type)" application/json

tenth=$(batch_body 10)
check "zero remaining is written as 0" matches "$tenth" '"remaining": *0[,}]'
check "zero remaining header is 0" \
    eq "$(batch_header 10 X-RateLimit-Remaining)" 0

denied=$(batch_body 11)
retry=$(batch_header 11 Retry-After)
check "denied: Retry-After >= 1 ($retry)" ge "$retry" 1
check "denied: body allowed false" eq "$(json_field allowed "$denied")" false
check "denied: body retry_after >= 1" \
    ge "$(json_field retry_after "$denied")" 1
check "denied: body remaining 0" eq "$(json_field remaining "$denied")" 0
check "denied: body limit 10" eq "$(json_field limit "$denied")" 10
check "denied: has reset_at" ge "$(json_field reset_at "$denied")" $((now - 5))
check "denied: algorithm token_bucket" \
    eq "$(json_field algorithm "$denied")" token_bucket
check "denied: X-RateLimit-Remaining 0" \
    eq "$(batch_header 11 X-RateLimit-Remaining)" 0

# ---------------------------------------------------------------- cost

# The demo /api/orders* rule: sliding window, 50 a minute.
subj=$(uniq_name cost)
check_req "$DEMO_KEY" "$(check_body /api/orders/7 "$subj")"
check "cost absent: 200" eq "$STATUS" 200
check "cost absent: charged 1 (remaining 49)" eq "$(json_field remaining)" 49
check "sliding window: algorithm" eq "$(json_field algorithm)" sliding_window
check "sliding window: limit 50" eq "$(json_field limit)" 50
# A cost that is not a whole number from 1 to 1000000 is refused, not
# counted as 1.
check_req "$DEMO_KEY" "$(check_body /api/orders/7 "$subj" 0)"
check "cost 0: 400 invalid_request" \
    eq "$STATUS $(json_field error)" "400 invalid_request"
check_req "$DEMO_KEY" "$(check_body /api/orders/7 "$subj" -3)"
check "cost -3: 400 invalid_request" \
    eq "$STATUS $(json_field error)" "400 invalid_request"
check_req "$DEMO_KEY" "$(check_body /api/orders/7 "$subj" 5)"
check "cost 5: charged 5, the refused costs nothing (remaining 44)" \
    eq "$(json_field remaining)" 44
check_req "$DEMO_KEY" "$(check_body /api/orders/7 "$subj" 45)"
check "cost over remaining: 429" eq "$STATUS" 429
check_req "$DEMO_KEY" "$(check_body /api/orders/7 "$subj")"
check "a denial charges nothing (remaining 43)" eq "$(json_field remaining)" 43

# ---------------------------------------------------------------- no rule

tenant=$(uniq_name norule)
new_tenant "$tenant"
key=$(new_key "$tenant")
new_sw_rule "$tenant" /x 5 60
check "tenant with only a /x rule: key created" matches "$key" '^rl_'
check_req "$key" "$(check_body /x "$SUBJECT")"
check "rule /x applies to /x" eq "$(json_field limit)" 5
before=$(script_calls)
check_req "$key" "$(check_body /y "$SUBJECT")"
after=$(script_calls)
check "no matching rule: 200" eq "$STATUS" 200
check "no matching rule: body {\"allowed\":true}" \
    json_equal "$BODY" '{"allowed":true}'
check "no matching rule: no Redis script call ($before -> $after)" \
    eq "$after" "$before"

# ---------------------------------------------------------------- exactness

tenant=$(uniq_name conc)
new_tenant "$tenant"
key=$(new_key "$tenant")
for run in 1 2; do
    route=/conc/$(uniq_name r)
    new_sw_rule "$tenant" "$route" 100 3600
    par_checks 500 50 "$key" "$(check_body "$route" "$(uniq_name s)")"
    ok=$(count_status 200)
    denied=$(count_status 429)
    check "500 concurrent checks, limit 100 (run $run): 100 allowed ($ok)" \
        eq "$ok" 100
    check "500 concurrent checks, limit 100 (run $run): 400 denied ($denied)" \
        eq "$denied" 400
    if [ "$denied" != 400 ]; then
        echo "    statuses: $(sort "$T_TMP/statuses" | uniq -c | tr '\n' ' ')"
        tail -n 5 "$VAR/ratelimit-fcgi.log" | sed 's/^/    log: /'
    fi
done

# ---------------------------------------------------------------- budgets

subj=$(uniq_name budget)
before=$(script_calls)
seq_checks 20 "$DEMO_KEY" "$(check_body /api/orders/budget "$subj")"
after=$(script_calls)
check "20 checks: all 200" eq "$(count_status 200)" 20
check "20 checks: exactly 20 script calls ($((after - before)))" \
    eq $((after - before)) 20

# Let every cached key and rule expire (the caches live 2 s here), warm
# all workers at once, then count PostgreSQL statements around 20 checks.
if [ -z "$(pg_log_files)" ]; then
    fail "the PostgreSQL log is found under $VAR"
else
    sleep 2.5
    subj=$(uniq_name warm)
    par_checks 60 12 "$DEMO_KEY" "$(check_body /misc/warm "$subj")"
    sleep 0.2
    before=$(pg_statements)
    seq_checks 20 "$DEMO_KEY" "$(check_body /misc/warm "$subj")"
    sleep 0.3
    after=$(pg_statements)
    check "warm checks: all 200" eq "$(count_status 200)" 20
    check "20 warm checks: no PostgreSQL statement ($before -> $after)" \
        eq "$after" "$before"
fi

# ---------------------------------------------------------------- revocation

tenant=$(uniq_name revoke)
new_tenant "$tenant"
new_sw_rule "$tenant" '*' 1000 3600
revoked=$(new_key "$tenant")
kept=$(new_key "$tenant")
never_used=$(new_key "$tenant")
suspended_tenant=$(uniq_name suspend)
new_tenant "$suspended_tenant"
new_sw_rule "$suspended_tenant" '*' 1000 3600
suspended_key=$(new_key "$suspended_tenant")

body=$(check_body /r "$SUBJECT")
par_checks 12 4 "$revoked" "$body"
check "key to be revoked works first" eq "$(count_status 200)" 12
par_checks 12 4 "$suspended_key" "$body"
check "key of the tenant to be suspended works first" \
    eq "$(count_status 200)" 12

revoke_key "$revoked"
revoke_key "$never_used"
ctl tenant suspend "$suspended_tenant" >/dev/null

check_req "$never_used" "$body"
expect_error "key revoked before its first use" 401 unauthorized

sleep 3
par_checks 8 4 "$revoked" "$body"
check "revoked key: 401 once key_cache_ttl has passed ($(tr '\n' ' ' <"$T_TMP/statuses"))" \
    eq "$(count_status 401)" 8
check_req "$revoked" "$body"
expect_error "revoked key" 401 unauthorized

par_checks 8 4 "$suspended_key" "$body"
check "suspended tenant: 403 once key_cache_ttl has passed ($(tr '\n' ' ' <"$T_TMP/statuses"))" \
    eq "$(count_status 403)" 8
check_req "$suspended_key" "$body"
expect_error "suspended tenant" 403 tenant_suspended

check_req "$kept" "$body"
check "another key of the same tenant still works" eq "$STATUS" 200

# ---------------------------------------------------------------- last use

# Every worker writes last_used_at of the keys it served, in one batch
# between requests, at most once a minute per key: 40 checks of a new key
# make at most one write per worker, and key list shows the time.
tenant=$(uniq_name used)
new_tenant "$tenant"
key=$(new_key "$tenant")
check "a new key was never used" \
    eq "$(ctl key list "$tenant" | awk 'NR == 2 { print $NF }')" never
before=$(pg_log_files | xargs cat | grep -c 'UPDATE api_keys SET last_used_at' || true)
seq_checks 40 "$key" "$(check_body /api/orders/1 "$(uniq_name u)")"
check "40 checks of the key answer 200 or 429 ($(count_status 200) + $(count_status 429))" \
    eq $(($(count_status 200) + $(count_status 429))) 40
# The batch goes out within a second, between requests.
stack_touch
used_at() {
    ctl key list "$tenant" | awk 'NR == 2 { print $(NF - 1), $NF }'
}
# shellcheck disable=SC2317 # called through retry
used_yet() {
    ! used_at | grep -q never
}
retry 50 used_yet
last=$(used_at)
check "key list shows when the key was last used ($last)" \
    matches "$last" '^20[0-9][0-9]-[01][0-9]-[0-3][0-9] [0-2][0-9]:[0-5][0-9]:[0-5][0-9]$'
after=$(pg_log_files | xargs cat | grep -c 'UPDATE api_keys SET last_used_at' || true)
check "at most one write per worker for 40 checks ($((after - before)))" \
    le $((after - before)) "$WORKERS"

# pg_locked SQL: notes where the service's log ends (LOG_FROM), runs SQL
# (a lock taken, then held while it sleeps) in a session of its own in the
# background (LOCKER) and gives it 0.3 s to take the lock.
pg_locked() {
    LOG_FROM=$(($(wc -l <"$VAR/ratelimit-fcgi.log") + 1))
    psql_q "$1" >/dev/null 2>&1 &
    LOCKER=$!
    sleep 0.3
}

# log_since_locked FILE: the service's log since pg_locked, into FILE.
log_since_locked() {
    tail -n +"$LOG_FROM" "$VAR/ratelimit-fcgi.log" >"$1"
}

# connection_kept WHAT FILE: FILE (log_since_locked) shows no worker
# dropping its PostgreSQL connection: no "WHAT: timed out", no reconnect
# and no new read of the key filter.
connection_kept() {
    check "no worker dropped its PostgreSQL connection ($(grep -c 'postgresql' "$2") lines about postgresql)" \
        eq "$(grep -c "$1: timed out\|postgresql: connected again\|key filter: " "$2")" 0
}

# A write of last_used_at that PostgreSQL cannot do at once (the key's row
# locked by another session for 2 s) is given up by PostgreSQL itself
# (statement_timeout, half of pg_query_timeout_ms): the worker keeps its
# connection, and so the pool keeps its key filter, and the key is written
# once the lock is gone.  (Before, the worker's own deadline dropped the
# connection, and its return marked the pool's filter incomplete: new keys
# were asked to come back, 503, until it was read again.)
tenant=$(uniq_name used-locked)
new_tenant "$tenant"
key=$(new_key "$tenant")
kid=$(key_id "$key")
pg_locked "BEGIN; SELECT id FROM api_keys WHERE id = $kid FOR UPDATE;
SELECT pg_sleep(2.5); COMMIT;"
seq_checks 20 "$key" "$(check_body /api/orders/1 "$(uniq_name u)")"
check "20 checks while the key's row is locked answer 200 or 429 ($(count_status 200) + $(count_status 429))" \
    eq $(($(count_status 200) + $(count_status 429))) 20
stack_touch
wait "$LOCKER"
retry 50 used_yet
check "the key's last use is written once the lock is gone ($(used_at))" \
    matches "$(used_at)" '^20[0-9][0-9]-'
log_since_locked "$T_TMP/locked.log"
check "the log says the write was given up and tried again" \
    grep -q 'last_used_at: not written within 250 ms' "$T_TMP/locked.log"
connection_kept last_used_at "$T_TMP/locked.log"

# statement_timeouts: the pool's ratelimit_postgresql_statement_timeouts_total.
statement_timeouts() {
    fetch "$BASE_URL/metrics"
    printf '%s\n' "$BODY" |
        awk '$1 == "ratelimit_postgresql_statement_timeouts_total" { print $2 }'
}

# A key lookup that PostgreSQL cannot answer in time (api_keys locked by
# another session for 1.5 s) is given up the same way: the check is
# answered 503 at once, the worker keeps its connection and the pool its
# key filter, and the key is served once the lock is gone.  (Before, the
# worker's deadline dropped the connection: 500 ms of 503s for every key
# it had not cached, then the filter read again by the whole pool.)
tenant=$(uniq_name slow-lookup)
new_tenant "$tenant"
key=$(new_key "$tenant")
body=$(check_body /api/orders/1 "$(uniq_name u)")
timeouts_before=$(statement_timeouts)
pg_locked "BEGIN; LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE;
SELECT pg_sleep(1.5); COMMIT;"
seq_checks 4 "$key" "$body"
check "4 checks of a new key while api_keys is locked answer 503 ($(tr '\n' ' ' <"$T_TMP/statuses"))" \
    eq "$(count_status 503)" 4
wait "$LOCKER"
check_req "$key" "$body"
check "the key is served once the lock is gone ($STATUS)" \
    matches "$STATUS" '^(200|429)$'
log_since_locked "$T_TMP/slow.log"
check "the log says PostgreSQL gave up the lookup and the connection was kept" \
    grep -q 'key lookup: not answered within 250 ms (statement_timeout), the connection kept' "$T_TMP/slow.log"
connection_kept 'key lookup' "$T_TMP/slow.log"
timeouts_after=$(statement_timeouts)
check "/metrics counts the 4 lookups PostgreSQL gave up ($timeouts_before -> $timeouts_after)" \
    ge $((timeouts_after - timeouts_before)) 4

finish
