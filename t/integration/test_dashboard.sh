#!/bin/sh
# test_dashboard.sh -- GET /dashboard in a real browser, and the Grafana
# board against the metrics the service really exports.
#
# A bounded load runs (45 s at most, stopped once the pages are read)
# while one tenant is being limited; headless Chromium (Debian's
# chromium) opens /dashboard, lets
# the page poll status?json&history&full for a few seconds and dumps the
# DOM it built.  The page marks what it drew (data-points on each chart:
# the seconds that had checks; one row per limited tenant and rule; one
# per worker), and a small Python program reads those facts from the DOM
# for the checks below.  The limited tenant's name carries HTML, which
# must come out as text.  Rules are shown as "route · limit name"; a
# tenant denied earlier but with budget left now shows that budget as its
# remaining; the tenants with the most checks are listed; the page opened
# at #tenant=NAME shows that tenant's rates and its denials by limit; the
# Redis and PostgreSQL latency and the caches' hit rates are figures.
# Other files may have left tenants of their own in the pool, so rows are
# found by this file's names, never by place.  The screenshots (1280x800,
# phone width, and the tenant view) are kept in $BUILD/artifacts/.
# conf/grafana-dashboard.json must be valid JSON whose every query names
# only series /metrics exports (and, when promtool is there, parse as
# PromQL), with a $tenant variable that its per-tenant panels use.
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
check "/dashboard is small ($size bytes, at most 28000)" le "$size" 28000
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
# The limited tenant's /dash/c has a rule of its own, with a named limit:
# its view shows denials of two limits, by route and name.
ctl rule add "$limited" --route /dash/c --name burst \
    --algorithm sliding_window --limit 2 --window 3600 >/dev/null
# A tenant denied a while ago whose rule has budget left for another
# subject: its row in the top list must say what is left (2), not 0.
spare=$(uniq_name dash-spare)
new_tenant "$spare"
skey=$(new_key "$spare")
new_sw_rule "$spare" /spare 3 3600
badmin=$(new_key "$busy" admin)
# The busy tenant holds two leases of an in-flight limit (5 minutes):
# its row and the page's figure show them in flight.
ctl rule add "$busy" --route /dash/lease --algorithm concurrency --max 5 \
    --lease-ttl 5m >/dev/null
sleep 1
for s in l1 l2; do
    req POST /v1/check "{\"route\":\"/dash/lease\",\"subject\":\"$s\"}" \
        "X-API-Key: $bkey" "Content-Type: application/json"
    check "the busy tenant takes lease $s ($STATUS)" eq "$STATUS" 200
