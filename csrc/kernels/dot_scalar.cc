// Portable reference dot products and dequantizers (the results the AVX2 kernels are tested
// against). Each block's contribution is computed in exact integer arithmetic, then scaled in
// float and summed in block order, as ggml's *_ref kernels do.
#include <cstring>

#include "kernels/dot.h"
#include "kernels/unpack.h"

namespace lexguide::kernels {

namespace {

inline int32_t dot_i8(const int8_t* a, const int8_t* b, int n) {
  int32_t s = 0;
  for (int i = 0; i < n; ++i) s += int32_t(a[i]) * int32_t(b[i]);
  return s;
}

// The loop shared by every quantized type: `block_dot(weight block, activation block)`.
template <class Block, class Act, class BlockDot>
void dot_rows(const uint8_t* w, const uint8_t* act, size_t act_stride, int n_act,
              int64_t n_blocks, float* out, size_t out_stride, BlockDot block_dot) {
  const Block* wb = reinterpret_cast<const Block*>(w);
  for (int a = 0; a < n_act; ++a) {
    const Act* ab = reinterpret_cast<const Act*>(act + a * act_stride);
    float sum = 0.0f;
    for (int64_t i = 0; i < n_blocks; ++i) sum += block_dot(wb[i], ab[i]);
    out[a * out_stride] = sum;
  }
}

template <class Elem, float (*Load)(Elem)>
void dot_float(const uint8_t* w, const uint8_t* act, size_t act_stride, int n_act,
               int64_t n, float* out, size_t out_stride) {
  const Elem* wr = reinterpret_cast<const Elem*>(w);
  for (int a = 0; a < n_act; ++a) {
    const float* x = reinterpret_cast<const float*>(act + a * act_stride);
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += Load(wr[i]) * x[i];
    out[a * out_stride] = sum;
  }
}

float load_f32(float v) { return v; }

#define LEXGUIDE_DOT(NAME, BLOCK, ACT, ...)                                                  \
  void NAME(const uint8_t* w, const uint8_t* act, size_t act_stride, int n_act,             \
            int64_t n_blocks, float* out, size_t out_stride) {                              \
    dot_rows<BLOCK, ACT>(w, act, act_stride, n_act, n_blocks, out, out_stride,               \
                         [](const BLOCK& b, const ACT& y) -> float __VA_ARGS__);                 \
  }

LEXGUIDE_DOT(dot_q4_0, BlockQ4_0, ActQ8, {
  int8_t q[kQK];
  unpack_q4_0(b, q);
  return f16_to_f32(b.d) * y.d * float(dot_i8(q, y.qs, kQK));
})

LEXGUIDE_DOT(dot_q4_1, BlockQ4_1, ActQ8, {
  int8_t q[kQK];
  unpack_q4_1(b, q);
  return f16_to_f32(b.d) * y.d * float(dot_i8(q, y.qs, kQK)) + f16_to_f32(b.m) * y.s;
})

LEXGUIDE_DOT(dot_q5_0, BlockQ5_0, ActQ8, {
  int8_t q[kQK];
  unpack_q5(b.qs, b.qh, 16, q);
  return f16_to_f32(b.d) * y.d * float(dot_i8(q, y.qs, kQK));
})

LEXGUIDE_DOT(dot_q5_1, BlockQ5_1, ActQ8, {
  int8_t q[kQK];
  unpack_q5(b.qs, b.qh, 0, q);
  return f16_to_f32(b.d) * y.d * float(dot_i8(q, y.qs, kQK)) + f16_to_f32(b.m) * y.s;
})

LEXGUIDE_DOT(dot_q8_0, BlockQ8_0, ActQ8, {
  return f16_to_f32(b.d) * y.d * float(dot_i8(b.qs, y.qs, kQK));
})

LEXGUIDE_DOT(dot_q2_k, BlockQ2_K, ActQ8K, {
  int8_t q[kQKK];
  unpack_q2_k(b, q);
  int32_t sumi = 0, summ = 0;
  for (int k = 0; k < 16; ++k) {
    sumi += (b.scales[k] & 0x0F) * dot_i8(q + 16 * k, y.qs + 16 * k, 16);
    summ += (b.scales[k] >> 4) * y.bsums[k];
  }
  return y.d * (f16_to_f32(b.d) * float(sumi) - f16_to_f32(b.dmin) * float(summ));
})

LEXGUIDE_DOT(dot_q3_k, BlockQ3_K, ActQ8K, {
  int8_t q[kQKK], sc[16];
  unpack_q3_k(b, q);
  k3_scales(b.scales, sc);
  int32_t sumi = 0;
  for (int k = 0; k < 16; ++k) sumi += sc[k] * dot_i8(q + 16 * k, y.qs + 16 * k, 16);
  return y.d * f16_to_f32(b.d) * float(sumi);
})

inline float q45k_block(float d, float dmin, const uint8_t* scales, const int8_t* q,
                        const ActQ8K& y) {
  uint8_t sc[8], mn[8];
  k4_scale_min(scales, sc, mn);
  int32_t sumi = 0, summ = 0;
  for (int j = 0; j < 8; ++j) {
    sumi += sc[j] * dot_i8(q + 32 * j, y.qs + 32 * j, 32);
    summ += mn[j] * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
  }
  return y.d * (d * float(sumi) - dmin * float(summ));
}

LEXGUIDE_DOT(dot_q4_k, BlockQ4_K, ActQ8K, {
  int8_t q[kQKK];
  unpack_q4_k(b.qs, q);
  return q45k_block(f16_to_f32(b.d), f16_to_f32(b.dmin), b.scales, q, y);
})

LEXGUIDE_DOT(dot_q5_k, BlockQ5_K, ActQ8K, {
  int8_t q[kQKK];
  unpack_q5_k(b, q);
  return q45k_block(f16_to_f32(b.d), f16_to_f32(b.dmin), b.scales, q, y);
})

LEXGUIDE_DOT(dot_q6_k, BlockQ6_K, ActQ8K, {
  int8_t q[kQKK];
  unpack_q6_k(b, q);
  int32_t sumi = 0;
  for (int k = 0; k < 16; ++k) sumi += b.scales[k] * dot_i8(q + 16 * k, y.qs + 16 * k, 16);
  return y.d * f16_to_f32(b.d) * float(sumi);
})

#undef LEXGUIDE_DOT

// Dequantizers: q · scale (− min), in the float operation order of ggml's reference code.
template <class Block, int N, class Fill>
void dequant_blocks(const uint8_t* src, float* dst, int64_t n, Fill fill) {
  const Block* b = reinterpret_cast<const Block*>(src);
  for (int64_t i = 0; i < n / N; ++i) fill(b[i], dst + i * N);
}

// One weight row at a time (the reference has no tiles).
using RowDot = void (*)(const uint8_t* w, const uint8_t* act, size_t act_stride, int n_act,
                        int64_t n_blocks, float* out, size_t out_stride);
template <RowDot F>
void rows(const uint8_t* const* w, int n_w, const uint8_t* act, size_t act_stride, int n_act,
          int64_t n_blocks, float* out, size_t out_stride) {
  for (int r = 0; r < n_w; ++r) F(w[r], act, act_stride, n_act, n_blocks, out + r, out_stride);
}

}  // namespace

DotFn scalar_dot(GgmlType type) {
  switch (type) {
    case GgmlType::F32: return rows<dot_float<float, load_f32>>;
    case GgmlType::F16: return rows<dot_float<f16_bits, f16_to_f32>>;
    case GgmlType::BF16: return rows<dot_float<uint16_t, bf16_to_f32>>;
    case GgmlType::Q4_0: return rows<dot_q4_0>;
    case GgmlType::Q4_1: return rows<dot_q4_1>;
    case GgmlType::Q5_0: return rows<dot_q5_0>;
    case GgmlType::Q5_1: return rows<dot_q5_1>;
    case GgmlType::Q8_0: return rows<dot_q8_0>;
    case GgmlType::Q2_K: return rows<dot_q2_k>;
    case GgmlType::Q3_K: return rows<dot_q3_k>;
    case GgmlType::Q4_K: return rows<dot_q4_k>;
    case GgmlType::Q5_K: return rows<dot_q5_k>;
    case GgmlType::Q6_K: return rows<dot_q6_k>;
  }
  return nullptr;
}

void dequantize_row(GgmlType type, const uint8_t* src, float* dst, int64_t n) {
  int8_t q[kQKK];
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case GgmlType::F16:
    case GgmlType::BF16: {
      const bool half = type == GgmlType::F16;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, src + 2 * i, 2);
        dst[i] = half ? f16_to_f32(v) : bf16_to_f32(v);
      }
      return;
    }
    case GgmlType::Q4_0:
      return dequant_blocks<BlockQ4_0, kQK>(src, dst, n, [&](const BlockQ4_0& b, float* y) {
        unpack_q4_0(b, q);
        const float d = f16_to_f32(b.d);
        for (int i = 0; i < kQK; ++i) y[i] = float(q[i]) * d;
      });
    case GgmlType::Q4_1:
      return dequant_blocks<BlockQ4_1, kQK>(src, dst, n, [&](const BlockQ4_1& b, float* y) {
        unpack_q4_1(b, q);
        const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
        for (int i = 0; i < kQK; ++i) y[i] = float(q[i]) * d + m;
      });
    case GgmlType::Q5_0:
      return dequant_blocks<BlockQ5_0, kQK>(src, dst, n, [&](const BlockQ5_0& b, float* y) {
        unpack_q5(b.qs, b.qh, 16, q);
        const float d = f16_to_f32(b.d);
        for (int i = 0; i < kQK; ++i) y[i] = float(q[i]) * d;
      });
    case GgmlType::Q5_1:
      return dequant_blocks<BlockQ5_1, kQK>(src, dst, n, [&](const BlockQ5_1& b, float* y) {
        unpack_q5(b.qs, b.qh, 0, q);
        const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
        for (int i = 0; i < kQK; ++i) y[i] = float(q[i]) * d + m;
      });
    case GgmlType::Q8_0:
      return dequant_blocks<BlockQ8_0, kQK>(src, dst, n, [&](const BlockQ8_0& b, float* y) {
        const float d = f16_to_f32(b.d);
        for (int i = 0; i < kQK; ++i) y[i] = float(b.qs[i]) * d;
      });
    case GgmlType::Q2_K:
      return dequant_blocks<BlockQ2_K, kQKK>(src, dst, n, [&](const BlockQ2_K& b, float* y) {
        unpack_q2_k(b, q);
        const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
        for (int k = 0; k < 16; ++k) {
          const float dl = d * float(b.scales[k] & 0x0F), ml = dmin * float(b.scales[k] >> 4);
          for (int i = 0; i < 16; ++i) y[16 * k + i] = float(q[16 * k + i]) * dl - ml;
        }
      });
    case GgmlType::Q3_K:
      return dequant_blocks<BlockQ3_K, kQKK>(src, dst, n, [&](const BlockQ3_K& b, float* y) {
        int8_t sc[16];
        unpack_q3_k(b, q);
        k3_scales(b.scales, sc);
        const float d = f16_to_f32(b.d);
        for (int k = 0; k < 16; ++k) {
          const float dl = d * float(sc[k]);
          for (int i = 0; i < 16; ++i) y[16 * k + i] = float(q[16 * k + i]) * dl;
        }
      });
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      const bool five = type == GgmlType::Q5_K;
      const int bytes = five ? int(sizeof(BlockQ5_K)) : int(sizeof(BlockQ4_K));
      for (int64_t i = 0; i < n / kQKK; ++i) {
        const uint8_t* blk = src + i * bytes;
        if (five) {
          unpack_q5_k(*reinterpret_cast<const BlockQ5_K*>(blk), q);
        } else {
          unpack_q4_k(reinterpret_cast<const BlockQ4_K*>(blk)->qs, q);
        }
        const BlockQ4_K& head = *reinterpret_cast<const BlockQ4_K*>(blk);  // d, dmin, scales
        uint8_t sc[8], mn[8];
        k4_scale_min(head.scales, sc, mn);
        const float d = f16_to_f32(head.d), dmin = f16_to_f32(head.dmin);
        float* y = dst + i * kQKK;
        for (int j = 0; j < 8; ++j) {
          const float dl = d * float(sc[j]), ml = dmin * float(mn[j]);
          for (int l = 0; l < 32; ++l) y[32 * j + l] = float(q[32 * j + l]) * dl - ml;
        }
      }
      return;
    }
    case GgmlType::Q6_K:
      return dequant_blocks<BlockQ6_K, kQKK>(src, dst, n, [&](const BlockQ6_K& b, float* y) {
        unpack_q6_k(b, q);
        const float d = f16_to_f32(b.d);
        for (int k = 0; k < 16; ++k) {
          const float dl = d * float(b.scales[k]);
          for (int i = 0; i < 16; ++i) y[16 * k + i] = float(q[16 * k + i]) * dl;
        }
      });
  }
}

}  // namespace lexguide::kernels
