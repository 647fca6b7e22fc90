#!/bin/sh
# The benchmark (`make bench`): ratelimit-fcgi next to the two yardsticks of
# doc/design.md, "Performance yardsticks", measured in the same run on the
# same machine.
#
#   a  lighttpd -> noop probe      a libfcgi responder that answers a fixed
#                                  200 (bench/bench_probe.c, built by the
#                                  Makefile as $BUILD/bench_probe)
#   b  lighttpd -> evalsha probe   the same plus one EVALSHA per request: the
#                                  ceiling of a one-round-trip design
#   c  lighttpd -> ratelimit-fcgi  POST /v1/check, demo key, one subject
#   d  lighttpd -> ratelimit-fcgi  the same with a new subject per request
#                                  (new Redis keys every time)
#   e  lighttpd -> ratelimit-fcgi  every request over the limit (a rule of
#                                  1 per hour): 429s, answered from the
#                                  shared over-limit cache
#   f  lighttpd -> ratelimit-fcgi  c, with Redis reached over TLS: a
#                                  redis-server of its own with --tls-port
#                                  and a CA and certificate made with
#                                  openssl in the run, the instance's own
#                                  pool configured with the redis_tls keys;
#                                  the table prints what TLS adds per check
#                                  (application and Redis CPU) against c
#   g  nginx -> ratelimit-fcgi     c behind nginx, no keep-alive to the
#                                  application (a connection per check)
#   h  nginx -> ratelimit-fcgi     the same with upstream keepalive (twice
#                                  the workers) and fastcgi_keep_conn on;
#                                  g and h each have a pool of their own,
#                                  so that kept connections touch no other
#                                  target; a stalled pool ends with its
#                                  timed run (wrk's 2 s timeout counts the
#                                  stalled checks as errors)
#   i  lighttpd -> ratelimit-fcgi  a check on a rule of one token-bucket
#                                  limit (/bench-tb), one subject
#   j  lighttpd -> ratelimit-fcgi  a check on a rule of one concurrency
#                                  limit (/bench-lease, max 1000, lease ttl
#                                  60 s), then the release of its lease
#                                  (POST /v1/release): wrk's Lua keeps each
#                                  thread's leases and sends a release
#                                  for one whenever it holds any, a check
#                                  otherwise, so the checks and releases
#                                  alternate; the leases a run ends with
#                                  lapse at their ttl.  The table prints
#                                  Redis CPU per check and release against
#                                  i's per check, and EVALSHA per release,
#                                  also counted exactly after the rounds
#                                  (50 checks, then their 50 releases
#                                  alone, one curl at a time)
#   k  lighttpd -> ratelimit-fcgi  i's rule with two token buckets
#                                  (/bench-tb2), and
#   l  lighttpd -> ratelimit-fcgi  with eight (/bench-tb8): the table
#                                  prints Redis's and the application's
#                                  CPU per check of c, i, k and l against
#                                  b's, by round
#
# And the constant-rate tiers, which run first, on the fresh stack: a, b
# and c, each driven at fixed arrival
# rates by bench/rategen.c (built as $BUILD/rategen), an open-loop
# generator: a request is sent when it is due whether or not the earlier
# ones have been answered, and its latency runs from when it was due, so
# queueing counts.  For each tier and target: the rate achieved, p50, p95,
# p99 and the largest latency, and the errors.  A target holds a rate when
# it achieves 98% of it with no error and p99 under 10 ms.  The tiers are
# also drawn (gnuplot) as build/bench-rate.svg: p50 and p99 against the
# offered rate.  Every request of every tier is kept in
# build/bench-traces/TARGET-RATE.txt (rategen -o: when it was due, its
# latency, its status, how late rategen sent it), which tells a tail made
# by a few stalls from one spread over the whole tier, and the generator's
# share of it.
#
# a, b, c, f, g and h send the very same request (POST /v1/check with the
# demo key and a small JSON body); the probes read and drop the body.
# Every target runs 4 workers behind its own lighttpd (max-procs 1, the
# application forks), but g and h, behind nginx.  wrk: 16 connections, 2 threads, BENCH_SECONDS per target after a
# 2 s warm-up.  The targets take turns, a to j, for BENCH_ROUNDS rounds, so
# that a machine whose speed drifts (a shared VM's does, by a third over
# minutes) slows every target alike: each ratio is computed in every round
# and the table gives the median round's, with the rounds' values beside
# it; each target's row is its median round.
#
# Besides req/s and latency it checks the budgets of doc/design.md, "The hot
# path", during the timed runs of c and d: Redis round trips per check (INFO
# commandstats) and PostgreSQL queries (the stack's PostgreSQL logs every
# statement; the batched write of last_used_at, each key at most once a
# minute by each worker, is bookkeeping rather than a query of the check),
# and it shows every worker's VmRSS before and after.  The stack runs with
# max_requests = 0 and cache TTLs longer than the run, so that the workers
# and their caches stay the same throughout: what is measured is the warm
# steady state.
#
# This script only runs things and records what it measured, raw, in
# build/bench-raw.txt (one line per measurement); bench/tables.py does the
# arithmetic (medians, ratios, CPU per check, whether a tier held) and
# prints the tables, also written to build/bench.txt.  `python3
# bench/tables.py report build/bench-raw.txt` prints them again.
#
# Exits 0 when every target answered without errors (whatever the speed),
# 1 when one failed, answered non-2xx, or a budget was exceeded.
#
# Environment (defaults in brackets):
#   BENCH_SECONDS      [5]      timed run per target and round
#   BENCH_ROUNDS       [5]      rounds of a, b, c, d, e (1-9)
#   BENCH_WORKERS      [4]      workers of ratelimit-fcgi and of each probe
#   BENCH_PORT         [28080]  lighttpd -> ratelimit-fcgi
#   BENCH_NOOP_PORT    [28081]  lighttpd -> noop probe
#   BENCH_EVALSHA_PORT [28082]  lighttpd -> evalsha probe
#   BENCH_REDIS_PORT   [26380]  the private Redis
#   BENCH_TLS          [on]     off: no target f (it needs a single Redis
#                               over tcp)
#   BENCH_TLS_PORT     [28087]  lighttpd -> ratelimit-fcgi, Redis over TLS
#   BENCH_TLS_REDIS_PORT [26381] f's Redis: its plain port (the benchmark's
#                               INFO only); the port after it is its TLS port
#   BENCH_NGINX        [on]     off: no targets g and h
#   BENCH_NGINX_PORT   [28088]  nginx -> ratelimit-fcgi (g); h the port after
#   BENCH_LEASES       [on]     off: no targets i to l, nor the count of
#                               EVALSHA per release after the rounds
#   BENCH_REDIS_TYPE   [single] cluster: the stack runs on a private Redis
#                               Cluster (3 primaries, 3 replicas, ports
#                               BENCH_CLUSTER_PORT..+5, default 12500), and
#                               every Redis figure is that of the primary
#                               owning the demo tenant's slot (the probe's
#                               key is put in that slot too)
#   BENCH_REDIS_TRANSPORT [tcp] unix: ratelimit-fcgi and the EVALSHA
#                               probe reach the (single) Redis over a Unix
#                               socket instead of 127.0.0.1
#   BENCH_RATES        [1000 2000 5000 7500 10000]  the constant-rate tiers,
#                               req/s; after the last, the rate goes up by
#                               BENCH_RATE_STEP [5000] while some target
#                               still holds it, up to BENCH_RATE_MAX [40000]
#   BENCH_RATE_SECONDS [5]      timed part of each tier (after 1 s at the
#                               same rate, not counted)
#   BENCH_WAKE_SECONDS [10]     before the tiers, the stack idle: how
#                               late the machine wakes a process from
#                               1 ms sleeps (build/wakelag), printed
#                               with the tiers (0: not measured)
#   BENCH_RSS_SECONDS  [60]     worker memory: a run this long of new
#                               subjects at BENCH_RSS_RATE [2000] req/s,
#                               every worker's memory sampled six times
#                               (0: no such run)
#   BENCH_ONLY         [all]    rate: only the constant-rate tiers (make
#                               bench-rate); closed: only wrk's targets
#   BENCH_PG_PORT      [25433]  the private PostgreSQL
#   BUILD              [build]  where the binaries are
# The ports differ from those of `make run` and of the tests, so the
# benchmark can run next to them.  Everything listens on 127.0.0.1 only.
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

