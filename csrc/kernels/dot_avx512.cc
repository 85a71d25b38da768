// AVX-512 (F/BW/VL/DQ/VNNI) dot products: this file alone is compiled with -mavx512f
// -mavx512bw -mavx512vl -mavx512dq -mavx512vnni (and AVX2/FMA/F16C); matmul.cc calls it only
// when isa() >= Isa::Avx512 (cpu.h). Types without a kernel here (nullptr) take the AVX2 one.
//
// The integer block sums are exact and equal the scalar reference's (dot_scalar.cc). The
// k-quant kernels then evaluate the reference's float expression per block and add it to each
// output in block order, so their results equal the reference's bit for bit (this file is built
// with -ffp-contract=off); Q4_0/Q8_0 differ from it by float32 rounding order only, within the
// tolerance the AVX2 kernels keep.
//
// - K-quants (Q4_K, Q5_K, Q6_K). A tile is up to 4 weight rows × up to 8 activation rows
//   (one weight row at a time for one activation row: decode streams rows in address order).
//   Per super-block each weight row is unpacked once into four zmm of unsigned quants (64
//   elements each), two zmm of int16 sub-block scales and the int16 factors of the 16
//   activation bsums (the mins; Q6_K: its scales, for the −32 offset). Per output: four
//   vpdpbusd (u8 quant × s8 activation, sums of 4 products, |sum| ≤ 4·63·127 < 2^15), two
//   vpackssdw (exact: no saturation at these bounds), two vpdpwssd against the scales → 16
//   int32 lanes of the scaled sum S, and one vpmaddwd of the bsums → 8 lanes of the min sum M.
//   The lanes of the tile's 8 activation rows are summed exactly into lane a of one vector
//   (hadd trees), and the reference's expression — Q4_K/Q5_K y.d·(d·S − dmin·M), Q6_K
//   (y.d·d)·(S − 32·M) — runs on 8 activation rows at once.
// - Q8_0, Q4_0: two 32-element blocks per zmm; tiles of 4 weight rows × up to 8 activation
//   rows (one weight row for one activation row). Quants are biased to unsigned
//   (Q4_0's nibbles are q + 8; Q8_0: q + 128). Per activation row and block pair its quants,
//   y.d of each block in 8 lanes and −o·Σy per lane (a vpdpbusd of o against y, negated) are
//   built once for the tile; per output S = vpdpbusd(−o·Σy, q + o, y) = Σ q·y per lane
//   (exact), acc += d_w · (y.d · S).
//
// Every output of a tile has one accumulator updated by the same operations whatever the tile
// shape, so a row's result never depends on the other rows of a product.
// GCC 12 reports the _mm512_undefined_*() inside its own intrinsics as uninitialised (GCC bug
// 105593): those warnings say nothing about this file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/dot.h"

