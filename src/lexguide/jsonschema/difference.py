"""``A ∧ ¬B`` of two typed schemas: the exclusion behind exact ``oneOf``, ``not`` and ``if``.

:func:`~lexguide.jsonschema.negate.negate` expresses ``¬B`` on its own, which fails as soon as
``B`` constrains what it does not name (``additionalProperties``, item schemas). Relative to a
known ``A`` far more is expressible, because only the values ``A`` admits must be split:

* a value of another JSON type than ``B``'s is kept whole; unions distribute
  (``(A1 ∪ A2) ∖ B = (A1 ∖ B) ∪ (A2 ∖ B)``, ``A ∖ (B1 ∪ B2) = (A ∖ B1) ∖ B2``);
* numbers and strings: ``A ∩ negate(B)`` (always expressible);
* objects: an instance of ``A`` escapes ``B`` when a member ``B`` requires is missing, the
  member count leaves ``B``'s bounds, or a member *named by either schema* has a value in
  ``A(name) ∖ B(name)`` (``B(name)`` being its property, pattern or additional schema, or
  nothing when ``propertyNames`` rejects the name). Members named by neither are additional on
  both sides: they can escape ``B`` only when ``B`` constrains them more than ``A``; that is
  "some additional member" (an existential over unnamed keys,
  :class:`~lexguide.jsonschema.schema.SomeMember`), as is a key that a stricter
  ``propertyNames`` of ``B`` rejects;
* arrays: too few/many items, an item at a prefix position in ``A(i) ∖ B(i)``, an item past
  both prefixes in ``A.items ∖ B.items`` (``contains`` when there is no prefix), or the
  ``contains`` count of ``B`` not reached / exceeded.

Every alternative is intersected with ``A``, so ``A``'s property order is kept. Provably
disjoint pairs return ``A`` unchanged; two different string constants (an enum minus the values
of another) are answered by comparison, with the one intersection step their disjointness test
takes. Costs are counted by the intersector's budget; deeper than :data:`MAX_DEPTH` nested
members raises :class:`NotSupported`.
"""

from __future__ import annotations

from dataclasses import replace

from lexguide.errors import SchemaError
from lexguide.jsonschema.negate import NotSupported, negate, no_member
from lexguide.jsonschema.schema import (
    ANY,
    EVERY_TYPE,
    TYPES_OF,
    AnyOfSchema,
    AnySchema,
    ArraySchema,
    BoolSchema,
    Intersector,
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
    json_types,
)

__all__ = ["MAX_DEPTH", "Difference"]

MAX_DEPTH = 24


def _every_type() -> list[Schema]:
    return [NullSchema(), BoolSchema(), NumberSchema(False), StringSchema(), ArraySchema(),
            ObjectSchema()]


