#!/bin/sh
# Rules and keys at scale against the real stack: a tenant with 5,000
# rules has every one of them enforced (the first, one far down the list,
# the catch-all, and one added afterwards), `ratelimitctl rule match`
# agrees with the service, the schema refuses the 10,001st rule, and a
# tenant that has more all the same (the bound's trigger disabled) is
# answered 503 misconfigured, never decided on part of its rules.  Run by
# t/integration/run.sh, which starts the stack with 2 s caches.

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

# statuses: the statuses of the last batch on one line.
statuses() {
    tr '\n' ' ' <"$T_TMP/statuses" | sed 's/ $//'
}

# rule_id PATTERN: the id of the tenant's rule with this pattern.
rule_id() {
    # shellcheck disable=SC2016
    psql_q "SELECT id FROM rules WHERE tenant_id = :'t'::uuid
        AND route_pattern = :'p';" "t=$TID" "p=$1"
}

# add_rules FROM TO: rules /r/FROM/* .. /r/TO/*, each 3 an hour, in one
# statement.
add_rules() {
    # shellcheck disable=SC2016
    psql_q "WITH r AS (
        INSERT INTO rules (tenant_id, route_pattern)
        SELECT :'t'::uuid, '/r/' || i || '/*' FROM generate_series($1, $2) i
        RETURNING id)
      INSERT INTO limits (rule_id, algorithm, limit_count, window_seconds)
      SELECT id, 'sliding_window', 3, 3600 FROM r;" "t=$TID"
}

# ------------------------------------------------ 5,000 rules, all enforced

T=$(uniq_name many-rules)
TID=$(ctl tenant add "$T" | awk '$1 == "id" { print $2; exit }')
KEY=$(new_key "$T")
add_rules 1 5000
# shellcheck disable=SC2016
psql_q "WITH r AS (INSERT INTO rules (tenant_id, route_pattern)
        VALUES (:'t'::uuid, '*') RETURNING id)
    INSERT INTO limits (rule_id, algorithm, limit_count, window_seconds)
    SELECT id, 'sliding_window', 3, 3600 FROM r;" "t=$TID"
check "the tenant has 5,001 rules" \
    eq "$(psql_q "SELECT count(*) FROM rules WHERE tenant_id = '$TID';")" 5001

for route in /r/11/x /r/4001/x /r/5000/x /elsewhere; do
    seq_checks 4 "$KEY" "{\"route\":\"$route\"}"
    check "rule of $route: 3 of 4 allowed, the 4th denied" \
        eq "$(statuses)" "200 200 200 429"
done

# A rule added afterwards, through ratelimitctl: enforced once the change is
# notified (within the 2 s cache at the latest).
ctl rule add "$T" --route /late --algorithm sliding_window --limit 1 \
    --window 60 >"$T_TMP/out" 2>&1
check "rule add on a 5,001-rule tenant succeeds" eq "$?" 0
sleep 2.5
seq_checks 3 "$KEY" '{"route":"/late"}'
check "the rule added afterwards (1 a minute): 1 of 3 allowed" \
    eq "$(statuses)" "200 429 429"

ctl rule match "$T" /r/4001/x >"$T_TMP/out" 2>&1
check "rule match /r/4001/x names rule /r/4001/*" \
    contains "$(cat "$T_TMP/out")" "rule $(rule_id '/r/4001/*'),"
ctl rule match "$T" /nowhere >"$T_TMP/out" 2>&1
check "rule match /nowhere names the catch-all" \
    contains "$(cat "$T_TMP/out")" "rule $(rule_id '*'),"

# ------------------------------------------------ the bound: 10,000 rules

add_rules 5001 9998
check "the tenant has 10,000 rules" \
    eq "$(psql_q "SELECT count(*) FROM rules WHERE tenant_id = '$TID';")" \
    10000
ctl rule add "$T" --route /one-too-many --algorithm sliding_window \
    --limit 1 --window 60 >"$T_TMP/out" 2>&1
rc=$?
check "rule add of the 10,001st rule fails" ne "$rc" 0
check "and says that a tenant may have at most 10000 rules" \
    contains "$(cat "$T_TMP/out")" "at most 10000"
add_rules 9999 9999 2>"$T_TMP/err"
check "an INSERT of the 10,001st rule is refused by the schema" \
    contains "$(cat "$T_TMP/err")" "at most 10000"
check "the tenant still has 10,000 rules" \
    eq "$(psql_q "SELECT count(*) FROM rules WHERE tenant_id = '$TID';")" \
    10000
seq_checks 4 "$KEY" '{"route":"/r/9998/x"}'
check "the 10,000th rule is enforced" eq "$(statuses)" "200 200 200 429"

# Past the bound another way: the service refuses every check of the
# tenant (503 misconfigured) rather than enforce some of its rules.
psql_q "ALTER TABLE rules DISABLE TRIGGER rules_bound_insert;"
add_rules 9999 9999
psql_q "ALTER TABLE rules ENABLE TRIGGER rules_bound_insert;"
sleep 2.5
seq_checks 2 "$KEY" '{"route":"/r/1/x"}'
check "10,001 rules: checks of the tenant answer 503" eq "$(statuses)" "503 503"
check "with error misconfigured" \
    eq "$(json_field error "$(batch_body 1)")" misconfigured
OTHER=$(uniq_name other)
new_tenant "$OTHER"
OKEY=$(new_key "$OTHER")
new_sw_rule "$OTHER" "/r/1/*" 5 60
sleep 2.5
check_req "$OKEY" '{"route":"/r/1/x"}'
check "another tenant is not affected" eq "$STATUS" 200
psql_q "DELETE FROM rules WHERE tenant_id = '$TID'
    AND route_pattern = '/r/9999/*';"
sleep 2.5
check_req "$KEY" '{"route":"/r/2/x"}'
check "back to 10,000 rules: checks are decided again" eq "$STATUS" 200
psql_q "UPDATE rules SET tenant_id = '$TID' WHERE tenant_id =
    (SELECT id FROM tenants WHERE name = '$OTHER');" 2>"$T_TMP/err"
check "a rule moved to a tenant with 10,000 rules is refused by the schema" \
    contains "$(cat "$T_TMP/err")" "at most 10000"

finish
