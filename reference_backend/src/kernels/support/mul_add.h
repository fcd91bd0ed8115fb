// a * b + c with one rounding, alike in every build: the AVX2 and AVX-512
// builds (isa.h: their targets include FMA) compile it to one fused
// multiply-add instruction; the baseline build, and code outside with_isa,
// call libm's fma, which gives the same bits. flemu is compiled without
// contraction (-ffp-contract=off), so only what is written as mul_add
// fuses: the polynomials and range reductions of fast_math.h and
// double_math.h, where a fused step is as accurate as the two it replaces
// or more, and half as long (their loops are bound by the latency of those
// chains).
#ifndef FLEMU_KERNELS_SUPPORT_MUL_ADD_H_
#define FLEMU_KERNELS_SUPPORT_MUL_ADD_H_

#include <cmath>

namespace flemu {

inline __attribute__((always_inline)) float mul_add(float a, float b, float c) { return std::fma(a, b, c); }
inline __attribute__((always_inline)) double mul_add(double a, double b, double c) { return std::fma(a, b, c); }

}  // namespace flemu

#endif  // FLEMU_KERNELS_SUPPORT_MUL_ADD_H_
