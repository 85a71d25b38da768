#!/usr/bin/env python3
"""Time to first mask for new JSON Schemas, split into its phases, beside llguidance.

For each schema (a fixed sample of the JSONSchemaBench dev subsets), in one fresh process:

* **compile**: ``Grammar.from_json_schema(schema)`` (the Python front end: JSON Schema →
  grammar IR);
* **lower**: ``grammar.lexparser`` (the IR lowered into the core: regex export, rules, parser;
  since the bounded regex stores a grammar is lowered inside its compile, so this is ~0 and
  **compile** includes it);
* **first mask**: ``Matcher(grammar, info).compute_mask()`` on a vocabulary whose tokenizer
  preprocessing was done beforehand (cold walks: the first mask of each schema);
* **ttfm**: the sum of the three, against llguidance's ``grammar_from_json_schema`` +
  ``LLMatcher`` + first ``compute_logit_bias`` (its compile is lazy: part of it happens at the
  first mask, so only its total compares).

Full garbage collections during the loop are counted and timed (``gc.callbacks``); with
``--hold-corpus`` the process first parses every dev-subset schema (as ``bench/jsonschema.py``
does), so a collection has lots of Python data to traverse.

    python bench/compile.py --quick            # 30 schemas
    python bench/compile.py --limit 300        # the figure of docs/engine.md
    python bench/compile.py --limit 300 --profile /tmp/compile.prof   # cProfile of the loop

Prints a table (ms, p50/p90/p99/max per phase) with the load average, and writes
``bench/results/compile.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _corpora  # noqa: E402
import _results  # noqa: E402
from _stats import percentile  # noqa: E402
del sys.path[0]
# this folder holds ``jsonschema.py``: keep it off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CORPUS_REL = "jsonschemabench"  # in --corpora / LEXGUIDE_CORPORA (docs/bench.md)
OUT = Path(__file__).resolve().parent / "results" / "compile.json"
PHASES = ("compile", "lower", "first_mask", "ttfm")



def sample(limit: int, seed: int) -> list[tuple[str, dict]]:
    """``limit`` schemas drawn round-robin from the dev subsets (each subset shuffled by seed)."""
    pools = []
    for path in sorted(_corpora.require(CORPUS_REL).glob("*.jsonl")):
        lines = path.read_text().splitlines()
        random.Random(f"{seed}:{path.stem}").shuffle(lines)
        pools.append((path.stem, lines))
    out: list[tuple[str, dict]] = []
    i = 0
    while len(out) < limit and any(i < len(ls) for _, ls in pools):
        for sub, ls in pools:
            if i < len(ls) and len(out) < limit:
                rec = json.loads(ls[i])
                out.append((f"{sub}/{rec['id']}", rec["schema"]))
        i += 1
    return out


def hold_corpus() -> list:
    return [json.loads(line) for p in sorted(_corpora.require(CORPUS_REL).glob("*.jsonl"))
            for line in p.read_text().splitlines()]


class GcTimer:
    """Counts and times the collections of each generation while installed."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.ms = [0.0, 0.0, 0.0]
        self._t = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        else:
            g = info["generation"]
            self.count[g] += 1
            self.ms[g] += (time.perf_counter() - self._t) * 1e3


def run_lexguide(schemas, info, prof=None, clock=time.perf_counter) -> tuple[dict, list]:
    from lexguide import Grammar, Matcher
    from lexguide.errors import LexguideError

    times: dict[str, list[float]] = {p: [] for p in PHASES}
    rows = []
    if prof is not None:
        prof.enable()
    for name, schema in schemas:
        try:
            t0 = clock()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                g = Grammar.from_json_schema(schema)
            t1 = clock()
            g.lexparser  # noqa: B018  (lowering, on first use)
            t2 = clock()
            if info is not None:
                Matcher(g, info).compute_mask()
            t3 = clock()
        except LexguideError as e:
            rows.append({"schema": name, "error": type(e).__name__})
            continue
        row = {"schema": name, "compile": (t1 - t0) * 1e3, "lower": (t2 - t1) * 1e3,
               "first_mask": (t3 - t2) * 1e3, "ttfm": (t3 - t0) * 1e3}
        rows.append(row)
        for p in PHASES:
            times[p].append(row[p])
    if prof is not None:
        prof.disable()
    return times, rows


def run_llguidance(schemas, vocab, clock=time.perf_counter) -> dict[str, list[float]] | None:
    try:
        import llguidance
        import llguidance.numpy as llnp
    except ImportError:
        return None
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _vocab import peer_token_bytes

    tb, specials = peer_token_bytes(vocab)
    tok = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_LlgTok(tb, vocab.eos_id, specials)))
    mask = llnp.allocate_token_bitmask(1, tok.vocab_size)
    ttfm = []
    for _, schema in schemas:
        t0 = clock()
        g = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema))
        m = llguidance.LLMatcher(tok, g, log_level=0)
        if m.is_error():
            continue
        llnp.fill_next_token_bitmask(m, mask, 0)
        ttfm.append((clock() - t0) * 1e3)
    return {"ttfm": ttfm}


