#!/bin/sh
# Apache in front of ratelimit-fcgi, with the shipped configurations filled
# in by sed, in one private Apache (prefork, as nobody when run as root) with
# three virtual hosts on 127.0.0.1:
#   conf/apache-fcgid.conf (+ conf/apache-fcgid-wrapper.sh)
#       mod_fcgid starts the application (workers = 0): the check API as a
#       Responder, and FcgidAccessChecker in front of /protected/ (200
#       before the limit, 401 past it: mod_fcgid's only refusal)
#   conf/apache-proxy-fcgi.conf
#       mod_proxy_fcgi to the application on its own Unix socket: the check
#       API (200, then 429 with Retry-After)
#   conf/apache-authnz-fcgi.conf
#       mod_authnz_fcgi (AuthnzFcgiCheckAuthnProvider) asking the
#       application on 127.0.0.1 (TCP only): content and values for the
#       allowed, the application's 429 with Retry-After past the limit, 503
#       when Redis is down, per client address without a key, X-Forwarded-For
#       from a trusted proxy only
# The protected content is a static file and a CGI that prints its
# environment, where the Variable-* values of the authorizer arrive.
# PostgreSQL and Redis are the stack's.  Run by t/integration/run.sh.
# shellcheck disable=SC2317 # helpers called through `check` and traps

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

APACHE=${APACHE:-/usr/sbin/apache2}
MODULES=${APACHE_MODULES:-/usr/lib/apache2/modules}
FCGID_PORT=$((PORT + 51))
PROXY_PORT=$((PORT + 52))
AUTHNZ_PORT=$((PORT + 53))
APP_TCP_PORT=$((PORT + 54))
FCGID_URL=http://127.0.0.1:$FCGID_PORT
PROXY_URL=http://127.0.0.1:$PROXY_PORT
AUTHNZ_URL=http://127.0.0.1:$AUTHNZ_PORT

if [ ! -x "$APACHE" ] || [ ! -f "$MODULES/mod_fcgid.so" ]; then
    fail "apache2 and mod_fcgid are installed ($APACHE, $MODULES)"
    finish
fi

# Everything of this file lives in A, outside VAR (which is private to
# root): Apache's children run as nobody, and so do the processes mod_fcgid
# starts, which read the binary, the wrapper and their configuration here.
A=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-apache.XXXXXX")
chmod 755 "$A"
mkdir -p "$A/run" "$A/sock" "$A/htdocs/protected"
chmod 755 "$A/run" "$A/sock" "$A/htdocs" "$A/htdocs/protected"
echo "protected content" >"$A/htdocs/protected/index.html"
cat >"$A/htdocs/protected/env.cgi" <<'EOF'
#!/bin/sh
printf 'Content-Type: text/plain\r\n\r\n'
env | grep -E '^(RateLimit|RATELIMIT|REMOTE_USER=)' | sort
EOF
chmod 644 "$A/htdocs/protected/index.html"
chmod 755 "$A/htdocs/protected/env.cgi"
cp "$BUILD/ratelimit-fcgi" "$A/ratelimit-fcgi"
chmod 755 "$A/ratelimit-fcgi"
SOCKET=$A/sock/fcgi.sock
GROUP=$(id -gn nobody 2>/dev/null || echo nogroup)

HTTPD_PID=
PROXY_APP_PID=
AUTHNZ_APP_PID=

# The pids of the processes mod_fcgid started from our configuration.
fcgid_app_pids() {
    ps -e -o pid= -o args= | awk -v conf="$A/fcgid-app.conf" '
        $2 ~ /ratelimit-fcgi/ && index($0, conf) { print $1 }'
}

