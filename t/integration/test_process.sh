#!/bin/sh
# test_process.sh -- the process model: max_requests recycling, SIGHUP
# reload (good and bad configuration), one log line per worker death,
# request_timeout, a graceful stop that lets the request in hand complete,
# and signals through pid_file after a master takeover.
#
# An application of its own on a Unix socket (workers = 2), with a
# lighttpd in front for ordinary requests and a small FastCGI client in
# python3 for the requests that must stall on purpose.
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

serve_dir ratelimit-process
P_LT=$((PORT + 61))
SOCK=$D/app.sock

# stall_request SECONDS [MARK]: a FastCGI request for /v1/check that
# announces a 40-byte body, sends half of it (then creates the file MARK,
# if given), waits SECONDS, then sends the rest.  Prints the status the
# application answered, or "none".  With SECONDS "eof" it does not send
# the rest but waits for the application to close the connection, and
# prints how many milliseconds that took.
stall_request() {
    python3 - "$SOCK" "$1" "${2:-}" <<'PY'
import socket, struct, sys, time
def rec(t, content, rid=1):
    return struct.pack(">BBHHBx", 1, t, rid, len(content), 0) + content
def pair(k, v):
    return bytes([len(k), len(v)]) + k + v
params = b"".join(pair(k, v) for k, v in [
    (b"REQUEST_METHOD", b"POST"), (b"REQUEST_URI", b"/v1/check"),
    (b"CONTENT_LENGTH", b"40"), (b"HTTP_X_API_KEY", b"rl_demo_abc123xyz")])
body = b'{"route":"/process/stall","subject":"x"}'[:40]
s = socket.socket(socket.AF_UNIX)
s.settimeout(20)
s.connect(sys.argv[1])
s.sendall(rec(1, struct.pack(">HB5x", 1, 0)) + rec(4, params) + rec(4, b"")
          + rec(5, body[:20]))
t0 = time.monotonic()
if sys.argv[3]:
    open(sys.argv[3], "w").close()
if sys.argv[2] == "eof":
    try:
        while s.recv(65536):
            pass
    except OSError:
        pass
    print(int((time.monotonic() - t0) * 1000))
    sys.exit(0)
time.sleep(float(sys.argv[2]))
try:
    s.sendall(rec(5, body[20:]) + rec(5, b""))
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
except OSError:
    data = b""
i = data.find(b"Status: ")
print(data[i + 8:i + 11].decode() if i >= 0 else "none")
PY
}

app_conf "$D/app.conf" "listen=unix:$SOCK" workers=2 max_requests=5 \
    request_timeout=2
app_start app "$D/app.conf"
MASTER=$APP_PID
printf '%s\n' "server.port = $P_LT" 'server.bind = "127.0.0.1"' \
    "server.document-root = \"$D\"" "server.errorlog = \"$D/lighttpd.log\"" \
    'server.modules += ( "mod_fastcgi" )' \
    "fastcgi.server = ( \"/\" => (( \"socket\" => \"$SOCK\", \"check-local\" => \"disable\" )) )" \
    >"$D/lighttpd.conf"
check "the application starts with 2 workers" wait_workers "$MASTER" 2
lighttpd_start "$D/lighttpd.conf" "$D/lighttpd.log" "$P_LT" ||
    fail "lighttpd starts in front of the application"
L=http://127.0.0.1:$P_LT

# ---------------------------------------------------------------- max_requests

before=$(workers_of "$MASTER" | tr '\n' ' ')
statuses=$(request_statuses 12 "$L/health/live")
check "12 requests with max_requests = 5 all answer 200 ($statuses)" \
    eq "$(echo "$statuses" | tr ' ' '\n' | grep -c '^200$')" 12
check "recycled workers are replaced: still 2" wait_workers "$MASTER" 2
after=$(workers_of "$MASTER" | tr '\n' ' ')
check "the workers are new processes ($before -> $after)" ne "$before" "$after"
check "the log says why a worker left" \
    contains "$(cat "$D/app.log")" "served max_requests (5)"

