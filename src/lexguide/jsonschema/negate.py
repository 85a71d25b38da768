"""``not``: the complement of a typed schema, for the forms whose complement the IR can express.

``not S`` = every value of another JSON type, plus the values of S's type that violate at least
one of S's constraints (De Morgan over the conjunction of keywords): below a minimum, above a
maximum, not a multiple, too short/long, not matching a pattern/format/constant, missing a
required member, a listed member whose value violates its schema, too few/many members or
items, an integer's non-integral numbers. ``not`` of a union is the intersection of the
complements. Members left to ``additionalProperties``/``patternProperties`` are broken by "some
additional member" (:class:`~lexguide.jsonschema.schema.SomeMember`) whose value violates its
region's schema, or whose key ``propertyNames`` rejects. Item constraints and objects that
themselves need some additional member raise :class:`NotSupported`; the caller turns that
into a :class:`~lexguide.errors.SchemaError` (or a warning when lenient).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from lexguide.jsonschema.schema import (
    ANY,
    AnyOfSchema,
    AnySchema,
    ArraySchema,
    BoolSchema,
    NullSchema,
    NumberSchema,
    ObjectSchema,
    RefSchema,
    Schema,
    SomeMember,
    StringSchema,
    Unsat,
    any_of,
    json_body,
)

__all__ = ["NotSupported", "negate", "no_member"]

MAX_DEPTH = 32

_EVERY_TYPE: dict[type, Callable[[], Schema]] = {
    NullSchema: NullSchema,
    BoolSchema: BoolSchema,
    NumberSchema: lambda: NumberSchema(False),
    StringSchema: StringSchema,
    ArraySchema: ArraySchema,
    ObjectSchema: ObjectSchema,
}


class NotSupported(Exception):
    """The complement of this schema is not expressible; the message says why."""


def negate(s: Schema, resolve: Callable[[str], Schema],
           intersect: Callable[[Schema, Schema], Schema], depth: int = 0) -> Schema:
    """The IR of ``{"not": s}``. Pure; raises :class:`NotSupported`."""
    if depth > MAX_DEPTH:
        raise NotSupported("not nested too deeply")
    if isinstance(s, AnySchema):
        return Unsat("not of a schema that accepts everything")
    if isinstance(s, Unsat):
        return ANY
    if isinstance(s, RefSchema):
        return negate(resolve(s.key), resolve, intersect, depth + 1)
    if isinstance(s, AnyOfSchema):
        out: Schema = ANY
        for o in s.options:
            out = intersect(out, negate(o, resolve, intersect, depth + 1))
        return out
    others = [make() for t, make in _EVERY_TYPE.items() if t is not type(s)]

    def neg(x: Schema) -> Schema:
        return negate(x, resolve, intersect, depth + 1)

    return any_of(others + _violations(s, neg, intersect),
                  "not of a schema that accepts everything")


def _violations(s: Schema, neg: Callable[[Schema], Schema],
                intersect: Callable[[Schema, Schema], Schema]) -> list[Schema]:
    """Values of the same type as ``s`` that break at least one of its constraints."""
    if isinstance(s, NullSchema):
        return []
    if isinstance(s, BoolSchema):
        return [] if s.value is None else [BoolSchema(not s.value)]
    if isinstance(s, NumberSchema):
        return _number(s)
    if isinstance(s, StringSchema):
        return _string(s)
    if isinstance(s, ArraySchema):
        if s.prefix or not isinstance(s.items, AnySchema) or s.contains is not None or s.unique:
            raise NotSupported("not of item constraints (prefixItems/items/contains/uniqueItems)")
        return _counts(ArraySchema, "min_items", "max_items", s.min_items, s.max_items)
    if isinstance(s, ObjectSchema):
        return _object(s, neg, intersect)
    raise NotSupported(f"not of {type(s).__name__}")


def _number(s: NumberSchema) -> list[Schema]:
    out: list[Schema] = []
    if s.integer:
        out.append(NumberSchema(False, non_integer=True))
    if s.non_integer:
        out.append(NumberSchema(True))
    if s.minimum is not None:
        out.append(NumberSchema(False, maximum=s.minimum, exclusive_maximum=not s.exclusive_minimum))
    if s.maximum is not None:
        out.append(NumberSchema(False, minimum=s.maximum, exclusive_minimum=not s.exclusive_maximum))
    if s.multiple_of is not None:
        out.append(NumberSchema(False, not_multiples=(s.multiple_of,)))
    out += [NumberSchema(False, multiple_of=m) for m in s.not_multiples]
    return out


def _string(s: StringSchema) -> list[Schema]:
    out: list[Schema] = []
    if s.const is not None:
        return [StringSchema(rx_filters=((False, "const", s.const),))]
    out += _counts(StringSchema, "min_length", "max_length", s.min_length, s.max_length)
    out += [StringSchema(rx_filters=((False, "pattern", p),)) for p in s.patterns]
    out += [StringSchema(rx_filters=((False, "format", f),)) for f in s.formats]
    out += [StringSchema(rx_filters=((not want, kind, x),)) for want, kind, x in s.rx_filters]
    return out


def _object(s: ObjectSchema, neg: Callable[[Schema], Schema],
            intersect: Callable[[Schema, Schema], Schema]) -> list[Schema]:
    if s.some_members:  # ¬(s0 ∧ ∃w1 ∧ ∃w2 …) = ¬s0 ∪ ∀¬w1 ∪ ∀¬w2 …
        return _object(replace(s, some_members=()), neg, intersect) + [
            no_member(w, neg(w.value)) for w in s.some_members]
    # a member is missing, or a listed member is present with a value its schema rejects
    out: list[Schema] = [ObjectSchema(properties=((r, Unsat(f"{r!r} must be absent")),))
                         for r in s.required]
    for name, v in s.properties:
        v = _listed(s, name, v, intersect)
        if not isinstance(v, AnySchema):
            out.append(ObjectSchema(properties=((name, neg(v)),), required=(name,)))
    # or some member the listed names leave to patternProperties/additionalProperties breaks
    # the schema of its region (a member matching several patterns breaks one of them)
    names = tuple(n for n, _ in s.properties)
    pats = tuple(p for p, _ in s.pattern_properties)
    if not isinstance(s.additional, AnySchema):
        out.append(ObjectSchema(some_members=(SomeMember(names, pats, None,
                                                          neg(s.additional)),)))
    out += [ObjectSchema(some_members=(SomeMember(names, (), p, neg(ps)),))
            for p, ps in s.pattern_properties if not isinstance(ps, AnySchema)]
    if not isinstance(s.property_names, AnySchema):  # or a key propertyNames rejects
        out.append(ObjectSchema(some_members=(SomeMember((), (), None, ANY, s.property_names),)))
    out += _counts(ObjectSchema, "min_properties", "max_properties", s.min_properties,
                   s.max_properties)
    return out


def no_member(w: SomeMember, value_not: Schema) -> Schema:
    """Objects none of whose members is a ``w`` witness: every member with a key of ``w``
    has a value in ``value_not`` (the complement of ``w.value``). The exempt names become
    exact-name patterns, which impose no member order. Raises :class:`NotSupported` when
    the key set is not one region of a plain object."""
    exempt = tuple((_exact_pattern(n), ANY) for n in w.names)
    if w.names_rejected is not None:
        if w.pattern is not None or w.excluded or not isinstance(value_not, Unsat):
            raise NotSupported("the exclusion of a member with a rejected name and a value")
        return ObjectSchema(property_names=any_of(
            [w.names_rejected, *(StringSchema(const=n) for n in w.names)]))
    if w.pattern is None:
        return ObjectSchema(additional=value_not,
                            pattern_properties=exempt + tuple((p, ANY) for p in w.excluded))
    if w.excluded or _matches_any(w.pattern, w.names):
        raise NotSupported("the exclusion of a pattern member with exempt keys")
    return ObjectSchema(pattern_properties=((w.pattern, value_not),))


def _exact_pattern(name: str) -> str:
    return "^" + "".join("\\" + c if c in "\\^$.|?*+()[]{}" else c for c in name) + "$"


def _matches_any(pattern: str, names: tuple[str, ...]) -> bool:
    from lexguide.jsonschema.pattern import pattern_rx
    from lexguide.regex import nodes as rx

    return any(rx.matches(pattern_rx(pattern), json_body(n)) for n in names)


def _listed(s: ObjectSchema, name: str, v: Schema,
            intersect: Callable[[Schema, Schema], Schema]) -> Schema:
    """The schema of the listed member ``name``: its own and those of the patterns it matches."""
    if not s.pattern_properties:
        return v
    from lexguide.jsonschema.pattern import pattern_rx
    from lexguide.regex import nodes as rx

    body = json_body(name)
    for p, ps in s.pattern_properties:
        if rx.matches(pattern_rx(p), body):
            v = intersect(v, ps)
    return v


def _counts(cls: type, lo_name: str, hi_name: str, lo: int, hi: int | None) -> list[Schema]:
    """Fewer than ``lo`` or more than ``hi`` (items, members or characters)."""
    out = []
    if lo > 0:
        out.append(cls(**{hi_name: lo - 1}))
    if hi is not None:
        out.append(cls(**{lo_name: hi + 1}))
    return out