BUILD=${BUILD:-build}
case $BUILD in
/*) ;;
*) BUILD=$ROOT/$BUILD ;;
esac
BENCH_SECONDS=${BENCH_SECONDS:-5}
ROUNDS=${BENCH_ROUNDS:-5}
RATES=${BENCH_RATES:-1000 2000 5000 7500 10000}
RATE_STEP=${BENCH_RATE_STEP:-5000}
RATE_MAX=${BENCH_RATE_MAX:-40000}
RATE_SECONDS=${BENCH_RATE_SECONDS:-5}
RSS_SECONDS=${BENCH_RSS_SECONDS:-60}
WAKE_SECONDS=${BENCH_WAKE_SECONDS:-10}
RSS_RATE=${BENCH_RSS_RATE:-2000}
ONLY=${BENCH_ONLY:-all}
RATEGEN=$BUILD/rategen
SVG=$BUILD/bench-rate.svg
# Each tier's per-request trace (rategen -o): "due_us latency_us status lag_us".
TRACES=$BUILD/bench-traces
WARMUP_SECONDS=2
CONNECTIONS=16
THREADS=2
WORKERS=${BENCH_WORKERS:-4}
PORT=${BENCH_PORT:-28080}
NOOP_PORT=${BENCH_NOOP_PORT:-28081}
EVALSHA_PORT=${BENCH_EVALSHA_PORT:-28082}
TLS=${BENCH_TLS:-on}
TLS_PORT=${BENCH_TLS_PORT:-28087}
TLS_REDIS_PORT=${BENCH_TLS_REDIS_PORT:-26381}
NGINX_ON=${BENCH_NGINX:-on}
NGINX_PORT=${BENCH_NGINX_PORT:-28088}
NGINX=/usr/sbin/nginx
LEASES=${BENCH_LEASES:-on}
REDIS_PORT=${BENCH_REDIS_PORT:-26380}
REDIS_TYPE=${BENCH_REDIS_TYPE:-single}
REDIS_TRANSPORT=${BENCH_REDIS_TRANSPORT:-tcp}
case $REDIS_TRANSPORT/$REDIS_TYPE in
tcp/* | unix/single) ;;
*) echo "bench: BENCH_REDIS_TRANSPORT is tcp, or unix with a single Redis" >&2
    exit 2 ;;
esac
CLUSTER_PORT=${BENCH_CLUSTER_PORT:-12500}
PROBE_KEY=bench:probe
PG_PORT=${BENCH_PG_PORT:-25433}
DEMO_KEY=rl_demo_abc123xyz
LIGHTTPD=/usr/sbin/lighttpd
PROBE=$BUILD/bench_probe
RESULT=$BUILD/bench.txt
# The raw measurements, one line each, that bench/tables.py reads.
RAW_RESULT=$BUILD/bench-raw.txt

say() {
    echo "bench: $*"
}

die() {
    echo "bench: $*" >&2
    exit 1
}

case $ROUNDS in
[1-9]) ;;
*) die "BENCH_ROUNDS must be 1-9" ;;
esac
case $BENCH_SECONDS in
'' | *[!0-9]*) die "BENCH_SECONDS must be a whole number of seconds" ;;
esac
case $WORKERS in
[1-9] | [1-5][0-9] | 6[0-4]) ;;
*) die "BENCH_WORKERS must be 1-64" ;;
esac
if [ "$BENCH_SECONDS" -lt 1 ] || [ "$BENCH_SECONDS" -gt 60 ]; then
    die "BENCH_SECONDS must be 1-60"
fi
for v in $RATES "$RATE_STEP" "$RATE_MAX" "$RATE_SECONDS" "$RSS_SECONDS" \
    "$RSS_RATE" "$WAKE_SECONDS"; do
    case $v in
    '' | *[!0-9]*) die "BENCH_RATES, BENCH_RATE_STEP, BENCH_RATE_MAX, BENCH_RATE_SECONDS, BENCH_RSS_SECONDS, BENCH_RSS_RATE and BENCH_WAKE_SECONDS are whole numbers" ;;
    esac
done
if [ "$WAKE_SECONDS" -gt 60 ]; then
    die "BENCH_WAKE_SECONDS must be 0-60"
fi
if [ "$RSS_SECONDS" -gt 600 ] || [ "$RSS_RATE" -lt 1 ] ||
    [ "$RSS_RATE" -gt 20000 ]; then
    die "BENCH_RSS_SECONDS must be 0-600 and BENCH_RSS_RATE 1-20000"
fi
[ -n "$RATES" ] || die "BENCH_RATES is empty"
for v in $RATES "$RATE_STEP" "$RATE_MAX"; do
    if [ "$v" -lt 1 ] || [ "$v" -gt 200000 ]; then
        die "rates must be 1-200000 req/s"
    fi
done
if [ "$RATE_SECONDS" -lt 1 ] || [ "$RATE_SECONDS" -gt 60 ]; then
    die "BENCH_RATE_SECONDS must be 1-60"
fi
case $ONLY in
all | rate | closed) ;;
*) die "BENCH_ONLY is all, rate or closed" ;;
esac
for v in "$TLS" "$NGINX_ON" "$LEASES"; do
    case $v in
    on | off) ;;
    *) die "BENCH_TLS, BENCH_NGINX and BENCH_LEASES are on or off" ;;
    esac
done
for v in "$TLS_PORT" "$TLS_REDIS_PORT" "$NGINX_PORT"; do
    case $v in
    '' | *[!0-9]*) die "BENCH_TLS_PORT, BENCH_TLS_REDIS_PORT and BENCH_NGINX_PORT are port numbers" ;;
    esac
done
if [ "$TLS" = on ] && [ "$REDIS_TYPE/$REDIS_TRANSPORT" != single/tcp ]; then
    echo "bench: no target f (TLS to Redis): it needs a single Redis over tcp" >&2
    TLS=off
fi
[ "$ONLY" != rate ] || TLS=off NGINX_ON=off LEASES=off
for f in "$BUILD/ratelimit-fcgi" "$BUILD/ratelimitctl" "$PROBE" "$RATEGEN"; do
    [ -x "$f" ] || die "$f is missing: run make bench"
done
for cmd in wrk redis-server redis-cli curl "$LIGHTTPD"; do
    command -v "$cmd" >/dev/null 2>&1 ||
        die "$cmd is missing: run make deps (as root)"
done
[ "$TLS" = off ] || command -v openssl >/dev/null 2>&1 ||
    die "openssl is missing (or BENCH_TLS=off)"
[ "$NGINX_ON" = off ] || [ -x "$NGINX" ] ||
    die "$NGINX is missing: run make deps (as root), or BENCH_NGINX=off"

# ---------------------------------------------------------------- helpers

# pid_alive, wait_gone, end_pids, descendants
# shellcheck source-path=SCRIPTDIR source=../scripts/proc.sh
. "$ROOT/scripts/proc.sh"
# curl_checks
# shellcheck source-path=SCRIPTDIR source=checks.sh
. "$ROOT/bench/checks.sh"

# raw KIND NAME=VALUE...: appends a line of raw measurements to $RAW, KIND
# and its fields tab-separated (a value holds no tab or newline);
# bench/tables.py reads them and does every piece of arithmetic.
raw() {
    rw_line=$1
    shift
    for rw_f in "$@"; do
        rw_line="$rw_line	$rw_f"
    done
    printf '%s\n' "$rw_line" >>"$RAW"
}

# Returns 0 when nothing listens on 127.0.0.1:$1 (curl: 7 = refused).
port_free() {
    pf_rc=0
    curl -s -o /dev/null -m 1 "telnet://127.0.0.1:$1" </dev/null \
        >/dev/null 2>&1 || pf_rc=$?
    [ "$pf_rc" -eq 7 ]
}

# Prints the children of process $1.
children() {
    ps -e -o pid= -o ppid= | awk -v parent="$1" '$2 == parent { print $1 }'
}

# Sum of user and system CPU ticks of processes $@ (those still alive).
cpu_ticks() {
    ct_sum=0
    for ct_p in "$@"; do
        ct_t=$(sed 's/.*) //' "/proc/$ct_p/stat" 2>/dev/null |
            awk '{ print $12 + $13 }') || ct_t=0
        ct_sum=$((ct_sum + ${ct_t:-0}))
    done
    echo "$ct_sum"
}

# Busy CPU ticks of the whole machine (all but idle and iowait).
machine_ticks() {
    awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat
}

# VmRSS in kB of process $1, or "-" when it is gone.
rss_kb() {
    awk '$1 == "VmRSS:" { print $2; found = 1 } END { if (!found) print "-" }' \
        "/proc/$1/status" 2>/dev/null || echo -
}

# Records VmRSS, RssAnon and RssShmem (kB) of every worker, $1 the
# seconds into the run.
rss_sample() {
    for rs_p in $(app_workers); do
        # shellcheck disable=SC2046  # three words: the three figures
        set -- "$1" $(awk '$1 == "VmRSS:" { rss = $2 }
            $1 == "RssAnon:" { anon = $2 } $1 == "RssShmem:" { shm = $2 }
            END { print rss, anon, shm }' "/proc/$rs_p/status" 2>/dev/null)
        [ $# -lt 4 ] || raw rsssample "seconds=$1" "pid=$rs_p" "vmrss=$2" \
            "anon=$3" "shmem=$4"
        set -- "$1"
    done
}

# Calls of Redis command $1 so far (0 when never called).  With "other"
# it is the sum over the commands that a client sends besides EVALSHA and
# that no script of ours calls (commandstats also counts the commands a
# script runs, so a plain sum would not give the round trips); the INFO
# this script itself sends is left out.
redis_calls() {
    redis-cli -h 127.0.0.1 -p "${BT_REDIS_PORT:-$REDIS_PORT}" INFO commandstats | tr -d '\r' |
        awk -F'[:,=]' -v want="$1" '
            $1 ~ /^cmdstat_/ && $2 == "calls" {
                name = substr($1, 9)
                sub(/\|.*/, "", name)
                if (name == want || (want == "other" &&
                    name ~ /^(eval|eval_ro|evalsha_ro|fcall|fcall_ro|script|function|ping|echo|hello|auth|select|client|multi|exec|watch|unwatch|discard)$/))
                    n += $3
            }
            END { print n + 0 }'
}

