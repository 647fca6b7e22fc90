#!/bin/sh
# Redis connections that die under the service: replies lost in flight,
# idle connections closed by Redis, Redis coming back after an outage, and
# a Redis that answers every script with an error.
#
# - Lost replies: while a loop closes every Redis client connection every
#   10 ms (CLIENT KILL TYPE normal), 500 concurrent checks run against a
#   counter of 100 a day that all of them share, and, through an "always"
#   rule counted per route, each on a counter of its own (every check has
#   a route of its own).  A check whose connection was closed with its call
#   in flight is sent once more on a new connection; the script replays the
#   reply of a call that already charged, so no check is charged twice: no
#   check's own counter is above 1, every 200 is charged once, and the
#   shared counter equals the 200s plus the few 503s that were charged (a
#   connection closed twice under one check).  Before the replay, the same
#   run charged some checks twice (their own counter 2).  The replies are
#   kept in one reply slot per worker and tenant.  Up to 3 rounds,
#   until replies were lost in flight: how many the loop catches depends
#   on how fast the machine runs the burst.
# - Readiness: after CLIENT KILL of every client, /health/ready on every
#   worker reconnects and answers 200, as a check does.
# - Logs: with maxmemory 1 every script fails with OOM; 200 checks add only
#   a few lines to the log (one per call site, worker and second), and the
#   lines of the next second report how many were held back.
# - Back-off: an application of its own with redis_backoff_ms = 60000
#   answers 503 at once while Redis is down, and 200 as soon as Redis
#   answers again, not a minute later.
#
# Everything runs against the stack's Redis, on 127.0.0.1; every loop is
# bounded in count and time.
# shellcheck disable=SC2317 # helpers called through `check`

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

serve_dir ratelimit-lostreply
P_LT=$((PORT + 71))
SOCK=$D/app.sock
KILLER=
# Whatever happens, Redis is left running with no memory limit.
trap 'restore_memory; restore_redis; end_pids $KILLER $PIDS; rm -rf "$D"' EXIT

restore_memory() {
    rcli CONFIG SET maxmemory 0 >/dev/null 2>&1 || true
}

statuses() {
    sort "$T_TMP/statuses" | uniq -c | awk '{ printf "%s%s x %s", s, $2, $1; s = ", " }'
}

# avoid_day_edge: the counter below is per UTC day; do not start within
# 20 s of midnight.
avoid_day_edge() {
    ad_left=$((86400 - $(date +%s) % 86400))
    if [ "$ad_left" -le 20 ]; then
        sleep "$ad_left"
        sleep 0.2
    fi
}

# redis_stat NAME: a field of INFO (all sections).
redis_stat() {
    rcli INFO all | tr -d '\r' | awk -F: -v k="$1" '$1 == k { print $2 }'
}

# ready_all N: N requests for /health/ready, WORKERS at a time, so that
# every worker answers some; statuses go to $T_TMP/statuses.
ready_all() {
    ra_cfg=$T_TMP/ready.conf
    : >"$ra_cfg"
    ra_i=0
    while [ "$ra_i" -lt "$1" ]; do
        printf 'url = "%s/health/ready"\noutput = "/dev/null"\n%s\n' \
            "$BASE_URL" 'write-out = "%{http_code}\n"' >>"$ra_cfg"
        ra_i=$((ra_i + 1))
    done
    curl -s -m 10 --parallel --parallel-max "$WORKERS" -K "$ra_cfg" \
        >"$T_TMP/statuses" 2>/dev/null || true
}

all_status() {
    as_total=$(wc -l <"$T_TMP/statuses" | tr -d ' ')
    [ "$as_total" -gt 0 ] && [ "$(count_status "$1")" = "$as_total" ]
}

# ---------------------------------------------------------------- lost replies

