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

Part 2 (subprocess): the shared fair harness ``shared/reference/bench_peers.py`` forces one
valid instance per schema token by token with every available engine (lexguide, llguidance,
xgrammar, outlines-core, lm-format-enforcer; absent ones are reported as such), once per
vocabulary, and we print its mask-time/compile-time summary with ratios to lexguide. The harness
loads only GPT-2 byte-level GGUF vocabularies (SmolLM2 49k); for Llama-3 (128k, from
``quicktok-v1``'s data files) and Gemma-3 (262k, SPM) the same method runs in process with
lexguide and llguidance only.

    python bench/jsonschema.py --quick        # ~minutes: samples, SmolLM2 only
    python bench/jsonschema.py                # full coverage, all three vocabularies

Writes ``bench/results/jsonschema.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import subprocess
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _results  # noqa: E402
del sys.path[0]
# this file is named like the ``jsonschema`` package: keep its folder off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

CORPORA = Path("/work/shared/corpora")
BENCH_DIR = CORPORA / "jsonschemabench"
EXPECTED = CORPORA / "llguidance-data/json_stats/expected_maskbench.json"
HARNESS = Path("/work/shared/reference/bench_peers.py")
OUT = Path(__file__).resolve().parent / "results" / "jsonschema.json"
PEERS = {"llguidance": "llguidance", "xgrammar": "xgrammar", "outlines_core": "outlines_core",
         "lmfe": "lmformatenforcer"}


def pct(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def coverage(per_subset: int | None, seed: int) -> dict:
    """Compile every (or a sample of) schema with lexguide and llguidance; times in ms."""
    from lexguide.engine.grammar import Grammar
    from lexguide.errors import LexguideError

    try:
        import llguidance
    except ImportError:
        llguidance = None
    expected = json.loads(EXPECTED.read_text()) if EXPECTED.exists() else {}
    out = {}
    for path in sorted(BENCH_DIR.glob("*.jsonl")):
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
            t = time.perf_counter()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    Grammar.from_json_schema(rec["schema"])
                ok_ours += 1
            except LexguideError:
                pass
            ours.append((time.perf_counter() - t) * 1e3)
            if llguidance is not None:
                t = time.perf_counter()
                g = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(rec["schema"]))
                ok_theirs += llguidance.LLMatcher.validate_grammar(g) == ""
                theirs.append((time.perf_counter() - t) * 1e3)
        out[sub] = {
            "n": len(lines), "lexguide": ok_ours, "llguidance": ok_theirs if llguidance else None,
            "llguidance_recorded": recorded,
            "lexguide_ms_p50": pct(ours, 50), "lexguide_ms_p99": pct(ours, 99),
            "llguidance_ms_p50": pct(theirs, 50), "llguidance_ms_p99": pct(theirs, 99),
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


def masks(vocab_path: Path, limit: int, repeats: int, workdir: Path) -> dict | None:
    """Run the shared harness for one vocabulary; returns its summary (or None on failure)."""
    engines = ["lexguide"] + [e for e, mod in PEERS.items() if importlib.util.find_spec(mod)]
    missing = [e for e, mod in PEERS.items() if not importlib.util.find_spec(mod)]
    out = workdir / f"peers_{vocab_path.stem}.json"
    cmd = [sys.executable, str(HARNESS), "--vocab", f"gguf:{vocab_path}", "--schemas",
           ",".join(str(p) for p in sorted(BENCH_DIR.glob("*.jsonl"))), "--limit", str(limit),
           "--engines", ",".join(engines), "--repeats", str(repeats), "--out", str(out)]
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**__import__("os").environ, "PYTHONPATH": str(src)}
    print(f"  running {' '.join(cmd[1:4])} ... engines={engines} (not installed: {missing})",
          flush=True)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not out.exists():
        print(proc.stdout[-3000:], proc.stderr[-3000:])
        return None
    res = json.loads(out.read_text())
    return {"vocab": res["vocab"], "summary": res["summary"],
            "missing": [f"{e} (not installed)" for e in missing],
            "tables_md": res.get("tables_md", "")}


def print_masks(name: str, m: dict, out=print) -> None:
    summ = m["summary"]
    base = summ.get("lexguide", {})
    out(f"\n### {name}: n_vocab={m['vocab']['n_vocab']} (not measured: {m['missing']})")
    out("| engine | compiled | rejections | mask us mean | p99 | max | first pass mean | "
        "compile ms p50 | p99 | mask mean ratio vs lexguide | first pass ratio | "
        "compile p50 ratio vs lexguide |")
    out("|---|---|---|---|---|---|---|---|---|---|---|---|")
    first_base = _first_pass(base)
    for e, st in summ.items():
        mk, cp = st["mask_us"], st["compile_ms"]
        rm = _ratio(mk.get("mean"), base.get("mask_us", {}).get("mean"))
        rf = _ratio(_first_pass(st), first_base)
        rc = _ratio(cp.get("p50"), base.get("compile_ms", {}).get("p50"))
        out(f"| {e} | {st['compiled']}/{st['attempted']} | {st['rejections']} | "
            f"{_f(mk.get('mean'))} | {_f(mk.get('p99'))} | {_f(mk.get('max'))} | {_f(_first_pass(st))} | "
            f"{_f(cp.get('p50'))} | {_f(cp.get('p99'))} | {rm} | {rf} | {rc} |")
    out("\nmask us mean/p99: per-position medians over the harness's repeats. lexguide keeps its "
        "vocabulary walks per process, so its 2nd and 3rd repeats of a schema run on warm walks; "
        "'first pass' is the mean of the first repeat alone (cold walks for lexguide).")


def _first_pass(st: dict) -> float | None:
    by_rep = st.get("mask_us_mean_by_repeat") or {}
    return by_rep.get("0", by_rep.get(0))


def masks_in_process(vocab_name: str, limit: int, seed: int) -> dict:
    """lexguide and llguidance side by side in this process, for vocabularies the shared
    harness cannot load (it reads only GPT-2 byte-level GGUF vocabularies: not Gemma-3's SPM
    one, nor the Llama-3 128k vocabulary of ``quicktok-v1``, see ``bench/_vocab.py``).

    Same method as the harness: one valid instance per schema (its generator, checked with
    ``jsonschema``), compact JSON, the vocabulary's own encoding, forced token by token; masks
    timed.
    """
    import importlib.util as iu

    import llguidance as llg
    import numpy as np

    import lexguide.jsonschema  # noqa: F401  (imported before timing, as llguidance is)
    from lexguide.engine import Matcher
    from lexguide.engine.grammar import Grammar
    from lexguide.errors import LexguideError

    # bench/_vocab.py by its path (this folder stays off the import path: see the top)
    vspec = iu.spec_from_file_location("_vocab", Path(__file__).resolve().parent / "_vocab.py")
    vmod = iu.module_from_spec(vspec)
    sys.modules["_vocab"] = vmod  # its dataclasses look their module up
    vspec.loader.exec_module(vmod)  # type: ignore[union-attr]
    load_vocab, peer_token_bytes, instance_ids = vmod.load_vocab, vmod.peer_token_bytes, vmod.instance_ids

    spec = iu.spec_from_file_location("bench_peers", HARNESS)
    peers = iu.module_from_spec(spec)
    spec.loader.exec_module(peers)  # type: ignore[union-attr]
    vocab = load_vocab(vocab_name)
    n_vocab = vocab.n_vocab
    info = vocab.tokenizer_info()
    eos = vocab.eos_id
    peer_bytes, peer_special = peer_token_bytes(vocab)

    class _Wrapped:  # what llguidance.TokenizerWrapper expects
        def __init__(self) -> None:
            self.eos_token_id, self.bos_token_id = eos, None
            self.tokens = peer_bytes
            self.special_token_ids = peer_special

        def __call__(self, s):
            return vocab.encode(s.decode() if isinstance(s, bytes) else s)

    llg_tok = llg.LLTokenizer(llg.TokenizerWrapper(_Wrapped()), n_vocab=n_vocab, eos_token=eos)
    lines = []
    for path in sorted(BENCH_DIR.glob("*.jsonl")):
        lines += [(path.stem, line) for line in path.read_text().splitlines()]
    rng = random.Random(seed)
    times: dict[str, dict[str, list[float]]] = {e: {"mask_us": [], "compile_ms": []}
                                                 for e in ("lexguide", "llguidance")}
    done = 0
    for sub, line in rng.sample(lines, len(lines)):
        if done >= limit:
            break
        rec = json.loads(line)
        got = instance_ids(vocab, peers.make_instance, rec["schema"], f"{seed}:{rec['id']}")
        if got is None:
            continue
        ids = got[1]
        try:
            t = time.perf_counter()
            g = Grammar.from_json_schema(rec["schema"])
            t_ours = (time.perf_counter() - t) * 1e3
            m = Matcher(g, info)
        except LexguideError:
            continue
        t = time.perf_counter()
        grm = llg.LLMatcher.grammar_from_json_schema(json.dumps(rec["schema"]))
        lm = llg.LLMatcher(llg_tok, grm, log_level=0)
        t_llg = (time.perf_counter() - t) * 1e3
        if lm.is_error():
            continue
        buf = np.zeros((n_vocab + 31) // 32, dtype=np.uint32)
        ours, theirs = [], []
        for t_id in [*ids, None]:
            t = time.perf_counter()
            m.compute_mask()
            ours.append((time.perf_counter() - t) * 1e6)
            t = time.perf_counter()
            lm.unsafe_compute_mask_ptr(buf.ctypes.data, buf.nbytes)
            theirs.append((time.perf_counter() - t) * 1e6)
            if t_id is not None:
                m.consume(t_id)
                lm.consume_token(t_id)
        times["lexguide"]["mask_us"] += ours
        times["llguidance"]["mask_us"] += theirs
        times["lexguide"]["compile_ms"].append(t_ours)
        times["llguidance"]["compile_ms"].append(t_llg)
        done += 1
    summary = {}
    for e, t in times.items():
        mk, cp = t["mask_us"], t["compile_ms"]
        mean = sum(mk) / len(mk) if mk else None
        summary[e] = {"attempted": done, "compiled": done, "rejections": 0,
                      "mask_us": {"mean": mean, "p99": pct(mk, 99), "max": max(mk, default=None)},
                      "mask_us_mean_by_repeat": {"0": mean},  # one pass, cold
                      "compile_ms": {"p50": pct(cp, 50), "p99": pct(cp, 99)}}
    return {"vocab": {"n_vocab": n_vocab}, "summary": summary,
            "missing": [("xgrammar, outlines_core, lmfe (in-process mode: lexguide and "
                         "llguidance only)")]}


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
    ap.add_argument("--limit", type=int, default=None, help="schemas forced per vocabulary")
    _results.add_argument(ap)
    args = ap.parse_args(argv)
    from lexguide.model_files import ModelNotInstalled, gemma3_path, smollm2_path

    result: dict = {"quick": args.quick}
    rep = _results.Report()
    if not args.no_coverage:
        rep.print("coverage (compiled / total) and compile time per subset")
        result["coverage"] = coverage(30 if args.quick else None, args.seed)
        print_coverage(result["coverage"], rep.print)
        rep.print("\nJSON-Schema-Test-Suite agreement")
        result["suite"] = suite(args.seed)
        print_suite(result["suite"], rep.print)
    if not args.no_masks:
        known = {"smollm2": ("smollm2-49k", smollm2_path), "llama3": ("llama3-128k", None),
                 "gemma3": ("gemma3-262k", gemma3_path)}
        names = args.vocabs.split(",") if args.vocabs else (
            ["smollm2"] if args.quick else ["smollm2", "llama3", "gemma3"])
        limit = args.limit or (8 if args.quick else 100)
        result["masks"] = {}
        for key in names:
            name, locate = known[key]
            OUT.parent.mkdir(parents=True, exist_ok=True)
            if locate is None or key == "gemma3":  # vocabularies the shared harness cannot load
                # in a fresh process each: the lexer DFA and the compile cache are shared by
                # every vocabulary of a process, and a first use must meet a cold engine
                import multiprocessing as mp

                try:
                    with mp.get_context("spawn").Pool(1) as pool:
                        m = pool.apply(masks_in_process, (key, limit, args.seed))
                except Exception as e:  # noqa: BLE001  (_vocab.VocabError: package missing)
                    rep.print(f"\n{name}: skipped ({e})")
                    continue
            else:
                try:
                    path = Path(locate())
                except ModelNotInstalled as e:
                    rep.print(f"\n{name}: skipped ({e})")
                    continue
                m = masks(path, limit, 1 if args.quick else 3, OUT.parent)
            if m is not None:
                result["masks"][name] = m
                print_masks(name, m, rep.print)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1, default=str))
    print(f"\nwrote {OUT}")
    _results.write(__file__, rep.text(), quick=args.quick, results=args.results, argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
