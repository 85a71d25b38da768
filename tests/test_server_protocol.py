"""The server's request checks, tool-call grammar and text assembly, without a model."""

from __future__ import annotations

import json

import pytest

from lexguide import Grammar, GrammarError, LexguideError, SchemaError
from lexguide.errors import RegexError
from lexguide.server.constraints import GrammarCache, render_tool_messages
from lexguide.server.protocol import (
    RequestError,
    ToolSpec,
    error_from_exception,
    parse_chat_request,
    parse_completion_request,
)
from lexguide.server.scheduler import _Text
from lexguide.server.tool_formats import FORMATS, ToolCallStream, tool_format_spec

MSG = [{"role": "user", "content": "hi"}]
CITY = json.dumps({"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": False})
ZONE = json.dumps({"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}},
                   "required": ["zone"], "additionalProperties": False})
TOOLS = [ToolSpec("get_weather", "weather", CITY), ToolSpec("get_time", "time", ZONE)]
CALL_W = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
CALL_T = '<tool_call>{"name": "get_time", "arguments": {"zone": "CET"}}</tool_call>'


def _param(body, parse=parse_chat_request):
    with pytest.raises(RequestError) as e:
        parse(body)
    assert isinstance(e.value, LexguideError)
    return e.value.param


@pytest.mark.parametrize(("body", "param"), [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
     "messages[0].content[0].type"),
    ({"messages": MSG, "temperature": "hot"}, "temperature"),
    ({"messages": MSG, "top_p": 1.5}, "top_p"),
    ({"messages": MSG, "n": 0}, "n"),
    ({"messages": MSG, "max_tokens": -1}, "max_tokens"),
    ({"messages": MSG, "max_tokens": True}, "max_tokens"),
    ({"messages": MSG, "stop": [""]}, "stop[0]"),
    ({"messages": MSG, "stop": ["a"] * 9}, "stop"),
    ({"messages": MSG, "top_logprobs": 2}, "top_logprobs"),
    ({"messages": MSG, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"messages": MSG, "logprobs": 2}, "logprobs"),
    ({"messages": MSG, "response_format": {"type": "json_schema", "json_schema": {}}},
     "response_format.json_schema.schema"),
    ({"messages": MSG, "response_format": {"type": "json_schema",
                                           "json_schema": {"schema": "{oops"}}},
     "response_format.json_schema.schema"),
    ({"messages": MSG, "grammar": "root ::= \"a\"", "regex": "a"}, "regex"),
    ({"messages": MSG, "grammar": "   "}, "grammar"),
    ({"messages": MSG, "tools": [{"type": "function", "function": {"name": "a b"}}]},
     "tools[0].function.name"),
    ({"messages": MSG, "tool_choice": "required"}, "tool_choice"),
    ({"messages": MSG, "tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": "sometimes"}, "tool_choice"),
    ({"messages": MSG, "tools": [{"type": "function", "function": {"name": "f"}}],
      "regex": "a"}, "regex"),
])
def test_bad_chat_fields_name_their_param(body, param):
    assert _param(body) == param


