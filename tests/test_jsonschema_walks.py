"""Random constrained walks through the matcher produce instances the ``jsonschema`` package
accepts (JSONSchemaBench sample + hand-written schemas), and compile coverage per subset.

The walk uses a small vocabulary (printable ASCII, three non-ASCII characters, a few multi-byte
JSON pieces, EOS) and a bias towards closing tokens so that walks terminate. Instances with a
duplicated key are set aside: duplicate *additional* keys are a documented departure
(spec §4.4) and ``json.loads`` would hide them.
"""

from __future__ import annotations

import json
import random
import re
import warnings

import numpy as np
import pytest

jsonschema = pytest.importorskip("jsonschema")

from lexguide.engine import Matcher, TokenizerInfo
from lexguide.engine.grammar import Grammar
from lexguide.errors import SchemaError

from corpora import find, require, why_missing  # noqa: E402  (JSONSchemaBench is not vendored)

EXPECTED = "llguidance-data/json_stats/expected_maskbench.json"
SUBSETS = ("Github_trivial", "Github_easy", "Github_medium", "Glaiveai2K", "Kubernetes", "MCPspec")
PIECES = [b'{"', b'":', b'",', b'"}', b"true", b"false", b"null", b"00", b"ab", b"}]"]
CLOSERS = frozenset(b'"}]')
MAX_BYTES = 600


def _vocab() -> tuple[TokenizerInfo, list[bytes], int]:
    toks = [bytes([b]) for b in range(0x20, 0x7F)] + ["é".encode(), "€".encode(), "😀".encode()]
    toks += PIECES + [b""]
    eos = len(toks) - 1
    return TokenizerInfo.from_token_bytes(toks, [eos]), toks, eos


INFO, TOKENS, EOS = _vocab()


def _allowed(mask: np.ndarray) -> np.ndarray:
    bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[: len(TOKENS)]
    return np.flatnonzero(bits)


def random_walk(grammar: Grammar, rng: random.Random) -> bytes | None:
    """One random sentence of ``grammar``, or None when the walk got too long."""
    m = Matcher(grammar, INFO)
    out = bytearray()
    while True:
        allowed = _allowed(m.compute_mask())
        assert len(allowed), f"dead end after {bytes(out)!r}"
        if EOS in allowed and (len(allowed) == 1 or rng.random() < 0.5):
            return bytes(out)
        if len(out) > MAX_BYTES:
            return None
        choices = [int(t) for t in allowed if t != EOS]
        pressure = min(0.95, len(out) / 120)
        closing = [t for t in choices if TOKENS[t][-1] in CLOSERS]
        if closing and rng.random() < pressure:
            pick = rng.choice(closing)
        elif rng.random() < pressure:
            pick = _lookahead(m, choices, rng)
        else:
            pick = rng.choice(choices)
        m.consume(pick)
        out += TOKENS[pick]


def _lookahead(m: Matcher, choices: list[int], rng: random.Random) -> int:
    """A token after which a closing token or EOS is allowed, if one of a few tries finds one."""
    for t in rng.sample(choices, min(12, len(choices))):
        probe = m.clone()
        probe.consume(t)
        nxt = _allowed(probe.compute_mask())
        if any(u == EOS or TOKENS[u][-1] in CLOSERS for u in nxt):
            return t
    return rng.choice(choices)


