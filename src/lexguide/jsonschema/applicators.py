"""In-place applicators that need exclusion: exact ``oneOf``, ``not``, ``if``/``then``/``else``,
and ``dependencies``/``dependentRequired``/``dependentSchemas``.

A mixin of :class:`~lexguide.jsonschema.build.SchemaBuilder`. Exclusion (``A ∧ ¬B``) comes
from :class:`~lexguide.jsonschema.difference.Difference`, always relative to the rest of the
schema object, which is what makes it expressible for objects and arrays.

``oneOf`` (validation spec §10.2.1.3): branches are judged together with their sibling
keywords. When no two are provably disjoint, each branch becomes ``rest ∧ Ai ∧ ¬Aj`` for every
overlapping ``j``. When an exclusion is not expressible the result is a :class:`SchemaError`
naming the two branches and why; ``coerce_one_of`` compiles the overlapping ``oneOf`` as
``anyOf`` at once, ``lenient`` after trying the exact form; both list the relaxation on
``Grammar.notes``.
"""

from __future__ import annotations

from typing import Any

from lexguide.errors import SchemaError
from lexguide.jsonschema.difference import Difference
from lexguide.jsonschema.keywords import META_KW, BuilderHooks
from lexguide.jsonschema.negate import NotSupported
from lexguide.jsonschema.refs import escape_pointer
from lexguide.jsonschema.schema import (
    ANY,
    ArraySchema,
    BoolSchema,
    NullSchema,
    NumberSchema,
    ObjectSchema,
    Schema,
    StringSchema,
    Unsat,
    any_of,
)

__all__ = ["DISJOINT_BUDGET", "EXACT_ONE_OF_BUDGET", "Applicators", "OneOf"]

DISJOINT_BUDGET = 5_000  # intersection steps to prove two oneOf branches disjoint
EXACT_ONE_OF_BUDGET = 50_000  # steps to build the exclusions of one oneOf


class OneOf:
    """One ``oneOf`` keyword of a schema object: its position among the parts, branches, pointer."""

    __slots__ = ("at", "index", "subs")

    def __init__(self, index: int, subs: list[Schema], at: str) -> None:
        self.index, self.subs, self.at = index, subs, at


