"""Native quantized matmul kernels (``lexguide._core``, sources in ``csrc/kernels/``).

Weights stay in the GGUF's ggml blocks (zero-copy views of the mapped file); activations are
quantized per block the way ggml does it (Q8_0/Q8_1 for the 32-element types, Q8_K for the
k-quants; float weights read float activations), and each output is a sum of exact integer
block dot products scaled in float32.

Instruction sets are chosen at run time (``csrc/kernels/cpu.h``): :func:`cpu_isa` is the best
level this CPU and OS support, one of ``"scalar"`` < ``"avx2"`` (AVX2+FMA+F16C) < ``"avx512"``
(AVX512F/BW/VL/DQ/VNNI) < ``"amx"`` (AMX-TILE/INT8, with the kernel's permission);
:func:`set_isa` caps it process-wide and :func:`isa` is the level every kernel uses. Each
product picks the kernel of the best level ≤ :func:`isa` that has one for its type
(:func:`kernel_name`); ``simd=False`` per call forces the portable reference kernels. Every
path's integer block sums equal the reference's; the AVX-512 k-quant kernels (Q4_K, Q5_K, Q6_K)
and the AMX products also evaluate its float expressions in its order and give its bits; the
other paths agree with it to float32 rounding of the block sums. The environment variable
``LEXGUIDE_KERNELS`` (scalar|avx2|avx512|amx), read once when this module is imported, sets the
initial cap.

Work is split over output rows on one process-wide pool of persistent threads (the caller's
thread included; ``set_threads``); the GIL is released while the kernels run.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from lexguide import _core
from lexguide.errors import ModelError
from lexguide.gguf.constants import GGMLType

__all__ = ["CACHE_TYPES", "ISAS", "KERNEL_TYPES", "NativeLayers", "attention", "cache_row_shape",
           "cpu_isa", "default_threads", "dequantize_rows", "gated", "has_avx2", "isa",
           "kernel_name", "matmul", "matmul_parts", "quantize_roundtrip", "rms_norm", "set_isa",
           "set_threads", "threads"]

F32 = npt.NDArray[np.float32]

#: ggml types with a native kernel.
KERNEL_TYPES: frozenset[GGMLType] = frozenset(GGMLType(i) for i, _ in _core.kernels_supported_types())
_MAX_PARTS = 8  # csrc/kernels/matmul.h kMaxParts
#: Instruction-set levels, lowest first (csrc/kernels/cpu.h Isa).
ISAS: tuple[str, ...] = ("scalar", "avx2", "avx512", "amx")


def cpu_isa() -> str:
    """The best level this CPU and OS support (one of :data:`ISAS`)."""
    return str(_core.kernels_cpu_isa())


def isa() -> str:
    """The level the kernels use now: the lower of :func:`cpu_isa` and the :func:`set_isa` cap."""
    return str(_core.kernels_isa())


def set_isa(name: str | None) -> None:
    """Cap every kernel at level ``name`` (one of :data:`ISAS`; None: no cap), process-wide;
    a product already running keeps its level. A cap above :func:`cpu_isa` is no cap. Raises
    :class:`ModelError` for an unknown name."""
    level = "amx" if name is None else str(name).strip().lower()
    if level not in ISAS:
        raise ModelError(f"unknown instruction set {name!r}: expected one of {', '.join(ISAS)}")
    _core.kernels_set_isa_cap(level)


def _cap_from_environment() -> None:
    """``LEXGUIDE_KERNELS`` (scalar|avx2|avx512|amx) caps the kernels from the start: the one
    environment read of the kernels (the native core reads none)."""
    value = os.environ.get("LEXGUIDE_KERNELS", "").strip()
    if not value:
        return
    try:
        set_isa(value)
    except ModelError as e:
        warnings.warn(f"LEXGUIDE_KERNELS ignored: {e}", RuntimeWarning, stacklevel=2)


_cap_from_environment()


def _check_type(ggml_type: int) -> int:
    t = int(ggml_type)
    if t not in KERNEL_TYPES:
        try:
            name = GGMLType(t).name
        except ValueError:
            name = f"unknown type id {t}"
        supported = ", ".join(sorted(k.name for k in KERNEL_TYPES))
        raise ModelError(f"no native kernel for ggml type {name} (supported: {supported})")
    return t


def _as_bytes(weight: np.ndarray) -> np.ndarray:
    if not isinstance(weight, np.ndarray) or weight.dtype != np.uint8:
        raise ModelError("weight must be a uint8 numpy array of ggml blocks")
    if not weight.flags.c_contiguous:
        raise ModelError("weight bytes must be C-contiguous")
    return weight


def matmul(x: F32, weight: np.ndarray, ggml_type: int, n_out: int, n_in: int, *,
           out: F32 | None = None, rows: npt.ArrayLike | None = None, n_threads: int = 0,
           simd: bool | None = None) -> F32:
    """``x @ W.T`` for x (T, n_in) float32 and W (n_out, n_in) given as its ggml bytes.

    ``rows`` (int ids) computes only those output rows: result (T, len(rows)). ``out``, when
    given, must be a float32 array of the result's shape with contiguous rows (a column slice
    of a wider array is fine); it is written and returned. ``n_threads`` ≤ 0 uses the whole
    pool. Never mutates x or the weight. Costs one pass over the selected weight rows per 64
    rows of x. Raises :class:`ModelError` for an unsupported type (named), mismatched sizes or
    shapes, or out-of-range rows.
    """
    return matmul_parts(x, [(weight, ggml_type, n_out)], n_in, out=out, rows=rows,
                        n_threads=n_threads, simd=simd)


def matmul_parts(x: F32, parts: Sequence[tuple[np.ndarray, int, int]], n_in: int, *,
                 out: F32 | None = None, rows: npt.ArrayLike | None = None,
                 n_threads: int = 0, simd: bool | None = None) -> F32:
    """``x @ [W_1 | W_2 | ...].T`` for parts ``(weight bytes, ggml type, n_out)`` of matrices
    reading the same x (Q|K|V, gate|up): (T, Σ n_out), the parts' outputs side by side, in one
    native call (x quantized once per activation format). ``rows`` needs a single part.
    Otherwise as :func:`matmul`."""
    if not 1 <= len(parts) <= _MAX_PARTS:
        raise ModelError(f"a product takes 1 to {_MAX_PARTS} matrices, got {len(parts)}")
    checked = [(_as_bytes(w), _check_type(t), int(n)) for w, t, n in parts]
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2:
        raise ModelError(f"x must be (T, n_in), got shape {x.shape}")
    ids = None
    if rows is not None:
        ids = np.ascontiguousarray(rows, dtype=np.int64).reshape(-1)
    n_sel = sum(n for _, _, n in checked) if ids is None else ids.size
    if out is None:
        out = np.empty((x.shape[0], n_sel), dtype=np.float32)
    elif not (isinstance(out, np.ndarray) and out.dtype == np.float32 and out.ndim == 2
              and out.flags.writeable):
        raise ModelError("out must be a writeable float32 (T, n_out) array")
    try:
        _core.kernels_matmul(x, checked, int(n_in), out, ids, int(n_threads),
                             True if simd is None else bool(simd))
    except (ValueError, TypeError) as e:
        raise ModelError(str(e)) from None
    return out


# KV cache element types (csrc/kernels/attention.h CacheType): name → (code, numpy dtype).
# f16 is llama.cpp's default cache; a q8_0 cache row is hd/32 blocks of 34 bytes (float16 d,
# 32 int8), stored as uint8.
CACHE_TYPES: dict[str, tuple[int, type]] = {
    "f32": (0, np.float32), "f16": (1, np.float16), "q8_0": (2, np.uint8)}
_CACHE_CODES = {np.dtype(dt): code for code, dt in CACHE_TYPES.values()}


def cache_row_shape(cache_type: str, head_dim: int) -> tuple[type, int]:
    """(numpy dtype, last-axis length) of one cache row of ``head_dim`` elements.

    Raises :class:`ModelError` for an unknown type or a q8_0 cache of a head size that is not
    a multiple of 32."""
    if cache_type not in CACHE_TYPES:
        raise ModelError(f"unknown KV cache type {cache_type!r}: expected one of "
                         f"{', '.join(CACHE_TYPES)}")
    dtype = CACHE_TYPES[cache_type][1]
    if cache_type == "q8_0":
        if head_dim % 32:
            raise ModelError(f"a q8_0 KV cache needs a head size that is a multiple of 32, "
                             f"got {head_dim}")
        return dtype, head_dim // 32 * 34
    return dtype, head_dim


def _cache_views(k_caches: Sequence[np.ndarray],
                 v_caches: Sequence[np.ndarray]) -> tuple[int, list, list]:
    """The caches' type code (from their dtype, one for all) and their byte views."""
    codes = {_CACHE_CODES.get(np.dtype(getattr(c, "dtype", None))) for c in (*k_caches, *v_caches)}
    if None in codes or len(codes) != 1:
        raise ModelError("KV caches must all be float32 (f32), float16 (f16) or uint8 (q8_0) "
                         "arrays of one type")
    try:
        return (codes.pop(), [c.view(np.uint8) for c in k_caches],
                [c.view(np.uint8) for c in v_caches])
    except ValueError as e:  # a view of a non-contiguous array
        raise ModelError(f"KV caches must be C-contiguous: {e}") from None


