#include "kernels/blocks.h"

namespace lexguide::kernels {

namespace {
constexpr TypeTraits kTraits[] = {
    {GgmlType::F32, "F32", 1, 4, ActKind::F32},
    {GgmlType::F16, "F16", 1, 2, ActKind::F32},
    {GgmlType::BF16, "BF16", 1, 2, ActKind::F32},
    {GgmlType::Q4_0, "Q4_0", kQK, sizeof(BlockQ4_0), ActKind::Q8},
    {GgmlType::Q4_1, "Q4_1", kQK, sizeof(BlockQ4_1), ActKind::Q8},
    {GgmlType::Q5_0, "Q5_0", kQK, sizeof(BlockQ5_0), ActKind::Q8},
    {GgmlType::Q5_1, "Q5_1", kQK, sizeof(BlockQ5_1), ActKind::Q8},
    {GgmlType::Q8_0, "Q8_0", kQK, sizeof(BlockQ8_0), ActKind::Q8},
    {GgmlType::Q2_K, "Q2_K", kQKK, sizeof(BlockQ2_K), ActKind::Q8K},
    {GgmlType::Q3_K, "Q3_K", kQKK, sizeof(BlockQ3_K), ActKind::Q8K},
    {GgmlType::Q4_K, "Q4_K", kQKK, sizeof(BlockQ4_K), ActKind::Q8K},
    {GgmlType::Q5_K, "Q5_K", kQKK, sizeof(BlockQ5_K), ActKind::Q8K},
    {GgmlType::Q6_K, "Q6_K", kQKK, sizeof(BlockQ6_K), ActKind::Q8K},
};
}  // namespace

const TypeTraits* type_traits(int32_t ggml_type) {
  for (const TypeTraits& t : kTraits) {
    if (int32_t(t.type) == ggml_type) return &t;
  }
  return nullptr;
}

size_t act_row_bytes(ActKind kind, int64_t n_in) {
  switch (kind) {
    case ActKind::F32: return size_t(n_in) * sizeof(float);
    case ActKind::Q8: return size_t(n_in / kQK) * sizeof(ActQ8);
    case ActKind::Q8K: return size_t(n_in / kQKK) * sizeof(ActQ8K);
  }
  return 0;
}

f16_bits f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t absx = x & 0x7FFFFFFFu;
  if (absx >= 0x7F800000u) {  // inf or NaN (NaN keeps a quiet payload bit)
    return f16_bits(sign | 0x7C00 | (absx > 0x7F800000u ? 0x200 : 0));
  }
  if (absx >= 0x477FF000u) return f16_bits(sign | 0x7C00);  // rounds past the largest half
  if (absx < 0x38800000u) {  // below the smallest normal half: a subnormal or zero
    if (absx < 0x33000000u) return f16_bits(sign);  // below half the smallest subnormal
    const uint32_t e = absx >> 23;
    const uint32_t man = (absx & 0x7FFFFF) | 0x800000;
    const uint32_t shift = 126 - e;  // 14 .. 24
    uint32_t h = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return f16_bits(sign | h);
  }
  uint32_t h = ((absx >> 13) - (112u << 10));
  const uint32_t rem = absx & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // may carry into the exponent: correct
  return f16_bits(sign | h);
}

}  // namespace lexguide::kernels
