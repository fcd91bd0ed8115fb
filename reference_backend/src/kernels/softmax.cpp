// _softmax / _log_softmax and their backward kernels over any dim of a dense
// tensor. A tensor is seen as [outer, D, inner] around the softmax dim: when
// inner == 1 every row is contiguous; otherwise a block of `inner` columns is
// reduced together so the loads stay sequential. fp16/bf16 accumulate in
// float32; half_to_float (fp16/bf16 in, float32 out) is supported.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../thread_pool.h"
#include "support/elementwise_launch.h"
#include "support/fast_math.h"
#include "support/isa.h"
#include "support/registry.h"
#include "support/row_reduce.h"

namespace flemu {
namespace {

template <class T>
using sm_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

struct Shape3 {
  int64_t outer = 1, d = 1, inner = 1;
};

Shape3 around_dim(const TensorArg& t, int64_t dim, const char* op) {
  const int64_t nd = std::max<int64_t>(t.ndim, 1);
  if (dim < -nd || dim >= nd) invalid_argument(op, ": dim ", dim, " is out of range for a tensor with ", t.ndim, " dims");
  if (dim < 0) dim += nd;
  Shape3 s;
  for (int32_t i = 0; i < t.ndim; ++i) {
    if (i < dim) s.outer *= t.sizes[i];
    else if (i == dim) s.d = t.sizes[i];
    else s.inner *= t.sizes[i];
  }
  return s;
}

// Splits [0, n) units of `cost` elements each over the pool when large.
template <class Fn>
void parallel_units(int64_t n, int64_t cost, Fn&& fn) {
  constexpr int64_t kGrain = int64_t{1} << 14;  // elements per task
  const int64_t per = std::max<int64_t>(1, kGrain / std::max<int64_t>(cost, 1));
  const int64_t tasks = (n + per - 1) / per;
  if (tasks <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  ThreadPool::instance().parallel_for(tasks, [&](int64_t t) { fn(t * per, std::min(n, (t + 1) * per)); });
}

enum class Kind { Softmax, LogSoftmax };

// Forward over one [D, inner] block; acc has room for max(D, 2 * inner) values.
template <class Ti, class To, Kind kind>
[[gnu::always_inline]] inline void forward_block(const Ti* in, To* out, int64_t D, int64_t inner, sm_t<Ti>* acc) {
  using C = sm_t<Ti>;
  if (inner == 1) {
    C mx = row_max<C>(D, [&](int64_t j) __attribute__((always_inline)) { return static_cast<C>(in[j]); });
    if (std::isinf(mx) && mx < 0) mx = 0;  // an all -inf row: exp gives 0, no NaN from inf - inf
    // The exponentials first (a loop that vectorizes), then their sum.
    for (int64_t j = 0; j < D; ++j) acc[j] = exp_of(static_cast<C>(in[j]) - mx);
    const C sum = row_sum<C>(D, [&](int64_t j) __attribute__((always_inline)) { return acc[j]; });
    if constexpr (kind == Kind::Softmax) {
      const C inv = C(1) / sum;
      for (int64_t j = 0; j < D; ++j) out[j] = convert<To>(acc[j] * inv);
    } else {
      const C lse = mx + std::log(sum);
      for (int64_t j = 0; j < D; ++j) out[j] = convert<To>(static_cast<C>(in[j]) - lse);
    }
    return;
  }
  C* mx = acc;
  C* sum = acc + inner;
  std::fill(mx, mx + inner, -std::numeric_limits<C>::infinity());
  std::fill(sum, sum + inner, C(0));
  for (int64_t j = 0; j < D; ++j)
    for (int64_t i = 0; i < inner; ++i) mx[i] = std::max<C>(mx[i], static_cast<C>(in[j * inner + i]));
  for (int64_t i = 0; i < inner; ++i)
    if (std::isinf(mx[i]) && mx[i] < 0) mx[i] = 0;
  for (int64_t j = 0; j < D; ++j)
    for (int64_t i = 0; i < inner; ++i) sum[i] += exp_of(static_cast<C>(in[j * inner + i]) - mx[i]);
  if constexpr (kind == Kind::Softmax) {
    for (int64_t i = 0; i < inner; ++i) sum[i] = C(1) / sum[i];
    for (int64_t j = 0; j < D; ++j)
      for (int64_t i = 0; i < inner; ++i)
        out[j * inner + i] = convert<To>(exp_of(static_cast<C>(in[j * inner + i]) - mx[i]) * sum[i]);
  } else {
    for (int64_t i = 0; i < inner; ++i) sum[i] = mx[i] + std::log(sum[i]);
    for (int64_t j = 0; j < D; ++j)
      for (int64_t i = 0; i < inner; ++i) out[j * inner + i] = convert<To>(static_cast<C>(in[j * inner + i]) - sum[i]);
  }
}

// Backward over one block. Softmax: gi = y * (g - sum(g * y));
// LogSoftmax: gi = g - exp(y) * sum(g). acc has room for inner values.
// `first_row` numbers the block's first row (of outer * inner rows); under
// FLEMU_FAULT=softmax_backward_wrong (drop_third) every third row loses its
// sum term.
template <class Ti, class To, Kind kind>
[[gnu::always_inline]] inline void backward_block(const Ti* g, const Ti* y, To* gi, int64_t D, int64_t inner, sm_t<Ti>* acc, int64_t first_row,
                    bool drop_third) {
  using C = sm_t<Ti>;
  // The summed term of element e, and its gradient given the row's sum s.
  const auto term = [&](int64_t e) __attribute__((always_inline)) {
    const C gv = static_cast<C>(g[e]);
    return kind == Kind::Softmax ? gv * static_cast<C>(y[e]) : gv;
  };
  const auto grad = [&](int64_t e, C s) __attribute__((always_inline)) {
    const C gv = static_cast<C>(g[e]), yv = static_cast<C>(y[e]);
    gi[e] = convert<To>(kind == Kind::Softmax ? yv * (gv - s) : gv - exp_of(yv) * s);
  };
  if (inner == 1 && !drop_third) {  // one row: straight loops over it, which vectorize
    const C sum = row_sum<C>(D, term);
    for (int64_t j = 0; j < D; ++j) grad(j, sum);
    return;
  }
  std::fill(acc, acc + inner, C(0));
  for (int64_t j = 0; j < D; ++j)
    for (int64_t i = 0; i < inner; ++i) acc[i] += term(j * inner + i);
  if (drop_third)
    for (int64_t i = 0; i < inner; ++i)
      if ((first_row + i) % 3 == 0) acc[i] = C(0);
  for (int64_t j = 0; j < D; ++j)
    for (int64_t i = 0; i < inner; ++i) grad(j * inner + i, acc[i]);
}

void require_dense(const TensorArg& t, const char* op, const char* what) {
  if (!t.is_contiguous()) invalid_argument(op, ": ", what, " must be contiguous (the kernel asks the host for dense operands)");
}

template <Kind kind>
TFL_Error* softmax_forward(const TFL_Kernel_Args* args, int32_t id, const char* op) {
  // _softmax(self, dim, half_to_float) / _log_softmax(...)
  return run_kernel(args, id, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self"), out = L.output(0, "out");
    const int64_t dim = L.scalar(1, "dim").to_int();
    require_dense(self, op, "self");
    require_dense(out, op, "out");
    const bool widen = out.dtype != self.dtype;
    if (widen && !(out.dtype == TFL_DTYPE_FLOAT32 &&
                   (self.dtype == TFL_DTYPE_FLOAT16 || self.dtype == TFL_DTYPE_BFLOAT16)))
      decline(op, " from ", dtype_name(self.dtype), " to ", dtype_name(out.dtype));
    if (out.numel != self.numel) invalid_argument(op, ": out has ", out.numel, " elements, self ", self.numel);
    const Shape3 s = around_dim(self, dim, op);
    if (self.numel == 0) return;
    const char* in = self.data;
    char* o = out.data;
    dispatch_floating(self.dtype, [&](auto tag) {
      using Ti = typename decltype(tag)::type;
      auto run = [&](auto out_tag) {
        using To = typename decltype(out_tag)::type;
        L.enqueue([s, in, o] {
          parallel_units(s.outer, s.d * s.inner, [&](int64_t b, int64_t e) {
            std::vector<sm_t<Ti>> acc(static_cast<size_t>(std::max(s.d, 2 * s.inner)));
            with_isa([&]() __attribute__((always_inline)) {
              for (int64_t r = b; r < e; ++r)
                forward_block<Ti, To, kind>(reinterpret_cast<const Ti*>(in) + r * s.d * s.inner,
                                            reinterpret_cast<To*>(o) + r * s.d * s.inner, s.d, s.inner, acc.data());
            });
          });
        });
      };
      if (widen) run(TypeTag<float>{});
      else run(TypeTag<Ti>{});
    });
  });
}

template <Kind kind>
TFL_Error* softmax_backward(const TFL_Kernel_Args* args, int32_t id, const char* op) {
  // _softmax_backward_data(grad_output, output, dim, input_dtype)
  return run_kernel(args, id, [&](Launch& L) {
    const TensorArg g = L.input_tensor(0, "grad_output"), y = L.input_tensor(1, "output"), out = L.output(0, "out");
    const int64_t dim = L.scalar(2, "dim").to_int();
    require_dense(g, op, "grad_output");
    require_dense(y, op, "output");
    require_dense(out, op, "out");
    if (g.dtype != y.dtype) decline(op, ": grad_output is ", dtype_name(g.dtype), " but output is ", dtype_name(y.dtype));
    const bool narrow = out.dtype != g.dtype;
    if (narrow && !(g.dtype == TFL_DTYPE_FLOAT32 && (out.dtype == TFL_DTYPE_FLOAT16 || out.dtype == TFL_DTYPE_BFLOAT16)))
      decline(op, " from ", dtype_name(g.dtype), " to ", dtype_name(out.dtype));
    if (g.numel != y.numel || out.numel != g.numel)
      invalid_argument(op, ": grad_output, output and out must have the same number of elements");
    const Shape3 s = around_dim(g, dim, op);
    if (g.numel == 0) return;
    const char* gp = g.data;
    const char* yp = y.data;
    char* o = out.data;
    const bool drop_third = kind == Kind::Softmax && L.faulty(Fault::kSoftmaxBackwardWrong);
    dispatch_floating(g.dtype, [&](auto tag) {
      using Ti = typename decltype(tag)::type;
      auto run = [&](auto out_tag) {
        using To = typename decltype(out_tag)::type;
        L.enqueue([s, gp, yp, o, drop_third] {
          parallel_units(s.outer, s.d * s.inner, [&](int64_t b, int64_t e) {
            std::vector<sm_t<Ti>> acc(static_cast<size_t>(s.inner));
            with_isa([&]() __attribute__((always_inline)) {
              for (int64_t r = b; r < e; ++r) {
                const int64_t off = r * s.d * s.inner;
                backward_block<Ti, To, kind>(reinterpret_cast<const Ti*>(gp) + off,
                                             reinterpret_cast<const Ti*>(yp) + off, reinterpret_cast<To*>(o) + off,
                                             s.d, s.inner, acc.data(), r * s.inner, drop_third);
              }
            });
          });
        });
      };
      if (!narrow) {
        run(TypeTag<Ti>{});
      } else if constexpr (std::is_same_v<Ti, float>) {
        if (out.dtype == TFL_DTYPE_FLOAT16) run(TypeTag<Half>{});
        else run(TypeTag<BFloat16>{});
      }
    });
  });
}

}  // namespace

TFL_Error* kernel_softmax(const TFL_Kernel_Args* a) { return softmax_forward<Kind::Softmax>(a, kSoftmax, "_softmax"); }
TFL_Error* kernel_log_softmax(const TFL_Kernel_Args* a) {
  return softmax_forward<Kind::LogSoftmax>(a, kLogSoftmax, "_log_softmax");
}
TFL_Error* kernel_softmax_backward(const TFL_Kernel_Args* a) {
  return softmax_backward<Kind::Softmax>(a, kSoftmaxBackward, "_softmax_backward_data");
}
TFL_Error* kernel_log_softmax_backward(const TFL_Kernel_Args* a) {
  return softmax_backward<Kind::LogSoftmax>(a, kLogSoftmaxBackward, "_log_softmax_backward_data");
}

}  // namespace flemu
