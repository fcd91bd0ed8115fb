// Elementwise math: exp/log/log1p/sqrt/rsqrt/reciprocal/sin/cos/erf,
// exp2/expm1/log2/log10/tan/atan/sinh/cosh/asin/acos/atanh/asinh/acosh,
// logit and its backward, floor/ceil/trunc/round/frac/sign,
// pow (three overloads), clamp (scalar and tensor bounds, clamp_min/clamp_max
// with a scalar or a tensor bound), minimum/maximum,
// abs for every dtype, and the optimizer helpers addcmul/addcdiv/lerp.
// fp16/bf16 compute in float32.
#include <cmath>
#include <limits>

#include "support/double_math.h"
#include "support/elementwise_launch.h"
#include "support/elementwise_ops.h"
#include "support/fast_math.h"
#include "support/registry.h"

namespace flemu {
namespace {

template <class C>
C maximum_of(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (a != a) return a;  // NaN propagates from either side
    if (b != b) return b;
  }
  return a > b ? a : b;
}

template <class C>
C minimum_of(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a < b ? a : b;
}

// pow with the exponent's common special cases made exact and fast.
template <class C>
C pow_of(C base, C e) {
  if (e == C(2)) return base * base;
  if (e == C(1)) return base;
  if (e == C(0.5)) return std::sqrt(base);
  if (e == C(-1)) return C(1) / base;
  if (e == C(3)) return base * base * base;
  return std::pow(base, e);
}

// `grain`: kTranscendentalGrain for a function that costs about a nanosecond a value.
template <class F>
TFL_Error* unary(const TFL_Kernel_Args* args, int32_t id, const char* op, F f, int64_t grain = kParallelGrain) {
  return run_kernel(args, id, [&](Launch& L) { launch_float_unary(L, op, f, grain); });
}

// clamp(self, min, max) where either bound may be absent; a NaN bound makes NaN.
template <class C>
C clamp_of(C x, bool has_lo, C lo, bool has_hi, C hi) {
  if constexpr (std::is_floating_point_v<C>) {
    if (x != x) return x;
    if (has_lo && lo != lo) return lo;
    if (has_hi && hi != hi) return hi;
  }
  if (has_lo && x < lo) x = lo;
  if (has_hi && x > hi) x = hi;
  return x;
}

void launch_clamp(const Launch& L, bool has_lo, const ScalarArg& lo, bool has_hi, const ScalarArg& hi) {
  const TensorArg self = L.input_tensor(0, "self"), out = L.output(0, "out");
  require_same_dtype("clamp", out, {&self});
  if (self.dtype == TFL_DTYPE_BOOL) decline("clamp of a bool tensor");
  const LoopPlan plan = plan_over({&out, &self});
  if (plan.numel == 0) return;
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const C l = has_lo ? lo.as<C>() : C(0), h = has_hi ? hi.as<C>() : C(0);
    L.enqueue([has_lo, l, has_hi, h, plan] {
      map_loop<T, T>(plan, [=](C x) { return clamp_of<C>(x, has_lo, l, has_hi, h); });
    });
  });
}

// FLEMU_FAULT=exp_low_precision: the kind of fast exp a vendor library
// ships, 2^(x log2 e) from a cubic on [-1/2, 1/2] (relative error up to
// 7.5e-5) scaled by a power of two.
float fast_exp(float x) {
  if (x != x) return x;
  const float t = std::fmin(std::fmax(x * 1.44269504f, -160.0f), 160.0f);
  const float n = std::nearbyint(t), f = t - n;
  const float p = 0.9999281f + f * (0.69326097f + f * (0.24261034f + f * 0.05517134f));
  return std::ldexp(p, static_cast<int>(n));
}

// sin, cos or tan: float32 runs with unit strides through trig_array (vector
// form, libm beyond its range), everything else one value at a time with the
// same bits (trig_of).
template <Trig kFn>
void launch_trig(const Launch& L, const char* op) {
  launch_float_unary_array(
      L, op,
      [](const float* in, float* out, int64_t n) __attribute__((always_inline)) { trig_array<kFn>(in, out, n); },
      [](auto x) __attribute__((always_inline)) { return trig_of<kFn>(x); }, kTranscendentalGrain);
}

// log or log2: float32 runs with unit strides through log_array (blocks of
// positive normal values without the special-value selects), the same bits.
template <bool kLog2>
void launch_log(const Launch& L, const char* op) {
  launch_float_unary_array(
      L, op,
      [](const float* in, float* out, int64_t n) __attribute__((always_inline)) { log_array<kLog2>(in, out, n); },
      [](auto x) __attribute__((always_inline)) { return kLog2 ? log2_of(x) : log_of(x); }, kTranscendentalGrain);
}

}  // namespace

