#!/bin/sh
# The shipped lighttpd configurations, each run by a lighttpd of its own
# with only its paths and ports substituted (run by t/integration/run.sh,
# which provides PostgreSQL and Redis):
#   conf/lighttpd-bin-path.conf   lighttpd spawns the application
#   conf/lighttpd-socket.conf     the application runs on its own socket
#   conf/lighttpd-authorizer.conf the application as a FastCGI authorizer
#                                 in front of static files, a proxied HTTP
#                                 application and CGI programs: keys, the
#                                 anonymous tenant by client address and
#                                 X-Forwarded-For, 429, 401, 503, and what
#                                 the protected side sees
# Every server here is on 127.0.0.1, ports PORT+1 to PORT+7, and is
# stopped on exit.  Client addresses 127.0.0.2 and 127.0.0.3 are picked
# with curl --interface (Linux answers on all of 127.0.0.0/8).

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

CONF_DIR=$ROOT/conf
serve_dir rl-lighttpd
P_MAIN=$((PORT + 1))
P_BP=$((PORT + 2))
P_EXT=$((PORT + 3))
P_AUTH=$((PORT + 4))
P_APP=$((PORT + 5))
P_NOANON=$((PORT + 6))
P_ORDER=$((PORT + 7))
RL_SOCK=$D/rl.sock

# ---------------------------------------------------------------- helpers

# The servers (serve_dir, app_conf, app_start, lighttpd_start) come from
# lib.sh.

# app_start_unix NAME CONF: app_start, then waits (at most 5 s) for the
# Unix socket that CONF listens on.
app_start_unix() {
    app_start "$1" "$2"
    au_sock=$(sed -n 's/^listen = "unix:\(.*\)"$/\1/p' "$2")
    au_n=0
    until [ -S "$au_sock" ] || [ "$au_n" -gt 50 ]; do
        au_n=$((au_n + 1))
        sleep 0.1
    done
}

# lt_start NAME PORT: lighttpd_start with $D/NAME.conf (see base_conf),
# its output in $D/NAME-error.log.
lt_start() {
    lighttpd_start "$D/$1.conf" "$D/$1-error.log" "$2"
}

# base_conf NAME PORT [LINES]: the server part of a lighttpd.conf that
# includes $D/NAME-fragment.conf (the shipped file, instantiated).
base_conf() {
    cat >"$D/$1.conf" <<EOF
server.port = $2
server.bind = "127.0.0.1"
server.document-root = "$D/htdocs"
server.errorlog = "$D/$1-error.log"
server.pid-file = "$D/$1.pid"
${3:-}
include "$D/$1-fragment.conf"
EOF
}

# envval NAME: NAME's value in the environment a CGI program printed
# (the last BODY); "<absent>" when it is not there.
envval() {
    printf '%s\n' "$BODY" | awk -v n="$1" '
        index($0, n "=") == 1 { print substr($0, length(n) + 2); f = 1; exit }
        END { if (!f) print "<absent>" }'
}

# n_times N URL [CURL-ARGS...]: N requests; their statuses, blank-separated,
# in ALL (the last one's answer stays in STATUS, BODY and the headers).
n_times() {
    nt_n=$1
    shift
    ALL=
    while [ "$nt_n" -gt 0 ]; do
        fetch "$@"
        ALL="$ALL $STATUS"
        nt_n=$((nt_n - 1))
    done
}

# expect_429 WHAT: the last response is a denial with all its headers.
expect_429() {
    check "$1: 429" eq "$STATUS" 429
    check "$1: Retry-After >= 1 ($(header Retry-After))" \
        ge "$(header Retry-After)" 1
    check "$1: X-RateLimit-Limit 3" eq "$(header X-RateLimit-Limit)" 3
    check "$1: X-RateLimit-Remaining 0" eq "$(header X-RateLimit-Remaining)" 0
    check "$1: RateLimit and RateLimit-Policy ($(header RateLimit))" \
        matches "$(header RateLimit)|$(header RateLimit-Policy)" '^.+;r=0;t=[0-9]+\|.+;q=3;w=60$'
    check "$1: JSON body allowed false" eq "$(json_field allowed)" false
}

