#!/bin/sh
# Limits against the real stack: the limits of a rule decided all or
# nothing (a denial charges no limit, read back from Redis), exactness of
# every algorithm under 500 concurrent checks, peek, shadow rules, failure
# modes with Redis stopped, per-route counters, always rules, and the IETF
# RateLimit and RateLimit-Policy fields checked with a Structured Field
# parser (t/lib/sf_parse.py, whose own tests t/lib/sf_test.py run here too), and
# a quick run of scripts/accuracy.  Run by t/integration/run.sh, which
# starts the stack with 2 s caches.
# shellcheck disable=SC2317 # helpers called through `check`

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

# ---------------------------------------------------------------- helpers

# new_tenant_id NAME: adds the tenant and prints its id.
new_tenant_id() {
    ctl tenant add "$1" | awk '$1 == "id" { print $2; exit }'
}

# add_rule TENANT ARGS...: adds a rule and prints its id.
add_rule() {
    ar_tenant=$1
    shift
    ctl rule add "$ar_tenant" "$@" | awk '$1 == "id" { print $2; exit }'
}

# limit_id TENANT RULE_ID LIMIT_NAME: the id of a limit (from rule list).
limit_id() {
    ctl rule list "$1" 2>/dev/null |
        awk -v r="$2" -v n="$3" '$1 == r && $10 == n { print $9; exit }'
}

# hash32 TEXT: the first 32 hex digits of SHA-256(TEXT), as in the keys.
hash32() {
    printf '%s' "$1" | sha256sum | cut -c1-32
}