class Difference:
    """``diff(a, b)``: the IR of instances of ``a`` that ``b`` rejects. Pure apart from the
    intersector's step counter; raises :class:`NotSupported` (the message says why)."""

    def __init__(self, intersect: Intersector) -> None:
        self.intersect = intersect
        self.resolve = intersect.resolve
        self._types_memo: dict[int, tuple[Schema, frozenset[str]]] = {}
        # per options tuple of a union: the string constant of each option, else None
        self._consts_memo: dict[int, tuple[tuple[Schema, ...], list[str | None]]] = {}

    def disjoint(self, a: Schema, b: Schema) -> bool:
        """Provably no common instance (False when unknown, e.g. a reference whose target is
        still being built, or two patterns whose intersection is too costly to decide)."""
        try:
            both = self.intersect(a, b)
        except SchemaError:
            return False
        if isinstance(both, StringSchema) and len(both.patterns) + len(both.formats) > 1:
            return _empty_string_language(both)
        return isinstance(both, Unsat)

    def _types(self, s: Schema) -> frozenset[str]:
        """:func:`json_types` of ``s``; those of unions and references are memoised (by
        node: the nodes are immutable and a built reference target never changes)."""
        one = TYPES_OF.get(type(s))
        if one is not None:
            return one
        got = self._types_memo.get(id(s))
        if got is not None:
            return got[1]
        try:
            types = json_types(s, self.resolve)
        except SchemaError:  # a reference under construction (recursion): could be anything
            return EVERY_TYPE
        self._types_memo[id(s)] = (s, types)  # s kept alive: its id is not reused
        return types

    def __call__(self, a: Schema, b: Schema, depth: int = 0) -> Schema:
        if depth > MAX_DEPTH:
            raise NotSupported("the exclusion is nested too deeply")
        ta, tb = type(a), type(b)
        if ta is Unsat or tb is Unsat:
            return a
        if tb is AnySchema or a is b:
            return Unsat("excluded by a schema accepting it")
        if tb is RefSchema:
            if ta is RefSchema and a.key == b.key:  # type: ignore[union-attr]
                return Unsat("excluded by the same reference")
            return self(a, self.resolve(b.key), depth + 1)  # type: ignore[union-attr]
        types_a = TYPES_OF.get(ta) or self._types(a)
        if types_a.isdisjoint(TYPES_OF.get(tb) or self._types(b)):
            return a  # no common JSON type: nothing of a is excluded
        if ta is RefSchema:
            return self(self.resolve(a.key), b, depth + 1)  # type: ignore[union-attr]
        if ta is AnySchema:
            return any_of([self(t, b, depth + 1) for t in _every_type()],
                          "the excluded schema accepts everything")
        if ta is AnyOfSchema:
            kept: list[Schema] = []
            options = a.options  # type: ignore[union-attr]
            while len(kept) < len(options):
                if _is_const(b):
                    n = self._other_consts(b, options, len(kept), depth + 1)
                    kept += options[len(kept):len(kept) + n]
                    if len(kept) == len(options):
                        break
                kept.append(self(options[len(kept)], b, depth + 1))
            return any_of(kept, "every branch is excluded")
        if tb is AnyOfSchema:
            out = a
            options, i = b.options, 0  # type: ignore[union-attr]
            while i < len(options):
                if _is_const(out):
                    i += self._other_consts(out, options, i, depth + 1)
                    if i == len(options):
                        break
                out = self(out, options[i], depth + 1)
                i += 1
                if type(out) is Unsat:
                    break
            return out
        if ta is not tb:
            return a
        if self.disjoint(a, b):
            return a
        if isinstance(a, NullSchema):
            return Unsat("null excluded")
        if isinstance(a, BoolSchema):
            return self._bool(a, b)  # type: ignore[arg-type]
        if isinstance(a, (NumberSchema, StringSchema)):
            return self.intersect(a, negate(b, self.resolve, self.intersect))
        if isinstance(a, ArraySchema):
            return self._array(a, b, depth)  # type: ignore[arg-type]
        if isinstance(a, ObjectSchema):
            return self._object(a, b, depth)  # type: ignore[arg-type]
        raise NotSupported(f"exclusion of {type(a).__name__}")

    def _other_consts(self, c: Schema, options: tuple[Schema, ...], start: int,
                      depth: int) -> int:
        """How many of ``options[start:]``, in a row, are string constants other than the
        string constant ``c``, one intersection step counted for each: ``self(c, o, depth)``
        and ``self(o, c, depth)`` of such a pair keep their first operand whole, their
        disjointness test being that one step (two constants meet by comparison). An enum
        minus each value of another enum is a product of such pairs. The count stops where
        the step budget would run out: the general path then gives the same result or
        error."""
        inter = self.intersect
        stop = min(len(options), start + inter.limit - inter.steps)
        if depth > MAX_DEPTH or stop <= start:
            return 0
        got = self._consts_memo.get(id(options))
        if got is None:  # options kept alive: its id is not reused
            got = self._consts_memo[id(options)] = (options, [
                o.const if type(o) is StringSchema else None for o in options])
        consts = got[1]
        for end in (None, c.const):  # the run ends at a non-constant or at c itself
            try:
                stop = consts.index(end, start, stop)
            except ValueError:
                pass
        inter.steps += stop - start
        return stop - start

    def _bool(self, a: BoolSchema, b: BoolSchema) -> Schema:
        if b.value is None or b.value == a.value:
            return Unsat("boolean excluded")
        return BoolSchema(not b.value) if a.value is None else a

    def _union(self, a: Schema, alts: list[Schema]) -> Schema:
        return any_of([self.intersect(a, alt) for alt in alts], "every instance is excluded")

    # -- arrays -----------------------------------------------------------------------------
    def _array(self, a: ArraySchema, b: ArraySchema, depth: int) -> Schema:
        alts: list[Schema] = []
        if b.min_items > 0:
            alts.append(ArraySchema(max_items=b.min_items - 1))
        if b.max_items is not None:
            alts.append(ArraySchema(min_items=b.max_items + 1))
        k = max(len(a.prefix), len(b.prefix))
        for i in range(k):
            d = self(_item(a, i), _item(b, i), depth + 1)
            if not isinstance(d, Unsat):
                alts.append(ArraySchema(min_items=i + 1, prefix=(ANY,) * i + (d,)))
        tail = self(a.items, b.items, depth + 1)
        if not isinstance(tail, Unsat):
            if isinstance(b.items, Unsat):
                alts.append(ArraySchema(min_items=k + 1))
            elif k == 0 and a.contains is None:
                alts.append(ArraySchema(contains=tail))
            else:
                raise NotSupported("items past prefixItems that one branch accepts and "
                                   "another rejects")
        if b.contains is not None:
            if a.contains is not None or a.prefix or b.prefix:
                raise NotSupported("contains together with another contains or prefixItems")
            negate(b.contains, self.resolve, self.intersect)  # fewer/more needs its complement
            if b.min_contains > 0:
                alts.append(ArraySchema(contains=b.contains, min_contains=0,
                                        max_contains=b.min_contains - 1))
            if b.max_contains is not None:
                alts.append(ArraySchema(contains=b.contains, min_contains=b.max_contains + 1))
        if b.unique and not a.unique and (a.max_items is None or a.max_items > 1):
            raise NotSupported("an array with duplicate items (not uniqueItems)")
        return self._union(a, alts)

    # -- objects ----------------------------------------------------------------------------
    def _object(self, a: ObjectSchema, b: ObjectSchema, depth: int) -> Schema:
        if b.some_members:  # a ∖ (b0 ∧ ∃w…) = (a ∖ b0) ∪ (a ∧ ∀¬w) ∪ …
            alts = [self._object(a, replace(b, some_members=()), depth)]
            for w in b.some_members:
                try:
                    alts.append(self.intersect(a, no_member(w, self(ANY, w.value, depth + 1))))
                except SchemaError as e:  # e.g. both sides with patternProperties
                    raise NotSupported(e.detail) from None
            return any_of(alts, "every instance is excluded")
        inter = self.intersect
        alts: list[Schema] = [ObjectSchema(properties=((r, Unsat(f"{r!r} absent")),))
                              for r in b.required]
        if b.min_properties > 0:
            alts.append(ObjectSchema(max_properties=b.min_properties - 1))
        if b.max_properties is not None:
            alts.append(ObjectSchema(min_properties=b.max_properties + 1))
        named = dict.fromkeys([n for n, _ in a.properties] + list(a.required)
                              + [n for n, _ in b.properties] + list(b.required))
        listed_a, listed_b = dict(a.properties), dict(b.properties)
        for name in named:
            sa = _member(inter, a, listed_a, name)
            if type(sa) is Unsat or not self._name_ok(a, name):
                continue  # a never has this member
            d = sa if not self._name_ok(b, name) else self(
                sa, _member(inter, b, listed_b, name), depth + 1)
            if type(d) is not Unsat:
                alts.append(ObjectSchema(properties=((name, d),), required=(name,)))
        alts += self._unnamed(a, b, list(named), depth)
        return self._union(a, alts)

    def _name_ok(self, o: ObjectSchema, name: str) -> bool:
        if type(o.property_names) is AnySchema:
            return True
        return not isinstance(self.intersect(StringSchema(const=name), o.property_names), Unsat)

    def _unnamed(self, a: ObjectSchema, b: ObjectSchema, named: list[str],
                 depth: int) -> list[Schema]:
        """Instances of ``a`` whose members named by neither schema escape ``b``: none when
        ``b`` provably accepts every such member ``a`` accepts (the same patterns, or none on
        ``b``'s side, each ``a`` schema inside the ``b`` one); else "some additional member"
        (:class:`SomeMember`) outside ``b``'s names and patterns with a value ``b.additional``
        rejects, or matching one of ``b``'s patterns with a value that pattern's schema
        rejects (relative to ``a.additional`` when ``a`` has no patternProperties; the
        compiler meets each with the schema ``a`` gives that key); or one whose key ``b``'s
        stricter ``propertyNames`` rejects."""
        pats_a = [s for _, s in a.pattern_properties]
        if isinstance(a.additional, Unsat) and all(isinstance(s, Unsat) for s in pats_a):
            return []  # a has no unnamed members
        out: list[Schema] = []
        if not (isinstance(b.property_names, AnySchema)
                or b.property_names is a.property_names):  # a key b's propertyNames reject
            out.append(ObjectSchema(some_members=(
                SomeMember(tuple(named), (), None, ANY, b.property_names),)))
        if not a.pattern_properties:
            return out + self._some_member(a.additional, b, named, depth)
        if not b.pattern_properties:
            pairs = [(s, b.additional) for s in pats_a]
        elif [p for p, _ in a.pattern_properties] == [p for p, _ in b.pattern_properties]:
            pairs = list(zip(pats_a, (s for _, s in b.pattern_properties)))
        else:
            pairs = None  # keys split differently: no cheap proof
        if pairs is not None:
            pairs.append((a.additional, b.additional))
            if all(isinstance(self(sa, sb, depth + 1), Unsat) for sa, sb in pairs):
                return out
        return out + self._some_member(ANY, b, named, depth)

    def _some_member(self, kept: Schema, b: ObjectSchema, named: list[str],
                     depth: int) -> list[Schema]:
        """One :class:`SomeMember` alternative per region of ``b``'s unnamed keys whose
        schema rejects some value of ``kept``."""
        names = tuple(named)
        b_pats = tuple(p for p, _ in b.pattern_properties)
        out: list[Schema] = []
        d = self(kept, b.additional, depth + 1)
        if not isinstance(d, Unsat):
            out.append(ObjectSchema(some_members=(SomeMember(names, b_pats, None, d),)))
        for p, sb in b.pattern_properties:
            d = self(kept, sb, depth + 1)
            if not isinstance(d, Unsat):
                out.append(ObjectSchema(some_members=(SomeMember(names, (), p, d),)))
        return out


