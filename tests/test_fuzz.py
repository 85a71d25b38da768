"""A short, seeded run of the engine's fuzz target (tests/fuzz/fuzz_engine.py) without atheris:
random inputs and mutations of grammars, schemas and regexes; only typed errors may escape."""

from __future__ import annotations

import random

import pytest

from fuzz.fuzz_engine import one_input

SEEDS = [
    (0, 'start: "a" b*\nb: /[01]+/ | "ab"'),
    (0, '%ignore /[ ]+/\nstart: item ("," item)*\nitem: /[a-z]+/ | "[" start "]"'),
    (1, 'root ::= "{" ws pair (ws "," ws pair)* ws "}"\npair ::= "\\"a\\"" ws ":" ws [0-9]+\nws ::= [ \\n]*'),
    (2, '{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"array","items":{"enum":["ab",1]}}}}'),
    (2, '{"type":"string","maxLength":5,"pattern":"^a+b?$"}'),
    (3, "(ab|01)+(\\.[0-9]{1,3})?"),
    (3, "[^\\n]{0,8}é"),
]


def _mutate(rng: random.Random, text: bytes) -> bytes:
    b = bytearray(text)
    for _ in range(rng.randint(0, 4)):
        op = rng.random()
        i = rng.randrange(len(b) + 1)
        if op < 0.4 and b:
            del b[min(i, len(b) - 1)]
        elif op < 0.8:
            b.insert(i, rng.choice(b'(){}[]|*+?"\\:,ab01 \n^$.-'))
        else:
            b[i:i] = b[: rng.randint(0, len(b))]  # duplicate a prefix: nesting
    return bytes(b[:255])


@pytest.mark.parametrize("chunk", range(8))
def test_fuzz_body_on_seeded_inputs(chunk):
    rng = random.Random(chunk)
    for _ in range(60):
        kind, text = rng.choice(SEEDS)
        body = _mutate(rng, text.encode())
        steps = bytes(rng.randrange(256) for _ in range(rng.randint(0, 40)))
        one_input(bytes([kind, len(body)]) + body + steps)


def test_fuzz_body_catches_a_mask_consume_mismatch(monkeypatch):
    """The body's checks can fail: a matcher whose consume accepts everything is caught."""
    from lexguide.engine import matcher as matcher_module

    monkeypatch.setattr(matcher_module.Matcher, "consume", lambda self, t: None)
    with pytest.raises(AssertionError):
        one_input(bytes([3, 2]) + b"ab" + bytes([0x80 | 3] * 4))