class Applicators(BuilderHooks):
    """``oneOf``/``not``/``if``/dependencies for :class:`SchemaBuilder` (a mixin)."""

    diff: Difference

    # -- oneOf ------------------------------------------------------------------------------
    def one_ofs(self, done: list[Schema], one_ofs: list[OneOf], out: Schema) -> Schema:
        """``out`` (the intersection of ``done``, each ``oneOf`` as ``anyOf``) made exact."""
        for k in one_ofs:
            rest: Schema = ANY
            with self.intersect.at(k.at, "oneOf"):
                for i, part in enumerate(done):
                    if i != k.index:
                        rest = self.intersect(rest, part)
                branches = [self.intersect(s, rest) for s in k.subs]
            overlaps = self._overlaps(branches)
            if not overlaps:
                continue
            i, j = overlaps[0]
            if self.options.coerce_one_of:
                self._relaxed(k, (i, j), "coerce_one_of")
                continue
            try:
                out = self._exact(done, k, overlaps)
            except (NotSupported, SchemaError) as e:
                why = str(e)
                pair = getattr(e, "pair", (i, j))
                if not self.options.lenient:
                    raise SchemaError(
                        f"oneOf branches {pair[0]} and {pair[1]} overlap and their exclusion "
                        f"is not expressible ({why}); lenient=True (CLI --lenient) or "
                        "coerce_one_of=True compiles this oneOf as anyOf and lists it on "
                        "Grammar.notes", pointer=k.at, keyword="oneOf") from None
                self._relaxed(k, pair, f"lenient: {why}")
                continue
            done[k.index] = out
        return out

    def _relaxed(self, k: OneOf, pair: tuple[int, int], why: str) -> None:
        self.note(k.at, "oneOf", f"branches {pair[0]} and {pair[1]} may both match; compiled "
                  f"as anyOf ({why})")

    def _overlaps(self, branches: list[Schema]) -> list[tuple[int, int]]:
        """Pairs of live branches not provably disjoint."""
        live = [(i, s) for i, s in enumerate(branches) if not isinstance(s, Unsat)]
        out = []
        for n, (i, a) in enumerate(live):
            for j, b in live[n + 1:]:
                if not self.disjoint(a, b):
                    out.append((i, j))
        return out

    def disjoint(self, a: Schema, b: Schema) -> bool:
        """Provably no common instance: the intersection is unsatisfiable."""
        try:
            with self.intersect.budget(DISJOINT_BUDGET):
                return self.diff.disjoint(a, b)
        except SchemaError:
            return False

    def _exact(self, done: list[Schema], k: OneOf, overlaps: list[tuple[int, int]]) -> Schema:
        """The union of ``rest ∧ Ai ∧ ¬Aj`` (j overlapping i); raises NotSupported/SchemaError
        with ``pair`` set to the two branches whose exclusion failed."""
        against: dict[int, list[int]] = {}
        for i, j in overlaps:
            against.setdefault(i, []).append(j)
            against.setdefault(j, []).append(i)
        branches = []
        with self.intersect.budget(EXACT_ONE_OF_BUDGET):
            for i, a in enumerate(k.subs):
                branch: Schema = ANY
                for n, part in enumerate(done):  # keep the property order of the schema
                    branch = self.intersect(branch, a if n == k.index else part)
                for j in sorted(against.get(i, ())):
                    try:
                        branch = self.diff(branch, k.subs[j])
                    except (NotSupported, SchemaError) as e:
                        e.pair = (i, j)  # type: ignore[attr-defined]
                        raise
                branches.append(branch)
        return any_of(branches, "every branch of oneOf is unsatisfiable")

    # -- not, if/then/else --------------------------------------------------------------------
    def not_keyword(self, value: Any, at: str, out: Schema) -> Schema:
        """``out ∧ not value`` (ignored with a note when lenient and not expressible)."""
        positive = False  # not(not(X)) is X: peel double negations before building
        while isinstance(value, dict) and set(value) - META_KW == {"not"}:
            value, at, positive = value["not"], f"{at}/not", not positive
        inner = self.build(value, at)
        if positive:
            with self.intersect.at(at, "not"):
                return self.intersect(out, inner)
        try:
            return self.diff(out, inner)
        except NotSupported as e:
            self.unsupported(f"Unimplemented keys: ['not'] ({e})", at, "not")
            return out

    def if_keyword(self, raw: dict, ptr: str, out: Schema) -> Schema:
        """``(out ∧ if ∧ then) ∪ ((out ∖ if) ∧ else)``; a lone if/then/else has no effect."""
        if not ("then" in raw or "else" in raw):
            return out
        cond = self.build(raw["if"], f"{ptr}/if")
        then = self.build(raw.get("then", True), f"{ptr}/then")
        other = self.build(raw.get("else", True), f"{ptr}/else")
        try:
            excluded = self.diff(out, cond)
        except NotSupported as e:
            names = [k for k in ("if", "then", "else") if k in raw]
            self.unsupported(f"Unimplemented keys: {names} ({e})", f"{ptr}/if", "if")
            return out
        with self.intersect.at(f"{ptr}/if", "if"):
            return any_of([self.intersect(self.intersect(out, cond), then),
                           self.intersect(excluded, other)],
                          "both if/then and not-if/else are unsatisfiable")

    # -- dependencies -------------------------------------------------------------------------
    def dependencies(self, key: str, value: Any, at: str) -> Schema:
        """Each dependency ``name -> D`` as the union "name absent" | "name present and D"."""
        if not isinstance(value, dict):
            raise SchemaError(f"{key} must be an object", pointer=at, keyword=key)
        out: Schema = ANY
        for name, dep in value.items():
            where = f"{at}/{escape_pointer(name)}"
            if isinstance(dep, list):
                if key == "dependentSchemas" or not all(isinstance(d, str) for d in dep):
                    raise SchemaError(f"{key} entries must be arrays of strings or schemas",
                                      pointer=where, keyword=key)
                present: Schema = ObjectSchema(required=(name, *dep), pointer=where)
            else:
                if key == "dependentRequired":
                    raise SchemaError("dependentRequired entries must be arrays of strings",
                                      pointer=where, keyword=key)
                dep_schema = self.build(dep, where)
                with self.intersect.at(where, key):
                    present = self.intersect(ObjectSchema(required=(name,), pointer=where),
                                             dep_schema)
            absent = ObjectSchema(properties=((name, Unsat(f"{name!r} absent")),), pointer=where)
            others: list[Schema] = [NullSchema(), BoolSchema(), NumberSchema(False),
                                    StringSchema(), ArraySchema()]
            with self.intersect.at(where, key):
                out = self.intersect(out, any_of(others + [absent, present]))
        return out

