"""Continuous batching with the real SmolLM2: concurrent requests are decoded in the same
batched forward, and their greedy answers equal those of the same requests run one at a time.

In-process (the scheduler without HTTP), so a hook on ``Transformer.forward_batch`` can count
the sequences of each decode forward.
"""

from __future__ import annotations

import json
import threading

import pytest

from lexguide.server.protocol import parse_chat_request, parse_completion_request
from lexguide.server.scheduler import Job, Scheduler

PERSON = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 10},
                         "age": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["name", "age"], "additionalProperties": False}
REQUESTS = [
    ("completion", {"prompt": "The capital of France is", "max_tokens": 10, "temperature": 0}),
    ("completion", {"prompt": "Once upon a time", "max_tokens": 14, "temperature": 0}),
    ("chat", {"messages": [{"role": "user", "content": "Invent a person."}], "max_tokens": 30,
              "temperature": 0, "response_format": {"type": "json_schema", "json_schema": {
                  "name": "p", "schema": PERSON}}}),
    ("completion", {"prompt": "Numbers:", "max_tokens": 12, "temperature": 0,
                    "regex": "( [0-9]{1,3},){3,}"}),
    ("chat", {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8,
              "temperature": 0, "n": 2}),
]


@pytest.fixture(scope="module")
def model(smollm2_file):
    from lexguide import Model

    return Model.from_gguf(smollm2_file, n_ctx=512)


def _answers(model, parallel: int) -> tuple[list[list[str]], list[int]]:
    """Every request submitted at once; (texts per request, sequences per decode forward)."""
    tf = model.transformer
    sizes: list[int] = []
    real = tf.forward_batch

    def counting(batch):
        sizes.append(len(batch))
        return real(batch)

    sched = Scheduler(model, parallel=parallel, n_ctx=512)
    events: list[list] = [[] for _ in REQUESTS]
    done = threading.Semaphore(0)

    def poster(i: int):
        def post(ev):
            events[i].append(ev)
            if ev[0] == "error" or (ev[0] == "finish" and
                                    sum(e[0] == "finish" for e in events[i]) == REQUESTS[i][1].get("n", 1)):
                done.release()
        return post

    parse = {"chat": parse_chat_request, "completion": parse_completion_request}
    jobs = [Job(parse[kind](json.loads(json.dumps(body))), poster(i))
            for i, (kind, body) in enumerate(REQUESTS)]
    tf.forward_batch = counting
    try:
        with sched._wake:  # all in the inbox before the loop looks
            sched._inbox.extend(jobs)
        sched.start()
        for _ in jobs:
            assert done.acquire(timeout=120), events
    finally:
        sched.stop()
        del tf.forward_batch
    assert not any(e[0] == "error" for ev in events for e in ev), events
    texts = [[e[1].text for e in sorted((e for e in ev if e[0] == "finish"),
                                        key=lambda e: e[1].index)] for ev in events]
    return texts, sizes


def test_concurrent_requests_share_forwards_and_match_sequential_answers(model):
    alone, alone_sizes = _answers(model, parallel=1)
    together, sizes = _answers(model, parallel=6)
    print(f"decode forwards: {len(alone_sizes)} one at a time, {len(sizes)} batched {sizes}")
    assert max(alone_sizes) == 1
    # all six sequences (five requests, one with n=2) decode in the same forwards
    assert max(sizes) == 6
    assert len(sizes) < len(alone_sizes) / 2  # fewer forwards: the steps were shared
    assert together == alone
    person = json.loads(together[2][0])
    assert set(person) == {"name", "age"}
