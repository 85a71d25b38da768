"""Native kernels (lexguide._core via lexguide.runtime.kernels) against float64 oracles.

Oracle: the dequantized weight (lexguide.gguf.dequantize for the types lexguide quantizes,
gguf-py's dequantize for random k-quant blocks) times the dequantized *quantized activation*
(Q8_0 via lexguide.gguf.quantize, Q8_K by the numpy rule below), in float64. Tolerances are
relative to the magnitude sum |x|·|W| of each output: 2e-5 where every block sum is exact
integer arithmetic scaled in float32, 1e-3 for Q4_1/Q5_1 whose min term uses ggml's
float16-rounded s = d·Σq of the activation block.

Every kernel path runs: the scalar reference (``simd=False``), and each instruction-set level
the CPU has (``K.set_isa`` caps the kernels at avx2, avx512); a level the CPU lacks is skipped
with its reason.
"""

from __future__ import annotations

import contextlib
import os

import gguf.quants as gq
import numpy as np
import pytest

from lexguide import _core
from lexguide.errors import ModelError
from lexguide.gguf import dequantize, quantize
from lexguide.gguf.constants import GGMLType, type_traits
from lexguide.runtime import kernels as K

T_ = GGMLType
QUANTIZED_BY_US = [T_.Q4_0, T_.Q4_1, T_.Q5_0, T_.Q5_1, T_.Q8_0]
K_QUANTS = [T_.Q2_K, T_.Q3_K, T_.Q4_K, T_.Q5_K, T_.Q6_K]
FLOATS = [T_.F32, T_.F16, T_.BF16]
ALL = FLOATS + QUANTIZED_BY_US + K_QUANTS
# byte offsets of the float16 scale fields (d, dmin) of each k-quant block
K_SCALE_FIELDS = {T_.Q2_K: (80, 82), T_.Q3_K: (108,), T_.Q4_K: (0, 2), T_.Q5_K: (0, 2),
                  T_.Q6_K: (208,)}
# the kernel paths: "scalar" (simd=False) and the SIMD levels, each run with the kernels capped
# at it (skipped where the CPU lacks it)
PATHS = ["scalar", "avx2", "avx512"]
# the types with an AVX-512 kernel (the others take the AVX2 one at that level), and those of
# them whose results equal the scalar reference's bit for bit
AVX512_TYPES = [T_.Q4_0, T_.Q8_0, T_.Q4_K, T_.Q5_K, T_.Q6_K]
AVX512_EXACT = [T_.Q4_K, T_.Q5_K, T_.Q6_K]


@contextlib.contextmanager
def isa_cap(name: str):
    """Kernels capped at ``name`` inside the block, the previous cap restored after."""
    before = K.isa()
    K.set_isa(name)
    try:
        yield
    finally:
        K.set_isa(None if before == K.cpu_isa() else before)


@contextlib.contextmanager
def kernel_path(path: str):
    """(simd flag) for a kernel path, skipping the test where the CPU lacks the level."""
    if path == "scalar":
        yield False
        return
    if K.ISAS.index(K.cpu_isa()) < K.ISAS.index(path):
        pytest.skip(f"this CPU has no {path} (best: {K.cpu_isa()})")
    with isa_cap(path):
        yield True


def random_weight(t: GGMLType, n_out: int, n_in: int, rng: np.random.Generator) -> np.ndarray:
    """(n_out · row_bytes,) uint8 of a valid (n_out, n_in) matrix of type t."""
    if t in K_QUANTS:
        tr = type_traits(t)
        nb = n_out * n_in // tr.block_size
        raw = rng.integers(0, 256, size=(nb, tr.type_size), dtype=np.uint8)
        for off in K_SCALE_FIELDS[t]:  # finite, modest scales: random bytes may be NaN/inf
            raw[:, off:off + 2] = rng.uniform(1e-3, 2e-2, nb).astype("<f2").view(np.uint8).reshape(nb, 2)
        return raw.reshape(-1)
    w = rng.standard_normal((n_out, n_in)).astype(np.float32)
    return np.ascontiguousarray(quantize(w, t)).reshape(-1).view(np.uint8)


def dequantized(t: GGMLType, raw: np.ndarray, n_out: int, n_in: int) -> np.ndarray:
    if t in K_QUANTS:
        return gq.dequantize(raw.reshape(n_out, -1), int(t)).astype(np.float64)
    return dequantize(raw, t, (n_out, n_in)).astype(np.float64)