# counter_key TENANT_ID RULE_ID LIMIT_ID SUBJECT [ROUTE]: the Redis key of
# a limit's state (ROUTE only for --per route rules).
counter_key() {
    ck_route=
    if [ $# -ge 5 ]; then
        ck_route=:r$(hash32 "$5")
    fi
    printf 'rl:{%s}:%s:%s%s:s%s' "$1" "$2" "$3" "$ck_route" "$(hash32 "$4")"
}

# state KEY: the hash at KEY on one line ("" when there is none).
state() {
    rcli HGETALL "$1" | tr '\n' ' '
}

# field KEY NAME: one field of the hash at KEY.
field() {
    rcli HGET "$1" "$2"
}

# statuses: the statuses of the last batch on one line.
statuses() {
    tr '\n' ' ' <"$T_TMP/statuses"
}

# batch_field I NAME: a field of the body of request I of the last batch.
batch_field() {
    json_field "$2" "$(batch_body "$1")"
}


# poll_status TRIES CODE KEY BODY: repeats a check every 0.1 s until it
# answers CODE, at most TRIES times.
poll_status() {
    ps_n=0
    while [ "$ps_n" -lt "$1" ]; do
        check_req "$3" "$4"
        [ "$STATUS" = "$2" ] && return 0
        ps_n=$((ps_n + 1))
        sleep 0.1
    done
    return 1
}

# policy_field NAME FIELD [JSON]: FIELD of the policy called NAME in the
# body's "policies".
policy_field() {
    python3 -c '
import json, sys
doc = json.loads(sys.argv[3])
for p in doc.get("policies", []):
    if p.get("name") == sys.argv[1]:
        v = p.get(sys.argv[2])
        print(v if isinstance(v, str) else json.dumps(v))
        sys.exit(0)
print("<absent>")
sys.exit(1)
' "$1" "$2" "${3-$BODY}"
}

# rate_headers_ok HEADERS_FILE BODY [NAME=Q/W ...]: the RateLimit and
# RateLimit-Policy fields of a response agree with its body (see
# t/lib/ratelimit_headers.py for what is checked).  Prints what is wrong.
rate_headers_ok() {
    python3 "$ROOT/t/lib/ratelimit_headers.py" "$ROOT/t/lib" "$@"
}

# ---------------------------------------------------------------- sf_parse

# A second Structured Field parser, written elsewhere: the npm package
# structured-headers, installed once under $BUILD/npm (the npm registry is
# the one place besides Debian's archive this machine reaches).  Every
# rate_headers_ok then parses both fields with it too.
SF_NPM_MODULES=$BUILD/npm/node_modules
if [ ! -f "$SF_NPM_MODULES/structured-headers/package.json" ]; then
    mkdir -p "$BUILD/npm"
    timeout 180 npm install --no-audit --no-fund --no-save --prefix \
        "$BUILD/npm" structured-headers@2 >"$T_TMP/npm.out" 2>&1 ||
        cat "$T_TMP/npm.out"
fi
if [ -f "$SF_NPM_MODULES/structured-headers/package.json" ] &&
    node "$ROOT/t/lib/sf_check.cjs" "$SF_NPM_MODULES" 'x="a";q=1' \
        >"$T_TMP/sf_check.out" 2>&1 &&
    grep -q '"x":\[\[\["s","a"\],{"q":\["n",1\]}\]\]' "$T_TMP/sf_check.out"; then
    pass "the npm parser structured-headers is installed and reads a List"
    export SF_NPM_MODULES
else
    fail "the npm parser structured-headers is installed and reads a List" \
        "$(cat "$T_TMP/sf_check.out" 2>/dev/null)"
fi

if python3 "$ROOT/t/lib/sf_test.py" >"$T_TMP/sf_test.out" 2>&1; then
    pass "t/lib/sf_test.py: the Structured Field parser passes its tests"
else
    fail "t/lib/sf_test.py: the Structured Field parser passes its tests" \
        "$(tail -n 20 "$T_TMP/sf_test.out")"
fi

# ---------------------------------------------------------------- all or nothing

# One rule, two limits: 5 a second (GCRA, all 5 at once) and 8 a minute
# (sliding window).  The minute counter ("cur") must only ever count
# allowed requests.
tenant=$(uniq_name aon)
tid=$(new_tenant_id "$tenant")
key=$(new_key "$tenant")
rule=$(add_rule "$tenant" --route '/aon*' --name per-second \
    --algorithm gcra --limit 5 --period 1s --burst 4)
ctl limit add "$rule" --name per-minute --algorithm sliding_window \
    --limit 8 --window 60 >/dev/null
lsec=$(limit_id "$tenant" "$rule" per-second)
lmin=$(limit_id "$tenant" "$rule" per-minute)
check "all-or-nothing: tenant, rule and limits made ($tid $rule $lsec $lmin)" \
    matches "$tid $rule $lsec $lmin" '^[0-9a-f-]+ [0-9]+ [0-9]+ [0-9]+$'

avoid_edge 60 6
# The five denials must come within 200 ms of the fifth pass (GCRA lets
# one more through every 200 ms); a slow machine gets two more tries.
attempt=1
while :; do
    subj=$(uniq_name aon)
    ksec=$(counter_key "$tid" "$rule" "$lsec" "$subj")
    kmin=$(counter_key "$tid" "$rule" "$lmin" "$subj")
    body=$(check_body /aon/1 "$subj")
    seq_checks 5 "$key" "$body"
    first=$(statuses)
    sec_before=$(state "$ksec")
    min_before=$(state "$kmin")
    seq_checks 5 "$key" "$body"
    second=$(statuses)
    sec_after=$(state "$ksec")
    min_after=$(state "$kmin")
    denial=$(batch_body 1)
    [ "$second" = "429 429 429 429 429 " ] || [ "$attempt" -ge 3 ] && break
    echo "    (attempt $attempt too slow: $second; again)"
    attempt=$((attempt + 1))
done
check "all-or-nothing: 5 pass in the same second ($first)" \
    eq "$first" "200 200 200 200 200 "
check "all-or-nothing: the next 5 are denied ($second)" \
    eq "$second" "429 429 429 429 429 "
check "all-or-nothing: denied_by names the per-second limit" \
    json_equal "$(json_field denied_by "$denial")" '["per-second"]'
check "all-or-nothing: the minute counter is in Redis ($kmin: $min_before)" \
    contains "$min_before" cur
check "all-or-nothing: the minute counter counts 5" \
    eq "$(field "$kmin" cur)" 5
check "all-or-nothing: denials charge nothing to the minute limit ($min_before -> $min_after)" \
    eq "$min_after" "$min_before"
check "all-or-nothing: the per-second state is in Redis ($ksec)" \
    contains "$sec_before" tat
check "all-or-nothing: denials change nothing in the per-second limit ($sec_before -> $sec_after)" \
    eq "$sec_after" "$sec_before"

# A second later the per-second limit allows 5 again, the minute limit 3.
# The state is read at once: the per-second key expires a second after its
# theoretical arrival time, which is only 600 ms ahead here.
sleep 1.1
seq_checks 5 "$key" "$body"
sec_before=$(state "$ksec")
min_before=$(state "$kmin")
check_req "$key" "$body"
sec_after=$(state "$ksec")
min_after=$(state "$kmin")
check "all-or-nothing: a second later 3 more pass, then the minute limit denies ($(statuses))" \
    eq "$(statuses)" "200 200 200 429 429 "
check "all-or-nothing: denied_by names the minute limit" \
    json_equal "$(json_field denied_by "$(batch_body 4)")" '["per-minute"]'
check "all-or-nothing: the per-second limit allowed it (policies)" \
    eq "$(policy_field per-second allowed "$(batch_body 4)")" true
check "all-or-nothing: once more denied by the minute limit" \
    json_equal "$(json_field denied_by)" '["per-minute"]'
check "all-or-nothing: a minute denial charges nothing to the per-second limit ($sec_before -> $sec_after)" \
    eq "$sec_after" "$sec_before"
check "all-or-nothing: (the per-second state was there to compare)" \
    contains "$sec_before" tat
check "all-or-nothing: nor to the minute limit" eq "$min_after" "$min_before"
check "all-or-nothing: the minute counter counts 8" \
    eq "$(field "$kmin" cur)" 8
check "all-or-nothing: 429 headers agree with the body" \
    rate_headers_ok "$T_TMP/headers" "$BODY" per-second=5/1 per-minute=8/60

# Concurrent: 50 checks at once on a fresh subject.
avoid_edge 60 3
subj=$(uniq_name aonpar)
par_checks 50 50 "$key" "$(check_body /aon/2 "$subj")"
check "all-or-nothing: 50 concurrent checks allow exactly 5 ($(count_status 200))" \
    eq "$(count_status 200)" 5
check "all-or-nothing: and deny 45" eq "$(count_status 429)" 45
check "all-or-nothing: the minute counter shows 5, not 50" \
    eq "$(field "$(counter_key "$tid" "$rule" "$lmin" "$subj")" cur)" 5

# ---------------------------------------------------------------- exactness

# Every algorithm, configured so that exactly 100 can pass during the test:
# 500 concurrent checks allow 100.
avoid_edge 86400 15
tenant=$(uniq_name exact)
new_tenant "$tenant"
key=$(new_key "$tenant")
add_rule "$tenant" --route /exact/token_bucket --algorithm token_bucket \
    --capacity 100 --refill-rate 0.001 >/dev/null
add_rule "$tenant" --route /exact/sliding_window \
    --algorithm sliding_window --limit 100 --window 3600 >/dev/null
add_rule "$tenant" --route /exact/gcra --algorithm gcra --limit 100 \
    --period 100h --burst 99 >/dev/null
add_rule "$tenant" --route /exact/fixed_window --algorithm fixed_window \
    --limit 100 --calendar day >/dev/null
for algo in token_bucket sliding_window gcra fixed_window; do
    par_checks 500 50 "$key" "$(check_body "/exact/$algo" "$(uniq_name s)")"
    ok=$(count_status 200)
    denied=$(count_status 429)
    check "exact $algo: 500 concurrent checks allow 100 ($ok)" eq "$ok" 100
    check "exact $algo: and deny 400 ($denied)" eq "$denied" 400
    if [ "$ok" != 100 ] || [ "$denied" != 400 ]; then
        echo "    statuses: $(sort "$T_TMP/statuses" | uniq -c | tr '\n' ' ')"
    fi
done
# counter show reads a token bucket's state, a string of packed doubles
# (lua/token_bucket.lua), as its tokens and time.
subj=$(uniq_name s)
seq_checks 3 "$key" "$(check_body /exact/token_bucket "$subj")"
ctl counter show "$tenant" /exact/token_bucket --subject "$subj" \
    >"$T_TMP/tb.out"
check "counter show: a bucket of 100 charged 3 holds 97 tokens ($(tail -n 1 "$T_TMP/tb.out"))" \
    matches "$(tail -n 1 "$T_TMP/tb.out")" \
    ' token_bucket +[a-z]+ +[0-9]+ +tokens=97(\.[0-9]+)? ts=1[0-9]{15}$'
ctl counter show "$tenant" /exact/token_bucket --subject "$subj" --json \
    >"$T_TMP/tb.json"
check "counter show --json: the bucket's tokens and ts are numbers" \
    eq "$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["counters"][0]["state"]; print(97 <= s["tokens"] < 97.01, type(s["ts"]).__name__, len(str(s["ts"])))' "$T_TMP/tb.json")" \
    "True int 16"

# ---------------------------------------------------------------- scope

# What a limit counts (--count).  A tenant-wide limit of 100: 500
# concurrent checks spread over 50 subjects and 3 keys of the tenant allow
# exactly 100.  A per-key limit and a per-subject limit beside it count
# their own way.
tenant=$(uniq_name scope)
new_tenant "$tenant"
k1=$(new_key "$tenant")
k2=$(new_key "$tenant")
k3=$(new_key "$tenant")
add_rule "$tenant" --route /scope/tenant --algorithm sliding_window \
    --limit 100 --window 3600 --count tenant >/dev/null
add_rule "$tenant" --route /scope/key --algorithm sliding_window \
    --limit 5 --window 3600 --count key >/dev/null
add_rule "$tenant" --route /scope/subject --algorithm sliding_window \
    --limit 5 --window 3600 >/dev/null
# scope_batch N ROUTE: N checks of ROUTE, request i with key i mod 3 and
# subject i mod 50; statuses in $T_TMP/statuses.
scope_batch() {
    sb_i=1
    : >"$T_TMP/scope.conf"
    while [ "$sb_i" -le "$1" ]; do
        case $((sb_i % 3)) in
        0) sb_key=$k1 ;;
        1) sb_key=$k2 ;;
        *) sb_key=$k3 ;;
        esac
        {
            [ "$sb_i" -gt 1 ] && echo next
            echo "url = \"$BASE_URL/v1/check\""
            echo "header = \"X-API-Key: $sb_key\""
            echo 'header = "Content-Type: application/json"'
            echo "data-raw = $(curl_quote "$(check_body "$2" "u$((sb_i % 50))")")"
            echo 'output = "/dev/null"'
            printf '%s\n' 'write-out = "%{http_code}\n"'
            echo 'max-time = 20'
        } >>"$T_TMP/scope.conf"
        sb_i=$((sb_i + 1))
    done
    curl --no-progress-meter --parallel --parallel-max 50 \
        -K "$T_TMP/scope.conf" >"$T_TMP/statuses" || true
}
scope_batch 500 /scope/tenant
check "count tenant: 500 concurrent checks over 50 subjects and 3 keys allow exactly 100 ($(count_status 200))" \
    eq "$(count_status 200)" 100
