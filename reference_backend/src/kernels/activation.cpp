// Activations and their backward kernels: sigmoid, tanh, gelu (exact and
// tanh approximation), silu, leaky_relu, hardtanh, threshold, and
// threshold_backward (relu's backward); elu and mish (evaluated in double in
// float32: support/double_math.h), softplus, hardswish and hardsigmoid. silu_backward is CompositeImplicitAutograd
// (it runs as sigmoid and arithmetic). fp16/bf16 compute in float32.
#include <cmath>

#include "support/double_math.h"
#include "support/elementwise_launch.h"
#include "support/fast_math.h"
#include "support/registry.h"

namespace flemu {
namespace {

GeluForm gelu_approximate(const Launch& L, size_t i) {
  const std::string a = string_arg(L, i, "approximate", "none");
  if (a == "none") return GeluForm::Exact;
  if (a == "tanh") return GeluForm::Tanh;
  invalid_argument("gelu: approximate must be 'none' or 'tanh', got '", a, "'");
}

// out = f(self) for every non-bool dtype (f takes and returns the compute type).
template <class F>
void launch_numeric_unary(const Launch& L, const char* op, F f) {
  const TensorArg self = L.input_tensor(0, "self"), out = L.output(0, "out");
  require_same_dtype(op, out, {&self});
  if (self.dtype == TFL_DTYPE_BOOL) decline(op, " of a bool tensor");
  const LoopPlan plan = plan_over({&out, &self});
  if (plan.numel == 0) return;
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    L.enqueue([f, plan] { map_loop<T, T>(plan, f); });
  });
}

}  // namespace

TFL_Error* kernel_sigmoid(const TFL_Kernel_Args* args) {
  return run_kernel(args, kSigmoid, [&](Launch& L) {
    launch_float_unary(L, "sigmoid", [](auto x) { return sigmoid_of(x); }, kTranscendentalGrain);
  });
}

TFL_Error* kernel_tanh(const TFL_Kernel_Args* args) {
  return run_kernel(args, kTanh, [&](Launch& L) {
    launch_float_unary(L, "tanh", [](auto x) { return tanh_of(x); }, kTranscendentalGrain);
  });
}

TFL_Error* kernel_gelu(const TFL_Kernel_Args* args) {
  return run_kernel(args, kGelu, [&](Launch& L) {
    if (gelu_approximate(L, 1) == GeluForm::Exact)
      launch_float_unary(L, "gelu", [](auto x) { return gelu_of<GeluForm::Exact>(x); }, kTranscendentalGrain);
    else
      launch_float_unary(L, "gelu", [](auto x) { return gelu_of<GeluForm::Tanh>(x); }, kTranscendentalGrain);
  });
}

TFL_Error* kernel_silu(const TFL_Kernel_Args* args) {
  return run_kernel(args, kSilu, [&](Launch& L) {
    launch_float_unary(L, "silu", [](auto x) { return x * sigmoid_of(x); }, kTranscendentalGrain);
  });
}

TFL_Error* kernel_leaky_relu(const TFL_Kernel_Args* args) {
  return run_kernel(args, kLeakyRelu, [&](Launch& L) {
    const double slope = L.scalar_or(1, 0, "negative_slope").to_double();
    const double s = L.has_input(1) ? slope : 0.01;
    launch_float_unary(L, "leaky_relu", [s](auto x) {
      using C = decltype(x);
      return x > C(0) ? x : x * static_cast<C>(s);
    });
  });
}

TFL_Error* kernel_hardtanh(const TFL_Kernel_Args* args) {
  return run_kernel(args, kHardtanh, [&](Launch& L) {
    const ScalarArg lo = L.has_input(1) ? L.scalar(1, "min_val") : ScalarArg{TFL_VALUE_INT, -1, 0.0};
    const ScalarArg hi = L.has_input(2) ? L.scalar(2, "max_val") : ScalarArg{TFL_VALUE_INT, 1, 0.0};
    const double l = lo.to_double(), h = hi.to_double();
    launch_numeric_unary(L, "hardtanh", [l, h](auto x) {
      using C = decltype(x);
      if constexpr (std::is_floating_point_v<C>)
        if (x != x) return x;
      const C lc = static_cast<C>(l), hc = static_cast<C>(h);
      return x < lc ? lc : (x > hc ? hc : x);
    });
  });
}

TFL_Error* kernel_threshold(const TFL_Kernel_Args* args) {
  // threshold(self, threshold, value): value where self <= threshold.
  return run_kernel(args, kThreshold, [&](Launch& L) {
    const double t = L.scalar(1, "threshold").to_double(), v = L.scalar(2, "value").to_double();
    launch_numeric_unary(L, "threshold", [t, v](auto x) {
      using C = decltype(x);
      return x <= static_cast<C>(t) ? static_cast<C>(v) : x;
    });
  });
}

TFL_Error* kernel_sigmoid_backward(const TFL_Kernel_Args* args) {
  // sigmoid_backward(grad_output, output)
  return run_kernel(args, kSigmoidBackward, [&](Launch& L) {
    launch_float_binary(L, "sigmoid_backward", [](auto g, auto y) { return g * (decltype(y)(1) - y) * y; });
  });
}