# burst_conf N: a curl configuration of N checks with $key; check i has the
# route /lost/i, and its URL carries ?i (the API does not look at the
# query), so that its status can be told apart: curl --parallel writes
# them as they come.
burst_conf() {
    bc_i=1
    while [ "$bc_i" -le "$1" ]; do
        [ "$bc_i" -gt 1 ] && echo next
        echo "url = \"$BASE_URL/v1/check?$bc_i\""
        echo "header = \"X-API-Key: $key\""
        echo 'header = "Content-Type: application/json"'
        echo "data-raw = \"{\\\"route\\\":\\\"/lost/$bc_i\\\"}\""
        echo 'output = "/dev/null"'
        printf '%s\n' 'write-out = "%{url_effective} %{http_code}\n"'
        echo 'max-time = 20'
        bc_i=$((bc_i + 1))
    done >"$T_TMP/burst.conf"
}

# burst PARALLEL: runs the checks of burst_conf, PARALLEL at a time; their
# statuses go to $T_TMP/statuses in the order of i.
burst() {
    curl --no-progress-meter --parallel --parallel-max "$1" \
        -K "$T_TMP/burst.conf" >"$T_TMP/burst.out" || true
    sed 's/.*?\([0-9]*\) /\1 /' "$T_TMP/burst.out" | sort -n |
        cut -d ' ' -f 2 >"$T_TMP/statuses"
}

# charges N: how many times check i (1..N) was charged, one a line, read
# from its own counter rl:{tenant}:rule:limit:r<first 32 hex of
# SHA-256(route)> (see src/limiter.c).
charges() {
    ch_limit=$(rcli --scan --pattern "rl:{$tid}:$each:*" | head -n 1 |
        cut -d: -f4)
    python3 - "$1" "rl:{$tid}:$each:$ch_limit" <<'PY' |
import hashlib, sys
for i in range(1, int(sys.argv[1]) + 1):
    route = "/lost/%d" % i
    print("HGET %s:r%s count" % (sys.argv[2],
        hashlib.sha256(route.encode()).hexdigest()[:32]))
PY
    rcli | awk '{ print ($0 == "" ? 0 : $0) }'
}

# count_charged AWK-CONDITION: how many lines "status times-charged" of the
# last round match.
count_charged() {
    awk "$1" "$T_TMP/charged" | wc -l | tr -d ' '
}

