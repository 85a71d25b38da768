"""Model hyper-parameters read from GGUF metadata (spec: ``gguf.md`` §5, §7, §8).

One frozen dataclass describes every supported architecture; the forward pass in
``model.py`` reads switches from it instead of branching on architecture names. The
llama family (``llama`` — also SmolLM2, Llama 2/3, Mistral — ``qwen2``, ``qwen3``) differ
only in RoPE layout, projection biases and q/k norms; ``gemma3`` adds the embedding scale,
post-norms, GELU-tanh gating and sliding-window local layers with their own RoPE base.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from lexguide.errors import ModelError

__all__ = ["SUPPORTED_ARCHITECTURES", "Activation", "ModelConfig", "RopeMode"]


class RopeMode(enum.Enum):
    """Which elements form a rotated pair (gguf.md §8)."""

    NORM = 0  # adjacent pairs (2i, 2i+1): llama GGUFs, whose Q/K rows were permuted by the converter
    NEOX = 2  # split halves (i, i + n_rot/2): gemma, qwen


class Activation(enum.Enum):
    """Gate activation of the gated feed-forward network."""

    SILU = "silu"
    GELU_TANH = "gelu_tanh"


SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3", "gemma3")

_ROPE_NEOX_ARCHS = {"qwen2", "qwen3", "gemma3"}


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Everything the forward pass needs besides the weights.

    Built with :meth:`from_metadata`; per-layer values (RoPE base, sliding window) are
    queried with :meth:`is_local_layer` / :meth:`rope_base_of`.
    """

    arch: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int  # key/query head size
    v_head_dim: int
    n_rot: int
    rope_mode: RopeMode
    rope_base: float  # global layers
    rope_freq_scale: float  # 1 / rope.scaling.factor (global layers)
    rope_base_local: float  # gemma3 sliding-window layers
    rms_eps: float
    ctx_train: int
    activation: Activation
    embed_scale: float  # multiply embeddings by this (gemma: sqrt(n_embd))
    query_scale: float  # q is multiplied by this before q·kᵀ
    qk_norm: bool  # per-head RMSNorm on q and k (gemma3, qwen3)
    post_norms: bool  # gemma3 post-attention / post-FFN norms
    sliding_window: int  # 0 = none
    swa_pattern: int  # layer il is local iff sliding_window and il % swa_pattern < swa_pattern - 1
    final_logit_softcap: float  # 0 = none

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any], *, n_vocab: int | None = None) -> ModelConfig:
        """Read hyper-parameters from a GGUF metadata dict.

        Raises :class:`ModelError` naming the key for a missing or malformed value and for an
        unsupported architecture or RoPE scaling type (never guesses).
        """
        arch = metadata.get("general.architecture")
        if not isinstance(arch, str):
            raise ModelError("GGUF metadata has no 'general.architecture' string")
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ModelError(
                f"architecture {arch!r} is not supported by the lexguide runtime "
                f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
            )

        def get(key: str, default: Any = None, *, required: bool = False) -> Any:
            full = f"{arch}.{key}"
            if full not in metadata:
                if required:
                    raise ModelError(f"GGUF metadata key {full!r} is missing")
                return default
            return metadata[full]

        def as_int(key: str, default: int | None = None) -> int:
            value = get(key, default, required=default is None)
            if isinstance(value, (np.ndarray, list, tuple)):
                values = {int(v) for v in value}
                if len(values) != 1:
                    raise ModelError(
                        f"GGUF metadata key '{arch}.{key}' varies per layer ({sorted(values)}); "
                        "per-layer sizes are not supported"
                    )
                value = values.pop()
            try:
                return int(value)
            except (TypeError, ValueError):
                raise ModelError(f"GGUF metadata key '{arch}.{key}' is not an integer: {value!r}") from None

        def as_float(key: str, default: float) -> float:
            value = get(key, default)
            try:
                return float(value)
            except (TypeError, ValueError):
                raise ModelError(f"GGUF metadata key '{arch}.{key}' is not a number: {value!r}") from None

        n_embd = as_int("embedding_length")
        n_head = as_int("attention.head_count")
        n_head_kv = as_int("attention.head_count_kv", n_head)
        head_dim = as_int("attention.key_length", n_embd // n_head if n_head else 0)
        v_head_dim = as_int("attention.value_length", head_dim)
        n_rot = as_int("rope.dimension_count", head_dim)
        if n_head <= 0 or n_head_kv <= 0 or n_head % n_head_kv:
            raise ModelError(f"bad head counts: n_head={n_head}, n_head_kv={n_head_kv}")
        if n_rot > head_dim or n_rot % 2:
            raise ModelError(f"rope.dimension_count={n_rot} must be even and <= head dim {head_dim}")
        if v_head_dim != head_dim:
            raise ModelError(f"key_length {head_dim} != value_length {v_head_dim} is not supported")

        factor = as_float("rope.scaling.factor", 0.0) or as_float("rope.scale_linear", 0.0)
        scaling = get("rope.scaling.type", "linear" if factor else "none")
        if scaling not in ("none", "linear"):
            raise ModelError(
                f"rope.scaling.type {scaling!r} is not supported by the lexguide runtime "
                "(only none/linear)"
            )
        freq_scale = 1.0 / factor if factor and scaling == "linear" else 1.0
        if as_float("attn_logit_softcapping", 0.0):
            raise ModelError(f"'{arch}.attn_logit_softcapping' is not supported by the lexguide runtime")

        if n_vocab is None:
            tokens = metadata.get("tokenizer.ggml.tokens")
            n_vocab = as_int("vocab_size", len(tokens) if tokens is not None else 0)
        gemma = arch == "gemma3"
        sliding_window = as_int("attention.sliding_window", 0) if gemma else 0
        if gemma:
            n_layer = as_int("block_count")
            query_scale = (
                1.0 / math.sqrt(n_embd / n_head) if n_layer == 62 else 1.0 / math.sqrt(head_dim)
            )
        else:
            query_scale = 1.0 / math.sqrt(head_dim)
        return cls(
            arch=arch,
            n_vocab=int(n_vocab),
            n_embd=n_embd,
            n_layer=as_int("block_count"),
            n_ff=as_int("feed_forward_length"),
            n_head=n_head,
            n_head_kv=n_head_kv,
            head_dim=head_dim,
            v_head_dim=v_head_dim,
            n_rot=n_rot,
            rope_mode=RopeMode.NEOX if arch in _ROPE_NEOX_ARCHS else RopeMode.NORM,
            rope_base=as_float("rope.freq_base", 10000.0),
            rope_freq_scale=freq_scale,
            rope_base_local=10000.0,
            rms_eps=as_float("attention.layer_norm_rms_epsilon", 1e-6 if gemma else 1e-5),
            ctx_train=as_int("context_length", 2048),
            activation=Activation.GELU_TANH if gemma else Activation.SILU,
            embed_scale=float(np.float32(math.sqrt(n_embd))) if gemma else 1.0,
            query_scale=query_scale,
            qk_norm=arch in ("gemma3", "qwen3"),
            post_norms=gemma,
            sliding_window=sliding_window,
            swa_pattern=6 if gemma else 0,
            # llama.cpp applies the final soft-cap only in non-SWA gemma builds (gguf.md §7)
            final_logit_softcap=0.0 if sliding_window else as_float("final_logit_softcapping", 0.0),
        )

    def is_local_layer(self, il: int) -> bool:
        """Does layer ``il`` use sliding-window attention (gemma3: ``il % 6 < 5``)?"""
        return bool(self.sliding_window) and il % self.swa_pattern < self.swa_pattern - 1

    def rope_of(self, il: int) -> tuple[float, float]:
        """(base, freq_scale) of layer ``il``: local layers use base 10000 and scale 1."""
        if self.is_local_layer(il):
            return self.rope_base_local, 1.0
        return self.rope_base, self.rope_freq_scale
