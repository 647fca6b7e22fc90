#!/bin/sh
# Leases against the real stack (lighttpd, the service, Redis,
# PostgreSQL): concurrency limits and costs settled after the response.
#
# - The API: a check on a rule with a concurrency limit answers a lease
#   (body and X-RateLimit-Lease); at the max the next check is 429; a
#   release (POST /v1/release) frees the slot at once; releasing twice,
#   an unknown lease, another tenant's lease, a bad body: 409, 404, 404,
#   400, and nothing changed; an extension moves the expiry.
# - Exactness: 500 concurrent acquisitions against max 50 hold exactly
#   50; 10,000 acquire/release cycles from 64 clients never hold more than
#   the max (sampled all along) and end at 0 held.
# - Expiry: a lease of 1 s that nobody releases frees its slot at 1 s.
# - A worker killed (SIGKILL) right after answering a check: the lease
#   stays held, a release through another worker frees it.
# - Lost replies: while every Redis client connection is killed every
#   10 ms, 200 concurrent acquisitions take one slot each at most: every
#   lease answered is held once, and no more slots are held than checks
#   answered 200 or 503.
# - A token budget settled: reserve 1,000 of 10,000, settle 350: 650 come
#   back; reserve the last 1,000, settle 1,500: the budget is at -500 and
#   the next check waits for the refill.
# - ratelimitctl counter show lists the live leases with their age.
# - /metrics and /status count the leases held, taken, released, refused,
#   expired and settled.
# - A Redis Cluster (scripts/redis-ha.sh on CLUSTER_TEST_PORT, 3 primaries
#   and 3 replicas) behind a pool of its own: every key of the tenant's
#   leases is on one primary, the max holds, a release frees a slot.
# - Redis Sentinel (scripts/redis-ha.sh on SENTINEL_TEST_PORT): leases
#   whose writes reached the replica (WAIT) survive the master's SIGKILL:
#   the new master still holds them, and releases them.  (A lease whose
#   write had not reached the replica is lost: doc/rules.md.)
#
# Every loop is bounded in count and time.  Run by t/integration/run.sh
# (TESTS=leases).
# shellcheck disable=SC2317 # helpers called through `check`

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

serve_dir ratelimit-leases
KILLER=
BASE=${CLUSTER_TEST_PORT:-12100}
C=$D/cluster
SB=${SENTINEL_TEST_PORT:-12200}
S=$D/sentinel
HA="sh $ROOT/scripts/redis-ha.sh"
trap '$HA cluster stop "$C" >/dev/null 2>&1; $HA sentinel stop "$S" >/dev/null 2>&1; end_pids $KILLER $PIDS; rm -rf "$D"' EXIT

T1=$(uniq_name leases)
T2=$(uniq_name leases-other)
new_tenant "$T1"
new_tenant "$T2"
K1=$(new_key "$T1")
K2=$(new_key "$T2")
T1_ID=$(ctl tenant show "$T1" | awk '$1 == "id" { print $2; exit }')

ctl rule add "$T1" --route /cc --algorithm concurrency --max 2 \
    --lease-ttl 60s >/dev/null
ctl rule add "$T1" --route /cc50 --algorithm concurrency --max 50 \
    --lease-ttl 5m --count tenant >/dev/null
ctl rule add "$T1" --route /cc16 --algorithm concurrency --max 16 \
    --lease-ttl 5m --count tenant >/dev/null
ctl rule add "$T1" --route /short --algorithm concurrency --max 1 \
    --lease-ttl 1s >/dev/null
ctl rule add "$T1" --route /lost --algorithm concurrency --max 1000 \
    --lease-ttl 5m >/dev/null
ctl rule add "$T1" --route /tokens --algorithm token_bucket \
    --capacity 10000 --refill-rate 10 >/dev/null
ctl rule add "$T2" --route /cc2 --algorithm concurrency --max 5 \
    --lease-ttl 60s >/dev/null

# release KEY BODY, extend KEY BODY: the two lease calls.
release() {
    req POST /v1/release "$2" "X-API-Key: $1" "Content-Type: application/json"
}
extend() {
    req POST /v1/extend "$2" "X-API-Key: $1" "Content-Type: application/json"
}

# cc_key ROUTE [SUBJECT]: the Redis key of the first counter of ROUTE's
# rule (for SUBJECT), as ratelimitctl names it; held ROUTE [SUBJECT]: the
# live leases in it, as Redis has them.
cc_key() {
    ctl counter show "$T1" "$1" ${2:+--subject "$2"} --json |
        python3 -c 'import json, sys
print(json.load(sys.stdin)["counters"][0]["key"])'
}
held() {
    hd_key=$(cc_key "$@")
    rcli ZCOUNT "$hd_key" "($(now_ms)" +inf
}