def q8k_reference(x: np.ndarray) -> np.ndarray:
    """ggml's Q8_K activation rule, dequantized: d = −max/127 for the largest-magnitude x."""
    b = x.reshape(x.shape[0], -1, 256).astype(np.float32)
    idx = np.abs(b).argmax(axis=-1)[..., None]
    mx = np.take_along_axis(b, idx, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = np.float32(-127.0) / mx
        q = np.clip(np.rint(iscale * b), -127, 127)
        d = np.float32(1.0) / iscale
    out = np.where(mx == 0, 0.0, q * d.astype(np.float64))
    return out.reshape(x.shape)


def activation_reference(t: GGMLType, x: np.ndarray) -> np.ndarray:
    if t in FLOATS:
        return x.astype(np.float64)
    if t in K_QUANTS:
        return q8k_reference(x)
    return dequantize(quantize(x, T_.Q8_0), T_.Q8_0, x.shape).astype(np.float64)


def tolerance(t: GGMLType) -> float:
    return 1e-3 if t in (T_.Q4_1, T_.Q5_1) else 2e-5


def case(t: GGMLType, T: int, n_out: int, n_blocks: int, seed: int = 0):
    rng = np.random.default_rng(seed + 1000 * int(t))
    n_in = n_blocks * type_traits(t).block_size
    if t in FLOATS:
        n_in = n_blocks * 32 + 3  # odd row lengths for the element types
    raw = random_weight(t, n_out, n_in, rng)
    x = rng.standard_normal((T, n_in)).astype(np.float32)
    return raw, x, n_in


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("T", [1, 3, 70])
@pytest.mark.parametrize("t", ALL, ids=lambda t: t.name)
def test_matmul_matches_float64_reference(t, T, path):
    n_out, n_blocks = 37, 3
    raw, x, n_in = case(t, T, n_out, n_blocks)
    w = dequantized(t, raw, n_out, n_in)
    xq = activation_reference(t, x)
    with kernel_path(path) as simd:
        y = K.matmul(x, raw, t, n_out, n_in, simd=simd)
    assert y.shape == (T, n_out) and y.dtype == np.float32
    scale = np.abs(xq) @ np.abs(w).T + 1e-30
    err = np.abs(y - xq @ w.T) / scale
    assert err.max() <= tolerance(t), (t.name, err.max())
    # and the activation quantization itself stays within ggml's expected error
    exact = x.astype(np.float64) @ w.T
    assert (np.abs(y - exact) / (np.abs(x) @ np.abs(w).T)).max() < 2e-2


@pytest.mark.parametrize("path", ["avx2", "avx512"])
@pytest.mark.parametrize("n_out", [17, 18, 19])
@pytest.mark.parametrize("n_blocks", [1, 5, 8])
@pytest.mark.parametrize("T", [1, 2, 3, 4, 5, 6, 7, 8, 9, 17])
@pytest.mark.parametrize("t", ALL, ids=lambda t: t.name)
def test_simd_agrees_with_scalar(t, T, n_blocks, n_out, path):
    """Each SIMD level against the scalar kernels, every tile shape: 1..8 activation rows and
    more; 17, 18, 19 weight rows, split in chunks of 8 over 2 threads, end in tiles of 1, 2
    and 3 weight rows beside tiles of 4; odd and even block counts."""
    raw, x, n_in = case(t, T, n_out, n_blocks, seed=7)
    b = K.matmul(x, raw, t, n_out, n_in, simd=False)
    with kernel_path(path) as simd:
        a = K.matmul(x, raw, t, n_out, n_in, simd=simd)
    w = dequantized(t, raw, n_out, n_in)
    scale = np.abs(activation_reference(t, x)) @ np.abs(w).T + 1e-30
    assert (np.abs(a - b) / scale).max() <= 1e-5
    if path == "avx512" and t in AVX512_EXACT:
        assert np.array_equal(a, b)  # the reference's float expressions, bit for bit


@pytest.mark.parametrize("t", ALL, ids=lambda t: t.name)
def test_every_type_has_a_kernel_at_each_level(t):
    """The comparisons above test a level's kernel only if it is chosen: AVX2 for every type,
    AVX-512 for AVX512_TYPES (the others fall back to AVX2)."""
    assert K.kernel_name(t, simd=False) == "scalar"
    for level in ("avx2", "avx512"):
        if K.ISAS.index(K.cpu_isa()) < K.ISAS.index(level):
            continue
        with isa_cap(level):
            want = "avx2" if level == "avx2" or t not in AVX512_TYPES else "avx512"
            assert K.kernel_name(t, simd=True) == want
            assert K.kernel_name(t, simd=False) == "scalar"
    if not K.has_avx2():
        pytest.skip("this CPU has no AVX2: only the scalar kernels run")


def test_isa_cap_from_the_environment():
    """LEXGUIDE_KERNELS caps the kernels from import on; an unknown value is ignored with a
    warning (the native core itself reads no environment)."""
    import subprocess
    import sys

    code = ("import warnings; warnings.simplefilter('always');"
            "from lexguide.runtime import kernels as K; print(K.isa())")
    for value, want in [("scalar", "scalar"), ("avx2", min(["avx2", K.cpu_isa()],
                                                               key=K.ISAS.index)),
                        ("sse9", K.cpu_isa())]:
        env = {**os.environ, "LEXGUIDE_KERNELS": value}
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, check=True)
        assert proc.stdout.strip() == want, (value, proc.stdout, proc.stderr)
        assert ("LEXGUIDE_KERNELS ignored" in proc.stderr) == (value == "sse9")


