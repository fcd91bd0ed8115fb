// Float32 GEMM through oneDNN's matmul (the onednn-cpu-gomp wheel), as a
// vendor plugin calls its vendor's kernel library. gemm.cpp tries it before
// OpenBLAS (blas.h) and keeps its own blocked GEMM for what neither takes.
#ifndef FLEMU_KERNELS_SUPPORT_DNNL_GEMM_H_
#define FLEMU_KERNELS_SUPPORT_DNNL_GEMM_H_

#include <cstdint>

namespace flemu {

// A bias added to a product: [n x m] read through element strides, 0 along a
// broadcast dimension (addmm's self as nn.Linear passes it: one row).
struct GemmBias {
  const float* data = nullptr;
  int64_t rs = 0, cs = 0;
};

// C[n x m] (row stride ldc, unit column stride) = alpha * A[n x k] * B[k x m]
// + beta * C, with A and B read through element strides (rs, cs). beta == 0
// never reads C. With `bias` (beta must then be 0, alpha 1), C = A * B + bias,
// the bias added to each finished sum as oneDNN's matmul bias: one rounding,
// as C = bias then C += A * B gives, without the pass that writes C first.
// Returns false, having done nothing, when FLEMU_DNNL=0, a dimension is 0
// or oneDNN refuses the layout. Large products are split over flemu's pool
// along the output's longer side (serially inside a parallel_for), one
// single-threaded oneDNN call per part.
bool dnnl_gemm(int64_t n, int64_t m, int64_t k, float alpha, const float* a, int64_t a_rs, int64_t a_cs,
               const float* b, int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc,
               const GemmBias* bias = nullptr);

// The same for `batch` products at once, matrix e of each operand at
// e * (its batch stride); a batch splits over the pool. A zero batch stride
// (a broadcast operand) is refused, and so is a bias with a batch.
bool dnnl_gemm_batched(int64_t batch, int64_t n, int64_t m, int64_t k, float alpha, const float* a, int64_t a_bs,
                       int64_t a_rs, int64_t a_cs, const float* b, int64_t b_bs, int64_t b_rs, int64_t b_cs,
                       float beta, float* c, int64_t c_bs, int64_t ldc, const GemmBias* bias = nullptr);

}  // namespace flemu

#endif  // FLEMU_KERNELS_SUPPORT_DNNL_GEMM_H_
