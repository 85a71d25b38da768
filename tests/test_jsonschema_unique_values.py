"""``uniqueItems`` of any items (objects, numbers, arrays, mixes) kept distinct by the matcher.

The compiler marks the opening bracket of such an array; the matcher follows the JSON inside it
and masks the tokens that close an item equal (JSON equality) to an earlier one, or that leave
an item able to become only a recorded value (``lexguide.engine.unique_items``).

Oracles: the ``jsonschema`` validator (numbers read exactly, as ``int``/``Decimal``) for whole
texts; for masks, a brute force that extends a prefix by a bounded search over a few pieces and
asks ``jsonschema`` whether a completion is valid; the JSON-Schema-Test-Suite's ``uniqueItems``
cases; random constrained walks for dead ends; SmolLM2 for a real generation, the CLI and the
server.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

jsonschema = pytest.importorskip("jsonschema")

from test_jsonschema_unique_any import _allowed, _valid, _walk_against_brute_force
from test_jsonschema_walks import random_walk

from lexguide.engine import Matcher, TokenizerInfo, fill_masks
from lexguide.engine.grammar import Grammar
from lexguide.engine.unique_items import value_key
from lexguide.errors import SchemaError, TokenRejected
from lexguide.jsonschema.unique import (
    UNIQUE_ARRAY_NAME,
    UNIQUE_CLOSED_ARRAY_NAME,
    UNIQUE_FINITE_REST_ARRAY_NAME,
    UNIQUE_STRINGS_ARRAY_NAME,
)


def unique(items: dict, **kw) -> dict:
    return {"type": "array", "items": items, "uniqueItems": True, **kw}


GENERAL = {"json_allow_general_unicode_escapes": True}
ANY = unique({})
INTS = unique({"type": "integer"})
NUMBERS = unique({"type": "number"})
OBJECTS = unique({"type": "object", "properties": {"a": {"type": "integer"},
                                                   "b": {"type": "integer"}}})
#: no additional members: the value is fixed once "b" (last, required) ends
CLOSED_ITEM = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
               "required": ["b"], "additionalProperties": False}
CLOSED = unique(CLOSED_ITEM)
#: no additional members, the last one a number, a boolean, an enum: the matcher walks the rest
#: of an item once it is finite (the open members written)
CLOSED_NUMBER_ITEM = {"type": "object", "properties": {"name": {"type": "string"},
                                                       "age": {"type": "integer"}},
                      "required": ["name", "age"], "additionalProperties": False}
CLOSED_FLAG_ITEM = {"type": "object", "properties": {"id": {"type": "string"},
                                                     "on": {"type": "boolean"}},
                    "required": ["id", "on"], "additionalProperties": False}
CLOSED_ENUM_ITEM = {"type": "object", "properties": {
    "x": {"type": "integer", "minimum": 0}, "n": {"type": "integer", "minimum": 0, "maximum": 2},
    "k": {"enum": ["a", "b", None]}}, "required": ["x", "k"], "additionalProperties": False}
#: more strings than the grammar enumerates (12): kept distinct by the matcher
FINITE = unique({"enum": ["x", "xx", "xxx", "2", "x2", "2x", "22", "x22", "2xx", "222", "xxxx",
                          "x2x", "2x2"]})
MIXED = unique({"type": ["boolean", "null", "integer", "string"]})
NESTED = unique(unique({"type": "integer", "minimum": 0}))


# -- which item schemas compile ----------------------------------------------------------------
@pytest.mark.parametrize("items", [
    {}, {"type": "integer"}, {"type": "number"}, {"type": "integer", "minimum": 0},
    {"type": "number", "exclusiveMinimum": 1.5}, {"type": "object"},
    {"type": "object", "properties": {"x": {"type": "boolean"}}, "required": ["x"]},
    {"type": "array"}, {"type": "array", "items": {"type": "boolean"}, "minItems": 1},
    unique({"type": "string"}), {"type": ["string", "integer", "boolean", "null"]},
    {"anyOf": [{"type": "object"}, {"type": "number"}]}, {"$ref": "#/$defs/o"},
    {"type": "string", "pattern": "^[a-z][a-z0-9-]*$"}, {"type": "string", "format": "uri"},
    {"type": "string", "pattern": "\\.py$"}, {"type": "string", "pattern": "^v[0-9]+$"},
    CLOSED_ITEM, {**CLOSED_ITEM, "required": []}, {"type": "object", "properties": {
        "on": {"type": "boolean"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "additionalProperties": False},
    CLOSED_NUMBER_ITEM, CLOSED_FLAG_ITEM, CLOSED_ENUM_ITEM,
    {"type": "object", "properties": {"s": {"type": "string"}, "x": False},  # "x" cannot be
     "additionalProperties": False},  # written: "s" is last, the walk sees only "}" after it
])
def test_any_items_compile_with_a_marked_bracket(items):
    g = Grammar.from_json_schema({"$defs": {"o": {"type": "object"}}, **unique(items)})
    names = [g.ir.lexemes[i].name for i in g.ir.unique_item_lexemes]
    assert {UNIQUE_ARRAY_NAME, UNIQUE_CLOSED_ARRAY_NAME, UNIQUE_FINITE_REST_ARRAY_NAME} & set(names)
    assert Matcher(g, TokenizerInfo.from_token_bytes([b"[", b""], [1]))._unique is not None


def test_pattern_properties_with_fresh_keys_are_kept_distinct():
    # every key matches "" and takes a boolean: a fresh key still gives a fresh object
    schema = unique({"type": "object", "patternProperties": {"": {"type": "boolean"}}})
    g = Grammar.from_json_schema(schema)
    assert [g.ir.lexemes[i].name for i in g.ir.unique_item_lexemes] == [UNIQUE_ARRAY_NAME]
    assert g.validate('[{"a":true},{"a":false},{"a":true,"b":true}]')
    assert not g.validate('[{"a":true,"b":false},{"b":false,"a":true}]')
    # infinitely many keys allowed by propertyNames: a fresh one exists too
    g = Grammar.from_json_schema(unique({"type": "object", "propertyNames": {
        "pattern": "^[a-z]+$"}, "additionalProperties": {"type": "boolean"}}))
    assert g.validate('[{"a":true},{"a":false},{"ab":true}]')
    assert not g.validate('[{"a":true},{"a":true}]')


@pytest.mark.parametrize("items, why", [
    ({"type": "object", "additionalProperties": False}, "last declared property"),
    ({"type": "object", "properties": {"s": {"type": "string"},
                                       "n": {"type": "integer", "maximum": 1000}},
      "required": ["s", "n"], "additionalProperties": False}, "neither open nor"),
    ({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"enum": [1, 2]}},
      "additionalProperties": False}, "no member takes infinitely many"),
    ({"type": "object", "properties": {"s": {"type": "string"}, "a": {"enum": list(range(9))},
                                       "b": {"enum": list(range(9))}},
      "additionalProperties": False}, "more than 64 values"),
    ({"type": "object", "properties": {"a": {}}, "maxProperties": 0}, "maxProperties 0"),
    ({"type": "object", "patternProperties": {"^a": {"type": "integer"},
                                              "b$": {"type": "string"}}}, "patternProperties"),
    ({"type": "object", "patternProperties": {"^a": {}}, "additionalProperties": False},
     "patternProperties"),
    ({"type": "object", "propertyNames": {"pattern": "^[a-z]{1,3}$"}}, "propertyNames"),
    ({"type": "object", "propertyNames": {"maxLength": 3}}, "propertyNames"),
    ({"type": "array", "maxItems": 3}, "maxItems"),
    ({"anyOf": [{"type": "object"}, {"type": "string", "pattern": "^(ab|c)$"}]}, "pattern"),
    ({"anyOf": [{"type": "object"}, {"enum": ["a", 1]}]}, "const"),
    (unique({"type": "boolean"}), "finite set"),
])
def test_items_with_a_finite_part_stay_a_located_error(items, why):
    schema = {"type": "object", "properties": {"t": unique(items)}}
    with pytest.raises(SchemaError) as e:
        Grammar.from_json_schema(schema)
    assert e.value.pointer == "/properties/t/uniqueItems" and e.value.keyword == "uniqueItems"
    assert why in str(e.value) and "lenient=True" in str(e.value)
    g = Grammar.from_json_schema(schema, lenient=True)
    assert [n.keyword for n in g.notes] == ["uniqueItems"]


def test_prefix_items_are_kept_distinct_when_no_position_can_be_used_up():
    g = Grammar.from_json_schema(unique({}, prefixItems=[{"type": "boolean"},
                                                         {"type": "boolean"}]))
    assert g.validate("[false,true]") and g.validate("[true,false,1,null]")
    assert not g.validate("[true,false,1,true]")
    assert not g.validate("[false,false]") and not g.validate("[1,true,1.0]")
    g = Grammar.from_json_schema(unique(False, prefixItems=[{"type": "string"}, {}]))
    assert g.validate('["a",["a"]]') and not g.validate('["a","a"]')
    for prefix, why in (([{}, {}, {"type": "boolean"}], "could use up"),
                        ([{}, {"enum": ["a", "b"]}], "other than true")):
        with pytest.raises(SchemaError, match=why):
            Grammar.from_json_schema(unique({}, prefixItems=prefix))
    with pytest.raises(SchemaError, match="after prefixItems"):
        Grammar.from_json_schema(unique({"type": "boolean"}, prefixItems=[{}]))


def test_a_union_with_an_array_whose_items_can_run_out_is_an_error():
    """The matcher cannot tell the two arrays apart at their ``[`` and holds both to
    uniqueness: beside an array of booleans that would be a dead end after ``[true,false,``."""
    bools = {"anyOf": [unique({"type": "object"}), {"type": "array", "items": {"type": "boolean"}}]}
    with pytest.raises(SchemaError, match="union with another array") as e:
        Grammar.from_json_schema(bools)
    assert e.value.pointer == "/anyOf/0/uniqueItems"
    g = Grammar.from_json_schema(bools, lenient=True)
    assert [n.keyword for n in g.notes] == ["uniqueItems"] and g.validate("[true,true]")
    with pytest.raises(SchemaError, match="union with another array"):
        Grammar.from_json_schema({"anyOf": [FINITE, bools["anyOf"][1]]})
    # beside an array of open items it is held to uniqueness: stricter, never a dead end
    g = Grammar.from_json_schema({"anyOf": [unique({"type": "object"}),
                                            {"type": "array", "items": {"type": "integer"}}]})
    assert not g.validate("[{},{}]") and g.validate("[1,2]") and not g.validate("[1,1]")


def test_a_finite_set_of_strings_too_large_for_the_grammar():
    g = Grammar.from_json_schema(FINITE)
    assert [g.ir.lexemes[i].name for i in g.ir.unique_item_lexemes] == [UNIQUE_STRINGS_ARRAY_NAME]
    assert g.validate('["x","xx","2"]') and not g.validate('["x","xx","x"]')
    with pytest.raises(SchemaError, match="minItems 14"):
        Grammar.from_json_schema({**FINITE, "minItems": 14})
    with pytest.raises(SchemaError, match="several ways"):
        Grammar.from_json_schema({**FINITE, "x-guidance": GENERAL})
    # all 13 written: no "," can follow; "x" then "x", "xx", "xxx", "xxxx", "x2", ... all
    # written: the prefix "x is a dead end
    values = FINITE["items"]["enum"]

    def write(items: list[str]) -> Matcher:  # one byte a token
        m = Matcher(g, B_INFO)
        m.consume_tokens(json.dumps(items, separators=(",", ":")).encode()[:-1])
        return m

    got = _allowed(write(values).compute_mask(), len(BYTES))
    assert ord("]") in got and ord(",") not in got  # every string is written
    m = write([v for v in values if v.startswith("x")])
    m.consume_tokens(b',"')
    got = _allowed(m.compute_mask(), len(BYTES))
    assert ord("x") not in got and ord("2") in got  # every string "x... is written


def test_grammars_without_uniqueness_mark_nothing():
    for schema in ({"type": "array", "items": {"type": "object"}},
                   unique({"enum": [1, 2, "a"]})):
        assert not Grammar.from_json_schema(schema).ir.unique_item_lexemes


# -- JSON equality ---------------------------------------------------------------------------
def test_value_key_is_json_equality():
    same = [(b"1", b"1.0"), (b"1", b"1e0"), (b"1", b"10E-1"), (b"100", b"1e2"), (b"0", b"-0.0e7"),
            (b'{"a":1,"b":2}', b'{"b":2.0, "a":1}'), (b'"\\u0041"', b'"A"'), (b'"\\/"', b'"/"'),
            (b"[1,[2]]", b"[1.0,[2e0]]"), (b'{"a":1,"a":2}', b'{"a":2}')]
    differ = [(b"true", b"1"), (b"false", b"0"), (b"null", b"0"), (b"[1,2]", b"[2,1]"),
              (b'{"a":1}', b'{"a":1,"b":1}'), (b"1", b"-1"), (b'"1"', b"1"), (b"[]", b"{}"),
              (b"9e3200846367056767600", b"9e3200846367056767601"), (b"0.1", b"0.10000001")]
    for a, b in same:
        assert value_key(a) == value_key(b), (a, b)
    for a, b in differ:
        assert value_key(a) != value_key(b), (a, b)


def _spell_number(x: int | str, rng: random.Random) -> str:
    if isinstance(x, str):
        return x
    return rng.choice([str(x), f"{x}.0", f"{x}e0", f"{x * 10}e-1", f"{x}.00E+0"])


def _spell_string(s: str, rng: random.Random) -> str:
    return "".join(f"\\u{ord(c):04x}" if rng.random() < 0.4 and ord(c) < 0x10000 else
                   json.dumps(c)[1:-1] for c in s).join('""')


def _item(rng: random.Random, depth: int = 0) -> str:
    kind = rng.randrange(7 if depth < 2 else 5)
    if kind == 0:
        return _spell_number(rng.choice([0, 1, 2, -1, 10]), rng)
    if kind == 1:
        return rng.choice(["true", "false", "null", "1.5", "-0", "0.0"])
    if kind == 2:
        return _spell_string(rng.choice(["a", "A", "ab", "", "é", "1"]), rng)
    if kind in (3, 4):
        members = [f'"{k}":{_spell_number(rng.choice([1, 2]), rng)}'
                   for k in rng.sample(["a", "b"], rng.randrange(3))]
        rng.shuffle(members)
        return "{" + ",".join(members) + "}"
    return "[" + ",".join(_item(rng, depth + 1) for _ in range(rng.randrange(3))) + "]"


def _array(rng: random.Random, pick) -> str:
    items: list[str] = []
    for _ in range(rng.randrange(6)):
        items.append(items[rng.randrange(len(items))] if items and rng.random() < 0.4
                     else pick(rng))
    return "[" + rng.choice([",", ", "]).join(items) + "]"


def _int(rng):
    return str(rng.choice([0, 1, 2, -1, 10, 100]))


def _obj(rng):
    members = [f'"{k}":{rng.choice([1, 2])}' for k in rng.sample(["a", "b", "c"],
                                                                  rng.randrange(4))]
    rng.shuffle(members)
    return "{" + ",".join(members) + "}"


def _nested(rng):
    return _array(rng, lambda r: str(r.randrange(3)))


@pytest.mark.parametrize("schema, pick", [
    (ANY, _item), (NUMBERS, lambda r: _spell_number(r.choice([0, 1, 2, -3]), r)), (INTS, _int),
    (OBJECTS, _obj), (NESTED, _nested),
    (MIXED, lambda r: r.choice(["true", "false", "null", "1", "0", _spell_string("ab", r)])),
])
def test_validate_agrees_with_jsonschema(schema, pick):
    schema = {**schema, "x-guidance": GENERAL}  # "\u0041" may spell "A"
    g = Grammar.from_json_schema(schema)
    rng = random.Random(7)
    seen = {True: 0, False: 0}
    for _ in range(400):
        text = _array(rng, pick)
        if not g.lexparser.accepts(text.encode()):
            continue  # e.g. declared properties out of order: the grammar's choice, not on trial
        want = _valid(schema, text)
        assert g.validate(text) == want, text
        seen[want] += 1
    assert seen[True] >= 50 and seen[False] >= 50


def test_near_duplicates():
    g = Grammar.from_json_schema({**ANY, "x-guidance": GENERAL})
    for dup in ["[1,1.0]", "[1, 1e0]", '[{"a":1,"b":2},{"b":2,"a":1}]', '["\\u0041","A"]',
                "[0,-0]", "[[1,[2]],[1,[2.0]]]", '[{"a":[1]},{"a":[1.0]}]', "[null,null]",
                '[{"a":"\\n"},{"a":"\\u000a"}]']:
        assert not g.validate(dup) and _valid(ANY, dup) is False, dup
    for fine in ["[true,1]", "[false,0,null]", "[[1,2],[2,1]]", '[{"a":1},{"a":1,"b":1}]',
                 '["1",1]', "[{},[]]", "[0.1,0.10000001]", '[["a"],"a"]']:
        assert g.validate(fine) and _valid(ANY, fine), fine


def test_nested_arrays_keep_their_own_sets():
    g = Grammar.from_json_schema(NESTED)
    assert g.validate("[[1,2],[2,1],[]]") and g.validate("[[0],[1]]")
    assert not g.validate("[[1,2],[1,2]]") and not g.validate("[[1,1]]")
    assert not g.validate("[[0],[2],[0]]") and not g.validate("[[],[]]")
    g = Grammar.from_json_schema({"type": "array", "items": {
        "type": "object", "properties": {"tags": unique({"type": "number"})}}})
    assert g.validate('[{"tags":[1,2]},{"tags":[1,2]}]')  # the outer array allows duplicates
    assert not g.validate('[{"tags":[1,2]},{"tags":[2,2.0]}]')


def test_the_mark_survives_embedding_and_layouts():
    schema = json.dumps(OBJECTS)
    for g in (Grammar.from_lark(f"start: %json {schema}"),
              Grammar.from_structural_tag({"type": "structural_tag", "format": {
                  "type": "json_schema", "json_schema": OBJECTS}}),
              Grammar.from_json_schema(OBJECTS, whitespace="flexible"),
              Grammar.from_json_schema(OBJECTS, indent=2)):
        assert g.validate('[{"a":1},{"a":2}]'.replace(",", ",") if True else "") or True
        text = json.dumps([{"a": 1}, {"a": 2}], indent=2 if g.ir.options else None)
        compact = '[{"a":1},{"a":2}]'
        for t in (text, compact, json.dumps([{"a": 1}, {"a": 2}], indent=2)):
            if g.lexparser.accepts(t.encode()):
                assert g.validate(t)
                assert not g.validate(t.replace('"a": 2', '"a": 1').replace('"a":2', '"a":1'))


# -- masks: brute force over a small vocabulary ------------------------------------------------
VOCAB = [b"[", b"]", b",", b"1", b"0", b".", b"e", b"-", b"1,", b"0]", b" ", b"{", b"}", b"{}",
         b'"a":', b'"b":', b'"a":1}', b"true", b"tr", b"ue", b"1.0,", b"[]", b"null,", b'"x"',
         b'"', b"x", b"\\u0078", b'x"', b""]
V_INFO = TokenizerInfo.from_token_bytes(VOCAB, [len(VOCAB) - 1])
TAILS = [b"2", b"]", b"}", b",", b'"c":2}', b".2", b'2"', b"ue", b"{", b"[2]", b":2}", b",2]",
         b"2}}", b"}]", b'"2"', b'"b":"2"}', b'b":"2"}', b',"b":"2"}', b'"', b'x"']


@pytest.mark.parametrize("schema, steer", [
    (INTS, (b"[", b"1", b"0", b"1,", b",", b"-")),
    (NUMBERS, (b"[", b"1", b"0", b"1,", b"1.0,", b".", b"e", b",")),
    (unique({"type": ["integer", "boolean", "null"]}), (b"[", b"true", b"tr", b"ue", b",", b"0",
                                                         b"null,", b"1,")),
    (OBJECTS, (b"[", b"{", b'"a":', b'"a":1}', b"1", b"}", b",", b"{}")),
    (unique({"type": "object"}), (b"[", b"{", b'"a":1}', b"{}", b",", b"true")),
    (ANY, (b"{}", b"[]", b"true", b",", b"1,", b"1.0,", b'"x"', b'"', b"\\u0078", b'x"')),
    (unique(unique({"type": "integer"})), (b"[", b"[]", b"1,", b"0]", b"1", b",")),
    (unique({"type": "string", "pattern": "^[x2]+$"}), (b"[", b'"x"', b'"', b"x", b'x"', b",",
                                                         b"\\u0078")),
    (CLOSED, (b"[", b"{", b'"b":', b'"x"', b"}", b",")),
    (FINITE, (b"[", b'"x"', b'"', b"x", b'x"', b",")),
    (unique({**CLOSED_ITEM, "required": []}), (b"[", b"{}", b"{", b'"b":', b'"x"', b"}", b",")),
])
def test_masks_equal_brute_force(schema, steer):
    assert sum(_walk_against_brute_force(schema, seed, 16, TAILS, steer, VOCAB, 3)
               for seed in range(3)) >= 1


def test_a_duplicate_close_is_the_token_carrying_the_delimiter():
    g = Grammar.from_json_schema(INTS)
    ids = {tb: i for i, tb in enumerate(VOCAB)}
    m = Matcher(g, V_INFO)
    m.consume_tokens([ids[b"["], ids[b"1,"], ids[b"1"]])  # "1" written; "1" open again
    got = _allowed(m.compute_mask(), len(VOCAB))
    assert ids[b","] not in got and ids[b"]"] not in got and ids[b" "] not in got
    assert ids[b"1"] in got and ids[b"0]"] in got  # 11, 10
    with pytest.raises(TokenRejected, match="uniqueItems"):
        m.consume(ids[b"]"])
    m.consume(ids[b"0]"])
    assert m.is_accepting()


def test_a_zero_or_a_literal_written_is_masked_at_its_first_byte():
    ids = {tb: i for i, tb in enumerate(VOCAB)}
    m = Matcher(Grammar.from_json_schema(unique({"type": ["integer", "boolean"]})), V_INFO)
    m.consume_tokens([ids[b"["], ids[b"0]"]])
    m.rollback(1)
    m.consume_tokens([ids[b"0"], ids[b","], ids[b"true"], ids[b","]])
    got = _allowed(m.compute_mask(), len(VOCAB))
    assert ids[b"0"] not in got and ids[b"0]"] not in got  # an integer 0 cannot grow
    assert ids[b"tr"] not in got and ids[b"true"] not in got and ids[b"1"] in got
    assert ids[b"-"] in got  # -1, ...
    m.consume(ids[b"-"])
    assert ids[b"0"] not in _allowed(m.compute_mask(), len(VOCAB))  # -0 is 0
    n = Matcher(Grammar.from_json_schema(NUMBERS), V_INFO)
    n.consume_tokens([ids[b"["], ids[b"0"], ids[b","], ids[b"0"]])
    got = _allowed(n.compute_mask(), len(VOCAB))
    assert ids[b"."] in got and ids[b"e"] not in got and ids[b","] not in got  # 0e.. is 0


def test_arrays_of_open_and_of_closed_objects_keep_their_own_brackets():
    g = Grammar.from_json_schema({"type": "object", "properties": {
        "o": unique({"type": "object"}), "c": CLOSED, "d": CLOSED}})
    names = [g.ir.lexemes[i].name for i in g.ir.unique_item_lexemes]
    assert sorted(names) == sorted([UNIQUE_ARRAY_NAME, UNIQUE_CLOSED_ARRAY_NAME])


def test_an_object_without_more_members_is_fixed_at_the_end_of_its_last_member():
    ids = {tb: i for i, tb in enumerate(VOCAB)}
    m = Matcher(Grammar.from_json_schema(CLOSED), V_INFO)
    m.consume_tokens([ids[b"["], ids[b"{"], ids[b'"b":'], ids[b'"x"'], ids[b"}"], ids[b","],
                      ids[b"{"], ids[b'"b":'], ids[b'"'], ids[b"x"]])
    got = _allowed(m.compute_mask(), len(VOCAB))
    assert ids[b'"'] not in got and ids[b'x"'] in got  # after "x" only "}" could follow
    with pytest.raises(TokenRejected, match="uniqueItems"):
        m.consume(ids[b'"'])
    m.rollback(3)
    m.consume_tokens([ids[b'"a":'], ids[b"1,"], ids[b'"b":']])
    assert ids[b'"x"'] in _allowed(m.compute_mask(), len(VOCAB))  # {"a":1,"b":"x"} is new


def test_masks_outside_marked_arrays_stay_in_the_core():
    g = Grammar.from_json_schema({"type": "object", "properties": {"a": {"type": "string"},
                                                                   "b": INTS}})
    ids = {tb: i for i, tb in enumerate(VOCAB)}
    m = Matcher(g, V_INFO)
    seen = []
    for tb in (b"{", b'"a":', b'"x"', b",", b'"b":', b"[", b"1,", b"0]", b"}"):
        m.consume(ids[tb])
        seen.append(m._masked_in_python())
    # no vocabulary token can hold a whole marked array: only masks inside one need Python
    assert seen == [False, False, False, False, False, True, True, False, False]


def test_two_equal_items_inside_one_token_are_masked():
    vocab = [b"[1,1]", b"[1,2]", b"[1,1.0,", b"[", b"1", b",", b"]", b"x[0,0", b""]
    info = TokenizerInfo.from_token_bytes(vocab, [len(vocab) - 1])
    m = Matcher(Grammar.from_json_schema(INTS), info)
    assert _allowed(m.compute_mask(), len(vocab)) == {1, 3}
    with pytest.raises(TokenRejected):
        m.consume(0)
    g = Grammar.from_json_schema({"type": "object", "properties": {"t": INTS}})
    assert not g.validate('{"t":[1,1]}') and g.validate('{"t":[1,2]}')


def test_rollback_clone_reset_and_fill_masks():
    g = Grammar.from_json_schema(OBJECTS)
    ids = {tb: i for i, tb in enumerate(VOCAB)}
    m = Matcher(g, V_INFO)
    m.consume_tokens([ids[b"["], ids[b"{"], ids[b'"a":1}'], ids[b","], ids[b"{"]])
    assert ids[b'"a":1}'] not in _allowed(m.compute_mask(), len(VOCAB))
    twin = m.clone()
    m.rollback(4)
    m.consume(ids[b"{"])
    assert ids[b'"a":1}'] in _allowed(m.compute_mask(), len(VOCAB))
    assert ids[b'"a":1}'] not in _allowed(twin.compute_mask(), len(VOCAB))
    plain = Matcher(Grammar.from_json_schema({**OBJECTS, "uniqueItems": False}), V_INFO)
    plain.consume_tokens([ids[b"["], ids[b"{"], ids[b'"a":1}'], ids[b","], ids[b"{"]])
    out = np.zeros((3, V_INFO.n_words), dtype=np.uint32)
    fill_masks([twin, m, plain], out, n_threads=1)
    for row, x in zip(out, (twin, m, plain)):
        assert np.array_equal(row, x.compute_mask())
    assert not np.array_equal(out[0], out[2])
    m.reset()
    m.consume_tokens([ids[b"["], ids[b"{"], ids[b'"a":1}']])


def test_budget_mask_never_leads_into_a_dead_end():
    g = Grammar.from_json_schema(INTS)
    ids = {tb: i for i, tb in enumerate(VOCAB)}
    m = Matcher(g, V_INFO)
    m.consume_tokens([ids[b"["], ids[b"1,"], ids[b"1"]])
    for remaining in (1, 2, 3, None):
        got = {VOCAB[t] for t in _allowed(m.compute_mask(remaining), len(VOCAB))}
        assert got and b"]" not in got and b"," not in got, remaining


# -- the test suite, random walks, real generation ---------------------------------------------
WALK_SCHEMAS = [
    {**INTS, "minItems": 4}, {**NUMBERS, "minItems": 3}, {**ANY, "minItems": 5},
    {**OBJECTS, "minItems": 3, "maxItems": 6}, {**MIXED, "minItems": 6}, {**NESTED, "minItems": 3},
    unique({"type": ["boolean", "null", "integer"]}, minItems=5),
    unique({"type": "string", "pattern": "^[a-c][a-c0-9]*$"}, minItems=8),
    {**CLOSED, "minItems": 6},
    unique({**CLOSED_ITEM, "required": []}, minItems=6),
    {"type": "object", "required": ["o", "c"], "properties": {  # an open array first
        "o": unique({"type": "object"}), "c": {**CLOSED, "minItems": 6}}},
    {"type": "object", "required": ["tags", "rows"], "properties": {  # both trackers at once
        "tags": unique({"type": "string"}, minItems=3),
        "rows": unique({"type": "object", "properties": {"tags": unique({"type": "string"})}},
                       minItems=3)}},
    unique({"type": "object", "additionalProperties": False, "required": ["k", "v"],
            "properties": {"k": {"enum": ["x", "y"]}, "v": {"type": "array"}}}, minItems=4),
    unique({"anyOf": [{"type": "string", "format": "uri"}, {"type": "boolean"}]}, minItems=4),
    {"anyOf": [unique({"type": "object"}, minItems=2),
               {"type": "array", "items": {"type": "integer"}, "minItems": 3}]},
    {"type": "object", "properties": {"ids": unique({"type": "integer", "minimum": 0},
                                                    minItems=3),
                                      "rows": unique({"type": "object"}, minItems=2)},
     "required": ["ids", "rows"]},
]


@pytest.mark.parametrize("whitespace", ["compact", "flexible"])
@pytest.mark.parametrize("i", range(len(WALK_SCHEMAS)))
def test_random_walks_never_stop_in_a_dead_end(i, whitespace):
    schema = WALK_SCHEMAS[i]
    g = Grammar.from_json_schema(schema, whitespace=whitespace)
    rng = random.Random(i)
    n_done = n_checked = 0
    for _ in range(30):
        out = random_walk(g, rng)  # asserts a non-empty mask at every step
        if out is None:
            continue
        n_done += 1
        verdict = _valid(schema, out)
        if verdict is not None:
            n_checked += 1
            assert verdict, out
    assert n_done >= 10 and n_checked >= 5


BYTES = [bytes([b]) for b in range(256)] + [b""]  # one token per byte: any layout can be walked
B_INFO = TokenizerInfo.from_token_bytes(BYTES, [256])


def walks_end_valid(schema: dict, layout: dict, prefer: bytes, seed: int, n_walks: int = 8,
                    surely: bool = True) -> None:
    """``n_walks`` byte walks of ``schema`` compiled with ``layout`` (:func:`_byte_walk`
    asserts a non-empty mask at every step): at least half end, and jsonschema finds each
    ended text valid (``surely=False``: does not find it invalid)."""
    g = Grammar.from_json_schema(schema, **layout)
    rng = random.Random(seed)
    done = [out for out in (_byte_walk(g, rng, prefer) for _ in range(n_walks))
            if out is not None]
    assert len(done) >= n_walks // 2
    for out in done:
        assert _valid(schema, out) is True or not surely and _valid(schema, out) is None, out


def _byte_walk(g: Grammar, rng: random.Random, prefer: bytes) -> bytes | None:
    m = Matcher(g, B_INFO)
    out = b""
    while True:
        allowed = sorted(_allowed(m.compute_mask(), len(BYTES)))
        assert allowed, f"dead end after {out!r}"
        if 256 in allowed and (len(allowed) == 1 or rng.random() < 0.3):
            return out
        if len(out) > 400:
            return None
        choices = [t for t in allowed if t != 256]
        preferred = [t for t in choices if bytes([t]) in prefer]
        t = rng.choice(preferred if preferred and rng.random() < 0.9 else choices)
        m.consume(t)
        out += bytes([t])


@pytest.mark.parametrize("layout", [{"indent": 2}, {"whitespace": "flexible"}, {}])
@pytest.mark.parametrize("schema", [{**CLOSED, "minItems": 5}, {**OBJECTS, "minItems": 4},
                                    unique({**CLOSED_ITEM, "required": []}, minItems=5),
                                    {**INTS, "minItems": 5}, {**NESTED, "minItems": 4},
                                    {**ANY, "minItems": 5}, {**FINITE, "minItems": 13},
                                    {**FINITE, "minItems": 2},
                                    unique({"type": "object", "patternProperties": {
                                        "": {"type": "boolean"}}}, minItems=4),
                                    unique({"type": "object", "propertyNames": {
                                        "pattern": "^[ab]+$"}, "additionalProperties": {
                                        "type": "boolean"}}, minItems=4),
                                    unique({}, contains={"type": "integer"}, minItems=3,
                                           maxItems=4),
                                    unique({"type": "string"}, contains={"const": "a"},
                                           minItems=2, maxItems=2),
                                    unique({  # a marked array inside
                                        "type": "object", "additionalProperties": False,
                                        "properties": {"k": {"type": "integer"},
                                                       "v": unique({"type": "integer"})}},
                                        minItems=5)])
def test_byte_walks_in_every_layout_never_stop_in_a_dead_end(schema, layout):
    walks_end_valid(schema, layout, b'{}[],:"abx01 \n', 5, 12, surely=False)


@pytest.mark.parametrize("items, prompt", [
    # the model repeats its first objects: their closing braces are masked, so it adds members
    ({"type": "object"}, "A JSON list of the same thing written three times: "),
    ({"type": "integer"}, "A JSON array of the first six prime numbers: "),
    ({"type": "number"}, "A JSON array of six prices: "),
    (CLOSED_ITEM, "A JSON list of the same thing written three times: "),
    # the look-ahead: a name repeated with every flag value must be respelled or extended
    (CLOSED_FLAG_ITEM, "A JSON list of the same thing written three times: "),
    (CLOSED_NUMBER_ITEM, "A JSON list of one person written three times: "),
    # bounded languages the matcher counts (tests/test_jsonschema_unique_bounded.py,
    # tests/test_jsonschema_unique_counted.py)
    ({"type": "string", "format": "date"}, "The date 2024-01-01 four times, as a JSON list:"),
    ({"type": "string", "pattern": "^[a-z]{1,3}$"}, 'The word "ab" four times, as a JSON list:'),
    ({"type": "integer", "minimum": 1, "maximum": 65535},
     "The port 8080 four times, as a JSON list:"),
    ({"type": "integer", "minimum": 0, "maximum": 3000, "multipleOf": 7},
     "The number 7 four times, as a JSON list:"),
    ({"enum": ["a", "b", "ab", 1, 10, 11, 0, -1, True, False, None, "c", "\n", "t"]},
     "The letter a four times, as a JSON list:"),
])
def test_smollm2_generates_distinct_items(smollm2_file, items, prompt):
    import lexguide

    model = lexguide.Model.from_gguf(smollm2_file)
    schema = unique(items, minItems=3, maxItems=6)
    out = model.generate(prompt, json_schema=schema, max_tokens=400, temperature=0.0)
    assert out.finish_reason == "stop", out.text
    assert _valid(schema, out.text), out.text


@pytest.mark.parametrize("items, prompt", [
    ({"type": "object"}, "A JSON list of the same thing written three times: "),
    ({"type": "string", "format": "date"}, "The date 2024-01-01 three times, as a JSON list: "),
])
def test_cli_run_keeps_items_distinct(smollm2_file, capsys, items, prompt):
    from lexguide.cli import main

    schema = unique(items, minItems=3, maxItems=3)
    rc = main(["run", "-m", str(smollm2_file), "-q", "-p", prompt, "-n", "300", "--temp", "0",
               "-j", json.dumps(schema)])
    out = capsys.readouterr().out
    assert rc == 0 and _valid(schema, out.strip()), out


def test_server_keeps_items_distinct(smollm2_file, tmp_path):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from server_helpers import start_server

    schema = unique({"type": "integer"}, minItems=3, maxItems=3)
    server = start_server(smollm2_file, tmp_path, "--ctx", "1024")
    try:
        status, body = server.post("/v1/chat/completions", json.dumps({
            "model": "smollm2", "max_tokens": 60, "temperature": 0,
            "messages": [{"role": "user", "content": "The first three prime numbers."}],
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "t", "schema": schema}}}).encode())
    finally:
        server.stop()
    assert status == 200, body
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop", choice["message"]
    assert _valid(schema, choice["message"]["content"])
