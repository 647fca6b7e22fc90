#!/bin/sh
# test_keepalive.sh -- nginx's kept FastCGI connections never pin a worker.
#
# One pool (workers = 4, worker_connections = 16) on a Unix socket with
# nginx (2 workers) in front of it, its upstream keeping connections
# (`keepalive K`, `fastcgi_keep_conn on`).  t/lib/loadgen.py sends checks
# through nginx, every run bounded by a count and a time:
#   burst    for K = 1, the number of workers and 4 x that: 2,000 checks,
#            16 at a time, all answered 200, none waiting behind an idle
#            kept connection (p99 under 500 ms, the slowest under 2.5 s,
#            half of fcgi_keepalive_timeout_ms; unloaded, a few ms)
#   exact    400 checks, 16 at a time, against a limit of 50: exactly 50
#            allowed
#   silent   a client that opens twice as many kept connections as the
#            pool holds and goes silent, while checks flow: they are still
#            answered at once
#   reload   SIGHUP, SIGUSR2 and max_requests under load: every old worker
#            leaves with kept connections open, and no check is lost; a
#            worker with no free entry passes a new connection to one with
#            room (none is closed to make room: ratelimit_fcgi_evicted_total)
#   stop     SIGQUIT with a check in hand (Redis paused) and idle kept
#            connections: the check is answered, then the pool stops at
#            once rather than after the keep-alive timeout
# Redis and PostgreSQL get 5 s: on a busy machine a check may be slow, but
# it must not become a 503.
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

NGINX=${NGINX:-/usr/sbin/nginx}
LOADGEN=$ROOT/t/lib/loadgen.py
serve_dir ratelimit-keepalive
P_NGX=$((PORT + 71))
R=$D/run
mkdir -p "$R" "$D/tmp"
chmod 755 "$D/tmp"
SOCK=$R/app.sock
NOGROUP=$(id -gn nobody 2>/dev/null || echo nogroup)
POOL=4
CONNS=16
KEEP_MS=5000

if [ ! -x "$NGINX" ]; then
    fail "nginx is installed ($NGINX)"
    finish
fi

tenant=$(uniq_name keep)
new_tenant "$tenant"
key=$(new_key "$tenant")
new_sw_rule "$tenant" '/keep/*' 1000000 60
new_tb_rule "$tenant" '/exact/*' 50 0.001
check "a tenant with a key and two rules" matches "$key" '^rl_'

user_lines=
if [ "$(id -u)" = 0 ]; then
    chown nobody "$R"
    user_lines="user = nobody"
fi
app_conf_lines "$D/app.conf" "listen = unix:$SOCK" "listen_mode = 0660" \
    "listen_group = $NOGROUP" "workers = $POOL" "max_requests = 0" \
    "fcgi_keepalive_timeout_ms = $KEEP_MS" "worker_connections = $CONNS" \
    "redis_command_timeout_ms = 5000" "pg_query_timeout_ms = 5000" \
    ${user_lines:+"$user_lines"}
"$BUILD/ratelimit-fcgi" -c "$D/app.conf" >"$D/app.log" 2>&1 &
MASTER=$!
PIDS="$PIDS $MASTER"
check "the pool starts with $POOL workers" wait_workers "$MASTER" "$POOL"

NGX_PID=

# nginx_start K: nginx (2 workers) with an upstream that keeps K
# connections per nginx worker; sets NGX_PID and waits (at most 10 s) for
# /health/ready through it.
nginx_start() {
    cat >"$D/keep-site.conf" <<EOF
upstream ratelimit {
    server unix:$SOCK;
    keepalive $1;
    keepalive_timeout 4s;
}
server {
    listen 127.0.0.1:$P_NGX;
    fastcgi_keep_conn on;
    location = /v1/check {
        include fastcgi_params;
        fastcgi_pass ratelimit;
    }
    location /health/ {
        include fastcgi_params;
        fastcgi_pass ratelimit;
    }
    location = /metrics {
        include fastcgi_params;
        fastcgi_pass ratelimit;
    }
}
EOF
    nginx_conf "$D/nginx.conf" user="nobody $NOGROUP" workers=2 \
        connections=512 "$D/keep-site.conf"
    : >"$D/nginx-error.log"
    "$NGINX" -c "$D/nginx.conf" -e "$D/nginx-error.log" -g 'daemon off;' \
        >>"$D/nginx-start.log" 2>&1 &
    NGX_PID=$!
    PIDS="$PIDS $NGX_PID"
    retry 50 sh -c "curl -s -o /dev/null -w '%{http_code}' 'http://127.0.0.1:$P_NGX/health/ready' | grep -q 200"
}

