"""Phase 1: raw JSON Schema → typed schema IR (:mod:`lexguide.jsonschema.schema`).

Keywords are classified per draft (spec §3): implemented ones build IR, annotations are
ignored, keywords the draft defines but we cannot enforce raise :class:`SchemaError` naming the
keyword and its JSON pointer (a warning when ``lenient``), keywords unknown to the draft are
ignored. The keywords of one schema object are intersected left to right: all non-applicator
keywords form one typed node placed where the first of them stands; ``$ref``, ``allOf``,
``anyOf``, ``oneOf``, ``const`` and ``enum`` are intersected in their own positions (spec §4.5).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from lexguide.errors import SchemaError
from lexguide.grammar.ir import CompileNote
from lexguide.jsonschema.formats import FORMATS, format_rx
from lexguide.jsonschema.negate import NotSupported, negate
from lexguide.jsonschema.numeric import decimal_of
from lexguide.jsonschema.pattern import PatternError, pattern_rx
from lexguide.jsonschema.refs import RefIndex, escape_pointer
from lexguide.jsonschema.schema import (
    ANY,
    ArraySchema,
    BoolSchema,
    Intersector,
    NullSchema,
    NumberSchema,
    ObjectSchema,
    RefSchema,
    Schema,
    StringSchema,
    Unsat,
    any_of,
    check_array,
    check_number,
    check_string,
)
from lexguide.limits import Nesting
from lexguide.regex import nodes as rx

__all__ = ["BuildOptions", "SchemaBuilder", "detect_draft", "nesting_error"]

APPLICATORS = ("$ref", "allOf", "anyOf", "oneOf", "const", "enum")
NUMBER_KW = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
STRING_KW = ("minLength", "maxLength", "pattern", "format")
ARRAY_KW = ("items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems",
            "contains", "minContains", "maxContains")
OBJECT_KW = ("properties", "required", "additionalProperties", "patternProperties",
             "propertyNames", "minProperties", "maxProperties")
SIMPLE_KW = frozenset(("type", *NUMBER_KW, *STRING_KW, *ARRAY_KW, *OBJECT_KW))
META_KW = frozenset((
    "$anchor", "$defs", "definitions", "$schema", "$id", "id", "$comment", "title",
    "description", "default", "readOnly", "writeOnly", "examples", "contentMediaType",
    "contentEncoding", "contentSchema", "deprecated", "$vocabulary", "$dynamicAnchor",
    "$recursiveAnchor",
))
# keyword -> (first draft defining it, last draft defining it)
KNOWN_UNSUPPORTED = {
    "not": (4, 2020), "if": (7, 2020), "then": (7, 2020), "else": (7, 2020),
    "dependencies": (4, 7), "dependentRequired": (2019, 2020),
    "dependentSchemas": (2019, 2020), "unevaluatedItems": (2019, 2020),
    "unevaluatedProperties": (2019, 2020), "$recursiveRef": (2019, 2019),
    "$dynamicRef": (2020, 2020),
}
INTRODUCED = {"const": 6, "contains": 6, "propertyNames": 6, "prefixItems": 2020,
              "minContains": 2019, "maxContains": 2019}
ALL_TYPES = ("null", "boolean", "object", "array", "string", "number")
DISJOINT_BUDGET = 5_000  # intersection steps to prove two oneOf branches disjoint
EXACT_ONE_OF_BUDGET = 50_000  # steps to build an exact oneOf from negations

_DRAFTS = {
    "draft/2020-12/schema": 2020, "draft/2019-09/schema": 2019, "draft-07/schema": 7,
    "draft-06/schema": 6, "draft-04/schema": 4,
}


def detect_draft(root: Any) -> int:
    """The draft of a document from its ``$schema`` (2020 when missing or unknown)."""
    uri = root.get("$schema") if isinstance(root, dict) else None
    if isinstance(uri, str):
        for suffix, draft in _DRAFTS.items():
            if uri.rstrip("#").endswith(suffix):
                return draft
    return 2020


def nesting_error(pointer: str | None, limit: int) -> SchemaError:
    """The error of a schema nested deeper than ``limit`` (subschemas and ``$ref`` hops)."""
    return SchemaError(f"schema nested more than {limit} levels deep (each subschema and each "
                       "$ref hop is one level)", pointer=pointer or "")


@dataclass(frozen=True, slots=True)
class BuildOptions:
    lenient: bool = False
    coerce_one_of: bool = False
    draft: int | None = None
    strict_formats: bool = False


class SchemaBuilder:
    """Builds the IR of one document; ``defs`` maps reference keys (pointers) to their IR.

    Mutates only itself. Cost: linear in the schema size, plus intersections.
    """

    def __init__(self, root: Any, options: BuildOptions = BuildOptions()) -> None:
        self.root = root
        self.options = options
        self.draft = options.draft or detect_draft(root)
        self.index = RefIndex(root, "id" if self.draft == 4 else "$id",
                              ref_overrides=self.draft <= 7)
        self.defs: dict[str, Schema] = {}
        self._building: set[str] = set()
        self._pending: list[str] = []
        self.intersect = Intersector(self.resolve, self.string_accepts)
        self.nesting = Nesting(nesting_error)
        self.notes: list[CompileNote] = []  # accepted but not enforced (Grammar.notes)

    # -- entry points -------------------------------------------------------------------------
    def build_root(self) -> Schema:
        """IR of the root, after which every referenced definition is in ``defs``."""
        top = self.build(self.root, "")
        while self._pending:
            self.resolve(self._pending.pop())
        return top

    def resolve(self, key: str) -> Schema:
        """IR of the reference target ``key`` (built on first use)."""
        got = self.defs.get(key)
        if got is not None:
            return got
        if key in self._building:
            raise SchemaError("circular references with sibling keywords are not supported",
                              pointer=key, keyword="$ref")
        self._building.add(key)
        try:
            s = self.build(self.index.get(key), key)
        finally:
            self._building.discard(key)
        self.defs[key] = s
        return s

    def unsupported(self, message: str, pointer: str, keyword: str) -> None:
        """Raise SchemaError; when lenient, note it instead (the keyword is then ignored)."""
        if self.options.lenient:
            self.note(pointer, keyword, f"{message} (ignored: lenient)")
            return
        raise SchemaError(f"{message}; lenient=True (CLI --lenient) ignores it and lists it "
                          "on Grammar.notes", pointer=pointer, keyword=keyword)

    def note(self, pointer: str, keyword: str, message: str) -> None:
        """Record something accepted without being enforced (mutates ``notes``)."""
        self.notes.append(CompileNote(pointer, keyword, message))

    def string_accepts(self, s: StringSchema, value: str) -> bool:
        """Does ``value`` satisfy the length/pattern/format constraints of ``s``."""
        n = len(value)
        if n < s.min_length or (s.max_length is not None and n > s.max_length):
            return False
        if not (s.patterns or s.formats or s.rx_filters):
            return True
        body = json.dumps(value, ensure_ascii=False)[1:-1].encode()
        return all(rx.matches(pattern_rx(p), body) for p in s.patterns) and all(
            rx.matches(format_rx(f), body) for f in s.formats) and all(
            rx.matches(r, body) == want for want, r in s.rx_filters)

    # -- schema objects -----------------------------------------------------------------------
    def build(self, raw: Any, ptr: str) -> Schema:
        """IR of the raw subschema ``raw`` at pointer ``ptr``; one nesting level deeper."""
        with self.nesting(ptr):
            return self._build(raw, ptr)

    def _build(self, raw: Any, ptr: str) -> Schema:
        if raw is True:
            return ANY
        if raw is False:
            return Unsat(f"false schema at {ptr or '#'}")
        if not isinstance(raw, dict):
            raise SchemaError("schema must be an object or boolean", pointer=ptr)
        if "$ref" in raw and self.draft <= 7:
            return self._ref(raw["$ref"], ptr)
        parts: list[Schema | None] = []
        one_ofs: list[tuple[int, list[Schema], str]] = []
        simple: dict[str, Any] = {}
        simple_pos = 0
        for key, value in raw.items():
            if key in APPLICATORS:
                if key in INTRODUCED and self.draft < INTRODUCED[key]:
                    continue
                at = f"{ptr}/{escape_pointer(key)}"
                if key == "oneOf":
                    subs = self._subschemas(key, value, at)
                    one_ofs.append((len(parts), subs, at))
                    parts.append(any_of(subs, "every branch of oneOf is unsatisfiable"))
                else:
                    parts.append(self._applicator(key, value, at, ptr))
            elif key in SIMPLE_KW:
                if key in INTRODUCED and self.draft < INTRODUCED[key]:
                    continue
                if not simple or key == "properties":
                    simple_pos = len(parts)  # property order follows "properties" (§4.5)
                simple[key] = value
            elif key in KNOWN_UNSUPPORTED:
                lo, hi = KNOWN_UNSUPPORTED[key]
                if lo <= self.draft <= hi:
                    extra = self._special(key, value, raw, ptr)
                    if extra is not None:
                        parts.append(extra)
        if simple:
            parts.insert(simple_pos, None)
            one_ofs = [(i + (i >= simple_pos), subs, at) for i, subs, at in one_ofs]
        done = [self._simple(simple, ptr) if p is None else p for p in parts]
        out: Schema = ANY
        for part in done:
            out = self.intersect(out, part)
        if not (self.options.coerce_one_of or self.options.lenient):
            for index, subs, at in one_ofs:
                # branches are judged together with their sibling keywords (spec §6)
                rest: Schema = ANY
                for i, part in enumerate(done):
                    if i != index:
                        rest = self.intersect(rest, part)
                pair = self._overlap([self.intersect(s, rest) for s in subs])
                if pair is not None:
                    if len(one_ofs) > 1:
                        self._one_of_error(pair, at, "several oneOf in one schema object")
                    out = self._exact_one_of(done, index, subs, pair, at)
        return out

    def _exact_one_of(self, done: list[Schema], index: int, subs: list[Schema],
                      pair: tuple[int, int], at: str) -> Schema:
        """oneOf(A1..An) as the union of (Ai and not Aj for every j != i), when expressible."""
        try:
            with self.intersect.budget(EXACT_ONE_OF_BUDGET):
                negated = [negate(s, self.resolve, self.intersect) for s in subs]
                branches = []
                for i, a in enumerate(subs):
                    branch: Schema = ANY
                    for k, part in enumerate(done):  # keep the property order of the schema
                        branch = self.intersect(branch, a if k == index else part)
                    for j, neg in enumerate(negated):
                        if j != i:
                            branch = self.intersect(branch, neg)
                    branches.append(branch)
        except (NotSupported, SchemaError) as e:
            self._one_of_error(pair, at, str(e))
        return any_of(branches, "every branch of oneOf is unsatisfiable")

    def _one_of_error(self, pair: tuple[int, int], at: str, why: str) -> None:
        raise SchemaError(
            f"oneOf branches {pair[0]} and {pair[1]} are not provably disjoint and their "
            f"exclusion is not expressible ({why}); enable coerce_one_of or lenient to treat "
            "oneOf as anyOf", pointer=at, keyword="oneOf")

    def _subschemas(self, key: str, value: Any, at: str) -> list[Schema]:
        if not isinstance(value, list) or not value:
            raise SchemaError(f"{key} must be a non-empty array", pointer=at, keyword=key)
        return [self.build(v, f"{at}/{i}") for i, v in enumerate(value)]

    def _special(self, key: str, value: Any, raw: dict, ptr: str) -> Schema | None:
        """Keywords we enforce only in trivial forms; anything else is unsupported."""
        at = f"{ptr}/{key}"
        if key == "not":
            positive = False  # not(not(X)) is X: peel double negations before building
            while isinstance(value, dict) and set(value) - META_KW == {"not"}:
                value, at, positive = value["not"], f"{at}/not", not positive
            inner = self.build(value, at)
            if positive:
                return inner
            try:
                return negate(inner, self.resolve, self.intersect)
            except NotSupported as e:
                self.unsupported(f"Unimplemented keys: ['not'] ({e})", at, "not")
                return None
        elif key in ("if", "then", "else"):
            # handled once, under "if"; a lone "if", "then" or "else" has no effect
            if key != "if" or not ("then" in raw or "else" in raw):
                return None
            cond = self.build(value, at)
            then = self.build(raw.get("then", True), f"{ptr}/then")
            other = self.build(raw.get("else", True), f"{ptr}/else")
            try:
                # if/then/else = (if and then) or (not if and else)
                return any_of([self.intersect(cond, then),
                               self.intersect(negate(cond, self.resolve, self.intersect), other)],
                              "both if/then and not-if/else are unsatisfiable")
            except NotSupported as e:
                names = [k for k in ("if", "then", "else") if k in raw]
                self.unsupported(f"Unimplemented keys: {names} ({e})", at, "if")
                return None
        elif key in ("dependencies", "dependentRequired", "dependentSchemas"):
            return self._dependencies(key, value, at)
        elif key in ("unevaluatedProperties", "unevaluatedItems") and value in (True, {}):
            return None
        self.unsupported(f"Unimplemented keys: [{key!r}]", at, key)
        return None

    def _dependencies(self, key: str, value: Any, at: str) -> Schema:
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
                present = self.intersect(ObjectSchema(required=(name,), pointer=where),
                                         self.build(dep, where))
            absent = ObjectSchema(properties=((name, Unsat(f"{name!r} absent")),), pointer=where)
            others: list[Schema] = [NullSchema(), BoolSchema(), NumberSchema(False),
                                    StringSchema(), ArraySchema()]
            out = self.intersect(out, any_of(others + [absent, present]))
        return out

    def _ref(self, ref: Any, ptr: str) -> Schema:
        if not isinstance(ref, str):
            raise SchemaError("$ref must be a string", pointer=ptr, keyword="$ref")
        key = self.index.resolve(ref, ptr)
        if key not in self.defs:
            self._pending.append(key)
        return RefSchema(key)

    def _applicator(self, key: str, value: Any, at: str, ptr: str) -> Schema:
        if key == "$ref":
            return self._ref(value, ptr)
        if key == "const":
            return self.const(value, at)
        if key == "enum":
            if not isinstance(value, list):
                raise SchemaError("enum must be an array", pointer=at, keyword="enum")
            return any_of([self.const(v, f"{at}/{i}") for i, v in enumerate(value)],
                          "enum is empty")
        subs = self._subschemas(key, value, at)
        if key == "allOf":
            out: Schema = ANY
            for s in subs:
                out = self.intersect(out, s)
            return out
        return any_of(subs, f"every branch of {key} is unsatisfiable")

    def _overlap(self, subs: list[Schema]) -> tuple[int, int] | None:
        """The first pair of branches not provably disjoint, or None."""
        live = [(i, s) for i, s in enumerate(subs) if not isinstance(s, Unsat)]
        for n, (i, a) in enumerate(live):
            for j, b in live[n + 1:]:
                if not self.disjoint(a, b):
                    return i, j
        return None

    def disjoint(self, a: Schema, b: Schema) -> bool:
        """Provably no common instance: the intersection is unsatisfiable."""
        try:
            with self.intersect.budget(DISJOINT_BUDGET):
                return isinstance(self.intersect(a, b), Unsat)
        except SchemaError:
            return False

    def const(self, value: Any, at: str) -> Schema:
        """The IR accepting exactly ``value`` (structurally, whitespace free)."""
        if value is None:
            return NullSchema()
        if isinstance(value, bool):
            return BoolSchema(value)
        if isinstance(value, (int, float)):
            d = decimal_of(value)
            return NumberSchema(isinstance(value, int), d, d, pointer=at)
        if isinstance(value, str):
            return StringSchema(const=value, pointer=at)
        if isinstance(value, list):
            items = tuple(self.const(v, f"{at}/{i}") for i, v in enumerate(value))
            return ArraySchema(len(items), len(items), items, Unsat("const array is complete"),
                               pointer=at)
        if isinstance(value, dict):
            props = tuple((k, self.const(v, f"{at}/{escape_pointer(k)}")) for k, v in value.items())
            return ObjectSchema(props, tuple(value), Unsat("const object is complete"),
                                pointer=at)
        raise SchemaError(f"unsupported constant {value!r}", pointer=at, keyword="const")

    # -- typed keywords -------------------------------------------------------------------------
    def _simple(self, kw: dict[str, Any], ptr: str) -> Schema:
        types = _types(kw["type"], f"{ptr}/type") if "type" in kw else ALL_TYPES
        options: list[Schema] = []
        for t in types:
            if t == "null":
                options.append(NullSchema())
            elif t == "boolean":
                options.append(BoolSchema())
            elif t in ("number", "integer"):
                if t == "integer" and "number" in types:
                    continue
                options.append(self._number(kw, t == "integer", ptr))
            elif t == "string":
                options.append(self._string(kw, ptr))
            elif t == "array":
                options.append(self._array(kw, ptr))
            elif t == "object":
                options.append(self._object(kw, ptr))
        return any_of(options, f"no type of {list(types)} is satisfiable")

    def _number(self, kw: dict[str, Any], integer: bool, ptr: str) -> Schema:
        lo, lo_x = _num(kw, "minimum", ptr), False
        hi, hi_x = _num(kw, "maximum", ptr), False
        for key, sign in (("exclusiveMinimum", 1), ("exclusiveMaximum", -1)):
            v = kw.get(key)
            if v is None:
                continue
            if isinstance(v, bool):  # draft-4 modifier of minimum/maximum
                if sign > 0:
                    lo_x = v and lo is not None
                else:
                    hi_x = v and hi is not None
                continue
            d = _num(kw, key, ptr)
            if sign > 0 and (lo is None or d >= lo):
                lo, lo_x = d, True
            elif sign < 0 and (hi is None or d <= hi):
                hi, hi_x = d, True
        mult = _num(kw, "multipleOf", ptr)
        if mult is not None and mult <= 0:
            if mult == 0:
                raise SchemaError("invalid multipleOf 0", pointer=f"{ptr}/multipleOf",
                                  keyword="multipleOf")
            mult = -mult
        return check_number(NumberSchema(integer, lo, hi, lo_x, hi_x, mult, ptr))

    def _string(self, kw: dict[str, Any], ptr: str) -> Schema:
        lo = _count(kw, "minLength", ptr) or 0
        hi = _count(kw, "maxLength", ptr)
        patterns: tuple[str, ...] = ()
        if "pattern" in kw:
            p = kw["pattern"]
            if not isinstance(p, str):
                raise SchemaError("pattern must be a string", pointer=f"{ptr}/pattern",
                                  keyword="pattern")
            try:
                pattern_rx(p)
                patterns = (p,)
            except PatternError as e:
                self.unsupported(f"pattern {p!r}: {e}", f"{ptr}/pattern", "pattern")
        formats: tuple[str, ...] = ()
        f = kw.get("format")
        if f is not None:
            if isinstance(f, str) and f in FORMATS:
                formats = (f,)
            elif not isinstance(f, str):
                raise SchemaError("format must be a string", pointer=f"{ptr}/format",
                                  keyword="format")
            elif self.options.strict_formats:
                self.unsupported(f"Unknown format: {f} (strict_formats)", f"{ptr}/format",
                                 "format")
            else:  # an annotation since 2019-09 (§7.2.1 of the validation spec)
                self.note(f"{ptr}/format", "format",
                          f"unknown format {f!r} is an annotation: any string is accepted")
        return check_string(StringSchema(lo, hi, patterns, formats, None, ptr),
                            self.string_accepts)

    def _array(self, kw: dict[str, Any], ptr: str) -> Schema:
        items = kw.get("items")
        prefix: tuple[Schema, ...] = ()
        rest: Schema = ANY
        if isinstance(items, list):
            prefix = tuple(self.build(v, f"{ptr}/items/{i}") for i, v in enumerate(items))
            if "additionalItems" in kw:
                rest = self.build(kw["additionalItems"], f"{ptr}/additionalItems")
        else:
            if "prefixItems" in kw:
                pi = kw["prefixItems"]
                if not isinstance(pi, list):
                    raise SchemaError("prefixItems must be an array", pointer=f"{ptr}/prefixItems",
                                      keyword="prefixItems")
                prefix = tuple(self.build(v, f"{ptr}/prefixItems/{i}") for i, v in enumerate(pi))
            if items is not None:
                rest = self.build(items, f"{ptr}/items")
        lo = _count(kw, "minItems", ptr) or 0
        hi = _count(kw, "maxItems", ptr)
        unique = kw.get("uniqueItems") is True and not (hi is not None and hi <= 1)
        contains = None
        lo_c, hi_c = 1, None
        if "contains" in kw:
            if self.draft >= 2019:
                lo_c = _count(kw, "minContains", ptr)
                lo_c = 1 if lo_c is None else lo_c
                hi_c = _count(kw, "maxContains", ptr)
            if lo_c > 0 or hi_c is not None:
                if prefix:
                    self.unsupported("contains together with prefixItems is not supported",
                                     f"{ptr}/contains", "contains")
                else:
                    contains = self.build(kw["contains"], f"{ptr}/contains")
        return check_array(ArraySchema(lo, hi, prefix, rest, contains, lo_c, hi_c, ptr, unique))

    def _object(self, kw: dict[str, Any], ptr: str) -> Schema:
        props_raw = kw.get("properties", {})
        if not isinstance(props_raw, dict):
            raise SchemaError("properties must be an object", pointer=f"{ptr}/properties",
                              keyword="properties")
        props = tuple((name, self.build(s, f"{ptr}/properties/{escape_pointer(name)}"))
                      for name, s in props_raw.items())
        required = kw.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise SchemaError("required must be an array of strings", pointer=f"{ptr}/required",
                              keyword="required")
        pats_raw = kw.get("patternProperties", {})
        if not isinstance(pats_raw, dict):
            raise SchemaError("patternProperties must be an object",
                              pointer=f"{ptr}/patternProperties", keyword="patternProperties")
        pats = []
        for p, s in pats_raw.items():
            at = f"{ptr}/patternProperties/{escape_pointer(p)}"
            try:
                pattern_rx(p)
            except PatternError as e:
                self.unsupported(f"patternProperties regex {p!r}: {e}", at, "patternProperties")
                continue
            pats.append((p, self.build(s, at)))
        additional = self.build(kw.get("additionalProperties", True),
                                f"{ptr}/additionalProperties")
        names = self.build(kw.get("propertyNames", True), f"{ptr}/propertyNames")
        return self.intersect.check_object(ObjectSchema(
            props, tuple(dict.fromkeys(required)), additional, tuple(pats), names,
            _count(kw, "minProperties", ptr) or 0, _count(kw, "maxProperties", ptr), ptr,
        ))


def _types(value: Any, at: str) -> tuple[str, ...]:
    vals = value if isinstance(value, list) else [value]
    allowed = ("null", "boolean", "object", "array", "string", "number", "integer")
    for t in vals:
        if t not in allowed:
            raise SchemaError(f"Invalid type {t!r}", pointer=at, keyword="type")
    return tuple(dict.fromkeys(vals))


def _num(kw: dict[str, Any], key: str, ptr: str) -> Decimal | None:
    v = kw.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SchemaError(f"{key} must be a number", pointer=f"{ptr}/{key}", keyword=key)
    return decimal_of(v)


def _count(kw: dict[str, Any], key: str, ptr: str) -> int | None:
    v = kw.get(key)
    if v is None:
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise SchemaError(f"{key} must be a non-negative integer", pointer=f"{ptr}/{key}",
                          keyword=key)
    return v
