#include "app/datasets.h"

#include <unistd.h>

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

Datasets load_datasets(const std::string& data_dir, int synthetic_train, int synthetic_test, bool writer) {
  if (!data_dir.empty()) return {load_dataset(data_dir, true), load_dataset(data_dir, false), data_dir};

  const std::string cache = synthetic_cache_dir(synthetic_train, synthetic_test);
  if (fs::exists(cache)) return {load_dataset(cache, true), load_dataset(cache, false), cache};

  // The synthetic dataset's seed is fixed: the data is the same whatever the training seed.
  Datasets sets{make_synthetic(synthetic_train, 0, true), make_synthetic(synthetic_test, 0, false), cache};
  if (writer) {
    const std::string partial = cache + ".partial-" + std::to_string(getpid());
    write_dataset(partial, DataFormat::cifar10, sets.train, sets.test);
    std::error_code ec;
    fs::rename(partial, cache, ec);  // another machine's writer may have won the race: fine
    if (ec) fs::remove_all(partial);
  }
  return sets;
}

}  // namespace cutrain
