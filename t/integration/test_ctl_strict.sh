#!/bin/sh
# ratelimitctl is strict and plain about what it is given, against the
# stack's database (issue 24, items 1 and 8):
#   - tenant apply refuses a file with an unknown key (naming its JSON path
#     and the nearest known key), a syntax error (at line:column, in
#     words) or a value of the wrong type (what was expected and found),
#     with exit 2 and the tenant's rules as they were (tenant export
#     before and after);
#   - key revoke takes the key's id, the whole key or its prefix as key
#     list shows it; an ambiguous or unknown prefix revokes nothing;
#   - with Redis or PostgreSQL unreachable, the one line ratelimitctl
#     prints names the address and the configuration file, before any
#     other output, and none of the service's log lines shows;
#   - --window and --period take the same durations: bare seconds or a
#     whole number with a unit.
# Run by t/integration/run.sh (TESTS=ctl_strict).
# shellcheck disable=SC2317 # helpers called through `check`

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

T=$(uniq_name strict)
OUT=$T_TMP/out
ERR=$T_TMP/err

# run ARGS...: ratelimitctl against the stack; output in $OUT and $ERR,
# exit status in RC.
run() {
    ctl "$@" >"$OUT" 2>"$ERR"
    RC=$?
}

# run_conf CONF ARGS...: the same with another configuration file.
run_conf() {
    rc_conf=$1
    shift
    "$BUILD/ratelimitctl" -c "$rc_conf" "$@" >"$OUT" 2>"$ERR"
    RC=$?
}

has_err() {
    grep -qF -- "$1" "$ERR"
}

err_lines() {
    wc -l <"$ERR" | tr -d ' '
}

# rc_err N TEXT: the last run exited N with TEXT on stderr.
rc_err() {
    [ "$RC" = "$1" ] && has_err "$2"
}

# rc_eq N ACTUAL EXPECTED: the last run exited N, and ACTUAL is EXPECTED.
rc_eq() {
    [ "$RC" = "$1" ] && [ "$2" = "$3" ]
}

# Nothing of the service's own log (log.c's lines) on stderr.
no_service_log() {
    ! grep -q -e 'ratelimit-fcgi\[' -e 'answering 503' "$ERR"
}

new_tenant "$T"
ctl rule add "$T" --route /api/orders --algorithm gcra --limit 10 \
    --period 1s --burst 5 >/dev/null
ctl rule add "$T" --route /api/search --algorithm sliding_window \
    --limit 100 --window 60 >/dev/null

# ---------------------------------------------------------- tenant apply

ctl tenant export "$T" >"$T_TMP/good.json"
BEFORE=$(cat "$T_TMP/good.json")
unchanged() {
    eq "$(ctl tenant export "$T")" "$BEFORE"
}

# The export names its format's version, and apply reads that version
# only (a file without one is read as version 1).
check "export: the file's version is 1" \
    eq "$(python3 -c 'import json,sys; v=json.load(open(sys.argv[1]))["version"]; print(type(v).__name__, v)' "$T_TMP/good.json")" "int 1"
sed 's/"version": 1,/"version": 2,/' "$T_TMP/good.json" >"$T_TMP/v2.json"
run tenant apply "$T_TMP/v2.json"
check "apply: a file of another version exits 2" eq "$RC" 2
check "apply: it says which version it reads" \
    has_err '$.version: this ratelimitctl reads version 1, not 2'
check "apply: and nothing changed" unchanged
grep -v '"version": 1,' "$T_TMP/good.json" >"$T_TMP/noversion.json"
run tenant apply "$T_TMP/noversion.json"
check "apply: a file without a version (an older export) is read ($RC)" \
    eq "$RC" 0

# A typing mistake in a key of the second rule (whose failure_mode, open,
# would differ from the rule's closed: the old code ignored the key).
sed '/"route": "\/api\/search"/,/"failure_mode"/s/"failure_mode": "closed"/"failur_mode": "open"/' \
    "$T_TMP/good.json" >"$T_TMP/typo.json"
run tenant apply "$T_TMP/typo.json"
check "apply: an unknown key exits 2" eq "$RC" 2
check "apply: it is named by its JSON path, with the nearest key" \
    has_err '$.rules[1].failur_mode: unknown key; did you mean failure_mode?'
check "apply: and nothing changed (tenant export is the same)" unchanged

