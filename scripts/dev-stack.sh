#!/bin/sh
# Starts and stops the development stack: a private PostgreSQL cluster, a
# private Redis and lighttpd with ratelimit-fcgi as its FastCGI backend,
# all on 127.0.0.1 and all kept under one directory.  `make run` and
# `make stop` use it, and so do the integration tests.
#
# Usage: dev-stack.sh start|stop|restart|status
#        dev-stack.sh start-redis|stop-redis|restart-redis|start-pg|stop-pg
#
# Environment (defaults in brackets):
#   VAR         [var/ in the repository] where everything lives: configs,
#                         logs, pid files (relative: to the current directory)
#   PORT        [8080]    lighttpd
#   REDIS_PORT  [6380]    Redis (sentinel: the master; the replica is
#                         REDIS_PORT+1, the sentinels +2, +3, +4)
#   REDIS_TYPE  [single]  single, cluster (3 primaries and 3 replicas on
#                         REDIS_CLUSTER_PORT..+5) or sentinel: see
#                         scripts/redis-ha.sh
#   REDIS_CLUSTER_PORT [7000]
#   REDIS_TRANSPORT [tcp] tcp, or unix: a single Redis also listens on
#                         $VAR/redis.sock and ratelimit-fcgi uses that
#   PG_PORT     [5433]    PostgreSQL
#   BUILD       [build]   where ratelimit-fcgi and ratelimitctl are
#   WORKERS     [4]       ratelimit-fcgi workers
#   EXTRA_CONF  []        lines appended to the generated ratelimit.conf (a
#                         key set here replaces the generated line)
#   PG_EXTRA_OPTS []      extra PostgreSQL server options, read by pg.sh
# A relative BUILD is taken from the repository root, like make does.
#
# Every wait is bounded; `stop` is safe when nothing runs.
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CALLER_PWD=$(pwd)
cd "$ROOT"

