#!/bin/sh
# Integration test of ratelimitctl and the schema against a private
# PostgreSQL (scripts/pg.sh, in a temporary directory removed on exit).
# Run from the repository root after "make build/ratelimitctl":
#     sh t/integration/test_ctl.sh
# Environment: CTL_TEST_PG_PORT (default PG_PORT + 6, or 15439),
# RATELIMITCTL (default build/ratelimitctl).  Run by t/integration/run.sh
# (TESTS=ctl), it also checks, against run.sh's stack (PORT, VAR), that the
# service refuses a check whose rules need more limits than one check
# decides, written with psql behind ratelimitctl's back.
set -u

# Debian's programs first, as lib.sh has them: a version manager's
# python3 shim earlier in PATH can take half a second to start.
PATH=/usr/bin:/bin:$PATH
export PATH
CTL=${RATELIMITCTL:-build/ratelimitctl}
CTL_PG_PORT=${CTL_TEST_PG_PORT:-$((${PG_PORT:-15433} + 6))}
HTTP_PORT=${PORT:-}
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
# psql itself, not Debian's pg_wrapper (/usr/bin/psql, a Perl script that
# picks the newest client on every call, some 50 ms each over the few
# hundred calls here): the newest PostgreSQL's, as scripts/pg.sh picks the
# server's; "psql" where there is none.
PSQL=psql
PSQL_MAJOR=0
for ps_bin in /usr/lib/postgresql/*/bin/psql; do
    ps_v=${ps_bin#/usr/lib/postgresql/}
    ps_v=${ps_v%%/*}
    ps_v=${ps_v%%.*}
    case $ps_v in
    '' | *[!0-9]*) continue ;;
    esac
    if [ -x "$ps_bin" ] && [ "$ps_v" -gt "$PSQL_MAJOR" ]; then
        PSQL=$ps_bin
        PSQL_MAJOR=$ps_v
    fi
done

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
    "$PSQL" -X -q -tA -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$CTL_PG_PORT" -U ratelimit \
        -d ratelimit -c "$1"
}

# sql_fails DESCRIPTION PATTERN QUERY: the statement must fail, with PATTERN
# (a constraint's name, say) in psql's message.
sql_fails() {
    if "$PSQL" -X -q -tA -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$CTL_PG_PORT" \
        -U ratelimit -d ratelimit -c "$3" >"$TMP/out" 2>"$TMP/err"; then
        not_ok "$1 (the statement succeeded)"
    elif grep -q -e "$2" "$TMP/err"; then
        ok "$1"
    else
        not_ok "$1 (no '$2' in the error)"
    fi
}

# A fingerprint of what 002_limits.sql makes: columns, constraints, triggers.
schema_002() {
    sql "SELECT string_agg(x, ' ' ORDER BY x) FROM (
        SELECT table_name || '.' || column_name || ':' || data_type || ':' ||
               coalesce(column_default, '') AS x
        FROM information_schema.columns
        WHERE table_name IN ('rules', 'limits')
        UNION ALL
        SELECT conname || '=' || pg_get_constraintdef(oid) FROM pg_constraint
        WHERE conrelid = 'limits'::regclass
        UNION ALL
        SELECT tgname || '=' || pg_get_triggerdef(oid) FROM pg_trigger
        WHERE tgrelid IN ('limits'::regclass, 'rules'::regclass)
          AND NOT tgisinternal) s"
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

if ! sh scripts/pg.sh start "$TMP" "$CTL_PG_PORT" >"$TMP/pg-start.log" 2>&1; then
    cat "$TMP/pg-start.log" >&2
    echo "test_ctl.sh: could not start PostgreSQL on port $CTL_PG_PORT" >&2
    exit 1
fi
cat >"$TMP/ratelimit.conf" <<EOF
# written by t/integration/test_ctl.sh
pg_conninfo = "host=127.0.0.1 port=$CTL_PG_PORT dbname=ratelimit user=ratelimit"
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
is "migrate applies 001_init, then 002_limits, 003_count_scope, 004_rule_bound, 005_notify_changes, 006_counter_budget and 007_leases" \
    "$RC $(has out '^applied  *001_init') $(has out '^applied  *002_limits') $(grep '^applied' "$TMP/out" | awk '{ printf "%s ", $2 }')" \
    "0 yes yes 001_init 002_limits 003_count_scope 004_rule_bound 005_notify_changes 006_counter_budget 007_leases "
is "schema_migrations records versions 1 to 7" \
    "$(sql "SELECT string_agg(version || ' ' || name, ', ' ORDER BY version) FROM schema_migrations")" \
    "1 001_init, 2 002_limits, 3 003_count_scope, 4 004_rule_bound, 5 005_notify_changes, 6 006_counter_budget, 7 007_leases"
ctl migrate
is "a second migrate applies nothing" \
    "$RC $(has out '^applied') $(has out 'up to date (version 7)')" "0 no yes"
is "schema_migrations still has seven rows" \
    "$(sql "SELECT count(*) FROM schema_migrations")" 7
is "006 adds tenants.counter_budget, NULL by default" \
    "$(sql "SELECT data_type || ' ' || is_nullable || ' ' || coalesce(column_default, 'none') FROM information_schema.columns WHERE table_name = 'tenants' AND column_name = 'counter_budget'")" \
    "bigint YES none"
is "002 adds rules.always and limits.period_us, burst, calendar" \
    "$(sql "SELECT string_agg(table_name || '.' || column_name || ' ' || data_type, ', ' ORDER BY table_name, column_name) FROM information_schema.columns WHERE (table_name, column_name) IN (('rules', 'always'), ('limits', 'period_us'), ('limits', 'burst'), ('limits', 'calendar'))")" \
    "limits.burst bigint, limits.calendar text, limits.period_us bigint, rules.always boolean"
# (007_leases.sql defines 002's constraints again, with one algorithm
# more: the two run again in order leave the schema as migrate did.)
BEFORE_002=$(schema_002)
"$PSQL" -X -q -v ON_ERROR_STOP=1 -1 -h 127.0.0.1 -p "$CTL_PG_PORT" -U ratelimit \
    -d ratelimit -f schema/002_limits.sql -f schema/007_leases.sql \
    >"$TMP/err" 2>&1
is "002_limits.sql and 007_leases.sql run again by hand succeed and change nothing" \
    "$? $(schema_002)" "0 $BEFORE_002"

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
ctl tenant budget acme 2000
is "tenant budget sets the tenant's counter budget" \
    "$RC $(has out 'counter budget 2000 new counters an hour') $(sql "SELECT counter_budget FROM tenants WHERE name = 'acme'")" \
    "0 yes 2000"
ctl tenant show acme
is "tenant show prints it" "$RC $(field counter_budget)" "0 2000"
ctl tenant budget acme 0
is "tenant budget 0 is unlimited" \
    "$RC $(has out 'unlimited') $(sql "SELECT counter_budget FROM tenants WHERE name = 'acme'")" \
    "0 yes 0"
ctl tenant budget acme default
is "tenant budget default goes back to the configuration's" \
    "$RC $(sql "SELECT coalesce(counter_budget::text, 'null') FROM tenants WHERE name = 'acme'")" \
    "0 null"
ctl tenant show acme
is "tenant show prints default" "$RC $(field counter_budget)" "0 default"
expect_usage "tenant budget of a negative count exits 2" "COUNT" \
    tenant budget acme -1
expect_usage "tenant budget above 10^9 exits 2" "COUNT" \
    tenant budget acme 1000000001
expect_usage "tenant budget of a word exits 2" "COUNT" \
    tenant budget acme lots
expect_fail "tenant budget of an unknown tenant exits 1" "no tenant" \
    tenant budget nosuch 5
sql_fails "the schema refuses a negative counter budget" \
    tenants_counter_budget_range \
    "UPDATE tenants SET counter_budget = -1 WHERE name = 'acme'"
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
        "$PSQL" -X -q -tA -v ON_ERROR_STOP=1 -v key="$KEY" -h 127.0.0.1 \
            -p "$CTL_PG_PORT" -U ratelimit -d ratelimit)" 0
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
    "$RC $(has out "^$TB_RULE  */api/pay\*  .*token_bucket  *subject  *capacity 10, refill 2.5/s") $(has out "^$SW_RULE  */api/orders  .*per-minute  *sliding_window  *subject  *100 per 60 s")" \
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