# ---------------------------------------------------------------- SIGHUP

app_conf "$D/app.conf" "listen=unix:$SOCK" workers=3 max_requests=0 \
    request_timeout=2
kill -HUP "$MASTER"
check "SIGHUP with workers = 3: three workers" wait_workers "$MASTER" 3
check "SIGHUP: the master stays the same process" alive "$MASTER"
check "SIGHUP: the log says the configuration was reloaded" \
    contains "$(cat "$D/app.log")" "configuration reloaded"
printf 'wrokers = 9\n' >>"$D/app.conf"
kill -HUP "$MASTER"
sleep 1
check "SIGHUP with a bad file: it is refused with file:line" \
    contains "$(cat "$D/app.log")" "app.conf:"
check "SIGHUP with a bad file: the running configuration stays (3 workers)" \
    eq "$(count_lines "$(workers_of "$MASTER")")" 3
fetch "$L/health/live"
check "SIGHUP with a bad file: requests are still served ($STATUS)" \
    eq "$STATUS" 200
app_conf "$D/app.conf" "listen=unix:$SOCK" workers=2 max_requests=0 \
    request_timeout=1 fcgi_read_timeout_ms=1000 redis_command_timeout_ms=5000
kill -HUP "$MASTER"
check "SIGHUP back to 2 workers" wait_workers "$MASTER" 2

# ---------------------------------------------------------------- other signals

# renewed PID BEFORE: PID has 2 workers again, not the list BEFORE.
# shellcheck disable=SC2317 # called through retry
renewed() {
    [ "$(workers_of "$1" | tr '\n' ' ')" != "$2" ] && has_workers "$1" 2
}

# logrotate's SIGUSR1 and signals whose default would end the master.
for sig in USR1 ALRM IO; do
    kill -"$sig" "$MASTER"
done
sleep 0.5
check "SIGUSR1, SIGALRM, SIGIO: the master is still there" alive "$MASTER"
check "SIGUSR1: the log says the logs were reopened" \
    contains "$(cat "$D/app.log")" "SIGUSR1, logs reopened"
check "SIGALRM: logged and ignored" \
    contains "$(cat "$D/app.log")" "(Alarm clock) ignored"
before=$(workers_of "$MASTER" | tr '\n' ' ')
kill -USR2 "$MASTER"
check "SIGUSR2 re-reads the configuration and replaces the workers" \
    retry 50 renewed "$MASTER" "$before"
check "SIGUSR2: the master stays the same process" alive "$MASTER"
fetch "$L/health/live"
check "after SIGUSR2: requests are served ($STATUS)" eq "$STATUS" 200

# ---------------------------------------------------------------- deaths

# Two workers SIGKILLed at once, then three reloads: each death is one
# line, written by the master and naming its worker; no worker writes a
# line about a death it never saw (the log's held-back lines once went to
# every worker forked after them, which wrote them out when they left).
d_victims=$(workers_of "$MASTER" | tr '\n' ' ')
d_mark=$(wc -l <"$D/app.log")
# shellcheck disable=SC2086 # a list of pids
kill -KILL $d_victims
check "two workers SIGKILLed at once ($d_victims): both replaced" \
    retry 50 renewed "$MASTER" "$d_victims"
for d_i in 1 2 3; do
    d_before=$(workers_of "$MASTER" | tr '\n' ' ')
    kill -HUP "$MASTER"
    check "... SIGHUP $d_i replaces the workers" \
        retry 50 renewed "$MASTER" "$d_before"
done
# A line held back is written at most a second later.
sleep 1.2
d_lines=$(tail -n +"$((d_mark + 1))" "$D/app.log" | grep 'killed by signal')
check "two deaths, three reloads: two 'killed by signal' lines ($(count_lines "$d_lines"): $(printf '%s' "$d_lines" | tr '\n' '|'))" \
    eq "$(count_lines "$d_lines")" 2
