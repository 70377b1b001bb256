// [gpu] cuDNN's engine choice (nn/conv_engines.h) through `cutrain bench-step`: the heuristics
// give every convolution a usable engine without a warning; --cudnn-benchmark times the candidate
// plans once and keeps the winners on disk, a later run reads them without writing, and a damaged
// cache file costs one warning line and a new measurement.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "nn/conv_engines.h"
#include "tests/device_buffer.h"
#include "tests/gpu.h"
#include "tests/output_lines.h"
#include "tests/process.h"

namespace {

using cutrain::test::count_of;

cutrain::test::Process::Result bench_step(const std::string& cache_dir, std::vector<std::string> extra,
                                          const std::string& fault = "") {
  std::vector<std::string> argv = {"/usr/bin/env", "CUTRAIN_EMU_CUDNN_FAIL=" + fault, "CUTRAIN_CACHE_DIR=" + cache_dir,
                                   cutrain::test::binary("cutrain"), "bench-step", "--device", "cuda", "--batch-size",
                                   "8", "--width", std::to_string(kGpuTestWidth), "--steps", "1", "--warmup", "1"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return cutrain::test::run(argv);
}

}  // namespace

TEST_CASE("cuDNN's heuristics choose a usable engine for every convolution", CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  cutrain::test::TempDir dir;
  for (const char* stem : {"cifar", "imagenet"}) {
    for (const char* precision : {"fp32", "bf16"}) {
      auto r = bench_step(dir.path().string(), {"--stem", stem, "--precision", precision});
      INFO(r.output);
      CHECK(r.exit_code == 0);
      CHECK(count_of(r.output, "warning") == 0);
      CHECK(count_of(r.output, "cuDNN's engines by heuristics") == 1);
    }
  }
  CHECK(!std::filesystem::exists(dir / "cudnn-conv-algorithms.txt"));  // heuristics keep nothing
}

TEST_CASE("The fused forward's graph is the convolution of relu(x*scale + shift), its prologue in fp32",
          CUTRAIN_GPU_TAG) {
  // nn/conv_graph.h's forward-scale-shift-relu against the CPU's convolution of the activation
  // computed on the host, each product and sum rounded once (Note [Batch norm before a fused
  // convolution] in kernels/batchnorm.h). The two convolutions add in their own orders: 1e-5 of the
  // output's largest value. A prologue without its shift, or with scale and shift swapped, is off
  // by O(1).
  CUTRAIN_REQUIRE_GPU();
  using cutrain::test::PoisonedBuffer;
  cutrain::ContextOptions options;
  options.device = cutrain::Device::cuda;
  options.deterministic = true;
  cutrain::Context ctx(options);
  const cutrain::ConvShape s{4, 6, 6, 16, 8, 3, 3, 1, 1};
  std::string why;
  const cutrain::ConvPlan* plan = cutrain::try_conv_plan(ctx, cutrain::ConvPass::forward_scale_shift_relu, s, why);
  INFO(why);
  REQUIRE(plan);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  auto random = [&](size_t n, float mean) {
    std::vector<float> v(n);
    for (float& e : v) e = mean + normal(rng);
    return v;
  };
  const std::vector<float> x = random(size_t(s.N) * s.H * s.W * s.C, 2.0f), w = random(size_t(s.K) * 9 * s.C, 0.0f),
                           scale = random(size_t(s.C), 0.5f), shift = random(size_t(s.C), -1.0f);
  PoisonedBuffer<float> x_d(x), w_d(w), scale_d(scale), shift_d(shift), y_d(size_t(s.N) * s.P() * s.Q() * s.K);
  PoisonedBuffer<char> workspace(std::max<size_t>(plan->workspace(), 1));
  const cutrain::BackendDescriptor pack = cutrain::ConvGraph::variant_pack(
      {x_d.get(), w_d.get(), y_d.get(), workspace.get(), scale_d.get(), shift_d.get()});
  CUDNN_CHECK(cudnnBackendExecute(ctx.cudnn(ctx.main_stream()), plan->get(), pack.get()));
  const std::vector<float> got = y_d.copy_to_host();

  std::vector<float> activation(x.size()), want(got.size());
  int zeros = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float product = x[i] * scale[i % size_t(s.C)];
    const float z = product + shift[i % size_t(s.C)];
    activation[i] = z > 0 ? z : 0;
    zeros += z <= 0;
  }
  REQUIRE(zeros > int(x.size()) / 10);  // the ReLU is at work
  cutrain::conv2d_forward_cpu(activation.data(), w.data(), s, want.data());
  double largest = 0, error = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    largest = std::max(largest, double(std::fabs(want[i])));
    error = std::max(error, double(std::fabs(got[i] - want[i])));
  }
  INFO("largest difference " << error << " of " << largest);
  CHECK(error <= 1e-5 * largest);
}

