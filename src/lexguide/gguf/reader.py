"""GGUF v2/v3 reader: header, metadata and tensor infos parsed eagerly, tensor data memory-mapped.

Layout and validation rules: spec ``gguf.md`` §1 (ggml ``src/gguf.cpp``). Opening a file reads
only the header region; tensor bytes are paged in by the OS when a tensor is used. Every
malformed input raises :class:`~lexguide.errors.GGUFError` carrying the byte offset of the
problem; counts and lengths are checked against the file size before anything is allocated.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from lexguide.errors import GGUFError
from lexguide.gguf.constants import (
    GGUF_DEFAULT_ALIGNMENT,
    GGUF_MAGIC,
    GGUF_SUPPORTED_VERSIONS,
    MAX_ARRAY_ELEMENTS,
    MAX_DIMS,
    MAX_STRING_BYTES,
    MAX_TENSOR_NAME_BYTES,
    SCALAR_VALUE_DTYPES,
    GGMLType,
    GGUFValueType,
    TypeTraits,
    type_traits,
)
from lexguide.gguf.quants import dequantize as _dequantize
from lexguide.gguf.strings import decode_value_bytes, read_string_array

__all__ = ["GGUFFile", "TensorInfo", "open_gguf"]

_FileT = TypeVar("_FileT", bound="GGUFFile")

_MAX_NESTING = 8
_INT64_MAX = (1 << 63) - 1
_SCALAR_FORMATS = dict(zip(SCALAR_VALUE_DTYPES, ["<B", "<b", "<H", "<h", "<I", "<i", "<f", "<B", "<Q", "<q", "<d"]))
# Smallest encodings, used to reject absurd counts before allocating anything.
_MIN_KV_BYTES = 8 + 1 + 4 + 1
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor of a GGUF file.

    ``shape`` is the numpy (row-major) shape, i.e. ggml's ``ne`` reversed; ``offset`` is the
    absolute byte offset of the tensor's data in the file; ``nbytes`` its encoded size.
    """

    name: str
    shape: tuple[int, ...]
    ggml_type: GGMLType
    offset: int
    nbytes: int

    @property
    def ne(self) -> tuple[int, ...]:
        """ggml dimension order (``ne[0]`` is the contiguous one)."""
        return tuple(reversed(self.shape))

    @property
    def n_elements(self) -> int:
        """Number of elements (product of the shape)."""
        return math.prod(self.shape)

    @property
    def traits(self) -> TypeTraits:
        """Block geometry of ``ggml_type``."""
        return type_traits(self.ggml_type)

    @property
    def row_bytes(self) -> int:
        """Encoded bytes of one row (the innermost dimension)."""
        return self.traits.row_bytes(self.shape[-1] if self.shape else 1)


class _Cursor:
    """Bounds-checked little-endian reads from the file buffer; errors carry the offset."""

    __slots__ = ("buf", "mv", "pos", "size")

    def __init__(self, buf: np.ndarray) -> None:
        self.buf = buf
        self.mv = buf.data
        self.pos = 0
        self.size = len(buf)

    def need(self, n: int, what: str) -> int:
        pos = self.pos
        if n > self.size - pos:
            raise GGUFError(
                f"truncated: {what} needs {n} bytes but the file ends at byte {self.size}", pos
            )
        self.pos = pos + n
        return pos

    def scalar(self, fmt: str, size: int, what: str) -> Any:
        return struct.unpack_from(fmt, self.mv, self.need(size, what))[0]

    def u32(self, what: str) -> int:
        return self.scalar("<I", 4, what)

    def u64(self, what: str) -> int:
        return self.scalar("<Q", 8, what)

    def raw_string(self, what: str) -> tuple[bytes, int]:
        start = self.pos
        n = self.u64(f"length of {what}")
        if n > MAX_STRING_BYTES:
            raise GGUFError(f"{what} has absurd length {n} (limit 1 GiB)", start)
        pos = self.need(n, what)
        return self.buf[pos : pos + n].tobytes(), start

    def name(self, what: str) -> tuple[str, int]:
        """A key or tensor name: must be non-empty strict UTF-8."""
        data, start = self.raw_string(what)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GGUFError(f"{what} is not valid UTF-8 ({e.reason})", start + 8 + e.start) from None
        if not text:
            raise GGUFError(f"{what} is empty", start)
        return text, start

    def array_count(self, elem_size: int, what: str) -> int:
        start = self.pos
        n = self.u64(f"element count of {what}")
        if n > MAX_ARRAY_ELEMENTS:
            raise GGUFError(f"{what} has absurd element count {n} (limit 2^30)", start)
        if n * elem_size > self.size - self.pos:
            raise GGUFError(
                f"truncated: {what} declares {n} elements ({n * elem_size}+ bytes) but only "
                f"{self.size - self.pos} bytes remain",
                start,
            )
        return n


