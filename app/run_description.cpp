#include "app/run_description.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "app/version.h"
#include "kernels/augment.h"

namespace cutrain {
namespace {

// This process's command line, the words joined by spaces, a word with a space or a quote in
// single quotes (as a shell would take it back).
std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string line;
  for (std::string word; std::getline(in, word, '\0');) {
    if (word.find_first_of(" '\"\\$") != std::string::npos) {
      std::string quoted = "'";
      for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
      word = quoted + "'";
    }
    line += (line.empty() ? "" : " ") + word;
  }
  return line;
}

}  // namespace

CheckpointMetadata describe_run(const Datasets& data, uint64_t seed) {
  const AugmentConfig augment;  // the loaders' normalisation (kernels/augment.h)
  char normalization[128];
  std::snprintf(normalization, sizeof normalization, "mean %g %g %g, std %g %g %g (of pixels in [0, 1], RGB)",
                augment.mean[0], augment.mean[1], augment.mean[2], augment.std[0], augment.std[1], augment.std[2]);
  std::string classes;
  for (const std::string& name : data.train.class_names) classes += (classes.empty() ? "" : ",") + name;
  return {{"command", command_line()},
          {"cutrain_version", version_line()},
          {"data", data.source},
          {"train_images", std::to_string(data.train.size())},
          {"test_images", std::to_string(data.test.size())},
          {"class_names", classes},
          {"normalization", normalization},
          {"seed", std::to_string(seed)}};
}

}  // namespace cutrain
