#!/bin/sh
# test_observe.sh -- what an operator sees: /status in php-fpm's fields
# and its four formats (with full and history), /metrics as promtool
# checks it and its new series moving with the requests made here, the
# access log (json and logfmt, with the web server's request id), the
# bounded denial log, the slow log, log files reopened on SIGUSR1, and
# workers' exits counted by cause.
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

OB=$((PORT + 121))

metric() {
    printf '%s\n' "$METRICS" | awk -v m="$1" '$1 == m { print $2; f = 1 }
        END { if (!f) print 0 }'
}

get_metrics() {
    METRICS=$(curl -s -m 5 "$1/metrics")
}

tenant=$(uniq_name obs)
new_tenant "$tenant"
key=$(new_key "$tenant")
new_sw_rule "$tenant" /obs/limited 3 3600
rule=$(ctl rule list "$tenant" --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["rules"][0]["id"])')
SUBJECT=$(uniq_name s)

# ------------------------------------------------------------ /status

fields="pool|process manager|start time|start since|accepted conn|listen queue|max listen queue|listen queue len|idle processes|active processes|total processes|max active processes|max children reached|slow requests"
req GET /status
missing=$(printf '%s\n' "$fields" | tr '|' '\n' | while read -r f; do
    printf '%s\n' "$BODY" | grep -q "^$f: " || printf '%s; ' "$f"
done)
check "/status (text): all 14 of php-fpm's pool fields [$missing]" \
    eq "$missing" ""
check "/status (text): no worker entries without full" \
    not_contains "$BODY" "pid:"
req GET '/status?full'
check "/status?full: one entry per worker" \
    eq "$(printf '%s\n' "$BODY" | grep -c '^pid: ')" "$WORKERS"
check "/status?full: each with state, requests, request URI" \
    eq "$(printf '%s\n' "$BODY" | grep -c '^request URI: ')" "$WORKERS"
req GET '/status?json'
check "/status?json: application/json" \
    contains "$(header Content-Type)" application/json
check "/status?json: every field" eq "$(jq_py \
    "sorted(set('$fields'.split('|')) - set(d))" "$BODY")" "[]"
check "/status?json: no processes without full" \
    eq "$(jq_py "'processes' in d" "$BODY")" false
for q in 'json&full' 'full&json' 'json=1&full=1'; do
    req GET "/status?$q"
    check "/status?$q: a process entry per worker, with pid and state" \
        eq "$(jq_py "sum(1 for p in d['processes'] if p['pid'] > 0 and p['state'])" \
        "$BODY")" "$WORKERS"
done
req GET '/status?html'
check "/status?html: text/html" contains "$(header Content-Type)" text/html
check "/status?html: a table of the fields" \
    contains "$BODY" "<tr><th>max children reached</th><td>"
req GET '/status?full&html'
check "/status?full&html: a row per worker" \
    eq "$(printf '%s\n' "$BODY" | grep -c '^<tr><td>[0-9]')" "$WORKERS"
req GET '/status?openmetrics'
check "/status?openmetrics: OpenMetrics content type" \
    contains "$(header Content-Type)" application/openmetrics-text
check "/status?openmetrics: ends with # EOF" \
    eq "$(printf '%s\n' "$BODY" | tail -n 1)" "# EOF"
check "/status?openmetrics: accepted connections as a counter" \
    matches "$BODY" "ratelimit_pool_accepted_connections_total [0-9]+"

# ------------------------------------------------- /metrics: promtool

get_metrics "$BASE_URL"
printf '%s\n' "$METRICS" >"$T_TMP/metrics.txt"
promtool check metrics <"$T_TMP/metrics.txt" >"$T_TMP/promtool.out" 2>&1
check "promtool check metrics passes [$(head -c 300 "$T_TMP/promtool.out")]" \
    eq "$?" 0
check "/metrics: ratelimit_build_info" \
    contains "$METRICS" "ratelimit_build_info{version=\""
