"""Typed keywords of one schema object → IR nodes (``type``, numeric, string, array, object
keywords and ``const``/``enum`` values), validated with the JSON pointer of each keyword.

A mixin of :class:`~lexguide.jsonschema.build.SchemaBuilder`: it uses the builder's ``build``,
``intersect``, ``note``, ``unsupported``, ``string_accepts``, ``draft`` and ``options``.
"""

from __future__ import annotations

from decimal import Decimal
from itertools import repeat
from typing import Any, Protocol

from lexguide.errors import SchemaError
from lexguide.jsonschema.formats import FORMATS
from lexguide.jsonschema.numeric import decimal_of
from lexguide.jsonschema.pattern import PatternError, pattern_rx
from lexguide.jsonschema.refs import escape_pointer
from lexguide.jsonschema.schema import (
    ANY,
    AnyOfSchema,
    AnySchema,
    ArraySchema,
    BoolSchema,
    NullSchema,
    NumberSchema,
    ObjectSchema,
    Schema,
    StringSchema,
    Unsat,
    any_of,
    check_array,
    check_number,
    check_string,
)

__all__ = ["ALL_TYPES", "META_KW", "BuilderHooks", "TypedKeywords", "count_of"]

ALL_TYPES = ("null", "boolean", "object", "array", "string", "number")


META_KW = frozenset((
    "$anchor", "$defs", "definitions", "$schema", "$id", "id", "$comment", "title",
    "description", "default", "readOnly", "writeOnly", "examples", "contentMediaType",
    "contentEncoding", "contentSchema", "deprecated", "$vocabulary", "$dynamicAnchor",
    "$recursiveAnchor",
))


class BuilderHooks(Protocol):
    """What the builder's mixins use of :class:`~lexguide.jsonschema.build.SchemaBuilder`
    (which defines each of these; declared here for the mixins' type checking)."""

    draft: int
    options: Any
    intersect: Any
    nesting: Any

    def build(self, raw: Any, ptr: str) -> Schema: ...

    def note(self, pointer: str, keyword: str, message: str) -> None: ...

    def unsupported(self, message: str, pointer: str, keyword: str) -> None: ...

    def string_accepts(self, s: StringSchema, value: str) -> bool: ...

    def ref_target(self, ref: Any, ptr: str, keyword: str) -> str: ...

    def resolve(self, key: str) -> Schema: ...


