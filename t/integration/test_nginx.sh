#!/bin/sh
# nginx in front of ratelimit-fcgi, with the shipped configurations
# conf/nginx-responder.conf and conf/nginx-auth-request.conf filled in by
# sed: the check API through fastcgi_pass, and auth_request gating static
# files (allowed requests carry their X-RateLimit-* values; the one past the
# limit gets 429 with Retry-After; Redis down gets 503), by API key and, for
# requests without one, by client address (X-Forwarded-For from a trusted
# proxy only).  Its own nginx (as nobody, when run as root) and its own
# ratelimit-fcgi on a Unix socket, both on 127.0.0.1 and stopped at the end;
# PostgreSQL and Redis are the stack's.  Run by t/integration/run.sh.
# shellcheck disable=SC2317 # helpers called through `check` and traps

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

NGINX=${NGINX:-/usr/sbin/nginx}
RESP_PORT=$((PORT + 31))
AUTH_PORT=$((PORT + 32))
RESP_URL=http://127.0.0.1:$RESP_PORT
AUTH_URL=http://127.0.0.1:$AUTH_PORT

if [ ! -x "$NGINX" ]; then
    fail "nginx is installed ($NGINX)"
    finish
fi

# Everything of this file lives in D, outside VAR (which is private to
# root): nginx's workers run as nobody and must reach the socket and the
# document root.
D=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-nginx.XXXXXX")
chmod 755 "$D"
mkdir -p "$D/run" "$D/tmp" "$D/htdocs/protected"
chmod 755 "$D/run" "$D/htdocs" "$D/htdocs/protected"
echo "protected content" >"$D/htdocs/protected/index.html"
chmod 644 "$D/htdocs/protected/index.html"
SOCKET=$D/run/fcgi.sock

APP_PID=
NGX_PID=

