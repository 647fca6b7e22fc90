#!/bin/sh
# Starts and stops real Redis set-ups with more than one server, all on
# 127.0.0.1 and kept under one directory: a Redis Cluster of three primaries
# and three replicas, or a master, a replica and three sentinels.  The
# development stack (REDIS_TYPE=cluster|sentinel) and the integration tests
# use it.
#
# Usage:
#   redis-ha.sh cluster start DIR BASEPORT    nodes on BASEPORT..BASEPORT+5
#   redis-ha.sh cluster stop DIR
#   redis-ha.sh cluster wait-ok DIR           every node that runs says
#                                             cluster_state:ok and 16384
#                                             slots ok (alias: wait)
#   redis-ha.sh cluster primary-of DIR KEY    port of the primary of KEY's
#                                             slot (alias: owner)
#   redis-ha.sh cluster primaries DIR         ports of the primaries
#   redis-ha.sh cluster kill-primary DIR PORT SIGKILL to the primary on PORT
#   redis-ha.sh cluster revive DIR PORT       start a stopped node again
#                                             (it rejoins, as a replica)
#   redis-ha.sh sentinel start DIR BASEPORT   master BASEPORT, replica +1,
#                                             sentinels +2, +3, +4
#   redis-ha.sh sentinel stop DIR
#   redis-ha.sh sentinel master DIR           host:port the sentinels name
#   redis-ha.sh sentinel kill-master DIR      SIGKILL to that master; prints
#                                             its port
#   redis-ha.sh sentinel revive DIR PORT      start a stopped data node
#                                             again, as a replica of the
#                                             master the sentinels name
#   redis-ha.sh cluster|sentinel status DIR   one line per server: port,
#                                             role and pid, or "down";
#                                             exits 1 when one is down
#
# Environment:
#   REDIS_PASSWORD  [none]      requirepass and masterauth of every data
#                               node (and the sentinels' auth-pass)
#   REDIS_ACL_USER, REDIS_ACL_PASS [none]
#                               an ACL user (on >pass ~* &* +@all) on every
#                               data node; replication keeps using the
#                               default user (masterauth)
#   SENTINEL_NAME   [rlmaster]  the name the sentinels monitor
#
# A cluster node also listens on its port + 10000 (the cluster bus), which
# must stay below 32768, out of the ephemeral range: BASEPORT + 5 + 10000
# must be below 22768.  Timeouts are short (cluster-node-timeout and
# down-after-milliseconds 1000) so that a failover takes seconds.  Every
# wait is bounded; stop is safe when nothing runs.
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# pid_alive, wait_gone, end_pids
# shellcheck source-path=SCRIPTDIR source=proc.sh
. "$ROOT/scripts/proc.sh"

PASSWORD=${REDIS_PASSWORD:-}
NAME=${SENTINEL_NAME:-rlmaster}
ACL_USER=${REDIS_ACL_USER:-}
ACL_PASS=${REDIS_ACL_PASS:-}

die() {
    echo "redis-ha: $*" >&2
    exit 1
}

[ -z "$ACL_USER" ] || [ -n "$ACL_PASS" ] ||
    die "REDIS_ACL_USER needs REDIS_ACL_PASS"

# cli PORT ARGS...: redis-cli against 127.0.0.1:PORT, with the password.
cli() {
    cl_port=$1
    shift
    if [ -n "$PASSWORD" ]; then
        redis-cli -h 127.0.0.1 -p "$cl_port" -a "$PASSWORD" \
            --no-auth-warning "$@"
    else
        redis-cli -h 127.0.0.1 -p "$cl_port" "$@"
    fi
}

# until_true TENTHS CMD...: runs CMD every 0.1 s until it succeeds, at
# most TENTHS times and for at most about TENTHS / 10 seconds.
until_true() {
    ut_n=$1
    ut_end=$(($(date +%s) + ut_n / 10 + 1))
    shift
    while [ "$ut_n" -gt 0 ] && [ "$(date +%s)" -le "$ut_end" ]; do
        "$@" >/dev/null 2>&1 && return 0
        ut_n=$((ut_n - 1))
        sleep 0.1
    done
    return 1
}