# A missing comma, the one after "priority": 0 of the first rule: the
# tokener stops at the quote that opens the next key, "enabled".
awk '/"priority": 0,/ && !done { sub(/,$/, ""); done = 1 } { print }' \
    "$T_TMP/good.json" >"$T_TMP/syntax.json"
LINE=$(grep -n '"enabled"' "$T_TMP/syntax.json" | head -n 1 | cut -d: -f1)
COL=$(sed -n "${LINE}p" "$T_TMP/syntax.json" | awk '{ print index($0, "\"") }')
run tenant apply "$T_TMP/syntax.json"
check "apply: a syntax error exits 2" eq "$RC" 2
check "apply: it is shown at line:column of the file, in words" \
    has_err "$T_TMP/syntax.json:$LINE:$COL: not valid JSON: object value separator ',' expected"
check "apply: and json-c's function names are not" \
    not_contains "$(cat "$ERR")" json_
check "apply: nothing changed after the syntax error" unchanged

sed 's/"burst": 5/"burst": "5"/' "$T_TMP/good.json" >"$T_TMP/type.json"
run tenant apply "$T_TMP/type.json"
check "apply: a value of the wrong type exits 2" eq "$RC" 2
check "apply: saying what was expected and what was found" \
    has_err '$.rules[0].limits[0].burst: expected a whole number, found a string'
check "apply: nothing changed after the type error" unchanged

# A parameter of another algorithm was ignored as well.
sed 's/"burst": 5/"burst": 5, "window_seconds": 60/' "$T_TMP/good.json" \
    >"$T_TMP/foreign.json"
run tenant apply "$T_TMP/foreign.json"
check "apply: a parameter of another algorithm exits 2 naming it" \
    rc_err 2 '$.rules[0].limits[0].window_seconds: not a parameter of gcra'
check "apply: nothing changed after it" unchanged

run tenant apply "$T_TMP/good.json"
check "apply: the export itself still applies, with no change" \
    rc_eq 0 "$(cat "$OUT")" "$T: 0 changes"

# ---------------------------------------------------------- key revoke

K1=$(new_key "$T")
K2=$(new_key "$T")
P1=$(ctl key list "$T" | awk -v id="$(key_id "$K1")" '$1 == id { print $2 }')
key_status() {
    psql_q "SELECT status FROM api_keys WHERE id = $1;"
}

run key revoke "$P1"
check "key revoke: the prefix key list shows revokes the key" \
    rc_eq 0 "$(key_status "$(key_id "$K1")")" revoked
run key revoke "$K2"
check "key revoke: the whole key revokes it" \
    rc_eq 0 "$(key_status "$(key_id "$K2")")" revoked

# Two keys whose prefixes begin alike (written behind ratelimitctl's
# back: random keys rarely do).
STEM=rl_$(od -An -N2 -tx1 /dev/urandom | tr -d ' \n')
# shellcheck disable=SC2016
psql_q "INSERT INTO api_keys (tenant_id, key_hash, key_prefix)
    SELECT id, encode(sha256(convert_to(:'t' || p, 'UTF8')), 'hex'), :'s' || p
    FROM tenants, (VALUES ('A'), ('B')) AS v (p) WHERE name = :'t';" \
    "t=$T" "s=$STEM"
run key revoke "$STEM"
check "key revoke: an ambiguous prefix exits 2 and says so" \
    rc_err 2 ambiguous
# shellcheck disable=SC2016
check "key revoke: and revokes neither key" \
    eq "$(psql_q "SELECT count(*) FROM api_keys WHERE status = 'active'
        AND left(key_prefix, length(:'s')) = :'s';" "s=$STEM")" 2
run key revoke "${STEM}A"
check "key revoke: a longer prefix that is unique revokes that key" \
    rc_eq 0 "$(psql_q "SELECT status FROM api_keys WHERE key_prefix = :'p';" "p=${STEM}A")" revoked
run key revoke "${STEM}C"
check "key revoke: an unknown prefix exits 1 and says so" \
    rc_err 1 "no key begins with ${STEM}C"
run key revoke "rl_"
check "key revoke: rl_ alone exits 2 saying what is accepted" \
    rc_err 2 "KEY_ID (a number)"

# ---------------------------------------------------------- unreachable

