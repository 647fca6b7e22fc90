#!/bin/sh
# One denial shape through every front end of the integration stack, with
# the shipped configurations filled in by sed:
#   lighttpd     the stack's responder (the check API), and an authorizer
#                ("mode" => "authorizer") in front of /protected/
#   nginx        conf/nginx-responder.conf and conf/nginx-auth-request.conf
#   Apache       conf/apache-proxy-fcgi.conf, conf/apache-fcgid.conf (the
#                check API and FcgidAccessChecker) and
#                conf/apache-authnz-fcgi.conf
# Where the application chooses the body, a 429 is JSON with error
# "rate_limited", a message, retry_after (whole seconds, rounded up, as
# Retry-After) and retry_after_ms (exact); the check API's 429 keeps its
# decision fields; 401 carries WWW-Authenticate; 404 and 405 have a
# message; a cost that is not a whole number from 1 to 1000000 is 400.
# mod_fcgid's access checker cannot pass a body (Apache answers every
# refusal 401 with its own page): what the client gets there is checked as
# it is.  The limits are GCRA, one request every 2.5 s, so that a denial
# waits a fraction of a second that whole seconds cannot say.  Run by
# t/integration/run.sh; PostgreSQL and Redis are the stack's.
# shellcheck disable=SC2317 # helpers called through `check` and traps

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

NGINX=${NGINX:-/usr/sbin/nginx}
APACHE=${APACHE:-/usr/sbin/apache2}
P_LT=$((PORT + 61))
P_NGX_RESP=$((PORT + 62))
P_NGX_AUTH=$((PORT + 63))
P_FCGID=$((PORT + 64))
P_PROXY=$((PORT + 65))
P_AUTHNZ=$((PORT + 66))
P_APP_TCP=$((PORT + 67))
GROUP=$(id -gn nobody 2>/dev/null || echo nogroup)

# D (serve_dir) holds everything: nginx's and Apache's children run as
# nobody and must reach the socket, the documents and the binary.
serve_dir rl-denial
mkdir -p "$D/run" "$D/tmp" "$D/sock" "$D/htdocs/protected"
chmod 755 "$D/run" "$D/sock" "$D/htdocs" "$D/htdocs/protected"
echo "protected content" >"$D/htdocs/protected/index.html"
chmod 644 "$D/htdocs/protected/index.html"
cp "$BUILD/ratelimit-fcgi" "$D/ratelimit-fcgi"
chmod 755 "$D/ratelimit-fcgi"
SOCKET=$D/sock/fcgi.sock
HTTPD_PID=
NGX_PID=

# The pids of the processes mod_fcgid started from our configuration.
fcgid_app_pids() {
    ps -e -o pid= -o args= | awk -v conf="$D/fcgid-app.conf" '
        $2 ~ /ratelimit-fcgi/ && index($0, conf) { print $1 }'
}

cleanup_all() {
    stop_process "$NGX_PID" QUIT
    stop_process "$HTTPD_PID" TERM
    for ca_p in $(fcgid_app_pids); do
        stop_process "$ca_p" TERM
    done
    # shellcheck disable=SC2086 # a list of pids
    end_pids $PIDS
    rm -rf "$D"
}
trap cleanup_all EXIT

# ---------------------------------------------------------------- checks

# ceil_s MS: MS milliseconds as whole seconds, rounded up.
ceil_s() {
    is_int "$1" && echo $((($1 + 999) / 1000))
}

# fields: reads the last body once (one python3 for all the checks of an
# answer) into F_error, F_message, F_retry_after, F_retry_after_ms,
# F_allowed, F_limit and F_remaining: strings raw, anything else as JSON,
# "<absent>" when missing, "<invalid json>" for every one when the body
# is not a JSON object.
fields() {
    F_error='' F_message='' F_retry_after='' F_retry_after_ms=''
    F_allowed='' F_limit='' F_remaining=''
    eval "$(python3 -c '
import json, shlex, sys
names = ("error", "message", "retry_after", "retry_after_ms", "allowed",
         "limit", "remaining")
try:
    doc = json.loads(sys.argv[1])
    if not isinstance(doc, dict):
        raise ValueError
except ValueError:
    doc = None
for n in names:
    if doc is None:
        v = "<invalid json>"
    elif n not in doc:
        v = "<absent>"
    else:
        v = doc[n] if isinstance(doc[n], str) else json.dumps(doc[n])
    print("F_%s=%s" % (n, shlex.quote(v)))
' "$BODY")"
}

# has_message: the body read by fields has a "message" that is a
# sentence (more than one word).
has_message() {
    case $F_message in
    '<absent>' | '<invalid json>') return 1 ;;
    *' '*) return 0 ;;
    esac
    return 1
}

