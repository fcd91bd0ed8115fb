// flemu's vectorizable float32 math (support/fast_math.h) against
// double-precision libm over their whole ranges: exp within 1 ulp (relative
// error for denormal results), 0 / inf / NaN where expf gives them; log
// within 1 ulp, sin and cos 0.51 (libm beyond 2^20, 1), erf within 0.82, atan 0.85, asin 0.67, acos 0.65,
// exp2 0.92 and log2 0.75 (what a run over all 2^32 inputs measured), log1p within 2, softplus (log1p of exp) within
// 3 (sin and cos through trig_array, libm beyond its range, over every 61st
// float up to 2^21); log_array gives log_f32's and log2_f32's bits,
// exp_array exp_f32's; the special values libm gives; tan (0.51 below
// 2^20), expm1,
// log10, sinh, cosh, atanh, asinh, acosh, logit, mish, elu
// and its gradient evaluated in
// double (support/double_math.h) within 1 ulp; exp_nonpositive_f32 is exp_f32 on non-positive
// arguments, and sigmoid_of its two quotients, bit for bit. Prints "N checks, F failures" and the worst errors.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../src/kernels/support/double_math.h"
#include "../src/kernels/support/fast_math.h"

namespace {

int checks = 0, failures = 0;

void expect(bool ok, const char* what, double x, double got, double want) {
  ++checks;
  if (!ok) {
    ++failures;
    if (failures <= 20) std::printf("FAIL: %s at x=%.9g: got %.9g, want %.9g\n", what, x, got, want);
  }
}

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// |got - want| in units of the float32 spacing at want (the smallest
// denormal below the normal range); 0 where both are the same infinity.
double ulp_error(float got, double want) {
  const float w = static_cast<float>(want);
  if (std::isinf(w)) return got == w ? 0.0 : 1e30;
  const double aw = std::fabs(static_cast<double>(w));
  const double ulp = aw < 1.1754943508222875e-38 ? 1.401298464324817e-45
                                                  : static_cast<double>(std::nextafter(std::fabs(w), INFINITY)) - aw;
  return std::fabs(got - want) / ulp;
}

// Every `stride`-th float from `first` below `limit` (bit patterns), both signs where `both_signs`.
std::vector<float> grid(uint32_t first, uint32_t limit, uint32_t stride, bool both_signs) {
  std::vector<float> xs;
  for (uint32_t b = first; b < limit; b += stride) {
    xs.push_back(from_bits(b));
    if (both_signs) xs.push_back(-from_bits(b));
  }
  return xs;
}

// array(in, out, n), a form over many values, gives one(x)'s bits for every value of xs, out of place and in place.
template <class Array, class One>
void expect_array_bits(const char* what, const std::vector<float>& xs, Array array, One one) {
  std::vector<float> arrayed(xs.size()), in_place = xs;
  array(xs.data(), arrayed.data(), static_cast<int64_t>(xs.size()));
  array(in_place.data(), in_place.data(), static_cast<int64_t>(in_place.size()));
  int differ = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const float want = one(xs[i]);
    differ += std::memcmp(&want, &arrayed[i], sizeof want) != 0 || std::memcmp(&want, &in_place[i], sizeof want) != 0;
  }
  expect(differ == 0, what, differ, differ, 0);
}

// Every `stride`-th float of [-1, 1], and a few beyond it (asin, acos and atanh give NaN there).
std::vector<float> unit_and_beyond(uint32_t stride) {
  std::vector<float> xs = grid(0, 0x3f800001u, stride, true);
  for (float x : {1.0000001f, -1.0000001f, 2.0f, -7.5f, INFINITY, -INFINITY, NAN}) xs.push_back(x);
  return xs;
}

// The worst ulp error of got against ref over xs; each must be within bound
// ulp, or within abs_floor of ref (a result near a zero of a sum of terms).
double worst_of(const char* what, const std::vector<float>& xs, const std::vector<float>& got, double (*ref)(double),
                double bound, double abs_floor = 0.0) {
  double worst = 0.0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = ref(xs[i]);
    if (std::isnan(want)) {
      expect(std::isnan(got[i]), what, xs[i], got[i], want);
      continue;
    }
    const double err = ulp_error(got[i], want);
    const bool near = std::fabs(got[i] - want) <= abs_floor;
    worst = near ? worst : std::fmax(worst, err);
    expect(err <= bound || near, what, xs[i], got[i], want);
  }
  return worst;
}

