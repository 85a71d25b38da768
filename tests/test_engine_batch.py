"""Masks written into callers' buffers: Matcher.fill_mask, lexguide.fill_masks (threads),
and Matcher.validate_tokens for speculative drafts."""

from __future__ import annotations

import random

import numpy as np
import pytest

from lexguide import Grammar, Matcher, TokenizerInfo, apply_mask, fill_masks
from lexguide.engine.matcher import mask_logits_rows

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
    # again, now that every mask is cached (copied without threads), beside new states
    more = matchers + _random_matchers(16, 100 + threads)
    again = np.zeros((80, INFO.n_words), dtype=np.uint32)
    fill_masks(more, again, n_threads=threads)
    for i, m in enumerate(more):
        assert np.array_equal(again[i], m.compute_mask()), i


def test_fill_masks_from_several_threads_at_once():
    # calls from several Python threads share the engine's pool (one job at a time, the
    # others wait for it or compute alone): every call fills its own rows exactly, and returns
    import threading

    batches = [_random_matchers(24, 200 + k) for k in range(4)]
    outs = [np.zeros((24, INFO.n_words), dtype=np.uint32) for _ in batches]
    errors = []

    def run(k):
        try:
            for _ in range(20):
                fill_masks(batches[k], outs[k], n_threads=2)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and not errors
    for ms, out in zip(batches, outs):
        for i, m in enumerate(ms):
            assert np.array_equal(out[i], m.compute_mask()), i


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


def test_mask_logits_rows_equals_apply_mask_row_by_row():
    rng = np.random.default_rng(3)
    for width, n_words in [(64, 2), (100, 4), (37, 2), (140, 4)]:  # narrower and wider
        bitmask = rng.integers(0, 2**32, size=(3, n_words), dtype=np.uint64).astype(np.uint32)
        bitmask[0, 0] = 0  # a word of zeros
        bitmask[1, 0] = 0xFFFFFFFF  # and one of ones
        for dtype in (np.float32, np.float16):
            # rows 4 and 1 of a (5, width) slice of a wider buffer (row stride > width)
            base = rng.standard_normal((5, width + 7)).astype(dtype)
            logits = base[:, :width]
            want = logits.copy()
            for row, mask in [(4, bitmask[0]), (1, bitmask[1]), (0, bitmask[2])]:
                apply_mask(want[row], mask)
            before = base.copy()
            mask_logits_rows(logits, bitmask, [4, 1, 0])
            assert np.array_equal(logits, want)
            assert np.array_equal(base[:, width:], before[:, width:])  # past the row: untouched
            all_rows = rng.standard_normal((3, width)).astype(dtype)
            want = all_rows.copy()
            for row in range(3):
                apply_mask(want[row], bitmask[row])
            mask_logits_rows(all_rows, bitmask)  # no rows: one bitmask row per logits row
            assert np.array_equal(all_rows, want)


def test_mask_logits_rows_refuses_what_it_cannot_mask():
    bitmask = np.zeros((1, 2), dtype=np.uint32)
    with pytest.raises(ValueError, match="float32, float16 or bfloat16"):
        mask_logits_rows(np.zeros((1, 64)), bitmask)  # float64
    with pytest.raises(ValueError, match="out of range"):
        mask_logits_rows(np.zeros((2, 64), dtype=np.float32), bitmask, [2])
    with pytest.raises(ValueError, match="differ in number"):
        mask_logits_rows(np.zeros((2, 64), dtype=np.float32), bitmask)
    with pytest.raises(ValueError, match="contiguous"):
        mask_logits_rows(np.zeros((1, 128), dtype=np.float32)[:, ::2], bitmask)
    with pytest.raises(ValueError, match="32-bit"):
        mask_logits_rows(np.zeros((1, 64), dtype=np.float32), bitmask.astype(np.int64))
    with pytest.raises(TypeError):
        mask_logits_rows(np.zeros(64, dtype=np.float32), bitmask)  # one dimension


def test_validate_tokens_counts_the_accepted_prefix_without_consuming():
    m = Matcher(GRAMMARS[0], INFO)
    ids = [VOCAB.index(t) for t in (b"[1", b",", b"0", b"]", b"a")]
    before = m.compute_mask().copy()
    assert m.validate_tokens(ids) == 4  # "a" after the closed array is rejected
    assert m.n_consumed == 0 and np.array_equal(m.compute_mask(), before)
    assert m.validate_tokens([]) == 0
