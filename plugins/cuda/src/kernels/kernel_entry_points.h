// The kernel entry points of kernel_list.h, declared once for their
// definitions (elementwise.cu, gemm.cpp, reduce_norm.cu, conv_pool.cu) and
// the table (kernel_table.cpp).
#pragma once

#include "kernel_list.h"

namespace flcuda {

#define FLCUDA_DECLARE_KERNEL(fn, op, dtypes, flags, schema) TFL_Error* fn(const TFL_Kernel_Args* args);
FLCUDA_KERNELS(FLCUDA_DECLARE_KERNEL)
#undef FLCUDA_DECLARE_KERNEL

}  // namespace flcuda
