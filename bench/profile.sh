#!/bin/sh
# Counts what one warm check costs (`make profile`): CPU instructions
# (valgrind --tool=callgrind) and system calls (strace -c) per request, for
# ratelimit-fcgi and for the one-EVALSHA probe of the benchmark.  Counts do
# not depend on the machine's load the way times do, so two runs of this
# give the same figures within a fraction of a percent.
#
# Each program runs as one process behind spawn-fcgi -n (ratelimit-fcgi
# with workers = 0; the probe with one worker, followed into it) and
# lighttpd, once for N1 and once for N2 requests through one keep-alive
# connection (curl), under the counting tool.  The figure per request is
# (count at N2 - count at N1) / (N2 - N1): start-up, the first request's
# PostgreSQL queries and exit cancel out.  The request is the benchmark's:
# POST /v1/check with the demo key, one subject, a rule of one limit.
#
# Inside Redis, the same way: a private redis-server under callgrind runs
# N1 and then N2 calls of a script, and the difference per call is what
# one call costs Redis.  The scripts: lua/check.lua as the service sends
# it (a one-limit sliding window, one subject, with the worker's reply
# slot and a new call id each time), the same without the reply slot, the
# same for a one-limit token bucket, a check that takes a lease on a rule
# of one concurrency limit (max 1,000,000,000, lease ttl 60 s), that check
# followed by the release of its lease, and the EVALSHA probe's one-liner.
#
# Writes the table to build/profile.txt, with the functions that cost c
# and e most per request (inclusive: with what they call; also the
# difference of the two runs), and keeps the callgrind files of the N2
# runs in build/profile/ (callgrind_annotate reads them).
#
# Environment (defaults in brackets):
#   PROFILE_N1        [500]    requests of the short run
#   PROFILE_N2        [2500]   requests of the long run
#   PROFILE_TOP       [25]     functions listed for c and e
#   PROFILE_PORT      [28085]  the stack's lighttpd (unused but started)
#   PROFILE_APP_PORT  [28086]  lighttpd -> the program measured
#   PROFILE_REDIS_PORT [26385] the private Redis
#   PROFILE_PG_PORT   [25435]  the private PostgreSQL
#   PROFILE_CG_REDIS_PORT [26386] the Redis run under callgrind
#   BUILD             [build]
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

