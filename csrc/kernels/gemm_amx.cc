// AMX-INT8 products (gemm_amx.h). Compiled with -mamx-tile -mamx-int8 and AVX-512 (F, BW, VL,
// DQ, VNNI), and -ffp-contract=off: the float operations are exactly the scalar reference's.
//
// Tiles: 0..3 accumulators (16×16 int32, weight rows × activation rows), 4..5 weight quants
// (16 rows × K bytes, u8), 6..7 activation quants (K/4 rows × 16 columns of 4 bytes, s8), with
// K = 32 (Q4_0, Q8_0: one block) or 64 (the k-quants, whose scales are folded into the weight
// operand: rows_folded; Q6_K uses tile 4 as a fifth accumulator).
//
// GCC 12 reports the _mm512_undefined_*() inside its own intrinsics as uninitialised (GCC bug
// 105593): those warnings say nothing about this file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/gemm_amx.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/unpack.h"

namespace lexguide::kernels {

namespace {

// Activation rows per pass over a weight block (its unpacked quants are reused for all of them).
constexpr int kTBlockAmx = 128;
constexpr int kMaxTiles = kTBlockAmx / kAmxTile;

struct TileConfig {
  uint8_t palette;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64, "ldtilecfg reads 64 bytes");

void configure(int k) {
  TileConfig c;
  std::memset(&c, 0, sizeof c);
  c.palette = 1;
  for (int i = 0; i < 4; ++i) { c.rows[i] = 16; c.colsb[i] = 64; }
  for (int i = 4; i < 6; ++i) { c.rows[i] = 16; c.colsb[i] = uint16_t(k); }
  for (int i = 6; i < 8; ++i) { c.rows[i] = uint8_t(k / 4); c.colsb[i] = 64; }
  _tile_loadconfig(&c);
}

// The packed activation layout: per tile of 16 rows, per unit (a weight block's elements:
// 32 for Q8, 256 for Q8K), unit·16 bytes of quants (row g: quants 4g .. 4g + 3 of each of the
// 16 rows), 16 float d, then Q8: 16 int32 Σq; Q8K: 8 × 16 int32 pairs (bsums[2p], bsums[2p+1])
// as int16 halves (the operands of VNNI's int16 dot products).
struct ActLayout {
  int unit;
  size_t qbytes, unit_bytes;
  explicit ActLayout(ActKind kind)
      : unit(kind == ActKind::Q8K ? kQKK : kQK),
        qbytes(size_t(unit) * kAmxTile),
        unit_bytes(qbytes + 64 + (kind == ActKind::Q8K ? 8 * 64 : 64)) {}
};

// One unit of up to 32 unpacked weight rows: quants (row stride 256), and per row the float
// scales and the integer factors of the tile products and of the block sums.
struct WeightUnit {
  alignas(64) uint8_t q[kAmxRows][kQKK];
  alignas(64) int32_t pm[kAmxRows][8];         // int16 pairs against the bsum pairs
  float d[kAmxRows], dmin[kAmxRows];
};

struct Scratch {
  WeightUnit w;
  alignas(64) int32_t c[2][4][256];                 // tile results (16 × 16 int32 each)
  alignas(64) float acc[kAmxRows][kTBlockAmx];      // running sums per weight row
  alignas(64) uint8_t q6[5][16][kQKK];              // Q6_K on tiles: digit rows, then q
  size_t ahead = 0;                                 // VNNI rows: prefetch distance, or 0
  std::vector<float> yd;                            // Q4_0/Q8_0 VNNI rows: y.d per block
  std::vector<int32_t> off;                         // and offset · Σq
};

Scratch& scratch() {
  thread_local std::unique_ptr<Scratch> s;
  if (!s) s.reset(new Scratch());  // zeroed: tile rows past a call's weight rows are read
  return *s;
}

inline __m256i load32(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline void store32(void* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }

// --- weight unpacking: one block of one row into WeightUnit row m ---

void unpack_q4_0_row(const uint8_t* blk, WeightUnit& u, int m) {
  const BlockQ4_0& b = *reinterpret_cast<const BlockQ4_0*>(blk);
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m128i low4 = _mm_set1_epi8(0x0F);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(u.q[m]), _mm_and_si128(raw, low4));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(u.q[m] + 16), _mm_and_si128(_mm_srli_epi16(raw, 4), low4));
  u.d[m] = f16_to_f32(b.d);
}

void unpack_q8_0_row(const uint8_t* blk, WeightUnit& u, int m) {
  const BlockQ8_0& b = *reinterpret_cast<const BlockQ8_0*>(blk);
  store32(u.q[m], _mm256_xor_si256(load32(b.qs), _mm256_set1_epi8(char(0x80))));  // q + 128
  u.d[m] = f16_to_f32(b.d);
}

enum class Kind { Q4_0, Q8_0, Q4_K, Q5_K, Q6_K };

bool kind_of(GgmlType t, Kind* kind) {
  switch (t) {
    case GgmlType::Q4_0: *kind = Kind::Q4_0; return true;
    case GgmlType::Q8_0: *kind = Kind::Q8_0; return true;
    case GgmlType::Q4_K: *kind = Kind::Q4_K; return true;
    case GgmlType::Q5_K: *kind = Kind::Q5_K; return true;
    case GgmlType::Q6_K: *kind = Kind::Q6_K; return true;
    default: return false;
  }
}

// Q4_0 / Q8_0 on tiles: the products of one block (K = 32), MT weight tiles × NT activation
// tiles into c[0][mi·NT + ni].
template <int MT, int NT>
void products(const WeightUnit& u, const uint8_t* const* act, Scratch& sc) {
  _tile_loadd(4, u.q[0], kQKK);
  if constexpr (MT == 2) _tile_loadd(5, u.q[16], kQKK);
  _tile_loadd(6, act[0], 64);
  if constexpr (NT == 2) _tile_loadd(7, act[1], 64);
  _tile_zero(0);
  _tile_dpbusd(0, 4, 6);
  _tile_stored(0, sc.c[0][0], 64);
  if constexpr (NT == 2) {
    _tile_zero(1);
    _tile_dpbusd(1, 4, 7);
    _tile_stored(1, sc.c[0][1], 64);
  }
  if constexpr (MT == 2) {
    _tile_zero(2);
    _tile_dpbusd(2, 5, 6);
    _tile_stored(2, sc.c[0][NT], 64);
    if constexpr (NT == 2) {
      _tile_zero(3);
      _tile_dpbusd(3, 5, 7);
      _tile_stored(3, sc.c[0][NT + 1], 64);
    }
  }
}

// Adds each weight row's block result to acc[row][col0 .. col0 + 16) from the tile results
// c[0][idx] of weight rows m0 .. m0 + 16 and the activation unit at a (one tile of 16 rows).
void finish(Kind kind, const ActLayout& al, const WeightUnit& u, Scratch& sc, int idx, int m0,
            int n_m, const uint8_t* a, int col0) {
  const __m512 yd = _mm512_loadu_ps(reinterpret_cast<const float*>(a + al.qbytes));
  const int32_t* extra = reinterpret_cast<const int32_t*>(a + al.qbytes + 64);
  // scalar: d · y.d · float(Σ q·y − offset·Σy), offset 8 (Q4_0) or 128 (Q8_0, stored +128)
  const __m512i isum = _mm512_loadu_si512(extra);
  const __m512i off = kind == Kind::Q4_0 ? _mm512_slli_epi32(isum, 3) : _mm512_slli_epi32(isum, 7);
  for (int m = 0; m < n_m; ++m) {
    const int row = m0 + m;
    const __m512i c = _mm512_sub_epi32(_mm512_load_si512(sc.c[0][idx] + 16 * m), off);
    const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(u.d[row]), yd), _mm512_cvtepi32_ps(c));
    float* acc = sc.acc[row] + col0;
    _mm512_storeu_ps(acc, _mm512_add_ps(_mm512_loadu_ps(acc), v));
  }
}

