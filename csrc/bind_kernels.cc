// Bindings of the runtime kernels (quantized matvec/matmul, embedding rows, thread pool).
// Thin: every size, index and buffer is checked here (std::invalid_argument → ValueError,
// which lexguide.runtime.kernels turns into ModelError); the GIL is released around the work.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/attention.h"
#include "kernels/blocks.h"
#include "kernels/dot.h"
#include "kernels/layers.h"
#include "kernels/matmul.h"
#include "kernels/quantize_act.h"
#include "common/thread_pool.h"

namespace nb = nanobind;
namespace k = lexguide::kernels;

namespace {

using Floats2 = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using OutFloats2 = nb::ndarray<float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
// an output whose rows may sit in a wider array (a column slice of it): strides checked below
using OutRows = nb::ndarray<float, nb::ndim<2>, nb::device::cpu>;
using Bytes = nb::ndarray<const uint8_t, nb::c_contig, nb::device::cpu>;
using Ids = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Floats1 = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Ints2 = nb::ndarray<const int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
// a KV cache seen as bytes: (n_layer, n_kv, n_ctx, cache_row_bytes(type, hd)) (attention.h)
using Cache = nb::ndarray<uint8_t, nb::ndim<4>, nb::c_contig, nb::device::cpu>;

[[noreturn]] void fail(const std::string& msg) { throw std::invalid_argument(msg); }

const k::TypeTraits& traits_of(int32_t ggml_type) {
  const k::TypeTraits* t = k::type_traits(ggml_type);
  if (!t) fail("no kernel for ggml type " + std::to_string(ggml_type));
  return *t;
}

// Checks that weight holds n_out rows of n_in elements of the type; returns the row size.
size_t check_weight(const k::TypeTraits& t, const Bytes& w, int64_t n_out, int64_t n_in) {
  if (n_out <= 0 || n_in <= 0) {
    fail("matrix shape (" + std::to_string(n_out) + ", " + std::to_string(n_in) + ") is empty");
  }
  if (n_in % t.block) {
    fail(std::string(t.name) + ": row length " + std::to_string(n_in) +
         " is not a multiple of the block size " + std::to_string(t.block));
  }
  const size_t row_bytes = size_t(n_in / t.block) * size_t(t.block_bytes);
  if (n_out > int64_t(w.size() / row_bytes) || w.size() != size_t(n_out) * row_bytes) {
    fail(std::string(t.name) + ": a (" + std::to_string(n_out) + ", " + std::to_string(n_in) +
         ") matrix needs " + std::to_string(size_t(n_out) * row_bytes) + " bytes, got " +
         std::to_string(w.size()));
  }
  return row_bytes;
}

void check_ids(const Ids& ids, int64_t n, const char* what) {
  const int64_t* p = ids.data();
  for (size_t i = 0; i < ids.shape(0); ++i) {
    if (p[i] < 0 || p[i] >= n) {
      fail(std::string(what) + " " + std::to_string(p[i]) + " is out of range [0, " +
           std::to_string(n) + ")");
    }
  }
}

bool overlaps(const void* a, size_t na, const void* b, size_t nb_) {
  const char* pa = static_cast<const char*>(a);
  const char* pb = static_cast<const char*>(b);
  return na && nb_ && pa < pb + nb_ && pb < pa + na;
}

using Part = std::tuple<Bytes, int32_t, int64_t>;  // (weight bytes, ggml type, n_out)

void matmul(Floats2 x, std::vector<Part> parts, int64_t n_in, OutRows out,
            std::optional<Ids> rows, int n_threads, bool simd) {
  if (parts.empty() || parts.size() > size_t(k::kMaxParts)) {
    fail("a product takes 1 to " + std::to_string(k::kMaxParts) + " matrices, got " +
         std::to_string(parts.size()));
  }
  if (rows && parts.size() != 1) fail("selected output rows need exactly one matrix");
  const int64_t T = int64_t(x.shape(0));
  if (int64_t(x.shape(1)) != n_in) {
    fail("x has " + std::to_string(x.shape(1)) + " columns, the matrix " + std::to_string(n_in));
  }
  std::vector<k::MatPart> mp;
  int64_t n_sel = 0;
  for (const Part& p : parts) {
    const k::TypeTraits& t = traits_of(std::get<1>(p));
    const Bytes& w = std::get<0>(p);
    const int64_t n_out = std::get<2>(p);
    check_weight(t, w, n_out, n_in);
    mp.push_back({w.data(), &t, n_out});
    n_sel += n_out;
  }
  if (rows) {
    check_ids(*rows, n_sel, "output row");
    n_sel = int64_t(rows->shape(0));
  }
  if (int64_t(out.shape(0)) != T || int64_t(out.shape(1)) != n_sel) {
    fail("out has shape (" + std::to_string(out.shape(0)) + ", " + std::to_string(out.shape(1)) +
         "), expected (" + std::to_string(T) + ", " + std::to_string(n_sel) + ")");
  }
  const int64_t ld = T > 1 ? int64_t(out.stride(0)) : n_sel;
  if ((n_sel > 1 && out.stride(1) != 1) || ld < n_sel) {
    fail("out must have contiguous rows (unit column stride, row stride >= its width)");
  }
  const size_t out_span = T ? size_t((T - 1) * ld + n_sel) * 4 : 0;
  if (overlaps(out.data(), out_span, x.data(), x.size() * 4)) {
    fail("out must not share memory with x");
  }
  for (const k::MatPart& p : mp) {
    const size_t w_bytes = size_t(p.n_out) * size_t(n_in / p.type->block) * size_t(p.type->block_bytes);
    if (overlaps(out.data(), out_span, p.w, w_bytes)) fail("out must not share memory with a weight");
  }
  k::MatmulArgs a{x.data(), T, n_in, mp.data(), int(mp.size()),
                  rows ? rows->data() : nullptr, rows ? n_sel : 0, out.data(), ld, n_threads, simd};
  nb::gil_scoped_release release;
  k::matmul(a);
}

void dequantize_rows(Bytes weight, int32_t ggml_type, int64_t n_rows, int64_t n_in, Ids ids,
                     OutFloats2 out) {
  const k::TypeTraits& t = traits_of(ggml_type);
  const size_t row_bytes = check_weight(t, weight, n_rows, n_in);
  check_ids(ids, n_rows, "row");
  if (out.shape(0) != ids.shape(0) || int64_t(out.shape(1)) != n_in) {
    fail("out has shape (" + std::to_string(out.shape(0)) + ", " + std::to_string(out.shape(1)) +
         "), expected (" + std::to_string(ids.shape(0)) + ", " + std::to_string(n_in) + ")");
  }
  nb::gil_scoped_release release;
  for (size_t i = 0; i < ids.shape(0); ++i) {
    k::dequantize_row(t.type, weight.data() + size_t(ids.data()[i]) * row_bytes,
                      out.data() + i * size_t(n_in), n_in);
  }
}

void quantize_roundtrip(Floats2 x, int32_t ggml_type, OutFloats2 out) {
  const k::TypeTraits& t = traits_of(ggml_type);
  const int64_t n = int64_t(x.shape(1));
  if (n % t.block) {
    fail(std::string(t.name) + ": row length " + std::to_string(n) +
         " is not a multiple of the block size " + std::to_string(t.block));
  }
  if (out.shape(0) != x.shape(0) || out.shape(1) != x.shape(1)) fail("out must have x's shape");
  if (overlaps(out.data(), out.size() * 4, x.data(), x.size() * 4)) fail("out must not share memory with x");
  nb::gil_scoped_release release;
  for (size_t r = 0; r < x.shape(0); ++r) {
    k::roundtrip_act_row(t.act, x.data() + r * size_t(n), out.data() + r * size_t(n), n);
  }
}


void gated(Floats2 gate_up, bool gelu, OutFloats2 out) {
  const size_t R = gate_up.shape(0), w = gate_up.shape(1);
  if (w % 2) fail("gate_up must hold gate and up side by side (an even width)");
  if (out.shape(0) != R || out.shape(1) != w / 2) fail("out must be (rows, width / 2) of gate_up");
  if (overlaps(out.data(), out.size() * 4, gate_up.data(), gate_up.size() * 4)) {
    fail("out must not share memory with gate_up");
  }
  nb::gil_scoped_release release;
  k::gated_rows(gate_up.data(), int64_t(R), int(w / 2),
                gelu ? k::Activation::GeluTanh : k::Activation::SiLU, out.data());
}

void rms_norm(Floats2 x, Floats1 w, float eps, OutFloats2 out) {
  const size_t n = x.shape(1);
  if (w.shape(0) != n) fail("the norm weight must have x's row length");
  if (out.shape(0) != x.shape(0) || out.shape(1) != n) fail("out must have x's shape");
  if (out.data() != x.data() && overlaps(out.data(), out.size() * 4, x.data(), x.size() * 4)) {
    fail("out must be x or not share memory with it");
  }
  nb::gil_scoped_release release;
  k::rms_norm_rows(x.data(), w.data(), int64_t(x.shape(0)), int(n), eps, out.data());
}

std::string shape_str(std::initializer_list<size_t> dims) {
  std::string s = "(";
  for (size_t d : dims) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
  return s + ")";
}

// The cache type code of the Python side (0 f32, 1 f16, 2 q8_0), checked against the head size.
k::CacheType cache_type(int code, int hd) {
  if (code < 0 || code > 2) fail("cache type " + std::to_string(code) + " is not 0 (f32), 1 (f16) or 2 (q8_0)");
  const k::CacheType t = k::CacheType(code);
  if (k::cache_row_bytes(t, hd) == 0) {
    fail("a q8_0 KV cache needs a head size that is a multiple of 32, got " + std::to_string(hd));
  }
  return t;
}

// The sequences of a batched call: seqs (B, 3) = row0, n_rows, pos0 per sequence over R rows;
// k_caches / v_caches: one (n_layer, n_kv, n_ctx, row bytes) byte array each per sequence.
// Checks rows (within R, disjoint), positions (within the cache and the n_pos rows of the
// rotation tables), shapes, and that no two of the caches and the `memory` spans share bytes.
std::vector<k::LayerSeq> check_seqs(int64_t R, const Ints2& seqs, const std::vector<Cache>& ks,
                                    const std::vector<Cache>& vs, int n_layer_min, int n_kv,
                                    k::CacheType type, int hd, int64_t n_pos,
                                    std::vector<std::pair<const char*, size_t>> memory) {
  const size_t rb = k::cache_row_bytes(type, hd);
  const size_t B = seqs.shape(0);
  if (seqs.shape(1) != 3 || B == 0) fail("seqs must be a non-empty (B, 3) array");
  if (ks.size() != B || vs.size() != B) {
    fail("one key and one value cache per sequence: got " + std::to_string(ks.size()) +
         " and " + std::to_string(vs.size()) + " for " + std::to_string(B));
  }
  std::vector<k::LayerSeq> out(B);
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (size_t i = 0; i < B; ++i) {
    const int64_t* r = seqs.data() + 3 * i;
    const Cache& kc = ks[i];
    const Cache& vc = vs[i];
    for (const Cache* c : {&kc, &vc}) {
      if (c->shape(1) != size_t(n_kv) || c->shape(3) != rb ||
          c->shape(0) != kc.shape(0) || c->shape(2) != kc.shape(2)) {
        fail("cache " + std::to_string(i) + " has byte shape " +
             shape_str({c->shape(0), c->shape(1), c->shape(2), c->shape(3)}) +
             ", expected (n_layer, " + std::to_string(n_kv) + ", n_ctx, " + std::to_string(rb) +
             ") for keys and values alike");
      }
    }
    if (kc.shape(0) < size_t(n_layer_min)) {
      fail("cache " + std::to_string(i) + " has " + std::to_string(kc.shape(0)) +
           " layers, " + std::to_string(n_layer_min) + " needed");
    }
    const int64_t n_ctx = int64_t(kc.shape(2));
    if (r[0] < 0 || r[1] < 1 || r[0] > R - r[1]) {
      fail("sequence " + std::to_string(i) + ": rows [" + std::to_string(r[0]) + ", +" +
           std::to_string(r[1]) + ") are not within the " + std::to_string(R) + " rows");
    }
    if (r[2] < 0 || r[2] > n_ctx - r[1] || r[2] > n_pos - r[1]) {
      fail("sequence " + std::to_string(i) + ": positions " + std::to_string(r[2]) + " .. " +
           std::to_string(r[2] + r[1] - 1) + " exceed its cache of " + std::to_string(n_ctx) +
           " or the rotation tables of " + std::to_string(n_pos));
    }
    spans.emplace_back(r[0], r[0] + r[1]);
    out[i] = {r[0], r[1], r[2], kc.data(), vc.data(), n_ctx};
    memory.emplace_back(reinterpret_cast<const char*>(kc.data()), kc.size());
    memory.emplace_back(reinterpret_cast<const char*>(vc.data()), vc.size());
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].first < spans[i - 1].second) fail("sequences must have disjoint rows");
  }
  for (size_t i = 0; i < memory.size(); ++i) {
    for (size_t j = i + 1; j < memory.size(); ++j) {
      if (overlaps(memory[i].first, memory[i].second, memory[j].first, memory[j].second)) {
        fail("the activations and every sequence's key and value caches must be distinct memory");
      }
    }
  }
  return out;
}

