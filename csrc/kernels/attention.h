// Attention of a few new rows per sequence over each sequence's own KV cache, in one call:
// decode steps (one row per sequence, or a few when the grammar forced tokens) of one or many
// sequences, each at its own position. Per layer it takes the rows of the fused Q|K|V
// projection and
//   1. per row and head: RMSNorm of the q and k heads (when the model has q/k norms), RoPE at
//      the row's position, then the row's keys and values written into its cache;
//   2. per sequence and query head: softmax(q·Kᵀ · scale) · V over the visible positions —
//      causal (a row sees the rows before it in the same call) and, for sliding-window
//      layers, the last `window` positions only.
// Like llama.cpp's default (float16) KV cache, keys and values are stored rounded to float16
// (in float32 arrays), and the two products read float16 operands: q is rounded to float16
// before q·Kᵀ, the softmax weights before the product with V (ggml converts the float
// operand of a product with a float16 matrix to float16).
// The sums follow llama.cpp's CPU backend (ggml with llamafile's tinyBLAS, AVX2) so that the
// logits stay bit-equal to its where the inputs are: q·k and the product with V put element
// (position) i into lane i mod 8 with fused multiply-adds, then add the lanes as
// (0+4)+(2+6) + ((1+5)+(3+7)); the softmax is e = expf(s − max) by ggml's SIMD expf, summed in
// double over 8-cell partial sums, times float(1/sum). The AVX2 and portable paths give the
// same bits; results do not depend on how the work is split over threads or which sequences
// share the call. The numpy prompt path of runtime/model.py rounds the same operands but sums
// in BLAS order.
#pragma once

#include <cstdint>

namespace lexguide::kernels {

struct AttnSeq {
  int64_t row0;    // first row of this sequence in qkv / out
  int64_t n_rows;  // its rows (≥ 1), at cache positions pos0 .. pos0 + n_rows - 1
  int64_t pos0;
  float* k;        // this layer's keys of the sequence: (n_kv, n_ctx, hd)
  float* v;        // its values: (n_kv, n_ctx, hd)
  int64_t n_ctx;   // pos0 + n_rows ≤ n_ctx
};

struct AttnArgs {
  float* qkv;              // (R, (n_q + 2·n_kv)·hd): q and k heads are normed and rotated in place
  float* out;              // (R, n_q·hd)
  int64_t R;
  int n_q, n_kv, hd;       // n_q a multiple of n_kv
  const float* q_norm;     // (hd,) or nullptr (no q/k norms: then k_norm is nullptr too)
  const float* k_norm;     // (hd,) or nullptr
  float eps;
  const float* cos;        // (rope_rows, n_rot / 2): cos θ[p, i]; every position < rope_rows
  const float* sin;
  int64_t rope_rows;
  int n_rot;               // even, ≤ hd
  bool neox;               // pairs (i, i + n_rot/2) (NEOX) or (2i, 2i+1)
  float scale;             // multiplies q·k
  int64_t window;          // 0: full causal attention; else positions p - window < s ≤ p
  const AttnSeq* seqs;
  int n_seqs;
  int n_threads;           // ≤ 0: the whole pool
};

// Callers have checked every size, pointer and position (the binding does).
void attention(const AttnArgs& a);

}  // namespace lexguide::kernels
