"""Structural tags and lazy grammars through ``lexguide serve``, with the ``openai`` client.

``response_format: {"type": "structural_tag", ...}`` in vLLM's and SGLang's shapes, and
llama-server's ``grammar`` + ``grammar_lazy`` + ``grammar_triggers``, on both endpoints,
whole and streamed, with ``n``; a think section before the tag (QwQ's template, whose
generation prompt opens one); and the combinations refused with a located 400. Outputs are
checked by independent parses: a regex for the tag's frame, ``json`` + ``jsonschema`` for
its content, ``Grammar.validate`` of the lazy grammar alone for the text after its trigger.
"""

from __future__ import annotations

import json
import re

import pytest

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from server_helpers import start_server, with_chat_template

from lexguide import Grammar

CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16}},
        "required": ["city"], "additionalProperties": False}
CALL = {"type": "tag", "begin": "<tool_call>", "end": "</tool_call>",
        "content": {"type": "json_schema", "json_schema": CITY}}
TAG = {"type": "structural_tag", "format": {
    "type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [CALL],
    "at_least_one": True, "stop_after_first": True}}
LEGACY = {"type": "structural_tag", "triggers": ["<function="], "at_least_one": True,
          "structures": [{"begin": "<function=get_weather>", "schema": CITY,
                          "end": "</function>"}]}
DIGITS = 'root ::= "<n>" [0-9] [0-9]? "</n>"'
FEW_SHOT = "a <n>1</n>\nb <n>2</n>\nc <n>3</n>\nd"
PATTERN = ('Q: Weather in Rome?\nA: Let me check. <tool_call>{"city": "Rome"}</tool_call>\n'
           'Q: Weather in Oslo?\nA: Let me check. <tool_call>{"city": "Oslo"}</tool_call>\n'
           "Q: Weather in Paris?\nA:")
WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": CITY}}


@pytest.fixture(scope="module")
def servers(smollm2_file, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("structural")
    started: dict[str | None, object] = {}

    def get(template: str | None = None):
        if template not in started:
            model = smollm2_file if template is None else with_chat_template(
                smollm2_file, tmp, template)
            started[template] = start_server(model, tmp, "--parallel", "2", "--ctx", "1024")
        server = started[template]
        return server, openai.OpenAI(base_url=server.url + "/v1", api_key="unused",
                                     max_retries=0, timeout=120)

    yield get
    for server in started.values():
        server.stop()
        log = server.log.read_text()
        assert "Traceback" not in log, log  # bad input never prints a traceback


@pytest.fixture(scope="module")
def client(servers):
    return servers()[1]


def chat(client, content, **kw):
    kw.setdefault("max_tokens", 48)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": content}], **kw)


def check_call(text: str) -> None:
    """The whole text is one complete tag whose content is valid for CITY."""
    m = re.fullmatch(r"<tool_call>(.*)</tool_call>", text, re.DOTALL)
    assert m, text
    jsonschema.validate(json.loads(m.group(1)), CITY)


def streamed(chunks) -> dict[int, tuple[str, str | None]]:
    """{choice index: (text, finish_reason)} of a streamed chat or completion."""
    out: dict[int, list] = {}
    for chunk in chunks:
        for c in chunk.choices:
            text, finish = out.setdefault(c.index, ["", None])
            piece = c.delta.content if hasattr(c, "delta") else c.text
            out[c.index] = [text + (piece or ""), c.finish_reason or finish]
    return {i: (t, f) for i, (t, f) in out.items()}


# -- structural tags ------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_structural_tag_chat(client, stream):
    """at_least_one: the output opens with the tag; stop_after_first: nothing after it. Two
    sampled choices, each a complete tag within max_tokens."""
    kw = {"response_format": TAG, "n": 2, "temperature": 0.9, "seed": 7, "max_tokens": 48}
    if stream:
        got = streamed(chat(client, "Weather in Paris?", stream=True, **kw))
        assert sorted(got) == [0, 1]
        for text, finish in got.values():
            assert finish == "stop"
            check_call(text)
    else:
        r = chat(client, "Weather in Paris?", **kw)
        assert len(r.choices) == 2
        for c in r.choices:
            assert c.finish_reason == "stop"
            check_call(c.message.content)


@pytest.mark.parametrize("stream", [False, True])
def test_structural_tag_completion(client, stream):
    kw = {"model": "m", "prompt": "The weather in Paris, as a tool call:", "max_tokens": 48,
          "temperature": 0, "extra_body": {"response_format": TAG}}
    if stream:
        [(text, finish)] = streamed(client.completions.create(stream=True, **kw)).values()
    else:
        c = client.completions.create(**kw).choices[0]
        text, finish = c.text, c.finish_reason
    assert finish == "stop"
    check_call(text)


def test_free_text_then_a_tag(client):
    """Without at_least_one: prose first; the trigger the model writes starts a complete
    tag (greedy SmolLM2 follows the prompt's pattern), and stop_after_first ends it there."""
    spec = {"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [CALL],
        "stop_after_first": True}}
    c = client.completions.create(model="m", prompt=PATTERN, max_tokens=48, temperature=0,
                                  extra_body={"response_format": spec}).choices[0]
    prose, _, call = c.text.partition("<tool_call>")
    assert prose.strip() and c.finish_reason == "stop", c.text
    check_call("<tool_call>" + call)


