// Arithmetic: add/sub/mul/div (Tensor and Scalar overloads), neg and relu.
// Every dtype; operands of one dtype take a typed loop, mixed dtypes (an
// out= of another dtype, integer division) go through double or int64.
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "support/elementwise_ops.h"
#include "support/launch.h"
#include "support/loop.h"
#include "support/map_loop.h"
#include "support/registry.h"

namespace flemu {
namespace {

enum class Bin { Add, Sub, Mul, Div };

LoopPlan plan_of(const TensorArg& out, const TensorArg& a) {
  const TensorArg* ops[] = {&out, &a};
  const char* names[] = {"out", "self"};
  return make_loop(ops, 2, names);
}

LoopPlan plan_of(const TensorArg& out, const TensorArg& a, const TensorArg& b) {
  const TensorArg* ops[] = {&out, &a, &b};
  const char* names[] = {"out", "self", "other"};
  return make_loop(ops, 3, names);
}

template <class C>
C apply_bin(Bin kind, C a, C b, C alpha) {
  switch (kind) {
    case Bin::Add: return add_wrap(a, mul_wrap(alpha, b));
    case Bin::Sub: return sub_wrap(a, mul_wrap(alpha, b));
    case Bin::Mul: return mul_wrap(a, b);
    case Bin::Div: return a / b;  // only reached with floating C
  }
  return a;
}

// FLEMU_FAULT=fp64_computed_in_fp32: float64 arithmetic done in float32.
template <Bin kind>
void enqueue_fp64_in_fp32(const Launch& L, const LoopPlan& plan, bool scalar_other, const ScalarArg& other,
                          const ScalarArg& alpha) {
  const float al = alpha.as<float>(), s = other.as<float>();
  if (scalar_other)
    L.enqueue([al, s, plan] {
      map_loop<double, double>(plan, [al, s](double a) { return double{apply_bin<float>(kind, float(a), s, al)}; });
    });
  else
    L.enqueue([al, plan] {
      map_loop<double, double, double>(
          plan, [al](double a, double b) { return double{apply_bin<float>(kind, float(a), float(b), al)}; });
    });
}

// The typed path: self, other and out share dtype T.
template <class T, Bin kind>
void enqueue_typed_binary(const Launch& L, const LoopPlan& plan, bool scalar_other, const ScalarArg& other,
                          const ScalarArg& alpha) {
  using C = compute_t<T>;
  const C al = alpha.as<C>();
  if constexpr (std::is_same_v<T, double>) {
    if (L.faulty(Fault::kFp64ComputedInFp32)) {
      enqueue_fp64_in_fp32<kind>(L, plan, scalar_other, other, alpha);
      return;
    }
  }
  if constexpr (kind == Bin::Div && !is_floating_v<T>) {
    invalid_argument("true division needs a floating output dtype");
  } else if (scalar_other) {
    const C s = other.as<C>();
    L.enqueue([al, s, plan] { unary_loop<T>(plan, [al, s](C a) { return apply_bin<C>(kind, a, s, al); }); });
  } else if (kind == Bin::Add && std::is_floating_point_v<C>) {
    // alpha == 1 is the common case; skipping the multiply keeps the loop lean.
    if (al == C(1)) L.enqueue([plan] { binary_loop<T>(plan, [](C a, C b) { return a + b; }); });
    else L.enqueue([al, plan] { binary_loop<T>(plan, [al](C a, C b) { return a + al * b; }); });
  } else {
    L.enqueue([al, plan] { binary_loop<T>(plan, [al](C a, C b) { return apply_bin<C>(kind, a, b, al); }); });
  }
}

template <Bin kind>
void dispatch_typed_binary(const Launch& L, int32_t dtype, const LoopPlan& plan, bool scalar_other,
                           const ScalarArg& other, const ScalarArg& alpha) {
  dispatch_dtype(dtype, [&](auto tag) {
    enqueue_typed_binary<typename decltype(tag)::type, kind>(L, plan, scalar_other, other, alpha);
  });
}

// The mixed path: any dtypes, values carried as double or int64.
void enqueue_mixed_binary(const Launch& L, Bin kind, const LoopPlan& plan, const int32_t* dtypes,
                          bool scalar_other, const ScalarArg& other, const ScalarArg& alpha, bool floating) {
  if (floating) {
    const StoreF64 store = storer_f64(dtypes[0]);
    const LoadF64 la = loader_f64(dtypes[1]);
    const LoadF64 lb = scalar_other ? nullptr : loader_f64(dtypes[2]);
    const double s = other.to_double(), al = alpha.to_double();
    L.enqueue([kind, store, la, lb, s, al, plan] {
      run_loop(plan, [&](char* const* ptr, const int64_t* st, int64_t n) {
        char* o = ptr[0];
        const char* a = ptr[1];
        const char* b = lb ? ptr[2] : nullptr;
        for (int64_t i = 0; i < n; ++i, o += st[0], a += st[1]) {
          const double bv = lb ? lb(b) : s;
          if (lb) b += st[2];
          store(o, apply_bin<double>(kind, la(a), bv, al));
        }
      });
    });
  } else {
    const StoreI64 store = storer_i64(dtypes[0]);
    const LoadI64 la = loader_i64(dtypes[1]);
    const LoadI64 lb = scalar_other ? nullptr : loader_i64(dtypes[2]);
    const int64_t s = other.to_int(), al = alpha.to_int();
    L.enqueue([kind, store, la, lb, s, al, plan] {
      run_loop(plan, [&](char* const* ptr, const int64_t* st, int64_t n) {
        char* o = ptr[0];
        const char* a = ptr[1];
        const char* b = lb ? ptr[2] : nullptr;
        for (int64_t i = 0; i < n; ++i, o += st[0], a += st[1]) {
          const int64_t bv = lb ? lb(b) : s;
          if (lb) b += st[2];
          store(o, apply_bin<int64_t>(kind, la(a), bv, al));
        }
      });
    });
  }
}

void launch_binary(const Launch& L, Bin kind, const TensorArg& out, const TensorArg& self, const TensorArg* other,
                   const ScalarArg& other_scalar, const ScalarArg& alpha) {
  const bool self_float = dtype_is_floating(self.dtype);
  const bool other_float = other ? dtype_is_floating(other->dtype) : other_scalar.is_floating();
  if (kind == Bin::Sub && (self.dtype == TFL_DTYPE_BOOL || (other && other->dtype == TFL_DTYPE_BOOL)))
    invalid_argument("subtraction with a bool tensor is not supported; use logical_xor or ~ instead");
  if ((kind == Bin::Add || kind == Bin::Sub) && !self_float && !other_float && alpha.is_floating())
    invalid_argument("alpha must be an integer for integral inputs, got ", alpha.d);
  const bool floating = kind == Bin::Div || self_float || other_float || alpha.is_floating();
  const bool typed = self.dtype == out.dtype && (!other || other->dtype == out.dtype) &&
                     floating == dtype_is_floating(out.dtype);
  const LoopPlan plan = other ? plan_of(out, self, *other) : plan_of(out, self);
  if (plan.numel == 0) return;
  if (!typed) {
    const int32_t dtypes[] = {out.dtype, self.dtype, other ? other->dtype : out.dtype};
    enqueue_mixed_binary(L, kind, plan, dtypes, other == nullptr, other_scalar, alpha, floating);
    return;
  }
  switch (kind) {
    case Bin::Add: dispatch_typed_binary<Bin::Add>(L, out.dtype, plan, !other, other_scalar, alpha); break;
    case Bin::Sub: dispatch_typed_binary<Bin::Sub>(L, out.dtype, plan, !other, other_scalar, alpha); break;
    case Bin::Mul: dispatch_typed_binary<Bin::Mul>(L, out.dtype, plan, !other, other_scalar, alpha); break;
    case Bin::Div: dispatch_typed_binary<Bin::Div>(L, out.dtype, plan, !other, other_scalar, alpha); break;
  }
}

ScalarArg int_scalar(int64_t v) {
  ScalarArg s;
  s.i = v;
  return s;
}

// FLEMU_FAULT=add_inplace_aliasing: the output doubles as the accumulator.
// Pass 1 stores alpha * other into it from the last element to the first,
// pass 2 adds self from the first to the last. With a separate output that
// is exact; when the output is self, pass 1 has overwritten self already.
void enqueue_add_accumulating_in_output(const Launch& L, const TensorArg& out, const TensorArg& self,
                                        const TensorArg& other, const ScalarArg& alpha) {
  const LoopPlan plan = plan_of(out, self, other);
  if (plan.numel == 0) return;
  const bool floating = dtype_is_floating(out.dtype);
  const int32_t od = out.dtype, sd = self.dtype, bd = other.dtype;
  const double al = alpha.to_double();
  const int64_t ali = alpha.to_int();
  L.enqueue([floating, od, sd, bd, al, ali, plan] {
    // Runs within one task: the walk order below is the bug, not the thread pool's.
    std::vector<std::pair<char*, const char*>> pass1;
    for_each_run(plan, 0, plan.numel, [&](char* const* ptr, const int64_t* st, int64_t n) {
      for (int64_t i = 0; i < n; ++i) pass1.emplace_back(ptr[0] + i * st[0], ptr[2] + i * st[2]);
    });
    for (auto it = pass1.rbegin(); it != pass1.rend(); ++it) {
      if (floating) storer_f64(od)(it->first, al * loader_f64(bd)(it->second));
      else storer_i64(od)(it->first, mul_wrap<int64_t>(ali, loader_i64(bd)(it->second)));
    }
    for_each_run(plan, 0, plan.numel, [&](char* const* ptr, const int64_t* st, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        char* o = ptr[0] + i * st[0];
        const char* a = ptr[1] + i * st[1];
        if (floating) storer_f64(od)(o, loader_f64(od)(o) + loader_f64(sd)(a));
        else storer_i64(od)(o, add_wrap<int64_t>(loader_i64(od)(o), loader_i64(sd)(a)));
      }
    });
  });
}

TFL_Error* binary_tensor(const TFL_Kernel_Args* args, int32_t id, Bin kind) {
  return run_kernel(args, id, [&](Launch& L) {
    const TensorArg out = L.output(0, "out");
    const bool has_alpha = kind == Bin::Add || kind == Bin::Sub;
    ScalarArg alpha = has_alpha ? L.scalar_or(2, 1, "alpha") : int_scalar(1);
    if (L.faulty(Fault::kAddIgnoresAlpha)) alpha = int_scalar(1);
    if (L.faulty(Fault::kMulOutIgnored) && L.variant() == TFL_VARIANT_OUT) return;
    ScalarArg unused;
    if (L.faulty(Fault::kAddInplaceAliasing) && L.variant() == TFL_VARIANT_INPLACE && !L.host_scalar(1, &unused) &&
        !L.host_scalar(0, &unused)) {
      enqueue_add_accumulating_in_output(L, out, L.input_tensor(0, "self"), L.input_tensor(1, "other"), alpha);
      return;
    }
    // Host scalars (TFL_KERNEL_HOST_SCALARS) take the Scalar path with their
    // exact value, as PyTorch computes `x * 0.1` in the op's compute type.
    ScalarArg value;
    if (L.host_scalar(1, &value)) {
      launch_binary(L, kind, out, L.input_tensor(0, "self"), nullptr, value, alpha);
      return;
    }
    if (L.host_scalar(0, &value)) {
      const bool commutes = kind == Bin::Mul || (kind == Bin::Add && alpha.to_double() == 1.0);
      if (!commutes) fail(TFL_ERR_UNIMPLEMENTED, "a host scalar as self of a non-commuting op");
      launch_binary(L, kind, out, L.input_tensor(1, "other"), nullptr, value, alpha);
      return;
    }
    const TensorArg self = L.input_tensor(0, "self");
    const TensorArg other = L.input_tensor(1, "other");
    launch_binary(L, kind, out, self, &other, int_scalar(0), alpha);
  });
}

TFL_Error* binary_scalar(const TFL_Kernel_Args* args, int32_t id, Bin kind) {
  return run_kernel(args, id, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self");
    const ScalarArg other = L.scalar(1, "other");
    const TensorArg out = L.output(0, "out");
    const bool has_alpha = kind == Bin::Add || kind == Bin::Sub;
    const ScalarArg alpha = has_alpha ? L.scalar_or(2, 1, "alpha") : int_scalar(1);
    launch_binary(L, kind, out, self, nullptr, other, alpha);
  });
}

