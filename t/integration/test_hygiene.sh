#!/bin/sh
# test_hygiene.sh -- process hygiene: user, group, allow_root, pid_file,
# what -t checks, and log files handed to the user and rotated.
#
# An application of its own started as root with user = nobody, its
# socket, pid file and log in a directory nobody owns, lighttpd in front;
# then the refusals (no user as root, a running master in the pid file, a
# user it cannot switch to) and logrotate run for real on the shipped
# snippet.
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

serve_dir ratelimit-hygiene
P_LT=$((PORT + 62))
R=$D/run
mkdir -p "$R"
FCGI=$BUILD/ratelimit-fcgi

# ---------------------------------------------------------------- -t

# Every error of a file, each with its line: the listen syntax that used
# to pass -t and fail at start, a user and a group that do not exist, and
# directories that do not exist.
cat >"$D/bad.conf" <<EOF
listen = tcp://127.0.0.1:19099
user = no-such-user-rl
group = no-such-group-rl
pid_file = $D/missing/ratelimit-fcgi.pid
wrokers = 3
log = $D/missing/error.log
EOF
"$FCGI" -t -c "$D/bad.conf" >"$D/bad.out" 2>&1
rc=$?
out=$(cat "$D/bad.out")
check "-t: a file with six errors fails (exit $rc)" eq "$rc" 1
check "-t: listen = tcp://... is refused at -t with file:line and the accepted forms" \
    contains "$out" "bad.conf:1: listen: \"tcp://127.0.0.1:19099\": write the address without a scheme, as \"127.0.0.1:9000\" or \"unix:/path\""
check "-t: a user that does not exist, with its line" \
    contains "$out" "bad.conf:2: user: no user \"no-such-user-rl\""
check "-t: a group that does not exist, with its line" \
    contains "$out" "bad.conf:3: group: no group \"no-such-group-rl\""
check "-t: the pid file's directory must exist" \
    contains "$out" "bad.conf:4: pid_file: directory $D/missing does not exist"
check "-t: an unknown key in the same file is reported too" \
    contains "$out" "bad.conf:5: unknown key \"wrokers\""
check "-t: the log's directory must exist" \
    contains "$out" "bad.conf:6: log: directory $D/missing does not exist"
check "-t: every error on a line of its own (6 + the summary)" \
    eq "$(grep -c 'bad.conf' "$D/bad.out")" 7
printf 'listen = unix:%s/missing/app.sock\n' "$D" >"$D/sock.conf"
out=$("$FCGI" -t -c "$D/sock.conf" 2>&1)
check "-t: a Unix socket's directory must exist" \
    contains "$out" "sock.conf:1: listen: directory $D/missing does not exist"

if [ "$(id -u)" != 0 ]; then
    fail "the privilege tests run as root (uid $(id -u))"
    finish
fi

# ---------------------------------------------------------------- root

app_conf_lines "$D/root.conf" "listen = unix:$R/root.sock" "workers = 1" \
    "allow_root = off"
out=$("$FCGI" -t -c "$D/root.conf" 2>&1)
check "-t as root without user: valid, with a warning naming the user key" \
    contains "$out" "warning: $D/root.conf: started as root without \"user\""
"$FCGI" -c "$D/root.conf" >"$D/root.out" 2>&1
rc=$?
check "started as root without user: refused (exit $rc)" eq "$rc" 1
check "... with a message naming the user key and allow_root" \
    contains "$(cat "$D/root.out")" "set \"user\" to the account they should run as (user = ratelimit), or allow_root = on"
check "... before binding the socket" test ! -e "$R/root.sock"
app_conf_lines "$D/rootuser.conf" "listen = unix:$R/root.sock" \
    "workers = 1" "allow_root = off" "user = root"
"$FCGI" -c "$D/rootuser.conf" >"$D/root.out" 2>&1
check "user = root without allow_root: refused" \
    contains "$(cat "$D/root.out")" "started as root with user = root"
