"""Log probabilities of generated tokens and their two OpenAI shapes.

What the numbers are
--------------------
The distribution a token was drawn from *after the grammar mask*: the log-softmax of the
model's logits over the tokens the grammar allows at that position (all tokens without a
constraint), renormalised over them. Penalties, temperature, top-k, top-p and min-p are not
applied, so the numbers depend on the model, the prompt, the output so far and the grammar,
never on the sampling settings. A token the grammar disallows never appears: it has
probability 0 under this distribution.

A token the grammar *forces* (the only one allowed; the runtime appends it without asking the
model) gets ``logprob`` 0.0 with itself as its only alternative: that is its exact value
under the masked distribution, which has one token.

Shapes
------
Chat (``logprobs: true``, ``top_logprobs: k``): ``{"content": [{token, logprob, bytes,
top_logprobs: [{token, logprob, bytes}, ...k]}], "refusal": null}``.
Completions (``logprobs: k``): ``{tokens, token_logprobs, top_logprobs: [{token: logprob}],
text_offset}``, where each ``top_logprobs`` dict holds the top ``k`` plus the sampled token.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["CompletionOffsets", "TokenLogprob", "TokenNames", "chat_logprobs"]

MAX_TOP_LOGPROBS = 20  # chat ``top_logprobs``, as OpenAI
MAX_COMPLETION_LOGPROBS = 5  # completions ``logprobs``, as OpenAI
LOGPROB_FLOOR = -9999.0  # OpenAI's "very unlikely" value; keeps JSON free of -inf


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One generated token: its text, its bytes (None for a special token such as an
    end-of-turn marker, which adds no bytes to the output), its log probability and the
    ``k`` most likely tokens at its position as ``(text, bytes, logprob)``, most likely first."""

    token: str
    bytes: bytes | None
    logprob: float
    top: tuple[tuple[str, bytes | None, float], ...]


class TokenNames:
    """Token id → (text, bytes or None): the UTF-8 of the token's bytes, undecodable bytes as
    ``\\xNN`` escapes (a token may hold part of a character); a special token without bytes
    is named by its vocabulary text and has no bytes."""

    __slots__ = ("_bytes", "_text")

    def __init__(self, token_bytes: Sequence[bytes], special_text: Any) -> None:
        self._bytes = token_bytes
        self._text = special_text  # token id -> its vocabulary text (special tokens)

    def name(self, token_id: int) -> tuple[str, bytes | None]:
        data = self._bytes[token_id]
        if not data:
            return self._text(token_id), None
        return data.decode("utf-8", "backslashreplace"), data

    def forced(self, token_id: int, k: int) -> TokenLogprob:
        """The entry of a grammar-forced token: probability 1 under the masked distribution."""
        text, data = self.name(token_id)
        return TokenLogprob(text, data, 0.0, ((text, data, 0.0),) if k > 0 else ())

    def sampled(self, logits: npt.NDArray[np.floating[Any]], ids: npt.NDArray[np.int64] | None,
                token_id: int, k: int) -> TokenLogprob:
        """The entry of ``token_id`` drawn from ``logits`` (over the allowed ``ids``, ascending,
        or over the whole vocabulary when None). Costs one log-softmax over the candidates and
        one partial sort for the top ``k``; does not mutate ``logits``."""
        x = np.asarray(logits, dtype=np.float64)
        cand = np.arange(x.size) if ids is None else np.asarray(ids)
        finite = np.isfinite(x)
        if not finite.all():
            x, cand = x[finite], cand[finite]
        top_x = float(x.max())
        lp = x - (top_x + float(np.log(np.exp(x - top_x).sum())))  # log-softmax, (n,)
        at = int(np.searchsorted(cand, token_id))
        own = float(lp[at]) if at < cand.size and cand[at] == token_id else -np.inf
        k = min(k, lp.size)
        top: tuple[tuple[str, bytes | None, float], ...] = ()
        if k > 0:
            best = np.argpartition(-lp, k - 1)[:k] if k < lp.size else np.arange(lp.size)
            best = best[np.lexsort((cand[best], -lp[best]))]  # most likely first, then low id
            top = tuple((*self.name(int(cand[i])), _clamp(float(lp[i]))) for i in best)
        text, data = self.name(token_id)
        return TokenLogprob(text, data, _clamp(own), top)


def _clamp(logprob: float) -> float:
    return max(logprob, LOGPROB_FLOOR) + 0.0  # + 0.0: a certain token is 0.0, not -0.0


def _listed(data: bytes | None) -> list[int] | None:
    return None if data is None else list(data)


def _top_dict(e: TokenLogprob) -> dict[str, float]:
    """A completions ``top_logprobs`` position: the top ``k`` and the sampled token."""
    out = {t: lp for t, _, lp in e.top}
    out.setdefault(e.token, e.logprob)
    return out


def chat_logprobs(entries: Sequence[TokenLogprob]) -> dict[str, Any]:
    """The chat ``logprobs`` object of ``entries``."""
    return {"content": [{
        "token": e.token, "logprob": e.logprob, "bytes": _listed(e.bytes),
        "top_logprobs": [{"token": t, "logprob": lp, "bytes": _listed(b)} for t, b, lp in e.top],
    } for e in entries], "refusal": None}


class CompletionOffsets:
    """Builds the completions ``logprobs`` objects of one choice, chunk after chunk:
    ``text_offset`` counts the characters of the choice's text before each token (a character
    split over tokens counts at the token that completes it). Mutates its decoder state."""

    __slots__ = ("_decoder", "_offset")

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._offset = 0

    def shape(self, entries: Sequence[TokenLogprob]) -> dict[str, Any]:
        offsets = []
        for e in entries:
            offsets.append(self._offset)
            self._offset += len(self._decoder.decode(e.bytes or b""))
        return {
            "tokens": [e.token for e in entries],
            "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": [_top_dict(e) for e in entries],
            "text_offset": offsets,
        }
