// Contract checking (FLEMU_CHECK_CONTRACTS=1): before a kernel enqueues
// anything, verify what the host promised for the flags and dtypes the kernel
// declared, so a bridge bug fails at the call that carries it instead of
// showing up as a wrong number far away.
#ifndef FLEMU_KERNELS_SUPPORT_CONTRACT_H_
#define FLEMU_KERNELS_SUPPORT_CONTRACT_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "../../arena.h"
#include "../../runtime.h"
#include "torch_fl/kernel.h"

namespace flemu {

// What a kernel declared: TFL_DTYPE_BIT mask and TFL_KernelFlags.
struct KernelContract {
  uint64_t dtypes = 0;
  uint32_t flags = 0;
};

// An allocation whose guard regions a kernel's work may reach: checked on the
// stream worker after each of that kernel's tasks.
struct GuardedAllocation {
  Arena* arena;
  const void* start;
};

// Throws TFL_ERR_INTERNAL "host contract violated: <op> (<variant>): <argument>
// <broken promise>" for the first promise `args` breaks:
//   - every tensor is well formed and lies inside one live allocation of its
//     device (data and the storage start, data - storage_offset); host
//     tensors only as 0-dim inputs of a TFL_KERNEL_HOST_SCALARS kernel;
//   - CONTIGUOUS_INPUTS / CONTIGUOUS_OUTPUTS: device inputs / outputs dense
//     row-major (row_major_dense, PyTorch's is_contiguous());
//     BROADCAST_INPUTS: device inputs shaped like outputs[0];
//     PROMOTE_INPUTS: device inputs of one dtype;
//   - the inputs' result type (PyTorch's promotion) is in contract.dtypes;
//   - in-place: outputs[0] is inputs[0]'s memory (data, sizes, strides);
//     functional: no output overlaps an input; out=: no output partially
//     overlaps an input.
// Appends to `guarded` the allocations the kernel writes: those of its
// outputs, or of its tensor inputs when it has no outputs (in-place ops
// that return nothing).
void check_host_contract(const TFL_Kernel_Args& args, const KernelContract& contract, Runtime& rt,
                         std::vector<GuardedAllocation>* guarded);

// Throws TFL_ERR_INTERNAL naming the first broken guard region (after a
// kernel task ran).
void check_guards_after_task(const std::vector<GuardedAllocation>& guarded);

}  // namespace flemu

#endif  // FLEMU_KERNELS_SUPPORT_CONTRACT_H_
