#include "kernel_table.h"

#include "kernel_entry_points.h"

namespace flcuda {

namespace {

using namespace table;

#define FLCUDA_DESCRIBE_KERNEL(fn, op, dtypes, flags, schema) \
  TFL_KernelDesc{TFL_KernelDesc_STRUCT_SIZE, op, fn, nullptr, dtypes, flags, TFL_MEMORY_FORMAT_ANY, schema},
const TFL_KernelDesc kDescriptors[] = {FLCUDA_KERNELS(FLCUDA_DESCRIBE_KERNEL)};
#undef FLCUDA_DESCRIBE_KERNEL

constexpr size_t kCount = sizeof(kDescriptors) / sizeof(kDescriptors[0]);

struct Pointers {
  const TFL_KernelDesc* table[kCount];
  Pointers() {
    for (size_t i = 0; i < kCount; ++i) table[i] = &kDescriptors[i];
  }
};

}  // namespace

void list_kernels(const TFL_KernelDesc* const** kernels, size_t* count) {
  static const Pointers pointers;
  *kernels = pointers.table;
  *count = kCount;
}

}  // namespace flcuda
