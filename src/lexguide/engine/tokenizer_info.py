"""``TokenizerInfo``: what the engine needs of a vocabulary, preprocessed for vectorised walks.

Raw bytes of every token (never decoded text), the end-of-generation ids, the control tokens
(which never match grammar text), and an optional ``encode`` function used only to tokenize
forced text canonically. Text tokens are kept as a padded byte matrix with lengths and
first-byte buckets, so walking candidate tokens through a lexer DFA is one numpy gather per
byte position (see DESIGN.md, "Mask computation").
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np

from lexguide.errors import TokenizerError

__all__ = ["TokenizerInfo"]


class TokenizerInfo:
    """Token byte strings plus EOS/special ids, preprocessed once per tokenizer (≈0.2 s / 262k).

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
    """

    def __init__(
        self,
        token_bytes: Sequence[bytes],
        eos_ids: Iterable[int],
        special_ids: Iterable[int] = (),
        *,
        special_names: dict[str, int] | None = None,
        encode: Callable[[str], list[int]] | None = None,
    ) -> None:
        self.vocab_size = len(token_bytes)
        if self.vocab_size == 0:
            raise TokenizerError("empty vocabulary")
        self.token_bytes: list[bytes] = [bytes(b) for b in token_bytes]
        self.eos_ids = frozenset(int(i) for i in eos_ids)
        self.special_ids = frozenset(int(i) for i in special_ids) | self.eos_ids
        for i in self.eos_ids | self.special_ids:
            if not 0 <= i < self.vocab_size:
                raise TokenizerError(f"special/eos token id {i} outside vocabulary of {self.vocab_size}")
        self.special_names = dict(special_names or {})
        self.encode = encode
        self.n_words = (self.vocab_size + 31) // 32
        self._build_arrays()
        self._compiled: dict[int, object] = {}  # id(grammar) -> compiled engine state

    @classmethod
    def from_token_bytes(
        cls,
        token_bytes: Sequence[bytes],
        eos_ids: Iterable[int],
        special_ids: Iterable[int] = (),
        **kwargs,
    ) -> "TokenizerInfo":
        """From a plain list of each token's raw bytes (any tokenizer: HF, llama.cpp, ...)."""
        return cls(token_bytes, eos_ids, special_ids, **kwargs)

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "TokenizerInfo":
        """From a :class:`lexguide.Tokenizer` (raw bytes, EOG ids, control tokens, encode)."""
        specials = set(tokenizer.special_ids)
        names = {tokenizer.token_text(i): i for i in specials}
        return cls(
            tokenizer.all_token_bytes(),
            tokenizer.eog_ids,
            specials,
            special_names=names,
            encode=lambda text: tokenizer.encode(text, add_special=False),
        )

    def _build_arrays(self) -> None:
        text_ids = [
            i for i, b in enumerate(self.token_bytes) if b and i not in self.special_ids
        ]
        ids = np.asarray(text_ids, dtype=np.int32)
        lengths = np.fromiter((len(self.token_bytes[i]) for i in text_ids), dtype=np.int32, count=len(text_ids))
        order = np.argsort(-lengths, kind="stable")
        ids, lengths = ids[order], lengths[order]
        max_len = int(lengths.max()) if len(lengths) else 1
        joined = np.frombuffer(b"".join(self.token_bytes[i] for i in ids.tolist()), dtype=np.uint8)
        matrix = np.zeros((len(ids), max_len), dtype=np.uint8)
        row_of_byte = np.repeat(np.arange(len(ids), dtype=np.int64), lengths)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        col_of_byte = np.arange(len(joined), dtype=np.int64) - np.repeat(starts, lengths)
        matrix[row_of_byte, col_of_byte] = joined
        self.text_ids = ids  # row -> token id
        self.lengths = lengths  # row -> byte length
        self.matrix = matrix  # (n_rows, max_len) uint8, zero padded
        self.max_len = max_len
        first = matrix[:, 0] if len(ids) else np.zeros(0, np.uint8)
        self.first_byte = first
        self.rows_by_first = [np.nonzero(first == b)[0].astype(np.int64) for b in range(256)]
        self.all_rows = np.arange(len(ids), dtype=np.int64)
        self.ids_by_bytes: dict[bytes, int] = {}
        for i in ids.tolist()[::-1]:  # prefer the lowest id for duplicate byte strings
            self.ids_by_bytes[self.token_bytes[i]] = i

    def mask_from_ids(self, token_ids: np.ndarray) -> np.ndarray:
        """A packed uint32 bitmask (``ceil(V/32)`` words) with the given token ids set."""
        flags = np.zeros(self.n_words * 32, dtype=bool)
        flags[token_ids] = True
        return np.packbits(flags, bitorder="little").view("<u4").astype(np.uint32)

    def __repr__(self) -> str:
        return f"TokenizerInfo(vocab_size={self.vocab_size}, eos={sorted(self.eos_ids)})"
