#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LEXGUIDE_ATTN_AVX2 1
#endif

#include "kernels/blocks.h"
#include "kernels/dot.h"
#include "kernels/quantize_act.h"
#include "common/thread_pool.h"
#include "kernels/vec.h"

namespace lexguide::kernels {

namespace {

// Rotate the pairs of one head by the angles of one position (cos, sin: n_rot / 2 each).
inline void rope_head(float* x, const float* cos, const float* sin, int n_rot, bool neox) {
  const int half = n_rot / 2;
  for (int i = 0; i < half; ++i) {
    const int i0 = neox ? i : 2 * i;
    const int i1 = neox ? i + half : 2 * i + 1;
    const float a = x[i0], b = x[i1], c = cos[i], s = sin[i];
    x[i0] = a * c + b * (-s);
    x[i1] = b * c + a * s;
  }
}

// dst ← src rounded to float16 (n elements)
inline void to_f16_values_scalar(const float* src, float* dst, int n) {
  for (int i = 0; i < n; ++i) dst[i] = round_f16(src[i]);
}

#ifdef LEXGUIDE_ATTN_AVX2
// The same with F16C: its conversion rounds to nearest even as round_f16 does.
__attribute__((target("avx2,f16c"))) void to_f16_values_avx2(const float* src, float* dst, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  to_f16_values_scalar(src + i, dst + i, n - i);
}
#endif

inline void to_f16_values(const float* src, float* dst, int n) {
#ifdef LEXGUIDE_ATTN_AVX2
  const bool avx2 = isa() >= Isa::Avx2;
  if (avx2) return to_f16_values_avx2(src, dst, n);
#endif
  to_f16_values_scalar(src, dst, n);
}

// (v0 + v4) + (v2 + v6) + ((v1 + v5) + (v3 + v7)): the horizontal sum of an 8-lane register
// that ggml's softmax and llamafile's tinyBLAS use
inline float hsum8(const float* v) {
  const float a0 = v[0] + v[4], a1 = v[1] + v[5], a2 = v[2] + v[6], a3 = v[3] + v[7];
  return (a0 + a2) + (a1 + a3);
}

constexpr int kQ8Bytes = int(sizeof(BlockQ8_0));  // 34: float16 d, 32 int8

// Element i of a cache row as float: what every product reads.
template <CacheType C>
inline float load1(const uint8_t* row, int i);
template <>
inline float load1<CacheType::F32>(const uint8_t* row, int i) {
  float f;
  std::memcpy(&f, row + size_t(i) * 4, 4);
  return f;
}
template <>
inline float load1<CacheType::F16>(const uint8_t* row, int i) {
  f16_bits h;
  std::memcpy(&h, row + size_t(i) * 2, 2);
  return f16_to_f32(h);
}
template <>
inline float load1<CacheType::Q8_0>(const uint8_t* row, int i) {
  const uint8_t* b = row + size_t(i / kQK) * kQ8Bytes;
  f16_bits d;
  std::memcpy(&d, b, 2);
  return f16_to_f32(d) * float(int8_t(b[2 + i % kQK]));
}

// One row of hd elements into the cache: F32 copied, F16 rounded to nearest even, Q8_0 as
// ggml's x86 quantize_row_q8_0 (quantize_row_q8: the same d and q).
inline void store_row_scalar(CacheType c, const float* src, uint8_t* dst, int hd) {
  if (c == CacheType::F32) {
    std::memcpy(dst, src, size_t(hd) * 4);
  } else if (c == CacheType::F16) {
    for (int i = 0; i < hd; ++i) {
      const f16_bits h = f32_to_f16(src[i]);
      std::memcpy(dst + size_t(i) * 2, &h, 2);
    }
  } else {
    ActQ8 blk;
    for (int b = 0; b < hd / kQK; ++b) {
      quantize_row_q8(src + b * kQK, &blk, kQK);
      const f16_bits d = f32_to_f16(blk.d);  // blk.d is already float16-valued
      uint8_t* o = dst + size_t(b) * kQ8Bytes;
      std::memcpy(o, &d, 2);
      std::memcpy(o + 2, blk.qs, kQK);
    }
  }
}

#ifdef LEXGUIDE_ATTN_AVX2
// F16C's conversion rounds to nearest even as f32_to_f16 does, so the stored bits are equal.
__attribute__((target("avx2,f16c"))) void store_row_avx2(CacheType c, const float* src,
                                                          uint8_t* dst, int hd) {
  if (c != CacheType::F16) return store_row_scalar(c, src, dst, hd);
  int i = 0;
  for (; i + 8 <= hd; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + size_t(i) * 2), h);
  }
  for (; i < hd; ++i) {
    const f16_bits h = f32_to_f16(src[i]);
    std::memcpy(dst + size_t(i) * 2, &h, 2);
  }
}
#endif

