"""The runtime at real model sizes: random-weight GGUFs of real shapes, lexguide beside llama.cpp.

Speed and memory do not depend on the weights' values, so a GGUF with a real model's shape
and tensor types but random block bytes (with small finite scales) measures the work of the
real model: the same bytes read per token, the same products in a prompt. The files are
written with lexguide's own GGUF writer, with SmolLM2's tokenizer (49,152 tokens, so the
embedding and output are smaller than the real models' 128k-vocabulary ones; the transformer
blocks are identical), into ``~/.cache/lexguide/real-shapes/`` once, and reused.

Shapes (llama architecture): Llama-3.2-1B, Llama-3.2-3B, Llama-3.1-8B. Type mixes:
``q4_k_m`` (Q4_K; Q6_K for attn_v and ffn_down; Q8_0 embedding; Q6_K output where untied, as
the 8B), ``q4_0`` (Q4_0 matrices, Q8_0 embedding), ``q8_0`` (Q8_0 everywhere).

Per file, each engine in a fresh process, 2 threads: prompt evaluation of 256 and 2,048
tokens (tok/s, from an empty cache), decode (64 one-token steps with the output projection,
tok/s), load time and peak RSS. lexguide's KV cache is float16, llama.cpp's default. The
llama.cpp side is ``llama-bench -t 2 -p 256,2048 -n 64 -r 1 -o json`` of a llama.cpp built
for this machine (``bash bench/llama_bench_build.sh`` builds it into
``~/.cache/lexguide/llama-bench-build/``; ``--llama-bench PATH`` names another); its peak RSS
is the process's own, from ``wait4``; llama-bench reports no load time.

``--isa avx2,avx512`` runs lexguide once per instruction-set level (its kernels capped there
through ``LEXGUIDE_KERNELS``; default: the best the machine has), a row per level, so levels
compare as ratios in one run. ``--scaling`` adds, per lexguide run, batched decode (8 sequences,
each its own cache, one ``forward_batch`` and one output projection per step: aggregate tok/s)
beside one sequence's decode, and prompt 256 and decode at 1 thread beside the threads given:
the goals "8 sequences ≥ 4× one" and "2 threads ≥ 1.7× one".

``python bench/real_shapes.py`` writes ``bench/results/real_shapes.md``; ``--quick`` runs a
tiny shape without llama.cpp as a smoke test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import _results
import numpy as np

CACHE = Path.home() / ".cache" / "lexguide"
LLAMA_BENCH_DEFAULT = CACHE / "llama-bench-build" / "bin" / "llama-bench"
FORMAT = 1  # bump when the generated files change, so old ones are not reused


@dataclass(frozen=True)
class Shape:
    name: str
    n_embd: int
    n_layer: int
    n_head: int
    n_kv: int
    n_ff: int
    tied: bool  # output shares token_embd (Llama-3.2 1B and 3B)


SHAPES = {
    "1b": Shape("Llama-3.2-1B", 2048, 16, 32, 8, 8192, True),
    "3b": Shape("Llama-3.2-3B", 3072, 28, 24, 8, 8192, True),
    "8b": Shape("Llama-3.1-8B", 4096, 32, 32, 8, 14336, False),
    "tiny": Shape("tiny", 256, 2, 4, 2, 512, True),
}
# tensor role -> ggml type name per mix
MIXES = {
    "q4_k_m": {"q": "Q4_K", "k": "Q4_K", "v": "Q6_K", "o": "Q4_K", "gate": "Q4_K", "up": "Q4_K",
               "down": "Q6_K", "embd": "Q8_0", "out": "Q6_K"},
    "q4_0": {**dict.fromkeys(("q", "k", "v", "o", "gate", "up", "down"), "Q4_0"),
             "embd": "Q8_0", "out": "Q8_0"},
    "q8_0": dict.fromkeys(("q", "k", "v", "o", "gate", "up", "down", "embd", "out"), "Q8_0"),
}
# byte offsets of each block's float16 scales, set to small finite values
SCALES = {"Q4_K": (0, 2), "Q6_K": (208,), "Q8_0": (0,), "Q4_0": (0,)}
DEFAULT_RUNS = ["1b/q4_k_m", "1b/q4_0", "1b/q8_0", "3b/q4_k_m", "8b/q4_k_m"]


def _blocks(rng: np.random.Generator, type_name: str, n_out: int, n_in: int) -> np.ndarray:
    """(n_out, row bytes) uint8: random blocks of the type whose scales are 0.002 / 0.001."""
    from lexguide.gguf.constants import GGMLType, type_traits

    t = type_traits(GGMLType[type_name])
    nb = n_in // t.block_size
    raw = rng.integers(0, 256, size=(n_out, nb, t.type_size), dtype=np.uint8)
    for i, off in enumerate(SCALES[type_name]):
        raw[:, :, off:off + 2] = np.array([[0.002, 0.001][i]], np.float16).view(np.uint8)
    return raw.reshape(n_out, nb * t.type_size)


def generate(shape: Shape, mix: str, path: Path) -> Path:
    """Write the random-weight GGUF of a shape and mix to ``path`` (returns it).

    The layers share one set of random blocks per tensor role (the file still holds every
    layer's own copy, so every layer's bytes are read), which keeps the writer's memory at one
    layer's worth."""
    from lexguide.gguf import open_gguf, write_gguf
    from lexguide.model_files import smollm2_path

    src = open_gguf(smollm2_path())
    tok = {k: v for k, v in src.metadata.items() if k.startswith("tokenizer.")}
    types = {k: src.metadata_types[k] for k in tok if k in src.metadata_types}
    n_vocab = len(tok["tokenizer.ggml.tokens"])
    src.close()
    s, m = shape, MIXES[mix]
    hd = s.n_embd // s.n_head
    md = {"general.architecture": "llama", "general.name": f"random {s.name} {mix}",
          "llama.context_length": 131072, "llama.embedding_length": s.n_embd,
          "llama.block_count": s.n_layer, "llama.feed_forward_length": s.n_ff,
          "llama.attention.head_count": s.n_head, "llama.attention.head_count_kv": s.n_kv,
          "llama.attention.layer_norm_rms_epsilon": 1e-5, "llama.rope.freq_base": 500000.0,
          "llama.rope.dimension_count": hd, "llama.vocab_size": n_vocab, **tok}
    rng = np.random.default_rng(0)
    dims = {"q": (s.n_head * hd, s.n_embd), "k": (s.n_kv * hd, s.n_embd),
            "v": (s.n_kv * hd, s.n_embd), "o": (s.n_embd, s.n_head * hd),
            "gate": (s.n_ff, s.n_embd), "up": (s.n_ff, s.n_embd), "down": (s.n_embd, s.n_ff)}
    shared = {role: (_blocks(rng, m[role], *d), m[role], d) for role, d in dims.items()}
    norm = np.ones(s.n_embd, np.float32)
    names = {"q": "attn_q", "k": "attn_k", "v": "attn_v", "o": "attn_output",
             "gate": "ffn_gate", "up": "ffn_up", "down": "ffn_down"}
    tensors: list[tuple[str, object]] = [
        ("token_embd.weight", (_blocks(rng, m["embd"], n_vocab, s.n_embd), m["embd"],
                               (n_vocab, s.n_embd)))]
    for il in range(s.n_layer):
        p = f"blk.{il}."
        tensors.append((p + "attn_norm.weight", norm))
        tensors += [(p + names[r] + ".weight", shared[r]) for r in ("q", "k", "v", "o")]
        tensors.append((p + "ffn_norm.weight", norm))
        tensors += [(p + names[r] + ".weight", shared[r]) for r in ("gate", "up", "down")]
    tensors.append(("output_norm.weight", norm))
    if not s.tied:
        tensors.append(("output.weight", (_blocks(rng, m["out"], n_vocab, s.n_embd), m["out"],
                                          (n_vocab, s.n_embd))))
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_gguf(path, md, tensors, metadata_types=types)


