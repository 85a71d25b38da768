"""The AMX-INT8 products (csrc/kernels/gemm_amx.h) against the scalar reference.

At level ``amx`` the supported types (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K) are computed on tiles from a
few activation rows up and by VNNI block sums below; both repeat the scalar reference's block
values and float expressions, so every output is bit-equal to ``simd=False`` whatever the
shape, the row subset, the parts of the call, the thread count or the other rows of the batch.
The AVX2 kernels sum in another float order: they agree within test_kernels.py's tolerance.
Skipped where the CPU or the OS gives no AMX.
"""

from __future__ import annotations

import numpy as np
import pytest

from lexguide.gguf.constants import GGMLType
from lexguide.runtime import kernels as K
from test_kernels import activation_reference, case, dequantized, isa_cap, random_weight
from test_runtime_tiny import build

T_ = GGMLType
AMX_TYPES = [T_.Q4_0, T_.Q8_0, T_.Q4_K, T_.Q5_K, T_.Q6_K]

pytestmark = pytest.mark.skipif(K.cpu_isa() != "amx",
                                reason=f"no AMX-INT8 on this CPU/OS (best: {K.cpu_isa()})")


cap = isa_cap


def amx(x, raw, t, n_out, n_in, **kw):
    with cap("amx"):
        return K.matmul(x, raw, t, n_out, n_in, **kw)


@pytest.mark.parametrize("t", AMX_TYPES, ids=lambda t: t.name)
def test_amx_is_the_kernel_of_the_supported_types(t):
    with cap("amx"):
        assert K.kernel_name(t) == "amx"
        assert K.kernel_name(t, simd=False) == "scalar"
        assert K.kernel_name(T_.Q4_1) != "amx"
    with cap("avx2"):
        assert K.kernel_name(t) == "avx2"


# T: the VNNI rows (1, 5), both sides of the tile threshold (7, 8, 15, 16, 17), several
# 16-row tiles with a partial one (33), past one 128-row pass over a weight block (130);
# n_out: a partial 16-row weight tile (1, 17), two tiles and a partial pair (45, 70)
@pytest.mark.parametrize("T,n_out,n_blocks", [(1, 17, 2), (5, 45, 1), (7, 1, 3), (8, 17, 1),
                                              (15, 70, 1), (16, 32, 2), (17, 45, 1),
                                              (33, 17, 2), (130, 40, 1)])
@pytest.mark.parametrize("t", AMX_TYPES, ids=lambda t: t.name)
def test_amx_bit_equal_to_scalar(t, T, n_out, n_blocks):
    if t in (T_.Q4_0, T_.Q8_0):
        n_blocks *= 9  # odd numbers of 32-element blocks (the VNNI path takes 8 at a time)
    raw, x, n_in = case(t, T, n_out, n_blocks, seed=T + n_out)
    ref = K.matmul(x, raw, t, n_out, n_in, simd=False)
    got = amx(x, raw, t, n_out, n_in)
    assert np.array_equal(got, ref), float(np.abs(got - ref).max())
    # and within the AVX2 kernels' tolerance of them (another float summation order)
    with cap("avx2"):
        other = K.matmul(x, raw, t, n_out, n_in)
    w = dequantized(t, raw, n_out, n_in)
    scale = np.abs(activation_reference(t, x)) @ np.abs(w).T + 1e-30
    assert (np.abs(got - other) / scale).max() <= 1e-5


@pytest.mark.parametrize("t", AMX_TYPES, ids=lambda t: t.name)
def test_amx_rows_subset_threads_and_batch(t):
    """Selected rows, one or two threads, and each row alone or among others: the same bits."""
    n_out, T = 75, 40
    raw, x, n_in = case(t, T, n_out, 2, seed=5)
    full = amx(x, raw, t, n_out, n_in, n_threads=1)
    assert np.array_equal(full, K.matmul(x, raw, t, n_out, n_in, simd=False))
    assert np.array_equal(amx(x, raw, t, n_out, n_in, n_threads=2), full)
    rows = np.array([74, 0, 17, 17, 5, 33, 32, 31, 16, 15, 60, 61, 62, 63, 64, 65, 66, 67, 1])
    for lo, hi in [(0, 1), (3, 9), (0, T)]:  # VNNI rows and tiles
        sub = amx(x[lo:hi], raw, t, n_out, n_in, rows=rows)
        assert np.array_equal(sub, full[lo:hi][:, rows]), (lo, hi)
    for lo, hi in [(0, 1), (1, 4), (2, 12), (7, 24), (39, 40)]:
        assert np.array_equal(amx(x[lo:hi], raw, t, n_out, n_in), full[lo:hi]), (lo, hi)


