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

import json
import re
from bisect import bisect_left
from typing import NamedTuple

import numpy as np

from lexguide.engine.lexparser import LexParser, ParseState
from lexguide.jsonschema.unique import (
    MAX_BOUNDED_ITEMS,
    UNIQUE_ARRAY_NAME,
    UNIQUE_CLOSED_ARRAY_NAME,
    UNIQUE_FINITE_REST_ARRAY_NAME,
    UNIQUE_INTEGERS_ARRAY_NAME,
    UNIQUE_NUMBERS_ARRAY_NAME,
    UNIQUE_STRINGS_ARRAY_NAME,
)
from lexguide.engine.unique_tokens import QuoteTokens
from lexguide.jsonschema.unique_count import ValueCounter, canonical_prefix, open_escape

__all__ = ["EMPTY", "UniqueItems", "UniqueState", "decode_item", "value_key"]

_QUOTE, _CLOSE, _A = 0x22, 0x5D, 0x61
_OPEN, _BRACE, _END_BRACE, _COMMA, _BACKSLASH = 0x5B, 0x7B, 0x7D, 0x2C, 0x5C
#: integer completions counted up to this many
#: (:data:`lexguide.jsonschema.unique.MAX_BOUNDED_ITEMS`)
PLENTY = MAX_BOUNDED_ITEMS
#: nodes :meth:`UniqueItems.closed_exhausted` walks at most (past them it answers that a
#: fresh value exists: the admitted finite rests, at most 64 values, stay far below)
MAX_WALK = 100_000
_WHITESPACE = frozenset(b" \t\n\r")


class Frame(NamedTuple):
    """One open array whose items are kept distinct as JSON values (a marked ``[``)."""

    values: frozenset  # equality keys (:func:`value_key`) of its completed items
    item: bytes | None  # raw bytes of the item being read, from its first byte; None between
    level: int  # brackets open inside it: 0 between items or inside a scalar or string item
    need: bool = False  # a "," was read at level 0 and no item started since


class Arrays(NamedTuple):
    """The open marked arrays, innermost last, and where the text is lexically."""

    frames: tuple[Frame, ...] = ()
    in_str: bool = False  # inside a JSON string (only tracked while a frame is open)
    esc: bool = False  # after a backslash inside it


NO_ARRAYS = Arrays()


class UniqueState(NamedTuple):
    """What the matcher remembers of the marked arrays being written. Immutable: one per
    consumed token, so rollback and clone cost nothing more."""

    values: frozenset[str]  # decoded values of its completed items
    item: bytes | None  # raw bytes of the item being read, from its opening quote; None outside
    after_item: bool  # an item just ended: whitespace, then "," or "]"
    raws: frozenset[bytes] = frozenset()  # the completed items as written (quotes included)
    arrays: Arrays = NO_ARRAYS  # arrays of any items (a marked opening bracket)
    need: bool = False  # a "," after an item was read and no item started since


EMPTY = UniqueState(frozenset(), None, False)


def decode_item(raw: bytes) -> str:
    """The value of a complete JSON string ``raw`` (quotes included); escapes decoded, lone
    surrogates kept as such."""
    return json.loads(raw.decode("utf-8", errors="surrogatepass"))


_ZERO = ("n", False, "", 0)
_LITERAL_KEYS = frozenset((True, False, None))


def _number(text: str) -> tuple:
    """The key of a JSON number: ``("n", negative, significant digits, exponent)`` with no
    leading or trailing zero digit (zero: no digits, not negative). Exact at any exponent."""
    mantissa, _, exp = text.lower().partition("e")
    negative = mantissa.startswith("-")
    whole, _, frac = mantissa.lstrip("-").partition(".")
    digits = (whole + frac).lstrip("0")
    if not digits:
        return _ZERO
    significant = digits.rstrip("0")
    return ("n", negative, significant,
            (_integer(exp) if exp else 0) - len(frac) + len(digits) - len(significant))


def _integer(text: str) -> int:
    """``int(text)`` for a decimal of any length (``int`` refuses more than a few thousand
    digits)."""
    digits = text.lstrip("+-")
    if len(digits) <= 1000:
        return int(text)
    half = len(digits) // 2
    value = _integer(digits[:-half]) * 10 ** half + _integer(digits[-half:])
    return -value if text.startswith("-") else value


