"""``uniqueItems`` by construction, for items with a small finite set of values.

An array of distinct values taken from a finite set ``V`` is a finite language: one
nonterminal per set ``S`` of values used so far, ``U(S) → sep v U(S ∪ {v})`` for each
``v ∉ S`` (any order), and ``U(S) → ε`` once ``minItems`` is reached. That is exact, and it is
built only while the rules stay under :data:`MAX_UNIQUE_RULES` (about 12 values with no
``maxItems``; more values with a small ``maxItems``). Finite item domains: ``enum``,
``const``, ``boolean``, ``null``, integer ranges of at most :data:`MAX_FINITE_VALUES` values,
and unions of these. Equality is JSON Schema's: numbers by value (``1`` and ``1.0`` are one
value, written in any spelling the item schema allows), strings by their characters.

Items that are strings are enforced by the matcher instead (:func:`matcher_items_problem`):
the array is an ordinary array whose item lexeme is marked ``unique_item``, and the engine's
``Matcher`` (:mod:`lexguide.engine.unique_items`) keeps the decoded values written so far and
masks the tokens that would close an equal item. Covered, behind ``$ref`` too:

* ``{"type": "string"}`` with any ``minLength`` and ``not`` of string consts, no ``maxLength``,
  ``pattern`` or ``format``. No dead end arises: an item is a lexeme ``" body "`` where
  ``body`` is ``minLength`` or more JSON characters (minus finitely many excluded consts); its
  value is fixed only by its closing quote, so only a token holding that quote can make a
  duplicate, and those are the only tokens masked. Every open prefix of an item (an opening
  quote and part of a body, maybe inside an escape or a UTF-8 sequence) has infinitely many
  completions -- finish the character, then append any number of characters -- so the
  finitely many earlier items never exhaust them, and every state an allowed token reaches
  still has a distinct completion.
* strings of a bounded language (:func:`bounded_strings`: ``maxLength``, a ``pattern`` or
  ``format`` such as ``date``, ``uuid`` or ``^[a-z]{1,3}$``, a ``not`` of a pattern; any
  ``maxItems``), without ``json_allow_general_unicode_escapes``; a pattern or format without
  ``maxLength`` whose every prefix is open (:func:`regex_open`) is left to the whole-value
  tracking below. The language may be used up, so the matcher also masks the tokens after
  which the open item can only become a recorded value (e.g. ``"ab`` once ``"ab"`` is
  written with ``maxLength: 2``; the byte C3 once the 64 characters it starts are all
  written with ``maxLength: 1``), and a ``,`` after which every item that can start is. It
  counts the *values* the open item can still complete over the lexer's automaton
  (:mod:`lexguide.jsonschema.unique_count`: only each character's canonical spelling is
  followed, so ``\\n``, ``\\u000a`` and ``\\u000A`` count once), up to the recorded values
  + 1, and lists them when there are no more than the recorded values. So no allowed token
  leads to a state without a fresh completion. ``minItems`` must not exceed the language's
  values (counted over the regex, :func:`~lexguide.jsonschema.unique_count.regex_value_count`),
  so a required item always has a fresh value.

With a token budget (``compute_mask(remaining)``) the core's shortest completion may close an
item equal to a recorded one. Once the budget is tight the matcher keeps the tokens after
which a completion *avoiding the recorded items* fits in ``remaining - 1`` tokens
(:mod:`lexguide.engine.unique_budget`: a depth-first search over the core's narrowed masks,
each token stepped through the unique layer, memoised), or else those that overrun least;
the mask is never empty (by the above), so the output never stops in a dead end, and it ends
complete whenever such a completion fitted in the budget it started with. The search is
bounded: a token whose core completion leaves
:data:`~lexguide.engine.unique_budget.MAX_EXTRA` tokens to spare is kept unchecked, tokens
that only extend a string whose text begins no recorded value are judged one per core cost,
and past :data:`~lexguide.engine.unique_budget.MAX_NODES` search nodes a mask trusts the
core's completion.

Any other items are enforced by the matcher as whole JSON values
(:func:`tracked_items_problem`): the array is an ordinary array whose opening bracket is a
lexeme marked ``unique_item`` (named :data:`UNIQUE_ARRAY_NAME`), and the matcher follows the
JSON inside it, keeps the values of its items under JSON equality and masks the tokens that
would complete an equal item (:mod:`lexguide.engine.unique_items`). That cannot lead into a dead
end when every open prefix of an item has infinitely many values beyond it, which holds, by
induction over the schema, for:

* ``{}`` (any value), strings without ``maxLength`` (with a ``pattern`` or ``format`` only when
  every prefix of their regex reaches a cycle, :func:`regex_open`: ``^[a-z][a-z0-9-]*$`` or
  ``uri``, not ``date`` or ``^[a-z]{1,3}$``), objects that can always take one more member
  under a key no recorded object has (``additionalProperties`` not false, no
  ``maxProperties``, ``propertyNames`` allowing infinitely many keys, ``patternProperties``
  of one pattern with a satisfiable schema or of patterns allowing any value: a fresh key
  gives a fresh value, whatever the declared members), arrays without ``maxItems`` or
  ``contains`` (one more item; a nested ``uniqueItems`` array needs items of this list), and
  unions of these;
* numbers without ``maximum``, ``multipleOf`` or a negative ``minimum`` (more digits give more
  values), except prefixes whose digits are all zeros (``0``, ``-0``, ``0e``, all zero);
* ``true``, ``false`` and ``null`` beside the above (their first letter fixes the value);
* objects without additional members (``additionalProperties: false``) whose last declared
  property has a string or container value of the first kind
  (:func:`_closed_problem`): before that member ends the object has infinitely many values,
  after it only ``}`` can follow, so the object is fixed when that member ends;
* objects without additional members whose members are each of the first kind, a number of
  the second, or a finite set of values (booleans, null, enums, integer ranges; together at
  most :data:`MAX_CLOSED_VALUES` values), one member at least not finite: e.g. ``{"name":
  string, "age": integer}`` or ``{"id": string, "enabled": boolean}``. The object has
  infinitely many values, but once its open members are written its rest can be finite; the
  matcher then walks that rest from the parse state (a bounded look-ahead:
  :meth:`lexguide.engine.unique_items.UniqueItems.closed_exhausted`) and masks a token after
  which every completion is recorded. The array's bracket is then named
  :data:`UNIQUE_FINITE_REST_ARRAY_NAME` (:func:`finite_rests`). The walk stops at the first completion not recorded,
  or at a loop that changes the value (a string gaining a character, a number a digit 1-9
  other than in a zero's exponent, an open container a member or an item): infinitely many
  values, more than the recorded ones. What is left for it to enumerate is the finite
  members' values and their spellings, so it ends within its node bound.

The matcher masks the tokens that leave an item of the last three kinds whose only value is
recorded (for such objects: after which only whitespace and ``}`` can follow, the array's
bracket lexeme being named :data:`UNIQUE_CLOSED_ARRAY_NAME`), and, for any container, the
tokens after which only whitespace and its closing brackets can follow (in the indented layout
the newline before a closing bracket belongs to it, so it already fixes the container); so an
allowed token never leads to an item without a fresh completion. A union holding only
``true``, ``false`` and ``null`` is finite and built by the grammar (above). ``prefixItems``
are covered when each position is of this list, or booleans and null with more values than
items before it. ``contains`` is covered when at most one item must match it and there is no
``maxContains``: the grammar forces an item to match only while no earlier item does, so any
matching value is then fresh (every other position takes any item).

A finite set of values too large for the grammar (an ``enum`` of more than about 12 strings,
integers, booleans and null without a small ``maxItems``; at most :data:`MAX_FINITE_STRINGS`,
and ``minItems`` no more than their number: :func:`finite_strings_problem`) is kept distinct
the same way, its bracket named :data:`UNIQUE_STRINGS_ARRAY_NAME`: the matcher reads the values
an open item can still become off the lexer in their canonical spelling (one per value: an
integer const is spelled by its digits alone; a number with a fraction has many spellings and
is refused) and masks the tokens after which all of them are recorded, and the ``,`` after
which every value an item can start is.

An integer range too large for the grammar (``{"type": "integer", "minimum": 1, "maximum":
65535}``, maybe with a ``multipleOf``, no ``not``: :func:`integer_range_problem`) is kept distinct by
counting, its bracket named :data:`UNIQUE_INTEGERS_ARRAY_NAME`. The grammar spells each of its
values one way (decimal digits, no fraction, exponent, leading zero or ``-0``), so the byte
strings that complete an open item from its lexer state are its values; the matcher counts them
(saturating at :data:`MAX_BOUNDED_ITEMS`) and masks a token after which no more of them are
counted than recorded values complete the item, and a ``,`` after which no item can start with
a fresh value (:meth:`lexguide.engine.unique_items.UniqueItems._integers_dead`). A count that
saturates exceeds the recorded values (fewer than ``maxItems`` or than the range's size, one of
them below :data:`MAX_BOUNDED_ITEMS`), and ``minItems`` is at most the range's size, so every
state an allowed token reaches has a fresh completion.

Numbers with a bound or a ``multipleOf`` otherwise (a fraction inside bounds, an integer range
with one bound: :func:`bounded_numbers_problem`) get the bracket
:data:`UNIQUE_NUMBERS_ARRAY_NAME`. Their grammar spells no exponent but allows trailing
fraction zeros, so ``1``, ``1.0`` and ``1.00`` are one value: two completions of one open
prefix are one value exactly when they differ by trailing fraction zeros. The matcher counts
the values an open item can still complete over the lexer's automaton (the completions that
end neither in a fraction zero nor in ``.``, plus the item's own value when zeros complete it:
:meth:`lexguide.engine.unique_items.UniqueItems.number_value_count`, saturating at
:data:`MAX_BOUNDED_ITEMS`) against the recorded values it can complete, and masks a token or
``,`` after which none is fresh. The count is exact for domains of any size below the
saturation (prices 0..100 with a 0.01 step need no ``maxItems``); a domain of at least
:data:`MAX_BOUNDED_ITEMS` values needs a ``maxItems`` below that.

Items that are objects with ``maxProperties`` (at least 1), open to members under fresh keys
(:func:`_bounded_object_problem`), have a fresh value below ``maxProperties``; once full their
rest can be finite, so their array takes :data:`UNIQUE_FINITE_REST_ARRAY_NAME` and the matcher's
look-ahead decides it (the token ending the last key, say, when every value it can take is
recorded).

Anything else is not enforceable here: :func:`unique_items_problem`,
:func:`matcher_items_problem` and :func:`tracked_items_problem` say why, and the compiler
raises a :class:`~lexguide.errors.SchemaError` pointing to ``lenient=True``. Refused today:
a finite domain of numbers of at least :data:`MAX_BOUNDED_ITEMS` values without a
``maxItems`` below that, objects with ``maxProperties`` nested inside the items (or
closed to more members), finitely many property names or restricted overlapping patterns, ``contains`` with ``minContains`` above 1 or
``maxContains``, bounded strings under general unicode escapes, and a union of a marked array
with an array whose items can run out (:func:`union_problem`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal
from itertools import combinations
from math import comb

from lexguide.jsonschema.schema import (
    AnyOfSchema,
    AnySchema,
    ArraySchema,
    BoolSchema,
    NullSchema,
    NumberSchema,
    ObjectSchema,
    RefSchema,
    Schema,
    StringSchema,
    Unsat,
)
from lexguide.limits import MAX_NESTING_DEPTH
from lexguide.jsonschema.unique_count import INFINITE, regex_value_count
from lexguide.jsonschema.unique_domains import (
    MAX_BOUNDED_ITEMS,
    MAX_FINITE_STRINGS,
    bounded_numbers_problem,
    deref,
    finite_strings_problem,
    integer_range_problem,
)
from lexguide.regex import nodes as rx

__all__ = ["MAX_BOUNDED_ITEMS", "MAX_CLOSED_VALUES", "MAX_FINITE_STRINGS", "MAX_FINITE_VALUES", "MAX_OPEN_STATES",
           "MAX_UNIQUE_RULES", "UNIQUE_ARRAY_NAME", "UNIQUE_CLOSED_ARRAY_NAME",
           "UNIQUE_FINITE_REST_ARRAY_NAME", "UNIQUE_INTEGERS_ARRAY_NAME", "UNIQUE_NUMBERS_ARRAY_NAME", "UNIQUE_STRINGS_ARRAY_NAME",
           "bounded_numbers_problem", "bounded_strings", "closed_objects", "deref", "distinct_subsets",
           "finite_rests", "finite_strings_problem", "finite_values", "integer_range_problem", "matcher_items_problem", "regex_open",
           "tracked", "tracked_items_problem", "union_problem", "unique_items_problem",
           "unique_rule_count"]

#: the name of the opening bracket lexeme (marked ``unique_item``) of a ``uniqueItems`` array
#: whose items the matcher keeps distinct as whole JSON values (not a Lark or GBNF rule name)
UNIQUE_ARRAY_NAME = "[<uniqueItems>"
#: the same, when an item can be an object without additional members (:func:`closed_objects`)
UNIQUE_CLOSED_ARRAY_NAME = "[<uniqueItems, closed objects>"
#: the same, when such an object can have a finite rest once its open members are written
#: (:func:`finite_rests`: the matcher's look-ahead then scans every allowed token inside it)
UNIQUE_FINITE_REST_ARRAY_NAME = "[<uniqueItems, closed objects with a finite rest>"
#: the same, for items from a finite set of strings too large for the grammar
#: (:func:`finite_strings_problem`)
UNIQUE_STRINGS_ARRAY_NAME = "[<uniqueItems, finite strings>"
#: the same, for items from an integer range too large for the grammar
#: (:func:`integer_range_problem`: the matcher counts the completions of an open item)
UNIQUE_INTEGERS_ARRAY_NAME = "[<uniqueItems, integer range>"
#: the same, for numbers with a bound or a ``multipleOf`` (:func:`bounded_numbers_problem`:
#: the matcher lists the values an open item can still complete)
UNIQUE_NUMBERS_ARRAY_NAME = "[<uniqueItems, bounded numbers>"
#: Largest integer range (``maximum - minimum + 1``) read as a finite set of values.
MAX_FINITE_VALUES = 256
#: Largest number of grammar rules spent on one ``uniqueItems`` array.
MAX_UNIQUE_RULES = 50_000

Key = tuple  # ("null",) | ("bool", b) | ("num", Decimal) | ("str", s)


def finite_values(s: Schema, resolve: Callable[[str], Schema],
                  depth: int = 0) -> list[tuple[Key, Schema]] | str:
    """The values of ``s`` as ``(equality key, schema of exactly that value)``, in schema
    order without duplicates, or a string saying why ``s`` is not a small finite set. Pure."""
    if depth > MAX_NESTING_DEPTH:
        return "references nested too deeply"
    if isinstance(s, Unsat):
        return []
    if isinstance(s, NullSchema):
        return [(("null",), s)]
    if isinstance(s, BoolSchema):
        vals = (True, False) if s.value is None else (s.value,)
        return [(("bool", v), BoolSchema(v)) for v in vals]
    if isinstance(s, StringSchema):
        if s.const is None:
            return "the items are any string of a kind (not an enum or const)"
        return [(("str", s.const), s)]
    if isinstance(s, NumberSchema):
        return _numbers(s)
    if isinstance(s, RefSchema):
        return finite_values(resolve(s.key), resolve, depth + 1)
    if isinstance(s, AnyOfSchema):
        out: dict[Key, list[Schema]] = {}
        for o in s.options:
            got = finite_values(o, resolve, depth + 1)
            if isinstance(got, str):
                return got
            for key, v in got:
                out.setdefault(key, []).append(v)  # e.g. enum [1, 1.0]: one value, two spellings
        return [(key, vs[0] if len(vs) == 1 else AnyOfSchema(tuple(vs)))
                for key, vs in out.items()]
    return f"the items are {_kind(s)}, not a finite set of scalar values"


def _kind(s: Schema) -> str:
    return {ArraySchema: "arrays", ObjectSchema: "objects", NumberSchema: "numbers",
            AnyOfSchema: "a union of schemas"}.get(type(s), "any JSON value")


def _numbers(s: NumberSchema) -> list[tuple[Key, Schema]] | str:
    lo, hi = s.minimum, s.maximum
    if lo is not None and lo == hi:  # a const (or a closed range of one point)
        if (s.integer and lo != lo.to_integral_value()) or s.exclusive_minimum:
            return []
        values = [lo]
    elif not s.integer or lo is None or hi is None:
        return "the items are numbers of an unbounded or continuous range"
    else:
        first = int(lo.to_integral_value(rounding="ROUND_CEILING"))
        last = int(hi.to_integral_value(rounding="ROUND_FLOOR"))
        first += s.exclusive_minimum and first == lo
        last -= s.exclusive_maximum and last == hi
        if last - first + 1 > MAX_FINITE_VALUES:
            return (f"the items are an integer range of {last - first + 1} values (at most "
                    f"{MAX_FINITE_VALUES} are enumerated)")
        values = [Decimal(i) for i in range(first, last + 1)]
    if s.multiple_of is not None:
        values = [v for v in values if v % s.multiple_of == 0]
    values = [v for v in values if all(v % m != 0 for m in s.not_multiples)]
    if s.non_integer:
        values = [v for v in values if v != v.to_integral_value()]
    # each value keeps the schema's own spellings of it (integer or not, multipleOf, ...)
    return [(("num", v.normalize()), replace(s, minimum=v, maximum=v, exclusive_minimum=False,
                                             exclusive_maximum=False)) for v in values]


def unique_rule_count(n_values: int, lo: int, hi: int | None) -> int:
    """Rules of the distinct-subset grammar: one per (set of fewer than ``hi`` values, next
    value) plus one end rule per set of at least ``lo`` values."""
    top = n_values if hi is None else min(hi, n_values)
    total = 0
    for k in range(top + 1):
        sets = comb(n_values, k)
        total += sets * ((n_values - k if k < top else 0) + (k >= lo))
        if total > MAX_UNIQUE_RULES:
            break
    return total


def bounded_strings(items: StringSchema) -> bool:
    """Whether string items may form a finite language (``maxLength``, a ``pattern``,
    ``format`` or an excluded pattern): the matcher then counts the values an open item can
    still complete (:mod:`lexguide.jsonschema.unique_count`)."""
    return items.max_length is not None or bool(items.patterns or items.formats) or any(
        want or kind != "const" for want, kind, _ in items.rx_filters)


def matcher_items_problem(s: ArraySchema, resolve: Callable[[str], Schema],
                          general_escapes: bool = False,
                          string_rx: Callable[[StringSchema], int] | None = None) -> str | None:
    """Why the matcher cannot keep the items of ``s`` distinct as marked string lexemes (None:
    it can; see the module docstring for the covered item schemas and why no dead end
    arises). ``general_escapes``: strings may spell a character in several ways.
    ``string_rx``: the regex of a string schema's JSON strings (quotes included), to count
    the values of bounded strings against ``minItems`` and to leave strings whose every
    prefix is open (:func:`regex_open`) to the whole-value tracking; without it bounded
    strings with ``minItems`` above 1 are refused. Pure."""
    if s.prefix:
        return "uniqueItems with prefixItems is not supported"
    if s.contains is not None:
        return "uniqueItems with contains is not supported"
    items = deref(s.items, resolve)
    if not isinstance(items, StringSchema):
        return f"the items are {_kind(items)}, which only strings are kept distinct as"
    if items.const is not None:
        return "the items are a single string"
    if not bounded_strings(items):
        return None
    if general_escapes:
        return ("the items are strings of a bounded length, pattern or format spelled in "
                "several ways (general unicode escapes): their values are not counted")
    if string_rx is None:
        if s.min_items > 1:
            return "the items are bounded strings whose values were not counted"
        return None
    x = string_rx(items)
    if items.max_length is None and regex_open(x):
        return "the items are strings whose every prefix has infinitely many completions"
    if s.min_items > 1:
        n = regex_value_count(x, s.min_items)
        if n < s.min_items:
            return f"minItems {s.min_items} needs more than the {n} strings the items allow"
    return None


def tracked_items_problem(s: ArraySchema, resolve: Callable[[str], Schema],
                          string_rx: Callable[[StringSchema], int] | None = None) -> str | None:
    """Why the matcher cannot keep the items of ``s`` distinct as whole JSON values (None: it
    can; see "Any other items" in the module docstring). ``string_rx``: the regex of a string
    schema's JSON strings (quotes included), to admit strings with a pattern or format whose
    every prefix has infinitely many completions (:func:`regex_open`); without it they are
    refused. ``contains`` is admitted when at most one item must match it and
    ``maxContains`` is absent: the grammar then forces an item to match only while no earlier
    item does, so any value matching it is fresh; every other position takes any item. Pure."""
    if s.contains is not None:
        if s.min_contains > 1 or s.max_contains is not None:
            return ("uniqueItems with contains needing more than one matching item "
                    "(minContains) or bounding them (maxContains) is not supported: the "
                    "matching items could be used up")
        if s.prefix:
            return "uniqueItems with contains and prefixItems is not supported"
    for i, p in enumerate(s.prefix):
        values = finite_values(p, resolve)
        if isinstance(values, str):
            got = _open_problem(p, resolve, 0, string_rx)
            if got is not None:
                return f"prefixItems/{i}: {got}"
        elif any(key[0] not in ("bool", "null") for key, _ in values):
            return (f"prefixItems/{i} is a finite set of values other than true, false and "
                    "null")
        elif len(values) <= i:
            return (f"prefixItems/{i} has {len(values)} values, which the {i} items before it "
                    "could use up")
    if s.prefix and not isinstance(s.items, Unsat) and \
            not isinstance(finite_values(s.items, resolve), str):
        return "the items after prefixItems are a finite set of values"
    items = deref(s.items, resolve)
    if isinstance(items, ObjectSchema) and items.max_properties is not None and not s.prefix:
        return _bounded_object_problem(items, resolve, string_rx)
    return _open_problem(s.items, resolve, 0, string_rx)


def _bounded_object_problem(s: ObjectSchema, resolve: Callable[[str], Schema],
                            string_rx: Callable[[StringSchema], int] | None) -> str | None:
    """Why items that are objects with ``maxProperties`` may run out of values (None: they
    cannot). Admitted when, below ``maxProperties`` (at least 1), the object can always take
    a member under a fresh key (:func:`_fresh_keys`, :func:`_infinite_names`): a new item, or
    one with fewer members, has a fresh value; once the object is full its rest can be
    finite, and the matcher decides it by its look-ahead (:func:`finite_rests`). Only as the
    items themselves: nested deeper, a full object's finite rest would not be looked at."""
    if s.max_properties is not None and s.max_properties < 1:
        return "the items are objects with maxProperties 0 (one value)"
    if s.some_members or isinstance(s.additional, Unsat) or \
            not _infinite_names(s, resolve, string_rx) or \
            (s.pattern_properties and not _fresh_keys(s, resolve)):
        return ("the items are objects with maxProperties that cannot always take a member "
                "under a fresh key below it")
    return None