void check_heads(int n_q, int n_kv, int hd, int n_rot) {
  if (n_kv < 1 || n_q < n_kv || n_q % n_kv || hd < 1) {
    fail("heads: n_q " + std::to_string(n_q) + " must be a positive multiple of n_kv " +
         std::to_string(n_kv) + ", head size " + std::to_string(hd) + " positive");
  }
  if (n_rot < 0 || n_rot % 2 || n_rot > hd) {
    fail("n_rot " + std::to_string(n_rot) + " must be even and within the head size");
  }
}

void check_vector(const std::optional<Floats1>& v, size_t n, const char* what) {
  if (v && v->shape(0) != n) {
    fail(std::string(what) + " has " + std::to_string(v->shape(0)) + " elements, expected " +
         std::to_string(n));
  }
}

// out (R, n_q·hd) <- attention of the rows of qkv over their sequences' caches (attention.h).
void attention(OutFloats2 qkv, OutFloats2 out, Ints2 seqs, std::vector<Cache> k_caches,
               std::vector<Cache> v_caches, int64_t layer, int n_q, int n_kv, int hd,
               std::optional<Floats1> q_norm, std::optional<Floats1> k_norm, float eps,
               Floats2 cos, Floats2 sin, bool neox, int n_rot, float scale, int64_t window,
               int n_threads, int cache) {
  check_heads(n_q, n_kv, hd, n_rot);
  const k::CacheType type = cache_type(cache, hd);
  const int64_t R = int64_t(qkv.shape(0));
  const size_t width = size_t(n_q + 2 * n_kv) * size_t(hd);
  if (qkv.shape(1) != width) {
    fail("qkv has shape " + shape_str({qkv.shape(0), qkv.shape(1)}) + ", expected " +
         shape_str({size_t(R), width}));
  }
  if (out.shape(0) != size_t(R) || out.shape(1) != size_t(n_q) * size_t(hd)) {
    fail("out has shape " + shape_str({out.shape(0), out.shape(1)}) + ", expected " +
         shape_str({size_t(R), size_t(n_q) * size_t(hd)}));
  }
  if (cos.shape(1) != size_t(n_rot / 2) || sin.shape(0) != cos.shape(0) ||
      sin.shape(1) != cos.shape(1)) {
    fail("cos and sin must both have shape (positions, n_rot / 2)");
  }
  if (q_norm.has_value() != k_norm.has_value()) fail("q_norm and k_norm come together");
  check_vector(q_norm, size_t(hd), "q_norm");
  check_vector(k_norm, size_t(hd), "k_norm");
  if (window < 0) fail("window must be >= 0");
  if (layer < 0) fail("layer must be >= 0");
  const std::vector<k::LayerSeq> ls = check_seqs(
      R, seqs, k_caches, v_caches, int(layer) + 1, n_kv, type, hd, int64_t(cos.shape(0)),
      {{reinterpret_cast<const char*>(qkv.data()), qkv.size() * 4},
       {reinterpret_cast<const char*>(out.data()), out.size() * 4}});
  std::vector<k::AttnSeq> ss;
  for (const k::LayerSeq& s : ls) {
    const size_t slab = size_t(n_kv) * size_t(s.n_ctx) * k::cache_row_bytes(type, hd) * size_t(layer);
    ss.push_back({s.row0, s.n_rows, s.pos0, s.k + slab, s.v + slab, s.n_ctx});
  }
  k::AttnArgs a{qkv.data(), out.data(), R, n_q, n_kv, hd,
                q_norm ? q_norm->data() : nullptr, k_norm ? k_norm->data() : nullptr, eps,
                cos.data(), sin.data(), int64_t(cos.shape(0)), n_rot, neox, scale, window,
                ss.data(), int(ss.size()), n_threads, type};
  nb::gil_scoped_release release;
  k::attention(a);
}

