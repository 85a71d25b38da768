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

// The same functions in AVX2 registers: the same fused multiply-adds in the same lanes, so the
// results are bit-identical to the scalar ones.
template <CacheType C>
LEXGUIDE_ATTN_TARGET float dot_avx2(const float* q, const uint8_t* k, int n) {
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8<C>(k, i), acc);
  float lanes[8];
  _mm256_storeu_ps(lanes, acc);
  for (; i < n; ++i) lanes[i & 7] = std::fma(q[i], load1<C>(k, i), lanes[i & 7]);
  return hsum8(lanes);
}

// sc[j] = dot_avx2(q, key j, hd) for j < n: four keys in flight (independent FMA chains; one
// key's chain is latency-bound), each key summed exactly as dot_avx2 does.
template <CacheType C>
LEXGUIDE_ATTN_TARGET void dots_avx2(const float* q, const uint8_t* keys, size_t rb, int64_t n,
                                    int hd, float* sc) {
  const int hd8 = hd & ~7;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const uint8_t* k0 = keys + size_t(j) * rb;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int i = 0; i < hd8; i += 8) {
      const __m256 qv = _mm256_loadu_ps(q + i);
      a0 = _mm256_fmadd_ps(qv, load8<C>(k0, i), a0);
      a1 = _mm256_fmadd_ps(qv, load8<C>(k0 + rb, i), a1);
      a2 = _mm256_fmadd_ps(qv, load8<C>(k0 + 2 * rb, i), a2);
      a3 = _mm256_fmadd_ps(qv, load8<C>(k0 + 3 * rb, i), a3);
    }
    float lanes[4][8];
    _mm256_storeu_ps(lanes[0], a0);
    _mm256_storeu_ps(lanes[1], a1);
    _mm256_storeu_ps(lanes[2], a2);
    _mm256_storeu_ps(lanes[3], a3);
    for (int u = 0; u < 4; ++u) {
      const uint8_t* k = k0 + size_t(u) * rb;
      for (int i = hd8; i < hd; ++i) lanes[u][i & 7] = std::fma(q[i], load1<C>(k, i), lanes[u][i & 7]);
      sc[j + u] = hsum8(lanes[u]);
    }
  }
  for (; j < n; ++j) sc[j] = dot_avx2<C>(q, keys + size_t(j) * rb, hd);
}

// The cells' lane accumulators of weighted_sum held in registers for one 8-wide slice of the
// head: cell c's terms go to register c mod 8, in cell order, as in the lanes array.
template <CacheType C>
LEXGUIDE_ATTN_TARGET inline void weighted_slice_avx2(const float* p, const uint8_t* vals,
                                                     size_t rb, int64_t start, int64_t n, int d,
                                                     __m256* acc) {
  int64_t j = 0;
  // the first cells up to a multiple of 8, one at a time
  for (; j < n && ((start + j) & 7) != 0; ++j) {
    const int l = int((start + j) & 7);
    acc[l] = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), load8<C>(vals + size_t(start + j) * rb, d), acc[l]);
  }
  for (; j + 8 <= n; j += 8) {
    const uint8_t* v = vals + size_t(start + j) * rb;
    for (int l = 0; l < 8; ++l) {
      acc[l] = _mm256_fmadd_ps(_mm256_set1_ps(p[j + l]), load8<C>(v + size_t(l) * rb, d), acc[l]);
    }
  }
  for (; j < n; ++j) {
    const int l = int((start + j) & 7);
    acc[l] = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), load8<C>(vals + size_t(start + j) * rb, d), acc[l]);
  }
}

