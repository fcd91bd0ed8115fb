// Arithmetic shared by the elementwise kernels, and typed loops over a
// LoopPlan with fast paths for contiguous and scalar-broadcast runs.
#ifndef FLEMU_KERNELS_SUPPORT_ELEMENTWISE_OPS_H_
#define FLEMU_KERNELS_SUPPORT_ELEMENTWISE_OPS_H_

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "dtype.h"
#include "loop.h"

namespace flemu {

// Integer arithmetic wraps like two's complement hardware instead of being
// undefined on overflow.
template <class C>
inline C add_wrap(C a, C b) {
  if constexpr (std::is_integral_v<C>) return static_cast<C>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  else return a + b;
}
template <class C>
inline C sub_wrap(C a, C b) {
  if constexpr (std::is_integral_v<C>) return static_cast<C>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
  else return a - b;
}
template <class C>
inline C mul_wrap(C a, C b) {
  if constexpr (std::is_integral_v<C>) return static_cast<C>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  else return a * b;
}

template <class T>
inline T load_elem(const char* p) {
  return *reinterpret_cast<const T*>(p);
}
template <class T>
inline void store_elem(char* p, T v) {
  *reinterpret_cast<T*>(p) = v;
}

// out = op(a) over operands (out, a), both of type T.
template <class T, class Op>
void unary_loop(const LoopPlan& plan, Op op) {
  run_loop(plan, [&](char* const* ptr, const int64_t* st, int64_t n) {
    constexpr int64_t sz = sizeof(T);
    if (st[0] == sz && st[1] == sz) {
      T* o = reinterpret_cast<T*>(ptr[0]);
      const T* a = reinterpret_cast<const T*>(ptr[1]);
      for (int64_t i = 0; i < n; ++i) o[i] = from_compute<T>(op(to_compute(a[i])));
    } else {
      char* o = ptr[0];
      const char* a = ptr[1];
      for (int64_t i = 0; i < n; ++i, o += st[0], a += st[1])
        store_elem<T>(o, from_compute<T>(op(to_compute(load_elem<T>(a)))));
    }
  });
}

// out = op(a, b) over operands (out, a, b), all of type T.
template <class T, class Op>
void binary_loop(const LoopPlan& plan, Op op) {
  using C = compute_t<T>;
  run_loop(plan, [&](char* const* ptr, const int64_t* st, int64_t n) {
    constexpr int64_t sz = sizeof(T);
    T* o = reinterpret_cast<T*>(ptr[0]);
    const T* a = reinterpret_cast<const T*>(ptr[1]);
    const T* b = reinterpret_cast<const T*>(ptr[2]);
    if (st[0] == sz && st[1] == sz && st[2] == sz) {
      for (int64_t i = 0; i < n; ++i) o[i] = from_compute<T>(op(to_compute(a[i]), to_compute(b[i])));
    } else if (st[0] == sz && st[1] == sz && st[2] == 0) {
      const C bv = to_compute(*b);
      for (int64_t i = 0; i < n; ++i) o[i] = from_compute<T>(op(to_compute(a[i]), bv));
    } else if (st[0] == sz && st[1] == 0 && st[2] == sz) {
      const C av = to_compute(*a);
      for (int64_t i = 0; i < n; ++i) o[i] = from_compute<T>(op(av, to_compute(b[i])));
    } else {
      char* op0 = ptr[0];
      const char* ap = ptr[1];
      const char* bp = ptr[2];
      for (int64_t i = 0; i < n; ++i, op0 += st[0], ap += st[1], bp += st[2])
        store_elem<T>(op0, from_compute<T>(op(to_compute(load_elem<T>(ap)), to_compute(load_elem<T>(bp)))));
    }
  });
}

}  // namespace flemu

#endif  // FLEMU_KERNELS_SUPPORT_ELEMENTWISE_OPS_H_
