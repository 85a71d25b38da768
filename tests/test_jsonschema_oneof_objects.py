"""Exclusions of objects that restrict their other members ("some additional member").

``oneOf`` between an open object and one with ``additionalProperties: false`` or a schema
(with or without ``patternProperties``), ``not`` of such an object, and ``if`` with one as the
condition compile exactly: ``Grammar.validate`` agrees with the ``jsonschema`` package (Draft
2020-12) on generated objects with and without additional members, and random constrained walks
produce only valid instances. Shapes still outside the construct keep a ``SchemaError`` that
names both branches.
"""

from __future__ import annotations

import json
import random

import pytest

jsonschema = pytest.importorskip("jsonschema")

from lexguide.engine.grammar import Grammar
from lexguide.errors import SchemaError

from test_jsonschema_walks import check_walks

INT = {"type": "integer"}
STR = {"type": "string"}
OPEN_A = {"type": "object", "properties": {"a": INT}}
CLOSED_A = {"type": "object", "properties": {"a": INT}, "additionalProperties": False}

SCHEMAS = {
    "open_vs_closed": {"oneOf": [OPEN_A, CLOSED_A]},
    "closed_vs_open": {"oneOf": [CLOSED_A, OPEN_A]},
    "open_vs_additional_schema": {"oneOf": [
        OPEN_A, {"type": "object", "properties": {"a": INT}, "additionalProperties": STR}]},
    "open_vs_closed_patterns": {"oneOf": [
        {"type": "object", "properties": {"a": STR}},
        {"type": "object", "properties": {"a": STR}, "patternProperties": {"^x_": INT},
         "additionalProperties": False}]},
    "open_vs_patterns_additional_schema": {"oneOf": [
        {"type": "object"},
        {"type": "object", "patternProperties": {"^x_": INT, "_1$": {"minimum": 0}},
         "additionalProperties": {"type": "null"}}]},
    "patterns_vs_other_patterns": {"oneOf": [
        {"type": "object", "patternProperties": {"^x_": INT}},
        {"type": "object", "patternProperties": {"_1$": INT}, "additionalProperties": False}]},
    "closed_patterns_vs_closed": {"oneOf": [
        {"type": "object", "patternProperties": {"^x_": {}}, "additionalProperties": False},
        {"type": "object", "properties": {"a": INT}, "additionalProperties": False}]},
    "patterns_vs_additional_schema": {"oneOf": [
        {"type": "object", "patternProperties": {"^x_": STR}, "additionalProperties": INT},
        {"type": "object", "additionalProperties": {"minimum": 0}}]},
    "three_branches": {"oneOf": [
        {"type": "object"}, {"type": "object", "additionalProperties": INT},
        {"type": "object", "additionalProperties": STR}]},
    "four_branches_in_array": {"type": "array", "items": {"oneOf": [
        {"type": "object", "properties": {"a": INT}},
        {"type": "object", "properties": {"a": INT}, "additionalProperties": INT},
        {"type": "object", "patternProperties": {"^x_": STR}, "additionalProperties": False},
        {"type": "object", "additionalProperties": {"type": ["string", "null"]}}]}},
    "property_names": {"oneOf": [
        {"type": "object", "properties": {"a": INT}},
        {"type": "object", "propertyNames": {"maxLength": 1}, "additionalProperties": INT}]},
    "not_property_names": {"not": {"type": "object", "propertyNames": {"pattern": "^[a-z]$"}}},
    "if_property_names": {"type": "object", "if": {"propertyNames": {"maxLength": 1}},
                          "then": {"maxProperties": 1}, "else": {"required": ["a"]}},
    "not_of_one_of": {"not": {"oneOf": [OPEN_A, CLOSED_A]}},
    "one_of_of_one_of": {"oneOf": [{"type": "object"}, {"oneOf": [OPEN_A, CLOSED_A]}]},
    "if_one_of": {"if": {"oneOf": [OPEN_A, CLOSED_A]}, "then": {"maxProperties": 1},
                  "else": {"required": ["a"]}},
    "required_members": {"oneOf": [
        {"type": "object", "properties": {"a": INT, "b": STR}, "required": ["a"]},
        {"type": "object", "properties": {"a": INT}, "required": ["a"],
         "additionalProperties": False}]},
    "different_names": {"oneOf": [
        {"type": "object", "properties": {"a": STR}, "additionalProperties": INT},
        {"type": "object", "properties": {"b": INT}, "additionalProperties": False}]},
    "counted": {"oneOf": [
        {"type": "object", "maxProperties": 2},
        {"type": "object", "properties": {"a": INT}, "additionalProperties": False,
         "minProperties": 1}]},
    "in_array": {"type": "array", "maxItems": 3, "items": {"oneOf": [OPEN_A, CLOSED_A]}},
    "nested_member": {"type": "object", "properties": {"v": {"oneOf": [
        {"type": "object"}, {"type": "object", "additionalProperties": INT}]}}},
    "not_closed": {"not": CLOSED_A},
    "not_in_array": {"type": "array", "maxItems": 3, "items": {"not": CLOSED_A}},
    "if_in_array": {"type": "array", "maxItems": 3, "items": {
        "if": CLOSED_A, "then": {"maxProperties": 0}, "else": {"type": "object"}}},
    "not_closed_patterns": {"not": {"type": "object", "properties": {"a": INT},
                                    "patternProperties": {"^x_": STR},
                                    "additionalProperties": {"type": "boolean"}}},
    "if_closed": {"if": CLOSED_A, "then": {"properties": {"a": {"minimum": 5}}},
                  "else": {"minProperties": 2}},
    "if_closed_no_else": {"type": "object", "if": CLOSED_A, "then": {"required": ["a"]}},
    "allof_with_named": {"allOf": [{"oneOf": [OPEN_A, CLOSED_A]},
                                   {"properties": {"z": STR}}]},
}