namespace lexguide::kernels {

namespace {

inline float half(f16_bits h) { return _cvtsh_ss(h); }

// Weight rows are streamed once per product at decode: prefetch the block this many weight
// rows ahead when the call's rows are consecutive (as dot_avx2.cc does).
constexpr int64_t kPrefetchRows = 2 * kMaxW;

inline void prefetch(const uint8_t* p, int64_t n) {
  for (int64_t o = 0; o < n; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + o), _MM_HINT_T0);
}

// ---------------------------------------------------------------------------------- k-quants

// vpermw indices: int16 lane n = 8L + m (L: 128-bit lane, m < 8) of vpackssdw(s[2p], s[2p+1])
// holds the sum of 4 products of int32 lane 4L + (m & 3) of s[2p + (m >= 4)], where s[k] is the
// vpdpbusd of elements 64k .. 64k + 63 (int32 lane l: elements 64k + 4l .. + 3). Its scale is
// that of sub-block 2·(2p + (m ≥ 4)) + (L ≥ 2) (32-element sub-blocks: Q4_K, Q5_K) or of group
// 4·(2p + (m ≥ 4)) + L (16-element groups: Q6_K).
struct ScaleIndex {
  alignas(64) int16_t v[2][32];
  constexpr ScaleIndex(bool groups16) : v{} {
    for (int p = 0; p < 2; ++p) {
      for (int n = 0; n < 32; ++n) {
        const int L = n / 8, m = n % 8, k = 2 * p + (m >= 4 ? 1 : 0);
        v[p][n] = int16_t(groups16 ? 4 * k + L : 2 * k + (L >= 2 ? 1 : 0));
      }
    }
  }
};
constexpr ScaleIndex kIdx32(false), kIdx16(true);

inline __m512i load64(const void* p) { return _mm512_loadu_si512(p); }
inline __m256i load32(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Unrolled loops with compile-time indices (the accumulators stay in registers).
template <class F, int... I>
inline void unroll_impl(F&& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, class F>
inline void unroll(F&& f) {
  unroll_impl(f, std::make_integer_sequence<int, N>{});
}

// An unpacked k-quant super-block: q[k] the unsigned quants of elements 64k .. 64k + 63,
// scale[p] the int16 scales in vpackssdw(s[2p], s[2p + 1]) order, corr the int16 factors of the
// 16 bsums, d and dc the float factors of the scaled sum and of the corr term.
struct KBlock {
  __m512i q[4];
  __m512i scale[2];
  __m256i corr;
  float d, dc;
};

// The 8 six-bit scales (bytes 0..7) and mins (bytes 8..15) of a Q4_K/Q5_K scales field.
inline __m128i k4_scales_mins(const uint8_t* s) {
  uint32_t u[3];
  std::memcpy(u, s, 12);
  constexpr uint32_t low6 = 0x3F3F3F3F, low4 = 0x0F0F0F0F, two = 0x03030303;
  // scales 0..3: s[j] & 63; 4..7: s[8 + j] & 15 | (s[j] >> 6) << 4
  // mins   0..3: s[4 + j] & 63; 4..7: s[8 + j] >> 4 | (s[4 + j] >> 6) << 4
  const uint32_t sc_lo = u[0] & low6, sc_hi = (u[2] & low4) | (((u[0] >> 6) & two) << 4);
  const uint32_t mn_lo = u[1] & low6, mn_hi = ((u[2] >> 4) & low4) | (((u[1] >> 6) & two) << 4);
  return _mm_setr_epi32(int(sc_lo), int(sc_hi), int(mn_lo), int(mn_hi));
}

template <bool Five>
struct Unpack45_K {
  using Block = std::conditional_t<Five, BlockQ5_K, BlockQ4_K>;
  static void unpack(const Block& b, KBlock& k) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int h = 0; h < 2; ++h) {
      // bytes 0..31: sub-block 4h (low nibbles) and 4h + 1 (high); bytes 32..63: 4h + 2, 4h + 3
      const __m512i raw = load64(b.qs + 64 * h);
      const __m512i lo = _mm512_and_si512(raw, low4);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
      k.q[2 * h] = _mm512_shuffle_i64x2(lo, hi, 0x44);      // sub-blocks 4h, 4h + 1
      k.q[2 * h + 1] = _mm512_shuffle_i64x2(lo, hi, 0xEE);  // sub-blocks 4h + 2, 4h + 3
    }
    if constexpr (Five) {
      // bit j of qh[l]: +16 on element l of sub-block j
      const __m512i qh = _mm512_broadcast_i64x4(load32(b.qh));
      const __m512i sixteen = _mm512_set1_epi8(0x10);
      for (int kk = 0; kk < 4; ++kk) {
        const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8(char(1 << (2 * kk))),
                                               _mm256_set1_epi8(char(1 << (2 * kk + 1))), 1);
        const __mmask64 m = _mm512_test_epi8_mask(qh, bit);
        k.q[kk] = _mm512_mask_add_epi8(k.q[kk], m, k.q[kk], sixteen);  // 0..15 + 16
      }
    }
    const __m128i sm = k4_scales_mins(b.scales);
    const __m512i sc16 = _mm512_cvtepu8_epi16(_mm256_zextsi128_si256(sm));  // lanes 0..7
    k.scale[0] = _mm512_permutexvar_epi16(_mm512_load_si512(kIdx32.v[0]), sc16);
    k.scale[1] = _mm512_permutexvar_epi16(_mm512_load_si512(kIdx32.v[1]), sc16);
    // Σ_j mn[j]·(bsums[2j] + bsums[2j+1]): each min twice, against the 16 bsums
    const __m128i mn = _mm_unpackhi_epi64(sm, sm);
    k.corr = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn, mn));
    k.d = half(b.d);
    k.dc = half(b.dmin);
  }
  // y.d · (d·S − dmin·M), the reference's expression lane by lane
  static __m256 combine(__m256i S, __m256i M, const KBlock& k, __m256 yd) {
    const __m256 ds = _mm256_mul_ps(_mm256_set1_ps(k.d), _mm256_cvtepi32_ps(S));
    const __m256 dm = _mm256_mul_ps(_mm256_set1_ps(k.dc), _mm256_cvtepi32_ps(M));
    return _mm256_mul_ps(yd, _mm256_sub_ps(ds, dm));
  }
};

