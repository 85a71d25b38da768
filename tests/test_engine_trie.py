"""The token prefix tree: lexicographic positions, prefix ranges, and walks equal to row walks."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from lexguide import TokenizerInfo
from lexguide.engine.walk import walker_for
from lexguide.grammar import rx
from lexguide.grammar.lexparser import shared_lexer

ALPHABET = b"ab\x00\xff"


def _vocab(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    toks = [b"<eos>"]
    for n in (1, 2, 3):
        toks += [bytes(p) for p in itertools.product(ALPHABET, repeat=n)]
    toks += [bytes(rng.choice(ALPHABET) for _ in range(rng.randint(1, 8))) for _ in range(300)]
    toks += [b"a", b"a\x00", b"a\x00b"]  # duplicates and zero bytes: "a" < "a\x00" < "a\x00b"
    return toks


def test_positions_are_lexicographic_and_prefixes_are_ranges():
    vocab = _vocab(0)
    info = TokenizerInfo.from_token_bytes(vocab, eos_ids=[0])
    trie = info.trie
    data = [vocab[i] for i in info.text_ids[trie.row_at].tolist()]
    assert data == sorted(data)
    assert (trie.row_at[trie.position] == np.arange(len(data))).all()
    for d, level in enumerate(trie.levels, start=1):
        for lo, hi in zip(level.lo.tolist(), level.hi.tolist()):
            prefix = data[lo][:d]
            assert all(x[:d] == prefix for x in data[lo:hi])
            assert lo == 0 or not (len(data[lo - 1]) >= d and data[lo - 1][:d] == prefix)
            assert hi == len(data) or not (len(data[hi]) >= d and data[hi][:d] == prefix)
    # every distinct prefix is one node
    assert sum(len(lv.lo) for lv in trie.levels) == len({x[:d] for x in data for d in range(1, len(x) + 1)})


@pytest.mark.parametrize("pattern", ["a*", "(ab)*\\x00?", "[^\\x00]{0,3}b", "a(\\x00|b)*\\xff", ".*"])
@pytest.mark.parametrize("seed", range(3))
def test_trie_walk_equals_row_walk(pattern, seed):
    vocab = _vocab(seed)
    info = TokenizerInfo.from_token_bytes(vocab, eos_ids=[0])
    lexer = shared_lexer()
    node = rx.from_regex(pattern, allow_invalid_utf8=True)
    gid = lexer.lexeme_id(node, False)
    walker = walker_for(lexer, info)
    state = lexer.start([gid])
    walked = 0
    for first in ALPHABET:
        t = lexer.next(state, first)
        if t == 0:
            continue
        walked += 1
        walker._grow_state_props()
        rows = info.rows_by_first[first]
        want_death, want_acc = walker._death_walk(t, rows, 1)
        death, acc = info.trie.death_walk([first], t, walker._step, walker._acc_of)
        at = info.trie.position[rows]
        assert (death[at] == want_death).all()
        dead = want_death < info.lengths[rows]
        assert (acc[at][dead] == want_acc[dead]).all()
    assert walked


@pytest.mark.parametrize("seed", range(3))
def test_common_prefix_is_exact(seed):
    vocab = _vocab(seed)
    info = TokenizerInfo.from_token_bytes(vocab, eos_ids=[0])
    trie = info.trie
    data = [vocab[i] for i in info.text_ids[trie.row_at].tolist()]
    rng = random.Random(seed)
    for _ in range(40):
        lit = bytes(rng.choice(ALPHABET) for _ in range(rng.randint(1, 10)))
        got = trie.common_prefix(lit, np.arange(len(data)))
        want = [next((k for k in range(min(len(x), len(lit))) if x[k] != lit[k]), min(len(x), len(lit)))
                for x in data]
        assert got.tolist() == want, lit


@pytest.mark.parametrize("seed", range(3))
def test_literal_walk_equals_row_walk(seed):
    """Literal nodes (keys, enum values) are walked off the prefix tree without lexer rows."""
    vocab = _vocab(seed)
    info = TokenizerInfo.from_token_bytes(vocab, eos_ids=[0])
    lexer = shared_lexer()
    walker = walker_for(lexer, info)
    rng = random.Random(seed)
    lits = [bytes(rng.choice(ALPHABET) for _ in range(rng.randint(1, 10))) for _ in range(30)]
    for lit in [b"a", b"a\x00", b"ab\xff"] + lits:
        node = rx.literal(lit)
        fast = walker._literal_set_walk([lit])
        state = lexer._intern(((lexer.lexeme_id(node, False), node),))
        walker._grow_state_props()
        rows = walker._rows_by_first(walker._alive_first_bytes(state))
        death, acc = walker._death_walk(state, rows, 0)
        taken = death > 0
        assert fast.rows.tolist() == rows[taken].tolist(), lit
        assert fast.death.tolist() == death[taken].tolist(), lit
        assert fast.acc.tolist() == acc[taken].tolist(), lit
