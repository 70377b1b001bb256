// `cutrain bench-step --plan` in the GPU build: the step's inventory is the emulated device's
// (Note [Record-only device] in emu/runtime.h; its tests are tests/emu/test_plan_command.cpp),
// so this build says, in one line, where to get it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "tests/process.h"

using namespace cutrain;

TEST_CASE("bench-step --plan in the GPU build says in one line to use the emulated build", "[app]") {
  const auto r = test::run({test::binary("cutrain"), "bench-step", "--plan"});
  INFO(r.output);
  CHECK(r.exit_code != 0);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  CHECK(r.output.find("scripts/build.sh --emulated") != std::string::npos);
  CHECK(r.output.find("build-emulated/bin/cutrain bench-step --plan") != std::string::npos);
}