// Q6_K: element 128h + 32g + l: low nibble of ql[64h + 32(g % 2) + l] (shifted by 4·(g / 2)),
// high two bits (qh[32h + l] >> 2g) & 3; minus 32 (applied through the bsums).
struct Unpack6_K {
  using Block = BlockQ6_K;
  static void unpack(const Block& b, KBlock& k) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
    // high bits to bit positions 4..5: group g takes qh << (4 − 2g) (g ≤ 2) or qh >> 2 (g = 3);
    // 16-bit shifts move bits between the bytes of a word only outside the 0x30 mask
    const __m512i shl_even = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shr_odd = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = load64(b.ql + 64 * h);  // groups 4h, 4h + 1 (low), 4h + 2, 4h + 3 (high)
      const __m512i qh = _mm512_broadcast_i64x4(load32(b.qh + 32 * h));
      const __m512i h01 = _mm512_and_si512(_mm512_sllv_epi16(qh, shl_even), bits45);
      const __m512i h23 = _mm512_and_si512(_mm512_srlv_epi16(qh, shr_odd), bits45);
      k.q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, low4), h01);
      k.q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4), h23);
    }
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    const __m512i sc16 = _mm512_zextsi256_si512(sc);
    k.scale[0] = _mm512_permutexvar_epi16(_mm512_load_si512(kIdx16.v[0]), sc16);
    k.scale[1] = _mm512_permutexvar_epi16(_mm512_load_si512(kIdx16.v[1]), sc16);
    k.corr = sc;
    k.d = half(b.d);
    k.dc = 32.0f * k.d;  // exact: a power of two
  }
  // (y.d · d) · (S − 32·M): the reference's sum of (q − 32)·y, scaled as it does
  static __m256 combine(__m256i S, __m256i M, const KBlock& k, __m256 yd) {
    const __m256i sumi = _mm256_sub_epi32(S, _mm256_slli_epi32(M, 5));
    return _mm256_mul_ps(_mm256_mul_ps(yd, _mm256_set1_ps(k.d)), _mm256_cvtepi32_ps(sumi));
  }
};

// The scaled integer sum of one activation row (Q8_K block y) against an unpacked
// super-block: 16 int32 lanes whose total is Σ_j scale_j · Σ q·y (exact).
inline __m512i k_sum(const KBlock& k, const ActQ8K& y) {
  const __m512i z = _mm512_setzero_si512();
  const __m512i s0 = _mm512_dpbusd_epi32(z, k.q[0], load64(y.qs));
  const __m512i s1 = _mm512_dpbusd_epi32(z, k.q[1], load64(y.qs + 64));
  const __m512i s2 = _mm512_dpbusd_epi32(z, k.q[2], load64(y.qs + 128));
  const __m512i s3 = _mm512_dpbusd_epi32(z, k.q[3], load64(y.qs + 192));
  const __m512i sumi = _mm512_dpwssd_epi32(z, _mm512_packs_epi32(s0, s1), k.scale[0]);
  return _mm512_dpwssd_epi32(sumi, _mm512_packs_epi32(s2, s3), k.scale[1]);
}

