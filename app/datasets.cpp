#include "app/datasets.h"

#include <filesystem>

#include "data/load.h"
#include "data/synthetic.h"
#include "kernels/base/cache_dir.h"

namespace cutrain {
namespace fs = std::filesystem;

std::string ensure_synthetic_cache(int train, int test, double difficulty, const Announce& announce) {
  const std::string dir = (fs::path(cutrain_cache_dir()) / synthetic_folder_name(train, test, 0, difficulty)).string();
  if (announce && !fs::is_directory(dir))
    announce("making the synthetic dataset (" + std::to_string(train) + " training and " + std::to_string(test) +
             " test images) in " + dir + ", once: later runs read it there");
  ensure_synthetic_cifar10(dir, train, test, 0, difficulty);
  return dir;
}

Datasets load_datasets(const std::string& data_dir, int synthetic_train, int synthetic_test,
                       double synthetic_difficulty, int64_t max_image_pixels, const Announce& announce) {
  if (!data_dir.empty())
    return {load_dataset(data_dir, true, max_image_pixels), load_dataset(data_dir, false, max_image_pixels), data_dir};
  const std::string cache = ensure_synthetic_cache(synthetic_train, synthetic_test, synthetic_difficulty, announce);
  return {load_dataset(cache, true), load_dataset(cache, false), cache};
}

}  // namespace cutrain