inline void store_row(CacheType c, const float* src, uint8_t* dst, int hd) {
#ifdef LEXGUIDE_ATTN_AVX2
  const bool avx2 = isa() >= Isa::Avx2;
  if (avx2) return store_row_avx2(c, src, dst, hd);
#endif
  store_row_scalar(c, src, dst, hd);
}

// q·k the way llama.cpp's CPU backend multiplies a float16 matrix (llamafile's tinyBLAS): one
// fused multiply-add per element into 8 lanes (element i into lane i mod 8), then hsum8; the
// same order for the other cache types.
template <CacheType C>
inline float dot_scalar(const float* q, const uint8_t* k, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < n; ++i) acc[i & 7] = std::fma(q[i], load1<C>(k, i), acc[i & 7]);
  return hsum8(acc);
}

// o (hd) ← Σ_j p[j] · V[start + j] like the same product with the transposed V cache: for
// each output element the positions' terms go into 8 lanes by cell index (start + j) mod 8.
template <CacheType C>
inline void weighted_sum_scalar(const float* p, const uint8_t* vals, size_t rb, int64_t start,
                                int64_t n, int hd, float* o, std::vector<float>& lanes) {
  for (int64_t j = 0; j < n; ++j) {
    float* acc = lanes.data() + size_t((start + j) & 7) * size_t(hd);
    const uint8_t* vr = vals + size_t(start + j) * rb;
    const float pj = p[j];
    for (int d = 0; d < hd; ++d) acc[d] = std::fma(pj, load1<C>(vr, d), acc[d]);
  }
  for (int d = 0; d < hd; ++d) {
    float v[8];
    for (int l = 0; l < 8; ++l) v[l] = lanes[size_t(l) * size_t(hd) + size_t(d)];
    o[d] = hsum8(v);
  }
}

#ifdef LEXGUIDE_ATTN_AVX2
#define LEXGUIDE_ATTN_TARGET __attribute__((target("avx2,fma,f16c")))
// Elements i .. i + 7 of a cache row (i a multiple of 8), the same floats as load1.
template <CacheType C>
LEXGUIDE_ATTN_TARGET inline __m256 load8(const uint8_t* row, int i);
template <>
LEXGUIDE_ATTN_TARGET inline __m256 load8<CacheType::F32>(const uint8_t* row, int i) {
  return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
}
template <>
LEXGUIDE_ATTN_TARGET inline __m256 load8<CacheType::F16>(const uint8_t* row, int i) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + size_t(i) * 2)));
}
template <>
LEXGUIDE_ATTN_TARGET inline __m256 load8<CacheType::Q8_0>(const uint8_t* row, int i) {
  const uint8_t* b = row + size_t(i / kQK) * kQ8Bytes;
  f16_bits d;
  std::memcpy(&d, b, 2);
  const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + i % kQK));
  return _mm256_mul_ps(_mm256_set1_ps(f16_to_f32(d)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
}

#endif

// ggml_vec_soft_max_f32 on the scores of cells start .. start + n − 1: e = expf(s − top) by
// ggml's SIMD expf, the sum in double over 8-cell partial sums (cells counted from 0, so
// masked cells before start are zeros), p = e · (1/sum), rounded to float16 when `half`.
void softmax_scalar(float* sc, int64_t start, int64_t n, float top, bool half) {
  double sum = 0.0;
  for (int64_t c0 = start & ~int64_t(7); c0 < start + n; c0 += 8) {
    float v[8];
    for (int l = 0; l < 8; ++l) {
      const int64_t j = c0 + l - start;
      v[l] = j >= 0 && j < n ? ggml_expf(sc[j] - top) : 0.0f;
      if (j >= 0 && j < n) sc[j] = v[l];
    }
    sum += double(hsum8(v));
  }
  const float inv = float(1.0 / sum);
  for (int64_t j = 0; j < n; ++j) sc[j] = half ? round_f16(sc[j] * inv) : sc[j] * inv;
}

#ifdef LEXGUIDE_ATTN_AVX2
// (v0 + v4) + (v2 + v6) + ((v1 + v5) + (v3 + v7)) of one register: hsum8's additions
LEXGUIDE_ATTN_TARGET inline float hsum8_avx2(__m256 v) {
  const __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 y = _mm_add_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_add_ss(y, _mm_movehdup_ps(y)));
}