# load NAME ROUTE REQUESTS [LOADGEN-ARG...]: checks through nginx, 16 at a
# time, within 30 s; one line each in $D/load-NAME.tsv.
load() {
    ld_name=$1
    ld_route=$2
    ld_n=$3
    shift 3
    python3 "$LOADGEN" run --port "$P_NGX" --key "$key" \
        --body "{\"route\":\"$ld_route\",\"subject\":\"s\"}" \
        --requests "$ld_n" --duration 30 --concurrency 16 --timeout 5 \
        --out "$D/load-$ld_name.tsv" "$@" >"$D/load-$ld_name.json" 2>&1
}

# lg_stat NAME FIELD: one field of loadgen's statistics of run NAME.
lg_stat() {
    json_field "$2" "$(python3 "$LOADGEN" stats "$D/load-$1.tsv")"
}

# not_200 NAME: the statuses of run NAME other than 200, counted.
not_200() {
    awk -F '\t' '$3 != 200 { print $3 }' "$D/load-$1.tsv" | sort | uniq -c |
        tr -s ' \n' ' '
}

# pool_metric NAME: the pool's series NAME (no labels), through nginx.
pool_metric() {
    curl -s -m 5 "http://127.0.0.1:$P_NGX/metrics" |
        awk -v m="$1" '$1 == m { print $2 }'
}

# evicted: the connections the pool closed to make room for a new one.
evicted() {
    pool_metric ratelimit_fcgi_evicted_total
}

# unpassed: the kept connections workers on their way out closed because
# no other worker took them.
unpassed() {
    pool_metric ratelimit_fcgi_closed_leaving_total
}

# nginx_errors: what nginx logged at error level, and the pool at warn,
# since the last call (a lost request says why).
nginx_errors() {
    grep -v '\[notice\]' "$D/nginx-error.log" | head -n 3 | sed 's/^/    /'
    : >"$D/nginx-error.log"
    tail -n +$((APP_SEEN + 1)) "$D/app.log" | grep -E ': (warn|error): ' |
        grep -v 'run as root' | tail -n 3 | sed 's/^/    /'
    APP_SEEN=$(wc -l <"$D/app.log")
}
APP_SEEN=0

# ---------------------------------------------------------------- burst

for k in 1 "$POOL" $((POOL * 4)); do
    nginx_start "$k"
    check "keepalive $k: nginx answers /health/ready" eq "$?" 0
    load "k$k" /keep/burst 2000
    echo "    keepalive $k: $(lg_stat "k$k" requests) checks in $(json_field elapsed_s "$(cat "$D/load-k$k.json")") s, p99 $(lg_stat "k$k" p99_ms) ms, slowest $(lg_stat "k$k" max_ms) ms"
    check "keepalive $k: 2000 checks, all answered 200 ($(not_200 "k$k"))" \
        eq "$(lg_stat "k$k" s200)" 2000
    check "keepalive $k: p99 under 500 ms ($(lg_stat "k$k" p99_ms) ms)" \
        lt_num "$(lg_stat "k$k" p99_ms)" 500
    check "keepalive $k: the slowest under half the keep-alive timeout ($(lg_stat "k$k" max_ms) ms)" \
        lt_num "$(lg_stat "k$k" max_ms)" $((KEEP_MS / 2))
    nginx_errors
    [ "$k" = $((POOL * 4)) ] || stop_process "$NGX_PID" QUIT
done

# ---------------------------------------------------------------- exact