# lost_round: one burst of 500 checks under the kill loop, on a tenant of
# its own.  Two rules decide every check together: /lost/* counts all
# checks on one counter of 100 a day (--count tenant, not per route:
# rl:{tenant}:rule:limit), and an "always" rule on * counts each route on a
# counter of its own.  Every check has a route of its own, so that counter
# tells how many times that one check was charged: 0, 1 or (a lost reply
# charged again) 2.  Adds its figures to the totals below.
# shellcheck disable=SC2016 # awk conditions, in single quotes
lost_round() {
    avoid_day_edge
    tenant=$(uniq_name lost)
    tid=$(ctl tenant add "$tenant" | awk '$1 == "id" { print $2; exit }')
    key=$(new_key "$tenant")
    shared=$(ctl rule add "$tenant" --route '/lost/*' \
        --algorithm fixed_window --limit 100 --calendar day --count tenant |
        awk '$1 == "id" { print $2; exit }')
    each=$(ctl rule add "$tenant" --route '*' --always --per route \
        --algorithm fixed_window --limit 5 --calendar day --count tenant |
        awk '$1 == "id" { print $2; exit }')
    matches "$tid/$shared/$each/$key" '^[0-9a-f-]{36}/[0-9]+/[0-9]+/rl_' ||
        made=no
    burst_conf 500
    conns_before=$(redis_stat total_connections_received)
    runs_before=$(script_calls)
    # Every 10 ms (LOSTREPLY_KILL_EVERY seconds), at most 240 times (and
    # for 20 s whatever happens), every client connection but the
    # killer's own is closed.  Each answer is the number killed.
    timeout 20 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" -r 240 \
        -i "${LOSTREPLY_KILL_EVERY:-0.01}" CLIENT KILL TYPE normal \
        >"$T_TMP/kills" 2>&1 &
    KILLER=$!
    sleep 0.1
    burst 50
    end_pids "$KILLER"
    KILLER=
    # The reply slots, read at once: they live 3 s.
    rcli --scan --pattern "rl:{$tid}:req:*" >"$T_TMP/slots"
    slot_bad=0
    while read -r slot; do
        rcli EVAL "local v = redis.call('GET', KEYS[1])
            local sp = v:find(' ', 1, true)
            return v:sub(1, sp - 1) .. ' ' .. (#v - sp) .. ' ' ..
                struct.unpack('>d', v, sp + 1)" 1 "$slot" |
            grep -Eq '^[0-9a-f]+ 96 1$' || slot_bad=$((slot_bad + 1))
    done <"$T_TMP/slots"
    r_kills=$(awk '/^[0-9]+$/ { n += $1 } END { print n + 0 }' "$T_TMP/kills")
    r_conns=$(($(redis_stat total_connections_received) - conns_before))
    r_runs=$(($(script_calls) - runs_before))
    r_ok=$(count_status 200)
    # Every script run whose reply reached its worker answered one check
    # with 200 or 429; the other runs lost their reply.
    r_lost=$((r_runs - r_ok - $(count_status 429)))
    r_counter=$(rcli HGET "$(rcli --scan --pattern "rl:{$tid}:$shared:*" |
        head -n 1)" count)
    charges 500 | paste -d ' ' "$T_TMP/statuses" - >"$T_TMP/charged"
    r_charged=$(awk '{ n += $2 } END { print n + 0 }' "$T_TMP/charged")
    r_charged_503=$(count_charged '$1 != 200 && $2 > 0')
    echo "    round $round: $r_kills connections killed, $r_conns new connections, $r_runs script runs ($r_lost replies lost)"
    echo "    round $round: status and times charged: $(sort "$T_TMP/charged" |
        uniq -c | awk '{ printf "%s%s charged %s: %s", s, $2, $3, $1
            s = ", " }'); shared counter $r_counter"
    kills=$((kills + r_kills))
    lost=$((lost + r_lost))
    allowed="$allowed $r_ok"
    [ "$r_ok" -le 100 ] || over=$((over + 1))
    twice=$((twice + $(count_charged '$2 > 1')))
    bad_200=$((bad_200 + $(count_charged '$1 == 200 && $2 != 1')))
    bad_429=$((bad_429 + $(count_charged '$1 == 429 && $2 != 0')))
    [ "$r_counter" = "$r_charged" ] || bad_sum=$((bad_sum + 1))
    # A check whose connection was closed twice with its call in flight is
    # answered 503 and may have been charged (once).
    [ "$r_counter" = $((r_ok + r_charged_503)) ] || bad_count=$((bad_count + 1))
    counts="$counts $r_counter = $r_ok + $r_charged_503;"
}

# Rounds until replies were lost in flight (at most 3): how many the kill
# loop catches depends on how fast the machine runs the burst.
made=yes kills=0 lost=0 allowed='' over=0 twice=0 bad_200=0 bad_429=0
bad_sum=0 bad_count=0 counts='' round=0
while [ "$round" -lt 3 ] && [ "$lost" -lt 5 ]; do
    round=$((round + 1))
    lost_round
done
check "lost replies: tenants, keys and rules are made" eq "$made" yes
check "lost replies: the kill loop closed connections during the bursts ($kills)" \
    ge "$kills" 1
check "lost replies: replies were lost in flight ($lost in $round rounds)" \
    ge "$lost" 1
check "lost replies: at most 100 of 500 allowed in each round ($allowed)" \
    eq "$over" 0
check "lost replies: no check was charged twice ($twice were)" eq "$twice" 0
check "lost replies: every 200 was charged once ($bad_200 were not)" \
    eq "$bad_200" 0
