// ResNet-18 on the CPU: parameter counts against torchvision, shapes, the flat buffer's layout
// (backward order, each parameter 64-element aligned) and the gradient-readiness callback, and batch norm's train/eval
// behaviour seen from the model.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>

#include "nn/resnet.h"
#include "tests/nn_fixtures.h"

using namespace cutrain;

namespace {

int64_t count_parameters(Stem stem, int num_classes) {
  Context ctx({});
  ResNetConfig c;
  c.stem = stem;
  c.num_classes = num_classes;
  c.batch_size = 1;
  c.image_size = 32;
  ResNet18 model(ctx, c);
  return model.num_parameters();
}

}  // namespace

TEST_CASE("ResNet-18 has torchvision's parameter counts", "[nn]") {
  CHECK(count_parameters(Stem::cifar, 10) == 11'173'962);
  CHECK(count_parameters(Stem::imagenet, 1000) == 11'689'512);  // torchvision.models.resnet18()
  // 1000 classes -> 10: fc loses 512*990 + 990 parameters.
  CHECK(count_parameters(Stem::imagenet, 10) == 11'689'512 - 512 * 990 - 990);
}

TEST_CASE("ResNet-18 tensors have the planned shapes", "[nn]") {
  Context ctx({});
  for (Stem stem : {Stem::cifar, Stem::imagenet}) {
    ResNetConfig c = test::tiny_resnet(stem);
    c.num_classes = 7;
    ResNet18 model(ctx, c);
    CHECK(model.input_channels() == 3);
    CHECK(model.input().shape == std::vector<int64_t>{4, 8, 8, 3});
    CHECK(model.labels().shape == std::vector<int64_t>{4});
    CHECK(model.labels().dtype == DType::i32);
    CHECK(model.logits().shape == std::vector<int64_t>{4, 7});
    test::fill_random_batch(model, 3);
    model.forward(true);
    CHECK(std::isfinite(*model.loss()));
    CHECK(*model.correct() >= 0);
    CHECK(*model.correct() <= 4);
  }
}

TEST_CASE("Training with one value per channel is refused in one line", "[nn]") {
  // The imagenet stem at 32x32 pixels ends at 1x1 in layer4: batch 1 leaves BN one value. The first
  // batch norm to run there is layer4.0.bn1 (the downsample's waits for its convolution to join).
  Context ctx({});
  ResNetConfig c = test::tiny_resnet(Stem::imagenet);
  c.batch_size = 1;
  c.image_size = 32;
  ResNet18 model(ctx, c);
  test::fill_random_batch(model, 1);
  CHECK_THROWS_WITH(model.forward(true), Catch::Contains("layer4.0.bn1: batch norm in training needs more "
                                                         "than one value per channel (batch 1 x 1 pixels)"));
  model.forward(false);  // evaluation is fine
}

TEST_CASE("The flat buffers are laid out in backward order with torchvision's names", "[nn]") {
  Context ctx({});
  ResNet18 model(ctx, test::tiny_resnet(Stem::imagenet));
  const std::vector<Parameter*>& params = model.params().in_layout_order();
  REQUIRE(params.size() == 62);  // torchvision's resnet18 has 62 parameter tensors
  CHECK(params[0]->name == "fc.bias");
  CHECK(params[1]->name == "fc.weight");
  CHECK(params[1]->shape == std::vector<int64_t>{10, 32});
  CHECK(params.back()->name == "conv1.weight");
  CHECK(params.back()->shape == std::vector<int64_t>{4, 3, 7, 7});  // OIHW, as torchvision names it
  int64_t offset = 0;
  for (const Parameter* p : params) {
    CHECK(p->offset >= offset);  // in order, no overlap, gaps below the alignment only
    CHECK(p->offset < offset + ParameterSet::kAlignElements);
    CHECK(p->offset % ParameterSet::kAlignElements == 0);  // 256-byte aligned, for cuDNN
    offset = p->offset + p->numel;
  }
  CHECK(offset <= model.params().numel());
  CHECK(model.params().numel() < offset + ParameterSet::kAlignElements);
  // Within a block with a downsample: bn2, conv2, bn1, conv1, downsample.1, downsample.0.
  std::vector<std::string> names;
  for (const Parameter* p : params) names.push_back(p->name);
  auto at = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) - names.begin(); };
  CHECK(at("layer2.0.bn2.weight") < at("layer2.0.conv2.weight"));
  CHECK(at("layer2.0.conv1.weight") < at("layer2.0.downsample.1.weight"));
  CHECK(at("layer2.0.downsample.1.weight") < at("layer2.0.downsample.0.weight"));
  CHECK(at("layer2.0.downsample.0.weight") < at("layer1.1.bn2.weight"));
  CHECK(model.buffers().size() == 2 * 20);  // running_mean and running_var of 20 batch norms
}

