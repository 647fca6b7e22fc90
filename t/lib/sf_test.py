#!/usr/bin/env python3
"""Tests of t/lib/sf_parse.py, the Structured Field parser of the tests.

The RateLimit examples are those of draft-ietf-httpapi-ratelimit-headers-11
as quoted in the peer study (its wire syntax is the same as -10's); the
rest are RFC 9651 rules: white space, escapes, number sizes, and inputs a
strict parser must refuse.  Run by t/integration/test_limits.sh (as one
check) and on its own: python3 t/lib/sf_test.py.  Exits 0 when all pass.
"""

import decimal
import os
import sys
import unittest

# Keep the source tree free of __pycache__ directories.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sf_parse import (  # noqa: E402
    Date, DisplayString, InnerList, SFError, Token, parse_dictionary,
    parse_field_lines, parse_item, parse_list,
)


class DraftExamples(unittest.TestCase):
    """The fields of draft-ietf-httpapi-ratelimit-headers-11."""

    def test_policy_with_partition_key(self):
        got = parse_list('"tenant-burst";q=100;w=1, '
                         '"key-daily";q=100000;w=86400;pk=:dGVuYW50LTQy:')
        self.assertEqual(got, [
            ("tenant-burst", {"q": 100, "w": 1}),
            ("key-daily", {"q": 100000, "w": 86400, "pk": b"tenant-42"}),
        ])
        # A policy name is an sf-string, not a token.
        self.assertNotIsInstance(got[0][0], Token)

    def test_ratelimit_with_partition_key(self):
        got = parse_list('"tenant-burst";r=0;t=2, '
                         '"key-daily";r=41233;t=51770;pk=:dGVuYW50LTQy:')
        self.assertEqual(got, [
            ("tenant-burst", {"r": 0, "t": 2}),
            ("key-daily", {"r": 41233, "t": 51770, "pk": b"tenant-42"}),
        ])

    def test_single_policy(self):
        self.assertEqual(parse_list('"default";q=100;w=10'),
                         [("default", {"q": 100, "w": 10})])

    def test_policy_with_quota_unit(self):
        got = parse_list('"bytes";q=1000000;qu="content-bytes";w=3600')
        self.assertEqual(got[0][1]["qu"], "content-bytes")
        self.assertEqual(list(got[0][1]), ["q", "qu", "w"])

    def test_no_space_after_comma(self):
        self.assertEqual(parse_list('"permin";q=50;w=60,"perhr";q=1000;w=3600'),
                         [("permin", {"q": 50, "w": 60}),
                          ("perhr", {"q": 1000, "w": 3600})])

    def test_several_field_lines(self):
        got = parse_field_lines(['"a";r=1;t=2', '"b";r=3;t=4'])
        self.assertEqual([m[0] for m in got], ["a", "b"])

    def test_what_ratelimit_fcgi_sends(self):
        got = parse_list('"burst";q=10;w=1, "daily";q=10000;w=86400')
        self.assertEqual(got, [("burst", {"q": 10, "w": 1}),
                               ("daily", {"q": 10000, "w": 86400})])


class Whitespace(unittest.TestCase):
    """RFC 9651 4.2: SP around the value; OWS (SP, HTAB) around commas;
    SP after ';' but not before it, and none around '='."""

    def test_leading_and_trailing_sp(self):
        self.assertEqual(parse_list('   "a";q=1  '), [("a", {"q": 1})])

    def test_ows_around_commas(self):
        self.assertEqual(parse_list('"a" \t,\t "b"'),
                         [("a", {}), ("b", {})])

    def test_sp_after_semicolon(self):
        self.assertEqual(parse_list('"a";  q=1; w=2'),
                         [("a", {"q": 1, "w": 2})])

    def test_sp_before_semicolon_fails(self):
        self.assertRaises(SFError, parse_list, '"a" ;q=1')

    def test_sp_around_equals_fails(self):
        self.assertRaises(SFError, parse_list, '"a";q =1')
        self.assertRaises(SFError, parse_list, '"a";q= 1')

    def test_leading_tab_fails(self):
        self.assertRaises(SFError, parse_list, '\t"a"')

    def test_empty_field_is_empty_list(self):
        self.assertEqual(parse_list(""), [])
        self.assertEqual(parse_list("   "), [])


class Strings(unittest.TestCase):

    def test_escapes(self):
        self.assertEqual(parse_item(r'"a\"b\\c"'), ('a"b\\c', {}))

    def test_bad_escape_fails(self):
        self.assertRaises(SFError, parse_item, r'"a\nb"')
        self.assertRaises(SFError, parse_item, r'"a\'"')

    def test_unterminated_fails(self):
        self.assertRaises(SFError, parse_list, '"tenant-burst;q=100')
        self.assertRaises(SFError, parse_item, '"abc\\"')

    def test_control_character_fails(self):
        self.assertRaises(SFError, parse_item, '"a\tb"')
        self.assertRaises(SFError, parse_item, '"a\x7fb"')

    def test_non_ascii_fails(self):
        self.assertRaises(SFError, parse_item, '"caf\u00e9"')

    def test_empty_string(self):
        self.assertEqual(parse_item('""'), ("", {}))


