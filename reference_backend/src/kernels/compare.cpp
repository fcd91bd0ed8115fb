// Comparisons (eq/ne/lt/le/gt/ge, Tensor and Scalar), logical and bitwise
// ops, isnan/isinf/isneginf/isposinf, where.self and masked_fill: the kernels
// that produce or consume bool masks.
#include <cmath>
#include <limits>

#include "support/elementwise_launch.h"
#include "support/registry.h"

namespace flemu {
namespace {

enum class Cmp { Eq, Ne, Lt, Le, Gt, Ge };

template <class C>
inline bool compare(Cmp k, C a, C b) {
  switch (k) {
    case Cmp::Eq: return a == b;
    case Cmp::Ne: return a != b;
    case Cmp::Lt: return a < b;
    case Cmp::Le: return a <= b;
    case Cmp::Gt: return a > b;
    case Cmp::Ge: return a >= b;
  }
  return false;
}

template <Cmp k>
TFL_Error* compare_tensor(const TFL_Kernel_Args* args, int32_t id) {
  return run_kernel(args, id, [&](Launch& L) {
    const TensorArg a = L.input_tensor(0, "self"), b = L.input_tensor(1, "other"), out = L.output(0, "out");
    if (a.dtype != b.dtype) decline("comparison of ", dtype_name(a.dtype), " with ", dtype_name(b.dtype));
    if (out.dtype != TFL_DTYPE_BOOL) decline("comparison into a ", dtype_name(out.dtype), " output");
    const LoopPlan plan = plan_over({&out, &a, &b});
    if (plan.numel == 0) return;
    dispatch_dtype(a.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      L.enqueue([plan] { map_loop<bool, T, T>(plan, [](C x, C y) { return compare<C>(k, x, y); }); });
    });
  });
}

template <Cmp k>
TFL_Error* compare_scalar(const TFL_Kernel_Args* args, int32_t id) {
  return run_kernel(args, id, [&](Launch& L) {
    const TensorArg a = L.input_tensor(0, "self"), out = L.output(0, "out");
    const ScalarArg s = L.scalar(1, "other");
    if (out.dtype != TFL_DTYPE_BOOL) decline("comparison into a ", dtype_name(out.dtype), " output");
    const LoopPlan plan = plan_over({&out, &a});
    if (plan.numel == 0) return;
    dispatch_dtype(a.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      if (std::is_integral_v<C> && s.is_floating()) {
        // An integral tensor against a float scalar compares as floating point.
        const double v = s.d;
        L.enqueue([v, plan] {
          map_loop<bool, T>(plan, [v](C x) { return compare<double>(k, static_cast<double>(x), v); });
        });
      } else {
        const C v = s.as<C>();
        L.enqueue([v, plan] { map_loop<bool, T>(plan, [v](C x) { return compare<C>(k, x, v); }); });
      }
    });
  });
}

enum class Logic { And, Or, Xor };

template <Logic k>
TFL_Error* logical_binary(const TFL_Kernel_Args* args, int32_t id) {
  return run_kernel(args, id, [&](Launch& L) {
    const TensorArg a = L.input_tensor(0, "self"), b = L.input_tensor(1, "other"), out = L.output(0, "out");
    if (a.dtype != b.dtype) decline("logical op on ", dtype_name(a.dtype), " and ", dtype_name(b.dtype));
    if (out.dtype != TFL_DTYPE_BOOL) decline("logical op into a ", dtype_name(out.dtype), " output");
    const LoopPlan plan = plan_over({&out, &a, &b});
    if (plan.numel == 0) return;
    dispatch_dtype(a.dtype, [&](auto in_tag) {
      using T = typename decltype(in_tag)::type;
      using C = compute_t<T>;
      L.enqueue([plan] {
        map_loop<bool, T, T>(plan, [](C x, C y) {
          const bool p = x != C(0), q = y != C(0);
          return k == Logic::And ? (p && q) : k == Logic::Or ? (p || q) : (p != q);
        });
      });
    });
  });
}

// out (bool) = pred(self) for self of any dtype. An out= tensor of another
// dtype arrives as a bool temporary the host copies back.
template <class Pred>
void launch_predicate(const Launch& L, Pred pred) {
  const TensorArg a = L.input_tensor(0, "self"), out = L.output(0, "out");
  if (out.dtype != TFL_DTYPE_BOOL) decline("a predicate into a ", dtype_name(out.dtype), " output");
  const LoopPlan plan = plan_over({&out, &a});
  if (plan.numel == 0) return;
  dispatch_dtype(a.dtype, [&](auto in_tag) {
    using T = typename decltype(in_tag)::type;
    L.enqueue([pred, plan] { map_loop<bool, T>(plan, pred); });
  });
}

