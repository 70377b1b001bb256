// Loader: batches in order, the same bytes with 1 or 4 workers, drop_last, restarts, bad indices.
#include <catch2/catch.hpp>

#include <cstring>

#include "data/loader.h"
#include "data/sampler.h"
#include "tests/test_data_util.h"

using namespace cutrain;

struct Epoch {
  std::vector<uint8_t> images;  // every batch's bytes, concatenated
  std::vector<int32_t> labels;
  std::vector<int> sizes;
};

static Epoch run_epoch(Loader& loader, const std::vector<int64_t>& indices, int64_t epoch, size_t image_bytes) {
  Epoch out;
  loader.start_epoch(indices, epoch);
  Batch batch;
  while (loader.next(batch)) {
    REQUIRE(batch.index == int64_t(out.sizes.size()));
    const uint8_t* bytes = static_cast<const uint8_t*>(batch.images);
    out.images.insert(out.images.end(), bytes, bytes + batch.size * image_bytes);
    out.labels.insert(out.labels.end(), batch.labels, batch.labels + batch.size);
    out.sizes.push_back(batch.size);
  }
  REQUIRE(out.sizes.size() == loader.num_batches());
  return out;
}

TEST_CASE("loader: output is identical with 1 and 4 workers, and equals the direct gather", "[data]") {
  Dataset d = test::patterned_dataset(300);
  DistributedSampler sampler(d.size(), 2, 1, true, 7);
  sampler.set_epoch(3);
  const std::vector<int64_t> indices = sampler.indices();
  for (PixelType type : {PixelType::f32, PixelType::bf16}) {
    LoaderConfig config;
    config.batch_size = 16;
    config.pixel_type = type;
    config.out_channels = 4;
    config.augment.seed = 7;
    const size_t image_bytes = 32 * 32 * 4 * pixel_type_size(type);
    config.workers = 1;
    Loader one(d, config);
    config.workers = 4;
    Loader four(d, config);
    config.workers = 8;
    config.prefetch = 1;  // more workers than slots: they queue for the one slot
    Loader crowded(d, config);
    Epoch a = run_epoch(one, indices, 3, image_bytes);
    Epoch b = run_epoch(four, indices, 3, image_bytes);
    Epoch c = run_epoch(crowded, indices, 3, image_bytes);
    CHECK(a.sizes == std::vector<int>(9, 16));  // 150 samples: 9 full batches, the last 6 dropped
    CHECK(a.images == b.images);
    CHECK(a.labels == b.labels);
    CHECK(c.images == a.images);

    AugmentParams p = make_augment_params(config.augment, 32, 32, 4);
    std::vector<uint8_t> direct(144 * image_bytes);
    std::vector<int32_t> labels(144);
    gather_augment_cpu(d.images.data(), d.labels.data(), indices.data(), 144, 3, p, type, direct.data(), labels.data());
    CHECK(a.images == direct);
    CHECK(a.labels == labels);
  }
}

TEST_CASE("loader: the last partial batch is kept without drop_last, with its real size", "[data]") {
  Dataset d = test::patterned_dataset(10);
  LoaderConfig config;
  config.batch_size = 4;
  config.workers = 2;
  config.drop_last = false;
  config.augment.train = false;
  Loader loader(d, config);
  std::vector<int64_t> indices = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
  Epoch e = run_epoch(loader, indices, 0, 3072 * 4);
  CHECK(e.sizes == std::vector<int>{4, 4, 2});
  CHECK(e.labels == std::vector<int32_t>{9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
  // evaluation: pure normalisation of the stored bytes
  const float* last = reinterpret_cast<const float*>(e.images.data()) + 9 * 3072;
  CHECK(last[5] == Approx((d.image(0)[5] / 255.0 - 0.4465) / 0.2010).epsilon(1e-5));
}

TEST_CASE("loader: an epoch can be restarted mid-way and repeats exactly", "[data]") {
  Dataset d = test::patterned_dataset(200);
  LoaderConfig config;
  config.batch_size = 8;
  config.workers = 3;
  config.prefetch = 2;
  Loader loader(d, config);
  std::vector<int64_t> indices = DistributedSampler(200, 1, 0).indices();
  Epoch full = run_epoch(loader, indices, 1, 3072 * 4);
  loader.start_epoch(indices, 1);
  Batch batch;
  REQUIRE(loader.next(batch));
  REQUIRE(loader.next(batch));  // abandon the epoch after two batches
  Epoch again = run_epoch(loader, indices, 1, 3072 * 4);
  CHECK(again.images == full.images);
  Epoch other = run_epoch(loader, indices, 2, 3072 * 4);  // another epoch: other crops
  CHECK(other.labels == full.labels);
  CHECK(other.images != full.images);
}

TEST_CASE("loader: bad indices and configs are rejected", "[data]") {
  Dataset d = test::patterned_dataset(5);
  LoaderConfig config;
  config.batch_size = 2;
  Loader loader(d, config);
  CHECK_THROWS_WITH(loader.start_epoch({0, 1, 5}, 0), Catch::Contains("index 5 at position 2"));
  CHECK_THROWS_WITH(loader.start_epoch({-1}, 0), Catch::Contains("index -1"));
  Batch batch;
  CHECK_FALSE(loader.next(batch));  // no epoch started: nothing to hand out
  config.batch_size = 0;
  CHECK_THROWS_WITH(Loader(d, config), Catch::Contains("batch size"));
  config.batch_size = 2;
  config.out_channels = 1;
  CHECK_THROWS_WITH(Loader(d, config), Catch::Contains("out_channels"));
}
