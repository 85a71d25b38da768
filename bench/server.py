#!/usr/bin/env python3
"""Server benchmark: requests/s and p50/p99 latency of short schema-constrained chat
completions at concurrency 1, 4 and 16.

Starts ``lexguide serve`` (SmolLM2 by default, ``--parallel`` slots) on a free loopback port
and, when ``llama_cpp.server`` (llama-cpp-python) is importable, llama.cpp's OpenAI server on
the same model with the same thread count, one after the other (``--rounds N``: N times,
alternating, medians reported). Each level sends a fixed
number of requests from that many client threads (the official ``openai`` client); every
request is a chat completion constrained to a small person schema (``response_format``
``json_schema`` for lexguide, ``json_object`` with ``schema`` for llama-cpp-python),
greedy, ``max_tokens`` 48, and its output is checked against the schema (``jsonschema``) —
a wrong output counts as a failure, not as a request served.

Latency is the time from sending a request to its complete answer. Throughput is requests
completed / wall time of the level. The machine is shared: the load average is printed.

    python bench/server.py --quick      # 2 / 4 / 8 requests per level
    python bench/server.py              # 8 / 16 / 32 requests per level
    python bench/server.py --rounds 3   # each engine 3 times, alternating; medians
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _results  # noqa: E402
from _stats import percentile  # noqa: E402
del sys.path[0]
# bench/jsonschema.py would shadow the jsonschema package: drop this folder from the path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12},
                   "age": {"type": "integer", "minimum": 0, "maximum": 120}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
LEVELS = (1, 4, 16)
START_TIMEOUT_S = 300.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(url: str, proc: subprocess.Popen, probe: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(url + probe, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("server did not start in time")


def _start(engine: str, model: str, threads: int, parallel: int, ctx: int, log: Path):
    port = _free_port()
    if engine == "lexguide":
        cmd = [sys.executable, "-m", "lexguide.cli", "serve", "-m", model, "--port", str(port),
               "--parallel", str(parallel), "--ctx", str(ctx), "--threads", str(threads)]
        probe = "/health"
    else:
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", model, "--port", str(port),
               "--host", "127.0.0.1", "--n_threads", str(threads), "--n_threads_batch",
               str(threads), "--n_ctx", str(ctx)]
        probe = "/v1/models"
    with open(log, "wb") as out:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, proc, probe)
    except BaseException:
        proc.kill()
        raise
    return proc, url


# The same schema constraint in each server's dialect: OpenAI's json_schema for lexguide;
# llama-cpp-python's server accepts only "text" / "json_object", the latter with a schema.
RESPONSE_FORMATS = {
    "lexguide": {"type": "json_schema",
                 "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}},
    "llama.cpp": {"type": "json_object", "schema": SCHEMA},
}


def _one(client, i: int, response_format: dict) -> tuple[float, bool]:
    import jsonschema

    t0 = time.perf_counter()
    r = client.chat.completions.create(
        model="bench", messages=[{"role": "user", "content": f"Invent person number {i}."}],
        max_tokens=48, temperature=0, response_format=response_format)
    dt = time.perf_counter() - t0
    try:
        jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMA)
        return dt, True
    except (ValueError, jsonschema.ValidationError):
        return dt, False


def _measure(url: str, counts: dict[int, int], response_format: dict) -> dict[str, dict]:
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=600)
    _one(client, -1, response_format)  # warm-up: compiles the schema, touches the caches
    out = {}
    for level in LEVELS:
        n = counts[level]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(level) as pool:
            results = list(pool.map(lambda i: _one(client, i, response_format), range(n)))
        wall = time.perf_counter() - t0
        lat = [dt for dt, _ in results]
        ok = sum(1 for _, good in results if good)
        out[str(level)] = {"requests": n, "valid": ok, "wall_s": wall, "req_s": ok / wall,
                           "p50_s": percentile(lat, 50), "p99_s": percentile(lat, 99)}
        print(f"  {level:>3} concurrent: {n} requests in {wall:.1f} s, {ok} valid", flush=True)
    return out


def _median(values: list[float]) -> float:
    s = sorted(values)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def _cell(row: dict | None, key: str, fmt: str) -> str:
    """``row[key]`` formatted, or a dash of the same width when the engine is missing."""
    width = fmt.lstrip(">").split(".")[0]
    return format(row[key], fmt) if row else format("—", ">" + width)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 / 4 / 8 requests per level")
    ap.add_argument("-m", "--model", default=None, help="GGUF file (default: SmolLM2)")
    ap.add_argument("--parallel", type=int, default=16, help="lexguide serve --parallel")
    ap.add_argument("--threads", type=int, default=2, help="threads of both servers")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure each engine this many times, alternating them; medians")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(),
                                                  "lexguide-bench-server.json"))
    _results.add_argument(ap)
    args = ap.parse_args()
    if args.model is None:
        from lexguide.model_files import default_model_path

        args.model = str(default_model_path())
    counts = dict(zip(LEVELS, (2, 4, 8) if args.quick else (8, 16, 32)))
    engines = ["lexguide"]
    if importlib.util.find_spec("llama_cpp") is not None:
        engines.append("llama.cpp")
    else:
        print("llama-cpp-python is not installed: its column is missing "
              "(pip install 'llama-cpp-python[server]', a ~7 min source build)")
    rounds: dict[str, list[dict]] = {e: [] for e in engines}
    logs = Path(tempfile.mkdtemp(prefix="lexguide-bench-server-"))
    for r in range(max(1, args.rounds)):
        for engine in engines if r % 2 == 0 else engines[::-1]:
            print(f"{engine} (round {r + 1}):", flush=True)
            proc, url = _start(engine, args.model, args.threads, args.parallel, args.ctx,
                               logs / f"{engine}.log")
            try:
                rounds[engine].append(_measure(url, counts, RESPONSE_FORMATS[engine]))
            finally:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
    results = {e: {str(level): {k: _median([run[str(level)][k] for run in runs])
                                for k in ("req_s", "p50_s", "p99_s", "valid", "requests")}
                   for level in LEVELS} for e, runs in rounds.items()}
    load = os.getloadavg()[0]
    rep = _results.Report()
    print()
    rep.print(f"schema-constrained chat completions, max_tokens 48, greedy; lexguide --parallel "
              f"{args.parallel}; {args.threads} threads each; median of {max(1, args.rounds)} "
              f"alternating rounds; load average {load:.2f}")
    rep.print(f"{'concurrency':>11} | {'lexguide req/s':>14} {'p50 s':>7} {'p99 s':>7} | "
              f"{'llama.cpp req/s':>15} {'p50 s':>7} {'p99 s':>7} | ratio")
    for level in LEVELS:
        lg = results["lexguide"][str(level)]
        lc = results.get("llama.cpp", {}).get(str(level))
        ratio = f"{lg['req_s'] / lc['req_s']:.2f}" if lc and lc["req_s"] else "—"
        rep.print(f"{level:>11} | {lg['req_s']:>14.3f} {lg['p50_s']:>7.2f} {lg['p99_s']:>7.2f} | "
                  f"{_cell(lc, 'req_s', '>15.3f')} {_cell(lc, 'p50_s', '>7.2f')} "
                  f"{_cell(lc, 'p99_s', '>7.2f')} | {ratio}")
    _results.write(__file__, rep.text(), quick=args.quick, results=args.results,
                   preformatted=True)
    Path(args.out).write_text(json.dumps({"results": results, "rounds": rounds,
                                          "load_average": load,
                                          "parallel": args.parallel, "counts": counts},
                                         indent=1))
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
