"""Byte-level acceptance of the lexer/parser pair on grammars built with the IR builder."""

from __future__ import annotations

import subprocess
import sys

from lexguide import Grammar
from lexguide.grammar.ir import GrammarBuilder
from lexguide.regex.syntax import parse_regex


def _lex(b: GrammarBuilder, pattern: str, **kw) -> int:
    return b.lexeme(parse_regex(pattern), pattern, **kw)


def test_arithmetic_with_left_and_right_recursion():
    b = GrammarBuilder()
    expr, term, factor = b.nonterminal("expr"), b.nonterminal("term"), b.nonterminal("factor")
    num, plus, times, lp, rp = (_lex(b, p) for p in ["[0-9]+", r"\+", r"\*", r"\(", r"\)"])
    b.rule(expr, [expr, plus, term])
    b.rule(expr, [term])
    b.rule(term, [factor, times, term])
    b.rule(term, [factor])
    b.rule(factor, [num])
    b.rule(factor, [lp, expr, rp])
    g = Grammar(b.build(expr))
    for ok in ["1", "12+3", "(1+2)*3", "((4))", "1*2*3+4+5*(6+7)"]:
        assert g.validate(ok), ok
    for bad in ["", "+", "1+", "(1", "1)", "1 + 2", "()", "1++2"]:
        assert not g.validate(bad), bad


def test_greedy_lexing_does_not_backtrack():
    # greedy lexemes, no backtracking: start: A "b", A: /a+b?/ accepts "abb", not "ab"
    b = GrammarBuilder()
    start = b.nonterminal("start")
    b.rule(start, [_lex(b, "a+b?"), _lex(b, "b")])
    g = Grammar(b.build(start))
    assert g.validate("abb")
    assert not g.validate("ab")


def test_lexeme_ambiguity_is_kept_by_the_parser():
    b = GrammarBuilder()
    start = b.nonterminal("start")
    b.rule(start, [_lex(b, "'foo'"), _lex(b, "a+")])
    b.rule(start, [_lex(b, "'[^']*'"), _lex(b, "b+")])
    g = Grammar(b.build(start))
    assert g.validate("'foo'bb") and g.validate("'foo'a") and g.validate("'x'b")
    assert not g.validate("'x'a")


def test_skip_between_lexemes_only():
    b = GrammarBuilder()
    start = b.nonterminal("start")
    b.rule(start, [_lex(b, "a"), _lex(b, "b")])
    b.set_skip(0, parse_regex("[ ]+"))
    g = Grammar(b.build(start))
    assert g.validate("a b") and g.validate("ab") and g.validate("a   b")
    assert not g.validate(" ab")  # no initial skip by default
    assert not g.validate("ab ")  # nothing expected after b: no trailing skip


def test_trailing_skip_while_more_may_come():
    b = GrammarBuilder()
    a = _lex(b, "a")
    b.set_skip(0, parse_regex("[ ]+"))
    g = Grammar(b.build(b.plus(a)))
    assert g.validate("a a ") and g.validate("aa")


def test_lazy_lexeme_ends_at_first_match():
    b = GrammarBuilder()
    start = b.nonterminal("start")
    b.rule(start, [_lex(b, "[0-9]+", lazy=True), _lex(b, "[0-9a-z]*")])
    g = Grammar(b.build(start))
    assert g.validate("1") and g.validate("12") and g.validate("1x")


def test_nullable_rules_and_repeat_bounds():
    b = GrammarBuilder()
    a = _lex(b, "a")
    g = Grammar(b.build(b.repeat(a, 2, 4)))
    assert [g.validate("a" * n) for n in range(6)] == [False, False, True, True, True, False]
    b = GrammarBuilder()
    x = _lex(b, "x")
    start = b.nonterminal("start")
    b.rule(start, [b.optional(x), b.star(_lex(b, "y")), b.optional(x)])
    g = Grammar(b.build(start))
    for ok in ["", "x", "xx", "yy", "xyyx", "yx"]:
        assert g.validate(ok), ok
    assert not g.validate("xxx")


def test_parser_states_are_canonical_across_list_items():
    b = GrammarBuilder()
    item, comma = _lex(b, "[0-9]+"), _lex(b, ",")
    lb, rb = _lex(b, r"\["), _lex(b, r"\]")
    start = b.nonterminal("start")
    b.rule(start, [lb, b.plus(item, separator=comma), rb])
    g = Grammar(b.build(start))
    lp = g.lexparser
    s1 = lp.advance_bytes(lp.initial, b"[1,")
    s2 = lp.advance_bytes(lp.initial, b"[1,2,3,")
    assert s1 == s2  # same canonical state after one or three items


def test_max_parser_states_limit():
    b = GrammarBuilder()
    start = b.nonterminal("start")
    lp_, rp_ = _lex(b, r"\("), _lex(b, r"\)")
    b.rule(start, [lp_, start, rp_])
    b.rule(start, [])
    ir = b.build(start)
    # the core's bound (max_parser_states, 200,000 sets) in its own process: one new set per "("
    code = "\n".join([
        "from lexguide import Grammar, LimitExceeded",
        "g = Grammar.from_lark('start: \"(\" start \")\" | \"\"')",
        "try:",
        "    g.validate('(' * 250_000)",
        "except LimitExceeded as e:",
        "    print('limit', e.limit)",
    ])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "limit max_parser_states"
    assert Grammar(ir).validate("((()))")


def test_skip_of_one_nested_class_commits_to_it():
    # after the skip of class 1, only class-1 lexemes may follow (the "2" branch has no skip)
    g = Grammar.from_lark('start: a | b\na: %lark{start: "q" "1"\n%ignore " "}\nb: %lark{start: "q" "2"}')
    assert g.validate("q1") and g.validate("q2") and g.validate("q 1")
    assert not g.validate("q 2")


def test_lexer_never_enters_a_state_with_an_empty_language():
    # (bc)* & (bcbc)*b is empty but not syntactically NOTHING: "a" must not be admitted
    g = Grammar.from_lark('start: A "x"\nA: "a" ( /(bc)*/ & /(bcbc)*b/ ) | "q"')
    assert g.validate("qx")
    lp = g.lexparser
    assert lp.advance_byte(lp.initial, ord("a")) is None
    assert lp.allowed_bytes(lp.initial).tolist() == [b == ord("q") for b in range(256)]


def test_scans_are_memoised_per_set_and_lexeme():
    # One grammar answers inputs whose scans from the same parser sets take different single
    # lexemes, and lexemes two regexes match at once; each answer is a fresh grammar's.
    def build():
        b = GrammarBuilder()
        start = b.nonterminal("start")
        a, bs = _lex(b, "a+"), _lex(b, "b+")
        foo, quoted = _lex(b, "'foo'"), _lex(b, "'[^']*'")
        b.rule(start, [foo, a])
        b.rule(start, [quoted, bs])
        b.rule(start, [a, foo])
        b.rule(start, [bs, quoted, a])
        return Grammar(b.build(start))

    expected = {
        "aa'foo'": True, "bb'x'a": True, "'foo'a": True, "'foo'bb": True, "'x'b": True,
        "'x'a": False, "b'foo'a": True, "a'x'": False, "bb'foo'": False, "aaa'foo'": True,
    }
    shared = build()
    for text, ok in expected.items():
        assert shared.validate(text) == ok, text
        assert build().validate(text) == ok, text