c0=$(metric ratelimit_check_duration_seconds_count)
s429_0=$(metric 'ratelimit_responses_total{status="429"}')
s200_0=$(metric 'ratelimit_responses_total{status="200"}')
hits0=$(metric 'ratelimit_cache_lookups_total{cache="key",result="hit"}')
redis0=$(metric ratelimit_redis_duration_seconds_count)
pg0=$(metric ratelimit_postgresql_duration_seconds_count)

avoid_edge 60 5
seq_checks 8 "$key" "$(check_body /obs/limited "$SUBJECT")"
check "8 checks of a limit of 3: 3 allowed, 5 denied" \
    eq "$(count_status 200) $(count_status 429)" "3 5"

get_metrics "$BASE_URL"
printf '%s\n' "$METRICS" >"$T_TMP/metrics.txt"
promtool check metrics <"$T_TMP/metrics.txt" >"$T_TMP/promtool.out" 2>&1
check "promtool check metrics passes with per-tenant series" eq "$?" 0
check "check latency histogram counts the 8 checks" \
    ge "$(($(metric ratelimit_check_duration_seconds_count) - c0))" 8
check "a le=\"+Inf\" bucket equal to _count" \
    eq "$(metric 'ratelimit_check_duration_seconds_bucket{le="+Inf"}')" \
    "$(metric ratelimit_check_duration_seconds_count)"
check "responses_total{status=\"429\"} moved by the 5 denials" \
    ge "$(($(metric 'ratelimit_responses_total{status="429"}') - s429_0))" 5
check "responses_total{status=\"200\"} moved by the 3 allowed" \
    ge "$(($(metric 'ratelimit_responses_total{status="200"}') - s200_0))" 3
check "Redis latency histogram counts script calls" \
    ge "$(($(metric ratelimit_redis_duration_seconds_count) - redis0))" 3
check "PostgreSQL latency histogram counts the new key's lookups" \
    ge "$(($(metric ratelimit_postgresql_duration_seconds_count) - pg0))" 1
check "key cache hits counted" \
    ge "$(($(metric 'ratelimit_cache_lookups_total{cache="key",result="hit"}') - hits0))" 5
check "worker starts counted" ge "$(metric ratelimit_worker_starts_total)" \
    "$WORKERS"

# -------------------------------------------- /status?json&history

sleep 1.1       # the history ends with the last whole second
req GET '/status?json&history'
check "history: 900 seconds of each outcome" eq "$(jq_py \
    "[len(d['history'][k]) for k in ('allowed','denied','no_rule','fail_open','unavailable','other_4xx','p50_ms','p99_ms')]" \
    "$BODY")" "[900, 900, 900, 900, 900, 900, 900, 900]"
check "history: the last seconds hold the 5 denials" \
    ge "$(jq_py "sum(d['history']['denied'][-10:])" "$BODY")" 5
check "history: a p99 for those seconds" \
    eq "$(jq_py "any(v is not None and v > 0 for v in d['history']['p99_ms'][-10:])" "$BODY")" true
check "history: at most 10 entries in top, by denials" \
    eq "$(jq_py "len(d['top']) <= 10 and [t['denied'] for t in d['top']] == sorted([t['denied'] for t in d['top']], reverse=True)" "$BODY")" true
check "history: health of Redis and PostgreSQL" \
    eq "$(jq_py "[d['health']['redis']['ok'], d['health']['postgresql']['ok']]" "$BODY")" "[true, true]"

# ---------------------------------- a pool with logs of its own

stop_obs() {
    stop_private
}
serve_dir ratelimit-observe
private_app ob "$OB" "access_log=$D/ob-access.log" \
    "access_log_format=json" "log=$D/ob-error.log" "denial_log_rate=3" \
    "slowlog_ms=40" "redis_command_timeout_ms=1000" "listen_backlog=77" "workers=2" "max_requests=4" ||
    fail "a pool with an access log starts"
OBURL="http://127.0.0.1:$OB"
ob_master=$APP_PID
okey=$(new_key "$tenant")
osub=$(uniq_name o)
avoid_edge 60 8
code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 -X POST \
    "$OBURL/v1/check" -H "X-API-Key: $okey" -H 'X-Request-Id: req-obs-1' \
    -H 'Content-Type: application/json' \
    -d "{\"route\":\"/obs/limited\",\"subject\":\"$osub\"}")
