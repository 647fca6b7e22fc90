#!/bin/sh
# test_proxy_access.sh -- who reads /status, /metrics and /dashboard
# without a key when a proxy on the same host stands in front: the client
# is the address trusted_proxies yields, never the proxy's loopback.
#
# Two pools, each behind a lighttpd of its own (the FastCGI server, every
# path passed on): T with trusted_proxies = 127.0.0.1, U with none (the
# default).  In front of both, on the same host, an nginx (proxy_pass with
# X-Forwarded-For $proxy_add_x_forwarded_for) and a lighttpd (mod_proxy,
# which appends to X-Forwarded-For the same way).  They connect from
# 127.0.0.1, so the pools see REMOTE_ADDR 127.0.0.1 for all they forward.
#
# A client at 203.0.113.7 is simulated by sending "X-Forwarded-For:
# 203.0.113.7" to a front end, which appends its real peer, 127.0.0.1: T,
# trusting 127.0.0.1, walks past it to 203.0.113.7, as it would for a
# chain of proxies whose first saw 203.0.113.7.  U trusts no proxy, so the
# client of a forwarded request is unknown to it.  Either way that client
# gets 403; loopback straight to a pool's lighttpd still gets 200, and so
# does loopback through a front end that T trusts.
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

NGINX=${NGINX:-/usr/sbin/nginx}
P_T=$((PORT + 177))
P_U=$((PORT + 178))
P_NGX_T=$((PORT + 179))
P_NGX_U=$((PORT + 180))
P_LT_T=$((PORT + 181))
P_LT_U=$((PORT + 182))
serve_dir ratelimit-proxy-access
mkdir -p "$D/tmp"

tenant=$(uniq_name pxa)
new_tenant "$tenant"
admin=$(new_key "$tenant" admin)

# ---------------------------------------------------------------- servers

private_app pt "$P_T" workers=2 trusted_proxies=127.0.0.1 ||
    fail "pool T (trusted_proxies = 127.0.0.1) and its lighttpd start"
private_app pu "$P_U" workers=2 ||
    fail "pool U (no trusted_proxies) and its lighttpd start"

if [ -x "$NGINX" ]; then
    user_line=
    if [ "$(id -u)" = 0 ]; then
        user_line="user nobody $(id -gn nobody 2>/dev/null || echo nogroup);"
    fi
    cat >"$D/nginx.conf" <<EOF
$user_line
worker_processes 1;
pid $D/nginx.pid;
error_log $D/nginx-error.log info;
events { worker_connections 64; }
http {
    access_log $D/nginx-access.log;
    client_body_temp_path $D/tmp/body;
    proxy_temp_path $D/tmp/proxy;
    fastcgi_temp_path $D/tmp/fastcgi;
    scgi_temp_path $D/tmp/scgi;
    uwsgi_temp_path $D/tmp/uwsgi;
    server {
        listen 127.0.0.1:$P_NGX_T;
        location / {
            proxy_pass http://127.0.0.1:$P_T;
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
        }
    }
    server {
        listen 127.0.0.1:$P_NGX_U;
        location / {
            proxy_pass http://127.0.0.1:$P_U;
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
        }
    }
}
EOF
    "$NGINX" -c "$D/nginx.conf" -e "$D/nginx-error.log" -g 'daemon off;' \
        >>"$D/nginx-start.log" 2>&1 &
    PIDS="$PIDS $!"
    retry 50 ready_on "$P_NGX_T"
    check "nginx in front of T: /health/ready is 200" ready_on "$P_NGX_T"
    check "nginx in front of U: /health/ready is 200" ready_on "$P_NGX_U"
else
    fail "nginx is installed ($NGINX)"
fi