class TypedKeywords(BuilderHooks):
    """Builds the typed IR of a schema object's non-applicator keywords (a mixin)."""

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
        types = _types(kw["type"], ptr) if "type" in kw else ALL_TYPES
        if len(types) == 1:  # one type (most schemas): its node, as any_of of it gives
            one = self._typed(types[0], kw, ptr)
            if type(one) not in _NOT_ALONE:
                return one
            return any_of([one], f"no type of {list(types)} is satisfiable")
        options = [self._typed(t, kw, ptr) for t in types
                   if not (t == "integer" and "number" in types)]  # number covers integer
        return any_of(options, f"no type of {list(types)} is satisfiable")

    def _typed(self, t: str, kw: dict[str, Any], ptr: str) -> Schema:
        """The node of type ``t`` (a "type" name) under the typed keywords ``kw``."""
        if t == "string":
            return self._string(kw, ptr)
        if t == "object":
            return self._object(kw, ptr)
        if t == "array":
            return self._array(kw, ptr)
        if t == "number" or t == "integer":
            return self._number(kw, t == "integer", ptr)
        return NullSchema() if t == "null" else BoolSchema()

    def _number(self, kw: dict[str, Any], integer: bool, ptr: str) -> Schema:
        if len(kw) == 1 and "type" in kw:  # no numeric keyword: what the lines below give
            return NumberSchema(integer, None, None, False, False, None, ptr)
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
        if len(kw) == 1 and "type" in kw:  # no string keyword: what the lines below give
            return StringSchema(0, None, (), (), None, ptr)
        lo = count_of(kw, "minLength", ptr) or 0
        hi = count_of(kw, "maxLength", ptr)
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
        lo = count_of(kw, "minItems", ptr) or 0
        hi = count_of(kw, "maxItems", ptr)
        unique = kw.get("uniqueItems") is True and not (hi is not None and hi <= 1)
        contains = None
        lo_c, hi_c = 1, None
        if "contains" in kw:
            if self.draft >= 2019:
                lo_c = count_of(kw, "minContains", ptr)
                lo_c = 1 if lo_c is None else lo_c
                hi_c = count_of(kw, "maxContains", ptr)
            if lo_c > 0 or hi_c is not None:
                if prefix:
                    self.unsupported("contains together with prefixItems is not supported",
                                     f"{ptr}/contains", "contains")
                else:
                    contains = self.build(kw["contains"], f"{ptr}/contains")
        return check_array(ArraySchema(lo, hi, prefix, rest, contains, lo_c, hi_c, ptr, unique))

    def _object(self, kw: dict[str, Any], ptr: str) -> Schema:
        props_raw = kw.get("properties", _ABSENT)
        if not isinstance(props_raw, dict):
            raise SchemaError("properties must be an object", pointer=f"{ptr}/properties",
                              keyword="properties")
        at = f"{ptr}/properties/"
        build = self.build
        props = tuple([(name, build(s, at + (escape_pointer(name) if "~" in name or "/" in name
                                             else name)))
                       for name, s in props_raw.items()])
        required = kw.get("required", [])
        if not isinstance(required, list) or not all(map(isinstance, required, repeat(str))):
            raise SchemaError("required must be an array of strings", pointer=f"{ptr}/required",
                              keyword="required")
        pats_raw = kw.get("patternProperties", _ABSENT)
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
        # absent (true) schemas, most objects': ANY without a build (its pointer and nesting
        # level), unless at the nesting limit, where build raises
        nest = self.nesting
        open_ok = nest.depth < nest.limit
        additional_raw = kw.get("additionalProperties", True)
        additional = ANY if additional_raw is True and open_ok else self.build(
            additional_raw, f"{ptr}/additionalProperties")
        names_raw = kw.get("propertyNames", True)
        names = ANY if names_raw is True and open_ok else self.build(
            names_raw, f"{ptr}/propertyNames")
        bounded = "minProperties" in kw or "maxProperties" in kw
        return self.intersect.check_object(ObjectSchema(
            props, tuple(dict.fromkeys(required)) if required else (), additional, tuple(pats),
            names, (count_of(kw, "minProperties", ptr) or 0) if bounded else 0,
            count_of(kw, "maxProperties", ptr) if bounded else None, ptr,
        ))


_ABSENT: dict[str, Any] = {}  # an absent properties/patternProperties (read, never written)
# nodes that ``any_of`` of one option does not return as they are (flattened, dropped, ANY)
_NOT_ALONE = (AnyOfSchema, Unsat, AnySchema)
_TYPE_NAMES = ("null", "boolean", "object", "array", "string", "number", "integer")
_ONE_TYPE = {t: (t,) for t in _TYPE_NAMES}  # a "type" string -> its types


def _types(value: Any, ptr: str) -> tuple[str, ...]:
    """The types named by the ``type`` keyword of the schema at ``ptr``, each once."""
    if type(value) is str:
        one = _ONE_TYPE.get(value)
        if one is not None:
            return one
    vals = value if isinstance(value, list) else [value]
    for t in vals:
        if t not in _TYPE_NAMES:
            raise SchemaError(f"Invalid type {t!r}", pointer=f"{ptr}/type", keyword="type")
    return tuple(dict.fromkeys(vals))


def _num(kw: dict[str, Any], key: str, ptr: str) -> Decimal | None:
    v = kw.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SchemaError(f"{key} must be a number", pointer=f"{ptr}/{key}", keyword=key)
    return decimal_of(v)


def count_of(kw: dict[str, Any], key: str, ptr: str) -> int | None:
    v = kw.get(key)
    if v is None:
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise SchemaError(f"{key} must be a non-negative integer", pointer=f"{ptr}/{key}",
                          keyword=key)
    return v
