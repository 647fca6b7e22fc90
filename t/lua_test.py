#!/usr/bin/env python3
"""Tests for the Redis check script, against a real redis-server.

The script is the one the Makefile builds as build/check_test.lua (or the
file $LUA_SCRIPT names): lua/*.lua concatenated in the order of the
Makefile's LUA, as the service embeds them, but with lua/clock_test.lua in
place of lua/clock.lua. This program starts a private, throw-away
redis-server on 127.0.0.1, port $LUA_TEST_REDIS_PORT (16399 by default),
loads the script with SCRIPT LOAD and runs it with EVALSHA over one
connection (scripts/resp.py). Tests that need exact times pass that
clock's test hook, a last argument "__now_us=<microseconds>" that replaces
Redis TIME. One case loads the script embedded, build/check.lua (or
$LUA_PRODUCTION_SCRIPT), and checks that it refuses the hook.

A reply of the script is read into named fields (see check.lua): allowed,
now_ms, and per limit allowed, limit, remaining, reset_ms, retry_after_ms.
Expectations name the fields they check, and a failure says which field
differed, with what was got and what was wanted.

The cases are listed once, in CASES at the end. Each prints "ok - NAME" or
"not ok - NAME: detail"; the last line is "N passed, M failed", and the
exit status is non-zero if any case failed (1), or if the server could not
be started ("Bail out!", 1).

Usage, from anywhere: python3 t/lua_test.py (t/lua_test.sh builds the two
scripts first, then runs this).
"""

import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import namedtuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import resp  # noqa: E402 (the project's RESP client, scripts/resp.py)

# The tests' script and the script embedded, as the Makefile builds them.
LUA_SCRIPT = os.environ.get("LUA_SCRIPT") or \
    os.path.join(ROOT, "build", "check_test.lua")
LUA_PRODUCTION_SCRIPT = os.environ.get("LUA_PRODUCTION_SCRIPT") or \
    os.path.join(ROOT, "build", "check.lua")

# N is a time well inside a minute (2028-02-29 00:00:20 UTC) in
# microseconds; NMS is the same time in milliseconds.
N = 1835395220000000
NMS = 1835395220000

# Set by main(): the connection, the SHA1 of the tests' script and that of
# the script embedded.
redis = None
sha = None
production_sha = None
# Expectations evaluated, over all cases.
checks = 0


# --- Replies -----------------------------------------------------------------

Limit = namedtuple("Limit", "allowed limit remaining reset_ms retry_after_ms")
LIMIT_FIELDS = Limit._fields


class Failed(Exception):
    """An expectation that did not hold; the message is the detail."""


class Reply:
    """A reply of the check script, read into named fields."""

    def __init__(self, allowed, now_ms, limits):
        self.allowed = allowed
        self.now_ms = now_ms
        self.limits = list(limits)

    @classmethod
    def parse(cls, raw):
        raw = unpacked(raw)
        if isinstance(raw, resp.ReplyError):
            raise Failed("error reply '%s'" % raw)
        if not isinstance(raw, list) or len(raw) < 2 or \
                (len(raw) - 2) % 5 != 0 or \
                not all(isinstance(v, int) for v in raw):
            raise Failed("not a reply of the script: %r" % (raw,))
        return cls(raw[0], raw[1], [Limit(*raw[i:i + 5])
                                    for i in range(2, len(raw), 5)])

    def differences(self, want):
        """The fields in which self differs from want, as text."""
        out = []
        for name in ("allowed", "now_ms"):
            if getattr(self, name) != getattr(want, name):
                out.append("%s: got %s, want %s" % (
                    name, getattr(self, name), getattr(want, name)))
        if len(self.limits) != len(want.limits):
            out.append("number of limits: got %d, want %d" % (
                len(self.limits), len(want.limits)))
        for i, (g, w) in enumerate(zip(self.limits, want.limits)):
            for name in LIMIT_FIELDS:
                if getattr(g, name) != getattr(w, name):
                    out.append("limit %d %s: got %s, want %s" % (
                        i + 1, name, getattr(g, name), getattr(w, name)))
        return out

    def __len__(self):
        """The number of integers in the reply."""
        return 2 + 5 * len(self.limits)