// Lane a (< N) of the result = the sum of all lanes of v[a] (exact int32 sums); lanes ≥ N: 0.
inline __m256i fold(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}
inline __m256i lane_sums(const __m256i h[8]) {
  const __m256i q0 = _mm256_hadd_epi32(_mm256_hadd_epi32(h[0], h[1]), _mm256_hadd_epi32(h[2], h[3]));
  const __m256i q1 = _mm256_hadd_epi32(_mm256_hadd_epi32(h[4], h[5]), _mm256_hadd_epi32(h[6], h[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(q0, q1, 0x20),
                          _mm256_permute2x128_si256(q0, q1, 0x31));
}

// A tile of R weight rows × NA activation rows, bit-equal to the scalar reference. Per
// super-block and weight row (unpacked once), each activation row's scaled quant sum S (the
// 16 lanes of k_sum) and min/offset sum M = Σ corr·bsums (vpmaddwd) are summed exactly into
// lane a of two int32 vectors; then, lane by lane, the scalar reference's float expression
// (Q4_K/Q5_K: y.d · (d·S − dmin·M); Q6_K: (y.d · d) · (S − 32·M)) is added to the row's sum in
// block order, as the reference does (no contracted FMAs: this file is built with
// -ffp-contract=off).
template <class U, int R, int NA>
void k_tile(const uint8_t* const* w, const uint8_t* act, size_t act_stride, int64_t n_blocks,
            float* out, size_t out_stride, int64_t ahead) {
  using Block = typename U::Block;
  __m256 acc[R];
  unroll<R>([&](auto r) { acc[r] = _mm256_setzero_ps(); });
  auto y_of = [&](int a, int64_t i) -> const ActQ8K& {
    return reinterpret_cast<const ActQ8K*>(act + a * act_stride)[i];
  };
  for (int64_t i = 0; i < n_blocks; ++i) {
    alignas(32) float ydv[8] = {};
    unroll<NA>([&](auto a) { ydv[a] = y_of(a, i).d; });
    const __m256 yd = _mm256_load_ps(ydv);
    unroll<R>([&](auto r) {
      const Block& b = reinterpret_cast<const Block*>(w[r])[i];
      if (ahead) prefetch(reinterpret_cast<const uint8_t*>(&b) + ahead, sizeof(Block));
      KBlock k;
      U::unpack(b, k);
      __m256i h[8];
      unroll<8>([&](auto a) {
        h[a] = a < NA ? _mm256_madd_epi16(load32(y_of(a, i).bsums), k.corr) : _mm256_setzero_si256();
      });
      const __m256i M = lane_sums(h);
      unroll<8>([&](auto a) { h[a] = a < NA ? fold(k_sum(k, y_of(a, i))) : _mm256_setzero_si256(); });
      const __m256i S = lane_sums(h);
      acc[r] = _mm256_add_ps(acc[r], U::combine(S, M, k, yd));
    });
  }
  unroll<R>([&](auto r) {
    alignas(32) float o[8];
    _mm256_store_ps(o, acc[r]);
    for (int a = 0; a < NA; ++a) out[a * out_stride + r] = o[a];
  });
}

template <class U>
struct KQuant {
  static constexpr int64_t kBlockBytes = sizeof(typename U::Block);
  // One activation row (decode): weight rows one at a time, each streamed in address order;
  // more: all n_w rows in one tile.
  template <int NA>
  static void rows(const uint8_t* const* w, int n_w, const uint8_t* act, size_t s, int64_t nb,
                   float* out, size_t os, int64_t ahead) {
    if (NA == 1 || n_w == 1) {
      for (int r = 0; r < n_w; ++r) k_tile<U, 1, NA>(w + r, act, s, nb, out + r, os, ahead);
      return;
    }
    if constexpr (NA > 1) {
      switch (n_w) {
        case 2: return k_tile<U, 2, NA>(w, act, s, nb, out, os, ahead);
        case 3: return k_tile<U, 3, NA>(w, act, s, nb, out, os, ahead);
        default: return k_tile<U, 4, NA>(w, act, s, nb, out, os, ahead);
      }
    }
  }
};

static_assert(kMaxW == 4, "KQuant tiles take up to 4 weight rows");

// ------------------------------------------------------------------------ 32-element types

// Two blocks per zmm: lanes 0..7 (bytes 0..31) block i, lanes 8..15 block i + 1. U::pair(b0,
// b1) gives the quants of two blocks as unsigned bytes biased by U::kOffset (q + o); at the end
// of an odd row b1 is b0 again, against activation lanes of zero.
struct Unpack8_0 {
  using Block = BlockQ8_0;
  static constexpr int kOffset = 128;
  static __m512i pair(const Block& b0, const Block& b1) {
    const __m512i v = _mm512_inserti64x4(_mm512_zextsi256_si512(load32(b0.qs)), load32(b1.qs), 1);
    return _mm512_xor_si512(v, _mm512_set1_epi8(char(0x80)));  // q + 128
  }
};
struct Unpack4_0 {
  using Block = BlockQ4_0;
  static constexpr int kOffset = 8;
  static __m512i pair(const Block& b0, const Block& b1) {
    // 128-bit lanes: the 16 packed bytes of b0, b0, b1, b1; low nibbles in lanes 0 and 2
    // (elements 0..15), high nibbles in lanes 1 and 3 (elements 16..31)
    const __m256i r0 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0.qs)));
    const __m256i r1 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b1.qs)));
    const __m512i v = _mm512_inserti64x4(_mm512_zextsi256_si512(r0), r1, 1);
    const __m512i hi = _mm512_mask_srli_epi16(v, 0xFF00FF00, v, 4);  // int16 lanes 8..15, 24..31
    return _mm512_and_si512(hi, _mm512_set1_epi8(0x0F));
  }
};

