#!/bin/sh
# test_dashboard.sh -- GET /dashboard in a real browser, and the Grafana
# board against the metrics the service really exports.
#
# A bounded load runs (about 20 s at most) while one tenant is being
# limited; headless Chromium (Debian's chromium) opens /dashboard, lets
# the page poll status?json&history&full for a few seconds and dumps the
# DOM it built.  The page marks what it drew (data-points on each chart:
# the seconds that had checks; one row per limited tenant and rule; one
# per worker), and a small Python program reads those facts from the DOM
# for the checks below.  The limited tenant's name carries HTML, which
# must come out as text.  The screenshots (1280x800 and phone width) are
# kept in $BUILD/artifacts/.  conf/grafana-dashboard.json must be valid
# JSON whose every query names only series /metrics exports (and, when
# promtool is there, parse as PromQL).
# shellcheck disable=SC2317 # helpers called through retry

set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

ART=$BUILD/artifacts
mkdir -p "$ART"

# ---------------------------------------------------------------- the page

req GET /dashboard
check "/dashboard: 200" eq "$STATUS" 200
check "/dashboard: HTML ($(header Content-Type))" \
    contains "$(header Content-Type)" text/html
size=$(wc -c <"$T_TMP/body" | tr -d ' ')
echo "    /dashboard is $size bytes"
check "/dashboard is small ($size bytes, at most 24000)" le "$size" 24000
check "/dashboard is the page of www/dashboard.html, byte for byte" \
    cmp -s "$T_TMP/body" "$ROOT/www/dashboard.html"
# Nothing from elsewhere: no script, style, font or image by URL (the SVG
# namespace is a name, not a download).
outside=$(grep -oiE '(src|href) *=|@import|url\(|https?://[^"'"'"' ]*' \
    "$T_TMP/body" | grep -vx 'http://www.w3.org/2000/svg' | tr '\n' ' ')
check "/dashboard loads nothing from elsewhere ($outside)" eq "$outside" ""

# ---------------------------------------------------------------- load

# The limited tenant's name is HTML: the page must show it as text.
limited="dash<i>&\"$(uniq_name l)\"<img src=x>"
new_tenant "$limited"
lkey=$(new_key "$limited")
new_sw_rule "$limited" '/dash/*' 5 3600
busy=$(uniq_name dash-ok)
new_tenant "$busy"
bkey=$(new_key "$busy")
new_sw_rule "$busy" '/dash/*' 1000000 3600

# One round of the load: checks of both tenants (the limited one soon
# only denied), a route with no rule, and an unknown key (other 4xx).
load_conf=$T_TMP/load.conf
: >"$load_conf"
sep=
for kr in "$lkey /dash/a" "$lkey /dash/b" "$lkey /dash/c" "$bkey /dash/a" \
    "$bkey /dash/b" "$bkey /dash/c" "$bkey /dash/d" "$bkey /norule" \
    "rl_nosuchkey /dash/a"; do
    {
        [ -n "$sep" ] && echo "$sep"
        sep=next
        echo "url = \"$BASE_URL/v1/check\""
        echo "header = \"X-API-Key: ${kr%% *}\""
        echo 'header = "Content-Type: application/json"'
        echo "data-raw = \"{\\\"route\\\":\\\"${kr#* }\\\",\\\"subject\\\":\\\"s\\\"}\""
        echo 'output = "/dev/null"'
        printf '%s\n' 'write-out = "%{http_code}\n"'
        echo 'max-time = 5'
    } >>"$load_conf"
done
# A round every 0.2 s or so until $T_TMP/stop appears, at most LOAD_ROUNDS
# rounds and 25 s.
LOAD_ROUNDS=100
(
    n=0
    end=$(($(date +%s) + 25))
    while [ "$n" -lt "$LOAD_ROUNDS" ] && [ "$(date +%s)" -lt "$end" ] &&
        [ ! -e "$T_TMP/stop" ]; do
        curl -s --parallel --parallel-max 4 -K "$load_conf" || true
        sleep 0.2
        n=$((n + 1))
    done
) >"$T_TMP/load.statuses" 2>/dev/null &
LOAD_PID=$!
trap 'end_pids $LOAD_PID' EXIT
trap 'exit 130' INT TERM

