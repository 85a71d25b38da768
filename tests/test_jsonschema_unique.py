"""``uniqueItems``: exact by construction for small finite item domains, else a clear error.

Oracle: the ``jsonschema`` package validates every array (up to one item longer than the
domain, spelled compactly) that the grammar is asked about.
"""

from __future__ import annotations

import itertools
import json
import warnings

import pytest

from lexguide import Grammar
from lexguide.errors import SchemaError
from lexguide.jsonschema.unique import MAX_UNIQUE_RULES, unique_rule_count

jsonschema = pytest.importorskip("jsonschema")


def _arrays(values: list, max_len: int):
    for n in range(max_len + 1):
        for combo in itertools.product(values, repeat=n):
            yield "[" + ",".join(json.dumps(v) for v in combo) + "]"


@pytest.mark.parametrize("schema, values", [
    ({"items": {"type": "integer", "minimum": 1, "maximum": 3}}, [1, 2, 3, 4]),
    ({"items": {"enum": ["a", "b", 1, 1.0, True]}, "minItems": 2}, ["a", "b", 1, 1.0, True, "c"]),
    ({"items": {"type": "boolean"}, "maxItems": 1}, [True, False]),
    ({"items": {"anyOf": [{"type": "null"}, {"const": "x"}, {"type": "integer", "minimum": 0,
                                                              "maximum": 1}]}},
     [None, "x", 0, 1, 2]),
    ({"items": {"type": "integer", "minimum": 0, "maximum": 9, "multipleOf": 4}}, [0, 4, 8, 2]),
    ({"items": {"$ref": "#/$defs/c"}, "$defs": {"c": {"enum": ["r", "g"]}}, "minItems": 1},
     ["r", "g", "b"]),
])
def test_unique_items_exact_against_jsonschema(schema, values):
    schema = {"type": "array", "uniqueItems": True, **schema}
    g = Grammar.from_json_schema(schema)
    assert g.notes == ()
    validator = jsonschema.Draft202012Validator(schema)
    n_checked = 0
    for text in _arrays(values, min(len(values), 4)):
        expected = validator.is_valid(json.loads(text))
        assert g.validate(text) == expected, text
        n_checked += expected
    assert n_checked > 0


def test_unique_items_through_allof_and_refs():
    g = Grammar.from_json_schema({"allOf": [{"type": "array", "uniqueItems": True},
                                            {"items": {"enum": [1, 2]}}]})
    assert g.validate("[1,2]") and g.validate("[2]") and not g.validate("[2,2]")


@pytest.mark.parametrize("items, why", [
    # bounded strings, integer ranges and bounded numbers are kept distinct by the matcher
    # (test_jsonschema_unique_bounded.py, test_jsonschema_unique_counted.py)
    ({"anyOf": [{"type": "string", "maxLength": 3}, {"type": "integer"}]}, "maxLength"),
    ({"type": "integer", "maximum": 9, "not": {"multipleOf": 2}}, "not"),
    ({"type": "integer", "minimum": 0, "maximum": 2_000_000}, "2000001 numbers"),
    ({"type": "number", "minimum": 0, "maximum": 100, "multipleOf": 0.0001}, "1000001 numbers"),
    ({"type": "object", "maxProperties": 2, "additionalProperties": False}, "fresh key"),
    ({"type": "object", "additionalProperties": False}, "last declared property"),
])
def test_not_enforceable_is_a_clear_error_and_lenient_notes_it(items, why):
    schema = {"type": "object", "properties": {
        "tags": {"type": "array", "items": items, "uniqueItems": True}}}
    with pytest.raises(SchemaError) as e:
        Grammar.from_json_schema(schema)
    assert e.value.pointer == "/properties/tags/uniqueItems" and e.value.keyword == "uniqueItems"
    assert why in str(e.value) and "lenient=True" in str(e.value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = Grammar.from_json_schema(schema, lenient=True)
    [note] = g.notes
    assert note.pointer == "/properties/tags/uniqueItems" and note.keyword == "uniqueItems"
    assert why in note.message


def test_small_max_items_makes_a_larger_domain_enforceable():
    g = Grammar.from_json_schema({"type": "array", "uniqueItems": True, "maxItems": 3,
                                  "items": {"type": "integer", "minimum": 0, "maximum": 40}})
    assert g.validate("[0,40,7]") and not g.validate("[7,0,7]") and not g.validate("[1,2,3,4]")


def test_rule_count_bound():
    assert unique_rule_count(3, 0, None) == 3 * 4 + 8  # (set, next value) pairs + one end per set
    assert unique_rule_count(12, 0, None) <= MAX_UNIQUE_RULES
    assert unique_rule_count(20, 0, None) > MAX_UNIQUE_RULES
    assert unique_rule_count(20, 0, 2) <= MAX_UNIQUE_RULES


def test_unique_items_false_or_at_most_one_item_needs_nothing():
    assert Grammar.from_json_schema({"type": "array", "uniqueItems": False}).validate("[1,1]")
    g = Grammar.from_json_schema({"type": "array", "uniqueItems": True, "maxItems": 1})
    assert g.validate('["x"]') and g.notes == ()