def _value_type(cur: _Cursor, what: str) -> GGUFValueType:
    start = cur.pos
    tag = cur.u32(f"value type of {what}")
    try:
        return GGUFValueType(tag)
    except ValueError:
        raise GGUFError(f"{what} has unknown value type {tag}", start) from None


def _read_value(cur: _Cursor, vtype: GGUFValueType, what: str, depth: int) -> tuple[Any, tuple]:
    """Value of type ``vtype`` at the cursor and its type signature."""
    if vtype == GGUFValueType.STRING:
        data, _ = cur.raw_string(what)
        return decode_value_bytes(data), (vtype,)
    if vtype != GGUFValueType.ARRAY:
        value = cur.scalar(_SCALAR_FORMATS[vtype], SCALAR_VALUE_DTYPES[vtype].itemsize, what)
        return (bool(value) if vtype == GGUFValueType.BOOL else value), (vtype,)
    if depth >= _MAX_NESTING:
        raise GGUFError(f"{what}: arrays nested deeper than {_MAX_NESTING}", cur.pos)
    etype = _value_type(cur, f"elements of {what}")
    if etype == GGUFValueType.STRING:
        n = cur.array_count(8, what)
        values, cur.pos = read_string_array(cur.buf, cur.pos, n, what)
        return values, (vtype, etype)
    if etype == GGUFValueType.ARRAY:
        n = cur.array_count(12, what)
        items = [_read_value(cur, etype, f"{what}[{i}]", depth + 1) for i in range(n)]
        inner = items[0][1] if items else (etype,)
        return [v for v, _ in items], (vtype, *inner)
    dtype = SCALAR_VALUE_DTYPES[etype]
    n = cur.array_count(dtype.itemsize, what)
    pos = cur.need(n * dtype.itemsize, what)
    arr = cur.buf[pos : pos + n * dtype.itemsize].view(dtype).astype(dtype.newbyteorder("="))
    if etype == GGUFValueType.BOOL:
        arr = arr.astype(bool)
    return arr, (vtype, etype)


