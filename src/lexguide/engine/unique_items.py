"""``uniqueItems`` of string items, enforced by the matcher instead of the grammar.

A grammar cannot remember the strings already written, so the JSON Schema compiler builds such
an array as an ordinary array and marks its item lexeme ``unique_item``
(:class:`lexguide.grammar.ir.Lexeme`); this module keeps, beside the parse state, the decoded
values of the completed items of the array being written, and rejects a byte sequence that
closes an item equal to an earlier one.

Item boundaries come from the bytes and one parser query: a ``"`` read while no item is open
starts an item when, after it, the lexer is inside a lexeme that began where the parser expects
a marked lexeme (``unique_item`` among :meth:`expected` of the state's set). The item then ends
at its first unescaped ``"`` (it is a JSON string); its value is the decoded string (JSON
equality: ``"\\u0041"`` equals ``"A"``). After an item only whitespace, ``,`` (the next item
of the same array) or ``]`` (the end of the array: the values are dropped) can follow. Only
string items are marked, and a string item holds no bracket, so one set of values is enough:
marked arrays are never nested directly inside one another.

When a string could be an item of a marked array in one parse and something else in another
(a union of a ``uniqueItems`` array with an array that allows duplicates), it is held to
uniqueness: stricter than the schema there, never looser.

Cost: nothing for grammars without marked lexemes (the matcher does not create a tracker). Else
per consumed token, a scan of its bytes plus one parser query per ``"`` outside an item. Per
mask, nothing while no value is recorded and no item is open (unless a vocabulary token holds
four ``"``); inside an item, one dictionary probe per recorded value that extends the item so
far, plus a scan of the few allowed tokens whose close the probe does not decide (three
``"``, or a backslash before the first); between items, a scan of the allowed tokens holding
two ``"`` or more (:meth:`UniqueItems.duplicate_ids`).
"""

from __future__ import annotations

import json
from typing import NamedTuple

import numpy as np

from lexguide.engine.lexparser import LexParser, ParseState

__all__ = ["EMPTY", "UniqueItems", "UniqueState", "decode_item"]

_QUOTE, _CLOSE = 0x22, 0x5D
_WHITESPACE = frozenset(b" \t\n\r")


class UniqueState(NamedTuple):
    """What the matcher remembers of the marked array being written. Immutable: one per
    consumed token, so rollback and clone cost nothing more."""

    values: frozenset[str]  # decoded values of its completed items
    item: bytes | None  # raw bytes of the item being read, from its opening quote; None outside
    after_item: bool  # an item just ended: whitespace, then "," or "]"


EMPTY = UniqueState(frozenset(), None, False)


def decode_item(raw: bytes) -> str:
    """The value of a complete JSON string ``raw`` (quotes included); escapes decoded, lone
    surrogates kept as such."""
    return json.loads(raw.decode("utf-8", errors="surrogatepass"))


def _escaped(raw: bytes) -> bool:
    """Whether a byte after ``raw`` (an open string) is escaped: an odd run of backslashes."""
    return (len(raw) - len(raw.rstrip(b"\\"))) % 2 == 1