TFL_Error* kernel_exp(const TFL_Kernel_Args* a) {
  return run_kernel(a, kExp, [&](Launch& L) {
    if (L.faulty(Fault::kExpLowPrecision) && L.input_tensor(0, "self").dtype == TFL_DTYPE_FLOAT32) {
      launch_float_unary(L, "exp", [](auto x) {
        if constexpr (std::is_same_v<decltype(x), float>) return fast_exp(x);
        else return std::exp(x);
      });
      return;
    }
    launch_float_unary_array(
        L, "exp", [](const float* in, float* out, int64_t n) __attribute__((always_inline)) { exp_array(in, out, n); },
        [](auto x) __attribute__((always_inline)) { return exp_of(x); }, kTranscendentalGrain);
  });
}
TFL_Error* kernel_sqrt(const TFL_Kernel_Args* a) {
  return unary(a, kSqrt, "sqrt", [](auto x) { return std::sqrt(x); });
}
TFL_Error* kernel_rsqrt(const TFL_Kernel_Args* a) {
  return unary(a, kRsqrt, "rsqrt", [](auto x) { return decltype(x)(1) / std::sqrt(x); });
}
TFL_Error* kernel_reciprocal(const TFL_Kernel_Args* a) {
  return unary(a, kReciprocal, "reciprocal", [](auto x) { return decltype(x)(1) / x; });
}
TFL_Error* kernel_sin(const TFL_Kernel_Args* a) {
  return run_kernel(a, kSin, [&](Launch& L) { launch_trig<Trig::Sin>(L, "sin"); });
}
TFL_Error* kernel_cos(const TFL_Kernel_Args* a) {
  return run_kernel(a, kCos, [&](Launch& L) { launch_trig<Trig::Cos>(L, "cos"); });
}
TFL_Error* kernel_tan(const TFL_Kernel_Args* a) {
  return run_kernel(a, kTan, [&](Launch& L) { launch_trig<Trig::Tan>(L, "tan"); });
}
TFL_Error* kernel_log(const TFL_Kernel_Args* a) {
  return run_kernel(a, kLog, [&](Launch& L) { launch_log<false>(L, "log"); });
}
TFL_Error* kernel_log2(const TFL_Kernel_Args* a) {
  return run_kernel(a, kLog2, [&](Launch& L) { launch_log<true>(L, "log2"); });
}

// The functions with a compute-type form name_of (support/fast_math.h and
// support/double_math.h: float32 forms without libm calls, libm for double).
#define FLEMU_MATH_KERNEL(name, id)                                                                  \
  TFL_Error* kernel_##name(const TFL_Kernel_Args* a) {                                               \
    return unary(a, id, #name, [](auto x) __attribute__((always_inline)) { return name##_of(x); },  \
                 kTranscendentalGrain);                                                              \
  }
FLEMU_MATH_KERNEL(exp2, kExp2)
FLEMU_MATH_KERNEL(log1p, kLog1p)
FLEMU_MATH_KERNEL(erf, kErf)
FLEMU_MATH_KERNEL(atan, kAtan)
FLEMU_MATH_KERNEL(asin, kAsin)
FLEMU_MATH_KERNEL(acos, kAcos)
FLEMU_MATH_KERNEL(expm1, kExpm1)
FLEMU_MATH_KERNEL(log10, kLog10)
FLEMU_MATH_KERNEL(sinh, kSinh)
FLEMU_MATH_KERNEL(cosh, kCosh)
FLEMU_MATH_KERNEL(atanh, kAtanh)
FLEMU_MATH_KERNEL(asinh, kAsinh)
FLEMU_MATH_KERNEL(acosh, kAcosh)
#undef FLEMU_MATH_KERNEL

namespace {

// logit(self, eps) and logit_backward(grad_output, self, eps): the interval
// outside which logit clamps and its gradient is 0 (`outside`): with eps,
// [eps, 1 - eps] computed in the tensor's own dtype, as PyTorch's are (in
// bfloat16, 1 - 1e-6 is 1); without, logit clamps nothing and its gradient
// is NaN outside [0, 1]. Plain values, no flag, so the loops vectorize.
template <class T>
struct LogitBounds {
  compute_t<T> lo, hi, outside;
};

template <class T>
LogitBounds<T> logit_bounds(const Launch& L, size_t i, bool forward) {
  using C = compute_t<T>;
  if (!L.has_input(i)) {
    const C inf = std::numeric_limits<C>::infinity();
    return forward ? LogitBounds<T>{-inf, inf, 0} : LogitBounds<T>{0, 1, std::numeric_limits<C>::quiet_NaN()};
  }
  const T lo = static_cast<T>(L.scalar(i, "eps").to_double());
  return {static_cast<C>(lo), static_cast<C>(static_cast<T>(T(1) - lo)), 0};
}

}  // namespace

