"""The transformer forward pass, with a preallocated KV cache.

Follows ``gguf.md`` §6 (llama family) and §7 (gemma3) — the graphs of llama.cpp's ``llama``
and ``gemma3`` builders. Every input — a prompt chunk of up to :data:`PREFILL_CHUNK` tokens,
a decode step, or the decode steps of a batch of sequences each with its own KV cache
(``forward_batch``) — runs every layer in one native call (``kernels.NativeLayers``): the
projections as integer-kernel products over all rows (each weight read once per tile of rows),
causal attention over every sequence's own cache, norms, RoPE and gating, with the GIL
released. Only the requested positions go through the output projection, so prefill pays for
one ``n_vocab × n_embd`` product, not one per token.
"""

from __future__ import annotations

import mmap
import threading
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from lexguide.errors import ModelError
from lexguide.runtime import kernels
from lexguide.runtime.config import Activation, ModelConfig, RopeMode
from lexguide.runtime.weights import Weights

__all__ = ["FUSED_MAX_ROWS", "PREFILL_CHUNK", "KVCache", "Transformer"]

F32 = npt.NDArray[np.float32]

# Prompt tokens per native forward: bounds the call's row buffers (~(6·n_embd + 3·n_ff) floats
# a row: 4.5 MB for SmolLM2, 5.6 MB for Gemma 3).
PREFILL_CHUNK = 256
# In forward_batch, inputs of at most this many tokens per sequence (decode steps, forced
# tokens) run together in one native call; longer ones (prompts) run on their own, in chunks.
FUSED_MAX_ROWS = 16


class KVCache:
    """Keys and values of every layer for one sequence, preallocated to ``n_ctx`` positions.

    ``k``/``v`` are (n_layer, n_head_kv, n_ctx, row) arrays; positions ``0 .. n-1`` are valid.
    ``cache_type`` (``kernels.CACHE_TYPES``) sets what a row holds: ``"f16"`` (the default,
    llama.cpp's default cache: float16, hd per row, 2 bytes an element), ``"f32"`` (float32, 4
    bytes, nothing rounded) or ``"q8_0"`` (ggml's Q8_0 blocks as uint8, 34 bytes per 32
    elements; the head size must be a multiple of 32).
    The arrays are fresh anonymous mappings, so untouched positions cost no resident memory.
    Raises :class:`ModelError` for a non-positive ``n_ctx`` or an unknown or unfit cache type.
    """

    __slots__ = ("cache_type", "k", "n", "n_ctx", "v")

    def __init__(self, config: ModelConfig, n_ctx: int, cache_type: str = "f16") -> None:
        if n_ctx <= 0:
            raise ModelError(f"context size must be positive, got {n_ctx}")
        dtype, row = kernels.cache_row_shape(cache_type, config.head_dim)
        shape = (config.n_layer, config.n_head_kv, n_ctx, row)
        self.k = _lazy_zeros(shape, dtype)
        self.v = _lazy_zeros(shape, dtype)
        self.n = 0
        self.n_ctx = n_ctx
        self.cache_type = cache_type

    @property
    def nbytes(self) -> int:
        """Bytes of both arrays at full ``n_ctx`` (what the cache holds when full)."""
        return int(self.k.nbytes + self.v.nbytes)

    def truncate(self, n: int) -> None:
        """Forget every position ≥ ``n`` (mutates; O(1): the data is simply overwritten later)."""
        if not 0 <= n <= self.n:
            raise ModelError(f"cannot truncate a KV cache of {self.n} positions to {n}")
        self.n = n


def _lazy_zeros(shape: tuple[int, ...], dtype: type = np.float32) -> np.ndarray:
    """A zeroed array whose pages become resident only when written.

    ``np.zeros`` would do that too, but numpy advises huge pages for big arrays, and writing
    the first positions of every (layer, head) slab of a KV cache then commits the whole cache
    in 2 MB pages (24 MB for SmolLM2 at n_ctx 512). An anonymous map advised against huge pages
    commits 4 KB per page touched.
    """
    n = int(np.prod(shape))
    mm = mmap.mmap(-1, max(np.dtype(dtype).itemsize * n, 1))
    if hasattr(mm, "madvise") and hasattr(mmap, "MADV_NOHUGEPAGE"):
        mm.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(mm, dtype=dtype, count=n).reshape(shape)