// Weight rows stream from memory once per product when the activation rows are few (decode):
// when a call's rows are consecutive in memory, each block read is paired with a prefetch of the
// same block kPrefetchRows rows further on (past the rows read alongside it), as the AVX2 and
// AVX-512 kernels do; a selection of rows is not prefetched (ahead = 0).
constexpr size_t kPrefetchRows = 8;
inline void prefetch_ahead(const uint8_t* p, size_t n, size_t ahead) {
  if (!ahead) return;
  for (size_t o = 0; o < n; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + ahead + o), _MM_HINT_T0);
}

// A k-quant super-block of one weight row in registers: q[c] the u8 quants of elements
// 64c .. 64c + 63 in order, scv[c] the int32 scale of each lane's 4 elements, pm the int16
// factors of the 16 bsums (mins, or Q6_K's scales for its −32 offset), d and dmin.
struct KRegs {
  __m512i q[4], scv[4];
  __m256i pm;
  float d, dmin;
};

template <Kind K>
inline void kregs(const uint8_t* blk, KRegs& r) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  if constexpr (K == Kind::Q6_K) {
    const BlockQ6_K& b = *reinterpret_cast<const BlockQ6_K*>(blk);
    __m256i g[8];
    unpack_q6_k_groups(b, g);
    const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
    const __m512i s32 = _mm512_cvtepi8_epi32(s8);
    for (int c = 0; c < 4; ++c) {
      r.q[c] = _mm512_inserti64x4(_mm512_castsi256_si512(g[2 * c]), g[2 * c + 1], 1);
      r.scv[c] = _mm512_permutexvar_epi32(_mm512_add_epi32(_mm512_set1_epi32(4 * c), _mm512_srli_epi32(lane, 2)), s32);
    }
    r.pm = _mm256_cvtepi8_epi16(s8);
    r.d = f16_to_f32(b.d);
    r.dmin = 0.0f;
  } else {
    constexpr bool five = K == Kind::Q5_K;
    const BlockQ4_K& head = *reinterpret_cast<const BlockQ4_K*>(blk);
    const uint8_t* qs = five ? reinterpret_cast<const BlockQ5_K*>(blk)->qs : head.qs;
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    // raw bytes 32j .. 32j + 31: sub-blocks 2j (low nibbles), 2j + 1 (high)
    const __m512i lo_idx = _mm512_setr_epi64(0, 1, 2, 3, 8, 9, 10, 11);
    const __m512i hi_idx = _mm512_setr_epi64(4, 5, 6, 7, 12, 13, 14, 15);
    for (int h = 0; h < 2; ++h) {
      const __m512i raw = _mm512_loadu_si512(qs + 64 * h);
      const __m512i lo = _mm512_and_si512(raw, low4);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
      r.q[2 * h] = _mm512_permutex2var_epi64(lo, lo_idx, hi);
      r.q[2 * h + 1] = _mm512_permutex2var_epi64(lo, hi_idx, hi);
    }
    if constexpr (five) {  // bit j of qh[l]: the fifth bit of element 32j + l
      const __m512i qh = _mm512_broadcast_i64x4(load32(reinterpret_cast<const BlockQ5_K*>(blk)->qh));
      const __m512i one = _mm512_set1_epi8(1);
      for (int c = 0; c < 4; ++c) {
        const __m512i sh = _mm512_setr_epi64(2 * c, 2 * c, 2 * c, 2 * c, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1);
        const __m512i bit = _mm512_and_si512(_mm512_srlv_epi64(qh, sh), one);
        r.q[c] = _mm512_or_si512(r.q[c], _mm512_slli_epi16(bit, 4));
      }
    }
    // k4_scale_min in registers (bytes written one by one and reloaded as a vector would
    // stall on store forwarding): sc = a & 63 | (c & 15 | (a >> 6) << 4), mn = b & 63 | ...
    uint32_t a, b4, c4;
    std::memcpy(&a, head.scales, 4);
    std::memcpy(&b4, head.scales + 4, 4);
    std::memcpy(&c4, head.scales + 8, 4);
    const uint64_t sc8 = uint64_t(a & 0x3F3F3F3Fu) |
                         uint64_t((c4 & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u)) << 32;
    const uint64_t mn8v = uint64_t(b4 & 0x3F3F3F3Fu) |
                          uint64_t(((c4 >> 4) & 0x0F0F0F0Fu) | ((b4 >> 2) & 0x30303030u)) << 32;
    const __m512i s32 = _mm512_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(sc8)));
    for (int c = 0; c < 4; ++c) {
      r.scv[c] = _mm512_permutexvar_epi32(_mm512_add_epi32(_mm512_set1_epi32(2 * c), _mm512_srli_epi32(lane, 3)), s32);
    }
    const __m128i mn8 = _mm_cvtsi64_si128(int64_t(mn8v));
    r.pm = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));
    r.d = f16_to_f32(head.d);
    r.dmin = f16_to_f32(head.dmin);
  }
}

