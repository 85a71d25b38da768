"""Bounded regex stores: the core starts a new generation (a lexer DFA and a store keeping the
front ends' base nodes), and nothing a grammar computes changes (lexguide.regex.nodes.building,
csrc/engine/lexer.h).

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
from lexguide.errors import CoreRegexError
from lexguide.grammar.ir import GrammarBuilder
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
    new generation for every grammar: no cache kept a stale node."""
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
    # captures split a suffix off with the lexeme's regexes, after the compile
    cap = Grammar.from_lark('start: a\na[capture="X", stop_capture="S", suffix=/[.!]/]: /[a-z]+/')
    serial = _core.generation().serial
    for i in range(20):  # each one starts a new generation
        Grammar.from_regex(f"x{i}[0-9]+y")
        Grammar.from_lark(f'start: b{i}\nb{i}[capture, suffix=/[?]+/]: /[0-9]{{{i + 1}}}/')
    assert _core.generation().serial > serial
    assert cap.captures("abc!") == [("X", b"abc"), ("S", b"!")]
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


def grammars_of_an_old_generation_lower_and_build_on_later() -> None:
    """A grammar keeps the generation its regexes were built in: one never lowered (built by
    hand from an IR) lowers into it after any number of new generations, and a lazy grammar
    built on an old grammar gets that grammar's regexes rebuilt in the current generation."""
    stale = Grammar(compile_lark('start: "abc" /[0-9]+/'))  # internal: never lowered
    old = Grammar.from_lark('start: "call(" /[a-z]+/ ")"')
    rx.LIMITS["rotate_rx_nodes"] = 0
    serial = _core.generation().serial
    for i in range(5):
        Grammar.from_regex(f"cut{i}[0-9]now")
    assert _core.generation().serial >= serial + 5
    assert stale.validate("abc12") and not stale.validate("abc") and not stale.validate("abcx")
    lazy = Grammar.from_lazy(old, ["call("])
    assert lazy.validate("say call(xyz)") and not lazy.validate("say call(XYZ)")
    assert not lazy.validate("say call(xyz")


def base_nodes_survive_a_new_generation() -> None:
    """A node of the base (a front-end module's constant) keeps its id, partition and
    derivatives in every new generation; a node made after the base is cut."""
    from lexguide.jsonschema.compiler import WHITESPACE_RX
    from reference.derivative import derive

    Grammar.from_regex("base[0-9]")  # sets the base (every front-end module imported)
    x = rx.concat(WHITESPACE_RX, rx.literal(b"q"))  # made after the base: cut
    labels_before, _ = rx.byte_partition(WHITESPACE_RX)
    assert rx.matches(x, b" \tq") and _index(x) >= rx._base and WHITESPACE_RX < rx._base
    rx.LIMITS["rotate_rx_nodes"] = 0
    serial = _core.generation().serial
    Grammar.from_regex("cut[0-9]again")
    assert _core.generation().serial > serial and rx.n_nodes() < _index(x) + 100
    labels_after, reps = rx.byte_partition(WHITESPACE_RX)
    assert labels_after == labels_before and len(reps) == 256
    for b in range(256):
        assert rx.derivative(WHITESPACE_RX, b) == derive(WHITESPACE_RX, b)
    assert rx.matches(WHITESPACE_RX, b" \n") and not rx.matches(WHITESPACE_RX, b"x")


def _index(x: int) -> int:
    """The node index of regex id ``x`` (an id past the base carries its generation's tag in
    the high 32 bits, csrc/engine/regex.h)."""
    return x & 0xFFFF_FFFF


