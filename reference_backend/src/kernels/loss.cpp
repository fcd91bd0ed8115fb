// Losses and their backward kernels: nll_loss (and nll_loss2d: any trailing
// spatial dims) with class weights, ignore_index and every reduction;
// binary_cross_entropy; mse_loss. Operands arrive dense (the kernels ask the
// host for contiguous inputs). Sums accumulate in double over fixed-size
// chunks, so results do not depend on the number of threads.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../thread_pool.h"
#include "support/elementwise_launch.h"
#include "support/registry.h"

namespace flemu {
namespace {

enum Reduction : int64_t { kNone = 0, kMean = 1, kSum = 2 };

int64_t reduction_arg(const Launch& L, size_t i, const char* op) {
  const int64_t r = L.scalar(i, "reduction").to_int();
  if (r < kNone || r > kSum) invalid_argument(op, ": reduction must be 0 (none), 1 (mean) or 2 (sum), got ", r);
  return r;
}

void require_dense(const TensorArg& t, const char* op, const char* what) {
  if (!t.is_contiguous()) invalid_argument(op, ": ", what, " must be contiguous (the kernel asks the host for dense operands)");
}

constexpr int64_t kChunk = int64_t{1} << 15;

// Sum of f(i) for i in [0, n), chunked and added in chunk order.
template <class F>
double chunked_sum(int64_t n, F f) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  if (chunks <= 1) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += f(i);
    return s;
  }
  std::vector<double> part(static_cast<size_t>(chunks), 0.0);
  ThreadPool::instance().parallel_for(chunks, [&](int64_t c) {
    double s = 0;
    for (int64_t i = c * kChunk, e = std::min(n, (c + 1) * kChunk); i < e; ++i) s += f(i);
    part[static_cast<size_t>(c)] = s;
  });
  double s = 0;
  for (double p : part) s += p;
  return s;
}

template <class F>
void parallel_range(int64_t n, F f) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  if (chunks <= 1) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
  ThreadPool::instance().parallel_for(chunks, [&](int64_t c) {
    for (int64_t i = c * kChunk, e = std::min(n, (c + 1) * kChunk); i < e; ++i) f(i);
  });
}

// ---------------------------------------------------------------------------
// nll_loss / nll_loss2d: self [N, C, S...] (or [C]), target [N, S...] (or []).
// ---------------------------------------------------------------------------

struct NllJob {
  const char* self = nullptr;
  const char* target = nullptr;
  int32_t target_dtype = 0;
  const char* weight = nullptr;  // nullptr: all ones
  int64_t n = 1, c = 1, s = 1;   // batch, classes, spatial elements
  int64_t reduction = kMean;
  int64_t ignore_index = -100;
};

struct NllShape {
  int64_t n, c, s;
};

NllShape nll_shape(const TensorArg& self, const TensorArg& target, bool spatial, const char* op) {
  if (spatial) {
    if (self.ndim < 3) invalid_argument(op, ": input must have at least 3 dims [N, C, ...], got ", self.ndim);
    if (target.ndim != self.ndim - 1)
      invalid_argument(op, ": target must have ", self.ndim - 1, " dims for an input with ", self.ndim, ", got ", target.ndim);
  } else {
    if (self.ndim < 1 || self.ndim > 2) invalid_argument(op, ": input must be 1-D or 2-D, got ", self.ndim, " dims");
    if (target.ndim != self.ndim - 1)
      invalid_argument(op, ": target must be ", self.ndim == 2 ? "1-D" : "0-D", " for a ", self.ndim, "-D input, got ",
                       target.ndim, " dims");
  }
  NllShape sh{1, 1, 1};
  if (self.ndim == 1) {
    sh.c = self.sizes[0];
    return sh;
  }
  sh.n = self.sizes[0];
  sh.c = self.sizes[1];
  for (int32_t d = 2; d < self.ndim; ++d) sh.s *= self.sizes[d];
  if (target.sizes[0] != sh.n)
    invalid_argument(op, ": expected target batch size ", sh.n, " to match input batch size, got ", target.sizes[0]);
  for (int32_t d = 2; d < self.ndim; ++d)
    if (target.sizes[d - 1] != self.sizes[d])
      invalid_argument(op, ": target size ", target.sizes[d - 1], " in dim ", d - 1, " differs from input size ",
                       self.sizes[d], " in dim ", d);
  return sh;
}

