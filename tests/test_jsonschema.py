"""JSON Schema → grammar: JSON Schema 2020-12 semantics, checked through Grammar.validate."""

from __future__ import annotations

import json
import random
import re
import warnings
from decimal import Decimal

import pytest
from corpora import LLAMA_CPP

from lexguide.engine.grammar import Grammar
from lexguide.errors import SchemaError
from lexguide.jsonschema import compile_json_schema
from lexguide.jsonschema.numeric import number_rx
from lexguide.jsonschema.pattern import PatternError, pattern_rx
from lexguide.regex import nodes as rx



def G(schema, **opts) -> Grammar:
    return Grammar.from_json_schema(schema, **opts)


def check(schema, good=(), bad=(), **opts) -> None:
    g = G(schema, **opts)
    for s in good:
        assert g.validate(s), f"should accept {s!r}"
    for s in bad:
        assert not g.validate(s), f"should reject {s!r}"


# -- llguidance's own cases ------------------------------------------------------------------
def _llg_cases():
    path = LLAMA_CPP / "llguidance-cases.jsonl"
    recs = [json.loads(line) for line in path.open()]
    return [pytest.param(r, id=f"{r['group']}:{r['name']}:{r['line']}") for r in recs
            if r.get("schema") is not None]


@pytest.mark.parametrize("case", _llg_cases())
def test_llguidance_cases(case):
    check(case["schema"], case["pass"], case["fail"])


# -- worked examples of the spec (§11) -------------------------------------------------------
def test_spec_object_order_and_extras():
    s1 = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
          "required": ["b"]}
    check(s1, ['{"b":"x"}', '{"a":1,"b":"x"}', '{"b":"x","c":null}', '{ "a" : 1 , "b" : "x" }'],
          ['{"b":"x","a":1}', '{"c":1,"b":"x"}', ' {"b":"x"}', '{"b":"x"} ', '{"a":1}'])


def test_spec_additional_false_and_required_extra():
    check({"type": "object", "properties": {"a": {"type": "integer"}},
           "additionalProperties": False}, ["{}", '{"a":1}'], ['{"b":1}'])
    check({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["z"]},
          ['{"z":true}', '{"a":1,"z":true}'], ['{"a":1}'])
    with pytest.raises(SchemaError, match="unsatisfiable"):
        G({"type": "object", "properties": {"a": {}}, "required": ["z"],
           "additionalProperties": False})


