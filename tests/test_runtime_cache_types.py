"""KV cache types (f16, the default; f32; q8_0) against the float32 cache, end to end.

The kernels' own tests (tests/test_attention.py) check each type against a float64 reference;
here whole models run a 256-token prompt with each cache and their logits are compared with
the float32 cache's. The differences are the caches' roundings carried through the layers:
small with float weights (float products only), larger with quantized weights, where a moved
activation can cross a Q8 quantization step (docs/runtime.md, "Accuracy").
"""

from __future__ import annotations

import numpy as np
import pytest
import test_runtime_tiny as tiny

from lexguide.errors import ModelError
from lexguide.gguf import GGMLType, open_gguf, write_gguf
from lexguide.runtime import model as model_mod
from lexguide.runtime.config import ModelConfig
from lexguide.runtime.model import KVCache, Transformer
from lexguide.runtime.weights import load_weights

HD = 32  # whole Q8_0 blocks per head
IDS = [(7 * i + 3) % tiny.V for i in range(256)]


def build(tmp_path, monkeypatch, arch, n_layer=2, n_head=4, n_kv=2, window=0, quant=None):
    """A tiny model (test_runtime_tiny's builder) with head size HD."""
    monkeypatch.setattr(tiny, "HD", HD)
    md, tensors, _ = tiny.make_model(arch, n_layer, n_head, n_kv, 0, window=window)
    md[f"{arch}.attention.key_length"] = HD
    md[f"{arch}.attention.value_length"] = HD
    if quant is not None:
        tensors = {k: (v, quant) if v.ndim == 2 and v.shape[1] % 32 == 0 else v
                   for k, v in tensors.items()}
    gguf = open_gguf(write_gguf(tmp_path / f"{arch}.gguf", md, tensors))
    cfg = ModelConfig.from_metadata(gguf.metadata)
    return Transformer(cfg, load_weights(gguf, cfg, progress=False))


ARCHS = [("llama", {}), ("qwen2", {}),
         ("gemma3", {"n_layer": 6, "n_head": 2, "n_kv": 1, "window": 64})]


@pytest.mark.parametrize("arch,kw", ARCHS)
def test_tiny_models_f16_and_q8_0_caches_near_f32(tmp_path, monkeypatch, arch, kw):
    # float weights: only the caches round. Measured (max |Δ| / max |logit|): f16 0.2% (llama,
    # qwen2), 0.02% (gemma3); q8_0 3.5-5% (llama, qwen2: random attention scores of ~10 make
    # the softmax sensitive), 0.2% (gemma3). Bounds 4x the f16 figures, 2x the q8_0 ones.
    tf = build(tmp_path, monkeypatch, arch, **kw)
    ref = tf.forward(IDS, tf.new_cache(256, "f32"), logits="all")
    scale = np.abs(ref).max()
    for cache_type, bound in (("f16", 0.01), ("q8_0", 0.1)):
        got = tf.forward(IDS, tf.new_cache(256, cache_type), logits="all")
        assert np.abs(got - ref).max() < bound * scale, cache_type
        assert (got.argmax(1) == ref.argmax(1)).mean() >= 0.9, cache_type