cleanup() {
    stop_process "$HTTPD_PID" TERM
    HTTPD_PID=
    # mod_fcgid stops its processes with Apache; make sure.
    for cl_p in $(fcgid_app_pids); do
        stop_process "$cl_p" TERM
    done
    stop_process "$PROXY_APP_PID" TERM
    stop_process "$AUTHNZ_APP_PID" TERM
    PROXY_APP_PID=
    AUTHNZ_APP_PID=
    restore_redis
    rm -rf "$A"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# post_check URL KEY BODY: POST /v1/check.
post_check() {
    fetch "$1" -X POST -H "X-API-Key: $2" -H 'Content-Type: application/json' \
        --data-raw "$3"
}

# wait_status URL CODE [CURL_ARG...]: repeats a request for up to 15 s
# until it answers CODE.
wait_status() {
    ws_url=$1
    ws_code=$2
    shift 2
    ws_n=0
    while :; do
        fetch "$ws_url" "$@"
        [ "$STATUS" = "$ws_code" ] && return 0
        ws_n=$((ws_n + 1))
        [ "$ws_n" -gt 75 ] && return 1
        alive "$HTTPD_PID" || return 1
        sleep 0.2
    done
}

# ---------------------------------------------------------------- data

tenant=$(uniq_name apache)
new_tenant "$tenant"
key_fcgid=$(new_key "$tenant")
key_authnz=$(new_key "$tenant")
key_down=$(new_key "$tenant")
new_sw_rule "$tenant" '/protected/*' 3 60
new_sw_rule "$tenant" '/resp/*' 2 60
anon_fcgid=$(uniq_name apanonf)
new_tenant "$anon_fcgid"
new_sw_rule "$anon_fcgid" '/protected/*' 3 60
anon_authnz=$(uniq_name apanona)
new_tenant "$anon_authnz"
new_sw_rule "$anon_authnz" '/protected/*' 3 60
check "tenants, keys and rules created" \
    matches "$key_fcgid$key_authnz$key_down" '^rl_.*rl_.*rl_'

# ---------------------------------------------------------------- start

app_conf_lines "$A/fcgid-app.conf" \
    'listen = ""' \
    "workers = 0" \
    "max_requests = 0" \
    "anonymous_tenant = $anon_fcgid"
app_conf_lines "$A/proxy-app.conf" \
    "listen = unix:$SOCKET" \
    "listen_mode = 0660" \
    "listen_group = $GROUP" \
    "workers = 2"
app_conf_lines "$A/authnz-app.conf" \
    "listen = 127.0.0.1:$APP_TCP_PORT" \
    "workers = 2" \
    "anonymous_tenant = $anon_authnz" \
    "trusted_proxies = 127.0.0.5"
for f in fcgid-app proxy-app authnz-app; do
    "$BUILD/ratelimit-fcgi" -t -c "$A/$f.conf" >/dev/null 2>&1
    check "the application accepts $f.conf" eq "$?" 0
done
"$BUILD/ratelimit-fcgi" -c "$A/proxy-app.conf" >>"$A/app.log" 2>&1 &
PROXY_APP_PID=$!
"$BUILD/ratelimit-fcgi" -c "$A/authnz-app.conf" >>"$A/app.log" 2>&1 &
AUTHNZ_APP_PID=$!

sed -e "s|@BINARY@|$A/ratelimit-fcgi|g" -e "s|@CONFIG@|$A/fcgid-app.conf|g" \
    "$ROOT/conf/apache-fcgid-wrapper.sh" >"$A/fcgid-wrapper"
chmod 755 "$A/fcgid-wrapper"
sed -e "s|@VHOST@|127.0.0.1:$FCGID_PORT|g" -e "s|@DOCROOT@|$A/htdocs|g" \
    -e "s|@WRAPPER@|$A/fcgid-wrapper|g" \
    "$ROOT/conf/apache-fcgid.conf" >"$A/site-fcgid.conf"
sed -e "s|@VHOST@|127.0.0.1:$PROXY_PORT|g" -e "s|@SOCKET@|$SOCKET|g" \
    "$ROOT/conf/apache-proxy-fcgi.conf" >"$A/site-proxy-fcgi.conf"
sed -e "s|@VHOST@|127.0.0.1:$AUTHNZ_PORT|g" -e "s|@DOCROOT@|$A/htdocs|g" \
    -e "s|@APP_ADDRESS@|127.0.0.1:$APP_TCP_PORT|g" \
    "$ROOT/conf/apache-authnz-fcgi.conf" >"$A/site-authnz-fcgi.conf"
for f in fcgid-wrapper site-fcgid.conf site-proxy-fcgi.conf \
    site-authnz-fcgi.conf; do
    check "$f: every placeholder filled" filled "$A/$f"
done

apache_conf "$A/httpd.conf" listen="$FCGID_PORT $PROXY_PORT $AUTHNZ_PORT" \
    user="nobody $GROUP" servers="2 1 4 32" access_log="$A/access.log" \
    cgi=yes "$A/site-fcgid.conf" "$A/site-proxy-fcgi.conf" \
    "$A/site-authnz-fcgi.conf"
"$APACHE" -t -f "$A/httpd.conf" >>"$A/httpd-start.log" 2>&1
check "apache2 -t accepts the three shipped files" eq "$?" 0
# In its own session: on shutdown, Apache signals its whole process group,
# which would otherwise be this script's.  (setsid execs in place here, as a
# background job is no group leader, so $! is Apache's pid.)
setsid "$APACHE" -f "$A/httpd.conf" -D FOREGROUND >>"$A/httpd-start.log" 2>&1 &
HTTPD_PID=$!

wait_status "$PROXY_URL/health/ready" 200
check "mod_proxy_fcgi: /health/ready is 200" eq "$STATUS" 200
if [ "$STATUS" != 200 ]; then
    show_logs "$A"
    finish
fi

# ---------------------------------------------------------------- mod_fcgid

# The first request makes mod_fcgid start a process.
wait_status "$FCGID_URL/health/ready" 200
check "mod_fcgid: /health/ready is 200" eq "$STATUS" 200
pids=$(fcgid_app_pids | tr '\n' ' ')
check "mod_fcgid: it started the application ($pids)" ne "$pids" ""
forked=0
for p in $pids; do
    parent=$(ps -o ppid= -p "$p" | tr -d ' ')
    case " $pids " in
    *" $parent "*) forked=1 ;;
    esac
