"""One valid instance of a JSON Schema, for forcing it token by token through every engine.

A seeded random walk of the schema itself, independent of any engine under test: ``$ref``
(local JSON pointers), ``allOf`` (merged), ``anyOf``/``oneOf`` (one branch), ``enum``/``const``,
``examples``/``default`` (tried first), objects in the order of their ``properties`` (required
ones always, optional ones by coin flip, no others), arrays within ``minItems``/``maxItems``,
strings within their lengths (a few ``format``s, and a ``pattern`` matched by a short list of
candidates), numbers within their bounds and ``multipleOf``. Every candidate is checked with the
``jsonschema`` package (formats included); several seeds are tried before giving up, the later
ones shallower and without optional properties.
"""

from __future__ import annotations

import math
import random
import re
from typing import Any

FORMATS = {"date-time": "2024-01-02T03:04:05Z", "date": "2024-01-02", "time": "03:04:05Z",
           "email": "a@example.com", "uri": "https://example.com/a", "uri-reference": "/a",
           "uuid": "123e4567-e89b-12d3-a456-426614174000", "ipv4": "192.168.0.1",
           "ipv6": "::1", "hostname": "example.com", "duration": "P1D"}
PATTERN_TRIES = ("a", "abc", "A", "Abc", "0", "1", "12", "123", "a1", "a-b", "a_b", "a.b",
                 "2024-01-02", "http://a.b", "#ffffff", "+1", "v1.2.3", "1.2.3", "ab12", "")


class NoInstance(Exception):
    """The walk met something it cannot satisfy."""


