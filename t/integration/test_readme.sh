#!/bin/sh
# test_readme.sh -- the README's commands work as written.
#
# `make run` and `make stop` are run for real (on their own ports and
# directory), and the README's shell examples are run against the stack,
# with only the addresses and the config path substituted.  Blocks are
# picked by the heading they stand under, so moving an example in the
# README without keeping it runnable fails here.
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

readme_block() { doc_block README.md "$@"; }

# The commands as a user types them, pointed at this test's stack.
localize() {
    sed -e "s#ratelimitctl -c /etc/ratelimit-fcgi/ratelimit.conf#ratelimitctl#" \
        -e "s#build/ratelimitctl -c var/ratelimit.conf#ratelimitctl#" \
        -e "s#^build/ratelimitctl #\"\$RATELIMITCTL\" #" \
        -e "s#^ratelimitctl#\"\$RATELIMITCTL\" -c \"\$CONF\"#" \
        -e "s#\$(ratelimitctl#\$(\"\$RATELIMITCTL\" -c \"\$CONF\"#g" \
        -e "s#127.0.0.1:8080#127.0.0.1:$1#g" \
        -e "s#acme#$2#g"
}

run_block() {
    rb_script=$T_TMP/block.sh
    { echo 'set -e'; cat; } >"$rb_script"
    (cd "${RB_DIR:-.}" && CONF=$3 RATELIMITCTL=$RATELIMITCTL \
        sh "$rb_script") >"$T_TMP/block.out" 2>"$T_TMP/block.err"
    rb_rc=$?
    check "README \"$1\" block $2 runs (exit $rb_rc)" eq "$rb_rc" 0
    [ "$rb_rc" = 0 ] || sed 's/^/    /' "$T_TMP/block.err" | head -n 5
}

tenant=$(uniq_name acme)

# Administration, then the rule examples (they use the tenant it adds).
doc_block doc/operations.md "Administration: ratelimitctl" | localize "$PORT" "$tenant" \
    >"$T_TMP/admin.sh"
run_block "Administration" 1 "$VAR/ratelimit.conf" <"$T_TMP/admin.sh"
check "the README's key create printed a key" \
    matches "$(cat "$T_TMP/block.out")" 'rl_[A-Za-z0-9_-]+'
doc_block doc/rules.md "Rules and limits" | localize "$PORT" "$tenant" \
    >"$T_TMP/rules.sh"
