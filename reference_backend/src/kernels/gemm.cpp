// mm and addmm: a blocked GEMM in the BLIS style. Operands are packed from
// any 2-D strides (so transposed views need no copy) into panels of the
// compute type (float, or double for float64), a register-tiled
// micro-kernel multiplies the panels, and row blocks are spread over the
// thread pool when the problem is large enough.
#include <algorithm>
#include <cstring>
#include <vector>

#include "../thread_pool.h"
#include "../tunables.h"
#include "support/blas.h"
#include "support/dnnl_gemm.h"
#include "support/gemm.h"
#include "support/launch.h"
#include "support/registry.h"

namespace flemu {
namespace {

typedef float vf8 __attribute__((vector_size(32)));
typedef double vd4 __attribute__((vector_size(32)));
template <class C>
struct Vec;
template <>
struct Vec<float> {
  using type = vf8;
};
template <>
struct Vec<double> {
  using type = vd4;
};

// C[MR x NR] (row stride ldc) += A_panel[kc x MR] * B_panel[kc x NR].
template <class C, int MR, int NR>
inline __attribute__((always_inline)) void micro_body(int64_t kc, const C* a, const C* b, C* c, int64_t ldc) {
  using V = typename Vec<C>::type;
  constexpr int VL = static_cast<int>(sizeof(V) / sizeof(C));
  constexpr int NV = NR / VL;
  V acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NV; ++j) acc[i][j] = V{};
  for (int64_t p = 0; p < kc; ++p) {
    V bv[NV];
    for (int j = 0; j < NV; ++j) std::memcpy(&bv[j], b + j * VL, sizeof(V));
    for (int i = 0; i < MR; ++i) {
      const V av = a[i] - V{};  // broadcast; x - 0 folds away, x + 0 would not (-0.0)
      for (int j = 0; j < NV; ++j) acc[i][j] += av * bv[j];
    }
    a += MR;
    b += NR;
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NV; ++j) {
      V cv;
      std::memcpy(&cv, c + i * ldc + j * VL, sizeof(V));
      cv += acc[i][j];
      std::memcpy(c + i * ldc + j * VL, &cv, sizeof(V));
    }
}

template <class C>
using MicroFn = void (*)(int64_t, const C*, const C*, C*, int64_t);

template <class C, int MR, int NR>
void micro_baseline(int64_t kc, const C* a, const C* b, C* c, int64_t ldc) {
  micro_body<C, MR, NR>(kc, a, b, c, ldc);
}

#if defined(__x86_64__)
// Built for AVX2+FMA and chosen at run time, so the library itself keeps
// the baseline x86-64 ISA.
template <class C, int MR, int NR>
__attribute__((target("avx2,fma"))) void micro_avx2(int64_t kc, const C* a, const C* b, C* c, int64_t ldc) {
  micro_body<C, MR, NR>(kc, a, b, c, ldc);
}
bool cpu_has_avx2_fma() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}
#endif

template <class T>
using compute_gemm_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T, class C>
inline C load_c(const char* base, int64_t offset_elems) {
  return static_cast<C>(to_compute(reinterpret_cast<const T*>(base)[offset_elems]));
}

// A 2-D view in elements.
struct Mat {
  const char* data;
  int64_t rs, cs;
};

template <class T, class C, int MR>
void pack_a(const Mat& A, int64_t i0, int64_t mc, int64_t p0, int64_t kc, C alpha, C* out) {
  for (int64_t ir = 0; ir < mc; ir += MR) {
    const int64_t mr = std::min<int64_t>(MR, mc - ir);
    for (int i = 0; i < MR; ++i) {
      if (i < mr) {
        const int64_t row = (i0 + ir + i) * A.rs;
        for (int64_t p = 0; p < kc; ++p) out[p * MR + i] = alpha * load_c<T, C>(A.data, row + (p0 + p) * A.cs);
      } else {
        for (int64_t p = 0; p < kc; ++p) out[p * MR + i] = C(0);
      }
    }
    out += MR * kc;
  }
}