# A CGI program that prints its environment and its request body: the
# protected application, as far as this test is concerned.
mkdir -p "$D/htdocs/downloads" "$D/htdocs/cgi-bin" "$D/app-root/app"
echo "protected file" >"$D/htdocs/downloads/file.txt"
cat >"$D/htdocs/cgi-bin/env.sh" <<'EOF'
printf 'Content-Type: text/plain\r\n\r\n'
env | sort
printf 'BODY=%s\n' "$(cat)"
EOF
cp "$D/htdocs/cgi-bin/env.sh" "$D/app-root/app/env.sh"

# Tenants: A with keys and a limit of 3 (5 for CGI) a minute per key on each
# protected prefix; N with no rule for the protected paths; FO whose rule
# lets requests through when Redis is down; the anonymous tenant with 3 a
# minute per client address on /cgi-bin/.
TENANT_A=$(uniq_name lt-a)
new_tenant "$TENANT_A"
for route in '/v1/*' '/downloads/*' '/app/*'; do
    new_sw_rule "$TENANT_A" "$route" 3 60
done
new_sw_rule "$TENANT_A" '/cgi-bin/*' 5 60
KEY_A=$(new_key "$TENANT_A")
KEY_A2=$(new_key "$TENANT_A")
KEY_A3=$(new_key "$TENANT_A")
TENANT_N=$(uniq_name lt-n)
new_tenant "$TENANT_N"
new_sw_rule "$TENANT_N" /elsewhere 5 60
KEY_N=$(new_key "$TENANT_N")
TENANT_FO=$(uniq_name lt-fo)
new_tenant "$TENANT_FO"
ctl rule add "$TENANT_FO" --route '/cgi-bin/*' --algorithm sliding_window \
    --limit 5 --window 60 --failure-mode open >/dev/null
KEY_FO=$(new_key "$TENANT_FO")
TENANT_ANON=$(uniq_name lt-anon)
new_tenant "$TENANT_ANON"
new_sw_rule "$TENANT_ANON" '/cgi-bin/*' 3 60

# checks_3_then_429 WHAT URL: four checks with one subject through a
# responder; the fourth is denied.
checks_3_then_429() {
    c3_subj=$(uniq_name s)
    c3_all=
    # shellcheck disable=SC2034 # the loop variable is not needed
    for c3_i in 1 2 3 4; do
        fetch "$2" -H "X-API-Key: $KEY_A" -H 'Content-Type: application/json' \
            --data-raw "$(check_body /v1/x "$c3_subj")"
        c3_all="$c3_all $STATUS"
    done
    check "$1: three checks allowed, the fourth denied ($c3_all)" \
        eq "$c3_all" " 200 200 200 429"
    expect_429 "$1: the denial"
}

# ---------------------------------------------------------------- bin-path

app_conf "$D/bp-app.conf" listen= workers=2
sed -e "s#127.0.0.1:8080#127.0.0.1:$P_BP#" \
    -e "s#/usr/local/bin/ratelimit-fcgi -c /etc/ratelimit-fcgi/ratelimit.conf#$BUILD/ratelimit-fcgi -c $D/bp-app.conf#" \
    -e "s#/run/lighttpd/ratelimit-fcgi.sock#$D/bp.sock#" \
    "$CONF_DIR/lighttpd-bin-path.conf" >"$D/bp-fragment.conf"
base_conf bp "$P_MAIN"
if lt_start bp "$P_MAIN"; then
    BP_PID=$LT_PID
    n=0
    until fetch "http://127.0.0.1:$P_BP/health/ready" && [ "$STATUS" = 200 ] ||
        [ "$n" -gt 50 ]; do
        n=$((n + 1))
        sleep 0.1
    done
    check "bin-path: GET /health/ready on the API listener is 200" \
        eq "$STATUS" 200
    checks_3_then_429 "bin-path" "http://127.0.0.1:$P_BP/v1/check"
    fetch "http://127.0.0.1:$P_MAIN/v1/check" -H "X-API-Key: $KEY_A" \
        --data-raw "$(check_body /v1/x s)"
    check "bin-path: the main site does not serve the API ($STATUS)" \
        eq "$STATUS" 404
    masters=$(ps -e -o pid= -o ppid= -o comm= | awk -v p="$BP_PID" \
        '$2 == p && $3 == "ratelimit-fcgi" { print $1 }')
    check "bin-path: max-procs 1 spawns one master ($(count_lines "$masters"))" \
        eq "$(count_lines "$masters")" 1
    # shellcheck disable=SC2012 # the names are lighttpd's: bp.sock-N
    check "bin-path: ... on one socket ($(ls "$D"/bp.sock* 2>/dev/null | tr '\n' ' '))" \
        eq "$(ls "$D"/bp.sock* 2>/dev/null)" "$D/bp.sock-0"
    workers=$(ps -e -o ppid= -o comm= | awk -v p="$masters" \
        'p != "" && $1 == p && $2 == "ratelimit-fcgi"' | wc -l)
    check "bin-path: the master runs workers = 2 ($workers)" eq "$workers" 2
    check "bin-path: the application logs to lighttpd's error log" \
        grep -q "listening on fd 0" "$D/bp-error.log"
    kill -TERM "$BP_PID"
    n=0
    # Any process with bp-app.conf in its arguments or title ("-c FILE",
    # "master process (FILE)"); the bracket keeps grep from finding itself.
    # shellcheck disable=SC2009
    while [ "$n" -lt 50 ] && ps -e -o args= | grep -q "$D/[b]p-app.conf"; do
        n=$((n + 1))
        sleep 0.1
    done
    check "bin-path: stopping lighttpd stops the master and its workers" \
        test "$n" -lt 50
