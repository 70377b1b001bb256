// `cutrain make-synthetic`: write the synthetic 10-class dataset (data/synthetic.h) to a folder,
// as CIFAR-10 binary files or as PNG class folders.
#include <chrono>
#include <cstdio>

#include "app/commands.h"
#include "app/datasets.h"
#include "app/flags.h"
#include "data/load.h"
#include "data/synthetic.h"

namespace cutrain {

void add_make_synthetic_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("make-synthetic", "Write the synthetic 10-class CIFAR-format dataset to a folder");
  struct Options {
    std::string out;
    int64_t train = 50000, test = 10000;
    uint64_t seed = 0;
    std::string format = "cifar";
  };
  auto options = std::make_shared<Options>();
  cmd->add_option("--out", options->out, "Folder to write (created if missing)")->required();
  add_number(cmd, "--train", options->train, "Training images", 1, kMaxSyntheticImages)->capture_default_str();
  add_number(cmd, "--test", options->test, "Test images", 1, kMaxSyntheticImages)->capture_default_str();
  add_number(cmd, "--seed", options->seed, "Generator seed", 0, UINT64_MAX)->capture_default_str();
  cmd->add_option("--format", options->format, "cifar (binary batches) or folder (PNG files per class)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cifar", "folder"}));
  cmd->callback([options, &exit_code] {
    const auto start = std::chrono::steady_clock::now();
    Dataset train = make_synthetic(options->train, options->seed, true);
    Dataset test = make_synthetic(options->test, options->seed, false);
    write_dataset(options->out, parse_data_format(options->format), train, test);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("make-synthetic: wrote %lld train and %lld test images to %s (%s) in %.1f s\n",
                (long long)options->train, (long long)options->test, options->out.c_str(), options->format.c_str(),
                seconds);
    exit_code = 0;
  });
}

}  // namespace cutrain
