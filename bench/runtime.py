#!/usr/bin/env python3
"""Runtime benchmark: prompt eval and generation speed, load time, peak RSS, constrained overhead.

For each real model (SmolLM2-135M Q4_1, Gemma-3-270M Q4_K_M) and weight mode (eager, lazy),
a fresh worker process (so peak RSS is its own) measures:

* load time and peak RSS (``ru_maxrss``) after load, after plain generation, and at the end
  (after constrained generation, i.e. with the grammar engine's tables), file size;
* prompt evaluation tok/s (a P-token prompt) with 1 and 2 BLAS threads;
* generation tok/s (greedy, N tokens) with 1 and 2 BLAS threads for the decode matvecs;
* constrained generation tok/s (a JSON Schema forcing a long integer array) vs unconstrained
  at the same settings: overhead = 1 - constrained/unconstrained (forced tokens excluded from
  the constrained rate, so the matcher gets no credit for skipped forwards);
* the numpy ceiling: a bare chain of the model's own decode matvecs (nothing else, one
  thread), timed in the same worker — "gen 1t / bare" is how close the decoder gets to it;
* the peer, llama-cpp-python (llama.cpp), when importable: same prompt and token counts,
  2 threads. It is not built here (a ~7 min source build); without it the column says n/a.

Runs alternate lexguide and peer inside one worker per model; ratios are taken within the run.
The machine is shared: the load average is printed with the results.

    python bench/runtime.py --quick        # P=64, N=16, lazy with N=4 (a few minutes)
    python bench/runtime.py                # P=256, N=64
    python bench/runtime.py --no-constrained   # without the grammar engine
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCHEMA = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 999},
          "minItems": 200}


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _prompt_ids(model, n: int, salt: int) -> list[int]:
    text = " ".join(f"item {salt}-{i} is a word" for i in range(n))
    ids = model.tokenizer.encode(text)
    return ids[:n]


def _lexguide(path: str, mode: str, p: int, n: int, constrained: bool = True) -> dict:
    from lexguide.runtime import Model

    out: dict = {"file_mb": os.path.getsize(path) / 2**20}
    t0 = time.perf_counter()
    model = Model.from_gguf(path, weights=mode, n_ctx=max(512, p + 4 * n + 64), progress=False)
    out["load_s"] = time.perf_counter() - t0
    out["rss_load_mb"] = _rss_mb()
    for threads in (1, 2):
        model.n_threads = threads
        model.reset()
        c = model.generate(_prompt_ids(model, p, threads), max_tokens=1, temperature=0)
        out[f"prompt_tok_s_{threads}t"] = c.timings.prompt_tok_s
    model.n_threads = 2
    prompt = model.tokenizer.encode("Once upon a time, in a small village, there lived")
    for threads in (1, 2):
        model.decode_threads = threads
        model.reset()
        c = model.generate(prompt, max_tokens=n, temperature=0)
        out[f"gen_tok_s_{threads}t"] = c.timings.generation_tok_s
        out[f"gen_tokens_{threads}t"] = c.timings.generated_tokens
    out["rss_gen_mb"] = _rss_mb()  # before the grammar engine adds its tables
    if mode == "eager":  # the numpy ceiling: the same matvecs, nothing else, one thread
        out["bare_chain_tok_s_1t"] = _bare_chain(model)
        out["gen_vs_bare_1t"] = out["gen_tok_s_1t"] / out["bare_chain_tok_s_1t"]
    model.decode_threads = 1
    if not constrained:
        out.update(free_tok_s=None, constrained_tok_s=None, constrained_forced=None,
                   mask_ms_per_token=None, constrained_overhead=None, rss_peak_mb=_rss_mb())
        return out
    cons_prompt = model.tokenizer.encode("A list of numbers:")
    model.reset()
    free = model.generate(cons_prompt, max_tokens=n, temperature=0)
    model.reset()
    cons = model.generate(cons_prompt, max_tokens=n, temperature=0, json_schema=SCHEMA)
    t = cons.timings
    sampled = t.generated_tokens - t.forced_tokens
    out["free_tok_s"] = free.timings.generation_tok_s
    out["constrained_tok_s"] = sampled / t.generation_s if t.generation_s else 0.0
    out["constrained_forced"] = t.forced_tokens
    out["mask_ms_per_token"] = t.mask_ms_per_token
    out["constrained_overhead"] = 1 - out["constrained_tok_s"] / out["free_tok_s"] if out["free_tok_s"] else None
    out["rss_peak_mb"] = _rss_mb()
    return out


def _bare_chain(model, repeats: int = 5) -> float:
    """Tokens/s of a bare chain of the model's own decode matvecs (single-threaded BLAS): the
    ceiling of a numpy decoder on this machine *now*, so the ratio survives background load."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    w = model.transformer.weights
    mats = [p.dense for lw in w.layers for p in (lw.qkv, lw.wo, lw.gate_up, lw.down)]
    mats.append(w.output.dense)
    xs = [np.ones(m.shape[1], dtype=np.float32) for m in mats]
    with threadpool_limits(1, "blas"):
        t0 = time.perf_counter()
        for _ in range(repeats):
            for m, x in zip(mats, xs):
                m @ x
    return repeats / (time.perf_counter() - t0)


