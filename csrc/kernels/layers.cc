#include "kernels/layers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LEXGUIDE_LAYERS_AVX2 1
#endif

#include "kernels/blocks.h"
#include "kernels/dot.h"
#include "common/thread_pool.h"
#include "kernels/vec.h"

namespace lexguide::kernels {

namespace {

// y (R, Σ n_out) = x (R, n_in) · [parts]ᵀ (+ bias), integer kernels at any R.
void product(const float* x, int64_t R, int64_t n_in, const MatPart* parts, int n_parts,
             const float* bias, float* y, int n_threads, bool simd) {
  int64_t n_out = 0;
  for (int p = 0; p < n_parts; ++p) n_out += parts[p].n_out;
  MatmulArgs a{x, R, n_in, parts, n_parts, nullptr, 0, y, n_out, n_threads, simd};
  matmul(a);
  if (bias) {
    for (int64_t r = 0; r < R; ++r) {
      float* row = y + r * n_out;
      for (int64_t i = 0; i < n_out; ++i) row[i] += bias[i];
    }
  }
}

void add_rows(float* x, const float* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += a[i];
}

// f(r0, r1) over the R rows in chunks on the pool when there are many (a prompt chunk), else
// in the calling thread: the row-wise operations cost ~1/20 of a layer's products.
template <class F>
void over_rows(int64_t R, int n_threads, F&& f) {
  constexpr int64_t kChunk = 16;
  if (R < 2 * kChunk || n_threads == 1) return f(int64_t(0), R);
  shared_pool().run((R + kChunk - 1) / kChunk, n_threads, [&](int64_t k) {
    f(k * kChunk, std::min(R, (k + 1) * kChunk));
  });
}

}  // namespace

namespace {

// GELU(tanh) of every float16 value (ggml_table_gelu_f16): llama.cpp evaluates GELU on x
// rounded to float16 and rounds the result to float16.
const float* gelu_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(1 << 16);
    for (uint32_t i = 0; i < t.size(); ++i) {
      const float f = f16_to_f32(f16_bits(i));
      const float g = 0.5f * f * (1.0f + std::tanh(0.79788456080286535587989211986876f * f *
                                                   (1.0f + 0.044715f * f * f)));
      t[i] = round_f16(g);
    }
    return t;
  }();
  return table.data();
}


// One row of gated_rows, scalar.
void gated_row_scalar(const float* gr, const float* ur, int n_ff, const float* table, float* o) {
  for (int i = 0; i < n_ff; ++i) {
    const float x = gr[i];
    float y;
    if (!table) {
      y = x / (1.0f + ggml_expf(0.0f - x));
    } else if (x <= -10.0f) {
      y = 0.0f;
    } else if (x >= 10.0f) {
      y = x;
    } else {
      y = table[f32_to_f16(x)];
    }
    o[i] = y * ur[i];
  }
}

#ifdef LEXGUIDE_LAYERS_AVX2
__attribute__((target("avx2,fma,f16c"))) void gated_row_avx2(const float* gr, const float* ur,
                                                             int n_ff, const float* table,
                                                             float* o) {
  int i = 0;
  const __m256 lim = _mm256_set1_ps(10.0f);
  for (; i + 8 <= n_ff; i += 8) {
    const __m256 x = _mm256_loadu_ps(gr + i);
    __m256 y;
    if (!table) {
      const __m256 nx = _mm256_sub_ps(_mm256_setzero_ps(), x);
      // |x| ≤ 87 keeps every lane's exponent within ±126: the fast path's range
      const __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
      if (_mm256_movemask_ps(_mm256_cmp_ps(ax, _mm256_set1_ps(87.0f), _CMP_LE_OQ)) != 0xFF) {
        gated_row_scalar(gr + i, ur + i, 8, nullptr, o + i);
        continue;
      }
      y = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), expf8(nx)));
    } else {
      const __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
      if (_mm256_movemask_ps(_mm256_cmp_ps(ax, lim, _CMP_LT_OQ)) != 0xFF) {
        gated_row_scalar(gr + i, ur + i, 8, table, o + i);
        continue;
      }
      alignas(16) uint16_t h[8];
      _mm_store_si128(reinterpret_cast<__m128i*>(h),
                      _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      y = _mm256_setr_ps(table[h[0]], table[h[1]], table[h[2]], table[h[3]], table[h[4]],
                         table[h[5]], table[h[6]], table[h[7]]);
    }
    _mm256_storeu_ps(o + i, _mm256_mul_ps(y, _mm256_loadu_ps(ur + i)));
  }
  gated_row_scalar(gr + i, ur + i, n_ff - i, table, o + i);
}
#endif

}  // namespace

