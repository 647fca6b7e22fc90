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
#   FUZZ_ARGS     more libFuzzer arguments, e.g. "-jobs=2" or "-runs=1000"
set -u

cd "$(dirname "$0")/../.." || exit 1

FUZZ_SECONDS=${FUZZ_SECONDS:-15}
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
FUZZ_CC=${FUZZ_CC:-clang}
FUZZ_ARGS=${FUZZ_ARGS:-}

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

failed=0
for t in $targets; do
    src=t/fuzz/fuzz_$t.c
    bin=$FUZZ_BUILD/fuzz_$t
    if [ ! -f "$src" ]; then
        echo "fuzz: no harness $src" >&2
        failed=$((failed + 1))
        continue
    fi
    # shellcheck disable=SC2086
    if ! "$FUZZ_CC" $CFLAGS $SAN -fsanitize=fuzzer -It/fuzz -o "$bin" \
        "$src" $objs $LIBS; then
        echo "not ok - fuzz $t: does not build"
        failed=$((failed + 1))
        continue
    fi
    # New inputs go to the first (writable) directory, not to the seeds.
    work=$FUZZ_BUILD/corpus/$t
    seeds=t/fuzz/corpus/$t
    mkdir -p "$work" "$seeds"
    log=$FUZZ_BUILD/fuzz_$t.log
    rm -f "$FUZZ_BUILD/$t"-crash-* "$FUZZ_BUILD/$t"-leak-* \
        "$FUZZ_BUILD/$t"-timeout-* "$FUZZ_BUILD/$t"-oom-*
    dict=
    if [ -f "t/fuzz/$t.dict" ]; then
        dict=-dict=t/fuzz/$t.dict
    fi
    # shellcheck disable=SC2086
    "$bin" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$FUZZ_BUILD/$t-" $dict \
        $FUZZ_ARGS "$work" "$seeds" >"$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" |
        tail -n 1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)
    if [ "$rc" -eq 0 ]; then
        echo "ok - fuzz $t: ${runs:-?} inputs in ${FUZZ_SECONDS}s, ${cov:-cov: ?}"
    else
        echo "not ok - fuzz $t: exit $rc after ${runs:-?} inputs; see $log"
        grep -E 'ERROR|SUMMARY|broken promise|runtime error|Test unit written' \
            "$log" | head -n 12 | sed 's/^/    /'
        failed=$((failed + 1))
    fi
done

echo "fuzz: $failed target(s) failed"
[ "$failed" -eq 0 ]
