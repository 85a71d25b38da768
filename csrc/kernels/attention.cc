#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>
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

// e = exp(sc − top) of the group of 8 cells whose first has index j0 (relative to the softmax's
// first cell; cells outside 0 .. n − 1 are zeros), written back into sc: expf8 when the whole
// group is in its range, else ggml_expf per lane (the same values where both apply).
LEXGUIDE_ATTN_TARGET inline __m256 exp_group_avx2(float* sc, int64_t j0, int64_t n, float top) {
  if (j0 >= 0 && j0 + 8 <= n) {
    const __m256 v = _mm256_sub_ps(_mm256_loadu_ps(sc + j0), _mm256_set1_ps(top));
    __m256 e;
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_set1_ps(-87.0f), _CMP_GE_OQ)) == 0xff) {
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
}

// sc[j] ← sc[j]·inv for j ≥ j0, rounded to float16 when half
LEXGUIDE_ATTN_TARGET void normalize_avx2(float* sc, int64_t j, int64_t n, float invs, bool half) {
  const __m256 inv = _mm256_set1_ps(invs);
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

// softmax_scalar in AVX2 registers: the same expf, the same group sums added in the same order.
LEXGUIDE_ATTN_TARGET void softmax_avx2(float* sc, int64_t start, int64_t n, float top, bool half) {
  double sum = 0.0;
  int64_t j0 = -(start & 7);
  for (; j0 + 64 <= n; j0 += 64) {  // eight groups, their sums by hsum8x8
    __m256 e[8];
    for (int g = 0; g < 8; ++g) e[g] = exp_group_avx2(sc, j0 + 8 * g, n, top);
    float s8[8];
    _mm256_storeu_ps(s8, hsum8x8(e));
    for (int g = 0; g < 8; ++g) sum += double(s8[g]);
  }
  for (; j0 < n; j0 += 8) sum += double(hsum8_avx2(exp_group_avx2(sc, j0, n, top)));
  normalize_avx2(sc, 0, n, float(1.0 / sum), half);
}

// max(sc[0 .. n − 1]) (NaNs left out, as std::max leaves them)
LEXGUIDE_ATTN_TARGET float max_avx2(const float* sc, int64_t n) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) m = _mm256_max_ps(_mm256_loadu_ps(sc + j), m);  // m when NaN
  float lanes[8];
  _mm256_storeu_ps(lanes, m);
  float top = -INFINITY;
  for (int l = 0; l < 8; ++l) top = std::max(top, lanes[l]);
  for (; j < n; ++j) top = std::max(top, sc[j]);
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

// S[t·ld + j] = (q_t·k_j)·scale for the np pairs' q rows (qt, hdp apart) and nk keys (kf, hdp apart):
// two pairs × four keys in registers, their eight sums added by hsum8x8.
LEXGUIDE_ATTN_TARGET void qk_avx2(const float* qt, int np, const float* kf, int64_t nk, int hdp,
                                  float scale, float* S, size_t ld) {
  const __m256 sv = _mm256_set1_ps(scale);
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
      const __m256 r = _mm256_mul_ps(hsum8x8(acc), sv);
      _mm_storeu_ps(s0 + j, _mm256_castps256_ps128(r));
      _mm_storeu_ps(s1 + j, _mm256_extractf128_ps(r, 1));
    }
    for (; j < nk; ++j) {
      s0[j] = dot_f32_avx2(q0, kf + size_t(j) * H, hdp) * scale;
      s1[j] = dot_f32_avx2(q1, kf + size_t(j) * H, hdp) * scale;
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
      _mm256_storeu_ps(s0 + j, _mm256_mul_ps(hsum8x8(acc), sv));
    }
    for (; j < nk; ++j) s0[j] = dot_f32_avx2(q0, kf + size_t(j) * H, hdp) * scale;
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

// ---- AVX-512 kernels of the tiled path (isa() ≥ Avx512) -------------------------------------
// The same chains as the AVX2 ones in wider registers: a zmm holds two keys' 8-lane q·k
// accumulators (two independent chains), or 16 output elements of one V-product lane.
// (GCC 12's AVX-512 intrinsics start some results from _mm512_undefined_*, which
// -Wmaybe-uninitialized reports inside them.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define LEXGUIDE_ATTN_TARGET512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

