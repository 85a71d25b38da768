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

Strings of bounded length (``maxLength``, marked :data:`~lexguide.grammar.ir.UNIQUE_BOUNDED_ITEM_NAME`)
can run out of fresh values before their closing quote: the matcher then also masks the tokens
after which the open item can only become a recorded value (:meth:`UniqueItems.dead_ids`,
counting the completions from the lexer state; :mod:`lexguide.jsonschema.unique` says why the
count is enough).

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
from bisect import bisect_left
from typing import NamedTuple

import numpy as np

from lexguide.engine.lexparser import LexParser, ParseState
from lexguide.jsonschema.unique import MAX_BOUNDED_ITEMS

__all__ = ["EMPTY", "UniqueItems", "UniqueState", "decode_item"]

_QUOTE, _CLOSE, _A = 0x22, 0x5D, 0x61
#: completions counted up to this many (:data:`lexguide.jsonschema.unique.MAX_BOUNDED_ITEMS`)
PLENTY = MAX_BOUNDED_ITEMS
#: the longest completion of an item with fewer than PLENTY: the rest of a character (at most
#: 5 bytes of an escape), one more character (at most 6 bytes) and the closing quote
_TAIL = 12
_WHITESPACE = frozenset(b" \t\n\r")


class UniqueState(NamedTuple):
    """What the matcher remembers of the marked array being written. Immutable: one per
    consumed token, so rollback and clone cost nothing more."""

    values: frozenset[str]  # decoded values of its completed items
    item: bytes | None  # raw bytes of the item being read, from its opening quote; None outside
    after_item: bool  # an item just ended: whitespace, then "," or "]"
    raws: frozenset[bytes] = frozenset()  # the completed items as written (quotes included)


EMPTY = UniqueState(frozenset(), None, False)


def decode_item(raw: bytes) -> str:
    """The value of a complete JSON string ``raw`` (quotes included); escapes decoded, lone
    surrogates kept as such."""
    return json.loads(raw.decode("utf-8", errors="surrogatepass"))


def _escaped(raw: bytes) -> bool:
    """Whether a byte after ``raw`` (an open string) is escaped: an odd run of backslashes."""
    return (len(raw) - len(raw.rstrip(b"\\"))) % 2 == 1


