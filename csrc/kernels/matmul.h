// The runtime's products: y = x · Wᵀ straight from a weight matrix's ggml blocks.
//
// W is (n_out, n_in) row-major in ggml blocks (a GGUF tensor's bytes, never copied), x is
// (T, n_in) float32, y is (T, n_sel) float32 where n_sel = n_out, or the number of selected
// rows for the rows-subset variant (only those output rows are computed: the sparse output
// projection of constrained steps). Activations are quantized per block first (quantize_act.h).
// Work is split over output rows on the shared thread pool; for T > 1 each weight row is read
// once per block of kTBlock activation rows and unpacked once per tile of them (≤ kMaxAct:
// 4 rows for most types, 8 for the AVX2 k-quant kernels).
#pragma once

#include <cstdint>

#include "kernels/blocks.h"

namespace lexguide::kernels {

constexpr int64_t kTBlock = 64;

// One matrix of a product: several matrices reading the same x (Q|K|V, gate|up) run as one
// call, their outputs side by side in out (one activation quantization per format, one hand-off
// to the pool).
struct MatPart {
  const uint8_t* w;        // (n_out, row_bytes)
  const TypeTraits* type;  // the weight type (supported)
  int64_t n_out;
};

constexpr int kMaxParts = 8;

struct MatmulArgs {
  const float* x;          // (T, n_in)
  int64_t T;
  int64_t n_in;
  const MatPart* parts;    // n_parts ≤ kMaxParts
  int n_parts;
  const int64_t* rows;     // one part only: selected output rows (in [0, n_out)), or nullptr
  int64_t n_rows;
  float* out;              // (T, n_sel), n_sel = Σ n_out or n_rows; rows out_stride apart
  int64_t out_stride;      // ≥ n_sel
  int n_threads;           // ≤ 0: the whole pool
  bool simd;               // false: the portable reference kernels; true: the best kernels
                           // at isa() (cpu.h)
};

// Callers have checked every size, index and pointer (the binding does).
void matmul(const MatmulArgs& a);
// The level of the kernel that matmul would use for a type now: isa_name() of the best level
// ≤ isa() with a kernel for the type ("scalar" when !simd).
const char* kernel_name(const TypeTraits* type, bool simd);

}  // namespace lexguide::kernels
