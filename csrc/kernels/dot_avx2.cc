// AVX2/FMA/F16C dot products (this file is compiled with -mavx2 -mfma -mf16c; matmul.cc calls
// it only when isa() >= Isa::Avx2, cpu.h). Each kernel mirrors its scalar reference in dot_scalar.cc:
// per block, unpack the weight quants once to unsigned bytes, multiply with every activation
// row (maddubs: u8 × s8 → pairs of i16, then madd → i32: exact, no saturation for these
// ranges), scale in float; the per-element offsets (Q4_0 −8, Q5_0 −16, Q3_K −4,
// Q6_K −32) and the min terms are applied through the activation's exact integer sums.
// Results differ from the scalar path only by float32 summation order (Q2_K .. Q6_K: the
// min and offset terms are subtracted after the scaled sums, not inside each block's float
// expression).
//
// A call computes a tile of up to 4 weight rows × 4 activation rows (the k-quants: one weight
// row × up to 8 activation rows, their unpacked super-block shared by both groups of 4): each
// weight block is unpacked once per tile and each activation block loaded once per tile, and
// the independent accumulators of a tile hide the FMA latency (which a single row used to hide
// with two accumulators per output, taken by even and odd blocks). The k-quants' min and
// offset terms (Σ mins·bsums, Σ scales·bsums) are int16 madds, not scalar loops.
#include <immintrin.h>

#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/dot.h"
#include "kernels/unpack.h"

namespace lexguide::kernels {

namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float half(f16_bits h) { return _cvtsh_ss(h); }

// 16 bytes of packed nibbles → 32 bytes: low nibbles (elements 0..15), then high (16..31).
inline __m256i nibbles_32(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Bit j of the 32-bit qh field → byte j as 0x10 (set) or 0 (clear).
inline __m256i high_bits_32(const uint8_t* qh4) {
  uint32_t qh;
  std::memcpy(&qh, qh4, 4);
  // byte j takes byte j/8 of qh (shuffles stay inside each 128-bit half)
  const __m256i pick = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                         0x0101010101010101, 0x0000000000000000);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(int(qh)), pick);
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201ULL));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

inline __m256i load32(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Σ over 32 lanes of u8 q × s8 y, as 8 int32 partial sums.
inline __m256i dot_u8s8(__m256i q, __m256i y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), _mm256_set1_epi16(1));
}

// Lane a (< NA) of the result = Σ of the 8 int32 lanes of v[a], 0 in the other lanes (exact
// integer sums: the same values as a scalar loop in any order).
template <int NA>
inline __m128i hsums_epi32(const __m256i* v) {
  const __m256i z = _mm256_setzero_si256();
  const __m256i v1 = NA > 1 ? v[1] : z, v2 = NA > 2 ? v[2] : z, v3 = NA > 3 ? v[3] : z;
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v1), _mm256_hadd_epi32(v2, v3));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// The 16 int16 bsums of a Q8_K block (sums of 16 quants each).
inline __m256i bsums16(const ActQ8K& y) { return load32(y.bsums); }

// A tile of R weight rows × NA activation rows (NA ≤ 4). Every output (r, a) has exactly one
// vector accumulator, updated once per block in block order, and one lane of ex[r] for its
// scalar terms (offsets, mins, tails): the arithmetic of an output is the same whatever tile
// shape computes it, so a row's result never depends on the other rows of a product.
template <int R, int NA>
struct Tile {
  __m256 acc[R][NA];
  __m128 ex[R];
  Tile() {
    for (int r = 0; r < R; ++r) {
      ex[r] = _mm_setzero_ps();
      for (int a = 0; a < NA; ++a) acc[r][a] = _mm256_setzero_ps();
    }
  }
  void store(float* out, size_t out_stride) const {
    for (int r = 0; r < R; ++r) {
      alignas(16) float e[4];
      _mm_store_ps(e, ex[r]);
      for (int a = 0; a < NA; ++a) out[a * out_stride + r] = hsum(acc[r][a]) + e[a];
    }
  }
};

