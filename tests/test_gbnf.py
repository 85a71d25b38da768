"""GBNF front end: parsing, errors, exact GBNF semantics, lexeme decisions, Lark conversion.

The oracle for acceptance is an independent recogniser written here (sets of end positions
over code points, straight from llama.cpp's grammars/README.md); the corpus cases of llama.cpp
(tests/data/llama.cpp: gbnf-cases.jsonl and grammars/*.gbnf) are checked with ``Grammar.validate`` and, for token markers, through the
lexer/parser with one token per character.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
from corpora import LLAMA_CPP

from lexguide.engine.grammar import Grammar
from lexguide.errors import GrammarError
from lexguide.grammar.gbnf import compile_gbnf, gbnf_to_lark, plan_gbnf
from lexguide.grammar.gbnf.parser import Alt, Chars, Lit, Ref, Rep, Seq, Tok, parse_gbnf

GBNF_FILES = sorted((LLAMA_CPP / "grammars").glob("*.gbnf"))
CASES = [json.loads(line) for line in (LLAMA_CPP / "gbnf-cases.jsonl").open(encoding="utf-8")]
GRAMMAR_CASES = [c for c in CASES if c.get("gbnf") and "expect" not in c]
FAILURE_CASES = [c for c in CASES if "expect" in c]


def compile_lark(text: str):
    lark = pytest.importorskip("lexguide.grammar.lark")
    return lark.compile_lark(text)


# -- an independent oracle: GBNF acceptance over code points ---------------------------------
def oracle_accepts(text: str, gbnf: str, root: str = "root") -> bool:
    g = parse_gbnf(gbnf)
    n = len(text)
    memo: dict[tuple[str, int], frozenset[int]] = {}

    def ends(node, i: int) -> frozenset[int]:
        if isinstance(node, Chars):
            if i < n and any(lo <= ord(text[i]) <= hi for lo, hi in node.ranges()):
                return frozenset([i + 1])
            return frozenset()
        if isinstance(node, Lit):
            return frozenset([i + len(node.text)]) if text.startswith(node.text, i) else frozenset()
        if isinstance(node, Ref):
            key = (node.name, i)
            if key not in memo:
                memo[key] = ends(g.rules[node.name].body, i)
            return memo[key]
        if isinstance(node, Seq):
            cur = frozenset([i])
            for item in node.items:
                cur = frozenset(e for p in cur for e in ends(item, p))
            return cur
        if isinstance(node, Alt):
            return frozenset(e for x in node.items for e in ends(x, i))
        if isinstance(node, Rep):
            result = {i} if node.lo == 0 else set()
            cur, k = {i}, 0
            while cur and (node.hi is None or k < node.hi):
                k += 1
                cur = {e for p in cur for e in ends(node.item, p)}
                if k >= node.lo:
                    if node.hi is None:
                        cur -= result
                    result |= cur
            return frozenset(result)
        raise AssertionError(f"no tokens in oracle grammars: {node}")

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20000))
    try:
        return n in ends(Ref(root, 0), 0)
    finally:
        sys.setrecursionlimit(old)


def random_sentence(gbnf: str, rng: random.Random, max_depth: int = 12) -> str | None:
    """A random string of the grammar's language (None when the derivation got too deep)."""
    g = parse_gbnf(gbnf)
    interesting = [ord(c) for c in "abcxyz019 -+*/=()[]{}\"\\\n\t.,:;#é€😀"]

    class Deep(Exception):
        pass

    def gen(node, depth: int) -> str:
        if depth > max_depth:
            raise Deep
        if isinstance(node, Chars):
            ranges = node.ranges()
            inside = [c for c in interesting if any(lo <= c <= hi for lo, hi in ranges)]
            if inside and rng.random() < 0.7:
                return chr(rng.choice(inside))
            lo, hi = rng.choice(ranges)
            cp = rng.randint(lo, min(hi, lo + 200))
            return chr(cp) if not 0xD800 <= cp <= 0xDFFF else chr(lo) if lo < 0xD800 else "a"
        if isinstance(node, Lit):
            return node.text
        if isinstance(node, Ref):
            return gen(g.rules[node.name].body, depth + 1)
        if isinstance(node, Seq):
            return "".join(gen(x, depth) for x in node.items)
        if isinstance(node, Alt):
            return gen(rng.choice(node.items), depth + 1)
        if isinstance(node, Rep):
            hi = node.lo + 3 if node.hi is None else min(node.hi, node.lo + 3)
            return "".join(gen(node.item, depth + 1) for _ in range(rng.randint(node.lo, hi)))
        raise Deep

    try:
        return gen(Ref("root", 0), 0)
    except Deep:
        return None


