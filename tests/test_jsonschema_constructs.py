"""Property tests of the constructs of exact ``oneOf``, exclusion (``not``, ``if``),
``unevaluated*``, dynamic references, remote references and escape options, against the
``jsonschema`` validator on generated instances (``tests/schema_oracle.py``): nothing the
grammar accepts is invalid, and every valid instance is accepted in some property order.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("jsonschema")
referencing = pytest.importorskip("referencing")

from schema_oracle import disagreements

SETTINGS = settings(max_examples=30, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))
NAMES = st.sampled_from(["a", "b", "c"])
SCALARS = st.sampled_from([{"type": "integer"}, {"type": "string"}, {"type": "number"},
                           {"type": "string", "maxLength": 1}, {"minimum": 1}, {},
                           {"enum": [1, "a"]}, {"type": "array", "items": {"type": "integer"}}])


def agrees_or_refused(schema, keywords, n=250):
    """Agreement, or a SchemaError for a keyword in ``keywords`` (an exclusion that is not
    expressible) or an unsatisfiable schema."""
    from lexguide.errors import SchemaError

    try:
        assert_agrees(schema, n)
    except SchemaError as e:
        assert e.keyword in keywords or "Unsatisfiable" in str(e), e


def assert_agrees(schema, n=250, **kw):
    unsound, incomplete, n_valid = disagreements(schema, n, **kw)
    assert not unsound, ("accepted invalid", schema, unsound[:3])
    assert not incomplete, ("rejected valid", schema, incomplete[:3])
    return n_valid


@st.composite
def object_branch(draw):
    props = draw(st.dictionaries(NAMES, SCALARS, max_size=3))
    s = {"properties": props}
    if props and draw(st.booleans()):
        s["required"] = draw(st.lists(st.sampled_from(sorted(props)), unique=True, min_size=1))
    if draw(st.booleans()):
        s["additionalProperties"] = draw(st.sampled_from([False, {"type": "integer"}]))
    if draw(st.booleans()):
        s["type"] = "object"
    return s


@SETTINGS
@given(st.lists(object_branch(), min_size=2, max_size=3))
def test_one_of_objects(branches):
    agrees_or_refused({"oneOf": branches}, ("oneOf",))


@SETTINGS
@given(st.lists(st.sampled_from(["x", "y", "z", 1]), min_size=2, max_size=3, unique=True),
       st.booleans(), st.booleans())
def test_one_of_discriminators(tags, required, enum):
    def branch(i, tag):
        s = {"properties": {"kind": {"enum": [tag]} if enum else {"const": tag},
                            f"p{i}": {"type": "integer"}}}
        return {**s, "required": ["kind"]} if required else s

    assert_agrees({"type": "object", "oneOf": [branch(i, t) for i, t in enumerate(tags)]})


@SETTINGS
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 4)), min_size=2, max_size=3),
       st.sampled_from(["^a", "b$", "^ab", "a"]), st.sampled_from(["^b", "a$", "^a+$"]))
def test_one_of_ranges_patterns_and_merged_types(ranges, p1, p2):
    agrees_or_refused({"oneOf": [{"type": "number", "minimum": lo, "maximum": lo + w}
                                 for lo, w in ranges]}, ())
    assert_agrees({"oneOf": [{"type": "string", "pattern": p1}, {"type": "string", "pattern": p2}]})
    assert_agrees({"$defs": {"s": {"type": "string"}, "n": {"type": "integer"}},
                   "oneOf": [{"allOf": [{"$ref": "#/$defs/s"}, {"maxLength": 2}]},
                             {"$ref": "#/$defs/n"}, {"allOf": [{"type": "boolean"}]}]})


@SETTINGS
@given(SCALARS, SCALARS, st.integers(0, 2))
def test_exclusion_of_arrays_not_and_if(items, other, n):
    assert_agrees({"type": "array", "oneOf": [{"items": items}, {"maxItems": n}]})
    assert_agrees({"not": {"type": "array", "items": items}})
    assert_agrees({"type": "array", "contains": items, "maxContains": 1, "maxItems": 3})
    assert_agrees({"if": {"properties": {"a": items}, "required": ["a"]},
                   "then": {"properties": {"b": other}}, "else": {"maxProperties": n}})


@SETTINGS
@given(object_branch(), object_branch(), st.sampled_from([False, {"type": "string"}]))
def test_unevaluated_properties(a, b, u):
    for combinator in ("allOf", "anyOf", "oneOf"):
        agrees_or_refused({"type": "object", "properties": {"c": {}}, combinator: [a, b],
                           "unevaluatedProperties": u}, ("oneOf", "unevaluatedProperties"))
    assert_agrees({"$defs": {"base": a}, "$ref": "#/$defs/base", "unevaluatedProperties": u})


@SETTINGS
@given(st.integers(0, 2), SCALARS, st.sampled_from([False, {"type": "integer"}]))
def test_unevaluated_items(n, contains, u):
    assert_agrees({"type": "array", "prefixItems": [{}] * n, "unevaluatedItems": u})
    assert_agrees({"type": "array", "allOf": [{"prefixItems": [{"type": "string"}] * n}],
                   "unevaluatedItems": u})
    assert_agrees({"type": "array", "contains": contains, "unevaluatedItems": u})


def test_dynamic_and_remote_references():
    strict = {"$id": "https://example.test/strict", "$dynamicAnchor": "node",
              "$ref": "tree", "unevaluatedProperties": False,
              "$defs": {"tree": {"$id": "tree", "$dynamicAnchor": "node", "type": "object",
                                 "properties": {"a": {"type": "integer"}, "kids": {
                                     "type": "array", "items": {"$dynamicRef": "#node"}}}}}}
    assert assert_agrees(strict, 600) >= 3
    remote = {"$id": "https://example.test/r.json", "$defs": {"pos": {"minimum": 1}},
              "type": "object", "properties": {"a": {"$ref": "#/$defs/pos"}}}
    schema = {"properties": {"x": {"$ref": "https://example.test/r.json"}},
              "additionalProperties": {"$ref": "https://example.test/r.json#/$defs/pos"}}
    registry = referencing.Registry().with_resource(
        "https://example.test/r.json", referencing.Resource.from_contents(
            remote, default_specification=referencing.jsonschema.DRAFT202012))
    assert_agrees(schema, registry=registry, refs={"https://example.test/r.json": remote})


@SETTINGS
@given(st.sampled_from([None, 0, 1, 2]), st.booleans())
def test_escapes(max_length, general):
    opts = {"x-guidance": {"json_allow_general_unicode_escapes": True}} if general else {}
    s = {"type": "string"} if max_length is None else {"type": "string", "maxLength": max_length}
    assert_agrees({**opts, **s}, ensure_ascii=general)
    assert_agrees({**opts, "additionalProperties": s, "properties": {"é": {"type": "integer"}}},
                  ensure_ascii=general)
