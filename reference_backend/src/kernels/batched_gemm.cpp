// bmm and baddbmm on the blocked GEMM of gemm.cpp (gemm_compute). float32
// and float64 operands are read in place through their strides; fp16/bf16
// matrices are widened to float32 first and the result rounded once. Small
// matrices (attention heads) are spread over the thread pool one batch entry
// per task; large ones run one after another, each split by the GEMM itself.
#include <algorithm>
#include <vector>

#include "../thread_pool.h"
#include "support/dnnl_gemm.h"
#include "support/elementwise_launch.h"
#include "support/gemm.h"
#include "support/registry.h"

namespace flemu {
namespace {

// What the GEMM computes in: float, or double for float64.
template <class T>
using mm_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// A 3-D operand, strides in elements.
struct Batched {
  char* data = nullptr;
  int64_t bs = 0, rs = 0, cs = 0;
};

struct BmmJob {
  int64_t batch = 0, n = 0, m = 0, k = 0;
  Batched a, b, out;
  bool has_self = false;  // baddbmm with beta != 0
  Batched self;           // broadcast to [batch, n, m] with zero strides
  double beta = 0.0, alpha = 1.0;
};

// Work (multiply-adds) per matrix above which the GEMM splits one matrix
// over the pool rather than the batch being split.
constexpr int64_t kSplitMatrixWork = int64_t{1} << 21;

template <class T>
void run_one(const BmmJob& j, int64_t e, std::vector<mm_t<T>>& scratch) {
  using C = mm_t<T>;
  const int64_t n = j.n, m = j.m, k = j.k;
  const T* a = reinterpret_cast<const T*>(j.a.data) + e * j.a.bs;
  const T* b = reinterpret_cast<const T*>(j.b.data) + e * j.b.bs;
  T* out = reinterpret_cast<T*>(j.out.data) + e * j.out.bs;
  const T* self = j.has_self ? reinterpret_cast<const T*>(j.self.data) + e * j.self.bs : nullptr;
  const C beta = static_cast<C>(j.beta), alpha = static_cast<C>(j.alpha);
  if constexpr (std::is_same_v<T, C>) {
    // Rows with unit column stride and no self (which may be the output
    // itself, for baddbmm_): the product goes straight into the output.
    if (!self && j.out.cs == 1 && (n == 1 || j.out.rs >= m)) {
      const int64_t ldc = n == 1 ? std::max<int64_t>(m, 1) : j.out.rs;
      gemm_compute(n, m, k, a, j.a.rs, j.a.cs, b, j.b.rs, j.b.cs, out, ldc, false);
      if (alpha != C(1))
        for (int64_t i = 0; i < n; ++i)
          for (int64_t q = 0; q < m; ++q) out[i * ldc + q] *= alpha;
      return;
    }
  }

  // Operands in the compute type: in place for float/double, widened copies otherwise.
  const C* ac;
  const C* bc;
  int64_t a_rs = j.a.rs, a_cs = j.a.cs, b_rs = j.b.rs, b_cs = j.b.cs;
  size_t need = static_cast<size_t>(n * m);
  if constexpr (!std::is_same_v<T, C>) need += static_cast<size_t>(n * k + k * m);
  if (scratch.size() < need) scratch.resize(need);
  C* cbuf = scratch.data();
  if constexpr (std::is_same_v<T, C>) {
    ac = a;
    bc = b;
  } else {
    C* aw = cbuf + n * m;
    C* bw = aw + n * k;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < k; ++p) aw[i * k + p] = static_cast<C>(a[i * j.a.rs + p * j.a.cs]);
    for (int64_t p = 0; p < k; ++p)
      for (int64_t q = 0; q < m; ++q) bw[p * m + q] = static_cast<C>(b[p * j.b.rs + q * j.b.cs]);
    ac = aw;
    bc = bw;
    a_rs = k;
    a_cs = 1;
    b_rs = m;
    b_cs = 1;
  }
  // C = A * B into the dense scratch, then out = beta * self + alpha * C.
  gemm_compute(n, m, k, ac, a_rs, a_cs, bc, b_rs, b_cs, cbuf, m, false);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t q = 0; q < m; ++q) {
      C v = cbuf[i * m + q];
      if (alpha != C(1)) v *= alpha;
      if (self) v += beta * static_cast<C>(self[i * j.self.rs + q * j.self.cs]);
      out[i * j.out.rs + q * j.out.cs] = convert<T>(v);
    }
  }
}

