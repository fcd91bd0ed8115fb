// Runs a fused program: tiles of kTile elements; per tile every input is
// loaded (converted to the compute type) into its register, each
// instruction runs as one tight loop over the tile, and the outputs are
// converted and stored. Memory is touched once per operand, whatever the
// length of the chain.
//
// The executor is built twice: for baseline x86-64 (SSE2, 4 floats a
// vector) and, on x86-64, for AVX2 (8), chosen at run time by the CPU.
// Neither enables FMA, so both round every operation alike and give
// bit-identical results; FLEMU_FUSED_ISA=baseline forces the first.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../kernels/support/dtype.h"
#include "../thread_pool.h"
#include "fused_program.h"

#include <cstdlib>
#include <cstring>

namespace flemu::graph {
namespace {
namespace baseline {
#include "fused_executor_impl.inc"
}  // namespace baseline

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FLEMU_FUSED_AVX2 1
#pragma GCC push_options
#pragma GCC target("avx2")
namespace avx2 {
#include "fused_executor_impl.inc"
}  // namespace avx2
#pragma GCC pop_options
#endif

bool use_avx2() {
#if defined(FLEMU_FUSED_AVX2)
  static const bool yes = [] {
    const char* isa = std::getenv("FLEMU_FUSED_ISA");
    if (isa != nullptr && std::strcmp(isa, "baseline") == 0) return false;
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return yes;
#else
  return false;
#endif
}

}  // namespace

void run_program(const Program& program, char* const* inputs, char* const* outputs) {
  if (program.numel == 0) return;
#if defined(FLEMU_FUSED_AVX2)
  if (use_avx2()) {
    avx2::run(program, inputs, outputs);
    return;
  }
#endif
  baseline::run(program, inputs, outputs);
}

}  // namespace flemu::graph
