#!/bin/sh
# Socket hygiene, and the ways ratelimit-fcgi gets a socket that is not
# lighttpd's (run by t/integration/run.sh against its stack):
#   - listen = unix:/path: mode, owner and group; a second instance on the
#     same path refuses to start while the first keeps serving; a stale
#     socket file is replaced, any other file is not; the path is removed
#     on a graceful stop
#   - listen = 127.0.0.1:PORT and [::1]:PORT, through lighttpd
#   - FCGI_WEB_SERVER_ADDRS: libfcgi drops IPv4 peers not on the list
#   - an idle connection holds one worker, not the pool
#   - spawn-fcgi with the command line of conf/spawn-fcgi.sh
#   - systemd: the units pass `systemd-analyze verify`, and a socket
#     activation done exactly as the units say serves real requests
# Every server here is our own, on 127.0.0.1 and ports PORT+11 to PORT+19,
# and is stopped on exit.  lighttpd always runs the shipped
# conf/lighttpd-socket.conf, with its paths and ports substituted.

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

CONF_DIR=$ROOT/conf
serve_dir rl-socket
P_LT=$((PORT + 11))
P_TCP4=$((PORT + 12))
P_TCP6=$((PORT + 13))
P_ADDRS=$((PORT + 14))
SOCK_GROUP=www-data
getent group "$SOCK_GROUP" >/dev/null 2>&1 || SOCK_GROUP=nogroup
RUN_USER=nobody
RUN_GROUP=nogroup
if [ "$(id -u)" != 0 ]; then
    RUN_USER=$(id -un)
    RUN_GROUP=$(id -gn)
    SOCK_GROUP=$RUN_GROUP
fi

# ---------------------------------------------------------------- helpers

# The servers (serve_dir, app_conf, app_start, lighttpd_start) come from
# lib.sh.

# stop_pid PID: SIGTERM, then up to 5 s; returns 1 if it had to be killed.
stop_pid() {
    kill -TERM "$1" 2>/dev/null || return 0
    sp_n=0
    while kill -0 "$1" 2>/dev/null; do
        sp_n=$((sp_n + 1))
        if [ "$sp_n" -gt 50 ]; then
            kill -KILL "$1" 2>/dev/null || true
            return 1
        fi
        sleep 0.1
    done
    return 0
}

# A FastCGI client that can pick its source address, which lighttpd
# cannot: fcgi ADDRESS [SOURCE [URI]] prints the status of the answer, or
# "dropped" when the application closed the connection without one.
cat >"$D/fcgi_client.py" <<'EOF'
import socket, struct, sys

def record(rtype, content):
    pad = (8 - len(content) % 8) % 8
    return (struct.pack(">BBHHBB", 1, rtype, 1, len(content), pad, 0)
            + content + b"\0" * pad)

def pair(name, value):
    out = b""
    for n in (len(name), len(value)):
        out += struct.pack(">B", n) if n < 128 else struct.pack(">I", n | 1 << 31)
    return out + name + value

addr, source = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
uri = sys.argv[3] if len(sys.argv) > 3 else "/health/live"
if addr.startswith("unix:"):
    s, target = socket.socket(socket.AF_UNIX), addr[5:]
else:
    host, port = addr.rsplit(":", 1)
    family = socket.AF_INET
    if host.startswith("["):
        host, family = host[1:-1], socket.AF_INET6
    s, target = socket.socket(family), (host, int(port))
    if source:
        s.bind((source, 0))
s.settimeout(5)
try:
    s.connect(target)
except OSError as e:
    print("connect failed: %s" % e)
    sys.exit(0)
params = b"".join(pair(k.encode(), v.encode()) for k, v in (
    ("REQUEST_METHOD", "GET"), ("REQUEST_URI", uri), ("SCRIPT_NAME", uri),
    ("SERVER_PROTOCOL", "HTTP/1.1"), ("REMOTE_ADDR", source or "127.0.0.1")))
s.sendall(record(1, struct.pack(">HB5x", 1, 0)) + record(4, params)
          + record(4, b"") + record(5, b""))
data = b""
try:
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
except OSError:
    pass