// The layers of a model held natively (layers.h): built once from the weights (zero-copy
// views, kept alive here), then forward() per decode step.
class NativeLayers {
 public:
  NativeLayers(int n_embd, int n_ff, int n_q, int n_kv, int hd, int n_rot, bool neox, float eps,
               float query_scale, bool gelu, Floats1 output_norm) {
    check_heads(n_q, n_kv, hd, n_rot);
    if (n_embd < 1 || n_ff < 1) fail("n_embd and n_ff must be positive");
    if (output_norm.shape(0) != size_t(n_embd)) fail("output_norm must have n_embd elements");
    shape_ = {n_embd, n_ff, n_q, n_kv, hd, n_rot, neox, eps, query_scale,
              gelu ? k::Activation::GeluTanh : k::Activation::SiLU, output_norm.data()};
    vectors_.push_back(output_norm);
  }

  void add_layer(Floats1 attn_norm, std::vector<Part> qkv, std::optional<Floats1> qkv_bias,
                 Part wo, std::optional<Floats1> wo_bias, Floats1 ffn_norm,
                 std::vector<Part> gate_up, Part down, std::optional<Floats1> q_norm,
                 std::optional<Floats1> k_norm, std::optional<Floats1> post_attn_norm,
                 std::optional<Floats1> post_ffn_norm, int64_t window) {
    const k::ModelShape& m = shape_;
    const std::string at = "layer " + std::to_string(layers_.size()) + ": ";
    k::LayerWeights L;
    if (qkv.size() != 3 || gate_up.size() != 2) fail(at + "needs q, k, v and gate, up parts");
    const int64_t sizes[3] = {int64_t(m.n_q) * m.hd, int64_t(m.n_kv) * m.hd, int64_t(m.n_kv) * m.hd};
    for (int p = 0; p < 3; ++p) {
      L.qkv[p] = part(qkv[size_t(p)], sizes[p], m.n_embd, at + "qkv");
    }
    L.n_qkv = 3;
    L.wo = part(wo, m.n_embd, int64_t(m.n_q) * m.hd, at + "attn_output");
    for (int p = 0; p < 2; ++p) L.gate_up[p] = part(gate_up[size_t(p)], m.n_ff, m.n_embd, at + "ffn");
    L.down = part(down, m.n_embd, m.n_ff, at + "ffn_down");
    check_vector(attn_norm, size_t(m.n_embd), "attn_norm");
    check_vector(ffn_norm, size_t(m.n_embd), "ffn_norm");
    check_vector(qkv_bias, size_t(sizes[0] + sizes[1] + sizes[2]), "qkv bias");
    check_vector(wo_bias, size_t(m.n_embd), "attn_output bias");
    check_vector(q_norm, size_t(m.hd), "q_norm");
    check_vector(k_norm, size_t(m.hd), "k_norm");
    check_vector(post_attn_norm, size_t(m.n_embd), "post_attention_norm");
    check_vector(post_ffn_norm, size_t(m.n_embd), "post_ffw_norm");
    if (q_norm.has_value() != k_norm.has_value()) fail(at + "q_norm and k_norm come together");
    if (window < 0) fail(at + "window must be >= 0");
    L.attn_norm = keep(attn_norm);
    L.ffn_norm = keep(ffn_norm);
    L.qkv_bias = keep(qkv_bias);
    L.wo_bias = keep(wo_bias);
    L.q_norm = keep(q_norm);
    L.k_norm = keep(k_norm);
    L.post_attn_norm = keep(post_attn_norm);
    L.post_ffn_norm = keep(post_ffn_norm);
    L.window = window;
    layers_.push_back(L);
    tables_.emplace_back();
  }

