#!/bin/sh
# A real Redis Cluster (scripts/redis-ha.sh: 3 primaries and 3 replicas on
# 127.0.0.1:12100-12105, cluster-node-timeout 1 s) behind private pools
# with redis_type = cluster:
#   1. tenants whose slots fall on each of the three primaries: their checks
#      answer 200 and their keys live on the owning primary only; one
#      EVALSHA per check on that primary and none elsewhere (INFO
#      commandstats)
#   2. exactness at scale: two pools (two lighttpd front ends) share the
#      cluster; 500 concurrent checks split over both against a limit of
#      100 allow exactly 100, for every algorithm
#   3. MOVED: a tenant's slot moved to another primary while checks run:
#      every check answers 200, the count goes on, the redirect is counted
#   4. ASK: during a migration, with the keys moved: 200, counts go on;
#      then the migration ends
#   5. SCRIPT FLUSH on a primary: the next check still answers 200
#   6. readiness: 503 "cluster slots uncovered" while a slot has no owner,
#      200 again once it has
#   7. failover: the primary of a tenant's slot killed (SIGKILL) while
#      checks run: fast 503s with Retry-After, then 200 by themselves once
#      its replica is promoted; the window goes in the fault table
#   8. a password-protected cluster: redis_password works, a wrong one
#      gives 503 and a log line that says what to check
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

serve_dir ratelimit-cluster
BASE=${CLUSTER_TEST_PORT:-12100}
C=$D/cluster
HA="sh $ROOT/scripts/redis-ha.sh"
P1=$((PORT + 91))
P2=$((PORT + 92))
P3=$((PORT + 93))
CLUSTER_PASSWORD=
trap '$HA cluster stop "$C" >/dev/null 2>&1; end_pids $PIDS; rm -rf "$D"' EXIT

ccli() {
    cc_port=$1
    shift
    if [ -n "$CLUSTER_PASSWORD" ]; then
        redis-cli -h 127.0.0.1 -p "$cc_port" -a "$CLUSTER_PASSWORD" \
            --no-auth-warning "$@"
    else
        redis-cli -h 127.0.0.1 -p "$cc_port" "$@"
    fi
}

all_nodes() {
    cat "$C/ports"
}

metric() {
    curl -s -m 5 "http://127.0.0.1:$1/metrics" |
        awk -v m="$2" '$1 == m { print $2 }'
}

evalsha_calls() {
    ccli "$1" INFO commandstats | tr -d '\r' |
        awk -F'[:,=]' '$1 == "cmdstat_evalsha" { print $3 }' | grep . ||
        echo 0
}

if ! $HA cluster start "$C" "$BASE" >"$T_TMP/start.log" 2>&1; then
    fail "a Redis Cluster starts on 127.0.0.1:$BASE-$((BASE + 5))" \
        "$(tail -n 20 "$T_TMP/start.log")"
    finish
fi
pass "a Redis Cluster starts on 127.0.0.1:$BASE-$((BASE + 5))"
POOL="redis_type=cluster" SEEDS="redis=127.0.0.1:$BASE, 127.0.0.1:$((BASE + 1))"
private_app c1 "$P1" "$POOL" "$SEEDS" ||
    fail "pool 1 starts behind lighttpd"
P1_APP=$APP_PID
P1_LT=$LT_PID
private_app c2 "$P2" "$POOL" "$SEEDS" ||
    fail "pool 2 starts behind lighttpd"
check "pool 1 is ready against the cluster" retry 50 ready_on "$P1"

# ---------------------------------------------------------------- routing

# Tenants until their slots fall on all three primaries (a tenant's slot is
# that of its id, the hash tag of all its keys).
OWNERS=" "
i=0
while [ "$i" -lt 40 ]; do
    i=$((i + 1))
    name=$(uniq_name shard)
    tid=$(ctl tenant add "$name" | awk '$1 == "id" { print $2; exit }')
    owner=$($HA cluster owner "$C" "$tid")
    case $OWNERS in
    *" $owner:"*) ctl tenant remove "$name" >/dev/null; continue ;;
    esac
    key=$(new_key "$name")
    ctl rule add "$name" --route '/c/*' --algorithm fixed_window \
        --limit 100000 --calendar day >/dev/null
    OWNERS="$OWNERS$owner:$name:$tid:$key "
    [ "$(printf '%s' "$OWNERS" | wc -w)" -ge 3 ] && break
done
check "three tenants, one on each primary ($(printf '%s' "$OWNERS" | wc -w))" \
    eq "$(printf '%s' "$OWNERS" | wc -w)" 3
