"""``TokenizerInfo``: what the engine needs of a vocabulary.

Raw bytes of every token (never decoded text), the end-of-generation ids, the control tokens
(which never match grammar text), and an optional ``encode`` function used only to tokenize
forced text canonically. The compiled core keeps its own copy of the token bytes and their
prefix trees (``csrc/engine/trie.h``, ``vocab.h``), built once here (or loaded from the on-disk
cache, :mod:`lexguide.engine.vocab_cache`) and shared by every grammar.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from lexguide import _core
from lexguide.engine.vocab_cache import load_or_build
from lexguide.errors import TokenizerError

__all__ = ["TokenizerInfo"]


class TokenizerInfo:
    """Token byte strings plus EOS/special ids, preprocessed once per tokenizer (≈0.2 s / 262k,
    a few ms from the on-disk cache).

    Parameters
    ----------
    token_bytes:
        ``token_bytes[i]`` is the exact byte string token ``i`` contributes to the output.
    eos_ids:
        End-of-generation token ids; allowed exactly when the grammar is complete.
    special_ids:
        Control tokens: never allowed by grammar text (only by ``<|name|>``/``<[id]>``).
    special_names:
        Text of special tokens (``"<|im_end|>"`` → id) for the Lark ``<|name|>`` syntax.
    encode:
        Optional ``encode(text) -> list[int]`` without BOS, for canonical forced tokens.
    cache:
        The on-disk cache of the preprocessed vocabulary (:mod:`lexguide.engine.vocab_cache`):
        ``None`` (default) uses it for vocabularies of 8,192 tokens or more, in
        ``$LEXGUIDE_VOCAB_CACHE``, else ``$LEXGUIDE_CACHE/vocab``, else
        ``$XDG_CACHE_HOME/lexguide/vocab`` or ``~/.cache/lexguide/vocab``, unless
        ``LEXGUIDE_VOCAB_CACHE=0``; ``False`` never; ``True`` or a directory always (any size).
        ``cache_status`` then says what happened (``"off"``, ``"loaded"``, ``"written"``,
        ``"unwritable"``) and ``cache_file`` names the file.
    """

    def __init__(
        self,
        token_bytes: Sequence[bytes],
        eos_ids: Iterable[int],
        special_ids: Iterable[int] = (),
        *,
        special_names: dict[str, int] | None = None,
        encode: Callable[[str], list[int]] | None = None,
        cache: bool | str | os.PathLike | None = None,
    ) -> None:
        self.vocab_size = len(token_bytes)
        if self.vocab_size == 0:
            raise TokenizerError("empty vocabulary")
        # a tuple (of bytes) is untracked by the garbage collector: a list this long would be
        # traversed by every full collection
        tb = token_bytes if type(token_bytes) is tuple else tuple(token_bytes)
        # a token over the core's length limit, > 4 GiB of bytes: CoreVocabularyError, a
        # TokenizerError naming the token
        try:
            packed = _core.TokenBytes(tb)  # exact bytes only: no copy of each
        except TypeError:
            tb = tuple(b if type(b) is bytes else bytes(b) for b in tb)
            packed = _core.TokenBytes(tb)
        self.token_bytes: tuple[bytes, ...] = tb
        self.eos_ids = frozenset(int(i) for i in eos_ids)
        self.special_ids = frozenset(int(i) for i in special_ids) | self.eos_ids
        for i in self.eos_ids | self.special_ids:
            if not 0 <= i < self.vocab_size:
                raise TokenizerError(f"special/eos token id {i} outside vocabulary of {self.vocab_size}")
        self.special_names = dict(special_names or {})
        self.encode = encode
        self.n_words = (self.vocab_size + 31) // 32
        self.max_len = packed.max_len or 1
        self._ids_by_bytes: dict[bytes, int] | None = None
        # the compiled core's copy: token bytes and the prefix trees it walks (built here, with
        # the rest of the preprocessing, rather than inside the first mask that needs it)
        self._vocab, self.cache_file, self.cache_status = load_or_build(
            packed, sorted(self.eos_ids), sorted(self.special_ids - self.eos_ids), cache)
        self._compiled: dict[int, tuple] = {}  # id(grammar) -> (grammar, MaskEngine)
        self._lock = threading.RLock()

    @classmethod
    def from_token_bytes(
        cls,
        token_bytes: Sequence[bytes],
        eos_ids: Iterable[int],
        special_ids: Iterable[int] = (),
        **kwargs,
    ) -> TokenizerInfo:
        """From a plain list of each token's raw bytes (any tokenizer: HF, llama.cpp, ...)."""
        return cls(token_bytes, eos_ids, special_ids, **kwargs)

    @classmethod
    def from_tokenizer(cls, tokenizer, *, cache: bool | str | os.PathLike | None = None) -> TokenizerInfo:
        """From a :class:`lexguide.Tokenizer` (raw bytes, EOG ids, control tokens, encode);
        ``cache`` as for the constructor."""
        specials = set(tokenizer.special_ids)
        names = {tokenizer.token_text(i): i for i in specials}
        return cls(
            tokenizer.all_token_bytes(),
            tokenizer.eog_ids,
            specials,
            special_names=names,
            encode=lambda text: tokenizer.encode(text, add_special=False),
            cache=cache,
        )

    @classmethod
    def from_huggingface(
        cls,
        tokenizer: Any,
        *,
        eos_ids: int | Iterable[int] | None = None,
        vocab_size: int | None = None,
        cache: bool | str | os.PathLike | None = None,
    ) -> TokenizerInfo:
        """From a Hugging Face tokenizer (``transformers`` fast or slow, or a
        ``tokenizers.Tokenizer``): byte-level BPE and SentencePiece vocabularies.

        Token bytes come from the tokenizer's decoder pipeline applied to each token
        (:mod:`lexguide.tokenizer.huggingface`); special added tokens become control tokens
        (named for the Lark ``<|name|>`` syntax).

        Parameters
        ----------
        eos_ids:
            End-of-generation ids; default the tokenizer's ``eos_token_id``. Pass the model's
            ``generation_config.eos_token_id`` when it lists more.
        vocab_size:
            The width of the model's logits when it exceeds the tokenizer's vocabulary
            (padded embedding tables): the extra ids are never allowed.
        cache:
            The on-disk vocabulary cache, as for the constructor.

        Raises :class:`TokenizerError` for an unsupported decoder, a missing EOS id or a
        ``vocab_size`` smaller than the tokenizer's.
        """
        from lexguide.tokenizer.huggingface import huggingface_vocab

        hf = huggingface_vocab(tokenizer, eos_ids)
        token_bytes = list(hf.token_bytes)
        special = set(hf.special_ids)
        if vocab_size is not None:
            if vocab_size < len(token_bytes):
                raise TokenizerError(
                    f"vocab_size={vocab_size} is smaller than the tokenizer's "
                    f"{len(token_bytes)} ids"
                )
            special.update(range(len(token_bytes), vocab_size))
            token_bytes += [b""] * (vocab_size - len(token_bytes))
        if hasattr(tokenizer, "encode") and hasattr(tokenizer, "convert_ids_to_tokens"):
            def encode(text: str) -> list[int]:  # transformers
                return list(tokenizer.encode(text, add_special_tokens=False))
        else:
            def encode(text: str) -> list[int]:  # tokenizers.Tokenizer
                return list(tokenizer.encode(text, add_special_tokens=False).ids)
        return cls(token_bytes, hf.eos_ids, special, special_names=hf.special_names, encode=encode,
                   cache=cache)

    @property
    def ids_by_bytes(self) -> dict[bytes, int]:
        """Byte string -> lowest token id with those bytes (built on first use)."""
        if self._ids_by_bytes is None:
            table: dict[bytes, int] = {}
            special = self.special_ids
            for i in range(self.vocab_size - 1, -1, -1):
                if i not in special and self.token_bytes[i]:
                    table[self.token_bytes[i]] = i
            self._ids_by_bytes = table
        return self._ids_by_bytes

    def attached(self, table: dict, owner: object, factory: Callable[[], object], max_entries: int):
        """Per-tokenizer state belonging to ``owner`` (a grammar, a lexer DFA), created on first
        use, kept for the ``max_entries`` most recently created owners."""
        key = id(owner)
        entry = table.get(key)
        if entry is None or entry[0] is not owner:
            with self._lock:
                entry = table.get(key)
                if entry is None or entry[0] is not owner:
                    entry = (owner, factory())
                    table[key] = entry
                    while len(table) > max_entries:
                        del table[next(iter(table))]
        return entry[1]

    def mask_from_ids(self, token_ids: np.ndarray) -> np.ndarray:
        """A packed uint32 bitmask (``ceil(V/32)`` words) with the given token ids set."""
        flags = np.zeros(self.n_words * 32, dtype=bool)
        flags[token_ids] = True
        return np.packbits(flags, bitorder="little").view("<u4").astype(np.uint32)

    def __repr__(self) -> str:
        return f"TokenizerInfo(vocab_size={self.vocab_size}, eos={sorted(self.eos_ids)})"