template <bool kOr>
TFL_Error* bitwise_binary(const TFL_Kernel_Args* args, int32_t id) {
  return run_kernel(args, id, [&](Launch& L) {
    const TensorArg a = L.input_tensor(0, "self"), b = L.input_tensor(1, "other"), out = L.output(0, "out");
    require_same_dtype(kOr ? "bitwise_or" : "bitwise_and", out, {&a, &b});
    if (dtype_is_floating(out.dtype)) invalid_argument("bitwise ops need integral or bool tensors, got ", dtype_name(out.dtype));
    const LoopPlan plan = plan_over({&out, &a, &b});
    if (plan.numel == 0) return;
    dispatch_dtype(out.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      if constexpr (std::is_integral_v<C>)
        L.enqueue([plan] { map_loop<T, T, T>(plan, [](C x, C y) { return kOr ? (x | y) : (x & y); }); });
    });
  });
}

}  // namespace

TFL_Error* kernel_eq_tensor(const TFL_Kernel_Args* a) { return compare_tensor<Cmp::Eq>(a, kEqTensor); }
TFL_Error* kernel_ne_tensor(const TFL_Kernel_Args* a) { return compare_tensor<Cmp::Ne>(a, kNeTensor); }
TFL_Error* kernel_lt_tensor(const TFL_Kernel_Args* a) { return compare_tensor<Cmp::Lt>(a, kLtTensor); }
TFL_Error* kernel_le_tensor(const TFL_Kernel_Args* a) { return compare_tensor<Cmp::Le>(a, kLeTensor); }
TFL_Error* kernel_gt_tensor(const TFL_Kernel_Args* a) { return compare_tensor<Cmp::Gt>(a, kGtTensor); }
TFL_Error* kernel_ge_tensor(const TFL_Kernel_Args* a) { return compare_tensor<Cmp::Ge>(a, kGeTensor); }
TFL_Error* kernel_eq_scalar(const TFL_Kernel_Args* a) { return compare_scalar<Cmp::Eq>(a, kEqScalar); }
TFL_Error* kernel_ne_scalar(const TFL_Kernel_Args* a) { return compare_scalar<Cmp::Ne>(a, kNeScalar); }
TFL_Error* kernel_lt_scalar(const TFL_Kernel_Args* a) { return compare_scalar<Cmp::Lt>(a, kLtScalar); }
TFL_Error* kernel_le_scalar(const TFL_Kernel_Args* a) { return compare_scalar<Cmp::Le>(a, kLeScalar); }
TFL_Error* kernel_gt_scalar(const TFL_Kernel_Args* a) { return compare_scalar<Cmp::Gt>(a, kGtScalar); }
TFL_Error* kernel_ge_scalar(const TFL_Kernel_Args* a) { return compare_scalar<Cmp::Ge>(a, kGeScalar); }
TFL_Error* kernel_logical_and(const TFL_Kernel_Args* a) { return logical_binary<Logic::And>(a, kLogicalAnd); }
TFL_Error* kernel_logical_or(const TFL_Kernel_Args* a) { return logical_binary<Logic::Or>(a, kLogicalOr); }
TFL_Error* kernel_logical_xor(const TFL_Kernel_Args* a) { return logical_binary<Logic::Xor>(a, kLogicalXor); }
TFL_Error* kernel_bitwise_and(const TFL_Kernel_Args* a) { return bitwise_binary<false>(a, kBitwiseAndTensor); }
TFL_Error* kernel_bitwise_or(const TFL_Kernel_Args* a) { return bitwise_binary<true>(a, kBitwiseOrTensor); }

TFL_Error* kernel_logical_not(const TFL_Kernel_Args* args) {
  return run_kernel(args, kLogicalNot, [&](Launch& L) {
    launch_predicate(L, [](auto x) { return x == decltype(x)(0); });
  });
}

TFL_Error* kernel_bitwise_not(const TFL_Kernel_Args* args) {
  return run_kernel(args, kBitwiseNot, [&](Launch& L) {
    const TensorArg a = L.input_tensor(0, "self"), out = L.output(0, "out");
    require_same_dtype("bitwise_not", out, {&a});
    if (dtype_is_floating(a.dtype)) invalid_argument("bitwise_not needs an integral or bool tensor, got ", dtype_name(a.dtype));
    const LoopPlan plan = plan_over({&out, &a});
    if (plan.numel == 0) return;
    dispatch_dtype(a.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      if constexpr (std::is_same_v<T, bool>) L.enqueue([plan] { map_loop<T, T>(plan, [](C x) { return x == 0; }); });
      else if constexpr (std::is_integral_v<C>) L.enqueue([plan] { map_loop<T, T>(plan, [](C x) { return ~x; }); });
    });
  });
}

TFL_Error* kernel_isnan(const TFL_Kernel_Args* args) {
  return run_kernel(args, kIsnan, [&](Launch& L) { launch_predicate(L, [](auto x) { return x != x; }); });
}

TFL_Error* kernel_isinf(const TFL_Kernel_Args* args) {
  return run_kernel(args, kIsinf, [&](Launch& L) {
    launch_predicate(L, [](auto x) {
      if constexpr (std::is_floating_point_v<decltype(x)>) return std::isinf(x);
      else return false;
    });
  });
}

TFL_Error* kernel_isneginf(const TFL_Kernel_Args* args) {
  return run_kernel(args, kIsneginf, [&](Launch& L) {
    launch_predicate(L, [](auto x) {
      if constexpr (std::is_floating_point_v<decltype(x)>) return std::isinf(x) && x < 0;
      else return false;
    });
  });
}

