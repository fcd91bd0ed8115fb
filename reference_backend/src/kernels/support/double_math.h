// float32 functions evaluated in double, without libm calls or branches, so
// loops over them vectorize: expm1, log10, sinh, cosh,
// atanh, asinh, acosh, logit, and the activations elu (with its
// gradient) and mish. Each evaluates its formula in double from a
// float32 argument, with relative error near 1e-13, and rounds once to float: within
// 1 ulp of the true value (reference_backend/tests/fast_math_check.cpp holds
// each to float64 libm). Formulas are chosen so that nothing cancels: expm1
// near 0 and atanh near 0 are computed from small quantities
// directly. Double inputs take libm (the *_of dispatchers; logit and elu,
// one definition for both, through the wide_* functions).
// The building blocks: round_with_pow2, exp_parts (exp and expm1 of a double
// argument), log_f64 and log1p_f64 (of a double argument, no division).
#ifndef FLEMU_KERNELS_SUPPORT_DOUBLE_MATH_H_
#define FLEMU_KERNELS_SUPPORT_DOUBLE_MATH_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "float_form.h"
#include "mul_add.h"

namespace flemu {

inline __attribute__((always_inline)) double bits_to_double(int64_t bits) {
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

inline __attribute__((always_inline)) int64_t double_to_bits(double d) {
  int64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  return bits;
}

// 1.5 * 2^52: adding it rounds a double below 2^51 in magnitude to an integer,
// held in the sum's low mantissa bits (no double-to-int64 conversion, which
// AVX2 has no vector form of).
constexpr double kRoundMagic = 6755399441055744.0;

// n = round(x) for |x| < 2^51 and pow2 = 2^n for n in [-1022, 1023], both
// from the sum x + kRoundMagic (n sits in its low mantissa bits).
struct Rounded {
  double n, pow2;
};

inline __attribute__((always_inline)) Rounded round_with_pow2(double x) {
  const double shifted = x + kRoundMagic;
  return {shifted - kRoundMagic,
          bits_to_double((double_to_bits(shifted) - double_to_bits(kRoundMagic) + 1023) << 52)};
}

// exp(x) = scale * (1 + m1) for x in [-708, 708] (callers clamp): n =
// round(x / ln 2), r = x - n ln 2 with ln 2 in two parts (the first of 32
// bits, so n times it is exact), |r| <= 0.35, m1 = expm1(r) from its Taylor
// series to r^11 (truncation below 3e-14 relative), scale = 2^n from the bits.
struct ExpParts {
  double scale, m1;
};

inline __attribute__((always_inline)) ExpParts exp_parts(double x) {
  const Rounded n = round_with_pow2(x * 1.44269504088896340736);
  const double r = mul_add(n.n, -1.90821492927058770002e-10, mul_add(n.n, -6.93147180369123816490e-01, x));
  double p = 1.0 / 39916800.0;
  p = mul_add(p, r, 1.0 / 3628800.0);
  p = mul_add(p, r, 1.0 / 362880.0);
  p = mul_add(p, r, 1.0 / 40320.0);
  p = mul_add(p, r, 1.0 / 5040.0);
  p = mul_add(p, r, 1.0 / 720.0);
  p = mul_add(p, r, 1.0 / 120.0);
  p = mul_add(p, r, 1.0 / 24.0);
  p = mul_add(p, r, 1.0 / 6.0);
  p = mul_add(p, r, 0.5);
  return {n.pow2, mul_add(r * r, p, r)};
}

// x clamped to exp_parts' range; NaN becomes 0 (callers restore it).
inline __attribute__((always_inline)) double exp_argument(double x) {
  double xc = x < -708.0 ? -708.0 : x;
  xc = xc > 708.0 ? 708.0 : xc;
  return x != x ? 0.0 : xc;
}

// exp and expm1 of a double argument, for float32 results: above 708 they
// are those of 708 (inf once rounded to float); below -708, 0 and expm1(-708)
// (-1 in float). NaN gives NaN.
inline __attribute__((always_inline)) double exp_f64(double x) {
  const ExpParts e = exp_parts(exp_argument(x));
  const double out = x < -708.0 ? 0.0 : mul_add(e.scale, e.m1, e.scale);
  return x != x ? x : out;
}

inline __attribute__((always_inline)) double expm1_f64(double x) {
  const ExpParts e = exp_parts(exp_argument(x));
  // scale - 1 is exact; where n is 0 the result is m1 itself, with no cancellation.
  const double out = mul_add(e.scale, e.m1, e.scale - 1.0);
  return x != x || x == 0.0 ? x : out;  // NaN, and -0 (m1 is +0 there)
}

// log(1 + f) = f - f^2 / 2 + f^3 g(f) on [sqrt(1/2) - 1, sqrt(2) - 1]: g's
// coefficients, lowest degree first, are the degree-14 interpolant of
// (log1p(f) - f + f^2 / 2) / f^3 at that interval's Chebyshev nodes
// (numpy.polynomial.chebyshev.chebfit, then cheb2poly, mapped to f), within
// 6e-14 of log(1 + f) relative over the interval when evaluated in double.
// A polynomial, not a series in f / (2 + f): a vector division of doubles
// costs as much as the sixteen multiply-adds.
constexpr double kLog1pPoly[] = {
    0.33333333333352666,  -0.2499999999867882,  0.19999999980514982,  -0.16666667051299439,
    0.14285717669497522,  -0.12499969436475716, 0.1111088346111008,   -0.10000953649623533,
    0.09098289553557598,  -0.08322162999100802, 0.07570794490265527,  -0.07127917833288785,
    0.0760588725388901,   -0.07432473510256399, 0.03767675372058793};

// log(x) for a double x: x = 2^e m with m in [sqrt(1/2), sqrt(2)), f = m - 1
// (exact), log(1 + f) from kLog1pPoly (its even and odd coefficients as two
// chains in f^2, which run side by side), plus e ln 2. Denormal doubles are
// not handled (no float32 argument or formula here makes one); 0 gives
// -inf, negatives NaN, inf inf.
inline __attribute__((always_inline)) double log_f64(double x) {
  const uint64_t bits = static_cast<uint64_t>(double_to_bits(x));
  const double m = bits_to_double(static_cast<int64_t>((bits & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL));
  const bool high = m > 1.41421356237309504880;  // m in [1, 2) here
  // The exponent field (x is positive here; others are replaced below) as a
  // double through the rounding constant: e + 1.5 * 2^52 - 1.5 * 2^52.
  const int64_t e = static_cast<int64_t>((bits >> 52) & 0x7ff) - 1023 + (high ? 1 : 0);
  const double ed = bits_to_double(double_to_bits(kRoundMagic) + e) - kRoundMagic;
  const double f = high ? m * 0.5 - 1.0 : m - 1.0;
  const double z = f * f;
  double even = kLog1pPoly[14], odd = kLog1pPoly[13];
#pragma GCC unroll 8
  for (int k = 12; k >= 0; k -= 2) {
    even = mul_add(even, z, kLog1pPoly[k]);
    if (k > 0) odd = mul_add(odd, z, kLog1pPoly[k - 1]);
  }
  const double g = mul_add(f, odd, even);
  double out = mul_add(ed, 6.93147180559945309417e-01, mul_add(z, mul_add(f, g, -0.5), f));
  out = x == HUGE_VAL ? x : out;
  out = x == 0.0 ? -HUGE_VAL : out;
  out = x < 0.0 ? std::numeric_limits<double>::quiet_NaN() : out;
  return x != x ? x : out;
}

// log(1 + z) for a double z: log(u) with u = 1 + z rounded, plus d / u for
// u's rounding error d = z - (u - 1) (exact). Where that correction matters
// (|z| below 2^-20 or so: above, it is under 2^-32 of the result) u is
// within 2^-20 of 1 and 2 - u stands for 1 / u; above |z| = 1/2, where
// 2 - u would not, the correction is dropped (it is then under 2^-52 of the
// result). No division; z itself where u is 1.
inline __attribute__((always_inline)) double log1p_f64(double z) {
  const double u = 1.0 + z;
  const double d = z - (u - 1.0);
  double out = mul_add(d, std::fabs(z) < 0.5 ? 2.0 - u : 0.0, log_f64(u));
  out = u == 1.0 ? z : out;
  out = u == 0.0 ? -HUGE_VAL : out;
  return z == HUGE_VAL ? z : out;
}

// ---- float32 functions (each rounds its double once) ----

inline __attribute__((always_inline)) float expm1_f32(float x) { return static_cast<float>(expm1_f64(x)); }

inline __attribute__((always_inline)) float log10_f32(float x) {
  return static_cast<float>(log_f64(x) * 0.43429448190325182765);
}

// sinh from expm1 (no cancellation near 0): with E = expm1(|x|),
// sinh |x| = (E + E / (E + 1)) / 2; cosh = (e + 1/e) / 2.
inline __attribute__((always_inline)) float sinh_f32(float x) {
  const double em1 = expm1_f64(std::fabs(static_cast<double>(x)));
  return static_cast<float>(std::copysign(0.5 * (em1 + em1 / (em1 + 1.0)), static_cast<double>(x)));
}

inline __attribute__((always_inline)) float cosh_f32(float x) {
  const double e = exp_f64(std::fabs(static_cast<double>(x)));
  return static_cast<float>(0.5 * (e + 1.0 / e));
}

// atanh x = log1p(2x / (1 - x)) / 2.
inline __attribute__((always_inline)) float atanh_f32(float x) {
  const double xd = x;
  return static_cast<float>(0.5 * log1p_f64(2.0 * xd / (1.0 - xd)));
}

// asinh |x| = log1p(a + a^2 / (1 + sqrt(1 + a^2))), a = |x|, and log(a) +
// ln 2 from 2^28 on (where the two agree in double; it also takes inf); acosh x = log1p(t + sqrt(t (t + 2)))
// with t = x - 1 exact, small near x = 1 where log(x + sqrt(x^2 - 1)) would
// cancel; x < 1 gives NaN.
inline __attribute__((always_inline)) float asinh_f32(float x) {
  const double a = std::fabs(static_cast<double>(x)), a2 = a * a;
  const double out = a > 268435456.0 ? log_f64(a) + 6.93147180559945309417e-01
                                     : log1p_f64(a + a2 / (1.0 + std::sqrt(1.0 + a2)));
  return static_cast<float>(std::copysign(out, static_cast<double>(x)));
}

inline __attribute__((always_inline)) float acosh_f32(float x) {
  const double t = static_cast<double>(x) - 1.0;
  const float out = static_cast<float>(log1p_f64(t + std::sqrt(t * (t + 2.0))));
  return x < 1.0f ? std::numeric_limits<float>::quiet_NaN() : out;
}

// mish(x) = x tanh(softplus(x)); with e = exp(x), tanh(log1p(e)) = n / (n + 2)
// where n = e (e + 2); beyond x = 20 the factor is 1 in float.
inline __attribute__((always_inline)) float mish_f32(float x) {
  const double e = exp_f64(x > 20.0f ? 20.0 : static_cast<double>(x)), n = e * (e + 2.0);
  return static_cast<float>(static_cast<double>(x) * (n / (n + 2.0)));
}

// ---- the compute type's forms: float32 above, libm for double ----

FLEMU_FLOAT_FORM(expm1_of, expm1_f32, std::expm1)
FLEMU_FLOAT_FORM(log10_of, log10_f32, std::log10)
FLEMU_FLOAT_FORM(sinh_of, sinh_f32, std::sinh)
FLEMU_FLOAT_FORM(cosh_of, cosh_f32, std::cosh)
FLEMU_FLOAT_FORM(atanh_of, atanh_f32, std::atanh)
FLEMU_FLOAT_FORM(asinh_of, asinh_f32, std::asinh)
FLEMU_FLOAT_FORM(acosh_of, acosh_f32, std::acosh)

template <class C>
inline __attribute__((always_inline)) C mish_of(C x) {
  if constexpr (std::is_same_v<C, float>) return mish_f32(x);
  else return x * std::tanh(std::log1p(std::exp(x)));
}

// exp, expm1 and log of a double argument at the compute type C's
// precision: the forms above where C is float (a float32 result rounds the
// double once), libm where C is double.
template <class C>
inline __attribute__((always_inline)) double wide_exp(double x) {
  if constexpr (std::is_same_v<C, float>) return exp_f64(x);
  else return std::exp(x);
}
template <class C>
inline __attribute__((always_inline)) double wide_expm1(double x) {
  if constexpr (std::is_same_v<C, float>) return expm1_f64(x);
  else return std::expm1(x);
}
template <class C>
inline __attribute__((always_inline)) double wide_log(double x) {
  if constexpr (std::is_same_v<C, float>) return log_f64(x);
  else return std::log(x);
}

// logit x = log(x / (1 - x)), x already clamped where eps is given.
template <class C>
inline __attribute__((always_inline)) C logit_of(C x) {
  const double xd = x;
  return static_cast<C>(wide_log<C>(xd / (1.0 - xd)));
}

// elu(x) = scale x for x > 0, alpha scale expm1(input_scale x) otherwise.
template <class C>
inline __attribute__((always_inline)) C elu_of(C x, double alpha_scale, double scale, double input_scale) {
  const double xd = x;
  return static_cast<C>(x > C(0) ? xd * scale : alpha_scale * wide_expm1<C>(xd * input_scale));
}

// elu's gradient (PyTorch's: the lower branch at x <= 0; NaN takes the
// upper), from the input x, or from the result y where is_result:
// g input_scale alpha_scale exp(input_scale x), g input_scale (y + alpha_scale);
// g scale above 0.
template <class C>
inline __attribute__((always_inline)) C elu_grad(C g, C x, bool is_result, double alpha_scale, double scale,
                                                 double input_scale) {
  const double gd = g, xd = x;
  const double below = is_result ? gd * input_scale * (xd + alpha_scale)
                                 : gd * input_scale * alpha_scale * wide_exp<C>(xd * input_scale);
  return static_cast<C>(x <= C(0) ? below : gd * scale);
}

}  // namespace flemu

#endif  // FLEMU_KERNELS_SUPPORT_DOUBLE_MATH_H_
