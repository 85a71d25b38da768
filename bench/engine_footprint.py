#!/usr/bin/env python3
"""Engine footprint: tokenizer preprocessing time and memory per compiled grammar and matcher.

For each vocabulary (SmolLM2 49k, Llama-3 128k, Gemma 3 262k; those installed), in a fresh
process of its own:

* tokenizer preprocessing: ``TokenizerInfo.from_token_bytes`` (token trie, JSON-string slices),
  median of 3, cold (``cache=False``: built from the bytes) and from a warm on-disk cache (the
  vocabulary cache in a temporary folder, written once before; the key's SHA-256 over the token
  bytes included), beside llguidance's ``LLTokenizer`` and xgrammar's ``TokenizerInfo`` built
  from the same bytes in the same process;
* memory (resident set, ``/proc/self/status``): after compiling N JSONSchemaBench schemas (each
  lowered into the core), after one matcher per grammar forced along a valid instance (its masks
  fill the per-grammar and per-tokenizer caches), and after N more matchers of the same
  grammars forced the same way (warm caches: what one more request costs).

    python bench/engine_footprint.py [--schemas 50] [--vocabs smollm2,llama3,gemma3] [--quick]

Prints one table; writes bench/results/engine_footprint.json.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import multiprocessing as mp
import random
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _corpora  # noqa: E402
import _results  # noqa: E402
from _vocab import VocabError, load_vocab, peer_token_bytes  # noqa: E402

CORPUS_REL = "jsonschemabench"  # in --corpora / LEXGUIDE_CORPORA (docs/bench.md)


def _rss_mb() -> float:
    """Resident set after handing free heap pages back (so it counts memory in use)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    for line in Path("/proc/self/status").read_text().split("\n"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def _cases(n: int, seed: int, corpora: Path | None = None) -> list[tuple[dict, str]]:
    corpus = _corpora.require(CORPUS_REL, corpora)
    out = []
    for path in sorted((corpus / "maskbench").glob("*.jsonl")):
        plain_path = corpus / path.name
        if not plain_path.exists():
            continue
        plain = {}
        for line in plain_path.read_text().split("\n"):
            if line.strip():
                rec = json.loads(line)
                plain[rec["id"]] = rec["schema"]
        for line in path.read_text().split("\n"):
            if not line.strip():
                continue
            rec = json.loads(line)
            valid = [t["data"] for t in rec.get("tests", []) if t.get("valid")]
            if valid and rec["id"] in plain:
                out.append((plain[rec["id"]], json.dumps(valid[0])))
    random.Random(seed).shuffle(out)
    return out[: 4 * n]


def _median_ms(fn, repeats: int = 3, cpu: list | None = None) -> float:
    """Median wall time of fn in ms; with ``cpu``, the median process CPU time is appended to
    it (a single-threaded step's CPU time is what it would take on an idle machine, nearly)."""
    times, cpus = [], []
    for _ in range(repeats):
        gc.collect()
        c0 = time.process_time()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
        cpus.append((time.process_time() - c0) * 1e3)
    if cpu is not None:
        cpu.append(statistics.median(cpus))
    return statistics.median(times)


def _select(name: str, n_schemas: int, seed: int, corpora: Path | None) -> list[tuple[dict, list[int]]]:
    """Schemas that compile, with a valid instance's tokens (run in a process of its own, so the
    measuring process has compiled nothing before it measures)."""
    import lexguide as lg

    vocab = load_vocab(name)
    jobs = []
    for schema, text in _cases(n_schemas, seed, corpora):
        try:
            g = lg.Grammar.from_json_schema(schema, whitespace="flexible")
        except lg.LexguideError:
            continue
        if g.validate(text):
            jobs.append((schema, vocab.encode(text)))
        if len(jobs) == n_schemas:
            break
    return jobs


def _measure(name: str, jobs: list[tuple[dict, list[int]]]) -> dict:
    import lexguide as lg

    vocab = load_vocab(name)
    out: dict = {"vocab": name, "n_vocab": vocab.n_vocab}
    def build(cache=False):
        return lg.TokenizerInfo.from_token_bytes(
            vocab.token_bytes, vocab.eos_ids, vocab.special_ids, special_names=vocab.special_names,
            cache=cache)

    cpu_cold: list[float] = []
    out["prep_ms"] = _median_ms(build, cpu=cpu_cold)
    out["prep_cpu_ms"] = cpu_cold[0]
    folder = tempfile.mkdtemp(prefix="lexguide-bench-vocab-")
    try:
        written = build(folder)
        assert written.cache_status == "written", written.cache_status
        out["cache_file_mb"] = written.cache_file.stat().st_size / 2**20
        del written
        cpu: list[float] = []
        out["cached_ms"] = _median_ms(lambda: build(folder), repeats=5, cpu=cpu)
        out["cached_cpu_ms"] = cpu[0]
        assert build(folder).cache_status == "loaded"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    info = build()
    base = _rss_mb()
    grammars = []
    for schema, _ in jobs:
        g = lg.Grammar.from_json_schema(schema, whitespace="flexible")
        _ = g.lexparser  # lowered into the core
        grammars.append(g)
    after_compile = _rss_mb()

    def force(matchers):
        for m, (_, ids) in zip(matchers, jobs):
            for t in ids:
                m.compute_mask()
                m.consume(t)

    first = [lg.Matcher(g, info) for g in grammars]
    force(first)
    after_first = _rss_mb()
    second = [lg.Matcher(g, info) for g in grammars]
    force(second)
    after_second = _rss_mb()
    n = max(1, len(jobs))
    out.update(
        n_grammars=len(jobs),
        tokens=sum(len(ids) for _, ids in jobs),
        rss_base_mb=base,
        grammar_kb=(after_compile - base) * 1024 / n,
        first_matcher_kb=(after_first - after_compile) * 1024 / n,
        more_matcher_kb=(after_second - after_first) * 1024 / n,
        rss_end_mb=after_second,
    )
    del first, second, grammars
    peer_bytes, peer_special = peer_token_bytes(vocab)
    try:
        import llguidance as llg

        class _Wrapped:
            eos_token_id = vocab.eos_id
            bos_token_id = None
            tokens = peer_bytes
            special_token_ids = peer_special

            def __call__(self, s):
                raise RuntimeError("not used")

        out["llguidance_prep_ms"] = _median_ms(
            lambda: llg.LLTokenizer(llg.TokenizerWrapper(_Wrapped()), n_vocab=vocab.n_vocab,
                                    eos_token=vocab.eos_id))
    except ImportError:
        out["llguidance_prep_ms"] = None
    try:
        import xgrammar as xgr

        enc = [b"" if i in set(peer_special) else b for i, b in enumerate(peer_bytes)]
        out["xgrammar_prep_ms"] = _median_ms(
            lambda: xgr.GrammarCompiler(xgr.TokenizerInfo(enc, xgr.VocabType.RAW,
                                                          vocab_size=vocab.n_vocab,
                                                          stop_token_ids=[vocab.eos_id]),
                                        max_threads=1, cache_enabled=False))
    except ImportError:
        out["xgrammar_prep_ms"] = None

    return out


def _worker(args) -> dict:
    name, n, seed, corpora = args
    ctx = mp.get_context("spawn")
    try:
        with ctx.Pool(1) as pool:
            jobs = pool.apply(_select, (name, n, seed, corpora))
        with ctx.Pool(1) as pool:  # a fresh process: its RSS growth is what it compiled
            return pool.apply(_measure, (name, jobs))
    except VocabError as e:
        return {"vocab": name, "error": str(e)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--schemas", type=int, default=50)
    ap.add_argument("--vocabs", default="smollm2,llama3,gemma3")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="SmolLM2 only, 8 schemas")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "engine_footprint.json"))
    _corpora.add_argument(ap)
    _results.add_argument(ap)
    args = ap.parse_args()
    _corpora.require(CORPUS_REL + "/maskbench", args.corpora)
    vocabs = ["smollm2"] if args.quick else args.vocabs.split(",")
    n = 8 if args.quick else args.schemas
    load_before = "/".join(f"{x:.2f}" for x in os.getloadavg())
    rows = [_worker((name, n, args.seed, args.corpora)) for name in vocabs]

    def fmt(x, spec=".0f"):
        return "—" if x is None else format(x, spec)

    rep = _results.Report()
    rep.print("| vocab | tokens | prep ms (cold) | prep ms (disk cache) | cold / cached | CPU ms cold / cached | "
              "cache file MB | "
              "llguidance prep ms | xgrammar prep ms | grammars | "
              "KB per grammar | KB per first matcher (cold caches) | KB per more matcher | RSS end MB |")
    rep.print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            rep.print(f"| {r['vocab']} | not available: {r['error']} |")
            continue
        rep.print(f"| {r['vocab']} | {r['n_vocab']:,} | {fmt(r['prep_ms'])} | {fmt(r['cached_ms'], '.1f')} | "
                  f"{fmt(r['prep_ms'] / r['cached_ms'], '.1f')}x | "
                  f"{fmt(r['prep_cpu_ms'])} / {fmt(r['cached_cpu_ms'], '.1f')} | {fmt(r['cache_file_mb'], '.1f')} | "
                  f"{fmt(r['llguidance_prep_ms'])} | "
                  f"{fmt(r['xgrammar_prep_ms'])} | {r['n_grammars']} | {fmt(r['grammar_kb'])} | "
                  f"{fmt(r['first_matcher_kb'])} | {fmt(r['more_matcher_kb'])} | {fmt(r['rss_end_mb'])} |")
    load = "/".join(f"{x:.2f}" for x in os.getloadavg())
    rep.print("")
    rep.print(f"load average before / after: {load_before} / {load}. Goals (issue 12, 262k): cold <= 300 ms, "
              "disk cache <= 50 ms.")
    rep.print("prep: median of 3 in-process builds from raw token bytes (cold: cache=False; xgrammar: "
              "TokenizerInfo + GrammarCompiler); disk cache: median of 5 from_token_bytes calls that "
              "load the vocabulary cache file written before (SHA-256 key, checks and load included); "
              "CPU ms: median process CPU time of the same calls (single-threaded: near the idle-machine time). "
              "KB per grammar: RSS growth / grammars after compiling and lowering; "
              "first matcher: growth after forcing one matcher per grammar along a valid instance "
              "(walk and mask caches filled); more matcher: the same again on warm caches.")
    _results.write(__file__, rep.text(), quick=args.quick, results=args.results)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
