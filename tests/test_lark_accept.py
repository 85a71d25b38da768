"""Byte-level acceptance of Lark-variant grammars (``Grammar.from_lark(...).validate``).

Expected results come from the spec tables (§8, §17, all verified against llguidance 1.9.1),
the llama.cpp llguidance test corpus, and a differential run against llguidance itself
(optional oracle, skipped when the wheel is absent).
"""

from __future__ import annotations

import json
import random
import pytest

Grammar = pytest.importorskip("lexguide.engine.grammar").Grammar

from corpora import LLAMA_CPP

CORPUS = LLAMA_CPP / "llguidance-cases.jsonl"


# (grammar, accepted, rejected): spec §8.2, §8.4, §7, §12, §17
CASES = [
    ('start: ab{3,5}\nab: "a" | "b"', ["aaa", "aabaa", "bbbbb"], ["aa", "aaaaaa"]),
    ('start: x{,3}\nx: "a"', ["", "aaa"], ["aaaa"]),
    ('start: "a" ~ 2..3', ["aa", "aaa"], ["a", "aaaa"]),
    ('start: ["a"] "b"', ["b", "ab"], ["a", "aab"]),
    ('start: "a" |', ["", "a"], ["aa"]),
    ("start: /a.c/", ["axc"], ["a\nc"]),
    ("start: /a.c/s", ["a\nc"], []),
    ("start: /abc/i", ["ABC", "aBc"], ["abd"]),
    ('start: "\\x41\\u00e9\\n"', [b"\x41\xc3\xa9\x0a"], [b"\x41\xe9\x0a"]),
    ('start: foo "!"\nfoo[lazy]: /[0-9]+/', ["1!"], ["12!"]),
    ('%llguidance {"allow_initial_skip": true}\n%ignore /[ ]+/\nstart: "a" "b"',
     [" ab", "a b", "ab"], ["ab "]),  # fmt: skip
    ('%ignore /[ ]+/\nstart: "a" "b"', ["a b", "ab"], [" ab", "ab "]),
    ('%ignore / +/\nstart: "a"+', ["a ", "a a", "aa"], [" a"]),
    ('%llguidance {"ignore_once": true}\n%ignore /[ ]{1,2}/\nstart: "A" "!"', ["A  !"], ["A   !"]),
    ('%ignore /[ ]{1,2}/\nstart: "A" "!"', ["A  !", "A   !"], []),
    ("%import common.NUMBER\n%import common.WS\n%ignore WS\nstart: NUMBER (\",\" NUMBER)*",
     ["1, 2.5 ,3e4", "1"], ["1 2"]),  # fmt: skip
    ('start: A "b"\nA: /a+b?/', ["abb"], ["ab"]),
    ('start: kw | id\nkw: "if" "x"\nid: ID "y"\nID: /[a-z]+/', [], ["ifx", "ify"]),
    ('%ignore " "\nstart: kw | id\nkw: "if" "x"\nid: ID "y"\nID: /[a-z]+/', ["if x"], []),
    ("start: \"'foo'\" /a+/ | STRING /b+/\nSTRING: /'[^']*'/", ["'foo'bb", "'foo'aa"], []),
    ("start: /[a-z]+/ /[0-9]+/", ["ab12"], ["12ab"]),
    ('%ignore " "\ndigits: /[0-9]/+\nstart: digits', ["1 2 3", "123"], []),
    ('%ignore " "\nDIGITS: /[0-9]/+\nstart: DIGITS', ["123"], ["1 2 3"]),
    ('%ignore " "\nAB: "a" "b"\nstart: AB', ["ab"], ["a b"]),
    ('NOT_FOO: /[a-z]+/ & ~"foo"\nstart: NOT_FOO', ["bar", "food"], ["foo"]),
    ("ASCII_LINES: /[a-zA-Z \\n]*/ & ~/(?s:.*)\\n\\n(?s:.*)/\nstart: ASCII_LINES",
     ["ab\ncd"], ["ab\n\ncd"]),  # fmt: skip
    ('start: %regex {"substring_words": "foo bar baz"}', ["foo bar", "bar baz"],
     ["foo baz", "o bar"]),  # fmt: skip
    ('start: %regex {"substring_chunks": ["abc","de","fg"]}', ["abcde", "defg"], ["cde"]),
    ('start: foo\nfoo[suffix="<end>"]: /.*/', ["foo<end>"], ["foo<end>bar<end>", "foo"]),
    ("start: foo\nfoo[capture, lazy]: /.*<end>/", ["foo<end>"], ["foo<end>bar<end>"]),
    ('start: "x"\n    | "y"\n    // a comment line\n    | "z"', ["x", "y", "z"], ["w"]),
    ('start: x{20,40}\nx: "a"', ["a" * 20, "a" * 33, "a" * 40], ["a" * 19, "a" * 41]),
    ('start: x{30,}\nx: "a"', ["a" * 30, "a" * 50], ["a" * 29]),
    ('start: "a"{1000}', ["a" * 1000], ["a" * 999]),
    ("start: <think> \"x\"", [], ["<think>x"]),  # special tokens never match text
    ('start: "x" %lark {\n  start: "foo" | "Bar"\n  %ignore " "\n} "y"', ["xfooy"], ["x foo y"]),
    ('start: "x" %json {"type":"integer"} "y"', ["x12y", "x-3y"], ["xy", "x1.5y"]),
    ('start: TEXT | fun\nTEXT: /[^{](.|\\n)*/\n'
     'fun: %json {"type":"object","properties":{"a":{"const":1}},"required":["a"]}',
     ["hello", '{"a":1}', '{ "a" : 1 }'], ['{"a":2}']),  # fmt: skip
]

