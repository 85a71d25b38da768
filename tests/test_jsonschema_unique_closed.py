"""``uniqueItems`` of objects without additional members whose rest can be finite: the last
member a number, a boolean, an enum (``lexguide.jsonschema.unique._closed_problem``). The
matcher walks the rest of an open item from the parse state once it is finite
(``UniqueItems.closed_exhausted``) and masks a token after which every completion is a
recorded value.

Oracles: ``jsonschema`` for whole texts (generated near-duplicates), a brute force over a small
vocabulary for masks, byte-level random walks (every layout) and token walks steered into
nearly exhausted items for dead ends.
"""

from __future__ import annotations

import random

import pytest

jsonschema = pytest.importorskip("jsonschema")

from test_jsonschema_unique_any import _allowed, _valid, _walk_against_brute_force
from test_jsonschema_unique_values import (
    B_INFO,
    BYTES,
    CLOSED,
    CLOSED_ENUM_ITEM,
    CLOSED_FLAG_ITEM,
    CLOSED_NUMBER_ITEM,
    _byte_walk,
    _spell_string,
    unique,
    walks_end_valid,
)

from lexguide.engine import Matcher, TokenizerInfo
from lexguide.engine.grammar import Grammar
from lexguide.errors import SchemaError, TokenRejected
from lexguide.jsonschema.unique import (
    UNIQUE_ARRAY_NAME,
    UNIQUE_CLOSED_ARRAY_NAME,
    UNIQUE_FINITE_REST_ARRAY_NAME,
)

FLAGS = unique(CLOSED_FLAG_ITEM)
AGES = unique(CLOSED_NUMBER_ITEM)
KINDS = unique(CLOSED_ENUM_ITEM)
#: an integer range and a string enum as the last member, after an open number
RANGE = unique({"type": "object", "additionalProperties": False, "required": ["x", "r"],
                "properties": {"x": {"type": "number", "minimum": 0},
                               "r": {"type": "integer", "minimum": 0, "maximum": 3}}})

VOCAB = [b"[", b"]", b",", b"{", b"}", b'"id":', b'"on":', b'"x"', b'"', b"x", b'x"', b"true",
         b"false", b"t", b"rue", b"f", b"alse", b" ", b'"name":', b'"age":', b"0", b"1", b"1}",
         b"0}", b'"x":', b'"k":', b'"a"', b"null", b'"r":', b"2", b"3", b".", b"e", b'id":', b'on":', b'name":',
         b'age":', b'x":', b'k":', b'r":', b":", b""]
EOS = len(VOCAB) - 1
INFO = TokenizerInfo.from_token_bytes(VOCAB, [EOS])
IDS = {tb: i for i, tb in enumerate(VOCAB)}

def test_objects_with_a_finite_rest_have_a_bracket_of_their_own():
    g = Grammar.from_json_schema({"type": "object", "properties": {
        "c": CLOSED, "f": FLAGS, "a": AGES, "o": unique({"type": "object"})}})
    names = sorted(g.ir.lexemes[i].name for i in g.ir.unique_item_lexemes)
    assert names == sorted([UNIQUE_ARRAY_NAME, UNIQUE_CLOSED_ARRAY_NAME,
                            UNIQUE_FINITE_REST_ARRAY_NAME])


def _consume(m: Matcher, text: list[bytes]) -> None:
    m.consume_tokens([IDS[t] for t in text])


def test_a_used_up_boolean_masks_the_quote_that_fixes_the_id():
    m = Matcher(Grammar.from_json_schema(FLAGS), INFO)
    _consume(m, [b"[", b"{", b'"id":', b'"x"', b",", b'"on":', b"true", b"}", b",",
                 b"{", b'"id":', b'"x"', b",", b'"on":', b"false", b"}", b",",
                 b"{", b'"id":', b'"', b"x"])
    got = _allowed(m.compute_mask(), len(VOCAB))
    # "x" with true and false written: closing the id here leaves only recorded objects
    assert IDS[b'"'] not in got and IDS[b'x"'] in got and IDS[b"x"] in got  # "xx" is new
    with pytest.raises(TokenRejected, match="uniqueItems"):
        m.consume(IDS[b'"'])
    m.consume_tokens([IDS[b"x"], IDS[b'x"'], IDS[b","], IDS[b'"on":']])  # "xxx" is new
    assert {IDS[b"true"], IDS[b"t"], IDS[b"false"], IDS[b"f"]} <= _allowed(m.compute_mask(),
                                                                            len(VOCAB))


def test_one_boolean_left_masks_the_other_at_its_first_letter():
    m = Matcher(Grammar.from_json_schema(FLAGS), INFO)
    _consume(m, [b"[", b"{", b'"id":', b'"x"', b",", b'"on":', b"true", b"}", b",",
                 b"{", b'"id":', b'"x"', b",", b'"on":'])
    got = _allowed(m.compute_mask(), len(VOCAB))
    assert IDS[b"t"] not in got and IDS[b"true"] not in got and IDS[b"f"] in got
    m.consume(IDS[b"f"])
    assert IDS[b"alse"] in _allowed(m.compute_mask(), len(VOCAB))