cat >"$D/front.conf" <<EOF
server.modules += ( "mod_proxy" )
server.port = $P_LT_T
server.bind = "127.0.0.1"
server.document-root = "$D"
server.errorlog = "$D/front-error.log"
proxy.server = ( "/" => (( "host" => "127.0.0.1", "port" => $P_T )) )
\$SERVER["socket"] == "127.0.0.1:$P_LT_U" {
    proxy.server = ( "/" => (( "host" => "127.0.0.1", "port" => $P_U )) )
}
EOF
lighttpd_start "$D/front.conf" "$D/front-error.log" "$P_LT_T" ||
    fail "lighttpd (mod_proxy) in front of T and U starts"
check "lighttpd in front of T: /health/ready is 200" ready_on "$P_LT_T"
check "lighttpd in front of U: /health/ready is 200" ready_on "$P_LT_U"

# ---------------------------------------------------------------- checks

# Operator views that a client outside status_allow was shown, counted for
# the fault table.
served=0
asked=0

# get PORT PATH [CURL-ARG...]: one request to 127.0.0.1:PORT.
get() {
    gt_port=$1
    gt_path=$2
    shift 2
    fetch "http://127.0.0.1:$gt_port$gt_path" "$@"
}

# through NAME PORT-T PORT-U: the checks through one front end.
through() {
    for th_pool in "T $2" "U $3"; do
        th_pn=${th_pool% *}
        th_port=${th_pool#* }
        for th_p in /status /metrics /dashboard; do
            get "$th_port" "$th_p" -H 'X-Forwarded-For: 203.0.113.7'
            asked=$((asked + 1))
            [ "$STATUS" = 200 ] && served=$((served + 1))
            check "$1 in front of $th_pn, client 203.0.113.7: $th_p is 403 ($STATUS)" \
                eq "$STATUS" 403
        done
        get "$th_port" /status -H "X-API-Key: $admin" \
            -H 'X-Forwarded-For: 203.0.113.7'
        check "$1 in front of $th_pn, client 203.0.113.7 with an admin key: /status is 200 ($STATUS)" \
            eq "$STATUS" 200
    done
    # T trusts the proxy: a client on loopback is still the operator.
    for th_p in /status /metrics /dashboard; do
        get "$2" "$th_p"
        check "$1 in front of T, client 127.0.0.1: $th_p is 200 ($STATUS)" \
            eq "$STATUS" 200
    done
    # U does not: whoever the proxy forwards is unknown, loopback too.
    get "$3" /status
    check "$1 in front of U, client 127.0.0.1: /status is 403 ($STATUS)" \
        eq "$STATUS" 403
    check "$1 in front of U: the answer names trusted_proxies" \
        contains "$BODY" trusted_proxies
}
through nginx "$P_NGX_T" "$P_NGX_U"
through lighttpd "$P_LT_T" "$P_LT_U"
fault_row "a client at 203.0.113.7 behind nginx or lighttpd on the same host: /status, /metrics, /dashboard without a key" \
    "$asked" "$served" "-"

# Straight to a pool's lighttpd: REMOTE_ADDR is the client.
for pool in "T $P_T" "U $P_U"; do
    pn=${pool% *}
    port=${pool#* }
    for p in /status /metrics /dashboard; do
        get "$port" "$p"
        check "straight to $pn from 127.0.0.1: $p is 200 ($STATUS)" \
            eq "$STATUS" 200
    done
done
# A loopback peer whose request says it was forwarded, with no proxy
# trusted: not taken as local.
get "$P_U" /status -H 'X-Forwarded-For: 203.0.113.7'
check "straight to U from 127.0.0.1 with X-Forwarded-For: /status is 403 ($STATUS)" \
    eq "$STATUS" 403
get "$P_U" /metrics -H 'X-Forwarded-For: 203.0.113.7'
check "straight to U from 127.0.0.1 with X-Forwarded-For: /metrics is 403 ($STATUS)" \
    eq "$STATUS" 403
# /v1/config answers keys only, from any address.
get "$P_T" /v1/config/tenants
check "/v1/config/tenants from 127.0.0.1 without a key: 401 ($STATUS)" \
    eq "$STATUS" 401

finish
