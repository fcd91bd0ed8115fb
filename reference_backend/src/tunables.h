// The tunables group (torch_fl/tunables.h): flemu exposes the blocking of its
// fp32-compute GEMM (mm/addmm in float32, float16 and bfloat16) per device,
// so the host can probe candidates and keep the fastest.
#ifndef FLEMU_TUNABLES_H_
#define FLEMU_TUNABLES_H_

#include <cstdint>

#include "torch_fl/tunables.h"

namespace flemu {

// Cache blocking of the packed GEMM. A field of 0 keeps gemm.cpp's built-in
// default, so a default-constructed value changes nothing.
struct GemmBlocking {
  int64_t block_m_tiles = 0;  // rows of an A block, in micro-tile rows (MC = MR * tiles)
  int64_t block_n_tiles = 0;  // columns of a B panel, in micro-tile columns (NC = NR * tiles)
  int64_t block_k = 0;        // depth of the packed panels (KC)
};

// The blocking set for `device` (all defaults until Tunables_Set changes it).
// Cheap and thread-safe: read once per GEMM launch.
GemmBlocking gemm_blocking(int32_t device);

// One fp32 GEMM C[n x m] = A[n x k] * B[k x m] (row-major, contiguous) with
// the given blocking, on the calling thread and the thread pool. Defined in
// kernels/gemm.cpp; the probe workload.
void gemm_probe_f32(int64_t n, int64_t m, int64_t k, const float* a, const float* b, float* c,
                    const GemmBlocking& blocking);

// The ABI table (abi.cpp puts it into TFL_Api).
extern const TFL_TunablesApi kTunablesApi;

}  // namespace flemu

#endif  // FLEMU_TUNABLES_H_