// Few activation rows, Q4_0 / Q8_0 (amx_small_rows): the same block values from VNNI dot
// products of each weight row's blocks, unpacked in registers, with the activation rows as
// quantize_act stores them (no tiles, no packing), and the scalar float expression per block.
// R weight rows × 8 blocks at a time; per activation row and block, its d and
// offset·Σq (laid out once per call, yo) are loaded as vectors. The 8 integer sums of a row's
// blocks are one vector; the R rows' float sums in block order are R independent chains.
// Lane i (< 8) of the result: the sum of the 8 int32 lanes of block i, where v[k] holds blocks
// 2k (lanes 0..7) and 2k + 1 (lanes 8..15). Three rounds of pairing even with odd lanes.
inline __m256i block_sums(const __m512i* v) {
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  auto pair = [&](__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_permutex2var_epi32(a, ev, b), _mm512_permutex2var_epi32(a, od, b));
  };
  const __m512i w = pair(pair(v[0], v[1]), pair(v[2], v[3]));  // blocks 0..7, 2 lanes each
  return _mm512_castsi512_si256(pair(w, w));
}

template <Kind K, int R, int NB>
inline void small_q32_blocks(const uint8_t* const* w, size_t bb, const uint8_t* act,
                             size_t act_stride, int64_t T, int64_t u0, const float* yd_all,
                             const int32_t* off_all, int64_t n_units, float* const* acc,
                             size_t ahead) {
  __m512i q[R][4];  // blocks 2k, 2k + 1 of each row, as the activation pairs below
  __m256 d[R];
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m256i offs = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(int(bb)));
  const __m256i valid = _mm256_cmpgt_epi32(_mm256_set1_epi32(NB), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  for (int r = 0; r < R; ++r) {
    const uint8_t* b0 = w[r] + size_t(u0) * bb;
    prefetch_ahead(b0, 8 * bb, ahead);
    for (int k = 0; k < 4; ++k) {
      const uint8_t* lo = b0 + size_t(2 * k) * bb + 2;  // quants: after the float16 d
      const uint8_t* hi = lo + bb;
      const bool has_lo = 2 * k < NB, has_hi = 2 * k + 1 < NB;
      if constexpr (K == Kind::Q4_0) {
        // [qs(2k) | qs(2k+1)] → [low(2k), high(2k), low(2k+1), high(2k+1)] nibbles
        const __m128i a = has_lo ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(lo)) : _mm_setzero_si128();
        const __m128i b = has_hi ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi)) : _mm_setzero_si128();
        const __m256i pair = _mm256_set_m128i(b, a);
        const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(pair), _mm256_srli_epi16(pair, 4), 1);
        q[r][k] = _mm512_and_si512(_mm512_shuffle_i64x2(both, both, 0xD8), low4);
      } else {
        const __m256i a = has_lo ? load32(lo) : _mm256_set1_epi8(char(0x80));
        const __m256i b = has_hi ? load32(hi) : _mm256_set1_epi8(char(0x80));
        q[r][k] = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1),
                                   _mm512_set1_epi8(char(0x80)));  // q + 128
      }
    }
    // the 8 float16 d (the first 2 bytes of each block), converted exactly
    const __m256i dw = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), reinterpret_cast<const int*>(b0), offs, valid, 1);
    d[r] = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(dw));
  }
  for (int64_t t = 0; t < T; ++t) {
    const ActQ8* y = reinterpret_cast<const ActQ8*>(act + size_t(t) * act_stride) + u0;
    const __m256 yd = _mm256_loadu_ps(yd_all + t * (n_units + 8) + u0);
    const __m256i off = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(off_all + t * (n_units + 8) + u0));
    __m512i ya[4];
    for (int k = 0; k < 4; ++k) {
      const __m256i lo = 2 * k < NB ? load32(y[2 * k].qs) : _mm256_setzero_si256();
      const __m256i hi = 2 * k + 1 < NB ? load32(y[2 * k + 1].qs) : _mm256_setzero_si256();
      ya[k] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
    alignas(32) float vs[R][8];
    for (int r = 0; r < R; ++r) {
      __m512i p[4];
      for (int k = 0; k < 4; ++k) p[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[r][k], ya[k]);
      const __m256i c = _mm256_sub_epi32(block_sums(p), off);
      // scalar: d · y.d · float(c), summed in block order
      _mm256_store_ps(vs[r], _mm256_mul_ps(_mm256_mul_ps(d[r], yd), _mm256_cvtepi32_ps(c)));
    }
    float a[R];
    for (int r = 0; r < R; ++r) a[r] = acc[r][t];
    for (int i = 0; i < NB; ++i) {
      for (int r = 0; r < R; ++r) a[r] += vs[r][i];
    }
    for (int r = 0; r < R; ++r) acc[r][t] = a[r];
  }
}