def model_file(key: str, folder: Path) -> Path:
    shape, mix = key.split("/")
    path = folder / f"{shape}-{mix}-v{FORMAT}.gguf"
    if not path.exists():
        print(f"[bench] writing {path} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        generate(SHAPES[shape], mix, path)
        print(f"[bench] wrote {path.stat().st_size / 2**30:.2f} GiB in "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return path


# ------------------------------------------------------------------------------ lexguide worker
def _lexguide(path: str, prompts: list[int], n_gen: int, threads: int,
              scaling: bool = False) -> dict:
    from lexguide.runtime import Model

    t0 = time.perf_counter()
    model = Model.from_gguf(path, n_ctx=max(prompts) + n_gen + 8, n_threads=threads,
                            decode_threads=threads, progress=False)
    out: dict = {"load_s": time.perf_counter() - t0}
    tf = model.transformer
    tf.threads = threads
    rng = np.random.default_rng(1)
    n_vocab = tf.config.n_vocab
    tf.forward(rng.integers(100, n_vocab, size=16), tf.new_cache(16))  # pool threads, pages
    for p in prompts:
        ids = rng.integers(100, n_vocab, size=p)
        cache = tf.new_cache(p + 8)
        t0 = time.perf_counter()
        tf.forward(ids, cache)  # every layer on p rows, the logits of the last
        out[f"pp{p}"] = p / (time.perf_counter() - t0)
    cache = tf.new_cache(n_gen + 8)
    tok = 100
    tf.forward([tok], cache)  # warm
    t0 = time.perf_counter()
    for _ in range(n_gen):
        tok = int(np.argmax(tf.forward([tok], cache)))
    out[f"tg{n_gen}"] = n_gen / (time.perf_counter() - t0)
    out["kv_cache_mb"] = cache.nbytes / (n_gen + 8) * (max(prompts) + n_gen) / 2**20
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    if scaling:
        out.update(_scaling(tf, n_gen, threads))
    from lexguide.runtime import kernels

    out["isa"] = kernels.isa()
    return out


BATCH = 8  # sequences decoded together by --scaling


def _scaling(tf, n_gen: int, threads: int) -> dict:
    """Batched decode of BATCH sequences (aggregate tok/s) and prompt 256 / decode at 1 thread."""
    out: dict = {}
    caches = [tf.new_cache(n_gen + 16) for _ in range(BATCH)]
    last = [100 + 7 * b for b in range(BATCH)]
    for t, c in zip(last, caches):
        tf.forward([t], c)

    def step() -> None:
        h = tf.forward_batch([([t], c) for t, c in zip(last, caches)])
        last[:] = tf.project(h).argmax(axis=1).tolist()

    step()  # warm
    t0 = time.perf_counter()
    for _ in range(n_gen):
        step()
    out[f"tg{n_gen}_b{BATCH}"] = BATCH * n_gen / (time.perf_counter() - t0)
    if threads > 1:
        tf.threads = 1
        rng = np.random.default_rng(2)
        ids = rng.integers(100, tf.config.n_vocab, size=256)
        cache = tf.new_cache(256 + 8)
        t0 = time.perf_counter()
        tf.forward(ids, cache)
        out["pp256_t1"] = 256 / (time.perf_counter() - t0)
        cache = tf.new_cache(n_gen + 8)
        tok = 100
        tf.forward([tok], cache)
        t0 = time.perf_counter()
        for _ in range(n_gen):
            tok = int(np.argmax(tf.forward([tok], cache)))
        out[f"tg{n_gen}_t1"] = n_gen / (time.perf_counter() - t0)
        tf.threads = threads
    return out


def _run_lexguide(path: Path, prompts: list[int], n_gen: int, threads: int,
                  isa: str | None = None, scaling: bool = False) -> dict:
    cmd = [sys.executable, __file__, "--worker", str(path), "--prompts",
           ",".join(map(str, prompts)), "--n-gen", str(n_gen), "--threads", str(threads)]
    if scaling:
        cmd.append("--scaling")
    env = dict(os.environ)
    env.pop("LEXGUIDE_KERNELS", None)
    if isa:
        env["LEXGUIDE_KERNELS"] = isa
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode:
        raise RuntimeError(f"lexguide worker failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------ llama-bench
def find_llama_bench(given: str | None) -> Path | None:
    if given:
        return Path(given)
    if LLAMA_BENCH_DEFAULT.exists():
        return LLAMA_BENCH_DEFAULT
    found = shutil.which("llama-bench")
    return Path(found) if found else None


def _run_llama_bench(exe: Path, path: Path, prompts: list[int], n_gen: int,
                     threads: int) -> dict:
    """llama-bench's prompt and decode tok/s and its peak RSS (MB), or a status."""
    cmd = [str(exe), "-m", str(path), "-t", str(threads), "-p", ",".join(map(str, prompts)),
           "-n", str(n_gen), "-r", "1", "-o", "json"]
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:
        proc = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, text=True)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS
        proc.returncode = os.waitstatus_to_exitcode(status)
        out_f.seek(0)
        err_f.seek(0)
        stdout, stderr = out_f.read(), err_f.read()
    if proc.returncode:
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        return {"status": f"llama-bench failed (exit {proc.returncode}): {tail}"}
    out: dict = {"peak_rss_mb": usage.ru_maxrss / 1024.0}
    for row in json.loads(stdout):
        key = f"pp{row['n_prompt']}" if row["n_gen"] == 0 else f"tg{row['n_gen']}"
        out[key] = row["avg_ts"]
        out.setdefault("build", f"{row.get('build_commit', '?')} ({row.get('cpu_info', '')})")
        out.setdefault("type_k", row.get("type_k"))
        out.setdefault("flash_attn", row.get("flash_attn"))
    return out


# ------------------------------------------------------------------------------ table
def _f(v, spec=".1f") -> str:
    return "n/a" if v is None else format(v, spec)


def render(rows: list[tuple[str, Path, list[dict], dict]], prompts: list[int],
           n_gen: int) -> str:
    keys = [f"pp{p}" for p in prompts] + [f"tg{n_gen}"]
    head = ("| model | file GiB | engine | " + " | ".join(
        [f"prompt {p} tok/s" for p in prompts] + [f"decode tok/s ({n_gen})"])
        + " | load s | peak RSS MB |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for key, path, lexes, peer in rows:
        gib = f"{path.stat().st_size / 2**30:.2f}"
        for j, lex in enumerate(lexes):
            lines.append(f"| {key} | {gib if j == 0 else ''} | lexguide ({lex.get('isa', '?')}) | "
                         + " | ".join(_f(lex.get(k)) for k in keys)
                         + f" | {_f(lex['load_s'], '.2f')} | {lex['peak_rss_mb']:.0f} |")
        if "status" in peer:
            lines.append(f"| {key} | | llama.cpp | {peer['status']} |")
            continue
        lines.append(f"| {key} | | llama.cpp | " + " | ".join(_f(peer.get(k)) for k in keys)
                     + f" | n/a | {_f(peer.get('peak_rss_mb'), '.0f')} |")
        for lex in lexes:
            ratio = [f"{lex[k] / peer[k]:.2f}×" if peer.get(k) else "n/a" for k in keys]
            rss = (f"{lex['peak_rss_mb'] / peer['peak_rss_mb']:.2f}×"
                   if peer.get("peak_rss_mb") else "n/a")
            lines.append(f"| {key} | | lexguide ({lex.get('isa', '?')}) / llama.cpp | "
                         + " | ".join(ratio) + f" | | {rss} |")
    return "\n".join(lines)


def render_scaling(rows: list[tuple[str, Path, list[dict], dict]], n_gen: int,
                   threads: int) -> str:
    """The --scaling table: batched decode and one thread against the threads given."""
    b = f"tg{n_gen}_b{BATCH}"
    head = (f"| model | engine | decode 1 seq tok/s | decode {BATCH} seqs tok/s (aggregate) | "
            f"{BATCH} seqs / 1 | prompt 256, 1 thread | prompt 256, {threads} threads | "
            f"{threads} / 1 threads | decode, 1 thread | decode, {threads} threads | "
            f"{threads} / 1 threads |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]

    def ratio(a, c) -> str:
        return f"{a / c:.2f}×" if a and c else "n/a"

    for key, _, lexes, _ in rows:
        for lex in lexes:
            if b not in lex:
                continue
            tg, pp = lex[f"tg{n_gen}"], lex.get("pp256")
            lines.append(
                f"| {key} | lexguide ({lex.get('isa', '?')}) | {_f(tg)} | {_f(lex[b])} | "
                f"{ratio(lex[b], tg)} | {_f(lex.get('pp256_t1'))} | {_f(pp)} | "
                f"{ratio(pp, lex.get('pp256_t1'))} | {_f(lex.get(f'tg{n_gen}_t1'))} | {_f(tg)} | "
                f"{ratio(tg, lex.get(f'tg{n_gen}_t1'))} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def _report(rows, prompts: list[int], n_gen: int, threads: int, notes: list[str],
            left: list[str]) -> str:
    types_k = sorted({str(p["type_k"]) for *_, p in rows if p.get("type_k")})
    builds = sorted({f"{p['build']}, flash_attn {p.get('flash_attn')}"
                     for *_, p in rows if p.get("build")})
    scaling = render_scaling(rows, n_gen, threads)
    lines = [*notes, *([""] if notes else []), render(rows, prompts, n_gen), "",
             *([scaling, ""] if scaling else []),
             f"{threads} threads; prompts from an empty cache; decode: {n_gen} one-token steps "
             "with the output projection; KV caches float16 (lexguide's default; llama.cpp: "
             f"{', '.join(types_k) or 'its default'}); random weights of the real shapes with "
             "SmolLM2's 49k tokenizer" + (f"; llama.cpp build {', '.join(builds)}" if builds
                                          else "")]
    if left:
        lines += ["", f"not measured yet (the run was still going): {', '.join(left)}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="a tiny shape, short prompts, no llama.cpp (a smoke test)")
    ap.add_argument("--runs", default=",".join(DEFAULT_RUNS),
                    help="comma list of SHAPE/MIX (shapes: 1b, 3b, 8b, tiny; mixes: "
                    f"{', '.join(MIXES)}); default: {','.join(DEFAULT_RUNS)}")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-bench", default=None, metavar="PATH",
                    help=f"llama.cpp's llama-bench (default: {LLAMA_BENCH_DEFAULT} or on PATH)")
    ap.add_argument("--no-peer", action="store_true", help="lexguide alone")
    ap.add_argument("--isa", default="", metavar="LEVELS",
                    help="comma list of kernel levels to run lexguide at, a row each (scalar, "
                    "avx2, avx512, amx; default: the best this machine has)")
    ap.add_argument("--scaling", action="store_true",
                    help=f"also batched decode ({BATCH} sequences) and 1 thread against the "
                    "threads given")
    ap.add_argument("--dir", default=None, metavar="DIR",
                    help=f"where the generated GGUFs live (default: {CACHE / 'real-shapes'}; "
                    "--quick: a temporary folder)")
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(),
                                                  "lexguide-bench-real-shapes.json"))
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--prompts", default="256,2048", help=argparse.SUPPRESS)
    ap.add_argument("--n-gen", type=int, default=64, help=argparse.SUPPRESS)
    _results.add_argument(ap)
    args = ap.parse_args(argv)
    if args.worker:
        prompts = [int(p) for p in args.prompts.split(",")]
        print(json.dumps(_lexguide(args.worker, prompts, args.n_gen, args.threads,
                                   args.scaling)))
        return 0
    from lexguide.model_files import ModelNotInstalled, smollm2_path

    try:
        smollm2_path()
    except ModelNotInstalled as e:
        print(f"the generated files take SmolLM2's tokenizer: {e}", file=sys.stderr)
        return 2
    if args.quick:
        runs, prompts, n_gen = ["tiny/q4_k_m", "tiny/q4_0"], [32, 64], 8
    else:
        runs, prompts, n_gen = [r.strip() for r in args.runs.split(",") if r.strip()], \
            [int(p) for p in args.prompts.split(",")], args.n_gen
    levels: list[str | None] = [v.strip() for v in args.isa.split(",") if v.strip()] or [None]
    for v in levels:
        if v not in (None, "scalar", "avx2", "avx512", "amx"):
            ap.error(f"unknown level {v!r}: scalar, avx2, avx512 or amx")
    for r in runs:
        shape, _, mix = r.partition("/")
        if shape not in SHAPES or mix not in MIXES:
            ap.error(f"unknown run {r!r}: SHAPE/MIX with SHAPE in {', '.join(SHAPES)} and "
                     f"MIX in {', '.join(MIXES)}")
    tmp = tempfile.TemporaryDirectory() if args.quick and not args.dir else None
    folder = Path(tmp.name if tmp else args.dir or CACHE / "real-shapes")
    exe = None if args.quick or args.no_peer else find_llama_bench(args.llama_bench)
    notes = []
    if exe is None and not (args.quick or args.no_peer):
        notes.append(f"llama-bench not found ({LLAMA_BENCH_DEFAULT}, PATH; build it with "
                     "`bash bench/llama_bench_build.sh` or pass --llama-bench PATH): lexguide's "
                     "figures alone")
        print(notes[-1], flush=True)
    rows, data = [], {}
    for i, key in enumerate(runs):
        path = model_file(key, folder)
        lexes = []
        for level in levels:
            print(f"[bench] {key} lexguide {level or ''}...", file=sys.stderr, flush=True)
            lexes.append(_run_lexguide(path, prompts, n_gen, args.threads, level, args.scaling))
        if exe is not None:
            print(f"[bench] {key} llama-bench ...", file=sys.stderr, flush=True)
            peer = _run_llama_bench(exe, path, prompts, n_gen, args.threads)
        else:
            peer = {"status": "not run" + (" (--quick)" if args.quick else "")}
        rows.append((key, path, lexes, peer))
        data[key] = {"file_bytes": path.stat().st_size, "lexguide": lexes, "llama_cpp": peer}
        # the table so far after every run, so a long run leaves what it has measured
        last = i + 1 == len(runs)
        text = _report(rows, prompts, n_gen, args.threads, notes, runs[i + 1:])
        if last:
            print(text, flush=True)
        _results.write(__file__, text, quick=args.quick, results=args.results, argv=argv)
        Path(args.out).write_text(json.dumps({"prompts": prompts, "n_gen": n_gen,
                                              "runs": data}, indent=1))
    print(f"[bench] wrote {args.out}")
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