// The activation rows of a one-weight-row tile of NA ≤ 8 rows, in groups of ≤ 4 (each a Tile
// of its own: the same lanes and operations as a tile of that group alone). each(act, stride,
// f) calls f(tile, first row of the group, integral_constant<int, rows>) per group.
template <int NA>
struct ActGroups {
  static constexpr int N0 = NA < 4 ? NA : 4;
  static constexpr int N1 = NA - N0;
  static_assert(N1 <= 4, "at most 8 activation rows");
  Tile<1, N0> t0;
  Tile<1, (N1 > 0 ? N1 : 1)> t1;
  template <class F>
  void each(const uint8_t* act, size_t stride, F&& f) {
    f(t0, act, std::integral_constant<int, N0>{});
    if constexpr (N1 > 0) f(t1, act + 4 * stride, std::integral_constant<int, N1>{});
  }
  void store(float* out, size_t out_stride) const {
    t0.store(out, out_stride);
    if constexpr (N1 > 0) t1.store(out + 4 * out_stride, out_stride);
  }
};

// Lane a of v in all 8 lanes.
template <int A>
inline __m256 lane(__m128 v) {
  if constexpr (A == 0) {
    return _mm256_broadcastss_ps(v);
  } else {
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_set1_epi32(A));
  }
}

// Unrolled loops with compile-time indices (the accumulators stay in registers).
template <int N, class F, int... I>
inline void unroll_impl(F&& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, class F>
inline void unroll(F&& f) {
  unroll_impl<N>(f, std::make_integer_sequence<int, N>{});
}

// Four floats at(0) .. at(NA - 1), zero in unused lanes, built in registers (a store of
// scalars reloaded as a vector stalls on store forwarding).
template <int NA, class At>
inline __m128 lanes_of(At at) {
  if constexpr (NA == 1) {
    return _mm_set_ss(at(0));
  } else if constexpr (NA == 2) {
    return _mm_setr_ps(at(0), at(1), 0.0f, 0.0f);
  } else if constexpr (NA == 3) {
    return _mm_setr_ps(at(0), at(1), at(2), 0.0f);
  } else {
    return _mm_setr_ps(at(0), at(1), at(2), at(3));
  }
}

// A float of each of the NA activation rows' blocks i, as lanes.
template <int NA, class Act, class Get>
inline __m128 act_lanes(const uint8_t* act, size_t act_stride, int64_t i, Get get) {
  return lanes_of<NA>(
      [&](int a) { return get(reinterpret_cast<const Act*>(act + a * act_stride)[i]); });
}

// Weight rows are streamed from memory once per product (decode): each block read is paired
// with a prefetch of the same block kPrefetchTiles tiles of kMaxW rows ahead, when the call's
// rows are consecutive in memory (not for a selected subset of rows). Measured on 72 MB Q4_1
// and 68 MB Q8_0 matrices, one row of x, 2 threads, loaded machine, alternating runs: Q8_0
// 8.1-9.8 → 4.6-7.2 ns per block, Q4_1 3.1-4.6 → 2.8-4.2 ns.
constexpr int64_t kPrefetchTiles = 2;

// Prefetch the n bytes at p (cache lines of 64 bytes).
inline void prefetch(const uint8_t* p, int64_t n) {
  for (int64_t o = 0; o < n; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + o), _MM_HINT_T0);
}

