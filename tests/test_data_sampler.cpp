// DistributedSampler: torch's permutation bit for bit, shards, padding, drop_last, epochs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "data/sampler.h"

using namespace cutrain;
using Indices = std::vector<int64_t>;

TEST_CASE("sampler: torch.randperm values", "[data]") {
  // torch.randperm(10, generator=torch.Generator().manual_seed(0))
  CHECK(torch_randperm(10, 0) == Indices{4, 1, 7, 5, 3, 9, 0, 8, 6, 2});
  // torch.manual_seed(42); torch.randperm(10)
  CHECK(torch_randperm(10, 42) == Indices{2, 6, 1, 8, 4, 5, 0, 9, 3, 7});
  // DistributedSampler(range(10), num_replicas=1, rank=0): seed 0 + epoch 0
  CHECK(DistributedSampler(10, 1, 0).indices() == Indices{4, 1, 7, 5, 3, 9, 0, 8, 6, 2});
  // the generator takes the low 32 bits of seed + epoch, as torch's mt19937 does
  CHECK(torch_randperm(10, (uint64_t(1) << 32) + 42) == torch_randperm(10, 42));
}

TEST_CASE("sampler: strided split of the padded permutation", "[data]") {
  // n = 10, W = 4: total 12, the permutation padded with its first two entries 4 1.
  // 4 1 7 5 | 3 9 0 8 | 6 2 4 1  ->  rank r takes positions r, r+4, r+8.
  CHECK(DistributedSampler(10, 4, 0).indices() == Indices{4, 3, 6});
  CHECK(DistributedSampler(10, 4, 1).indices() == Indices{1, 9, 2});
  CHECK(DistributedSampler(10, 4, 2).indices() == Indices{7, 0, 4});
  CHECK(DistributedSampler(10, 4, 3).indices() == Indices{5, 8, 1});
  // drop_last: total 8, the tail 6 2 is cut.
  CHECK(DistributedSampler(10, 4, 0, true, 0, true).indices() == Indices{4, 3});
  CHECK(DistributedSampler(10, 4, 3, true, 0, true).indices() == Indices{5, 8});
  // Padding repeats as often as needed: n = 3, W = 8 gives 4 1 ... cycled (randperm(3, 0)).
  Indices perm = torch_randperm(3, 0);
  for (int r = 0; r < 8; ++r) CHECK(DistributedSampler(3, 8, r).indices() == Indices{perm[r % 3]});
}

TEST_CASE("sampler: shards are disjoint and cover the dataset for world sizes 1 to 8", "[data]") {
  for (int64_t n : {1, 7, 100, 1001}) {
    for (int world = 1; world <= 8; ++world) {
      for (bool drop_last : {false, true}) {
        if (drop_last && n < world) continue;
        std::map<int64_t, int> seen;
        int64_t total = 0;
        for (int rank = 0; rank < world; ++rank) {
          DistributedSampler s(n, world, rank, true, 123, drop_last);
          s.set_epoch(4);
          Indices mine = s.indices();
          REQUIRE(int64_t(mine.size()) == s.num_samples());
          CHECK(s.total_size() == s.num_samples() * world);
          total += int64_t(mine.size());
          for (int64_t i : mine) {
            REQUIRE(i >= 0);
            REQUIRE(i < n);
            ++seen[i];
          }
        }
        INFO("n " << n << " world " << world << " drop_last " << drop_last);
        if (drop_last) {
          CHECK(total == n / world * world);                 // the tail is dropped ...
          for (auto [i, count] : seen) REQUIRE(count == 1);  // ... and nothing repeats
        } else {
          CHECK(total == (n + world - 1) / world * world);
          CHECK(int64_t(seen.size()) == n);  // every sample is seen
          // only the padding repeats: total - n extra visits
          int64_t extra = 0;
          for (auto [i, count] : seen) extra += count - 1;
          CHECK(extra == total - n);
        }
      }
    }
  }
}

TEST_CASE("sampler: a new order each epoch, the same on every rank, none without shuffle", "[data]") {
  DistributedSampler a(1000, 3, 1), b(1000, 3, 1);
  Indices epoch0 = a.indices();
  CHECK(a.indices() == epoch0);  // no set_epoch: the same order again, as in torch
  a.set_epoch(1);
  CHECK(a.indices() != epoch0);
  b.set_epoch(1);
  CHECK(b.indices() == a.indices());
  // seed + epoch is what counts: seed 1 epoch 0 == seed 0 epoch 1
  CHECK(DistributedSampler(1000, 3, 1, true, 1).indices() == a.indices());

  DistributedSampler ordered(10, 3, 2, /*shuffle=*/false);
  ordered.set_epoch(7);
  CHECK(ordered.indices() == Indices{2, 5, 8, 1});  // 0..9 padded with 0, 1
}

TEST_CASE("sampler: bad arguments are rejected", "[data]") {
  CHECK_THROWS_WITH(DistributedSampler(10, 0, 0), Catch::Contains("world size 0"));
  CHECK_THROWS_WITH(DistributedSampler(10, 4, 4), Catch::Contains("rank 4 is not in [0, 4)"));
  CHECK_THROWS_WITH(DistributedSampler(0, 1, 0), Catch::Contains("empty"));
  CHECK_THROWS_WITH(DistributedSampler(3, 4, 0, true, 0, true), Catch::Contains("drop_last"));
}