# --- gcra, fixed_window and always rules -----------------------------

# limit_of RULE_ID: the columns of the rule's (first) limit.
limit_of() {
    sql "SELECT algorithm, coalesce(limit_count::text, '-'), coalesce(window_seconds::text, '-'), coalesce(bucket_capacity::text, '-'), coalesce(refill_rate::text, '-'), coalesce(period_us::text, '-'), coalesce(burst::text, '-'), coalesce(calendar, '-') FROM limits WHERE rule_id = ${1:-0} ORDER BY id LIMIT 1"
}
ctl rule add acme --route /g/500us --algorithm gcra --limit 5 --period 500us
G1_RULE=$(field id)
is "gcra --period 500us stores period_us 500, burst 0 and nothing else" \
    "$RC $(limit_of "$G1_RULE")" "0 gcra|5|-|-|-|500|0|-"
ctl rule add acme --route /g/2ms --algorithm gcra --limit 2 --period 2ms \
    --burst 3
G2_RULE=$(field id)
is "gcra --period 2ms --burst 3 stores period_us 2000, burst 3" \
    "$RC $(limit_of "$G2_RULE")" "0 gcra|2|-|-|-|2000|3|-"
ctl rule add acme --route /g/1m --algorithm gcra --limit 100 --period=1m
G3_RULE=$(field id)
is "gcra --period 1m stores period_us 60000000" \
    "$RC $(limit_of "$G3_RULE")" "0 gcra|100|-|-|-|60000000|0|-"
ctl rule add acme --route /g/1d --algorithm gcra --limit 1 --period 366d
is "gcra --period 366d (the longest) stores 31622400000000 us" \
    "$RC $(limit_of "$(field id)")" "0 gcra|1|-|-|-|31622400000000|0|-"
ctl rule add acme --route '/q*' --algorithm fixed_window --limit 1000 \
    --calendar day
FW_RULE=$(field id)
is "fixed_window --calendar day stores limit and calendar only" \
    "$RC $(limit_of "$FW_RULE")" "0 fixed_window|1000|-|-|-|-|-|day"
is "a rule added without --always has always = false" \
    "$(sql "SELECT always FROM rules WHERE id = ${FW_RULE:-0}")" f
ctl rule add acme --route '*' --always --name daily \
    --algorithm fixed_window --limit 100000 --calendar month
ALWAYS_RULE=$(field id)
is "rule add --always stores always = true (and prints it)" \
    "$RC $(sql "SELECT always FROM rules WHERE id = ${ALWAYS_RULE:-0}") $(field always)" \
    "0 t yes"
ctl rule list acme
is "rule list shows gcra and fixed_window parameters and the always flag" \
    "$RC $(has out "^$G2_RULE  */g/2ms  .*  [0-9][0-9]*  *default  *gcra  *subject  *2 per 2ms, burst 3$") $(has out "^$G1_RULE  .*gcra  *subject  *5 per 500us, burst 0$") $(has out "^$G3_RULE  .*gcra  *subject  *100 per 1m, burst 0$") $(has out "^$ALWAYS_RULE  *\*  *0  *yes  *yes  *no  *closed  *rule  *[0-9][0-9]*  *daily  *fixed_window  *subject  *100000 per calendar month$")" \
    "0 yes yes yes yes"
is "rule list has a header with the limit id and the always flag" \
    "$(has out '^ID  *ROUTE  *PRIORITY  *ENABLED  *ALWAYS  *SHADOW  *FAILURE  *PER  *LIMIT_ID  *LIMIT  *ALGORITHM  *COUNT  *PARAMETERS  *NOTE$')" yes

expect_usage "gcra without --period exits 2, nothing written" "--period" \
    rule add acme --route /x --algorithm gcra --limit 5
expect_usage "gcra with --window exits 2" "--window: not an option of gcra" \
    rule add acme --route /x --algorithm gcra --limit 5 --period 1s \
    --window 60
expect_usage "fixed_window with --window exits 2" \
    "--window: not an option of fixed_window" \
    rule add acme --route /x --algorithm fixed_window --limit 5 \
    --calendar day --window 60
expect_usage "fixed_window without --calendar exits 2" "--calendar" \
    rule add acme --route /x --algorithm fixed_window --limit 5
expect_usage "fixed_window --calendar week exits 2" \
    '--calendar: "week" is not' \
    rule add acme --route /x --algorithm fixed_window --limit 5 \
    --calendar week
expect_usage "fixed_window with --burst exits 2" "--burst" \
    rule add acme --route /x --algorithm fixed_window --limit 5 \
    --calendar day --burst 1
expect_usage "gcra --burst -1 exits 2" "--burst: -1 is out of range" \
    rule add acme --route /x --algorithm gcra --limit 5 --period 1s \
    --burst -1
expect_usage "gcra --burst beyond 10^9 exits 2" "--burst" \
    rule add acme --route /x --algorithm gcra --limit 5 --period 1s \
    --burst 1000000001
expect_usage "gcra --period 5x exits 2" '--period: "5x" is not a duration' \
    rule add acme --route /x --algorithm gcra --limit 5 --period 5x