// The 32-element types: Unpack(block) → u8 quants (Signed: s8 quants, multiplied as
// |q| · (y · sign q)); Offset: the value ggml subtracts (0 when the type has a min);
// HasMin: add m·s.
template <class Block, int Offset, bool HasMin, class Unpack, bool Signed = false>
struct Dot32 {
  // One activation row (decode): weight rows one at a time, each streamed in address order.
  // Tiles of 4 interleaved rows streamed slower from memory: 100 MB matrices, one thread,
  // loaded machine, min of 20, two rounds: Q8_0 (640 wide) 4.1-4.2 → 2.5-3.4 ns per block,
  // Q4_1 (1536 wide) 3.3-3.4 → 2.3-2.4 ns (576 wide: 2.8-4.1 → 2.9-3.7).
  static constexpr int kMaxRows(int n_act) { return n_act == 1 ? 1 : n_act == 2 ? 4 : 2; }
  static constexpr int64_t kBlockBytes = sizeof(Block);
  static constexpr bool kWide = false;  // ≤ 4 activation rows per tile (registers)
  template <int R, int NA>
  static void run(const uint8_t* const* w, const uint8_t* act, size_t act_stride,
                  int64_t n_blocks, float* out, size_t out_stride, int64_t ahead) {
    Tile<R, NA> t;
    __m256 acc[R][NA];  // local copies: the compiler keeps them in registers
    __m128 ex[R];
    for (int r = 0; r < R; ++r) {
      ex[r] = t.ex[r];
      for (int a = 0; a < NA; ++a) acc[r][a] = t.acc[r][a];
    }
    const ActQ8* y[NA];
    for (int a = 0; a < NA; ++a) y[a] = reinterpret_cast<const ActQ8*>(act + a * act_stride);
    for (int64_t i = 0; i < n_blocks; ++i) {
      const __m128 dy = act_lanes<NA, ActQ8>(act, act_stride, i, [](const ActQ8& b) { return b.d; });
      __m128 corr = _mm_setzero_ps();  // Σq·Offset or s per activation row
      if constexpr (Offset != 0) {
        corr = act_lanes<NA, ActQ8>(act, act_stride, i,
                                    [](const ActQ8& b) { return float(Offset * b.isum); });
      } else if constexpr (HasMin) {
        corr = act_lanes<NA, ActQ8>(act, act_stride, i, [](const ActQ8& b) { return b.s; });
      }
      // weight row by weight row: its unpacked block and scales are consumed at once
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const Block& b = reinterpret_cast<const Block*>(w[r])[i];
        if (ahead) prefetch(reinterpret_cast<const uint8_t*>(&b) + ahead, 1);
        const __m256i q = Unpack{}(b);
        // |q| as u8 (−128 → 128, correct unsigned)
        const __m256i aq = Signed ? _mm256_sign_epi8(q, q) : q;
        alignas(16) float dd[4];  // d · y.d per activation row, broadcast from memory below
        __m128 dw;
        if constexpr (HasMin) {  // d and m side by side: one conversion of both (exact)
          uint32_t dm;
          std::memcpy(&dm, &b.d, 4);
          static_assert(offsetof(Block, m) == offsetof(Block, d) + 2, "d, m adjacent");
          const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(int(dm)));
          dw = _mm_broadcastss_ps(f);
          ex[r] = _mm_fmadd_ps(_mm_permute_ps(f, 0x55), corr, ex[r]);
        } else {
          dw = _mm_set1_ps(half(b.d));
        }
        const __m128 ddv = _mm_mul_ps(dw, dy);
        _mm_store_ps(dd, ddv);
        if constexpr (Offset != 0) ex[r] = _mm_fnmadd_ps(ddv, corr, ex[r]);
#pragma GCC unroll 4
        for (int a = 0; a < NA; ++a) {
          const __m256i ya = load32(y[a][i].qs);
          const __m256i sy = Signed ? _mm256_sign_epi8(ya, q) : ya;  // y · sign(q)
          const __m256 p = _mm256_cvtepi32_ps(dot_u8s8(aq, sy));
          acc[r][a] = _mm256_fmadd_ps(_mm256_broadcast_ss(dd + a), p, acc[r][a]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      t.ex[r] = ex[r];
      for (int a = 0; a < NA; ++a) t.acc[r][a] = acc[r][a];
    }
    t.store(out, out_stride);
  }
};

struct UnpackQ4_0 { __m256i operator()(const BlockQ4_0& b) const { return nibbles_32(b.qs); } };
struct UnpackQ4_1 { __m256i operator()(const BlockQ4_1& b) const { return nibbles_32(b.qs); } };
struct UnpackQ5_0 {
  __m256i operator()(const BlockQ5_0& b) const {
    return _mm256_or_si256(nibbles_32(b.qs), high_bits_32(b.qh));
  }
};
struct UnpackQ5_1 {
  __m256i operator()(const BlockQ5_1& b) const {
    return _mm256_or_si256(nibbles_32(b.qs), high_bits_32(b.qh));
  }
};

using Q4_0 = Dot32<BlockQ4_0, 8, false, UnpackQ4_0>;
using Q4_1 = Dot32<BlockQ4_1, 0, true, UnpackQ4_1>;
using Q5_0 = Dot32<BlockQ5_0, 16, false, UnpackQ5_0>;
using Q5_1 = Dot32<BlockQ5_1, 0, true, UnpackQ5_1>;
struct UnpackQ8_0 { __m256i operator()(const BlockQ8_0& b) const { return load32(b.qs); } };
using Q8_0 = Dot32<BlockQ8_0, 0, false, UnpackQ8_0, true>;

// One group of N ≤ 4 activation rows (Q8_K blocks i) against an unpacked k-quant super-block:
// q[j] the unsigned quants of sub-block j (32 elements), scale[j] its int16 scales (per
// 16-element half), corr the int16 factors of the 16 bsums for the min/offset term. Per row:
// acc += (d · y.d) · Σ_j madd(maddubs(q[j], y), scale[j]);  ex −= (dc · y.d) · (Σ corr·bsums
// << Shift). The integer sums are exact; the float operations those of the scalar reference.
template <int N, int Shift>
inline void k_group(Tile<1, N>& t, const uint8_t* ag, size_t stride, int64_t i,
                    const __m256i* q, const __m256i* scale, __m256i corr, float d, float dc) {
  const __m128 dy = act_lanes<N, ActQ8K>(ag, stride, i, [](const ActQ8K& y) { return y.d; });
  const __m128 dd = _mm_mul_ps(dy, _mm_set1_ps(d));
  __m256i csum[N];
  unroll<N>([&](auto a) {
    const ActQ8K& y = reinterpret_cast<const ActQ8K*>(ag + a * stride)[i];
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i p16 = _mm256_maddubs_epi16(q[j], load32(y.qs + 32 * j));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, scale[j]));
    }
    csum[a] = _mm256_madd_epi16(bsums16(y), corr);
    t.acc[0][a] = _mm256_fmadd_ps(lane<a>(dd), _mm256_cvtepi32_ps(sumi), t.acc[0][a]);
  });
  const __m128 dm = _mm_mul_ps(dy, _mm_set1_ps(dc));
  const __m128 corr_f = _mm_cvtepi32_ps(_mm_slli_epi32(hsums_epi32<N>(csum), Shift));
  t.ex[0] = _mm_fnmadd_ps(dm, corr_f, t.ex[0]);
}

