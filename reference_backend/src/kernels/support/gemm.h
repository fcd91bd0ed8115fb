// flemu's GEMM for other kernels (convolution, bmm), on buffers already in
// the compute type: OpenBLAS where blas.h applies, else gemm.cpp's blocked
// GEMM. Runs on the calling thread, splitting large problems over the thread
// pool (serially when called from inside a parallel_for).
#ifndef FLEMU_KERNELS_SUPPORT_GEMM_H_
#define FLEMU_KERNELS_SUPPORT_GEMM_H_

#include <cstdint>

namespace flemu {

// C[n x m] (row stride ldc, unit column stride) = A[n x k] * B[k x m],
// plus the old C when `accumulate`. A and B are read through element
// strides (rs, cs), so transposed views need no copy.
void gemm_compute(int64_t n, int64_t m, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                  int64_t b_rs, int64_t b_cs, float* c, int64_t ldc, bool accumulate);
void gemm_compute(int64_t n, int64_t m, int64_t k, const double* a, int64_t a_rs, int64_t a_cs, const double* b,
                  int64_t b_rs, int64_t b_cs, double* c, int64_t ldc, bool accumulate);

}  // namespace flemu

#endif  // FLEMU_KERNELS_SUPPORT_GEMM_H_
