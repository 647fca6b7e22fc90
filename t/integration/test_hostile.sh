#!/bin/sh
# Hostile FastCGI peers against the stack's own application socket (the
# one lighttpd spawned under $VAR), with probes through lighttpd to see
# whether everybody else is still served.  t/lib/fcgi_client.py plays the
# hostile peer; every scenario also adds a row to the fault table.
#
#   ctl     a check body whose route holds a raw 0x01 or tab: 400
#   nul     a NUL inside the X-API-Key or Authorization param: 401
#   length  CONTENT_LENGTH 100 but 10 bytes of stdin and no end of stream:
#           the connection ends within fcgi_read_timeout + 1 s
#   mgmt    2000 unknown management records (requestId 0): connections
#           closed, worker memory flat, no worker dies; a GET_VALUES
#           record left alone does not hold a worker
#   partial $WORKERS connections stopping inside a record header: probes
#           wait at most fcgi_read_timeout + 0.1 s, the app closes them
#   idle    $WORKERS FCGI_KEEP_CONN connections left idle: probes wait at
#           most fcgi_keepalive_timeout + 0.1 s, the app closes them
#   reconnect  4, then 16, connections that each send half a record and
#           connect again as soon as the app drops them, for 12 s each:
#           every probe answers 200 within 1 s, and the app still drops
#           each of them by fcgi_read_timeout + 0.5 s
#   kept    checks on one FCGI_KEEP_CONN connection see a rule changed
#           between two of them (the change notification is read while
#           the connection waits)
#   unread  requests back to back on one kept connection whose answers are
#           never read: the app gives up writing within
#           fcgi_read_timeout + 1 s, and no worker is killed for it
#   burst   50 records announcing 2^30-byte params, as fast as possible
#   flood   the same, 10 a second for 20 s, while probing
# HOSTILE_SCENARIOS="nul ctl" runs only those (the order stays the one
# above; the crash scenarios come last since a crashing pool may stay down
# for minutes).  Every client and probe is bounded in time; the whole file
# takes about 70 s on a sound application, 120 s at worst.
# shellcheck disable=SC2317 # helpers called through `check`

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

CLIENT=$ROOT/t/lib/fcgi_client.py
# The interpreter itself: a version manager's python3 shim can take a
# second to start on a busy machine, and this file runs the client often.
PY=$(python3 -c 'import sys; print(sys.executable)')
SCENARIOS=${HOSTILE_SCENARIOS:-ctl nul length mgmt partial idle reconnect kept unread burst flood}
# The holding client in the background, if any: stopped on any exit.
BG_PIDS=
stop_bg() {
    for sb_pid in $BG_PIDS; do
        kill "$sb_pid" 2>/dev/null
    done
}
trap stop_bg EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- helpers

want() {
    case " $SCENARIOS " in
    *" $1 "*) return 0 ;;
    esac
    return 1
}

# fc COMMAND ARG...: runs the client; its answer is "NAME VALUE" lines.
fc() {
    "$PY" "$CLIENT" --lines "$@"
}

now_ms() {
    date +%s%3N
}

# num_le A B: A <= B for decimal numbers; false when A is empty or null.
num_le() {
    awk -v a="$1" -v b="$2" \
        'BEGIN { exit !(a != "" && a != "null" && a + 0 <= b + 0) }'
}

# num_ge A B: A >= B, likewise.
num_ge() {
    awk -v a="$1" -v b="$2" \
        'BEGIN { exit !(a != "" && a != "null" && a + 0 >= b + 0) }'
}

