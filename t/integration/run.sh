#!/bin/sh
# Runs the integration tests: starts a private stack (PostgreSQL, Redis,
# lighttpd -> ratelimit-fcgi) in a fresh temporary directory on ports that
# cannot collide with `make run`, runs every t/integration/test_*.sh in
# order, stops and removes the stack, and prints the total as the last line:
# "N passed, M failed".  Exits non-zero when anything failed.
#
# Environment: PORT (18080), REDIS_PORT (16380), PG_PORT (15433), BUILD
# (build), WORKERS (4); KEEP_VAR=1 keeps the directory for a post-mortem.
# Test files that source lib.sh report each check through $RESULTS; for
# any other test file the last "N passed, M failed" line it prints counts,
# or else its exit status as one test.
set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1

PORT=${PORT:-18080}
REDIS_PORT=${REDIS_PORT:-16380}
PG_PORT=${PG_PORT:-15433}
BUILD=${BUILD:-build}
WORKERS=${WORKERS:-4}
case $BUILD in
/*) ;;
*) BUILD=$ROOT/$BUILD ;;
esac
RATELIMITCTL=$BUILD/ratelimitctl

# SHARDS=2 (make integration's default) and no TESTS: first, alone, the
# files of SERIAL_TESTS: test_deb.sh (it installs the package system-wide,
# which other files must not see) and the two whose checks hold the
# machine to a pace (test_limits: windows of 200 ms; test_scale: a cold
# pool's first 20,000 keys within the filter's build), which a second
# shard's load made fail; then the other files in two runs of this script
# at once, each with its own stack on its own ports (the second's 500
# above), the files dealt out by how long they took last
# ($BUILD/test-seconds, which every sharded run writes, else
# t/integration/seconds; a file in neither counts 30 s).  Their outputs
# follow one another; the totals are added up.  Most files spend their
# time waiting (timeouts, faults, paced load), so two at once take about
# half as long.
SERIAL_TESTS=${SERIAL_TESTS:-deb limits scale}

# doc_blocks_check RAN: after a whole run, every ```sh block of README.md
# and doc/ was run by a test (RAN: what lib.sh's doc_block noted); one
# result line, then "1 passed, 0 failed" or "0 passed, 1 failed".
doc_blocks_check() {
    dbc_unrun=$(python3 t/integration/doc_blocks.py "$1" README.md doc/*.md)
    if [ -z "$dbc_unrun" ]; then
        echo "ok - run.sh: every shell block of README.md and doc/ is run by a test"
        echo "1 passed, 0 failed"
    else
        echo "not ok - run.sh: every shell block of README.md and doc/ is run by a test (not run: $(printf '%s\n' "$dbc_unrun" | tr '\n' ' '))"
        echo "0 passed, 1 failed"
    fi
}
if [ "${SHARDS:-1}" -gt 1 ] && [ -z "${TESTS:-}" ]; then
    SH_TMP=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-shards.XXXXXX")
    DOC_BLOCKS_RUN=$SH_TMP/doc-blocks-run
    : >"$DOC_BLOCKS_RUN"
    export DOC_BLOCKS_RUN
    weights=t/integration/seconds
    [ -s "$BUILD/test-seconds" ] && weights=$BUILD/test-seconds
    lists=$(for t in t/integration/test_*.sh; do
            n=$(basename "$t" .sh | sed 's/^test_//')
            case " $SERIAL_TESTS " in *" $n "*) continue ;; esac
            w=$(awk -v f="$(basename "$t")" '$2 == f { print $1 }' \
                "$weights" 2>/dev/null)
            echo "${w:-30} $n"
        done | sort -rn | awk '{
            # the longest first, each to the shard with less so far
            if (a <= b) { a += $1; la = la " " $2 } else { b += $1; lb = lb " " $2 }
        } END { print la; print lb }')
    list1=$(printf '%s\n' "$lists" | sed -n 1p)
    list2=$(printf '%s\n' "$lists" | sed -n 2p)
    # (an empty list would mean every file: " none" matches none)
    list1=${list1:- none}
    list2=${list2:- none}
    rc=0
    SHARDS=1 TESTS=$SERIAL_TESTS SHARD_TIMES=$SH_TMP/times.0 sh "$ROOT/t/integration/run.sh" \
        >"$SH_TMP/deb.out" 2>&1 || rc=1
    cat "$SH_TMP/deb.out"
    SHARDS=1 TESTS=$list1 SHARD_TIMES=$SH_TMP/times.1 sh "$ROOT/t/integration/run.sh" \
        >"$SH_TMP/1.out" 2>&1 &
    pid1=$!
    SHARDS=1 TESTS=$list2 SHARD_TIMES=$SH_TMP/times.2 PORT=$((PORT + 500)) \
        REDIS_PORT=$((REDIS_PORT + 500)) PG_PORT=$((PG_PORT + 500)) \
        sh "$ROOT/t/integration/run.sh" >"$SH_TMP/2.out" 2>&1 &
    pid2=$!
    wait "$pid1" || rc=1
    wait "$pid2" || rc=1
    echo "run.sh: shard 1:$list1"
    cat "$SH_TMP/1.out"
    echo "run.sh: shard 2:$list2"
    cat "$SH_TMP/2.out"
    doc_blocks_check "$DOC_BLOCKS_RUN" >"$SH_TMP/blocks.out"
    cat "$SH_TMP/blocks.out"
    pass=0 failed=0
    for f in "$SH_TMP/deb.out" "$SH_TMP/1.out" "$SH_TMP/2.out" \
        "$SH_TMP/blocks.out"; do
        last=$(tail -n 1 "$f")
        case $last in
        *" passed, "*" failed")
            pass=$((pass + ${last%% passed*}))
            last=${last#* passed, }
            failed=$((failed + ${last%% failed}))
            ;;
        *) failed=$((failed + 1)) ;;
        esac
    done
    cat "$SH_TMP"/times.* 2>/dev/null | sort -k2 >"$BUILD/test-seconds"
    rm -rf "$SH_TMP"
    echo "$pass passed, $failed failed"
    [ "$rc" = 0 ] && [ "$failed" = 0 ]
    exit
fi

VAR=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-it.XXXXXX")
# Scratch files of this script live beside VAR, not in it, so that no test
# mistakes them for a log of the stack.
RUN_TMP=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-run.XXXXXX")
RESULTS=$RUN_TMP/results
: >"$RESULTS"
# The doc blocks the tests run (lib.sh's doc_block), checked at the end of
# a whole run; a shard notes them in its parent's file.
if [ -z "${DOC_BLOCKS_RUN:-}" ]; then
    DOC_BLOCKS_RUN=$RUN_TMP/doc-blocks-run
    : >"$DOC_BLOCKS_RUN"
fi
export DOC_BLOCKS_RUN
# Fault scenarios add one row each (see fault_row in lib.sh); the table is
# printed at the end.
FAULT_TABLE=${FAULT_TABLE:-$RUN_TMP/faults}
: >"$FAULT_TABLE"

# Short caches, so that a revoked key or a suspended tenant is refused
# within seconds; every statement in the PostgreSQL log, so that a test can
# count them.
EXTRA_CONF="key_cache_ttl = 2
key_cache_negative_ttl = 1
rule_cache_ttl = 2
fcgi_read_timeout_ms = 2000
fcgi_keepalive_timeout_ms = 2000
pg_query_timeout_ms = 500"
PG_EXTRA_OPTS="-c log_statement=all"
STACK_UP=0
export ROOT PORT REDIS_PORT PG_PORT BUILD WORKERS RATELIMITCTL VAR RESULTS \
    EXTRA_CONF PG_EXTRA_OPTS STACK_UP FAULT_TABLE

CLEANED=0
cleanup() {
    [ "$CLEANED" = 1 ] && return
    CLEANED=1
    sh scripts/dev-stack.sh stop >/dev/null 2>&1 || true
    if [ "${KEEP_VAR:-0}" = 1 ]; then
        echo "run.sh: kept $VAR"
    else
        sh scripts/pg.sh destroy "$VAR" >/dev/null 2>&1 || true
        rm -rf "$VAR"
    fi
    rm -rf "$RUN_TMP"
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

echo "run.sh: starting the stack in $VAR (http://127.0.0.1:$PORT)"
if sh scripts/dev-stack.sh start >"$RUN_TMP/start.out" 2>&1; then
    STACK_UP=1
else
    cat "$RUN_TMP/start.out"
    echo "run.sh: the stack did not start; the tests that need it fail"
fi

# Counts the results of one test file: from $RESULTS lines added since
# line $2, else from the last "N passed, M failed" line of its output $3,
# else from its exit status $1.  Sets T_PASS and T_FAIL.
tally() {
    T_PASS=$(tail -n +"$(($2 + 1))" "$RESULTS" | grep -c '^pass ')
    T_FAIL=$(tail -n +"$(($2 + 1))" "$RESULTS" | grep -c '^fail ')
    if [ $((T_PASS + T_FAIL)) -eq 0 ]; then
        ty_line=$(grep -E '(^|: )[0-9]+ passed, [0-9]+ failed' "$3" | tail -n 1)
        if [ -n "$ty_line" ]; then
            T_PASS=$(printf '%s\n' "$ty_line" |
                sed -E 's/.*(^|[^0-9])([0-9]+) passed.*/\2/')
            T_FAIL=$(printf '%s\n' "$ty_line" |
                sed -E 's/.* ([0-9]+) failed.*/\1/')
        elif [ "$1" -eq 0 ]; then
            T_PASS=1
        fi
    fi
    # A file that died without saying why still counts as a failure.
    if [ "$1" -ne 0 ] && [ "$T_FAIL" -eq 0 ]; then
        echo "not ok - $4 exited with status $1"
        T_FAIL=1
    fi
}

