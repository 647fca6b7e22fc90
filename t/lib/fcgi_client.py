#!/usr/bin/env python3
"""A small FastCGI client for tests: well-behaved and hostile peers.

It speaks FastCGI 1.0 as a web server would (BEGIN_REQUEST, PARAMS, STDIN,
then reads STDOUT, STDERR and END_REQUEST), and it can also misbehave on
purpose: send any sequence of raw records, stop half-way through a record
header, keep a FCGI_KEEP_CONN connection idle, announce name/value lengths
far larger than the record that holds them, or send management records
(requestId 0) of a type nobody knows.  The integration tests use it to check
that ratelimit-fcgi survives such peers (t/integration/test_hostile.sh).

It is a module (request, kept_requests, send_unread, send_raw,
hold_partial, hold_idle, crash_burst, send_management) and a command line tool with one subcommand for each; every
subcommand prints one JSON object with named fields on stdout.  Every socket
has a timeout and every loop a deadline, so nothing here can hang.

Addresses: "unix:/path" or "/path" (a Unix socket), "host:port",
"[v6]:port".  Python 3 standard library only.
"""

import argparse
import http.client
import json
import select
import selectors
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.parse

VERSION = 1
BEGIN_REQUEST = 1
ABORT_REQUEST = 2
END_REQUEST = 3
PARAMS = 4
STDIN = 5
STDOUT = 6
STDERR = 7
DATA = 8
GET_VALUES = 9
GET_VALUES_RESULT = 10
UNKNOWN_TYPE = 11

RESPONDER = 1
AUTHORIZER = 2
FILTER = 3
KEEP_CONN = 1

MAX_CONTENT = 65535

# ---------------------------------------------------------------- encoding


def record(rtype, content=b"", request_id=1, padding=None):
    """One record: the 8-byte header, content and padding (by default up to
    a multiple of 8 bytes).  Content longer than 65535 bytes is refused:
    split it with stream()."""
    if len(content) > MAX_CONTENT:
        raise ValueError("record content longer than 65535 bytes")
    if padding is None:
        padding = (8 - len(content) % 8) % 8
    return (struct.pack(">BBHHBx", VERSION, rtype, request_id, len(content),
                        padding)
            + content + b"\0" * padding)


def stream(rtype, data, request_id=1, end=True):
    """A stream (PARAMS, STDIN, ...) as records of at most 65535 bytes,
    followed by the empty record that ends it when end is true."""
    out = b""
    for i in range(0, len(data), MAX_CONTENT):
        out += record(rtype, data[i:i + MAX_CONTENT], request_id)
    if end:
        out += record(rtype, b"", request_id)
    return out


def length(n):
    """A name or value length: one byte below 128, else four bytes with the
    high bit set."""
    if n < 128:
        return struct.pack(">B", n)
    return struct.pack(">I", n | 0x80000000)


def name_value(name, value):
    """One name-value pair of a PARAMS stream; name and value are bytes or
    str (str is encoded as UTF-8)."""
    if isinstance(name, str):
        name = name.encode()
    if isinstance(value, str):
        value = value.encode()
    return length(len(name)) + length(len(value)) + name + value


def begin_request(request_id=1, role=RESPONDER, keep_conn=False):
    """A BEGIN_REQUEST record."""
    body = struct.pack(">HB5x", role, KEEP_CONN if keep_conn else 0)
    return record(BEGIN_REQUEST, body, request_id)


def encode_request(params, stdin=b"", request_id=1, keep_conn=False,
                   end_stdin=True, role=RESPONDER):
    """The bytes of a whole request: BEGIN_REQUEST, the params (a dict or a
    list of pairs) as a PARAMS stream and stdin as a STDIN stream (left
    open when end_stdin is false)."""
    items = params.items() if isinstance(params, dict) else params
    pairs = b"".join(name_value(k, v) for k, v in items)
    return (begin_request(request_id, role, keep_conn)
            + stream(PARAMS, pairs, request_id)
            + stream(STDIN, stdin, request_id, end=end_stdin))


def crash_bytes(request_id=1):
    """BEGIN_REQUEST and one PARAMS record whose only content is a pair
    announcing a name and a value of 2^30 bytes each (four-byte length
    form), far more than the 8-byte record holds.  A server that trusts
    those lengths allocates 2 GiB or reads past the record."""
    huge = length(1 << 30)
    return (begin_request(request_id)
            + record(PARAMS, huge + huge, request_id))