TFL_Error* kernel_tanh_backward(const TFL_Kernel_Args* args) {
  // tanh_backward(grad_output, output)
  return run_kernel(args, kTanhBackward, [&](Launch& L) {
    launch_float_binary(L, "tanh_backward", [](auto g, auto y) { return g * (decltype(y)(1) - y * y); });
  });
}

TFL_Error* kernel_gelu_backward(const TFL_Kernel_Args* args) {
  // gelu_backward(grad_output, self, *, approximate)
  return run_kernel(args, kGeluBackward, [&](Launch& L) {
    // FLEMU_FAULT=gelu_backward_scaled: a gradient 2% too large.
    const double scale = L.faulty(Fault::kGeluBackwardScaled) ? 1.02 : 1.0;
    const auto launch = [&](auto form) {
      constexpr GeluForm approx = decltype(form)::value;
      if (scale == 1.0) {
        launch_float_binary(
            L, "gelu_backward", [](auto g, auto x) { return gelu_grad<approx>(g, x); }, kTranscendentalGrain);
        return;
      }
      launch_float_binary(L, "gelu_backward", [scale](auto g, auto x) {
        return gelu_grad<approx>(g, x) * static_cast<decltype(x)>(scale);
      });
    };
    if (gelu_approximate(L, 2) == GeluForm::Exact) launch(std::integral_constant<GeluForm, GeluForm::Exact>{});
    else launch(std::integral_constant<GeluForm, GeluForm::Tanh>{});
  });
}

TFL_Error* kernel_leaky_relu_backward(const TFL_Kernel_Args* args) {
  // leaky_relu_backward(grad_output, self, negative_slope, self_is_result):
  // self may be the forward's result; its sign is the input's for slope > 0.
  return run_kernel(args, kLeakyReluBackward, [&](Launch& L) {
    const double slope = L.scalar(2, "negative_slope").to_double();
    if (L.boolean_or(3, false, "self_is_result") && slope < 0)
      invalid_argument("leaky_relu_backward: in-place leaky_relu with a negative slope (", slope,
                       ") has no gradient from its result; use the out-of-place version");
    launch_float_binary(L, "leaky_relu_backward", [slope](auto g, auto x) {
      using C = decltype(x);
      return x > C(0) ? g : g * static_cast<C>(slope);
    });
  });
}

TFL_Error* kernel_threshold_backward(const TFL_Kernel_Args* args) {
  // threshold_backward(grad_output, self, threshold): 0 where self <= threshold.
  return run_kernel(args, kThresholdBackward, [&](Launch& L) {
    const TensorArg g = L.input_tensor(0, "grad_output"), x = L.input_tensor(1, "self"), out = L.output(0, "out");
    require_same_dtype("threshold_backward", out, {&g, &x});
    if (out.dtype == TFL_DTYPE_BOOL) decline("threshold_backward of bool tensors");
    const ScalarArg threshold = L.scalar(2, "threshold");
    const LoopPlan plan = plan_over({&out, &g, &x});
    if (plan.numel == 0) return;
    dispatch_dtype(out.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      const C t = threshold.as<C>();
      L.enqueue([t, plan] { map_loop<T, T, T>(plan, [t](C gv, C xv) { return xv <= t ? C(0) : gv; }); });
    });
  });
}

TFL_Error* kernel_hardtanh_backward(const TFL_Kernel_Args* args) {
  // hardtanh_backward(grad_output, self, min_val, max_val)
  return run_kernel(args, kHardtanhBackward, [&](Launch& L) {
    const double lo = L.scalar(2, "min_val").to_double(), hi = L.scalar(3, "max_val").to_double();
    launch_float_binary(L, "hardtanh_backward", [lo, hi](auto g, auto x) {
      using C = decltype(x);
      return (x <= static_cast<C>(lo) || x >= static_cast<C>(hi)) ? C(0) : g;
    });
  });
}

namespace {

// elu's coefficients: alpha * scale below 0, scale above, input_scale inside the exponential.
struct EluCoefficients {
  double alpha_scale, scale, input_scale;
};

EluCoefficients elu_coefficients(const Launch& L, size_t first) {
  const double alpha = L.scalar_or(first, 1, "alpha").to_double();
  const double scale = L.scalar_or(first + 1, 1, "scale").to_double();
  return {alpha * scale, scale, L.scalar_or(first + 2, 1, "input_scale").to_double()};
}

// hardsigmoid's inner value, min(max(x + 3, 0), 6), which hardswish multiplies by x / 6 as well.
template <class C>
inline __attribute__((always_inline)) C relu6_of_shifted(C x) {
  const C t = x + C(3);
  return t < C(0) ? C(0) : (t > C(6) ? C(6) : t);
}

}  // namespace