// hsum8 of eight registers: lane k of the result is hsum8(x[k]) — the lane sums (l + 4), then
// (0+4)+(2+6) and (1+5)+(3+7), then their sum, each an addition hsum8 makes.
LEXGUIDE_ATTN_TARGET inline __m256 hsum8x8(const __m256* x) {
  // after the three steps slot k holds input [0,2,4,6,1,3,5,7][k]: feed the inputs so permuted
  const __m256 a0 = x[0], a2 = x[1], a4 = x[2], a6 = x[3], a1 = x[4], a3 = x[5], a5 = x[6], a7 = x[7];
  const __m256 b01 = _mm256_add_ps(_mm256_permute2f128_ps(a0, a1, 0x20), _mm256_permute2f128_ps(a0, a1, 0x31));
  const __m256 b23 = _mm256_add_ps(_mm256_permute2f128_ps(a2, a3, 0x20), _mm256_permute2f128_ps(a2, a3, 0x31));
  const __m256 b45 = _mm256_add_ps(_mm256_permute2f128_ps(a4, a5, 0x20), _mm256_permute2f128_ps(a4, a5, 0x31));
  const __m256 b67 = _mm256_add_ps(_mm256_permute2f128_ps(a6, a7, 0x20), _mm256_permute2f128_ps(a6, a7, 0x31));
  const __m256 c0 = _mm256_add_ps(_mm256_shuffle_ps(b01, b23, 0x44), _mm256_shuffle_ps(b01, b23, 0xEE));
  const __m256 c1 = _mm256_add_ps(_mm256_shuffle_ps(b45, b67, 0x44), _mm256_shuffle_ps(b45, b67, 0xEE));
  return _mm256_add_ps(_mm256_shuffle_ps(c0, c1, 0x88), _mm256_shuffle_ps(c0, c1, 0xDD));
}

// softmax_scalar in AVX2 registers: the same expf (expf8 where a whole group of 8 is in its
// range, else ggml_expf per lane), the same group sums added in the same order.
LEXGUIDE_ATTN_TARGET void softmax_avx2(float* sc, int64_t start, int64_t n, float top, bool half) {
  const __m256 topv = _mm256_set1_ps(top), lim = _mm256_set1_ps(-87.0f);
  // e = exp(sc − top) of the group of cells whose first has index j0 (relative to start; cells
  // outside 0 .. n − 1 are zeros), written back into sc
  auto group = [&](int64_t j0) LEXGUIDE_ATTN_TARGET {
    if (j0 >= 0 && j0 + 8 <= n) {
      const __m256 v = _mm256_sub_ps(_mm256_loadu_ps(sc + j0), topv);
      __m256 e;
      if (_mm256_movemask_ps(_mm256_cmp_ps(v, lim, _CMP_GE_OQ)) == 0xff) {
        e = expf8(v);
      } else {
        float x[8];
        _mm256_storeu_ps(x, v);
        for (int l = 0; l < 8; ++l) x[l] = ggml_expf(x[l]);
        e = _mm256_loadu_ps(x);
      }
      _mm256_storeu_ps(sc + j0, e);
      return e;
    }
    float v[8];
    bool fast = true;
    for (int l = 0; l < 8; ++l) {
      const int64_t j = j0 + l;
      v[l] = j >= 0 && j < n ? sc[j] - top : 0.0f;
      fast = fast && v[l] >= -87.0f;
    }
    if (fast) {
      _mm256_storeu_ps(v, expf8(_mm256_loadu_ps(v)));
    } else {
      for (int l = 0; l < 8; ++l) v[l] = ggml_expf(v[l]);
    }
    for (int l = 0; l < 8; ++l) {
      const int64_t j = j0 + l;
      if (j < 0 || j >= n) {
        v[l] = 0.0f;
      } else {
        sc[j] = v[l];
      }
    }
    return _mm256_loadu_ps(v);
  };
  double sum = 0.0;
  int64_t j0 = -(start & 7);
  for (; j0 + 64 <= n; j0 += 64) {  // eight groups, their sums by hsum8x8
    __m256 e[8];
    for (int g = 0; g < 8; ++g) e[g] = group(j0 + 8 * g);
    float s[8];
    _mm256_storeu_ps(s, hsum8x8(e));
    for (int g = 0; g < 8; ++g) sum += double(s[g]);
  }
  for (; j0 < n; j0 += 8) sum += double(hsum8_avx2(group(j0)));
  const float invs = float(1.0 / sum);
  const __m256 inv = _mm256_set1_ps(invs);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 p = _mm256_mul_ps(_mm256_loadu_ps(sc + j), inv);
    if (half) {
      const __m128i h = _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm256_storeu_ps(sc + j, _mm256_cvtph_ps(h));
    } else {
      _mm256_storeu_ps(sc + j, p);
    }
  }
  for (; j < n; ++j) {
    const float p = sc[j] * invs;
    sc[j] = half ? round_f16(p) : p;
  }
}

// sc[j] ← sc[j]·scale for j < n; returns their maximum (NaNs left out, as std::max leaves them)
LEXGUIDE_ATTN_TARGET float scale_max_avx2(float* sc, int64_t n, float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  __m256 m = _mm256_set1_ps(-INFINITY);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(sc + j), s);
    _mm256_storeu_ps(sc + j, x);
    m = _mm256_max_ps(x, m);  // the second operand when x is NaN
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, m);
  float top = -INFINITY;
  for (int l = 0; l < 8; ++l) top = std::max(top, lanes[l]);
  for (; j < n; ++j) {
    sc[j] *= scale;
    top = std::max(top, sc[j]);
  }
  return top;
}
#endif

