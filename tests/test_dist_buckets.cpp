// DDP's bucket plans over the flat gradient buffer: sizes, order, the 1 MiB first bucket, and the
// 0 and huge caps.
#include <catch2/catch.hpp>

#include "dist/ddp/buckets.h"

using cutrain::Bucket;
using cutrain::plan_buckets;

namespace {

constexpr int64_t MiB = 1 << 20;

// Buckets tile the buffer in order, each a whole number of parameters.
void check_tiling(const std::vector<Bucket>& buckets, const std::vector<int64_t>& sizes) {
  REQUIRE(!buckets.empty());
  CHECK(buckets.front().begin == 0);
  CHECK(buckets.front().param_begin == 0);
  CHECK(buckets.back().param_end == int(sizes.size()));
  for (size_t b = 0; b < buckets.size(); ++b) {
    int64_t elements = 0;
    for (int p = buckets[b].param_begin; p < buckets[b].param_end; ++p) elements += sizes[p];
    CHECK(buckets[b].end - buckets[b].begin == elements);
    if (b > 0) {
      CHECK(buckets[b].begin == buckets[b - 1].end);
      CHECK(buckets[b].param_begin == buckets[b - 1].param_end);
    }
  }
}

}  // namespace

TEST_CASE("the first bucket closes at 1 MiB, the others at the cap, never splitting a parameter", "[dist]") {
  // fp32 parameters of 0.5, 0.75, 2, 3, 1, 0.25 MiB, in flat (backward) order.
  std::vector<int64_t> sizes{MiB / 8, 3 * MiB / 16, MiB / 2, 3 * MiB / 4, MiB / 4, MiB / 16};
  auto buckets = plan_buckets(sizes, 4, 4 * MiB, 1 * MiB);
  check_tiling(buckets, sizes);
  // 0.5 + 0.75 = 1.25 >= 1 closes the first; 2 + 3 = 5 >= 4 the second; 1 + 0.25 is what is left.
  REQUIRE(buckets.size() == 3);
  CHECK(buckets[0].param_begin == 0);
  CHECK(buckets[0].param_end == 2);
  CHECK(buckets[1].param_end == 4);
  CHECK(buckets[1].end - buckets[1].begin == 5 * MiB / 4);
  CHECK(buckets[2].param_end == 6);
}

TEST_CASE("a parameter larger than the cap gets a bucket of its own", "[dist]") {
  std::vector<int64_t> sizes{10, 3 * MiB, 10, 10};
  auto buckets = plan_buckets(sizes, 4, 1 * MiB, 1 * MiB);
  check_tiling(buckets, sizes);
  REQUIRE(buckets.size() == 2);
  CHECK(buckets[0].param_end == 2);  // 40 B, then the 12 MiB parameter closes it
  CHECK(buckets[1].param_begin == 2);
}

TEST_CASE("a cap of 0 gives one bucket per parameter", "[dist]") {
  std::vector<int64_t> sizes{7, 1, 300000, 2, 5};
  auto buckets = plan_buckets(sizes, 4, 0, 1 * MiB);
  check_tiling(buckets, sizes);
  REQUIRE(buckets.size() == sizes.size());
  for (int p = 0; p < int(sizes.size()); ++p) CHECK(buckets[p].param_end - buckets[p].param_begin == 1);
}

TEST_CASE("a cap that holds every gradient gives a single bucket", "[dist]") {
  std::vector<int64_t> sizes{MiB, 2 * MiB, 3, 4 * MiB};
  auto buckets = plan_buckets(sizes, 4, 1024 * MiB, 1 * MiB);
  REQUIRE(buckets.size() == 1);
  CHECK(buckets[0].end == 7 * MiB + 3);
  check_tiling(buckets, sizes);
}

TEST_CASE("ResNet-18 sized gradients at DDP's defaults: a small first bucket, then about 25 MiB each", "[dist]") {
  // 11.2 M fp32 parameters: 44.7 MiB, the fc layer (5130) first as backward produces it.
  std::vector<int64_t> sizes{10, 5120};
  for (int i = 0; i < 8; ++i) sizes.insert(sizes.end(), {512, 512, 512 * 512 * 9});
  for (int i = 0; i < 40; ++i) sizes.insert(sizes.end(), {64, 64, 64 * 64 * 9});
  auto buckets = plan_buckets(sizes, 4, 25 * MiB, 1 * MiB);
  check_tiling(buckets, sizes);
  REQUIRE(buckets.size() >= 2);
  int64_t first_bytes = (buckets[0].end - buckets[0].begin) * 4;
  CHECK(first_bytes >= 1 * MiB);
  CHECK(first_bytes < 1 * MiB + 512 * 512 * 9 * 4);  // closed by the first parameter that reached 1 MiB
  for (size_t b = 1; b + 1 < buckets.size(); ++b) CHECK((buckets[b].end - buckets[b].begin) * 4 >= 25 * MiB);
}

TEST_CASE("a parameter of no elements is refused", "[dist]") {
  CHECK_THROWS_WITH(plan_buckets({3, 0, 2}, 4, MiB, MiB), "plan_buckets: parameter 1 has 0 elements");
}
