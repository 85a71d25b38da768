"""``uniqueItems`` enforced by the matcher instead of the grammar: string items, and items of
any JSON values.

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

Strings of a bounded language (``maxLength``, a ``pattern`` or ``format``; marked
:data:`~lexguide.grammar.ir.UNIQUE_BOUNDED_ITEM_NAME`) can run out of fresh values before their
closing quote, and the whole language can be used up: the matcher then also masks the tokens
after which the open item can only become a recorded value, and a ``,`` after which every item
that can start is (:meth:`UniqueItems.dead_ids`, counting the values an open item can still
complete from the lexer state, one canonical spelling each:
:class:`~lexguide.jsonschema.unique_count.ValueCounter`).

When a string could be an item of a marked array in one parse and something else in another
(a union of a ``uniqueItems`` array with an array that allows duplicates), it is held to
uniqueness: stricter than the schema there, never looser.

Items of any JSON values (objects, numbers, arrays, unions with literals; the item schemas of
:func:`lexguide.jsonschema.unique.tracked_items_problem`) are not one lexeme, so the compiler
marks the array's opening bracket instead: a lexeme named
:data:`~lexguide.jsonschema.unique.UNIQUE_ARRAY_NAME`, also ``unique_item``. A ``[`` opens such
an array when, after it, the parser's set expects the marked bracket and the lexer is inside
it. From there the bytes are JSON and the matcher follows them itself (:class:`Arrays`: a stack
of :class:`Frame`, one per open marked array, so arrays of arrays keep a set each; whether the
text is inside a string or an escape): an item starts at its first byte; a string item ends at
its closing quote, an object or array item at its matching bracket, a number or literal at the
delimiter after it (``,``, ``]`` or whitespace: the token that would close a duplicate number
is the one carrying that delimiter). Its value is kept as :func:`value_key` (JSON equality:
``1`` = ``1.0`` = ``1e0`` compared exactly at any exponent, objects regardless of member order,
strings after unescaping, ``true`` never ``1``). A ``[`` inside an item asks the parser again,
for a nested marked array. The admitted item schemas give every open item infinitely many
values beyond it, except a ``true``/``false``/``null`` (fixed by its first letter) and a number
whose digits so far are zeros (``0``, ``-0``, ``0.0e``; zero when the lexer cannot add another
digit), and a container once only whitespace and its closing brackets can follow (an object
without additional members whose last member ended, the bracket then being named
:data:`~lexguide.jsonschema.unique.UNIQUE_CLOSED_ARRAY_NAME`; or any container after the newline
that an indented layout puts into its closing lexeme): the matcher masks the tokens that leave
such an item when its value is recorded (:meth:`UniqueItems._arrays_dead`), so no allowed token
leads to a dead end. An object item in an array whose bracket is
:data:`~lexguide.jsonschema.unique.UNIQUE_FINITE_REST_ARRAY_NAME` (an item can be an object
without additional members whose rest can be finite before its last member ends) is decided
by a look-ahead instead: :meth:`UniqueItems.closed_exhausted`
walks the bytes the parser allows from the state a token leads to until the item ends, and
masks the token when every completion is recorded; a loop that changes the value (inside a
string, around a member or an item, or a number gaining a digit 1-9) answers "a fresh value
exists" at once. So the last member may be a number, a boolean or an enum, and a used-up finite
rest is masked where it becomes finite (the quote that ends an ``id`` written with ``true`` and
``false`` already, the ``0`` of an ``age`` when that object is recorded). Inside an object item
of such an array every allowed token is scanned, outside a string that can grow.

Items from a finite set of strings, integers, booleans and null (the bracket named
:data:`~lexguide.jsonschema.unique.UNIQUE_STRINGS_ARRAY_NAME`) can run out: the matcher lists
the values an open item can still become from the lexer state, in their canonical spelling
(:meth:`UniqueItems._only_recorded`), and masks the tokens after which all are recorded, and a
``,`` after which every value an item can start is (:meth:`UniqueItems._strings_dead`); inside
such an array every allowed token is scanned (the grammar allows few).

Items from an integer range too large for the grammar, maybe with a ``multipleOf`` (the
bracket named
:data:`~lexguide.jsonschema.unique.UNIQUE_INTEGERS_ARRAY_NAME`) can run out too: the matcher
counts the completions of an open item over the lexer's automaton (:meth:`UniqueItems.number_count`)
against the recorded values that complete it, and masks the tokens after which all completions
are recorded, and a ``,`` after which no fresh item can start (:meth:`UniqueItems._integers_dead`);
inside such an array every allowed token is scanned.

The tracker is one class, :class:`UniqueItems`, in parts: this module holds the byte scan
(item boundaries, string items and arrays of any items) and the masks of duplicate closes;
:mod:`~lexguide.engine.unique_values` the states and the JSON equality keys;
:mod:`~lexguide.engine.unique_strings` the bounded string items;
:mod:`~lexguide.engine.unique_scalars` the counted and listed scalar domains;
:mod:`~lexguide.engine.unique_lookahead` the look-ahead of closed objects; and
:mod:`~lexguide.engine.unique_budget` the token budgets inside marked arrays.

Cost: nothing for grammars without marked lexemes (the matcher does not create a tracker). Else
per consumed token, a scan of its bytes plus one parser query per ``"`` outside an item (and per
``[`` outside a string, for marked brackets; inside a marked array, a Python scan of every
byte). Per mask, nothing while no value is recorded and no item is open (unless a vocabulary
token holds four ``"``); inside an item, one dictionary probe per recorded value that extends
the item so far, plus a scan of the few allowed tokens whose close the probe does not decide
(three ``"``, or a backslash before the first); between items, a scan of the allowed tokens
holding two ``"`` or more (:meth:`UniqueItems.duplicate_ids`). Inside a marked array, a scan of
the allowed tokens that hold a byte able to end an item where the text is
(:class:`~lexguide.engine.unique_tokens.JsonTokenClasses`,
:meth:`UniqueItems._array_bad_ids`); outside one, of the allowed
tokens that may hold a ``[`` and two whole items (none in most vocabularies: then masks outside
marked arrays stay on the core's path).
"""