// Keys j < n as floats for qk_avx512: key pairs (2m, 2m + 1) interleaved by 8-element slices
// ([key 2m, slice s | key 2m + 1, slice s] at (m·hdp/8 + s)·16), n rounded up to 8 with zero
// keys, the padding of each key zero.
template <CacheType C>
LEXGUIDE_ATTN_TARGET512 void convert_keys_avx512(const uint8_t* rows, size_t rb, int64_t n, int hd,
                                                 int hdp, float* dst) {
  const int hd8 = hd & ~7, slices = hdp / 8;
  const int64_t n8 = (n + 7) & ~int64_t(7);
  for (int64_t j = 0; j < n8; ++j) {
    float* o = dst + (size_t(j / 2) * size_t(slices) * 16) + size_t(j & 1) * 8;
    if (j >= n) {
      for (int s = 0; s < slices; ++s) _mm256_storeu_ps(o + size_t(s) * 16, _mm256_setzero_ps());
      continue;
    }
    const uint8_t* r = rows + size_t(j) * rb;
    int i = 0;
    for (; i < hd8; i += 8) _mm256_storeu_ps(o + size_t(i / 8) * 16, load8<C>(r, i));
    if (i < hdp) {
      float tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int e = 0; i + e < hd; ++e) tail[e] = load1<C>(r, i + e);
      _mm256_storeu_ps(o + size_t(i / 8) * 16, _mm256_loadu_ps(tail));
    }
  }
}

// hsum8 of the eight keys' accumulators of one pair (z[m] = keys 2m | 2m + 1): lane k of the
// result is hsum8 of key k, the same additions as hsum8x8.
LEXGUIDE_ATTN_TARGET512 inline __m256 hsum8x8_zmm(const __m512* z) {
  // per key the halves' sum (lane l + lane l + 4): [key 0 | key 1 | key 2 | key 3] of 4 each
  const __m512 b0 = _mm512_add_ps(_mm512_shuffle_f32x4(z[0], z[1], 0x88), _mm512_shuffle_f32x4(z[0], z[1], 0xDD));
  const __m512 b1 = _mm512_add_ps(_mm512_shuffle_f32x4(z[2], z[3], 0x88), _mm512_shuffle_f32x4(z[2], z[3], 0xDD));
  // per 128-bit chunk q: [(0+4)+(2+6), (1+5)+(3+7)] of key q, then of key q + 4
  const __m512 c = _mm512_add_ps(_mm512_shuffle_ps(b0, b1, 0x44), _mm512_shuffle_ps(b0, b1, 0xEE));
  // their sum: key q in element 0 of chunk q, key q + 4 in element 2
  const __m512 d = _mm512_add_ps(c, _mm512_shuffle_ps(c, c, 0xB1));
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castps512_ps256(_mm512_permutexvar_ps(idx, d));
}

// expf8 on 16 lanes: the same operations, lane by lane
LEXGUIDE_ATTN_TARGET512 inline __m512 expf16(__m512 x) {
  using namespace expf_c;
  const __m512 r = _mm512_set1_ps(kRound);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(kLog2e), r);
  const __m512 n = _mm512_sub_ps(z, r);
  const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo),
                                    _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x));
  const __m512 k = _mm512_castsi512_ps(_mm512_add_epi32(
      _mm512_slli_epi32(_mm512_castps_si512(z), 23), _mm512_castps_si512(_mm512_set1_ps(1.0f))));
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 hi = _mm512_fmadd_ps(_mm512_set1_ps(kC5), b, _mm512_set1_ps(kC4));
  const __m512 lo = _mm512_fmadd_ps(_mm512_set1_ps(kC3), b, _mm512_set1_ps(kC2));
  const __m512 j = _mm512_fmadd_ps(_mm512_fmadd_ps(hi, u, lo), u,
                                   _mm512_mul_ps(_mm512_set1_ps(kC1), b));
  return _mm512_fmadd_ps(j, k, k);
}

