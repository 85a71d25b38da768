// The only entry point of lexguide._core: each layer registers its (thin) bindings.
#include <nanobind/nanobind.h>

namespace nb = nanobind;

void bind_engine(nb::module_& m);
void bind_matcher(nb::module_& m);
void bind_kernels(nb::module_& m);

NB_MODULE(_core, m) {
  m.doc() = "lexguide's compiled core (private: use the Python API)";
  // grammars and vocabularies cached in module globals are still alive at interpreter exit:
  // not leaks, but nanobind would list each of them
  nb::set_leak_warnings(false);
  bind_engine(m);
  bind_matcher(m);
  bind_kernels(m);
}
