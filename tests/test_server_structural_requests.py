"""Structural tags and lazy grammars in the server's requests, without a model: what the
parser takes and refuses, what the grammar cache compiles, how ``plan_chat`` composes them
with a think section (a stand-in model with a template that names think markers)."""

from __future__ import annotations

import json

import pytest

from lexguide import Grammar
from lexguide.server.constraints import GrammarCache, plan_chat
from lexguide.server.protocol import (
    RequestError,
    error_from_exception,
    parse_chat_request,
    parse_completion_request,
)

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CALL = {"type": "tag", "begin": "<tool_call>", "end": "</tool_call>",
        "content": {"type": "json_schema", "json_schema": CITY}}
TAG = {"type": "structural_tag", "format": {"type": "triggered_tags",
                                             "triggers": ["<tool_call>"], "tags": [CALL]}}
LEGACY = {"type": "structural_tag", "triggers": ["<tool_call>"], "at_least_one": True,
          "structures": [{"begin": "<tool_call>", "schema": CITY, "end": "</tool_call>"}]}
DIGITS = 'root ::= "<n>" [0-9]+ "</n>"'
MSG = [{"role": "user", "content": "hi"}]


def compiled(body, parse=parse_completion_request):
    req = parse({"prompt": "x", **body} if parse is parse_completion_request
                else {"messages": MSG, **body})
    return GrammarCache().get(req.constraint, req)


def error(body, parse=parse_completion_request):
    """(param, code, message) of the 400 a body gets, whether parsing or compiling fails."""
    with pytest.raises(Exception) as e:
        compiled(body, parse)
    status, err = error_from_exception(e.value, getattr(e.value, "param", None))
    assert status == 400, err
    return err["error"]["param"], err["error"]["code"], err["error"]["message"]


def test_both_shapes_compile_to_the_tag_language():
    g = compiled({"response_format": TAG}, parse_chat_request)
    assert g.validate('prose <tool_call>{"city": "Paris"}</tool_call> more')
    assert not g.validate('prose <tool_call>{"town": "Paris"}</tool_call>')
    g = compiled({"response_format": LEGACY})
    assert g.validate('<tool_call>{"city": "Paris"}</tool_call>')
    assert not g.validate('prose <tool_call>{"city": "Paris"}</tool_call>')  # at_least_one


def test_lazy_grammar_compiles_to_free_text_then_the_grammar():
    for triggers in (["<n>"], [{"type": "word", "value": "<n>"}], [{"type": 1, "value": "<n>"}]):
        g = compiled({"grammar": DIGITS, "grammar_lazy": True, "grammar_triggers": triggers})
        assert g.validate("text <n>12</n>") and g.validate("no trigger at all")
        assert not g.validate("text <n>x</n>")
    # grammar_lazy: false is an ordinary grammar
    g = compiled({"grammar": DIGITS, "grammar_lazy": False})
    assert g.validate("<n>1</n>") and not g.validate("text <n>1</n>")


@pytest.mark.parametrize("body, param, code, message", [
    ({"response_format": {**TAG, "format": {**TAG["format"], "tags": [{**CALL, "end": 5}]}}},
     "response_format", "invalid_grammar", "$.format.tags[0].end"),
    ({"response_format": {"type": "structural_tag", "format": {"type": "nope"}}},
     "response_format", "invalid_grammar", "$.format.type"),
    ({"response_format": {"type": "structural_tag", "format": {"type": "json_schema",
                                                               "json_schema": {"type": 5}}}},
     "response_format", "invalid_schema", "/type"),
    ({"response_format": {**LEGACY, "structures": [{"begin": "<a>", "schema": {}}]}},
     "response_format", "invalid_grammar", "$.structures[0]: missing field 'end'"),
    ({"response_format": {"type": "structural_tag", "format": {}, "extra": 1}},
     "response_format", "invalid_grammar", "unknown field 'extra'"),
    ({"response_format": {"type": "xml"}}, "response_format.type", "invalid_value",
     "structural_tag"),
    ({"response_format": TAG, "regex": "a"}, "regex", "conflicting_parameters",
     "structural_tag"),
    ({"grammar_lazy": True, "grammar_triggers": ["<n>"]}, "grammar_lazy",
     "missing_required_parameter", "needs grammar"),
    ({"json_schema": CITY, "grammar_lazy": True, "grammar_triggers": ["<n>"]}, "grammar_lazy",
     "missing_required_parameter", "needs grammar"),
    ({"grammar": DIGITS, "grammar_lazy": True}, "grammar_triggers",
     "missing_required_parameter", "non-empty list"),
    ({"grammar": DIGITS, "grammar_lazy": True, "grammar_triggers": "<n>"}, "grammar_triggers",
     "invalid_type", "non-empty list"),
    ({"grammar": DIGITS, "grammar_triggers": ["<n>"]}, "grammar_triggers", "invalid_value",
     "grammar_lazy: true"),
    ({"grammar": DIGITS, "grammar_lazy": 1, "grammar_triggers": ["<n>"]}, "grammar_lazy",
     "invalid_type", "boolean"),
    ({"grammar": DIGITS, "grammar_lazy": True, "grammar_triggers": [{"type": "pattern",
                                                                      "value": "<n>[a-z]*"}]},
     "grammar_triggers", "invalid_grammar", "lazy grammar trigger 0"),
    ({"grammar": 'root ::= "<n>" nope', "grammar_lazy": True, "grammar_triggers": ["<n>"]},
     "grammar", "invalid_grammar", "line 1:"),
])
def test_refused_with_the_field_and_the_location(body, param, code, message):
    got = error(body)
    assert got[:2] == (param, code) and message in got[2], got


