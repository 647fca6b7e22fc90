#!/bin/sh
# Integration test of ratelimitctl and the schema against a private
# PostgreSQL (scripts/pg.sh, in a temporary directory removed on exit).
# Run from the repository root after "make build/ratelimitctl":
#     sh t/integration/test_ctl.sh
# Environment: CTL_TEST_PG_PORT (default 15439), RATELIMITCTL (default
# build/ratelimitctl).
set -u

CTL=${RATELIMITCTL:-build/ratelimitctl}
PORT=${CTL_TEST_PG_PORT:-15439}
PASSED=0
FAILED=0

if [ ! -f scripts/pg.sh ] || [ ! -f schema/001_init.sql ]; then
    echo "test_ctl.sh: run me from the repository root" >&2
    exit 1
fi
[ -x "$CTL" ] || {
    echo "test_ctl.sh: $CTL is missing: run 'make build/ratelimitctl' first" >&2
    exit 1
}
command -v psql >/dev/null 2>&1 || {
    echo "test_ctl.sh: psql is missing (install postgresql-client)" >&2
    exit 1
}

TMP=$(mktemp -d)
cleanup() {
    sh scripts/pg.sh destroy "$TMP" >/dev/null 2>&1
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ok() {
    PASSED=$((PASSED + 1))
    echo "ok - $1"
}

not_ok() {
    FAILED=$((FAILED + 1))
    echo "not ok - $1"
    if [ -s "$TMP/err" ]; then
        sed 's/^/#   stderr: /' "$TMP/err"
    fi
}

# is DESCRIPTION ACTUAL EXPECTED: ok when the two strings are equal.
is() {
    if [ "$2" = "$3" ]; then
        ok "$1"
    else
        not_ok "$1"
        printf '#   got:      %s\n#   expected: %s\n' "$2" "$3"
    fi
}

# has FILE PATTERN: "yes" when $TMP/FILE has a line matching PATTERN.
has() {
    if grep -q -e "$2" "$TMP/$1"; then echo yes; else echo no; fi
}

# ctl ARGS...: runs ratelimitctl; output in $TMP/out and $TMP/err, status in RC.
ctl() {
    "$CTL" -c "$TMP/ratelimit.conf" "$@" >"$TMP/out" 2>"$TMP/err"
    RC=$?
}

# sql QUERY: prints the result unaligned, without headers.
sql() {
    psql -X -q -tA -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U ratelimit \
        -d ratelimit -c "$1"
}

# One line with the number of rows of every table, to prove that a
# refused command left nothing behind.
counts() {
    sql "SELECT (SELECT count(*) FROM tenants) || ' ' ||
        (SELECT count(*) FROM api_keys) || ' ' ||
        (SELECT count(*) FROM rules) || ' ' ||
        (SELECT count(*) FROM limits)"
}

# expect_usage DESCRIPTION PATTERN ARGS...: ratelimitctl ARGS must exit 2,
# say something matching PATTERN on stderr and change no row.
expect_usage() {
    desc=$1
    pattern=$2
    shift 2
    before=$(counts)
    ctl "$@"
    after=$(counts)
    if [ "$RC" -eq 2 ] && grep -q -e "$pattern" "$TMP/err" &&
        [ "$before" = "$after" ] && [ ! -s "$TMP/out" ]; then
        ok "$desc"
    else
        not_ok "$desc (exit $RC, rows $before -> $after)"
    fi
}

# expect_fail DESCRIPTION PATTERN ARGS...: exit 1 with PATTERN on stderr and
# no row changed.
expect_fail() {
    desc=$1
    pattern=$2
    shift 2
    before=$(counts)
    ctl "$@"
    after=$(counts)
    if [ "$RC" -eq 1 ] && grep -q -e "$pattern" "$TMP/err" &&
        [ "$before" = "$after" ]; then
        ok "$desc"
    else
        not_ok "$desc (exit $RC, rows $before -> $after)"
    fi
}

sha256() {
    printf %s "$1" | sha256sum | cut -d' ' -f1
}

# field NAME: the value of "NAME  value" in $TMP/out.
field() {
    awk -v n="$1" '$1 == n { print $2; exit }' "$TMP/out"
}

# --- the server --------------------------------------------------------

if ! sh scripts/pg.sh start "$TMP" "$PORT" >"$TMP/pg-start.log" 2>&1; then
    cat "$TMP/pg-start.log" >&2
    echo "test_ctl.sh: could not start PostgreSQL on port $PORT" >&2
    exit 1
fi
cat >"$TMP/ratelimit.conf" <<EOF
# written by t/integration/test_ctl.sh
pg_conninfo = "host=127.0.0.1 port=$PORT dbname=ratelimit user=ratelimit"
pg_connect_timeout_ms = 3000
EOF

# --- usage without a database ---------------------------------------

"$CTL" --help >"$TMP/out" 2>"$TMP/err"
is "--help exits 0 and documents commands and exit status" \
    "$? $(has out SYNOPSIS) $(has out 'EXIT STATUS') $(has out 'rule add TENANT')" \
    "0 yes yes yes"
"$CTL" --version >"$TMP/out" 2>"$TMP/err"
is "--version exits 0" "$? $(has out '^ratelimitctl ')" "0 yes"
"$CTL" >"$TMP/out" 2>"$TMP/err"
is "no command exits 2" "$? $(has err 'no command')" "2 yes"
ctl frobnicate
is "an unknown command exits 2 naming it" "$RC $(has err frobnicate)" "2 yes"

# --- migrate -------------------------------------------------------------

ctl migrate
is "migrate applies 001_init" "$RC $(has out '^applied  *001_init')" "0 yes"
is "schema_migrations records version 1" \
    "$(sql "SELECT version || ' ' || name FROM schema_migrations")" "1 001_init"
ctl migrate
is "a second migrate applies nothing" \
    "$RC $(has out '^applied') $(has out 'up to date')" "0 no yes"
is "schema_migrations still has one row" \
    "$(sql "SELECT count(*) FROM schema_migrations")" 1

# --- tenants ----------------------------------------------------------

ctl tenant add acme
ACME_ID=$(field id)
is "tenant add prints the new id" \
    "$RC $(sql "SELECT id FROM tenants WHERE name = 'acme'")" "0 $ACME_ID"
expect_fail "tenant add of an existing name exits 1" "already exists" \
    tenant add acme
ctl tenant list
is "tenant list shows acme as active" \
    "$RC $(has out '^ID  *NAME  *STATUS') $(has out "^$ACME_ID  *acme  *active")" \
    "0 yes yes"
ctl tenant suspend acme
is "tenant suspend sets the status" \
    "$RC $(sql "SELECT status FROM tenants WHERE name = 'acme'")" "0 suspended"
ctl tenant resume acme
is "tenant resume sets it back" \
    "$RC $(sql "SELECT status FROM tenants WHERE name = 'acme'")" "0 active"
expect_fail "tenant suspend of an unknown tenant exits 1" "no tenant" \
    tenant suspend nosuch
expect_usage "tenant add of a 129-character name exits 2" "1 to 128" \
    tenant add "$(printf '%0129d' 0)"
expect_usage "tenant add of an empty name exits 2" "tenant name" \
    tenant add ""

# --- keys -------------------------------------------------------------

ctl key create acme
KEY=$(field key)
KEY_ID=$(field id)
is "key create prints an id and an rl_ key of 35 characters" \
    "$RC $(expr "$KEY" : 'rl_[A-Za-z0-9_-]*$') $(has out '^id  *[0-9][0-9]*$')" \
    "0 35 yes"
is "the stored hash is the SHA-256 of the printed key" \
    "$(sql "SELECT key_hash FROM api_keys WHERE id = $KEY_ID")" "$(sha256 "$KEY")"
is "the stored prefix is the key's first 8 characters; role check, active" \
    "$(sql "SELECT key_prefix || ' ' || role || ' ' || status FROM api_keys WHERE id = $KEY_ID")" \
    "$(printf %.8s "$KEY") check active"
# The key goes in as a psql variable, read from a script on stdin.
is "the raw key (nor its random part) is stored anywhere in api_keys" \
    "$(printf '%s\n' "SELECT count(*) FROM api_keys a WHERE strpos(a::text, :'key') > 0 OR strpos(a::text, substr(:'key', 4)) > 0;" |
        psql -X -q -tA -v ON_ERROR_STOP=1 -v key="$KEY" -h 127.0.0.1 \
            -p "$PORT" -U ratelimit -d ratelimit)" 0