# Microseconds that Redis has spent in EVALSHA so far (commandstats usec).
redis_evalsha_usec() {
    redis-cli -h 127.0.0.1 -p "${BT_REDIS_PORT:-$REDIS_PORT}" INFO commandstats | tr -d '\r' |
        awk -F'[:,=]' '$1 == "cmdstat_evalsha" && $4 == "usec" { n = $5 }
            END { print n + 0 }'
}

# Prints the CPU seconds (user + system) that the children of this shell
# have used so far, from the second line of the times builtin ("1m2.5s
# 0m0.25s").  $1 is a file for times's output: times must run in this
# shell, not in the subshell of a command substitution.
children_cpu() {
    times >"$1"
    awk 'NR == 2 {
        t = 0
        for (i = 1; i <= 2; i++) {
            split($i, part, "m")
            sub(/s$/, "", part[2])
            t += part[1] * 60 + part[2]
        }
        print t
    }' "$1"
}

# Statements the stack's PostgreSQL has logged so far, but the writes of
# last_used_at.
pg_statements() {
    grep -E 'LOG:  (statement|execute [^:]*):' "$VAR/pg.log" 2>/dev/null |
        grep -cv 'last_used_at' || true
}

# ---------------------------------------------------------------- cleanup

VAR=""
STACK_STARTED=0