# field N of the owner record I (1..3): 1 port, 2 name, 3 id, 4 key
rec() {
    printf '%s' "$OWNERS" | tr ' ' '\n' | grep . | sed -n "${1}p" |
        cut -d: -f"$2"
}
avoid_edge 86400 10
for n in 1 2 3; do
    got=$(pcheck "$P1" "$(rec "$n" 4)" /c/x s1)
    check "tenant on primary $(rec "$n" 1): a check answers 200 ($got)" \
        eq "${got%% *}" 200
    on=""
    for node in $(all_nodes); do
        if [ -n "$(ccli "$node" --scan --pattern "rl:{$(rec "$n" 3)}:*" |
            head -n 1)" ]; then
            on="$on $node"
        fi
    done
    # (the owner's replica holds a copy)
    check "tenant on primary $(rec "$n" 1): its keys are on that primary ($on)" \
        contains " $on " " $(rec "$n" 1) "
done

# One round trip per check: 100 warm checks of tenant 1 are 100 EVALSHA on
# its primary and none on the others.
for node in $(all_nodes); do
    ccli "$node" CONFIG RESETSTAT >/dev/null
done
k1=$(rec 1 4)
: >"$T_TMP/warm.conf"
j=1
while [ "$j" -le 100 ]; do
    [ "$j" -gt 1 ] && echo next >>"$T_TMP/warm.conf"
    printf 'url = "http://127.0.0.1:%s/v1/check"\nheader = "X-API-Key: %s"\ndata-raw = "{\\"route\\":\\"/c/x\\",\\"subject\\":\\"w\\"}"\noutput = "/dev/null"\nwrite-out = "%%{http_code}\\n"\n' \
        "$P1" "$k1" >>"$T_TMP/warm.conf"
    j=$((j + 1))
done
curl -s -K "$T_TMP/warm.conf" >"$T_TMP/warm.out"
ROUND_TRIPS=""
for node in $(all_nodes); do
    ROUND_TRIPS="$ROUND_TRIPS $node:$(evalsha_calls "$node")"
done
echo "    EVALSHA calls per node for 100 checks of a tenant on $(rec 1 1):$ROUND_TRIPS"
check "100 checks: 100 answers 200 ($(grep -c '^200$' "$T_TMP/warm.out"))" \
    eq "$(grep -c '^200$' "$T_TMP/warm.out")" 100
check "100 checks: exactly 100 EVALSHA on the owning primary, none elsewhere ($ROUND_TRIPS)" \
    eq "$(echo "$ROUND_TRIPS" | tr ' ' '\n' | awk -F: -v o="$(rec 1 1)" '
        NF == 0 { next }
        $1 == o && $2 == 100 { ok++ } $1 != o && $2 != 0 { bad++ }
        END { print (ok == 1 && bad == 0) ? "yes" : "no" }')" yes

# ---------------------------------------------------------------- exactness

name=$(uniq_name exact)
ctl tenant add "$name" >/dev/null
key=$(new_key "$name")
ctl rule add "$name" --route /e/token_bucket --algorithm token_bucket \
    --capacity 100 --refill-rate 0.001 >/dev/null
ctl rule add "$name" --route /e/sliding_window --algorithm sliding_window \
    --limit 100 --window 3600 >/dev/null
ctl rule add "$name" --route /e/gcra --algorithm gcra --limit 100 \
    --period 100h --burst 99 >/dev/null
ctl rule add "$name" --route /e/fixed_window --algorithm fixed_window \
    --limit 100 --calendar day >/dev/null
for algo in token_bucket sliding_window gcra fixed_window; do
    subj=$(uniq_name s)
    : >"$T_TMP/two.conf"
    j=1
    while [ "$j" -le 500 ]; do
        front=$P1
        [ $((j % 2)) -eq 0 ] && front=$P2
        [ "$j" -gt 1 ] && echo next >>"$T_TMP/two.conf"
        printf 'url = "http://127.0.0.1:%s/v1/check"\nheader = "X-API-Key: %s"\ndata-raw = "{\\"route\\":\\"/e/%s\\",\\"subject\\":\\"%s\\"}"\noutput = "/dev/null"\nwrite-out = "%%{http_code}\\n"\nmax-time = 20\n' \
            "$front" "$key" "$algo" "$subj" >>"$T_TMP/two.conf"
        j=$((j + 1))
    done
    curl -s --no-progress-meter --parallel --parallel-max 50 \
        -K "$T_TMP/two.conf" >"$T_TMP/two.out" || true
    ok=$(grep -c '^200$' "$T_TMP/two.out")
    no=$(grep -c '^429$' "$T_TMP/two.out")
    check "two pools, one cluster, $algo: 500 concurrent checks allow exactly 100 ($ok) and deny 400 ($no)" \
        eq "$ok/$no" 100/400
done

# ---------------------------------------------------------------- MOVED

