#!/bin/sh
# Redis Sentinel under load and faults (scripts/redis-ha.sh: a master on
# 127.0.0.1:12210, a replica on 12211, three sentinels on 12212-12214
# watching "rlmaster", down-after-milliseconds 1 s; both data nodes have
# an ACL user) behind private pools with redis_type = sentinel.  The quiet
# cases (checks through the named master, a failover without load, an
# unknown master, redis_db, an ACL user) are test_redissentinel.sh's; this
# file adds:
#   1. the master killed (SIGKILL), then a SENTINEL FAILOVER, each while
#      t/lib/loadgen.py runs against pool 1: only 200 and fast 503s (with
#      Retry-After), every request answered, 200 again by itself, the same
#      pool; both windows go in the fault table.  Pool 2 was warm and idle
#      meanwhile: once the new master is named (and, after a planned
#      failover, the old one is a replica) its checks answer 200 at once
#   2. a planned failover loses few allowed checks: the old master takes
#      writes until the sentinels demote it, and the workers, asking their
#      sentinel every 100 ms, leave it within that; the loss (in the fault
#      table) must stay under a fifth of the allowed checks
#   3. every sentinel stopped while the master lives: checks go on (the
#      master is known); a pool started then is not ready ("redis sentinels
#      unreachable"); the sentinels back, it is by itself
#   4. an ACL user on the sentinels (redis_sentinel_username,
#      redis_sentinel_password) works, a wrong password is not ready and
#      logged; a wrong redis_password: 503 and a log line that says what
#      to check
# Each scenario has its own bounded waits; the file takes about a minute.
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

serve_dir ratelimit-sentinel2
# Beside test_redissentinel.sh's 12200-12204.
BASE=$((${SENTINEL_TEST_PORT:-12200} + 10))
S=$D/sentinel
HA="sh $ROOT/scripts/redis-ha.sh"
LOADGEN=$ROOT/t/lib/loadgen.py
P1=$((PORT + 105))
P2=$((PORT + 106))
P3=$((PORT + 107))
SENTINELS="redis=127.0.0.1:$((BASE + 2)),127.0.0.1:$((BASE + 3)),127.0.0.1:$((BASE + 4))"
ACL="redis_username=rl redis_password=pw2"
trap '$HA sentinel stop "$S" >/dev/null 2>&1; end_pids $PIDS; rm -rf "$D"' EXIT

master_port() {
    $HA sentinel master "$S" | cut -d: -f2
}

# new_master OLD: waits (at most 15 s) until the sentinels name another
# master than port OLD; prints its port.
new_master() {
    nm_n=0
    while [ "$nm_n" -lt 150 ]; do
        nm_port=$(master_port)
        if [ -n "$nm_port" ] && [ "$nm_port" != "$1" ]; then
            echo "$nm_port"
            return 0
        fi
        nm_n=$((nm_n + 1))
        sleep 0.1
    done
    return 1
}

# checks OUT PORT N PARALLEL SUBJECT: N checks of /s/x, PARALLEL at a
# time; OUT gets one status a line.
checks() {
    : >"$T_TMP/checks.conf"
    ch_i=0
    while [ "$ch_i" -lt "$3" ]; do
        [ "$ch_i" -gt 0 ] && echo next >>"$T_TMP/checks.conf"
        printf '%s\n' "url = \"http://127.0.0.1:$2/v1/check\"" \
            "header = \"X-API-Key: $KEY\"" \
            "data-raw = \"{\\\"route\\\":\\\"/s/x\\\",\\\"subject\\\":\\\"$5\\\"}\"" \
            'output = "/dev/null"' 'write-out = "%{http_code}\n"' \
            'max-time = 5' >>"$T_TMP/checks.conf"
        ch_i=$((ch_i + 1))
    done
    curl -s --no-progress-meter --parallel --parallel-max "$4" \
        -K "$T_TMP/checks.conf" >"$1" 2>/dev/null || true
}