def test_an_integer_last_member_is_fixed_when_it_cannot_grow():
    m = Matcher(Grammar.from_json_schema(AGES), INFO)
    _consume(m, [b"[", b"{", b'"name":', b'"x"', b",", b'"age":', b"0}", b",",
                 b"{", b'"name":', b'"x"', b",", b'"age":', b"1"])
    got = _allowed(m.compute_mask(), len(VOCAB))
    assert IDS[b"1}"] in got and IDS[b"1"] in got and IDS[b" "] in got  # 11, or "1 }"
    m.consume(IDS[b"}"])
    m.consume_tokens([IDS[b","], IDS[b"{"], IDS[b'"name":'], IDS[b'"x"'], IDS[b","],
                      IDS[b'"age":']])
    got = _allowed(m.compute_mask(), len(VOCAB))
    assert IDS[b"0"] not in got and IDS[b"0}"] not in got  # 0 cannot grow: {"x",0} is written
    m.consume(IDS[b"1"])
    got = _allowed(m.compute_mask(), len(VOCAB))
    assert IDS[b" "] not in got and IDS[b"}"] not in got and IDS[b"1"] in got  # 1 written


def test_an_integer_range_used_up_masks_the_member_before_it():
    m = Matcher(Grammar.from_json_schema(RANGE), INFO)
    _consume(m, [b"["])
    for r in (b"0", b"1", b"2", b"3"):
        _consume(m, [b"{", b'"x":', b"1", b",", b'"r":', r, b"}", b","])
    _consume(m, [b"{", b'"x":', b"1"])
    got = _allowed(m.compute_mask(), len(VOCAB))
    # x = 1 with every r written: only a longer number (10, 1.5) is left
    assert IDS[b","] not in got and IDS[b" "] not in got
    assert {IDS[b"0"], IDS[b"."]} <= got
    m.consume(IDS[b"."])
    assert IDS[b"0"] in _allowed(m.compute_mask(), len(VOCAB))  # 1.0 ... then 1.01
    m.consume(IDS[b"0"])
    got = _allowed(m.compute_mask(), len(VOCAB))
    assert IDS[b","] not in got and IDS[b"0"] in got and IDS[b"1"] in got


def _tails(*members: bytes) -> list[bytes]:
    """Pieces that complete any prefix of an item whose members are ``members`` (key and a
    value each, in order) in a few steps: each member's rest, the rest of the object from
    each member, and the closing brackets."""
    out = [b"}", b"]", b",", b'"', b'y"', b"rue", b"alse", b"7", b"2", b".5", b"x", b"ull",
           b"{" + b",".join(members) + b"}"]
    for i in range(len(members)):
        rest = b",".join(members[i:]) + b"}"
        after = b"," + b",".join(members[i + 1:]) + b"}" if i + 1 < len(members) else b"}"
        value = members[i].split(b":", 1)[1]
        out += [rest, rest[1:], b"," + rest, value + after, value[1:] + after, after,
                b":" + value + after]
    return out


@pytest.mark.parametrize("schema, steer, tails, steps", [
    (FLAGS, (b"[", b"{", b'"id":', b'"x"', b",", b'"on":', b"true", b"t", b"f", b"}"),
     _tails(b'"id":"y"', b'"on":true') + _tails(b'"id":"y"', b'"on":false'), 36),
    (AGES, (b"[", b"{", b'"name":', b'"x"', b",", b'"age":', b"0", b"0}", b"1}", b"}"),
     _tails(b'"name":"y"', b'"age":7') + _tails(b'"name":"y"', b'"age":0'), 40),
    (KINDS, (b"[", b"{", b'"x":', b"0", b",", b'"k":', b'"a"', b"null", b"}"),
     [t for k in (b'"a"', b'"b"', b"null") for t in _tails(b'"x":7', b'"k":' + k)], 40),
    (RANGE, (b"[", b"{", b'"x":', b"0", b",", b'"r":', b"2", b"3", b"}"),
     [t for r in b"0123" for t in _tails(b'"x":7', b'"r":' + bytes([r]))], 30),
])
def test_masks_equal_brute_force(schema, steer, tails, steps):
    masked = sum(_walk_against_brute_force(schema, seed, steps, tails, steer, VOCAB, 3)
                 for seed in range(3))
    assert masked >= (schema is not RANGE)  # RANGE's walks end before x repeats 4 times