def union_problem(options: tuple[Schema, ...], resolve: Callable[[str], Schema],
                  string_rx: Callable[[StringSchema], int] | None = None
                  ) -> tuple[int, str] | None:
    """``(index, why)`` of an option of a union that is a ``uniqueItems`` array the matcher
    keeps distinct by its opening bracket while another option can open an array whose items
    may run out (the matcher cannot tell the two arrays apart at their ``[``, so it holds both
    to uniqueness: with items that can run out, that could be a dead end). None when there is
    no such option. Pure."""
    arrays = [o if isinstance(o, (ArraySchema, AnySchema)) else None
              for o in (deref(o, resolve) for o in options)]
    if sum(a is not None for a in arrays) < 2:
        return None
    for i, a in enumerate(arrays):
        if not (isinstance(a, ArraySchema) and a.unique and tracked(a, resolve, string_rx)):
            continue
        for j, other in enumerate(arrays):
            if j == i or other is None or isinstance(other, AnySchema):
                continue
            if other.max_items == 0 or (other.unique and tracked(other, resolve, string_rx)):
                continue
            if tracked_items_problem(other, resolve, string_rx) is not None or \
                    not isinstance(finite_values(other.items, resolve), str):
                return i, ("it is a union with another array schema whose items could be used "
                           f"up (anyOf option {j}), which the matcher would hold to uniqueness "
                           "too")
    return None


