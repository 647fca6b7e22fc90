#!/bin/sh
# A private, throw-away PostgreSQL cluster for the dev stack and the tests.
#
# Usage: sh scripts/pg.sh start DIR PORT
#        sh scripts/pg.sh stop DIR
#        sh scripts/pg.sh destroy DIR
#        sh scripts/pg.sh status DIR
#
# start creates the cluster if there is none (superuser "ratelimit", trust
# authentication, UTF8), starts it listening on 127.0.0.1:PORT only, waits
# until it accepts connections and creates the database "ratelimit".  Extra
# server options may be given in PG_EXTRA_OPTS (e.g. "-c log_statement=all").
# stop is a no-op when the cluster is not running; destroy stops it and
# removes its data.
#
# The server must not run as root.  Run as root, the script runs it as the
# "postgres" user; run as anybody else, as that user.  Because DIR may lie
# where the postgres user cannot go (under /root, say), the cluster itself
# lives in a fresh /tmp/ratelimit-pg.XXXXXX directory:
#     DIR/pgdata -> /tmp/ratelimit-pg.XXXXXX/data   the cluster
#     DIR/pgsock -> /tmp/ratelimit-pg.XXXXXX/sock   its Unix socket directory
#     DIR/pg.log                                    the server's log
# The short /tmp path also keeps the socket path under the 107-byte limit.
set -eu

PROG=pg.sh
PG_USER=ratelimit
PG_DB=ratelimit
WAIT_SECONDS=30

say() { printf '%s: %s\n' "$PROG" "$*"; }
die() { printf '%s: %s\n' "$PROG" "$*" >&2; exit 1; }

usage() {
    printf 'usage: sh scripts/pg.sh start DIR PORT | stop DIR | destroy DIR | status DIR\n' >&2
    exit 2
}

# The bin directory of the newest PostgreSQL under /usr/lib/postgresql, or
# of the version that made an existing cluster (first argument, may be "").
find_bindir() {
    if [ -n "$1" ] && [ -x "/usr/lib/postgresql/$1/bin/initdb" ]; then
        echo "/usr/lib/postgresql/$1/bin"
        return 0
    fi
    best=
    best_major=0
    for d in /usr/lib/postgresql/*/bin; do
        [ -x "$d/initdb" ] || continue
        v=${d%/bin}
        v=${v##*/}
        major=${v%%.*}
        case $major in
        '' | *[!0-9]*) continue ;;
        esac
        if [ "$major" -gt "$best_major" ]; then
            best_major=$major
            best=$d
        fi
    done
    [ -n "$best" ] || die "initdb not found under /usr/lib/postgresql/*/bin (install the postgresql server package)"
    echo "$best"
}

# Runs a command as the user that owns the server, from /, since the
# caller's working directory may be closed to that user.
as_owner() {
    if [ "$RUN_AS" = "" ]; then
        (cd / && "$@")
    else
        (cd / && runuser -u "$RUN_AS" -- "$@")
    fi
}

check_user() {
    if [ "$(id -u)" -ne 0 ]; then
        RUN_AS=
        return 0
    fi
    RUN_AS=postgres
    id "$RUN_AS" >/dev/null 2>&1 ||
        die "running as root, but there is no \"postgres\" user to run the server as (create it, or run this script as an ordinary user)"
    command -v runuser >/dev/null 2>&1 ||
        die "running as root, but runuser(1) is missing: cannot start the server as \"postgres\" (install util-linux, or run this script as that user)"
    runuser -u "$RUN_AS" -- true 2>/dev/null ||
        die "cannot run commands as \"postgres\" with runuser"
}

# Sets DATA and SOCK to the real paths of an existing cluster, or to "".
locate() {
    DATA=
    SOCK=
    if [ -L "$DIR/pgdata" ]; then
        target=$(readlink "$DIR/pgdata")
        if [ -f "$target/PG_VERSION" ]; then
            DATA=$target
            SOCK=${target%/data}/sock
        fi
    elif [ -f "$DIR/pgdata/PG_VERSION" ]; then
        DATA=$DIR/pgdata
        SOCK=$DIR/pgsock
    fi
}

is_running() {
    [ -n "$DATA" ] && as_owner "$BIN/pg_ctl" status -D "$DATA" >/dev/null 2>&1
}

create_cluster() {
    # A dangling or foreign symlink is replaced; a real directory is not
    # touched, lest we remove data that is not ours.
    if [ -L "$DIR/pgdata" ]; then
        rm -f "$DIR/pgdata"
    elif [ -e "$DIR/pgdata" ]; then
        die "$DIR/pgdata exists but holds no cluster: remove it first"
    fi
    [ -L "$DIR/pgsock" ] && rm -f "$DIR/pgsock"
    [ -e "$DIR/pgsock" ] && die "$DIR/pgsock exists and is not a symlink: remove it first"

    top=$(mktemp -d /tmp/ratelimit-pg.XXXXXX)
    mkdir "$top/data" "$top/sock"
    chmod 755 "$top" "$top/sock"
    chmod 700 "$top/data"
    if [ -n "$RUN_AS" ]; then
        chown -R "$RUN_AS" "$top"
    fi
    say "initdb ($BIN) in $top/data"
    if ! as_owner "$BIN/initdb" -D "$top/data" --auth=trust \
        --username="$PG_USER" -E UTF8 --locale=C --no-sync \
        >"$top/initdb.log" 2>&1; then
        cat "$top/initdb.log" >&2
        rm -rf "$top"
        die "initdb failed"
    fi
    ln -s "$top/data" "$DIR/pgdata"
    ln -s "$top/sock" "$DIR/pgsock"
    DATA=$top/data
    SOCK=$top/sock
}

