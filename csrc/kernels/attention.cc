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
  static const bool avx2 = float_simd();
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

// q·k of float16-valued vectors the way llama.cpp's CPU backend multiplies a float16 matrix
// (llamafile's tinyBLAS): one fused multiply-add per element into 8 lanes (element i into
// lane i mod 8), then hsum8.
inline float dot_f16_scalar(const float* q, const float* k, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < n; ++i) acc[i & 7] = std::fma(q[i], k[i], acc[i & 7]);
  return hsum8(acc);
}

// o (hd) ← Σ_j p[j] · V[start + j] like the same product with the transposed V cache: for
// each output element the positions' terms go into 8 lanes by cell index (start + j) mod 8.
inline void weighted_sum_f16_scalar(const float* p, const float* vals, int64_t start, int64_t n,
                                    int hd, float* o, std::vector<float>& lanes) {
  for (int64_t j = 0; j < n; ++j) {
    float* acc = lanes.data() + size_t((start + j) & 7) * size_t(hd);
    const float* vr = vals + size_t(start + j) * size_t(hd);
    const float pj = p[j];
    for (int d = 0; d < hd; ++d) acc[d] = std::fma(pj, vr[d], acc[d]);
  }
  for (int d = 0; d < hd; ++d) {
    float v[8];
    for (int l = 0; l < 8; ++l) v[l] = lanes[size_t(l) * size_t(hd) + size_t(d)];
    o[d] = hsum8(v);
  }
}

#ifdef LEXGUIDE_ATTN_AVX2
// The same two functions in AVX2 registers: the same fused multiply-adds in the same lanes,
// so the results are bit-identical to the scalar ones.
__attribute__((target("avx2,fma"))) float dot_f16_avx2(const float* q, const float* k, int n) {
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), acc);
  float lanes[8];
  _mm256_storeu_ps(lanes, acc);
  for (; i < n; ++i) lanes[i & 7] = std::fma(q[i], k[i], lanes[i & 7]);
  return hsum8(lanes);
}

// sc[j] = dot_f16_avx2(q, keys + j·hd, hd) for j < n: four keys in flight (independent FMA
// chains; one key's chain is latency-bound), each key summed exactly as dot_f16_avx2 does.
__attribute__((target("avx2,fma"))) void dots_f16_avx2(const float* q, const float* keys,
                                                       int64_t n, int hd, float* sc) {
  const int hd8 = hd & ~7;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* k0 = keys + size_t(j) * size_t(hd);
    const size_t H = size_t(hd);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int i = 0; i < hd8; i += 8) {
      const __m256 qv = _mm256_loadu_ps(q + i);
      a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + i), a0);
      a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + H + i), a1);
      a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + 2 * H + i), a2);
      a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + 3 * H + i), a3);
    }
    float lanes[4][8];
    _mm256_storeu_ps(lanes[0], a0);
    _mm256_storeu_ps(lanes[1], a1);
    _mm256_storeu_ps(lanes[2], a2);
    _mm256_storeu_ps(lanes[3], a3);
    for (int u = 0; u < 4; ++u) {
      const float* k = k0 + size_t(u) * H;
      for (int i = hd8; i < hd; ++i) lanes[u][i & 7] = std::fma(q[i], k[i], lanes[u][i & 7]);
      sc[j + u] = hsum8(lanes[u]);
    }
  }
  for (; j < n; ++j) sc[j] = dot_f16_avx2(q, keys + size_t(j) * size_t(hd), hd);
}

// The cells' lane accumulators of weighted_sum held in registers for one 8-wide slice of the
// head: cell c's terms go to register c mod 8, in cell order, as in the lanes array.
__attribute__((target("avx2,fma"))) inline void weighted_slice_avx2(
    const float* p, const float* vals, int64_t start, int64_t n, int hd, int d, __m256* acc) {
  const size_t H = size_t(hd);
  int64_t j = 0;
  // the first cells up to a multiple of 8, one at a time
  for (; j < n && ((start + j) & 7) != 0; ++j) {
    const int l = int((start + j) & 7);
    acc[l] = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(vals + size_t(start + j) * H + d),
                             acc[l]);
  }
  for (; j + 8 <= n; j += 8) {
    const float* v = vals + size_t(start + j) * H + d;
    for (int l = 0; l < 8; ++l) {
      acc[l] = _mm256_fmadd_ps(_mm256_set1_ps(p[j + l]), _mm256_loadu_ps(v + size_t(l) * H), acc[l]);
    }
  }
  for (; j < n; ++j) {
    const int l = int((start + j) & 7);
    acc[l] = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(vals + size_t(start + j) * H + d),
                             acc[l]);
  }
}

