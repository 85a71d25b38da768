"""lexguide constraints for llama-cpp-python: a logits processor for
``Llama.create_completion`` and ``Llama.create_chat_completion``.

```python
from llama_cpp import Llama, LogitsProcessorList
from lexguide.integrations.llama_cpp import LexguideLogitsProcessor

llm = Llama(model_path="model.gguf")
proc = LexguideLogitsProcessor(llm, {"type": "object", ...})      # or a Grammar
out = llm.create_chat_completion(messages, logits_processor=LogitsProcessorList([proc]))
```

The vocabulary is read from llama.cpp itself (``llama_token_to_piece`` of every token, its
token attributes and EOG flags), so the masks index exactly the model's logits. Needs the
``llama-cpp`` extra (``pip install 'lexguide[llama-cpp]'``).
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any

import numpy as np

from lexguide.engine import Matcher, TokenizerInfo
from lexguide.errors import MatcherError, TokenRejected
from lexguide.integrations._common import as_grammar, require

llama_cpp = require("llama_cpp", "llama-cpp", "llama_cpp")

__all__ = ["LexguideLogitsProcessor", "tokenizer_info"]

_INFOS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_SPECIAL_ATTRS = (llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
                  | llama_cpp.LLAMA_TOKEN_ATTR_UNUSED)


def _piece(vocab: Any, token: int, special: bool, buf: Any) -> bytes:
    n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, special)
    if n < 0:  # the buffer is too small: -n bytes are needed
        bigger = ctypes.create_string_buffer(-n)
        n = llama_cpp.llama_token_to_piece(vocab, token, bigger, -n, 0, special)
        return bigger.raw[:n]
    return buf.raw[:n]


def tokenizer_info(llama: Any) -> TokenizerInfo:
    """The :class:`TokenizerInfo` of a ``llama_cpp.Llama``'s vocabulary, cached per model.

    Token bytes are ``llama_token_to_piece(special=False)`` (control tokens give ``b""``);
    control, unknown and unused tokens are special (named by their text for Lark's
    ``<|name|>``); EOS ids are the tokens llama.cpp counts as end of generation; forced text
    is tokenized by ``Llama.tokenize``. Costs one call into llama.cpp per token (~0.1 s per
    50k tokens).
    """
    info = _INFOS.get(llama)
    if info is not None:
        return info
    vocab = llama._model.vocab
    n_vocab = llama.n_vocab()
    buf = ctypes.create_string_buffer(64)
    token_bytes: list[bytes] = []
    special: list[int] = []
    names: dict[str, int] = {}
    eog: list[int] = []
    for t in range(n_vocab):
        token_bytes.append(_piece(vocab, t, False, buf))
        if llama_cpp.llama_vocab_get_attr(vocab, t) & _SPECIAL_ATTRS:
            special.append(t)
            names.setdefault(_piece(vocab, t, True, buf).decode("utf-8", "replace"), t)
        if llama_cpp.llama_vocab_is_eog(vocab, t):
            eog.append(t)
    if not eog:
        eos = llama.token_eos()
        eog = [eos] if 0 <= eos < n_vocab else []

    def encode(text: str) -> list[int]:
        return list(llama.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    info = TokenizerInfo(token_bytes, eog, special, special_names=names, encode=encode)
    try:
        _INFOS[llama] = info
    except TypeError:  # pragma: no cover - Llama objects are weak-referenceable
        pass
    return info


class LexguideLogitsProcessor:
    """A llama-cpp-python logits processor constraining one completion.

    Parameters
    ----------
    llama:
        The ``llama_cpp.Llama`` that generates (its vocabulary is read once and cached).
    constraint:
        A JSON Schema (dict) or a :class:`lexguide.Grammar`.
    max_tokens:
        The completion's ``max_tokens``, if any: in its last 64 tokens the mask keeps only
        tokens after which the output can still be completed in time.
    force_canonical:
        Where the grammar forces the next bytes (a property name, a closing bracket), allow
        only the first of its canonical tokens (:meth:`Matcher.forced_tokens`) instead of
        every token spelling those bytes. llama-cpp-python's completion API runs the model
        for every token, so forcing cannot skip forward passes here; it keeps the
        tokenization the model was trained on.

    llama-cpp-python calls the processor with every token so far (the prompt, then each
    sampled token) and the next token's logits; the first call fixes the prompt length. One
    processor per completion: :meth:`reset` before reusing it. Raises
    :class:`lexguide.errors.MatcherError` when a sampled token is not one the mask allowed,
    or the grammar reaches a dead end.
    """

    def __init__(self, llama: Any, constraint: Any, *, max_tokens: int | None = None,
                 force_canonical: bool = True) -> None:
        self.info = tokenizer_info(llama)
        self.grammar = as_grammar(constraint)
        self.max_tokens = max_tokens
        self.force_canonical = force_canonical
        self._n_vocab = self.info.vocab_size
        self.reset()

    def reset(self) -> None:
        """Start over: the next call begins a new completion."""
        self.matcher = Matcher(self.grammar, self.info)
        self._prompt_len: int | None = None
        self.token_ids: list[int] = []  # the completion's tokens so far, as consumed
        self._allowed = np.zeros(self._n_vocab, dtype=bool)

    @property
    def n_generated(self) -> int:
        """Tokens of the completion consumed so far (EOS included)."""
        return self.matcher.n_consumed

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        """Set disallowed entries of ``scores`` (``(n_vocab,)`` float32, possibly strided) to
        ``-inf`` in place for the token after ``input_ids``; returns ``scores``."""
        n = len(input_ids)
        if self._prompt_len is None:
            self._prompt_len = n
        self._sync(input_ids, n)
        allowed = self._allowed_ids()
        scores[~allowed[: len(scores)]] = -np.inf
        if len(scores) > self._n_vocab:
            scores[self._n_vocab:] = -np.inf
        return scores

    def _sync(self, input_ids: Any, n: int) -> None:
        matcher = self.matcher
        done = matcher.n_consumed
        new = n - self._prompt_len - done
        if new < 0:
            raise MatcherError(
                f"the token sequence shrank ({n} tokens after {self._prompt_len + done}): a "
                "processor follows one completion; call reset() or make a new one"
            )
        for i in range(n - new, n):
            token = int(input_ids[i])
            try:
                matcher.consume(token)
            except TokenRejected:
                raise MatcherError(
                    f"token {token} at position {i} is not allowed by the grammar (was the "
                    "mask undone by another logits processor?)"
                ) from None
            self.token_ids.append(token)

    def _allowed_ids(self) -> np.ndarray:
        matcher = self.matcher
        remaining = None
        if self.max_tokens is not None:
            remaining = max(1, self.max_tokens - matcher.n_consumed)
        allowed = self._allowed
        if self.force_canonical:
            forced = matcher.forced_tokens()
            if forced:
                allowed[:] = False
                allowed[forced[0]] = True
                return allowed
        mask = matcher.compute_mask(remaining)
        bits = np.unpackbits(mask.view(np.uint8), bitorder="little")
        allowed[:] = bits[: self._n_vocab].astype(bool)
        if not allowed.any():
            if matcher.is_accepting():  # EOS was consumed (llama-cpp-python stops there)
                allowed[sorted(self.info.eos_ids)] = True
                return allowed
            raise MatcherError("the grammar cannot continue: no token is allowed and the "
                               "output is not complete")
        return allowed
