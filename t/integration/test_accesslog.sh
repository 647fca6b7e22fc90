#!/bin/sh
# test_accesslog.sh -- the access log, in both formats (json, then logfmt
# after SIGHUP): each request is exactly one line, whatever bytes the
# request sent (CR, LF, other control bytes, Unicode line separators, bytes
# that are not UTF-8) in its route, subject, path, request id, User-Agent or
# X-Forwarded-For; and each line names the route checked, the client's
# address, the rule and limit that denied and the time to wait
# (retry_after_ms).  Requests go straight to the pool's socket, so that no
# web server cleans them first.
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

AL=$((PORT + 205))

serve_dir ratelimit-accesslog
private_app al "$AL" "access_log=$D/al-access.log" "access_log_format=json" \
    "log=$D/al-error.log" "workers=2" ||
    fail "a pool with an access log starts" "see $D"
al_master=$APP_PID
export ROOT

tenant=$(uniq_name al)
new_tenant "$tenant"
key=$(new_key "$tenant")
new_sw_rule "$tenant" '/al/*' 2 3600
rule=$(ctl rule list "$tenant" --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["rules"][0]["id"])')

# al.py send ADDRESS KEY PHASE: five requests of hostile bytes (checks, and
#   an authorizer request as al4); prints their
#   statuses as JSON ({"al1-PHASE": 200, ...}).
# al.py lines FILE OFFSET FORMAT PHASE: reads FILE from byte OFFSET and
#   prints what the checks below need, as one JSON object.
cat >"$D/al.py" <<'EOF'
import json, os, re, sys

sys.path.insert(0, os.path.join(os.environ["ROOT"], "t", "lib"))
import fcgi_client as fc

# A route with CR/LF and a forged field, a line separator, NEL, ESC, DEL,
# a quote and a backslash.
ROUTE = "/al/x\r\nforged=1 status=200\u2028\u0085\x1b[31m\x7f\"q\\"
AUTHZ_URI = b"/al/y\r\nforged=1\x1b\x85"


def check(addr, key, rid, body, uri=b"/v1/check"):
    params = fc.http_params("POST", "/v1/check", content_length=len(body),
                            extra={"HTTP_X_API_KEY": key,
                                   "CONTENT_TYPE": "application/json"})
    params["REMOTE_ADDR"] = "192.0.2.7"
    params["REQUEST_URI"] = params["SCRIPT_NAME"] = uri
    params["HTTP_X_REQUEST_ID"] = rid.encode() + b"\r\nrequest_id=forged\x01"
    params["HTTP_USER_AGENT"] = b"ua\r\nX-Forged: 1\x01\x85\xe2\x80\xa8"
    params["HTTP_X_FORWARDED_FOR"] = b"198.51.100.1\r\nforged"
    return fc.request(addr, params, body)["status"]


def authz(addr, key, rid, uri):
    params = fc.http_params("GET", "/", extra={"HTTP_X_API_KEY": key})
    params["REMOTE_ADDR"] = "192.0.2.7"
    params["REQUEST_URI"] = params["SCRIPT_NAME"] = uri
    params["HTTP_X_REQUEST_ID"] = rid.encode() + b"\r\nrequest_id=forged\x01"
    params["HTTP_USER_AGENT"] = b"ua\r\nX-Forged: 1\x01\x85"
    s = fc.connect(addr)
    try:
        s.sendall(fc.encode_request(params, role=fc.AUTHORIZER))
        return fc.read_response(fc.RecordReader(s), 1)["status"]
    finally:
        s.close()


def send(addr, key, phase):
    subject = "s\r\n\x01-" + phase
    body = json.dumps({"route": ROUTE, "subject": subject}).encode()
    out = {}
    for i in (1, 2, 3):
        out["al%d-%s" % (i, phase)] = check(addr, key, "al%d-%s" % (i, phase),
                                            body)
    out["al4-" + phase] = authz(addr, key, "al4-" + phase, AUTHZ_URI)
    raw = b'{"route":"/al/\xff\xfe\x85y","subject":"' + phase.encode() + b'"}'
    out["al5-" + phase] = check(addr, key, "al5-" + phase, raw)
    print(json.dumps(out))


def logfmt(line):
    """The fields of a logfmt line, unescaped; raises ValueError."""
    out, i = {}, 0
    while i < len(line):
        m = re.compile(r"([a-z_]+)=").match(line, i)
        if m is None:
            raise ValueError("no key at %d" % i)
        k, i = m.group(1), m.end()
        if i < len(line) and line[i] == '"':
            v, i = [], i + 1
            while True:
                c = line[i]
                if c == '"':
                    i += 1
                    break
                if c == "\\":
                    e = line[i + 1]
                    if e == "x":
                        v.append(chr(int(line[i + 2:i + 4], 16)))
                        i += 4
                    elif e == "u":
                        v.append(chr(int(line[i + 2:i + 6], 16)))
                        i += 6
                    else:
                        v.append({"n": "\n", "r": "\r", "t": "\t", "\\": "\\",
                                  '"': '"'}[e])
                        i += 2
                    continue
                v.append(c)
                i += 1
            out[k] = "".join(v)
        else:
            j = line.find(" ", i)
            j = len(line) if j < 0 else j
            out[k], i = line[i:j], j
        if i < len(line):
            if line[i] != " ":
                raise ValueError("no blank at %d" % i)
            i += 1
    return out