def management_bytes(rtype=200, count=1, content=b"\0" * 8):
    """count management records (requestId 0) of type rtype."""
    return record(rtype, content, 0) * count


def http_params(method="GET", uri="/health/live", content_length=None,
                extra=None):
    """The params a web server sends for METHOD URI, plus extra (a dict)."""
    params = {
        "GATEWAY_INTERFACE": "CGI/1.1",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "SERVER_SOFTWARE": "fcgi_client.py",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "80",
        "REMOTE_ADDR": "127.0.0.1",
        "REMOTE_PORT": "40000",
        "REQUEST_METHOD": method,
        "REQUEST_URI": uri,
        "SCRIPT_NAME": uri.split("?", 1)[0],
        "QUERY_STRING": uri.split("?", 1)[1] if "?" in uri else "",
    }
    if content_length is not None:
        params["CONTENT_LENGTH"] = str(content_length)
    if extra:
        params.update(extra)
    return params


# ---------------------------------------------------------------- sockets


def connect(address, timeout=5.0):
    """A socket connected to address, with timeout set on it."""
    if address.startswith("unix:"):
        family, target = socket.AF_UNIX, address[5:]
    elif address.startswith("/"):
        family, target = socket.AF_UNIX, address
    else:
        host, port = address.rsplit(":", 1)
        family = socket.AF_INET
        if host.startswith("["):
            host, family = host[1:-1], socket.AF_INET6
        target = (host, int(port))
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(target)
    except OSError:
        s.close()
        raise
    return s