# expect_429 WHERE: the last answer is the denial shape.
expect_429() {
    fields
    e4_ms=$F_retry_after_ms
    e4_s=$F_retry_after
    check "$1: 429" eq "$STATUS" 429
    check "$1: JSON" contains "$(header Content-Type)" application/json
    check "$1: error rate_limited ($F_error)" eq "$F_error" rate_limited
    check "$1: a message" has_message
    check "$1: retry_after = Retry-After ($e4_s, $(header Retry-After))" \
        eq "$e4_s" "$(header Retry-After)"
    check "$1: retry_after_ms within the 2.5 s interval ($e4_ms)" \
        le "$e4_ms" 2500
    check "$1: retry_after_ms is positive ($e4_ms)" ge "$e4_ms" 1
    check "$1: retry_after is retry_after_ms rounded up ($e4_s, $e4_ms)" \
        eq "$e4_s" "$(ceil_s "$e4_ms")"
}

# expect_401 WHERE: a 401 that says how to authenticate, with the
# application's body.
expect_401() {
    fields
    check "$1: 401" eq "$STATUS" 401
    check "$1: WWW-Authenticate Bearer ($(header WWW-Authenticate))" \
        matches "$(header WWW-Authenticate)" '^Bearer realm="ratelimit-fcgi"'
    check "$1: JSON" contains "$(header Content-Type)" application/json
    check "$1: error unauthorized" eq "$F_error" unauthorized
    check "$1: a message" has_message
}

# expect_error STATUS ERROR WHERE: an error body with a message.
expect_error() {
    fields
    check "$3: $1" eq "$STATUS" "$1"
    check "$3: error $2" eq "$F_error" "$2"
    check "$3: a message ($F_message)" has_message
}

# post URL KEY BODY: POST /v1/check through a front end.
post() {
    fetch "$1" -X POST -H "X-API-Key: $2" -H 'Content-Type: application/json' \
        --data-raw "$3"
}

# deny_check URL WHERE: a new subject, checked twice at once through URL:
# the second is denied.
deny_check() {
    dc_body=$(check_body /d/x "$(uniq_name s)")
    post "$1" "$KEY" "$dc_body"
    check "$2: the first check is allowed" eq "$STATUS" 200
    post "$1" "$KEY" "$dc_body"
    expect_429 "$2"
    check "$2: the decision fields stay (allowed false, limit 1)" \
        eq "$F_allowed $F_limit" "false 1"
}

# deny_page URL WHERE [CURL-ARG...]: a new key asks for URL twice at once.
deny_page() {
    dp_url=$1
    dp_where=$2
    shift 2
    dp_key=$(new_key "$TENANT")
    fetch "$dp_url" -H "X-API-Key: $dp_key" "$@"
    check "$dp_where: the first request is served" eq "$STATUS" 200
    fetch "$dp_url" -H "X-API-Key: $dp_key" "$@"
}

# show WHERE: what the client got, for the record.
show() {
    echo "    $1: $STATUS; Content-Type: $(header Content-Type);" \
        "WWW-Authenticate: $(header WWW-Authenticate);" \
        "Retry-After: $(header Retry-After); body: $(printf '%.120s' "$BODY" |
            tr '\n' ' ')"
}

# ---------------------------------------------------------------- data

TENANT=$(uniq_name denial)
new_tenant "$TENANT"
KEY=$(new_key "$TENANT")
for route in '/d/*' '/protected/*'; do
    ctl rule add "$TENANT" --route "$route" --algorithm gcra --limit 2 \
        --period 5s --burst 0 >/dev/null
done
new_sw_rule "$TENANT" '/c/*' 2 60
check "tenant, key and rules created" matches "$KEY" '^rl_'

# ---------------------------------------------------------------- start

app_conf_lines "$D/app.conf" \
    "listen = unix:$SOCKET" \
    "listen_mode = 0660" \
    "listen_group = $GROUP" \
    "workers = 2"
app_conf_lines "$D/authnz-app.conf" \
    "listen = 127.0.0.1:$P_APP_TCP" \
    "workers = 1"
app_conf_lines "$D/fcgid-app.conf" \
    'listen = ""' \
    "workers = 0" \
    "max_requests = 0"
app_start app "$D/app.conf"
app_start authnz-app "$D/authnz-app.conf"
n=0
until [ -S "$SOCKET" ] || [ "$n" -gt 50 ]; do
    n=$((n + 1))
    sleep 0.1
done
check "the application listens on its Unix socket" test -S "$SOCKET"

