#!/bin/sh
# test_exposure.sh -- what /status, /metrics and /dashboard show to whom,
# and that no request can write lines of its own into them or the logs.
#
# Two tenants, A and B, on a pool of their own of one worker.  Both make
# checks (denied too, so that both are in the top list and in /metrics);
# before each look at /status, an authorizer request for a route of B's
# (or A's) leaves it as the worker's last request, which the look, answered
# by the same worker, shows.  Loopback without
# a key is the operator and sees both; A's check key gets 403; A's admin
# key sees A (its name, its route) and never B's name or route, in every
# format of /status and in /metrics.
#
# Then an authorizer request whose REQUEST_URI and X-Request-Id hold raw
# CR/LF (a raw FastCGI param: a web server would pass it as it got it) and
# one with a 60 KB X-Request-Id: /status?full keeps one "idle processes:"
# line, the HTML shows the bytes escaped, the access log (logfmt) has no
# line the request wrote and none longer than 2 KB.
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

EX=$((PORT + 151))
serve_dir ratelimit-exposure

# authz.py: authorizer requests straight to a pool's socket.
#   one ADDRESS KEY URI [REQUEST_ID]   prints the status; URI and
#                                      REQUEST_ID take \r, \n, \xHH
cat >"$D/authz.py" <<'EOF'
import os
import sys

sys.path.insert(0, os.path.join(os.environ["ROOT"], "t", "lib"))
import fcgi_client as fc


def send(sock, key, uri, rid=None):
    params = fc.http_params("GET", "/", extra={"HTTP_X_API_KEY": key})
    params["REQUEST_URI"] = params["SCRIPT_NAME"] = fc._unescape(uri)
    if rid is not None:
        params["HTTP_X_REQUEST_ID"] = fc._unescape(rid)
    sock.sendall(fc.encode_request(params, role=fc.AUTHORIZER))
    return fc.read_response(fc.RecordReader(sock), 1)["status"]


cmd, addr = sys.argv[1], sys.argv[2]
s = fc.connect(addr)
print(send(s, sys.argv[3], sys.argv[4],
           sys.argv[5] if len(sys.argv) > 5 else None))
s.close()
EOF
export ROOT

ta=$(uniq_name exa)
tb=$(uniq_name exb)
new_tenant "$ta"
new_tenant "$tb"
a_check=$(new_key "$ta")
a_admin=$(new_key "$ta" admin)
b_check=$(new_key "$tb")
new_sw_rule "$ta" '/exa/*' 1 3600
new_sw_rule "$tb" '/exb/*' 1 3600
rule_b=$(ctl rule list "$tb" --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["rules"][0]["id"])')
# The routes that only the authorizer requests name.
route_a=/exa/$(uniq_name route-a)
route_b=/exb/$(uniq_name route-b)

private_app ex "$EX" "workers=1" \
    "access_log=$D/ex-access.log" "access_log_format=logfmt" \
    "log=$D/ex-error.log" ||
    fail "a pool of its own starts"
EXURL=http://127.0.0.1:$EX
SOCK=unix:$D/ex.sock

# get PATH [CURL-ARG...]: one request to the pool; sets STATUS and BODY.
get() {
    gt_path=$1
    shift
    fetch "$EXURL$gt_path" "$@"
}

# ------------------------------------------------- who sees what

avoid_edge 60 10
for k in "$a_check /exa/c" "$b_check /exb/c"; do
    for i in 1 2 3; do
        curl -s -o /dev/null -m 5 -X POST "$EXURL/v1/check" \
            -H "X-API-Key: ${k%% *}" -H 'Content-Type: application/json' \
            -d "{\"route\":\"${k#* }\",\"subject\":\"s$i\"}"
        curl -s -o /dev/null -m 5 -X POST "$EXURL/v1/check" \
            -H "X-API-Key: ${k%% *}" -H 'Content-Type: application/json' \
            -d "{\"route\":\"${k#* }\",\"subject\":\"s$i\"}"
    done
