// --profile-steps A:B: the range it parses, and the one line a bad one or a machine without a GPU
// gets.
#include <catch2/catch.hpp>

#include "app/profiler.h"
#include "tests/process.h"

using cutrain::parse_step_range;

TEST_CASE("profile steps: --profile-steps takes A:B with 0 <= A <= B, and names what is wrong otherwise", "[app]") {
  const cutrain::StepRange r = parse_step_range("3:5");
  CHECK(r.first == 3);
  CHECK(r.last == 5);
  CHECK(r.contains(3));
  CHECK(r.contains(5));
  CHECK_FALSE(r.contains(6));
  CHECK_FALSE(cutrain::StepRange{}.contains(0));
  for (const char* bad : {"5", "5:", ":5", "a:b", "5:3", "-1:2", "1:2:3", "1:2x"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_step_range(bad), Catch::StartsWith(std::string("--profile-steps ") + bad + ": expected"));
  }
}

TEST_CASE("profile steps: --profile-steps without a GPU is one line and a failure, before any data is read", "[app]") {
  auto r = cutrain::test::run({cutrain::test::binary("cutrain"), "train", "--device", "cpu", "--profile-steps", "0:1",
                               "--data", "/nonexistent"});
  INFO(r.output);
  CHECK(r.exit_code != 0);
  CHECK(r.output == "cutrain: error: --profile-steps: needs a GPU (the CUDA profiler API)\n");
}