else
    fail "lighttpd starts with conf/lighttpd-bin-path.conf"
fi

# ---------------------------------------------------------------- external socket

# One application on a Unix socket serves both the responder and the
# authorizer below.
app_conf "$D/rl.conf" "listen=unix:$RL_SOCK" workers=2 \
    "anonymous_tenant=$TENANT_ANON" trusted_proxies=127.0.0.2
app_start_unix rl "$D/rl.conf"
sed -e "s#127.0.0.1:8080#127.0.0.1:$P_EXT#" \
    -e "s#/run/ratelimit/fcgi.sock#$RL_SOCK#" \
    "$CONF_DIR/lighttpd-socket.conf" >"$D/ext-fragment.conf"
base_conf ext "$P_EXT"
if lt_start ext "$P_EXT"; then
    fetch "http://127.0.0.1:$P_EXT/health/ready"
    check "external socket: GET /health/ready is 200" eq "$STATUS" 200
    checks_3_then_429 "external socket" "http://127.0.0.1:$P_EXT/v1/check"
    workers=$(ps -e -o ppid= -o comm= | awk -v p="$APP_PID" \
        '$1 == p && $2 == "ratelimit-fcgi"' | wc -l)
    check "external socket: the application runs workers = 2 ($workers)" \
        eq "$workers" 2
else
    fail "lighttpd starts with conf/lighttpd-socket.conf"
fi

# ---------------------------------------------------------------- authorizer

# The proxied application (the fragment's 127.0.0.1:8000): another lighttpd
# that runs env.sh.
cat >"$D/app.conf" <<EOF
server.modules += ( "mod_cgi" )
server.port = $P_APP
server.bind = "127.0.0.1"
server.document-root = "$D/app-root"
server.errorlog = "$D/app-error.log"
cgi.assign = ( ".sh" => "/bin/sh" )
EOF
lt_start app "$P_APP" || fail "the proxied application (lighttpd) starts"

# The front: mod_cgi is loaded before the fragment, as Debian's 10-cgi.conf
# would be.
sed -e "s#/run/ratelimit/fcgi.sock#$RL_SOCK#g" \
    -e "s#\"port\" => 8000#\"port\" => $P_APP#" \
    "$CONF_DIR/lighttpd-authorizer.conf" >"$D/auth-fragment.conf"
# shellcheck disable=SC2016 # lighttpd's $HTTP, not the shell's
base_conf auth "$P_AUTH" 'server.modules += ( "mod_cgi" )
$HTTP["url"] =^ "/cgi-bin/" { cgi.assign = ( ".sh" => "/bin/sh" ) }'
A=http://127.0.0.1:$P_AUTH
lt_start auth "$P_AUTH" ||
    fail "lighttpd starts with conf/lighttpd-authorizer.conf"

# (a) static files
n_times 3 "$A/downloads/file.txt" -H "X-API-Key: $KEY_A"
check "authorizer, static: 3 requests with a key are served ($ALL)" \
    eq "$ALL" " 200 200 200"
check "authorizer, static: the client gets the file" eq "$BODY" "protected file"
check "authorizer, static: no X-RateLimit-* reach the client on 200" \
    eq "$(header X-RateLimit-Limit)" ""
