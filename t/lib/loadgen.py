#!/usr/bin/env python3
"""loadgen.py -- a small, bounded HTTP load generator for the fault tests.

It sends POST requests with an X-API-Key header to a server on the loopback
interface, over a few kept-alive HTTP/1.1 connections driven by one
selector loop, and writes one line per request to a file:

    start_ms <TAB> latency_ms <TAB> status <TAB> key

(start_ms is Unix time in milliseconds; status 0 means no answer).  Every
run is bounded twice: by --requests and by --duration; requests still in
flight when the duration is over get --timeout more seconds.  A connection
left idle for IDLE_REOPEN_S is closed and a new one opened in its place
before it carries a request: lighttpd closes a kept-alive connection
after 5 s idle, and a request sent just as it does would get no answer.

    loadgen.py run --port P --out FILE [--key K]... [--keys-file F]
                   [--random-keys] [--requests N] [--duration S] [--rate R]
                   [--concurrency C] [--path PATH] [--body JSON]
                   [--new-subjects PREFIX]
        prints {"requests": n, "answered": n, "elapsed_s": s, ...}
    loadgen.py stats FILE [--from MS] [--to MS]
        prints {"requests": n, "s200": n, "s401": n, "s503": n, "s500": n,
                "other": n, "noanswer": n, "max_ms": x, "p99_ms": x, ...}
        for the requests that started within [--from, --to]
    loadgen.py window FILE [--steady N]
        prints {"first_ms": x, "back_ms": x, "window_ms": x, "late": n,
                "late_ms": x}
        for an outage: when the first request not answered 200 started,
        when the first of N (20) requests in a row answered 200 after it
        started, the time between, how many requests started after that
        were not answered 200, and how long after back_ms the last of
        those started (all 0 when every one was)
    loadgen.py keys N
        prints N random API keys, one a line

Keys: the --key values and the lines of --keys-file are used in turn (and
again from the start when there are more requests than keys);
--random-keys uses a new random key for every request instead.
--new-subjects gives every request a subject of its own, PREFIX-<n>, in
place of the body's.
"""

import argparse
import ipaddress
import json
import os
import selectors
import socket
import sys
import time

MAX_REQUESTS = 200000
MAX_DURATION = 120.0
MAX_CONCURRENCY = 64


def random_key():
    return "rl_spray_" + os.urandom(12).hex()


def loopback(host):
    """Refuses any address off the loopback interface."""
    try:
        addr = ipaddress.ip_address(socket.gethostbyname(host))
    except (OSError, ValueError):
        return False
    return addr.is_loopback


# Seconds a connection may idle before loadgen replaces it (see the top).
IDLE_REOPEN_S = 2.0


