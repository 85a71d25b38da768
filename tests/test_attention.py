"""The native batched attention (kernels.attention) against a float64 numpy reference.

Several sequences share one call, each with its own cache, row count and position; the
reference processes one sequence, one row and one head at a time. Every cache type: f16
(llama.cpp's default: keys, values, q and the softmax weights rounded to float16), f32 (nothing
rounded) and q8_0 (keys and values as Q8_0 blocks, checked against their float64 inputs to
within the quantization step, the products against float64 sums of the stored values).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from lexguide.errors import ModelError
from lexguide.gguf import dequantize, quantize
from lexguide.runtime import kernels as K

N_LAYER, N_Q, N_KV, HD, N_CTX = 2, 4, 2, 16, 24
N_ROT = 12  # partial rotary: the last 4 dimensions of a head are not rotated


def tables(n_pos: int, n_rot: int = N_ROT) -> tuple[np.ndarray, np.ndarray]:
    inv = 1000.0 ** (-np.arange(0, n_rot, 2) / n_rot)
    theta = np.arange(n_pos)[:, None] * inv[None, :]
    return np.cos(theta).astype(np.float32), np.sin(theta).astype(np.float32)


def f16(x):
    """x rounded to float16 (as float64): the float16 KV cache and attention operands."""
    return np.asarray(x, dtype=np.float16).astype(np.float64)


def values(cache, cache_type="f16"):
    """The float64 values a cache holds, (N_LAYER, N_KV, N_CTX, HD)."""
    if cache_type == "q8_0":
        flat = cache.reshape(-1, cache.shape[-1])
        return dequantize(flat, "q8_0", (flat.shape[0], HD)).astype(np.float64).reshape(
            (*cache.shape[:-1], HD))
    return cache.astype(np.float64)


def reference(qkv, seqs, ks, vs, layer, q_norm, k_norm, eps, cos, sin, neox, scale, window,
              cache_type="f16", stored=None):
    """(out, new keys, new values) in float64, sequence by sequence, head by head.

    f16: keys, values, q and the softmax weights rounded to float16 as llama.cpp's float16
    cache has them; f32: nothing rounded; q8_0: the keys and values the kernel stored
    (``stored`` = its (ks, vs) after the call), the new ones also returned unrounded as
    (new keys, new values) entries of ``exact`` so the test can bound the quantization."""
    qkv = qkv.astype(np.float64)
    out = np.zeros((qkv.shape[0], N_Q * HD))
    ks = [values(k, cache_type) for k in ks]
    vs = [values(v, cache_type) for v in vs]
    half16 = f16 if cache_type == "f16" else (lambda a: np.asarray(a, dtype=np.float64))
    exact = []
    half = N_ROT // 2
    first = np.arange(half) if neox else np.arange(0, N_ROT, 2)
    second = first + half if neox else first + 1

    def prep(x, w, p):
        if w is not None:
            x = x / np.sqrt(np.mean(x * x) + eps) * w
        x = x.copy()
        a, b = x[first].copy(), x[second].copy()
        x[first] = a * cos[p] - b * sin[p]
        x[second] = b * cos[p] + a * sin[p]
        return x

    for i, (row0, n, pos0) in enumerate(seqs):
        for t in range(n):
            row, p = qkv[row0 + t], pos0 + t
            for h in range(N_KV):
                kx = prep(row[(N_Q + h) * HD:(N_Q + h + 1) * HD], k_norm, p)
                vx = row[(N_Q + N_KV + h) * HD:(N_Q + N_KV + h + 1) * HD]
                if cache_type == "q8_0":
                    exact.append((kx, values(stored[0][i], "q8_0")[layer, h, p]))
                    exact.append((vx, values(stored[1][i], "q8_0")[layer, h, p]))
                    ks[i][layer, h, p] = exact[-2][1]
                    vs[i][layer, h, p] = exact[-1][1]
                else:
                    ks[i][layer, h, p] = half16(kx)
                    vs[i][layer, h, p] = half16(vx)
        for t in range(n):
            p = pos0 + t
            lo = max(0, p - window + 1) if window else 0
            for h in range(N_Q):
                q = half16(prep(qkv[row0 + t, h * HD:(h + 1) * HD], q_norm, p))
                kv = h // (N_Q // N_KV)
                s = ks[i][layer, kv, lo:p + 1] @ q * scale
                e = np.exp(s - s.max())
                out[row0 + t, h * HD:(h + 1) * HD] = half16(e / e.sum()) @ vs[i][layer, kv, lo:p + 1]
    if cache_type == "q8_0":
        return out, ks, vs, exact
    return out, ks, vs


def new_cache(values64, cache_type):
    """A cache array of the type holding values64 (N_LAYER, N_KV, N_CTX, HD)."""
    if cache_type == "q8_0":
        return quantize(values64.astype(np.float32), "q8_0")
    return values64.astype(K.CACHE_TYPES[cache_type][1])


def seq_table(layout):
    """The (B, 3) int64 rows (first row, rows, first position) of (rows, first position) pairs
    laid out one after another."""
    first = np.cumsum([0] + [n for n, _ in layout[:-1]])
    return np.array([(r, n, p) for r, (n, p) in zip(first, layout)], np.int64)


def setup(rng, layout, cache_type="f16"):
    """qkv rows and caches whose first pos0 positions already hold keys and values."""
    seqs = seq_table(layout)
    qkv = rng.standard_normal((seqs[-1, 0] + seqs[-1, 1], (N_Q + 2 * N_KV) * HD)).astype(np.float32)
    ks, vs = [], []
    for n, pos0 in layout:
        k = np.zeros((N_LAYER, N_KV, N_CTX, HD), np.float32)
        v = np.zeros_like(k)
        k[:, :, :pos0] = rng.standard_normal((N_LAYER, N_KV, pos0, HD))
        v[:, :, :pos0] = rng.standard_normal((N_LAYER, N_KV, pos0, HD))
        ks.append(new_cache(k, cache_type))
        vs.append(new_cache(v, cache_type))
    return qkv, seqs, ks, vs


def run(qkv, seqs, ks, vs, layer=1, norms=None, neox=True, window=0, scale=0.25, **kw):
    cos, sin = tables(N_CTX)
    out = np.full((qkv.shape[0], N_Q * HD), np.nan, np.float32)
    qn, kn = norms if norms is not None else (None, None)
    return K.attention(qkv, out, seqs, ks, vs, layer, n_q=N_Q, n_kv=N_KV, head_dim=HD,
                       q_norm=qn, k_norm=kn, eps=1e-6, cos=cos, sin=sin, neox=neox,
                       n_rot=N_ROT, scale=scale, window=window, **kw)


LAYOUT = [(1, 7), (3, 0), (1, 0), (4, 12), (2, 21)]  # (rows, first position) per sequence


def check_against_reference(got, want, ks, want_k, vs, want_v, cache_type, exact):
    """The outputs and the stored keys and values of a cache type against the reference."""
    if cache_type == "f16":
        # float16 operands: a float32 value and its float64 reference may round to neighbouring
        # float16 values (one float16 step, 2^-10 relative), so the bounds are that, not 1e-5
        assert np.abs(got - want).max() < 2e-3
        for k, v, wk, wv in zip(ks, vs, want_k, want_v):
            assert (np.abs(values(k) - wk) <= 2.0 ** -10 * np.abs(wk)).all()
            assert (np.abs(values(v) - wv) <= 2.0 ** -10 * np.abs(wv)).all()
    elif cache_type == "f32":
        # nothing rounded: float32 sums of float32 inputs against float64
        assert np.abs(got - want).max() < 1e-4
        for k, v, wk, wv in zip(ks, vs, want_k, want_v):
            assert np.abs(values(k, "f32") - wk).max() < 1e-5
            assert np.abs(values(v, "f32") - wv).max() < 1e-5
    else:
        # the products in float32 over the stored values against float64 over the same values
        assert np.abs(got - want).max() < 1e-4
        # each stored block within its quantization step: d/2 for q = round(x/d), plus d's own
        # float16 rounding (2^-11 relative) times |q| ≤ 127
        for x, held in exact:
            for b in range(0, HD, 32):
                d = np.abs(x[b:b + 32]).max() / 127
                assert np.abs(held[b:b + 32] - x[b:b + 32]).max() <= d * (0.5 + 127 * 2.0 ** -11) + 1e-7


@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("window", [0, 5])
@pytest.mark.parametrize("with_norms", [False, True])
@pytest.mark.parametrize("cache_type", ["f16", "f32", "q8_0"])
def test_matches_float64_reference(monkeypatch, neox, window, with_norms, cache_type):
    if cache_type == "q8_0":
        monkeypatch.setattr(sys.modules[__name__], "HD", 64)  # whole Q8_0 blocks per head
    rng = np.random.default_rng(3)
    qkv, seqs, ks, vs = setup(rng, LAYOUT, cache_type)
    norms = (1 + 0.1 * rng.standard_normal(HD).astype(np.float32),
             1 + 0.1 * rng.standard_normal(HD).astype(np.float32)) if with_norms else None
    cos, sin = tables(N_CTX)
    before = ([k.copy() for k in ks], [v.copy() for v in vs])
    got = run(qkv.copy(), seqs, ks, vs, norms=norms, neox=neox, window=window)
    want, want_k, want_v, *exact = reference(
        qkv, seqs, *before, 1, *(norms or (None, None)), 1e-6, cos.astype(np.float64),
        sin.astype(np.float64), neox, 0.25, window, cache_type, stored=(ks, vs))
    check_against_reference(got, want, ks, want_k, vs, want_v, cache_type,
                            exact[0] if exact else None)
    for (row0, n, pos0), k in zip(seqs, ks):
        assert not k[0, :, pos0:].any()  # only the given layer was written


# prompt-like rows: many rows of one sequence (their attention split over tasks), positions past
# several groups of 4 and 8 keys at odd offsets, and a head size with a tail past 8 lanes
PROMPT_LAYOUT = [(37, 0), (3, 30), (1, 44)]


@pytest.mark.parametrize("window", [0, 11])
@pytest.mark.parametrize("cache_type", ["f16", "f32", "q8_0"])
def test_prompt_rows_match_float64_reference(monkeypatch, window, cache_type):
    # a head size with a tail past 8 lanes; whole Q8_0 blocks for q8_0
    monkeypatch.setattr(sys.modules[__name__], "HD", 32 if cache_type == "q8_0" else 20)
    monkeypatch.setattr(sys.modules[__name__], "N_CTX", 48)
    rng = np.random.default_rng(8)
    qkv, seqs, ks, vs = setup(rng, PROMPT_LAYOUT, cache_type)
    cos, sin = tables(N_CTX)
    before = ([k.copy() for k in ks], [v.copy() for v in vs])
    got = run(qkv.copy(), seqs, ks, vs, window=window, n_threads=2)
    want, want_k, want_v, *exact = reference(
        qkv, seqs, *before, 1, None, None, 1e-6, cos.astype(np.float64),
        sin.astype(np.float64), True, 0.25, window, cache_type, stored=(ks, vs))
    check_against_reference(got, want, ks, want_k, vs, want_v, cache_type,
                            exact[0] if exact else None)


def test_a_sequence_gives_the_same_bits_alone_and_in_a_batch():
    rng = np.random.default_rng(5)
    qkv, seqs, ks, vs = setup(rng, LAYOUT)
    together = run(qkv.copy(), seqs, [k.copy() for k in ks], [v.copy() for v in vs],
                   window=4, n_threads=2)
    for i, (row0, n, pos0) in enumerate(seqs):
        alone = run(qkv[row0:row0 + n].copy(), np.array([[0, n, pos0]]), [ks[i].copy()],
                    [vs[i].copy()], window=4, n_threads=1)
        assert np.array_equal(alone, together[row0:row0 + n])


@pytest.mark.parametrize("change", [
    "rows past qkv", "overlapping rows", "position past cache", "position past tables",
    "shared cache", "bad layer", "cache shape", "one cache missing", "norm without partner",
    "n_q not a multiple", "odd n_rot", "negative window", "mixed cache types",
    "cache dtype", "q8_0 head size", "non-contiguous cache",
])
def test_bad_inputs_raise_model_error(change):
    rng = np.random.default_rng(1)
    qkv, seqs, ks, vs = setup(rng, [(2, 0), (1, 3)])
    cos, sin = tables(N_CTX)
    args = {"n_q": N_Q, "n_kv": N_KV, "head_dim": HD, "q_norm": None, "k_norm": None,
            "eps": 1e-6, "cos": cos, "sin": sin, "neox": True, "n_rot": N_ROT, "scale": 1.0,
            "window": 0}
    layer = 0
    if change == "rows past qkv":
        seqs[1] = (2, 2, 3)
    elif change == "overlapping rows":
        seqs[1] = (1, 1, 3)
    elif change == "position past cache":
        seqs[1] = (2, 1, N_CTX)
    elif change == "position past tables":
        args["cos"], args["sin"] = tables(3)
    elif change == "shared cache":
        ks[1] = ks[0]
    elif change == "bad layer":
        layer = N_LAYER
    elif change == "cache shape":
        vs[0] = np.zeros((N_LAYER, N_KV, N_CTX - 1, HD), np.float16)
    elif change == "one cache missing":
        vs = vs[:1]
    elif change == "norm without partner":
        args["q_norm"] = np.ones(HD, np.float32)
    elif change == "n_q not a multiple":
        args["n_q"], args["n_kv"] = 3, 2
    elif change == "odd n_rot":
        args["n_rot"] = 3
    elif change == "negative window":
        args["window"] = -1
    elif change == "mixed cache types":
        vs[1] = vs[1].astype(np.float32)
    elif change == "cache dtype":
        ks = [k.astype(np.int16) for k in ks]
        vs = [v.astype(np.int16) for v in vs]
    elif change == "q8_0 head size":  # HD 16: not whole Q8_0 blocks
        ks = [np.zeros((N_LAYER, N_KV, N_CTX, 17), np.uint8) for _ in ks]
        vs = [np.zeros((N_LAYER, N_KV, N_CTX, 17), np.uint8) for _ in vs]
    elif change == "non-contiguous cache":
        ks[0] = np.zeros((N_LAYER, N_KV, N_CTX, 2 * HD), np.float16)[..., ::2]
    out = np.zeros((qkv.shape[0], N_Q * HD), np.float32)
    with pytest.raises(ModelError):
        K.attention(qkv, out, seqs, ks, vs, layer, **args)


_PATHS_SCRIPT = """
import sys
import numpy as np
sys.path.insert(0, {tests!r})
import test_attention as T
from lexguide.runtime import kernels as K
rng = np.random.default_rng(5)
qkv, seqs, ks, vs = T.setup(rng, T.LAYOUT)
out = T.run(qkv, seqs, ks, vs, window=5)
gate_up = (rng.standard_normal((3, 64)) * 6).astype(np.float32)
gate_up[0, :4] = [-95.0, 95.0, -12.0, 11.0]  # outside the fast paths' ranges
T.HD, T.N_CTX = 20, 48  # prompt rows, a head size with a tail past 8 lanes
pq, pseqs, pks, pvs = T.setup(rng, T.PROMPT_LAYOUT)
prompt = T.run(pq, pseqs, pks, pvs, window=11)
res = dict(out=out, k=ks[3], v=vs[3], silu=K.gated(gate_up, False),
           gelu=K.gated(gate_up, True), prompt=prompt, prompt_k=pks[0])
