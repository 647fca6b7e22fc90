#!/bin/sh
# Builds the libFuzzer harnesses of t/fuzz/ (fuzz_<target>.c) against the
# pure modules of src/ and runs each for FUZZ_SECONDS seconds, starting
# from its seed corpus t/fuzz/corpus/<target>/.  Everything is compiled by
# clang with -fsanitize=fuzzer,address,undefined, and undefined behaviour
# aborts, so any sanitizer finding, broken promise (fuzz_assert), leak,
# timeout or crash fails the run; libFuzzer keeps the input that caused it
# as FUZZ_BUILD/<target>-crash-* (or -leak-, -timeout-), to be replayed with
#     FUZZ_BUILD/fuzz_<target> FILE
# Prints one line per target and exits non-zero when any target failed.
#
# Usage, from the repository root (`make fuzz` does this):
#     CORE="config log util ..." PKGS="json-c ..." sh t/fuzz/run.sh [TARGET...]
# Environment:
#   CORE          the pure modules to link (the Makefile's CORE; read from
#                 the Makefile when unset)
#   PKGS          the pkg-config packages they need (likewise)
#   FUZZ_SECONDS  seconds per target (15)
#   FUZZ_BUILD    where objects, harnesses and new corpus entries go
#                 (build-fuzz)
#   FUZZ_CC       the compiler (clang)
#   FUZZ_ARGS     more libFuzzer arguments, e.g. "-runs=1000"
#   FUZZ_JOBS     targets fuzzed at once (the number of CPUs): each target
#                 is one process on one CPU, so two CPUs fuzz two targets
#                 in the time of one
set -u

cd "$(dirname "$0")/../.." || exit 1

FUZZ_SECONDS=${FUZZ_SECONDS:-15}
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
FUZZ_CC=${FUZZ_CC:-clang}
FUZZ_ARGS=${FUZZ_ARGS:-}
FUZZ_JOBS=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}

# makefile_var NAME: the value of "NAME = ..." in the Makefile.
makefile_var() {
    sed -n "s/^$1[ 	]*=[ 	]*//p" Makefile | head -n 1
}
CORE=${CORE:-$(makefile_var CORE)}
PKGS=${PKGS:-$(makefile_var PKGS)}

if ! command -v "$FUZZ_CC" >/dev/null 2>&1; then
    echo "fuzz: $FUZZ_CC is missing (Debian: apt-get install clang)" >&2
    exit 1
fi
case $FUZZ_SECONDS in
'' | *[!0-9]*)
    echo "fuzz: FUZZ_SECONDS must be a whole number of seconds" >&2
    exit 1
    ;;
esac
case $FUZZ_JOBS in
'' | 0 | *[!0-9]*)
    echo "fuzz: FUZZ_JOBS must be a number of processes (1 or more)" >&2
    exit 1
    ;;
esac

SAN="-fsanitize=address,undefined -fno-sanitize-recover=all"
# shellcheck disable=SC2086 # word splitting of the package list is meant
CFLAGS="-std=gnu11 -g -O1 -fno-omit-frame-pointer -Wall -Wextra -Isrc
$(pkg-config --cflags $PKGS 2>/dev/null)"
# shellcheck disable=SC2086
LIBS="$(pkg-config --libs $PKGS 2>/dev/null) -lm"

mkdir -p "$FUZZ_BUILD/obj" || exit 1

# Objects of the pure modules, instrumented for coverage, rebuilt when
# their source or a header is newer.
objs=
for m in $CORE; do
    src=src/$m.c
    obj=$FUZZ_BUILD/obj/$m.o
    if [ ! -f "$src" ]; then
        echo "fuzz: $src (in CORE) is missing" >&2
        exit 1
    fi
    if [ ! -f "$obj" ] ||
        [ -n "$(find "$src" src/*.h -newer "$obj" 2>/dev/null)" ]; then
        # shellcheck disable=SC2086
        "$FUZZ_CC" $CFLAGS $SAN -fsanitize=fuzzer-no-link -c -o "$obj" \
            "$src" || exit 1
    fi
    objs="$objs $obj"