total_pass=0
total_fail=0
# TESTS="api faults" runs only those files (default: every test_*.sh).
for t in t/integration/test_*.sh; do
    case " ${TESTS:-} " in
    "  ") ;;
    *" $(basename "$t" .sh | sed 's/^test_//') "*) ;;
    *) continue ;;
    esac
    [ -f "$t" ] || continue
    name=$(basename "$t")
    echo "run.sh: $name"
    shell="sh"
    case $(head -n 1 "$t") in
    *bash*) shell="bash" ;;
    esac
    mark=$(wc -l <"$RESULTS" | tr -d ' ')
    started=$(date +%s)
    # Every test file has bounded waits of its own; the timeout is a last
    # resort against a hang.
    {
        timeout -k 10 900 "$shell" "$t" </dev/null 2>&1
        echo $? >"$RUN_TMP/rc"
    } | tee "$RUN_TMP/out"
    tally "$(cat "$RUN_TMP/rc")" "$mark" "$RUN_TMP/out" "$name"
    total_pass=$((total_pass + T_PASS))
    total_fail=$((total_fail + T_FAIL))
    echo "$(($(date +%s) - started)) $name" >>"$RUN_TMP/times"
done

# A whole run in one shard checks the doc blocks itself (a sharded one
# does it above, once both shards are done).
if [ -z "${TESTS:-}" ]; then
    doc_blocks_check "$DOC_BLOCKS_RUN" >"$RUN_TMP/blocks.out"
    head -n 1 "$RUN_TMP/blocks.out"
    tally 0 "$(wc -l <"$RESULTS" | tr -d ' ')" "$RUN_TMP/blocks.out" \
        doc_blocks
    total_pass=$((total_pass + T_PASS))
    total_fail=$((total_fail + T_FAIL))
fi
if [ "$total_fail" -gt 0 ] && [ -f "$VAR/ratelimit-fcgi.log" ]; then
    echo "run.sh: tail of $VAR/ratelimit-fcgi.log"
    tail -n 30 "$VAR/ratelimit-fcgi.log"
fi
if [ -s "$FAULT_TABLE" ]; then
    echo
    echo "fault scenarios:"
    awk -F '\t' 'BEGIN {
            printf "%-58s %9s %11s %10s\n", "scenario", "requests",
                "unexpected", "recovery"
        }
        { printf "%-58s %9s %11s %10s\n", $1, $2, $3, $4 }' "$FAULT_TABLE"
    echo
fi
[ -n "${SHARD_TIMES:-}" ] && cat "$RUN_TMP/times" >>"$SHARD_TIMES" 2>/dev/null
if [ -s "$RUN_TMP/times" ]; then
    echo "run.sh: seconds per file, slowest first:" \
        "$(sort -rn "$RUN_TMP/times" | awk '{ printf "%s %s, ", $2, $1 }' |
            sed 's/, $//')"
fi
cleanup
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
