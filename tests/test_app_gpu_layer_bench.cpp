// `cutrain bench-step --layers` (app/bench/layer_bench.h), on whatever device the build has: the
// per-layer table names every layer of ResNet-18 once, in the order the model builds them, with
// its output's shape; its FLOP columns add up to the step's FLOPs; the table of batch norm by
// shape has every implementation for every shape; and the bench's step, one layer at a time,
// computes the trainer's step. The times are not tested: only a GPU can give them.
#include <catch2/catch.hpp>

#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "app/bench/layer_bench.h"
#include "app/train_step.h"
#include "nn/resnet.h"
#include "tests/gpu.h"
#include "tests/process.h"

using namespace cutrain;

namespace {

constexpr int kWidth = 4, kBatch = 4;

struct LayerRow {
  std::string name, op, output;
  double forward_mflop = 0, backward_mflop = 0;
};

struct LayerOutput {
  std::string text;
  std::vector<LayerRow> layers;  // the per-layer table's rows, sgd and total left out
  LayerRow total;
  std::vector<std::string> shape_header, shape_rows;  // the batch-norm-by-shape table
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The model the binary's run below times.
ResNetConfig bench_config() {
  ResNetConfig config;
  config.width = kWidth;
  config.batch_size = kBatch;
  return config;
}

// One run of the binary for every test here (the emulated device takes a few seconds).
const LayerOutput& layer_bench_output() {
  static const LayerOutput output = [] {
    LayerOutput o;
    auto r = test::run({test::binary("cutrain"), "bench-step", "--layers", "--width", std::to_string(kWidth),
                        "--batch-size", std::to_string(kBatch), "--steps", "1", "--warmup", "1"});
    o.text = r.output;
    REQUIRE(r.exit_code == 0);
    const std::regex row("^  (\\S+) +(.+?) +(\\S+) +\\S+ +\\S+ +([0-9.]+) +([0-9.]+) +\\S+ +\\S+ +\\S+ +\\S+$");
    const std::regex total("^  total +\\S+ +\\S+ +([0-9.]+) +([0-9.]+) +\\S+ +\\S+ +\\S+ +\\S+$");
    enum { before, layers, between, shapes } part = before;
    for (const std::string& line : lines_of(r.output)) {
      std::smatch m;
      if (part == before && line.starts_with("  layer ")) {
        part = layers;
      } else if (part == layers && std::regex_match(line, m, total)) {
        o.total = {"total", "", "", std::stod(m[1]), std::stod(m[2])};
        part = between;
      } else if (part == layers && !line.starts_with("  sgd ") && std::regex_match(line, m, row)) {
        o.layers.push_back({m[1], m[2], m[3], std::stod(m[4]), std::stod(m[5])});
      } else if (part == between && line.starts_with("batch norm by shape")) {
        part = shapes;
      } else if (part == shapes && line.starts_with("  ")) {
        if (o.shape_header.size() < 2) {
          o.shape_header.push_back(line);
        } else {
          o.shape_rows.push_back(line);
        }
      }
    }
    return o;
  }();
  return output;
}

// The layers ResNet18 registers parameters for, in the order it builds them ("conv1", "bn1",
// "layer1.0.conv1", ...), with the parameterless ones where the model runs them.
std::vector<std::string> resnet18_layer_names(const ResNetConfig& config) {
  ContextOptions options;
  options.device = Device::cuda;
  Context ctx(options);
  ResNet18 model(ctx, config);
  std::vector<std::string> names;
  const std::vector<Parameter*>& layout = model.params().in_layout_order();  // backward order
  for (auto it = layout.rbegin(); it != layout.rend(); ++it) {
    const std::string name = (*it)->name.substr(0, (*it)->name.rfind('.'));
    if (!names.empty() && (names.back() == name || (name == "bn1" && names.back() == "maxpool"))) continue;
    names.push_back(name);
    if (name == "bn1" && config.stem == Stem::imagenet) names.push_back("maxpool");
  }
  names.insert(names.end() - 1, "avgpool");  // before fc
  names.push_back("loss");
  return names;
}

}  // namespace

TEST_CASE("bench-step --layers lists every layer of ResNet-18 once, in the model's order, with its shape",
          CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  const LayerOutput& o = layer_bench_output();
  INFO(o.text);
  const ResNetConfig config = bench_config();
  const std::vector<std::string> expected = resnet18_layer_names(config);
  std::vector<std::string> listed;
  for (const LayerRow& row : o.layers) listed.push_back(row.name);
  CHECK(listed == expected);
  CHECK(expected.size() == 2 + 8 * 4 + 3 * 2 + 3);  // the stem, 8 blocks, 3 downsamples, avgpool, fc, loss
  for (const LayerRow& row : o.layers) {
    INFO(row.name << " " << row.op << " " << row.output);
    std::smatch stage;
    if (std::regex_match(row.name, stage, std::regex("layer([1-4])\\.([01])\\.(.*)"))) {
      const int s = std::stoi(stage[1]) - 1, side = 32 >> s, channels = kWidth << s;
      CHECK(row.output == shape_text({kBatch, side, side, channels}));
      const std::string part = stage[3];
      const bool first_of_stage = s > 0 && stage[2] == "0";
      if (part == "conv1") CHECK(row.op == (first_of_stage ? "conv 3x3/2" : "conv 3x3/1"));
      if (part == "conv2") CHECK(row.op == "conv 3x3/1");
      if (part == "downsample.0") CHECK(row.op == "conv 1x1/2");
      if (part == "downsample.1") CHECK(row.op == "bn");
      if (part == "bn1") CHECK(row.op == "bn+relu");
      if (part == "bn2") CHECK(row.op == "bn+add+relu");
    } else if (row.name == "conv1" || row.name == "bn1") {
      CHECK(row.output == shape_text({kBatch, 32, 32, kWidth}));
      CHECK(row.op == (row.name == "conv1" ? "conv 3x3/1" : "bn+relu"));
    } else if (row.name == "avgpool") {
      CHECK(row.output == shape_text({kBatch, 8 * kWidth}));
    } else if (row.name == "fc") {
      CHECK(row.output == shape_text({kBatch, 10}));
    } else {
      CHECK(row.name == "loss");
      CHECK(row.output == "1");
    }
  }
}

TEST_CASE("bench-step --layers: the FLOP columns add up to the step's FLOPs", CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  const LayerOutput& o = layer_bench_output();
  INFO(o.text);
  const ResNetConfig config = bench_config();
  double forward = 0, backward = 0;
  for (const LayerRow& row : o.layers) {
    forward += row.forward_mflop;
    backward += row.backward_mflop;
    // A convolution's backward is its data and filter gradients, twice its forward; the stem has
    // no data gradient; batch norm, the pools and the loss count none.
    if (row.op.starts_with("conv")) {
      CHECK(row.backward_mflop == Approx((row.name == "conv1" ? 1 : 2) * row.forward_mflop).margin(0.011));
    } else if (row.op != "linear") {
      CHECK(row.forward_mflop + row.backward_mflop == 0);
    }
  }
  // Each printed figure is rounded to 0.005 MFLOP.
  const double rounding = 0.005 * double(o.layers.size());
  CHECK(forward + backward == Approx(step_flops(config) / 1e6).margin(2 * rounding));
  CHECK(o.total.forward_mflop + o.total.backward_mflop == Approx(step_flops(config) / 1e6).margin(0.01));
  CHECK(o.total.forward_mflop == Approx(forward).margin(rounding));
  // The figure the matrix's fraction of the peak has counted since issue 20: 852.2 GFLOP per
  // step at width 64, batch 256.
  ResNetConfig full;
  full.width = 64;
  full.batch_size = 256;
  CHECK(step_flops(full) / 1e9 == Approx(852.2).margin(0.05));
}

TEST_CASE("bench-step --layers times batch norm by shape with all three implementations", CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  const LayerOutput& o = layer_bench_output();
  INFO(o.text);
  REQUIRE(o.shape_header.size() == 2);
  CHECK(std::regex_search(o.shape_header[0], std::regex("cooperative +split +cudnn$")));
  std::vector<std::string> expected;  // "shape op layers", in order of first appearance
  std::map<std::string, int> count;
  for (const LayerRow& row : o.layers) {
    if (!row.op.starts_with("bn")) continue;
    const std::string key = row.output + " " + row.op;
    if (count[key]++ == 0) expected.push_back(key);
  }
  // The stem's and layer1's shape with bn+relu and bn+add+relu; each later stage's with those and the
  // downsample's bn.
  REQUIRE(expected.size() == 2 + 3 * 3);
  std::vector<std::string> listed;
  const std::regex row("^  (\\S+) +(\\S+) +([0-9]+)(( +[0-9.]+){6}) +(cooperative|split|cudnn)$");
  for (const std::string& line : o.shape_rows) {
    std::smatch m;
    INFO(line);
    REQUIRE(std::regex_match(line, m, row));
    CHECK(std::stoi(m[3]) == count[std::string(m[1]) + " " + std::string(m[2])]);
    listed.push_back(std::string(m[1]) + " " + std::string(m[2]));
  }
  CHECK(listed == expected);
  CHECK(std::regex_search(o.text, std::regex("\nbatch norm in all [^\n]*: cooperative [0-9.]+ ms, split [0-9.]+ ms, "
                                             "cudnn [0-9.]+ ms\n")));
}

TEST_CASE("The bench's step, one layer at a time in table order, is the trainer's step", CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  ContextOptions options;
  options.device = Device::cuda;
  options.streams = 1;
  options.deterministic = true;  // the losses are compared bit for bit (Note [Emulated atomics])
  Context ctx(options);
  ResNetConfig config;
  config.width = 8;
  config.batch_size = 4;
  ResNet18 model(ctx, config), layers(ctx, config);
  fill_synthetic_batch(model.input(), model.labels(), config.num_classes);
  fill_synthetic_batch(layers.input(), layers.labels(), config.num_classes);
  TrainStepOptions step_options;
  step_options.schedule = LrSchedule{LrScheduleKind::constant, 0.01, 1, 0};  // as the bench's
  TrainStep step(model, nullptr, step_options);
  SGD sgd(ctx, layers.params(), SgdConfig{}, step_options.schedule, SGD::Grads::as_written);
  for (int i = 0; i < 2; ++i) {
    step.run();
    step_layer_by_layer(layers, sgd, [] {});
    float model_loss = 0, layers_loss = 0;
    copy_to_host(Tensor(const_cast<float*>(model.loss()), DType::f32, ctx.device(), {1}), &model_loss);
    copy_to_host(Tensor(const_cast<float*>(layers.loss()), DType::f32, ctx.device(), {1}), &layers_loss);
    INFO("step " << i);
    CHECK(layers_loss == model_loss);
  }
}

#ifdef CUTRAIN_CUDA_EMULATION
TEST_CASE("bench-step --matrix and --layers go on past a batch norm that cuDNN refuses, in one line for it",
          CUTRAIN_GPU_TAG) {
  // The emulated cuDNN refuses its batch norm when the model is built, as a cuDNN that does not take
  // the configuration would (Note [Emulated cuDNN faults]).
  ::setenv("CUTRAIN_EMU_CUDNN_FAIL", "batchnorm:algo=any:not_supported", 1);
  const std::vector<std::string> small = {"--width", std::to_string(kWidth), "--batch-size", std::to_string(kBatch),
                                          "--image-size", "8", "--steps", "1", "--warmup", "1"};
  std::vector<std::string> matrix_argv = {test::binary("cutrain"), "bench-step", "--matrix"}, layers_argv = matrix_argv;
  layers_argv.back() = "--layers";
  matrix_argv.insert(matrix_argv.end(), small.begin(), small.end());
  layers_argv.insert(layers_argv.end(), small.begin(), small.end());
  const auto matrix = test::run(matrix_argv);
  const auto layers = test::run(layers_argv);
  ::unsetenv("CUTRAIN_EMU_CUDNN_FAIL");

  INFO(matrix.output);
  CHECK(matrix.exit_code == 0);
  CHECK(matrix.output.find("\n  cudnn: not supported here: CUDNN_STATUS_NOT_SUPPORTED") != std::string::npos);
  CHECK(matrix.output.find("\n  cudnn ") == std::string::npos);  // no row of it
  CHECK(std::regex_search(matrix.output, std::regex("\n  split +1 +graph .*\n")));
  CHECK(std::regex_search(matrix.output, std::regex("\nmatrix: fastest (cooperative|split), ")));
  INFO(layers.output);
  CHECK(layers.exit_code == 0);
  CHECK(layers.output.find("\ncudnn: not supported here: CUDNN_STATUS_NOT_SUPPORTED") != std::string::npos);
  CHECK(std::regex_search(layers.output, std::regex("\nbatch norm in all [^\n]*: cooperative [0-9.]+ ms, split [0-9.]+ ms\n")));
}
#endif