def _peer(path: str, p: int, n: int) -> dict:
    try:
        from llama_cpp import Llama  # type: ignore[import-not-found]
    except ImportError:
        return {"status": "llama-cpp-python not installed"}
    t0 = time.perf_counter()
    llm = Llama(model_path=path, n_ctx=max(512, p + 4 * n + 64), n_threads=2, verbose=False)
    out: dict = {"load_s": time.perf_counter() - t0}
    ids = llm.tokenize(" ".join(f"item 2-{i} is a word" for i in range(p)).encode())[:p]
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    out["prompt_tok_s_2t"] = len(ids) / (time.perf_counter() - t0)
    prompt = llm.tokenize(b"Once upon a time, in a small village, there lived")
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    prompt_s = time.perf_counter() - t0
    llm.reset()
    t0 = time.perf_counter()
    c = llm.create_completion(prompt, max_tokens=n, temperature=0.0, top_k=1)
    total = time.perf_counter() - t0
    done = c["usage"]["completion_tokens"]
    out["gen_tok_s_2t"] = done / max(total - prompt_s, 1e-9)
    return out


def worker(args: argparse.Namespace) -> int:
    n = args.lazy_tokens if args.mode == "lazy" else args.tokens
    result = {"lexguide": _lexguide(args.path, args.mode, args.prompt, n, not args.no_constrained)}
    if args.mode == "eager":
        result["peer"] = _peer(args.path, args.prompt, args.tokens)
    print(json.dumps(result))
    return 0


def _models(names: list[str]) -> dict[str, str]:
    from lexguide.model_files import ModelNotInstalled, gemma3_path, smollm2_path

    found = {}
    for name, locate in (("smollm2", smollm2_path), ("gemma3", gemma3_path)):
        if name in names:
            try:
                found[name] = str(locate())
            except ModelNotInstalled as e:
                print(f"[bench] skipping {name}: {e}", flush=True)
    return found


def _fmt(v, spec=".1f") -> str:
    return "n/a" if v is None else format(v, spec)


def render(results: dict) -> str:
    rows = [("| model | weights | load s | RSS load MB | RSS gen MB | RSS peak MB | file MB | prompt tok/s 1t / 2t "
            "| gen tok/s 1t / 2t | constrained tok/s | overhead | mask ms/tok "
            "| bare matvec chain tok/s 1t | gen 1t / bare | llama.cpp prompt / gen "
            "| ratio prompt / gen |"),
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (name, mode), r in results.items():
        lg, peer = r["lexguide"], r.get("peer", {})
        pp, pg = peer.get("prompt_tok_s_2t"), peer.get("gen_tok_s_2t")
        best_p = max(lg["prompt_tok_s_1t"], lg["prompt_tok_s_2t"])
        best_g = max(lg["gen_tok_s_1t"], lg["gen_tok_s_2t"])
        ratio = (f"{best_p / pp:.2f} / {best_g / pg:.2f}" if pp and pg else "n/a")
        overhead = lg["constrained_overhead"]
        overhead = overhead * 100 if overhead is not None else None
        peer_cell = f"{_fmt(pp)} / {_fmt(pg)}" if pp else (peer.get("status", "—") if mode == "eager" else "—")
        rows.append(
            f"| {name} | {mode} | {lg['load_s']:.2f} | {lg['rss_load_mb']:.0f} "
            f"| {lg.get('rss_gen_mb', 0):.0f} | {lg['rss_peak_mb']:.0f} "
            f"| {lg['file_mb']:.0f} | {lg['prompt_tok_s_1t']:.1f} / {lg['prompt_tok_s_2t']:.1f} "
            f"| {lg['gen_tok_s_1t']:.1f} / {lg['gen_tok_s_2t']:.1f} | {_fmt(lg['constrained_tok_s'])} "
            f"| {_fmt(overhead, '+.1f')}% "
            f"| {_fmt(lg['mask_ms_per_token'], '.2f')} | {_fmt(lg.get('bare_chain_tok_s_1t'))} "
            f"| {_fmt(lg.get('gen_vs_bare_1t'), '.2f')} | {peer_cell} | {ratio} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short prompt and few tokens")
    ap.add_argument("--models", default="smollm2,gemma3", help="comma list: smollm2,gemma3")
    ap.add_argument("--modes", default="eager,lazy", help="comma list: eager,lazy")
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "lexguide-bench-runtime.json"))
    ap.add_argument("--no-constrained", action="store_true",
                    help="skip the constrained-generation measurement")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--prompt", type=int, default=256, help=argparse.SUPPRESS)
    ap.add_argument("--tokens", type=int, default=64, help=argparse.SUPPRESS)
    ap.add_argument("--lazy-tokens", type=int, default=8, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    p, n, lazy_n = (64, 16, 4) if args.quick else (256, 64, 8)
    models = _models([m.strip() for m in args.models.split(",") if m.strip()])
    if not models:
        print("no model installed (see /work/shared/models.md)", file=sys.stderr)
        return 2
    results: dict = {}
    for name, path in models.items():
        for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
            print(f"[bench] {name} {mode} ...", file=sys.stderr, flush=True)
            cmd = [sys.executable, __file__, "--worker", "--path", path, "--mode", mode,
                   "--prompt", str(p), "--tokens", str(n), "--lazy-tokens", str(lazy_n)]
            if args.no_constrained:
                cmd.append("--no-constrained")
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode:
                print(proc.stderr, file=sys.stderr)
                return 1
            results[(name, mode)] = json.loads(proc.stdout.strip().splitlines()[-1])
    meta = {"prompt_tokens": p, "gen_tokens": n, "lazy_gen_tokens": lazy_n,
            "python": sys.version.split()[0], "platform": platform.platform(),
            "nproc": os.cpu_count(), "loadavg_end": os.getloadavg()}
    print(render(results))
    print(f"\nload average at the end: {meta['loadavg_end']} on {meta['nproc']} cores")
    Path(args.out).write_text(json.dumps(
        {"meta": meta, "results": {f"{k[0]}/{k[1]}": v for k, v in results.items()}}, indent=1))
    print(f"[bench] wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