template <Kind K, int R>
void small_q32_rows(const uint8_t* const* w, size_t bb, const uint8_t* act, size_t act_stride,
                    int64_t T, int64_t n_units, const float* yd, const int32_t* off, float* const* acc,
                    size_t ahead) {
  int64_t u0 = 0;
  for (; u0 + 8 <= n_units; u0 += 8) small_q32_blocks<K, R, 8>(w, bb, act, act_stride, T, u0, yd, off, n_units, acc, ahead);
  switch (n_units - u0) {
    case 1: small_q32_blocks<K, R, 1>(w, bb, act, act_stride, T, u0, yd, off, n_units, acc, ahead); break;
    case 2: small_q32_blocks<K, R, 2>(w, bb, act, act_stride, T, u0, yd, off, n_units, acc, ahead); break;
    case 3: small_q32_blocks<K, R, 3>(w, bb, act, act_stride, T, u0, yd, off, n_units, acc, ahead); break;
    case 4: small_q32_blocks<K, R, 4>(w, bb, act, act_stride, T, u0, yd, off, n_units, acc, ahead); break;
    case 5: small_q32_blocks<K, R, 5>(w, bb, act, act_stride, T, u0, yd, off, n_units, acc, ahead); break;
    case 6: small_q32_blocks<K, R, 6>(w, bb, act, act_stride, T, u0, yd, off, n_units, acc, ahead); break;
    case 7: small_q32_blocks<K, R, 7>(w, bb, act, act_stride, T, u0, yd, off, n_units, acc, ahead); break;
    default: break;
  }
}

template <Kind K>
void small_q32(const uint8_t* const* w, int n_w, size_t bb, const uint8_t* act,
               size_t act_stride, int64_t T, int64_t n_units, Scratch& sc) {
  // per activation row: y.d and offset·Σq of each block, 8 zero lanes past the last
  constexpr int shift = K == Kind::Q4_0 ? 3 : 7;
  const size_t len = size_t(T) * size_t(n_units + 8);
  if (sc.yd.size() < len) {
    sc.yd.resize(len);
    sc.off.resize(len);
  }
  for (int64_t t = 0; t < T; ++t) {
    const ActQ8* y = reinterpret_cast<const ActQ8*>(act + size_t(t) * act_stride);
    float* yd = sc.yd.data() + t * (n_units + 8);
    int32_t* off = sc.off.data() + t * (n_units + 8);
    for (int64_t u = 0; u < n_units; ++u) {
      yd[u] = y[u].d;
      off[u] = int32_t(uint32_t(y[u].isum) << shift);
    }
    for (int u = 0; u < 8; ++u) { yd[n_units + u] = 0.0f; off[n_units + u] = 0; }
  }
  float* acc[kAmxRows];
  for (int m = 0; m < n_w; ++m) acc[m] = sc.acc[m];
  // one activation row (decode): weight rows one at a time, each streamed in address order
  // (interleaved rows stream slower from memory); more: four rows share each activation load
  int m = 0;
  for (; T > 1 && m + 4 <= n_w; m += 4) small_q32_rows<K, 4>(w + m, bb, act, act_stride, T, n_units, sc.yd.data(), sc.off.data(), acc + m, sc.ahead);
  for (; m < n_w; ++m) small_q32_rows<K, 1>(w + m, bb, act, act_stride, T, n_units, sc.yd.data(), sc.off.data(), acc + m, sc.ahead);
}