# lighttpd, the authorizer in front of /protected/ (the shipped file's
# prefixes made /protected/).
sed -e "s|/run/ratelimit/fcgi.sock|$SOCKET|g" \
    -e 's|"/downloads/"|"/protected/"|' \
    "$ROOT/conf/lighttpd-authorizer.conf" >"$D/lt-fragment.conf"
cat >"$D/lt.conf" <<EOF
server.port = $P_LT
server.bind = "127.0.0.1"
server.document-root = "$D/htdocs"
server.errorlog = "$D/lt-error.log"
mimetype.assign = ( ".html" => "text/html" )
include "$D/lt-fragment.conf"
EOF
lighttpd_start "$D/lt.conf" "$D/lt-error.log" "$P_LT"
check "lighttpd (authorizer) started" eq "$?" 0

# nginx, both shipped files.
sed -e "s|@LISTEN@|127.0.0.1:$P_NGX_RESP|g" -e "s|@SOCKET@|$SOCKET|g" \
    "$ROOT/conf/nginx-responder.conf" >"$D/ngx-responder.conf"
sed -e "s|@LISTEN@|127.0.0.1:$P_NGX_AUTH|g" -e "s|@ROOT@|$D/htdocs|g" \
    -e "s|@SOCKET@|$SOCKET|g" \
    "$ROOT/conf/nginx-auth-request.conf" >"$D/ngx-auth.conf"
nginx_conf "$D/nginx.conf" user="nobody $GROUP" pid="$D/run/nginx.pid" \
    "$D/ngx-responder.conf" "$D/ngx-auth.conf"
"$NGINX" -c "$D/nginx.conf" -e "$D/nginx-error.log" -g 'daemon off;' \
    >>"$D/nginx-start.log" 2>&1 &
NGX_PID=$!

# Apache, the three shipped files in one server.
sed -e "s|@BINARY@|$D/ratelimit-fcgi|g" -e "s|@CONFIG@|$D/fcgid-app.conf|g" \
    "$ROOT/conf/apache-fcgid-wrapper.sh" >"$D/fcgid-wrapper"
chmod 755 "$D/fcgid-wrapper"
sed -e "s|@VHOST@|127.0.0.1:$P_FCGID|g" -e "s|@DOCROOT@|$D/htdocs|g" \
    -e "s|@WRAPPER@|$D/fcgid-wrapper|g" \
    "$ROOT/conf/apache-fcgid.conf" >"$D/site-fcgid.conf"
sed -e "s|@VHOST@|127.0.0.1:$P_PROXY|g" -e "s|@SOCKET@|$SOCKET|g" \
    "$ROOT/conf/apache-proxy-fcgi.conf" >"$D/site-proxy.conf"
sed -e "s|@VHOST@|127.0.0.1:$P_AUTHNZ|g" -e "s|@DOCROOT@|$D/htdocs|g" \
    -e "s|@APP_ADDRESS@|127.0.0.1:$P_APP_TCP|g" \
    "$ROOT/conf/apache-authnz-fcgi.conf" >"$D/site-authnz.conf"
apache_conf "$D/httpd.conf" listen="$P_FCGID $P_PROXY $P_AUTHNZ" \
    user="nobody $GROUP" error_log="$D/httpd-error.log" \
    "$D/site-fcgid.conf" "$D/site-proxy.conf" "$D/site-authnz.conf"
# Its own session: Apache signals its whole process group when it stops.
setsid "$APACHE" -f "$D/httpd.conf" -D FOREGROUND >>"$D/httpd-start.log" 2>&1 &
HTTPD_PID=$!

# Up to 10 s for the three servers and the application behind each.
n=0
while :; do
    up=
    for u in "http://127.0.0.1:$P_NGX_RESP/health/ready" \
        "http://127.0.0.1:$P_PROXY/health/ready" \
        "http://127.0.0.1:$P_FCGID/health/ready"; do
        [ "$(curl -s -m 5 -o /dev/null -w '%{http_code}' "$u")" = 200 ] &&
            up="$up+"
    done
    [ "$up" = "+++" ] && break
    n=$((n + 1))
    [ "$n" -gt 50 ] && break
    sleep 0.2
done
check "nginx, mod_proxy_fcgi and mod_fcgid answer /health/ready" eq "$up" "+++"
if [ "$up" != "+++" ]; then
    show_logs "$D"
    finish
fi

# ---------------------------------------------------------------- 429

deny_check "$BASE_URL/v1/check" "lighttpd responder"
deny_check "http://127.0.0.1:$P_NGX_RESP/v1/check" "nginx responder"
deny_check "http://127.0.0.1:$P_PROXY/v1/check" "mod_proxy_fcgi"
deny_check "http://127.0.0.1:$P_FCGID/v1/check" "mod_fcgid responder"

