// The moving average of the weights (nn/model_ema.h, --model-ema) against torchvision's
// ExponentialMovingAverage, an AveragedModel with use_buffers=True, run by PyTorch itself; and its
// checkpoint file (nn/checkpoint.h save_ema, load_ema).
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "nn/checkpoint.h"
#include "nn/model_ema.h"
#include "nn/safetensors.h"
#include "tests/checkpoint_compare.h"
#include "tests/nn_fixtures.h"
#include "tests/temp_dir.h"
#include "tests/torch_python.h"

using namespace cutrain;

namespace {

// The run's shape that the decay is adjusted to, and the reference script's --model-ema-decay.
constexpr int kWorld = 2, kEmaBatch = 8, kSteps = 4, kEpochs = 3;
constexpr double kDecayFlag = 0.999;  // alpha = 0.001 * 2 * 8 * 4 / 3: about 0.0213, no clamp
// The updates of the sequence below that fall in the warm-up, after which n_averaged is reset.
constexpr int kUpdates = 6, kWarmupUpdates = 2;

SafeTensor f32(const Tensor& t) {
  const std::vector<float> values = read_floats(t);
  SafeTensor s{"F32", {int64_t(values.size())}, std::vector<uint8_t>(values.size() * sizeof(float))};
  std::memcpy(s.data.data(), values.data(), s.data.size());
  return s;
}

SafeTensor i64(int64_t value) {
  SafeTensor s{"I64", {}, std::vector<uint8_t>(sizeof value)};
  std::memcpy(s.data.data(), &value, sizeof value);
  return s;
}

// New values for the model, as a step would leave them: weights N(0, 1) (the padding after each stays
// zero), running statistics positive, and a num_batches_tracked far above 2^24, where fp32 rounds it.
void new_values(ResNet18& model, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  float* w = model.params().values().as<float>();
  for (const Parameter* p : model.params().in_layout_order())
    for (int64_t i = p->offset; i < p->offset + p->numel; ++i) w[i] = normal(rng);
  float* b = model.params().buffer_values().as<float>();
  for (int64_t i = 0; i < model.params().buffer_values().numel(); ++i) b[i] = 0.5f + std::abs(normal(rng));
  model.num_batches_tracked += 123456789 + int64_t(rng() % 1000);
}

// PyTorch's side: the same model states in the same order, given to an AveragedModel with the reference
// script's ema_avg, n_averaged.fill_(0) after each warm-up update, then the average written to `out`.
const char* kTorchScript = R"(
import sys, torch
from safetensors.torch import load_file, save_file
steps = load_file(sys.argv[1])
world, batch, every, epochs, model_ema_decay, updates, warmup = (float(a) for a in sys.argv[3:])
# references/classification/train.py
adjust = int(world) * int(batch) * int(every) / int(epochs)
alpha = 1.0 - model_ema_decay
alpha = min(1.0, alpha * adjust)
decay = 1.0 - alpha
# references/classification/utils.py, ExponentialMovingAverage
def ema_avg(avg_model_param, model_param, num_averaged):
    return decay * avg_model_param + (1 - decay) * model_param
class Model(torch.nn.Module):
    def __init__(self, key):
        super().__init__()
        self.w = torch.nn.Parameter(steps["values." + key].clone())
        self.register_buffer("running", steps["buffers." + key].clone())
        self.register_buffer("num_batches_tracked", steps["tracked." + key].clone())
model = Model("start")
ema = torch.optim.swa_utils.AveragedModel(model, "cpu", ema_avg, use_buffers=True)
for k in range(int(updates)):
    with torch.no_grad():
        for name, t in Model(str(k)).state_dict().items():
            model.state_dict()[name].copy_(t)
    ema.update_parameters(model)
    if k < warmup:
        ema.n_averaged.fill_(0)
save_file({"values": ema.module.w.detach(), "buffers": ema.module.running,
           "tracked": ema.module.num_batches_tracked, "n_averaged": ema.n_averaged}, sys.argv[2])
print(repr(decay))
)";

}  // namespace