// The float16 scales of two blocks as floats: b0's in lanes 0..7, b1's (or 0) in lanes 8..15.
template <class Block>
inline __m512 pair_scales(const Block& b0, const Block& b1, bool two) {
  const uint32_t d = uint32_t(b0.d) | uint32_t(two ? b1.d : 0) << 16;
  const __m512 f = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128(int(d))));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), f);
}

// A tile of R weight rows × NA activation rows, two blocks per step. The R rows' quants and
// scales are unpacked first; then per activation row its quants y, scales dy and the offset
// term −o·Σy per lane (an int32 vpdpbusd of o against y, negated) are built once and serve the
// R outputs: S = vpdpbusd(−o·Σy, q + o, y) = Σ q·y exactly per lane, acc += d_w · (dy · S).
// The accumulators of a tile: in registers up to 16 of them, else in a stack buffer (L1), their
// loads and stores on the load/store ports. Either way the same arithmetic per output.
template <int R, int NA, bool InMemory = (R * NA > 16)>
struct Accumulators {
  __m512 v[R][NA];
  Accumulators() {
    unroll<R>([&](auto r) { unroll<NA>([&](auto a) { v[r][a] = _mm512_setzero_ps(); }); });
  }
  __m512 get(int r, int a) const { return v[r][a]; }
  void set(int r, int a, __m512 x) { v[r][a] = x; }
};
template <int R, int NA>
struct Accumulators<R, NA, true> {
  alignas(64) float v[R][NA][16];
  Accumulators() {
    for (int r = 0; r < R; ++r) {
      for (int a = 0; a < NA; ++a) _mm512_store_ps(v[r][a], _mm512_setzero_ps());
    }
  }
  __m512 get(int r, int a) const { return _mm512_load_ps(v[r][a]); }
  void set(int r, int a, __m512 x) { _mm512_store_ps(v[r][a], x); }
};

template <class U, int R, int NA>
void run32(const uint8_t* const* w, const uint8_t* act, size_t act_stride, int64_t n_blocks,
           float* out, size_t out_stride, int64_t ahead) {
  using Block = typename U::Block;
  Accumulators<R, NA> acc;
  const __m512i zero = _mm512_setzero_si512(), offset = _mm512_set1_epi8(char(U::kOffset));
  for (int64_t i = 0; i < n_blocks; i += 2) {
    const bool two = i + 1 < n_blocks;
    const int64_t i1 = two ? i + 1 : i;
    __m512i q[R];
    __m512 dw[R];
    unroll<R>([&](auto r) {
      const Block* b = reinterpret_cast<const Block*>(w[r]);
      if (ahead) prefetch(reinterpret_cast<const uint8_t*>(b + i) + ahead, 2 * sizeof(Block));
      q[r] = U::pair(b[i], b[i1]);
      dw[r] = pair_scales(b[i], b[i1], two);
    });
    unroll<NA>([&](auto a) {
      const ActQ8* ya = reinterpret_cast<const ActQ8*>(act + a * act_stride);
      const __m256i y1 = two ? load32(ya[i1].qs) : _mm256_setzero_si256();
      const __m512i y = _mm512_inserti64x4(_mm512_zextsi256_si512(load32(ya[i].qs)), y1, 1);
      const __m512 dy = _mm512_mask_broadcastss_ps(_mm512_set1_ps(ya[i].d), 0xFF00,
                                                   _mm_set_ss(two ? ya[i1].d : 0.0f));
      const __m512i corr = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, offset, y));
      unroll<R>([&](auto r) {
        const __m512 s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(corr, q[r], y));
        acc.set(r, a, _mm512_fmadd_ps(dw[r], _mm512_mul_ps(dy, s), acc.get(r, a)));
      });
    });
  }
  unroll<R>([&](auto r) {
    unroll<NA>([&](auto a) { out[a * out_stride + r] = _mm512_reduce_add_ps(acc.get(r, a)); });
  });
}

