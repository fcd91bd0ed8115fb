// Activations and their backward kernels: sigmoid, tanh, gelu (exact and
// tanh approximation), silu, leaky_relu, hardtanh, threshold, and
// threshold_backward (relu's backward). silu_backward is CompositeImplicitAutograd
// (it runs as sigmoid and arithmetic). fp16/bf16 compute in float32.
#include <cmath>

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
    L.enqueue([plan, f] { map_loop<T, T>(plan, f); });
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
      L.enqueue([plan, t] { map_loop<T, T, T>(plan, [t](C gv, C xv) { return xv <= t ? C(0) : gv; }); });
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

}  // namespace flemu