fetch "$A/downloads/file.txt" -H "X-API-Key: $KEY_A"
expect_429 "authorizer, static, the 4th request"
check "authorizer, static: the 429 comes with the authorizer's JSON" \
    contains "$(header Content-Type)" application/json
# The same file spelled otherwise is the same route: no way around a rule.
for spelling in /%64ownloads/file.txt //downloads/file.txt \
    /x/../downloads/file.txt /./downloads/./file.txt; do
    fetch "$A$spelling" --path-as-is -H "X-API-Key: $KEY_A"
    check "authorizer, static: $spelling is limited too ($STATUS)" \
        eq "$STATUS" 429
done
fetch "$A/downloads/file.txt" -H "Authorization: Bearer $KEY_A2"
check "authorizer, static: another key (Bearer) is counted apart ($STATUS)" \
    eq "$STATUS" 200
fetch "$A/downloads/file.txt" -H "X-API-Key: rl_no_such_key_0123456789"
check "authorizer, static: an unknown key gets 401 ($STATUS)" eq "$STATUS" 401
check "authorizer, static: error unauthorized" \
    eq "$(json_field error)" unauthorized
fetch "$A/downloads/file.txt"
check "authorizer, static: no key, anonymous tenant without a rule for it: served ($STATUS)" \
    eq "$STATUS" 200

# (c) CGI: the program sees the decision in its environment.
now=$(date +%s)
fetch "$A/cgi-bin/env.sh?q=1" -H "X-API-Key: $KEY_A" --data-raw 'hello=body'
check "authorizer, CGI: 200" eq "$STATUS" 200
check "authorizer, CGI: RATELIMIT_LIMIT=5 in the program's environment" \
    eq "$(envval RATELIMIT_LIMIT)" 5
check "authorizer, CGI: RATELIMIT_REMAINING=4" \
    eq "$(envval RATELIMIT_REMAINING)" 4
# A sliding window is fully reset at the latest two windows from now (the
# current window's count still weighs in during the next one).
reset=$(envval RATELIMIT_RESET)
check "authorizer, CGI: RATELIMIT_RESET is unix seconds, at most 2 windows ahead ($((reset - now)) s)" \
    eq "$(ge "$reset" "$now" && le "$reset" $((now + 121)) && echo y)" y
check "authorizer, CGI: the POST body reaches the program" \
    eq "$(envval BODY)" hello=body
fetch "$A/cgi-bin/env.sh" -H "X-API-Key: $KEY_A"
check "authorizer, CGI: the next request sees RATELIMIT_REMAINING=3" \
    eq "$(envval RATELIMIT_REMAINING)" 3
fetch "$A/cgi-bin/env.sh" -H "X-API-Key: $KEY_N"
check "authorizer, CGI: a key whose tenant has no matching rule is served ($STATUS)" \
    eq "$STATUS" 200
check "authorizer, CGI: ... without RATELIMIT_* values" \
    eq "$(envval RATELIMIT_LIMIT)" "<absent>"

# The anonymous tenant: 3 a minute per client address.  RATELIMIT_REMAINING
# tells which address was counted.
# anon SOURCE [XFF]: sets R to "STATUS/REMAINING" (or STATUS).
anon() {
    if [ -n "${2:-}" ]; then
        fetch "$A/cgi-bin/env.sh" --interface "$1" -H "X-Forwarded-For: $2"
    else
        fetch "$A/cgi-bin/env.sh" --interface "$1"
    fi
    R=$STATUS
    if [ "$STATUS" = 200 ]; then
        R="$STATUS/$(envval RATELIMIT_REMAINING)"
    fi
}
anon 127.0.0.3
check "anonymous: the CGI program sees REMOTE_ADDR 127.0.0.3 (curl --interface)" \
    eq "$(envval REMOTE_ADDR)" 127.0.0.3
check "anonymous, untrusted 127.0.0.3: first request counted ($R)" eq "$R" 200/2
anon 127.0.0.3 10.9.9.9
check "anonymous, untrusted 127.0.0.3: its X-Forwarded-For is ignored ($R)" \
    eq "$R" 200/1
anon 127.0.0.3
check "anonymous, untrusted 127.0.0.3: third ($R)" eq "$R" 200/0
anon 127.0.0.3 10.8.8.8
check "anonymous, untrusted 127.0.0.3: fourth is 429, whatever its X-Forwarded-For ($R)" \
    eq "$R" 429