@pytest.mark.parametrize("extra", [{"response_format": TAG},
                                   {"grammar": DIGITS, "grammar_lazy": True,
                                    "grammar_triggers": ["<n>"]}])
def test_not_beside_tools(extra):
    tools = [{"type": "function", "function": {"name": "f", "parameters": CITY}}]
    with pytest.raises(RequestError) as e:
        parse_chat_request({"messages": MSG, "tools": tools, **extra})
    assert e.value.code == "conflicting_parameters" and "tools" in e.value.detail


class ThinkingModel:
    """What plan_chat reads of a model: a rendered prompt that opens <think> (the markers
    are given to plan_chat, as ``serve --think-markers`` does)."""

    chat_template = None

    def render_chat(self, messages, **variables):
        return messages[0]["content"] + "<think>\n"


MARKERS = ("<think>", "</think>")


def test_a_structural_tag_is_composed_after_the_think_section():
    req = parse_chat_request({"messages": MSG, "response_format": TAG, "reasoning_budget": 4})
    plan_chat(ThinkingModel(), req, MARKERS)
    assert req.think is not None and req.base_constraint.kind == "structural_tag"
    g = GrammarCache().get(req.constraint, req)
    assert g.validate('hmm</think>\n<tool_call>{"city": "Paris"}</tool_call>')
    assert not g.validate('hmm</think>\n<tool_call>{"town": "Paris"}</tool_call>')
    # a bad spec is located in the request's own spec, not in the composed one
    bad = {**TAG, "format": {**TAG["format"], "tags": [{**CALL, "end": 5}]}}
    req = parse_chat_request({"messages": MSG, "response_format": bad})
    plan_chat(ThinkingModel(), req, MARKERS)
    with pytest.raises(Exception) as e:
        GrammarCache().get(req.constraint, req)
    assert "$.format.tags[0].end" in str(e.value) and e.value.param == "response_format"
    # a malformed envelope fails in plan_chat, with the field
    req = parse_chat_request({"messages": MSG, "response_format": {"type": "structural_tag"}})
    with pytest.raises(Exception) as e:
        plan_chat(ThinkingModel(), req, MARKERS)
    assert "missing field 'format'" in str(e.value) and e.value.param == "response_format"


def test_a_lazy_grammar_after_a_think_section_is_refused():
    req = parse_chat_request({"messages": MSG, "grammar": DIGITS, "grammar_lazy": True,
                              "grammar_triggers": ["<n>"]})
    with pytest.raises(RequestError) as e:
        plan_chat(ThinkingModel(), req, MARKERS)
    assert e.value.param == "grammar_lazy" and e.value.code == "unsupported_parameter"


def test_the_cache_keeps_one_grammar_per_spec():
    cache = GrammarCache()
    req = parse_completion_request({"prompt": "x", "response_format": TAG})
    assert cache.get(req.constraint, req) is cache.get(req.constraint, req)
    assert cache.hits == 1
    assert isinstance(cache.cached(req.constraint, req), Grammar)
    assert json.loads(req.constraint.source) == TAG
