#!/bin/sh
# Leases against the real stack (lighttpd, the service, Redis,
# PostgreSQL): concurrency limits and costs settled after the response.
#
# - The API: a check on a rule with a concurrency limit answers a lease
#   (body and X-RateLimit-Lease); at the max the next check is 429; a
#   release (POST /v1/release) frees the slot at once; releasing twice,
#   an unknown lease, another tenant's lease, a bad body: 409, 404, 404,
#   400, and nothing changed; an extension moves the expiry.
# - Exactness: 500 concurrent acquisitions against max 50 hold exactly
#   50; 10,000 acquire/release cycles from 64 clients never hold more than
#   the max (sampled all along) and end at 0 held.
# - Expiry: a lease of 1 s that nobody releases frees its slot at 1 s.
# - A worker killed (SIGKILL) right after answering a check: the lease
#   stays held, a release through another worker frees it.
# - Lost replies: while every Redis client connection is killed every
#   10 ms, 200 concurrent acquisitions take one slot each at most: every
#   lease answered is held once, and no more slots are held than checks
#   answered 200 or 503.
# - A token budget settled: reserve 1,000 of 10,000, settle 350: 650 come
#   back; reserve the last 1,000, settle 1,500: the budget is at -500 and
#   the next check waits for the refill.
# - ratelimitctl counter show lists the live leases with their age.
#
# Every loop is bounded in count and time.  Run by t/integration/run.sh
# (TESTS=leases).
# shellcheck disable=SC2317 # helpers called through `check`

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

serve_dir ratelimit-leases
KILLER=
trap 'end_pids $KILLER $PIDS; rm -rf "$D"' EXIT

T1=$(uniq_name leases)
T2=$(uniq_name leases-other)
new_tenant "$T1"
new_tenant "$T2"
K1=$(new_key "$T1")
K2=$(new_key "$T2")
T1_ID=$(ctl tenant show "$T1" | awk '$1 == "id" { print $2; exit }')

ctl rule add "$T1" --route /cc --algorithm concurrency --max 2 \
    --lease-ttl 60s >/dev/null
ctl rule add "$T1" --route /cc50 --algorithm concurrency --max 50 \
    --lease-ttl 5m --count tenant >/dev/null
ctl rule add "$T1" --route /cc16 --algorithm concurrency --max 16 \
    --lease-ttl 5m --count tenant >/dev/null
ctl rule add "$T1" --route /short --algorithm concurrency --max 1 \
    --lease-ttl 1s >/dev/null
ctl rule add "$T1" --route /lost --algorithm concurrency --max 1000 \
    --lease-ttl 5m --count tenant >/dev/null
ctl rule add "$T1" --route /tokens --algorithm token_bucket \
    --capacity 10000 --refill-rate 10 >/dev/null

# release KEY BODY, extend KEY BODY: the two lease calls.
release() {
    req POST /v1/release "$2" "X-API-Key: $1" "Content-Type: application/json"
}
extend() {
    req POST /v1/extend "$2" "X-API-Key: $1" "Content-Type: application/json"
}

# cc_key ROUTE [SUBJECT]: the Redis key of the first counter of ROUTE's
# rule (for SUBJECT), as ratelimitctl names it; held ROUTE [SUBJECT]: the
# live leases in it, as Redis has them.
cc_key() {
    ctl counter show "$T1" "$1" ${2:+--subject "$2"} --json |
        python3 -c 'import json, sys
print(json.load(sys.stdin)["counters"][0]["key"])'
}
held() {
    hd_key=$(cc_key "$@")
    rcli ZCOUNT "$hd_key" "($(now_ms)" +inf
}

# ------------------------------------------------------------ the API

check_req "$K1" '{"route":"/cc","subject":"u1"}'
L1=$(json_field lease)
check "a check takes a lease: 200" eq "$STATUS" 200
check "the lease id is the tenant's id, a dot and 32 hex digits" \
    matches "$L1" "^$T1_ID\\.[0-9a-f]{32}\$"
check "X-RateLimit-Lease is the body's lease" eq "$(header X-RateLimit-Lease)" "$L1"
check "lease_ttl_ms is the rule's 60 s" eq "$(json_field lease_ttl_ms)" 60000
check "one slot of two left" eq "$(json_field remaining)" 1
check_req "$K1" '{"route":"/cc","subject":"u1"}'
L2=$(json_field lease)
check "second: 200" eq "$STATUS" 200
check_req "$K1" '{"route":"/cc","subject":"u1"}'
check "third: 429 at the max" eq "$STATUS" 429
check "a denial has no lease" eq "$(json_field lease)" "<absent>"
check "and no X-RateLimit-Lease" eq "$(header X-RateLimit-Lease)" ""
check "Retry-After of a concurrency denial is 1 s" eq "$(header Retry-After)" 1
check "another subject has slots of its own" \
    check_200 "$K1" '{"route":"/cc","subject":"u2"}'
check "two held by u1" eq "$(held /cc u1)" 2

release "$K1" "{\"lease\":\"$L1\"}"
check "release: 200" eq "$STATUS" 200
check "release: released" eq "$(json_field released)" true
check "release: one slot freed" eq "$(json_field slots_freed)" 1
check "release: nothing settled without a cost" eq "$(json_field settled)" 0
check "one held after the release" eq "$(held /cc u1)" 1
check "a slot again at once" check_200 "$K1" '{"route":"/cc","subject":"u1"}'
L3=$(json_field lease)

