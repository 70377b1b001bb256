// The fuzz targets (tests/fuzz/targets.h) on every seed of their corpus, and on every input a
// fuzzer once crashed on (tests/fuzz/crashes/<target>/, kept there once fixed): what fuzzing found
// stays found, in every build, sanitized ones included, without a fuzzer. scripts/fuzz.sh says how
// a new crash becomes one of these files.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "tests/fuzz/targets.h"

namespace fs = std::filesystem;

namespace {

// Runs `target` on each file of fuzz/corpus/<name>/ and fuzz/crashes/<name>/; returns how many.
size_t replay(const std::string& name, void (*target)(const uint8_t*, size_t)) {
  size_t inputs = 0;
  for (const char* folder : {"corpus", "crashes"}) {
    const fs::path dir = fs::path(CUTRAIN_FUZZ_DIR) / folder / name;
    if (!fs::is_directory(dir)) continue;
    for (const auto& entry : fs::directory_iterator(dir)) {
      std::ifstream in(entry.path(), std::ios::binary);
      const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      INFO(entry.path().string());
      CHECK_NOTHROW(target(bytes.data(), bytes.size()));
      ++inputs;
    }
  }
  return inputs;
}

}  // namespace

TEST_CASE("fuzz inputs: CIFAR-10 .bin files", "[data]") {
  CHECK(replay("cifar10_records", cutrain::fuzz::cifar10_records) >= 3);
}

TEST_CASE("fuzz inputs: image files, through cutrain's checks to stb_image", "[data]") {
  CHECK(replay("image_file", cutrain::fuzz::image_file) >= 3);
}

TEST_CASE("fuzz inputs: safetensors files", "[nn]") {
  CHECK(replay("safetensors_file", cutrain::fuzz::safetensors_file) >= 3);
}

TEST_CASE("fuzz inputs: what clients send to the store", "[dist]") {
  CHECK(replay("store_messages", cutrain::fuzz::store_messages) >= 2);
}