def tracked(s: ArraySchema, resolve: Callable[[str], Schema],
            string_rx: Callable[[StringSchema], int] | None = None) -> bool:
    """Whether the compiler keeps the items of the ``uniqueItems`` array ``s`` distinct by
    marking its opening bracket."""
    values = finite_values(s.items, resolve)
    if unique_items_problem(s, values) is None:
        return False
    if not isinstance(values, str) and not s.prefix:  # a finite set of strings, or nothing
        return finite_strings_problem(s, values) is None or \
            integer_range_problem(s, resolve) is None
    items = deref(s.items, resolve)
    if isinstance(items, StringSchema) and \
            matcher_items_problem(s, resolve, False, string_rx) is None:
        return False
    return tracked_items_problem(s, resolve, string_rx) is None or \
        integer_range_problem(s, resolve) is None or bounded_numbers_problem(s, resolve) is None


#: derivative states :func:`regex_open` explores before it gives up (answers False)
MAX_OPEN_STATES = 2_000
_OPEN_CACHE: dict[int, bool] = {}
rx.on_rotate(_OPEN_CACHE.clear)  # its keys are regex nodes


def regex_open(x: int) -> bool:
    """Whether every prefix of a string of the regex ``x`` that is not yet a whole string has
    infinitely many completions: every non-empty derivative state, except those matching only
    the empty string, reaches a cycle. False also when more than :data:`MAX_OPEN_STATES`
    states are reachable. Memoised per node."""
    got = _OPEN_CACHE.get(x)
    if got is None:
        got = _OPEN_CACHE[x] = _regex_open(x)
    return got


