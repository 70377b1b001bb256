// SGD's CPU reference against PyTorch's torch.optim.SGD algorithm, written out as PyTorch states it
// (with the momentum buffer created from the first gradient), and against hand-computed numbers.
#include <catch2/catch.hpp>

#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/sgd.h"
#include "tests/gradcheck.h"
#include "tests/torch_python.h"

using namespace cutrain;

namespace {

// torch.optim.SGD.step for one tensor, dampening 0, as in torch/optim/sgd.py.
struct PyTorchSgd {
  SgdConfig cfg;
  float lr;
  std::optional<std::vector<float>> buf;

  void step(std::vector<float>& p, const std::vector<float>& grad) {
    std::vector<float> d_p = grad;
    if (cfg.weight_decay != 0) for (size_t i = 0; i < p.size(); ++i) d_p[i] = d_p[i] + cfg.weight_decay * p[i];
    if (cfg.momentum != 0) {
      if (!buf) {
        buf = d_p;  // torch.clone(d_p).detach()
      } else {
        for (size_t i = 0; i < p.size(); ++i) (*buf)[i] = (*buf)[i] * cfg.momentum + d_p[i];
      }
      if (cfg.nesterov) {
        for (size_t i = 0; i < p.size(); ++i) d_p[i] = d_p[i] + cfg.momentum * (*buf)[i];
      } else {
        d_p = *buf;
      }
    }
    for (size_t i = 0; i < p.size(); ++i) p[i] = p[i] + (-lr) * d_p[i];
  }
};

// SGD's CPU twin over one contiguous parameter of n elements with an fp32 gradient.
void sgd_step_cpu(float* param, const float* grad, float* buf, int64_t n, const float* lr, SgdConfig cfg) {
  SgdSegment segment;
  segment.numel = n;
  segment.grad = {const_cast<float*>(grad)};
  sgd_update_cpu(param, buf, &segment, 1, lr, cfg);
}

}  // namespace

TEST_CASE("SGD matches PyTorch's algorithm over three steps", "[kernels]") {
  const auto [momentum, weight_decay, nesterov] = GENERATE(table<float, float, bool>({
      {0.9f, 5e-4f, true}, {0.9f, 5e-4f, false}, {0.9f, 0.0f, true}, {0.0f, 1e-2f, false}, {0.5f, 1e-1f, true}}));
  const SgdConfig cfg{momentum, weight_decay, nesterov};
  std::mt19937 rng(7);
  std::vector<float> param = test::random_vector(37, rng);
  std::vector<float> expected = param, buf(param.size(), 0.0f);
  PyTorchSgd torch_sgd{cfg, 0.0f, std::nullopt};
  const float lrs[] = {0.1f, 0.05f, 0.2f};  // a schedule: the rate is read from memory each step
  for (float lr : lrs) {
    const std::vector<float> grad = test::random_vector(param.size(), rng);
    torch_sgd.lr = lr;
    torch_sgd.step(expected, grad);
    sgd_step_cpu(param.data(), grad.data(), buf.data(), int64_t(param.size()), &lr, cfg);
  }
  INFO("momentum " << momentum << ", weight decay " << weight_decay << ", nesterov " << nesterov);
  // The same float operations in the same order, up to the compiler's choice of fused multiply-adds.
  CHECK(test::max_abs_difference(param, expected) <= 1e-6);
}

TEST_CASE(
    "a normalization layer's segment takes norm_weight_decay when it is set, as a parameter group of its own "
    "in PyTorch's SGD",
    "[kernels]") {
  const float norm_weight_decay = GENERATE(-1.0f, 0.0f, 1e-2f);  // -1: unset, weight_decay's
  const SgdConfig cfg{0.9f, 0.1f, true, norm_weight_decay};
  std::mt19937 rng(9);
  std::vector<float> param = test::random_vector(74, rng), buf(param.size(), 0.0f);
  std::vector<float> weights(param.begin(), param.begin() + 37), norm(param.begin() + 37, param.end());
  SgdConfig norm_group = cfg;
  if (norm_weight_decay >= 0) norm_group.weight_decay = norm_weight_decay;
  PyTorchSgd torch_weights{cfg, 0.1f, std::nullopt}, torch_norm{norm_group, 0.1f, std::nullopt};
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> grad = test::random_vector(param.size(), rng);
    torch_weights.step(weights, std::vector<float>(grad.begin(), grad.begin() + 37));
    torch_norm.step(norm, std::vector<float>(grad.begin() + 37, grad.end()));
    SgdSegment segments[2];
    segments[0].numel = segments[1].numel = 37;
    segments[1].offset = 37;
    segments[0].grad = {const_cast<float*>(grad.data())};
    segments[1].grad = {const_cast<float*>(grad.data() + 37)};
    segments[1].norm = true;
    const float lr = 0.1f;
    sgd_update_cpu(param.data(), buf.data(), segments, 2, &lr, cfg);
  }
  INFO("norm_weight_decay " << norm_weight_decay);
  CHECK(test::max_abs_difference(std::vector<float>(param.begin(), param.begin() + 37), weights) <= 1e-6);
  CHECK(test::max_abs_difference(std::vector<float>(param.begin() + 37, param.end()), norm) <= 1e-6);
}