done
# last KEY URI: an authorizer request for URI with KEY, so that the pool's
# one worker shows it as its last request in /status?full (a worker writes
# its request's texts when it ends, so the next look, answered by the same
# worker, still shows them).  Prints the status.
last() {
    python3 "$D/authz.py" one "$SOCK" "$1" "$2"
}

# The operator: loopback, no key.  Without this the checks below would
# prove nothing.
check "authorizer requests for B's and A's routes answered ($(last "$b_check" "$route_b") $(last "$a_check" "$route_a"))" \
    true
last "$b_check" "$route_b" >/dev/null
get '/status?full'
check "operator: /status?full shows B's route and name" \
    eq "$(contains "$BODY" "$route_b" && contains "$BODY" "$tb" && echo y)" y
last "$a_check" "$route_a" >/dev/null
get '/status?full'
check "operator: and A's" \
    eq "$(contains "$BODY" "$route_a" && contains "$BODY" "$ta" && echo y)" y
get '/status?json&history'
check "operator: the top list names both tenants" \
    eq "$(contains "$BODY" "\"$ta\"" && contains "$BODY" "\"$tb\"" && echo y)" y
get /metrics
check "operator: /metrics has both tenants' series" \
    eq "$(contains "$BODY" "tenant=\"$ta\"" && contains "$BODY" "tenant=\"$tb\"" && echo y)" y

# B shown to A: counted for the fault table.
leaks=0
reads=0
# no_b WHAT: the last body names neither B nor B's route (nor B's rule in
# the top list).
no_b() {
    reads=$((reads + 1))
    if contains "$BODY" "$tb" || contains "$BODY" "$route_b" ||
        contains "$BODY" "\"rule\":$rule_b,"; then
        leaks=$((leaks + 1))
        fail "$1: nothing of tenant B" "$(printf '%.600s' "$BODY")"
    else
        pass "$1: nothing of tenant B"
    fi
}

for p in /status '/status?full' '/status?json&history&full' /metrics \
    /dashboard; do
    last "$b_check" "$route_b" >/dev/null
    get "$p" -H "X-API-Key: $a_check"
    check "A's check key: $p is 403 ($STATUS)" eq "$STATUS" 403
    no_b "A's check key: $p"
done
check "and says an admin key is needed" contains "$BODY" "admin key"

for p in /status '/status?full' '/status?full&html' \
    '/status?json&history&full' '/status?openmetrics' /metrics; do
    last "$b_check" "$route_b" >/dev/null
    get "$p" -H "X-API-Key: $a_admin"
    check "A's admin key: $p is 200 ($STATUS)" eq "$STATUS" 200
    no_b "A's admin key: $p"
done
last "$b_check" "$route_b" >/dev/null
get '/status?full' -H "Authorization: Bearer $a_admin"
check "A's admin key as a Bearer token: 200" eq "$STATUS" 200
no_b "A's admin key as a Bearer token: /status?full"
last "$a_check" "$route_a" >/dev/null
get '/status?full' -H "X-API-Key: $a_admin"
check "A's admin key: ?full shows A's name and A's route" \
    eq "$(contains "$BODY" "$route_a" && contains "$BODY" "$ta" && echo y)" y
check "A's admin key: ?full still has a pool (idle processes) and an entry per worker" \
    eq "$(printf '%s\n' "$BODY" | grep -c '^idle processes:') $(printf '%s\n' "$BODY" | grep -c '^pid: ')" "1 1"
last "$a_check" "$route_a" >/dev/null
get '/status?json&history&full' -H "X-API-Key: $a_admin"
check "A's admin key: the top list is A's" \
    eq "$(python3 -c '
import json, sys
d = json.loads(sys.argv[1])
print(sorted(set(t["tenant"] for t in d["top"])))' "$BODY")" "['$ta']"
check "A's admin key: the pool's history is there" \
    eq "$(python3 -c '
import json, sys
print(len(json.loads(sys.argv[1])["history"]["denied"]))' "$BODY")" 900
check "A's admin key: A's route in the processes" \
    eq "$(python3 -c '
