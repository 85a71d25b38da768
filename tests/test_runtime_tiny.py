"""The forward pass on tiny random models written with our GGUF writer, against a naive
reference written from the spec (gguf.md §6–8) one position and one head at a time.

The reference uses Hugging Face conventions: llama Q/K weights are generated in HF layout and
*permuted* by the test before writing (as the converter does), and the reference applies
split-half (NEOX) RoPE to the unpermuted weights — so a wrong RoPE mode cannot pass.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from lexguide.errors import ModelError
from lexguide.gguf import GGMLType, dequantize, open_gguf, quantize, write_gguf
from lexguide.runtime import model as model_mod
from lexguide.runtime.config import ModelConfig
from lexguide.runtime.model import Transformer
from lexguide.runtime.weights import load_weights

V, D, FF, HD = 40, 32, 48, 8


def permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """The converter's Q/K row permutation (gguf.md §8)."""
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def make_model(arch: str, n_layer: int, n_head: int, n_kv: int, seed: int, *, window: int = 0):
    """(metadata, GGUF tensors, HF-layout weights for the reference)."""
    rng = np.random.default_rng(seed)

    def rnd(*shape, scale=0.3):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    hf = {"embd": rnd(V, D, scale=1.0), "out_norm": 1 + rnd(D, scale=0.1), "layers": []}
    tensors = {"token_embd.weight": hf["embd"], "output_norm.weight": hf["out_norm"]}
    for il in range(n_layer):
        L = {
            "attn_norm": 1 + rnd(D, scale=0.1), "q": rnd(n_head * HD, D), "k": rnd(n_kv * HD, D),
            "v": rnd(n_kv * HD, D), "o": rnd(D, n_head * HD), "ffn_norm": 1 + rnd(D, scale=0.1),
            "gate": rnd(FF, D), "up": rnd(FF, D), "down": rnd(D, FF),
        }
        p = f"blk.{il}."
        q, k = L["q"], L["k"]
        if arch == "llama":
            q, k = permute(q, n_head), permute(k, n_kv)
        tensors.update({
            p + "attn_norm.weight": L["attn_norm"], p + "attn_q.weight": q, p + "attn_k.weight": k,
            p + "attn_v.weight": L["v"], p + "attn_output.weight": L["o"],
            p + "ffn_norm.weight": L["ffn_norm"], p + "ffn_gate.weight": L["gate"],
            p + "ffn_up.weight": L["up"], p + "ffn_down.weight": L["down"],
        })
        if arch == "qwen2":
            for name in ("q", "k", "v"):
                L[name + "_b"] = rnd(L[name].shape[0])
                tensors[p + f"attn_{name}.bias"] = L[name + "_b"]
        if arch in ("gemma3", "qwen3"):
            L["q_norm"], L["k_norm"] = 1 + rnd(HD, scale=0.1), 1 + rnd(HD, scale=0.1)
            tensors[p + "attn_q_norm.weight"] = L["q_norm"]
            tensors[p + "attn_k_norm.weight"] = L["k_norm"]
        if arch == "gemma3":
            L["post_attn"], L["post_ffn"] = 1 + rnd(D, scale=0.1), 1 + rnd(D, scale=0.1)
            tensors[p + "post_attention_norm.weight"] = L["post_attn"]
            tensors[p + "post_ffw_norm.weight"] = L["post_ffn"]
        hf["layers"].append(L)
    md = {
        "general.architecture": arch,
        f"{arch}.context_length": 64,
        f"{arch}.embedding_length": D,
        f"{arch}.block_count": n_layer,
        f"{arch}.feed_forward_length": FF,
        f"{arch}.attention.head_count": n_head,
        f"{arch}.attention.head_count_kv": n_kv,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-6,
        f"{arch}.rope.freq_base": 1000.0,
        f"{arch}.vocab_size": V,
    }
    if arch == "gemma3":
        md[f"{arch}.attention.key_length"] = HD
        md[f"{arch}.attention.value_length"] = HD
        md[f"{arch}.attention.sliding_window"] = window
    return md, tensors, hf


