#include "kernels/cpu.h"

#include <atomic>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace lexguide::kernels {

namespace {

#if defined(__x86_64__) || defined(__i386__)
struct Regs { uint32_t a, b, c, d; };

Regs cpuid(uint32_t leaf, uint32_t sub) {
  Regs r{0, 0, 0, 0};
  if (__get_cpuid_max(0, nullptr) < leaf) return r;
  __cpuid_count(leaf, sub, r.a, r.b, r.c, r.d);
  return r;
}

// XCR0: the register states the OS saves on a context switch (xgetbv needs CR4.OSXSAVE, which
// CPUID.1:ECX bit 27 reports; the caller checks it).
uint64_t xcr0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return uint64_t(hi) << 32 | lo;
}

inline bool bit(uint32_t v, int i) { return (v >> i) & 1u; }

Isa detect() {
  const Regs l1 = cpuid(1, 0);
  const bool osxsave = bit(l1.c, 27), avx = bit(l1.c, 28), fma = bit(l1.c, 12),
             f16c = bit(l1.c, 29);
  if (!osxsave || !avx) return Isa::Scalar;
  const uint64_t x = xcr0();
  if ((x & 0x6) != 0x6) return Isa::Scalar;  // SSE and AVX (ymm) state
  const Regs l7 = cpuid(7, 0);
  if (!(bit(l7.b, 5) && fma && f16c)) return Isa::Scalar;  // AVX2
  // AVX512F (b16), DQ (b17), BW (b30), VL (b31), VNNI (c11); opmask, ZMM_Hi256, Hi16_ZMM state
  const bool avx512 = bit(l7.b, 16) && bit(l7.b, 17) && bit(l7.b, 30) && bit(l7.b, 31) &&
                      bit(l7.c, 11) && (x & 0xE0) == 0xE0;
  if (!avx512) return Isa::Avx2;
  // AMX-TILE (d24), AMX-INT8 (d25); XTILECFG (bit 17) and XTILEDATA (bit 18) state
  const bool amx = bit(l7.d, 24) && bit(l7.d, 25) && (x & (3ull << 17)) == (3ull << 17);
  if (!amx) return Isa::Avx512;
#if defined(__linux__) && defined(__x86_64__)
  // Linux enables the tile data state per process on request (ARCH_REQ_XCOMP_PERM = 0x1023,
  // XFEATURE_XTILEDATA = 18); without the permission a tile instruction faults.
  if (syscall(SYS_arch_prctl, 0x1023, 18) == 0) return Isa::Amx;
#endif
  return Isa::Avx512;
}
#else
Isa detect() { return Isa::Scalar; }
#endif

std::atomic<int> g_cap{int(Isa::Amx)};

}  // namespace

Isa cpu_isa() {
  static const Isa level = detect();  // C++11 static initialisation: once, thread-safe
  return level;
}

void set_isa_cap(Isa cap) { g_cap.store(int(cap), std::memory_order_relaxed); }

Isa isa() {
  const int cap = g_cap.load(std::memory_order_relaxed);
  const Isa cpu = cpu_isa();
  return int(cpu) < cap ? cpu : Isa(cap);
}

const char* isa_name(Isa level) {
  switch (level) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Amx: return "amx";
  }
  return "scalar";
}

bool isa_from_name(const char* name, Isa* level) {
  for (int i = 0; i <= int(Isa::Amx); ++i) {
    if (std::strcmp(name, isa_name(Isa(i))) == 0) {
      *level = Isa(i);
      return true;
    }
  }
  return false;
}

}  // namespace lexguide::kernels
