"""One walk of a schema's JSON finds both its depth and whether it has id/anchor keywords
(json_value_scan), giving what a depth check and a plain search for the keys give; escape
policies are one instance each."""

from __future__ import annotations

import pytest

from lexguide import Grammar
from lexguide.jsonschema.escapes import DEFAULT, escapes_from_options
from lexguide.jsonschema.refs import anchor_keys, id_keyword
from lexguide.limits import json_value_scan, json_value_too_deep

_KEYS = anchor_keys(id_keyword(2020))


def _has_key_reference(value, keys) -> bool:
    """Brute force: whether some object anywhere in ``value`` has one of ``keys``."""
    if isinstance(value, dict):
        return bool(keys & value.keys()) or any(_has_key_reference(v, keys) for v in value.values())
    if isinstance(value, list):
        return any(_has_key_reference(v, keys) for v in value)
    return False


@pytest.mark.parametrize("value, limit", [
    ({"a": [{"b": {"$anchor": "x"}}]}, 10), ([1, {"$id": "u"}], 10), ({"id": 1}, 10),
    ({"enum": ["$id", "$anchor"], "const": "$id"}, 10), ({"a": {"b": [1, 2, {"c": None}]}}, 10),
    ("$id", 10), ({"a": {"b": {"$id": "u"}}}, 2), ([[[{"$anchor": "a"}]]], 3), ({}, 0),
])
def test_scan_is_the_two_walks(value, limit):
    path, found = json_value_scan(value, _KEYS, limit)
    assert path == json_value_too_deep(value, limit)
    if path is None:
        assert found == _has_key_reference(value, _KEYS)


def test_draft4_ids_are_found_by_their_keyword():
    assert anchor_keys(id_keyword(4)) & {"id"} and "$id" not in anchor_keys(id_keyword(4))


def test_schema_with_ids_compiles_as_before():
    schema = {"$id": "http://example.com/root.json", "type": "object",
              "properties": {"a": {"$ref": "item.json"}},
              "$defs": {"item": {"$id": "item.json", "type": "integer"}}}
    assert Grammar.from_json_schema(schema).validate('{"a": 3}')
    assert not Grammar.from_json_schema(schema).validate('{"a": "x"}')
    draft4 = {"$schema": "http://json-schema.org/draft-04/schema#", "id": "http://e.com/r.json",
              "properties": {"a": {"$ref": "#/definitions/n"}},
              "definitions": {"n": {"id": "#num", "type": "number"}}}
    assert Grammar.from_json_schema(draft4).validate('{"a": 1.5}')


def test_escape_policies_are_interned():
    assert escapes_from_options(None, None) is DEFAULT
    a = escapes_from_options("nu", True)
    assert escapes_from_options("un", True) is a and a != DEFAULT
    assert hash(a) == hash(escapes_from_options("nu", True))


def test_reference_resolution_is_per_text_and_base():
    from lexguide.jsonschema.refs import RefIndex

    root = {"$defs": {"a": {"type": "integer"},
                      "inner": {"$id": "http://e.com/inner.json",
                                "$defs": {"a": {"type": "string"}},
                                "properties": {"x": {"$ref": "#/$defs/a"}}}},
            "properties": {"x": {"$ref": "#/$defs/a"}}}
    index = RefIndex(root)
    assert index.resolve("#/$defs/a", "/properties/x") == "/$defs/a"
    assert index.resolve("#/$defs/a", "/$defs/inner/properties/x") == "/$defs/inner/$defs/a"
    assert index.resolve("#/$defs/a", "/properties/x") == "/$defs/a"  # answered again
    g = Grammar.from_json_schema({**root, "type": "object", "required": ["x"]})
    assert g.validate('{"x": 1}') and not g.validate('{"x": "s"}')