class _LlgTok:
    """The minimal tokenizer object ``llguidance.TokenizerWrapper`` reads."""

    def __init__(self, tb: list[bytes], eos: int, specials: list[int]) -> None:
        self.eos_token_id = eos
        self.bos_token_id = None
        self.tokens = tb
        self.special_token_ids = specials

    def __call__(self, s):
        return []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=300, help="schemas (default 300)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", default="smollm2", help="smollm2 | gemma3 | llama3 (default smollm2)")
    ap.add_argument("--quick", action="store_true", help="30 schemas")
    ap.add_argument("--hold-corpus", action="store_true",
                    help="parse every dev-subset schema first and keep them (GC pressure)")
    ap.add_argument("--no-peers", action="store_true", help="lexguide only")
    ap.add_argument("--no-mask", action="store_true",
                    help="compile and lower only: no vocabulary, no first mask, no peers (for "
                         "instruction counts: valgrind --tool=callgrind, minus a --limit 0 run)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="time phases by wall clock (default) or by this process' CPU time "
                         "(time.process_time: steadier when other processes share the cores)")
    ap.add_argument("--profile", metavar="FILE", help="cProfile the lexguide loop into FILE")
    ap.add_argument("--out", type=Path, default=OUT)
    _corpora.add_argument(ap)
    _results.add_argument(ap)
    args = ap.parse_args()
    if args.corpora:  # the environment carries it to spawned workers too
        os.environ[_corpora.ENV] = str(args.corpora)
    _corpora.require(CORPUS_REL)
    limit = 30 if args.quick else args.limit

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _vocab import load_vocab

    vocab = None if args.no_mask else load_vocab(args.vocab)
    info = None if vocab is None else vocab.tokenizer_info()
    schemas = sample(limit, args.seed)
    held = hold_corpus() if args.hold_corpus else None
    gct = GcTimer()
    gc.callbacks.append(gct)
    prof = None
    if args.profile:
        import cProfile

        prof = cProfile.Profile()
    from lexguide import Grammar, Matcher  # noqa: F401  (imported before the clock starts)

    load0 = os.getloadavg()
    t = time.perf_counter()
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    times, rows = run_lexguide(schemas, info, prof, clock)
    wall = time.perf_counter() - t
    gc.callbacks.remove(gct)
    load1 = os.getloadavg()
    peer = None if args.no_peers or vocab is None else run_llguidance(schemas, vocab, clock)
    if prof is not None:
        prof.dump_stats(args.profile)
    del held

    n_ok = len(times["compile"])
    rep = _results.Report()
    rep.print(f"{n_ok}/{len(schemas)} schemas compiled, "
              f"{'no vocabulary' if vocab is None else 'vocab ' + args.vocab}, {args.clock} clock, "
              f"loop {wall:.2f} s; "
              f"load average {load0[0]:.2f} before, {load1[0]:.2f} after; full GCs "
              f"{gct.count[2]} ({gct.ms[2]:.0f} ms), gen0/1 {gct.count[0]}/{gct.count[1]} "
              f"({gct.ms[0] + gct.ms[1]:.0f} ms)")
    rep.print("")
    rep.print("| engine | phase | p50 ms | p90 | p99 | max | mean |")
    rep.print("|---|---|---|---|---|---|---|")
    summary: dict = {}
    for eng, tt in (("lexguide", times), ("llguidance", peer or {})):
        for p, xs in tt.items():
            if not xs or (p == "first_mask" and info is None):
                continue
            st = {"p50": percentile(xs, 50), "p90": percentile(xs, 90), "p99": percentile(xs, 99),
                  "max": max(xs), "mean": sum(xs) / len(xs), "n": len(xs)}
            summary.setdefault(eng, {})[p] = st
            rep.print(f"| {eng} | {p} | {st['p50']:.2f} | {st['p90']:.2f} | {st['p99']:.2f} | "
                      f"{st['max']:.1f} | {st['mean']:.2f} |")
    if peer and peer["ttfm"] and times["ttfm"]:
        r = percentile(times["ttfm"], 50) / percentile(peer["ttfm"], 50)
        rep.print("")
        rep.print(f"ttfm p50 lexguide / llguidance: {r:.2f} (llguidance: {len(peer['ttfm'])} "
                  "schemas; lexguide's include lowering and Matcher creation)")
    slow = sorted((r for r in rows if "ttfm" in r), key=lambda r: -r["ttfm"])[:5]
    rep.print("")
    rep.print("slowest:", ", ".join(f"{r['schema']} {r['ttfm']:.0f} ms" for r in slow))
    _results.write(__file__, rep.text(), quick=args.quick, results=args.results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "vocab": args.vocab, "clock": args.clock, "limit": limit, "seed": args.seed, "hold_corpus": args.hold_corpus,
        "loadavg_before": load0, "loadavg_after": load1, "loop_s": wall,
        "gc": {"count": gct.count, "ms": gct.ms}, "summary": summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