// Q4_K / Q5_K on tiles: the 6-bit sub-block scale sc = 8·sh + sl (sh, sl ≤ 7) is folded into
// the weight operand, two u8 rows per weight row: q·sl in rows 0..15, q·sh in rows 16..31 of
// WeightUnit (q ≤ 31, so q·7 ≤ 217 fits a byte; one vpmullw multiplies both bytes of a 16-bit
// lane without a carry between them). A whole super-block then accumulates in the tiles
// (4 products of 64 elements) and Σ sc·(q·y) = lo + 8·hi exactly, one tile store per
// super-block instead of one per sub-block.
template <Kind K>
void unpack_q45_split(const uint8_t* blk, WeightUnit& u, int m) {
  KRegs r;
  kregs<K>(blk, r);
  const __m512i seven = _mm512_set1_epi32(7);
  for (int c = 0; c < 4; ++c) {
    const __m512i sl = _mm512_and_si512(r.scv[c], seven), sh = _mm512_srli_epi32(r.scv[c], 3);
    const __m512i ml = _mm512_or_si512(sl, _mm512_slli_epi32(sl, 16));
    const __m512i mh = _mm512_or_si512(sh, _mm512_slli_epi32(sh, 16));
    _mm512_store_si512(u.q[m] + 64 * c, _mm512_mullo_epi16(r.q[c], ml));
    _mm512_store_si512(u.q[16 + m] + 64 * c, _mm512_mullo_epi16(r.q[c], mh));
  }
  _mm256_store_si256(reinterpret_cast<__m256i*>(u.pm[m]), r.pm);
  u.d[m] = r.d;
  u.dmin[m] = r.dmin;
}

// lo (tiles 0, 1) and hi (tiles 2, 3) sums of one super-block for NT activation tiles, stored
// at c[0][0 .. 2·NT).
template <int NT>
void products_split(const WeightUnit& u, const uint8_t* const* act, Scratch& sc) {
  _tile_zero(0);
  _tile_zero(2);
  if constexpr (NT == 2) {
    _tile_zero(1);
    _tile_zero(3);
  }
  for (int s = 0; s < 4; ++s) {
    _tile_loadd(4, u.q[0] + 64 * s, kQKK);
    _tile_loadd(5, u.q[16] + 64 * s, kQKK);
    _tile_loadd(6, act[0] + size_t(s) * 16 * 64, 64);
    _tile_dpbusd(0, 4, 6);
    _tile_dpbusd(2, 5, 6);
    if constexpr (NT == 2) {
      _tile_loadd(7, act[1] + size_t(s) * 16 * 64, 64);
      _tile_dpbusd(1, 4, 7);
      _tile_dpbusd(3, 5, 7);
    }
  }
  _tile_stored(0, sc.c[0][0], 64);
  _tile_stored(2, sc.c[0][NT], 64);
  if constexpr (NT == 2) {
    _tile_stored(1, sc.c[0][1], 64);
    _tile_stored(3, sc.c[0][NT + 1], 64);
  }
}

void finish_split(const ActLayout& al, const WeightUnit& u, Scratch& sc, int ni, int nt, int acc0,
                  int n_m, const uint8_t* a, int col0) {
  const __m512 yd = _mm512_loadu_ps(reinterpret_cast<const float*>(a + al.qbytes));
  const int32_t* extra = reinterpret_cast<const int32_t*>(a + al.qbytes + 64);
  __m512i pairs[8];
  for (int p = 0; p < 8; ++p) pairs[p] = _mm512_loadu_si512(extra + 16 * p);
  for (int m = 0; m < n_m; ++m) {
    const __m512i lo = _mm512_load_si512(sc.c[0][ni] + 16 * m);
    const __m512i hi = _mm512_load_si512(sc.c[0][nt + ni] + 16 * m);
    const __m512i sumi = _mm512_add_epi32(lo, _mm512_slli_epi32(hi, 3));
    __m512i bs = _mm512_setzero_si512();
    for (int p = 0; p < 8; ++p) bs = _mm512_dpwssd_epi32(bs, pairs[p], _mm512_set1_epi32(u.pm[m][p]));
    // scalar: y.d · (d · float(sumi) − dmin · float(summ))
    const __m512 t = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(u.d[m]), _mm512_cvtepi32_ps(sumi)),
                                   _mm512_mul_ps(_mm512_set1_ps(u.dmin[m]), _mm512_cvtepi32_ps(bs)));
    float* acc = sc.acc[acc0 + m] + col0;
    _mm512_storeu_ps(acc, _mm512_add_ps(_mm512_loadu_ps(acc), _mm512_mul_ps(yd, t)));
  }
}