template <class F>
std::vector<float> map(const std::vector<float>& xs, F f) {
  std::vector<float> out(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) out[i] = f(xs[i]);
  return out;
}

double log_ref(double x) { return std::log(x); }
double log1p_ref(double x) { return std::log1p(x); }
double erf_ref(double x) { return std::erf(x); }
double sin_ref(double x) { return std::sin(x); }
double cos_ref(double x) { return std::cos(x); }
double tan_ref(double x) { return std::tan(x); }
double exp2_ref(double x) { return std::exp2(x); }
double expm1_ref(double x) { return std::expm1(x); }
double log2_ref(double x) { return std::log2(x); }
double log10_ref(double x) { return std::log10(x); }
double sinh_ref(double x) { return std::sinh(x); }
double cosh_ref(double x) { return std::cosh(x); }
double atan_ref(double x) { return std::atan(x); }
double asin_ref(double x) { return std::asin(x); }
double acos_ref(double x) { return std::acos(x); }
double atanh_ref(double x) { return std::atanh(x); }
double asinh_ref(double x) { return std::asinh(x); }
double acosh_ref(double x) { return std::acosh(x); }
double logit_ref(double x) { return std::log(x / (1.0 - x)); }
double softplus_ref(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
double mish_ref(double x) { return x * std::tanh(std::log1p(std::exp(x))); }
double elu_ref(double x) { return x > 0.0 ? x : std::expm1(x); }
double elu_grad_ref(double x) { return x > 0.0 ? 1.0 : std::exp(x); }

// The float32 functions evaluated in double (support/double_math.h) over
// every stride-th float of their domain, both signs, within 1 ulp; tan
// within 0.51 below 2^20 (its Pade form; what a run over all those inputs
// measured: 0.501), libm's tanf beyond.
void check_double_math() {
  const std::vector<float> all = grid(0, 0x7f800001u, 509, true);
  const std::vector<float> unit = unit_and_beyond(37);
  std::vector<float> angles = grid(0, 0x4a000000u, 257, true);
  std::vector<float> tans(angles.size());
  flemu::trig_array<flemu::Trig::Tan>(angles.data(), tans.data(), static_cast<int64_t>(angles.size()));
  std::vector<float> near_angles, near_tans, far_angles, far_tans;
  for (size_t i = 0; i < angles.size(); ++i) {
    const bool in = flemu::trig_in_range(angles[i]);
    (in ? near_angles : far_angles).push_back(angles[i]);
    (in ? near_tans : far_tans).push_back(tans[i]);
  }
  struct Row {
    const char* name;
    const std::vector<float>& xs;
    std::vector<float> got;
    double (*ref)(double);
    double abs_floor;
    double bound = 1.0;
  };
  const Row rows[] = {
      {"tan", near_angles, near_tans, tan_ref, 0.0, 0.51},
      {"tan beyond 2^20", far_angles, far_tans, tan_ref, 0.0},
      {"expm1", all, map(all, flemu::expm1_f32), expm1_ref, 0.0},
      {"log10", all, map(all, flemu::log10_f32), log10_ref, 0.0},
      {"sinh", all, map(all, flemu::sinh_f32), sinh_ref, 0.0},
      {"cosh", all, map(all, flemu::cosh_f32), cosh_ref, 0.0},
      {"atanh", unit, map(unit, flemu::atanh_f32), atanh_ref, 0.0},
      {"asinh", all, map(all, flemu::asinh_f32), asinh_ref, 0.0},
      {"acosh", all, map(all, flemu::acosh_f32), acosh_ref, 0.0},
      {"logit", unit, map(unit, flemu::logit_of<float>), logit_ref, 0.0},
      {"mish", all, map(all, flemu::mish_f32), mish_ref, 0.0},
      {"elu_grad", all, map(all, [](float x) { return flemu::elu_grad<float>(1.0f, x, false, 1.0, 1.0, 1.0); }),
       elu_grad_ref, 0.0},
      {"elu", all, map(all, [](float x) { return flemu::elu_of<float>(x, 1.0, 1.0, 1.0); }), elu_ref, 0.0},
  };
  std::printf("worst:");
  for (const Row& r : rows) {
    char what[64];
    std::snprintf(what, sizeof what, "%s within %g ulp", r.name, r.bound);
    std::printf(" %s %.3f", r.name, worst_of(what, r.xs, r.got, r.ref, r.bound, r.abs_floor));
  }
  std::printf("\n");
  // The one-value form gives the array's bits.
  for (size_t i = 0; i < angles.size(); i += 7) {
    const float one = flemu::trig_of<flemu::Trig::Tan>(angles[i]);
    expect(std::memcmp(&one, &tans[i], sizeof one) == 0, "tan: trig_of = trig_array", angles[i], one, tans[i]);
  }
  // Exact values and specials.
  expect(flemu::exp2_f32(3.0f) == 8.0f && flemu::exp2_f32(-149.0f) == 1.4e-45f && flemu::exp2_f32(-150.0f) == 0.0f,
         "exp2 of integers is exact (2^-150 a tie, to 0)", 3, flemu::exp2_f32(3.0f), 8);
  expect(flemu::asinh_f32(INFINITY) == INFINITY && flemu::asinh_f32(-INFINITY) == -INFINITY, "asinh(+-inf)", INFINITY,
         flemu::asinh_f32(INFINITY), INFINITY);
  expect(flemu::exp2_f32(-INFINITY) == 0.0f && flemu::exp2_f32(INFINITY) == INFINITY, "exp2(+-inf)", INFINITY,
         flemu::exp2_f32(INFINITY), INFINITY);
  expect(flemu::log2_f32(1024.0f) == 10.0f && flemu::log10_f32(1000.0f) == 3.0f, "log2(1024) = 10, log10(1000) = 3",
         1024, flemu::log2_f32(1024.0f), 10);
  expect(flemu::expm1_f32(-INFINITY) == -1.0f && std::signbit(flemu::expm1_f32(-0.0f)), "expm1(-inf) = -1, (-0) = -0",
         -INFINITY, flemu::expm1_f32(-INFINITY), -1);
  expect(std::signbit(flemu::sinh_f32(-0.0f)) && flemu::sinh_f32(-INFINITY) == -INFINITY, "sinh(-0) = -0, (-inf) = -inf",
         0, flemu::sinh_f32(-0.0f), -0.0);
  expect(flemu::cosh_f32(-INFINITY) == INFINITY && flemu::cosh_f32(0.0f) == 1.0f, "cosh(-inf) = inf, cosh(0) = 1",
         -INFINITY, flemu::cosh_f32(-INFINITY), INFINITY);
  expect(flemu::atan_f32(INFINITY) == static_cast<float>(M_PI / 2) && std::signbit(flemu::atan_f32(-0.0f)),
         "atan(inf) = pi/2, atan(-0) = -0", INFINITY, flemu::atan_f32(INFINITY), M_PI / 2);
  expect(flemu::atanh_f32(1.0f) == INFINITY && flemu::atanh_f32(-1.0f) == -INFINITY, "atanh(+-1) = +-inf", 1,
         flemu::atanh_f32(1.0f), INFINITY);
  expect(flemu::logit_of<float>(0.0f) == -INFINITY && flemu::logit_of<float>(1.0f) == INFINITY, "logit(0) = -inf, logit(1) = inf",
         0, flemu::logit_of<float>(0.0f), -INFINITY);
  expect(flemu::acos_f32(-1.0f) == static_cast<float>(M_PI) && flemu::acos_f32(1.0f) == 0.0f, "acos(-1) = pi",
         -1, flemu::acos_f32(-1.0f), M_PI);
  expect(flemu::softplus_of<float>(-INFINITY, 1.0f, 20.0f) == 0.0f && flemu::softplus_of<float>(30.0f, 1.0f, 20.0f) == 30.0f,
         "softplus(-inf) = 0, above the threshold x", -INFINITY, flemu::softplus_of<float>(-INFINITY, 1.0f, 20.0f), 0);
  expect(std::isnan(flemu::mish_f32(NAN)) && flemu::mish_f32(INFINITY) == INFINITY, "mish(nan), mish(inf)", INFINITY,
         flemu::mish_f32(INFINITY), INFINITY);
}

}  // namespace

