#include "kernels/layers.h"

#include <algorithm>
#include <cmath>
#include <vector>

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

// gate ← act(gate) · up for R rows of gate_up = [gate (n_ff) | up (n_ff)], into g (R, n_ff);
// the float operations of runtime/model.py's _silu_ / _gelu_tanh_.
void gated(const float* gate_up, int64_t R, int n_ff, Activation act, float* g) {
  for (int64_t r = 0; r < R; ++r) {
    const float* gr = gate_up + r * 2 * int64_t(n_ff);
    const float* ur = gr + n_ff;
    float* o = g + r * int64_t(n_ff);
    for (int i = 0; i < n_ff; ++i) {
      const float x = gr[i];
      float y;
      if (act == Activation::SiLU) {
        y = x / (std::exp(-x) + 1.0f);
      } else {
        float t = x * 0.044715f;
        t *= x;
        t *= x;
        t += x;
        t *= 0.7978845608f;
        t = std::tanh(t);
        t += 1.0f;
        y = x * 0.5f;
        y *= t;
      }
      o[i] = y * ur[i];
    }
  }
}

void add_rows(float* x, const float* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += a[i];
}

}  // namespace

void rms_norm_rows(const float* x, const float* w, int64_t R, int n, float eps, float* out) {
  for (int64_t r = 0; r < R; ++r) rms_norm(x + r * n, w, n, eps, out + r * n);
}

void forward_layers(const ModelShape& m, const std::vector<LayerWeights>& layers, float* x,
                    int64_t R, const std::vector<LayerSeq>& seqs, float* out, int n_threads,
                    bool simd) {
  const int64_t E = m.n_embd, hd = m.hd;
  const int64_t width = int64_t(m.n_q + 2 * m.n_kv) * hd;
  const int64_t n_att = int64_t(m.n_q) * hd;
  std::vector<float> h(size_t(R * E)), qkv(size_t(R * width)), att(size_t(R * n_att)),
      a(size_t(R * E)), gate_up(size_t(R * 2 * m.n_ff)), g(size_t(R * m.n_ff));
  std::vector<AttnSeq> as(seqs.size());
  for (size_t il = 0; il < layers.size(); ++il) {
    const LayerWeights& L = layers[il];
    rms_norm_rows(x, L.attn_norm, R, int(E), m.eps, h.data());
    product(h.data(), R, E, L.qkv, L.n_qkv, L.qkv_bias, qkv.data(), n_threads, simd);
    for (size_t i = 0; i < seqs.size(); ++i) {
      const LayerSeq& s = seqs[i];
      const size_t slab = size_t(m.n_kv) * size_t(s.n_ctx) * size_t(hd);
      as[i] = {s.row0, s.n_rows, s.pos0, s.k + il * slab, s.v + il * slab, s.n_ctx};
    }
    AttnArgs aa{qkv.data(), att.data(), R, m.n_q, m.n_kv, m.hd, L.q_norm, L.k_norm, m.eps,
                L.cos, L.sin, L.rope_rows, m.n_rot, m.neox, m.query_scale, L.window,
                as.data(), int(as.size()), n_threads};
    attention(aa);
    product(att.data(), R, n_att, &L.wo, 1, L.wo_bias, a.data(), n_threads, simd);
    if (L.post_attn_norm) rms_norm_rows(a.data(), L.post_attn_norm, R, int(E), m.eps, a.data());
    add_rows(x, a.data(), R * E);

    rms_norm_rows(x, L.ffn_norm, R, int(E), m.eps, h.data());
    product(h.data(), R, E, L.gate_up, 2, nullptr, gate_up.data(), n_threads, simd);
    gated(gate_up.data(), R, m.n_ff, m.act, g.data());
    product(g.data(), R, m.n_ff, &L.down, 1, nullptr, a.data(), n_threads, simd);
    if (L.post_ffn_norm) rms_norm_rows(a.data(), L.post_ffn_norm, R, int(E), m.eps, a.data());
    add_rows(x, a.data(), R * E);
  }
  rms_norm_rows(x, m.output_norm, R, int(E), m.eps, out);
}

}  // namespace lexguide::kernels
