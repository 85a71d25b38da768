"""One generation step of one sequence, shared by ``Model.generate`` and the server's scheduler.

Both loops run the same steps per sequence; only the forward pass and where the results go
differ (``Model.generate`` feeds one sequence and yields chunks; the scheduler feeds many
sequences in one batched forward, fills their masks in one call and posts events):

1. mask → allowed ids: :meth:`Decoding.allowed` (an empty mask raises :class:`MatcherError`);
   :meth:`Decoding.left` is the token budget the budget-aware mask is given;
2. logits of the allowed rows only when :func:`sparse` says so, then :meth:`Decoding.sample`
   (penalties over the sequence's history → mask → temperature → top-k → top-p → min-p);
3. :meth:`Decoding.push` consumes the sampled token and what follows it: an end-of-generation
   token ends the sequence (``"stop"``); else the token's text is checked for stop strings,
   then, until the sequence ends or nothing is forced, the grammar's completion (``"stop"``;
   stopped without accepting raises), ``max_tokens`` (``"length"``) and the forced tokens —
   the think section's end marker once its budget is spent (:func:`think_end`), else what the
   grammar forces — each group consumed, counted and checked for stop strings like a sampled
   token. :meth:`Decoding.start` runs the same checks before the first sample.

Each call returns :class:`Piece` values: new tokens, the text that became safe to show (text
that may start a stop string is held back, :class:`StopText`) and, on the last one, the finish
reason. ``"length"`` becomes ``"stop"`` when the grammar accepts the output as it is (the
budget ran out on a complete output). The caller ends a sequence for its own reasons (the
context is full) with :meth:`Decoding.end`.
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from lexguide.errors import MatcherError, TokenRejected
from lexguide.runtime.reasoning import ThinkBudget
from lexguide.runtime.sampler import Sampler, mask_to_ids

__all__ = ["SPARSE_FRACTION", "Decoding", "Piece", "StopText", "find_stop", "holdback",
           "sparse", "think_end"]

# Project only the allowed rows of the output matrix when at most this fraction is allowed.
SPARSE_FRACTION = 0.25


class Piece(NamedTuple):
    """New ``tokens`` of a sequence (empty on a finish without new tokens), the ``text`` that
    became safe to show, the ``finish`` reason on the sequence's last piece, and whether the
    tokens were ``forced`` by the grammar (not sampled)."""

    tokens: list[int]
    text: str
    finish: str | None = None
    forced: bool = False


def sparse(allowed: npt.NDArray[Any] | None, n_vocab: int) -> bool:
    """Whether to project only the ``allowed`` rows of the output matrix (few allowed)."""
    return allowed is not None and allowed.size <= SPARSE_FRACTION * n_vocab


def find_stop(text: str, stops: Iterable[str], start: int) -> int:
    """Index of the earliest stop string in ``text[start:]`` (absolute), or -1."""
    best = -1
    for s in stops:
        i = text.find(s, start)
        if i >= 0 and (best < 0 or i < best):
            best = i
    return best


def holdback(text: str, stops: Iterable[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of a stop string."""
    keep = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), keep, -1):
            if text.endswith(s[:k]):
                keep = k
                break
    return keep


class StopText:
    """Incremental UTF-8 decoding with stop strings; holds back text that may start one."""

    __slots__ = ("decoder", "emitted", "longest", "stops", "text")

    def __init__(self, stops: Sequence[str]) -> None:
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.stops = list(stops)
        self.longest = max((len(s) for s in self.stops), default=0)
        self.text = ""
        self.emitted = 0

    def feed(self, data: bytes, final: bool) -> tuple[str, bool]:
        """(new safe text, whether a stop string was hit); the text ends before the hit."""
        self.text += self.decoder.decode(data, final=final)
        hit = find_stop(self.text, self.stops, max(0, self.emitted - self.longest)) \
            if self.stops else -1
        if hit >= 0:
            self.text = self.text[:hit]
            final = True
        safe = len(self.text) if final else len(self.text) - holdback(self.text, self.stops)
        delta = self.text[self.emitted:max(safe, self.emitted)]
        self.emitted = max(safe, self.emitted)
        return delta, hit >= 0


def think_end(matcher: Any, think: ThinkBudget, budget: int) -> list[int]:
    """The end marker's tokens, consumed by ``matcher`` and fed to ``think``, when the
    thinking budget is spent and the grammar takes them here (mid-character it does not:
    the next token finishes the character first); else []."""
    ids = think.due()
    if not ids or len(ids) > budget or matcher.validate_tokens(ids) != len(ids):
        return []
    for t in ids:
        matcher.consume(t)
    think.feed(think.end)
    return list(ids)