@pytest.mark.parametrize(("body", "param"), [
    ({"prompt": 3}, "prompt"),
    ({"prompt": ["a", "b"]}, "prompt"),
    ({"prompt": "x", "echo": True}, "echo"),
    ({"prompt": "x", "best_of": 3}, "best_of"),
    ({"prompt": "x", "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
])
def test_bad_completion_fields(body, param):
    assert _param(body, parse_completion_request) == param


def test_good_request_fields():
    req = parse_chat_request({
        "model": "m", "messages": [{"role": "developer", "content": [{"type": "text", "text": "a"},
                                                                     {"type": "text", "text": "b"}]}],
        "max_completion_tokens": 5, "n": 2, "stop": "x", "seed": -1, "top_k": 3,
        "response_format": {"type": "json_object"}, "stream": True,
        "stream_options": {"include_usage": True}})
    assert req.messages == [{"role": "system", "content": "ab"}]
    assert (req.max_tokens, req.n, req.stop, req.top_k) == (5, 2, ["x"], 3)
    assert req.seed == 2**64 - 1 and req.stream and req.include_usage
    assert req.constraint.kind == "json_object"
    req = parse_completion_request({"prompt": [[1, 2, 3]]})
    assert req.prompt == [1, 2, 3]


def _generic(choice, parallel=False):
    return Grammar.from_structural_tag(tool_format_spec(FORMATS["generic"], TOOLS, choice,
                                                        parallel))


def test_tool_grammar_required_auto_named():
    required = _generic("required")
    assert required.validate(CALL_W) and required.validate(CALL_T)
    assert not required.validate("plain text")
    assert not required.validate(CALL_W + CALL_T)  # one call unless parallel
    assert _generic("required", parallel=True).validate(CALL_W + CALL_T)
    assert not required.validate(CALL_W.replace('"Paris"', "3"))  # arguments follow the schema
    assert not required.validate(CALL_T.replace("CET", "EST"))
    auto = _generic("auto")
    assert auto.validate(CALL_W) and auto.validate("plain text, no call")
    assert auto.validate("Let me look. " + CALL_W)  # prose, then a call at its marker
    assert not auto.validate("<tool_call>{broken")  # the marker starts a call
    named = _generic("function:get_time")
    assert named.validate(CALL_T) and not named.validate(CALL_W)


def _parse(text, fmt="generic", step=1):
    stream = ToolCallStream(FORMATS[fmt])
    events = []
    for i in range(0, len(text), step):
        events += stream.feed(text[i:i + step])
    return stream, events


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_tool_call_stream(step):
    stream, events = _parse("Looking. " + CALL_W + CALL_T, step=step)
    calls = stream.finished_calls()
    assert [c["function"] for c in calls] == [
        {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"name": "get_time", "arguments": '{"zone": "CET"}'}]
    assert all(c["type"] == "function" and c["id"].startswith("call_") for c in calls)
    assert "".join(e[1] for e in events if e[0] == "content") == "Looking. "
    kinds = [e[0] for e in events if e[0] != "content"]
    assert kinds[0] == "call" and kinds.count("call") == 2
    assert (kinds.count("args") > 2) == (step < 1000)  # fragments as the text arrives
    assert _parse("hello")[0].finished_calls() is None
    assert _parse(CALL_W[:-3])[0].finished_calls() is None  # cut in the closing marker
    assert _parse(CALL_W[:-16])[0].finished_calls() is None  # cut inside the arguments
    stream, events = _parse(CALL_W + " and then some text", step=step)  # text after a call
    assert stream.finished_calls()
    assert "".join(e[1] for e in events if e[0] == "content") == "and then some text"
    # a closing marker inside a string argument does not end the call
    tricky = CALL_W.replace("Paris", "}</tool_call>")
    assert _parse(tricky)[0].calls[0]["function"]["arguments"] == '{"city": "}</tool_call>"}'


@pytest.mark.parametrize("fmt", ["hermes", "llama3", "mistral"])
def test_native_formats_round_trip(fmt):
    f = FORMATS[fmt]
    call = f.call_begin("get_weather") + '{"city": "Paris"}' + f.tail
    text = f.block_open + call + f.block_close
    for choice in ("auto", "required"):
        g = Grammar.from_structural_tag(tool_format_spec(f, TOOLS, choice, True))
        assert g.validate(text)
        assert not g.validate(text.replace('"Paris"', "3"))
    calls = _parse(text, fmt)[0].finished_calls()
    assert calls[0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    if f.max_calls is None:  # two calls in one answer, streamed in small pieces
        two = f.block_open + call + f.separator + call.replace("Paris", "Rome") + f.block_close
        stream, events = _parse(two, fmt, step=2)
        assert [c["function"]["arguments"] for c in stream.finished_calls()] == [
            '{"city": "Paris"}', '{"city": "Rome"}']
        assert not [e for e in events if e[0] == "content"]
    if fmt == "mistral":
        assert len(calls[0]["id"]) == 9 and calls[0]["id"].isalnum()


def test_tool_messages_rendered():
    req = parse_chat_request({
        "messages": [{"role": "system", "content": "Be brief."}, *MSG,
                     {"role": "assistant", "content": None, "tool_calls": [{
                         "id": "c", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                     {"role": "tool", "content": "sunny"}],
        "tools": [{"type": "function", "function": {"name": "get_weather",
                                                    "parameters": json.loads(CITY)}}]})
    out = render_tool_messages(req)
    assert out[0]["content"].startswith("Be brief.\n\nYou can call these functions:")
    assert out[2]["content"] == CALL_W
    assert out[3] == {"role": "tool", "content": "sunny"}


def test_grammar_cache_bounded_and_errors_located():
    cache = GrammarCache(size=2)
    for pattern in ("a", "b", "c", "a"):
        req = parse_chat_request({"messages": MSG, "regex": pattern})
        cache.get(req.constraint, req)
    assert len(cache) == 2 and cache.misses == 4 and cache.hits == 0
    req = parse_chat_request({"messages": MSG, "regex": "a"})
    assert cache.get(req.constraint, req) is cache.get(req.constraint, req) and cache.hits == 2
    req = parse_chat_request({"messages": MSG, "json_schema": {"type": "nope"}})
    with pytest.raises(SchemaError) as e:
        cache.get(req.constraint, req)
    status, body = error_from_exception(e.value, e.value.param)
    assert status == 400 and body["error"]["param"] == "json_schema"
    assert body["error"]["code"] == "invalid_schema" and "/type" in body["error"]["message"]
    req = parse_chat_request({"messages": MSG, "grammar": 'root ::= "a" (\n'})
    with pytest.raises(GrammarError) as e:
        cache.get(req.constraint, req)
    assert not isinstance(e.value, RegexError)
    assert error_from_exception(e.value)[1]["error"]["code"] == "invalid_grammar"


def test_internal_errors_hide_details():
    status, body = error_from_exception(KeyError("secret"))
    assert status == 500 and "secret" not in json.dumps(body)


def test_text_stop_strings_and_holdback():
    t = _Text(["STOP"])
    assert t.feed(b"hello ST", False) == ("hello ", False)  # "ST" may start a stop string
    assert t.feed(b"OP more", False) == ("", True)
    assert t.text == "hello "
    t = _Text(["STOP"])
    assert t.feed(b"ST", False) == ("", False)
    assert t.feed(b"AR", False) == ("STAR", False)
    t = _Text([])
    assert t.feed("é".encode()[:1], False) == ("", False)  # half a UTF-8 character
    assert t.feed("é".encode()[1:], True) == ("é", False)


def test_missing_extra_names_it(monkeypatch):
    import importlib
    import sys

    monkeypatch.setitem(sys.modules, "fastapi", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "lexguide.server.app", raising=False)
    with pytest.raises(ImportError, match=r"lexguide\[server\]"):
        importlib.import_module("lexguide.server.app")
    from lexguide.cli import main

    assert main(["serve", "--port", "1"]) == 1  # one line on stderr, no traceback


class _FakeModel:
    """Just enough of a ``Model`` for the scheduler: 8 tokens, token 0 is EOS; the forward
    records the length of each sequence's input (or raises when ``fail``), and the sizes of
    batched forwards; greedy picks token 3."""

    n_threads = decode_threads = 1

    def __init__(self, fail: bool = False, n_ctx: int = 64) -> None:
        import numpy as np

        self.n_ctx = n_ctx
        self.calls: list[int] = []
        self.batches: list[int] = []
        self.config = type("C", (), {"n_vocab": 8, "n_embd": 4})()
        self.tokenizer = type("T", (), {"all_token_bytes": lambda _: [b"x"] * 8,
                                        "eog_ids": frozenset({0}), "bos_id": 1,
                                        "encode": lambda _, text: [1, 2, 3]})()
        model = self

        class Cache:
            def __init__(self, n: int) -> None:
                self.n, self.n_ctx = 0, n

            def truncate(self, n: int) -> None:
                self.n = n

        class Transformer:
            threads = 1

            @staticmethod
            def new_cache(n):
                return Cache(n)

            @staticmethod
            def hidden_last(tokens, cache):
                if fail:
                    raise RuntimeError("kernel exploded")
                model.calls.append(len(tokens))
                cache.n += len(tokens)
                return np.zeros(4, dtype=np.float32)

            @staticmethod
            def forward_batch(batch):
                model.batches.append(len(batch))
                return np.stack([Transformer.hidden_last(t, c) for t, c in batch])

            @staticmethod
            def project_rows(h, rows=None):
                logits = np.arange(8, dtype=np.float32) == 3
                return logits.astype(np.float32) if rows is None else logits[rows]

            @staticmethod
            def project(h):
                return np.stack([Transformer.project_rows(row) for row in h])

        self.transformer = Transformer()


def _run_jobs(model, bodies, parallel=1):
    """Submit completion requests together; returns each job's events once all are done."""
    import threading

    from lexguide.server.scheduler import Job, Scheduler

    sched = Scheduler(model, parallel=parallel)
    events: list[list] = [[] for _ in bodies]
    left = threading.Semaphore(0)

    def poster(i):
        def post(ev):
            events[i].append(ev)
            if ev[0] in ("error", "finish"):
                left.release()
        return post

    jobs = [Job(parse_completion_request(b), poster(i)) for i, b in enumerate(bodies)]
    with sched._wake:  # both in the inbox before the loop looks: prepared together
        for job in jobs:
            sched._inbox.append(job)
    sched.start()
    try:
        for _ in bodies:
            assert left.acquire(timeout=10), events
    finally:
        sched.stop()
    return events


def test_scheduler_survives_a_failing_step():
    """A step that raises fails the running jobs (500) and the loop goes on."""
    model = _FakeModel(fail=True)
    for _ in range(2):  # the second run proves a failing step does not kill the loop
        (events,) = _run_jobs(model, [{"prompt": "hi", "max_tokens": 2}])
        assert events[-1][0] == "error" and error_from_exception(events[-1][1])[0] == 500


def test_long_prompt_prefilled_over_steps_while_others_decode():
    from lexguide.server.scheduler import PREFILL_STEP

    model = _FakeModel(n_ctx=1024)
    long_prompt = [5] * (2 * PREFILL_STEP + 88)
    long_events, short_events = _run_jobs(model, [
        {"prompt": long_prompt, "max_tokens": 1, "temperature": 0},
        {"prompt": "hi", "max_tokens": 3, "temperature": 0}],  # greedy: never the EOS token
        parallel=2)
    assert long_events[-1][1].finish_reason == "length"
    assert short_events[-1][1].text == "xxx"
    # the long prompt in chunks, the short one's prompt then a token per step beside them
    # (per step: the decoding sequences' batched forward first, then prompt chunks)
    assert model.calls == [3, PREFILL_STEP, 1, PREFILL_STEP, 1, 88]
    assert model.batches == [1, 1, 1]


def test_decoding_sequences_share_one_forward_per_step():
    model = _FakeModel(n_ctx=256)
    events = _run_jobs(model, [{"prompt": "hi", "max_tokens": 3, "temperature": 0}] * 3
                       + [{"prompt": "hi", "max_tokens": 2, "temperature": 0, "n": 2}],
                       parallel=5)
    assert [ev[-1][1].text for ev in events[:3]] == ["xxx"] * 3
    assert [e[1].text for e in events[3] if e[0] == "finish"] == ["xx", "xx"]
    # 5 sequences (4 requests, one with n=2) decoded together: one forward per step
    assert model.batches == [5, 5, 3]
