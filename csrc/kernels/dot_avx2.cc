// AVX2/FMA/F16C dot products (this file is compiled with -mavx2 -mfma -mf16c; matmul.cc calls
// it only when cpu_has_avx2()). Each kernel mirrors its scalar reference in dot_scalar.cc:
// per block, unpack the weight quants once to unsigned bytes, multiply with every activation
// row (maddubs: u8 × s8 → pairs of i16, then madd → i32: exact, no saturation for these
// ranges), scale in float; the per-element offsets (Q4_0 −8, Q5_0 −16, Q6_K −32) and the min
// terms are applied through the activation's exact integer sums. Results differ from the
// scalar path only by float32 summation order. Q2_K and Q3_K have no AVX2 kernel (scalar).
#include <immintrin.h>

#include <cstring>

#include "kernels/dot.h"

namespace lexguide::kernels {

namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float half(f16_bits h) { return _cvtsh_ss(h); }

// 16 bytes of packed nibbles → 32 bytes: low nibbles (elements 0..15), then high (16..31).
inline __m256i nibbles_32(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Bit j of the 32-bit qh field → byte j as 0x10 (set) or 0 (clear).
inline __m256i high_bits_32(const uint8_t* qh4) {
  uint32_t qh;
  std::memcpy(&qh, qh4, 4);
  // byte j takes byte j/8 of qh (shuffles stay inside each 128-bit half)
  const __m256i pick = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                         0x0101010101010101, 0x0000000000000000);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(int(qh)), pick);
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201ULL));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

inline __m256i load32(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Σ over 32 lanes of u8 q × s8 y, as 8 int32 partial sums.
inline __m256i dot_u8s8(__m256i q, __m256i y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), _mm256_set1_epi16(1));
}

// Per activation row: a vector accumulator and a scalar one (offset and min terms).
// Two vector accumulators per row, taken by even and odd blocks: one chain of dependent FMAs
// (4-cycle latency) per row bounded a single-row matvec at ~4 cycles per block.
template <int NA>
struct Sums {
  __m256 acc[2][NA];
  float extra[NA];
  Sums() {
    for (int a = 0; a < NA; ++a) {
      acc[0][a] = acc[1][a] = _mm256_setzero_ps();
      extra[a] = 0.0f;
    }
  }
  void fma(int64_t i, int a, __m256 scale, __m256 p) {
    acc[i & 1][a] = _mm256_fmadd_ps(scale, p, acc[i & 1][a]);
  }
  void store(float* out, size_t out_stride) const {
    for (int a = 0; a < NA; ++a) out[a * out_stride] = hsum(_mm256_add_ps(acc[0][a], acc[1][a])) + extra[a];
  }
};

// The 32-element types: Unpack(block) → u8 quants; Offset: the value ggml subtracts (0 when
// the type has a min); HasMin: add m·s.
template <int NA, class Block, int Offset, bool HasMin, class Unpack>
void dot32(const uint8_t* w, const uint8_t* act, size_t act_stride, int64_t n_blocks,
           float* out, size_t out_stride, Unpack unpack) {
  const Block* wb = reinterpret_cast<const Block*>(w);
  Sums<NA> sums;
  float* extra = sums.extra;
  for (int64_t i = 0; i < n_blocks; ++i) {
    const Block& b = wb[i];
    const __m256i q = unpack(b);
    const float d = half(b.d);
    for (int a = 0; a < NA; ++a) {
      const ActQ8& y = reinterpret_cast<const ActQ8*>(act + a * act_stride)[i];
      const __m256 p = _mm256_cvtepi32_ps(dot_u8s8(q, load32(y.qs)));
      const float dd = d * y.d;
      sums.fma(i, a, _mm256_set1_ps(dd), p);
      if constexpr (Offset != 0) extra[a] -= dd * float(Offset * y.isum);
      if constexpr (HasMin) extra[a] += half(b.m) * y.s;
    }
  }
  sums.store(out, out_stride);
}