def test_spec_arrays():
    check({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
          ["[1]", "[1,2]", "[ 1 , 2 ]"], ["[]", "[1,2,3]"])
    check({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
           "items": False}, ["[]", '["a"]', '["a",1]'], ['["a",1,2]', "[1]"])
    check({"type": "array", "items": [{"type": "string"}], "additionalItems": {"type": "integer"}},
          ['["a",1,2]'], ['["a","b"]'])


def test_spec_numbers():
    check({"type": "number", "minimum": -1.5, "maximum": 2.25},
          ["-1.5", "2.25", "0", "1.125", "-0.5"], ["-1.6", "2.251", "1e0"])
    check({"type": "integer", "minimum": -3, "exclusiveMaximum": 10}, ["-3", "9"], ["-4", "10"])
    check({"type": "integer", "multipleOf": 3}, ["0", "3", "-6", "999"], ["7", "1000"])
    check({"type": "number", "multipleOf": 0.1, "minimum": 0, "maximum": 1},
          ["0.3", "1", "0"], ["0.35", "1.1"])
    check({"type": "number", "exclusiveMinimum": 0, "maximum": 1}, ["0.0001", "1.0"], ["0", "1.5"])
    check({"type": "number", "maximum": 0}, ["-0.5", "0"], ["-0"])
    check({"minimum": 5}, ['"s"', "null", "5"], ["4"])
    check({"type": "integer", "minimum": 1.5}, ["2"], ["1"])


def test_spec_strings():
    check({"type": "string", "minLength": 2, "maxLength": 3},
          ['"ab"', '"\\n\\n"', '"éé"', '"\\u0001x"'], ['"a"', '"abcd"', '"é"'])
    check({"type": "string", "format": "date", "pattern": "^2024"},
          ['"2024-01-01"'], ['"2023-01-01"', '"2024-02-30"'])
    check({"type": "string"}, ['"\\""', '"é"', '"\\u001f"', '"\\u001F"', '"\\u007f"'],
          ['"\\/"', '"\\u0041"', '"\x7f"', '"\n"', '"\\U0041"'])
    check({"pattern": "a\\d"}, ['"xa1y"', '"a1"'], ['"a"', '"ab"'])
    check({"pattern": "^a\\d$"}, ['"a1"'], ['"xa1"', '"a12"'])


def test_spec_enum_const_union():
    check({"enum": ["x", 1, None, True, [1], {"k": 2}]},
          ['"x"', "1", "null", "true", "[1]", "[ 1 ]", '{"k": 2}'], ["1.0", "false", '"y"'])
    check({"type": ["string", "null"]}, ['"a"', "null"], ["1"])
    check({"const": {"a": 1, "b": "\n"}}, ['{"a":1,"b":"\\n"}', '{"a":1,"b":"\\u000a"}'],
          ['{"b":"\\n","a":1}', '{"a":1}'])
    with pytest.raises(SchemaError):
        G({"enum": []})


def test_whitespace_options():
    schema = {"type": "array", "items": {"type": "integer"}}
    check(schema, ["[1,2]", "[1, 2]", "[\n1\n]"], whitespace="flexible")
    check(schema, ["[1,2]"], ["[1, 2]", "[ 1,2]"], whitespace="compact")
    check({"x-guidance": {"whitespace_flexible": False}, **schema}, ["[1,2]"], ["[1, 2]"])
    check(schema, ["[1, 2]"], ["[1,2]"], item_separator=", ", whitespace="compact")
    check({"type": "object"}, ['{"a": 1}'], ['{"a":1}'], key_separator=": ", whitespace="compact")
    check({"x-guidance": {"item_separator": ", ", "key_separator": ": ",
                          "whitespace_flexible": False}, "type": "object"},
          ['{"a": 1, "b": 2}'], ['{"a":1,"b":2}'])
    with pytest.raises(SchemaError, match="unknown field"):
        G({"x-guidance": {"foo": 1}})
    # whitespace_pattern: at most one match at each place JSON allows whitespace
    check({"x-guidance": {"whitespace_pattern": "[ ]{0,1}"}, "type": "array"},
          ["[1, 2]", "[ 1 , 2 ]", "[1,2]", "[ ]", "[]"], ["[1,  2]", "[  ]", " []", "[1] "])


def test_default_whitespace_is_bounded():
    schema = {"type": "object",
              "properties": {"a": {"type": "array", "items": {"type": "integer"}}}}
    data = {"a": [1, 2]}
    layouts = [json.dumps(data), json.dumps(data, separators=(",", ":")),
               json.dumps(data, indent=2), json.dumps(data, indent="\t"), '{"a" : [1]}',
               '{\r\n  "a":[]}', "{ }", json.dumps({"a": [1]}, indent=12)]
    runs = ['{"a"  :[1]}', '{\n\n"a":[1]}', '{"a":[1],\n \n"b":2}', " {}", "{}\n",
            "{\n" + " " * 25 + '"a":[]}', '{"a":[1]\t}']
    check(schema, layouts, runs)
    check(schema, layouts + runs[:3] + runs[5:], runs[3:5], whitespace="flexible")
    check(schema, layouts[1:2], layouts[0:1] + layouts[2:], whitespace_flexible=False)
    check(schema, runs[:3], whitespace_flexible=True, whitespace="compact")  # it wins
    check(schema, ['{"a":[1,\t2]}'], ['{"a": [1]}'], whitespace_pattern="\t?")
    # the schema's own x-guidance wins over keyword options
    check({"x-guidance": {"whitespace_flexible": False}, **schema}, ['{"a":[1]}'],
          ['{"a": [1]}'], whitespace="flexible")
    check({"x-guidance": {"whitespace_flexible": True}, **schema}, runs[:1])
    with pytest.raises(ValueError, match="whitespace must be one of"):
        G(schema, whitespace="loose")
    # Lark %json keeps llguidance's default (any JSON whitespace) unless x-guidance says otherwise
    lark = Grammar.from_lark('%llguidance {}\nstart: %json {"type": "array"}')
    assert lark.validate("[\n\n\n1]")


def test_indent_is_exact_json_dumps():
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {}},
                                               "b": {"type": "object"}}}
    g = G(schema, indent=2)
    samples = [{"a": [1, {"x": [None, {}]}, []], "b": {"k": {"z": [1, 2]}}}, {"a": []}, {},
               {"b": {}}, {"a": [[[[]]]], "extra": "s"}]
    for data in samples:
        assert g.validate(json.dumps(data, indent=2)), data
        assert not g.validate(json.dumps(data)) or data == {}, data
        assert not g.validate(json.dumps(data, indent=4)) or data in ({}, {"a": []}, {"b": {}})
    assert G({"type": "array"}, indent="\t").validate(json.dumps([1, [2]], indent="\t"))
    shallow = G({}, indent=2, max_indent_depth=3)  # deeper levels are written compactly
    assert shallow.validate('[\n  [\n    [\n      [[[1]]]\n    ]\n  ]\n]')
    assert not shallow.validate(json.dumps([[[[[1]]]]], indent=2))


def test_additional_keys_exclude_declared_names():
    schema = {"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
    check(schema, ['{"a":1,"b":2}', '{"b":2,"c":"x"}', '{"c":1,"d":2}'],
          ['{"b":1,"a":2}', '{"a":1,"a":2}', '{"c":1,"a":2}', '{"b":1,"\\u0061":2}'])


def test_pattern_properties_overlapping_and_property_names():
    schema = {"type": "object", "patternProperties": {"^x": {"type": "integer"},
                                                       "y$": {"minimum": 5}},
              "additionalProperties": {"type": "string"}}
    check(schema, ['{"xa":1,"ay":7,"xy":5,"q":"s"}'],
          ['{"xa":"s"}', '{"xy":4}', '{"xy":"s"}', '{"q":1}', '{"ay":4}'])
    check({"type": "object", "propertyNames": {"maxLength": 2}, "properties": {"long": {}}},
          ['{"ab":1}', "{}"], ['{"abc":1}', '{"long":1}'])


def test_min_max_properties_counting():
    schema = {"type": "object", "properties": {"a": {}, "b": {}, "c": {}},
              "minProperties": 1, "maxProperties": 2}
    check(schema, ['{"a":1}', '{"a":1,"c":2}', '{"b":1,"z":2}', '{"z":1,"y":2}'],
          ["{}", '{"a":1,"b":2,"c":3}', '{"a":1,"z":2,"y":3}'])
    check({"type": "object", "minProperties": 2}, ['{"a":1,"b":2}', '{"a":1,"b":2,"c":3}'],
          ["{}", '{"a":1}'])


def test_refs_recursion_and_drafts():
    linked = {"$defs": {"n": {"type": "object", "properties": {
        "v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/n"}, {"type": "null"}]}},
        "required": ["v", "next"], "additionalProperties": False}}, "$ref": "#/$defs/n"}
    check(linked, ['{"v":1,"next":{"v":2,"next":null}}'], ['{"v":1,"next":{"v":2}}'])
    check({"properties": {"a": {"$ref": "#"}}, "type": "object"}, ['{"a":{"a":{}}}'], ['{"a":1}'])
    check({"$id": "http://x.test/root", "$defs": {"i": {"$anchor": "num", "type": "integer"}},
           "items": {"$ref": "#num"}, "type": "array"}, ["[1]"], ['["a"]'])
    check({"definitions": {"s": {"type": "string"}}, "$ref": "#/definitions/s", "maxLength": 1,
           "$schema": "http://json-schema.org/draft-07/schema#"}, ['"abc"'], ["1"])
    check({"$schema": "http://json-schema.org/draft-04/schema#", "type": "number",
           "minimum": 1, "exclusiveMinimum": True}, ["1.5"], ["1"])
    with pytest.raises(SchemaError) as e:
        G({"$ref": "http://example.com/other.json"})
    assert e.value.keyword == "$ref"
    with pytest.raises(SchemaError, match="circular"):
        G({"$defs": {"a": {"$ref": "#/$defs/b", "type": "object"},
                     "b": {"$ref": "#/$defs/a", "minProperties": 1}}, "$ref": "#/$defs/a"})


