"""Lark captures (llguidance's lexeme options): ``capture``, ``capture="n"``, ``stop_capture="n"``
on lexeme rules and CFG rules, at byte level (``Grammar.captures``) and through a
:class:`Matcher` (replayed from the consumed tokens, budgets and rollback included)."""

from __future__ import annotations

import pytest

from lexguide import Grammar, Matcher, TokenizerInfo
from lexguide.errors import GrammarError, MatcherError


def lark(body: str, start: str) -> Grammar:
    return Grammar.from_lark(f"start: {start}\n{body}")


# the spec's verified examples (input "foo<end>" unless given)
@pytest.mark.parametrize("body,top,text,expected", [
    ('with_stop[capture, stop="<end>"]: /.*/', "with_stop", "foo<end>", [("with_stop", b"foo")]),
    ('outer[capture]: with_suffix\nwith_suffix[capture, suffix="<end>"]: /.*/', "outer", "foo<end>",
     [("with_suffix", b"foo"), ("outer", b"foo<end>")]),
    ("wl[capture, lazy]: /.*<end>/", "wl", "foo<end>", [("wl", b"foo<end>")]),
    ('a[capture="X", stop_capture="S", suffix=/[.!]/]: /[a-z]+/', "a", "abc!", [("X", b"abc"), ("S", b"!")]),
])
def test_spec_examples(body, top, text, expected):
    g = lark(body, top)
    assert g.captures(text) == expected


def test_lazy_capture_rejects_text_after_the_first_match():
    assert not lark("wl[capture, lazy]: /.*<end>/", "wl").validate("foo<end>bar<end>")


def test_repeated_and_nested_rules_in_output_order():
    g = lark('item[capture]: /[a-z]+/ | /[0-9]+/\n%ignore " "\nlst[capture="all"]: item ("," item)*', "lst")
    # skipped whitespace is not part of a capture; inner rules come before the rule around them
    assert g.captures("ab, 12 ,c") == [("item", b"ab"), ("item", b"12"), ("item", b"c"),
                                       ("all", b"ab, 12 ,c")]


def test_empty_captures():
    g = lark('x[capture]: "a"*\ny[capture]: "b"*', "x y")
    assert g.captures("aab") == [("x", b"aa"), ("y", b"b")]
    assert g.captures("") == [("x", b""), ("y", b"")]
    g = lark('gen[capture]: /[0-9]+/ | ""', '"a" gen "b"')
    assert g.captures("ab") == [("gen", b"")]


def test_only_rules_of_the_parse_are_reported():
    g = lark('a[capture]: "x" "y"\nb[capture]: "x" "z"', "a | b")
    assert g.captures("xz") == [("b", b"xz")]
    # an ambiguous input reports every parse
    g = lark('a[capture]: "x" "y"?\nb[capture]: "x" "z"?', "a | b")
    assert sorted(g.captures("x")) == [("a", b"x"), ("b", b"x")]


def test_json_body_and_stop_at_eos():
    g = lark('num[capture]: %json {"type": "integer"}', '"n=" num')
    assert g.captures("n=42") == [("num", b"42")]
    g = lark('gen[capture, stop=""]: /[a-z ]*/', "gen")
    assert g.captures("ab c") == [("gen", b"ab c")]


def test_no_captures_and_invalid_text():
    g = lark('A: /[a-z]+/', "A")
    assert g.captures("abc") == []
    g = lark('a[capture]: /[a-z]+/', "a")
    with pytest.raises(MatcherError):
        g.captures("ABC")
    with pytest.raises(MatcherError):  # a prefix is not a complete sentence
        lark('a[capture]: "x" "y"', "a").captures("x")


def test_stop_capture_needs_stop_or_suffix():
    with pytest.raises(GrammarError, match="stop_capture_name requires stop= or suffix="):
        lark('a[stop_capture="s"]: /[a-z]+/', "a")


# -- through a Matcher, on a small vocabulary ------------------------------------------------
TOKENS = [bytes([c]) for c in range(32, 127)] + [b"\n", b"ab", b"cd", b"ef", b"\nAge: ", b""]
EOS = len(TOKENS) - 1
ID = {t: i for i, t in enumerate(TOKENS)}


@pytest.fixture(scope="module")
def info():
    return TokenizerInfo.from_token_bytes(TOKENS, eos_ids=[EOS])


def feed(m: Matcher, pieces: list[bytes]) -> None:
    for p in pieces:
        m.consume(ID[p])


def test_matcher_captures_follow_the_prefix(info):
    g = lark('name[capture]: /[A-Z][a-z]+/\nage[capture="years"]: /[0-9]+/\ngen[capture, stop=""]: /[a-z ]*/',
             '"Name: " name "\\nAge: " age "\\n" gen')
    m = Matcher(g, info)
    feed(m, [bytes([c]) for c in b"Name: Al"])
    assert m.captures() == []  # the name may go on
    feed(m, [b"ef", b"\nAge: ", b"4", b"2", b"\n", b"ab", b" "])
    assert m.captures() == [("name", b"Alef"), ("years", b"42")]
    m.consume(EOS)  # ends the stop="" rule
    assert m.captures() == [("name", b"Alef"), ("years", b"42"), ("gen", b"ab ")]
    twin = m.clone()
    m.rollback(4)
    assert m.captures() == [("name", b"Alef")]
    assert twin.captures()[-1] == ("gen", b"ab ")
    m.reset()
    assert m.captures() == []


def test_matcher_captures_respect_token_budgets(info):
    # after two tokens the first lexeme can take no more bytes: "ef" starts the second one
    g = lark('a[capture, max_tokens=2]: /[a-z]+/\nb[capture]: /[a-z]+/', "a b")
    m = Matcher(g, info)
    feed(m, [b"ab", b"cd", b"ef"])
    m.consume(EOS)
    assert m.captures() == [("a", b"abcd"), ("b", b"ef")]
    # at byte level there are no tokens and no budgets: the greedy first lexeme takes every
    # letter, so the same text is no sentence
    assert not g.validate("abcdef")
    with pytest.raises(MatcherError):
        g.captures("abcdef")


def test_complete_grammar_reports_its_last_lexeme_without_eos(info):
    g = lark('w[capture]: "ab" | "abcd"', "w")
    m = Matcher(g, info)
    feed(m, [b"ab"])
    assert m.captures() == []  # "abcd" is still possible
    feed(m, [b"cd"])
    assert m.is_stopped() and m.captures() == [("w", b"abcd")]