// ---------------------------------------------------------------------------
// neg / relu
// ---------------------------------------------------------------------------

enum class Un { Neg, Relu };

template <class C>
C apply_un(Un kind, C a) {
  if (kind == Un::Neg) return sub_wrap(C(0), a);
  if constexpr (std::is_integral_v<C>) return a > 0 ? a : C(0);
  else return (a > C(0) || a != a) ? a : C(0);  // NaN propagates
}

// FLEMU_FAULT=oob_write: relu's loop runs one element too far, storing a
// copy of the last result just past the last byte of its output.
void enqueue_relu_one_past_the_end(const Launch& L, const LoopPlan& plan, const TensorArg& out) {
  int64_t last = 0;
  for (int32_t d = 0; d < out.ndim; ++d) last += (out.sizes[d] - 1) * out.strides[d];
  char* const last_elem = out.data + last * out.itemsize;
  const size_t itemsize = static_cast<size_t>(out.itemsize);
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    L.enqueue([last_elem, itemsize, plan] {
      unary_loop<T>(plan, [](C a) { return apply_un<C>(Un::Relu, a); });
      std::memcpy(last_elem + itemsize, last_elem, itemsize);
    });
  });
}

TFL_Error* unary(const TFL_Kernel_Args* args, int32_t id, Un kind) {
  return run_kernel(args, id, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self");
    const TensorArg out = L.output(0, "out");
    if (self.dtype == TFL_DTYPE_BOOL)
      invalid_argument(kind == Un::Neg ? "negation of a bool tensor is not supported; use ~ or logical_not"
                                       : "relu of a bool tensor is not supported");
    const LoopPlan plan = plan_of(out, self);
    if (plan.numel == 0) return;
    if (L.faulty(Fault::kOobWrite) && self.dtype == out.dtype) {
      enqueue_relu_one_past_the_end(L, plan, out);
      return;
    }
    if (self.dtype == out.dtype) {
      dispatch_dtype(out.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        using C = compute_t<T>;
        if constexpr (std::is_same_v<T, double>) {
          if (L.faulty(Fault::kFp64ComputedInFp32)) {
            L.enqueue([kind, plan] {
              map_loop<double, double>(plan, [kind](double a) { return double{apply_un<float>(kind, float(a))}; });
            });
            return;
          }
        }
        if (kind == Un::Neg) L.enqueue([plan] { unary_loop<T>(plan, [](C a) { return apply_un<C>(Un::Neg, a); }); });
        else L.enqueue([plan] { unary_loop<T>(plan, [](C a) { return apply_un<C>(Un::Relu, a); }); });
      });
      return;
    }
    // out= with another dtype: compute in the input's kind, then cast.
    const bool floating = dtype_is_floating(self.dtype);
    const int32_t od = out.dtype, id_ = self.dtype;
    L.enqueue([kind, floating, od, id_, plan] {
      const StoreF64 sf = floating ? storer_f64(od) : nullptr;
      const LoadF64 lf = floating ? loader_f64(id_) : nullptr;
      const StoreI64 si = floating ? nullptr : storer_i64(od);
      const LoadI64 li = floating ? nullptr : loader_i64(id_);
      run_loop(plan, [&](char* const* ptr, const int64_t* st, int64_t n) {
        char* o = ptr[0];
        const char* a = ptr[1];
        for (int64_t i = 0; i < n; ++i, o += st[0], a += st[1]) {
          if (floating) sf(o, apply_un<double>(kind, lf(a)));
          else si(o, apply_un<int64_t>(kind, li(a)));
        }
      });
    });
  });
}

}  // namespace