class GGUFFile:
    """An open GGUF file (v2 or v3, little-endian).

    Attributes are filled at open time: ``version``, ``metadata`` (``dict`` of Python values;
    numeric arrays as numpy arrays, string arrays as ``list[str]``), ``metadata_types`` (value
    type signature per key, e.g. ``(ARRAY, STRING)``), ``tensors`` (ordered ``TensorInfo``
    list), ``alignment`` and ``data_offset``. Tensor data stays memory-mapped until used.
    Use as a context manager or call :meth:`close`.
    """

    def __init__(self, source: str | os.PathLike[str] | bytes | bytearray | memoryview) -> None:
        self.path: Path | None = None
        self._mmap: mmap.mmap | None = None
        if isinstance(source, (bytes, bytearray, memoryview)):
            buf = np.frombuffer(source, dtype=np.uint8)
        else:
            self.path = Path(source)
            buf = self._map(self.path)
        self._buf: np.ndarray | None = buf
        self.file_size = len(buf)
        try:
            self._parse(_Cursor(buf))
        except BaseException:
            self.close()
            raise

    def _map(self, path: Path) -> np.ndarray:
        try:
            with open(path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size == 0:
                    raise GGUFError(f"{path} is empty, not a GGUF file", 0)
                self._mmap = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            raise GGUFError(f"cannot open {path}: {e.strerror or e}") from e
        return np.frombuffer(self._mmap, dtype=np.uint8)

    # -- parsing ------------------------------------------------------------------------------

    def _parse(self, cur: _Cursor) -> None:
        magic_pos = cur.need(4, "magic")
        magic = cur.buf[magic_pos : magic_pos + 4].tobytes()
        if magic != GGUF_MAGIC:
            raise GGUFError(f"bad magic {magic!r}, expected {GGUF_MAGIC!r}: not a GGUF file", 0)
        version = cur.u32("version")
        if version not in GGUF_SUPPORTED_VERSIONS:
            if version & 0xFFFF == 0 and version:
                why = "byte-swapped (big-endian) GGUF files are not supported"
            elif version == 1:
                why = "GGUF version 1 is obsolete and not supported"
            else:
                why = f"unknown GGUF version {version}"
            raise GGUFError(f"{why} (supported: 2, 3)", 4)
        self.version: int = version
        n_tensors = cur.u64("tensor count")
        n_kv = cur.u64("metadata count")
        room = cur.size - cur.pos
        if n_tensors > room // _MIN_TENSOR_INFO_BYTES:
            raise GGUFError(
                f"tensor count {n_tensors} cannot fit: needs at least "
                f"{n_tensors * _MIN_TENSOR_INFO_BYTES} bytes, only {room} remain",
                8,
            )
        if n_kv > room // _MIN_KV_BYTES:
            raise GGUFError(
                f"metadata count {n_kv} cannot fit: needs at least {n_kv * _MIN_KV_BYTES} "
                f"bytes, only {room} remain",
                16,
            )
        self._parse_metadata(cur, n_kv)
        self._parse_tensor_infos(cur, n_tensors)

    def _parse_metadata(self, cur: _Cursor, n_kv: int) -> None:
        metadata: dict[str, Any] = {}
        types: dict[str, tuple[GGUFValueType, ...]] = {}
        alignment_at = -1
        for i in range(n_kv):
            key, key_pos = cur.name(f"key of metadata entry {i}")
            if key in metadata:
                raise GGUFError(f"duplicate metadata key {key!r}", key_pos)
            vtype = _value_type(cur, f"metadata {key!r}")
            value_pos = cur.pos
            metadata[key], types[key] = _read_value(cur, vtype, f"metadata {key!r}", 0)
            if key == "general.alignment":
                alignment_at = value_pos
        self.metadata: dict[str, Any] = metadata
        self.metadata_types: dict[str, tuple[GGUFValueType, ...]] = types
        self.alignment: int = GGUF_DEFAULT_ALIGNMENT
        if alignment_at >= 0:
            align = metadata["general.alignment"]
            if types["general.alignment"] != (GGUFValueType.UINT32,):
                raise GGUFError("general.alignment must be a UINT32", alignment_at)
            if align == 0 or align & (align - 1):
                raise GGUFError(f"general.alignment {align} is not a power of two", alignment_at)
            self.alignment = align

    def _parse_tensor_infos(self, cur: _Cursor, n_tensors: int) -> None:
        raw_infos = []
        seen: set[str] = set()
        for i in range(n_tensors):
            name, name_pos = cur.name(f"name of tensor {i}")
            what = f"tensor {name!r}"
            if len(name.encode("utf-8")) > MAX_TENSOR_NAME_BYTES:
                raise GGUFError(f"{what}: name longer than {MAX_TENSOR_NAME_BYTES} bytes", name_pos)
            if name in seen:
                raise GGUFError(f"duplicate tensor name {name!r}", name_pos)
            seen.add(name)
            dims_pos = cur.pos
            n_dims = cur.u32(f"{what} dimension count")
            if n_dims > MAX_DIMS:
                raise GGUFError(f"{what} has {n_dims} dimensions (at most {MAX_DIMS})", dims_pos)
            ne_pos = cur.need(8 * n_dims, f"{what} dimensions")
            ne = struct.unpack_from(f"<{n_dims}q", cur.mv, ne_pos)
            type_pos = cur.pos
            type_id = cur.u32(f"{what} type")
            offset_pos = cur.pos
            rel_offset = cur.u64(f"{what} data offset")
            traits = self._check_tensor(what, ne, ne_pos, type_id, type_pos)
            raw_infos.append((name, ne, traits, rel_offset, offset_pos))
        self.data_offset: int = cur.pos + (-cur.pos) % self.alignment
        tensors: list[TensorInfo] = []
        for name, ne, traits, rel_offset, offset_pos in raw_infos:
            what = f"tensor {name!r}"
            if rel_offset % self.alignment:
                raise GGUFError(
                    f"{what} data offset {rel_offset} is not a multiple of the alignment "
                    f"{self.alignment}",
                    offset_pos,
                )
            n_rows = math.prod(ne[1:])
            nbytes = traits.row_bytes(ne[0] if ne else 1) * n_rows
            start = self.data_offset + rel_offset
            if start + nbytes > self.file_size:
                raise GGUFError(
                    f"{what} data [{start}, {start + nbytes}) lies outside the file "
                    f"({self.file_size} bytes)",
                    offset_pos,
                )
            shape = tuple(reversed(ne))
            tensors.append(TensorInfo(name, shape, traits.ggml_type, start, nbytes))
        self.tensors: list[TensorInfo] = tensors
        self._by_name = {t.name: t for t in tensors}

    @staticmethod
    def _check_tensor(
        what: str, ne: tuple[int, ...], ne_pos: int, type_id: int, type_pos: int
    ) -> TypeTraits:
        try:
            traits = type_traits(type_id)
        except KeyError as e:
            raise GGUFError(f"{what}: {e.args[0]}", type_pos) from None
        n = 1
        for k, dim in enumerate(ne):
            if dim < 0:
                raise GGUFError(f"{what}: dimension {k} is negative ({dim})", ne_pos + 8 * k)
            n *= dim
            if n > _INT64_MAX:
                raise GGUFError(f"{what}: element count overflows int64", ne_pos + 8 * k)
        if (ne[0] if ne else 1) % traits.block_size:
            raise GGUFError(
                f"{what}: row length {ne[0] if ne else 1} is not a multiple of the "
                f"{traits.ggml_type.name} block size {traits.block_size}",
                ne_pos,
            )
        return traits

    # -- access -------------------------------------------------------------------------------

    def tensor(self, name: str) -> TensorInfo:
        """The :class:`TensorInfo` called ``name``; raises ``KeyError`` naming it if absent."""
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no tensor named {name!r} in this GGUF file") from None

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[TensorInfo]:
        return iter(self.tensors)

    def raw(self, name: str) -> npt.NDArray[np.uint8]:
        """Read-only zero-copy view of a tensor's encoded bytes, shape ``(*shape[:-1], row_bytes)``.

        Slicing rows of this view and passing them to :func:`lexguide.gguf.dequantize`
        dequantises just those rows. The view keeps the mapping alive after :meth:`close`.
        """
        if self._buf is None:
            raise GGUFError("the GGUF file is closed")
        info = self.tensor(name)
        view = self._buf[info.offset : info.offset + info.nbytes]
        view = view.reshape(*info.shape[:-1], info.row_bytes) if info.shape else view
        view.flags.writeable = False
        return view

    def dequantize(
        self, name: str, *, out: npt.NDArray[np.float32] | None = None
    ) -> npt.NDArray[np.float32]:
        """Tensor ``name`` decoded to float32 in numpy shape (a new array unless ``out``)."""
        info = self.tensor(name)
        return _dequantize(self.raw(name), info.ggml_type, info.shape, out=out)

    @property
    def architecture(self) -> str | None:
        """``general.architecture`` or None."""
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else None

    def close(self) -> None:
        """Release the mapping (views handed out earlier keep it alive until they die)."""
        self._buf = None
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:
                pass  # raw views are still alive; the mapping closes when they are freed
            self._mmap = None

    def __enter__(self: _FileT) -> _FileT:  # noqa: PYI019 (typing.Self needs 3.11)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = str(self.path) if self.path else "<memory>"
        return (
            f"GGUFFile({where!r}, version={self.version}, {len(self.metadata)} metadata keys, "
            f"{len(self.tensors)} tensors)"
        )


def open_gguf(source: str | os.PathLike[str] | bytes | bytearray | memoryview) -> GGUFFile:
    """Open a GGUF file (path, or the file's bytes) and parse everything but the tensor data.

    Costs one pass over the header region (vectorised for big string arrays); tensor data is
    memory-mapped, not read. Raises :class:`GGUFError` with the byte offset of any defect.
    """
    return GGUFFile(source)