@pytest.mark.parametrize("schema, steer", [
    (FLAGS, (b"[", b"{", b'"id":', b'"x"', b",", b'"on":', b"true", b"false", b"}")),
    (AGES, (b"[", b"{", b'"name":', b'"x"', b",", b'"age":', b"0}", b"1}", b"}")),
    (RANGE, (b"[", b"{", b'"x":', b"0", b",", b'"r":', b"2", b"3", b"}", b"1")),
])
@pytest.mark.parametrize("seed", range(6))
def test_steered_walks_into_used_up_items_never_stop_in_a_dead_end(schema, steer, seed):
    schema = {**schema, "minItems": 6}
    g = Grammar.from_json_schema(schema)
    rng = random.Random(seed)
    m = Matcher(g, INFO)
    out = b""
    for _ in range(160):
        got = _allowed(m.compute_mask(), len(VOCAB))
        assert got, f"dead end after {out!r}"
        if EOS in got:
            break
        steered = [t for t in got if VOCAB[t] in steer]
        t = rng.choice(steered if steered and rng.random() < 0.95 else sorted(got))
        m.consume(t)
        out += VOCAB[t]
    else:
        return
    assert _valid(schema, out), out


@pytest.mark.parametrize("layout", [{"indent": 2}, {"whitespace": "flexible"}, {}])
@pytest.mark.parametrize("schema", [{**FLAGS, "minItems": 5}, {**AGES, "minItems": 5},
                                    {**KINDS, "minItems": 5}, {**RANGE, "minItems": 5}])
def test_byte_walks_in_every_layout_never_stop_in_a_dead_end(schema, layout):
    g = Grammar.from_json_schema(schema, **layout)
    rng = random.Random(3)
    done = [out for out in (_byte_walk(g, rng, b'{}[],:"xidonagekrtuefals01 \n')
                            for _ in range(10)) if out is not None]
    assert len(done) >= 3
    for out in done:
        assert _valid(schema, out) is not False, out
    assert len(BYTES) == 257 and B_INFO is not None


def _flag(rng: random.Random) -> str:
    members = [f'"id":{_spell_string(rng.choice(["x", "y"]), rng)}',
               f'"on":{rng.choice(["true", "false"])}']
    return "{" + rng.choice([",", ", "]).join(members) + "}"


def _age(rng: random.Random) -> str:
    return (f'{{"name":{_spell_string(rng.choice(["x", "é"]), rng)},'
            f'"age":{rng.choice(["0", "1", "-0", "10"])}}}')


@pytest.mark.parametrize("schema, pick", [(FLAGS, _flag), (AGES, _age)])
def test_validate_agrees_with_jsonschema(schema, pick):
    schema = {**schema, "x-guidance": {"json_allow_general_unicode_escapes": True}}
    g = Grammar.from_json_schema(schema)
    rng = random.Random(11)
    seen = {True: 0, False: 0}
    for _ in range(300):
        items: list[str] = []
        for _ in range(rng.randrange(5)):
            items.append(items[rng.randrange(len(items))] if items and rng.random() < 0.3
                         else pick(rng))
        text = "[" + ",".join(items) + "]"
        want = _valid(schema, text)
        assert g.validate(text) == want, text
        seen[want] += 1
    assert seen[True] >= 50 and seen[False] >= 50


# -- objects with maxProperties: open below it, a finite rest once full ---------------------
ONE_FLAG = unique({"type": "object", "maxProperties": 1,
                   "additionalProperties": {"type": "boolean"}})


def test_max_properties_objects_are_looked_ahead():
    g = Grammar.from_json_schema(ONE_FLAG)
    assert [g.ir.lexemes[i].name for i in g.ir.unique_item_lexemes] == [
        UNIQUE_FINITE_REST_ARRAY_NAME]
    assert g.validate('[{"x":true},{"x":false},{}]')
    assert not g.validate('[{"x":true},{"x":true}]')
    m = Matcher(g, B_INFO)
    for b in b'[{"x":true},{"x":false},{"x':
        m.consume(b)
    allowed = {BYTES[t] for t in _allowed(m.compute_mask(), len(BYTES))}
    assert b'"' not in allowed and b"y" in allowed  # "x" is full with both values written
    for items, why in (({"type": "object", "maxProperties": 0}, "maxProperties 0"),
                       ({"type": "object", "maxProperties": 2, "additionalProperties": False,
                         "properties": {"a": {"type": "boolean"}}}, "fresh key"),
                       (unique({"type": "object", "maxProperties": 1}), "maxProperties")):
        with pytest.raises(SchemaError, match=why):
            Grammar.from_json_schema(unique(items))


@pytest.mark.parametrize("seed", range(3))
def test_max_properties_masks_equal_brute_force(seed):
    tails = [b"}", b",", b"]", b"{", b'"y":true', b'"y":false', b":true", b":false",
             b'y":true', b"true", b"false", b"rue", b"alse"]
    steer = (b"[", b"{", b'"x":', b"true", b"false", b"}", b",")
    assert _walk_against_brute_force(ONE_FLAG, seed, 24, tails, steer, VOCAB, 4) >= 1


@pytest.mark.parametrize("layout", [{}, {"whitespace": "flexible"}])  # indented: too long
@pytest.mark.parametrize("schema", [{**ONE_FLAG, "minItems": 3},
                                    unique({"type": "object", "maxProperties": 2,
                                            "additionalProperties": {"enum": [1, 2]}},
                                           minItems=3)])
def test_max_properties_walks_never_stop_in_a_dead_end(schema, layout):
    walks_end_valid(schema, layout, b'{}[],:"ab tf12', 7, 12)