check "lost replies: no 429 was charged ($bad_429 were)" eq "$bad_429" 0
check "lost replies: each shared counter is the sum of its checks' charges" \
    eq "$bad_sum" 0
check "lost replies: each shared counter equals its 200s and its 503s that were charged ($counts)" \
    eq "$bad_count" 0
fault_row "CLIENT KILL every 10 ms, 500 checks on 100 ($round rounds)" \
    $((round * 500)) $((twice + bad_200 + bad_429)) -
# The replies are kept in one reply slot per worker and tenant, not one
# key per check: right after the last round's 500 checks (read by
# lost_round before the slots' 3 s TTL can end them), the tenant has at
# most one slot per worker, each holding a call id and an allowed reply.
slots=$(wc -l <"$T_TMP/slots" | tr -d ' ')
check "reply slots: 1 to $WORKERS for 500 checks ($slots)" awk \
    -v n="$slots" -v w="$WORKERS" 'BEGIN { exit !(n >= 1 && n <= w) }'
# (A slot is the id, a space and the reply as big-endian doubles: 2 + 5 * 2
# of them for the two limits here, the first 1 for allowed.)
check "reply slots: each holds a call id and an allowed reply" \
    eq "$slot_bad" 0

# ---------------------------------------------------------------- readiness

# Every worker holds an idle connection; Redis closes all of them.
ready_all $((WORKERS * 4))
rcli CLIENT KILL TYPE normal >/dev/null
ready_all $((WORKERS * 4))
check "after CLIENT KILL: /health/ready answers 200 on every worker ($(statuses))" \
    all_status 200
fault_row "CLIENT KILL, then /health/ready on every worker" \
    "$(wc -l <"$T_TMP/statuses")" "$(grep -cvx 200 "$T_TMP/statuses")" -

# ---------------------------------------------------------------- logs

# Redis refuses every write: each check's script fails with OOM.  The
# store's error line is written once per worker and second, not once per
# check.
LOG=$VAR/ratelimit-fcgi.log
body=$(check_body /lostreply/oom "$(uniq_name oom)")
lines_before=$(wc -l <"$LOG")
rcli CONFIG SET maxmemory-policy noeviction >/dev/null
rcli CONFIG SET maxmemory 1 >/dev/null
t0=$(date +%s)
par_checks 200 8 "$DEMO_KEY" "$body"
t1=$(date +%s)
oom_statuses=$(statuses)
sleep 0.2
added=$(($(wc -l <"$LOG") - lines_before))
oom_lines=$(tail -n +"$((lines_before + 1))" "$LOG" | grep -c 'OOM' || true)
# Each worker writes the line at most once a second: with the checks
# spread over s seconds (by the clock), at most s + 1 times.
most=$((WORKERS * (t1 - t0 + 1)))
check "out of memory: no check is allowed ($oom_statuses)" \
    eq "$(count_status 200)" 0
check "out of memory: the error is in the log ($oom_lines lines)" \
    ge "$oom_lines" 1
check "out of memory: 200 failed checks in $((t1 - t0 + 1)) s write the error at most $most times ($oom_lines; $added lines in all)" \
    le "$oom_lines" "$most"
# More than a second later, the next failure of a worker is written with
# the count of those held back.
sleep 1.1
lines_before=$(wc -l <"$LOG")
par_checks 16 "$WORKERS" "$DEMO_KEY" "$body"
held=$(tail -n +"$((lines_before + 1))" "$LOG" | grep 'OOM' |
    sed -n 's/.*(repeated \([0-9]*\) times before this line).*/\1/p' |
    awk '{ n += $1 } END { print n + 0 }')
check "out of memory: later lines report the ones held back ($held of 200)" \
    matches "$held" '^[1-9][0-9]*$'
check "out of memory: no more held back than failed ($held)" le "$held" 200
fault_row "Redis OOM (maxmemory 1), 200 checks: error lines" 200 "$oom_lines" -
restore_memory
par_checks 8 "$WORKERS" "$DEMO_KEY" "$body"
check "out of memory: with memory again, checks answer 200 ($(statuses))" \
    all_status 200