class UniqueItems:
    """The marked lexemes of one grammar and the scan over bytes. Shared, stateless."""

    __slots__ = ("_items", "_lp")

    def __init__(self, lp: LexParser, item_lexemes: frozenset[int]) -> None:
        self._lp = lp
        self._items = item_lexemes

    def starts_item(self, after_quote: ParseState) -> bool:
        """Whether the ``"`` that led to ``after_quote`` opens a marked item."""
        return after_quote.pending and not self._items.isdisjoint(
            self._lp.parser.expected(after_quote.set_id))

    def feed(self, st: UniqueState, state: ParseState, data: bytes) -> UniqueState | None:
        """``st`` after the bytes ``data``, read from parse state ``state`` (``data`` must be
        allowed there). None when ``data`` closes an item equal to an earlier item of its
        array. Pure; one parser query per ``"`` outside an item."""
        values, item, after = st
        lp = self._lp
        done = 0  # ``state`` is the parse state after data[:done]
        for i, b in enumerate(data):
            if item is not None:
                if b == _QUOTE and not _escaped(item):
                    value = decode_item(item + b'"')
                    if value in values:
                        return None
                    values, item, after = values | {value}, None, True
                else:
                    item += bytes((b,))
            elif after and b in _WHITESPACE:
                continue
            elif b == _QUOTE:
                after = False
                nxt = lp.advance_bytes(state, data[done : i + 1])
                if nxt is None:  # not a prefix of the grammar: nothing more to track
                    return UniqueState(values, None, False)
                state, done = nxt, i + 1
                if self.starts_item(nxt):
                    item = b'"'
            else:
                if after and b == _CLOSE:
                    values = frozenset()
                after = False
        return UniqueState(values, item, after)

    def may_mask(self, st: UniqueState, quotes: QuoteTokens) -> bool:
        """Whether some token could close an item equal to an earlier one from ``st``."""
        need = _quotes_needed(st)
        return need <= quotes.most

    def duplicate_ids(self, st: UniqueState, state: ParseState, mask: np.ndarray,
                      quotes: QuoteTokens) -> list[int]:
        """Tokens allowed by ``mask`` that would close an item equal to an earlier one (or
        two equal items) from ``state``.

        Inside an item whose bytes so far decode to ``p``, a token whose text before its first
        ``"`` is plain (no backslash, whole UTF-8) and that holds at most two ``"`` closes the
        item with the value ``p + head``: those tokens are found by looking up, for each
        recorded value ``p + h``, the tokens of head ``h`` (one dictionary probe per value).
        Every other token that can close an item here is scanned by :meth:`feed`."""
        need = _quotes_needed(st)
        if need > quotes.most:
            return []
        bad: list[int] = []
        scan = quotes.ids[quotes.counts >= need]
        if st.item is not None and st.values:
            prefix = _decoded_prefix(st.item)
            if prefix is not None:
                heads = quotes.heads
                n = len(prefix)
                for v in st.values:
                    if v.startswith(prefix):
                        bad.extend(heads.get(v[n:], ()))
                if bad:
                    ids = np.asarray(bad, dtype=np.int64)
                    bad = ids[_allowed(mask, ids)].tolist()
                scan = quotes.other_ids  # tokens whose close the heads do not decide
        if not len(scan):
            return bad
        token_bytes = quotes.token_bytes
        return bad + [t for t in scan[_allowed(mask, scan)].tolist()
                      if self.feed(st, state, token_bytes[t]) is None]


def _allowed(mask: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """bool per id in ``ids``: whether ``mask`` allows it."""
    return ((mask[ids >> 5] >> (ids & 31).astype(np.uint32)) & 1).astype(bool)


def _decoded_prefix(item: bytes) -> str | None:
    """The value of the open item ``item`` so far, or None when it ends inside an escape or a
    UTF-8 sequence (its next bytes do not simply append characters)."""
    if _escaped(item):
        return None
    try:
        return decode_item(item + b'"')
    except ValueError:
        return None


def _quotes_needed(st: UniqueState) -> int:
    """The fewest ``"`` bytes a token needs to close an item equal to another from ``st``: the
    close of the open item against a recorded value (1), a whole item against one (2), or two
    equal items inside the token (3 when one is open, else 4)."""
    if st.item is not None:
        return 1 if st.values else 3
    return 2 if st.values else 4


class QuoteTokens:
    """The tokens of a vocabulary holding ``"`` bytes, and how many: the only tokens that can
    close a string item. ``heads`` maps the text before the first ``"`` of each token with at
    most two ``"`` and a plain head (no backslash, whole UTF-8) to those tokens; ``other_ids``
    are the rest. Built once per tokenizer (one pass over the vocabulary)."""

    __slots__ = ("counts", "heads", "ids", "most", "other_ids", "token_bytes")

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
