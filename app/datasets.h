// datasets.h: the train and test sets a run uses. With --data, they are read from that folder
// (CIFAR-10 binary or image folder, data/load.h). Without it, the synthetic CIFAR-format dataset
// (data/synthetic.h) is the default: made once and kept in cutrain's cache folder
// (kernels/base/cache_dir.h) as CIFAR-10 binary files, so later runs, other ranks
// and other tools (bench/, inspect-data) read the very same bytes. The cache folder's name holds
// the generator's version, the difficulty and the sizes, so a copy made by an older generator
// is never read for the current one.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "data/dataset.h"
#include "data/image_folder.h"

namespace cutrain {

struct Datasets {
  Dataset train;
  Dataset test;
  std::string source;  // the folder they came from
};

// The most images --synthetic-train and --synthetic-test may ask for (30 GB of pixels).
inline constexpr int kMaxSyntheticImages = 10'000'000;
// The fewest --synthetic-train may ask for: the cache is CIFAR-10's form, one image at least in
// each of its 5 data_batch files (an empty one is refused as a file cut short).
inline constexpr int kMinSyntheticTrainImages = 5;

// What a long step is about to do, said before it starts ("making the synthetic dataset ...").
using Announce = std::function<void(const std::string& line)>;

// Every rank may call it at once: the first to finish writing the cache wins the race, atomically
// (data/synthetic.h ensure_synthetic_cifar10), and all read the same files. `max_image_pixels`
// bounds an image folder's images (data/image_folder.h).
Datasets load_datasets(const std::string& data_dir, int synthetic_train, int synthetic_test,
                       double synthetic_difficulty, int64_t max_image_pixels = kDefaultMaxImagePixels,
                       const Announce& announce = {});

// The cache folder of the synthetic dataset of these sizes and difficulty (made with seed 0: the
// data is the same whatever the training seed), written if it is not there yet (which `announce`
// is told first, as it takes seconds).
std::string ensure_synthetic_cache(int train, int test, double difficulty, const Announce& announce = {});

}  // namespace cutrain