app_conf_lines "$D/asnobody.conf" "listen = unix:$R/x.sock" "user = root"
setpriv --reuid=nobody --regid="$(id -gn nobody)" --clear-groups \
    "$FCGI" -c "$D/asnobody.conf" >"$D/nobody.out" 2>&1
rc=$?
check "not started as root, user = root is refused (exit $rc)" \
    contains "$rc $(cat "$D/nobody.out")" "1 "
check "... saying only a master started as root can switch" \
    contains "$(cat "$D/nobody.out")" "only a master started as root can switch"

# ---------------------------------------------------------------- user

# The pool's directory belongs to nobody, so that the master can remove
# its socket and pid file at exit; the log is created by root first.
chown nobody "$R"
PIDF=$R/ratelimit-fcgi.pid
app_conf_lines "$D/app.conf" "listen = unix:$R/app.sock" "workers = 2" \
    "allow_root = off" "user = nobody" "pid_file = $PIDF" \
    "log = $R/error.log" "access_log = $R/access.log"
"$FCGI" -t -c "$D/app.conf" >/dev/null 2>&1
check "-t accepts the file with user = nobody and pid_file" eq "$?" 0
# A pid file left by a crash: it names a process that is gone.
sh -c 'echo $$' >"$PIDF"
dead=$(cat "$PIDF")
"$FCGI" -c "$D/app.conf" >"$D/app.out" 2>&1 &
MASTER=$!
PIDS="$PIDS $MASTER"
check "the application starts with 2 workers" wait_workers "$MASTER" 2
check "pid_file: it names the master ($(cat "$PIDF" 2>/dev/null) = $MASTER)" \
    retry 20 eq "$(cat "$PIDF" 2>/dev/null)" "$MASTER"
check "pid_file: a stale one (process $dead, gone) was replaced, and said so" \
    contains "$(cat "$R/error.log")" "named process $dead, which is gone"
users=$( { ps -o user= -p "$MASTER"; ps -o user= --ppid "$MASTER"; } |
    sort -u | tr -d ' \n')
check "user = nobody: the master and the workers run as nobody ($users)" \
    eq "$users" nobody
w=$(workers_of "$MASTER" | head -n 1)
ids=$(awk '/^(Uid|Gid|Groups):/ { $1 = ""; printf "%s;", $0 }' \
    "/proc/$w/status")
nobody_uid=$(id -u nobody)
nobody_gid=$(id -g nobody)
check "a worker has every uid and gid of nobody, and no root group ($ids)" \
    eq "$ids" " $nobody_uid $nobody_uid $nobody_uid $nobody_uid; $nobody_gid $nobody_gid $nobody_gid $nobody_gid; $nobody_gid;"
check "the log says who the pool runs as" \
    contains "$(cat "$R/error.log")" "as uid $nobody_uid gid $nobody_gid"
check "the log files were handed to nobody ($(stat -c %U "$R/error.log" "$R/access.log" | tr '\n' ' '))" \
    eq "$(stat -c %U "$R/error.log" "$R/access.log" | tr '\n' ' ')" "nobody nobody "

printf '%s\n' "server.port = $P_LT" 'server.bind = "127.0.0.1"' \
    "server.document-root = \"$D\"" "server.errorlog = \"$D/lighttpd.log\"" \
    'server.modules += ( "mod_fastcgi" )' \
    "fastcgi.server = ( \"/\" => (( \"socket\" => \"$R/app.sock\", \"check-local\" => \"disable\" )) )" \
    >"$D/lighttpd.conf"
lighttpd_start "$D/lighttpd.conf" "$D/lighttpd.log" "$P_LT" ||
    fail "lighttpd starts in front of the application"
L=http://127.0.0.1:$P_LT
fetch "$L/v1/check" -H "X-API-Key: $DEMO_KEY" --data-raw \
    '{"route":"/hygiene/user","subject":"x"}'
check "the pool running as nobody answers a check ($STATUS)" eq "$STATUS" 200

