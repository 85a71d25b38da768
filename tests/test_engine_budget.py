"""Complete within the token budget: compute_mask(remaining) keeps only tokens after which the
grammar can still finish in time, so a random walk given at least the shortest completion's
length in tokens always ends complete."""

from __future__ import annotations

import random

import jsonschema
import numpy as np
import pytest

from lexguide import Grammar, Matcher, TokenizerInfo

# every byte the schemas need is a token, plus longer tokens that run ahead
ALPHABET = b'{}[]":,0123456789-.abcdefghijklmnopqrstuvwxyz \n'
VOCAB = [b"</s>"] + [bytes([c]) for c in ALPHABET] + [
    b'{"', b'":', b'"a', b'"b', b'", "', b'[1', b'],', b'": "', b'123456', b'"abcdef', b"null",
    b"true", b"[[[[", b"{{", b'{"a":[', b'"}', b']}', b'"x": {"', b"    ", b"\n  "]
INFO = TokenizerInfo.from_token_bytes(VOCAB, eos_ids=[0])
SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}},
                                      "b": {"type": "string"}}, "required": ["a", "b"]},
    {"$defs": {"t": {"type": "object", "properties": {"x": {"$ref": "#/$defs/t"}, "v": {"type": "integer"}},
                     "required": ["v"]}}, "$ref": "#/$defs/t"},
    {"type": "array", "items": {"type": "array", "items": {"type": "string", "maxLength": 4}}, "minItems": 2},
    {"type": "string", "pattern": "^[a-f]{3,9}$"},
    # a shortest completion of over 64 bytes (a byte-level search of 64 bytes finds none)
    {"type": "object", "required": [f"property{c}" for c in "abcdefgh"],
     "properties": {f"property{c}": {"type": "array", "items": {"type": "integer"}, "minItems": 1}
                    for c in "abcdefgh"}},
]


def _ids(mask: np.ndarray) -> list[int]:
    return np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little")[: len(VOCAB)]).tolist()


@pytest.mark.parametrize("schema", range(len(SCHEMAS)))
@pytest.mark.parametrize("seed", range(6))
def test_random_walks_complete_within_budget(schema, seed):
    rng = random.Random(seed)
    grammar = Grammar.from_json_schema(SCHEMAS[schema])
    m = Matcher(grammar, INFO)
    shortest = m.min_completion()
    assert shortest is not None and shortest > 0
    budget = shortest + rng.randint(0, 6)  # one token per byte of the shortest completion is enough
    out = []
    for used in range(budget):
        allowed = _ids(m.compute_mask(remaining=budget - used))
        assert allowed, "the budget mask left nothing"
        tok = rng.choice(allowed)
        m.consume(tok)
        if tok == 0:
            break
        out.append(tok)
    assert m.is_accepting(), b"".join(VOCAB[t] for t in out)
    text = b"".join(VOCAB[t] for t in out).decode()
    import json

    jsonschema.validate(json.loads(text), SCHEMAS[schema])


@pytest.mark.parametrize("seed", range(8))
def test_loose_budgets_narrow_in_time(seed):
    """A budget beyond the margin: the walk runs on the plain mask (deep into the recursive
    schema, with tokens such as '{"a":[') until the budget gets tight, then still completes."""
    rng = random.Random(seed)
    m = Matcher(Grammar.from_json_schema(SCHEMAS[1]), INFO)
    budget = m.min_completion() + 200  # beyond the margin (BUDGET_MARGIN = 128) at first
    out = []
    for used in range(budget):
        tok = rng.choice(_ids(m.compute_mask(remaining=budget - used)))
        m.consume(tok)
        if tok == 0:
            break
        out.append(tok)
    assert m.is_accepting(), b"".join(VOCAB[t] for t in out)