# data_node DIR PORT [ARGS...]: one redis-server in DIR/PORT.
data_node() {
    dn_dir=$1/$2
    dn_port=$2
    shift 2
    mkdir -p "$dn_dir"
    set -- --bind 127.0.0.1 --port "$dn_port" --dir "$dn_dir" \
        --pidfile "$dn_dir/pid" --logfile "$dn_dir/log" --daemonize yes \
        --save '' --appendonly no --repl-diskless-sync-delay 0 "$@"
    if [ -n "$PASSWORD" ]; then
        set -- "$@" --requirepass "$PASSWORD" --masterauth "$PASSWORD"
    fi
    if [ -n "$ACL_USER" ]; then
        set -- "$@" --user "$ACL_USER" on ">$ACL_PASS" '~*' '&*' '+@all'
    fi
    port_free "$dn_port"
    redis-server "$@" >/dev/null || die "redis-server on $dn_port failed"
    until_true 100 started "$dn_dir" "$dn_port" ||
        die "redis-server on $dn_port did not answer PING in 10 s" \
            "($(tail -n 1 "$dn_dir/log" 2>/dev/null))"
}

# port_free PORT: nothing answers on 127.0.0.1:PORT.  A daemonized server
# that cannot bind exits after its parent returned 0, so a server of
# another run on the port would be taken for ours.
port_free() {
    if redis-cli -h 127.0.0.1 -p "$1" PING >/dev/null 2>&1; then
        die "127.0.0.1:$1 is in use (another run on the same ports?)"
    fi
}

# started DIR PORT: the server started in DIR runs and answers on PORT.
started() {
    pid_alive "$1/pid" >/dev/null && pong "$2"
}

# list_of DIR NAME: the ports written in DIR/NAME at start.
list_of() {
    cat "$1/$2"
}

pong() {
    [ "$(cli "$1" PING 2>/dev/null)" = PONG ]
}

