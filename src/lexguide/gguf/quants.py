"""Block-vectorised numpy (de)quantisation of ggml tensor types.

Every kernel works on a chunk of whole blocks at once — ``(n_blocks, type_size)`` uint8 in,
``(n_blocks, block_size)`` float32 out — and never loops over blocks in Python. Formulas and
the order of float32 operations follow ggml's reference dequantisers (``ggml-quants.c``,
spec ``gguf.md`` §4) so results are bit-identical to ggml and gguf-py. Quantisers follow ggml's
``quantize_row_*_ref`` rounding.

Public entry points: :func:`dequantize`, :func:`quantize`, :data:`DEQUANTIZABLE_TYPES`,
:data:`QUANTIZABLE_TYPES`.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from lexguide.errors import GGUFError
from lexguide.gguf.constants import ELEMENT_DTYPES, GGMLType, TypeTraits, type_traits

__all__ = [
    "DEQUANTIZABLE_TYPES",
    "QUANTIZABLE_TYPES",
    "dequantize",
    "quantize",
]

F32 = np.float32
# Roughly 128k output elements per chunk: big enough to amortise per-call overhead, small
# enough that the temporaries stay in cache.
_CHUNK_ELEMENTS = 1 << 17

Kernel = Callable[[np.ndarray, np.ndarray], None]

_IQ4NL_VALUES = np.array(
    [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=F32
)
_MXFP4_VALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=F32)
# E8M0 scale byte e -> 2^(e-128) as float32 (ggml_e8m0_to_fp32_half), built from bit patterns.
_E8M0_HALF = np.where(
    np.arange(256) < 2,
    np.uint32(0x00200000) << np.arange(256, dtype=np.uint32).clip(0, 1),
    (np.arange(256, dtype=np.uint32).clip(1, 255) - 1) << np.uint32(23),
).astype(np.uint32).view(F32)
_POW3 = np.array([1, 3, 9, 27, 81], dtype=np.uint8)


# ------------------------------------------------------------------------------------------
# field helpers (n = blocks in the chunk)


def _f16(blocks: np.ndarray, offset: int) -> np.ndarray:
    """The ggml_half at (even) byte ``offset`` of every block as float32, shape (n, 1).

    Read as one uint16 column: far cheaper than copying an (n, 2) byte slice row by row.
    """
    column = blocks.view("<u2")[:, offset // 2].copy()
    return column.view("<f2").astype(F32)[:, None]


_LITTLE_ENDIAN = sys.byteorder == "little"
_BYTE_LANES = 0x0101010101010101


def _fields(x: np.ndarray, shifts: tuple[int, ...], mask: int) -> np.ndarray:
    """(n, k) bytes -> (n, len(shifts), k) uint8 with ``(x >> shifts[i]) & mask`` at [:, i].

    Why not one broadcast ``x[:, None] >> shifts``: with rows this short numpy spends its
    time in per-row loop calls. Here each byte field is extracted from 8-byte words (the
    shifted-in neighbour bits are masked off), iterating the transposed arrays in C order so
    every ufunc call runs one long strided loop per word column instead of one per row.
    """
    n, k = x.shape
    if k % 8 or not _LITTLE_ENDIAN:
        shift_col = np.array(shifts, dtype=np.uint8).reshape(1, -1, 1)
        return (x[:, None, :] >> shift_col) & np.uint8(mask)
    words = np.ascontiguousarray(x).view(np.uint64).T  # (k/8, n)
    out = np.empty((n, len(shifts), k // 8), dtype=np.uint64)
    lane_mask = np.uint64(mask * _BYTE_LANES)
    for i, shift in enumerate(shifts):
        field = out[:, i].T
        if shift:
            np.right_shift(words, np.uint64(shift), out=field, order="C")
            np.bitwise_and(field, lane_mask, out=field, order="C")
        else:
            np.bitwise_and(words, lane_mask, out=field, order="C")
    return out.view(np.uint8).reshape(n, len(shifts), k)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(n, k) bytes -> (n, 2, k) uint8: low nibbles then high nibbles."""
    return _fields(qs, (0, 4), 0x0F)


def _bits(qh: np.ndarray) -> np.ndarray:
    """(n, k) bytes -> (n, 8, k) uint8: bit b of byte j at [:, b, j]."""
    return _fields(qh, (0, 1, 2, 3, 4, 5, 6, 7), 1)


