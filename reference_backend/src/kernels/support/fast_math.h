// float32 exp, erf and tanh without libm calls or branches, so loops over
// them vectorize (libm's expf, erff and tanhf are scalar calls): used where a
// kernel evaluates them per element (exp, tanh, gelu in both forms and their
// backward, softmax and log-softmax). The activations built from them
// (sigmoid, gelu and its gradient) are defined here once, for the eager
// kernels and the fused-region executor alike, so a compiled region gives
// the eager kernels' bits.
// exp: Cody-Waite range reduction and a degree-6 polynomial (Cephes), within
// 1 ulp of the true value, with 0, inf and NaN where expf gives them. erf:
// its Taylor series below 0.5 and Abramowitz and Stegun 7.1.26 above (the
// approximation PyTorch's vectorized CPU erf uses), within 3.2e-7 of the true
// value in float32. tanh: Cephes' odd polynomial below 0.625 in magnitude,
// 1 - 2 / (exp(2|x|) + 1) above, within 2 ulp.
#ifndef FLEMU_KERNELS_SUPPORT_FAST_MATH_H_
#define FLEMU_KERNELS_SUPPORT_FAST_MATH_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace flemu {

inline __attribute__((always_inline)) float bits_to_float(int32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Each is always inlined: a call in a loop stops the loop from vectorizing.
inline __attribute__((always_inline)) float exp_f32(float x) {
  // Beyond these, expf is inf or 0 (-104 is below the smallest denormal); NaN
  // is replaced by 0 on the way and restored at the end. Plain selects, not
  // fmin/fmax (library calls under IEEE rules), so the loop stays straight.
  float xc = x < -104.0f ? -104.0f : x;
  xc = xc > 88.8f ? 88.8f : xc;
  xc = x != x ? 0.0f : xc;
  // n = round(x / ln 2), by the 1.5 * 2^23 trick (valid for |x / ln 2| < 2^22).
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  // r = x - n ln 2, with ln 2 split so the product is exact.
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  // 2^n in two factors, so n from -150 to 128 scales without overflow of the exponent field.
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t half = ni / 2;
  const float s1 = bits_to_float((half + 127) << 23), s2 = bits_to_float((ni - half + 127) << 23);
  float out = y * s1 * s2;
  out = x < -104.0f ? 0.0f : out;
  out = x > 88.8f ? HUGE_VALF : out;
  return x != x ? x : out;
}

inline __attribute__((always_inline)) float erf_f32(float x) {
  const float a = std::fabs(x);
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  const float poly = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t +
                      0.254829592f) * t;
  const float far = 1.0f - poly * exp_f32(-a * a);
  // Near 0 that difference cancels to a few correct digits; the Taylor series
  // 2/sqrt(pi) * sum (-1)^k x^(2k+1) / (k! (2k+1)) is exact there.
  const float x2 = a * a;
  float series = -1.0f / 9360.0f;
  series = series * x2 + 1.0f / 1320.0f;
  series = series * x2 - 1.0f / 216.0f;
  series = series * x2 + 1.0f / 42.0f;
  series = series * x2 - 1.0f / 10.0f;
  series = series * x2 + 1.0f / 3.0f;
  series = series * x2 - 1.0f;
  const float near = -1.12837916709551257f * a * series;
  return std::copysign(a < 0.5f ? near : far, x);
}

// The standard normal CDF at x, 0.5 * erfc(-x / sqrt(2)), from erfc(a) =
// t * P(t) * exp(-a^2) (Abramowitz and Stegun 7.1.26, absolute error below
// 1.5e-7) with a = |x| / sqrt(2): no cancellation for negative x, where
// 1 + erf(x / sqrt(2)) loses the digits of a small result. *e receives
// exp(-x^2 / 2), which the standard normal PDF is a multiple of.
inline __attribute__((always_inline)) float normal_cdf_f32(float x, float* e) {
  const float a = std::fabs(x) * 0.70710678118654752440f;
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  const float poly = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t +
                      0.254829592f) * t;
  *e = exp_f32(-a * a);
  const float half_erfc = 0.5f * poly * *e;
  return x >= 0.0f ? 1.0f - half_erfc : half_erfc;
}

