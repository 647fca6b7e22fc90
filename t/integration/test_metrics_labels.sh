#!/bin/sh
# test_metrics_labels.sh -- /metrics never exports two series with the same
# labels, whatever happens to tenants: a tenant removed and created again
# under the same name, a tenant renamed, a tenant removed.  A removed
# tenant's series are gone; a renamed one's carry its new name only.  The
# page is checked three ways: parsed here (no label set twice), by promtool,
# and by a real Prometheus server scraping the pool every second, whose
# query API must hold exactly the series the page shows and whose log and
# own counters must report no sample dropped as a duplicate.
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

ML=$((PORT + 201))
MP=$((PORT + 202))

serve_dir ratelimit-mlabels
private_app ml "$ML" "metrics_tenants=all" "workers=2" ||
    fail "a pool of its own starts" "see $D"
MLURL="http://127.0.0.1:$ML"

# mcheck KEY ROUTE: one check through the private pool; prints the status.
mcheck() {
    curl -s -o /dev/null -m 5 -w '%{http_code}' -X POST "$MLURL/v1/check" \
        -H "X-API-Key: $1" -H 'Content-Type: application/json' \
        -d "{\"route\":\"$2\",\"subject\":\"s\"}"
}

# statuses KEY ROUTE N: N checks, their statuses on one line.
statuses() {
    st_i=0
    st_out=
    while [ "$st_i" -lt "$3" ]; do
        st_out="$st_out$(mcheck "$1" "$2") "
        st_i=$((st_i + 1))
    done
    printf '%s\n' "${st_out% }"
}

avoid_edge 3600 15

# Tenant A: 3 checks of a limit of 2 (2 allowed, 1 denied), then removed
# and created again under the same name: 1 check (allowed).
ta=$(uniq_name mla)
new_tenant "$ta"
ka1=$(new_key "$ta")
new_sw_rule "$ta" /ml/a 2 3600
check "tenant A (first): 2 allowed, 1 denied" \
    eq "$(statuses "$ka1" /ml/a 3)" "200 200 429"
ctl tenant remove "$ta" --force >/dev/null
new_tenant "$ta"
ka2=$(new_key "$ta")
new_sw_rule "$ta" /ml/a 2 3600
check "tenant A (created again): 1 allowed" eq "$(statuses "$ka2" /ml/a 1)" 200

# Tenant B: 2 checks (allowed), renamed to B2, 1 more check (denied).
tb=$(uniq_name mlb)
tb2=$(uniq_name mlb2)
new_tenant "$tb"
kb=$(new_key "$tb")
new_sw_rule "$tb" /ml/b 2 3600
check "tenant B: 2 allowed" eq "$(statuses "$kb" /ml/b 2)" "200 200"
psql_q "UPDATE tenants SET name = :'new' WHERE name = :'old';" \
    "new=$tb2" "old=$tb" >/dev/null
# The notification of the tenant's row makes every worker look its keys
# up again; key_cache_ttl (2 s here) bounds it should one be missed.
sleep 2.5
check "tenant B, renamed B2: denied" eq "$(statuses "$kb" /ml/b 1)" 429

# Tenant C: 1 check, then removed for good.
tc=$(uniq_name mlc)
new_tenant "$tc"
kc=$(new_key "$tc")
new_sw_rule "$tc" /ml/c 2 3600
check "tenant C: 1 allowed" eq "$(statuses "$kc" /ml/c 1)" 200
ctl tenant remove "$tc" --force >/dev/null

curl -s -m 5 "$MLURL/metrics" >"$T_TMP/metrics.txt"

# dups FILE: the label sets FILE holds more than once, one a line.
dups() {
    python3 - "$1" <<'EOF'
import re, sys
seen, dup = set(), []
label = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')
for line in open(sys.argv[1], encoding="utf-8"):
    line = line.rstrip("\n")
    if not line or line.startswith("#"):
        continue
    m = re.match(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+\S+$', line)
    if m is None:
        dup.append("unparsed: " + line)
        continue
    labels, rest = [], m.group(3) or ""
    while rest:
        lm = label.match(rest)
        if lm is None:
            dup.append("unparsed labels: " + line)
            break
        labels.append((lm.group(1), lm.group(2)))
        rest = rest[lm.end():]
    key = (m.group(1), tuple(sorted(labels)))
    if key in seen:
        dup.append(m.group(1) + str(dict(labels)))
    seen.add(key)
print("; ".join(dup))
EOF
}

# val NAME LABELS: the value of NAME{LABELS} in the page, "absent" when none.
val() {
    awk -v s="$1{$2}" '$1 == s { print $2; f = 1 } END { if (!f) print "absent" }' \
        "$T_TMP/metrics.txt"
}

check "/metrics: no label set twice [$(dups "$T_TMP/metrics.txt")]" \
    eq "$(dups "$T_TMP/metrics.txt")" ""
check "tenant A: the series of the tenant now named so (1 allowed, 0 denied)" \
    eq "$(val ratelimit_tenant_checks_total "tenant=\"$ta\",result=\"allowed\"") $(val ratelimit_tenant_checks_total "tenant=\"$ta\",result=\"denied\"")" \
    "1 0"