  // The RoPE tables (positions, n_rot / 2) of a layer (kept alive until replaced).
  void set_rope(int64_t layer, Floats2 cos, Floats2 sin) {
    if (layer < 0 || size_t(layer) >= layers_.size()) fail("no layer " + std::to_string(layer));
    if (cos.shape(1) != size_t(shape_.n_rot / 2) || sin.shape(0) != cos.shape(0) ||
        sin.shape(1) != cos.shape(1)) {
      fail("cos and sin must both have shape (positions, n_rot / 2)");
    }
    k::LayerWeights& L = layers_[size_t(layer)];
    L.cos = cos.data();
    L.sin = sin.data();
    L.rope_rows = int64_t(cos.shape(0));
    tables_[size_t(layer)] = {cos, sin};
  }

  void forward(OutFloats2 x, Ints2 seqs, std::vector<Cache> k_caches, std::vector<Cache> v_caches,
               OutFloats2 out, int n_threads, bool simd, int cache) {
    const k::ModelShape& m = shape_;
    const k::CacheType type = cache_type(cache, m.hd);
    if (layers_.empty()) fail("the model has no layers");
    int64_t n_pos = INT64_MAX;
    for (const k::LayerWeights& L : layers_) {
      if (!L.cos) fail("the rotation tables of every layer must be set first");
      n_pos = std::min(n_pos, L.rope_rows);
    }
    const int64_t R = int64_t(x.shape(0));
    if (x.shape(1) != size_t(m.n_embd) || out.shape(0) != x.shape(0) || out.shape(1) != x.shape(1)) {
      fail("x and out must both have shape (rows, n_embd)");
    }
    const std::vector<k::LayerSeq> ls = check_seqs(
        R, seqs, k_caches, v_caches, int(layers_.size()), m.n_kv, type, m.hd, n_pos,
        {{reinterpret_cast<const char*>(x.data()), x.size() * 4},
         {reinterpret_cast<const char*>(out.data()), out.size() * 4}});
    nb::gil_scoped_release release;
    k::forward_layers(m, layers_, x.data(), R, ls, type, out.data(), n_threads, simd);
  }