class UniqueItems:
    """The marked lexemes of one grammar and the scan over bytes. Shared; its caches (per
    lexer state) only grow, and hold the same answer whichever thread fills them first."""

    __slots__ = ("_comps", "_counts", "_items", "_lp", "bounded")

    def __init__(self, lp: LexParser, item_lexemes: frozenset[int], bounded: bool = False) -> None:
        self._lp = lp
        self._items = item_lexemes
        #: some marked item has a bounded length: an open item may run out of fresh values
        self.bounded = bounded
        self._counts: dict[int, int] = {}
        self._comps: dict[int, list[bytes]] = {}

    def starts_item(self, after_quote: ParseState) -> bool:
        """Whether the ``"`` that led to ``after_quote`` opens a marked item."""
        return after_quote.pending and not self._items.isdisjoint(
            self._lp.parser.expected(after_quote.set_id))

    def feed(self, st: UniqueState, state: ParseState, data: bytes) -> UniqueState | None:
        """``st`` after the bytes ``data``, read from parse state ``state`` (``data`` must be
        allowed there). None when ``data`` closes an item equal to an earlier item of its
        array. Pure; one parser query per ``"`` outside an item."""
        values, item, after, raws = st
        lp = self._lp
        done = 0  # ``state`` is the parse state after data[:done]
        for i, b in enumerate(data):
            if item is not None:
                if b == _QUOTE and not _escaped(item):
                    value = decode_item(item + b'"')
                    if value in values:
                        return None
                    values, after, raws = values | {value}, True, raws | {item + b'"'}
                    item = None
                else:
                    item += bytes((b,))
            elif after and b in _WHITESPACE:
                continue
            elif b == _QUOTE:
                after = False
                nxt = lp.advance_bytes(state, data[done : i + 1])
                if nxt is None:  # not a prefix of the grammar: nothing more to track
                    return UniqueState(values, None, False, raws)
                state, done = nxt, i + 1
                if self.starts_item(nxt):
                    item = b'"'
            else:
                if after and b == _CLOSE:
                    values, raws = frozenset(), frozenset()
                after = False
        return UniqueState(values, item, after, raws)

    def may_mask(self, st: UniqueState, quotes: QuoteTokens) -> bool:
        """Whether some token could close an item equal to an earlier one from ``st``, or
        (bounded items) lead into an item whose every completion is a recorded value."""
        return _quotes_needed(st) <= quotes.most or (self.bounded and bool(st.values))

    # -- bounded items: look-ahead -------------------------------------------------------------
    def completions_count(self, lstate: int) -> int:
        """How many byte strings complete the open item from lexer state ``lstate`` (its
        closing quote included; 1 when it is closed), or :data:`PLENTY` when there are at
        least that many. Memoised per lexer state; a state from which two ``a`` can still be
        read has at least :data:`PLENTY` (see :mod:`lexguide.jsonschema.unique`), otherwise
        the count walks the bytes up to the end of the item (one character at most)."""
        got = self._counts.get(lstate)
        if got is not None:
            return got
        lexer = self._lp.lexer
        if lexer.accepting(lstate):
            total = 1
        else:
            one = lexer.next(lstate, _A)
            if one != 0 and not lexer.accepting(one) and lexer.next(one, _A) != 0:
                total = PLENTY
            else:
                total = 0
                for b in range(256):
                    nxt = lexer.next(lstate, b)
                    if nxt != 0:
                        total += self.completions_count(nxt)
                        if total >= PLENTY:
                            total = PLENTY
                            break
        self._counts[lstate] = total
        return total

    def completions(self, lstate: int) -> list[bytes]:
        """The byte strings that complete the open item from ``lstate`` (call only when
        :meth:`completions_count` is below :data:`PLENTY`). Memoised per lexer state."""
        got = self._comps.get(lstate)
        if got is None:
            lexer = self._lp.lexer
            if lexer.accepting(lstate):
                got = [b""]
            else:
                got = [bytes((b,)) + tail for b in range(256)
                       if (nxt := lexer.next(lstate, b)) != 0 for tail in self.completions(nxt)]
            self._comps[lstate] = got
        return got

    def is_dead(self, values: frozenset[str], item: bytes, lstate: int) -> bool:
        """Whether every completion of the open item ``item`` (raw, from its opening quote),
        its lexer in state ``lstate``, is one of ``values``."""
        if not values or self.completions_count(lstate) > len(values):
            return False
        for tail in self.completions(lstate):
            try:
                if decode_item(item + tail) not in values:
                    return False
            except ValueError:
                return False
        return True

    def step(self, st: UniqueState, state: ParseState, data: bytes,
             after: ParseState) -> UniqueState | None:
        """:meth:`feed`, and None too when ``data`` ends inside an item that can only become
        a recorded value (``after``: the parse state after ``data``)."""
        got = self.feed(st, state, data)
        if got is not None and self.bounded and got.item is not None and \
                self.is_dead(got.values, got.item, after.lexer_state):
            return None
        return got

    def dead_ids(self, st: UniqueState, state: ParseState, mask: np.ndarray, engine) -> list[int]:
        """Tokens allowed by ``mask`` after which an item is open whose every completion is a
        recorded value (bounded items only).

        Such an item is a prefix of a recorded item as written (one spelling per value, see
        :mod:`lexguide.jsonschema.unique`), and fewer than :data:`PLENTY` completions means
        at most the rest of a character and one more character are left: at most
        :data:`_TAIL` bytes. Tokens staying inside the open item are therefore looked up by
        their bytes among the slices of the recorded items that end that close to their
        closing quote; tokens that open an item (they hold a ``"``) are scanned."""
        if not self.bounded or not st.values:
            return []
        raws = sorted(st.raws)
        quotes = engine.quote_tokens
        token_bytes, by_bytes = quotes.token_bytes, quotes.by_bytes
        lp = self._lp
        cands: set[int] = set()
        item = st.item
        if item is not None:  # tokens that stay inside the open item
            for w in raws[bisect_left(raws, item):]:
                if not w.startswith(item):
                    break
                rest = w[len(item):]
                for n in range(max(1, len(rest) - _TAIL), len(rest)):
                    cands.update(by_bytes.get(rest[:n], ()))
        bad: list[int] = []
        if cands:
            ids = np.fromiter(cands, dtype=np.int64, count=len(cands))
            for t in ids[_allowed(mask, ids)].tolist():
                after = lp.advance_bytes(state, token_bytes[t])
                if after is not None and after.pending and \
                        self.is_dead(st.values, item + token_bytes[t], after.lexer_state):
                    bad.append(t)
        scan = quotes.ids[quotes.counts >= (2 if item is not None else 1)]  # an opening quote
        for t in scan[_allowed(mask, scan)].tolist():
            got = self.feed(st, state, token_bytes[t])
            if got is None or got.item is None or not _is_prefix(raws, got.item):
                continue  # a duplicate close is duplicate_ids' to find
            after = lp.advance_bytes(state, token_bytes[t])
            if after is not None and self.is_dead(got.values, got.item, after.lexer_state):
                bad.append(t)
        return bad

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


def _is_prefix(sorted_raws: list[bytes], item: bytes) -> bool:
    """Whether ``item`` begins one of ``sorted_raws``."""
    i = bisect_left(sorted_raws, item)
    return i < len(sorted_raws) and sorted_raws[i].startswith(item)


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

    __slots__ = ("_by_bytes", "counts", "heads", "ids", "most", "other_ids", "token_bytes")

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