# llguidance behaviour at lexeme-class boundaries and for lexemes matching "" (oracle-verified)
def _edge(grammar: str, text: str, expected: bool, key: str):
    return pytest.param(grammar, text, expected, id=key)


EDGE_CASES = [
    _edge("start: /[ab]{0,4}/", "", True, "nullable-lexeme-empty"),
    _edge('start: "a" ~"b"', "a", True, "nullable-complement"),
    _edge('start: "x" %json {"type":"integer"} "y"', "x 12y", False, "no-skip-into-json"),
    _edge('%ignore " "\nstart: "[" %json {"type":"integer"} "]"', "[ 1]", False,
          "no-skip-into-json-2"),  # fmt: skip
    _edge('%ignore " "\nstart: "[" %json {"type":"integer"} "]"', "[1 ]", True,
          "outer-skip-after-json"),  # fmt: skip
    _edge('%ignore " "\nstart: /a*/ "b"', " b", True, "skip-after-empty-lexeme"),
    _edge('%ignore " "\nstart: "x" %lark {\n start: "a" "b"\n %ignore " "\n} "y"', "x a b y",
          True, "nested-lark-shares-top-class"),  # fmt: skip
]


def _params():
    for g, good, bad in CASES:
        for s in good:
            yield pytest.param(g, s, True, id=f"{g[:25]}|{s!r:.15}|ok")
        for s in bad:
            yield pytest.param(g, s, False, id=f"{g[:25]}|{s!r:.15}|no")


@pytest.fixture(scope="module")
def compiled():
    cache: dict[str, object] = {}

    def get(text: str):
        if text not in cache:
            cache[text] = Grammar.from_lark(text)
        return cache[text]

    return get


@pytest.mark.parametrize("grammar,text,expected", list(_params()) + EDGE_CASES)
def test_spec_examples(compiled, grammar, text, expected):
    assert compiled(grammar).validate(text) is expected


def _corpus_cases():
    for line in CORPUS.read_text().splitlines():
        case = json.loads(line)
        if case["grammar"] is None:
            continue
        for s in case["pass"]:
            yield case["grammar"], s, True, case["name"]
        for s in case["fail"]:
            yield case["grammar"], s, False, case["name"]


def _corpus_params():
    out = []
    for g, s, ok, name in _corpus_cases():
        out.append(pytest.param(g, s, ok, id=f"{name}|{s!r:.20}"))
    return out


@pytest.mark.parametrize("grammar,text,expected", _corpus_params())
def test_llguidance_corpus(compiled, grammar, text, expected):
    assert compiled(grammar).validate(text) is expected