void softmax(float* sc, int64_t start, int64_t n, float top, bool half) {
#ifdef LEXGUIDE_ATTN_AVX2
  const bool avx2 = isa() >= Isa::Avx2;
  if (avx2) return softmax_avx2(sc, start, n, top, half);
#endif
  softmax_scalar(sc, start, n, top, half);
}

// sc[j] = q·K[j] for the n keys at keys (rows of rb bytes)
template <CacheType C>
inline void dots(const float* q, const uint8_t* keys, size_t rb, int64_t n, int hd, float* sc) {
  for (int64_t j = 0; j < n; ++j) sc[j] = dot_scalar<C>(q, keys + size_t(j) * rb, hd);
}

template <CacheType C>
inline void weighted_sum(const float* p, const uint8_t* vals, size_t rb, int64_t start, int64_t n,
                         int hd, float* o) {
  thread_local std::vector<float> lanes;
  lanes.assign(size_t(8) * size_t(hd), 0.0f);
  weighted_sum_scalar<C>(p, vals, rb, start, n, hd, o, lanes);
}

// Rows t ≡ j (mod n_split) of sequence s for query head h: softmax(q·Kᵀ·scale)·V over each
// row's visible positions, into out. With a float16 cache q and the softmax weights are
// rounded to float16 (ggml's operands of a product with a float16 matrix).
template <CacheType C>
void attend_rows(const AttnArgs& a, const AttnSeq& s, int h, int64_t j, int64_t n_split) {
  const int hd = a.hd;
  const int64_t width = int64_t(a.n_q + 2 * a.n_kv) * hd;
  const int kv = h / (a.n_q / a.n_kv);
  const size_t rb = cache_row_bytes(C, hd);
  const uint8_t* keys = s.k + size_t(kv) * size_t(s.n_ctx) * rb;
  const uint8_t* vals = s.v + size_t(kv) * size_t(s.n_ctx) * rb;
  constexpr bool half = C == CacheType::F16;
  thread_local std::vector<float> scores, qh;
  qh.resize(size_t(hd));
  for (int64_t t = j; t < s.n_rows; t += n_split) {
    const int64_t p = s.pos0 + t;
    const int64_t start = a.window ? std::max<int64_t>(0, p - a.window + 1) : 0;
    const int64_t n = p + 1 - start;
    scores.resize(size_t(n));
    const float* qrow = a.qkv + (s.row0 + t) * width + int64_t(h) * hd;
    if (half) {
      to_f16_values(qrow, qh.data(), hd);
    } else {
      std::memcpy(qh.data(), qrow, size_t(hd) * 4);
    }
    float top = -INFINITY;
    dots<C>(qh.data(), keys + size_t(start) * rb, rb, n, hd, scores.data());
    for (int64_t i = 0; i < n; ++i) {
      const float sc = scores[size_t(i)] * a.scale;
      scores[size_t(i)] = sc;
      top = std::max(top, sc);
    }
    softmax(scores.data(), start, n, top, half);
    float* o = a.out + (s.row0 + t) * int64_t(a.n_q) * hd + int64_t(h) * hd;
    weighted_sum<C>(scores.data(), vals, rb, start, n, hd, o);
  }
}


#ifdef LEXGUIDE_ATTN_AVX2
// ---- The tiled path (AVX2) ------------------------------------------------------------------
// One tile: rows r0 .. r1 − 1 of a sequence × the G query heads that share KV head kv (GQA),
// P = rows·G (row, head) pairs, pair t = r·G + g. Every key and value row the tile reads is
// converted once from the cache into float scratch (the same floats load8/load1 give) and used
// for all P pairs. Each output keeps the reference's summation order exactly:
//   - a score q·k is one 8-lane FMA chain over the head, element i in lane i mod 8, then hsum8
//     (hsum8x8 adds eight registers' lanes at once, with the same additions);
//   - the product with V keeps, per pair, output element and lane l, one FMA chain over the
//     cells c ≡ l (mod 8) in increasing order (the state, L, lives in memory between blocks of
//     cells), then the lanes are added as hsum8 does.
// Scores of cells a row does not see are computed (the tile's rows share the keys they read)
// but never used; the product with V touches only the cells each row sees.

// q·k of two float rows of hdp elements (hdp a multiple of 8; zero padding adds nothing)
LEXGUIDE_ATTN_TARGET inline float dot_f32_avx2(const float* q, const float* k, int hdp) {
  __m256 acc = _mm256_setzero_ps();
  for (int i = 0; i < hdp; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), acc);
  float lanes[8];
  _mm256_storeu_ps(lanes, acc);
  return hsum8(lanes);
}

// Rows j < n of the cache (rb bytes apart) as floats, hdp apart, the padding zero.
template <CacheType C>
LEXGUIDE_ATTN_TARGET void convert_rows_avx2(const uint8_t* rows, size_t rb, int64_t n, int hd,
                                            int hdp, float* dst) {
  const int hd8 = hd & ~7;
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* r = rows + size_t(j) * rb;
    float* o = dst + size_t(j) * size_t(hdp);
    int i = 0;
    for (; i < hd8; i += 8) _mm256_storeu_ps(o + i, load8<C>(r, i));
    for (; i < hd; ++i) o[i] = load1<C>(r, i);
    for (; i < hdp; ++i) o[i] = 0.0f;
  }
}

