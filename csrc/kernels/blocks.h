// ggml block layouts as data: one packed struct per weight type plus the two activation
// formats the dot products read (ggml's ggml-common.h layouts, as the GGUF format stores them).
//
// A weight row of n_in elements is n_in / kBlock consecutive blocks; a block is read through
// these structs only via memcpy-free pointer casts of byte offsets (all fields are bytes or
// 16-bit values at even offsets, so the structs are packed without padding by construction).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace lexguide::kernels {

// ggml type ids (GGUF tensor info `type`).
enum class GgmlType : int32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, BF16 = 30,
};

constexpr int kQK = 32;    // elements of a Q4_0 .. Q8_0 block
constexpr int kQKK = 256;  // elements of a k-quant super-block

using f16_bits = uint16_t;

struct BlockQ4_0 { f16_bits d; uint8_t qs[kQK / 2]; };
struct BlockQ4_1 { f16_bits d, m; uint8_t qs[kQK / 2]; };
struct BlockQ5_0 { f16_bits d; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ5_1 { f16_bits d, m; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ8_0 { f16_bits d; int8_t qs[kQK]; };
struct BlockQ2_K { uint8_t scales[16]; uint8_t qs[64]; f16_bits d, dmin; };
struct BlockQ3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; f16_bits d; };
struct BlockQ4_K { f16_bits d, dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct BlockQ5_K { f16_bits d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct BlockQ6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; f16_bits d; };

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20, "ggml layout");
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24, "ggml layout");
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ2_K) == 84, "ggml layout");
static_assert(sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144, "ggml layout");
static_assert(sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210, "ggml layout");

// Activation block for the 32-element types: ggml's Q8_0 (d) and Q8_1 (s = d·Σq) in one.
// d and s hold float16-rounded values, as ggml stores them; isum = Σq exactly.
struct ActQ8 { float d; float s; int32_t isum; int8_t qs[kQK]; };
// Activation block for the k-quants: ggml's Q8_K (float d, bsums = sums of 16 quants).
struct ActQ8K { float d; int8_t qs[kQKK]; int16_t bsums[kQKK / 16]; };

// Which activation format a weight type's dot product reads.
enum class ActKind { F32, Q8, Q8K };

struct TypeTraits {
  GgmlType type;
  const char* name;
  int block;        // elements per block
  int block_bytes;  // bytes per block
  ActKind act;
};

// Traits of a supported type, or nullptr (the caller names the type in its error).
const TypeTraits* type_traits(int32_t ggml_type);
// Bytes of one activation row of n_in elements (n_in a multiple of the type's block).
size_t act_row_bytes(ActKind kind, int64_t n_in);

// IEEE half → float (exact; subnormals, inf and NaN included).
inline float f16_to_f32(f16_bits h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do { man <<= 1; ++e; } while (!(man & 0x400));
    bits = sign | (uint32_t(112 - e) << 23) | ((man & 0x3FF) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// float → IEEE half, round to nearest even (what ggml's GGML_FP32_TO_FP16 does on x86).
f16_bits f32_to_f16(float f);
inline float round_f16(float f) { return f16_to_f32(f32_to_f16(f)); }

inline float bf16_to_f32(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Unpack the 12-byte Q4_K/Q5_K scales field: 8 six-bit scales and 8 six-bit mins.
inline void k4_scale_min(const uint8_t* s, uint8_t sc[8], uint8_t mn[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = s[j + 4] & 63;
    sc[j + 4] = (s[j + 8] & 0x0F) | ((s[j] >> 6) << 4);
    mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
  }
}

// Unpack the 12-byte Q3_K scales field: 16 signed six-bit scales (already minus 32).
inline void k3_scales(const uint8_t* s, int8_t sc[16]) {
  for (int k = 0; k < 16; ++k) {
    const int low = k < 8 ? (s[k] & 0x0F) : (s[k - 8] >> 4);
    const int high = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
    sc[k] = int8_t((low | (high << 4)) - 32);
  }
}

}  // namespace lexguide::kernels
