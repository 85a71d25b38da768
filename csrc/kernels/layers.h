// The transformer blocks of a decode step in one native call: for R rows (one or a few new
// tokens of each of several sequences, each with its own KV cache and position) every layer
//   h = RMSNorm(x) · attn_norm;  qkv = h·Wqkvᵀ (+ bias);  att = attention(qkv) (attention.h)
//   a = att·Woᵀ (+ bias) [→ RMSNorm · post_attn_norm];  x += a
//   h = RMSNorm(x) · ffn_norm;  [g | u] = h·[Wgate | Wup]ᵀ;  f = (act(g) ⊙ u)·Wdownᵀ
//   [f → RMSNorm · post_ffn_norm];  x += f
// and finally the output norm — the graph of runtime/model.py's layers (llama and gemma3),
// without a Python call per operation. Products use the integer kernels at any row count
// (matmul.h) and every row-wise operation reads only its row, so a row's result does not
// depend on the other rows of the call.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/attention.h"
#include "kernels/matmul.h"

namespace lexguide::kernels {

enum class Activation { SiLU, GeluTanh };

struct LayerWeights {
  const float* attn_norm = nullptr;  // (n_embd,)
  MatPart qkv[3] = {};               // q, k, v (n_qkv parts side by side)
  int n_qkv = 0;
  const float* qkv_bias = nullptr;   // (Σ n_out,) or nullptr
  MatPart wo = {};
  const float* wo_bias = nullptr;    // (n_embd,) or nullptr
  const float* ffn_norm = nullptr;
  MatPart gate_up[2] = {};           // gate, up: (n_ff each)
  MatPart down = {};
  const float* q_norm = nullptr;     // (hd,) each, or both nullptr
  const float* k_norm = nullptr;
  const float* post_attn_norm = nullptr;  // (n_embd,) or nullptr
  const float* post_ffn_norm = nullptr;
  int64_t window = 0;                // sliding window of this layer (0: none)
  const float* cos = nullptr;        // RoPE tables of this layer: (rope_rows, n_rot / 2)
  const float* sin = nullptr;
  int64_t rope_rows = 0;
};

struct ModelShape {
  int n_embd, n_ff, n_q, n_kv, hd, n_rot;
  bool neox;
  float eps, query_scale;
  Activation act;
  const float* output_norm;  // (n_embd,)
};

// One sequence of the call: rows row0 .. row0 + n_rows - 1 at positions pos0 ..; its caches
// are (n_layer, n_kv, n_ctx) rows of cache_row_bytes(type, hd) bytes (attention.h).
struct LayerSeq {
  int64_t row0, n_rows, pos0;
  uint8_t* k;
  uint8_t* v;
  int64_t n_ctx;
};

// x (R, n_embd) holds the rows' embeddings and is overwritten; out (R, n_embd) receives the
// final normalised hidden states. Callers have checked every size, position and pointer.
void forward_layers(const ModelShape& m, const std::vector<LayerWeights>& layers, float* x,
                    int64_t R, const std::vector<LayerSeq>& seqs, CacheType cache, float* out,
                    int n_threads, bool simd);

// g (R, n_ff) ← act(gate) · up for R rows of gate_up = [gate (n_ff) | up (n_ff)], with
// llama.cpp's arithmetic: SiLU x / (1 + e^−x) through ggml's SIMD expf, GELU(tanh) from the
// float16 table ggml uses (input and result rounded to float16; 0 below −10, x above 10).
void gated_rows(const float* gate_up, int64_t R, int n_ff, Activation act, float* g);

// x ← x / sqrt(mean(x²) + eps) · w for each of the R rows of n elements (in place; out may be x).
void rms_norm_rows(const float* x, const float* w, int64_t R, int n, float eps, float* out);

}  // namespace lexguide::kernels