# The JSON the page draws, once the limited tenant is in it.
top_has_limited() {
    fetch "$BASE_URL/status?json&history&full"
    python3 - "$T_TMP/body" "$limited" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
sys.exit(0 if any(t.get("tenant") == sys.argv[2] and t.get("denied", 0) > 0
                  for t in doc.get("top", [])) else 1)
EOF
}
check "status?json&history&full lists the limited tenant in top (within 10 s)" \
    retry 100 top_has_limited
python3 - "$T_TMP/body" >"$T_TMP/shape.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
h = d.get("history", {})
n = h.get("seconds")
series = ["allowed", "denied", "no_rule", "fail_open", "unavailable",
          "other_4xx", "p50_ms", "p99_ms"]
print(json.dumps({
    "series_ok": all(isinstance(h.get(s), list) and len(h[s]) == n
                     for s in series),
    "seconds": n,
    "version": d.get("version"),
    "health": sorted(d.get("health", {})),
    "top_fields": sorted(set().union(*[set(t) for t in d.get("top", [])])),
    "processes": len(d.get("processes", [])),
}))
EOF
shape=$(cat "$T_TMP/shape.json")
check "history: every series has 'seconds' values ($shape)" \
    eq "$(json_field series_ok "$shape")" true
check "the JSON names redis and postgresql health" \
    eq "$(json_field health "$shape")" '["postgresql", "redis"]'
check "top entries have tenant, rule, denied and remaining" \
    contains "$(json_field top_fields "$shape")" '"denied", "remaining", "rule", "tenant"'
version=$(json_field version "$shape")

# The charts need seconds to draw: wait until the history holds at least
# six seconds with checks (the load runs on; 150 tries 0.1 s apart).
history_seconds() {
    fetch "$BASE_URL/status?json&history"
    python3 - "$T_TMP/body" <<'EOF'
import json, sys
h = json.load(open(sys.argv[1])).get("history", {})
busy = sum(1 for i in range(h.get("seconds", 0))
           if sum(h[s][i] for s in ("allowed", "denied", "no_rule",
                                    "other_4xx")) > 0)
sys.exit(0 if busy >= 6 else 1)
EOF
}
check "the history holds six seconds with checks" \
    retry 150 history_seconds

# ---------------------------------------------------------------- browser

browser() {
    timeout -k 5 40 chromium --headless --no-sandbox --disable-gpu \
        --disable-dev-shm-usage --no-first-run --hide-scrollbars \
        --user-data-dir="$T_TMP/chromium" --virtual-time-budget=5000 "$@" \
        2>>"$T_TMP/chromium.log"
}

# The facts of a dumped DOM, as one JSON object.
dom_facts() {
    python3 - "$1" <<'EOF'
import json, sys
from html.parser import HTMLParser

class Facts(HTMLParser):
    """The attributes of elements with an id, their text, and the rows of
    the two tables (attributes, cells' text, tags inside the cells)."""

    def __init__(self):
        super().__init__()
        self.stack, self.ids, self.text = [], {}, {}
        self.rows = {"top": [], "workers": []}

    def table(self):
        return next((i for t, i in reversed(self.stack) if i in self.rows),
                    None)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        t = self.table()
        if a.get("id"):
            self.ids[a["id"]] = a
            self.text[a["id"]] = ""
        if t and tag == "tr" and any(k.startswith("data-") for k in a):
            self.rows[t].append({"attrs": a, "cells": [], "tags": []})
        elif t and self.rows[t] and any(x == "tr" for x, _ in self.stack):
            row = self.rows[t][-1]
            if tag == "td":
                row["cells"].append("")
            else:
                row["tags"].append(tag)
        if tag not in ("br", "img", "input", "meta", "link", "hr"):
            self.stack.append((tag, a.get("id")))

    def handle_endtag(self, tag):
        while self.stack:
            if self.stack.pop()[0] == tag:
                break

    def handle_data(self, data):
        for _, i in self.stack:
            if i in self.text:
                self.text[i] += data
        t = self.table()
        if t and self.rows[t] and self.rows[t][-1]["cells"]:
            self.rows[t][-1]["cells"][-1] += data

p = Facts()
p.feed(open(sys.argv[1], encoding="utf-8").read())
ids = p.ids
top = [r for r in p.rows["top"] if "data-tenant" in r["attrs"]]
print(json.dumps({
    "rate_points": int(ids.get("rate", {}).get("data-points", 0)),
    "rate_checks": int(ids.get("rate", {}).get("data-checks", 0)),
    "latency_points": int(ids.get("latency", {}).get("data-points", 0)),
    "top_tenants": [r["attrs"]["data-tenant"] for r in top],
    "top_cells": [r["cells"] for r in top],
    "top_tags": sorted(set(t for r in top for t in r["tags"])),
    "workers": len(p.rows["workers"]),
    "worker_states": sorted(set(r["attrs"].get("data-state", "")
                                for r in p.rows["workers"])),
    "redis_ok": ids.get("h-redis", {}).get("data-ok"),
    "pg_ok": ids.get("h-pg", {}).get("data-ok"),
    "version": p.text.get("version", "").strip(),
    "conn": p.text.get("conn", "").strip(),
}))
EOF
}