deny_page "http://127.0.0.1:$P_LT/protected/index.html" "lighttpd authorizer"
expect_429 "lighttpd authorizer"
deny_page "http://127.0.0.1:$P_NGX_AUTH/protected/index.html" \
    "nginx auth_request"
expect_429 "nginx auth_request"
deny_page "http://127.0.0.1:$P_AUTHNZ/protected/index.html" "mod_authnz_fcgi"
expect_429 "mod_authnz_fcgi"

# mod_fcgid's access checker: Apache's own 401 page, the limiter's headers.
deny_page "http://127.0.0.1:$P_FCGID/protected/index.html" \
    "mod_fcgid access checker"
show "mod_fcgid access checker, past the limit"
check "mod_fcgid access checker, past the limit: 401 (Apache's)" \
    eq "$STATUS" 401
check "mod_fcgid access checker, past the limit: Retry-After ($(header Retry-After))" \
    ge "$(header Retry-After)" 1
check "mod_fcgid access checker, past the limit: Apache's HTML page" \
    contains "$(header Content-Type)" text/html

# ---------------------------------------------------------------- 401

bad=rl_no_such_key_0123456789
post "$BASE_URL/v1/check" "$bad" "$(check_body /d/x)"
expect_401 "lighttpd responder, unknown key"
fetch "$BASE_URL/v1/check" -X POST --data-raw "$(check_body /d/x)"
expect_401 "lighttpd responder, no key"
post "http://127.0.0.1:$P_NGX_RESP/v1/check" "$bad" "$(check_body /d/x)"
expect_401 "nginx responder"
post "http://127.0.0.1:$P_PROXY/v1/check" "$bad" "$(check_body /d/x)"
expect_401 "mod_proxy_fcgi"
post "http://127.0.0.1:$P_FCGID/v1/check" "$bad" "$(check_body /d/x)"
expect_401 "mod_fcgid responder"
fetch "http://127.0.0.1:$P_LT/protected/index.html" -H "X-API-Key: $bad"
expect_401 "lighttpd authorizer"
fetch "http://127.0.0.1:$P_AUTHNZ/protected/index.html" -H "X-API-Key: $bad"
expect_401 "mod_authnz_fcgi"
fetch "http://127.0.0.1:$P_NGX_AUTH/protected/index.html" -H "X-API-Key: $bad"
expect_401 "nginx auth_request"
fetch "http://127.0.0.1:$P_FCGID/protected/index.html" -H "X-API-Key: $bad"
show "mod_fcgid access checker, unknown key"
check "mod_fcgid access checker, unknown key: 401" eq "$STATUS" 401
check "mod_fcgid access checker, unknown key: WWW-Authenticate Bearer ($(header WWW-Authenticate))" \
    matches "$(header WWW-Authenticate)" '^Bearer realm="ratelimit-fcgi"'

# ---------------------------------------------------------------- 404, 405

fetch "$BASE_URL/v1/nothing"
expect_error 404 not_found "lighttpd responder, unknown path"
fetch "$BASE_URL/v1/check"
expect_error 405 method_not_allowed "lighttpd responder, GET /v1/check"
check "lighttpd responder, GET /v1/check: Allow POST" \
    eq "$(header Allow)" POST
fetch "http://127.0.0.1:$P_PROXY/health/nothing"
expect_error 404 not_found "mod_proxy_fcgi, unknown path"
fetch "http://127.0.0.1:$P_NGX_RESP/v1/check"
expect_error 405 method_not_allowed "nginx responder, GET /v1/check"
fetch "http://127.0.0.1:$P_FCGID/v1/check"
expect_error 405 method_not_allowed "mod_fcgid responder, GET /v1/check"

# ---------------------------------------------------------------- cost

for cost in 0 -3 '"x"' 1.5 1000001 true; do
    post "$BASE_URL/v1/check" "$KEY" \
        "$(check_body /c/cost "$(uniq_name s)" "$cost")"
    expect_error 400 invalid_request "cost $cost"
    check "cost $cost: the message names cost" contains "$F_message" cost
done
post "http://127.0.0.1:$P_NGX_RESP/v1/check" "$KEY" \
    "$(check_body /c/cost "$(uniq_name s)" -3)"
expect_error 400 invalid_request "nginx responder, cost -3"
post "$BASE_URL/v1/check" "$KEY" "$(check_body /c/cost "$(uniq_name s)" 2)"
fields
check "cost 2 is counted as 2 (a limit of 2: remaining 0)" \
    eq "$STATUS $F_remaining" "200 0"
post "$BASE_URL/v1/check" "$KEY" '{"route":"/c/cost","subject":"c","cost":null}'
check "cost null is absent: 200" eq "$STATUS" 200

finish
