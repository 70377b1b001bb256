#include "app/checkpoints.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "app/train_options.h"
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

// metadata[key] as a decimal number in [min, max]; throws naming `path` and the key otherwise.
template <typename T>
T metadata_number(const CheckpointMetadata& metadata, const std::string& key, const std::string& path, T min, T max) {
  auto it = metadata.find(key);
  if (it == metadata.end()) throw std::runtime_error(path + ": training state has no '" + key + "'");
  const std::string& text = it->second;
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < min || value > max)
    throw std::runtime_error(path + ": training state '" + key + "' is '" + text + "', not an integer in [" +
                             std::to_string(min) + ", " + std::to_string(max) + "]");
  return value;
}

}  // namespace

CheckpointMetadata TrainingState::to_metadata() const {
  return {{"epoch", std::to_string(epoch)},           {"batch", std::to_string(batch)},
          {"global_step", std::to_string(global_step)}, {"seed", std::to_string(seed)},
          {"world_size", std::to_string(world_size)}, {"batch_size", std::to_string(batch_size)}};
}

TrainingState TrainingState::from_metadata(const CheckpointMetadata& metadata, const std::string& path) {
  constexpr int64_t kMaxSteps = int64_t(1) << 50;
  constexpr int kMaxWorldSize = 1 << 20;
  TrainingState s;
  s.epoch = metadata_number<int>(metadata, "epoch", path, 0, kMaxEpochs);
  s.batch = metadata_number<int64_t>(metadata, "batch", path, 0, kMaxSteps);
  s.global_step = metadata_number<int64_t>(metadata, "global_step", path, 0, kMaxSteps);
  s.seed = metadata_number<uint64_t>(metadata, "seed", path, 0, UINT64_MAX);
  s.world_size = metadata_number<int>(metadata, "world_size", path, 1, kMaxWorldSize);
  s.batch_size = metadata_number<int>(metadata, "batch_size", path, 1, kMaxBatchSize);
  return s;
}

TrainingState resume_state(const TrainingState& saved, const TrainingState& run, int64_t steps_per_epoch,
                           const std::string& path) {
  if (saved.batch > 0) {
    // The position inside an epoch counts batches of the sampler's order for this seed, world
    // size and batch size; under any other it would name other images.
    if (saved.seed != run.seed || saved.world_size != run.world_size || saved.batch_size != run.batch_size)
      throw ResumeMismatch(
          path + ": saved in the middle of epoch " + std::to_string(saved.epoch + 1) + " (after batch " +
          std::to_string(saved.batch) + ") by " + std::to_string(saved.world_size) + " rank(s) at batch size " +
          std::to_string(saved.batch_size) + " and seed " + std::to_string(saved.seed) + "; this run has " +
          std::to_string(run.world_size) + " at " + std::to_string(run.batch_size) + " and seed " +
          std::to_string(run.seed) + ": resume it with the same, or from a checkpoint saved at the end of an epoch");
    if (saved.batch >= steps_per_epoch)
      throw ResumeMismatch(path + ": saved after batch " + std::to_string(saved.batch) +
                           " of an epoch, but an epoch of this data has " + std::to_string(steps_per_epoch) + " batches");
  }
  TrainingState s = run;
  s.epoch = saved.epoch;
  s.batch = saved.batch;
  s.global_step = saved.global_step;
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
