"""``lexguide serve --api-key``: the ``openai`` client against a real server (SmolLM2), and the
key's sources (flag, ``LEXGUIDE_API_KEY``)."""

from __future__ import annotations

import argparse
import json

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from server_helpers import Server, start_server

KEY = "sk-test-0123456789"


@pytest.fixture(scope="module")
def server(smollm2_file, tmp_path_factory) -> Server:
    # the key comes from the environment; a different one there would be overridden by a flag
    s = start_server(smollm2_file, tmp_path_factory.mktemp("auth"), "--parallel", "1",
                     "--ctx", "256", env={"LEXGUIDE_API_KEY": KEY})
    yield s
    s.stop()
    assert "Traceback" not in s.log.read_text()


def _client(server, key):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, timeout=60)


def _complete(server, key):
    return _client(server, key).completions.create(model="m", prompt="Hello", max_tokens=2,
                                                   temperature=0)


def test_the_right_key_is_served(server):
    r = _complete(server, KEY)
    assert r.usage.completion_tokens == 2 and r.choices[0].text
    assert _client(server, KEY).models.list().data[0].object == "model"


@pytest.mark.parametrize("key", ["wrong", KEY + "x", KEY[:-1], "unused"])
def test_a_wrong_key_gets_401(server, key):
    with pytest.raises(openai.AuthenticationError) as e:
        _complete(server, key)
    assert e.value.status_code == 401
    assert e.value.body["code"] == "invalid_api_key"
    assert KEY not in json.dumps(e.value.body)


def test_no_key_gets_401_in_openais_shape(server):
    status, body = server.post("/v1/chat/completions", json.dumps(
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}).encode())
    assert status == 401
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "invalid_request_error"
    status, _ = server.post("/v1/completions", b'{"prompt": "x"}',
                            headers={"Authorization": "Basic " + KEY})
    assert status == 401  # only the Bearer scheme counts


def test_open_and_closed_paths(server):
    assert server.post("/v1/completions", b'{"prompt": "x"}')[0] == 401
    assert server.get("/health")[0] == 200
    assert server.get("/")[0] == 200  # the page; its requests send the key typed into it
    assert server.get("/metrics")[0] == 401
    assert server.get("/v1/models")[0] == 401
    bearer = {"Authorization": f"bearer {KEY}"}  # the scheme is case-insensitive
    status, text = server.get("/metrics", headers=bearer)
    assert status == 200
    assert 'lexguide_requests_total{path="/v1/completions",status="401"}' in text.decode()


def test_where_the_key_comes_from():
    from lexguide.server.command import api_key

    def args(flag):
        return argparse.Namespace(api_key=flag)

    assert api_key(args(None), {}) is None
    assert api_key(args(None), {"LEXGUIDE_API_KEY": ""}) is None
    assert api_key(args(None), {"LEXGUIDE_API_KEY": "env"}) == "env"
    assert api_key(args("flag"), {"LEXGUIDE_API_KEY": "env"}) == "flag"
    with pytest.raises(ValueError):
        api_key(args(""), {})