# Prints the last lines of every log, after a failure.
# shellcheck disable=SC2317  # reached from the EXIT trap
show_logs() {
    [ -n "$VAR" ] || return 0
    for f in "$VAR"/*.log "$VAR"/*/*.log "$VAR"/*.out; do
        [ -f "$f" ] || continue
        echo "---- tail of $f" >&2
        tail -n 15 "$f" >&2
    done
}

# Stops the process whose pid file is $1 and every process it spawned.
# shellcheck disable=SC2317  # reached from the EXIT trap
stop_tree() {
    sp_pids=""
    if sp_pid=$(pid_alive "$1"); then
        sp_pids=$(descendants "$sp_pid")
        end_pids "$sp_pid"
    fi
    # shellcheck disable=SC2086
    [ -z "$sp_pids" ] || end_pids $sp_pids
}

# shellcheck disable=SC2317  # reached from the EXIT trap
cleanup() {
    cl_rc=$?
    trap - EXIT INT TERM
    set +e
    [ "$cl_rc" -ne 1 ] || show_logs
    if [ -n "$VAR" ] && [ -d "$VAR" ]; then
        stop_tree "$VAR/probe-noop/lighttpd.pid"
        stop_tree "$VAR/probe-evalsha/lighttpd.pid"
        stop_tree "$VAR/tls/lighttpd.pid"
        stop_tree "$VAR/tls/redis.pid"
        stop_tree "$VAR/nginx/nginx.pid"
        stop_tree "$VAR/nginx-g/app.pid"
        stop_tree "$VAR/nginx-h/app.pid"
        if [ "$STACK_STARTED" -eq 1 ]; then
            stack stop >/dev/null 2>&1
            sh scripts/pg.sh destroy "$VAR" >/dev/null 2>&1
        fi
        rm -rf "$VAR"
    fi
    exit "$cl_rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- setup

set -- "$PORT" "$NOOP_PORT" "$EVALSHA_PORT" "$REDIS_PORT" "$PG_PORT"
[ "$TLS" = off ] || set -- "$@" "$TLS_PORT" "$TLS_REDIS_PORT" $((TLS_REDIS_PORT + 1))
[ "$NGINX_ON" = off ] || set -- "$@" "$NGINX_PORT" $((NGINX_PORT + 1))
for p in "$@"; do
    port_free "$p" ||
        die "127.0.0.1:$p is in use (set BENCH_*PORT, see bench/bench.sh)"
done

VAR=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-bench.XXXXXX")
RAW=$VAR/raw
: >"$RAW"

# The stack's own helper, with the benchmark's ports and settings; a
# counter budget the benchmark's new subjects never reach, so that their
# cost includes the budget's and none is refused.
stack() {
    VAR=$VAR PORT=$PORT REDIS_PORT=$REDIS_PORT PG_PORT=$PG_PORT \
        REDIS_TYPE=$REDIS_TYPE REDIS_CLUSTER_PORT=$CLUSTER_PORT \
        REDIS_TRANSPORT=$REDIS_TRANSPORT \
        BUILD=$BUILD WORKERS=$WORKERS PG_EXTRA_OPTS="-c log_statement=all" \
        EXTRA_CONF="log_level = warn
max_requests = 0
key_cache_ttl = 3600
rule_cache_ttl = 3600
tenant_counter_budget = 1000000000" sh scripts/dev-stack.sh "$@"
}

say "starting PostgreSQL, Redis and lighttpd -> ratelimit-fcgi in $VAR"
STACK_STARTED=1
stack start >"$VAR/stack.out" 2>&1 || die "the stack did not start"
REDIS_PID_FILE=$VAR/redis.pid
if [ "$REDIS_TYPE" = cluster ]; then
    # One primary holds every key of the demo tenant: measure that one.
    DEMO_TID=$(psql -X -tA -h 127.0.0.1 -p "$PG_PORT" -U ratelimit -d ratelimit \
        -c "SELECT id FROM tenants WHERE name = 'demo-corp'")
    REDIS_PORT=$(sh scripts/redis-ha.sh cluster owner "$VAR/redis-cluster" \
        "$DEMO_TID") || die "no primary owns the demo tenant's slot"
    REDIS_PID_FILE=$VAR/redis-cluster/$REDIS_PORT/pid
    PROBE_KEY="{$DEMO_TID}:probe"
    say "Redis Cluster: the demo tenant lives on the primary 127.0.0.1:$REDIS_PORT"
fi

# Starts lighttpd on port $2 with bin-path $3 (split at blanks), its files
# in directory $1, configured like the stack's lighttpd.
start_front() {
    mkdir -p "$1/htdocs"
    cat >"$1/lighttpd.conf" <<EOF
server.modules = ( "mod_fastcgi" )
server.port = $2
server.bind = "127.0.0.1"
server.document-root = "$1/htdocs"
server.errorlog = "$1/lighttpd-error.log"
server.breakagelog = "$1/backend.log"
server.pid-file = "$1/lighttpd.pid"
fastcgi.server = ( "/" => ((
    "bin-path" => "$3",
    "socket" => "$1/fcgi.sock",
    "check-local" => "disable",
    "max-procs" => 1
)) )
EOF
    "$LIGHTTPD" -f "$1/lighttpd.conf" || die "lighttpd on port $2 did not start"
}

# Starts lighttpd on port $2 with the probe in mode $1 as its bin-path.
start_probe() {
    case $1 in
    noop) sp_args="noop $WORKERS" ;;
    *)
        sp_host=127.0.0.1
        [ "$REDIS_TRANSPORT" = unix ] && sp_host=unix:$VAR/redis.sock
        sp_args="evalsha $sp_host $REDIS_PORT $WORKERS $PROBE_KEY"
        ;;
    esac
    start_front "$VAR/probe-$1" "$2" "$PROBE $sp_args"
}

say "starting lighttpd -> noop probe and lighttpd -> evalsha probe"
start_probe noop "$NOOP_PORT"
start_probe evalsha "$EVALSHA_PORT"

# f: a redis-server of its own with TLS (a CA and a server certificate for
# 127.0.0.1 made here; no client certificate asked for), on its TLS port
# for the application and a plain one for the benchmark's INFO, set up like
# the stack's; a copy of the stack's ratelimit.conf pointing at it with the
# redis_tls keys; its own lighttpd.
start_tls() {
    st_d=$VAR/tls
    mkdir -p "$st_d"
    {
        openssl req -x509 -new -nodes -newkey ec \
            -pkeyopt ec_paramgen_curve:prime256v1 -keyout "$st_d/ca.key" \
            -out "$st_d/ca.crt" -days 2 -subj "/CN=bench CA" &&
            openssl req -new -nodes -newkey ec \
                -pkeyopt ec_paramgen_curve:prime256v1 \
                -keyout "$st_d/server.key" -out "$st_d/server.csr" \
                -subj "/CN=127.0.0.1" &&
            printf 'subjectAltName = IP:127.0.0.1\n' >"$st_d/server.ext" &&
            openssl x509 -req -in "$st_d/server.csr" -CA "$st_d/ca.crt" \
                -CAkey "$st_d/ca.key" -CAcreateserial -days 2 \
                -extfile "$st_d/server.ext" -out "$st_d/server.crt"
    } >"$st_d/openssl.log" 2>&1 || die "openssl could not make the certificates (see $st_d/openssl.log)"
    redis-server --bind 127.0.0.1 --port "$TLS_REDIS_PORT" \
        --tls-port $((TLS_REDIS_PORT + 1)) --tls-cert-file "$st_d/server.crt" \
        --tls-key-file "$st_d/server.key" --tls-ca-cert-file "$st_d/ca.crt" \
        --tls-auth-clients no --hz 100 --save "" --appendonly no \
        --dir "$st_d" --pidfile "$st_d/redis.pid" --logfile "$st_d/redis.log" \
        --daemonize yes >/dev/null || die "redis-server with TLS did not start"
    st_n=0
    until [ "$(redis-cli -h 127.0.0.1 -p "$TLS_REDIS_PORT" ping 2>/dev/null)" = PONG ]; do
        st_n=$((st_n + 1))
        [ "$st_n" -le 100 ] || die "the TLS Redis did not answer in 10 s"
        sleep 0.1
    done
    sed "s|^redis = .*|redis = 127.0.0.1:$((TLS_REDIS_PORT + 1))|" \
        "$VAR/ratelimit.conf" >"$st_d/ratelimit.conf"
    printf '%s\n' "redis_tls = on" "redis_tls_ca_file = $st_d/ca.crt" \
        >>"$st_d/ratelimit.conf"
    "$BUILD/ratelimit-fcgi" -t -c "$st_d/ratelimit.conf" >"$st_d/t.out" 2>&1 ||
        die "ratelimit-fcgi -t refuses $st_d/ratelimit.conf: $(cat "$st_d/t.out")"
    start_front "$st_d" "$TLS_PORT" "$BUILD/ratelimit-fcgi -c $st_d/ratelimit.conf"
}

# g and h: two pools of ratelimit-fcgi listening on sockets of their own
# (the stack's ratelimit.conf with a listen line), and one nginx (one
# worker process, like lighttpd one process) in front of both: port
# NGINX_PORT without keep-alive, the next one with upstream keepalive of
# twice the workers and fastcgi_keep_conn on.
start_nginx() {
    for sn_t in g h; do
        sn_d=$VAR/nginx-$sn_t
        mkdir -p "$sn_d"
        sed "s|^listen = .*|listen = unix:$sn_d/fcgi.sock|" "$VAR/ratelimit.conf" \
            >"$sn_d/ratelimit.conf"
        "$BUILD/ratelimit-fcgi" -c "$sn_d/ratelimit.conf" >>"$sn_d/app.log" 2>&1 &
        echo "$!" >"$sn_d/app.pid"
    done
    sn_n=0
    until [ -S "$VAR/nginx-g/fcgi.sock" ] && [ -S "$VAR/nginx-h/fcgi.sock" ]; do
        sn_n=$((sn_n + 1))
        [ "$sn_n" -le 100 ] || die "ratelimit-fcgi for nginx did not listen in 10 s"
        sleep 0.1
    done
    sn_d=$VAR/nginx
    mkdir -p "$sn_d/tmp"
    cat >"$sn_d/nginx.conf" <<EOF
user root;
worker_processes 1;
pid $sn_d/nginx.pid;
error_log $sn_d/nginx-error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $sn_d/tmp/body;
    fastcgi_temp_path $sn_d/tmp/fastcgi;
    proxy_temp_path $sn_d/tmp/proxy;
    scgi_temp_path $sn_d/tmp/scgi;
    uwsgi_temp_path $sn_d/tmp/uwsgi;
    upstream rl_plain {
        server unix:$VAR/nginx-g/fcgi.sock;
    }
    upstream rl_kept {
        server unix:$VAR/nginx-h/fcgi.sock;
        keepalive $((2 * WORKERS));
    }
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location = /v1/check {
            include /etc/nginx/fastcgi_params;
            fastcgi_pass rl_plain;
        }
    }
    server {
        listen 127.0.0.1:$((NGINX_PORT + 1));
        location = /v1/check {
            include /etc/nginx/fastcgi_params;
            fastcgi_pass rl_kept;
            fastcgi_keep_conn on;
        }
    }
}
EOF
    "$NGINX" -c "$sn_d/nginx.conf" -e "$sn_d/nginx-error.log" \
        >"$sn_d/start.log" 2>&1 || die "nginx did not start: $(cat "$sn_d/start.log")"
}

if [ "$TLS" = on ]; then
    say "starting Redis with TLS and lighttpd -> ratelimit-fcgi over TLS"
    start_tls
fi
if [ "$NGINX_ON" = on ]; then
    say "starting nginx -> ratelimit-fcgi, without and with keep-alive"
    start_nginx
fi

# ---------------------------------------------------------------- wrk

# The request of targets a, b and c; done() prints one machine-readable line.
cat >"$VAR/done.lua" <<'EOF'
function done(summary, latency, requests)
    local e = summary.errors
    io.write(string.format(
        "BENCH requests=%d duration_us=%d p50_us=%d p99_us=%d " ..
        "status_errors=%d socket_errors=%d\n",
        summary.requests, summary.duration,
        latency:percentile(50), latency:percentile(99),
        e.status, e.connect + e.read + e.write + e.timeout))
end
EOF
# check_script FILE ROUTE WHAT: a wrk script in FILE that sends POST
# /v1/check for ROUTE (a rule of WHAT), one subject.
check_script() {
    cat >"$1" <<EOF
-- POST /v1/check for the $2 rule ($3), one subject.
wrk.method = "POST"
wrk.path = "/v1/check"
wrk.headers["X-API-Key"] = "$DEMO_KEY"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"route":"$2","subject":"bench"}'
dofile("$VAR/done.lua")
EOF
}
check_script "$VAR/check.lua" /bench "one sliding window"
check_script "$VAR/over.lua" /bench-over "1 an hour: all over the limit"
cat >"$VAR/fresh.lua" <<EOF
-- POST /v1/check for the /bench rule with a subject never used before:
-- "<run tag>-<thread>-<counter>".
wrk.method = "POST"
wrk.path = "/v1/check"
wrk.headers["X-API-Key"] = "$DEMO_KEY"
wrk.headers["Content-Type"] = "application/json"
local threads = 0
function setup(thread)
    threads = threads + 1
    thread:set("thread_id", threads)
end
local tag, counter = "r", 0
function init(args)
    tag = args[1] or "r"
end
function request()
    counter = counter + 1
    return wrk.format(nil, nil, nil, string.format(
        '{"route":"/bench","subject":"%s-%d-%d"}', tag, thread_id, counter))
end
dofile("$VAR/done.lua")
EOF

# j: a check of /bench-lease, then the release of the lease it answered.
# Each wrk thread keeps the leases its checks were given and sends a
# release for one of them whenever it holds any, a check otherwise (the
# next request of any of its connections); the answers counted: checks
# given a lease, releases answered "released", anything else.
cat >"$VAR/lease.lua" <<EOF
-- POST /v1/check for the /bench-lease rule, then POST /v1/release.
wrk.method = "POST"
wrk.headers["X-API-Key"] = "$DEMO_KEY"
wrk.headers["Content-Type"] = "application/json"
local check
local leases, held = {}, 0
checks, releases, others = 0, 0, 0
local threads = {}
function setup(thread)
    table.insert(threads, thread)
end
function init(args)
    -- Formatted here, when wrk.host is known (the Host header).
    check = wrk.format("POST", "/v1/check", nil,
        '{"route":"/bench-lease","subject":"bench"}')
end
function request()
    if held > 0 then
        local id = leases[held]
        leases[held] = nil
        held = held - 1
        return wrk.format("POST", "/v1/release", nil,
            '{"lease":"' .. id .. '"}')
    end
    return check
end
function response(status, headers, body)
    if status == 200 and body:find('"released":true', 1, true) then
        releases = releases + 1
        return
    end
    local id = status == 200 and body:match('"lease":"([^"]+)"')
    if id then
        held = held + 1
        leases[held] = id
        checks = checks + 1
    else
        others = others + 1
    end
end
function done(summary, latency, requests)
    local c, r, o = 0, 0, 0
    for _, t in ipairs(threads) do
        c = c + t:get("checks")
        r = r + t:get("releases")
        o = o + t:get("others")
    end
    local e = summary.errors
    io.write(string.format(
        "BENCH requests=%d duration_us=%d p50_us=%d p99_us=%d " ..
        "status_errors=%d socket_errors=%d checks=%d releases=%d " ..
        "others=%d\\n",
        summary.requests, summary.duration,
        latency:percentile(50), latency:percentile(99),
        e.status, e.connect + e.read + e.write + e.timeout, c, r, o))
end
EOF
check_script "$VAR/tb.lua" /bench-tb "one token bucket"
check_script "$VAR/tb2.lua" /bench-tb2 "two token buckets"
check_script "$VAR/tb8.lua" /bench-tb8 "eight token buckets"

# Runs wrk for $2 seconds against port $1 with script $3 and argument $4;
# wrk's output goes to $5.  Returns non-zero when wrk failed.  (timeout
# --foreground: wrk stays in our process group and gets a Ctrl-C.)
run_wrk() {
    timeout --foreground $(($2 + 30)) \
        wrk -t "$THREADS" -c "$CONNECTIONS" -d "${2}s" --latency -s "$3" "http://127.0.0.1:$1/v1/check" -- "$4" \
        >"$5" 2>&1
}

# Prints the value of field $2 of the BENCH line in wrk output $1.
wrk_field() {
    awk -v want="$2" '$1 == "BENCH" {
        for (i = 2; i <= NF; i++)
            if (index($i, want "=") == 1)
                print substr($i, length(want) + 2)
    }' "$1"
}

# Prints the pid of the lighttpd whose pid file is $1; dies when it is not
# running.
lighttpd_pid() {
    pid_alive "$1" || die "lighttpd ($1) is not running"
}

# The workers of ratelimit-fcgi: the children of its master, which is the
# child of the stack's lighttpd.
app_workers() {
    for aw_m in $(children "$(lighttpd_pid "$VAR/lighttpd.pid")"); do
        children "$aw_m"
    done | sort -n
}

TICK=$(getconf CLK_TCK)
LOADAVG=""
FAILED=0

# Benchmarks one target: $1 label, $2 port, $3 lighttpd pid file, $4 wrk
# script, $5 a tag when the target is ratelimit-fcgi (budgets and worker
# memory are measured then, the memory into $VAR/rss.TAG.before and .after).
bench_target() {
    bt_name=$1 bt_port=$2 bt_pidfile=$3 bt_script=$4 bt_ours=$5
    # e: every answer is a 429, and next to no request reaches Redis.
    bt_over=0
    [ "$bt_ours" = e ] && bt_over=1
    bt_out=$VAR/wrk-$(printf '%s' "$bt_name" | tr -c 'a-z0-9' '_').txt
    say "$bt_name: warm-up ${WARMUP_SECONDS} s, then ${BENCH_SECONDS} s"
    if ! run_wrk "$bt_port" "$WARMUP_SECONDS" "$bt_script" w "$bt_out.warm" ||
        [ "$(wrk_field "$bt_out.warm" requests)" = "" ] ||
        [ "$(wrk_field "$bt_out.warm" requests)" -eq 0 ]; then
        cat "$bt_out.warm" >&2
        echo "bench: $bt_name did not answer during the warm-up" >&2
        FAILED=1
        raw run "round=$round" "target=$bt_name" failed=1
        return 0
    fi
    # Let requests still in flight from the warm-up finish.
    sleep 0.3

    case $bt_ours in
    c | d)
        raw rss "round=$round" "target=$bt_ours" when=before \
            "workers=$(worker_rss)"
        ;;
    esac
    # The front end's processes, the application's and Redis's.
    BT_REDIS_PORT=$REDIS_PORT
    bt_redis=$(pid_alive "$REDIS_PID_FILE" || true)
    case $bt_ours in
    g | h)
        bt_lpid=$(pid_alive "$bt_pidfile") || die "nginx is not running"
        bt_lpid="$bt_lpid $(descendants "$bt_lpid")"
        bt_app=$(pid_alive "$VAR/nginx-$bt_ours/app.pid") ||
            die "ratelimit-fcgi behind nginx ($bt_ours) is not running"
        bt_app="$bt_app $(descendants "$bt_app")"
        ;;
    *)
        bt_lpid=$(lighttpd_pid "$bt_pidfile")
        bt_app=$(descendants "$bt_lpid")
        ;;
    esac
    if [ "$bt_ours" = f ]; then
        BT_REDIS_PORT=$TLS_REDIS_PORT
        bt_redis=$(pid_alive "$VAR/tls/redis.pid" || true)
    fi
    bt_evalsha0=$(redis_calls evalsha)
    bt_other0=$(redis_calls other)
    bt_usec0=$(redis_evalsha_usec)
    bt_pg0=$(pg_statements)
    # shellcheck disable=SC2086
    bt_l0=$(cpu_ticks $bt_lpid)
    # shellcheck disable=SC2086
    bt_a0=$(cpu_ticks $bt_app)
    # shellcheck disable=SC2086
    bt_r0=$(cpu_ticks $bt_redis)
    bt_m0=$(machine_ticks)
    children_cpu "$VAR/times" >"$VAR/times.before"
    bt_wrk_ok=1
    run_wrk "$bt_port" "$BENCH_SECONDS" "$bt_script" r "$bt_out" ||
        bt_wrk_ok=0
    children_cpu "$VAR/times" >"$VAR/times.after"
    bt_w0=$(cat "$VAR/times.before")
    bt_w1=$(cat "$VAR/times.after")
    bt_m1=$(machine_ticks)
    # shellcheck disable=SC2086
    bt_l1=$(cpu_ticks $bt_lpid)
    # shellcheck disable=SC2086
    bt_a1=$(cpu_ticks $bt_app)
    # shellcheck disable=SC2086
    bt_r1=$(cpu_ticks $bt_redis)
    case $bt_ours in
    c | d)
        raw rss "round=$round" "target=$bt_ours" when=after \
            "workers=$(worker_rss)"
        ;;
    esac
    sleep 0.3
    bt_evalsha1=$(redis_calls evalsha)
    bt_other1=$(redis_calls other)
    bt_usec1=$(redis_evalsha_usec)
    bt_pg1=$(pg_statements)

    bt_req=$(wrk_field "$bt_out" requests)
    bt_dur=$(wrk_field "$bt_out" duration_us)
    bt_p50=$(wrk_field "$bt_out" p50_us)
    bt_p99=$(wrk_field "$bt_out" p99_us)
    bt_status=$(wrk_field "$bt_out" status_errors)
    bt_sock=$(wrk_field "$bt_out" socket_errors)
    if [ "$bt_wrk_ok" -eq 0 ] || [ -z "$bt_req" ] || [ "$bt_req" -eq 0 ]; then
        cat "$bt_out" >&2
        echo "bench: $bt_name: wrk failed or no request completed" >&2
        FAILED=1
        raw run "round=$round" "target=$bt_name" failed=1
        return 0
    fi
    if [ "$bt_over" = 1 ]; then
        # wrk counts the 429s as status errors: all of them must be.
        if [ "$bt_status" -lt "$bt_req" ] || [ "$bt_sock" -ne 0 ]; then
            cat "$bt_out" >&2
            echo "bench: $bt_name: $((bt_req - bt_status)) answers were not 429, $bt_sock socket errors" >&2
            FAILED=1
        fi
        bt_status=0
    elif [ "$bt_status" -ne 0 ] || [ "$bt_sock" -ne 0 ]; then
        cat "$bt_out" >&2
        echo "bench: $bt_name: $bt_status non-2xx answers, $bt_sock socket errors" >&2
        FAILED=1
    fi

    bt_pg=-
    bt_evalsha=$((bt_evalsha1 - bt_evalsha0))
    bt_other=$((bt_other1 - bt_other0))
    if [ "$bt_over" = 1 ]; then
        # The cache answers all but the first denial of each worker.
        if [ "$bt_evalsha" -gt $((WORKERS * 4 + 2 * CONNECTIONS)) ]; then
            echo "bench: $bt_name: $bt_evalsha EVALSHA for $bt_req denials: the over-limit cache did not answer them" >&2
            FAILED=1
        fi
    elif [ "$bt_evalsha" -gt 0 ] || [ -n "$bt_ours" ]; then
        # Up to one request per connection may still have been in flight
        # when wrk stopped counting: it reached Redis but not the total.
        # Errors are reported above; a 503 makes no Redis call.
        if [ "$bt_status" -eq 0 ] && [ "$bt_sock" -eq 0 ] && {
            [ "$bt_evalsha" -lt "$bt_req" ] ||
            [ "$bt_evalsha" -gt $((bt_req + 2 * CONNECTIONS)) ] ||
            [ "$bt_other" -gt 0 ]
        }; then
            echo "bench: $bt_name: $bt_evalsha EVALSHA and $bt_other other" \
                "Redis commands for $bt_req requests: not one round trip each" >&2
            FAILED=1
        fi
    fi
    if [ -n "$bt_ours" ]; then
        bt_pg=$((bt_pg1 - bt_pg0))
        if [ "$bt_pg" -ne 0 ]; then
            echo "bench: $bt_name: $bt_pg PostgreSQL statements with warm caches" >&2
            FAILED=1
        fi
    fi
    raw run "round=$round" "target=$bt_name" failed=0 "over=$bt_over" \
        "ours=$([ -n "$bt_ours" ] && echo 1 || echo 0)" "requests=$bt_req" \
        "duration_us=$bt_dur" "p50_us=$bt_p50" "p99_us=$bt_p99" \
        "status_errors=$(wrk_field "$bt_out" status_errors)" \
        "socket_errors=$bt_sock" "evalsha=$bt_evalsha" \
        "evalsha_usec=$((bt_usec1 - bt_usec0))" "pg=$bt_pg" \
        "front_ticks=$((bt_l1 - bt_l0))" "app_ticks=$((bt_a1 - bt_a0))" \
        "redis_ticks=$((bt_r1 - bt_r0))" "wrk_cpu_before=$bt_w0" \
        "wrk_cpu_after=$bt_w1" "machine_ticks=$((bt_m1 - bt_m0))" \
        "checks=$(wrk_field "$bt_out" checks)" \
        "releases=$(wrk_field "$bt_out" releases)" \
        "others=$(wrk_field "$bt_out" others)"
}

# EVALSHA per release, counted exactly: LE_N checks of /bench-lease,
# one curl at a time, then, Redis's counts read before and after, the
# releases of their leases alone; Redis's time in EVALSHA (commandstats
# usec) during each of the two parts, and during LE_N token-bucket checks
# sent the same way before them.  Bounded: 5 s per curl.
LE_N=50
lease_exact() {
    say "EVALSHA per release: $LE_N checks, then their $LE_N releases"
    BT_REDIS_PORT=$REDIS_PORT
    : >"$VAR/leases"
    # The same number of token-bucket checks first, one at a time: the
    # time in the script to set the others beside.
    le_t0=$(redis_evalsha_usec)
    curl_checks "$LE_N" "http://127.0.0.1:$PORT/v1/check" "$DEMO_KEY" \
        /bench-tb exact 5 >"$VAR/tb.curl"
    le_tb=$(curl -s -K "$VAR/tb.curl" 2>/dev/null | grep -c '^200$') || true
    le_u0=$(redis_evalsha_usec)
    le_i=0
    while [ "$le_i" -lt "$LE_N" ]; do
        curl -s -m 5 -H "X-API-Key: $DEMO_KEY" \
            -H "Content-Type: application/json" \
            -d '{"route":"/bench-lease","subject":"exact"}' \
            "http://127.0.0.1:$PORT/v1/check" |
            sed -n 's/.*"lease":"\([^"]*\)".*/\1/p' >>"$VAR/leases" || true
        le_i=$((le_i + 1))
    done
    le_leases=$(wc -l <"$VAR/leases")
    le_u1=$(redis_evalsha_usec)
    le_e0=$(redis_calls evalsha)
    le_o0=$(redis_calls other)
    le_ok=0
    while IFS= read -r le_id; do
        le_st=$(curl -s -m 5 -o /dev/null -w '%{http_code}' \
            -H "X-API-Key: $DEMO_KEY" -H "Content-Type: application/json" \
            -d "{\"lease\":\"$le_id\"}" \
            "http://127.0.0.1:$PORT/v1/release") || true
        [ "$le_st" != 200 ] || le_ok=$((le_ok + 1))
    done <"$VAR/leases"
    le_e1=$(redis_calls evalsha)
    le_o1=$(redis_calls other)
    le_u2=$(redis_evalsha_usec)
    raw leaseexact "checks=$LE_N" "leases=$le_leases" "released=$le_ok" \
        "evalsha=$((le_e1 - le_e0))" "other=$((le_o1 - le_o0))" \
        "check_usec=$((le_u1 - le_u0))" "release_usec=$((le_u2 - le_u1))" \
        "tb_checks=$le_tb" "tb_usec=$((le_u0 - le_t0))"
    if [ "$le_leases" -ne "$LE_N" ] || [ "$le_ok" -ne "$LE_N" ] ||
        [ $((le_e1 - le_e0)) -ne "$LE_N" ] || [ $((le_o1 - le_o0)) -ne 0 ]; then
        echo "bench: $le_leases leases of $LE_N checks, $le_ok released with $((le_e1 - le_e0)) EVALSHA and $((le_o1 - le_o0)) other Redis commands: not one EVALSHA per release" >&2
        FAILED=1
    fi
}

