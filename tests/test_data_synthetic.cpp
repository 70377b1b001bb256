// The synthetic dataset: deterministic, balanced, different across splits and seeds.
#include <catch2/catch.hpp>

#include "data/cifar10.h"
#include "data/synthetic.h"
#include "tests/test_data_util.h"

using namespace cutrain;

TEST_CASE("synthetic: deterministic, balanced, and varied", "[data]") {
  Dataset a = make_synthetic(200, 5, true);
  Dataset b = make_synthetic(200, 5, true);
  REQUIRE(a.size() == 200);
  CHECK(a.num_classes == 10);
  CHECK(a.class_names.size() == 10);
  CHECK(a.images == b.images);
  CHECK(a.labels == b.labels);
  a.validate("synthetic");
  std::vector<int> per_class(10);
  for (int32_t label : a.labels) ++per_class[label];
  CHECK(per_class == std::vector<int>(10, 20));

  // A prefix is the same images: image i depends on (seed, split, i) only.
  Dataset prefix = make_synthetic(30, 5, true);
  CHECK(std::equal(prefix.images.begin(), prefix.images.end(), a.images.begin()));

  Dataset test = make_synthetic(200, 5, false);
  Dataset other_seed = make_synthetic(200, 6, true);
  CHECK(test.images != a.images);
  CHECK(other_seed.images != a.images);

  // No two images alike, and the pixels use the whole range.
  for (size_t i = 1; i < a.size(); ++i)
    REQUIRE_FALSE(std::equal(a.image(i), a.image(i) + a.image_bytes(), a.image(i - 1)));
  auto [lo, hi] = std::minmax_element(a.images.begin(), a.images.end());
  CHECK(*lo < 10);
  CHECK(*hi > 245);
}

TEST_CASE("synthetic: the cached CIFAR-format copy is written once and reads back the same", "[data]") {
  cutrain::test::TempDir tmp;
  const std::string dir = tmp / "cache/synthetic-60-20-seed4";
  CHECK(ensure_synthetic_cifar10(dir, 60, 20, 4));
  CHECK_FALSE(ensure_synthetic_cifar10(dir, 60, 20, 4));  // already there: untouched
  Dataset train = load_cifar10(dir, true), test = load_cifar10(dir, false);
  CHECK(train.images == make_synthetic(60, 4, true).images);
  CHECK(test.labels == make_synthetic(20, 4, false).labels);
  CHECK(train.class_names == synthetic_class_names());
  // no staging folders left behind
  CHECK(std::distance(std::filesystem::directory_iterator(tmp / "cache"), std::filesystem::directory_iterator()) == 1);
}