TFL_Error* kernel_isposinf(const TFL_Kernel_Args* args) {
  return run_kernel(args, kIsposinf, [&](Launch& L) {
    launch_predicate(L, [](auto x) {
      if constexpr (std::is_floating_point_v<decltype(x)>) return std::isinf(x) && x > 0;
      else return false;
    });
  });
}

// ---------------------------------------------------------------------------
// where / masked_fill
// ---------------------------------------------------------------------------

namespace {

void require_mask(const TensorArg& m, const char* what) {
  if (m.dtype != TFL_DTYPE_BOOL && m.dtype != TFL_DTYPE_UINT8)
    invalid_argument(what, " must be a bool tensor, got ", dtype_name(m.dtype));
}

}  // namespace

TFL_Error* kernel_where_self(const TFL_Kernel_Args* args) {
  // where.self(condition, self, other); self and other broadcast to out.
  return run_kernel(args, kWhereSelf, [&](Launch& L) {
    const TensorArg cond = L.input_tensor(0, "condition"), a = L.input_tensor(1, "self"),
                    b = L.input_tensor(2, "other"), out = L.output(0, "out");
    require_mask(cond, "condition");
    const LoopPlan plan = plan_over({&out, &cond, &a, &b});
    if (plan.numel == 0) return;
    if (a.dtype == out.dtype && b.dtype == out.dtype) {
      dispatch_dtype(out.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        // Values are copied bit for bit (no compute-type round trip).
        L.enqueue([plan] {
          run_loop(plan, [](char* const* p, const int64_t* st, int64_t n) {
            for (int64_t i = 0; i < n; ++i) {
              const bool c = *reinterpret_cast<const uint8_t*>(p[1] + i * st[1]) != 0;
              *reinterpret_cast<T*>(p[0] + i * st[0]) = *reinterpret_cast<const T*>(c ? p[2] + i * st[2] : p[3] + i * st[3]);
            }
          });
        });
      });
      return;
    }
    // Mixed dtypes: values travel through double or int64.
    const bool floating = dtype_is_floating(out.dtype);
    const int32_t od = out.dtype, ad = a.dtype, bd = b.dtype;
    L.enqueue([floating, od, ad, bd, plan] {
      run_loop(plan, [&](char* const* p, const int64_t* st, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          const bool c = *reinterpret_cast<const uint8_t*>(p[1] + i * st[1]) != 0;
          const char* src = c ? p[2] + i * st[2] : p[3] + i * st[3];
          const int32_t sd = c ? ad : bd;
          if (floating) storer_f64(od)(p[0] + i * st[0], loader_f64(sd)(src));
          else storer_i64(od)(p[0] + i * st[0], loader_i64(sd)(src));
        }
      });
    });
  });
}

namespace {

// self (and out, the same memory in place) with value where mask is set.
void launch_masked_fill(const Launch& L, bool value_is_tensor) {
  const TensorArg self = L.input_tensor(0, "self"), mask = L.input_tensor(1, "mask"), out = L.output(0, "out");
  require_mask(mask, "mask");
  require_same_dtype("masked_fill", out, {&self});
  const bool floating = dtype_is_floating(out.dtype);
  ScalarArg value;
  const char* value_ptr = nullptr;
  int32_t value_dtype = 0;
  if (value_is_tensor) {
    // 0-dim (the host's meta check says so); it may arrive broadcast with
    // zero strides. Read on the stream: earlier work may still be writing it.
    const TensorArg v = L.input_tensor(2, "value");
    value_ptr = v.data;
    value_dtype = v.dtype;
  } else {
    value = L.scalar(2, "value");
  }
  const LoopPlan plan = plan_over({&out, &self, &mask});
  if (plan.numel == 0) return;
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    L.enqueue([value, value_ptr, value_dtype, floating, plan] {
      T v;
      if (value_ptr == nullptr) {
        v = value.tag == TFL_VALUE_DOUBLE ? convert<T>(value.d) : convert<T>(value.i);
        if (value.tag == TFL_VALUE_BOOL) v = convert<T>(value.i != 0);
      } else if (floating) {
        v = convert<T>(loader_f64(value_dtype)(value_ptr));
      } else {
        v = convert<T>(loader_i64(value_dtype)(value_ptr));
      }
      run_loop(plan, [v](char* const* p, const int64_t* st, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          const bool m = *reinterpret_cast<const uint8_t*>(p[2] + i * st[2]) != 0;
          *reinterpret_cast<T*>(p[0] + i * st[0]) = m ? v : *reinterpret_cast<const T*>(p[1] + i * st[1]);
        }
      });
    });
  });
}

}  // namespace

TFL_Error* kernel_masked_fill_scalar(const TFL_Kernel_Args* args) {
  return run_kernel(args, kMaskedFillScalar, [&](Launch& L) { launch_masked_fill(L, false); });
}

TFL_Error* kernel_masked_fill_tensor(const TFL_Kernel_Args* args) {
  return run_kernel(args, kMaskedFillTensor, [&](Launch& L) { launch_masked_fill(L, true); });
}

}  // namespace flemu