from __future__ import annotations

import numpy as np

from lexguide.engine.lexparser import LexParser, ParseState
from lexguide.jsonschema.unique import (
    UNIQUE_ARRAY_NAME,
    UNIQUE_CLOSED_ARRAY_NAME,
    UNIQUE_FINITE_REST_ARRAY_NAME,
    UNIQUE_INTEGERS_ARRAY_NAME,
    UNIQUE_NUMBERS_ARRAY_NAME,
    UNIQUE_STRINGS_ARRAY_NAME,
)
from lexguide.engine.unique_tokens import QuoteTokens
from lexguide.jsonschema.unique_count import ValueCounter
from lexguide.engine.unique_lookahead import ClosedLookahead
from lexguide.engine.unique_scalars import ScalarDomains
from lexguide.engine.unique_strings import BoundedStrings
from lexguide.engine.unique_values import (
    EMPTY,
    Arrays,
    Frame,
    NO_ARRAYS,
    UniqueState,
    _BACKSLASH,
    _BRACE,
    _CLOSE,
    _COMMA,
    _END_BRACE,
    _LITERALS,
    _LITERAL_KEYS,
    _OPEN,
    _QUOTE,
    _WHITESPACE,
    _ZERO,
    _close,
    _closers,
    _escaped,
    _ids_of,
    _in_key,
    _quotes_needed,
    _target,
    _zero_mantissa,
    decode_item,
    value_key,
)

__all__ = ["EMPTY", "QuoteTokens", "UniqueItems", "UniqueState", "decode_item", "value_key"]