inline __attribute__((always_inline)) float tanh_f32(float x) {
  const float a = std::fabs(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float near = p * z * x + x;
  // Beyond 44, exp(2|x|) would overflow; tanh is 1 in float32 long before.
  const float e = exp_f32(2.0f * (a > 44.0f ? 44.0f : a));
  const float far = std::copysign(1.0f - 2.0f / (e + 1.0f), x);
  return a < 0.625f ? near : far;  // NaN takes `far`, which is NaN
}

// The compute type's exp, erf and tanh: the vectorizable float32 forms above, libm for double.
template <class C>
inline __attribute__((always_inline)) C exp_of(C x) {
  if constexpr (std::is_same_v<C, float>) return exp_f32(x);
  else return std::exp(x);
}
template <class C>
inline __attribute__((always_inline)) C erf_of(C x) {
  if constexpr (std::is_same_v<C, float>) return erf_f32(x);
  else return std::erf(x);
}
template <class C>
inline __attribute__((always_inline)) C tanh_of(C x) {
  if constexpr (std::is_same_v<C, float>) return tanh_f32(x);
  else return std::tanh(x);
}

template <class C>
inline __attribute__((always_inline)) C sigmoid_of(C x) {
  // exp of a non-positive argument only: no overflow for large |x|. Both
  // branches are computed and one selected, so the loop vectorizes.
  const C e = exp_of(x >= C(0) ? -x : x);
  const C pos = C(1) / (C(1) + e), neg = e / (C(1) + e);
  return x >= C(0) ? pos : neg;
}

// gelu's two forms: exact (through erf) and the tanh approximation.
enum class GeluForm { Exact, Tanh };

namespace gelu_constants {
constexpr double kSqrt1_2 = 0.70710678118654752440;     // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/sqrt(2*pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588; // sqrt(2/pi)
constexpr double kKappa = 0.044715;
}  // namespace gelu_constants

// The form is a template argument: a loop then holds one form only; neither
// calls a library function in float32, so both vectorize.
template <GeluForm form, class C>
inline __attribute__((always_inline)) C gelu_of(C x) {
  using namespace gelu_constants;
  if constexpr (form == GeluForm::Exact && std::is_same_v<C, float>) {
    float e;
    return x * normal_cdf_f32(x, &e);
  }
  if constexpr (form == GeluForm::Exact) return C(0.5) * x * (C(1) + erf_of(x * C(kSqrt1_2)));
  const C inner = C(kSqrt2OverPi) * (x + C(kKappa) * x * x * x);
  return C(0.5) * x * (C(1) + tanh_of(inner));
}

// d gelu(x) / dx, times g.
template <GeluForm form, class C>
inline __attribute__((always_inline)) C gelu_grad(C g, C x) {
  using namespace gelu_constants;
  if constexpr (form == GeluForm::Exact && std::is_same_v<C, float>) {
    float e;
    const float cdf = normal_cdf_f32(x, &e);
    return g * (cdf + x * (float(kInvSqrt2Pi) * e));
  }
  if constexpr (form == GeluForm::Exact) {
    const C cdf = C(0.5) * (C(1) + erf_of(x * C(kSqrt1_2)));
    const C pdf = C(kInvSqrt2Pi) * exp_of(C(-0.5) * x * x);
    return g * (cdf + x * pdf);
  }
  const C x2 = x * x;
  const C t = tanh_of(C(kSqrt2OverPi) * (x + C(kKappa) * x2 * x));
  const C dinner = C(kSqrt2OverPi) * (C(1) + C(3 * kKappa) * x2);
  return g * (C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * dinner);
}

}  // namespace flemu

#endif  // FLEMU_KERNELS_SUPPORT_FAST_MATH_H_
