// Small float loops shared by the attention and layer kernels. Sums run in 8 interleaved
// partial sums added in a fixed tree: the same value whatever the compiler vectorises them to
// (the files including this are built without FMA contraction).
#pragma once

#include <cmath>
#include <cstdint>

namespace lexguide::kernels {

inline float dot8(const float* a, const float* b, int n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) s[j] += a[i + j] * b[i + j];
  }
  for (int j = 0; i < n; ++i, ++j) s[j] += a[i] * b[i];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

// out ← x / sqrt(mean(x²) + eps) · w over n elements (out may be x), as runtime/model.py's
// rms_norm does it.
inline void rms_norm(const float* x, const float* w, int n, float eps, float* out) {
  float ms = dot8(x, x, n);
  ms *= 1.0f / float(n);
  ms += eps;
  ms = std::sqrt(ms);
  for (int i = 0; i < n; ++i) out[i] = x[i] / ms * w[i];
}

}  // namespace lexguide::kernels