// S[t·ld + j] = q_t·k_j for the np pairs' q rows (qt, hdp apart) and nk keys (kf, hdp apart):
// two pairs × four keys in registers, their eight sums added by hsum8x8.
LEXGUIDE_ATTN_TARGET void qk_avx2(const float* qt, int np, const float* kf, int64_t nk, int hdp,
                                  float* S, size_t ld) {
  const size_t H = size_t(hdp);
  int t = 0;
  for (; t + 2 <= np; t += 2) {
    const float* q0 = qt + size_t(t) * H;
    const float* q1 = q0 + H;
    float* s0 = S + size_t(t) * ld;
    float* s1 = s0 + ld;
    int64_t j = 0;
    for (; j + 4 <= nk; j += 4) {
      const float* k0 = kf + size_t(j) * H;
      __m256 acc[8];
      for (int u = 0; u < 8; ++u) acc[u] = _mm256_setzero_ps();
      for (int i = 0; i < hdp; i += 8) {
        const __m256 x0 = _mm256_loadu_ps(q0 + i), x1 = _mm256_loadu_ps(q1 + i);
        const __m256 y0 = _mm256_loadu_ps(k0 + i), y1 = _mm256_loadu_ps(k0 + H + i);
        const __m256 y2 = _mm256_loadu_ps(k0 + 2 * H + i), y3 = _mm256_loadu_ps(k0 + 3 * H + i);
        acc[0] = _mm256_fmadd_ps(x0, y0, acc[0]);
        acc[1] = _mm256_fmadd_ps(x0, y1, acc[1]);
        acc[2] = _mm256_fmadd_ps(x0, y2, acc[2]);
        acc[3] = _mm256_fmadd_ps(x0, y3, acc[3]);
        acc[4] = _mm256_fmadd_ps(x1, y0, acc[4]);
        acc[5] = _mm256_fmadd_ps(x1, y1, acc[5]);
        acc[6] = _mm256_fmadd_ps(x1, y2, acc[6]);
        acc[7] = _mm256_fmadd_ps(x1, y3, acc[7]);
      }
      const __m256 r = hsum8x8(acc);
      _mm_storeu_ps(s0 + j, _mm256_castps256_ps128(r));
      _mm_storeu_ps(s1 + j, _mm256_extractf128_ps(r, 1));
    }
    for (; j < nk; ++j) {
      s0[j] = dot_f32_avx2(q0, kf + size_t(j) * H, hdp);
      s1[j] = dot_f32_avx2(q1, kf + size_t(j) * H, hdp);
    }
  }
  for (; t < np; ++t) {  // an odd last pair: eight keys at a time
    const float* q0 = qt + size_t(t) * H;
    float* s0 = S + size_t(t) * ld;
    int64_t j = 0;
    for (; j + 8 <= nk; j += 8) {
      const float* k0 = kf + size_t(j) * H;
      __m256 acc[8];
      for (int u = 0; u < 8; ++u) acc[u] = _mm256_setzero_ps();
      for (int i = 0; i < hdp; i += 8) {
        const __m256 x0 = _mm256_loadu_ps(q0 + i);
        for (int u = 0; u < 8; ++u) acc[u] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(k0 + u * H + i), acc[u]);
      }
      _mm256_storeu_ps(s0 + j, hsum8x8(acc));
    }
    for (; j < nk; ++j) s0[j] = dot_f32_avx2(q0, kf + size_t(j) * H, hdp);
  }
}