def test_default_cache_is_f16_and_halves_f32(tmp_path, monkeypatch):
    tf = build(tmp_path, monkeypatch, "llama")
    c = tf.new_cache(64)
    assert c.cache_type == "f16" and c.k.dtype == np.float16
    f32, q8 = tf.new_cache(64, "f32"), tf.new_cache(64, "q8_0")
    assert c.nbytes * 2 == f32.nbytes
    assert q8.nbytes * 64 == c.nbytes * 34  # 34 bytes per 32 elements against 64
    assert q8.k.shape == (2, 2, 64, HD // 32 * 34)


@pytest.mark.parametrize("cache_type", ["f32", "q8_0"])
def test_long_prompt_equals_decode_steps_bit_for_bit(tmp_path, monkeypatch, cache_type):
    # as tests/test_runtime_tiny.py checks for the default cache: one 70-row call, decode steps
    # and uneven chunks give the same bits with every cache type
    tf = build(tmp_path, monkeypatch, "llama", quant=GGMLType.Q8_0)
    tf.cache_type = cache_type
    tf.threads = 2
    ids = IDS[:70]
    full = tf.forward(ids, tf.new_cache(80), logits="all")
    cache = tf.new_cache(80)
    steps = np.stack([tf.forward([t], cache) for t in ids])
    assert np.array_equal(steps, full)
    monkeypatch.setattr(model_mod, "PREFILL_CHUNK", 33)
    assert np.array_equal(tf.forward(ids, tf.new_cache(80), logits="all"), full)


@pytest.mark.parametrize("cache_type", ["f32", "q8_0"])
def test_batched_equals_one_by_one_with_every_cache_type(tmp_path, monkeypatch, cache_type):
    tf = build(tmp_path, monkeypatch, "qwen2")
    prompts = [IDS[:5], IDS[10:23], IDS[30:31]]
    batched = [tf.new_cache(64, cache_type) for _ in prompts]
    alone = [tf.new_cache(64, cache_type) for _ in prompts]
    h = tf.forward_batch(list(zip(prompts, batched)))
    for i, p in enumerate(prompts):
        assert np.array_equal(h[i], tf.hidden_last(p, alone[i]))
    h = tf.forward_batch([([3], c) for c in batched])
    for i, c in enumerate(alone):
        assert np.array_equal(h[i], tf.hidden_last([3], c))


def test_bad_cache_types_raise_model_error(tmp_path, monkeypatch):
    tf = build(tmp_path, monkeypatch, "llama")
    with pytest.raises(ModelError, match="unknown KV cache type"):
        tf.new_cache(16, "q4_0")
    with pytest.raises(ModelError, match="unknown KV cache type"):
        Transformer(tf.config, tf.weights, "bf16")
    tiny_cfg = tiny_config(tmp_path)  # head size 8: not whole Q8_0 blocks
    with pytest.raises(ModelError, match="multiple of 32"):
        KVCache(tiny_cfg, 16, "q8_0")
    with pytest.raises(ModelError, match="must all be"):  # caches of two types in one call
        tf.forward_batch([([1], tf.new_cache(8, "f16")), ([2], tf.new_cache(8, "f32"))])


def tiny_config(tmp_path):
    md, tensors, _ = tiny.make_model("llama", 1, 4, 2, 0)
    return ModelConfig.from_metadata(open_gguf(write_gguf(tmp_path / "h8.gguf", md, tensors)).metadata)


def test_smollm2_f16_and_q8_0_caches_near_f32(smollm2_file):
    """The real SmolLM2 (Q4_1 weights, head size 64) on a 256-token prompt.

    Measured: f16 and q8_0 both max |Δ| 1.6-1.9 on logits up to 42, RMS 3% of the logits',
    greedy tokens equal at 254-255 of 256 positions: the Q8 activation roundings carry a cache
    rounding across layers (f32 → f16 already moves them as much as f16 → q8_0)."""
    from lexguide.runtime import Model

    model = Model.from_gguf(smollm2_file, n_ctx=256)
    text = " ".join(f"Item {i}: the quick brown fox jumps over the lazy dog number {i * 7}."
                    for i in range(40))
    ids = model.tokenizer.encode(text)[:256]
    assert len(ids) == 256
    tf = model.transformer
    ref = tf.forward(ids, tf.new_cache(256, "f32"), logits="all")
    rms = np.sqrt((ref ** 2).mean())
    for cache_type in ("f16", "q8_0"):
        got = tf.forward(ids, tf.new_cache(256, cache_type), logits="all")
        d = got - ref
        assert np.abs(d).max() < 4.0, cache_type
        assert np.sqrt((d ** 2).mean()) < 0.08 * rms, cache_type
        assert (got.argmax(1) == ref.argmax(1)).mean() >= 0.97, cache_type
