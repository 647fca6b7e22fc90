# shellcheck shell=sh
# Helpers for the integration tests, sourced by t/integration/test_*.sh.
#
# run.sh starts a private stack (scripts/dev-stack.sh) and exports where
# it is: VAR, PORT, REDIS_PORT, PG_PORT, BUILD, WORKERS, plus RESULTS (a
# file that collects one "pass NAME" or "fail NAME" line per check, so that
# run.sh can add up all the test files) and STACK_UP (1 when the stack
# answered /health/ready).
#
# The pieces:
#   check NAME CMD...   runs CMD; records NAME as passed when it succeeds
#   req METHOD PATH [BODY|-] [HEADER...]
#                       one HTTP request to the stack; sets STATUS, BODY,
#                       TIME (seconds) and keeps the headers for `header`
#   header NAME         a header of the last response (the final one)
#   json_field NAME [JSON]  a top-level field of $BODY (or JSON): strings
#                       raw, everything else as JSON; "<absent>" and status 1
#                       when there is no such field
#   fetch URL [CURL-ARG...]
#                       like req, for any URL, with curl's own arguments
#   check_req KEY BODY  req POST /v1/check with the key in X-API-Key
#   finish              prints "N passed, M failed" for this file and exits
# and, at the end, what the test files that run servers of their own
# (lighttpd, nginx, Apache, ratelimit-fcgi on its own socket) share.
# Variable names inside helpers carry a per-function prefix, since POSIX sh
# has no local variables.

T_LIB_DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$T_LIB_DIR/../.." && pwd)

