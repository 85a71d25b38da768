"""Paths of the JSON Schema front end that serve several callers: the typed node of each
``type`` name, a schema object's one part, the reason of a union with no satisfiable branch
(``any_of`` and the intersector's product of unions), and the id/anchor look-up of a value
that was not scanned before (at any depth)."""

from __future__ import annotations

import pytest

from lexguide import Grammar
from lexguide.jsonschema.refs import _has_key, anchor_keys, id_keyword
from lexguide.jsonschema.schema import (
    AnyOfSchema,
    BoolSchema,
    Intersector,
    NullSchema,
    NumberSchema,
    StringSchema,
    Unsat,
    any_of,
)
from lexguide.limits import MAX_JSON_DEPTH

_NO_BRANCH = "no branch of anyOf is compatible with the other constraints"


@pytest.mark.parametrize("schema, good, bad", [
    ({"type": "null"}, "null", "1"),
    ({"type": "boolean"}, "true", "null"),
    ({"type": "integer", "minimum": 2}, "3", "1"),
    ({"type": ["integer", "number"], "minimum": 2}, "2.5", "1.5"),
    ({"type": ["string", "null"], "maxLength": 1}, '"a"', '"ab"'),
    ({"type": ["array", "object"], "minItems": 1}, "{}", "[]"),
])
def test_each_type_name_gives_its_node(schema, good, bad):
    g = Grammar.from_json_schema(schema)
    assert g.validate(good) and not g.validate(bad)


def test_one_part_schemas():
    assert Grammar.from_json_schema({"$defs": {"n": {"type": "null"}}, "$ref": "#/$defs/n"}
                                    ).validate("null")
    assert Grammar.from_json_schema({"minimum": 1}).validate('"x"')


def _meet(a, b):
    return Intersector(lambda key: None, lambda s, v: True)(a, b)


def test_union_reason_of_one_unsatisfiable_branch_is_that_branch_s():
    assert any_of([Unsat("only")], "default").reason == "only"
    assert any_of([Unsat("a"), Unsat("b")], "default").reason == "default"
    assert any_of([], "default").reason == "default"
    met = _meet(AnyOfSchema((BoolSchema(True),)), NullSchema())
    assert isinstance(met, Unsat) and met.reason == "incompatible types boolean and null"
    met = _meet(AnyOfSchema((NullSchema(), BoolSchema())), StringSchema())
    assert isinstance(met, Unsat) and met.reason == _NO_BRANCH
    met = _meet(AnyOfSchema((NullSchema(), StringSchema(const="x"))), StringSchema(const="y"))
    assert isinstance(met, Unsat) and met.reason == _NO_BRANCH
    met = _meet(AnyOfSchema((NullSchema(), NumberSchema(False))), NumberSchema(True))
    assert isinstance(met, NumberSchema) and met.integer


def test_has_key_looks_at_any_depth():
    keys = anchor_keys(id_keyword(2020))
    deep: dict = {}
    node = deep
    for _ in range(MAX_JSON_DEPTH + 5):
        node["a"] = {}
        node = node["a"]
    assert not _has_key(deep, keys)
    node["$anchor"] = "x"
    assert _has_key(deep, keys)