expect_usage "gcra --period of a fraction exits 2" \
    '--period: "1.5s" is not a duration' \
    rule add acme --route /x --algorithm gcra --limit 5 --period 1.5s
expect_usage "gcra --period 0s exits 2" "--period: 0s is out of range" \
    rule add acme --route /x --algorithm gcra --limit 5 --period 0s
expect_usage "gcra --period 367d exits 2" "out of range" \
    rule add acme --route /x --algorithm gcra --limit 5 --period 367d
expect_usage "gcra --period with 30 digits exits 2" "out of range" \
    rule add acme --route /x --algorithm gcra --limit 5 \
    --period 999999999999999999999999999999us
expect_usage "gcra faster than one request per microsecond exits 2" \
    "microsecond" \
    rule add acme --route /x --algorithm gcra --limit 501 --period 500us
expect_usage "gcra whose burst spans more than 10^15us exits 2" "--burst" \
    rule add acme --route /x --algorithm gcra --limit 1 --period 366d \
    --burst 100000
ctl rule add acme --route /g/span --algorithm gcra --limit 1 --period 1d \
    --burst 11573
is "gcra at the span bound itself (11574 x 1d <= 10^15us) is stored" \
    "$RC $(limit_of "$(field id)")" "0 gcra|1|-|-|-|86400000000|11573|-"
expect_usage "token_bucket with --period exits 2" "--period" \
    rule add acme --route /x --algorithm token_bucket --capacity 5 \
    --refill-rate 1 --period 1s
expect_usage "--refill-rate above 10^8 exits 2 (the schema's bound)" \
    "out of range" \
    rule add acme --route /x --algorithm token_bucket --capacity 5 \
    --refill-rate 100000001
expect_usage "--always takes no value on rule add" "takes no value" \
    rule add acme --route /x --algorithm gcra --limit 5 --period 1s \
    --always=on

# --- limit add and limit remove ---------------------------------------

nlimits() {
    sql "SELECT count(*) FROM limits WHERE rule_id = ${1:-0}"
}
ctl limit add "$G2_RULE" --name per-day --algorithm fixed_window \
    --limit 10000 --calendar day
L2=$(field id)
is "limit add adds a second limit and prints its id" \
    "$RC $(nlimits "$G2_RULE") $(sql "SELECT name || ' ' || calendar || ' ' || limit_count FROM limits WHERE id = ${L2:-0} AND rule_id = $G2_RULE")" \
    "0 2 per-day day 10000"
ctl limit add "$G2_RULE" --name=hourly --algorithm sliding_window \
    --limit 500 --window 3600
L3=$(field id)
is "limit add adds a third limit" \
    "$RC $(nlimits "$G2_RULE") $(limit_of "$G2_RULE")" \
    "0 3 gcra|2|-|-|-|2000|3|-"
ctl rule list acme
is "rule list shows all three limits of the rule with their ids" \
    "$(grep -c "^$G2_RULE  " "$TMP/out") $(has out "^$G2_RULE  .*  $L2  *per-day  *fixed_window  *subject  *10000 per calendar day$") $(has out "^$G2_RULE  .*  $L3  *hourly  *sliding_window  *subject  *500 per 3600 s$")" \
    "3 yes yes"
expect_fail "limit add of a name the rule has exits 1" \
    'already has a limit named "hourly"' \
    limit add "$G2_RULE" --name hourly --algorithm gcra --limit 1 \
    --period 1s
expect_fail "limit add to an unknown rule exits 1" "no rule with id 999999" \
    limit add 999999 --name x --algorithm gcra --limit 1 --period 1s
expect_usage "limit add without --name exits 2" "--name" \
    limit add "$G2_RULE" --algorithm gcra --limit 1 --period 1s
expect_usage "limit add with bad parameters exits 2" "--period" \
    limit add "$G2_RULE" --name x --algorithm gcra --limit 1
expect_usage "limit add of a non-number rule id exits 2" "RULE_ID" \
    limit add 1x --name x --algorithm gcra --limit 1 --period 1s
expect_usage "limit add takes no rule options" "--route" \
    limit add "$G2_RULE" --name x --algorithm gcra --limit 1 --period 1s \
    --route /x

ctl limit remove "$L3"
is "limit remove removes that limit only" \
    "$RC $(nlimits "$G2_RULE") $(sql "SELECT count(*) FROM limits WHERE id = $L3")" \
    "0 2 0"
expect_fail "limit remove of an unknown id exits 1" "no limit with id" \
    limit remove "$L3"
expect_usage "limit remove of a non-number exits 2" "LIMIT_ID" \
    limit remove abc
LAST=$(sql "SELECT id FROM limits WHERE rule_id = $G1_RULE")
expect_fail "limit remove of a rule's last limit exits 1, pointing to rule remove" \
    "rule remove $G1_RULE" limit remove "$LAST"
is "the rule still has its limit" "$(nlimits "$G1_RULE")" 1

# Eight limits at most, whoever adds them.  (On a tenant of its own: acme
# has an always rule on "*", with which /eight could not have 8.)
ctl tenant add eight
ctl rule add eight --route /eight --algorithm gcra --limit 1 --period 1s \
    --name l1
EIGHT=$(field id)
for i in 2 3 4 5 6 7 8; do
    ctl limit add "$EIGHT" --name "l$i" --algorithm gcra --limit "$i" \
        --period 1s
    [ "$RC" -eq 0 ] || break
done
is "a rule takes 8 limits" "$RC $(nlimits "$EIGHT")" "0 8"
expect_fail "the 9th limit is refused by the database (exit 1)" \
    "rule $EIGHT already has 8 limits" \
    limit add "$EIGHT" --name l9 --algorithm gcra --limit 9 --period 1s
is "the rule still has 8 limits" "$(nlimits "$EIGHT")" 8
sql_fails "the trigger refuses a 9th limit inserted with psql" \
    "already has 8 limits" \
    "INSERT INTO limits (rule_id, name, algorithm, limit_count, period_us, burst) VALUES ($EIGHT, 'l9', 'gcra', 9, 1000000, 0)"
sql_fails "the trigger refuses moving a limit into a full rule" \
    "already has 8 limits" \
    "UPDATE limits SET rule_id = $EIGHT WHERE id = $L2"
sql_fails "the trigger refuses 9 limits in one INSERT" \
    "already has 8 limits" \
    "WITH r AS (INSERT INTO rules (tenant_id, route_pattern) VALUES ('$ACME_ID', '/nine') RETURNING id) INSERT INTO limits (rule_id, name, algorithm, limit_count, period_us, burst) SELECT r.id, 'n' || i, 'gcra', i, 1000000, 0 FROM r, generate_series(1, 9) i"