 private:
  k::MatPart part(const Part& p, int64_t n_out, int64_t n_in, const std::string& what) {
    const k::TypeTraits& t = traits_of(std::get<1>(p));
    const Bytes& w = std::get<0>(p);
    if (std::get<2>(p) != n_out) {
      fail(what + ": " + std::to_string(std::get<2>(p)) + " output rows, expected " +
           std::to_string(n_out));
    }
    check_weight(t, w, n_out, n_in);
    weights_.push_back(w);
    return {w.data(), &t, n_out};
  }
  const float* keep(const std::optional<Floats1>& v) {
    if (!v) return nullptr;
    vectors_.push_back(*v);
    return v->data();
  }

  k::ModelShape shape_;
  std::vector<k::LayerWeights> layers_;
  std::vector<Bytes> weights_;     // the arrays the layers point into, kept alive
  std::vector<Floats1> vectors_;
  std::vector<std::pair<Floats2, Floats2>> tables_;
};

}  // namespace

void bind_kernels(nb::module_& m) {
  m.def("kernels_matmul", &matmul, nb::arg("x").noconvert(), nb::arg("parts"),
        nb::arg("n_in"), nb::arg("out").noconvert(),
        nb::arg("rows").noconvert() = nb::none(), nb::arg("n_threads") = 0,
        nb::arg("simd") = true,
        "out (T, n_sel) <- x (T, n_in) @ [W_1 | W_2 ...].T for the parts (weight bytes, ggml type, "
        "n_out) in ggml blocks (csrc/kernels/matmul.h); rows: only those output rows of a "
        "single part. Releases the GIL.");
  m.def("kernels_dequantize_rows", &dequantize_rows, nb::arg("weight").noconvert(),
        nb::arg("ggml_type"), nb::arg("n_rows"), nb::arg("n_in"), nb::arg("ids").noconvert(),
        nb::arg("out").noconvert(), "out (len(ids), n_in) <- rows ids of W, dequantized.");
  m.def("kernels_quantize_roundtrip", &quantize_roundtrip, nb::arg("x").noconvert(),
        nb::arg("ggml_type"), nb::arg("out").noconvert(),
        "out <- x as the activation blocks of the type's dot products stand for it (d·q).");
  m.def("kernels_gated", &gated, nb::arg("gate_up").noconvert(), nb::arg("gelu"),
        nb::arg("out").noconvert(),
        "out (R, n_ff) <- act(gate) * up of gate_up (R, 2 n_ff), llama.cpp's SiLU / GELU.");
  m.def("kernels_rms_norm", &rms_norm, nb::arg("x").noconvert(), nb::arg("w").noconvert(),
        nb::arg("eps"), nb::arg("out").noconvert(),
        "out (R, n) <- x / sqrt(mean(x^2) + eps) * w per row, ggml's rounding (out may be x).");
  m.def("kernels_attention", &attention, nb::arg("qkv").noconvert(), nb::arg("out").noconvert(),
        nb::arg("seqs").noconvert(), nb::arg("k_caches").noconvert(),
        nb::arg("v_caches").noconvert(), nb::arg("layer"), nb::arg("n_q"), nb::arg("n_kv"),
        nb::arg("hd"), nb::arg("q_norm").noconvert() = nb::none(),
        nb::arg("k_norm").noconvert() = nb::none(), nb::arg("eps"), nb::arg("cos").noconvert(),
        nb::arg("sin").noconvert(), nb::arg("neox"), nb::arg("n_rot"), nb::arg("scale"),
        nb::arg("window"), nb::arg("n_threads") = 0, nb::arg("cache_type") = 1,
        "Decode attention of a batch of sequences over their own KV caches "
        "(csrc/kernels/attention.h; caches as byte arrays, cache_type 0 f32, 1 f16, 2 q8_0): "
        "q/k norms, RoPE, cache writes, causal/sliding-window softmax attention; "
        "out (R, n_q*hd). Releases the GIL.");
  nb::class_<NativeLayers>(m, "KernelsLayers",
                           "The transformer layers of a model, natively (csrc/kernels/layers.h).")
      .def(nb::init<int, int, int, int, int, int, bool, float, float, bool, Floats1>(),
           nb::arg("n_embd"), nb::arg("n_ff"), nb::arg("n_q"), nb::arg("n_kv"), nb::arg("hd"),
           nb::arg("n_rot"), nb::arg("neox"), nb::arg("eps"), nb::arg("query_scale"),
           nb::arg("gelu"), nb::arg("output_norm").noconvert())
      .def("add_layer", &NativeLayers::add_layer, nb::arg("attn_norm").noconvert(),
           nb::arg("qkv"), nb::arg("qkv_bias").noconvert().none(), nb::arg("wo"),
           nb::arg("wo_bias").noconvert().none(), nb::arg("ffn_norm").noconvert(),
           nb::arg("gate_up"), nb::arg("down"), nb::arg("q_norm").noconvert().none(),
           nb::arg("k_norm").noconvert().none(), nb::arg("post_attn_norm").noconvert().none(),
           nb::arg("post_ffn_norm").noconvert().none(), nb::arg("window"))
      .def("set_rope", &NativeLayers::set_rope, nb::arg("layer"), nb::arg("cos").noconvert(),
           nb::arg("sin").noconvert())
      .def("forward", &NativeLayers::forward, nb::arg("x").noconvert(),
           nb::arg("seqs").noconvert(), nb::arg("k_caches").noconvert(),
           nb::arg("v_caches").noconvert(), nb::arg("out").noconvert(), nb::arg("n_threads") = 0,
           nb::arg("simd") = true, nb::arg("cache_type") = 1,
           "x (R, n_embd) embeddings (overwritten) -> out (R, n_embd) final normalised hidden "
           "states of the rows of the sequences seqs (B, 3: row0, n_rows, pos0), appending "
           "their keys and values to their caches (byte arrays of cache_type 0 f32, 1 f16, "
           "2 q8_0). Releases the GIL.");
  m.def("kernels_supported_types", [] {
    std::vector<std::pair<int, std::string>> v;
    for (int id = 0; id < 64; ++id) {
      if (const k::TypeTraits* t = k::type_traits(id)) v.emplace_back(id, t->name);
    }
    return v;
  });
  m.def("kernels_kernel_name", [](int32_t ggml_type, bool simd) {
    return std::string(k::kernel_name(&traits_of(ggml_type), simd));
  });
  m.def("kernels_cpu_isa", [] { return std::string(k::isa_name(k::cpu_isa())); });
  m.def("kernels_isa", [] { return std::string(k::isa_name(k::isa())); });
  m.def("kernels_set_isa_cap", [](const std::string& name) {
    k::Isa level;
    if (!k::isa_from_name(name.c_str(), &level)) {
      throw std::invalid_argument("unknown instruction set '" + name +
                                  "': expected scalar, avx2, avx512 or amx");
    }
    k::set_isa_cap(level);
  });
  m.def("kernels_default_threads", &lexguide::default_threads);
  m.def("kernels_pool_size", [] { return lexguide::shared_pool().size(); });
  m.def("kernels_set_pool_size", [](int n) {
    if (n < 1 || n > lexguide::kMaxThreads) fail("threads must be in [1, 1024], got " + std::to_string(n));
    nb::gil_scoped_release release;
    lexguide::shared_pool().resize(n);
  });
}
