"""``uniqueItems`` string items of a bounded language (``maxLength``, a ``pattern`` or
``format``), which can run out of fresh values: the values an open item can still complete are
counted over the lexer's automaton in their canonical spelling
(:class:`~lexguide.jsonschema.unique_count.ValueCounter`) and listed when no more than the
recorded ones, so the tokens after which an open item can only become a recorded value, and a
``,`` after which every item is, are masked; and the duplicate closes of string items. A part
of :class:`lexguide.engine.unique_items.UniqueItems`.
"""

from __future__ import annotations

import numpy as np

from lexguide.engine.lexparser import LexParser, ParseState
from lexguide.engine.unique_tokens import QuoteTokens
from lexguide.jsonschema.unique_count import canonical_prefix, open_escape
from lexguide.engine.unique_values import (
    MAX_WALK,
    UniqueState,
    _allowed,
    _begins_one,
    _decoded_prefix,
    _ids_of,
    _quotes_needed,
    _split_partial,
    completions_recorded,
    decode_item,
)

__all__ = ["BoundedStrings"]


class BoundedStrings:
    """The string items of :class:`~lexguide.engine.unique_items.UniqueItems` (a mixin: its
    state lives there)."""

    __slots__ = ()
    _lp: LexParser

    def is_dead(self, values: frozenset[str], item: bytes, lstate: int) -> bool:
        """Whether every completion of the open string item ``item`` (raw, from its opening
        quote), its lexer in state ``lstate``, is one of ``values``: the values it can still
        complete (:class:`~lexguide.jsonschema.unique_count.ValueCounter`, one canonical
        spelling each) are counted up to ``len(values) + 1``, and listed and looked up when
        there are no more than ``values``. Memoised per lexer state."""
        return bool(values) and completions_recorded(self._value_counter, lstate, item, values,
                                                     decode_item)

    def _spelled_dead(self, start: int, v: str, limit: int) -> bool:
        """Whether the raw spelling of ``v`` from the item start ``start`` (a lexer state after
        the opening quote) may lead to a state with at most ``limit`` values to complete (True
        too when ``v`` needs an escape or leaves the lexer). Completions only shrink along a
        spelling, so a prefix of ``v`` has no fewer. The end state is memoised per value."""
        key = (start, v)
        end = self._ends.get(key)
        if end is None:
            text = canonical_prefix(v)
            end = -1
            if len(text.decode("utf-8", errors="surrogatepass")) == len(v):
                ls, nxt = start, self._lp.lexer.next
                for b in text:
                    ls = nxt(ls, b)
                    if ls == 0:
                        break
                end = ls if ls else -1
            if len(self._ends) >= MAX_WALK:
                self._ends.clear()
            self._ends[key] = end
        if end < 0:
            return True
        counter = self._value_counter
        return counter.count((end, b"", frozenset()), limit + 1) <= limit

    def _plenty(self, values: frozenset[str], most: int) -> bool:
        """Whether every item start met so far (lexer states after the opening quote) has more
        values than ``values`` and the ``most`` items one token can close: a ``,`` then always
        leaves a fresh item. False before any item start is met."""
        counter, need = self._value_counter, len(values) + most + 1
        return bool(self._starts) and all(
            counter.count(counter.node(ls, b'"'), need) >= need for ls in self._starts)

    def _no_fresh_string(self, values: frozenset[str], after: ParseState) -> bool:
        """Whether every string item that can start from ``after`` (a ``,`` read; whitespace
        may follow) can only become one of ``values``. Memoised per (state, values), at most
        :data:`MAX_WALK` entries."""
        key = (after, values)
        got = self._fresh.get(key)
        if got is None:
            if len(self._fresh) >= MAX_WALK:
                self._fresh.clear()
            got = self._fresh[key] = self._no_fresh_start(
                after, b'"', lambda b, nxt: self.starts_item(nxt) and
                self.is_dead(values, b'"', nxt.lexer_state))
        return got

    def _strings_used_up(self, st: UniqueState, after: ParseState) -> bool:
        """Whether ``st`` (parse state ``after``) has an open bounded string item whose every
        completion is recorded, or follows a ``,`` after which every item is."""
        if st.item is not None:
            return self.is_dead(st.values, st.item, after.lexer_state)
        return st.need and bool(st.values) and self._no_fresh_string(st.values, after)

    def dead_ids(self, st: UniqueState, state: ParseState, mask: np.ndarray, engine) -> list[int]:
        """Tokens allowed by ``mask`` after which a bounded string item is open whose every
        completion is a recorded value, or a ``,`` was read after which every item is
        (:meth:`_strings_used_up`).

        Such an open item can still complete a recorded value, so its characters so far
        begin one. Tokens staying inside the open item (no ``"``) are therefore looked up by
        their bytes among the slices of the recorded values' canonical spellings past the
        item's text, up to their first character that needs an escape; tokens holding a
        backslash are scanned (another spelling), and so are all allowed tokens when the item
        ends inside an escape; tokens holding a ``"`` (they may close the item and open
        another) or a ``,`` (between items) are fed and checked."""
        if not self.bounded or not st.values:
            return []
        quotes = engine.quote_tokens
        token_bytes = quotes.token_bytes
        cls = quotes.json_classes
        lp = self._lp
        item = st.item
        if item is None:
            # a "," alone can leave no fresh item only when the language is nearly used up
            scan = _ids_of(mask & (cls.quote if self._plenty(st.values, quotes.most)
                                   else cls.quote | cls.comma))
        elif open_escape(item) or (split := _split_partial(item)) is None:
            scan = _ids_of(mask)  # inside an escape: the few allowed tokens, all of them
        else:  # tokens that stay inside the open item, then those that close it
            prefix, partial = split
            cands: set[int] = set()
            escapes = False  # some recorded value extending the item has an escape there
            n = len(prefix)
            # one item start met and the item written raw: a value whose whole spelling
            # still has more completions than the recorded values has no dead slice
            start = next(iter(self._starts)) if len(self._starts) == 1 and \
                b"\\" not in item else None
            for v in st.values:
                if v.startswith(prefix):
                    ids, escaped = quotes.slice_ids(v[n:], partial)
                    escapes = escapes or escaped
                    if start is None or self._spelled_dead(start, v, len(st.values)):
                        cands.update(ids)
            bad = []
            if cands:  # no quote nor backslash: the item stays open, its text extended
                ids = np.fromiter(cands, dtype=np.int64, count=len(cands))
                for t in ids[_allowed(mask, ids)].tolist():
                    data = token_bytes[t]
                    after = lp.advance_bytes(state, data)
                    if after is not None and after.pending and \
                            self.is_dead(st.values, item + data, after.lexer_state):
                        bad.append(t)
            closing = _ids_of(mask & (cls.quote2 if self._plenty(st.values, quotes.most)
                                      else (cls.quote & cls.comma) | cls.quote2))
            if escapes:  # an escape may lead to a recorded value only then
                ids = quotes.backslash_ids
                closing = np.union1d(ids[_allowed(mask, ids)], closing)
            scan = closing
            return bad + self._fed_used_up(st, state, scan, token_bytes)
        return self._fed_used_up(st, state, scan, token_bytes)

    def _fed_used_up(self, st: UniqueState, state: ParseState, scan: np.ndarray,
                     token_bytes) -> list[int]:
        """The tokens of ``scan`` after which :meth:`_strings_used_up` holds (each fed)."""
        lp = self._lp
        bad: list[int] = []
        ordered = sorted(st.values)
        no_fresh: dict[ParseState, bool] = {}  # after a ",": per parse state
        for t in scan.tolist():
            data = token_bytes[t]
            got = self.feed(st, state, data)
            if got is None:
                continue  # a duplicate close is duplicate_ids' to find
            if got.item is not None:
                if not open_escape(got.item):
                    split = _split_partial(got.item)
                    if split is not None and not _begins_one(ordered, split[0]):
                        continue  # no recorded value to complete: a fresh one exists
            elif not (got.need and got.values):
                continue
            after = lp.advance_bytes(state, data)
            if after is None:
                continue
            if got.item is None and got.values == st.values:
                used_up = no_fresh.get(after)
                if used_up is None:
                    used_up = no_fresh[after] = self._strings_used_up(got, after)
            else:
                used_up = self._strings_used_up(got, after)
            if used_up:
                bad.append(t)
        return bad

    def _string_duplicate_ids(self, st: UniqueState, state: ParseState, mask: np.ndarray,
                              quotes: QuoteTokens) -> list[int]:
        """:meth:`duplicate_ids` for the string items."""
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


