#!/bin/sh
# test_reload.sh -- SIGUSR2 and SIGHUP under load lose no request.
#
# One pool (workers = 4, user = nobody) on a Unix socket, with lighttpd
# and nginx in front of it at the same time.  t/lib/loadgen.py sends checks
# through both (bounded: a fixed count within a fixed time) while the
# master gets SIGUSR2, then SIGHUP.  Every answer must be 200 or 429: no
# 5xx, no connection error, no request without an answer; and each signal
# must have replaced every worker (new pids).
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

NGINX=${NGINX:-/usr/sbin/nginx}
LOADGEN=$ROOT/t/lib/loadgen.py
serve_dir ratelimit-reload
P_LT=$((PORT + 63))
P_NGX=$((PORT + 64))
R=$D/run
mkdir -p "$R" "$D/tmp"
SOCK=$R/app.sock
NOGROUP=$(id -gn nobody 2>/dev/null || echo nogroup)

tenant=$(uniq_name reload)
new_tenant "$tenant"
key=$(new_key "$tenant")
new_sw_rule "$tenant" '/reload/*' 1000000 60
check "a tenant with a key and a generous rule" matches "$key" '^rl_'

# The pool: as nobody when we are root (the directory is nobody's, so that
# the master can remove its socket at exit), the socket for nginx's
# workers (nobody) through the group.
user_lines=
if [ "$(id -u)" = 0 ]; then
    chown nobody "$R"
    user_lines="user = nobody"
fi
app_conf_lines "$D/app.conf" "listen = unix:$SOCK" "listen_mode = 0660" \
    "listen_group = $NOGROUP" "workers = 4" "max_requests = 0" \
    "redis_command_timeout_ms = 5000" \
    ${user_lines:+"$user_lines"}
"$BUILD/ratelimit-fcgi" -c "$D/app.conf" >"$D/app.log" 2>&1 &
MASTER=$!
PIDS="$PIDS $MASTER"
check "the pool starts with 4 workers" wait_workers "$MASTER" 4

printf '%s\n' "server.port = $P_LT" 'server.bind = "127.0.0.1"' \
    "server.document-root = \"$D\"" "server.errorlog = \"$D/lighttpd.log\"" \
    'server.modules += ( "mod_fastcgi" )' \
    "fastcgi.server = ( \"/\" => (( \"socket\" => \"$SOCK\", \"check-local\" => \"disable\" )) )" \
    >"$D/lighttpd.conf"
lighttpd_start "$D/lighttpd.conf" "$D/lighttpd.log" "$P_LT" ||
    fail "lighttpd starts in front of the pool"

sed -e "s|@LISTEN@|127.0.0.1:$P_NGX|g" -e "s|@SOCKET@|$SOCK|g" \
    "$ROOT/conf/nginx-responder.conf" >"$D/responder.conf"
nginx_conf "$D/nginx.conf" user="nobody $NOGROUP" connections=256 \
    "$D/responder.conf"
chmod 755 "$D/tmp"
"$NGINX" -c "$D/nginx.conf" -e "$D/nginx-error.log" -g 'daemon off;' \
    >"$D/nginx-start.log" 2>&1 &
NGX_PID=$!
PIDS="$PIDS $NGX_PID"
for url in "http://127.0.0.1:$P_LT" "http://127.0.0.1:$P_NGX"; do
    retry 50 sh -c "curl -s -o /dev/null -w '%{http_code}' '$url/health/ready' | grep -q 200"
    check "ready through $url" eq "$?" 0
done

# ---------------------------------------------------------------- the load

# renewed PID BEFORE: PID has 4 workers, none of them in the list BEFORE.
# shellcheck disable=SC2317 # called through retry
renewed() {
    has_workers "$1" 4 || return 1
    for rn_pid in $(workers_of "$1"); do
        case " $2 " in
        *" $rn_pid "*) return 1 ;;
        esac
    done
    return 0
}

# Both front ends at once, 4 connections each, 400 checks a second for
# 7 s (2800 each), bounded by 9 s.
for front in lt:$P_LT ngx:$P_NGX; do
    python3 "$LOADGEN" run --port "${front#*:}" --key "$key" \
        --body '{"route":"/reload/load","subject":"s"}' --requests 2800 \
        --rate 400 --duration 9 --concurrency 4 --timeout 5 \
        --out "$D/load-${front%%:*}.tsv" >"$D/load-${front%%:*}.json" 2>&1 &
    eval "LOAD_${front%%:*}=\$!"