check "tenant A: the removed tenant's rule is gone" \
    eq "$(grep -c "^ratelimit_rule_checks_total{tenant=\"$ta\"," "$T_TMP/metrics.txt")" 2
check "renamed tenant: nothing under its old name" \
    not_contains "$(cat "$T_TMP/metrics.txt")" "tenant=\"$tb\""
check "renamed tenant: its series under the new name (0 allowed, 1 denied)" \
    eq "$(val ratelimit_tenant_checks_total "tenant=\"$tb2\",result=\"allowed\"") $(val ratelimit_tenant_checks_total "tenant=\"$tb2\",result=\"denied\"")" \
    "0 1"
check "removed tenant: its series are gone" \
    not_contains "$(cat "$T_TMP/metrics.txt")" "tenant=\"$tc\""
promtool check metrics <"$T_TMP/metrics.txt" >"$T_TMP/promtool.out" 2>&1
check "promtool check metrics passes [$(head -c 300 "$T_TMP/promtool.out")]" \
    eq "$?" 0

# ------------------------------------------ a real Prometheus scrapes it

if ! command -v prometheus >/dev/null 2>&1; then
    fail "prometheus is installed" "Debian package prometheus"
    finish
fi
cat >"$D/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: ratelimit
    static_configs:
      - targets: ['127.0.0.1:$ML']
EOF
prometheus --config.file="$D/prometheus.yml" \
    --storage.tsdb.path="$D/prometheus-data" \
    --web.listen-address="127.0.0.1:$MP" \
    >"$D/prometheus.log" 2>&1 &
PIDS="$PIDS $!"
PROM=$!
PURL="http://127.0.0.1:$MP"

# pq PROMQL: the query's result vector as "labels value" lines, sorted.
pq() {
    curl -s -m 3 -G "$PURL/api/v1/query" --data-urlencode "query=$1" |
        python3 -c '
import json, sys
try:
    d = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
for r in sorted(d.get("data", {}).get("result", []), key=lambda r: sorted(r["metric"].items())):
    m = dict(r["metric"])
    m.pop("job", None)
    m.pop("instance", None)
    print(",".join("%s=%s" % kv for kv in sorted(m.items())), r["value"][1])'
}

# Three scrapes at least (the first may come before the page has every
# series), within 20 s.
n=0
until [ "$(pq "count_over_time(up{job=\"ratelimit\"}[1m])" | awk '{ print $NF }')" -ge 3 ] 2>/dev/null; do
    n=$((n + 1))
    if [ "$n" -gt 80 ]; then
        break
    fi
    sleep 0.25
done
check "Prometheus scraped the pool 3 times" \
    ge "$(pq "count_over_time(up{job=\"ratelimit\"}[1m])" | awk '{ print $NF }')" 3
check "Prometheus: the target is up" eq "$(pq 'up{job="ratelimit"}' | awk '{ print $NF }')" 1
check "Prometheus holds tenant A's two series, of the tenant now named so" \
    eq "$(pq "ratelimit_tenant_checks_total{tenant=\"$ta\"}" | tr '\n' ' ')" \
    "__name__=ratelimit_tenant_checks_total,result=allowed,tenant=$ta 1 __name__=ratelimit_tenant_checks_total,result=denied,tenant=$ta 0 "
check "Prometheus: nothing of the removed tenant" \
    eq "$(pq "count({tenant=\"$tc\"})")" ""
check "Prometheus: nothing under the renamed tenant's old name" \
    eq "$(pq "count({tenant=\"$tb\"})")" ""
dupcount=$(curl -s -m 3 "$PURL/metrics" |
    awk '$1 == "prometheus_target_scrapes_sample_duplicate_timestamp_total" { print $2 }')
check "Prometheus dropped no sample as a duplicate (its counter: $dupcount)" \
    eq "$dupcount" 0
check "Prometheus's log: no duplicate sample" \
    not_contains "$(cat "$D/prometheus.log")" "same timestamp"
check "Prometheus's log: no duplicate series" \
    eq "$(grep -ci duplicate "$D/prometheus.log")" 0
stop_process "$PROM" TERM
stop_private

finish