BUILD=${BUILD:-build}
case $BUILD in
/*) ;;
*) BUILD=$ROOT/$BUILD ;;
esac
N1=${PROFILE_N1:-500}
N2=${PROFILE_N2:-2500}
PORT=${PROFILE_PORT:-28085}
APP_PORT=${PROFILE_APP_PORT:-28086}
REDIS_PORT=${PROFILE_REDIS_PORT:-26385}
PG_PORT=${PROFILE_PG_PORT:-25435}
CG_REDIS_PORT=${PROFILE_CG_REDIS_PORT:-26386}
DEMO_KEY=rl_demo_abc123xyz
LIGHTTPD=/usr/sbin/lighttpd
RESULT=$BUILD/profile.txt
KEEP=$BUILD/profile

say() {
    echo "profile: $*"
}

die() {
    echo "profile: $*" >&2
    exit 1
}

for n in "$N1" "$N2"; do
    case $n in
    '' | *[!0-9]*) die "PROFILE_N1 and PROFILE_N2 must be whole numbers" ;;
    esac
done
if [ "$N1" -lt 10 ] || [ "$N2" -le "$N1" ] || [ "$N2" -gt 100000 ]; then
    die "need 10 <= PROFILE_N1 < PROFILE_N2 <= 100000"
fi
for f in "$BUILD/ratelimit-fcgi" "$BUILD/bench_probe"; do
    [ -x "$f" ] || die "$f is missing: run make profile"
done
[ -f "$BUILD/check.lua" ] || die "$BUILD/check.lua is missing: run make profile"
for cmd in valgrind strace spawn-fcgi curl redis-server redis-cli sha1sum \
    "$LIGHTTPD"; do
    command -v "$cmd" >/dev/null 2>&1 ||
        die "$cmd is missing: run make deps (as root)"
done

# pid_alive, wait_gone, end_pids, descendants
# shellcheck source-path=SCRIPTDIR source=../scripts/proc.sh
. "$ROOT/scripts/proc.sh"
# curl_checks
# shellcheck source-path=SCRIPTDIR source=checks.sh
. "$ROOT/bench/checks.sh"

VAR=""
STACK_STARTED=0
APP_PID=""
MEASURE_TOOL=""
CG_REDIS_PID=""

# shellcheck disable=SC2317  # reached from the EXIT trap
cleanup() {
    trap - EXIT INT TERM
    stop_measured
    [ -z "$CG_REDIS_PID" ] || end_pids "$CG_REDIS_PID" || true
    if [ -n "$VAR" ]; then
        if [ -f "$VAR/lighttpd-app.pid" ]; then
            end_pids "$(cat "$VAR/lighttpd-app.pid")" || true
        fi
        if [ "$STACK_STARTED" = 1 ]; then
            stack stop >/dev/null 2>&1 || true
        fi
        rm -rf "$VAR"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

VAR=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-profile.XXXXXX")
chmod 755 "$VAR"

stack() {
    VAR=$VAR PORT=$PORT REDIS_PORT=$REDIS_PORT PG_PORT=$PG_PORT \
        BUILD=$BUILD WORKERS=1 EXTRA_CONF="log_level = warn
max_requests = 0
key_cache_ttl = 3600
rule_cache_ttl = 3600" sh scripts/dev-stack.sh "$@"
}

say "starting PostgreSQL, Redis and lighttpd in $VAR"
STACK_STARTED=1
stack start >"$VAR/stack.out" 2>&1 || {
    cat "$VAR/stack.out" >&2
    die "the stack did not start"
}

# The measured program's configuration: the stack's, one process.
grep -v -e '^workers' -e '^listen' -e '^pid_file' "$VAR/ratelimit.conf" \
    >"$VAR/profile.conf"
echo "workers = 0" >>"$VAR/profile.conf"

mkdir -p "$VAR/htdocs"
cat >"$VAR/lighttpd-app.conf" <<EOF
server.modules = ( "mod_fastcgi" )
server.port = $APP_PORT
server.bind = "127.0.0.1"
server.document-root = "$VAR/htdocs"
server.errorlog = "$VAR/lighttpd-app-error.log"
server.pid-file = "$VAR/lighttpd-app.pid"
fastcgi.server = ( "/" => ((
    "socket" => "$VAR/fcgi.sock",
    "check-local" => "disable"
)) )
EOF
"$LIGHTTPD" -f "$VAR/lighttpd-app.conf" || die "lighttpd did not start"

# The checks sent, of route /bench and /bench-over.
for r in bench bench-over; do
    for n in "n1 $N1" "n2 $N2" "one 1"; do
        # shellcheck disable=SC2086  # a name and a count
        set -- $n
        curl_checks "$2" "http://127.0.0.1:$APP_PORT/v1/check" "$DEMO_KEY" \
            "/$r" bench 10 >"$VAR/$r.$1.curl"
    done
done

# wait_ready PID LOG WHAT CMD...: waits until CMD succeeds (every 0.1 s,
# at most 30 s: under valgrind, start-up takes seconds); dies with LOG
# when it never does or PID has exited.
wait_ready() {
    wr_pid=$1 wr_log=$2 wr_what=$3
    shift 3
    wr_i=0
    until "$@"; do
        wr_i=$((wr_i + 1))
        if [ "$wr_i" -gt 300 ] || ! kill -0 "$wr_pid" 2>/dev/null; then
            cat "$wr_log" >&2
            die "$wr_what did not answer"
        fi
        sleep 0.1
    done
}

# Stops the measured program and waits until its tool has written its
# counts (bounded: 30 s, then SIGKILL).
stop_measured() {
    [ -n "$APP_PID" ] || return 0
    # strace writes its counts when the program it traces has ended, so
    # the signal goes to that program (valgrind runs inside it).
    sm_target=$APP_PID
    if [ "$MEASURE_TOOL" = strace ]; then
        sm_target=$(pgrep -P "$APP_PID" | head -n 1)
        [ -n "$sm_target" ] || sm_target=$APP_PID
    fi
    kill -"$STOP_SIGNAL" "$sm_target" 2>/dev/null || true
    if ! wait_gone "$APP_PID" 300; then
        kill -KILL "$APP_PID" 2>/dev/null || true
        wait_gone "$APP_PID" 20 || true
    fi
    APP_PID=""
}

# 0 when the measured program answers the first request as it should.
app_answers() {
    [ "$(curl -s -K "$VAR/$m_route.one.curl")" = "$m_want" ]
}

# Runs program $1 (noop: the no-op probe; probe: the EVALSHA probe; ours:
# ratelimit-fcgi; over: ratelimit-fcgi with every check over the limit,
# answered from the over-limit cache) under tool $2 (callgrind|strace) for
# $3 requests; the tool's output goes to $VAR/$1.$2.$3(.PID).
measure() {
    rm -f "$VAR/fcgi.sock"
    m_route=bench m_want=200
    case $1 in
    ours | over)
        [ "$1" = ours ] || m_route=bench-over m_want=429
        set -- "$1" "$2" "$3" "$BUILD/ratelimit-fcgi" -c "$VAR/profile.conf"
        STOP_SIGNAL=QUIT
        ;;
    noop)
        set -- "$1" "$2" "$3" "$BUILD/bench_probe" noop 1
        STOP_SIGNAL=TERM
        ;;
    *)
        set -- "$1" "$2" "$3" "$BUILD/bench_probe" evalsha 127.0.0.1 \
            "$REDIS_PORT" 1
        STOP_SIGNAL=TERM
        ;;
    esac
    m_out=$VAR/$1.$2.$3
    MEASURE_TOOL=$2
    case $2 in
    callgrind)
        m_tool="$(command -v valgrind) --tool=callgrind --trace-children=yes"
        m_tool="$m_tool --callgrind-out-file=$m_out.%p"
        ;;
    *) m_tool="$(command -v strace) -f -c -o $m_out" ;;
    esac
    m_n=$3 m_what="$1 under $2"
    shift 3
    # shellcheck disable=SC2086  # m_tool is words
    spawn-fcgi -n -s "$VAR/fcgi.sock" -M 0600 -- $m_tool "$@" \
        >"$VAR/measured.log" 2>&1 &
    APP_PID=$!
    wait_ready "$APP_PID" "$VAR/measured.log" "$m_what" app_answers
    curl -s -K "$VAR/$m_route.n$([ "$m_n" = "$N1" ] && echo 1 || echo 2).curl" \
        >"$VAR/status" || die "curl failed"
    m_ok=$(grep -c "^$m_want\$" "$VAR/status" || true)
    [ "$m_ok" -eq "$m_n" ] ||
        die "$m_what: $m_ok of $m_n answers were $m_want"
    stop_measured
}

# Instructions (Ir) in the callgrind files $VAR/$1.callgrind.$2.*.
instructions() {
    cat "$VAR/$1.callgrind.$2".* | awk '$1 == "summary:" { s += $2 }
        END { printf "%.0f\n", s }'
}

# Prints "name calls" for each syscall in strace -c output $1.
syscalls() {
    awk '$1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "total" { print $NF, $4 }' "$1"
}

# The over-limit target's rule: one check an hour.
"$BUILD/ratelimitctl" -c "$VAR/ratelimit.conf" rule add demo-corp \
    --route /bench-over --algorithm sliding_window --limit 1 --window 3600 \
    >/dev/null || die "ratelimitctl could not add the /bench-over rule"

PROGRAMS="noop probe ours over"
for prog in $PROGRAMS; do
    for n in "$N1" "$N2"; do
        say "$prog under callgrind, $n requests"
        measure "$prog" callgrind "$n"
        say "$prog under strace, $n requests"
        measure "$prog" strace "$n"
    done
done

# ------------------------------------------------------- inside Redis

# The calls, one inline command a line: $VAR/calls.slot (check.lua as the
# service sends it for a one-limit sliding window: the reply slot and a
# new call id each time), calls.plain (without them), calls.tb (as slot,
# for a one-limit token bucket), calls.lease (a check taking a lease, as
# the service sends it), calls.pair (each such check, then its release:
# two lines per pair) and calls.probe (the probe's script).
CHECK_SHA=$(sha1sum "$BUILD/check.lua" | cut -d' ' -f1)
PROBE_SHA=$(printf '%s' "return redis.call('INCR', KEYS[1])" | sha1sum |
    cut -d' ' -f1)
awk -v n="$N2" -v sha="$CHECK_SHA" -v probe="$PROBE_SHA" -v d="$VAR" '
    BEGIN {
        k = "rl:{11111111-2222-3333-4444-555555555555}"
        lim = "1 0 1 sliding_window 1000000000 3600 0 0"
        tb = "1 0 1 token_bucket 1000000000 100000 0 0"
        cc = "1 3 1 concurrency 1000000000 60000000 0 0"
        for (i = 1; i <= n; i++) {
            id = sprintf("%032x", i)
            lease = sprintf("EVALSHA %s 3 %s:1:3:cbench %s:lease:%s " \
                "%s:req:5f3a9c0e12ab44d1 %s %s 60000 %x", sha, k, k, id, k,
                cc, id, i)
            print lease >d "/calls.lease"
            print lease >d "/calls.pair"
            printf "EVALSHA %s 1 %s:lease:%s - r %s\n", sha, k, id, id \
                >d "/calls.pair"
            printf "EVALSHA %s 2 %s:1:1:sbench %s:req:5f3a9c0e12ab44d1 " \
                "%s %x\n", sha, k, k, lim, i >d "/calls.slot"
            printf "EVALSHA %s 2 %s:1:2:sbench %s:req:5f3a9c0e12ab44d1 " \
                "%s %x\n", sha, k, k, tb, i >d "/calls.tb"
            printf "EVALSHA %s 1 %s:1:1:sbench %s\n", sha, k, lim \
                >d "/calls.plain"
            printf "EVALSHA %s 1 bench:probe\n", probe >d "/calls.probe"
        }
    }'

# 0 when the Redis under callgrind answers PING.
redis_answers() {
    [ "$(redis-cli -p "$CG_REDIS_PORT" PING 2>/dev/null)" = PONG ]
}

# Runs the first $2 calls of $VAR/calls.$1 in a redis-server under
# callgrind; its counts go to $VAR/redis-$1.callgrind.$2.
redis_measure() {
    valgrind --tool=callgrind \
        --callgrind-out-file="$VAR/redis-$1.callgrind.$2.%p" \
        redis-server --bind 127.0.0.1 --port "$CG_REDIS_PORT" --save '' \
        --appendonly no --dir "$VAR" >"$VAR/redis-cg.log" 2>&1 &
    CG_REDIS_PID=$!
    wait_ready "$CG_REDIS_PID" "$VAR/redis-cg.log" \
        "redis-server under callgrind" redis_answers
    redis-cli -p "$CG_REDIS_PORT" -x SCRIPT LOAD <"$BUILD/check.lua" \
        >/dev/null || die "SCRIPT LOAD of check.lua failed"
    redis-cli -p "$CG_REDIS_PORT" SCRIPT LOAD \
        "return redis.call('INCR', KEYS[1])" >/dev/null ||
        die "SCRIPT LOAD of the probe's script failed"
    head -n "$2" "$VAR/calls.$1" | redis-cli -p "$CG_REDIS_PORT" \
        >"$VAR/redis-$1.out" 2>&1 || die "the $1 calls failed"
    ! grep -q ERR "$VAR/redis-$1.out" ||
        die "the $1 calls failed: $(grep -m 1 ERR "$VAR/redis-$1.out")"
    redis-cli -p "$CG_REDIS_PORT" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
    wait_gone "$CG_REDIS_PID" 300 || die "redis-server did not stop"
    CG_REDIS_PID=""
}

REDIS_SCRIPTS="slot plain tb lease pair probe"
for rs in $REDIS_SCRIPTS; do
    for n in "$N1" "$N2"; do
        say "Redis under callgrind, $n calls ($rs)"
        redis_measure "$rs" "$n"
    done
done

# Prints "instructions function" for each function of callgrind file $1,
# inclusive, the largest count where a name appears more than once; a
# function without a name is shown with its library.
functions() {
    callgrind_annotate --inclusive=yes --threshold=100 --auto=no "$1" \
        2>/dev/null | awk '/^ *[0-9,]+ +\( *[0-9.]+%\) / {
            n = $1; gsub(",", "", n)
            f = $0; sub(/^ *[0-9,]+ +\( *[0-9.]+%\) +/, "", f)
            lib = ""
            if (match(f, / \[[^]]*\]$/)) {
                lib = substr(f, RSTART + 2, RLENGTH - 3)
                sub(/.*\//, "", lib)
                f = substr(f, 1, RSTART - 1)
            }
            sub(/^.*:/, "", f)
            if (f ~ /^0x/ && lib != "") f = f " (" lib ")"
            if (f ~ /^(main|master_run|__libc_start_main.*|\(below main\)|PROGRAM TOTALS)$/)
                next
            if (n + 0 > c[f]) c[f] = n + 0
        } END { for (f in c) print c[f], f }'
}

# The TOP functions of program $1 by instructions per request.
top_functions() {
    # One process each (workers = 0): one file.
    for tf in "$VAR/$1.callgrind.$N1".*; do
        functions "$tf" >"$VAR/$1.functions.$N1"
    done
    for tf in "$VAR/$1.callgrind.$N2".*; do
        functions "$tf" >"$VAR/$1.functions.$N2"
    done
    awk -v d=$((N2 - N1)) '{ n = $1; sub(/^[0-9]+ /, "") }
        NR == FNR { a[$0] = n; next }
        { v = (n - a[$0]) / d; if (v >= 100) printf "%10.0f  %s\n", v, $0 }' \
        "$VAR/$1.functions.$N1" "$VAR/$1.functions.$N2" |
        sort -rn | head -n "${PROFILE_TOP:-25}"
}

rm -rf "$KEEP"
mkdir -p "$KEEP"
cp "$VAR"/*.callgrind."$N2".* "$KEEP"/

{
    echo "ratelimit-fcgi profile, $(date -u '+%Y-%m-%d %H:%M UTC')," \
        "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "per request (POST /v1/check, demo key, one-limit rule), from runs of"
    echo "$N1 and $N2 requests: (count at $N2 - count at $N1) / $((N2 - N1));"
    echo "a: no-op probe, b: EVALSHA probe, c: ratelimit-fcgi (warm, allowed),"
    echo "e: ratelimit-fcgi over the limit (429 from the over-limit cache)"
    echo
    for f in $PROGRAMS; do
        echo "$f instructions $N1 $(instructions "$f" "$N1")"
        echo "$f instructions $N2 $(instructions "$f" "$N2")"
        for n in "$N1" "$N2"; do
            syscalls "$VAR/$f.strace.$n" | sed "s/^/$f $n /" |
                awk '{ print $1, $3, $2, $4 }'
        done
    done | awk -v n1="$N1" -v n2="$N2" '
        { c[$1, $2, $3] = $4; if ($2 != "instructions") names[$2] = 1 }
        function per(p, s) { return (c[p, s, n2] - c[p, s, n1]) / (n2 - n1) }
        END {
            split("noop probe ours over", prog, " ")
            printf "%-22s %10s %10s %10s %10s\n", "", "a", "b", "c", "e"
            printf "%-22s", "instructions"
            for (i = 1; i <= 4; i++)
                printf " %10.0f", per(prog[i], "instructions")
            printf "\n"
            n = 0
            for (s in names)
                sorted[++n] = s
            for (i = 1; i <= n; i++)
                for (j = i + 1; j <= n; j++)
                    if (sorted[j] < sorted[i]) {
                        t = sorted[i]; sorted[i] = sorted[j]; sorted[j] = t
                    }
            for (k = 1; k <= n; k++) {
                s = sorted[k]
                line = sprintf("%-22s", "  " s)
                show = 0
                for (i = 1; i <= 4; i++) {
                    v = per(prog[i], s)
                    total[i] += v
                    if (v >= 0.005)
                        show = 1
                    line = line sprintf(" %10.2f", v)
                }
                if (show)
                    print line
            }
            printf "%-22s", "system calls"
            for (i = 1; i <= 4; i++)
                printf " %10.2f", total[i]
            printf "\n"
        }'
    echo
    echo "inside Redis, instructions per call (redis-server, the whole process):"
    for rs in $REDIS_SCRIPTS; do
        rs_1=$(instructions "redis-$rs" "$N1")
        rs_2=$(instructions "redis-$rs" "$N2")
        case $rs in
        slot) rs_what="check.lua as the service sends it (reply slot, call id)" ;;
        tb) rs_what="the same for a one-limit token bucket" ;;
        plain) rs_what="check.lua without the reply slot" ;;
        lease) rs_what="a check taking a lease (one concurrency limit)" ;;
        pair) rs_what="that check and the release of its lease" ;;
        *) rs_what="the EVALSHA probe's script (one INCR)" ;;
        esac
        # (calls.pair: a check and then its release, a line each; so a
        # pair is two of its calls.)
        rs_per=1
        [ "$rs" = pair ] && rs_per=2
        awk -v a="$rs_1" -v b="$rs_2" -v d=$((N2 - N1)) -v w="$rs_what" \
            -v m="$rs_per" 'BEGIN { printf "  %10.0f  %s\n", m * (b - a) / d, w }'
    done
    for f in ours over; do
        echo
        echo "$f: instructions per request, inclusive, by function"
        top_functions "$f"
    done
    echo
    echo "callgrind files of the $N2-request runs: $KEEP"
    echo "(callgrind_annotate --inclusive=yes $KEEP/ours.callgrind.$N2.PID | head -60)"
} >"$VAR/table"

echo
cat "$VAR/table"
cp "$VAR/table" "$RESULT"
say "written to $RESULT"