def mutate(s: str, rng: random.Random, alphabet: str) -> str:
    op = rng.randrange(4)
    i = rng.randrange(len(s) + 1)
    if op == 0 and s:
        return s[: max(i - 1, 0)] + s[i:]
    if op == 1:
        return s[:i] + rng.choice(alphabet) + s[i:]
    if op == 2 and s:
        j = rng.randrange(len(s))
        return s[:j] + s[j] + s[j:]
    return s[:i]


def differential(gbnf: str, n: int, seed: int, *, lark: bool = True) -> None:
    """Oracle vs compile_gbnf (and vs gbnf_to_lark → compile_lark) on random strings."""
    rng = random.Random(seed)
    grammars = [("gbnf", Grammar(compile_gbnf(gbnf)))]
    if lark:
        grammars.append(("lark", Grammar(compile_lark(gbnf_to_lark(gbnf)))))
    alphabet = "".join(sorted(set(c for c in gbnf if c.isprintable()) | set(" \n\t")))
    samples: list[str] = []
    while len(samples) < n:
        s = random_sentence(gbnf, rng)
        if s is None:
            continue
        samples.append(s)
        samples.append(mutate(s, rng, alphabet))
    n_pos = 0
    for s in samples:
        want = oracle_accepts(s, gbnf)
        n_pos += want
        for kind, g in grammars:
            verdict = "accepted" if want else "rejected"
            assert g.validate(s) == want, f"{kind}: {s!r} should be {verdict}"
    assert n_pos >= n // 2  # the generator really produces sentences


# -- tokens: one token per character, token markers as ids --------------------------------------
def token_matches(ts, tid: int) -> bool:
    hit = ts.any or any(lo <= tid <= hi for lo, hi in ts.ranges)
    return hit != ts.negated


def accepts_parts(grammar: Grammar, parts: list) -> bool:
    """Feed text characters (each as a token with a fresh id, text = the character) and
    token markers; a character may be matched by its bytes or by a token-set element."""
    lp = grammar.lexparser
    ir = grammar.ir

    def token_step(states, tid):
        lex = frozenset(i for i, lx in enumerate(ir.lexemes)
                        if lx.token_set is not None and token_matches(lx.token_set, tid))
        out = set()
        for st in states:
            nxt = lp.advance_token_lexeme(st, lex) if lex else None
            if nxt is not None:
                out.add(nxt)
        return out

    states = {lp.initial}
    for part in parts:
        if isinstance(part, dict):
            states = token_step(states, part["token"])
        else:
            for ch in part:
                stepped = (lp.advance_bytes(st, ch.encode()) for st in states)
                by_bytes = {s2 for s2 in stepped if s2 is not None}
                states = by_bytes | token_step(states, 100_000)
        if not states:
            return False
    return any(lp.is_accepting(st) for st in states)


def as_parts(s) -> list:
    return s["parts"] if isinstance(s, dict) else [s]


