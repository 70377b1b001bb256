// [gpu] cuDNN's engine choice (nn/conv_engines.h) through `cutrain bench-step`: the heuristics
// give every convolution a usable engine without a warning; --cudnn-benchmark times the candidate
// plans once and keeps the winners on disk, a later run reads them without writing, and a damaged
// cache file costs one warning line and a new measurement.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/gpu.h"
#include "tests/process.h"

namespace {

cutrain::test::Process::Result bench_step(const std::string& cache_dir, std::vector<std::string> extra,
                                          const std::string& fault = "") {
  std::vector<std::string> argv = {"/usr/bin/env", "CUTRAIN_EMU_CUDNN_FAIL=" + fault, "CUTRAIN_CACHE_DIR=" + cache_dir,
                                   cutrain::test::binary("cutrain"), "bench-step", "--device", "cuda", "--batch-size",
                                   "8", "--width", std::to_string(kGpuTestWidth), "--steps", "1", "--warmup", "1"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return cutrain::test::run(argv);
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
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
      CHECK(count(r.output, "warning") == 0);
      CHECK(count(r.output, "cuDNN's engines by heuristics") == 1);
    }
  }
  CHECK(!std::filesystem::exists(dir / "cudnn-conv-algorithms.txt"));  // heuristics keep nothing
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
  CHECK(count(text.str(), "\n") > 20);
  const auto written = std::filesystem::last_write_time(cache);

  auto second = bench_step(dir.path().string(), {"--cudnn-benchmark", "--precision", "bf16"});
  INFO(second.output);
  CHECK(second.exit_code == 0);
  CHECK(count(second.output, "warning") == 0);
  CHECK(std::filesystem::last_write_time(cache) == written);  // everything found: nothing written

  std::ofstream(cache) << "not a cache\n";
  auto damaged = bench_step(dir.path().string(), {"--cudnn-benchmark", "--precision", "bf16"});
  INFO(damaged.output);
  CHECK(damaged.exit_code == 0);
  CHECK(count(damaged.output, "warning") == 1);
  CHECK(count(damaged.output, "cudnn-conv-algorithms.txt: line 1: not a cutrain engine cache") == 1);
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
  CHECK(count(faulty.output, "engine 1 failed for N=") == 14);
  CHECK(count(faulty.output, "; using engine 2 for that shape from now on") == 14);
  CHECK(count(faulty.output, "(CUDNN_STATUS_EXECUTION_FAILED (emulated cuDNN: injected by CUTRAIN_EMU_CUDNN_FAIL") ==
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
  CHECK(count(bad_param.output, "warning") == 14);
  CHECK(count(bad_param.output, "(CUDNN_STATUS_BAD_PARAM (emulated cuDNN: injected by CUTRAIN_EMU_CUDNN_FAIL") ==
        14);
  // With every engine failing there is nothing to fall back on: one error.
  const auto hopeless = bench_step(dir.path().string(), run, "backward_data:engine=any:execution_failed");
  CHECK(hopeless.exit_code == 1);
  CHECK_THAT(hopeless.output, Catch::Contains("cudnnBackendExecute (backward-data") &&
                                  Catch::Contains("CUDNN_STATUS_EXECUTION_FAILED"));
}
#endif
