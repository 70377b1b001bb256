// A whole BasicBlock against finite differences, on the CPU: the gradient of
// L = sum_j r_j * y_j (r fixed and random) with respect to the block's input and every
// parameter, for a block with a downsample (stride 2, 4 -> 8 channels) and an identity block.
//
// The block is built from fp32 kernels, so the check budget is that of tests/gradcheck.h:
// with h = 2e-3 each loss evaluation rounds to ~1e-6 of its size, ~1e-4 in the quotient; the
// truncation error h^2/6 L''' is ~1e-6. ReLU kinks are the real hazard: a nudge of one input
// moves every output through the batch statistics, and if one of the block's ~300 pre-activations
// crosses zero within the step, the difference straddles a kink. Such coordinates show up as
// one-sided differences that disagree; they are skipped, and at least 80% must remain.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "nn/basic_block.h"
#include "tests/gradcheck.h"

using namespace cutrain;

namespace {

struct BlockCase {
  Context ctx{ContextOptions{}};
  ModelResources model{ctx};
  Activation& x;
  BasicBlock block;
  std::vector<float> r;  // dL/dy

  BlockCase(int in_channels, int out_channels, int stride)
      : x(model.plan.activation(DType::f32, {2, 6, 6, in_channels})),
        block(model, "layer", x, out_channels, stride) {
    model.allocate(/*seed=*/11);
    std::mt19937 rng(12);
    std::vector<float> input = test::random_vector(size_t(x.value.numel()), rng);
    std::copy(input.begin(), input.end(), x.value.as<float>());
    r = test::random_vector(size_t(block.y().value.numel()), rng);
    // Batch norm starts at gamma 1, beta 0: move them so their gradients are not special.
    for (const Parameter* p : model.params.in_layout_order()) {
      if (p->ohwi) continue;
      std::vector<float> v = test::random_vector(size_t(p->numel), rng, 0.5f, 1.5f);
      std::copy(v.begin(), v.end(), p->value.as<float>());
    }
  }

  double loss() {
    block.forward(true, Collectives::with);
    const float* y = block.y().value.as<float>();
    double sum = 0;
    for (size_t j = 0; j < r.size(); ++j) sum += double(r[j]) * y[j];
    return sum;
  }

  void backward() {
    loss();
    std::copy(r.begin(), r.end(), block.y().grad.as<float>());
    model.params.begin_backward({});
    block.backward(Collectives::with);
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

  void check_all() {
    backward();
    std::vector<float> dx(x.grad.as<float>(), x.grad.as<float>() + x.grad.numel());
    std::vector<float> grads(model.params.grads().as<float>(), model.params.grads().as<float>() + model.params.numel());
    check("x", x.value.as<float>(), x.value.numel(), dx);
    for (const Parameter* p : model.params.in_layout_order()) {
      std::vector<float> analytic(grads.begin() + p->offset, grads.begin() + p->offset + p->numel);
      check(p->name.c_str(), p->value.as<float>(), p->numel, analytic);
    }
  }
};

}  // namespace

TEST_CASE("A BasicBlock with a downsample matches finite differences", "[nn]") {
  BlockCase c(4, 8, 2);
  REQUIRE(c.model.params.in_layout_order().size() == 9);  // conv1, bn1 (2), conv2, bn2 (2), downsample (3)
  c.check_all();
}

TEST_CASE("A BasicBlock with an identity shortcut matches finite differences", "[nn]") {
  BlockCase c(4, 4, 1);
  REQUIRE(c.model.params.in_layout_order().size() == 6);
  c.check_all();
}