TEST_CASE("backward walks the layers back over a growing prefix of final gradients that reaches the end",
          "[nn]") {
  Context ctx({});
  ResNet18 model(ctx, test::tiny_resnet());
  test::fill_random_batch(model, 5);
  model.forward(true);
  std::vector<int64_t> ends;
  std::vector<std::vector<float>> seen;  // the prefix as it was after each layer
  for (int layer = int(model.layers().size()) - 1; layer >= 0; --layer) {
    model.backward_layer(layer);
    ends.push_back(model.grads_final_end(layer));
    const float* g = model.params().grads().as<float>();
    seen.emplace_back(g, g + ends.back());
  }
  for (size_t i = 1; i < ends.size(); ++i) CHECK(ends[i] >= ends[i - 1]);
  // 0 after the loss and avgpool, then one end for fc and for each of 20 batch norms and 20 convolutions.
  CHECK(std::set<int64_t>(ends.begin(), ends.end()).size() == 1 + 1 + 20 + 20);
  CHECK(ends.back() == model.params().numel());
  // "Final" means later layers never touch that span again.
  std::vector<float> final_grads = read_floats(model.params().grads());
  for (const auto& prefix : seen) {
    CHECK(std::equal(prefix.begin(), prefix.end(), final_grads.begin()));
  }
  // Every parameter got a gradient (not all elements: layer4 runs at 1x1 pixels here, where the
  // off-centre taps of its 3x3 filters see only padding).
  for (const Parameter* p : model.params().in_layout_order()) {
    INFO(p->name);
    CHECK(std::any_of(final_grads.begin() + p->offset, final_grads.begin() + p->offset + p->numel,
                      [](float g) { return g != 0.0f; }));
  }
}

TEST_CASE("Batch norm uses batch statistics in training and running statistics in eval", "[nn]") {
  Context ctx({});
  ResNet18 model(ctx, test::tiny_resnet());
  test::fill_random_batch(model, 7);
  float* x = model.input().as<float>();
  const int64_t per_image = model.input().numel() / model.config().batch_size;

  // Training: image 0's logits depend on the other images through the batch statistics.
  model.forward(true);
  std::vector<float> train_before = read_floats(model.logits());
  std::vector<float> running_before = read_floats(model.params().buffer_values());
  for (int64_t i = per_image; i < model.input().numel(); ++i) x[i] *= 2.0f;
  model.forward(true);
  std::vector<float> train_after = read_floats(model.logits());
  CHECK(train_before[0] != train_after[0]);
  // ... and each training forward moves the running statistics (momentum 0.1).
  std::vector<float> running_after = read_floats(model.params().buffer_values());
  CHECK(running_before != running_after);

  // Eval: image 0's logits are its own business, and the running statistics stay put.
  model.forward(false);
  std::vector<float> eval_before = read_floats(model.logits());
  for (int64_t i = per_image; i < model.input().numel(); ++i) x[i] *= -3.0f;
  model.forward(false);
  std::vector<float> eval_after = read_floats(model.logits());
  for (int k = 0; k < model.config().num_classes; ++k) CHECK(eval_before[k] == eval_after[k]);
  CHECK(eval_before[0] != train_after[0]);
  CHECK(read_floats(model.params().buffer_values()) == running_after);
  CHECK(model.num_batches_tracked == 0);  // the trainer counts the steps, once each, not forward
}