import json, sys
d = json.loads(sys.argv[1])
print([p["tenant"] for p in d["processes"] if p["request uri"] == sys.argv[2]])' \
    "$BODY" "$route_a")" "['$ta']"
get /metrics -H "X-API-Key: $a_admin"
check "A's admin key: /metrics has A's series" \
    matches "$BODY" "^ratelimit_tenant_checks_total\\{tenant=\"$ta\",result=\"denied\"\\} [1-9]"
check "A's admin key: and the pool's" \
    matches "$BODY" '^ratelimit_checks_total\{result="allowed"\} [0-9]+$'
get /status -H "X-API-Key: rl_no_such_key_$$"
check "an unknown key from loopback: 401, not the operator's view ($STATUS)" \
    eq "$STATUS" 401
no_b "an unknown key from loopback"
fault_row "tenant A's check and admin keys read /status, /metrics: B shown" \
    "$reads" "$leaks" "-"

# ------------------------------------------------- control bytes

# A route of A (so that the access log has the line) whose path holds raw
# CR/LF and a php-fpm line, and a request id that would start a log line.
# A worker keeps the path in /status?full until its next request, so each
# look at /status comes right after one.
rid=$(uniq_name rid)
forge() {
    python3 "$D/authz.py" one "$SOCK" "$a_check" \
        '/exa/f\r\nidle processes:       999\r\n' \
        "$rid\\r\\ntime=forged request_id=$rid-forged"
}
big=$(uniq_name big)
code=$(python3 "$D/authz.py" one "$SOCK" "$a_check" /exa/big \
    "$big$(head -c 60000 /dev/zero | tr '\0' x)")
check "an authorizer request with a 60 KB X-Request-Id is answered ($code)" \
    eq "$(printf '%s' "$code" | grep -c '^[0-9][0-9][0-9]$')" 1
code=$(forge)
check "an authorizer request with CR/LF in REQUEST_URI is answered ($code)" \
    eq "$(printf '%s' "$code" | grep -c '^[0-9][0-9][0-9]$')" 1
forged=0
get '/status?full'
n=$(printf '%s\n' "$BODY" | grep -c '^idle processes:')
check "/status?full: one \"idle processes:\" line ($n)" eq "$n" 1
[ "$n" = 1 ] || forged=$((forged + 1))
check "/status?full: the URI with its CR/LF escaped" \
    contains "$BODY" 'request URI:          /exa/f\r\nidle processes:       999\r\n'
forge >/dev/null
get '/status?full&html'
check "/status?full&html: no raw CR in the page" \
    eq "$(printf '%s' "$BODY" | tr -dc '\r' | wc -c | tr -d ' ')" 0
check "/status?full&html: the URI escaped" \
    contains "$BODY" '/exa/f\r\nidle processes:'
retry 20 grep -q "$big" "$D/ex-access.log"
n=$(cat "$D/ex-access.log" "$D/ex-error.log" |
    grep -c '^time=forged\|^idle processes' || true)
check "no log line begins with what the request wrote ($n)" eq "$n" 0
[ "$n" = 0 ] || forged=$((forged + 1))
line=$(grep -F "$rid" "$D/ex-access.log" | head -n 1)
check "access log: the request id and path with CR/LF escaped" \
    eq "$(contains "$line" "request_id=\"$rid\\r\\ntime=forged" &&
        contains "$line" 'path="/exa/f\r\nidle processes:' && echo y)" y
long=$(awk '{ if (length($0) > n) n = length($0) } END { print n + 0 }' \
    "$D/ex-access.log")
check "access log: no line over 2 KB (longest $long bytes)" le "$long" 2048
[ "$long" -le 2048 ] || forged=$((forged + 1))
# (Cut here too, so that a failure does not print 60 KB.)
check "access log: the 60 KB request id cut, with a marker" \
    matches "$(grep -F "$big" "$D/ex-access.log" | head -n 1 | cut -c 1-2100)" \
    "request_id=$big"'x+\.\.\. '
fault_row "CR/LF in REQUEST_URI and X-Request-Id, a 60 KB X-Request-Id" \
    3 "$forged" "-"
stop_private

finish