ctl key create acme --role admin
ADMIN_ID=$(field id)
is "key create --role admin stores the admin role" \
    "$RC $(sql "SELECT role FROM api_keys WHERE id = $ADMIN_ID")" "0 admin"
expect_usage "key create --role root exits 2" "--role" \
    key create acme --role root
expect_fail "key create for an unknown tenant exits 1" "no tenant" \
    key create nosuch
ctl key list acme
HASH=$(sql "SELECT key_hash FROM api_keys WHERE id = $KEY_ID")
is "key list shows id, prefix, role and status, but no hash and no key" \
    "$RC $(has out "^$KEY_ID  *$(printf %.8s "$KEY")  *check  *active") $(has out "$HASH") $(has out "$KEY")" \
    "0 yes no no"
ctl key revoke "$KEY_ID"
is "key revoke sets status and revoked_at" \
    "$RC $(sql "SELECT status || ' ' || (revoked_at IS NOT NULL) FROM api_keys WHERE id = $KEY_ID")" \
    "0 revoked true"
ctl key revoke "$KEY_ID"
is "revoking a revoked key is not an error" \
    "$RC $(has out 'already revoked')" "0 yes"
expect_fail "key revoke of an unknown id exits 1" "no key" \
    key revoke 999999
expect_usage "key revoke of a non-number exits 2" "KEY_ID" \
    key revoke 12abc