def _crumbs(qs: np.ndarray, groups: int) -> np.ndarray:
    """(n, groups*32) bytes -> (n, groups, 4, 32) uint8 of 2-bit fields, shift 2·j at [:, :, j]."""
    n = len(qs)
    return _fields(qs.reshape(n * groups, 32), (0, 2, 4, 6), 3).reshape(n, groups, 4, 32)


def _k4_scale_min(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unpack the 12-byte Q4_K/Q5_K scale field into 8 six-bit scales and 8 mins (uint8)."""
    a, b, c = scales[:, 0:4], scales[:, 4:8], scales[:, 8:12]
    sc = np.concatenate([a & 63, (c & 0x0F) | ((a >> 6) << 4)], axis=1)
    mn = np.concatenate([b & 63, (c >> 4) | ((b >> 6) << 4)], axis=1)
    return sc, mn


# ------------------------------------------------------------------------------------------
# dequantisation kernels: kernel(blocks (n, type_size) uint8, out (n, block_size) float32)


def _deq_q4_0(b: np.ndarray, out: np.ndarray) -> None:
    q = _nibbles(b[:, 2:18]).view(np.int8)
    q -= np.int8(8)
    out.reshape(q.shape)[...] = q
    out *= _f16(b, 0)


def _deq_q4_1(b: np.ndarray, out: np.ndarray) -> None:
    out.reshape(-1, 2, 16)[...] = _nibbles(b[:, 4:20])
    out *= _f16(b, 0)
    out += _f16(b, 2)


def _q5_values(b: np.ndarray, qh_off: int, qs_off: int) -> np.ndarray:
    """5-bit quants of Q5_0/Q5_1 blocks, shape (n, 32) uint8 in 0..31."""
    q = _nibbles(b[:, qs_off : qs_off + 16]).reshape(len(b), 32)
    q |= np.unpackbits(b[:, qh_off : qh_off + 4], axis=1, bitorder="little") << np.uint8(4)
    return q


def _deq_q5_0(b: np.ndarray, out: np.ndarray) -> None:
    q = _q5_values(b, 2, 6).view(np.int8)
    q -= np.int8(16)
    out[...] = q
    out *= _f16(b, 0)


def _deq_q5_1(b: np.ndarray, out: np.ndarray) -> None:
    out[...] = _q5_values(b, 4, 8)
    out *= _f16(b, 0)
    out += _f16(b, 2)


def _deq_q8_0(b: np.ndarray, out: np.ndarray) -> None:
    out[...] = b[:, 2:34].view(np.int8)
    out *= _f16(b, 0)


def _deq_q8_1(b: np.ndarray, out: np.ndarray) -> None:
    out[...] = b[:, 4:36].view(np.int8)
    out *= _f16(b, 0)


def _deq_q2_k(b: np.ndarray, out: np.ndarray) -> None:
    n = len(b)
    scales = b[:, 0:16]
    dl = _f16(b, 80) * (scales & np.uint8(0x0F)).astype(F32)
    ml = _f16(b, 82) * (scales >> np.uint8(4)).astype(F32)
    o = out.reshape(n, 16, 16)
    o[...] = _crumbs(b[:, 16:80], 2).reshape(n, 16, 16)
    o *= dl[:, :, None]
    o -= ml[:, :, None]


def _deq_q3_k(b: np.ndarray, out: np.ndarray) -> None:
    n = len(b)
    s = b[:, 96:108]
    low4 = _nibbles(s[:, 0:8]).reshape(n, 16)
    high2 = _fields(s[:, 8:12], (0, 2, 4, 6), 3)  # (n, 4, 4): [k div 4, k mod 4]
    sc = (low4 | (high2.reshape(n, 16) << np.uint8(4))).view(np.int8)
    sc -= np.int8(32)
    dl = _f16(b, 108) * sc.astype(F32)
    q = _crumbs(b[:, 32:96], 2).view(np.int8)  # (n, 2, 4, 32): [h, j, l]
    # the 4 is subtracted where the hmask bit is clear
    clear = (_bits(b[:, 0:32]) ^ np.uint8(1)).reshape(n, 2, 4, 32) << np.uint8(2)
    q -= clear.view(np.int8)
    o = out.reshape(n, 16, 16)
    o[...] = q.reshape(n, 16, 16)
    o *= dl[:, :, None]


def _deq_q4_k(b: np.ndarray, out: np.ndarray) -> None:
    n = len(b)
    sc, mn = _k4_scale_min(b[:, 4:16])
    dl = _f16(b, 0) * sc.astype(F32)
    ml = _f16(b, 2) * mn.astype(F32)
    o = out.reshape(n, 8, 32)
    o[...] = _nibbles(b[:, 16:144].reshape(n * 4, 32)).reshape(n, 8, 32)
    o *= dl[:, :, None]
    o -= ml[:, :, None]


def _deq_q5_k(b: np.ndarray, out: np.ndarray) -> None:
    n = len(b)
    sc, mn = _k4_scale_min(b[:, 4:16])
    dl = _f16(b, 0) * sc.astype(F32)
    ml = _f16(b, 2) * mn.astype(F32)
    q = _nibbles(b[:, 48:176].reshape(n * 4, 32)).reshape(n, 8, 32)
    q |= _bits(b[:, 16:48]) << np.uint8(4)
    o = out.reshape(n, 8, 32)
    o[...] = q
    o *= dl[:, :, None]
    o -= ml[:, :, None]


def _deq_q6_k(b: np.ndarray, out: np.ndarray) -> None:
    n = len(b)
    # low nibbles: ql[64h + l + 32·(g mod 2)] >> 4·(g div 2) for group g = 0..3 of half h
    low = _nibbles(b[:, 0:128].reshape(n * 2, 64)).reshape(n, 2, 4, 32)
    q = low | (_crumbs(b[:, 128:192], 2) << np.uint8(4))
    q = q.view(np.int8)
    q -= np.int8(32)
    dl = _f16(b, 208) * b[:, 192:208].view(np.int8).astype(F32)
    o = out.reshape(n, 16, 16)
    o[...] = q.reshape(n, 16, 16)
    o *= dl[:, :, None]


def _deq_q8_k(b: np.ndarray, out: np.ndarray) -> None:
    out[...] = b[:, 4:260].view(np.int8)
    out *= b.view("<u4")[:, 0:1].copy().view("<f4")


def _deq_iq4_nl(b: np.ndarray, out: np.ndarray) -> None:
    np.take(_IQ4NL_VALUES, _nibbles(b[:, 2:18]), out=out.reshape(-1, 2, 16))
    out *= _f16(b, 0)


def _deq_iq4_xs(b: np.ndarray, out: np.ndarray) -> None:
    n = len(b)
    scales_h = b.view("<u2")[:, 1:2].copy()  # (n, 1)
    high = (scales_h >> np.arange(0, 16, 2, dtype=np.uint16)) & np.uint16(3)  # (n, 8)
    low = _nibbles(b[:, 4:8]).transpose(0, 2, 1).reshape(n, 8)  # ib -> byte ib//2, nibble ib%2
    ls = (low | (high.astype(np.uint8) << np.uint8(4))).view(np.int8)
    ls -= np.int8(32)
    dl = _f16(b, 0) * ls.astype(F32)
    o = out.reshape(n, 8, 2, 16)
    np.take(_IQ4NL_VALUES, _nibbles(b[:, 8:136].reshape(n * 8, 16)).reshape(n, 8, 2, 16), out=o)
    o *= dl[:, :, None, None]


def _deq_mxfp4(b: np.ndarray, out: np.ndarray) -> None:
    np.take(_MXFP4_VALUES, _nibbles(b[:, 1:17]), out=out.reshape(-1, 2, 16))
    with np.errstate(over="ignore"):  # scale bytes near 255 overflow to ±inf, as in ggml
        out *= _E8M0_HALF[b[:, 0:1]]


def _deq_tq2_0(b: np.ndarray, out: np.ndarray) -> None:
    q = _crumbs(b[:, 0:64], 2).view(np.int8)
    q -= np.int8(1)
    out.reshape(q.shape)[...] = q
    out *= _f16(b, 64)


def _ternary_digits(x: np.ndarray, n_digits: int) -> np.ndarray:
    """(n, k) bytes -> (n, n_digits, k) int8 ternary digits in -1..1 (ggml TQ1_0 packing)."""
    prod = x[:, None, :] * _POW3[:n_digits].reshape(1, n_digits, 1)  # wraps mod 256
    return ((prod.astype(np.uint16) * np.uint16(3)) >> np.uint16(8)).astype(np.int8) - np.int8(1)


def _deq_tq1_0(b: np.ndarray, out: np.ndarray) -> None:
    n = len(b)
    out[:, 0:160] = _ternary_digits(b[:, 0:32], 5).reshape(n, 160)
    out[:, 160:240] = _ternary_digits(b[:, 32:48], 5).reshape(n, 80)
    out[:, 240:256] = _ternary_digits(b[:, 48:52], 4).reshape(n, 16)
    out *= _f16(b, 52)


_KERNELS: dict[GGMLType, Kernel] = {
    GGMLType.Q4_0: _deq_q4_0,
    GGMLType.Q4_1: _deq_q4_1,
    GGMLType.Q5_0: _deq_q5_0,
    GGMLType.Q5_1: _deq_q5_1,
    GGMLType.Q8_0: _deq_q8_0,
    GGMLType.Q8_1: _deq_q8_1,
    GGMLType.Q2_K: _deq_q2_k,
    GGMLType.Q3_K: _deq_q3_k,
    GGMLType.Q4_K: _deq_q4_k,
    GGMLType.Q5_K: _deq_q5_k,
    GGMLType.Q6_K: _deq_q6_k,
    GGMLType.Q8_K: _deq_q8_k,
    GGMLType.IQ4_NL: _deq_iq4_nl,
    GGMLType.IQ4_XS: _deq_iq4_xs,
    GGMLType.MXFP4: _deq_mxfp4,
    GGMLType.TQ1_0: _deq_tq1_0,
    GGMLType.TQ2_0: _deq_tq2_0,
}

#: Types :func:`dequantize` supports.
DEQUANTIZABLE_TYPES: frozenset[GGMLType] = frozenset(
    [*_KERNELS, *ELEMENT_DTYPES, GGMLType.BF16]
)


# ------------------------------------------------------------------------------------------
# public dequantize


def _as_type(ggml_type: int | str | GGMLType) -> GGMLType:
    if type(ggml_type) is GGMLType:
        return ggml_type
    if isinstance(ggml_type, str):
        try:
            return GGMLType[ggml_type.upper()]
        except KeyError:
            raise GGUFError(f"unknown ggml type name {ggml_type!r}") from None
    try:
        return GGMLType(int(ggml_type))
    except ValueError:
        raise GGUFError(f"unknown ggml type id {int(ggml_type)}") from None


def _as_bytes(raw: object) -> np.ndarray:
    if isinstance(raw, np.ndarray):
        if raw.dtype != np.uint8:
            raw = np.ascontiguousarray(raw).view(np.uint8)
        return raw
    return np.frombuffer(raw, dtype=np.uint8)  # type: ignore[call-overload]


def _resolve_shape(
    data: np.ndarray, traits: TypeTraits, shape: tuple[int, ...] | None
) -> tuple[int, ...]:
    name = traits.ggml_type.name
    if shape is None:
        row = data.shape[-1] if data.ndim else data.size
        if row % traits.type_size:
            raise GGUFError(
                f"{name}: {row} bytes per row is not a multiple of the {traits.type_size}-byte block"
            )
        return (*data.shape[:-1], row // traits.type_size * traits.block_size)
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise GGUFError(f"{name}: negative dimension in shape {shape}")
    # numpy refuses any dimension (or product of non-zero dimensions) past its address space,
    # even when another dimension is 0 and the array would be empty
    if math.prod(s for s in shape if s) * 4 >= 1 << 63:  # float32 output
        raise GGUFError(f"{name}: shape {shape} is too large to hold in memory")
    inner = shape[-1] if shape else 1
    if inner % traits.block_size:
        raise GGUFError(
            f"{name}: row length {inner} is not a multiple of the block size {traits.block_size}"
        )
    n_elements = math.prod(shape)
    expected = n_elements // traits.block_size * traits.type_size
    if expected != data.size:
        raise GGUFError(
            f"{name}: shape {shape} needs {expected} bytes, got {data.size}"
        )
    return shape


def dequantize(
    raw: npt.ArrayLike | bytes | memoryview,
    ggml_type: int | str | GGMLType,
    shape: tuple[int, ...] | None = None,
    *,
    out: np.ndarray | None = None,
) -> npt.NDArray[np.float32]:
    """Decode ggml-encoded bytes into a float32 array.

    Parameters
    ----------
    raw
        The encoded bytes: ``bytes``/``memoryview`` or a uint8 array. A 2-D array of whole rows
        (``GGUFFile.raw(name)[i:j]``) dequantises just those rows — the lazy runtime path.
    ggml_type
        A :class:`GGMLType`, its id, or its name (``"Q4_K"``).
    shape
        Numpy (row-major) shape of the result; defaults to ``raw.shape[:-1]`` plus the row
        length implied by the last axis.
    out
        Optional float32 C-contiguous array of that shape to write into (no allocation).

    Returns
    -------
    The decoded array (``out`` when given). Never mutates ``raw``. Costs one pass over the
    data in chunks of whole blocks; bit-identical to ggml's reference dequantisers.

    Raises
    ------
    GGUFError
        Unknown or unsupported type (the message names it), or a size/shape mismatch.
    """
    gtype = _as_type(ggml_type)
    traits = type_traits(gtype)
    if gtype not in DEQUANTIZABLE_TYPES:
        supported = ", ".join(sorted(t.name for t in DEQUANTIZABLE_TYPES))
        raise GGUFError(f"dequantization of {gtype.name} is not supported (supported: {supported})")
    data = _as_bytes(raw)
    shape = _resolve_shape(data, traits, shape)
    if out is None:
        out = np.empty(shape, dtype=F32)
    elif out.dtype != F32 or tuple(out.shape) != shape or not out.flags.c_contiguous:
        raise GGUFError(f"out must be a C-contiguous float32 array of shape {shape}")
    flat_out = out.reshape(-1)
    if gtype in ELEMENT_DTYPES:
        flat_out[...] = data.reshape(-1).view(ELEMENT_DTYPES[gtype])
        return out
    if gtype == GGMLType.BF16:
        np.left_shift(
            data.reshape(-1).view("<u2"), 16, out=flat_out.view(np.uint32), dtype=np.uint32
        )
        return out
    blocks = data.reshape(-1, traits.type_size)
    out_blocks = flat_out.reshape(-1, traits.block_size)
    kernel = _KERNELS[gtype]
    step = max(1, _CHUNK_ELEMENTS // traits.block_size)
    for start in range(0, len(blocks), step):
        kernel(blocks[start : start + step], out_blocks[start : start + step])
    return out


# ------------------------------------------------------------------------------------------
# quantisation (ggml quantize_row_*_ref rounding)


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """C ``roundf``: round to nearest, ties away from zero (numpy's rint ties to even)."""
    t = np.trunc(x)
    frac = np.abs(x - t)
    return np.where(frac >= 0.5, t + np.sign(x), t)


def _inverse(d: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.where(d == 0, F32(0), F32(1) / d).astype(F32)


def _half_bytes(x: np.ndarray) -> np.ndarray:
    return x.astype("<f2").view(np.uint8)


def _signed_absmax(blocks: np.ndarray) -> np.ndarray:
    """Per block the value of largest magnitude (first one on ties), shape (n, 1)."""
    idx = np.abs(blocks).argmax(axis=1)[:, None]
    return np.take_along_axis(blocks, idx, axis=1)


def _pack_nibbles(q: np.ndarray) -> np.ndarray:
    """(n, 32) values 0..15 -> (n, 16) bytes: element j in the low, j+16 in the high nibble."""
    return (q[:, :16] & np.uint8(0x0F)) | (q[:, 16:] << np.uint8(4))


def _truncated_codes(v: np.ndarray, hi: int) -> np.ndarray:
    """``MIN(hi, (int8_t)v)`` for v >= 0 as ggml writes it."""
    return np.minimum(np.trunc(v), F32(hi)).astype(np.uint8)


def _q_q8_0(x: np.ndarray) -> np.ndarray:
    d = np.abs(x).max(axis=1, keepdims=True) / F32(127)
    qs = _round_half_away(x * _inverse(d)).astype(np.int8).view(np.uint8)
    return np.concatenate([_half_bytes(d), qs], axis=1)


def _q_q4_0(x: np.ndarray) -> np.ndarray:
    d = _signed_absmax(x) / F32(-8)
    q = _truncated_codes(x * _inverse(d) + F32(8.5), 15)
    return np.concatenate([_half_bytes(d), _pack_nibbles(q)], axis=1)


def _q_q4_1(x: np.ndarray) -> np.ndarray:
    lo = x.min(axis=1, keepdims=True)
    d = (x.max(axis=1, keepdims=True) - lo) / F32(15)
    q = _truncated_codes((x - lo) * _inverse(d) + F32(0.5), 15)
    return np.concatenate([_half_bytes(d), _half_bytes(lo), _pack_nibbles(q)], axis=1)


def _q5_fields(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    qh = np.packbits(q >> np.uint8(4), axis=1, bitorder="little")
    return qh, _pack_nibbles(q)


def _q_q5_0(x: np.ndarray) -> np.ndarray:
    d = _signed_absmax(x) / F32(-16)
    qh, qs = _q5_fields(_truncated_codes(x * _inverse(d) + F32(16.5), 31))
    return np.concatenate([_half_bytes(d), qh, qs], axis=1)


def _q_q5_1(x: np.ndarray) -> np.ndarray:
    lo = x.min(axis=1, keepdims=True)
    d = (x.max(axis=1, keepdims=True) - lo) / F32(31)
    qh, qs = _q5_fields(_truncated_codes((x - lo) * _inverse(d) + F32(0.5), 31))
    return np.concatenate([_half_bytes(d), _half_bytes(lo), qh, qs], axis=1)


def _q_bf16(x: np.ndarray) -> np.ndarray:
    n = x.view(np.uint32).astype(np.uint64)
    nan = (n & 0x7FFFFFFF) > 0x7F800000
    rounded = (n + (0x7FFF + ((n >> 16) & 1))) >> 16  # round to nearest even
    quiet = ((n & 0xFFFF0000) >> 16) | 64  # force NaN to quiet
    return np.where(nan, quiet, rounded).astype("<u2").view(np.uint8)


_QUANTIZERS: dict[GGMLType, Callable[[np.ndarray], np.ndarray]] = {
    GGMLType.Q8_0: _q_q8_0,
    GGMLType.Q4_0: _q_q4_0,
    GGMLType.Q4_1: _q_q4_1,
    GGMLType.Q5_0: _q_q5_0,
    GGMLType.Q5_1: _q_q5_1,
    GGMLType.BF16: _q_bf16,
}

#: Types :func:`quantize` supports (plain element types are a cast).
QUANTIZABLE_TYPES: frozenset[GGMLType] = frozenset([*_QUANTIZERS, *ELEMENT_DTYPES])


def quantize(data: npt.ArrayLike, ggml_type: int | str | GGMLType) -> npt.NDArray[np.uint8]:
    """Encode a float array as ggml ``ggml_type`` blocks with ggml's reference rounding.

    Returns a new uint8 array of shape ``(*data.shape[:-1], row_bytes)`` — the same layout as
    ``GGUFFile.raw`` — ready for :func:`lexguide.gguf.write_gguf`. Does not mutate ``data``.
    Raises :class:`GGUFError` for an unsupported type or a row length that is not a multiple of
    the block size.
    """
    gtype = _as_type(ggml_type)
    if gtype in ELEMENT_DTYPES:
        arr = np.asarray(data)
        return arr.reshape(arr.shape or (1,)).astype(ELEMENT_DTYPES[gtype]).view(np.uint8)
    quantizer = _QUANTIZERS.get(gtype)
    if quantizer is None:
        supported = ", ".join(sorted(t.name for t in QUANTIZABLE_TYPES))
        raise GGUFError(f"quantization to {gtype.name} is not supported (supported: {supported})")
    traits = type_traits(gtype)
    x = np.ascontiguousarray(data, dtype=F32)
    shape = x.shape if x.ndim else (1,)
    if shape[-1] % traits.block_size:
        raise GGUFError(
            f"{gtype.name}: row length {shape[-1]} is not a multiple of the block size "
            f"{traits.block_size}"
        )
    blocks = x.reshape(-1, traits.block_size)
    step = max(1, _CHUNK_ELEMENTS // traits.block_size)
    parts = [quantizer(blocks[s : s + step]) for s in range(0, len(blocks), step)]
    encoded = np.concatenate(parts, axis=0) if parts else np.empty((0, traits.type_size), np.uint8)
    return encoded.reshape(*shape[:-1], traits.row_bytes(shape[-1]))
