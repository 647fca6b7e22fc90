#!/bin/sh
# test_configdoc.sh -- a key's default and bounds are written once, in the
# key table of src/config.c, and everything that states them agrees.
#
# `ratelimit-fcgi -K` prints the table (name, type, default, min, max,
# unit, choices; tab-separated).  The program below holds to it:
#   - src/ratelimit-fcgi.8: every key has an entry whose .It line ends
#     "No (default: VALUE)" or, for an integer or a mode, "No (default:
#     VALUE; MIN to MAX)", and names each choice of an enum (as Cm);
#   - conf/ratelimit.conf: every key has an uncommented "key = value" line
#     and the value is the default (unless the comment right above it says
#     "not the default"); "(MIN to MAX)" in that comment is the key's
#     bounds;
#   - README.md and doc/*.md: rows of a table with a "default" column (and
#     a "bounds" one), and in prose "`key` (default VALUE)", "`key`
#     defaults to VALUE", "`key`, VALUE by default", "the default of `key`
#     is VALUE", "the default `key = VALUE`", "`key = VALUE` (the
#     default)" and "`VALUE`, the `key` ... (the default)".  A number may
#     carry a unit (5 s for a key in ms); fenced code is not read.
# Each failure names the file and line, the key and both values.
# CONFIGDOC_LIST=1 also lists every statement of a default found.
#
# It needs no stack: only the binary and the files.
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"

keys=$T_TMP/keys
"$BUILD/ratelimit-fcgi" -K >"$keys" 2>"$T_TMP/keys.err"
rc=$?
check "ratelimit-fcgi -K exits 0 ($rc)" eq "$rc" 0
check "ratelimit-fcgi --keys prints the same" \
    eq "$("$BUILD/ratelimit-fcgi" --keys 2>&1)" "$(cat "$keys")"
check "ratelimit-fcgi --help shows -K" \
    contains "$("$BUILD/ratelimit-fcgi" --help 2>&1)" "-K, --keys"
listed=$(cut -f1 "$keys" | tr '\n' ' ')
dumped=$("$BUILD/ratelimit-fcgi" -T -c /dev/null 2>/dev/null | cut -d' ' -f1 |
    tr '\n' ' ')
check "-K lists the keys -T dumps, in the same order ($(grep -c . "$keys") keys)" \
    eq "$listed" "$dumped"