template <class T>
void run_bmm(const BmmJob& j) {
  if constexpr (std::is_same_v<T, float>) {
    // No self (which may be the output itself, for baddbmm_): one batched
    // oneDNN matmul writes the output.
    if (!j.has_self && (j.out.cs == 1 || j.m == 1) &&
        dnnl_gemm_batched(j.batch, j.n, j.m, j.k, static_cast<float>(j.alpha),
                          reinterpret_cast<const float*>(j.a.data), j.a.bs, j.a.rs, j.a.cs,
                          reinterpret_cast<const float*>(j.b.data), j.b.bs, j.b.rs, j.b.cs, 0.0f,
                          reinterpret_cast<float*>(j.out.data), j.out.bs, j.out.rs))
      return;
  }
  if (j.n * j.m * j.k >= kSplitMatrixWork || j.batch == 1) {
    std::vector<mm_t<T>> scratch;
    for (int64_t e = 0; e < j.batch; ++e) run_one<T>(j, e, scratch);
    return;
  }
  ThreadPool::instance().parallel_for(j.batch, [&](int64_t e) {
    thread_local std::vector<mm_t<T>> scratch;
    run_one<T>(j, e, scratch);
  });
}

Batched batched(const TensorArg& t, const char* what) {
  if (t.ndim != 3) invalid_argument(what, " must be a 3-D tensor, got ", t.ndim, " dims");
  return {t.data, t.strides[0], t.strides[1], t.strides[2]};
}

void launch_bmm(const Launch& L, const char* op, const TensorArg& a, const TensorArg& b, const TensorArg& out,
                const TensorArg* self, const ScalarArg& beta, const ScalarArg& alpha) {
  require_same_dtype(op, out, {&a, &b});
  if (self) require_same_dtype(op, out, {self});
  if (!dtype_is_floating(out.dtype)) decline(op, " of ", dtype_name(out.dtype), " tensors");
  BmmJob j;
  j.a = batched(a, "batch1");
  j.b = batched(b, "batch2");
  j.out = batched(out, "out");
  j.batch = a.sizes[0];
  j.n = a.sizes[1];
  j.k = a.sizes[2];
  j.m = b.sizes[2];
  if (b.sizes[0] != j.batch || b.sizes[1] != j.k)
    invalid_argument(op, ": batch1 is ", j.batch, "x", j.n, "x", j.k, " but batch2 is ", b.sizes[0], "x", b.sizes[1],
                     "x", b.sizes[2], "; expected ", j.batch, "x", j.k, "xM");
  if (out.sizes[0] != j.batch || out.sizes[1] != j.n || out.sizes[2] != j.m)
    invalid_argument(op, ": out is ", out.sizes[0], "x", out.sizes[1], "x", out.sizes[2], "; expected ", j.batch, "x",
                     j.n, "x", j.m);
  j.alpha = alpha.to_double();
  j.beta = beta.to_double();
  if (self && j.beta != 0.0) {
    if (self->ndim > 3) invalid_argument(op, ": self must have at most 3 dims, got ", self->ndim);
    int64_t sz[3] = {1, 1, 1}, st[3] = {0, 0, 0};
    for (int d = 0; d < self->ndim; ++d) {
      sz[3 - self->ndim + d] = self->sizes[d];
      st[3 - self->ndim + d] = self->strides[d];
    }
    const int64_t want[3] = {j.batch, j.n, j.m};
    for (int d = 0; d < 3; ++d) {
      if (sz[d] == want[d]) continue;
      if (sz[d] != 1)
        invalid_argument(op, ": self of size ", sz[0], "x", sz[1], "x", sz[2], " cannot be broadcast to ", j.batch,
                         "x", j.n, "x", j.m);
      st[d] = 0;
    }
    j.has_self = true;
    j.self = {self->data, st[0], st[1], st[2]};
  }
  if (j.batch == 0 || j.n == 0 || j.m == 0) return;
  dispatch_floating(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    L.enqueue([j] { run_bmm<T>(j); });
  });
}

}  // namespace

TFL_Error* kernel_bmm(const TFL_Kernel_Args* args) {
  return run_kernel(args, kBmm, [&](Launch& L) {
    launch_bmm(L, "bmm", L.input_tensor(0, "self"), L.input_tensor(1, "mat2"), L.output(0, "out"), nullptr,
               ScalarArg{}, ScalarArg{TFL_VALUE_INT, 1, 0.0});
  });
}

TFL_Error* kernel_baddbmm(const TFL_Kernel_Args* args) {
  // baddbmm(self, batch1, batch2, *, beta=1, alpha=1); in place, out is self.
  return run_kernel(args, kBaddbmm, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self");
    launch_bmm(L, "baddbmm", L.input_tensor(1, "batch1"), L.input_tensor(2, "batch2"), L.output(0, "out"), &self,
               L.scalar_or(3, 1, "beta"), L.scalar_or(4, 1, "alpha"));
  });
}

}  // namespace flemu