// Q6_K on tiles: its signed 8-bit scale s per 16 elements is folded into the weight operand as
// the base-4 digits of s + 128 (0 .. 255): rows q·d_i (q ≤ 63, d_i ≤ 3: ≤ 189) for i = 0..3 and
// q itself, so Σ q·s·y = Σ_i 4^i·(Σ q·d_i·y) − 128·Σ q·y exactly, a whole super-block
// accumulated in five tiles and stored once.
void unpack_q6_split(const uint8_t* blk, Scratch& sc, int m) {
  KRegs r;
  kregs<Kind::Q6_K>(blk, r);
  const int8_t* scales = reinterpret_cast<const BlockQ6_K*>(blk)->scales;
  const __m128i biased = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)),
                                       _mm_set1_epi8(char(0x80)));  // s + 128
  const __m512i all = _mm512_broadcast_i32x4(biased);
  const __m512i three = _mm512_set1_epi16(3);
  for (int c = 0; c < 4; ++c) {
    // bytes of 128-bit lane k: the biased scale of group 4c + k (elements 64c + 16k ..)
    const __m512i idx = _mm512_set_epi32(0x01010101 * (4 * c + 3), 0x01010101 * (4 * c + 3), 0x01010101 * (4 * c + 3), 0x01010101 * (4 * c + 3),
                                         0x01010101 * (4 * c + 2), 0x01010101 * (4 * c + 2), 0x01010101 * (4 * c + 2), 0x01010101 * (4 * c + 2),
                                         0x01010101 * (4 * c + 1), 0x01010101 * (4 * c + 1), 0x01010101 * (4 * c + 1), 0x01010101 * (4 * c + 1),
                                         0x01010101 * (4 * c), 0x01010101 * (4 * c), 0x01010101 * (4 * c), 0x01010101 * (4 * c));
    const __m512i g = _mm512_shuffle_epi8(all, idx);
    for (int i = 0; i < 4; ++i) {
      const __m512i digit = _mm512_and_si512(_mm512_srli_epi16(g, 2 * i), three);  // per 16-bit lane
      _mm512_store_si512(sc.q6[i][m] + 64 * c, _mm512_mullo_epi16(r.q[c], digit));
    }
    _mm512_store_si512(sc.q6[4][m] + 64 * c, r.q[c]);
  }
  _mm256_store_si256(reinterpret_cast<__m256i*>(sc.w.pm[m]), r.pm);
  sc.w.d[m] = r.d;
}

void products_q6(const uint8_t* act, Scratch& sc) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  for (int s = 0; s < 4; ++s) {
    _tile_loadd(6, act + size_t(s) * 16 * 64, 64);
    _tile_loadd(5, sc.q6[0][0] + 64 * s, kQKK);
    _tile_dpbusd(0, 5, 6);
    _tile_loadd(5, sc.q6[1][0] + 64 * s, kQKK);
    _tile_dpbusd(1, 5, 6);
    _tile_loadd(5, sc.q6[2][0] + 64 * s, kQKK);
    _tile_dpbusd(2, 5, 6);
    _tile_loadd(5, sc.q6[3][0] + 64 * s, kQKK);
    _tile_dpbusd(3, 5, 6);
    _tile_loadd(5, sc.q6[4][0] + 64 * s, kQKK);
    _tile_dpbusd(4, 5, 6);
  }
  _tile_stored(0, sc.c[0][0], 64);
  _tile_stored(1, sc.c[0][1], 64);
  _tile_stored(2, sc.c[0][2], 64);
  _tile_stored(3, sc.c[0][3], 64);
  _tile_stored(4, sc.c[1][0], 64);
}

void finish_q6(const ActLayout& al, Scratch& sc, int acc0, int n_m, const uint8_t* a, int col0) {
  const __m512 yd = _mm512_loadu_ps(reinterpret_cast<const float*>(a + al.qbytes));
  const int32_t* extra = reinterpret_cast<const int32_t*>(a + al.qbytes + 64);
  __m512i pairs[8];
  for (int p = 0; p < 8; ++p) pairs[p] = _mm512_loadu_si512(extra + 16 * p);
  for (int m = 0; m < n_m; ++m) {
    const int32_t* c = sc.c[0][0] + 16 * m;
    __m512i sum = _mm512_load_si512(sc.c[0][3] + 16 * m);
    sum = _mm512_add_epi32(_mm512_slli_epi32(sum, 2), _mm512_load_si512(sc.c[0][2] + 16 * m));
    sum = _mm512_add_epi32(_mm512_slli_epi32(sum, 2), _mm512_load_si512(sc.c[0][1] + 16 * m));
    sum = _mm512_add_epi32(_mm512_slli_epi32(sum, 2), _mm512_load_si512(c));
    sum = _mm512_sub_epi32(sum, _mm512_slli_epi32(_mm512_load_si512(sc.c[1][0] + 16 * m), 7));
    __m512i bs = _mm512_setzero_si512();
    for (int p = 0; p < 8; ++p) bs = _mm512_dpwssd_epi32(bs, pairs[p], _mm512_set1_epi32(sc.w.pm[m][p]));
    // scalar: y.d · d · float(Σ sc · (q − 32)·y)
    const __m512i sumi = _mm512_sub_epi32(sum, _mm512_slli_epi32(bs, 5));
    const __m512 v = _mm512_mul_ps(_mm512_mul_ps(yd, _mm512_set1_ps(sc.w.d[m])), _mm512_cvtepi32_ps(sumi));
    float* acc = sc.acc[acc0 + m] + col0;
    _mm512_storeu_ps(acc, _mm512_add_ps(_mm512_loadu_ps(acc), v));
  }
}

