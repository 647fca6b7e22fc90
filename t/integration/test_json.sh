#!/bin/sh
# ratelimitctl's --json outputs are typed and versioned, against the
# stack's database and Redis (issue 24, item 2):
#   - every command that takes --json (found from `ratelimitctl --help` and
#     each command's own --help) has a schema, doc/schemas/NOUN-VERB.json,
#     is run here, and each of its outputs is valid against that schema by
#     a validator written elsewhere: the npm package ajv-cli (draft
#     2020-12, with ajv-formats for date-time and uuid), installed once
#     under $BUILD/npm-ajv;
#   - no schema is left without its command;
#   - typed values, read with python3's json: "version" is the number 1,
#     booleans are true/false, counts and ids are numbers, times are ISO
#     8601 UTC with Z, absent values are null, and a limit's parameters
#     are an object with the values it was made with, for every algorithm.
# Run by t/integration/run.sh (TESTS=json).
# shellcheck disable=SC2317 # helpers called through `check`

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

SCHEMAS=$ROOT/doc/schemas
OUT=$T_TMP/json
mkdir -p "$OUT"
# The commands run here, one "noun-verb" a line.
RAN=$T_TMP/ran
: >"$RAN"

# ---------------------------------------------------------------- ajv-cli

AJV_PREFIX=$BUILD/npm-ajv
AJV=$AJV_PREFIX/node_modules/.bin/ajv
if [ ! -x "$AJV" ] ||
    [ ! -f "$AJV_PREFIX/node_modules/ajv-formats/package.json" ]; then
    mkdir -p "$AJV_PREFIX"
    timeout 180 npm install --no-audit --no-fund --no-save --prefix \
        "$AJV_PREFIX" ajv-cli@5 ajv-formats@2 >"$T_TMP/npm.out" 2>&1 ||
        cat "$T_TMP/npm.out"
fi
check "the validator ajv-cli is installed" test -x "$AJV"

# ---------------------------------------------------------------- fixture

T=$(uniq_name json)
B=$(uniq_name json-budget)
new_tenant "$T"
new_tenant "$B"
ctl tenant budget "$B" 500 >/dev/null
KEY=$(new_key "$T")
OLD_KEY=$(new_key "$T")
revoke_key "$OLD_KEY"
ctl rule add "$T" --route '/sw/*' --algorithm sliding_window --limit 10 \
    --window 60 --name sw >/dev/null
ctl rule add "$T" --route '/tb/*' --algorithm token_bucket --capacity 5 \
    --refill-rate 0.5 --name tb >/dev/null
ctl rule add "$T" --route '/gc/*' --algorithm gcra --limit 5 --period 1s \
    --burst 2 --name gc --count key >/dev/null
ctl rule add "$T" --route '/fw/*' --algorithm fixed_window --limit 1000 \
    --calendar day --name fw --count tenant >/dev/null
# Every route: an "always" rule that joins the others.
ctl rule add "$T" --route '/*' --algorithm sliding_window --limit 100 \
    --window 3600 --name all --always >/dev/null
# The same pattern as /sw/*, chosen after it: shadowed.
ctl rule add "$T" --route '/sw/*' --algorithm sliding_window --limit 99 \
    --window 60 --name late --priority -1 >/dev/null
# Disabled.
ctl rule add "$T" --route '/off' --algorithm sliding_window --limit 1 \
    --window 1 --name off >/dev/null
# shellcheck disable=SC2016 # :'t' is psql's
OFF_ID=$(psql_q "SELECT r.id FROM rules r JOIN tenants t ON t.id = r.tenant_id
    WHERE t.name = :'t' AND r.route_pattern = '/off';" "t=$T")
ctl rule set "$OFF_ID" --enabled off >/dev/null

# Counters of each algorithm in Redis, through the service.
for route in /sw/a /tb/a /gc/a /fw/a; do
    check_req "$KEY" "$(check_body "$route" s1)"
done
check "the stack answers a check of the fixture 200" eq "$STATUS" 200

# ---------------------------------------------------------------- outputs

# run NAME ARGS...: ratelimitctl ARGS --json into $OUT/NAME.json; NAME is
# the schema's (noun-verb), as recorded in $RAN.  A failed command is a
# failed check.
N_OUT=0
run() {
    run_name=$1
    shift
    N_OUT=$((N_OUT + 1))
    run_file=$OUT/$run_name.$N_OUT.json
    if ctl "$@" --json >"$run_file" 2>"$T_TMP/err"; then
        echo "$run_name" >>"$RAN"
    else
        fail "ratelimitctl $* --json exits 0" "$(cat "$T_TMP/err")"
    fi
    LAST=$run_file
}

run tenant-list tenant list
run tenant-show tenant show "$T"
TSHOW=$LAST
run tenant-show tenant show "$B"
BSHOW=$LAST
run key-list key list "$T"
KEYS=$LAST
run key-list key list "$B"
run rule-list rule list "$T"
RULES=$LAST
run rule-list rule list "$B"
run rule-match rule match "$T" /sw/a
MATCH=$LAST
run rule-match rule match "$T" /gc/a
run rule-match rule match "$B" /nothing
NOMATCH=$LAST
for route in /sw/a /tb/a /gc/a /fw/a; do
    run counter-show counter show "$T" "$route" --subject s1 \
        --key "$(key_id "$KEY")"
done
COUNTER_SW=$OUT/counter-show.$((N_OUT - 3)).json
run usage usage "$T"
USAGE=$LAST
run usage usage "$B"

# ---------------------------------------------------------------- schemas

# Every command whose usage offers --json.
: >"$T_TMP/json_commands"
ctl --help | sed -n 's/^ *ratelimitctl \[-c FILE\] //p' |
    while read -r w1 w2 _; do
        case $w2 in
        [a-z]*) words="$w1 $w2" ;;
        *) words=$w1 ;;
        esac
        # shellcheck disable=SC2086 # the command's words
        if ctl $words --help 2>&1 | grep -q -- '--json'; then
            echo "$words" | tr ' ' '-' >>"$T_TMP/json_commands"
        fi
    done