TEST_CASE("The first training forward sets bn1's running statistics as PyTorch does", "[nn]") {
  // From running_mean 0 and running_var 1, one step with momentum 0.1 gives
  // running_mean = 0.1 * batch mean and running_var = 0.9 + 0.1 * unbiased batch variance
  // of bn1's input, conv1's output, recomputed here from the model's own weights.
  Context ctx({});
  ResNetConfig c = test::tiny_resnet();
  ResNet18 model(ctx, c);
  test::fill_random_batch(model, 9);
  model.forward(true);
  const Parameter& conv1 = *model.params().in_layout_order().back();
  REQUIRE(conv1.name == "conv1.weight");
  ConvShape shape{c.batch_size, c.image_size, c.image_size, 3, c.width, 3, 3, 1, 1};
  const int64_t rows = int64_t(c.batch_size) * shape.P() * shape.Q();
  std::vector<float> y(size_t(rows * c.width));
  conv2d_forward_cpu(model.input().as<float>(), conv1.value.as<float>(), shape, y.data());

  const BufferEntry& mean = model.buffers()[0];
  const BufferEntry& var = model.buffers()[1];
  REQUIRE(mean.name == "bn1.running_mean");
  REQUIRE(var.name == "bn1.running_var");
  for (int ch = 0; ch < c.width; ++ch) {
    double sum = 0, sum_sq = 0;
    for (int64_t r = 0; r < rows; ++r) sum += y[r * c.width + ch];
    const double m = sum / rows;
    for (int64_t r = 0; r < rows; ++r) sum_sq += (y[r * c.width + ch] - m) * (y[r * c.width + ch] - m);
    const double unbiased = sum_sq / (rows - 1);
    CHECK(mean.value.as<float>()[ch] == Approx(0.1 * m).margin(1e-6));
    CHECK(var.value.as<float>()[ch] == Approx(0.9 + 0.1 * unbiased).epsilon(1e-5));
  }
}

TEST_CASE("The table of --fusion on has one bn-relu-conv entry per block in place of bn1 and conv2", "[nn]") {
  // Note [ResNet-18's layer table]: the fused unit takes conv2's place, with bn1's name and input,
  // so the table loses one entry per block and keeps its FLOPs; every other entry is the same.
  const Stem stem = GENERATE(Stem::cifar, Stem::imagenet);
  INFO(stem_name(stem));
  ResNetConfig config = test::tiny_resnet();
  config.stem = stem;
  const ResNetLayout plain = resnet18_layout(config), fused = resnet18_layout(config, /*fused=*/true);
  REQUIRE(fused.layers.size() == plain.layers.size() - 8);
  REQUIRE(fused.forward_order.size() == plain.forward_order.size() - 8);
  double plain_flops = 0, fused_flops = 0;
  for (const LayerSpec& l : plain.layers) plain_flops += l.forward_flops + l.backward_flops;
  size_t p = 0;
  for (const LayerSpec& l : fused.layers) {
    fused_flops += l.forward_flops + l.backward_flops;
    INFO(l.name);
    if (l.kind == LayerKind::bn_relu_conv) {
      const LayerSpec &bn = plain.layers[p], &conv = plain.layers[p + 1];
      CHECK(bn.kind == LayerKind::batchnorm);
      CHECK(bn.name == l.name);
      CHECK(conv.name == l.conv_name);
      CHECK(l.name.substr(l.name.size() - 4) == ".bn1");
      CHECK(l.conv_name.substr(l.conv_name.size() - 6) == ".conv2");
      CHECK(describe(l) == "bn+relu+conv 3x3/1");
      CHECK(l.output == conv.output);
      CHECK(l.forward_flops == conv.forward_flops);
      CHECK_FALSE(l.adds_input_grad);
      CHECK(fused.layers[size_t(l.input)].name == plain.layers[size_t(bn.input)].name);
      p += 2;
    } else {
      CHECK(l.name == plain.layers[p].name);
      CHECK(l.kind == plain.layers[p].kind);
      CHECK(l.output == plain.layers[p].output);
      CHECK(l.adds_input_grad == plain.layers[p].adds_input_grad);
      // The layer whose output an entry reads: a unit's is its convolution's.
      const auto name_of = [](const ResNetLayout& t, int i) {
        if (i < 0) return std::string("image");
        const LayerSpec& read = t.layers[size_t(i)];
        return read.kind == LayerKind::bn_relu_conv ? read.conv_name : read.name;
      };
      CHECK(name_of(fused, l.input) == name_of(plain, plain.layers[p].input));
      CHECK(name_of(fused, l.residual) == name_of(plain, plain.layers[p].residual));
      ++p;
    }
  }
  CHECK(p == plain.layers.size());
  CHECK(fused_flops == plain_flops);
}
