// Dot products of weight rows (ggml blocks) with activation rows (ActQ8 / ActQ8K / float32).
//
// A DotFn computes, for n_w (1 .. kMaxW) weight rows w[r] of n_blocks blocks and n_act
// (1 .. kMaxAct) activation rows act + a·act_stride,
// out[a·out_stride + r] = Σ_blocks dot(w[r] block, act[a] block). Several weight and
// activation rows per call let a SIMD kernel unpack each weight block once for all activation
// rows and load each activation block once for all weight rows (prefill, batched decode).
// Every output is computed by the same operations whatever n_w and n_act are: a row's result
// does not depend on the other rows of the product.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/blocks.h"
#include "kernels/cpu.h"

namespace lexguide::kernels {

constexpr int kMaxAct = 8;
constexpr int kMaxW = 4;

using DotFn = void (*)(const uint8_t* const* w, int n_w, const uint8_t* act, size_t act_stride,
                       int n_act, int64_t n_blocks, float* out, size_t out_stride);

// The portable reference kernel of a type (never null for a supported type).
DotFn scalar_dot(GgmlType type);
// The AVX2/FMA kernel of a type, or nullptr where there is none (the scalar one is used).
// Call only when isa() >= Isa::Avx2 (cpu.h).
DotFn avx2_dot(GgmlType type);
// The AVX-512 (F/BW/VL/DQ/VNNI) kernel of a type, or nullptr (the AVX2 one is used).
// Call only when isa() >= Isa::Avx512.
DotFn avx512_dot(GgmlType type);

// Dequantize n elements (whole blocks) of a weight row to float32, bit-identical to ggml's
// reference dequantizers (and lexguide.gguf.dequantize).
void dequantize_row(GgmlType type, const uint8_t* src, float* dst, int64_t n);

}  // namespace lexguide::kernels
