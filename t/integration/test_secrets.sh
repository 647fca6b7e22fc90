#!/bin/sh
# test_secrets.sh -- passwords in the configuration file: `ratelimit-fcgi
# -T` never prints one (pg_conninfo in its keyword/value and URI forms,
# redis_password), nor does the error about a pg_conninfo libpq cannot
# read, and `ratelimit-fcgi -t` and ratelimitctl warn when the file
# holding one can be read by any user (mode 0644), but not once it is
# 0640.
#
# The files are the stack's ratelimit.conf with a password added; the
# stack's PostgreSQL trusts local connections, so the password is sent
# and ignored, and ratelimitctl's command succeeds.
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

PG_SECRET=pg-s3cret-4242
REDIS_SECRET=redis-s3cret-4242
BASE="host=127.0.0.1 port=$PG_PORT dbname=ratelimit user=ratelimit"
RUNS=0
UNEXPECTED=0
RATELIMITCTL=${RATELIMITCTL:-$BUILD/ratelimitctl}

# conf NAME LINE...: a copy of the stack's file with the LINEs in place of
# the keys they set, mode 0644; prints its path.
conf() {
    cf_file=$T_TMP/$1.conf
    shift
    app_conf_lines "$cf_file" "$@"
    printf '%s\n' "$cf_file"
}

# fcgi_test FLAG FILE: runs ratelimit-fcgi FLAG -c FILE; its standard
# output in OUT, its standard error in ERR, its exit status in RC.
fcgi_test() {
    RUNS=$((RUNS + 1))
    "$BUILD/ratelimit-fcgi" "$1" -c "$2" >"$T_TMP/out" 2>"$T_TMP/err"
    RC=$?
    OUT=$(cat "$T_TMP/out")
    ERR=$(cat "$T_TMP/err")
}

# ctl_run FILE ARG...: ratelimitctl -c FILE ARG...; as fcgi_test.
ctl_run() {
    RUNS=$((RUNS + 1))
    cr_file=$1
    shift
    "$RATELIMITCTL" -c "$cr_file" "$@" >"$T_TMP/out" 2>"$T_TMP/err"
    RC=$?
    OUT=$(cat "$T_TMP/out")
    ERR=$(cat "$T_TMP/err")
}

# expect NAME CMD...: check, counting a failure as unexpected.
expect() {
    ex_name=$1
    shift
    if "$@"; then
        pass "$ex_name"
    else
        UNEXPECTED=$((UNEXPECTED + 1))
        fail "$ex_name" "exit status $RC" "stdout: $(printf '%.400s' "$OUT")" \
            "stderr: $(printf '%.400s' "$ERR")"
    fi
}

# warned FILE MODE: $ERR has the warning naming FILE, MODE and chmod 640.
warned() {
    contains "$ERR" "warning: $1" && contains "$ERR" "mode $2" &&
        contains "$ERR" "chmod 640"
}

# no_secret: neither output holds a password's text.
# shellcheck disable=SC2317 # called through expect
no_secret() {
    not_contains "$OUT$ERR" "$PG_SECRET" &&
        not_contains "$OUT$ERR" "$REDIS_SECRET" &&
        not_contains "$OUT$ERR" "se cret"
}

# ------------------------------------------------ pg_conninfo, keyword form

F=$(conf kv "pg_conninfo = \"$BASE password=$PG_SECRET\"")
fcgi_test -t "$F"
expect "-t of a 0644 file with a password in pg_conninfo: exit 0" eq "$RC" 0
expect "-t warns: the file, its mode, chmod 640" warned "$F" 0644
expect "-t says nothing of the password itself" no_secret

fcgi_test -T "$F"
expect "-T warns as -t does" warned "$F" 0644
expect "-T does not print the password of pg_conninfo" no_secret
expect "-T shows that pg_conninfo has a password" \
    contains "$OUT" "password=(set)"
expect "-T keeps the rest of pg_conninfo" contains "$OUT" "$BASE"

ctl_run "$F" tenant list
expect "ratelimitctl tenant list with a 0644 file: exit 0" eq "$RC" 0
expect "ratelimitctl warns on stderr" warned "$F" 0644
expect "ratelimitctl's stdout has no warning" not_contains "$OUT" warning

chmod 640 "$F"
fcgi_test -t "$F"
expect "-t of the same file at 0640: exit 0" eq "$RC" 0
expect "-t of a 0640 file: no warning" not_contains "$ERR" warning
ctl_run "$F" tenant list
expect "ratelimitctl with a 0640 file: exit 0, no warning" \
    eq "$RC:$(contains "$ERR" warning && echo warned)" 0:

# ------------------------------------------------ quoted and URI forms

F=$(conf quoted "pg_conninfo = \"$BASE password = 'se cret$PG_SECRET'\"")
fcgi_test -T "$F"
expect "-T of a quoted password: exit 0" eq "$RC" 0
expect "-T hides a quoted password with a blank" no_secret

F=$(conf uri "pg_conninfo = \"postgresql://ratelimit:$PG_SECRET@127.0.0.1:$PG_PORT/ratelimit?connect_timeout=5\"")
fcgi_test -T "$F"
expect "-T of a URI with user:password@: warns" warned "$F" 0644
expect "-T hides the password of a URI" no_secret
expect "-T keeps the URI's host and database" \
    contains "$OUT" "@127.0.0.1:$PG_PORT/ratelimit?connect_timeout=5"
ctl_run "$F" tenant list
expect "ratelimitctl with the URI's password: works, and warns" \
    eq "$RC:$(warned "$F" 0644 && echo warned)" 0:warned

F=$(conf query "pg_conninfo = \"postgresql://ratelimit@127.0.0.1:$PG_PORT/ratelimit?password=$PG_SECRET&sslmode=disable\"")
fcgi_test -T "$F"
expect "-T of a URI with ?password=: warns" warned "$F" 0644
expect "-T hides ?password= of a URI" no_secret

# libpq's message about a string it cannot read quotes pieces of it.
F=$(conf bad "pg_conninfo = \"postgresql://ratelimit:$PG_SECRET%zz@127.0.0.1/ratelimit\"")
fcgi_test -t "$F"
expect "-t of a pg_conninfo libpq cannot read: exit 1, naming the key" \
    eq "$RC:$(contains "$ERR" "pg_conninfo: libpq cannot read it" && echo named)" \
    1:named
expect "-t's error does not quote the password" no_secret

# ------------------------------------------------ redis_password, none

F=$(conf redis "redis_password = \"$REDIS_SECRET\"")
fcgi_test -T "$F"
expect "-T of a 0644 file with redis_password: warns" warned "$F" 0644
expect "-T does not print redis_password" no_secret

F=$(conf none "pg_conninfo = \"$BASE\"")
fcgi_test -t "$F"
expect "-t of a 0644 file without a password: exit 0, no warning" \
    eq "$RC:$(contains "$ERR" warning && echo warned)" 0:

fault_row "passwords in a configuration file every user may read (0644): runs of -t, -T and ratelimitctl" \
    "$RUNS" "$UNEXPECTED" "-"
finish