# The shape of each line: integers have numeric bounds, modes octal ones,
# strings and enums none; only enums have choices; no field is empty.
bad=$(awk -F '\t' '
    NF != 7 { print NR ": " NF " fields"; next }
    { for (i = 1; i <= 7; i++) if ($i == "") print NR ": field " i " empty" }
    $2 == "integer" && ($4 !~ /^-?[0-9]+$/ || $5 !~ /^-?[0-9]+$/ ||
        $3 + 0 < $4 + 0 || $3 + 0 > $5 + 0 || $7 != "-") {
        print NR ": " $0 }
    $2 == "mode" && ($4 !~ /^0[0-7]*$/ || $5 !~ /^0[0-7]*$/ || $7 != "-") {
        print NR ": " $0 }
    ($2 == "string" || $2 == "enum") && ($4 != "-" || $5 != "-" ||
        $6 != "-") { print NR ": " $0 }
    $2 == "enum" && index("|" $7 "|", "|" $3 "|") == 0 { print NR ": " $0 }
    $2 != "enum" && $2 != "integer" && $2 != "mode" && $2 != "string" {
        print NR ": type " $2 }' "$keys")
check "each line of -K has its type's shape (a default within the bounds, among the choices)${bad:+: $bad}" \
    eq "$bad" ""

if command -v mandoc >/dev/null 2>&1; then
    lint=$(mandoc -Tlint -Wwarning "$ROOT/src/ratelimit-fcgi.8" 2>&1)
    check "mandoc -Tlint finds no warning in ratelimit-fcgi.8${lint:+: $lint}" \
        eq "$lint" ""
fi

CONFIGDOC_ROOT=$ROOT python3 - "$keys" "$ROOT/src/ratelimit-fcgi.8" \
    "$ROOT/conf/ratelimit.conf" "$ROOT/README.md" "$ROOT"/doc/*.md \
    >"$T_TMP/report" 2>"$T_TMP/report.err" <<'PY'
import os
import re
import sys

# Reads the key table (ratelimit-fcgi -K), then each document, and writes
# one record a line: "pass<TAB>NAME", "fail<TAB>NAME" followed by
# "detail<TAB>TEXT" lines, or "note<TAB>TEXT".
KEYS_FILE, MAN, CONF = sys.argv[1], sys.argv[2], sys.argv[3]
DOCS = [p for p in sys.argv[4:] if os.path.isfile(p)]
LIST = os.environ.get("CONFIGDOC_LIST", "") == "1"
ROOT_PREFIX = os.environ.get("CONFIGDOC_ROOT", "").rstrip("/") + "/"


def rel(path):
    return path[len(ROOT_PREFIX):] if path.startswith(ROOT_PREFIX) else path


def emit(kind, text):
    print("%s\t%s" % (kind, text.replace("\n", " ")))


def check(name, problems):
    emit("fail" if problems else "pass", name)
    for p in problems:
        emit("detail", p)


# ------------------------------------------------------------ the table

TABLE = {}
ORDER = []
for n, line in enumerate(open(KEYS_FILE), 1):
    f = line.rstrip("\n").split("\t")
    if len(f) != 7:
        check("ratelimit-fcgi -K line %d has 7 fields" % n,
              ["%r has %d" % (line.rstrip("\n"), len(f))])
        continue
    name, typ, default, mn, mx, unit, choices = f
    TABLE[name] = {
        "type": typ,
        "default": "" if default == '""' else default,
        "min": None if mn == "-" else mn,
        "max": None if mx == "-" else mx,
        "unit": None if unit == "-" else unit,
        "choices": [] if choices == "-" else choices.split("|"),
    }
    ORDER.append(name)
if not TABLE:
    # Nothing to compare with: every check below would pass vacuously.
    check("ratelimit-fcgi -K lists the keys", ["it printed no key"])
    sys.exit(0)


def shown(v):
    return '""' if v == "" else v


# Units the documents may write a number in, by family, in the family's
# smallest unit.
UNITS = {
    "ms": ("time", 1), "millisecond": ("time", 1),
    "milliseconds": ("time", 1),
    "s": ("time", 1000), "sec": ("time", 1000), "second": ("time", 1000),
    "seconds": ("time", 1000),
    "min": ("time", 60000), "minute": ("time", 60000),
    "minutes": ("time", 60000),
    "h": ("time", 3600000), "hour": ("time", 3600000),
    "hours": ("time", 3600000),
    "b": ("size", 1), "byte": ("size", 1), "bytes": ("size", 1),
    "kib": ("size", 1024), "kb": ("size", 1024),
    "mib": ("size", 1 << 20), "mb": ("size", 1 << 20),
    "megabytes": ("size", 1 << 20),
    "gib": ("size", 1 << 30), "gb": ("size", 1 << 30),
}
SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹", "0123456789")
NUMBER = r"(?:10[⁰¹²³⁴⁵⁶⁷⁸⁹]+|\d{1,3}(?:[,\u202f\u2009]\d{3})+|\d+)"


def number(text):
    """The integer a document writes ("10,000", "10⁸", "4"), or None."""
    text = text.strip()
    m = re.fullmatch(r"10([⁰¹²³⁴⁵⁶⁷⁸⁹]+)", text)
    if m:
        return 10 ** int(m.group(1).translate(SUPERSCRIPT))
    t = re.sub(r"[,\u202f\u2009]", "", text)
    return int(t) if re.fullmatch(r"-?\d+", t) else None


def in_table_unit(key, value, unit):
    """value (written in unit, or without one) in the unit of the table."""
    tu = TABLE[key]["unit"]
    if unit is None or tu is None:
        return value
    du, tu_ = UNITS.get(unit.lower()), UNITS.get(tu.lower())
    if du is None or tu_ is None or du[0] != tu_[0]:
        return value
    return value * du[1] / tu_[1]


def same_default(key, value, unit=None):
    """Whether a document's value (text, as written) is key's default."""
    t = TABLE[key]
    d = t["default"]
    v = value.strip()
    if len(v) >= 2 and v[0] == '"' and v[-1] == '"':
        v = v[1:-1]
    if v.lower() in ("empty", "(empty)", '""', "none") and t["type"] in (
            "string",):
        v = ""
    if t["type"] == "integer":
        n = number(v)
        return n is not None and in_table_unit(key, n, unit) == int(d)
    if t["type"] == "mode":
        try:
            return int(v, 8) == int(d, 8)
        except ValueError:
            return False
    norm = lambda s: re.sub(r"\s*,\s*", ", ", re.sub(r"\s+", " ", s))
    return norm(v) == norm(d)


def same_bounds(key, lo, hi, unit=None):
    t = TABLE[key]
    if t["min"] is None:
        return False
    if t["type"] == "mode":
        try:
            return int(lo, 8) == int(t["min"], 8) and \
                int(hi, 8) == int(t["max"], 8)
        except ValueError:
            return False
    a, b = number(lo), number(hi)
    return a is not None and b is not None and \
        in_table_unit(key, a, unit) == int(t["min"]) and \
        in_table_unit(key, b, unit) == int(t["max"])


def table_bounds(key):
    t = TABLE[key]
    if t["min"] is None:
        return "none"
    return "%s to %s" % (t["min"], t["max"])


# ------------------------------------------------------------ the manual

def check_man(path):
    lines = open(path).read().split("\n")
    start = None
    for i, line in enumerate(lines):
        if line.startswith(".Ss Configuration"):
            start = i
            break
    if start is None:
        check("%s has a Configuration section" % rel(path),
              ["no '.Ss Configuration' line"])
        return
    entries = []            # [key, lineno, rest of .It, body lines]
    depth = 0
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if line.startswith(".Bl"):
            depth += 1
            continue
        if line.startswith(".El"):
            depth -= 1
            if depth == 0:
                break
            continue
        if depth == 1 and line.startswith(".It "):
            head, _, tail = line[4:].partition(" No ")
            names = re.findall(r"(?:^|\s)Cm\s+([A-Za-z0-9_]+)", head)
            for name in names:
                entries.append([name, i + 1, tail.strip(), []])
            if not names:
                entries.append([None, i + 1, line, []])
            continue
        if depth >= 1 and entries:
            # The body of the entry (or entries, for a shared .It).
            for e in entries:
                if e[1] == entries[-1][1]:
                    e[3].append(line)
    where = {}
    missing, stale, form, wrong_def, wrong_bounds, choices = \
        [], [], [], [], [], []
    for name, lineno, tail, body in entries:
        loc = "%s:%d" % (rel(path), lineno)
        if name is None:
            form.append("%s: an entry without a key (%s)" % (loc, tail))
            continue
        if name not in TABLE:
            stale.append("%s: %s is described, but ratelimit-fcgi -K has no "
                         "such key" % (loc, name))
            continue
        where[name] = loc
        m = re.fullmatch(r"\(default: (.*?)(?:; (\S+) to (\S+))?\)", tail)
        if not m:
            form.append("%s: %s: the .It line ends %r, not \"No (default: "
                        "VALUE)\" or \"No (default: VALUE; MIN to MAX)\""
                        % (loc, name, tail))
            continue
        dv, lo, hi = m.groups()
        t = TABLE[name]
        if not same_default(name, "" if dv == "empty" else dv):
            wrong_def.append("%s: %s: default %s here, %s in the table "
                             "(ratelimit-fcgi -K)" % (loc, name, dv,
                                                      shown(t["default"])))
        if lo is None and t["min"] is not None:
            wrong_bounds.append("%s: %s: no bounds here, %s in the table"
                                % (loc, name, table_bounds(name)))
        elif lo is not None and not same_bounds(name, lo, hi):
            wrong_bounds.append("%s: %s: %s to %s here, %s in the table"
                                % (loc, name, lo, hi, table_bounds(name)))
        text = " ".join(l for l in body if l.startswith((".Cm", ".It")) or
                        " Cm " in l)
        words = set(re.findall(r"[A-Za-z0-9_]+", text))
        for c in t["choices"]:
            if c not in words:
                choices.append("%s: %s: the choice %s is not named (as Cm) "
                               "in its entry; the table's choices are %s"
                               % (loc, name, c, "|".join(t["choices"])))
    for name in ORDER:
        if name not in where and not any(e[0] == name for e in entries):
            missing.append("%s: no '.It Cm %s' entry" % (rel(path), name))
    m = rel(path)
    check("%s describes every key of ratelimit-fcgi -K" % m, missing)
    check("%s describes no key that -K does not list" % m, stale)
    check("%s: each key's .It line ends (default: VALUE[; MIN to MAX])" % m,
          form)
    check("%s: every default equals the table's" % m, wrong_def)
    check("%s: every integer's bounds equal the table's, and only integers "
          "and modes state bounds" % m, wrong_bounds)
    check("%s: every choice of an enum is named in its entry" % m, choices)


# ------------------------------------------------------------ the example

def check_conf(path):
    lines = open(path).read().split("\n")
    shown_at = {}
    wrong, bounds = [], []
    block = []
    for i, raw in enumerate(lines):
        line = raw.strip()
        if line.startswith("#"):
            block.append(line)
            continue
        if line == "":
            block = []
            continue
        loc = "%s:%d" % (rel(path), i + 1)
        key, eq, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or key not in TABLE:
            block = []
            continue
        shown_at.setdefault(key, loc)
        comment = " ".join(block)
        if not same_default(key, value) and \
                "not the default" not in comment.lower():
            wrong.append("%s: %s = %s here, the default is %s (ratelimit-fcgi "
                         "-K); a value that is meant to differ says \"not the "
                         "default\" in the comment above it"
                         % (loc, key, value, shown(TABLE[key]["default"])))
        # "(MIN to MAX)" in the comment right above a key's first line.
        for lo, hi in re.findall(r"\((-?\d+) to (-?\d+)\)", comment):
            if not same_bounds(key, lo, hi):
                bounds.append("%s: %s: the comment above says %s to %s, the "
                              "table %s" % (loc, key, lo, hi,
                                            table_bounds(key)))
        block = []
    missing = ["%s: no uncommented '%s = ...' line shows its default (%s)"
               % (rel(path), k, shown(TABLE[k]["default"]))
               for k in ORDER if k not in shown_at]
    m = rel(path)
    check("%s shows every key's default on an uncommented line" % m, missing)
    check("%s: every value it sets is the table's default" % m, wrong)
    check("%s: the bounds its comments give equal the table's" % m, bounds)


# ------------------------------------------------------------ the docs

CODE = r"`([^`]+)`"


def key_of(span):
    return span if span in TABLE else None


def paragraphs(path):
    """(first line number, [(line number, text)]) of each paragraph, list
    item and table row, outside fenced code."""
    out, cur, fence = [], [], None
    for n, line in enumerate(open(path).read().split("\n"), 1):
        s = line.strip()
        if fence:
            if s.startswith(fence):
                fence = None
            continue
        m = re.match(r"(```+|~~~+)", s)
        if m:
            fence = m.group(1)
            if cur:
                out.append(cur)
            cur = []
            continue
        if s == "" or s.startswith("#") or s.startswith("|") or \
                re.match(r"([-*+]|\d+\.)\s", s):
            if cur:
                out.append(cur)
            cur = []
            if s.startswith("|") or s == "" or s.startswith("#"):
                if s.startswith("|"):
                    out.append([(n, s)])
                continue
        cur.append((n, s))
    if cur:
        out.append(cur)
    return out


def tokens(par):
    """Code spans, numbers, words and punctuation, each with its line."""
    toks = []
    for n, text in par:
        # A word may hold dots (ratelimit.conf): a sentence ends at a dot
        # that a space or the line's end follows.
        word = r"[A-Za-z_](?:[\w'’]|\.(?=\w))*"
        for m in re.finditer(r"`[^`]+`|" + NUMBER + "|" + word + r"|\S",
                             text):
            t = m.group(0)
            if t.startswith("`"):
                toks.append(("code", t[1:-1], n))
            elif re.fullmatch(NUMBER, t):
                toks.append(("num", t, n))
            elif re.match(r"[A-Za-z_]", t):
                toks.append(("word", t.rstrip("'’"), n))
            else:
                toks.append(("punct", t, n))
    return toks


def value_at(toks, i, key):
    """A value starting at toks[i]: (text, unit, next index) or None."""
    if i >= len(toks):
        return None
    kind, t, _ = toks[i]
    if kind == "code" and key_of(t) is None:
        m = re.fullmatch(r"\s*(" + NUMBER + r")\s*([A-Za-z]+)?\s*", t)
        if m and TABLE[key]["type"] == "integer":
            return m.group(1), m.group(2), i + 1
        return t, None, i + 1
    if kind == "num":
        unit = None
        if i + 1 < len(toks) and toks[i + 1][0] == "word" and \
                toks[i + 1][1].lower() in UNITS:
            unit = toks[i + 1][1]
            return t, unit, i + 2
        return t, None, i + 1
    if kind == "word":
        low = t.lower()
        typ = TABLE[key]["type"]
        if typ == "enum" and t in TABLE[key]["choices"]:
            return t, None, i + 1
        if typ == "string" and low == "empty":
            return "", None, i + 1
    return None


FILL_BEFORE = {"is", "of", "to", ":", "(", ",", "=", "value", "the", "its",
               "a", "—", "–"}


FILL_AFTER = {"(", ",", "the", "is", "by", ")", "—", "–"}


def is_default(tok):
    return tok[0] == "word" and tok[1].lower() in ("default", "defaults")


def prose_claims(toks):
    """(key, value, unit, line) for each statement of a default."""
    claims, seen = [], set()

    def add(key, val, line, why):
        if (key, line, why) not in seen:
            seen.add((key, line, why))
            claims.append((key, val[0], val[1], line))

    for i, (kind, t, line) in enumerate(toks):
        if kind != "code":
            continue
        m = re.fullmatch(r"\s*([a-z_]+)\s*=\s*(.*?)\s*", t)
        if m and m.group(1) in TABLE:
            # `key = value`, with "default" just before or just after it.
            key, val = m.group(1), (m.group(2), None)
            j = i - 1
            while j >= 0 and i - j <= 4 and toks[j][0] != "code" and \
                    (toks[j][1].lower() in FILL_BEFORE or is_default(toks[j])):
                if is_default(toks[j]):
                    add(key, val, line, "assign")
                    break
                j -= 1
            j = i + 1
            while j < len(toks) and j - i <= 4 and toks[j][0] != "code" and \
                    (toks[j][1].lower() in FILL_AFTER or is_default(toks[j])):
                if is_default(toks[j]):
                    add(key, val, line, "assign")
                    break
                j += 1
            continue
        key = key_of(t)
        if key is None:
            continue
        if i >= 2 and toks[i - 1][1].lower() in (",", "and", "or") and \
                toks[i - 2][0] == "code" and key_of(toks[i - 2][1]):
            # "`a` and `b` default to 1 and 2": which is which is not
            # read; only the first of a list is taken, when alone.
            continue
        # `key` ... default(s) [of|to|is|:] VALUE, within a few words.
        j = i + 1
        while j < len(toks) and j - i <= 6 and toks[j][0] != "code" and \
                toks[j][1] not in (".", ";"):
            if is_default(toks[j]):
                k = j + 1
                while k < len(toks) and k - j <= 3 and \
                        toks[k][0] in ("word", "punct") and \
                        toks[k][1].lower() in FILL_BEFORE:
                    k += 1
                val = value_at(toks, k, key)
                if val:
                    add(key, val, line, "after")
                break
            j += 1
        # `key` ... VALUE by default
        j = i + 1
        while j < len(toks) and j - i <= 6 and toks[j][1] not in (".", ";"):
            if toks[j][0] == "code" and key_of(toks[j][1]):
                break
            val = value_at(toks, j, key)
            if val and val[2] + 1 < len(toks) and \
                    toks[val[2]][1].lower() == "by" and \
                    is_default(toks[val[2] + 1]):
                add(key, val, line, "by")
                break
            j += 1
        # default of|for `key` [is|:|=] VALUE
        if i >= 2 and toks[i - 1][1].lower() in ("of", "for") and \
                is_default(toks[i - 2]):
            k = i + 1
            while k < len(toks) and k - i <= 2 and \
                    toks[k][1].lower() in ("is", ":", "=", ","):
                k += 1
            val = value_at(toks, k, key)
            if val:
                add(key, val, line, "of")
        # `VALUE`, the `key` ... (the default)
        if i >= 3 and toks[i - 1][1].lower() == "the" and \
                toks[i - 2][1] == "," and toks[i - 3][0] == "code" and \
                key_of(toks[i - 3][1]) is None:
            j = i + 1
            while j < len(toks) and j - i <= 6 and \
                    toks[j][1] not in (".", ";"):
                if is_default(toks[j]) and toks[j - 1][1].lower() == "the":
                    add(key, (toks[i - 3][1], None), line, "apposition")
                    break
                j += 1
    return claims


def split_row(row):
    cells = re.split(r"(?<!\\)\|", row.strip())
    if cells and cells[0] == "":
        cells = cells[1:]
    if cells and cells[-1] == "":
        cells = cells[:-1]
    return [c.strip().replace("\\|", "|") for c in cells]


def check_docs(paths):
    wrong_def, wrong_bounds, notes = [], [], []
    stated = {}
    count = 0
    for path in paths:
        header = None
        claims = []
        for par in paragraphs(path):
            n, first = par[0]
            if first.startswith("|"):
                cells = split_row(first)
                if all(re.fullmatch(r":?-{3,}:?", c) for c in cells if c):
                    if header is not None:
                        header[2] = n
                    continue
                low = [c.lower() for c in cells]
                if header is None or header[2] != n - 1:
                    # A new table: its first row is the header.
                    dcol = next((k for k, c in enumerate(low)
                                 if c.startswith("default")), None)
                    bcol = next((k for k, c in enumerate(low)
                                 if c in ("bounds", "range", "limits",
                                          "allowed")), None)
                    kcol = next((k for k, c in enumerate(low)
                                 if c in ("key", "keys", "setting",
                                          "settings", "option", "name")), 0)
                    header = [dcol, bcol, n, kcol]
                    continue
                header[2] = n
                dcol, bcol, kcol = header[0], header[1], header[3]
                # What the other cells say in prose counts too.
                for k, cell in enumerate(cells):
                    if k not in (dcol, bcol, kcol):
                        claims.extend(prose_claims(tokens([(n, cell)])))
                if dcol is None or dcol >= len(cells) or kcol >= len(cells):
                    continue
                keys = [k for k in re.findall(CODE, cells[kcol])
                        if k in TABLE]
                if not keys:
                    continue
                loc = "%s:%d" % (rel(path), n)
                dcell = cells[dcol]
                spans = re.findall(CODE, dcell)
                for key in keys:
                    val, unit = None, None
                    if spans:
                        val = spans[0]
                    else:
                        m = re.fullmatch(r"(" + NUMBER + r")\s*([A-Za-z]+)?",
                                         dcell)
                        if m:
                            val, unit = m.group(1), m.group(2)
                        elif dcell.lower() == "empty":
                            val = ""
                        elif TABLE[key]["type"] == "enum" and \
                                dcell in TABLE[key]["choices"]:
                            val = dcell
                    if val is None:
                        notes.append("%s: %s: the default cell %r is not a "
                                     "value the test reads" % (loc, key,
                                                               dcell))
                        continue
                    count += 1
                    stated.setdefault(key, loc)
                    if LIST:
                        emit("note", "%s: %s: default %s" % (loc, key,
                                                            shown(val)))
                    if not same_default(key, val, unit):
                        wrong_def.append(
                            "%s: %s: default %s here, %s in the table "
                            "(ratelimit-fcgi -K)" % (
                                loc, key, shown(val) + (" " + unit
                                                        if unit else ""),
                                shown(TABLE[key]["default"])))
                    if bcol is None or bcol >= len(cells):
                        continue
                    bcell = cells[bcol]
                    m = re.match(r"\s*(" + NUMBER + r")\s*(?:–|-|to)\s*(" +
                                 NUMBER + r")\s*([A-Za-z]+)?", bcell)
                    t = TABLE[key]
                    if m and t["type"] == "integer":
                        if not same_bounds(key, m.group(1), m.group(2),
                                           m.group(3)):
                            wrong_bounds.append(
                                "%s: %s: bounds %s here, %s in the table" % (
                                    loc, key, bcell, table_bounds(key)))
                    elif t["type"] == "integer":
                        wrong_bounds.append(
                            "%s: %s: the bounds cell %r is not MIN–MAX; the "
                            "table has %s" % (loc, key, bcell,
                                              table_bounds(key)))
                    elif t["type"] == "enum" and re.findall(CODE, bcell):
                        said = re.findall(CODE, bcell)
                        if sorted(said) != sorted(t["choices"]):
                            wrong_bounds.append(
                                "%s: %s: choices %s here, %s in the table" % (
                                    loc, key, ", ".join(said),
                                    "|".join(t["choices"])))
                continue
            header = None
            claims.extend(prose_claims(tokens(par)))
        for key, val, unit, line in claims:
            loc = "%s:%d" % (rel(path), line)
            count += 1
            stated.setdefault(key, loc)
            if LIST:
                emit("note", "%s: %s: default %s%s" % (
                    loc, key, shown(val), " " + unit if unit else ""))
            if not same_default(key, val, unit):
                wrong_def.append(
                    "%s: %s: default %s here, %s in the table "
                    "(ratelimit-fcgi -K)" % (
                        loc, key, shown(val) + (" " + unit if unit else ""),
                        shown(TABLE[key]["default"])))
    for n in notes:
        emit("note", n)

    def by_place(text):
        path, line = text.split(":")[:2]
        return (path, int(line) if line.isdigit() else 0)
    wrong_def.sort(key=by_place)
    wrong_bounds.sort(key=by_place)
    names = "README.md and doc/*.md"
    check("%s: every stated default equals the table's (%d statements)"
          % (names, count), wrong_def)
    check("%s: every stated bound and choice equals the table's" % names,
          wrong_bounds)
    unstated = [k for k in ORDER if k not in stated]
    check("%s state the default of every key" % names,
          ["no statement of %s's default (%s) was found" % (
              k, shown(TABLE[k]["default"])) for k in unstated])


check_man(MAN)
check_conf(CONF)
check_docs(DOCS)
PY
rc=$?
check "the documents were read (exit $rc)" eq "$rc" 0
[ "$rc" = 0 ] || sed 's/^/    /' "$T_TMP/report.err"

while IFS= read -r line; do
    text=${line#*	}
    case $line in
    pass*) pass "$text" ;;
    fail*) fail "$text" ;;
    detail*) echo "    $text" ;;
    note*) echo "# $text" ;;
    esac
done <"$T_TMP/report"

finish