def _regex_open(x: int) -> bool:
    succ: dict[int, set[int]] = {}
    order, known = [x], {x}
    while len(succ) < len(order):
        y = order[len(succ)]
        nxt = {rx.derivative(y, b) for b in set(rx.byte_partition(y)[1])} - {rx.NOTHING}
        if any(rx.has_boolean(z) for z in nxt):
            kids = list(nxt)
            nxt = {z for z, empty in zip(kids, rx.empty_among(kids)) if not empty}
        succ[y] = nxt
        for z in nxt - known:
            known.add(z)
            order.append(z)
            if len(order) > MAX_OPEN_STATES:
                return False
    reach: dict[int, set[int]] = {}
    for y in order:  # states reachable in one step or more
        seen: set[int] = set()
        todo = list(succ[y])
        while todo:
            z = todo.pop()
            if z not in seen:
                seen.add(z)
                todo.extend(succ[z])
        reach[y] = seen
    cyclic = {y for y in order if y in reach[y]}
    return all(not succ[y] or y in cyclic or not cyclic.isdisjoint(reach[y]) for y in order)


def _open_problem(s: Schema, resolve: Callable[[str], Schema], depth: int,
                  string_rx: Callable[[StringSchema], int] | None) -> str | None:
    """Why some prefix of a value of ``s`` may have finitely many completions (None: every
    prefix has infinitely many values beyond it, except a ``true``/``false``/``null`` or a
    number whose digits so far are zeros, which the matcher decides itself)."""
    if depth > MAX_NESTING_DEPTH:
        return "the items' references are nested too deeply"
    if isinstance(s, RefSchema):
        return _open_problem(resolve(s.key), resolve, depth + 1, string_rx)
    if isinstance(s, (AnySchema, Unsat)):
        return None
    if isinstance(s, (BoolSchema, NullSchema)):
        return None
    if isinstance(s, AnyOfSchema):
        for o in s.options:
            got = _open_problem(o, resolve, depth + 1, string_rx)
            if got is not None:
                return got
        return None
    if isinstance(s, NumberSchema):
        if s.maximum is not None or (s.minimum is not None and s.minimum < 0):
            return ("the items are numbers with a maximum or a negative minimum (a prefix such "
                    "as the digits of the maximum has finitely many completions)")
        if s.multiple_of is not None or s.not_multiples or s.non_integer:
            return "the items are numbers with multipleOf or a not"
        return None
    if isinstance(s, StringSchema):
        if s.const is not None:
            return "the items are a string const among other values"
        if s.max_length is not None:
            return "the items are strings with maxLength among other values"
        if s.patterns or s.formats or any(want or kind != "const"
                                          for want, kind, _ in s.rx_filters):
            if string_rx is None or not regex_open(string_rx(s)):
                return ("the items are strings with a pattern or format that a finite set of "
                        "strings could use up (some prefix has finitely many completions)")
        return None
    if isinstance(s, ArraySchema):
        if s.max_items is not None:
            return "the items are arrays with maxItems (a finite language could be used up)"
        if s.contains is not None:
            return "the items are arrays with contains"
        if isinstance(s.items, Unsat):
            return "the items are arrays of a fixed length"
        if s.unique:
            inner = finite_values(s.items, resolve)
            if not isinstance(inner, str):
                return "the items are uniqueItems arrays of a finite set of values"
            return _open_problem(s.items, resolve, depth + 1, string_rx)
        return None
    if isinstance(s, ObjectSchema):
        if s.some_members or s.max_properties is not None \
                or not _infinite_names(s, resolve, string_rx) or \
                (s.pattern_properties and not _fresh_keys(s, resolve)):
            return ("the items are objects that cannot always take one more member "
                    "(patternProperties with several restricted patterns or without more "
                    "members, propertyNames allowing finitely many keys, or maxProperties "
                    "restrict them: a finite language could be used up)")
        if isinstance(s.additional, Unsat):
            return _closed_problem(s, resolve, depth, string_rx)
        return None
    return f"the items are {_kind(s)}"


