#!/bin/sh
# TLS to Redis (redis_tls = on) against Debian's redis-server with TLS on,
# certificates made here with openssl: a CA, a server certificate for
# 127.0.0.1 and localhost, a client certificate, and for the failures an
# expired server certificate and a second CA.  Private Redis servers
# listen on TLS ports only (--port 0):
#   R1 (REDIS_PORT + 220)  the good certificate, no client certificate asked
#   R2 (REDIS_PORT + 221)  the expired certificate
#   R3 (REDIS_PORT + 222)  tls-auth-clients yes: a client certificate needed
#   HANG (REDIS_PORT + 223) accepts TCP and never answers the handshake
# Through private pools:
#   1. checks over TLS: 200 then 429; 500 concurrent checks against a limit
#      of 100 allow exactly 100; a Redis restart costs no 503; a stopped
#      Redis (SIGSTOP) fast 503s within the timeouts, then 200 by itself;
#      after SCRIPT FLUSH, NOSCRIPT answered by one EVAL: still 200;
#      connections killed every 10 ms under 300 checks (up to 3 rounds,
#      until one was caught in flight and sent again): none charged twice;
#      ratelimitctl counter show and usage over TLS; mutual TLS with R3;
#      redis_tls_verify = off takes another CA's certificate, with a warning
#   2. each failure -- the wrong CA, a host name mismatch, an expired
#      certificate, no client certificate where one is needed, a handshake
#      never finished -- is a 503 within the connect timeout, with
#      /health/ready saying why, one log line, and -C saying it
#   3. -t refuses TLS with a unix: address, a certificate without its key
#      and a file it cannot read, at their lines; redis_tls_verify = off is
#      a warning
#   4. a Redis Cluster over TLS (tls-cluster, tls-replication; 3 primaries,
#      3 replicas on 12400-12405): exactly 100 of 500 concurrent checks
#      against a limit of 100; the tenant's slot moved to another primary
#      (MOVED followed, the count goes on); then moved on step by step
#      while checks run (IMPORTING/MIGRATING, keys MIGRATEd, slot given):
#      ASK followed with ASKING, then MOVED, exactly 12 of a limit of 12
#      allowed across the move, a loop's checks each charged once; that
#      primary killed, fast 503s and 200 again by itself once its replica
#      is promoted
#   5. Sentinel over TLS (master, replica and three sentinels, all TLS):
#      checks through the master the sentinels name; after SENTINEL
#      FAILOVER, 200 on the new master; sentinels whose certificate is
#      not verified: 503, and /health/ready says so
#   6. with TLS_BENCH_SECONDS set: the CPU a check costs (the workers' and
#      Redis's) over TLS and over plain TCP, in turns (printed)
# shellcheck disable=SC2317 # helpers called through check and retry
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

serve_dir ratelimit-tls
C=$D/certs
mkdir -p "$C"
R1=$((REDIS_PORT + 220))
R2=$((REDIS_PORT + 221))
R3=$((REDIS_PORT + 222))
HANG=$((REDIS_PORT + 223))
P1=$((PORT + 220))
P2=$((PORT + 221))
REDIS_PIDS=

# ---------------------------------------------------------------- certificates

# ca NAME: a self-signed CA, $C/NAME.crt and $C/NAME.key.
ca() {
    openssl req -x509 -new -nodes -newkey ec \
        -pkeyopt ec_paramgen_curve:prime256v1 -keyout "$C/$1.key" \
        -out "$C/$1.crt" -days 2 -subj "/CN=$1" 2>>"$C/openssl.log"
}

