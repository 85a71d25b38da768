// The only entry point of lexguide._core: each layer registers its (thin) bindings.
#include <nanobind/nanobind.h>

namespace nb = nanobind;

void bind_engine(nb::module_& m);
void bind_kernels(nb::module_& m);

NB_MODULE(_core, m) {
  m.doc() = "lexguide's compiled core (private: use the Python API)";
  bind_engine(m);
  bind_kernels(m);
}
