// cutrain's cache folder (kernels/base/cache_dir.h): one rule for everything it keeps across runs,
// the synthetic dataset and cuDNN's measured engines alike.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "app/datasets.h"
#include "kernels/base/cache_dir.h"
#include "nn/conv_engine_cache.h"
#include "tests/temp_dir.h"

using namespace cutrain;

namespace {

// Sets an environment variable for the scope of a test, and puts back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

TEST_CASE("the cache folder is CUTRAIN_CACHE_DIR, else XDG_CACHE_HOME/cutrain, else ~/.cache/cutrain", "[app]") {
  ScopedEnv home("HOME", "/home/u"), xdg("XDG_CACHE_HOME", ""), own("CUTRAIN_CACHE_DIR", "");
  CHECK(cutrain_cache_dir() == "/home/u/.cache/cutrain");
  CHECK(conv_engine_cache_path() == "/home/u/.cache/cutrain/cudnn-conv-algorithms.txt");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  CHECK(cutrain_cache_dir() == "/xdg/cutrain");
  setenv("CUTRAIN_CACHE_DIR", "/scratch/c", 1);
  CHECK(cutrain_cache_dir() == "/scratch/c");
  CHECK(conv_engine_cache_path() == "/scratch/c/cudnn-conv-algorithms.txt");
}

TEST_CASE("the synthetic dataset is made in CUTRAIN_CACHE_DIR when it is set", "[app]") {
  test::TempDir dir;
  ScopedEnv own("CUTRAIN_CACHE_DIR", dir.path().string());
  const std::string made = ensure_synthetic_cache(20, 10, 1.0);
  CHECK(std::filesystem::path(made).parent_path() == dir.path());
  CHECK(std::filesystem::exists(std::filesystem::path(made) / "test_batch.bin"));
}