done
check "mod_fcgid: the application does not fork (workers = 0)" eq "$forked" 0
if [ "$(id -u)" = 0 ]; then
    users=$(for p in $pids; do ps -o user= -p "$p"; done | tr -d ' ' |
        sort -u | tr '\n' ' ')
    check "mod_fcgid: the application runs as Apache's user ($users)" \
        eq "$users" "nobody "
fi

body=$(check_body /resp/fcgid "$(uniq_name s)")
codes=
for i in 1 2 3; do
    post_check "$FCGID_URL/v1/check" "$key_fcgid" "$body"
    codes="$codes $STATUS"
done
check "mod_fcgid responder: POST /v1/check 200, 200, 429 ($codes)" \
    eq "$codes" " 200 200 429"
check "mod_fcgid responder: 429 has Retry-After ($(header Retry-After))" \
    ge "$(header Retry-After)" 1
check "mod_fcgid responder: 429 body allowed false" \
    eq "$(json_field allowed)" false

fetch "$FCGID_URL/protected/env.cgi" -H "X-API-Key: $key_fcgid"
check "mod_fcgid access checker: allowed, 200" eq "$STATUS" 200
check "mod_fcgid access checker: the CGI sees RateLimit_Limit=3" \
    contains "$BODY" "RateLimit_Limit=3"
check "mod_fcgid access checker: the CGI sees RateLimit_Remaining=2" \
    contains "$BODY" "RateLimit_Remaining=2"
check "mod_fcgid access checker: the CGI sees RateLimit_Reset" \
    matches "$BODY" '^RateLimit_Reset=[0-9]{10}'
check "mod_fcgid access checker: the client sees X-RateLimit-Remaining 2" \
    eq "$(header X-RateLimit-Remaining)" 2
check "mod_fcgid access checker: no Variable-* header reaches the client" \
    eq "$(header Variable-RateLimit-Limit)" ""
fetch "$FCGID_URL/protected/index.html" -H "X-API-Key: $key_fcgid"
check "mod_fcgid access checker: second request, 200" eq "$STATUS" 200
check "mod_fcgid access checker: the static content is served" \
    eq "$BODY" "protected content"
fetch "$FCGID_URL/protected/index.html" -H "X-API-Key: $key_fcgid"
check "mod_fcgid access checker: third request, 200" eq "$STATUS" 200
fetch "$FCGID_URL/protected/index.html" -H "X-API-Key: $key_fcgid"
check "mod_fcgid access checker: past the limit, 401 (mod_fcgid's refusal)" \
    eq "$STATUS" 401
check "mod_fcgid access checker: the 401 still has Retry-After ($(header Retry-After))" \
    ge "$(header Retry-After)" 1
check "mod_fcgid access checker: the 401 has X-RateLimit-Remaining 0" \
    eq "$(header X-RateLimit-Remaining)" 0
