// Typed elementwise loops over operands of possibly different element types
// (a bool output of a comparison, a bool condition beside float values):
// map_loop<Out, In...>(plan, f) stores f(compute values of the inputs) into
// operand 0 for every element of a LoopPlan, with a fast path for dense runs.
#ifndef FLEMU_KERNELS_SUPPORT_MAP_LOOP_H_
#define FLEMU_KERNELS_SUPPORT_MAP_LOOP_H_

#include <cstdint>
#include <utility>

#include "dtype.h"
#include "loop.h"

namespace flemu {

namespace map_loop_detail {

template <class T>
inline auto load(const char* p) {
  return to_compute(*reinterpret_cast<const T*>(p));
}

template <class Out, class... In, class F, size_t... K>
[[gnu::always_inline]] inline void run(char* const* ptr, const int64_t* st, int64_t n, F& f, std::index_sequence<K...>) {
  const bool dense = st[0] == static_cast<int64_t>(sizeof(Out)) &&
                     ((st[K + 1] == static_cast<int64_t>(sizeof(In))) && ...);
  if (dense) {
    Out* o = reinterpret_cast<Out*>(ptr[0]);
    for (int64_t i = 0; i < n; ++i)
      o[i] = convert<Out>(f(to_compute(reinterpret_cast<const In*>(ptr[K + 1])[i])...));
    return;
  }
  char* o = ptr[0];
  [[maybe_unused]] const char* in[sizeof...(In) + 1] = {ptr[K + 1]...};  // none for a fill
  for (int64_t i = 0; i < n; ++i) {
    *reinterpret_cast<Out*>(o) = convert<Out>(f(load<In>(in[K] + i * st[K + 1])...));
    o += st[0];
  }
}

}  // namespace map_loop_detail

// Operand 0 of `plan` has type Out, operand k+1 type In_k. `f` takes
// compute_t<In_k> values and returns anything convert<Out> accepts. `grain`:
// run_loop's.
template <class Out, class... In, class F>
void map_loop(const LoopPlan& plan, F f, int64_t grain = kParallelGrain) {
  static_assert(sizeof...(In) + 1 <= kMaxOperands, "too many operands for a LoopPlan");
  run_loop(
      plan,
      [&](char* const* ptr, const int64_t* st, int64_t n) __attribute__((always_inline)) {
        map_loop_detail::run<Out, In...>(ptr, st, n, f, std::index_sequence_for<In...>{});
      },
      grain);
}

// A LoopPlan over up to kMaxOperands tensors; the first is the output.
inline LoopPlan plan_over(std::initializer_list<const TensorArg*> operands) {
  static const char* const kNames[kMaxOperands] = {"out", "input 0", "input 1", "input 2"};
  const TensorArg* ops[kMaxOperands];
  int n = 0;
  for (const TensorArg* t : operands) ops[n++] = t;
  return make_loop(ops, n, kNames);
}

}  // namespace flemu

#endif  // FLEMU_KERNELS_SUPPORT_MAP_LOOP_H_
