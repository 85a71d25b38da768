#!/usr/bin/env python3
"""Tokenizer benchmark: lexguide's pure-Python tokenizer side by side with HF ``tokenizers`` (Rust).

Both tokenizers come from the same GGUF vocabulary: lexguide reads it with ``Tokenizer.from_gguf``;
the peer is transformers' GGUF → ``tokenizers`` conversion (``tests/data/tokenizer/oracle.py``,
cached as JSON, so its load time is ``Tokenizer.from_file`` of that JSON).

Measured per model:
* load: ``Tokenizer.from_gguf`` (metadata + vocabulary arrays + special tokens), the first encode
  (builds the merge tables lazily), ``all_token_bytes``; the peer's ``from_file``.
* encode throughput (MB/s of UTF-8 input) on a ~1 MB mixed corpus (prose, code, JSON, numbers,
  CJK, emoji, whitespace runs, special-token text; ``tests/data/tokenizer/corpus.py``) cut into
  ~2 KB documents, each encoded with one call. "cold" = first pass on a fresh instance (empty
  word caches on both sides), "warm" = second pass. lexguide uses ``parse_special=True`` because
  the peer always recognises added tokens; ids are compared and mismatches reported.

Fairness (after shared/reference/bench_peers.py): same process, same documents, the peer pinned to
one thread (RAYON_NUM_THREADS=1; one ``encode`` call is single-threaded anyway), the two engines
interleaved with alternating order per repeat, best of N repeats reported. Throughput is measured
in process CPU time (the machine is shared; wall time would mostly measure other people's jobs);
load times are wall-clock (they include page-ins of the mapped file).

    python bench/tokenizer.py --quick      # 100 KB corpus, one repeat
    python bench/tokenizer.py              # 1 MB corpus, 3 repeats
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "tokenizer"
CACHE = Path(os.environ.get("LEXGUIDE_BENCH_CACHE", Path.home() / ".cache" / "lexguide-bench"))


sys.path.insert(0, str(DATA))
import corpus  # noqa: E402  (tests/data/tokenizer/corpus.py)
import oracle  # noqa: E402  (tests/data/tokenizer/oracle.py)


def _timed(fn: Callable[[], Any], clock: Callable[[], float] = time.perf_counter) -> tuple[float, Any]:
    gc.collect()
    t0 = clock()
    value = fn()
    return clock() - t0, value


def _documents(text: str, size: int = 2000) -> list[str]:
    docs, cur, n = [], [], 0
    for line in text.splitlines(keepends=True):
        cur.append(line)
        n += len(line)
        if n >= size:
            docs.append("".join(cur))
            cur, n = [], 0
    if cur:
        docs.append("".join(cur))
    return docs


def bench_model(name: str, path: Path, n_bytes: int, repeats: int) -> dict[str, Any]:
    import tokenizers

    from lexguide.gguf import open_gguf
    from lexguide.tokenizer import Tokenizer

    oracle.hf_tokenizer_from_gguf(path, CACHE)  # convert once (cached JSON)
    hf_path = sorted(CACHE.glob(f"{path.stem}-{path.stat().st_size}-tf*.json"))[-1]
    docs = _documents(corpus.mixed_text(n_bytes))
    total = sum(len(d.encode("utf-8")) for d in docs)
    res: dict[str, Any] = {"documents": len(docs), "bytes": total}

    load, ready, table_t, hf_load = [], [], [], []
    ours_cold, ours_warm, hf_cold, hf_warm = [], [], [], []
    mismatches = 0
    for rep in range(repeats):
        t, tok = _timed(lambda: Tokenizer.from_gguf(path))
        load.append(t)
        ready.append(t + _timed(lambda: tok.encode("warm up", parse_special=True))[0])
        table_t.append(_timed(tok.all_token_bytes)[0])
        t, hf = _timed(lambda: tokenizers.Tokenizer.from_file(str(hf_path)))
        hf_load.append(t)
        hf = oracle.hf_tokenizer_from_gguf(path, CACHE)  # with the smollm digit fix applied

        def run_ours() -> list[list[int]]:
            return [tok.encode(d, add_special=False, parse_special=True) for d in docs]

        def run_hf() -> list[list[int]]:
            return [e.ids for e in (hf.encode(d, add_special_tokens=False) for d in docs)]

        order = [("ours", run_ours), ("hf", run_hf)]
        if rep % 2:
            order.reverse()
        out: dict[str, list[list[int]]] = {}
        for who, fn in order:
            t_cold, out[who] = _timed(fn, time.process_time)
            t_warm, _ = _timed(fn, time.process_time)
            (ours_cold if who == "ours" else hf_cold).append(t_cold)
            (ours_warm if who == "ours" else hf_warm).append(t_warm)
        mismatches = sum(a != b for a, b in zip(out["ours"], out["hf"]))
    mb = total / 1e6
    res.update({
        "load_s": min(load), "ready_s": min(ready), "token_bytes_s": min(table_t),
        "hf_load_s": min(hf_load),
        "ours_cold_mb_s": mb / min(ours_cold), "ours_warm_mb_s": mb / min(ours_warm),
        "hf_cold_mb_s": mb / min(hf_cold), "hf_warm_mb_s": mb / min(hf_warm),
        "mismatched_documents": mismatches,
    })
    res["cold_ratio"] = res["ours_cold_mb_s"] / res["hf_cold_mb_s"]
    res["warm_ratio"] = res["ours_warm_mb_s"] / res["hf_warm_mb_s"]
    with open_gguf(path) as g:
        res["vocab_size"] = len(g.metadata["tokenizer.ggml.tokens"])
    return res


def render(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        f"{'model':<8} {'vocab':>7} {'load s':>7} {'ready s':>7} {'bytes s':>7} {'HF load':>7} "
        f"{'ours cold':>9} {'HF cold':>8} {'ratio':>6} {'ours warm':>9} {'HF warm':>8} {'ratio':>6} "
        f"{'mismatch':>8}",
        f"{'':<8} {'':>7} {'':>7} {'':>7} {'':>7} {'':>7} {'MB/s':>9} {'MB/s':>8} {'':>6} "
        f"{'MB/s':>9} {'MB/s':>8} {'':>6} {'docs':>8}",
    ]
    for name, r in results.items():
        lines.append(
            f"{name:<8} {r['vocab_size']:>7} {r['load_s']:>7.3f} {r['ready_s']:>7.3f} "
            f"{r['token_bytes_s']:>7.3f} {r['hf_load_s']:>7.3f} {r['ours_cold_mb_s']:>9.3f} "
            f"{r['hf_cold_mb_s']:>8.3f} {r['cold_ratio']:>6.2f} {r['ours_warm_mb_s']:>9.3f} "
            f"{r['hf_warm_mb_s']:>8.3f} {r['warm_ratio']:>6.2f} "
            f"{r['mismatched_documents']:>4}/{r['documents']:<4}"
        )
    lines.append("ratio = lexguide MB/s ÷ HF tokenizers MB/s (goal ≥ 0.25); "
                 "ready = load + first encode (lazy merge tables)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100 KB corpus, one repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bytes", type=int, default=1_000_000, help="corpus size (full mode)")
    ap.add_argument("--models", default="smollm2,gemma3", help="comma list: smollm2,gemma3")
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "lexguide-bench-tokenizer.json"))
    args = ap.parse_args(argv)
    try:
        import tokenizers  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        print("the peer needs: pip install transformers tokenizers", file=sys.stderr)
        return 2
    from lexguide.model_files import ModelNotInstalled, gemma3_path, smollm2_path

    locate = {"smollm2": smollm2_path, "gemma3": gemma3_path}
    repeats = 1 if args.quick else args.repeats
    n_bytes = 100_000 if args.quick else args.bytes
    results = {}
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        try:
            path = locate[name]()
        except (KeyError, ModelNotInstalled) as e:
            print(f"[bench] skip {name}: {e}", file=sys.stderr)
            continue
        results[name] = bench_model(name, path, n_bytes, repeats)
    if not results:
        print("no model installed (see /work/shared/models.md)", file=sys.stderr)
        return 2
    import importlib.metadata as md

    meta = {"repeats": repeats, "bytes": n_bytes, "python": sys.version.split()[0],
            "tokenizers": md.version("tokenizers"), "platform": platform.platform(),
            "nproc": os.cpu_count(), "loadavg": os.getloadavg()}
    print(render(results))
    Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print(f"\n[bench] wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