// softmax_avx2 with 16 cells per register where whole groups of 8 lie inside the row: expf16
// when all 16 are in its range, else ggml_expf per lane (equal to expf8 where both apply); the
// group sums by hsum8x8_zmm, added in the same order.
LEXGUIDE_ATTN_TARGET512 void softmax_avx512(float* sc, int64_t start, int64_t n, float top,
                                            bool half) {
  const __m512 topv = _mm512_set1_ps(top), lim = _mm512_set1_ps(-87.0f);
  double sum = 0.0;
  int64_t j0 = -(start & 7);
  if (j0 < 0) {
    sum += double(hsum8_avx2(exp_group_avx2(sc, j0, n, top)));
    j0 += 8;
  }
  for (; j0 + 64 <= n; j0 += 64) {
    __m512 e[4];
    for (int m = 0; m < 4; ++m) {
      float* x = sc + j0 + 16 * m;
      const __m512 v = _mm512_sub_ps(_mm512_loadu_ps(x), topv);
      if (_mm512_cmp_ps_mask(v, lim, _CMP_GE_OQ) == 0xffff) {
        e[m] = expf16(v);
        _mm512_storeu_ps(x, e[m]);
      } else {
        _mm512_storeu_ps(x, v);
        for (int l = 0; l < 16; ++l) x[l] = ggml_expf(x[l]);
        e[m] = _mm512_loadu_ps(x);
      }
    }
    float s8[8];
    _mm256_storeu_ps(s8, hsum8x8_zmm(e));
    for (int g = 0; g < 8; ++g) sum += double(s8[g]);
  }
  for (; j0 < n; j0 += 8) sum += double(hsum8_avx2(exp_group_avx2(sc, j0, n, top)));
  const float invs = float(1.0 / sum);
  const __m512 inv = _mm512_set1_ps(invs);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 p = _mm512_mul_ps(_mm512_loadu_ps(sc + j), inv);
    if (half) {
      const __m256i h = _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm512_storeu_ps(sc + j, _mm512_cvtph_ps(h));
    } else {
      _mm512_storeu_ps(sc + j, p);
    }
  }
  normalize_avx2(sc, j, n, invs, half);
}

// qk_avx2 with keys from convert_keys_avx512 (nk of them, the layout rounded up to 8): four
// pairs × eight keys in 16 zmm accumulators.
LEXGUIDE_ATTN_TARGET512 void qk_avx512(const float* qt, int np, const float* kf, int64_t nk,
                                       int hdp, float scale, float* S, size_t ld) {
  const __m256 sv = _mm256_set1_ps(scale);
  const size_t H = size_t(hdp), slices = H / 8;
  const size_t group = slices * 16 * 4;  // floats of eight keys
  for (int64_t j = 0; j < nk; j += 8) {
    const float* k0 = kf + size_t(j / 8) * group;
    const int valid = int(std::min<int64_t>(8, nk - j));
    const __mmask8 keep = __mmask8((1u << valid) - 1);
    int t = 0;
    for (; t + 4 <= np; t += 4) {
      __m512 acc[4][4];
      for (int u = 0; u < 4; ++u)
        for (int m = 0; m < 4; ++m) acc[u][m] = _mm512_setzero_ps();
      for (size_t s = 0; s < slices; ++s) {
        const float* k = k0 + s * 16;
        const __m512 y0 = _mm512_loadu_ps(k), y1 = _mm512_loadu_ps(k + slices * 16);
        const __m512 y2 = _mm512_loadu_ps(k + 2 * slices * 16), y3 = _mm512_loadu_ps(k + 3 * slices * 16);
        for (int u = 0; u < 4; ++u) {
          const __m512 x = _mm512_broadcast_f32x8(_mm256_loadu_ps(qt + size_t(t + u) * H + s * 8));
          acc[u][0] = _mm512_fmadd_ps(x, y0, acc[u][0]);
          acc[u][1] = _mm512_fmadd_ps(x, y1, acc[u][1]);
          acc[u][2] = _mm512_fmadd_ps(x, y2, acc[u][2]);
          acc[u][3] = _mm512_fmadd_ps(x, y3, acc[u][3]);
        }
      }
      for (int u = 0; u < 4; ++u) {
        _mm256_mask_storeu_ps(S + size_t(t + u) * ld + size_t(j), keep, _mm256_mul_ps(hsum8x8_zmm(acc[u]), sv));
      }
    }
    for (; t < np; ++t) {
      __m512 acc[4];
      for (int m = 0; m < 4; ++m) acc[m] = _mm512_setzero_ps();
      for (size_t s = 0; s < slices; ++s) {
        const float* k = k0 + s * 16;
        const __m512 x = _mm512_broadcast_f32x8(_mm256_loadu_ps(qt + size_t(t) * H + s * 8));
        for (int m = 0; m < 4; ++m) acc[m] = _mm512_fmadd_ps(x, _mm512_loadu_ps(k + m * slices * 16), acc[m]);
      }
      _mm256_mask_storeu_ps(S + size_t(t) * ld + size_t(j), keep, _mm256_mul_ps(hsum8x8_zmm(acc), sv));
    }
  }
}