// The k-quant kernels: per super-block, U::unpack(block, q, scale, corr, d, dc) gives the
// operands of k_group, which every group of ≤ 4 activation rows of the tile then reads (one
// weight row × up to 8 activation rows per tile: the unpacked block fills 16 registers).
template <class U>
struct KQuant {
  using Block = typename U::Block;
  static constexpr int kMaxRows(int) { return 1; }
  static constexpr int64_t kBlockBytes = sizeof(Block);
  static constexpr bool kWide = true;  // up to 8 activation rows per tile
  template <int R, int NA>
  static void run(const uint8_t* const* w, const uint8_t* act, size_t act_stride,
                  int64_t n_blocks, float* out, size_t out_stride, int64_t ahead) {
    static_assert(R == 1, "one weight row per tile");
    const Block* wb = reinterpret_cast<const Block*>(w[0]);
    ActGroups<NA> g;
    for (int64_t i = 0; i < n_blocks; ++i) {
      const Block& b = wb[i];
      if (ahead) prefetch(reinterpret_cast<const uint8_t*>(&b) + ahead, sizeof(Block));
      __m256i q[8], scale[8], corr;
      float d, dc;
      U::unpack(b, q, scale, corr, d, dc);
      g.each(act, act_stride, [&](auto& t, const uint8_t* ag, auto n) {
        k_group<decltype(n)::value, U::kShift>(t, ag, act_stride, i, q, scale, corr, d, dc);
      });
    }
    g.store(out, out_stride);
  }
};

// Scales of sub-blocks 2k and 2k + 1 (16 elements each) as the int16 halves of scale[k].
template <class Scale>
inline void pair_scales(Scale sc, __m256i scale[8]) {
  for (int k = 0; k < 8; ++k) {
    scale[k] = _mm256_set_m128i(_mm_set1_epi16(int16_t(sc(2 * k + 1))),
                                _mm_set1_epi16(int16_t(sc(2 * k))));
  }
}

// Q2_K: 16 sub-blocks of 16 with 4-bit scales and mins, 2-bit quants; Q3_K: 2-bit quants plus
// a high bit (set: +0, clear: −4, applied as +4 and an offset −4·Σ sc·bsums), signed 6-bit
// scales. The 2-bit fields of element 128h + 32j + l: (qs[32h + l] >> 2j) & 3; Q3_K's high
// bit: hmask[l] bit 4h + j.
template <bool Three>
struct Unpack23_K {
  using Block = std::conditional_t<Three, BlockQ3_K, BlockQ2_K>;
  static constexpr int kShift = Three ? 2 : 0;  // × 4: the offset; Q2_K's mins as they are
  static void unpack(const Block& b, __m256i* q, __m256i* scale, __m256i& corr, float& d,
                     float& dc) {
    const __m256i three = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256i hm = _mm256_setzero_si256();
    if constexpr (Three) hm = load32(b.hmask);
    for (int h = 0; h < 2; ++h) {
      const __m256i raw = load32(b.qs + 32 * h);
      for (int j = 0; j < 4; ++j) {
        q[4 * h + j] = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), three);
        if constexpr (Three) {
          const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), one);
          q[4 * h + j] = _mm256_or_si256(q[4 * h + j], _mm256_slli_epi16(hb, 2));
        }
      }
    }
    d = half(b.d);
    if constexpr (Three) {
      int8_t sc[16];
      k3_scales(b.scales, sc);
      pair_scales([&](int k) { return sc[k]; }, scale);
      corr = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
      dc = d;
    } else {
      pair_scales([&](int k) { return b.scales[k] & 0x0F; }, scale);
      const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
      corr = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), _mm_set1_epi8(0x0F)));
      dc = half(b.dmin);
    }
  }
};

