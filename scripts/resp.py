"""A tiny Redis client: RESP2 over one TCP connection.

This is the one Redis client of the project's Python tools (scripts/accuracy
and t/lua_test.py). It encodes commands, sends them one at a time or
pipelined, and parses RESP2 replies: simple strings and bulk strings come
back as bytes, integers as int, a nil bulk string or nil array as None,
arrays as lists (nested as deep as Redis nests them), and error replies as
ReplyError objects. The parser, parse_reply(), works on a byte string and
does no I/O, so it can be tried on its own.
"""

import socket


class ReplyError(Exception):
    """An error reply from Redis; str() of it is the message without the
    leading "-", e.g. "ERR unknown command"."""

    def __eq__(self, other):
        return isinstance(other, ReplyError) and str(self) == str(other)

    def __hash__(self):
        return hash(str(self))


class ProtocolError(Exception):
    """Bytes that are not RESP2, or a connection closed in mid-reply."""


def encode(args):
    """Returns the RESP2 encoding of one command, an array of bulk strings.
    Arguments may be bytes, str (UTF-8) or int."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, int):
            a = b"%d" % a
        elif isinstance(a, str):
            a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def parse_reply(buf, pos=0):
    """Parses one reply starting at buf[pos]. Returns (reply, the position
    after it), or None if buf ends before the reply does. Raises
    ProtocolError on bytes that cannot begin a reply. An error reply is
    returned as a ReplyError, not raised."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        return None
    kind = buf[pos]
    if kind == 58:  # ':'
        return int(buf[pos + 1:end]), end + 2
    if kind == 42:  # '*'
        n = int(buf[pos + 1:end])
        pos = end + 2
        if n < 0:
            return None, pos
        items = []
        for _ in range(n):
            # Integers, the usual elements, are parsed here: this loop is
            # what scripts/accuracy spends its time in.
            if buf[pos:pos + 1] == b":":
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    return None
                items.append(int(buf[pos + 1:end]))
                pos = end + 2
                continue
            parsed = parse_reply(buf, pos)
            if parsed is None:
                return None
            item, pos = parsed
            items.append(item)
        return items, pos
    if kind == 36:  # '$'
        n = int(buf[pos + 1:end])
        pos = end + 2
        if n < 0:
            return None, pos
        if len(buf) < pos + n + 2:
            return None
        return bytes(buf[pos:pos + n]), pos + n + 2
    if kind == 43:  # '+'
        return bytes(buf[pos + 1:end]), end + 2
    if kind == 45:  # '-'
        return ReplyError(bytes(buf[pos + 1:end]).decode(errors="replace")), \
            end + 2
    raise ProtocolError("unexpected reply type %r" % bytes(buf[pos:pos + 1]))


class Connection:
    """One connection to a Redis server."""

    def __init__(self, port, host="127.0.0.1", timeout=30):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.pos = 0

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        """Sends encoded commands (bytes) as they are."""
        self.sock.sendall(data)

    def read_replies(self, count):
        """Reads count replies, in order, and returns them as a list (error
        replies among them as ReplyError objects). Bytes that follow are
        kept for the next read."""
        out = []
        while len(out) < count:
            parsed = parse_reply(self.buf, self.pos)
            if parsed is not None:
                reply, self.pos = parsed
                out.append(reply)
                continue
            data = self.sock.recv(1 << 20)
            if not data:
                raise ProtocolError("Redis closed the connection")
            self.buf = self.buf[self.pos:] + data
            self.pos = 0
        return out

    def pipeline(self, commands):
        """Sends every command (each a list of arguments) at once and
        returns their replies, in order; an error reply is a ReplyError in
        the list, not raised."""
        self.send(b"".join(encode(c) for c in commands))
        return self.read_replies(len(commands))

    def command(self, *args):
        """Runs one command and returns its reply; raises ReplyError if
        Redis answers with an error."""
        reply = self.pipeline([args])[0]
        if isinstance(reply, ReplyError):
            raise reply
        return reply
