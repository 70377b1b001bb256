#include "app/datasets.h"

#include <cstdlib>
#include <filesystem>

#include "data/load.h"
#include "data/synthetic.h"

namespace cutrain {
namespace fs = std::filesystem;

std::string synthetic_cache_dir(int train, int test) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path root = xdg && *xdg ? fs::path(xdg) : fs::path(home && *home ? home : "/tmp") / ".cache";
  return (root / "cutrain" / ("synthetic-" + std::to_string(train) + "-" + std::to_string(test))).string();
}

Datasets load_datasets(const std::string& data_dir, int synthetic_train, int synthetic_test,
                       int64_t max_image_pixels) {
  if (!data_dir.empty())
    return {load_dataset(data_dir, true, max_image_pixels), load_dataset(data_dir, false, max_image_pixels), data_dir};
  // The synthetic dataset's seed is fixed: the data is the same whatever the training seed.
  const std::string cache = synthetic_cache_dir(synthetic_train, synthetic_test);
  ensure_synthetic_cifar10(cache, synthetic_train, synthetic_test, 0);
  return {load_dataset(cache, true), load_dataset(cache, false), cache};
}

}  // namespace cutrain