int main() {
  double worst_ulp = 0.0, worst_erf = 0.0;
  for (float x = -110.0f; x < 90.0f; x += 0.0007f) {
    const double want = std::exp(static_cast<double>(x));
    const float got = flemu::exp_f32(x);
    if (want > 3.4028234663852886e38) {
      expect(std::isinf(got) && got > 0, "exp overflows to inf", x, got, want);
    } else if (want < 1.1754943508222875e-38) {  // denormal or zero result
      expect(std::fabs(got - want) <= 1.5e-45 * 2 + 1e-6 * want, "exp (denormal)", x, got, want);
    } else {
      const float w = static_cast<float>(want);
      const double ulp = static_cast<double>(std::nextafter(w, INFINITY)) - w;
      const double err = std::fabs(got - want) / ulp;
      worst_ulp = std::fmax(worst_ulp, err);
      expect(err <= 1.0, "exp within 1 ulp", x, got, want);
    }
  }
  {
    const std::vector<float> xs = grid(0, 0x7f800001u, 53, true);  // up to inf
    worst_erf = worst_of("erf within 0.82 ulp", xs, map(xs, flemu::erf_f32), erf_ref, 0.82);
  }
  // log of every 97th float from 0 to inf, and negative ones (NaN); log1p down to -1.
  const std::vector<float> positive = grid(0, 0x7f800001u, 97, false);
  const std::vector<float> signed_values = grid(0, 0x7f800001u, 97, true);
  const double worst_log = worst_of("log within 1 ulp", signed_values, map(signed_values, flemu::log_f32), log_ref, 1.0);
  const double worst_exp2 =
      worst_of("exp2 within 0.92 ulp", signed_values, map(signed_values, flemu::exp2_f32), exp2_ref, 0.92);
  const double worst_log2 =
      worst_of("log2 within 0.75 ulp", signed_values, map(signed_values, flemu::log2_f32), log2_ref, 0.75);
  const double worst_atan =
      worst_of("atan within 0.85 ulp", signed_values, map(signed_values, flemu::atan_f32), atan_ref, 0.85);
  const std::vector<float> unit = unit_and_beyond(7);  // asin and acos
  const double worst_asin = worst_of("asin within 0.67 ulp", unit, map(unit, flemu::asin_f32), asin_ref, 0.67);
  const double worst_acos = worst_of("acos within 0.65 ulp", unit, map(unit, flemu::acos_f32), acos_ref, 0.65);
  std::vector<float> above_minus_one = positive;
  for (float x : positive) {
    if (x <= 1.0f) above_minus_one.push_back(-x);
  }
  const double worst_log1p =
      worst_of("log1p within 2 ulp", above_minus_one, map(above_minus_one, flemu::log1p_f32), log1p_ref, 2.0);
  // softplus, log1p_f32 of exp_f32, over every 97th float of both signs.
  const double worst_softplus =
      worst_of("softplus within 3 ulp", signed_values,
               map(signed_values, [](float x) { return flemu::softplus_of<float>(x, 1.0f, 20.0f); }), softplus_ref, 3.0);
  // softplus_array (two passes) gives softplus_of's bits, in place too, with another beta and threshold.
  for (const float beta : {1.0f, 0.5f, 3.0f}) {
    std::vector<float> arrayed(signed_values.size());
    flemu::softplus_array(signed_values.data(), arrayed.data(), static_cast<int64_t>(signed_values.size()), beta, 7.0f);
    std::vector<float> in_place_sp = signed_values;
    flemu::softplus_array(in_place_sp.data(), in_place_sp.data(), static_cast<int64_t>(in_place_sp.size()), beta, 7.0f);
    for (size_t i = 0; i < signed_values.size(); i += 3) {
      const float one = flemu::softplus_of<float>(signed_values[i], beta, 7.0f);
      expect(std::memcmp(&one, &arrayed[i], sizeof one) == 0 && std::memcmp(&one, &in_place_sp[i], sizeof one) == 0,
             "softplus_array = softplus_of", signed_values[i], arrayed[i], one);
    }
  }
  // sin and cos through trig_array over blocks in range and blocks beyond it (libm there).
  std::vector<float> angles = grid(0, 0x4a000000u, 61, true);  // |x| < 2^21
  for (float x : {INFINITY, -INFINITY, NAN, 1e30f, 1048576.0f, 1048575.9f}) angles.push_back(x);
  std::vector<float> sines(angles.size()), cosines(angles.size());
  flemu::trig_array<flemu::Trig::Sin>(angles.data(), sines.data(), static_cast<int64_t>(angles.size()));
  flemu::trig_array<flemu::Trig::Cos>(angles.data(), cosines.data(), static_cast<int64_t>(angles.size()));
  // The vector form within 0.51 ulp (its worst over all |x| < 2^20: 0.502); libm's sinf and cosf beyond, 1.
  std::vector<float> near_angles, near_sines, near_cosines, far_angles, far_sines, far_cosines;
  for (size_t i = 0; i < angles.size(); ++i) {
    const bool near = flemu::trig_in_range(angles[i]);
    (near ? near_angles : far_angles).push_back(angles[i]);
    (near ? near_sines : far_sines).push_back(sines[i]);
    (near ? near_cosines : far_cosines).push_back(cosines[i]);
  }
  const double worst_sin = worst_of("sin within 0.51 ulp", near_angles, near_sines, sin_ref, 0.51);
  const double worst_cos = worst_of("cos within 0.51 ulp", near_angles, near_cosines, cos_ref, 0.51);
  worst_of("libm's sin beyond 2^20 within 1 ulp", far_angles, far_sines, sin_ref, 1.0);
  worst_of("libm's cos beyond 2^20 within 1 ulp", far_angles, far_cosines, cos_ref, 1.0);
  // One value at a time (trig_of) gives trig_array's bits; in place too.
  for (size_t i = 0; i < angles.size(); i += 7) {
    const float one = flemu::trig_of<flemu::Trig::Sin>(angles[i]);
    expect(std::memcmp(&one, &sines[i], sizeof one) == 0, "trig_of = trig_array", angles[i], one, sines[i]);
  }
  std::vector<float> in_place = angles;
  flemu::trig_array<flemu::Trig::Cos>(in_place.data(), in_place.data(), static_cast<int64_t>(in_place.size()));
  expect(std::memcmp(in_place.data(), cosines.data(), cosines.size() * sizeof(float)) == 0, "cos in place", 0, 0, 0);
  // log_array (blocks of positive normal values without the special-value selects) gives log_f32's and
  // log2_f32's bits, over blocks with and without zeros, negatives, denormals, inf and NaN; in place too.
  // Every 997th positive float: blocks of denormals, then of normal values, one of them with the rest.
  std::vector<float> logs_in = grid(0, 0x7f800001u, 997, false);
  for (float x : {0.0f, -1.0f, INFINITY, NAN, -0.0f, 1e-40f}) logs_in.insert(logs_in.begin() + 30000, x);
  expect_array_bits("log_array = log_f32", logs_in, flemu::log_array<false>, flemu::log_f32);
  expect_array_bits("log_array<log2> = log2_f32", logs_in, flemu::log_array<true>, flemu::log2_f32);
  // exp_array (blocks within [-87, 87] without the clamp and two-factor scaling) gives exp_f32's bits, over
  // blocks with and without arguments whose result is denormal, 0 or inf, and NaN; in place too.
  std::vector<float> exps_in = grid(0, 0x43000000u, 997, true);  // |x| < 128, both signs interleaved
  for (float x : {NAN, INFINITY, -INFINITY, 87.5f, -100.0f}) exps_in.insert(exps_in.begin() + 100000, x);
  expect_array_bits("exp_array = exp_f32", exps_in, flemu::exp_array, flemu::exp_f32);
  // exp_nonpositive_f32 (sigmoid's and gelu's) is exp_f32 wherever its argument is not positive.
  for (uint32_t b = 0x80000000u; b <= 0xff800000u; b += 13) {
    const float x = from_bits(b), a = flemu::exp_f32(x), c = flemu::exp_nonpositive_f32(x);
    expect(std::memcmp(&a, &c, sizeof a) == 0, "exp_nonpositive_f32 = exp_f32", x, c, a);
  }
  // sigmoid_of: one division of the chosen numerator, the bits of 1 / (1 + e) and e / (1 + e).
  for (uint32_t b = 0; b < 0xff800000u; b += 41) {
    const float x = from_bits(b), e = flemu::exp_f32(x >= 0.0f ? -x : x);
    const float want = x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e), got = flemu::sigmoid_of(x);
    expect(std::memcmp(&want, &got, sizeof got) == 0, "sigmoid_of = 1 / (1 + e) or e / (1 + e)", x, got, want);
  }
  expect(flemu::exp_nonpositive_f32(-INFINITY) == 0.0f && std::isnan(flemu::exp_nonpositive_f32(NAN)),
         "exp_nonpositive_f32 at -inf and NaN", -INFINITY, flemu::exp_nonpositive_f32(-INFINITY), 0);
  expect(flemu::exp_f32(-INFINITY) == 0.0f, "exp(-inf) = 0", -INFINITY, flemu::exp_f32(-INFINITY), 0);
  expect(std::isinf(flemu::exp_f32(INFINITY)), "exp(inf) = inf", INFINITY, flemu::exp_f32(INFINITY), INFINITY);
  expect(std::isnan(flemu::exp_f32(NAN)), "exp(nan) = nan", NAN, flemu::exp_f32(NAN), NAN);
  expect(flemu::exp_f32(0.0f) == 1.0f, "exp(0) = 1", 0, flemu::exp_f32(0.0f), 1);
  expect(std::isnan(flemu::erf_f32(NAN)), "erf(nan) = nan", NAN, flemu::erf_f32(NAN), NAN);
  expect(flemu::erf_f32(-INFINITY) == -1.0f && flemu::erf_f32(INFINITY) == 1.0f, "erf(+-inf) = +-1", INFINITY,
         flemu::erf_f32(INFINITY), 1);
  expect(flemu::erf_f32(0.0f) == 0.0f && std::signbit(flemu::erf_f32(-0.0f)), "erf(+-0) = +-0", 0,
         flemu::erf_f32(-0.0f), -0.0);
  expect(flemu::log_f32(0.0f) == -INFINITY && flemu::log_f32(-0.0f) == -INFINITY, "log(+-0) = -inf", 0,
         flemu::log_f32(-0.0f), -INFINITY);
  expect(flemu::log_f32(INFINITY) == INFINITY && std::isnan(flemu::log_f32(NAN)), "log(inf) = inf, log(nan) = nan",
         INFINITY, flemu::log_f32(INFINITY), INFINITY);
  expect(flemu::log1p_f32(-1.0f) == -INFINITY && flemu::log1p_f32(INFINITY) == INFINITY, "log1p(-1) = -inf",
         -1, flemu::log1p_f32(-1.0f), -INFINITY);
  expect(std::signbit(flemu::log1p_f32(-0.0f)) && std::isnan(flemu::log1p_f32(-INFINITY)), "log1p(-0) = -0", 0,
         flemu::log1p_f32(-0.0f), -0.0);
  const float neg_zero = -0.0f;
  float sin_zero;
  flemu::trig_array<flemu::Trig::Sin>(&neg_zero, &sin_zero, 1);
  expect(sin_zero == 0.0f && std::signbit(sin_zero), "sin(-0) = -0", 0, sin_zero, -0.0);
  check_double_math();
  std::printf(
      "worst: exp %.3f ulp, erf %.3f, atan %.3f, asin %.3f, acos %.3f, log %.3f, exp2 %.3f, log2 %.3f, log1p %.3f, softplus %.3f, sin %.3f, "
      "cos %.3f\n"
      "%d checks, %d failures\n",
      worst_ulp, worst_erf, worst_atan, worst_asin, worst_acos, worst_log, worst_exp2, worst_log2, worst_log1p, worst_softplus, worst_sin, worst_cos, checks, failures);
  return failures == 0 ? 0 : 1;
}