class Numbers(unittest.TestCase):

    def test_integers(self):
        self.assertEqual(parse_item("0")[0], 0)
        self.assertEqual(parse_item("-42")[0], -42)
        self.assertEqual(parse_item("007")[0], 7)
        self.assertEqual(parse_item("999999999999999")[0], 999999999999999)
        self.assertEqual(parse_item("-999999999999999")[0], -999999999999999)

    def test_integer_of_16_digits_fails(self):
        self.assertRaises(SFError, parse_item, "1000000000000000")
        self.assertRaises(SFError, parse_list, '"a";q=1000000000000000')

    def test_decimals(self):
        self.assertEqual(parse_item("1.5")[0], decimal.Decimal("1.5"))
        self.assertEqual(parse_item("-0.125")[0], decimal.Decimal("-0.125"))
        self.assertEqual(parse_item("123456789012.123")[0],
                         decimal.Decimal("123456789012.123"))

    def test_bad_decimals_fail(self):
        for bad in ("1.", "1.2345", "1234567890123.1", "-", "-a", "1..2"):
            with self.subTest(bad=bad):
                self.assertRaises(SFError, parse_item, bad)

    def test_plus_sign_fails(self):
        self.assertRaises(SFError, parse_item, "+1")


class OtherTypes(unittest.TestCase):

    def test_token(self):
        value, _ = parse_item("foo123/456:bar*")
        self.assertIsInstance(value, Token)
        self.assertEqual(value, "foo123/456:bar*")
        self.assertEqual(parse_item("*foo")[0], "*foo")

    def test_boolean(self):
        self.assertIs(parse_item("?1")[0], True)
        self.assertIs(parse_item("?0")[0], False)
        self.assertRaises(SFError, parse_item, "?2")
        self.assertRaises(SFError, parse_item, "?")

    def test_parameter_without_value_is_true(self):
        self.assertEqual(parse_item('"a";shadow'), ("a", {"shadow": True}))

    def test_byte_sequence(self):
        self.assertEqual(parse_item(":aGVsbG8=:")[0], b"hello")
        self.assertEqual(parse_item("::")[0], b"")

    def test_bad_byte_sequences_fail(self):
        for bad in (":aGVsbG8=", ":aGV*sbG8=:", ":a=GVsbG8:", ":a:"):
            with self.subTest(bad=bad):
                self.assertRaises(SFError, parse_item, bad)

    def test_date_and_display_string(self):
        self.assertEqual(parse_item("@1659578233")[0], Date(1659578233))
        self.assertRaises(SFError, parse_item, "@1.5")
        value = parse_item('%"f%c3%bc%c3%bc"')[0]
        self.assertIsInstance(value, DisplayString)
        self.assertEqual(value, "f\u00fc\u00fc")
        self.assertRaises(SFError, parse_item, '%"%C3%BC"')

    def test_inner_list(self):
        got = parse_list('("a" 1);p, b')
        self.assertIsInstance(got[0][0], InnerList)
        self.assertEqual(got[0], ([("a", {}), (1, {})], {"p": True}))
        self.assertRaises(SFError, parse_list, '("a" 1')
        self.assertRaises(SFError, parse_list, '("a",1)')

    def test_dictionary(self):
        got = parse_dictionary("a=1, b;x, c=(1 2)")
        self.assertEqual(got["a"], (1, {}))
        self.assertEqual(got["b"], (True, {"x": True}))
        self.assertEqual(list(got), ["a", "b", "c"])

    def test_repeated_parameter_keeps_last_value(self):
        self.assertEqual(parse_item('"a";q=1;q=2'), ("a", {"q": 2}))


class InvalidLists(unittest.TestCase):
    """Inputs a strict client must ignore as malformed."""

    def test_trailing_comma(self):
        self.assertRaises(SFError, parse_list, '"a";q=1,')
        self.assertRaises(SFError, parse_list, '"a";q=1, ')

    def test_empty_member(self):
        self.assertRaises(SFError, parse_list, '"a",,"b"')
        self.assertRaises(SFError, parse_list, ', "a"')

    def test_uppercase_parameter_key(self):
        self.assertRaises(SFError, parse_list, '"a";Q=1')
        self.assertRaises(SFError, parse_list, '"a";qU=1')

    def test_bad_parameter_key(self):
        self.assertRaises(SFError, parse_list, '"a";1q=1')
        self.assertRaises(SFError, parse_list, '"a";=1')
        self.assertRaises(SFError, parse_list, '"a";')

    def test_missing_comma(self):
        self.assertRaises(SFError, parse_list, '"a" "b"')

    def test_garbage(self):
        for bad in ("a;q=1;", '"a";q=1 x', "(", ")", "\"a\";q=-", "\u00e9"):
            with self.subTest(bad=bad):
                self.assertRaises(SFError, parse_list, bad)


if __name__ == "__main__":
    unittest.main(verbosity=1)