template <int NA>
void q4_0(const uint8_t* w, const uint8_t* act, size_t s, int64_t nb, float* out, size_t os) {
  dot32<NA, BlockQ4_0, 8, false>(w, act, s, nb, out, os,
                                 [](const BlockQ4_0& b) { return nibbles_32(b.qs); });
}
template <int NA>
void q4_1(const uint8_t* w, const uint8_t* act, size_t s, int64_t nb, float* out, size_t os) {
  dot32<NA, BlockQ4_1, 0, true>(w, act, s, nb, out, os,
                                [](const BlockQ4_1& b) { return nibbles_32(b.qs); });
}
template <int NA>
void q5_0(const uint8_t* w, const uint8_t* act, size_t s, int64_t nb, float* out, size_t os) {
  dot32<NA, BlockQ5_0, 16, false>(w, act, s, nb, out, os, [](const BlockQ5_0& b) {
    return _mm256_or_si256(nibbles_32(b.qs), high_bits_32(b.qh));
  });
}
template <int NA>
void q5_1(const uint8_t* w, const uint8_t* act, size_t s, int64_t nb, float* out, size_t os) {
  dot32<NA, BlockQ5_1, 0, true>(w, act, s, nb, out, os, [](const BlockQ5_1& b) {
    return _mm256_or_si256(nibbles_32(b.qs), high_bits_32(b.qh));
  });
}

template <int NA>
void q8_0(const uint8_t* w, const uint8_t* act, size_t act_stride, int64_t n_blocks, float* out,
          size_t out_stride) {
  const BlockQ8_0* wb = reinterpret_cast<const BlockQ8_0*>(w);
  Sums<NA> sums;
  for (int64_t i = 0; i < n_blocks; ++i) {
    const __m256i q = load32(wb[i].qs);
    const __m256i aq = _mm256_sign_epi8(q, q);  // |q| as u8 (−128 → 128, correct unsigned)
    const float d = half(wb[i].d);
    for (int a = 0; a < NA; ++a) {
      const ActQ8& y = reinterpret_cast<const ActQ8*>(act + a * act_stride)[i];
      const __m256i sy = _mm256_sign_epi8(load32(y.qs), q);  // y · sign(q)
      const __m256 p = _mm256_cvtepi32_ps(dot_u8s8(aq, sy));
      sums.fma(i, a, _mm256_set1_ps(d * y.d), p);
    }
  }
  sums.store(out, out_stride);
}

// Q4_K / Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins.
template <int NA, bool Five>
void q45_k(const uint8_t* w, const uint8_t* act, size_t act_stride, int64_t n_blocks,
           float* out, size_t out_stride) {
  constexpr size_t kBytes = Five ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  Sums<NA> sums;
  float* extra = sums.extra;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < n_blocks; ++i) {
    const uint8_t* blk = w + size_t(i) * kBytes;
    const BlockQ4_K& head = *reinterpret_cast<const BlockQ4_K*>(blk);  // d, dmin, scales
    const uint8_t* qs = Five ? reinterpret_cast<const BlockQ5_K*>(blk)->qs : head.qs;
    uint8_t sc[8], mn[8];
    k4_scale_min(head.scales, sc, mn);
    __m256i qh = _mm256_setzero_si256();
    if constexpr (Five) qh = load32(reinterpret_cast<const BlockQ5_K*>(blk)->qh);
    __m256i q[8];
    for (int j = 0; j < 4; ++j) {
      const __m256i raw = load32(qs + 32 * j);
      q[2 * j] = _mm256_and_si256(raw, low4);
      q[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
      if constexpr (Five) {
        const __m256i one = _mm256_set1_epi8(1);
        for (int t = 0; t < 2; ++t) {
          const __m256i bit = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + t), one);
          q[2 * j + t] = _mm256_or_si256(q[2 * j + t], _mm256_slli_epi16(bit, 4));
        }
      }
    }
    const float d = half(head.d), dmin = half(head.dmin);
    for (int a = 0; a < NA; ++a) {
      const ActQ8K& y = reinterpret_cast<const ActQ8K*>(act + a * act_stride)[i];
      __m256i sumi = _mm256_setzero_si256();
      int32_t summ = 0;
      for (int j = 0; j < 8; ++j) {
        const __m256i p16 = _mm256_maddubs_epi16(q[j], load32(y.qs + 32 * j));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, _mm256_set1_epi16(sc[j])));
        summ += mn[j] * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
      }
      sums.fma(i, a, _mm256_set1_ps(y.d * d), _mm256_cvtepi32_ps(sumi));
      extra[a] -= y.d * dmin * float(summ);
    }
  }
  sums.store(out, out_stride);
}

