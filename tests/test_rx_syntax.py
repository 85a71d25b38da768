"""Regex syntax -> rx nodes, checked against Python ``re`` (fullmatch on the UTF-8 text)."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lexguide.errors import LimitExceeded, RegexError
from lexguide.regex import nodes as rx
from lexguide.regex.syntax import parse_regex


def full(pattern: str, text: str | bytes, flags: str = "") -> bool:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return rx.matches(parse_regex(pattern, flags), data)


# -- hypothesis: random patterns over a small alphabet, compared with re.fullmatch ------------
ALPHABET = ["a", "b", "c", "é", "中", "😀", "\n", "A", "1"]
_atoms = st.sampled_from(
    [
        "a", "b", "c", "é", "中", "😀", "A", "1", ".", r"\d", r"\n", "[ab]", "[^a]", "[a-c]",
        "[^ab\n]", r"[\d]", "[é-中]", r"\x61", r"\u00e9", r"\.", "[a-cé]", r"[^\d]", "(?s:.)",
    ]
)  # fmt: skip


def _regex_tree(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(children, children).map(lambda t: t[0] + t[1]),
        st.tuples(children, children).map(lambda t: f"(?:{t[0]}|{t[1]})"),
        children.map(lambda s: f"(?:{s})*"),
        children.map(lambda s: f"(?:{s})+"),
        children.map(lambda s: f"(?:{s})?"),
        st.tuples(children, st.integers(0, 3), st.integers(0, 2)).map(
            lambda t: f"(?:{t[0]}){{{t[1]},{t[1] + t[2]}}}"
        ),
        st.tuples(children, st.integers(0, 3)).map(lambda t: f"(?:{t[0]}){{{t[1]}}}"),
        st.tuples(children, st.integers(0, 2)).map(lambda t: f"(?:{t[0]}){{{t[1]},}}"),
        children.map(lambda s: f"({s})"),
    )


patterns = st.recursive(_atoms, _regex_tree, max_leaves=8)
texts = st.lists(st.sampled_from(ALPHABET), max_size=8).map("".join)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(patterns, st.lists(texts, min_size=1, max_size=6))
def test_differential_against_re(pattern: str, samples: list[str]) -> None:
    node = parse_regex(pattern)
    compiled = re.compile(pattern)
    for s in samples:
        expected = compiled.fullmatch(s) is not None
        assert rx.matches(node, s.encode("utf-8")) == expected, (pattern, s)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(patterns, st.data())
def test_differential_on_matching_strings(pattern: str, data: st.DataObject) -> None:
    """Strings generated *from* the regex must match (exercises the accepting paths)."""
    s = data.draw(st.from_regex(re.compile(pattern), fullmatch=True), label="text")
    assert rx.matches(parse_regex(pattern), s.encode("utf-8")), (pattern, s)


@settings(max_examples=200, deadline=None)
@given(patterns, st.binary(max_size=6))
def test_never_matches_invalid_utf8(pattern: str, data: bytes) -> None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        assert not rx.matches(parse_regex(pattern), data)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "B", "[a-c]", "[^x]", "z", "(?:b|Q)"]), min_size=1, max_size=4),
    st.lists(st.lists(st.sampled_from("aAbBcCqQxXzZ"), max_size=4).map("".join), max_size=6),
)
def test_case_insensitive_ascii_against_re(parts: list[str], samples: list[str]) -> None:
    pattern = "(?i)" + "".join(parts)
    node = parse_regex(pattern)
    for s in samples:
        assert rx.matches(node, s.encode()) == (re.fullmatch(pattern, s) is not None), (pattern, s)


# -- syntax features ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "pattern, yes, no",
    [
        (r"\d+", ["0", "١٢", "9"], ["a", "", "½"]),
        (r"\w+", ["héllo_1", "日本", "Ⓐ"], ["a-b", " "]),
        (r"\s", [" ", "\t", "\u3000", "\x85"], ["\x1c", "a"]),
        (r"\S\W\D", ["a-x", "a a"], ["a1a", "aaa"]),
        (r"[[:alpha:]]+[[:^digit:]]", ["abZ!"], ["ab1", "é!"]),
        (r"\pL\p{Nd}\p{Lu}\PL", ["é1É1"], ["é1é1"]),
        (r"\p{Letter}\p{Uppercase_Letter}\P{L}\p{gc=Nd}", ["aB11"], ["aBc1"]),
        (r"\x41\x{1F600}\u00e9\U0001F600", ["A😀é😀"], ["A"]),
        (r"a.c", ["abc", "aéc"], ["a\nc"]),
        (r"(?s)a.c", ["a\nc"], []),
        (r"(?s:a.)c", ["a\nc"], []),
        (r"a(?i)bc", ["aBC"], ["ABC"]),
        (r"a(?i:b)c", ["aBc"], ["aBC"]),
        (r"(?i)straße", ["STRAẞE", "strasse"[:0] + "STRAßE"], ["STRASSE"]),
        (r"(?i)k", ["k", "K", "\u212a"], ["x"]),
        (r"(?i)i", ["i", "I"], ["ı", "İ"]),  # simple case folding, not upper/lower closure
        (r"(?i)σ", ["Σ", "σ", "ς"], ["s"]),
        (r"(?i)[a-c]", ["B"], ["d"]),
        (r"(?i)[^a]", ["b"], ["a", "A"]),
        ("(?x) a b  # comment\n c", ["abc"], ["a b c"]),
        (r"(?P<year>\d{4})-(?<m>\d\d)", ["2024-01"], ["24-01"]),
        (r"^abc$", ["abc"], ["^abc$"]),
        (r"^a|b$", ["a", "b"], []),
        (r"\Aab\z", ["ab"], []),
        (r"a+?b*?c??", ["aabbc", "a"], ["b"]),
        (r"[a-z&&[^aeiou]]+", ["bcd"], ["bad"]),
        (r"[a-z--[aeiou]]", ["b"], ["a"]),
        (r"[a-c~~b-d]", ["a", "d"], ["b", "c"]),
        (r"[]a]", ["]", "a"], ["b"]),
        (r"[^]a]", ["b"], ["]"]),
        (r"[a-]", ["-", "a"], ["b"]),
        (r"[\[\]\-\\]", ["[", "]", "-", "\\"], ["a"]),
        (r"a{ 1 , 2 }", ["a", "aa"], ["aaa"]),
        (r"(?:^a)|^b$|(c$)", ["a", "b", "c"], []),
        (r"a{2}{3}", ["a" * 6], ["a" * 5]),
        (r"\/\:\#", ["/:#"], []),
        (r"()|a", ["", "a"], ["b"]),
        (r"", [""], ["a"]),
    ],
)
def test_syntax_features(pattern: str, yes: list[str], no: list[str]) -> None:
    node = parse_regex(pattern)
    for s in yes:
        assert rx.matches(node, s.encode()), (pattern, s)
    for s in no:
        assert not rx.matches(node, s.encode()), (pattern, s)


def test_flags_argument() -> None:
    assert full("abc", "ABC", flags="i")
    assert full("a.c", "a\nc", flags="s")
    assert not full("a.c", "a\nc", flags="i")
    with pytest.raises(RegexError, match="l-flag is not supported"):
        parse_regex("a", "l")


def test_invalid_utf8_bytes_mode() -> None:
    node = parse_regex(r"(?-u:\xFF)a", allow_invalid_utf8=True)
    assert rx.matches(node, b"\xffa")
    assert not rx.matches(node, "ÿa".encode())
    with pytest.raises(RegexError, match="invalid UTF-8"):
        parse_regex(r"(?-u:\xFF)")
    assert full(r"(?-u:\w)+", "ab_9")
    assert not full(r"(?-u:\w)", "é")
    # in Unicode mode \xFF is the code point U+00FF
    assert full(r"\xFF", "ÿ")


@pytest.mark.parametrize(
    "pattern, message, offset",
    [
        (r"a(?=b)", "lookarounds not supported", 1),
        (r"a(?!b)", "lookarounds not supported", 1),
        (r"(?<=a)b", "lookarounds not supported", 0),
        (r"ab\b", "lookarounds not supported", 2),
        (r"a^b", "lookarounds not supported", 1),
        (r"a$b", "lookarounds not supported", 1),
        (r"(a)\1", "backreferences not supported", 3),
        (r"ab(c", "unclosed group", 2),
        (r"ab)c", "unmatched", 2),
        (r"[abc", "unclosed character class", 0),
        (r"*a", "repetition operator missing expression", 0),
        (r"a|+", "repetition operator missing expression", 2),
        (r"a{3,2}", "min is greater than max", 1),
        (r"a{x}", "invalid counted repetition", 1),
        (r"[z-a]", "start > end", 1),
        (r"\p{Greek}", "not supported", 0),
        (r"\xZZ", "hex", 0),
        (r"\q", "unrecognized escape", 0),
        (r"[[:nope:]]", "POSIX", 1),
        (r"a{1000000}", "max_repeat", 1),
        (r"a{,2}", "invalid counted repetition", 1),
        (r"(a$)b", "lookarounds not supported", 2),
        (r"a$*", "lookarounds not supported", 1),
        (r"(^)*a", "lookarounds not supported", 0),
        (r"(?m)^a", "lookarounds not supported", 4),
        (r"[\d-z]", "start is a class", 1),
        (r"(?s-s)a", "duplicate flag", 4),
    ],
)
def test_errors_with_offsets(pattern: str, message: str, offset: int) -> None:
    with pytest.raises(RegexError, match=re.escape(message)) as ei:
        parse_regex(pattern)
    assert ei.value.offset == offset
    assert repr(pattern)[1:-1] in str(ei.value) or pattern in str(ei.value)


def test_lone_surrogates_are_errors() -> None:
    with pytest.raises(RegexError, match="surrogate"):
        parse_regex("a\ud800")
    with pytest.raises(RegexError, match="surrogate"):
        rx.from_literal("x\udfff")
    with pytest.raises(RegexError, match="scalar value"):
        parse_regex(r"\x{D800}")
    assert full("[\ud7ff-\ue000]", "\ue000")  # a range across the surrogates skips them


def test_nested_repetition_limit_is_quick() -> None:
    with pytest.raises((RegexError, LimitExceeded), match="max_repeat"):
        parse_regex("x{1000}{1000}")
    with pytest.raises((RegexError, LimitExceeded)):
        parse_regex("(" * 500 + "a" + ")" * 500)


# -- spec section 11 (common) and 12 (regex algebra) ------------------------------------------
COMMON = {
    "SIGNED_INT": (r"(\+|-)?[0-9]+", ["-12", "+0", "7"], ["", "1-", "+"]),
    "DECIMAL": (r"([0-9]+\.[0-9]*)|(\.[0-9]+)", ["1.", "1.5", ".5"], ["1", "."]),
    "FLOAT": (
        r"([0-9]+\.[0-9]*|\.[0-9]+)([eE](\+|-)?[0-9]+)?|[0-9]+[eE](\+|-)?[0-9]+",
        ["1.5", "1e9", ".5E-3", "2.e+1"],
        ["1", "e9", "1e"],
    ),
    "NUMBER": (
        r"[0-9]+|([0-9]+\.[0-9]*|\.[0-9]+)([eE](\+|-)?[0-9]+)?|[0-9]+[eE](\+|-)?[0-9]+",
        ["3", "3.14", "1e5"],
        ["-3", "3.1.4"],
    ),
    "ESCAPED_STRING": (r'"([^"\\]|\\.)*"', ['""', '"a\\"b"', '"é"'], ['"a"b"', '"\\"']),
    "CNAME": (r"[_A-Za-z][_A-Za-z0-9]*", ["_x1", "Abc"], ["1a", ""]),
    "WS": (r"[ \t\f\r\n]+", [" \n\t"], ["", "a"]),
    "NEWLINE": (r"(\r?\n)+", ["\n\r\n"], ["\r"]),
    "SH_COMMENT": (r"#[^\n]*", ["# hi", "#"], ["# a\n"]),
    "C_COMMENT": (
        r"/\*[^*]*\*+([^/*][^*]*\*+)*/",
        ["/* x */", "/***/", "/* a * b **/"],
        ["/* x */ */", "/* x"],
    ),
}


@pytest.mark.parametrize("name", sorted(COMMON))
def test_common_regexes(name: str) -> None:
    pattern, yes, no = COMMON[name]
    node = parse_regex(pattern)
    for s in yes + no:
        assert rx.matches(node, s.encode()) == (re.fullmatch(pattern, s) is not None), (name, s)
    assert all(rx.matches(node, s.encode()) for s in yes)


def test_regex_algebra_examples() -> None:
    ascii_lines = rx.intersect(
        parse_regex(r"[a-zA-Z \n]*"), rx.complement(parse_regex(r"(?s:.*)\n\n(?s:.*)"))
    )
    assert rx.matches(ascii_lines, b"ab\ncd\n")
    assert not rx.matches(ascii_lines, b"ab\n\ncd")
    not_foo = rx.intersect(parse_regex("[a-z]+"), rx.complement(rx.from_literal("foo")))
    assert rx.matches(not_foo, b"bar") and rx.matches(not_foo, b"food")
    assert not rx.matches(not_foo, b"foo")
    no_aaa = rx.intersect(
        parse_regex("(?s:.*)"), rx.complement(parse_regex("(?s:.*)AAA(?s:.*)"))
    )
    assert rx.matches(no_aaa, "xAAxé".encode())
    assert not rx.matches(no_aaa, b"xAAAx")
    assert not rx.matches(no_aaa, b"\xff")  # (?s:.*) is valid UTF-8 only
