#!/bin/sh
# Tests for the Redis check script (lua/*.lua): the cases are in
# t/lua_test.py, which starts its own redis-server on
# 127.0.0.1:${LUA_TEST_REDIS_PORT:-16399}. This wrapper keeps the command
# the Makefile runs. Debian's python3 first: a version manager's shim
# earlier in PATH is slow to start.
# Usage, from anywhere: sh t/lua_test.sh
PATH=/usr/bin:/bin:$PATH
export PATH
exec python3 "$(dirname "$0")/lua_test.py" "$@"