def ids_of_a_replaced_generation_are_refused() -> None:
    """An id made outside a compile after the base (so not kept) names a node whose index a new
    generation hands out again: every use of it raises CoreRegexError naming the node and the
    id's generation, instead of meaning another regex. Base ids and a grammar compiled before
    keep working, and an id of the new generation is refused by the old one."""
    from lexguide.jsonschema.compiler import WHITESPACE_RX

    info = _small_info()
    old = Grammar.from_json_schema({"type": "object", "properties": {"a": {"type": "integer"}}})
    m = Matcher(old, info)
    m.consume_tokens([VOCAB.index(b'{"'), VOCAB.index(b"a"), VOCAB.index(b'":')])
    before = _allowed(m)
    x = rx.concat(WHITESPACE_RX, rx.literal(b"stale"))  # outside a compile, past the base
    assert rx.matches(x, b" stale") and _index(x) >= rx._base
    index, tag = _index(x), rx.store().tag
    rx.LIMITS["rotate_rx_nodes"] = rx.n_nodes() + 200  # a low mark: a few compiles pass it
    start = rx.generation()
    for i in range(100):
        Grammar.from_regex(f"rot{i}[a-z]{{{i % 7 + 1}}}[0-9]+")
        if rx.generation() > start:
            break
    assert rx.generation() == start + 1 and rx.store().tag != tag
    k = 0
    while rx.n_nodes() <= index:  # the new store hands the index out again
        rx.literal(b"fill%d" % k)
        k += 1
    for call, args in [(rx.matches, (x, b" stale")), (rx.nullable, (x,)), (rx.kind, (x,)),
                       (rx.args, (x,)), (rx.derivative, (x, 32)), (rx.byte_partition, (x,)),
                       (rx.concat, (x, rx.EPSILON)), (rx.concat, (rx.literal(b"a"), x, x)),
                       (rx.alt, (WHITESPACE_RX, x)), (rx.intersect, (x, rx.ANY_BYTES)),
                       (rx.complement, (x,)), (rx.star, (x,)), (rx.repeat, (x, 2, 3)),
                       (rx.empty_among, ([rx.complement(WHITESPACE_RX), x],)),
                       (rx.store().copy_nodes, (rx.store(), [x]))]:
        try:
            call(*args)
        except CoreRegexError as e:
            assert e.where == {"node": index, "generation": tag}, (call, e.where)
            assert "another generation" in str(e)
        else:
            raise AssertionError(f"{call.__name__} took a stale regex id")
    b = GrammarBuilder()  # lowering a grammar built by hand on the stale id
    try:
        Grammar(b.build(b.lexeme(x, "stale"))).lexparser  # noqa: B018
    except CoreRegexError as e:
        assert e.where == {"node": index, "generation": tag}
    else:
        raise AssertionError("a grammar lowered a stale regex id")
    # the base: the same ids in every generation
    assert rx.matches(WHITESPACE_RX, b" \n") and not rx.matches(WHITESPACE_RX, b"q")
    y = rx.concat(WHITESPACE_RX, rx.literal(b"stale"))  # the same regex, built again
    assert rx.matches(y, b" stale") and y != x
    # an id of the new generation in the old grammar's
    try:
        old.lexparser.store.matches(y, b" stale")
    except CoreRegexError as e:
        assert e.where == {"node": _index(y), "generation": rx.store().tag}
    else:
        raise AssertionError("the old generation took an id of the new one")
    # the grammar compiled before the new generations
    assert _allowed(m) == before == _brute_force(m)
    m.consume_tokens([VOCAB.index(b"10"), VOCAB.index(b"}")])
    assert m.is_accepting()
    assert old.validate('{"a": 12}') and not old.validate('{"a": "x"}')
    assert Grammar.from_regex("new[0-9]+").validate("new12")


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def thousands_of_schemas_in_one_process_stay_bounded() -> None:
    """A server's life: 2,500 distinct schemas compiled and masked in one process (a low
    rotation mark, so it sees many generations). Resident memory stops growing, and a grammar
    compiled first, with a matcher part way through it, still works at the end."""
    rx.LIMITS["rotate_rx_nodes"] = 2_000
    info = _small_info()
    first = Grammar.from_json_schema({"type": "object", "properties": {"a": {"type": "integer"}}})
    m = Matcher(first, info)
    m.consume_tokens([VOCAB.index(b'{"'), VOCAB.index(b"a"), VOCAB.index(b'":')])
    before = _allowed(m)
    start = rx.generation()
    rss = []
    for i in range(2500):
        word = f"k{i}x"
        g = Grammar.from_json_schema({
            "type": "object", "required": [word],
            "properties": {word: {"type": "string", "pattern": f"^{word}[a-z]{{0,{i % 7 + 1}}}$"},
                           "n": {"type": "integer", "maximum": i}}})
        Matcher(g, info).compute_mask()
        if i % 250 == 249:
            gc.collect()
            rss.append(_rss_mb())
    assert rx.generation() - start >= 10
    # after the grammar cache has filled (MAX_CACHED_GRAMMARS), memory is flat (not under
    # AddressSanitizer, whose quarantine keeps freed blocks resident up to its size)
    if "libasan" not in os.environ.get("LD_PRELOAD", ""):
        assert max(rss[4:]) - rss[3] < 16, rss
    assert _allowed(m) == before == _brute_force(m)
    m.consume_tokens([VOCAB.index(b"10"), VOCAB.index(b"}")])
    assert m.is_accepting()
    assert first.validate('{"a": 12}') and not first.validate('{"a": "x"}')


SCENARIOS = [
    base_nodes_survive_a_new_generation,
    ids_of_a_replaced_generation_are_refused,
    thousands_of_schemas_in_one_process_stay_bounded,
    recorded_masks_hold_when_the_store_is_cut_before_every_compile,
    grammars_compiled_before_a_cut_keep_working,
    masks_after_cuts_equal_brute_force_on_random_grammars,
    the_stores_stay_bounded_and_old_generations_are_freed,
    grammars_of_an_old_generation_lower_and_build_on_later,
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