// The k-quants on tiles (scales folded into the weight operand, K = 64): per super-block, the
// weight rows in passes of 16, unpacked by unpack(block, scratch, row), then tiles(activation
// tiles, count, first accumulator row, rows) for every activation tile of a block of rows.
template <class Unpack, class Tiles>
void rows_folded(const TypeTraits* type, const uint8_t* const* w, int n_w, const uint8_t* packed,
                 int64_t T, int64_t n_in, float* out, size_t out_stride, Scratch& sc,
                 Unpack unpack, Tiles tiles) {
  const ActLayout al(type->act);
  const int64_t n_units = n_in / al.unit;
  const size_t bb = size_t(type->block_bytes);
  configure(64);
  for (int64_t t0 = 0; t0 < T; t0 += kTBlockAmx) {
    const int64_t nt_rows = std::min<int64_t>(kTBlockAmx, T - t0);
    const int n_tiles = int((nt_rows + kAmxTile - 1) / kAmxTile);
    const int64_t tile0 = t0 / kAmxTile;
    for (int m = 0; m < n_w; ++m) std::memset(sc.acc[m], 0, sizeof(float) * 16 * size_t(n_tiles));
    for (int64_t un = 0; un < n_units; ++un) {
      const uint8_t* a[kMaxTiles];
      for (int j = 0; j < n_tiles; ++j) {
        a[j] = packed + (size_t(tile0 + j) * size_t(n_units) + size_t(un)) * al.unit_bytes;
      }
      for (int h = 0; 16 * h < n_w; ++h) {
        const int n_h = std::min(16, n_w - 16 * h);
        for (int m = 0; m < n_h; ++m) unpack(w[16 * h + m] + size_t(un) * bb, sc, m);
        tiles(a, n_tiles, 16 * h, n_h);
      }
    }
    for (int64_t t = 0; t < nt_rows; ++t) {
      float* o = out + size_t(t0 + t) * out_stride;
      for (int m = 0; m < n_w; ++m) o[m] = sc.acc[m][t];
    }
  }
  _tile_release();
}

template <Kind K>
void rows_q45(const TypeTraits* type, const uint8_t* const* w, int n_w, const uint8_t* packed,
              int64_t T, int64_t n_in, float* out, size_t out_stride, Scratch& sc) {
  const ActLayout al(type->act);
  rows_folded(type, w, n_w, packed, T, n_in, out, out_stride, sc,
              [](const uint8_t* blk, Scratch& s, int m) { unpack_q45_split<K>(blk, s.w, m); },
              [&](const uint8_t* const* a, int n_tiles, int acc0, int n_h) {
                for (int j = 0; j < n_tiles; j += 2) {
                  const int nt = std::min(2, n_tiles - j);
                  if (nt == 2) products_split<2>(sc.w, a + j, sc); else products_split<1>(sc.w, a + j, sc);
                  for (int ni = 0; ni < nt; ++ni) finish_split(al, sc.w, sc, ni, nt, acc0, n_h, a[j + ni], 16 * (j + ni));
                }
              });
}

void rows_q6(const TypeTraits* type, const uint8_t* const* w, int n_w, const uint8_t* packed,
             int64_t T, int64_t n_in, float* out, size_t out_stride, Scratch& sc) {
  const ActLayout al(type->act);
  rows_folded(type, w, n_w, packed, T, n_in, out, out_stride, sc, unpack_q6_split,
              [&](const uint8_t* const* a, int n_tiles, int acc0, int n_h) {
                for (int j = 0; j < n_tiles; ++j) {
                  products_q6(a[j], sc);
                  finish_q6(al, sc, acc0, n_h, a[j], 16 * j);
                }
              });
}

}  // namespace

size_t amx_packed_bytes(ActKind kind, int64_t T, int64_t n_in) {
  const ActLayout al(kind);
  const int64_t tiles = (T + kAmxTile - 1) / kAmxTile;
  return size_t(tiles) * size_t(n_in / al.unit) * al.unit_bytes;
}

void amx_pack_tile(ActKind kind, const uint8_t* act, size_t act_stride, int64_t T, int64_t n_in,
                   int64_t tile, uint8_t* packed) {
  const ActLayout al(kind);
  const int64_t n_units = n_in / al.unit;
  uint8_t* base = packed + size_t(tile) * size_t(n_units) * al.unit_bytes;
  std::memset(base, 0, size_t(n_units) * al.unit_bytes);
  const int groups = al.unit / 4;
  for (int n = 0; n < kAmxTile; ++n) {
    const int64_t t = tile * kAmxTile + n;
    if (t >= T) break;
    const uint8_t* row = act + size_t(t) * act_stride;
    for (int64_t un = 0; un < n_units; ++un) {
      uint8_t* dst = base + size_t(un) * al.unit_bytes;
      float* d = reinterpret_cast<float*>(dst + al.qbytes);
      int32_t* extra = reinterpret_cast<int32_t*>(dst + al.qbytes + 64);
      const int8_t* qs;
      if (kind == ActKind::Q8K) {
        const ActQ8K& y = reinterpret_cast<const ActQ8K*>(row)[un];
        qs = y.qs;
        d[n] = y.d;
        for (int p = 0; p < 8; ++p) {
          extra[16 * p + n] = int32_t(uint32_t(uint16_t(y.bsums[2 * p])) |
                                      uint32_t(uint16_t(y.bsums[2 * p + 1])) << 16);
        }
      } else {
        const ActQ8& y = reinterpret_cast<const ActQ8*>(row)[un];
        qs = y.qs;
        d[n] = y.d;
        extra[n] = y.isum;
      }
      for (int g = 0; g < groups; ++g) std::memcpy(dst + 64 * g + 4 * n, qs + 4 * g, 4);
    }
  }
}