def test_isa_cap_picks_the_kernels():
    """set_isa caps every product: scalar names the scalar kernels and computes their bits,
    a cap above the CPU is no cap, and an unknown name is refused."""
    assert K.cpu_isa() in K.ISAS and K.isa() in K.ISAS
    assert K.ISAS.index(K.isa()) <= K.ISAS.index(K.cpu_isa())
    raw, x, n_in = case(T_.Q4_K, 5, 9, 2, seed=2)
    ref = K.matmul(x, raw, T_.Q4_K, 9, n_in, simd=False)
    with isa_cap("scalar"):
        assert K.isa() == "scalar"
        assert {K.kernel_name(t) for t in ALL} == {"scalar"}
        assert np.array_equal(K.matmul(x, raw, T_.Q4_K, 9, n_in), ref)
    with isa_cap("amx"):
        assert K.isa() == K.cpu_isa()
    with pytest.raises(ModelError, match="unknown instruction set"):
        K.set_isa("avx1024")
    with pytest.raises((TypeError, ValueError)):
        _core.kernels_set_isa_cap("sse")


@pytest.mark.parametrize("t", [T_.Q4_1, T_.Q4_K, T_.Q6_K, T_.F32], ids=lambda t: t.name)
def test_threads_and_rows_subset(t):
    n_out, n_blocks, T = 301, 2, 6
    raw, x, n_in = case(t, T, n_out, n_blocks, seed=3)
    one = K.matmul(x, raw, t, n_out, n_in, n_threads=1)
    two = K.matmul(x, raw, t, n_out, n_in, n_threads=2)
    assert np.array_equal(one, two)  # each output is computed whole by one thread
    rows = np.array([300, 0, 17, 17, 5])
    sub = K.matmul(x, raw, t, n_out, n_in, rows=rows)
    assert np.array_equal(sub, one[:, rows])
    assert K.matmul(x, raw, t, n_out, n_in, rows=np.array([], dtype=np.int64)).shape == (T, 0)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("t", ALL, ids=lambda t: t.name)
def test_each_row_independent_of_the_batch(t, path):
    """A row of x gives the same output bits alone and among other rows (any tile shape of
    weight rows × activation rows, any row subset): batched decode relies on it."""
    with kernel_path(path) as simd:
        _rows_independent(t, simd)


def _rows_independent(t, simd):
    n_out, n_blocks, T = 23, 3, 11
    raw, x, n_in = case(t, T, n_out, n_blocks, seed=9)
    alone = np.concatenate([K.matmul(x[i:i + 1], raw, t, n_out, n_in, simd=simd)
                            for i in range(T)])
    for lo, hi in [(0, T), (0, 2), (1, 4), (3, 10), (5, 6)]:
        together = K.matmul(x[lo:hi], raw, t, n_out, n_in, simd=simd)
        assert np.array_equal(together, alone[lo:hi]), (lo, hi)
    rows = np.array([22, 1, 2, 3, 4, 0, 7])  # tiles of 4 arbitrary rows, then a tail
    for lo, hi in [(0, 1), (2, 5), (0, T)]:
        sub = K.matmul(x[lo:hi], raw, t, n_out, n_in, rows=rows, simd=simd)
        assert np.array_equal(sub, alone[lo:hi][:, rows])