is "the refused statements left 8 limits and no rule /nine" \
    "$(nlimits "$EIGHT") $(sql "SELECT count(*) FROM rules WHERE route_pattern = '/nine'")" \
    "8 0"
ctl limit remove "$(sql "SELECT id FROM limits WHERE rule_id = $EIGHT AND name = 'l8'")"
ctl limit add "$EIGHT" --name l9 --algorithm gcra --limit 9 --period 1s
is "after a limit remove there is room for another" \
    "$RC $(nlimits "$EIGHT")" "0 8"

# --- rule set ---------------------------------------------------------

rule_flags() {
    sql "SELECT enabled, always, shadow, failure_mode, per, priority FROM rules WHERE id = ${1:-0}"
}
is "a new rule: enabled, not always, not shadow, closed, per rule, priority 0" \
    "$(rule_flags "$FW_RULE")" "t|f|f|closed|rule|0"
ctl rule set "$FW_RULE" --shadow on --failure-mode open --per route \
    --always on --priority 7 --enabled off
is "rule set changes every option given" \
    "$RC $(rule_flags "$FW_RULE") $(field shadow) $(field failure-mode)" \
    "0 f|t|t|open|route|7 on open"
ctl rule set "$FW_RULE" --shadow off
is "rule set --shadow off changes only shadow" \
    "$RC $(rule_flags "$FW_RULE")" "0 f|t|f|open|route|7"
ctl rule set "$FW_RULE" --enabled=on --always off --failure-mode closed \
    --per rule --priority -3
is "rule set sets them back" \
    "$RC $(rule_flags "$FW_RULE")" "0 t|f|f|closed|rule|-3"
expect_usage "rule set without an option exits 2" "at least one" \
    rule set "$FW_RULE"
expect_usage "rule set --shadow maybe exits 2" '--shadow: "maybe" is not on or off' \
    rule set "$FW_RULE" --shadow maybe
expect_usage "rule set --failure-mode half exits 2" "--failure-mode" \
    rule set "$FW_RULE" --failure-mode half
expect_usage "rule set --priority beyond 10^6 exits 2" "--priority" \
    rule set "$FW_RULE" --priority 1000001
expect_usage "rule set of a non-number exits 2" "RULE_ID" \
    rule set x1 --shadow on
expect_fail "rule set of an unknown rule exits 1" "no rule with id 999999" \
    rule set 999999 --shadow on
is "the refused rule sets changed nothing" \
    "$(rule_flags "$FW_RULE")" "t|f|f|closed|rule|-3"

# --- the schema's own checks --------------------------------------------

sql_fails "the schema refuses a gcra limit with a window_seconds" \
    limits_parameters \
    "INSERT INTO limits (rule_id, name, algorithm, limit_count, period_us, burst, window_seconds) VALUES ($G1_RULE, 'bad', 'gcra', 5, 1000, 0, 60)"
sql_fails "the schema refuses a gcra limit without a burst" \
    limits_parameters \
    "INSERT INTO limits (rule_id, name, algorithm, limit_count, period_us) VALUES ($G1_RULE, 'bad', 'gcra', 5, 1000)"
sql_fails "the schema refuses a gcra burst of -1" limits_parameters \
    "INSERT INTO limits (rule_id, name, algorithm, limit_count, period_us, burst) VALUES ($G1_RULE, 'bad', 'gcra', 5, 1000, -1)"
sql_fails "the schema refuses a gcra period beyond 366 days" \
    limits_parameters \
    "INSERT INTO limits (rule_id, name, algorithm, limit_count, period_us, burst) VALUES ($G1_RULE, 'bad', 'gcra', 5, 31622400000001, 0)"
sql_fails "the schema refuses a gcra burst spanning more than 10^15us" \
    limits_parameters \
    "INSERT INTO limits (rule_id, name, algorithm, limit_count, period_us, burst) VALUES ($G1_RULE, 'bad', 'gcra', 1, 86400000000, 11574)"
sql_fails "the schema refuses a fixed_window calendar of week" \
    limits_parameters \
    "INSERT INTO limits (rule_id, name, algorithm, limit_count, calendar) VALUES ($G1_RULE, 'bad', 'fixed_window', 5, 'week')"
sql_fails "the schema refuses a fixed_window limit with a period" \
    limits_parameters \
    "INSERT INTO limits (rule_id, name, algorithm, limit_count, calendar, period_us) VALUES ($G1_RULE, 'bad', 'fixed_window', 5, 'day', 1000)"
sql_fails "the schema refuses a token_bucket with a calendar" \
    limits_parameters \
    "INSERT INTO limits (rule_id, name, algorithm, bucket_capacity, refill_rate, calendar) VALUES ($G1_RULE, 'bad', 'token_bucket', 5, 1, 'day')"
sql_fails "the schema refuses a refill rate above 10^8" limits_parameters \
    "INSERT INTO limits (rule_id, name, algorithm, bucket_capacity, refill_rate) VALUES ($G1_RULE, 'bad', 'token_bucket', 5, 100000001)"
sql_fails "the schema refuses a refill rate of NaN" limits_parameters \
    "INSERT INTO limits (rule_id, name, algorithm, bucket_capacity, refill_rate) VALUES ($G1_RULE, 'bad', 'token_bucket', 5, 'NaN')"
sql_fails "the schema refuses a sliding window of more than 366 days" \
    limits_parameters \
    "INSERT INTO limits (rule_id, name, algorithm, limit_count, window_seconds) VALUES ($G1_RULE, 'bad', 'sliding_window', 5, 31622401)"
sql_fails "the schema refuses a limit_count above 10^12" limits_parameters \
    "INSERT INTO limits (rule_id, name, algorithm, limit_count, calendar) VALUES ($G1_RULE, 'bad', 'fixed_window', 1000000000001, 'day')"
sql_fails "the schema refuses an unknown algorithm" limits_algorithm_valid \
    "INSERT INTO limits (rule_id, name, algorithm, limit_count, window_seconds) VALUES ($G1_RULE, 'bad', 'leaky_bucket', 5, 60)"
is "the refused inserts left rule $G1_RULE with its one limit" \
    "$(nlimits "$G1_RULE")" 1
sql "INSERT INTO limits (rule_id, name, algorithm, bucket_capacity, refill_rate) VALUES ($G1_RULE, 'edge', 'token_bucket', 1000000000000, 0.000001), ($G1_RULE, 'edge2', 'token_bucket', 1, 100000000)" \
    >"$TMP/out" 2>"$TMP/err"
