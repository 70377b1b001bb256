#include "app/checkpoints.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "nn/resnet.h"
#include "nn/sgd.h"

namespace cutrain {
namespace fs = std::filesystem;
namespace {

constexpr const char* kPrefix = "checkpoint-";
constexpr const char* kModelSuffix = ".safetensors";
constexpr const char* kOptimSuffix = ".optim.safetensors";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int64_t metadata_int(const CheckpointMetadata& metadata, const std::string& key, const std::string& path) {
  auto it = metadata.find(key);
  if (it == metadata.end()) throw std::runtime_error(path + ": training state has no '" + key + "'");
  try {
    size_t used = 0;
    int64_t value = std::stoll(it->second, &used);
    if (used == it->second.size()) return value;
  } catch (const std::exception&) {
  }
  throw std::runtime_error(path + ": training state '" + key + "' is '" + it->second + "', not an integer");
}

}  // namespace

CheckpointMetadata TrainingState::to_metadata() const {
  return {{"epoch", std::to_string(epoch)},           {"batch", std::to_string(batch)},
          {"global_step", std::to_string(global_step)}, {"seed", std::to_string(seed)},
          {"world_size", std::to_string(world_size)}, {"batch_size", std::to_string(batch_size)}};
}

TrainingState TrainingState::from_metadata(const CheckpointMetadata& metadata, const std::string& path) {
  TrainingState s;
  s.epoch = int(metadata_int(metadata, "epoch", path));
  s.batch = metadata_int(metadata, "batch", path);
  s.global_step = metadata_int(metadata, "global_step", path);
  s.seed = uint64_t(metadata_int(metadata, "seed", path));
  s.world_size = int(metadata_int(metadata, "world_size", path));
  s.batch_size = int(metadata_int(metadata, "batch_size", path));
  return s;
}

CheckpointMetadata model_metadata(const ResNet18& model) {
  const ResNetConfig& c = model.config();
  return {{"format", "cutrain resnet18"},
          {"stem", stem_name(c.stem)},
          {"num_classes", std::to_string(c.num_classes)},
          {"width", std::to_string(c.width)}};
}

CheckpointFolder::CheckpointFolder(std::string dir, int keep_last) : dir_(std::move(dir)), keep_last_(keep_last) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_)) throw std::runtime_error("--save " + dir_ + ": cannot create the folder");
}

std::string CheckpointFolder::path_for(int64_t step, bool optim) const {
  char name[64];
  std::snprintf(name, sizeof name, "%s%08lld%s", kPrefix, static_cast<long long>(step),
                optim ? kOptimSuffix : kModelSuffix);
  return (fs::path(dir_) / name).string();
}

std::string optim_path_for(const std::string& model_path) {
  return model_path.substr(0, model_path.size() - std::string(kModelSuffix).size()) + kOptimSuffix;
}

std::string CheckpointFolder::save(const ResNet18& model, const SGD& sgd, const TrainingState& state) const {
  const std::string model_path = path_for(state.global_step, false);
  save_model(model_path, model, model_metadata(model));
  save_momentum(path_for(state.global_step, true), model, sgd, state.to_metadata());
  prune();
  return model_path;
}

std::vector<std::string> CheckpointFolder::complete_checkpoints() const {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0 || !ends_with(name, kModelSuffix) || ends_with(name, kOptimSuffix)) continue;
    if (fs::exists(optim_path_for(entry.path().string()))) found.push_back(entry.path().string());
  }
  // Zero-padded step numbers: the names sort by step.
  std::sort(found.rbegin(), found.rend());
  return found;
}

void CheckpointFolder::prune() const {
  const std::vector<std::string> all = complete_checkpoints();
  for (size_t i = size_t(keep_last_); i < all.size(); ++i) {
    fs::remove(optim_path_for(all[i]));
    fs::remove(all[i]);
  }
}

TrainingState load_checkpoint(const std::string& model_path, ResNet18& model, SGD& sgd) {
  load_model(model_path, model);
  const std::string optim = optim_path_for(model_path);
  return TrainingState::from_metadata(load_momentum(optim, model, sgd), optim);
}

}  // namespace cutrain
