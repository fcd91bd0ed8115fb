// flemu's vectorizable float32 exp and erf (support/fast_math.h) against
// double-precision libm over their whole ranges: exp within 1 ulp (relative
// error for denormal results), 0 / inf / NaN where expf gives them; erf within
// 3.5e-7. Prints "N checks, F failures" and the worst errors.
#include <cmath>
#include <cstdio>

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
  for (float x = -9.0f; x < 9.0f; x += 0.0001f) {
    const double want = std::erf(static_cast<double>(x));
    const double err = std::fabs(flemu::erf_f32(x) - want);
    worst_erf = std::fmax(worst_erf, err);
    expect(err <= 3.5e-7, "erf within 3.5e-7", x, flemu::erf_f32(x), want);
  }
  expect(flemu::exp_f32(-INFINITY) == 0.0f, "exp(-inf) = 0", -INFINITY, flemu::exp_f32(-INFINITY), 0);
  expect(std::isinf(flemu::exp_f32(INFINITY)), "exp(inf) = inf", INFINITY, flemu::exp_f32(INFINITY), INFINITY);
  expect(std::isnan(flemu::exp_f32(NAN)), "exp(nan) = nan", NAN, flemu::exp_f32(NAN), NAN);
  expect(flemu::exp_f32(0.0f) == 1.0f, "exp(0) = 1", 0, flemu::exp_f32(0.0f), 1);
  expect(std::isnan(flemu::erf_f32(NAN)), "erf(nan) = nan", NAN, flemu::erf_f32(NAN), NAN);
  expect(flemu::erf_f32(-INFINITY) == -1.0f && flemu::erf_f32(INFINITY) == 1.0f, "erf(+-inf) = +-1", INFINITY,
         flemu::erf_f32(INFINITY), 1);
  expect(flemu::erf_f32(0.0f) == 0.0f && std::signbit(flemu::erf_f32(-0.0f)), "erf(+-0) = +-0", 0,
         flemu::erf_f32(-0.0f), -0.0);
  std::printf("worst: exp %.3f ulp, erf %.3g\n%d checks, %d failures\n", worst_ulp, worst_erf, checks, failures);
  return failures == 0 ? 0 : 1;
}
