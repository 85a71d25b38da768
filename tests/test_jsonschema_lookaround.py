"""Lookarounds in ``pattern`` and ``patternProperties`` (lexguide.jsonschema.pattern): exact
where they stand in the pattern's outermost sequence, against Python's ``regex`` module (which
shares ECMA's lookaround semantics, variable-width lookbehinds included) and the ``jsonschema``
validator; random constrained walks produce only valid instances and never reach a dead end;
the forms that stay unsupported are located errors."""
from __future__ import annotations

import json
import random

import pytest

from lexguide import Grammar
from lexguide.errors import SchemaError
from lexguide.jsonschema.pattern import PatternError, pattern_rx
from lexguide.regex import nodes as rx
from test_jsonschema_walks import random_walk

regex = pytest.importorskip("regex")
jsonschema = pytest.importorskip("jsonschema")

PATTERNS = [
    r"^(?!@@)[a-z@]+$",                       # a forbidden prefix
    r"^(?=.{1,10}$)[a-z]+(\.[a-z]+)*$",       # a length bound on the whole
    r"foo(?!bar)",                            # search semantics, lookahead at the end
    r"(?<=a)b",
    r"^[a-z]+(?<!-)$",                        # a forbidden suffix
    r"(?<!x)y",
    r"^(?=.*\d)(?=.*[a-z]).{6,}$",            # several lookaheads at one place
    r"^(?![-.])[a-z.-]+(?<![-.])$",           # both ends of the subject
    r"a(?=b)|c(?!d)",                         # in branches of the outermost alternation
    r"^(?!.*\.\.)[a-z.]*$",                   # "does not contain"
    r"(?<=ab|c)d+(?=e)",                      # a lookbehind of variable width
    r"x(?=y$)",                               # a lookahead to the end
    r"(?<!^a)b",
    r'^(?!")[^\\]*(?<!")$',                   # characters that JSON escapes
]
ALPHABET = 'abcdefoxy-.@1r"\\é'


def _body(s: str) -> bytes:
    return json.dumps(s, ensure_ascii=False)[1:-1].encode()


@pytest.mark.parametrize("pattern", PATTERNS)
def test_lookaround_patterns_match_the_regex_module(pattern):
    node = pattern_rx(pattern)
    oracle = regex.compile(pattern)
    rng = random.Random(pattern)
    seen = set()
    for _ in range(2500):
        s = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 12)))
        want = bool(oracle.search(s))
        seen.add(want)
        assert rx.matches(node, _body(s)) == want, (pattern, s)
    assert seen == {True, False}  # both outcomes exercised


@pytest.mark.parametrize("pattern", PATTERNS[:8])
def test_schemas_with_lookarounds_agree_with_the_validator(pattern):
    schema = {"type": "object",
              "properties": {"name": {"type": "string", "pattern": pattern}},
              "patternProperties": {r"^(?!x-)[a-z]+$": {"type": "integer"}},
              "additionalProperties": {"type": "boolean"}}
    g = Grammar.from_json_schema(schema)
    v = jsonschema.Draft202012Validator(schema)
    rng = random.Random(pattern)
    for _ in range(300):
        name = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 8)))
        key = rng.choice(["ab", "x-ab", "x-", "q", "name1", "x-y"])
        val = rng.choice([1, True, "s"])
        inst = {"name": name, key: val} if key != "name" else {"name": name}
        text = json.dumps(inst, ensure_ascii=False)
        assert g.validate(text) == v.is_valid(inst), (pattern, text)


@pytest.mark.parametrize("pattern", [r"^(?!ab)[a-d]{1,4}$", r"^(?=.*c)[a-d]{1,5}(?<!a)$",
                                     r"^(?![-.])[a-z.-]{1,6}(?<![-.])$"])
def test_walks_through_the_masks_give_valid_strings(pattern):
    schema = {"type": "array", "items": {"type": "string", "pattern": pattern}, "maxItems": 3}
    g = Grammar.from_json_schema(schema)
    v = jsonschema.Draft202012Validator(schema)
    rng = random.Random(5)
    n = 0
    for _ in range(40):
        out = random_walk(g, rng)  # asserts that no walk reaches a dead end
        if out is None:
            continue
        inst = json.loads(out)
        assert v.is_valid(inst), out
        n += len(inst)
    assert n > 10


@pytest.mark.parametrize("pattern,offset,message", [
    (r"(a(?=b))", 2, "outermost sequence"),
    (r"(?=a)*", 0, "quantified lookaround"),
    (r"a(?=b)(?<=c)", 6, "lookbehind after a lookahead"),
    (r"(?=^a)", 0, "anchor facing away"),
    (r"(?:x|(?=y))", 5, "outermost sequence"),
    (r"(?<=(?=a)b)c", 4, "outermost sequence"),
])
def test_unsupported_lookarounds_are_located_errors(pattern, offset, message):
    with pytest.raises(PatternError, match=message) as e:
        pattern_rx(pattern)
    assert e.value.offset == offset
    with pytest.raises(SchemaError, match=message) as e:
        Grammar.from_json_schema({"type": "string", "pattern": pattern})
    assert e.value.pointer == "/pattern"