// Q4_K / Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins.
template <bool Five>
struct Unpack45_K {
  using Block = std::conditional_t<Five, BlockQ5_K, BlockQ4_K>;
  static constexpr int kShift = 0;
  static void unpack(const Block& b, __m256i* q, __m256i* scale, __m256i& corr, float& d,
                     float& dc) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    uint8_t sc[8], mn[8];
    k4_scale_min(b.scales, sc, mn);
    __m256i qh = _mm256_setzero_si256();
    if constexpr (Five) qh = load32(b.qh);
    for (int j = 0; j < 4; ++j) {
      const __m256i raw = load32(b.qs + 32 * j);
      q[2 * j] = _mm256_and_si256(raw, low4);
      q[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
      if constexpr (Five) {
        const __m256i one = _mm256_set1_epi8(1);
        for (int u = 0; u < 2; ++u) {
          const __m256i bit = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + u), one);
          q[2 * j + u] = _mm256_or_si256(q[2 * j + u], _mm256_slli_epi16(bit, 4));
        }
      }
    }
    for (int j = 0; j < 8; ++j) scale[j] = _mm256_set1_epi16(sc[j]);
    // Σ_j mn[j]·(bsums[2j] + bsums[2j+1]): each min twice, against the 16 bsums
    const __m128i mn8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(mn));
    corr = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));
    d = half(b.d);
    dc = half(b.dmin);
  }
};

// Q6_K: 4 low bits in ql, 2 high bits in qh, signed 8-bit scales of 16 elements, offset −32.
struct Unpack6_K {
  using Block = BlockQ6_K;
  static constexpr int kShift = 5;  // × 32
  static void unpack(const Block& b, __m256i* q, __m256i* scale, __m256i& corr, float& d,
                     float& dc) {
    unpack_q6_k_groups(b, q);  // group 4h + k: elements 128h + 32k .. +32, unsigned 0..63
    pair_scales([&](int k) { return b.scales[k]; }, scale);
    corr = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    d = dc = half(b.d);
  }
};

using Q2_K = KQuant<Unpack23_K<false>>;
using Q3_K = KQuant<Unpack23_K<true>>;
using Q4_K = KQuant<Unpack45_K<false>>;
using Q5_K = KQuant<Unpack45_K<true>>;
using Q6_K = KQuant<Unpack6_K>;