TFL_Error* kernel_logit(const TFL_Kernel_Args* args) {
  return run_kernel(args, kLogit, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self"), out = L.output(0, "out");
    require_same_dtype("logit", out, {&self});
    const LoopPlan plan = plan_over({&out, &self});
    if (plan.numel == 0) return;
    dispatch_floating(out.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      const LogitBounds<T> b = logit_bounds<T>(L, 1, true);
      const C lo = b.lo, hi = b.hi;
      L.enqueue([lo, hi, plan] {
        map_loop<T, T>(
            plan, [lo, hi](C x) __attribute__((always_inline)) { return logit_of(x < lo ? lo : (x > hi ? hi : x)); },
            kTranscendentalGrain);
      });
    });
  });
}

TFL_Error* kernel_logit_backward(const TFL_Kernel_Args* args) {
  // grad_output / (x (1 - x)) inside the bounds.
  return run_kernel(args, kLogitBackward, [&](Launch& L) {
    const TensorArg g = L.input_tensor(0, "grad_output"), x = L.input_tensor(1, "self"), out = L.output(0, "out");
    require_same_dtype("logit_backward", out, {&g, &x});
    const LoopPlan plan = plan_over({&out, &g, &x});
    if (plan.numel == 0) return;
    dispatch_floating(out.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      const LogitBounds<T> b = logit_bounds<T>(L, 2, false);
      const C lo = b.lo, hi = b.hi, outside = b.outside;
      L.enqueue([lo, hi, outside, plan] {
        map_loop<T, T, T>(plan, [lo, hi, outside](C gv, C xv) __attribute__((always_inline)) {
          return xv < lo || xv > hi ? outside : gv / (xv * (C(1) - xv));
        });
      });
    });
  });
}

// Rounding to an integral value (round: half to even, as PyTorch's), and
// frac = x - trunc(x); SSE4.1 and later builds round whole vectors.
TFL_Error* kernel_floor(const TFL_Kernel_Args* a) {
  return unary(a, kFloor, "floor", [](auto x) { return std::floor(x); });
}
TFL_Error* kernel_ceil(const TFL_Kernel_Args* a) {
  return unary(a, kCeil, "ceil", [](auto x) { return std::ceil(x); });
}
TFL_Error* kernel_trunc(const TFL_Kernel_Args* a) {
  return unary(a, kTrunc, "trunc", [](auto x) { return std::trunc(x); });
}
TFL_Error* kernel_round(const TFL_Kernel_Args* a) {
  return unary(a, kRound, "round", [](auto x) { return std::nearbyint(x); });
}
TFL_Error* kernel_frac(const TFL_Kernel_Args* a) {
  return unary(a, kFrac, "frac", [](auto x) { return x - std::trunc(x); });
}

TFL_Error* kernel_sign(const TFL_Kernel_Args* args) {
  return run_kernel(args, kSign, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self"), out = L.output(0, "out");
    require_same_dtype("sign", out, {&self});
    const LoopPlan plan = plan_over({&out, &self});
    if (plan.numel == 0) return;
    dispatch_dtype(out.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      L.enqueue([plan] {
        map_loop<T, T>(plan, [](C x) {
          if constexpr (std::is_floating_point_v<C>)
            if (x != x) return x;
          return static_cast<C>((C(0) < x) - (x < C(0)));
        });
      });
    });
  });
}

TFL_Error* kernel_abs_table(const TFL_Kernel_Args* args) {
  return run_kernel(args, kAbs, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self"), out = L.output(0, "out");
    require_same_dtype("abs", out, {&self});
    const LoopPlan plan = plan_over({&out, &self});
    if (plan.numel == 0) return;
    dispatch_dtype(out.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      if constexpr (std::is_same_v<T, bool>) {
        decline("abs of a bool tensor (PyTorch does not define it)");
      } else if constexpr (std::is_floating_point_v<C>) {
        L.enqueue([plan] { map_loop<T, T>(plan, [](C x) { return std::fabs(x); }); });
      } else {
        // Integers wrap (abs of the minimum stays the minimum), as on the CPU.
        L.enqueue([plan] { map_loop<T, T>(plan, [](C x) { return x < 0 ? sub_wrap(C(0), x) : x; }); });
      }
    });
  });
}