check "anonymous: the 429 has Retry-After" ge "$(header Retry-After)" 1
anon 127.0.0.1
check "anonymous: another address (127.0.0.1) has its own count ($R)" \
    eq "$R" 200/2
anon 127.0.0.2 "10.1.1.1, 10.2.2.2"
check "anonymous, trusted proxy 127.0.0.2: counted as the rightmost address 10.2.2.2 ($R)" \
    eq "$R" 200/2
anon 127.0.0.2 "10.7.7.7, 10.2.2.2"
check "anonymous, trusted proxy: same rightmost address, same count ($R)" \
    eq "$R" 200/1
anon 127.0.0.2 "10.2.2.2, 127.0.0.2"
check "anonymous, trusted proxy: trusted addresses are skipped from the right ($R)" \
    eq "$R" 200/0
anon 127.0.0.2 "10.2.2.2"
check "anonymous, trusted proxy: 10.2.2.2 is now limited ($R)" eq "$R" 429
anon 127.0.0.2 "10.2.2.2, 10.1.1.1"
check "anonymous, trusted proxy: 10.1.1.1 (rightmost) has its own count ($R)" \
    eq "$R" 200/2
anon 127.0.0.2
check "anonymous, trusted proxy without X-Forwarded-For: counted as itself ($R)" \
    eq "$R" 200/2

# (b) the proxied HTTP application
n_times 3 "$A/app/env.sh" -H "X-API-Key: $KEY_A"
check "authorizer, mod_proxy: 3 requests with a key are served ($ALL)" \
    eq "$ALL" " 200 200 200"
check "authorizer, mod_proxy: the answer is the proxied application's" \
    eq "$(envval SERVER_PORT)" "$P_APP"
check "authorizer, mod_proxy: the proxied application gets no RATELIMIT_* (documented)" \
    eq "$(envval RATELIMIT_LIMIT)" "<absent>"
fetch "$A/app/env.sh" -H "X-API-Key: $KEY_A"
expect_429 "authorizer, mod_proxy, the 4th request"

# The pitfall the file warns about: mod_proxy loaded before mod_fastcgi
# takes /app/ before the authorizer is asked.
cp "$D/auth-fragment.conf" "$D/order-fragment.conf"
base_conf order "$P_ORDER" 'server.modules += ( "mod_proxy" )'
if lt_start order "$P_ORDER"; then
    fetch "http://127.0.0.1:$P_ORDER/app/env.sh" -H "X-API-Key: $KEY_A"
    check "pitfall: with mod_proxy loaded first, the authorizer is bypassed ($STATUS for a limited key)" \
        eq "$STATUS" 200
    stop_order=$LT_PID
    kill -TERM "$stop_order" 2>/dev/null || true
fi

# Without anonymous_tenant, a request without a key is refused.
app_conf "$D/noanon.conf" "listen=unix:$D/noanon.sock" workers=1
app_start_unix noanon "$D/noanon.conf"
sed -e "s#$RL_SOCK#$D/noanon.sock#g" "$D/auth-fragment.conf" \
    >"$D/noanon-fragment.conf"
base_conf noanon "$P_NOANON"
if lt_start noanon "$P_NOANON"; then
    fetch "http://127.0.0.1:$P_NOANON/downloads/file.txt"
    check "authorizer without anonymous_tenant: no key gets 401 ($STATUS)" \
        eq "$STATUS" 401
    check "authorizer without anonymous_tenant: message missing API key" \
        eq "$(json_field message)" "missing API key"
fi

# Debian's layout: lighttpd.conf loads a few modules and then includes
# conf-enabled/*.conf in name order; `lighty-enable-mod proxy` links
# 10-proxy.conf (which only loads mod_proxy) there.  The authorizer file,
# enabled as the README says (05-ratelimit-fcgi.conf), sorts before it, so
# mod_fastcgi comes first and the authorizer is asked; under the old name
# (50-) mod_proxy would take /app/ first, unlimited.
P_DEB=$((PORT + 8))
DEB=$D/deb
mkdir -p "$DEB/conf-available" "$DEB/conf-enabled"
if [ -f /etc/lighttpd/conf-available/10-proxy.conf ]; then
    cp /etc/lighttpd/conf-available/10-proxy.conf "$DEB/conf-available/"