class UniqueItems(BoundedStrings, ScalarDomains, ClosedLookahead):
    """The marked lexemes of one grammar and the scan over bytes. Shared; its caches (per
    lexer state) only grow, and hold the same answer whichever thread fills them first."""

    __slots__ = ("_brackets", "_canonical_counts", "_closed", "_counted", "_digits", "_ends",
                 "_finite", "_fresh", "_items", "_lookahead", "_lp", "_nonzero", "_number_counts",
                 "_numbers", "_spelled_numbers", "_starts", "_value_counter", "_walks",
                 "bounded")

    def __init__(self, lp: LexParser, item_lexemes: frozenset[int], bounded: bool = False) -> None:
        self._lp = lp
        names = [lx.name for lx in lp.ir.lexemes]
        #: marked opening brackets of arrays of any items; the rest are string item lexemes
        self._brackets = frozenset(i for i in item_lexemes if names[i] in (
            UNIQUE_ARRAY_NAME, UNIQUE_CLOSED_ARRAY_NAME, UNIQUE_FINITE_REST_ARRAY_NAME,
            UNIQUE_STRINGS_ARRAY_NAME, UNIQUE_INTEGERS_ARRAY_NAME, UNIQUE_NUMBERS_ARRAY_NAME))
        self._items = item_lexemes - self._brackets
        #: some item can be an object without additional members: its value is fixed when
        #: only ``}`` can follow (:meth:`_arrays_dead`)
        self._closed = any(names[i] in (UNIQUE_CLOSED_ARRAY_NAME, UNIQUE_FINITE_REST_ARRAY_NAME)
                           for i in self._brackets)
        #: some such object can have a finite rest before its last member ends: any token
        #: inside it may leave only recorded values (:meth:`closed_exhausted`)
        self._lookahead = any(names[i] == UNIQUE_FINITE_REST_ARRAY_NAME for i in self._brackets)
        #: some items come from a finite set of strings: a string item or a "," can leave
        #: only recorded strings (:meth:`_strings_dead`)
        self._finite = any(names[i] == UNIQUE_STRINGS_ARRAY_NAME for i in self._brackets)
        #: some items come from a bounded integer range: a number item or a "," can leave
        #: only recorded integers (:meth:`_integers_dead`, counting)
        self._counted = any(names[i] == UNIQUE_INTEGERS_ARRAY_NAME for i in self._brackets)
        #: some items are numbers with a bound or a multipleOf: a number item or a "," can
        #: leave only recorded values (:meth:`_numbers_dead`, by value)
        self._numbers = any(names[i] == UNIQUE_NUMBERS_ARRAY_NAME for i in self._brackets)
        self._number_counts: dict[int, int] = {}
        #: value counts of bounded numbers per (lexer state, in a fraction, last byte a
        #: fraction zero or "."): :meth:`number_value_count`
        self._canonical_counts: dict[tuple, int | None] = {}
        #: recorded number values by their shortest spelling, per set of values
        #: (:meth:`_numbers_extending`)
        self._spelled_numbers: dict[frozenset, list] = {}
        #: some marked item has a bounded length: an open item may run out of fresh values
        self.bounded = bounded
        lexer = lp.lexer
        #: values an open bounded string item can still complete (:meth:`is_dead`)
        self._fresh: dict[tuple[ParseState, frozenset], bool] = {}
        #: lexer states after the opening quote of bounded string items (:meth:`_plenty`)
        self._starts: set[int] = set()
        self._ends: dict[tuple[int, str], int] = {}  # _spelled_dead's end states
        self._value_counter = ValueCounter(lexer.next, lambda ls: bool(lexer.accepting(ls)), 0)
        self._nonzero: dict[int, bool] = {}
        self._digits: dict[int, bool] = {}  # _digit_reachable per lexer state
        self._walks: dict = {}  # closed_exhausted per (parse state, arrays)

    def starts_item(self, after_quote: ParseState) -> bool:
        """Whether the ``"`` that led to ``after_quote`` opens a marked item."""
        return after_quote.pending and not self._items.isdisjoint(
            self._lp.parser.expected(after_quote.set_id))

    def feed(self, st: UniqueState, state: ParseState, data: bytes) -> UniqueState | None:
        """``st`` after the bytes ``data``, read from parse state ``state`` (``data`` must be
        allowed there). None when ``data`` closes an item equal to an earlier item of its
        array. Pure; one parser query per ``"`` outside a string item and per ``[`` outside
        a string."""
        if self._items:
            got = self._feed_strings(st, state, data)
            if got is None:
                return None
            st = got
        if self._brackets:
            arrays = self._feed_arrays(st.arrays, state, data)
            if arrays is None:
                return None
            st = st._replace(arrays=arrays)
        return st

    def _feed_strings(self, st: UniqueState, state: ParseState,
                      data: bytes) -> UniqueState | None:
        """:meth:`feed` for the string items (marked item lexemes)."""
        values, item, after, raws, arrays, need = st
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
                after = need = False
                nxt = lp.advance_bytes(state, data[done : i + 1])
                if nxt is None:  # not a prefix of the grammar: nothing more to track
                    return UniqueState(values, None, False, raws, arrays)
                state, done = nxt, i + 1
                if self.starts_item(nxt):
                    item = b'"'
                    if self.bounded and len(self._starts) < 64:
                        self._starts.add(nxt.lexer_state)  # for _plenty
            else:
                if after and b == _CLOSE:
                    values, raws = frozenset(), frozenset()
                need = (after and b == _COMMA) or (need and b in _WHITESPACE)
                after = False
        return UniqueState(values, item, after, raws, arrays, need)

    # -- arrays of any items -------------------------------------------------------------------
    def opens_array(self, after_open: ParseState) -> bool:
        """Whether the ``[`` that led to ``after_open`` opens a marked array."""
        lp = self._lp
        return after_open.pending and not self._brackets.isdisjoint(
            lp.parser.expected(after_open.set_id)) and any(
            not self._brackets.isdisjoint(lp.locals_of(g))
            for g in lp.lexer.alive_lexemes(after_open.lexer_state))

    def _feed_arrays(self, a: Arrays, state: ParseState | None, data: bytes) -> Arrays | None:
        """The marked arrays after ``data``: a JSON scan inside them (strings, bracket depth,
        item boundaries), one parser query per ``[`` outside a string. None when ``data``
        closes an item equal to an earlier item of its array."""
        in_str, esc = a.in_str, a.esc
        # per open frame: [values, item bytes before this token's, level, start of the item's
        # bytes in ``data`` (-1: no item open)]
        frames = [[f.values, f.item, f.level, 0 if f.item is not None else -1, f.need]
                  for f in a.frames]
        lp = self._lp
        done = 0  # ``state`` is the parse state after data[:done] (None: no longer followed)
        n = len(data)
        i = 0
        while i < n:
            if not frames:
                i = data.find(b"[", i)
                if i < 0:
                    break
                if state is not None:
                    state = lp.advance_bytes(state, data[done: i + 1])
                    done = i + 1
                    if state is not None and self.opens_array(state):
                        frames.append([frozenset(), None, 0, -1, False])
                        in_str = esc = False
                i += 1
                continue
            b = data[i]
            f = frames[-1]
            if in_str:
                if esc:
                    esc = False
                elif b == _BACKSLASH:
                    esc = True
                elif b == _QUOTE:
                    in_str = False
                    if f[2] == 0 and f[3] >= 0 and not _close(f, data, i + 1):
                        return None
            elif b in _WHITESPACE or b == _COMMA:
                if f[2] == 0 and f[3] >= 0 and not _close(f, data, i):
                    return None
                if b == _COMMA and f[2] == 0:
                    f[4] = True
            elif b == _OPEN or b == _BRACE:
                if f[2] == 0 and f[3] < 0:
                    f[1], f[3], f[4] = b"", i, False
                for g in frames:
                    g[2] += 1
                if b == _OPEN and state is not None:
                    state = lp.advance_bytes(state, data[done: i + 1])
                    done = i + 1
                    if state is not None and self.opens_array(state):
                        frames.append([frozenset(), None, 0, -1, False])
            elif b == _CLOSE or b == _END_BRACE:
                if f[2] == 0:  # the end of the innermost array
                    if f[3] >= 0 and not _close(f, data, i):
                        return None
                    frames.pop()
                for g in frames:
                    g[2] -= 1
                    if g[2] == 0 and not _close(g, data, i + 1):
                        return None
            else:
                if b == _QUOTE:
                    in_str = True
                if f[2] == 0 and f[3] < 0:
                    f[1], f[3], f[4] = b"", i, False
            i += 1
        if not frames:
            return NO_ARRAYS
        return Arrays(tuple(Frame(v, None if start < 0 else item + data[start:], level, need)
                            for v, item, level, start, need in frames), in_str, esc)

    def _arrays_dead(self, a: Arrays, after: ParseState | None,
                     before: ParseState | None = None, data: bytes = b"") -> bool:
        """Whether the innermost marked array's open item can only become a recorded value:
        a ``true``, ``false`` or ``null`` already written, a number whose digits so far are
        zeros when ``0`` is written and the lexer (``after``: the parse state) can add no
        non-zero digit before the exponent, or a container that only its closing brackets can
        follow (the innermost marked array's item, or the item around that array when it has
        none open). The item schemas admitted
        (:func:`lexguide.jsonschema.unique.tracked_items_problem`) leave every other open
        item infinitely many values. ``after`` may be None when ``before`` and ``data`` say
        how to reach it (computed only when needed)."""
        frames = a.frames
        if self._finite and frames and self._strings_dead(a, after, before, data):
            return True
        if self._counted and frames and self._integers_dead(a, after, before, data):
            return True
        if self._numbers and frames and self._numbers_dead(a, after, before, data):
            return True
        if not frames:
            return False
        d = _target(a)
        values, item, level, _ = frames[d]
        if item is None or not values:
            return False
        first = item[0]
        if self._lookahead and first == _BRACE:  # an object whose rest may be finite
            if after is None and before is not None:
                after = self._lp.advance_bytes(before, data)
            return after is not None and self.closed_exhausted(a, after)
        if a.in_str:
            return False
        if level:
            # a container that only its closing brackets can follow: after whitespace that
            # commits to them (an indented layout spells the whitespace before "}" or "]"
            # itself), or an object without additional members whose last member just ended
            body = item.rstrip(b" \t\n\r")
            if len(body) == len(item) and not (
                    self._closed and first == _BRACE and body[-1:] in (b'"', b"}", b"]")):
                return False
            closers = _closers(body)
            try:  # the container if it ended here: recorded?
                if value_key(body + closers) not in values:
                    return False
            except ValueError:  # it cannot end here (after a key, a comma, ...)
                return False
            if after is None and before is not None:
                after = self._lp.advance_bytes(before, data)
            return after is not None and self._only_closes(after, closers)
        if first in _LITERALS:
            return _LITERALS[first] in values
        if _ZERO not in values or not _zero_mantissa(item):
            return False
        if b"e" in item.lower():
            return True
        if after is None and before is not None:
            after = self._lp.advance_bytes(before, data)
        if after is None or not after.pending:
            return True
        return not self._nonzero_reachable(after.lexer_state)

    def may_mask(self, st: UniqueState, quotes: QuoteTokens) -> bool:
        """Whether some token could close an item equal to an earlier one from ``st``, or
        (bounded items) lead into an item whose every completion is a recorded value."""
        if self._brackets and (st.arrays.frames or quotes.json_classes.opens_two):
            return True
        return bool(self._items) and (
            _quotes_needed(st) <= quotes.most or (self.bounded and bool(st.values)))

    def step(self, st: UniqueState, state: ParseState, data: bytes,
             after: ParseState) -> UniqueState | None:
        """:meth:`feed`, and None too when ``data`` ends inside an item that can only become
        a recorded value, or (bounded string items) after a ``,`` with no fresh item left
        (``after``: the parse state after ``data``)."""
        got = self.feed(st, state, data)
        if got is not None and self.bounded and self._strings_used_up(got, after):
            return None
        if got is not None and self._brackets and self._arrays_dead(got.arrays, after):
            return None
        return got

    def duplicate_ids(self, st: UniqueState, state: ParseState, mask: np.ndarray,
                      quotes: QuoteTokens) -> list[int]:
        """Tokens allowed by ``mask`` that would close an item equal to an earlier one (or
        two equal items) from ``state``.

        Inside an item whose bytes so far decode to ``p``, a token whose text before its first
        ``"`` is plain (no backslash, whole UTF-8) and that holds at most two ``"`` closes the
        item with the value ``p + head``: those tokens are found by looking up, for each
        recorded value ``p + h``, the tokens of head ``h`` (one dictionary probe per value).
        Every other token that can close an item here is scanned by :meth:`feed`.

        Arrays of any items (a marked ``[``): :meth:`_array_bad_ids`."""
        bad = self._string_duplicate_ids(st, state, mask, quotes) if self._items else []
        if self._brackets:
            bad += self._array_bad_ids(st, state, mask, quotes)
        return bad

    def _array_bad_ids(self, st: UniqueState, state: ParseState, mask: np.ndarray,
                       quotes: QuoteTokens) -> list[int]:
        """Tokens allowed by ``mask`` that close an item of a marked array equal to an
        earlier one, or leave its open item able to become only a recorded value
        (:meth:`_arrays_dead`). Only the tokens that hold a byte able to do so where the text
        is are scanned (:class:`~lexguide.engine.unique_tokens.JsonTokenClasses`): inside a
        string a ``"``, plus a closing bracket (or a ``[``) when the item is a container;
        inside a container item a closing
        bracket or a ``[``; between items or in a scalar item ``"``, ``,``, brackets,
        whitespace after other bytes (or any whitespace, a scalar being open), and the bytes
        of numbers and literals once a ``0`` or a literal is recorded."""
        a = st.arrays
        cls = quotes.json_classes
        if not a.frames:
            words = cls.opens_two_words
        else:
            values, item, level, _ = a.frames[-1]
            # an object without additional members is fixed at the end of its last member
            closing = self._closed and level >= 1 and item is not None and item[0] == _BRACE \
                and not (a.in_str and _in_key(item))
            target = a.frames[_target(a)].item
            if (self._finite or self._counted or self._numbers) and level == 0:
                # a finite set of strings, or an integer range: any token may leave only
                # recorded values
                words = np.full_like(mask, 0xFFFFFFFF)
            elif self._lookahead and target is not None and target[0] == _BRACE:
                # an object, maybe without more members: outside a string of its own any
                # token may leave only recorded values (closed_exhausted walks them); inside
                # a string that can grow, only a token ending it (a key of a full object)
                words = cls.quote if a.in_str and not a.esc and self._string_loops(
                    state.lexer_state) else np.full_like(mask, 0xFFFFFFFF)
            elif a.in_str:
                words = cls.quote if level == 0 or closing else \
                    cls.quote & (cls.nested | cls.trailing_space)
            elif level:
                words = cls.nested | cls.trailing_space
                if closing:
                    words = words | cls.quote
            else:
                words = cls.comma | cls.nested | cls.quote2 | (
                    cls.space if item is not None else cls.inner_space)
                if item is None and len(a.frames) > 1:
                    words = words | cls.trailing_space  # before a "]" that helps end an item
                if not values.isdisjoint(_LITERAL_KEYS):
                    words = words | cls.literal
                if _ZERO in values:
                    if item is None:
                        words = words | cls.zero_start
                    elif _zero_mantissa(item):
                        words = words | cls.number
        ids = _ids_of(mask & words)
        if not len(ids):
            return []
        token_bytes = quotes.token_bytes
        bad = []
        for t in ids.tolist():
            data = token_bytes[t]
            got = self._feed_arrays(a, state, data)
            if got is None:
                bad.append(t)
            elif got.frames and self._arrays_dead(got, None, state, data):
                bad.append(t)
        return bad

