"""Constrained generation: real engine + real SmolLM2, and the loop's contract with a scripted
matcher (forced tokens batched into one forward, failures raise, never unconstrained)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from lexguide.errors import MatcherError, TokenRejected
from lexguide.runtime import Model

jsonschema = pytest.importorskip("jsonschema")

SCHEMAS = [
    {"type": "object",
     "properties": {"name": {"type": "string", "maxLength": 12},
                    "age": {"type": "integer", "minimum": 0, "maximum": 120}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "array", "items": {"type": "integer", "minimum": -99, "maximum": 999},
     "minItems": 1, "maxItems": 3},
    {"enum": ["red", "green", "blue"]},
    {"type": "object",
     "properties": {"ok": {"type": "boolean"},
                    "tags": {"type": "array", "items": {"type": "string", "maxLength": 8},
                             "maxItems": 2}},
     "required": ["ok", "tags"], "additionalProperties": False},
]
MESSAGES = [{"role": "user", "content": "Describe a person as JSON."}]


@pytest.fixture(scope="module")
def smollm2(smollm2_file):
    return Model.from_gguf(smollm2_file, n_threads=1, n_ctx=256, progress=False)


@pytest.mark.parametrize("schema", SCHEMAS, ids=["object", "array", "enum", "nested"])
@pytest.mark.parametrize("temperature,seed", [(0.0, None), (1.0, 1)])
def test_json_schema_outputs_validate(smollm2, schema, temperature, seed):
    out = smollm2.chat(MESSAGES, json_schema=schema, max_tokens=80, temperature=temperature,
                       seed=seed)
    assert out.finish_reason == "stop", out.text
    jsonschema.validate(json.loads(out.text), schema)
    assert out.timings.mask_steps > 0


GRAMMARS = [
    ('root ::= "yes" | "no" | "maybe"', r"yes|no|maybe"),
    ('%llguidance {}\nstart: "(" NUM ("," NUM)* ")"\nNUM: /[0-9]{1,3}/\n', r"\([0-9]{1,3}(,[0-9]{1,3})*\)"),
]


@pytest.mark.parametrize("grammar,pattern", GRAMMARS, ids=["gbnf", "lark"])
@pytest.mark.parametrize("temperature,seed", [(0.0, None), (1.0, 5)])
def test_grammar_outputs_match(smollm2, grammar, pattern, temperature, seed):
    out = smollm2.generate("Answer:", grammar=grammar, max_tokens=30, temperature=temperature,
                           seed=seed)
    assert out.finish_reason == "stop", out.text
    assert re.fullmatch(pattern, out.text), out.text


def test_regex_grammar(smollm2):
    from lexguide import Grammar

    g = Grammar.from_regex(r"[0-9]{3}-[a-z]{2}")
    for seed in (1, 2, 3):
        out = smollm2.generate("Code:", grammar=g, max_tokens=12, temperature=1.0, seed=seed)
        assert re.fullmatch(r"[0-9]{3}-[a-z]{2}", out.text) and out.finish_reason == "stop"


def test_completion_reports_captures(smollm2):
    grammar = '%llguidance {}\nstart: "(" num "," word ")"\nnum[capture]: /[0-9]{1,3}/\nword[capture="w"]: /[a-z]{1,6}/\n'
    out = smollm2.generate("Pair:", grammar=grammar, max_tokens=20, temperature=1.0, seed=3)
    assert out.finish_reason == "stop", out.text
    m = re.fullmatch(r"\(([0-9]{1,3}),([a-z]{1,6})\)", out.text)
    assert m and out.captures == [("num", m.group(1)), ("w", m.group(2))]


# ------------------------------------------------------------------ scripted matcher contract
def _mask(n_vocab, ids):
    mask = np.zeros((n_vocab + 31) // 32, dtype=np.uint32)
    for t in ids:
        mask[t >> 5] |= np.uint32(1 << (t & 31))
    return mask


class ScriptedMatcher:
    """Allows exactly ``script[i]`` at step i; forces ``forced`` after the first token."""

    def __init__(self, n_vocab, script, forced=(), eos=2, stop_unaccepted=False, reject=None):
        self.n_vocab, self.script, self.forced = n_vocab, list(script), list(forced)
        self.eos, self.stop_unaccepted, self.reject = eos, stop_unaccepted, reject
        self.consumed: list[int] = []
        self.masks = 0

    def _done(self):
        return len(self.consumed) >= len(self.script) + len(self.forced)

    def compute_mask(self):
        self.masks += 1
        if self._done():
            return _mask(self.n_vocab, [self.eos])
        return _mask(self.n_vocab, self.script[self._step()])

    def _step(self):
        return len([t for t in self.consumed if t not in self.forced])

    def consume(self, token):
        if token == self.reject:
            raise TokenRejected(token)
        self.consumed.append(int(token))

    def forced_tokens(self):
        if len(self.consumed) == 1 and self.forced:
            return list(self.forced)
        return []

    def is_accepting(self):
        return self._done() and not self.stop_unaccepted

    def is_stopped(self):
        return self.eos in self.consumed or (self.stop_unaccepted and len(self.consumed) >= 1)


def test_forced_tokens_join_one_batched_forward(smollm2, monkeypatch):
    tf = smollm2.transformer
    calls = []
    real = tf.hidden_last
    monkeypatch.setattr(tf, "hidden_last", lambda ids, cache: calls.append(list(ids)) or real(ids, cache))
    m = ScriptedMatcher(smollm2.config.n_vocab, script=[[7042, 900], [30]], forced=[11, 12])
    out = smollm2.generate([504, 3575, 282, 4649, 314], matcher=m, max_tokens=10, temperature=0)
    assert out.token_ids == [7042, 11, 12, 30]  # sampled, forced, forced, sampled
    assert m.consumed == [7042, 11, 12, 30, 2]  # EOS consumed once the grammar is complete
    assert out.finish_reason == "stop"
    # forward batches: the prompt (or its uncached part), then [sampled + forced], then [30]
    assert calls[1:] == [[7042, 11, 12], [30]]
    assert out.timings.forced_tokens == 2


def test_matcher_failures_raise_never_continue(smollm2):
    n = smollm2.config.n_vocab
    with pytest.raises(MatcherError, match="allows no token"):
        smollm2.generate("Hi", matcher=ScriptedMatcher(n, script=[[]]), max_tokens=3)
    with pytest.raises(MatcherError, match="rejected"):
        smollm2.generate("Hi", matcher=ScriptedMatcher(n, script=[[5]], reject=5), max_tokens=3)
    with pytest.raises(MatcherError, match="dead end"):
        smollm2.generate("Hi", matcher=ScriptedMatcher(n, script=[[5], [6]], stop_unaccepted=True),
                         max_tokens=3)


def test_max_tokens_stops_an_incomplete_constrained_output(smollm2):
    # no completion fits in 3 tokens (when one does, the masks keep the output completable)
    out = smollm2.generate("Hi", json_schema={"type": "string", "minLength": 400},
                           max_tokens=3, temperature=0)
    assert out.finish_reason == "length" and len(out.token_ids) == 3


def test_repeated_schema_reuses_the_compiled_grammar(smollm2):
    """A schema (or grammar text) seen again is not recompiled: its memoised masks serve the
    next request. Equal dicts hit the cache; a different property order is another schema."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}},
              "required": ["n"]}
    smollm2._grammars.clear()
    first = smollm2._matcher(None, schema)
    again = smollm2._matcher(None, json.loads(json.dumps(schema)))
    assert again.grammar is first.grammar and again._engine is first._engine
    reordered = {"type": "object", "properties": {"s": {"type": "string"}, "n": {"type": "integer"}},
                 "required": ["n"]}
    assert smollm2._matcher(None, reordered).grammar is not first.grammar
    text = '%llguidance {}\nstart: "yes" | "no"'
    assert smollm2._matcher(text, None).grammar is smollm2._matcher(text, None).grammar
    out = smollm2.generate("Answer: ", json_schema=schema, max_tokens=24, temperature=0)
    assert out.finish_reason in ("stop", "length")
    assert len(smollm2._grammars) == 3
