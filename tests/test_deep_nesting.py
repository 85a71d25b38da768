"""Deep input is a located error in every front end (lexguide.limits), never a RecursionError.

Property tests: hypothesis draws a nesting depth and one construct per level; up to the limit
the grammar compiles and accepts the expected string, past it the front end raises its own
typed error with a location (line:col, regex offset, JSON pointer). Anything else (a
``RecursionError``, an untyped error) fails the test.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lexguide import Grammar
from lexguide.errors import GrammarError, RegexError, SchemaError
from lexguide.limits import MAX_JSON_DEPTH, MAX_NESTING_DEPTH, json_text_too_deep

LIMIT = MAX_NESTING_DEPTH
SETTINGS = settings(max_examples=10, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])
# inside the limit, at the limit, just past it, far past it
depths = st.one_of(st.integers(1, LIMIT), st.integers(LIMIT + 1, LIMIT + 3),
                   st.integers(LIMIT + 4, 3000))


def kinds(n_kinds: int, depth: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, n_kinds - 1), min_size=depth, max_size=depth)


# -- grammar texts: one construct per level, each one group deeper; (text, accepted string) --
_GROUP = [  # (prefix, suffix, accepted prefix, accepted suffix) in GBNF and in the Lark variant
    ('(', ')', "", ""),
    ('("x" ', ' | "y")', "x", ""),
    ('(', ')*', "", ""),
    ('(', ')?', "", ""),
    ('"z" (', ')+', "z", ""),
]


def _nested(levels: list[int]) -> tuple[str, str]:
    body, accepted = '"a"', "a"
    for k in levels:
        pre, post, apre, apost = _GROUP[k]
        body, accepted = pre + body + post, apre + accepted + apost
    return body, accepted


def _located(e: GrammarError, text: str) -> None:
    assert e.line is not None and e.col is not None, str(e)
    assert "nested" in str(e)
    assert 1 <= e.line <= text.count("\n") + 1


_GRAMMAR_TEXT = {
    "gbnf": (lambda body: f"root ::= {body}\n", Grammar.from_gbnf),
    "lark": (lambda body: f"%llguidance {{}}\nstart: {body}\n", Grammar.from_lark),
}


@pytest.mark.parametrize("front_end", sorted(_GRAMMAR_TEXT))
@SETTINGS
@given(data=st.data())
def test_grammar_deep_groups(front_end, data):
    make_text, compile_text = _GRAMMAR_TEXT[front_end]
    depth = data.draw(depths)
    body, accepted = _nested(data.draw(kinds(len(_GROUP), depth)))
    text = make_text(body)
    if depth <= LIMIT:
        assert compile_text(text).validate(accepted)
    else:
        with pytest.raises(GrammarError) as info:
            compile_text(text)
        _located(info.value, text)


_RX_GROUP = [("(", ")", ""), ("(?:x|", ")", ""), ("(", ")*", ""), ("(?:", ")?", ""),
             ("[z](", ")+", "z")]


@SETTINGS
@given(st.data())
def test_regex_deep_groups(data):
    depth = data.draw(depths)
    pattern, accepted = "a", "a"
    for k in data.draw(kinds(len(_RX_GROUP), depth)):
        pre, post, apre = _RX_GROUP[k]
        pattern, accepted = pre + pattern + post, apre + accepted
    if depth <= LIMIT:
        assert Grammar.from_regex(pattern).validate(accepted)
    else:
        with pytest.raises(RegexError) as info:
            Grammar.from_regex(pattern)
        assert info.value.offset is not None and 0 <= info.value.offset < len(pattern)


# -- JSON Schema: one subschema (or one $ref hop) per level ------------------------------------
def _schema(levels: list[int]) -> tuple[dict, str]:
    """A schema nesting ``len(levels)`` subschemas (the root is level 1) and a valid instance."""
    defs: dict[str, dict] = {}
    s: dict = {"type": "integer"}
    inst = "1"
    for k in levels[:-1]:  # the root is the last level
        if k == 0:
            s, inst = {"type": "array", "items": s}, f"[{inst}]"
        elif k == 1:
            s = {"type": "object", "properties": {"a": s}, "required": ["a"]}
            inst = f'{{"a":{inst}}}'
        elif k == 2:
            s = {"allOf": [s]}
        elif k == 3:
            s = {"anyOf": [s, {"type": "null"}]}
        elif k == 4:
            s, inst = {"type": "object", "additionalProperties": s, "minProperties": 1}, \
                f'{{"k":{inst}}}'
        else:  # a $ref hop to a definition
            name = f"d{len(defs)}"
            defs[name] = s
            s = {"$ref": f"#/$defs/{name}"}
    return ({**s, "$defs": defs} if defs else s), inst


@SETTINGS
@given(st.data())
def test_json_schema_deep(data):
    depth = data.draw(depths)
    levels = data.draw(kinds(6, depth))
    schema, inst = _schema(levels)
    if depth <= LIMIT:
        assert Grammar.from_json_schema(schema).validate(inst)
        return
    # Each pass counts its own recursion: a definition reached by $ref is built from depth 0,
    # and allOf of one schema leaves no node to compile, so such mixes may legitimately stay
    # within both passes' limits; they must then compile correctly. Anything else must fail.
    try:
        grammar = Grammar.from_json_schema(schema)
    except SchemaError as err:
        e = err
    else:
        assert {2, 5} & set(levels[:-1]), "a plain nesting past the limit must be refused"
        assert grammar.validate(inst)
        return
    assert e.pointer.startswith("/") and "nested" in str(e), str(e)[:300]
    # the pointer names a real place in the schema
    node = schema
    for tok in e.pointer.split("/")[1:]:
        tok = tok.replace("~1", "/").replace("~0", "~")
        node = node[int(tok)] if isinstance(node, list) else node[tok]


@SETTINGS
@given(st.integers(1, 3 * MAX_JSON_DEPTH), st.sampled_from(["[", '{"a":']))
def test_json_schema_text_deep(depth, opener):
    """Deep JSON text (in a const) is refused before ``json.loads`` could recurse."""
    value = opener * depth + "1" + ("]" if opener == "[" else "}") * depth
    text = '{"const": ' + value + "}"
    if depth < LIMIT:  # the root schema is one level, each array or object in the const one more
        assert Grammar.from_json_schema(text).validate(value.replace(":", ": "))
        return
    with pytest.raises(SchemaError) as info:
        Grammar.from_json_schema(text)
    if depth + 1 > MAX_JSON_DEPTH:  # refused on the text: json.loads is never called
        assert "line 1:" in str(info.value)
    else:
        assert info.value.pointer.startswith("/const/")
    if depth < 5000:
        with pytest.raises(SchemaError) as info:  # the same value given as a dict
            Grammar.from_json_schema({"const": json.loads(value)})
        assert info.value.pointer.startswith("/const/")


def test_ref_chain_and_allof_tower_locations():
    chain = {"$defs": {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(500)},
             "$ref": "#/$defs/d0"}
    chain["$defs"]["d500"] = {"type": "integer"}
    with pytest.raises(SchemaError) as info:
        Grammar.from_json_schema(chain)
    assert info.value.pointer == f"/$defs/d{LIMIT}"  # the target of the hop one too many
    tower: dict = {"type": "integer"}
    for _ in range(LIMIT + 5):  # within MAX_JSON_DEPTH: refused by the schema pass itself
        tower = {"allOf": [tower]}
    with pytest.raises(SchemaError) as info:
        Grammar.from_json_schema(tower)
    assert info.value.pointer == "/allOf/0" * LIMIT


def test_lark_inline_json_and_grammar_list_deep():
    text = '%llguidance {}\nstart: %json ' + '{"items":' * 1000 + "{}" + "}" * 1000 + "\n"
    with pytest.raises(GrammarError) as info:
        Grammar.from_lark(text)
    assert info.value.line == 2 and "nested" in str(info.value)
    spec = '{"grammars": [{"json_schema": ' + "[" * 5000 + "]" * 5000 + "}]}"
    with pytest.raises(GrammarError) as info:
        Grammar.from_llguidance(spec)
    assert info.value.line == 1 and info.value.col is not None


def test_gbnf_long_rule_chains_compile():
    """Chains of rules are not nesting: they compile at any length (no recursion across rules)."""
    n = 400  # several Python frames per rule would pass the recursion limit
    regular = "root ::= r0\n" + "".join(f'r{i} ::= "x" r{i + 1} | "y"\n' for i in range(n))
    regular += f'r{n} ::= "a"\n'
    assert Grammar.from_gbnf(regular).validate("xxy")
    tokens = "root ::= r0\n" + "".join(f'r{i} ::= "x" r{i + 1} | <[5]>\n' for i in range(n))
    tokens += f'r{n} ::= "a"\n'
    Grammar.from_gbnf(tokens)


def test_json_text_too_deep_skips_strings():
    assert json_text_too_deep('{"a": "[[[[[[["}', limit=2) is None
    assert json_text_too_deep('[[["x"]]]', limit=2) == 2
    assert json_text_too_deep("[[]] [[[[[", limit=2) is None  # only the first value counts


@pytest.mark.parametrize("front_end", ["json_schema", "gbnf"])
def test_matcher_walks_the_deepest_accepted_nesting(front_end):
    """The passes after the front ends (IR, lexer/parser, masks) take the limit too."""
    from lexguide import Matcher, TokenizerInfo

    vocab = [b"[", b"]", b"1", b"</s>"]
    depth = LIMIT - 1  # the root is one more level
    if front_end == "json_schema":
        schema: dict = {"type": "integer"}
        for _ in range(depth):
            schema = {"type": "array", "items": schema}
        grammar = Grammar.from_json_schema(schema, whitespace="compact")
    else:
        grammar = Grammar.from_gbnf("root ::= " + '("[" ' * depth + '"1"' + ' "]")' * depth)
    matcher = Matcher(grammar, TokenizerInfo.from_token_bytes(vocab, eos_ids=[3]))
    for token in [0] * depth + [2] + [1] * depth:
        mask = matcher.compute_mask()
        assert mask[token >> 5] >> (token & 31) & 1
        matcher.consume(token)
    assert matcher.is_accepting()
