"""Typed schema IR (phase 1 output) and its intersection (``allOf``, sibling keywords).

A raw JSON Schema becomes a tree of these frozen nodes: one node per JSON type with the
keywords that apply to it already validated and normalised, ``AnyOf`` for unions and ``Ref``
for references (compiled once into a named rule, which is how recursion works). ``Unsat``
marks a contradiction; it propagates as spec §8 says (dropped in unions, allowed where a value
is optional). Intersection follows spec §4.5/§6: numbers take the tighter bounds and the LCM
of ``multipleOf``, strings AND their regexes, arrays intersect item-wise, objects keep the
left operand's property order then the right operand's new names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from decimal import Decimal
from json.encoder import encode_basestring
from math import gcd
from operator import attrgetter
from typing import Any

from lexguide.errors import SchemaError

__all__ = [
    "ANY",
    "EVERY_TYPE",
    "MAX_SOME_MEMBERS",
    "TYPES_OF",
    "AnyOfSchema",
    "AnySchema",
    "ArraySchema",
    "BoolSchema",
    "Intersector",
    "NullSchema",
    "NumberSchema",
    "ObjectSchema",
    "RefSchema",
    "Schema",
    "SomeMember",
    "StringSchema",
    "Unsat",
    "any_of",
    "is_unsat",
    "json_body",
    "json_types",
]

MAX_INTERSECT_DEPTH = 128
MAX_UNION_PRODUCT = 20_000
MAX_SOME_MEMBERS = 3  # witnesses an object may need at once: 2**n states per member count
INTERSECT_BUDGET = 200_000  # documented limit: "schema too complex" beyond this many steps


@dataclass(frozen=True, slots=True, eq=False)
class AnySchema:
    pass


@dataclass(frozen=True, slots=True, eq=False)
class Unsat:
    reason: str


@dataclass(frozen=True, slots=True, eq=False)
class NullSchema:
    pass


@dataclass(frozen=True, slots=True, eq=False)
class BoolSchema:
    value: bool | None = None


@dataclass(frozen=True, slots=True, eq=False)
class NumberSchema:
    integer: bool
    minimum: Decimal | None = None
    maximum: Decimal | None = None
    exclusive_minimum: bool = False
    exclusive_maximum: bool = False
    multiple_of: Decimal | None = None
    pointer: str = field(default="", compare=False)
    not_multiples: tuple[Decimal, ...] = ()  # from "not": {"multipleOf": m}
    non_integer: bool = False  # from "not": {"type": "integer"}: a non-zero fraction digit


@dataclass(frozen=True, slots=True, eq=False)
class StringSchema:
    min_length: int = 0
    max_length: int | None = None
    patterns: tuple[str, ...] = ()
    formats: tuple[str, ...] = ()
    const: str | None = None
    pointer: str = field(default="", compare=False)
    # (must match?, kind, payload): from "not" of patterns/formats/consts, kind being
    # "pattern", "format" or "const" (compiled by formats.filter_rx under the escape policy)
    rx_filters: tuple[tuple[bool, str, str], ...] = ()


@dataclass(frozen=True, slots=True, eq=False)
class ArraySchema:
    min_items: int = 0
    max_items: int | None = None
    prefix: tuple[Schema, ...] = ()
    items: Schema = field(default_factory=AnySchema)
    # "contains": between min_contains and max_contains items match this schema
    contains: Schema | None = None
    min_contains: int = 1
    max_contains: int | None = None
    pointer: str = field(default="", compare=False)
    unique: bool = False  # uniqueItems: true (enforced by the compiler where it can be)


@dataclass(frozen=True, slots=True, eq=False)
class SomeMember:
    """"Some additional member": at least one member whose key is none of ``names``, matches
    none of the ``excluded`` patterns, matches ``pattern`` when given, is rejected by
    ``names_rejected`` (a ``propertyNames`` schema) when given, and whose value satisfies
    ``value``. The key set is fixed here, not by the object's own properties, so intersecting
    the object with one that declares more names keeps the meaning."""

    names: tuple[str, ...]
    excluded: tuple[str, ...]
    pattern: str | None
    value: Schema
    names_rejected: Schema | None = None


@dataclass(frozen=True, slots=True, eq=False)
class ObjectSchema:
    properties: tuple[tuple[str, Schema], ...] = ()
    required: tuple[str, ...] = ()
    additional: Schema = field(default_factory=AnySchema)
    pattern_properties: tuple[tuple[str, Schema], ...] = ()
    property_names: Schema = field(default_factory=AnySchema)
    min_properties: int = 0
    max_properties: int | None = None
    pointer: str = field(default="", compare=False)
    # the exclusion of an object that restricts its other members needs a witness member;
    # each of these holds (one member may witness several)
    some_members: tuple[SomeMember, ...] = ()


@dataclass(frozen=True, slots=True, eq=False)
class AnyOfSchema:
    options: tuple[Schema, ...]


@dataclass(frozen=True, slots=True, eq=False)
class RefSchema:
    """A reference; ``key`` is the absolute JSON pointer of the target inside the root document."""

    key: str


Schema = (
    AnySchema | Unsat | NullSchema | BoolSchema | NumberSchema | StringSchema | ArraySchema
    | ObjectSchema | AnyOfSchema | RefSchema
)
ANY = AnySchema()
Resolver = Callable[[str], Schema]


def _slots_init(cls: type) -> Callable[..., Any]:
    """A constructor of the frozen slots dataclass ``cls`` taking every field positionally and
    setting the slots through their descriptors: the generated ``__init__`` goes through
    ``object.__setattr__`` per field (frozen), twice as slow, and the intersector builds a
    node per step. Built like the dataclass's own methods, from the field list, so it cannot
    drift from it."""
    assert not hasattr(cls, "__post_init__")
    names = [f.name for f in fields(cls)]
    env = {"_new": object.__new__, "_cls": cls}
    env.update({f"_set_{n}": getattr(cls, n).__set__ for n in names})
    body = "".join(f"    _set_{n}(obj, {n})\n" for n in names)
    exec(f"def make({', '.join(names)}):\n    obj = _new(_cls)\n{body}    return obj\n", env)
    return env["make"]


_new_number = _slots_init(NumberSchema)
_new_string = _slots_init(StringSchema)
_new_array = _slots_init(ArraySchema)
_new_object = _slots_init(ObjectSchema)


def is_unsat(s: Schema) -> bool:
    return isinstance(s, Unsat)


def any_of(options: list[Schema], reason: str = "anyOf is empty") -> Schema:
    """A union with unsatisfiable branches dropped and nested unions flattened."""
    return _any_of(options, reason, 0, "")


def _any_of(options: list[Schema], reason: str, refused: int, refused_reason: str) -> Schema:
    """:func:`any_of` of ``options`` and ``refused`` more unsatisfiable branches, counted
    instead of listed (``refused_reason`` the reason of one of them). With no satisfiable
    branch: Unsat with the reason of the one unsatisfiable branch if there is exactly one,
    else ``reason``."""
    flat: list[Schema] = []
    for o in options:
        t = type(o)
        if t is AnyOfSchema:  # a union built directly (not by any_of) may hold ANY
            if AnySchema in map(type, o.options):  # type: ignore[union-attr]
                return ANY
            flat.extend(o.options)  # type: ignore[union-attr]
        elif t is AnySchema:
            return ANY
        elif t is not Unsat:
            flat.append(o)
    if not flat:
        reasons = [o.reason for o in options if isinstance(o, Unsat)]
        if len(reasons) + refused != 1:
            return Unsat(reason)
        return Unsat(reasons[0] if reasons else refused_reason)
    return flat[0] if len(flat) == 1 else AnyOfSchema(tuple(flat))


EVERY_TYPE = frozenset({"null", "boolean", "number", "string", "array", "object"})


def json_types(s: Schema, resolve: Resolver, depth: int = 0) -> frozenset[str]:
    """The JSON types a schema can produce ("integer" counts as "number")."""
    t = type(s)
    if depth > MAX_INTERSECT_DEPTH:
        return EVERY_TYPE
    one = TYPES_OF.get(t)
    if one is not None:
        return one
    if t is RefSchema:
        return json_types(resolve(s.key), resolve, depth + 1)  # type: ignore[union-attr]
    if t is AnyOfSchema:
        return frozenset().union(*(json_types(o, resolve, depth + 1)
                                   for o in s.options))  # type: ignore[union-attr]
    return frozenset()


_TYPE_OF = {
    NullSchema: "null", BoolSchema: "boolean", NumberSchema: "number", StringSchema: "string",
    ArraySchema: "array", ObjectSchema: "object",
}
# json_types of the nodes whose types do not depend on their contents
TYPES_OF: dict[type, frozenset[str]] = {t: frozenset((name,)) for t, name in _TYPE_OF.items()}
TYPES_OF[Unsat] = frozenset()
TYPES_OF[AnySchema] = EVERY_TYPE


class Intersector:
    """Computes schema intersections; ``resolve(key)`` returns the IR of a reference target."""

    def __init__(self, resolve: Resolver, check_string: Callable[[StringSchema, str], bool]):
        self.resolve = resolve
        self.check_string = check_string
        self.steps = 0  # intersection steps so far; see ``limit``
        self.limit = INTERSECT_BUDGET
        self.where: list[tuple[str, str | None]] = []  # (pointer, keyword) being combined

    def at(self, pointer: str, keyword: str | None = None) -> _Where:
        """Context manager: intersections inside the block combine the subschemas of
        ``keyword`` at ``pointer`` (so "schema too complex" can say where)."""
        return _Where(self, pointer, keyword)

    def budget(self, n_steps: int) -> _Budget:
        """Context manager: at most ``n_steps`` more steps inside the block (nested limits)."""
        return _Budget(self, n_steps)

    def _too_complex(self, why: str) -> SchemaError:
        """"Schema too complex" at the innermost place being combined (see :meth:`at`)."""
        pointer, keyword = self.where[-1] if self.where else ("", None)
        what = f"the subschemas of {keyword}" if keyword else "the keywords of this schema"
        return SchemaError(f"schema too complex: combining {what} {why} (each branch of an "
                           "anyOf, oneOf, enum or $ref target meets every other part)",
                           pointer=pointer, keyword=keyword)

    def __call__(self, a: Schema, b: Schema, depth: int = 0) -> Schema:
        if depth > MAX_INTERSECT_DEPTH:
            raise SchemaError("schema intersection is nested too deeply (limit 128)")
        self.steps += 1
        if self.steps > self.limit:
            raise self._too_complex(f"took more than {self.limit} intersection steps")
        ta = type(a)
        if ta is AnySchema or a is b:
            return b
        tb = type(b)
        if tb is AnySchema or ta is Unsat:
            return a
        if tb is Unsat:
            return b
        if ta is RefSchema:
            return self(self.resolve(a.key), b, depth + 1)  # type: ignore[union-attr]
        if tb is RefSchema:
            return self(a, self.resolve(b.key), depth + 1)  # type: ignore[union-attr]
        if ta is AnyOfSchema or tb is AnyOfSchema:
            xs = a.options if ta is AnyOfSchema else (a,)  # type: ignore[union-attr]
            ys = b.options if tb is AnyOfSchema else (b,)  # type: ignore[union-attr]
            if _all_string_consts(xs) and _all_string_consts(ys):  # enums: set intersection
                keep = {y.const for y in ys}  # type: ignore[union-attr]
                return any_of([x for x in xs if x.const in keep],  # type: ignore[union-attr]
                              "enums have no common value")
            if len(xs) * len(ys) > MAX_UNION_PRODUCT:
                raise self._too_complex(f"meets unions of {len(xs)} and {len(ys)} branches, "
                                        f"more than {MAX_UNION_PRODUCT} pairs")
            met = self._consts_meet_string(xs, ys, depth)
            if met is not None:
                return met
            return self._product(xs, ys, depth + 1)
        if ta is not tb:
            return Unsat(f"incompatible types {_TYPE_OF[ta]} and {_TYPE_OF[tb]}")
        return _MEET[ta](self, a, b, depth + 1)

    def _product(self, xs: tuple[Schema, ...], ys: tuple[Schema, ...], depth: int) -> Schema:
        """The union of ``self(x, y, depth)`` over every pair, in order. A pair of two different
        JSON types (the most of a product of mixed unions) is answered in place: one counted
        step, an Unsat that the union drops; the union is given the number of those and the
        reason of one, so the result is the same. The general path takes over where the step
        budget or the depth would run out."""
        out: list[Schema] = []
        mismatched = 0
        reason = ""
        inline = depth <= MAX_INTERSECT_DEPTH
        for x in xs:
            tx = type(x)
            kx = _TYPE_OF.get(tx)
            for y in ys:
                ty = type(y)
                if kx is not None and ty is not tx and inline and ty in _TYPE_OF \
                        and self.steps < self.limit:
                    self.steps += 1
                    mismatched += 1
                    reason = reason or f"incompatible types {kx} and {_TYPE_OF[ty]}"
                else:
                    out.append(self(x, y, depth))
        return _any_of(out, "no branch of anyOf is compatible with the other constraints",
                       mismatched, reason)

    # -- per type -----------------------------------------------------------------------------
    def _NullSchema(self, a: NullSchema, b: NullSchema, depth: int) -> Schema:
        return a

    def _BoolSchema(self, a: BoolSchema, b: BoolSchema, depth: int) -> Schema:
        if a.value is None:
            return b
        if b.value is None or a.value == b.value:
            return a
        return Unsat("contradictory boolean values")

    def _NumberSchema(self, a: NumberSchema, b: NumberSchema, depth: int) -> Schema:
        lo, lo_x = _tighter(a.minimum, a.exclusive_minimum, b.minimum, b.exclusive_minimum, 1)
        hi, hi_x = _tighter(a.maximum, a.exclusive_maximum, b.maximum, b.exclusive_maximum, -1)
        mult = a.multiple_of
        if b.multiple_of is not None:
            mult = b.multiple_of if mult is None else decimal_lcm(mult, b.multiple_of)
        if (a.integer or b.integer) and (a.non_integer or b.non_integer):
            return Unsat("integer and non-integer")
        return check_number(_new_number(a.integer or b.integer, lo, hi, lo_x, hi_x, mult,
                                        a.pointer or b.pointer,
                                        _union(a.not_multiples, b.not_multiples),
                                        a.non_integer or b.non_integer))

    def _consts_meet_string(self, xs: tuple[Schema, ...], ys: tuple[Schema, ...],
                            depth: int) -> Schema | None:
        """String constants (an enum) met with a string schema without constraints (``type:
        string``): what the pairwise meets below give, each constant kept with the pointer
        ``_StringSchema`` gives it, without building and checking a merged schema per
        constant (an enum of 1,500 strings spent a quarter of its compile there). None when
        the union is not of that form."""
        if depth + 1 > MAX_INTERSECT_DEPTH:
            return None
        x0 = xs[0] if len(xs) == 1 else None
        y0 = ys[0] if len(ys) == 1 else None
        out: list[Schema]
        if isinstance(y0, StringSchema) and _plain_string(y0) and all(map(_bare_const, xs)):
            out = [_new_string(0, None, (), (), x.const, x.pointer or y0.pointer, ())
                   for x in xs if isinstance(x, StringSchema)]
        elif isinstance(x0, StringSchema) and _plain_string(x0) and all(map(_bare_const, ys)):
            out = [_new_string(0, None, (), (), y.const, x0.pointer or y.pointer, ())
                   for y in ys if isinstance(y, StringSchema)]
        else:
            return None
        self.steps += len(out)  # one step per pair, as the pairwise meets count them
        if self.steps > self.limit:
            raise self._too_complex(f"took more than {self.limit} intersection steps")
        return any_of(out, "no branch of anyOf is compatible with the other constraints")

    def _StringSchema(self, a: StringSchema, b: StringSchema, depth: int) -> Schema:
        if a.const is not None and b.const is not None:
            return a if a.const == b.const else Unsat("contradictory string constants")
        lo = max(a.min_length, b.min_length)
        hi = _min_opt(a.max_length, b.max_length)
        merged = _new_string(
            lo, hi, _union(a.patterns, b.patterns), _union(a.formats, b.formats),
            a.const if a.const is not None else b.const, a.pointer or b.pointer,
            _union(a.rx_filters, b.rx_filters),
        )
        return check_string(merged, self.check_string)

    def _ArraySchema(self, a: ArraySchema, b: ArraySchema, depth: int) -> Schema:
        n = max(len(a.prefix), len(b.prefix))
        prefix = tuple(
            self(_item(a, i), _item(b, i), depth) for i in range(n)
        )
        contains, lo_c, hi_c = a.contains, a.min_contains, a.max_contains
        if b.contains is not None:
            if contains is not None and contains is not b.contains:
                raise SchemaError("intersecting two arrays with different contains is not "
                                  "supported", keyword="contains")
            contains = b.contains
            lo_c = max(lo_c, b.min_contains) if a.contains is not None else b.min_contains
            hi_c = _min_opt(hi_c, b.max_contains) if a.contains is not None else b.max_contains
        return check_array(_new_array(
            max(a.min_items, b.min_items), _min_opt(a.max_items, b.max_items), prefix,
            self(a.items, b.items, depth), contains, lo_c, hi_c, a.pointer or b.pointer,
            a.unique or b.unique,
        ))

    def _ObjectSchema(self, a: ObjectSchema, b: ObjectSchema, depth: int) -> Schema:
        if a.pattern_properties and b.pattern_properties and not (
            isinstance(a.additional, AnySchema) and isinstance(b.additional, AnySchema)
        ):
            raise SchemaError(
                "intersecting two objects that both have patternProperties and restrict "
                "additionalProperties is not supported", pointer=b.pointer or a.pointer,
                keyword="patternProperties",
            )
        if len(a.some_members) + len(b.some_members) > MAX_SOME_MEMBERS:
            raise SchemaError(
                f"more than {MAX_SOME_MEMBERS} different additional members required at once "
                "(each doubles the object rule's states)", pointer=b.pointer or a.pointer,
                keyword="additionalProperties",
            )
        props: list[tuple[str, Schema]] = []
        if b.properties:
            b_names = dict(b.properties)
            for name, s in a.properties:
                other = b_names[name] if name in b_names else self._extra(b, name)
                props.append((name, self(s, other, depth)))
            a_names = dict(a.properties)
            for name, s in b.properties:
                if name not in a_names:
                    props.append((name, self(self._extra(a, name), s, depth)))
        else:
            for name, s in a.properties:
                props.append((name, self(s, self._extra(b, name), depth)))
        pats = () if not (a.pattern_properties or b.pattern_properties) else tuple(
            (p, self(s, b.additional, depth)) for p, s in a.pattern_properties) + tuple(
            (p, self(s, a.additional, depth)) for p, s in b.pattern_properties)
        return self.check_object(_new_object(
            tuple(props), _union(a.required, b.required), self(a.additional, b.additional, depth),
            pats, self(a.property_names, b.property_names, depth),
            max(a.min_properties, b.min_properties), _min_opt(a.max_properties, b.max_properties),
            a.pointer or b.pointer, a.some_members + b.some_members,
        ))

    def check_object(self, o: ObjectSchema) -> Schema:
        """``o`` or Unsat when a required member is impossible or too many are required."""
        if o.max_properties is not None and (
            len(o.required) > o.max_properties or o.min_properties > o.max_properties
        ):
            return Unsat("minProperties/required exceed maxProperties")
        if o.some_members and (
            o.max_properties == 0 or any(isinstance(w.value, Unsat) for w in o.some_members)
        ):
            return Unsat("no additional member is possible")
        if o.required:
            names = dict(o.properties)
            for r in o.required:
                s = names[r] if r in names else self._extra(o, r)
                if type(s) is Unsat:
                    return Unsat(f"required property {r!r} is unsatisfiable")
        return o

    def _extra(self, o: ObjectSchema, name: str) -> Schema:
        """:meth:`extra_schema`, its common case (no patternProperties) inline."""
        return self.extra_schema(o, name) if o.pattern_properties else o.additional

    def extra_schema(self, o: ObjectSchema, name: str) -> Schema:
        """Schema a key ``name`` not in ``o.properties`` must satisfy (patterns, else additional)."""
        if not o.pattern_properties:
            return o.additional
        from lexguide.jsonschema.pattern import pattern_rx
        from lexguide.regex import nodes as rx

        body = json_body(name)
        matching = [s for p, s in o.pattern_properties if rx.matches(pattern_rx(p), body)]
        if not matching:
            return o.additional
        out: Schema = ANY
        for s in matching:
            out = self(out, s)
        return out


_MEET: dict[type, Callable[[Intersector, Schema, Schema, int], Schema]] = {
    NullSchema: Intersector._NullSchema, BoolSchema: Intersector._BoolSchema,
    NumberSchema: Intersector._NumberSchema, StringSchema: Intersector._StringSchema,
    ArraySchema: Intersector._ArraySchema, ObjectSchema: Intersector._ObjectSchema,
}  # type: ignore[dict-item]


class _Where:
    def __init__(self, owner: Intersector, pointer: str, keyword: str | None) -> None:
        self.owner, self.entry = owner, (pointer, keyword)

    def __enter__(self) -> None:
        self.owner.where.append(self.entry)

    def __exit__(self, *exc: object) -> None:
        self.owner.where.pop()


class _Budget:
    def __init__(self, owner: Intersector, n_steps: int) -> None:
        self.owner = owner
        self.n_steps = n_steps

    def __enter__(self) -> None:
        self.saved = self.owner.limit
        self.owner.limit = min(self.saved, self.owner.steps + self.n_steps)

    def __exit__(self, *exc: object) -> None:
        self.owner.limit = self.saved


def _all_string_consts(xs: tuple[Schema, ...]) -> bool:
    """Every one a string constant (both tests loop in C: enums have thousands of values)."""
    return set(map(type, xs)) <= _STRING_TYPE and None not in map(_const_of, xs)


_STRING_TYPE = frozenset((StringSchema,))
_const_of = attrgetter("const")


def _plain_string(s: Schema) -> bool:
    """A string schema without constraints: any JSON string."""
    return isinstance(s, StringSchema) and s.const is None and _no_string_constraints(s)


def _bare_const(s: Schema) -> bool:
    """A string constant without other constraints."""
    return isinstance(s, StringSchema) and s.const is not None and _no_string_constraints(s)


def _no_string_constraints(s: StringSchema) -> bool:
    return s.min_length == 0 and s.max_length is None and not (s.patterns or s.formats
                                                               or s.rx_filters)


def json_body(name: str) -> bytes:
    """The bytes between the quotes of ``json.dumps(name, ensure_ascii=False)``."""
    return encode_basestring(name)[1:-1].encode()


def _item(a: ArraySchema, i: int) -> Schema:
    return a.prefix[i] if i < len(a.prefix) else a.items


def _union(x: tuple, y: tuple) -> tuple:
    """``x`` then the values of ``y`` not in ``x`` (in order; repeats within ``y`` kept)."""
    if not x or not y or x is y:
        return x or y
    inside = set(x) if len(x) * len(y) > 64 else x  # long required lists: hashed lookups
    return x + tuple(v for v in y if v not in inside)


def _min_opt(x: int | None, y: int | None) -> int | None:
    if x is None:
        return y
    return x if y is None else min(x, y)


def _tighter(a: Decimal | None, ax: bool, b: Decimal | None, bx: bool, sign: int):
    if a is None:
        return b, bx
    if b is None:
        return a, ax
    if a == b:
        return a, ax or bx
    return (a, ax) if (a - b) * sign > 0 else (b, bx)


def decimal_lcm(x: Decimal, y: Decimal) -> Decimal:
    """Least common multiple of two positive decimals (exact)."""
    x, y = abs(x), abs(y)
    exp = max(-x.normalize().as_tuple().exponent, -y.normalize().as_tuple().exponent, 0)
    scale = Decimal(10) ** exp
    xi, yi = int(x * scale), int(y * scale)
    return Decimal(xi * yi // gcd(xi, yi)) / scale


def check_number(s: NumberSchema) -> Schema:
    """``s`` or Unsat when its range contains no (integer) value."""
    lo, hi = s.minimum, s.maximum
    if lo is not None and hi is not None:
        if lo > hi or (lo == hi and (s.exclusive_minimum or s.exclusive_maximum)):
            return Unsat(f"empty numeric range [{lo}, {hi}]")
        if s.integer:
            ilo = int(lo) + 1 if s.exclusive_minimum and lo == int(lo) else _ceil(lo)
            ihi = int(hi) - 1 if s.exclusive_maximum and hi == int(hi) else _floor(hi)
            if ilo > ihi:
                return Unsat(f"no integer in range [{lo}, {hi}]")
    return s


def _ceil(d: Decimal) -> int:
    return int(d.to_integral_value(rounding="ROUND_CEILING"))


def _floor(d: Decimal) -> int:
    return int(d.to_integral_value(rounding="ROUND_FLOOR"))


def check_string(s: StringSchema, check: Callable[[StringSchema, str], bool]) -> Schema:
    """``s`` or Unsat for contradictory lengths / a constant violating the other keywords."""
    if s.max_length is not None and s.min_length > s.max_length:
        return Unsat(f"minLength {s.min_length} > maxLength {s.max_length}")
    if s.const is not None:
        if not check(s, s.const):
            return Unsat(f"constant {s.const!r} violates the string constraints")
        return _new_string(0, None, (), (), s.const, s.pointer, ())
    return s


def check_array(s: ArraySchema) -> Schema:
    """Truncate at the first unsatisfiable position; Unsat if a required position is."""
    hi = s.max_items
    for i, p in enumerate(s.prefix):
        if isinstance(p, Unsat):
            hi = i if hi is None else min(hi, i)
            break
    if isinstance(s.items, Unsat):
        hi = len(s.prefix) if hi is None else min(hi, len(s.prefix))
    if hi is not None and s.min_items > hi:
        return Unsat("required array item is unsatisfiable")
    if s.contains is not None and (
        (s.max_contains is not None and s.min_contains > s.max_contains)
        or (hi is not None and s.min_contains > hi)
        or (isinstance(s.contains, Unsat) and s.min_contains > 0)
    ):
        return Unsat("contains cannot be satisfied")
    if hi != s.max_items:
        return replace(s, max_items=hi, prefix=s.prefix[:hi])
    return s