VAR=${VAR:-$ROOT/var}
PORT=${PORT:-18080}
REDIS_PORT=${REDIS_PORT:-16380}
PG_PORT=${PG_PORT:-15433}
BUILD=${BUILD:-build}
WORKERS=${WORKERS:-4}
RESULTS=${RESULTS:-}
STACK_UP=${STACK_UP:-1}
case $BUILD in
/*) ;;
*) BUILD=$ROOT/$BUILD ;;
esac
export VAR PORT REDIS_PORT PG_PORT BUILD WORKERS

# Debian's programs first, python3 above all (scripts/install-deps.sh
# installs it): a version manager's shim earlier in PATH can take a second
# to start, which the many small helpers below would pay on every call.
PATH=/usr/bin:/bin:$PATH
export PATH

BASE_URL=http://127.0.0.1:$PORT
# shellcheck disable=SC2034 # used by the test files
DEMO_KEY=rl_demo_abc123xyz
# shellcheck disable=SC2034
DEMO_ADMIN_KEY=rl_demo_admin_key
T_SUITE=${T_SUITE:-$(basename "$0" .sh)}

PASSED=0
FAILED=0
STATUS=
BODY=
TIME=
R_METHOD=
R_PATH=

# Scratch files of this test file; run.sh removes VAR afterwards.
T_TMP=$VAR/tmp.$T_SUITE.$$
mkdir -p "$T_TMP"

# ---------------------------------------------------------------- results

pass() {
    PASSED=$((PASSED + 1))
    echo "ok - $T_SUITE: $1"
    if [ -n "$RESULTS" ]; then
        echo "pass $T_SUITE: $1" >>"$RESULTS"
    fi
}

# fail NAME [DETAIL...]
fail() {
    FAILED=$((FAILED + 1))
    echo "not ok - $T_SUITE: $1"
    shift
    for fl_line in "$@"; do
        echo "    $fl_line"
    done
    if [ -n "$RESULTS" ]; then
        echo "fail $T_SUITE: $1" >>"$RESULTS"
    fi
}

# check NAME CMD...: the check passes when CMD exits 0.  A failure shows
# the command with its arguments expanded and the last request.
check() {
    ck_name=$1
    shift
    if "$@"; then
        pass "$ck_name"
    else
        fail "$ck_name" "condition: $*" \
            "last request: $R_METHOD $R_PATH -> $STATUS $(printf '%.300s' "$BODY")"
    fi
}

# fault_row SCENARIO REQUESTS UNEXPECTED RECOVERY: one row of the fault
# table that run.sh prints at the end (`make test-faults`): how many
# requests the scenario made, how many got a status it did not expect, and
# how long the service took to answer normally again (e.g. "0.4 s", "-").
fault_row() {
    if [ -n "${FAULT_TABLE:-}" ]; then
        printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$FAULT_TABLE"
    fi
}

# Prints this file's total and exits non-zero when anything failed.
finish() {
    echo "$T_SUITE: $PASSED passed, $FAILED failed"
    rm -rf "$T_TMP"
    [ "$FAILED" -eq 0 ]
    exit
}

# Stops this file early (with one failure) when the stack is not up, so
# that a broken start shows as one clear failure, not as dozens.
require_stack() {
    if [ "$STACK_UP" != 1 ]; then
        fail "the dev stack is up (see the start log above)"
        finish
    fi
}

# ---------------------------------------------------------------- conditions

eq() {
    [ "$1" = "$2" ]
}

ne() {
    [ "$1" != "$2" ]
}

# Integer comparisons that fail (rather than error) on non-numbers.
is_int() {
    case $1 in
    '' | - | *[!0-9-]* | ?*-*) return 1 ;;
    esac
    return 0
}

ge() {
    is_int "$1" && is_int "$2" && [ "$1" -ge "$2" ]
}

le() {
    is_int "$1" && is_int "$2" && [ "$1" -le "$2" ]
}

# lt_num A B: A < B for decimal numbers such as curl's times.
lt_num() {
    awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 < b + 0 && a != "") }'
}

# contains HAYSTACK NEEDLE
contains() {
    case $1 in
    *"$2"*) return 0 ;;
    esac
    return 1
}

# not_contains HAYSTACK NEEDLE
not_contains() {
    ! contains "$1" "$2"
}

# matches TEXT ERE
matches() {
    printf '%s\n' "$1" | grep -Eq -- "$2"
}

# retry TENTHS CMD...: runs CMD every 0.1 s until it succeeds, at most
# TENTHS times.  Returns 1 when it never did.
retry() {
    rt_max=$1
    shift
    rt_n=0
    while [ "$rt_n" -lt "$rt_max" ]; do
        "$@" && return 0
        rt_n=$((rt_n + 1))
        sleep 0.1
    done
    return 1
}

# workers_of PID: the pids of PID's children, one per line, sorted.
workers_of() {
    ps -o pid= --ppid "$1" | tr -d ' ' | sort -n
}

# has_workers PID N: PID has N children now.
has_workers() {
    [ "$(count_lines "$(workers_of "$1")")" = "$2" ]
}

# replaced VICTIM N [MASTER]: the pool (the stack's, or MASTER's) has N
# workers again, VICTIM not among them.
replaced() {
    if [ -n "${3:-}" ]; then
        rp_now=$(workers_of "$3")
    else
        rp_now=$(fcgi_worker_pids)
    fi
    [ "$(count_lines "$rp_now")" = "$2" ] &&
        ! printf '%s\n' "$rp_now" | grep -qx -- "$1"
}

# wait_workers PID N: up to 5 s for PID to have N children.
wait_workers() {
    retry 50 has_workers "$1" "$2"
}

# ---------------------------------------------------------------- HTTP

# curl_request URL [CURL-ARG...]: one request; sets STATUS (000 when
# nothing answered), BODY and TIME (seconds), and keeps the headers for
# `header`.  The part that req and fetch share.
curl_request() {
    cr_url=$1
    shift
    rm -f "$T_TMP/headers" "$T_TMP/body"
    cr_out=$(curl -s -m 10 -D "$T_TMP/headers" -o "$T_TMP/body" \
        -w '%{http_code} %{time_total}' "$@" "$cr_url") || true
    STATUS=${cr_out%% *}
    # shellcheck disable=SC2034 # used by the test files
    TIME=${cr_out#* }
    [ -n "$STATUS" ] || STATUS=000
    BODY=$(cat "$T_TMP/body" 2>/dev/null || true)
    touch "$T_TMP/headers"
}

# req METHOD PATH [BODY|-] [HEADER...]: BODY "-" (or none) sends no body.
req() {
    R_METHOD=$1
    R_PATH=$2
    shift 2
    rq_body=-
    if [ $# -gt 0 ]; then
        rq_body=$1
        shift
    fi
    # Turn the remaining arguments (headers) into "-H HEADER" pairs.
    rq_n=$#
    while [ "$rq_n" -gt 0 ]; do
        set -- "$@" -H "$1"
        shift
        rq_n=$((rq_n - 1))
    done
    if [ "$rq_body" != - ]; then
        set -- "$@" --data-raw "$rq_body"
    fi
    curl_request "$BASE_URL$R_PATH" -X "$R_METHOD" "$@"
}

# fetch URL [CURL-ARG...]: one request to any server, with curl's own
# arguments (-X, -H, --data-raw, --interface...); sets what req sets.  A
# failed check shows it as "curl URL".
fetch() {
    R_METHOD=curl
    R_PATH=$1
    curl_request "$@"
}

# request_statuses N [CURL-ARG...]: N requests one after another (the URL
# among the arguments); prints their statuses, each after a blank.
request_statuses() {
    rs_n=$1
    shift
    rs_out=
    while [ "$rs_n" -gt 0 ]; do
        rs_out="$rs_out $(curl -s -m 10 -o /dev/null -w '%{http_code}' "$@")"
        rs_n=$((rs_n - 1))
    done
    echo "$rs_out"
}

# header NAME [FILE]: the value of NAME in the final response of FILE
# (default: the last request).  Empty when absent.
header() {
    tr -d '\r' <"${2:-$T_TMP/headers}" | awk -v name="$1" '
        /^HTTP\// { value = "" }
        {
            i = index($0, ":")
            if (i > 1 && tolower(substr($0, 1, i - 1)) == tolower(name)) {
                value = substr($0, i + 1)
                sub(/^[ \t]+/, "", value)
                sub(/[ \t]+$/, "", value)
            }
        }
        END { printf "%s", value }'
}

check_req() {
    req POST /v1/check "$2" "X-API-Key: $1" "Content-Type: application/json"
}

# check_200 KEY BODY: one check, which answers 200.
check_200() {
    check_req "$1" "$2"
    [ "$STATUS" = 200 ]
}

json_field() {
    python3 -c '
import json, sys
try:
    doc = json.loads(sys.argv[2])
except ValueError:
    print("<invalid json>")
    sys.exit(1)
if not isinstance(doc, dict) or sys.argv[1] not in doc:
    print("<absent>")
    sys.exit(1)
value = doc[sys.argv[1]]
print(value if isinstance(value, str) else json.dumps(value))
' "$1" "${2-$BODY}"
}

# json_equal A B: the two JSON texts are the same value.
json_equal() {
    python3 -c '
import json, sys
try:
    sys.exit(0 if json.loads(sys.argv[1]) == json.loads(sys.argv[2]) else 1)
except ValueError:
    sys.exit(1)
' "$1" "$2"
}

# A JSON check body.  check_body ROUTE [SUBJECT [COST]]
check_body() {
    if [ $# -ge 3 ]; then
        printf '{"route":"%s","subject":"%s","cost":%s}' "$1" "$2" "$3"
    elif [ $# -ge 2 ]; then
        printf '{"route":"%s","subject":"%s"}' "$1" "$2"
    else
        printf '{"route":"%s"}' "$1"
    fi
}

# Quotes $1 as a curl config file string.
curl_quote() {
    printf '"%s"' "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g')"
}

# curl_batch FILE N KEY BODY: writes a curl config of N check requests.
# Request i keeps its body in $T_TMP/batch.i.body and its headers in
# $T_TMP/batch.i.head; the status codes are printed one a line.
curl_batch_conf() {
    cb_i=1
    cb_body=$(curl_quote "$4")
    : >"$1"
    while [ "$cb_i" -le "$2" ]; do
        {
            [ "$cb_i" -gt 1 ] && echo next
            echo "url = \"$BASE_URL/v1/check\""
            echo "header = \"X-API-Key: $3\""
            echo 'header = "Content-Type: application/json"'
            echo "data-raw = $cb_body"
            echo "output = \"$T_TMP/batch.$cb_i.body\""
            echo "dump-header = \"$T_TMP/batch.$cb_i.head\""
            printf '%s\n' 'write-out = "%{http_code}\n"'
            echo 'max-time = 20'
        } >>"$1"
        cb_i=$((cb_i + 1))
    done
}

# seq_checks N KEY BODY: N checks one after another from one curl process
# (fast: no process start between them).  Statuses go to $T_TMP/statuses.
seq_checks() {
    rm -f "$T_TMP"/batch.*
    curl_batch_conf "$T_TMP/batch.conf" "$1" "$2" "$3"
    curl --no-progress-meter -K "$T_TMP/batch.conf" >"$T_TMP/statuses" ||
        true
}

# par_checks N PARALLEL KEY BODY: N checks, PARALLEL at a time.  Statuses
# go to $T_TMP/statuses.
par_checks() {
    rm -f "$T_TMP"/batch.*
    curl_batch_conf "$T_TMP/batch.conf" "$1" "$3" "$4"
    # (-s would not silence the parallel progress meter.)
    curl --no-progress-meter --parallel --parallel-max "$2" \
        -K "$T_TMP/batch.conf" \
        >"$T_TMP/statuses" || true
}

# count_status CODE: how many of the last batch answered CODE.
count_status() {
    grep -cx -- "$1" "$T_TMP/statuses" || true
}

# batch_status I, batch_body I, batch_header I NAME: request I of the last
# batch.
batch_status() {
    sed -n "${1}p" "$T_TMP/statuses"
}

batch_body() {
    cat "$T_TMP/batch.$1.body" 2>/dev/null || true
}

batch_header() {
    header "$2" "$T_TMP/batch.$1.head"
}

# ---------------------------------------------------------------- the stack

ctl() {
    "$BUILD/ratelimitctl" -c "$VAR/ratelimit.conf" "$@"
}

# psql_q SQL: runs SQL as the ratelimit user, unaligned, tuples only.
# psql variables given as further NAME=VALUE arguments can be used as
# :'NAME' in SQL.
psql_q() {
    pq_sql=$1
    shift
    for pq_v in "$@"; do
        set -- "$@" -v "$pq_v"
        shift
    done
    printf '%s\n' "$pq_sql" | psql -h 127.0.0.1 -p "$PG_PORT" -U ratelimit \
        -d ratelimit -X -A -t -q -v ON_ERROR_STOP=1 "$@"
}

rcli() {
    redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"
}

# tb_tokens KEY: the tokens of the token bucket at KEY, whose state is
# three big-endian doubles, tokens first (lua/token_bucket.lua); "" if
# none.
tb_tokens() {
    rcli GET "$1" | python3 -c '
import struct, sys
raw = sys.stdin.buffer.read()[:16]
if len(raw) == 16:
    print("%.17g" % struct.unpack(">dd", raw)[0])'
}

stack() {
    sh "$ROOT/scripts/dev-stack.sh" "$@"
}

# stop_redis, start_redis: stop and start the stack's Redis.  REDIS_DOWN is
# 1 in between, so that restore_redis, in a cleanup, can start it again
# when a test file ends while it is stopped.
REDIS_DOWN=0

stop_redis() {
    stack stop-redis >/dev/null 2>&1
    REDIS_DOWN=1
}

start_redis() {
    stack start-redis >/dev/null 2>&1
    REDIS_DOWN=0
}

restore_redis() {
    if [ "$REDIS_DOWN" = 1 ]; then
        start_redis
    fi
}

# How many scripts Redis has run (EVALSHA and EVAL, calls ever made).
script_calls() {
    rcli INFO commandstats | tr -d '\r' | awk -F '[:,=]' '
        $1 ~ /^cmdstat_(evalsha|eval|evalsha_ro|eval_ro)$/ { n += $3 }
        END { print n + 0 }'
}

# The PostgreSQL server log of the stack (scripts/pg.sh keeps it in VAR).
pg_log_files() {
    pl_f=${PG_LOG:-$VAR/pg.log}
    if [ -f "$pl_f" ]; then
        echo "$pl_f"
    fi
}

# How many statements PostgreSQL has logged (needs log_statement=all).
pg_statements() {
    pg_log_files | while IFS= read -r ps_f; do
        cat "$ps_f"
    done | grep -cE 'statement: |execute ' || true
}

# doc_block FILE HEADING [N]: prints the Nth ```sh block under HEADING
# (default 1) of FILE (README.md, doc/api.md...; relative to the tree) and
# notes it in $DOC_BLOCKS_RUN (run.sh's, or beside $RESULTS), so that
# run.sh can show at the end of a whole run that every shell block of the
# documentation was run by a test (t/integration/doc_blocks.py).
DOC_BLOCKS_RUN=${DOC_BLOCKS_RUN:-${RESULTS:+${RESULTS%/*}/doc-blocks-run}}
doc_block() {
    [ -z "$DOC_BLOCKS_RUN" ] ||
        printf '%s|%s|%s\n' "$1" "$2" "${3:-1}" >>"$DOC_BLOCKS_RUN"
    python3 - "$ROOT/$1" "$2" "${3:-1}" <<'PY'
import sys
lines = open(sys.argv[1]).read().split("\n")
heading, want = sys.argv[2], int(sys.argv[3])
under, n, out, inside = False, 0, [], False
for line in lines:
    if line.startswith("#"):
        if inside:
            continue
        under = line.lstrip("#").strip() == heading
        continue
    if not under:
        continue
    if line.startswith("```sh") and not inside:
        n += 1
        inside = n == want
        continue
    if line.startswith("```") and inside:
        break
    if inside:
        out.append(line)
if not out:
    sys.exit("%s: no ```sh block %d under the heading %r" % (sys.argv[1], want, heading))
print("\n".join(out))
PY
}

# jq_py EXPR JSON: a value of JSON by a Python expression over d.
jq_py() {
    python3 -c '
import json, sys
d = json.loads(sys.argv[2])
try:
    v = eval(sys.argv[1], {"d": d})
except Exception as e:
    print("<error %s>" % e)
    sys.exit(0)
print(v if isinstance(v, str) else json.dumps(v))' "$1" "$2"
}

# A name no earlier run used.
uniq_name() {
    echo "$1-$$-$(od -An -N4 -tx4 /dev/urandom | tr -d ' \n')"
}

# new_tenant NAME
new_tenant() {
    ctl tenant add "$1" >/dev/null
}

# new_key TENANT [ROLE]: prints the new raw key.
new_key() {
    nk_out=$(ctl key create "$1" --role "${2:-check}" 2>"$T_TMP/ctl.err") ||
        {
            cat "$T_TMP/ctl.err" >&2
            return 1
        }
    # The output is "field  value" lines; the raw key is on "key".
    printf '%s\n' "$nk_out" | awk '$1 == "key" { print $2; exit }'
}

# key_id KEY: the database id of a raw key.
key_id() {
    # shellcheck disable=SC2016
    psql_q "SELECT id FROM api_keys WHERE key_hash =
        encode(sha256(convert_to(:'k', 'UTF8')), 'hex');" "k=$1"
}

revoke_key() {
    ctl key revoke "$(key_id "$1")" >/dev/null
}

# new_sw_rule TENANT ROUTE LIMIT WINDOW
new_sw_rule() {
    ctl rule add "$1" --route "$2" --algorithm sliding_window \
        --limit "$3" --window "$4" >/dev/null
}

# new_tb_rule TENANT ROUTE CAPACITY REFILL_RATE
new_tb_rule() {
    ctl rule add "$1" --route "$2" --algorithm token_bucket \
        --capacity "$3" --refill-rate "$4" >/dev/null
}

# The pids of the ratelimit-fcgi processes of this stack, sorted.
fcgi_pids() {
    ps -e -o pid= -o args= | awk -v conf="$VAR/ratelimit.conf" '
        $2 ~ /ratelimit-fcgi/ && index($0, conf) { print $1 }' | sort -n
}

lighttpd_pid() {
    head -n 1 "$VAR/lighttpd.pid" 2>/dev/null || true
}

# The master: the ratelimit-fcgi process whose parent is lighttpd.
fcgi_master_pid() {
    # The stack's process whose parent is not one of them and that has
    # workers: lighttpd's child, or after a takeover (master.c) the worker
    # that took its place, whose parent is init.
    ps -e -o pid= -o ppid= -o args= | awk -v conf="$VAR/ratelimit.conf" '
        $3 ~ /ratelimit-fcgi/ && index($0, conf) { parent[$1] = $2 }
        END {
            for (p in parent)
                if (parent[p] in parent)
                    kids[parent[p]]++
            for (p in parent)
                if (!(parent[p] in parent) && (p in kids) &&
                    (best == "" || p + 0 < best + 0))
                    best = p
            if (best == "")
                for (p in parent)
                    if (!(parent[p] in parent) &&
                        (best == "" || p + 0 < best + 0))
                        best = p
            if (best != "")
                print best
        }'
}

# The workers: children of the master.
fcgi_worker_pids() {
    ps -e -o pid= -o ppid= -o args= | awk -v mp="$(fcgi_master_pid)" '
        mp != "" && $2 == mp && $3 ~ /ratelimit-fcgi/ { print $1 }' | sort -n
}

count_lines() {
    if [ -z "$1" ]; then
        echo 0
    else
        printf '%s\n' "$1" | wc -l | tr -d ' '
    fi
}

# ---------------------------------------------------------------- servers

# Helpers for the test files that run servers of their own (lighttpd,
# nginx, Apache, ratelimit-fcgi on its own socket) next to the stack.

# end_pids PID... (SIGTERM to all, up to 5 s for each, then SIGKILL) and
# the other process helpers of the stack's scripts.
# shellcheck source-path=SCRIPTDIR source=../../scripts/proc.sh
. "$ROOT/scripts/proc.sh"

# The pids of the processes a test file started itself, for serve_dir.
PIDS=

# serve_dir PREFIX: sets D to a new world-readable directory (the servers
# may run as nobody) /tmp/PREFIX.XXXXXX, and arranges that when this file
# exits, however it ends, the processes in PIDS are stopped (end_pids) and
# D is removed.  An interrupt exits 130 through the same path.
serve_dir() {
    D=$(mktemp -d "/tmp/$1.XXXXXX")
    chmod 755 "$D"
    trap 'end_pids $PIDS; rm -rf "$D"' EXIT
    trap 'exit 130' INT TERM
}

# alive PID: the process exists and is not a zombie.
alive() {
    al_st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
    case $al_st in
    '' | Z*) return 1 ;;
    esac
    return 0
}

# stop_process PID SIGNAL: sends SIGNAL, waits up to 10 s for the process
# to end (SIGKILL then) and reaps it.  Nothing when PID is empty.
stop_process() {
    [ -n "$1" ] || return 0
    kill -"$2" "$1" 2>/dev/null || true
    sp_n=0
    while alive "$1"; do
        sp_n=$((sp_n + 1))
        if [ "$sp_n" -gt 100 ]; then
            kill -KILL "$1" 2>/dev/null || true
            break
        fi
        sleep 0.1
    done
    wait "$1" 2>/dev/null || true
}

# show_logs DIR: the tail of every log in DIR, after a server failed to
# start.
show_logs() {
    for sl_f in "$1"/*.log; do
        [ -f "$sl_f" ] || continue
        echo "---- tail of $sl_f"
        tail -n 15 "$sl_f"
    done
}

# app_conf_lines OUT LINE...: writes OUT, the stack's ratelimit.conf with
# the "key = value" LINEs in place of the lines that set those keys (the
# loader refuses a key set twice).  OUT is world-readable, for an
# application that runs as nobody.
app_conf_lines() {
    ac_out=$1
    shift
    ac_keys=" "
    for ac_line in "$@"; do
        ac_keys="$ac_keys$(printf '%s' "${ac_line%%=*}" | tr -d ' \t') "
    done
    awk -v keys="$ac_keys" '{
        k = $0
        sub(/^[ \t]*/, "", k)
        sub(/[ \t]*=.*$/, "", k)
        if (index(keys, " " k " ") == 0)
            print
    }' "$VAR/ratelimit.conf" >"$ac_out"
    printf '%s\n' "$@" >>"$ac_out"
    chmod 644 "$ac_out"
}

