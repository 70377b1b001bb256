// Two of ResNet-18's blocks against finite differences, on the CPU: the gradient of the model's
// loss with respect to every parameter of layer1.0 (an identity shortcut) and of layer2.0 (a
// downsample, stride 2), as backward computes them walking the layer table back
// (Note [ResNet-18's layer table] in nn/resnet.cpp).
//
// The model computes in fp32, so the check budget is that of tests/gradcheck.h: with h = 2e-3
// each loss evaluation rounds to ~1e-7 of its size, ~1e-4 in the quotient; the truncation error
// h^2/6 L''' is ~1e-6. ReLU kinks are the real hazard: a nudge of one weight moves every output
// through the batch statistics, and if a pre-activation crosses zero within the step, the
// difference straddles a kink. Such coordinates show up as one-sided differences that disagree;
// they are skipped, and at least 80% must remain.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "nn/resnet.h"
#include "tests/gradcheck.h"
#include "tests/nn_fixtures.h"

using namespace cutrain;

namespace {

struct ModelCase {
  Context ctx{ContextOptions{}};
  ResNet18 model{ctx, test::tiny_resnet()};

  ModelCase() {
    test::fill_random_batch(model, 12);
    std::mt19937 rng(13);
    // Batch norm starts at gamma 1, beta 0: move them so their gradients are not special.
    for (const Parameter* p : model.params().in_layout_order()) {
      if (p->ohwi || p->name.starts_with("fc.")) continue;
      std::vector<float> v = test::random_vector(size_t(p->numel), rng, 0.5f, 1.5f);
      std::copy(v.begin(), v.end(), p->value.as<float>());
    }
  }

  double loss() {
    model.forward(/*train=*/true);
    return *model.loss();
  }

  // Central differences of every coordinate of `data`, against analytic.
  void check(const char* name, float* data, int64_t n, const std::vector<float>& analytic) {
    const float h = 2e-3f;
    const double tolerance = 1e-2;
    int checked = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float saved = data[i];
      const double mid = loss();
      data[i] = saved + h;
      const double up = loss();
      data[i] = saved - h;
      const double down = loss();
      data[i] = saved;
      const double forward_diff = (up - mid) / h, backward_diff = (mid - down) / h;
      const double bound = tolerance * (1.0 + std::abs(analytic[i]));
      if (std::abs(forward_diff - backward_diff) > bound) continue;  // a ReLU kink within the step
      ++checked;
      const double numeric = (forward_diff + backward_diff) / 2;
      INFO(name << "[" << i << "]: analytic " << analytic[i] << ", numeric " << numeric);
      CHECK(std::abs(numeric - analytic[i]) <= bound);
    }
    INFO(name << ": " << checked << " of " << n << " coordinates away from kinks");
    CHECK(checked >= 0.8 * n);
  }

  // Every parameter whose name starts with `block`.
  void check_block(const std::string& block) {
    loss();
    model.backward();
    const float* g = model.params().grads().as<float>();
    const std::vector<float> grads(g, g + model.params().numel());
    int parameters = 0;
    for (const Parameter* p : model.params().in_layout_order()) {
      if (!p->name.starts_with(block + ".")) continue;
      ++parameters;
      std::vector<float> analytic(grads.begin() + p->offset, grads.begin() + p->offset + p->numel);
      check(p->name.c_str(), p->value.as<float>(), p->numel, analytic);
    }
    REQUIRE(parameters > 0);
  }
};

}  // namespace

TEST_CASE("ResNet-18's block with a downsample matches finite differences", "[nn]") {
  ModelCase c;
  c.check_block("layer2.0");
}

TEST_CASE("ResNet-18's block with an identity shortcut matches finite differences", "[nn]") {
  ModelCase c;
  c.check_block("layer1.0");
}