@pytest.mark.parametrize("t", ALL, ids=lambda t: t.name)
def test_dequantize_rows_bit_identical(t):
    n_out, n_blocks = 11, 2
    raw, _, n_in = case(t, 1, n_out, n_blocks, seed=5)
    ids = np.array([10, 0, 3, 3])
    got = K.dequantize_rows(raw, t, n_out, n_in, ids)
    full = dequantized(t, raw, n_out, n_in).astype(np.float32)
    assert np.array_equal(got, full[ids])


def test_unsupported_type_is_named():
    raw = np.zeros(66, np.uint8)
    with pytest.raises(ModelError, match="IQ2_XXS"):
        K.matmul(np.zeros((1, 256), np.float32), raw, T_.IQ2_XXS, 1, 256)
    with pytest.raises(ModelError, match="unknown type id 99"):
        K.matmul(np.zeros((1, 256), np.float32), raw, 99, 1, 256)


@pytest.mark.parametrize("bad", [
    dict(n_out=38),  # weight too small
    dict(n_out=36),  # weight too big
    dict(n_in=96 + 16),  # not whole blocks
    dict(n_in=64),  # x columns differ
    dict(n_out=0),
    dict(n_in=-32),
    dict(rows=np.array([37])),
    dict(rows=np.array([-1])),
    dict(out=np.zeros((2, 37), np.float32)),
    dict(out=np.zeros((1, 37), np.float64)),
    dict(out=np.zeros((1, 74), np.float32)[:, ::2]),
    dict(weight=np.zeros(10, np.float32)),
])
def test_bad_inputs_raise_model_error(bad):
    raw, x, n_in = case(T_.Q8_0, 1, 37, 3)
    args = dict(x=x, weight=raw, ggml_type=T_.Q8_0, n_out=37, n_in=n_in)
    args.update(bad)
    with pytest.raises(ModelError):
        K.matmul(args.pop("x"), args.pop("weight"), args.pop("ggml_type"), args.pop("n_out"),
                 args.pop("n_in"), **args)


def test_binding_checks_without_the_wrapper():
    """The extension itself refuses bad buffers (TypeError/ValueError), never crashes."""
    x = np.zeros((1, 32), np.float32)
    w = np.zeros(34, np.uint8)
    out = np.zeros((1, 1), np.float32)
    with pytest.raises((TypeError, ValueError)):
        _core.kernels_matmul(x.astype(np.float64), [(w, 8, 1)], 32, out)
    with pytest.raises((TypeError, ValueError)):
        _core.kernels_matmul(x, [(w[:33], 8, 1)], 32, out)
    with pytest.raises((TypeError, ValueError)):
        _core.kernels_matmul(x, [(w, 8, 1)], 32, x[:, :1])  # out aliases x
    with pytest.raises((TypeError, ValueError)):
        _core.kernels_matmul(x, [], 32, out)
    with pytest.raises((TypeError, ValueError)):
        _core.kernels_matmul(x, [(w, 8, 1), (w, 8, 1)], 32, out, np.array([0]))
    with pytest.raises((TypeError, ValueError)):
        _core.kernels_dequantize_rows(w, 8, 1, 32, np.array([1]), out)
    _core.kernels_matmul(x, [(w, 8, 1)], 32, out)
    assert out[0, 0] == 0.0


@pytest.mark.parametrize("T", [1, 6])
def test_parts_side_by_side_equal_separate_products(T):
    rng = np.random.default_rng(11)
    n_in = 512
    parts = [(random_weight(t, n, n_in, rng), t, n)
             for t, n in [(T_.Q4_K, 9), (T_.Q8_0, 4), (T_.F32, 5), (T_.Q5_0, 3)]]
    x = rng.standard_normal((T, n_in)).astype(np.float32)
    wide = np.full((T, 30), 7.0, np.float32)
    y = K.matmul_parts(x, parts, n_in, out=wide[:, 2:23])  # rows of a wider array
    separate = np.concatenate([K.matmul(x, w, t, n, n_in) for w, t, n in parts], axis=1)
    assert np.array_equal(wide[:, 2:23], separate)
    assert np.shares_memory(y, wide) and np.array_equal(y, separate)  # the view it filled
    assert (wide[:, :2] == 7).all() and (wide[:, 23:] == 7).all()


def test_pool_resize():
    n = K.threads()
    try:
        K.set_threads(1)
        assert K.threads() == 1
        K.set_threads(2)
        assert K.threads() == 2
        with pytest.raises(ModelError):
            K.set_threads(0)
    finally:
        K.set_threads(n)
