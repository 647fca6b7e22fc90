#!/bin/sh
# test_endpoints.sh -- /metrics, /status and the configuration endpoints.
#
# The counters are the pool's (shared memory), so they must move by what
# this file sends whichever worker answers; the configuration endpoints
# show a key its own tenant and nothing else.
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

# jget EXPR: a value of the last body by a Python subscript, e.g. '["a"][0]'.
jget() {
    python3 -c '
import json, sys
try:
    v = eval("d" + sys.argv[1], {"d": json.loads(sys.argv[2])})
except Exception:
    print("<absent>")
    sys.exit(1)
print(v if isinstance(v, str) else json.dumps(v))' "$1" "$BODY"
}

metric() {
    req GET /metrics
    printf '%s\n' "$BODY" | awk -v m="$1" '$1 == m { print $2 }'
}

tenant=$(uniq_name ep)
new_tenant "$tenant"
key=$(new_key "$tenant")
new_sw_rule "$tenant" /ep/limited 2 3600
SUBJECT=$(uniq_name s)

# ---------------------------------------------------------------- /metrics

req GET /metrics
check "/metrics: 200" eq "$STATUS" 200
check "/metrics: Prometheus text" contains "$(header Content-Type)" text/plain
check "/metrics: has HELP and TYPE lines" \
    contains "$BODY" "# TYPE ratelimit_checks_total counter"
allowed0=$(metric 'ratelimit_checks_total{result="allowed"}')
denied0=$(metric 'ratelimit_checks_total{result="denied"}')
norule0=$(metric 'ratelimit_checks_total{result="no_rule"}')
seq_checks 5 "$key" "$(check_body /ep/limited "$SUBJECT")"
check_req "$key" "$(check_body /ep/none "$SUBJECT")"
allowed1=$(metric 'ratelimit_checks_total{result="allowed"}')
denied1=$(metric 'ratelimit_checks_total{result="denied"}')
norule1=$(metric 'ratelimit_checks_total{result="no_rule"}')
check "/metrics: allowed counted across the pool ($allowed0 -> $allowed1)" \
    eq $((allowed1 - allowed0)) 2
check "/metrics: denied counted ($denied0 -> $denied1)" \
    eq $((denied1 - denied0)) 3
check "/metrics: no-rule counted ($norule0 -> $norule1)" \
    eq $((norule1 - norule0)) 1
workers=$(metric ratelimit_workers)
check "/metrics: ratelimit_workers is the pool size ($workers)" \
    eq "$workers" "$WORKERS"
req POST /metrics ""
check "/metrics: POST is 405" eq "$STATUS" 405

# ---------------------------------------------------------------- /status

req GET /status
check "/status: 200" eq "$STATUS" 200
check "/status: php-fpm fields" matches "$BODY" "^pool: +ratelimit-fcgi"
check "/status: total processes" \
    matches "$BODY" "total processes: +$WORKERS"
req GET '/status?json'
check "/status?json: JSON" eq "$(jget '["total processes"]')" "$WORKERS"
acc=$(jget '["accepted conn"]')
check "/status?json: accepted conn counts requests ($acc)" ge "$acc" 7

# ---------------------------------------------------------------- config

tid=$(psql_q "SELECT id FROM tenants WHERE name = '$tenant'")
req GET /v1/config/tenants - "X-API-Key: $key"
check "config: tenants 200" eq "$STATUS" 200
check "config: only the caller's tenant" \
    eq "$(jget '["tenants"][0]["id"]')/$(jget '["tenants"].__len__()')" \
    "$tid/1"
req GET "/v1/config/tenants/$tid/rules" - "X-API-Key: $key"
check "config: own rules 200" eq "$STATUS" 200
check "config: the rule and its limit" \
    eq "$(jget '["rules"][0]["route_pattern"]') $(jget '["rules"][0]["limits"][0]["limit"]')" \
    "/ep/limited 2"
demo=$(psql_q "SELECT id FROM tenants WHERE name = 'demo-corp'")
req GET "/v1/config/tenants/$demo/rules" - "X-API-Key: $key"
check "config: another tenant's rules are 403" eq "$STATUS" 403
req GET /v1/config/tenants
check "config: no key is 401" eq "$STATUS" 401
req GET "/v1/config/tenants/$tid/other" - "X-API-Key: $key"
check "config: an unknown path below it is 404" eq "$STATUS" 404

# Who may read /status and /metrics: status_allow and metrics_allow (by
# default loopback only), or an admin key from anywhere.
serve_dir ratelimit-endpoints
PA=$((PORT + 97))
private_app sa "$PA" "status_allow=10.0.0.0/8" "metrics_allow=" ||
    fail "a pool with status_allow and metrics_allow starts"
code_of() {
    curl -s -o "$T_TMP/sa.body" -w '%{http_code}' "$@"
}
check "status_allow = 10.0.0.0/8: /status from 127.0.0.1 is 403" \
    eq "$(code_of "http://127.0.0.1:$PA/status")" 403
check "and the body says which key to set" \
    contains "$(cat "$T_TMP/sa.body")" status_allow
check "an admin key may read /status from anywhere" \
    eq "$(code_of -H "X-API-Key: $DEMO_ADMIN_KEY" "http://127.0.0.1:$PA/status")" 200
check "a check key may not (403)" \
    eq "$(code_of -H "X-API-Key: $key" "http://127.0.0.1:$PA/status")" 403
check "an unknown key gets 401" \
    eq "$(code_of -H "X-API-Key: rl_nope" "http://127.0.0.1:$PA/status")" 401
check "metrics_allow empty: /metrics only with an admin key (403, then 200)" \
    eq "$(code_of "http://127.0.0.1:$PA/metrics") $(code_of -H "X-API-Key: $DEMO_ADMIN_KEY" "http://127.0.0.1:$PA/metrics")" \
    "403 200"
check "the stack's defaults (loopback) let 127.0.0.1 read both" \
    eq "$(code_of "$BASE_URL/status") $(code_of "$BASE_URL/metrics")" "200 200"
stop_private

finish
