"""``Model.generate(structural_tag=...)``: the tag alone, after a think section, and the
argument errors (SmolLM2; skipped without it)."""

from __future__ import annotations

import json
import re

import pytest

from lexguide.errors import GrammarError, ModelError

CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16}},
        "required": ["city"], "additionalProperties": False}
CALL = {"type": "tag", "begin": "<tool_call>", "end": "</tool_call>",
        "content": {"type": "json_schema", "json_schema": CITY}}
PATTERN = ('Q: Weather in Rome?\nA: Let me check. <tool_call>{"city": "Rome"}</tool_call>\n'
           "Q: Weather in Paris?\nA:")


@pytest.fixture(scope="module")
def model(smollm2_file):
    from lexguide import Model

    return Model.from_gguf(smollm2_file, n_ctx=256, n_threads=1)


def _call(text: str) -> dict:
    m = re.fullmatch(r"<tool_call>(.*)</tool_call>", text, re.DOTALL)
    assert m, text
    value = json.loads(m.group(1))
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(value, CITY)
    return value


def test_free_text_then_one_tag(model):
    spec = {"type": "structural_tag", "format": {"type": "triggered_tags",
                                                 "triggers": ["<tool_call>"], "tags": [CALL],
                                                 "stop_after_first": True}}
    out = model.generate(PATTERN, max_tokens=48, temperature=0, structural_tag=spec)
    prose, _, call = out.text.partition("<tool_call>")
    assert prose.strip() and out.finish_reason == "stop", out.text
    _call("<tool_call>" + call)
    # the same as JSON text, and in the legacy shape
    assert model.generate(PATTERN, max_tokens=48, temperature=0,
                          structural_tag=json.dumps(spec)).text == out.text
    legacy = {"structures": [{"begin": "<tool_call>", "schema": CITY, "end": "</tool_call>"}],
              "triggers": ["<tool_call>"], "at_least_one": True}
    text = model.generate("Weather in Paris:", max_tokens=48, temperature=0,
                          structural_tag=legacy).text
    _call(text[:text.index("</tool_call>") + len("</tool_call>")])


def test_after_a_think_section(model):
    """The prompt opens the think section: the output thinks (at most 3 tokens, then the
    forced end marker), then is the tag."""
    spec = {"type": "structural_tag", "format": {"type": "triggered_tags",
                                                 "triggers": ["<tool_call>"], "tags": [CALL],
                                                 "at_least_one": True,
                                                 "stop_after_first": True}}
    out = model.generate("Weather in Paris? <think>", max_tokens=64, temperature=0,
                         structural_tag=spec, reasoning_budget=3,
                         think_markers=("<think>", "</think>"))
    assert out.finish_reason == "stop" and out.reasoning, out.text
    _call(out.answer.strip())


def test_argument_errors(model):
    spec = {"type": "structural_tag", "format": {"type": "const_string"}}
    with pytest.raises(GrammarError, match=r"\$\.format"):
        model.generate("x", max_tokens=2, structural_tag=spec)
    with pytest.raises(GrammarError, match=r"\$\.format"):  # located in the caller's spec
        model.generate("x <think>", max_tokens=2, structural_tag=spec,
                       think_markers=("<think>", "</think>"))
    with pytest.raises(ModelError, match="not several"):
        model.generate("x", max_tokens=2, structural_tag={"type": "any_text"},
                       grammar='root ::= "a"')