check "mod_fcgid access checker: the 401 is not the content" \
    ne "$BODY" "protected content"
fetch "$FCGID_URL/protected/index.html" -H "X-API-Key: rl_no_such_key_0123456789"
check "mod_fcgid access checker: unknown key, 401" eq "$STATUS" 401
got=$(request_statuses 4 --interface 127.0.0.2 \
    "$FCGID_URL/protected/index.html")
check "mod_fcgid access checker: no key, by address: 3 x 200 then 401 ($got)" \
    eq "$got" " 200 200 200 401"

# ---------------------------------------------------------------- mod_proxy_fcgi

body=$(check_body /resp/proxy "$(uniq_name s)")
codes=
for i in 1 2 3; do
    post_check "$PROXY_URL/v1/check" "$key_fcgid" "$body"
    codes="$codes $STATUS"
    [ "$i" = 1 ] && first_remaining=$(header X-RateLimit-Remaining)
done
check "mod_proxy_fcgi: POST /v1/check 200, 200, 429 ($codes)" \
    eq "$codes" " 200 200 429"
check "mod_proxy_fcgi: X-RateLimit-Remaining 1 on the first" \
    eq "$first_remaining" 1
check "mod_proxy_fcgi: 429 has Retry-After ($(header Retry-After))" \
    ge "$(header Retry-After)" 1
check "mod_proxy_fcgi: 429 body allowed false" eq "$(json_field allowed)" false
check "mod_proxy_fcgi: 429 is JSON" contains "$(header Content-Type)" \
    application/json
post_check "$PROXY_URL/v1/check?trace=1" "$key_fcgid" \
    "$(check_body /resp/proxy2 "$(uniq_name s)")"
check "mod_proxy_fcgi: REQUEST_URI with a query string is routed (200)" \
    eq "$STATUS" 200
fetch "$PROXY_URL/v1/check" -H "X-API-Key: $key_fcgid"
check "mod_proxy_fcgi: GET /v1/check is the application's 405" \
    eq "$STATUS" 405
post_check "$PROXY_URL/v1/check" "rl_no_such_key_0123456789" "$body"
check "mod_proxy_fcgi: unknown key is 401" eq "$STATUS" 401
check "mod_proxy_fcgi: unknown key, error unauthorized" \
    eq "$(json_field error)" unauthorized
fetch "$PROXY_URL/metrics"
check "mod_proxy_fcgi: /metrics from 127.0.0.1 is 200" eq "$STATUS" 200
fetch "$PROXY_URL/metrics" --interface 127.0.0.2
check "mod_proxy_fcgi: /metrics from 127.0.0.2 is refused (403)" \
    eq "$STATUS" 403

# ---------------------------------------------------------------- mod_authnz_fcgi

fetch "$AUTHNZ_URL/protected/env.cgi" -H "X-API-Key: $key_authnz"
check "mod_authnz_fcgi: allowed, 200" eq "$STATUS" 200
check "mod_authnz_fcgi: the CGI sees RateLimit_Limit=3" \
    contains "$BODY" "RateLimit_Limit=3"
check "mod_authnz_fcgi: the CGI sees RateLimit_Remaining=2" \
    contains "$BODY" "RateLimit_Remaining=2"
check "mod_authnz_fcgi: the CGI sees RateLimit_Reset" \
    matches "$BODY" '^RateLimit_Reset=[0-9]{10}'
check "mod_authnz_fcgi: the CGI sees REMOTE_USER=ratelimit (UserExpr)" \
    contains "$BODY" "REMOTE_USER=ratelimit"
check "mod_authnz_fcgi: the client sees X-RateLimit-Remaining 2" \
    eq "$(header X-RateLimit-Remaining)" 2
check "mod_authnz_fcgi: no Variable-* header reaches the client" \
    eq "$(header Variable-RateLimit-Limit)" ""
fetch "$AUTHNZ_URL/protected/index.html" -H "X-API-Key: $key_authnz"
check "mod_authnz_fcgi: second request, the static content" \
    eq "$STATUS $BODY" "200 protected content"
