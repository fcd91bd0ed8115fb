// GEMM through OpenBLAS (the scipy-openblas32 wheel flemu is built with), as
// a vendor plugin calls its vendor's math library. gemm.cpp tries it first and
// keeps its own blocked GEMM for what BLAS cannot express (operands with no
// unit stride, half types) and for FLEMU_BLAS=0.
#ifndef FLEMU_KERNELS_SUPPORT_BLAS_H_
#define FLEMU_KERNELS_SUPPORT_BLAS_H_

#include <cstdint>

namespace flemu {

// C[n x m] (row stride ldc, unit column stride) = alpha * A[n x k] * B[k x m]
// + beta * C, with A and B read through element strides (rs, cs). beta == 0
// never reads C. Returns false, having done nothing, when BLAS is switched off,
// a dimension is 0 or a layout has no BLAS form; the caller then computes it
// itself. Large
// products are split over flemu's thread pool (serially inside a parallel_for);
// OpenBLAS itself runs one thread per call.
bool blas_gemm(int64_t n, int64_t m, int64_t k, float alpha, const float* a, int64_t a_rs, int64_t a_cs,
               const float* b, int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc);
bool blas_gemm(int64_t n, int64_t m, int64_t k, double alpha, const double* a, int64_t a_rs, int64_t a_cs,
               const double* b, int64_t b_rs, int64_t b_cs, double beta, double* c, int64_t ldc);

}  // namespace flemu

#endif  // FLEMU_KERNELS_SUPPORT_BLAS_H_