else
    echo 'server.modules += ( "mod_proxy" )' \
        >"$DEB/conf-available/10-proxy.conf"
fi
sed -e "s#$RL_SOCK#$D/noanon.sock#g" "$D/auth-fragment.conf" \
    >"$DEB/conf-available/05-ratelimit-fcgi.conf"
cat >"$DEB/lighttpd.conf" <<EOF
server.modules = ( "mod_indexfile", "mod_access", "mod_alias", "mod_redirect" )
server.port = $P_DEB
server.bind = "127.0.0.1"
server.document-root = "$D/htdocs"
server.errorlog = "$DEB/error.log"
server.pid-file = "$DEB/lighttpd.pid"
include "$DEB/conf-enabled/*.conf"
EOF
deb_tenant=$(uniq_name debian)
new_tenant "$deb_tenant"
deb_key=$(new_key "$deb_tenant")
new_sw_rule "$deb_tenant" '/app/*' 2 60
for m in 10-proxy 05-ratelimit-fcgi; do
    ln -s "../conf-available/$m.conf" "$DEB/conf-enabled/$m.conf"
done
order=$(/usr/sbin/lighttpd -p -f "$DEB/lighttpd.conf" 2>/dev/null |
    sed -n '/server.modules/,/)/p' | grep -o '"mod_[a-z]*"' | tr -d '"' |
    grep 'mod_fastcgi\|mod_proxy' | head -n 2 | tr '\n' ' ')
check "Debian layout: with 05-ratelimit-fcgi.conf and 10-proxy.conf, mod_fastcgi loads before mod_proxy ($order)" \
    eq "$order" "mod_fastcgi mod_proxy "
DU=http://127.0.0.1:$P_DEB/app/env.sh
if lighttpd_start "$DEB/lighttpd.conf" "$DEB/error.log" "$P_DEB"; then
    fetch "$DU"
    check "Debian layout: /app/ without a key gets 401 ($STATUS)" eq "$STATUS" 401
    fetch "$DU" -H "X-API-Key: rl_bogus_$(uniq_name k)"
    check "Debian layout: /app/ with a bogus key gets 401 ($STATUS)" \
        eq "$STATUS" 401
    n_times 3 "$DU" -H "X-API-Key: $deb_key"
    check "Debian layout: a good key gets 200, 200, then 429 (limit 2: $ALL)" \
        eq "$ALL" " 200 200 429"
    stop_process "$LT_PID" TERM
else
    fail "Debian layout: lighttpd starts"
fi
# The same file under the name that sorts after 10-proxy.conf.
mv "$DEB/conf-enabled/05-ratelimit-fcgi.conf" \
    "$DEB/conf-enabled/50-ratelimit-fcgi.conf"
if lighttpd_start "$DEB/lighttpd.conf" "$DEB/error.log" "$P_DEB"; then
    fetch "$DU"
    check "Debian layout, enabled as 50-ratelimit-fcgi.conf: bypassed, as the README warns ($STATUS without a key)" \
        eq "$STATUS" 200
    stop_process "$LT_PID" TERM
fi

# Redis down: 503 with Retry-After, then back to 200 once Redis is.
stack stop-redis >/dev/null 2>&1
fetch "$A/downloads/file.txt" -H "X-API-Key: $KEY_A3"
check "authorizer, Redis stopped: 503 ($STATUS)" eq "$STATUS" 503
check "authorizer, Redis stopped: Retry-After" ge "$(header Retry-After)" 1
check "authorizer, Redis stopped: error service_unavailable" \
    eq "$(json_field error)" service_unavailable
fetch "$A/cgi-bin/env.sh" -H "X-API-Key: $KEY_FO"
check "authorizer, Redis stopped, rule with --failure-mode open: served ($STATUS)" \
    eq "$STATUS" 200
check "authorizer, fail-open: the program sees RATELIMIT_STATUS=fail-open" \
    eq "$(envval RATELIMIT_STATUS)" fail-open
stack start-redis >/dev/null 2>&1
n=0
until fetch "$A/downloads/file.txt" -H "X-API-Key: $KEY_A3" &&
    [ "$STATUS" = 200 ] || [ "$n" -gt 50 ]; do
    n=$((n + 1))
    sleep 0.1
done
check "authorizer, Redis back: 200 again ($STATUS)" eq "$STATUS" 200

finish
