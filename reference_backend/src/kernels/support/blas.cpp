// blas.h: row-major strided operands mapped onto CBLAS calls, split over the
// thread pool along the output's longer side.
#include "blas.h"

#include <algorithm>
#include <climits>
#include <mutex>

#include "../../thread_pool.h"
#include "launch.h"

#include <cblas.h>

namespace flemu {
namespace {

// How one operand (rows x cols, element strides rs, cs) reads as a BLAS
// matrix: row-major as is, or the transpose of a row-major one.
struct BlasOperand {
  bool ok = false;
  CBLAS_TRANSPOSE trans = CblasNoTrans;
  blasint ld = 1;
};

bool fits(int64_t v) { return v >= 0 && v <= INT_MAX; }

BlasOperand blas_operand(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  BlasOperand op;
  // A dimension of size one has no stride to honour.
  const bool unit_cols = cols == 1 || cs == 1, unit_rows = rows == 1 || rs == 1;
  if (unit_cols && (rows == 1 || rs >= cols)) {
    const int64_t ld = rows == 1 ? std::max<int64_t>(cols, 1) : rs;
    if (fits(ld)) op = {true, CblasNoTrans, static_cast<blasint>(ld)};
  } else if (unit_rows && (cols == 1 || cs >= rows)) {
    const int64_t ld = cols == 1 ? std::max<int64_t>(rows, 1) : cs;
    if (fits(ld)) op = {true, CblasTrans, static_cast<blasint>(ld)};
  }
  return op;
}

void init_once() {
  static std::once_flag once;
  // flemu's pool splits the work; OpenBLAS's own threads would spin beside it.
  std::call_once(once, [] { scipy_openblas_set_num_threads(1); });
}

inline void call_gemm(const BlasOperand& A, const BlasOperand& B, blasint n, blasint m, blasint k, float alpha,
                      const float* a, const float* b, float beta, float* c, blasint ldc) {
  scipy_cblas_sgemm(CblasRowMajor, A.trans, B.trans, n, m, k, alpha, a, A.ld, b, B.ld, beta, c, ldc);
}
inline void call_gemm(const BlasOperand& A, const BlasOperand& B, blasint n, blasint m, blasint k, double alpha,
                      const double* a, const double* b, double beta, double* c, blasint ldc) {
  scipy_cblas_dgemm(CblasRowMajor, A.trans, B.trans, n, m, k, alpha, a, A.ld, b, B.ld, beta, c, ldc);
}

template <class T>
bool blas_gemm_impl(int64_t n, int64_t m, int64_t k, T alpha, const T* a, int64_t a_rs, int64_t a_cs, const T* b,
                    int64_t b_rs, int64_t b_cs, T beta, T* c, int64_t ldc) {
  // An empty product only zeroes or keeps C: the callers' own paths do that.
  if (!kernel_settings().blas || n == 0 || m == 0 || k == 0) return false;
  if (!fits(n) || !fits(m) || !fits(k) || !fits(ldc) || (n > 1 && ldc < m)) return false;
  const BlasOperand A = blas_operand(n, k, a_rs, a_cs), B = blas_operand(k, m, b_rs, b_cs);
  if (!A.ok || !B.ok) return false;
  init_once();
  const blasint cld = static_cast<blasint>(n == 1 ? std::max<int64_t>(ldc, m) : ldc);
  ThreadPool& pool = ThreadPool::instance();
  const int64_t threads = pool.parallelism();
  // A wake-up of the pool costs tens of microseconds: split only products that dwarf it.
  if (threads < 2 || n * m * k < (int64_t{1} << 21)) {
    call_gemm(A, B, static_cast<blasint>(n), static_cast<blasint>(m), static_cast<blasint>(k), alpha, a, b, beta,
              c, cld);
    return true;
  }
  // Split the output's longer side into one part per thread, in whole
  // multiples of 16 so every part keeps full micro-tiles.
  const bool by_rows = n >= m;
  const int64_t extent = by_rows ? n : m;
  const int64_t part = part_size(extent, threads, 16);
  const int64_t parts = (extent + part - 1) / part;
  // Element (i, j) of an operand sits at i * rs + j * cs.
  pool.parallel_for(parts, [&](int64_t p) {
    const int64_t lo = p * part, len = std::min(part, extent - lo);
    if (by_rows)
      call_gemm(A, B, static_cast<blasint>(len), static_cast<blasint>(m), static_cast<blasint>(k), alpha,
                a + lo * a_rs, b, beta, c + lo * ldc, cld);
    else
      call_gemm(A, B, static_cast<blasint>(n), static_cast<blasint>(len), static_cast<blasint>(k), alpha, a,
                b + lo * b_cs, beta, c + lo, cld);
  });
  return true;
}

}  // namespace

bool blas_gemm(int64_t n, int64_t m, int64_t k, float alpha, const float* a, int64_t a_rs, int64_t a_cs,
               const float* b, int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc) {
  return blas_gemm_impl<float>(n, m, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc);
}

bool blas_gemm(int64_t n, int64_t m, int64_t k, double alpha, const double* a, int64_t a_rs, int64_t a_cs,
               const double* b, int64_t b_rs, int64_t b_cs, double beta, double* c, int64_t ldc) {
  return blas_gemm_impl<double>(n, m, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc);
}

}  // namespace flemu