def _infinite_names(s: ObjectSchema, resolve: Callable[[str], Schema],
                    string_rx: Callable[[StringSchema], int] | None) -> bool:
    """Whether ``propertyNames`` of ``s`` allows infinitely many keys (counted over the
    regex of its strings, :func:`~lexguide.jsonschema.unique_count.regex_value_count`)."""
    names = deref(s.property_names, resolve)
    options = names.options if isinstance(names, AnyOfSchema) else (names,)
    for o in (deref(o, resolve) for o in options):  # only string options name keys
        if isinstance(o, AnySchema):
            return True
        if isinstance(o, StringSchema) and o.const is None and o.max_length is None and \
                string_rx is not None and \
                regex_value_count(string_rx(o), INFINITE) >= INFINITE:
            return True
    return False


def _fresh_keys(s: ObjectSchema, resolve: Callable[[str], Schema]) -> bool:
    """Whether an object with ``patternProperties`` can always take a member under a key no
    recorded object has: other members are allowed (``additionalProperties`` not false) and
    no key is refused by its patterns (one pattern, with a satisfiable schema, or several
    that all allow any value), so infinitely many keys are allowed."""
    schemas = [deref(p, resolve) for _, p in s.pattern_properties]
    return not isinstance(s.additional, Unsat) and not any(
        isinstance(p, Unsat) for p in schemas) and (
        len(schemas) == 1 or all(isinstance(p, AnySchema) for p in schemas))


