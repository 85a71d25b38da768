"""Lark-variant front end: tokeniser, parser and IR produced by ``compile_lark``.

Structural tests (IR rules, lexemes, skip regexes, options) and error tests (spec §15 messages
with line:col and a caret). Byte-level acceptance lives in ``test_lark_accept.py``.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lexguide.errors import GrammarError, LexguideError
from lexguide.grammar.ir import GrammarIR, GrammarOptions, TokenSet
from lexguide.grammar.lark import COMMON_REGEXES, compile_lark
from lexguide.grammar.lark.compiler import chunk_words, substring_rx
from lexguide.grammar.lark.lexer import Kind, lex_lark
from lexguide.grammar.lark.parser import parse_lark
from lexguide.regex import nodes as rx
from lexguide.regex.syntax import parse_regex


def lexeme_by_name(ir: GrammarIR, name: str):
    found = [lx for lx in ir.lexemes if lx.name == name]
    assert found, f"no lexeme {name!r} in {[lx.name for lx in ir.lexemes]}"
    return found[0]


def rules_of(ir: GrammarIR, name: str) -> list[tuple[str, ...]]:
    """The right-hand sides of nonterminal ``name``, as symbol names."""
    nt = ir.nonterminals.index(name)
    return [tuple(ir.symbol_name(s) for s in r.rhs) for r in ir.rules if r.lhs == nt]


# -- tokeniser --------------------------------------------------------------------------------
def test_lexer_token_kinds_and_quirks():
    toks = lex_lark('A: "a\\""i /x\\//is # c\n\n  // c2\n | <|eot|> @g 2..3 0x1F -1.5e3 ->')
    kinds = [(t.kind, t.text) for t in toks]
    assert kinds[:4] == [
        (Kind.TOKEN, "A"), (Kind.PUNCT, ":"), (Kind.STRING, '"a\\""i'), (Kind.REGEX, "/x\\//is"),
    ]  # fmt: skip
    # newlines separated by comment lines merge into one NEWLINE token
    assert kinds[4][0] is Kind.NEWLINE and kinds[5] == (Kind.PUNCT, "|")
    assert kinds[6:] == [
        (Kind.SPECIAL, "<|eot|>"), (Kind.GREF, "@g"), (Kind.NUMBER, "2"), (Kind.PUNCT, ".."),
        (Kind.NUMBER, "3"), (Kind.HEX, "0x1F"), (Kind.NUMBER, "-1.5e3"), (Kind.PUNCT, "->"),
        (Kind.EOF, ""),
    ]  # fmt: skip


def test_lexer_reads_raw_json_after_keywords():
    toks = lex_lark('start: %json {\n  "a": "# not a comment // either"\n} "x"')
    js = [t for t in toks if t.is_(Kind.KEYWORD, "%json")][0]
    assert js.value == {"a": "# not a comment // either"}
    assert toks[-2].text == '"x"'


def test_names_allow_dashes_and_prefixes():
    p = parse_lark('?my-rule: !x _y\n!x: MY-TOK\n_y: _Z\nMY-TOK: "q"\n_Z: "z"\nstart: my-rule')
    assert set(p.rules) == {"my-rule", "x", "_y", "start"}
    assert set(p.terms) == {"MY-TOK", "_Z"}


# -- IR structure -----------------------------------------------------------------------------
def test_simple_arithmetic_ir():
    ir = compile_lark('start: expr\nexpr: term ("+" term)*\nterm: number\nnumber: /[0-9]+/')
    assert rules_of(ir, "start") == [("expr",)]
    assert rules_of(ir, "number") == [("/[0-9]+/",)]
    assert len(ir.lexemes) == 2
    plus, num = lexeme_by_name(ir, '"+"'), lexeme_by_name(ir, "/[0-9]+/")
    assert rx.matches(plus.rx, b"+") and not rx.matches(plus.rx, b"++")
    assert rx.matches(num.rx, b"123") and not rx.matches(num.rx, b"")
    assert ir.skips == (None,)
    assert ir.options == GrammarOptions()


def test_lexemes_are_deduplicated_by_regex():
    ir = compile_lark('start: A "a" a\na: "a" A\nA: "a"')
    assert len(ir.lexemes) == 1


def test_terminal_composition_is_one_regex():
    ir = compile_lark("ID_START: /[a-zA-Z_]/\nID_CHAR: /[a-zA-Z0-9_]/\n"
                      "IDENT: ID_START ID_CHAR*\nstart: IDENT")  # fmt: skip
    assert len(ir.lexemes) == 1
    ident = lexeme_by_name(ir, "IDENT")
    assert rx.matches(ident.rx, b"_x9") and not rx.matches(ident.rx, b"9x")


def test_rule_repetition_keeps_separate_lexemes():
    # spec §7: `digits: /[0-9]/+` is a rule (ignore may appear between), DIGITS is one lexeme
    ir = compile_lark('%ignore " "\ndigits: /[0-9]/+\nstart: digits DIGITS\nDIGITS: /[0-9]/+')
    digit = lexeme_by_name(ir, "/[0-9]/")
    assert rx.matches(digit.rx, b"7") and not rx.matches(digit.rx, b"77")
    assert rx.matches(lexeme_by_name(ir, "DIGITS").rx, b"777")
    assert ir.skips[0] is not None and rx.matches(ir.skips[0], b" ")


def test_empty_literal_is_epsilon_and_empty_alternative():
    ir = compile_lark('start: "" "a" |')
    assert sorted(rules_of(ir, "start")) == [(), ('"a"',)]


def test_string_escapes_case_insensitivity_and_ranges():
    ir = compile_lark('start: "\\x41\\u00e9\\n" "abc"i "a".."c" "\\uD83D\\uDE00"')
    assert rx.matches(lexeme_by_name(ir, '"\\x41\\u00e9\\n"').rx, b"A\xc3\xa9\n")
    ci = lexeme_by_name(ir, '"abc"i').rx
    assert all(rx.matches(ci, s) for s in (b"abc", b"ABC", b"aBc")) and not rx.matches(ci, b"abd")
    rng = lexeme_by_name(ir, '"a".."c"').rx
    assert rx.matches(rng, b"b") and not rx.matches(rng, b"d")
    assert rx.matches(lexeme_by_name(ir, '"\\uD83D\\uDE00"').rx, "😀".encode())


def test_regex_flags():
    ir = compile_lark("start: /a.c/ /a.c/s /abc/i")
    assert not rx.matches(lexeme_by_name(ir, "/a.c/").rx, b"a\nc")
    assert rx.matches(lexeme_by_name(ir, "/a.c/s").rx, b"a\nc")
    assert rx.matches(lexeme_by_name(ir, "/abc/i").rx, b"ABC")


def test_intersection_and_complement_in_terminals():
    ir = compile_lark(
        'NOT_FOO: /[a-z]+/ & ~"foo"\nNO_DBL: /[a-z\\n]*/ & ~/(?s:.*)\\n\\n(?s:.*)/\n'
        "start: NOT_FOO NO_DBL"
    )
    nf = lexeme_by_name(ir, "NOT_FOO").rx
    assert rx.matches(nf, b"food") and rx.matches(nf, b"bar") and not rx.matches(nf, b"foo")
    nd = lexeme_by_name(ir, "NO_DBL").rx
    assert rx.matches(nd, b"a\nb") and not rx.matches(nd, b"a\n\nb")


def test_terminal_repetitions():
    ir = compile_lark('A: "ab"{2,3}\nB: "x" ~ 2\nC: "y"{,2}\nD: "z"{2,}\nstart: A B C D')
    a = lexeme_by_name(ir, "A").rx
    assert [rx.matches(a, b"ab" * n) for n in range(5)] == [False, False, True, True, False]
    assert rx.matches(lexeme_by_name(ir, "B").rx, b"xx")
    c = lexeme_by_name(ir, "C").rx
    assert rx.matches(c, b"") and rx.matches(c, b"yy") and not rx.matches(c, b"yyy")
    d = lexeme_by_name(ir, "D").rx
    assert not rx.matches(d, b"z") and rx.matches(d, b"z" * 9)


@pytest.mark.parametrize("name", sorted(COMMON_REGEXES))
def test_common_imports_compile(name):
    ir = compile_lark(f"%import common.{name}\nstart: {name}")
    assert len(ir.lexemes) == 1


def test_common_import_semantics():
    ir = compile_lark(
        "%import common (NUMBER, ESCAPED_STRING, C_COMMENT)\n%import common.WS -> SPACE\n"
        "start: NUMBER ESCAPED_STRING C_COMMENT SPACE"
    )
    num = lexeme_by_name(ir, "NUMBER").rx
    assert all(rx.matches(num, s) for s in (b"1", b"2.5", b".5", b"3e4", b"1.e-2"))
    assert not rx.matches(num, b"-1") and not rx.matches(num, b"e4")
    s = lexeme_by_name(ir, "ESCAPED_STRING").rx
    assert rx.matches(s, b'"a\\"b"') and not rx.matches(s, b'"a"b"')
    cc = lexeme_by_name(ir, "C_COMMENT").rx
    assert rx.matches(cc, b"/* x ** y */") and not rx.matches(cc, b"/* x */ */")
    assert rx.matches(lexeme_by_name(ir, "SPACE").rx, b" \t\n")


def test_ignore_statements_are_ored_into_class_zero_skip():
    ir = compile_lark('%ignore " "\n%ignore /#[^\\n]*/\nstart: "a" "b"')
    skip = ir.skips[0]
    assert rx.matches(skip, b" ") and rx.matches(skip, b"#x") and not rx.matches(skip, b"x")


def test_llguidance_options_are_deep_merged():
    ir = compile_lark('%llguidance {"allow_initial_skip": true, "unknown": {"a": 1}}\n'
                      '%llguidance {"ignore_once": true}\nstart: "a"')  # fmt: skip
    assert ir.options == GrammarOptions(allow_initial_skip=True, ignore_once=True)


def test_special_tokens_become_token_set_lexemes():
    ir = compile_lark("start: <|eot_id|> <[5]> <[1-3,7]> <[^10-20]> <[*]> <think>")
    sets = [lx.token_set for lx in ir.lexemes]
    assert sets == [
        TokenSet(names=("<|eot_id|>",)), TokenSet(ranges=((5, 5),)),
        TokenSet(ranges=((1, 3), (7, 7))), TokenSet(ranges=((10, 20),), negated=True),
        TokenSet(any=True), TokenSet(names=("<think>",)),
    ]  # fmt: skip


def test_lazy_and_max_tokens_attributes_make_lexemes():
    ir = compile_lark('start: foo bar baz qux "!"\nfoo[lazy]: /[0-9]+/\n'
                      "bar[max_tokens=3, temperature=0.5, capture]: /[a-z]+/\n"
                      'baz[capture="b"]: "b" "c"\nqux[max_tokens=0]: /x+/')  # fmt: skip
    foo = lexeme_by_name(ir, "foo")
    assert foo.lazy and foo.max_tokens is None
    bar = lexeme_by_name(ir, "bar")
    assert bar.max_tokens == 3 and not bar.lazy
    assert rules_of(ir, "baz") == [('"b"', '"c"')]  # capture alone keeps a rule
    assert "qux" not in [lx.name for lx in ir.lexemes]  # max_tokens=0: epsilon
    assert rules_of(ir, "start") == [("foo", "bar", "baz", '"!"')]


def test_suffix_attribute_is_a_lazy_lexeme_with_the_suffix():
    ir = compile_lark('start: foo\nfoo[suffix="<end>", stop_capture="s"]: /.*/')
    foo = lexeme_by_name(ir, "foo")
    assert foo.lazy and rx.matches(foo.rx, b"abc<end>") and not rx.matches(foo.rx, b"abc")


def test_rule_repetition_counts_via_builder():
    ir = compile_lark('start: x{2,4} y{3}\nx: "a"\ny: "b"')
    assert ir.start >= 0 and len(ir.lexemes) == 2


def test_large_rule_repetition_stays_small():
    ir = compile_lark('start: x{5,100000}\nx: "a"')
    assert len(ir.rules) < 200


def test_unreachable_rules_are_not_compiled():
    # like llguidance: errors in rules that start never reaches are not reported
    ir = compile_lark('start: "a"\nunused: undefined_name')
    assert len(ir.lexemes) == 1


def test_substring_helpers():
    assert chunk_words("foo bar. baz") == ["foo", " ", "bar", ".", " ", "baz"]
    assert chunk_words("a  b..c") == ["a", "  ", "b", "..", "c"]
    node = substring_rx(["abc", "de", "fg"])
    for s, ok in [(b"", True), (b"abcde", True), (b"defg", True), (b"abcdefg", True),
                  (b"cde", False), (b"abcfg", False)]:  # fmt: skip
        assert rx.matches(node, s) is ok, s


def test_regex_ext_lexeme():
    ir = compile_lark('A: %regex {"substring_chars": "abc"}\nstart: A '
                      '%regex {"substring_words": "foo bar baz"}')  # fmt: skip
    a = lexeme_by_name(ir, "A").rx
    assert rx.matches(a, b"bc") and not rx.matches(a, b"ac")
    w = lexeme_by_name(ir, "%regex").rx
    assert rx.matches(w, b"foo bar") and not rx.matches(w, b"foo baz")


def test_nested_lark_gets_its_own_lexeme_class():
    ir = compile_lark('%ignore " "\nstart: "x" inner "y"\n'
                      'inner: %lark {\n  start: "foo" | "Bar"\n  %ignore /\\t+/\n}')  # fmt: skip
    assert len(ir.skips) == 2
    assert rx.matches(ir.skips[0], b" ") and rx.matches(ir.skips[1], b"\t")
    assert lexeme_by_name(ir, '"foo"').lexeme_class == 1
    assert lexeme_by_name(ir, '"x"').lexeme_class == 0


def test_nested_lark_with_the_top_skip_shares_class_zero():
    ir = compile_lark('%ignore " "\nstart: "x" %lark {\n  start: "a" "b"\n  %ignore " "\n} "y"')
    assert len(ir.skips) == 1 and {lx.lexeme_class for lx in ir.lexemes} == {0}


def test_json_in_rule_uses_registered_compiler(monkeypatch):
    from lexguide.grammar import ir as ir_mod

    calls = []

    def fake(builder, schema, *, lexeme_class, **options):
        calls.append((schema, lexeme_class))
        return builder.lexeme(parse_regex("[0-9]+"), "int", lexeme_class=lexeme_class)

    monkeypatch.setattr(ir_mod, "_JSON_COMPILER", fake)
    ir = compile_lark('start: "x" %json {"type": "integer"} "y"')
    assert calls == [({"type": "integer"}, 1)]
    assert rx.matches(ir.skips[1], b" \n\t\r") and not rx.matches(ir.skips[1], b"\f")
    assert lexeme_by_name(ir, "int").lexeme_class == 1


# -- errors (§15) -----------------------------------------------------------------------------
ERRORS = [
    ('START: "a"', "no start rule found", None),
    ('start: "a"\nstart: "b"', "duplicate rule", (2, 1)),
    ('A: "a"\nA: "b"\nstart: A', "duplicate token", (2, 1)),
    ("start: foo", 'unknown name: "foo"', (1, 8)),
    ("start: fooBar", 'unknown name: "foo"', (1, 8)),
    ("start: A\nA: B\nB: A", "circular reference in token", (3, 4)),
    ("start: /a(/", "invalid regex", (1, 10)),  # caret inside the regex
    ("start: /a/l", "l-flag is not supported", (1, 8)),
    ("start: /a(?=b)/", "lookaround", (1, 10)),
    ('start: "ab".."c"', "range start must be a single character", (1, 8)),
    ('start: "a".."bc"', "range end must be a single character", (1, 8)),
    ('start: "z".."a"', "invalid range order", (1, 8)),
    ('start: "a"{0}', "End number in range cannot be 0", (1, 11)),
    ('start: "a"{,0}', "End number in range cannot be 0", (1, 11)),
    ('start: "a"{3,2}', "range end must be >= start", (1, 8)),
    ('start: "a"{-1}', "range start must be >= 0", (1, 8)),
    ('A: "a"{3,2}\nstart: A', "range end must be >= start", (1, 4)),
    ('start: a\na: "x" & "y"', "& is only supported for tokens", (2, 4)),
    ("A: <[5]>\nstart: A", "special tokens", (1, 4)),
    ("A: %json {}\nstart: A", "%json literals cannot be used in terminals", (1, 4)),
    ("start: <[]>", "empty token range", (1, 8)),
    ("start: <[,]>", "empty token range", (1, 8)),
    ("start: <[200-100]>", "invalid token range", (1, 8)),
    ("start: <[1-2-3]>", "invalid token range", (1, 8)),
    ("start: <[^*]>", "negated wildcard", (1, 8)),
    ("start: <[*,1]>", "wildcard token range", (1, 8)),
    ("start: <[200 - 100]>", "lexer error", (1, 8)),
    ('start: foo\nfoo[bar=1]: "a"', "Unknown attribute: bar", (2, 5)),
    ('start: foo\nfoo[lazy, stop="x"]: "a"', "Cannot have multiple stop/suffix", (2, 11)),
    ('start: foo\nfoo[suffix="a", stop="b"]: "x"', "Cannot have multiple stop/suffix", (2, 17)),
    ('start: foo\nfoo[stop_capture="x"]: "a"', "stop_capture_name requires stop=", (2, 5)),
    ('start.2: "a"', "priority not supported yet", (1, 6)),
    ('A.2: "a"\nstart: A', "priority not supported yet", (1, 2)),
    ('start{x}: "a"', "params not supported yet", (1, 6)),
    ('%override start: "a"', "override statement not supported yet", (1, 1)),
    ('%declare FOO\nstart: "a"', "declare statement not supported yet", (1, 1)),
    ("%import foo.BAR\nstart: BAR", "Unknown common regex: foo.BAR", (1, 1)),
    ('INT: "x"\n%import common.INT\nstart: INT', "duplicate token (in import)", (2, 1)),
    ('%llguidance {"allow_initial_skip": 1}\nstart: "a"', "failed to parse %llguidance", (1, 1)),
    ('%llguidance []\nstart: "a"', "failed to parse %llguidance", (1, 1)),
    ("start: %regex {}", "no fields set on %regex", (1, 8)),
    ('start: %regex {"foo": 1}', "unknown field `foo`", (1, 8)),
    ('start: %regex {"substring_chars": "a", "substring_words": "b"}', "only one field", (1, 8)),
    ('start: %regex {"substring_chars": 5}', "must be a string", (1, 8)),
    ('start: ("a"\n"b")', "Expected ')'", (1, 12)),
    ('start: "a"**', "Expected value", (1, 12)),
    ("start: 'a'", "lexer error", (1, 8)),
    ('start: "abc', "lexer error", (1, 8)),
    ('start: "a\\q"', "lexer error", (1, 8)),
    ("start: /abc", "lexer error", (1, 8)),
    ('start: "a" $', "lexer error", (1, 12)),
    ('start: foo{x}\nfoo: "a"', "template usage not supported yet", (1, 8)),
    ('start: foo::_\nfoo::_: "a" foo::_', "uses a parameter (_ or %if) but is not parametric", (1, 1)),
    ('start: "a" %if true', "declare it as start::_", (1, 1)),
    ('start: foo\nfoo::_: "a" %if true', "needs a parameter", (1, 8)),
    ('start: foo::0\nfoo: "a"', "is not parametric", (1, 8)),
    ('start: foo::0\nfoo::_: "a"', "does not use its parameter", (2, 1)),
    ('start: foo\nfoo: "a" bar::_\nbar::_: "b" %if true', "is not parametric: declare it", (2, 1)),
    ('start: A\nA: bar::0\nbar::_: "b" %if true', "cannot be used in terminals", (2, 4)),
    ('start: n::0\nn::_: "" | "a" n::incr([0:20]) %if lt([0:20], 50000)',
     "more than 10000 parameter values", (2, 16)),  # fmt: skip
    ('start: n::set_bit(64)\nn::_: "" %if true', "bit index 64 out of range", (1, 11)),
    ('start: n::0\nn::_: "" %if bit_sett(1)', "unknown %if condition 'bit_sett'", (2, 14)),
    ('start: n::0\nn::_: "" %if is_ones([3:2])', "bit range [3:2]", (2, 22)),
    ('start: n::0\nn::_: "" %if bit_set(1, 2)', "bit_set takes 1 argument", (2, 23)),
    ('start: n::0\nn::_[stop="x"]: "" %if true', "parametric rules cannot have lazy, stop=", (2, 5)),
    ('start: n::foo(1)\nn::_: "" %if true', "Expected a parameter", (1, 11)),
    ("start: @foo", "grammar reference @foo outside a grammar list", (1, 8)),
    ("start: @17", "numeric grammar references no longer supported", (1, 8)),
    ('start: foo\nfoo[stop="b"]: "x" bar\nbar: "y"', "unknown name", (2, 20)),
    ('start: "a" ~ 2.5', "expected an integer", (1, 14)),
    ('start: %json {"type": "integer"', "failed to parse %json", (1, 32)),
    ('start: foo\nfoo[max_tokens=3]: "a" bar\nbar: "x"', "only supported on TERMINALS", (2, 24)),
    ('start: foo\nfoo[max_tokens=3]: %json {"type": "string"}', "not supported yet", (2, 4)),
    ('start: %lark {\n start: "a"\n', "Unmatched %lark", (1, 8)),
    ('start: %lark {\n x: "a"\n}', "no start rule found", (1, 8)),
    ('start: "a"\n: "b"', "expecting rule, token or statement", (2, 1)),
    ('start: "a" ) "b"', "expecting rule, token or statement, found ')'", (1, 12)),
    ("start: " + "%lark { start: " * 31 + '"a"' + "}" * 31, "too deeply nested", (1, 458)),
    ('start: "a"i.."z"', "flags not allowed", (1, 8)),
    ('start: "x" %json {"type": "foo"}', "failed to compile JSON schema", (1, 12)),
    ("start: " + "(" * 101 + '"a"' + ")" * 101, "nested more than 100 levels", (1, 108)),
    ("start: T0\n" + "".join(f"T{i}: T{i + 1}\n" for i in range(300)) + 'T300: "a"',
     "nested more than 100 deep", (101, 6)),  # fmt: skip
    ('start: "\\uD800"', "lone surrogate", (1, 8)),
]


@pytest.mark.parametrize("text,message,where", ERRORS, ids=[e[1][:30] for e in ERRORS])
def test_errors_have_message_and_location(text, message, where):
    with pytest.raises(GrammarError) as info:
        compile_lark(text)
    err = info.value
    assert message in str(err)
    if where is not None:
        assert (err.line, err.col) == where
        assert err.excerpt.splitlines()[-1] == " " * (where[1] - 1) + "^"
        assert f"line {where[0]}:{where[1]}" in str(err)


# -- robustness: any text either compiles or raises a lexguide error --------------------------
_FRAGMENTS = [
    "start", ":", " ", "\n", "|", "(", ")", "[", "]", "{", "}", "*", "+", "?", "~", "&", ",",
    "..", "->", "::", '"a"', '"b"i', "/[a-z]+/", "/x", "A", "B", "a", "b", "2", "-1", "%ignore",
    "%import common.", "INT", "%json {}", '%regex {"substring_chars": "ab"}', "%lark {",
    "%llguidance {}", "<[1-3]>", "<|x|>", "@g", "[lazy]", "[max_tokens=2]", "# c", "\\", "'",
]  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=25))
def test_arbitrary_text_never_crashes(parts):
    text = "".join(parts)
    try:
        ir = compile_lark(text)
    except LexguideError as e:
        assert str(e)
    else:
        assert isinstance(ir, GrammarIR) and ir.start >= 0


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_mutated_grammars_never_crash(data):
    base = ('%ignore " "\nstart: item ("," item)* A\nitem: WORD | "[" start "]"\n'
            'WORD: /[a-z]+/ & ~"if"\nA: "a".."c"{2,3}\nfoo[lazy]: "x"')  # fmt: skip
    text = base
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text)))
        text = text[:i] + data.draw(st.sampled_from(_FRAGMENTS + [""])) + text[i + 1 :]
    try:
        compile_lark(text)
    except LexguideError as e:
        assert str(e)


def test_rules_that_never_complete_are_noted_or_errors():
    ir = compile_lark('%llguidance {}\nstart: "c" | "a" b\nb: "x" b\n')
    assert [(n.pointer, n.keyword) for n in ir.notes] == [("line 3:1", "b")]
    with pytest.raises(GrammarError) as info:
        compile_lark('%llguidance {}\nstart: x\nx: "a" x\n', reject_empty=True)
    assert (info.value.line, info.value.col) == (2, 1)
    assert "rules that never complete: 'x' (line 3)" in str(info.value)