# -- differential against llguidance (optional oracle) -----------------------------------------
# (grammar, alphabet for random strings, accepted seeds that random edits start from)
DIFF_GRAMMARS = [
    ('start: expr\nexpr: term (("+" | "-") term)*\nterm: NUM | "(" expr ")"\nNUM: /[0-9]+/',
     "12+-()", ["1+(2-3)", "(12)"]),
    ('%ignore " "\nstart: item ("," item)*\nitem: WORD | "[" start "]"\nWORD: /[a-z]+/',
     "ab ,[]", ["ab, [b ,a]", "a"]),
    ('start: A B\nA: /a+b?/\nB: "b" | "c"', "abc", ["abb", "aac", "abc"]),
    ('start: (kw | ID)+\nkw: "if" | "then"\nID: /[a-z]+/\n%ignore " "', "ifthen x",
     ["if x then", "ifx"]),
    ('start: x{2,5} "!"\nx: "a" | "ab"', "ab!", ["aab!", "ababab!"]),
    ('S: "a".."c" ("x" | "y")*\nstart: S (S)?', "abcxy", ["axyb", "c"]),
    ('start: "q" %regex {"substring_words": "the cat sat"} "q"', "q thecast",
     ["qcat satq", "qq", "q q"]),
    ('%llguidance {"ignore_once": true}\n%ignore /[ ]{1,2}/\nstart: "a"+', "a ", ["a  a a"]),
    ('start: foo "!"\nfoo[lazy]: /[0-9]+[a-z]/', "1a!", ["11a!"]),
    ('N: /[a-z]+/ & ~/(?s:.*)ab(?s:.*)/\nstart: N "."', "ab.", ["ba."]),
    # parametric rules (§13): permutations, counters, every function and condition
    ('start: perm::0x0\nperm::_: "" %if is_ones([0:3])\n | "a" perm::set_bit(0) %if bit_clear(0)\n'
     ' | "b" perm::set_bit(1) %if bit_clear(1)\n | "c" perm::set_bit(2) %if bit_clear(2)', "abc",
     ["abc", "cab", "bca"]),
    ('start: a::0\na::_: "a" a::incr([0:3]) %if lt([0:3], 5) | b::_\n'
     'b::_: "" %if is_zeros([0:3]) | "b" b::decr([0:3]) %if ne([0:3], 0)', "ab",
     ["aabb", "ab", "", "aaaaabbbbb"]),
    ('start: x::0xff\nx::_: "a" x::bit_and(0x0f) %if gt([0:8], 15)\n'
     ' | "b" x::clear_bit(0) %if and(bit_set(0), not(bit_set(7)))\n'
     ' | "c" x::bit_or(0x80) %if or(bit_count_le([0:8], 2), eq([0:8], 0x0e))\n'
     ' | "d" x::decr(_) %if bit_count_gt([0:4], 1)\n | "" %if bit_count_eq([4:8], 1)', "abcd",
     ["abc", "adc", "dacd", "abdbc"]),
]