def reference_logits(arch: str, hf: dict, ids: list[int], n_head: int, n_kv: int,
                     window: int = 0) -> np.ndarray:
    """Naive float64 forward: position by position, head by head, NEOX RoPE on HF weights."""
    gemma = arch == "gemma3"
    eps = 1e-6

    def norm(x, w):
        return x / math.sqrt(float(np.mean(x * x)) + eps) * w

    def f16(a):  # llama.cpp's float16 KV cache and float16 attention operands
        return np.asarray(a, dtype=np.float16).astype(np.float64)

    def rope(vec, pos, base):
        half = HD // 2
        out = vec.copy()
        for i in range(half):
            theta = pos * base ** (-2 * i / HD)
            a, b = vec[i], vec[i + half]
            out[i] = a * math.cos(theta) - b * math.sin(theta)
            out[i + half] = a * math.sin(theta) + b * math.cos(theta)
        return out

    T = len(ids)
    x = hf["embd"][ids].astype(np.float64) * (np.float32(math.sqrt(D)) if gemma else 1.0)
    for il, L in enumerate(hf["layers"]):
        local = gemma and window and il % 6 < 5
        base = 10000.0 if local else 1000.0
        ks, vs, qs = [], [], []
        for t in range(T):
            h = norm(x[t], L["attn_norm"])
            q, k, v = L["q"] @ h, L["k"] @ h, L["v"] @ h
            if "q_b" in L:
                q, k, v = q + L["q_b"], k + L["k_b"], v + L["v_b"]
            qh = [q[j * HD:(j + 1) * HD] for j in range(n_head)]
            kh = [k[j * HD:(j + 1) * HD] for j in range(n_kv)]
            if "q_norm" in L:
                qh = [norm(a, L["q_norm"]) for a in qh]
                kh = [norm(a, L["k_norm"]) for a in kh]
            qs.append([f16(rope(a, t, base)) for a in qh])
            ks.append([f16(rope(a, t, base)) for a in kh])
            vs.append([f16(v[j * HD:(j + 1) * HD]) for j in range(n_kv)])
        new_x = x.copy()
        for t in range(T):
            heads = []
            for j in range(n_head):
                kv = j // (n_head // n_kv)
                visible = [s for s in range(t + 1) if not (local and t - s >= window)]
                scores = np.array([qs[t][j] @ ks[s][kv] / math.sqrt(HD) for s in visible])
                p = np.exp(scores - scores.max())
                p = f16(p / p.sum())
                heads.append(sum(pi * vs[s][kv] for pi, s in zip(p, visible)))
            a = L["o"] @ np.concatenate(heads)
            if gemma:
                a = norm(a, L["post_attn"])
            y = x[t] + a
            h = norm(y, L["ffn_norm"])
            g = L["gate"] @ h
            if gemma:  # ggml's GELU table: float16 in, float16 out
                g16 = f16(g)
                act = f16(0.5 * g16 * (1 + np.tanh(0.7978845608 * (g16 + 0.044715 * g16 ** 3))))
            else:
                act = g / (1 + np.exp(-g))
            f = L["down"] @ (act * (L["up"] @ h))
            if gemma:
                f = norm(f, L["post_ffn"])
            new_x[t] = y + f
        x = new_x
    return np.stack([hf["embd"] @ norm(x[t], hf["out_norm"]) for t in range(T)])


def build(tmp_path, arch, n_layer=2, n_head=4, n_kv=2, seed=0, window=0, quant=None,
          as_float=False):
    """A tiny model; with ``quant``, its matrices of whole blocks are stored in that type, or,
    with ``as_float``, as the float32 values that type dequantizes to (the same weights)."""
    md, tensors, hf = make_model(arch, n_layer, n_head, n_kv, seed, window=window)
    if quant is not None and as_float:
        tensors = {k: dequantize(quantize(v, quant), quant, v.shape)
                   if v.ndim == 2 and v.shape[1] % 32 == 0 else v for k, v in tensors.items()}
    elif quant is not None:
        # quantize the matrices whose rows are whole blocks; the rest stay F32 (mixed, as in
        # real files)
        tensors = {k: (v, quant) if v.ndim == 2 and v.shape[1] % 32 == 0 else v
                   for k, v in tensors.items()}
    path = write_gguf(tmp_path / f"{arch}.gguf", md, tensors)
    gguf = open_gguf(path)
    cfg = ModelConfig.from_metadata(gguf.metadata)
    return Transformer(cfg, load_weights(gguf, cfg, progress=False)), hf