# A relative VAR is taken from the caller's directory; the default is the
# repository's var/.
VAR=${VAR:-$ROOT/var}
case $VAR in
/*) ;;
*) VAR=$CALLER_PWD/$VAR ;;
esac
PORT=${PORT:-8080}
REDIS_PORT=${REDIS_PORT:-6380}
REDIS_TRANSPORT=${REDIS_TRANSPORT:-tcp}
case $REDIS_TRANSPORT in
tcp | unix) ;;
*) echo "dev-stack.sh: REDIS_TRANSPORT is tcp or unix, not $REDIS_TRANSPORT" >&2
    exit 2 ;;
esac
REDIS_TYPE=${REDIS_TYPE:-single}
REDIS_CLUSTER_PORT=${REDIS_CLUSTER_PORT:-7000}
case $REDIS_TYPE in
single | cluster | sentinel) ;;
*) echo "dev-stack: REDIS_TYPE must be single, cluster or sentinel" >&2
    exit 1 ;;
esac
PG_PORT=${PG_PORT:-5433}
BUILD=${BUILD:-build}
WORKERS=${WORKERS:-4}
EXTRA_CONF=${EXTRA_CONF:-}
PG_SH=scripts/pg.sh
LIGHTTPD=/usr/sbin/lighttpd
DEMO_KEY=rl_demo_abc123xyz

case $BUILD in
/*) ;;
*) BUILD=$ROOT/$BUILD ;;
esac
# lighttpd splits bin-path at blanks.
case $VAR$BUILD in
*[[:space:]]*) echo "dev-stack: VAR and BUILD must not contain blanks" >&2
    exit 1 ;;
esac

say() {
    echo "dev-stack: $*"
}

die() {
    echo "dev-stack: $*" >&2
    exit 1
}

# pid_alive, wait_gone, end_pids, descendants
# shellcheck source-path=SCRIPTDIR source=proc.sh
. "$ROOT/scripts/proc.sh"

# Makes VAR absolute, creating it when asked to ($1 = create|nocreate).
# Returns 1 when it does not exist and was not to be created.
var_resolve() {
    if [ "$1" = create ]; then
        mkdir -p "$VAR"
    elif [ ! -d "$VAR" ]; then
        return 1
    fi
    VAR=$(cd "$VAR" && pwd)
    export VAR
}

# Ends process $1: SIGTERM, up to $2 tenths of a second, then SIGKILL.
end_pid() {
    kill -TERM "$1" 2>/dev/null || return 0
    if ! wait_gone "$1" "$2"; then
        kill -KILL "$1" 2>/dev/null || true
        wait_gone "$1" 20 || true
    fi
}

# Prints the pids of ratelimit-fcgi processes started for this VAR.
fcgi_pids() {
    ps -e -o pid= -o args= | awk -v conf="$VAR/ratelimit.conf" '
        $2 ~ /ratelimit-fcgi/ && index($0, conf) { print $1 }'
}

redis_cli() {
    redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"
}

# Prints the last lines of every log of the stack, for a failed start.
show_logs() {
    for f in "$VAR"/lighttpd-error.log "$VAR"/ratelimit-fcgi.log \
        "$VAR"/redis.log "$VAR"/redis-cluster/*/log "$VAR"/redis-sentinel/*/log \
        "$VAR"/*.log "$VAR"/pg*/*.log "$VAR"/pg*/log/*; do
        [ -f "$f" ] || continue
        case " $shown " in
        *" $f "*) continue ;;
        esac
        shown="$shown $f"
        echo "---- tail of $f" >&2
        tail -n 20 "$f" >&2
    done
}
shown=""

# ---------------------------------------------------------------- PostgreSQL

pg_start() {
    [ -f "$PG_SH" ] || die "$PG_SH is missing"
    sh "$PG_SH" start "$VAR" "$PG_PORT" ||
        die "PostgreSQL did not start (see $VAR)"
}

pg_stop() {
    if [ -f "$PG_SH" ]; then
        sh "$PG_SH" stop "$VAR" || true
    fi
}

# ---------------------------------------------------------------- Redis

# Whether the Redis of the type in use runs.
redis_running() {
    case $(redis_type) in
    cluster) pid_alive "$VAR/redis-cluster/$REDIS_CLUSTER_PORT/pid" ;;
    sentinel) pid_alive "$VAR/redis-sentinel/$REDIS_PORT/pid" ;;
    *) pid_alive "$VAR/redis.pid" ;;
    esac
}

# The type of the Redis started in VAR (it is remembered, for stop), else
# REDIS_TYPE.
redis_type() {
    if [ -f "$VAR/redis-type" ]; then
        cat "$VAR/redis-type"
    else
        echo "$REDIS_TYPE"
    fi
}

redis_start() {
    if [ -f "$VAR/redis-type" ] && [ "$(redis_type)" != "$REDIS_TYPE" ]; then
        redis_stop
    fi
    echo "$REDIS_TYPE" >"$VAR/redis-type"
    if redis_running >/dev/null; then
        return 0
    fi
    case $REDIS_TYPE in
    cluster)
        sh "$ROOT/scripts/redis-ha.sh" cluster start "$VAR/redis-cluster" \
            "$REDIS_CLUSTER_PORT" || die "the Redis Cluster did not start"
        return 0
        ;;
    sentinel)
        sh "$ROOT/scripts/redis-ha.sh" sentinel start "$VAR/redis-sentinel" \
            "$REDIS_PORT" || die "Redis Sentinel did not start"
        return 0
        ;;
    esac
    mkdir -p "$VAR/redis"
    # With REDIS_TRANSPORT=unix it also listens on a socket only we reach.
    set --
    [ "$REDIS_TRANSPORT" = unix ] &&
        set -- --unixsocket "$VAR/redis.sock" --unixsocketperm 700
    # hz 100: with thousands of keys expiring a second (the counters of
    # new subjects), Redis's expiry, run hz times a second, otherwise
    # stops everything for milliseconds at a time (doc/redis.md, "Persistence,
    # eviction and expiry").
    redis-server --bind 127.0.0.1 --port "$REDIS_PORT" "$@" --hz 100 \
        --save "" --appendonly no --dir "$VAR/redis" \
        --pidfile "$VAR/redis.pid" --logfile "$VAR/redis.log" \
        --daemonize yes >/dev/null ||
        die "redis-server failed (see $VAR/redis.log)"
    rs_n=0
    until [ "$(redis_cli ping 2>/dev/null)" = PONG ]; do
        rs_n=$((rs_n + 1))
        if [ "$rs_n" -gt 100 ]; then
            tail -n 20 "$VAR/redis.log" >&2 || true
            die "Redis did not answer PING on 127.0.0.1:$REDIS_PORT in 10 s"
        fi
        sleep 0.1
    done
}

redis_stop() {
    case $(redis_type) in
    cluster) sh "$ROOT/scripts/redis-ha.sh" cluster stop "$VAR/redis-cluster" ;;
    sentinel) sh "$ROOT/scripts/redis-ha.sh" sentinel stop "$VAR/redis-sentinel" ;;
    esac
    rm -f "$VAR/redis-type"
    rs_pid=$(pid_alive "$VAR/redis.pid") || {
        rm -f "$VAR/redis.pid"
        return 0
    }
    redis_cli shutdown nosave >/dev/null 2>&1 || true
    if ! wait_gone "$rs_pid" 50; then
        end_pid "$rs_pid" 50
    fi
    rm -f "$VAR/redis.pid"
}

# ---------------------------------------------------------------- the app

# Writes $VAR/ratelimit.conf.  A key that EXTRA_CONF sets is left out of
# the generated part, since the loader rejects a key set twice.
write_conf() {
    {
        echo "# Generated by scripts/dev-stack.sh; rewritten on every start."
        echo "# allow_root: the stack runs as root (lighttpd too) in a private"
        echo "# directory that only root may enter; a production file sets user."
        while IFS='|' read -r wc_key wc_value; do
            [ -n "$wc_key" ] || continue
            if printf '%s\n' "$EXTRA_CONF" |
                grep -Eq "^[[:space:]]*${wc_key}[[:space:]]*="; then
                continue
            fi
            echo "$wc_key = $wc_value"
        done <<EOF
listen|""
workers|$WORKERS
allow_root|on
pg_conninfo|"host=127.0.0.1 port=$PG_PORT dbname=ratelimit user=ratelimit"
log_level|info
$(redis_conf)
EOF
        if [ -n "$EXTRA_CONF" ]; then
            printf '%s\n' "$EXTRA_CONF"
        fi
    } >"$VAR/ratelimit.conf.tmp"
    mv "$VAR/ratelimit.conf.tmp" "$VAR/ratelimit.conf"
}

# The Redis lines of ratelimit.conf for REDIS_TYPE, as key|value.
redis_conf() {
    case $REDIS_TYPE in
    cluster)
        echo "redis_type|cluster"
        echo "redis|127.0.0.1:$REDIS_CLUSTER_PORT,127.0.0.1:$((REDIS_CLUSTER_PORT + 1)),127.0.0.1:$((REDIS_CLUSTER_PORT + 2))"
        ;;
    sentinel)
        echo "redis_type|sentinel"
        echo "redis|127.0.0.1:$((REDIS_PORT + 2)),127.0.0.1:$((REDIS_PORT + 3)),127.0.0.1:$((REDIS_PORT + 4))"
        echo "redis_sentinel_master|rlmaster"
        ;;
    *)
        if [ "$REDIS_TRANSPORT" = unix ]; then
            echo "redis|unix:$VAR/redis.sock"
        else
            echo "redis|127.0.0.1:$REDIS_PORT"
        fi
        ;;
    esac
}

migrate_and_seed() {
    "$BUILD/ratelimitctl" -c "$VAR/ratelimit.conf" migrate ||
        die "ratelimitctl migrate failed"
    psql -h 127.0.0.1 -p "$PG_PORT" -U ratelimit -d ratelimit \
        -v ON_ERROR_STOP=1 -q -f schema/dev_seed.sql ||
        die "loading schema/dev_seed.sql failed"
}

write_lighttpd_conf() {
    mkdir -p "$VAR/htdocs"
    cat >"$VAR/lighttpd.conf" <<EOF
# Generated by scripts/dev-stack.sh; rewritten on every start.
server.modules = ( "mod_fastcgi" )
server.port = $PORT
server.bind = "127.0.0.1"
server.document-root = "$VAR/htdocs"
server.errorlog = "$VAR/lighttpd-error.log"
# The backend's stderr (our log) goes here.
server.breakagelog = "$VAR/ratelimit-fcgi.log"
server.pid-file = "$VAR/lighttpd.pid"
fastcgi.server = ( "/" => ((
    "bin-path" => "$BUILD/ratelimit-fcgi -c $VAR/ratelimit.conf",
    "socket" => "$VAR/fcgi.sock",
    "check-local" => "disable",
    "max-procs" => 1
)) )
EOF
}

lighttpd_start() {
    [ -x "$BUILD/ratelimit-fcgi" ] ||
        die "$BUILD/ratelimit-fcgi is missing: run make first"
    write_lighttpd_conf
    "$LIGHTTPD" -tt -f "$VAR/lighttpd.conf" >/dev/null ||
        die "lighttpd rejects $VAR/lighttpd.conf"
    "$LIGHTTPD" -f "$VAR/lighttpd.conf" || {
        show_logs
        die "lighttpd did not start"
    }
}

# Waits (at most 30 s) until /health/ready answers 200.
wait_ready() {
    wr_n=0
    while :; do
        wr_code=$(curl -s -o /dev/null -m 2 -w '%{http_code}' \
            "http://127.0.0.1:$PORT/health/ready" 2>/dev/null || true)
        [ "$wr_code" = 200 ] && return 0
        wr_n=$((wr_n + 1))
        if [ "$wr_n" -gt 150 ]; then
            show_logs
            die "/health/ready did not answer 200 within 30 s (last: $wr_code)"
        fi
        sleep 0.2
    done
}

lighttpd_stop() {
    ls_pids=""
    if ls_pid=$(pid_alive "$VAR/lighttpd.pid"); then
        # Note the backends before lighttpd goes, since they are reparented
        # when it exits.
        ls_pids=$(descendants "$ls_pid")
        end_pid "$ls_pid" 100
    fi
    rm -f "$VAR/lighttpd.pid"
    # lighttpd stops its bin-path backend; make sure that the master and
    # every worker are gone too.
    ls_pids="$ls_pids $(fcgi_pids)"
    # shellcheck disable=SC2086 # a list of pids
    end_pids $ls_pids
    rm -f "$VAR"/fcgi.sock*
}

# ---------------------------------------------------------------- commands

redis_summary() {
    case $REDIS_TYPE in
    cluster) echo "Redis Cluster 127.0.0.1:$REDIS_CLUSTER_PORT-$((REDIS_CLUSTER_PORT + 5)) (3 primaries, 3 replicas)" ;;
    sentinel) echo "Redis master 127.0.0.1:$REDIS_PORT, replica :$((REDIS_PORT + 1)), sentinels :$((REDIS_PORT + 2))-$((REDIS_PORT + 4)) (rlmaster)" ;;
    *) echo "Redis 127.0.0.1:$REDIS_PORT" ;;
    esac
}

redis_logs() {
    case $REDIS_TYPE in
    cluster) echo "$VAR/redis-cluster/*/log" ;;
    sentinel) echo "$VAR/redis-sentinel/*/log" ;;
    *) echo "$VAR/redis.log" ;;
    esac
}