def _no_duplicate_keys(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate key")
    return dict(pairs)


def _format_checker(cls):
    """The validator's checker, except that RFC 3339 year 0000 and leap second :60 (which
    Python's datetime cannot represent, so the checker rejects them) are mapped to 2000 / :59."""
    base = cls.FORMAT_CHECKER
    checker = jsonschema.FormatChecker()
    for name in base.checkers:
        func, raises = base.checkers[name]

        def check(value, func=func, name=name):
            if isinstance(value, str) and name in ("date", "date-time", "time"):
                value = re.sub(r"^0000-", "2000-", value)
                value = re.sub(r"(\d\d:\d\d):60", r"\1:59", value)
            return func(value)

        checker.checkers[name] = (check, raises)
    return checker


def check_walks(schema, n: int, seed: int, **opts) -> int:
    """Walk ``n`` times; every complete instance must validate. Returns instances checked."""
    g = Grammar.from_json_schema(schema, whitespace="compact", **opts)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator = cls(schema, format_checker=_format_checker(cls))
    rng = random.Random(seed)
    checked = 0
    for _ in range(n):
        data = random_walk(g, rng)
        if data is None:
            continue
        assert g.validate(data), data
        text = data.decode("utf-8")
        try:
            value = json.loads(text, object_pairs_hook=_no_duplicate_keys)
        except ValueError as e:
            if "duplicate key" in str(e):
                continue
            raise AssertionError(f"not JSON: {text!r}") from e
        errors = list(validator.iter_errors(value))
        assert not errors, f"{text!r}: {errors[0].message}"
        checked += 1
    return checked


HAND_WRITTEN = [
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": -5, "maximum": 5},
                                      "b": {"type": "string", "maxLength": 3}},
     "required": ["a"]},
    {"type": "array", "prefixItems": [{"const": "x"}, {"type": "number", "multipleOf": 0.25}],
     "items": {"enum": [1, "two", None]}, "minItems": 2, "maxItems": 4},
    {"type": "object", "patternProperties": {"^x": {"type": "integer"}, "y$": {"type": "boolean"}},
     "additionalProperties": False, "minProperties": 1, "maxProperties": 3},
    {"type": "string", "pattern": "^[a-c]+\\d?$", "minLength": 2},
    {"type": "string", "format": "date-time"},
    {"type": "string", "format": "ipv6"},
    {"$defs": {"t": {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {
        "type": "array", "items": {"$ref": "#/$defs/t"}, "maxItems": 2}},
        "required": ["v"], "additionalProperties": False}}, "$ref": "#/$defs/t"},
    {"anyOf": [{"type": "integer", "exclusiveMinimum": 10}, {"type": "string", "const": "no"}]},
    {"type": "object", "propertyNames": {"pattern": "^[a-z]{1,3}$"}},
    {"not": {"type": ["object", "array"]}},
    {"type": "object", "properties": {"s": {"type": "string", "not": {"enum": ["a", "b"]}},
                                      "n": {"type": "number", "not": {"multipleOf": 2}}},
     "required": ["s", "n"], "additionalProperties": False},
    {"type": "object", "not": {"required": ["a"]}, "maxProperties": 2},
    {"type": "object", "properties": {"kind": {"enum": ["a", "b"]}, "x": {}},
     "required": ["kind"], "if": {"properties": {"kind": {"const": "a"}}},
     "then": {"properties": {"x": {"type": "integer"}}, "required": ["x"]},
     "else": {"properties": {"x": {"type": "boolean"}}}, "additionalProperties": False},
    {"type": "number", "not": {"type": "integer"}, "minimum": -2, "maximum": 2},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
     "oneOf": [{"required": ["a"]}, {"required": ["b"]}], "additionalProperties": False},
    {"oneOf": [{"type": "integer", "maximum": 10}, {"type": "number", "minimum": 5}]},
    {"type": "array", "items": {"type": ["integer", "string"]}, "contains": {"type": "string"},
     "minContains": 1, "maxContains": 2, "maxItems": 4},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "null"}},
     "dependentRequired": {"a": ["b"]}, "additionalProperties": False},
]


@pytest.mark.parametrize("index", range(len(HAND_WRITTEN)))
def test_walks_hand_written(index):
    assert check_walks(HAND_WRITTEN[index], n=15, seed=index) > 0


def _bench_sample(per_subset: int):
    out = []
    for sub in SUBSETS:
        path = find(f"jsonschemabench/{sub}.jsonl")
        if path is None:
            continue
        lines = path.read_text().splitlines()
        rng = random.Random(sub)
        for line in rng.sample(lines, min(per_subset, len(lines))):
            rec = json.loads(line)
            out.append(pytest.param(rec["schema"], id=f"{sub}:{rec['id']}"))
    if not out:
        out.append(pytest.param(None, id="jsonschemabench", marks=pytest.mark.skip(
            reason=why_missing("jsonschemabench/<subset>.jsonl"))))
    return out


@pytest.mark.parametrize("schema", _bench_sample(4))
def test_walks_jsonschemabench_sample(schema):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            Grammar.from_json_schema(schema)
    except SchemaError:
        pytest.skip("schema does not compile (counted by the coverage test)")
    check_walks(schema, n=3, seed=1)


def test_coverage_not_below_llguidance_on_sample():
    """Compile coverage on a fixed sample of every subset is at least llguidance's there."""
    require("jsonschemabench")
    expected = json.loads(require(EXPECTED).read_text())
    for sub in SUBSETS:
        path = find(f"jsonschemabench/{sub}.jsonl")
        if path is None:
            continue
        lines = path.read_text().splitlines()
        sample = random.Random(sub + "cov").sample(lines, min(60, len(lines)))
        ours = theirs = 0
        for line in sample:
            rec = json.loads(line)
            exp = expected.get(f"{sub}---{rec['id']}.json", {})
            theirs += "json_error" not in exp
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    Grammar.from_json_schema(rec["schema"])
                ours += 1
            except SchemaError:
                pass
        assert ours >= theirs, (sub, ours, theirs)