template <class T, class C, int NR>
void pack_b_sliver(const Mat& B, int64_t p0, int64_t kc, int64_t j0, int64_t nr, C* out) {
  for (int64_t p = 0; p < kc; ++p) {
    const int64_t row = (p0 + p) * B.rs;
    int64_t j = 0;
    if (B.cs == 1 && std::is_same_v<T, C>) {
      std::memcpy(out + p * NR, reinterpret_cast<const C*>(B.data) + row + j0, static_cast<size_t>(nr) * sizeof(C));
      j = nr;
    }
    for (; j < nr; ++j) out[p * NR + j] = load_c<T, C>(B.data, row + (j0 + j) * B.cs);
    for (; j < NR; ++j) out[p * NR + j] = C(0);
  }
}

template <class C>
C* scratch(std::vector<C>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// Cbuf[n x m] (row stride ldc) += alpha * A[n x k] * B[k x m].
template <class T, class C, int MR, int NR>
void gemm_accumulate(int64_t n, int64_t m, int64_t k, const Mat& A, const Mat& B, C alpha, C* cbuf, int64_t ldc,
                     MicroFn<C> micro, const GemmBlocking& blocking = {}) {
  // A zero field keeps the built-in default (the tunables group sets them).
  const int64_t KC = blocking.block_k > 0 ? blocking.block_k : std::is_same_v<C, float> ? 256 : 192;
  const int64_t NC = NR * (blocking.block_n_tiles > 0 ? blocking.block_n_tiles : 64);
  const int64_t kMaxMC = MR * (blocking.block_m_tiles > 0 ? blocking.block_m_tiles : 24);
  ThreadPool* pool = nullptr;
  int64_t mc_size = kMaxMC;
  // Threads pay off once the block work dwarfs a wake-up (tens of microseconds).
  if (n * m * k >= int64_t{1} << 21 && n > MR) {
    pool = &ThreadPool::instance();
    const int64_t threads = pool->parallelism();
    if (threads > 1) {
      // Enough row blocks that every thread gets about the same share.
      const int64_t target = (n + 2 * threads - 1) / (2 * threads);
      mc_size = std::clamp<int64_t>((target + MR - 1) / MR * MR, MR, kMaxMC);
    } else {
      pool = nullptr;
    }
  }
  std::vector<C> bpack(static_cast<size_t>(KC * std::min(NC, (m + NR - 1) / NR * NR)));
  const int64_t row_blocks = (n + mc_size - 1) / mc_size;
  for (int64_t jc = 0; jc < m; jc += NC) {
    const int64_t nc = std::min(NC, m - jc);
    const int64_t slivers = (nc + NR - 1) / NR;
    for (int64_t pc = 0; pc < k; pc += KC) {
      const int64_t kc = std::min(KC, k - pc);
      auto pack_b = [&](int64_t s) {
        const int64_t j0 = s * NR;
        pack_b_sliver<T, C, NR>(B, pc, kc, jc + j0, std::min<int64_t>(NR, nc - j0), bpack.data() + j0 * kc);
      };
      auto block = [&](int64_t ib) {
        thread_local std::vector<C> apack_storage;
        const int64_t ic = ib * mc_size, mc = std::min(mc_size, n - ic);
        C* apack = scratch(apack_storage, static_cast<size_t>(((mc + MR - 1) / MR) * MR * kc));
        pack_a<T, C, MR>(A, ic, mc, pc, kc, alpha, apack);
        alignas(64) C edge[MR * NR];
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const int64_t nr = std::min<int64_t>(NR, nc - jr);
          const C* bp = bpack.data() + jr * kc;
          for (int64_t ir = 0; ir < mc; ir += MR) {
            const int64_t mr = std::min<int64_t>(MR, mc - ir);
            const C* ap = apack + ir * kc;
            C* c = cbuf + (ic + ir) * ldc + jc + jr;
            if (mr == MR && nr == NR) {
              micro(kc, ap, bp, c, ldc);
            } else {
              std::fill(edge, edge + MR * NR, C(0));
              micro(kc, ap, bp, edge, NR);
              for (int64_t i = 0; i < mr; ++i)
                for (int64_t j = 0; j < nr; ++j) c[i * ldc + j] += edge[i * NR + j];
            }
          }
        }
      };
      if (pool) {
        pool->parallel_for(slivers, pack_b);
        pool->parallel_for(row_blocks, block);
      } else {
        for (int64_t s = 0; s < slivers; ++s) pack_b(s);
        for (int64_t ib = 0; ib < row_blocks; ++ib) block(ib);
      }
    }
  }
}