def closed_objects(s: Schema, resolve: Callable[[str], Schema], depth: int = 0) -> bool:
    """Whether an item of ``s`` can be an object without additional members (its value is
    fixed once its last member's value is: the matcher checks that close)."""
    s = deref(s, resolve)
    if isinstance(s, ObjectSchema):
        return isinstance(s.additional, Unsat)
    if isinstance(s, AnyOfSchema) and depth < MAX_NESTING_DEPTH:
        return any(closed_objects(o, resolve, depth + 1) for o in s.options)
    return False


#: most values the finite members of an object without additional members may take together
#: when its last member is not of an open kind (the matcher's look-ahead enumerates them)
MAX_CLOSED_VALUES = 64


def finite_rests(s: Schema, resolve: Callable[[str], Schema], depth: int = 0) -> bool:
    """Whether an item of ``s`` can be an object without additional members whose last member
    is not of an open kind (admitted by :func:`_closed_problem`'s second rule: its rest can be
    finite before its last member ends), or is an object with ``maxProperties``
    (:func:`_bounded_object_problem`: full, its rest can be finite)."""
    s = deref(s, resolve)
    if isinstance(s, ObjectSchema):
        return isinstance(s.additional, Unsat) and not _open_last(s, resolve, depth) or \
            depth == 0 and s.max_properties is not None
    if isinstance(s, AnyOfSchema) and depth < MAX_NESTING_DEPTH:
        return any(finite_rests(o, resolve, depth + 1) for o in s.options)
    return False