TFL_Error* kernel_pow_tensor_scalar(const TFL_Kernel_Args* args) {
  return run_kernel(args, kPowTensorScalar, [&](Launch& L) {
    const double e = L.scalar(1, "exponent").to_double();
    launch_float_unary(L, "pow", [e](auto x) {
      using C = decltype(x);
      return pow_of<C>(x, static_cast<C>(e));
    });
  });
}

TFL_Error* kernel_pow_tensor_tensor(const TFL_Kernel_Args* args) {
  return run_kernel(args, kPowTensorTensor, [&](Launch& L) {
    launch_float_binary(L, "pow", [](auto b, auto e) { return pow_of<decltype(b)>(b, e); });
  });
}

TFL_Error* kernel_pow_scalar(const TFL_Kernel_Args* args) {
  // pow(Scalar self, Tensor exponent)
  return run_kernel(args, kPowScalar, [&](Launch& L) {
    const double base = L.scalar(0, "self").to_double();
    const TensorArg e = L.input_tensor(1, "exponent"), out = L.output(0, "out");
    require_same_dtype("pow", out, {&e});
    const LoopPlan plan = plan_over({&out, &e});
    if (plan.numel == 0) return;
    dispatch_floating(out.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      const C b = static_cast<C>(base);
      L.enqueue([b, plan] { map_loop<T, T>(plan, [b](C x) { return b == C(2) ? std::exp2(x) : std::pow(b, x); }); });
    });
  });
}

TFL_Error* kernel_clamp(const TFL_Kernel_Args* args) {
  return run_kernel(args, kClamp, [&](Launch& L) {
    const bool has_lo = L.has_input(1), has_hi = L.has_input(2);
    if (!has_lo && !has_hi) invalid_argument("clamp: at least one of min or max must not be None");
    const ScalarArg lo = has_lo ? L.scalar(1, "min") : ScalarArg{};
    const ScalarArg hi = has_hi ? L.scalar(2, "max") : ScalarArg{};
    launch_clamp(L, has_lo, lo, has_hi, hi);
  });
}

TFL_Error* kernel_clamp_min(const TFL_Kernel_Args* args) {
  return run_kernel(args, kClampMin, [&](Launch& L) { launch_clamp(L, true, L.scalar(1, "min"), false, ScalarArg{}); });
}

TFL_Error* kernel_clamp_max(const TFL_Kernel_Args* args) {
  return run_kernel(args, kClampMax, [&](Launch& L) { launch_clamp(L, false, ScalarArg{}, true, L.scalar(1, "max")); });
}

TFL_Error* kernel_clamp_tensor(const TFL_Kernel_Args* args) {
  // clamp.Tensor(self, Tensor? min, Tensor? max): bounds broadcast to self.
  return run_kernel(args, kClampTensor, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self"), out = L.output(0, "out");
    const bool has_lo = L.has_input(1), has_hi = L.has_input(2);
    if (!has_lo && !has_hi) invalid_argument("clamp: at least one of min or max must not be None");
    if (self.dtype == TFL_DTYPE_BOOL) decline("clamp of a bool tensor");
    // An absent bound is replaced by self itself, which never clamps.
    const TensorArg lo = has_lo ? L.input_tensor(1, "min") : self;
    const TensorArg hi = has_hi ? L.input_tensor(2, "max") : self;
    require_same_dtype("clamp", out, {&self, &lo, &hi});
    const LoopPlan plan = plan_over({&out, &self, &lo, &hi});
    if (plan.numel == 0) return;
    dispatch_dtype(out.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      L.enqueue([has_lo, has_hi, plan] {
        map_loop<T, T, T, T>(plan, [=](C x, C l, C h) { return clamp_of<C>(x, has_lo, l, has_hi, h); });
      });
    });
  });
}

namespace {

// clamp_min.Tensor / clamp_max.Tensor(self, bound): the bound broadcasts to self.
template <bool kLower>
void launch_clamp_bound(const Launch& L) {
  const char* op = kLower ? "clamp_min" : "clamp_max";
  const TensorArg self = L.input_tensor(0, "self"), bound = L.input_tensor(1, kLower ? "min" : "max"),
                  out = L.output(0, "out");
  if (self.dtype == TFL_DTYPE_BOOL) decline(op, " of a bool tensor");
  require_same_dtype(op, out, {&self, &bound});
  const LoopPlan plan = plan_over({&out, &self, &bound});
  if (plan.numel == 0) return;
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    L.enqueue([plan] {
      map_loop<T, T, T>(plan, [](C x, C b) { return clamp_of<C>(x, kLower, b, !kLower, b); });
    });
  });
}

}  // namespace