done
sleep 1.5
w0=$(workers_of "$MASTER" | tr '\n' ' ')
t_usr2=$(now_ms)
kill -USR2 "$MASTER"
check "SIGUSR2 under load replaces all 4 workers (were $w0)" \
    retry 50 renewed "$MASTER" "$w0"
w1=$(workers_of "$MASTER" | tr '\n' ' ')
sleep 1.5
kill -HUP "$MASTER"
t_hup=$(now_ms)
check "SIGHUP under load replaces all 4 workers (were $w1)" \
    retry 50 renewed "$MASTER" "$w1"
w2=$(workers_of "$MASTER" | tr '\n' ' ')
# shellcheck disable=SC2154 # set by the eval above
wait "$LOAD_lt" "$LOAD_ngx"
check "the master is the same process through both signals" alive "$MASTER"
check "the log says the configuration was reloaded twice" \
    eq "$(grep -c 'configuration reloaded' "$D/app.log")" 2

for front in lt ngx; do
    name=lighttpd
    [ "$front" = ngx ] && name=nginx
    f=$D/load-$front.tsv
    total=$(count_lines "$(cat "$f")")
    bad=$(awk -F '\t' '$3 != 200 && $3 != 429' "$f" | wc -l | tr -d ' ')
    first=$(head -n 1 "$f" | cut -f 1)
    last=$(tail -n 1 "$f" | cut -f 1)
    check "$name: the load ran across both signals ($total checks from $((first - t_usr2)) to +$((last - t_hup)) ms around them)" \
        test "$total" -ge 2000 -a "$first" -lt "$t_usr2" -a "$last" -gt "$((t_hup + 1000))"
    check "$name: zero failed requests across SIGUSR2 and SIGHUP ($bad not 200/429: $(awk -F '\t' '$3 != 200 && $3 != 429 { print $3 }' "$f" | sort | uniq -c | tr '\n' ' '))" \
        eq "$bad" 0
done
echo "    workers: $w0-> $w1-> $w2"

# SIGQUIT, the graceful stop, and SIGTERM, the fast one, with a check in
# hand: Redis is paused (SIGSTOP, at most 3 s) so that the check waits in
# a worker when the signal arrives.
rpid=$(rcli info server | awk -F: '/^process_id:/ { print $2 }' | tr -d '\r')
in_hand() {
    kill -STOP "$rpid"
    (sleep 3; kill -CONT "$rpid") &
    ih_cont=$!
    curl -s -o /dev/null -w '%{http_code}' -m 10 -X POST \
        "http://127.0.0.1:$P_LT/v1/check" -H "X-API-Key: $key" \
        -H 'Content-Type: application/json' \
        -d '{"route":"/reload/x","subject":"in-hand"}' >"$D/in_hand" &
    ih_curl=$!
    sleep 0.5
}
in_hand
t0=$(now_ms)
kill -QUIT "$MASTER"
sleep 0.5
check "SIGQUIT: the master waits for the check in hand" alive "$MASTER"
wait "$ih_curl"
check "SIGQUIT: the check in hand is answered (200 once Redis is back)" \
    eq "$(cat "$D/in_hand")" 200
wait "$ih_cont"
retry 50 sh -c "! kill -0 $MASTER 2>/dev/null"
check "SIGQUIT: then the pool stops" eq "$?" 0

"$BUILD/ratelimit-fcgi" -c "$D/app.conf" >>"$D/app.log" 2>&1 &
MASTER=$!
PIDS="$PIDS $MASTER"
check "the pool starts again" wait_workers "$MASTER" 4
retry 50 sh -c "curl -s -o /dev/null -w '%{http_code}' -m 2 http://127.0.0.1:$P_LT/health/live | grep -qx 200"
in_hand
t0=$(now_ms)
kill -TERM "$MASTER"
retry 30 sh -c "! kill -0 $MASTER 2>/dev/null"
rc=$?
took=$(($(now_ms) - t0))
check "SIGTERM: the pool stops at once, the check in hand or not ($took ms, Redis still paused)" \
    eq "$rc" 0
wait "$ih_curl"
check "SIGTERM: the check in hand is cut off ($(cat "$D/in_hand"))" \
    ne "$(cat "$D/in_hand")" 200
wait "$ih_cont"
check "the log names both stops" \
    sh -c "grep -q 'stopping gracefully' '$D/app.log' && grep -q 'stopping fast' '$D/app.log'"
check "SIGTERM: no worker's end is logged as a death (the master sent the signal)" \
    not_contains "$(cat "$D/app.log")" "killed by signal 15"
fault_row "fast stop (SIGTERM) of 4 workers: lines saying a worker was killed" \
    4 "$(grep -c 'killed by signal 15' "$D/app.log")" -

finish