IDS = [3, 17, 5, 39, 0, 22, 8, 8, 30, 11]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_llama_family_matches_naive_reference(tmp_path, arch):
    tf, hf = build(tmp_path, arch)
    ours = tf.forward(IDS, tf.new_cache(16), logits="all")
    ref = reference_logits(arch, hf, IDS, 4, 2)
    # 5e-4, not float32's 1e-4: the float16 attention operands of the reference (float64 values)
    # and ours (float32 values) can round to neighbouring float16 values
    assert np.abs(ours - ref).max() < 5e-4


def test_gemma3_sliding_window_matches_naive_reference(tmp_path):
    # 6 layers: 0-4 local (window 3, base 10000), 5 global; 10 tokens exceed the window
    tf, hf = build(tmp_path, "gemma3", n_layer=6, n_head=2, n_kv=1, window=3)
    assert [tf.config.is_local_layer(i) for i in range(6)] == [True] * 5 + [False]
    ours = tf.forward(IDS, tf.new_cache(16), logits="all")
    ref = reference_logits("gemma3", hf, IDS, 2, 1, window=3)
    assert np.abs(ours - ref).max() < 5e-4  # float16 operands: see the llama-family test


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_long_prompt_matches_naive_reference(tmp_path, arch):
    # a prompt of more than FUSED_MAX_ROWS tokens in one native call (per-head q/k norms on
    # gemma3); longer prompts drift from the float64 reference by float16 operands rounding to
    # the other neighbour (70 tokens: 7e-3 here), so they are checked against decode steps below
    ids = [(7 * i + 3) % V for i in range(model_mod.FUSED_MAX_ROWS + 4)]
    n_head, n_kv = (2, 1) if arch == "gemma3" else (4, 2)
    tf, hf = build(tmp_path, arch, n_head=n_head, n_kv=n_kv)
    ours = tf.forward(ids, tf.new_cache(80), logits="all")
    ref = reference_logits(arch, hf, ids, n_head, n_kv)
    assert np.abs(ours - ref).max() < 5e-4  # float16 operands: see the llama-family test


@pytest.mark.parametrize("arch,window", [("llama", 0), ("gemma3", 3)])
def test_kv_cache_decode_and_chunked_prefill_equal_full_recompute(tmp_path, monkeypatch, arch, window):
    tf, _ = build(tmp_path, arch, n_layer=6 if window else 2, window=window)
    full = tf.forward(IDS, tf.new_cache(16), logits="all")
    cache = tf.new_cache(16)
    steps = [tf.forward(IDS[:4], cache)] + [tf.forward([t], cache) for t in IDS[4:]]
    # gemv vs gemm round differently: float32 noise on logits of magnitude ~10
    assert np.abs(np.stack(steps[1:]) - full[4:]).max() < 1e-4
    assert np.abs(steps[0] - full[3]).max() < 1e-4
    monkeypatch.setattr(model_mod, "PREFILL_CHUNK", 3)
    chunked = tf.forward(IDS, tf.new_cache(16), logits="all")
    assert np.abs(chunked - full).max() < 1e-4


@pytest.mark.parametrize("arch,window,quant", [("llama", 0, GGMLType.Q4_1),
                                               ("gemma3", 5, GGMLType.Q5_0),
                                               ("llama", 0, GGMLType.Q8_0)])
def test_long_prompt_equals_decode_steps_bit_for_bit(tmp_path, monkeypatch, arch, window, quant):
    """One 70-row native call (more than a 64-row tile, not a multiple of the 4- and 8-row
    tiles, attention rows split over tasks) equals the same tokens one decode step at a time
    and in uneven chunks, bit for bit: every row of a product and of the attention is computed
    by the same operations whatever rows share the call."""
    tf, _ = build(tmp_path, arch, n_layer=6 if window else 2, window=window, quant=quant)
    tf.threads = 2
    ids = [(7 * i + 3) % V for i in range(70)]
    full = tf.forward(ids, tf.new_cache(80), logits="all")
    cache = tf.new_cache(80)
    steps = np.stack([tf.forward([t], cache) for t in ids])
    assert np.array_equal(steps, full), float(np.abs(steps - full).max())
    monkeypatch.setattr(model_mod, "PREFILL_CHUNK", 33)
    chunked = tf.forward(ids, tf.new_cache(80), logits="all")
    assert np.array_equal(chunked, full)


