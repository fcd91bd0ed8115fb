// float32 exp, exp2, erf, atan, asin, acos, tanh, log, log2, log1p, sin, cos and tan without
// libm calls or branches, so loops over them vectorize (libm's are scalar calls): used
// where a kernel evaluates them per element (exp, exp2, erf, atan, asin, acos, tanh, log, log2, log1p, sin,
// cos, tan, gelu in both forms and their backward, softmax and log-softmax). The
// activations built from them
// (sigmoid, gelu and its gradient) are defined here once, for the eager
// kernels and the fused-region executor alike, so a compiled region gives
// the eager kernels' bits.
// exp: Cody-Waite range reduction and a degree-6 polynomial (Cephes), within
// 1 ulp of the true value, with 0, inf and NaN where expf gives them. erf:
// polynomials in float for erf below 1 and erfc above, within 0.82 ulp.
// atan: a polynomial in float on [0, 1] and pi/2 - atan(1/|x|) above, within 0.85 ulp.
// asin and acos: a polynomial on [0, 1/2] and the half-angle square root above,
// within 0.67 and 0.65 ulp.
// tanh: Cephes' odd polynomial below 0.625 in magnitude,
// 1 - 2 / (exp(2|x|) + 1) above, within 2 ulp. exp2, log, log2, log1p, sin, cos and tan:
// below, each with its method and bound.
#ifndef FLEMU_KERNELS_SUPPORT_FAST_MATH_H_
#define FLEMU_KERNELS_SUPPORT_FAST_MATH_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "float_form.h"
#include "mul_add.h"