# --- rules ------------------------------------------------------------

ctl rule add acme --route '/api/pay*' --algorithm token_bucket \
    --capacity 10 --refill-rate 2.5
TB_RULE=$(field id)
is "rule add token_bucket prints the rule id" \
    "$RC $(sql "SELECT route_pattern FROM rules WHERE id = ${TB_RULE:-0}")" \
    "0 /api/pay*"
is "its limit row has capacity and refill rate only" \
    "$(sql "SELECT name, algorithm, bucket_capacity, refill_rate, limit_count IS NULL, window_seconds IS NULL FROM limits WHERE rule_id = ${TB_RULE:-0}")" \
    "default|token_bucket|10|2.5|t|t"
ctl rule add acme --route /api/orders --algorithm=sliding_window \
    --limit 100 --window 60 --priority 5 --name per-minute
SW_RULE=$(field id)
is "rule add sliding_window stores the rule with its defaults" \
    "$RC $(sql "SELECT route_pattern, priority, failure_mode, per, shadow, enabled FROM rules WHERE id = ${SW_RULE:-0}")" \
    "0 /api/orders|5|closed|rule|f|t"
is "its limit row has limit and window only" \
    "$(sql "SELECT name, algorithm, limit_count, window_seconds, bucket_capacity IS NULL, refill_rate IS NULL FROM limits WHERE rule_id = ${SW_RULE:-0}")" \
    "per-minute|sliding_window|100|60|t|t"
ctl rule add acme --route '*' --algorithm sliding_window --limit 5 \
    --window 1 --shadow --failure-mode open --per route
is "rule add --shadow --failure-mode open --per route" \
    "$RC $(sql "SELECT shadow, failure_mode, per FROM rules WHERE id = $(field id)")" \
    "0 t|open|route"
ctl rule list acme
is "rule list shows the rules with their limits" \
    "$RC $(has out "^$TB_RULE  */api/pay\*  .*token_bucket  *capacity 10, refill 2.5/s") $(has out "^$SW_RULE  */api/orders  .*per-minute  *sliding_window  *100 per 60 s")" \
    "0 yes yes"

expect_usage "token_bucket with --limit exits 2, nothing written" "--limit" \
    rule add acme --route /x --algorithm token_bucket --limit 5
expect_usage "sliding_window with --capacity exits 2" "--capacity" \
    rule add acme --route /x --algorithm sliding_window --limit 5 \
    --window 60 --capacity 3
expect_usage "token_bucket without --refill-rate exits 2" "refill-rate" \
    rule add acme --route /x --algorithm token_bucket --capacity 5
expect_usage "sliding_window without --window exits 2" "window" \
    rule add acme --route /x --algorithm sliding_window --limit 5
expect_usage "an unknown option exits 2 naming it" "--bogus" \
    rule add acme --route /x --algorithm sliding_window --limit 5 \
    --window 60 --bogus 1
expect_usage "an unknown algorithm exits 2" "leaky_bucket" \
    rule add acme --route /x --algorithm leaky_bucket --limit 5 --window 60
expect_usage "a missing --route exits 2" "--route" \
    rule add acme --algorithm sliding_window --limit 5 --window 60
expect_usage "a 513-byte route exits 2" "512 bytes" \
    rule add acme --route "/$(printf '%0512d' 0)" --algorithm sliding_window \
    --limit 5 --window 60
expect_usage "a '*' inside the route exits 2" "last character" \
    rule add acme --route '/a*/b' --algorithm sliding_window --limit 5 \
    --window 60
expect_usage "--capacity 0 exits 2" "out of range" \
    rule add acme --route /x --algorithm token_bucket --capacity 0 \
    --refill-rate 1
expect_usage "--refill-rate nan exits 2" "decimal" \
    rule add acme --route /x --algorithm token_bucket --capacity 5 \
    --refill-rate nan
expect_usage "--refill-rate 1e999 exits 2" "out of range" \
    rule add acme --route /x --algorithm token_bucket --capacity 5 \
    --refill-rate 1e999
expect_usage "--limit -5 exits 2" "out of range" \
    rule add acme --route /x --algorithm sliding_window --limit -5 --window 60
expect_usage "--window beyond 366 days exits 2" "out of range" \
    rule add acme --route /x --algorithm sliding_window --limit 5 \
    --window 99999999999