def _open_last(s: ObjectSchema, resolve: Callable[[str], Schema], depth: int,
               string_rx: Callable[[StringSchema], int] | None = None) -> bool:
    """Whether the last declared property of ``s`` is a string or container every prefix of
    which has infinitely many completions (not an object without additional members)."""
    if not s.properties:
        return False
    last = deref(s.properties[-1][1], resolve)
    return not (isinstance(last, ObjectSchema) and isinstance(last.additional, Unsat)) and \
        isinstance(last, (StringSchema, ObjectSchema, ArraySchema)) and \
        _open_problem(last, resolve, depth + 1, string_rx) is None


def _closed_problem(s: ObjectSchema, resolve: Callable[[str], Schema], depth: int,
                    string_rx: Callable[[StringSchema], int] | None) -> str | None:
    """Why an object item without additional members may run out of values (None: it
    cannot). Two kinds are admitted:

    * its last declared property (required) has a string or container value every prefix of
      which has infinitely many completions: until that member ends the object has infinitely
      many values, after it only ``}`` can follow, and the matcher masks the token that ends
      that member when the object so fixed is recorded;
    * every member is of such an open kind or a number of the open kind, or takes a finite set
      of values (:func:`finite_values`: booleans, null, enums, integer ranges), the finite
      ones :data:`MAX_CLOSED_VALUES` values together at most, and one member at least is
      open: the object has infinitely many values, and where the rest of an open item is
      finite (its open members written) the matcher enumerates it from the parse state
      (:meth:`lexguide.engine.unique_items.UniqueItems.closed_exhausted`) and masks a token
      after which every completion is recorded."""
    why = ("the items are objects without additional members whose last declared property "
           "does not have a string, object or array value every prefix of which has "
           "infinitely many completions (a finite language could be used up)")
    if not s.properties or any(r not in dict(s.properties) for r in s.required):
        return why
    if _open_last(s, resolve, depth, string_rx):
        return None
    n_values, n_open = 1, 0
    for name, p in s.properties:
        p = deref(p, resolve)
        if isinstance(p, ObjectSchema) and isinstance(p.additional, Unsat):
            return why + f" (member {name!r} is such an object itself)"
        values = finite_values(p, resolve)
        if not isinstance(values, str):
            n_values *= len(values) + (name not in s.required)
            if n_values > MAX_CLOSED_VALUES:
                return (why + f"; its finite members take more than {MAX_CLOSED_VALUES} "
                        "values together")
        elif isinstance(p, (StringSchema, ObjectSchema, ArraySchema, NumberSchema, AnySchema,
                            AnyOfSchema)) and \
                _open_problem(p, resolve, depth + 1, string_rx) is None:
            n_open += 1
        else:
            return why + f" (member {name!r} is neither open nor a small finite set)"
    return None if n_open else why + " (no member takes infinitely many values)"


def unique_items_problem(s: ArraySchema, values: list | str) -> str | None:
    """Why ``uniqueItems`` of ``s`` cannot be built exactly (None: it can)."""
    if s.prefix:
        return "uniqueItems with prefixItems is not supported"
    if s.contains is not None:
        return "uniqueItems with contains is not supported"
    if isinstance(values, str):
        return values
    n_rules = unique_rule_count(len(values), s.min_items, s.max_items)
    if n_rules > MAX_UNIQUE_RULES:
        return (f"{len(values)} distinct item values need more than {MAX_UNIQUE_RULES} rules "
                "to enforce (lower maxItems, or fewer values)")
    return None


def distinct_subsets(n_values: int, lo: int, hi: int | None):
    """Yield ``(used, can_end, moves)`` per reachable set of used value indices (a sorted
    tuple), ``moves`` being the indices that may follow; only sets from which ``lo`` is
    still reachable are produced (so no prefix is a dead end)."""
    top = n_values if hi is None else min(hi, n_values)
    if lo > top:
        return
    for k in range(top + 1):
        for used in combinations(range(n_values), k):
            moves = [] if k == top else [i for i in range(n_values) if i not in used]
            yield used, k >= lo, moves
