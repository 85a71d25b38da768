"""Log probabilities end to end: the ``openai`` client against a real ``lexguide serve``
(SmolLM2), checked against the grammar (a ``Matcher`` replaying the output) and against the
model's own logits computed in this process."""

from __future__ import annotations

import math

import numpy as np
import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from server_helpers import PERSON, Server, start_server

SCHEMA = PERSON
MESSAGES = [{"role": "user", "content": "Invent a person. Reply in JSON."}]


@pytest.fixture(scope="module")
def server(smollm2_file, tmp_path_factory) -> Server:
    s = start_server(smollm2_file, tmp_path_factory.mktemp("logprobs"), "--parallel", "2",
                     "--ctx", "512")
    yield s
    s.stop()
    assert "Traceback" not in s.log.read_text()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                         timeout=120)


@pytest.fixture(scope="module")
def model(smollm2_file):
    from lexguide.runtime import Model

    return Model.from_gguf(smollm2_file, n_ctx=512)


def _schema_request(**kw):
    return dict(model="m", messages=MESSAGES, max_tokens=40, temperature=0, logprobs=True,
                top_logprobs=3, response_format={"type": "json_schema", "json_schema": {
                    "name": "person", "schema": SCHEMA}}, **kw)


def test_chat_logprobs_under_a_schema(client, model):
    from lexguide import Grammar, Matcher
    from lexguide.runtime.sampler import mask_to_ids

    r = client.chat.completions.create(**_schema_request())
    choice = r.choices[0]
    content = choice.logprobs.content
    assert len(content) == r.usage.completion_tokens > 5
    assert b"".join(bytes(e.bytes) for e in content).decode() == choice.message.content
    token_bytes = model.tokenizer.all_token_bytes()
    eog = set(model.tokenizer.eog_ids)
    matcher = Matcher(Grammar.from_json_schema(SCHEMA), model.tokenizer_info)
    n_full = n_forced = 0
    for e in content:
        assert e.logprob <= 0.0
        assert 1 <= len(e.top_logprobs) <= 3
        assert e.logprob == e.top_logprobs[0].logprob == max(a.logprob for a in e.top_logprobs)
        assert [a.logprob for a in e.top_logprobs] == sorted(
            (a.logprob for a in e.top_logprobs), reverse=True)
        assert sum(math.exp(a.logprob) for a in e.top_logprobs) <= 1.0 + 1e-9
        allowed = mask_to_ids(matcher.compute_mask(), len(token_bytes))
        allowed_bytes = {token_bytes[t] for t in allowed}
        for alt in e.top_logprobs:  # every listed token is one the grammar allows here
            if alt.bytes is None:
                assert eog & set(allowed.tolist()), alt
            else:
                assert bytes(alt.bytes) in allowed_bytes, (alt, choice.message.content)
        n_full += len(e.top_logprobs) == 3
        n_forced += e.logprob == 0.0 and len(e.top_logprobs) == 1
        ids = [t for t in allowed if token_bytes[t] == bytes(e.bytes)]
        matcher.consume(int(ids[0]))
    assert n_full and n_forced  # sampled positions list 3 alternatives; forced ones only one
    assert matcher.is_accepting()


def test_chat_logprobs_streamed_agree(client):
    whole = client.chat.completions.create(**_schema_request())
    streamed = []
    text = ""
    for chunk in client.chat.completions.create(**_schema_request(stream=True)):
        for c in chunk.choices:
            text += c.delta.content or ""
            if c.logprobs is not None:
                streamed += c.logprobs.content
    assert text == whole.choices[0].message.content
    expected = whole.choices[0].logprobs.content
    assert [e.token for e in streamed] == [e.token for e in expected]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in expected], abs=1e-6)
    assert [[a.token for a in e.top_logprobs] for e in streamed] == \
        [[a.token for a in e.top_logprobs] for e in expected]


def _log_softmax(x):
    x = np.asarray(x, dtype=np.float64)
    return x - (x.max() + np.log(np.exp(x - x.max()).sum()))