# under_load NAME ACTION...: 10 s of t/lib/loadgen.py against pool 1 (150
# checks a second over 8 connections) and a probe that keeps the headers,
# ACTION run 1 s in; then the checks of scenario NAME, its fault table
# row, and 40 checks through pool 2, which was idle meanwhile.
under_load() {
    ul_name=$1
    shift
    python3 "$LOADGEN" run --port "$P1" --key "$KEY" \
        --body '{"route":"/s/load","subject":"load"}' --requests 1500 \
        --rate 150 --concurrency 8 --duration 10 --timeout 5 \
        --out "$T_TMP/lg.out" >"$T_TMP/lg.sum" 2>&1 &
    ul_lg=$!
    (
        end=$(($(now_ms) + 10000))
        while [ "$(now_ms)" -lt "$end" ]; do
            st=$(pcheck "$P1" "$KEY" /s/probe probe)
            ra=$(tr -d '\r' <"$T_TMP/phead" |
                awk -F': ' 'tolower($1) == "retry-after" { print $2 }')
            echo "${st%% *} ${ra:--}"
            sleep 0.05
        done
    ) >"$T_TMP/probe.out" &
    ul_probe=$!
    sleep 1
    ul_old=$(master_port)
    ul_t0=$(now_ms)
    "$@" >/dev/null
    ul_new=$(new_master "$ul_old") || ul_new=""
    ul_t1=$(now_ms)
    wait "$ul_lg"
    wait "$ul_probe"
    python3 "$LOADGEN" stats "$T_TMP/lg.out" >"$T_TMP/lg.stats"
    python3 "$LOADGEN" window "$T_TMP/lg.out" >"$T_TMP/lg.window"
    ul_back=$(json_field back_ms "$(cat "$T_TMP/lg.window")")
    ul_window=$(json_field window_ms "$(cat "$T_TMP/lg.window")")
    ul_late=$(json_field late "$(cat "$T_TMP/lg.window")")
    ul_odd=$(( $(lg_stat other) + $(lg_stat noanswer) + $(lg_stat s500) +
        $(lg_stat s401) + $(lg_stat s429) ))
    ul_nora=$(awk '$1 == 503 && $2 == "-"' "$T_TMP/probe.out" | wc -l)
    echo "    $ul_name: master $ul_old -> ${ul_new:-?} named after $((ul_t1 - ul_t0)) ms;"
    echo "    loadgen: $(lg_stat requests) checks, $(lg_stat s200) x 200, $(lg_stat s503) x 503 for $ul_window ms ($ul_late later), slowest $(lg_stat max_ms) ms"
    check "$ul_name: the sentinels name a new master ($ul_old -> $ul_new)" \
        ne "$ul_new" ""
    check "$ul_name: nothing but 200 and 503, every request answered ($ul_odd other)" \
        eq "$ul_odd" 0
    check "$ul_name: no answer took a second (slowest $(lg_stat max_ms) ms)" \
        lt_num "$(lg_stat max_ms)" 1000
    check "$ul_name: 200 again by itself within 3 s of the new master being named (after $ul_window ms)" \
        le "$((ul_back - ul_t1))" 3000
    check "$ul_name: and only 200 from then on ($ul_late other)" \
        eq "$ul_late" 0
    check "$ul_name: every 503 of the probe carries Retry-After ($ul_nora did not)" \
        eq "$ul_nora" 0
    check "$ul_name: the same pool throughout (no restart)" alive "$P1_APP"
    fault_row "Sentinel: $ul_name under load (loadgen)" "$(lg_stat requests)" \
        "$ul_odd" "$(awk -v ms="$ul_window" 'BEGIN { printf "%.1f s", ms / 1000 }')"
}

# idle_pool NAME: 40 checks through pool 2, which was idle during scenario
# NAME, all answer 200.
idle_pool() {
    checks "$T_TMP/idle.out" "$P2" 40 8 idle
    check "$1: a pool idle meanwhile answers 200 at once, 40 of 40 ($(sort "$T_TMP/idle.out" | uniq -c | tr -s ' \n' ' '))" \
        eq "$(grep -c '^200$' "$T_TMP/idle.out")" 40
}

# healthy PORT: 20 checks through PORT, 4 at a time, all answer 200.
# shellcheck disable=SC2317 # called through retry
healthy() {
    checks "$T_TMP/healthy.out" "$1" 20 4 healthy
    [ "$(grep -c '^200$' "$T_TMP/healthy.out")" = 20 ]
}