summary() {
    cat <<EOF
dev-stack: running in $VAR
  http://127.0.0.1:$PORT  lighttpd -> ratelimit-fcgi ($WORKERS workers)
  $(redis_summary), PostgreSQL 127.0.0.1:$PG_PORT (db ratelimit)
  logs: $VAR/ratelimit-fcgi.log $VAR/lighttpd-error.log $(redis_logs)

Try:
  curl -s -X POST http://127.0.0.1:$PORT/v1/check -H 'X-API-Key: $DEMO_KEY' \\
      -H 'Content-Type: application/json' \\
      -d '{"route":"/api/payments/1","subject":"user-1"}'
  curl -s http://127.0.0.1:$PORT/health/ready
  $BUILD/ratelimitctl -c $VAR/ratelimit.conf tenant list
Stop with: make stop
EOF
}

cmd_start() {
    var_resolve create
    cs_was=$(redis_type)
    if pid_alive "$VAR/lighttpd.pid" >/dev/null &&
        [ "$(redis_type)" = "$REDIS_TYPE" ] && redis_running >/dev/null; then
        say "already running in $VAR (http://127.0.0.1:$PORT)"
        exit 0
    fi
    [ -x "$BUILD/ratelimitctl" ] ||
        die "$BUILD/ratelimitctl is missing: run make first"
    pg_start
    redis_start
    write_conf
    migrate_and_seed
    # A pool started for another Redis type keeps its configuration: it
    # starts again with the new one.
    if [ "$cs_was" != "$REDIS_TYPE" ] &&
        pid_alive "$VAR/lighttpd.pid" >/dev/null; then
        say "Redis is now $REDIS_TYPE (was $cs_was): restarting lighttpd"
        lighttpd_stop
    fi
    if ! pid_alive "$VAR/lighttpd.pid" >/dev/null; then
        lighttpd_start
    fi
    wait_ready
    summary
}

