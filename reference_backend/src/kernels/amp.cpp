// Gradient scaling for torch.amp.GradScaler: _amp_foreach_non_finite_check_and_unscale_
// (multiply every gradient by inv_scale, raise found_inf on a NaN or an
// infinity) and _amp_update_scale_ (grow or back off the scale), with
// PyTorch's arithmetic: gradients in their compute type (float for
// half/bfloat16), the scale update in double stored as float.
#include <cmath>
#include <vector>

#include "support/loop.h"
#include "support/nn_common.h"
#include "support/registry.h"

namespace flemu {
namespace {

// A one-element float32 tensor of the device (found_inf, inv_scale, the scale).
TensorArg float_cell(const Launch& L, size_t i, const char* what) {
  const TensorArg t = L.input_tensor(i, what);
  if (t.numel != 1 || t.dtype != TFL_DTYPE_FLOAT32)
    invalid_argument(what, " must be a one-element float32 tensor, got ", dtype_name(t.dtype), " with ", t.numel,
                     " elements");
  return t;
}

template <class T>
bool unscale(const LoopPlan& plan, float inv_scale) {
  using C = acc_t<T>;
  bool non_finite = false;
  for_each_run(plan, 0, plan.numel, [&](char* const* p, const int64_t* st, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      T* x = reinterpret_cast<T*>(p[0] + i * st[0]);
      const C v = static_cast<C>(to_compute(*x));
      if (!std::isfinite(v)) non_finite = true;
      if (inv_scale != 1.0f) *x = convert<T>(v * static_cast<C>(inv_scale));
    }
  });
  return non_finite;
}

}  // namespace

TFL_Error* kernel_amp_foreach_non_finite_check_and_unscale(const TFL_Kernel_Args* args) {
  // (Tensor(a!)[] self, Tensor(b!) found_inf, Tensor inv_scale) -> ()
  return run_kernel(args, kAmpForeachNonFiniteCheckAndUnscale, [&](Launch& L) {
    const TFL_Value& list = L.input(0, "self");
    if (list.tag != TFL_VALUE_TENSOR_LIST) invalid_argument("self must be a tensor list, got tag ", list.tag);
    const TensorArg found_inf = float_cell(L, 1, "found_inf"), inv_scale = float_cell(L, 2, "inv_scale");
    struct Grad {
      LoopPlan plan;
      int32_t dtype;
    };
    std::vector<Grad> grads;
    for (size_t i = 0; i < list.v.tensors.size; ++i) {
      const TensorArg t = L.tensor(list.v.tensors.data[i], "self");
      if (!dtype_is_floating(t.dtype)) invalid_argument("self[", i, "] must be floating, got ", dtype_name(t.dtype));
      const TensorArg* ops[] = {&t};
      const char* names[] = {"self"};
      if (t.numel > 0) grads.push_back({make_loop(ops, 1, names), t.dtype});
    }
    char* found = found_inf.data;
    const char* inv = inv_scale.data;
    L.enqueue([grads = std::move(grads), found, inv] {
      const float inv_value = *reinterpret_cast<const float*>(inv);
      bool non_finite = false;
      for (const Grad& g : grads)
        non_finite |= dispatch_floating(g.dtype, [&](auto tag) {
          return unscale<typename decltype(tag)::type>(g.plan, inv_value);
        });
      if (non_finite) *reinterpret_cast<float*>(found) = 1.0f;
    });
  });
}

TFL_Error* kernel_amp_update_scale(const TFL_Kernel_Args* args) {
  // (Tensor(a!) self, Tensor(b!) growth_tracker, Tensor found_inf, float scale_growth_factor,
  //  float scale_backoff_factor, int growth_interval) -> Tensor(a!)
  return run_kernel(args, kAmpUpdateScale, [&](Launch& L) {
    const TensorArg scale = float_cell(L, 0, "self");  // outputs[0], when given, is this tensor
    const TensorArg tracker = L.input_tensor(1, "growth_tracker");
    if (tracker.numel != 1 || tracker.dtype != TFL_DTYPE_INT32)
      invalid_argument("growth_tracker must be a one-element int32 tensor, got ", dtype_name(tracker.dtype), " with ",
                       tracker.numel, " elements");
    const TensorArg found_inf = float_cell(L, 2, "found_inf");
    const double growth = double_arg(L, 3, "scale_growth_factor"), backoff = double_arg(L, 4, "scale_backoff_factor");
    const int64_t interval = int_arg(L, 5, "growth_interval");
    char* s = scale.data;
    char* t = tracker.data;
    const char* f = found_inf.data;
    L.enqueue([s, t, f, growth, backoff, interval] {
      float& current = *reinterpret_cast<float*>(s);
      int32_t& successful = *reinterpret_cast<int32_t*>(t);
      if (*reinterpret_cast<const float*>(f) != 0.0f) {
        current = static_cast<float>(current * backoff);
        successful = 0;
        return;
      }
      const int64_t next = static_cast<int64_t>(successful) + 1;
      if (next == interval) {
        const float grown = static_cast<float>(current * growth);
        if (std::isfinite(grown)) current = grown;
        successful = 0;
      } else {
        successful = static_cast<int32_t>(next);
      }
    });
  });
}

}  // namespace flemu
