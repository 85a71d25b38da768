"""The vocabulary side of ``uniqueItems`` (:mod:`lexguide.engine.unique_items`): the tokens
that can close a string item (:class:`QuoteTokens`) and the tokens by the JSON bytes they hold
(:class:`JsonTokenClasses`), built once per tokenizer, each a pass over the vocabulary."""

from __future__ import annotations

import numpy as np

from lexguide.jsonschema.unique_count import canonical_prefix, must_escape

__all__ = ["MAX_SLICES", "JsonTokenClasses", "QuoteTokens"]

_OPEN, _CLOSE, _END_BRACE, _COMMA = 0x5B, 0x5D, 0x7D, 0x2C
_WHITESPACE = frozenset(b" \t\n\r")
#: recorded values whose canonical slices :meth:`QuoteTokens.slice_ids` keeps at most
MAX_SLICES = 100_000


class QuoteTokens:
    """The tokens of a vocabulary holding ``"`` bytes, and how many: the only tokens that can
    close a string item. ``heads`` maps the text before the first ``"`` of each token with at
    most two ``"`` and a plain head (no backslash, whole UTF-8) to those tokens; ``other_ids``
    are the rest. Built once per tokenizer (one pass over the vocabulary)."""

    __slots__ = ("_backslash", "_by_bytes", "_classes", "_slices", "counts", "heads", "ids", "most", "other_ids",
                 "special_ids", "token_bytes")

    def __init__(self, token_bytes: tuple[bytes, ...], special_ids: frozenset[int]) -> None:
        ids = [i for i, tb in enumerate(token_bytes) if b'"' in tb and i not in special_ids]
        self.ids = np.asarray(ids, dtype=np.int64)
        self.counts = np.asarray([token_bytes[i].count(b'"') for i in ids], dtype=np.int64)
        self.most = int(self.counts.max()) if ids else 0
        self.token_bytes = token_bytes
        self.heads: dict[str, list[int]] = {}
        other = []
        for i, n in zip(ids, self.counts.tolist()):
            head = token_bytes[i].split(b'"', 1)[0]
            text = None
            if n <= 2 and b"\\" not in head:
                try:
                    text = head.decode("utf-8")
                except UnicodeDecodeError:
                    pass
            if text is None:
                other.append(i)
            else:
                self.heads.setdefault(text, []).append(i)
        self.other_ids = np.asarray(other, dtype=np.int64)
        self._by_bytes: dict[bytes, list[int]] | None = None
        self._backslash: np.ndarray | None = None
        self._slices: dict[tuple[str, bytes], tuple[tuple[int, ...], bool]] = {}
        self.special_ids = special_ids
        self._classes: JsonTokenClasses | None = None

    @property
    def json_classes(self) -> JsonTokenClasses:
        """The vocabulary's tokens by the JSON bytes they hold (built on first use)."""
        got = self._classes
        if got is None:
            got = self._classes = JsonTokenClasses(self.token_bytes, self.special_ids)
        return got

    def slice_ids(self, text: str, partial: bytes) -> tuple[tuple[int, ...], bool]:
        """The tokens whose bytes begin the canonical spelling of ``text`` after ``partial``
        (its first bytes, already written), up to its first character that needs an escape;
        and whether ``text`` has such a character. Memoised (at most :data:`MAX_SLICES`
        entries)."""
        key = (text, partial)
        got = self._slices.get(key)
        if got is None:
            spelled = canonical_prefix(text)
            ids: list[int] = []
            if spelled.startswith(partial):
                rest = spelled[len(partial):]
                by_bytes = self.by_bytes
                for k in range(1, len(rest) + 1):
                    ids.extend(by_bytes.get(rest[:k], ()))
            if len(self._slices) >= MAX_SLICES:
                self._slices.clear()
            got = self._slices[key] = (tuple(ids), any(must_escape(c) for c in text))
        return got

    @property
    def backslash_ids(self) -> np.ndarray:
        """The tokens holding a backslash (built on first use)."""
        got = self._backslash
        if got is None:
            got = self._backslash = np.asarray(
                [i for i, tb in enumerate(self.token_bytes)
                 if b"\\" in tb and i not in self.special_ids], dtype=np.int64)
        return got

    @property
    def by_bytes(self) -> dict[bytes, list[int]]:
        """Every token id by its bytes (built on first use: one pass over the vocabulary)."""
        got = self._by_bytes
        if got is None:
            got = {}
            for i, tb in enumerate(self.token_bytes):
                if tb:
                    got.setdefault(tb, []).append(i)
            self._by_bytes = got
        return got