void amx_rows(const TypeTraits* type, const uint8_t* const* w, int n_w, const uint8_t* packed,
              int64_t T, int64_t n_in, float* out, size_t out_stride) {
  Kind kind;
  if (!kind_of(type->type, &kind) || n_w < 1 || n_w > kAmxRows || T < 1) return;
  Scratch& sc = scratch();
  if (kind == Kind::Q4_K) return rows_q45<Kind::Q4_K>(type, w, n_w, packed, T, n_in, out, out_stride, sc);
  if (kind == Kind::Q5_K) return rows_q45<Kind::Q5_K>(type, w, n_w, packed, T, n_in, out, out_stride, sc);
  if (kind == Kind::Q6_K) return rows_q6(type, w, n_w, packed, T, n_in, out, out_stride, sc);
  // Q4_0, Q8_0: one block per tile product
  const auto unpack = kind == Kind::Q4_0 ? unpack_q4_0_row : unpack_q8_0_row;
  const ActLayout al(type->act);
  const int64_t n_units = n_in / al.unit;
  const size_t bb = size_t(type->block_bytes);
  WeightUnit& u = sc.w;
  const int mt = n_w > 16 ? 2 : 1;
  configure(kQK);
  for (int64_t t0 = 0; t0 < T; t0 += kTBlockAmx) {
    const int64_t nt_rows = std::min<int64_t>(kTBlockAmx, T - t0);
    const int n_tiles = int((nt_rows + kAmxTile - 1) / kAmxTile);
    const int64_t tile0 = t0 / kAmxTile;
    for (int m = 0; m < n_w; ++m) std::memset(sc.acc[m], 0, sizeof(float) * 16 * size_t(n_tiles));
    for (int64_t un = 0; un < n_units; ++un) {
      for (int m = 0; m < n_w; ++m) unpack(w[m] + size_t(un) * bb, u, m);
      for (int j = 0; j < n_tiles; j += 2) {
        const int nt = std::min(2, n_tiles - j);
        const uint8_t* a[2];
        for (int i = 0; i < nt; ++i) {
          a[i] = packed + (size_t(tile0 + j + i) * size_t(n_units) + size_t(un)) * al.unit_bytes;
        }
        if (mt == 2) {
          if (nt == 2) products<2, 2>(u, a, sc); else products<2, 1>(u, a, sc);
        } else {
          if (nt == 2) products<1, 2>(u, a, sc); else products<1, 1>(u, a, sc);
        }
        for (int mi = 0; mi < mt; ++mi) {
          const int n_m = std::min(16, n_w - 16 * mi);
          for (int ni = 0; ni < nt; ++ni) finish(kind, al, u, sc, mi * nt + ni, 16 * mi, n_m, a[ni], 16 * (j + ni));
        }
      }
    }
    for (int64_t t = 0; t < nt_rows; ++t) {
      float* o = out + size_t(t0 + t) * out_stride;
      for (int m = 0; m < n_w; ++m) o[m] = sc.acc[m][t];
    }
  }
  _tile_release();
}

void amx_small_rows(const TypeTraits* type, const uint8_t* const* w, int n_w, const uint8_t* act,
                    size_t act_stride, int64_t T, int64_t n_in, float* out, size_t out_stride) {
  Kind kind;
  if (!kind_of(type->type, &kind) || !amx_small_needed(type->type) || n_w < 1 || n_w > kAmxRows ||
      T < 1 || T > kTBlockAmx) {
    return;
  }
  const int64_t n_units = n_in / (type->act == ActKind::Q8K ? kQKK : kQK);
  const size_t bb = size_t(type->block_bytes);
  Scratch& sc = scratch();
  for (int m = 0; m < n_w; ++m) std::memset(sc.acc[m], 0, sizeof(float) * size_t(T));
  const size_t row_bytes = size_t(n_units) * bb;
  bool consecutive = true;
  for (int m = 1; m < n_w; ++m) consecutive = consecutive && w[m] == w[0] + size_t(m) * row_bytes;
  sc.ahead = consecutive ? kPrefetchRows * row_bytes : 0;
  switch (kind) {
    case Kind::Q4_0: small_q32<Kind::Q4_0>(w, n_w, bb, act, act_stride, T, n_units, sc); break;
    case Kind::Q8_0: small_q32<Kind::Q8_0>(w, n_w, bb, act, act_stride, T, n_units, sc); break;
    default: break;  // the k-quants: their AVX-512 kernels (gemm_amx.h, amx_small_needed)
  }
  for (int64_t t = 0; t < T; ++t) {
    float* o = out + size_t(t) * out_stride;
    for (int m = 0; m < n_w; ++m) o[m] = sc.acc[m][t];
  }
}

}  // namespace lexguide::kernels