// Float weights: 8 elements per step, scalar tail (in the ex lanes).
template <class Elem>
inline __m256 load8(const Elem* p);
template <>
inline __m256 load8<float>(const float* p) { return _mm256_loadu_ps(p); }
template <>
inline __m256 load8<uint16_t>(const uint16_t* p) {  // float16
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
struct Bf16 { uint16_t v; };
template <>
inline __m256 load8<Bf16>(const Bf16* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
inline float load1(float v) { return v; }
inline float load1(uint16_t v) { return half(v); }
inline float load1(Bf16 v) { return bf16_to_f32(v.v); }

template <class Elem>
struct DotFloat {
  static constexpr int kMaxRows(int n_act) { return n_act <= 2 ? 4 : 2; }
  static constexpr int64_t kBlockBytes = sizeof(Elem);  // a "block" is one element
  static constexpr bool kWide = false;
  template <int R, int NA>
  static void run(const uint8_t* const* w, const uint8_t* act, size_t act_stride, int64_t n,
                  float* out, size_t out_stride, int64_t ahead) {
    Tile<R, NA> t;
    auto x = [&](int a) { return reinterpret_cast<const float*>(act + a * act_stride); };
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      if (ahead) {
        for (int r = 0; r < R; ++r) prefetch(w[r] + i * int64_t(sizeof(Elem)) + ahead, 1);
      }
      __m256 wv[R];
      unroll<R>([&](auto r) { wv[r] = load8<Elem>(reinterpret_cast<const Elem*>(w[r]) + i); });
      unroll<NA>([&](auto a) {
        const __m256 xv = _mm256_loadu_ps(x(a) + i);
        unroll<R>([&](auto r) { t.acc[r][a] = _mm256_fmadd_ps(wv[r], xv, t.acc[r][a]); });
      });
    }
    for (; i < n; ++i) {
      const __m128 xs = lanes_of<NA>([&](int a) { return x(a)[i]; });
      unroll<R>([&](auto r) {
        const float wv = load1(reinterpret_cast<const Elem*>(w[r])[i]);
        t.ex[r] = _mm_fmadd_ps(_mm_set1_ps(wv), xs, t.ex[r]);
      });
    }
    t.store(out, out_stride);
  }
};
using F32 = DotFloat<float>;
using F16 = DotFloat<uint16_t>;
using BF16 = DotFloat<Bf16>;

// Tiles of up to K::kMaxRows(NA) weight rows over the n_w rows.
template <class K, int NA>
void run_rows(const uint8_t* const* w, int n_w, const uint8_t* act, size_t s, int64_t nb,
              float* out, size_t os, int64_t ahead) {
  constexpr int kMax = K::kMaxRows(NA);
  int r = 0;
  if constexpr (kMax >= 4) {
    for (; r + 4 <= n_w; r += 4) K::template run<4, NA>(w + r, act, s, nb, out + r, os, ahead);
  }
  if constexpr (kMax >= 2) {
    for (; r + 2 <= n_w; r += 2) K::template run<2, NA>(w + r, act, s, nb, out + r, os, ahead);
  }
  for (; r < n_w; ++r) K::template run<1, NA>(w + r, act, s, nb, out + r, os, ahead);
}

template <class K>
void dot(const uint8_t* const* w, int n_w, const uint8_t* act, size_t s, int n_act, int64_t nb,
         float* out, size_t os) {
  // consecutive rows (a whole matrix, not a selection): prefetch ahead of the stream
  const int64_t row_bytes = nb * K::kBlockBytes;
  bool consecutive = n_w > 1;
  for (int j = 1; j < n_w; ++j) consecutive = consecutive && w[j] == w[0] + j * row_bytes;
  const int64_t ahead = consecutive ? kPrefetchTiles * kMaxW * row_bytes : 0;
  if constexpr (!K::kWide) {  // tiles of ≤ 4 activation rows: 5 .. 8 rows take two
    if (n_act > 4) {
      run_rows<K, 4>(w, n_w, act, s, nb, out, os, ahead);
      act += 4 * s;
      out += 4 * os;
      n_act -= 4;
    }
  }
  switch (n_act) {
    case 1: return run_rows<K, 1>(w, n_w, act, s, nb, out, os, ahead);
    case 2: return run_rows<K, 2>(w, n_w, act, s, nb, out, os, ahead);
    case 3: return run_rows<K, 3>(w, n_w, act, s, nb, out, os, ahead);
    case 4: return run_rows<K, 4>(w, n_w, act, s, nb, out, os, ahead);
    default: break;
  }
  if constexpr (K::kWide) {
    switch (n_act) {
      case 5: return run_rows<K, 5>(w, n_w, act, s, nb, out, os, ahead);
      case 6: return run_rows<K, 6>(w, n_w, act, s, nb, out, os, ahead);
      case 7: return run_rows<K, 7>(w, n_w, act, s, nb, out, os, ahead);
      default: return run_rows<K, 8>(w, n_w, act, s, nb, out, os, ahead);
    }
  }
}

static_assert(kMaxAct == 8, "the dispatch above handles up to 8 activation rows");

}  // namespace

DotFn avx2_dot(GgmlType type) {
  switch (type) {
    case GgmlType::F32: return dot<F32>;
    case GgmlType::F16: return dot<F16>;
    case GgmlType::BF16: return dot<BF16>;
    case GgmlType::Q4_0: return dot<Q4_0>;
    case GgmlType::Q4_1: return dot<Q4_1>;
    case GgmlType::Q5_0: return dot<Q5_0>;
    case GgmlType::Q5_1: return dot<Q5_1>;
    case GgmlType::Q8_0: return dot<Q8_0>;
    case GgmlType::Q2_K: return dot<Q2_K>;
    case GgmlType::Q3_K: return dot<Q3_K>;
    case GgmlType::Q4_K: return dot<Q4_K>;
    case GgmlType::Q5_K: return dot<Q5_K>;
    case GgmlType::Q6_K: return dot<Q6_K>;
    default: return nullptr;
  }
}

}  // namespace lexguide::kernels
