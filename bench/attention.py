"""The native attention kernel alone at a real model's shape: prompt rows and decode steps.

One layer's ``kernels.attention`` call (RoPE, the cache writes and softmax(q·Kᵀ)·V) at
Llama-3.2-1B's attention shape (32 query heads sharing 8 KV heads, head size 64) with a
float16 KV cache, 2 threads by default:

* ``prompt 256``: 256 rows at positions 0–255 in one call (a short prompt);
* ``prompt 2048``: 2,048 rows as the runtime evaluates them, in eight calls of 256 rows
  (``runtime/model.py``'s ``PREFILL_CHUNK``) at positions 0, 256, …, 1792 (a long prompt,
  where the later chunks see up to 2,048 positions);
* ``decode @2047``: one row of one sequence at position 2,047;
* ``decode 8 seqs @1023``: one row of each of 8 sequences at position 1,023.

Each case runs ``--repeat`` times after a warm-up; the table gives the best and the median
time per layer (one call, or the eight of the 2,048-row prompt) and the time of the model's
16 layers at the best figure. The inputs are random (the speed does not depend on them).

    python bench/attention.py                 # writes bench/results/attention.md
    python bench/attention.py --quick         # fewer repeats, nothing written
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import _results
import numpy as np

N_Q, N_KV, HD, N_LAYER = 32, 8, 64, 16  # Llama-3.2-1B
CHUNK = 256


def _tables(n_pos: int, n_rot: int) -> tuple[np.ndarray, np.ndarray]:
    inv = 500000.0 ** (-np.arange(0, n_rot, 2) / n_rot)
    theta = np.arange(n_pos)[:, None] * inv[None, :]
    return np.cos(theta).astype(np.float32), np.sin(theta).astype(np.float32)


def _case(K, calls: list[list[tuple[int, int]]], n_ctx: int, cache_type: str, threads: int,
          repeat: int) -> list[float]:
    """Seconds per run of ``calls`` (each a list of (rows, first position) per sequence)."""
    rng = np.random.default_rng(0)
    dtype, row = K.cache_row_shape(cache_type, HD)
    n_seq = max(len(c) for c in calls)
    shape = (1, N_KV, n_ctx, row)
    if cache_type == "q8_0":
        raw = rng.standard_normal((N_KV * n_ctx, HD)).astype(np.float32)
        from lexguide.gguf import quantize
        base = quantize(raw, "q8_0").reshape(shape)
    else:
        base = rng.standard_normal(shape).astype(dtype)
    ks = [base.copy() for _ in range(n_seq)]
    vs = [base.copy() for _ in range(n_seq)]
    cos, sin = _tables(n_ctx, HD)
    width = (N_Q + 2 * N_KV) * HD
    prepared = []
    for layout in calls:
        R = sum(n for n, _ in layout)
        seqs = np.zeros((len(layout), 3), np.int64)
        r = 0
        for i, (n, pos0) in enumerate(layout):
            seqs[i] = (r, n, pos0)
            r += n
        qkv = rng.standard_normal((R, width)).astype(np.float32)
        prepared.append((qkv, seqs, np.empty((R, N_Q * HD), np.float32)))

    def once() -> float:
        t = 0.0
        for qkv0, seqs, out in prepared:
            qkv = qkv0.copy()
            t0 = time.perf_counter()
            K.attention(qkv, out, seqs, ks[:len(seqs)], vs[:len(seqs)], 0, n_q=N_Q, n_kv=N_KV,
                        head_dim=HD, q_norm=None, k_norm=None, eps=1e-5, cos=cos, sin=sin,
                        neox=False, n_rot=HD, scale=HD ** -0.5, window=0, n_threads=threads)
            t += time.perf_counter() - t0
        return t

    once()
    return [once() for _ in range(repeat)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache-type", default="f16", choices=("f16", "f32", "q8_0"))
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="2 repeats, nothing written")
    _results.add_argument(ap)
    args = ap.parse_args(argv)
    from lexguide.runtime import kernels as K

    repeat = 2 if args.quick else args.repeat
    cases = [
        ("prompt 256", [[(CHUNK, 0)]], CHUNK),
        ("prompt 2048 (8 x 256)", [[(CHUNK, p)] for p in range(0, 2048, CHUNK)], 2048),
        ("decode @2047", [[(1, 2047)]], 2048),
        ("decode 8 seqs @1023", [[(1, 1023)] * 8], 1024),
    ]
    rep = _results.Report()
    rep.print(f"attention at the 1B shape (n_q {N_Q}, n_kv {N_KV}, hd {HD}), {args.cache_type} "
              f"cache, {args.threads} threads, kernels at {K.isa()}; best / median of "
              f"{repeat} runs")
    rep.print("")
    rep.print("| case | best ms / layer | median ms / layer | 16 layers, ms |")
    rep.print("|---|---:|---:|---:|")
    for name, calls, n_ctx in cases:
        times = _case(K, calls, n_ctx, args.cache_type, args.threads, repeat)
        best, med = min(times), statistics.median(times)
        rep.print(f"| {name} | {best * 1e3:.3f} | {med * 1e3:.3f} | {best * 1e3 * N_LAYER:.1f} |")
    _results.write(__file__, rep.text(), quick=args.quick, results=args.results, argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
