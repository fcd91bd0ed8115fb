// Runs a fused program: tiles of kTile elements; per tile every input is
// loaded (converted to the compute type) into its register, each
// instruction runs as one tight loop over the tile, and the outputs are
// converted and stored. Memory is touched once per operand, whatever the
// length of the chain.
//
// The executor is built for each instruction set of
// kernels/support/isa.h and runs the one chosen there.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../kernels/support/dtype.h"
#include "../kernels/support/isa.h"
#include "../thread_pool.h"
#include "fused_program.h"

namespace flemu::graph {
namespace {
namespace baseline {
#include "fused_executor_impl.inc"
}  // namespace baseline

#if defined(FLEMU_ISA_BUILDS)
#pragma GCC push_options
#pragma GCC target("avx2")
namespace avx2 {
#include "fused_executor_impl.inc"
}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
FLEMU_PRAGMA_TARGET(FLEMU_AVX512_TARGET)
namespace avx512 {
#include "fused_executor_impl.inc"
}  // namespace avx512
#pragma GCC pop_options
#endif

}  // namespace

void run_program(const Program& program, char* const* inputs, char* const* outputs) {
  if (program.numel == 0) return;
#if defined(FLEMU_ISA_BUILDS)
  switch (active_isa()) {
    case Isa::kAvx512: avx512::run(program, inputs, outputs); return;
    case Isa::kAvx2: avx2::run(program, inputs, outputs); return;
    case Isa::kBaseline: break;
  }
#endif
  baseline::run(program, inputs, outputs);
}

}  // namespace flemu::graph
