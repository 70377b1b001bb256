// `cutrain make-synthetic`: write the synthetic 10-class dataset (data/synthetic.h) to a folder,
// as CIFAR-10 binary files or as PNG class folders; or, without --out, make sure the cached copy
// that `cutrain train` reads without --data exists, and print its folder (for bench/ scripts).
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
    double difficulty = kSyntheticDefaultDifficulty;
    std::string format = "cifar";
  };
  auto options = std::make_shared<Options>();
  cmd->add_option("--out", options->out,
                  "Folder to write (created if missing); without it, the cached copy `cutrain train` uses, "
                  "whose folder is printed");
  add_number(cmd, "--train", options->train, "Training images", 1, kMaxSyntheticImages)->capture_default_str();
  add_number(cmd, "--test", options->test, "Test images", 1, kMaxSyntheticImages)->capture_default_str();
  add_number(cmd, "--seed", options->seed, "Generator seed (with --out)", 0, UINT64_MAX)->capture_default_str();
  add_number(cmd, "--difficulty", options->difficulty,
             "0: clean shapes; 1: textured backgrounds, clutter, distractors, occlusion; up to 2", 0.0,
             kSyntheticMaxDifficulty)
      ->capture_default_str();
  cmd->add_option("--format", options->format, "cifar (binary batches) or folder (PNG files per class)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cifar", "folder"}));
  cmd->callback([options, &exit_code] {
    const Options& o = *options;
    if (o.out.empty()) {
      if (o.seed != 0 || o.format != "cifar")
        throw std::runtime_error("--seed and --format go with --out (the cached copy is CIFAR-format, seed 0)");
      std::printf("%s\n", ensure_synthetic_cache(int(o.train), int(o.test), o.difficulty).c_str());
      exit_code = 0;
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    Dataset train = make_synthetic(o.train, o.seed, true, o.difficulty);
    Dataset test = make_synthetic(o.test, o.seed, false, o.difficulty);
    write_dataset(o.out, parse_data_format(o.format), train, test);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("make-synthetic: wrote %lld train and %lld test images (difficulty %g) to %s (%s) in %.1f s\n",
                (long long)o.train, (long long)o.test, o.difficulty, o.out.c_str(), o.format.c_str(), seconds);
    exit_code = 0;
  });
}

}  // namespace cutrain