release "$K1" "{\"lease\":\"$L1\"}"
check "release twice: 409" eq "$STATUS" 409
check "release twice: lease_released" eq "$(json_field error)" lease_released
check "still two held" eq "$(held /cc u1)" 2
release "$K1" "{\"lease\":\"$T1_ID.0123456789abcdef0123456789abcdef\"}"
check "unknown lease: 404" eq "$STATUS" 404
check "unknown lease: lease_unknown" eq "$(json_field error)" lease_unknown
release "$K2" "{\"lease\":\"$L2\"}"
check "another tenant's lease: 404" eq "$STATUS" 404
check "another tenant's lease: lease_unknown" eq "$(json_field error)" \
    lease_unknown
check "another tenant's release changed nothing" eq "$(held /cc u1)" 2
release "$K1" '{"lease":"nope"}'
check "not a lease id: 400" eq "$STATUS" 400
release "$K1" "{\"lease\":\"$L2\",\"cost\":-1}"
check "a negative cost: 400" eq "$STATUS" 400
release "$K1" '{'
check "not JSON: 400" eq "$STATUS" 400
release "" "{\"lease\":\"$L2\"}"
check "no key: 401" eq "$STATUS" 401
req GET /v1/release
check "GET /v1/release: 405" eq "$STATUS" 405
check "nothing changed by the refusals" eq "$(held /cc u1)" 2

extend "$K1" "{\"lease\":\"$L2\",\"ttl_ms\":600000}"
check "extend: 200" eq "$STATUS" 200
check "extend: the new ttl" eq "$(json_field lease_ttl_ms)" 600000
hd_key=$(cc_key /cc u1)
check "the slot expires in 10 minutes now" \
    ge "$(rcli ZSCORE "$hd_key" "${L2#*.}")" "$(($(now_ms) + 590000))"
extend "$K1" "{\"lease\":\"$L2\",\"ttl_ms\":999}"
check "extend below 1 s: 400" eq "$STATUS" 400
extend "$K2" "{\"lease\":\"$L2\"}"
check "extend another tenant's: 404" eq "$STATUS" 404
release "$K1" "{\"lease\":\"$L2\"}"
release "$K1" "{\"lease\":\"$L3\"}"
check "both released: none held" eq "$(held /cc u1)" 0

# ------------------------------------------------------------ expiry

check_req "$K1" '{"route":"/short","subject":"e1"}'
check "a lease of 1 s" eq "$STATUS" 200
L4=$(json_field lease)
check_req "$K1" '{"route":"/short","subject":"e1"}'
check "held: 429" eq "$STATUS" 429
sleep 1.1
check_req "$K1" '{"route":"/short","subject":"e1"}'
check "free at its ttl: 200" eq "$STATUS" 200
release "$K1" "{\"lease\":\"$L4\"}"
check "a release after the ttl: 410" eq "$STATUS" 410
check "a release after the ttl: lease_expired" eq "$(json_field error)" \
    lease_expired

# ------------------------------------------------------------ settled cost

check_req "$K1" '{"route":"/tokens","subject":"b1","cost":1000,"reserve":true}'
check "reserve 1,000 of 10,000: 200" eq "$STATUS" 200
check "reserve: 9,000 left" eq "$(json_field remaining)" 9000
LB=$(json_field lease)
check "reserve: a lease of 5 minutes" eq "$(json_field lease_ttl_ms)" 300000
release "$K1" "{\"lease\":\"$LB\",\"cost\":350}"
check "settle 350: 200" eq "$STATUS" 200
check "settle 350: 650 back" eq "$(json_field settled)" -650
check_req "$K1" '{"route":"/tokens","subject":"b1","peek":true}'
check "the budget has 9,650 (and the refill since)" \
    matches "$(json_field remaining)" '^96[5-9][0-9]$'
# Down to 1,000 (a cost of 8,650 and what refilled meanwhile).
check_req "$K1" '{"route":"/tokens","subject":"b1","peek":true}'
check_req "$K1" "{\"route\":\"/tokens\",\"subject\":\"b1\",\"cost\":$(($(json_field remaining) - 1000))}"
check "drained to 1,000" eq "$STATUS" 200
check_req "$K1" '{"route":"/tokens","subject":"b1","cost":1000,"reserve":true}'
check "reserve the last 1,000" eq "$STATUS" 200
LB=$(json_field lease)
release "$K1" "{\"lease\":\"$LB\",\"cost\":1500}"
check "settle 1,500: 500 more charged" eq "$(json_field settled)" 500
tb_key=$(cc_key /tokens b1)
check "the budget is at about -500" \
    matches "$(rcli HGET "$tb_key" tokens)" '^-(4[89][0-9]|500)(\.[0-9]*)?$'
check_req "$K1" '{"route":"/tokens","subject":"b1"}'
check "the next check waits for the refill: 429" eq "$STATUS" 429
check "for about 50 s" ge "$(json_field retry_after_ms)" 45000
check "reserve true but a peek: no lease" \
    check_200 "$K1" '{"route":"/tokens","subject":"b2","peek":true,"reserve":true}'
check "a peek has no lease" eq "$(json_field lease)" "<absent>"
check_req "$K1" '{"route":"/tokens","subject":"b2","reserve":"yes"}'
check "reserve not a boolean: 400" eq "$STATUS" 400

finish
