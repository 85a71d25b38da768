"""``unevaluatedProperties`` and ``unevaluatedItems`` (core 2020-12 §11; 2019-09 §9.3.2.4) with
the evaluated members known statically.

What a schema object *evaluates* is read from its raw keywords and those of its in-place
applicators: ``properties`` names, ``patternProperties`` patterns, ``additionalProperties``
and nested ``unevaluated*`` (everything), ``prefixItems``/array ``items`` (a prefix),
``items``/``additionalItems`` (every item), ``contains`` (2020-12: the items it matches).
Annotations come only from subschemas that hold, so the result is a list of *cases*
``(condition, evaluated)``: ``allOf`` and ``$ref`` multiply cases, ``oneOf`` gives one case per
branch, ``anyOf`` one per non-empty set of branches (the conjunction of the set; when several
hold, the case of exactly that set covers the instance), ``if`` gives ``if ∧ then`` and
``¬if ∧ else`` (also without ``then``/``else``), ``dependentSchemas`` "absent" and "present ∧ schema"; ``not`` evaluates nothing.
When every case evaluates the same, conditions are dropped.

Each case then restricts the object (array) options of ``schema ∧ condition``: listed names
not evaluated, and the additional region, take ``unevaluatedProperties`` as well; items past
the evaluated prefix take ``unevaluatedItems`` unless ``contains`` matches them. The union of
the cases is exact. A case count past :data:`MAX_CASES`, or a condition whose complement is
not expressible, is a :class:`~lexguide.errors.SchemaError` with the pointer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import combinations
from typing import Any

from lexguide.errors import SchemaError
from lexguide.jsonschema.keywords import BuilderHooks
from lexguide.jsonschema.negate import NotSupported
from lexguide.jsonschema.pattern import pattern_rx
from lexguide.jsonschema.refs import escape_pointer
from lexguide.jsonschema.schema import (
    ANY,
    AnyOfSchema,
    ArraySchema,
    NullSchema,
    ObjectSchema,
    RefSchema,
    Schema,
    Unsat,
    any_of,
    json_body,
)
from lexguide.regex import nodes as rx

__all__ = ["MAX_CASES", "Evaluated", "Unevaluated"]

MAX_CASES = 64
MAX_ANY_OF = 4  # anyOf branches whose subsets are enumerated


@dataclass(frozen=True, slots=True)
class Evaluated:
    """Members and items one case evaluates."""

    names: frozenset[str] = frozenset()
    patterns: tuple[str, ...] = ()
    all_members: bool = False
    n_items: int = 0
    all_items: bool = False
    contains: tuple[Schema, ...] = ()

    def __or__(self, o: Evaluated) -> Evaluated:
        return Evaluated(self.names | o.names, self.patterns + tuple(
            p for p in o.patterns if p not in self.patterns), self.all_members or o.all_members,
            max(self.n_items, o.n_items), self.all_items or o.all_items,
            self.contains + o.contains)

    def same(self, o: Evaluated) -> bool:
        return (self.names, set(self.patterns), self.all_members, self.n_items,
                self.all_items, len(self.contains)) == (o.names, set(o.patterns),
                                                        o.all_members, o.n_items, o.all_items,
                                                        len(o.contains)) and all(
            a is b for a, b in zip(self.contains, o.contains))


Case = tuple[Schema | None, Evaluated]
NONE = Evaluated()


class Unevaluated(BuilderHooks):
    """``unevaluated*`` for :class:`~lexguide.jsonschema.build.SchemaBuilder` (a mixin)."""

    index: Any
    diff: Any

    def unevaluated(self, raw: dict, ptr: str, out: Schema) -> Schema:
        """``out`` with the ``unevaluated*`` keywords of ``raw`` applied (raises SchemaError)."""
        props = raw.get("unevaluatedProperties", True)
        items = raw.get("unevaluatedItems", True)
        u_props = ANY if props in (True, {}) else self.build(props, f"{ptr}/unevaluatedProperties")
        u_items = ANY if items in (True, {}) else self.build(items, f"{ptr}/unevaluatedItems")
        if u_props is ANY and u_items is ANY:
            return out
        keyword = "unevaluatedProperties" if u_props is not ANY else "unevaluatedItems"
        try:
            cases = self._cases(raw, ptr, 0, top=True)
            if all(e.same(cases[0][1]) for _, e in cases):
                cases = [(None, cases[0][1])]
            return any_of([self._restrict(out if c is None else self.intersect(out, c), e,
                                          u_props, u_items, 0) for c, e in cases],
                          "no case of the evaluated members is satisfiable")
        except NotSupported as e:
            raise SchemaError(f"{keyword}: the evaluated members are not known statically ({e})",
                              pointer=f"{ptr}/{keyword}", keyword=keyword) from None

    # -- what a schema object evaluates -------------------------------------------------------
    def _cases(self, raw: Any, ptr: str, depth: int, top: bool = False) -> list[Case]:
        if depth > 32:
            raise NotSupported("in-place references nested too deeply")
        if not isinstance(raw, dict):
            return [(None, NONE)]
        own = self._own(raw, ptr, top)
        cases: list[Case] = [(None, own)]
        if "$ref" in raw:
            target = self.ref_target(raw["$ref"], ptr, "$ref")
            cases = self._product(cases, self._cases(self.index.get(target), target, depth + 1))
            if self.draft <= 7:
                return cases
        for kw in ("$dynamicRef", "$recursiveRef"):
            if kw in raw:
                target = self.ref_target(raw[kw], ptr, kw)
                cases = self._product(cases, self._cases(self.index.get(target), target, depth + 1))
        for i, sub in enumerate(raw.get("allOf") or ()):
            cases = self._product(cases, self._cases(sub, f"{ptr}/allOf/{i}", depth + 1))
        for kw in ("anyOf", "oneOf"):
            if isinstance(raw.get(kw), list):
                cases = self._product(cases, self._branches(raw[kw], f"{ptr}/{kw}", kw, depth))
        if "if" in raw:  # a lone "if" constrains nothing but still evaluates when it holds
            cases = self._product(cases, self._if(raw, ptr, depth))
        deps = raw.get("dependentSchemas") if self.draft >= 2019 else None
        for name, sub in (deps or {}).items():
            at = f"{ptr}/dependentSchemas/{escape_pointer(name)}"
            present = self.intersect(ObjectSchema(required=(name,)), self.build(sub, at))
            absent = any_of([ObjectSchema(properties=((name, Unsat("absent")),)), NullSchema(),
                             *_non_objects()])
            cases = self._product(cases, [(absent, NONE)] + [
                (present if c is None else self.intersect(present, c), e)
                for c, e in self._cases(sub, at, depth + 1)])
        if len(cases) > MAX_CASES:
            raise NotSupported(f"more than {MAX_CASES} combinations of evaluating subschemas")
        return cases

    def _own(self, raw: dict, ptr: str, top: bool) -> Evaluated:
        names = frozenset(raw.get("properties") or ())
        patterns = tuple(raw.get("patternProperties") or ())
        # a nested unevaluated* keyword evaluates whatever is left, whatever its schema
        all_members = "additionalProperties" in raw or (not top and "unevaluatedProperties" in raw)
        n_items, all_items = 0, not top and "unevaluatedItems" in raw
        items = raw.get("items")
        if isinstance(items, list):
            n_items = len(items)
            all_items |= "additionalItems" in raw
        elif items is not None:
            all_items = True
        if isinstance(raw.get("prefixItems"), list) and self.draft >= 2020:
            n_items = max(n_items, len(raw["prefixItems"]))
        contains: tuple[Schema, ...] = ()
        if "contains" in raw and self.draft >= 2020:
            contains = (self.build(raw["contains"], f"{ptr}/contains"),)
        return Evaluated(names, patterns, all_members, n_items, all_items, contains)

    def _branches(self, subs: list, at: str, kw: str, depth: int) -> list[Case]:
        per = [[(self.intersect(self.build(s, f"{at}/{i}"), c) if c is not None
                 else self.build(s, f"{at}/{i}"), e)
                for c, e in self._cases(s, f"{at}/{i}", depth + 1)] for i, s in enumerate(subs)]
        flat = [case for branch in per for case in branch]
        if all(e.same(flat[0][1]) for _, e in flat):
            return [(None, flat[0][1])]  # the branch that holds evaluates the same in any case
        if kw == "oneOf":
            return flat
        if len(subs) > MAX_ANY_OF:
            raise NotSupported(f"anyOf of more than {MAX_ANY_OF} branches that evaluate "
                               "different members")
        out: list[Case] = []
        for k in range(1, len(per) + 1):
            for chosen in combinations(per, k):
                combo: list[Case] = [(ANY, NONE)]
                for branch in chosen:
                    combo = self._product(combo, branch)
                out.extend(combo)
        return out

    def _if(self, raw: dict, ptr: str, depth: int) -> list[Case]:
        cond = self.build(raw["if"], f"{ptr}/if")
        yes = self._product(self._cases(raw["if"], f"{ptr}/if", depth + 1),
                       self._cases(raw.get("then", True), f"{ptr}/then", depth + 1))
        no = self._cases(raw.get("else", True), f"{ptr}/else", depth + 1)
        not_cond = self.diff(ANY, cond)
        return [(self.intersect(cond, c) if c is not None else cond, e) for c, e in yes] + [
            (self.intersect(not_cond, c) if c is not None else not_cond, e) for c, e in no]

    def _product(self, xs: list[Case], ys: list[Case]) -> list[Case]:
        """Every case of ``xs`` together with every case of ``ys``."""
        if len(xs) * len(ys) > MAX_CASES:
            raise NotSupported(f"more than {MAX_CASES} combinations of evaluating subschemas")
        out = []
        for cx, ex in xs:
            for cy, ey in ys:
                cond = cy if cx is None else cx if cy is None else self.intersect(cx, cy)
                out.append((cond, ex | ey))
        return out

    # -- applying a case ----------------------------------------------------------------------
    def _restrict(self, s: Schema, e: Evaluated, u_props: Schema, u_items: Schema,
                  depth: int) -> Schema:
        if depth > 32:
            raise NotSupported("references nested too deeply")
        if isinstance(s, RefSchema):
            return self._restrict(self.resolve(s.key), e, u_props, u_items, depth + 1)
        if isinstance(s, AnyOfSchema):
            return any_of([self._restrict(o, e, u_props, u_items, depth + 1) for o in s.options])
        if isinstance(s, ObjectSchema) and u_props is not ANY and not e.all_members:
            return self._restrict_object(s, e, u_props)
        if isinstance(s, ArraySchema) and u_items is not ANY and not e.all_items:
            return self._restrict_array(s, e, u_items)
        if s is ANY:
            return any_of([self._restrict(t, e, u_props, u_items, depth + 1)
                           for t in (ObjectSchema(), ArraySchema(), *_non_containers())])
        return s

    def _restrict_object(self, o: ObjectSchema, e: Evaluated, u: Schema) -> Schema:
        inter = self.intersect
        prx = [pattern_rx(p) for p in e.patterns]

        def evaluated(name: str) -> bool:
            return name in e.names or any(rx.matches(r, json_body(name)) for r in prx)

        props = [(n, s if evaluated(n) else inter(s, u)) for n, s in o.properties]
        listed = {n for n, _ in o.properties}
        props += [(n, inter.extra_schema(o, n)) for n in sorted(e.names - listed)]
        extra_patterns = [p for p in e.patterns if p not in dict(o.pattern_properties)]
        if extra_patterns and not isinstance(o.additional, Unsat):
            raise NotSupported("patternProperties evaluated by one subschema but not merged "
                               "into the object")
        return inter.check_object(replace(o, properties=tuple(props),
                                          additional=inter(o.additional, u)))

    def _restrict_array(self, a: ArraySchema, e: Evaluated, u: Schema) -> Schema:
        inter = self.intersect
        left = any_of([u, *e.contains]) if e.contains else u
        prefix = list(a.prefix)
        if e.n_items > len(prefix) and (a.max_items is None or a.max_items > len(prefix)):
            if a.contains is not None:
                raise NotSupported("unevaluatedItems with contains and a longer prefix")
            prefix += [a.items] * (e.n_items - len(prefix))
        prefix = [s if i < e.n_items else inter(s, left) for i, s in enumerate(prefix)]
        return replace(a, prefix=tuple(prefix), items=inter(a.items, left))


def _non_objects() -> list[Schema]:
    from lexguide.jsonschema.schema import BoolSchema, NumberSchema, StringSchema

    return [BoolSchema(), NumberSchema(False), StringSchema(), ArraySchema()]


def _non_containers() -> list[Schema]:
    from lexguide.jsonschema.schema import BoolSchema, NumberSchema, StringSchema

    return [NullSchema(), BoolSchema(), NumberSchema(False), StringSchema()]