def test_legacy_shape(client):
    """vLLM's and SGLang's older shape (SGLang's at_least_one included)."""
    r = chat(client, "Weather in Paris?", response_format=LEGACY, max_tokens=64)
    text = r.choices[0].message.content
    m = re.match(r"<function=get_weather>(.*?)</function>", text, re.DOTALL)
    assert m, text
    jsonschema.validate(json.loads(m.group(1)), CITY)
    # what follows the tag is free text in which no trigger is left unfinished
    assert "<function=" not in text[m.end():] or r.choices[0].finish_reason == "stop"


def test_bare_format_on_completions(client):
    fmt = {"type": "sequence", "elements": [{"type": "const_string", "value": "City: "},
                                            {"type": "json_schema", "json_schema": CITY}]}
    c = client.completions.create(model="m", prompt="Paris.", max_tokens=32, temperature=0,
                                  extra_body={"response_format": {
                                      "type": "structural_tag", "format": fmt}}).choices[0]
    assert c.finish_reason == "stop" and c.text.startswith("City: ")
    jsonschema.validate(json.loads(c.text[len("City: "):]), CITY)


# -- lazy grammars ---------------------------------------------------------------------------


@pytest.mark.parametrize("trigger", ["<n>", {"type": "word", "value": "<n>"},
                                     {"type": 1, "value": "<n>"}])
def test_lazy_grammar(client, trigger):
    """Free text, then from the trigger on the grammar's language (llama.cpp's numbers for
    trigger types too). Greedy SmolLM2 writes the trigger after a few-shot prompt."""
    c = client.completions.create(model="m", prompt=FEW_SHOT, max_tokens=48, temperature=0,
                                  extra_body={"grammar": DIGITS, "grammar_lazy": True,
                                              "grammar_triggers": [trigger]}).choices[0]
    assert c.finish_reason == "stop" and "<n>" in c.text, c.text
    at = c.text.index("<n>")
    assert at > 0, c.text  # free text first: the grammar did not apply from the start
    assert Grammar.parse(DIGITS).validate(c.text[at:]), c.text
    assert Grammar.from_lazy(DIGITS, ["<n>"]).validate(c.text)


def test_lazy_grammar_streamed_with_n(client):
    lazy = {"grammar": DIGITS, "grammar_lazy": True,
            "grammar_triggers": [{"type": "word", "value": "<n>"}]}
    got = streamed(client.completions.create(model="m", prompt=FEW_SHOT, max_tokens=48,
                                             temperature=0, n=2, stream=True,
                                             extra_body=lazy))
    assert sorted(got) == [0, 1]
    for text, finish in got.values():
        assert finish == "stop" and text.index("<n>") > 0, text
        assert Grammar.parse(DIGITS).validate(text[text.index("<n>"):]), text
    # sampled chat choices: whether the trigger comes is the model's choice; when it does,
    # the text from it on is the grammar's, and a finished output is a sentence of the whole
    got = streamed(chat(client, "Write a number between <n> and </n>, like <n>5</n>.",
                        stream=True, n=2, temperature=0.9, seed=3, max_tokens=48,
                        extra_body=lazy))
    assert sorted(got) == [0, 1]
    for text, finish in got.values():
        if "<n>" in text:
            assert Grammar.parse(DIGITS).validate(text[text.index("<n>"):]) == (
                finish == "stop"), text
        if finish == "stop":
            assert Grammar.from_lazy(DIGITS, ["<n>"]).validate(text), text


def test_lazy_pattern_trigger(client):
    """A pattern trigger hands the grammar its first capture group's text on."""
    c = client.completions.create(model="m", prompt=FEW_SHOT, max_tokens=48, temperature=0,
                                  extra_body={"grammar": DIGITS, "grammar_lazy": True,
                                              "grammar_triggers": [{"type": "pattern",
                                                                    "value": " (<n>)"}]}
                                  ).choices[0]
    assert c.finish_reason == "stop" and " <n>" in c.text, c.text
    assert Grammar.parse(DIGITS).validate(c.text[c.text.index("<n>"):]), c.text


# -- refused with a located 400 --------------------------------------------------------------


def _bad(fn):
    with pytest.raises(openai.APIStatusError) as e:
        fn()
    assert e.value.status_code == 400
    body = e.value.body
    assert set(body) == {"message", "type", "param", "code"}, body
    return body


