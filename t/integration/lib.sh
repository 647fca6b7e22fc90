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
#   check_req KEY BODY  req POST /v1/check with the key in X-API-Key
#   finish              prints "N passed, M failed" for this file and exits
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

# matches TEXT ERE
matches() {
    printf '%s\n' "$1" | grep -Eq -- "$2"
}

# ---------------------------------------------------------------- HTTP

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
    rm -f "$T_TMP/headers" "$T_TMP/body"
    rq_out=$(curl -s -m 10 -X "$R_METHOD" -D "$T_TMP/headers" \
        -o "$T_TMP/body" -w '%{http_code} %{time_total}' "$@" \
        "$BASE_URL$R_PATH") || true
    STATUS=${rq_out%% *}
    # shellcheck disable=SC2034 # used by the test files
    TIME=${rq_out#* }
    [ -n "$STATUS" ] || STATUS=000
    BODY=
    if [ -f "$T_TMP/body" ]; then
        BODY=$(cat "$T_TMP/body")
    fi
    touch "$T_TMP/headers"
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

stack() {
    sh "$ROOT/scripts/dev-stack.sh" "$@"
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
    ps -e -o pid= -o ppid= -o args= | awk -v lp="$(lighttpd_pid)" '
        $2 == lp && $3 ~ /ratelimit-fcgi/ { print $1; exit }'
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