void check_target(const TensorArg& target, const char* op) {
  if (target.dtype != TFL_DTYPE_INT64 && target.dtype != TFL_DTYPE_INT32 && target.dtype != TFL_DTYPE_UINT8)
    invalid_argument(op, ": target must hold class indices (int64), got ", dtype_name(target.dtype));
}

// The class of element i, or -1 when it is ignored; throws when out of range.
inline int64_t class_of(const NllJob& j, LoadI64 load, int64_t i) {
  const int64_t t = load(j.target + i * dtype_size(j.target_dtype));
  if (t == j.ignore_index) return -1;
  if (t < 0 || t >= j.c) invalid_argument("nll_loss: target ", t, " is out of bounds for ", j.c, " classes");
  return t;
}

template <class T>
void nll_forward(const NllJob& j, T* out, T* total_weight, bool none_per_element) {
  const T* x = reinterpret_cast<const T*>(j.self);
  const T* w = reinterpret_cast<const T*>(j.weight);
  const LoadI64 load = loader_i64(j.target_dtype);
  const int64_t count = j.n * j.s;
  auto at = [&](int64_t i, int64_t t) { return static_cast<double>(x[(i / j.s) * j.c * j.s + t * j.s + i % j.s]); };
  auto weight_of = [&](int64_t t) { return w ? static_cast<double>(w[t]) : 1.0; };
  if (none_per_element) {
    parallel_range(count, [&](int64_t i) {
      const int64_t t = class_of(j, load, i);
      out[i] = convert<T>(t < 0 ? 0.0 : -weight_of(t) * at(i, t));
    });
    *total_weight = convert<T>(0.0);
    return;
  }
  const double wsum = chunked_sum(count, [&](int64_t i) {
    const int64_t t = class_of(j, load, i);
    return t < 0 ? 0.0 : weight_of(t);
  });
  const double lsum = chunked_sum(count, [&](int64_t i) {
    const int64_t t = class_of(j, load, i);
    return t < 0 ? 0.0 : -weight_of(t) * at(i, t);
  });
  // Mean over no counted element is 0 / 0, NaN, as on the CPU.
  const double result = j.reduction == kMean ? lsum / wsum : lsum;
  *out = convert<T>(result);
  *total_weight = convert<T>(wsum);
}

template <class T>
void nll_backward(const NllJob& j, const T* grad_output, bool grad_per_element, const T* total_weight, T* grad_input) {
  const T* w = reinterpret_cast<const T*>(j.weight);
  const LoadI64 load = loader_i64(j.target_dtype);
  const int64_t count = j.n * j.s;
  std::fill(grad_input, grad_input + j.n * j.c * j.s, convert<T>(0.0));
  double scale = grad_per_element ? 1.0 : static_cast<double>(grad_output[0]);
  if (!grad_per_element && j.reduction == kMean) scale /= static_cast<double>(total_weight[0]);
  parallel_range(count, [&](int64_t i) {
    const int64_t t = class_of(j, load, i);
    if (t < 0) return;
    const double g = grad_per_element ? static_cast<double>(grad_output[i]) : scale;
    const double wt = w ? static_cast<double>(w[t]) : 1.0;
    grad_input[(i / j.s) * j.c * j.s + t * j.s + i % j.s] = convert<T>(-wt * g);
  });
}