// pv_block_avx2's chains, D zmm (16 elements each) of the head from element d, the last with
// the mask `last` (a head size that is not a multiple of 16).
template <int PB, int D>
LEXGUIDE_ATTN_TARGET512 inline void pv_chunk_avx512(const float* W, size_t ld, int64_t w0,
                                                    const float* vf, int64_t v0, int64_t c0,
                                                    int64_t c1, size_t H, size_t d, __mmask16 last,
                                                    float* L) {
  for (int l = 0; l < 8; ++l) {
    int64_t c = c0 + ((int64_t(l) - c0) & 7);
    if (c >= c1) continue;
    __m512 acc[PB][D];
    for (int t = 0; t < PB; ++t) {
      const float* st = L + (size_t(t) * 8 + size_t(l)) * H + d;
      for (int k = 0; k < D; ++k) {
        acc[t][k] = k + 1 < D ? _mm512_loadu_ps(st + 16 * k) : _mm512_maskz_loadu_ps(last, st + 16 * k);
      }
    }
    for (; c < c1; c += 8) {
      const float* v = vf + size_t(c - v0) * H + d;
      __m512 x[D];
      for (int k = 0; k < D; ++k) x[k] = k + 1 < D ? _mm512_loadu_ps(v + 16 * k) : _mm512_maskz_loadu_ps(last, v + 16 * k);
      for (int t = 0; t < PB; ++t) {
        const __m512 w = _mm512_set1_ps(W[size_t(t) * ld + size_t(c - w0)]);
        for (int k = 0; k < D; ++k) acc[t][k] = _mm512_fmadd_ps(w, x[k], acc[t][k]);
      }
    }
    for (int t = 0; t < PB; ++t) {
      float* st = L + (size_t(t) * 8 + size_t(l)) * H + d;
      for (int k = 0; k < D; ++k) {
        if (k + 1 < D) {
          _mm512_storeu_ps(st + 16 * k, acc[t][k]);
        } else {
          _mm512_mask_storeu_ps(st + 16 * k, last, acc[t][k]);
        }
      }
    }
  }
}

template <int PB>
LEXGUIDE_ATTN_TARGET512 void pv_block_avx512(const float* W, size_t ld, int64_t w0, const float* vf,
                                             int64_t v0, int64_t c0, int64_t c1, int hdp, float* L) {
  const size_t H = size_t(hdp);
  size_t d = 0;
  for (; d + 64 <= H; d += 64) pv_chunk_avx512<PB, 4>(W, ld, w0, vf, v0, c0, c1, H, d, 0xffff, L);
  const size_t rest = H - d;  // 0 .. 56, a multiple of 8
  if (rest == 0) return;
  const __mmask16 last = rest % 16 ? __mmask16(0xff) : __mmask16(0xffff);
  switch ((rest + 15) / 16) {
    case 1: return pv_chunk_avx512<PB, 1>(W, ld, w0, vf, v0, c0, c1, H, d, last, L);
    case 2: return pv_chunk_avx512<PB, 2>(W, ld, w0, vf, v0, c0, c1, H, d, last, L);
    case 3: return pv_chunk_avx512<PB, 3>(W, ld, w0, vf, v0, c0, c1, H, d, last, L);
    default: return pv_chunk_avx512<PB, 4>(W, ld, w0, vf, v0, c0, c1, H, d, last, L);
  }
}

#pragma GCC diagnostic pop

// f(std::integral_constant<int, R>(), t) once, for the R (1 .. N) pairs from t, R == rest
template <int N, class F>
inline void pv_rest(int rest, int t, F& f) {
  if constexpr (N > 0) {
    if (rest == N) return f(std::integral_constant<int, N>(), t);
    pv_rest<N - 1>(rest, t, f);
  }
}

// f(std::integral_constant<int, N>(), t) for the pairs t .. t + N − 1 of P while N remain,
// then once for the rest
template <int N, class F>
inline void pv_blocks(int P, F&& f) {
  int t = 0;
  for (; t + N <= P; t += N) f(std::integral_constant<int, N>(), t);
  pv_rest<N - 1>(P - t, t, f);
}

