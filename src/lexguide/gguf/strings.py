"""Vectorised decoding of GGUF string arrays (``tokenizer.ggml.tokens`` has 262k entries).

A string array is ``count`` records ``[u64 length][bytes]`` back to back. Finding the record
starts is inherently sequential, so instead of a per-element loop we find them with numpy:

1. every record start ``p`` of a valid file has bytes ``p+4..p+7`` equal to zero (strings are
   capped at 1 GiB < 2^32), so those positions are *candidates*;
2. fast path: keep candidates whose run of zeros ends at ``p+7`` (one per record in practice)
   and check in one vectorised comparison that each one's successor ``p + 8 + len`` is the next
   candidate;
3. fallback (a string that is empty or starts with NUL, or stray zeros inside a string): pointer
   doubling over all candidates finds the chain from the first record in O(m log n).

Decoding then concatenates all string bytes with a ``0xFF`` separator (never valid UTF-8), does
one ``bytes.decode`` and one ``str.split``. Values that are not valid UTF-8 are decoded with
``surrogateescape`` so the original bytes stay recoverable (ggml stores them as opaque bytes).
"""

from __future__ import annotations

import struct

import numpy as np

from lexguide.errors import GGUFError
from lexguide.gguf.constants import MAX_STRING_BYTES

__all__ = ["decode_value_bytes", "read_string_array"]

_SEPARATOR = "\udcff"  # what byte 0xFF becomes under surrogateescape
# Bytes scanned per step: bounds the memory of the candidate arrays on hostile inputs.
_MAX_WINDOW = 1 << 21


def decode_value_bytes(data: bytes) -> str:
    """Decode a metadata string value: UTF-8, invalid bytes kept as surrogate escapes."""
    return data.decode("utf-8", "surrogateescape")


