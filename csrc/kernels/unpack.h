// Per-block unpacking of the quantized weight types into plain int8 quants: the one place the
// bit layouts are spelled out, shared by the dequantizer and the scalar dot products.
// Offsets that ggml subtracts per element (Q4_0 −8, Q5_0 −16, Q3_K −4 by hmask, Q6_K −32) are
// applied here; for the types with a min (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) q stays unsigned.
#pragma once

#include <cstdint>

#include "kernels/blocks.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace lexguide::kernels {

inline void unpack_q4_0(const BlockQ4_0& b, int8_t q[kQK]) {
  for (int l = 0; l < 16; ++l) {
    q[l] = int8_t((b.qs[l] & 0x0F) - 8);
    q[l + 16] = int8_t((b.qs[l] >> 4) - 8);
  }
}

inline void unpack_q4_1(const BlockQ4_1& b, int8_t q[kQK]) {
  for (int l = 0; l < 16; ++l) {
    q[l] = int8_t(b.qs[l] & 0x0F);
    q[l + 16] = int8_t(b.qs[l] >> 4);
  }
}

inline uint32_t load_qh(const uint8_t qh[4]) {
  return uint32_t(qh[0]) | uint32_t(qh[1]) << 8 | uint32_t(qh[2]) << 16 | uint32_t(qh[3]) << 24;
}

inline void unpack_q5(const uint8_t qs[16], const uint8_t qh4[4], int offset, int8_t q[kQK]) {
  const uint32_t qh = load_qh(qh4);
  for (int l = 0; l < 16; ++l) {
    q[l] = int8_t(((qs[l] & 0x0F) | (((qh >> l) & 1) << 4)) - offset);
    q[l + 16] = int8_t(((qs[l] >> 4) | (((qh >> (l + 16)) & 1) << 4)) - offset);
  }
}

// Element e = 128h + 32j + l of the 2-bit k-quant fields: (qs[32h + l] >> 2j) & 3.
inline int crumb(const uint8_t* qs, int e) {
  const int h = e / 128, j = (e % 128) / 32, l = e % 32;
  return (qs[32 * h + l] >> (2 * j)) & 3;
}

inline void unpack_q2_k(const BlockQ2_K& b, int8_t q[kQKK]) {
  for (int e = 0; e < kQKK; ++e) q[e] = int8_t(crumb(b.qs, e));
}

inline void unpack_q3_k(const BlockQ3_K& b, int8_t q[kQKK]) {
  for (int e = 0; e < kQKK; ++e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    const int high = (b.hmask[l] >> (4 * h + j)) & 1;
    q[e] = int8_t(crumb(b.qs, e) - (high ? 0 : 4));
  }
}

// Q4_K/Q5_K: sub-block j (32 elements), element l: (qs[32·(j/2) + l] >> 4·(j%2)) & 0xF.
inline void unpack_q4_k(const uint8_t qs[128], int8_t q[kQKK]) {
  for (int j = 0; j < 8; ++j) {
    for (int l = 0; l < 32; ++l) q[32 * j + l] = int8_t((qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F);
  }
}

inline void unpack_q5_k(const BlockQ5_K& b, int8_t q[kQKK]) {
  unpack_q4_k(b.qs, q);
  for (int j = 0; j < 8; ++j) {
    for (int l = 0; l < 32; ++l) q[32 * j + l] = int8_t(q[32 * j + l] | (((b.qh[l] >> j) & 1) << 4));
  }
}

// Q6_K: element e = 128h + 32g + l: low nibble of ql[64h + 32·(g%2) + l] (shifted by 4·(g/2)),
// high two bits (qh[32h + l] >> 2g) & 3; minus 32.
inline void unpack_q6_k(const BlockQ6_K& b, int8_t q[kQKK]) {
  for (int e = 0; e < kQKK; ++e) {
    const int h = e / 128, g = (e % 128) / 32, l = e % 32;
    const int low = (b.ql[64 * h + 32 * (g % 2) + l] >> (4 * (g / 2))) & 0x0F;
    const int high = (b.qh[32 * h + l] >> (2 * g)) & 3;
    q[e] = int8_t((low | (high << 4)) - 32);
  }
}

#if defined(__AVX2__)
// Q6_K's 256 quants as eight groups of 32 unsigned bytes (0..63, the −32 offset not applied):
// group 4h + k holds elements 128h + 32k .. +31. For the files built with AVX2 or more; static
// so that each file keeps the copy built with its own instruction set.
static inline void unpack_q6_k_groups(const BlockQ6_K& b, __m256i g[8]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(3);
  for (int h = 0; h < 2; ++h) {
    const __m256i A = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h));
    const __m256i B = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h + 32));
    const __m256i H = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h));
    const __m256i lows[4] = {_mm256_and_si256(A, low4), _mm256_and_si256(B, low4),
                             _mm256_and_si256(_mm256_srli_epi16(A, 4), low4),
                             _mm256_and_si256(_mm256_srli_epi16(B, 4), low4)};
    for (int k = 0; k < 4; ++k) {
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(H, 2 * k), two);
      g[4 * h + k] = _mm256_or_si256(lows[k], _mm256_slli_epi16(hi, 4));
    }
  }
}
#endif

}  // namespace lexguide::kernels