_NUMBER_BYTES = frozenset(b"0123456789.eE+-")
_LITERAL_BYTES = frozenset(b"truefalsn")


class JsonTokenClasses:
    """Token bitmasks (``uint32`` words, as a mask) by the bytes a token holds, for
    :meth:`UniqueItems._array_bad_ids`: ``quote`` (a ``"``), ``quote2`` (two), ``nested`` (a
    bracket other than ``{``), ``comma``, ``inner_space`` (whitespace after another byte),
    ``space`` (whitespace), ``trailing_space`` (ends with whitespace: in an indented layout
    the whitespace before a closing bracket commits to it), ``literal`` (starts ``t``, ``f``
    or ``n`` after whitespace, or is all literal letters), ``zero_start`` (starts ``0`` or
    ``-`` after whitespace), ``number`` (all number bytes): with the delimiters, the tokens
    that can leave an item that can only become a recorded literal or zero; ``opens_two``
    counts the tokens that may hold a ``[`` and two whole items after it
    (:func:`_holds_two_items`; the only ones that can close a duplicate outside a marked
    array, none in most vocabularies). Special tokens are in none.
    Built once per tokenizer (one pass over the vocabulary)."""

    __slots__ = ("comma", "inner_space", "literal", "nested", "number", "opens_two",
                 "opens_two_words", "quote", "quote2", "space", "trailing_space", "zero_start")

    def __init__(self, token_bytes: tuple[bytes, ...], special_ids: frozenset[int]) -> None:
        n = len(token_bytes)
        names = [name for name in self.__slots__ if not name.startswith("opens_two")]
        flags = {name: np.zeros(n, dtype=bool) for name in names}
        opens = []
        for i, tb in enumerate(token_bytes):
            if not tb or i in special_ids:
                continue
            held = set(tb)
            quotes = tb.count(b'"')
            flags["quote"][i] = quotes >= 1
            flags["quote2"][i] = quotes >= 2
            flags["nested"][i] = _CLOSE in held or _END_BRACE in held or _OPEN in held
            flags["comma"][i] = _COMMA in held
            body = tb.lstrip(b" \t\n\r")
            flags["space"][i] = len(body) < len(tb) or not held.isdisjoint(_WHITESPACE)
            flags["inner_space"][i] = bool(body) and not set(body).isdisjoint(_WHITESPACE)
            flags["trailing_space"][i] = tb[-1] in _WHITESPACE
            flags["literal"][i] = bool(body) and (body[0] in b"tfn" or held <= _LITERAL_BYTES)
            flags["zero_start"][i] = bool(body) and body[0] in b"-0"
            flags["number"][i] = held <= _NUMBER_BYTES
            if _OPEN in held and _holds_two_items(tb):
                opens.append(i)
        for name, bits in flags.items():
            setattr(self, name, _pack(bits))
        self.opens_two = len(opens)
        self.opens_two_words = _pack(np.isin(np.arange(n), opens))


_VALUE_STARTS = frozenset(b'-0123456789tfn"[{')


def _holds_two_items(tb: bytes) -> bool:
    """Whether ``tb`` may hold a ``[`` then two whole items (the first ended by a ``,``, the
    second started and ended): a superset, by the bytes alone."""
    at = tb.find(b"[")
    while at >= 0:
        parts = tb[at + 1:].split(b",")
        if len(parts) >= 2:
            first, second = (p.lstrip(b" \t\n\r") for p in parts[:2])
            if first[:1] and first[0] in _VALUE_STARTS and second[:1] and \
                    second[0] in _VALUE_STARTS and (len(parts) > 2 or not set(
                        second[1:]).isdisjoint(b']}"' + bytes(_WHITESPACE))):
                return True
        at = tb.find(b"[", at + 1)
    return False


def _pack(bits: np.ndarray) -> np.ndarray:
    """bool per token -> mask words (bit ``t & 31`` of word ``t >> 5``)."""
    n_words = (len(bits) + 31) // 32
    padded = np.zeros(n_words * 32, dtype=bool)
    padded[:len(bits)] = bits
    return np.packbits(padded, bitorder="little").view("<u4").astype(np.uint32)