TEST_CASE(
    "the EMA of the weights is torchvision's ExponentialMovingAverage bit for bit, with the decay, the copy of the "
    "first update, the warm-up's resets, and the buffers averaged, num_batches_tracked as PyTorch rounds it",
    "[nn]") {
  std::string python;
  CUTRAIN_REQUIRE_TORCH(python);
  test::TempDir dir;
  Context ctx({});
  ResNet18 model(ctx, test::tiny_resnet());
  std::mt19937 rng(11);
  new_values(model, rng);
  const double decay = model_ema_decay(kWorld, kEmaBatch, kSteps, kEpochs, kDecayFlag);
  ModelEma ema(model, decay);
  SafeTensorsFile steps;
  auto record = [&](const std::string& key) {
    steps.tensors["values." + key] = f32(model.params().values());
    steps.tensors["buffers." + key] = f32(model.params().buffer_values());
    steps.tensors["tracked." + key] = i64(model.num_batches_tracked);
  };
  record("start");
  for (int k = 0; k < kUpdates; ++k) {
    new_values(model, rng);
    record(std::to_string(k));
    ema.update();
    if (k < kWarmupUpdates) ema.restart();
  }
  const std::string in = dir / "steps.safetensors", out = dir / "torch.safetensors";
  write_safetensors(in, steps);
  const test::Process::Result torch =
      test::run({python, "-c", kTorchScript, in, out, std::to_string(kWorld), std::to_string(kEmaBatch),
                 std::to_string(kSteps), std::to_string(kEpochs), "0.999", std::to_string(kUpdates),
                 std::to_string(kWarmupUpdates)});
  INFO(torch.output);
  REQUIRE(torch.exit_code == 0);
  CHECK(std::stod(torch.output) == decay);  // repr() round-trips the double
  const SafeTensorsFile expected = read_safetensors(out);
  CHECK(test::first_difference(expected.tensors.at("values").data, f32(ema.values()).data) == -1);
  CHECK(test::first_difference(expected.tensors.at("buffers").data, f32(ema.buffer_values()).data) == -1);
  CHECK(test::first_difference(expected.tensors.at("tracked").data, i64(ema.num_batches_tracked()).data) == -1);
  CHECK(test::first_difference(expected.tensors.at("n_averaged").data, i64(ema.n_averaged()).data) == -1);
  CHECK(ema.n_averaged() == kUpdates - kWarmupUpdates);
}

TEST_CASE("the reference script's decay: alpha = min(1, (1 - D) * world * batch * steps / epochs)", "[nn]") {
  // The defaults on one process at batch 256 over 20 epochs: adjust 409.6, alpha 0.008192.
  CHECK(model_ema_decay(1, 256, 32, 20, 0.99998) == Approx(1 - 0.008192).epsilon(1e-12));
  CHECK(model_ema_decay(8, 256, 32, 1, 0.9) == 0.0);  // alpha clamped to 1: every update copies
}

TEST_CASE("an EMA's checkpoint is a state_dict of the model's names, and round trips exactly with its counts",
          "[nn]") {
  test::TempDir dir;
  Context ctx({});
  ResNet18 model(ctx, test::tiny_resnet());
  std::mt19937 rng(3);
  ModelEma ema(model, 0.9);
  for (int k = 0; k < 3; ++k) {
    new_values(model, rng);
    ema.update();
  }
  const std::string model_file = dir / "model.safetensors", ema_file = dir / "ema.safetensors";
  save_model(model_file, model);
  save_ema(ema_file, model, ema, {{"global_step", "3"}});
  const SafeTensorsFile a = read_safetensors(model_file), b = read_safetensors(ema_file);
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (const auto& [name, t] : a.tensors) {
    INFO(name);
    REQUIRE(b.tensors.count(name) == 1);
    CHECK(b.tensors.at(name).shape == t.shape);
    CHECK(b.tensors.at(name).dtype == t.dtype);
  }
  CHECK(b.metadata.at("n_averaged") == "3");
  CHECK(b.metadata.at("global_step") == "3");

  ModelEma loaded(model, 0.9);
  load_ema(ema_file, model, loaded);
  CHECK(loaded.n_averaged() == 3);
  CHECK(loaded.num_batches_tracked() == ema.num_batches_tracked());
  CHECK(read_floats(loaded.values()) == read_floats(ema.values()));
  CHECK(read_floats(loaded.buffer_values()) == read_floats(ema.buffer_values()));

  // The model file holds no count of updates: it is refused as an average, in one line.
  CHECK_THROWS_WITH(load_ema(model_file, model, loaded), Catch::Contains("no count of the average's updates"));
}

TEST_CASE("evaluating the average exchanges it with the model's values, and the second exchange puts both back",
          "[nn]") {
  Context ctx({});
  ResNet18 model(ctx, test::tiny_resnet());
  std::mt19937 rng(5);
  ModelEma ema(model, 0.5);
  new_values(model, rng);
  ema.update();
  new_values(model, rng);
  const std::vector<float> weights = read_floats(model.params().values()), average = read_floats(ema.values());
  const std::vector<float> buffers = read_floats(model.params().buffer_values());
  const std::vector<float> average_buffers = read_floats(ema.buffer_values());
  ema.swap_with_model();
  CHECK(read_floats(model.params().values()) == average);
  CHECK(read_floats(model.params().buffer_values()) == average_buffers);
  CHECK(read_floats(ema.values()) == weights);
  ema.swap_with_model();
  CHECK(read_floats(model.params().values()) == weights);
  CHECK(read_floats(model.params().buffer_values()) == buffers);
  CHECK(read_floats(ema.values()) == average);
  CHECK(read_floats(ema.buffer_values()) == average_buffers);
}