def attention(qkv: F32, out: F32, seqs: np.ndarray, k_caches: Sequence[F32],
              v_caches: Sequence[F32], layer: int, *, n_q: int, n_kv: int, head_dim: int,
              q_norm: F32 | None, k_norm: F32 | None, eps: float, cos: F32, sin: F32,
              neox: bool, n_rot: int, scale: float, window: int, n_threads: int = 0) -> F32:
    """Attention of a few new rows per sequence over each sequence's own KV cache, in one
    native call (``csrc/kernels/attention.h``); mutates ``qkv``, the caches and ``out``.

    ``qkv`` (R, (n_q + 2·n_kv)·hd) holds the rows of the Q|K|V projection of every sequence;
    ``seqs`` (B, 3) int64 gives per sequence its first row, row count and the cache position
    of its first row; ``k_caches[i]`` / ``v_caches[i]`` are sequence i's
    (n_layer, n_kv, n_ctx, row) arrays of one cache type, told by their dtype (float32: f32,
    float16: f16, uint8: q8_0 rows of :func:`cache_row_shape`). The q and k heads are RMS-normed (when ``q_norm`` and
    ``k_norm`` are given) and rotated in place (``cos``/``sin``: (positions, n_rot/2) tables),
    keys and values are written into the caches at their positions, and ``out`` (R, n_q·hd)
    receives softmax(q·Kᵀ·scale)·V over the visible positions (causal; the last ``window``
    only when it is > 0). Each row's result is the same whichever sequences share the call.
    Costs O(rows × visible positions × hd) per head. Raises :class:`ModelError` for
    mismatched shapes, positions past a cache or the tables, or shared memory.
    """
    code, ks, vs = _cache_views(k_caches, v_caches)
    try:
        _core.kernels_attention(qkv, out, seqs, ks, vs, int(layer),
                                int(n_q), int(n_kv), int(head_dim), q_norm, k_norm, float(eps),
                                cos, sin, bool(neox), int(n_rot), float(scale), int(window),
                                int(n_threads), code)
    except (ValueError, TypeError) as e:
        raise ModelError(str(e)) from None
    return out