wait_ready() {
    i=0
    while [ "$i" -lt "$((WAIT_SECONDS * 10))" ]; do
        if "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" -U "$PG_USER" \
            -d postgres; then
            return 0
        fi
        if ! is_running; then
            tail -n 20 "$DIR/pg.log" >&2 2>/dev/null || true
            die "the server exited during start-up (log: $DIR/pg.log)"
        fi
        sleep 0.1
        i=$((i + 1))
    done
    tail -n 20 "$DIR/pg.log" >&2 2>/dev/null || true
    die "the server did not accept connections within $WAIT_SECONDS s (log: $DIR/pg.log)"
}

cmd_start() {
    case $PORT in
    '' | *[!0-9]*) die "PORT must be a number, not \"$PORT\"" ;;
    esac
    { [ "$PORT" -ge 1 ] && [ "$PORT" -le 65535 ]; } ||
        die "PORT must be 1 to 65535, not $PORT"
    mkdir -p "$DIR"
    DIR=$(cd "$DIR" && pwd)
    locate
    if [ -z "$DATA" ]; then
        BIN=$(find_bindir "")
        create_cluster
    else
        BIN=$(find_bindir "$(cat "$DATA/PG_VERSION")")
        say "reusing the cluster in $DATA"
    fi
    if is_running; then
        running_port=$(sed -n 4p "$DATA/postmaster.pid" 2>/dev/null || true)
        [ "$running_port" = "$PORT" ] ||
            die "already running in $DATA, but on port ${running_port:-?}, not $PORT: stop it first"
        say "already running ($DATA)"
    else
        say "starting on 127.0.0.1:$PORT (log: $DIR/pg.log)"
        # Without -l, the server writes to pg_ctl's standard output, which
        # is the log file opened here, by us: the server's user need not be
        # able to reach DIR.  pg_ctl -w returns once the server is ready or
        # has died, whichever comes first.
        if ! as_owner "$BIN/pg_ctl" start -w -t "$WAIT_SECONDS" -D "$DATA" \
            -o "-p $PORT -c listen_addresses=127.0.0.1 \
-c unix_socket_directories=$SOCK ${PG_EXTRA_OPTS:-}" \
            >>"$DIR/pg.log" 2>&1 </dev/null; then
            tail -n 20 "$DIR/pg.log" >&2 2>/dev/null || true
            die "pg_ctl start failed (log: $DIR/pg.log)"
        fi
    fi
    wait_ready
    exists=$("$BIN/psql" -X -q -tA -h 127.0.0.1 -p "$PORT" -U "$PG_USER" \
        -d postgres -c "SELECT 1 FROM pg_database WHERE datname = '$PG_DB'") ||
        die "cannot query the server on port $PORT"
    if [ "$exists" != 1 ]; then
        "$BIN/createdb" -h 127.0.0.1 -p "$PORT" -U "$PG_USER" \
            -O "$PG_USER" "$PG_DB" || die "createdb $PG_DB failed"
        say "created database $PG_DB"
    fi
    say "ready: host=127.0.0.1 port=$PORT dbname=$PG_DB user=$PG_USER"
}

# Stops the server of DIR, if any.  Returns 0 when it is not running.
stop_server() {
    [ -d "$DIR" ] || return 0
    DIR=$(cd "$DIR" && pwd)
    locate
    [ -n "$DATA" ] || { say "no cluster in $DIR"; return 0; }
    BIN=$(find_bindir "$(cat "$DATA/PG_VERSION")")
    if ! is_running; then
        say "not running"
        return 0
    fi
    say "stopping"
    if ! as_owner "$BIN/pg_ctl" stop -D "$DATA" -m fast -w -t "$WAIT_SECONDS" \
        >/dev/null 2>&1; then
        say "fast shutdown timed out; using immediate"
        as_owner "$BIN/pg_ctl" stop -D "$DATA" -m immediate -w \
            -t "$WAIT_SECONDS" >/dev/null 2>&1 || die "could not stop the server in $DATA"
    fi
    say "stopped"
}

cmd_destroy() {
    stop_server
    [ -d "$DIR" ] || return 0
    if [ -L "$DIR/pgdata" ]; then
        target=$(readlink "$DIR/pgdata")
        top=${target%/data}
        case $top in
        /tmp/ratelimit-pg.*)
            rm -rf "$top"
            say "removed $top"
            ;;
        *) say "not removing $target: not made by this script" ;;
        esac
        rm -f "$DIR/pgdata"
    fi
    [ -L "$DIR/pgsock" ] && rm -f "$DIR/pgsock"
    return 0
}

cmd_status() {
    [ -d "$DIR" ] || { say "no cluster in $DIR"; exit 3; }
    DIR=$(cd "$DIR" && pwd)
    locate
    [ -n "$DATA" ] || { say "no cluster in $DIR"; exit 3; }
    BIN=$(find_bindir "$(cat "$DATA/PG_VERSION")")
    if is_running; then
        say "running ($DATA)"
    else
        say "not running ($DATA)"
        exit 3
    fi
}

[ $# -ge 2 ] || usage
ACTION=$1
DIR=$2
[ -n "$DIR" ] || usage
check_user
case $ACTION in
start)
    [ $# -eq 3 ] || usage
    PORT=$3
    cmd_start
    ;;
stop)
    [ $# -eq 2 ] || usage
    stop_server
    ;;
destroy)
    [ $# -eq 2 ] || usage
    cmd_destroy
    ;;
status)
    [ $# -eq 2 ] || usage
    cmd_status
    ;;
*) usage ;;
esac