expect_usage "--priority abc exits 2" "whole number" \
    rule add acme --route /x --algorithm sliding_window --limit 5 \
    --window 60 --priority abc
expect_usage "--name with a space exits 2" "--name" \
    rule add acme --route /x --algorithm sliding_window --limit 5 \
    --window 60 --name "a b"
expect_usage "an option given twice exits 2" "twice" \
    rule add acme --route /x --route /y --algorithm sliding_window \
    --limit 5 --window 60
expect_fail "rule add for an unknown tenant exits 1, nothing written" \
    "no tenant" rule add nosuch --route /x --algorithm sliding_window \
    --limit 5 --window 60
expect_fail "rule list for an unknown tenant exits 1" "no tenant" \
    rule list nosuch
expect_fail "key list for an unknown tenant exits 1" "no tenant" \
    key list nosuch

ctl rule remove "$TB_RULE"
is "rule remove deletes the rule and its limits" \
    "$RC $(sql "SELECT (SELECT count(*) FROM rules WHERE id = $TB_RULE) + (SELECT count(*) FROM limits WHERE rule_id = $TB_RULE)")" \
    "0 0"
expect_fail "rule remove of an unknown id exits 1" "no rule" \
    rule remove "$TB_RULE"

# --- change notifications ---------------------------------------------

printf '%s\n' "LISTEN ratelimit_changes;" \
    "UPDATE api_keys SET last_used_at = now() WHERE id = $ADMIN_ID;" \
    "UPDATE api_keys SET status = 'revoked', revoked_at = now() WHERE id = $ADMIN_ID;" \
    "UPDATE limits SET limit_count = 101 WHERE rule_id = $SW_RULE;" |
    psql -X -q -h 127.0.0.1 -p "$PORT" -U ratelimit -d ratelimit \
        >"$TMP/notify" 2>&1
is "revoking a key notifies api_keys:<tenant id>, once" \
    "$(grep -c 'payload "api_keys:' "$TMP/notify") $(has notify "payload \"api_keys:$ACME_ID\"")" \
    "1 yes"
is "changing a limit notifies limits:<rule id>" \
    "$(has notify "payload \"limits:$SW_RULE\"")" yes

# --- the dev seed -----------------------------------------------------

seed() {
    psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U ratelimit \
        -d ratelimit -f schema/dev_seed.sql >"$TMP/err" 2>&1
    echo $?
}
is "dev_seed.sql loads" "$(seed)" 0
is "dev_seed.sql loads a second time" "$(seed)" 0
is "the seed has the five demo rules once, each with one limit" \
    "$(sql "SELECT count(DISTINCT r.id) || ' ' || count(l.id) FROM rules r JOIN tenants t ON t.id = r.tenant_id LEFT JOIN limits l ON l.rule_id = r.id WHERE t.name = 'demo-corp'")" \
    "5 5"
is "/api/payments* is a token bucket of 10 refilling 2/s" \
    "$(sql "SELECT l.name, l.algorithm, l.bucket_capacity, l.refill_rate FROM rules r JOIN limits l ON l.rule_id = r.id WHERE r.route_pattern = '/api/payments*'")" \
    "default|token_bucket|10|2"
is "/v1/check, /api/orders*, * and /bench are sliding windows" \
    "$(sql "SELECT string_agg(r.route_pattern || '=' || l.limit_count || '/' || l.window_seconds, ' ' ORDER BY r.route_pattern) FROM rules r JOIN limits l ON l.rule_id = r.id WHERE l.algorithm = 'sliding_window' AND r.tenant_id = (SELECT id FROM tenants WHERE name = 'demo-corp')")" \
    "*=1000/3600 /api/orders*=50/60 /bench=1000000/60 /v1/check=100/60"
is "the demo key is stored as its SHA-256, prefix rl_demo_, role check" \
    "$(sql "SELECT key_prefix || ' ' || role FROM api_keys WHERE key_hash = '$(sha256 rl_demo_abc123xyz)'")" \
    "rl_demo_ check"
is "the demo admin key is stored as its SHA-256, role admin" \
    "$(sql "SELECT role FROM api_keys WHERE key_hash = '$(sha256 rl_demo_admin_key)'")" \
    admin
ctl rule list demo-corp
is "rule list demo-corp shows the five seeded rules" \
    "$RC $(grep -c ' default ' "$TMP/out")" "0 5"

# --- an unreachable database --------------------------------------------

sh scripts/pg.sh stop "$TMP" >/dev/null 2>&1
ctl tenant list
is "with PostgreSQL down a command exits 1 with libpq's message" \
    "$RC $(has err '^ratelimitctl: .*127\.0\.0\.1')" "1 yes"
ctl rule add acme --route /x --algorithm token_bucket --limit 5
is "bad usage still exits 2 with PostgreSQL down" "$RC" 2

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