for ct, hd in (("f32", 20), ("q8_0", 64)):  # the other cache types, prompt rows
    T.HD = hd
    cq, cseqs, cks, cvs = T.setup(rng, T.PROMPT_LAYOUT, ct)
    res[ct] = T.run(cq, cseqs, cks, cvs, window=11)
    res[ct + "_k"], res[ct + "_v"] = cks[0], cvs[0]
np.savez(sys.argv[1], **res)
"""


@pytest.mark.skipif(not K.has_avx2(), reason="no AVX2 on this CPU: only the portable path runs")
def test_avx2_and_portable_float_paths_agree_bit_for_bit(tmp_path):
    """The float kernels' AVX2 paths (attention's products and softmax over every cache type,
    the cache writes, the SiLU / GELU gate) make the same roundings as the portable ones:
    LEXGUIDE_KERNELS=scalar gives the same bits."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = _PATHS_SCRIPT.format(tests=str(Path(__file__).parent))
    results = []
    for mode in ("", "scalar"):
        env = dict(os.environ, LEXGUIDE_KERNELS=mode)
        out = tmp_path / f"paths{mode}.npz"
        subprocess.run([sys.executable, "-c", script, str(out)], env=env, check=True)
        results.append(np.load(out))
    simd, scalar = results
    for key in ("out", "k", "v", "silu", "gelu", "prompt", "prompt_k", "f32", "f32_k", "f32_v",
                "q8_0", "q8_0_k", "q8_0_v"):
        assert np.array_equal(simd[key], scalar[key]), key


