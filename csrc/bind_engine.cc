// Bindings of the engine core (regex nodes, lexer DFA, Earley parser, token trie, masks).
#include <nanobind/nanobind.h>

namespace nb = nanobind;

void bind_engine(nb::module_& m) {}