done

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
# rounds and 45 s: the tenant view, read last, shows its minute.
LOAD_ROUNDS=200
(
    n=0
    end=$(($(date +%s) + 45))
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
check "top entries have tenant, rule, route, limit, denied and remaining" \
    contains "$(json_field top_fields "$shape")" '"denied", "limit", "remaining", "route", "rule", "tenant"'
version=$(json_field version "$shape")

# The spare tenant: 40 checks of subject a (3 allowed, 37 denied), then one
# of subject b, allowed with 2 left: its rule's last decision.
spare_conf=$T_TMP/spare.conf
: >"$spare_conf"
for i in $(seq 40); do
    [ "$i" -gt 1 ] && echo next
    echo "url = \"$BASE_URL/v1/check\""
    echo "header = \"X-API-Key: $skey\""
    echo 'header = "Content-Type: application/json"'
    echo 'data-raw = "{\"route\":\"/spare\",\"subject\":\"a\"}"'
    echo 'output = "/dev/null"'
    echo 'max-time = 5'
done >>"$spare_conf"
curl -s --parallel --parallel-max 8 -K "$spare_conf" >/dev/null || true
req POST /v1/check '{"route":"/spare","subject":"b"}' "X-API-Key: $skey" \
    'Content-Type: application/json'
check "the spare tenant's subject b is allowed with 2 left ($STATUS)" \
    eq "$STATUS $(json_field remaining "$BODY")" "200 2"

# What the new parts of the page draw, from the JSON.
fetch "$BASE_URL/status?json&history&full"
python3 - "$T_TMP/body" "$limited" "$spare" "$busy" >"$T_TMP/parts.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
limited, spare, busy = sys.argv[2:5]
top = d.get("top", [])
def isnum(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)
stores = d.get("stores", {})
caches = d.get("caches", {})
print(json.dumps({
    "limited_rules": sorted("%s \u00b7 %s" % (t.get("route"), t.get("limit"))
                            for t in top if t.get("tenant") == limited),
    "limited_id": next((t.get("tenant_id") for t in top
                        if t.get("tenant") == limited), ""),
    "spare_remaining": [t.get("remaining") for t in top
                        if t.get("tenant") == spare],
    "busy_checks": [t.get("checks") for t in d.get("tenants", [])
                    if t.get("tenant") == busy],
    "stores": all(isinstance(stores.get(s), dict) and
                  stores[s].get("count", 0) > 0 and
                  isnum(stores[s].get("p50_ms")) and
                  isnum(stores[s].get("p99_ms"))
                  for s in ("redis", "postgresql")),
    "caches": all(isinstance(caches.get(c), dict) and
                  isnum(caches[c].get("hit")) and isnum(caches[c].get("miss"))
                  and caches[c]["hit"] + caches[c]["miss"] > 0
                  for c in ("key", "rule")),
}))
EOF
parts=$(cat "$T_TMP/parts.json")
echo "    json: $parts"
check "top: the limited tenant's rules as route · limit ($(json_field limited_rules "$parts"))" \
    eq "$(json_field limited_rules "$parts")" \
    '["/dash/* \u00b7 default", "/dash/c \u00b7 burst"]'
check "top: the spare tenant's remaining is 2 ($(json_field spare_remaining "$parts"))" \
    eq "$(json_field spare_remaining "$parts")" "[2]"
check "tenants: the busy tenant is among the top tenants by checks ($(json_field busy_checks "$parts"))" \
    python3 -c 'import json,sys; c=json.loads(sys.argv[1]); sys.exit(0 if len(c) == 1 and c[0] > 0 else 1)' \
    "$(json_field busy_checks "$parts")"
check "stores: Redis and PostgreSQL calls, p50 and p99 of the last minute" \
    eq "$(json_field stores "$parts")" true
check "caches: key and rule cache hits and misses" \
    eq "$(json_field caches "$parts")" true
lid=$(json_field limited_id "$parts")

# One tenant's view: its rules with route, limit and denials, its seconds.
urlq() {
    python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"
}
tview_json() {
    python3 - "$T_TMP/body" <<'EOF'
import json, sys
try:
    t = json.load(open(sys.argv[1])).get("tenant") or {}
except ValueError:
    t = {}
print(json.dumps({
    "name": t.get("tenant", ""),
    "rules": sorted(["%s \u00b7 %s" % (r.get("route"), r.get("limit")),
                     r.get("denied", 0) > 0, r.get("remaining")]
                    for r in t.get("rules", [])),
    "seconds": len(t.get("checks", [])),
    "checks": sum(t.get("checks", [])),
    "denied": sum(t.get("denied", [])),
}))
EOF
}
fetch "$BASE_URL/status?json&history&tenant=$(urlq "$limited")"
tv=$(tview_json)
echo "    tenant view: $tv"
check "?tenant=: the limited tenant, its two limits, each denied, nothing left" \
    eq "$(json_field rules "$tv")" \
    '[["/dash/* \u00b7 default", true, 0], ["/dash/c \u00b7 burst", true, 0]]'
check "?tenant=: its checks and denials per second of the last minute" \
    eq "$(json_field name "$tv") $(json_field seconds "$tv") $(json_field checks "$tv" | awk '{ print ($1 > 0) }') $(json_field denied "$tv" | awk '{ print ($1 > 0) }')" \
    "$limited 60 1 1"
fetch "$BASE_URL/status?json&history&tenant=$(urlq "$limited")" \
    -H "X-API-Key: $badmin"
tv=$(tview_json)
check "?tenant=: another tenant's admin key sees none of it ($STATUS $tv)" \
    eq "$STATUS $(json_field rules "$tv") $(contains "$BODY" "$lid" && echo leak)" \
    "200 [] "
fetch "$BASE_URL/status?json&history&tenant=$(urlq "$busy")" \
    -H "X-API-Key: $badmin"
tv=$(tview_json)
check "?tenant=: its own tenant's admin key sees its rules, the load's and the leases' ($STATUS $(json_field rules "$tv"))" \
    python3 -c '
import json, sys
r = sorted(json.loads(sys.argv[1]))
sys.exit(0 if len(r) == 2 and r[0][0] == "/dash/* \u00b7 default" and r[0][2] > 0
         and r[1][0] == "/dash/lease \u00b7 default"
         else 1)' "$(json_field rules "$tv")"

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
    the tables (attributes, cells' text, tags inside the cells)."""

    def __init__(self):
        super().__init__()
        self.stack, self.ids, self.text = [], {}, {}
        self.in_flight = None
        self.rows = {"top": [], "workers": [], "tenants": [], "trules": []}

    def table(self):
        return next((i for t, i in reversed(self.stack) if i in self.rows),
                    None)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        t = self.table()
        if "data-in-flight" in a:
            self.in_flight = a["data-in-flight"]
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
def figure(i, a):
    v = ids.get(i, {}).get(a)
    try:
        return float(v)
    except (TypeError, ValueError):
        return None
print(json.dumps({
    "rate_points": int(ids.get("rate", {}).get("data-points", 0)),
    "rate_checks": int(ids.get("rate", {}).get("data-checks", 0)),
    "latency_points": int(ids.get("latency", {}).get("data-points", 0)),
    "top_tenants": [r["attrs"]["data-tenant"] for r in top],
    "top_cells": [r["cells"] for r in top],
    "tenants": [[r["attrs"].get("data-tenant")] + r["cells"]
                for r in p.rows["tenants"] if "data-tenant" in r["attrs"]],
    "tview": ids.get("tview", {}).get("data-tenant"),
    "tview_points": int(ids.get("tchart", {}).get("data-points", 0)),
    "trules": [r["cells"] for r in p.rows["trules"]
               if "data-rule" in r["attrs"]],
    "figures": {"%s_%s" % (i, a): figure("k-" + i, "data-" + a)
                for i, a in (("redis", "p50"), ("redis", "p99"),
                             ("pg", "p50"), ("pg", "p99"),
                             ("cache", "key"), ("cache", "rule"))},
    "top_tags": sorted(set(t for r in top for t in r["tags"])),
    "workers": len(p.rows["workers"]),
    "worker_states": sorted(set(r["attrs"].get("data-state", "")
                                for r in p.rows["workers"])),
    "redis_ok": ids.get("h-redis", {}).get("data-ok"),
    "pg_ok": ids.get("h-pg", {}).get("data-ok"),
    "version": p.text.get("version", "").strip(),
    "conn": p.text.get("conn", "").strip(),
    "in_flight": p.in_flight,
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
# Other files' tenants may be limited as well: rows by name.
row_of() {
    python3 -c '
import json, sys
f = json.loads(sys.argv[1])
print(json.dumps([c for c in f["top_cells"] if c[0] == sys.argv[2]]))' \
        "$facts" "$1"
}
check "the top table lists the limited tenant" \
    contains "$(json_field top_tenants "$facts")" "$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1])[1:-1])' "$limited")"
check "its rows show it as text, route · limit, remaining 0 ($(row_of "$limited"))" \
    python3 -c '
import json, sys
rows = json.loads(sys.argv[1])
sys.exit(0 if sorted((r[0], r[1], r[3]) for r in rows) ==
         [(sys.argv[2], "/dash/* \u00b7 default", "0"),
          (sys.argv[2], "/dash/c \u00b7 burst", "0")] else 1)' \
    "$(row_of "$limited")" "$limited"
check "the spare tenant's row shows remaining 2 ($(row_of "$spare"))" \
    python3 -c '
import json, sys
rows = json.loads(sys.argv[1])
sys.exit(0 if [(r[1], r[3]) for r in rows] == [("/spare \u00b7 default", "2")]
         else 1)' "$(row_of "$spare")"
check "the top tenants table has the busy tenant, with checks a second" \
    python3 -c '
import json, sys
rows = [r for r in json.loads(sys.argv[1])["tenants"] if r[0] == sys.argv[2]]
sys.exit(0 if len(rows) == 1 and rows[0][1] == sys.argv[2] and
         float(rows[0][2]) > 0 else 1)' "$facts" "$busy"
check "its row shows the 2 leases it holds in flight" \
    python3 -c '
import json, sys
rows = [r for r in json.loads(sys.argv[1])["tenants"] if r[0] == sys.argv[2]]
sys.exit(0 if len(rows) == 1 and rows[0][-1] == "2" else 1)' "$facts" "$busy"
check "the in-flight figure counts them ($(json_field in_flight "$facts"))" \
    ge "$(json_field in_flight "$facts")" 2
check "Redis and PostgreSQL p50 and p99, key and rule cache hit rates shown ($(json_field figures "$facts"))" \
    python3 -c '
import json, sys
f = json.loads(sys.argv[1])["figures"]
sys.exit(0 if all(v is not None and v >= 0 for v in f.values()) and
         f["cache_key"] <= 100 and f["cache_rule"] <= 100 else 1)' "$facts"
check "no HTML from a tenant name became an element (tags in its rows: $(json_field top_tags "$facts"))" \
    eq "$(json_field top_tags "$facts")" '["div"]'
check "the workers table has one row per worker" \
    eq "$(json_field workers "$facts")" "$WORKERS"
check "Redis and PostgreSQL shown healthy" \
    eq "$(json_field redis_ok "$facts") $(json_field pg_ok "$facts")" "1 1"
check "the version is shown (v$version)" \
    eq "$(json_field version "$facts")" "v$version"
check "no fetch error on the page" eq "$(json_field conn "$facts")" ""

# A tenant's view, as a click on its row opens it: #tenant=NAME.
browser --window-size=1280,800 --dump-dom \
    "$BASE_URL/dashboard#tenant=$(urlq "$limited")" >"$T_TMP/dom-tenant.html"
tfacts=$(dom_facts "$T_TMP/dom-tenant.html")
echo "    tenant page: $(json_field tview "$tfacts") $(json_field trules "$tfacts")"
check "#tenant=NAME opens the limited tenant's view, with its seconds drawn" \
    eq "$(json_field tview "$tfacts") $(json_field tview_points "$tfacts" | awk '{ print ($1 > 0) }')" \
    "$limited 1"
check "the view lists its denials by limit, as route · limit ($(json_field trules "$tfacts"))" \
    python3 -c '
import json, sys
rows = json.loads(sys.argv[1])["trules"]
by = dict((r[0], r) for r in rows)
sys.exit(0 if sorted(by) == ["/dash/* \u00b7 default", "/dash/c \u00b7 burst"]
         and all(float(by[k][2]) > 0 for k in by) else 1)' "$tfacts"

# A click on the limited tenant's row in the top table.  A page of our own
# holds /dashboard in a frame and clicks the row's first cell, then keeps
# the frame's DOM as text; to be let into the frame it comes from the same
# origin: a small proxy serves it and passes everything else to the pool.
cat >"$T_TMP/click.html" <<'EOF'
<!DOCTYPE html>
<html><body><iframe id="f" src="dashboard" style="width:1260px;height:780px"></iframe>
<pre id="out"></pre>
<script>
var f = document.getElementById("f"), name = decodeURIComponent(location.hash.slice(1));
setTimeout(function () {
  var d = f.contentDocument, hit = null;
  [].forEach.call(d.querySelectorAll("#top tr[data-tenant]"), function (tr) {
    if (!hit && tr.getAttribute("data-tenant") === name) hit = tr;
  });
  if (hit) hit.cells[0].click();
  setTimeout(function () {
    document.getElementById("out").textContent = d.documentElement.outerHTML;
  }, 2000);
}, 2000);
</script></body></html>
EOF
python3 - "$BASE_URL" "$T_TMP/click.html" "$T_TMP/proxy.port" <<'EOF' &
import http.server, sys, urllib.error, urllib.request
base, page, port_file = sys.argv[1:4]
class Proxy(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/click.html":
            status, ctype, body = 200, "text/html", open(page, "rb").read()
        else:
            try:
                r = urllib.request.urlopen(base + self.path, timeout=5)
            except urllib.error.HTTPError as e:
                r = e
            status, ctype, body = r.status, r.headers["Content-Type"], r.read()
        self.send_response(status)
        self.send_header("Content-Type", ctype or "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
open(port_file + ".tmp", "w").write(str(srv.server_address[1]))
__import__("os").rename(port_file + ".tmp", port_file)
srv.serve_forever()
EOF
PROXY_PID=$!
trap 'end_pids $LOAD_PID $PROXY_PID' EXIT
retry 50 test -s "$T_TMP/proxy.port"
browser --window-size=1280,800 --dump-dom \
    "http://127.0.0.1:$(cat "$T_TMP/proxy.port")/click.html#$(urlq "$limited")" \
    >"$T_TMP/dom-click-outer.html"
python3 - "$T_TMP/dom-click-outer.html" >"$T_TMP/dom-click.html" <<'EOF'
import html, re, sys
m = re.search(r'<pre id="out">(.*?)</pre>', open(sys.argv[1]).read(), re.S)
print(html.unescape(m.group(1)) if m else "")
EOF
cfacts=$(dom_facts "$T_TMP/dom-click.html")
check "a click on its row in the top table opens the limited tenant's view ($(json_field tview "$cfacts"))" \
    eq "$(json_field tview "$cfacts")" "$limited"
check "with its denials by limit ($(json_field trules "$cfacts"))" \
    python3 -c '
import json, sys
by = dict((r[0], r) for r in json.loads(sys.argv[1])["trules"])
sys.exit(0 if sorted(by) == ["/dash/* \u00b7 default", "/dash/c \u00b7 burst"]
         and all(float(by[k][2]) > 0 for k in by) else 1)' "$cfacts"

# The narrowest window headless Chromium lays out is 500 px: the compact
# layout, with nothing wider than the window.
browser --window-size=500,900 --dump-dom "$BASE_URL/dashboard#1m" \
    >"$T_TMP/dom-narrow.html"
check "at 500 px the page fits the window (no horizontal scrolling)" \
    grep -q '<body[^>]* data-fits="1"' "$T_TMP/dom-narrow.html"

rm -f "$ART/dashboard.png" "$ART/dashboard-phone.png" \
    "$ART/dashboard-tenant.png"
browser --window-size=1280,800 --screenshot="$ART/dashboard.png" \
    "$BASE_URL/dashboard" >/dev/null
browser --window-size=1280,800 --screenshot="$ART/dashboard-tenant.png" \
    "$BASE_URL/dashboard#tenant=$(urlq "$busy")" >/dev/null
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
check "screenshot $ART/dashboard-tenant.png is a 1280x800 PNG" \
    eq "$(png_size "$ART/dashboard-tenant.png")" 1280x800

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
    "tenant_var": [[v.get("type"), v.get("query", {}).get("query")
                    if isinstance(v.get("query"), dict) else v.get("query"),
                    bool(v.get("includeAll")), bool(v.get("multi"))]
                   for v in variables if v.get("name") == "tenant"],
    "tenant_panels": sorted(p.get("title", "") for p in board.get("panels", [])
                            if any('tenant=~"$tenant"' in t.get("expr", "")
                                   for t in p.get("targets", []))),
})
# Every query as a recording rule, Grafana's variables given values, for
# promtool to parse.
with open(sys.argv[3], "w") as f:
    f.write("groups:\n- name: board\n  rules:\n")
    for i, e in enumerate(exprs):
        e = (e.replace("$__rate_interval", "1m").replace("$__range", "1h")
             .replace("$instance", ".*").replace("$tenant", ".*"))
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
check "it shows leases: in flight by tenant, events, settled cost" \
    eq "$(json_field used "$g" | grep -o '"ratelimit_\(tenant_leases_held\|leases_total\|lease_settled_cost_total\)"' | sort | tr '\n' ' ')" \
    '"ratelimit_lease_settled_cost_total" "ratelimit_leases_total" "ratelimit_tenant_leases_held" '
# shellcheck disable=SC2016 # the board's own $tenant
check "it has a \$tenant variable of the tenants /metrics names ($(json_field tenant_var "$g"))" \
    eq "$(json_field tenant_var "$g")" \
    '[["query", "label_values(ratelimit_tenant_checks_total, tenant)", true, true]]'
check "panels of the chosen tenants use it ($(json_field tenant_panels "$g"))" \
    python3 -c 'import json,sys; sys.exit(0 if len(json.loads(sys.argv[1])) >= 2 else 1)' \
    "$(json_field tenant_panels "$g")"
if command -v promtool >/dev/null 2>&1; then
    promtool check rules "$T_TMP/rules.yml" >"$T_TMP/promtool.out" 2>&1
    rc=$?
    check "promtool parses every query (exit $rc)" eq "$rc" 0
    [ "$rc" = 0 ] || head -n 10 "$T_TMP/promtool.out" | sed 's/^/    /'
fi

finish
