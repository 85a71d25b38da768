"""Structural tags on the real SmolLM2: a tag that must appear does appear, complete, within
``max_tokens`` (the budget-aware mask ends the free text in time). Skips without the model."""

from __future__ import annotations

import json

import pytest

from lexguide import Grammar, Matcher, Model

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                           "days": {"type": "integer", "minimum": 1}},
          "required": ["city", "days"], "additionalProperties": False}
TOOL = {"type": "tag", "begin": "<tool_call>", "end": "</tool_call>",
        "content": {"type": "json_schema", "json_schema": SCHEMA}}
SPECS = {
    # the tag first, then free text with more tags
    "at_least_one": {"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [TOOL],
                     "at_least_one": True},
    # free text, then a tag that must close the output
    "text_then_tag": {"type": "sequence", "elements": [{"type": "any_text"}, TOOL]},
    # thinking, then exactly one tool call (the Qwen3 shape)
    "think_then_call": {"type": "sequence", "elements": [
        {"type": "tag", "begin": "<think>", "content": {"type": "any_text"}, "end": "</think>"},
        {"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [TOOL],
         "at_least_one": True, "stop_after_first": True}]},
}
PROMPT = "The weather tool takes a city and a number of days. Call it for Paris.\n"


@pytest.fixture(scope="module")
def model(smollm2_file):
    return Model.from_gguf(smollm2_file)


def _tag_json(text: str) -> dict:
    start = text.index("<tool_call>") + len("<tool_call>")
    return json.loads(text[start : text.index("</tool_call>", start)])


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("factor", [1, 2, 4])
def test_a_required_tag_appears_complete_within_the_budget(model, name, factor):
    grammar = Grammar.from_structural_tag({"type": "structural_tag", "format": SPECS[name]})
    c = Matcher(grammar, model.tokenizer_info).min_completion()
    assert c is not None and c > 5  # the tag itself takes tokens: an empty output is no answer
    n = c * factor
    out = model.generate(PROMPT, grammar=grammar, max_tokens=n, temperature=0)
    assert out.finish_reason == "stop", (name, c, n, out.text)
    assert len(out.token_ids) <= n
    assert grammar.validate(out.text.encode()), out.text
    args = _tag_json(out.text)
    assert set(args) == {"city", "days"} and args["days"] >= 1


def test_sampled_outputs_hold_the_tag(model):
    grammar = Grammar.from_structural_tag(SPECS["text_then_tag"])
    for seed in range(3):
        out = model.generate(PROMPT, grammar=grammar, max_tokens=48, temperature=1.0, seed=seed)
        assert out.finish_reason == "stop", out.text
        assert out.text.endswith("</tool_call>") and grammar.validate(out.text.encode())


@pytest.mark.parametrize("budget", [4, 12])
def test_a_thinking_budget_forces_the_end_of_thinking(model, budget):
    spec = {"type": "sequence", "elements": [
        {"type": "tag", "begin": "<think>", "end": "</think>",
         "content": {"type": "any_text", "max_tokens": budget}}, TOOL]}
    grammar = Grammar.from_structural_tag(spec)
    out = model.generate(PROMPT, grammar=grammar, max_tokens=budget + 60, temperature=0)
    assert out.finish_reason == "stop", out.text
    assert grammar.validate(out.text.encode())
    thinking = out.text[len("<think>") : out.text.index("</think>")]
    assert len(model.tokenizer.encode(thinking, add_special=False)) <= budget + 1, thinking
    assert set(_tag_json(out.text)) == {"city", "days"}