def unpacked(raw):
    """A reply of the check script, a string of big-endian doubles (see
    lua/check.lua), as the list of integers they hold, truncated toward
    zero as the service reads them; any other reply as it is."""
    if isinstance(raw, bytes) and len(raw) % 8 == 0:
        return [int(v) for v in struct.unpack(">%dd" % (len(raw) // 8), raw)]
    return raw


def lim(*, allowed, limit, remaining, reset_ms, retry_after_ms):
    """The expected fields of one limit in a reply."""
    return Limit(allowed, limit, remaining, reset_ms, retry_after_ms)


def reply(*, allowed, now_ms, limits):
    """An expected reply."""
    return Reply(allowed, now_ms, limits)


# --- Limits (the five arguments of one limit) -------------------------------

def tb(capacity, rate, shadow=0):
    return ["token_bucket", str(capacity), str(rate), "0", str(shadow)]


def sw(limit, window_s, shadow=0):
    return ["sliding_window", str(limit), str(window_s), "0", str(shadow)]


def gcra(limit, period_us, burst, shadow=0):
    return ["gcra", str(limit), str(period_us), str(burst), str(shadow)]


def fw(limit, unit, shadow=0):
    return ["fixed_window", str(limit), unit, "0", str(shadow)]


TB5 = [tb(5, 20)]
SW3 = [sw(3, 2)]
# 10 per second is one every T = 100000 µs; burst 2 lets 3 through at once.
G10B2 = [gcra(10, 1000000, 2)]
# A reply slot KEYS[n + 1] (with the call's id as the last argument) makes
# a call replayable (see "Sent twice").
FW2 = [fw(2, "minute")]


# --- Calling the script ------------------------------------------------------

def evalsha(keys, argv, script=None):
    """The EVALSHA command of the tests' script, or of the script whose SHA1
    is script."""
    return ["EVALSHA", script or sha, str(len(keys))] + list(keys) + \
        [str(a) for a in argv]


def check_argv(limits, cost, peek, now, n, rid=None):
    argv = [str(cost), str(peek), str(len(limits) if n is None else n)]
    for spec in limits:
        argv.extend(spec)
    if rid is not None:
        argv.append(rid)
    if now is not None:
        argv.append("__now_us=%d" % now)
    return argv


def check(keys, limits, cost=1, peek=0, now=None, n=None, rid=None):
    """Runs the script once: KEYS keys, the given cost and peek flag, the
    limits (lists of five arguments), the call id rid (with a reply slot)
    and, if now is given, the test hook.  Returns the Reply; an error reply
    fails the case."""
    argv = check_argv(limits, cost, peek, now, n, rid)
    return Reply.parse(redis.pipeline([evalsha(keys, argv)])[0])


def check_times(count, keys, limits, cost=1, peek=0, now=None):
    """Runs the same call count times, pipelined on one connection, so that
    the calls are not spread out; returns the Replies in order."""
    cmd = evalsha(keys, check_argv(limits, cost, peek, now, None))
    return [Reply.parse(r) for r in redis.pipeline([cmd] * count)]


def cmd(*args):
    """Any other Redis command; strings come back decoded."""
    r = redis.command(*args)
    if isinstance(r, bytes):
        return r.decode()
    if isinstance(r, list):
        return [v.decode() if isinstance(v, bytes) else v for v in r]
    return r


def slot(key):
    """A reply slot as "id n n n ...": the id, then the stored reply's
    numbers (big-endian doubles) as integers; None if there is none."""
    raw = redis.command("GET", key)
    if raw is None:
        return None
    rid, _, packed = raw.partition(b" ")
    if len(packed) % 8 != 0:
        return "bad length %d" % len(packed)
    values = struct.unpack(">%dd" % (len(packed) // 8), packed)
    return " ".join([rid.decode()] + ["%d" % v for v in values])


def state(key):
    """The state at key as an ordered dict of strings ({} if none): a
    hash's fields, or a token bucket's 24-byte string (three big-endian
    doubles: tokens, ts, exp) as the fields "tokens" and "ts" in the text
    the hash of earlier versions held ("%.17g" and a whole number); exp,
    the key's expiry, is checked against its PTTL by expect_pttl."""
    if cmd("TYPE", key) == "string":
        raw = redis.command("GET", key)
        if len(raw) != 24:
            return {"bad length": str(len(raw))}
        tokens, ts, _ = struct.unpack(">ddd", raw)
        return {"tokens": "%.17g" % tokens, "ts": "%.0f" % ts}
    flat = cmd("HGETALL", key)
    return dict(zip(flat[0::2], flat[1::2]))


def time_ms(sec, usec):
    return int(sec) * 1000 + int(usec) // 1000


def redis_now_ms():
    sec, usec = cmd("TIME")
    return time_ms(sec, usec)


def sleep_until_window_offset(window_ms, offset_ms):
    """Sleeps until the next moment, by Redis time, that is offset_ms into
    a window of window_ms."""
    d = offset_ms - redis_now_ms() % window_ms
    if d <= 0:
        d += window_ms
    time.sleep(d / 1000)


def calc(x):
    """A bound computed as the shell version did: to 3 decimals."""
    return round(x, 3)


# --- Expectations ------------------------------------------------------------
#
# Each evaluates one expectation and raises Failed if it does not hold; a
# case stops at its first failure.

def expect_eq(what, got, want):
    global checks
    checks += 1
    if got != want:
        raise Failed("%s: got %r, want %r" % (what, got, want))


def expect_reply(what, got, want):
    """Every field of the reply got is as in want."""
    global checks
    checks += 1
    diff = got.differences(want)
    if diff:
        raise Failed("%s: %s" % (what, "; ".join(diff)))


NUMBER = re.compile(r"-?[0-9]+(\.[0-9]*)?")


def expect_range(what, got, low, high):
    """low <= got <= high; got is a number or its decimal text."""
    global checks
    checks += 1
    if not NUMBER.fullmatch(str(got)) or not low <= float(got) <= high:
        raise Failed("%s: got %r, want %s..%s" % (what, got, low, high))


def expect_state(what, key, want):
    """The hash at key holds exactly the fields of want, in that order
    (values compared as text)."""
    global checks
    checks += 1
    got = state(key)
    want = {k: str(v) for k, v in want.items()}
    if list(got.items()) != list(want.items()):
        raise Failed("%s (%s): got %s, want %s" % (
            what, key, fmt_hash(got), fmt_hash(want)))


def fmt_hash(h):
    return "{%s}" % " ".join("%s=%s" % kv for kv in h.items()) if h else "{}"


def expect_pttl(key, ttl_ms, t0_ms):
    """key was given a TTL of ttl_ms at Redis time t0_ms or later, so its
    PTTL is at most ttl_ms, and at least ttl_ms less the time since t0_ms.
    TIME is read right after PTTL, on the same connection, so that a busy
    machine cannot make this fail."""
    pttl, (sec, usec) = redis.pipeline([["PTTL", key], ["TIME"]])
    ms = time_ms(sec, usec)
    expect_range("PTTL of %s" % key, pttl, ttl_ms - (ms - t0_ms) - 1, ttl_ms)


def expect_error(what, message, keys, argv):
    """The script answers with the error "ERR ratelimit: " followed by text
    containing message."""
    global checks
    checks += 1
    got = redis.pipeline([evalsha(keys, argv)])[0]
    text = str(got) if isinstance(got, resp.ReplyError) else None
    if text is None or not text.startswith("ERR ratelimit: ") or \
            message not in text[len("ERR ratelimit: "):]:
        raise Failed("%s: got %r, want error 'ERR ratelimit: ...%s...'" % (
            what, text if text is not None else got, message))


# --- Token bucket ------------------------------------------------------------

def test_tb_allows_capacity():
    out = check_times(6, ["tb:count"], TB5)
    for i, want in enumerate([4, 3, 2, 1, 0], 1):
        r = out[i - 1]
        expect_eq("call %d allowed" % i, r.allowed, 1)
        expect_eq("call %d limit 1 allowed" % i, r.limits[0].allowed, 1)
        expect_eq("call %d limit 1 limit" % i, r.limits[0].limit, 5)
        expect_eq("call %d limit 1 remaining" % i, r.limits[0].remaining,
                  want)
        expect_eq("call %d limit 1 retry_after_ms" % i,
                  r.limits[0].retry_after_ms, 0)
    r = out[5]
    expect_eq("call 6 allowed", r.allowed, 0)
    expect_eq("call 6 limit 1 allowed", r.limits[0].allowed, 0)
    expect_eq("call 6 limit 1 remaining", r.limits[0].remaining, 0)
    expect_range("call 6 limit 1 retry_after_ms", r.limits[0].retry_after_ms,
                 1, 50)
    # Empty bucket at 20/s: full again in 250 ms.
    expect_range("call 6 limit 1 reset_ms", r.limits[0].reset_ms, 240, 250)


def test_tb_refill():
    r = check_times(6, ["tb:refill"], TB5)[5]
    t6 = r.now_ms
    expect_eq("6th call allowed", r.allowed, 0)
    retry = r.limits[0].retry_after_ms
    expect_range("retry_after_ms", retry, 1, 50)
    # Waiting retry_after_ms (plus the 3 ms the shell version gave
    # redis-cli to start) is enough.
    time.sleep((retry + 3) / 1000)
    r = check(["tb:refill"], TB5)
    expect_eq("allowed after retry_after_ms", r.allowed, 1)
    # A busy machine may sleep longer: one token per 50 ms that passed by
    # Redis time is back, less the one just taken (the bound allows for the
    # times being whole milliseconds).
    expect_range("remaining after refill", r.limits[0].remaining, 0,
                 (r.now_ms - t6) // 50)


def test_tb_refill_cap():
    out = check_times(5, ["tb:cap"], TB5)
    expect_eq("5th call remaining", out[4].limits[0].remaining, 0)
    # A full refill takes 250 ms; uncapped, 400 ms would give 8 tokens.
    time.sleep(0.4)
    r = check(["tb:cap"], TB5)
    expect_eq("allowed", r.allowed, 1)
    expect_eq("remaining", r.limits[0].remaining, 4)
    expect_range("reset_ms", r.limits[0].reset_ms, 49, 50)
    expect_range("stored tokens", state("tb:cap")["tokens"], 3.99, 4.1)


def test_tb_ttl():
    t0 = redis_now_ms()
    r = check(["tb:ttl"], TB5)
    expect_eq("allowed", r.allowed, 1)
    # Until it is full again, as a new bucket would be: 1 / 20 s = 50 ms
    # (not the 250 ms of a refill from empty), plus 1 s, plus the second
    # that lets the next charges keep the TTL.
    expect_eq("reset_ms", r.limits[0].reset_ms, 50)
    expect_pttl("tb:ttl", 2050, t0)
    # The bucket stores when its key expires, as the TTL says.
    _, _, exp_ms = struct.unpack(">ddd", redis.command("GET", "tb:ttl"))
    pttl, (sec, usec) = redis.pipeline([["PTTL", "tb:ttl"], ["TIME"]])
    expect_range("stored expiry against PTTL",
                 exp_ms - time_ms(sec, usec), pttl - 2, pttl + 2)
    # Three more charges need the key 100, 150 and 200 ms + 1 s from now:
    # the TTL set covers them and is kept (a new one would be up to 2200).
    for k in range(3):
        r = check(["tb:ttl"], TB5)
    expect_range("reset_ms after four", r.limits[0].reset_ms, 150, 200)
    expect_pttl("tb:ttl", 2050, t0)


def test_tb_cost_above_capacity():
    check(["tb:big"], TB5)
    before = state("tb:big")
    r = check(["tb:big"], TB5, cost=6)
    expect_eq("allowed", r.allowed, 0)
    expect_eq("limit 1 allowed", r.limits[0].allowed, 0)
    expect_eq("retry_after_ms", r.limits[0].retry_after_ms, -1)
    expect_state("state", "tb:big", before)
    r = check(["tb:big-new"], TB5, cost=6)
    expect_eq("retry_after_ms on a new key", r.limits[0].retry_after_ms, -1)
    expect_eq("new key created", cmd("EXISTS", "tb:big-new"), 0)


def test_tb_denial_charges_nothing():
    # At 0.001 tokens/s nothing refills noticeably during the test.
    limits = [tb(2, "0.001")]
    out = check_times(2, ["tb:deny"], limits)
    expect_eq("2nd call remaining", out[1].limits[0].remaining, 0)
    before = state("tb:deny")
    r = check(["tb:deny"], limits)
    expect_eq("allowed", r.allowed, 0)
    expect_state("state", "tb:deny", before)
    # One token at 0.001/s takes 1000 s.
    expect_range("retry_after_ms", r.limits[0].retry_after_ms,
                 999000, 1000000)


def test_peek_writes_nothing():
    slow = [tb(5, "0.001")]
    r = check(["peek:tb"], slow, peek=1)
    expect_eq("peek allowed", r.allowed, 1)
    expect_eq("peek remaining", r.limits[0].remaining, 4)
    expect_eq("key after peek on a new key", cmd("EXISTS", "peek:tb"), 0)
    r = check(["peek:sw"], [sw(3, 10)], peek=1)
    expect_eq("window peek remaining", r.limits[0].remaining, 2)
    expect_eq("window key after peek", cmd("EXISTS", "peek:sw"), 0)

    check(["peek:tb"], slow)
    before = state("peek:tb")
    r = check(["peek:tb"], slow, peek=1)
    expect_eq("peek on existing key remaining", r.limits[0].remaining, 3)
    expect_state("state after peek", "peek:tb", before)
    # A peek that would be denied writes nothing either.
    r = check(["peek:tb"], slow, cost=5, peek=1)
    expect_eq("denied peek allowed", r.allowed, 0)
    expect_state("state after denied peek", "peek:tb", before)


def test_tb_exact():
    # Empty at N, a 20/s bucket has one token again 50 ms later, not 1 µs
    # before.
    out = check_times(6, ["tb:exact"], TB5, now=N)
    expect_reply("5th call", out[4], reply(allowed=1, now_ms=NMS, limits=[
        lim(allowed=1, limit=5, remaining=0, reset_ms=250,
            retry_after_ms=0)]))
    expect_reply("6th call", out[5], reply(allowed=0, now_ms=NMS, limits=[
        lim(allowed=0, limit=5, remaining=0, reset_ms=250,
            retry_after_ms=50)]))
    r = check(["tb:exact"], TB5, now=N + 49999)
    expect_reply("1 µs early", r, reply(allowed=0, now_ms=NMS + 49, limits=[
        lim(allowed=0, limit=5, remaining=0, reset_ms=201,
            retry_after_ms=1)]))
    r = check(["tb:exact"], TB5, now=N + 50000)
    expect_reply("on time", r, reply(allowed=1, now_ms=NMS + 50, limits=[
        lim(allowed=1, limit=5, remaining=0, reset_ms=250,
            retry_after_ms=0)]))
    expect_state("stored", "tb:exact", {"tokens": 0, "ts": N + 50000})


# --- Sliding window ----------------------------------------------------------

def test_sw_limit():
    # 3 allowed and 1 denied call early in a 2 s window. The retry of the
    # 4th waits for the next window, until the 3 counted weigh 2 or less:
    # (2000 - offset) + 2000 / 3 ms.
    sleep_until_window_offset(2000, 100)
    out = check_times(4, ["sw:a"], SW3)
    for i, want in enumerate([2, 1, 0], 1):
        r = out[i - 1]
        expect_eq("call %d allowed" % i, r.allowed, 1)
        expect_eq("call %d limit" % i, r.limits[0].limit, 3)
        expect_eq("call %d remaining" % i, r.limits[0].remaining, want)
    r = out[3]
    expect_eq("call 4 allowed", r.allowed, 0)
    expect_eq("call 4 remaining", r.limits[0].remaining, 0)
    offset = r.now_ms % 2000
    expect_range("call 4 offset in window", offset, 0, 1000)
    expect_range("call 4 retry_after_ms", r.limits[0].retry_after_ms,
                 calc(2000 - offset + 2000 / 3 - 1),
                 calc(2000 - offset + 2000 / 3 + 1))
    # Counted in this window, weighs until the end of the next one.
    expect_range("call 4 reset_ms", r.limits[0].reset_ms,
                 4000 - offset - 1, 4000 - offset + 1)
    # Until the end of the next window plus one second, from the 1st call
    # (which began the window; the others keep its TTL).
    expect_pttl("sw:a", 5000 - out[0].now_ms % 2000, out[0].now_ms)


def test_sw_rollover():
    # Right after the rollover the 3 requests of the previous window weigh
    # almost fully: nothing passes until they weigh 2, at a third of the
    # window.
    sleep_until_window_offset(2000, 100)
    r = check(["sw:a"], SW3)
    offset = r.now_ms % 2000
    expect_range("offset in window", offset, 0, 600)
    expect_eq("allowed", r.allowed, 0)
    expect_eq("remaining", r.limits[0].remaining, 0)
    expect_range("retry_after_ms", r.limits[0].retry_after_ms,
                 calc(2000 / 3 - offset - 1), calc(2000 / 3 - offset + 1))
    # Only the previous window counts, until the end of this one.
    expect_range("reset_ms", r.limits[0].reset_ms,
                 2000 - offset - 1, 2000 - offset + 1)
    expect_eq("stored prev", cmd("HGET", "sw:a", "prev"), "0")
    expect_eq("stored cur", cmd("HGET", "sw:a", "cur"), "3")


def test_sw_weighting():
    # Halfway through, the previous 3 weigh 1.5: one more passes
    # (2.5 <= 3), a second does not (3.5 > 3) until they weigh 1, at two
    # thirds of the window.
    sleep_until_window_offset(2000, 1000)
    out = check_times(2, ["sw:a"], SW3)
    r = out[0]
    offset = r.now_ms % 2000
    expect_range("offset in window", offset, 800, 1200)
    expect_eq("1st allowed", r.allowed, 1)
    expect_eq("1st remaining", r.limits[0].remaining, 0)
    r = out[1]
    expect_eq("2nd allowed", r.allowed, 0)
    offset = r.now_ms % 2000
    retry = r.limits[0].retry_after_ms
    expect_range("2nd retry_after_ms", retry,
                 calc(4000 / 3 - offset - 1), calc(4000 / 3 - offset + 1))
    expect_eq("stored prev", cmd("HGET", "sw:a", "prev"), "3")
    expect_eq("stored cur", cmd("HGET", "sw:a", "cur"), "1")
    time.sleep((retry + 3) / 1000)
    r = check(["sw:a"], SW3)
    expect_eq("allowed after retry_after_ms", r.allowed, 1)


def test_sw_cost_above_limit():
    r = check(["sw:big"], SW3, cost=4)
    expect_eq("allowed", r.allowed, 0)
    expect_eq("retry_after_ms", r.limits[0].retry_after_ms, -1)
    expect_eq("key created", cmd("EXISTS", "sw:big"), 0)


def test_sw_exact():
    # Three requests in the last microsecond of a 2 s window (N is at a
    # window start) weigh 3 at the start of the next, and 2 (so one more
    # passes) once a third of it is over: after 666666.67 µs.
    out = check_times(4, ["sw:exact"], SW3, now=N - 1)
    expect_reply("3rd call", out[2], reply(allowed=1, now_ms=NMS - 1, limits=[
        lim(allowed=1, limit=3, remaining=0, reset_ms=2001,
            retry_after_ms=0)]))
    expect_reply("4th call", out[3], reply(allowed=0, now_ms=NMS - 1, limits=[
        lim(allowed=0, limit=3, remaining=0, reset_ms=2001,
            retry_after_ms=667)]))
    r = check(["sw:exact"], SW3, now=N)
    expect_reply("at the window start", r, reply(
        allowed=0, now_ms=NMS, limits=[
            lim(allowed=0, limit=3, remaining=0, reset_ms=2000,
                retry_after_ms=667)]))
    r = check(["sw:exact"], SW3, now=N + 666666)
    expect_reply("1 µs early", r, reply(allowed=0, now_ms=NMS + 666, limits=[
        lim(allowed=0, limit=3, remaining=0, reset_ms=1334,
            retry_after_ms=1)]))
    r = check(["sw:exact"], SW3, now=N + 666667)
    expect_reply("on time", r, reply(allowed=1, now_ms=NMS + 666, limits=[
        lim(allowed=1, limit=3, remaining=0, reset_ms=3334,
            retry_after_ms=0)]))


# --- GCRA --------------------------------------------------------------------

def test_gcra_burst():
    t0 = redis_now_ms()
    out = check_times(4, ["g:a"], G10B2, now=N)
    for i, (allowed, remaining, reset_ms, retry) in enumerate(
            [(1, 2, 100, 0), (1, 1, 200, 0), (1, 0, 300, 0),
             (0, 0, 300, 100)], 1):
        expect_reply("call %d" % i, out[i - 1], reply(
            allowed=allowed, now_ms=NMS, limits=[
                lim(allowed=allowed, limit=3, remaining=remaining,
                    reset_ms=reset_ms, retry_after_ms=retry)]))
    expect_state("stored", "g:a", {"tat": N + 300000})
    # Idle again 300 ms after now, plus 1 s.
    expect_pttl("g:a", 1300, t0)


def test_gcra_refill():
    # Continues test_gcra_burst: one request more every T.
    r = check(["g:a"], G10B2, now=N + 99999)
    expect_reply("1 µs early", r, reply(allowed=0, now_ms=NMS + 99, limits=[
        lim(allowed=0, limit=3, remaining=0, reset_ms=201,
            retry_after_ms=1)]))
    expect_state("stored after denial", "g:a", {"tat": N + 300000})
    r = check(["g:a"], G10B2, now=N + 100000)
    expect_reply("on time", r, reply(allowed=1, now_ms=NMS + 100, limits=[
        lim(allowed=1, limit=3, remaining=0, reset_ms=300,
            retry_after_ms=0)]))
    r = check(["g:a"], G10B2, now=N + 150000)
    expect_reply("half an interval later", r, reply(
        allowed=0, now_ms=NMS + 150, limits=[
            lim(allowed=0, limit=3, remaining=0, reset_ms=250,
                retry_after_ms=50)]))
    # Once the TAT is past, the whole burst is back.
    r = check(["g:a"], G10B2, now=N + 5000000)
    expect_reply("idle", r, reply(allowed=1, now_ms=NMS + 5000, limits=[
        lim(allowed=1, limit=3, remaining=2, reset_ms=100,
            retry_after_ms=0)]))
    expect_state("stored when idle", "g:a", {"tat": N + 5100000})


def test_gcra_burst_zero():
    # 2 per second, burst 0: one every 500000 µs and never two closer.
    a = [gcra(2, 1000000, 0)]
    r = check(["g:b0"], a, now=N)
    expect_reply("first", r, reply(allowed=1, now_ms=NMS, limits=[
        lim(allowed=1, limit=1, remaining=0, reset_ms=500,
            retry_after_ms=0)]))
    r = check(["g:b0"], a, now=N + 499999)
    expect_reply("T - 1 µs later", r, reply(allowed=0, now_ms=NMS + 499,
                                           limits=[
        lim(allowed=0, limit=1, remaining=0, reset_ms=1, retry_after_ms=1)]))
    r = check(["g:b0"], a, now=N + 500000)
    expect_reply("T later", r, reply(allowed=1, now_ms=NMS + 500, limits=[
        lim(allowed=1, limit=1, remaining=0, reset_ms=500,
            retry_after_ms=0)]))
    expect_state("stored", "g:b0", {"tat": N + 1000000})


def test_gcra_interval_rounding():
    # 3 per 1000 µs: T = ceil(1000 / 3) = 334 µs, never 333, which would let
    # a 4th request into a millisecond now and then.
    a = [gcra(3, 1000, 0)]
    check(["g:round"], a, now=N)
    expect_state("stored", "g:round", {"tat": N + 334})
    r = check(["g:round"], a, now=N + 333)
    expect_eq("333 µs later allowed", r.allowed, 0)
    r = check(["g:round"], a, now=N + 334)
    expect_eq("334 µs later allowed", r.allowed, 1)


def test_gcra_sub_ms():
    # 1 per 500 µs: durations round up to 1 ms, the request passes every
    # 500 µs.
    a = [gcra(1, 500, 0)]
    t0 = redis_now_ms()
    for what, at, now_ms, allowed in [("first", 0, NMS, 1),
                                      ("499 µs later", 499, NMS, 0),
                                      ("500 µs later", 500, NMS, 1),
                                      ("1000 µs later", 1000, NMS + 1, 1)]:
        r = check(["g:sub"], a, now=N + at)
        expect_reply(what, r, reply(allowed=allowed, now_ms=now_ms, limits=[
            lim(allowed=allowed, limit=1, remaining=0, reset_ms=1,
                retry_after_ms=1 - allowed)]))
    expect_state("stored", "g:sub", {"tat": N + 1500})
    # 1 ms until idle, plus 1 s.
    expect_pttl("g:sub", 1001, t0)


def test_gcra_cost():
    # Burst 4 (5 at once), cost 3: the second cost 3 would need 6.
    out = check_times(2, ["g:cost"], [gcra(10, 1000000, 4)], cost=3, now=N)
    expect_reply("first", out[0], reply(allowed=1, now_ms=NMS, limits=[
        lim(allowed=1, limit=5, remaining=2, reset_ms=300,
            retry_after_ms=0)]))
    expect_reply("second", out[1], reply(allowed=0, now_ms=NMS, limits=[
        lim(allowed=0, limit=5, remaining=2, reset_ms=300,
            retry_after_ms=100)]))
    expect_state("stored", "g:cost", {"tat": N + 300000})


def test_gcra_cost_above_burst():
    a = [gcra(10, 1000000, 1)]
    r = check(["g:big"], a, cost=3, now=N)
    expect_reply("new key", r, reply(allowed=0, now_ms=NMS, limits=[
        lim(allowed=0, limit=2, remaining=2, reset_ms=0,
            retry_after_ms=-1)]))
    expect_eq("new key created", cmd("EXISTS", "g:big"), 0)
    check(["g:big"], a, now=N)
    before = state("g:big")
    r = check(["g:big"], a, cost=3, now=N)
    expect_reply("existing key", r, reply(allowed=0, now_ms=NMS, limits=[
        lim(allowed=0, limit=2, remaining=1, reset_ms=100,
            retry_after_ms=-1)]))
    expect_state("state", "g:big", before)


def test_gcra_real_time():
    # Without the hook: 10 per second, burst 0, twice back to back.
    a = [gcra(10, 1000000, 0)]
    t0 = redis_now_ms()
    out = check_times(2, ["g:real"], a)
    expect_eq("1st allowed", out[0].allowed, 1)
    r = out[1]
    expect_eq("2nd allowed", r.allowed, 0)
    retry = r.limits[0].retry_after_ms
    expect_range("2nd retry_after_ms", retry, 1, 100)
    expect_pttl("g:real", 1100, t0)
    time.sleep((retry + 3) / 1000)
    r = check(["g:real"], a)
    expect_eq("allowed after retry_after_ms", r.allowed, 1)


# --- Fixed window ------------------------------------------------------------

def test_fw_limit():
    # N is 20 s into a minute: 40 s are left.
    a = [fw(3, "minute")]
    t0 = redis_now_ms()
    out = check_times(4, ["fw:a"], a, now=N)
    for i, (allowed, remaining, retry) in enumerate(
            [(1, 2, 0), (1, 1, 0), (1, 0, 0), (0, 0, 40000)], 1):
        expect_reply("call %d" % i, out[i - 1], reply(
            allowed=allowed, now_ms=NMS, limits=[
                lim(allowed=allowed, limit=3, remaining=remaining,
                    reset_ms=40000, retry_after_ms=retry)]))
    expect_state("stored", "fw:a", {"win": 1835395200, "count": 3})
    expect_pttl("fw:a", 41000, t0)
    r = check(["fw:a"], a, now=N + 39999999)
    expect_reply("last µs of the minute", r, reply(
        allowed=0, now_ms=NMS + 39999, limits=[
            lim(allowed=0, limit=3, remaining=0, reset_ms=1,
                retry_after_ms=1)]))
    expect_state("stored after denials", "fw:a",
                 {"win": 1835395200, "count": 3})


def test_fw_cost_above_limit():
    a = [fw(3, "minute")]
    r = check(["fw:big"], a, cost=4, now=N)
    expect_reply("new key", r, reply(allowed=0, now_ms=NMS, limits=[
        lim(allowed=0, limit=3, remaining=3, reset_ms=40000,
            retry_after_ms=-1)]))
    expect_eq("new key created", cmd("EXISTS", "fw:big"), 0)
    check(["fw:big"], a, now=N)
    before = state("fw:big")
    r = check(["fw:big"], a, cost=3, now=N)
    expect_reply("cost 3 after 1", r, reply(allowed=0, now_ms=NMS, limits=[
        lim(allowed=0, limit=3, remaining=2, reset_ms=40000,
            retry_after_ms=40000)]))
    r = check(["fw:big"], a, cost=4, now=N)
    expect_reply("cost 4 after 1", r, reply(allowed=0, now_ms=NMS, limits=[
        lim(allowed=0, limit=3, remaining=2, reset_ms=40000,
            retry_after_ms=-1)]))
    expect_state("state", "fw:big", before)


def fw_edge(unit, boundary_s, next_ms):
    """With a limit of 2 per unit, uses both 1 µs before the window boundary
    boundary_s, is denied there, and is allowed again at the boundary,
    where the new window lasts next_ms."""
    key = "fw:edge:" + unit
    a = [fw(2, unit)]
    b_us = boundary_s * 1000000
    b_ms = boundary_s * 1000
    r = check([key], a, cost=2, now=b_us - 1)
    expect_reply(unit + ": cost 2 1 µs before", r, reply(
        allowed=1, now_ms=b_ms - 1, limits=[
            lim(allowed=1, limit=2, remaining=0, reset_ms=1,
                retry_after_ms=0)]))
    r = check([key], a, now=b_us - 1)
    expect_reply(unit + ": cost 1 1 µs before", r, reply(
        allowed=0, now_ms=b_ms - 1, limits=[
            lim(allowed=0, limit=2, remaining=0, reset_ms=1,
                retry_after_ms=1)]))
    r = check([key], a, now=b_us)
    expect_reply(unit + ": at the boundary", r, reply(
        allowed=1, now_ms=b_ms, limits=[
            lim(allowed=1, limit=2, remaining=1, reset_ms=next_ms,
                retry_after_ms=0)]))
    expect_state(unit + ": stored", key, {"win": boundary_s, "count": 1})


# 2028-02-29 00:01:00, 01:00:00 and 00:00:00 UTC.
def test_fw_edge_minute():
    fw_edge("minute", 1835395260, 60000)


def test_fw_edge_hour():
    fw_edge("hour", 1835398800, 3600000)


def test_fw_edge_day():
    fw_edge("day", 1835395200, 86400000)


def test_fw_edge_month():
    # From Feb 29 2028 23:59:59.999999 to Mar 1 2028 00:00:00 UTC; March
    # has 31 days.
    fw_edge("month", 1835481600, 2678400000)


def fw_month(start_s, next_s, days):
    """A request at the first microsecond of a month (start_s) has days
    days to wait; the last microsecond before next_s is still in that
    month; next_s starts a new one."""
    key = "fw:month:%d" % start_s
    a = [fw(3, "month")]
    r = check([key], a, now=start_s * 1000000)
    expect_reply("%d: first µs" % start_s, r, reply(
        allowed=1, now_ms=start_s * 1000, limits=[
            lim(allowed=1, limit=3, remaining=2, reset_ms=days * 86400000,
                retry_after_ms=0)]))
    r = check([key], a, now=next_s * 1000000 - 1)
    expect_reply("%d: last µs" % start_s, r, reply(
        allowed=1, now_ms=next_s * 1000 - 1, limits=[
            lim(allowed=1, limit=3, remaining=1, reset_ms=1,
                retry_after_ms=0)]))
    r = check([key], a, now=next_s * 1000000)
    expect_eq("%d: next month remaining" % start_s, r.limits[0].remaining, 2)
    expect_state("%d: next month stored" % start_s, key,
                 {"win": next_s, "count": 1})


MONTHS = [  # (start, start of the next month, days)
    (1830297600, 1832976000, 31),  # January 2028
    (1832976000, 1835481600, 29),  # February 2028, a leap year
    (1801440000, 1803859200, 28),  # February 2027
    (1827619200, 1830297600, 31),  # December 2027 to January 2028
    (949363200, 951868800, 29),    # February 2000 (divisible by 400)
    (4105123200, 4107542400, 28),  # February 2100 (by 100, not 400)
]


def test_fw_month_lengths():
    for start_s, next_s, days in MONTHS:
        fw_month(start_s, next_s, days)


def test_fw_real_time():
    # Without the hook: the reset and the retry are the rest of the minute.
    # The two calls must fall into one minute, so the last second of one is
    # skipped.
    if redis_now_ms() % 60000 >= 59000:
        time.sleep(1.1)
    t0 = redis_now_ms()
    out = check_times(2, ["fw:real"], [fw(1, "minute")])
    expect_eq("1st allowed", out[0].allowed, 1)
    r = out[1]
    expect_eq("2nd allowed", r.allowed, 0)
    left = 60000 - r.now_ms % 60000
    expect_range("retry_after_ms", r.limits[0].retry_after_ms, left, left + 1)
    expect_range("reset_ms", r.limits[0].reset_ms, left, left + 1)
    # The key expires 1 s after the end of the minute (within 1 ms).
    expect_pttl("fw:real", left + r.now_ms - t0 + 1001, t0)


# --- Several limits ----------------------------------------------------------

def test_ttl_kept_within_window():
    # A write in the window the key already holds keeps the key's TTL (it
    # was set by the write that began the window) and rewrites only the
    # count; the first write of a new window sets the TTL again. The TTL
    # is set by hand in between, so that "kept" is seen. N is a whole
    # multiple of 10 s and 20 s into a minute.
    a = [sw(100, 10)]
    t0 = redis_now_ms()
    check(["ttl:sw"], a, now=N)
    expect_pttl("ttl:sw", 21000, t0)
    t0 = redis_now_ms()
    cmd("PEXPIRE", "ttl:sw", 99000)
    check(["ttl:sw"], a, now=N + 1000000)
    expect_pttl("ttl:sw", 99000, t0)
    expect_state("same window", "ttl:sw",
                 {"win": 183539522, "cur": 2, "prev": 0})
    t0 = redis_now_ms()
    check(["ttl:sw"], a, now=N + 10000000)
    expect_pttl("ttl:sw", 21000, t0)
    expect_state("next window", "ttl:sw",
                 {"win": 183539523, "cur": 1, "prev": 2})

    a = [fw(100, "minute")]
    t0 = redis_now_ms()
    check(["ttl:fw"], a, now=N)
    expect_pttl("ttl:fw", 41000, t0)
    t0 = redis_now_ms()
    cmd("PEXPIRE", "ttl:fw", 99000)
    check(["ttl:fw"], a, now=N + 1000000)
    expect_pttl("ttl:fw", 99000, t0)
    expect_state("same minute", "ttl:fw", {"win": 1835395200, "count": 2})
    t0 = redis_now_ms()
    check(["ttl:fw"], a, now=N + 40000000)
    expect_pttl("ttl:fw", 61000, t0)
    expect_state("next minute", "ttl:fw", {"win": 1835395260, "count": 1})


def test_all_or_nothing():
    keys = ["aon:tb", "aon:sw"]
    limits = [tb(10, "0.001"), sw(3, 60)]
    out = check_times(3, keys, limits)
    for i in (1, 2, 3):
        r = out[i - 1]
        expect_eq("call %d allowed" % i, r.allowed, 1)
        expect_eq("call %d bucket remaining" % i, r.limits[0].remaining,
                  10 - i)
        expect_eq("call %d window remaining" % i, r.limits[1].remaining,
                  3 - i)
    expect_range("tokens after 3", state("aon:tb")["tokens"], 7, 7.01)
    tb_before = state("aon:tb")
    sw_before = state("aon:sw")
    r = check(keys, limits)
    expect_eq("reply length", len(r), 12)
    expect_eq("allowed", r.allowed, 0)
    expect_eq("bucket allowed", r.limits[0].allowed, 1)
    expect_eq("bucket retry_after_ms", r.limits[0].retry_after_ms, 0)
    expect_eq("window allowed", r.limits[1].allowed, 0)
    expect_eq("window limit", r.limits[1].limit, 3)
    expect_range("window retry_after_ms", r.limits[1].retry_after_ms,
                 1, 120000)
    expect_range("tokens after denial", state("aon:tb")["tokens"],
                 7, 7.01)
    expect_state("bucket state", "aon:tb", tb_before)
    expect_state("window state", "aon:sw", sw_before)


def test_all_or_nothing_four():
    # gcra lets 3 through, the others more: the 4th call is denied by gcra
    # alone and changes nothing anywhere.
    keys = ["aon4:tb", "aon4:sw", "aon4:g", "aon4:fw"]
    limits = [tb(10, "0.001"), sw(5, 60), gcra(1, 3600000000, 2),
              fw(5, "day")]
    out = check_times(4, keys, limits, now=N)
    for i in (1, 2, 3):
        r = out[i - 1]
        expect_eq("call %d allowed" % i, r.allowed, 1)
        expect_eq("call %d allowed of limits 1, 2" % i,
                  [x.allowed for x in r.limits[0:2]], [1, 1])
        expect_eq("call %d allowed of limits 3, 4" % i,
                  [x.allowed for x in r.limits[2:4]], [1, 1])
    r = out[3]
    expect_eq("reply length", len(r), 22)
    expect_eq("call 4 allowed", r.allowed, 0)
    expect_eq("call 4 allowed of limits 1..4",
              [x.allowed for x in r.limits], [1, 1, 0, 1])
    # A denial charges nothing: every limit reports what it has now, not
    # what it would have left once charged.
    expect_eq("call 4 remaining of limits 1..4",
              [x.remaining for x in r.limits], [7, 2, 0, 2])
    expect_state("bucket", "aon4:tb", {"tokens": 7, "ts": N})
    expect_state("window", "aon4:sw", {"win": 30589920, "cur": 3, "prev": 0})
    expect_state("gcra", "aon4:g", {"tat": N + 3 * 3600000000})
    expect_state("fixed window", "aon4:fw", {"win": 1835395200, "count": 3})
    for k in keys:
        expect_range("PTTL of " + k, cmd("PTTL", k), 1, 99999999999)


# --- Shadow limits -----------------------------------------------------------

# An enforced limit of 5 per minute with a shadow limit of 1 per second.
SHADOW = [fw(5, "minute"), gcra(1, 1000000, 0, shadow=1)]


def test_shadow_denies():
    t0 = redis_now_ms()
    r = check(["sh:fw", "sh:g"], SHADOW, now=N)
    expect_reply("both allow", r, reply(allowed=1, now_ms=NMS, limits=[
        lim(allowed=1, limit=5, remaining=4, reset_ms=40000,
            retry_after_ms=0),
        lim(allowed=1, limit=1, remaining=0, reset_ms=1000,
            retry_after_ms=0)]))
    expect_state("shadow charged", "sh:g", {"tat": N + 1000000})
    expect_pttl("sh:g", 2000, t0)
    out = check_times(2, ["sh:fw", "sh:g"], SHADOW, now=N + 1000)
    for what, r, remaining in [("shadow denies", out[0], 3),
                               ("shadow denies again", out[1], 2)]:
        expect_reply(what, r, reply(allowed=1, now_ms=NMS + 1, limits=[
            lim(allowed=1, limit=5, remaining=remaining, reset_ms=39999,
                retry_after_ms=0),
            lim(allowed=0, limit=1, remaining=0, reset_ms=999,
                retry_after_ms=999)]))
    expect_state("enforced charged", "sh:fw", {"win": 1835395200, "count": 3})
    expect_state("shadow not charged", "sh:g", {"tat": N + 1000000})


def test_shadow_enforced_denies():
    # The enforced limit (1 per minute) denies, the shadow one (burst 5)
    # would allow: nothing is written, the shadow limit is not charged
    # either, and it reports what it has now (5, full again in 100 ms).
    a = [fw(1, "minute"), gcra(10, 1000000, 5, shadow=1)]
    out = check_times(2, ["sh2:fw", "sh2:g"], a, now=N)
    expect_reply("first", out[0], reply(allowed=1, now_ms=NMS, limits=[
        lim(allowed=1, limit=1, remaining=0, reset_ms=40000,
            retry_after_ms=0),
        lim(allowed=1, limit=6, remaining=5, reset_ms=100,
            retry_after_ms=0)]))
    expect_reply("second", out[1], reply(allowed=0, now_ms=NMS, limits=[
        lim(allowed=0, limit=1, remaining=0, reset_ms=40000,
            retry_after_ms=40000),
        lim(allowed=1, limit=6, remaining=5, reset_ms=100,
            retry_after_ms=0)]))
    expect_state("enforced", "sh2:fw", {"win": 1835395200, "count": 1})
    expect_state("shadow", "sh2:g", {"tat": N + 100000})


def test_shadow_only():
    a = [gcra(1, 1000000, 0, shadow=1)]
    out = check_times(2, ["sh3:g"], a, now=N)
    expect_reply("first", out[0], reply(allowed=1, now_ms=NMS, limits=[
        lim(allowed=1, limit=1, remaining=0, reset_ms=1000,
            retry_after_ms=0)]))
    expect_reply("second", out[1], reply(allowed=1, now_ms=NMS, limits=[
        lim(allowed=0, limit=1, remaining=0, reset_ms=1000,
            retry_after_ms=1000)]))
    expect_state("stored", "sh3:g", {"tat": N + 1000000})


def test_shadow_peek():
    r = check(["sh4:fw", "sh4:g"], SHADOW, peek=1, now=N)
    expect_reply("peek", r, reply(allowed=1, now_ms=NMS, limits=[
        lim(allowed=1, limit=5, remaining=4, reset_ms=40000,
            retry_after_ms=0),
        lim(allowed=1, limit=1, remaining=0, reset_ms=1000,
            retry_after_ms=0)]))
    expect_eq("keys written", cmd("EXISTS", "sh4:fw", "sh4:g"), 0)


# --- Sent twice: the reply slot KEYS[n + 1], the call id and peek 2 ---------
#
# A call that charged, sent again with the same slot, the same id and peek
# 2, gets the first reply again and charges nothing; another id is a new
# call.

def fw2(allowed, now_ms, remaining, reset_ms, retry_after_ms):
    """A reply of FW2 (one limit, 2 per minute): every field named."""
    return reply(allowed=allowed, now_ms=now_ms, limits=[
        lim(allowed=allowed, limit=2, remaining=remaining, reset_ms=reset_ms,
            retry_after_ms=retry_after_ms)])


def test_replay_allowed():
    t0 = redis_now_ms()
    keys = ["rp:fw", "rp:slot"]
    first = check(keys, FW2, now=N, rid="a")
    expect_reply("first", first, fw2(allowed=1, now_ms=NMS, remaining=1,
                                     reset_ms=40000, retry_after_ms=0))
    expect_state("charged once", "rp:fw", {"win": 1835395200, "count": 1})
    expect_eq("id and reply stored", slot("rp:slot"),
              "a 1 %d 1 2 1 40000 0" % NMS)
    expect_pttl("rp:slot", 3000, t0)
    # A millisecond later, as a resend after a reconnect would be.
    again = check(keys, FW2, peek=2, now=N + 1000, rid="a")
    expect_reply("sent again: the first reply", again, first)
    expect_state("sent again: not charged", "rp:fw",
                 {"win": 1835395200, "count": 1})
    r = check(keys, FW2, now=N + 2000, rid="b")
    b = fw2(allowed=1, now_ms=NMS + 2, remaining=0, reset_ms=39998,
            retry_after_ms=0)
    expect_reply("the next call", r, b)
    expect_state("charged", "rp:fw", {"win": 1835395200, "count": 2})
    expect_eq("the slot holds the last call that charged",
              slot("rp:slot"), "b 1 %d 1 2 0 39998 0" % (NMS + 2))
    again = check(keys, FW2, peek=2, now=N + 3000, rid="b")
    expect_reply("that one sent again", again, b)
    # The caller never sends an older call again once it has sent a newer
    # one; if it did, the older one would be decided afresh (denied here,
    # the limit being used up), not replayed.
    r = check(keys, FW2, peek=2, now=N + 3000, rid="a")
    expect_reply("an older call is not in the slot any more", r, fw2(
        allowed=0, now_ms=NMS + 3, remaining=0, reset_ms=39997,
        retry_after_ms=39997))
    expect_state("still charged twice in all", "rp:fw",
                 {"win": 1835395200, "count": 2})


def test_replay_only_when_sent_again():
    # Only peek 2 looks for a stored reply; a peek 2 that finds another id
    # or none is decided and charged as a first call.
    keys = ["ro:fw", "ro:slot"]
    check(keys, FW2, now=N, rid="a")
    r = check(keys, FW2, now=N, rid="a")
    expect_reply("peek 0 decides again", r, fw2(
        allowed=1, now_ms=NMS, remaining=0, reset_ms=40000, retry_after_ms=0))
    expect_state("and charges", "ro:fw", {"win": 1835395200, "count": 2})
    cmd("DEL", "ro:fw")
    # The slot holds "a ...": "a1", which begins with "a", is not "a"; then
    # it holds "a1 ...", and "a" is not "a1"; "n" is another call again.
    for rid in ("a1", "a", "n"):
        cmd("DEL", "ro:fw")
        r = check(keys, FW2, peek=2, now=N, rid=rid)
        expect_reply("sent again as %s, first never ran" % rid, r, fw2(
            allowed=1, now_ms=NMS, remaining=1, reset_ms=40000,
            retry_after_ms=0))
        expect_state("charged once", "ro:fw",
                     {"win": 1835395200, "count": 1})
        expect_eq("stored", slot("ro:slot"),
                  "%s 1 %d 1 2 1 40000 0" % (rid, NMS))
    cmd("DEL", "ro:fw", "ro:slot")
    r = check(keys, FW2, peek=2, now=N, rid="e")
    expect_reply("sent again, slot empty", r, fw2(
        allowed=1, now_ms=NMS, remaining=1, reset_ms=40000, retry_after_ms=0))
    # A slot that holds the id but not a reply of this call's shape (one
    # limit: 7 doubles) is not replayed either.
    cmd("DEL", "ro:fw")
    cmd("SET", "ro:slot", "f 1 2 3")
    r = check(keys, FW2, peek=2, now=N, rid="f")
    expect_reply("sent again, slot of another shape", r, fw2(
        allowed=1, now_ms=NMS, remaining=1, reset_ms=40000, retry_after_ms=0))
    expect_state("charged once", "ro:fw", {"win": 1835395200, "count": 1})


def test_replay_denial():
    # A denial charges nothing and stores nothing: sent again, it is decided
    # again (here: denied again, and once the window has passed, allowed and
    # charged once).
    keys = ["rd:fw", "rd:slot"]
    check(["rd:fw"], FW2, cost=2, now=N)
    before = state("rd:fw")
    denied = fw2(allowed=0, now_ms=NMS, remaining=0, reset_ms=40000,
                 retry_after_ms=40000)
    r = check(keys, FW2, now=N, rid="c")
    expect_reply("denied", r, denied)
    r = check(keys, FW2, peek=2, now=N, rid="c")
    expect_reply("denied again", r, denied)
    expect_state("nothing charged", "rd:fw", before)
    expect_eq("nothing stored", cmd("EXISTS", "rd:slot"), 0)
    next_minute = fw2(allowed=1, now_ms=NMS + 40000, remaining=1,
                      reset_ms=60000, retry_after_ms=0)
    r = check(keys, FW2, peek=2, now=N + 40000000, rid="c")
    expect_reply("next minute", r, next_minute)
    r = check(keys, FW2, peek=2, now=N + 40000000, rid="c")
    expect_reply("next minute, sent again", r, next_minute)
    expect_state("charged once", "rd:fw", {"win": 1835395260, "count": 1})


def test_replay_peek():
    # A peek charges nothing and stores nothing, with or without a reply
    # slot.
    keys = ["rk:fw", "rk:slot"]
    check(["rk:fw"], FW2, now=N)
    before = state("rk:fw")
    for what in ("peek", "peek again"):
        r = check(keys, FW2, peek=1, now=N, rid="p")
        expect_reply(what, r, fw2(allowed=1, now_ms=NMS, remaining=0,
                                  reset_ms=40000, retry_after_ms=0))
    expect_state("nothing charged", "rk:fw", before)
    expect_eq("nothing stored", cmd("EXISTS", "rk:slot"), 0)
    # A peek with the id of a call that charged is not a resend of it.
    check(keys, FW2, now=N, rid="q")
    r = check(keys, FW2, peek=1, now=N, rid="q")
    expect_reply("peek after the limit is used up", r, fw2(
        allowed=0, now_ms=NMS, remaining=0, reset_ms=40000,
        retry_after_ms=40000))


def test_replay_several():
    # Several limits, one of them a shadow limit whose cost can never pass
    # (retry_after_ms -1): every field of the reply comes back as it was.
    a = [gcra(10, 1000000, 4), fw(1, "minute", shadow=1)]
    keys = ["rs:g", "rs:fw", "rs:slot"]
    first = check(keys, a, cost=2, now=N, rid="m.1")
    expect_reply("first", first, reply(allowed=1, now_ms=NMS, limits=[
        lim(allowed=1, limit=5, remaining=3, reset_ms=200, retry_after_ms=0),
        lim(allowed=0, limit=1, remaining=1, reset_ms=40000,
            retry_after_ms=-1)]))
    g = state("rs:g")
    again = check(keys, a, cost=2, peek=2, now=N + 7, rid="m.1")
    expect_reply("sent again", again, first)
    expect_state("gcra charged once", "rs:g", g)
    expect_eq("shadow limit not charged", cmd("EXISTS", "rs:fw"), 0)


def test_replay_real_time():
    # With Redis TIME: the resend, 20 ms later, answers with the first
    # call's time, so it is the stored reply and not a new decision.
    a = [tb(5, "0.5")]
    first = check(["rt:tb", "rt:slot"], a, rid="t")
    tokens = state("rt:tb")["tokens"]
    time.sleep(0.02)
    again = check(["rt:tb", "rt:slot"], a, peek=2, rid="t")
    expect_reply("sent again", again, first)
    expect_eq("charged once", state("rt:tb")["tokens"], tokens)
    expect_eq("remaining", first.limits[0].remaining, 4)


# --- The counter budget ------------------------------------------------------
#
# A call may carry its tenant's budget: two more keys after the limits' (a
# HyperLogLog of the names of the counters created this window, and how many
# were created) and three more arguments (the budget, its window in seconds,
# one 0 or 1 per limit). A call that would create counters marked 1 past the
# budget is refused, writing nothing, with the reply -1, now_ms, retry_ms.

HOUR_LEFT_MS = 3580000      # from N (20 s into an hour) to the next hour


def budget_keys(tenant):
    return ["bud:{%s}:names" % tenant, "bud:{%s}:made" % tenant]


def budget_call(tenant, keys, limits, budget, mask, cost=1, peek=0, now=N,
                rid=None, slot_key=None, window=3600):
    """One call with the tenant's budget; the reply as a list (unpacked)."""
    all_keys = list(keys) + budget_keys(tenant)
    if slot_key is not None:
        all_keys.append(slot_key)
    argv = [str(cost), str(peek), str(len(limits))]
    for spec in limits:
        argv.extend(spec)
    argv += [str(budget), str(window), mask]
    if rid is not None:
        argv.append(rid)
    argv.append("__now_us=%d" % now)
    raw = unpacked(redis.pipeline([evalsha(all_keys, argv)])[0])
    if isinstance(raw, resp.ReplyError):
        raise Failed("error reply '%s'" % raw)
    return raw


def expect_refused(what, raw, now_ms=NMS, left_ms=HOUR_LEFT_MS):
    """raw is the budget's refusal at now_ms, with a wait of at most left_ms
    (the rest of the window) and at least 5 s less (the time the case took,
    since the TTL counts in Redis time)."""
    global checks
    checks += 1
    if not (isinstance(raw, list) and len(raw) == 3 and raw[0] == -1 and
            raw[1] == now_ms and left_ms - 5000 <= raw[2] <= left_ms):
        raise Failed("%s: got %r, want [-1, %d, %d..%d]" % (
            what, raw, now_ms, left_ms - 5000, left_ms))


def expect_allowed(what, raw):
    expect_eq(what + ": allowed", Reply.parse(raw).allowed, 1)


def test_budget_refuses_new_counters():
    # A budget of 3 counters an hour: 3 subjects pass, the 4th is refused
    # and creates nothing; the first three go on as before.
    limits = [tb(5, 1)]
    for s in ("s1", "s2", "s3"):
        expect_allowed(s, budget_call("b1", ["b1:" + s], limits, 3, "1"))
    raw = budget_call("b1", ["b1:s4"], limits, 3, "1")
    expect_refused("the 4th subject", raw)
    expect_eq("the 4th counter was not created", cmd("EXISTS", "b1:s4"), 0)
    for s in ("s1", "s2", "s3"):
        r = Reply.parse(budget_call("b1", ["b1:" + s], limits, 3, "1"))
        expect_eq(s + " again: allowed", r.allowed, 1)
        expect_eq(s + " again: remaining", r.limits[0].remaining, 3)
    expect_eq("distinct counters", cmd("PFCOUNT", budget_keys("b1")[0]), 3)
    expect_eq("counters made", cmd("GET", budget_keys("b1")[1]), "3")
    # The refusal is the budget's, however often it is asked.
    expect_refused("the 4th again", budget_call("b1", ["b1:s4"], limits, 3,
                                                "1"))
    expect_refused("a 5th", budget_call("b1", ["b1:s5"], limits, 3, "1"))


def test_budget_keys_expire_with_the_window():
    # Both keys are made by the first counter of the window and expire at
    # its end (20 s into the hour: 3580 s); later counters keep that TTL.
    t0 = redis_now_ms()
    budget_call("b2", ["b2:s1"], [tb(5, 1)], 10, "1")
    for k in budget_keys("b2"):
        expect_pttl(k, HOUR_LEFT_MS, t0)
    t0 = redis_now_ms()
    cmd("PEXPIRE", budget_keys("b2")[1], 99000)
    budget_call("b2", ["b2:s2"], [tb(5, 1)], 10, "1", now=N + 60000000)
    expect_pttl(budget_keys("b2")[1], 99000, t0)
    # A window of 60 s at N + 70 s, 30 s into a minute: 30 s left, and the
    # refusal a second later says so (the remaining TTL).
    t0 = redis_now_ms()
    budget_call("b3", ["b3:s1"], [tb(5, 1)], 1, "1", now=N + 70000000,
                window=60)
    for k in budget_keys("b3"):
        expect_pttl(k, 30000, t0)
    expect_refused("past a budget of 1", budget_call(
        "b3", ["b3:s2"], [tb(5, 1)], 1, "1", now=N + 71000000, window=60),
        now_ms=NMS + 71000, left_ms=30000)
    # Without a TTL on the count (made by hand), the wait is the rest of the
    # window by the call's clock: 29 s at N + 71 s.
    cmd("PERSIST", budget_keys("b3")[1])
    expect_refused("no TTL", budget_call(
        "b3", ["b3:s2"], [tb(5, 1)], 1, "1", now=N + 71000000, window=60),
        now_ms=NMS + 71000, left_ms=29000)


def test_budget_other_tenant():
    # Tenant c1 at its budget: tenant c2, with its own budget keys, creates
    # counters as before.
    limits = [fw(10, "minute")]
    expect_allowed("c1 s1", budget_call("c1", ["c1:s1"], limits, 1, "1"))
    expect_refused("c1 s2", budget_call("c1", ["c1:s2"], limits, 1, "1"))
    for s in ("s1", "s2"):
        expect_allowed("c2 " + s, budget_call("c2", ["c2:" + s], limits, 2,
                                              "1"))
    expect_eq("c2 counters made", cmd("GET", budget_keys("c2")[1]), "2")


def test_budget_counts_distinct_counters():
    # A counter that expires and comes back within the window counts once:
    # the exact count goes past the budget, the distinct count does not,
    # so a new counter still passes (after a PFCOUNT).
    limits = [gcra(10, 1000000, 0)]
    for s in ("s1", "s2"):
        expect_allowed(s, budget_call("d1", ["d1:" + s], limits, 3, "1"))
    cmd("DEL", "d1:s1")
    expect_allowed("s1 back", budget_call("d1", ["d1:s1"], limits, 3, "1"))
    expect_eq("counters made", cmd("GET", budget_keys("d1")[1]), "3")
    expect_eq("distinct counters", cmd("PFCOUNT", budget_keys("d1")[0]), 2)
    expect_allowed("s3", budget_call("d1", ["d1:s3"], limits, 3, "1"))
    expect_refused("s4", budget_call("d1", ["d1:s4"], limits, 3, "1"))
    # Past the budget, a counter that expired is new again: refused.
    cmd("DEL", "d1:s2")
    expect_refused("s2 back", budget_call("d1", ["d1:s2"], limits, 3, "1"))


def test_budget_mask():
    # A limit marked 0 (one counter for the whole tenant) is not counted,
    # nor refused; one marked 1 is. Two new counters marked 1 in one call
    # count two.
    limits = [fw(100, "minute"), tb(5, 1), sw(5, 10)]
    expect_allowed("first", budget_call(
        "e1", ["e1:all", "e1:s1:a", "e1:s1:b"], limits, 3, "011"))
    expect_eq("counters made", cmd("GET", budget_keys("e1")[1]), "2")
    expect_eq("distinct counters", cmd("PFCOUNT", budget_keys("e1")[0]), 2)
    expect_allowed("one more", budget_call(
        "e1", ["e1:all", "e1:s2:a"], limits[:2], 3, "01"))
    expect_refused("past it", budget_call(
        "e1", ["e1:all", "e1:s3:a"], limits[:2], 3, "01"))
    expect_state("the tenant's counter: charged twice", "e1:all",
                 {"win": 1835395200, "count": 2})
    # The tenant's own counter gone (its minute over): made again, whatever
    # the budget.
    cmd("DEL", "e1:all")
    expect_allowed("the tenant's counter again", budget_call(
        "e1", ["e1:all", "e1:s1:a"], limits[:2], 3, "01"))


def test_budget_peek_and_denial():
    # Past the budget a peek of a new subject is answered as ever (it
    # creates nothing), and so is a denial.
    limits = [tb(2, 1)]
    expect_allowed("f1 s1", budget_call("f1", ["f1:s1"], limits, 1, "1"))
    r = Reply.parse(budget_call("f1", ["f1:s2"], limits, 1, "1", peek=1))
    expect_eq("peek: allowed", r.allowed, 1)
    expect_eq("peek: remaining", r.limits[0].remaining, 1)
    r = Reply.parse(budget_call("f1", ["f1:s2"], limits, 1, "1", cost=3))
    expect_eq("cost above capacity: allowed", r.allowed, 0)
    expect_eq("cost above capacity: retry", r.limits[0].retry_after_ms, -1)
    expect_eq("nothing created", cmd("EXISTS", "f1:s2"), 0)


def test_budget_existing_counters_pay_nothing():
    # A call whose counters all exist sends no command to the budget's
    # keys; one that creates a counter below the budget sends GET, PFADD
    # and INCRBY (and PEXPIRE twice, the first in the window), no PFCOUNT.
    # (PEXPIRE is not looked for: the limits send it. The limits are
    # ones that keep hashes: a token bucket sends GET itself.)
    limits = [gcra(5, 1000000, 0), sw(10, 10)]
    budget_call("g1", ["g1:s1:a", "g1:s1:b"], limits, 100, "11")
    cmd("CONFIG", "RESETSTAT")
    budget_call("g1", ["g1:s1:a", "g1:s1:b"], limits, 100, "11")
    stats = cmd("INFO", "commandstats")
    for name in ("get", "pfadd", "pfcount", "incrby", "pttl"):
        expect_eq("existing counters: calls of " + name,
                  "cmdstat_%s:" % name in stats, False)
    cmd("CONFIG", "RESETSTAT")
    budget_call("g1", ["g1:s2:a", "g1:s2:b"], limits, 100, "11")
    stats = cmd("INFO", "commandstats")
    for name, want in (("get", True), ("pfadd", True), ("incrby", True),
                       ("pfcount", False), ("pttl", False)):
        expect_eq("a new subject: calls of " + name,
                  "cmdstat_%s:" % name in stats, want)


def test_budget_replay():
    # With the budget keys and the reply slot (n + 3 keys): a call that
    # charged is replayed when sent again, and not counted again; a refused
    # call stores nothing, and sent again is refused again.
    limits = [fw(5, "minute")]
    first = budget_call("h1", ["h1:s1"], limits, 1, "1", rid="a",
                        slot_key="h1:slot")
    expect_allowed("first", first)
    again = budget_call("h1", ["h1:s1"], limits, 1, "1", peek=2, rid="a",
                        slot_key="h1:slot", now=N + 1000)
    expect_eq("sent again: the first reply", again, first)
    expect_eq("counted once", cmd("GET", budget_keys("h1")[1]), "1")
    raw = budget_call("h1", ["h1:s2"], limits, 1, "1", rid="b",
                      slot_key="h1:slot")
    expect_refused("a new subject", raw)
    expect_eq("the slot holds the call that charged", slot("h1:slot")[:2],
              "a ")
    raw = budget_call("h1", ["h1:s2"], limits, 1, "1", peek=2, rid="b",
                      slot_key="h1:slot")
    expect_refused("sent again", raw)


# --- Concurrency limits and leases -------------------------------------------
#
# A concurrency limit's key is a sorted set of lease ids scored by expiry
# (ms); a call with a lease (peek "3", or "4" sent again) has the record's
# key after the other keys and the lease's id and ttl (ms) after the other
# arguments, and one more integer in its reply: the expired leases it
# dropped. A release or an extension is KEYS = {record}, ARGV = {value, "r"
# or "e", id} (lua/lease.lua). Every key of a lease is in one hash tag.

def cc(max_, ttl_s, shadow=0):
    return ["concurrency", str(max_), str(ttl_s * 1000000), "0", str(shadow)]


def lkey(lease):
    return "rl:{t}:lease:" + lease


def lease_check(keys, limits, lease, ttl_ms, cost=1, now=None, mode=3,
                slot_key=None, rid=None):
    """A check that takes lease (its record lkey(lease)) if allowed.
    Returns (Reply, dropped)."""
    argv = [str(cost), str(mode), str(len(limits))]
    for spec in limits:
        argv.extend(spec)
    argv += [lease, str(ttl_ms)]
    allkeys = list(keys) + [lkey(lease)]
    if slot_key is not None:
        allkeys.append(slot_key)
        argv.append(rid)
    if now is not None:
        argv.append("__now_us=%d" % now)
    raw = unpacked(redis.pipeline([evalsha(allkeys, argv)])[0])
    if not isinstance(raw, list) or len(raw) < 3 or (len(raw) - 3) % 5:
        raise Failed("not a reply of a call with a lease: %r" % (raw,))
    return Reply.parse(raw[:-1]), raw[-1]


def expect_ttl(key, ttl_ms):
    """key was given a TTL of ttl_ms (PEXPIRE is relative: the test clock
    does not move it) within the last second."""
    expect_range("PTTL of %s" % key, cmd("PTTL", key), ttl_ms - 1000, ttl_ms)


def lease_op(lease, op, value="-", now=None):
    """Releases ("r") or extends ("e") lease; returns the raw reply."""
    argv = [str(value), op, lease]
    if now is not None:
        argv.append("__now_us=%d" % now)
    return redis.pipeline([evalsha([lkey(lease)], argv)])[0]


def test_cc_acquire_deny():
    # max 3: three leases pass, the fourth is denied and takes nothing.
    for i, want in enumerate([2, 1, 0], 1):
        r, dropped = lease_check(["rl:{t}:cc1"], [cc(3, 10)], "a%d" % i,
                                 10000, now=N + i * 1000)
        expect_reply("lease %d" % i, r, reply(
            allowed=1, now_ms=NMS + i, limits=[lim(
                allowed=1, limit=3, remaining=want, reset_ms=10000,
                retry_after_ms=0)]))
        expect_eq("lease %d dropped" % i, dropped, 0)
    r, dropped = lease_check(["rl:{t}:cc1"], [cc(3, 10)], "a4", 10000,
                             now=N + 4000)
    # The earliest lease expires in 9997 ms: a denial says a second at most.
    expect_reply("fourth", r, reply(allowed=0, now_ms=NMS + 4, limits=[lim(
        allowed=0, limit=3, remaining=0, reset_ms=9999,
        retry_after_ms=1000)]))
    expect_eq("held", cmd("ZCARD", "rl:{t}:cc1"), 3)
    expect_eq("no record for the denial", cmd("EXISTS", lkey("a4")), 0)
    expect_eq("scores are expiries", cmd("ZSCORE", "rl:{t}:cc1", "a1"),
              str(NMS + 1 + 10000))
    expect_ttl("rl:{t}:cc1", 10000 + 1000 + 3)
    expect_ttl(lkey("a1"), 10000 + 60000)
    # A peek takes nothing either.
    r = check(["rl:{t}:cc1"], [cc(3, 10)], peek=1, now=N + 5000)
    expect_eq("peek denies", r.allowed, 0)
    expect_eq("still held", cmd("ZCARD", "rl:{t}:cc1"), 3)


def test_cc_expiry():
    # Leases of 2 s: at 2 s past their start they are free, and the next
    # call that takes a slot drops them (and says how many).
    for i in range(1, 3):
        lease_check(["rl:{t}:cc2"], [cc(2, 2)], "b%d" % i, 2000, now=N)
    r, _ = lease_check(["rl:{t}:cc2"], [cc(2, 2)], "b3", 2000,
                       now=N + 1999000)
    expect_eq("full until the ttl", r.allowed, 0)
    r, dropped = lease_check(["rl:{t}:cc2"], [cc(2, 2)], "b4", 2000,
                             now=N + 2000000)
    expect_eq("free at the ttl", r.allowed, 1)
    expect_eq("remaining", r.limits[0].remaining, 1)
    expect_eq("dropped", dropped, 2)
    expect_eq("held", cmd("ZRANGE", "rl:{t}:cc2", "0", "-1"), ["b4"])
    # A release after the ttl is told so, and changes nothing.
    got = lease_op("b1", "r", now=N + 2000000)
    expect_eq("release after expiry", got, [-2, NMS + 2000])


def test_cc_release():
    # A release frees the slot at once; twice, unknown: told, no change.
    lease_check(["rl:{t}:cc3"], [cc(1, 60)], "c1", 60000, now=N)
    r, _ = lease_check(["rl:{t}:cc3"], [cc(1, 60)], "c2", 60000, now=N)
    expect_eq("full", r.allowed, 0)
    got = lease_op("c1", "r", now=N + 1000)
    expect_eq("released", got, [1, NMS + 1, 1, 0])
    expect_eq("free", cmd("ZCARD", "rl:{t}:cc3"), 0)
    expect_eq("tombstone", cmd("GET", lkey("c1")), "released")
    expect_ttl(lkey("c1"), 60000)
    r, _ = lease_check(["rl:{t}:cc3"], [cc(1, 60)], "c3", 60000,
                       now=N + 1000)
    expect_eq("a new lease", r.allowed, 1)
    got = lease_op("c1", "r", now=N + 2000)
    expect_eq("released twice", got, [-1, NMS + 2])
    got = lease_op("c9", "r", now=N + 2000)
    expect_eq("unknown", got, [0, NMS + 2])
    expect_eq("c3 still held", cmd("ZRANGE", "rl:{t}:cc3", "0", "-1"),
              ["c3"])


def test_cc_all_or_nothing():
    # A concurrency limit and a token bucket: a denial by the bucket takes
    # no slot; a denial by the concurrency limit charges no token.
    limits = [cc(5, 60), tb(1, 1)]
    r, _ = lease_check(["rl:{t}:cc4", "rl:{t}:tb4"], limits, "d1", 60000,
                       now=N)
    expect_eq("first", r.allowed, 1)
    r, _ = lease_check(["rl:{t}:cc4", "rl:{t}:tb4"], limits, "d2", 60000,
                       now=N)
    expect_eq("bucket empty", r.allowed, 0)
    expect_eq("cc allowed on its own", r.limits[0].allowed, 1)
    expect_eq("and reports the slots free now", r.limits[0].remaining, 4)
    expect_eq("one slot held", cmd("ZCARD", "rl:{t}:cc4"), 1)
    limits = [cc(1, 60), tb(5, 1)]
    lease_check(["rl:{t}:cc5", "rl:{t}:tb5"], limits, "d3", 60000, now=N)
    r, _ = lease_check(["rl:{t}:cc5", "rl:{t}:tb5"], limits, "d4", 60000,
                       now=N)
    expect_eq("cc full", r.allowed, 0)
    expect_state("one token charged", "rl:{t}:tb5", {"tokens": 4, "ts": N})
    # A cost counts on the bucket; the concurrency limit takes one slot.
    r, _ = lease_check(["rl:{t}:cc6", "rl:{t}:tb6"], [cc(2, 60), tb(5, 1)],
                       "d5", 60000, cost=4, now=N)
    expect_eq("cost 4", (r.allowed, r.limits[0].remaining,
                         r.limits[1].remaining), (1, 1, 1))


def test_cc_needs_lease():
    expect_error("commit without a lease", "takes a lease",
                 ["rl:{t}:cc7"], ["1", "0", "1"] + cc(2, 60))
    r = check(["rl:{t}:cc7"], [cc(2, 60)], peek=1, now=N)
    expect_eq("a peek needs none", r.allowed, 1)


def test_lease_replay():
    # Sent again (peek 4) after the first send took the lease: the first
    # reply comes back and no second slot is taken.
    first = lease_check(["rl:{t}:cc8"], [cc(5, 60)], "e1", 60000, now=N,
                        slot_key="rl:{t}:req:x", rid="q1")
    again = lease_check(["rl:{t}:cc8"], [cc(5, 60)], "e1", 60000,
                        now=N + 5000, mode=4, slot_key="rl:{t}:req:x",
                        rid="q1")
    expect_eq("the first reply", (len(again[0]), again[0].limits,
                                  again[1]),
              (len(first[0]), first[0].limits, first[1]))
    expect_eq("one slot", cmd("ZCARD", "rl:{t}:cc8"), 1)
    # The record keeps the reply; the reply slot is not written.
    expect_eq("no reply slot written", cmd("GET", "rl:{t}:req:x"), None)
    # A resend whose first send was a denial (no record) is decided
    # afresh: with the one slot of 1 held, denied again.
    lease_check(["rl:{t}:cc8b"], [cc(1, 60)], "e2", 60000, now=N)
    r, _ = lease_check(["rl:{t}:cc8b"], [cc(1, 60)], "e3", 60000, now=N,
                       mode=4, slot_key="rl:{t}:req:x", rid="q2")
    expect_eq("a resend after a denial: denied", r.allowed, 0)
    expect_eq("and writes no record", cmd("EXISTS", "rl:{t}:lease:e3"), 0)


def test_lease_extend():
    # A lease of 2 s extended to 10 s at 1 s holds its slot until 11 s.
    lease_check(["rl:{t}:cc9"], [cc(1, 2)], "f1", 2000, now=N)
    # The tenant's set of leases outlives the extended lease too: its
    # expiry is renewed (shortened by hand here to show it).
    cmd("PEXPIRE", "rl:{t}:leases", 5000)
    got = lease_op("f1", "e", 10000, now=N + 1000000)
    expect_eq("extended", got, [1, NMS + 1000, 10000])
    expect_ttl("rl:{t}:leases", 3660000)
    r, _ = lease_check(["rl:{t}:cc9"], [cc(1, 2)], "f2", 2000,
                       now=N + 10999000)
    expect_eq("held at 10.999 s", r.allowed, 0)
    expect_ttl("rl:{t}:cc9", 11000)
    got = lease_op("f1", "e", now=N + 10999000)
    expect_eq("its own ttl again", got, [1, NMS + 10999, 2000])
    got = lease_op("f1", "r", now=N + 11000000)
    expect_eq("released", got, [1, NMS + 11000, 1, 0])
    expect_error("ttl out of range", "1000..3600000",
                 [lkey("f2")], ["999", "e", "f2"])


def test_settle_token_budget():
    # A 10,000-token budget refilled 10 a second. Reserve 1,000, settle
    # 350: 650 come back. Then drain it to 1,000, reserve those, settle
    # 1,500: the budget is at -500, and the next check waits for the
    # refill of 501 tokens.
    b = [tb(10000, 10)]
    r, _ = lease_check(["rl:{t}:tb10"], b, "g1", 300000, cost=1000, now=N)
    expect_eq("reserved", r.limits[0].remaining, 9000)
    expect_eq("record", lease_op("g1", "r", 350, now=N),
              [1, NMS, 0, -650])
    expect_state("650 back", "rl:{t}:tb10", {"tokens": 9650, "ts": N})
    check(["rl:{t}:tb10"], b, cost=8650, now=N)
    r, _ = lease_check(["rl:{t}:tb10"], b, "g2", 300000, cost=1000, now=N)
    expect_eq("reserved the last 1,000", r.limits[0].remaining, 0)
    expect_eq("settled", lease_op("g2", "r", 1500, now=N), [1, NMS, 0, 500])
    expect_state("-500", "rl:{t}:tb10", {"tokens": -500, "ts": N})
    r = check(["rl:{t}:tb10"], b, now=N)
    expect_reply("waits for the refill", r, reply(
        allowed=0, now_ms=NMS, limits=[lim(
            allowed=0, limit=10000, remaining=0, reset_ms=1050000,
            retry_after_ms=50100)]))
    r = check(["rl:{t}:tb10"], b, now=N + 50100000)
    expect_eq("passes after it", r.allowed, 1)


def test_settle_other_algorithms():
    # gcra: 10 a second (T = 100 ms), burst 9: reserve 5 (TAT + 500 ms),
    # settle 2: 300 ms back; settle 8 later: 300 ms more.
    g = [gcra(10, 1000000, 9)]
    lease_check(["rl:{t}:g11"], g, "h1", 300000, cost=5, now=N)
    expect_state("tat", "rl:{t}:g11", {"tat": N + 500000})
    lease_op("h1", "r", 2, now=N)
    expect_state("refunded", "rl:{t}:g11", {"tat": N + 200000})
    lease_check(["rl:{t}:g11"], g, "h2", 300000, cost=5, now=N)
    lease_op("h2", "r", 8, now=N)
    expect_state("charged more", "rl:{t}:g11", {"tat": N + 1000000})
    # sliding window: the refund comes off the window charged.
    s = [sw(100, 60)]
    lease_check(["rl:{t}:s11"], s, "h3", 300000, cost=40, now=N)
    lease_op("h3", "r", 10, now=N)
    expect_eq("sw refunded", cmd("HGET", "rl:{t}:s11", "cur"), "10")
    lease_check(["rl:{t}:s11"], s, "h4", 300000, cost=10, now=N)
    lease_op("h4", "r", 25, now=N)
    expect_eq("sw charged more", cmd("HGET", "rl:{t}:s11", "cur"), "35")
    # fixed window: a refund in the window charged; none after it.
    f = [fw(100, "minute")]
    lease_check(["rl:{t}:f11"], f, "h5", 300000, cost=40, now=N)
    lease_op("h5", "r", 0, now=N)
    expect_eq("fw refunded", cmd("HGET", "rl:{t}:f11", "count"), "0")
    lease_check(["rl:{t}:f11"], f, "h6", 300000, cost=40, now=N)
    lease_op("h6", "r", 0, now=N + 60000000)
    expect_eq("no refund in the next window",
              cmd("HGET", "rl:{t}:f11", "count"), "40")


def test_lease_errors():
    # A record naming a key of another tenant is refused, and nothing
    # written; bad calls are errors.
    redis.pipeline([["EVAL", "redis.call('SET', KEYS[1], cmsgpack.pack("
                     "{ARGV[1] + 0, 60000, 1, 1, 'rl:{u}:cc'}))", "1",
                     lkey("x1"), str(NMS + 60000)]])
    cmd("ZADD", "rl:{u}:cc", str(NMS + 60000), "x1")
    expect_error("another tenant's key", "another tenant",
                 [lkey("x1")], ["-", "r", "x1", "__now_us=%d" % N])
    expect_eq("untouched", cmd("ZCARD", "rl:{u}:cc"), 1)
    expect_error("not a lease key", "not a lease key",
                 ["rl:{t}:cc"], ["-", "r", "x1"])
    expect_error("bad value", "value", [lkey("x1")], ["-1", "r", "x1"])
    expect_error("two keys", "one key", [lkey("x1"), lkey("x2")],
                 ["-", "r", "x1"])
    expect_error("lease ttl too short", "lease ttl",
                 ["rl:{t}:cc12", lkey("x3")],
                 ["1", "3", "1"] + cc(2, 60) + ["x3", "999"])
    expect_error("lease id", "lease id",
                 ["rl:{t}:cc12", lkey("x3")],
                 ["1", "3", "1"] + cc(2, 60) + ["x 3", "1000"])
    expect_error("concurrency ttl", "lease ttl",
                 ["rl:{t}:cc12", lkey("x3")],
                 ["1", "3", "1", "concurrency", "2", "999999", "0", "0",
                  "x3", "1000"])


# --- Arguments ---------------------------------------------------------------

TB = ["token_bucket", "5", "1", "0", "0"]

# (what, message in the error, KEYS, ARGV): each call must be answered with
# "ERR ratelimit: ...message...".
ARGUMENT_ERRORS = [
    ("n does not match keys", "does not match",
     ["e:a"], ["1", "0", "2"] + TB + TB),
    ("more keys than n + 3", "does not match",
     ["e:a", "e:b", "e:c", "e:d", "e:e"], ["1", "0", "1"] + TB),
    ("non-numeric cost", "cost", ["e:a"], ["x", "0", "1"] + TB),
    ("zero cost", "cost", ["e:a"], ["0", "0", "1"] + TB),
    ("fractional cost", "cost", ["e:a"], ["1.5", "0", "1"] + TB),
    ("bad peek flag", "peek must be", ["e:a"], ["1", "5", "1"] + TB),
    ("peek 2 without the reply slot", "needs the reply slot",
     ["e:a"], ["1", "2", "1"] + TB),
    ("reply slot without a call id", "call id",
     ["e:a", "e:b"], ["1", "0", "1"] + TB),
    ("reply slot, the hook where the call id goes", "call id",
     ["e:a", "e:b"], ["1", "0", "1"] + TB + ["__now_us=1"]),
    ("call id with a space", "call id",
     ["e:a", "e:b"], ["1", "0", "1"] + TB + ["a b"]),
    ("call id empty", "call id", ["e:a", "e:b"], ["1", "0", "1"] + TB + [""]),
    ("call id of 41 characters", "call id",
     ["e:a", "e:b"], ["1", "0", "1"] + TB + ["a" * 41]),
    ("call id and one more", "5 arguments",
     ["e:a", "e:b"], ["1", "0", "1"] + TB + ["a", "b"]),
    ("budget keys without its arguments", "5 arguments",
     ["e:a", "e:n", "e:m"], ["1", "0", "1"] + TB),
    ("budget of 0", "counter budget",
     ["e:a", "e:n", "e:m"], ["1", "0", "1"] + TB + ["0", "3600", "1"]),
    ("budget not a number", "counter budget",
     ["e:a", "e:n", "e:m"], ["1", "0", "1"] + TB + ["x", "3600", "1"]),
    ("budget window of 0", "budget window",
     ["e:a", "e:n", "e:m"], ["1", "0", "1"] + TB + ["5", "0", "1"]),
    ("budget mask too long", "budget mask",
     ["e:a", "e:n", "e:m"], ["1", "0", "1"] + TB + ["5", "3600", "11"]),
    ("budget mask not 0 or 1", "budget mask",
     ["e:a", "e:n", "e:m"], ["1", "0", "1"] + TB + ["5", "3600", "2"]),
    ("budget and reply slot without a call id", "call id",
     ["e:a", "e:n", "e:m", "e:b"], ["1", "0", "1"] + TB +
     ["5", "3600", "1"]),
    ("unknown algorithm", "unknown algorithm",
     ["e:a"], ["1", "0", "1", "leaky_bucket", "5", "1", "0", "0"]),
    ("zero capacity", "capacity",
     ["e:a"], ["1", "0", "1", "token_bucket", "0", "1", "0", "0"]),
    ("negative rate", "rate",
     ["e:a"], ["1", "0", "1", "token_bucket", "5", "-1", "0", "0"]),
    ("zero rate", "rate",
     ["e:a"], ["1", "0", "1", "token_bucket", "5", "0.0", "0", "0"]),
    ("non-numeric rate", "rate",
     ["e:a"], ["1", "0", "1", "token_bucket", "5", "abc", "0", "0"]),
    ("token bucket p3 not 0", "p3 must be 0",
     ["e:a"], ["1", "0", "1", "token_bucket", "5", "1", "1", "0"]),
    ("zero limit", "limit",
     ["e:a"], ["1", "0", "1", "sliding_window", "0", "10", "0", "0"]),
    ("fractional window", "window",
     ["e:a"], ["1", "0", "1", "sliding_window", "3", "1.5", "0", "0"]),
    ("sliding window p3 not 0", "p3 must be 0",
     ["e:a"], ["1", "0", "1", "sliding_window", "3", "10", "00", "0"]),
    ("gcra zero limit", "limit",
     ["e:a"], ["1", "0", "1", "gcra", "0", "1000", "0", "0"]),
    ("gcra zero period", "period",
     ["e:a"], ["1", "0", "1", "gcra", "1", "0", "0", "0"]),
    ("gcra fractional period", "period",
     ["e:a"], ["1", "0", "1", "gcra", "1", "0.5", "0", "0"]),
    ("gcra negative burst", "burst",
     ["e:a"], ["1", "0", "1", "gcra", "1", "1000", "-1", "0"]),
    ("gcra non-numeric burst", "burst",
     ["e:a"], ["1", "0", "1", "gcra", "1", "1000", "x", "0"]),
    ("gcra burst too long", "at most",
     ["e:a"], ["1", "0", "1", "gcra", "1", "1000000", "999999999999", "0"]),
    ("fixed window unknown unit", "unit",
     ["e:a"], ["1", "0", "1", "fixed_window", "5", "week", "0", "0"]),
    ("fixed window unit in capitals", "unit",
     ["e:a"], ["1", "0", "1", "fixed_window", "5", "Minute", "0", "0"]),
    ("fixed window seconds as unit", "unit",
     ["e:a"], ["1", "0", "1", "fixed_window", "5", "60", "0", "0"]),
    ("fixed window p3 not 0", "p3 must be 0",
     ["e:a"], ["1", "0", "1", "fixed_window", "5", "day", "1", "0"]),
    ("shadow not 0 or 1", "shadow",
     ["e:a"], ["1", "0", "1", "token_bucket", "5", "1", "0", "2"]),
    ("shadow empty", "shadow",
     ["e:a"], ["1", "0", "1", "token_bucket", "5", "1", "0", ""]),
    ("missing parameter", "5 arguments",
     ["e:a"], ["1", "0", "1", "sliding_window", "3", "10", "0"]),
    ("v1 layout", "5 arguments",
     ["e:a"], ["1", "0", "1", "sliding_window", "3", "10"]),
    ("extra argument", "5 arguments",
     ["e:a"], ["1", "0", "1", "sliding_window", "3", "10", "0", "0", "x"]),
    ("two extra arguments", "5 arguments",
     ["e:a"], ["1", "0", "1"] + TB + ["__now_us=1", "__now_us=1"]),
    ("hook without digits", "5 arguments",
     ["e:a"], ["1", "0", "1"] + TB + ["__now_us="]),
    ("hook not an integer", "5 arguments",
     ["e:a"], ["1", "0", "1"] + TB + ["__now_us=1.5"]),
    ("negative hook", "5 arguments",
     ["e:a"], ["1", "0", "1"] + TB + ["__now_us=-1"]),
    ("hook too late", "5 arguments",
     ["e:a"], ["1", "0", "1"] + TB + ["__now_us=9999999999999999"]),
    ("hook not last", "5 arguments",
     ["e:a", "e:b"], ["1", "0", "2"] + TB + ["__now_us=1"] + TB),
    ("no limits", "number of limits", [], ["1", "0", "0"]),
    ("more than 8 limits", "number of limits",
     ["k%d" % i for i in range(1, 10)], ["1", "0", "9"] + TB * 9),
]


def test_argument_errors():
    for what, message, keys, argv in ARGUMENT_ERRORS:
        expect_error(what, message, keys, argv)
    expect_eq("keys written by bad calls",
              cmd("EXISTS", "e:a", "e:b", "e:c", "k1", "k9"), 0)


def reply_text(got):
    """An error reply as its text, any other reply as its repr."""
    return str(got) if isinstance(got, resp.ReplyError) else repr(got)


COUNT_ERROR = "ERR ratelimit: expected 5 arguments per limit"


def test_production_clock():
    # The script embedded reads only Redis TIME: a last "__now_us="
    # argument, one the tests' script takes or one it refuses, is an
    # argument too many.
    for v in ["__now_us=1", "__now_us=%d" % N, "__now_us=00001",
              "__now_us=4503599627370496"] + BAD_HOOK:
        got = redis.pipeline([evalsha(["p:e"], ["1", "0", "1"] + TB + [v],
                                      production_sha)])[0]
        expect_eq("hook '%s'" % v, reply_text(got), COUNT_ERROR)
    # Every other bad call gets the error the tests' script gives.
    for what, _, keys, argv in ARGUMENT_ERRORS:
        want, got = redis.pipeline([evalsha(keys, argv),
                                    evalsha(keys, argv, production_sha)])
        want = reply_text(want)
        if "__now_us" in want:
            want = COUNT_ERROR
        expect_eq(what, reply_text(got), want)
    expect_eq("keys written by bad calls",
              cmd("EXISTS", "p:e", "e:a", "e:b", "e:c", "k1", "k9"), 0)
    # A call without the hook gets the reply of the tests' script, on Redis
    # TIME.
    t0 = redis_now_ms()
    want, got = redis.pipeline([
        evalsha(["p:tb"], ["1", "1", "1"] + TB),
        evalsha(["p:tb"], ["1", "1", "1"] + TB, production_sha)])
    t1 = redis_now_ms()
    want, got = Reply.parse(want), Reply.parse(got)
    if not t0 <= got.now_ms <= t1:
        raise Failed("peek: now_ms %d is not Redis time (%d..%d)" % (
            got.now_ms, t0, t1))
    want.now_ms = got.now_ms
    expect_reply("peek", got, want)
    r = Reply.parse(redis.pipeline([
        evalsha(["p:tb"], ["1", "0", "1"] + TB, production_sha)])[0])
    expect_reply("charging call", r, reply(allowed=1, now_ms=r.now_ms, limits=[
        lim(allowed=1, limit=5, remaining=4, reset_ms=1000,
            retry_after_ms=0)]))


# The number syntax is exactly the documented one: decimal digits (and for
# the rate one '.'), at most 15 characters. Everything else that Lua's
# tonumber() would take (signs, spaces, hex, exponents, inf, nan, a fraction
# where an integer is due) is rejected. Each list is of values that must be
# refused in that argument.
BAD_COST = ["+1", "-1", " 1", "1 ", "0x1", "1e0", "1E0", "1.0", "1.", ".5",
            "inf", "nan", "", "0000000000000001"]
BAD_N = ["0", "00", "9", "09", "+1", "1.0", "1e0", " 1", "0000000000000001"]
BAD_INTEGER = ["+5", "-5", " 5", "5 ", "0x5", "5e0", "5.0", "5.", "0",
               "0000000000000000", "1000000000000000", "inf"]
BAD_BURST = ["-0", "+0", " 0", "0x0", "0e0", "0.0", "", "0000000000000000"]
BAD_RATE = ["1e3", "1E3", "+1", "-1", "0x1p3", "0x10", " 1", "1 ", "0", "0.0",
            "00.00", ".", "", "1.5.", "1..5", "inf", "nan",
            "0.00000000000001", "1234567890123456"]
BAD_HOOK = ["__now_us=+1", "__now_us=1e3", "__now_us=0x10", "__now_us=1 ",
            " __now_us=1", "__now_us=4503599627370497",
            "__now_us=00000000000000001"]
# (what, the argument's place in a limit, the message, the limit with the
# value at that place)
BAD_INTEGER_PLACES = [
    ("capacity", "limit 1: capacity must be a positive integer",
     ["token_bucket", None, "1", "0", "0"]),
    ("window", "limit 1: window must be a positive integer",
     ["sliding_window", "3", None, "0", "0"]),
    ("period", "limit 1: period must be a positive integer",
     ["gcra", "1", None, "0", "0"]),
    ("fixed window limit", "limit 1: limit must be a positive integer",
     ["fixed_window", None, "day", "0", "0"]),
]
# (rate, ms to refill one token: 1000 / rate rounded up)
RATES = [(".5", 2000), ("5.", 200), ("007.5", 134), ("0.5", 2000)]


def test_number_syntax():
    for v in BAD_COST:
        expect_error("cost '%s'" % v, "cost must be an integer >= 1",
                     ["e:n"], [v, "0", "1"] + TB)
    for v in BAD_N:
        expect_error("n '%s'" % v, "number of limits must be 1..8",
                     ["e:n"], ["1", "0", v] + TB)
    for v in BAD_INTEGER:
        for what, message, spec in BAD_INTEGER_PLACES:
            spec = [v if s is None else s for s in spec]
            expect_error("%s '%s'" % (what, v), message,
                         ["e:n"], ["1", "0", "1"] + spec)
    for v in BAD_BURST:
        expect_error("burst '%s'" % v,
                     "limit 1: burst must be an integer >= 0",
                     ["e:n"], ["1", "0", "1", "gcra", "1", "1000", v, "0"])
    for v in BAD_RATE:
        expect_error("rate '%s'" % v,
                     "limit 1: rate must be a positive decimal",
                     ["e:n"],
                     ["1", "0", "1", "token_bucket", "5", v, "0", "0"])
    for v in BAD_HOOK:
        expect_error("hook '%s'" % v, "5 arguments",
                     ["e:n"], ["1", "0", "1"] + TB + [v])
    expect_eq("keys written by bad numbers", cmd("EXISTS", "e:n"), 0)

    # Leading zeros are digits like any other.
    r = check(["num:cost"], [["token_bucket", "005", "20", "0", "0"]],
              cost="001", n="01", now=N)
    expect_reply("cost 001, n 01, capacity 005", r, reply(
        allowed=1, now_ms=NMS, limits=[
            lim(allowed=1, limit=5, remaining=4, reset_ms=50,
                retry_after_ms=0)]))
    r = check(["num:burst"], [gcra(10, 1000000, "00")], now=N)
    expect_reply("burst 00", r, reply(allowed=1, now_ms=NMS, limits=[
        lim(allowed=1, limit=1, remaining=0, reset_ms=100,
            retry_after_ms=0)]))
    r = check(["num:%d" % i for i in range(1, 9)], [TB] * 8, peek=1, n="08",
              now=N)
    expect_eq("n 08: reply length", len(r), 42)
    # 15 digits are still exact.
    r = check(["num:big"], [tb(999999999999999, 1)], peek=1, now=N)
    expect_reply("15-digit capacity", r, reply(allowed=1, now_ms=NMS, limits=[
        lim(allowed=1, limit=999999999999999, remaining=999999999999998,
            reset_ms=1000, retry_after_ms=0)]))
    # Rates: the time to refill one token is 1000 / rate ms, rounded up.
    for rate, reset_ms in RATES:
        r = check(["num:rate:" + rate], [tb(1, rate)], now=N)
        expect_reply("rate " + rate, r, reply(allowed=1, now_ms=NMS, limits=[
            lim(allowed=1, limit=1, remaining=0, reset_ms=reset_ms,
                retry_after_ms=0)]))
    # The smallest rate with 15 characters: the reset and the TTL are
    # capped at 10^15 ms.
    t0 = redis_now_ms()
    r = check(["num:slow"], [tb(1, "0.0000000000001")], now=N)
    expect_reply("slowest rate", r, reply(allowed=1, now_ms=NMS, limits=[
        lim(allowed=1, limit=1, remaining=0, reset_ms=1000000000000000,
            retry_after_ms=0)]))
    expect_pttl("num:slow", 1000000000000000, t0)
    # The hook: leading zeros, and the latest time it takes, 2^52 µs.
    r = Reply.parse(redis.pipeline([evalsha(
        ["num:hook0"], ["1", "0", "1"] + fw(3, "minute") +
        ["__now_us=00001"])])[0])
    expect_reply("hook 00001", r, reply(allowed=1, now_ms=0, limits=[
        lim(allowed=1, limit=3, remaining=2, reset_ms=60000,
            retry_after_ms=0)]))
    r = check(["num:hook1"], [gcra(1, 1000, 0)], now=4503599627370496)
    expect_reply("hook 2^52", r, reply(allowed=1, now_ms=4503599627370,
                                       limits=[
        lim(allowed=1, limit=1, remaining=0, reset_ms=1, retry_after_ms=0)]))
    expect_state("state at 2^52", "num:hook1", {"tat": 4503599627371496})


def test_state_edited_by_hand():
    # A state edited by hand is read as before and written back as '%.0f'
    # formats it (half to even); NaN tokens count as none, a NaN window
    # index as the current window. The 2 s window holding N has the index
    # 917697610.
    w10 = [sw(10, 2)]
    cmd("HSET", "hand:sw", "win", "917697610", "cur", "1.5", "prev", "-0")
    r = check(["hand:sw"], w10, now=N)
    expect_reply("sliding window reply", r, reply(
        allowed=1, now_ms=NMS, limits=[
            lim(allowed=1, limit=10, remaining=7, reset_ms=4000,
                retry_after_ms=0)]))
    expect_state("sliding window state", "hand:sw",
                 {"win": 917697610, "cur": 2, "prev": "-0"})
    cmd("HSET", "hand:sw2", "win", "nan", "cur", "2", "prev", "1")
    r = check(["hand:sw2"], w10, now=N)
    expect_reply("NaN window reply", r, reply(allowed=1, now_ms=NMS, limits=[
        lim(allowed=1, limit=10, remaining=6, reset_ms=4000,
            retry_after_ms=0)]))
    expect_state("NaN window state", "hand:sw2",
                 {"win": 917697610, "cur": 3, "prev": 1})
    cmd("HSET", "hand:fw", "win", "1835395200", "count", "0.5")
    r = check(["hand:fw"], [fw(10, "minute")], now=N)
    expect_reply("fixed window reply", r, reply(
        allowed=1, now_ms=NMS, limits=[
            lim(allowed=1, limit=10, remaining=8, reset_ms=40000,
                retry_after_ms=0)]))
    expect_state("fixed window state", "hand:fw",
                 {"win": 1835395200, "count": 2})
    cmd("HSET", "hand:g", "tat", "%d.5" % N)
    r = check(["hand:g"], G10B2, now=N)
    expect_reply("gcra reply", r, reply(allowed=1, now_ms=NMS, limits=[
        lim(allowed=1, limit=3, remaining=1, reset_ms=101,
            retry_after_ms=0)]))
    expect_state("gcra state", "hand:g", {"tat": N + 100000})
    cmd("HSET", "hand:tb", "tokens", "nan", "ts", str(N))
    r = check(["hand:tb"], TB5, now=N)
    expect_reply("NaN tokens reply", r, reply(allowed=0, now_ms=NMS, limits=[
        lim(allowed=0, limit=5, remaining=0, reset_ms=250,
            retry_after_ms=50)]))
    expect_state("NaN tokens state", "hand:tb", {"tokens": "nan", "ts": N})


# --- A clock that goes back and forth ----------------------------------------
#
# Redis time is the clock of whichever node is the master. Two nodes whose
# clocks are 30 s apart, failing over to each other every 20 s, make the
# script's clock jump 30 s one way, then back, and so on. Each flapping
# case checks one key 4 times a second of true time with the test clock,
# with the other node 30 s behind the first (which is right) and with it
# 30 s ahead, and judges what passed by the leading clock: at each call the
# latest time the script has been given so far, which stands still while
# the node behind is master. The windows of the leading clock are those a
# counter can keep to when its clock goes back. Without the guard against
# going back a window, the fixed window let 132 through in the 5 minutes
# below, where 60 are allowed, and the sliding window 140 where 87 pass on
# a steady clock.

FLAP_LAG_US = 30000000
FLAP_EVERY_US = 20000000


def flap(key, limits, start_s, seconds, lag_us, step_us=250000):
    """Checks key once every step_us of true time for seconds from start_s
    (unix seconds), pipelined: on the true clock for FLAP_EVERY_US, then
    lag_us behind it (ahead if negative) for as long, and so on. Returns
    the true time and the leading clock (µs) of each call allowed, in
    order, as two lists."""
    start_us = start_s * 1000000
    trues = range(start_us, start_us + seconds * 1000000, step_us)
    cmds = []
    leads = []
    lead = 0
    for t in trues:
        if (t - start_us) // FLAP_EVERY_US % 2 == 1:
            t -= lag_us
        lead = max(lead, t)
        leads.append(lead)
        cmds.append(evalsha([key], check_argv(limits, 1, 0, t, None)))
    out = [Reply.parse(r).allowed for r in redis.pipeline(cmds)]
    return ([t for t, ok in zip(trues, out) if ok],
            [t for t, ok in zip(leads, out) if ok])


def expect_per_window(what, times_us, window_s, limit):
    """No window of window_s seconds (counted from the epoch) holds more
    than limit of times_us."""
    counts = {}
    for t in times_us:
        w = t // (window_s * 1000000) * window_s
        counts[w] = counts.get(w, 0) + 1
    expect_eq(what + ": windows over %d (start: count)" % limit,
              {w: c for w, c in counts.items() if c > limit}, {})


def test_flap_fw():
    # 12 per calendar minute is 60 in the 5 minutes from 2028-02-29
    # 00:00:00. No minute of the leading clock lets more than 12 through;
    # with the node behind, neither does a minute of true time, so 60 pass
    # in all. (With the node ahead, 72 pass: its minutes begin 30 s early.)
    a = [fw(12, "minute")]
    start_s = 1835395200
    trues, leads = flap("flap:fw:behind", a, start_s, 300, FLAP_LAG_US)
    expect_per_window("behind, leading clock", leads, 60, 12)
    expect_per_window("behind, true time", trues, 60, 12)
    expect_eq("behind: allowed in the 5 minutes", len(trues), 60)
    trues, leads = flap("flap:fw:ahead", a, start_s, 300, -FLAP_LAG_US)
    expect_per_window("ahead, leading clock", leads, 60, 12)


def test_fw_clock_back():
    # A key of the next minute (1835395260) found 30 s before that minute
    # begins: it goes on counting there, until its end, and keeps its
    # TTL. A key two minutes ahead is replaced by the current minute.
    a = [fw(3, "minute")]
    cmd("HSET", "back:fw", "win", "1835395260", "count", "2")
    t0 = redis_now_ms()
    cmd("PEXPIRE", "back:fw", 99000)
    r = check(["back:fw"], a, now=N + 10000000)
    expect_reply("next minute kept", r, reply(
        allowed=1, now_ms=NMS + 10000, limits=[
            lim(allowed=1, limit=3, remaining=0, reset_ms=90000,
                retry_after_ms=0)]))
    expect_state("next minute kept", "back:fw",
                 {"win": 1835395260, "count": 3})
    expect_pttl("back:fw", 99000, t0)
    r = check(["back:fw"], a, now=N + 10000000)
    expect_reply("next minute full", r, reply(
        allowed=0, now_ms=NMS + 10000, limits=[
            lim(allowed=0, limit=3, remaining=0, reset_ms=90000,
                retry_after_ms=90000)]))
    cmd("HSET", "back:fw2", "win", "1835395320", "count", "3")
    t0 = redis_now_ms()
    r = check(["back:fw2"], a, now=N)
    expect_reply("two minutes ahead", r, reply(
        allowed=1, now_ms=NMS, limits=[
            lim(allowed=1, limit=3, remaining=2, reset_ms=40000,
                retry_after_ms=0)]))
    expect_state("two minutes ahead", "back:fw2",
                 {"win": 1835395200, "count": 1})
    expect_pttl("back:fw2", 41000, t0)
    # January 2028 (from 1830297600), found 20 s before it: it ends on
    # February 1 (1832976000).
    a = [fw(3, "month")]
    cmd("HSET", "back:fw:month", "win", "1830297600", "count", "1")
    r = check(["back:fw:month"], a, now=1830297580000000)
    expect_reply("next month kept", r, reply(
        allowed=1, now_ms=1830297580000, limits=[
            lim(allowed=1, limit=3, remaining=1,
                reset_ms=(1832976000 - 1830297580) * 1000,
                retry_after_ms=0)]))
    expect_state("next month kept", "back:fw:month",
                 {"win": 1830297600, "count": 2})


def sw_estimate(times_us, t, window_s):
    """The sliding window's estimate at t of the calls at times_us: those
    of the previous window weighed by how much of it is left."""
    window_us = window_s * 1000000
    current = t // window_us
    elapsed = t - current * window_us
    cur = sum(1 for x in times_us if x // window_us == current)
    prev = sum(1 for x in times_us if x // window_us == current - 1)
    return prev * (1 - elapsed / window_us) + cur


def test_flap_sw():
    # 60 per 300 s, for 5 minutes from 160 s before a window boundary
    # (2028-02-29 00:00:00). Judged by the leading clock, every call
    # allowed found the estimate of those allowed before it at limit - 1
    # or less, as on a steady clock.
    a = [sw(60, 300)]
    for name, lag_us in (("behind", FLAP_LAG_US), ("ahead", -FLAP_LAG_US)):
        _, allowed = flap("flap:sw:" + name, a, 1835395200 - 160, 300,
                          lag_us)
        over = [(t, round(sw_estimate(allowed[:i], t, 300), 3))
                for i, t in enumerate(allowed)
                if sw_estimate(allowed[:i], t, 300) + 1 > 60 + 1e-9]
        expect_eq(name + ": allowed over the estimate (time, estimate)",
                  over[:3], [])
        expect_per_window(name, allowed, 300, 60)


def test_sw_clock_back():
    # A key of the next 10 s window (index 183539523, from N + 10 s) found
    # 1 s before it begins is evaluated as at its start, where prev weighs
    # fully, and keeps its window and TTL; back on the later clock, cur
    # stays cur. A key two windows ahead is kept as the current window.
    a = [sw(10, 10)]
    cmd("HSET", "back:sw", "win", "183539523", "cur", "3", "prev", "4")
    t0 = redis_now_ms()
    cmd("PEXPIRE", "back:sw", 99000)
    r = check(["back:sw"], a, now=N + 9000000)
    expect_reply("next window kept", r, reply(
        allowed=1, now_ms=NMS + 9000, limits=[
            lim(allowed=1, limit=10, remaining=2, reset_ms=20000,
                retry_after_ms=0)]))
    expect_state("next window kept", "back:sw",
                 {"win": 183539523, "cur": 4, "prev": 4})
    expect_pttl("back:sw", 99000, t0)
    # 4 * 0.95 + 4 + 1 = 8.8
    r = check(["back:sw"], a, now=N + 10500000)
    expect_eq("forward again: remaining", r.limits[0].remaining, 1)
    expect_state("forward again", "back:sw",
                 {"win": 183539523, "cur": 5, "prev": 4})
    cmd("HSET", "back:sw2", "win", "183539524", "cur", "3", "prev", "4")
    r = check(["back:sw2"], a, now=N + 5000000)
    # 4 * 0.5 + 3 + 1 = 6
    expect_eq("two ahead: remaining", r.limits[0].remaining, 4)
    expect_state("two ahead", "back:sw2",
                 {"win": 183539522, "cur": 4, "prev": 4})


def test_flap_gcra():
    # 60 per 300 s with burst 59, one call every 3 s for 15 minutes: in
    # every span of the leading clock, from one call allowed to another,
    # at most burst + 1 plus one per 5 s passed (a clock that goes back
    # only makes GCRA stricter: the TAT is kept).
    a = [gcra(60, 300000000, 59)]
    for name, lag_us in (("behind", FLAP_LAG_US), ("ahead", -FLAP_LAG_US)):
        _, allowed = flap("flap:gcra:" + name, a, 1835395200, 900, lag_us,
                          step_us=3000000)
        over = [(i, j) for i in range(len(allowed))
                for j in range(i, len(allowed))
                if j - i + 1 > 60 + (allowed[j] - allowed[i]) / 5000000]
        expect_eq(name + ": spans over burst + rate (first, last)",
                  over[:3], [])


def test_flap_tb():
    # A bucket of 60 refilled at 0.2 a second, the same limit as the GCRA
    # case, checked every 3 s for 15 minutes: in every span of the leading
    # clock, from one call allowed to another, at most the capacity plus
    # one per 5 s passed. (Storing the time of a charge on the clock
    # behind refilled the jump again on the clock ahead: all 300 passed,
    # where 239 pass on a steady clock.)
    a = [tb(60, "0.2")]
    for name, lag_us in (("behind", FLAP_LAG_US), ("ahead", -FLAP_LAG_US)):
        _, allowed = flap("flap:tb:" + name, a, 1835395200, 900, lag_us,
                          step_us=3000000)
        over = [(i, j) for i in range(len(allowed))
                for j in range(i, len(allowed))
                if j - i + 1 > 60 + (allowed[j] - allowed[i]) / 5000000]
        expect_eq(name + ": spans over capacity + refill (first, last)",
                  over[:3], [])


def test_tb_clock_back():
    # A bucket of 10 refilled at 1 a second, charged on a clock 5 s ahead:
    # found at N, it refills nothing until N + 5 s, keeps that time and
    # counts the wait in reset_ms, retry_after_ms and the TTL. A stored
    # time at most a full refill (10 s) ahead is kept; one further ahead
    # is forgotten, with the tokens kept (no refill), at N.
    a = [tb(10, 1)]
    cmd("HSET", "back:tb", "tokens", "2", "ts", str(N + 5000000))
    t0 = redis_now_ms()
    r = check(["back:tb"], a, now=N)
    expect_reply("time ahead kept", r, reply(
        allowed=1, now_ms=NMS, limits=[
            lim(allowed=1, limit=10, remaining=1, reset_ms=14000,
                retry_after_ms=0)]))
    expect_state("time ahead kept", "back:tb",
                 {"tokens": 1, "ts": N + 5000000})
    # (The hash above is how earlier versions stored a bucket: it was
    # read, and the charge replaced it with the packed string.)
    expect_eq("an earlier version's hash replaced", cmd("TYPE", "back:tb"),
              "string")
    # Full again when the reply's reset_ms has passed (1 token at N + 5 s,
    # 9 s to refill), plus 2 s (a TTL set anew: see token_bucket.lua).
    expect_pttl("back:tb", 16000, t0)
    out = check_times(2, ["back:tb"], a, now=N + 1000000)
    expect_reply("last token", out[0], reply(
        allowed=1, now_ms=NMS + 1000, limits=[
            lim(allowed=1, limit=10, remaining=0, reset_ms=14000,
                retry_after_ms=0)]))
    expect_reply("empty until N + 5 s", out[1], reply(
        allowed=0, now_ms=NMS + 1000, limits=[
            lim(allowed=0, limit=10, remaining=0, reset_ms=14000,
                retry_after_ms=5000)]))
    expect_state("empty until N + 5 s", "back:tb",
                 {"tokens": 0, "ts": N + 5000000})
    r = check(["back:tb"], a, now=N + 5999999)
    expect_reply("1 µs early", r, reply(
        allowed=0, now_ms=NMS + 5999, limits=[
            lim(allowed=0, limit=10, remaining=0, reset_ms=9001,
                retry_after_ms=1)]))
    r = check(["back:tb"], a, now=N + 6000000)
    expect_reply("on time", r, reply(
        allowed=1, now_ms=NMS + 6000, limits=[
            lim(allowed=1, limit=10, remaining=0, reset_ms=10000,
                retry_after_ms=0)]))
    expect_state("on time", "back:tb", {"tokens": 0, "ts": N + 6000000})
    # Exactly a full refill ahead: kept. 1 µs more: forgotten.
    cmd("HSET", "back:tb2", "tokens", "2", "ts", str(N + 10000000))
    r = check(["back:tb2"], a, now=N)
    expect_eq("a full refill ahead: reset_ms", r.limits[0].reset_ms, 19000)
    expect_state("a full refill ahead", "back:tb2",
                 {"tokens": 1, "ts": N + 10000000})
    cmd("HSET", "back:tb3", "tokens", "2", "ts", str(N + 10000001))
    t0 = redis_now_ms()
    r = check(["back:tb3"], a, now=N)
    expect_reply("further ahead", r, reply(
        allowed=1, now_ms=NMS, limits=[
            lim(allowed=1, limit=10, remaining=1, reset_ms=9000,
                retry_after_ms=0)]))
    expect_state("further ahead", "back:tb3", {"tokens": 1, "ts": N})
    expect_pttl("back:tb3", 11000, t0)
    # A time edited by hand to a fraction is kept rounded up.
    cmd("HSET", "back:tb4", "tokens", "2", "ts", "%d.5" % (N + 1000000))
    check(["back:tb4"], a, now=N)
    expect_state("a fraction ahead", "back:tb4",
                 {"tokens": 1, "ts": N + 1000001})


# --- The cases, in the order they run ----------------------------------------

CASES = [
    ("token bucket: capacity 5 allows 5 then denies", test_tb_allows_capacity),
    ("token bucket: refill allows again after retry_after_ms",
     test_tb_refill),
    ("token bucket: refill stops at capacity", test_tb_refill_cap),
    ("token bucket: TTL is set and bounded", test_tb_ttl),
    ("token bucket: cost above capacity never passes, writes nothing",
     test_tb_cost_above_capacity),
    ("token bucket: refill edge at exact times", test_tb_exact),
    ("a denial consumes nothing", test_tb_denial_charges_nothing),
    ("peek writes nothing", test_peek_writes_nothing),
    ("sliding window: limit 3 allows 3 then denies", test_sw_limit),
    ("sliding window: after rollover the previous window weighs in",
     test_sw_rollover),
    ("sliding window: weighting at half the window", test_sw_weighting),
    ("sliding window: cost above limit never passes",
     test_sw_cost_above_limit),
    ("sliding window: window edge at exact times", test_sw_exact),
    ("gcra: burst 2 lets 3 through, then denies", test_gcra_burst),
    ("gcra: refills one emission interval at a time", test_gcra_refill),
    ("gcra: burst 0 spaces requests strictly", test_gcra_burst_zero),
    ("gcra: emission interval rounds up", test_gcra_interval_rounding),
    ("gcra: period under a millisecond", test_gcra_sub_ms),
    ("gcra: a cost above 1 moves the TAT by cost intervals", test_gcra_cost),
    ("gcra: cost above burst + 1 never passes, writes nothing",
     test_gcra_cost_above_burst),
    ("gcra: Redis TIME and retry_after_ms", test_gcra_real_time),
    ("fixed window: limit 3 per minute, denial charges nothing",
     test_fw_limit),
    ("fixed window: cost above limit never passes, writes nothing",
     test_fw_cost_above_limit),
    ("fixed window: minute edge", test_fw_edge_minute),
    ("fixed window: hour edge", test_fw_edge_hour),
    ("fixed window: day edge", test_fw_edge_day),
    ("fixed window: month edge, Feb 29 2028 to Mar 1", test_fw_edge_month),
    ("fixed window: month lengths", test_fw_month_lengths),
    ("fixed window: Redis TIME and retry_after_ms", test_fw_real_time),
    ("sliding and fixed window: a write in the key's window keeps its TTL",
     test_ttl_kept_within_window),
    ("all-or-nothing across a token bucket and a sliding window",
     test_all_or_nothing),
    ("all-or-nothing across four algorithms", test_all_or_nothing_four),
    ("shadow: a denying shadow limit does not block and is not charged",
     test_shadow_denies),
    ("shadow: a denial by an enforced limit charges no shadow limit",
     test_shadow_enforced_denies),
    ("shadow: only shadow limits never deny", test_shadow_only),
    ("shadow: a peek writes nothing", test_shadow_peek),
    ("sent twice: a charging call is replayed with peek 2, charged once",
     test_replay_allowed),
    ("sent twice: only peek 2 replays; with nothing stored it decides",
     test_replay_only_when_sent_again),
    ("sent twice: a denial is decided again, stores nothing",
     test_replay_denial),
    ("sent twice: a peek stores nothing", test_replay_peek),
    ("sent twice: several limits and -1 come back exactly",
     test_replay_several),
    ("sent twice: with Redis TIME, the first reply comes back",
     test_replay_real_time),
    ("bad arguments give ERR ratelimit: errors", test_argument_errors),
    ("the script embedded refuses __now_us= and otherwise answers alike",
     test_production_clock),
    ("numbers: exactly digits (and one . in a rate), at most 15",
     test_number_syntax),
    ("a state edited by hand is read and rewritten as before",
     test_state_edited_by_hand),
    ("fixed window: a clock flapping 30 s every 20 s, 12 per minute",
     test_flap_fw),
    ("fixed window: a clock back from the next window keeps that window",
     test_fw_clock_back),
    ("sliding window: a clock flapping 30 s every 20 s, 60 per 300 s",
     test_flap_sw),
    ("sliding window: a clock back from the next window keeps that window",
     test_sw_clock_back),
    ("gcra: a clock flapping 30 s every 20 s only makes it stricter",
     test_flap_gcra),
    ("token bucket: a clock flapping 30 s every 20 s refills no jump twice",
     test_flap_tb),
    ("token bucket: a time ahead of the clock is kept, up to a full refill",
     test_tb_clock_back),
    ("budget: the counter past the budget is refused, old ones still pass",
     test_budget_refuses_new_counters),
    ("budget: its keys expire with the window, the refusal says when",
     test_budget_keys_expire_with_the_window),
    ("budget: another tenant is not affected", test_budget_other_tenant),
    ("budget: a counter that comes back within the window counts once",
     test_budget_counts_distinct_counters),
    ("budget: only counters marked 1 count", test_budget_mask),
    ("budget: a peek and a denial are answered as ever",
     test_budget_peek_and_denial),
    ("budget: existing counters send it no command",
     test_budget_existing_counters_pay_nothing),
    ("budget: with the reply slot, replayed once, refusals not stored",
     test_budget_replay),
    ("concurrency: max 3 takes 3 leases, a denial and a peek take none",
     test_cc_acquire_deny),
    ("concurrency: leases expire at their ttl and are dropped",
     test_cc_expiry),
    ("leases: a release frees at once; twice or unknown changes nothing",
     test_cc_release),
    ("concurrency: all-or-nothing with a token bucket", test_cc_all_or_nothing),
    ("concurrency: a commit needs a lease, a peek does not",
     test_cc_needs_lease),
    ("leases: sent again, the lease is taken once", test_lease_replay),
    ("leases: an extension moves the expiry of the slots", test_lease_extend),
    ("leases: a token budget settled: 650 back, then -500 and a wait",
     test_settle_token_budget),
    ("leases: settled on gcra, sliding and fixed windows",
     test_settle_other_algorithms),
    ("leases: a record naming another tenant, bad calls: errors",
     test_lease_errors),
]


# --- Server and script -------------------------------------------------------

class BailOut(Exception):
    """The tests cannot run at all."""


def start_redis(port, workdir):
    """Starts a private redis-server on 127.0.0.1:port and returns its Popen
    and a connection to it, once it answers. Raises BailOut if it does not
    start, or if another server answers on the port."""
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no", "--daemonize", "no",
         "--dir", workdir, "--pidfile", os.path.join(workdir, "redis.pid"),
         "--logfile", os.path.join(workdir, "redis.log")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    for _ in range(50):
        try:
            conn = resp.Connection(port)
            if conn.command("PING") == b"PONG":
                break
            conn.close()
        except (OSError, resp.ReplyError, resp.ProtocolError):
            pass
        if proc.poll() is not None:
            raise BailOut("redis-server did not start on port %d" % port, proc)
        time.sleep(0.1)
    else:
        raise BailOut("redis-server did not start on port %d" % port, proc)
    # Make sure the server answering is ours and not another one on the port.
    info = conn.command("INFO", "server").decode()
    if "process_id:%d" % proc.pid not in info.split("\r\n"):
        conn.close()
        raise BailOut("port %d is answered by another redis-server" % port,
                      proc)
    return proc, conn


def load_script(conn, path):
    """Loads the script in the file path; returns its SHA1."""
    try:
        with open(path) as f:
            script = f.read()
    except OSError as e:
        raise BailOut("cannot read the script: %s (t/lua_test.sh builds "
                      "it with make first)" % e)
    try:
        digest = conn.command("SCRIPT", "LOAD", script).decode()
    except resp.ReplyError as e:
        raise BailOut("SCRIPT LOAD failed: %s" % e)
    if not re.fullmatch(r"[0-9a-f]{40}", digest):
        raise BailOut("SCRIPT LOAD failed: %s" % digest)
    return digest


def run_cases():
    passed = failed = 0
    for name, case in CASES:
        try:
            case()
        except Failed as e:
            detail = str(e)
        except (resp.ReplyError, resp.ProtocolError, OSError) as e:
            detail = "%s: %s" % (type(e).__name__, e)
        else:
            passed += 1
            print("ok - %s" % name, flush=True)
            continue
        failed += 1
        print("not ok - %s: %s" % (name, detail), flush=True)
    return passed, failed


def on_term(signum, frame):
    sys.exit(143)


def main():
    global redis, sha, production_sha
    port = int(os.environ.get("LUA_TEST_REDIS_PORT", "16399"))
    signal.signal(signal.SIGTERM, on_term)
    workdir = tempfile.mkdtemp(prefix="lua_test.")
    proc = None
    try:
        try:
            proc, redis = start_redis(port, workdir)
            sha = load_script(redis, LUA_SCRIPT)
            production_sha = load_script(redis, LUA_PRODUCTION_SCRIPT)
        except BailOut as e:
            if len(e.args) > 1:
                proc = e.args[1]
            print("Bail out! %s" % e.args[0])
            if proc is not None:
                # A server that could not bind writes why, then exits.
                try:
                    proc.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    pass
            try:
                with open(os.path.join(workdir, "redis.log")) as log:
                    for line in log:
                        print("# " + line.rstrip("\n"))
            except OSError:
                pass
            return 1
        passed, failed = run_cases()
        print("# %d expectations checked" % checks)
        print("%d passed, %d failed" % (passed, failed))
        return 1 if failed else 0
    except KeyboardInterrupt:
        return 130
    finally:
        if redis is not None:
            redis.close()
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