def _u32_at(seg: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Little-endian u32 at each position ``idx`` of ``seg`` as int64 (vectorised gather)."""
    v = seg[idx].astype(np.int64)
    v |= seg[idx + 1].astype(np.int64) << 8
    v |= seg[idx + 2].astype(np.int64) << 16
    v |= seg[idx + 3].astype(np.int64) << 24
    return v


def _chain_fast(seg: np.ndarray, z: np.ndarray, c4: np.ndarray, limit: int):
    """Chain from position 0 using only "zero run ends at p+7" candidates, or None if unsure."""
    m = len(c4)
    strict = c4.copy()
    strict[: m - 1] &= ~z[8:]
    strict[0] = True
    cand = np.flatnonzero(strict)
    lengths = _u32_at(seg, cand)
    nxt = cand + 8 + lengths
    linked = nxt[:-1] == cand[1:]
    k = len(cand) if linked.all() else int(np.argmin(linked)) + 1
    if k >= limit:
        return cand[:limit], lengths[:limit]
    if nxt[k - 1] > m - 1:  # successor's length field is not inside this window
        return cand[:k], lengths[:k]
    return None


def _chain_doubling(seg: np.ndarray, c4: np.ndarray, limit: int):
    """Chain from position 0 over all candidates by pointer doubling."""
    cand = np.flatnonzero(c4)
    n_cand = len(cand)
    lengths = _u32_at(seg, cand)
    nxt = cand + 8 + lengths
    succ = np.searchsorted(cand, nxt)
    hit = succ < n_cand
    hit[hit] = cand[succ[hit]] == nxt[hit]
    jump = np.append(np.where(hit, succ, n_cand), n_cand)  # n_cand is the sentinel
    order = np.zeros(1, dtype=np.int64)
    while len(order) < limit:
        ext = jump[order]
        order = np.concatenate([order, ext])
        if ext[-1] == n_cand:
            break
        jump = jump[jump]
    order = order[:limit]
    ends = np.flatnonzero(order == n_cand)
    if len(ends):
        order = order[: ends[0]]
    return cand[order], lengths[order]


def _chain(seg: np.ndarray, first_length: int, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """Record starts (relative to ``seg``) and lengths of the chain beginning at 0.

    Stops after ``limit`` records or when the next record's length field is not a candidate
    inside ``seg`` (the caller continues from there and validates it).
    """
    if limit == 1 or len(seg) < 16:
        return np.zeros(1, np.int64), np.array([first_length], np.int64)
    z = seg == 0
    m = len(seg) - 7  # positions whose 8-byte length field lies inside seg
    c4 = z[4 : 4 + m] & z[5 : 5 + m] & z[6 : 6 + m] & z[7 : 7 + m]
    fast = _chain_fast(seg, z, c4, limit)
    return fast if fast is not None else _chain_doubling(seg, c4, limit)


def _record_starts(
    buf: np.ndarray, pos: int, count: int, what: str
) -> tuple[np.ndarray, np.ndarray, int]:
    """Absolute starts and lengths of ``count`` string records at ``pos``, and the end offset."""
    size = len(buf)
    starts: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    remaining = count
    while remaining:
        index = count - remaining
        if pos + 8 > size:
            raise GGUFError(f"truncated: {what}[{index}] length needs 8 bytes", pos)
        (first,) = struct.unpack_from("<Q", buf.data, pos)
        if first > MAX_STRING_BYTES:
            raise GGUFError(f"{what}[{index}] has absurd length {first} (limit 1 GiB)", pos)
        if pos + 8 + first > size:
            raise GGUFError(
                f"truncated: {what}[{index}] needs {first} bytes after its length", pos
            )
        window = min(size - pos, 24 * remaining + 64, _MAX_WINDOW)
        rel, lens = _chain(buf[pos : pos + window], first, remaining)
        too_long = np.flatnonzero(lens > MAX_STRING_BYTES)
        if len(too_long):
            j = int(too_long[0])
            raise GGUFError(
                f"{what}[{index + j}] has absurd length {int(lens[j])} (limit 1 GiB)",
                pos + int(rel[j]),
            )
        starts.append(rel + pos)
        lengths.append(lens)
        remaining -= len(rel)
        last_end = pos + int(rel[-1]) + 8 + int(lens[-1])
        if last_end > size:
            raise GGUFError(
                f"truncated: {what}[{count - remaining - 1}] runs past the end of the file",
                pos + int(rel[-1]),
            )
        pos = last_end
    return np.concatenate(starts), np.concatenate(lengths), pos


def read_string_array(buf: np.ndarray, pos: int, count: int, what: str) -> tuple[list[str], int]:
    """Decode ``count`` GGUF strings stored back to back at ``pos`` of ``buf`` (uint8, whole file).

    Returns the strings and the offset just after the last one. Costs a few vectorised passes
    over the array's bytes plus one decode and one split; no per-element parsing. Raises
    :class:`GGUFError` (with the offending record's byte offset) on truncation or a length over
    the 1 GiB cap.
    """
    if count == 0:
        return [], pos
    starts, lengths, end = _record_starts(buf, pos, count, what)
    region = buf[pos:end]
    # keep[i] is False inside a length field: +1 where one starts, -1 where it ends, cumsum
    edges = np.zeros(len(region) + 1, dtype=np.int8)
    edges[starts - pos] = 1
    edges[starts - pos + 8] -= 1
    keep = np.cumsum(edges[:-1], dtype=np.int8) == 0
    separators = starts[1:] - pos + 7  # last byte of each later length field
    keep[separators] = True
    data = region.copy()
    data[separators] = 0xFF
    text = data[keep].tobytes().decode("utf-8", "surrogateescape")
    parts = text.split(_SEPARATOR)
    if len(parts) != count:  # some value contains byte 0xFF itself: decode one by one
        parts = [
            decode_value_bytes(bytes(buf[s + 8 : s + 8 + n]))
            for s, n in zip(starts.tolist(), lengths.tolist())
        ]
    return parts, end