class NativeLayers:
    """A model's transformer layers held natively (``csrc/kernels/layers.h``): a decode step
    of several sequences runs every layer in one call, without Python in between.

    Built once from the weights (zero-copy views of the mapped file, kept alive by this
    object): ``add_layer`` per layer, ``set_rope`` per layer whenever its rotation tables
    change. Raises :class:`ModelError` for shapes that do not fit the model.
    """

    __slots__ = ("_layers",)

    def __init__(self, *, n_embd: int, n_ff: int, n_q: int, n_kv: int, head_dim: int,
                 n_rot: int, neox: bool, eps: float, query_scale: float, gelu: bool,
                 output_norm: F32) -> None:
        try:
            self._layers = _core.KernelsLayers(n_embd, n_ff, n_q, n_kv, head_dim, n_rot, neox,
                                               eps, query_scale, gelu, output_norm)
        except (ValueError, TypeError) as e:
            raise ModelError(str(e)) from None

    def add_layer(self, *, attn_norm: F32, qkv: Sequence[tuple[np.ndarray, int, int]],
                  qkv_bias: F32 | None, wo: tuple[np.ndarray, int, int], wo_bias: F32 | None,
                  ffn_norm: F32, gate_up: Sequence[tuple[np.ndarray, int, int]],
                  down: tuple[np.ndarray, int, int], q_norm: F32 | None, k_norm: F32 | None,
                  post_attn_norm: F32 | None, post_ffn_norm: F32 | None, window: int) -> None:
        """Append a layer: norms (n_embd,) / (hd,) float32, matrices as (bytes, ggml type,
        n_out) parts (q, k, v; gate, up), optional biases and norms as None."""
        try:
            self._layers.add_layer(attn_norm, list(qkv), qkv_bias, wo, wo_bias, ffn_norm,
                                   list(gate_up), down, q_norm, k_norm, post_attn_norm,
                                   post_ffn_norm, int(window))
        except (ValueError, TypeError) as e:
            raise ModelError(str(e)) from None

    def set_rope(self, layer: int, cos: F32, sin: F32) -> None:
        """The rotation tables (positions, n_rot/2) of ``layer`` (the arrays are kept)."""
        try:
            self._layers.set_rope(int(layer), cos, sin)
        except (ValueError, TypeError) as e:
            raise ModelError(str(e)) from None

    def forward(self, x: F32, seqs: np.ndarray, k_caches: Sequence[F32],
                v_caches: Sequence[F32], out: F32, n_threads: int = 0,
                simd: bool | None = None) -> F32:
        """All layers on the rows x (R, n_embd) float32 (overwritten) of the sequences
        ``seqs`` (B, 3) int64: first row, row count, cache position of the first row; appends
        their keys and values to ``k_caches[i]``/``v_caches[i]`` (n_layer, n_kv, n_ctx, row),
        of one cache type as :func:`attention` takes them, and writes the final normalised hidden states to ``out`` (R, n_embd). Mutates x, the
        caches and out."""
        code, ks, vs = _cache_views(k_caches, v_caches)
        try:
            self._layers.forward(x, seqs, ks, vs, out, int(n_threads),
                                 True if simd is None else bool(simd), code)
        except (ValueError, TypeError) as e:
            raise ModelError(str(e)) from None
        return out