template <int NA>
void q4_k(const uint8_t* w, const uint8_t* act, size_t s, int64_t nb, float* out, size_t os) {
  q45_k<NA, false>(w, act, s, nb, out, os);
}
template <int NA>
void q5_k(const uint8_t* w, const uint8_t* act, size_t s, int64_t nb, float* out, size_t os) {
  q45_k<NA, true>(w, act, s, nb, out, os);
}

template <int NA>
void q6_k(const uint8_t* w, const uint8_t* act, size_t act_stride, int64_t n_blocks, float* out,
          size_t out_stride) {
  const BlockQ6_K* wb = reinterpret_cast<const BlockQ6_K*>(w);
  Sums<NA> sums;
  float* extra = sums.extra;
  const __m256i low4 = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(3);
  for (int64_t i = 0; i < n_blocks; ++i) {
    const BlockQ6_K& b = wb[i];
    __m256i q[8];  // group 4h + g: elements 128h + 32g .. +32, unsigned 0..63
    __m256i scale[8];
    for (int h = 0; h < 2; ++h) {
      const __m256i A = load32(b.ql + 64 * h), B = load32(b.ql + 64 * h + 32);
      const __m256i H = load32(b.qh + 32 * h);
      const __m256i lows[4] = {_mm256_and_si256(A, low4), _mm256_and_si256(B, low4),
                               _mm256_and_si256(_mm256_srli_epi16(A, 4), low4),
                               _mm256_and_si256(_mm256_srli_epi16(B, 4), low4)};
      for (int g = 0; g < 4; ++g) {
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(H, 2 * g), two);
        q[4 * h + g] = _mm256_or_si256(lows[g], _mm256_slli_epi16(hi, 4));
        const int k = 8 * h + 2 * g;
        scale[4 * h + g] = _mm256_set_m128i(_mm_set1_epi16(b.scales[k + 1]),
                                            _mm_set1_epi16(b.scales[k]));
      }
    }
    const float d = half(b.d);
    for (int a = 0; a < NA; ++a) {
      const ActQ8K& y = reinterpret_cast<const ActQ8K*>(act + a * act_stride)[i];
      __m256i sumi = _mm256_setzero_si256();
      for (int j = 0; j < 8; ++j) {
        const __m256i p16 = _mm256_maddubs_epi16(q[j], load32(y.qs + 32 * j));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, scale[j]));
      }
      int32_t off = 0;
      for (int k = 0; k < 16; ++k) off += b.scales[k] * y.bsums[k];
      const float dd = y.d * d;
      sums.fma(i, a, _mm256_set1_ps(dd), _mm256_cvtepi32_ps(sumi));
      extra[a] -= dd * float(32 * off);
    }
  }
  sums.store(out, out_stride);
}

