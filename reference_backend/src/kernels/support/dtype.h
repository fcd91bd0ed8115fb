// Element types flemu kernels handle, fp16/bf16 conversions
// (round-to-nearest-even), conversions between any two of them, and a
// switch that turns a runtime TFL_DType into a compile-time type.
#ifndef FLEMU_KERNELS_SUPPORT_DTYPE_H_
#define FLEMU_KERNELS_SUPPORT_DTYPE_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "../../errors.h"
#include "torch_fl/types.h"

namespace flemu {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_half_bits(float f) {
  const uint32_t x = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u)  // inf or NaN (NaN stays quiet)
    return static_cast<uint16_t>(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0u));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (a < 0x38800000u) {
    // Subnormal or zero: adding 0.5 aligns the float's ulp with the half
    // subnormal step (2^-24), so the FPU does the round-to-nearest-even.
    const float shifted = bits_float(a) + 0.5f;
    return static_cast<uint16_t>(sign | (float_bits(shifted) - 0x3f000000u));
  }
  a += 0xc8000fffu + ((a >> 13) & 1u);  // rebias exponent by -112, round to nearest even
  return static_cast<uint16_t>(sign | (a >> 13));
}

inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1fu) return bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;  // mant * 2^-24, exact
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

inline float bf16_bits_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

struct Half {
  uint16_t bits;
  Half() = default;
  explicit Half(float f) : bits(float_to_half_bits(f)) {}
  operator float() const { return half_bits_to_float(bits); }
};

struct BFloat16 {
  uint16_t bits;
  BFloat16() = default;
  explicit BFloat16(float f) : bits(float_to_bf16_bits(f)) {}
  operator float() const { return bf16_bits_to_float(bits); }
};

template <class T>
constexpr bool is_reduced_float_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <class T>
constexpr bool is_floating_v = std::is_floating_point_v<T> || is_reduced_float_v<T>;

// What elementwise arithmetic on T computes in: float for fp16/bf16/fp32,
// double for fp64, int64 (wrapping) for bool and integers.
template <class T>
using compute_t =
    std::conditional_t<std::is_same_v<T, double>, double, std::conditional_t<is_floating_v<T>, float, int64_t>>;

template <class T>
inline compute_t<T> to_compute(T v) {
  if constexpr (is_reduced_float_v<T>) return static_cast<float>(v);
  else return static_cast<compute_t<T>>(v);
}

// Float -> integer without undefined behaviour: NaN and out-of-range values
// become INT64_MIN, which is what x86 conversion instructions produce.
template <class F>
inline int64_t float_to_i64(F v) {
  if (!(v >= static_cast<F>(-9223372036854775808.0) && v < static_cast<F>(9223372036854775808.0)))
    return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

// Converts between any two element types the way PyTorch's casts do.
template <class To, class From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    if constexpr (is_reduced_float_v<From>) return static_cast<float>(v) != 0.0f;
    else return v != From(0);
  } else if constexpr (is_reduced_float_v<To>) {
    if constexpr (is_reduced_float_v<From>) return To(static_cast<float>(v));
    else return To(static_cast<float>(v));
  } else if constexpr (std::is_floating_point_v<To>) {
    if constexpr (is_reduced_float_v<From>) return static_cast<To>(static_cast<float>(v));
    else return static_cast<To>(v);
  } else {  // integral destination
    if constexpr (is_reduced_float_v<From>) return static_cast<To>(float_to_i64(static_cast<float>(v)));
    else if constexpr (std::is_floating_point_v<From>) return static_cast<To>(float_to_i64(v));
    else return static_cast<To>(v);  // modular, as two's complement casts are
  }
}

// Stores an arithmetic result computed in compute_t<T>.
template <class T>
inline T from_compute(compute_t<T> c) {
  return convert<T>(c);
}

template <class T>
struct TypeTag {
  using type = T;
};

int64_t dtype_size(int32_t dtype);      // 0 for dtypes flemu does not handle
// Bytes per element of any TFL_DType, those flemu's kernels decline included
// (range checks, data movement); 0 when unknown.
int64_t element_size(int32_t dtype);
const char* dtype_name(int32_t dtype);  // "float32", ... or "dtype <n>"
bool dtype_is_floating(int32_t dtype);

// Calls fn(TypeTag<T>{}) for the C++ type of `dtype`; throws for others.
template <class Fn>
decltype(auto) dispatch_dtype(int32_t dtype, Fn&& fn) {
  switch (dtype) {
    case TFL_DTYPE_BOOL: return fn(TypeTag<bool>{});
    case TFL_DTYPE_UINT8: return fn(TypeTag<uint8_t>{});
    case TFL_DTYPE_INT8: return fn(TypeTag<int8_t>{});
    case TFL_DTYPE_INT16: return fn(TypeTag<int16_t>{});
    case TFL_DTYPE_INT32: return fn(TypeTag<int32_t>{});
    case TFL_DTYPE_INT64: return fn(TypeTag<int64_t>{});
    case TFL_DTYPE_FLOAT16: return fn(TypeTag<Half>{});
    case TFL_DTYPE_BFLOAT16: return fn(TypeTag<BFloat16>{});
    case TFL_DTYPE_FLOAT32: return fn(TypeTag<float>{});
    case TFL_DTYPE_FLOAT64: return fn(TypeTag<double>{});
    default: invalid_argument("dtype ", dtype_name(dtype), " is not supported by flemu kernels");
  }
}

// Same, for the floating types only.
template <class Fn>
decltype(auto) dispatch_floating(int32_t dtype, Fn&& fn) {
  switch (dtype) {
    case TFL_DTYPE_FLOAT16: return fn(TypeTag<Half>{});
    case TFL_DTYPE_BFLOAT16: return fn(TypeTag<BFloat16>{});
    case TFL_DTYPE_FLOAT32: return fn(TypeTag<float>{});
    case TFL_DTYPE_FLOAT64: return fn(TypeTag<double>{});
    default: invalid_argument("dtype ", dtype_name(dtype), " is not a floating dtype this kernel takes");
  }
}

// Element access through a runtime dtype, for the rare mixed-dtype paths:
// values travel as double (floating) or int64 (integral).
using LoadF64 = double (*)(const char*);
using LoadI64 = int64_t (*)(const char*);
using StoreF64 = void (*)(char*, double);
using StoreI64 = void (*)(char*, int64_t);
LoadF64 loader_f64(int32_t dtype);
LoadI64 loader_i64(int32_t dtype);
StoreF64 storer_f64(int32_t dtype);
StoreI64 storer_i64(int32_t dtype);

}  // namespace flemu

#endif  // FLEMU_KERNELS_SUPPORT_DTYPE_H_
