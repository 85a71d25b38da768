"""Reasoning in the runtime: think markers and state, the split into reasoning and content
(whole and streamed), the budget counter, and ``Model.generate(reasoning_budget=)`` on
SmolLM2 with a real thinking template."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lexguide import Grammar
from lexguide.errors import ModelError
from lexguide.runtime.reasoning import (
    ReasoningStream,
    ThinkBudget,
    ThinkMarkers,
    answer_format,
    find_think_markers,
    reasoning_format,
    split_reasoning,
    think_state,
)

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
THINK = ThinkMarkers("<think>", "</think>")
ANSWER = {"type": "object", "properties": {"answer": {"type": "integer"}},
          "required": ["answer"], "additionalProperties": False}


def test_markers_and_state_from_real_templates():
    for name in ("Qwen-Qwen3-0.6B.jinja", "Qwen-QwQ-32B.jinja"):
        assert find_think_markers((TEMPLATES / name).read_text()) == THINK
    assert find_think_markers((TEMPLATES / "meta-llama-Llama-3.3-70B-Instruct.jinja")
                              .read_text()) is None
    assert think_state("<|im_start|>assistant\n<think>\n", THINK) == "open"
    assert think_state("<|im_start|>assistant\n<think>\n\n</think>\n\n", THINK) == "closed"
    assert think_state("<|im_start|>assistant\n", THINK) == "none"


@pytest.mark.parametrize("state,text,want", [
    ("open", "\nsome thought\n</think>\n\n{\"a\": 1}", ("some thought", '{"a": 1}')),
    ("none", "<think>\nhm</think>ok", ("hm", "ok")),
    ("none", "plain answer", (None, "plain answer")),
    ("none", "<thi", (None, "<thi")),
    ("open", "cut short", ("cut short", "")),
])
def test_split_whole_and_streamed(state, text, want):
    assert split_reasoning(text, THINK, state) == want
    for step in (1, 2, 5):
        stream = ReasoningStream(THINK, state)
        parts = []
        for i in range(0, len(text), step):
            parts += stream.feed(text[i:i + step])
        parts += stream.feed("", final=True)
        kinds = [k for k, _ in parts]
        assert kinds == sorted(kinds, key=lambda k: k == "content")  # reasoning first
        got = ("".join(t for k, t in parts if k == "reasoning") if stream.had_think else None,
               "".join(t for k, t in parts if k == "content"))
        assert got == want


def test_budget_counts_think_tokens_only():
    budget = ThinkBudget(THINK, "none", 2, [7, 8])
    for piece in (b"<thi", b"nk>", b"a", b"b"):
        assert budget.due() == []
        budget.feed(piece)
    assert budget.due() == [7, 8]  # two tokens inside the section: the end is due
    budget.feed(b"</think>")
    assert budget.due() == [] and not budget.thinking
    plain = ThinkBudget(THINK, "none", 0, [7])
    plain.feed(b"hello")
    assert plain.due() == [] and not plain.thinking


def test_composed_grammar_applies_after_the_section():
    g = Grammar.from_structural_tag(reasoning_format(THINK, "open", answer_format(ANSWER)))
    assert g.validate('free {not json} text</think>\n\n{"answer": 3}')
    assert not g.validate('text</think>{"answer": "x"}')
    assert not g.validate('{"answer": 3}')  # the section must end first
    g = Grammar.from_structural_tag(reasoning_format(THINK, "none", answer_format(ANSWER)))
    assert g.validate('<think>x</think>{"answer": 3}') and g.validate('{"answer": 3}')
    g = Grammar.from_structural_tag(reasoning_format(THINK, "none", answer_format(ANSWER), 0))
    assert not g.validate('<think>x</think>{"answer": 3}')  # budget 0: no thinking


@pytest.fixture(scope="module")
def thinking_model(smollm2_file):
    import lexguide

    model = lexguide.Model.from_gguf(smollm2_file)
    model.chat_template = (TEMPLATES / "Qwen-QwQ-32B.jinja").read_text()
    return model


@pytest.mark.parametrize("budget", [0, 4, 12])
def test_generate_keeps_the_budget_and_the_schema(thinking_model, budget):
    messages = [{"role": "user", "content": "What is 17 + 25? Think step by step."}]
    out = thinking_model.chat(messages, json_schema=ANSWER, reasoning_budget=budget,
                              max_tokens=60, temperature=0)
    assert out.finish_reason == "stop"
    n = len(thinking_model.tokenizer.encode(out.reasoning, add_special=False))
    assert n <= budget
    assert isinstance(json.loads(out.answer)["answer"], int)


def test_generate_answer_completes_within_max_tokens(thinking_model):
    # unlimited thinking, but max_tokens tight: the masks close the section in time
    messages = [{"role": "user", "content": "Tell me a long story, then the answer 7."}]
    out = thinking_model.chat(messages, json_schema=ANSWER, reasoning_budget=-1,
                              max_tokens=24, temperature=0)
    assert len(out.token_ids) <= 24 and out.finish_reason == "stop"
    assert isinstance(json.loads(out.answer)["answer"], int)


def test_generate_needs_markers(smollm2_file):
    import lexguide

    model = lexguide.Model.from_gguf(smollm2_file)  # SmolLM2's own template: no markers
    with pytest.raises(ModelError, match="think markers"):
        model.generate("hi", reasoning_budget=3)
    out = model.generate("Q: 2+2?\nA: <think>", reasoning_budget=2, max_tokens=20,
                         think_markers=("<think>", "</think>"), temperature=0)
    assert out.reasoning is not None
    assert len(model.tokenizer.encode(out.reasoning, add_special=False)) <= 2


def test_cli_reasoning_flags(smollm2_file, tmp_path):
    import subprocess
    import sys

    from server_helpers import with_chat_template

    model = with_chat_template(smollm2_file, tmp_path, "Qwen-QwQ-32B.jinja")
    run = [sys.executable, "-m", "lexguide.cli", "run", "-m", str(model), "--chat", "--temp",
           "0", "-n", "60", "-j", json.dumps(ANSWER), "-p", "What is 17 + 25?"]
    r = subprocess.run([*run, "--reasoning-budget", "6"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert isinstance(json.loads(r.stdout)["answer"], int)  # the answer alone on stdout
    thought = r.stderr.split("\nfinish:")[0]
    assert thought and len(thought) < 80  # six tokens of thinking on stderr
    r = subprocess.run([*run, "--reasoning-budget", "6", "--reasoning-format", "none", "-q"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "</think>" in r.stdout and r.stderr == ""
    r = subprocess.run([*run, "--reasoning-budget", "6", "--compact"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 1 and "--compact" in r.stderr


def test_end_marker_waits_for_a_split_character():
    """The budget runs out after half of a two-byte character: the end marker is forced only
    once the next token finishes it (the grammar would not take it before)."""
    from lexguide import Matcher, TokenizerInfo
    from lexguide.runtime.generate import think_end

    vocab = [b"a", b"\xc3", b"\xa9", b"</think>", b"{", b"}", b"</s>"]
    info = TokenizerInfo.from_token_bytes(vocab, eos_ids=[6])
    grammar = Grammar.from_structural_tag(reasoning_format(THINK, "open", answer_format()))
    matcher = Matcher(grammar, info)
    think = ThinkBudget(THINK, "open", 1, [3])
    matcher.consume(1)
    think.feed(vocab[1])
    assert think.due() == [3]
    assert think_end(matcher, think, 10) == []  # mid-character: not yet
    matcher.consume(2)
    think.feed(vocab[2])
    assert think_end(matcher, think, 10) == [3] and not think.thinking
    assert think_end(matcher, ThinkBudget(THINK, "open", 0, [3]), 0) == []  # no room left
