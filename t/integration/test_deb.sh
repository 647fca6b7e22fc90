#!/bin/sh
# test_deb.sh -- the production path of the README, literally: the Debian
# package built from this tree (make deb, or DEB=FILE built earlier) is
# installed with dpkg -i; a service role, an admin role and a database are
# made in the stack's PostgreSQL; /etc/ratelimit-fcgi/ratelimit.conf is
# edited as an administrator would; ratelimitctl (the installed one, whose
# schema is built in) migrates and adds a tenant, a key and a rule; the
# installed units pass systemd-analyze verify; their ExecStartPre and
# ExecStart run as User= with the [Socket]'s socket on fd 0 (no systemd
# runs here); nginx and Apache, with the package's own snippets enabled
# (only the port changed), serve a check, /status, /dashboard and
# /v1/config/; then everything stops, dpkg --purge removes the package,
# and a listing of /etc, /usr and /var shows nothing of it left.
#
# First, make install and make uninstall with a DESTDIR leave nothing.
#
# It needs root, and it refuses to run when ratelimit-fcgi is installed or
# the account ratelimit exists (the purge would remove them).  Other tests
# use $BUILD's binaries, never the installed ones.
# shellcheck disable=SC2317 # helpers called through `check` and traps

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

NGX_PORT=$((PORT + 61))
APA_PORT=$((PORT + 62))
SOCK=/run/ratelimit/fcgi.sock
UNITS=/lib/systemd/system
DROPIN=/etc/systemd/system/ratelimit-fcgi.service.d
sfx=$$
svc=rd_svc_$sfx
adm=rd_adm_$sfx
db=rd_db_$sfx

# make install then make uninstall into a DESTDIR: nothing but empty
# directories is left.
dest=$T_TMP/destdir
(cd "$ROOT" && make install DESTDIR="$dest" PREFIX=/usr BUILD="$BUILD" &&
    make uninstall DESTDIR="$dest" PREFIX=/usr BUILD="$BUILD") \
    >"$T_TMP/uninstall.log" 2>&1
rc=$?
check "make install, then make uninstall, exit 0 ($rc)" eq "$rc" 0
left=$(find "$dest" ! -type d | sed "s#^$dest##" | tr '\n' ' ')
check "make uninstall leaves no file of make install ($left)" eq "$left" ""
left=$(find "$dest" -type d -name '*ratelimit*' | sed "s#^$dest##" | tr '\n' ' ')
check "make uninstall removes the directories of ours ($left)" eq "$left" ""
rm -rf "$dest"

if [ "$(id -u)" != 0 ]; then
    fail "test_deb runs as root (dpkg -i, a system account)"
    finish
fi
for tool in dpkg-buildpackage dh /usr/sbin/nginx /usr/sbin/apache2; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        fail "$tool is installed (make deps)"
        finish
    fi