TFL_Error* kernel_add_tensor(const TFL_Kernel_Args* a) { return binary_tensor(a, kAddTensor, Bin::Add); }
TFL_Error* kernel_sub_tensor(const TFL_Kernel_Args* a) { return binary_tensor(a, kSubTensor, Bin::Sub); }
TFL_Error* kernel_mul_tensor(const TFL_Kernel_Args* a) { return binary_tensor(a, kMulTensor, Bin::Mul); }
TFL_Error* kernel_div_tensor(const TFL_Kernel_Args* a) { return binary_tensor(a, kDivTensor, Bin::Div); }
TFL_Error* kernel_add_scalar(const TFL_Kernel_Args* a) { return binary_scalar(a, kAddScalar, Bin::Add); }
TFL_Error* kernel_sub_scalar(const TFL_Kernel_Args* a) { return binary_scalar(a, kSubScalar, Bin::Sub); }
TFL_Error* kernel_mul_scalar(const TFL_Kernel_Args* a) { return binary_scalar(a, kMulScalar, Bin::Mul); }
TFL_Error* kernel_div_scalar(const TFL_Kernel_Args* a) { return binary_scalar(a, kDivScalar, Bin::Div); }
TFL_Error* kernel_neg(const TFL_Kernel_Args* a) { return unary(a, kNeg, Un::Neg); }
TFL_Error* kernel_relu(const TFL_Kernel_Args* a) { return unary(a, kRelu, Un::Relu); }

}  // namespace flemu
