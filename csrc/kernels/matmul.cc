#include "kernels/matmul.h"

#include <algorithm>
#include <vector>

#include "kernels/dot.h"
#include "kernels/quantize_act.h"
#include "kernels/thread_pool.h"

namespace lexguide::kernels {

namespace {
DotFn pick(const TypeTraits* type, bool simd) {
  if (simd && cpu_has_avx2()) {
    if (DotFn f = avx2_dot(type->type)) return f;
  }
  return scalar_dot(type->type);
}
}  // namespace

const char* kernel_name(const TypeTraits* type, bool simd) {
  return simd && cpu_has_avx2() && avx2_dot(type->type) ? "avx2" : "scalar";
}

void matmul(const MatmulArgs& a) {
  const DotFn dot = pick(a.type, a.simd);
  ThreadPool& pool = shared_pool();
  const size_t row_bytes = size_t(a.n_in / a.type->block) * size_t(a.type->block_bytes);
  const int64_t n_blocks = a.n_in / a.type->block;
  const int64_t n_sel = a.rows ? a.n_rows : a.n_out;
  if (n_sel == 0 || a.T == 0) return;

  // activations: float rows are read in place, quantized ones go to one buffer
  const size_t act_stride = act_row_bytes(a.type->act, a.n_in);
  std::vector<uint8_t> act_buf;
  const uint8_t* act = reinterpret_cast<const uint8_t*>(a.x);
  if (a.type->act != ActKind::F32) {
    act_buf.resize(act_stride * size_t(a.T));
    auto quantize = [&](int64_t t) {
      quantize_act_row(a.type->act, a.x + t * a.n_in, act_buf.data() + t * act_stride, a.n_in);
    };
    if (a.T > 1) {
      pool.run(a.T, a.n_threads, quantize);
    } else {
      quantize(0);
    }
    act = act_buf.data();
  }

  // row chunks: a few per thread so a thread slowed by another process is helped out
  const int threads = std::max(1, a.n_threads <= 0 ? pool.size() : std::min(a.n_threads, pool.size()));
  int64_t chunk = (n_sel + 4 * threads - 1) / (4 * threads);
  chunk = std::max<int64_t>(chunk, threads == 1 ? n_sel : 8);
  const int64_t n_tasks = (n_sel + chunk - 1) / chunk;
  auto task = [&](int64_t k) {
    const int64_t lo = k * chunk, hi = std::min(n_sel, lo + chunk);
    for (int64_t t0 = 0; t0 < a.T; t0 += kTBlock) {
      const int64_t t1 = std::min(a.T, t0 + kTBlock);
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t r = a.rows ? a.rows[i] : i;
        const uint8_t* wr = a.w + size_t(r) * row_bytes;
        for (int64_t t = t0; t < t1; t += kMaxAct) {
          const int n_act = int(std::min<int64_t>(kMaxAct, t1 - t));
          dot(wr, act + size_t(t) * act_stride, act_stride, n_act, n_blocks,
              a.out + t * n_sel + i, size_t(n_sel));
        }
      }
    }
  };
  pool.run(n_tasks, threads, task);
}

}  // namespace lexguide::kernels