# A token bucket of 50 that refills one token in 1,000 s.
load exact /exact/keep 400
ok=$(awk -F '\t' '$3 == 200' "$D/load-exact.tsv" | wc -l | tr -d ' ')
denied=$(awk -F '\t' '$3 == 429' "$D/load-exact.tsv" | wc -l | tr -d ' ')
check "exact: 400 checks on kept connections, 16 at a time, allow 50 ($ok)" \
    eq "$ok" 50
check "exact: and deny 350 ($denied)" eq "$denied" 350

# ---------------------------------------------------------------- silent

# Checks go through nginx (400 a second, 16 at a time) while the client
# opens its connections; each completes one FCGI_KEEP_CONN request and then
# stays open and silent (8 s at most).
SILENT_N=$((POOL * CONNS * 2))
ev0=$(evicted)
load silent /keep/silent 2000 --rate 400 &
LOAD=$!
sleep 0.5
python3 "$ROOT/t/lib/fcgi_client.py" idle "unix:$SOCK" --connections "$SILENT_N" \
    --hold 8 --ready-file "$D/silent.ready" >"$D/silent.json" 2>&1 &
SILENT=$!
wait "$LOAD"
wait "$SILENT"
echo "    silent: $(lg_stat silent requests) checks, p99 $(lg_stat silent p99_ms) ms, slowest $(lg_stat silent max_ms) ms; the silent client: $(json_field connected "$(cat "$D/silent.json")") connected, $(json_field closed_by_peer "$(cat "$D/silent.json")") closed by the pool"
ev1=$(evicted)
check "silent: the full pool closed idle connections to make room ($ev0 -> $ev1 in ratelimit_fcgi_evicted_total)" \
    ge "$((ev1 - ev0))" "$((SILENT_N - POOL * CONNS))"
check "silent: each of its $SILENT_N requests was answered before it went silent" \
    eq "$(json_field connected "$(cat "$D/silent.json")")" "$SILENT_N"
check "silent: 2000 checks meanwhile, all answered 200 ($(not_200 silent))" \
    eq "$(lg_stat silent s200)" 2000
check "silent: p99 under 500 ms ($(lg_stat silent p99_ms) ms)" \
    lt_num "$(lg_stat silent p99_ms)" 500
check "silent: the slowest under half the keep-alive timeout ($(lg_stat silent max_ms) ms)" \
    lt_num "$(lg_stat silent max_ms)" $((KEEP_MS / 2))
nginx_errors

# ---------------------------------------------------------------- reload

# SIGHUP, then SIGUSR2, while checks go through nginx's kept connections
# (400 a second): every worker is replaced while nginx holds connections
# to it, and not one check is lost.
w0=$(workers_of "$MASTER" | tr '\n' ' ')
up0=$(unpassed)
load reload /keep/reload 2400 --rate 400 &
LOAD=$!
sleep 1.5
kill -HUP "$MASTER"
sleep 2
kill -USR2 "$MASTER"
wait "$LOAD"
w1=$(workers_of "$MASTER" | tr '\n' ' ')
check "reload: the log says the configuration was reloaded twice" \
    eq "$(grep -c 'configuration reloaded' "$D/app.log")" 2
check "reload: the load ran across both ($(lg_stat reload requests) checks)" \
    eq "$(lg_stat reload requests)" 2400
check "reload: every check answered 200 while the workers were replaced ($(not_200 reload); workers $w0-> $w1)" \
    eq "$(lg_stat reload s200)" 2400
echo "    reload: p99 $(lg_stat reload p99_ms) ms, slowest $(lg_stat reload max_ms) ms"
up1=$(unpassed)
check "reload: no kept connection was closed by a worker on its way out ($up0 -> $up1)" \
    eq "$(is_int "$up0" && is_int "$up1" && echo $((up1 - up0)))" 0
check "reload: every worker was replaced ($w0-> $w1)" \
    eq "$(echo "$w0 $w1" | tr ' ' '\n' | grep . | sort | uniq -d)" ""
nginx_errors

