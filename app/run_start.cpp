#include "app/run_start.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/batch_feed.h"
#include "app/train_options.h"
#include "app/version.h"
#include "dist/launch/store_interface.h"
#include "kernels/augment.h"
#include "kernels/base/device.h"
#include "nn/context.h"
#include "nn/resnet.h"

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

Device resolve_device(const std::string& flag) {
  if (flag == "cpu") return Device::cpu;
  if (flag == "cuda" && !cuda_available()) throw std::runtime_error("--device cuda: " + cuda_unavailable_reason());
  return cuda_available() ? Device::cuda : Device::cpu;
}

DType resolve_precision(const std::string& flag, Device device) {
  if (flag.empty()) return device == Device::cuda ? DType::bf16 : DType::f32;
  const DType dtype = parse_precision(flag);
  if (dtype == DType::bf16 && device == Device::cpu)
    throw std::runtime_error("--precision bf16 needs a GPU: the CPU reference computes in fp32");
  return dtype;
}

void refuse_gpu_flags_on_cpu(const std::vector<std::string>& given, Device device) {
  if (device != Device::cpu) return;
  for (const std::string& flag : given)
    if (std::find(std::begin(kGpuOnlyFlags), std::end(kGpuOnlyFlags), flag) != std::end(kGpuOnlyFlags))
      throw std::runtime_error(flag + ": needs a GPU (this run is on the CPU)");
}

int cuda_device_for_rank(const DistEnv& env, int visible) {
  if (env.from_slurm && visible >= 1 && visible < env.local_world_size) return 0;
  if (env.local_rank < visible) return env.local_rank;
  throw std::runtime_error(std::string(env.from_slurm ? "SLURM_LOCALID=" : "LOCAL_RANK=") +
                           std::to_string(env.local_rank) + " but this machine has " + std::to_string(visible) +
                           " CUDA device(s)");
}

CheckpointMetadata describe_run(const Datasets& data, uint64_t seed, const AugmentConfig& augment) {
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

uint64_t fnv1a(const void* data, size_t bytes, uint64_t hash) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 0x100000001b3ull;
  return hash;
}

void check_ranks_hold_alike(Store& store, int rank, int world_size, const std::string& held, const std::string& from) {
  const std::string said = held + "\n" + from;
  store.set("resume/" + std::to_string(rank), std::vector<char>(said.begin(), said.end()));
  struct Group {
    std::string held, from;  // the first rank's checkpoint stands for the group's
    std::vector<int> ranks;
  };
  std::vector<Group> groups;
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back("resume/" + std::to_string(r));
  const std::vector<std::vector<char>> said_by = store.get_all(keys);  // one request to torchrun's store
  for (int r = 0; r < world_size; ++r) {
    const std::vector<char>& text = said_by[size_t(r)];
    const std::string theirs(text.begin(), text.end());
    const size_t cut = theirs.find('\n');
    const std::string what = theirs.substr(0, cut);
    auto group = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.held == what; });
    if (group == groups.end()) group = groups.insert(groups.end(), Group{what, theirs.substr(cut + 1), {}});
    group->ranks.push_back(r);
  }
  if (groups.size() == 1) return;
  std::string message = "the ranks would resume from different states:";
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::vector<int>& ranks = groups[g].ranks;
    std::string who = ranks.size() == 1 ? "rank" : "ranks";
    for (size_t i = 0; i < ranks.size() && i < 4; ++i) who += (i ? ", " : " ") + std::to_string(ranks[i]);
    if (ranks.size() > 4) who += " and " + std::to_string(ranks.size() - 4) + " more";
    message +=
        (g ? "; " : " ") + who + " at " + groups[g].held + (groups[g].from.empty() ? "" : " from ") + groups[g].from;
  }
  throw std::runtime_error(message + "; give every rank the same --save folder (or --resume file) and start again");
}

void dump_first_step(const std::string& path, ResNet18& model, const Dataset& train,
                     const AugmentConfig& normalization) {
  LoaderConfig config;
  config.augment = normalization;
  config.batch_size = model.config().batch_size;
  config.augment.train = false;
  config.workers = 1;
  BatchFeed feed(train, config, model);
  std::vector<int64_t> first(size_t(config.batch_size));
  std::iota(first.begin(), first.end(), 0);
  feed.start_epoch(first, 0);
  feed.load(0);
  model.forward(true);
  model.backward();
  model.gather_grads();
  float loss = 0;
  model.context().synchronize();
  copy_to_host(Tensor(const_cast<float*>(model.loss()), DType::f32, model.context().device(), {1}), &loss);
  save_gradients(path, model, loss);
}

}  // namespace cutrain