check "ratelimitctl --help names at least the 7 commands that take --json" \
    ge "$(wc -l <"$T_TMP/json_commands")" 7

while read -r name; do
    check "$name --json has a schema, doc/schemas/$name.json" \
        test -f "$SCHEMAS/$name.json"
    check "$name --json was run here" grep -qx "$name" "$RAN"
done <"$T_TMP/json_commands"
for f in "$SCHEMAS"/*.json; do
    name=$(basename "$f" .json)
    [ "$name" = common ] && continue
    check "schema $name.json belongs to a command that takes --json" \
        grep -qx "$name" "$T_TMP/json_commands"
done

# The schemas themselves refuse what the old outputs were: a boolean as
# "yes", a time without T and zone, parameters as text, a parameter of
# another algorithm.  These files are named NAME.bad.N.json.
python3 - "$RULES" "$OUT/rule-list.bad.1.json" <<'EOF'
import json, sys
o = json.load(open(sys.argv[1]))
o["rules"][0]["enabled"] = "yes"
json.dump(o, open(sys.argv[2], "w"))
EOF
sed 's/"created":"\([0-9-]*\)T\([0-9:]*\)Z"/"created":"\1 \2"/' "$TSHOW" \
    >"$OUT/tenant-show.bad.2.json"
sed 's/"parameters":{[^}]*}/"parameters":"10 per 60 s"/' "$RULES" \
    >"$OUT/rule-list.bad.3.json"
sed 's/"window_seconds":60/"window_seconds":60,"capacity":5/' "$RULES" \
    >"$OUT/rule-list.bad.4.json"

# Each schema's files in one run of ajv-cli (a run takes about a second):
# its verdicts, "FILE valid" or "FILE invalid" and the errors, in
# $T_TMP/ajv.NAME.
for f in "$SCHEMAS"/*.json; do
    name=$(basename "$f" .json)
    [ "$name" = common ] && continue
    set --
    for d in "$OUT/$name".*.json; do
        [ -f "$d" ] && set -- "$@" -d "$d"
    done
    [ $# -gt 0 ] || continue
    "$AJV" validate --spec=draft2020 --strict=true -c ajv-formats \
        -s "$f" -r "$SCHEMAS/common.json" "$@" >"$T_TMP/ajv.$name" 2>&1
done

# verdict FILE WORD: ajv-cli said "FILE WORD" (valid or invalid); its
# output is shown when it did not.
verdict() {
    vd_name=$(basename "$1" .json)
    vd_name=${vd_name%%.*}
    grep -qxF "$1 $2" "$T_TMP/ajv.$vd_name" 2>/dev/null || {
        head -c 2000 "$T_TMP/ajv.$vd_name" >&2
        return 1
    }
}

for f in "$OUT"/*.json; do
    name=$(basename "$f" .json)
    case $name in
    *.bad.*)
        check "${name%%.*}.json refuses $(basename "$f") (an old shape)" \
            verdict "$f" invalid
        ;;
    *)
        check "$(basename "$f"): valid against doc/schemas/${name%%.*}.json" \
            verdict "$f" valid
        ;;
    esac
done

# ---------------------------------------------------------------- typed values

# py FILE EXPR: EXPR printed, with o the JSON of FILE.
py() {
    python3 -c '
import json, re, sys
o = json.load(open(sys.argv[1]))
iso = lambda s: isinstance(s, str) and re.fullmatch(
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", s) is not None
typ = lambda v: type(v).__name__
print(eval("(" + sys.argv[2] + ")"))' "$1" "$2"
}

# "version" of every output, read at once: "FILE int 1" lines.
python3 -c '
import json, sys
for f in sys.argv[1:]:
    v = json.load(open(f)).get("version")
    print(f, type(v).__name__, v)' "$OUT"/*.json >"$T_TMP/versions" 2>&1
for f in "$OUT"/*.json; do
    case $f in *.bad.*) continue ;; esac
    check "$(basename "$f"): \"version\" is the number 1" \
        grep -qxF "$f int 1" "$T_TMP/versions"
done

check "tenant list: keys and rules are numbers, created is ISO 8601 UTC" \
    eq "$(py "$OUT/tenant-list.1.json" '[(typ(t["keys"]), typ(t["rules"]),
        iso(t["created"])) for t in o["tenants"] if t["name"] == "'"$T"'"]')" \
    "[('int', 'int', True)]"
check "tenant show: counts are numbers, the default budget null" \
    eq "$(py "$TSHOW" 'o["keys"], o["revoked_keys"], o["rules"], o["limits"],
        o["counter_budget"], iso(o["created"])')" "(1, 1, 7, 7, None, True)"
check "tenant show: a budget set is a number" \
    eq "$(py "$BSHOW" 'typ(o["counter_budget"]), o["counter_budget"]')" \
    "('int', 500)"
check "key list: ids are numbers, created ISO, last_used null or ISO" \
    eq "$(py "$KEYS" '[(typ(k["id"]), iso(k["created"]),
        k["last_used"] is None or iso(k["last_used"]), k["status"])
        for k in o["keys"]]')" \
    "[('int', True, True, 'active'), ('int', True, True, 'revoked')]"
check "key list: a key never used has last_used null" \
    eq "$(py "$KEYS" '[k["last_used"] for k in o["keys"]][1]')" None
check "rule list: a limit's parameters are an object, for each algorithm" \
    eq "$(py "$RULES" '[(r["limit"], r["parameters"]) for r in o["rules"]
        if r["limit"] in ("sw", "tb", "gc", "fw")]')" \
    "[('sw', {'limit': 10, 'window_seconds': 60}), ('tb', {'capacity': 5, 'refill_rate': 0.5}), ('gc', {'limit': 5, 'period_us': 1000000, 'burst': 2}), ('fw', {'limit': 1000, 'calendar': 'day'})]"
check "rule list: enabled, always and shadow are true/false" \
    eq "$(py "$RULES" 'sorted(set((r["limit"], r["enabled"], r["always"],
        r["shadow"]) for r in o["rules"] if r["limit"] in ("all", "off")))')" \
    "[('all', True, True, False), ('off', False, False, False)]"
check "rule list: the shadowed rule names its shadow by id" \
    eq "$(py "$RULES" '[r["shadowed_by"] == [x["id"] for x in o["rules"]
         if x["limit"] == "sw"][0] for r in o["rules"]
         if r["limit"] == "late"] + [typ(r["shadowed_by"]) for r in
         o["rules"] if r["limit"] == "sw"]')" \
    "[True, 'NoneType']"
check "rule match: the rule's id, always true/false, typed parameters" \
    eq "$(py "$MATCH" 'typ(o["rule"]), [(l["why"], l["always"],
        l["parameters"]) for l in o["limits"]], o["too_many_limits"]')" \
    "('int', [('most-specific', False, {'limit': 10, 'window_seconds': 60}), ('always', True, {'limit': 100, 'window_seconds': 3600})], False)"
check "rule match: no rule matching is rule null" \
    eq "$(py "$NOMATCH" 'o["rule"], o["limits"]')" "(None, [])"
check "counter show: the state's values and ttl_ms are numbers" \
    eq "$(py "$COUNTER_SW" '[(c["limit"], typ(c["ttl_ms"]),
        sorted(set(typ(v) for v in c["state"].values())), c["state"]["cur"])
        for c in o["counters"]][0]')" \
    "('sw', 'int', ['int'], 1)"
check "usage: now ISO, enabled true/false, used a number, parameters object" \
    eq "$(py "$USAGE" 'iso(o["now"]), sorted(set((typ(l["enabled"]),
        typ(l["used"]), typ(l["parameters"])) for l in o["limits"]))')" \
    "(True, [('bool', 'int', 'dict')])"
check "usage: a used limit resets at an ISO time; the fixed window too" \
    eq "$(py "$USAGE" '[(l["limit"], iso(l["reset_at"]), typ(l["reset_ms"]))
        for l in o["limits"] if l["limit"] in ("sw", "fw")]')" \
    "[('sw', True, 'int'), ('fw', True, 'int')]"

finish
