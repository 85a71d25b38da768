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
#include "kernels/matmul.h"
#include "kernels/quantize_act.h"
#include "kernels/thread_pool.h"

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
using Cache = nb::ndarray<float, nb::ndim<4>, nb::c_contig, nb::device::cpu>;

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


std::string shape_str(std::initializer_list<size_t> dims) {
  std::string s = "(";
  for (size_t d : dims) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
  return s + ")";
}

// out (R, n_q·hd) <- attention of the rows of qkv over their sequences' caches (attention.h);
// seqs (B, 3): row0, n_rows, pos0 per sequence; k_caches / v_caches: B arrays
// (n_layer, n_kv, n_ctx, hd), one pair per sequence, all distinct.
void attention(OutFloats2 qkv, OutFloats2 out, Ints2 seqs, std::vector<Cache> k_caches,
               std::vector<Cache> v_caches, int64_t layer, int n_q, int n_kv, int hd,
               std::optional<Floats1> q_norm, std::optional<Floats1> k_norm, float eps,
               Floats2 cos, Floats2 sin, bool neox, int n_rot, float scale, int64_t window,
               int n_threads) {
  if (n_kv < 1 || n_q < n_kv || n_q % n_kv || hd < 1) {
    fail("heads: n_q " + std::to_string(n_q) + " must be a positive multiple of n_kv " +
         std::to_string(n_kv) + ", head size " + std::to_string(hd) + " positive");
  }
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
  if (overlaps(qkv.data(), qkv.size() * 4, out.data(), out.size() * 4)) {
    fail("out must not share memory with qkv");
  }
  if (n_rot < 0 || n_rot % 2 || n_rot > hd) {
    fail("n_rot " + std::to_string(n_rot) + " must be even and within the head size");
  }
  if (cos.shape(1) != size_t(n_rot / 2) || sin.shape(0) != cos.shape(0) ||
      sin.shape(1) != cos.shape(1)) {
    fail("cos and sin must both have shape (positions, n_rot / 2)");
  }
  if (q_norm.has_value() != k_norm.has_value() ||
      (q_norm && (q_norm->shape(0) != size_t(hd) || k_norm->shape(0) != size_t(hd)))) {
    fail("q_norm and k_norm come together, each of the head size");
  }
  if (window < 0) fail("window must be >= 0");
  const size_t B = seqs.shape(0);
  if (seqs.shape(1) != 3 || B == 0) fail("seqs must be a non-empty (B, 3) array");
  if (k_caches.size() != B || v_caches.size() != B) {
    fail("one key and one value cache per sequence: got " + std::to_string(k_caches.size()) +
         " and " + std::to_string(v_caches.size()) + " for " + std::to_string(B));
  }
  std::vector<k::AttnSeq> ss(B);
  std::vector<std::pair<int64_t, int64_t>> spans;
  std::vector<std::pair<const char*, size_t>> memory = {
      {reinterpret_cast<const char*>(qkv.data()), qkv.size() * 4},
      {reinterpret_cast<const char*>(out.data()), out.size() * 4}};
  for (size_t i = 0; i < B; ++i) {
    const int64_t* r = seqs.data() + 3 * i;
    const Cache& kc = k_caches[i];
    const Cache& vc = v_caches[i];
    for (const Cache* c : {&kc, &vc}) {
      if (c->shape(1) != size_t(n_kv) || c->shape(3) != size_t(hd) ||
          c->shape(0) != kc.shape(0) || c->shape(2) != kc.shape(2)) {
        fail("cache " + std::to_string(i) + " has shape " +
             shape_str({c->shape(0), c->shape(1), c->shape(2), c->shape(3)}) +
             ", expected (n_layer, " + std::to_string(n_kv) + ", n_ctx, " + std::to_string(hd) +
             ") for keys and values alike");
      }
    }
    if (layer < 0 || size_t(layer) >= kc.shape(0)) {
      fail("layer " + std::to_string(layer) + " is out of range [0, " +
           std::to_string(kc.shape(0)) + ")");
    }
    const int64_t n_ctx = int64_t(kc.shape(2));
    if (r[0] < 0 || r[1] < 1 || r[0] > R - r[1]) {
      fail("sequence " + std::to_string(i) + ": rows [" + std::to_string(r[0]) + ", +" +
           std::to_string(r[1]) + ") are not within the " + std::to_string(R) + " rows of qkv");
    }
    if (r[2] < 0 || r[2] > n_ctx - r[1] || r[2] > int64_t(cos.shape(0)) - r[1]) {
      fail("sequence " + std::to_string(i) + ": positions " + std::to_string(r[2]) + " .. " +
           std::to_string(r[2] + r[1] - 1) + " exceed its cache of " + std::to_string(n_ctx) +
           " or the rotation tables of " + std::to_string(cos.shape(0)));
    }
    spans.emplace_back(r[0], r[0] + r[1]);
    const size_t slab = size_t(n_kv) * size_t(n_ctx) * size_t(hd);
    ss[i] = {r[0], r[1], r[2], kc.data() + size_t(layer) * slab, vc.data() + size_t(layer) * slab,
             n_ctx};
    memory.emplace_back(reinterpret_cast<const char*>(kc.data()), kc.size() * 4);
    memory.emplace_back(reinterpret_cast<const char*>(vc.data()), vc.size() * 4);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].first < spans[i - 1].second) fail("sequences must have disjoint rows");
  }
  for (size_t i = 0; i < memory.size(); ++i) {
    for (size_t j = i + 1; j < memory.size(); ++j) {
      if (overlaps(memory[i].first, memory[i].second, memory[j].first, memory[j].second)) {
        fail("qkv, out and every sequence's key and value caches must be distinct memory");
      }
    }
  }
  k::AttnArgs a{qkv.data(), out.data(), R, n_q, n_kv, hd,
                q_norm ? q_norm->data() : nullptr, k_norm ? k_norm->data() : nullptr, eps,
                cos.data(), sin.data(), int64_t(cos.shape(0)), n_rot, neox, scale, window,
                ss.data(), int(B), n_threads};
  nb::gil_scoped_release release;
  k::attention(a);
}

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
  m.def("kernels_attention", &attention, nb::arg("qkv").noconvert(), nb::arg("out").noconvert(),
        nb::arg("seqs").noconvert(), nb::arg("k_caches").noconvert(),
        nb::arg("v_caches").noconvert(), nb::arg("layer"), nb::arg("n_q"), nb::arg("n_kv"),
        nb::arg("hd"), nb::arg("q_norm").noconvert() = nb::none(),
        nb::arg("k_norm").noconvert() = nb::none(), nb::arg("eps"), nb::arg("cos").noconvert(),
        nb::arg("sin").noconvert(), nb::arg("neox"), nb::arg("n_rot"), nb::arg("scale"),
        nb::arg("window"), nb::arg("n_threads") = 0,
        "Decode attention of a batch of sequences over their own KV caches "
        "(csrc/kernels/attention.h): q/k norms, RoPE, cache writes, causal/sliding-window "
        "softmax attention; out (R, n_q*hd). Releases the GIL.");
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
  m.def("kernels_has_avx2", &k::cpu_has_avx2);
  m.def("kernels_default_threads", &k::default_threads);
  m.def("kernels_pool_size", [] { return k::shared_pool().size(); });
  m.def("kernels_set_pool_size", [](int n) {
    if (n < 1 || n > k::kMaxThreads) fail("threads must be in [1, 1024], got " + std::to_string(n));
    nb::gil_scoped_release release;
    k::shared_pool().resize(n);
  });
}