done
# The three sets of scripts/install-deps.sh, with every package missing
# (a dpkg-query that knows none), as root (an id that says 0) and with
# apt-get and service that only write down what they are asked; run as
# nobody, so that nothing real can be touched.
fake=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-deps.XXXXXX")
printf '#!/bin/sh\n' >"$fake/dpkg-query"
printf '#!/bin/sh\necho 0\n' >"$fake/id"
printf '#!/bin/sh\necho "apt-get $*" >>"%s/deps.log"\n' "$fake" >"$fake/apt-get"
printf '#!/bin/sh\necho "service $*" >>"%s/deps.log"\n' "$fake" >"$fake/service"
chmod 0755 "$fake"/*
chmod 0777 "$fake"
deps_run() {
    rm -f "$fake/deps.log"
    runuser -u nobody -- env PATH="$fake:$PATH" sh -s -- "$@" \
        <"$ROOT/scripts/install-deps.sh" >/dev/null 2>&1
    sed -n 's/.*--no-install-recommends //p; s/^service \([^ ]*\) stop$/stopped \1/p' \
        "$fake/deps.log" 2>/dev/null | tr '\n' ' '
}
got=$(deps_run --runtime)
check "install-deps --runtime: the libraries, PostgreSQL and Redis, and no service stopped ($got)" \
    eq "$got" "libfcgi0ldbl libhiredis0.14 libpq5 libjson-c5 libssl3 postgresql redis-server "
got=$(deps_run --build)
check "install-deps --build: no server, nothing stopped ($got)" \
    eq "$(printf '%s' "$got" | grep -cE '(^| )(postgresql|redis-server|nginx[a-z-]*|apache2|lighttpd)( |$)|stopped')" 0
check "install-deps --build: the -dev libraries and debhelper ($got)" \
    matches "$got" 'libfcgi-dev .*libssl-dev .*debhelper '
got=$(deps_run)
check "install-deps (everything): the servers it installed are stopped again ($got)" \
    matches "$got" 'stopped redis-server .*stopped postgresql '
rm -rf "$fake"

if dpkg-query -W -f='${db:Status-Abbrev}' ratelimit-fcgi 2>/dev/null |
    grep -q '^.[^n]'; then
    fail "ratelimit-fcgi is not installed before the test (dpkg --purge it first)"
    finish
fi
if getent passwd ratelimit >/dev/null || getent group ratelimit >/dev/null; then
    fail "no account ratelimit exists before the test (the purge removes it)"
    finish
fi
if [ -e /run/ratelimit ] || [ -e /run/ratelimit-fcgi ]; then
    fail "/run/ratelimit and /run/ratelimit-fcgi do not exist before the test"
    finish
fi

serve_dir ratelimit-deb
mkdir -p "$D/tmp" "$D/nginx/sites-enabled" "$D/apache/run"
chmod 755 "$D/nginx" "$D/nginx/sites-enabled"
MASTER=
NGX_PID=
APA_PID=
INSTALLED=0
cleanup_deb() {
    stop_process "$NGX_PID" QUIT
    [ -n "$APA_PID" ] && kill -TERM "$APA_PID" 2>/dev/null
    stop_process "$APA_PID" TERM
    stop_process "$MASTER" QUIT
    rm -rf "$DROPIN" /run/ratelimit /run/ratelimit-fcgi
    if [ "$INSTALLED" = 1 ]; then
        dpkg --purge ratelimit-fcgi >"$D/purge-again.log" 2>&1
    fi
    psql_q "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1
    psql_q "DROP ROLE IF EXISTS $adm" >/dev/null 2>&1
    psql_q "DROP ROLE IF EXISTS $svc" >/dev/null 2>&1
    rm -rf "$D"
    [ "$LOCK" = /nonexistent ] || rm -rf "$LOCK"
}
# One run at a time on this machine (dpkg and the system account are
# shared): a directory with the owner's pid, waited for up to 5 minutes,
# taken over when its owner is gone.
LOCK=/run/lock/ratelimit-fcgi-test-deb
lock_n=0
until mkdir "$LOCK" 2>/dev/null; do
    owner=$(cat "$LOCK/pid" 2>/dev/null)
    if [ -n "$owner" ] && ! kill -0 "$owner" 2>/dev/null; then
        rm -rf "$LOCK"
        continue
    fi
    lock_n=$((lock_n + 1))
    if [ "$lock_n" -gt 300 ]; then
        fail "no other test_deb holds $LOCK for 5 minutes"
        LOCK=/nonexistent
        finish
    fi
    sleep 1
done
echo $$ >"$LOCK/pid"
trap 'cleanup_deb' EXIT
trap 'exit 130' INT TERM
t_start=$(date +%s)

# listing FILE: every path under /etc, /usr and /var, without what
# changes on its own (apt's and man's caches, logs of other programs, the
# data of the servers the tests run).
listing() {
    find /etc /usr /var -xdev 2>/dev/null | grep -Ev \
        '^/var/(cache|tmp|backups|mail|spool)(/|$)|^/var/lib/(apt|postgresql|redis|nginx|apache2|lighttpd|systemd|logrotate|ucf|sudo)/|^/var/lib/dpkg/[^/]*-old$|^/var/log/(apt|journal|nginx|apache2|lighttpd|postgresql|redis|installer)(/|$)|^/var/log/[^/]*(\.log|log|\.gz|\.[0-9])$|^/etc/ld\.so\.cache$' |
        sort >"$1"
}
listing "$D/before"

# ---------------------------------------------------------------- build

# README "Production in ten minutes", step 1 as written (make deps-build,
# make deb, apt-get install of the file), with the package built in $D;
# DEB=FILE skips the build and installs FILE.
step1=$(doc_block README.md "Production in ten minutes" 1 |
    sed -e "s#make deb\$#make deb BUILD=$D/pkg#" \
        -e "s#\./build/deb/#$D/pkg/deb/#")
if [ -n "${DEB:-}" ]; then
    step1=$(printf '%s\n' "$step1" | sed -e '/make deb/d' \
        -e "s#$D/pkg/deb/ratelimit-fcgi_\*_amd64\.deb#$DEB#")
fi
check "step 1 builds and installs what it makes ($(printf '%s' "$step1" | tr '\n' ';'))" \
    contains "$step1" "apt-get install -y $D/pkg/deb/"
(cd "$ROOT" && DEB_BUILD_OPTIONS="nocheck noddebs parallel=$(nproc)" \
    APT_LISTCHANGES_FRONTEND=none DEBIAN_FRONTEND=noninteractive \
    sh -ec "$step1") >"$D/install.log" 2>&1
rc=$?
INSTALLED=1
check "README step 1 exits 0 ($rc)" eq "$rc" 0
[ "$rc" = 0 ] || { sed 's/^/    /' "$D/install.log" | tail -n 20; finish; }
deb=${DEB:-$(find "$D/pkg/deb" -maxdepth 1 -name 'ratelimit-fcgi_*_amd64.deb' 2>/dev/null | head -n 1)}
check "the package is there ($deb)" test -s "$deb"
# lintian: no error (its warnings and notes are printed, and justified in
# debian/README.source).
lintian --fail-on error --tag-display-limit 0 "$deb" >"$D/lintian.log" 2>&1
rc=$?
check "lintian finds no error in the package (exit $rc)" eq "$rc" 0
sed 's/^/    lintian: /' "$D/lintian.log"
t_built=$(date +%s)

# ---------------------------------------------------------------- install

check "the daemon is /usr/sbin/ratelimit-fcgi" test -x /usr/sbin/ratelimit-fcgi
check "ratelimitctl is /usr/bin/ratelimitctl" test -x /usr/bin/ratelimitctl
check "ratelimit-release (the leases' companion) is /usr/bin/ratelimit-release" \
    test -x /usr/bin/ratelimit-release
check "ratelimit-release -h runs and names itself" \
    contains "$(/usr/bin/ratelimit-release -h 2>&1)" ratelimit-release
for page in ratelimit-fcgi ratelimitctl ratelimit-release; do
    check "man finds $page(8)" eq "$(man -w "$page" 2>/dev/null)" \
        "/usr/share/man/man8/$page.8.gz"
done
check "the system account ratelimit exists" \
    eq "$(id -un ratelimit 2>/dev/null) $(id -gn ratelimit 2>/dev/null)" \
    "ratelimit ratelimit"
check "the configuration is root:ratelimit 0640 ($(stat -c '%U:%G %a' /etc/ratelimit-fcgi/ratelimit.conf))" \
    eq "$(stat -c '%U:%G %a' /etc/ratelimit-fcgi/ratelimit.conf)" \
    "root:ratelimit 640"
check "the configuration is a conffile" contains \
    "$(dpkg-query -W -f='${Conffiles}' ratelimit-fcgi)" \
    /etc/ratelimit-fcgi/ratelimit.conf
for f in /etc/nginx/sites-available/ratelimit-fcgi \
    /etc/apache2/conf-available/ratelimit-fcgi.conf \
    /etc/apache2/conf-available/ratelimit-fcgi-authnz.conf \
    /etc/lighttpd/conf-available/05-ratelimit-fcgi.conf \
    /etc/lighttpd/conf-available/50-ratelimit-fcgi-api.conf \
    /etc/logrotate.d/ratelimit-fcgi /usr/lib/ratelimit-fcgi/fcgid-wrapper \
    /usr/share/doc/ratelimit-fcgi/examples/apache-fcgid.conf \
    /usr/share/doc/ratelimit-fcgi/examples/fcgid.conf; do
    check "the package has $f, filled in" filled "$f"
done
words=$(bash -c '. /usr/share/bash-completion/completions/ratelimitctl
    COMP_WORDS=(ratelimitctl ""); COMP_CWORD=1; _ratelimitctl
    echo "${COMPREPLY[*]}"' 2>&1)
check "bash completion offers ratelimitctl's commands ($words)" \
    matches "$words" 'migrate.*tenant|tenant.*migrate'
left=$(pgrep -u ratelimit 2>/dev/null | wc -l)
check "installing started nothing ($left processes of ratelimit)" eq "$left" 0

# ---------------------------------------------------------------- setup

# README "Production in ten minutes", steps 2 to 4 (the stack's superuser
# in place of `su postgres`, its port, and names of this run).
psql_q "CREATE ROLE $svc LOGIN;
CREATE ROLE $adm LOGIN PASSWORD 'change-me';
CREATE DATABASE $db OWNER $adm;"
check "the roles and the database are made" eq "$?" 0

# The administrator's edits: the database and Redis of this host.  The
# service role is named in a drop-in, as the service is not peer-
# authenticated as "ratelimit" here.
sed -i -e "s|^pg_conninfo = .*|pg_conninfo = \"host=127.0.0.1 port=$PG_PORT dbname=$db\"|" \
    -e "s|^redis = .*|redis = 127.0.0.1:$REDIS_PORT|" \
    /etc/ratelimit-fcgi/ratelimit.conf
mkdir -p "$DROPIN"
printf '[Service]\nEnvironment=PGUSER=%s\n' "$svc" >"$DROPIN/role.conf"

out=$(
    export PGHOST=127.0.0.1 PGPORT="$PG_PORT" PGUSER="$adm" PGPASSWORD=change-me
    set -e
    ratelimitctl migrate
    psql -d "$db" -X -q -v ON_ERROR_STOP=1 <<SQL
GRANT SELECT ON tenants, api_keys, rules, limits TO $svc;
GRANT UPDATE (last_used_at) ON api_keys TO $svc;
SQL
    ratelimitctl tenant add example
    ratelimitctl key create example
    ratelimitctl rule add example --route '/api/*' --algorithm sliding_window --limit 100 --window 60
    ratelimitctl key create example --role admin
) 2>&1
rc=$?
check "migrate, grants, tenant, keys and rule with the installed ratelimitctl ($rc)" \
    eq "$rc" 0
[ "$rc" = 0 ] || printf '%s\n' "$out" | tail -n 10 | sed 's/^/    /'
KEY=$(printf '%s\n' "$out" | grep -oE 'rl_[A-Za-z0-9_-]{16,}' | sed -n 1p)
ADMIN_KEY=$(printf '%s\n' "$out" | grep -oE 'rl_[A-Za-z0-9_-]{16,}' | sed -n 2p)
check "ratelimitctl printed a check key and an admin key" \
    matches "$KEY $ADMIN_KEY" '^rl_.* rl_'

# An upgrade (here the same package again) keeps the edited conffile and
# its owner and mode.
dpkg -i "$deb" >"$D/reinstall.log" 2>&1
rc=$?
check "dpkg -i again over the installed package ($rc)" eq "$rc" 0
check "it keeps the edited ratelimit.conf" \
    grep -q "^pg_conninfo = \"host=127.0.0.1 port=$PG_PORT dbname=$db\"" \
    /etc/ratelimit-fcgi/ratelimit.conf
check "it keeps root:ratelimit 0640 ($(stat -c '%U:%G %a' /etc/ratelimit-fcgi/ratelimit.conf))" \
    eq "$(stat -c '%U:%G %a' /etc/ratelimit-fcgi/ratelimit.conf)" \
    "root:ratelimit 640"

# Step 5: the test of the configuration, as the service's user.
out=$(setpriv --reuid=ratelimit --regid=ratelimit --init-groups \
    ratelimit-fcgi -t -c /etc/ratelimit-fcgi/ratelimit.conf 2>&1)
check "ratelimit-fcgi -t accepts the edited configuration as ratelimit ($out)" \
    eq "$?" 0

# ---------------------------------------------------------------- systemd

rc=0
for unit in ratelimit-release.socket ratelimit-release.service; do
    check "the package has $UNITS/$unit" test -s "$UNITS/$unit"
done
systemd-analyze verify "$UNITS/ratelimit-fcgi.socket" \
    "$UNITS/ratelimit-fcgi.service" "$UNITS/ratelimit-release.socket" \
    "$UNITS/ratelimit-release.service" >"$D/verify.out" 2>&1 || rc=$?
if [ "$rc" = 0 ] || ! grep -qi 'failed to \(connect\|initialize\)\|no such file.*bus' \
    "$D/verify.out"; then
    check "systemd-analyze verify: the installed units are valid ($rc: $(head -c 300 "$D/verify.out"))" \
        eq "$rc/$(grep -c . "$D/verify.out")" 0/0
else
    echo "# skip: systemd-analyze cannot run here: $(head -c 200 "$D/verify.out")"
fi
unit_has() {
    grep -qx "$2" "$UNITS/$1"
}
for line in RuntimeDirectory=ratelimit-fcgi LogsDirectory=ratelimit-fcgi \
    'Documentation=man:ratelimit-fcgi(8) man:ratelimitctl(8)' User=ratelimit; do
    check "the service unit says $line" unit_has ratelimit-fcgi.service "$line"
done
check "the unit runs /usr/sbin/ratelimit-fcgi" unit_has ratelimit-fcgi.service \
    'ExecStart=/usr/sbin/ratelimit-fcgi -c /etc/ratelimit-fcgi/ratelimit.conf'
for unit in ratelimit-fcgi.socket ratelimit-fcgi.service; do
    check "$unit is not enabled (no link in /etc/systemd/system)" eq \
        "$(find /etc/systemd/system -name "$unit" 2>/dev/null | wc -l)" 0
done

# What systemd does with the units, by hand: the socket as [Socket] says,
# the directories, Environment= (drop-ins too), ExecStartPre and ExecStart
# as User=, the log in a file in place of the journal.
cat >"$D/activate.py" <<'EOF'
import glob, grp, os, pwd, shlex, socket, subprocess, sys

def parse(paths):
    sections, cur = {}, None
    for path in paths:
        for line in open(path):
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("["):
                cur = sections.setdefault(line.strip("[]"), [])
            else:
                k, v = line.split("=", 1)
                cur.append((k.strip(), v.strip()))
    return sections

def get(items, key, default=None):
    vals = [v for k, v in items if k == key]
    return vals[-1] if vals else default

units, journal = sys.argv[1], sys.argv[2]
sk = parse([units + "/ratelimit-fcgi.socket"])["Socket"]
sv = parse([units + "/ratelimit-fcgi.service"] + sorted(glob.glob(
    "/etc/systemd/system/ratelimit-fcgi.service.d/*.conf")))["Service"]
user = pwd.getpwnam(get(sv, "User"))
gid = grp.getgrnam(get(sv, "Group")).gr_gid
path = get(sk, "ListenStream")
os.makedirs(os.path.dirname(path), mode=int(get(sk, "DirectoryMode"), 8))
s = socket.socket(socket.AF_UNIX)
s.bind(path)
os.chown(path, pwd.getpwnam(get(sk, "SocketUser")).pw_uid,
         grp.getgrnam(get(sk, "SocketGroup")).gr_gid)
os.chmod(path, int(get(sk, "SocketMode"), 8))
s.listen(int(get(sk, "Backlog", "128")))
os.dup2(s.fileno(), 0)
s.close()
for key, base in (("RuntimeDirectory", "/run/"), ("LogsDirectory", "/var/log/")):
    d = base + get(sv, key)
    os.makedirs(d, exist_ok=True)
    os.chown(d, user.pw_uid, gid)
env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
for k, v in sv:
    if k == "Environment":
        for kv in shlex.split(v):
            env[kv.split("=", 1)[0]] = kv.split("=", 1)[1]
log = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
os.dup2(log, 1)
os.dup2(log, 2)
os.close(log)
os.setgroups([])
os.setgid(gid)
os.setuid(user.pw_uid)
os.umask(int(get(sv, "UMask", "0022"), 8))
for k, v in sv:
    if k == "ExecStartPre" and subprocess.call(shlex.split(v), env=env) != 0:
        sys.exit("ExecStartPre failed: " + v)
argv = shlex.split(get(sv, "ExecStart"))
os.execve(argv[0], argv, env)
EOF
python3 "$D/activate.py" "$UNITS" "$D/journal.log" &
MASTER=$!
retry 50 test -S "$SOCK"
check "the service runs from the unit's ExecStart on $SOCK" test -S "$SOCK"
check "the socket is root:www-data 0660 ($(stat -c '%U:%G %a' "$SOCK" 2>/dev/null))" \
    eq "$(stat -c '%U:%G %a' "$SOCK" 2>/dev/null)" "root:www-data 660"
retry 50 has_workers "$MASTER" 4
check "the master runs as ratelimit, with its pool" eq \
    "$(ps -o user= -p "$MASTER" | tr -d ' ') $(workers_of "$MASTER" | wc -l)" \
    "ratelimit 4"

# ---------------------------------------------------------------- nginx

# The package's site, enabled as the README says (a link in
# sites-enabled), here a copy with only the port changed; its includes
# are Debian's (/etc/nginx/fastcgi_params).
ln -s /etc/nginx/fastcgi_params "$D/nginx/fastcgi_params"
sed "s/127.0.0.1:8080/127.0.0.1:$NGX_PORT/" \
    /etc/nginx/sites-available/ratelimit-fcgi >"$D/nginx/sites-enabled/ratelimit-fcgi"
nginx_conf "$D/nginx/nginx.conf" user=www-data error_log="$D/nginx/error.log" \
    access_log="$D/nginx/access.log" tmp="$D/tmp" \
    "$D/nginx/sites-enabled/*"
/usr/sbin/nginx -t -q -c "$D/nginx/nginx.conf" -e "$D/nginx/error.log" \
    >"$D/nginx/start.log" 2>&1
check "nginx -t accepts the package's site" eq "$?" 0
/usr/sbin/nginx -c "$D/nginx/nginx.conf" -e "$D/nginx/error.log" \
    -g 'daemon off;' >>"$D/nginx/start.log" 2>&1 &
NGX_PID=$!

# front_checks NAME PORT: a check (README step 6), then /status,
# /dashboard and /v1/config/ from loopback.
front_checks() {
    retry 50 ready_on "$2"
    out=$(curl -s -X POST "http://127.0.0.1:$2/v1/check" -H "X-API-Key: $KEY" \
        -H 'Content-Type: application/json' -d '{"route": "/api/x", "subject": "u1"}')
    check "$1: the check is allowed ($out)" contains "$out" '"allowed":true'
    fetch "http://127.0.0.1:$2/status?json"
    check "$1: /status from loopback is 200 ($STATUS)" eq "$STATUS" 200
    fetch "http://127.0.0.1:$2/dashboard"
    check "$1: /dashboard from loopback is 200 ($STATUS)" eq "$STATUS" 200
    fetch "http://127.0.0.1:$2/v1/config/tenants" -H "X-API-Key: $KEY"
    check "$1: /v1/config/tenants from loopback is 200 ($STATUS)" eq "$STATUS" 200
    check "$1: /v1/config/tenants names the tenant" contains "$BODY" example
}
front_checks nginx "$NGX_PORT"

# ---------------------------------------------------------------- Apache

# The package's conf-available file, enabled (a2enconf links it into
# conf-enabled) in an Apache of its own, with only the port changed.
sed "s/127.0.0.1:8080/127.0.0.1:$APA_PORT/g" \
    /etc/apache2/conf-available/ratelimit-fcgi.conf >"$D/apache/ratelimit-fcgi.conf"
M=/usr/lib/apache2/modules
cat >"$D/apache/httpd.conf" <<EOF
ServerRoot "$D/apache"
ServerName 127.0.0.1
PidFile "$D/apache/run/httpd.pid"
DefaultRuntimeDir "$D/apache/run"
ErrorLog "$D/apache/error.log"
User www-data
Group www-data
LoadModule mpm_event_module $M/mod_mpm_event.so
LoadModule authz_core_module $M/mod_authz_core.so
LoadModule authz_host_module $M/mod_authz_host.so
LoadModule proxy_module $M/mod_proxy.so
LoadModule proxy_fcgi_module $M/mod_proxy_fcgi.so
Include "$D/apache/ratelimit-fcgi.conf"
EOF
/usr/sbin/apache2 -t -f "$D/apache/httpd.conf" >"$D/apache/start.log" 2>&1
check "apache2 -t accepts the package's conf" eq "$?" 0
setsid /usr/sbin/apache2 -f "$D/apache/httpd.conf" -D FOREGROUND \
    >>"$D/apache/start.log" 2>&1 &
APA_PID=$!
front_checks apache "$APA_PORT"

# The other snippets of the package pass their server's own test: nginx's
# auth_request site, Apache's mod_authnz_fcgi conf, lighttpd's two.
mkdir -p "$D/syntax"
ln -s /etc/nginx/fastcgi_params "$D/syntax/fastcgi_params"
nginx_conf "$D/syntax/nginx.conf" error_log="$D/syntax/nginx.log" \
    tmp="$D/tmp" /etc/nginx/sites-available/ratelimit-fcgi-auth-request
out=$(/usr/sbin/nginx -t -q -c "$D/syntax/nginx.conf" -e "$D/syntax/nginx.log" 2>&1)
check "nginx -t accepts the package's auth_request site ($out)" eq "$?" 0
cat >"$D/syntax/httpd.conf" <<EOF
ServerRoot "$D/syntax"
ServerName 127.0.0.1
PidFile "$D/syntax/httpd.pid"
ErrorLog "$D/syntax/error.log"
LoadModule mpm_event_module $M/mod_mpm_event.so
LoadModule authn_core_module $M/mod_authn_core.so
LoadModule authz_core_module $M/mod_authz_core.so
LoadModule authz_user_module $M/mod_authz_user.so
LoadModule authnz_fcgi_module $M/mod_authnz_fcgi.so
Include /etc/apache2/conf-available/ratelimit-fcgi-authnz.conf
EOF
out=$(/usr/sbin/apache2 -t -f "$D/syntax/httpd.conf" 2>&1)
check "apache2 -t accepts the package's mod_authnz_fcgi conf ($out)" eq "$?" 0
if [ -x /usr/sbin/lighttpd ]; then
    printf '%s\n' "server.document-root = \"$D/syntax\"" \
        'server.port = 80' 'server.bind = "127.0.0.1"' \
        'include "/etc/lighttpd/conf-available/05-ratelimit-fcgi.conf"' \
        'include "/etc/lighttpd/conf-available/50-ratelimit-fcgi-api.conf"' \
        >"$D/syntax/lighttpd.conf"
    out=$(/usr/sbin/lighttpd -tt -f "$D/syntax/lighttpd.conf" 2>&1)
    check "lighttpd -tt accepts the package's two conf-available files ($out)" \
        eq "$?" 0
fi

# ---------------------------------------------------------------- stop, purge

stop_process "$NGX_PID" QUIT
stop_process "$APA_PID" TERM
NGX_PID=
APA_PID=
stop_process "$MASTER" QUIT
MASTER=
left=$(pgrep -u ratelimit 2>/dev/null | wc -l)
check "SIGQUIT (KillSignal=) stopped the service ($left left)" eq "$left" 0
if [ "$FAILED" -gt 0 ]; then
    show_logs "$D/nginx"
    show_logs "$D/apache"
    tail -n 20 "$D/journal.log"
fi
# What systemd would remove on stop, and the administrator's drop-in.
rm -rf /run/ratelimit /run/ratelimit-fcgi "$DROPIN"
rmdir /etc/systemd/system/ratelimit-fcgi.service.d 2>/dev/null

dpkg --purge ratelimit-fcgi >"$D/purge.log" 2>&1
rc=$?
check "dpkg --purge removes it ($rc)" eq "$rc" 0
[ "$rc" = 0 ] && INSTALLED=0
check "dpkg knows the package no more" eq \
    "$(dpkg-query -W -f='${db:Status-Abbrev}' ratelimit-fcgi 2>/dev/null)" ""
check "the account and group ratelimit are gone" \
    eq "$(getent passwd ratelimit; getent group ratelimit)" ""
check "no statoverride is left" eq \
    "$(dpkg-statoverride --list | grep -c ratelimit)" 0
listing "$D/after"
diff "$D/before" "$D/after" >"$D/listing.diff"
check "nothing of the package is left in /etc, /usr, /var ($(grep -c '^[<>]' "$D/listing.diff") paths differ)" \
    eq "$(grep -c '^[<>]' "$D/listing.diff")" 0
sed -n 's/^[<>]/    &/p' "$D/listing.diff" | head -n 20
t_end=$(date +%s)
echo "# test_deb: build $((t_built - t_start)) s, the rest $((t_end - t_built)) s"

finish
