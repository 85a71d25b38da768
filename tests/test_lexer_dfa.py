"""The core's lexer DFA (csrc/engine/lexer.h), checked against the Python regex derivatives."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from lexguide import Grammar
from lexguide.grammar.ir import GrammarBuilder
from lexguide.regex import nodes as rx
from lexguide.regex.syntax import parse_regex

LEXEMES = [r"[a-z]+", "if", r"[0-9]+", r"[0-9]+\.[0-9]+", r'"(\\.|[^"\\])*"', r"\s+", "é+"]


def _rxs() -> list[int]:
    """The lexemes' regexes, built in the current generation: an id made outside a compile is
    refused once the other tests' compiles have started a new one."""
    return [parse_regex(p) for p in LEXEMES]


def _one_of(indices: set[int]):
    """A grammar ``start: L_i | ...`` and its LexParser; lexeme i of the grammar is LEXEMES[i]."""
    b = GrammarBuilder()
    start = b.nonterminal("start")
    syms = [b.lexeme(x, LEXEMES[i]) for i, x in enumerate(_rxs())]
    for i in sorted(indices):
        b.rule(start, [syms[i]])
    return Grammar(b.build(start)).lexparser


def _prefix_alive(x: int, data: bytes) -> bool:
    for b in data:
        x = rx.derivative(x, b)
    return x != rx.NOTHING


@settings(max_examples=300, deadline=None)
@given(
    st.sets(st.integers(0, len(LEXEMES) - 1), min_size=1),
    st.lists(st.sampled_from([b"a", b"i", b"f", b"1", b".", b'"', b"\\", b" ", "é".encode()]),
             max_size=8).map(b"".join),
)  # fmt: skip
def test_dfa_agrees_with_derivatives(allowed: set[int], data: bytes) -> None:
    lp = _one_of(allowed)
    rxs = _rxs()
    state = lp.initial.lexer_state
    for n in range(len(data) + 1):
        prefix = data[:n]
        if n:
            state = lp.lexer.next(state, data[n - 1])
        alive = tuple(i for i in sorted(allowed) if _prefix_alive(rxs[i], prefix))
        got_alive = sorted(loc for g in lp.lexer.alive_lexemes(state) for loc in lp.locals_of(g))
        got_acc = sorted(loc for g in lp.lexer.accepting(state) for loc in lp.locals_of(g))
        assert tuple(got_alive) == alive
        assert tuple(got_acc) == tuple(i for i in alive if rx.matches(rxs[i], prefix))
        assert (state == 0) == (not alive)
        assert not lp.lexer.accepts_lazy(state)


# A lexeme whose states split the bytes into many classes, each leading elsewhere
MANY_CLASSES = r"([a-c][0-3]|[d-f][4-6]+|g[7-9]{2}|[h-k]\.|[l-o]-[p-s]|[t-z]_|[A-M][N-Z]|é|\x20|[\x00-\x08]!)+"


@pytest.mark.parametrize("full_rows", [False, True])
def test_class_rows_equal_derivatives_byte_by_byte(full_rows: bool) -> None:
    """Every byte from every state (breadth first, bytes in random order, so a class is
    filled by any of its bytes and read by the others) leads where the regex derivative does:
    the state is alive exactly when the derivative is, and states and derivatives correspond
    one to one. With full_rows each state's whole row is computed first (can_extend). Each
    case has its own lexeme (the DFA is shared: states another test stepped are filled)."""
    b = GrammarBuilder()
    start = b.nonterminal("start")
    x = parse_regex(MANY_CLASSES + ("#" if full_rows else "~"))
    b.rule(start, [b.lexeme(x, "many")])
    lp = Grammar(b.build(start)).lexparser
    rng = random.Random(int(full_rows))
    node_of = {lp.initial.lexer_state: x}
    state_of = {x: lp.initial.lexer_state}
    queue = [lp.initial.lexer_state]
    classes = set()
    for s in queue[:60]:
        if full_rows:
            assert lp.lexer.can_extend(s)
        order = list(range(256))
        rng.shuffle(order)
        successors = set()
        for byte in order:
            t, d = lp.lexer.next(s, byte), rx.derivative(node_of[s], byte)
            assert (t == 0) == (d == rx.NOTHING), (s, byte)
            successors.add(t)
            if t == 0:
                continue
            assert node_of.setdefault(t, d) == d and state_of.setdefault(d, t) == t, (s, byte)
            if t not in queue:
                queue.append(t)
        classes.add(len(successors))
    assert max(classes) >= 10  # the rows tried hold many classes


def test_a_cycle_of_empty_lexemes_is_not_a_cut_chain() -> None:
    """Lexemes matching the empty string may end one after another before a byte; once the
    chain is back at a (set, lexer state) it tried, every later one was tried too: the byte is
    refused without counting a cut chain (``chain_limit_hits``), and a byte a lexeme takes is
    read after any number of empty ones."""
    g = Grammar.from_lark('start: ("q" | a)*\na: /y*/')
    lp = g.lexparser
    assert lp.advance_byte(lp.initial, ord("z")) is None
    assert lp.advance_bytes(lp.initial, b"yyqqyq") is not None
    assert lp.chain_limit_hits == 0
    assert g.validate("yqqy") and not g.validate("yz")


def test_lazy_lexeme_ends_at_first_match() -> None:
    g = Grammar.from_lark('start: a b\na[lazy]: /[0-9]+/\nb: /[0-9]*x/')
    assert g.validate("1x") and g.validate("12x") and not g.validate("1")
    lp = g.lexparser
    st = lp.advance_bytes(lp.initial, b"1")  # the lazy lexeme ended at its first digit
    assert st is not None and not st.pending


def test_states_are_shared_across_grammars() -> None:
    """Same regex in two grammars -> the same lexer state: walks are cached per state."""
    a, b = _one_of({4}), _one_of({2, 4})
    sa, sb = a.initial.lexer_state, b.initial.lexer_state
    for byte in b'"ab':
        sa = a.lexer.next(sa, byte)
    for byte in b'"xy':
        sb = b.lexer.next(sb, byte)
    assert sa == sb


def test_unicode_class_lexeme_only_valid_utf8() -> None:
    g = Grammar.from_lark(r"start: /\w+/")
    assert g.validate("héllo日本")
    assert not g.validate(b"\xc3\x28")
    assert not g.validate(b"a\xc3")  # mid-character: a valid prefix, not a match
    lp = g.lexparser
    assert lp.advance_bytes(lp.initial, b"a\xc3") is not None


# Python that fills a fresh process's shared lexer DFA up to max_dfa_states (g's lexer)
FILL_DFA = (
    "import random\n"
    "from lexguide import Grammar, LimitExceeded\n"
    "g = Grammar.from_regex('(a|b)*a(a|b){20}')\n"
    "rng = random.Random(0)\n"
    "text = ''.join(rng.choice('ab') for _ in range(400_000))\n"
)


def run_python(code: str) -> str:
    """Run code in a fresh interpreter; its standard output (the run must succeed)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_state_limit_is_a_typed_error() -> None:
    """Past the DFA's state bound the caller gets LimitExceeded naming it (in its own process:
    the shared DFA it fills is then rotated for new grammars)."""
    code = FILL_DFA + "try:\n    g.validate(text)\nexcept LimitExceeded as e:\n    print('limit', e.limit)\n"
    assert run_python(code) == "limit max_dfa_states"