# ------------------------------------------------------------ the API

check_req "$K1" '{"route":"/cc","subject":"u1"}'
L1=$(json_field lease)
check "a check takes a lease: 200" eq "$STATUS" 200
check "the lease id is the tenant's id, a dot and 32 hex digits" \
    matches "$L1" "^$T1_ID\\.[0-9a-f]{32}\$"
check "X-RateLimit-Lease is the body's lease" eq "$(header X-RateLimit-Lease)" "$L1"
check "lease_ttl_ms is the rule's 60 s" eq "$(json_field lease_ttl_ms)" 60000
check "one slot of two left" eq "$(json_field remaining)" 1
check_req "$K1" '{"route":"/cc","subject":"u1"}'
L2=$(json_field lease)
check "second: 200" eq "$STATUS" 200
check_req "$K1" '{"route":"/cc","subject":"u1"}'
check "third: 429 at the max" eq "$STATUS" 429
check "a denial has no lease" eq "$(json_field lease)" "<absent>"
check "and no X-RateLimit-Lease" eq "$(header X-RateLimit-Lease)" ""
check "Retry-After of a concurrency denial is 1 s" eq "$(header Retry-After)" 1
check "another subject has slots of its own" \
    check_200 "$K1" '{"route":"/cc","subject":"u2"}'
release "$K1" "{\"lease\":\"$(json_field lease)\"}"
check "two held by u1" eq "$(held /cc u1)" 2

release "$K1" "{\"lease\":\"$L1\"}"
check "release: 200" eq "$STATUS" 200
check "release: released" eq "$(json_field released)" true
check "release: one slot freed" eq "$(json_field slots_freed)" 1
check "release: nothing settled without a cost" eq "$(json_field settled)" 0
check "one held after the release" eq "$(held /cc u1)" 1
check "a slot again at once" check_200 "$K1" '{"route":"/cc","subject":"u1"}'
L3=$(json_field lease)

release "$K1" "{\"lease\":\"$L1\"}"
check "release twice: 409" eq "$STATUS" 409
check "release twice: lease_released" eq "$(json_field error)" lease_released
check "still two held" eq "$(held /cc u1)" 2
release "$K1" "{\"lease\":\"$T1_ID.0123456789abcdef0123456789abcdef\"}"
check "unknown lease: 404" eq "$STATUS" 404
check "unknown lease: lease_unknown" eq "$(json_field error)" lease_unknown
release "$K2" "{\"lease\":\"$L2\"}"
check "another tenant's lease: 404" eq "$STATUS" 404
check "another tenant's lease: lease_unknown" eq "$(json_field error)" \
    lease_unknown
check "another tenant's release changed nothing" eq "$(held /cc u1)" 2
release "$K1" '{"lease":"nope"}'
check "not a lease id: 400" eq "$STATUS" 400
release "$K1" "{\"lease\":\"$L2\",\"cost\":-1}"
check "a negative cost: 400" eq "$STATUS" 400
release "$K1" '{'
check "not JSON: 400" eq "$STATUS" 400
release "" "{\"lease\":\"$L2\"}"
check "no key: 401" eq "$STATUS" 401
req GET /v1/release
check "GET /v1/release: 405" eq "$STATUS" 405
check "nothing changed by the refusals" eq "$(held /cc u1)" 2

