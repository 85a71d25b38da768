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

#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

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
