"""Bounded regex stores: the Python store is cut back and the core starts a new generation, and
nothing a grammar computes changes (lexguide.regex.nodes.building, csrc/engine/lexer.h).

A process that compiles ever new grammars (a server, the fuzzer) would otherwise keep every
regex node, derivative and lexer state it ever made.

Each scenario runs in a fresh interpreter (``python tests/test_engine_generations.py NAME``):
a cut invalidates regex nodes made outside a compile after the store's base, such as other
test modules' module-level constants, so it must not happen inside the suite's own process.
"""

from __future__ import annotations

import gc
import json
import os
import random
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

from lexguide import Grammar, LexguideError, Matcher, Tokenizer, TokenizerInfo, _core
from lexguide.engine import grammar as grammar_module
from lexguide.grammar.lark import compile_lark
from lexguide.model_files import ModelNotInstalled, smollm2_path
from lexguide.regex import nodes as rx

RECORDED = Path(__file__).parent / "data" / "engine" / "mask_hashes.json"
VOCAB = [b"<eos>"] + [bytes([c]) for c in b'{}[]":,ab01 -.\\ue\nxyz'] + [
    b'{"', b'":', b'"a', b"ab", b"01", b'", "', b"true", b"null", b"10", b"\xc3\xa9", b"xyz"]


def _cut_before_every_compile() -> None:
    """Every top-level compile first cuts the store back; no grammar comes from the cache."""
    rx.LIMITS["rotate_rx_nodes"] = 0
    grammar_module._compiled = OrderedDict()


def _small_info() -> TokenizerInfo:
    return TokenizerInfo.from_token_bytes(VOCAB, eos_ids=[0])