fetch "$AUTHNZ_URL/protected/index.html" -H "X-API-Key: $key_authnz"
check "mod_authnz_fcgi: third request, 200" eq "$STATUS" 200
fetch "$AUTHNZ_URL/protected/index.html" -H "X-API-Key: $key_authnz"
check "mod_authnz_fcgi: past the limit, the application's 429" \
    eq "$STATUS" 429
check "mod_authnz_fcgi: 429 has Retry-After ($(header Retry-After))" \
    ge "$(header Retry-After)" 1
check "mod_authnz_fcgi: 429 has X-RateLimit-Remaining 0" \
    eq "$(header X-RateLimit-Remaining)" 0
check "mod_authnz_fcgi: 429 carries the application's JSON body" \
    eq "$(json_field allowed)" false
check "mod_authnz_fcgi: 429 body retry_after = Retry-After" \
    eq "$(json_field retry_after)" "$(header Retry-After)"
fetch "$AUTHNZ_URL/protected/index.html" -H "X-API-Key: rl_no_such_key_0123456789"
check "mod_authnz_fcgi: unknown key, 401" eq "$STATUS" 401
check "mod_authnz_fcgi: unknown key, error unauthorized" \
    eq "$(json_field error)" unauthorized

page=$AUTHNZ_URL/protected/index.html
got=$(request_statuses 4 --interface 127.0.0.2 "$page")
check "mod_authnz_fcgi: no key, from 127.0.0.2: 3 x 200 then 429 ($got)" \
    eq "$got" " 200 200 200 429"
check "Apache saw the client as 127.0.0.2" \
    grep -q '^127\.0\.0\.2 ratelimit "GET /protected/' "$A/access.log"
fetch "$page" --interface 127.0.0.3
check "mod_authnz_fcgi: no key, from 127.0.0.3: its own count (200)" \
    eq "$STATUS" 200
got=$(request_statuses 4 --interface 127.0.0.5 \
    -H 'X-Forwarded-For: 192.0.2.10' "$page")
check "mod_authnz_fcgi: trusted proxy, client 192.0.2.10: 3 x 200 then 429 ($got)" \
    eq "$got" " 200 200 200 429"
fetch "$page" --interface 127.0.0.5 -H 'X-Forwarded-For: 192.0.2.11'
check "mod_authnz_fcgi: trusted proxy, client 192.0.2.11: 200" \
    eq "$STATUS" 200
fetch "$page" --interface 127.0.0.6 -H 'X-Forwarded-For: 192.0.2.10'
check "mod_authnz_fcgi: untrusted X-Forwarded-For ignored (200)" \
    eq "$STATUS" 200

# ---------------------------------------------------------------- Redis down

stop_redis
check "Redis is stopped" ne "$(rcli ping 2>/dev/null)" PONG
stack_touch
fetch "$AUTHNZ_URL/protected/index.html" -H "X-API-Key: $key_down"
check "Redis down: mod_authnz_fcgi answers 503" eq "$STATUS" 503
check "Redis down: mod_authnz_fcgi 503 has Retry-After 1" \
    eq "$(header Retry-After)" 1
check "Redis down: mod_authnz_fcgi 503 error service_unavailable" \
    eq "$(json_field error)" service_unavailable
fetch "$FCGID_URL/protected/index.html" -H "X-API-Key: $key_down"
check "Redis down: mod_fcgid answers 401 (its only refusal)" eq "$STATUS" 401
post_check "$PROXY_URL/v1/check" "$key_down" "$(check_body /resp/down)"
check "Redis down: mod_proxy_fcgi answers 503" eq "$STATUS" 503

start_redis
wait_status "$AUTHNZ_URL/protected/index.html" 200 -H "X-API-Key: $key_down"
check "Redis back: mod_authnz_fcgi allows again (200)" eq "$STATUS" 200
sleep 0.3
stack_touch

# ---------------------------------------------------------------- app down

stop_process "$AUTHNZ_APP_PID" TERM
AUTHNZ_APP_PID=
fetch "$AUTHNZ_URL/protected/index.html" -H "X-API-Key: $key_down"
check "application stopped: mod_authnz_fcgi fails closed (500)" \
    eq "$STATUS" 500
stop_process "$PROXY_APP_PID" TERM
PROXY_APP_PID=
post_check "$PROXY_URL/v1/check" "$key_down" "$(check_body /resp/down)"
check "application stopped: mod_proxy_fcgi answers 503" eq "$STATUS" 503

finish