check "private pool: a check answers ($code)" eq "$code" 200
line=$(retry 20 grep -q req-obs-1 "$D/ob-access.log" &&
    grep req-obs-1 "$D/ob-access.log" | tail -n 1)
check "access_log (json): one object a line" \
    eq "$(jq_py "[d['request_id'], d['tenant'], d['rule'], d['decision'], d['status']]" "$line")" \
    "[\"req-obs-1\", \"$tenant\", $rule, \"allowed\", 200]"
check "access_log: key prefix, never the key" \
    eq "$(jq_py "d['key'] != '' and d['key'] in '$okey' and d['key'] != '$okey'" "$line")" true
check "access_log: Redis and total microseconds" \
    eq "$(jq_py "d['redis_us'] > 0 and d['total_us'] >= d['redis_us']" "$line")" true
check "access_log: the limit" eq "$(jq_py "d['limit'] != ''" "$line")" true
check "access_log: not in the error log" \
    not_contains "$(cat "$D/ob-error.log")" req-obs-1

# Denials: at most denial_log_rate lines a second, then a count.
den_start=$(date +%s)
for i in 1 2 3 4 5 6 7 8 9 10 11 12; do
    curl -s -o /dev/null -m 5 -X POST "$OBURL/v1/check" \
        -H "X-API-Key: $okey" -H 'Content-Type: application/json' \
        -d "{\"route\":\"/obs/limited\",\"subject\":\"$osub\"}"
done
# This pool counts only this file's tenant, so it is in the top 10 of
# metrics_tenants (in the stack's pool, other files' tenants may have more
# checks).
get_metrics "$OBURL"
check "per-tenant series name the tenant: 3 allowed, 10 denied" \
    eq "$(metric "ratelimit_tenant_checks_total{tenant=\"$tenant\",result=\"allowed\"}") $(metric "ratelimit_tenant_checks_total{tenant=\"$tenant\",result=\"denied\"}")" "3 10"
check "per-rule series: rule $rule denied 10" \
    eq "$(metric "ratelimit_rule_checks_total{tenant=\"$tenant\",rule=\"$rule\",result=\"denied\"}")" 10
req_top=$(curl -s -m 5 "$OBURL/status?json&history")
check "history: the tenant tops the denials of the last minute" \
    eq "$(jq_py "[t['tenant'] for t in d['top'] if t['rule'] == $rule and t['denied'] >= 10]" "$req_top")" "[\"$tenant\"]"
sleep 1.1
curl -s -o /dev/null -m 5 -X POST "$OBURL/v1/check" -H "X-API-Key: $okey" \
    -H 'Content-Type: application/json' \
    -d "{\"route\":\"/obs/limited\",\"subject\":\"$osub\"}"
denials=$(grep -c "denied: tenant $tenant " "$D/ob-error.log" || true)
# 3 lines in each second the 11 denials spanned (two, or more on a loaded
# machine), where 11 would be logged without the bound.
den_max=$((3 * ($(date +%s) - den_start + 1)))
check "denial log: the tenant by name, bounded ($denials lines for 11 denials, at most $den_max)" \
    le "$denials" "$den_max"
check "denial log: at least one line" ge "$denials" 1
check "denial log: the lines held back are counted" \
    matches "$(cat "$D/ob-error.log")" "denials: suppressed [0-9]+ lines"

# The slow log: Redis paused under a check, for 500 ms from when the check
# was sent (within the pool's 1 s Redis timeout; a pause timed from before
# curl started could end before a loaded machine had sent the check).
rpid=$(rcli info server | awk -F: '/^process_id:/ { print $2 }' | tr -d '\r')
kill -STOP "$rpid"
curl -s -o "$T_TMP/slow.out" -w '%{http_code}' -m 5 -X POST \
    "$OBURL/v1/check" -H "X-API-Key: $okey" \
    -H 'Content-Type: application/json' \
    -d "{\"route\":\"/obs/limited\",\"subject\":\"$(uniq_name slow)\"}" \
    >"$T_TMP/slow.code" &
