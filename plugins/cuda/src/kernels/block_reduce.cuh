// Sums across a thread block (warp shuffles, then one value per warp in
// shared memory). Every thread of the block must call it; all get the sum.
#pragma once

namespace flcuda {

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <class T>
__device__ __forceinline__ T block_sum(T v) {
  __shared__ T partial[32];
  __shared__ T total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // partial[] may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = (blockDim.x + 31) >> 5;
    T w = lane < warps ? partial[lane] : T(0);
    w = warp_sum(w);
    if (lane == 0) total = w;
  }
  __syncthreads();
  return total;
}

template <class T>
__device__ __forceinline__ T warp_max(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const T o = __shfl_xor_sync(0xffffffffu, v, offset);
    v = (o > v || o != o) ? o : v;
  }
  return v;
}

template <class T>
__device__ __forceinline__ T block_max(T v) {
  __shared__ T partial[32];
  __shared__ T total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = (blockDim.x + 31) >> 5;
    T w = lane < warps ? partial[lane] : partial[0];
    w = warp_max(w);
    if (lane == 0) total = w;
  }
  __syncthreads();
  return total;
}

}  // namespace flcuda
