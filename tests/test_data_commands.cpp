// The data subcommands through the real binary: make-synthetic, inspect-data, show-sampler, bench-data.
#include <catch2/catch.hpp>

#include <algorithm>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/process.h"
#include "tests/test_data_util.h"

// Runs `cutrain <args>` (args split at spaces; stderr folded into stdout) and returns its output
// and exit status.
static std::pair<std::string, int> cutrain_run(const std::string& args) {
  std::vector<std::string> argv = {cutrain::test::binary("cutrain")};
  std::istringstream words(args);
  for (std::string word; words >> word;) argv.push_back(word);
  const cutrain::test::Process::Result result = cutrain::test::run(argv);
  return {result.output, result.exit_code};
}

TEST_CASE("make-synthetic then inspect-data, through the binary", "[data]") {
  cutrain::test::TempDir dir;
  for (std::string format : {"cifar", "folder"}) {
    const std::string out = dir / format;
    auto [made, made_status] = cutrain_run("make-synthetic --out " + out + " --train 250 --test 70 --seed 3 --format " + format);
    INFO(made);
    REQUIRE(made_status == 0);
    CHECK_THAT(made, Catch::Contains("wrote 250 train and 70 test images"));

    auto [report, status] = cutrain_run("inspect-data --data " + out);
    INFO(report);
    REQUIRE(status == 0);
    CHECK_THAT(report, Catch::Contains(format == "cifar" ? "CIFAR-10 binary" : "image folder"));
    CHECK_THAT(report, Catch::Contains("records: train 250, test 70"));
    CHECK_THAT(report, Catch::Contains("10 classes"));
    CHECK_THAT(report, Catch::Matches("[\\s\\S]*\\n0 +checker +25 +7\\n[\\s\\S]*"));
    CHECK_THAT(report, Catch::Matches("[\\s\\S]*\\n9 +vstripes +25 +7\\n[\\s\\S]*"));
    CHECK_THAT(report, Catch::Matches("[\\s\\S]*train mean \\(R G B\\): 0\\.[3-6]\\d+ 0\\.[3-6]\\d+ 0\\.[3-6]\\d+\\n[\\s\\S]*"));
    CHECK_THAT(report, Catch::Contains("train std  (R G B): 0."));
  }
}

TEST_CASE("inspect-data and make-synthetic report bad input in one line", "[data]") {
  cutrain::test::TempDir dir;
  auto [output, status] = cutrain_run("inspect-data --data " + dir.path().string());
  CHECK(status == 1);
  CHECK_THAT(output, Catch::StartsWith("cutrain: error: " + dir.path().string() + ": not a dataset"));
  CHECK(std::count(output.begin(), output.end(), '\n') == 1);

  auto [bad_format, format_status] = cutrain_run("make-synthetic --out " + (dir / "x") + " --format png");
  CHECK(format_status != 0);
  CHECK_THAT(bad_format, Catch::Contains("--format"));
}

// Note [Loader threads and free cores]: the loader's rate comes with the cores the process got, so
// that 2 threads slower than 1 on a shared machine explains itself.
TEST_CASE("bench-data says how many cores its loader threads got", "[data]") {
  cutrain::test::TempDir dir;
  const std::string data = dir / "d";
  REQUIRE(cutrain_run("make-synthetic --out " + data + " --train 512 --test 16").second == 0);
  auto [output, status] = cutrain_run("bench-data --data " + data + " --threads 2 --epochs 2 --batch-size 32");
  INFO(output);
  REQUIRE(status == 0);
  std::smatch m;
  REQUIRE(std::regex_search(output, m,
                            std::regex("\nloader, 2 threads: ([0-9]+) images/s \\(([0-9]+) per thread\\); the process "
                                       "got ([0-9.]+) of ([0-9]+) cores? \\(([0-9]+) images/s per core it got(, load "
                                       "average [0-9.]+ before it)?\\)\n")));
  const double rate = std::stod(m[1]), cores_got = std::stod(m[3]), per_core = std::stod(m[5]);
  CHECK(cores_got > 0);
  CHECK(cores_got <= 3.05);  // two workers and this thread at most
  CHECK(per_core == Approx(rate / cores_got).epsilon(0.006 / cores_got + 0.01));  // cores_got is printed to 0.01
  CHECK((std::stoi(m[4]) >= 3) == (output.find("past the free cores, more threads add no speed") == std::string::npos));
}

TEST_CASE("show-sampler prints one rank's indices on one line", "[data]") {
  auto [line, status] = cutrain_run("show-sampler --dataset-size 10 --world-size 1 --rank 0 --epoch 0");
  CHECK(status == 0);
  CHECK(line == "4 1 7 5 3 9 0 8 6 2\n");
  // n = 10, W = 4, rank 2: the padded permutation's positions 2, 6, 10
  CHECK(cutrain_run("show-sampler --dataset-size 10 --world-size 4 --rank 2 --epoch 0").first == "7 0 4\n");
  CHECK(cutrain_run("show-sampler --dataset-size 10 --world-size 4 --rank 2 --epoch 0 --drop-last").first == "7 0\n");
  CHECK(cutrain_run("show-sampler --dataset-size 10 --world-size 3 --rank 2 --epoch 5 --no-shuffle").first ==
        "2 5 8 1\n");
  CHECK(cutrain_run("show-sampler --dataset-size 10 --world-size 1 --rank 0 --epoch 2 --seed 40").first ==
        "2 6 1 8 4 5 0 9 3 7\n");  // seed + epoch = 42
  auto [error, error_status] = cutrain_run("show-sampler --dataset-size 10 --world-size 2 --rank 2 --epoch 0");
  CHECK(error_status == 1);
  CHECK_THAT(error, Catch::Contains("--rank: 2 is not below --world-size 2"));
}
