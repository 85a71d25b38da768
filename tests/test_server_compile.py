"""Grammar compiles off the decode loop: a large schema arriving while two streams decode
does not stall them for its compile time, and ``--grammar-timeout`` refuses a compile that
takes too long (a real ``lexguide serve`` with SmolLM2)."""

from __future__ import annotations

import json
import re
import threading
import time
import uuid

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from server_helpers import Server, start_server

STREAM_TOKENS = 400
# digits, commas and spaces the stream cannot end early: no end-of-text before 2000 characters
STREAM_REGEX = "[0-9, ]{2000}"


def big_schema(n_properties: int) -> dict:
    """An object schema of ``n_properties`` mixed members; a fresh salt makes every call a
    schema no cache has seen."""
    salt = uuid.uuid4().hex[:8]
    kinds = [
        lambda i: {"type": "string", "maxLength": 20 + i % 7},
        lambda i: {"type": "integer", "minimum": i, "maximum": 1000 + i},
        lambda i: {"type": "array", "items": {"type": "string",
                                              "pattern": f"^[a-z]{{{1 + i % 5}}}$"}},
        lambda i: {"type": "object", "properties": {"a": {"enum": [f"v{i}", f"w{i}"]},
                                                    "b": {"type": "number"}},
                   "required": ["a"], "additionalProperties": False},
    ]
    props = {f"f{salt}_{i}": kinds[i % 4](i) for i in range(n_properties)}
    return {"type": "object", "properties": props, "required": list(props)[:n_properties // 2],
            "additionalProperties": False}


def _metric(server: Server, name: str) -> float:
    status, text = server.get("/metrics")
    assert status == 200
    return float(re.search(rf"^{name} (\S+)$", text.decode(), re.M).group(1))


@pytest.fixture(scope="module")
def server(smollm2_file, tmp_path_factory) -> Server:
    s = start_server(smollm2_file, tmp_path_factory.mktemp("compile"), "--parallel", "3",
                     "--ctx", "1024", "--grammar-timeout", "120")
    yield s
    s.stop()
    assert "Traceback" not in s.log.read_text()


def _stream(server: Server, arrivals: list[float]) -> None:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                           timeout=300)
    for chunk in client.completions.create(
            model="m", prompt="Count: 1, 2, 3,", max_tokens=STREAM_TOKENS, temperature=0,
            stream=True, extra_body={"regex": STREAM_REGEX}):
        if chunk.choices and chunk.choices[0].text:
            arrivals.append(time.monotonic())


def _longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest gap between consecutive arrivals among those whose interval overlaps
    [start, end]."""
    return max((b - a for a, b in zip(times, times[1:]) if b >= start and a <= end), default=0.0)


def test_a_large_schema_does_not_stall_decoding_streams(server):
    # the same chat prompt once, unconstrained: its prefill and the chat template's first
    # render are then behind us (a slot keeps the prompt), so what follows measures the schema
    chat = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1, "temperature": 0}
    assert server.post("/v1/chat/completions", json.dumps(chat).encode())[0] == 200
    arrivals: list[list[float]] = [[], []]
    threads = [threading.Thread(target=_stream, args=(server, a)) for a in arrivals]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    while min(len(a) for a in arrivals) < 40 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert min(len(a) for a in arrivals) >= 40, "the streams did not start"
    t_send = time.monotonic()
    compiled_before = _metric(server, "lexguide_grammar_compile_seconds_total")
    body = {**chat, "response_format": {"type": "json_schema", "json_schema": {
        "name": "big", "schema": big_schema(5000)}}}
    status, answer = server.post("/v1/chat/completions", json.dumps(body).encode(), timeout=300)
    t_done = time.monotonic()
    assert status == 200, answer
    compile_s = _metric(server, "lexguide_grammar_compile_seconds_total") - compiled_before
    for t in threads:
        t.join(300)
    for a in arrivals:
        assert a[-1] > t_done, "a stream ended before the compile did: nothing was measured"
    # before the request: the streams' own rhythm (prefill skipped); during it: the compile
    base = max(_longest_gap(a[5:], 0.0, a[30]) for a in arrivals)
    during = max(_longest_gap(a, t_send, t_done) for a in arrivals)
    print(f"compile {compile_s:.3f} s, request {t_done - t_send:.3f} s, longest gap "
          f"before {base * 1000:.0f} ms, during {during * 1000:.0f} ms")
    assert compile_s > 4 * base, "the schema compiles too fast to show a stall"
    # compiled on the decode loop, the streams would stop for the whole compile
    assert during - base < 0.5 * compile_s


def test_grammar_timeout(smollm2_file, tmp_path_factory):
    s = start_server(smollm2_file, tmp_path_factory.mktemp("timeout"), "--parallel", "1",
                     "--ctx", "256", "--grammar-timeout", "0.05")
    try:
        body = json.dumps({"prompt": "x", "max_tokens": 1, "json_schema": big_schema(3000)})
        status, answer = s.post("/v1/completions", body.encode())
        assert status == 400, answer
        error = answer["error"]
        assert error["code"] == "grammar_timeout" and error["param"] == "json_schema"
        assert "0.05 s" in error["message"] and "--grammar-timeout" in error["message"]
        assert _metric(s, "lexguide_grammar_timeouts_total") == 1
        # the compile went on in the background and was cached: the same schema is served
        deadline = time.monotonic() + 60
        while _metric(s, "lexguide_grammar_cache_entries") < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        status, answer = s.post("/v1/completions", body.encode())
        assert status == 200, answer
        # a schema the server has not seen still gets the 400 (the limit is per compile)
        other = json.dumps({"prompt": "x", "max_tokens": 1, "json_schema": big_schema(3000)})
        assert s.post("/v1/completions", other.encode())[0] == 400
    finally:
        s.stop()
