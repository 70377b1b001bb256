// The disk cache of measured cuDNN engine configurations (nn/conv_engine_cache.h), host code only:
// entries survive a new process, every field of the key and the pass tell entries apart, and a
// damaged file, or one of the legacy API's algorithms, is one warning and a fresh start, never an
// exception. The measurement itself needs cuDNN on a GPU: tests/test_nn_gpu_conv_engines.cpp.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <set>

#include "nn/conv_engine_cache.h"
#include "tests/temp_dir.h"

using namespace cutrain;

namespace {

const ConvShape kShape{256, 32, 32, 64, 64, 3, 3, 1, 1};

EngineConfig some_config(int seed) { return {seed, {{2, 1}, {14, -3 + seed}}}; }

std::string key(const ConvShape& shape = kShape, DType dtype = DType::bf16) {
  return conv_engine_key("NVIDIA H200 sm_90", 91900, shape, dtype, false, false);
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

TEST_CASE("Measured engines kept on disk are found again by the next process", "[nn]") {
  test::TempDir dir;
  const std::string path = dir / "cache.txt";
  ConvShape other = kShape;
  other.stride = 2;
  {
    ConvEngineCache cache(path);
    CHECK(cache.warning().empty());  // no file yet: nothing to say
    CHECK(!cache.find(key(), ConvPass::forward));
    CHECK(cache.put(key(), ConvPass::forward, some_config(1)).empty());
    CHECK(cache.put(key(), ConvPass::backward_data_accumulate, EngineConfig{7, {}}).empty());
    CHECK(cache.put(key(other), ConvPass::forward, some_config(2)).empty());
    CHECK(cache.put(key(), ConvPass::forward_scale_shift_relu, some_config(3)).empty());
  }
  ConvEngineCache again(path);
  CHECK(again.warning().empty());
  CHECK(again.find(key(), ConvPass::forward) == some_config(1));
  CHECK(again.find(key(), ConvPass::backward_data_accumulate) == EngineConfig{7, {}});
  CHECK(!again.find(key(), ConvPass::backward_data));  // beta 0 is another graph
  // The forward with the fused unit's prologue is another graph too: its plan is never a plain one's.
  CHECK(again.find(key(), ConvPass::forward_scale_shift_relu) == some_config(3));
  CHECK(!again.find(key(other), ConvPass::forward_scale_shift_relu));
  CHECK(again.find(key(other), ConvPass::forward) == some_config(2));
  CHECK(describe(some_config(1)) == "engine 1 (knobs 2=1 14=-2)");
}

TEST_CASE("The engine cache key tells apart GPU, cuDNN version, shape, dtype, determinism and TF32", "[nn]") {
  ConvShape wider = kShape;
  wider.K = 128;
  const std::set<std::string> keys = {
      conv_engine_key("NVIDIA H200 sm_90", 91900, kShape, DType::bf16, false, false),
      conv_engine_key("NVIDIA A100-SXM4-80GB sm_80", 91900, kShape, DType::bf16, false, false),
      conv_engine_key("NVIDIA H200 sm_90", 91800, kShape, DType::bf16, false, false),
      conv_engine_key("NVIDIA H200 sm_90", 91900, wider, DType::bf16, false, false),
      conv_engine_key("NVIDIA H200 sm_90", 91900, kShape, DType::f32, false, false),
      conv_engine_key("NVIDIA H200 sm_90", 91900, kShape, DType::bf16, true, false),
      conv_engine_key("NVIDIA H200 sm_90", 91900, kShape, DType::bf16, false, true),
  };
  CHECK(keys.size() == 7);
}

TEST_CASE("A damaged engine cache, or one of the legacy algorithms, is one warning and a fresh start", "[nn]") {
  test::TempDir dir;
  const std::string path = dir / "cache.txt";
  ConvEngineCache good(path);
  REQUIRE(good.put(key(), ConvPass::forward, some_config(1)).empty());
  std::ifstream in(path);
  const std::string header_and_entry((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string header = header_and_entry.substr(0, header_and_entry.find('\n') + 1);
  const std::string entry = key() + "\tforward\t";

  for (const std::string& damaged :
       {std::string("\x89PNG\r\n garbage"), "cutrain cuDNN convolution algorithms v1\n" + key() + "\t1 1 0 1 3 0 5 0 7\n",
        header + entry + "\n",                                 // no engine
        header + entry + "3 2=1 99=0\n",                       // no such knob type
        header + entry + "3 2:1\n",                            // not type=value
        header + key() + "\tsideways\t3\n",                    // no such pass
        header + "no tabs here 3\n"}) {
    INFO(damaged);
    write_file(path, damaged);
    ConvEngineCache cache(path);
    CHECK(cache.warning().find(path + ": line ") == 0);
    CHECK(cache.warning().find("; measuring again") != std::string::npos);
    CHECK(!cache.find(key(), ConvPass::forward));
    // The new measurement replaces the damaged file.
    CHECK(cache.put(key(), ConvPass::forward, some_config(3)).empty());
    ConvEngineCache rewritten(path);
    CHECK(rewritten.warning().empty());
    CHECK(rewritten.find(key(), ConvPass::forward) == some_config(3));
  }
}

TEST_CASE("An engine cache that cannot be written says why instead of failing", "[nn]") {
  test::TempDir dir;
  write_file(dir / "a-file", "");
  ConvEngineCache cache(dir / "a-file" + "/cache.txt");  // a folder that cannot exist
  CHECK(cache.put(key(), ConvPass::forward, some_config(1)).find("cannot write") != std::string::npos);
  CHECK(cache.find(key(), ConvPass::forward) == some_config(1));  // this process still has it
}