# VmRSS of every worker, as "pid:kB" words.
worker_rss() {
    for wr_p in $(app_workers); do
        printf '%s:%s ' "$wr_p" "$(rss_kb "$wr_p")"
    done
}

# ---------------------------------------------------------------- rates

# One tier: rategen at $3 req/s for RATE_SECONDS against port $2; records
# rategen's RATE line and what its errors were, and returns 0 when the
# target held the rate.
rate_tier() {
    rt_name=$(printf '%s' "$1" | cut -c1)-$3.txt
    rt_out=$VAR/rate-$rt_name
    timeout --foreground $((RATE_SECONDS + 30)) "$RATEGEN" -r "$3" \
        -d "$RATE_SECONDS" -w 1 -c 256 -t 2000 -o "$TRACES/$rt_name" \
        -H "X-API-Key: $DEMO_KEY" -H "Content-Type: application/json" \
        -b '{"route":"/bench","subject":"bench"}' \
        "http://127.0.0.1:$2/v1/check" >"$rt_out" 2>"$rt_out.err" || true
    raw tier "target=$1" "offered=$3" "result=$(grep -m 1 '^RATE ' "$rt_out")"
    # What the errors were: rategen's first socket error and the count of
    # every unexpected status.
    sed -n "s/^rategen: \(first socket error\|status\)/\1/p" "$rt_out.err" |
        while IFS= read -r rt_note; do
            raw ratenote "target=$1" "offered=$3" "note=$rt_note"
        done
    python3 "$ROOT/bench/tables.py" held "$rt_out"
}

