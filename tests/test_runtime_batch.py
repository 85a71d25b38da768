"""Batched decode (``Transformer.forward_batch``): several sequences, each with its own KV cache
and position, in one forward pass — against each sequence run alone.

Tolerance: none. The projections of a batch run in the integer kernels whatever the number of
rows, every output computed by the same operations as for a single row, and the native
attention handles each (sequence, head) the same way alone or in company; so batched logits
must equal the one-by-one logits bit for bit (tiny random models of both architectures, and
the real SmolLM2 and Gemma 3 when installed).
"""

from __future__ import annotations

import numpy as np
import pytest

from lexguide.errors import ModelError
from lexguide.runtime.model import FUSED_MAX_ROWS
from test_runtime_tiny import build

V = 40


def _check_batch_equals_alone(tf, prompts, steps):
    """Prefill each prompt into two caches; then decode ``steps`` (a list, per step, of the
    tokens each sequence feeds) batched in one set of caches and one by one in the other."""
    batched = [tf.new_cache(64) for _ in prompts]
    alone = [tf.new_cache(64) for _ in prompts]
    for p, a, b in zip(prompts, batched, alone):
        tf.forward(p, a, logits="none")
        tf.forward(p, b, logits="none")
    for feeds in steps:
        h = tf.forward_batch([(f, c) for f, c in zip(feeds, batched)])
        logits = tf.project(h)
        for i, (f, c) in enumerate(zip(feeds, alone)):
            one = tf.project_rows(tf.hidden_last(f, c))
            assert np.array_equal(logits[i], one), (i, float(np.abs(logits[i] - one).max()))
    for a, b in zip(batched, alone):
        assert a.n == b.n
        assert np.array_equal(a.k[:, :, :a.n], b.k[:, :, :b.n])
        assert np.array_equal(a.v[:, :, :a.n], b.v[:, :, :b.n])


@pytest.mark.parametrize("arch,window", [("llama", 0), ("qwen2", 0), ("gemma3", 3)])
def test_tiny_models_batched_equals_one_by_one(tmp_path, arch, window):
    tf, _ = build(tmp_path, arch, n_layer=6 if window else 2, window=window)
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, V, n).tolist() for n in (1, 5, 9, 2)]  # different lengths
    steps = [[[int(t)] for t in rng.integers(0, V, 4)] for _ in range(4)]
    steps.insert(2, [[3], [4, 5, 6], [7], [8, 9]])  # forced tokens: several rows for some
    _check_batch_equals_alone(tf, prompts, steps)


def test_long_inputs_join_a_batch(tmp_path):
    """A prompt longer than FUSED_MAX_ROWS in the batch runs on its own; the rest stay exact."""
    tf, _ = build(tmp_path, "llama")
    rng = np.random.default_rng(2)
    long = rng.integers(0, V, FUSED_MAX_ROWS + 3).tolist()
    caches = [tf.new_cache(64) for _ in range(3)]
    tf.forward([1, 2], caches[0], logits="none")
    tf.forward([3], caches[1], logits="none")
    h = tf.forward_batch([([5], caches[0]), (long, caches[1]), ([7, 8], caches[2])])
    ref = [tf.new_cache(64) for _ in range(3)]
    tf.forward([1, 2], ref[0], logits="none")
    tf.forward([3], ref[1], logits="none")
    want = [tf.hidden_last([5], ref[0]), tf.hidden_last(long, ref[1]), tf.hidden_last([7, 8], ref[2])]
    assert np.array_equal(h, np.stack(want))
    assert [c.n for c in caches] == [3, 1 + len(long), 2]


def test_bad_batches_raise_model_error(tmp_path):
    tf, _ = build(tmp_path, "llama")
    c = tf.new_cache(4)
    with pytest.raises(ModelError, match="distinct"):
        tf.forward_batch([([1], c), ([2], c)])
    with pytest.raises(ModelError, match="at least one token"):
        tf.forward_batch([([], c)])
    with pytest.raises(ModelError, match="out of range"):
        tf.forward_batch([([V], c)])
    with pytest.raises(ModelError, match="overflow"):
        tf.forward_batch([([1, 2, 3, 4, 5], c)])
    assert c.n == 0  # nothing was written
    twin = tf.new_cache(64)
    twin.k, twin.v = c.k, c.v  # another cache object over the same memory
    long = tf.new_cache(64)
    with pytest.raises(ModelError, match="distinct memory"):
        tf.forward_batch([([1], c), ([2], twin), (list(range(FUSED_MAX_ROWS + 1)), long)])
    assert c.n == twin.n == long.n == 0  # refused before anything was written


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_real_models_batched_equals_one_by_one(name, smollm2_file, gemma3_file):
    from lexguide import Model

    model = Model.from_gguf(smollm2_file if name == "smollm2" else gemma3_file, n_ctx=64)
    tf = model.transformer
    tok = model.tokenizer
    prompts = [tok.encode(p) for p in ("The capital of France is", "Once upon a time",
                                       "1, 2, 3,", "def f(x):\n    return")]
    rng = np.random.default_rng(3)
    steps = [[[int(t)] for t in rng.integers(0, tf.config.n_vocab, 4)] for _ in range(3)]
    steps.append([[11, 12], [13], [14, 15, 16], [17]])
    _check_batch_equals_alone(tf, prompts, steps)