def test_completion_logprobs_match_the_model(client, model):
    prompt = model.tokenizer.encode("The capital of France is")
    r = client.completions.create(model="m", prompt=prompt, max_tokens=4, temperature=0,
                                  logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(4)]
    assert "".join(lp.tokens) == r.choices[0].text
    ids = list(prompt)
    for i in range(4):  # the oracle: the model's logits at each position, computed here
        row = _log_softmax(model.logits(ids)[-1])
        best = np.argsort(-row, kind="stable")[:2]
        names = [model.tokenizer.token_bytes(int(t)).decode() for t in best]
        assert lp.tokens[i] == names[0]
        assert lp.token_logprobs[i] == pytest.approx(row[best[0]], abs=2e-3)
        assert list(lp.top_logprobs[i]) == names
        assert list(lp.top_logprobs[i].values()) == pytest.approx(row[best].tolist(), abs=2e-3)
        ids.append(int(best[0]))


def test_completion_logprobs_streamed(client):
    whole = client.completions.create(model="m", prompt="Count: 1, 2, 3,", max_tokens=6,
                                      temperature=0, logprobs=2).choices[0].logprobs
    tokens, offsets, top = [], [], []
    for chunk in client.completions.create(model="m", prompt="Count: 1, 2, 3,", max_tokens=6,
                                           temperature=0, logprobs=2, stream=True):
        lp = chunk.choices[0].logprobs
        if lp is not None:
            tokens += lp.tokens
            offsets += lp.text_offset
            top += lp.top_logprobs
    assert tokens == whole.tokens and offsets == whole.text_offset
    assert [list(d) for d in top] == [list(d) for d in whole.top_logprobs]


def test_logprobs_fields_are_checked(server):
    import json

    def bad(path, body):
        status, answer = server.post(path, json.dumps(body).encode())
        assert status == 400, answer
        return answer["error"]["param"]

    chat = {"messages": MESSAGES, "max_tokens": 1}
    assert bad("/v1/chat/completions", {**chat, "top_logprobs": 2}) == "top_logprobs"
    assert bad("/v1/chat/completions", {**chat, "logprobs": True, "top_logprobs": 21}) == \
        "top_logprobs"
    assert bad("/v1/chat/completions", {**chat, "logprobs": 3}) == "logprobs"
    assert bad("/v1/completions", {"prompt": "x", "logprobs": 6}) == "logprobs"
    status, answer = server.post("/v1/chat/completions", json.dumps(
        {**chat, "logprobs": True}).encode())  # top_logprobs defaults to 0: no alternatives
    assert status == 200
    entry, = answer["choices"][0]["logprobs"]["content"]
    assert entry["top_logprobs"] == [] and entry["logprob"] <= 0.0


def test_token_names_against_brute_force():
    """``TokenNames.sampled`` on a toy vocabulary, against a log-softmax written out here."""
    from lexguide.server.logprobs import LOGPROB_FLOOR, TokenNames

    vocab = [b"a", b"b", b"\xe2\x82", b"", b"c", b"d"]
    names = TokenNames(vocab, lambda t: f"<special {t}>")
    logits = np.array([1.0, 3.0, 3.0, 2.0, -np.inf, -30000.0])
    allowed = np.array([0, 1, 2, 3, 4, 5])
    finite = np.isfinite(logits)
    z = np.log(np.exp(logits[finite]).sum())
    e = names.sampled(logits, allowed, 0, 4)
    assert e.token == "a" and e.bytes == b"a" and e.logprob == pytest.approx(1.0 - z)
    # most likely first, ties by lower id; undecodable bytes escaped; a special token by name
    assert [(t, b) for t, b, _ in e.top] == [("b", b"b"), ("\\xe2\\x82", b"\xe2\x82"),
                                            ("<special 3>", None), ("a", b"a")]
    assert [lp for _, _, lp in e.top] == pytest.approx([3.0 - z, 3.0 - z, 2.0 - z, 1.0 - z])
    assert names.sampled(logits, allowed, 5, 0).logprob == LOGPROB_FLOOR  # clamped, not -30002
    # a subset of the vocabulary (a grammar mask): renormalised over it
    sub = names.sampled(np.array([1.0, 1.0]), np.array([0, 4]), 4, 5)
    assert sub.logprob == pytest.approx(math.log(0.5)) and len(sub.top) == 2
    forced = names.forced(1, 3)
    assert forced.logprob == 0.0 and forced.top == (("b", b"b", 0.0),)
    assert names.forced(1, 0).top == ()
