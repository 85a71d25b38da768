"""Token budgets inside ``uniqueItems`` arrays (``lexguide.engine.unique_budget``): with
``compute_mask(remaining)`` the output ends complete whenever a completion avoiding recorded
duplicates fits in the budget it started with, and never stops in a dead end.

The schemas' shortest items repeat (strings of one character, small integers, an enum's first
values, objects with an empty string), so the core's own shortest completion closes a
duplicate. Oracles: a known distinct instance per schema (its tokens bound the budget that
must suffice), the ``jsonschema`` validator for every complete output, and a mutation (the
distinct search disabled: the core's completion trusted) that the generations catch.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

jsonschema = pytest.importorskip("jsonschema")

import lexguide
from lexguide.engine import Matcher, TokenizerInfo
from lexguide.engine.grammar import Grammar
from lexguide.engine.unique_budget import DistinctBudget
from lexguide.engine.unique_items import EMPTY


def _array(items: dict, **kw) -> dict:
    return {"type": "array", "items": items, "uniqueItems": True, **kw}


#: (schema, a shortest distinct instance)
CASES = {
    "strings": (_array({"type": "string", "minLength": 1}, minItems=3), b'["a","b","c"]'),
    "integer range": (_array({"type": "integer", "minimum": 0, "maximum": 100000}, minItems=3),
                      b"[0,1,2]"),
    "integers 0..5": (_array({"type": "integer", "minimum": 0, "maximum": 5}, minItems=3),
                      b"[0,1,2]"),
    "enum": (_array({"enum": [f"v{i}" for i in range(20)]}, minItems=3), b'["v0","v1","v2"]'),
    "objects": (_array({"type": "object", "properties": {"k": {"type": "string"}},
                        "required": ["k"], "additionalProperties": False}, minItems=2),
                b'[{"k":""},{"k":"a"}]'),
    "numbers": (_array({"type": "number", "minimum": 0, "maximum": 100, "multipleOf": 0.5},
                       minItems=3, maxItems=5), b"[0,1,2]"),
}

SMALL = [bytes([b]) for b in b'[]{}",:0123456789abckvxyz -.\n'] + [
    b'"a"', b'"a', b'a"', b'"]', b'",', b'", "', b"0,", b"1,", b'"b"', b'"v', b'{"k":"', b'"}',
    b'"},', b'"k"', b"true"]
SMALL_EOS = len(SMALL)
SMALL_INFO = TokenizerInfo.from_token_bytes(SMALL + [b""], [SMALL_EOS])


def _ids(mask: np.ndarray, n: int) -> np.ndarray:
    bits = np.unpackbits(np.ascontiguousarray(mask).view(np.uint8), bitorder="little")[:n]
    return np.flatnonzero(bits)


def _generate(g: Grammar, info: TokenizerInfo, budget: int, seed: int) -> tuple[bytes, str]:
    """A random generation under ``budget`` tokens: (text, "complete" | "cut" | "dead end")."""
    rng = random.Random(seed)
    m = Matcher(g, info)
    out = b""
    for n in range(budget):
        ids = _ids(m.compute_mask(budget - n), info.vocab_size).tolist()
        if not ids:
            return out, "dead end"
        short = [t for t in ids if len(info.token_bytes[t]) <= 2]
        t = rng.choice(short if short and rng.random() < 0.6 else ids)
        m.consume(t)
        if t in info.eos_ids:
            return out, "complete"
        out += info.token_bytes[t]
    return out, "complete" if m.is_accepting() else "cut"


def _instance_tokens(g: Grammar, info: TokenizerInfo, text: bytes) -> int:
    """Tokens of ``text`` (longest match, or the tokenizer's), checked to be accepted."""
    m = Matcher(g, info)
    tokens = m._tokenize_forced(text)
    assert b"".join(info.token_bytes[t] for t in tokens) == text
    m.consume_tokens(tokens)
    assert m.is_accepting()
    return len(tokens)


def _check(name: str, info: TokenizerInfo, seeds: int, extra: int) -> list[tuple]:
    """Generations with budgets from the core's shortest completion at the start upward:
    the failures (a dead end anywhere, an incomplete output where the known distinct
    instance fits, an invalid complete one)."""
    schema, instance = CASES[name]
    g = Grammar.from_json_schema(schema)
    fits = _instance_tokens(g, info, instance)
    start = Matcher(g, info).min_completion()
    assert start is not None and start <= fits
    failures = []
    for budget in range(start, fits + extra):
        for seed in range(seeds):
            text, how = _generate(g, info, budget, seed)
            if how == "dead end" or (how == "cut" and budget >= fits):
                failures.append((budget, seed, how, text))
            elif how == "complete":
                jsonschema.validate(json.loads(text), schema)
    return failures


@pytest.mark.parametrize("name", sorted(CASES))
def test_small_vocabulary_budgets_are_kept(name):
    assert _check(name, SMALL_INFO, seeds=12, extra=4) == []


def test_the_search_finds_the_known_distinct_instance():
    schema, instance = CASES["strings"]
    g = Grammar.from_json_schema(schema)
    m = Matcher(g, SMALL_INFO)
    fits = _instance_tokens(g, SMALL_INFO, instance)
    distinct = DistinctBudget(m._unique, m._engine)
    assert distinct.fits(EMPTY, m.state, fits)
    # none shorter than the core's shortest completion (a duplicate or not) is claimed
    assert not distinct.fits(EMPTY, m.state, m.min_completion() - 1)


def test_mutation_trusting_the_core_completion_overruns(monkeypatch):
    """With the distinct search disabled (every token the core's narrowed mask keeps is
    trusted) the strings generations end incomplete within budgets the instance fits."""
    monkeypatch.setattr(DistinctBudget, "fits", lambda self, st, state, left, nodes=None: True)
    assert _check("strings", SMALL_INFO, seeds=12, extra=2)


def test_grammars_without_unique_items_and_loose_budgets_pay_nothing(monkeypatch):
    def searched(*args):
        raise AssertionError("a distinct completion was searched")

    monkeypatch.setattr(DistinctBudget, "fits", searched)
    g = Grammar.from_json_schema({"type": "array", "items": {"type": "string"}, "minItems": 3})
    m = Matcher(g, SMALL_INFO)
    m.compute_mask(5)
    assert m._engine.distinct_budget is None
    schema, _ = CASES["strings"]
    m = Matcher(Grammar.from_json_schema(schema), SMALL_INFO)
    for t in m._tokenize_forced(b'["a","'):
        assert np.array_equal(m.compute_mask(1000), m.compute_mask())
        m.consume(t)


@pytest.mark.parametrize("name", sorted(CASES))
def test_smollm2_vocabulary_budgets_are_kept(smollm2_file, name):
    info = TokenizerInfo.from_tokenizer(lexguide.Tokenizer.from_gguf(smollm2_file))
    assert _check(name, info, seeds=5, extra=3) == []
