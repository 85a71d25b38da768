"""Grammar lists ({"grammars": [...]}, llguidance's input format) and @name references."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lexguide import Grammar, GrammarError, Matcher, TokenizerInfo, TokenRejected

ARGS = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
        "additionalProperties": False}


def _list(*entries: dict) -> dict:
    return {"grammars": list(entries)}


def test_lark_refers_to_json_and_lark_entries():
    g = Grammar.from_llguidance(_list(
        {"lark_grammar": 'start: "call " @args " " @word'},
        {"name": "args", "json_schema": ARGS},
        {"name": "word", "lark_grammar": "start: WORD\nWORD: /[a-z]+/"},
    ))
    assert g.validate('call {"a": 1} hello')
    assert g.validate('call {"a":12} x')
    assert not g.validate('call {"b": 1} hello')  # the JSON entry's schema holds
    assert not g.validate('call {"a": 1} Hello')  # the Lark entry's terminal holds
    assert not g.validate('call {"a": 1}')


def test_recursive_references_between_grammars():
    g = Grammar.from_llguidance(_list(
        {"name": "expr", "lark_grammar": 'start: NUM | "(" @pair ")"\nNUM: /[0-9]+/'},
        {"name": "pair", "lark_grammar": 'start: @expr "," @expr'},
    ))
    for ok in ["1", "(1,2)", "((1,2),(3,(4,5)))"]:
        assert g.validate(ok), ok
    for bad in ["(1)", "(1,2", "((1,2),3", "(,)"]:
        assert not g.validate(bad), bad


def test_entry_zero_may_be_a_json_schema_and_text_routes_by_brace():
    text = json.dumps(_list({"json_schema": ARGS}))
    for g in (Grammar.from_llguidance(text), Grammar.parse(text)):
        assert g.validate('{"a": 5}') and not g.validate('{"a": "5"}')
    assert Grammar.from_llguidance('start: "x"').validate("x")  # no brace: one Lark grammar


def test_grammar_list_with_a_matcher_token_by_token():
    vocab = [b"<eos>", b"call ", b"{", b'"a"', b":", b"1", b"}", b" ", b"x", b"y", b'{"a":']
    info = TokenizerInfo.from_token_bytes(vocab, eos_ids=[0])
    g = Grammar.from_llguidance(_list(
        {"lark_grammar": 'start: "call " @args " " /[xy]+/'},
        {"name": "args", "json_schema": ARGS},
    ))
    m = Matcher(g, info)
    for tok in [b"call ", b'{"a":', b"1", b"}", b" ", b"x", b"y"]:
        m.consume(vocab.index(tok))
    bits = np.unpackbits(m.compute_mask().view(np.uint8), bitorder="little")
    assert bits[0] == 1  # complete: EOS allowed
    m2 = Matcher(g, info)
    m2.consume(vocab.index(b"call "))
    with pytest.raises(TokenRejected):
        m2.consume(vocab.index(b"x"))


@pytest.mark.parametrize("spec, message", [
    ({"grammars": []}, "at least one entry"),
    ({"grammar": []}, "at least one entry"),
    ({"grammars": [{"lark_grammar": "start: @nope"}]}, "unknown grammar @nope"),
    ({"grammars": [{"lark_grammar": 'start: "a"', "json_schema": {}}]}, "exactly one of"),
    ({"grammars": [{"lark_grammar": 'start: "a"'}], "max_tokens": 5}, "max_tokens on a whole grammar list"),
    ({"grammars": [{"lark_grammar": 'start: "a"', "temperature": 1}]}, "unknown key 'temperature'"),
    ({"grammars": [{"name": "a", "lark_grammar": 'start: "a"'}, {"name": "a", "json_schema": {}}]},
     "duplicate grammar name 'a'"),
    ({"grammars": [{"lark_grammar": "start: A\nA: @x"}, {"name": "x", "json_schema": {}}]},
     "cannot be used in terminals"),
    ("{not json", "not valid JSON"),
])
def test_grammar_list_errors(spec, message):
    with pytest.raises(GrammarError, match=message):
        Grammar.from_llguidance(spec)


def test_error_inside_a_referenced_grammar_points_into_its_text():
    spec = _list({"lark_grammar": "start: @inner"}, {"name": "inner", "lark_grammar": 'start: "a"\n  | undefined_rule'})
    with pytest.raises(GrammarError) as e:
        Grammar.from_llguidance(spec)
    assert "in grammar @inner" in str(e.value)
    assert (e.value.line, e.value.col) == (2, 5)
    assert "undefined_rule" in e.value.excerpt