// A GEMM on a kernel library: float32 on oneDNN, then float32/float64 on
// OpenBLAS; false (nothing done) when neither takes it.
template <class C>
bool library_gemm(int64_t n, int64_t m, int64_t k, C alpha, const C* a, int64_t a_rs, int64_t a_cs, const C* b,
                  int64_t b_rs, int64_t b_cs, C beta, C* c, int64_t ldc) {
  if constexpr (std::is_same_v<C, float>) {
    if (dnnl_gemm(n, m, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc)) return true;
  }
  return blas_gemm(n, m, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc);
}

// Everything a GEMM task needs, copied out of the host descriptors.
struct GemmJob {
  int64_t n = 0, m = 0, k = 0;
  Mat a{}, b{};
  char* out = nullptr;
  int64_t out_rs = 0, out_cs = 0;
  bool has_self = false;  // addmm with beta != 0
  Mat self{};             // broadcast to [n, m] (0 strides)
  double beta = 0.0, alpha = 1.0;
  GemmBlocking blocking{};  // of the launching device; used by the fp32 compute path
};

// The scratch matrix [n x m] (compute type) into the output, converted.
template <class T, class C>
void store_scratch(const GemmJob& job, const C* cbuf) {
  for (int64_t i = 0; i < job.n; ++i)
    for (int64_t j = 0; j < job.m; ++j)
      reinterpret_cast<T*>(job.out)[i * job.out_rs + j * job.out_cs] = convert<T>(cbuf[i * job.m + j]);
}

template <class T>
void run_gemm(const GemmJob& job) {
  using C = compute_gemm_t<T>;
  const int64_t n = job.n, m = job.m;
  // Accumulate straight into the output when it already has the compute
  // type and unit column stride; otherwise into a scratch matrix.
  const bool direct = std::is_same_v<T, C> && (job.out_cs == 1 || m == 1) && (job.out_rs >= m || n == 1);
  std::vector<C> scratch_storage;
  C* cbuf;
  int64_t ldc;
  if (direct) {
    cbuf = reinterpret_cast<C*>(job.out);
    ldc = n == 1 ? m : job.out_rs;
  } else {
    scratch_storage.assign(static_cast<size_t>(n * m), C(0));
    cbuf = scratch_storage.data();
    ldc = m;
  }
  if constexpr (std::is_same_v<T, C>) {
    // No self: the library writes the product over whatever the output held.
    if (direct && !job.has_self && job.k > 0 &&
        library_gemm(n, m, job.k, static_cast<C>(job.alpha), reinterpret_cast<const C*>(job.a.data), job.a.rs,
                     job.a.cs, reinterpret_cast<const C*>(job.b.data), job.b.rs, job.b.cs, C(0), cbuf, ldc))
      return;
    // nn.Linear's addmm (self a bias, beta and alpha 1): oneDNN adds the bias
    // to the finished sums, with no pass that first copies it into the output.
    if constexpr (std::is_same_v<C, float>) {
      const GemmBias bias{reinterpret_cast<const float*>(job.self.data), job.self.rs, job.self.cs};
      if (direct && job.has_self && job.beta == 1.0 && job.alpha == 1.0 && job.k > 0 &&
          dnnl_gemm(n, m, job.k, 1.0f, reinterpret_cast<const float*>(job.a.data), job.a.rs, job.a.cs,
                    reinterpret_cast<const float*>(job.b.data), job.b.rs, job.b.cs, 0.0f, cbuf, ldc, &bias))
        return;
    }
  }
  // beta == 0 must not read self: NaN or Inf there does not propagate.
  const C beta = static_cast<C>(job.beta);
  for (int64_t i = 0; i < n; ++i) {
    C* row = cbuf + i * ldc;
    if (job.has_self) {
      for (int64_t j = 0; j < m; ++j) row[j] = beta * load_c<T, C>(job.self.data, i * job.self.rs + j * job.self.cs);
    } else if (direct) {
      std::fill(row, row + m, C(0));
    }
  }
  if (job.k > 0) {
    const C alpha = static_cast<C>(job.alpha);
    if constexpr (std::is_same_v<T, C>) {
      if (library_gemm(n, m, job.k, alpha, reinterpret_cast<const C*>(job.a.data), job.a.rs, job.a.cs,
                       reinterpret_cast<const C*>(job.b.data), job.b.rs, job.b.cs, C(1), cbuf, ldc)) {
        if (!direct) store_scratch<T>(job, cbuf);
        return;
      }
    }
#if defined(__x86_64__)
    if (cpu_has_avx2_fma()) {
      if constexpr (std::is_same_v<C, float>)
        gemm_accumulate<T, C, 6, 16>(n, m, job.k, job.a, job.b, alpha, cbuf, ldc, &micro_avx2<C, 6, 16>,
                                     job.blocking);
      else gemm_accumulate<T, C, 6, 8>(n, m, job.k, job.a, job.b, alpha, cbuf, ldc, &micro_avx2<C, 6, 8>);
    } else
#endif
    {
      if constexpr (std::is_same_v<C, float>)
        gemm_accumulate<T, C, 4, 8>(n, m, job.k, job.a, job.b, alpha, cbuf, ldc, &micro_baseline<C, 4, 8>,
                                    job.blocking);
      else gemm_accumulate<T, C, 4, 4>(n, m, job.k, job.a, job.b, alpha, cbuf, ldc, &micro_baseline<C, 4, 4>);
    }
  }
  if (!direct) store_scratch<T>(job, cbuf);
}