def _empty_string_language(s: StringSchema) -> bool:
    """Do the patterns and formats of ``s`` exclude one another (bounded search)?"""
    from lexguide.jsonschema.formats import format_rx
    from lexguide.jsonschema.pattern import pattern_rx
    from lexguide.regex import nodes as rx

    parts = [pattern_rx(p) for p in s.patterns] + [format_rx(f) for f in s.formats]
    return rx.is_empty(rx.intersect(*parts))


def _is_const(s: Schema) -> bool:
    return type(s) is StringSchema and s.const is not None  # type: ignore[union-attr]


def _item(a: ArraySchema, i: int) -> Schema:
    return a.prefix[i] if i < len(a.prefix) else a.items


def _member(inter: Intersector, o: ObjectSchema, listed: dict[str, Schema],
            name: str) -> Schema:
    """The schema the member ``name`` of ``o`` satisfies (listed ∩ matching patterns, or the
    pattern/additional schema of an unlisted name); ``listed`` is ``dict(o.properties)``."""
    if name not in listed:
        return inter.extra_schema(o, name)
    s = listed[name]
    if o.pattern_properties:
        from lexguide.jsonschema.pattern import pattern_rx
        from lexguide.regex import nodes as rx

        body = json_body(name)
        for p, ps in o.pattern_properties:
            if rx.matches(pattern_rx(p), body):
                s = inter(s, ps)
    return s

