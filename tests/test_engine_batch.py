"""Masks written into callers' buffers: Matcher.fill_mask, lexguide.fill_masks (threads),
and Matcher.validate_tokens for speculative drafts."""

from __future__ import annotations

import random

import numpy as np
import pytest

from lexguide import Grammar, Matcher, TokenizerInfo, fill_masks

ALPHABET = b'{}[]":,ab01 '
VOCAB = [b"<eos>"] + [bytes([c]) for c in ALPHABET] + [
    b'{"', b'":', b'"a', b'ab', b'01', b'", "', b'[1', b'],', b'": "', b"true", b"null", b"10"]
INFO = TokenizerInfo.from_token_bytes(VOCAB, eos_ids=[0])
SCHEMAS = [
    {"type": "array", "items": {"type": "integer"}},
    {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "array"}}},
    {"type": "string", "maxLength": 5},
    {"enum": ["ab", "a", 10, None, True]},
]
GRAMMARS = [Grammar.from_json_schema(s) for s in SCHEMAS] + [Grammar.from_regex("(ab|01)+")]


def _random_matchers(n: int, seed: int) -> list[Matcher]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        m = Matcher(GRAMMARS[i % len(GRAMMARS)], INFO)
        for _ in range(rng.randint(0, 6)):
            mask = np.unpackbits(m.compute_mask().view(np.uint8), bitorder="little")[: len(VOCAB)]
            choices = [t for t in np.flatnonzero(mask).tolist() if t != 0]
            if not choices:
                break
            m.consume(rng.choice(choices))
        out.append(m)
    return out


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_fill_masks_equals_masks_one_by_one(threads):
    matchers = _random_matchers(64, threads)
    out = np.full((70, INFO.n_words), 0xDEADBEEF, dtype=np.uint32)
    fill_masks(matchers, out, n_threads=threads)
    for i, m in enumerate(matchers):
        assert np.array_equal(out[i], m.compute_mask()), i
    assert (out[64:] == 0xDEADBEEF).all()  # rows past the matchers are untouched


def test_fill_mask_writes_one_row_in_place():
    m = _random_matchers(3, 7)[2]
    out = np.zeros((4, INFO.n_words), dtype=np.int32)
    m.fill_mask(out, row=1)
    assert np.array_equal(out[1].view(np.uint32), m.compute_mask())
    assert not out[0].any() and not out[2:].any()


def test_fill_masks_rejects_bad_buffers():
    ms = _random_matchers(2, 0)
    with pytest.raises(ValueError):
        fill_masks(ms, np.zeros((1, INFO.n_words), dtype=np.uint32))  # too few rows
    with pytest.raises(ValueError):
        fill_masks(ms, np.zeros((2, INFO.n_words + 1), dtype=np.uint32))
    with pytest.raises(TypeError):
        fill_masks(ms, np.zeros((2, INFO.n_words), dtype=np.float32))
    with pytest.raises(ValueError):
        fill_masks(ms, np.zeros((2, 2 * INFO.n_words), dtype=np.uint32)[:, ::2])  # strided


def test_fill_masks_into_a_torch_tensor():
    torch = pytest.importorskip("torch")
    matchers = _random_matchers(8, 3)
    out = torch.zeros((8, INFO.n_words), dtype=torch.int32)
    fill_masks(matchers, out)
    for i, m in enumerate(matchers):
        assert np.array_equal(out[i].numpy().view(np.uint32), m.compute_mask())


def test_validate_tokens_counts_the_accepted_prefix_without_consuming():
    m = Matcher(GRAMMARS[0], INFO)
    ids = [VOCAB.index(t) for t in (b"[1", b",", b"0", b"]", b"a")]
    before = m.compute_mask().copy()
    assert m.validate_tokens(ids) == 4  # "a" after the closed array is rejected
    assert m.n_consumed == 0 and np.array_equal(m.compute_mask(), before)
    assert m.validate_tokens([]) == 0
