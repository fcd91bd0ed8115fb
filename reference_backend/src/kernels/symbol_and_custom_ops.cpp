// The two other ways the ABI gives a plugin to provide a kernel, float32
// only: a custom operator with autograd (flemu::scale_add and its backward,
// listed by Kernels_ListCustomOps) and the symbol convention (the exported
// torch_fl_op_abs and torch_fl_op_maximum; the table's abs and maximum, which
// cover every dtype, win over them in the full profile).
#include <cmath>

#include "support/elementwise_ops.h"
#include "support/launch.h"
#include "support/loop.h"
#include "support/map_loop.h"
#include "support/registry.h"

namespace flemu {
namespace {

void require_float32(const TensorArg& t, const char* what) {
  if (t.dtype != TFL_DTYPE_FLOAT32) invalid_argument(what, " must be float32, got ", dtype_name(t.dtype));
}

LoopPlan plan_of(const TensorArg& out, const TensorArg& a) { return plan_over({&out, &a}); }
LoopPlan plan_of(const TensorArg& out, const TensorArg& a, const TensorArg& b) { return plan_over({&out, &a, &b}); }

}  // namespace

TFL_Error* kernel_scale_add(const TFL_Kernel_Args* args) {
  return run_kernel(args, kScaleAdd, [&](Launch& L) {
    const TensorArg x = L.input_tensor(0, "x"), y = L.input_tensor(1, "y"), out = L.output(0, "out");
    const float alpha = static_cast<float>(L.scalar(2, "alpha").to_double());
    require_float32(x, "x");
    require_float32(y, "y");
    require_float32(out, "out");
    const LoopPlan plan = plan_of(out, x, y);
    if (plan.numel == 0) return;
    L.enqueue([alpha, plan] { binary_loop<float>(plan, [alpha](float a, float b) { return a + alpha * b; }); });
  });
}

TFL_Error* kernel_scale_add_backward(const TFL_Kernel_Args* args) {
  // inputs: grad_out (or None), x, y, alpha, out; outputs: grad_x, grad_y.
  return run_kernel(args, kScaleAddBackward, [&](Launch& L) {
    const float alpha = static_cast<float>(L.scalar(3, "alpha").to_double());
    const TensorArg gx = L.output(0, "grad_x"), gy = L.output(1, "grad_y");
    require_float32(gx, "grad_x");
    require_float32(gy, "grad_y");
    if (!L.has_input(0)) {  // no gradient flows: both are zero
      const LoopPlan px = plan_over({&gx}), py = plan_over({&gy});
      L.enqueue([px, py] {
        map_loop<float>(px, [] { return 0.0f; });
        map_loop<float>(py, [] { return 0.0f; });
      });
      return;
    }
    const TensorArg g = L.input_tensor(0, "grad_out");
    require_float32(g, "grad_out");
    const LoopPlan px = plan_of(gx, g), py = plan_of(gy, g);
    L.enqueue([px, py, alpha] {
      unary_loop<float>(px, [](float v) { return v; });
      unary_loop<float>(py, [alpha](float v) { return alpha * v; });
    });
  });
}

}  // namespace flemu

// Symbol-convention kernels: found by name, float32, dense same-shape operands.
TFL_DEFINE_OP_DEFAULT(abs) {
  using namespace flemu;
  return run_symbol_kernel(args, kAbs, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self"), out = L.output(0, "out");
    require_float32(self, "self");
    require_float32(out, "out");
    const LoopPlan plan = plan_of(out, self);
    if (plan.numel == 0) return;
    L.enqueue([plan] { unary_loop<float>(plan, [](float a) { return std::fabs(a); }); });
  });
}

TFL_DEFINE_OP_DEFAULT(maximum) {
  using namespace flemu;
  return run_symbol_kernel(args, kMaximum, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self"), other = L.input_tensor(1, "other"), out = L.output(0, "out");
    require_float32(self, "self");
    require_float32(other, "other");
    require_float32(out, "out");
    const LoopPlan plan = plan_of(out, self, other);
    if (plan.numel == 0) return;
    L.enqueue([plan] {
      binary_loop<float>(plan, [](float a, float b) {
        if (a != a) return a;  // NaN propagates from either side
        if (b != b) return b;
        return a > b ? a : b;
      });
    });
  });
}
