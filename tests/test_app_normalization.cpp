// The loaders' normalisation as `cutrain train --normalize-mean/--normalize-std` gives it
// (app/recipe.h's normalization_of), through the CPU loader.
#include <catch2/catch.hpp>

#include "app/recipe.h"
#include "app/train_options.h"
#include "data/loader.h"
#include "tests/test_data_util.h"

using namespace cutrain;

TEST_CASE("loader: --normalize-mean and --normalize-std normalise each channel as (v / 255 - mean) / std", "[app]") {
  // Their defaults are the loaders' own, CIFAR-10's, bit for bit.
  const AugmentConfig cifar;
  const AugmentConfig defaults = normalization_of(TrainOptions{}.normalize_mean, TrainOptions{}.normalize_std);
  CHECK(defaults.mean == cifar.mean);
  CHECK(defaults.std == cifar.std);

  Dataset d = test::patterned_dataset(8);
  LoaderConfig config;
  config.batch_size = 8;
  config.workers = 1;
  config.augment = normalization_of({0.5, 0.25, 0.75}, {0.3, 0.2, 0.1});
  config.augment.train = false;  // normalise only, as evaluation and --dump-first-step do
  Loader loader(d, config);
  const std::vector<int64_t> indices = {0, 1, 2, 3, 4, 5, 6, 7};
  loader.start_epoch(indices, 0);
  Batch batch;
  REQUIRE(loader.next(batch));
  const auto* pixels = static_cast<const float*>(batch.images);
  const float mean[3] = {0.5f, 0.25f, 0.75f}, std[3] = {0.3f, 0.2f, 0.1f};
  for (size_t i = 0; i < d.images.size(); ++i) {
    const size_t c = i % 3;
    const float expected = (float(d.images[i]) - 255.0f * mean[c]) * (1.0f / (255.0f * std[c]));
    if (pixels[i] != expected) FAIL("pixel " << i << ": " << pixels[i] << ", expected " << expected);
  }
  CHECK_THROWS_WITH(normalization_of({0.5, 0.5}, {0.3, 0.3, 0.3}), "--normalize-mean: expected 3 numbers (R,G,B)");
}