void gated_rows(const float* gate_up, int64_t R, int n_ff, Activation act, float* g) {
  const float* table = act == Activation::GeluTanh ? gelu_table() : nullptr;
#ifdef LEXGUIDE_LAYERS_AVX2
  const bool avx2 = isa() >= Isa::Avx2;
#endif
  for (int64_t r = 0; r < R; ++r) {
    const float* gr = gate_up + r * 2 * int64_t(n_ff);
    float* o = g + r * int64_t(n_ff);
#ifdef LEXGUIDE_LAYERS_AVX2
    if (avx2) {
      gated_row_avx2(gr, gr + n_ff, n_ff, table, o);
      continue;
    }
#endif
    gated_row_scalar(gr, gr + n_ff, n_ff, table, o);
  }
}

void rms_norm_rows(const float* x, const float* w, int64_t R, int n, float eps, float* out) {
  for (int64_t r = 0; r < R; ++r) rms_norm(x + r * n, w, n, eps, out + r * n);
}

void forward_layers(const ModelShape& m, const std::vector<LayerWeights>& layers, float* x,
                    int64_t R, const std::vector<LayerSeq>& seqs, CacheType cache, float* out,
                    int n_threads, bool simd) {
  const int64_t E = m.n_embd, hd = m.hd;
  const int64_t width = int64_t(m.n_q + 2 * m.n_kv) * hd;
  const int64_t n_att = int64_t(m.n_q) * hd;
  std::vector<float> h(size_t(R * E)), qkv(size_t(R * width)), att(size_t(R * n_att)),
      a(size_t(R * E)), gate_up(size_t(R * 2 * m.n_ff)), g(size_t(R * m.n_ff));
  std::vector<AttnSeq> as(seqs.size());
  // the row-wise steps, in row chunks on the pool for a prompt (every row reads only its own)
  auto norm = [&](const float* in, const float* w, float* o) {
    over_rows(R, n_threads, [&](int64_t r0, int64_t r1) {
      rms_norm_rows(in + r0 * E, w, r1 - r0, int(E), m.eps, o + r0 * E);
    });
  };
  auto residual = [&](const float* add) {
    over_rows(R, n_threads, [&](int64_t r0, int64_t r1) {
      add_rows(x + r0 * E, add + r0 * E, (r1 - r0) * E);
    });
  };
  for (size_t il = 0; il < layers.size(); ++il) {
    const LayerWeights& L = layers[il];
    norm(x, L.attn_norm, h.data());
    product(h.data(), R, E, L.qkv, L.n_qkv, L.qkv_bias, qkv.data(), n_threads, simd);
    for (size_t i = 0; i < seqs.size(); ++i) {
      const LayerSeq& s = seqs[i];
      const size_t slab = size_t(m.n_kv) * size_t(s.n_ctx) * cache_row_bytes(cache, int(hd));
      as[i] = {s.row0, s.n_rows, s.pos0, s.k + il * slab, s.v + il * slab, s.n_ctx};
    }
    AttnArgs aa{qkv.data(), att.data(), R, m.n_q, m.n_kv, m.hd, L.q_norm, L.k_norm, m.eps,
                L.cos, L.sin, L.rope_rows, m.n_rot, m.neox, m.query_scale, L.window,
                as.data(), int(as.size()), n_threads, cache};
    attention(aa);
    product(att.data(), R, n_att, &L.wo, 1, L.wo_bias, a.data(), n_threads, simd);
    if (L.post_attn_norm) norm(a.data(), L.post_attn_norm, a.data());
    residual(a.data());

    norm(x, L.ffn_norm, h.data());
    product(h.data(), R, E, L.gate_up, 2, nullptr, gate_up.data(), n_threads, simd);
    over_rows(R, n_threads, [&](int64_t r0, int64_t r1) {
      gated_rows(gate_up.data() + r0 * 2 * m.n_ff, r1 - r0, m.n_ff, m.act, g.data() + r0 * m.n_ff);
    });
    product(g.data(), R, m.n_ff, &L.down, 1, nullptr, a.data(), n_threads, simd);
    if (L.post_ffn_norm) norm(a.data(), L.post_ffn_norm, a.data());
    residual(a.data());
  }
  norm(x, m.output_norm, out);
}

}  // namespace lexguide::kernels