@pytest.mark.parametrize("threads", [2, 3])
def test_row_split_threads_equal_single_thread(tmp_path, threads):
    tf, _ = build(tmp_path, "llama")
    tf.threads = 1
    one = tf.forward(IDS, tf.new_cache(16), logits="all")
    c1 = tf.new_cache(16)
    dec1 = [tf.forward(IDS[:5], c1)] + [tf.forward([t], c1) for t in IDS[5:]]
    tf.threads = threads
    assert tf.threads == threads
    many = tf.forward(IDS, tf.new_cache(16), logits="all")
    c2 = tf.new_cache(16)
    dec2 = [tf.forward(IDS[:5], c2)] + [tf.forward([t], c2) for t in IDS[5:]]
    tf.threads = 1
    # each output is computed whole by one thread: the split changes nothing
    assert np.array_equal(one, many)
    assert np.array_equal(np.stack(dec1), np.stack(dec2))


@pytest.mark.parametrize("quant", [GGMLType.Q8_0, GGMLType.Q4_1, GGMLType.Q5_0])
def test_quantized_weights_track_float_weights(tmp_path, quant):
    """Native products on quantized weights (Q8 activations) stay close to those of the same
    weights stored as float32 (float activations): the activation quantization's error only."""
    tf_f, _ = build(tmp_path, "llama", quant=quant, as_float=True)
    tf_q, _ = build(tmp_path, "llama", quant=quant)
    assert tf_q.weights.layers[0].qkv.parts[0].ggml_type == quant
    a = tf_f.forward(IDS, tf_f.new_cache(16), logits="all")
    b = tf_q.forward(IDS, tf_q.new_cache(16), logits="all")
    assert np.abs(a - b).max() < 0.05 * np.abs(a).max()  # measured 0.4-2.2% here


def test_project_rows_equals_full_projection(tmp_path):
    tf, _ = build(tmp_path, "llama")
    h = tf.hidden_last(IDS, tf.new_cache(16))
    full = tf.project_rows(h)
    rows = np.array([0, 5, 39])
    assert np.allclose(tf.project_rows(h, rows), full[rows], atol=1e-6)
    assert np.abs(full - tf.forward(IDS, tf.new_cache(16))).max() < 1e-6


def test_bad_inputs_raise_model_errors(tmp_path):
    tf, _ = build(tmp_path, "llama")
    with pytest.raises(ModelError, match="out of range"):
        tf.forward([V], tf.new_cache(4))
    with pytest.raises(ModelError, match="context overflow"):
        tf.forward(IDS, tf.new_cache(4))
    with pytest.raises(ModelError, match="at least one token"):
        tf.forward([], tf.new_cache(4))


def test_unsupported_and_malformed_metadata(tmp_path):
    md, _, _ = make_model("llama", 1, 4, 2, 0)
    with pytest.raises(ModelError, match="architecture 'mamba' is not supported"):
        ModelConfig.from_metadata({**md, "general.architecture": "mamba"})
    broken = {k: v for k, v in md.items() if k != "llama.embedding_length"}
    with pytest.raises(ModelError, match="llama.embedding_length"):
        ModelConfig.from_metadata(broken)
    with pytest.raises(ModelError, match="yarn"):
        ModelConfig.from_metadata({**md, "llama.rope.scaling.type": "yarn"})
    cfg = ModelConfig.from_metadata({**md, "llama.rope.scaling.type": "linear",
                                     "llama.rope.scaling.factor": 4.0})
    assert cfg.rope_freq_scale == 0.25
    with pytest.raises(ModelError, match="varies per layer"):
        ModelConfig.from_metadata({**md, "llama.feed_forward_length": np.array([48, 64])})


def test_missing_tensor_is_named(tmp_path):
    md, tensors, _ = make_model("llama", 1, 4, 2, 0)
    del tensors["blk.0.ffn_up.weight"]
    gguf = open_gguf(write_gguf(tmp_path / "broken.gguf", md, tensors))
    cfg = ModelConfig.from_metadata(gguf.metadata)
    with pytest.raises(ModelError, match="blk.0.ffn_up.weight"):
        load_weights(gguf, cfg, progress=False)
    wrong = replace(cfg, n_ff=FF + 1)
    with pytest.raises(ModelError, match="shape"):
        load_weights(gguf, wrong, progress=False)
