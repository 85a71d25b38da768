"""lexguide constraints for Hugging Face ``transformers``: a ``LogitsProcessor`` for
``model.generate(..., logits_processor=[...])``.

```python
from lexguide.integrations.transformers import LexguideLogitsProcessor

proc = LexguideLogitsProcessor(tokenizer, {"type": "object", ...})   # or a Grammar, or a list
out = model.generate(**inputs, logits_processor=[proc], max_new_tokens=128)
```

One matcher per batch row; a list of constraints gives each prompt its own (rows expanded by
``num_return_sequences`` or ``num_beams`` share their prompt's). Masks for the whole batch are
filled by one :func:`lexguide.fill_masks` call into a preallocated ``int32`` torch tensor and
applied to the scores in place: on the CPU by the core in one pass (the tensors taken through
DLPack), elsewhere with torch operations on their device. Needs the
``transformers`` extra (``pip install 'lexguide[transformers]'``).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

from lexguide.engine import Grammar, Matcher, TokenizerInfo, fill_masks
from lexguide.errors import MatcherError, TokenRejected
from lexguide.integrations._common import TorchMasker, as_grammar, require

torch = require("torch", "transformers", "transformers")
_transformers = require("transformers", "transformers", "transformers")

__all__ = ["LexguideLogitsProcessor", "tokenizer_info"]

_INFOS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def tokenizer_info(tokenizer: Any,
                   eos_token_id: int | Iterable[int] | None = None) -> TokenizerInfo:
    """:meth:`TokenizerInfo.from_huggingface` of ``tokenizer``, cached per tokenizer object
    and EOS ids (building it walks the vocabulary: ~0.2 s for 49k tokens, ~4 s for 262k)."""
    if isinstance(tokenizer, TokenizerInfo):
        return tokenizer
    eos_key = None if eos_token_id is None else (
        (int(eos_token_id),) if hasattr(eos_token_id, "__index__") else tuple(eos_token_id))
    try:
        per_tokenizer = _INFOS.setdefault(tokenizer, {})
    except TypeError:  # not weak-referenceable or not hashable: no cache
        per_tokenizer = {}
    info = per_tokenizer.get(eos_key)
    if info is None:
        info = TokenizerInfo.from_huggingface(tokenizer, eos_ids=eos_token_id)
        per_tokenizer[eos_key] = info
    return info


class LexguideLogitsProcessor(_transformers.LogitsProcessor):
    """Constrains ``model.generate`` to a JSON Schema, a grammar or a regex.

    Parameters
    ----------
    tokenizer:
        The model's Hugging Face tokenizer (or a ready :class:`lexguide.TokenizerInfo`).
    constraint:
        A JSON Schema (dict), a :class:`lexguide.Grammar` (``Grammar.from_lark``,
        ``from_gbnf``, ``from_regex``, ...), or a list of them, one per prompt of the batch.
    eos_token_id:
        End-of-generation ids the mask allows once the output is complete; default the
        tokenizer's ``eos_token_id``. Give the ids ``generate`` stops on if they differ.
    max_new_tokens:
        The same value as given to ``generate``: in its last 64 tokens the masks keep only
        tokens after which the output can still be completed in time.
    n_threads:
        Threads computing the batch's masks (default: all cores).

    A processor follows one ``generate`` call, token by token (greedy, sampling, beam
    search); call :meth:`reset` (or make a new one) before the next call. Rows that
    finished (EOS, or a stopping criterion: ``generate`` then feeds them the pad token) are
    left alone. Raises :class:`lexguide.errors.MatcherError` when a row's token is not one
    the mask allowed (another processor re-enabled it, or decoding skipped ahead, as assisted
    generation does), or when the grammar reaches a dead end.
    """

    # rows are followed through generate's input_ids; continuous batching has none to follow
    supports_continuous_batching = False

    def __init__(
        self,
        tokenizer: Any,
        constraint: Any,
        *,
        eos_token_id: int | Iterable[int] | None = None,
        max_new_tokens: int | None = None,
        n_threads: int | None = None,
    ) -> None:
        self.info = tokenizer_info(tokenizer, eos_token_id)
        if isinstance(constraint, (list, tuple)):
            if not constraint:
                raise ValueError("the list of constraints is empty")
            self.grammars: list[Grammar] = [as_grammar(c) for c in constraint]
        else:
            self.grammars = [as_grammar(constraint)]
        if max_new_tokens is not None and max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be positive, got {max_new_tokens}")
        self.max_new_tokens = max_new_tokens
        self.n_threads = n_threads
        pad = getattr(tokenizer, "pad_token_id", None)
        self._pad_ids = frozenset(self.info.eos_ids | ({pad} if isinstance(pad, int) else set()))
        self._masker = TorchMasker(torch)
        self.reset()

    def reset(self) -> None:
        """Forget the current generation; the next call starts a new one."""
        self.matchers: list[Matcher] = []
        self._done: list[bool] = []
        self._prev: Any = None  # the input_ids of the previous call, (batch, length)
        self._prompt_len = 0
        self._bitmask: Any = None

    # -- generate's hook ----------------------------------------------------------------
    def __call__(self, input_ids: Any, scores: Any) -> Any:
        """Mask ``scores`` (``(batch, vocab)``) in place for the next token after ``input_ids``
        (``(batch, length)``); returns ``scores``."""
        if input_ids.dim() != 2 or scores.dim() != 2 or input_ids.shape[0] != scores.shape[0]:
            raise ValueError(f"expected input_ids (batch, length) and scores (batch, vocab), got "
                             f"{tuple(input_ids.shape)} and {tuple(scores.shape)}")
        if self._prev is None:
            self._start(input_ids)
        else:
            self._advance(input_ids)
        self._prev = input_ids
        active = [r for r, done in enumerate(self._done) if not done]
        if not active:
            return scores
        matchers = [self.matchers[r] for r in active]
        buf = self._bitmask[: len(active)]
        remaining = None
        if self.max_new_tokens is not None:
            left = self.max_new_tokens - (input_ids.shape[1] - self._prompt_len)
            remaining = [max(1, left)] * len(active)
        fill_masks(matchers, buf, self.n_threads, remaining)
        empty = (~buf.any(dim=1)).nonzero().flatten().tolist()
        if empty:
            raise MatcherError(
                f"batch row {active[empty[0]]}: the grammar cannot continue (no token is "
                "allowed and the output is not complete)"
            )
        self._masker.apply(scores, buf, None if len(active) == len(self._done) else active)
        return scores

    def _start(self, input_ids: Any) -> None:
        batch = input_ids.shape[0]
        n = len(self.grammars)
        if batch % n:
            raise ValueError(f"{n} constraints for a batch of {batch} rows: give one per prompt")
        per = batch // n  # rows per prompt (num_return_sequences, num_beams)
        self.matchers = [Matcher(self.grammars[r // per], self.info) for r in range(batch)]
        self._done = [False] * batch
        self._prompt_len = input_ids.shape[1]
        self._bitmask = torch.zeros((batch, self.info.n_words), dtype=torch.int32)

    def _advance(self, input_ids: Any) -> None:
        prev = self._prev
        if input_ids.shape[0] != prev.shape[0] or input_ids.shape[1] != prev.shape[1] + 1:
            raise MatcherError(
                f"input_ids went from {tuple(prev.shape)} to {tuple(input_ids.shape)}: the "
                "processor follows one generation token by token (assisted generation is not "
                "supported); call reset() or make a new processor for each generate() call"
            )
        if not torch.equal(input_ids[:, :-1], prev):
            self._reorder(input_ids[:, :-1], prev)
        for r, token in enumerate(input_ids[:, -1].tolist()):
            if self._done[r]:
                continue
            matcher = self.matchers[r]
            try:
                matcher.consume(token)
            except TokenRejected:
                if token in self._pad_ids:  # finished by a stopping criterion, now padded
                    self._done[r] = True
                    continue
                raise MatcherError(
                    f"batch row {r}: token {token} at position {input_ids.shape[1] - 1} is not "
                    "allowed by the grammar (was the mask undone by another logits processor?)"
                ) from None
            if token in self.info.eos_ids:
                self._done[r] = True

    def _reorder(self, current: Any, prev: Any) -> None:
        """Beam search reordered the rows: each row continues the previous row it extends."""
        same = (current[:, None, :] == prev[None, :, :]).all(dim=-1)  # (batch, batch)
        matchers, done = self.matchers, self._done
        new_matchers: list[Matcher] = []
        new_done: list[bool] = []
        for r in range(current.shape[0]):
            sources = same[r].nonzero().flatten().tolist()
            if not sources:
                raise MatcherError(
                    f"batch row {r} does not continue any sequence of the previous step: the "
                    "processor follows one generation; call reset() for a new one"
                )
            s = r if r in sources else sources[0]
            new_matchers.append(matchers[s] if s == r else matchers[s].clone())
            new_done.append(done[s])
        self.matchers, self._done = new_matchers, new_done

    def __repr__(self) -> str:
        return (f"LexguideLogitsProcessor(rows={len(self.matchers)}, "
                f"grammars={len(self.grammars)}, vocab={self.info.vocab_size})")
