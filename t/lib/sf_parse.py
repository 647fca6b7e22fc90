"""A strict parser of HTTP Structured Field values (RFC 9651).

The tests use it to read the RateLimit and RateLimit-Policy fields of
draft-ietf-httpapi-ratelimit-headers-11, which are Structured Field Lists.
It follows the parsing algorithms of RFC 9651 section 4.2 step by step and
fails on anything they reject, so a field that a strict client would ignore
fails here too.

Values come back as plain Python values:
  Integer -> int, Decimal -> decimal.Decimal, String -> str,
  Token -> Token (a str subclass), Byte Sequence -> bytes,
  Boolean -> bool, Date -> Date (an int subclass),
  Display String -> DisplayString (a str subclass).
An Item is a pair (value, params); params is a dict in the order the keys
appeared (a repeated key keeps its first position and its last value, as
the RFC says).  An Inner List is an InnerList (a list of Items) standing in
the place of the value.  parse_list() returns a list of members,
parse_dictionary() a dict of name -> member, parse_item() one Item.  Every
parse error raises SFError.

Only the Python standard library is used.
"""

import base64
import decimal

__all__ = [
    "SFError", "Token", "Date", "DisplayString", "InnerList",
    "parse_list", "parse_dictionary", "parse_item", "parse_field_lines",
]


class SFError(ValueError):
    """The input is not a valid Structured Field value."""


class Token(str):
    """An sf-token: kept apart from sf-string, which is a plain str."""

    def __repr__(self):
        return "Token(%s)" % str.__repr__(self)


class Date(int):
    """An sf-date (RFC 9651): seconds since the epoch."""

    def __repr__(self):
        return "Date(%d)" % int(self)


class DisplayString(str):
    """An sf-displaystring (RFC 9651): Unicode text."""

    def __repr__(self):
        return "DisplayString(%s)" % str.__repr__(self)


class InnerList(list):
    """An Inner List: a list of Items, the value of a member."""


_DIGITS = "0123456789"
_LCALPHA = "abcdefghijklmnopqrstuvwxyz"
_ALPHA = _LCALPHA + _LCALPHA.upper()
# tchar of RFC 9110 section 5.6.2.
_TCHAR = set("!#$%&'*+-.^_`|~" + _DIGITS + _ALPHA)
_KEY_FIRST = set(_LCALPHA + "*")
_KEY_CHAR = set(_LCALPHA + _DIGITS + "_-.*")
_BASE64 = set(_ALPHA + _DIGITS + "+/=")
_LCHEX = set(_DIGITS + "abcdef")


class _Input:
    """The unparsed rest of the field value, consumed from the left."""

    def __init__(self, text):
        if isinstance(text, bytes):
            try:
                text = text.decode("ascii")
            except UnicodeDecodeError:
                raise SFError("field value is not ASCII")
        if any(ord(c) > 0x7F for c in text):
            raise SFError("field value is not ASCII")
        self.s = text
        self.i = 0

    def empty(self):
        return self.i >= len(self.s)

    def peek(self):
        return self.s[self.i] if self.i < len(self.s) else ""

    def take(self):
        c = self.peek()
        if c == "":
            raise SFError("unexpected end of input")
        self.i += 1
        return c

    def skip_sp(self):
        while self.peek() == " ":
            self.i += 1

    def skip_ows(self):
        while self.peek() in (" ", "\t"):
            self.i += 1

    def fail(self, what):
        raise SFError("%s at offset %d of %r" % (what, self.i, self.s))


def _top(text, parse):
    """RFC 9651 4.2: leading and trailing SP are allowed, nothing else."""
    inp = _Input(text)
    inp.skip_sp()
    value = parse(inp)
    inp.skip_sp()
    if not inp.empty():
        inp.fail("unexpected trailing characters")
    return value


def parse_list(text):
    """Parses a List field value; returns a list of members."""
    return _top(text, _parse_list)


def parse_dictionary(text):
    """Parses a Dictionary field value; returns a dict of members."""
    return _top(text, _parse_dictionary)


def parse_item(text):
    """Parses an Item field value; returns (value, params)."""
    return _top(text, _parse_item)


def parse_field_lines(lines, kind="list"):
    """Parses a field sent on several field lines (RFC 9651 4.2: they are
    combined with commas first).  kind is "list" or "dictionary"."""
    joined = ", ".join(lines)
    if kind == "dictionary":
        return parse_dictionary(joined)
    return parse_list(joined)


def _parse_list(inp):
    members = []
    while not inp.empty():
        members.append(_parse_item_or_inner_list(inp))
        inp.skip_ows()
        if inp.empty():
            return members
        if inp.take() != ",":
            inp.i -= 1
            inp.fail("expected ',' between list members")
        inp.skip_ows()
        if inp.empty():
            inp.fail("trailing comma")
    return members


def _parse_dictionary(inp):
    members = {}
    while not inp.empty():
        key = _parse_key(inp)
        if inp.peek() == "=":
            inp.take()
            member = _parse_item_or_inner_list(inp)
        else:
            member = (True, _parse_parameters(inp))
        members[key] = member
        inp.skip_ows()
        if inp.empty():
            return members
        if inp.take() != ",":
            inp.i -= 1
            inp.fail("expected ',' between dictionary members")
        inp.skip_ows()
        if inp.empty():
            inp.fail("trailing comma")
    return members


def _parse_item_or_inner_list(inp):
    if inp.peek() == "(":
        return _parse_inner_list(inp)
    return _parse_item(inp)