__attribute__((target("avx2,fma"))) void weighted_sum_f16_avx2(
    const float* p, const float* vals, int64_t start, int64_t n, int hd, float* o,
    std::vector<float>& lanes) {
  const int hd8 = hd & ~7;
  // whole 8-wide slices: the lane accumulators in registers, added as below
  for (int d = 0; d < hd8; d += 8) {
    __m256 r[8];
    for (int l = 0; l < 8; ++l) r[l] = _mm256_setzero_ps();
    weighted_slice_avx2(p, vals, start, n, hd, d, r);
    const __m256 a0 = _mm256_add_ps(r[0], r[4]), a1 = _mm256_add_ps(r[1], r[5]);
    const __m256 a2 = _mm256_add_ps(r[2], r[6]), a3 = _mm256_add_ps(r[3], r[7]);
    _mm256_storeu_ps(o + d, _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3)));
  }
  if (hd8 == hd) return;
  // the tail elements through the lanes array
  for (int64_t j = 0; j < n; ++j) {
    float* acc = lanes.data() + size_t((start + j) & 7) * size_t(hd);
    const float* vr = vals + size_t(start + j) * size_t(hd);
    const float pj = p[j];
    for (int d = hd8; d < hd; ++d) acc[d] = std::fma(pj, vr[d], acc[d]);
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

// ggml_vec_soft_max_f32 on the scores of cells start .. start + n − 1, then rounded to
// float16: e = expf(s − top) by ggml's SIMD expf, the sum in double over 8-cell partial sums
// (cells counted from 0, so masked cells before start are zeros), p = float16(e · (1/sum)).
void softmax_f16_scalar(float* sc, int64_t start, int64_t n, float top) {
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
  for (int64_t j = 0; j < n; ++j) sc[j] = round_f16(sc[j] * inv);
}

#ifdef LEXGUIDE_ATTN_AVX2
__attribute__((target("avx2,fma,f16c"))) void softmax_f16_avx2(float* sc, int64_t start,
                                                               int64_t n, float top) {
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
    const __m128i h = _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(sc + j, _mm256_cvtph_ps(h));
  }
  const float invs = float(1.0 / sum);
  for (; j < n; ++j) sc[j] = round_f16(buf[size_t(off + j)] * invs);
}
#endif

void softmax_f16(float* sc, int64_t start, int64_t n, float top) {
#ifdef LEXGUIDE_ATTN_AVX2
  static const bool avx2 = float_simd();
  if (avx2) return softmax_f16_avx2(sc, start, n, top);
#endif
  softmax_f16_scalar(sc, start, n, top);
}

// sc[j] = q·K[j] for the n keys at keys (rows of hd)
inline void dots_f16(const float* q, const float* keys, int64_t n, int hd, float* sc) {
#ifdef LEXGUIDE_ATTN_AVX2
  static const bool avx2 = float_simd();
  if (avx2) return dots_f16_avx2(q, keys, n, hd, sc);
#endif
  for (int64_t j = 0; j < n; ++j) sc[j] = dot_f16_scalar(q, keys + size_t(j) * size_t(hd), hd);
}

inline void weighted_sum_f16(const float* p, const float* vals, int64_t start, int64_t n, int hd,
                             float* o) {
  thread_local std::vector<float> lanes;
  lanes.assign(size_t(8) * size_t(hd), 0.0f);
#ifdef LEXGUIDE_ATTN_AVX2
  static const bool avx2 = float_simd();
  if (avx2) return weighted_sum_f16_avx2(p, vals, start, n, hd, o, lanes);
#endif
  weighted_sum_f16_scalar(p, vals, start, n, hd, o, lanes);
}

}  // namespace

void attention(const AttnArgs& a) {
  const int hd = a.hd;
  const int64_t width = int64_t(a.n_q + 2 * a.n_kv) * hd;
  const int g = a.n_q / a.n_kv;
  const int half = a.n_rot / 2;

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
        const size_t at = (size_t(h) * size_t(s.n_ctx) + size_t(p)) * size_t(hd);
        to_f16_values(row + int64_t(a.n_q + h) * hd, s.k + at, hd);
        to_f16_values(row + int64_t(a.n_q + a.n_kv + h) * hd, s.v + at, hd);
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
    const int kv = h / g;
    const float* keys = s.k + size_t(kv) * size_t(s.n_ctx) * size_t(hd);
    const float* vals = s.v + size_t(kv) * size_t(s.n_ctx) * size_t(hd);
    thread_local std::vector<float> scores, qh;
    qh.resize(size_t(hd));
    for (int64_t t = j; t < s.n_rows; t += n_split) {
      const int64_t p = s.pos0 + t;
      const int64_t start = a.window ? std::max<int64_t>(0, p - a.window + 1) : 0;
      const int64_t n = p + 1 - start;
      scores.resize(size_t(n));
      to_f16_values(a.qkv + (s.row0 + t) * width + int64_t(h) * hd, qh.data(), hd);
      const float* q = qh.data();
      float top = -INFINITY;
      dots_f16(q, keys + size_t(start) * size_t(hd), n, hd, scores.data());
      for (int64_t i = 0; i < n; ++i) {
        const float sc = scores[size_t(i)] * a.scale;
        scores[size_t(i)] = sc;
        top = std::max(top, sc);
      }
      softmax_f16(scores.data(), start, n, top);
      float* o = a.out + (s.row0 + t) * int64_t(a.n_q) * hd + int64_t(h) * hd;
      weighted_sum_f16(scores.data(), vals, start, n, hd, o);
    }
  };
  pool.run(heads * n_split, a.n_threads, task);
}

}  // namespace lexguide::kernels
