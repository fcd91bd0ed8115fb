// A host-side description of a strided tensor that may be a kernel argument
// or scratch memory the kernel carved out itself, and the copies between
// such tensors that the GEMM, convolution and normalization kernels use to
// permute or densify operands (implemented in elementwise.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>

#include "torch_fl/types.h"

namespace flcuda {

struct TensorRef {
  char* data = nullptr;
  int32_t dtype = TFL_DTYPE_FLOAT32;
  int32_t ndim = 0;
  int64_t sizes[16] = {};
  int64_t strides[16] = {};  // elements

  int64_t numel() const {
    int64_t n = 1;
    for (int32_t d = 0; d < ndim; ++d) n *= sizes[d];
    return n;
  }
};

inline TensorRef ref_of(const TFL_Tensor* t) {
  TensorRef r;
  r.data = static_cast<char*>(t->data);
  r.dtype = t->dtype;
  r.ndim = t->ndim;
  for (int32_t d = 0; d < t->ndim && d < 16; ++d) {
    r.sizes[d] = t->sizes[d];
    r.strides[d] = t->strides[d];
  }
  return r;
}

// Dense row-major tensor over `data`.
inline TensorRef dense_ref(void* data, int32_t dtype, std::initializer_list<int64_t> sizes) {
  TensorRef r;
  r.data = static_cast<char*>(data);
  r.dtype = dtype;
  for (int64_t s : sizes) r.sizes[r.ndim++] = s;
  int64_t stride = 1;
  for (int32_t d = r.ndim - 1; d >= 0; --d) {
    r.strides[d] = stride;
    stride *= r.sizes[d];
  }
  return r;
}

// dst = src (src broadcast to dst's shape), converting dtypes; enqueued on
// `stream`. Throws TFL_ERR_UNIMPLEMENTED for layouts with too many dims.
void copy_into(cudaStream_t stream, const TensorRef& dst, const TensorRef& src);

// Fills dst with `value`.
void fill_ref(cudaStream_t stream, const TensorRef& dst, double value);

// dst = factor * src (src broadcast to dst's shape; dst may be src).
void scale_into(cudaStream_t stream, const TensorRef& dst, const TensorRef& src, double factor);

}  // namespace flcuda