# move_slot SLOT FROM TO [finish]: the IMPORTING/MIGRATING dance of a
# resharding; the keys are migrated; with "finish" the slot is given to TO
# on every node.
slot_of() {
    ccli "$BASE" CLUSTER KEYSLOT "$1"
}
node_id() {
    ccli "$1" CLUSTER MYID
}
start_move() {
    ccli "$3" CLUSTER SETSLOT "$1" IMPORTING "$(node_id "$2")" >/dev/null
    ccli "$2" CLUSTER SETSLOT "$1" MIGRATING "$(node_id "$3")" >/dev/null
    sm_n=0
    while [ "$sm_n" -lt 20 ]; do
        sm_keys=$(ccli "$2" CLUSTER GETKEYSINSLOT "$1" 100 | tr '\n' ' ')
        [ -n "${sm_keys% }" ] || break
        # shellcheck disable=SC2086 # a list of keys
        ccli "$2" MIGRATE 127.0.0.1 "$3" "" 0 5000 KEYS $sm_keys >/dev/null
        sm_n=$((sm_n + 1))
    done
}
end_move() {
    em_id=$(node_id "$3")
    # The destination first, then the source, then the others, as a
    # resharding does: the other way round, the source would send MOVED to
    # a destination that still sends it back.
    for em_port in "$3" "$2" $(all_nodes); do
        ccli "$em_port" CLUSTER SETSLOT "$1" NODE "$em_id" >/dev/null 2>&1 ||
            true
    done
}
other_primary() {
    $HA cluster primaries "$C" | grep -vx "$1" | head -n 1
}

src=$(rec 2 1)
dst=$(other_primary "$src")
tid=$(rec 2 3)
k2=$(rec 2 4)
slot=$(slot_of "$tid")
before=$(pcheck "$P1" "$k2" /c/x moved)
redirects0=$(metric "$P1" ratelimit_redis_redirects_total)
# Checks go on during the move (one every 20 ms, at most 3 s).
(
    end=$(($(now_ms) + 3000))
    while [ "$(now_ms)" -lt "$end" ]; do
        pcheck "$P1" "$k2" /c/x moved
        sleep 0.02
    done
) >"$T_TMP/during.out" &
loop=$!
sleep 0.3
start_move "$slot" "$src" "$dst"
end_move "$slot" "$src" "$dst"
wait "$loop"
after=$(pcheck "$P1" "$k2" /c/x moved)
n_during=$(wc -l <"$T_TMP/during.out")
ok_during=$(grep -c '^200 ' "$T_TMP/during.out")
check "MOVED: the slot of tenant 2 is now on $dst" \
    eq "$($HA cluster owner "$C" "$tid")" "$dst"
check "MOVED: every check during the move answered 200 ($ok_during of $n_during)" \
    eq "$ok_during" "$n_during"
check "MOVED: the count went on across the move (${before#* } -> ${after#* } after $n_during checks)" \
    eq "$(( ${before#* } - n_during - 1 ))" "${after#* }"
redirects1=$(metric "$P1" ratelimit_redis_redirects_total)
check "MOVED: the redirect was followed and counted ($redirects0 -> $redirects1)" \
    lt_num "$redirects0" "$redirects1"

# ---------------------------------------------------------------- ASK

src=$(rec 3 1)
dst=$(other_primary "$src")
tid=$(rec 3 3)
k3=$(rec 3 4)
slot=$(slot_of "$tid")
before=$(pcheck "$P1" "$k3" /c/x ask)
start_move "$slot" "$src" "$dst"
t0=$(now_ms)
during=$(pcheck "$P1" "$k3" /c/x ask)
t1=$(now_ms)
fresh=$(pcheck "$P1" "$k3" /c/x ask-new)
check "ASK: with the keys moved and the slot still migrating, a check answers 200 in under a second ($during, $((t1 - t0)) ms)" \
    eq "${during%% *}/$(( t1 - t0 < 1000 ))" 200/1
check "ASK: and counts on (${before#* } -> ${during#* })" \
    eq "$(( ${before#* } - 1 ))" "${during#* }"
check "ASK: a subject new to both nodes also passes ($fresh)" eq "${fresh%% *}" 200
end_move "$slot" "$src" "$dst"
after=$(pcheck "$P1" "$k3" /c/x ask)
check "ASK: after the migration the count goes on (${during#* } -> ${after#* })" \
    eq "$(( ${during#* } - 1 ))" "${after#* }"

# ---------------------------------------------------------------- SCRIPT FLUSH

owner=$($HA cluster owner "$C" "$(rec 1 3)")
ccli "$owner" SCRIPT FLUSH >/dev/null
got=$(pcheck "$P1" "$k1" /c/x flushed)
check "SCRIPT FLUSH on $owner: the next check answers 200 ($got)" \
    eq "${got%% *}" 200

# ---------------------------------------------------------------- readiness

