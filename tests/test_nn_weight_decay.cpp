// SGD's norm_weight_decay (--norm-weight-decay): batch norm's weights and biases alone take it, as in
// torchvision's reference script, whose set_weight_decay puts the parameters of normalization layers
// in a parameter group of their own; every other parameter, fc.bias included, keeps weight_decay.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "nn/sgd.h"
#include "tests/nn_fixtures.h"
#include "tests/torch_python.h"

using namespace cutrain;

namespace {

constexpr float kStepLr = 0.1f, kStepMomentum = 0.9f, kDecay = 0.1f, kNormDecay = 0.0f;

// The parameters of a tiny model, one SGD step from random values and gradients, and the values that
// torch.optim.SGD's first step gives from the same start, with each parameter's decay as decay_of says.
template <class DecayOf>
void check_one_step(const SgdConfig& cfg, DecayOf decay_of) {
  Context ctx({});
  ResNet18 model(ctx, test::tiny_resnet());
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  float* w = model.params().values().as<float>();
  float* g = model.params().grads().as<float>();
  for (int64_t i = 0; i < model.params().numel(); ++i) {
    w[i] = normal(rng);
    g[i] = normal(rng);
  }
  const std::vector<float> before(w, w + model.params().numel()), grads(g, g + model.params().numel());
  SGD sgd(ctx, model.params(), cfg, test::constant_lr(kStepLr));
  test::sgd_step(sgd, model);
  for (const Parameter* p : model.params().in_layout_order()) {
    const float decay = decay_of(*p);
    INFO(p->name << ": decay " << decay);
    double worst = 0;
    for (int64_t i = p->offset; i < p->offset + p->numel; ++i) {
      // torch.optim.SGD's first step: d_p = grad + wd * p; buf = d_p; d_p += momentum * buf (Nesterov).
      float d_p = grads[size_t(i)];
      if (decay != 0) d_p = d_p + decay * before[size_t(i)];
      const float buf = d_p;
      d_p = d_p + kStepMomentum * buf;
      const float want = before[size_t(i)] + (-kStepLr) * d_p;
      worst = std::max(worst, double(std::abs(w[i] - want)));
    }
    // The same float operations, up to the compiler's choice of fused multiply-adds.
    CHECK(worst <= 1e-6);
  }
}

// Batch norm's parameters by their torchvision names: bn1, layerL.B.bnK and the downsample's norm, layerL.0.downsample.1.
bool batchnorm_name(const std::string& name) {
  return name.rfind("bn", 0) == 0 || name.find(".bn") != std::string::npos ||
         name.find("downsample.1.") != std::string::npos;
}

}  // namespace

TEST_CASE(
    "with norm_weight_decay set, batch norm's parameters take it and every other parameter, fc.bias too, "
    "weight_decay",
    "[nn]") {
  Context ctx({});
  ResNet18 model(ctx, test::tiny_resnet());
  int norm = 0;
  for (const Parameter* p : model.params().in_layout_order()) {
    INFO(p->name);
    CHECK(p->norm == batchnorm_name(p->name));
    norm += p->norm;
  }
  CHECK(norm == 40);  // 20 batch norms, weight and bias each
  check_one_step(SgdConfig{kStepMomentum, kDecay, true, kNormDecay},
                 [](const Parameter& p) { return p.norm ? kNormDecay : kDecay; });
}

TEST_CASE("without norm_weight_decay, every parameter takes weight_decay, batch norm's too", "[nn]") {
  check_one_step(SgdConfig{kStepMomentum, kDecay, true}, [](const Parameter&) { return kDecay; });
}

TEST_CASE("the parameters that SGD gives norm_weight_decay are those of torchvision's normalization group", "[nn]") {
  std::string python;
  CUTRAIN_REQUIRE_TORCH(python);
  // torchvision.ops._utils.split_normalization_params classifies as the reference script's set_weight_decay does:
  // the parameters of every _BatchNorm, LayerNorm, GroupNorm, _InstanceNorm and LocalResponseNorm module.
  const test::Process::Result torch =
      test::run({python, "-c",
                 "import torchvision\n"
                 "from torchvision.ops._utils import split_normalization_params\n"
                 "m = torchvision.models.resnet18(num_classes=10)\n"
                 "norm = {id(p) for p in split_normalization_params(m)[0]}\n"
                 "print(' '.join(n for n, p in m.named_parameters() if id(p) in norm))\n"});
  INFO(torch.output);
  REQUIRE(torch.exit_code == 0);
  std::set<std::string> torch_norm;
  std::istringstream names(torch.output);
  for (std::string name; names >> name;) torch_norm.insert(name);
  Context ctx({});
  for (Stem stem : {Stem::cifar, Stem::imagenet}) {
    ResNet18 model(ctx, test::tiny_resnet(stem));
    std::set<std::string> ours;
    for (const Parameter* p : model.params().in_layout_order())
      if (p->norm) ours.insert(p->name);
    CHECK(ours == torch_norm);
  }
}
