// Multi-row products on Intel AMX-INT8 tiles (TDPBUSD: a 16×K u8 tile times a K×16 s8 tile
// into 16×16 int32), for the weight types of the common llama.cpp mixes.
//
// Weights stay the GGUF's ggml blocks: per super-block (k-quants) or block (Q4_0, Q8_0), the
// quants of up to kAmxRows weight rows are unpacked to unsigned bytes (Q4_0 and the k-quants
// without their offsets, Q8_0 shifted by +128) into a per-thread buffer that serves as the u8
// tiles, once per block of activation rows. Activations are the quantized rows matmul already
// makes (quantize_act.h), re-laid once per product into the s8 tile layout: per tile of 16
// rows, each group of 4 consecutive quants of a row is one 32-bit column of a tile row
// (amx_pack_tile). Q4_0 and Q8_0: one tile product per 32-element block. The k-quants fold
// their sub-block scales into the weight operand so that a whole super-block accumulates in
// the tiles: Q4_K and Q5_K as two u8 rows per weight row (q·sl, q·sh for the 6-bit scale
// 8·sh + sl), Q6_K as five (q times each base-4 digit of scale + 128, and q). The offsets and mins
// enter through the activation's integer block sums (VNNI int16 dot products), and each block's
// float expression is the scalar reference's (dot_scalar.cc) with the same operations in the
// same order (the file is compiled with -ffp-contract=off). Every output is therefore bit-equal
// to the scalar reference, whatever rows share a call or a tile.
//
// Only call the functions below when isa() >= Isa::Amx (cpu.h): the tile instructions fault
// without the kernel's permission, and the file is compiled for AVX-512.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/blocks.h"

namespace lexguide::kernels {

// Weight rows per amx_rows call (two 16-row tiles).
constexpr int kAmxRows = 32;
// Activation rows per packed tile.
constexpr int kAmxTile = 16;

// Whether the AMX GEMM computes products of a weight type (inline: safe on any CPU).
inline bool amx_supports(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::Q8_0:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

// Activation rows from which amx_rows (tiles) runs instead of the row kernels: Q4_0 and Q8_0
// from 8 (the crossover with amx_small_rows on 2- to 16-row products of 4096-row matrices on one
// core of an AMX machine was 4 to 8 rows); the k-quants from 16, since their AVX-512 kernels
// (8 activation rows per weight-block unpack) still beat the tiles at 8 rows end to end: batched
// decode of 8 sequences of a 1B Q4_K_M model ran 1.9x faster on them than on the tiles.
inline int64_t amx_min_rows(GgmlType type) {
  return type == GgmlType::Q4_0 || type == GgmlType::Q8_0 ? 8 : 16;
}

// Whether products of fewer rows than amx_min_rows need amx_small_rows to keep the scalar
// reference's bits: Q4_0 and Q8_0. The AVX-512 kernels of Q4_K, Q5_K and Q6_K (dot_avx512.cc)
// already give those bits and stream decode rows faster, so matmul uses them below the tiles.
inline bool amx_small_needed(GgmlType type) {
  return type == GgmlType::Q4_0 || type == GgmlType::Q8_0;
}

// Bytes of T activation rows of n_in elements (kind Q8 or Q8K) in the tile layout.
size_t amx_packed_bytes(ActKind kind, int64_t T, int64_t n_in);
// Lay out activation tile `tile` (rows 16·tile .. 16·tile + 15 of the T quantized rows at act,
// act_stride apart; rows ≥ T are zeros) into packed (amx_packed_bytes long).
void amx_pack_tile(ActKind kind, const uint8_t* act, size_t act_stride, int64_t T, int64_t n_in,
                   int64_t tile, uint8_t* packed);
// out[t·out_stride + r] = Σ_blocks dot(w[r] block, activation row t block) for the n_w
// (1 .. kAmxRows) weight rows w[r] of a supported type and all T packed activation rows.
// Configures the calling thread's tiles and releases them before returning.
void amx_rows(const TypeTraits* type, const uint8_t* const* w, int n_w, const uint8_t* packed,
              int64_t T, int64_t n_in, float* out, size_t out_stride);
// The same outputs, bit for bit, for Q4_0 and Q8_0 (amx_small_needed) and T ≤ kAmxSmallMaxT
// activation rows read as quantize_act stores them (act_stride apart), without tiles: AVX-512
// VNNI block sums per weight row and activation row (decode and small batches, where a 16-row
// tile would be mostly padding).
constexpr int64_t kAmxSmallMaxT = 128;
void amx_small_rows(const TypeTraits* type, const uint8_t* const* w, int n_w, const uint8_t* act,
                    size_t act_stride, int64_t T, int64_t n_in, float* out, size_t out_stride);

}  // namespace lexguide::kernels