check "count tenant: and deny 400 ($(count_status 429))" \
    eq "$(count_status 429)" 400
# Per key: 5 for each of the 3 keys, whatever the subjects.
scope_batch 60 /scope/key
check "count key: 60 checks over 3 keys and 50 subjects allow 5 a key ($(count_status 200))" \
    eq "$(count_status 200)" 15
# Per subject: 50 subjects, each seen at most twice in 60 checks: all pass.
scope_batch 60 /scope/subject
check "count subject: 60 checks over 50 subjects all pass ($(count_status 200))" \
    eq "$(count_status 200)" 60
# Without a subject, a subject limit counts per key.
seq_checks 7 "$k1" '{"route":"/scope/subject"}'
check "count subject without a subject: 5 of 7 pass for one key ($(count_status 200))" \
    eq "$(count_status 200)" 5
seq_checks 2 "$k2" '{"route":"/scope/subject"}'
check "count subject without a subject: another key has its own 5" \
    eq "$(count_status 200)" 2
# counter show / counter reset read and clear the Redis state of the
# limits of a route: the per-key limit of k1, used up above.
k1id=$(key_id "$k1")
ctl counter show "$tenant" /scope/key --key "$k1id" >"$T_TMP/counter.out"
check "counter show: the per-key counter of k1 holds 5 ($(tail -n 1 "$T_TMP/counter.out"))" \
    matches "$(tail -n 1 "$T_TMP/counter.out")" ' sliding_window +key +[0-9]+ +.*cur=5'
