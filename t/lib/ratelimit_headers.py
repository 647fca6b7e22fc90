#!/usr/bin/env python3
"""Checks the IETF RateLimit headers of one response against its body.

Usage: ratelimit_headers.py T_DIR HEADERS_FILE BODY [NAME=Q/W ...]

The RateLimit and RateLimit-Policy fields must parse as Structured Field
Lists (t/lib/sf_parse.py, found in T_DIR) and agree with the JSON body: every
member is an sf-string item; policies carry q (and w), RateLimit members r
(and t), all non-negative integers; names are unique and the same, in the
same order, in both fields and in the body's policies (one member when the
body has no policies); r is the body's remaining; q is the body's limit,
for every algorithm (one definition of the quota), and X-RateLimit-Limit
is the q of a member whose r is X-RateLimit-Remaining; NAME=Q/W pins the
expected q and w.  On a 429, every denying limit's t is its retry_after and
Retry-After is the largest of them.  When SF_NPM_MODULES names a
node_modules directory holding the npm package structured-headers, both
fields are parsed by it as well (t/lib/sf_check.cjs) and must parse the same.
Prints what is wrong and exits 1, or prints nothing and exits 0.
"""
import json, os, subprocess, sys
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1])
from sf_parse import parse_list, SFError, Token, InnerList

head_file, body = sys.argv[2], sys.argv[3]
expect = dict(a.split("=", 1) for a in sys.argv[4:])
status, fields = None, {}
for line in open(head_file, encoding="latin-1").read().split("\n"):
    line = line.rstrip("\r")
    if line.startswith("HTTP/"):
        status, fields = int(line.split()[1]), {}
    elif ":" in line:
        name, value = line.split(":", 1)
        fields.setdefault(name.strip().lower(), []).append(value.strip())

def fail(msg):
    print(msg)
    sys.exit(1)

def members(name, required, optional):
    if name not in fields:
        fail("no %s field" % name)
    try:
        got = parse_list(", ".join(fields[name]))
    except SFError as e:
        fail("%s does not parse: %s" % (name, e))
    names = []
    for value, params in got:
        if isinstance(value, (Token, InnerList)) or not isinstance(value, str):
            fail("%s: member %r is not an sf-string" % (name, value))
        for p in required:
            if p not in params:
                fail("%s: %r lacks %s" % (name, value, p))
        for p in required + optional:
            v = params.get(p, 0)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                fail("%s: %r has %s=%r" % (name, value, p, v))
        names.append(value)
    if len(set(names)) != len(names):
        fail("%s: names are not unique: %r" % (name, names))
    return got

policy = members("ratelimit-policy", ["q"], ["w"])
state = members("ratelimit", ["r"], ["t"])

def bare(v):
    if isinstance(v, bool):
        return ["b", v]
    if isinstance(v, (int, float)):
        return ["n", v]
    if isinstance(v, Token):
        return ["t", str(v)]
    if isinstance(v, str):
        return ["s", v]
    return ["?", repr(v)]

npm = os.environ.get("SF_NPM_MODULES")
if npm:
    values = {n: ", ".join(fields[n]) for n in ("ratelimit-policy",
                                                 "ratelimit")}
    out = subprocess.run(
        ["node", os.path.join(sys.argv[1], "sf_check.cjs"), npm] +
        ["%s=%s" % kv for kv in values.items()],
        capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        fail("node t/lib/sf_check.cjs failed: %s" % out.stderr.strip()[-300:])
    theirs = json.loads(out.stdout)
    for name, ours in (("ratelimit-policy", policy), ("ratelimit", state)):
        mine = [[bare(v), {k: bare(x) for k, x in p.items()}]
                for v, p in ours]
        if theirs[name] != mine:
            fail("%s: structured-headers (npm) reads %r, we read %r" %
                 (name, theirs[name], mine))
doc = json.loads(body)
pols = doc.get("policies")
if pols is None:
    pols = [dict(doc, name=policy[0][0] if policy else "?")]
names = [p["name"] for p in pols]
if [m[0] for m in policy] != names or [m[0] for m in state] != names:
    fail("names differ: policy %r, RateLimit %r, body %r" %
         ([m[0] for m in policy], [m[0] for m in state], names))
retry = []
for (pname, pp), (_, sp), p in zip(policy, state, pols):
    if sp["r"] != p["remaining"]:
        fail("%s: r=%d but remaining %d" % (pname, sp["r"], p["remaining"]))
    if pp["q"] != p["limit"]:
        fail("%s: q=%d but limit %d" % (pname, pp["q"], p["limit"]))
    if pname in expect:
        q, w = (int(x) for x in expect[pname].split("/"))
        if (pp["q"], pp.get("w")) != (q, w):
            fail("%s: q=%d;w=%s, expected q=%d;w=%d" %
                 (pname, pp["q"], pp.get("w"), q, w))
    if not p["allowed"] and not p.get("shadow"):
        if sp.get("t") != p["retry_after"]:
            fail("%s: t=%s but retry_after %d" %
                 (pname, sp.get("t"), p["retry_after"]))
        retry.append(sp["t"])
if status == 429:
    ra = (fields.get("retry-after") or ["<absent>"])[-1]
    if not retry or ra != str(max(retry)):
        fail("Retry-After %s, denying limits' t %r" % (ra, retry))
    if sorted(doc.get("denied_by", [])) != sorted(
            p["name"] for p in pols
            if not p["allowed"] and not p.get("shadow")):
        fail("denied_by %r" % doc.get("denied_by"))
xl = (fields.get("x-ratelimit-limit") or [None])[-1]
xr = (fields.get("x-ratelimit-remaining") or [None])[-1]
if xl is not None and not any(
        str(pp["q"]) == xl and str(sp["r"]) == xr
        for (_, pp), (_, sp) in zip(policy, state)):
    fail("X-RateLimit-Limit %s / Remaining %s match no member's q and r" %
         (xl, xr))