@pytest.mark.parametrize("spec, where", [
    ({**TAG, "format": {**TAG["format"], "tags": [{**CALL, "end": 5}]}},
     "$.format.tags[0].end"),
    ({**TAG, "format": {**TAG["format"], "tags": [{**CALL, "content": {"type": "nope"}}]}},
     "$.format.tags[0].content.type"),
    ({"type": "structural_tag"}, "missing field 'format'"),
    ({**LEGACY, "structures": [{"begin": "<function=f>", "schema": CITY}]},
     "$.structures[0]: missing field 'end'"),
    ({"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<a>"],
                                           "tags": [{**CALL, "begin": "<b>"}]}},
     "$.format.tags[0]"),
])
def test_malformed_spec_names_its_path(client, spec, where):
    for call in (lambda: chat(client, "x", response_format=spec),
                 lambda: client.completions.create(model="m", prompt="x", max_tokens=4,
                                                   extra_body={"response_format": spec})):
        body = _bad(call)
        assert body["code"] == "invalid_grammar" and body["param"] == "response_format"
        assert where in body["message"], body["message"]


def test_bad_schema_inside_a_tag_is_located(client):
    spec = {**TAG, "format": {**TAG["format"], "tags": [
        {**CALL, "content": {"type": "json_schema", "json_schema": {"type": "strin"}}}]}}
    body = _bad(lambda: chat(client, "x", response_format=spec))
    assert body["code"] == "invalid_schema" and body["param"] == "response_format"
    assert "/type" in body["message"] and "strin" in body["message"]


@pytest.mark.parametrize("extra, param, message", [
    ({"grammar_lazy": True, "grammar_triggers": ["<n>"]}, "grammar_lazy", "needs grammar"),
    ({"grammar": DIGITS, "grammar_lazy": True}, "grammar_triggers", "non-empty list"),
    ({"grammar": DIGITS, "grammar_lazy": True, "grammar_triggers": []}, "grammar_triggers",
     "non-empty list"),
    ({"grammar": DIGITS, "grammar_triggers": ["<n>"]}, "grammar_triggers",
     "only with grammar_lazy"),
    ({"grammar": DIGITS, "grammar_lazy": "yes", "grammar_triggers": ["<n>"]}, "grammar_lazy",
     "boolean"),
    ({"grammar": DIGITS, "grammar_lazy": True, "grammar_triggers": ["<m>"]},
     "grammar_triggers", "lazy grammar trigger 0: no sentence of the grammar starts"),
    ({"grammar": DIGITS, "grammar_lazy": True, "grammar_triggers": [{"type": "bogus"}]},
     "grammar_triggers", "unknown trigger type 'bogus'"),
    ({"grammar": 'root ::= "<n>" missing', "grammar_lazy": True, "grammar_triggers": ["<n>"]},
     "grammar", "line 1:"),
    ({"grammar": DIGITS, "grammar_lazy": True, "grammar_triggers": ["<n>"],
      "response_format": TAG}, "grammar_triggers", "at most one of"),
])
def test_bad_lazy_fields(client, extra, param, message):
    body = _bad(lambda: client.completions.create(model="m", prompt="x", max_tokens=4,
                                                  extra_body=extra))
    assert body["param"] == param and message in body["message"], body


@pytest.mark.parametrize("extra, param", [
    ({"response_format": TAG}, "response_format"),
    ({"grammar": DIGITS, "grammar_lazy": True, "grammar_triggers": ["<n>"]},
     "grammar_triggers"),
])
def test_tools_and_a_constraint_are_refused(client, extra, param):
    body = _bad(lambda: chat(client, "x", tools=[WEATHER_TOOL], extra_body=extra))
    assert body["code"] == "conflicting_parameters" and body["param"] == param
    assert "tools" in body["message"]


# -- after a think section (QwQ's template opens it in the generation prompt) ----------------


def test_structural_tag_after_the_think_section(servers):
    _, client = servers("Qwen-QwQ-32B.jinja")
    for stream in (False, True):
        kw = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}],
              "max_tokens": 96, "temperature": 0, "response_format": TAG,
              "extra_body": {"reasoning_budget": 8}}
        if stream:
            reasoning, content, finish = "", "", None
            for chunk in client.chat.completions.create(stream=True, **kw):
                if chunk.choices:
                    delta = chunk.choices[0].delta
                    reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
                    content += delta.content or ""
                    finish = chunk.choices[0].finish_reason or finish
        else:
            c = client.chat.completions.create(**kw).choices[0]
            reasoning = c.message.model_extra["reasoning_content"]
            content, finish = c.message.content, c.finish_reason
        assert reasoning and "</think>" not in content
        assert finish == "stop"
        check_call(content.strip())


def test_lazy_grammar_after_a_think_section_is_refused(servers):
    _, client = servers("Qwen-QwQ-32B.jinja")
    body = _bad(lambda: client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}], max_tokens=4,
        extra_body={"grammar": DIGITS, "grammar_lazy": True, "grammar_triggers": ["<n>"]}))
    assert body["param"] == "grammar_lazy" and body["code"] == "unsupported_parameter"
    assert "structural_tag" in body["message"]