TFL_Error* kernel_clamp_min_tensor(const TFL_Kernel_Args* args) {
  return run_kernel(args, kClampMinTensor, [&](Launch& L) { launch_clamp_bound<true>(L); });
}

TFL_Error* kernel_clamp_max_tensor(const TFL_Kernel_Args* args) {
  return run_kernel(args, kClampMaxTensor, [&](Launch& L) { launch_clamp_bound<false>(L); });
}

namespace {

template <bool kMax>
void launch_min_max(const Launch& L) {
  const TensorArg a = L.input_tensor(0, "self"), b = L.input_tensor(1, "other"), out = L.output(0, "out");
  require_same_dtype(kMax ? "maximum" : "minimum", out, {&a, &b});
  const LoopPlan plan = plan_over({&out, &a, &b});
  if (plan.numel == 0) return;
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    L.enqueue([plan] {
      map_loop<T, T, T>(plan, [](C x, C y) { return kMax ? maximum_of<C>(x, y) : minimum_of<C>(x, y); });
    });
  });
}

}  // namespace

TFL_Error* kernel_maximum_table(const TFL_Kernel_Args* args) {
  return run_kernel(args, kMaximum, [&](Launch& L) { launch_min_max<true>(L); });
}

TFL_Error* kernel_minimum(const TFL_Kernel_Args* args) {
  return run_kernel(args, kMinimum, [&](Launch& L) { launch_min_max<false>(L); });
}

namespace {

// addcmul/addcdiv(self, tensor1, tensor2, *, value): self + value * t1 (*|/) t2.
template <bool kDiv>
void launch_addc(const Launch& L) {
  const TensorArg self = L.input_tensor(0, "self"), t1 = L.input_tensor(1, "tensor1"),
                  t2 = L.input_tensor(2, "tensor2"), out = L.output(0, "out");
  const ScalarArg value = L.scalar_or(3, 1, "value");
  require_same_dtype(kDiv ? "addcdiv" : "addcmul", out, {&self, &t1, &t2});
  const LoopPlan plan = plan_over({&out, &self, &t1, &t2});
  if (plan.numel == 0) return;
  dispatch_floating(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const C v = value.as<C>();
    L.enqueue([v, plan] {
      map_loop<T, T, T, T>(plan, [v](C s, C a, C b) { return kDiv ? s + v * (a / b) : s + v * (a * b); });
    });
  });
}

// lerp: self + weight * (end - self), computed from whichever end is nearer
// for |weight| >= 0.5 so that weight == 1 gives `end` exactly (as ATen does).
template <class C>
C lerp_of(C s, C e, C w) {
  return std::abs(w) < C(0.5) ? s + w * (e - s) : e - (e - s) * (C(1) - w);
}

}  // namespace

TFL_Error* kernel_addcmul(const TFL_Kernel_Args* args) {
  return run_kernel(args, kAddcmul, [&](Launch& L) { launch_addc<false>(L); });
}

TFL_Error* kernel_addcdiv(const TFL_Kernel_Args* args) {
  return run_kernel(args, kAddcdiv, [&](Launch& L) { launch_addc<true>(L); });
}

TFL_Error* kernel_lerp_scalar(const TFL_Kernel_Args* args) {
  return run_kernel(args, kLerpScalar, [&](Launch& L) {
    const double w = L.scalar(2, "weight").to_double();
    launch_float_binary(L, "lerp", [w](auto s, auto e) { return lerp_of<decltype(s)>(s, e, static_cast<decltype(s)>(w)); });
  });
}

TFL_Error* kernel_lerp_tensor(const TFL_Kernel_Args* args) {
  return run_kernel(args, kLerpTensor, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self"), end = L.input_tensor(1, "end"),
                    weight = L.input_tensor(2, "weight"), out = L.output(0, "out");
    require_same_dtype("lerp", out, {&self, &end, &weight});
    const LoopPlan plan = plan_over({&out, &self, &end, &weight});
    if (plan.numel == 0) return;
    dispatch_floating(out.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      L.enqueue([plan] { map_loop<T, T, T, T>(plan, [](C s, C e, C w) { return lerp_of<C>(s, e, w); }); });
    });
  });
}

}  // namespace flemu