template <CacheType C>
LEXGUIDE_ATTN_TARGET void weighted_sum_avx2(const float* p, const uint8_t* vals, size_t rb,
                                            int64_t start, int64_t n, int hd, float* o,
                                            std::vector<float>& lanes) {
  const int hd8 = hd & ~7;
  // whole 8-wide slices: the lane accumulators in registers, added as below
  for (int d = 0; d < hd8; d += 8) {
    __m256 r[8];
    for (int l = 0; l < 8; ++l) r[l] = _mm256_setzero_ps();
    weighted_slice_avx2<C>(p, vals, rb, start, n, d, r);
    const __m256 a0 = _mm256_add_ps(r[0], r[4]), a1 = _mm256_add_ps(r[1], r[5]);
    const __m256 a2 = _mm256_add_ps(r[2], r[6]), a3 = _mm256_add_ps(r[3], r[7]);
    _mm256_storeu_ps(o + d, _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3)));
  }
  if (hd8 == hd) return;
  // the tail elements through the lanes array
  for (int64_t j = 0; j < n; ++j) {
    float* acc = lanes.data() + size_t((start + j) & 7) * size_t(hd);
    const uint8_t* vr = vals + size_t(start + j) * rb;
    const float pj = p[j];
    for (int d = hd8; d < hd; ++d) acc[d] = std::fma(pj, load1<C>(vr, d), acc[d]);
  }
  const float* L = lanes.data();
  const size_t H = size_t(hd);
  for (int d = hd8; d < hd; ++d) {
    float v[8];
    for (int l = 0; l < 8; ++l) v[l] = L[size_t(l) * H + size_t(d)];
    o[d] = hsum8(v);
  }
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
__attribute__((target("avx2,fma,f16c"))) void softmax_avx2(float* sc, int64_t start, int64_t n,
                                                           float top, bool half) {
  // the scores shifted to their cell's lane: buf[k] holds cell (start & ~7) + k
  thread_local std::vector<float> buf;
  const int64_t off = start & 7, m = (off + n + 7) & ~int64_t(7);
  buf.assign(size_t(m), 0.0f);
  double sum = 0.0;
  for (int64_t k = 0; k < m; k += 8) {
    float v[8];
    bool fast = true;
    for (int l = 0; l < 8; ++l) {
      const int64_t j = k + l - off;
      v[l] = j >= 0 && j < n ? sc[j] - top : 0.0f;
      fast = fast && v[l] >= -87.0f;
    }
    if (fast) {
      _mm256_storeu_ps(v, expf8(_mm256_loadu_ps(v)));
    } else {
      for (int l = 0; l < 8; ++l) v[l] = ggml_expf(v[l]);
    }
    for (int l = 0; l < 8; ++l) {
      const int64_t j = k + l - off;
      if (j < 0 || j >= n) v[l] = 0.0f;
      buf[size_t(k + l)] = v[l];
    }
    sum += double(hsum8(v));
  }
  const __m256 inv = _mm256_set1_ps(float(1.0 / sum));
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 p = _mm256_mul_ps(_mm256_loadu_ps(buf.data() + off + j), inv);
    if (half) {
      const __m128i h = _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm256_storeu_ps(sc + j, _mm256_cvtph_ps(h));
    } else {
      _mm256_storeu_ps(sc + j, p);
    }
  }
  const float invs = float(1.0 / sum);
  for (; j < n; ++j) {
    const float p = buf[size_t(off + j)] * invs;
    sc[j] = half ? round_f16(p) : p;
  }
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
#ifdef LEXGUIDE_ATTN_AVX2
  const bool avx2 = isa() >= Isa::Avx2;
  if (avx2) return dots_avx2<C>(q, keys, rb, n, hd, sc);
#endif
  for (int64_t j = 0; j < n; ++j) sc[j] = dot_scalar<C>(q, keys + size_t(j) * rb, hd);
}

template <CacheType C>
inline void weighted_sum(const float* p, const uint8_t* vals, size_t rb, int64_t start, int64_t n,
                         int hd, float* o) {
  thread_local std::vector<float> lanes;
  lanes.assign(size_t(8) * size_t(hd), 0.0f);
#ifdef LEXGUIDE_ATTN_AVX2
  const bool avx2 = isa() >= Isa::Avx2;
  if (avx2) return weighted_sum_avx2<C>(p, vals, rb, start, n, hd, o, lanes);
#endif
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

  // 2. one task per (sequence, query head, share of its rows): rows t ≡ j (mod n_split) of the
  // sequence for that head — several tasks per head when few sequences have many rows (a
  // prompt), interleaved so that each share sees early and late (cheap and costly) positions.
  // A row's result does not depend on which task computes it.
  int64_t max_rows = 1;
  for (int si = 0; si < a.n_seqs; ++si) max_rows = std::max(max_rows, a.seqs[si].n_rows);
  ThreadPool& pool = shared_pool();
  const int64_t threads = a.n_threads <= 0 ? pool.size() : std::min(a.n_threads, pool.size());
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
