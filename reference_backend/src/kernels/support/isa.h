// Which instruction set flemu's vectorized loops run on. flemu is built for
// baseline x86-64 (SSE2: 4 floats a vector); its elementwise loops, its
// softmax and attention rows, batch and layer norm, its fused optimizer steps
// and its fused-region executor are also built for AVX2 (8) and AVX-512 (16),
// and take the widest build the CPU runs.
// No build contracts a multiply and an add into an FMA by itself (flemu is
// compiled with -ffp-contract=off) or reassociates; the multiply-adds the
// math functions fuse are written out (mul_add.h), fused in every build. So
// every build rounds every operation alike and gives the same bits. FLEMU_ISA (read at
// Plugin_Initialize, config.cpp) caps the choice: baseline, avx2 or avx512;
// the tests compare the builds.
#ifndef FLEMU_KERNELS_SUPPORT_ISA_H_
#define FLEMU_KERNELS_SUPPORT_ISA_H_

#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FLEMU_ISA_BUILDS 1
// The targets of the AVX2 and AVX-512 builds, FMA in both (GCC's avx2 and
// avx512f do not imply it; mul_add.h is one instruction with it). AVX-512:
// F for the vectors, BW/DQ/VL for the byte, word and 32/64-bit integer forms
// the loops' conversions take.
#define FLEMU_AVX2_TARGET "avx2,fma"
#define FLEMU_AVX512_TARGET "avx512f,avx512bw,avx512dq,avx512vl,fma"
// `#pragma GCC target(...)` for a region of a file; unlike the pragma
// written out, it takes a macro (FLEMU_AVX512_TARGET).
#define FLEMU_PRAGMA_(x) _Pragma(#x)
#define FLEMU_PRAGMA_TARGET(t) FLEMU_PRAGMA_(GCC target(t))
#endif

namespace flemu {

enum class Isa : int32_t { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

// The widest build this CPU runs (kBaseline where no other is built).
Isa cpu_isa();

// The build the vectorized loops take: cpu_isa() capped by FLEMU_ISA.
Isa active_isa();

const char* isa_name(Isa isa);

#if defined(FLEMU_ISA_BUILDS)
namespace isa_detail {
template <class Fn>
[[gnu::target(FLEMU_AVX2_TARGET), gnu::noinline]] void run_avx2(Fn& fn) {
  fn();
}
template <class Fn>
[[gnu::target(FLEMU_AVX512_TARGET), gnu::noinline]] void run_avx512(Fn& fn) {
  fn();
}
}  // namespace isa_detail
#endif

// Runs fn() compiled for the active instruction set. fn must be a lambda
// marked always_inline (__attribute__((always_inline)) after its parameter
// list), and what its loops call must be always_inline too, so that each
// build has its own vectorized copy of the loops.
template <class Fn>
void with_isa(Fn&& fn) {
#if defined(FLEMU_ISA_BUILDS)
  switch (active_isa()) {
    case Isa::kAvx512: isa_detail::run_avx512(fn); return;
    case Isa::kAvx2: isa_detail::run_avx2(fn); return;
    case Isa::kBaseline: break;
  }
#endif
  fn();
}

}  // namespace flemu

#endif  // FLEMU_KERNELS_SUPPORT_ISA_H_
