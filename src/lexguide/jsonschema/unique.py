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
* the same strings with ``maxLength >= 1`` (no ``not``), in an array with ``maxItems`` of at
  most :data:`MAX_BOUNDED_ITEMS`, when every character has one spelling (not
  ``json_allow_general_unicode_escapes``). The language is finite, so the matcher also masks
  the tokens after which the open item can only become a recorded value (e.g. ``"ab`` once
  ``"ab"`` is written with ``maxLength: 2``; the byte C3 once the 64 characters it starts are
  all written with ``maxLength: 1``): it counts the completions of the item from the lexer
  state (one spelling each, so spellings are values) and lists them when there are no more
  than the recorded values. The count is exact except that a state from which two more
  characters can be read counts as plenty: the first of them can be any of more than
  :data:`MAX_BOUNDED_ITEMS` characters, so at least that many values complete it, more than
  the earlier items (fewer than ``maxItems``). So no allowed token leads to a state without a
  fresh completion, and a new item (at least :data:`MAX_BOUNDED_ITEMS` values, ``maxLength >=
  1``) always has one.

With a token budget (``compute_mask(remaining)``) the shortest completion of an item may
itself be a duplicate; when the budget-narrowed mask less the masked tokens is empty the
matcher falls back to the plain mask less them (never empty, by the above), so the output can
overrun the budget by the characters a distinct item needs, and never stops in a dead end.

Anything else is not enforceable here: :func:`unique_items_problem` says why, and the
compiler raises a :class:`~lexguide.errors.SchemaError` pointing to ``lenient=True``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal
from itertools import combinations
from math import comb

from lexguide.jsonschema.schema import (
    AnyOfSchema,
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

__all__ = ["MAX_BOUNDED_ITEMS", "MAX_FINITE_VALUES", "MAX_UNIQUE_RULES", "distinct_subsets",
           "finite_values",
           "matcher_items_problem", "unique_items_problem", "unique_rule_count"]

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


#: Fewer characters than a JSON string can hold at one position (Unicode has 1,112,064 scalar
#: values; at most 34 of them need an escape a policy may forbid): the most items of a
#: ``uniqueItems`` array of strings with ``maxLength`` the matcher keeps distinct.
MAX_BOUNDED_ITEMS = 1_000_000


def matcher_items_problem(s: ArraySchema, resolve: Callable[[str], Schema],
                          general_escapes: bool = False) -> str | None:
    """Why the matcher cannot keep the items of ``s`` distinct (None: it can; see the module
    docstring for the covered item schemas and why no dead end arises). ``general_escapes``:
    strings may spell a character in several ways. Pure."""
    if s.prefix:
        return "uniqueItems with prefixItems is not supported"
    if s.contains is not None:
        return "uniqueItems with contains is not supported"
    items = s.items
    for _ in range(MAX_NESTING_DEPTH):
        if not isinstance(items, RefSchema):
            break
        items = resolve(items.key)
    if not isinstance(items, StringSchema):
        return f"the items are {_kind(items)}, which only strings are kept distinct as"
    if items.const is not None:
        return "the items are a single string"
    if items.max_length is not None:
        if items.max_length == 0:
            return "the items are strings with maxLength 0 (one value)"
        if general_escapes:
            return ("the items are strings with maxLength spelled in several ways (general "
                    "unicode escapes)")
        if s.max_items is None or s.max_items > MAX_BOUNDED_ITEMS:
            return (f"the items are strings with maxLength and the array has no maxItems of at "
                    f"most {MAX_BOUNDED_ITEMS} (a finite language that enough items could use up)")
        if items.rx_filters:
            return "the items are strings with maxLength and a not"
    if items.patterns or items.formats:
        return "the items are strings with a pattern or format (maybe a finite language)"
    if any(want or kind != "const" for want, kind, _ in items.rx_filters):
        return "the items are strings excluding a pattern or format (maybe a finite language)"
    return None


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
