"""Reasoning and model-native tool calls end to end: real chat templates (tests/data/chat_templates,
copied from llama.cpp) written into a copy of the SmolLM2 GGUF, ``lexguide serve`` on it, and
the ``openai`` client.

The model is tiny, so what it says is not the point: the tests assert the shape (a reasoning
budget kept, content that validates, calls whose arguments validate, streamed deltas in
OpenAI's order), never which choice the model made.
"""

from __future__ import annotations

import json
import pytest

from server_helpers import start_server, with_chat_template

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

ANSWER = {"type": "object", "properties": {"answer": {"type": "integer"}},
          "required": ["answer"], "additionalProperties": False}
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"timezone": {"type": "string", "maxLength": 20}},
        "required": ["timezone"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "description": "Time in a timezone",
                                      "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}


@pytest.fixture(scope="module")
def servers(smollm2_file, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("agents")
    started: dict[str, object] = {}

    def get(template: str):
        if template not in started:
            started[template] = start_server(with_chat_template(smollm2_file, tmp, template), tmp,
                                             "--parallel", "2", "--ctx", "2048")
        server = started[template]
        return server, openai.OpenAI(base_url=server.url + "/v1", api_key="unused")

    yield get
    for server in started.values():
        server.stop()


def n_tokens(text: str) -> int:
    from lexguide.model_files import default_model_path
    from lexguide.tokenizer import Tokenizer

    tok = Tokenizer.from_gguf(default_model_path())
    return len(tok.encode(text, add_special=False))


# -- reasoning ----------------------------------------------------------------------------------


THINK = dict(messages=[{"role": "user", "content": "What is 17 + 25? Think step by step."}],
             model="m", max_tokens=80, temperature=0,
             response_format={"type": "json_schema",
                              "json_schema": {"name": "a", "schema": ANSWER}})


def test_reasoning_budget_then_schema(servers):
    _, client = servers("Qwen-QwQ-32B.jinja")
    r = client.chat.completions.create(**THINK, extra_body={"reasoning_budget": 12})
    msg = r.choices[0].message
    reasoning = msg.model_extra["reasoning_content"]
    assert isinstance(reasoning, str) and reasoning
    assert n_tokens(reasoning) <= 12
    assert "</think>" not in msg.content and "<think>" not in msg.content
    jsonschema.validate(json.loads(msg.content), ANSWER)
    assert r.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("field", ["thinking_budget_tokens", "thinking_token_budget"])
def test_peer_budget_fields(servers, field):
    _, client = servers("Qwen-QwQ-32B.jinja")
    r = client.chat.completions.create(**THINK, extra_body={field: 3})
    reasoning = r.choices[0].message.model_extra["reasoning_content"]
    assert n_tokens(reasoning) <= 3
    jsonschema.validate(json.loads(r.choices[0].message.content), ANSWER)


def test_reasoning_streams_before_content(servers):
    _, client = servers("Qwen-QwQ-32B.jinja")
    kinds, reasoning, content = [], [], []
    for chunk in client.chat.completions.create(**THINK, stream=True,
                                                extra_body={"reasoning_budget": 12}):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        piece = (delta.model_extra or {}).get("reasoning_content")
        if piece:
            kinds.append("r")
            reasoning.append(piece)
        if delta.content:
            kinds.append("c")
            content.append(delta.content)
    assert kinds and kinds[0] == "r" and "c" in kinds
    assert kinds == sorted(kinds, key=lambda k: k == "c")  # every reasoning delta first
    assert n_tokens("".join(reasoning)) <= 12
    jsonschema.validate(json.loads("".join(content)), ANSWER)


def test_reasoning_format_none_keeps_thoughts_in_content(servers):
    _, client = servers("Qwen-QwQ-32B.jinja")
    r = client.chat.completions.create(**THINK, extra_body={"reasoning_budget": 5,
                                                            "reasoning_format": "none"})
    msg = r.choices[0].message
    assert "reasoning_content" not in (msg.model_extra or {})
    thought, _, answer = msg.content.partition("</think>")
    assert thought and answer
    jsonschema.validate(json.loads(answer), ANSWER)


def test_enable_thinking_false_closes_the_section(servers):
    server, _ = servers("Qwen-Qwen3-0.6B.jinja")
    body = dict(THINK, chat_template_kwargs={"enable_thinking": False})
    status, r = server.post("/v1/chat/completions", json.dumps(body).encode())
    assert status == 200, r
    msg = r["choices"][0]["message"]
    assert msg.get("reasoning_content") is None
    jsonschema.validate(json.loads(msg["content"]), ANSWER)


def test_bad_reasoning_fields_are_400(servers):
    server, _ = servers("Qwen-QwQ-32B.jinja")
    for extra, param in [({"reasoning_budget": -2}, "reasoning_budget"),
                         ({"reasoning_format": "deepseek-legacy"}, "reasoning_format"),
                         ({"chat_template_kwargs": {"enable_thinking": "yes"}},
                          "chat_template_kwargs.enable_thinking"),
                         ({"reasoning_budget": 4, "thinking_token_budget": 5},
                          "thinking_token_budget")]:
        body = dict(THINK, **extra)
        status, r = server.post("/v1/chat/completions", json.dumps(body).encode())
        assert status == 400 and r["error"]["param"] == param, (extra, r)


# -- model-native tool calls --------------------------------------------------------------------


def check_calls(calls):
    """Every call names a listed function and its arguments validate; returns the names."""
    assert calls
    for call in calls:
        assert call.type == "function" and call.id
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    return [c.function.name for c in calls]


def ask(client, content, **kw):
    return client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": content}], tools=TOOLS,
        max_tokens=kw.pop("max_tokens", 120), temperature=kw.pop("temperature", 0), **kw)


def test_qwen3_required_parallel(servers):
    _, client = servers("Qwen-Qwen3-0.6B.jinja")
    r = ask(client, "What is the weather in Paris and the time in Tokyo?",
            tool_choice="required", parallel_tool_calls=True,
            extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    c = r.choices[0]
    assert c.finish_reason == "tool_calls"
    check_calls(c.message.tool_calls)


def test_qwen3_required_parallel_streamed(servers):
    _, client = servers("Qwen-Qwen3-0.6B.jinja")
    chunks = list(ask(client, "What is the weather in Paris and the time in Tokyo?",
                      tool_choice="required", parallel_tool_calls=True, stream=True,
                      extra_body={"chat_template_kwargs": {"enable_thinking": False}}))
    deltas = [tc for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
    calls: dict[int, dict] = {}
    for d in deltas:
        if d.index not in calls:  # the first delta of a call names it
            assert d.id and d.type == "function" and d.function.name in SCHEMAS
            calls[d.index] = {"name": d.function.name, "arguments": [], "id": d.id}
        else:
            assert d.id is None and d.function.name is None
        if d.function.arguments:
            calls[d.index]["arguments"].append(d.function.arguments)
    assert sorted(calls) == list(range(len(calls))) and calls
    for call in calls.values():
        assert len(call["arguments"]) > 1  # fragments as they were generated
        jsonschema.validate(json.loads("".join(call["arguments"])), SCHEMAS[call["name"]])
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "tool_calls"
    # the streamed calls are the non-streamed ones
    whole = ask(client, "What is the weather in Paris and the time in Tokyo?",
                tool_choice="required", parallel_tool_calls=True,
                extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert [(c.function.name, c.function.arguments) for c in whole.choices[0].message.tool_calls] \
        == [(c["name"], "".join(c["arguments"])) for c in calls.values()]


STEER = {"role": "system",
         "content": "You are a tool-calling assistant. Answer every question with a <tool_call>."}


def test_qwen3_auto_text_and_call(servers):
    """Under auto both kinds of answer come back well-formed: steered by a system prompt and
    sampled over a few seeds, at least one text answer and one call answer."""
    _, client = servers("Qwen-Qwen3-0.6B.jinja")
    kinds = set()
    for messages in ([{"role": "user", "content": "Say hello to me in one short sentence."}],
                     [STEER, {"role": "user", "content": "What is the weather in Paris?"}]):
        for seed in range(10):
            if kinds == {"text", "call"}:
                break
            r = client.chat.completions.create(
                model="m", messages=messages, tools=TOOLS, tool_choice="auto", max_tokens=120,
                temperature=0.7, seed=seed,
                extra_body={"chat_template_kwargs": {"enable_thinking": False}})
            c = r.choices[0]
            if c.message.tool_calls:
                assert c.finish_reason == "tool_calls"
                check_calls(c.message.tool_calls)
                kinds.add("call")
            elif c.finish_reason == "stop":
                assert c.message.content and "<tool_call>" not in c.message.content
                kinds.add("text")
    assert kinds == {"text", "call"}


@pytest.mark.parametrize("template", ["Qwen-Qwen3-0.6B.jinja", "Qwen-QwQ-32B.jinja"])
def test_thinks_then_calls(servers, template):
    _, client = servers(template)
    r = ask(client, "What is the weather in Paris?", tool_choice="required",
            extra_body={"reasoning_budget": 8})
    c = r.choices[0]
    reasoning = c.message.model_extra.get("reasoning_content")
    if template == "Qwen-QwQ-32B.jinja":  # the output starts inside the think section
        assert reasoning
    assert reasoning is None or n_tokens(reasoning) <= 8
    assert c.finish_reason == "tool_calls"
    check_calls(c.message.tool_calls)


@pytest.mark.parametrize("template", ["meta-llama-Llama-3.3-70B-Instruct.jinja",
                                      "mistralai-Mistral-Nemo-Instruct-2407.jinja"])
def test_llama_and_mistral_one_call(servers, template):
    server, client = servers(template)
    r = ask(client, "What is the weather in Paris?", tool_choice="required",
            parallel_tool_calls=False)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None
    assert len(check_calls(c.message.tool_calls)) == 1
    if template.startswith("mistral"):
        assert len(c.message.tool_calls[0].id) == 9  # what its template wants back
    # the call goes back through the template as the next turn's history
    follow = client.chat.completions.create(model="m", max_tokens=8, temperature=0, messages=[
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            c.message.tool_calls[0].model_dump(exclude_none=True)]},
        {"role": "tool", "tool_call_id": c.message.tool_calls[0].id, "content": "sunny"}],
        tools=TOOLS)
    assert follow.choices[0].finish_reason in ("stop", "length", "tool_calls")


@pytest.mark.parametrize("template", ["meta-llama-Llama-3.3-70B-Instruct.jinja",
                                      "mistralai-Mistral-Nemo-Instruct-2407.jinja"])
def test_llama_and_mistral_stream_as_they_answer(servers, template):
    _, client = servers(template)
    kw = dict(tool_choice="required", parallel_tool_calls=False)
    whole = ask(client, "What is the weather in Paris?", **kw).choices[0].message.tool_calls
    deltas = [tc for ch in ask(client, "What is the weather in Paris?", stream=True, **kw)
              if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
    assert deltas[0].function.name == whole[0].function.name and len(deltas) > 2
    assert "".join(d.function.arguments or "" for d in deltas) == whole[0].function.arguments


def test_explicit_think_markers(smollm2_file, tmp_path):
    """SmolLM2's own template names no think markers: a budget is refused, unless the server
    is given markers with --think-markers."""
    body = dict(THINK, reasoning_budget=4, messages=[
        {"role": "system", "content": "Start with <reason>, reason, then answer."},
        {"role": "user", "content": "What is 2 + 2?"}])
    for extra, status in (((), 400), (("--think-markers", "<reason>", "</reason>"), 200)):
        server = start_server(smollm2_file, tmp_path, *extra)
        try:
            got, r = server.post("/v1/chat/completions", json.dumps(body).encode())
        finally:
            server.stop()
        assert got == status, r
        if status == 400:
            assert r["error"]["param"] == "reasoning_budget"
            continue
        msg = r["choices"][0]["message"]
        assert "reasoning_content" in msg  # the markers are known: reasoning is split off
        assert msg["reasoning_content"] is None or n_tokens(msg["reasoning_content"]) <= 4
        jsonschema.validate(json.loads(msg["content"]), ANSWER)


def test_thinks_then_calls_streamed(servers):
    """Thinking (QwQ's generation prompt opens it), then calls: every reasoning delta comes
    before the first tool-call delta."""
    _, client = servers("Qwen-QwQ-32B.jinja")
    order = []
    for chunk in ask(client, "What is the weather in Paris?", tool_choice="required",
                     stream=True, extra_body={"reasoning_budget": 8}):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        if (delta.model_extra or {}).get("reasoning_content"):
            order.append("r")
        if delta.tool_calls:
            order.append("t")
        assert not delta.content  # calls only: no text
    assert "r" in order and "t" in order
    assert order == sorted(order, key=lambda k: k == "t")