def _sample(rng: random.Random, alphabet: str, seeds: list[str]) -> set[str]:
    """Seeds, their one-character edits, and short random strings over ``alphabet``."""
    out = {""} | set(seeds)
    for _ in range(80):
        out.add("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))))
    for seed in seeds:
        for i in range(len(seed) + 1):
            c = rng.choice(alphabet)
            out |= {seed[:i] + c + seed[i:], seed[:i] + seed[i + 1 :], seed[:i] + c + seed[i + 1 :]}
    return out


class _ByteTokenizer:
    """One token per byte plus EOS, for llguidance's byte-level acceptance."""

    def __init__(self) -> None:
        self.tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
        self.eos_token_id = 256
        self.bos_token_id = None
        self.special_token_ids = [256]

    def __call__(self, s):
        return list(s.encode() if isinstance(s, str) else s)


@pytest.fixture(scope="module")
def llg_accepts():
    llg = pytest.importorskip("llguidance")
    tok = llg.LLTokenizer(llg.TokenizerWrapper(_ByteTokenizer()), slices=[])

    def accepts(grammar: str, data: bytes) -> bool:
        m = llg.LLMatcher(tok, grammar, log_level=0)
        assert not m.is_error(), m.get_error()
        return all(m.consume_token(b) for b in data) and m.is_accepting()

    return accepts


@pytest.mark.parametrize(
    "grammar,alphabet,seeds",
    DIFF_GRAMMARS,
    ids=[g[0][:30] for g in DIFF_GRAMMARS],
)
def test_differential_against_llguidance(compiled, llg_accepts, grammar, alphabet, seeds):
    ours = compiled(grammar)
    assert all(llg_accepts(grammar, s.encode()) for s in seeds)
    verdicts = {}
    for s in sorted(_sample(random.Random(1234), alphabet, seeds)):
        verdicts[s] = llg_accepts(grammar, s.encode())
        assert ours.validate(s) is verdicts[s], s
    assert 0 < sum(verdicts.values()) < len(verdicts)


def _random_grammar(rng: random.Random) -> str:
    """A random grammar over a, b, c: three rules, EBNF operators, two terminals."""
    leaves = ['"a"', '"b"', '"ab"', "/[ab]/", "/a+/", "/b*a/", '"a".."b"', '"c"i', "A", "B"]

    def expr(depth: int, refs: list[str]) -> str:
        r = rng.random()
        if depth > 2 or r < 0.4:
            x = rng.choice(leaves + refs)
        elif r < 0.6:
            x = "(" + " ".join(expr(depth + 1, refs) for _ in range(rng.randint(2, 3))) + ")"
        elif r < 0.8:
            x = "(" + " | ".join(expr(depth + 1, refs) for _ in range(rng.randint(2, 3))) + ")"
        else:
            x = "[" + expr(depth + 1, refs) + "]"
        if rng.random() < 0.3:
            x += rng.choice(["*", "+", "?", "{2}", "{1,3}", "{,2}", "{2,}", " ~ 1..2"])
        return x

    names = ["start", "r1", "r2"]
    lines = []
    for i, name in enumerate(names):
        alts = [" ".join(expr(0, names[i + 1 :]) for _ in range(rng.randint(1, 3)))
                for _ in range(rng.randint(1, 2))]  # fmt: skip
        lines.append(f"{name}: " + " | ".join(alts))
    terms = ['"a"', '"ab" "b"', "/[ab]+/", '("a" | "c")+', '"a".."b" "c"{1,2}', '/[a-c]+/ & ~"ab"']
    lines += [f"A: {rng.choice(terms)}", f"B: {rng.choice(terms)}"]
    if rng.random() < 0.3:
        lines.append('%ignore " "')
    return "\n".join(lines)


@pytest.mark.parametrize("seed", range(6))
def test_random_grammars_against_llguidance(llg_accepts, seed):
    rng = random.Random(seed)
    for _ in range(5):
        grammar = _random_grammar(rng)
        ours = Grammar.from_lark(grammar)
        for _ in range(20):
            s = "".join(rng.choice("abc ") for _ in range(rng.randint(0, 6)))
            assert ours.validate(s) is llg_accepts(grammar, s.encode()), (grammar, s)


# -- grammar texts: we reject exactly what llguidance rejects ----------------------------------
_SEEDS = [
    'start: expr\nexpr: term ("+" term)*\nterm: NUM | "(" expr ")"\nNUM: /[0-9]+/',
    '%ignore " "\nstart: item ("," item)*\nitem: WORD | "[" start "]"\nWORD: /[a-z]+/',
    'start: A B\nA: /a+b?/ & ~"ab"\nB: "b" | "c"{2,3}',
    '%llguidance {"ignore_once": true}\n%import common.NUMBER\nstart: NUMBER ~ 2..3',
    'start: foo "!"\nfoo[lazy, capture]: /[0-9]+[a-z]/\nbar: <[1-5]>',
    'start: %regex {"substring_words": "a b"} x{,3}\nx: "q"i',
    'A: "a".."c"\nB: A{2} & ~A\nstart: B? A* "\\u00e9"i',
]
_PIECES = list('abAB_:"/|()[]{}*+?~&%,.-> \n01239=i') + [
    "start", "%ignore", "%import", "common.", "..", "::", "\\", "<[2]>", "%json {}",
]  # fmt: skip


def _llg_grammar_error(grammar: str) -> str:
    llg = pytest.importorskip("llguidance")
    return llg.LLMatcher.validate_grammar(grammar, None)


@pytest.mark.parametrize("seed", range(4))
def test_mutated_grammar_texts_error_like_llguidance(seed):
    from lexguide.errors import LexguideError
    from lexguide.grammar.lark import compile_lark

    rng = random.Random(seed)
    outcomes = set()
    for _ in range(60):
        text = rng.choice(_SEEDS)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(text) + 1)
            text = text[:i] + rng.choice(_PIECES + [""]) + text[i + rng.randint(0, 1) :]
        try:
            compile_lark(text)
            ours = ""
        except LexguideError as e:
            ours = str(e)
        theirs = _llg_grammar_error(text)
        assert bool(ours) == bool(theirs), (text, ours, theirs)
        outcomes.add(bool(ours))
    assert outcomes == {True, False}  # the sample holds both valid and invalid texts


def test_parametric_rules_instantiate_reachable_values_only():
    """Each field at most once, in any order, at least the first two (§13): one nonterminal per
    reachable bit set, not per 64-bit value."""
    g = Grammar.from_lark(
        '%ignore " "\nstart: "{" fields::0 "}"\n'
        'fields::_: "" %if is_ones([0:2])\n'
        ' | "a" fields::set_bit(0) %if bit_clear(0)\n'
        ' | "b" fields::set_bit(1) %if bit_clear(1)\n'
        ' | "c" fields::set_bit(2) %if bit_clear(2)\n'
        ' | "d" fields::set_bit(3) %if bit_clear(3)\n')
    assert all(g.validate(s) for s in ["{ab}", "{ba}", "{dcab}", "{ a c b }"])
    assert not any(g.validate(s) for s in ["{}", "{a}", "{aab}", "{abca}", "{cd}"])
    assert sum(n.startswith("fields::") for n in g.ir.nonterminals) == 16


def test_captures_of_parametric_rules():
    g = Grammar.from_lark('start: n::0\nn::_[capture="v"]: "x" n::incr([0:2]) %if lt([0:2], 2) '
                          '| "" %if eq([0:2], 2)')
    assert g.validate("xx") and not g.validate("x") and not g.validate("xxx")
    # every instance reports under the rule's name, inner ones first
    assert g.captures("xx") == [("v", b""), ("v", b"x"), ("v", b"xx")]
