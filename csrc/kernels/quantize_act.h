// Activation quantization per block, the way ggml quantizes the vector side of a dot product:
// Q8_0/Q8_1 for the 32-element weight types, Q8_K for the k-quants. Q8_0/Q8_1 follow ggml's
// x86 SIMD quantize_row_q8_0 / q8_1 (scale 127/amax, half-to-even rounding), which is what
// llama.cpp runs on an AVX2 machine; the _ref versions round half away from zero with 1/d.
// Q8_K follows quantize_row_q8_K_ref. Float weight types read float activations.
#pragma once

#include <cstdint>

#include "kernels/blocks.h"

namespace lexguide::kernels {

// x (n,) → n / 32 ActQ8 blocks. d = amax/127 (stored float16-rounded), q = nearbyint(x·127/amax).
void quantize_row_q8(const float* x, ActQ8* out, int64_t n);
// x (n,) → n / 256 ActQ8K blocks. d = −max/127 for the element of largest magnitude.
void quantize_row_q8k(const float* x, ActQ8K* out, int64_t n);
// Quantize (or copy) one activation row for a weight type's dot product.
void quantize_act_row(ActKind kind, const float* x, uint8_t* out, int64_t n);
// x (n,) → the values its activation blocks stand for (d·q), written to out (n,): what a
// float product must multiply to equal the integer dot products (up to float rounding).
void roundtrip_act_row(ActKind kind, const float* x, float* out, int64_t n);

}  // namespace lexguide::kernels