def lines(path, offset, fmt, phase):
    data = open(path, "rb").read()[int(offset):]
    raw = data.split(b"\n")
    tail = raw.pop()
    text = data.decode("utf-8", "replace")
    res = {"complete": tail == b"", "lines": len(raw),
           "unicode_lines": len(text.splitlines()),
           "utf8": True, "unparsed": 0, "mine": 0}
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        res["utf8"] = False
    rec = {}
    for b in raw:
        try:
            s = b.decode("utf-8")
            d = json.loads(s) if fmt == "json" else logfmt(s)
        except (ValueError, KeyError, IndexError):
            res["unparsed"] += 1
            continue
        rid = d.get("request_id", "")
        m = re.match(r"(al[0-9]-[a-z]+)\r\nrequest_id=forged\x01$", rid)
        if m is None or not m.group(1).endswith("-" + phase):
            continue
        res["mine"] += 1
        rec[m.group(1)[:3]] = d
    for k, d in rec.items():
        res[k] = {f: d.get(f) for f in ("route", "client", "rule", "limit",
                                        "retry_after_ms", "decision",
                                        "status", "path")}
        res[k]["route_exact"] = d.get("route") == ROUTE
        res[k]["path_exact"] = d.get("path") == AUTHZ_URI.decode("latin-1")
    print(json.dumps(res))


if sys.argv[1] == "send":
    send(sys.argv[2], sys.argv[3], sys.argv[4])
else:
    lines(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
EOF

# phase FORMAT: the five requests, then the checks of their lines.
phase() {
    ph_off=$(stat -c %s "$D/al-access.log" 2>/dev/null || echo 0)
    ph_st=$(python3 "$D/al.py" send "unix:$D/al.sock" "$key" "$1")
    check "$1: statuses (2 allowed, then denied; an authorizer request)" \
        eq "$(jq_py "[d['al1-$1'], d['al2-$1'], d['al3-$1'], d['al4-$1']]" "$ph_st")" \
        "[200, 200, 429, 200]"
    retry 20 sh -c "[ \$(tail -c +$((ph_off + 1)) '$D/al-access.log' | grep -c al5-$1) -ge 1 ]"
    ph_l=$(python3 "$D/al.py" lines "$D/al-access.log" "$ph_off" "$1" "$1")
    # The lines as read, shown when a check of this phase fails (printf:
    # the test's own echo would expand their backslashes).
    ph_fail=$FAILED
    check "$1: five requests, five lines, each read whole" \
        eq "$(jq_py "[d['lines'], d['unicode_lines'], d['mine'], d['unparsed'], d['complete']]" "$ph_l")" \
        "[5, 5, 5, 0, true]"
    check "$1: the lines are UTF-8 text" eq "$(jq_py "d['utf8']" "$ph_l")" true
    check "$1: route, escaped and read back exactly" \
        eq "$(jq_py "[d['al1']['route_exact'], d['al3']['route_exact']]" "$ph_l")" \
        "[true, true]"
    check "$1: an authorizer request's path and route, escaped and read back" \
        eq "$(jq_py "[d['al4']['path_exact'], d['al4']['route'] not in ('', None), d['al4']['decision']]" "$ph_l")" \
        '[true, true, "allowed"]'
    check "$1: the client's address" \
        eq "$(jq_py "[d[k]['client'] for k in ('al1', 'al3', 'al4')]" "$ph_l")" \
        '["192.0.2.7", "192.0.2.7", "192.0.2.7"]'
    check "$1: the denial names its rule, limit and time to wait" \
        eq "$(jq_py "[d['al3']['decision'], str(d['al3']['status']), str(d['al3']['rule']), d['al3']['limit'] not in ('', None), int(d['al3']['retry_after_ms']) > 0]" "$ph_l")" \
        "[\"denied\", \"429\", \"$rule\", true, true]"
    check "$1: an allowed check waits 0 ms" \
        eq "$(jq_py "[d['al1']['decision'], str(d['al1']['retry_after_ms'])]" "$ph_l")" \
        '["allowed", "0"]'
    if [ "$FAILED" != "$ph_fail" ]; then
        printf '    lines read: %s\n' "$ph_l"
    fi
}

avoid_edge 3600 15
phase json

sed -i 's/^access_log_format = .*/access_log_format = "logfmt"/' "$D/al.conf"
kill -HUP "$al_master"
sleep 1.5
phase logfmt

check "no worker crashed" \
    not_contains "$(cat "$D/al-error.log")" "crash"
stop_private
finish
