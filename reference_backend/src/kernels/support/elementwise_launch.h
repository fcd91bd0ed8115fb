// Launching typed elementwise kernels: read the operands, check they share
// the output's dtype, plan the loop and enqueue a map_loop for the dtype.
// Used by the math, activation and comparison kernels.
#ifndef FLEMU_KERNELS_SUPPORT_ELEMENTWISE_LAUNCH_H_
#define FLEMU_KERNELS_SUPPORT_ELEMENTWISE_LAUNCH_H_

#include <cstring>
#include <string>

#include "launch.h"
#include "map_loop.h"

namespace flemu {

// A call this kernel does not serve: the host runs it through its fallback chain.
template <class... Parts>
[[noreturn]] void decline(Parts&&... parts) {
  unimplemented(std::forward<Parts>(parts)...);
}

// A str argument (e.g. gelu's approximate); `fallback` when absent.
inline std::string string_arg(const Launch& L, size_t i, const char* what, const char* fallback) {
  if (!L.has_input(i)) return fallback;
  const TFL_Value& v = L.input(i, what);
  if (v.tag != TFL_VALUE_STRING) invalid_argument("argument ", i, " (", what, ") must be a string, got tag ", v.tag);
  return std::string(v.v.str.data, v.v.str.size);
}

// Declines unless every operand has the output's dtype (the host promotes
// inputs of kernels flagged TFL_KERNEL_PROMOTE_INPUTS; an out= tensor of
// another dtype arrives as a temporary of the result dtype).
inline void require_same_dtype(const char* op, const TensorArg& out, std::initializer_list<const TensorArg*> ins) {
  for (const TensorArg* t : ins)
    if (t->dtype != out.dtype)
      decline(op, ": operands of dtype ", dtype_name(t->dtype), " and ", dtype_name(out.dtype),
              " (this kernel computes in one dtype)");
}

// out = f(self) for floating dtypes; f takes and returns the compute type
// (generic over float and double: FLEMU_FAULT=fp64_computed_in_fp32 calls
// it with float for float64 tensors). `grain`: run_loop's (loop.h), smaller
// for an f that costs more per element.
template <class F>
void launch_float_unary(const Launch& L, const char* op, F f, int64_t grain = kParallelGrain) {
  const TensorArg self = L.input_tensor(0, "self"), out = L.output(0, "out");
  require_same_dtype(op, out, {&self});
  const LoopPlan plan = plan_over({&out, &self});
  if (plan.numel == 0) return;
  dispatch_floating(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, double>) {
      if (L.faulty(Fault::kFp64ComputedInFp32)) {
        L.enqueue([f, grain, plan] {
          map_loop<double, double>(plan, [f](double x) { return double{f(float(x))}; }, grain);
        });
        return;
      }
    }
    L.enqueue([f, grain, plan] { map_loop<T, T>(plan, f, grain); });
  });
}

// launch_float_unary, with float32 runs of unit stride through
// array(in, out, n) (out may be in), a form over many values at once that
// gives f's bits (trig_array, log_array, exp_array, softplus_array); other float32 runs take f one
// value at a time.
template <class Array, class F>
void launch_float_unary_array(const Launch& L, const char* op, Array array, F f, int64_t grain = kParallelGrain) {
  const TensorArg self = L.input_tensor(0, "self"), out = L.output(0, "out");
  if (self.dtype != TFL_DTYPE_FLOAT32 || out.dtype != TFL_DTYPE_FLOAT32) {
    launch_float_unary(L, op, f, grain);
    return;
  }
  const LoopPlan plan = plan_over({&out, &self});
  if (plan.numel == 0) return;
  L.enqueue([array, f, grain, plan] {
    run_loop(
        plan,
        [&array, &f](char* const* ptr, const int64_t* st, int64_t n) __attribute__((always_inline)) {
          if (st[0] == sizeof(float) && st[1] == sizeof(float)) {
            array(reinterpret_cast<const float*>(ptr[1]), reinterpret_cast<float*>(ptr[0]), n);
            return;
          }
          for (int64_t i = 0; i < n; ++i)
            *reinterpret_cast<float*>(ptr[0] + i * st[0]) = f(*reinterpret_cast<const float*>(ptr[1] + i * st[1]));
        },
        grain);
  });
}

// out = f(a, b) for floating dtypes, a and b the first two tensor inputs.
template <class F>
void launch_float_binary(const Launch& L, const char* op, F f, int64_t grain = kParallelGrain) {
  const TensorArg a = L.input_tensor(0, "input 0"), b = L.input_tensor(1, "input 1"), out = L.output(0, "out");
  require_same_dtype(op, out, {&a, &b});
  const LoopPlan plan = plan_over({&out, &a, &b});
  if (plan.numel == 0) return;
  dispatch_floating(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, double>) {
      if (L.faulty(Fault::kFp64ComputedInFp32)) {
        L.enqueue([f, grain, plan] {
          map_loop<double, double, double>(
              plan, [f](double a, double b) { return double{f(float(a), float(b))}; }, grain);
        });
        return;
      }
    }
    L.enqueue([f, grain, plan] { map_loop<T, T, T>(plan, f, grain); });
  });
}

// A Scalar in compute type C.
template <class C>
C scalar_as(const ScalarArg& s) {
  return s.as<C>();
}

}  // namespace flemu

#endif  // FLEMU_KERNELS_SUPPORT_ELEMENTWISE_LAUNCH_H_