NllJob nll_job(const Launch& L, const TensorArg& self, const TensorArg& target, size_t weight_arg, size_t reduction_i,
               size_t ignore_i, bool spatial, const char* op) {
  check_target(target, op);
  require_dense(self, op, "self");
  require_dense(target, op, "target");
  const NllShape sh = nll_shape(self, target, spatial, op);
  NllJob j;
  j.self = self.data;
  j.target = target.data;
  j.target_dtype = target.dtype;
  j.n = sh.n;
  j.c = sh.c;
  j.s = sh.s;
  j.reduction = reduction_arg(L, reduction_i, op);
  j.ignore_index = L.scalar(ignore_i, "ignore_index").to_int();
  if (L.has_input(weight_arg)) {
    const TensorArg w = L.input_tensor(weight_arg, "weight");
    require_dense(w, op, "weight");
    if (w.dtype != self.dtype) decline(op, ": weight is ", dtype_name(w.dtype), " but input is ", dtype_name(self.dtype));
    if (w.numel != sh.c) invalid_argument(op, ": weight has ", w.numel, " elements; expected one per class (", sh.c, ")");
    j.weight = w.data;
  }
  return j;
}

TFL_Error* nll_forward_kernel(const TFL_Kernel_Args* args, int32_t id, bool spatial, const char* op) {
  // nll_loss_forward(self, target, weight, reduction, ignore_index) -> (output, total_weight)
  return run_kernel(args, id, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self"), target = L.input_tensor(1, "target");
    const TensorArg out = L.output(0, "output"), tw = L.output(1, "total_weight");
    NllJob j = nll_job(L, self, target, 2, 3, 4, spatial, op);
    require_same_dtype(op, out, {&self, &tw});
    require_dense(out, op, "output");
    const bool per_element = j.reduction == kNone && self.ndim >= 2;
    if (per_element && out.numel != j.n * j.s) invalid_argument(op, ": output has ", out.numel, " elements");
    char* o = out.data;
    char* t = tw.data;
    dispatch_floating(self.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([j, o, t, per_element] { nll_forward<T>(j, reinterpret_cast<T*>(o), reinterpret_cast<T*>(t), per_element); });
    });
  });
}

TFL_Error* nll_backward_kernel(const TFL_Kernel_Args* args, int32_t id, bool spatial, const char* op) {
  // nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight)
  return run_kernel(args, id, [&](Launch& L) {
    const TensorArg g = L.input_tensor(0, "grad_output"), self = L.input_tensor(1, "self"),
                    target = L.input_tensor(2, "target"), tw = L.input_tensor(6, "total_weight");
    const TensorArg out = L.output(0, "grad_input");
    NllJob j = nll_job(L, self, target, 3, 4, 5, spatial, op);
    require_same_dtype(op, out, {&self, &g, &tw});
    require_dense(g, op, "grad_output");
    require_dense(out, op, "grad_input");
    const bool per_element = j.reduction == kNone && self.ndim >= 2;
    if (per_element && g.numel != j.n * j.s)
      invalid_argument(op, ": grad_output has ", g.numel, " elements; expected ", j.n * j.s);
    if (!per_element && g.numel != 1) invalid_argument(op, ": grad_output must be a scalar, got ", g.numel, " elements");
    const char* gp = g.data;
    const char* twp = tw.data;
    char* o = out.data;
    dispatch_floating(self.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([j, gp, twp, o, per_element] {
        nll_backward<T>(j, reinterpret_cast<const T*>(gp), per_element, reinterpret_cast<const T*>(twp),
                        reinterpret_cast<T*>(o));
      });
    });
  });
}

// ---------------------------------------------------------------------------
// binary_cross_entropy / mse_loss: elementwise loss, then the reduction.
// ---------------------------------------------------------------------------

struct PointwiseJob {
  const char* x = nullptr;
  const char* t = nullptr;
  const char* w = nullptr;  // bce only; nullptr: no weight
  const char* g = nullptr;  // backward only
  bool g_scalar = true;
  char* out = nullptr;
  int64_t numel = 0;
  int64_t reduction = kMean;
};