cmd_stop() {
    var_resolve nocreate || return 0
    lighttpd_stop
    redis_stop
    pg_stop
}

cmd_status() {
    var_resolve nocreate || {
        say "not running ($VAR does not exist)"
        return 1
    }
    st_rc=0
    if st_pid=$(pid_alive "$VAR/lighttpd.pid"); then
        say "lighttpd running (pid $st_pid), ratelimit-fcgi pids:" \
            "$(fcgi_pids | tr '\n' ' ')"
    else
        say "lighttpd not running"
        st_rc=1
    fi
    if st_pid=$(redis_running); then
        say "redis ($(redis_type)) running (pid $st_pid)"
    else
        say "redis not running"
        st_rc=1
    fi
    return "$st_rc"
}

case ${1:-} in
start) cmd_start ;;
stop) cmd_stop ;;
restart)
    cmd_stop
    cmd_start
    ;;
status) cmd_status ;;
start-redis)
    var_resolve create
    redis_start
    ;;
stop-redis)
    var_resolve nocreate || exit 0
    redis_stop
    ;;
restart-redis)
    var_resolve create
    redis_stop
    redis_start
    ;;
start-pg)
    var_resolve create
    pg_start
    ;;
stop-pg)
    var_resolve nocreate || exit 0
    pg_stop
    ;;
*)
    echo "usage: $0 start|stop|restart|status|start-redis|stop-redis|restart-redis|start-pg|stop-pg" >&2
    exit 2
    ;;
esac