class RecordReader:
    """Reads records from a socket until a deadline (time.monotonic())."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.closed = False  # the peer closed (EOF or reset)

    def _fill(self, need, deadline):
        while len(self.buf) < need:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("deadline")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                chunk = b""
            if not chunk:
                self.closed = True
                return False
            self.buf += chunk
        return True

    def read(self, deadline):
        """(type, request_id, content), or None when the peer closed.
        Raises socket.timeout at the deadline."""
        if not self._fill(8, deadline):
            return None
        _, rtype, rid, clen, plen = struct.unpack(">BBHHBx", self.buf[:8])
        if not self._fill(8 + clen + plen, deadline):
            return None
        content = self.buf[8:8 + clen]
        self.buf = self.buf[8 + clen + plen:]
        return rtype, rid, content


def parse_cgi(stdout):
    """(status, headers, body) of a CGI response; status is None when
    there is no header block, 200 when there is one without Status."""
    for sep in (b"\r\n\r\n", b"\n\n"):
        i = stdout.find(sep)
        if i >= 0:
            head, body = stdout[:i], stdout[i + len(sep):]
            break
    else:
        return None, {}, stdout
    headers = {}
    for line in head.replace(b"\r\n", b"\n").split(b"\n"):
        if b":" in line:
            k, v = line.split(b":", 1)
            headers[k.decode("latin-1").strip().lower()] = \
                v.decode("latin-1").strip()
    status = 200
    if "status" in headers:
        try:
            status = int(headers["status"].split()[0])
        except (ValueError, IndexError):
            status = None
    return status, headers, body


def read_response(reader, request_id=1, deadline=None):
    """Reads records until the END_REQUEST of request_id, EOF or the
    deadline.  Returns a dict: status, headers, body, stderr, app_status,
    protocol_status (None without END_REQUEST), ended (END_REQUEST seen),
    closed (the peer closed), timed_out, others (other record types)."""
    if deadline is None:
        deadline = time.monotonic() + 5.0
    out, err, others = b"", b"", []
    res = {"ended": False, "closed": False, "timed_out": False,
           "app_status": None, "protocol_status": None}
    while True:
        try:
            rec = reader.read(deadline)
        except socket.timeout:
            res["timed_out"] = True
            break
        if rec is None:
            res["closed"] = True
            break
        rtype, rid, content = rec
        if rtype == STDOUT and rid == request_id:
            out += content
        elif rtype == STDERR and rid == request_id:
            err += content
        elif rtype == END_REQUEST and rid == request_id:
            if len(content) >= 5:
                res["app_status"], res["protocol_status"] = \
                    struct.unpack(">IB", content[:5])
            res["ended"] = True
            break
        else:
            others.append(rtype)
    status, headers, body = parse_cgi(out)
    res.update(status=status, headers=headers,
               body=body.decode("utf-8", "replace"),
               stderr=err.decode("utf-8", "replace"), others=others)
    return res


def wait_closed(reader, deadline):
    """Reads (and drops) records until the peer closes or the deadline.
    Returns True when it closed."""
    try:
        while reader.read(deadline) is not None:
            pass
    except socket.timeout:
        return False
    return True


# ---------------------------------------------------------------- operations


def request(address, params, stdin=b"", keep_conn=False, timeout=5.0,
            end_stdin=True, wait_close=False):
    """One request.  Returns read_response's dict plus elapsed_s (from the
    last byte sent to the end: END_REQUEST, EOF or the timeout) and
    connect_error.  With wait_close, after END_REQUEST it also waits (within
    the same timeout) for the peer to close, and closed says whether it
    did."""
    try:
        sock = connect(address, timeout)
    except OSError as e:
        return {"connect_error": str(e), "status": None, "closed": False,
                "ended": False, "timed_out": False, "elapsed_s": 0.0}
    try:
        sent = time.monotonic()
        deadline = sent + timeout
        try:
            sock.sendall(encode_request(params, stdin, keep_conn=keep_conn,
                                        end_stdin=end_stdin))
            sent = time.monotonic()
        except OSError as e:
            return {"connect_error": None, "send_error": str(e),
                    "status": None, "closed": True, "ended": False,
                    "timed_out": False,
                    "elapsed_s": round(time.monotonic() - sent, 3)}
        reader = RecordReader(sock)
        res = read_response(reader, 1, deadline)
        if wait_close and res["ended"] and not res["closed"]:
            res["closed"] = wait_closed(reader, deadline)
            res["timed_out"] = not res["closed"]
        res["elapsed_s"] = round(time.monotonic() - sent, 3)
        res["connect_error"] = None
        return res
    finally:
        sock.close()


def kept_requests(address, params, stdin=b"", count=2, after=0,
                  between=None, timeout=5.0):
    """The same request count times, one after another on one
    FCGI_KEEP_CONN connection; after answer number after (1-based), the
    shell command between runs (and is waited for, at most timeout s).
    Returns statuses, closed (whether the peer closed before the last
    answer), between_rc and errors."""
    statuses, errors, between_rc = [], [], None
    try:
        sock = connect(address, timeout)
    except OSError as e:
        return {"statuses": [], "closed": True, "between_rc": None,
                "errors": [str(e)]}
    closed = False
    try:
        reader = RecordReader(sock)
        for i in range(1, count + 1):
            try:
                sock.sendall(encode_request(params, stdin, keep_conn=True))
            except OSError as e:
                errors.append(str(e))
                closed = True
                break
            res = read_response(reader, 1, time.monotonic() + timeout)
            statuses.append(res["status"])
            if not res["ended"]:
                errors.append("request %d not answered" % i)
                closed = res["closed"]
                break
            if res["closed"] and i < count:
                closed = True
                break
            if i == after and between:
                try:
                    between_rc = subprocess.run(
                        between, shell=True, timeout=timeout,
                        stdout=subprocess.DEVNULL).returncode
                except subprocess.TimeoutExpired:
                    errors.append("the command between took over %s s"
                                  % timeout)
    finally:
        sock.close()
    return {"statuses": statuses, "closed": closed,
            "between_rc": between_rc, "errors": errors}


def send_unread(address, count=5000, uri="/health/live", hold=15.0,
                interval=0.002, timeout=5.0):
    """A peer that asks and never reads: one FCGI_KEEP_CONN connection
    carrying a request for GET uri every interval s (up to count), none of
    whose answers is read, so the answers fill the socket until the
    application cannot write.  (Requests are spaced, not sent in one go: a
    web server never pipelines them, and the application may drop a peer
    that does.)  Sending stops when the socket has taken nothing for half
    a second, when the peer has closed, or after count; then it waits up
    to hold s for the application to close the connection.  Returns sent
    (whole requests), closed, and elapsed_s (from the last byte sent to
    the close)."""
    one = encode_request(http_params("GET", uri), keep_conn=True)
    sock = connect(address, timeout)
    sock.setblocking(False)
    sent, last = 0, time.monotonic()
    try:
        stuck = False
        while sent < count and not stuck:
            off, since = 0, time.monotonic()
            while off < len(one):
                try:
                    off += sock.send(one[off:])
                    last = time.monotonic()
                except BlockingIOError:
                    if time.monotonic() - since >= 0.5:
                        stuck = True
                        break
                    time.sleep(0.01)
                except OSError:
                    stuck = True
                    break
            if off == len(one):
                sent += 1
                time.sleep(interval)
        poller = select.poll()
        poller.register(sock, select.POLLRDHUP | select.POLLHUP)
        closed = False
        end = time.monotonic() + hold
        while not closed and time.monotonic() < end:
            for _, ev in poller.poll(100):
                if ev & (select.POLLRDHUP | select.POLLHUP | select.POLLERR):
                    closed = True
        return {"sent": sent, "closed": closed,
                "elapsed_s": round(time.monotonic() - last, 3)}
    finally:
        sock.close()

def send_raw(address, data, timeout=5.0):
    """Sends data and reads records until the peer closes or the timeout.
    Returns records (a list of [type, request_id, content length]),
    closed, send_error, elapsed_s."""
    res = {"records": [], "closed": False, "send_error": None,
           "connect_error": None}
    start = time.monotonic()
    try:
        sock = connect(address, timeout)
    except OSError as e:
        res["connect_error"] = str(e)
        res["elapsed_s"] = 0.0
        return res
    try:
        try:
            sock.sendall(data)
        except OSError as e:
            res["send_error"] = str(e)
        reader = RecordReader(sock)
        deadline = start + timeout
        while True:
            try:
                rec = reader.read(deadline)
            except socket.timeout:
                break
            if rec is None:
                res["closed"] = True
                break
            res["records"].append([rec[0], rec[1], len(rec[2])])
    finally:
        sock.close()
    res["elapsed_s"] = round(time.monotonic() - start, 3)
    return res


def _ready(path):
    """Creates the file path (when given): the held connections are in
    place, for a script that waits for them."""
    if path:
        with open(path, "w", encoding="ascii") as f:
            f.write("ready\n")


def _hold(socks, started, hold):
    """Watches the sockets until each is closed by the peer or hold
    seconds have passed since started[i].  Returns, per socket, the seconds
    from started[i] to the close, or None when it stayed open; also how
    many bytes each received."""
    sel = selectors.DefaultSelector()
    closed = [None] * len(socks)
    got = [0] * len(socks)
    for i, s in enumerate(socks):
        if s is not None:
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ, i)
    end = max(started) + hold if started else time.monotonic()
    while sel.get_map():
        left = end - time.monotonic()
        if left <= 0:
            break
        for key, _ in sel.select(min(left, 0.5)):
            i = key.data
            try:
                chunk = socks[i].recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if chunk:
                got[i] += len(chunk)
                continue
            closed[i] = round(time.monotonic() - started[i], 3)
            sel.unregister(socks[i])
    sel.close()
    return closed, got


def _summary(closed, connected):
    times = [t for t in closed if t is not None]
    return {
        "connections": len(closed),
        "connected": connected,
        "closed_by_peer": len(times),
        "open_at_end": connected - len(times),
        "close_times": times,
        "min_close_s": min(times) if times else None,
        "max_close_s": max(times) if times else None,
    }


def hold_partial(address, connections=4, nbytes=3, hold=15.0,
                 timeout=5.0, ready_file=None):
    """Opens connections that each send the first nbytes bytes of a
    BEGIN_REQUEST record (nbytes < 8: part of its header), creates
    ready_file (when given), and then waits up to hold seconds for the
    peer to close them.  Returns _summary's fields (close times counted
    from the partial send) plus connect_errors."""
    data = begin_request()[:nbytes]
    socks, started, errors = [], [], []
    for _ in range(connections):
        try:
            s = connect(address, timeout)
            s.sendall(data)
            socks.append(s)
            started.append(time.monotonic())
        except OSError as e:
            errors.append(str(e))
    _ready(ready_file)
    try:
        closed, got = _hold(socks, started, hold)
    finally:
        for s in socks:
            s.close()
    res = _summary(closed + [None] * len(errors), len(socks))
    res["connect_errors"] = errors
    res["bytes_received"] = sum(got)
    return res


def hold_idle(address, connections=4, hold=15.0, uri="/health/live",
              timeout=5.0, ready_file=None):
    """Opens connections that each complete one FCGI_KEEP_CONN request for
    GET uri, creates ready_file (when given), and then keeps them idle up
    to hold seconds, waiting for the peer to close.  Returns _summary's
    fields (close times counted from the end of the answer), statuses (of
    the requests) and errors."""
    socks, started, statuses, errors = [], [], [], []
    for _ in range(connections):
        try:
            s = connect(address, timeout)
        except OSError as e:
            errors.append(str(e))
            continue
        try:
            s.sendall(encode_request(http_params("GET", uri), keep_conn=True))
            res = read_response(RecordReader(s), 1,
                                time.monotonic() + timeout)
        except OSError as e:
            errors.append(str(e))
            s.close()
            continue
        statuses.append(res["status"])
        if not res["ended"] or res["closed"]:
            errors.append("request not answered on a kept-alive connection"
                          if not res["ended"] else
                          "connection closed despite FCGI_KEEP_CONN")
            s.close()
            continue
        socks.append(s)
        started.append(time.monotonic())
    _ready(ready_file)
    try:
        closed, _ = _hold(socks, started, hold)
    finally:
        for s in socks:
            s.close()
    res = _summary(closed, len(socks))
    res["statuses"] = statuses
    res["errors"] = errors
    return res


def _http_get(url, timeout):
    """(status or None, seconds, error) of GET url."""
    u = urllib.parse.urlsplit(url)
    start = time.monotonic()
    try:
        c = http.client.HTTPConnection(u.hostname, u.port or 80,
                                       timeout=timeout)
        try:
            c.request("GET", (u.path or "/") + ("?" + u.query if u.query
                                                 else ""))
            r = c.getresponse()
            r.read()
            status, err = r.status, None
        finally:
            c.close()
    except (OSError, http.client.HTTPException) as e:
        status, err = None, "%s: %s" % (type(e).__name__, e)
    return status, time.monotonic() - start, err


class Prober:
    """threads threads that each GET url every interval seconds (each
    request with timeout seconds) until stop(); collects the results."""

    def __init__(self, url, interval=0.1, timeout=2.0, threads=1):
        self.url, self.interval, self.timeout = url, interval, timeout
        self.results = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True)
                        for _ in range(threads)]

    def _run(self):
        while not self.stopping.is_set():
            t0 = time.monotonic()
            status, secs, err = _http_get(self.url, self.timeout)
            with self.lock:
                self.results.append((status, secs, err))
            self.stopping.wait(max(0.0, self.interval - (time.monotonic()
                                                         - t0)))

    def start(self):
        for t in self.threads:
            t.start()

    def stop(self):
        """Stops issuing probes; waits for those in flight (at most their
        timeout)."""
        self.stopping.set()
        for t in self.threads:
            t.join(self.timeout + 1.0)

    def summary(self):
        with self.lock:
            res = list(self.results)
        ok = [r for r in res if r[0] == 200]
        errs = sorted({r[2] or str(r[0]) for r in res if r[0] != 200})
        return {
            "probes": len(res),
            "probes_ok": len(ok),
            "probes_failed": len(res) - len(ok),
            "probe_max_s": round(max((r[1] for r in res), default=0.0), 3),
            "probe_errors": errs[:5],
        }


def crash_burst(address, count=50, rate=0.0, probe_url=None,
                probe_interval=0.1, probe_timeout=2.0, probe_threads=1,
                probe_lead=0.2, probe_tail=0.0, recover_wait=0.0,
                timeout=2.0):
    """Sends count crash connections (crash_bytes, then close), as fast as
    possible when rate is 0, else rate per second.  With probe_url, probes
    (Prober) run from probe_lead seconds before the first crash until
    probe_tail seconds after the last one, and those in flight then end;
    with recover_wait, right after the last crash the main thread polls
    probe_url until it answers 200 (at most recover_wait seconds) and
    reports recovery_s, from the last crash to that answer (None when it
    did not come)."""
    prober = None
    if probe_url:
        prober = Prober(probe_url, probe_interval, probe_timeout,
                        probe_threads)
        prober.start()
        time.sleep(probe_lead)
    data = crash_bytes()
    sent, errors = 0, []
    start = time.monotonic()
    for i in range(count):
        if rate > 0:
            time.sleep(max(0.0, start + i / rate - time.monotonic()))
        try:
            s = connect(address, timeout)
            try:
                s.sendall(data)
                sent += 1
            finally:
                s.close()
        except OSError as e:
            errors.append(str(e))
    last = time.monotonic()
    if prober:
        # Probing ends probe_tail seconds after the last crash, whatever
        # the recovery poll below does meanwhile.
        timer = threading.Timer(probe_tail, prober.stopping.set)
        timer.daemon = True
        timer.start()
    res = {"crashes": count, "sent": sent, "send_errors": len(errors),
           "send_error_samples": sorted(set(errors))[:3],
           "send_s": round(last - start, 3)}
    if probe_url and recover_wait > 0:
        res["recovery_s"] = None
        polls = 0
        while time.monotonic() - last < recover_wait:
            left = recover_wait - (time.monotonic() - last)
            status, _, _ = _http_get(probe_url, max(0.1, min(left, 2.0)))
            polls += 1
            if status == 200:
                res["recovery_s"] = round(time.monotonic() - last, 3)
                break
            time.sleep(0.05)
        res["recovery_polls"] = polls
    if prober:
        time.sleep(max(0.0, last + probe_tail - time.monotonic()))
        timer.cancel()
        prober.stop()
        res.update(prober.summary())
    return res


def send_management(address, connections=40, per_conn=50, rtype=200,
                    timeout=2.0, grace=0.05, max_time=20.0):
    """On each of connections connections in turn, sends per_conn
    management records of type rtype (requestId 0) at once, then reads
    until the peer closes, or until it answered every record (then waits
    grace seconds more for a close), or timeout; stops opening connections
    after max_time seconds.  Returns connections (asked), opened,
    records_sent, replies (UNKNOWN_TYPE records received), closed_by_peer,
    connect_errors, send_errors, elapsed_s."""
    res = {"connections": connections, "opened": 0, "records_sent": 0,
           "replies": 0, "closed_by_peer": 0, "connect_errors": 0,
           "send_errors": 0}
    data = management_bytes(rtype, per_conn)
    start = time.monotonic()
    for _ in range(connections):
        if time.monotonic() - start > max_time:
            break
        try:
            s = connect(address, timeout)
        except OSError:
            res["connect_errors"] += 1
            continue
        res["opened"] += 1
        try:
            try:
                s.sendall(data)
                res["records_sent"] += per_conn
            except OSError:
                res["send_errors"] += 1
            reader = RecordReader(s)
            deadline = time.monotonic() + timeout
            replies = 0
            while True:
                try:
                    rec = reader.read(deadline)
                except socket.timeout:
                    break
                if rec is None:
                    res["closed_by_peer"] += 1
                    break
                if rec[0] == UNKNOWN_TYPE:
                    replies += 1
                    if replies >= per_conn:
                        deadline = min(deadline, time.monotonic() + grace)
            res["replies"] += replies
        finally:
            s.close()
    res["elapsed_s"] = round(time.monotonic() - start, 3)
    return res


# ---------------------------------------------------------------- command line


def _unescape(text):
    """C-like escapes in text: \\xHH, \\0, \\t, \\n, \\r, \\\\."""
    out, i = bytearray(), 0
    raw = text.encode("utf-8", "surrogateescape")
    simple = {ord("0"): 0, ord("t"): 9, ord("n"): 10, ord("r"): 13,
              ord("\\"): 92}
    while i < len(raw):
        c = raw[i]
        if c == 92 and i + 1 < len(raw):
            n = raw[i + 1]
            if n == ord("x") and i + 3 < len(raw):
                out.append(int(raw[i + 2:i + 4], 16))
                i += 4
                continue
            if n in simple:
                out.append(simple[n])
                i += 2
                continue
        out.append(c)
        i += 1
    return bytes(out)


def _pair(text, escaped):
    if "=" not in text:
        raise argparse.ArgumentTypeError("expected NAME=VALUE: %r" % text)
    k, v = text.split("=", 1)
    return k.encode(), (_unescape(v) if escaped else
                        v.encode("utf-8", "surrogateescape"))


class _Ordered(argparse.Action):
    """Appends (option name, value) to one shared list, keeping order."""

    def __call__(self, parser, ns, values, option_string=None):
        items = getattr(ns, self.dest) or []
        items.append((option_string, values))
        setattr(ns, self.dest, items)


def _request_params(a):
    """The params and body of a request described by _request_args."""
    params = http_params(a.method, a.uri)
    for opt, text in a.params or []:
        k, v = _pair(text, opt == "--param-escaped")
        params[k.decode()] = v
    if a.stdin_file:
        with open(a.stdin_file, "rb") as f:
            body = f.read()
    else:
        body = _unescape(a.stdin) if a.stdin is not None else b""
    if a.content_length is not None:
        params["CONTENT_LENGTH"] = str(a.content_length)
    elif body or a.method in ("POST", "PUT", "PATCH"):
        params["CONTENT_LENGTH"] = str(len(body))
    return params, body


def _cmd_request(a):
    params, body = _request_params(a)
    return request(a.address, params, body, a.keep_conn, a.timeout,
                   not a.no_stdin_end, a.wait_close)


def _cmd_kept(a):
    params, body = _request_params(a)
    return kept_requests(a.address, params, body, a.count, a.after,
                         a.between, a.timeout)


def _request_args(r):
    """The options that describe one request."""
    r.add_argument("address", metavar="ADDRESS")
    r.add_argument("--method", default="GET")
    r.add_argument("--uri", default="/health/live")
    r.add_argument("--param", dest="params", action=_Ordered,
                   metavar="NAME=VALUE", help="a param (repeatable)")
    r.add_argument("--param-escaped", dest="params", action=_Ordered,
                   metavar="NAME=VALUE",
                   help="a param whose VALUE has \\xHH, \\0, \\t escapes")
    r.add_argument("--stdin", help="the body (\\xHH escapes allowed)")
    r.add_argument("--stdin-file", help="the body, from a file")
    r.add_argument("--content-length", type=int,
                   help="CONTENT_LENGTH to announce (default: the body's)")
    r.add_argument("--timeout", type=float, default=5.0)


def _cmd_raw(a):
    data = b""
    for opt, text in a.parts or []:
        if opt == "--hex":
            data += bytes.fromhex(text)
        else:
            f = text.split(",", 2)
            if len(f) < 2:
                raise SystemExit("--record wants TYPE,REQUEST_ID[,HEX]")
            content = bytes.fromhex(f[2]) if len(f) > 2 else b""
            data += record(int(f[0]), content, int(f[1]))
    return send_raw(a.address, data, a.timeout)


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="fcgi_client.py",
        description="A FastCGI client for tests, well-behaved or hostile. "
        "Each command prints one JSON object. ADDRESS is unix:/path, /path, "
        "host:port or [v6]:port.")
    p.add_argument("--lines", action="store_true",
                   help="print NAME VALUE lines (one field a line; strings "
                   "raw with newlines as \\n, the rest as JSON) for shell "
                   "scripts, instead of one JSON object")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    r = sub.add_parser("request", help="one normal request; prints status, "
                       "headers, body, elapsed_s, closed")
    _request_args(r)
    r.add_argument("--no-stdin-end", action="store_true",
                   help="leave the STDIN stream open (no empty record)")
    r.add_argument("--keep-conn", action="store_true",
                   help="set FCGI_KEEP_CONN")
    r.add_argument("--wait-close", action="store_true",
                   help="after the answer, wait for the peer to close")

    k = sub.add_parser("kept", help="the same request COUNT times on one "
                       "FCGI_KEEP_CONN connection, with a shell command run "
                       "after answer AFTER; prints statuses, closed")
    _request_args(k)
    k.add_argument("--count", type=int, default=2)
    k.add_argument("--after", type=int, default=0)
    k.add_argument("--between", metavar="CMD",
                   help="shell command run after answer --after")

    u = sub.add_parser("unread", help="requests back to back on one "
                       "FCGI_KEEP_CONN connection whose answers are never "
                       "read; prints sent, closed, elapsed_s")
    u.add_argument("address", metavar="ADDRESS")
    u.add_argument("--count", type=int, default=5000)
    u.add_argument("--uri", default="/health/live")
    u.add_argument("--hold", type=float, default=15.0)
    u.add_argument("--interval", type=float, default=0.002,
                   help="seconds between requests")

    w = sub.add_parser("raw", help="send raw bytes/records; print the "
                       "records received and whether the peer closed")
    w.add_argument("address", metavar="ADDRESS")
    w.add_argument("--record", dest="parts", action=_Ordered,
                   metavar="TYPE,REQUEST_ID[,HEX]", help="one record")
    w.add_argument("--hex", dest="parts", action=_Ordered, metavar="HEX",
                   help="raw bytes")
    w.add_argument("--timeout", type=float, default=5.0)

    h = sub.add_parser("partial", help="N connections each sending part of "
                       "a record header, held until closed or HOLD s")
    h.add_argument("address", metavar="ADDRESS")
    h.add_argument("--connections", type=int, default=4)
    h.add_argument("--bytes", type=int, default=3)
    h.add_argument("--hold", type=float, default=15.0)
    h.add_argument("--ready-file", help="created once the connections are "
                   "in place")

    i = sub.add_parser("idle", help="N connections each completing one "
                       "KEEP_CONN request, then idle until closed or HOLD s")
    i.add_argument("address", metavar="ADDRESS")
    i.add_argument("--connections", type=int, default=4)
    i.add_argument("--hold", type=float, default=15.0)
    i.add_argument("--uri", default="/health/live")
    i.add_argument("--ready-file", help="created once the connections are "
                   "in place")

    c = sub.add_parser("crash", help="connections sending BEGIN_REQUEST and "
                       "a PARAMS record announcing two 2^30 lengths")
    c.add_argument("address", metavar="ADDRESS")
    c.add_argument("--count", type=int, default=50)
    c.add_argument("--rate", type=float, default=0.0,
                   help="per second (default: as fast as possible)")
    c.add_argument("--probe-url", help="HTTP URL probed during the crashes")
    c.add_argument("--probe-interval", type=float, default=0.1)
    c.add_argument("--probe-timeout", type=float, default=2.0)
    c.add_argument("--probe-threads", type=int, default=1)
    c.add_argument("--probe-lead", type=float, default=0.2,
                   help="probing starts this long before the first crash")
    c.add_argument("--probe-tail", type=float, default=0.0,
                   help="and goes on this long after the last one")
    c.add_argument("--recover-wait", type=float, default=0.0,
                   help="after the last crash, poll --probe-url for a 200 "
                   "this long; reports recovery_s")

    m = sub.add_parser("mgmt", help="unknown management records "
                       "(requestId 0)")
    m.add_argument("address", metavar="ADDRESS")
    m.add_argument("--connections", type=int, default=40)
    m.add_argument("--per-conn", type=int, default=50)
    m.add_argument("--type", type=int, default=200)
    m.add_argument("--timeout", type=float, default=2.0,
                   help="per connection")
    m.add_argument("--max-time", type=float, default=20.0,
                   help="no new connection after this long")

    a = p.parse_args(argv)
    if a.cmd == "request":
        res = _cmd_request(a)
    elif a.cmd == "kept":
        res = _cmd_kept(a)
    elif a.cmd == "unread":
        res = send_unread(a.address, a.count, a.uri, a.hold, a.interval)
    elif a.cmd == "raw":
        res = _cmd_raw(a)
    elif a.cmd == "partial":
        res = hold_partial(a.address, a.connections, a.bytes, a.hold,
                           ready_file=a.ready_file)
    elif a.cmd == "idle":
        res = hold_idle(a.address, a.connections, a.hold, a.uri,
                        ready_file=a.ready_file)
    elif a.cmd == "crash":
        res = crash_burst(a.address, a.count, a.rate, a.probe_url,
                          a.probe_interval, a.probe_timeout,
                          a.probe_threads, a.probe_lead, a.probe_tail,
                          a.recover_wait)
    else:
        res = send_management(a.address, a.connections, a.per_conn, a.type,
                              a.timeout, max_time=a.max_time)
    if a.lines:
        for k in sorted(res):
            v = res[k]
            if isinstance(v, str):
                v = v.replace("\\", "\\\\").replace("\n", "\\n")
            else:
                v = json.dumps(v, sort_keys=True)
            sys.stdout.write("%s %s\n" % (k, v))
    else:
        json.dump(res, sys.stdout, sort_keys=True)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
