"""Load, bounded: 32 concurrent constrained requests with different schemas and 8 bad ones
interleaved, in two rounds, against a real ``lexguide serve`` on 127.0.0.1 (SmolLM2).

Every good output validates, every bad request gets its 400, ``/health`` answers throughout,
and the server's RSS after the second round is within 10% of its RSS after the first.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from server_helpers import start_server

N_GOOD = 32
N_BAD = 8
ROUND_TIMEOUT_S = 240.0
HEALTH_MAX_S = 2.0


def _schema(round_: int, i: int) -> dict:
    key = f"r{round_}k{i}"
    value = [
        {"type": "integer", "minimum": 0, "maximum": 99},
        {"enum": ["red", "green", "blue"]},
        {"type": "boolean"},
        {"type": "string", "maxLength": 6},
    ][i % 4]
    return {"type": "object", "properties": {key: value}, "required": [key],
            "additionalProperties": False}


def _bad_requests(client, server) -> list:
    """(callable, expected code) pairs; each must end in HTTP 400 with that error code."""
    def chat(**kw):
        kw.setdefault("max_tokens", 4)
        return lambda: client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], **kw)
    return [
        (chat(response_format={"type": "json_schema", "json_schema": {
            "name": "b", "schema": {"type": "integer", "minimum": "zero"}}}), "invalid_schema"),
        (chat(extra_body={"grammar": "root ::= undefined_rule"}), "invalid_grammar"),
        (chat(extra_body={"regex": "(unclosed"}), "invalid_regex"),
        (chat(temperature=-3), "invalid_value"),
        (lambda: client.completions.create(model="m", prompt="go " * 1500, max_tokens=4),
         "context_length_exceeded"),
        (chat(max_tokens=10**12), "context_length_exceeded"),
        (chat(response_format={"type": "yaml"}), "invalid_value"),
        (chat(extra_body={"json_schema": {"type": "object", "properties": {"a": {"$ref": "#/nope"}}}}),
         "invalid_schema"),
    ]


def _good(client, round_: int, i: int):
    schema = _schema(round_, i)
    if i % 2:
        r = client.completions.create(model="m", prompt=f"Form {i} as JSON: ", max_tokens=32,
                                      temperature=0.7, seed=i, extra_body={"json_schema": schema})
        return schema, r.choices[0].text, r.choices[0].finish_reason
    r = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": f"Fill form {i}."}], max_tokens=32,
        temperature=0.7, seed=i, response_format={"type": "json_schema", "json_schema": {
            "name": f"form{i}", "schema": schema, "strict": True}})
    return schema, r.choices[0].message.content, r.choices[0].finish_reason


def _round(client, server, round_: int) -> None:
    bad = _bad_requests(client, server)
    jobs = []
    with ThreadPoolExecutor(N_GOOD + N_BAD) as pool:
        for i in range(N_GOOD):
            jobs.append(("good", pool.submit(_good, client, round_, i)))
            if i % 4 == 3:
                fn, code = bad[i // 4]
                jobs.append((code, pool.submit(_expect_400, fn)))
        deadline = time.monotonic() + ROUND_TIMEOUT_S
        for kind, fut in jobs:
            result = fut.result(timeout=max(1.0, deadline - time.monotonic()))
            if kind == "good":
                schema, text, finish = result
                assert finish == "stop", (text, finish)
                jsonschema.validate(json.loads(text), schema)
            else:
                assert result == kind, (result, kind)


def _expect_400(fn) -> str:
    try:
        fn()
    except openai.BadRequestError as e:
        return e.body["code"]
    raise AssertionError("a bad request was accepted")


def test_concurrent_constrained_requests(smollm2_file, tmp_path):
    server = start_server(smollm2_file, tmp_path, "--parallel", "8", "--ctx", "1024")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                           timeout=ROUND_TIMEOUT_S)
    health: list[float] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            status, _ = server.get("/health", timeout=HEALTH_MAX_S * 5)
            assert status == 200
            health.append(time.monotonic() - t0)
            stop.wait(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        t0 = time.monotonic()
        _round(client, server, 1)
        rss_first = server.rss_kib()
        t1 = time.monotonic()
        _round(client, server, 2)
        rss_second = server.rss_kib()
        t2 = time.monotonic()
    finally:
        stop.set()
        watcher.join(10)
        server.stop()
    print(f"rounds {t1 - t0:.1f} s, {t2 - t1:.1f} s; RSS {rss_first} -> {rss_second} KiB; "
          f"/health {len(health)} answers, slowest {max(health):.3f} s")
    assert len(health) > 10 and max(health) < HEALTH_MAX_S
    assert rss_second <= 1.10 * rss_first, (rss_first, rss_second)
    assert "Traceback" not in server.log.read_text()