def _rope_tables(base: float, freq_scale: float, n_rot: int, n_ctx: int,
                 freq_divisors: F32 | None) -> tuple[F32, F32]:
    """cos and sin of θ[p, i] = p · scale · base^(−2i/n_rot) / ff_i, each (n_ctx, n_rot/2).

    The angles are computed as ggml's rope does, in float32: θ[p, 0] = p and each next angle
    the previous one times float32(base^(−2/n_rot)) — not the exact powers (they differ in the
    last bits, and those bits reach the logits through the Q8 activation roundings)."""
    step = np.float32(np.float32(base) ** np.float32(-2.0 / n_rot))
    theta = np.empty((n_ctx, n_rot // 2), dtype=np.float32)
    theta[:, 0] = np.arange(n_ctx, dtype=np.float32)
    for i in range(1, n_rot // 2):
        np.multiply(theta[:, i - 1], step, out=theta[:, i])
    if freq_divisors is not None:
        theta /= freq_divisors[:n_rot // 2].astype(np.float32)
    if freq_scale != 1.0:
        theta *= np.float32(freq_scale)
    t64 = theta.astype(np.float64)
    return np.cos(t64).astype(np.float32), np.sin(t64).astype(np.float32)


class Transformer:
    """A decoder-only transformer: ``forward(tokens, cache)`` → logits.

    Thread-safe for distinct caches (weights are read-only). Each instance caches RoPE tables
    up to the largest context it has seen. ``cache_type`` is the type of the caches
    :meth:`new_cache` makes (``"f16"``, ``"f32"`` or ``"q8_0"``; see :class:`KVCache`).
    """

    def __init__(self, config: ModelConfig, weights: Weights, cache_type: str = "f16") -> None:
        kernels.cache_row_shape(cache_type, config.head_dim)  # fails early for a bad type
        self.cache_type = cache_type
        self.config = config
        self.weights = weights
        self._rope: dict[tuple[float, float], tuple[F32, F32]] = {}
        self._rope_ctx = 0
        self._rope_keys = [config.rope_of(il) for il in range(config.n_layer)]
        self._threads = kernels.default_threads()
        self.local_layers = [config.is_local_layer(il) for il in range(config.n_layer)]
        self._native = self._native_layers()
        self._native_ctx = 0  # positions of the rotation tables the native layers hold
        self._native_lock = threading.Lock()  # tables are not replaced while a forward runs

    def _native_layers(self) -> kernels.NativeLayers:
        c, w = self.config, self.weights
        native = kernels.NativeLayers(
            n_embd=c.n_embd, n_ff=c.n_ff, n_q=c.n_head, n_kv=c.n_head_kv, head_dim=c.head_dim,
            n_rot=c.n_rot, neox=c.rope_mode is RopeMode.NEOX, eps=c.rms_eps,
            query_scale=c.query_scale, gelu=c.activation is Activation.GELU_TANH,
            output_norm=w.output_norm)
        for il, lw in enumerate(w.layers):
            native.add_layer(
                attn_norm=lw.attn_norm, qkv=[p.part for p in lw.qkv.parts], qkv_bias=lw.qkv.bias,
                wo=lw.wo.parts[0].part, wo_bias=lw.wo.bias, ffn_norm=lw.ffn_norm,
                gate_up=[p.part for p in lw.gate_up.parts], down=lw.down.parts[0].part,
                q_norm=lw.q_norm, k_norm=lw.k_norm, post_attn_norm=lw.post_attn_norm,
                post_ffn_norm=lw.post_ffn_norm,
                window=c.sliding_window if self.local_layers[il] else 0)
        return native

    @property
    def threads(self) -> int:
        """Threads each native product is split over (output rows; 1 = the caller's only).

        Defaults to the available cores. Set it freely between calls: the shared pool grows to
        the largest value seen (``kernels.set_threads``)."""
        return self._threads

    @threads.setter
    def threads(self, n: int) -> None:
        n = max(1, int(n))
        if kernels.threads() < n:
            kernels.set_threads(n)
        self._threads = n

    def new_cache(self, n_ctx: int, cache_type: str | None = None) -> KVCache:
        """A fresh KV cache of ``n_ctx`` positions (memory is committed only as it is used),
        of ``cache_type`` (default: this transformer's ``cache_type``)."""
        return KVCache(self.config, n_ctx, cache_type or self.cache_type)

    def _tables(self, n_ctx: int) -> dict[tuple[float, float], tuple[F32, F32]]:
        """cos/sin tables (≥ n_ctx positions, n_rot/2) of each RoPE (base, scale) in use."""
        if n_ctx > self._rope_ctx:
            self._rope.clear()
            self._rope_ctx = n_ctx
        for key in set(self._rope_keys):
            if key not in self._rope:
                self._rope[key] = _rope_tables(key[0], key[1], self.config.n_rot,
                                               self._rope_ctx, self.weights.rope_freqs)
        return self._rope

    def forward(self, tokens: npt.ArrayLike, cache: KVCache, *,
                logits: str | npt.ArrayLike = "last") -> F32:
        """Run ``tokens`` at positions ``cache.n ..`` and append them to the cache (mutates it).

        ``logits="last"`` returns (n_vocab,) for the last token; ``"all"`` returns (T, n_vocab);
        ``"none"`` returns an empty array (prefill whose logits are not needed). Long inputs
        are processed in chunks of :data:`PREFILL_CHUNK` tokens. Raises :class:`ModelError`
        for token ids out of range or when the cache would overflow.
        """
        ids = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            raise ModelError("forward() needs at least one token")
        self._check(ids, cache)
        mode = logits if isinstance(logits, str) else "all"
        outs = []
        for lo in range(0, ids.size, PREFILL_CHUNK):
            chunk = ids[lo:lo + PREFILL_CHUNK]
            last = lo + PREFILL_CHUNK >= ids.size
            x = self._hidden(chunk, cache)  # (T, n_embd), final-normed
            if mode == "all":
                outs.append(self._project(x))
            elif mode == "last" and last:
                return self._project(x[-1:])[0]
        if mode == "none":
            return np.empty(0, dtype=np.float32)
        return np.concatenate(outs, axis=0)

    def hidden_last(self, tokens: npt.ArrayLike, cache: KVCache) -> F32:
        """Like ``forward(..., logits="last")`` but returns the final normalised hidden state
        (n_embd,), so the caller can project only some vocabulary rows (see ``project_rows``)."""
        ids = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            raise ModelError("hidden_last() needs at least one token")
        cut = ((ids.size - 1) // PREFILL_CHUNK) * PREFILL_CHUNK
        if cut:
            self.forward(ids[:cut], cache, logits="none")
        return self._checked_hidden(ids[cut:], cache)[-1]

    def forward_batch(self, batch: Sequence[tuple[npt.ArrayLike, KVCache]]) -> F32:
        """Final normalised hidden states (B, n_embd) of the last token of each
        ``(tokens, cache)``, in order; the tokens are appended to their caches (mutates them).

        Sequences of at most :data:`FUSED_MAX_ROWS` tokens (decode steps) run together in one
        native pass over all layers: every projection one product over all their rows (each
        weight read once for the batch), attention over each sequence's own cache at its own
        position. Longer inputs (prompts) run on their own afterwards, in chunks, as
        :meth:`hidden_last` does. Costs, for B decoding sequences, about one weight read plus B rows of int8 work
        per tile of weights.
        A row's result does not depend on the other sequences of the batch: it equals
        :meth:`hidden_last` of that sequence alone, bit for bit. Raises :class:`ModelError`
        for an empty input, token ids out of range, a cache that would overflow, or a cache
        given twice.
        """
        items = [(np.asarray(t, dtype=np.int64).reshape(-1), c) for t, c in batch]
        if len({id(c) for _, c in items}) != len(items):
            raise ModelError("forward_batch() needs a distinct KV cache per sequence")
        for ids, cache in items:
            if ids.size == 0:
                raise ModelError("forward_batch() needs at least one token per sequence")
            self._check(ids, cache)
        out = np.empty((len(items), self.config.n_embd), dtype=np.float32)
        short = [i for i, (ids, _) in enumerate(items) if ids.size <= FUSED_MAX_ROWS]
        if short:  # first: the native call checks the caches' memory before writing anything
            h = self._hidden_fused([items[i] for i in short])
            ends = np.cumsum([items[i][0].size for i in short]) - 1
            out[short] = h[ends]
        for i, (ids, cache) in enumerate(items):
            if ids.size > FUSED_MAX_ROWS:
                out[i] = self.hidden_last(ids, cache)
        return out

    def project(self, h: F32) -> F32:
        """Logits (B, n_vocab) of hidden states h (B, n_embd): one product for the batch
        (integer kernels at any B, so each row equals ``project_rows`` of it alone)."""
        h = np.ascontiguousarray(h, dtype=np.float32).reshape(-1, self.config.n_embd)
        return self._softcap(self.weights.output.matmul(h, self._threads))

    def _checked_hidden(self, ids: np.ndarray, cache: KVCache) -> F32:
        self._check(ids, cache)
        return self._hidden(ids, cache)

    def _check(self, ids: np.ndarray, cache: KVCache) -> None:
        c = self.config
        bad = (ids < 0) | (ids >= c.n_vocab)
        if bad.any():
            raise ModelError(f"token id {int(ids[bad][0])} is out of range [0, {c.n_vocab})")
        if cache.n + ids.size > cache.n_ctx:
            raise ModelError(
                f"context overflow: {cache.n} cached + {ids.size} new tokens > n_ctx {cache.n_ctx}"
            )

    def project_rows(self, h: F32, rows: np.ndarray | None = None) -> F32:
        """Logits of hidden state h (n_embd,) for vocabulary ``rows`` (all when None)."""
        if rows is None:
            return self._project(h[None, :])[0]
        out = self.weights.output.rows(rows, h[None, :], self._threads)[0]
        return self._softcap(out)

    def _project(self, x: F32) -> F32:
        return self._softcap(self.weights.output.matmul(x, self._threads))

    def _softcap(self, y: F32) -> F32:
        cap = self.config.final_logit_softcap
        if cap:
            y = np.float32(cap) * np.tanh(y / np.float32(cap))
        return y

    def _embed(self, ids: np.ndarray) -> F32:
        x = self.weights.token_embd(ids)  # (T, n_embd), a fresh array the layers update in place
        if self.config.embed_scale != 1.0:
            x *= np.float32(self.config.embed_scale)
        return x

    def _hidden(self, ids: np.ndarray, cache: KVCache) -> F32:
        """Run all layers on ids (T ≤ PREFILL_CHUNK,) at positions cache.n.. → final-normed
        hidden (T, n_embd)."""
        return self._hidden_fused([(ids, cache)])

    def _hidden_fused(self, items: Sequence[tuple[np.ndarray, KVCache]]) -> F32:
        """All layers on the rows of several sequences (checked, each ≤ PREFILL_CHUNK tokens)
        at once, natively → final-normed hidden (Σ T_i, n_embd); appends to every cache."""
        caches = [cache for _, cache in items]
        sizes = [ids.size for ids, _ in items]
        seqs = np.empty((len(items), 3), dtype=np.int64)  # row0, n_rows, pos0
        seqs[:, 1] = sizes
        seqs[:, 0] = np.cumsum(sizes) - seqs[:, 1]
        seqs[:, 2] = [cache.n for cache in caches]
        x = self._embed(np.concatenate([ids for ids, _ in items]))
        out = np.empty_like(x)
        with self._native_lock:
            tables = self._tables(max(cache.n_ctx for cache in caches))
            if self._native_ctx != self._rope_ctx:
                for il, key in enumerate(self._rope_keys):
                    self._native.set_rope(il, *tables[key])
                self._native_ctx = self._rope_ctx
            self._native.forward(x, seqs, [c.k for c in caches], [c.v for c in caches], out,
                                 self._threads)
        for cache, n in zip(caches, sizes):
            cache.n += n
        return out
