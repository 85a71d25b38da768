"""Model weights from a GGUF file, either dequantized once (``eager``) or kept quantized (``lazy``).

``eager`` dequantizes every matrix to float32 at load and fuses the projections that read the
same input (Q|K|V, gate|up) into one matrix, so a decode step is a handful of BLAS matvecs.
``lazy`` keeps the quantized bytes in the file's memory map and dequantizes a bounded chunk of
rows per use into one reused buffer, then tells the kernel it no longer needs those mapped
pages (``MADV_DONTNEED``: they stay in the page cache, the next use maps them again without
I/O), so resident memory stays below the file size, at the price of dequantizing every matrix
on every forward pass (decode is then several times slower).

Shapes: a projection's numpy weight is ``(n_out, n_in)`` (GGUF ``ne`` reversed), so
``y = x @ W.T``; activations are ``(T, n_in)``.
"""

from __future__ import annotations

import enum
import itertools
import mmap
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from lexguide.errors import ModelError
from lexguide.runtime.config import ModelConfig

__all__ = ["Embedding", "LayerWeights", "Projection", "RowSplitter", "WeightMode", "Weights", "load_weights"]

F32 = npt.NDArray[np.float32]

# A single-row (decode) product is split over threads only for matrices at least this big:
# splitting SmolLM2's 1-3 MB layer matvecs measured slower (hand-off costs more than the second
# core's bandwidth gives), splitting the 113-671 MB output projections 5-45% faster.
SPLIT_MIN_DECODE = 4 * 1024 * 1024

# Floats dequantized at once by a lazy projection: bounds its transient memory to ~1 MB per
# thread (one reused buffer); smaller chunks measured no slower (the per-chunk call costs ~30 µs).
_LAZY_CHUNK_FLOATS = 256 * 1024

_PAGE = mmap.PAGESIZE


class WeightMode(enum.Enum):
    """How weights are held in memory."""

    EAGER = "eager"
    LAZY = "lazy"


class _FileMap:
    """A read-only map of the GGUF file whose pages a lazy matrix hands back after each use.

    ``release`` is ``madvise(MADV_DONTNEED)`` on the range (whole pages): the pages leave the
    process's resident set but stay in the kernel's page cache, so the next access is a minor
    fault, not a read. Without ``madvise`` (non-Linux) it does nothing.
    """

    __slots__ = ("_can_release", "buf", "mm")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        with open(path, "rb") as fh:
            self.mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        self.buf = np.frombuffer(self.mm, dtype=np.uint8)  # (file_size,)
        self._can_release = hasattr(self.mm, "madvise") and hasattr(mmap, "MADV_DONTNEED")

    def view(self, offset: int, nbytes: int) -> npt.NDArray[np.uint8]:
        """Zero-copy read-only bytes ``offset .. offset + nbytes`` of the file."""
        v = self.buf[offset:offset + nbytes]
        v.flags.writeable = False
        return v

    def release(self, offset: int, nbytes: int) -> None:
        """Drop the mapped pages covering ``offset .. offset + nbytes`` from the resident set."""
        if self._can_release and nbytes > 0:
            lo = offset - offset % _PAGE
            hi = min(offset + nbytes + (-(offset + nbytes)) % _PAGE, len(self.buf))
            self.mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)


_scratch = threading.local()


def _scratch_buffer(n: int) -> F32:
    """This thread's reused float32 buffer of at least ``n`` elements (first ``n`` returned)."""
    buf = getattr(_scratch, "buf", None)
    if buf is None or buf.size < n:
        buf = np.empty(max(n, _LAZY_CHUNK_FLOATS), dtype=np.float32)
        _scratch.buf = buf
    return buf[:n]


