#!/usr/bin/env python3
"""JSON Schema compiler benchmark: coverage, compile time and per-token mask time vs peers.

Part 1 (in process): for every JSONSchemaBench subset, compile each schema with lexguide and
with llguidance (``LLMatcher.validate_grammar``, no tokenizer) and report compiled/total and
compile time p50/p99, next to llguidance's recorded expectations
(``llguidance-data/json_stats/expected_maskbench.json``).

Part 1b (in process): the JSON-Schema-Test-Suite (drafts 2020-12 and 7, required and
optional tests, ``tests/suite_runner.py``): per engine, cases compiled and instances that agree
with the suite, accept an invalid instance (unsound) or reject a valid one, on the same cases;
llguidance is driven with its byte tokenizer (it gets no ``refs`` and no draft option).

Part 2 (spawned workers): one valid instance per schema (bench/_instances.py: a seeded walk of
the schema, checked with ``jsonschema``), compact JSON in the vocabulary's own encoding, forced
token by token through every available engine (lexguide, llguidance, xgrammar; the adapters and
workers of bench/mask.py: one spawned process per engine, engines in a rotating order per
schema), per vocabulary (SmolLM2 49k, Llama-3 128k, Gemma-3 262k). Timing figures are pooled over
the schemas every engine forced to the end; 'first pass' is the first compile of a schema (for
lexguide, its vocabulary walks are cold), 'fresh matcher' a second matcher on the last compiled
grammar.

Part 2 with ``--own-schemas``: each vocabulary gets schemas of its own (the next ``--limit``
of the seeded order that no earlier vocabulary took): each vocabulary is measured on a sample
of its own, and no schema's figures stand for two vocabularies. Per engine and vocabulary the "first use"
table gives time to first mask (compile + matcher + first mask) p50/p99 and compile p50/p99 of
the first compile of each schema, first-use masks (every mask of the first forcing, mean/p99)
and repeated masks (the later repeats, each a fresh compile, mean/p99), with ratios to
llguidance from the same run. That run writes ``bench/results/jsonschema_first_use.md``.

Corpora: ``--corpora`` or ``LEXGUIDE_CORPORA`` (``jsonschemabench/`` and, optional,
``llguidance-data/json_stats/expected_maskbench.json``; docs/bench.md).

    python bench/jsonschema.py --quick        # ~minutes: samples, SmolLM2 only
    python bench/jsonschema.py                # full coverage, all three vocabularies
    python bench/jsonschema.py --no-coverage --own-schemas --vocabs smollm2,gemma3 --clock cpu

Writes ``bench/results/jsonschema.json``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import pickle
import random
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _bench_last() -> None:
    """This file is named like the ``jsonschema`` package: its folder goes to the end of the
    import path, after the installed packages (spawned workers still find bench/mask.py)."""
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE] + [str(HERE)]


_bench_last()
import _corpora  # noqa: E402
import _results  # noqa: E402
from _stats import percentile  # noqa: E402

BENCH_REL = "jsonschemabench"
EXPECTED_REL = "llguidance-data/json_stats/expected_maskbench.json"
OUT = HERE / "results" / "jsonschema.json"
# engines with an adapter in bench/mask.py, and the peers measured before that have none there
PEERS = {"llguidance": "llguidance", "xgrammar": "xgrammar"}
NO_ADAPTER = {"outlines_core": "outlines_core", "lmfe": "lmformatenforcer"}



def coverage(per_subset: int | None, seed: int, corpora: Path | None,
             clock=time.perf_counter) -> dict:
    """Compile every (or a sample of) schema with lexguide and llguidance; times in ms by
    ``clock`` (seconds)."""
    from lexguide.engine.grammar import Grammar
    from lexguide.errors import LexguideError

    try:
        import llguidance
    except ImportError:
        llguidance = None
    bench_dir = _corpora.require(BENCH_REL, corpora)
    expected_path = _corpora.optional(EXPECTED_REL, corpora)
    expected = json.loads(expected_path.read_text()) if expected_path else {}
    out = {}
    for path in sorted(bench_dir.glob("*.jsonl")):
        sub = path.stem
        lines = path.read_text().splitlines()
        if per_subset is not None and per_subset < len(lines):
            lines = random.Random(f"{seed}:{sub}").sample(lines, per_subset)
        ours, theirs, recorded = [], [], 0
        ok_ours = ok_theirs = 0
        for line in lines:
            rec = json.loads(line)
            exp = expected.get(f"{sub}---{rec['id']}.json")
            recorded += exp is not None and "json_error" not in exp
            t = clock()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    Grammar.from_json_schema(rec["schema"])
                ok_ours += 1
            except LexguideError:
                pass
            ours.append((clock() - t) * 1e3)
            if llguidance is not None:
                t = clock()
                g = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(rec["schema"]))
                ok_theirs += llguidance.LLMatcher.validate_grammar(g) == ""
                theirs.append((clock() - t) * 1e3)
        out[sub] = {
            "n": len(lines), "lexguide": ok_ours, "llguidance": ok_theirs if llguidance else None,
            "llguidance_recorded": recorded,
            "lexguide_ms_p50": percentile(ours, 50), "lexguide_ms_p99": percentile(ours, 99),
            "llguidance_ms_p50": percentile(theirs, 50), "llguidance_ms_p99": percentile(theirs, 99),
        }
        print(f"  {sub}: {ok_ours}/{len(lines)}", flush=True)
    return out


def suite(seed: int) -> dict:
    """JSON-Schema-Test-Suite agreement per draft for lexguide and llguidance."""
    del seed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import suite_runner as sr

    engines = {"lexguide": sr.lexguide_compile}
    try:
        import llguidance

        tok = llguidance.LLTokenizer("byte")

        def llg_compile(schema: dict, opts: dict):
            del opts
            try:
                g = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema))
            except Exception:  # noqa: BLE001  (a peer's refusal, whatever its type)
                return None
            if llguidance.LLMatcher.validate_grammar(g):
                return None

            def accepts(text: str) -> bool:
                m = llguidance.LLMatcher(tok, g, log_level=0)
                return all(m.consume_token(t) for t in tok.tokenize_bytes(text.encode())) \
                    and m.is_accepting()
            return accepts

        engines["llguidance"] = llg_compile
    except ImportError:
        pass
    out: dict = {}
    for draft in sr.DRAFTS:
        if not sr.available(draft):
            continue
        for name, fn in engines.items():
            n_cases, n_compiled, res = sr.run(draft, fn)
            out.setdefault(draft, {})[name] = {
                "cases": n_cases, "compiled": n_compiled, "tests": len(res),
                "agree": sum(v == g for _, _, v, g in res),
                "unsound": sum(g and not v for _, _, v, g in res),
                "incomplete": sum(v and not g for _, _, v, g in res)}
        print(f"  {draft}: done", flush=True)
    return out


def print_suite(res: dict, out=print) -> None:
    out("\n| draft | engine | cases compiled | tests run | agree | unsound (accepts invalid) "
        "| incomplete (rejects valid) | agree ratio vs lexguide |")
    out("|---|---|---|---|---|---|---|---|")
    for draft, by in res.items():
        base = by["lexguide"]["agree"]
        for name, r in by.items():
            out(f"| {draft} | {name} | {r['compiled']}/{r['cases']} | {r['tests']} | "
                f"{r['agree']} | {r['unsound']} | {r['incomplete']} | "
                f"{r['agree'] / base:.3f} |")


def print_coverage(cov: dict, out=print) -> None:
    out("\n| subset | n | lexguide | llguidance (live) | llguidance (recorded) | ratio | "
        "compile ms p50 lexguide / llg | p99 lexguide / llg |")
    out("|---|---|---|---|---|---|---|---|")
    for sub, r in cov.items():
        llg = r["llguidance"]
        ratio = f"{r['lexguide'] / llg:.3f}" if llg else "-"
        out(f"| {sub} | {r['n']} | {r['lexguide']} ({r['lexguide'] / r['n']:.1%}) | "
            f"{llg if llg is not None else '-'} | {r['llguidance_recorded']} | {ratio} | "
            f"{_f(r['lexguide_ms_p50'])} / {_f(r['llguidance_ms_p50'])} | "
            f"{_f(r['lexguide_ms_p99'])} / {_f(r['llguidance_ms_p99'])} |")


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _bench_module(name: str):
    """A module of this folder (bench/mask.py, bench/_vocab.py, ...); the folder stays last on
    the import path."""
    sys.path.insert(0, str(HERE))
    try:
        return importlib.import_module(name)
    finally:
        _bench_last()


def masks(vocab_name: str, limit: int, repeats: int, seed: int, corpora: Path | None,
          timeout: float, taken: set[str] | None = None, clock: str = "wall") -> dict | None:
    """Force one valid instance of each of ``limit`` schemas through every available engine on
    one vocabulary; returns the per-engine summary (None when the vocabulary is missing).
    Schemas whose key is in ``taken`` are passed over, and the keys used are added to it."""
    mask = _bench_module("mask")
    vocab_mod = _bench_module("_vocab")
    from _instances import make_instance

    try:
        vocab = vocab_mod.load_vocab(vocab_name)
    except vocab_mod.VocabError as e:
        print(f"  {vocab_name}: skipped ({e})", flush=True)
        return None
    jobs, no_instance = [], 0
    for key, schema in _corpora.jsonschemabench(seed, corpora):
        if len(jobs) >= limit:
            break
        if taken is not None and key in taken:
            continue
        got = vocab_mod.instance_ids(vocab, make_instance, schema, f"{seed}:{key}")
        if got is None:
            no_instance += 1
            continue
        jobs.append((key, json.dumps(schema), got[1]))
    if taken is not None:
        taken.update(key for key, _, _ in jobs)
    engines = ["lexguide"] + [e for e, mod in PEERS.items() if importlib.util.find_spec(mod)]
    missing = [f"{e} (not installed)" for e, mod in PEERS.items() if e not in engines]
    missing += [f"{e} (no adapter in bench/mask.py)" for e, mod in NO_ADAPTER.items()
                if importlib.util.find_spec(mod)]
    print(f"  {vocab_name}: {len(jobs)} schemas ({no_instance} passed over: no instance), "
          f"engines {engines}", flush=True)
    raw: dict[str, dict[str, dict]] = {e: {} for e in engines}
    info: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="lexguide_bench_jsonschema_") as tmp:
        vpath = os.path.join(tmp, "vocab.pkl")
        with open(vpath, "wb") as f:
            pickle.dump(vocab, f)
        workers = {}
        for e in engines:  # one at a time: tokenizer preprocessing timings do not overlap
            w = mask.Worker(e, vpath, os.path.join(tmp, f"{e}.log"), timeout, 1)
            info[e] = dict(w.info) if w.start() and w.info else {"error": w.error}
            workers[e] = w
        for i, (key, text, ids) in enumerate(jobs):
            k = i % len(engines)
            for e in engines[k:] + engines[:k]:
                job = {"fmt": "json", "text": text, "variant": "native", "tokens": [ids],
                       "repeats": repeats, "clock": clock}
                raw[e][key] = workers[e].run(job)
        for w in workers.values():
            w.kill()
    summary = _summarize(mask, raw, engines, len(jobs))
    for e in engines:
        summary[e]["preprocess_ms"] = (info[e].get("preprocess_ms") or [None])[0]
        summary[e]["version"] = info[e].get("version") or info[e].get("error")
    return {"vocab": {"n_vocab": vocab.n_vocab, "name": vocab_name}, "summary": summary,
            "missing": missing, "schemas": [k for k, _, _ in jobs], "passed_over": no_instance,
            "clock": clock}


def _summarize(mask, raw: dict[str, dict[str, dict]], engines: list[str], n: int) -> dict:
    """Per engine: compiled and rejected counts over every schema; timings pooled over the
    schemas every engine forced to the end (the same positions for all)."""
    per = {e: {key: mask.summarize(res) for key, res in raw[e].items()} for e in engines}
    keys = list(raw[engines[0]])
    common = [key for key in keys if all(per[e][key]["status"] == "ok" for e in engines)]
    out = {}
    for e in engines:
        mk, first, fresh, comp = [], [], [], []
        repeated, comp0, ttfm0 = [], [], []
        for key in common:
            s, res = per[e][key], raw[e][key]
            mk += s["mask_us_all"]
            first += res["runs"][0][0]["mask_us"]
            repeated += [x for rep in res["runs"][1:] for r in rep for x in r["mask_us"]]
            fresh += [x for r in res.get("warm") or [] for x in r["mask_us"]]
            comp.append(s["compile_ms"])
            comp0.append(res["compile_ms"][0])
            ttfm0.append(res["ttfm_ms"][0])
        by_rep = {}
        for rep in range(max((len(raw[e][key]["runs"]) for key in common), default=0)):
            xs = [x for key in common for x in raw[e][key]["runs"][rep][0]["mask_us"]]
            by_rep[str(rep)] = sum(xs) / len(xs) if xs else None
        d = mask.dist(mk)
        out[e] = {"attempted": n,
                  "compiled": sum(bool(raw[e][key].get("compile_ms")) for key in keys),
                  "rejections": sum(per[e][key]["status"] in ("rejected", "eos_refused")
                                    for key in keys),
                  "failed": {key: f"{per[e][key]['status']}: {str(per[e][key].get('error') or per[e][key].get('reject'))[:200]}"
                             for key in keys if per[e][key]["status"] != "ok"},
                  "common": len(common),
                  "mask_us": {"mean": d["mean"], "p99": d["p99"], "max": d["max"]},
                  "mask_us_mean_by_repeat": by_rep,
                  "first_pass_us": mask.dist(first)["mean"],
                  "fresh_matcher_us": mask.dist(fresh)["mean"],
                  "compile_ms": {"p50": percentile(comp, 50), "p99": percentile(comp, 99)},
                  "first_use": {"ttfm_ms": _p50_p99(ttfm0), "compile_ms": _p50_p99(comp0),
                                "mask_us": _mean_p99(first),
                                "repeated_mask_us": _mean_p99(repeated)}}
    return out


def _p50_p99(xs: list[float]) -> dict:
    return {"p50": percentile(xs, 50), "p99": percentile(xs, 99), "n": len(xs)}


def _mean_p99(xs: list[float]) -> dict:
    return {"mean": sum(xs) / len(xs) if xs else None, "p99": percentile(xs, 99), "n": len(xs)}


def print_first_use(name: str, m: dict, out=print) -> None:
    """The first-use table of one vocabulary: figures of the first compile and forcing of
    each schema, repeated masks beside them, ratios to llguidance of the same run."""
    summ = m["summary"]
    peer = summ.get("llguidance", {}).get("first_use")
    common = min((st.get("common", 0) for st in summ.values()), default=0)
    out(f"\n### first use, {name}: n_vocab={m['vocab']['n_vocab']}, {common} schemas every "
        f"engine forced (of {len(m['schemas'])}: {m['schemas'][0]} ...), {m['clock']} clock")
    out("| engine | TTFM ms p50 | p99 | compile ms p50 | p99 | first-use mask us mean | p99 "
        "| repeated mask us mean | p99 | vs llguidance: TTFM p50 | first-use mean | "
        "first-use p99 | repeated mean |")
    out("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for e, st in summ.items():
        fu = st.get("first_use")
        if not fu:
            continue
        t, c, f, r = fu["ttfm_ms"], fu["compile_ms"], fu["mask_us"], fu["repeated_mask_us"]
        ratios = ["-"] * 4
        if peer:
            ratios = [_ratio(t["p50"], peer["ttfm_ms"]["p50"]),
                      _ratio(f["mean"], peer["mask_us"]["mean"]),
                      _ratio(f["p99"], peer["mask_us"]["p99"]),
                      _ratio(r["mean"], peer["repeated_mask_us"]["mean"])]
        out(f"| {e} | {_f(t['p50'])} | {_f(t['p99'])} | {_f(c['p50'])} | {_f(c['p99'])} | "
            f"{_f(f['mean'])} | {_f(f['p99'])} | {_f(r['mean'])} | {_f(r['p99'])} | "
            + " | ".join(ratios) + " |")


def print_masks(name: str, m: dict, out=print) -> None:
    summ = m["summary"]
    base = summ.get("lexguide", {})
    common = min((st.get("common", 0) for st in summ.values()), default=0)
    out(f"\n### {name}: n_vocab={m['vocab']['n_vocab']}, timings over the {common} schemas every "
        f"engine forced (not measured: {m['missing'] or 'none'})")
    out("| engine | compiled | rejections | mask us mean | p99 | max | first pass mean | "
        "fresh matcher mean | compile ms p50 | p99 | mask mean ratio vs lexguide | "
        "first pass ratio | compile p50 ratio vs lexguide |")
    out("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    first_base = _first_pass(base)
    for e, st in summ.items():
        mk, cp = st["mask_us"], st["compile_ms"]
        rm = _ratio(mk.get("mean"), base.get("mask_us", {}).get("mean"))
        rf = _ratio(_first_pass(st), first_base)
        rc = _ratio(cp.get("p50"), base.get("compile_ms", {}).get("p50"))
        out(f"| {e} | {st['compiled']}/{st['attempted']} | {st['rejections']} | "
            f"{_f(mk.get('mean'))} | {_f(mk.get('p99'))} | {_f(mk.get('max'))} | "
            f"{_f(_first_pass(st))} | {_f(st.get('fresh_matcher_us'))} | "
            f"{_f(cp.get('p50'))} | {_f(cp.get('p99'))} | {rm} | {rf} | {rc} |")
    out("\nmask us mean/p99: per-position medians over the repeats (each a fresh compile). "
        "lexguide keeps its vocabulary walks per process, so its later repeats of a schema run on "
        "warm walks; 'first pass' is the mean of the first repeat alone (cold walks for "
        "lexguide); 'fresh matcher' is a second matcher on the last compiled grammar.")


def _first_pass(st: dict) -> float | None:
    by_rep = st.get("mask_us_mean_by_repeat") or {}
    return by_rep.get("0", by_rep.get(0))


def _ratio(x, y) -> str:
    return f"{x / y:.2f}" if x and y else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="samples and one vocabulary")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-masks", action="store_true", help="coverage and compile time only")
    ap.add_argument("--no-coverage", action="store_true", help="mask benchmark only")
    ap.add_argument("--vocabs", default=None, help="comma list of smollm2,llama3,gemma3 "
                    "(default: smollm2 with --quick, all three otherwise)")
    ap.add_argument("--limit", type=int, default=None, help="schemas forced per vocabulary "
                    "(default 8 with --quick, else 100)")
    ap.add_argument("--repeats", type=int, default=None,
                    help="compiles and forcings per schema (default 1 with --quick, else 3)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per (engine, schema)")
    ap.add_argument("--own-schemas", action="store_true",
                    help="each vocabulary forces schemas no earlier vocabulary took; prints the "
                         "first-use table and writes bench/results/jsonschema_first_use.md")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="time masks and compiles by wall clock (default) or by the thread's CPU "
                         "time (the compile loop's, the mask workers'; steadier when other "
                         "processes share the cores)")
    _corpora.add_argument(ap)
    _results.add_argument(ap)
    args = ap.parse_args(argv)
    _corpora.require(BENCH_REL, args.corpora)  # before any work: a clear message, then exit

    result: dict = {"quick": args.quick}
    rep = _results.Report()
    if not args.no_coverage:
        rep.print(f"coverage (compiled / total) and compile time per subset ({args.clock} clock)")
        clock = time.perf_counter if args.clock == "wall" else time.thread_time
        result["coverage"] = coverage(30 if args.quick else None, args.seed, args.corpora, clock)
        print_coverage(result["coverage"], rep.print)
        rep.print("\nJSON-Schema-Test-Suite agreement")
        result["suite"] = suite(args.seed)
        print_suite(result["suite"], rep.print)
    if not args.no_masks:
        names = args.vocabs.split(",") if args.vocabs else (
            ["smollm2"] if args.quick else ["smollm2", "llama3", "gemma3"])
        limit = args.limit or (8 if args.quick else 100)
        repeats = args.repeats or (1 if args.quick else 3)
        result["masks"] = {}
        taken: set[str] | None = set() if args.own_schemas else None
        for key in names:
            m = masks(key, limit, repeats, args.seed, args.corpora, args.timeout, taken,
                      args.clock)
            if m is None:
                rep.print(f"\n{key}: skipped (vocabulary not installed)")
                continue
            result["masks"][key] = m
            print_masks(key, m, rep.print)
            print_first_use(key, m, rep.print)
    variant = "first_use" if args.own_schemas else None
    out_json = OUT.with_name("jsonschema_first_use.json") if variant else OUT
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(result, indent=1, default=str))
    print(f"\nwrote {out_json}")
    _results.write(__file__, rep.text(), quick=args.quick, results=args.results, argv=argv,
                   variant=variant)
    return 0


if __name__ == "__main__":
    sys.exit(main())