class Decoding:
    """The generation state of one sequence: its matcher (or None), sampler, token history
    (prompt included), budget, think-section counter and stop strings (mutable; one thread).

    ``n_gen`` counts generated tokens (forced ones included), ``n_forced`` the forced ones,
    ``matcher_s`` the seconds spent in the matcher by :meth:`start` and :meth:`push`;
    ``finish`` is the finish reason once the sequence has ended, and ``text`` its
    :class:`StopText` (``text.text`` the output so far).
    """

    __slots__ = ("eog", "finish", "history", "matcher", "matcher_s", "max_tokens", "n_forced",
                 "n_gen", "sampler", "table", "text", "think")

    def __init__(self, matcher: Any, sampler: Sampler, prompt_ids: Sequence[int],
                 max_tokens: int, token_bytes: Sequence[bytes], eog: npt.NDArray[np.bool_], *,
                 stops: Sequence[str] = (), think: ThinkBudget | None = None) -> None:
        self.matcher = matcher
        self.sampler = sampler
        self.history = list(prompt_ids)
        self.max_tokens = max_tokens
        self.table = token_bytes
        self.eog = eog
        self.think = think
        self.text = StopText(stops)
        self.n_gen = 0
        self.n_forced = 0
        self.matcher_s = 0.0
        self.finish: str | None = None

    # -- mask and sample ---------------------------------------------------------------------
    def left(self, ctx_free: int) -> int:
        """Tokens this sequence may still generate, the next one included, when ``ctx_free``
        context positions are free after its pending tokens (the budget-aware mask's bound)."""
        return min(self.max_tokens - self.n_gen, ctx_free + 1)

    def allowed(self, mask: npt.NDArray[np.uint32], n_vocab: int) -> npt.NDArray[np.int64]:
        """The token ids ``mask`` allows; raises :class:`MatcherError` when it allows none."""
        ids = mask_to_ids(mask, n_vocab)
        if ids.size == 0:
            raise MatcherError(
                f"the grammar allows no token after {self.n_gen} generated tokens; stopping")
        return ids

    def sample(self, logits: npt.NDArray[np.float32], allowed: npt.NDArray[Any] | None) -> int:
        """A token from ``logits`` (the ``allowed`` ids' logits when given, else all)."""
        return self.sampler.sample(logits, allowed, self.history)

    # -- consume and check -------------------------------------------------------------------
    def start(self) -> list[Piece]:
        """The checks and forced tokens before the first sample (the grammar may force the
        output's start, be complete already, or ``max_tokens`` be 0)."""
        return self._follow()

    def push(self, token: int) -> list[Piece]:
        """Consume the sampled ``token`` and the tokens forced after it; the pieces to show,
        the last with ``finish`` set when the sequence ended. Raises :class:`MatcherError`
        when the grammar rejects a token or reaches a dead end."""
        if self.matcher is not None:
            tm = time.perf_counter()
            try:
                self.matcher.consume(token)
            except TokenRejected as e:
                raise MatcherError(f"the grammar rejected sampled token {token}: {e}") from e
            self.matcher_s += time.perf_counter() - tm
        if self.eog[token]:
            return [self.end("stop")]
        if self.think is not None:
            self.think.feed(self.table[token])
        piece = self._emit([token], False)
        return [piece] if piece.finish else [piece, *self._follow()]

    def end(self, reason: str) -> Piece:
        """End the sequence (``"length"`` becomes ``"stop"`` on an output the grammar
        accepts); the piece carries the text held back until now."""
        if reason == "length" and self.matcher is not None and self.matcher.is_accepting():
            reason = "stop"
        delta, _ = self.text.feed(b"", True)
        self.finish = reason
        return Piece([], delta, reason)

    def _follow(self) -> list[Piece]:
        """Grammar completion, budget, forced tokens — repeated until the sequence ends or
        nothing is forced."""
        m = self.matcher
        out: list[Piece] = []
        while True:
            if m is not None:
                tm = time.perf_counter()
                stopped = m.is_stopped()
                self.matcher_s += time.perf_counter() - tm
                if stopped:
                    if not m.is_accepting():
                        raise MatcherError(
                            "the grammar reached a dead end (stopped without accepting)")
                    out.append(self.end("stop"))
                    return out
            if self.n_gen >= self.max_tokens:
                out.append(self.end("length"))
                return out
            forced = self._forced() if m is not None else []
            if not forced:
                return out
            piece = self._emit(forced, True)
            out.append(piece)
            if piece.finish:
                return out

    def _forced(self) -> list[int]:
        """Consume and return the tokens forced next (at most what is left of the budget):
        the think section's end marker once its budget is spent, else what the grammar
        forces."""
        m = self.matcher
        budget = self.max_tokens - self.n_gen
        tm = time.perf_counter()
        forced = [] if self.think is None else think_end(m, self.think, budget)
        if not forced:
            forced = list(m.forced_tokens())[:budget]
            for t in forced:
                try:
                    m.consume(t)
                except TokenRejected as e:
                    raise MatcherError(f"the grammar rejected its own forced token {t}: {e}") from e
                if self.think is not None:
                    self.think.feed(self.table[t])
        self.matcher_s += time.perf_counter() - tm
        self.n_forced += len(forced)
        return forced

    def _emit(self, tokens: list[int], forced: bool) -> Piece:
        """Account ``tokens`` and decode their text; a stop string ends the sequence."""
        self.history += tokens
        self.n_gen += len(tokens)
        delta, hit = self.text.feed(b"".join(self.table[t] for t in tokens), False)
        if hit:
            self.finish = "stop"
        return Piece(tokens, delta, self.finish, forced)
