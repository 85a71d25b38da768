#include "kernels/matmul.h"

#include <algorithm>
#include <vector>

#include "kernels/dot.h"
#include "kernels/gemm_amx.h"
#include "kernels/quantize_act.h"
#include "common/thread_pool.h"

namespace lexguide::kernels {

namespace {
// The best kernel of a type at level `level` (isa() read once per product), and its level.
DotFn pick(const TypeTraits* type, Isa level, Isa* used = nullptr) {
  if (level >= Isa::Avx512) {
    if (DotFn f = avx512_dot(type->type)) {
      if (used) *used = Isa::Avx512;
      return f;
    }
  }
  if (level >= Isa::Avx2) {
    if (DotFn f = avx2_dot(type->type)) {
      if (used) *used = Isa::Avx2;
      return f;
    }
  }
  if (used) *used = Isa::Scalar;
  return scalar_dot(type->type);
}
}  // namespace

const char* kernel_name(const TypeTraits* type, bool simd) {
  if (simd && isa() >= Isa::Amx && amx_supports(type->type)) return isa_name(Isa::Amx);
  Isa used;
  pick(type, simd ? isa() : Isa::Scalar, &used);
  return isa_name(used);
}

void matmul(const MatmulArgs& a) {
  ThreadPool& pool = shared_pool();
  if (a.T == 0) return;

  // activations: float rows are read in place, each quantized format once into its buffer
  const uint8_t* act[3] = {reinterpret_cast<const uint8_t*>(a.x), nullptr, nullptr};
  size_t act_stride[3] = {size_t(a.n_in) * sizeof(float), 0, 0};
  std::vector<uint8_t> act_buf[3];
  for (int p = 0; p < a.n_parts; ++p) {
    const ActKind kind = a.parts[p].type->act;
    const int k = int(kind);
    if (act[k]) continue;
    act_stride[k] = act_row_bytes(kind, a.n_in);
    act_buf[k].resize(act_stride[k] * size_t(a.T));
    uint8_t* buf = act_buf[k].data();
    auto quantize = [&](int64_t t) {
      quantize_act_row(kind, a.x + t * a.n_in, buf + t * act_stride[k], a.n_in);
    };
    if (a.T > 1) {
      pool.run(a.T, a.n_threads, quantize);
    } else {
      quantize(0);
    }
    act[k] = buf;
  }

  // tasks: chunks of output rows of each part, a few per thread so that a thread slowed down
  // by another process is helped out
  struct Task { int part; int64_t lo, hi, col; };
  const int threads = std::max(1, a.n_threads <= 0 ? pool.size()
                                                    : std::min(a.n_threads, pool.size()));
  int64_t n_sel = 0;
  for (int p = 0; p < a.n_parts; ++p) n_sel += a.rows ? a.n_rows : a.parts[p].n_out;
  if (n_sel == 0) return;
  int64_t chunk = threads == 1 ? n_sel : std::max<int64_t>(8, (n_sel + 4 * threads - 1) / (4 * threads));
  chunk = (chunk + kMaxW - 1) / kMaxW * kMaxW;  // whole tiles of weight rows
  std::vector<Task> tasks;
  int64_t col = 0;
  for (int p = 0; p < a.n_parts; ++p) {
    const int64_t n = a.rows ? a.n_rows : a.parts[p].n_out;
    for (int64_t lo = 0; lo < n; lo += chunk) tasks.push_back({p, lo, std::min(n, lo + chunk), col + lo});
    col += n;
  }
  const Isa level = a.simd ? isa() : Isa::Scalar;
  DotFn dots[kMaxParts];
  for (int p = 0; p < a.n_parts; ++p) dots[p] = pick(a.parts[p].type, level);

  // AMX (gemm_amx.h): the supported types at level Amx, on tiles from amx_min_rows(type)
  // activation rows (their activations re-laid once per format); below, Q4_0/Q8_0 on VNNI
  // block sums and the k-quants on their AVX-512 kernels. All give the scalar reference's bits,
  // so a row's result never depends on the batch.
  bool amx[kMaxParts] = {};
  bool amx_tiles[kMaxParts] = {};
  const uint8_t* packed[3] = {nullptr, nullptr, nullptr};
  std::vector<uint8_t> packed_buf[3];
  for (int p = 0; p < a.n_parts; ++p) {
    const TypeTraits* ty = a.parts[p].type;
    amx_tiles[p] = level >= Isa::Amx && amx_supports(ty->type) && a.T >= amx_min_rows(ty->type);
    amx[p] = amx_tiles[p] || (level >= Isa::Amx && amx_small_needed(ty->type));
    const int k = int(ty->act);
    if (!amx_tiles[p] || packed[k]) continue;
    packed_buf[k].resize(amx_packed_bytes(ty->act, a.T, a.n_in));
    uint8_t* buf = packed_buf[k].data();
    const uint8_t* src = act[k];
    const size_t stride = act_stride[k];
    pool.run((a.T + kAmxTile - 1) / kAmxTile, a.n_threads, [&](int64_t tile) {
      amx_pack_tile(ty->act, src, stride, a.T, a.n_in, tile, buf);
    });
    packed[k] = buf;
  }

  auto task = [&](int64_t k) {
    const Task& tk = tasks[size_t(k)];
    const MatPart& part = a.parts[tk.part];
    const DotFn dot = dots[tk.part];
    const int kind = int(part.type->act);
    const uint8_t* av = act[kind];
    const size_t as = act_stride[kind];
    const int64_t n_blocks = a.n_in / part.type->block;
    const size_t row_bytes = size_t(n_blocks) * size_t(part.type->block_bytes);
    if (amx[tk.part]) {
      const uint8_t* rows[kAmxRows];
      for (int64_t i = tk.lo; i < tk.hi; i += kAmxRows) {
        const int n_w = int(std::min<int64_t>(kAmxRows, tk.hi - i));
        for (int j = 0; j < n_w; ++j) rows[j] = part.w + size_t(a.rows ? a.rows[i + j] : i + j) * row_bytes;
        float* o = a.out + tk.col + (i - tk.lo);
        if (amx_tiles[tk.part]) {
          amx_rows(part.type, rows, n_w, packed[kind], a.T, a.n_in, o, size_t(a.out_stride));
        } else {
          amx_small_rows(part.type, rows, n_w, av, as, a.T, a.n_in, o, size_t(a.out_stride));
        }
      }
      return;
    }
    const uint8_t* wr[kMaxW];
    for (int64_t t0 = 0; t0 < a.T; t0 += kTBlock) {
      const int64_t t1 = std::min(a.T, t0 + kTBlock);
      for (int64_t i = tk.lo; i < tk.hi; i += kMaxW) {
        const int n_w = int(std::min<int64_t>(kMaxW, tk.hi - i));
        for (int j = 0; j < n_w; ++j) {
          const int64_t r = a.rows ? a.rows[i + j] : i + j;
          wr[j] = part.w + size_t(r) * row_bytes;
        }
        float* o = a.out + tk.col + (i - tk.lo);
        for (int64_t t = t0; t < t1; t += kMaxAct) {
          const int n_act = int(std::min<int64_t>(kMaxAct, t1 - t));
          dot(wr, n_w, av + size_t(t) * as, as, n_act, n_blocks, o + t * a.out_stride,
              size_t(a.out_stride));
        }
      }
    }
  };
  pool.run(int64_t(tasks.size()), threads, task);
}

}  // namespace lexguide::kernels