if [ "$ONLY" != closed ]; then
    rm -rf "$TRACES"
    mkdir -p "$TRACES"
    # How late the machine wakes a sleeping process, the stack idle: every
    # process of the chain sleeps between requests, so lateness here shows
    # in every target's tail.
    if [ "$WAKE_SECONDS" -gt 0 ]; then
        say "wake-up lateness: $WAKE_SECONDS s of 1 ms sleeps"
        WAKE_LINE=$("$BUILD/wakelag" "$WAKE_SECONDS") ||
            die "$BUILD/wakelag failed"
        raw wake "result=$WAKE_LINE"
    fi
    LOADAVG_RATE=$(cut -d' ' -f1-3 /proc/loadavg)
    # The fixed tiers for every target, then up by RATE_STEP while some
    # target still holds the rate; a target that failed a tier above the
    # fixed ones is not driven higher.
    ra_held="a b c" ra_rate=0
    # shellcheck disable=SC2086  # RATES is a list of words
    set -- $RATES
    while [ -n "$ra_held" ]; do
        if [ $# -gt 0 ]; then
            ra_rate=$1
            shift
            ra_targets="a b c"
        else
            ra_rate=$((ra_rate + RATE_STEP))
            [ "$ra_rate" -le "$RATE_MAX" ] || break
            ra_targets=$ra_held
        fi
        ra_next=""
        for t in $ra_targets; do
            case $t in
            a) ra_label="a noop probe" ra_port=$NOOP_PORT ;;
            b) ra_label="b evalsha probe" ra_port=$EVALSHA_PORT ;;
            *) ra_label="c ratelimit-fcgi" ra_port=$PORT ;;
            esac
            say "rate tier $ra_rate req/s: $ra_label"
            if rate_tier "$ra_label" "$ra_port" "$ra_rate"; then
                ra_next="$ra_next $t"
            fi
            # Let a target that fell behind drain before the next one.
            sleep 1
        done
        ra_held=$ra_next
    done
    python3 "$ROOT/bench/tables.py" plot "$RAW" "$VAR" ||
        die "bench/tables.py could not write the tiers for gnuplot"
    if command -v gnuplot >/dev/null 2>&1; then
        cat >"$VAR/rate.gp" <<GP
