"""``Model.generate`` and the server's scheduler run one generation step
(``lexguide.runtime.step.Decoding``): for the same prompt, seed and constraint both give the
same tokens, greedy and sampled, the scheduler decoding the requests together in batched
forwards; and the step's own checks (stop strings, budgets, forced tokens) on a scripted
matcher, without a model.
"""

from __future__ import annotations

import numpy as np
import pytest

from lexguide.errors import MatcherError
from lexguide.runtime.sampler import Sampler, SamplerConfig
from lexguide.runtime.step import Decoding, Piece
from test_server_protocol import _run_jobs

PERSON = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 10},
                         "age": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["name", "age"], "additionalProperties": False}
PAIR = '%llguidance {}\nstart: "(" /[0-9]{1,3}/ ", " /[a-z]{1,6}/ ")"\n'
PROMPT = "Here is some data:"

# (request fields shared by both paths, generate()'s constraint keyword)
CASES = [
    ({"max_tokens": 12, "temperature": 0, "stop": [" 35"]}, {}),
    ({"max_tokens": 16, "temperature": 0.9, "seed": 11}, {}),
    ({"max_tokens": 40, "temperature": 0}, {"json_schema": PERSON}),
    ({"max_tokens": 40, "temperature": 1.0, "seed": 5}, {"json_schema": PERSON}),
    ({"max_tokens": 20, "temperature": 1.0, "seed": 3}, {"grammar": PAIR}),
    ({"max_tokens": 4, "temperature": 0.7, "seed": 9}, {"grammar": PAIR}),  # runs out
]


@pytest.fixture(scope="module")
def model(smollm2_file):
    from lexguide import Model

    return Model.from_gguf(smollm2_file, n_ctx=512)


def _served(model, bodies: list[dict]) -> list[tuple]:
    """Every request submitted at once to an in-process scheduler (batched forwards);
    (text, the tokens' bytes, finish reason) per request (the bytes from the log
    probabilities' entries, one per token)."""
    out = []
    for ev in _run_jobs(model, bodies, parallel=len(bodies)):
        assert ev[-1][0] == "finish", ev
        r = ev[-1][1]
        assert "".join(e[2] for e in ev if e[0] == "delta") == r.text
        assert len(r.logprobs) == r.n_tokens
        out.append((r.text, [e.bytes for e in r.logprobs], r.finish_reason))
    return out


def test_generate_and_scheduler_give_the_same_outputs(model):
    ids = model.tokenizer.encode(PROMPT)
    bodies = []
    for fields, constraint in CASES:
        body = {"prompt": ids, "logprobs": 0, **fields}
        if "json_schema" in constraint:
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "p", "schema": constraint["json_schema"]}}
        elif "grammar" in constraint:
            body["grammar"] = constraint["grammar"]
        bodies.append(body)
    served = _served(model, bodies)
    alone = []
    table = model._token_bytes
    for fields, constraint in CASES:
        out = model.generate(ids, **fields, **constraint)
        assert out.text == model.tokenizer.decode(out.token_ids) or "stop" in fields
        alone.append((out.text, [table[t] for t in out.token_ids], out.finish_reason))
    assert served == alone
    # the cases mean something: a stop string hit, a grammar completed, a budget ran out
    assert served[0][2] == "stop" and served[2][2] == "stop" and served[5][2] == "length"
    assert len({text for text, _, _ in served}) == len(CASES)


# -- the step alone, on a scripted matcher ----------------------------------------------------
TABLE = [bytes([c]) for c in b"abcdefgh"] + [b""]  # token i is the letter "abcdefgh"[i]; 8 EOS
EOG = np.zeros(len(TABLE), dtype=bool)
EOG[8] = True


class _Scripted:
    """Forces ``forced`` after the first token; stopped once ``n_stop`` tokens are in."""

    def __init__(self, forced=(), n_stop=99, accepting=True, reject=None):
        self.consumed: list[int] = []
        self.forced, self.n_stop, self.accepting, self.reject = list(forced), n_stop, accepting, reject

    def consume(self, t):
        from lexguide.errors import TokenRejected

        if t == self.reject:
            raise TokenRejected(t)
        self.consumed.append(t)

    def forced_tokens(self):
        return list(self.forced) if len(self.consumed) == 1 else []

    def is_stopped(self):
        return len(self.consumed) >= self.n_stop

    def is_accepting(self):
        return self.accepting and len(self.consumed) >= min(self.n_stop, 2)


def _dec(matcher=None, max_tokens=10, stops=()):
    return Decoding(matcher, Sampler(SamplerConfig(temperature=0)), [0], max_tokens, TABLE, EOG,
                    stops=stops)


def test_step_forced_tokens_then_grammar_completion():
    m = _Scripted(forced=[1, 2], n_stop=4)
    d = _dec(m)
    assert d.start() == []
    assert d.push(0) == [Piece([0], "a"), Piece([1, 2], "bc", forced=True)]
    assert d.push(3) == [Piece([3], "d"), Piece([], "", "stop")]
    assert d.finish == "stop" and d.n_gen == 4 and d.n_forced == 2
    assert d.history == [0, 0, 1, 2, 3] and m.consumed == [0, 1, 2, 3]


def test_step_budget_stop_strings_and_eos():
    d = _dec(_Scripted(forced=[1, 2, 3]), max_tokens=2)  # the forced tokens cut to the budget
    assert d.push(0) == [Piece([0], "a"), Piece([1], "b", forced=True), Piece([], "", "stop")]
    d = _dec(_Scripted(forced=[1, 2, 3], accepting=False), max_tokens=2)
    assert d.push(0)[-1] == Piece([], "", "length")  # not complete: "length"
    d = _dec(stops=["cd"])
    assert d.push(0) == [Piece([0], "a")]
    assert d.push(2) == [Piece([2], "")]  # "c" held back: it may start "cd"
    assert d.push(3) == [Piece([3], "", "stop")] and d.text.text == "a"
    d = _dec(stops=["cd"])
    assert d.push(2) == [Piece([2], "")] and d.push(8) == [Piece([], "c", "stop")]  # EOS flushes
    assert _dec(max_tokens=0).start() == [Piece([], "", "length")]


def test_step_errors_are_matcher_errors():
    with pytest.raises(MatcherError, match="rejected sampled token 4"):
        _dec(_Scripted(reject=4)).push(4)
    with pytest.raises(MatcherError, match="rejected its own forced token 2"):
        _dec(_Scripted(forced=[1, 2], reject=2)).push(0)
    with pytest.raises(MatcherError, match="dead end"):
        _dec(_Scripted(n_stop=1, accepting=False)).push(0)
    with pytest.raises(MatcherError, match="allows no token after 0 generated tokens"):
        _dec(_Scripted()).allowed(np.zeros(1, dtype=np.uint32), len(TABLE))