namespace flemu {

inline __attribute__((always_inline)) float bits_to_float(int32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline __attribute__((always_inline)) int32_t float_to_bits(float f) {
  int32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

// Each is always inlined: a call in a loop stops the loop from vectorizing.
// exp(x) = 2^n exp(r) for |x / ln 2| < 2^22: n = round(x / ln 2) by the
// 1.5 * 2^23 trick (the sum holds n in its low mantissa bits, so n needs no
// float-to-int conversion), r = x - n ln 2 with ln 2 split so the product is
// exact, a polynomial for exp(r). n is taken in uint32_t: a NaN's garbage
// exponent wraps instead of overflowing.
struct ExpSplit {
  float y;     // exp(r), in [0.70, 1.42]
  uint32_t n;  // exp(x) = 2^n exp(r)
};

// 1.5 * 2^23: adding it rounds a float below 2^22 in magnitude to an
// integer, which the sum holds in its low mantissa bits (shifted_int).
constexpr float kShift = 12582912.0f;

inline __attribute__((always_inline)) uint32_t shifted_int(float shifted) {
  return static_cast<uint32_t>(float_to_bits(shifted)) - static_cast<uint32_t>(float_to_bits(kShift));
}

// y * 2^n for n from -150 to 150, 2^n in two factors so it scales without
// overflow of the exponent field: the first product is exact, the second
// rounds once (to a denormal, or to inf, where the result is one).
inline __attribute__((always_inline)) float scale_by_pow2(float y, uint32_t n) {
  const uint32_t half = static_cast<uint32_t>(static_cast<int32_t>(n) >> 1);
  const float s1 = bits_to_float(static_cast<int32_t>((half + 127u) << 23));
  const float s2 = bits_to_float(static_cast<int32_t>((n - half + 127u) << 23));
  return y * s1 * s2;
}

inline __attribute__((always_inline)) ExpSplit exp_split(float xc) {
  const float shifted = mul_add(xc, 1.44269504088896341f, kShift);
  const float n = shifted - kShift;
  const float r = mul_add(n, 2.12194440e-4f, mul_add(n, -0.693359375f, xc));
  float p = 1.9875691500e-4f;
  p = mul_add(p, r, 1.3981999507e-3f);
  p = mul_add(p, r, 8.3334519073e-3f);
  p = mul_add(p, r, 4.1665795894e-2f);
  p = mul_add(p, r, 1.6666665459e-1f);
  p = mul_add(p, r, 5.0000001201e-1f);
  return {mul_add(p, r * r, r) + 1.0f, shifted_int(shifted)};
}

// exp of an argument already clamped to [-104, 104] (or NaN, which gives
// NaN). The clamp's ends need no select: -104 gives +0, and from 88.73 the
// scale overflows to inf.
inline __attribute__((always_inline)) float exp_f32_clamped(float xc) {
  const ExpSplit e = exp_split(xc);
  return scale_by_pow2(e.y, e.n);
}

// exp of an argument in [-87, 88] (or NaN), where the result and 2^n are
// normal floats: one product, the same bits as scale_by_pow2's two (whose
// first is exact).
inline __attribute__((always_inline)) float exp_f32_normal(float xc) {
  const ExpSplit e = exp_split(xc);
  return e.y * bits_to_float(static_cast<int32_t>((e.n + 127u) << 23));
}

inline __attribute__((always_inline)) float exp_f32(float x) {
  // Below -104 expf is 0 (the smallest denormal is above exp(-103.3)), from
  // 88.73 inf: |x| is clamped to 104, one compare and one select (two
  // one-sided clamps compiled to seven instructions, for their NaN rules);
  // 2^n up to 2^150 still scales without overflow of the exponent field in
  // scale_by_pow2, and overflows to inf there.
  // Plain selects, not fmin/fmax (library calls under IEEE rules), so the
  // loop stays straight; a NaN passes the clamp and is returned as given.
  const float xc = std::fabs(x) > 104.0f ? std::copysign(104.0f, x) : x;
  const float out = exp_f32_clamped(xc);
  return x != x ? x : out;
}

// exp_f32 of an argument known not to be positive (sigmoid's, the normal
// PDF's), with exp_f32's bits there and two selects fewer; NaN gives NaN.
inline __attribute__((always_inline)) float exp_nonpositive_f32(float x) {
  return exp_f32_clamped(x < -104.0f ? -104.0f : x);
}

// exp2: 2^x = 2^n 2^r with n = round(x) by the 1.5 * 2^23 trick and r = x - n
// (exact, |r| <= 1/2), 2^r = 1 + r q(r) with q the degree-5 least-squares
// fit of (2^r - 1) / r at 60 Chebyshev nodes of [-1/2, 1/2] (numpy's
// chebfit, then cheb2poly), coefficients rounded to float; 2^n scales in two
// factors (scale_by_pow2). Within 0.92 ulp of exp2 over all 2^32
// float32 inputs (0.88 where the result is a normal float);
// an integer x gives 2^x exactly (2^-150, a tie, rounds to 0; so does all
// below it), from 128 inf, NaN NaN.
inline __attribute__((always_inline)) float exp2_f32(float x) {
  const float xc = std::fabs(x) > 151.0f ? std::copysign(151.0f, x) : x;  // as in exp_f32
  const float shifted = xc + kShift;
  const float r = xc - (shifted - kShift);
  float q = 1.5461447765e-4f;
  q = mul_add(q, r, 1.3390866807e-3f);
  q = mul_add(q, r, 9.6180569381e-3f);
  q = mul_add(q, r, 5.5503569543e-2f);
  q = mul_add(q, r, 2.4022650719e-1f);
  q = mul_add(q, r, 6.9314718246e-1f);
  const float out = scale_by_pow2(mul_add(q, r, 1.0f), shifted_int(shifted));
  return x != x ? x : out;
}

// c[0] + c[1] x + ... + c[N-1] x^(N-1) by Horner's rule, one rounding a step.
template <class T, size_t N>
inline __attribute__((always_inline)) T horner(const T (&c)[N], T x) {
  T p = c[N - 1];
#pragma GCC unroll 16
  for (int k = static_cast<int>(N) - 2; k >= 0; --k) p = mul_add(p, x, c[k]);
  return p;
}

// erf in float from two forms, both evaluated, one chosen per value:
// - below 1 in magnitude, a + a q(w) with w = a^2 - 1/2 (one rounding) and q
//   = erf(a) / a - 1 of degree 6 in w: centring the variable keeps Horner's
//   partial sums, and so their rounding errors, small;
// - from 1 to 3.92, 1 - erfc(a) with erfc of degree 10 in u = a - c on two
//   intervals, [1, 2.2) about c = 1.6 and [2.2, 3.92] about c = 3.06 (u is
//   exact), each coefficient chosen per value by its interval. erfc is at
//   most 0.16 there, so its rounding errors count for little in the result.
// From 3.92 (and at inf) erf rounds to 1 in float; NaN stays NaN. The
// polynomials: the Chebyshev interpolants at 200 nodes of each interval
// (numpy's chebfit on mpmath's erf and erfc), as monomials in the centred
// variable, coefficients lowest degree first, rounded to float. Within 0.82 ulp
// of erf over all 2^32 float32 inputs, and in float: 16 values a vector where
// the earlier form in double (a degree-16 polynomial) took 8.
constexpr float kErfNear[] = {-3.453126177e-02f, -2.810721993e-01f, 7.940999418e-02f, -1.828335598e-02f,
                              3.480191808e-03f,  -5.654105917e-04f, 7.882497448e-05f};
constexpr float kErfcBelow22[] = {2.365161479e-02f, -8.722904325e-02f, 1.395664662e-01f,  -1.197951138e-01f,
                                  4.931402206e-02f, 4.386219196e-03f,  -1.549137756e-02f, 5.982621107e-03f,
                                  9.379988187e-04f, -1.344910590e-03f, 2.301611530e-04f};
constexpr float kErfcFrom22[] = {1.508176047e-05f,  -9.678398783e-05f, 2.962044091e-04f,  -5.725784576e-04f,
                                 7.767323987e-04f,  -7.745709154e-04f, 5.856683129e-04f,  -3.410583886e-04f,
                                 1.294926042e-04f,  -3.657607522e-06f, -1.483880442e-05f};

inline __attribute__((always_inline)) float erf_f32(float x) {
  const float a = std::fabs(x);
  const float near = mul_add(a, horner(kErfNear, mul_add(a, a, -0.5f)), a);
  const bool upper = a >= 2.2f;
  const float u = (a > 3.92f ? 3.92f : a) - (upper ? 3.05999994f : 1.60000002f);
  constexpr int kFarDegree = sizeof(kErfcBelow22) / sizeof(kErfcBelow22[0]) - 1;
  float p = upper ? kErfcFrom22[kFarDegree] : kErfcBelow22[kFarDegree];
#pragma GCC unroll 16
  for (int k = kFarDegree - 1; k >= 0; --k) p = mul_add(p, u, upper ? kErfcFrom22[k] : kErfcBelow22[k]);
  const float far = a >= 3.92f ? 1.0f : 1.0f - p;
  return std::copysign(a < 1.0f ? near : far, x);
}

// pi/2 and pi in two parts: the nearest float and the rest (for atan, asin, acos).
constexpr float kHalfPiHi = 1.57079637050628662109f, kHalfPiLo = -4.37113900018624283e-8f;
constexpr float kPiHi = 3.14159274101257324219f, kPiLo = -8.74227800037248566e-8f;

// hi + lo - v (1 + q) - extra for a constant hi + lo (|hi| >= |v|) with one
// rounding at the end: hi - v's rounding error kept (Fast2Sum), the small
// terms summed apart and added last (atan, asin and acos near pi/2 and pi).
inline __attribute__((always_inline)) float minus_from(float hi, float lo, float v, float q, float extra) {
  const float diff = hi - v, diff_lo = (hi - diff) - v;
  return diff + mul_add(-v, q, (diff_lo + lo) - extra);
}

// atan in float: z = |x|, or 1/|x| above 1, and atan z = z + z q(w) with q =
// atan(z) / z - 1 of degree 10 in w = z^2 - 1/2 (one rounding; centring keeps
// Horner's partial sums small; the Chebyshev interpolant at 300 nodes of
// [0, 1], as monomials in w, rounded to float). Above 1, atan |x| = pi/2 -
// atan(1/|x|) by minus_from, the division's first-order error r z / (1 + z^2)
// (r = 1 - z |x| exact; 1 / (1 + z^2) as 1 - z^2 / 2, whose error moves the
// result by under 0.02 ulp) taken off with it. |x| is clamped
// to 1e30 before the division (atan is pi/2 in float long before), so inf
// gives pi/2, not the NaN of 0 * inf. Within 0.85 ulp of atan over all 2^32
// float32 inputs.
constexpr float kAtanPoly[] = {-1.295802444e-01f, -2.037530988e-01f, 8.340741694e-02f, -4.024636000e-02f, 2.104871720e-02f, -1.156349853e-02f, 6.556721404e-03f, -3.687941469e-03f, 2.156256232e-03f, -1.743701170e-03f, 1.084492775e-03f};

inline __attribute__((always_inline)) float atan_f32(float x) {
  const float a = std::fabs(x);
  const bool above_one = a > 1.0f;
  const float clamped = a > 1e30f ? 1e30f : a;
  const float z = above_one ? 1.0f / clamped : a;
  const float q = horner(kAtanPoly, mul_add(z, z, -0.5f));
  const float near = mul_add(z, q, z);
  const float delta = mul_add(-z, clamped, 1.0f) * z;  // 1 / |x| - z, to first order
  const float far = minus_from(kHalfPiHi, kHalfPiLo, z, q, mul_add(-0.5f * (z * z), delta, delta));
  return std::copysign(above_one ? far : near, x);
}

// asin and acos in float, from z and q: z = |x| up to 1/2, else z = sqrt(h)
// with h = (1 - |x|) / 2 (exact); asin z = z + z q(w), q = asin(z) / z - 1 of
// degree 6 in w = z^2 - 1/8 on [0, 1/4] (the Chebyshev interpolant at 300
// nodes, as monomials in w, rounded to float). The root's rounding error,
// (h - z^2) / (2z) with h - z^2 exact, goes into the result as `twice_delta`
// (2 of it); the differences from pi/2 and pi round once (minus_from):
// asin |x| = pi/2 - 2 asin z above 1/2, acos x = pi/2 - asin x up to 1/2 in
// magnitude, 2 asin z above, pi - 2 asin z below. |x| > 1 gives NaN through
// the square root. Within 0.67 ulp (asin) and 0.65 ulp (acos) over all 2^32
// float32 inputs.
constexpr float kAsinPoly[] = {2.210057527e-02f, 1.877775788e-01f, 9.510029107e-02f, 6.414268911e-02f, 4.961927608e-02f, 4.255359992e-02f, 3.780636191e-02f};

struct AsinParts {
  float z, q, twice_delta;
};

inline __attribute__((always_inline)) AsinParts asin_parts(float a, bool near) {
  const float h = 0.5f * (1.0f - a);
  const float z = near ? a : std::sqrt(h);
  const float q = horner(kAsinPoly, mul_add(z, z, -0.125f));
  // residual / z with 1/z to about 2%, all the correction needs: an estimate
  // from the bits and one Newton step (a division took a fifth of asin's time).
  const float residual = mul_add(-z, z, h);
  const float r0 = bits_to_float(0x7ef311c7 - float_to_bits(z));
  const float inverse = r0 * mul_add(-z, r0, 2.0f);
  return {z, q, z > 0.0f ? residual * inverse : 0.0f};
}

inline __attribute__((always_inline)) float asin_f32(float x) {
  const float a = std::fabs(x);
  const bool near = a <= 0.5f;
  const AsinParts p = asin_parts(a, near);
  const float far = minus_from(kHalfPiHi, kHalfPiLo, p.z + p.z, p.q, p.twice_delta);
  return std::copysign(near ? mul_add(p.z, p.q, p.z) : far, x);
}

inline __attribute__((always_inline)) float acos_f32(float x) {
  const float a = std::fabs(x);
  const bool near = a <= 0.5f;
  const AsinParts p = asin_parts(a, near);
  const float y = p.z + p.z;
  // One minus_from, its operands chosen: pi/2 - asin x up to 1/2, pi - 2 asin z below -1/2.
  const float from_hi = minus_from(near ? kHalfPiHi : kPiHi, near ? kHalfPiLo : kPiLo, near ? x : y, p.q,
                                   near ? 0.0f : p.twice_delta);
  return x > 0.5f ? y + mul_add(y, p.q, p.twice_delta) : from_hi;
}

// The standard normal CDF at x, 0.5 * erfc(-x / sqrt(2)), from erfc(a) =
// t * P(t) * exp(-a^2) (Abramowitz and Stegun 7.1.26, absolute error below
// 1.5e-7) with a = |x| / sqrt(2): no cancellation for negative x, where
// 1 + erf(x / sqrt(2)) loses the digits of a small result. *e receives
// exp(-x^2 / 2), which the standard normal PDF is a multiple of.
inline __attribute__((always_inline)) float normal_cdf_f32(float x, float* e) {
  const float a = std::fabs(x) * 0.70710678118654752440f;
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  float poly = mul_add(1.061405429f, t, -1.453152027f);
  poly = mul_add(poly, t, 1.421413741f);
  poly = mul_add(poly, t, -0.284496736f);
  poly = mul_add(poly, t, 0.254829592f) * t;
  *e = exp_nonpositive_f32(-a * a);
  const float half_erfc = 0.5f * poly * *e;
  return x >= 0.0f ? 1.0f - half_erfc : half_erfc;
}

inline __attribute__((always_inline)) float tanh_f32(float x) {
  const float a = std::fabs(x);
  const float z = x * x;
  constexpr float kTanhNear[] = {-3.33332819422e-1f, 1.33314422036e-1f, -5.37397155531e-2f, 2.06390887954e-2f,
                                 -5.70498872745e-3f};
  const float near = mul_add(horner(kTanhNear, z) * z, x, x);
  // Beyond 44, exp(2|x|) would overflow; tanh is 1 in float32 long before.
  // The clamped argument is in exp_f32_normal's range (NaN stays NaN).
  const float e = exp_f32_normal(2.0f * (a > 44.0f ? 44.0f : a));
  const float far = std::copysign(1.0f - 2.0f / (e + 1.0f), x);
  return a < 0.625f ? near : far;  // NaN takes `far`, which is NaN
}

// log: x = 2^e * m with m in [sqrt(1/2), sqrt(2)), log(m) from Cephes'
// degree-8 polynomial in m - 1 and e * ln 2 added in two parts (the first
// exact), within 1 ulp; a denormal x is scaled by 2^23 first. 0 gives -inf,
// a negative x NaN, inf inf, as logf does. log_split is the reduction and
// the polynomial, shared with log2_f32; log_specials the special values.
// The reduction takes m and e from x's bits less those of sqrt(1/2): the
// difference's exponent field is e, and x's bits less that field's are m's
// (integer operations only, no comparison).
struct LogSplit {
  float fe;  // e, as a float
  float f;   // m - 1, exact
  float z;   // f * f, rounded
  float c;   // the cubic tail: log(1 + f) = f - z / 2 + c
};

// kAnyX: x may be anything; otherwise x is positive, normal and finite
// (log_normal), and the denormal scaling is left out.
template <bool kAnyX>
inline __attribute__((always_inline)) LogSplit log_split(float x) {
  constexpr int32_t kSqrtHalfBits = 0x3f3504f3;  // sqrt(1/2) rounded to float
  bool denormal = false;  // also 0 and negatives, replaced by log_specials
  if constexpr (kAnyX) denormal = x < 1.17549435e-38f;
  const int32_t bits = float_to_bits(denormal ? x * 8388608.0f : x);
  const int32_t offset = bits - kSqrtHalfBits;
  const int32_t e = offset >> 23;  // arithmetic: negative below sqrt(1/2)
  const float f = bits_to_float(bits - (offset & static_cast<int32_t>(0xff800000))) - 1.0f;
  const float fe = static_cast<float>(e) - (denormal ? 23.0f : 0.0f);
  const float z = f * f;
  constexpr float kLog[] = {3.3333331174e-1f,  -2.4999993993e-1f, 2.0000714765e-1f, -1.6668057665e-1f, 1.4249322787e-1f,
                            -1.2420140846e-1f, 1.1676998740e-1f,  -1.1514610310e-1f, 7.0376836292e-2f};
  return {fe, f, z, horner(kLog, f) * f * z};
}

// out where x is finite and positive; inf, -inf (x = 0) or NaN (x < 0 or NaN) otherwise.
inline __attribute__((always_inline)) float log_specials(float x, float out) {
  out = x == HUGE_VALF ? x : out;
  out = x == 0.0f ? -HUGE_VALF : out;
  out = x < 0.0f ? std::numeric_limits<float>::quiet_NaN() : out;
  return x != x ? x : out;
}

// x positive, normal and finite: the reduction needs no scaling and the
// result no special values (log_array takes blocks of these).
inline __attribute__((always_inline)) bool log_normal(float x) {
  // One unsigned comparison: the bits of the normal positive finite floats,
  // less those of the least of them, lie below those of inf less the same.
  return static_cast<uint32_t>(float_to_bits(x) - 0x00800000) < static_cast<uint32_t>(0x7f800000 - 0x00800000);
}

template <bool kAnyX>
inline __attribute__((always_inline)) float log_form(float x) {
  const LogSplit s = log_split<kAnyX>(x);
  float y = mul_add(s.fe, -2.12194440e-4f, s.c);
  y = mul_add(-0.5f, s.z, y);
  const float out = mul_add(s.fe, 0.693359375f, s.f + y);
  return kAnyX ? log_specials(x, out) : out;
}

inline __attribute__((always_inline)) float log_f32(float x) { return log_form<true>(x); }

// log2: e + log(1 + f) log2(e) from log_split, with f^2 = z + z_lo exactly
// and each product by log2(e) (rounded to float, kL) and each sum of the
// large terms e, f kL and -z kL / 2 carrying its rounding error into a
// tail (log_f32's sum would lose up to 0.4 ulp more near x = sqrt(2), where
// e is 0 and the result small). Within 0.75 ulp of log2 over all 2^32
// float32 inputs; the special values are log_f32's.
template <bool kAnyX>
inline __attribute__((always_inline)) float log2_form(float x) {
  constexpr float kL = 1.44269502162933349609f;       // log2(e) rounded to float
  constexpr float kLlo = 1.92596299112661746887e-8f;  // log2(e) - kL
  const LogSplit s = log_split<kAnyX>(x);
  const float h = -0.5f * s.z, h_lo = -0.5f * mul_add(s.f, s.f, -s.z);  // h + h_lo = -f^2 / 2
  const float a = s.f * kL, a_lo = mul_add(s.f, kL, -a);
  const float b = h * kL, b_lo = mul_add(h, kL, -b);
  const float s1 = a + b, e1 = (a - s1) + b;          // exact: |a| >= |b|
  const float s2 = s.fe + s1, e2 = (s.fe - s2) + s1;  // exact: e = 0, or |e| >= 1 > |s1|
  const float out = s2 + mul_add(kL, h_lo + s.c, mul_add(kLlo, s.f + h, (a_lo + b_lo) + (e1 + e2)));
  return kAnyX ? log_specials(x, out) : out;
}

inline __attribute__((always_inline)) float log2_f32(float x) { return log2_form<true>(x); }

// log1p: log(u) - ((u - 1) - x) / u with u = 1 + x rounded, which takes
// out u's rounding error to first order (x itself where u is 1), within 2 ulp.
inline __attribute__((always_inline)) float log1p_f32(float x) {
  const float u = 1.0f + x;
  float out = log_f32(u) - ((u - 1.0f) - x) / u;
  out = u == 1.0f ? x : out;
  out = u == 0.0f ? -HUGE_VALF : out;  // x = -1: the correction would be 0 / 0
  return x == HUGE_VALF ? x : out;
}

// sin, cos and tan for |x| < kTrigLimit (callers take libm beyond, and for
// inf and NaN: trig_in_range), in double and rounded once to float, within
// 1 ulp. The remainder r = x - j pi/2 takes pi/2 in two parts, the first of
// 33 bits so j times it is exact (|j| < 2^20): r is accurate to about 1e-20.
// sin and cos: j is the even (sin) or odd (cos) integer nearest 2x/pi, so r
// is in [-pi/2, pi/2] and the result is +-sin r: one polynomial, degree 4 in
// r^2 (relative error 1.1e-10; numpy's chebfit of (sin r / r - 1) / r^2 at
// 300 Chebyshev nodes, then cheb2poly), its sign flipped where j / 2 (sin)
// or (j + 1) / 2 (cos) is odd. tan: j is the integer nearest 2x/pi, r in
// [-pi/4, pi/4], tan r = r P(s) / Q(s) with s = r^2, the [2/3] Pade
// approximant in s (from tan's continued fraction; relative error 5.9e-11),
// and tan x that quotient, or -Q / (r P) for odd j (0.501 ulp over all
// |x| < 2^20).
constexpr float kTrigLimit = 1048576.0f;  // 2^20

enum class Trig { Sin, Cos, Tan };

inline __attribute__((always_inline)) bool trig_in_range(float x) {
  return std::fabs(x) < kTrigLimit;
}

// 1.5 * 2^52: adding it rounds a double below 2^51 in magnitude to an
// integer, held in the sum's low mantissa bits.
constexpr double kShift52 = 6755399441055744.0;

inline __attribute__((always_inline)) double minus_half_pis(double xd, double j) {
  return mul_add(j, -6.07710050650619224932e-11, mul_add(j, -1.57079632673412561417e+00, xd));
}

template <Trig kFn>
inline __attribute__((always_inline)) float trig_f32(float x) {
  const double xd = x;
  if constexpr (kFn != Trig::Tan) {
    // m = round(x / pi) (sin) or round(x / pi + 1/2) (cos), by the 1.5 * 2^52 trick.
    constexpr double kInvPi = 0.31830988618379067154;
    const double shifted =
        kFn == Trig::Cos ? mul_add(xd, kInvPi, 0.5) + kShift52 : mul_add(xd, kInvPi, kShift52);
    const double m = shifted - kShift52;
    const double r = minus_half_pis(xd, kFn == Trig::Cos ? m + m - 1.0 : m + m);
    const double s = r * r;
    constexpr double kSin[] = {-1.6666666663889415e-01, 8.333332769813503e-03, -1.984108677613653e-04,
                               2.753647747668771e-06, -2.408047231272273e-08};
    const double v = r * mul_add(s, horner(kSin, s), 1.0);  // keeps the sign of -0
    // (-1)^m sin r: m's low bit, the sum's lowest mantissa bit, into the sign bit.
    uint64_t v_bits, m_bits;
    std::memcpy(&v_bits, &v, sizeof v);
    std::memcpy(&m_bits, &shifted, sizeof shifted);
    v_bits ^= m_bits << 63;
    double signed_v;
    std::memcpy(&signed_v, &v_bits, sizeof v_bits);
    return static_cast<float>(signed_v);
  }
  // k = round(x * 2 / pi).
  const double k = mul_add(xd, 0.63661977236758134308, kShift52) - kShift52;
  const double r = minus_half_pis(xd, k);
  const double s = r * r;
  constexpr double kP[] = {-4.0 / 33.0, 1.0 / 495.0};
  constexpr double kQ[] = {-5.0 / 11.0, 2.0 / 99.0, -1.0 / 10395.0};
  const double p = r * mul_add(s, horner(kP, s), 1.0);  // keeps the sign of -0
  const double q = mul_add(s, horner(kQ, s), 1.0);
  // tan(x) is p / q for even k, -q / p for odd k: the operands chosen first,
  // so one division (a vector form of the two quotients divides twice).
  const bool odd = static_cast<int32_t>(k) & 1;
  return static_cast<float>((odd ? -q : p) / (odd ? p : q));
}

// One value's sin, cos or tan: the vector form in range, libm beyond it (the
// range test is a branch: loops over it do not vectorize; trig_array's
// in-range blocks do).
template <Trig kFn, class C>
inline __attribute__((always_inline)) C trig_of(C x) {
  if constexpr (std::is_same_v<C, float>) {
    if (trig_in_range(x)) return trig_f32<kFn>(x);
  }
  if constexpr (kFn == Trig::Tan) return std::tan(x);
  return kFn == Trig::Cos ? std::cos(x) : std::sin(x);
}

// out[i] = full(in[i]) for n float32 values, out possibly in, with the
// blocks whose every value passes ordinary(x) on fast(x) instead: a form
// without the branches or special values full's rare inputs need, which
// gives full's bits for those values. The test is a pass of its own over
// the block, so both loops vectorize. fast takes the blocks where out is in
// or apart from it (ivdep: no value is read after another's write); a
// partial overlap, which no caller makes, goes one value at a time.
template <class Ordinary, class Fast, class Full>
inline __attribute__((always_inline)) void blocked_array(const float* in, float* out, int64_t n, Ordinary ordinary,
                                                         Fast fast, Full full) {
  constexpr int64_t kBlock = 256;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = n - b < kBlock ? n - b : kBlock;
    const float* x = in + b;
    float* y = out + b;
    int32_t rare = 0;
    for (int64_t i = 0; i < m; ++i) rare |= ordinary(x[i]) ? 0 : 1;
    if (rare == 0 && (y == x || y + m <= x || x + m <= y)) {
#pragma GCC ivdep
      for (int64_t i = 0; i < m; ++i) y[i] = fast(x[i]);
      continue;
    }
    for (int64_t i = 0; i < m; ++i) y[i] = full(x[i]);
  }
}

// sin, cos or tan of n float32 values (libm beyond the vector form's range).
template <Trig kFn>
inline __attribute__((always_inline)) void trig_array(const float* in, float* out, int64_t n) {
  blocked_array(
      in, out, n, [](float x) __attribute__((always_inline)) { return trig_in_range(x); },
      [](float x) __attribute__((always_inline)) { return trig_f32<kFn>(x); },
      [](float x) __attribute__((always_inline)) { return trig_of<kFn>(x); });
}

// log or log2 of n float32 values: blocks of positive normal finite values
// without the denormal scaling and special values.
template <bool kLog2>
inline __attribute__((always_inline)) void log_array(const float* in, float* out, int64_t n) {
  blocked_array(
      in, out, n, [](float x) __attribute__((always_inline)) { return log_normal(x); },
      [](float x) __attribute__((always_inline)) { return kLog2 ? log2_form<false>(x) : log_form<false>(x); },
      [](float x) __attribute__((always_inline)) { return kLog2 ? log2_form<true>(x) : log_form<true>(x); });
}

// exp of n float32 values: blocks within [-87, 87] on exp_f32_normal (no
// clamp, NaN select or two-factor scaling), exp_f32's bits there.
inline __attribute__((always_inline)) void exp_array(const float* in, float* out, int64_t n) {
  blocked_array(
      in, out, n, [](float x) __attribute__((always_inline)) { return std::fabs(x) <= 87.0f; },
      [](float x) __attribute__((always_inline)) { return exp_f32_normal(x); },
      [](float x) __attribute__((always_inline)) { return exp_f32(x); });
}

// The compute type's exp, atan, asin, acos, erf, tanh, log, exp2, log2 and log1p: the vectorizable float32
// forms above, libm for double.
FLEMU_FLOAT_FORM(exp_of, exp_f32, std::exp)
FLEMU_FLOAT_FORM(atan_of, atan_f32, std::atan)
FLEMU_FLOAT_FORM(asin_of, asin_f32, std::asin)
FLEMU_FLOAT_FORM(acos_of, acos_f32, std::acos)
FLEMU_FLOAT_FORM(erf_of, erf_f32, std::erf)
FLEMU_FLOAT_FORM(tanh_of, tanh_f32, std::tanh)
FLEMU_FLOAT_FORM(log_of, log_f32, std::log)
FLEMU_FLOAT_FORM(exp2_of, exp2_f32, std::exp2)
FLEMU_FLOAT_FORM(log2_of, log2_f32, std::log2)
FLEMU_FLOAT_FORM(log1p_of, log1p_f32, std::log1p)

template <class C>
inline __attribute__((always_inline)) C sigmoid_of(C x) {
  // exp of a non-positive argument only: no overflow for large |x|. Selects,
  // no branches, so the loop vectorizes.
  C e;
  if constexpr (std::is_same_v<C, float>) e = exp_nonpositive_f32(x >= 0.0f ? -x : x);
  else e = std::exp(x >= C(0) ? -x : x);
  // 1 / (1 + e) for x >= 0, e / (1 + e) below: one division of the chosen numerator.
  return (x >= C(0) ? C(1) : e) / (C(1) + e);
}

// softplus(x) = log1p(exp(beta x)) / beta where beta x <= threshold, else
// x, in the compute type, as PyTorch's CPU kernel computes it: in float32
// from exp_f32 and log1p_f32 (exp's error reaches the result scaled by
// e / ((1 + e) log1p(e)), at most 1), within 3 ulp; libm for double.
// softplus_from_exp takes e = exp(beta x) already computed.
template <class C>
inline __attribute__((always_inline)) C softplus_from_exp(C x, C e, C beta, C threshold) {
  const C soft = log1p_of(e) / beta;
  return x * beta > threshold ? x : soft;
}
template <class C>
inline __attribute__((always_inline)) C softplus_of(C x, C beta, C threshold) {
  return softplus_from_exp(x, exp_of(x * beta), beta, threshold);
}

// out[i] = softplus_of(in[i], beta, threshold) for n float32 values, out
// possibly in: in blocks of 256, exp into a local block, then log1p from it.
// The same operations on each value, so softplus_of's bits; one loop holding
// both took 1.77 ns a value on an AVX-512 core, the two passes 1.05.
inline __attribute__((always_inline)) void softplus_array(const float* in, float* out, int64_t n, float beta,
                                                          float threshold) {
  constexpr int64_t kBlock = 256;
  float e[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = n - b < kBlock ? n - b : kBlock;
    const float* x = in + b;
    float* y = out + b;
    for (int64_t i = 0; i < m; ++i) e[i] = exp_f32(x[i] * beta);
    for (int64_t i = 0; i < m; ++i) y[i] = softplus_from_exp(x[i], e[i], beta, threshold);
  }
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
