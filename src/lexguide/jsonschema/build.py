"""Phase 1: raw JSON Schema → typed schema IR (:mod:`lexguide.jsonschema.schema`).

Keywords are classified per draft (spec §3): implemented ones build IR, annotations are
ignored, keywords the draft defines but we cannot enforce raise :class:`SchemaError` naming the
keyword and its JSON pointer (a warning when ``lenient``), keywords unknown to the draft are
ignored. The keywords of one schema object are intersected left to right: all non-applicator
keywords form one typed node placed where the first of them stands; ``$ref``, ``allOf``,
``anyOf``, ``oneOf``, ``const`` and ``enum`` are intersected in their own positions (spec §4.5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urldefrag

from lexguide.errors import SchemaError
from lexguide.grammar.ir import CompileNote
from lexguide.jsonschema.applicators import Applicators, OneOf
from lexguide.jsonschema.difference import Difference
from lexguide.jsonschema.formats import filter_rx, format_rx
from lexguide.jsonschema.keywords import TypedKeywords
from lexguide.jsonschema.pattern import pattern_rx
from lexguide.jsonschema.refs import RefIndex, detect_draft, escape_pointer, id_keyword, split_key
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
    json_body,
)
from lexguide.jsonschema.unevaluated import Unevaluated
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
# keyword -> (first draft defining it, last draft defining it)
DRAFT_KEYWORDS = {
    "not": (4, 2020), "if": (7, 2020), "then": (7, 2020), "else": (7, 2020),
    "dependencies": (4, 2020), "dependentRequired": (2019, 2020),
    "dependentSchemas": (2019, 2020), "unevaluatedItems": (2019, 2020),
    "unevaluatedProperties": (2019, 2020),
}
DYNAMIC_REFS = {"$dynamicRef": 2020, "$recursiveRef": 2019}
INTRODUCED = {"const": 6, "contains": 6, "propertyNames": 6, "prefixItems": 2020,
              "minContains": 2019, "maxContains": 2019}
CONTENT_KW = ("contentEncoding", "contentMediaType")

# what ``_build`` does with a keyword: one lookup per key; keys not listed (annotations,
# unknown keywords) are skipped
_APPLICATOR, _SIMPLE, _CONTENT, _DYNAMIC, _DRAFT = range(5)
_KEYWORD_KIND: dict[str, tuple[int, int]] = {  # keyword -> (what, first draft having it)
    **{k: (_APPLICATOR, INTRODUCED.get(k, 0)) for k in APPLICATORS},
    **{k: (_SIMPLE, INTRODUCED.get(k, 0)) for k in SIMPLE_KW},
    **{k: (_CONTENT, 0) for k in CONTENT_KW},
    **{k: (_DYNAMIC, 0) for k in DYNAMIC_REFS},
    **{k: (_DRAFT, 0) for k in DRAFT_KEYWORDS},
}

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
    refs: dict[str, Any] | None = None  # {uri: schema} documents $ref may reach (not fetched)


class SchemaBuilder(TypedKeywords, Applicators, Unevaluated):
    """Builds the IR of one document; ``defs`` maps reference keys (pointers) to their IR.

    Mutates only itself. Cost: linear in the schema size, plus intersections.
    """

    def __init__(self, root: Any, options: BuildOptions = BuildOptions(), *,
                 has_anchors: bool | None = None) -> None:
        """``has_anchors``: whether ``root`` has an id or anchor keyword of its draft
        (:func:`~lexguide.jsonschema.refs.anchor_keys`; None: look)."""
        self.root = root
        self.options = options
        self.draft = self.root_draft = options.draft or detect_draft(root)
        if options.refs is not None and not isinstance(options.refs, dict):
            raise TypeError("refs must be a dict {uri: schema}")
        self.index = RefIndex(root, id_keyword(self.draft), ref_overrides=self.draft <= 7,
                              refs=options.refs, has_anchors=has_anchors)
        # dynamic scope (core 2020-12 §7.1): the resources with dynamic anchors entered on
        # the way here, outermost first; a reference target is built once per scope
        self.scope: tuple[str, ...] = ()
        self._scoped: dict[str, tuple[str, tuple[str, ...]]] = {}
        self._scope_ids: dict[tuple[tuple[str, str], ...], int] = {}
        self.defs: dict[str, Schema] = {}
        self._building: set[str] = set()
        self._pending: list[str] = []
        self.intersect = Intersector(self.resolve, self.string_accepts)
        self.diff = Difference(self.intersect)
        self.nesting = Nesting(nesting_error)
        self.notes: list[CompileNote] = []
        self._noted: set[CompileNote] = set()  # accepted but not enforced (Grammar.notes)

    def release(self) -> None:
        """Drop the helpers that refer back to this builder (bound methods), so a finished
        builder is freed by reference counting instead of waiting for a cyclic collection."""
        self.intersect = self.diff = None  # type: ignore[assignment]

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
        target, scope = self._scoped.get(key, (key, ()))
        saved = self.draft, self.scope
        self.draft, self.scope = self._draft_of(target), scope
        try:
            s = self.build(self.index.get(target), target)
        finally:
            self._building.discard(key)
            self.draft, self.scope = saved
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
        """Record something accepted without being enforced (mutates ``notes``; a subschema
        built once per dynamic scope is noted once)."""
        note = CompileNote(pointer, keyword, message)
        if note not in self._noted:
            self._noted.add(note)
            self.notes.append(note)

    def string_accepts(self, s: StringSchema, value: str) -> bool:
        """Does ``value`` satisfy the length/pattern/format constraints of ``s``."""
        n = len(value)
        if n < s.min_length or (s.max_length is not None and n > s.max_length):
            return False
        if not (s.patterns or s.formats or s.rx_filters):
            return True
        body = json_body(value)
        return all(rx.matches(pattern_rx(p), body) for p in s.patterns) and all(
            rx.matches(format_rx(f), body) for f in s.formats) and all(
            rx.matches(filter_rx(kind, x), body) == want for want, kind, x in s.rx_filters)

    # -- schema objects -----------------------------------------------------------------------
    def build(self, raw: Any, ptr: str) -> Schema:
        """IR of the raw subschema ``raw`` at pointer ``ptr``; one nesting level deeper. A
        subschema entering a resource with dynamic anchors is built with the resource added
        to the dynamic scope."""
        dynamic = self.index.dynamic
        if dynamic:
            res = self.index.resource_of(ptr)
            if res in dynamic and res not in self.scope:
                saved = self.scope
                self.scope = (*saved, res)
                try:
                    return self.build(raw, ptr)  # in the scope now: built below
                finally:
                    self.scope = saved
        nesting = self.nesting
        if nesting.depth >= nesting.limit:
            raise nesting.make_error(ptr, nesting.limit)
        nesting.depth += 1
        try:
            if raw is True:
                return ANY
            if raw is False:
                return Unsat(f"false schema at {ptr or '#'}")
            if not isinstance(raw, dict):
                raise SchemaError("schema must be an object or boolean", pointer=ptr)
            draft = self.draft
            if "$ref" in raw and draft <= 7:
                return self._ref(raw["$ref"], ptr)
            parts: list[Schema | None] = []
            one_ofs: list[OneOf] = []
            deferred: list[str] = []  # "not", "if": exclusions relative to everything else
            simple: dict[str, Any] = {}
            simple_pos = 0
            kind_of = _KEYWORD_KIND.get
            for key, value in raw.items():
                kind = kind_of(key)
                if kind is None:
                    continue
                what, since = kind
                if what == _SIMPLE:
                    if draft < since:
                        continue
                    if not simple or key == "properties":
                        simple_pos = len(parts)  # property order follows "properties" (§4.5)
                    simple[key] = value
                elif what == _APPLICATOR:
                    if draft < since:
                        continue
                    if key == "$ref":  # written at ptr itself
                        parts.append(self._ref(value, ptr))
                        continue
                    at = f"{ptr}/{escape_pointer(key)}"
                    if key == "oneOf":
                        subs = self._subschemas(key, value, at)
                        one_ofs.append(OneOf(len(parts), subs, at))
                        parts.append(any_of(subs, "every branch of oneOf is unsatisfiable"))
                    else:
                        parts.append(self._applicator(key, value, at, ptr))
                elif what == _CONTENT:
                    if draft == 7:
                        content = self._content(key, value, raw, ptr)
                        if content is not None:
                            parts.append(content)
                elif what == _DYNAMIC:
                    if draft == DYNAMIC_REFS[key]:
                        parts.append(self._ref(value, ptr, key))
                else:
                    lo, hi = DRAFT_KEYWORDS[key]
                    if lo <= draft <= hi:
                        if key in ("not", "if", "unevaluatedProperties", "unevaluatedItems"):
                            deferred.append(key)
                        elif key in ("dependencies", "dependentRequired", "dependentSchemas"):
                            parts.append(self.dependencies(key, value, f"{ptr}/{key}"))
            inter = self.intersect
            if not deferred and not one_ofs and (not parts or not simple and len(parts) == 1):
                # the typed keywords alone, one other part ($ref), or none (most schemas)
                if not simple and not parts:
                    return ANY
                return self._one_part(parts[0] if parts else self._simple(simple, ptr), ptr)
            if simple:
                parts.insert(simple_pos, None)
                for k in one_ofs:
                    k.index += k.index >= simple_pos
            done = [self._simple(simple, ptr) if p is None else p for p in parts] if simple else parts
            out: Schema = ANY
            if len(done) == 1:  # one part, most schemas
                out = self._one_part(done[0], ptr)
            else:
                with inter.at(ptr):
                    for part in done:
                        out = inter(out, part)
            if one_ofs and not isinstance(out, Unsat):
                out = self.one_ofs(done, one_ofs, out)
            for key in deferred:
                if key == "not":
                    out = self.not_keyword(raw["not"], f"{ptr}/not", out)
                elif key == "if":
                    out = self.if_keyword(raw, ptr, out)
            if "unevaluatedProperties" in deferred or "unevaluatedItems" in deferred:
                out = self.unevaluated(raw, ptr, out)
            return out
        finally:
            nesting.depth -= 1

    def _one_part(self, part: Schema, ptr: str) -> Schema:
        """The schema object at ``ptr`` whose one part is ``part``: intersect(ANY, part), which
        is ``part``; while the step budget allows, its one step is counted and ``part``
        returned as it is."""
        inter = self.intersect
        if inter.steps < inter.limit:
            inter.steps += 1
            return part
        with inter.at(ptr):
            return inter(ANY, part)

    def _draft_of(self, key: str) -> int:
        """The draft of the document holding ``key`` (its ``$schema``, else the root's)."""
        doc = split_key(key)[0]
        raw = self.index.documents.get(doc)
        if doc == "" or not (isinstance(raw, dict) and "$schema" in raw):
            return self.root_draft
        return detect_draft(raw)

    def _content(self, key: str, value: Any, raw: dict, ptr: str) -> Schema | None:
        """Draft 7 ``contentEncoding``/``contentMediaType``: annotations noted on the result,
        assertions under ``strict_formats`` (base64 is enforced; media types are not)."""
        at = f"{ptr}/{key}"
        if not self.options.strict_formats:
            self.note(at, key, f"{key} {value!r} is an annotation: any string is accepted")
            return None
        if key == "contentEncoding" and value == "base64" and "contentMediaType" not in raw:
            return any_of([StringSchema(formats=("byte",), pointer=at), NullSchema(),
                           BoolSchema(), NumberSchema(False), ArraySchema(), ObjectSchema()])
        self.unsupported(f"{key} {value!r} cannot be enforced (strict_formats)", at, key)
        return None

    def _subschemas(self, key: str, value: Any, at: str) -> list[Schema]:
        if not isinstance(value, list) or not value:
            raise SchemaError(f"{key} must be a non-empty array", pointer=at, keyword=key)
        return [self.build(v, f"{at}/{i}") for i, v in enumerate(value)]

    def ref_target(self, ref: Any, ptr: str, keyword: str) -> str:
        """Key of the target of a ``$ref``/``$dynamicRef``/``$recursiveRef`` written at
        ``ptr``, in the current dynamic scope."""
        if not isinstance(ref, str):
            raise SchemaError(f"{keyword} must be a string", pointer=ptr, keyword=keyword)
        target = self.index.resolve(ref, ptr)
        if keyword == "$ref":
            return target
        raw = self.index.get(target)
        if keyword == "$dynamicRef":  # dynamic only when it lands on a matching $dynamicAnchor
            name = urldefrag(ref)[1]
            if name and not name.startswith("/") and isinstance(raw, dict) \
                    and raw.get("$dynamicAnchor") == name:
                got = self.index.dynamic_target(self.scope, name)
                target = target if got is None else got
        elif keyword == "$recursiveRef" and isinstance(raw, dict) \
                and raw.get("$recursiveAnchor") is True:
            got = self.index.dynamic_target(self.scope, "")
            target = target if got is None else got
        return target

    def _ref(self, ref: Any, ptr: str, keyword: str = "$ref") -> Schema:
        key = target = self.ref_target(ref, ptr, keyword)
        if self.index.dynamic and self.scope:
            # scopes binding every dynamic anchor name alike resolve alike: one build each
            sid = self._scope_ids.setdefault(self.index.bindings(self.scope),
                                             len(self._scope_ids))
            key = f"{target}@scope{sid}"
            self._scoped[key] = (target, self.scope)
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
            with self.intersect.at(at, "allOf"):
                for s in subs:
                    out = self.intersect(out, s)
            return out
        return any_of(subs, f"every branch of {key} is unsatisfiable")
