"""``uniqueItems`` items from a counted or listed domain: the scalar items of a finite set of
strings, integers, booleans and null (listed in their canonical spelling), of an integer range
too large for the grammar (its completions counted over the lexer's automaton), and of
numbers with a bound or a ``multipleOf`` (their values counted over the automaton: two
completions of one prefix are one value exactly when they differ by trailing fraction
zeros, so an open prefix's fresh values are its values less the recorded ones it can
complete -- exact for any domain size below the count's saturation). Each decides
whether an open item, or the item a ``,`` requires, can only become a recorded value; a part
of :class:`lexguide.engine.unique_items.UniqueItems`.
"""

from __future__ import annotations

from bisect import bisect_left
from functools import lru_cache

from lexguide.engine.lexparser import LexParser, ParseState
from lexguide.engine.unique_values import (
    Arrays,
    MAX_WALK,
    PLENTY,
    _VALUE_FIRSTS,
    _WHITESPACE,
    _ZERO,
    completions_recorded,
    value_key,
)

__all__ = ["ScalarDomains"]


class ScalarDomains:
    """The counted and listed scalar domains of :class:`~lexguide.engine.unique_items.UniqueItems`
    (a mixin: its state lives there)."""

    __slots__ = ()
    _lp: LexParser

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
        recorded (:meth:`_number_open`, by value: ``1``, ``1.0`` and ``1.00`` are one)."""
        return not a.in_str and self._scalar_dead(
            a, after, before, data, b"-0123456789",
            lambda values, item, got: not self._number_open(values, item, got))

    def _number_open(self, values: frozenset, item: bytes, after: ParseState) -> bool:
        """Whether the open number ``item`` (parse state ``after`` it) can still become a value
        not in ``values``: its values counted (:meth:`number_value_count`) against the
        recorded ones it can complete; exact below :data:`PLENTY`."""
        if not after.pending:
            try:
                return value_key(item) not in values
            except ValueError:
                return True
        lstate = after.lexer_state
        count = self.number_value_count(lstate, item)
        if count is None:  # the lexer spells an exponent: walk the values instead
            return self.number_fresh(values, item, lstate)
        return count >= PLENTY or count > len(values) or \
            count > self._numbers_extending(values, item, lstate)

    def number_value_count(self, lstate: int, item: bytes) -> int | None:
        """How many values the open number ``item`` (lexer state ``lstate``) can still
        complete, counted over the lexer's automaton (:data:`PLENTY` when at least that many,
        or infinitely many); None when the lexer can read an exponent from here (then values
        and spellings do not correspond so). Without an exponent, two completions of one
        prefix are one value exactly when they differ by trailing fraction zeros, so the
        values are the completions that end neither in a fraction zero nor in ``.``, plus the
        item's own value when only zeros (or nothing) complete it. This relies on the lexer
        accepting a value's spelling without its trailing fraction zeros whenever it accepts
        one with them, as the number grammars of :mod:`lexguide.jsonschema.numeric` do (any
        spelling of a value in the domain); the tests hold the count to :meth:`number_fresh`.
        Memoised per lexer state."""
        infrac = b"." in item
        last_bad = item.endswith(b".") or (infrac and item.endswith(b"0"))
        total = self._canonical_count(lstate, infrac, last_bad, set())
        if total is None:
            return None
        if last_bad and self._zeros_end(lstate):
            total += 1  # the item's own value (1.50 = 1.5), reached by zeros or nothing
        return min(total, PLENTY)

    def _canonical_count(self, lstate: int, infrac: bool, last_bad: bool,
                         busy: set) -> int | None:
        """The byte strings of number bytes that take the lexer from ``lstate`` to the end of
        its number, read after text ending in a fraction (``infrac``) and in a fraction zero
        or ``.`` (``last_bad``), whose whole text ends in neither (:data:`PLENTY` for a cycle
        that can still reach such an end); None when an exponent can be read. Memoised."""
        node = (lstate, infrac, last_bad)
        memo = self._canonical_counts
        got = memo.get(node, -1)
        if got != -1:
            return got
        lexer = self._lp.lexer
        if lexer.next(lstate, 0x65) or lexer.next(lstate, 0x45):
            memo[node] = None
            return None
        busy.add(node)
        total = 1 if lexer.accepting(lstate) and not last_bad else 0
        for child in _canonical_steps(lexer, node):
            if child in busy:
                if self._canonical_end_reachable(child):
                    total = PLENTY
                    break
                continue
            got = self._canonical_count(*child, busy)
            if got is None:
                total = None
                break
            total += got
            if total >= PLENTY:
                total = PLENTY
                break
        busy.discard(node)
        memo[node] = total
        return total

    def _canonical_end_reachable(self, node: tuple) -> bool:
        """Whether from ``node`` (lexer state, in a fraction, last byte a fraction zero or
        ``.``) some number bytes end the number in neither."""
        lexer = self._lp.lexer
        seen, todo = {node}, [node]
        while todo:
            cur = todo.pop()
            if lexer.accepting(cur[0]) and not cur[2]:
                return True
            for child in _canonical_steps(lexer, cur):
                if child not in seen:
                    seen.add(child)
                    todo.append(child)
        return False

    def _zeros_end(self, lstate: int) -> bool:
        """Whether the lexer ends its number from ``lstate`` after zeros only (or none)."""
        lexer = self._lp.lexer
        seen = set()
        while lstate and lstate not in seen:
            if lexer.accepting(lstate):
                return True
            seen.add(lstate)
            lstate = lexer.next(lstate, 0x30)
        return False

    def _numbers_extending(self, values: frozenset, item: bytes, lstate: int) -> int:
        """How many of the recorded ``values`` the open number ``item`` (lexer state
        ``lstate``) can still complete: some spelling of the value (its digits, maybe with
        fraction zeros appended up to the item's, or ``-0`` for zero) extends ``item`` and the
        lexer accepts the rest from ``lstate`` (maybe with more fraction zeros)."""
        lexer = self._lp.lexer
        found = 0
        spelled = self._spelled_numbers.get(values)
        if spelled is None:
            if len(self._spelled_numbers) >= MAX_WALK:
                self._spelled_numbers.clear()
            spelled = self._spelled_numbers[values] = sorted(
                (_shortest(v), v) for v in values if isinstance(v, tuple) and v[0] == "n")
        head = item.partition(b".")[0]  # a value extending the item has these digits first
        lo = bisect_left(spelled, (head,))
        hi = bisect_left(spelled, (head + b"\xff",))
        candidates = [v for _, v in spelled[lo:hi]]
        if _ZERO in values and not b"0".startswith(head):
            candidates.append(_ZERO)  # -0
        for v in candidates:
            for text in _spellings(v, item):
                if not text.startswith(item):
                    continue
                ls = lstate
                for c in text[len(item):]:
                    ls = lexer.next(ls, c)
                    if ls == 0:
                        break
                # fraction zeros appended keep the value
                if ls != 0 and (self._zeros_end(ls) if b"." in text else lexer.accepting(ls)):
                    found += 1
                    break
        return found

    def number_fresh(self, values: frozenset, item: bytes, lstate: int) -> bool:
        """Whether some completion of the open number ``item`` (lexer state ``lstate``, number
        bytes only) is a value not in ``values``: a depth-first walk of the completions that
        stops at the first unrecorded value, or at a loop that changes the value (a digit
        1-9, a digit of the integer part, or zeros of a fraction after which a digit 1-9 can
        come: infinitely many values). A loop of zeros ending a fraction only respells and is
        not followed, so the walk ends. At most :data:`MAX_WALK` nodes (past them it answers
        True). The matcher counts instead (:meth:`number_value_count`) and walks only where
        the lexer can read an exponent (the bounded grammars spell none:
        :mod:`lexguide.jsonschema.numeric`); the tests hold the count to this walk."""
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
        return completions_recorded(self._value_counter, lstate, item, values, value_key)


def _canonical_steps(lexer, node: tuple) -> list[tuple]:
    """The nodes one number byte leads to from ``node``: (lexer state, in a fraction, last
    byte a fraction zero or ``.``)."""
    lstate, infrac, _ = node
    out = []
    for c in b"-.0123456789":
        nxt = lexer.next(lstate, c)
        if nxt:
            frac = infrac or c == 0x2E
            out.append((nxt, frac, c == 0x2E or (frac and c == 0x30)))
    return out


@lru_cache(maxsize=65536)
def _shortest(v: tuple) -> bytes:
    """The shortest spelling without exponent of the number key ``v``
    (:func:`~lexguide.engine.unique_values.value_key`)."""
    _, negative, digits, exp = v
    if not digits:
        return b"0"
    if exp >= 0:
        text = digits + "0" * exp
    elif -exp < len(digits):
        text = digits[:exp] + "." + digits[exp:]
    else:
        text = "0." + "0" * (-exp - len(digits)) + digits
    return (("-" if negative else "") + text).encode()


def _spellings(v: tuple, item: bytes) -> list[bytes]:
    """Spellings without exponent of the number key ``v`` that may extend ``item``: its
    shortest one, with fraction zeros appended up to the item's fraction length (and a ``.``
    when the item has one), and ``-0`` for zero."""
    base = [b"0", b"-0"] if not v[2] else [_shortest(v)]
    out = []
    for b in base:
        out.append(b)
        if b"." in item:
            have = b.partition(b".")[2] if b"." in b else None
            want = len(item.partition(b".")[2])
            if have is None:
                out.append(b + b"." + b"0" * want)
            elif len(have) < want:
                out.append(b + b"0" * (want - len(have)))
    return out