set terminal svg size 860,520 dynamic font "sans,12" background rgb "white"
set output "$VAR/rate.svg"
set title "Latency against offered rate (open loop), $(date -u '+%Y-%m-%d'), $(nproc) CPUs, everything on one machine"
set xlabel "offered rate, requests per second"
set ylabel "latency, ms (log scale)"
set logscale y
set grid
set key top left
set style data linespoints
set arrow from graph 0, first 10 to graph 1, first 10 nohead dt 3 lc rgb "#555555"
set label "10 ms: a rate is held below this p99" at graph 0.62, first 12.5 tc rgb "#555555"
set arrow from graph 0, first 2 to graph 1, first 2 nohead dt 3 lc rgb "#555555"
set label "2 ms: the goal at 5,000 req/s" at graph 0.62, first 2.5 tc rgb "#555555"
plot "$VAR/rate.a.dat" using 1:2 title "a no-op probe p50" lc rgb "#999999" pt 7, \
     "$VAR/rate.a.dat" using 1:3 title "a no-op probe p99" lc rgb "#999999" dt 2 pt 6, \
     "$VAR/rate.b.dat" using 1:2 title "b EVALSHA probe p50" lc rgb "#1f77b4" pt 7, \
     "$VAR/rate.b.dat" using 1:3 title "b EVALSHA probe p99" lc rgb "#1f77b4" dt 2 pt 6, \
     "$VAR/rate.c.dat" using 1:2 title "c ratelimit-fcgi p50" lc rgb "#d62728" pt 7, \
     "$VAR/rate.c.dat" using 1:3 title "c ratelimit-fcgi p99" lc rgb "#d62728" dt 2 pt 6
GP
        if gnuplot "$VAR/rate.gp" 2>"$VAR/gnuplot.err" && [ -s "$VAR/rate.svg" ]; then
            cp "$VAR/rate.svg" "$SVG.tmp" && mv "$SVG.tmp" "$SVG"
        else
            cat "$VAR/gnuplot.err" >&2
            echo "bench: gnuplot could not draw $SVG" >&2
            FAILED=1
        fi
    else
        echo "bench: gnuplot is missing (make deps): no $SVG" >&2
        FAILED=1
    fi
fi

# ---------------------------------------------------------------- closed loop

