// The OpenBLAS functions blas.cpp calls, forwarded to the library loaded on
// first use (lazy_library.h).
#include <cblas.h>

#include "lazy_library.h"

namespace flemu {
namespace {

const LazyLibrary kOpenBlas{
    "libscipy_openblas.so", "OpenBLAS", "OpenBLAS" OPENBLAS_VERSION,
    "flemu's float GEMMs run on it; install the scipy-openblas32 wheel flemu was built with "
    "(pip install scipy-openblas32), or set FLEMU_BLAS=0 (and FLEMU_DNNL=0 for float32 on flemu's own GEMM)"};

void* openblas_library() {
  static void* const handle = load_library(kOpenBlas);
  return handle;
}

}  // namespace
}  // namespace flemu

#define FLEMU_BLAS_FORWARD(ret, name, params, args) \
  FLEMU_LAZY_FORWARD(flemu::kOpenBlas, flemu::openblas_library, ret, name, params, args)

FLEMU_BLAS_FORWARD(void, scipy_openblas_set_num_threads, (int num_threads), (num_threads))
FLEMU_BLAS_FORWARD(void, scipy_cblas_sgemm,
  (const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE trans_a, const enum CBLAS_TRANSPOSE trans_b,
   const blasint m, const blasint n, const blasint k, const float alpha, const float* a, const blasint lda,
   const float* b, const blasint ldb, const float beta, float* c, const blasint ldc),
  (order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
FLEMU_BLAS_FORWARD(void, scipy_cblas_dgemm,
  (const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE trans_a, const enum CBLAS_TRANSPOSE trans_b,
   const blasint m, const blasint n, const blasint k, const double alpha, const double* a, const blasint lda,
   const double* b, const blasint ldb, const double beta, double* c, const blasint ldc),
  (order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
