// Which instruction set flemu's vectorized loops run on. flemu is built for
// baseline x86-64 (SSE2: 4 floats a vector); its elementwise loops and its
// fused-region executor are also built for AVX2 (8) and take that build when
// the CPU has it. Neither build enables FMA or reassociates, so both round
// every operation alike and give the same bits. FLEMU_ISA=baseline (read at
// Plugin_Initialize, config.cpp) forces the baseline build; the tests compare
// the two.
#ifndef FLEMU_KERNELS_SUPPORT_ISA_H_
#define FLEMU_KERNELS_SUPPORT_ISA_H_

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FLEMU_AVX2_BUILDS 1
#endif

namespace flemu {

// Whether this CPU runs the AVX2 builds (false where they are not built).
bool cpu_has_avx2();

// True when the AVX2 builds run: the CPU has AVX2 and FLEMU_ISA is not "baseline".
bool use_avx2();

}  // namespace flemu

#endif  // FLEMU_KERNELS_SUPPORT_ISA_H_
