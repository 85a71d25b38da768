"""The core's captures (``csrc/engine/captures.cc``) against the Python oracle it replaced
(``tests/reference/captures.py``) on random prefixes and sentences of capture grammars, its
order for equal spans, its bounds on long and highly ambiguous inputs, and the --quick mode of
``bench/captures.py``."""

from __future__ import annotations

import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from lexguide import Grammar, _core
from lexguide.errors import (CoreArgumentError, CoreError, CoreGrammarError, CoreIndexError,
                             LimitExceeded, MatcherError)
from reference.captures import capture_spans as oracle_spans

# (grammar, sentences): random prefixes are walked, sentences cut into random pieces
GRAMMARS = [
    ('start: with_stop\nwith_stop[capture, stop="<end>"]: /.*/', ["foo<end>", "<end>", "a<en<end>"]),
    ('start: outer\nouter[capture]: with_suffix\nwith_suffix[capture, suffix="<end>"]: /.*/',
     ["foo<end>", "x<end>"]),
    ("start: wl\nwl[capture, lazy]: /.*<end>/", ["foo<end>", "<end>"]),
    ('start: a\na[capture="X", stop_capture="S", suffix=/[.!]/]: /[a-z]+/', ["abc!", "a.", "z!"]),
    ('start: lst\nitem[capture]: /[a-z]+/ | /[0-9]+/\n%ignore " "\nlst[capture="all"]: item ("," item)*',
     ["ab, 12 ,c", "a", "x , y", "1,2,3"]),
    ('start: x y\nx[capture]: "a"*\ny[capture]: "b"*', ["aab", "", "bb", "aaa"]),
    ('start: "a" gen "b"\ngen[capture]: /[0-9]+/ | ""', ["ab", "a01b"]),
    ('start: a | b\na[capture]: "x" "y"?\nb[capture]: "x" "z"?', ["x", "xy", "xz"]),
    ('start: "n=" num\nnum[capture]: %json {"type": "integer"}', ["n=42", "n=-7", "n=0"]),
    ('start: gen\ngen[capture, stop=""]: /[a-z ]*/', ["ab c", ""]),
    ('start: n::0\nn::_[capture="v"]: "x" n::incr([0:2]) %if lt([0:2], 2) | "" %if eq([0:2], 2)',
     ["xx"]),
    ('start: s\ns[capture]: s s | "a" | "b"', ["a", "ab", "abab", "aaaaaa"]),
    ('start: pair*\npair[capture="pair"]: key "=" value "\\n"\nkey[capture]: /[a-z]+/\n'
     'value[capture]: %json {"type": "integer"}', ["a=1\nbc=-20\n", ""]),
    ('start: e\ne[capture]: e "+" t | t\nt[capture]: t "*" f | f\nf[capture="f"]: "(" e ")" | /[0-9]+/',
     ["1+2*3", "(1+2)*3", "((4))"]),
    ('start: a b\na[capture]: /[a-z]+/ | ""\nb[capture, stop=";"]: /[a-z;]*/', ["ab;", ";"]),
]
ALPHABET = b"<end>.!xyzab01 ,n=-+*()\n;"


def core_spans(lp, pieces, final):
    table, names = lp.capture_table()
    return [(hi, lo, names[name]) for name, lo, hi in table.read(pieces, final)]


def random_walk(lp, rng: random.Random, n_steps: int):
    """Pieces of a random prefix (bytes in runs of 1-4, the state after each piece or None;
    special tokens where the grammar takes one), the data, the final state."""
    state, pieces, data, run = lp.initial, [], bytearray(), bytearray()
    for _ in range(n_steps):
        specials = lp.expected_token_lexemes(state)
        if specials and rng.random() < 0.3:
            if run:
                pieces.append((bytes(run), state if rng.random() < 0.7 else None))
                run.clear()
            nxt = lp.advance_token_lexeme(state, specials)
            if nxt is None:
                break
            state = nxt
            pieces.append((specials, state if rng.random() < 0.7 else None))
            continue
        allowed = [b for b, ok in enumerate(lp.allowed_bytes(state)) if ok]
        if not allowed:
            break
        preferred = [b for b in allowed if b in ALPHABET]
        byte = rng.choice(preferred if preferred and rng.random() < 0.9 else allowed)
        state = lp.advance_byte(state, byte)
        run.append(byte)
        data.append(byte)
        if len(run) >= rng.randint(1, 4):
            pieces.append((bytes(run), state if rng.random() < 0.7 else None))
            run.clear()
    if run:
        pieces.append((bytes(run), state if rng.random() < 0.7 else None))
    return pieces, bytes(data), state


def same(lp, data, pieces, final):
    """Core and oracle agree: the same captures (or both refuse the input)."""
    try:
        want = oracle_spans(lp, data, pieces, final)
    except MatcherError:
        with pytest.raises(CoreArgumentError):
            core_spans(lp, pieces, final)
        return False
    got = core_spans(lp, pieces, final)
    assert sorted(got) == sorted(want), (data, final)
    assert [(hi, -lo) for hi, lo, _ in got] == sorted((hi, -lo) for hi, lo, _ in got)
    return True