@pytest.mark.parametrize("T", [3, 20])
def test_amx_parts_side_by_side(T):
    """AMX parts of both activation formats beside parts of other kernels, in one call."""
    rng = np.random.default_rng(17)
    n_in = 512
    specs = [(T_.Q4_K, 37), (T_.Q8_0, 20), (T_.Q6_K, 5), (T_.Q4_1, 9), (T_.Q4_0, 16),
             (T_.Q5_K, 3), (T_.F32, 4)]
    parts = [(random_weight(t, n, n_in, rng), t, n) for t, n in specs]
    x = rng.standard_normal((T, n_in)).astype(np.float32)
    with cap("amx"):
        wide = K.matmul_parts(x, parts, n_in)
    col = 0
    for raw, t, n in parts:
        with cap("amx"):
            alone = K.matmul(x, raw, t, n, n_in)
        assert np.array_equal(wide[:, col:col + n], alone), t.name
        if t in AMX_TYPES:
            assert np.array_equal(alone, K.matmul(x, raw, t, n, n_in, simd=False)), t.name
        col += n


def test_amx_extreme_quants():
    """Q8_0 weights of −128 and 127 and Q6_K/Q5_K/Q4_K blocks of all-ones bytes (every bit
    set: the largest quants, scales and mins) with activations at ±amax."""
    n_in, n_out, T = 512, 19, 18
    x = np.where(np.arange(T * n_in).reshape(T, n_in) % 3 == 0, -1.0, 1.0).astype(np.float32)
    for t in AMX_TYPES:
        raw = random_weight(t, n_out, n_in, np.random.default_rng(3))
        if t == T_.Q8_0:
            blocks = raw.reshape(-1, 34)
            blocks[::2, 2:] = 0x80  # −128
            blocks[1::2, 2:] = 0x7F
        elif t != T_.Q4_0:
            size = {T_.Q4_K: 144, T_.Q5_K: 176, T_.Q6_K: 210}[t]
            blocks = raw.reshape(-1, size)
            keep = blocks.copy()
            blocks[:] = 0xFF
            fields = {T_.Q4_K: (0, 4), T_.Q5_K: (0, 4), T_.Q6_K: (208, 210)}[t]
            blocks[:, fields[0]:fields[1]] = keep[:, fields[0]:fields[1]]  # finite d, dmin
        for rows in (x[:1], x[:5], x):
            ref = K.matmul(rows, raw, t, n_out, n_in, simd=False)
            assert np.array_equal(amx(rows, raw, t, n_out, n_in), ref), (t.name, len(rows))


@pytest.mark.parametrize("quant", [T_.Q4_0, T_.Q8_0])
def test_tiny_model_logits_amx_vs_avx2(tmp_path, quant):
    """A tiny model's logits: at level amx bit-equal to the scalar kernels, close to the AVX2
    ones (float32 rounding differences flip a few activation quants, which the layers carry:
    ~3e-3 of the largest logit here); a 40-token prompt (tiles) equals its decode steps (VNNI)
    bit for bit."""
    tf, _ = build(tmp_path, "llama", quant=quant)
    tf.threads = 2
    ids = [(7 * i + 3) % 40 for i in range(40)]
    out = {}
    for level in ("scalar", "avx2", "amx"):
        with cap(level):
            out[level] = tf.forward(ids, tf.new_cache(48), logits="all")
    assert np.array_equal(out["amx"], out["scalar"])
    err = np.abs(out["amx"] - out["avx2"]).max()
    assert err <= 2e-2 * np.abs(out["avx2"]).max(), err
    with cap("amx"):
        cache = tf.new_cache(48)
        steps = np.stack([tf.forward([i], cache) for i in ids])
    assert np.array_equal(steps, out["amx"])
