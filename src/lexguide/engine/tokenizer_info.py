"""``TokenizerInfo``: what the engine needs of a vocabulary, preprocessed for vectorised walks.

Raw bytes of every token (never decoded text), the end-of-generation ids, the control tokens
(which never match grammar text), and an optional ``encode`` function used only to tokenize
forced text canonically. Text tokens are kept as a padded byte matrix with lengths and
first-byte buckets, so walking candidate tokens through a lexer DFA is one numpy gather per
byte position (see DESIGN.md, "Mask computation").
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from lexguide.engine.trie import TokenTrie
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
        # a tuple (of bytes) is untracked by the garbage collector: a list this long would be
        # traversed by every full collection
        self.token_bytes: tuple[bytes, ...] = tuple(
            b if type(b) is bytes else bytes(b) for b in token_bytes  # exact type: no copy
        )
        self.eos_ids = frozenset(int(i) for i in eos_ids)
        self.special_ids = frozenset(int(i) for i in special_ids) | self.eos_ids
        for i in self.eos_ids | self.special_ids:
            if not 0 <= i < self.vocab_size:
                raise TokenizerError(f"special/eos token id {i} outside vocabulary of {self.vocab_size}")
        self.special_names = dict(special_names or {})
        self.encode = encode
        self.n_words = (self.vocab_size + 31) // 32
        self._build_arrays()
        self._compiled: dict[int, tuple] = {}  # id(grammar) -> (grammar, MaskEngine)
        self._walkers: dict[int, tuple] = {}  # id(lexer DFA) -> (dfa, VocabWalker)
        self._lock = threading.RLock()  # factories may attach more state (engine -> walker)

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
    def from_tokenizer(cls, tokenizer) -> TokenizerInfo:
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
        tb = self.token_bytes
        all_lengths = np.fromiter(map(len, tb), dtype=np.int32, count=len(tb))
        is_text = all_lengths > 0
        if self.special_ids:
            is_text[np.fromiter(self.special_ids, dtype=np.int64)] = False
        ids = np.nonzero(is_text)[0]
        order = np.argsort(-all_lengths[ids], kind="stable")
        ids = ids[order].astype(np.int32)
        lengths = all_lengths[ids]
        max_len = int(lengths.max()) if len(lengths) else 1
        joined = np.frombuffer(b"".join(map(tb.__getitem__, ids.tolist())), dtype=np.uint8)
        # column-major: column j holds byte j of every token, so a walk step is a 1-D take
        columns = np.zeros((max_len, len(ids)), dtype=np.uint8)
        row_of_byte = np.repeat(np.arange(len(ids), dtype=np.int64), lengths)
        starts = np.cumsum(lengths, dtype=np.int64) - lengths
        col_of_byte = np.arange(len(joined), dtype=np.int64) - np.repeat(starts, lengths)
        columns[col_of_byte, row_of_byte] = joined
        self.text_ids = ids  # row -> token id
        self.lengths = lengths  # row -> byte length
        self.columns = columns  # (max_len, n_rows) uint8, zero padded
        self.max_len = max_len
        # rows are sorted by decreasing length: n_active[j] rows have a byte at column j
        self.n_active = np.searchsorted(-lengths, -np.arange(max_len), side="left")
        first = columns[0] if len(ids) else np.zeros(0, np.uint8)
        self.first_byte = first
        by_first = np.argsort(first, kind="stable")
        cuts = np.searchsorted(first[by_first], np.arange(257))
        self.rows_by_first = [by_first[cuts[b] : cuts[b + 1]].astype(np.int64) for b in range(256)]
        self.all_rows = np.arange(len(ids), dtype=np.int64)
        row_of_id = np.full(self.vocab_size, -1, dtype=np.int64)
        row_of_id[ids] = np.arange(len(ids))
        self.row_of_id = row_of_id  # token id -> row, -1 for special and empty tokens
        self._ids_by_bytes: dict[bytes, int] | None = None
        self._first_byte_masks: dict[bytes, np.ndarray] = {}
        # built here, with the rest of the preprocessing (Gemma 3's 262k tokens: ~0.2 s),
        # rather than inside the first mask that needs it
        self._trie = TokenTrie(ids, lengths, columns)

    @property
    def trie(self) -> TokenTrie:
        """The text tokens as a prefix tree, for walks over whole first-byte buckets."""
        return self._trie

    def first_byte_mask(self, first: np.ndarray) -> np.ndarray:
        """Packed mask of the text tokens whose first byte ``b`` has ``first[b]`` (cached)."""
        key = first.tobytes()
        hit = self._first_byte_masks.get(key)
        if hit is None:
            hit = self.mask_from_ids(self.text_ids[first[self.first_byte]].astype(np.int64))
            hit.flags.writeable = False
            if len(self._first_byte_masks) >= 256:
                self._first_byte_masks.clear()
            self._first_byte_masks[key] = hit
        return hit

    @property
    def ids_by_bytes(self) -> dict[bytes, int]:
        """Byte string -> lowest token id with those bytes (built on first use)."""
        if self._ids_by_bytes is None:
            table: dict[bytes, int] = {}
            for i in sorted(self.text_ids.tolist(), reverse=True):
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


def set_bits(packed: np.ndarray, ids: np.ndarray) -> None:
    """Set the bits of token ``ids`` (int64) in a packed uint32 mask, in place."""
    np.bitwise_or.at(packed, ids >> 5, np.left_shift(1, ids & 31).astype(np.uint32))


def clear_bits(packed: np.ndarray, ids: np.ndarray) -> None:
    """Clear the bits of token ``ids`` (int64) in a packed uint32 mask, in place."""
    np.bitwise_and.at(packed, ids >> 5, ~np.left_shift(1, ids & 31).astype(np.uint32))
