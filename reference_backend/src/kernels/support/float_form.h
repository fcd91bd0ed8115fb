// FLEMU_FLOAT_FORM(name, f32, libm) defines name<C>(x): the function's
// vectorizable float32 form f32 where the compute type C is float (fast_math.h,
// double_math.h), libm's where it is double.
#ifndef FLEMU_KERNELS_SUPPORT_FLOAT_FORM_H_
#define FLEMU_KERNELS_SUPPORT_FLOAT_FORM_H_

#include <type_traits>

#define FLEMU_FLOAT_FORM(name, f32, libm)                  \
  template <class C>                                       \
  inline __attribute__((always_inline)) C name(C x) {      \
    if constexpr (std::is_same_v<C, float>) return f32(x); \
    else return libm(x);                                   \
  }

#endif  // FLEMU_KERNELS_SUPPORT_FLOAT_FORM_H_