# The tiled path (AVX2 and up: tiles of rows × the query heads sharing a KV head, each key and
# value row read once per tile) against the portable path, the reference: the same bits, for
# every output and every stored key and value. Cases: (n_q, n_kv, head size, cache type,
# window, threads, (rows, first position) per sequence).
TILED_CASES = [
    (8, 8, 64, "f16", 0, 1, [(300, 0)]),  # MHA, a long prompt chunk
    (8, 4, 128, "f32", 0, 2, [(131, 17), (1, 40), (9, 3)]),  # GQA 2, prompt and decode rows
    (16, 4, 64, "q8_0", 23, 3, [(77, 0), (1, 100), (3, 61)]),  # GQA 4, a sliding window
    (16, 2, 128, "f16", 0, 2, [(1, 250), (1, 7), (1, 0), (2, 30)]),  # GQA 8, decode steps
    (8, 1, 20, "f16", 5, 3, [(45, 2), (2, 50)]),  # a head size past 8 lanes, a window < tile rows
    (4, 2, 20, "f32", 0, 1, [(33, 0), (5, 60)]),  # an odd number of pairs in a tile
    (32, 8, 64, "f16", 0, 2, [(255, 256)]),  # Llama-3.2-1B's shape, a later prompt chunk
    (8, 2, 128, "q8_0", 0, 3, [(19, 0), (1, 300), (61, 120)]),  # GQA 4, q8_0 at head size 128
    (8, 4, 64, "f16", 64, 2, [(150, 40), (1, 200)]),  # a window inside the context, GQA 2
    (4, 1, 64, "f16", 0, 2, [(21, 30000), (1, 29000)]),  # long contexts: fewer rows per tile
]