// Float weights: 8 elements per step, scalar tail.
template <class Elem>
inline __m256 load8(const Elem* p);
template <>
inline __m256 load8<float>(const float* p) { return _mm256_loadu_ps(p); }
template <>
inline __m256 load8<uint16_t>(const uint16_t* p) {  // float16
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
struct Bf16 { uint16_t v; };
template <>
inline __m256 load8<Bf16>(const Bf16* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
inline float load1(float v) { return v; }
inline float load1(uint16_t v) { return half(v); }
inline float load1(Bf16 v) { return bf16_to_f32(v.v); }

template <int NA, class Elem>
void dot_float(const uint8_t* w, const uint8_t* act, size_t act_stride, int64_t n, float* out,
               size_t out_stride) {
  const Elem* wr = reinterpret_cast<const Elem*>(w);
  Sums<NA> sums;
  float* extra = sums.extra;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 wv = load8<Elem>(wr + i);
    for (int a = 0; a < NA; ++a) {
      const float* x = reinterpret_cast<const float*>(act + a * act_stride);
      sums.fma(i >> 3, a, wv, _mm256_loadu_ps(x + i));
    }
  }
  for (; i < n; ++i) {
    const float wv = load1(wr[i]);
    for (int a = 0; a < NA; ++a) extra[a] += wv * reinterpret_cast<const float*>(act + a * act_stride)[i];
  }
  sums.store(out, out_stride);
}
template <int NA>
void f32(const uint8_t* w, const uint8_t* act, size_t s, int64_t n, float* out, size_t os) {
  dot_float<NA, float>(w, act, s, n, out, os);
}
template <int NA>
void f16(const uint8_t* w, const uint8_t* act, size_t s, int64_t n, float* out, size_t os) {
  dot_float<NA, uint16_t>(w, act, s, n, out, os);
}
template <int NA>
void bf16(const uint8_t* w, const uint8_t* act, size_t s, int64_t n, float* out, size_t os) {
  dot_float<NA, Bf16>(w, act, s, n, out, os);
}

// One DotFn per type: dispatch n_act (1 .. kMaxAct) to the unrolled template.

#define LEXGUIDE_AVX2_DOT(NAME)                                                               \
  void NAME##_dot(const uint8_t* w, const uint8_t* act, size_t s, int n_act, int64_t nb,     \
                  float* out, size_t os) {                                                   \
    switch (n_act) {                                                                         \
      case 1: return NAME<1>(w, act, s, nb, out, os);                                        \
      case 2: return NAME<2>(w, act, s, nb, out, os);                                        \
      case 3: return NAME<3>(w, act, s, nb, out, os);                                        \
      default: return NAME<4>(w, act, s, nb, out, os);                                       \
    }                                                                                        \
  }
LEXGUIDE_AVX2_DOT(q4_0)
LEXGUIDE_AVX2_DOT(q4_1)
LEXGUIDE_AVX2_DOT(q5_0)
LEXGUIDE_AVX2_DOT(q5_1)
LEXGUIDE_AVX2_DOT(q8_0)
LEXGUIDE_AVX2_DOT(q4_k)
LEXGUIDE_AVX2_DOT(q5_k)
LEXGUIDE_AVX2_DOT(q6_k)
LEXGUIDE_AVX2_DOT(f32)
LEXGUIDE_AVX2_DOT(f16)
LEXGUIDE_AVX2_DOT(bf16)
#undef LEXGUIDE_AVX2_DOT

static_assert(kMaxAct == 4, "the dispatch above unrolls up to 4 activation rows");

}  // namespace

DotFn avx2_dot(GgmlType type) {
  switch (type) {
    case GgmlType::F32: return f32_dot;
    case GgmlType::F16: return f16_dot;
    case GgmlType::BF16: return bf16_dot;
    case GgmlType::Q4_0: return q4_0_dot;
    case GgmlType::Q4_1: return q4_1_dot;
    case GgmlType::Q5_0: return q5_0_dot;
    case GgmlType::Q5_1: return q5_1_dot;
    case GgmlType::Q8_0: return q8_0_dot;
    case GgmlType::Q4_K: return q4_k_dot;
    case GgmlType::Q5_K: return q5_k_dot;
    case GgmlType::Q6_K: return q6_k_dot;
    default: return nullptr;
  }
}

}  // namespace lexguide::kernels