DOWN_REDIS=$((REDIS_PORT + 9))
DOWN_PG=$((PG_PORT + 9))
grep -v -e '^redis *=' -e '^redis_type *=' "$VAR/ratelimit.conf" \
    >"$T_TMP/noredis.conf"
printf 'redis = 127.0.0.1:%s\nredis_type = single\n' "$DOWN_REDIS" \
    >>"$T_TMP/noredis.conf"
grep -v '^pg_conninfo *=' "$VAR/ratelimit.conf" >"$T_TMP/nopg.conf"
printf 'pg_conninfo = "host=127.0.0.1 port=%s dbname=ratelimit user=ratelimit"\n' \
    "$DOWN_PG" >>"$T_TMP/nopg.conf"

# one_line WHAT ADDRESS CONF: the last run exited 1, its output is one
# line on stderr naming WHAT at ADDRESS and CONF, and nothing on stdout.
one_line() {
    [ "$RC" = 1 ] && [ ! -s "$OUT" ] && [ "$(err_lines)" = 1 ] &&
        grep -qF "ratelimitctl: cannot connect to $1 at $2 " "$ERR" &&
        grep -qF "$3" "$ERR"
}

run_conf "$T_TMP/noredis.conf" counter show "$T" /api/orders
check "Redis down: counter show exits 1" eq "$RC" 1
check "Redis down: counter show prints one line naming the address and the configuration, and no header" \
    one_line Redis "127.0.0.1:$DOWN_REDIS" "$T_TMP/noredis.conf"
check "Redis down: none of the service's log lines" \
    no_service_log
run_conf "$T_TMP/noredis.conf" usage "$T"
check "Redis down: usage prints one line naming the address too" \
    one_line Redis "127.0.0.1:$DOWN_REDIS" "$T_TMP/noredis.conf"
run_conf "$T_TMP/noredis.conf" counter reset "$T" /api/orders
check "Redis down: counter reset prints one line naming the address too" \
    one_line Redis "127.0.0.1:$DOWN_REDIS" "$T_TMP/noredis.conf"
run_conf "$T_TMP/nopg.conf" key list "$T"
check "PostgreSQL down: key list prints one line naming the address and the configuration" \
    one_line PostgreSQL "127.0.0.1:$DOWN_PG" "$T_TMP/nopg.conf"

# ---------------------------------------------------------- durations

# limit_param ROUTE COLUMN: that column of the one limit of ROUTE's rule.
limit_param() {
    # shellcheck disable=SC2016
    psql_q "SELECT l.$2 FROM limits l JOIN rules r ON r.id = l.rule_id
        JOIN tenants t ON t.id = r.tenant_id
        WHERE t.name = :'t' AND r.route_pattern = :'r';" "t=$T" "r=$1"
}

run rule add "$T" --route /d/window-5m --algorithm sliding_window \
    --limit 5 --window 5m
check "--window takes a unit: 5m is 300 seconds" \
    rc_eq 0 "$(limit_param /d/window-5m window_seconds)" 300
run rule add "$T" --route /d/window-60 --algorithm sliding_window \
    --limit 5 --window 60
check "--window still takes bare seconds" \
    rc_eq 0 "$(limit_param /d/window-60 window_seconds)" 60
run rule add "$T" --route /d/period-60 --algorithm gcra --limit 5 \
    --period 60
check "--period takes bare seconds: 60 is 60,000,000 us" \
    rc_eq 0 "$(limit_param /d/period-60 period_us)" 60000000
run rule add "$T" --route /d/period-500ms --algorithm gcra --limit 5 \
    --period 500ms
check "--period still takes 500ms" \
    rc_eq 0 "$(limit_param /d/period-500ms period_us)" 500000
LIMIT_ID=$(limit_param /d/window-60 id)
run limit set "$LIMIT_ID" --window 1h
check "limit set --window 1h is 3600 seconds" \
    rc_eq 0 "$(limit_param /d/window-60 window_seconds)" 3600
run rule add "$T" --route /d/bad --algorithm sliding_window --limit 5 \
    --window 500ms
check "--window 500ms exits 2 saying what it takes" \
    rc_err 2 "it takes whole seconds"
run rule add "$T" --route /d/bad --algorithm gcra --limit 5 --period 5x
check "--period 5x exits 2 saying what it takes" \
    rc_err 2 'a number of seconds ("60") or a whole number with the unit'

ctl tenant remove "$T" --force >/dev/null 2>&1
finish
