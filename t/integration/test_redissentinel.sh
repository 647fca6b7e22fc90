#!/bin/sh
# Redis Sentinel for real (scripts/redis-ha.sh: a master on 127.0.0.1:12200,
# a replica on 12201, three sentinels on 12202-12204 watching "rlmaster",
# down-after-milliseconds 1 s) behind private pools with redis_type =
# sentinel:
#   1. checks answer 200 through the master the sentinels name; the
#      counters are on that master
#   2. a failover asked of the sentinels (SENTINEL FAILOVER) while checks
#      run: the pool follows the new master by itself; then the master
#      killed (SIGKILL): fast 503s with Retry-After, then 200 once the
#      replica is promoted; both windows go in the fault table
#   3. readiness: 503 "no master for NAME" for a name the sentinels do not
#      watch
#   4. redis_db = 3 puts the counters in database 3
#   5. an ACL user (redis_username, redis_password) works; a wrong password
#      gives 503
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

serve_dir ratelimit-sentinel
BASE=${SENTINEL_TEST_PORT:-12200}
S=$D/sentinel
HA="sh $ROOT/scripts/redis-ha.sh"
P1=$((PORT + 95))
P2=$((PORT + 96))
SENTINELS="redis=127.0.0.1:$((BASE + 2)),127.0.0.1:$((BASE + 3)),127.0.0.1:$((BASE + 4))"
trap '$HA sentinel stop "$S" >/dev/null 2>&1; end_pids $PIDS; rm -rf "$D"' EXIT

master_port() {
    $HA sentinel master "$S" | cut -d: -f2
}

# failover_window NAME ACTION...: checks every 20 ms (at most 20 s) while
# ACTION runs half a second in; records the 503 window in the fault table
# and checks that it ended by itself, that no answer took a second and
# that every 503 had Retry-After.
failover_window() {
    fw_name=$1
    shift
    (
        end=$(($(now_ms) + 20000))
        seen503=0
        n200=0
        while [ "$(now_ms)" -lt "$end" ]; do
            t0=$(now_ms)
            st=$(pcheck "$P1" "$KEY" /s/x fo)
            t1=$(now_ms)
            ra=$(tr -d '\r' <"$T_TMP/phead" |
                awk -F': ' 'tolower($1) == "retry-after" { print $2 }')
            echo "$t0 $((t1 - t0)) ${st%% *} ${ra:--}"
            case $st in
            503*) seen503=1 ;;
            200*) [ "$seen503" = 1 ] && n200=$((n200 + 1)) ;;
            esac
            # Some 200s after the 503s: the new master holds.
            [ "$n200" -ge 10 ] && break
            sleep 0.02
        done
    ) >"$T_TMP/fo.out" &
    fw_loop=$!
    sleep 0.5
    "$@" >/dev/null
    wait "$fw_loop"
    fw_first=$(awk '$3 == 503 { print $1; exit }' "$T_TMP/fo.out")
    fw_back=$(awk '$3 == 503 { s = 1 } s && $3 == 200 { print $1; exit }' \
        "$T_TMP/fo.out")
    fw_n=$(wc -l <"$T_TMP/fo.out")
    fw_odd=$(awk '$3 != 200 && $3 != 503' "$T_TMP/fo.out" | wc -l)
    fw_slow=$(awk '$2 > 1000' "$T_TMP/fo.out" | wc -l)
    fw_nora=$(awk '$3 == 503 && $4 == "-"' "$T_TMP/fo.out" | wc -l)
    fw_late=$(awk -v b="${fw_back:-0}" '$1 > b && $3 != 200' \
        "$T_TMP/fo.out" | wc -l)
    if [ -n "$fw_first" ]; then
        fw_window=$((${fw_back:-$fw_first} - fw_first))
    else
        fw_window=0
    fi
    echo "    $fw_name: $fw_n checks, 503s for $fw_window ms"
    check "$fw_name: 200 again by itself after the 503s ($fw_window ms)" \
        eq "$([ -z "$fw_first" ] || [ -n "$fw_back" ] && echo yes)" yes
    check "$fw_name: and only 200 from then on ($fw_late other)" \
        eq "$fw_late" 0
    check "$fw_name: nothing but 200 and 503 ($fw_odd other)" eq "$fw_odd" 0
    check "$fw_name: no answer took a second ($fw_slow did)" eq "$fw_slow" 0
    check "$fw_name: every 503 carries Retry-After ($fw_nora did not)" \
        eq "$fw_nora" 0
    fault_row "$fw_name" "$fw_n" "$fw_odd" \
        "$(awk -v ms="$fw_window" 'BEGIN { printf "%.1f s", ms / 1000 }')"
}