def test_all_of_merging_and_order():
    after = {"type": "object", "properties": {"a": {"type": "integer"}},
             "allOf": [{"properties": {"b": {"type": "integer"}}}]}
    before = {"type": "object", "allOf": [{"properties": {"b": {"type": "integer"}}}],
              "properties": {"a": {"type": "integer"}}}
    check(after, ['{"a":1,"b":2}'], ['{"b":2,"a":1}'])
    check(before, ['{"b":2,"a":1}'], ['{"a":1,"b":2}'])
    check({"allOf": [{"type": "integer", "minimum": 2}, {"maximum": 4, "multipleOf": 2}]},
          ["2", "4"], ["3", "6", "0"])
    check({"allOf": [{"type": "string", "minLength": 2}, {"maxLength": 2, "pattern": "^a"}]},
          ['"ab"'], ['"ba"', '"abc"'])
    check({"anyOf": [{"type": "integer"}, {"type": "string"}], "minimum": 3},
          ["3", '"x"'], ["2"])


def test_one_of_disjointness():
    check({"oneOf": [{"type": "string"}, {"type": "integer"}]}, ['"a"', "1"], ["null"])
    tagged = {"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
         "required": ["kind"]},
        {"type": "object", "properties": {"kind": {"const": "b"}}, "required": ["kind"]}]}
    check(tagged, ['{"kind":"a","x":1}', '{"kind":"b"}'], ['{"kind":"c"}'])
    overlapping = {"oneOf": [{"type": "integer"}, {"minimum": 2}]}
    # exact: exactly one branch holds (integers < 2, or non-integers >= 2, or other types)
    check(overlapping, ["1", "-5", "2.5", '"s"', "null"], ["2", "7", "1.5"])
    check(overlapping, ["1", "2", '"s"'], coerce_one_of=True)
    check({"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
          ['{"a":1}', '{"b":1}'], ['{"a":1,"b":2}', "{}"])
    # exclusions relative to the other branch: item schemas, additionalProperties: false
    check({"type": "array", "oneOf": [{"items": {"type": "string"}}, {"maxItems": 1}]},
          ['["a","b"]', "[1]", "[]"[:0] + '[null]'], ["[]", '["a"]', '["a",1]'])
    check({"type": "object", "oneOf": [
        {"properties": {"key": {"type": "string"}}, "additionalProperties": False},
        {"properties": {"keys": {"type": "array"}}, "additionalProperties": False}]},
          ['{"key":"a"}', '{"keys":[]}'], ["{}", '{"key":"a","keys":[]}', '{"x":1}'])
    check({"oneOf": [{"properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}},
                     {"properties": {"kind": {"const": "b"}}}]},  # discriminator, not required
          ['{"kind":"a","x":1}', '{"kind":"b","x":"s"}', '{"x":"s"}'],
          ["{}", '{"x":1}', "null", '{"kind":"c"}'])
    check({"oneOf": [{"type": "string", "pattern": "^a"}, {"type": "string", "pattern": "^b"}]},
          ['"ab"', '"ba"'], ['"c"'])
    # an open object against one restricting its other members: "some additional member"
    check({"type": "object", "oneOf": [{"additionalProperties": {"type": "string"}},
                                       {"required": ["a"]}]},
          ['{"a":1}', '{"x":"s"}', "{}", '{"a":1,"x":"s"}'], ['{"a":"s"}', '{"x":1}'])
    check({"type": "object", "oneOf": [
        {"patternProperties": {"^p": {"type": "integer"}}},
        {"patternProperties": {"^q": {"type": "integer"}}, "additionalProperties": False}]},
          ['{"x":1}', '{"q1":"s"}', '{"p1":1}'], ['{"p1":"s"}', '{"q1":1}', "{}"])
    check({"type": "object", "oneOf": [{"patternProperties": {"^p": {"type": "integer"}}},
                                       {"propertyNames": {"maxLength": 2}}]},
          ['{"abc":1}', '{"p1":"s"}'], ['{"q1":1}', "{}", '{"p12":"s"}'])
    inexpressible = {"type": "array", "oneOf": [
        {"prefixItems": [{"type": "integer"}]},
        {"prefixItems": [{}, {}], "items": {"type": "string"}}]}
    with pytest.raises(SchemaError) as e:
        G(inexpressible)
    assert e.value.keyword == "oneOf" and e.value.pointer == "/oneOf"
    assert "branches 0 and 1" in str(e.value) and "prefixItems" in str(e.value)
    for relax in ({"lenient": True}, {"coerce_one_of": True}):
        g = G(inexpressible, **relax)
        assert g.validate("[1]")  # both branches match: anyOf semantics, noted
        assert [(n.pointer, n.keyword) for n in g.notes] == [("/oneOf", "oneOf")]
        assert "compiled as anyOf" in g.notes[0].message


def test_unsupported_keywords_error_with_pointer_or_note_when_lenient():
    tail = {"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "string"}}
    with pytest.raises(SchemaError) as e:
        G({"type": "object", "properties": {"a": {"type": "array", "not": tail}}})
    assert e.value.keyword == "not" and e.value.pointer == "/properties/a/not"
    assert "lenient=True" in str(e.value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # lenient reports on the result, never as a warning
        g = G({"type": "array", "not": tail}, lenient=True)
    assert g.validate('[1,"s"]') and not g.validate("1")
    assert [(n.pointer, n.keyword) for n in g.notes] == [("/not", "not")]
    assert "ignored: lenient" in g.notes[0].message
    assert G({"type": "array", "items": {"type": "string"}}).notes == ()
    with pytest.raises(SchemaError, match="schema must be an object or boolean"):
        G({"properties": {"a": 3}})
    with pytest.raises(SchemaError, match="Invalid type"):
        G({"type": "float"})
    with pytest.raises(SchemaError, match="lookaround"):
        G({"pattern": "(a(?=b))"})


def test_unknown_formats_are_annotations_listed_on_the_result():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = G({"type": "object", "properties": {"c": {"type": "string", "format": "color"}}})
    assert g.validate('{"c":"anything at all"}') and not g.validate('{"c":1}')
    assert [(n.pointer, n.keyword) for n in g.notes] == [("/properties/c/format", "format")]
    assert "'color'" in g.notes[0].message and "annotation" in g.notes[0].message
    with pytest.raises(SchemaError, match="Unknown format") as e:
        G({"type": "string", "format": "no-such-format"}, strict_formats=True)
    assert e.value.pointer == "/format" and e.value.keyword == "format"
    g = G({"type": "string", "format": "no-such-format"}, strict_formats=True, lenient=True)
    assert g.validate('"x"') and g.notes[0].keyword == "format"
    known = G({"type": "string", "format": "date"})  # known formats stay enforced
    assert known.notes == () and known.validate('"2024-02-29"')
    assert not known.validate('"2023-02-29"')
    with pytest.raises(SchemaError, match="format must be a string"):
        G({"type": "string", "format": 3})
    lark = Grammar.from_lark('%llguidance {}\nstart: %json {"type": "string", "format": "ports"}')
    assert lark.notes[0].pointer == "/format"


def test_annotations_and_unknown_keywords_are_accepted():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check({"title": "t", "description": "d", "examples": [1], "$comment": "c", "default": 2,
               "readOnly": True, "x-foo": {"not": 1}, "nullable": True, "type": "integer"},
              ["1"], ['"a"'])


def test_not_of_types_and_trivial_keywords():
    check({"not": {"type": ["string", "null"]}}, ["1", "true", "[]", "{}"], ['"a"', "null"])
    check({"type": "string", "not": {"const": "x"}}, ['"y"', '"xx"', '""'], ['"x"', "1"])
    check({"type": "string", "not": {"enum": ["a", "b"]}}, ['"c"'], ['"a"', '"b"'])
    check({"type": "string", "not": {"pattern": "^a"}}, ['"ba"'], ['"ab"'])
    check({"not": {"minimum": 3}}, ["2.5", "-1"], ["3", "4", '"s"', "null"])
    check({"type": "number", "not": {"multipleOf": 3}}, ["4", "1.5"], ["3", "-6", "0"])
    check({"type": "object", "not": {"required": ["a", "b"]}},
          ['{"a":1}', '{"b":1}', "{}", '{"c":1}'], ['{"a":1,"b":2}'])
    check({"type": "array", "not": {"maxItems": 1}}, ["[1,2]"], ["[]", "[1]"])
    check({"type": "array", "not": {"items": {"type": "string"}}}, ['["x",1]', "[null]"],
          ["[]", '["x"]', '["x","y"]'])
    check({"not": {"anyOf": [{"type": "string"}, {"type": "number", "maximum": 0}]}},
          ["1", "null"], ['"s"', "0", "-1"])
    check({"not": {"not": {"type": "string", "maxLength": 1}}}, ['"a"'], ['"ab"', "1"])
    check({"not": {"not": {"additionalProperties": False, "type": "object"}}}, ["{}"], ['{"a":1}'])
    check({"not": {"type": "integer"}}, ["1.5", "-0.25", '"s"', "null"], ["1", "1.0"])
    check({"type": "number", "not": {"type": "integer", "minimum": 3}}, ["1.5", "2", "3.5"],
          ["3", "4"])
    check({"type": "object", "propertyNames": {"not": {"const": "0"}}}, ['{"1":0}'], ['{"0":1}'])
    with pytest.raises(SchemaError, match="Unsatisfiable"):  # the inner schema accepts all
        G({"not": {"items": {}, "additionalItems": False}}, draft=7)
    check({"type": "array", "uniqueItems": False}, ["[1,1]"])
    check({"if": {"type": "string"}}, ["1", '"a"'])


def test_if_then_else_and_dependencies():
    schema = {"type": "object", "properties": {"kind": {"enum": ["a", "b"]}, "x": {}},
              "if": {"properties": {"kind": {"const": "a"}}},
              "then": {"properties": {"x": {"type": "integer"}}},
              "else": {"properties": {"x": {"type": "string"}}}}
    check(schema, ['{"kind":"a","x":1}', '{"kind":"b","x":"s"}', '{"x":1}', "{}"],
          ['{"kind":"a","x":"s"}', '{"kind":"b","x":1}', '{"x":"s"}'])
    check({"type": "object", "properties": {"card": {}, "billing": {}},
           "dependentRequired": {"card": ["billing"]}},
          ['{"card":1,"billing":2}', '{"billing":2}', "{}"], ['{"card":1}'])
    check({"type": "object", "properties": {"a": {}, "b": {"type": "integer"}},
           "dependentSchemas": {"a": {"properties": {"b": {"minimum": 5}}}}},
          ['{"a":1,"b":5}', '{"b":1}'], ['{"a":1,"b":4}'])
    check({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
           "properties": {"a": {}, "b": {}}, "dependencies": {"a": ["b"]}},
          ['{"a":1,"b":2}', '{"b":2}'], ['{"a":1}'])
    check({"if": {"items": {"type": "string"}}, "then": {"maxItems": 1}, "else": {"minItems": 2}},
          ['["a"]', "[1,2]", "1"], ['["a","b"]', "[1]"])
    check({"if": {"additionalProperties": {"type": "string"}}, "then": {"type": "object"}},
          ['{"x":1}', '{"x":"s"}', "{}"], ["1", '"s"', "null"])
    check({"if": {"propertyNames": {"maxLength": 2}}, "then": {"type": "object"}},
          ['{"ab":1}', '{"abc":1}', "{}"], ["1", '"s"'])
    with pytest.raises(SchemaError) as e:
        G({"if": {"type": "array", "prefixItems": [{"type": "integer"}],
                  "items": {"type": "string"}}, "then": {"type": "array"}})
    assert e.value.keyword == "if"


def test_contains_counts():
    check({"type": "array", "contains": {"type": "integer"}},
          ["[1]", '["a",2]', '[1,2,"x"]'], ["[]", '["a"]'])
    check({"type": "array", "contains": {"type": "integer"}, "minContains": 2, "maxContains": 3,
           "maxItems": 4}, ["[1,2]", '[1,"a",2,3]'], ["[1]", "[1,2,3,4]", '[1,"a","b","c",2]'])
    check({"type": "array", "contains": {"const": 5}, "minContains": 0, "maxContains": 1},
          ["[]", "[5]", "[1,2]"], ["[5,5]"])
    check({"type": "array", "contains": {"items": {"type": "string"}}, "maxContains": 1},
          ['[["a"],[1]]', '[[1],2]'], ['[[],["a"]]', "[1,2]", "[]", "[[1]]"])
    check({"type": "array", "contains": {"additionalProperties": {"type": "string"}},
           "maxContains": 1}, ['[{"x":1},3]', '[{"x":"s"},{"y":2}]'],
          ["[]", "[1,2]", '[{},{"x":"s"}]', '[{"x":1}]', '[{"x":1},{"y":2}]'])
    with pytest.raises(SchemaError, match="maxContains"):
        G({"type": "array", "contains": {"type": "array", "prefixItems": [{"type": "integer"}],
                                         "items": {"type": "string"}}, "maxContains": 1})


def test_formats():
    cases = {
        "date-time": (['"2024-01-01T10:00:00Z"', '"2024-01-01t10:00:00.5+01:00"'],
                      ['"2024-01-01T10:00:00"', '"2024-13-01T10:00:00Z"']),
        "time": (['"23:59:60z"'], ['"24:00:00Z"']),
        "duration": (['"P1Y2M3DT4H5M6S"', '"PT1S"', '"P2W"'], ['"P"', '"P1.5Y"', '"PT1D"']),
        "email": (['"a.b+c@ex-ample.com"', '"x@[1.2.3.4]"'], ['"a..b@x.com"', '"@x.com"']),
        "hostname": (['"a-b.c"'], ['"-a.b"', '"' + "a" * 64 + '"']),
        "ipv4": (['"255.0.10.1"'], ['"256.1.1.1"', '"01.1.1.1"', '"1.1.1"']),
        "ipv6": (['"::1"', '"fe80::1:2"', '"1:2:3:4:5:6:7:8"'], ['"1:2:3:4:5:6:7:8:9"', '"12345::"']),
        "uuid": (['"123e4567-E89b-12d3-a456-426614174000"'], ['"123e4567e89b12d3a456426614174000"']),
        "byte": (['"aGVsbG8="', '""', '"YWJj"'], ['"aGVsbG8"', '"a==="']),
        "uri": (['"https://user@ex.com:80/a/b?q=1#f"', '"urn:isbn:0451450523"', '"a:"'],
                ['"//ex.com"', '"http://a b"', '"1http://x"']),
    }
    for fmt, (good, bad) in cases.items():
        check({"type": "string", "format": fmt}, good, bad)


def test_integer_ranges_match_python_oracle():
    rng = random.Random(5)
    for _ in range(60):
        lo = rng.choice([None, rng.randint(-10**6, 10**6)])
        hi = rng.choice([None, rng.randint(-10**6, 10**6)])
        ex_lo, ex_hi = rng.random() < 0.3, rng.random() < 0.3
        node = number_rx(integer=True, minimum=None if lo is None else Decimal(lo),
                         maximum=None if hi is None else Decimal(hi),
                         exclusive_minimum=ex_lo, exclusive_maximum=ex_hi)
        for _ in range(40):
            v = rng.choice([rng.randint(-2 * 10**6, 2 * 10**6), rng.randint(-50, 50)])
            if lo is not None and rng.random() < 0.2:
                v = lo + rng.randint(-1, 1)
            want = (lo is None or (v > lo if ex_lo else v >= lo)) and (
                hi is None or (v < hi if ex_hi else v <= hi))
            assert rx.matches(node, str(v).encode()) == want, (lo, hi, ex_lo, ex_hi, v)
        for junk in ("00", "01", "-0", "1.0", "1e3", "+1", ""):
            if lo is not None or hi is not None:
                assert not rx.matches(node, junk.encode()), junk


def test_decimal_ranges_and_multiples_match_python_oracle():
    rng = random.Random(7)
    for _ in range(60):
        lo = Decimal(str(round(rng.uniform(-100, 100), rng.randint(0, 3))))
        hi = lo + Decimal(str(round(rng.uniform(0, 50), rng.randint(0, 3))))
        mult = rng.choice([None, Decimal("0.5"), Decimal("0.25"), Decimal(3), Decimal("0.01")])
        node = number_rx(integer=False, minimum=lo, maximum=hi, multiple_of=mult)
        for _ in range(40):
            v = Decimal(str(round(rng.uniform(float(lo) - 5, float(hi) + 5), rng.randint(0, 4))))
            text = format(v, "f")
            if text.startswith("-") and v == 0:
                continue
            want = lo <= v <= hi and (mult is None or v % mult == 0)
            assert rx.matches(node, text.encode()) == want, (lo, hi, mult, text)
    for d in (7, 12, 1000):
        node = number_rx(integer=True, multiple_of=Decimal(d))
        for v in range(-300, 3000, 7):
            assert rx.matches(node, str(v).encode()) == (v % d == 0), (d, v)


def test_patterns_match_python_re_oracle():
    patterns = ["^[a-z]+\\d{2,3}$", "ab|cd", "^(foo|ba[rz])*$", "x.y", "^\\w+@\\w+\\.com$",
                "[^a-c]{2}", "^\\s*$", "^\\S+$", "colou?r", "^a{2,}b?$", "[\\d-]+$"]
    rng = random.Random(3)
    alphabet = "abcdfoxyz019_@.- \tr"
    for p in patterns:
        node = pattern_rx(p)
        py = re.compile(p)
        for _ in range(300):
            s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))
            body = json.dumps(s)[1:-1].encode()
            assert rx.matches(node, body) == bool(py.search(s)), (p, s)
    with pytest.raises(PatternError):
        pattern_rx("(a")
    with pytest.raises(PatternError):
        pattern_rx("\\1")


def test_escaped_forms_in_patterns_and_lengths():
    check({"type": "string", "pattern": '^a"\\\\$'}, ['"a\\"\\\\"'], ['"a\\"\\\\x"'])
    check({"type": "string", "pattern": "^\\n$"}, ['"\\n"', '"\\u000a"', '"\\u000A"'], ['"n"'])
    check({"type": "string", "maxLength": 1}, ['"\\u00e9"'.replace("\\u00e9", "é")],
          ['"\\\\\\\\"'])


def test_lark_json_embedding():
    g = Grammar.from_lark('start: "say " %json {"type": "integer", "minimum": 3} "!"')
    assert g.validate("say 3!") and g.validate("say 10!")
    assert not g.validate("say 2!") and not g.validate("say x!")


def test_compile_json_schema_returns_ir_and_text_input():
    ir = compile_json_schema('{"type": "boolean"}')
    assert len(ir.rules) >= 2 and any(lx.name == "true" for lx in ir.lexemes)
    with pytest.raises(SchemaError, match="not valid JSON"):
        compile_json_schema("{")
    with pytest.raises(TypeError):
        compile_json_schema({}, nonsense=1)


def test_public_surface_and_registration():
    import lexguide.jsonschema as js
    from lexguide.grammar.ir import json_schema_compiler

    assert sorted(js.__all__) == ["BOUNDED_WHITESPACE", "SchemaError", "add_json_schema",
                                  "compile_json_schema"]
    assert json_schema_compiler() is js.add_json_schema


def test_large_length_and_item_bounds_are_counted_not_unrolled():
    # a string length is a counter in the regex: one lexer state per count reached
    check({"type": "string", "maxLength": 262144}, ['"abc"', '"' + "x" * 3000 + '"'], ['"a'])
    check({"type": "string", "minLength": 3, "maxLength": 150_000, "pattern": "^[a-z]+$"},
          ['"abc"', '"' + "q" * 5000 + '"'], ['"ab"', '"abC"'])
    # item counts past 256 are built from doubling rules (E[i] -> E[i-1] E[i-1]), exactly
    g = G({"type": "array", "maxItems": 1_000_000, "items": {"type": "integer"}})
    assert len(g.ir.rules) < 200 and g.validate("[1,2,3]") and not g.validate('["a"]')
    g = G({"type": "array", "minItems": 300, "maxItems": 1000, "items": {"const": 1}})
    assert len(g.ir.rules) < 200
    for n in (0, 299, 300, 301, 511, 512, 513, 777, 999, 1000, 1001):
        assert g.validate("[" + ",".join(["1"] * n) + "]") == (300 <= n <= 1000), n
    assert len(G({"type": "array", "minItems": 100_000}).ir.rules) < 200


def test_escapes_in_keys_and_llguidance_escape_options():
    # keys: one spelling by default (a declared key is forced text), \uXXXX only where needed
    check({"additionalProperties": {"type": "integer"}}, ['{"é": 1}', '{"\\u0001": 1}'],
          ['{"\\u00e9": 1}', '{"\\ud800": 1}'])
    g = G({"properties": {"Ab": {"type": "integer"}}, "required": ["Ab"],
           "additionalProperties": False})
    assert g.validate('{"Ab": 1}') and not g.validate('{"\\u0041b": 1}')
    # with general escapes a key is its decoded text (RFC 8259 §4): every spelling is that key
    gen = {"x-guidance": {"json_allow_general_unicode_escapes": True}}
    check({**gen, "additionalProperties": {"type": "integer"}}, ['{"\\u00e9": 1}', '{"é": 1}'],
          ['{"\\u00e9": "x"}', '{"\\ud800": 1}'])
    check({**gen, "properties": {"Ab": {"type": "integer"}},
           "additionalProperties": {"type": "string"}},
          ['{"\\u0041b": 1}', '{"Ab": 1}', '{"x": "s"}'], ['{"\\u0041b": "s"}', '{"A\\u0062": "s"}'])
    # string values: llguidance's default (\uXXXX only for characters that must be escaped)
    check({"type": "string"}, ['"é"', '"\\u0001"'], ['"\\u00e9"', '"\\u0022"'])
    general = {"x-guidance": {"json_allow_general_unicode_escapes": True}}
    check({**general, "type": "string", "maxLength": 1},
          ['"\\u00e9"', '"\\ud83d\\ude00"', '"\\uD83D\\uDE00"', '"😀"', '"\\u0022"'],
          ['"\\ud83d"', '"\\ude00\\ud83d"', '"\\ud83d\\ude00\\ud83d\\ude00"', '"\\u00e9x"'])
    check({**general, "type": "string", "pattern": "^[A-Z]+$"}, ['"\\u0041A"'], ['"\\u0061"'])
    check({**general, "enum": ["é"]}, ['"\\u00E9"', '"é"'], ['"e"'])
    no_u = {"x-guidance": {"json_allowed_escapes": 'nrbtf\\"'}}
    check({**no_u, "type": "string"}, ['"\\n"', '"\\\\"', '"\\""'], ['"\\u0001"', '"\\u000a"'])
    check({"x-guidance": {"json_allowed_escapes": "u"}, "type": "string"}, ['"\\u000a"'],
          ['"\\n"', '"\\""'])
    check({"type": "string"}, ['"\\t"'], ['"\\t"'[:0] + '"\\u0009x"'[:0] + '"\\x"'],
          json_allowed_escapes="t")
    with pytest.raises(SchemaError, match="invalid escape character in allowed_escapes: x") as e:
        G({"x-guidance": {"json_allowed_escapes": "x"}})
    assert e.value.pointer == "/x-guidance"
    with pytest.raises(SchemaError, match="must be a bool"):
        G({"x-guidance": {"json_allow_general_unicode_escapes": "yes"}})


def test_remote_refs_bundled_metaschemas_and_user_documents():
    for uri in ("http://json-schema.org/draft-04/schema#", "http://json-schema.org/draft-06/schema#",
                "http://json-schema.org/draft-07/schema#",
                "https://json-schema.org/draft/2019-09/schema",
                "https://json-schema.org/draft/2020-12/schema"):
        # every draft compiles as it is ("required": uniqueItems of strings; draft 4's "enum":
        # uniqueItems of any values, both kept distinct by the matcher)
        strict = G({"$ref": uri})
        assert strict.validate('{"required": ["a", "b"]}'), uri
        assert not strict.validate('{"required": ["a", "a"]}'), uri
        if "draft-04" in uri:
            assert strict.validate('{"enum": [1, "1", {"a": 1}]}')
            assert not strict.validate('{"enum": [1, {"a": 1}, 1.0]}')
        g = G({"$ref": uri}, lenient=True)
        assert g.validate('{"minLength": 1}') and g.validate('{"type": ["string", "null"]}'), uri
        assert not g.validate('{"minLength": -1}') and not g.validate('{"type": 1}'), uri
        assert {n.keyword for n in g.notes} <= {"uniqueItems", "format"}
    other = {"$id": "https://example.test/int.json", "type": "integer", "minimum": 2,
             "$defs": {"s": {"type": "string"}}}
    check({"properties": {"n": {"$ref": "https://example.test/int.json"}}},
          ['{"n":2}'], ['{"n":1}', '{"n":"x"}'], refs={"https://example.test/int.json": other})
    check({"$id": "https://example.test/root.json", "items": {"$ref": "int.json#/$defs/s"}},
          ['["a"]'], ["[2]"], refs={"https://example.test/int.json": other})  # relative, pointer
    with pytest.raises(SchemaError, match="never fetched") as e:
        G({"$ref": "https://example.test/missing.json"})
    assert e.value.keyword == "$ref" and "refs={uri: schema}" in str(e.value)


def test_dynamic_refs_follow_the_dynamic_scope():
    tree = {  # the extendible tree of core 2020-12 §8.2.3.2: strict nodes via $dynamicAnchor
        "$id": "https://example.test/strict-tree", "$dynamicAnchor": "node",
        "$ref": "tree", "unevaluatedProperties": False,
        "$defs": {"tree": {"$id": "tree", "$dynamicAnchor": "node", "type": "object",
                           "properties": {"data": True, "children": {
                               "type": "array", "items": {"$dynamicRef": "#node"}}}}}}
    check(tree, ['{"children":[{"data":1}]}', '{"data":1,"children":[]}'],
          ['{"children":[{"daat":1}]}', '{"x":1}'])
    loose = {"$id": "https://example.test/tree", "$dynamicAnchor": "node", "type": "object",
             "properties": {"data": True, "children": {"type": "array",
                                                       "items": {"$dynamicRef": "#node"}}}}
    check(loose, ['{"children":[{"daat":1}]}'], ['{"children":[1]}'])
    recursive = {  # 2019-09: $recursiveRef to the outermost $recursiveAnchor: true
        "$schema": "https://json-schema.org/draft/2019-09/schema",
        "$id": "https://example.test/r-root", "$recursiveAnchor": True,
        "$ref": "r-tree", "properties": {"data": {"type": "integer"}},
        "$defs": {"t": {"$id": "r-tree", "$recursiveAnchor": True, "type": "object",
                        "properties": {"kids": {"type": "array",
                                                "items": {"$recursiveRef": "#"}}}}}}
    check(recursive, ['{"kids":[{"data":1}]}'], ['{"kids":[{"data":"s"}]}', '{"data":"s"}'])


def test_unevaluated_properties_and_items():
    base = {"$defs": {"b": {"properties": {"b": {"type": "integer"}}}}}
    check({**base, "type": "object", "properties": {"a": {}}, "allOf": [{"$ref": "#/$defs/b"}],
           "unevaluatedProperties": False}, ['{"a":1,"b":2}', "{}"], ['{"c":1}', '{"b":"s"}'])
    check({"type": "object", "anyOf": [{"properties": {"a": {}}, "required": ["a"]},
                                       {"properties": {"b": {}}, "required": ["b"]}],
           "unevaluatedProperties": {"type": "string"}},
          ['{"a":1}', '{"a":1,"b":2}', '{"b":1,"z":"s"}'], ['{"a":1,"z":2}', "{}"])
    check({"type": "object", "properties": {"kind": {}},
           "if": {"properties": {"kind": {"const": "x"}}, "required": ["kind"]},
           "then": {"properties": {"x": {}}}, "unevaluatedProperties": False},
          ['{"kind":"x","x":1}', '{"kind":"y"}'], ['{"kind":"y","x":1}'])
    check({"type": "array", "contains": {"type": "integer"}, "unevaluatedItems": False},
          ["[1,2]", "[1]"], ['[1,"a"]', "[]"])
    check({"type": "array", "prefixItems": [{"type": "string"}], "unevaluatedItems": False},
          ['["a"]', "[]"], ['["a",1]'])
    check({"type": "array", "allOf": [{"prefixItems": [{}, {}]}], "unevaluatedItems": False},
          ["[1,2]", "[]"], ["[1,2,3]"])
    with pytest.raises(SchemaError) as e:
        G({"type": "object", "anyOf": [{"properties": {k: {}}} for k in "abcde"],
           "unevaluatedProperties": False})
    assert e.value.pointer == "/unevaluatedProperties" and "statically" in str(e.value)


def test_many_pattern_properties_split_keys_into_the_regions_they_need():
    """Ten disjoint patternProperties and two that overlap them compile (regions that no key
    can reach are dropped) and agree with the validator; patterns overlapping in more ways
    than the limit are a located error."""
    jsonschema = pytest.importorskip("jsonschema")
    pp = {f"^p{i}_": {"type": "integer", "minimum": i} for i in range(10)}
    pp["_x$"] = {"type": "integer", "maximum": 5}
    pp["^q"] = {"type": "string"}
    schema = {"type": "object", "patternProperties": pp,
              "additionalProperties": {"type": "boolean"}}
    g = G(schema)
    v = jsonschema.Draft202012Validator(schema)
    rng = random.Random(0)
    for _ in range(1500):
        inst = {rng.choice(["p3_a", "p3_x", "p9_", "p1_x", "q", "qq_x", "z", "p0_", "_x"]):
                rng.choice([0, 3, 7, 12, True, "s"])}
        assert g.validate(json.dumps(inst)) == v.is_valid(inst), inst
    with pytest.raises(SchemaError, match="overlap in more than 64 ways") as e:
        G({"type": "object", "properties": {"o": {
            "type": "object", "patternProperties": {c: {"type": "integer"} for c in "abcdefgh"}}}})
    assert e.value.pointer == "/properties/o" and e.value.keyword == "patternProperties"


def test_schemas_too_complex_to_combine_name_where_and_which_keyword():
    def branches(k, n=100, m=25):
        return {"anyOf": [{"type": "object", "properties": {
            **{f"q{j}": {"type": "string"} for j in range(m)}, f"p{k}_{i}": {"type": "integer"}}}
            for i in range(n)]}

    deep = {"type": "object", "properties": {"x": {"type": "object", "properties": {
        "deep": {"allOf": [branches(0), branches(1)]}}}}}
    with pytest.raises(SchemaError, match="took more than 200000 intersection steps") as e:
        G(deep)
    assert e.value.pointer == "/properties/x/properties/deep/allOf"
    assert e.value.keyword == "allOf"
    wide = {"properties": {"w": {"allOf": [branches(k, 12, 1) for k in range(5)]}}}
    with pytest.raises(SchemaError, match="unions of 1728 and 12 branches") as e:
        G(wide)
    assert e.value.pointer == "/properties/w/allOf" and e.value.keyword == "allOf"
    # beside one another, the keywords of a schema object (here its $ref and anyOf)
    refd = {"$defs": {"b": branches(2)}, "properties": {"r": {"$ref": "#/$defs/b",
                                                              **branches(3)}}}
    with pytest.raises(SchemaError, match="combining the keywords of this schema") as e:
        G(refd)
    assert e.value.pointer == "/properties/r" and e.value.keyword is None