def cut(lp, rng: random.Random, data: bytes):
    """``data`` (a prefix of the grammar) in random pieces, each with the state after it or
    None (an EOS special token at the end when the grammar needs one to end)."""
    state, pieces, at = lp.initial, [], 0
    while at < len(data):
        n = rng.randint(1, 4)
        state = lp.advance_bytes(state, data[at:at + n])
        assert state is not None, data
        pieces.append((data[at:at + n], state if rng.random() < 0.7 else None))
        at += n
    if not lp.is_accepting(state) and lp.eos_lexemes:
        pieces.append((lp.eos_lexemes, None))
    return pieces


@pytest.mark.parametrize("source,sentences", GRAMMARS)
def test_core_matches_the_oracle_on_random_inputs(source, sentences):
    lp = Grammar.from_lark(source).lexparser
    rng = random.Random(source)
    n_final = n_prefix = 0
    for _ in range(30):
        pieces, data, state = random_walk(lp, rng, rng.randint(0, 24))
        n_prefix += same(lp, data, pieces, False)
        if lp.is_accepting(state):
            n_final += same(lp, data, pieces, True)
        # a byte the grammar may not take here
        bad = bytes([rng.choice(ALPHABET)])
        same(lp, data + bad, [*pieces, (bad, None)], rng.random() < 0.5)
    for text in sentences:
        data = text.encode()
        for _ in range(4):
            n_final += same(lp, data, cut(lp, rng, data), True)
            k = rng.randint(0, len(data))
            n_prefix += same(lp, data[:k], cut(lp, rng, data[:k]), False)
    assert n_prefix > 20 and n_final >= 4 * len(sentences)


def test_equal_spans_inner_rules_first():
    g = Grammar.from_lark('start: outer\nouter[capture]: mid\nmid[capture="m"]: inner\n'
                          'inner[capture]: /[a-z]+/')
    assert g.captures("abc") == [("inner", b"abc"), ("m", b"abc"), ("outer", b"abc")]
    g = Grammar.from_lark('start: a\na[capture="a"]: x?\nx[capture="x"]: y?\ny[capture="y"]: "" | "q"')
    assert g.captures("") == [("y", b""), ("x", b""), ("a", b"")]


def test_errors_name_the_byte():
    g = Grammar.from_lark('start: a\na[capture]: "x" "y"')
    with pytest.raises(CoreArgumentError) as e:
        g.captures("xq")
    assert e.value.where == {"byte": 1}
    with pytest.raises(CoreArgumentError) as e:  # a prefix is not a complete sentence
        g.captures("x")
    assert e.value.where == {"byte": 1} and "complete sentence" in str(e.value)


def test_long_input_is_linear_and_bounded():
    g = Grammar.from_lark('start: lst\nitem[capture]: /[a-z]+/\nlst: item ("," item)*')
    text = b",".join(b"ab" for _ in range(20_000))
    assert len(g.captures(text)) == 20_000
    table, _ = g.lexparser.capture_table()
    with pytest.raises(LimitExceeded) as e:
        table.read([(text, None)], True, max_items=10_000)
    assert e.value.limit == "max_capture_items"


def test_ambiguous_input_hits_the_step_bound():
    g = Grammar.from_lark('start: s\ns[capture]: s s | "a"')
    assert len(g.captures("a" * 30)) == 30 * 31 // 2  # every span is an s of some parse
    table, _ = g.lexparser.capture_table()
    with pytest.raises(LimitExceeded) as e:
        table.read([(b"a" * 60, None)], True, max_steps=100_000)
    assert e.value.limit == "max_capture_steps"
    with pytest.raises(LimitExceeded) as e:  # the default bound: an error, not a long run
        g.captures("a" * 1000)
    assert e.value.limit in ("max_capture_steps", "max_capture_items")


def test_bench_quick_mode_runs():
    bench = Path(__file__).resolve().parent.parent / "bench" / "captures.py"
    proc = subprocess.run([sys.executable, str(bench), "--quick"], capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| list of items | 111 | 21 |" in proc.stdout


def test_hostile_arguments_raise_typed_errors():
    lp = Grammar.from_lark('start: a\na[capture]: "x" "y"').lexparser
    table, _ = lp.capture_table()
    with pytest.raises(CoreIndexError):  # a special token of a lexeme the grammar lacks
        table.read([(frozenset({999}), None)], False)
    with pytest.raises(CoreIndexError):  # a parse state of no set
        table.read([(b"x", (999_999, 0, False))], False)
    with pytest.raises(CoreIndexError):
        table.read([(b"x", (-1, 0, False))], False)
    with pytest.raises(CoreGrammarError):  # marks that do not fit the grammar
        _core.CaptureTable(lp._core, [-1], [])
    with pytest.raises(CoreError):  # a regex id that names no node of the grammar's store
        _core.CaptureTable(lp._core, [-1] * len(lp.ir.nonterminals), [(0, -1, 1 << 40, 0)] * lp.n_lexemes)
    assert table.read([], False) == []


def test_threads_read_captures_of_one_grammar():
    # the replay holds the grammar's lock, the parse runs without it (GIL released)
    g = Grammar.from_lark(GRAMMARS[4][0])
    texts = [", ".join(str(i * j) if j % 2 else "ab" * j for j in range(1, 40 + i)) for i in range(8)]
    want = [g.captures(t) for t in texts]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(g.captures, texts * 4))
    assert got == want * 4