// The product with V over cells c0 .. c1 − 1 that all PB pairs see: for each pair t, lane l
// and element d, L[t][l][d] continues its chain with p_t[c]·V[c][d] for c ≡ l (mod 8) in
// order. W: the first pair's weights (pairs ld apart; cell c at W[c − w0]); vf: the converted
// rows of cells v0 .. (hdp apart); L: the first pair's state (pairs 8·hdp apart).
template <int PB>
LEXGUIDE_ATTN_TARGET void pv_block_avx2(const float* W, size_t ld, int64_t w0, const float* vf,
                                        int64_t v0, int64_t c0, int64_t c1, int hdp, float* L) {
  const size_t H = size_t(hdp);
  int d = 0;
  for (; d + 16 <= hdp; d += 16) {
    for (int l = 0; l < 8; ++l) {
      int64_t c = c0 + ((int64_t(l) - c0) & 7);  // the first cell ≥ c0 in lane l
      if (c >= c1) continue;
      __m256 acc[PB][2];
      for (int t = 0; t < PB; ++t) {
        float* st = L + (size_t(t) * 8 + size_t(l)) * H + size_t(d);
        acc[t][0] = _mm256_loadu_ps(st);
        acc[t][1] = _mm256_loadu_ps(st + 8);
      }
      for (; c < c1; c += 8) {
        const float* v = vf + size_t(c - v0) * H + size_t(d);
        const __m256 x0 = _mm256_loadu_ps(v), x1 = _mm256_loadu_ps(v + 8);
        for (int t = 0; t < PB; ++t) {
          const __m256 w = _mm256_broadcast_ss(W + size_t(t) * ld + size_t(c - w0));
          acc[t][0] = _mm256_fmadd_ps(w, x0, acc[t][0]);
          acc[t][1] = _mm256_fmadd_ps(w, x1, acc[t][1]);
        }
      }
      for (int t = 0; t < PB; ++t) {
        float* st = L + (size_t(t) * 8 + size_t(l)) * H + size_t(d);
        _mm256_storeu_ps(st, acc[t][0]);
        _mm256_storeu_ps(st + 8, acc[t][1]);
      }
    }
  }
  if (d == hdp) return;
  for (int l = 0; l < 8; ++l) {  // the last 8 elements
    int64_t c = c0 + ((int64_t(l) - c0) & 7);
    if (c >= c1) continue;
    __m256 acc[PB];
    for (int t = 0; t < PB; ++t) acc[t] = _mm256_loadu_ps(L + (size_t(t) * 8 + size_t(l)) * H + size_t(d));
    for (; c < c1; c += 8) {
      const __m256 x0 = _mm256_loadu_ps(vf + size_t(c - v0) * H + size_t(d));
      for (int t = 0; t < PB; ++t) {
        acc[t] = _mm256_fmadd_ps(_mm256_broadcast_ss(W + size_t(t) * ld + size_t(c - w0)), x0, acc[t]);
      }
    }
    for (int t = 0; t < PB; ++t) _mm256_storeu_ps(L + (size_t(t) * 8 + size_t(l)) * H + size_t(d), acc[t]);
  }
}

// The same for one cell c (row vrow of the cache) and pairs ta .. tb − 1 (a tile's edge cells,
// which only some of its rows see); W and L as above, from pair 0.
template <CacheType C>
LEXGUIDE_ATTN_TARGET void pv_cell_avx2(const float* W, size_t ld, int64_t w0, const uint8_t* vrow,
                                       int64_t c, int ta, int tb, int hd, int hdp, float* L) {
  const int hd8 = hd & ~7;
  for (int t = ta; t < tb; ++t) {
    const float w = W[size_t(t) * ld + size_t(c - w0)];
    float* acc = L + (size_t(t) * 8 + size_t(c & 7)) * size_t(hdp);
    const __m256 wv = _mm256_set1_ps(w);
    int d = 0;
    for (; d < hd8; d += 8) _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(wv, load8<C>(vrow, d), _mm256_loadu_ps(acc + d)));
    for (; d < hd; ++d) acc[d] = std::fma(w, load1<C>(vrow, d), acc[d]);
  }
}