# declared members come first, in the order of "properties": keys are written in this order
KEYS = ["a", "b", "z", "x_1", "x_2", "y_1", "c", "é"]
LEAVES = [0, 7, -3, 1.5, "s", "", True, None]


def _value(rng: random.Random, depth: int = 0) -> object:
    r = rng.random()
    if depth < 2 and r < 0.15:
        return _object(rng, depth + 1)
    if depth < 2 and r < 0.22:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    return rng.choice(LEAVES)


def _object(rng: random.Random, depth: int = 0) -> dict:
    keys = sorted(rng.sample(KEYS, rng.randrange(4)), key=KEYS.index)
    return {k: _value(rng, depth) for k in keys}


def _instances(name: str, n: int) -> list[object]:
    rng = random.Random(name)
    out: list[object] = [{}, {"a": 1}, {"a": "x"}, {"a": 1, "b": 2}, {"b": "s"}, {"x_1": 3},
                         {"x_1": "s"}, {"y_1": -1}, {"c": None}, {"a": 1, "c": None}, [], 1]
    for _ in range(n):
        if name.endswith("in_array"):
            out.append([_object(rng) for _ in range(rng.randrange(4))])
        elif name == "nested_member":
            out.append({"v": _object(rng)} if rng.random() < 0.9 else _object(rng))
        else:
            out.append(_object(rng))
    return out


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_validate_agrees_with_jsonschema(name: str) -> None:
    schema = SCHEMAS[name]
    g = Grammar.from_json_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    n_valid = n_invalid = 0
    for x in _instances(name, 300):
        want = validator.is_valid(x)
        assert g.validate(json.dumps(x, ensure_ascii=False)) == want, (x, want)
        n_valid += want
        n_invalid += not want
    assert n_valid >= 10 and n_invalid >= 10  # both sides of the exclusion were exercised


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_walks_are_valid(name: str) -> None:
    assert check_walks(SCHEMAS[name], 40, seed=len(name)) >= 10


def test_open_vs_closed_needs_an_additional_member() -> None:
    g = Grammar.from_json_schema(SCHEMAS["open_vs_closed"])
    assert not g.validate('{"a": 1}')  # both branches match
    assert g.validate('{"a": 1, "b": 2}')
    assert g.validate('{"b": {}}')
    assert not g.validate("{}")


def test_witness_keys_are_fixed_by_the_excluded_branch() -> None:
    """A member declared elsewhere (allOf) still counts as additional to the closed branch."""
    g = Grammar.from_json_schema(SCHEMAS["allof_with_named"])
    assert g.validate('{"z": "s"}')
    assert not g.validate('{"a": 1}')
    assert not g.validate('{"z": 1}')


def test_exclusion_beyond_the_intersector_names_both_branches() -> None:
    """Excluding a branch that needs a member outside exact-name patterns from an object with
    patternProperties and a restricted additionalProperties has no IR; the error says so."""
    schema = {"oneOf": [
        {"type": "object", "patternProperties": {"^x_": INT}, "additionalProperties": STR},
        {"oneOf": [{"type": "object"}, {"type": "object", "properties": {"a": INT},
                                        "additionalProperties": False}]}]}
    with pytest.raises(SchemaError, match="oneOf branches 0 and 1 overlap") as e:
        Grammar.from_json_schema(schema)
    assert "patternProperties" in str(e.value)


def test_too_many_witnesses_are_refused() -> None:
    """Five overlapping branches would need four different additional members at once."""
    schema = {"oneOf": [{"type": "object"}] + [
        {"type": "object", "additionalProperties": {"type": t}}
        for t in ("integer", "string", "boolean", "null")]}
    with pytest.raises(SchemaError, match="oneOf branches") as e:
        Grammar.from_json_schema(schema)
    assert "additional members required at once" in str(e.value)