# stop_all DIR: every server whose pid file is under DIR.
stop_all() {
    sa_pids=""
    for sa_f in "$1"/*/pid; do
        [ -f "$sa_f" ] || continue
        if sa_pid=$(pid_alive "$sa_f"); then
            sa_pids="$sa_pids $sa_pid"
        fi
        rm -f "$sa_f"
    done
    # shellcheck disable=SC2086 # a list of pids
    [ -z "$sa_pids" ] || end_pids $sa_pids
}

# ---------------------------------------------------------------- cluster

# Every node that runs (one killed is left out) says cluster_state:ok with
# all 16384 slots served.
cluster_ok() {
    co_n=0
    for co_port in $(list_of "$1" ports); do
        pid_alive "$1/$co_port/pid" >/dev/null || continue
        co_info=$(cli "$co_port" CLUSTER INFO 2>/dev/null | tr -d '\r')
        case $co_info in
        *cluster_state:ok*cluster_slots_ok:16384*) co_n=$((co_n + 1)) ;;
        *) return 1 ;;
        esac
    done
    [ "$co_n" -gt 0 ]
}

# The options of cluster node $2 under $1.
cluster_node() {
    data_node "$1" "$2" --cluster-enabled yes \
        --cluster-config-file "$1/$2/nodes.conf" \
        --cluster-node-timeout 1000 --cluster-replica-validity-factor 0
}

cluster_start() {
    dir=$1
    base=$2
    [ $((base + 5 + 10000)) -lt 22768 ] ||
        die "cluster: base port $base puts the bus ports in the ephemeral range"
    mkdir -p "$dir"
    ports=""
    for i in 0 1 2 3 4 5; do
        port=$((base + i))
        # A new cluster each time (nothing is persisted): a node that kept
        # the nodes.conf of an earlier start would refuse to join.
        rm -f "$dir/$port/nodes.conf"
        cluster_node "$dir" "$port"
        ports="$ports $port"
    done
    echo "$ports" >"$dir/ports"
    set --
    for port in $ports; do
        set -- "$@" "127.0.0.1:$port"
    done
    if [ -n "$PASSWORD" ]; then
        set -- -a "$PASSWORD" --no-auth-warning "$@"
    fi
    redis-cli --cluster create "$@" --cluster-replicas 1 --cluster-yes \
        >"$dir/create.log" 2>&1 ||
        { cat "$dir/create.log" >&2; die "redis-cli --cluster create failed"; }
    until_true 300 cluster_ok "$dir" ||
        die "the cluster in $dir is not ok after 30 s"
    for port in $(cluster_primaries "$dir"); do
        until_true 300 replica_online "$dir" "$port" ||
            die "the replica of $port is not in sync after 30 s"
    done
}

# The port of the primary that owns the slot of key $2, as a reachable
# node sees the cluster (CLUSTER NODES).
cluster_owner() {
    for co_port in $(list_of "$1" ports); do
        co_slot=$(cli "$co_port" CLUSTER KEYSLOT "$2" 2>/dev/null) || continue
        cli "$co_port" CLUSTER NODES 2>/dev/null | tr -d '\r' |
            awk -v s="$co_slot" '$3 ~ /master/ && $3 !~ /fail/ {
                for (i = 9; i <= NF; i++) {
                    n = split($i, r, "-")
                    if ((n == 1 && r[1] + 0 == s) ||
                        (n == 2 && r[1] + 0 <= s && s <= r[2] + 0)) {
                        split($2, a, "@")
                        sub(/.*:/, "", a[1])
                        print a[1]
                        exit
                    }
                }
            }'
        return 0
    done
    return 1
}

cluster_primaries() {
    for cp_port in $(list_of "$1" ports); do
        if cli "$cp_port" ROLE 2>/dev/null | head -n 1 | grep -qx master; then
            echo "$cp_port"
        fi
    done
}

# ---------------------------------------------------------------- sentinel

# The replica of the master on port $2 is in sync.
replica_online() {
    cli "$2" INFO replication 2>/dev/null | tr -d '\r' |
        grep -q '^slave0:.*state=online'
}

sentinel_ready() {
    for sr_port in $(list_of "$1" sentinels); do
        sr_out=$(redis-cli -h 127.0.0.1 -p "$sr_port" SENTINEL MASTER "$NAME" \
            2>/dev/null | tr -d '\r' | paste -d= - -)
        printf '%s\n' "$sr_out" | grep -qx 'num-slaves=1' || return 1
        printf '%s\n' "$sr_out" | grep -qx 'num-other-sentinels=2' || return 1
    done
}

sentinel_start() {
    dir=$1
    base=$2
    mkdir -p "$dir"
    data_node "$dir" "$base"
    data_node "$dir" $((base + 1)) --replicaof 127.0.0.1 "$base"
    echo "$base $((base + 1))" >"$dir/ports"
    sentinels=""
    for i in 2 3 4; do
        port=$((base + i))
        mkdir -p "$dir/$port"
        {
            echo "port $port"
            echo "bind 127.0.0.1"
            echo "daemonize yes"
            echo "dir $dir/$port"
            echo "pidfile $dir/$port/pid"
            echo "logfile $dir/$port/log"
            echo "sentinel monitor $NAME 127.0.0.1 $base 2"
            echo "sentinel down-after-milliseconds $NAME 1000"
            echo "sentinel failover-timeout $NAME 5000"
            [ -z "$PASSWORD" ] || echo "sentinel auth-pass $NAME $PASSWORD"
        } >"$dir/$port/sentinel.conf"
        port_free "$port"
        redis-server "$dir/$port/sentinel.conf" --sentinel >/dev/null ||
            die "sentinel on $port failed"
        until_true 100 started "$dir/$port" "$port" ||
            die "the sentinel on $port did not answer PING in 10 s" \
                "($(tail -n 1 "$dir/$port/log" 2>/dev/null))"
        sentinels="$sentinels $port"
    done
    echo "$sentinels" >"$dir/sentinels"
    until_true 300 replica_online "$dir" "$base" ||
        die "the replica on $((base + 1)) is not in sync after 30 s"
    until_true 300 sentinel_ready "$dir" ||
        die "the sentinels in $dir do not see the replica and each other after 30 s"
}

sentinel_master() {
    redis-cli -h 127.0.0.1 -p "$(awk '{ print $1 }' "$1/sentinels")" \
        SENTINEL get-master-addr-by-name "$NAME" | tr -d '\r' | paste -d: - -
}

# ---------------------------------------------------------------- faults

# kill_node DIR PORT: SIGKILL to the server on PORT; waits (at most 5 s)
# until it is gone.
kill_node() {
    kn_pid=$(pid_alive "$1/$2/pid") || die "nothing runs on $2 under $1"
    kill -KILL "$kn_pid"
    wait_gone "$kn_pid" 50 || die "the server on $2 (pid $kn_pid) outlived SIGKILL"
}

cluster_kill_primary() {
    cli "$2" ROLE 2>/dev/null | head -n 1 | grep -qx master ||
        die "$2 is not a primary"
    kill_node "$1" "$2"
}

sentinel_kill_master() {
    skm_port=$(sentinel_master "$1" | cut -d: -f2)
    [ -n "$skm_port" ] || die "the sentinels name no master"
    kill_node "$1" "$skm_port"
    echo "$skm_port"
}

# status DIR: every server started under DIR, one line each; returns 1
# when one of them is down.
status() {
    st_all=$(cat "$1/ports" "$1/sentinels" 2>/dev/null || true)
    if [ -z "$st_all" ]; then
        echo "nothing was started under $1"
        return 1
    fi
    st_rc=0
    for st_port in $st_all; do
        if st_pid=$(pid_alive "$1/$st_port/pid"); then
            st_role=$(cli "$st_port" ROLE 2>/dev/null | head -n 1)
            echo "$st_port ${st_role:-unanswered} pid $st_pid"
        else
            echo "$st_port down"
            st_rc=1
        fi
    done
    if [ -f "$1/ports" ] && [ ! -f "$1/sentinels" ]; then
        for st_port in $(list_of "$1" ports); do
            st_state=$(cli "$st_port" CLUSTER INFO 2>/dev/null | tr -d '\r' |
                grep '^cluster_state:') || continue
            echo "$st_state (as $st_port sees it)"
            break
        done
    fi
    return "$st_rc"
}

# ---------------------------------------------------------------- commands

[ $# -ge 3 ] || die "usage: redis-ha.sh cluster|sentinel COMMAND DIR [ARG] (see its header)"
kind=$1
cmd=$2
dir=$3
case $kind:$cmd in
cluster:start | sentinel:start)
    [ $# -ge 4 ] || die "$kind start needs DIR and BASEPORT"
    "${kind}_start" "$dir" "$4"
    ;;
cluster:stop | sentinel:stop)
    [ -d "$dir" ] || exit 0
    stop_all "$dir"
    ;;
cluster:status | sentinel:status) status "$dir" ;;
cluster:wait-ok | cluster:wait) until_true 300 cluster_ok "$dir" ;;
cluster:primary-of | cluster:owner)
    [ $# -ge 4 ] || die "cluster $cmd needs DIR and KEY"
    cluster_owner "$dir" "$4"
    ;;
cluster:primaries) cluster_primaries "$dir" ;;
cluster:kill-primary)
    [ $# -ge 4 ] || die "cluster kill-primary needs DIR and PORT"
    cluster_kill_primary "$dir" "$4"
    ;;
cluster:revive)
    [ $# -ge 4 ] || die "cluster revive needs DIR and PORT"
    cluster_node "$dir" "$4"
    ;;
sentinel:master) sentinel_master "$dir" ;;
sentinel:kill-master) sentinel_kill_master "$dir" ;;
sentinel:revive)
    [ $# -ge 4 ] || die "sentinel revive needs DIR and PORT"
    master=$(sentinel_master "$dir")
    [ -n "$master" ] || die "the sentinels name no master"
    data_node "$dir" "$4" --replicaof "${master%:*}" "${master##*:}"
    ;;
*) die "unknown command: $kind $cmd" ;;
esac