TEST_CASE("A plain convolution's graph that cuDNN declines is an error naming the call, and a fused one's an answer",
          CUTRAIN_GPU_TAG) {
  // A 5x5 filter over a 2x2 image without padding has no output: cuDNN refuses the graph's
  // tensors. For a plain pass that is a bug, reported by the check macro with its call, file and
  // line; the fused forward's refusal is the reason its unit runs unfused.
  CUTRAIN_REQUIRE_GPU();
  cutrain::ContextOptions options;
  options.device = cutrain::Device::cuda;
  cutrain::Context ctx(options);
  const cutrain::ConvShape no_output{1, 2, 2, 8, 8, 5, 5, 1, 0};
  CHECK_THROWS_WITH(cutrain::conv_plan(ctx, cutrain::ConvPass::forward, no_output),
                    Catch::Contains("cudnnBackendFinalize(descriptor_) failed at ") && Catch::Contains("tensor"));
  std::string why;
  CHECK(cutrain::try_conv_plan(ctx, cutrain::ConvPass::forward_scale_shift_relu, no_output, why) == nullptr);
  CHECK_THAT(why, Catch::StartsWith("cuDNN declines the graph ("));
}

TEST_CASE("Timed engines (--cudnn-benchmark) are kept on disk, and a damaged file is one warning", CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  cutrain::test::TempDir dir;
  const std::string cache = dir / "cudnn-conv-algorithms.txt";
  auto first = bench_step(dir.path().string(), {"--cudnn-benchmark", "--precision", "bf16"});
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  REQUIRE(std::filesystem::exists(cache));
  std::ifstream in(cache);
  std::stringstream text;
  text << in.rdbuf();
  // ResNet-18 has more than 10 distinct convolution shapes, each with a forward and a
  // backward-filter line, and a header line.
  CHECK(count_of(text.str(), "\n") > 20);
  const auto written = std::filesystem::last_write_time(cache);

  auto second = bench_step(dir.path().string(), {"--cudnn-benchmark", "--precision", "bf16"});
  INFO(second.output);
  CHECK(second.exit_code == 0);
  CHECK(count_of(second.output, "warning") == 0);
  CHECK(std::filesystem::last_write_time(cache) == written);  // everything found: nothing written

  std::ofstream(cache) << "not a cache\n";
  auto damaged = bench_step(dir.path().string(), {"--cudnn-benchmark", "--precision", "bf16"});
  INFO(damaged.output);
  CHECK(damaged.exit_code == 0);
  CHECK(count_of(damaged.output, "warning") == 1);
  CHECK(count_of(damaged.output, "cudnn-conv-algorithms.txt: line 1: not a cutrain engine cache") == 1);
  std::ifstream again(cache);
  std::string header;
  std::getline(again, header);
  CHECK(header == "cutrain cuDNN convolution engines v2");
}

#ifdef CUTRAIN_CUDA_EMULATION
// Only the emulated cuDNN can be made to fail (CUTRAIN_EMU_CUDNN_FAIL). Note [Engine fallback].
TEST_CASE("a cuDNN engine that fails when it runs is replaced, once per shape, and training goes on", "[emu]") {
  cutrain::test::TempDir dir;
  const std::vector<std::string> run = {"--stem", "cifar", "--precision", "fp32"};
  const auto clean = bench_step(dir.path().string(), run);
  // Backward-data's engine 1, the first that strict fp32 may use for every shape here (engine 0
  // has tensor cores; Note [Emulated engines]).
  const auto faulty = bench_step(dir.path().string(), run, "backward_data:engine=1:execution_failed");
  INFO(faulty.output);
  REQUIRE(faulty.exit_code == 0);
  // One line for each shape of convolution with an input gradient and each beta it is computed
  // with: 14, the ten shapes and again the four 3x3 stride-1 ones, which have layers of both.
  CHECK(count_of(faulty.output, "engine 1 failed for N=") == 14);
  CHECK(count_of(faulty.output, "; using engine 2 for that shape from now on") == 14);
  CHECK(count_of(faulty.output, "(CUDNN_STATUS_EXECUTION_FAILED (emulated cuDNN: injected by CUTRAIN_EMU_CUDNN_FAIL") ==
        14);
  // Every emulated engine computes the same sums: the same loss.
  const auto last_loss = [](const std::string& output) {
    const size_t at = output.find("last loss");
    return output.substr(at, output.find(')', at) - at);
  };
  CHECK(last_loss(faulty.output) == last_loss(clean.output));
  // CUDNN_STATUS_BAD_PARAM from one engine is replaced the same way. An engine whose plan cuDNN
  // declines to build (forward's engine 2 here, which its heuristics rank first) is passed over when
  // the model is planned, without a line.
  const auto bad_param =
      bench_step(dir.path().string(), run, "backward_data:engine=1:bad_param,forward:engine=2:not_supported");
  INFO(bad_param.output);
  CHECK(bad_param.exit_code == 0);
  CHECK(count_of(bad_param.output, "warning") == 14);
  CHECK(count_of(bad_param.output, "(CUDNN_STATUS_BAD_PARAM (emulated cuDNN: injected by CUTRAIN_EMU_CUDNN_FAIL") ==
        14);
  // With every engine failing there is nothing to fall back on: one error.
  const auto hopeless = bench_step(dir.path().string(), run, "backward_data:engine=any:execution_failed");
  CHECK(hopeless.exit_code == 1);
  CHECK_THAT(hopeless.output, Catch::Contains("cudnnBackendExecute (backward-data") &&
                                  Catch::Contains("CUDNN_STATUS_EXECUTION_FAILED"));
}
#endif
