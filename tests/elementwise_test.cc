// The elementwise steps against double-precision formulas: SiLU (Llama,
// Qwen) and GELU (tanh approximation, Gemma) times the up projection, over a
// dense sweep and at extremes (the vector path's exponential clamps there),
// with counts off the vector width; the logit soft cap; scaling.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ops/elementwise.h"

namespace kascade::ops {
namespace {

// 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), in double. For
// u < -1 it is evaluated as the equal x / (1 + e^(-2u)): 1 + tanh(u) cancels
// to 0 there long before the result underflows.
double gelu_tanh_reference(double x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return u < -1 ? x / (1.0 + std::exp(-2.0 * u)) : 0.5 * x * (1.0 + std::tanh(u));
}

// A dense sweep over [-20, 20] plus extremes, and up-projection values.
void sweep_inputs(std::vector<float>& x, std::vector<float>& up) {
  for (int i = -40000; i <= 40000; ++i) {
    x.push_back(float(i) / 2000.0f);  // [-20, 20]
    up.push_back(1.0f + float(i % 7) / 8.0f);
  }
  for (const float extreme : {-1e4f, -100.0f, -88.0f, -50.0f, 50.0f, 88.0f, 100.0f, 1e4f, 0.0f, -0.0f, 1e-30f}) {
    x.push_back(extreme);
    up.push_back(0.5f);
  }
}

// Runs `multiply` over the sweep (whole, and two counts that leave a scalar
// tail) and checks every output against want(x, up) within allowed(x, want);
// `worst` gets the whole sweep's worst relative error.
template <typename Multiply, typename Want, typename Allowed>
void check_against_formula(Multiply multiply, Want want_of, Allowed allowed_of, double* worst) {
  std::vector<float> x, up;
  sweep_inputs(x, up);
  for (const size_t count : {x.size(), size_t(13), size_t(7)}) {  // vector body and scalar tail
    std::vector<float> gate(x.begin(), x.begin() + long(count));
    multiply(gate.data(), up.data(), int64_t(count));
    for (size_t i = 0; i < count; ++i) {
      const double want = want_of(double(x[i])) * up[i];
      const double error = std::abs(double(gate[i]) - want);
      ASSERT_TRUE(std::isfinite(gate[i])) << "x = " << x[i];
      EXPECT_LE(error, allowed_of(double(x[i]), want)) << "x = " << x[i] << ": " << gate[i] << " vs " << want;
      if (count == x.size()) *worst = std::max(*worst, error / std::max(std::abs(want), 1e-6));
    }
  }
}

TEST(Elementwise, SiluMultiplyMatchesTheFormula) {
  double worst = 0;
  check_against_formula(
      silu_multiply, [](double x) { return x / (1.0 + std::exp(-x)); },
      // A few ulps for the exponential, the division and the product, and a
      // floor where the true result underflows (x << 0, where the vector
      // exponential clamps its argument at 88).
      [](double x, double want) { return 6e-7 * std::abs(want) + 1e-30 * std::abs(x); }, &worst);
  std::printf("silu_multiply: worst relative error %.3g\n", worst);
}

TEST(Elementwise, GeluTanhMultiplyMatchesTheFormula) {
  double worst = 0;
  check_against_formula(
      gelu_tanh_multiply, gelu_tanh_reference,
      // Computing -2u in float costs up to four roundings (2.4e-7 relative),
      // which e^(-2u) turns into 2.4e-7 |2u| relative error; plus a few ulps
      // for the exponential and the division, and a floor where the true
      // result underflows (x << 0).
      [](double x, double want) {
        const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
        return (2.4e-7 * std::abs(2 * u) + 4.8e-7) * std::abs(want) + 1e-30 * std::abs(x);
      },
      &worst);
  std::printf("gelu_tanh_multiply: worst relative error %.3g\n", worst);
}

TEST(Elementwise, SoftCapAndScale) {
  std::vector<float> x{-1e6f, -45.0f, -3.0f, 0.0f, 0.5f, 29.0f, 31.0f, 1e6f};
  const std::vector<float> original = x;
  soft_cap(x.data(), 30.0f, int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(x[i], 30.0 * std::tanh(double(original[i]) / 30.0), 1e-5 * 30.0) << original[i];
    EXPECT_LE(std::abs(x[i]), 30.0f);
  }
  std::vector<float> y{1.0f, -2.0f, 3.5f};
  scale(y.data(), 25.298221f, 3);
  EXPECT_FLOAT_EQ(y[0], 25.298221f);
  EXPECT_FLOAT_EQ(y[1], -50.596442f);
  EXPECT_FLOAT_EQ(y[2], 88.5437735f);
}

}  // namespace
}  // namespace kascade::ops
