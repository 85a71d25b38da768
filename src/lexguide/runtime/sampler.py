"""The sampler chain: penalties → grammar mask → temperature → top-k → top-p → min-p → sample.

Works on a candidate set ``(ids, logits)`` rather than the whole vocabulary, so a sparse grammar
mask (or top-k) makes every later step cheap — and lets the runtime compute logits only for the
tokens the grammar allows. Temperature ``0`` is greedy (argmax, lowest id on ties). With a seed
the draw is reproducible (``numpy.random.Generator`` PCG64).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from lexguide.errors import MatcherError, ModelError

__all__ = ["Sampler", "SamplerConfig", "mask_to_ids"]


@dataclass(frozen=True, slots=True)
class SamplerConfig:
    """Sampling parameters (defaults as llama.cpp's ``llama-cli``).

    ``temperature <= 0`` means greedy. ``top_k <= 0``, ``top_p >= 1`` and ``min_p <= 0``
    disable those filters. Penalties look at the last ``repeat_last_n`` tokens of the context
    (prompt included; ``-1`` = the whole context, ``0`` = off): ``repeat_penalty`` divides
    positive logits and multiplies negative ones (1 = off), ``frequency_penalty`` subtracts
    ``count × value`` and ``presence_penalty`` subtracts ``value`` once per seen token.
    """

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repeat_last_n: int = 64
    seed: int | None = None

    def __post_init__(self) -> None:
        checks = [
            (bool(np.isfinite(self.temperature)), "temperature must be finite"),
            (self.top_p >= 0.0, "top_p must be >= 0"),
            (self.min_p <= 1.0, "min_p must be <= 1"),
            (self.repeat_penalty > 0.0, "repeat_penalty must be > 0"),
            (self.repeat_last_n >= -1, "repeat_last_n must be >= -1"),
            (self.seed is None or self.seed >= 0, "seed must be None or >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ModelError(f"SamplerConfig: {message}")

    @property
    def greedy(self) -> bool:
        """True when sampling reduces to argmax."""
        return self.temperature <= 0.0

    @property
    def has_penalties(self) -> bool:
        """True when some penalty changes logits."""
        return self.repeat_last_n != 0 and (
            self.repeat_penalty != 1.0 or self.frequency_penalty != 0.0
            or self.presence_penalty != 0.0
        )


def mask_to_ids(mask: npt.NDArray[np.uint32], n_vocab: int) -> npt.NDArray[np.int64]:
    """Allowed token ids of a ``uint32`` bitmask (bit ``t & 31`` of word ``t >> 5``), ascending.

    Costs one ``unpackbits`` over the mask (~0.5 ms for 262k tokens).
    """
    bits = np.unpackbits(np.ascontiguousarray(mask, dtype="<u4").view(np.uint8), bitorder="little")
    return np.flatnonzero(bits[:n_vocab])


class Sampler:
    """Draws one token from logits with a :class:`SamplerConfig`; holds the random state.

    Not thread-safe (one per generation). ``sample`` does not mutate its inputs.
    """

    def __init__(self, config: SamplerConfig) -> None:
        self.config = config
        self.rng = np.random.default_rng(config.seed)

    def sample(self, logits: npt.NDArray[np.float32], ids: npt.NDArray[np.int64] | None = None,
               history: Sequence[int] = ()) -> int:
        """One token id.

        Parameters
        ----------
        logits : the candidates' logits — the whole vocabulary when ``ids`` is None, else
            ``logits[i]`` belongs to token ``ids[i]`` (the grammar mask already applied by
            restricting ``ids`` to allowed tokens).
        ids : candidate token ids (ascending), or None for all tokens ``0 .. len(logits)-1``.
        history : the context so far (for penalties).

        Raises :class:`MatcherError` when no candidate is left (an empty grammar mask) — the
        runtime never falls back to unconstrained sampling.
        """
        cfg = self.config
        if ids is None and cfg.greedy and not (cfg.has_penalties and len(history)):
            # greedy over the whole vocabulary: argmax in place (numpy's argmax returns the
            # first NaN if there is one and the lowest id on ties; a finite maximum means no
            # NaN and no +inf, and -inf elsewhere changes nothing) — the general path below
            # copies 262k logits to float64 first (~1 ms a token for Gemma 3)
            if logits.size:
                best = int(np.argmax(logits))
                if np.isfinite(logits[best]):
                    return best
        if ids is None:
            ids = np.arange(logits.shape[0])
        if ids.size == 0:
            raise MatcherError("the grammar allows no token here; cannot continue")
        x = np.array(logits, dtype=np.float64)  # (n,) working copy
        if cfg.has_penalties and len(history):
            self._penalise(x, ids, history)
        finite = np.isfinite(x)
        if not finite.all():  # -inf from a mask applied by the caller, or a soft-cap overflow
            if not finite.any():
                raise MatcherError("every candidate token has logit -inf; cannot continue")
            ids, x = ids[finite], x[finite]
        if cfg.greedy:
            return int(ids[int(np.argmax(x))])
        x /= cfg.temperature
        if 0 < cfg.top_k < x.size:
            keep = np.argpartition(-x, cfg.top_k - 1)[: cfg.top_k]
            ids, x = ids[keep], x[keep]
        order = np.argsort(-x, kind="stable")  # descending; ties keep the lower id first
        ids, x = ids[order], x[order]
        p = np.exp(x - x[0])
        p /= p.sum()
        n = p.size
        if cfg.top_p < 1.0:
            n = min(n, int(np.searchsorted(np.cumsum(p), cfg.top_p, side="left")) + 1)
        if cfg.min_p > 0.0:
            n = min(n, max(1, int(np.count_nonzero(p[:n] >= cfg.min_p * p[0]))))
        p = p[:n] / p[:n].sum()
        return int(ids[int(self.rng.choice(n, p=p))])

    def _penalise(self, x: npt.NDArray[np.float64], ids: npt.NDArray[np.int64],
                  history: Sequence[int]) -> None:
        cfg = self.config
        window = history if cfg.repeat_last_n < 0 else history[-cfg.repeat_last_n:]
        seen, counts = np.unique(np.asarray(window, dtype=np.int64), return_counts=True)
        pos = np.searchsorted(ids, seen)
        pos_ok = pos < ids.size
        hit = np.zeros(seen.size, dtype=bool)
        hit[pos_ok] = ids[pos[pos_ok]] == seen[pos_ok]
        where, counts = pos[hit], counts[hit]
        if not where.size:
            return
        vals = x[where]
        if cfg.repeat_penalty != 1.0:
            vals = np.where(vals > 0, vals / cfg.repeat_penalty, vals * cfg.repeat_penalty)
        vals -= counts * cfg.frequency_penalty + cfg.presence_penalty
        x[where] = vals