def attend(n_q, n_kv, hd, cache_type, window, threads, layout, seed):
    """(out, keys, values) of one call on random rows and caches (earlier positions filled)."""
    rng = np.random.default_rng(seed)
    n_ctx = max(n + p for n, p in layout) + 3
    seqs = seq_table(layout)
    R = int(seqs[-1, 0] + seqs[-1, 1])
    qkv = rng.standard_normal((R, (n_q + 2 * n_kv) * hd)).astype(np.float32)

    def cache(pos0):  # random rows before pos0, zeros from there
        x = rng.standard_normal((n_kv * n_ctx, hd)).astype(np.float32)
        x.reshape(n_kv, n_ctx, hd)[:, pos0:] = 0
        if cache_type == "q8_0":
            return quantize(x, "q8_0").reshape(1, n_kv, n_ctx, -1)
        return x.reshape(1, n_kv, n_ctx, hd).astype(K.CACHE_TYPES[cache_type][1])

    ks = [cache(p) for _, p in layout]
    vs = [cache(p) for _, p in layout]
    cos, sin = tables(n_ctx, hd)
    out = np.full((R, n_q * hd), np.nan, np.float32)
    K.attention(qkv, out, seqs, ks, vs, 0, n_q=n_q, n_kv=n_kv, head_dim=hd, q_norm=None,
                k_norm=None, eps=1e-6, cos=cos, sin=sin, neox=False, n_rot=hd,
                scale=hd ** -0.5, window=window, n_threads=threads)
    return out, ks, vs


def tiled_levels():
    """The SIMD levels this CPU has (each runs the tiled path), as pytest params."""
    return [pytest.param(level, marks=pytest.mark.skipif(
        K.ISAS.index(K.cpu_isa()) < K.ISAS.index(level), reason=f"no {level} on this CPU"))
        for level in ("avx2", "avx512")]


@pytest.mark.parametrize("level", tiled_levels())
@pytest.mark.parametrize("case", range(len(TILED_CASES)))
def test_tiled_path_gives_the_reference_bits(case, level):
    before = K.isa()
    try:
        K.set_isa("scalar")
        want = attend(*TILED_CASES[case], seed=case)
        K.set_isa(level)
        got = attend(*TILED_CASES[case], seed=case)
    finally:
        K.set_isa(None if before == K.cpu_isa() else before)
    assert not np.isnan(want[0]).any()
    assert np.array_equal(got[0], want[0])
    for g, w in zip(got[1] + got[2], want[1] + want[2]):
        assert np.array_equal(g, w)
