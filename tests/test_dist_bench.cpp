// `cutrain bench-allreduce` under cutrun: the product binary finds its peers from the environment
// alone, and checks its all-reduce before timing it.
#include <catch2/catch.hpp>

#include "kernels/base/device.h"
#include "tests/process.h"

using cutrain::test::run;

TEST_CASE("cutrain bench-allreduce runs under cutrun and its check finds nothing wrong", "[dist]") {
  auto r = run({cutrain::test::binary("cutrun"), "--standalone", "--nproc-per-node", "2", cutrain::test::binary("cutrain"),
                "bench-allreduce", "--min-bytes", "1K", "--max-bytes", "64K", "--iters", "2", "--warmup", "1"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("[rank0]: # all_reduce of float32 sums, gloo over 2 ranks"));
  CHECK_THAT(r.output, Catch::Contains("busbw(GB/s)"));
  // Seven sizes, 1 KiB to 64 KiB, each a row ending in its #wrong count: 0.
  size_t rows = 0;
  for (size_t at = r.output.find("[rank0]:  "); at != std::string::npos; at = r.output.find("[rank0]:  ", at + 1)) {
    size_t end = r.output.find('\n', at);
    CHECK(r.output.substr(end - 2, 2) == " 0");
    ++rows;
  }
  CHECK(rows == 7);
  CHECK_THAT(r.output, !Catch::Contains("[rank1]: #"));  // rank 0 alone prints
}

TEST_CASE("cutrain bench-allreduce --device cuda without a GPU is one line", "[dist]") {
  if (cutrain::cuda_available()) return;  // the [gpu] tests cover the machines that have one
  auto r = run({cutrain::test::binary("cutrain"), "bench-allreduce", "--device", "cuda"});
  CHECK(r.exit_code == 1);
  CHECK(r.output == "cutrain: error: " + cutrain::cuda_unavailable_reason() + "\n");
}