class _Walk:
    def __init__(self, root: Any, rng: random.Random, depth: int, p_optional: float) -> None:
        self.root, self.rng, self.max_depth, self.p_optional = root, rng, depth, p_optional

    def resolve(self, ref: str) -> Any:
        if not ref.startswith("#"):
            raise NoInstance(f"remote $ref {ref}")
        node = self.root
        for part in filter(None, ref[1:].split("/")):
            part = part.replace("~1", "/").replace("~0", "~")
            node = node[int(part)] if isinstance(node, list) else node[part]
        return node

    def flatten(self, s: Any) -> Any:
        """``s`` with its ``$ref`` and ``allOf`` folded in (shallow: later keys win, except
        that properties and required lists are joined)."""
        if not isinstance(s, dict):
            return s
        for _ in range(16):
            if "$ref" in s:
                s = {**{k: v for k, v in s.items() if k != "$ref"}, **self.flatten(self.resolve(s["$ref"]))}
            elif "allOf" in s:
                merged = {k: v for k, v in s.items() if k != "allOf"}
                for part in s["allOf"]:
                    part = self.flatten(part)
                    if not isinstance(part, dict):
                        continue
                    props = {**merged.get("properties", {}), **part.get("properties", {})}
                    req = list(dict.fromkeys(merged.get("required", []) + part.get("required", [])))
                    merged = {**merged, **part}
                    if props:
                        merged["properties"] = props
                    if req:
                        merged["required"] = req
                s = merged
            else:
                return s
        raise NoInstance("$ref/allOf too deep")

    def value(self, s: Any, depth: int = 0) -> Any:
        if s is True or s == {}:
            return self.rng.choice([None, 1, "a", True])
        if s is False:
            raise NoInstance("false schema")
        s = self.flatten(s)
        if "const" in s:
            return s["const"]
        if "enum" in s:
            return self.rng.choice(s["enum"])
        for key in ("examples", "default"):
            if key in s and self.rng.random() < 0.5:
                return s[key][0] if key == "examples" and isinstance(s[key], list) and s[key] else s[key]
        for key in ("anyOf", "oneOf"):
            if key in s:
                branch = self.rng.choice(s[key])
                rest = {k: v for k, v in s.items() if k != key}
                return self.value({"allOf": [rest, branch]} if rest else branch, depth)
        t = s.get("type")
        if isinstance(t, list):
            t = self.rng.choice(t)
        if t is None:
            t = ("object" if "properties" in s or "required" in s else
                 "array" if "items" in s or "prefixItems" in s else
                 "string" if any(k in s for k in ("pattern", "format", "minLength")) else
                 "number" if any(k in s for k in ("minimum", "maximum")) else "string")
        return getattr(self, f"v_{t}")(s, depth)

    def v_null(self, s: Any, depth: int) -> Any:
        return None

    def v_boolean(self, s: Any, depth: int) -> Any:
        return self.rng.random() < 0.5

    def v_object(self, s: Any, depth: int) -> Any:
        props = s.get("properties", {})
        required = set(s.get("required", []))
        out = {}
        for name, sub in props.items():
            if name in required or (depth < self.max_depth and self.rng.random() < self.p_optional):
                out[name] = self.value(sub, depth + 1)
        for name in required - out.keys():
            extra = s.get("additionalProperties", True)
            out[name] = self.value(extra if isinstance(extra, dict) else True, depth + 1)
        while len(out) < s.get("minProperties", 0):
            extra = s.get("additionalProperties", True)
            out[f"k{len(out)}"] = self.value(extra if isinstance(extra, dict) else True, depth + 1)
        return out

    def v_array(self, s: Any, depth: int) -> Any:
        prefix = s.get("prefixItems", [])
        items = s.get("items", True)
        if isinstance(items, list):  # draft 7 tuple form
            prefix, items = items, s.get("additionalItems", True)
        lo = s.get("minItems", 0)
        hi = s.get("maxItems", lo + (2 if depth < self.max_depth else 0))
        n = self.rng.randint(lo, max(lo, min(hi, lo + 3)))
        out = [self.value(prefix[i] if i < len(prefix) else items, depth + 1) for i in range(n)]
        if s.get("uniqueItems") and len({repr(x) for x in out}) < len(out):
            raise NoInstance("duplicate items")
        return out

    def v_string(self, s: Any, depth: int) -> Any:
        lo, hi = s.get("minLength", 0), s.get("maxLength", None)
        if "format" in s and s["format"] in FORMATS:
            return FORMATS[s["format"]]
        if "pattern" in s:
            try:
                rx = re.compile(s["pattern"])
            except re.error as e:
                raise NoInstance(f"pattern: {e}") from None
            for cand in PATTERN_TRIES:
                if rx.search(cand) and lo <= len(cand) <= (hi if hi is not None else 1 << 30):
                    return cand
            raise NoInstance("no candidate matches the pattern")
        n = self.rng.randint(lo, max(lo, min(hi if hi is not None else lo + 8, lo + 8)))
        return "".join(self.rng.choice("abcdefghij") for _ in range(n))

    def v_integer(self, s: Any, depth: int) -> Any:
        return int(self.v_number(s, depth, integer=True))

    def v_number(self, s: Any, depth: int, integer: bool = False) -> Any:
        lo = s.get("minimum", -10 if "maximum" not in s else s["maximum"] - 20)
        hi = s.get("maximum", lo + 20)
        if isinstance(s.get("exclusiveMinimum"), (int, float)):
            lo = s["exclusiveMinimum"] + 1
        if isinstance(s.get("exclusiveMaximum"), (int, float)):
            hi = s["exclusiveMaximum"] - 1
        lo, hi = math.ceil(lo), math.floor(hi)
        if hi < lo:
            raise NoInstance("empty numeric range")
        step = s.get("multipleOf")
        if step:
            k = math.ceil(lo / step)
            x = k * step
            return int(x) if float(x).is_integer() else x
        return self.rng.randint(lo, hi)


def make_instance(schema: Any, key: str, attempts: int = 12) -> tuple[bool, Any]:
    """(True, instance) or (False, why not); deterministic in ``key``."""
    import jsonschema
    import jsonschema.validators

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as e:
        return False, f"invalid schema: {e.message[:160]}"
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    why = "no attempt"
    for a in range(attempts):
        deep = a < attempts // 2
        walk = _Walk(schema, random.Random(f"{key}/{a}"), 6 if deep else 3, 0.5 if deep else 0.0)
        try:
            inst = walk.value(schema)
        except (NoInstance, RecursionError, KeyError, IndexError, TypeError, ValueError,
                AttributeError) as e:
            why = f"walk: {type(e).__name__}: {str(e)[:160]}"
            continue
        try:
            err = next(iter(validator.iter_errors(inst)), None)
        except Exception as e:  # noqa: BLE001  (a validator failure on an odd schema)
            why = f"validator: {type(e).__name__}: {str(e)[:160]}"
            continue
        if err is None:
            return True, inst
        why = f"invalid: {err.message[:160]}"
    return False, why