void require_matrix(const TensorArg& t, const char* what) {
  if (t.ndim != 2) invalid_argument(what, " must be a matrix (2-D), got ", t.ndim, " dims");
  if (!dtype_is_floating(t.dtype))
    invalid_argument(what, " has dtype ", dtype_name(t.dtype), "; flemu GEMM takes floating dtypes");
}

void launch_gemm(const Launch& L, const TensorArg& a, const TensorArg& b, const TensorArg& out, const TensorArg* self,
                 const ScalarArg& beta, const ScalarArg& alpha) {
  require_matrix(a, "mat1");
  require_matrix(b, "mat2");
  require_matrix(out, "out");
  if (a.dtype != b.dtype || a.dtype != out.dtype || (self && self->dtype != a.dtype))
    invalid_argument("operands must share one dtype, got mat1 ", dtype_name(a.dtype), ", mat2 ", dtype_name(b.dtype),
                     ", out ", dtype_name(out.dtype), self ? ", self " : "", self ? dtype_name(self->dtype) : "");
  GemmJob job;
  job.n = a.sizes[0];
  job.k = a.sizes[1];
  job.m = b.sizes[1];
  if (b.sizes[0] != job.k)
    invalid_argument("mat1 is ", job.n, "x", job.k, " and mat2 is ", b.sizes[0], "x", job.m, ": inner sizes differ");
  if (out.sizes[0] != job.n || out.sizes[1] != job.m)
    invalid_argument("out is ", out.sizes[0], "x", out.sizes[1], "; expected ", job.n, "x", job.m);
  if (job.n == 0 || job.m == 0) return;
  job.a = {a.data, a.strides[0], a.strides[1]};
  job.b = {b.data, b.strides[0], b.strides[1]};
  job.out = out.data;
  job.out_rs = out.strides[0];
  job.out_cs = out.strides[1];
  job.alpha = alpha.to_double();
  job.beta = beta.to_double();
  job.blocking = gemm_blocking(L.device());
  if (self && job.beta != 0.0) {
    if (self->ndim > 2) invalid_argument("self must have at most 2 dims, got ", self->ndim);
    // Broadcast self to [n, m] by right-aligning its dims.
    int64_t sz[2] = {1, 1}, st[2] = {0, 0};
    for (int d = 0; d < self->ndim; ++d) {
      sz[2 - self->ndim + d] = self->sizes[d];
      st[2 - self->ndim + d] = self->strides[d];
    }
    const int64_t want[2] = {job.n, job.m};
    for (int d = 0; d < 2; ++d) {
      if (sz[d] == want[d]) continue;
      if (sz[d] != 1)
        invalid_argument("self of size ", sz[0], "x", sz[1], " cannot be broadcast to ", job.n, "x", job.m);
      st[d] = 0;
    }
    job.has_self = true;
    job.self = {self->data, st[0], st[1]};
  }
  dispatch_floating(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    L.enqueue([job] { run_gemm<T>(job); });
  });
}

}  // namespace

