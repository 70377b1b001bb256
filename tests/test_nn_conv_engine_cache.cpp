// The disk cache of measured cuDNN algorithms (nn/conv_algorithms.h), host code only: entries
// survive a new process, every field of the key tells entries apart, and a damaged file is one
// warning and a fresh start, never an exception. The choice itself needs cuDNN on a GPU:
// tests/test_nn_gpu_conv_algorithms.cpp.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <set>

#include "nn/conv_algorithms.h"
#include "tests/temp_dir.h"

using namespace cutrain;

namespace {

const ConvShape kShape{256, 32, 32, 64, 64, 3, 3, 1, 1};

ConvAlgorithms some_algorithms(int seed) {
  ConvAlgorithms a;
  a.forward = {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_TENSOR_OP_MATH, size_t(1024 * seed)};
  a.backward_data = {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, CUDNN_FMA_MATH, 0};
  a.backward_filter = {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED, CUDNN_DEFAULT_MATH, size_t(7 + seed)};
  return a;
}

std::string key(const ConvShape& shape = kShape, DType dtype = DType::bf16) {
  return conv_algorithm_key("NVIDIA H200 sm_90", 91900, shape, dtype, false, false);
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

TEST_CASE("Measured algorithms kept on disk are found again by the next process", "[nn]") {
  test::TempDir dir;
  const std::string path = dir / "cache.txt";
  ConvShape other = kShape;
  other.stride = 2;
  {
    ConvAlgorithmCache cache(path);
    CHECK(cache.warning().empty());  // no file yet: nothing to say
    CHECK(!cache.find(key()));
    CHECK(cache.put(key(), some_algorithms(1)).empty());
    CHECK(cache.put(key(other), some_algorithms(2)).empty());
  }
  ConvAlgorithmCache again(path);
  CHECK(again.warning().empty());
  REQUIRE(again.find(key()));
  CHECK(*again.find(key()) == some_algorithms(1));
  CHECK(*again.find(key(other)) == some_algorithms(2));
  CHECK(some_algorithms(1).workspace() == 1024);
}

TEST_CASE("The cache key tells apart GPU, cuDNN version, shape, dtype, determinism and TF32", "[nn]") {
  ConvShape wider = kShape;
  wider.K = 128;
  const std::set<std::string> keys = {
      conv_algorithm_key("NVIDIA H200 sm_90", 91900, kShape, DType::bf16, false, false),
      conv_algorithm_key("NVIDIA A100-SXM4-80GB sm_80", 91900, kShape, DType::bf16, false, false),
      conv_algorithm_key("NVIDIA H200 sm_90", 91800, kShape, DType::bf16, false, false),
      conv_algorithm_key("NVIDIA H200 sm_90", 91900, wider, DType::bf16, false, false),
      conv_algorithm_key("NVIDIA H200 sm_90", 91900, kShape, DType::f32, false, false),
      conv_algorithm_key("NVIDIA H200 sm_90", 91900, kShape, DType::bf16, true, false),
      conv_algorithm_key("NVIDIA H200 sm_90", 91900, kShape, DType::bf16, false, true),
  };
  CHECK(keys.size() == 7);
}

TEST_CASE("A damaged algorithm cache is one warning and a fresh start", "[nn]") {
  test::TempDir dir;
  const std::string path = dir / "cache.txt";
  ConvAlgorithmCache good(path);
  REQUIRE(good.put(key(), some_algorithms(1)).empty());
  std::ifstream in(path);
  const std::string header_and_entry((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string header = header_and_entry.substr(0, header_and_entry.find('\n') + 1);
  const std::string entry_key = key() + "\t";

  for (const std::string& damaged : {std::string("\x89PNG\r\n garbage"), header + entry_key + "1 1 1024 1 3 0\n",
                                     header + entry_key + "1 1 1024 1 3 0 99 0 7\n",  // no such algorithm
                                     header + entry_key + "1 1 1024 1 3 0 5 0 7 extra\n",
                                     header + "no tab here 1 1 1024 1 3 0 5 0 7\n"}) {
    INFO(damaged);
    write_file(path, damaged);
    ConvAlgorithmCache cache(path);
    CHECK(cache.warning().find(path + ": line ") == 0);
    CHECK(cache.warning().find("; measuring again") != std::string::npos);
    CHECK(!cache.find(key()));
    // The new measurement replaces the damaged file.
    CHECK(cache.put(key(), some_algorithms(3)).empty());
    ConvAlgorithmCache rewritten(path);
    CHECK(rewritten.warning().empty());
    CHECK(rewritten.find(key()) == some_algorithms(3));
  }
}

TEST_CASE("An algorithm cache that cannot be written says why instead of failing", "[nn]") {
  test::TempDir dir;
  write_file(dir / "a-file", "");
  ConvAlgorithmCache cache(dir / "a-file" + "/cache.txt");  // a folder that cannot exist
  CHECK(cache.put(key(), some_algorithms(1)).find("cannot write") != std::string::npos);
  CHECK(cache.find(key()) == some_algorithms(1));  // this process still has it
}
