#!/bin/sh
# Misconfigurations name themselves (run by t/integration/run.sh against
# its stack).  Each of these is a PostgreSQL that answers but refuses what
# the service needs:
#   - a wrong password (a role of our own with a password, and a pg_hba.conf
#     line asking for it: the stack's PostgreSQL trusts every other role)
#   - a database that does not exist, a role that does not exist
#   - a database without the schema (ratelimitctl migrate never ran)
#   - a schema older than the build (its newest migration not applied)
#   - a role without the grants
# For each, a pool of its own behind a lighttpd of its own answers
# /health/ready 503 "postgresql misconfigured: <reason>" (not 200 degraded
# or ready), logs it once with its fix, and still fails closed (503) on a
# key it does not know; ratelimit-fcgi -C prints the fix in one line and
# exits 1, and exits 0 with one "ok" line on the stack's configuration.
# ratelimitctl names the configuration file in a connection error and says
# "run 'ratelimitctl migrate'" when the schema is missing.
# Servers on 127.0.0.1 ports PORT+191 to PORT+196, stopped on exit.
# shellcheck disable=SC2317 # helpers called through retry and trap

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

serve_dir rl-misconfig
SUFFIX=$$
PW_ROLE=rl_pw_$SUFFIX
NOGRANT_ROLE=rl_nogrant_$SUFFIX
EMPTY_DB=rl_empty_$SUFFIX
OLD_DB=rl_old_$SUFFIX
PG="host=127.0.0.1 port=$PG_PORT"
# The stack's pg_hba.conf (scripts/pg.sh: the cluster lives behind
# VAR/pgdata), kept to be put back.
HBA=$(readlink -f "$VAR/pgdata")/pg_hba.conf
cp "$HBA" "$T_TMP/pg_hba.orig"

# Puts pg_hba.conf back (in place: it stays the server's file, with its
# owner) and drops what this file made, however it ends.
misconfig_cleanup() {
    # shellcheck disable=SC2086 # one argument per pid
    end_pids $PIDS
    if [ -f "$T_TMP/pg_hba.orig" ]; then
        cat "$T_TMP/pg_hba.orig" >"$HBA"
        psql_q 'SELECT pg_reload_conf();' >/dev/null 2>&1
    fi
    psql_q "DROP DATABASE IF EXISTS $EMPTY_DB;" >/dev/null 2>&1
    psql_q "DROP DATABASE IF EXISTS $OLD_DB;" >/dev/null 2>&1
    psql_q "DROP ROLE IF EXISTS $PW_ROLE;" >/dev/null 2>&1
    psql_q "DROP ROLE IF EXISTS $NOGRANT_ROLE;" >/dev/null 2>&1
    rm -rf "$D"
}
trap 'misconfig_cleanup' EXIT

# ---------------------------------------------------------------- set-up

psql_q "CREATE ROLE $PW_ROLE LOGIN PASSWORD 'right';"
psql_q "CREATE ROLE $NOGRANT_ROLE LOGIN;"
psql_q "CREATE DATABASE $EMPTY_DB;"
psql_q "CREATE DATABASE $OLD_DB;"
# Only our role must give a password; the line comes first.
{
    echo "host all $PW_ROLE 127.0.0.1/32 scram-sha-256"
    cat "$T_TMP/pg_hba.orig"
} >"$T_TMP/pg_hba.new"
cat "$T_TMP/pg_hba.new" >"$HBA"
psql_q 'SELECT pg_reload_conf();' >/dev/null

# A schema one migration behind this build.
app_conf "$D/old.conf" "pg_conninfo=$PG dbname=$OLD_DB user=ratelimit"
"$BUILD/ratelimitctl" -c "$D/old.conf" migrate >/dev/null
echo "DELETE FROM schema_migrations WHERE version =
    (SELECT max(version) FROM schema_migrations);" |
    psql -h 127.0.0.1 -p "$PG_PORT" -U ratelimit -d "$OLD_DB" -X -q

# NAME PORT-OFFSET PG_CONNINFO REASON FIX: one scenario each.
SCENARIOS="pw 191 user=$PW_ROLE@password=wrong@dbname=ratelimit
nodb 192 user=ratelimit@dbname=rl_nosuchdb_$SUFFIX
norole 193 user=rl_nosuchrole_$SUFFIX@dbname=ratelimit
empty 194 user=ratelimit@dbname=$EMPTY_DB
old 195 user=ratelimit@dbname=$OLD_DB
nogrant 196 user=$NOGRANT_ROLE@dbname=ratelimit"

reason_of() {
    case $1 in
    pw) echo "postgresql misconfigured: authentication failed" ;;
    nodb) echo "postgresql misconfigured: database does not exist" ;;
    norole) echo "postgresql misconfigured: role does not exist" ;;
    empty) echo "postgresql misconfigured: schema missing" ;;
    old) echo "postgresql misconfigured: schema version " ;;
    nogrant) echo "postgresql misconfigured: permission denied for table" ;;
    esac
}

fix_of() {
    case $1 in
    pw) echo "fix: check the password in pg_conninfo" ;;
    nodb) echo "fix: create the database" ;;
    norole) echo "fix: create the role" ;;
    empty | old) echo "fix: run ratelimitctl migrate" ;;
    nogrant) echo "fix: GRANT SELECT ON tenants, api_keys, rules, limits TO $NOGRANT_ROLE" ;;
    esac
}