class _QuantMatrix:
    """A quantized ``(n_out, n_in)`` matrix whose rows are dequantized on demand (no copy held).

    With a ``file_map`` (and the tensor's byte ``offset`` in it), the mapped pages of the rows
    used by :meth:`matmul` and :meth:`take` are released right after use.
    """

    __slots__ = ("_dequantize", "file_map", "ggml_type", "n_in", "n_out", "name", "offset",
                 "row_bytes", "rows")

    def __init__(self, name: str, raw: np.ndarray, ggml_type: Any, shape: tuple[int, int],
                 dequantize: Callable[..., np.ndarray], file_map: _FileMap | None = None,
                 offset: int = 0) -> None:
        self.name = name
        self.n_out, self.n_in = shape
        if raw.size % self.n_out:
            raise ModelError(f"tensor {name!r}: {raw.size} bytes do not split into {self.n_out} rows")
        self.row_bytes = raw.size // self.n_out
        self.rows = raw.reshape(self.n_out, self.row_bytes)  # (n_out, row_bytes) zero-copy
        self.ggml_type = ggml_type
        self._dequantize = dequantize
        self.file_map = file_map
        self.offset = offset

    def take(self, ids: np.ndarray) -> F32:
        """Dequantize rows ``ids`` → (len(ids), n_in) float32 (a new array)."""
        rows = self.rows[ids]
        out = self._dequantize(rows, self.ggml_type, (len(ids), self.n_in))
        self._release(0, self.n_out)
        return out

    def matmul(self, x: F32) -> F32:
        """``x @ W.T`` for x (T, n_in), dequantizing at most ``_LAZY_CHUNK_FLOATS`` at a time
        into this thread's scratch buffer; releases the mapped pages of each chunk after use."""
        step = max(1, _LAZY_CHUNK_FLOATS // max(self.n_in, 1))
        out = np.empty((x.shape[0], self.n_out), dtype=np.float32)
        for lo in range(0, self.n_out, step):
            hi = min(lo + step, self.n_out)
            shape = (hi - lo, self.n_in)
            w = self._dequantize(self.rows[lo:hi], self.ggml_type, shape,
                                 out=_scratch_buffer(shape[0] * shape[1]).reshape(shape))
            self._release(lo, hi)
            np.matmul(x, w.T, out=out[:, lo:hi])
        return out

    def _release(self, lo: int, hi: int) -> None:
        if self.file_map is not None:
            self.file_map.release(self.offset + lo * self.row_bytes, (hi - lo) * self.row_bytes)


class RowSplitter:
    """Runs a projection as ``n_threads`` row blocks of the weight on as many threads.

    Decode is memory-bound, and OpenBLAS's own threading busy-waits badly on small shared
    machines (a threaded sgemv measured 2-5x *slower* than one thread here); plain Python
    threads over row blocks, each calling single-threaded BLAS (numpy releases the GIL), use
    the other cores without that pathology. Cost: one task hand-off per block (~20 µs).
    Thread-safe; ``close`` stops the threads.
    """

    def __init__(self, n_threads: int) -> None:
        from concurrent.futures import ThreadPoolExecutor

        if n_threads < 2:
            raise ModelError(f"RowSplitter needs at least 2 threads, got {n_threads}")
        self.n_threads = n_threads
        self._pool = ThreadPoolExecutor(n_threads - 1, thread_name_prefix="lexguide-matmul")

    def matmul(self, w: F32, x: F32) -> F32:
        """``x @ w.T`` for w (n_out, n_in) C-contiguous, x (T, n_in) → (T, n_out)."""
        n_out = w.shape[0]
        step = -(-n_out // self.n_threads)
        if x.shape[0] == 1:
            out = np.empty(n_out, dtype=np.float32)
            v = x[0]
            futures = [self._pool.submit(np.matmul, w[lo:lo + step], v, out=out[lo:lo + step])
                       for lo in range(step, n_out, step)]
            np.matmul(w[:step], v, out=out[:step])
            for f in futures:
                f.result()
            return out[None, :]
        futures = [self._pool.submit(np.matmul, x, w[lo:lo + step].T)
                   for lo in range(step, n_out, step)]
        first = x @ w[:step].T
        return np.concatenate([first, *(f.result() for f in futures)], axis=1)

    def close(self) -> None:
        self._pool.shutdown(wait=False)


class Projection:
    """One or more linear maps of the same input, evaluated together.

    Eager: the parts' weights are concatenated into one float32 matrix (one BLAS call); lazy:
    each part stays a quantized matrix. ``__call__`` returns one array per part.
    """

    __slots__ = ("_bounds", "bias", "dense", "n_out", "parts", "splits")

    def __init__(self, dense: F32 | None, parts: Sequence[_QuantMatrix], sizes: Sequence[int],
                 bias: F32 | None) -> None:
        self.dense = dense  # (sum(sizes), n_in) float32, C-contiguous, or None when lazy
        self.parts = tuple(parts)
        self.splits = [int(v) for v in np.cumsum(sizes)[:-1]]
        edges = [0, *self.splits, int(sum(sizes))]
        self._bounds = list(itertools.pairwise(edges))
        self.bias = bias  # (sum(sizes),) or None
        self.n_out = int(sum(sizes))

    def matmul(self, x: F32, rows: RowSplitter | None = None) -> F32:
        """x (T, n_in) → a fresh (T, n_out) array, all parts side by side. Costs one matvec or
        matmul per part (one when eager); with a ``RowSplitter`` the product runs on several
        threads (a single row only for matrices of at least ``SPLIT_MIN_DECODE`` elements)."""
        if self.dense is not None:
            if rows is not None and (x.shape[0] > 1 or self.dense.size >= SPLIT_MIN_DECODE):
                y = rows.matmul(self.dense, x)
            elif x.shape[0] == 1:
                y = (self.dense @ x[0])[None, :]  # gemv: the decode path
            else:
                y = x @ self.dense.T
        else:
            y = np.concatenate([p.matmul(x) for p in self.parts], axis=1) if len(self.parts) > 1 \
                else self.parts[0].matmul(x)
        if self.bias is not None:
            y += self.bias
        return y

    def __call__(self, x: F32, rows: RowSplitter | None = None) -> list[F32]:
        """x (T, n_in) → [ (T, size_i) ... ]: :meth:`matmul` split into the parts (views)."""
        y = self.matmul(x, rows)
        return [y[:, lo:hi] for lo, hi in self._bounds]

    def rows(self, ids: np.ndarray, x: F32) -> F32:
        """Only output rows ``ids`` of a single-part projection: x (T, n_in) → (T, len(ids))."""
        if self.dense is not None:
            w = self.dense[ids]
        else:
            w = self.parts[0].take(ids)
        y = x @ w.T
        if self.bias is not None:
            y += self.bias[ids]
        return y

    @property
    def nbytes(self) -> int:
        """Bytes held (eager) or mapped (lazy) for the weights."""
        if self.dense is not None:
            return int(self.dense.nbytes)
        return int(sum(p.rows.nbytes for p in self.parts))


class Embedding:
    """Token embedding table: rows looked up by id (dequantizing only those rows when lazy)."""

    __slots__ = ("dense", "quant")

    def __init__(self, dense: F32 | None, quant: _QuantMatrix | None) -> None:
        self.dense = dense  # (n_vocab, n_embd) float32 or None
        self.quant = quant

    def __call__(self, ids: np.ndarray) -> F32:
        """ids (T,) → (T, n_embd) float32 (a fresh array)."""
        if self.dense is not None:
            return self.dense[ids]
        assert self.quant is not None
        return self.quant.take(ids).copy()


@dataclass(slots=True)
class LayerWeights:
    """One transformer block; optional entries are None when the architecture lacks them."""

    attn_norm: F32  # (n_embd,)
    qkv: Projection  # → q (T, n_head·hd), k (T, n_kv·hd), v (T, n_kv·hd)
    wo: Projection  # (T, n_head·hd) → (T, n_embd)
    ffn_norm: F32  # (n_embd,)
    gate_up: Projection  # → gate (T, n_ff), up (T, n_ff)
    down: Projection  # (T, n_ff) → (T, n_embd)
    q_norm: F32 | None = None  # (hd,)
    k_norm: F32 | None = None  # (hd,)
    post_attn_norm: F32 | None = None  # (n_embd,)
    post_ffn_norm: F32 | None = None  # (n_embd,)


@dataclass(slots=True)
class Weights:
    """All weights of a model."""

    mode: WeightMode
    token_embd: Embedding
    layers: list[LayerWeights]
    output_norm: F32
    output: Projection  # (T, n_embd) → (T, n_vocab); shares token_embd when tied
    rope_freqs: F32 | None  # (n_rot/2,) frequency divisors, or None

    @property
    def nbytes(self) -> int:
        """Bytes of the big matrices (held when eager, mapped when lazy)."""
        total = sum(p.nbytes for lw in self.layers for p in (lw.qkv, lw.wo, lw.gate_up, lw.down))
        return total + self.output.nbytes


class _Progress:
    """A one-line progress bar on stderr, shown only for an interactive terminal or when asked."""

    def __init__(self, total: int, enabled: bool | None, label: str) -> None:
        self.total = max(total, 1)
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.label = label
        self.done = 0
        self.t0 = time.perf_counter()

    def step(self, n: int = 1) -> None:
        self.done += n
        if self.enabled:
            frac = self.done / self.total
            bar = "#" * int(30 * frac)
            sys.stderr.write(f"\r{self.label} [{bar:<30}] {100 * frac:5.1f}%")
            sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write(f"  {time.perf_counter() - self.t0:.2f} s\n")
            sys.stderr.flush()


def _tensor_shape(info: Any) -> tuple[int, ...]:
    """numpy shape of a tensor info (``ne`` reversed)."""
    shape = getattr(info, "shape", None)
    if shape is None:
        raise ModelError(f"tensor info {info!r} has no shape")
    return tuple(int(s) for s in shape)


def load_weights(gguf: Any, config: ModelConfig, mode: WeightMode | str = WeightMode.EAGER,
                 *, progress: bool | None = None) -> Weights:
    """Build :class:`Weights` from an open GGUF file.

    Eager dequantizes everything (memory ≈ 4 bytes per parameter, loading costs a dequantize
    pass); lazy keeps zero-copy views into a map of the file (its own map when ``gguf.path``
    is known, so ``gguf`` may be closed afterwards). Raises :class:`ModelError`
    naming a missing tensor or a tensor of the wrong shape.
    """
    from lexguide.gguf import dequantize as dequantize_raw

    mode = WeightMode(mode)
    infos = {t.name: t for t in gguf.tensors}
    c = config
    hd = c.head_dim

    def info(name: str, shape: tuple[int, ...]) -> Any:
        t = infos.get(name)
        if t is None:
            raise ModelError(f"tensor {name!r} is missing from the GGUF file")
        got = _tensor_shape(t)
        if got != shape:
            raise ModelError(f"tensor {name!r} has numpy shape {got}, expected {shape}")
        return t

    def vector(name: str, n: int, optional: bool = False) -> F32 | None:
        if optional and name not in infos:
            return None
        info(name, (n,))
        return np.ascontiguousarray(gguf.dequantize(name), dtype=np.float32).reshape(n)

    # lazy: our own map of the file, so used pages can be released (a GGUF held in memory,
    # without a path, is used through its own buffer and nothing is released)
    file_map = _FileMap(gguf.path) if mode is WeightMode.LAZY and gguf.path is not None else None

    def quant(name: str, shape: tuple[int, int]) -> _QuantMatrix:
        t = info(name, shape)
        if file_map is None:
            return _QuantMatrix(name, gguf.raw(name), t.ggml_type, shape, dequantize_raw)
        return _QuantMatrix(name, file_map.view(t.offset, t.nbytes), t.ggml_type, shape,
                            dequantize_raw, file_map, t.offset)

    def projection(names: Sequence[str], shapes: Sequence[tuple[int, int]],
                   biases: Sequence[str] = ()) -> Projection:
        sizes = [s[0] for s in shapes]
        bias = None
        if biases and any(b in infos for b in biases):
            bias = np.concatenate([
                vector(b, s) if b in infos else np.zeros(s, np.float32)  # type: ignore[misc]
                for b, s in zip(biases, sizes)
            ])
        if mode is WeightMode.EAGER:
            mats = [np.asarray(gguf.dequantize(info(n, s).name), dtype=np.float32).reshape(s)
                    for n, s in zip(names, shapes)]
            dense = np.ascontiguousarray(np.concatenate(mats) if len(mats) > 1 else mats[0])
            return Projection(dense, (), sizes, bias)
        return Projection(None, [quant(n, s) for n, s in zip(names, shapes)], sizes, bias)

    n_embd, n_ff = c.n_embd, c.n_ff
    n_q, n_kv = c.n_head * hd, c.n_head_kv * hd
    bar = _Progress(c.n_layer + 2, progress, f"loading {c.arch} ({mode.value})")

    embd_shape = (c.n_vocab, n_embd)
    if mode is WeightMode.EAGER:
        info("token_embd.weight", embd_shape)
        embd_dense = np.ascontiguousarray(gguf.dequantize("token_embd.weight"), dtype=np.float32)
        token_embd = Embedding(embd_dense.reshape(embd_shape), None)
    else:
        token_embd = Embedding(None, quant("token_embd.weight", embd_shape))
    bar.step()

    layers = []
    for il in range(c.n_layer):
        p = f"blk.{il}."
        lw = LayerWeights(
            attn_norm=vector(p + "attn_norm.weight", n_embd),  # type: ignore[arg-type]
            qkv=projection(
                [p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"],
                [(n_q, n_embd), (n_kv, n_embd), (n_kv, n_embd)],
                [p + "attn_q.bias", p + "attn_k.bias", p + "attn_v.bias"],
            ),
            wo=projection([p + "attn_output.weight"], [(n_embd, n_q)], [p + "attn_output.bias"]),
            ffn_norm=vector(p + "ffn_norm.weight", n_embd),  # type: ignore[arg-type]
            gate_up=projection([p + "ffn_gate.weight", p + "ffn_up.weight"],
                               [(n_ff, n_embd), (n_ff, n_embd)]),
            down=projection([p + "ffn_down.weight"], [(n_embd, n_ff)]),
        )
        if c.qk_norm:
            lw.q_norm = vector(p + "attn_q_norm.weight", hd)
            lw.k_norm = vector(p + "attn_k_norm.weight", hd)
        if c.post_norms:
            lw.post_attn_norm = vector(p + "post_attention_norm.weight", n_embd)
            lw.post_ffn_norm = vector(p + "post_ffw_norm.weight", n_embd)
        layers.append(lw)
        bar.step()

    output_norm = vector("output_norm.weight", n_embd)
    if "output.weight" in infos:
        output = projection(["output.weight"], [embd_shape])
    elif token_embd.dense is not None:
        output = Projection(token_embd.dense, (), [c.n_vocab], None)  # tied: shares memory
    else:
        assert token_embd.quant is not None
        output = Projection(None, [token_embd.quant], [c.n_vocab], None)
    rope_freqs = vector("rope_freqs.weight", c.n_rot // 2, optional=True)
    bar.step()
    bar.close()
    return Weights(mode, token_embd, layers, output_norm, output, rope_freqs)  # type: ignore[arg-type]