browser --window-size=1280,800 --dump-dom "$BASE_URL/dashboard" \
    >"$T_TMP/dom.html"
check "chromium dumped the page's DOM" grep -q 'id="rate"' "$T_TMP/dom.html"
polls=$(sed -n 's/.*<body[^>]* data-polls="\([0-9]*\)".*/\1/p' \
    "$T_TMP/dom.html" | head -n 1)
check "the page polled the JSON more than once ($polls)" ge "${polls:-0}" 2
facts=$(dom_facts "$T_TMP/dom.html")
echo "    page: $facts"
check "the rate chart has data points ($(json_field rate_points "$facts") seconds with checks)" \
    ge "$(json_field rate_points "$facts")" 5
check "the latency chart has data points ($(json_field latency_points "$facts"))" \
    ge "$(json_field latency_points "$facts")" 5
check "the rate chart draws allowed and denied areas" \
    eq "$(grep -o '<path[^>]* data-series="\(allowed\|denied\)"' \
        "$T_TMP/dom.html" | sed 's/.*data-series=//' | sort -u | tr '\n' ' ')" \
    '"allowed" "denied" '
check "the top table lists the limited tenant first" \
    eq "$(python3 -c 'import json,sys; t=json.loads(sys.argv[1])["top_tenants"]; print(t[0] if t else "")' "$facts")" \
    "$limited"
check "its row shows it as text, with remaining 0 ($(json_field top_cells "$facts"))" \
    python3 -c '
import json, sys
f = json.loads(sys.argv[1])
cells = f["top_cells"][0]
sys.exit(0 if cells[0] == sys.argv[2] and cells[3] == "0" else 1)' \
    "$facts" "$limited"
check "no HTML from a tenant name became an element (tags in its rows: $(json_field top_tags "$facts"))" \
    eq "$(json_field top_tags "$facts")" '["div"]'
check "the workers table has one row per worker" \
    eq "$(json_field workers "$facts")" "$WORKERS"
check "Redis and PostgreSQL shown healthy" \
    eq "$(json_field redis_ok "$facts") $(json_field pg_ok "$facts")" "1 1"
check "the version is shown (v$version)" \
    eq "$(json_field version "$facts")" "v$version"
check "no fetch error on the page" eq "$(json_field conn "$facts")" ""

# The narrowest window headless Chromium lays out is 500 px: the compact
# layout, with nothing wider than the window.
browser --window-size=500,900 --dump-dom "$BASE_URL/dashboard#1m" \
    >"$T_TMP/dom-narrow.html"
check "at 500 px the page fits the window (no horizontal scrolling)" \
    grep -q '<body[^>]* data-fits="1"' "$T_TMP/dom-narrow.html"

rm -f "$ART/dashboard.png" "$ART/dashboard-phone.png"
browser --window-size=1280,800 --screenshot="$ART/dashboard.png" \
    "$BASE_URL/dashboard" >/dev/null
browser --window-size=390,844 --screenshot="$ART/dashboard-phone.png" \
    "$BASE_URL/dashboard#1m" >/dev/null
png_size() {
    python3 -c '
import struct, sys
b = open(sys.argv[1], "rb").read(24)
print("%dx%d" % struct.unpack(">II", b[16:24]) if b[:8] == b"\x89PNG\r\n\x1a\n"
      else "not a PNG")' "$1" 2>/dev/null
}
check "screenshot $ART/dashboard.png is a 1280x800 PNG ($(png_size "$ART/dashboard.png"))" \
    eq "$(png_size "$ART/dashboard.png")" 1280x800
check "screenshot $ART/dashboard-phone.png is a 390x844 PNG" \
    eq "$(png_size "$ART/dashboard-phone.png")" 390x844

