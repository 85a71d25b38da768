"""The look-ahead of ``uniqueItems`` objects without additional members whose rest can be
finite once their open members are written: a bounded walk of the bytes the parser allows from
a state until the item ends, deciding whether every completion is a recorded value; and the
checks that a container can only be closed (nothing but whitespace and its closing brackets
follow) or a zero can still gain a digit 1-9. A part of
:class:`lexguide.engine.unique_items.UniqueItems`.
"""

from __future__ import annotations

import numpy as np

from lexguide.engine.lexparser import LexParser, ParseState
from lexguide.engine.unique_values import (
    Arrays,
    MAX_WALK,
    _WHITESPACE,
    _number_tail,
    _target,
    _zero_mantissa,
)

__all__ = ["ClosedLookahead"]


class ClosedLookahead:
    """The look-ahead of closed objects of :class:`~lexguide.engine.unique_items.UniqueItems`
    (a mixin: its state lives there)."""

    __slots__ = ()
    _lp: LexParser

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