void gemm_probe_f32(int64_t n, int64_t m, int64_t k, const float* a, const float* b, float* c,
                    const GemmBlocking& blocking) {
  for (int64_t i = 0; i < n * m; ++i) c[i] = 0.0f;
  const Mat A{reinterpret_cast<const char*>(a), k, 1};
  const Mat B{reinterpret_cast<const char*>(b), m, 1};
#if defined(__x86_64__)
  if (cpu_has_avx2_fma()) {
    gemm_accumulate<float, float, 6, 16>(n, m, k, A, B, 1.0f, c, m, &micro_avx2<float, 6, 16>, blocking);
    return;
  }
#endif
  gemm_accumulate<float, float, 4, 8>(n, m, k, A, B, 1.0f, c, m, &micro_baseline<float, 4, 8>, blocking);
}

TFL_Error* kernel_mm(const TFL_Kernel_Args* args) {
  return run_kernel(args, kMm, [&](Launch& L) {
    ScalarArg zero, one;
    zero.i = 0;
    one.i = 1;
    launch_gemm(L, L.input_tensor(0, "self"), L.input_tensor(1, "mat2"), L.output(0, "out"), nullptr, zero, one);
  });
}

TFL_Error* kernel_addmm(const TFL_Kernel_Args* args) {
  // addmm(self, mat1, mat2, *, beta=1, alpha=1); in-place, outputs[0] is self.
  return run_kernel(args, kAddmm, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self");
    const ScalarArg beta = L.scalar_or(3, 1, "beta"), alpha = L.scalar_or(4, 1, "alpha");
    launch_gemm(L, L.input_tensor(1, "mat1"), L.input_tensor(2, "mat2"), L.output(0, "out"), &self, beta, alpha);
  });
}

// ---------------------------------------------------------------------------
// gemm_compute (gemm.h): the same blocked GEMM for other kernels
// ---------------------------------------------------------------------------

namespace {

template <class C>
void gemm_compute_impl(int64_t n, int64_t m, int64_t k, const C* a, int64_t a_rs, int64_t a_cs, const C* b,
                       int64_t b_rs, int64_t b_cs, C* c, int64_t ldc, bool accumulate) {
  if (n <= 0 || m <= 0) return;
  if (library_gemm(n, m, k, C(1), a, a_rs, a_cs, b, b_rs, b_cs, accumulate ? C(1) : C(0), c, ldc)) return;
  if (!accumulate)
    for (int64_t i = 0; i < n; ++i) std::fill(c + i * ldc, c + i * ldc + m, C(0));
  if (k <= 0) return;
  const Mat A{reinterpret_cast<const char*>(a), a_rs, a_cs};
  const Mat B{reinterpret_cast<const char*>(b), b_rs, b_cs};
#if defined(__x86_64__)
  if (cpu_has_avx2_fma()) {
    if constexpr (std::is_same_v<C, float>)
      gemm_accumulate<C, C, 6, 16>(n, m, k, A, B, C(1), c, ldc, &micro_avx2<C, 6, 16>);
    else gemm_accumulate<C, C, 6, 8>(n, m, k, A, B, C(1), c, ldc, &micro_avx2<C, 6, 8>);
    return;
  }
#endif
  if constexpr (std::is_same_v<C, float>)
    gemm_accumulate<C, C, 4, 8>(n, m, k, A, B, C(1), c, ldc, &micro_baseline<C, 4, 8>);
  else gemm_accumulate<C, C, 4, 4>(n, m, k, A, B, C(1), c, ldc, &micro_baseline<C, 4, 4>);
}

}  // namespace

void gemm_compute(int64_t n, int64_t m, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                  int64_t b_rs, int64_t b_cs, float* c, int64_t ldc, bool accumulate) {
  gemm_compute_impl<float>(n, m, k, a, a_rs, a_cs, b, b_rs, b_cs, c, ldc, accumulate);
}

void gemm_compute(int64_t n, int64_t m, int64_t k, const double* a, int64_t a_rs, int64_t a_cs, const double* b,
                  int64_t b_rs, int64_t b_cs, double* c, int64_t ldc, bool accumulate) {
  gemm_compute_impl<double>(n, m, k, a, a_rs, a_cs, b, b_rs, b_cs, c, ldc, accumulate);
}

}  // namespace flemu
