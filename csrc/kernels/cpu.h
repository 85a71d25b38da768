// The instruction sets the kernels may use, decided at run time.
//
// cpu_isa() is what the CPU and the operating system support, detected once (thread-safe) from
// CPUID and XCR0; a process-wide cap (set_isa_cap) lowers it, and isa() = min(cpu_isa(), cap)
// is what every kernel reads on each call (matmul's dot products, the float paths of
// attention.cc and layers.cc). No environment variable is read here: the Python layer sets
// the cap (lexguide.runtime.kernels.set_isa, LEXGUIDE_KERNELS).
#pragma once

namespace lexguide::kernels {

// Ordered: each level includes the ones below it.
enum class Isa : int {
  Scalar = 0,  // portable C++ only
  Avx2 = 1,    // AVX2 + FMA + F16C
  Avx512 = 2,  // that + AVX512F/BW/VL/DQ/VNNI, with the OS saving the zmm and mask state
  Amx = 3,     // that + AMX-TILE/AMX-INT8, tile state in XCR0 and the kernel's permission
               // (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), requested once)
};

// The best level this CPU and OS support (detected on first use; thread-safe).
Isa cpu_isa();
// Cap every kernel at `cap` (process-wide; default: no cap). Thread-safe; a product already
// running keeps the level it started with.
void set_isa_cap(Isa cap);
// min(cpu_isa(), cap): the level the kernels use.
Isa isa();
// "scalar", "avx2", "avx512", "amx".
const char* isa_name(Isa level);
// The level named `name` (one of isa_name's), or false when the name is unknown.
bool isa_from_name(const char* name, Isa* level);

}  // namespace lexguide::kernels