is "the schema takes the bounds themselves (rate 0.000001 and 10^8)" \
    "$? $(nlimits "$G1_RULE")" "0 3"

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
    "UPDATE limits SET limit_count = 101 WHERE rule_id = $SW_RULE;" \
    "UPDATE limits SET burst = 4 WHERE rule_id = $G1_RULE AND algorithm = 'gcra';" \
    "UPDATE rules SET always = true WHERE id = $G3_RULE;" \
    "INSERT INTO limits (rule_id, name, algorithm, limit_count, calendar) VALUES ($G3_RULE, 'n', 'fixed_window', 9, 'hour');" \
    "INSERT INTO api_keys (tenant_id, key_hash, key_prefix) VALUES ('$ACME_ID', repeat('ab', 32), 'rl_note');" \
    "DELETE FROM api_keys WHERE key_hash = repeat('ab', 32);" |
    "$PSQL" -X -q -h 127.0.0.1 -p "$CTL_PG_PORT" -U ratelimit -d ratelimit \
        >"$TMP/notify" 2>&1
AB_HASH=$(printf 'ab%.0s' $(seq 32))
is "revoking a key notifies api_keys:<tenant id>:<its hash>:revoked, once" \
    "$(grep -c "payload \"api_keys:$ACME_ID:$(sql "SELECT key_hash FROM api_keys WHERE id = $ADMIN_ID"):revoked\"" "$TMP/notify")" 1
is "adding a key notifies api_keys:<tenant id>:<its hash>:active, once" \
    "$(grep -c "payload \"api_keys:$ACME_ID:$AB_HASH:active\"" "$TMP/notify")" 1
is "deleting it notifies api_keys:<tenant id>:<its hash>:deleted, once" \
    "$(grep -c "payload \"api_keys:$ACME_ID:$AB_HASH:deleted\"" "$TMP/notify")" 1
is "a revoke, an insert and a delete: three api_keys notifications" \
    "$(grep -c 'payload "api_keys:' "$TMP/notify")" 3
is "changing a limit notifies limits:<tenant id>:<rule id>" \
    "$(has notify "payload \"limits:$ACME_ID:$SW_RULE\"")" yes
is "changing a limit's burst (a column of 002) notifies limits:<tenant id>:<rule id>" \
    "$(has notify "payload \"limits:$ACME_ID:$G1_RULE\"")" yes
is "changing a rule's always flag notifies rules:<tenant id>, once" \
    "$(grep -c "payload \"rules:$ACME_ID\"" "$TMP/notify")" 1
is "adding a limit notifies limits:<tenant id>:<rule id> (its count check notifies nothing)" \
    "$(grep -c "payload \"limits:$ACME_ID:$G3_RULE\"" "$TMP/notify")" 1

# --- the dev seed -----------------------------------------------------

