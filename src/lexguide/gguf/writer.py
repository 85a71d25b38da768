"""GGUF v3 writer: metadata, tensor infos, aligned and zero-padded tensor data (spec §1).

The output is what ggml's strict reader expects: tensors laid out in info order, each at an
offset that is a multiple of the alignment, padding bytes zero, ``data_start`` aligned.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lexguide.errors import GGUFError
from lexguide.gguf.constants import (
    ELEMENT_DTYPES,
    GGUF_DEFAULT_ALIGNMENT,
    GGUF_MAGIC,
    MAX_DIMS,
    MAX_TENSOR_NAME_BYTES,
    SCALAR_VALUE_DTYPES,
    GGMLType,
    GGUFValueType,
    TypeTraits,
    type_traits,
)
from lexguide.gguf.quants import quantize

__all__ = ["TensorSource", "write_gguf"]

V = GGUFValueType
#: A tensor to write: a typed array (F32/F16/F64/I8/I16/I32/I64 from its dtype), ``(array,
#: type)`` (numeric data is converted/quantised to ``type``; a uint8 array is always taken as
#: already-encoded rows shaped like ``GGUFFile.raw``), or ``(encoded_uint8, type, shape)``.
TensorSource = np.ndarray | tuple

_DTYPE_TO_GGML = {dt.newbyteorder("="): t for t, dt in ELEMENT_DTYPES.items()}
_DTYPE_TO_VALUE = {dt.newbyteorder("="): t for t, dt in SCALAR_VALUE_DTYPES.items()}
_DTYPE_TO_VALUE[np.dtype(bool)] = V.BOOL
_DTYPE_TO_VALUE[np.dtype(np.uint8)] = V.UINT8
_INT_RANGES = [  # preference order for Python ints without an explicit type
    (V.UINT32, 0, 1 << 32),
    (V.INT32, -(1 << 31), 1 << 31),
    (V.UINT64, 0, 1 << 64),
    (V.INT64, -(1 << 63), 1 << 63),
]


def _pack_string(text: str | bytes) -> bytes:
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogateescape")
    return struct.pack("<Q", len(data)) + data


def _int_type(values: Iterable[int], key: str) -> GGUFValueType:
    values = list(values)
    lo, hi = (min(values), max(values)) if values else (0, 0)
    for vtype, a, b in _INT_RANGES:
        if a <= lo and hi < b:
            return vtype
    raise GGUFError(f"metadata {key!r}: integer out of the 64-bit range")


def _infer_type(value: Any, key: str) -> tuple[GGUFValueType, ...]:
    """Type signature for a value written without an explicit type."""
    if isinstance(value, (bool, np.bool_)):
        return (V.BOOL,)
    if isinstance(value, np.generic):
        vtype = _DTYPE_TO_VALUE.get(value.dtype)
        if vtype is None:
            raise GGUFError(f"metadata {key!r}: numpy type {value.dtype} has no GGUF equivalent")
        return (vtype,)
    if isinstance(value, int):
        return (_int_type([value], key),)
    if isinstance(value, float):
        return (V.FLOAT32,)
    if isinstance(value, (str, bytes)):
        return (V.STRING,)
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise GGUFError(f"metadata {key!r}: arrays must be 1-D, got shape {value.shape}")
        vtype = _DTYPE_TO_VALUE.get(value.dtype.newbyteorder("="))
        if vtype is None:
            raise GGUFError(f"metadata {key!r}: numpy dtype {value.dtype} has no GGUF equivalent")
        return (V.ARRAY, vtype)
    if isinstance(value, (list, tuple)):
        if not value:
            return (V.ARRAY, V.UINT8)
        if all(isinstance(v, (str, bytes)) for v in value):
            return (V.ARRAY, V.STRING)
        if all(isinstance(v, (bool, np.bool_)) for v in value):
            return (V.ARRAY, V.BOOL)
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return (V.ARRAY, _int_type(value, key))
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            return (V.ARRAY, V.FLOAT32)
        if all(isinstance(v, (list, tuple, np.ndarray)) for v in value):
            return (V.ARRAY, *_infer_type(value[0], key))
    raise GGUFError(f"metadata {key!r}: cannot store a value of type {type(value).__name__}")


def _checked_cast(arr: np.ndarray, vtype: GGUFValueType) -> np.ndarray:
    """``arr`` as the little-endian dtype of ``vtype``; integers must fit exactly."""
    dtype = SCALAR_VALUE_DTYPES[vtype]
    out = arr.astype(dtype, casting="unsafe")
    if dtype.kind in "iu" and vtype != V.BOOL and arr.size and not np.array_equal(out, arr):
        raise ValueError(f"value out of range for {vtype.name}")
    return out


def _pack_value(value: Any, sig: Sequence[GGUFValueType], key: str) -> bytes:
    """Encoding of ``value`` (without its type tag) under type signature ``sig``."""
    vtype = sig[0]
    try:
        if vtype == V.STRING:
            return _pack_string(value)
        if vtype != V.ARRAY:
            return _checked_cast(np.array(value), vtype).tobytes()
        etype = sig[1] if len(sig) > 1 else _infer_type(value, key)[1]
        head = struct.pack("<IQ", etype, len(value))
        if etype == V.STRING:
            return head + b"".join(_pack_string(v) for v in value)
        if etype == V.ARRAY:
            inner = list(sig[1:])
            parts = []
            for item in value:
                item_sig = inner if len(inner) > 1 else [V.ARRAY, *_infer_type(item, key)[1:]]
                parts.append(_pack_value(item, item_sig, key))
            return head + b"".join(parts)
        arr = np.asarray(value)
        if arr.ndim != 1 and arr.size:
            raise GGUFError(f"metadata {key!r}: array of {etype.name} must be 1-D")
        return head + _checked_cast(arr, etype).tobytes()
    except (TypeError, ValueError, OverflowError, UnicodeError, AttributeError) as e:
        raise GGUFError(f"metadata {key!r}: cannot encode as {vtype.name}: {e}") from None


def _normalise_sig(sig: GGUFValueType | Sequence[GGUFValueType] | int) -> tuple[GGUFValueType, ...]:
    if isinstance(sig, (int, GGUFValueType)):
        return (GGUFValueType(sig),)
    return tuple(GGUFValueType(s) for s in sig)


def _encoded_tensor(name: str, source: TensorSource) -> tuple[np.ndarray, TypeTraits, tuple]:
    """(encoded bytes, traits, numpy shape) of one tensor source."""
    if isinstance(source, np.ndarray):
        gtype = _DTYPE_TO_GGML.get(source.dtype.newbyteorder("="))
        if gtype is None:
            raise GGUFError(
                f"tensor {name!r}: dtype {source.dtype} has no ggml type; pass (array, type)"
            )
        source = (source, gtype)
    if not isinstance(source, tuple) or len(source) not in (2, 3):
        raise GGUFError(f"tensor {name!r}: expected an array, (array, type) or (raw, type, shape)")
    data = np.asarray(source[0])
    try:
        gtype = GGMLType[source[1].upper()] if isinstance(source[1], str) else GGMLType(source[1])
    except (KeyError, ValueError):
        raise GGUFError(f"tensor {name!r}: unknown ggml type {source[1]!r}") from None
    traits = type_traits(gtype)
    if len(source) == 3:
        shape = tuple(int(s) for s in source[2])
    elif data.dtype == np.uint8:
        if data.ndim == 0 or data.shape[-1] % traits.type_size:
            raise GGUFError(f"tensor {name!r}: raw rows are not whole {gtype.name} blocks")
        shape = (*data.shape[:-1], data.shape[-1] // traits.type_size * traits.block_size)
    else:
        shape = data.shape or (1,)
        data = quantize(data.reshape(shape), gtype)
    shape = shape or (1,)
    expected = traits.row_bytes(shape[-1]) * math.prod(shape[:-1])
    if shape[-1] % traits.block_size or data.nbytes != expected:
        raise GGUFError(
            f"tensor {name!r}: {data.nbytes} encoded bytes do not fit {gtype.name} shape {shape}"
        )
    return np.ascontiguousarray(data).reshape(-1).view(np.uint8), traits, shape


def write_gguf(
    path: str | os.PathLike[str],
    metadata: Mapping[str, Any],
    tensors: Mapping[str, TensorSource] | Iterable[tuple[str, TensorSource]] = (),
    *,
    metadata_types: Mapping[str, GGUFValueType | Sequence[GGUFValueType]] | None = None,
) -> Path:
    """Write a GGUF v3 file and return its path.

    Parameters
    ----------
    metadata
        Key → value. Python ints become UINT32 (or the smallest of INT32/UINT64/INT64 that
        holds them), floats FLOAT32, numpy scalars and arrays keep their dtype, lists of str
        become string arrays, lists of lists nested arrays.
    tensors
        Name → :data:`TensorSource`, in file order.
    metadata_types
        Optional explicit type signatures (e.g. ``GGUFFile.metadata_types``) so a file read
        with :func:`open_gguf` is rewritten with its original value types.

    The alignment is ``metadata["general.alignment"]`` when present, else 32. The file is
    written to a temporary name and renamed, so a failure never leaves a partial file.
    Raises :class:`GGUFError` for values or tensors that cannot be encoded.
    """
    types = dict(metadata_types or {})
    header = bytearray(GGUF_MAGIC + struct.pack("<I", 3))
    items = list(tensors.items()) if isinstance(tensors, Mapping) else list(tensors)
    header += struct.pack("<QQ", len(items), len(metadata))
    alignment = GGUF_DEFAULT_ALIGNMENT
    for key, value in metadata.items():
        if not isinstance(key, str) or not key:
            raise GGUFError(f"metadata keys must be non-empty strings, got {key!r}")
        sig = _normalise_sig(types[key]) if key in types else _infer_type(value, key)
        if key == "general.alignment":
            if sig != (V.UINT32,) or not isinstance(value, (int, np.integer)) or value <= 0 or (
                value & (value - 1)
            ):
                raise GGUFError("general.alignment must be a UINT32 power of two")
            alignment = int(value)
        header += _pack_string(key) + struct.pack("<I", sig[0]) + _pack_value(value, sig, key)
    blobs: list[np.ndarray] = []
    offset = 0
    seen: set[str] = set()
    for name, source in items:
        name_bytes = name.encode("utf-8")
        if not name_bytes or len(name_bytes) > MAX_TENSOR_NAME_BYTES or name in seen:
            raise GGUFError(
                f"tensor name {name!r} must be unique, non-empty and at most "
                f"{MAX_TENSOR_NAME_BYTES} bytes"
            )
        seen.add(name)
        data, traits, shape = _encoded_tensor(name, source)
        if len(shape) > MAX_DIMS:
            raise GGUFError(f"tensor {name!r} has {len(shape)} dimensions (at most {MAX_DIMS})")
        ne = tuple(reversed(shape))
        header += _pack_string(name_bytes) + struct.pack(f"<I{len(ne)}Q", len(ne), *ne)
        header += struct.pack("<IQ", traits.ggml_type, offset)
        blobs.append(data)
        offset += data.nbytes + (-data.nbytes) % alignment
    if items:
        header += bytes((-len(header)) % alignment)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(header)
            for data in blobs:
                fh.write(data.data)
                fh.write(bytes((-data.nbytes) % alignment))
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise GGUFError(f"cannot write {path}: {e.strerror or e}") from e
    return path
