"""Property-test helper: a compiled schema against the ``jsonschema`` validator on generated
instances.

:func:`instances` draws JSON values from the schema's own vocabulary (its property names,
constants, numbers near its bounds, strings near its lengths) plus a few strangers, so that
both valid and invalid instances are frequent. :func:`disagreements` checks every instance:

* soundness: a text the grammar accepts must be valid;
* completeness: a valid instance must be accepted in the schema's property order. The order
  is the one of first mention in the schema text; when that is rejected, every ordering of
  every object's keys (up to a cap) is tried, so only instances no order can express count.
"""

from __future__ import annotations

import itertools
import json
import random
from decimal import Decimal
from typing import Any

import jsonschema

from lexguide.engine.grammar import Grammar

__all__ = ["disagreements", "instances", "validator"]


def validator(schema: Any, registry: Any = None) -> Any:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema) if registry is None else cls(schema, registry=registry)


def _vocabulary(schema: Any) -> tuple[list[str], list[Any], list[float], list[int]]:
    names: list[str] = []
    consts: list[Any] = []
    numbers: list[float] = [0, 1, -1, 1.5, 2, 3]
    lengths: list[int] = [0, 1, 2]

    def walk(x: Any, parent: str | None) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                if parent in ("properties", "patternProperties", "dependentRequired",
                              "dependentSchemas", "dependencies"):
                    names.append(k)
                if k in ("const",):
                    consts.append(v)
                elif k == "enum" and isinstance(v, list):
                    consts.extend(v)
                elif k == "required" and isinstance(v, list):
                    names.extend(n for n in v if isinstance(n, str))
                elif k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                           "multipleOf") and isinstance(v, (int, float)) \
                        and not isinstance(v, bool):
                    numbers.extend([v, v - 1, v + 1, v + 0.5])
                elif k in ("minLength", "maxLength", "minItems", "maxItems", "minProperties",
                           "maxProperties") and isinstance(v, int):
                    lengths.extend([v - 1, v, v + 1])
                walk(v, k)
        elif isinstance(x, list):
            for v in x:
                walk(v, parent)

    walk(schema, None)
    names = list(dict.fromkeys(n for n in names if not n.startswith("^")))
    return names + ["zz"], consts, numbers, [n for n in dict.fromkeys(lengths) if 0 <= n <= 6]


def instances(schema: Any, rng: random.Random, n: int, depth: int = 3) -> list[Any]:
    """``n`` random JSON values in the vocabulary of ``schema``."""
    names, consts, numbers, lengths = _vocabulary(schema)
    strings = [c for c in consts if isinstance(c, str)] + names + ["", "é", "ab", "a\nb", "😀"]

    def value(d: int) -> Any:
        r = rng.random()
        if consts and r < 0.2:
            return _no_integral_floats(rng.choice(consts))
        kind = rng.choice(["null", "bool", "int", "num", "str", "str", "arr", "obj", "obj"]
                          if d > 0 else ["null", "bool", "int", "num", "str"])
        if kind == "null":
            return None
        if kind == "bool":
            return rng.random() < 0.5
        if kind == "int":
            return int(rng.choice(numbers)) if rng.random() < 0.8 else rng.randint(-5, 9)
        if kind == "num":  # an integral float would be written 1.0: not an integer (spec §4)
            x = float(Decimal(str(rng.choice(numbers))))
            return int(x) if x.is_integer() else x
        if kind == "str":
            if rng.random() < 0.6:
                return rng.choice(strings)
            return "x" * rng.choice(lengths)
        if kind == "arr":
            return [value(d - 1) for _ in range(rng.choice(lengths + [0, 1, 2]))]
        keys = rng.sample(names, min(len(names), rng.randint(0, min(4, len(names)))))
        return {k: value(d - 1) for k in keys}

    return [value(depth) for _ in range(n)]


def _no_integral_floats(x: Any) -> Any:
    if isinstance(x, float) and x.is_integer():
        return int(x)
    if isinstance(x, list):
        return [_no_integral_floats(v) for v in x]
    if isinstance(x, dict):
        return {k: _no_integral_floats(v) for k, v in x.items()}
    return x


def _orders(data: Any, rank: dict[str, int], cap: int) -> list[Any]:
    """``data`` with its object keys in schema order, then other orders (at most ``cap``)."""
    def in_rank(x: Any) -> Any:
        if isinstance(x, dict):
            keys = sorted(x, key=lambda k: (rank.get(k, len(rank)), k))
            return {k: in_rank(x[k]) for k in keys}
        if isinstance(x, list):
            return [in_rank(v) for v in x]
        return x

    out = [in_rank(data)]
    if isinstance(data, dict) and 1 < len(data) <= 5:
        for perm in itertools.islice(itertools.permutations(data), cap):
            out.append({k: in_rank(data[k]) for k in perm})
    return out


def disagreements(schema: Any, n: int = 300, seed: int = 0, *, grammar: Grammar | None = None,
                  registry: Any = None, ensure_ascii: bool = False,
                  **opts: Any) -> tuple[list, list, int]:
    """``(unsound, incomplete, n_valid)`` over ``n`` generated instances of ``schema``."""
    g = grammar if grammar is not None else Grammar.from_json_schema(schema, **opts)
    v = validator(schema, registry)
    text = json.dumps(schema)
    rank = {}
    for name in _vocabulary(schema)[0]:
        pos = text.find(json.dumps(name) + ":")
        rank[name] = pos if pos >= 0 else len(text)
    rank = {k: i for i, k in enumerate(sorted(rank, key=rank.__getitem__))}
    unsound, incomplete, n_valid = [], [], 0
    rng = random.Random(seed)
    seen = set()
    for data in instances(schema, rng, n):
        key = json.dumps(data, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        valid = v.is_valid(data)
        n_valid += valid
        accepted = False
        for form in _orders(data, rank, 24):
            ok = g.validate(json.dumps(form, ensure_ascii=ensure_ascii))
            if ok and not valid:
                unsound.append(form)
            accepted |= ok
            if accepted and valid:
                break
        if valid and not accepted:
            incomplete.append(data)
    return unsound, incomplete, n_valid