# == parsing =====================================================================================
@pytest.mark.parametrize("path", GBNF_FILES, ids=lambda p: p.name)
def test_corpus_grammars_compile_and_convert(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    ir = compile_gbnf(text)
    assert ir.rules and ir.lexemes
    lark_text = gbnf_to_lark(text)
    assert lark_text.startswith("%llguidance {}\n")
    compile_lark(lark_text)


def test_syntax_elements() -> None:
    g = parse_gbnf(
        'root ::= "a\\x41\\u00e9\\U0001F600\\t\\n\\r\\\\\\"\\[\\]\\-" [^a-c\\]\\-x-] .'
        " r2{2} r2{1,} r2{0,3}\n"
        "r2 ::= ( \"x\"\n  | \"y\" ) # comment\n"
    )
    root = g.rules["root"].body
    assert isinstance(root, Seq)
    lit, cls, dot, rep_exact, rep_min, rep_range = root.items
    assert lit.text == "aAé😀\t\n\r\\\"[]-"
    dash = (ord("-"), ord("-"))
    assert cls.negated
    a_to_c, bracket, x = (ord("a"), ord("c")), (ord("]"), ord("]")), (ord("x"), ord("x"))
    assert cls.items == (a_to_c, bracket, dash, x, dash)
    assert dot.dot and dot.ranges() == ((0, 0x10FFFF),)
    assert (rep_exact.lo, rep_exact.hi) == (2, 2)
    assert (rep_min.lo, rep_min.hi) == (1, None)
    assert (rep_range.lo, rep_range.hi) == (0, 3)
    assert isinstance(g.rules["r2"].body, Alt)


def test_tokens_parse() -> None:
    g = parse_gbnf("root ::= <[10]> !<[11]> <think> !<x>\n")
    toks = g.rules["root"].body.items
    assert all(isinstance(t, Tok) for t in toks)
    assert toks[0].token_set.ranges == ((10, 10),) and not toks[0].token_set.negated
    assert toks[1].token_set.ranges == ((11, 11),) and toks[1].token_set.negated
    assert toks[2].token_set.names == ("<think>",)
    assert toks[3].token_set.names == ("<x>",) and toks[3].token_set.negated


def test_line_structure() -> None:
    # newline allowed after ::=, after |, inside ( ); a later definition replaces an earlier one
    text = 'root ::=\n  "a" |\n  "b" ( "c"\n "d" )\nroot ::= "z" x\nx ::= ""\n'
    g = Grammar(compile_gbnf(text))
    assert g.validate("z") and not g.validate("a") and not g.validate("bcd")
    g2 = Grammar(compile_gbnf('root ::= "a" |\n "b" ( "c"\n "d" )\n'))
    assert g2.validate("a") and g2.validate("bcd")
    assert Grammar(compile_gbnf("root ::= \"x\"\r\nother ::= \"y\"\r\n")).validate("x")


@pytest.mark.parametrize(
    ("text", "message", "line", "col"),
    [
        ('root ::= "abc\n', "unterminated string literal", 1, 10),
        ("root ::= [a-z\n", "unterminated character class", 1, 10),
        ('root ::= "a\\q"', "unknown escape \\q", 1, 12),
        ('root ::= "\\x4"', "expecting 2 hex chars", 1, 11),
        ('root ::= "\\U00110000"', "beyond U+10FFFF", 1, 11),
        ("root ::= [z-a]", "out of order", 1, 11),
        ('root ::= foo\nfoo ::= "a" bar\n', "undefined rule identifier 'bar'", 2, 13),
        ('rot ::= "a"\n', "does not contain a 'root' rule", 1, 12),
        ("", "does not contain a 'root' rule", 1, 1),
        ('root ::= "a"\n| "b"\n', "a line cannot start with '|'", 2, 1),
        ('root ::= "a"\n"b"\n', "expecting a rule name", 2, 1),
        ("root ::= [a-", "unterminated character class", 1, 10),
        ('root ::= "a" )\n', "expecting newline or end", 1, 14),
        ('root ::= ("a"\n', "expecting ')'", 1, 14),
        ("root ::= * \"a\"", "'*' has nothing to repeat", 1, 10),
        ("root ::= {2}", "'{m,n}' has nothing to repeat", 1, 10),
        ('root ::= "a"{2,1}', "maximum is below the minimum", 1, 13),
        ('root ::= "a"{,3}', "expecting integer", 1, 14),
        ('root "a"', "expecting ::=", 1, 6),
        ("root ::= <[abc]>", "expecting a token id", 1, 12),
        ("root ::= !x", "expecting '<'", 1, 11),
        ('root ::= "a" | root "a"\n', "left recursion", 1, 1),
        ('root ::= x\nx ::= e x "d" | "a"\ne ::= "b" | \n', "left recursion", 2, 1),
    ],
)
def test_errors_have_location(text: str, message: str, line: int, col: int) -> None:
    with pytest.raises(GrammarError) as info:
        compile_gbnf(text)
    err = info.value
    assert message in str(err)
    assert (err.line, err.col) == (line, col), str(err)
    if text:
        assert err.excerpt.endswith("^")


def test_long_rule_chains_compile_and_long_left_cycles_are_found() -> None:
    """Chains of thousands of rules (the left-recursion check and the regular-rule analysis
    were a search or a sweep per rule: quadratic); a left cycle through 2,000 rules is found
    and reported at the first rule on it."""
    n = 2000
    chain = "".join(f"r{i} ::= r{i + 1}\n" for i in range(n)) + f'r{n} ::= "a"\n'
    g = Grammar.from_gbnf("root ::= r0\n" + chain)
    assert g.validate(b"a") and not g.validate(b"aa")
    seq = "".join(f'r{i} ::= "x" r{i + 1}\n' for i in range(n)) + f'r{n} ::= "a"\n'
    assert Grammar.from_gbnf("root ::= r0\n" + seq).validate(b"x" * n + b"a")
    cycle = "".join(f"r{i} ::= r{i + 1} | \"b\"\n" for i in range(n)) + f'r{n} ::= r1 "a"\n'
    with pytest.raises(GrammarError, match="left recursion: rule 'r1'") as info:
        Grammar.from_gbnf('root ::= "c" | r0\n' + cycle)
    assert info.value.line == 3


def test_rules_that_never_complete_are_noted_or_errors() -> None:
    """A rule that can never be completed is dropped with a located note; when the start rule
    is one, the error names the rules at fault."""
    g = Grammar.from_gbnf('root ::= "a" b | "c"\nb ::= "x" b\n')
    assert [(n.pointer, n.keyword) for n in g.notes] == [("line 2:1", "b")]
    assert "can never be completed" in g.notes[0].message
    assert g.validate("c") and not g.validate("ax")
    with pytest.raises(GrammarError) as info:
        Grammar.from_gbnf('root ::= "a" b\nb ::= "x" b\n')
    assert (info.value.line, info.value.col) == (1, 1)
    assert "rules that never complete: 'b' (line 2)" in str(info.value)


def test_right_recursion_and_repetition_are_fine() -> None:
    g = Grammar(compile_gbnf('root ::= "(" root ")" | "x" ("," "x")*\n'))
    assert g.validate("((x,x))") and not g.validate("((x)")


# == semantics =====================================================================================
@pytest.mark.parametrize(
    ("gbnf", "accept", "reject"),
    [
        # GBNF has no lexer: no greedy lexing
        ('root ::= word "b"\nword ::= [a-z]+\n', ["xb", "abb", "bb"], ["x", "b", "xbc"]),
        ('root ::= ... "abc" ...\n', ["aaaabcccc", "abcabcabc", "\nx\nabc\n\n\n"], ["aaabcccc"]),
        ('root ::= kw | id\nkw ::= "if" "x"\nid ::= idc "y"\nidc ::= [a-z]+\n',
         ["ifx", "ify", "ay", "ifxy"], ["if", "y", "ifxz"]),
        ('root ::= x x\nx ::= "a" | "aa"\n', ["aa", "aaa", "aaaa"], ["a", "aaaaa"]),
        ('root ::= ("ab" | "a") ("bc" | "c")\n', ["abc", "abbc", "ac"], ["ab", "abcc"]),
        ('root ::= "a"+ "ab"\n', ["aab", "aaaab"], ["ab", "aabb"]),
        ('root ::= num ("." num)?\nnum ::= [0-9]+\n', ["1", "12.5", "0.0"], ["1.", ".5"]),
        ('root ::= (ws item)*\nws ::= [ ]*\nitem ::= "x" | " x"\n',
         ["", "x", " x", "  x x"], [" "]),
        ('root ::= [^a]\n', ["\n", "é", "😀", "b"], ["a", "bb", ""]),
        ('root ::= "x" [\\-a]\n', ["x-", "xa"], ["xb"]),
        ('root ::= "é"{2} [α-ω]*\n', ["éé", "ééαβ"], ["é", "éééα"]),
        ('root ::= ""\n', [""], ["a"]),
        ('root ::= "a"{0}\n', [""], ["a"]),
        ('root ::= ([x]* )*\n', ["", "x", "xx"], ["y"]),
    ],
)
def test_gbnf_semantics(gbnf: str, accept: list[str], reject: list[str]) -> None:
    for kind, ir in [("gbnf", compile_gbnf(gbnf)), ("lark", compile_lark(gbnf_to_lark(gbnf)))]:
        g = Grammar(ir)
        for s in accept:
            assert oracle_accepts(s, gbnf), s
            assert g.validate(s), f"{kind} should accept {s!r}"
        for s in reject:
            assert not oracle_accepts(s, gbnf), s
            assert not g.validate(s), f"{kind} should reject {s!r}"


TRICKY = [
    'root ::= word "b"\nword ::= [a-z]+\n',
    'root ::= ... "abc" ...\n',
    'root ::= kw | id\nkw ::= "if" "x"\nid ::= idc "y"\nidc ::= [a-z]+\n',
    'root ::= x x x\nx ::= "a" | "ab" | "b"\n',
    'root ::= ("ab" | "a") ("bc" | "c")+\n',
    'root ::= (ws item)*\nws ::= [ ]*\nitem ::= "x" | " x" | "xx "\n',
    'root ::= a+ b?\na ::= "-"? [0-9]+ ("." [0-9]*)?\nb ::= "." | "e" [0-9]\n',
    'root ::= (tag | text)*\ntag ::= "<" [a-z]+ ">"\ntext ::= [^<]+\n',
    'root ::= (kw " ")* id\nkw ::= "int" | "in"\nid ::= [a-z]+\n',
]


@pytest.mark.parametrize("gbnf", TRICKY)
def test_differential_tricky(gbnf: str) -> None:
    differential(gbnf, 60, seed=len(gbnf))


@pytest.mark.parametrize("path", GBNF_FILES, ids=lambda p: p.name)
def test_differential_corpus(path: Path) -> None:
    differential(path.read_text(encoding="utf-8"), 25, seed=7)


def test_lexemes_where_safe() -> None:
    # chess is regular and every fragment is safe: one lexeme for the whole grammar
    chess = (LLAMA_CPP / "grammars" / "chess.gbnf").read_text()
    assert len(compile_gbnf(chess).lexemes) == 1
    # a fragment that greedy lexing would overrun is split
    # (a regular root is one lexeme: a regex has no greediness inside it)
    assert len(compile_gbnf('root ::= word "b"\nword ::= [a-z]+\n').lexemes) == 1
    text = 'root ::= word "b" root | ";"\nword ::= [a-z]+\n'
    plan, ir = plan_gbnf(text)
    assert sorted(lx.name for lx in ir.lexemes) == ["';'", "'b'", "[61-7A]"]
    assert "word: /[a-z]/+" in gbnf_to_lark(text)
    assert Grammar(ir).validate("xbbbb;") and not Grammar(ir).validate("xb")
    # ...but a safe one stays whole
    lark = gbnf_to_lark('root ::= word ";"\nword ::= [a-z]+\ncamelCase ::= "x"{2}\n')
    assert "WORD: /[a-z]/+" in lark and "ROOT: WORD \";\"" in lark and "start: ROOT" in lark
    assert "CAMEL_CASE: \"x\"{2}" in lark


SCHEMA_STYLE = r"""
char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
integral-part ::= [0] | [1-9] [0-9]{0,15}
number ::= ("-"? integral-part) ("." [0-9]{1,16})? ([eE] [-+]? integral-part)? space
root ::= "{" space name-kv "," space age-kv ( "," space extra-kv )? "}" space
name-kv ::= "\"name\"" space ":" space string
age-kv ::= "\"age\"" space ":" space ("-"? integral-part) space
extra-kv ::= "\"extra\"" space ":" space value
value ::= object | array | string | number | ("true" | "false" | "null") space
object ::= "{" space ( string ":" space value ("," space string ":" space value)* )? "}" space
array ::= "[" space ( value ("," space value)* )? "]" space
string ::= "\"" char* "\"" space
space ::= | " " | "\n" [ \t]{0,20}
"""


def test_schema_style_grammar_keeps_its_lexemes() -> None:
    # the style of llama.cpp's json_schema_to_grammar: shared helpers (space, string) must
    # not make keys like "name" collide with strings (the analysis follows parse contexts)
    lark = gbnf_to_lark(SCHEMA_STYLE)
    assert 'NAME_KV: "\\"name\\"" SPACE? ":" SPACE? STRING' in lark
    assert 'STRING: "\\"" CHAR* "\\"" SPACE?' in lark
    assert "object:" in lark  # recursive: stays a rule
    differential(SCHEMA_STYLE, 40, seed=5)


def test_keyword_versus_identifier_split() -> None:
    # "int " would be eaten by data_type's lexeme while the identifier reading needs it
    text = (LLAMA_CPP / "grammars" / "c.gbnf").read_text()
    g = Grammar(compile_gbnf(text))
    src = "int main(){int = 5;x = int;}"
    assert oracle_accepts(src, text) and g.validate(src)
    assert "data_type: \"int\" WS" in gbnf_to_lark(text)


# == corpus cases ====================================================================
@pytest.mark.parametrize("case", GRAMMAR_CASES, ids=lambda c: f"{c['line']}-{c['name']}")
def test_llama_cpp_cases(case: dict) -> None:
    for kind, ir in [("gbnf", compile_gbnf(case["gbnf"])),
                     ("lark", compile_lark(gbnf_to_lark(case["gbnf"])))]:
        g = Grammar(ir)
        for s in case["pass"]:
            parts = as_parts(s)
            ok = g.validate(s) if isinstance(s, str) else accepts_parts(g, parts)
            assert ok, f"{kind} should accept {parts!r}"
        for s in case["fail"]:
            parts = as_parts(s)
            ok = g.validate(s) if isinstance(s, str) else accepts_parts(g, parts)
            assert not ok, f"{kind} should reject {parts!r}"


@pytest.mark.parametrize("case", FAILURE_CASES, ids=lambda c: f"{c['line']}-{c['name']}")
def test_llama_cpp_failure_cases(case: dict) -> None:
    if case["expect"] == "build_ok":
        assert compile_gbnf(case["gbnf"], root=case["root"]).rules
        return
    with pytest.raises(GrammarError) as info:
        compile_gbnf(case["gbnf"], root=case["root"])
    msg = str(info.value)
    expected = {
        "parses_without_root_rule": "does not contain",
        "parse_error": "undefined rule",
        "build_error": "left recursion" if "recursion" in case["group"] else "does not contain",
    }[case["expect"]]
    assert expected in msg
    if case["expect"] == "parses_without_root_rule":
        parse_gbnf(case["gbnf"])  # the text itself is well-formed


def test_text_token_without_lark_form() -> None:
    assert compile_gbnf("root ::= !<think>\n").lexemes[0].token_set.negated
    with pytest.raises(GrammarError, match="no Lark-variant form"):
        gbnf_to_lark("root ::= !<think>\n")
    assert "<think>" in gbnf_to_lark("root ::= <think> \"a\"\n")


def test_route_by_marker() -> None:
    assert Grammar.parse('root ::= "a"\n').validate("a")
    assert Grammar.parse('%llguidance {}\nstart: "a"\n').validate("a")


def test_large_repetitions(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(GrammarError, match="above the limit") as info:
        compile_gbnf('root ::= "a"{200000}\n')
    assert (info.value.line, info.value.col) == (1, 13)
    # nested counts too large for one regex (rx max_repeat) fall back to rules, still exact
    ir = compile_gbnf('root ::= ("a"{1000}){101}\n')
    assert len(ir.lexemes) == 1 and any(len(r.rhs) == 101 for r in ir.rules)
    g = Grammar(ir)
    assert g.validate("a" * 101_000) and not g.validate("a" * 1000)
    # a fragment too large for the conflict analysis stays rules, still exact
    import lexguide.grammar.gbnf.plan as gbnf_module

    monkeypatch.setattr(gbnf_module, "MAX_UNIT_POSITIONS", 50)
    text = 'root ::= [a-z]{0,60} "b" | "(" root ")"\n'
    ir = compile_gbnf(text)
    assert len(ir.lexemes) == 4  # [a-z], "b", "(", ")"
    g = Grammar(ir)
    assert g.validate("(" + "x" * 60 + "b)") and not g.validate("x" * 61 + "b")


def random_grammar(rng: random.Random) -> str:
    """A small random GBNF grammar over {a, b, c} (no left recursion: a rule refers to a
    later rule anywhere, to any rule only after a non-empty literal)."""
    n_rules = rng.randint(2, 4)

    def atom(i: int, depth: int, guarded: bool) -> str:
        choice = rng.random()
        if choice < 0.35:
            return '"' + "".join(rng.choice("abc") for _ in range(rng.randint(1, 3))) + '"'
        if choice < 0.5:
            return rng.choice(["[ab]", "[^a]", "[a-b]", ".", "[c]"])
        if choice < 0.75:
            later = [j for j in range(n_rules) if j > i or guarded]
            if later:
                return f"r{rng.choice(later)}"
            return '"c"'
        if depth < 2:
            return "(" + body(i, depth + 1, guarded) + ")"
        return '"b"'

    def seq(i: int, depth: int, guarded: bool) -> str:
        items = []
        for _ in range(rng.randint(1, 3)):
            a = atom(i, depth, guarded)
            guarded = guarded or a.startswith('"')
            if rng.random() < 0.3:
                a += rng.choice(["*", "+", "?", "{2}", "{0,2}", "{1,}"])
            items.append(a)
        return " ".join(items)

    def body(i: int, depth: int, guarded: bool) -> str:
        return " | ".join(seq(i, depth, guarded) for _ in range(rng.randint(1, 3)))

    lines = [f"r{i} ::= {body(i, 0, False)}" for i in range(n_rules)]
    return "root ::= r0\n" + "\n".join(lines) + "\n"


@pytest.mark.parametrize("seed", range(30))
def test_random_grammars_exhaustive(seed: int) -> None:
    """Every string over {a, b, c} up to length 5: compile_gbnf and the Lark conversion agree
    with the oracle on random grammars (the lexeme analysis must never change the language)."""
    import itertools

    rng = random.Random(seed)
    while True:
        text = random_grammar(rng)
        try:
            grammars = [Grammar(compile_gbnf(text)), Grammar(compile_lark(gbnf_to_lark(text)))]
            break
        except GrammarError as e:
            assert "left recursion" in str(e)  # the generator may build recursion via nullables
    for n in range(6):
        for chars in itertools.product("abc", repeat=n):
            s = "".join(chars)
            want = oracle_accepts(s, text)
            for kind, g in zip(("gbnf", "lark"), grammars):
                assert g.validate(s) == want, f"{kind} {s!r} want {want}\n{text}"


def test_conversion_names_and_edge_cases() -> None:
    text = (
        'root ::= fooBar foo-bar 1x "\\x00\\"\\\\/é😀" [\\x00-\\x1f/] ( "a" | ) rule2'
        " <[5]> !<[6]>\n"
        'fooBar ::= "x" root | "y"\nfoo-bar ::= [^\\]\\[\\-]\n1x ::= "q"?\nrule2 ::= \n'
    )
    lark_text = gbnf_to_lark(text)
    assert "foo_bar: \"x\" start" in lark_text  # camelCase -> snake_case, root -> start
    assert "FOO_BAR: /[^\\]\\[\\-]/" in lark_text  # a terminal: the regular rule foo-bar
    assert "R_1X: \"q\"" in lark_text and "R_1X?" in lark_text  # nullable: used with ?
    assert "<[5]> <[^6]>" in lark_text
    compile_lark(lark_text)
    plain = 'root ::= e "a" e x\ne ::= ""\nx ::= "é"? [\\x00/] "\\\\"\n'
    g = Grammar(compile_lark(gbnf_to_lark(plain)))
    for s in ["a/\\", "aé\x00\\", "a\\", "é/\\"]:
        assert g.validate(s) == oracle_accepts(s, plain), s
