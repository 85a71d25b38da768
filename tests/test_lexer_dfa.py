"""LexerDFA: the lazy multi-lexeme byte DFA, checked against per-lexeme derivative matching."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lexguide.errors import LimitExceeded
from lexguide.grammar import rx
from lexguide.grammar.lexer import DEAD, LexerDFA

LEXEMES = [r"[a-z]+", "if", r"[0-9]+", r"[0-9]+\.[0-9]+", r'"(\\.|[^"\\])*"', r"\s+", "é+"]
RXS = [rx.from_regex(p) for p in LEXEMES]


def _walk(dfa: LexerDFA, state: int, data: bytes) -> int:
    for b in data:
        state = dfa.next(state, b)
    return state


def _prefix_alive(x: int, data: bytes) -> bool:
    for b in data:
        x = rx.derivative(x, b)
    return x != rx.NOTHING


@settings(max_examples=300, deadline=None)
@given(
    st.sets(st.integers(0, len(LEXEMES) - 1)),
    st.lists(st.sampled_from([b"a", b"i", b"f", b"1", b".", b'"', b"\\", b" ", "é".encode()]),
             max_size=8).map(b"".join),
)  # fmt: skip
def test_dfa_agrees_with_derivatives(allowed: set[int], data: bytes) -> None:
    dfa = LexerDFA(RXS, [False] * len(RXS))
    state = dfa.start(allowed)
    for n in range(len(data) + 1):
        prefix = data[:n]
        if n:
            state = dfa.next(state, data[n - 1])
        alive = tuple(i for i in sorted(allowed) if _prefix_alive(RXS[i], prefix))
        assert dfa.alive_lexemes(state) == alive
        assert dfa.accepting(state) == tuple(i for i in alive if rx.matches(RXS[i], prefix))
        assert (state == DEAD) == (not alive)
        assert not dfa.accepts_lazy(state)


def test_dead_state_and_start_cache() -> None:
    dfa = LexerDFA(RXS, [False] * len(RXS))
    assert dfa.start([]) == DEAD
    s = dfa.start({0, 1})
    assert dfa.start([1, 0]) == s
    assert dfa.n_states == 2
    assert dfa.next(DEAD, 65) == DEAD
    assert (dfa.table[DEAD] == DEAD).all()
    st_if = _walk(dfa, s, b"if")
    assert dfa.accepting(st_if) == (0, 1)  # maximal munch hands both lexemes to the parser
    assert dfa.accepting(_walk(dfa, s, b"ifx")) == (0,)
    assert _walk(dfa, s, b"i1") == DEAD
    with pytest.raises(IndexError):
        dfa.start([99])


def test_table_rows_lazily_and_vectorised() -> None:
    dfa = LexerDFA(RXS, [False] * len(RXS))
    s = dfa.start(range(len(RXS)))
    assert (dfa.table[s] == -1).all()  # not computed yet
    dfa.ensure_rows(np.array([s, s, DEAD], dtype=np.int32))
    row = dfa.table[s]
    assert (row >= 0).all()
    assert row[ord("x")] == row[ord("y")]  # same byte class
    assert row[ord("%")] == DEAD
    # grow the table beyond its initial capacity; rows of new states stay -1 until ensured
    frontier = np.unique(row)
    while dfa.n_states < 200:
        dfa.ensure_rows(frontier)
        tab = dfa.table  # re-read: ensure_rows may reallocate
        nxt = np.unique(tab[frontier])
        if set(nxt.tolist()) <= set(frontier.tolist()):
            break
        frontier = np.union1d(frontier, nxt)
    assert dfa.table.shape[1] == 256 and dfa.table.dtype == np.int32
    assert dfa.table.shape[0] >= dfa.n_states


def test_lazy_lexeme_ends_at_first_match() -> None:
    dfa = LexerDFA([rx.from_regex("[0-9]+"), rx.from_regex("[0-9]+x")], [True, False])
    s = dfa.start([0, 1])
    s1 = dfa.next(s, ord("1"))
    assert dfa.accepting(s1) == (0,) and dfa.accepts_lazy(s1)
    s2 = dfa.next(s1, ord("2"))
    assert dfa.alive_lexemes(s2) == (1,)  # the lazy lexeme ended after one digit
    assert not dfa.accepts_lazy(s2)
    only_lazy = dfa.start([0])
    assert dfa.next(dfa.next(only_lazy, ord("1")), ord("2")) == DEAD
    # a nullable lazy lexeme matches the empty string right away
    empty = LexerDFA([rx.from_regex(".*")], [True])
    assert empty.accepts_lazy(empty.start([0]))
    assert empty.next(empty.start([0]), ord("a")) == DEAD


def test_states_are_canonical_across_dfas() -> None:
    """Same regexes -> same state keys in different DFAs (masks can be cached by key)."""
    a = LexerDFA([RXS[4]], [False])
    b = LexerDFA([rx.from_regex("[0-9]"), RXS[4]], [False, False])
    sa = _walk(a, a.start([0]), b'"ab')
    sb = _walk(b, b.start([1]), b'"xy')
    assert a.state_key(sa)[0][1] == b.state_key(sb)[0][1]


def test_state_limit_is_quick() -> None:
    x = rx.from_regex("(a|b)*a(a|b){20}")
    dfa = LexerDFA([x], [False], max_states=2000)
    t0 = time.perf_counter()
    with pytest.raises(LimitExceeded) as ei:
        dfa.ensure_reachable(dfa.start([0]))
    assert ei.value.limit == "max_dfa_states"
    assert time.perf_counter() - t0 < 10.0
    # lazily, a single path is fine
    dfa2 = LexerDFA([x], [False], max_states=2000)
    s = _walk(dfa2, dfa2.start([0]), b"ab" * 20 + b"a" + b"b" * 20)
    assert dfa2.accepting(s) == (0,)


def test_unicode_class_lexeme_only_valid_utf8() -> None:
    dfa = LexerDFA([rx.from_regex(r"\w+")], [False])
    s = dfa.start([0])
    assert dfa.accepting(_walk(dfa, s, "héllo日本".encode())) == (0,)
    assert _walk(dfa, s, b"\xc3\x28") == DEAD
    assert dfa.accepting(_walk(dfa, s, b"a\xc3")) == ()  # mid-character: alive, not accepting
    assert dfa.alive_lexemes(_walk(dfa, s, b"a\xc3")) == (0,)


def test_first_bytes_and_bad_states() -> None:
    dfa = LexerDFA([rx.from_regex("[0-9]+"), rx.from_regex("true")], [False, False])
    s = dfa.start([0, 1])
    assert dfa.first_bytes(s).tolist() == [ord(c) for c in "0123456789t"]
    assert dfa.first_bytes(DEAD).tolist() == []
    with pytest.raises(IndexError):
        dfa.ensure_rows(np.array([dfa.n_states + 5]))
    with pytest.raises(IndexError):
        dfa.ensure_rows(np.array([-1]))


def test_pickle_roundtrip_rebuilds_same_language() -> None:
    import pickle

    dfa = LexerDFA([RXS[4], RXS[0]], [False, True], max_states=1234)
    clone = pickle.loads(pickle.dumps(dfa))
    assert clone.lexeme_rxs == dfa.lexeme_rxs  # same process: same canonical ids
    assert clone.lazy == (False, True) and clone.max_states == 1234
    s = _walk(clone, clone.start([0, 1]), b'"a\\"b"')
    assert clone.accepting(s) == (0,)


def test_pickle_into_another_process() -> None:
    """Node ids differ between processes; the pickle carries the regexes, not the ids."""
    import pickle
    import subprocess
    import sys

    dfa = LexerDFA([rx.from_regex(r"[a-z]+\d{2}"), rx.from_regex("ab&&|x")], [False, False])
    code = (
        "import pickle, sys\n"
        "from lexguide.grammar import rx\n"
        "rx.from_regex('zzz[0-9]+qq')  # shift the ids of this process\n"
        "d = pickle.loads(sys.stdin.buffer.read())\n"
        "s = d.start([0, 1])\n"
        "for b in b'abc12': s = d.next(s, b)\n"
        "print(d.accepting(s), rx.matches(d.lexeme_rxs[1], b'ab&&'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input=pickle.dumps(dfa), capture_output=True, check=True
    )
    assert out.stdout.decode().split() == ["(0,)", "True"]


def test_concurrent_row_construction_is_consistent() -> None:
    """Matchers may compute masks in threads sharing one LexerDFA."""
    import threading

    rxs = [rx.from_regex(p) for p in (r"[a-z]{1,6}\d{0,3}", r"\w+x", r"(ab|ba){2,5}")]
    texts = [bytes(t) for t in (b"abc12", b"abab", b"baba1", b"zzzzzz999", b"xyzx", b"abbaab")]
    shared = LexerDFA(rxs, [False, False, False])
    results: dict[int, list] = {}

    def work(k: int) -> None:
        s0 = shared.start([0, 1, 2])
        out = []
        for t in texts[k % 2 :] + texts[: k % 2]:
            out.append((t, shared.state_key(_walk(shared, s0, t))))
        results[k] = sorted(out)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    fresh = LexerDFA(rxs, [False, False, False])
    s0 = fresh.start([0, 1, 2])
    expected = sorted((t, fresh.state_key(_walk(fresh, s0, t))) for t in texts)
    assert all(r == expected for r in results.values()) and len(results) == 6
    assert len(set(shared._states)) == shared.n_states  # no state interned twice