seed() {
    "$PSQL" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$CTL_PG_PORT" -U ratelimit \
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

# --- the plan guard: no change may give a check more than 8 limits -----

# A fingerprint of every rule and limit, to prove that a refused change
# left both tables exactly as they were.
snapshot() {
    sql "SELECT md5(coalesce((SELECT string_agg(r::text, ';' ORDER BY id) FROM rules r), '') || '|' || coalesce((SELECT string_agg(l::text, ';' ORDER BY id) FROM limits l), ''))"
}

# expect_refused DESCRIPTION PATTERN ARGS...: ratelimitctl ARGS must exit
# 2, say "refused" and something matching PATTERN on stderr (which shows
# the rules as the change would have left them), print nothing on stdout
# and leave every rule and limit as it was.
expect_refused() {
    desc=$1
    pattern=$2
    shift 2
    before=$(snapshot)
    ctl "$@"
    after=$(snapshot)
    if [ "$RC" -eq 2 ] && grep -q -e 'refused' "$TMP/err" &&
        grep -q -e "$pattern" "$TMP/err" && [ "$before" = "$after" ] &&
        [ ! -s "$TMP/out" ]; then
        ok "$desc"
    else
        not_ok "$desc (exit $RC, tables changed: $([ "$before" = "$after" ] && echo no || echo yes))"
    fi
}

# add_limits RULE_ID FIRST LAST: limit add l<FIRST> .. l<LAST> to the
# rule; stops at the first failure (RC says how it went).
add_limits() {
    al_i=$2
    while [ "$al_i" -le "$3" ]; do
        ctl limit add "$1" --name "l$al_i" --algorithm gcra --limit "$al_i" \
            --period 1s
        [ "$RC" -eq 0 ] || return
        al_i=$((al_i + 1))
    done
}

ctl tenant add guard
ctl rule add guard --route '*' --always --name quota \
    --algorithm fixed_window --limit 1 --calendar hour
QUOTA=$(field id)
ctl rule add guard --route /x --name l1 --algorithm gcra --limit 1 \
    --period 1s
GX=$(field id)
add_limits "$GX" 2 6
is "a rule of 6 limits under a quota on \"*\" (7 in one check)" \
    "$RC $(nlimits "$GX")" "0 6"
ctl rule add guard --route '/x*' --always --name xq \
    --algorithm fixed_window --limit 10 --calendar day
GXA=$(field id)
is "an always rule on /x* as well: exactly 8 in the check of /x" \
    "$RC $(nlimits "$GXA")" "0 1"
expect_refused "a 7th limit on /x (9 in one check) is refused, exit 2" \
    "rule $GX  /x  7 limits  (the most specific rule)" \
    limit add "$GX" --name l7 --algorithm gcra --limit 7 --period 1s
is "the refusal names the route, the count and every rule of the check" \
    "$(has err 'the route "/x" would need 9 limits, more than the 8') $(has err "rule $QUOTA  \\*  1 limit  (always)") $(has err "rule $GXA  /x\\*  1 limit  (always)") $(has err 'misconfigured')" \
    "yes yes yes yes"
ctl rule set "$GXA" --enabled off
is "rule set --enabled off of the /x* rule (8 -> 7)" "$RC" 0
ctl limit add "$GX" --name l7 --algorithm gcra --limit 7 --period 1s
is "then the 7th limit on /x fits (a disabled rule counts for nothing)" \
    "$RC $(nlimits "$GX")" "0 7"
expect_refused "enabling the /x* always rule again is refused" \
    "rule $GXA  /x\\*  1 limit  (always)" \
    rule set "$GXA" --enabled on
is "the rule stays disabled" \
    "$(sql "SELECT enabled FROM rules WHERE id = ${GXA:-0}")" f
ctl rule set "$GXA" --always off --enabled on
is "it can come back as a rule that is not always (/x is exact and wins)" \
    "$RC $(sql "SELECT enabled || ' ' || always FROM rules WHERE id = ${GXA:-0}")" \
    "0 true false"
expect_refused "rule set --always on of it is refused" \
    'the route "/x" would need 9' \
    rule set "$GXA" --always on
expect_refused "rule add of another always rule matching /x is refused" \
    'the route "/x" would need 9' \
    rule add guard --route '/x*' --always --priority 3 --algorithm gcra \
    --limit 1 --period 1s
expect_refused "rule add --always on \"*\" too" 'the route "/x" would need 9' \
    rule add guard --route '*' --always --name daily \
    --algorithm fixed_window --limit 1000 --calendar day
ctl rule add guard --route '/y*' --always --name yq --algorithm gcra \
    --limit 1 --period 1s
GY=$(field id)
add_limits "$GY" 2 7
is "an always rule of 7 on /y* is fine: it never meets /x" \
    "$RC $(nlimits "$GY")" "0 7"
expect_refused "its 8th limit is not: routes beginning with /y would need 9" \
    'a route beginning with "/y" would need 9 limits' \
    limit add "$GY" --name l8 --algorithm gcra --limit 8 --period 1s
ctl rule add guard --route '/y/deep*' --name deep --algorithm gcra \
    --limit 1 --period 1s
is "a more specific rule under /y* that is not always: 1 + 7 + 1 = 9 is refused" \
    "$RC $(has err 'beginning with "/y/deep" would need 9')" "2 yes"

# Two rules for one route: the tie goes to the higher priority, and the
# loser's limits count for nothing until it wins.
ctl rule add guard --route /t --priority 5 --name t --algorithm gcra \
    --limit 1 --period 1s
GT1=$(field id)
ctl rule add guard --route /t --name l1 --algorithm gcra --limit 1 \
    --period 1s
GT2=$(field id)
add_limits "$GT2" 2 8
is "the losing rule for /t takes 8 limits (its check has 1 + 1)" \
    "$RC $(nlimits "$GT2")" "0 8"
expect_refused "rule set --priority that makes it win is refused" \
    "rule $GT2  /t  8 limits  (the most specific rule)" \
    rule set "$GT2" --priority 6
expect_refused "rule remove of the winner is refused" \
    'the route "/t" would need 9 limits, more than the 8 one check decides (it needs 2 now)' \
    rule remove "$GT1"
expect_refused "rule set --enabled off of the winner is refused" \
    'the route "/t" would need 9' \
    rule set "$GT1" --enabled off
ctl rule set "$GT1" --shadow on --priority 7
is "rule set of anything else of the winner goes through" \
    "$RC $(field shadow) $(field priority)" "0 on 7"
ctl rule add nosuch-tenant --route /q --algorithm gcra --limit 1 --period 1s
is "the guard keeps the usual answer to an unknown tenant" \
    "$RC $(has err 'no tenant named')" "1 yes"
ctl rule set 999999 --always on
is "and to an unknown rule" "$RC $(has err 'no rule with id 999999')" "1 yes"

# Rules written with psql may already need too many; ratelimitctl lets
# such a tenant be repaired step by step, and refuses only to make it
# worse.
sql "INSERT INTO limits (rule_id, name, algorithm, limit_count, period_us, burst) VALUES ($GY, 'l8', 'gcra', 8, 1000000, 0)" \
    >/dev/null
ctl rule set "$GY" --shadow on
is "a change that leaves an overflowing check as it was goes through" \
    "$RC $(sql "SELECT shadow FROM rules WHERE id = ${GY:-0}")" "0 t"
expect_refused "a change that makes it worse does not" \
    "it needs 9 now" \
    rule add guard --route '/y*' --always --priority 1 --algorithm gcra \
    --limit 1 --period 1s
ctl limit remove "$(sql "SELECT id FROM limits WHERE rule_id = ${GY:-0} AND name = 'l8'")"
is "limit remove repairs it" "$RC $(nlimits "$GY")" "0 7"

# --- the service fails closed on rules written behind ratelimitctl -------

# Only under run.sh, which has started a stack (lighttpd, ratelimit-fcgi,
# PostgreSQL, Redis) and says where: STACK_UP, PORT, VAR.
if [ "${STACK_UP:-0}" = 1 ] && [ -n "$HTTP_PORT" ] &&
    [ -f "${VAR:-}/ratelimit.conf" ]; then
    # stack_ctl ARGS...: ratelimitctl against the stack's database.
    stack_ctl() {
        "$CTL" -c "$VAR/ratelimit.conf" "$@" >"$TMP/out" 2>"$TMP/err"
        RC=$?
    }
    # check_status ROUTE: one check with the key; prints "STATUS ERROR".
    check_status() {
        cs_code=$(curl -s -m 10 -o "$TMP/body" -w '%{http_code}' \
            -H "X-API-Key: $MC_KEY" -H 'Content-Type: application/json' \
            --data-raw "{\"route\":\"$1\"}" \
            "http://127.0.0.1:$HTTP_PORT/v1/check") || true
        cs_error=$(python3 -c '
import json, sys
try:
    print(json.load(open(sys.argv[1])).get("error", "-"))
except (ValueError, OSError, AttributeError):
    print("<no json>")
' "$TMP/body")
        echo "$cs_code $cs_error"
    }
    MC_TENANT=mc-$$
    stack_ctl tenant add "$MC_TENANT"
    stack_ctl key create "$MC_TENANT"
    MC_KEY=$(field key)
    stack_ctl rule add "$MC_TENANT" --route /mc --name l1 \
        --algorithm sliding_window --limit 5 --window 3600
    MC_RULE=$(field id)
    i=2
    while [ "$i" -le 8 ]; do
        stack_ctl limit add "$MC_RULE" --name "l$i" \
            --algorithm sliding_window --limit 5 --window 3600
        [ "$RC" -eq 0 ] || break
        i=$((i + 1))
    done
    is "stack: a rule of 8 limits on /mc, made with ratelimitctl" "$RC" 0
    is "stack: a check of /mc is allowed (8 limits, all of them decided)" \
        "$(check_status /mc)" "200 -"
    # The tenant-wide quota of 1 an hour that a plan of 8 + 1 used to drop.
    "$PSQL" -X -q -tA -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" \
        -U ratelimit -d ratelimit -v tenant="$MC_TENANT" >"$TMP/err" 2>&1 <<'SQL'
WITH r AS (INSERT INTO rules (tenant_id, route_pattern, always)
           SELECT id, '*', true FROM tenants WHERE name = :'tenant'
           RETURNING id)
INSERT INTO limits (rule_id, name, algorithm, limit_count, calendar)
SELECT id, 'quota', 'fixed_window', 1, 'hour' FROM r;
SQL
    is "stack: an always quota on \"*\" added with psql" "$?" 0
    # The notification drops the cached rules at once; rule_cache_ttl
    # (2 s under run.sh) bounds the wait in any case.
    n=0
    got=$(check_status /mc)
    while [ "$got" = "200 -" ] && [ "$n" -lt 30 ]; do
        sleep 0.1
        n=$((n + 1))
        got=$(check_status /mc)
    done
    is "stack: a check of /mc (9 limits) is refused: 503 misconfigured" \
        "$got" "503 misconfigured"
    is "stack: and again (never decided on part of the limits)" \
        "$(check_status /mc)" "503 misconfigured"
    is "stack: another route has only the quota: 1 allowed" \
        "$(check_status /other)" "200 -"
    is "stack: then denied by the quota" "$(check_status /other)" "429 rate_limited"
fi

# --- rule conflicts and rule match -------------------------------------

ctl tenant add conflict
ctl rule add conflict --route '/api/*' --algorithm token_bucket \
    --capacity 20 --refill-rate 5
C1=$(field id)
expect_usage "rule add of a second rule with the same pattern and priority exits 2 naming rule $C1" \
    "rule $C1 of conflict already has route '/api/\*' and priority 0" \
    rule add conflict --route '/api/*' --algorithm gcra --limit 10 --period 1s
ctl rule add conflict --route '/api/*' --priority 1 --algorithm sliding_window \
    --limit 100 --window 60 --count key
C2=$(field id)
is "another priority is not a conflict (rule $C2)" "$RC" 0
ctl rule add conflict --route '/api/*' --force --algorithm gcra --limit 10 \
    --period 1s
C3=$(field id)
is "--force adds the rule anyway" "$RC $(sql "SELECT count(*) FROM rules WHERE id = ${C3:-0}")" "0 1"
ctl rule add conflict --route '*' --algorithm sliding_window --limit 1000 \
    --window 3600
C4=$(field id)
ctl rule add conflict --route '*' --always --name monthly \
    --algorithm fixed_window --limit 1000000 --calendar month --count tenant
C5=$(field id)
is "an --always rule with the pattern of another is not refused" "$RC" 0
ctl rule list conflict
is "rule list notes the rules that can never be chosen" \
    "$(has out "^$C1  .*shadowed by rule $C2$") $(has out "^$C3  .*shadowed by rule $C2$") $(has out "^$C2  .*100 per 60 s$") $(has out "^$C5  .*1000000 per calendar month$")" \
    "yes yes yes yes"
is "rule list has a NOTE column" "$(has out '  PARAMETERS  *NOTE$')" yes
ctl rule match conflict /api/orders
is "rule match names the most specific rule and the always rule that joins" \
    "$RC $(has out "^route /api/orders of tenant conflict: rule $C2") $(has out "^$C2  */api/\*  *1  *no  *most-specific  *[0-9][0-9]*  *default  *sliding_window  *key  *100 per 60 s$") $(has out "^$C5  *\*  *0  *yes  *always  .*monthly  *fixed_window  *tenant  *1000000 per calendar month$")" \
    "0 yes yes yes"
is "rule match says why the other matching rules are not used" \
    "$(has out "^not used: rule $C1 (/api/\*) matches, but is shadowed by rule $C2") $(has out "^not used: rule $C4 (\*) matches, but rule $C2 is more specific")" \
    "yes yes"
ctl rule match conflict /other
is "rule match of a route only * matches: rule $C4 and the quota" \
    "$RC $(has out "^$C4  .*most-specific") $(has out "^$C5  .*always")" "0 yes yes"
ctl tenant add nomatch
ctl rule match nomatch /x
is "rule match without a matching rule says so" \
    "$RC $(has out '^no rule of nomatch matches /x')" "0 yes"
expect_fail "rule match of an unknown tenant exits 1" "no tenant named" \
    rule match nosuchtenant /x
expect_usage "rule match without a route exits 2" "ROUTE" rule match conflict

# --- the rest of the admin tool ----------------------------------------

ctl tenant --help
is "tenant --help lists the tenant commands (exit 0)" \
    "$RC $(has out 'ratelimitctl \[-c FILE\] tenant show NAME') $(has out 'tenant remove NAME')" \
    "0 yes yes"
ctl rule --help
is "rule --help lists the rule commands" "$RC $(has out 'rule match TENANT ROUTE')" "0 yes"
ctl key --help
is "key --help lists the key commands" "$RC $(has out 'key revoke KEY_ID')" "0 yes"

ctl tenant show conflict
is "tenant show prints the tenant with its counts" \
    "$RC $(field name) $(field status) $(field rules) $(field limits)" \
    "0 conflict active 5 5"
ctl tenant show conflict --json
is "tenant show --json is one object with stable names" \
    "$RC $(python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); print(o["name"], o["status"], sorted(o))' "$TMP/out")" \
    "0 conflict active ['counter_budget', 'created', 'id', 'keys', 'limits', 'name', 'revoked_keys', 'rules', 'status', 'version']"
ctl rule list conflict --json
is "rule list --json: one object per limit, typed values" \
    "$RC $(python3 -c '
import json, sys
rows = json.load(open(sys.argv[1]))["rules"]
r = [x for x in rows if x["id"] == int(sys.argv[2])][0]
print(len(rows), r["route"], r["count"], r["shadowed_by"], type(r["limit_id"]).__name__, sorted(r))
' "$TMP/out" "${C1:-0}")" \
    "0 5 /api/* subject ${C2:-?} int ['algorithm', 'always', 'count', 'enabled', 'failure', 'id', 'limit', 'limit_id', 'parameters', 'per', 'priority', 'route', 'shadow', 'shadowed_by']"
ctl key list conflict --json
is "key list --json of a tenant without keys has keys []" \
    "$RC $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["keys"])' "$TMP/out")" "0 []"
ctl tenant list --json
is "tenant list --json names every tenant" \
    "$RC $(python3 -c 'import json,sys; print(sorted(t["name"] for t in json.load(open(sys.argv[1]))["tenants"])[0:1])' "$TMP/out")" \
    "0 ['acme']"
ctl rule match conflict /api/orders --json
is "rule match --json: the rule, its limits and the rules not used" \
    "$RC $(python3 -c '
import json, sys
o = json.load(open(sys.argv[1]))
print(o["rule"], [l["why"] for l in o["limits"]], [(n["rule"], n["shadowed_by"]) for n in o["not_used"]][0])
' "$TMP/out")" \
    "0 ${C2:-?} ['most-specific', 'always'] (${C1:-?}, ${C2:-?})"

ctl rule set "$C4" --route '/other/*'
is "rule set --route changes the pattern" \
    "$RC $(field route) $(sql "SELECT route_pattern FROM rules WHERE id = ${C4:-0}")" \
    "0 /other/* /other/*"
L2ID=$(sql "SELECT id FROM limits WHERE rule_id = ${C2:-0}")
ctl limit set "$L2ID" --limit 250
is "limit set --limit keeps the window and the count" \
    "$RC $(sql "SELECT algorithm, limit_count, window_seconds, count_scope FROM limits WHERE id = ${L2ID:-0}")" \
    "0 sliding_window|250|60|key"
ctl limit set "$L2ID" --algorithm gcra --limit 10 --period 1s --burst 4 \
    --count tenant --name paced
is "limit set --algorithm replaces the parameters (the old ones cleared)" \
    "$RC $(sql "SELECT name, algorithm, limit_count, window_seconds IS NULL, period_us, burst, count_scope FROM limits WHERE id = ${L2ID:-0}")" \
    "0 paced|gcra|10|t|1000000|4|tenant"
expect_usage "limit set of another algorithm's option exits 2" \
    "not an option of gcra" limit set "$L2ID" --window 60
expect_usage "limit set --algorithm without its parameters exits 2" \
    "token_bucket needs" limit set "$L2ID" --algorithm token_bucket
expect_usage "limit set with nothing to set exits 2" "nothing to set" \
    limit set "$L2ID"
expect_fail "limit set of an unknown limit exits 1" "no limit with id" \
    limit set 999999 --limit 5

ctl key create conflict
expect_usage "tenant remove with an active key exits 2" \
    "has 1 active keys" tenant remove conflict
ctl tenant remove conflict --force
is "tenant remove --force removes it with its keys, rules and limits" \
    "$RC $(sql "SELECT count(*) FROM tenants WHERE name = 'conflict'") $(sql "SELECT count(*) FROM rules WHERE id = ${C1:-0}")" \
    "0 0 0"
ctl tenant remove nomatch
is "tenant remove of a tenant without keys" "$RC $(has out 'tenant nomatch removed')" "0 yes"
expect_fail "tenant remove of an unknown tenant exits 1" "no tenant named" \
    tenant remove nomatch

# --- tenant export / tenant apply ---------------------------------------

ctl tenant export acme
cp "$TMP/out" "$TMP/acme.json"
is "tenant export writes the tenant's rules as JSON" \
    "$RC $(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(d["tenant"], len(d["rules"]) > 0, sorted(d["rules"][0]))
' "$TMP/acme.json")" \
    "0 acme True ['always', 'enabled', 'failure_mode', 'limits', 'per', 'priority', 'route', 'shadow']"
ctl tenant apply "$TMP/acme.json"
is "applying the export to the same tenant changes nothing" \
    "$RC $(has out '^acme: 0 changes$')" "0 yes"
python3 - "$TMP/acme.json" "$TMP/copy.json" "$TMP/copy2.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["tenant"] = "copy"
json.dump(d, open(sys.argv[2], "w"))
d["rules"][0]["limits"][0]["name"] = "renamed"
d["rules"][0]["shadow"] = True
d["rules"].pop()
d["rules"].append({"route": "/applied/*", "always": True, "limits": [
    {"name": "q", "algorithm": "fixed_window", "limit": 500,
     "calendar": "day", "count": "tenant"}]})
json.dump(d, open(sys.argv[3], "w"))
PY
n_acme=$(sql "SELECT count(*) FROM rules r JOIN tenants t ON t.id = r.tenant_id WHERE t.name = 'acme'")
before=$(counts)
ctl tenant apply "$TMP/copy.json" --dry-run
is "apply --dry-run of a new tenant prints the changes and writes nothing" \
    "$RC $(has out '^+ tenant copy$') $(grep -c '^+ rule' "$TMP/out") $(counts)" \
    "0 yes $n_acme $before"
ctl tenant apply "$TMP/copy.json"
is "apply makes the tenant with the same rules" \
    "$RC $(sql "SELECT count(*) FROM rules r JOIN tenants t ON t.id = r.tenant_id WHERE t.name = 'copy'")" \
    "0 $n_acme"
ctl tenant export copy
is "the copy exports like the original (but for the name)" \
    "$(python3 -c '
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print(a["rules"] == b["rules"])
' "$TMP/acme.json" "$TMP/out")" True
ctl tenant apply "$TMP/copy.json"
is "applying it again changes nothing" "$RC $(has out '^copy: 0 changes$')" "0 yes"
before=$(counts)
ctl tenant apply "$TMP/copy2.json" --dry-run
is "apply --dry-run of changes lists them (a limit renamed: one out, one in)" \
    "$RC $(has out '^~ rule .*shadow on') $(has out '^+ rule .*limit renamed') $(has out '^- rule .*limit [0-9]* ') $(has out '^+ rule [0-9]* (/applied/\*, priority 0, always)')" \
    "0 yes yes yes yes"
is "and writes nothing" "$(counts)" "$before"
ctl tenant apply "$TMP/copy2.json"
is "apply writes those changes" \
    "$RC $(sql "SELECT count(*) FROM rules r JOIN tenants t ON t.id = r.tenant_id WHERE t.name = 'copy' AND r.route_pattern = '/applied/*' AND r.always") $(sql "SELECT l.count_scope FROM limits l JOIN rules r ON r.id = l.rule_id WHERE r.route_pattern = '/applied/*'")" \
    "0 1 tenant"
ctl tenant apply "$TMP/copy2.json"
is "and then nothing more" "$RC $(has out '^copy: 0 changes$')" "0 yes"
printf '{"tenant": "copy", "rules": [{"route": "/x", "limits": []}]}' \
    >"$TMP/bad.json"
expect_usage "apply of a rule without limits exits 2 naming it" \
    '\$\.rules\[0\]\.limits: a rule has 1 to 8 limits' tenant apply "$TMP/bad.json"
printf '{"tenant": "copy", "rules": [{"route": "/x", "limits": [{"name": "a", "algorithm": "gcra", "limit": 5}]}]}' \
    >"$TMP/bad.json"
expect_usage "apply of a limit without its parameters exits 2" \
    'missing key period_us (a whole number, which gcra needs)' tenant apply "$TMP/bad.json"
printf 'not json' >"$TMP/bad.json"
expect_usage "apply of a file that is not JSON exits 2 with where" \
    "bad.json:1:2: not valid JSON" tenant apply "$TMP/bad.json"
expect_fail "apply of a file that cannot be read exits 1" "missing.json" \
    tenant apply "$TMP/missing.json"

# --- an unreachable database --------------------------------------------

sh scripts/pg.sh stop "$TMP" >/dev/null 2>&1
ctl tenant list
is "with PostgreSQL down a command exits 1 with libpq's message" \
    "$RC $(has err '^ratelimitctl: .*127\.0\.0\.1')" "1 yes"
ctl rule add acme --route /x --algorithm token_bucket --limit 5
is "bad usage still exits 2 with PostgreSQL down" "$RC" 2

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