slow_curl=$!
sleep 0.5
kill -CONT "$rpid"
wait "$slow_curl"
code=$(cat "$T_TMP/slow.code")
check "slow check answered ($code)" eq "$code" 200
check "slowlog_ms: the slow check is logged with where its time went" \
    matches "$(cat "$D/ob-error.log")" \
    "slow check: [0-9]+ us in all \\(PostgreSQL [0-9]+ us, Redis [0-9]+ us"
req_slow=$(curl -s -m 5 "$OBURL/status?json")
check "/status: slow requests counts it" \
    ge "$(jq_py "d['slow requests']" "$req_slow")" 1
check "/status: listen queue len is the socket's backlog (77)" \
    eq "$(jq_py "d['listen queue len']" "$req_slow")" 77

# max_requests = 4: workers leave and are counted by cause.
get_metrics "$OBURL"
check "worker exits by cause: max_requests" \
    ge "$(metric 'ratelimit_worker_exits_total{cause="max_requests"}')" 1
# A worker may leave (max_requests) between ps and kill: the kill then
# finds no process, or one already counted as leaving, so another worker
# is tried, three at most.
crashed=1
tries=0
while [ "$crashed" != 0 ] && [ "$tries" -lt 3 ]; do
    tries=$((tries + 1))
    w=$(ps -o pid=,stat= --ppid "$ob_master" |
        awk '$2 !~ /^Z/ { print $1; exit }')
    kill -KILL "$w" 2>/dev/null || continue
    retry 30 sh -c "curl -s -m 2 '$OBURL/metrics' | grep -q 'ratelimit_worker_exits_total{cause=\"crash\"} [1-9]'"
    crashed=$?
done
check "worker exits by cause: a killed worker is a crash ($tries kills)" \
    eq "$crashed" 0

# SIGUSR1: logrotate moved the files; both are opened anew.
mv "$D/ob-access.log" "$D/ob-access.log.1"
mv "$D/ob-error.log" "$D/ob-error.log.1"
kill -USR1 "$ob_master"
retry 30 test -s "$D/ob-error.log"
check "SIGUSR1: the error log is opened anew" \
    contains "$(cat "$D/ob-error.log" 2>/dev/null)" "logs reopened"
sleep 0.3
for i in 1 2 3 4 5 6; do
    curl -s -o /dev/null -m 5 -X POST "$OBURL/v1/check" -H "X-API-Key: $okey" \
        -H "X-Request-Id: req-obs-rot-$i" -H 'Content-Type: application/json' \
        -d "{\"route\":\"/obs/none\",\"subject\":\"$osub\"}"
done
check "SIGUSR1: new access lines go to the new file" \
    eq "$(grep -c req-obs-rot "$D/ob-access.log" 2>/dev/null || echo 0)" 6
check "SIGUSR1: none to the moved file" \
    eq "$(grep -c req-obs-rot "$D/ob-access.log.1" || true)" 0

# SIGHUP with access_log_format = logfmt.
sed -i 's/^access_log_format = .*/access_log_format = "logfmt"/' "$D/ob.conf"
kill -HUP "$ob_master"
sleep 1
ok=1
for i in 1 2 3 4 5 6 7 8; do
    curl -s -o /dev/null -m 5 -X POST "$OBURL/v1/check" -H "X-API-Key: $okey" \
        -H "X-Request-Id: req-obs-lf-$i" -H 'Content-Type: application/json' \
        -d "{\"route\":\"/obs/none\",\"subject\":\"$osub\"}"
done
line=$(grep 'request_id=req-obs-lf-8 ' "$D/ob-access.log" | tail -n 1)
check "access_log (logfmt) after SIGHUP: key=value pairs" \
    matches "$line" "^time=[0-9T:.-]+Z request_id=req-obs-lf-8 method=POST path=/v1/check tenant=$tenant .*decision=no_rule status=200 "
check "logfmt: microseconds as numbers" matches "$line" "total_us=[0-9]+$"
: "$ok"
stop_obs

finish
