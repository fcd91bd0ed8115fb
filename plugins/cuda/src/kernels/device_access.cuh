// Device-side element access: load and store any handled dtype as a compute
// type (float, double or int64_t), and the strided walk of a LayoutPlan. One
// kernel then serves every dtype combination through a switch that is the
// same for every thread of a launch, which keeps the number of instantiated
// kernels (and nvcc's compile time) small.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "strided_plan.h"
#include "torch_fl/types.h"

namespace flcuda {

__host__ __device__ __forceinline__ int64_t itemsize_of_dev(int32_t dtype) {
  switch (dtype) {
    case TFL_DTYPE_INT64:
    case TFL_DTYPE_FLOAT64: return 8;
    case TFL_DTYPE_INT32:
    case TFL_DTYPE_FLOAT32: return 4;
    case TFL_DTYPE_INT16:
    case TFL_DTYPE_FLOAT16:
    case TFL_DTYPE_BFLOAT16: return 2;
    default: return 1;
  }
}

template <class C>
__device__ __forceinline__ C load_as(const char* p, int32_t dtype) {
  switch (dtype) {
    case TFL_DTYPE_FLOAT32: return static_cast<C>(*reinterpret_cast<const float*>(p));
    case TFL_DTYPE_FLOAT16: return static_cast<C>(__half2float(*reinterpret_cast<const __half*>(p)));
    case TFL_DTYPE_BFLOAT16: return static_cast<C>(__bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(p)));
    case TFL_DTYPE_FLOAT64: return static_cast<C>(*reinterpret_cast<const double*>(p));
    case TFL_DTYPE_INT64: return static_cast<C>(*reinterpret_cast<const int64_t*>(p));
    case TFL_DTYPE_INT32: return static_cast<C>(*reinterpret_cast<const int32_t*>(p));
    case TFL_DTYPE_INT16: return static_cast<C>(*reinterpret_cast<const int16_t*>(p));
    case TFL_DTYPE_INT8: return static_cast<C>(*reinterpret_cast<const int8_t*>(p));
    case TFL_DTYPE_UINT8: return static_cast<C>(*reinterpret_cast<const uint8_t*>(p));
    case TFL_DTYPE_BOOL: return static_cast<C>(*reinterpret_cast<const uint8_t*>(p) != 0 ? 1 : 0);
    default: return C(0);
  }
}

template <class C>
__device__ __forceinline__ void store_as(char* p, int32_t dtype, C v) {
  switch (dtype) {
    case TFL_DTYPE_FLOAT32: *reinterpret_cast<float*>(p) = static_cast<float>(v); break;
    case TFL_DTYPE_FLOAT16: *reinterpret_cast<__half*>(p) = __float2half_rn(static_cast<float>(v)); break;
    case TFL_DTYPE_BFLOAT16: *reinterpret_cast<__nv_bfloat16*>(p) = __float2bfloat16_rn(static_cast<float>(v)); break;
    case TFL_DTYPE_FLOAT64: *reinterpret_cast<double*>(p) = static_cast<double>(v); break;
    case TFL_DTYPE_INT64: *reinterpret_cast<int64_t*>(p) = static_cast<int64_t>(v); break;
    case TFL_DTYPE_INT32: *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(v); break;
    case TFL_DTYPE_INT16: *reinterpret_cast<int16_t*>(p) = static_cast<int16_t>(v); break;
    case TFL_DTYPE_INT8: *reinterpret_cast<int8_t*>(p) = static_cast<int8_t>(v); break;
    case TFL_DTYPE_UINT8: *reinterpret_cast<uint8_t*>(p) = static_cast<uint8_t>(v); break;
    case TFL_DTYPE_BOOL: *reinterpret_cast<uint8_t*>(p) = v != C(0) ? 1 : 0; break;
    default: break;
  }
}

// A LayoutPlan with its operands' data: what an elementwise launch takes by
// value. An operand with data == nullptr is a constant (a host scalar read at
// launch), held in both compute kinds.
struct DevPlan {
  int32_t ndim;
  int32_t num_operands;
  bool contiguous;
  int64_t numel;
  int64_t sizes[kPlanDims];
  int64_t strides[kPlanOperands][kPlanDims];
  char* data[kPlanOperands];
  int32_t dtype[kPlanOperands];
  int64_t itemsize[kPlanOperands];
  double fconst[kPlanOperands];
  int64_t iconst[kPlanOperands];
};

template <int N>
__device__ __forceinline__ void plan_offsets(const DevPlan& p, int64_t i, int64_t* off) {
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] = 0;
  if (p.contiguous) {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = i * p.itemsize[k];
    return;
  }
  for (int d = p.ndim - 1; d >= 0; --d) {
    const int64_t size = p.sizes[d];
    const int64_t idx = i % size;
    i /= size;
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] += idx * p.strides[k][d];
  }
}

template <class C>
__device__ __forceinline__ C operand_value(const DevPlan& p, int k, int64_t off) {
  if (p.data[k] == nullptr) {
    if constexpr (std::is_integral<C>::value) return static_cast<C>(p.iconst[k]);
    else return static_cast<C>(p.fconst[k]);
  }
  return load_as<C>(p.data[k] + off, p.dtype[k]);
}

}  // namespace flcuda