TEST_CASE("SGD by hand: two steps with and without Nesterov", "[kernels]") {
  // param 1, grad 0.5, lr 0.1, momentum 0.9, weight decay 0.1.
  //   plain:    g = 0.6,   buf = 0.6,   p = 1 - 0.06 = 0.94;
  //             g = 0.5 + 0.094 = 0.594, buf = 0.54 + 0.594 = 1.134, p = 0.94 - 0.1134 = 0.8266
  //   nesterov: g = 0.6,   buf = 0.6,   d = 0.6 + 0.54 = 1.14,  p = 1 - 0.114 = 0.886
  const bool nesterov = GENERATE(false, true);
  float param = 1.0f, buf = 0.0f;
  const float grad = 0.5f, lr = 0.1f;
  const SgdConfig cfg{0.9f, 0.1f, nesterov};
  sgd_step_cpu(&param, &grad, &buf, 1, &lr, cfg);
  CHECK(buf == Approx(0.6f).epsilon(1e-6));
  CHECK(param == Approx(nesterov ? 0.886f : 0.94f).epsilon(1e-6));
  if (!nesterov) {
    sgd_step_cpu(&param, &grad, &buf, 1, &lr, cfg);
    CHECK(buf == Approx(1.134f).epsilon(1e-6));
    CHECK(param == Approx(0.8266f).epsilon(1e-6));
  }
}

