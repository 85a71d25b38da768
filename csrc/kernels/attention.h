// Attention of a few new rows per sequence over each sequence's own KV cache, in one call:
// decode steps (one row per sequence, or a few when the grammar forced tokens) of one or many
// sequences, each at its own position. Per layer it takes the rows of the fused Q|K|V
// projection and
//   1. per row and head: RMSNorm of the q and k heads (when the model has q/k norms), RoPE at
//      the row's position, then the row's keys and values written into its cache;
//   2. per sequence and query head: softmax(q·Kᵀ · scale) · V over the visible positions —
//      causal (a row sees the rows before it in the same call) and, for sliding-window
//      layers, the last `window` positions only.
// The cache holds keys and values in one of three element types (CacheType), one row of hd
// elements per (kv head, position):
//   - F16 (the default, llama.cpp's default cache): IEEE half, rounded to nearest even; the two
//     products read float16 operands as ggml's do: q is rounded to float16 before q·Kᵀ, the
//     softmax weights before the product with V (ggml converts the float operand of a product
//     with a float16 matrix to float16);
//   - F32: float32, nothing rounded (llama.cpp's `-ctk f32 -ctv f32`);
//   - Q8_0: ggml's Q8_0 blocks (a float16 scale d and 32 int8 q per 32 elements, hd a multiple
//     of 32), quantized as ggml's x86 quantize_row_q8_0 (d = amax/127, q = nearbyint(x·127/amax));
//     the products read each element as float(d)·q against float q and softmax weights.
// The sums follow llama.cpp's CPU backend (ggml with llamafile's tinyBLAS, AVX2) so that the
// logits stay bit-equal to its where the inputs are: q·k and the product with V put element
// (position) i into lane i mod 8 with fused multiply-adds, then add the lanes as
// (0+4)+(2+6) + ((1+5)+(3+7)); the softmax is e = expf(s − max) by ggml's SIMD expf, summed in
// double over 8-cell partial sums, times float(1/sum). The SIMD and portable paths give the
// same bits for every cache type; results do not depend on how the work is split over threads
// or which sequences share the call.
// Work: the portable path (isa() Scalar, the reference) computes one (row, query head) at a
// time. The SIMD paths (AVX2; AVX-512 for the products and the softmax at level Avx512) tile
// over independent outputs: a tile is some rows of a sequence × the query heads sharing one KV
// head (grouped-query attention), about 48 (row, head) pairs; each key and value row the tile
// sees is read from the cache and converted to float once, then used for every pair. Every
// output keeps its own summation order (each score one 8-lane FMA chain; the product with V
// one chain per lane over that lane's cells in order; a zmm holds two such chains side by
// side), so tiling changes no bit. Tiles go to the pool by (sequence, KV head, row block),
// each KV head's row blocks from the last (later rows see more positions) to the first.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lexguide::kernels {

enum class CacheType : int { F32 = 0, F16 = 1, Q8_0 = 2 };

// Bytes of one cache row (hd elements) of a type; 0 when hd does not fit it (Q8_0: hd % 32).
size_t cache_row_bytes(CacheType type, int hd);

struct AttnSeq {
  int64_t row0;    // first row of this sequence in qkv / out
  int64_t n_rows;  // its rows (≥ 1), at cache positions pos0 .. pos0 + n_rows - 1
  int64_t pos0;
  uint8_t* k;      // this layer's keys of the sequence: (n_kv, n_ctx) rows of cache_row_bytes
  uint8_t* v;      // its values, alike
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
  CacheType cache;         // the element type of every sequence's k and v
};

// Callers have checked every size, pointer and position (the binding does).
void attention(const AttnArgs& a);

}  // namespace lexguide::kernels
