"""Sizes of the item domains the matcher keeps distinct by counting or listing values: a
finite set of scalar values too large for the grammar, an integer range (maybe with a
``multipleOf``), numbers with a bound or a ``multipleOf``. Each ``*_problem`` says why the
matcher cannot take an array's items (None: it can); :mod:`lexguide.jsonschema.unique` says how
they are kept distinct and :mod:`lexguide.engine.unique_items` does it. Pure functions."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from math import gcd

from lexguide.jsonschema.schema import ArraySchema, NumberSchema, RefSchema, Schema
from lexguide.limits import MAX_NESTING_DEPTH

__all__ = ["MAX_BOUNDED_ITEMS", "MAX_FINITE_STRINGS", "bounded_numbers_problem", "deref",
           "finite_strings_problem", "integer_range_problem"]

#: Where the matcher's count of an integer range's completions, or of a bounded number's
#: values, saturates: a domain of at least this many values needs a ``maxItems`` below it
#: (:func:`integer_range_problem`, :func:`bounded_numbers_problem`), so a saturated count
#: always exceeds the recorded values.
MAX_BOUNDED_ITEMS = 1_000_000
#: Most values of a finite set of items the matcher keeps distinct
#: (:func:`finite_strings_problem`)
MAX_FINITE_STRINGS = 4096


def deref(s: Schema, resolve: Callable[[str], Schema]) -> Schema:
    """``s`` with references followed (at most :data:`MAX_NESTING_DEPTH` of them)."""
    for _ in range(MAX_NESTING_DEPTH):
        if not isinstance(s, RefSchema):
            break
        s = resolve(s.key)
    return s


def finite_strings_problem(s: ArraySchema, values: list | str,
                           general_escapes: bool = False) -> str | None:
    """Why the matcher cannot keep distinct the items of ``s``, a finite set ``values`` (from
    :func:`finite_values`) of strings, integers, booleans and null too large for the grammar
    (None: it can: inside an item it masks the tokens after which the item can only become a
    recorded value, and after a ``,`` the tokens after which no unrecorded value is left, so
    ``minItems`` up to the number of values is reachable and no allowed token leads to a dead
    end). The matcher lists an item's completions by their canonical spelling
    (:mod:`lexguide.jsonschema.unique_count`), so every value needs one such spelling per
    value: an integer const is spelled by its digits alone, but a number with a fraction (or
    a float const such as ``1.0``) in any number of ways (``2.5``, ``2.50``): refused. Pure."""
    if isinstance(values, str) or not values or s.prefix or s.contains is not None:
        return "the items are not a finite set of values"
    for key, v in values:
        if key[0] == "num" and not (isinstance(v, NumberSchema) and v.integer):
            return (f"the items are a finite set of values holding the number {key[1]} "
                    "spelled in several ways (a fraction or a float const; integers are "
                    "spelled one way)")
    if general_escapes and any(key[0] == "str" for key, _ in values):
        return ("the items are a finite set of strings spelled in several ways (general "
                "unicode escapes)")
    if len(values) > MAX_FINITE_STRINGS:
        return (f"the items are {len(values)} values (at most {MAX_FINITE_STRINGS} are kept "
                "distinct this way)")
    if s.min_items > len(values):
        return f"minItems {s.min_items} needs more than the {len(values)} values the items allow"
    return None


def integer_range_problem(s: ArraySchema, resolve: Callable[[str], Schema]) -> str | None:
    """Why the matcher cannot keep distinct the items of ``s`` as integers of a bounded range
    by counting (None: it can). The items must be ``{"type": "integer"}`` with a finite
    ``minimum`` and ``maximum``, maybe a ``multipleOf``, and no ``not``, so that the grammar
    spells each value one way (decimal digits, no fraction, exponent, leading zero or
    ``-0``); at least ``minItems`` values; fewer than :data:`MAX_BOUNDED_ITEMS` values or
    ``maxItems`` (so a count that saturates there always exceeds the recorded values). Pure."""
    if s.prefix or s.contains is not None:
        return "uniqueItems with prefixItems or contains is not supported"
    n = deref(s.items, resolve)
    if not (isinstance(n, NumberSchema) and n.integer and n.minimum is not None
            and n.maximum is not None):
        return "the items are not an integer range"
    if n.not_multiples or n.non_integer:
        return "the items are an integer range with a not"
    first = int(n.minimum.to_integral_value(rounding="ROUND_CEILING"))
    last = int(n.maximum.to_integral_value(rounding="ROUND_FLOOR"))
    first += n.exclusive_minimum and first == n.minimum
    last -= n.exclusive_maximum and last == n.maximum
    step = 1 if n.multiple_of is None else _integer_step(n.multiple_of)
    size = max(0, last // step - -(-first // step) + 1)  # multiples of step in first..last
    if size < 1:
        return "the items are an empty integer range"
    if s.min_items > size:
        return f"minItems {s.min_items} needs more than the {size} integers the items allow"
    if size >= MAX_BOUNDED_ITEMS and (s.max_items is None or s.max_items >= MAX_BOUNDED_ITEMS):
        return (f"the items are an integer range of {size} values in an array without a "
                f"maxItems below {MAX_BOUNDED_ITEMS}")
    return None


def _integer_step(m: Decimal) -> int:
    """The least positive integer whose multiples are the integers that are multiples of
    ``m`` (``m = p / 10**k``: ``p / gcd(p, 10**k)``)."""
    sign, digits, exp = m.normalize().as_tuple()
    p = int("".join(map(str, digits)))
    k = max(0, -exp)
    return p * 10 ** max(0, exp) // gcd(p, 10 ** k)


def bounded_numbers_problem(s: ArraySchema, resolve: Callable[[str], Schema]) -> str | None:
    """Why the matcher cannot keep distinct the items of ``s`` as numbers with a bound or a
    ``multipleOf`` (None: it can). The matcher counts the values an open item can still
    complete over the lexer's automaton
    (:meth:`lexguide.engine.unique_items.UniqueItems.number_value_count`: completions
    differing by trailing fraction zeros are one value, so ``1``, ``1.0`` and ``1.00`` are
    one), saturating at :data:`MAX_BOUNDED_ITEMS`, against the recorded values that complete
    it. The items must be one ``NumberSchema`` without a ``not``; ``minItems`` at most its
    values (infinitely many for a range of positive width, else the multiples in it); a
    finite domain of at least :data:`MAX_BOUNDED_ITEMS` values needs a ``maxItems`` below
    that, so a saturated count exceeds the recorded values. Pure."""
    if s.prefix or s.contains is not None:
        return "uniqueItems with prefixItems or contains is not supported"
    n = deref(s.items, resolve)
    if not isinstance(n, NumberSchema):
        return "the items are not numbers"
    if n.not_multiples or n.non_integer:
        return "the items are numbers with a not"
    size = _number_count(n)
    if size is not None and s.min_items > size:
        return f"minItems {s.min_items} needs more than the {size} numbers the items allow"
    if size == 0:
        return "the items are an empty range of numbers"
    if size is not None and size >= MAX_BOUNDED_ITEMS and (
            s.max_items is None or s.max_items >= MAX_BOUNDED_ITEMS):
        return (f"the items are {size} numbers in an array without a maxItems below "
                f"{MAX_BOUNDED_ITEMS} (the matcher's count of their values saturates)")
    return None


def _number_count(n: NumberSchema) -> int | None:
    """The values of ``n`` (None: infinitely many)."""
    lo, hi, m = n.minimum, n.maximum, n.multiple_of
    if n.integer and m is None:
        m = Decimal(1)
    elif n.integer:
        m = Decimal(_integer_step(m))
    if lo is not None and hi is not None and lo == hi:
        ok = not (n.exclusive_minimum or n.exclusive_maximum) and (m is None or lo % m == 0)
        return int(ok)
    if m is None or lo is None or hi is None:
        return None
    first = (lo / m).to_integral_value(rounding="ROUND_CEILING")
    last = (hi / m).to_integral_value(rounding="ROUND_FLOOR")
    first += n.exclusive_minimum and first * m == lo
    last -= n.exclusive_maximum and last * m == hi
    return max(0, int(last - first + 1))