touch "$T_TMP/stop"
wait "$LOAD_PID"
count_of() {
    grep -cx "$1" "$T_TMP/load.statuses" || true
}
echo "    load: $(count_of 200) allowed, $(count_of 429) denied, $(count_of 401) unknown key"
check "the load had allowed, denied and refused checks" \
    eq "$(for s in 200 429 401; do [ "$(count_of $s)" -gt 0 ] && printf 1; done)" \
    111

# ---------------------------------------------------------------- Grafana

req GET /metrics
printf '%s\n' "$BODY" >"$T_TMP/metrics"
python3 - "$ROOT/conf/grafana-dashboard.json" "$T_TMP/metrics" \
    "$T_TMP/rules.yml" >"$T_TMP/grafana.json" <<'EOF'
import json, re, sys

out = {"valid": False}
try:
    board = json.load(open(sys.argv[1]))
    out["valid"] = True
except ValueError as e:
    out["error"] = str(e)
    print(json.dumps(out))
    sys.exit(0)

exprs = []
def walk(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "expr" and isinstance(v, str):
                exprs.append(v)
            elif k == "query" and isinstance(v, str) and "(" in v:
                exprs.append(v)
            else:
                walk(v)
    elif isinstance(node, list):
        for v in node:
            walk(v)
walk(board)

exported = set()
for line in open(sys.argv[2]):
    if line.strip() and not line.startswith("#"):
        exported.add(re.split(r"[{ ]", line, 1)[0])
used = set()
for e in exprs:
    used.update(re.findall(r"\bratelimit_[a-z0-9_]+", e))
variables = board.get("templating", {}).get("list", [])
ds_var = [v["name"] for v in variables
          if v.get("type") == "datasource" and v.get("query") == "prometheus"]
panel_ds = set()
for p in board.get("panels", []):
    if p.get("type") != "row":
        panel_ds.add(json.dumps(p.get("datasource"), sort_keys=True))
out.update({
    "schema": board.get("schemaVersion"),
    "datasource_var": ds_var,
    "panel_datasources": sorted(panel_ds),
    "queries": len(exprs),
    "used": sorted(used),
    "missing": sorted(used - exported),
    "histogram_quantile": sum("histogram_quantile" in e and "_bucket" in e
                              for e in exprs),
    "topk": sum("topk(" in e for e in exprs),
})
# Every query as a recording rule, Grafana's variables given values, for
# promtool to parse.
with open(sys.argv[3], "w") as f:
    f.write("groups:\n- name: board\n  rules:\n")
    for i, e in enumerate(exprs):
        e = (e.replace("$__rate_interval", "1m").replace("$__range", "1h")
             .replace("$instance", ".*"))
        if e.startswith("label_values("):
            continue
        f.write("  - record: board_%d\n    expr: %s\n" % (i, json.dumps(e)))
print(json.dumps(out))
EOF
g=$(cat "$T_TMP/grafana.json")
echo "    grafana: $g"
check "conf/grafana-dashboard.json is valid JSON" \
    eq "$(json_field valid "$g")" true
check "its schemaVersion is 36 or later ($(json_field schema "$g"))" \
    ge "$(json_field schema "$g")" 36
# shellcheck disable=SC2016 # the board's own ${datasource}, not the shell's
check "it has a Prometheus data source variable, used by every panel" \
    eq "$(json_field datasource_var "$g") $(json_field panel_datasources "$g")" \
    '["datasource"] ["{\"type\": \"prometheus\", \"uid\": \"${datasource}\"}"]'
check "it has queries ($(json_field queries "$g")), latency from _bucket, topk" \
    eq "$(json_field queries "$g" | awk '{ print ($1 >= 10) }') $(json_field histogram_quantile "$g" | awk '{ print ($1 >= 3) }') $(json_field topk "$g" | awk '{ print ($1 >= 2) }')" \
    "1 1 1"
check "every metric its queries use is one /metrics exports (missing: $(json_field missing "$g"))" \
    eq "$(json_field missing "$g")" "[]"
if command -v promtool >/dev/null 2>&1; then
    promtool check rules "$T_TMP/rules.yml" >"$T_TMP/promtool.out" 2>&1
    rc=$?
    check "promtool parses every query (exit $rc)" eq "$rc" 0
    [ "$rc" = 0 ] || head -n 10 "$T_TMP/promtool.out" | sed 's/^/    /'
fi

finish