ctl counter show "$tenant" /scope/key --key "$k1id" --json >"$T_TMP/counter.json"
check "counter show --json: the key and the state" \
    eq "$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["counters"][0]; print(r["count"], r["state"]["cur"], r["key"].startswith("rl:{"))' "$T_TMP/counter.json")" \
    "key 5 True"
seq_checks 1 "$k1" "$(check_body /scope/key u1)"
check "before the reset k1 is denied on /scope/key" eq "$(statuses)" "429 "
ctl counter reset "$tenant" /scope/key --key "$k1id" >"$T_TMP/reset.out"
check "counter reset clears the counter in Redis" \
    contains "$(cat "$T_TMP/reset.out")" "1 of 1 counters cleared"
seq_checks 6 "$k1" "$(check_body /scope/key u1)"
check "after the reset k1 has its 5 again ($(statuses))" \
    eq "$(statuses)" "200 200 200 200 200 429 "
check "and k2 was not reset (still denied)" \
    eq "$(seq_checks 1 "$k2" "$(check_body /scope/key u1)"; statuses)" "429 "

# The shared over-limit cache: once Redis has denied a counter, the pool
# answers its checks 429 without Redis until the Retry-After Redis gave;
# counter reset makes it forget at once.
olc_hits() {
    curl -s "$BASE_URL/metrics" |
        awk '$1 == "ratelimit_overlimit_cache_total{event=\"hit\"}" { print $2 }'
}
add_rule "$tenant" --route /olc --algorithm sliding_window --limit 2 \
    --window 3600 >/dev/null
calls0=$(script_calls)
hits0=$(olc_hits)
seq_checks 22 "$k1" "$(check_body /olc o1)"
calls1=$(script_calls)
hits1=$(olc_hits)
check "over-limit cache: 2 pass, 20 denied ($(count_status 200) + $(count_status 429))" \
    eq "$(count_status 200)/$(count_status 429)" 2/20
check "over-limit cache: at most 3 + $WORKERS script calls for 22 checks ($((calls1 - calls0)))" \
    le $((calls1 - calls0)) $((3 + WORKERS))
check "over-limit cache: the other denials came from the cache ($hits0 -> $hits1)" \
    ge $((hits1 - hits0)) $((20 - 1 - WORKERS))
check "over-limit cache: a denial from the cache has Retry-After and remaining 0" \
    eq "$(batch_header 22 X-RateLimit-Remaining) $(is_int "$(batch_header 22 Retry-After)" && echo ra)" \
    "0 ra"
ctl counter reset "$tenant" /olc --subject o1 >/dev/null
olc_passes() {
    seq_checks 1 "$k1" "$(check_body /olc o1)"
    [ "$(statuses)" = "200 " ]
}
check "over-limit cache: counter reset is seen by every worker: the next check passes" \
    retry 30 olc_passes

ctl rule list "$tenant" >"$T_TMP/scope.list"
check "rule list shows what each limit counts" \
    eq "$(awk '$2 == "/scope/tenant" || $2 == "/scope/key" { print $2, $12 }' \
        "$T_TMP/scope.list" | sort | tr '\n' ' ')" \
    "/scope/key key /scope/tenant tenant "

# ---------------------------------------------------------------- peek

# A peek reports what would remain after this request, and writes nothing.
tenant=$(uniq_name peek)
tid=$(new_tenant_id "$tenant")
key=$(new_key "$tenant")
rule=$(add_rule "$tenant" --route /peek --algorithm sliding_window \
    --limit 10 --window 60)
lid=$(limit_id "$tenant" "$rule" default)
avoid_edge 60 3
subj=$(uniq_name peek)
pkey=$(counter_key "$tid" "$rule" "$lid" "$subj")
peek_body="{\"route\":\"/peek\",\"subject\":\"$subj\",\"peek\":true}"
check_req "$key" "$peek_body"
check "peek on a new subject: 200, remaining 9 ($BODY)" \
    eq "$STATUS $(json_field remaining)" "200 9"
check "peek on a new subject: nothing written to Redis" \
    eq "$(rcli EXISTS "$pkey")" 0
check_req "$key" "$(check_body /peek "$subj")"
check "a real check: remaining 9" eq "$(json_field remaining)" 9
before=$(state "$pkey")
peeks=
for i in 1 2 3; do
    check_req "$key" "$peek_body"
    peeks="$peeks $STATUS/$(json_field remaining)"
done
check "3 peeks report the same remaining ($peeks)" \
    eq "$peeks" " 200/8 200/8 200/8"
check "3 peeks change nothing in Redis ($before)" eq "$(state "$pkey")" "$before"
check "the counter is 1 after the peeks" eq "$(field "$pkey" cur)" 1
check_req "$key" "$(check_body /peek "$subj")"
check "a real check after the peeks: remaining 8, as they said" \
    eq "$(json_field remaining)" 8
check "the real check counts (cur 2)" eq "$(field "$pkey" cur)" 2
check_req "$key" "$peek_body"
check "a peek after it: remaining 7" eq "$(json_field remaining)" 7
# Used up: a peek answers as the check would (429), still without writing.
seq_checks 8 "$key" "$(check_body /peek "$subj")"
check "8 more real checks pass ($(statuses))" eq "$(count_status 200)" 8
before=$(state "$pkey")
check_req "$key" "$peek_body"
check "a peek when used up: 429, allowed false" \
    eq "$STATUS $(json_field allowed)" "429 false"
check "a peek when used up writes nothing" eq "$(state "$pkey")" "$before"

# ---------------------------------------------------------------- shadow

tenant=$(uniq_name shadow)
new_tenant "$tenant"
key=$(new_key "$tenant")
rule=$(add_rule "$tenant" --route /shadow --shadow --name trial \
    --algorithm sliding_window --limit 3 --window 60)
subj=$(uniq_name shadow)
body=$(check_body /shadow "$subj")
seq_checks 4 "$key" "$body"
check "shadow: 4 checks over a limit of 3 all answer 200 ($(statuses))" \
    eq "$(statuses)" "200 200 200 200 "
check "shadow: the first 3 are not shadow-denied" \
    eq "$(batch_field 3 shadow_denied)" "<absent>"
last=$(batch_body 4)
check "shadow: the 4th says shadow_denied true" \
    eq "$(json_field shadow_denied "$last")" true
check "shadow: the 4th is allowed" eq "$(json_field allowed "$last")" true
check "shadow: its policy is marked shadow" \
    eq "$(policy_field trial shadow "$last")" true
check "shadow: and says allowed false" \
    eq "$(policy_field trial allowed "$last")" false
check "shadow: no denied_by" eq "$(json_field denied_by "$last")" "<absent>"
check "shadow: no Retry-After" eq "$(batch_header 4 Retry-After)" ""
ctl rule set "$rule" --shadow off >/dev/null
check "shadow off: 429 within 3 s" poll_status 30 429 "$key" "$body"
check "shadow off: denied_by names the limit" \
    json_equal "$(json_field denied_by)" '["trial"]'
check "shadow off: no shadow_denied" \
    eq "$(json_field shadow_denied)" "<absent>"

# ---------------------------------------------------------------- per route

tenant=$(uniq_name per)
tid=$(new_tenant_id "$tenant")
key=$(new_key "$tenant")
rroute=$(add_rule "$tenant" --route '/pr/*' --per route \
    --algorithm sliding_window --limit 2 --window 60)
add_rule "$tenant" --route '/ps/*' --per rule \
    --algorithm sliding_window --limit 2 --window 60 >/dev/null
subj=$(uniq_name per)
avoid_edge 60 3
seq_checks 3 "$key" "$(check_body /pr/1 "$subj")"
check "per route: /pr/1 allows 2 of 3 ($(statuses))" \
    eq "$(statuses)" "200 200 429 "
check_req "$key" "$(check_body /pr/2 "$subj")"
check "per route: /pr/2 has its own counter (200)" eq "$STATUS" 200
check "per route: remaining 1 on /pr/2" eq "$(json_field remaining)" 1
lid=$(limit_id "$tenant" "$rroute" default)
check "per route: the key of /pr/1 carries the route's hash" \
    eq "$(field "$(counter_key "$tid" "$rroute" "$lid" "$subj" /pr/1)" cur)" 2
seq_checks 2 "$key" "$(check_body /ps/1 "$subj")"
check "per rule: /ps/1 allows 2 ($(statuses))" eq "$(statuses)" "200 200 "
check_req "$key" "$(check_body /ps/2 "$subj")"
check "per rule: /ps/2 shares the counter (429)" eq "$STATUS" 429

# ---------------------------------------------------------------- always

tenant=$(uniq_name always)
tid=$(new_tenant_id "$tenant")
key=$(new_key "$tenant")
add_rule "$tenant" --route '*' --always --name quota \
    --algorithm fixed_window --limit 3 --calendar minute >/dev/null
rule=$(add_rule "$tenant" --route '/al/*' --name specific \
    --algorithm sliding_window --limit 100 --window 60)
lid=$(limit_id "$tenant" "$rule" specific)
subj=$(uniq_name always)
kspec=$(counter_key "$tid" "$rule" "$lid" "$subj")
avoid_edge 60 4
seq_checks 5 "$key" "$(check_body /al/1 "$subj")"
check "always: a quota of 3 with the specific rule: 3 pass ($(statuses))" \
    eq "$(statuses)" "200 200 200 429 429 "
check "always: both limits are decided (2 policies)" \
    eq "$(python3 -c 'import json,sys; print(len(json.loads(sys.argv[1])["policies"]))' "$(batch_body 1)")" 2
check "always: the quota denies" \
    json_equal "$(json_field denied_by "$(batch_body 4)")" '["quota"]'
check "always: the specific rule allowed it" \
    eq "$(policy_field specific allowed "$(batch_body 4)")" true
check "always: the specific rule counted only the 3 that passed" \
    eq "$(field "$kspec" cur)" 3
check_req "$key" "$(check_body /other "$subj")"
check "always: the quota also applies where no other rule matches (429)" \
    eq "$STATUS" 429
check "always: there it is the only policy" \
    eq "$(json_field algorithm)" fixed_window

# ---------------------------------------------------------------- headers

# One rule with one limit of each algorithm; the hourly quota of 3 denies
# the 4th check.  TB: q = capacity, w = capacity / rate; GCRA under a
# second: the quota scaled to a second; calendar hour: w = 3600.
tenant=$(uniq_name hdr)
new_tenant "$tenant"
key=$(new_key "$tenant")
rule=$(add_rule "$tenant" --route /hdr --name bucket \
    --algorithm token_bucket --capacity 10 --refill-rate 2)
ctl limit add "$rule" --name window --algorithm sliding_window \
    --limit 20 --window 30 >/dev/null
ctl limit add "$rule" --name paced --algorithm gcra --limit 5 \
    --period 500ms --burst 2 >/dev/null
ctl limit add "$rule" --name hourly --algorithm fixed_window --limit 3 \
    --calendar hour >/dev/null
avoid_edge 3600 5
seq_checks 4 "$key" "$(check_body /hdr "$(uniq_name hdr)")"
check "headers: 3 pass, the hourly quota denies the 4th ($(statuses))" \
    eq "$(statuses)" "200 200 200 429 "
for i in 1 2 3 4; do
    check "headers: response $i: RateLimit and RateLimit-Policy agree with the body" \
        rate_headers_ok "$T_TMP/batch.$i.head" "$(batch_body "$i")" \
        bucket=10/5 window=20/30 paced=3/1 hourly=3/3600
done
check "headers: the 429 names the hourly quota" \
    contains "$(batch_field 4 denied_by)" hourly
ra=$(batch_header 4 Retry-After)
check "headers: Retry-After of the hourly quota is within the hour ($ra)" \
    le "$ra" 3600
check "headers: Retry-After is more than a few seconds ($ra)" ge "$ra" 5
check_req "$key" "$(check_body /hdr "$(uniq_name hdr)")"
check "headers: a single allowed check agrees too" \
    rate_headers_ok "$T_TMP/headers" "$BODY"

# A rule with one limit has no policies in its body; the fields still
# have that one member.
tenant=$(uniq_name hdr1)
new_tenant "$tenant"
key=$(new_key "$tenant")
add_rule "$tenant" --route /one --name solo --algorithm gcra --limit 2 \
    --period 1h >/dev/null
seq_checks 2 "$key" "$(check_body /one "$(uniq_name one)")"
check "headers, one limit: 1 pass, 1 denied ($(statuses))" \
    eq "$(statuses)" "200 429 "
check "headers, one limit: allowed response agrees" \
    rate_headers_ok "$T_TMP/batch.1.head" "$(batch_body 1)" solo=1/1800
check "headers, one limit: denied response agrees (Retry-After = t)" \
    rate_headers_ok "$T_TMP/batch.2.head" "$(batch_body 2)" solo=1/1800

# One quota for GCRA: --limit 10 --period 1s --burst 5 lets 6 through at
# once, and says so everywhere: the body's limit, X-RateLimit-Limit and q.
tenant=$(uniq_name quota)
new_tenant "$tenant"
key=$(new_key "$tenant")
add_rule "$tenant" --route /quota --name burst --algorithm gcra --limit 10 \
    --period 1s --burst 5 >/dev/null
check_req "$key" "$(check_body /quota "$(uniq_name q)")"
check "gcra quota: limit, X-RateLimit-Limit and RateLimit-Policy q are all 6" \
    eq "$(json_field limit) $(header X-RateLimit-Limit) $(header RateLimit-Policy)" \
    '6 6 "burst";q=6;w=1'
check "gcra quota: the headers agree with the body" \
    rate_headers_ok "$T_TMP/headers" "$BODY" burst=6/1
# A cost above it: 400 naming the limit, never a 429 to retry.
check_req "$key" "$(check_body /quota "$(uniq_name q)" 7)"
check "cost 7 against burst + 1 = 6: 400 cost_exceeds_limit" \
    eq "$STATUS $(json_field error) $(json_field limit) $(json_field max_cost)" \
    "400 cost_exceeds_limit burst 6"
check "cost 7: no Retry-After, no RateLimit fields" \
    eq "$(header Retry-After)$(header RateLimit)" ""

# On a denial every limit reports what it has now: a limit that would have
# allowed the request is not shown as charged, however often it repeats.
tenant=$(uniq_name now)
new_tenant "$tenant"
key=$(new_key "$tenant")
add_rule "$tenant" --route /now --name second --algorithm gcra --limit 1 \
    --period 1h >/dev/null
add_rule "$tenant" --route '*' --always --name monthly \
    --algorithm fixed_window --limit 1000000 --calendar month \
    --count tenant >/dev/null
avoid_edge 86400 5
seq_checks 4 "$key" "$(check_body /now "$(uniq_name now)")"
check "denial: 1 passes, 3 denied ($(statuses))" \
    eq "$(statuses)" "200 429 429 429 "
check "denial: the monthly quota reports 999999 on every answer" \
    eq "$(for i in 1 2 3 4; do policy_field monthly remaining "$(batch_body "$i")"; done | tr '\n' ' ')" \
    "999999 999999 999999 999999 "
check "denial: and so does the RateLimit field of the 429s" \
    contains "$(batch_header 4 RateLimit)" '"monthly";r=999999;'
for i in 2 4; do
    check "denial: response $i: RateLimit and RateLimit-Policy agree with the body" \
        rate_headers_ok "$T_TMP/batch.$i.head" "$(batch_body "$i")"
done

# ---------------------------------------------------------------- accuracy

if ACCURACY_REDIS_PORT=$((REDIS_PORT + 19)) "$ROOT/scripts/accuracy" --quick \
    >"$T_TMP/accuracy.out" 2>&1; then
    rows=$(grep -cE '^\| (sliding_window|fixed_window|token_bucket|gcra) \|' \
        "$T_TMP/accuracy.out")
    check "scripts/accuracy --quick prints a table of 4 algorithms ($rows)" \
        eq "$rows" 4
    check "scripts/accuracy --quick: the table has its header" \
        matches "$(cat "$T_TMP/accuracy.out")" '^\| algorithm \| allowed \|'
else
    fail "scripts/accuracy --quick exits 0" \
        "$(tail -n 10 "$T_TMP/accuracy.out")"
fi

# ---------------------------------------------------------------- failure mode

# Last, since it stops Redis: a fail-open rule answers 200 without Redis,
# a closed one 503, and a closed always rule keeps an open rule shut.
tenant=$(uniq_name fail)
new_tenant "$tenant"
key=$(new_key "$tenant")
add_rule "$tenant" --route '/open*' --failure-mode open \
    --algorithm sliding_window --limit 100 --window 60 >/dev/null
add_rule "$tenant" --route '/closed*' --failure-mode closed \
    --algorithm sliding_window --limit 100 --window 60 >/dev/null
add_rule "$tenant" --route '/mixed*' --failure-mode open \
    --algorithm sliding_window --limit 100 --window 60 >/dev/null
add_rule "$tenant" --route '/mixed*' --always --name guard \
    --algorithm sliding_window --limit 100 --window 60 >/dev/null
subj=$(uniq_name fail)
# Every worker learns the tenant's rules while Redis is up.
par_checks 16 8 "$key" "$(check_body /open/1 "$subj")"
check "failure mode: the open rule works with Redis up ($(statuses))" \
    eq "$(count_status 200)" 16

stack stop-redis >/dev/null
check "failure mode: Redis is stopped" ne "$(rcli ping 2>/dev/null)" PONG
check_req "$key" "$(check_body /open/1 "$subj")"
check "fail open: 200" eq "$STATUS" 200
check "fail open: X-RateLimit-Status: fail-open" \
    eq "$(header X-RateLimit-Status)" fail-open
check "fail open: body fail_open true" eq "$(json_field fail_open)" true
check "fail open: body allowed true" eq "$(json_field allowed)" true
check_req "$key" "$(check_body /closed/1 "$subj")"
check "fail closed: 503" eq "$STATUS" 503
check "fail closed: Retry-After >= 1" ge "$(header Retry-After)" 1
check "fail closed: error service_unavailable" \
    eq "$(json_field error)" service_unavailable
check "fail closed: no X-RateLimit-Status: fail-open" \
    ne "$(header X-RateLimit-Status)" fail-open
check_req "$key" "$(check_body /mixed/1 "$subj")"
check "an open rule with a closed always rule: 503" eq "$STATUS" 503

stack start-redis >/dev/null
check "failure mode: Redis is started again" eq "$(rcli ping 2>/dev/null)" PONG
check "failure mode: the closed rule answers 200 again within 5 s" \
    poll_status 50 200 "$key" "$(check_body /closed/1 "$subj")"
check "failure mode: the open rule decides again within 5 s" \
    poll_status 50 200 "$key" "$(check_body /open/2 "$subj")"
check "failure mode: with a real decision (remaining 99)" \
    eq "$(json_field remaining)" 99

finish
