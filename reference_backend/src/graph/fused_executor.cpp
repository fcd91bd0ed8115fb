// Runs a fused program: tiles of kTile elements; per tile every input is
// loaded (converted to the compute type) into its register, the vector
// instructions run over the tile block by block and the lanewise ones (exp,
// gelu, ...) over the whole tile, and the outputs are converted and stored.
// Memory is touched once per operand, whatever the length of the chain; a
// value that only feeds the next vector instruction (Instr::chained) stays
// in vector registers and is not stored at all.
//
// The executor is built for each instruction set of
// kernels/support/isa.h and runs the one chosen there.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "../kernels/support/double_math.h"
#include "../kernels/support/dtype.h"
#include "../kernels/support/fast_math.h"
#include "../kernels/support/isa.h"
#include "../thread_pool.h"
#include "fused_program.h"

namespace flemu::graph {
namespace {
// The width of one vector in each build (16 bytes: SSE2).
#define FLEMU_VEC_BYTES 16
namespace baseline {
#include "fused_executor_impl.inc"
}  // namespace baseline
#undef FLEMU_VEC_BYTES

#if defined(FLEMU_ISA_BUILDS)
#pragma GCC push_options
FLEMU_PRAGMA_TARGET(FLEMU_AVX2_TARGET)
#define FLEMU_VEC_BYTES 32
namespace avx2 {
#include "fused_executor_impl.inc"
}  // namespace avx2
#undef FLEMU_VEC_BYTES
#pragma GCC pop_options

#pragma GCC push_options
FLEMU_PRAGMA_TARGET(FLEMU_AVX512_TARGET)
#define FLEMU_VEC_BYTES 64
namespace avx512 {
#include "fused_executor_impl.inc"
}  // namespace avx512
#undef FLEMU_VEC_BYTES
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