# 32 idle kept connections (eight a worker), then SIGHUP: the workers are
# replaced one at a time, each passing its kept connections to the three
# others, so none is closed.  (Replacing all four at once put 32 on the
# hand-off queue, which holds 10 while no worker takes them, and closed
# the rest.)
w0=$(workers_of "$MASTER" | tr '\n' ' ')
up0=$(unpassed)
rm -f "$D/kept.ready"
python3 "$ROOT/t/lib/fcgi_client.py" idle "unix:$SOCK" --connections 32 \
    --hold 3.5 --ready-file "$D/kept.ready" >"$D/kept.json" 2>&1 &
KEPT=$!
retry 50 test -e "$D/kept.ready"
kill -HUP "$MASTER"
wait "$KEPT"
retry 50 sh -c "[ \$(grep -c 'configuration reloaded' '$D/app.log') = 3 ]"
up1=$(unpassed)
w1=$(workers_of "$MASTER" | tr '\n' ' ')
kept=$(cat "$D/kept.json")
check "reload with 32 idle kept connections: all 32 were kept open ($(json_field connected "$kept") connected, $(json_field closed_by_peer "$kept") closed by the pool)" \
    eq "$(json_field connected "$kept")/$(json_field closed_by_peer "$kept")" 32/0
check "reload with 32 idle kept connections: none closed by a worker on its way out ($up0 -> $up1)" \
    eq "$(is_int "$up0" && is_int "$up1" && echo $((up1 - up0)))" 0
check "reload with 32 idle kept connections: every worker was replaced ($w0-> $w1)" \
    eq "$(echo "$w0 $w1" | tr ' ' '\n' | grep . | sort | uniq -d)" ""
nginx_errors

# max_requests = 150: each worker leaves after 150 checks, and its kept
# connections go on in the others.
app_conf_lines "$D/app.conf" "listen = unix:$SOCK" "listen_mode = 0660" \
    "listen_group = $NOGROUP" "workers = $POOL" "max_requests = 150" \
    "fcgi_keepalive_timeout_ms = $KEEP_MS" "worker_connections = $CONNS" \
    "redis_command_timeout_ms = 5000" "pg_query_timeout_ms = 5000" \
    ${user_lines:+"$user_lines"}
kill -HUP "$MASTER"
retry 50 sh -c "[ \$(grep -c 'configuration reloaded' '$D/app.log') = 4 ]"
ev0=$(evicted)
load recycle /keep/recycle 2400 --rate 400
ev1=$(evicted)
recycled=$(grep -c 'served max_requests' "$D/app.log")
check "max_requests: workers were replaced under load ($recycled times)" \
    ge "$recycled" 8
check "max_requests: every check answered 200 ($(not_200 recycle))" \
    eq "$(lg_stat recycle s200)" 2400
# The pool has room for 64 connections, nginx keeps at most 32: a worker
# with all of its entries taken passes a new connection to one with room
# rather than close a kept one that nginx may be writing its next request
# into.
check "max_requests: no kept connection was closed to make room ($ev0 -> $ev1)" \
    eq "$((ev1 - ev0))" 0
nginx_errors

# ---------------------------------------------------------------- stop

# A check in hand while Redis is paused (SIGSTOP, 1.5 s), through a kept
# connection, with idle kept connections beside it; then SIGQUIT.
rpid=$(rcli info server | awk -F: '/^process_id:/ { print $2 }' | tr -d '\r')
kill -STOP "$rpid"
(sleep 1.5; kill -CONT "$rpid") &
CONT=$!
curl -s -o /dev/null -w '%{http_code}' -m 10 -X POST \
    "http://127.0.0.1:$P_NGX/v1/check" -H "X-API-Key: $key" \
    -H 'Content-Type: application/json' \
    -d '{"route":"/keep/in-hand","subject":"s"}' >"$D/in_hand" &
IN_HAND=$!
sleep 0.5
kill -QUIT "$MASTER"
wait "$IN_HAND"
t_answer=$(now_ms)
check "stop: the check in hand is answered (200 once Redis is back)" \
    eq "$(cat "$D/in_hand")" 200
retry 50 sh -c "! kill -0 $MASTER 2>/dev/null"
took=$(($(now_ms) - t_answer))
check "stop: then the pool stops at once, kept connections or not ($took ms after the answer)" \
    lt_num "$took" 2000
wait "$CONT"
stop_process "$NGX_PID" QUIT

finish
