// The kernel table Kernels_List hands the host.
#pragma once

#include <cstddef>

#include "torch_fl/kernel.h"

namespace flcuda {

void list_kernels(const TFL_KernelDesc* const** kernels, size_t* count);

}  // namespace flcuda
