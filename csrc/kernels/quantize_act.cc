#include "kernels/quantize_act.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace lexguide::kernels {

namespace {
// nearbyint in the default mode (half to even) for |v| ≤ 2^22: adding 1.5·2^23 leaves no
// fraction bits, so the sum is rounded to an integer by the FPU's own rounding.
inline int round_even(float v) {
  constexpr float kBig = 12582912.0f;  // not folded away: (v + b) − b ≠ v in IEEE arithmetic
  return int((v + kBig) - kBig);
}
}  // namespace

void quantize_row_q8(const float* x, ActQ8* out, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    // ggml's x86 quantize_row_q8_0 / q8_1 (what llama.cpp runs on an AVX2 machine): the
    // scale 127 / amax, not 1 / d, and rounding half to even (_mm256_round_ps), not roundf
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < kQK; ++j) {
      const int q = round_even(x[j] * id);
      out[b].qs[j] = int8_t(q);
      sum += q;
    }
    out[b].d = round_f16(d);
    out[b].s = round_f16(d * float(sum));
    out[b].isum = sum;
  }
}

void quantize_row_q8k(const float* x, ActQ8K* out, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    ActQ8K& y = out[b];
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQKK; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y, 0, sizeof(y));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQKK; ++j) {
      const int v = round_even(iscale * x[j]);
      y.qs[j] = int8_t(std::min(127, std::max(-127, v)));
    }
    for (int k = 0; k < kQKK / 16; ++k) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y.qs[16 * k + j];
      y.bsums[k] = int16_t(sum);
    }
    y.d = 1.0f / iscale;
  }
}

void quantize_act_row(ActKind kind, const float* x, uint8_t* out, int64_t n) {
  switch (kind) {
    case ActKind::F32: std::memcpy(out, x, size_t(n) * sizeof(float)); break;
    case ActKind::Q8: quantize_row_q8(x, reinterpret_cast<ActQ8*>(out), n); break;
    case ActKind::Q8K: quantize_row_q8k(x, reinterpret_cast<ActQ8K*>(out), n); break;
  }
}

namespace {
template <class Act, int N, void (*Quantize)(const float*, Act*, int64_t)>
void roundtrip_blocks(const float* x, float* out, int64_t n) {
  for (int64_t b = 0; b < n / N; ++b) {
    Act y;
    Quantize(x + b * N, &y, N);
    for (int j = 0; j < N; ++j) out[b * N + j] = y.d * float(y.qs[j]);
  }
}
}  // namespace

void roundtrip_act_row(ActKind kind, const float* x, float* out, int64_t n) {
  switch (kind) {
    case ActKind::F32: std::memcpy(out, x, size_t(n) * sizeof(float)); return;
    case ActKind::Q8: return roundtrip_blocks<ActQ8, kQK, quantize_row_q8>(x, out, n);
    case ActKind::Q8K: return roundtrip_blocks<ActQ8K, kQKK, quantize_row_q8k>(x, out, n);
  }
}

}  // namespace lexguide::kernels