# ---------------------------------------------------------------- the pools

# ready_503 PORT: /health/ready of that pool answers 503 (the first
# connect may still be under way).
ready_503() {
    ready_on "$1" 503
}

printf '%s\n' "$SCENARIOS" >"$T_TMP/scenarios"
while read -r name off info; do
    port=$((PORT + off))
    private_app "$name" "$port" "pg_conninfo=$PG $(echo "$info" | tr '@' ' ')" \
        workers=2 </dev/null
    retry 50 ready_503 "$port" || true
    body=$(cat "$T_TMP/ready" 2>/dev/null)
    check "$name: /health/ready 503 with \"$(reason_of "$name")\" (got: $body)" \
        contains "$body" "\"reason\":\"$(reason_of "$name")"
    check "$name: the status is unavailable, not degraded" \
        contains "$body" '"status":"unavailable"'
    # Asked again: the same answer, and the log line is not repeated.
    for _ in 1 2 3 4 5; do
        ready_on "$port" 503 || true
    done
    sleep 0.2
    n=$(grep -c "postgresql misconfigured" "$D/$name.log" || true)
    check "$name: logged once per worker with its fix ($n lines, 2 workers)" \
        le "$n" 2
    check "$name: the log has the fix" \
        grep -q "$(fix_of "$name")" "$D/$name.log"
    if [ "$name" = empty ]; then
        got=$(pcheck "$port" "rl_unknown_$SUFFIX" /x s)
        check "$name: a key the pool does not know: 503 (got $got)" \
            eq "${got%% *}" 503
    fi
    stop_private
done <"$T_TMP/scenarios"

req GET /health/ready
check "the stack itself is still ready" eq "$STATUS" 200

# ---------------------------------------------------------------- -C

while read -r name off info; do
    out=$("$BUILD/ratelimit-fcgi" -C -c "$D/$name.conf" 2>&1)
    rc=$?
    check "-C $name: exit 1 (got $rc)" eq "$rc" 1
    line=$(printf '%s\n' "$out" | grep "$(reason_of "$name")" | head -n 1)
    check "-C $name: one line with the reason and its fix: $line" \
        contains "$line" "$(fix_of "$name")"
done <"$T_TMP/scenarios"

app_conf "$D/good.conf" "listen=unix:$D/good.sock"
out=$("$BUILD/ratelimit-fcgi" -C -c "$D/good.conf" 2>&1)
rc=$?
check "-C on the stack's configuration: exit 0 (got $rc: $out)" eq "$rc" 0
check "-C: one ok line" eq "$(printf '%s\n' "$out" | grep -c ': ok: ')" 1

app_conf "$D/noredis.conf" "redis=127.0.0.1:1"
out=$("$BUILD/ratelimit-fcgi" -C -c "$D/noredis.conf" 2>&1)
rc=$?
check "-C, Redis not listening: exit 1 (got $rc)" eq "$rc" 1
check "-C, Redis not listening: one line with the fix ($out)" \
    eq "$(printf '%s\n' "$out" | grep -c 'redis: PING failed.*fix: ')" 1

# A socket directory the user may not write to (root may write anywhere:
# the test then runs as nobody).
mkdir "$D/ro"
chmod 555 "$D/ro"
app_conf "$D/rodir.conf" "listen=unix:$D/ro/x.sock"
if [ "$(id -u)" = 0 ]; then
    out=$(runuser -u nobody -- "$BUILD/ratelimit-fcgi" -C -c "$D/rodir.conf" \
        2>&1)
else
    out=$("$BUILD/ratelimit-fcgi" -C -c "$D/rodir.conf" 2>&1)
fi
rc=$?
check "-C, a socket directory not writable: exit 1 (got $rc)" eq "$rc" 1
check "-C, a socket directory not writable: one line with the fix ($out)" \
    eq "$(printf '%s\n' "$out" | grep -c "socket directory $D/ro: .*fix: ")" 1

# ---------------------------------------------------------------- ratelimitctl

out=$("$BUILD/ratelimitctl" -c "$D/empty.conf" tenant list 2>&1)
check "ratelimitctl without the schema: run migrate ($out)" \
    contains "$out" "the schema is missing: run 'ratelimitctl migrate'"
check "ratelimitctl without the schema: names the file" \
    contains "$out" "(configuration $D/empty.conf)"
out=$("$BUILD/ratelimitctl" -c "$D/pw.conf" tenant list 2>&1)
check "ratelimitctl, a wrong password: the address and the file first ($out)" \
    contains "$out" "cannot connect to PostgreSQL at 127.0.0.1:$PG_PORT (configuration $D/pw.conf)"
check "ratelimitctl, a wrong password: and the fix" \
    contains "$out" "password authentication failed for user \"$PW_ROLE\"; fix: check the password"
out=$(cd "$T_TMP" && PGHOST=127.0.0.1 PGPORT=1 "$BUILD/ratelimitctl" \
    tenant list 2>&1)
# (/etc/ratelimit-fcgi/ratelimit.conf when there is one, else none.)
check "ratelimitctl without -c names the file it read, or none ($out)" \
    matches "$out" '\(configuration (/etc/ratelimit-fcgi/ratelimit.conf|none read)'

finish