constexpr double kLogClamp = -100.0;  // BCE clamps log terms here, as ATen does
constexpr double kBceEps = 1e-12;

template <class T, bool kBce>
double pointwise_loss(const PointwiseJob& j, int64_t i) {
  const double x = static_cast<double>(reinterpret_cast<const T*>(j.x)[i]);
  const double t = static_cast<double>(reinterpret_cast<const T*>(j.t)[i]);
  if constexpr (kBce) {
    const double w = j.w ? static_cast<double>(reinterpret_cast<const T*>(j.w)[i]) : 1.0;
    const double lx = std::max(std::log(x), kLogClamp), l1x = std::max(std::log1p(-x), kLogClamp);
    return -w * (t * lx + (1.0 - t) * l1x);
  } else {
    return (x - t) * (x - t);
  }
}

template <class T, bool kBce>
void loss_forward(const PointwiseJob& j) {
  T* out = reinterpret_cast<T*>(j.out);
  if (j.reduction == kNone) {
    parallel_range(j.numel, [&](int64_t i) { out[i] = convert<T>(pointwise_loss<T, kBce>(j, i)); });
    return;
  }
  const double s = chunked_sum(j.numel, [&](int64_t i) { return pointwise_loss<T, kBce>(j, i); });
  // mean of an empty input is NaN, as on the CPU
  out[0] = convert<T>(j.reduction == kMean ? s / static_cast<double>(j.numel) : s);
}

template <class T, bool kBce>
void loss_backward(const PointwiseJob& j) {
  const T* x = reinterpret_cast<const T*>(j.x);
  const T* t = reinterpret_cast<const T*>(j.t);
  const T* w = reinterpret_cast<const T*>(j.w);
  const T* g = reinterpret_cast<const T*>(j.g);
  T* out = reinterpret_cast<T*>(j.out);
  const double norm = j.reduction == kMean ? 1.0 / static_cast<double>(j.numel) : 1.0;
  const double g0 = j.g_scalar ? static_cast<double>(g[0]) : 0.0;
  parallel_range(j.numel, [&](int64_t i) {
    const double gv = (j.g_scalar ? g0 : static_cast<double>(g[i])) * norm;
    const double xv = static_cast<double>(x[i]), tv = static_cast<double>(t[i]);
    double r;
    if constexpr (kBce) {
      const double wv = w ? static_cast<double>(w[i]) : 1.0;
      r = gv * wv * (xv - tv) / std::max((1.0 - xv) * xv, kBceEps);
    } else {
      r = 2.0 * (xv - tv) * gv;
    }
    out[i] = convert<T>(r);
  });
}

template <bool kBce>
TFL_Error* loss_forward_kernel(const TFL_Kernel_Args* args, int32_t id, const char* op) {
  // binary_cross_entropy(self, target, weight, reduction) / mse_loss(self, target, reduction)
  return run_kernel(args, id, [&](Launch& L) {
    const TensorArg x = L.input_tensor(0, "self"), t = L.input_tensor(1, "target"), out = L.output(0, "out");
    PointwiseJob j;
    j.reduction = reduction_arg(L, kBce ? 3 : 2, op);
    require_same_dtype(op, out, {&x, &t});
    require_dense(x, op, "self");
    require_dense(t, op, "target");
    require_dense(out, op, "out");
    if (t.numel != x.numel) invalid_argument(op, ": target has ", t.numel, " elements but self has ", x.numel);
    if constexpr (kBce) {
      if (L.has_input(2)) {
        const TensorArg w = L.input_tensor(2, "weight");
        require_same_dtype(op, out, {&w});
        require_dense(w, op, "weight");
        if (w.numel != x.numel) invalid_argument(op, ": weight has ", w.numel, " elements; expected ", x.numel);
        j.w = w.data;
      }
    }
    j.x = x.data;
    j.t = t.data;
    j.out = out.data;
    j.numel = x.numel;
    if (j.reduction == kNone && out.numel != x.numel) invalid_argument(op, ": out has ", out.numel, " elements");
    if (j.reduction == kNone && x.numel == 0) return;
    dispatch_floating(x.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([j] { loss_forward<T, kBce>(j); });
    });
  });
}