def _allowed(m: Matcher) -> list[int]:
    mask = m.compute_mask()
    return [int(t) for t in np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little")[: len(VOCAB)])]


def _brute_force(m: Matcher) -> list[int]:
    """Tokens whose bytes the grammar accepts from the matcher's state (EOS: when complete)."""
    out = []
    for t, data in enumerate(VOCAB):
        if t == 0:
            if m.is_accepting():
                out.append(0)
            continue
        c = m.clone()
        try:
            c.consume(t)
            out.append(t)
        except LexguideError:
            pass
    return out


def recorded_masks_hold_when_the_store_is_cut_before_every_compile() -> None:
    """Masks of recorded cases (digests written before the core existed) are reproduced with a
    new Python store and a new core generation for every grammar: no cache kept a stale node."""
    from tools.record_mask_hashes import compile_case, digest

    _cut_before_every_compile()
    data = json.loads(RECORDED.read_text())
    info = TokenizerInfo.from_tokenizer(Tokenizer.from_gguf(smollm2_path()))
    digests = data["digests"]["smollm2"]
    cases = sorted(digests)[::6]
    assert len(cases) > 80
    start_generation = rx.generation()
    mismatched = []
    for cid in cases:
        got = digest(compile_case(data["cases"][cid]), info, digests[cid]["tokens"])
        if got is None or got[0] != digests[cid]["sha1"]:
            mismatched.append(cid)
    assert rx.generation() - start_generation >= len(cases)
    assert not mismatched, f"{len(mismatched)} cases differ, e.g. {mismatched[:5]}"


def grammars_compiled_before_a_cut_keep_working() -> None:
    _cut_before_every_compile()
    info = _small_info()
    old = Grammar.from_json_schema({"type": "object", "properties": {"a": {"type": "integer"}}})
    m = Matcher(old, info)
    m.consume_tokens([VOCAB.index(b'{"'), VOCAB.index(b"a"), VOCAB.index(b'":')])
    before = _allowed(m)
    serial = _core.generation().serial
    for i in range(20):  # each one cuts the store back and starts a new core generation
        Grammar.from_regex(f"x{i}[0-9]+y")
    assert _core.generation().serial > serial
    assert _allowed(m) == before == _brute_force(m)
    m.consume_tokens([VOCAB.index(b"10"), VOCAB.index(b"}")])
    assert m.is_accepting()
    assert old.validate('{"a": 12}') and not old.validate('{"a": "x"}')
    fresh = Matcher(old, info)  # a new matcher of the old grammar: its generation is still alive
    assert _allowed(fresh) == _brute_force(fresh)


def masks_after_cuts_equal_brute_force_on_random_grammars() -> None:
    _cut_before_every_compile()
    rng = random.Random(5)
    info = _small_info()
    for _ in range(25):
        word = "".join(rng.choice("abxyz") for _ in range(rng.randint(1, 4)))
        g = Grammar.from_lark(f'start: "{word}" ITEM* ("," ITEM)?\nITEM: /[ab0-1]{{1,{rng.randint(1, 3)}}}/')
        m = Matcher(g, info)
        for _ in range(6):
            allowed = _allowed(m)
            assert allowed == _brute_force(m)
            if not allowed or allowed == [0]:
                break
            m.consume(rng.choice([t for t in allowed if t != 0] or allowed))


def the_stores_stay_bounded_and_old_generations_are_freed() -> None:
    rx.LIMITS["rotate_rx_nodes"] = 1_500
    info = _small_info()
    rng = random.Random(9)
    peak = 0
    first = rx.generation()
    for i in range(400):
        word = "".join(rng.choice("abcdefgh") for _ in range(6))
        g = Grammar.from_json_schema({"type": "object", "properties": {
            word: {"type": "string", "pattern": f"^{word}[a-z]*$"}, "n": {"minimum": i}}})
        m = Matcher(g, info)
        m.compute_mask()
        peak = max(peak, rx.n_nodes())
    assert rx.generation() - first >= 5
    assert peak < 1_500 + 500  # the mark plus what one grammar adds
    # drop every grammar of the loop: of its generations only the current one is left alive
    grammar_module._compiled.clear()
    info._compiled.clear()
    del g, m
    gc.collect()
    assert _core.n_generations() == 1


def a_grammar_not_lowered_before_a_cut_says_so() -> None:
    stale = Grammar(compile_lark('start: "abc"'))  # internal: never lowered
    rx.LIMITS["rotate_rx_nodes"] = 0
    Grammar.from_regex("cut[0-9]now")
    with pytest.raises(LexguideError, match="compile it again"):
        stale.validate("abc")


def lazy_partitions_of_base_nodes_survive_a_cut() -> None:
    """A base node's byte partition, computed on first use after the base was set, is cut
    with the partitions made after the base and computed again afterwards."""
    from lexguide.jsonschema.compiler import WHITESPACE_RX

    Grammar.from_regex("base[0-9]")  # sets the base (every front-end module imported)
    x = rx.concat(WHITESPACE_RX, rx.literal(b"q"))  # made after the base: cut
    assert WHITESPACE_RX < rx._base[0] and rx._part[WHITESPACE_RX] == rx._UNSET
    labels_before, _ = rx.byte_partition(WHITESPACE_RX)
    assert rx.matches(x, b" \tq")
    rx.LIMITS["rotate_rx_nodes"] = 0
    Grammar.from_regex("cut[0-9]again")
    labels_after, reps = rx.byte_partition(WHITESPACE_RX)
    assert labels_after == labels_before and len(reps) == 256
    for b in range(256):
        assert rx.derivative(WHITESPACE_RX, b) == rx._derive(WHITESPACE_RX, b)
    assert rx.matches(WHITESPACE_RX, b" \n") and not rx.matches(WHITESPACE_RX, b"x")


SCENARIOS = [
    lazy_partitions_of_base_nodes_survive_a_cut,
    recorded_masks_hold_when_the_store_is_cut_before_every_compile,
    grammars_compiled_before_a_cut_keep_working,
    masks_after_cuts_equal_brute_force_on_random_grammars,
    the_stores_stay_bounded_and_old_generations_are_freed,
    a_grammar_not_lowered_before_a_cut_says_so,
]


@pytest.mark.parametrize("scenario", [f.__name__ for f in SCENARIOS])
def test_scenario_in_a_fresh_process(scenario):
    if scenario.startswith("recorded"):
        try:
            smollm2_path()
        except ModelNotInstalled as e:
            pytest.skip(str(e))
    here = Path(__file__).parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, __file__, scenario], capture_output=True, text=True, env=env, check=False,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == f"ok {scenario}"


if __name__ == "__main__":
    name = sys.argv[1]
    next(f for f in SCENARIOS if f.__name__ == name)()
    print(f"ok {name}")