run_block "Rules and limits" 1 "$VAR/ratelimit.conf" <"$T_TMP/rules.sh"
limits=$(psql_q "SELECT count(*) FROM limits l JOIN rules r ON r.id = l.rule_id
    JOIN tenants t ON t.id = r.tenant_id WHERE t.name = '$tenant'")
check "the README's examples made 6 limits for the tenant ($limits)" \
    eq "$limits" 6
shadow=$(psql_q "SELECT shadow FROM rules r JOIN tenants t ON t.id = r.tenant_id
    WHERE t.name = '$tenant' AND r.always")
check "the README's quota rule ends up enforced (shadow $shadow)" \
    eq "$shadow" f

# make run / make stop, as the README's first lines say, on other ports
# (the block's other line, make test, is what runs this file).
doc_block README.md "The two commands" >/dev/null
run_var=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-readme.XXXXXX")
run_port=$((PORT + 40))
run_redis=$((REDIS_PORT + 40))
run_pg=$((PG_PORT + 40))
(cd "$ROOT" && make run VAR="$run_var" PORT=$run_port \
    REDIS_PORT=$run_redis PG_PORT=$run_pg BUILD="$BUILD") \
    >"$T_TMP/make-run.out" 2>&1
rc=$?
check "make run exits 0 ($rc)" eq "$rc" 0
[ "$rc" = 0 ] || tail -n 20 "$T_TMP/make-run.out" | sed 's/^/    /'
check "make run printed the demo curl example" \
    contains "$(cat "$T_TMP/make-run.out")" "rl_demo_abc123xyz"

readme_block "A first check" | localize "$run_port" acme \
    >"$T_TMP/first.sh"
# As in the source tree after make run: var/ratelimit.conf, found without -c.
mkdir -p "$T_TMP/tree"
ln -sfn "$run_var" "$T_TMP/tree/var"
RB_DIR=$T_TMP/tree run_block "A first check" 1 "$run_var/ratelimit.conf" \
    <"$T_TMP/first.sh"
out=$(cat "$T_TMP/block.out")
check "the README's curl example is allowed by the demo rules" \
    contains "$out" '"allowed":true'
check "the README's tenant list shows demo-corp" contains "$out" demo-corp

(cd "$ROOT" && make stop VAR="$run_var" PORT=$run_port \
    REDIS_PORT=$run_redis PG_PORT=$run_pg BUILD="$BUILD") \
    >"$T_TMP/make-stop.out" 2>&1
check "make stop exits 0" eq "$?" 0
left=$(pgrep -f "$run_var" | wc -l)
check "make stop left no process of that stack ($left)" eq "$left" 0
sh "$ROOT/scripts/pg.sh" destroy "$run_var" >/dev/null 2>&1
rm -rf "$run_var"

# The manual pages: mandoc finds nothing to warn about in any, `make
# install` puts them where man(1) looks, and ratelimitctl.8 describes every
# command of ratelimitctl's table (as its --help lists them) and
# ratelimit-fcgi.8 every configuration key (as -T prints them), so that
# neither page can fall behind its program unnoticed.
for page in ratelimitctl.8 ratelimit-fcgi.8 ratelimit-release.8; do
    lint=$(mandoc -Tlint -Wwarning "$ROOT/src/$page" 2>&1)
    rc=$?
    check "mandoc -Tlint finds no warning in $page (exit $rc)" \
        eq "$rc $lint" "0 "
    [ "$rc" = 0 ] || printf '%s\n' "$lint" | head -n 5 | sed 's/^/    /'
done

man_dest=$T_TMP/install
(cd "$ROOT" && make install DESTDIR="$man_dest" PREFIX=/usr BUILD="$BUILD") \
    >"$T_TMP/make-install.out" 2>&1
rc=$?
check "make install DESTDIR PREFIX=/usr exits 0 ($rc)" eq "$rc" 0
for name in ratelimitctl ratelimit-fcgi ratelimit-release; do
    found=$(MANPATH='' man -M "$man_dest/usr/share/man" -w "$name" 2>&1)
    check "man -M finds the installed $name(8) ($found)" \
        eq "$found" "$man_dest/usr/share/man/man8/$name.8"
    text=$(MANWIDTH=80 man -M "$man_dest/usr/share/man" "$name" 2>/dev/null)
    check "man -M renders $name(8) with its NAME and EXIT STATUS" \
        eq "$(printf '%s\n' "$text" | grep -c '^NAME$\|^EXIT STATUS$')" 2
done

# What else make install puts in place, with this PREFIX's paths; an
# existing configuration is kept.
for f in etc/ratelimit-fcgi/ratelimit.conf lib/systemd/system/ratelimit-fcgi.service \
    lib/systemd/system/ratelimit-fcgi.socket usr/lib/ratelimit-fcgi/fcgid-wrapper \
    usr/share/bash-completion/completions/ratelimitctl \
    usr/share/ratelimit-fcgi/ratelimit.conf; do
    check "make install put $f in place" test -s "$man_dest/$f"
done
check "the installed unit starts the installed binary" \
    grep -q '^ExecStart=/usr/bin/ratelimit-fcgi -c /etc/ratelimit-fcgi/ratelimit.conf$' \
    "$man_dest/lib/systemd/system/ratelimit-fcgi.service"
check "the installed mod_fcgid wrapper is executable and filled in" \
    eq "$([ -x "$man_dest/usr/lib/ratelimit-fcgi/fcgid-wrapper" ] && tail -n 1 "$man_dest/usr/lib/ratelimit-fcgi/fcgid-wrapper")" \
    "exec /usr/bin/ratelimit-fcgi -c /etc/ratelimit-fcgi/fcgid.conf"
echo "# mine" >>"$man_dest/etc/ratelimit-fcgi/ratelimit.conf"
(cd "$ROOT" && make install DESTDIR="$man_dest" PREFIX=/usr BUILD="$BUILD") \
    >"$T_TMP/make-install2.out" 2>&1
check "a second make install keeps the configuration there" \
    eq "$(tail -n 1 "$man_dest/etc/ratelimit-fcgi/ratelimit.conf")" "# mine"
complete_words() {
    bash -c '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1));
        _ratelimitctl; echo "${COMPREPLY[*]}"' sh \
        "$man_dest/usr/share/bash-completion/completions/ratelimitctl" \
        "$RATELIMITCTL" "$@"
}
check "bash completion: the nouns ($(complete_words ''))" \
    contains "$(complete_words '')" "counter key limit migrate rule tenant"
check "bash completion: a noun's commands ($(complete_words rule ''))" \
    eq "$(complete_words rule '')" "add list match set remove"
check "bash completion: a command's options ($(complete_words counter show --s))" \
    eq "$(complete_words counter show --s)" "--subject"

"$RATELIMITCTL" --help >"$T_TMP/ctl-help.out" 2>&1
commands=$(sed -n \
    's/^    ratelimitctl \[-c FILE\] \([a-z]*\)\( [a-z][a-z]*\)\{0,1\}.*/\1\2/p' \
    "$T_TMP/ctl-help.out")
check "ratelimitctl --help lists the 24 commands of its table" \
    eq "$(printf '%s\n' "$commands" | grep -c .)" 24
missing=""
while IFS= read -r cmd; do
    # Once in the SYNOPSIS and once where the command is described.
    n=$(grep -c "Cm $cmd\( \|$\)" "$ROOT/src/ratelimitctl.8")
    [ "$n" -ge 2 ] || missing="$missing [$cmd]"
done <<EOF
$commands
EOF
check "ratelimitctl.8 shows and describes every command (missing:$missing)" \
    eq "$missing" ""

keys=$("$BUILD/ratelimit-fcgi" -T -c /dev/null 2>/dev/null | cut -d' ' -f1)
check "ratelimit-fcgi -T lists the configuration keys" \
    matches "$(printf '%s\n' "$keys" | tr '\n' ' ' | sed 's/ *$//')" \
    '^listen .*trusted_proxies$'
missing=""
for key in $keys; do
    grep -q "^\.It .*Cm $key\( \|$\)" "$ROOT/src/ratelimit-fcgi.8" ||
        missing="$missing $key"
done
check "ratelimit-fcgi.8 describes every configuration key (missing:$missing)" \
    eq "$missing" ""
missing=""
for key in $keys; do
    grep -Eq "^#?$key *=" "$ROOT/conf/ratelimit.conf" ||
        missing="$missing $key"
    grep -Eq "^\| (\`[a-z_]+\`, )*\`$key\`[ ,]" "$ROOT/doc/operations.md" ||
        missing="$missing operations.md:$key"
done
check "conf/ratelimit.conf sets or shows every key, and doc/operations.md's table has a row for each (missing:$missing)" \
    eq "$missing" ""
# The monitoring examples, against the stack.
doc_block doc/operations.md "Monitoring: status, metrics, logs, dashboard" |
    localize "$PORT" "$tenant" >"$T_TMP/monitor.sh"
run_block "Monitoring" 1 "$VAR/ratelimit.conf" <"$T_TMP/monitor.sh"
mon=$(cat "$T_TMP/block.out")
for want in 'accepted conn:' '"processes":[' '<th>accepted conn</th>' \
    '# EOF' '"history":{' 'ratelimit_build_info' 'LEFT'; do
    check "the README's monitoring examples print $want" contains "$mon" "$want"
done

# "Production in ten minutes", steps 2 to 5 as written, against this
# stack's PostgreSQL: only the superuser's psql, the port and the names
# (of the two roles and the database, which must not collide with the
# stack's own "ratelimit") are changed.  Then the service, as the service
# role, answers step 6's check through lighttpd.
serve_dir ratelimit-readme-prod
sfx=$$
p_svc=rp_svc_$sfx
p_adm=rp_adm_$sfx
p_db=rp_db_$sfx
prod_conf=$D/prod.conf
app_conf_lines "$prod_conf" "pg_conninfo = \"dbname=$p_db\""
prod_localize() {
    sed -e "s#su postgres -c psql#psql -h 127.0.0.1 -p $PG_PORT -U ratelimit -d ratelimit -X -q -v ON_ERROR_STOP=1#" \
        -e "s#CREATE ROLE ratelimit LOGIN#CREATE ROLE $p_svc LOGIN#" \
        -e "s#TO ratelimit;#TO $p_svc;#" \
        -e "s#ratelimit_admin#$p_adm#g" \
        -e "s#DATABASE ratelimit #DATABASE $p_db #" \
        -e "s#psql -d ratelimit#psql -p $PG_PORT -d $p_db -X -q -v ON_ERROR_STOP=1#" \
        -e "s#PGHOST=127.0.0.1#PGHOST=127.0.0.1 PGPORT=$PG_PORT#" \
        -e "s#^ratelimitctl #\"\$RATELIMITCTL\" -c \"\$CONF\" #" \
        -e "s#^ratelimit-fcgi -t -c /etc/ratelimit-fcgi/ratelimit.conf#$BUILD/ratelimit-fcgi -t -c \"\$CONF\"#" \
        -e "s#example#prod$sfx#g"
}
# Steps 3 and 4 in one shell, as a user types them (step 3's export holds
# for step 4).
readme_block "Production in ten minutes" 2 | prod_localize >"$T_TMP/prod2.sh"
run_block "Production in ten minutes" 2 "$prod_conf" <"$T_TMP/prod2.sh"
{
    readme_block "Production in ten minutes" 3
    readme_block "Production in ten minutes" 4
} | prod_localize >"$T_TMP/prod34.sh"
run_block "Production in ten minutes" "3 and 4" "$prod_conf" \
    <"$T_TMP/prod34.sh"
prod_out=$(cat "$T_TMP/block.out")
# Step 5's first line (-t); systemctl cannot run here.
readme_block "Production in ten minutes" 5 | head -n 1 | prod_localize \
    >"$T_TMP/prod5.sh"
run_block "Production in ten minutes" 5 "$prod_conf" <"$T_TMP/prod5.sh"
pkey=$(printf '%s\n' "$prod_out" | grep -oE 'rl_[A-Za-z0-9_-]{16,}' | head -n 1)
check "step 4 printed a key" matches "$pkey" '^rl_'
as_svc() {
    printf '%s\n' "$1" | psql -h 127.0.0.1 -p "$PG_PORT" -U "$p_svc" \
        -d "$p_db" -X -A -t -q -v ON_ERROR_STOP=1 2>&1
}
check "the service role reads the tables" \
    eq "$(as_svc 'SELECT count(*) FROM tenants')" 1
check "the service role cannot add a tenant" \
    contains "$(as_svc "INSERT INTO tenants (name) VALUES ('x')")" \
    "permission denied"
check "the service role cannot change a limit" \
    contains "$(as_svc 'UPDATE limits SET window_seconds = 1')" \
    "permission denied"
prod_port=$((PORT + 131))
private_app prod "$prod_port" \
    "pg_conninfo=host=127.0.0.1 port=$PG_PORT dbname=$p_db user=$p_svc" ||
    fail "the service starts as the service role"
readme_block "Production in ten minutes" 6 |
    sed -e "s#127.0.0.1:8080#127.0.0.1:$prod_port#" >"$T_TMP/prod6.sh"
export KEY="$pkey"
run_block "Production in ten minutes" 6 "$prod_conf" \
    <"$T_TMP/prod6.sh"
check "step 6's check is allowed by step 4's rule" \
    contains "$(cat "$T_TMP/block.out")" '"allowed":true'
stop_private
psql_q "DROP DATABASE $p_db" >/dev/null 2>&1
psql_q "DROP ROLE $p_adm" >/dev/null 2>&1
psql_q "DROP ROLE $p_svc" >/dev/null 2>&1

# One socket path wherever ratelimit-fcgi listens itself.
paths=$(grep -ohE '/run/[a-z_-]+/[a-z_.-]*fcgi[a-z_.-]*\.sock' \
    "$ROOT/README.md" "$ROOT"/doc/*.md "$ROOT"/conf/* | sort -u | tr '\n' ' ')
check "the README and the shipped configs use one socket path (and lighttpd's own for bin-path): $paths" \
    eq "$paths" "/run/lighttpd/ratelimit-fcgi.sock /run/ratelimit/fcgi.sock "

# That every ```sh block of README.md and doc/ was run by some test of
# the run is checked by run.sh once every file has finished
# (t/integration/doc_blocks.py): the files that run them may be in the
# other shard, still running.

finish