lg_stat() {
    json_field "$1" "$(cat "$T_TMP/lg.stats")"
}

if ! REDIS_ACL_USER=rl REDIS_ACL_PASS=pw2 \
    $HA sentinel start "$S" "$BASE" >"$T_TMP/start.log" 2>&1; then
    fail "a master, a replica and three sentinels start on 127.0.0.1:$BASE-$((BASE + 4))" \
        "$(tail -n 20 "$T_TMP/start.log")"
    finish
fi
pass "a master, a replica and three sentinels start on 127.0.0.1:$BASE-$((BASE + 4))"

TENANT=$(uniq_name sload)
ctl tenant add "$TENANT" >/dev/null
KEY=$(new_key "$TENANT")
ctl rule add "$TENANT" --route '/s/*' --algorithm fixed_window \
    --limit 1000000 --calendar day >/dev/null
avoid_edge 86400 60

# shellcheck disable=SC2086 # ACL is two arguments
private_app t1 "$P1" redis_type=sentinel "$SENTINELS" \
    redis_sentinel_master=rlmaster $ACL || fail "pool 1 starts"
P1_APP=$APP_PID
# shellcheck disable=SC2086
private_app t2 "$P2" redis_type=sentinel "$SENTINELS" \
    redis_sentinel_master=rlmaster $ACL || fail "pool 2 starts"
check "pool 1 is ready" retry 50 ready_on "$P1"
check "pool 2 is ready" retry 50 ready_on "$P2"
# Every worker of both pools connected to the master.
checks "$T_TMP/warm1.out" "$P1" 40 8 warm
checks "$T_TMP/warm2.out" "$P2" 40 8 warm
check "warm-up: 80 checks over both pools answer 200" \
    eq "$(cat "$T_TMP/warm1.out" "$T_TMP/warm2.out" | grep -c '^200$')" 80

# ---------------------------------------------------------------- failovers

under_load "master killed (SIGKILL)" \
    sh "$ROOT/scripts/redis-ha.sh" sentinel kill-master "$S"
sleep 1
idle_pool "master killed (SIGKILL)"

# A planned failover needs a replica: the killed node comes back as one.
old=$(awk '{ print $1 }' "$S/ports")
[ "$old" = "$(master_port)" ] && old=$(awk '{ print $2 }' "$S/ports")
REDIS_ACL_USER=rl REDIS_ACL_PASS=pw2 $HA sentinel revive "$S" "$old" \
    >/dev/null 2>&1
# shellcheck disable=SC2317 # called through retry
synced() {
    redis-cli -p $((BASE + 2)) SENTINEL REPLICAS rlmaster | tr -d '\r' |
        paste -d= - - | grep -qx 'master-link-status=ok' &&
        redis-cli -p $((BASE + 2)) SENTINEL REPLICAS rlmaster | tr -d '\r' |
        paste -d= - - | grep -qx 'flags=slave'
}
check "the killed node $old is back as a replica the sentinels see" \
    retry 150 synced

check "pool 1 answers 200 on every worker before the planned failover" \
    retry 20 healthy "$P1"
before=$(pcheck "$P1" "$KEY" /s/load load)
old=$(master_port)
under_load "SENTINEL FAILOVER" \
    redis-cli -p $((BASE + 2)) SENTINEL FAILOVER rlmaster
# The sentinels make the old master a replica some seconds after they name
# the new one (at most 20 s here); until then it still takes writes.
# shellcheck disable=SC2317 # called through retry
demoted() {
    redis-cli -p "$old" ROLE 2>/dev/null | head -n 1 | grep -qx slave
}
t0=$(now_ms)
check "the old master $old is a replica again" retry 200 demoted
echo "    the old master was demoted $(( $(now_ms) - t0 )) ms after the load ended"
sleep 1
idle_pool "SENTINEL FAILOVER"
check "pool 1 answers 200 on every worker after the planned failover" \
    retry 20 healthy "$P1"