# conf_ms KEY DEFAULT: a millisecond setting of the stack's configuration.
conf_ms() {
    cm_v=$(awk -F= -v k="$1" '{ n = $1; gsub(/[ \t]/, "", n) }
        n == k { v = $2; gsub(/[ \t"]/, "", v); print v }' \
        "$VAR/ratelimit.conf" | tail -n 1)
    echo "${cm_v:-$2}"
}

# secs MS [EXTRA]: MS milliseconds plus EXTRA seconds (a number or a sum
# such as "2.1 + 0.4"), in seconds.
secs() {
    awk -v m="$1" "BEGIN { printf \"%.3f\", m / 1000 + ${2:-0} }"
}

# The workers' resident memory, in kB, summed.
workers_rss_kb() {
    for wr_pid in $(fcgi_worker_pids); do
        awk '/^VmRSS:/ { print $2 }' "/proc/$wr_pid/status" 2>/dev/null
    done | awk '{ s += $1 } END { print s + 0 }'
}

# probe_while PID MIN_S OUT: GET /health/live through lighttpd every 0.1 s
# while PID runs and for at least MIN_S seconds, at most 200 probes of at
# most 4 s each; one "STATUS SECONDS" line per probe in OUT.
probe_while() {
    pw_start=$(now_ms)
    pw_n=0
    : >"$3"
    while [ "$pw_n" -lt 200 ]; do
        if ! alive "$1" &&
            [ $(($(now_ms) - pw_start)) -ge $(($2 * 1000)) ]; then
            break
        fi
        curl -s -m 4 -o /dev/null -w '%{http_code} %{time_total}\n' \
            "$BASE_URL/health/live" >>"$3" 2>/dev/null || true
        pw_n=$((pw_n + 1))
        sleep 0.1
    done
}

# probe_stats FILE LIMIT_S: sets P_N (probes), P_BAD (not 200), P_SLOW
# (slower than LIMIT_S) and P_MAX (the slowest, seconds).
probe_stats() {
    P_N=$(wc -l <"$1" | tr -d ' ')
    P_BAD=$(awk '$1 != 200' "$1" | wc -l | tr -d ' ')
    P_SLOW=$(awk -v l="$2" '$2 + 0 > l + 0' "$1" | wc -l | tr -d ' ')
    P_MAX=$(awk 'BEGIN { m = 0 } $2 + 0 > m { m = $2 + 0 }
        END { printf "%.3f", m }' "$1")
}

# check_fast KEY BODY: check_req, but giving up after 3 s (the pool may be
# down here on purpose).
check_fast() {
    R_METHOD=POST
    R_PATH=/v1/check
    curl_request "$BASE_URL/v1/check" -m 3 -X POST -H "X-API-Key: $1" \
        -H "Content-Type: application/json" --data-raw "$2"
}

# live_within TRIES: /health/live through lighttpd answers 200 within
# about TRIES tenths of a second (each try at most 1 s).
live_within() {
    lw_n=0
    while [ "$lw_n" -lt "$1" ]; do
        R_METHOD=GET
        R_PATH=/health/live
        curl_request "$BASE_URL/health/live" -m 1
        [ "$STATUS" = 200 ] && return 0
        lw_n=$((lw_n + 1))
        sleep 0.1
    done
    return 1
}

# warm_pool N: N checks through lighttpd, $WORKERS at a time, each at most
# 2 s, so that every worker has made its connections and allocations.
warm_pool() {
    wp_i=0
    : >"$T_TMP/warm.conf"
    while [ "$wp_i" -lt "$1" ]; do
        {
            [ "$wp_i" -gt 0 ] && echo next
            echo "url = \"$BASE_URL/v1/check\""
            echo "header = \"X-API-Key: $DEMO_KEY\""
            echo 'header = "Content-Type: application/json"'
            echo "data-raw = $(curl_quote "$CHECK_BODY")"
            echo 'output = "/dev/null"'
            echo 'max-time = 2'
        } >>"$T_TMP/warm.conf"
        wp_i=$((wp_i + 1))
    done
    curl -s --parallel --parallel-max "$WORKERS" -K "$T_TMP/warm.conf" \
        >/dev/null 2>&1 || true
}

# same_workers BEFORE AFTER: the pool had $WORKERS workers (BEFORE, a
# list of pids) and still has the very same ones (AFTER).
same_workers() {
    [ "$(echo "$1" | wc -w)" -eq "$WORKERS" ] && [ "$1" = "$2" ]
}

# jf NAME: a field of the client's last answer ($OUT): strings raw, the
# rest as JSON; empty when absent.
jf() {
    printf '%s\n' "$OUT" | awk -v k="$1" '
        $1 == k { sub(/^[^ ]* ?/, ""); print; exit }'
}

# body_error: the "error" field of the last response's JSON body ($BODY).
body_error() {
    "$PY" -c '
import json, sys
try:
    print(json.loads(sys.argv[1]).get("error", "<absent>"))
except (ValueError, AttributeError):
    print("<not a JSON object>")
' "$BODY"
}

# jn NAME: an integer field of $OUT, 0 when it is absent or not a number
# (for arithmetic).
jn() {
    jn_v=$(jf "$1")
    if is_int "$jn_v"; then
        echo "$jn_v"
    else
        echo 0
    fi
}

# ---------------------------------------------------------------- setup

READ_MS=$(conf_ms fcgi_read_timeout_ms 2000)
KEEP_MS=$(conf_ms fcgi_keepalive_timeout_ms 2000)
SOCK=
for f in "$VAR"/fcgi.sock*; do
    [ -S "$f" ] && SOCK=$f
done
check "the application's FastCGI socket is under \$VAR ($SOCK)" \
    ne "$SOCK" ""
ADDR=unix:$SOCK
CHECK_BODY='{"route":"/hostile/probe","subject":"hostile"}'

OUT=$(fc request "$ADDR" --method POST --uri /v1/check \
    --param "HTTP_X_API_KEY=$DEMO_KEY" \
    --param CONTENT_TYPE=application/json --stdin "$CHECK_BODY" --timeout 3)
check "fcgi_client.py: a check straight to the socket answers 200 ($(jf status))" \
    eq "$(jf status)" 200

# ---------------------------------------------------------------- ctl

if want ctl; then
    check_fast "$DEMO_KEY" "$CHECK_BODY"
    check "ctl: a clean check body answers 200" eq "$STATUS" 200
    ctl_bad=0
    for c in 001:0x01 011:tab; do
        # shellcheck disable=SC2059 # the byte is the format's escape
        body=$(printf "{\"route\":\"/hostile/a\\${c%%:*}b\",\"subject\":\"s\"}")
        check_fast "$DEMO_KEY" "$body"
        check "ctl: a raw ${c#*:} inside the route string answers 400 ($STATUS)" \
            eq "$STATUS" 400
        check "ctl: ... with error invalid_request" \
            eq "$(body_error)" invalid_request
        [ "$STATUS" = 400 ] || ctl_bad=$((ctl_bad + 1))
    done
    fault_row "control bytes in a JSON string (0x01, tab)" 2 "$ctl_bad" -
fi

# ---------------------------------------------------------------- nul

if want nul; then
    nul_bad=0
    for hdr in "HTTP_X_API_KEY=" "HTTP_AUTHORIZATION=Bearer "; do
        name=${hdr%%=*}
        OUT=$(fc request "$ADDR" --method POST --uri /v1/check \
            --param "$hdr$DEMO_KEY" \
            --param CONTENT_TYPE=application/json --stdin "$CHECK_BODY" \
            --timeout 3)
        check "nul: $name with the demo key answers 200 ($(jf status))" \
            eq "$(jf status)" 200
        OUT=$(fc request "$ADDR" --method POST --uri /v1/check \
            --param-escaped "$hdr$DEMO_KEY\\0junk" \
            --param CONTENT_TYPE=application/json --stdin "$CHECK_BODY" \
            --timeout 3)
        check "nul: $name = demo key + NUL + junk answers 401 ($(jf status))" \
            eq "$(jf status)" 401
        [ "$(jf status)" = 401 ] || nul_bad=$((nul_bad + 1))
    done
    fault_row "NUL inside the API key param" 2 "$nul_bad" -
fi

# ---------------------------------------------------------------- length

if want length; then
    limit=$(secs "$READ_MS" 1)
    OUT=$(fc request "$ADDR" --method POST --uri /v1/check \
        --param "HTTP_X_API_KEY=$DEMO_KEY" \
        --param CONTENT_TYPE=application/json --stdin '{"route":"' \
        --content-length 100 --no-stdin-end --wait-close \
        --timeout "$(secs "$READ_MS" 2)")
    closed=$(jf closed)
    took=$(jf elapsed_s)
    check "length: 10 of 100 bytes: the app ends the connection ($closed, status $(jf status))" \
        eq "$closed" true
    check "length: ... within fcgi_read_timeout + 1 s = $limit s (took $took s)" \
        num_le "$took" "$limit"
    check_fast "$DEMO_KEY" "$CHECK_BODY"
    check "length: a check through lighttpd still answers 200" eq "$STATUS" 200
    len_bad=0
    if [ "$closed" = true ]; then
        rec="$took s"
        num_le "$took" "$limit" || len_bad=1
    else
        rec="> $took s"
        len_bad=1
    fi
    [ "$STATUS" = 200 ] || len_bad=$((len_bad + 1))
    fault_row "Content-Length 100, 10 bytes sent, stream left open" 2 \
        "$len_bad" "$rec"
fi

# ---------------------------------------------------------------- mgmt

if want mgmt; then
    # Warm the workers up, so that what they allocate on their first
    # requests is not counted.
    warm_pool 40
    pids_before=$(fcgi_worker_pids | tr '\n' ' ')
    rss_before=$(workers_rss_kb)
    OUT=$(fc mgmt "$ADDR" --connections 2000 --per-conn 1 --type 200 \
        --timeout 1 --max-time 10)
    check "mgmt: 2000 records of type 200, one per connection, are sent ($(jf records_sent))" \
        eq "$(jf records_sent)" 2000
    check "mgmt: the app closes each of those connections ($(jf closed_by_peer) of $(jf opened))" \
        eq "$(jf closed_by_peer)" 2000
    mgmt_open=$((2000 - $(jn closed_by_peer)))
    OUT=$(fc mgmt "$ADDR" --connections 20 --per-conn 50 --type 200 \
        --timeout 1 --max-time 10)
    check "mgmt: 20 connections of 50 such records each are closed too ($(jf closed_by_peer) of 20)" \
        eq "$(jf closed_by_peer)" 20
    mgmt_open=$((mgmt_open + 20 - $(jn closed_by_peer)))
    rss_after=$(workers_rss_kb)
    pids_after=$(fcgi_worker_pids | tr '\n' ' ')
    check "mgmt: the workers' VmRSS grows by less than 1 MB ($rss_before kB -> $rss_after kB)" \
        lt_num $((rss_after - rss_before)) 1024
    check "mgmt: no worker died ($pids_before -> $pids_after)" \
        same_workers "$pids_before" "$pids_after"
    check "mgmt: still $WORKERS workers" \
        eq "$(count_lines "$(fcgi_worker_pids)")" "$WORKERS"
    # A known management record, GET_VALUES, and then silence: the app may
    # answer it, but must not wait for more past its read deadline.
    limit=$(secs "$READ_MS" 1)
    gv=$(printf '\016\000FCGI_MAX_CONNS' | od -An -tx1 | tr -d ' \n')
    OUT=$(fc raw "$ADDR" --record "9,0,$gv" --timeout "$(secs "$READ_MS" 2)")
    check "mgmt: a lone GET_VALUES record: the app closes the connection ($(jf closed))" \
        eq "$(jf closed)" true
    check "mgmt: ... within $limit s ($(jf elapsed_s) s)" \
        num_le "$(jf elapsed_s)" "$limit"
    [ "$(jf closed)" = true ] || mgmt_open=$((mgmt_open + 1))
    fault_row "3000 unknown management records, 1 GET_VALUES" 2021 \
        "$mgmt_open" "rss +$((rss_after - rss_before)) kB"
fi

# ---------------------------------------------------------------- partial

# hold_scenario NAME WHAT LIMIT_S CMD...: runs the holding client CMD
# (given --ready-file) in the background, probes through lighttpd
# meanwhile, and checks the probes (all 200, none slower than LIMIT_S) and
# that the app closed every held connection within LIMIT_S + 0.4 s.
# Leaves the client's answer in OUT.
hold_scenario() {
    hs_name=$1
    hs_what=$2
    hs_limit=$3
    shift 3
    rm -f "$T_TMP/$hs_name.ready"
    "$@" --ready-file "$T_TMP/$hs_name.ready" >"$T_TMP/$hs_name.out" &
    hs_pid=$!
    BG_PIDS="$BG_PIDS $hs_pid"
    # The first probe goes just after the held connections are in place
    # (at most 5 s to get there), so that it finds every worker taken.
    hs_n=0
    while [ ! -f "$T_TMP/$hs_name.ready" ] && [ "$hs_n" -lt 100 ] &&
        alive "$hs_pid"; do
        hs_n=$((hs_n + 1))
        sleep 0.05
    done
    sleep 0.1
    probe_while "$hs_pid" 3 "$T_TMP/$hs_name.probes"
    wait "$hs_pid"
    BG_PIDS=
    OUT=$(cat "$T_TMP/$hs_name.out")
    probe_stats "$T_TMP/$hs_name.probes" "$hs_limit"
    check "$hs_name: $WORKERS connections $hs_what ($(jf connected) connected)" \
        eq "$(jf connected)" "$WORKERS"
    check "$hs_name: every probe through lighttpd answers 200 ($P_BAD of $P_N did not)" \
        eq "$P_BAD" 0
    check "$hs_name: no probe takes more than $hs_limit s (slowest $P_MAX s, $P_SLOW slower)" \
        num_le "$P_MAX" "$hs_limit"
    check "$hs_name: the app closes every held connection ($(jf closed_by_peer) of $(jf connected))" \
        eq "$(jf closed_by_peer)" "$WORKERS"
    hs_close=$(secs 0 "$hs_limit + 0.4")
    check "$hs_name: ... within $hs_close s (latest $(jf max_close_s) s)" \
        num_le "$(jf max_close_s)" "$hs_close"
    hs_bad=$(awk -v l="$hs_limit" '$1 != 200 || $2 + 0 > l + 0' \
        "$T_TMP/$hs_name.probes" | wc -l | tr -d ' ')
    fault_row "$hs_name: $WORKERS connections $hs_what" "$P_N" "$hs_bad" \
        "max $P_MAX s"
}

if want partial; then
    hold_scenario partial "stop 3 bytes into a record header" \
        "$(secs "$READ_MS" 0.1)" \
        fc partial "$ADDR" --connections "$WORKERS" --bytes 3 --hold 15
fi

# ---------------------------------------------------------------- idle

if want idle; then
    hold_scenario idle "idle after one FCGI_KEEP_CONN request" \
        "$(secs "$KEEP_MS" 0.1)" \
        fc idle "$ADDR" --connections "$WORKERS" --hold 15
    check "idle: their requests were answered 200 ($(jf statuses))" \
        eq "$(jf statuses)" "$(awk -v n="$WORKERS" 'BEGIN {
            printf "["; for (i = 0; i < n; i++) printf "%s200", i ? ", " : ""
            printf "]" }')"
    check "idle: ... and not closed before about the keep-alive timeout (earliest $(jf min_close_s) s)" \
        num_ge "$(jf min_close_s)" "$(secs "$KEEP_MS" -0.5)"
fi

# ---------------------------------------------------------------- reconnect

# reconnect_attack N SECONDS READY: N connections to the app's socket, each
# sending the first half (8 bytes: the header) of a BEGIN_REQUEST record
# and, as soon as the app closes it, connecting again; for SECONDS, and at
# most 2000 connections in all.  READY is created once the first N are in
# place.  Prints "NAME VALUE" lines: connections, closed_by_peer (closed
# by the app before the end), max_held_s (the longest the app took to
# close one), connect_errors.
reconnect_attack() {
    "$PY" - "$SOCK" "$1" "$2" "$3" "$ROOT/t/lib" <<'PY'
import socket, sys, threading, time
sys.path.insert(0, sys.argv[5])
from fcgi_client import begin_request
path, n, secs, ready = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
half = begin_request()[:8]
end = time.monotonic() + secs
lock = threading.Lock()
st = {"connections": 0, "closed_by_peer": 0, "max_held_s": 0.0,
      "connect_errors": 0, "started": 0}

def one():
    while time.monotonic() < end:
        with lock:
            if st["connections"] >= 2000:
                return
            st["connections"] += 1
        s = socket.socket(socket.AF_UNIX)
        try:
            s.settimeout(5)
            s.connect(path)
            s.sendall(half)
            t0 = time.monotonic()
            with lock:
                st["started"] += 1
                if st["started"] == n:
                    open(ready, "w").close()
            closed = False
            while time.monotonic() < end:
                s.settimeout(max(0.01, min(0.5, end - time.monotonic())))
                try:
                    if not s.recv(4096):
                        closed = True
                        break
                except socket.timeout:
                    continue
                except ConnectionResetError:
                    # A Unix socket closed with our bytes unread.
                    closed = True
                    break
            if closed:
                with lock:
                    st["closed_by_peer"] += 1
                    st["max_held_s"] = max(st["max_held_s"],
                                           time.monotonic() - t0)
        except OSError:
            with lock:
                st["connect_errors"] += 1
            time.sleep(0.05)
        finally:
            s.close()

ts = [threading.Thread(target=one, daemon=True) for _ in range(n)]
for t in ts:
    t.start()
for t in ts:
    t.join(secs + 10)
for k in ("connections", "closed_by_peer", "connect_errors"):
    print(k, st[k])
print("max_held_s", "%.3f" % st["max_held_s"])
PY
}

if want reconnect; then
    rc_limit=$(secs "$READ_MS" 0.5)
    for rc_n in 4 16; do
        live_within 30
        rm -f "$T_TMP/reconnect.ready"
        reconnect_attack "$rc_n" 12 "$T_TMP/reconnect.ready" \
            >"$T_TMP/reconnect.out" &
        rc_pid=$!
        BG_PIDS="$BG_PIDS $rc_pid"
        n=0
        while [ ! -f "$T_TMP/reconnect.ready" ] && [ "$n" -lt 100 ] &&
            alive "$rc_pid"; do
            n=$((n + 1))
            sleep 0.05
        done
        probe_while "$rc_pid" 12 "$T_TMP/reconnect.probes"
        wait "$rc_pid"
        BG_PIDS=
        OUT=$(cat "$T_TMP/reconnect.out")
        probe_stats "$T_TMP/reconnect.probes" 1
        rc_conns=$(jn connections)
        check "reconnect $rc_n: the attack reconnected as the app dropped it ($rc_conns connections, $(jf closed_by_peer) closed by the app, $(jf connect_errors) connect errors)" \
            ge "$(jn closed_by_peer)" $((rc_n * 4))
        check "reconnect $rc_n: the app still drops each within fcgi_read_timeout + 0.5 s = $rc_limit s (longest $(jf max_held_s) s)" \
            num_le "$(jf max_held_s)" "$rc_limit"
        check "reconnect $rc_n: every probe through lighttpd answers 200 ($P_BAD of $P_N did not)" \
            eq "$P_BAD" 0
        check "reconnect $rc_n: every probe answers within 1 s (slowest $P_MAX s, $P_SLOW slower)" \
            eq "$P_SLOW" 0
        rc_bad=$(awk '$1 != 200 || $2 + 0 > 1' "$T_TMP/reconnect.probes" |
            wc -l | tr -d ' ')
        fault_row "reconnecting slowloris: $rc_n connections of half a record, $rc_conns in 12 s" \
            "$P_N" "$rc_bad" "max $P_MAX s"
    done
fi

# ---------------------------------------------------------------- kept

if want kept; then
    # One check an hour on its own route: the second check on the
    # connection is denied (and the denial cached), the rule turns shadow
    # between the second and third, and the third must pass.
    kept_rule=$(ctl rule add demo-corp --route /hostile/kept \
        --algorithm sliding_window --limit 1 --window 3600 |
        awk '$1 == "id" { print $2; exit }')
    check "kept: a rule of one check an hour for /hostile/kept ($kept_rule)" \
        ne "$kept_rule" ""
    OUT=$(fc kept "$ADDR" --method POST --uri /v1/check \
        --param "HTTP_X_API_KEY=$DEMO_KEY" \
        --param CONTENT_TYPE=application/json \
        --stdin '{"route":"/hostile/kept","subject":"kept"}' \
        --count 3 --after 2 --timeout 5 \
        --between "'$BUILD/ratelimitctl' -c '$VAR/ratelimit.conf' rule set $kept_rule --shadow on && sleep 0.2")
    check "kept: three checks on one connection: 200, 429, then 200 once the rule is shadow ($(jf statuses); $(jf errors))" \
        eq "$(jf statuses)" "[200, 429, 200]"
    check "kept: ... and the connection stayed open ($(jf closed))" \
        eq "$(jf closed)" false
    check "kept: ... the change went through ratelimitctl (exit $(jf between_rc))" \
        eq "$(jf between_rc)" 0
    ctl rule remove "$kept_rule" >/dev/null 2>&1 || true
fi

# ---------------------------------------------------------------- unread

if want unread; then
    live_within 30
    pids_before=$(fcgi_worker_pids | tr '\n' ' ')
    limit=$(secs "$READ_MS" 1)
    OUT=$(fc unread "$ADDR" --count 5000 --hold 15)
    pids_after=$(fcgi_worker_pids | tr '\n' ' ')
    took=$(jf elapsed_s)
    check "unread: requests sent on one kept connection until it took no more ($(jf sent))" \
        ge "$(jn sent)" 50
    check "unread: the app ends the connection ($(jf closed))" \
        eq "$(jf closed)" true
    check "unread: ... within fcgi_read_timeout + 1 s = $limit s (took $took s)" \
        num_le "$took" "$limit"
    check "unread: no worker was killed for it ($pids_before -> $pids_after)" \
        same_workers "$pids_before" "$pids_after"
    live_within 10
    check "unread: a check through lighttpd still answers 200" \
        eq "$STATUS" 200
    unread_bad=0
    [ "$(jf closed)" = true ] && num_le "$took" "$limit" ||
        unread_bad=$((unread_bad + 1))
    same_workers "$pids_before" "$pids_after" ||
        unread_bad=$((unread_bad + 1))
    fault_row "answers never read on a kept connection ($(jf sent) requests)" \
        2 "$unread_bad" "$took s"
fi

# ---------------------------------------------------------------- burst

if want burst; then
    live_within 30
    check "burst: the service answers before the burst" eq "$STATUS" 200
    pids_before=$(fcgi_worker_pids | tr '\n' ' ')
    OUT=$(fc crash "$ADDR" --count 50 --probe-url "$BASE_URL/health/live" \
        --probe-threads 2 --probe-interval 0.05 --probe-timeout 2 \
        --probe-lead 0.2 --probe-tail 0.5 --recover-wait 5)
    pids_after=$(fcgi_worker_pids | tr '\n' ' ')
    check "burst: 50 crash connections sent ($(jf sent) in $(jf send_s) s)" \
        eq "$(jf sent)" 50
    check "burst: the service answers 200 within 2 s of the last one (recovery $(jf recovery_s) s)" \
        num_le "$(jf recovery_s)" 2
    failed="$(jf probes_failed) of $(jf probes) failed: $(jf probe_errors)"
    check "burst: other clients' requests meanwhile all answer 200 ($failed)" \
        eq "$(jf probes_failed)" 0
    check "burst: no worker died ($pids_before -> $pids_after)" \
        same_workers "$pids_before" "$pids_after"
    rec=$(jf recovery_s)
    if [ "$rec" = null ]; then
        rec="> 5"
    fi
    fault_row "crash burst: 50 PARAMS announcing 2^30 bytes" "$(jf probes)" \
        "$(jf probes_failed)" "$rec s"
fi

# ---------------------------------------------------------------- flood

if want flood; then
    live_within 5
    check "flood: the service answers before the flood" eq "$STATUS" 200
    pids_before=$(fcgi_worker_pids | tr '\n' ' ')
    OUT=$(fc crash "$ADDR" --count 200 --rate 10 \
        --probe-url "$BASE_URL/health/live" --probe-threads 1 \
        --probe-interval 0.1 --probe-timeout 2 --probe-lead 0 \
        --recover-wait 5)
    pids_after=$(fcgi_worker_pids | tr '\n' ' ')
    n=$(jn probes)
    ok=$(jn probes_ok)
    check "flood: 200 crash connections sent over 20 s ($(jf sent) in $(jf send_s) s)" \
        eq "$(jf sent)" 200
    check "flood: probes kept coming ($n made, 20 at least)" ge "$n" 20
    check "flood: at least 80% of the probes answer 200 ($ok of $n: $(jf probe_errors))" \
        ge $((ok * 100)) $((n * 80))
    check "flood: the service answers 200 within 2 s after the flood (recovery $(jf recovery_s) s)" \
        num_le "$(jf recovery_s)" 2
    check "flood: no worker died ($pids_before -> $pids_after)" \
        same_workers "$pids_before" "$pids_after"
    rec=$(jf recovery_s)
    if [ "$rec" = null ]; then
        rec="> 5"
    fi
    fault_row "crash flood: 10/s for 20 s" "$n" "$(jf probes_failed)" "$rec s"
fi

finish
