// `cutrain bench-step` on the CPU: each timed step is timed alone, and the line scripts read
// (scripts/gpu-check.sh) is the median step's, inside the range of the steps' times.
#include <catch2/catch.hpp>

#include <regex>
#include <string>

#include "tests/process.h"

TEST_CASE("bench-step prints the median step between the fastest and the slowest, with its images/s", "[app]") {
  auto r = cutrain::test::run({cutrain::test::binary("cutrain"), "bench-step", "--device", "cpu", "--width", "4",
                               "--batch-size", "8", "--steps", "5", "--warmup", "1"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains(", cpu, fp32, batch 8,"));  // the CPU's precision by default
  std::smatch spread;
  REQUIRE(std::regex_search(r.output, spread,
                            std::regex("steps took ([0-9.]+) to ([0-9.]+) ms \\(5 timed steps after 1 warm-up;")));
  const double fastest = std::stod(spread[1]), slowest = std::stod(spread[2]);
  std::smatch last;
  REQUIRE(std::regex_search(r.output, last,
                            std::regex("\n  ([0-9]+\\.[0-9]{2}) ms/step, ([0-9]+) images/s \\(the median step\\)\n$")));
  const double ms = std::stod(last[1]), images_per_second = std::stod(last[2]);
  CHECK(fastest <= ms);
  CHECK(ms <= slowest);
  // The images/s are printed as a whole number, so at a few images/s the rounding alone is more
  // than 1%: allow half an image either way.
  CHECK(images_per_second == Approx(8 * 1000.0 / ms).epsilon(0.01).margin(0.5));
}

TEST_CASE("bench-step --matrix measures the GPU's choices, and says so in one line on the CPU", "[app]") {
  auto r = cutrain::test::run({cutrain::test::binary("cutrain"), "bench-step", "--matrix", "--device", "cpu"});
  CHECK(r.exit_code == 1);
  CHECK(r.output == "cutrain: error: --matrix: measures the GPU's choices; needs --device cuda\n");
}

TEST_CASE("bench-step --layers times the GPU's layers, and says so in one line on the CPU", "[app]") {
  auto r = cutrain::test::run({cutrain::test::binary("cutrain"), "bench-step", "--layers", "--device", "cpu"});
  CHECK(r.exit_code == 1);
  CHECK(r.output == "cutrain: error: --layers: times the GPU's layers; needs --device cuda\n");
}