# After the tiers, which run first on the fresh stack: the closed-loop
# runs and the memory runs leave tens of thousands of keys in Redis, and
# their expiry minutes later would land in the tiers.
if [ "$ONLY" != rate ]; then
    # The last tiers overload every target: let the queues drain.
    [ "$ONLY" = closed ] || sleep 5
    LOADAVG=$(cut -d' ' -f1-3 /proc/loadavg)
    "$BUILD/ratelimitctl" -c "$VAR/ratelimit.conf" rule add demo-corp \
        --route /bench-over --algorithm sliding_window --limit 1 --window 3600 \
        >/dev/null || die "ratelimitctl could not add the /bench-over rule"
    if [ "$LEASES" = on ]; then
        "$BUILD/ratelimitctl" -c "$VAR/ratelimit.conf" rule add demo-corp \
            --route /bench-tb --algorithm token_bucket --capacity 1000000 \
            --refill-rate 100000 >/dev/null ||
            die "ratelimitctl could not add the /bench-tb rule"
        "$BUILD/ratelimitctl" -c "$VAR/ratelimit.conf" rule add demo-corp \
            --route /bench-lease --algorithm concurrency --max 1000 \
            --lease-ttl 60s >/dev/null ||
            die "ratelimitctl could not add the /bench-lease rule"
        # k and l: the token bucket of i, two and eight times over.
        for nb in 2 8; do
            nb_rule=$("$BUILD/ratelimitctl" -c "$VAR/ratelimit.conf" \
                rule add demo-corp --route "/bench-tb$nb" \
                --algorithm token_bucket --capacity 1000000 \
                --refill-rate 100000 | awk '$1 == "id" { print $2; exit }')
            [ -n "$nb_rule" ] ||
                die "ratelimitctl could not add the /bench-tb$nb rule"
            nb_i=2
            while [ "$nb_i" -le "$nb" ]; do
                "$BUILD/ratelimitctl" -c "$VAR/ratelimit.conf" limit add \
                    "$nb_rule" --name "bucket$nb_i" --algorithm token_bucket \
                    --capacity 1000000 --refill-rate 100000 >/dev/null ||
                    die "ratelimitctl could not add limit $nb_i of /bench-tb$nb"
                nb_i=$((nb_i + 1))
            done
        done
        sleep 1         # the rules' NOTIFY reaches the workers
    fi
    round=1
    while [ "$round" -le "$ROUNDS" ]; do
        say "round $round of $ROUNDS"
        bench_target "a noop probe" "$NOOP_PORT" \
            "$VAR/probe-noop/lighttpd.pid" "$VAR/check.lua" ""
        bench_target "b evalsha probe" "$EVALSHA_PORT" \
            "$VAR/probe-evalsha/lighttpd.pid" "$VAR/check.lua" ""
        bench_target "c ratelimit-fcgi" "$PORT" "$VAR/lighttpd.pid" \
            "$VAR/check.lua" c
        bench_target "d ratelimit-fcgi, new subjects" "$PORT" \
            "$VAR/lighttpd.pid" "$VAR/fresh.lua" d
        bench_target "e ratelimit-fcgi, over the limit" "$PORT" \
            "$VAR/lighttpd.pid" "$VAR/over.lua" e
        [ "$TLS" = off ] ||
            bench_target "f ratelimit-fcgi, TLS to Redis" "$TLS_PORT" \
                "$VAR/tls/lighttpd.pid" "$VAR/check.lua" f
        if [ "$NGINX_ON" = on ]; then
            bench_target "g nginx -> ratelimit-fcgi" "$NGINX_PORT" \
                "$VAR/nginx/nginx.pid" "$VAR/check.lua" g
            bench_target "h nginx, keep-alive $((2 * WORKERS))" \
                $((NGINX_PORT + 1)) "$VAR/nginx/nginx.pid" "$VAR/check.lua" h
        fi
        if [ "$LEASES" = on ]; then
            bench_target "i ratelimit-fcgi, token bucket" "$PORT" \
                "$VAR/lighttpd.pid" "$VAR/tb.lua" i
            bench_target "j check + release of a lease" "$PORT" \
                "$VAR/lighttpd.pid" "$VAR/lease.lua" j
            bench_target "k ratelimit-fcgi, 2 token buckets" "$PORT" \
                "$VAR/lighttpd.pid" "$VAR/tb2.lua" k
            bench_target "l ratelimit-fcgi, 8 token buckets" "$PORT" \
                "$VAR/lighttpd.pid" "$VAR/tb8.lua" l
        fi
        round=$((round + 1))
    done
    [ "$LEASES" = off ] || lease_exact
    REDIS_KEYS=$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" DBSIZE 2>/dev/null || echo "?")

    # Redis memory per counter, for each algorithm: MEM_COUNTERS checks, each
    # of a new subject, on a rule of one limit; Redis's used_memory and key
    # count before and after.  Bounded: curl, 16 at a time, 5 s each at most.
    MEM_COUNTERS=${BENCH_MEM_COUNTERS:-2000}
    redis_used() {
        redis-cli -h 127.0.0.1 -p "$REDIS_PORT" INFO memory 2>/dev/null |
            tr -d '\r' | sed -n 's/^used_memory://p'
    }
    for alg in sliding_window token_bucket gcra fixed_window; do
        case $alg in
        sliding_window) set -- --limit 1000000 --window 3600 ;;
        token_bucket) set -- --capacity 1000000 --refill-rate 1 ;;
        gcra) set -- --limit 1000000 --period 1h ;;
        *) set -- --limit 1000000 --calendar day ;;
        esac
        "$BUILD/ratelimitctl" -c "$VAR/ratelimit.conf" rule add demo-corp \
            --route "/mem/$alg" --algorithm "$alg" "$@" >/dev/null ||
            die "ratelimitctl could not add the /mem/$alg rule"
        curl_checks "$MEM_COUNTERS" "http://127.0.0.1:$PORT/v1/check" \
            "$DEMO_KEY" "/mem/$alg" "m%d" 5 >"$VAR/mem.curl"
        sleep 1         # the rule's NOTIFY reaches the workers
        mb=$(redis_used)
        kb=$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" DBSIZE)
        curl -s --parallel --parallel-max 16 -K "$VAR/mem.curl" >"$VAR/mem.status" 2>/dev/null
        ma=$(redis_used)
        ka=$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" DBSIZE)
        ok=$(grep -c '^200$' "$VAR/mem.status")
        raw mem "algorithm=$alg" "ok=$ok" "keys=$((ka - kb))" "bytes=$((ma - mb))"
    done
    REDIS_MEM=$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" INFO memory 2>/dev/null |
        tr -d '\r' | sed -n 's/^used_memory_human://p')

    # Worker memory over RSS_SECONDS of new subjects at RSS_RATE req/s
    # (open loop, in the background), every worker's VmRSS and its two
    # parts sampled every RSS_SECONDS / 6 s: RssAnon is the worker's own
    # memory; RssShmem counts the pages of the pool's shared segment the
    # worker has touched, which all workers share.
    if [ "$RSS_SECONDS" -gt 0 ]; then
        say "worker memory: ${RSS_SECONDS} s of new subjects at $RSS_RATE req/s"
        rss_sample 0
        timeout --foreground $((RSS_SECONDS + 30)) "$RATEGEN" -r "$RSS_RATE" \
            -d "$RSS_SECONDS" -c 64 -t 5000 \
            -H "X-API-Key: $DEMO_KEY" -H "Content-Type: application/json" \
            -b '{"route":"/bench","subject":"rss-%n"}' \
            "http://127.0.0.1:$PORT/v1/check" >"$VAR/rss.rate" \
            2>"$VAR/rss.rate.err" &
        rs_gen=$!
        rs_step=$((RSS_SECONDS / 6))
        [ "$rs_step" -ge 1 ] || rs_step=1
        rs_t=0
        while [ "$rs_t" -lt "$RSS_SECONDS" ]; do
            sleep "$rs_step"
            rs_t=$((rs_t + rs_step))
            rss_sample "$rs_t"
        done
        wait "$rs_gen" || true
        raw rssrun "result=$(cat "$VAR/rss.rate")"
    fi
fi

# ---------------------------------------------------------------- report

raw meta "date=$(date -u '+%Y-%m-%d %H:%M UTC')" \
    "commit=$(git rev-parse --short HEAD 2>/dev/null || echo '?')" \
    "cpus=$(nproc)" "tick=$TICK" "only=$ONLY" "connections=$CONNECTIONS" \
    "threads=$THREADS" "seconds=$BENCH_SECONDS" "warmup=$WARMUP_SECONDS" \
    "rounds=$ROUNDS" "workers=$WORKERS" "loadavg=$LOADAVG" \
    "loadavg_rate=${LOADAVG_RATE:-}" "redis_type=$REDIS_TYPE" \
    "redis_port=$REDIS_PORT" "redis_transport=$REDIS_TRANSPORT" \
    "redis_keys=${REDIS_KEYS:-}" "redis_memory=${REDIS_MEM:-}" \
    "mem_counters=${MEM_COUNTERS:-}" "rss_seconds=$RSS_SECONDS" \
    "rss_rate=$RSS_RATE" "rategen=$RATEGEN" "rate_seconds=$RATE_SECONDS" \
    "svg=$SVG" "svg_drawn=$([ -s "$SVG" ] && echo 1 || echo 0)" \
    "traces=$TRACES" "failed=$FAILED"
python3 "$ROOT/bench/tables.py" report "$RAW" >"$VAR/table" ||
    die "bench/tables.py could not make the tables of $RAW"

echo
cat "$VAR/table"
cp "$VAR/table" "$RESULT.tmp" && mv "$RESULT.tmp" "$RESULT"
cp "$RAW" "$RAW_RESULT.tmp" && mv "$RAW_RESULT.tmp" "$RAW_RESULT"
say "written to $RESULT"
exit "$FAILED"