if ! $HA sentinel start "$S" "$BASE" >"$T_TMP/start.log" 2>&1; then
    fail "a master, a replica and three sentinels start on 127.0.0.1:$BASE-$((BASE + 4))" \
        "$(tail -n 20 "$T_TMP/start.log")"
    finish
fi
pass "a master, a replica and three sentinels start on 127.0.0.1:$BASE-$((BASE + 4))"
# An ACL user on both data nodes (either may be the master later).
for node in "$BASE" $((BASE + 1)); do
    redis-cli -p "$node" ACL SETUSER rl on '>pw2' '~*' '&*' '+@all' \
        >/dev/null
done

TENANT=$(uniq_name sentinel)
ctl tenant add "$TENANT" >/dev/null
KEY=$(new_key "$TENANT")
TID=$(psql_q "SELECT id FROM tenants WHERE name = '$TENANT'")
ctl rule add "$TENANT" --route '/s/*' --algorithm fixed_window \
    --limit 100000 --calendar day >/dev/null
avoid_edge 86400 40

private_app s1 "$P1" redis_type=sentinel "$SENTINELS" \
    redis_sentinel_master=rlmaster || fail "a sentinel pool starts"
check "the sentinel pool is ready" retry 50 ready_on "$P1"
got=$(pcheck "$P1" "$KEY" /s/x s1)
check "a check through the master the sentinels name answers 200 ($got)" \
    eq "${got%% *}" 200
m=$(master_port)
check "its counter is on that master ($m)" \
    ne "$(redis-cli -p "$m" --scan --pattern "rl:{$TID}:*" | head -n 1)" ""

failover_window "Sentinel: SENTINEL FAILOVER" \
    redis-cli -p $((BASE + 2)) SENTINEL FAILOVER rlmaster
check "the sentinels name the other node now ($m -> $(master_port))" \
    ne "$(master_port)" "$m"
got=$(pcheck "$P1" "$KEY" /s/x s1)
check "the count went on on the new master ($got)" eq "$got" "200 99998"

# Wait until the old master is a replica of the new one, then kill the
# master.
# shellcheck disable=SC2317 # called through retry
in_sync() {
    redis-cli -p "$m" ROLE 2>/dev/null | head -n 1 | grep -qx slave
}
retry 100 in_sync || true
failover_window "Sentinel: master killed (SIGKILL)" \
    kill -KILL "$(cat "$S/$(master_port)/pid")"

# ---------------------------------------------------------------- readiness

private_app s2 "$P2" redis_type=sentinel "$SENTINELS" \
    redis_sentinel_master=nosuchmaster || fail "a pool for an unknown master starts"
check "an unknown master: /health/ready 503" retry 30 ready_on "$P2" 503
check "the reason names it ($(cat "$T_TMP/ready"))" \
    contains "$(cat "$T_TMP/ready")" "no master for nosuchmaster"
stop_private

# ---------------------------------------------------------------- db, ACL

m=$(master_port)
private_app s3 "$P2" redis_type=sentinel "$SENTINELS" \
    redis_sentinel_master=rlmaster redis_db=3 redis_username=rl \
    redis_password=pw2 || fail "a pool with redis_db and an ACL user starts"
got=$(pcheck "$P2" "$KEY" /s/x db3)
check "an ACL user (redis_username, redis_password): 200 ($got)" \
    eq "${got%% *}" 200
check "redis_db = 3: the counter is in database 3" \
    ne "$(redis-cli -p "$m" -n 3 --scan --pattern "rl:{$TID}:*" | head -n 1)" ""
stop_private
private_app s4 "$P2" redis_type=sentinel "$SENTINELS" \
    redis_sentinel_master=rlmaster redis_username=rl redis_password=nope ||
    fail "a pool with a wrong password starts"
got=$(pcheck "$P2" "$KEY" /s/x db3)
check "a wrong password: 503 ($got)" eq "${got%% *}" 503
stop_private

finish