TFL_Error* kernel_elu(const TFL_Kernel_Args* args) {
  return run_kernel(args, kElu, [&](Launch& L) {
    const EluCoefficients k = elu_coefficients(L, 1);
    launch_float_unary(
        L, "elu", [k](auto x) __attribute__((always_inline)) { return elu_of(x, k.alpha_scale, k.scale, k.input_scale); }, kTranscendentalGrain);
  });
}

TFL_Error* kernel_elu_backward(const TFL_Kernel_Args* args) {
  // elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result)
  return run_kernel(args, kEluBackward, [&](Launch& L) {
    const EluCoefficients k = elu_coefficients(L, 1);
    const bool is_result = L.boolean_or(4, false, "is_result");
    const TensorArg g = L.input_tensor(0, "grad_output"), x = L.input_tensor(5, "self_or_result"),
                    out = L.output(0, "out");
    require_same_dtype("elu_backward", out, {&g, &x});
    const LoopPlan plan = plan_over({&out, &g, &x});
    if (plan.numel == 0) return;
    dispatch_floating(out.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      L.enqueue([k, is_result, plan] {
        map_loop<T, T, T>(
            plan, [k, is_result](C gv, C xv) __attribute__((always_inline)) { return elu_grad(gv, xv, is_result, k.alpha_scale, k.scale, k.input_scale); },
            kTranscendentalGrain);
      });
    });
  });
}

TFL_Error* kernel_softplus(const TFL_Kernel_Args* args) {
  return run_kernel(args, kSoftplus, [&](Launch& L) {
    const double beta = L.scalar_or(1, 1, "beta").to_double(), threshold = L.scalar_or(2, 20, "threshold").to_double();
    // float32 dense runs through softplus_array's two passes, the same bits.
    const float b = static_cast<float>(beta), t = static_cast<float>(threshold);
    launch_float_unary_array(
        L, "softplus",
        [b, t](const float* in, float* out, int64_t n) __attribute__((always_inline)) {
          softplus_array(in, out, n, b, t);
        },
        [beta, threshold](auto x) __attribute__((always_inline)) {
          using C = decltype(x);
          return softplus_of(x, static_cast<C>(beta), static_cast<C>(threshold));
        },
        kTranscendentalGrain);
  });
}

TFL_Error* kernel_softplus_backward(const TFL_Kernel_Args* args) {
  // softplus_backward(grad_output, self, beta, threshold): g * sigmoid(beta x),
  // g itself where beta x > threshold.
  return run_kernel(args, kSoftplusBackward, [&](Launch& L) {
    const double beta = L.scalar(2, "beta").to_double(), threshold = L.scalar(3, "threshold").to_double();
    launch_float_binary(L, "softplus_backward", [beta, threshold](auto g, auto x) __attribute__((always_inline)) {
      using C = decltype(x);
      const C bx = x * static_cast<C>(beta);
      return bx > static_cast<C>(threshold) ? g : g * sigmoid_of(bx);
    }, kTranscendentalGrain);
  });
}

TFL_Error* kernel_mish(const TFL_Kernel_Args* args) {
  return run_kernel(args, kMish, [&](Launch& L) {
    launch_float_unary(L, "mish", [](auto x) __attribute__((always_inline)) { return mish_of(x); }, kTranscendentalGrain);
  });
}

TFL_Error* kernel_hardsigmoid(const TFL_Kernel_Args* args) {
  return run_kernel(args, kHardsigmoid, [&](Launch& L) {
    launch_float_unary(L, "hardsigmoid", [](auto x) __attribute__((always_inline)) { return relu6_of_shifted(x) / decltype(x)(6); });
  });
}

TFL_Error* kernel_hardswish(const TFL_Kernel_Args* args) {
  return run_kernel(args, kHardswish, [&](Launch& L) {
    launch_float_unary(L, "hardswish", [](auto x) __attribute__((always_inline)) { return x * relu6_of_shifted(x) / decltype(x)(6); });
  });
}

TFL_Error* kernel_hardsigmoid_backward(const TFL_Kernel_Args* args) {
  // g / 6 strictly inside (-3, 3), 0 elsewhere; 1/6 is PyTorch's float32
  // constant in every dtype (its float64 gradient is 3e-8 off 1/6), so flemu
  // gives the CPU's values.
  return run_kernel(args, kHardsigmoidBackward, [&](Launch& L) {
    launch_float_binary(L, "hardsigmoid_backward", [](auto g, auto x) __attribute__((always_inline)) {
      using C = decltype(x);
      return x > C(-3) && x < C(3) ? g * C(1.0f / 6.0f) : C(0);
    });
  });
}

TFL_Error* kernel_hardswish_backward(const TFL_Kernel_Args* args) {
  // 0 up to -3, g (x / 3 + 1/2) strictly inside (-3, 3), g from 3 on and at NaN (as PyTorch's).
  return run_kernel(args, kHardswishBackward, [&](Launch& L) {
    launch_float_binary(L, "hardswish_backward", [](auto g, auto x) __attribute__((always_inline)) {
      using C = decltype(x);
      return x <= C(-3) ? C(0) : (x < C(3) ? g * (x / C(3) + C(0.5)) : g);
    });
  });
}

}  // namespace flemu