// One tile (see above): rows r0 .. r1 − 1 of sequence s × the query heads of KV head kv.
template <CacheType C>
LEXGUIDE_ATTN_TARGET void attend_tile_avx2(const AttnArgs& a, const AttnSeq& s, int kv,
                                           int64_t r0, int64_t r1) {
  const int hd = a.hd, hdp = (hd + 7) & ~7, G = a.n_q / a.n_kv;
  const size_t H = size_t(hdp);
  const int64_t width = int64_t(a.n_q + 2 * a.n_kv) * hd;
  const size_t rb = cache_row_bytes(C, hd);
  const uint8_t* keys = s.k + size_t(kv) * size_t(s.n_ctx) * rb;
  const uint8_t* vals = s.v + size_t(kv) * size_t(s.n_ctx) * rb;
  constexpr bool half = C == CacheType::F16;
  const int nr = int(r1 - r0), P = nr * G;
  auto first = [&](int64_t p) { return a.window ? std::max<int64_t>(0, p - a.window + 1) : 0; };
  const int64_t pa = s.pos0 + r0, pz = s.pos0 + r1 - 1;  // the first and the last row's position
  const int64_t u0 = first(pa), u1 = pz + 1;              // the cells some row sees
  const size_t ld = size_t(u1 - u0);
  thread_local std::vector<float> qt, S, blk, L;

  // q of every pair (rounded to float16 with a float16 cache), zero-padded to hdp
  qt.assign(size_t(P) * H, 0.0f);
  for (int t = 0; t < P; ++t) {
    const int64_t row = s.row0 + r0 + t / G;
    const float* qrow = a.qkv + row * width + int64_t(kv * G + t % G) * hd;
    if (half) {
      to_f16_values_avx2(qrow, qt.data() + size_t(t) * H, hd);
    } else {
      std::memcpy(qt.data() + size_t(t) * H, qrow, size_t(hd) * 4);
    }
  }

  // 1. scores of every pair over the cells u0 .. u1 − 1, keys converted in blocks of 64
  constexpr int64_t kKeyBlock = 64;
  const int64_t vblock = std::max<int64_t>(32, std::min<int64_t>(256, (8192 / hdp) & ~int64_t(7)));
  S.resize(size_t(P) * ld);
  blk.resize(size_t(std::max(kKeyBlock, vblock)) * H);
  for (int64_t c = u0; c < u1; c += kKeyBlock) {
    const int64_t nb = std::min(kKeyBlock, u1 - c);
    convert_rows_avx2<C>(keys + size_t(c) * rb, rb, nb, hd, hdp, blk.data());
    qk_avx2(qt.data(), P, blk.data(), nb, hdp, S.data() + size_t(c - u0), ld);
  }

  // 2. each pair's softmax over the cells its row sees
  for (int t = 0; t < P; ++t) {
    const int64_t p = pa + t / G, start = first(p), n = p + 1 - start;
    float* sc = S.data() + size_t(t) * ld + size_t(start - u0);
    softmax_avx2(sc, start, n, scale_max_avx2(sc, n, a.scale), half);
  }

  // 3. the products with V: cells every row sees (cs .. ce) in blocks for all pairs; before
  // and after them (cells only some rows see) one cell at a time for the pairs that see it
  L.assign(size_t(P) * 8 * H, 0.0f);
  const float* W = S.data();
  auto edge = [&](int64_t c) {
    const int64_t lo = std::max<int64_t>(0, c - pa);  // rows with c ≤ p
    const int64_t hi = a.window ? std::min<int64_t>(nr - 1, c + a.window - 1 - pa) : nr - 1;
    if (lo > hi) return;
    pv_cell_avx2<C>(W, ld, u0, vals + size_t(c) * rb, c, int(lo) * G, int(hi + 1) * G, hd, hdp,
                    L.data());
  };
  const int64_t cs = first(pz), ce = pa;
  if (cs <= ce) {
    for (int64_t c = u0; c < cs; ++c) edge(c);
    for (int64_t c = cs; c <= ce; c += vblock) {
      const int64_t nb = std::min(vblock, ce + 1 - c);
      convert_rows_avx2<C>(vals + size_t(c) * rb, rb, nb, hd, hdp, blk.data());
      int t = 0;
      for (; t + 4 <= P; t += 4) {
        pv_block_avx2<4>(W + size_t(t) * ld, ld, u0, blk.data(), c, c, c + nb, hdp,
                         L.data() + size_t(t) * 8 * H);
      }
      float* Lt = L.data() + size_t(t) * 8 * H;
      const float* Wt = W + size_t(t) * ld;
      switch (P - t) {
        case 3: pv_block_avx2<3>(Wt, ld, u0, blk.data(), c, c, c + nb, hdp, Lt); break;
        case 2: pv_block_avx2<2>(Wt, ld, u0, blk.data(), c, c, c + nb, hdp, Lt); break;
        case 1: pv_block_avx2<1>(Wt, ld, u0, blk.data(), c, c, c + nb, hdp, Lt); break;
        default: break;
      }
    }
    for (int64_t c = ce + 1; c < u1; ++c) edge(c);
  } else {
    for (int64_t c = u0; c < u1; ++c) edge(c);
  }

  // 4. each pair's lanes added as hsum8 does, into out
  for (int t = 0; t < P; ++t) {
    const int64_t row = s.row0 + r0 + t / G;
    float* o = a.out + row * int64_t(a.n_q) * hd + int64_t(kv * G + t % G) * hd;
    const float* Lt = L.data() + size_t(t) * 8 * H;
    for (int d = 0; d < hd; d += 8) {
      __m256 r[8];
      for (int l = 0; l < 8; ++l) r[l] = _mm256_loadu_ps(Lt + size_t(l) * H + size_t(d));
      const __m256 a0 = _mm256_add_ps(r[0], r[4]), a1 = _mm256_add_ps(r[1], r[5]);
      const __m256 a2 = _mm256_add_ps(r[2], r[6]), a3 = _mm256_add_ps(r[3], r[7]);
      const __m256 sum = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
      if (d + 8 <= hd) {
        _mm256_storeu_ps(o + d, sum);
      } else {
        float tail[8];
        _mm256_storeu_ps(tail, sum);
        std::memcpy(o + d, tail, size_t(hd - d) * 4);
      }
    }
  }
}
#endif

}  // namespace

size_t cache_row_bytes(CacheType type, int hd) {
  switch (type) {
    case CacheType::F32: return size_t(hd) * 4;
    case CacheType::F16: return size_t(hd) * 2;
    case CacheType::Q8_0: return hd % kQK ? 0 : size_t(hd / kQK) * kQ8Bytes;
  }
  return 0;
}