template <bool kBce>
TFL_Error* loss_backward_kernel(const TFL_Kernel_Args* args, int32_t id, const char* op) {
  // binary_cross_entropy_backward(grad_output, self, target, weight, reduction)
  // mse_loss_backward(grad_output, self, target, reduction)
  return run_kernel(args, id, [&](Launch& L) {
    const TensorArg g = L.input_tensor(0, "grad_output"), x = L.input_tensor(1, "self"), t = L.input_tensor(2, "target");
    const TensorArg out = L.output(0, "grad_input");
    PointwiseJob j;
    j.reduction = reduction_arg(L, kBce ? 4 : 3, op);
    require_same_dtype(op, out, {&x, &t, &g});
    require_dense(x, op, "self");
    require_dense(t, op, "target");
    require_dense(g, op, "grad_output");
    require_dense(out, op, "grad_input");
    if (t.numel != x.numel || out.numel != x.numel)
      invalid_argument(op, ": self, target and grad_input must have the same number of elements");
    if constexpr (kBce) {
      if (L.has_input(3)) {
        const TensorArg w = L.input_tensor(3, "weight");
        require_same_dtype(op, out, {&w});
        require_dense(w, op, "weight");
        if (w.numel != x.numel) invalid_argument(op, ": weight has ", w.numel, " elements; expected ", x.numel);
        j.w = w.data;
      }
    }
    if (g.numel == x.numel && x.numel != 1) j.g_scalar = false;
    else if (g.numel != 1) invalid_argument(op, ": grad_output has ", g.numel, " elements; expected 1 or ", x.numel);
    j.x = x.data;
    j.t = t.data;
    j.g = g.data;
    j.out = out.data;
    j.numel = x.numel;
    if (x.numel == 0) return;
    dispatch_floating(x.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([j] { loss_backward<T, kBce>(j); });
    });
  });
}

}  // namespace

TFL_Error* kernel_nll_loss_forward(const TFL_Kernel_Args* a) {
  return nll_forward_kernel(a, kNllLossForward, false, "nll_loss_forward");
}
TFL_Error* kernel_nll_loss_backward(const TFL_Kernel_Args* a) {
  return nll_backward_kernel(a, kNllLossBackward, false, "nll_loss_backward");
}
TFL_Error* kernel_nll_loss2d_forward(const TFL_Kernel_Args* a) {
  return nll_forward_kernel(a, kNllLoss2dForward, true, "nll_loss2d_forward");
}
TFL_Error* kernel_nll_loss2d_backward(const TFL_Kernel_Args* a) {
  return nll_backward_kernel(a, kNllLoss2dBackward, true, "nll_loss2d_backward");
}
TFL_Error* kernel_binary_cross_entropy(const TFL_Kernel_Args* a) {
  return loss_forward_kernel<true>(a, kBinaryCrossEntropy, "binary_cross_entropy");
}
TFL_Error* kernel_binary_cross_entropy_backward(const TFL_Kernel_Args* a) {
  return loss_backward_kernel<true>(a, kBinaryCrossEntropyBackward, "binary_cross_entropy_backward");
}
TFL_Error* kernel_mse_loss(const TFL_Kernel_Args* a) { return loss_forward_kernel<false>(a, kMseLoss, "mse_loss"); }
TFL_Error* kernel_mse_loss_backward(const TFL_Kernel_Args* a) {
  return loss_backward_kernel<false>(a, kMseLossBackward, "mse_loss_backward");
}

}  // namespace flemu