allowed=$(awk -F'\t' '$3 == 200' "$T_TMP/lg.out" | wc -l)
after=$(pcheck "$P1" "$KEY" /s/load load)
# Replication is asynchronous and SENTINEL FAILOVER does not pause the old
# master: what it takes after the replica's promotion is lost when it is
# demoted.  Each worker asks the sentinel at most every 100 ms whether the
# master changed, which bounds the loss to about that much traffic (before,
# workers followed only when the old master refused writes, seconds later,
# and most of the allowed checks under load were lost).
lost=$(( ${before#* } - allowed - 1 - ${after#* } ))
[ "$lost" -ge 0 ] || lost=$((-lost))
echo "    planned failover: $allowed allowed under load, $lost not counted on the new master"
fault_row "Sentinel: SENTINEL FAILOVER, allowed checks not counted after" \
    "$allowed" "$lost" -
check "the planned failover loses at most a fifth of the allowed checks ($lost of $allowed)" \
    le $((lost * 5)) "$allowed"

# ---------------------------------------------------------------- sentinels down

m=$(master_port)
check "pool 1 answers 200 on every worker before the sentinels go" \
    retry 20 healthy "$P1"
for port in $((BASE + 2)) $((BASE + 3)) $((BASE + 4)); do
    kill -KILL "$(cat "$S/$port/pid")" 2>/dev/null || true
done
sleep 0.5
checks "$T_TMP/nosent.out" "$P1" 20 4 nosent
check "every sentinel stopped, the master alive: checks go on (200 x $(grep -c '^200$' "$T_TMP/nosent.out") of 20)" \
    eq "$(grep -c '^200$' "$T_TMP/nosent.out")" 20
# shellcheck disable=SC2086
private_app t3 "$P3" redis_type=sentinel "$SENTINELS" \
    redis_sentinel_master=rlmaster $ACL || fail "pool 3 starts"
check "a pool started without sentinels is not ready" \
    retry 30 ready_on "$P3" 503
check "and says why ($(cat "$T_TMP/ready"))" \
    contains "$(cat "$T_TMP/ready")" "redis sentinels unreachable"
for port in $((BASE + 2)) $((BASE + 3)) $((BASE + 4)); do
    redis-server "$S/$port/sentinel.conf" --sentinel >/dev/null 2>&1 || true
done
check "the sentinels back: that pool is ready by itself" \
    retry 100 ready_on "$P3"
got=$(pcheck "$P3" "$KEY" /s/x back)
check "and its checks answer 200 through master $m ($got)" eq "${got%% *}" 200
stop_private

# ---------------------------------------------------------------- auth

for port in $((BASE + 2)) $((BASE + 3)) $((BASE + 4)); do
    redis-cli -p "$port" ACL SETUSER rls on '>spw' '~*' '&*' '+@all' \
        >/dev/null
done
# shellcheck disable=SC2086
private_app t4 "$P3" redis_type=sentinel "$SENTINELS" \
    redis_sentinel_master=rlmaster redis_sentinel_username=rls \
    redis_sentinel_password=spw $ACL || fail "a pool with a sentinel user starts"
check "an ACL user on the sentinels (redis_sentinel_username, redis_sentinel_password): ready" \
    retry 50 ready_on "$P3"
got=$(pcheck "$P3" "$KEY" /s/x sauth)
check "and checks answer 200 ($got)" eq "${got%% *}" 200
stop_private
# shellcheck disable=SC2086
private_app t5 "$P3" redis_type=sentinel "$SENTINELS" \
    redis_sentinel_master=rlmaster redis_sentinel_username=rls \
    redis_sentinel_password=wrong $ACL || fail "a pool with a wrong sentinel password starts"
check "a wrong redis_sentinel_password: not ready" retry 30 ready_on "$P3" 503
check "and the log names the sentinel's AUTH" \
    retry 30 grep -q 'sentinel .* AUTH' "$D/t5.log"
stop_private
private_app t6 "$P3" redis_type=sentinel "$SENTINELS" \
    redis_sentinel_master=rlmaster redis_username=rl redis_password=wrong ||
    fail "a pool with a wrong redis_password starts"
got=$(pcheck "$P3" "$KEY" /s/x wrong)
check "a wrong redis_password: 503 ($got)" eq "${got%% *}" 503
check "and the log says what to check" \
    retry 30 grep -q 'check redis_username and redis_password' "$D/t6.log"
stop_private

finish