# cert NAME CA SAN [START END]: a certificate for SAN signed by CA; with
# START and END (YYYYMMDDHHMMSSZ) valid only then (openssl ca).
cert() {
    openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
        -keyout "$C/$1.key" -out "$C/$1.csr" -subj "/CN=$1" \
        2>>"$C/openssl.log"
    printf 'subjectAltName = %s\n' "$3" >"$C/$1.ext"
    if [ $# -ge 5 ]; then
        : >"$C/index.txt"
        echo 01 >"$C/serial"
        printf '%s\n' '[ca]' 'default_ca = d' '[d]' "database = $C/index.txt" \
            "new_certs_dir = $C" "serial = $C/serial" 'default_md = sha256' \
            'policy = p' '[p]' 'commonName = supplied' >"$C/ca.cnf"
        openssl ca -batch -notext -config "$C/ca.cnf" -cert "$C/$2.crt" \
            -keyfile "$C/$2.key" -in "$C/$1.csr" -out "$C/$1.crt" \
            -startdate "$4" -enddate "$5" -extfile "$C/$1.ext" \
            >>"$C/openssl.log" 2>&1
    else
        openssl x509 -req -in "$C/$1.csr" -CA "$C/$2.crt" \
            -CAkey "$C/$2.key" -CAcreateserial -days 2 \
            -extfile "$C/$1.ext" -out "$C/$1.crt" 2>>"$C/openssl.log"
    fi
}

not_valid() {
    ! openssl x509 -in "$1" -noout -checkend 0 >/dev/null 2>&1
}

ca ca
ca otherca
cert server ca "IP:127.0.0.1, DNS:localhost"
cert client ca "DNS:ratelimit-client"
cert expired ca "IP:127.0.0.1, DNS:localhost" 20200101000000Z 20200102000000Z
chmod 644 "$C"/*
check "openssl made the certificates" test -s "$C/expired.crt" -a \
    -s "$C/client.crt" -a -s "$C/server.crt"
check "the expired certificate has expired" not_valid "$C/expired.crt"

# ---------------------------------------------------------------- servers

# tls_redis PORT CERT AUTH: a redis-server on TLS port PORT only.
tls_redis() {
    redis-server --port 0 --tls-port "$1" --bind 127.0.0.1 \
        --tls-cert-file "$C/$2.crt" --tls-key-file "$C/$2.key" \
        --tls-ca-cert-file "$C/ca.crt" --tls-auth-clients "$3" \
        --save '' --appendonly no --dir "$D" --dbfilename "r$1.rdb" \
        --logfile "$D/redis-$1.log" >/dev/null 2>&1 &
    REDIS_PIDS="$REDIS_PIDS $!"
    PIDS="$PIDS $!"
    eval "REDIS_PID_$1=$!"
}

# tls_cli PORT ARG...: redis-cli over TLS with the client certificate.
tls_cli() {
    tc_port=$1
    shift
    redis-cli -h 127.0.0.1 -p "$tc_port" --tls --cacert "$C/ca.crt" \
        --cert "$C/client.crt" --key "$C/client.key" "$@" 2>/dev/null
}

# up PORT: the Redis on PORT answers PING over TLS (within 5 s).
up() {
    retry 50 sh -c "[ \"\$(redis-cli -h 127.0.0.1 -p $1 --tls \
        --cacert $C/ca.crt --cert $C/client.crt --key $C/client.key \
        ping 2>/dev/null)\" = PONG ]"
}

tls_redis "$R1" server no
tls_redis "$R2" expired no
tls_redis "$R3" server yes
# HANG: a listener that accepts and then says nothing.
python3 -c '
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
held = []
while True:
    held.append(s.accept()[0])
' "$HANG" &
PIDS="$PIDS $!"
check "Redis answers over TLS on $R1" up "$R1"
check "Redis with the expired certificate runs on $R2" \
    retry 50 sh -c "grep -q 'Ready to accept' $D/redis-$R2.log"
check "Redis asking for client certificates answers on $R3" up "$R3"
check "no plain TCP port: redis-cli without TLS gets no PONG" \
    ne "$(redis-cli -h 127.0.0.1 -p "$R1" ping 2>/dev/null)" PONG

# The settings every pool here shares: TLS (2 workers, but 1 where a
# first request's time is measured); and the CA.
TLS="redis_tls=on"
W2="workers=2"
CA="redis_tls_ca_file=$C/ca.crt"

tenant=$(uniq_name tls)
new_tenant "$tenant"
KEY=$(new_key "$tenant")
new_sw_rule "$tenant" /tls/five 5 3600
new_sw_rule "$tenant" /tls/mtls 1000 3600
new_sw_rule "$tenant" /tls/fail 1000 3600

# with_url PORT CMD...: CMD with the batch helpers aimed at 127.0.0.1:PORT.
with_url() {
    wu_saved=$BASE_URL
    BASE_URL=http://127.0.0.1:$1
    shift
    "$@"
    BASE_URL=$wu_saved
}

# ---------------------------------------------------------------- 1. working

# shellcheck disable=SC2086 # TLS is a list of words
private_app tls1 "$P1" redis="127.0.0.1:$R1" $TLS $W2 "$CA"
check "pool over TLS: /health/ready 200" retry 50 ready_on "$P1"
subj=$(uniq_name s)
codes=
i=0
while [ "$i" -lt 6 ]; do
    codes="$codes $(pcheck "$P1" "$KEY" /tls/five "$subj" | cut -d' ' -f1)"
    i=$((i + 1))
done
check "over TLS: 5 checks allowed, the 6th denied ($codes)" \
    eq "$codes" " 200 200 200 200 200 429"
check "the counter is in the TLS Redis" \
    ne "$(tls_cli "$R1" --scan --pattern "rl:{*" | head -n 1)" ""

route=/tls/conc/$(uniq_name r)
new_sw_rule "$tenant" "$route" 100 3600
with_url "$P1" par_checks 500 50 "$KEY" "$(check_body "$route" "$(uniq_name s)")"
check "over TLS: 500 concurrent checks, limit 100: 100 allowed ($(count_status 200))" \
    eq "$(count_status 200)" 100
check "over TLS: 500 concurrent checks, limit 100: 400 denied ($(count_status 429))" \
    eq "$(count_status 429)" 400

# ratelimitctl reaches the counters over TLS with the pool's file.
shown=$("$BUILD/ratelimitctl" -c "$D/tls1.conf" counter show "$tenant" \
    /tls/five --subject "$subj" 2>&1)
check "ratelimitctl counter show over TLS: 5 used ($(echo "$shown" | tr '\n' ' ' | cut -c1-160))" \
    contains "$shown" "cur=5 "
usage=$("$BUILD/ratelimitctl" -c "$D/tls1.conf" usage "$tenant" 2>&1)
rc=$?
check "ratelimitctl usage over TLS answers ($rc: $(echo "$usage" | head -n 3 | tr '\n' ' ' | cut -c1-160))" \
    eq "$rc" 0

# A Redis restart: the workers' TLS connections are closed under them;
# each reconnects (a new handshake) with no 503.
body=$(check_body /tls/restart "$(uniq_name s)")
with_url "$P1" par_checks 8 2 "$DEMO_KEY" "$body"
stop_process "$(eval echo "\$REDIS_PID_$R1")" TERM
tls_redis "$R1" server no
check "Redis restarted over TLS" up "$R1"
with_url "$P1" par_checks 12 2 "$DEMO_KEY" "$body"
check "after a Redis restart over TLS: all 12 answered 200 ($(tr '\n' ' ' <"$T_TMP/statuses"))" \
    eq "$(count_status 200)" 12
# NOSCRIPT over TLS: one EVAL loads the script again.
evals() {
    tls_cli "$R1" INFO commandstats | tr -d '\r' |
        awk -F'[:,=]' '$1 == "cmdstat_eval" { n = $3 } END { print n + 0 }'
}
evals0=$(evals)
tls_cli "$R1" SCRIPT FLUSH >/dev/null
with_url "$P1" par_checks 6 2 "$DEMO_KEY" "$body"
check "after SCRIPT FLUSH over TLS: all 6 answered 200" \
    eq "$(count_status 200)" 6
check "after SCRIPT FLUSH over TLS: NOSCRIPT answered by EVAL (EVAL calls $evals0 -> $(evals); $(grep -c 'script cache was emptied' "$D/tls1.log") log lines)" \
    sh -c "[ $(evals) -gt $evals0 ] && grep -q 'script cache was emptied' \"$D/tls1.log\""
# A Redis that stops answering (SIGSTOP): the command timeout (50 ms)
# bounds SSL_read as it bounds read(), then the handshake of a new
# connection is bounded by the connect timeout: fast 503s; once it runs
# again (SIGCONT), 200 by itself.
p1_200() {
    [ "$(pcheck "$P1" "$KEY" /tls/mtls "$(uniq_name s)" | cut -d' ' -f1)" = 200 ]
}
r1pid=$(eval echo "\$REDIS_PID_$R1")
kill -STOP "$r1pid"
codes=
slow=0
i=0
while [ "$i" -lt 5 ]; do
    t0=$(now_ms)
    codes="$codes $(pcheck "$P1" "$KEY" /tls/mtls "$(uniq_name s)" | cut -d' ' -f1)"
    [ "$(($(now_ms) - t0))" -lt 500 ] || slow=$((slow + 1))
    i=$((i + 1))
done
check "Redis stopped (SIGSTOP) under TLS: 503s ($codes), none slower than 500 ms ($slow)" \
    eq "$codes $slow" " 503 503 503 503 503 0"
ready_on "$P1" 503
check "Redis stopped under TLS: /health/ready says it timed out ($(cat "$T_TMP/ready"))" \
    contains "$(cat "$T_TMP/ready")" "timed out"
kill -CONT "$r1pid"
check "Redis running again (SIGCONT): 200 by itself" retry 50 p1_200
# Lost replies over TLS: while every client connection is killed every
# 10 ms, 300 concurrent checks on one counter (a limit they cannot reach):
# a check whose connection died with its call in flight is sent again and
# replayed, never charged twice, so the counter is at least the 200s and
# at most the 200s and the 503s (a 503 may have been charged).  Up to 3
# rounds (a counter each), until a call was caught in flight and sent
# again: how many the kills catch depends on the machine's pace.
lost_round() {
    lr_route=/tls/lost/$(uniq_name r)
    lr_subj=$(uniq_name s)
    new_sw_rule "$tenant" "$lr_route" 100000 3600
    (
        end=$(($(now_ms) + 8000))
        while [ "$(now_ms)" -lt "$end" ]; do
            tls_cli "$R1" CLIENT KILL TYPE normal >/dev/null
            sleep 0.01
        done
    ) &
    lr_killer=$!
    with_url "$P1" par_checks 300 20 "$KEY" \
        "$(check_body "$lr_route" "$lr_subj")"
    kill "$lr_killer" 2>/dev/null
    wait "$lr_killer" 2>/dev/null
    lr_ok=$(count_status 200)
    lr_failed=$(count_status 503)
    lr_cur=$("$BUILD/ratelimitctl" -c "$D/tls1.conf" counter show \
        "$tenant" "$lr_route" --subject "$lr_subj" 2>&1 |
        grep -o 'cur=[0-9]*' | cut -d= -f2)
    lost_rounds="$lost_rounds $lr_ok/${lr_cur:-?}/$((lr_ok + lr_failed))"
    [ $((lr_ok + lr_failed)) = 300 ] || lost_unanswered=$((lost_unanswered + 1))
    if ! [ "${lr_cur:-x}" -ge "$lr_ok" ] 2>/dev/null ||
        ! [ "$lr_cur" -le $((lr_ok + lr_failed)) ]; then
        lost_twice=$((lost_twice + 1))
    fi
}
lost_rounds=
lost_unanswered=0
lost_twice=0
resent=0
round=0
while [ "$round" -lt 3 ] && [ "$resent" = 0 ]; do
    lost_round
    resent=$(grep -c "closed with a check in flight" "$D/tls1.log")
    round=$((round + 1))
done
check "lost replies over TLS: every check answered 200 or 503 in each round ($lost_unanswered rounds not)" \
    eq "$lost_unanswered" 0
check "lost replies over TLS: checks caught in flight and sent again ($resent in $round rounds)" \
    ge "$resent" 1
check "lost replies over TLS: none charged twice (200s <= counter <= 200s and 503s:$lost_rounds)" \
    eq "$lost_twice" 0
stop_private

# Mutual TLS: R3 wants a client certificate; with one, it works.
# shellcheck disable=SC2086
private_app tls3 "$P1" redis="127.0.0.1:$R3" $TLS $W2 "$CA" \
    redis_tls_cert_file="$C/client.crt" redis_tls_key_file="$C/client.key"
check "mutual TLS: /health/ready 200" retry 50 ready_on "$P1"
check "mutual TLS: a check answers 200" \
    eq "$(pcheck "$P1" "$KEY" /tls/mtls "$(uniq_name s)" | cut -d' ' -f1)" 200
stop_private

# Verification off: a certificate from another CA is taken, and the start
# warns about it.
# shellcheck disable=SC2086
private_app tlsv "$P1" redis="127.0.0.1:$R1" $TLS $W2 \
    redis_tls_ca_file="$C/otherca.crt" redis_tls_verify=off
check "redis_tls_verify = off: a check answers 200 (another CA)" \
    retry 50 p1_200
check "redis_tls_verify = off: the start warns" \
    grep -q "warn: .*redis_tls_verify = off" "$D/tlsv.log"
stop_private

# ---------------------------------------------------------------- 2. failures

# failure NAME REASON KEY=VALUE...: a pool with the KEY=VALUEs; a check
# answers 503 within the connect timeout (200 ms here) plus the request's
# own cost, /health/ready says REASON, each worker logs it once, and
# ratelimit-fcgi -C says it.
failure() {
    f_name=$1
    f_reason=$2
    shift 2
    # shellcheck disable=SC2086
    private_app "f$f_name" "$P2" $TLS workers=1 \
        redis_connect_timeout_ms=200 redis_backoff_ms=1000 "$@"
    # The key and the tenant's rules looked up first (a route without a
    # rule: no Redis call), so that the time below is Redis's.
    pcheck "$P2" "$KEY" /tls/norule x >/dev/null
    f_t0=$(now_ms)
    f_st=$(pcheck "$P2" "$KEY" /tls/fail "$(uniq_name s)" | cut -d' ' -f1)
    f_ms=$(($(now_ms) - f_t0))
    check "$f_name: a check answers 503 ($f_st)" eq "$f_st" 503
    check "$f_name: within the connect timeout of 200 ms ($f_ms ms, curl and lighttpd included; < 700)" \
        lt_num "$f_ms" 700
    ready_on "$P2" 503
    check "$f_name: /health/ready says \"$f_reason\" ($(cat "$T_TMP/ready"))" \
        contains "$(cat "$T_TMP/ready")" "$f_reason"
    # A few more checks: the back-off answers them at once, no new line.
    f_t0=$(now_ms)
    with_url "$P2" par_checks 10 2 "$KEY" "$(check_body /tls/fail x)"
    f_ms=$(($(now_ms) - f_t0))
    check "$f_name: 10 more checks, all 503 ($(count_status 503)), in $f_ms ms" \
        eq "$(count_status 503)" 10
    f_lines=$(grep -c "TLS: $f_reason" "$D/f$f_name.log")
    check "$f_name: one log line ($f_lines)" eq "$f_lines" 1
    grep -m 1 "TLS: " "$D/f$f_name.log" | sed 's/^/    log: /'
    "$BUILD/ratelimit-fcgi" -C -c "$D/f$f_name.conf" >"$T_TMP/selftest" 2>&1
    f_rc=$?
    check "$f_name: -C fails ($f_rc) naming the reason ($(grep redis "$T_TMP/selftest" | head -n 1))" \
        sh -c "[ $f_rc != 0 ] && grep -q \"$f_reason\" \"$T_TMP/selftest\""
    stop_private
}

failure wrong_ca "certificate verify failed (self-signed certificate in certificate chain)" \
    redis="127.0.0.1:$R1" redis_tls_ca_file="$C/otherca.crt"
failure hostname "certificate verify failed (hostname mismatch)" \
    redis="127.0.0.1:$R1" "$CA" redis_tls_server_name=redis.example.net
failure expired "certificate verify failed (certificate has expired)" \
    redis="127.0.0.1:$R2" "$CA"
failure no_client_cert "the server wants a client certificate" \
    redis="127.0.0.1:$R3" "$CA"
failure handshake_hangs "handshake timed out" redis="127.0.0.1:$HANG" "$CA"

# ---------------------------------------------------------------- 3. -t

cp "$C/client.key" "$D/secret.key"
chmod 000 "$D/secret.key"
printf '%s\n' 'redis_tls = on' 'redis = unix:/run/redis/redis.sock' \
    "redis_tls_cert_file = $C/client.crt" \
    "redis_tls_ca_file = $D/no-such-ca.pem" >"$D/bad.conf"
out=$("$BUILD/ratelimit-fcgi" -t -c "$D/bad.conf" 2>&1)
rc=$?
check "-t refuses the TLS misconfigurations ($rc)" eq "$rc" 1
check "-t: TLS with a unix: address, at line 2" \
    contains "$out" "bad.conf:2: redis: \"unix:/run/redis/redis.sock\": redis_tls = on (line 1) needs TCP addresses"
check "-t: a certificate without its key, at line 3" \
    contains "$out" "bad.conf:3: redis_tls_cert_file needs redis_tls_key_file"
check "-t: a CA file that does not exist, at line 4" \
    contains "$out" "bad.conf:4: redis_tls_ca_file: $D/no-such-ca.pem: No such file or directory"
if [ "$(id -u)" != 0 ]; then
    printf '%s\n' 'redis_tls = on' "redis_tls_cert_file = $C/client.crt" \
        "redis_tls_key_file = $D/secret.key" >"$D/bad2.conf"
    out=$("$BUILD/ratelimit-fcgi" -t -c "$D/bad2.conf" 2>&1)
    check "-t: a key file it cannot read, at line 3" \
        contains "$out" "bad2.conf:3: redis_tls_key_file: $D/secret.key: Permission denied"
fi
printf '%s\n' 'redis_tls_ca_file = /etc/ssl/certs/ca-certificates.crt' \
    >"$D/bad3.conf"
out=$("$BUILD/ratelimit-fcgi" -t -c "$D/bad3.conf" 2>&1)
check "-t: a TLS file with TLS off, at line 1" \
    contains "$out" "bad3.conf:1: redis_tls_ca_file applies only with redis_tls = on"
printf '%s\n' 'redis_tls = on' 'redis_tls_verify = off' >"$D/warn.conf"
out=$("$BUILD/ratelimit-fcgi" -t -c "$D/warn.conf" 2>&1)
rc=$?
check "-t: redis_tls_verify = off passes ($rc) with a warning" \
    sh -c "[ $rc = 0 ] && echo \"\$1\" | grep -q 'warning: .*redis_tls_verify = off'" \
    - "$out"

stop_process "$(eval echo "\$REDIS_PID_$R1")" TERM

# ---------------------------------------------------------------- 4. cluster

# A Redis Cluster on TLS only (tls-cluster, tls-replication): 3 primaries
# and 3 replicas on CB..CB+5 (their bus ports, +10000, stay below 22768).
CB=${TLS_CLUSTER_PORT:-12400}
TID=$(psql_q "SELECT id FROM tenants WHERE name = '$tenant'")
i=0
cluster_nodes=
while [ "$i" -lt 6 ]; do
    port=$((CB + i))
    redis-server --port 0 --tls-port "$port" --bind 127.0.0.1 \
        --tls-cluster yes --tls-replication yes \
        --tls-cert-file "$C/server.crt" --tls-key-file "$C/server.key" \
        --tls-ca-cert-file "$C/ca.crt" --tls-auth-clients no \
        --cluster-enabled yes --cluster-config-file "$D/nodes-$port.conf" \
        --cluster-node-timeout 1000 --cluster-replica-validity-factor 0 \
        --save '' --appendonly no --dir "$D" --dbfilename "c$port.rdb" \
        --logfile "$D/cluster-$port.log" >/dev/null 2>&1 &
    PIDS="$PIDS $!"
    eval "REDIS_PID_$port=$!"
    cluster_nodes="$cluster_nodes 127.0.0.1:$port"
    i=$((i + 1))
done
i=0
while [ "$i" -lt 6 ]; do
    up $((CB + i)) || echo "    cluster node $((CB + i)) does not answer"
    i=$((i + 1))
done
# shellcheck disable=SC2086 # a list of addresses
redis-cli --tls --cacert "$C/ca.crt" --cluster create $cluster_nodes \
    --cluster-replicas 1 --cluster-yes >"$D/cluster-create.log" 2>&1
cluster_ok() {
    for co_port in $(seq "$CB" $((CB + 5))); do
        tls_cli "$co_port" CLUSTER INFO | grep -q cluster_state:ok || return 1
    done
}
check "a Redis Cluster over TLS forms (6 nodes)" retry 100 cluster_ok

# owner SLOT: the port of the primary serving SLOT, as node CB sees it.
owner() {
    tls_cli "$CB" CLUSTER NODES | awk -v s="$1" '
        $3 ~ /master/ && $3 !~ /fail/ {
            for (i = 9; i <= NF; i++) {
                n = split($i, r, "-")
                if (n == 1) r[2] = r[1]
                if (s + 0 >= r[1] + 0 && s + 0 <= r[2] + 0) {
                    split($2, a, "[:@]")
                    print a[2]
                }
            }
        }'
}

# shellcheck disable=SC2086
private_app tlsc "$P1" redis_type=cluster \
    redis="127.0.0.1:$CB,127.0.0.1:$((CB + 1)),127.0.0.1:$((CB + 2))" \
    $TLS $W2 "$CA"
check "cluster over TLS: /health/ready 200" retry 50 ready_on "$P1"
route=/tls/cconc/$(uniq_name r)
new_sw_rule "$tenant" "$route" 100 3600
with_url "$P1" par_checks 500 50 "$KEY" "$(check_body "$route" "$(uniq_name s)")"
check "cluster over TLS: 500 concurrent checks, limit 100: 100 allowed ($(count_status 200))" \
    eq "$(count_status 200)" 100
check "cluster over TLS: and 400 denied ($(count_status 429))" \
    eq "$(count_status 429)" 400
slot=$(tls_cli "$CB" CLUSTER KEYSLOT "{$TID}")
primary=$(owner "$slot")
check "the tenant's slot $slot has a primary ($primary)" is_int "$primary"
check "its counters are on that primary" \
    ne "$(tls_cli "$primary" --scan --pattern "rl:{$TID}:*" | head -n 1)" ""

# The IMPORTING/MIGRATING dance of a resharding, over TLS (MIGRATE too):
# start_move SLOT FROM TO: TO importing SLOT from FROM, FROM migrating it.
start_move() {
    sm_from=$(tls_cli "$2" CLUSTER MYID)
    sm_to=$(tls_cli "$3" CLUSTER MYID)
    tls_cli "$3" CLUSTER SETSLOT "$1" IMPORTING "$sm_from" >/dev/null
    tls_cli "$2" CLUSTER SETSLOT "$1" MIGRATING "$sm_to" >/dev/null
}
# migrate_keys SLOT FROM TO: SLOT's keys MIGRATEd from FROM to TO, 100 at
# a time (at most 20 rounds); prints how many.
migrate_keys() {
    mk_n=0
    mk_round=0
    while [ "$mk_round" -lt 20 ]; do
        mk_keys=$(tls_cli "$2" CLUSTER GETKEYSINSLOT "$1" 100 | tr '\n' ' ')
        [ -n "${mk_keys% }" ] || break
        # shellcheck disable=SC2086 # the keys, one word each
        tls_cli "$2" MIGRATE 127.0.0.1 "$3" "" 0 5000 KEYS $mk_keys \
            >/dev/null
        mk_n=$((mk_n + $(echo "$mk_keys" | wc -w)))
        mk_round=$((mk_round + 1))
    done
    echo "$mk_n"
}
# end_move SLOT FROM TO: SLOT given to TO on every node, TO first, then
# FROM, then the others, as a resharding does (the other way round FROM
# would send MOVED to a TO that still sends it back).
end_move() {
    em_to=$(tls_cli "$3" CLUSTER MYID)
    for em_port in "$3" "$2" $(seq "$CB" $((CB + 5))); do
        tls_cli "$em_port" CLUSTER SETSLOT "$1" NODE "$em_to" >/dev/null
    done
}
# another_primary PORT: a primary other than PORT.
another_primary() {
    tls_cli "$CB" CLUSTER NODES | awk -v p="$1" '
        $3 ~ /master/ && $3 !~ /fail/ { split($2, a, "[:@]")
            if (a[2] != p) { print a[2]; exit } }'
}

# MOVED over TLS: the tenant's slot moved to another primary (MIGRATE of
# its keys between the nodes, over TLS too) after 3 checks of a subject
# with a limit of 5: the next 2 are allowed, the 3rd denied, on the new
# primary, and the redirections are counted.
subj=$(uniq_name s)
codes=
for i in 1 2 3; do
    codes="$codes $(pcheck "$P1" "$KEY" /tls/five "$subj" | cut -d' ' -f1)"
done
dst=$(another_primary "$primary")
start_move "$slot" "$primary" "$dst"
moved=$(migrate_keys "$slot" "$primary" "$dst")
end_move "$slot" "$primary" "$dst"
for i in 4 5 6; do
    codes="$codes $(pcheck "$P1" "$KEY" /tls/five "$subj" | cut -d' ' -f1)"
done
check "MOVED over TLS: the slot moved ($primary -> $dst: $moved keys), the count goes on ($codes)" \
    eq "$codes" " 200 200 200 200 200 429"
redirects=$(curl -s -m 5 "http://127.0.0.1:$P1/metrics" |
    awk '$1 == "ratelimit_redis_redirects_total" { print $2 }')
check "MOVED over TLS: redirections counted (${redirects:-none})" \
    ge "${redirects:-0}" 1
primary=$(owner "$slot")
check "the slot's primary is now $dst ($primary)" eq "$primary" "$dst"

# ASK over TLS: the slot moved on to another primary step by step, while
# checks run.  Subject A has a token bucket of 12 (refilling 0.001 a
# second: not one token in the test): 4 checks before; 2 with the slot
# migrating and its keys still on the source, the workers' reply slots
# gone (as 3 s after a worker's last check: the source has some of a
# call's keys, not all); 3 with the keys moved and the slot still
# migrating (the source answers ASK; the service sends ASKING and the
# call to the target); 5 after the slot is given to the target (the
# source answers MOVED).  Exactly 12 allowed, each one token less than
# the last, then 429.  Meanwhile, from before the keys move until after
# the slot is given, a loop of checks of subject B (a bucket it cannot
# empty): every one 200, each one token less than the one before (each
# charged once, on one counter).  Then the service goes to the target
# straight: no more redirections, no ASKING.
asking_calls() {
    tls_cli "$1" INFO commandstats | tr -d '\r' |
        awk -F'[:,=]' '$1 == "cmdstat_asking" { n = $3 } END { print n + 0 }'
}
# src_errors KIND: how many KIND errors (MOVED, ASK) $src answered.
src_errors() {
    tls_cli "$src" INFO errorstats | tr -d '\r' |
        awk -F'[:=]' -v k="errorstat_$1" '$1 == k { n = $3 } END { print n + 0 }'
}
redirects_now() {
    curl -s -m 5 "http://127.0.0.1:$P1/metrics" |
        awk '$1 == "ratelimit_redis_redirects_total" { n = $2 }
            END { print n + 0 }'
}
# ask_loop ROUTE SUBJECT: checks one after another, every 20 ms, until
# $D/askloop.stop exists (at most 15 s); "status remaining" lines.
ask_loop() {
    T_TMP=$T_TMP/askloop
    mkdir -p "$T_TMP"
    al_end=$(($(now_ms) + 15000))
    while [ ! -e "$D/askloop.stop" ] && [ "$(now_ms)" -lt "$al_end" ]; do
        pcheck "$P1" "$KEY" "$1" "$2"
        sleep 0.02
    done
}
# a_checks N: N checks of subject A; their "status remaining" appended
# to $T_TMP/ask-a, and the statuses to a_codes.
a_checks() {
    ac_i=0
    while [ "$ac_i" -lt "$1" ]; do
        ac_out=$(pcheck "$P1" "$KEY" "$a_route" "$a_subj")
        echo "$ac_out" >>"$T_TMP/ask-a"
        a_codes="$a_codes ${ac_out%% *}"
        ac_i=$((ac_i + 1))
    done
}
a_route=/tls/ask/$(uniq_name r)
b_route=/tls/askloop/$(uniq_name r)
a_subj=$(uniq_name a)
b_subj=$(uniq_name b)
new_tb_rule "$tenant" "$a_route" 12 0.001
new_tb_rule "$tenant" "$b_route" 100000 0.001
src=$primary
dst=$(another_primary "$src")
: >"$T_TMP/ask-a"
a_codes=
a_checks 4
start_move "$slot" "$src" "$dst"
for k in $(tls_cli "$src" --scan --pattern "rl:{$TID}:req:*"); do
    tls_cli "$src" DEL "$k" >/dev/null
done
a_checks 2
echo "    slot migrating, keys on $src: it answered ASK $(src_errors ASK), TRYAGAIN $(src_errors TRYAGAIN) times"
check "slot migrating, keys on $src: 6 checks allowed ($a_codes)" \
    eq "$a_codes" " 200 200 200 200 200 200"
rm -f "$D/askloop.stop"
ask_loop "$b_route" "$b_subj" >"$D/askloop.out" &
loop=$!
sleep 0.3
moved=$(migrate_keys "$slot" "$src" "$dst")
asked0=$(asking_calls "$dst")
a_checks 3
asked1=$(asking_calls "$dst")
check "ASK over TLS: keys moved ($moved), slot migrating: 3 more checks allowed ($a_codes)" \
    eq "$a_codes" " 200 200 200 200 200 200 200 200 200"
check "ASK over TLS: the service sent ASKING to $dst for each (${asked0} -> ${asked1})" \
    ge $((asked1 - asked0)) 3
m0=$(src_errors MOVED)
end_move "$slot" "$src" "$dst"
a_checks 5
sleep 0.3
touch "$D/askloop.stop"
wait "$loop"
m1=$(src_errors MOVED)
check "ASK over TLS: $src answered ASK ($(src_errors ASK) in all)" \
    ge "$(src_errors ASK)" 3
check "MOVED over TLS once the slot is given: $src answered MOVED ($m0 -> $m1)" \
    ge $((m1 - m0)) 1
check "after the slot is given to $dst: exactly 12 of 14 allowed, then denied ($a_codes)" \
    eq "$a_codes" " 200 200 200 200 200 200 200 200 200 200 200 200 429 429"
check "subject A: each allowed check one token less than the last, 11 to 0 ($(awk '$1 == 200 { printf "%s ", $2 }' "$T_TMP/ask-a"))" \
    eq "$(awk '$1 == 200 { printf "%s ", $2 }' "$T_TMP/ask-a")" \
    "11 10 9 8 7 6 5 4 3 2 1 0 "
b_n=$(wc -l <"$D/askloop.out")
b_odd=$(awk '$1 != 200' "$D/askloop.out" | wc -l)
b_gaps=$(awk 'NR > 1 && $2 != last - 1 { n++ } { last = $2 }
    END { print n + 0 }' "$D/askloop.out")
b_last=$(tail -n 1 "$D/askloop.out" | cut -d' ' -f2)
check "the loop through the move: $b_n checks, all 200 ($b_odd others)" \
    sh -c "[ $b_n -ge 10 ] && [ $b_odd = 0 ]"
check "the loop: each charged once, on one counter (remaining down by 1 each time: $b_gaps gaps; last ${b_last:-?} = 100000 - $b_n)" \
    eq "$b_gaps ${b_last:-x}" "0 $((100000 - b_n))"
# Both workers have had a check since (4 at a time), then the baseline.
with_url "$P1" par_checks 8 4 "$KEY" "$(check_body "$b_route" "$(uniq_name w)")"
check "after the move: 8 checks 4 at a time, all 200 ($(count_status 200))" \
    eq "$(count_status 200)" 8
red0=$(redirects_now)
asked2=$(asking_calls "$dst")
a_codes=
: >"$T_TMP/ask-a"
b_subj=$(uniq_name b)
i=0
while [ "$i" -lt 10 ]; do
    a_codes="$a_codes $(pcheck "$P1" "$KEY" "$b_route" "$b_subj" | cut -d' ' -f1)"
    i=$((i + 1))
done
red1=$(redirects_now)
asked3=$(asking_calls "$dst")
check "then straight to $dst: 10 checks allowed ($a_codes), no redirection ($red0 -> $red1), no ASKING ($asked2 -> $asked3)" \
    eq "$a_codes $red1 $asked3" \
    " 200 200 200 200 200 200 200 200 200 200 $red0 $asked2"
primary=$(owner "$slot")
check "the slot's primary is now $dst ($primary)" eq "$primary" "$dst"

# Failover: the tenant's primary killed; fast 503s, then 200 by itself.
kill -KILL "$(eval echo "\$REDIS_PID_$primary")"
t0=$(now_ms)
codes=
slow=0
back=
while [ "$(($(now_ms) - t0))" -lt 15000 ]; do
    c0=$(now_ms)
    st=$(pcheck "$P1" "$KEY" /tls/five "$(uniq_name s)" | cut -d' ' -f1)
    [ "$(($(now_ms) - c0))" -lt 1000 ] || slow=$((slow + 1))
    codes="$codes $st"
    if [ "$st" = 200 ]; then
        back=$(($(now_ms) - t0))
        break
    fi
    sleep 0.05
done
odd=$(echo "$codes" | tr ' ' '\n' | grep -cvx '200\|503\|')
check "cluster over TLS: the primary killed, 200 again by itself (after ${back:-never} ms)" \
    is_int "$back"
check "cluster over TLS: meanwhile only 503s ($odd others), none slower than 1 s ($slow)" \
    eq "$odd $slow" "0 0"
echo "    cluster over TLS failover: $(echo "$codes" | wc -w) checks, 200 again after ${back:-?} ms"
stop_private

# ---------------------------------------------------------------- 5. sentinel

# A master (S0), its replica (S0 + 1) and three sentinels (S0 + 2..4),
# all on TLS ports only; the sentinels reach the data nodes over TLS.
S0=$((REDIS_PORT + 224))
tls_redis "$S0" server no
redis-server --port 0 --tls-port $((S0 + 1)) --bind 127.0.0.1 \
    --tls-replication yes --replicaof 127.0.0.1 "$S0" \
    --tls-cert-file "$C/server.crt" --tls-key-file "$C/server.key" \
    --tls-ca-cert-file "$C/ca.crt" --tls-auth-clients no \
    --save '' --appendonly no --dir "$D" --dbfilename "r$((S0 + 1)).rdb" \
    --logfile "$D/redis-$((S0 + 1)).log" >/dev/null 2>&1 &
PIDS="$PIDS $!"
for port in $((S0 + 2)) $((S0 + 3)) $((S0 + 4)); do
    printf '%s\n' "port 0" "tls-port $port" "bind 127.0.0.1" \
        "tls-cert-file $C/server.crt" "tls-key-file $C/server.key" \
        "tls-ca-cert-file $C/ca.crt" "tls-auth-clients no" \
        "tls-replication yes" "dir $D" "logfile $D/sentinel-$port.log" \
        "sentinel monitor tlsmaster 127.0.0.1 $S0 2" \
        "sentinel down-after-milliseconds tlsmaster 1000" \
        "sentinel failover-timeout tlsmaster 5000" >"$D/sentinel-$port.conf"
    redis-server "$D/sentinel-$port.conf" --sentinel >/dev/null 2>&1 &
    PIDS="$PIDS $!"
done
sentinel_master() {
    tls_cli $((S0 + 2)) SENTINEL get-master-addr-by-name tlsmaster |
        tail -n 1
}
replica_synced() {
    tls_cli $((S0 + 1)) INFO replication | grep -q master_link_status:up
}
# master_field NAME: a field of SENTINEL MASTER tlsmaster.
master_field() {
    tls_cli $((S0 + 2)) SENTINEL master tlsmaster | tr -d '\r' |
        awk -v f="$1" 'p { print; exit } $0 == f { p = 1 }'
}
sentinels_know() {
    [ "$(master_field num-other-sentinels) $(master_field num-slaves)" = \
        "2 1" ]
}
check "sentinel set-up over TLS: the replica syncs" retry 100 replica_synced
check "sentinel set-up over TLS: the sentinels know each other and the replica" \
    retry 150 sentinels_know
check "the sentinels name the master ($(sentinel_master))" \
    eq "$(sentinel_master)" "$S0"

# shellcheck disable=SC2086
private_app tlss "$P1" redis_type=sentinel redis_sentinel_master=tlsmaster \
    redis="127.0.0.1:$((S0 + 2)),127.0.0.1:$((S0 + 3)),127.0.0.1:$((S0 + 4))" \
    $TLS $W2 "$CA"
check "sentinel over TLS: /health/ready 200" retry 50 ready_on "$P1"
check "sentinel over TLS: a check answers 200" \
    eq "$(pcheck "$P1" "$KEY" /tls/five "$(uniq_name s)" | cut -d' ' -f1)" 200
tls_cli $((S0 + 2)) SENTINEL FAILOVER tlsmaster >"$T_TMP/failover.out"
t0=$(now_ms)
moved=
while [ "$(($(now_ms) - t0))" -lt 15000 ]; do
    if [ "$(sentinel_master)" = $((S0 + 1)) ]; then
        moved=$(($(now_ms) - t0))
        break
    fi
    sleep 0.1
done
check "SENTINEL FAILOVER over TLS: the replica is named master (${moved:-never} ms; $(tr -d '\r\n' <"$T_TMP/failover.out"))" \
    is_int "$moved"
codes=
i=0
while [ "$i" -lt 20 ]; do
    codes="$codes $(pcheck "$P1" "$KEY" /tls/five "$(uniq_name s)" | cut -d' ' -f1)"
    i=$((i + 1))
    sleep 0.05
done
check "after the failover over TLS: only 200 and 503 ($codes)" \
    eq "$(echo "$codes" | tr ' ' '\n' | grep -cvx '200\|503\|')" 0
check "after the failover over TLS: the last 10 answered 200 on the new master" \
    eq "$(echo "$codes" | tr ' ' '\n' | tail -n 10 | grep -cx 200)" 10
check "the new master holds counters" \
    ne "$(tls_cli $((S0 + 1)) --scan --pattern 'rl:{*' | head -n 1)" ""
stop_private
# The sentinels' certificate not verified: not ready, and why.
# shellcheck disable=SC2086
private_app tlss2 "$P1" redis_type=sentinel redis_sentinel_master=tlsmaster \
    redis="127.0.0.1:$((S0 + 2)),127.0.0.1:$((S0 + 3)),127.0.0.1:$((S0 + 4))" \
    $TLS workers=1 redis_tls_ca_file="$C/otherca.crt"
check "sentinels under another CA: a check answers 503" \
    eq "$(pcheck "$P1" "$KEY" /tls/five "$(uniq_name s)" | cut -d' ' -f1)" 503
ready_on "$P1" 503
check "sentinels under another CA: /health/ready says why ($(cat "$T_TMP/ready"))" \
    contains "$(cat "$T_TMP/ready")" "redis sentinel tls: certificate verify failed"
stop_private

# ---------------------------------------------------------------- 6. cost

# With TLS_BENCH_SECONDS set (not by default): what TLS costs per check,
# against plain TCP, on one Redis that listens on both (R4, R4 + 1): wrk
# (8 connections) through a pool of 2 workers on each in turn, for
# TLS_BENCH_ROUNDS rounds [3]; the workers' CPU (utime + stime) and
# Redis's (INFO cpu) divided by the checks answered.  It prints; it
# asserts only that every check answered 200.
if [ -n "${TLS_BENCH_SECONDS:-}" ] && command -v wrk >/dev/null; then
    R4=$((REDIS_PORT + 230))
    redis-server --port "$R4" --tls-port $((R4 + 1)) --bind 127.0.0.1 \
        --tls-cert-file "$C/server.crt" --tls-key-file "$C/server.key" \
        --tls-ca-cert-file "$C/ca.crt" --tls-auth-clients no \
        --save '' --appendonly no --dir "$D" --dbfilename r4.rdb \
        --logfile "$D/redis-bench.log" >/dev/null 2>&1 &
    PIDS="$PIDS $!"
    retry 50 sh -c "redis-cli -p $R4 ping 2>/dev/null | grep -q PONG"
    new_sw_rule "$tenant" /tls/bench 1000000000 3600
    printf '%s\n' 'wrk.method = "POST"' \
        "wrk.headers[\"X-API-Key\"] = \"$KEY\"" \
        'wrk.headers["Content-Type"] = "application/json"' \
        "wrk.body = '{\"route\":\"/tls/bench\",\"subject\":\"b\"}'" \
        >"$D/bench.lua"
    # ticks PID: CPU clock ticks of PID's children (the workers).
    ticks() {
        tk_sum=0
        for tk_pid in $(pgrep -P "$1"); do
            tk_sum=$((tk_sum + $(cut -d')' -f2 "/proc/$tk_pid/stat" |
                awk '{ print $12 + $13 }')))
        done
        echo "$tk_sum"
    }
    redis_cpu() {
        redis-cli -p "$R4" INFO cpu | tr -d '\r' |
            awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f", s }'
    }
    hz=$(getconf CLK_TCK)
    : >"$D/bench.out"
    r=1
    while [ "$r" -le "${TLS_BENCH_ROUNDS:-3}" ]; do
        for mode in plain tls; do
            if [ "$mode" = plain ]; then
                private_app "b$mode$r" "$P1" redis="127.0.0.1:$R4" $W2 \
                    max_requests=0
            else
                # shellcheck disable=SC2086
                private_app "b$mode$r" "$P1" redis="127.0.0.1:$((R4 + 1))" \
                    $TLS $W2 "$CA" max_requests=0
            fi
            wrk -t 2 -c 8 -d 2s -s "$D/bench.lua" \
                "http://127.0.0.1:$P1/v1/check" >/dev/null 2>&1
            a0=$(ticks "$APP_PID")
            c0=$(redis_cpu)
            wrk -t 2 -c 8 -d "${TLS_BENCH_SECONDS}s" -s "$D/bench.lua" \
                "http://127.0.0.1:$P1/v1/check" >"$D/bench-$mode$r.wrk" 2>&1
            a1=$(ticks "$APP_PID")
            c1=$(redis_cpu)
            stop_private
            n=$(awk '/requests in/ { print $1 }' "$D/bench-$mode$r.wrk")
            bad=$(awk '/Non-2xx/ { print $NF }' "$D/bench-$mode$r.wrk")
            awk -v m="$mode" -v r="$r" -v n="${n:-0}" -v a=$((a1 - a0)) \
                -v hz="$hz" -v c0="$c0" -v c1="$c1" -v bad="${bad:-0}" \
                'BEGIN { if (n == 0) n = 1
                    app = a / hz * 1e6 / n; red = (c1 - c0) * 1e6 / n
                    printf "%s %d %d %.1f %.1f %.1f %d\n", m, r, n, app, red,
                        app + red, bad }' >>"$D/bench.out"
        done
        r=$((r + 1))
    done
    echo "    TLS vs plain, CPU per check (us): mode round checks app redis total non-2xx"
    sed 's/^/    /' "$D/bench.out"
    awk '$1 == "plain" { p[$2] = $6 } $1 == "tls" { t[$2] = $6 }
        END { for (r in p) printf "    round %s: TLS adds %.0f%%\n", r,
            (t[r] / p[r] - 1) * 100 }' "$D/bench.out" | sort
    check "cost runs: every check answered 200" \
        eq "$(awk '{ s += $7 } END { print s + 0 }' "$D/bench.out")" 0
fi

finish