cleanup() {
    stop_process "$NGX_PID" QUIT
    stop_process "$APP_PID" TERM
    NGX_PID=
    APP_PID=
    restore_redis
    rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- data

tenant=$(uniq_name ngx)
new_tenant "$tenant"
key=$(new_key "$tenant")
key2=$(new_key "$tenant")
key3=$(new_key "$tenant")
admin_key=$(new_key "$tenant" admin)
new_sw_rule "$tenant" '/protected/*' 3 60
new_sw_rule "$tenant" '/resp/*' 2 60
anon=$(uniq_name ngxanon)
new_tenant "$anon"
new_sw_rule "$anon" '/protected/*' 3 60
suspended=$(uniq_name ngxsusp)
new_tenant "$suspended"
suspended_key=$(new_key "$suspended")
new_sw_rule "$suspended" '/protected/*' 3 60
ctl tenant suspend "$suspended" >/dev/null
check "tenants, keys and rules created" matches "$key$key2$key3" '^rl_.*rl_.*rl_'

# ---------------------------------------------------------------- start

# The application: its own socket, for nginx's user; 127.0.0.5 is a proxy
# whose X-Forwarded-For is believed.
app_conf_lines "$D/ratelimit.conf" \
    "listen = unix:$SOCKET" \
    "listen_mode = 0660" \
    "listen_group = $(id -gn nobody 2>/dev/null || echo nogroup)" \
    "workers = 2" \
    "anonymous_tenant = $anon" \
    "trusted_proxies = 127.0.0.5"
"$BUILD/ratelimit-fcgi" -t -c "$D/ratelimit.conf" >/dev/null 2>&1
check "the application accepts its configuration" eq "$?" 0
"$BUILD/ratelimit-fcgi" -c "$D/ratelimit.conf" >>"$D/app.log" 2>&1 &
APP_PID=$!
n=0
while [ ! -S "$SOCKET" ] && [ "$n" -lt 50 ] && alive "$APP_PID"; do
    sleep 0.1
    n=$((n + 1))
done
check "the application listens on its Unix socket" test -S "$SOCKET"
if [ "$(id -u)" = 0 ]; then
    check "the socket is 0660 with nobody's group ($(stat -c '%a %G' "$SOCKET" 2>/dev/null))" \
        eq "$(stat -c '%a %G' "$SOCKET" 2>/dev/null)" \
        "660 $(id -gn nobody 2>/dev/null || echo nogroup)"
fi

sed -e "s|@LISTEN@|127.0.0.1:$RESP_PORT|g" -e "s|@SOCKET@|$SOCKET|g" \
    "$ROOT/conf/nginx-responder.conf" >"$D/responder.conf"
sed -e "s|@LISTEN@|127.0.0.1:$AUTH_PORT|g" -e "s|@ROOT@|$D/htdocs|g" \
    -e "s|@SOCKET@|$SOCKET|g" \
    "$ROOT/conf/nginx-auth-request.conf" >"$D/auth-request.conf"
check "conf/nginx-responder.conf: every placeholder filled" \
    filled "$D/responder.conf"
check "conf/nginx-auth-request.conf: every placeholder filled" \
    filled "$D/auth-request.conf"
nginx_conf "$D/nginx.conf" \
    user="nobody $(id -gn nobody 2>/dev/null || echo nogroup)" workers=2 \
    connections=256 log_level=info access_log="$D/nginx-access.log" \
    "$D/responder.conf" "$D/auth-request.conf"
"$NGINX" -t -q -c "$D/nginx.conf" -e "$D/nginx-error.log" >>"$D/nginx-start.log" 2>&1
check "nginx -t accepts both shipped files" eq "$?" 0
"$NGINX" -c "$D/nginx.conf" -e "$D/nginx-error.log" -g 'daemon off;' \
    >>"$D/nginx-start.log" 2>&1 &
NGX_PID=$!

n=0
while :; do
    fetch "$RESP_URL/health/ready"
    [ "$STATUS" = 200 ] && break
    n=$((n + 1))
    if [ "$n" -gt 50 ] || ! alive "$NGX_PID" || ! alive "$APP_PID"; then
        break
    fi
    sleep 0.2
done
check "nginx -> application: /health/ready is 200" eq "$STATUS" 200
if [ "$STATUS" != 200 ]; then
    show_logs "$D"
    finish
fi
if [ "$(id -u)" = 0 ]; then
    # A worker just forked is still root until it drops privileges:
    # give them a moment (at most 2 s) to settle.
    n=0
    while :; do
        workers=$(ps -o user= --ppid "$NGX_PID" | sort -u | tr -d ' \n')
        [ "$workers" = nobody ] || [ "$n" -ge 20 ] && break
        n=$((n + 1))
        sleep 0.1
    done
    check "nginx's workers run as nobody ($workers)" eq "$workers" nobody
fi

# ---------------------------------------------------------------- responder

body=$(check_body /resp/1 "$(uniq_name s)")
codes=
for i in 1 2 3; do
    fetch "$RESP_URL/v1/check" -X POST -H "X-API-Key: $key" \
        -H 'Content-Type: application/json' --data-raw "$body"
    codes="$codes $STATUS"
    [ "$i" = 1 ] && first_body=$BODY && first_limit=$(header X-RateLimit-Limit)
done
check "responder: POST /v1/check is 200, 200, then 429 ($codes)" \
    eq "$codes" " 200 200 429"
check "responder: allowed body" eq "$(json_field allowed "$first_body")" true
check "responder: X-RateLimit-Limit 2" eq "$first_limit" 2
check "responder: 429 has Retry-After ($(header Retry-After))" \
    ge "$(header Retry-After)" 1
check "responder: 429 body allowed false" eq "$(json_field allowed)" false

fetch "$RESP_URL/v1/check" -X POST -H 'Content-Type: application/json' \
    --data-raw "$body"
check "responder: no key is 401" eq "$STATUS" 401
check "responder: no key, error unauthorized" \
    eq "$(json_field error)" unauthorized

fetch "$RESP_URL/metrics"
check "responder: /metrics from 127.0.0.1 is 200" eq "$STATUS" 200
check "responder: /metrics is Prometheus text" \
    contains "$BODY" ratelimit_requests_total
fetch "$RESP_URL/metrics" --interface 127.0.0.2
check "responder: /metrics from 127.0.0.2 is refused (403)" eq "$STATUS" 403

fetch "$RESP_URL/_ratelimit/auth"
check "responder: the authorizer path is not served (404)" eq "$STATUS" 404

# ---------------------------------------------------------------- auth_request

page=$AUTH_URL/protected/index.html
now=$(date +%s)
codes=
remaining=
for i in 1 2 3; do
    fetch "$page" -H "X-API-Key: $key"
    codes="$codes $STATUS"
    remaining="$remaining $(header X-RateLimit-Remaining)"
    [ "$i" = 1 ] && first_body=$BODY && first_limit=$(header X-RateLimit-Limit) &&
        first_reset=$(header X-RateLimit-Reset) &&
        first_policy=$(header RateLimit-Policy)
done
check "auth_request: 3 requests within the limit are 200 ($codes)" \
    eq "$codes" " 200 200 200"
check "auth_request: the allowed request gets the content" \
    eq "$first_body" "protected content"
check "auth_request: X-RateLimit-Limit 3 reaches the client" \
    eq "$first_limit" 3
check "auth_request: X-RateLimit-Remaining 2 1 0 ($remaining)" \
    eq "$remaining" " 2 1 0"
check "auth_request: X-RateLimit-Reset is unix seconds ($first_reset)" \
    ge "$first_reset" "$now"
check "auth_request: X-RateLimit-Reset within two windows" \
    le "$first_reset" $((now + 125))
check "auth_request: RateLimit-Policy reaches the client ($first_policy)" \
    contains "$first_policy" "q=3;w=60"

fetch "$page" -H "X-API-Key: $key"
check "auth_request: past the limit, 429" eq "$STATUS" 429
check "auth_request: 429 has Retry-After ($(header Retry-After))" \
    ge "$(header Retry-After)" 1
# A sliding window forgets its previous window gradually: at most two.
check "auth_request: Retry-After at most two windows" \
    le "$(header Retry-After)" 120
check "auth_request: 429 has X-RateLimit-Remaining 0" \
    eq "$(header X-RateLimit-Remaining)" 0
check "auth_request: 429 is JSON" contains "$(header Content-Type)" \
    application/json
check "auth_request: 429 body error rate_limited" \
    eq "$(json_field error)" rate_limited
check "auth_request: 429 body retry_after = Retry-After" \
    eq "$(json_field retry_after)" "$(header Retry-After)"
check "auth_request: 429 body is not the content" ne "$BODY" \
    "protected content"

head -c 20000 /dev/zero | tr '\0' x >"$T_TMP/big"
fetch "$page" -H "X-API-Key: $key2" --data-binary @"$T_TMP/big"
# Allowed, then nginx's own 405 for a POST to a file (a refusal of the
# subrequest would be 500); it counts (see remaining 1 below).
check "auth_request: a POST with a big body is let through (405, $STATUS)" \
    eq "$STATUS" 405
fetch "$page?x=1" -H "X-API-Key: $key"
check "auth_request: the query string does not escape the limit (429)" \
    eq "$STATUS" 429

fetch "$page" -H "Authorization: Bearer $key2"
check "auth_request: Authorization: Bearer KEY works (200)" eq "$STATUS" 200
check "auth_request: another key has its own count (remaining 1)" \
    eq "$(header X-RateLimit-Remaining)" 1

fetch "$AUTH_URL/_ratelimit/auth" -H "X-API-Key: $key"
check "auth_request: the subrequest's location is internal (404)" \
    eq "$STATUS" 404
fetch "$page" -H "X-API-Key: rl_no_such_key_0123456789"
check "auth_request: unknown key is 401" eq "$STATUS" 401
fetch "$page" -H "X-API-Key: $admin_key"
check "auth_request: admin key is 403" eq "$STATUS" 403
check "auth_request: admin key, error forbidden" \
    eq "$(json_field error)" forbidden
fetch "$page" -H "X-API-Key: $suspended_key"
check "auth_request: suspended tenant is 403" eq "$STATUS" 403
check "auth_request: suspended tenant, error tenant_suspended" \
    eq "$(json_field error)" tenant_suspended

# The rules see the path nginx matched, however the client spelled it.
key4=$(new_key "$tenant")
got=$(request_statuses 3 -H "X-API-Key: $key4" "$page")
check "auth_request: a fourth key, 3 x 200 ($got)" eq "$got" " 200 200 200"
fetch "$AUTH_URL/%70rotected/index.html" -H "X-API-Key: $key4"
check "auth_request: /%70rotected/ is the same path (429)" eq "$STATUS" 429
fetch "$AUTH_URL//protected//index.html" -H "X-API-Key: $key4"
check "auth_request: //protected//index.html is the same path (429)" \
    eq "$STATUS" 429
fetch "$AUTH_URL/x/../protected/./index.html" --path-as-is \
    -H "X-API-Key: $key4"
check "auth_request: /x/../protected/./index.html is the same path (429)" \
    eq "$STATUS" 429

# ---------------------------------------------------------------- by address

# No key: the anonymous tenant's rule, counted per client address.  curl
# binds its side of the connection to other loopback addresses.
got=$(request_statuses 4 --interface 127.0.0.2 "$page")
check "anonymous from 127.0.0.2: 3 x 200 then 429 ($got)" \
    eq "$got" " 200 200 200 429"
check "nginx saw the client as 127.0.0.2" grep -q '^127\.0\.0\.2 ' \
    "$D/nginx-access.log"
fetch "$page" --interface 127.0.0.3
check "anonymous from 127.0.0.3: its own count (200)" eq "$STATUS" 200
check "anonymous from 127.0.0.3: remaining 2" \
    eq "$(header X-RateLimit-Remaining)" 2

# 127.0.0.5 is a trusted proxy: its X-Forwarded-For names the client.
got=$(request_statuses 4 --interface 127.0.0.5 \
    -H 'X-Forwarded-For: 192.0.2.10' "$page")
check "trusted proxy, client 192.0.2.10: 3 x 200 then 429 ($got)" \
    eq "$got" " 200 200 200 429"
fetch "$page" --interface 127.0.0.5 -H 'X-Forwarded-For: 192.0.2.11'
check "trusted proxy, client 192.0.2.11: its own count (200)" \
    eq "$STATUS" 200
fetch "$page" --interface 127.0.0.5 \
    -H 'X-Forwarded-For: 192.0.2.10, 127.0.0.5'
check "trusted proxy, trusted hops skipped: 192.0.2.10 is still limited (429)" \
    eq "$STATUS" 429

# 127.0.0.6 is not trusted: its X-Forwarded-For is ignored, whatever it says.
fetch "$page" --interface 127.0.0.6 -H 'X-Forwarded-For: 192.0.2.10'
check "untrusted client naming a limited address: not limited (200)" \
    eq "$STATUS" 200
got=$(request_statuses 3 --interface 127.0.0.6 \
    -H 'X-Forwarded-For: 198.51.100.1' "$page")
got2=$(request_statuses 1 --interface 127.0.0.6 \
    -H 'X-Forwarded-For: 198.51.100.2' "$page")
check "untrusted client changing X-Forwarded-For is still one client ($got /$got2)" \
    eq "$got /$got2" " 200 200 429 / 429"

# ---------------------------------------------------------------- Redis down

stop_redis
check "Redis is stopped" ne "$(rcli ping 2>/dev/null)" PONG
stack_touch
fetch "$page" -H "X-API-Key: $key3"
check "Redis down: auth_request answers 503" eq "$STATUS" 503
check "Redis down: 503 has Retry-After 1" eq "$(header Retry-After)" 1
check "Redis down: 503 body error service_unavailable" \
    eq "$(json_field error)" service_unavailable
fetch "$RESP_URL/v1/check" -X POST -H "X-API-Key: $key3" \
    -H 'Content-Type: application/json' --data-raw "$(check_body /resp/down)"
check "Redis down: responder answers 503" eq "$STATUS" 503

start_redis
n=0
while :; do
    fetch "$page" -H "X-API-Key: $key3"
    [ "$STATUS" = 200 ] && break
    n=$((n + 1))
    [ "$n" -gt 50 ] && break
    sleep 0.2
done
check "Redis back: auth_request allows again (200)" eq "$STATUS" 200
sleep 0.3
stack_touch

# ---------------------------------------------------------------- app down

stop_process "$APP_PID" TERM
APP_PID=
fetch "$page" -H "X-API-Key: $key3"
check "application stopped: auth_request fails closed (500)" eq "$STATUS" 500

finish