class Conn:
    """One kept-alive connection with at most one request in flight."""

    def __init__(self, host, port):
        self.sock = socket.create_connection((host, port), timeout=5)
        self.sock.setblocking(False)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.out = b""
        self.key = None
        self.start = 0.0
        self.idle_since = time.time()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def parse_response(buf):
    """Returns (status, bytes consumed, whether the server closes the
    connection after it) for a complete response at the start of buf, or
    None when more bytes are needed.  Knows Content-Length and chunked
    bodies, which is all lighttpd sends."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = buf[:end].decode("latin-1")
    lines = head.split("\r\n")
    parts = lines[0].split(" ", 2)
    status = int(parts[1])
    length = 0
    chunked = False
    closing = False
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value.strip())
        elif name == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
        elif name == "connection" and "close" in value.lower():
            closing = True
    pos = end + 4
    if not chunked:
        if len(buf) < pos + length:
            return None
        return status, pos + length, closing
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(buf[pos:eol].split(b";")[0], 16)
        pos = eol + 2
        if size == 0:
            # Trailers (none expected) end with an empty line.
            fin = buf.find(b"\r\n", pos)
            if fin < 0:
                return None
            return status, fin + 2, closing
        if len(buf) < pos + size + 2:
            return None
        pos += size + 2


def cmd_run(args):
    if not loopback(args.host):
        sys.exit("loadgen: only loopback addresses are allowed")
    requests = min(args.requests, MAX_REQUESTS)
    duration = min(args.duration, MAX_DURATION)
    concurrency = max(1, min(args.concurrency, MAX_CONCURRENCY))
    keys = list(args.key or [])
    if args.keys_file:
        with open(args.keys_file, encoding="ascii") as f:
            keys += [line.strip() for line in f if line.strip()]
    if not keys and not args.random_keys:
        sys.exit("loadgen: give --key, --keys-file or --random-keys")
    body = args.body.encode()
    base = json.loads(args.body) if args.new_subjects else None
    head = ("POST %s HTTP/1.1\r\nHost: %s:%d\r\n"
            "Content-Type: application/json\r\nContent-Length: %%d\r\n"
            "X-API-Key: %%%%s\r\n\r\n" % (args.path, args.host, args.port))
    template = (head % len(body)).encode()

    sel = selectors.DefaultSelector()
    out = open(args.out, "w", encoding="ascii")
    t0 = time.time()
    stop_at = t0 + duration
    sent = 0
    answered = 0
    lines = []
    idle = []

    def record(conn, status):
        now = time.time()
        lines.append("%d\t%.1f\t%d\t%s\n" % (conn.start * 1000,
                                             (now - conn.start) * 1000,
                                             status, conn.key))

    def open_conn():
        try:
            conn = Conn(args.host, args.port)
        except OSError:
            return None
        sel.register(conn.sock, selectors.EVENT_READ, conn)
        return conn

    for _ in range(concurrency):
        conn = open_conn()
        if conn is not None:
            idle.append(conn)
    if not idle:
        sys.exit("loadgen: cannot connect to %s:%d" % (args.host, args.port))
    busy = set()
    deadline = stop_at + args.timeout

    while True:
        now = time.time()
        # Hand out requests to idle connections, paced by --rate.
        while idle and sent < requests and now < stop_at:
            if args.rate > 0 and sent >= (now - t0) * args.rate:
                break
            conn = idle.pop()
            key = random_key() if args.random_keys else keys[sent % len(keys)]
            if now - conn.idle_since >= IDLE_REOPEN_S:
                sel.unregister(conn.sock)
                conn.close()
                fresh = open_conn()
                if fresh is None:
                    # The server is gone: this request gets no answer.
                    conn.key, conn.start = key, now
                    record(conn, 0)
                    sent += 1
                    continue
                conn = fresh
            conn.key = key
            conn.start = now
            if base is not None:
                base["subject"] = "%s-%d" % (args.new_subjects, sent)
                one = json.dumps(base).encode()
                data = (head % len(one)).encode() % conn.key.encode() + one
            else:
                data = template % conn.key.encode() + body
            try:
                conn.sock.send(data)
            except OSError:
                record(conn, 0)
                sel.unregister(conn.sock)
                conn.close()
                replacement = open_conn()
                if replacement is not None:
                    idle.append(replacement)
                sent += 1
                continue
            busy.add(conn)
            sent += 1
        if not busy and (sent >= requests or now >= stop_at):
            break
        if now >= deadline:
            for conn in busy:
                record(conn, 0)
                conn.close()
            busy.clear()
            break
        wait = 0.05
        if args.rate > 0 and idle and sent < requests:
            wait = max(0.0, min(wait, t0 + sent / args.rate - now))
        for skey, _ in sel.select(wait):
            conn = skey.data
            try:
                chunk = conn.sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                # The server closed the connection: a request in flight
                # has no answer; open a new connection in its place.
                sel.unregister(conn.sock)
                conn.close()
                if conn in busy:
                    busy.discard(conn)
                    record(conn, 0)
                else:
                    idle.remove(conn)
                replacement = open_conn()
                if replacement is not None:
                    idle.append(replacement)
                continue
            conn.buf += chunk
            got = parse_response(conn.buf)
            if got is None:
                continue
            status, used, closing = got
            conn.buf = conn.buf[used:]
            if conn in busy:
                busy.discard(conn)
                record(conn, status)
                answered += 1
                if closing:
                    sel.unregister(conn.sock)
                    conn.close()
                    conn = open_conn()
                if conn is not None:
                    conn.idle_since = time.time()
                    idle.append(conn)
        if len(lines) >= 1000:
            out.writelines(lines)
            lines.clear()
    out.writelines(lines)
    out.close()
    for conn in idle:
        conn.close()
    elapsed = time.time() - t0
    print(json.dumps({"requests": sent, "answered": answered,
                      "elapsed_s": round(elapsed, 3),
                      "rate": round(sent / elapsed, 1) if elapsed else 0}))


def percentile(values, p):
    if not values:
        return 0
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p / 100))]


def cmd_stats(args):
    counts = {"s200": 0, "s401": 0, "s429": 0, "s500": 0, "s503": 0,
              "other": 0, "noanswer": 0}
    latencies = []
    first = last = None
    with open(args.file, encoding="ascii") as f:
        for line in f:
            start, latency, status, _ = line.rstrip("\n").split("\t", 3)
            start = int(start)
            if args.from_ms is not None and start < args.from_ms:
                continue
            if args.to_ms is not None and start > args.to_ms:
                continue
            status = int(status)
            name = "s%d" % status
            if status == 0:
                counts["noanswer"] += 1
            elif name in counts:
                counts[name] += 1
            else:
                counts["other"] += 1
            latencies.append(float(latency))
            first = start if first is None else min(first, start)
            last = start if last is None else max(last, start)
    result = {"requests": len(latencies)}
    result.update(counts)
    result["max_ms"] = round(max(latencies), 1) if latencies else 0
    result["p50_ms"] = round(percentile(latencies, 50), 1)
    result["p99_ms"] = round(percentile(latencies, 99), 1)
    result["first_ms"] = first or 0
    result["last_ms"] = last or 0
    print(json.dumps(result))


def cmd_window(args):
    with open(args.file, encoding="ascii") as f:
        answers = sorted((int(start), int(status)) for start, _, status, _
                         in (line.rstrip("\n").split("\t", 3) for line in f))
    first = back = candidate = None
    run = late = 0
    last = None
    for start, status in answers:
        if status != 200:
            if first is None:
                first = start
            if back is not None:
                late += 1
                last = start
            run = 0
        elif first is not None and back is None:
            if run == 0:
                candidate = start
            run += 1
            if run == args.steady:
                back = candidate
    first = first or 0
    back = back if back is not None else first
    print(json.dumps({"first_ms": first, "back_ms": back,
                      "window_ms": back - first, "late": late,
                      "late_ms": (last - back) if last is not None else 0}))


def cmd_keys(args):
    for _ in range(min(args.n, MAX_REQUESTS)):
        print(random_key())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run")
    run.add_argument("--host", default="127.0.0.1")
    run.add_argument("--port", type=int, required=True)
    run.add_argument("--path", default="/v1/check")
    run.add_argument("--body", default='{"route":"/bench","subject":"loadgen"}')
    run.add_argument("--key", action="append")
    run.add_argument("--keys-file")
    run.add_argument("--random-keys", action="store_true")
    run.add_argument("--new-subjects", metavar="PREFIX")
    run.add_argument("--requests", type=int, default=1000)
    run.add_argument("--duration", type=float, default=10.0)
    run.add_argument("--rate", type=float, default=0.0,
                     help="requests per second in all; 0 = as fast as "
                     "the connections go")
    run.add_argument("--concurrency", type=int, default=4)
    run.add_argument("--timeout", type=float, default=5.0)
    run.add_argument("--out", required=True)
    stats = sub.add_parser("stats")
    stats.add_argument("file")
    stats.add_argument("--from", dest="from_ms", type=int)
    stats.add_argument("--to", dest="to_ms", type=int)
    window = sub.add_parser("window")
    window.add_argument("file")
    window.add_argument("--steady", type=int, default=20)
    keys = sub.add_parser("keys")
    keys.add_argument("n", type=int)
    args = parser.parse_args()
    {"run": cmd_run, "stats": cmd_stats, "window": cmd_window,
     "keys": cmd_keys}[args.cmd](args)


if __name__ == "__main__":
    main()