def dequantize_rows(weight: np.ndarray, ggml_type: int, n_rows: int, n_in: int,
                    ids: npt.ArrayLike) -> F32:
    """Rows ``ids`` of W (n_rows, n_in) dequantized → (len(ids), n_in) float32 (a new array),
    bit-identical to :func:`lexguide.gguf.dequantize` of those rows. Raises :class:`ModelError`
    like :func:`matmul`."""
    t = _check_type(ggml_type)
    idx = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
    out = np.empty((idx.size, int(n_in)), dtype=np.float32)
    try:
        _core.kernels_dequantize_rows(_as_bytes(weight), t, int(n_rows), int(n_in), idx, out)
    except (ValueError, TypeError) as e:
        raise ModelError(str(e)) from None
    return out


def quantize_roundtrip(x: F32, ggml_type: int) -> F32:
    """x (T, n_in) → a new array of the values x's activation blocks stand for in a product with
    a ``ggml_type`` matrix (Q8_0/Q8_K quantized, dequantized; a copy for float types): a float
    product of it with the dequantized matrix equals :func:`matmul` up to float rounding."""
    t = _check_type(ggml_type)
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty_like(x)
    try:
        _core.kernels_quantize_roundtrip(x, t, out)
    except (ValueError, TypeError) as e:
        raise ModelError(str(e)) from None
    return out


def gated(gate_up: F32, gelu: bool) -> F32:
    """act(gate) · up of ``gate_up`` (T, 2·n_ff) = [gate | up] → a new (T, n_ff) array, with
    llama.cpp's arithmetic: SiLU through ggml's SIMD expf, or GELU(tanh) from ggml's float16
    table (the native decode layers run the same function)."""
    x = np.ascontiguousarray(gate_up, dtype=np.float32)
    out = np.empty((x.shape[0], x.shape[1] // 2), dtype=np.float32)
    try:
        _core.kernels_gated(x, bool(gelu), out)
    except (ValueError, TypeError) as e:
        raise ModelError(str(e)) from None
    return out


def rms_norm(x: F32, weight: F32, eps: float, out: F32 | None = None) -> F32:
    """RMSNorm of each row of x (T, n) times ``weight`` (n,), with ggml's rounding (squares
    summed in double, ``x · (1/√(mean + eps))`` then ``· weight``) → ``out`` (a new array
    unless given; it may be x)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    y = np.empty_like(x) if out is None else out
    try:
        _core.kernels_rms_norm(x.reshape(-1, x.shape[-1]), np.ascontiguousarray(weight, np.float32),
                               float(eps), y.reshape(-1, x.shape[-1]))
    except (ValueError, TypeError) as e:
        raise ModelError(str(e)) from None
    return y


def kernel_name(ggml_type: int, simd: bool | None = None) -> str:
    """The level of the kernel :func:`matmul` uses for a type now (one of :data:`ISAS`): the
    best level ≤ :func:`isa` with a kernel for it; ``"scalar"`` when ``simd`` is False."""
    return str(_core.kernels_kernel_name(_check_type(ggml_type),
                                         True if simd is None else bool(simd)))


def has_avx2() -> bool:
    """Whether this CPU runs the AVX2/FMA/F16C kernels (whatever the cap)."""
    return cpu_isa() != "scalar"


def default_threads() -> int:
    """Cores available to this process (the pool's initial size)."""
    return int(_core.kernels_default_threads())


def threads() -> int:
    """Threads of the shared pool (the calling thread counts as one)."""
    return int(_core.kernels_pool_size())


def set_threads(n: int) -> None:
    """Resize the shared pool to ``n`` threads (1 .. 1024; mutates process-wide state: a
    running product finishes first). Raises :class:`ModelError` outside that range."""
    try:
        _core.kernels_set_pool_size(int(n))
    except ValueError as e:
        raise ModelError(str(e)) from None
