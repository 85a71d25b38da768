#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/thread_pool.h"
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
        std::memcpy(s.k + at, row + int64_t(a.n_q + h) * hd, size_t(hd) * sizeof(float));
        std::memcpy(s.v + at, row + int64_t(a.n_q + a.n_kv + h) * hd, size_t(hd) * sizeof(float));
      }
    }
  }

  // 2. one task per (sequence, query head): every row of the sequence for that head
  auto task = [&](int64_t k) {
    const AttnSeq& s = a.seqs[k / a.n_q];
    const int h = int(k % a.n_q);
    const int kv = h / g;
    const float* keys = s.k + size_t(kv) * size_t(s.n_ctx) * size_t(hd);
    const float* vals = s.v + size_t(kv) * size_t(s.n_ctx) * size_t(hd);
    thread_local std::vector<float> scores;
    for (int64_t t = 0; t < s.n_rows; ++t) {
      const int64_t p = s.pos0 + t;
      const int64_t start = a.window ? std::max<int64_t>(0, p - a.window + 1) : 0;
      const int64_t n = p + 1 - start;
      scores.resize(size_t(n));
      const float* q = a.qkv + (s.row0 + t) * width + int64_t(h) * hd;
      float top = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        float sc = dot8(q, keys + size_t(start + j) * size_t(hd), hd);
        sc *= a.scale;
        scores[size_t(j)] = sc;
        top = std::max(top, sc);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < n; ++j) {
        const float e = std::exp(scores[size_t(j)] - top);
        scores[size_t(j)] = e;
        sum += e;
      }
      float* o = a.out + (s.row0 + t) * int64_t(a.n_q) * hd + int64_t(h) * hd;
      std::fill(o, o + hd, 0.0f);
      for (int64_t j = 0; j < n; ++j) {
        const float pj = scores[size_t(j)] / sum;
        const float* vr = vals + size_t(start + j) * size_t(hd);
        for (int d = 0; d < hd; ++d) o[d] += pj * vr[d];
      }
    }
  };
  shared_pool().run(int64_t(a.n_seqs) * a.n_q, a.n_threads, task);
}

}  // namespace lexguide::kernels
