// fill_ and zero_: in place by name, any dtype and strides; the value is
// converted once at launch and the loop only stores bytes.
#include <cstring>

#include "support/launch.h"
#include "support/loop.h"
#include "support/registry.h"

namespace flemu {
namespace {

template <class T>
T scalar_to(const ScalarArg& s) {
  if (s.tag == TFL_VALUE_DOUBLE) return convert<T>(s.d);
  if (s.tag == TFL_VALUE_BOOL) return convert<T>(s.i != 0);
  return convert<T>(s.i);
}

template <class U>
void fill_runs(const LoopPlan& plan, U value) {
  run_loop(plan, [&](char* const* ptr, const int64_t* st, int64_t n) {
    if (st[0] == static_cast<int64_t>(sizeof(U))) {
      U* o = reinterpret_cast<U*>(ptr[0]);
      for (int64_t i = 0; i < n; ++i) o[i] = value;
    } else {
      char* o = ptr[0];
      for (int64_t i = 0; i < n; ++i, o += st[0]) std::memcpy(o, &value, sizeof(U));
    }
  });
}

void launch_fill(const Launch& L, const TensorArg& self, const ScalarArg& value) {
  // The value is converted once at launch; the loop only stores bytes.
  uint64_t bits = 0;
  dispatch_dtype(self.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = scalar_to<T>(value);
    std::memcpy(&bits, &v, sizeof(T));
  });
  const TensorArg* ops[] = {&self};
  const char* names[] = {"self"};
  const LoopPlan plan = make_loop(ops, 1, names);
  if (plan.numel == 0) return;
  switch (self.itemsize) {
    case 1: L.enqueue([v = static_cast<uint8_t>(bits), plan] { fill_runs(plan, v); }); break;
    case 2: L.enqueue([v = static_cast<uint16_t>(bits), plan] { fill_runs(plan, v); }); break;
    case 4: L.enqueue([v = static_cast<uint32_t>(bits), plan] { fill_runs(plan, v); }); break;
    default: L.enqueue([v = bits, plan] { fill_runs(plan, v); }); break;
  }
}

// In-place ops take `self` as input 0; outputs[0], when given, is the same memory.
TensorArg inplace_target(const Launch& L) {
  return L.num_outputs() > 0 ? L.output(0, "self") : L.input_tensor(0, "self");
}

ScalarArg int_scalar(int64_t v) {
  ScalarArg s;
  s.i = v;
  return s;
}

}  // namespace

TFL_Error* kernel_fill_scalar(const TFL_Kernel_Args* args) {
  return run_kernel(args, kFillScalar, [&](Launch& L) {
    const TensorArg self = inplace_target(L);
    launch_fill(L, self, L.scalar(1, "value"));
  });
}

TFL_Error* kernel_zero(const TFL_Kernel_Args* args) {
  return run_kernel(args, kZero, [&](Launch& L) { launch_fill(L, inplace_target(L), int_scalar(0)); });
}

}  // namespace flemu
