// gradcheck.h: finite-difference gradient checks for the CPU reference ops (Caffe's gradient
// checker, in small).
//
// An op under test becomes a scalar loss L = sum_j r_j * out_j with fixed random weights r,
// evaluated in double from the op's float outputs; the op's backward, given dy = r, must return
// dL/dinput. check_gradient nudges one input coordinate at a time by +-h and compares the central
// difference (L(x+h) - L(x-h)) / 2h with the analytic value:
//   |numeric - analytic| <= tolerance * (1 + |analytic|).
// Outputs that do not depend on the nudged coordinate round identically in both evaluations and
// cancel exactly, so the error is that of the few outputs that do (about 6e-8 relative each,
// divided by 2h) plus the truncation error h^2/6 * L''' of a nonlinear op. Each test states its h
// and tolerance with this budget in mind.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

namespace cutrain::test {

// Uniform values in [lo, hi), from a fixed-seed generator so every run sees the same inputs.
inline std::vector<float> random_vector(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// L = sum_j r_j * out_j in double.
inline double weighted_sum(const std::vector<float>& out, const std::vector<float>& r) {
  REQUIRE(out.size() == r.size());
  double sum = 0.0;
  for (size_t j = 0; j < out.size(); ++j) sum += double(r[j]) * out[j];
  return sum;
}

// Checks analytic[i] against the central difference of loss() in input[i], for up to
// max_coordinates coordinates spread evenly over the vector (all of them for a short one).
template <class Loss>
void check_gradient(const char* name, std::vector<float>& input, const std::vector<float>& analytic, Loss loss,
                    float h, double tolerance, size_t max_coordinates = 48) {
  REQUIRE(input.size() == analytic.size());
  const size_t step = std::max<size_t>(1, input.size() / max_coordinates);
  for (size_t i = step / 2; i < input.size(); i += step) {
    const float saved = input[i];
    input[i] = saved + h;
    const float up_at = input[i];
    const double up = loss();
    input[i] = saved - h;
    const float down_at = input[i];
    const double down = loss();
    input[i] = saved;
    const double numeric = (up - down) / (double(up_at) - double(down_at));  // the step floats really took
    INFO(name << "[" << i << "]: analytic " << analytic[i] << ", numeric " << numeric);
    CHECK(std::abs(numeric - analytic[i]) <= tolerance * (1.0 + std::abs(analytic[i])));
  }
}

// max_i |a_i - b_i|, for outputs that two routes must compute (nearly) identically.
inline double max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::abs(a[i] - b[i])));
  return worst;
}

}  // namespace cutrain::test