# A slot none of the tenants uses, given up by every node.
slot=0
for n in 1 2 3; do
    [ "$(slot_of "$(rec "$n" 3)")" = 0 ] && slot=1
done
owner=$(ccli "$BASE" CLUSTER NODES | tr -d '\r' | awk -v s="$slot" '
    $3 ~ /master/ { for (i = 9; i <= NF; i++) { split($i, r, "-")
        if (r[1] + 0 <= s && s <= (r[2] == "" ? r[1] : r[2]) + 0) {
            split($2, a, "@"); sub(/.*:/, "", a[1]); print a[1] } } }' |
    head -n 1)
for node in $(all_nodes); do
    ccli "$node" CLUSTER DELSLOTS "$slot" >/dev/null 2>&1 || true
done
check "readiness: slot $slot without an owner -> 503" \
    retry 50 ready_on "$P1" 503
check "readiness: the reason says so ($(cat "$T_TMP/ready"))" \
    contains "$(cat "$T_TMP/ready")" "cluster slots uncovered"
ccli "$owner" CLUSTER ADDSLOTS "$slot" >/dev/null
$HA cluster wait "$C" || true
check "readiness: 200 again once $owner serves slot $slot" \
    retry 100 ready_on "$P1"

# ---------------------------------------------------------------- failover

victim=$($HA cluster owner "$C" "$(rec 1 3)")
(
    end=$(($(now_ms) + 15000))
    seen503=0
    while [ "$(now_ms)" -lt "$end" ]; do
        t0=$(now_ms)
        st=$(pcheck "$P1" "$k1" /c/x fo)
        t1=$(now_ms)
        ra=$(tr -d '\r' <"$T_TMP/phead" | awk -F': ' 'tolower($1) == "retry-after" { print $2 }')
        echo "$t0 $((t1 - t0)) ${st%% *} ${ra:--}"
        case $st in
        503*) seen503=1 ;;
        200*) [ "$seen503" = 1 ] && break ;;
        esac
        sleep 0.02
    done
) >"$T_TMP/fo.out" &
loop=$!
sleep 0.5
kill -KILL "$(cat "$C/$victim/pid")"
t_kill=$(now_ms)
wait "$loop"
first503=$(awk '$3 == 503 { print $1; exit }' "$T_TMP/fo.out")
back=$(awk '$3 == 503 { s = 1 } s && $3 == 200 { print $1; exit }' "$T_TMP/fo.out")
n_fo=$(wc -l <"$T_TMP/fo.out")
odd=$(awk '$3 != 200 && $3 != 503' "$T_TMP/fo.out" | wc -l)
slow=$(awk '$2 > 1000' "$T_TMP/fo.out" | wc -l)
no_ra=$(awk '$3 == 503 && $4 == "-"' "$T_TMP/fo.out" | wc -l)
window=$(( ${back:-0} - ${first503:-0} ))
echo "    failover: primary $victim killed; 503s from +$(( ${first503:-$t_kill} - t_kill )) ms for $window ms, then 200"
check "failover: checks answered 503 while the primary was gone" \
    is_int "$first503"
check "failover: then 200 again by themselves, within 15 s (after $window ms)" \
    is_int "$back"
check "failover: nothing but 200 and 503 ($odd other)" eq "$odd" 0
check "failover: no answer took a second ($slow did)" eq "$slow" 0
check "failover: every 503 carries Retry-After ($no_ra did not)" eq "$no_ra" 0
fault_row "Redis Cluster: primary killed, replica promoted" "$n_fo" \
    "$odd" "$(awk -v ms="$window" 'BEGIN { printf "%.1f s", ms / 1000 }')"
$HA cluster revive "$C" "$victim" >/dev/null 2>&1 || true
$HA cluster wait "$C" || true

# ---------------------------------------------------------------- password

for node in $(all_nodes); do
    ccli "$node" CONFIG SET masterauth s3cret >/dev/null
    ccli "$node" CONFIG SET requirepass s3cret >/dev/null
done
CLUSTER_PASSWORD=s3cret
stop_process "$P1_LT" TERM
stop_process "$P1_APP" TERM
private_app c3 "$P3" "$POOL" "$SEEDS" "redis_password=s3cret" ||
    fail "a pool with redis_password starts"
got=$(pcheck "$P3" "$k1" /c/x pw)
check "password-protected cluster: redis_password works ($got)" \
    eq "${got%% *}" 200
stop_private
private_app c4 "$P3" "$POOL" "$SEEDS" "redis_password=wrong" ||
    fail "a pool with a wrong redis_password starts"
got=$(pcheck "$P3" "$k1" /c/x pw)
check "a wrong redis_password: 503 ($got)" eq "${got%% *}" 503
check "and the log says what to check" \
    retry 30 grep -q 'check redis_username and redis_password' "$D/c4.log"
stop_private

finish
