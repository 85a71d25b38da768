"""Model weights from a GGUF file: matrices stay the file's ggml blocks, multiplied natively.

Every matrix is a zero-copy view of the GGUF's memory map, multiplied by the native kernels
(:mod:`lexguide.runtime.kernels`: activations quantized per block as ggml does, AVX2 when the
CPU has it, rows split over the shared thread pool). Nothing is dequantized to float32 except
the small vectors (norms, biases) and the embedding rows a forward pass looks up, so resident
memory stays about the file size and a decode step streams the file's bytes, not 4 bytes per
weight. Matrices that read the same input (Q|K|V, gate|up) run as one native call.

Shapes: a projection's weight is ``(n_out, n_in)`` (GGUF ``ne`` reversed), so
``y = x @ W.T``; activations are ``(T, n_in)``.
"""

from __future__ import annotations

import itertools
import mmap
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from lexguide.errors import ModelError
from lexguide.runtime import kernels
from lexguide.runtime.config import ModelConfig

__all__ = ["Embedding", "LayerWeights", "Projection", "QuantMatrix", "Weights", "load_weights"]

F32 = npt.NDArray[np.float32]

class _FileMap:
    """A read-only map of the GGUF file that the weights keep alive (the parser may close)."""

    __slots__ = ("buf", "mm")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        with open(path, "rb") as fh:
            self.mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        self.buf = np.frombuffer(self.mm, dtype=np.uint8)  # (file_size,)

    def view(self, offset: int, nbytes: int) -> npt.NDArray[np.uint8]:
        """Zero-copy read-only bytes ``offset .. offset + nbytes`` of the file."""
        v = self.buf[offset:offset + nbytes]
        v.flags.writeable = False
        return v


class QuantMatrix:
    """An ``(n_out, n_in)`` matrix held as its ggml bytes (a view of the file, never copied)."""

    __slots__ = ("ggml_type", "n_in", "n_out", "name", "raw")

    def __init__(self, name: str, raw: np.ndarray, ggml_type: Any, shape: tuple[int, int]) -> None:
        self.name = name
        self.n_out, self.n_in = shape
        self.ggml_type = int(ggml_type)
        if self.ggml_type not in kernels.KERNEL_TYPES:
            kernels.matmul(np.zeros((1, self.n_in), np.float32), raw, self.ggml_type,
                           self.n_out, self.n_in)  # raises the ModelError naming the type
        self.raw = np.ascontiguousarray(raw).reshape(-1).view(np.uint8)  # (n_out · row_bytes,)

    @property
    def part(self) -> tuple[np.ndarray, int, int]:
        """The (bytes, ggml type, n_out) triple of :func:`kernels.matmul_parts`."""
        return self.raw, self.ggml_type, self.n_out

    def take(self, ids: np.ndarray) -> F32:
        """Dequantize rows ``ids`` → (len(ids), n_in) float32 (a new array)."""
        return kernels.dequantize_rows(self.raw, self.ggml_type, self.n_out, self.n_in, ids)