out, i = b"", 0
while i + 8 <= len(data):
    rtype, clen, plen = data[i + 1], struct.unpack(">H", data[i + 4:i + 6])[0], data[i + 6]
    if rtype == 6:
        out += data[i + 8:i + 8 + clen]
    i += 8 + clen + plen
status = [l.split()[1] for l in out.split(b"\r\n") if l.lower().startswith(b"status:")]
print(status[0].decode() if status else "dropped")
EOF

fcgi() {
    python3 "$D/fcgi_client.py" "$@" 2>&1
}

# wait_fcgi ADDRESS [SOURCE]: until /health/live answers 200 (at most 5 s).
wait_fcgi() {
    wf_n=0
    until [ "$(fcgi "$1" "${2:-}")" = 200 ]; do
        wf_n=$((wf_n + 1))
        [ "$wf_n" -gt 50 ] && return 1
        sleep 0.1
    done
}

# lighttpd_front NAME FASTCGI-LINE: starts lighttpd on 127.0.0.1:P_LT with
# conf/lighttpd-socket.conf, its socket path replaced by FASTCGI-LINE's
# target (a path, or "host:port" for TCP, "[::1]:port" for IPv6).
lighttpd_front() {
    lf_name=$1
    case $2 in
    /*) lf_sub="s#/run/ratelimit/fcgi.sock#$2#" ;;
    \[*) lf_host=${2%]:*}
        lf_sub="s#\"socket\" *=> *\"/run/ratelimit/fcgi.sock\"#\"host\" => \"${lf_host#[}\", \"port\" => ${2##*:}#" ;;
    *) lf_sub="s#\"socket\" *=> *\"/run/ratelimit/fcgi.sock\"#\"host\" => \"${2%:*}\", \"port\" => ${2##*:}#" ;;
    esac
    sed -e "s#127.0.0.1:8080#127.0.0.1:$P_LT#" -e "$lf_sub" \
        "$CONF_DIR/lighttpd-socket.conf" >"$D/$lf_name-fragment.conf"
    cat >"$D/$lf_name-lighttpd.conf" <<EOF
server.port = $P_LT
server.bind = "127.0.0.1"
server.document-root = "$D"
server.errorlog = "$D/$lf_name-lighttpd.log"
include "$D/$lf_name-fragment.conf"
EOF
    lighttpd_start "$D/$lf_name-lighttpd.conf" "$D/$lf_name-lighttpd.log" \
        "$P_LT"
}

# lt_req METHOD PATH [CURL-ARGS...]: a request to the lighttpd of
# lighttpd_front; sets STATUS, BODY and TIME like lib.sh's req.
lt_req() {
    R_METHOD=$1
    R_PATH=$2
    shift 2
    curl_request "http://127.0.0.1:$P_LT$R_PATH" -X "$R_METHOD" "$@"
}

perm() {
    stat -c '%a %U %G' "$1" 2>/dev/null || echo missing
}

# A tenant whose key is allowed 3 checks of /sock/* a minute.
TENANT=$(uniq_name sock)
new_tenant "$TENANT"
KEY=$(new_key "$TENANT")
new_sw_rule "$TENANT" '/sock/*' 3 60

# checks_3_then_429 WHAT: four checks through lighttpd, one subject.
checks_3_then_429() {
    c3_subj=$(uniq_name s)
    c3_all=
    # shellcheck disable=SC2034 # the loop variable is not needed
    for c3_i in 1 2 3 4; do
        lt_req POST /v1/check -H "X-API-Key: $KEY" \
            -H 'Content-Type: application/json' \
            --data-raw "$(check_body /sock/1 "$c3_subj")"
        c3_all="$c3_all $STATUS"
    done
    check "$1: three checks allowed, the fourth denied ($c3_all)" \
        eq "$c3_all" " 200 200 200 429"
}

# ---------------------------------------------------------------- unix socket

SOCK=$D/app.sock
app_conf "$D/unix.conf" "listen=unix:$SOCK" listen_mode=0600 \
    "listen_owner=$RUN_USER" "listen_group=$SOCK_GROUP" workers=2
app_start unix "$D/unix.conf"
FIRST=$APP_PID
check "listen = unix:PATH: the application serves on it" \
    wait_fcgi "unix:$SOCK"
check "listen_mode, listen_owner, listen_group are applied ($(perm "$SOCK"))" \
    eq "$(perm "$SOCK")" "600 $RUN_USER $SOCK_GROUP"
inode=$(stat -c %i "$SOCK" 2>/dev/null)

rc=0
timeout 10 "$BUILD/ratelimit-fcgi" -c "$D/unix.conf" >"$D/second.log" 2>&1 ||
    rc=$?
check "a second instance on the same path exits non-zero ($rc)" \
    ne "$rc" 0
check "a second instance says the path is in use" \
    grep -q "in use" "$D/second.log"
check "the second instance left the socket file alone" \
    eq "$(stat -c %i "$SOCK" 2>/dev/null)" "$inode"
check "the first instance keeps serving" eq "$(fcgi "unix:$SOCK")" 200

# The shipped lighttpd-socket.conf in front of it; an idle connection (one
# that sends nothing) holds one worker for libfcgi's 2 s, not the pool.
if lighttpd_front unix "$SOCK"; then
    lt_req GET /health/ready
    check "lighttpd-socket.conf: GET /health/ready through lighttpd is 200" \
        eq "$STATUS" 200
    checks_3_then_429 "lighttpd-socket.conf, unix socket"
    python3 -c '
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
time.sleep(3)
' "$SOCK" &
    idle=$!
    sleep 0.3
    lt_req GET /health/live
    t1=$TIME
    lt_req GET /health/live
    check "while a connection idles, requests still complete at once ($t1 s, $TIME s)" \
        lt_num "$(awk -v a="$t1" -v b="$TIME" 'BEGIN { print (a > b ? a : b) }')" 0.5
    check "... and answer 200" eq "$STATUS" 200
    wait "$idle" 2>/dev/null || true
else
    fail "lighttpd starts with conf/lighttpd-socket.conf"
fi

check "a graceful stop of the application ends it in time" stop_pid "$FIRST"
check "a graceful stop removes the socket file" test ! -e "$SOCK"
lt_req GET /health/live
check "nothing listens on the socket: lighttpd answers 503 ($STATUS)" \
    eq "$STATUS" 503
stop_pid "$LT_PID"

# A socket file nobody listens on (a crashed instance) is replaced.
python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.close()
' "$SOCK"
check "a stale socket file exists before the start" test -S "$SOCK"
app_start stale "$D/unix.conf"
check "a stale socket file is replaced, and the application serves" \
    wait_fcgi "unix:$SOCK"
stop_pid "$APP_PID"

echo "not a socket" >"$SOCK"
rc=0
timeout 10 "$BUILD/ratelimit-fcgi" -c "$D/unix.conf" >"$D/file.log" 2>&1 ||
    rc=$?
check "a path that is a regular file is refused ($rc)" ne "$rc" 0
check "... and kept" eq "$(cat "$SOCK" 2>/dev/null)" "not a socket"
rm -f "$SOCK"

# ---------------------------------------------------------------- TCP

app_conf "$D/tcp4.conf" "listen=127.0.0.1:$P_TCP4" workers=1
app_start tcp4 "$D/tcp4.conf"
TCP4=$APP_PID
wait_fcgi "127.0.0.1:$P_TCP4" || true
if lighttpd_front tcp4 "127.0.0.1:$P_TCP4"; then
    lt_req GET /health/ready
    check "listen = 127.0.0.1:PORT: /health/ready through lighttpd is 200" \
        eq "$STATUS" 200
    checks_3_then_429 "listen = 127.0.0.1:PORT"
else
    fail "lighttpd starts with conf/lighttpd-socket.conf (host 127.0.0.1)"
fi
stop_pid "$LT_PID"
stop_pid "$TCP4"

if python3 -c 'import socket; socket.socket(socket.AF_INET6).bind(("::1", 0))' \
    2>/dev/null; then
    app_conf "$D/tcp6.conf" "listen=[::1]:$P_TCP6" workers=1
    app_start tcp6 "$D/tcp6.conf"
    TCP6=$APP_PID
    wait_fcgi "[::1]:$P_TCP6" || true
    if lighttpd_front tcp6 "[::1]:$P_TCP6"; then
        lt_req GET /health/ready
        check "listen = [::1]:PORT: /health/ready through lighttpd is 200" \
            eq "$STATUS" 200
    else
        fail "lighttpd starts with conf/lighttpd-socket.conf (host ::1)"
    fi
    stop_pid "$LT_PID"
    stop_pid "$TCP6"
else
    echo "# skip: no IPv6 loopback here, [::1] not tested"
fi

# ---------------------------------------------------------------- FCGI_WEB_SERVER_ADDRS

app_conf "$D/addrs.conf" "listen=127.0.0.1:$P_ADDRS" workers=1
app_start addrs "$D/addrs.conf" FCGI_WEB_SERVER_ADDRS=127.0.0.2
ADDRS=$APP_PID
wait_fcgi "127.0.0.1:$P_ADDRS" 127.0.0.2 || true
check "FCGI_WEB_SERVER_ADDRS=127.0.0.2: a peer at 127.0.0.2 is served" \
    eq "$(fcgi "127.0.0.1:$P_ADDRS" 127.0.0.2)" 200
out=$(fcgi "127.0.0.1:$P_ADDRS" 127.0.0.1)
check "FCGI_WEB_SERVER_ADDRS=127.0.0.2: a peer at 127.0.0.1 is dropped ($out)" \
    eq "$out" dropped
if lighttpd_front addrs "127.0.0.1:$P_ADDRS"; then
    lt_req GET /health/live
    check "FCGI_WEB_SERVER_ADDRS: lighttpd connecting from 127.0.0.1 gets no answer ($STATUS)" \
        matches "$STATUS" '^5'
fi
stop_pid "$LT_PID"
check "FCGI_WEB_SERVER_ADDRS: the worker still serves 127.0.0.2 afterwards" \
    eq "$(fcgi "127.0.0.1:$P_ADDRS" 127.0.0.2)" 200
stop_pid "$ADDRS"

# ---------------------------------------------------------------- spawn-fcgi

if command -v spawn-fcgi >/dev/null 2>&1; then
    SPAWN_SOCK=$D/spawn.sock
    app_conf "$D/spawn.conf" listen= workers=2
    if [ "$(id -u)" = 0 ]; then
        set -- RL_USER="$RUN_USER" RL_GROUP="$RUN_GROUP" \
            RL_SOCKET_GROUP="$SOCK_GROUP"
    else
        set -- RL_USER= RL_SOCKET_GROUP=
    fi
    env "$@" RL_SOCKET="$SPAWN_SOCK" RL_BIN="$BUILD/ratelimit-fcgi" \
        RL_CONF="$D/spawn.conf" sh "$CONF_DIR/spawn-fcgi.sh" \
        >"$D/spawn.log" 2>&1 &
    SPAWN=$!
    PIDS="$PIDS $SPAWN"
    check "spawn-fcgi (conf/spawn-fcgi.sh): the application serves" \
        wait_fcgi "unix:$SPAWN_SOCK"
    check "spawn-fcgi: /health/ready is 200" \
        eq "$(fcgi "unix:$SPAWN_SOCK" "" /health/ready)" 200
    check "spawn-fcgi: socket mode 0660, group $SOCK_GROUP ($(perm "$SPAWN_SOCK"))" \
        eq "$(perm "$SPAWN_SOCK")" "660 $RUN_USER $SOCK_GROUP"
    check "spawn-fcgi -n: the script's pid is the master, as $RUN_USER" \
        eq "$(ps -o user= -o comm= -p "$SPAWN" | tr -s ' ')" \
        "$RUN_USER ratelimit-fcgi"
    workers=$(ps -e -o ppid= -o comm= | awk -v p="$SPAWN" \
        '$1 == p && $2 == "ratelimit-fcgi"' | wc -l)
    check "spawn-fcgi: the master runs 2 workers ($workers)" eq "$workers" 2
    rc=0
    env "$@" RL_SOCKET="$SPAWN_SOCK" RL_BIN="$BUILD/ratelimit-fcgi" \
        RL_CONF="$D/spawn.conf" timeout 10 sh "$CONF_DIR/spawn-fcgi.sh" \
        >"$D/spawn2.log" 2>&1 || rc=$?
    check "spawn-fcgi: a second start on the same socket fails ($rc)" ne "$rc" 0
    kill -TERM "$SPAWN"
    rc=0
    wait "$SPAWN" || rc=$?
    check "spawn-fcgi: SIGTERM stops the application with status 0 ($rc)" \
        eq "$rc" 0
else
    fail "spawn-fcgi is installed (apt-get install spawn-fcgi)"
fi

# ---------------------------------------------------------------- systemd

# Copies of the units with the paths of this test; for verify, nothing
# else changes, for the run below also the users (ratelimit may not exist).
SD=$D/systemd
mkdir -p "$SD/verify"
SD_SOCK=$D/sd/fcgi.sock
app_conf "$D/sd.conf" listen= workers=2
for unit in ratelimit-fcgi.socket ratelimit-fcgi.service; do
    sed -e "s#/usr/local/bin/ratelimit-fcgi#$BUILD/ratelimit-fcgi#g" \
        -e "s#/etc/ratelimit-fcgi/ratelimit.conf#$D/sd.conf#g" \
        -e "s#/run/ratelimit/fcgi.sock#$SD_SOCK#g" \
        "$CONF_DIR/$unit" >"$SD/verify/$unit"
    sed -e "s#^User=ratelimit#User=$RUN_USER#" \
        -e "s#^Group=ratelimit#Group=$RUN_GROUP#" \
        -e "s#^SocketGroup=www-data#SocketGroup=$SOCK_GROUP#" \
        -e "s#^SocketUser=root#SocketUser=$(id -un)#" \
        "$SD/verify/$unit" >"$SD/$unit"
done
if command -v systemd-analyze >/dev/null 2>&1; then
    rc=0
    (cd "$SD/verify" && systemd-analyze verify --man=no \
        ./ratelimit-fcgi.socket ./ratelimit-fcgi.service) \
        >"$D/verify.out" 2>&1 || rc=$?
    check "systemd-analyze verify: the units are valid ($rc: $(head -c 300 "$D/verify.out"))" \
        eq "$rc/$(wc -c <"$D/verify.out" | tr -d ' ')" 0/0
else
    echo "# skip: no systemd-analyze here; the units are not verified"
fi

# What systemd does with the two units, done by hand: the socket as
# [Socket] says, ExecStartPre, then ExecStart with the socket on fd 0 and
# stdout/stderr where StandardOutput/StandardError say (the journal is a
# file here), as User/Group.  It refuses units that would break this.
cat >"$D/activate.py" <<'EOF'
import grp, os, pwd, shlex, socket, subprocess, sys

def parse(path):
    sections, cur = {}, None
    for line in open(path):
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            cur = sections.setdefault(line.strip("[]"), [])
        else:
            k, v = line.split("=", 1)
            cur.append((k.strip(), v.strip()))
    return sections

def get(items, key, default=None):
    vals = [v for k, v in items if k == key]
    return vals[-1] if vals else default

sock_unit, svc_unit, journal = sys.argv[1:4]
sk = parse(sock_unit)["Socket"]
sv = parse(svc_unit)["Service"]
if get(sk, "Accept", "no") != "no":
    sys.exit("Accept must be no: one listening socket for the pool")
if get(sv, "StandardInput") != "socket":
    sys.exit("StandardInput must be socket")
for k in ("StandardOutput", "StandardError"):
    if get(sv, k) != "journal":
        sys.exit("%s is not journal: it would inherit the socket" % k)
path = get(sk, "ListenStream")
os.makedirs(os.path.dirname(path), mode=int(get(sk, "DirectoryMode", "0755"), 8),
            exist_ok=True)
if os.path.exists(path):
    os.unlink(path)
s = socket.socket(socket.AF_UNIX)
s.bind(path)
os.chown(path, pwd.getpwnam(get(sk, "SocketUser", "root")).pw_uid,
         grp.getgrnam(get(sk, "SocketGroup", "root")).gr_gid)
os.chmod(path, int(get(sk, "SocketMode", "0666"), 8))
s.listen(int(get(sk, "Backlog", "128")))
os.dup2(s.fileno(), 0)
s.close()
log = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
os.dup2(log, 1)
os.dup2(log, 2)
os.close(log)
user = get(sv, "User")
if user and os.getuid() == 0:
    os.setgroups([])
    os.setgid(grp.getgrnam(get(sv, "Group", user)).gr_gid)
    os.setuid(pwd.getpwnam(user).pw_uid)
os.umask(int(get(sv, "UMask", "0022"), 8))
for k, v in sv:
    if k == "ExecStartPre" and subprocess.call(shlex.split(v)) != 0:
        sys.exit("ExecStartPre failed: " + v)
argv = shlex.split(get(sv, "ExecStart"))
os.execv(argv[0], argv)
EOF

python3 "$D/activate.py" "$SD/ratelimit-fcgi.socket" \
    "$SD/ratelimit-fcgi.service" "$D/journal.log" >"$D/activate.out" 2>&1 &
MAINPID=$!
PIDS="$PIDS $MAINPID"
check "systemd socket activation: the application serves on fd 0" \
    wait_fcgi "unix:$SD_SOCK"
check "systemd: the socket has SocketMode 0660 and SocketGroup ($(perm "$SD_SOCK"))" \
    eq "$(perm "$SD_SOCK")" "660 $(id -un) $SOCK_GROUP"
check "systemd: the service runs as User=$RUN_USER" \
    eq "$(ps -o user= -p "$MAINPID" | tr -d ' ')" "$RUN_USER"
if lighttpd_front systemd "$SD_SOCK"; then
    checks_3_then_429 "systemd socket activation behind lighttpd-socket.conf"
else
    fail "lighttpd starts with conf/lighttpd-socket.conf (systemd socket)"
fi
check "systemd: the log goes to StandardOutput/StandardError (journal)" \
    grep -q "listening on fd 0" "$D/journal.log"

# ExecReload, every line, as systemd runs them.
rc=0
grep '^ExecReload=' "$SD/ratelimit-fcgi.service" | sed 's/^ExecReload=//' |
    while IFS= read -r cmd; do
        # shellcheck disable=SC2046 # split the command line into words
        set -- $(printf '%s\n' "$cmd" | sed "s/\$MAINPID/$MAINPID/g")
        "$@" >>"$D/reload.out" 2>&1 || exit 1
    done || rc=$?
check "systemd: ExecReload succeeds ($rc)" eq "$rc" 0
n=0
until grep -q "configuration reloaded" "$D/journal.log" || [ "$n" -gt 30 ]; do
    n=$((n + 1))
    sleep 0.1
done
check "systemd: ExecReload makes the master re-read its configuration" \
    grep -q "configuration reloaded" "$D/journal.log"
lt_req GET /health/ready
check "systemd: still serving after the reload" eq "$STATUS" 200

# systemctl stop with KillMode=control-group: KillSignal to the master and
# every worker at once; all must be gone well before TimeoutStopSec.
group="$MAINPID $(ps -e -o pid= -o ppid= | awk -v p="$MAINPID" '$2 == p { print $1 }')"
signal=$(sed -n 's/^KillSignal=SIG//p' "$SD/ratelimit-fcgi.service")
start=$(date +%s)
# shellcheck disable=SC2086
kill -s "${signal:-TERM}" $group
rc=0
wait "$MAINPID" || rc=$?
left=0
for p in $group; do
    n=0
    while kill -0 "$p" 2>/dev/null && [ "$n" -lt 50 ]; do
        n=$((n + 1))
        sleep 0.1
    done
    kill -0 "$p" 2>/dev/null && left=$((left + 1))
done
check "systemd stop: the master exits with status 0, not a failure to restart ($rc)" \
    eq "$rc" 0
check "systemd stop: no process of the group is left ($left)" eq "$left" 0
check "systemd stop: within TimeoutStopSec ($(($(date +%s) - start)) s)" \
    le $(($(date +%s) - start)) 15
stop_pid "$LT_PID"

finish
