// `cutrain inspect-data`: load both splits of a dataset (which validates them) and print what is
// in it: record counts, images per class, and the per-channel mean and std of the train images.
#include <cmath>
#include <cstdio>

#include "app/commands.h"
#include "app/flags.h"
#include "data/load.h"

namespace cutrain {

// Mean and (population) standard deviation of each channel over all train pixels, in [0, 1].
static void print_channel_stats(const Dataset& train) {
  double sum[3] = {}, sum_sq[3] = {};
  for (size_t i = 0; i < train.images.size(); i += 3)
    for (int c = 0; c < 3; ++c) {
      double v = train.images[i + c] / 255.0;
      sum[c] += v;
      sum_sq[c] += v * v;
    }
  const double n = double(train.images.size() / 3);
  double mean[3], std[3];
  for (int c = 0; c < 3; ++c) {
    mean[c] = sum[c] / n;
    std[c] = std::sqrt(std::max(0.0, sum_sq[c] / n - mean[c] * mean[c]));
  }
  std::printf("train mean (R G B): %.4f %.4f %.4f\n", mean[0], mean[1], mean[2]);
  std::printf("train std  (R G B): %.4f %.4f %.4f\n", std[0], std[1], std[2]);
}

void add_inspect_data_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("inspect-data", "Validate a dataset and print its counts and channel statistics");
  auto dir = std::make_shared<std::string>();
  add_data_option(cmd, *dir, "Dataset folder (CIFAR-10 binary or train/ and test/ image folders)")->required();
  cmd->callback([dir, &exit_code] {
    const char* format = detect_data_format(*dir) == DataFormat::cifar10 ? "CIFAR-10 binary" : "image folder";
    Dataset train = load_dataset(*dir, true);
    Dataset test = load_dataset(*dir, false);
    if (test.num_classes > train.num_classes)
      throw std::runtime_error(*dir + ": the test split has more classes than the train split");
    std::printf("%s: %s, %dx%dx%d images, %d classes\n", dir->c_str(), format, train.height, train.width,
                train.channels, train.num_classes);
    std::printf("records: train %zu, test %zu\n", train.size(), test.size());
    std::vector<size_t> train_count(train.num_classes), test_count(train.num_classes);
    for (int32_t label : train.labels) ++train_count[label];
    for (int32_t label : test.labels) ++test_count[label];
    std::printf("%-5s %-16s %8s %8s\n", "label", "class", "train", "test");
    for (int c = 0; c < train.num_classes; ++c) {
      std::string name = size_t(c) < train.class_names.size() ? train.class_names[c] : "-";
      std::printf("%-5d %-16s %8zu %8zu\n", c, name.c_str(), train_count[c], test_count[c]);
    }
    print_channel_stats(train);
    exit_code = 0;
  });
}

}  // namespace cutrain
