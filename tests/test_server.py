"""End to end: the official ``openai`` client against a real ``lexguide serve`` (SmolLM2).

One server process for the module (127.0.0.1, a free port, 4 slots, context 1024). Greedy
decoding and small ``max_tokens`` keep it to a few seconds per request.
"""

from __future__ import annotations

import json
import re
import time

import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from server_helpers import PERSON, Server, start_server

CTX = 1024
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                       "required": ["city"], "additionalProperties": False},
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a time zone",
        "parameters": {"type": "object",
                       "properties": {"zone": {"enum": ["UTC", "CET", "PST"]}},
                       "required": ["zone"], "additionalProperties": False},
    },
}

CALLED = [  # a conversation where the assistant called get_weather and got its result
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
]


@pytest.fixture(scope="module")
def server(smollm2_file, tmp_path_factory) -> Server:
    s = start_server(smollm2_file, tmp_path_factory.mktemp("server"), "--parallel", "4",
                     "--ctx", str(CTX))
    yield s
    s.stop()
    log = s.log.read_text()
    assert "Traceback" not in log, log  # bad input never prints a traceback


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                         timeout=120)


def chat(client, content, **kw):
    kw.setdefault("max_tokens", 24)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": content}], **kw)


# -- plain endpoints --------------------------------------------------------------------------


def test_health_models_metrics_and_404(server, client):
    assert server.get_json("/health")["status"] == "ok"
    models = client.models.list().data
    assert len(models) == 1 and models[0].id.startswith("SmolLM2")
    status, body = server.get("/metrics")
    text = body.decode()
    assert status == 200
    for name in ("lexguide_requests_total", "lexguide_completion_tokens_total",
                 "lexguide_queue_depth", "lexguide_mask_seconds_total",
                 "lexguide_forward_seconds_total"):
        assert f"# TYPE {name} " in text
    status, body = server.get("/v1/nothing")
    assert status == 404 and set(json.loads(body)["error"]) == {"message", "type", "param", "code"}


def test_chat_usage_and_finish(client):
    r = chat(client, "Say hello.", max_tokens=8)
    c = r.choices[0]
    assert r.object == "chat.completion" and c.message.role == "assistant" and c.message.content
    assert c.finish_reason in ("stop", "length")
    assert 0 < r.usage.completion_tokens <= 8
    assert r.usage.prompt_tokens > 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_completion_matches_reference(client):
    r = client.completions.create(model="smollm2", prompt="The capital of France is",
                                  max_tokens=3, temperature=0)
    # llama.cpp's greedy continuation (models.md): " Paris.\n\n..."
    assert r.choices[0].text.startswith(" Paris")
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == 5 and r.usage.completion_tokens == 3


def test_stop_string(client):
    r = client.completions.create(model="smollm2", prompt="Count: 1, 2, 3, 4,", max_tokens=12,
                                  temperature=0, stop=[" 7"])
    assert r.choices[0].text == " 5, 6,"
    assert r.choices[0].finish_reason == "stop"