check "... both written by the master" \
    eq "$(printf '%s\n' "$d_lines" | grep -c "ratelimit-fcgi\[$MASTER\]")" 2
for d_v in $d_victims; do
    check "... one of them names worker $d_v" \
        eq "$(printf '%s\n' "$d_lines" | grep -c "worker $d_v killed by signal 9")" 1
done
fault_row "two workers SIGKILLed at once, then three SIGHUPs: 'killed by signal' lines" \
    2 "$(($(count_lines "$d_lines") - 2))" -

# ---------------------------------------------------------------- timeouts

# A client that stops sending in the middle of its body: the worker drops
# the connection at fcgi_read_timeout_ms (1 s) by itself and stays.
before=$(workers_of "$MASTER" | tr '\n' ' ')
got=$(stall_request 3)
check "a request stalled in its body gets no answer ($got)" eq "$got" none
ms=$(stall_request eof)
check "... the worker closes it at fcgi_read_timeout_ms ($ms ms after the half body)" \
    le "$ms" 1500
check "... and the worker stays: no process was replaced" \
    eq "$(workers_of "$MASTER" | tr '\n' ' ')" "$before"
check "... and the log does not blame request_timeout" \
    not_contains "$(cat "$D/app.log")" "request_timeout"

# A check that hangs while being decided (Redis paused longer than
# request_timeout, with a longer command timeout): the master kills the
# worker after request_timeout.
rcli CLIENT PAUSE 3000 ALL >/dev/null
fetch "$L/v1/check" -H "X-API-Key: $DEMO_KEY" --data-raw \
    '{"route":"/process/paused","subject":"x"}'
check "a check held past request_timeout is cut ($STATUS)" \
    matches "$STATUS" '^(5..|000)$'
check "the stuck worker was killed and replaced: 2 workers" \
    wait_workers "$MASTER" 2
check "the log names request_timeout" \
    contains "$(cat "$D/app.log")" "request_timeout"
check "a replacement worker is a new process" \
    ne "$(workers_of "$MASTER" | tr '\n' ' ')" "$before"
sleep 2
rcli CLIENT UNPAUSE >/dev/null 2>&1 || true

# ---------------------------------------------------------------- graceful

# SIGQUIT (the graceful stop) while a request is in hand: it completes,
# then the pool stops.  (SIGTERM, the fast stop, is in test_reload.sh.)
# The client waits 0.5 s, within fcgi_read_timeout_ms, to send the rest; the
# signal comes 0.2 s after its first half is on the way, time enough for a
# worker to have accepted it (a connection no worker has accepted yet is
# not "in hand").
stall_request 0.5 "$D/sent" >"$D/graceful.out" &
client=$!
n=0
while [ ! -f "$D/sent" ] && [ "$n" -lt 100 ]; do
    sleep 0.05
    n=$((n + 1))
done
sleep 0.2
kill -QUIT "$MASTER"
wait "$client"
got=$(cat "$D/graceful.out")
check "SIGQUIT: the request in hand still gets its answer ($got)" \
    matches "$got" '^[0-9]{3}$'
n=0
while alive "$MASTER" && [ "$n" -lt 50 ]; do
    sleep 0.1
    n=$((n + 1))
done
check "SIGQUIT: the master then exits" test "$n" -lt 50
wait "$MASTER"
check "SIGQUIT: exit status 0" eq "$?" 0
check "SIGQUIT: the socket is removed" test ! -e "$SOCK"

# ---------------------------------------------------------------- takeover

# The master SIGKILLed: a worker starts a new master in its place, whose
# parent is no longer the one that started the pool.  The documented ways
# to signal the pool (the pid in pid_file, for SIGHUP and logrotate's
# SIGUSR1) must reach the new master.  The pool's parent here does not
# reap its children for 30 s (as a busy or careless supervisor might), so
# the dead master stays a zombie that pid_file still names.
TK_PID=$D/tk.pid
app_conf "$D/tk.conf" "listen=unix:$D/tk.sock" workers=2 max_requests=0 \
    "pid_file=$TK_PID"