template <class U>
struct Dot32 {
  static constexpr int64_t kBlockBytes = sizeof(typename U::Block);
  // Tiles: one weight row streamed in address order for one activation row (decode), else
  // 4 weight rows × up to 8 activation rows (up to 4 rows: 16 accumulators in registers beside
  // the 4 rows' quants and scales and one activation row's operands, no spills; more: the
  // accumulators in L1).
  template <int NA>
  static void rows(const uint8_t* const* w, int n_w, const uint8_t* act, size_t s, int64_t nb,
                   float* out, size_t os, int64_t ahead) {
    int r = 0;
    if constexpr (NA > 1) {
      for (; r + 4 <= n_w; r += 4) run32<U, 4, NA>(w + r, act, s, nb, out + r, os, ahead);
      for (; r + 2 <= n_w; r += 2) run32<U, 2, NA>(w + r, act, s, nb, out + r, os, ahead);
    }
    for (; r < n_w; ++r) run32<U, 1, NA>(w + r, act, s, nb, out + r, os, ahead);
  }
};

// ---------------------------------------------------------------------------------- dispatch

template <class K, int MaxNA>
void dot(const uint8_t* const* w, int n_w, const uint8_t* act, size_t s, int n_act, int64_t nb,
         float* out, size_t os) {
  const int64_t row_bytes = nb * K::kBlockBytes;
  bool consecutive = n_w > 1;
  for (int j = 1; j < n_w; ++j) consecutive = consecutive && w[j] == w[0] + j * row_bytes;
  const int64_t ahead = consecutive ? kPrefetchRows * row_bytes : 0;
  while (n_act > 0) {  // groups of ≤ MaxNA activation rows
    const int na = n_act < MaxNA ? n_act : MaxNA;
    switch (na) {
      case 1: K::template rows<1>(w, n_w, act, s, nb, out, os, ahead); break;
      case 2: K::template rows<2>(w, n_w, act, s, nb, out, os, ahead); break;
      case 3: K::template rows<3>(w, n_w, act, s, nb, out, os, ahead); break;
      case 4: K::template rows<4>(w, n_w, act, s, nb, out, os, ahead); break;
      default:
        if constexpr (MaxNA > 4) {
          switch (na) {
            case 5: K::template rows<5>(w, n_w, act, s, nb, out, os, ahead); break;
            case 6: K::template rows<6>(w, n_w, act, s, nb, out, os, ahead); break;
            case 7: K::template rows<7>(w, n_w, act, s, nb, out, os, ahead); break;
            default: K::template rows<8>(w, n_w, act, s, nb, out, os, ahead); break;
          }
        }
        break;
    }
    act += size_t(na) * s;
    out += size_t(na) * os;
    n_act -= na;
  }
}

static_assert(kMaxAct == 8, "the dispatch above handles up to 8 activation rows");

}  // namespace

DotFn avx512_dot(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: return dot<Dot32<Unpack4_0>, 8>;
    case GgmlType::Q8_0: return dot<Dot32<Unpack8_0>, 8>;
    case GgmlType::Q4_K: return dot<KQuant<Unpack45_K<false>>, 8>;
    case GgmlType::Q5_K: return dot<KQuant<Unpack45_K<true>>, 8>;
    case GgmlType::Q6_K: return dot<KQuant<Unpack6_K>, 8>;
    default: return nullptr;
  }
}

}  // namespace lexguide::kernels
