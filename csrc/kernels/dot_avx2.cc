// AVX2/FMA dot products (compiled with -mavx2 -mfma -mf16c; called only when cpu_has_avx2()).
#include <immintrin.h>

#include "kernels/dot.h"

namespace lexguide::kernels {

DotFn avx2_dot(GgmlType type) {
  switch (type) {
    default: return nullptr;
  }
}

}  // namespace lexguide::kernels