# A second start while the first runs.
"$FCGI" -c "$D/app.conf" >"$D/second.out" 2>&1
rc=$?
check "pid_file: a second start is refused (exit $rc)" eq "$rc" 1
check "... naming the running master" \
    contains "$(cat "$R/error.log")" "$PIDF names process $MASTER, a running ratelimit-fcgi"
check "... and the pid file still names the first" eq "$(cat "$PIDF")" "$MASTER"

# SIGHUP cannot change who the pool runs as.
app_conf_lines "$D/app.conf" "listen = unix:$R/app.sock" "workers = 2" \
    "allow_root = on" "user = nobody" "pid_file = $PIDF" \
    "log = $R/error.log" "access_log = $R/access.log"
kill -HUP "$MASTER"
check "SIGHUP with allow_root changed: kept, with a warning" \
    retry 30 grep -q "allow_root and pid_file cannot change without a restart" \
    "$R/error.log"

# ---------------------------------------------------------------- logrotate

# The shipped snippet, pointed at this pool's files, run for real: the
# logs are renamed, SIGUSR1 goes to the pid in pid_file, and the master
# and workers write to new files, still owned by nobody.
if command -v logrotate >/dev/null 2>&1; then
    sed -e "s#/var/log/ratelimit-fcgi/\*\.log#$R/*.log#" \
        -e "s#/run/ratelimit-fcgi.pid#$PIDF#g" \
        -e 's/^\( *\)daily$/\1size 1/' \
        "$ROOT/conf/ratelimit-fcgi.logrotate" >"$D/logrotate.conf"
    # logrotate refuses a directory others may write to, like nobody's.
    chown root "$R"
    chmod 755 "$R"
    logrotate -d -s "$D/logrotate.state" "$D/logrotate.conf" \
        >"$D/logrotate-d.out" 2>&1
    rc=$?
    check "logrotate -d accepts the shipped snippet (exit $rc)" eq "$rc" 0
    [ "$rc" = 0 ] || head -n 5 "$D/logrotate-d.out" | sed 's/^/    /'
    logrotate -f -s "$D/logrotate.state" "$D/logrotate.conf" \
        >"$D/logrotate.out" 2>&1
    rc=$?
    check "logrotate rotates the pool's logs (exit $rc)" eq "$rc" 0
    check "... the old log is kept as error.log.1" test -s "$R/error.log.1"
    check "the master reopened its log after logrotate's SIGUSR1" \
        retry 30 grep -q "SIGUSR1, logs reopened" "$R/error.log"
    check "the new log belongs to nobody ($(stat -c %U "$R/error.log"))" \
        eq "$(stat -c %U "$R/error.log")" nobody
    fetch "$L/v1/check" -H "X-API-Key: $DEMO_KEY" --data-raw \
        '{"route":"/hygiene/rotated","subject":"x"}'
    check "after the rotation a check is answered ($STATUS)" eq "$STATUS" 200
    chown nobody "$R"
else
    fail "logrotate is installed (apt-get install logrotate)"
fi

# ---------------------------------------------------------------- stop

kill -TERM "$MASTER"
n=0
while alive "$MASTER" && [ "$n" -lt 100 ]; do
    sleep 0.1
    n=$((n + 1))
done
wait "$MASTER"
check "SIGTERM: the master as nobody exits 0" eq "$?" 0
check "SIGTERM: the pid file is removed" test ! -e "$PIDF"
check "SIGTERM: the socket is removed" test ! -e "$R/app.sock"

# A log file that cannot be opened (its directory exists) stops the start
# with the reason on stderr.
app_conf_lines "$D/badlog.conf" "listen = unix:$R/badlog.sock" \
    "log = /proc/ratelimit-fcgi.log" "allow_root = on"
out=$(timeout 10 "$BUILD/ratelimit-fcgi" -c "$D/badlog.conf" 2>&1)
rc=$?
check "a log file that cannot be opened: exit 1 ($rc)" eq "$rc" 1
check "a log file that cannot be opened: the reason ($out)" \
    contains "$out" "log /proc/ratelimit-fcgi.log: "

finish
