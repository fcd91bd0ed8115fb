#include "reduce.h"

#include <cmath>
#include <type_traits>

#include "../kernels/support/dtype.h"
#include "torch_fl/collectives.h"

namespace flemu::comm {

namespace {

template <class T>
struct Ops {
  static T sum(T a, T b) {
    if constexpr (std::is_same_v<T, bool>) {
      return a || b;
    } else if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<uint64_t>(static_cast<U>(a)) + static_cast<U>(b)));
    } else if constexpr (is_reduced_float_v<T>) {
      return T(static_cast<float>(a) + static_cast<float>(b));
    } else {
      return a + b;
    }
  }
  static T prod(T a, T b) {
    if constexpr (std::is_same_v<T, bool>) {
      return a && b;
    } else if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<uint64_t>(static_cast<U>(a)) * static_cast<U>(b)));
    } else if constexpr (is_reduced_float_v<T>) {
      return T(static_cast<float>(a) * static_cast<float>(b));
    } else {
      return a * b;
    }
  }
  static T min(T a, T b) {
    if constexpr (std::is_same_v<T, bool>) {
      return a && b;
    } else if constexpr (is_floating_v<T>) {
      const auto fa = to_compute(a), fb = to_compute(b);
      return (std::isnan(fa) || fa < fb) ? a : b;
    } else {
      return a < b ? a : b;
    }
  }
  static T max(T a, T b) {
    if constexpr (std::is_same_v<T, bool>) {
      return a || b;
    } else if constexpr (is_floating_v<T>) {
      const auto fa = to_compute(a), fb = to_compute(b);
      return (std::isnan(fa) || fa > fb) ? a : b;
    } else {
      return a > b ? a : b;
    }
  }
};

// A plain loop over restrict-free pointers: the float and integer sum/min/max
// cases vectorize at -O3.
template <class T, class F>
void apply(T* out, const T* a, const T* b, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
}

template <class T>
void reduce_typed(T* out, const T* a, const T* b, size_t n, int32_t op) {
  switch (op) {
    case TFL_REDUCE_SUM:
    case TFL_REDUCE_AVG: apply(out, a, b, n, [](T x, T y) { return Ops<T>::sum(x, y); }); return;
    case TFL_REDUCE_PRODUCT: apply(out, a, b, n, [](T x, T y) { return Ops<T>::prod(x, y); }); return;
    case TFL_REDUCE_MIN: apply(out, a, b, n, [](T x, T y) { return Ops<T>::min(x, y); }); return;
    case TFL_REDUCE_MAX: apply(out, a, b, n, [](T x, T y) { return Ops<T>::max(x, y); }); return;
    default: invalid_argument("unknown reduce op ", op);
  }
}

}  // namespace

void check_reduction(int32_t dtype, int32_t op) {
  if (op < TFL_REDUCE_SUM || op > TFL_REDUCE_AVG)
    invalid_argument("op ", op, " is not a TFL_ReduceOp (sum, product, min, max or avg)");
  if (dtype_size(dtype) == 0)
    flemu::fail(TFL_ERR_UNIMPLEMENTED, cat("flemu cannot reduce ", dtype_name(dtype),
                                           " tensors (reductions take bool, uint8, int8-int64, float16, bfloat16, "
                                           "float32, float64); all_gather, broadcast, all_to_all and send/recv "
                                           "take any dtype"));
  if (dtype == TFL_DTYPE_BOOL && op == TFL_REDUCE_AVG)
    invalid_argument("avg is not defined for bool tensors (use sum for a logical or, min for a logical and)");
}

void reduce_to(void* out, const void* a, const void* b, size_t count, int32_t dtype, int32_t op) {
  if (count == 0) return;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    reduce_typed(static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), count, op);
  });
}

void reduce_into(void* dst, const void* src, size_t count, int32_t dtype, int32_t op) {
  reduce_to(dst, dst, src, count, dtype, op);
}

void finish_reduction(void* buf, size_t count, int32_t dtype, int32_t op, int divisor) {
  if (op != TFL_REDUCE_AVG || divisor == 1 || count == 0) return;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(buf);
    if constexpr (std::is_same_v<T, bool>) {
      invalid_argument("avg is not defined for bool tensors");
    } else if constexpr (std::is_integral_v<T>) {
      for (size_t i = 0; i < count; ++i) p[i] = static_cast<T>(static_cast<int64_t>(p[i]) / divisor);
    } else if constexpr (is_reduced_float_v<T>) {
      for (size_t i = 0; i < count; ++i) p[i] = T(static_cast<float>(p[i]) / static_cast<float>(divisor));
    } else {
      const T d = static_cast<T>(divisor);
      for (size_t i = 0; i < count; ++i) p[i] = p[i] / d;
    }
  });
}

}  // namespace flemu::comm