_DECODER = json.JSONDecoder(parse_float=_number, parse_int=_number)


def _key(v):
    if isinstance(v, list):
        return ("a", tuple(_key(x) for x in v))
    if isinstance(v, dict):
        return ("o", frozenset((k, _key(x)) for k, x in v.items()))
    return v  # str, bool, None, or a number's key already


def value_key(raw: bytes):
    """A hashable key of the complete JSON value ``raw`` under JSON equality: numbers by exact
    value (``1``, ``1.0`` and ``1e0`` are one key; never a bool's), strings after unescaping,
    arrays by their items in order, objects by their members regardless of order (a repeated
    key keeps its last value, as a JSON parser reads it)."""
    return _key(_DECODER.decode(raw.decode("utf-8", errors="surrogatepass")))


_LITERALS = {0x74: True, 0x66: False, 0x6E: None}  # t, f, n


def _escaped(raw: bytes) -> bool:
    """Whether a byte after ``raw`` (an open string) is escaped: an odd run of backslashes."""
    return (len(raw) - len(raw.rstrip(b"\\"))) % 2 == 1


class UniqueItems:
    """The marked lexemes of one grammar and the scan over bytes. Shared; its caches (per
    lexer state) only grow, and hold the same answer whichever thread fills them first."""

    __slots__ = ("_brackets", "_closed", "_counted", "_digits", "_finite", "_fresh", "_items",
                 "_ends", "_numbers", "_starts",
                 "_lp", "_lookahead", "_nonzero", "_number_counts", "_value_counter",
                 "_walks",
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

    def _strings_dead(self, a: Arrays, after: ParseState | None, before: ParseState | None,
                      data: bytes) -> bool:
        """Whether the innermost marked array, of a finite set of values (strings, integers,
        booleans, null), is left with an item or a required item that can only be a recorded
        value: an open item (a string, or a number or literal not yet ended by a delimiter)
        all of whose completions (read off the lexer, :meth:`_only_recorded`) are recorded,
        or a ``,`` after which every value an item can start is recorded."""
        return self._scalar_dead(a, after, before, data, _VALUE_FIRSTS, self._value_used_up)

    def _scalar_dead(self, a: Arrays, after: ParseState | None, before: ParseState | None,
                     data: bytes, firsts: bytes, used_up) -> bool:
        """Whether the innermost marked array's open scalar item, or the item a ``,`` requires
        (any that starts with a byte of ``firsts``), can only become a recorded value:
        ``used_up(values, item, parse state after it)``. ``after`` may be None when
        ``before`` and ``data`` say how to reach it."""
        values, item, level, need = a.frames[-1]
        if level or not values or not (item is not None or need):
            return False
        if after is None and before is not None:
            after = self._lp.advance_bytes(before, data)
        if after is None:
            return False
        if item is not None:
            return used_up(values, item, after)
        return self._no_fresh_start(after, firsts, lambda b, got: used_up(
            values, bytes((b,)), got))

    def _value_used_up(self, values: frozenset, item: bytes, after: ParseState) -> bool:
        """Whether the open scalar item ``item`` (parse state ``after`` it) can only become a
        recorded value: its lexeme ended (the value fixed), or every completion is one."""
        if not after.pending:
            try:
                return value_key(item) in values
            except ValueError:
                return False
        return self._only_recorded(values, item, after.lexer_state)

    def _no_fresh_start(self, after: ParseState, firsts: bytes, used_up) -> bool:
        """Whether every item that can start from ``after`` (through whitespace) with a byte
        of ``firsts`` is used up: ``used_up(byte, parse state after it)``."""
        lp = self._lp
        seen, todo = {after}, [after]
        while todo:
            st = todo.pop()
            for b in firsts:
                got = lp.advance_byte(st, b)
                if got is not None and not used_up(b, got):
                    return False
            for b in _WHITESPACE:
                nxt = lp.advance_byte(st, b)
                if nxt is not None and nxt not in seen and len(seen) < 256:
                    seen.add(nxt)
                    todo.append(nxt)
        return True

    def _numbers_dead(self, a: Arrays, after: ParseState | None, before: ParseState | None,
                      data: bytes) -> bool:
        """Whether the innermost marked array, of numbers with a bound or a ``multipleOf``,
        is left with a number item, or a required item after a ``,``, whose every value is
        recorded (:meth:`number_fresh`, by value: ``1``, ``1.0`` and ``1.00`` are one)."""
        return not a.in_str and self._scalar_dead(
            a, after, before, data, b"-0123456789",
            lambda values, item, got: not self._number_open(values, item, got))

    def _number_open(self, values: frozenset, item: bytes, after: ParseState) -> bool:
        """Whether the open number ``item`` (parse state ``after`` it) can still become a value
        not in ``values``."""
        if not after.pending:
            try:
                return value_key(item) not in values
            except ValueError:
                return True
        return self.number_fresh(values, item, after.lexer_state)

    def number_fresh(self, values: frozenset, item: bytes, lstate: int) -> bool:
        """Whether some completion of the open number ``item`` (lexer state ``lstate``, number
        bytes only) is a value not in ``values``: a depth-first walk of the completions that
        stops at the first unrecorded value, or at a loop that changes the value (a digit
        1-9, a digit of the integer part, or zeros of a fraction after which a digit 1-9 can
        come: infinitely many values). A loop of zeros ending a fraction only respells and is
        not followed, so the walk ends; the bounded grammars spell no exponent
        (:mod:`lexguide.jsonschema.numeric`). At most :data:`MAX_WALK` nodes (past them it
        answers True; :func:`lexguide.jsonschema.unique.bounded_numbers_problem` keeps the
        finite domains to :data:`~lexguide.jsonschema.unique.MAX_FINITE_STRINGS` values)."""
        lexer = self._lp.lexer
        budget = [MAX_WALK]
        on_path: dict[int, int] = {}

        def walk(ls: int, text: bytes) -> bool:
            budget[0] -= 1
            if budget[0] < 0:
                return True
            if lexer.accepting(ls):
                try:
                    if value_key(text) not in values:
                        return True
                except ValueError:
                    pass
            on_path[ls] = len(text)
            try:
                for c in b"-.0123456789":
                    nxt = lexer.next(ls, c)
                    if nxt == 0:
                        continue
                    got = text + bytes((c,))
                    if nxt in on_path:  # a loop
                        loop = got[on_path[nxt]:]
                        if b"." not in text or loop.strip(b"0") or \
                                self._digit_reachable(nxt):
                            return True  # each turn gives another value
                        continue  # trailing zeros: the same value again
                    if walk(nxt, got):
                        return True
                return False
            finally:
                del on_path[ls]

        return walk(lstate, item)

    def _digit_reachable(self, lstate: int) -> bool:
        """Whether the lexer, from ``lstate`` inside a number, can still read a digit 1-9.
        Memoised."""
        got = self._digits.get(lstate)
        if got is None:
            lexer = self._lp.lexer
            seen, todo, got = {lstate}, [lstate], False
            while todo and not got:
                ls = todo.pop()
                for c in b"-.0123456789":
                    nxt = lexer.next(ls, c)
                    if nxt == 0:
                        continue
                    if 0x31 <= c <= 0x39:
                        got = True
                        break
                    if nxt not in seen:
                        seen.add(nxt)
                        todo.append(nxt)
            self._digits[lstate] = got
        return got

    def _integers_dead(self, a: Arrays, after: ParseState | None, before: ParseState | None,
                       data: bytes) -> bool:
        """Whether the innermost marked array is left with a number item, or a required item
        after a ``,``, that can only be a recorded integer, decided by counting: the number of
        byte strings the lexer accepts from the item's state (:meth:`number_count`, over the
        bytes of JSON numbers) against the recorded values whose spelling as a decimal integer
        extends the item and which the lexer accepts from there. Those are distinct
        completions, so when there are no fewer of them than completions counted, every
        completion is recorded: the answer True is exact whatever the grammar spells (more
        spellings than values only make it say False). For the integer ranges of
        :func:`lexguide.jsonschema.unique.integer_range_problem` each value has one spelling,
        so it says True whenever every completion is recorded."""
        item = a.frames[-1].item
        if a.in_str or item is not None and item.strip(b"-0123456789"):
            return False  # not an integer so far
        return self._scalar_dead(a, after, before, data, b"-0123456789", self._integer_used_up)

    def _integer_used_up(self, values: frozenset, item: bytes, after: ParseState) -> bool:
        """Whether every completion of the open number ``item`` (the parse state ``after``
        it) is a recorded value: the lexeme already ended (its value then fixed), or no more
        completions counted than recorded integers completing it."""
        if not after.pending:
            try:
                return value_key(item) in values
            except ValueError:
                return False
        lstate = after.lexer_state
        count = self.number_count(lstate)
        if count >= PLENTY or count > len(values):
            return False
        lexer = self._lp.lexer
        prefix = item.decode()
        found = 0
        for v in values:
            if not (isinstance(v, tuple) and v[0] == "n"):
                continue
            text = "0" if v == _ZERO else ("-" if v[1] else "") + v[2] + "0" * v[3] \
                if v[3] >= 0 else None
            if text is None or not text.startswith(prefix):
                continue
            ls = lstate
            for c in text[len(prefix):].encode():
                ls = lexer.next(ls, c)
                if ls == 0:
                    break
            if ls != 0 and lexer.accepting(ls):
                found += 1
        return found >= count

    def number_count(self, lstate: int, busy: set[int] | None = None) -> int:
        """How many byte strings of the bytes of JSON numbers take the lexer from ``lstate``
        to the end of its lexeme (the empty one when it can end there), or :data:`PLENTY`
        when there are at least that many (or infinitely many: a cycle). Memoised per lexer
        state."""
        got = self._number_counts.get(lstate)
        if got is not None:
            return got
        busy = set() if busy is None else busy
        busy.add(lstate)
        lexer = self._lp.lexer
        total = 1 if lexer.accepting(lstate) else 0
        for c in b"-+.0123456789eE":
            nxt = lexer.next(lstate, c)
            if nxt == 0:
                continue
            total += PLENTY if nxt in busy else self.number_count(nxt, busy)
            if total >= PLENTY:
                total = PLENTY
                break
        busy.discard(lstate)
        self._number_counts[lstate] = total
        return total

    def _only_recorded(self, values: frozenset, item: bytes, lstate: int) -> bool:
        """Whether every completion of the open item ``item`` (a string, number or literal)
        from lexer state ``lstate`` is one of ``values``: its completions in their canonical
        spelling (:class:`~lexguide.jsonschema.unique_count.ValueCounter`, one per value),
        listed when there are no more than ``values``. Memoised per lexer state."""
        counter = self._value_counter
        tails = counter.tails(counter.node(lstate, item), len(values))
        if tails is None:
            return False
        try:
            return all(value_key(item + t) in values for t in tails)
        except ValueError:
            return False

    def closed_exhausted(self, a: Arrays, state: ParseState) -> bool:
        """Whether every completion of the open item of :func:`_target` (an object), the text
        being at parse state ``state``, is a value recorded in its array: a depth-first walk
        of the bytes the parser allows from ``state`` until the item ends (followed through
        :meth:`_feed_arrays`, which refuses a recorded close), one node per parse state,
        lexical state and item text without the whitespace outside strings (whitespace
        loops are walked once). It answers False at the first completion not recorded, or
        at a loop that changes the value: a loop inside a string (each turn adds a
        character), outside strings and numbers (each turn adds a member or an item), or in
        a number adding a digit 1-9 other than in the exponent of a zero mantissa (a loop of
        zeros only changes the spelling and is not followed). True when the walk ends with
        every completion recorded: the rest of the item is finite (its open members
        written; :func:`lexguide.jsonschema.unique._closed_problem` bounds the finite
        members to :data:`~lexguide.jsonschema.unique.MAX_CLOSED_VALUES` values, so the walk
        stays within :data:`MAX_WALK` nodes; past them it answers False). Memoised per
        start."""
        if a.in_str and not a.esc and self._string_loops(state.lexer_state):
            return False  # a string that can take one more character, again and again
        d = _target(a)
        memo_key = (state, a)
        got = self._walks.get(memo_key)
        if got is not None:
            return got
        lp = self._lp
        on_path: dict = {}
        seen: set = set()
        budget = [MAX_WALK]

        def walk(st: ParseState, arr: Arrays, canon: bytes) -> bool:  # True: a fresh value
            budget[0] -= 1
            if budget[0] < 0:
                return True
            where = (st, arr.in_str, arr.esc, tuple(f.level for f in arr.frames),
                     tuple(f.values for f in arr.frames[d + 1:]), len(arr.frames))
            if where in on_path:  # a loop
                loop = canon[on_path[where]:]
                if not loop:
                    return False  # whitespace only
                if arr.in_str:
                    return True  # each turn adds a character
                number = _number_tail(canon)
                if len(number) <= len(loop):
                    return True  # each turn adds a member or an item
                fixed = _zero_mantissa(number) and b"e" in number.lower()
                return not fixed and any(0x31 <= c <= 0x39 for c in loop)
            node = (where, canon)
            if node in seen:
                return False
            seen.add(node)
            on_path[where] = len(canon)
            try:
                allowed = np.flatnonzero(lp.allowed_bytes(st)).tolist()
                for b in allowed:
                    nxt = lp.advance_byte(st, b)
                    if nxt is None:
                        continue
                    arr2 = self._feed_arrays(arr, st, bytes((b,)))
                    if arr2 is None:
                        continue  # a recorded close
                    if len(arr2.frames) <= d or arr2.frames[d].item is None:
                        return True  # the item ended with a value not recorded
                    space = not arr.in_str and b in _WHITESPACE
                    if walk(nxt, arr2, canon if space else canon + bytes((b,))):
                        return True
                return False
            finally:
                del on_path[where]

        got = not walk(state, a, b"")
        if len(self._walks) >= MAX_WALK:
            self._walks.clear()  # keyed by the text of items: bounded, not kept forever
        self._walks[memo_key] = got
        return got

    def _string_loops(self, lstate: int) -> bool:
        """Whether the lexer, inside a string at ``lstate``, stays there on a space, an ``a``
        or a ``0`` (so the string can take any number of them)."""
        nxt = self._lp.lexer.next
        return any(nxt(lstate, b) == lstate for b in b" a0")

    def _only_closes(self, state: ParseState, closers: bytes) -> bool:
        """Whether nothing but whitespace and the bytes ``closers``, in order, can follow
        ``state`` up to the last of them (an indented layout spells the whitespace itself; at
        most 256 states of whitespace are followed per closer)."""
        lp = self._lp
        states = {state}
        for closer in closers:
            seen, todo, nxt_states = set(states), list(states), set()
            while todo:
                st = todo.pop()
                allowed = lp.allowed_bytes(st)
                spaces = [b for b in _WHITESPACE if allowed[b]]
                if int(allowed.sum()) != len(spaces) + bool(allowed[closer]):
                    return False
                if allowed[closer]:
                    got = lp.advance_byte(st, closer)
                    if got is not None:
                        nxt_states.add(got)
                for b in spaces:
                    nxt = lp.advance_byte(st, b)
                    if nxt is not None and nxt not in seen:
                        if len(seen) > 256:
                            return False
                        seen.add(nxt)
                        todo.append(nxt)
            if not nxt_states:
                return False
            states = nxt_states
        return True

    def _nonzero_reachable(self, lstate: int) -> bool:
        """Whether the lexer, from ``lstate`` inside a number whose mantissa is zero so far,
        can read a digit 1-9 before any exponent and then end the number. Memoised."""
        got = self._nonzero.get(lstate)
        if got is not None:
            return got
        lexer = self._lp.lexer
        seen = {(lstate, False)}
        todo = [(lstate, False)]
        got = False
        while todo and not got:
            ls, nonzero = todo.pop()
            if nonzero and lexer.accepting(ls):
                got = True
                break
            for c in b"0123456789.eE+-":
                nxt = lexer.next(ls, c)
                if nxt == 0 or (not nonzero and c in b"eE"):
                    continue  # an exponent after a zero mantissa keeps the value zero
                node = (nxt, nonzero or 0x31 <= c <= 0x39)
                if node not in seen:
                    seen.add(node)
                    todo.append(node)
        self._nonzero[lstate] = got
        return got

    def may_mask(self, st: UniqueState, quotes: QuoteTokens) -> bool:
        """Whether some token could close an item equal to an earlier one from ``st``, or
        (bounded items) lead into an item whose every completion is a recorded value."""
        if self._brackets and (st.arrays.frames or quotes.json_classes.opens_two):
            return True
        return bool(self._items) and (
            _quotes_needed(st) <= quotes.most or (self.bounded and bool(st.values)))

    # -- bounded items: look-ahead -------------------------------------------------------------
    def is_dead(self, values: frozenset[str], item: bytes, lstate: int) -> bool:
        """Whether every completion of the open string item ``item`` (raw, from its opening
        quote), its lexer in state ``lstate``, is one of ``values``: the values it can still
        complete (:class:`~lexguide.jsonschema.unique_count.ValueCounter`, one canonical
        spelling each) are counted up to ``len(values) + 1``, and listed and looked up when
        there are no more than ``values``. Memoised per lexer state."""
        if not values:
            return False
        counter = self._value_counter
        node = counter.node(lstate, item)
        tails = counter.tails(node, len(values))
        if tails is None:
            return False
        try:
            return all(decode_item(item + t) in values for t in tails)
        except ValueError:
            return False

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


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


def _closers(raw: bytes) -> bytes:
    """The closing brackets, innermost first, of the brackets ``raw`` leaves open (a JSON
    text outside strings at its end)."""
    stack = []
    for b in _STRING.sub(b"", raw):
        if b == _BRACE or b == _OPEN:
            stack.append(_END_BRACE if b == _BRACE else _CLOSE)
        elif (b == _END_BRACE or b == _CLOSE) and stack:
            stack.pop()
    return bytes(reversed(stack))


def _target(a: Arrays) -> int:
    """The index of the frame whose open item a dead check is about: the innermost, or the one
    around it when the innermost array has no item open (its ``]`` would help end that
    item)."""
    d = len(a.frames) - 1
    f = a.frames[d]
    if f.item is None and f.level == 0 and d > 0:
        d -= 1
    return d


def _number_tail(canon: bytes) -> bytes:
    """The number ``canon`` (a JSON text outside strings) ends with, or b""."""
    n = len(canon)
    while n and canon[n - 1] in _NUMBER_BYTES:
        n -= 1
    return canon[n:]


def _in_key(raw: bytes) -> bool:
    """Whether the string ``raw`` ends inside (a JSON text inside a string) is not a member's
    value (a key, or an array's item): no ``:`` before its opening quote."""
    at = len(raw)
    while True:
        at = raw.rfind(b'"', 0, at)
        if at < 0:
            return False
        if not _escaped(raw[:at]):
            return raw[:at].rstrip(b" \t\n\r")[-1:] != b":"


def _zero_mantissa(item: bytes) -> bool:
    """Whether the open number ``item`` has no digit 1-9 before its exponent (if any)."""
    return not any(0x31 <= c <= 0x39 for c in item.lower().partition(b"e")[0])


def _close(frame: list, data: bytes, end: int) -> bool:
    """Record the item of ``frame`` (a frame of :meth:`UniqueItems._feed_arrays`) ending at
    ``data[end]``; False when its value is recorded already."""
    key = value_key(frame[1] + data[frame[3]:end])
    if key in frame[0]:
        return False
    frame[0] = frame[0] | {key}
    frame[1], frame[3] = None, -1
    return True


_LANES = np.arange(32, dtype=np.int64)


def _ids_of(words: np.ndarray) -> np.ndarray:
    """The token ids whose bits are set in the mask words ``words`` (cost: the nonzero words)."""
    nz = np.flatnonzero(words)
    if not len(nz):
        return nz
    bits = (words[nz, None] >> _LANES.astype(np.uint32)) & 1
    return (nz[:, None] * 32 + _LANES)[bits.astype(bool)]


def _begins_one(ordered: list[str], prefix: str) -> bool:
    """Whether ``prefix`` begins one of the sorted strings ``ordered``."""
    i = bisect_left(ordered, prefix)
    return i < len(ordered) and ordered[i].startswith(prefix)


def _split_partial(item: bytes) -> tuple[str, bytes] | None:
    """``(characters, bytes of an unfinished UTF-8 character)`` of the open item ``item``
    (outside an escape), or None when it does not decode so."""
    for k in range(4):
        try:
            return decode_item(item[:len(item) - k] + b'"'), item[len(item) - k:]
        except ValueError:
            continue
    return None


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


_NUMBER_BYTES = frozenset(b"0123456789.eE+-")
#: the first bytes of a scalar JSON value
_VALUE_FIRSTS = b'"-0123456789tfn'
