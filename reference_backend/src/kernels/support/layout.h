// What "dense row-major" means for a strided operand, defined once for
// TensorArg::is_contiguous, the contract check of TFL_KERNEL_CONTIGUOUS_* and
// the kernels' own fast paths: PyTorch's Tensor::is_contiguous(), so flemu
// never refuses a layout the host rightly calls contiguous.
#ifndef FLEMU_KERNELS_SUPPORT_LAYOUT_H_
#define FLEMU_KERNELS_SUPPORT_LAYOUT_H_

#include <cstdint>

namespace flemu {

// True when every dim of size > 1 has the stride of the dims inside it, in
// elements. A size-1 dim's stride is never used, so it is not looked at; a
// tensor without elements is dense whatever its strides (PyTorch gives the
// empty tensors it makes strides such as (1, 1, 1) for sizes (5, 0, 0)).
inline bool row_major_dense(int32_t ndim, const int64_t* sizes, const int64_t* strides) {
  for (int32_t d = 0; d < ndim; ++d)
    if (sizes[d] == 0) return true;
  int64_t expected = 1;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

}  // namespace flemu

#endif  // FLEMU_KERNELS_SUPPORT_LAYOUT_H_