// One tile (see above): rows r0 .. r1 − 1 of sequence s × the query heads of KV head kv; the
// scores and the V products with the AVX-512 kernels when Z.
template <CacheType C, bool Z>
LEXGUIDE_ATTN_TARGET void attend_tile(const AttnArgs& a, const AttnSeq& s, int kv, int64_t r0,
                                      int64_t r1) {
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
    if constexpr (Z) {
      convert_keys_avx512<C>(keys + size_t(c) * rb, rb, nb, hd, hdp, blk.data());
      qk_avx512(qt.data(), P, blk.data(), nb, hdp, a.scale, S.data() + size_t(c - u0), ld);
    } else {
      convert_rows_avx2<C>(keys + size_t(c) * rb, rb, nb, hd, hdp, blk.data());
      qk_avx2(qt.data(), P, blk.data(), nb, hdp, a.scale, S.data() + size_t(c - u0), ld);
    }
  }

  // 2. each pair's softmax over the cells its row sees
  for (int t = 0; t < P; ++t) {
    const int64_t p = pa + t / G, start = first(p), n = p + 1 - start;
    float* sc = S.data() + size_t(t) * ld + size_t(start - u0);
    if constexpr (Z) {
      softmax_avx512(sc, start, n, max_avx2(sc, n), half);
    } else {
      softmax_avx2(sc, start, n, max_avx2(sc, n), half);
    }
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
      if constexpr (Z) {
        pv_blocks<6>(P, [&](auto pb, int t) {
          pv_block_avx512<decltype(pb)::value>(W + size_t(t) * ld, ld, u0, blk.data(), c, c, c + nb,
                                               hdp, L.data() + size_t(t) * 8 * H);
        });
      } else {
        pv_blocks<4>(P, [&](auto pb, int t) {
          pv_block_avx2<decltype(pb)::value>(W + size_t(t) * ld, ld, u0, blk.data(), c, c, c + nb,
                                             hdp, L.data() + size_t(t) * 8 * H);
        });
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
  const Isa level = isa();
  if (level >= Isa::Avx2) {
    const bool z = level >= Isa::Avx512;
    // Tiles of (rows of a sequence) × (the query heads of one KV head), about 48 pairs each
    // (fewer rows when the scores would pass 4 MB, and no more rows than the window, so that
    // most cells are seen by every row of a tile). The pool hands tasks out in order: the
    // sequences costliest first, then per KV head (consecutive tiles read the same keys and
    // values) its row blocks from the last (later rows see more positions) to the first.
    const int G = a.n_q / a.n_kv;
    struct Tile { int seq, kv; int64_t r0, r1; };
    std::vector<std::pair<int64_t, int>> order;  // (cost, sequence)
    for (int si = 0; si < a.n_seqs; ++si) {
      const AttnSeq& s = a.seqs[si];
      const int64_t seen = a.window ? std::min<int64_t>(a.window, s.pos0 + s.n_rows) : s.pos0 + s.n_rows;
      order.push_back({s.n_rows * seen, si});
    }
    std::stable_sort(order.begin(), order.end(),
                     [](const auto& x, const auto& y) { return x.first > y.first; });
    std::vector<Tile> tiles;
    for (const auto& [cost, si] : order) {
      const AttnSeq& s = a.seqs[si];
      const int64_t end = s.pos0 + s.n_rows;
      const int64_t seen = a.window ? std::min<int64_t>(a.window, end) : end;
      int64_t rows = std::max<int64_t>(1, 48 / G);
      rows = std::min<int64_t>(rows, std::max<int64_t>(1, (int64_t(1) << 20) / (G * (seen + rows))));
      if (a.window) rows = std::min<int64_t>(rows, a.window);
      const int64_t blocks = (s.n_rows + rows - 1) / rows;
      for (int kv = 0; kv < a.n_kv; ++kv) {
        for (int64_t b = blocks - 1; b >= 0; --b) {
          tiles.push_back({si, kv, b * rows, std::min(s.n_rows, (b + 1) * rows)});
        }
      }
    }
    auto task = [&](int64_t k) {
      const Tile& t = tiles[size_t(k)];
      const AttnSeq& s = a.seqs[t.seq];
      switch (a.cache) {
        case CacheType::F32:
          return z ? attend_tile<CacheType::F32, true>(a, s, t.kv, t.r0, t.r1)
                   : attend_tile<CacheType::F32, false>(a, s, t.kv, t.r0, t.r1);
        case CacheType::F16:
          return z ? attend_tile<CacheType::F16, true>(a, s, t.kv, t.r0, t.r1)
                   : attend_tile<CacheType::F16, false>(a, s, t.kv, t.r0, t.r1);
        case CacheType::Q8_0:
          return z ? attend_tile<CacheType::Q8_0, true>(a, s, t.kv, t.r0, t.r1)
                   : attend_tile<CacheType::Q8_0, false>(a, s, t.kv, t.r0, t.r1);
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