def test_shortest_completions_come_from_the_grammar():
    """min_completion() is the tokens of a real completion: greedy-split and replayed, it
    completes; beyond 64 bytes it is still found (SCHEMAS[4] needs about 130)."""
    g = Grammar.from_json_schema(SCHEMAS[4])
    m = Matcher(g, INFO)
    n = m.min_completion()
    assert n is not None and n > 64
    for _ in range(n):  # follow, each step, a token whose state is one token closer
        left = m.min_completion()
        nxt = [t for t in _ids(m.compute_mask(remaining=left)) if t != 0]
        probe = m.clone()
        probe.consume(nxt[0])
        assert probe.min_completion() <= left - 1
        m.consume(nxt[0])
        if m.is_accepting():
            break
    assert m.is_accepting()
    assert g.validate(b"".join(VOCAB[t] for t in m._tokens))
    # a grammar whose completion closes 70 nested levels
    lark = Grammar.from_lark('%llguidance {}\nstart: x\nx: "[" x "]" | "a"')
    deep = Matcher(lark, INFO)
    for _ in range(70):
        deep.consume(VOCAB.index(b"["))
    assert deep.min_completion() == 71


def test_without_a_budget_random_walks_run_out():
    """The test above can fail: the same walks with the plain mask often end incomplete."""
    incomplete = 0
    for seed in range(12):
        rng = random.Random(seed)
        m = Matcher(Grammar.from_json_schema(SCHEMAS[1]), INFO)
        budget = m.min_completion()
        for _ in range(budget):
            tok = rng.choice(_ids(m.compute_mask()))
            m.consume(tok)
            if tok == 0:
                break
        incomplete += not m.is_accepting()
    assert incomplete >= 6


def test_budget_mask_falls_back_when_nothing_fits():
    m = Matcher(Grammar.from_json_schema(SCHEMAS[0]), INFO)
    assert np.array_equal(m.compute_mask(remaining=1), m.compute_mask())
    assert m.compute_mask(remaining=1000) is not None  # outside the window: the plain mask


def test_a_hopeless_budget_is_judged_without_costing_every_token():
    # 20 required arrays: the shortest completion is far beyond 2x the tokens left, so the
    # plain mask comes back without per-token cost levels; at 2x it is still narrowed
    schema = {"type": "object", "required": [f"p{i}" for i in range(20)],
              "properties": {f"p{i}": {"type": "array", "items": {"type": "integer"},
                                       "minItems": 1} for i in range(20)}}
    m = Matcher(Grammar.from_json_schema(schema), INFO)
    c, core = m.min_completion(), m._engine._core
    assert c > 40
    assert np.array_equal(m.compute_mask(remaining=c // 2 - 1), m.compute_mask())
    assert core.stats["budget_levels"] == 0
    m.compute_mask(remaining=c // 2 + 1)
    assert core.stats["budget_levels"] == 1


def test_generation_with_a_small_budget_completes(smollm2_file):
    """The runtime passes what is left of max_tokens: a tight budget still ends valid, "stop"."""
    import json

    from lexguide import Model

    model = Model.from_gguf(smollm2_file)
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "tags": {
        "type": "array", "items": {"type": "string"}}}, "required": ["name", "tags"]}
    for n in (12, 16, 24):
        out = model.generate("A JSON record: ", json_schema=schema, max_tokens=n, temperature=0.8, seed=n)
        assert out.finish_reason == "stop", (n, out.text)
        jsonschema.validate(json.loads(out.text), schema)


def test_the_budget_mask_can_be_turned_off(smollm2_file):
    """complete_within_budget=False: the plain mask, so a tight budget cuts the output."""
    from lexguide import Model

    model = Model.from_gguf(smollm2_file)
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    cut = 0
    for seed in range(4):
        out = model.generate("A JSON record: ", json_schema=schema, max_tokens=8, temperature=1.0,
                             seed=seed, complete_within_budget=False)
        cut += out.finish_reason == "length"
        on = model.generate("A JSON record: ", json_schema=schema, max_tokens=8, temperature=1.0,
                            seed=seed)
        assert on.finish_reason == "stop", on.text
    assert cut >= 1