# ---------------------------------------------------------------- back-off

# An application of its own, behind a lighttpd of its own, with a back-off
# of a minute: while Redis is down it answers 503 at once; once Redis
# answers again, it connects at once instead of waiting out the minute.
app_conf "$D/app.conf" "listen=unix:$SOCK" workers=2 redis_backoff_ms=60000
app_start app "$D/app.conf"
# lighttpd answers 503 itself for a while when the socket is not there yet.
n=0
until [ -S "$SOCK" ] && [ "$(ps -o pid= --ppid "$APP_PID" | wc -l)" -eq 2 ]; do
    n=$((n + 1))
    [ "$n" -gt 50 ] && break
    sleep 0.1
done
printf '%s\n' "server.port = $P_LT" 'server.bind = "127.0.0.1"' \
    "server.document-root = \"$D\"" "server.errorlog = \"$D/lighttpd.log\"" \
    'server.modules += ( "mod_fastcgi" )' \
    "fastcgi.server = ( \"/\" => (( \"socket\" => \"$SOCK\", \"check-local\" => \"disable\" )) )" \
    >"$D/lighttpd.conf"
lighttpd_start "$D/lighttpd.conf" "$D/lighttpd.log" "$P_LT" ||
    fail "lighttpd starts in front of the application"
L=http://127.0.0.1:$P_LT
body=$(check_body /lostreply/backoff "$(uniq_name backoff)")
n=0
until fetch "$L/health/ready" && [ "$STATUS" = 200 ]; do
    n=$((n + 1))
    [ "$n" -gt 50 ] && break
    sleep 0.1
done

# app_checks N: N checks against the application, 2 at a time (one per
# worker); statuses go to $T_TMP/statuses, the slowest time to $T_TMP/slowest.
app_checks() {
    acs_i=0
    : >"$T_TMP/app.conf"
    while [ "$acs_i" -lt "$1" ]; do
        {
            [ "$acs_i" -gt 0 ] && echo next
            echo "url = \"$L/v1/check\""
            echo "header = \"X-API-Key: $DEMO_KEY\""
            echo 'header = "Content-Type: application/json"'
            echo "data-raw = $(curl_quote "$body")"
            echo 'output = "/dev/null"'
            printf '%s\n' 'write-out = "%{http_code} %{time_total}\n"'
            echo 'max-time = 10'
        } >>"$T_TMP/app.conf"
        acs_i=$((acs_i + 1))
    done
    curl --no-progress-meter --parallel --parallel-max 2 -K "$T_TMP/app.conf" \
        >"$T_TMP/app.out" 2>/dev/null || true
    cut -d ' ' -f 1 "$T_TMP/app.out" >"$T_TMP/statuses"
    cut -d ' ' -f 2 "$T_TMP/app.out" | sort -n | tail -n 1 >"$T_TMP/slowest"
}

app_checks 8
check "back-off: the application answers 200 ($(statuses))" all_status 200
all_status 200 || tail -n 5 "$D/app.log" | sed 's/^/    app: /'
stop_redis
app_checks 8
check "back-off: Redis down, every check 503 ($(statuses))" all_status 503
check "back-off: Redis down, every 503 in under 100 ms ($(cat "$T_TMP/slowest") s)" \
    lt_num "$(cat "$T_TMP/slowest")" 0.1
start_redis
check "back-off: Redis is back" eq "$(rcli PING 2>/dev/null)" PONG
app_checks 8
check "back-off: Redis back, every check 200 at once, not after 60 s ($(statuses))" \
    all_status 200
fault_row "Redis back after an outage, redis_backoff_ms 60000" 8 \
    "$(grep -cvx 200 "$T_TMP/statuses")" "$(cat "$T_TMP/slowest") s"
fetch "$L/health/ready"
check "back-off: Redis back, /health/ready is 200" eq "$STATUS" 200

finish