def test_stream_equals_whole_answer(client):
    whole = chat(client, "Name three fruits.", max_tokens=12)
    chunks = list(chat(client, "Name three fruits.", max_tokens=12, stream=True,
                       stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert len(chunks) > 3  # really streamed, not one block


def test_stream_ends_with_done(server):
    with httpx.stream("POST", server.url + "/v1/completions", timeout=60, json={
            "prompt": "Hello", "max_tokens": 4, "temperature": 0, "stream": True}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    assert all(line.startswith("data: ") for line in lines)


def test_seed_and_n(client):
    # extra_body overrides chat()'s greedy defaults: plain sampling at temperature 1
    kw = {"max_tokens": 8, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    a = chat(client, "Name a color.", n=2, seed=7, extra_body=kw)
    b = chat(client, "Name a color.", n=2, seed=7, extra_body=kw)
    assert [c.index for c in a.choices] == [0, 1]
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]
    assert a.choices[0].message.content != a.choices[1].message.content
    one = chat(client, "Name a color.", seed=7, extra_body=kw)
    assert one.choices[0].message.content == a.choices[0].message.content  # choice i: seed + i
    assert a.usage.prompt_tokens == one.usage.prompt_tokens  # the prompt counts once
    assert one.usage.completion_tokens < a.usage.completion_tokens <= 16


# -- structured outputs -----------------------------------------------------------------------


def test_json_schema(client):
    r = chat(client, "Invent a person.", max_tokens=40, response_format={
        "type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}})
    c = r.choices[0]
    assert c.finish_reason == "stop"
    jsonschema.validate(json.loads(c.message.content), PERSON)


def test_json_schema_stream(client):
    chunks = list(chat(client, "Invent a person.", max_tokens=40, stream=True,
                       extra_body={"json_schema": PERSON}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    jsonschema.validate(json.loads(text), PERSON)


def test_json_schema_unique_items(client):
    """Items of a bounded language kept distinct while the model repeats itself, and a
    uniqueItems the compiler cannot enforce refused with its location."""
    schema = {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,3}$"},
              "uniqueItems": True, "minItems": 4, "maxItems": 4}
    r = chat(client, 'The word "ab" four times, as a JSON list.', max_tokens=60,
             response_format={"type": "json_schema", "json_schema": {"name": "w",
                                                                      "schema": schema}})
    c = r.choices[0]
    assert c.finish_reason == "stop", c.message.content
    value = json.loads(c.message.content)
    jsonschema.validate(value, schema)
    assert len(set(value)) == 4
    body = _bad(lambda: chat(client, "x", response_format={"type": "json_schema", "json_schema": {
        "name": "n", "schema": {"type": "array", "uniqueItems": True, "items": {
            "type": "object", "maxProperties": 2, "additionalProperties": False}}}}))
    assert body["code"] == "invalid_schema" and "/uniqueItems" in body["message"]


def test_json_object(client):
    r = chat(client, "Reply with an empty JSON object.", max_tokens=16,
             response_format={"type": "json_object"})
    c = r.choices[0]
    if c.finish_reason == "stop":
        assert isinstance(json.loads(c.message.content), dict)
    else:  # cut by max_tokens: still a prefix of an object
        assert c.message.content.lstrip().startswith("{")


def test_gbnf_and_lark_grammars(client):
    r = chat(client, "Is the sky blue?", max_tokens=8,
             extra_body={"grammar": 'root ::= ("yes" | "no") "."'})
    assert r.choices[0].message.content in ("yes.", "no.")
    assert r.choices[0].finish_reason == "stop"
    lark = '%llguidance {}\nstart: "Answer: " NUM\nNUM: /[0-9]{1,3}/\n'
    r = chat(client, "What is 6 times 7?", max_tokens=8, extra_body={"grammar": lark})
    assert re.fullmatch(r"Answer: [0-9]{1,3}", r.choices[0].message.content)


def test_regex(client):
    r = client.completions.create(model="smollm2", prompt="Phone: ", max_tokens=12, temperature=0,
                                  extra_body={"regex": "[0-9]{3}-[0-9]{4}"})
    assert re.fullmatch(r"[0-9]{3}-[0-9]{4}", r.choices[0].text)
    assert r.choices[0].finish_reason == "stop"


# -- tools ------------------------------------------------------------------------------------


def _check_call(call, tools):
    fn = {t["function"]["name"]: t["function"] for t in tools}[call.function.name]
    assert call.type == "function" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), fn["parameters"])


def test_tool_required(client):
    r = chat(client, "What is the weather in Paris?", max_tokens=40, tools=[WEATHER, TIME],
             tool_choice="required")
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None
    assert len(c.message.tool_calls) == 1
    _check_call(c.message.tool_calls[0], [WEATHER, TIME])


def test_tool_named_function(client):
    r = chat(client, "What is the weather in Paris?", max_tokens=40, tools=[WEATHER, TIME],
             tool_choice={"type": "function", "function": {"name": "get_time"}})
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "get_time"
    _check_call(call, [WEATHER, TIME])


def test_tool_auto(client):
    # a plain question: greedy SmolLM2 answers in text; either way the grammar decides, so
    # it is either a valid call or text that does not start like one
    r = chat(client, "What is the weather in Paris?", max_tokens=30, tools=[WEATHER],
             tool_choice="auto")
    c = r.choices[0]
    if c.message.tool_calls:
        assert c.finish_reason == "tool_calls"
        _check_call(c.message.tool_calls[0], [WEATHER])
    else:
        assert c.message.content and not c.message.content.startswith("<")
    # after an earlier call and its result (what the model does depends on its numerics:
    # greedy SmolLM2 called again with the float32 runtime, answers in text with Q8
    # activations); either way the answer is a valid call or text that is not one
    messages = [*CALLED, {"role": "user", "content": "And the weather in Rome?"}]
    r = client.chat.completions.create(model="m", messages=messages, tools=[WEATHER],
                                       tool_choice="auto", max_tokens=30, temperature=0)
    c = r.choices[0]
    if c.message.tool_calls:
        assert c.finish_reason == "tool_calls" and c.message.content is None
        _check_call(c.message.tool_calls[0], [WEATHER])
    else:
        assert c.message.content and not c.message.content.startswith("<")


def test_tool_stream(client):
    chunks = list(chat(client, "What is the weather in Paris?", max_tokens=40, stream=True,
                       tools=[WEATHER], tool_choice="required"))
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    # OpenAI's shape: id, type and name once, in the first delta; then argument fragments
    assert deltas[0].id and deltas[0].type == "function"
    assert deltas[0].function.name == "get_weather"
    assert all(d.index == 0 and d.id is None and d.function.name is None for d in deltas[1:])
    assert len(deltas) > 2  # the arguments arrive as they are generated
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    arguments = "".join(d.function.arguments or "" for d in deltas)
    jsonschema.validate(json.loads(arguments), WEATHER["function"]["parameters"])


def test_tool_result_turn(client):
    r = client.chat.completions.create(model="m", messages=CALLED, tools=[WEATHER],
                                       tool_choice="none", max_tokens=12, temperature=0)
    assert r.choices[0].message.content and not r.choices[0].message.tool_calls


# -- errors -----------------------------------------------------------------------------------


def _bad(fn, status=400):
    with pytest.raises(openai.APIStatusError) as e:
        fn()
    assert e.value.status_code == status
    body = e.value.body
    assert set(body) == {"message", "type", "param", "code"}, body
    return body


def test_invalid_schema_names_its_location(client):
    body = _bad(lambda: chat(client, "x", response_format={"type": "json_schema", "json_schema": {
        "name": "p", "schema": {"type": "object", "properties": {"a": {"type": "strin"}}}}}))
    assert body["code"] == "invalid_schema"
    assert body["param"] == "response_format.json_schema.schema"
    assert "/properties/a/type" in body["message"] and "strin" in body["message"]


def test_invalid_grammar_names_line_and_column(client):
    body = _bad(lambda: chat(client, "x", extra_body={"grammar": 'root ::= "a" missing_rule'}))
    assert body["code"] == "invalid_grammar" and body["param"] == "grammar"
    assert re.search(r"line 1:\d+", body["message"]), body["message"]
    body = _bad(lambda: chat(client, "x", extra_body={
        "grammar": '%llguidance {}\nstart: "a"\nfoo: ( "b"\n'}))
    assert body["code"] == "invalid_grammar" and re.search(r"line \d+:\d+", body["message"])


def test_invalid_regex(client):
    body = _bad(lambda: chat(client, "x", extra_body={"regex": "[a-"}))
    assert body["code"] == "invalid_regex" and body["param"] == "regex"
    assert "offset" in body["message"]


def test_bad_tool_schema_and_choice(client):
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "nope"}}}
    body = _bad(lambda: chat(client, "x", tools=[WEATHER, bad], tool_choice="required"))
    assert body["code"] == "invalid_schema" and body["param"] == "tools[1].function.parameters"
    body = _bad(lambda: chat(client, "x", tools=[WEATHER],
                             tool_choice={"type": "function", "function": {"name": "other"}}))
    assert body["param"] == "tool_choice.function.name"


def test_bad_fields(client):
    assert _bad(lambda: chat(client, "x", temperature=-1))["param"] == "temperature"
    assert _bad(lambda: chat(client, "x", logit_bias={"1": 5}))["code"] == "unsupported_parameter"
    assert _bad(lambda: chat(client, "x", n=100))["param"] == "n"
    assert _bad(lambda: chat(client, "x", response_format={"type": "xml"}))["param"] == \
        "response_format.type"
    assert _bad(lambda: client.chat.completions.create(model="m", messages=[]))["param"] == \
        "messages"
    body = _bad(lambda: chat(client, "x", extra_body={"regex": "a", "grammar": "root ::= \"a\""}))
    assert body["code"] == "conflicting_parameters"


def test_context_and_max_tokens_limits(client):
    body = _bad(lambda: client.completions.create(model="m", prompt="word " * 1500, max_tokens=4))
    assert body["code"] == "context_length_exceeded" and body["param"] == "prompt"
    assert str(CTX) in body["message"]
    body = _bad(lambda: chat(client, "x", max_tokens=10**9))
    assert body["param"] == "max_tokens" and str(CTX) in body["message"]


def test_body_limits(server):
    status, body = server.post("/v1/chat/completions", b"{not json")
    assert status == 400 and body["error"]["code"] == "invalid_json"
    deep = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"  # past json's recursion limit
    status, body = server.post("/v1/chat/completions", deep)
    assert status == 400 and body["error"]["code"] == "invalid_json", body
    assert "too deeply" in body["error"]["message"]
    big = json.dumps({"messages": [{"role": "user", "content": "x" * (2 << 20)}]}).encode()
    status, body = server.post("/v1/chat/completions", big)
    assert status == 413 and body["error"]["code"] == "request_too_large"


def test_disconnect_frees_the_slot(server):
    before = server.get_json("/health")["slots_processing"]
    with httpx.stream("POST", server.url + "/v1/completions", timeout=60, json={
            "prompt": "Once upon a time", "max_tokens": 500, "temperature": 0,
            "stream": True}) as r:
        lines = r.iter_lines()
        for _ in range(4):
            next(lines)
        assert server.get_json("/health")["slots_processing"] == before + 1
    deadline = time.monotonic() + 5
    while server.get_json("/health")["slots_processing"] > before:
        assert time.monotonic() < deadline, "the slot of a gone client was not freed"
        time.sleep(0.05)
    _, metrics = server.get("/metrics")
    assert re.search(rb"lexguide_sequences_cancelled_total [1-9]", metrics)


def test_disconnect_while_waiting_for_a_whole_answer(server):
    before = server.get_json("/health")["slots_processing"]
    t0 = time.monotonic()
    with pytest.raises(httpx.TimeoutException):
        httpx.post(server.url + "/v1/completions", timeout=1.0, json={
            "prompt": "Once upon a time", "max_tokens": 500, "temperature": 0})
    while server.get_json("/health")["slots_processing"] > before:
        assert time.monotonic() - t0 < 4, "the slot of a gone client was not freed"
        time.sleep(0.05)


def _counter(server, name: str) -> float:
    _, body = server.get("/metrics")
    return float(re.search(rf"^{name} (\S+)$", body.decode(), re.MULTILINE).group(1))


def test_prompt_prefix_copied_from_a_busy_slot(server, client):
    preamble = "A shared preamble about lighthouses, tides and the northern sea. " * 3
    ask = {"model": "m", "max_tokens": 6, "temperature": 0}
    # evaluated in full: no slot holds this preamble yet
    reference = client.completions.create(prompt=preamble + "Summary:", **ask).choices[0].text
    busy = server.get_json("/health")["slots_processing"]
    with httpx.stream("POST", server.url + "/v1/completions", timeout=60, json={
            "prompt": preamble + "Story:", "max_tokens": 300, "temperature": 0,
            "regex": "[a-z ]{250}", "stream": True}) as r:  # keeps that slot busy a while
        lines = r.iter_lines()  # not closed early: closing it would hang up on the server
        next(lines)
        assert server.get_json("/health")["slots_processing"] == busy + 1
        before = _counter(server, "lexguide_prompt_tokens_cached_total")
        copied = client.completions.create(prompt=preamble + "Summary:", **ask)
        after = _counter(server, "lexguide_prompt_tokens_cached_total")
        still_busy = server.get_json("/health")["slots_processing"]
    assert still_busy == busy + 1  # the long request was still running: a copy, not a reuse
    assert after - before >= 30  # the preamble came from the busy slot's cache
    assert copied.choices[0].text == reference