done

if [ $# -gt 0 ]; then
    targets=$*
else
    targets=$(for f in t/fuzz/fuzz_*.c; do
        basename "$f" .c | sed 's/^fuzz_//'
    done)
fi

# fuzz_one T: runs the built harness of target T for FUZZ_SECONDS and
# writes its line of the report to FUZZ_BUILD/T.result.
fuzz_one() {
    fo_t=$1
    # New inputs go to the first (writable) directory, not to the seeds.
    fo_work=$FUZZ_BUILD/corpus/$fo_t
    fo_seeds=t/fuzz/corpus/$fo_t
    mkdir -p "$fo_work" "$fo_seeds"
    fo_log=$FUZZ_BUILD/fuzz_$fo_t.log
    rm -f "$FUZZ_BUILD/$fo_t"-crash-* "$FUZZ_BUILD/$fo_t"-leak-* \
        "$FUZZ_BUILD/$fo_t"-timeout-* "$FUZZ_BUILD/$fo_t"-oom-*
    fo_dict=
    if [ -f "t/fuzz/$fo_t.dict" ]; then
        fo_dict=-dict=t/fuzz/$fo_t.dict
    fi
    # shellcheck disable=SC2086
    "$FUZZ_BUILD/fuzz_$fo_t" -max_total_time="$FUZZ_SECONDS" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$FUZZ_BUILD/$fo_t-" $fo_dict $FUZZ_ARGS \
        "$fo_work" "$fo_seeds" >"$fo_log" 2>&1
    fo_rc=$?
    fo_runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$fo_log" |
        tail -n 1)
    fo_cov=$(grep -o 'cov: [0-9]*' "$fo_log" | tail -n 1)
    if [ "$fo_rc" -eq 0 ]; then
        echo "ok - fuzz $fo_t: ${fo_runs:-?} inputs in ${FUZZ_SECONDS}s, ${fo_cov:-cov: ?}"
    else
        echo "not ok - fuzz $fo_t: exit $fo_rc after ${fo_runs:-?} inputs; see $fo_log"
        grep -E 'ERROR|SUMMARY|broken promise|runtime error|Test unit written' \
            "$fo_log" | head -n 12 | sed 's/^/    /'
    fi >"$FUZZ_BUILD/$fo_t.result"
}

# Every harness is built first; then FUZZ_JOBS of them run at a time, and
# the report lists the targets in their order.
built=
for t in $targets; do
    src=t/fuzz/fuzz_$t.c
    rm -f "$FUZZ_BUILD/$t.result"
    if [ ! -f "$src" ]; then
        echo "fuzz: no harness $src" >"$FUZZ_BUILD/$t.result"
        continue
    fi
    # shellcheck disable=SC2086
    if ! "$FUZZ_CC" $CFLAGS $SAN -fsanitize=fuzzer -It/fuzz \
        -o "$FUZZ_BUILD/fuzz_$t" "$src" $objs $LIBS; then
        echo "not ok - fuzz $t: does not build" >"$FUZZ_BUILD/$t.result"
        continue
    fi
    built="$built $t"
done
n=0
for t in $built; do
    fuzz_one "$t" &
    n=$((n + 1))
    [ $((n % FUZZ_JOBS)) -ne 0 ] || wait
done
wait

failed=0
for t in $targets; do
    if [ -f "$FUZZ_BUILD/$t.result" ]; then
        cat "$FUZZ_BUILD/$t.result"
        grep -q '^ok - ' "$FUZZ_BUILD/$t.result" || failed=$((failed + 1))
    else
        echo "not ok - fuzz $t: no result"
        failed=$((failed + 1))
    fi
done

echo "fuzz: $failed target(s) failed"
[ "$failed" -eq 0 ]