python3 -c 'import subprocess, sys, time
subprocess.Popen(sys.argv[1:])
time.sleep(30)' "$BUILD/ratelimit-fcgi" -c "$D/tk.conf" >"$D/tk.log" 2>&1 &
TK_PARENT=$!
PIDS="$PIDS $TK_PARENT"
retry 50 test -s "$TK_PID"
TK=$(cat "$TK_PID" 2>/dev/null)
check "takeover: a pool with pid_file starts with 2 workers" \
    wait_workers "$TK" 2
check "takeover: pid_file names its master ($(cat "$TK_PID" 2>/dev/null) = $TK)" \
    eq "$(cat "$TK_PID" 2>/dev/null)" "$TK"

# took_over OLD: pid_file names a live master other than OLD, with 2
# workers.
# shellcheck disable=SC2317 # called through retry
took_over() {
    to_pid=$(cat "$TK_PID" 2>/dev/null)
    [ -n "$to_pid" ] && [ "$to_pid" != "$1" ] && alive "$to_pid" &&
        has_workers "$to_pid" 2
}
tk_t0=$(now_ms)
kill -KILL "$TK"
retry 100 took_over "$TK"
rc=$?
tk_took=$(($(now_ms) - tk_t0))
tk_missed=3
TK2=$(cat "$TK_PID" 2>/dev/null)
PIDS="$PIDS $TK2"
check "takeover: after SIGKILL, pid_file names a new master with 2 workers ($TK -> $TK2, the old one $(ps -o stat= -p "$TK" | tr -d ' '))" \
    eq "$rc" 0
check "takeover: the new master's parent is not the pool's first parent ($(ps -o ppid= -p "$TK2" | tr -d ' '))" \
    ne "$(ps -o ppid= -p "$TK2" | tr -d ' ')" "$TK_PARENT"
tk_before=$(workers_of "$TK2" | tr '\n' ' ')
kill -HUP "$(cat "$TK_PID")"
retry 50 renewed "$TK2" "$tk_before"
rc=$?
check "takeover: kill -HUP \"\$(cat pid_file)\" replaces the workers ($tk_before)" \
    eq "$rc" 0
[ "$rc" = 0 ] && tk_missed=$((tk_missed - 1))
check "takeover: ... and the new master logs the reload" \
    contains "$(grep "ratelimit-fcgi\[$TK2\]" "$D/tk.log")" \
    "configuration reloaded"
kill -USR1 "$(cat "$TK_PID")"
retry 30 sh -c "grep 'ratelimit-fcgi\\[$TK2\\]' '$D/tk.log' | grep -q 'logs reopened'"
rc=$?
check "takeover: kill -USR1 \"\$(cat pid_file)\" (logrotate) reaches it" \
    eq "$rc" 0
[ "$rc" = 0 ] && tk_missed=$((tk_missed - 1))
tk_status=$(python3 "$ROOT/t/lib/fcgi_client.py" --lines request \
    "unix:$D/tk.sock" --timeout 3 | awk '$1 == "status" { print $2 }')
check "takeover: the pool answers on its socket ($tk_status)" \
    eq "$tk_status" 200
kill -QUIT "$(cat "$TK_PID")"
retry 50 sh -c "! kill -0 $TK2 2>/dev/null"
rc=$?
check "takeover: kill -QUIT \"\$(cat pid_file)\" stops the new master" \
    eq "$rc" 0
[ "$rc" = 0 ] && tk_missed=$((tk_missed - 1))
check "takeover: ... which removes pid_file" test ! -s "$TK_PID"
stop_process "$TK_PARENT" TERM
fault_row "master SIGKILLed, its parent not reaping it: SIGHUP, SIGUSR1, SIGQUIT sent to the pid in pid_file" \
    3 "$tk_missed" "$(awk -v m="$tk_took" 'BEGIN { printf "%.1f s", m / 1000 }')"

finish
