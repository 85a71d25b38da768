"""Root walks split among fill_masks' threads (csrc/engine/split.h) give the serial masks.

The vocabulary is large enough for its trie to be split (kSplitWalkNodes = 4,096 nodes), and
small enough not to be cached on disk. Every comparison is against masks computed one matcher
at a time on a second TokenizerInfo with its own walk caches (so no split walk is reused), and
some against brute force."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from reference import recognizer
from test_engine_mask import _random_grammar
from test_lexer_dfa import FILL_DFA, run_python

from lexguide import Grammar, Matcher, TokenizerInfo, fill_masks

ALPHABET = b'ab0 ,{}":[]'


def _vocab(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    toks = [b"<eos>"]
    for n in (1, 2, 3):
        toks += [bytes(p) for p in itertools.product(ALPHABET, repeat=n)]
    toks += [bytes(rng.choice(ALPHABET) for _ in range(rng.randint(4, 12))) for _ in range(2500)]
    return list(dict.fromkeys(toks))


VOCAB = _vocab(0)
SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "array", "items": {"type": "integer"}}}},
    {"type": "array", "items": {"type": "string", "maxLength": 7}},
    {"type": "object", "additionalProperties": {"type": "integer"}},
]


def _grammars(seed: int) -> list[Grammar]:
    rng = random.Random(seed)
    return ([_random_grammar(rng) for _ in range(6)] + [Grammar.from_json_schema(s) for s in SCHEMAS]
            + [Grammar.from_regex("(ab|0)*[ ,]{2,4}(a|b0)+"), Grammar.from_regex('"[^"]{0,9}"')])


def _ids(mask: np.ndarray, n: int) -> set[int]:
    return set(np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little")[:n]).tolist())


@pytest.mark.parametrize("seed", range(4))
def test_split_root_walks_equal_serial_masks(seed):
    split = TokenizerInfo.from_token_bytes(VOCAB, eos_ids=[0])
    serial = TokenizerInfo.from_token_bytes(VOCAB, eos_ids=[0])
    grammars = _grammars(seed)
    rng = random.Random(seed)
    ms = [Matcher(g, split) for g in grammars for _ in range(2)]
    refs = [Matcher(m.grammar, serial) for m in ms]
    out = np.zeros((len(ms), split.n_words), dtype=np.uint32)
    for step in range(6):
        fill_masks(ms, out, n_threads=2)
        for i, (m, ref) in enumerate(zip(ms, refs)):
            want = ref.compute_mask()
            assert np.array_equal(out[i], want), (seed, step, i)
            choices = sorted(_ids(want, len(VOCAB)) - {0})
            if choices and not m.is_accepting() or choices and rng.random() < 0.8:
                t = rng.choice(choices)
                m.consume(t)
                ref.consume(t)
    stats = ms[0]._engine._core.stats
    assert stats["split_walks"] > 0  # the pieces were used
    assert refs[0]._engine._core.stats["split_walks"] == 0


def test_split_masks_equal_brute_force():
    info = TokenizerInfo.from_token_bytes(VOCAB, eos_ids=[0])
    g = Grammar.from_json_schema(SCHEMAS[0])
    prefixes = [b"", b'{"a":"ab', b'{"b":[0', b'{"a":"b ","b":[', b'{"a":"b ","b":[0,']
    ms = [Matcher(g, info) for _ in prefixes]
    for m, p in zip(ms, prefixes):
        m.consume_tokens([VOCAB.index(bytes([c])) for c in p])
    out = np.zeros((len(ms), info.n_words), dtype=np.uint32)
    fill_masks(ms, out, n_threads=2)
    assert ms[0]._engine._core.stats["split_walks"] > 0
    ref = recognizer(g)
    for m, p, row in zip(ms, prefixes, out):
        want = ref.allowed(p, VOCAB, skip=[0])
        if ref.is_accepting(p):
            want.add(0)
        assert _ids(row, len(VOCAB)) == want, p


def test_a_limit_hit_in_a_thread_is_raised_not_a_crash():
    """The lexer DFA full (max_dfa_states) while fill_masks' threads walk: LimitExceeded in
    the caller, the process alive (an exception escaping a thread used to terminate it)."""
    code = FILL_DFA + (
        "import itertools, numpy as np\n"
        "from lexguide import Matcher, TokenizerInfo, fill_masks\n"
        "try:\n    g.validate(text)\nexcept LimitExceeded:\n    pass\n"
        "vocab = [b'<eos>'] + [bytes(p) for n in range(1, 13) for p in itertools.product(b'ab', repeat=n)]\n"
        "info = TokenizerInfo.from_token_bytes(vocab, eos_ids=[0])\n"
        "ms = [Matcher(g, info) for _ in range(2)]\n"
        "out = np.zeros((2, info.n_words), dtype=np.uint32)\n"
        "try:\n    fill_masks(ms, out, n_threads=2)\n"
        "except LimitExceeded as e:\n    print('limit', e.limit)\n"
    )
    assert run_python(code) == "limit max_dfa_states"