class Projection:
    """One or more linear maps of the same input, evaluated together in one native call.

    ``__call__`` returns one array per part; ``n_threads`` (≤ 0: the whole pool) bounds the
    threads a product uses.
    """

    __slots__ = ("_bounds", "_parts", "bias", "n_in", "n_out", "parts")

    def __init__(self, parts: Sequence[QuantMatrix], bias: F32 | None) -> None:
        self.parts = tuple(parts)
        self._parts = [p.part for p in self.parts]
        sizes = [p.n_out for p in self.parts]
        edges = [0, *itertools.accumulate(sizes)]
        self._bounds = list(itertools.pairwise(edges))
        self.bias = bias  # (sum(sizes),) or None
        self.n_out = edges[-1]
        self.n_in = self.parts[0].n_in

    def matmul(self, x: F32, n_threads: int = 0, out: F32 | None = None) -> F32:
        """x (T, n_in) → (T, n_out), all parts side by side (a fresh array unless ``out``), in
        the integer kernels at any row count: each row's result is the same whatever other
        rows share the call (batched decode relies on it)."""
        y = kernels.matmul_parts(x, self._parts, self.n_in, out=out, n_threads=n_threads)
        if self.bias is not None:
            y += self.bias
        return y

    def __call__(self, x: F32, n_threads: int = 0) -> list[F32]:
        """x (T, n_in) → [ (T, size_i) ... ]: :meth:`matmul` split into the parts (views)."""
        y = self.matmul(x, n_threads)
        return [y[:, lo:hi] for lo, hi in self._bounds]

    def rows(self, ids: np.ndarray, x: F32, n_threads: int = 0) -> F32:
        """Only output rows ``ids`` of a single-part projection: x (T, n_in) → (T, len(ids)).
        Costs a pass over those rows only (the sparse output projection of constrained steps)."""
        p = self.parts[0]
        y = kernels.matmul(x, p.raw, p.ggml_type, p.n_out, p.n_in, rows=ids, n_threads=n_threads)
        if self.bias is not None:
            y += self.bias[ids]
        return y

    @property
    def nbytes(self) -> int:
        """Bytes of the weights (mapped from the file)."""
        return int(sum(p.raw.nbytes for p in self.parts))


class Embedding:
    """Token embedding table: only the rows looked up are dequantized."""

    __slots__ = ("quant",)

    def __init__(self, quant: QuantMatrix) -> None:
        self.quant = quant

    def __call__(self, ids: np.ndarray) -> F32:
        """ids (T,) → (T, n_embd) float32 (a fresh array)."""
        return self.quant.take(ids)


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

    token_embd: Embedding
    layers: list[LayerWeights]
    output_norm: F32
    output: Projection  # (T, n_embd) → (T, n_vocab); shares token_embd when tied
    rope_freqs: F32 | None  # (n_rot/2,) frequency divisors, or None

    @property
    def nbytes(self) -> int:
        """Bytes of the big matrices (mapped from the file)."""
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


def load_weights(gguf: Any, config: ModelConfig, *, progress: bool | None = None) -> Weights:
    """Build :class:`Weights` from an open GGUF file.

    Matrices are zero-copy views into a map of the file (its own map when ``gguf.path`` is
    known, so ``gguf`` may be closed afterwards); only vectors are dequantized. Raises
    :class:`ModelError` naming a missing tensor, a tensor of the wrong shape, or a matrix
    type without a native kernel.
    """
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

    # our own map of the file, so the weights outlive the parser (a GGUF held in memory, without
    # a path, is used through its own buffer)
    file_map = _FileMap(gguf.path) if gguf.path is not None else None

    def quant(name: str, shape: tuple[int, int]) -> QuantMatrix:
        t = info(name, shape)
        raw = gguf.raw(name) if file_map is None else file_map.view(t.offset, t.nbytes)
        return QuantMatrix(name, raw, t.ggml_type, shape)

    def projection(names: Sequence[str], shapes: Sequence[tuple[int, int]],
                   biases: Sequence[str] = ()) -> Projection:
        sizes = [s[0] for s in shapes]
        bias = None
        if biases and any(b in infos for b in biases):
            bias = np.concatenate([
                vector(b, s) if b in infos else np.zeros(s, np.float32)  # type: ignore[misc]
                for b, s in zip(biases, sizes)
            ])
        return Projection([quant(n, s) for n, s in zip(names, shapes)], bias)

    n_embd, n_ff = c.n_embd, c.n_ff
    n_q, n_kv = c.n_head * hd, c.n_head_kv * hd
    bar = _Progress(c.n_layer + 2, progress, f"loading {c.arch}")

    embd_shape = (c.n_vocab, n_embd)
    token_embd = Embedding(quant("token_embd.weight", embd_shape))
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
    else:
        output = Projection([token_embd.quant], None)  # tied: the same bytes
    rope_freqs = vector("rope_freqs.weight", c.n_rot // 2, optional=True)
    bar.step()
    bar.close()
    return Weights(token_embd, layers, output_norm, output, rope_freqs)  # type: ignore[arg-type]