extend "$K1" "{\"lease\":\"$L2\",\"ttl_ms\":600000}"
check "extend: 200" eq "$STATUS" 200
check "extend: the new ttl" eq "$(json_field lease_ttl_ms)" 600000
hd_key=$(cc_key /cc u1)
check "the slot expires in 10 minutes now" \
    ge "$(rcli ZSCORE "$hd_key" "${L2#*.}")" "$(($(now_ms) + 590000))"
extend "$K1" "{\"lease\":\"$L2\",\"ttl_ms\":999}"
check "extend below 1 s: 400" eq "$STATUS" 400
extend "$K2" "{\"lease\":\"$L2\"}"
check "extend another tenant's: 404" eq "$STATUS" 404
release "$K1" "{\"lease\":\"$L2\"}"
release "$K1" "{\"lease\":\"$L3\"}"
check "both released: none held" eq "$(held /cc u1)" 0

# The longest reply: 8 limits, one of them a concurrency limit, and the
# lease's number after them.
r8=$(ctl rule add "$T1" --route /eight --algorithm concurrency --max 5 \
    --lease-ttl 1m | awk '$1 == "id" { print $2 }')
for i in 2 3 4 5 6 7 8; do
    ctl limit add "$r8" --name "tb$i" --algorithm token_bucket \
        --capacity 100 --refill-rate 1 >/dev/null
done
sleep 1
check_req "$K1" '{"route":"/eight","subject":"e8"}'
check "8 limits with a concurrency limit: 200 with a lease" \
    eq "$STATUS $(json_field lease | cut -c1-36)" "200 $T1_ID"
release "$K1" "{\"lease\":\"$(json_field lease)\",\"cost\":1}"
check "and its release" eq "$STATUS" 200

# ------------------------------------------------------------ expiry

check_req "$K1" '{"route":"/short","subject":"e1"}'
check "a lease of 1 s" eq "$STATUS" 200
L4=$(json_field lease)
check_req "$K1" '{"route":"/short","subject":"e1"}'
check "held: 429" eq "$STATUS" 429
sleep 1.1
check_req "$K1" '{"route":"/short","subject":"e1"}'
check "free at its ttl: 200" eq "$STATUS" 200
release "$K1" "{\"lease\":\"$L4\"}"
check "a release after the ttl: 410" eq "$STATUS" 410
check "a release after the ttl: lease_expired" eq "$(json_field error)" \
    lease_expired

# ------------------------------------------------------------ settled cost

check_req "$K1" '{"route":"/tokens","subject":"b1","cost":1000,"reserve":true}'
check "reserve 1,000 of 10,000: 200" eq "$STATUS" 200
check "reserve: 9,000 left" eq "$(json_field remaining)" 9000
LB=$(json_field lease)
check "reserve: a lease of 5 minutes" eq "$(json_field lease_ttl_ms)" 300000
release "$K1" "{\"lease\":\"$LB\",\"cost\":350}"
check "settle 350: 200" eq "$STATUS" 200
check "settle 350: 650 back" eq "$(json_field settled)" -650
check_req "$K1" '{"route":"/tokens","subject":"b1","peek":true}'
check "the budget has 9,650 (and the refill since)" \
    matches "$(json_field remaining)" '^96[5-9][0-9]$'
# Down to 1,000 (a cost of 8,650 and what refilled meanwhile).
check_req "$K1" '{"route":"/tokens","subject":"b1","peek":true}'
check_req "$K1" "{\"route\":\"/tokens\",\"subject\":\"b1\",\"cost\":$(($(json_field remaining) - 1000))}"
check "drained to 1,000" eq "$STATUS" 200
check_req "$K1" '{"route":"/tokens","subject":"b1","cost":1000,"reserve":true}'
check "reserve the last 1,000" eq "$STATUS" 200
LB=$(json_field lease)
release "$K1" "{\"lease\":\"$LB\",\"cost\":1500}"
check "settle 1,500: 500 more charged" eq "$(json_field settled)" 500
tb_key=$(cc_key /tokens b1)
# (-500 and what refilled, 10 a second, since the budget was drained.)
check "the budget is at about -500" \
    matches "$(tb_tokens "$tb_key")" '^-(4[0-9][0-9]|500)(\.[0-9]*)?$'
check_req "$K1" '{"route":"/tokens","subject":"b1"}'
check "the next check waits for the refill: 429" eq "$STATUS" 429
check "for about 50 s" ge "$(json_field retry_after_ms)" 45000
check "reserve true but a peek: no lease" \
    check_200 "$K1" '{"route":"/tokens","subject":"b2","peek":true,"reserve":true}'
check "a peek has no lease" eq "$(json_field lease)" "<absent>"
check_req "$K1" '{"route":"/tokens","subject":"b2","reserve":"yes"}'
check "reserve not a boolean: 400" eq "$STATUS" 400

# ------------------------------------------------------------ exactness

# lease_load ROUTE SUBJECT MODE ARG...: the load of this file, in Python
# threads, each with its own HTTP connection to the stack, on ROUTE for
# SUBJECT; prints one JSON line.
#   burst N             N checks at once (a barrier releases them), one
#                       connection each: the statuses and the leases
#   cycles N C          N acquire/release cycles (a check answered 200,
#                       then its release) by C clients, bounded to 120 s;
#                       a client waits 20 ms after a 429 or 503 and sends
#                       a release answered 503 again (up to 8 times,
#                       pauses doubling from 50 ms; 409 then says the
#                       first ran): the
#                       statuses of the checks, the releases not answered
#                       200, and the most leases Redis held, sampled every
#                       5 ms
lease_load() {
    python3 - "$PORT" "$K1" "$(cc_key "$1" "$2")" "$REDIS_PORT" "$@" <<'PY'
import http.client, json, socket, sys, threading, time

port, key, cc_key, redis_port, route, subject, mode = sys.argv[1:8]
args = sys.argv[8:]

def post(conn, path, body):
    conn.request("POST", path, json.dumps(body),
                 {"X-API-Key": key, "Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, json.loads(r.read() or b"{}")

def redis(*cmd):
    s = socket.create_connection(("127.0.0.1", int(redis_port)))
    out = "*%d\r\n" % len(cmd) + "".join(
        "$%d\r\n%s\r\n" % (len(str(c)), c) for c in cmd)
    s.sendall(out.encode())
    line = s.makefile("rb").readline().decode().strip()
    s.close()
    return int(line[1:])

if mode == "burst":
    n = int(args[0])
    barrier = threading.Barrier(n)
    res = [None] * n
    def one(i):
        c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
        c.connect()
        try:
            barrier.wait(30)
            res[i] = post(c, "/v1/check", {"route": route,
                                            "subject": subject})
        except Exception as e:
            res[i] = (0, {"exception": str(e)})
    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts: t.start()
    for t in ts: t.join(60)
    st = {}
    for r in res:
        st[str(r[0] if r else 0)] = st.get(str(r[0] if r else 0), 0) + 1
    leases = [r[1].get("lease") for r in res if r and r[0] == 200]
    print(json.dumps({"statuses": st, "leases": leases}))
else:
    n, clients = int(args[0]), int(args[1])
    left = [n]
    lock = threading.Lock()
    st, bad_release = {}, [0]
    deadline = time.time() + 120
    done = threading.Event()
    peak = [0]
    def sampler():
        while not done.is_set():
            now_ms = int(time.time() * 1000)
            s = socket.create_connection(("127.0.0.1", int(redis_port)))
            f = s.makefile("rb")
            cmd = ["ZCOUNT", cc_key, "(%d" % now_ms, "+inf"]
            s.sendall(("*4\r\n" + "".join("$%d\r\n%s\r\n" % (len(c), c)
                                          for c in cmd)).encode())
            v = int(f.readline().decode().strip()[1:])
            s.close()
            peak[0] = max(peak[0], v)
            time.sleep(0.005)
    def client():
        c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
        while time.time() < deadline:
            with lock:
                if left[0] <= 0:
                    return
            try:
                code, body = post(c, "/v1/check",
                                  {"route": route, "subject": subject})
                if code in (429, 503):
                    # As a client does: wait (here 20 ms, not the second
                    # Retry-After says) rather than spin.
                    time.sleep(0.02)
                if code == 200:
                    # A release answered 503 (Redis slow, then the pause
                    # of redis_backoff_ms) is sent again after a pause,
                    # doubling from 50 ms, up to 8 times; one that had run
                    # is then told 409.
                    pause = 0.05
                    for t in range(8):
                        rc, _ = post(c, "/v1/release",
                                     {"lease": body["lease"]})
                        if t > 0 and rc == 409:
                            rc = 200
                        if rc != 503:
                            break
                        time.sleep(pause)
                        pause = min(pause * 2, 2)
                    with lock:
                        left[0] -= 1
                        if rc != 200:
                            bad_release[0] += 1
            except Exception:
                code = 0
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", int(port),
                                               timeout=30)
            with lock:
                st[str(code)] = st.get(str(code), 0) + 1
    smp = threading.Thread(target=sampler)
    smp.start()
    ts = [threading.Thread(target=client) for _ in range(clients)]
    t0 = time.time()
    for t in ts: t.start()
    for t in ts: t.join(130)
    done.set()
    smp.join()
    print(json.dumps({"statuses": st, "bad_release": bad_release[0],
                      "peak": peak[0], "left": left[0],
                      "seconds": round(time.time() - t0, 1)}))
PY
}

# jq_true EXPR JSON: the Python expression over d holds.
jq_true() {
    [ "$(jq_py "$1" "$2")" = true ]
}

# 500 concurrent acquisitions against max 50: exactly 50 held.
out=$(lease_load /cc50 b burst 500)
check "500 at once against max 50: 50 allowed ($out)" \
    eq "$(jq_py 'd["statuses"].get("200", 0)' "$out")" 50
check "500 at once against max 50: the 450 others denied (or 503 on a loaded machine)" \
    eq "$(jq_py 'd["statuses"].get("429", 0) + d["statuses"].get("503", 0)' "$out")" 450
check "500 at once against max 50: exactly 50 held" eq "$(held /cc50)" 50
check "500 at once against max 50: 50 distinct leases, each held" \
    eq "$(jq_py 'len(set(d["leases"]))' "$out")" 50
for l in $(jq_py '" ".join(d["leases"])' "$out"); do
    release "$K1" "{\"lease\":\"$l\"}"
done
check "all 50 released: none held" eq "$(held /cc50)" 0

# 10,000 acquire/release cycles from 64 clients against max 16.
out=$(lease_load /cc16 c cycles 10000 64)
echo "    cycles: $out"
# (The clients stop once 10,000 have finished: those under way finish.)
check "10,000 cycles from 64 clients: all ran ($out)" \
    ge "$(jq_py 'd["statuses"].get("200", 0)' "$out")" 10000
# (On a machine shared with other work a check may time out: 503, and
# the worker's Redis back-off answers 503 for a moment after.)
check "10,000 cycles: only 200s, 429s and at most 1 % 503s" \
    jq_true 'sum(v for k, v in d["statuses"].items() if k not in ("200", "429", "503")) == 0 and d["statuses"].get("503", 0) <= sum(d["statuses"].values()) / 100' "$out"
check "10,000 cycles: every release of a lease taken answered 200" \
    eq "$(jq_py 'd["bad_release"]' "$out")" 0
check "10,000 cycles: never more than 16 held (sampled every 5 ms)" \
    le "$(jq_py 'd["peak"]' "$out")" 16
check "10,000 cycles: the samples saw leases held" \
    ge "$(jq_py 'd["peak"]' "$out")" 1
# (A check answered 503 whose call had run holds a slot its client never
# heard of, until its ttl: at most one a 503.)
check "10,000 cycles: 0 held at the end, but for checks answered 503" \
    le "$(held /cc16)" "$(jq_py 'd["statuses"].get("503", 0)' "$out")"

# ------------------------------------------------------------ a worker killed

# The lease is the client's, not the worker's: a worker killed right after
# it answered leaves the slot held until a release (or the ttl).
check_req "$K1" '{"route":"/cc","subject":"k1"}'
LK=$(json_field lease)
check "a lease before the kill" eq "$STATUS" 200
for p in $(fcgi_worker_pids); do
    kill -KILL "$p" 2>/dev/null || true
done
wait_workers "$(fcgi_master_pid)" "$WORKERS"
check "after SIGKILL of every worker: the slot is still held" \
    eq "$(held /cc k1)" 1
release "$K1" "{\"lease\":\"$LK\"}"
check "released through a new worker: 200" eq "$STATUS" 200
check "and the slot is free" eq "$(held /cc k1)" 0

# ------------------------------------------------------------ metrics

# Three leases held now (the tests above released or let expire all of
# theirs, but for checks answered 503 that ran: the cycles'); /metrics and
# /status count them across the pool, from Redis.
for i in 1 2 3; do
    check_req "$K1" '{"route":"/cc50","subject":"m"}'
done
want=$(($(held /cc50) + $(held /cc16)))
fetch "$BASE_URL/metrics"
metric() {
    printf '%s\n' "$BODY" | awk -v m="$1" 'index($0, m " ") == 1 { print $2 }'
}
check "ratelimit_tenant_leases_held of the tenant is 3 (and any of the cycles': $want)" \
    eq "$(metric "ratelimit_tenant_leases_held{tenant=\"$T1\"}")" "$want"
check "leases taken are counted" \
    ge "$(metric 'ratelimit_leases_total{event="taken"}')" 10000
check "and released" \
    ge "$(metric 'ratelimit_leases_total{event="released"}')" 10000
check "and refused (409, 404, 410 above)" \
    ge "$(metric 'ratelimit_leases_total{event="refused"}')" 4
check "and expired unreleased (the leases of 1 s)" \
    ge "$(metric 'ratelimit_leases_total{event="expired"}')" 1
check "and extended" \
    ge "$(metric 'ratelimit_leases_total{event="extended"}')" 1
check "a refund of 650 and a charge of 500 were settled" \
    eq "$(metric 'ratelimit_lease_settlements_total{direction="refund"}') $(metric 'ratelimit_lease_settlements_total{direction="charge"}')" "1 1"
check "the cost settled each way" \
    eq "$(metric 'ratelimit_lease_settled_cost_total{direction="refund"}') $(metric 'ratelimit_lease_settled_cost_total{direction="charge"}')" "650 500"
fetch "$BASE_URL/status?json&history"
check "/status: the tenant has them in flight (the dashboard's column)" \
    eq "$(jq_py "[t.get('in_flight') for t in d['tenants'] if t['tenant'] == '$T1']" "$BODY")" "[$want]"
check "/status: in flight in all, at least 3 (the dashboard's figure)" \
    ge "$(jq_py "d.get('in_flight', -1)" "$BODY")" 3

# The series is bounded as the other per-tenant ones: a pool with
# metrics_tenants = top:1 shows the leases of the tenant with the most
# checks only, though both hold some.
PM=$((PORT + 193))
if private_app lm "$PM" "metrics_tenants=top:1" "workers=1"; then
    check "the top:1 pool is ready" retry 50 ready_on "$PM"
    for i in 1 2 3; do
        curl -s -o /dev/null -m 5 -X POST "http://127.0.0.1:$PM/v1/check" \
            -H "X-API-Key: $K1" -H 'Content-Type: application/json' \
            -d '{"route":"/cc50","subject":"top"}'
    done
    curl -s -o "$T_TMP/t2.out" -m 5 -X POST "http://127.0.0.1:$PM/v1/check" \
        -H "X-API-Key: $K2" -H 'Content-Type: application/json' \
        -d '{"route":"/cc2","subject":"top"}'
    LT2=$(json_field lease "$(cat "$T_TMP/t2.out")")
    check "the other tenant holds a lease too ($LT2)" contains "$LT2" .
    curl -s -o "$T_TMP/lm.metrics" -m 5 "http://127.0.0.1:$PM/metrics"
    check "top:1: one ratelimit_tenant_leases_held series, the busier tenant's ($(grep '^ratelimit_tenant_leases_held' "$T_TMP/lm.metrics" | tr '\n' ' '))" \
        eq "$(grep '^ratelimit_tenant_leases_held{' "$T_TMP/lm.metrics" |
            sed 's/ .*//')" "ratelimit_tenant_leases_held{tenant=\"$T1\"}"
    release "$K2" "{\"lease\":\"$LT2\"}"
    check "the other tenant's lease released" eq "$STATUS" 200
    stop_private
else
    fail "a pool with metrics_tenants = top:1 starts"
fi

# ------------------------------------------------------------ lost replies

# Every Redis client connection is killed every 3 ms (one redis-cli
# repeating the command; a redis-cli started for each kill managed one
# every 10 ms or more, and one CI run lost no reply in 5 rounds) while 500
# checks take leases at once (max 1000: none is denied): a check whose
# call was in flight is sent again with the same lease, and the script
# replays its reply, so no check holds two slots.  At most the checks
# answered 200 or 503 hold one (a 503 may have run); every lease answered
# is held.  Up to 8 rounds (a subject each), until a reply was lost in
# flight: Redis ran more scripts than checks were answered.
round=0
lost=0
while [ "$round" -lt 8 ] && [ "$lost" -lt 1 ]; do
    round=$((round + 1))
    runs=$(script_calls)
    # (redis-cli itself, not rcli: $! must be the process that kills.)
    redis-cli -h 127.0.0.1 -p "$REDIS_PORT" -r 4000 -i 0.003 \
        CLIENT KILL TYPE normal >/dev/null 2>&1 &
    KILLER=$!
    out=$(lease_load /lost "r$round" burst 500)
    kill "$KILLER" 2>/dev/null
    wait "$KILLER" 2>/dev/null
    KILLER=
    ok_n=$(jq_py 'd["statuses"].get("200", 0)' "$out")
    u_n=$(jq_py 'd["statuses"].get("503", 0)' "$out")
    lost=$(($(script_calls) - runs - ok_n))
    echo "    lost replies, round $round: $(jq_py 'd["statuses"]' "$out"), $lost more script runs than 200s"
done
lost_held=$(held /lost "r$round")
check "lost replies: replies were lost in flight ($lost in $round rounds)" \
    ge "$lost" 1
check "lost replies: every 200 has its own lease" \
    eq "$(jq_py 'len(set(d["leases"]))' "$out")" "$ok_n"
check "lost replies: no more held ($lost_held) than 200s and 503s" \
    le "$lost_held" $((ok_n + u_n))
check "lost replies: no fewer held than 200s" ge "$lost_held" "$ok_n"
lk=$(cc_key /lost "r$round")
missing=0
for l in $(jq_py '" ".join(d["leases"])' "$out"); do
    [ -n "$(rcli ZSCORE "$lk" "${l#*.}")" ] || missing=$((missing + 1))
done
check "lost replies: every lease answered is held" eq "$missing" 0

# ------------------------------------------------------------ counter show, bounds, scope

# counter show gives each live lease its age: the time since it was
# taken, and the time it has left, which add up to its ttl.
check_req "$K1" '{"route":"/cc","subject":"age"}'
LA=$(json_field lease)
check "a lease to age" eq "$STATUS" 200
sleep 1.2
ctl counter show "$T1" /cc --subject age --json >"$T_TMP/age.json" 2>&1
lease_age() {
    python3 -c '
import json, sys
for c in json.load(open(sys.argv[1]))["counters"]:
    for l in (c.get("state") or {}).get("leases", []):
        print(l["lease"], l["age_ms"], l["age_ms"] + l["expires_in_ms"])' \
        "$T_TMP/age.json"
}
# in_ms N LO HI: LO <= N <= HI.
in_ms() {
    ge "$1" "$2" && le "$1" "$3"
}
A_ID='' A_AGE='' A_TTL=''
read -r A_ID A_AGE A_TTL <<EOF
$(lease_age)
EOF
check "counter show --json lists the lease ($A_ID)" eq "$A_ID" "$LA"
check "its age is the time since it was taken, 1.2 s ago ($A_AGE ms)" \
    in_ms "$A_AGE" 1200 4000
check "its age and the time it has left add up to its ttl ($A_TTL ms)" \
    eq "$A_TTL" 60000
release "$K1" "{\"lease\":\"$LA\"}"
check "the aged lease released" eq "$STATUS" 200

# The lease ttl of a concurrency limit is 1 s to 1 h; ratelimitctl
# refuses anything else and says so, and adds nothing.
for ttl in 999ms 0s 61m 2h; do
    ctl rule add "$T1" --route /badttl --algorithm concurrency --max 1 \
        --lease-ttl "$ttl" >"$T_TMP/ttl.out" 2>&1
    check "--lease-ttl $ttl: exit status 2 ($(cat "$T_TMP/ttl.out"))" eq "$?" 2
    check "--lease-ttl $ttl: the bounds said" \
        contains "$(cat "$T_TMP/ttl.out")" "out of range (1s to 1h)"
done
check "no rule was added for them" \
    eq "$(ctl rule list "$T1" 2>/dev/null | grep -c /badttl)" 0
ctl rule add "$T1" --route /hour --algorithm concurrency --max 1 \
    --lease-ttl 1h >"$T_TMP/ttl.out" 2>&1
check "--lease-ttl 1h, the longest, is taken ($(cat "$T_TMP/ttl.out"))" eq "$?" 0

# Counted by key: two subjects of one key share the slot; another key of
# the same tenant has its own.
ctl rule add "$T1" --route /cck --algorithm concurrency --max 1 \
    --lease-ttl 60s --count key >/dev/null
K1B=$(new_key "$T1")
sleep 1
check_req "$K1" '{"route":"/cck","subject":"s1"}'
LB=$(json_field lease)
check "--count key: the key's one slot taken" eq "$STATUS" 200
check_req "$K1" '{"route":"/cck","subject":"s2"}'
check "--count key: another subject of the same key gets 429" eq "$STATUS" 429
check_req "$K1B" '{"route":"/cck","subject":"s1"}'
LB2=$(json_field lease)
check "--count key: another key of the tenant has its own slot" eq "$STATUS" 200
release "$K1" "{\"lease\":\"$LB\"}"
release "$K1B" "{\"lease\":\"$LB2\"}"
check "--count key: released" eq "$STATUS" 200

# ------------------------------------------------------------ the docs' examples

# The examples as a user types them, against this stack; a rule added is
# given a second to reach the workers (a user's next command comes later).
doc_local() {
    echo 'set -e'
    echo "ratelimitctl() { \"$BUILD/ratelimitctl\" -c \"$VAR/ratelimit.conf\" \"\$@\" || return; [ \"\$1\" != rule ] || sleep 1; }"
    sed -e "s#127.0.0.1:8080#127.0.0.1:$PORT#g" -e "s#acme#$T1#g"
}
doc_block doc/rules.md "An in-flight limit" |
    doc_local >"$T_TMP/doc1.sh"
sh "$T_TMP/doc1.sh" >"$T_TMP/doc1.out" 2>&1
check "doc/rules.md's in-flight example runs ($(tail -n 3 "$T_TMP/doc1.out" | tr '\n' ' '))" eq "$?" 0
check "its third export is 429" contains "$(cat "$T_TMP/doc1.out")" "429"
check "counter show lists the one lease held" \
    contains "$(cat "$T_TMP/doc1.out")" "held=1 $T1_ID."
check "both releases answer released" \
    eq "$(grep -c '"released":true' "$T_TMP/doc1.out")" 2
doc_block doc/rules.md "A token budget settled after the response" |
    doc_local >"$T_TMP/doc2.sh"
sh "$T_TMP/doc2.sh" >"$T_TMP/doc2.out" 2>&1
check "doc/rules.md's token budget example runs" eq "$?" 0
check "it settles 2,800 back" contains "$(cat "$T_TMP/doc2.out")" \
    '"settled":-2800'

# ------------------------------------------------------------ Redis Cluster

PC=$((PORT + 191))
if $HA cluster start "$C" "$BASE" >"$T_TMP/cluster.log" 2>&1; then
    pass "a Redis Cluster starts on 127.0.0.1:$BASE-$((BASE + 5))"
    private_app lc "$PC" "redis_type=cluster" \
        "redis=127.0.0.1:$BASE, 127.0.0.1:$((BASE + 1))" ||
        fail "a pool starts on the cluster"
    check "the pool on the cluster is ready" retry 50 ready_on "$PC"
    ctl rule add "$T1" --route /ccl --algorithm concurrency --max 3 \
        --lease-ttl 1m --count tenant >/dev/null
    sleep 1
    # ccheck: one check of /ccl through the cluster's pool.
    ccheck() {
        fetch "http://127.0.0.1:$PC/v1/check" -H "X-API-Key: $K1" \
            --data-raw '{"route":"/ccl"}'
    }
    CL=
    for i in 1 2 3; do
        ccheck
        check "cluster: lease $i of 3: 200" eq "$STATUS" 200
        CL="$CL $(json_field lease)"
    done
    ccheck
    check "cluster: the fourth: 429" eq "$STATUS" 429
    # Every key of the tenant (its concurrency set, the lease records, its
    # set of leases, the reply slots) is on the primary of its slot.
    on=
    for p in $($HA cluster primaries "$C"); do
        n=$(redis-cli -h 127.0.0.1 -p "$p" --scan --pattern "rl:{$T1_ID}:*" |
            wc -l | tr -d ' ')
        [ "$n" -gt 0 ] && on="$on $p:$n"
    done
    check "cluster: the tenant's keys are on one primary ($on)" \
        eq "$(printf '%s\n' "$on" | wc -w | tr -d ' ')" 1
    first=${CL# }
    first=${first%% *}
    fetch "http://127.0.0.1:$PC/v1/release" -H "X-API-Key: $K1" \
        --data-raw "{\"lease\":\"$first\",\"cost\":1}"
    check "cluster: a release: 200, one slot freed" \
        eq "$STATUS $(json_field slots_freed)" "200 1"
    ccheck
    check "cluster: a slot again" eq "$STATUS" 200
    CL="$CL $(json_field lease)"
    fetch "http://127.0.0.1:$PC/v1/release" -H "X-API-Key: $K1" \
        --data-raw "{\"lease\":\"$first\"}"
    check "cluster: released twice: 409" eq "$STATUS" 409
    for l in $CL; do
        [ "$l" = "$first" ] ||
            fetch "http://127.0.0.1:$PC/v1/release" -H "X-API-Key: $K1" \
                --data-raw "{\"lease\":\"$l\"}"
    done
    check "cluster: the last release: 200" eq "$STATUS" 200
    stop_private
else
    fail "a Redis Cluster starts on 127.0.0.1:$BASE-$((BASE + 5))" \
        "$(tail -n 20 "$T_TMP/cluster.log")"
fi

# ------------------------------------------------------------ Redis Sentinel

PS=$((PORT + 192))
if $HA sentinel start "$S" "$SB" >"$T_TMP/sentinel.log" 2>&1; then
    pass "a master, a replica and three sentinels start on 127.0.0.1:$SB-$((SB + 4))"
    private_app ls "$PS" redis_type=sentinel \
        "redis=127.0.0.1:$((SB + 2)),127.0.0.1:$((SB + 3)),127.0.0.1:$((SB + 4))" \
        redis_sentinel_master=rlmaster || fail "a pool starts on the sentinels"
    check "the pool on the sentinels is ready" retry 50 ready_on "$PS"
    ctl rule add "$T1" --route /ccs --algorithm concurrency --max 2 \
        --lease-ttl 1m --count tenant >/dev/null
    sleep 1
    # scheck, srelease LEASE: a check of /ccs, a release, through that pool.
    scheck() {
        fetch "http://127.0.0.1:$PS/v1/check" -H "X-API-Key: $K1" \
            --data-raw '{"route":"/ccs"}'
    }
    srelease() {
        fetch "http://127.0.0.1:$PS/v1/release" -H "X-API-Key: $K1" \
            --data-raw "{\"lease\":\"$1\"}"
    }
    scheck
    S1=$(json_field lease)
    scheck
    S2=$(json_field lease)
    check "sentinel: two leases of two" eq "$STATUS" 200
    m=$($HA sentinel master "$S" | cut -d: -f2)
    check "sentinel: their writes reached the replica (WAIT)" \
        eq "$(redis-cli -p "$m" WAIT 1 2000)" 1
    kill -KILL "$(cat "$S/$m/pid")"
    # new_master: the sentinels name another node, and the pool answers.
    new_master() {
        [ "$($HA sentinel master "$S" | cut -d: -f2)" != "$m" ] &&
            ready_on "$PS"
    }
    check "sentinel: the master killed, the pool follows the new one" \
        retry 300 new_master
    scheck
    check "sentinel: the new master holds both leases: 429" eq "$STATUS" 429
    srelease "$S1"
    check "sentinel: a release on the new master: 200, one slot freed" \
        eq "$STATUS $(json_field slots_freed)" "200 1"
    scheck
    check "sentinel: a slot again" eq "$STATUS" 200
    S3=$(json_field lease)
    srelease "$S2"
    srelease "$S3"
    check "sentinel: the others released" eq "$STATUS" 200
    stop_private
else
    fail "a master, a replica and three sentinels start on 127.0.0.1:$SB-$((SB + 4))" \
        "$(tail -n 20 "$T_TMP/sentinel.log")"
fi

finish
