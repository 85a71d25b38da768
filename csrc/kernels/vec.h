// Small float functions shared by the attention and layer kernels, each rounding as llama.cpp's
// CPU backend does (the files including this are built without FMA contraction; fused
// multiply-adds are written out as std::fma where ggml uses them).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace lexguide::kernels {

// out ← (x · (1 / sqrt(mean(x²) + eps))) · w over n elements (out may be x), as ggml does it
// (llama.cpp's RMSNorm then its multiply by the weight): squares summed in double, in order.
// Each rounding differs from x / sqrt(…) · w in the last bit now and then, and over the layers
// such bits decide Q8 activation roundings: matching ggml's order is what keeps our logits
// equal to llama.cpp's (runtime/model.py's rms_norm does the same).
inline void rms_norm(const float* x, const float* w, int n, float eps, float* out) {
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += double(x[i] * x[i]);
  const float mean = float(sum / double(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int i = 0; i < n; ++i) out[i] = (x[i] * scale) * w[i];
}

// The constants of ggml's SIMD expf (ggml_v_expf of ggml-cpu/vec.h): x·log2 e rounded to n by
// adding 1.5·2^23, the reduced argument b = x − n·ln 2 with ln 2 split in two parts, and the
// polynomial's coefficients. ggml_expf, expf8 and attention.cc's expf16 all read them here.
namespace expf_c {
constexpr float kRound = 0x1.8p23f, kLog2e = 0x1.715476p+0f;
constexpr float kLn2Hi = 0x1.62e4p-1f, kLn2Lo = 0x1.7f7d1cp-20f;
constexpr float kC5 = 0x1.0e4020p-7f, kC4 = 0x1.573e2ep-5f, kC3 = 0x1.555e66p-3f,
                kC2 = 0x1.fffdb6p-2f, kC1 = 0x1.ffffecp-1f;
}  // namespace expf_c

// ggml's SIMD expf, one lane: llama.cpp's SiLU runs through it, and it differs from libm's expf
// in the last bit now and then.
inline float ggml_expf(float x) {
  using namespace expf_c;
  const float z = std::fma(x, kLog2e, kRound);
  const float n = z - kRound;
  if (!(std::fabs(n) <= 126.0f)) return std::exp(x);  // ±overflow / underflow ranges (and NaN)
  const float b = std::fma(-n, kLn2Lo, std::fma(-n, kLn2Hi, x));
  uint32_t zi, one;
  std::memcpy(&zi, &z, 4);
  const float f1 = 1.0f;
  std::memcpy(&one, &f1, 4);
  const uint32_t ki = (zi << 23) + one;  // 2^n
  float k;
  std::memcpy(&k, &ki, 4);
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(kC5, b, kC4), u, std::fma(kC3, b, kC2)), u, kC1 * b);
  return std::fma(j, k, k);
}

#if defined(__x86_64__) || defined(__i386__)
// ggml_expf on 8 lanes where every |round(x·log2 e)| ≤ 126 (the caller checks; else scalar).
__attribute__((target("avx2,fma"))) static inline __m256 expf8(__m256 x) {
  using namespace expf_c;
  const __m256 r = _mm256_set1_ps(kRound);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(kLog2e), r);
  const __m256 n = _mm256_sub_ps(z, r);
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo),
                                    _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x));
  const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(
      _mm256_slli_epi32(_mm256_castps_si256(z), 23), _mm256_castps_si256(_mm256_set1_ps(1.0f))));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 hi = _mm256_fmadd_ps(_mm256_set1_ps(kC5), b, _mm256_set1_ps(kC4));
  const __m256 lo = _mm256_fmadd_ps(_mm256_set1_ps(kC3), b, _mm256_set1_ps(kC2));
  const __m256 j = _mm256_fmadd_ps(_mm256_fmadd_ps(hi, u, lo), u,
                                   _mm256_mul_ps(_mm256_set1_ps(kC1), b));
  return _mm256_fmadd_ps(j, k, k);
}

#endif

}  // namespace lexguide::kernels