TEST_CASE("the gradient's sum of squares is clip_grad_norm_'s total norm, squared, over a layer's rows alone",
          "[kernels]") {
  // A contiguous fp32 gradient over several of the CPU's blocks, and a bf16 one held as rows of 3
  // in a pitch of 8 (the stem's padded filter), whose padding holds values that must not count.
  std::mt19937 rng(11);
  const std::vector<float> dense = test::random_vector(40'000, rng);
  std::vector<__nv_bfloat16> padded;
  for (float g : test::random_vector(64 * 8, rng)) padded.push_back(__float2bfloat16(g));
  SgdSegment segments[2];
  segments[0].numel = int64_t(dense.size());
  segments[0].grad = {const_cast<float*>(dense.data())};
  segments[1].numel = 64 * 3;
  segments[1].grad = {padded.data(), true, 3, 8};
  // torch.nn.utils.clip_grad_norm_: the norm of the per-tensor norms.
  double dense_squares = 0, padded_squares = 0;
  for (float g : dense) dense_squares += double(g) * g;
  for (int row = 0; row < 64; ++row)
    for (int c = 0; c < 3; ++c) padded_squares += std::pow(double(__bfloat162float(padded[size_t(row * 8 + c)])), 2);
  const double total_norm = std::hypot(std::sqrt(dense_squares), std::sqrt(padded_squares));
  CHECK(std::sqrt(sgd_grad_squares_cpu(segments, 2)) == Approx(total_norm).epsilon(1e-12));
}

TEST_CASE("the clip factor is clip_grad_norm_'s, min(max_norm / (norm + 1e-6), 1), and NaN for a NaN norm",
          "[kernels]") {
  // torch.nn.utils.clip_grad_norm_'s clip_coef, clamped to 1, in double: for a gradient of one
  // element, whose norm is its size.
  const auto factor = [](float grad, double max_norm) {
    SgdSegment segment;
    segment.numel = 1;
    segment.grad = {&grad};
    float out = -1;
    const SgdClip clip{max_norm, &out};
    sgd_grad_squares_cpu(&segment, 1, &clip);
    return out;
  };
  CHECK(factor(2.0f, 1.0) == float(1.0 / (2.0 + 1e-6)));
  CHECK(factor(-2.0f, 1.0) == float(1.0 / (2.0 + 1e-6)));
  CHECK(factor(1e-3f, 1e-4) == Approx(0.0999000999).epsilon(1e-6));  // the 1e-6 moves it by 1e-3
  CHECK(factor(1.0f, 1.0) == float(1.0 / (1.0 + 1e-6)));               // a norm at the bound is scaled too
  CHECK(factor(1.0f, 1.0) < 1.0f);
  CHECK(factor(0.25f, 1.0) == 1.0f);  // within the bound: left alone, never scaled up
  CHECK(factor(0.0f, 1.0) == 1.0f);
  CHECK(factor(INFINITY, 1.0) == 0.0f);
  CHECK(std::isnan(factor(NAN, 1.0)));  // as torch.clamp's: a NaN gradient stays visible
  // Over several elements, the norm of them all.
  const std::vector<float> grad = {3.0f, 4.0f};
  SgdSegment segment;
  segment.numel = 2;
  segment.grad = {const_cast<float*>(grad.data())};
  float five = 0;
  const SgdClip clip{2.0, &five};
  CHECK(sgd_grad_squares_cpu(&segment, 1, &clip) == 25.0);
  CHECK(five == float(2.0 / (5.0 + 1e-6)));
}

TEST_CASE("the clip factor scales a gradient as torch.nn.utils.clip_grad_norm_ does", "[kernels]") {
  std::string python;
  CUTRAIN_REQUIRE_TORCH(python);
  // One-element gradients of these norms, clipped by torch to these max norms.
  const std::vector<std::pair<float, double>> cases = {{2.0f, 1.0}, {1e-3f, 1e-4}, {1.0f, 1.0},
                                                       {0.5f, 1.0}, {37.5f, 0.25}, {3e-7f, 1e-7}};
  std::string norms, max_norms;  // each exact: 9 digits give a float back, 17 a double
  for (const auto& [norm, max_norm] : cases) {
    char text[64];
    std::snprintf(text, sizeof text, "%.9g,", double(norm));
    norms += text;
    std::snprintf(text, sizeof text, "%.17g,", max_norm);
    max_norms += text;
  }
  const test::Process::Result torch =
      test::run({python, "-c",
                 "import torch\n"
                 "for norm, max_norm in zip([" + norms + "], [" + max_norms + "]):\n"
                 "    p = torch.zeros(1, requires_grad=True)\n"
                 "    p.grad = torch.tensor([norm], dtype=torch.float32)\n"
                 "    torch.nn.utils.clip_grad_norm_([p], max_norm)\n"
                 "    print(repr(p.grad.item()))\n"});
  INFO(torch.output);
  REQUIRE(torch.exit_code == 0);
  std::istringstream lines(torch.output);
  for (const auto& [norm, max_norm] : cases) {
    double clipped = 0;
    REQUIRE(lines >> clipped);
    SgdSegment segment;
    segment.numel = 1;
    segment.grad = {const_cast<float*>(&norm)};
    float factor = 0;
    const SgdClip clip{max_norm, &factor};
    sgd_grad_squares_cpu(&segment, 1, &clip);
    const float ours = norm * factor;
    INFO("norm " << norm << ", max_norm " << max_norm << ": torch " << clipped << ", ours " << ours);
    // torch computes the factor in float, ours in double: within a float's rounding or two.
    CHECK(ours == Approx(clipped).epsilon(3e-7));
  }
}

TEST_CASE("a clipped update is PyTorch's SGD on the gradient that clip_grad_norm_ scaled, and a factor of 1 the "
          "update without clipping, bit for bit",
          "[kernels]") {
  const SgdConfig cfg{0.9f, 5e-4f, true};
  std::mt19937 rng(13);
  std::vector<float> param = test::random_vector(37, rng), buf(param.size(), 0.0f);
  std::vector<float> expected = param;
  PyTorchSgd torch_sgd{cfg, 0.1f, std::nullopt};
  for (int step = 0; step < 3; ++step) {
    std::vector<float> grad = test::random_vector(param.size(), rng);
    SgdSegment segment;
    segment.numel = int64_t(grad.size());
    segment.grad = {grad.data()};
    float factor = 0;
    const SgdClip clip{0.5, &factor};  // a norm of about 3.5: clipped to a seventh
    sgd_grad_squares_cpu(&segment, 1, &clip);
    REQUIRE(factor < 0.2f);
    const float lr = 0.1f;
    sgd_update_cpu(param.data(), buf.data(), &segment, 1, &lr, cfg, &factor);
    // clip_grad_norm_ multiplies the gradient in place, then SGD steps on it.
    for (float& g : grad) g *= factor;
    torch_sgd.step(expected, grad);
  }
  CHECK(test::max_abs_difference(param, expected) <= 1e-6);

  std::vector<float> scaled = param, scaled_buf = buf;
  const std::vector<float> grad = test::random_vector(param.size(), rng);
  const float lr = 0.1f, one = 1.0f;
  sgd_step_cpu(param.data(), grad.data(), buf.data(), int64_t(param.size()), &lr, cfg);
  SgdSegment segment;
  segment.numel = int64_t(grad.size());
  segment.grad = {const_cast<float*>(grad.data())};
  sgd_update_cpu(scaled.data(), scaled_buf.data(), &segment, 1, &lr, cfg, &one);
  CHECK(scaled == param);
  CHECK(scaled_buf == buf);
}
