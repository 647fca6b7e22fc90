#!/bin/sh
# Tests for the Redis check script (lua/*.lua): the cases are in
# t/lua_test.py, which starts its own redis-server on
# 127.0.0.1:${LUA_TEST_REDIS_PORT:-16399}. This wrapper keeps the command
# the Makefile runs, and first builds the two scripts the tests load,
# $BUILD/check_test.lua (the tests' clock) and $BUILD/check.lua (the one
# embedded), with BUILD defaulting to build as in the Makefile; it passes
# them on as LUA_SCRIPT and LUA_PRODUCTION_SCRIPT unless those are set.
# Debian's python3 first: a version manager's shim earlier in PATH is slow
# to start.
# Usage, from anywhere: sh t/lua_test.sh
PATH=/usr/bin:/bin:$PATH
export PATH
root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
if [ -z "${LUA_SCRIPT:-}" ] || [ -z "${LUA_PRODUCTION_SCRIPT:-}" ]; then
    if ! make -s -C "$root" BUILD="$BUILD" "$BUILD/check.lua" \
            "$BUILD/check_test.lua"; then
        echo "Bail out! cannot build $BUILD/check.lua and" \
            "$BUILD/check_test.lua (make in $root)"
        exit 1
    fi
    case $BUILD in
    /*) dir=$BUILD ;;
    *) dir=$root/$BUILD ;;
    esac
    LUA_SCRIPT=${LUA_SCRIPT:-$dir/check_test.lua}
    LUA_PRODUCTION_SCRIPT=${LUA_PRODUCTION_SCRIPT:-$dir/check.lua}
fi
export LUA_SCRIPT LUA_PRODUCTION_SCRIPT
exec python3 "$root/t/lua_test.py" "$@"