void attention(const AttnArgs& a) {
  const int hd = a.hd;
  const int64_t width = int64_t(a.n_q + 2 * a.n_kv) * hd;
  const int half = a.n_rot / 2;
  const size_t rb = cache_row_bytes(a.cache, hd);

  // 1. norms and rotations of the new q and k heads; keys and values into the caches
  for (int si = 0; si < a.n_seqs; ++si) {
    const AttnSeq& s = a.seqs[si];
    for (int64_t t = 0; t < s.n_rows; ++t) {
      float* row = a.qkv + (s.row0 + t) * width;
      const int64_t p = s.pos0 + t;
      const float* c = a.cos + p * half;
      const float* sn = a.sin + p * half;
      for (int h = 0; h < a.n_q + a.n_kv; ++h) {
        float* x = row + int64_t(h) * hd;
        if (a.q_norm) rms_norm(x, h < a.n_q ? a.q_norm : a.k_norm, hd, a.eps, x);
        rope_head(x, c, sn, a.n_rot, a.neox);
      }
      for (int h = 0; h < a.n_kv; ++h) {
        const size_t at = (size_t(h) * size_t(s.n_ctx) + size_t(p)) * rb;
        store_row(a.cache, row + int64_t(a.n_q + h) * hd, s.k + at, hd);
        store_row(a.cache, row + int64_t(a.n_q + a.n_kv + h) * hd, s.v + at, hd);
      }
    }
  }

  // 2. softmax(q·Kᵀ·scale)·V of every row and query head. A row's result does not depend on
  // which task computes it, nor on what else the task computes.
  ThreadPool& pool = shared_pool();
  const int64_t threads = a.n_threads <= 0 ? pool.size() : std::min(a.n_threads, pool.size());
#ifdef LEXGUIDE_ATTN_AVX2
  if (isa() >= Isa::Avx2) {
    // Tiles of (rows of a sequence) × (the query heads of one KV head), about 32 pairs each
    // (fewer rows when the scores would pass 4 MB, and no more rows than the window, so that
    // most cells are seen by every row of a tile), ordered by their cost, the costliest first:
    // later rows see more positions, and the pool hands out tasks in order.
    const int G = a.n_q / a.n_kv;
    struct Tile { int64_t cost; int seq, kv; int64_t r0, r1; };
    std::vector<Tile> tiles;
    for (int si = 0; si < a.n_seqs; ++si) {
      const AttnSeq& s = a.seqs[si];
      const int64_t end = s.pos0 + s.n_rows;
      const int64_t seen = a.window ? std::min<int64_t>(a.window, end) : end;
      int64_t rows = std::max<int64_t>(1, 32 / G);
      rows = std::min<int64_t>(rows, std::max<int64_t>(1, (int64_t(1) << 20) / (G * (seen + rows))));
      if (a.window) rows = std::min<int64_t>(rows, a.window);
      for (int64_t r0 = 0; r0 < s.n_rows; r0 += rows) {
        const int64_t r1 = std::min(s.n_rows, r0 + rows);
        const int64_t p1 = s.pos0 + r1;
        const int64_t cost = (r1 - r0) * (a.window ? std::min<int64_t>(a.window, p1) : p1);
        for (int kv = 0; kv < a.n_kv; ++kv) tiles.push_back({cost, si, kv, r0, r1});
      }
    }
    std::stable_sort(tiles.begin(), tiles.end(),
                     [](const Tile& x, const Tile& y) { return x.cost > y.cost; });
    auto task = [&](int64_t k) {
      const Tile& t = tiles[size_t(k)];
      const AttnSeq& s = a.seqs[t.seq];
      switch (a.cache) {
        case CacheType::F32: return attend_tile_avx2<CacheType::F32>(a, s, t.kv, t.r0, t.r1);
        case CacheType::F16: return attend_tile_avx2<CacheType::F16>(a, s, t.kv, t.r0, t.r1);
        case CacheType::Q8_0: return attend_tile_avx2<CacheType::Q8_0>(a, s, t.kv, t.r0, t.r1);
      }
    };
    pool.run(int64_t(tiles.size()), a.n_threads, task);
    return;
  }
#endif

  // The portable path, the reference the tiled one is tested against: one task per (sequence,
  // query head, share of its rows): rows t ≡ j (mod n_split) of the sequence for that head —
  // several tasks per head when few sequences have many rows (a prompt), interleaved so that
  // each share sees early and late (cheap and costly) positions.
  int64_t max_rows = 1;
  for (int si = 0; si < a.n_seqs; ++si) max_rows = std::max(max_rows, a.seqs[si].n_rows);
  const int64_t heads = int64_t(a.n_seqs) * a.n_q;
  const int64_t n_split =
      std::min(max_rows, std::max<int64_t>(1, (8 * threads + heads - 1) / heads));
  auto task = [&](int64_t k) {
    const int64_t j = k % n_split;
    const AttnSeq& s = a.seqs[k / n_split / a.n_q];
    const int h = int(k / n_split % a.n_q);
    switch (a.cache) {
      case CacheType::F32: return attend_rows<CacheType::F32>(a, s, h, j, n_split);
      case CacheType::F16: return attend_rows<CacheType::F16>(a, s, h, j, n_split);
      case CacheType::Q8_0: return attend_rows<CacheType::Q8_0>(a, s, h, j, n_split);
    }
  };
  pool.run(heads * n_split, a.n_threads, task);
}

}  // namespace lexguide::kernels