def _parse_inner_list(inp):
    inp.take()  # "("
    items = InnerList()
    while not inp.empty():
        inp.skip_sp()
        if inp.peek() == ")":
            inp.take()
            return (items, _parse_parameters(inp))
        items.append(_parse_item(inp))
        if inp.peek() not in (" ", ")"):
            inp.fail("expected ' ' or ')' in an inner list")
    inp.fail("unterminated inner list")


def _parse_item(inp):
    value = _parse_bare_item(inp)
    return (value, _parse_parameters(inp))


def _parse_parameters(inp):
    params = {}
    while inp.peek() == ";":
        inp.take()
        inp.skip_sp()
        key = _parse_key(inp)
        value = True
        if inp.peek() == "=":
            inp.take()
            value = _parse_bare_item(inp)
        params[key] = value
    return params


def _parse_key(inp):
    if inp.peek() == "" or inp.peek() not in _KEY_FIRST:
        inp.fail("a key must begin with a lowercase letter or '*'")
    start = inp.i
    while inp.peek() != "" and inp.peek() in _KEY_CHAR:
        inp.i += 1
    return inp.s[start:inp.i]


def _parse_bare_item(inp):
    c = inp.peek()
    if c == "":
        inp.fail("expected an item")
    if c == "-" or c in _DIGITS:
        return _parse_number(inp)
    if c == '"':
        return _parse_string(inp)
    if c == "*" or c in _ALPHA:
        return _parse_token(inp)
    if c == ":":
        return _parse_byte_sequence(inp)
    if c == "?":
        return _parse_boolean(inp)
    if c == "@":
        return _parse_date(inp)
    if c == "%":
        return _parse_display_string(inp)
    inp.fail("unexpected character %r" % c)


def _parse_number(inp):
    is_decimal = False
    sign = 1
    digits = ""
    if inp.peek() == "-":
        inp.take()
        sign = -1
    if inp.peek() == "" or inp.peek() not in _DIGITS:
        inp.fail("expected a digit")
    while not inp.empty():
        c = inp.peek()
        if c in _DIGITS:
            digits += c
        elif not is_decimal and c == ".":
            if len(digits) > 12:
                inp.fail("more than 12 integer digits in a decimal")
            digits += c
            is_decimal = True
        else:
            break
        inp.i += 1
        if not is_decimal and len(digits) > 15:
            inp.fail("an integer has more than 15 digits")
        if is_decimal and len(digits) > 16:
            inp.fail("a decimal has more than 16 characters")
    if not is_decimal:
        return sign * int(digits)
    if digits.endswith("."):
        inp.fail("a decimal ends with '.'")
    if len(digits) - digits.index(".") - 1 > 3:
        inp.fail("more than 3 fraction digits in a decimal")
    return sign * decimal.Decimal(digits)


def _parse_string(inp):
    inp.take()  # '"'
    out = []
    while not inp.empty():
        c = inp.take()
        if c == "\\":
            if inp.empty():
                inp.fail("backslash at the end of input")
            n = inp.take()
            if n not in ('"', "\\"):
                inp.i -= 1
                inp.fail("bad escape")
            out.append(n)
        elif c == '"':
            return "".join(out)
        elif ord(c) < 0x20 or ord(c) > 0x7E:
            inp.i -= 1
            inp.fail("control character in a string")
        else:
            out.append(c)
    inp.fail("unterminated string")


def _parse_token(inp):
    start = inp.i
    inp.i += 1
    while inp.peek() != "" and (inp.peek() in _TCHAR or
                                inp.peek() in (":", "/")):
        inp.i += 1
    return Token(inp.s[start:inp.i])


def _parse_byte_sequence(inp):
    inp.take()  # ":"
    end = inp.s.find(":", inp.i)
    if end == -1:
        inp.fail("unterminated byte sequence")
    content = inp.s[inp.i:end]
    if any(c not in _BASE64 for c in content):
        inp.fail("bad character in a byte sequence")
    inp.i = end + 1
    # Padding may be missing (the RFC lets a parser supply it), but '='
    # only at the end and never more than needed.
    stripped = content.rstrip("=")
    if "=" in stripped or len(stripped) % 4 == 1:
        inp.fail("bad base64 in a byte sequence")
    padded = stripped + "=" * (-len(stripped) % 4)
    if len(content) > len(padded):
        inp.fail("bad base64 padding in a byte sequence")
    try:
        return base64.b64decode(padded, validate=True)
    except ValueError:
        inp.fail("bad base64 in a byte sequence")


def _parse_boolean(inp):
    inp.take()  # "?"
    c = inp.peek()
    if c == "1":
        inp.take()
        return True
    if c == "0":
        inp.take()
        return False
    inp.fail("a boolean is ?0 or ?1")


def _parse_date(inp):
    inp.take()  # "@"
    value = _parse_number(inp)
    if not isinstance(value, int):
        inp.fail("a date is an integer")
    return Date(value)


def _parse_display_string(inp):
    inp.take()  # "%"
    if inp.peek() != '"':
        inp.fail("expected '\"' after '%'")
    inp.take()
    out = bytearray()
    while not inp.empty():
        c = inp.take()
        if ord(c) < 0x20 or ord(c) > 0x7E:
            inp.i -= 1
            inp.fail("bad character in a display string")
        if c == "%":
            hexd = inp.s[inp.i:inp.i + 2]
            if len(hexd) != 2 or any(h not in _LCHEX for h in hexd):
                inp.fail("bad percent-encoding in a display string")
            inp.i += 2
            out.append(int(hexd, 16))
        elif c == '"':
            try:
                return DisplayString(out.decode("utf-8"))
            except UnicodeDecodeError:
                inp.fail("a display string is not UTF-8")
        else:
            out.append(ord(c))
    inp.fail("unterminated display string")
