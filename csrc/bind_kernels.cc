// Bindings of the runtime kernels (quantized matvec/matmul, thread pool).
#include <nanobind/nanobind.h>

namespace nb = nanobind;

void bind_kernels(nb::module_& m) {}
