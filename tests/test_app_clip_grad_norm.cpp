// The training step with --clip-grad-norm (Note [The step]) on the CPU: SGD on the gradient scaled by
// torch.nn.utils.clip_grad_norm_'s factor, as torchvision's reference script steps, and a bound above
// the norm the step without clipping, bit for bit. tests/test_nn_gpu.cpp has the GPU's twin of it, and
// tests/test_dist_training_equivalence.cpp the ranks' clipping after their average.
#include <catch2/catch.hpp>

#include <memory>

#include "app/train_step.h"
#include "tests/step_parity.h"

using namespace cutrain;
using namespace cutrain::test;

TEST_CASE(
    "a training step with clip_grad_norm is SGD on the gradient times clip_grad_norm_'s factor, and with a bound "
    "above the norm the step without clipping, bit for bit",
    "[app]") {
  const double lr = 0.1, max_norm = 0.05;
  const SgdConfig sgd{0.9f, 5e-4f, true};
  const ResNetConfig config = parity_config(Stem::cifar, 8);
  Context plain_ctx({}), loose_ctx({}), clipped_ctx({});
  ResNet18 plain(plain_ctx, config), loose(loose_ctx, config), clipped(clipped_ctx, config);
  fill_same_batch({&plain, &loose, &clipped}, 17);
  TrainStepOptions options;
  options.sgd = sgd;
  options.schedule = constant_lr(float(lr));
  options.buckets.bucket_cap_mb = 0.01;  // several buckets, which clipping updates only after backward
  TrainStep plain_step(plain, nullptr, options);
  options.clip_grad_norm = 1e6;
  TrainStep loose_step(loose, nullptr, options);
  options.clip_grad_norm = max_norm;
  TrainStep clipped_step(clipped, nullptr, options);
  REQUIRE(clipped_step.buckets().size() > 2);

  const StepResult without = take_step(plain, plain_step.sgd(), [&] { plain_step.run(); });
  const StepResult within = take_step(loose, loose_step.sgd(), [&] { loose_step.run(); });
  const StepResult with = take_step(clipped, clipped_step.sgd(), [&] { clipped_step.run(); });
  // The gradients themselves stay as backward left them; only what SGD reads is scaled.
  CHECK(with.grads == without.grads);
  const double factor = clip_grad_norm_factor(with, max_norm);
  INFO("gradient norm " << clipped_step.sgd().grad_norm(nullptr) << ", clip factor " << factor);
  REQUIRE(factor < 0.5);  // clipping is at work
  check_within(compare_updates_with_sgd(with, clipped, sgd, lr, factor));

  CHECK(read_floats(loose.params().values()) == read_floats(plain.params().values()));
  CHECK(read_floats(loose_step.sgd().momentum()) == read_floats(plain_step.sgd().momentum()));
}
