// The CPU half of the GPU parity tests (tests/test_nn_gpu.cpp): the error model of
// tests/step_parity.h, held against steps whose errors are known. The fp32 CPU step, the same
// with its convolutions made twice as inexact as cuDNN's worst, and the bf16 model of the step
// stay within their bounds of the float64 step; steps with a deliberate bug do not.
#include <catch2/catch.hpp>

#include <iostream>
#include <random>

#include "tests/step_parity.h"

using namespace cutrain;
using namespace cutrain::test;

namespace {

constexpr int kParityWidth = 16;  // a second per float64 step; the GPU tests run width 64
constexpr double kParityLr = 0.1;
const SgdConfig kParitySgd{0.9f, 5e-4f, true};

}  // namespace

TEST_CASE("The fp32 step on the CPU stays within the error model's bounds of the float64 step", "[nn]") {
  const Stem stem = GENERATE(Stem::cifar, Stem::imagenet);
  INFO(stem_name(stem) << " stem");
  Context ctx({});
  const ResNetConfig config = parity_config(stem, kParityWidth);
  ResNet18 model(ctx, config), perturbed(ctx, config);
  fill_same_batch({&model, &perturbed}, 17);
  const StepResult exact = resnet18_step_fp64(model, kParitySgd, kParityLr);

  SGD sgd(ctx, model.params(), kParitySgd, constant_lr(float(kParityLr)));
  const StepResult fp32 = take_step(model, sgd);
  check_within(compare_steps(fp32, exact, model, fp32_bounds(config)));
  check_within(compare_updates_with_sgd(fp32, model, kParitySgd, kParityLr));

  // Every weight off by a relative 5e-6 moves each convolution's output by about as much: the
  // most rounding the bounds allow cuDNN, and ReLU decisions flip as they will on the GPU.
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0.0f, 5e-6f);
  float* w = perturbed.params().values().as<float>();
  for (int64_t i = 0; i < perturbed.params().numel(); ++i) w[i] *= 1 + noise(rng);
  SGD perturbed_sgd(ctx, perturbed.params(), kParitySgd, constant_lr(float(kParityLr)));
  check_within(compare_steps(take_step(perturbed, perturbed_sgd), exact, model, fp32_bounds(config)));
}

TEST_CASE("The bf16 model of the step stays within the bf16 bounds of the float64 step", "[nn]") {
  const Stem stem = GENERATE(Stem::cifar, Stem::imagenet);
  INFO(stem_name(stem) << " stem");
  Context ctx({});
  ResNet18 model(ctx, parity_config(stem, kParityWidth));
  fill_same_batch({&model}, 17);
  const StepResult exact = resnet18_step_fp64(model, kParitySgd, kParityLr);
  const StepResult bf16 = resnet18_step_fp64(model, kParitySgd, kParityLr, {Storage::bf16});
  check_within(compare_steps(bf16, exact, model, bf16_bounds()));
}

TEST_CASE("The bounds fail a step with a wrong sign, a missing term or a transposed weight", "[nn]") {
  Context ctx({});
  const ResNetConfig config = parity_config(Stem::cifar, 8);  // a bug needs no width to show
  ResNet18 model(ctx, config);
  fill_same_batch({&model}, 17);
  const StepResult exact = resnet18_step_fp64(model, kParitySgd, kParityLr);
  for (Fault fault : {Fault::batchnorm_backward_sign, Fault::batchnorm_backward_no_mean,
                      Fault::conv_backward_transposed}) {
    INFO("fault " << int(fault));
    const StepResult broken = resnet18_step_fp64(model, kParitySgd, kParityLr, {Storage::float64, fault});
    const std::vector<std::string> fp32 = failures(compare_steps(broken, exact, model, fp32_bounds(config)));
    const std::vector<std::string> bf16 = failures(compare_steps(broken, exact, model, bf16_bounds()));
    std::cout << "fault " << int(fault) << ": " << fp32.size() << " tensors over the fp32 bounds, " << bf16.size()
              << " over the bf16 bounds" << (fp32.empty() ? "" : "; first: " + fp32.front()) << "\n";
    CHECK(!fp32.empty());
    CHECK(!bf16.empty());
  }
  // SGD without its weight decay, against the formula with it.
  SgdConfig no_decay = kParitySgd;
  no_decay.weight_decay = 0;
  CHECK(!failures(compare_updates_with_sgd(resnet18_step_fp64(model, no_decay, kParityLr), model, kParitySgd, kParityLr)).empty());
}