# app_conf OUT KEY=VALUE...: app_conf_lines with each value as a quoted
# string (KEY = "VALUE").
app_conf() {
    ac_file=$1
    shift
    for ac_kv in "$@"; do
        set -- "$@" "${ac_kv%%=*} = \"${ac_kv#*=}\""
        shift
    done
    app_conf_lines "$ac_file" "$@"
}

# app_start NAME CONF [VAR=VALUE...]: starts ratelimit-fcgi -c CONF in the
# background, with the VARs in its environment and its output in
# $D/NAME.log; sets APP_PID and adds it to PIDS.
app_start() {
    as_name=$1
    as_conf=$2
    shift 2
    env "$@" "$BUILD/ratelimit-fcgi" -c "$as_conf" >"$D/$as_name.log" 2>&1 &
    APP_PID=$!
    PIDS="$PIDS $APP_PID"
}

# lighttpd_start CONF LOG PORT: checks CONF with lighttpd -tt (its output,
# kept beside CONF as NAME.tt, is shown when CONF is refused), then runs
# lighttpd -D with it in the background, its output appended to LOG; sets
# LT_PID (empty when CONF was refused) and adds it to PIDS.  Waits (at most
# 5 s) until 127.0.0.1:PORT answers; returns 1 when it does not.
lighttpd_start() {
    LT_PID=
    if ! /usr/sbin/lighttpd -tt -f "$1" >"${1%.conf}.tt" 2>&1; then
        cat "${1%.conf}.tt"
        return 1
    fi
    /usr/sbin/lighttpd -D -f "$1" >>"$2" 2>&1 &
    LT_PID=$!
    PIDS="$PIDS $LT_PID"
    ls_n=0
    until [ "$(curl -s -o /dev/null -m 1 -w '%{http_code}' \
        "http://127.0.0.1:$3/" 2>/dev/null)" != 000 ]; do
        ls_n=$((ls_n + 1))
        [ "$ls_n" -gt 50 ] && return 1
        sleep 0.1
    done
}

# private_app NAME PORT KEY=VALUE...: an application of its own (the
# stack's configuration with KEY=VALUEs) on the Unix socket $D/NAME.sock,
# with a lighttpd in front on 127.0.0.1:PORT.  Sets APP_PID and LT_PID.
private_app() {
    pa_name=$1
    pa_port=$2
    shift 2
    app_conf "$D/$pa_name.conf" "listen=unix:$D/$pa_name.sock" "$@"
    app_start "$pa_name" "$D/$pa_name.conf"
    pa_n=0
    until [ -S "$D/$pa_name.sock" ] || [ "$pa_n" -gt 50 ]; do
        pa_n=$((pa_n + 1))
        sleep 0.1
    done
    printf '%s\n' "server.port = $pa_port" 'server.bind = "127.0.0.1"' \
        "server.document-root = \"$D\"" \
        "server.errorlog = \"$D/$pa_name-lt.log\"" \
        'server.modules += ( "mod_fastcgi" )' \
        "fastcgi.server = ( \"/\" => (( \"socket\" => \"$D/$pa_name.sock\", \"check-local\" => \"disable\" )) )" \
        >"$D/$pa_name-lt.conf"
    lighttpd_start "$D/$pa_name-lt.conf" "$D/$pa_name-lt.log" "$pa_port"
}

# stop_private: stops the last private_app (lighttpd, then the pool).
stop_private() {
    stop_process "$LT_PID" TERM
    stop_process "$APP_PID" TERM
}

# nginx_conf FILE [KEY=VALUE...] INCLUDE...: writes FILE, the nginx.conf
# of an nginx of a test's own (nginx -c FILE): its pid file and error log,
# the http block's temporary files (nginx's own, under /var/lib/nginx,
# are root's), Debian's MIME types, and an include of each INCLUDE (a
# file, or a glob) in http {}.  Unless FILE's directory has one already,
# Debian's fastcgi_params is copied there: the shipped files' "include
# fastcgi_params" is relative to it.  The KEY=VALUEs come first; DIR is
# FILE's directory:
#   user=U         "user U;", only when run as root (none)
#   workers=N      worker_processes (1)
#   connections=N  worker_connections (64)
#   pid=F          the pid file (DIR/nginx.pid)
#   error_log=F    the error log (DIR/nginx-error.log)
#   log_level=L    its level (none: nginx's own, error)
#   access_log=F   the access log, combined format (off)
#   tmp=T          the temporary files' directory (DIR/tmp; made here)
nginx_conf() {
    nc_file=$1
    shift
    nc_dir=$(dirname "$nc_file")
    nc_user=
    nc_workers=1
    nc_conns=64
    nc_pid=$nc_dir/nginx.pid
    nc_error=$nc_dir/nginx-error.log
    nc_level=
    nc_access=off
    nc_tmp=$nc_dir/tmp
    while [ $# -gt 0 ]; do
        case $1 in
        user=*) nc_user=${1#*=} ;;
        workers=*) nc_workers=${1#*=} ;;
        connections=*) nc_conns=${1#*=} ;;
        pid=*) nc_pid=${1#*=} ;;
        error_log=*) nc_error=${1#*=} ;;
        log_level=*) nc_level=${1#*=} ;;
        access_log=*) nc_access=${1#*=} ;;
        tmp=*) nc_tmp=${1#*=} ;;
        *) break ;;
        esac
        shift
    done
    mkdir -p "$nc_tmp"
    [ -e "$nc_dir/fastcgi_params" ] ||
        cp /etc/nginx/fastcgi_params "$nc_dir/fastcgi_params"
    {
        if [ -n "$nc_user" ] && [ "$(id -u)" = 0 ]; then
            echo "user $nc_user;"
        fi
        echo "worker_processes $nc_workers;"
        echo "pid $nc_pid;"
        echo "error_log $nc_error${nc_level:+ $nc_level};"
        echo "events { worker_connections $nc_conns; }"
        echo 'http {'
        echo "    access_log $nc_access;"
        for nc_t in client_body:body fastcgi:fastcgi proxy:proxy scgi:scgi \
            uwsgi:uwsgi; do
            echo "    ${nc_t%%:*}_temp_path $nc_tmp/${nc_t#*:};"
        done
        echo '    include /etc/nginx/mime.types;'
        echo '    default_type application/octet-stream;'
        for nc_inc in "$@"; do
            echo "    include $nc_inc;"
        done
        echo '}'
    } >"$nc_file"
}

# apache_conf FILE [KEY=VALUE...] INCLUDE...: writes FILE, the httpd.conf
# of an Apache of a test's own (apache2 -f FILE; prefork): ServerRoot,
# pid file and run directory in FILE's directory, the modules the shipped
# files need (mod_fcgid, mod_proxy_fcgi, mod_authnz_fcgi, mod_headers),
# mod_fcgid's IPC directory and process table there too, every directory
# denied but the document root, and an Include of each INCLUDE.  The
# KEY=VALUEs come first; DIR is FILE's directory:
#   listen="PORT..."  Listen 127.0.0.1:PORT for each (none)
#   user="U G"     User U and Group G, only when run as root (none)
#   error_log=F    the error log (DIR/error.log), at LogLevel warn
#   access_log=F   an access log "%h %u "%r" %>s" (none)
#   servers="S MIN MAX W"  StartServers, Min/MaxSpareServers,
#                  MaxRequestWorkers ("1 1 2 8")
#   htdocs=H       the document root (DIR/htdocs)
#   cgi=yes        *.cgi under it run as CGI (mod_cgi, mod_dir)
apache_conf() {
    apc_file=$1
    shift
    apc_dir=$(dirname "$apc_file")
    apc_listen=
    apc_user=
    apc_error=$apc_dir/error.log
    apc_access=
    apc_servers="1 1 2 8"
    apc_htdocs=$apc_dir/htdocs
    apc_cgi=
    while [ $# -gt 0 ]; do
        case $1 in
        listen=*) apc_listen=${1#*=} ;;
        user=*) apc_user=${1#*=} ;;
        error_log=*) apc_error=${1#*=} ;;
        access_log=*) apc_access=${1#*=} ;;
        servers=*) apc_servers=${1#*=} ;;
        htdocs=*) apc_htdocs=${1#*=} ;;
        cgi=*) apc_cgi=${1#*=} ;;
        *) break ;;
        esac
        shift
    done
    apc_m=${APACHE_MODULES:-/usr/lib/apache2/modules}
    apc_incs=$(for apc_inc in "$@"; do echo "Include \"$apc_inc\""; done)
    # shellcheck disable=SC2086 # four numbers
    set -- $apc_servers
    {
        echo "ServerRoot \"$apc_dir\""
        echo 'ServerName 127.0.0.1'
        for apc_port in $apc_listen; do
            echo "Listen 127.0.0.1:$apc_port"
        done
        echo "PidFile \"$apc_dir/run/httpd.pid\""
        echo "DefaultRuntimeDir \"$apc_dir/run\""
        echo "ErrorLog \"$apc_error\""
        echo 'LogLevel warn'
        if [ -n "$apc_user" ] && [ "$(id -u)" = 0 ]; then
            echo "User ${apc_user% *}"
            echo "Group ${apc_user#* }"
        fi
        apc_mods="mpm_prefork authn_core authz_core authz_host authz_user mime"
        [ "$apc_cgi" = yes ] && apc_mods="$apc_mods dir cgi"
        for apc_mod in $apc_mods headers fcgid proxy proxy_fcgi authnz_fcgi; do
            echo "LoadModule ${apc_mod}_module $apc_m/mod_$apc_mod.so"
        done
        echo 'TypesConfig /etc/mime.types'
        echo "StartServers $1"
        echo "MinSpareServers $2"
        echo "MaxSpareServers $3"
        echo "MaxRequestWorkers $4"
        echo "FcgidIPCDir \"$apc_dir/fcgid\""
        echo "FcgidProcessTableFile \"$apc_dir/fcgid-shm\""
        if [ -n "$apc_access" ]; then
            echo 'LogFormat "%h %u \"%r\" %>s" common'
            echo "CustomLog \"$apc_access\" common"
        fi
        echo '<Directory />'
        echo '    AllowOverride None'
        echo '    Require all denied'
        echo '</Directory>'
        echo "<Directory \"$apc_htdocs\">"
        if [ "$apc_cgi" = yes ]; then
            echo '    Options +ExecCGI'
            echo '    AddHandler cgi-script .cgi'
        fi
        echo '    Require all granted'
        echo '</Directory>'
        echo "$apc_incs"
    } >"$apc_file"
}

# avoid_edge PERIOD SECONDS: waits until at least SECONDS remain in the
# current UTC period of PERIOD seconds (60: minute, 86400: day), so that
# a calendar window or a sliding window's counter cannot roll over during
# the next steps.
avoid_edge() {
    ae_left=$(($1 - $(date +%s) % $1))
    if [ "$ae_left" -le "$2" ]; then
        echo "    (waiting ${ae_left}s for the next UTC period)"
        sleep "$ae_left"
        sleep 0.2
    fi
}

# Milliseconds since the epoch.
now_ms() {
    date +%s%3N
}

# pcheck PORT KEY ROUTE SUBJECT: one check through a private front end;
# prints "status remaining" (remaining "-" when there is none).
pcheck() {
    curl -s -m 5 -o "$T_TMP/pbody" -D "$T_TMP/phead" -w '%{http_code}' \
        -X POST "http://127.0.0.1:$1/v1/check" -H "X-API-Key: $2" \
        -H 'Content-Type: application/json' \
        -d "{\"route\":\"$3\",\"subject\":\"$4\"}" >"$T_TMP/pstatus" 2>/dev/null
    pc_rem=$(grep -o '"remaining":[0-9]*' "$T_TMP/pbody" 2>/dev/null |
        head -n 1 | cut -d: -f2)
    printf '%s %s\n' "$(cat "$T_TMP/pstatus")" "${pc_rem:--}"
}

# ready_on PORT [STATUS]: /health/ready of a private front end answers
# STATUS (200); its body is kept in $T_TMP/ready.
ready_on() {
    [ "$(curl -s -m 5 -o "$T_TMP/ready" -w '%{http_code}' \
        "http://127.0.0.1:$1/health/ready")" = "${2:-200}" ]
}


# stack_touch: 4 x WORKERS requests for /health/ready to the stack's
# lighttpd, WORKERS at a time.  A worker of the stack that still holds a
# Redis connection from before a Redis restart fails its next use of it
# once (503); this spends those failures here, while Redis is down or just
# back, instead of in a later test file.
stack_touch() {
    st_cfg=$T_TMP/touch.conf
    : >"$st_cfg"
    st_i=0
    while [ "$st_i" -lt $((WORKERS * 4)) ]; do
        printf 'url = "%s/health/ready"\noutput = "/dev/null"\n' \
            "$BASE_URL" >>"$st_cfg"
        st_i=$((st_i + 1))
    done
    curl -s -m 10 --parallel --parallel-max "$WORKERS" -K "$st_cfg" \
        >/dev/null 2>&1 || true
}

# filled FILE: no @PLACEHOLDER@ is left in FILE.
filled() {
    ! grep -q '@[A-Z_]*@' "$1"
}
