#include "app/checkpoint_folder.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>
#include <random>
#include <stdexcept>

#include "app/train_options.h"
#include "dist/launch/env.h"
#include "nn/model_ema.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"
#include "nn/sgd.h"

namespace cutrain {
namespace fs = std::filesystem;
namespace {

constexpr const char* kPrefix = "checkpoint-";
constexpr const char* kModelSuffix = ".safetensors";
constexpr const char* kOptimSuffix = ".optim.safetensors";
constexpr const char* kEmaSuffix = ".ema.safetensors";
constexpr const char* kTemporaryInfix = ".tmp.";  // nn/safetensors.h's atomic write: <file>.tmp.<pid>
constexpr size_t kStepDigits = 8;                 // at least; path_for pads to it
// Note [The last and the best checkpoint] in app/checkpoint_folder.h.
constexpr const char* kLastLink = "checkpoint-last.safetensors";
constexpr const char* kBestLink = "checkpoint-best.safetensors";
constexpr const char* kTestAccuracyKey = "test_acc";

// The file that `path` names: a link's target, read relative to the link's folder.
std::string through_link(const std::string& path) {
  std::error_code ec;
  if (!fs::is_symlink(path, ec)) return path;
  const fs::path target = fs::read_symlink(path, ec);
  if (ec) return path;
  return target.is_absolute() ? target.string() : (fs::path(path).parent_path() / target).string();
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// A file name of this folder's naming scheme, taken apart: checkpoint-<step>.safetensors,
// checkpoint-<step>.optim.safetensors or checkpoint-<step>.ema.safetensors, each perhaps with
// .tmp.<pid> after it. Other names, such as a user's checkpoint-final.safetensors, are not the
// folder's and are never touched.
struct SchemeName {
  int64_t step = 0;
  bool optim = false;
  bool ema = false;
  std::string writer;  // the pid of a temporary file's writer; empty for the file itself
};

std::optional<SchemeName> parse_scheme_name(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return std::nullopt;
  const size_t digits_begin = std::strlen(kPrefix), digits_end = name.find('.', digits_begin);
  if (digits_end == std::string::npos) return std::nullopt;
  const std::string digits = name.substr(digits_begin, digits_end - digits_begin);
  if (!all_digits(digits) || digits.size() < kStepDigits || digits.size() > 18) return std::nullopt;
  SchemeName parsed;
  parsed.step = std::stoll(digits);
  std::string rest = name.substr(digits_end);
  const size_t tmp = rest.find(kTemporaryInfix);
  if (tmp != std::string::npos) {
    parsed.writer = rest.substr(tmp + std::strlen(kTemporaryInfix));
    if (!all_digits(parsed.writer) || parsed.writer.size() > 9) return std::nullopt;
    rest = rest.substr(0, tmp);
  }
  parsed.optim = rest == kOptimSuffix;
  parsed.ema = rest == kEmaSuffix;
  if (!parsed.optim && !parsed.ema && rest != kModelSuffix) return std::nullopt;
  return parsed;
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

// Whether the process that wrote a temporary file is gone. This process is never in the middle
// of a save when the folder is tidied, so its own pid (a container's fixed pid) counts as gone.
bool writer_gone(pid_t pid) { return pid == ::getpid() || (::kill(pid, 0) != 0 && errno == ESRCH); }

// The step a checkpoint was taken after, as its optim file's training state records it; the
// name's step when that cannot be read (loading it will then say why, and --resume auto skips it).
int64_t recorded_step(const std::string& optim_path, int64_t step_in_name) {
  try {
    const CheckpointMetadata metadata = read_safetensors_metadata(optim_path);
    const auto it = metadata.find("global_step");
    int64_t step = 0;
    if (it != metadata.end() &&
        std::from_chars(it->second.data(), it->second.data() + it->second.size(), step).ec == std::errc())
      return step;
  } catch (const std::runtime_error&) {
  }
  return step_in_name;
}

}  // namespace

CheckpointMetadata TrainingState::to_metadata() const {
  return {{"run_id", run_id},
          {"epoch", std::to_string(epoch)},
          {"batch", std::to_string(batch)},
          {"global_step", std::to_string(global_step)},
          {"seed", std::to_string(seed)},
          {"world_size", std::to_string(world_size)},
          {"batch_size", std::to_string(batch_size)}};
}

std::string new_run_id() {
  std::random_device random;
  char id[17];
  std::snprintf(id, sizeof id, "%08x%08x", unsigned(random()), unsigned(random()));
  return id;
}

TrainingState TrainingState::from_metadata(const CheckpointMetadata& metadata, const std::string& path) {
  constexpr int64_t kMaxSteps = int64_t(1) << 50;
  TrainingState s;
  if (auto it = metadata.find("run_id"); it != metadata.end()) s.run_id = it->second;  // none before run ids
  s.epoch = metadata_number<int>(metadata, "epoch", path, 0, kMaxEpochs);
  s.batch = metadata_number<int64_t>(metadata, "batch", path, 0, kMaxSteps);
  s.global_step = metadata_number<int64_t>(metadata, "global_step", path, 0, kMaxSteps);
  s.seed = metadata_number<uint64_t>(metadata, "seed", path, 0, UINT64_MAX);
  s.world_size = metadata_number<int>(metadata, "world_size", path, 1, kMaxWorldSize);  // Note [The largest world]
  s.batch_size = metadata_number<int>(metadata, "batch_size", path, 1, kMaxBatchSize);
  return s;
}

TrainingState resume_state(const TrainingState& saved, const TrainingState& run, int64_t steps_per_epoch,
                           const std::string& path) {
  if (saved.batch > 0) {
    // The position inside an epoch counts batches of the sampler's order for this seed, world
    // size and batch size; under any other it would name other images.
    if (saved.seed != run.seed || saved.world_size != run.world_size || saved.batch_size != run.batch_size)
      throw ResumeMismatch(path + ": saved in the middle of epoch " + std::to_string(saved.epoch + 1) +
                           " (after batch " + std::to_string(saved.batch) + ") by " + std::to_string(saved.world_size) +
                           " rank(s) at batch size " + std::to_string(saved.batch_size) + " and seed " +
                           std::to_string(saved.seed) + "; this run has " + std::to_string(run.world_size) + " at " +
                           std::to_string(run.batch_size) + " and seed " + std::to_string(run.seed) +
                           ": resume it with the same, or from a checkpoint saved at the end of an epoch");
    if (saved.batch >= steps_per_epoch)
      throw ResumeMismatch(path + ": saved after batch " + std::to_string(saved.batch) +
                           " of an epoch, but an epoch of this data has " + std::to_string(steps_per_epoch) +
                           " batches");
  }
  TrainingState s = run;
  if (!saved.run_id.empty()) s.run_id = saved.run_id;
  s.epoch = saved.epoch;
  s.batch = saved.batch;
  s.global_step = saved.global_step;
  return s;
}

CheckpointMetadata model_metadata(const ResNet18& model, const TrainingState& state) {
  const ResNetConfig& c = model.config();
  return {{"format", "cutrain resnet18"},
          {"stem", stem_name(c.stem)},
          {"num_classes", std::to_string(c.num_classes)},
          {"width", std::to_string(c.width)},
          {"run_id", state.run_id},
          {"global_step", std::to_string(state.global_step)}};
}

CheckpointFolder::CheckpointFolder(std::string dir, int keep_last, Report report)
    : dir_(std::move(dir)), keep_last_(keep_last), report_(std::move(report)) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_)) throw std::runtime_error("--save " + dir_ + ": cannot create the folder");
  if (!report_) return;
  // Found now, not at the first save after an epoch of training.
  if (::access(dir_.c_str(), W_OK | X_OK) != 0)
    throw std::runtime_error("--save " + dir_ + ": cannot write there (" + std::strerror(errno) + ")");
  lock();
  remove_leftovers();
}

CheckpointFolder::~CheckpointFolder() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

// The lock file is opened without following a link, and kept: the lock goes with the process,
// however it ends. What it holds names the holder for the next writer's message.
void CheckpointFolder::lock() {
  const std::string path = (fs::path(dir_) / ".cutrain.lock").string();
  lock_fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) throw std::runtime_error("--save " + dir_ + ": cannot write there (" + std::strerror(errno) + ")");
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    char holder[256] = "";
    const ssize_t n = ::pread(lock_fd_, holder, sizeof holder - 1, 0);
    holder[std::max<ssize_t>(n, 0)] = '\0';
    throw std::runtime_error("--save " + dir_ + " is in use by another run (" + (n > 0 ? holder : "holder unknown") +
                             "): wait for it to end, or choose another --save folder");
  }
  char host[128] = "";
  ::gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  char since[32];
  std::strftime(since, sizeof since, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  const std::string holder = "pid " + std::to_string(::getpid()) + " on " + host + " since " + since;
  if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, holder.data(), holder.size(), 0) != ssize_t(holder.size()))
    throw std::runtime_error("--save " + dir_ + ": cannot write there (" + std::strerror(errno) + ")");
}

std::string CheckpointFolder::path_for(int64_t step, bool optim) const {
  char name[64];
  std::snprintf(name, sizeof name, "%s%08lld%s", kPrefix, static_cast<long long>(step),
                optim ? kOptimSuffix : kModelSuffix);
  return (fs::path(dir_) / name).string();
}

std::string optim_path_for(const std::string& model_path) {
  const std::string model = through_link(model_path);
  return model.substr(0, model.size() - std::strlen(kModelSuffix)) + kOptimSuffix;
}

std::string ema_path_for(const std::string& model_path) {
  const std::string model = through_link(model_path);
  return model.substr(0, model.size() - std::strlen(kModelSuffix)) + kEmaSuffix;
}

// Points DIR/name at `model_path`, a model file of DIR, atomically: a new link is made under a
// temporary name and renamed over the old one. A file of the user's by that name is left alone.
void CheckpointFolder::link(const char* name, const std::string& model_path) const {
  const fs::path dir(dir_), at = dir / name, temporary = dir / (std::string(".") + name + ".link");
  std::error_code ec;
  const fs::file_status there = fs::symlink_status(at, ec);
  if (fs::exists(there) && !fs::is_symlink(there)) {
    if (report_) report_("cutrain: warning: checkpoints: " + at.string() + " is a file, not cutrain's link: it stays");
    return;
  }
  fs::remove(temporary, ec);
  fs::create_symlink(fs::path(model_path).filename(), temporary, ec);
  if (!ec) fs::rename(temporary, at, ec);
  if (ec)
    throw std::runtime_error("--save " + dir_ + ": cannot link " + name + " to " + model_path + " (" + ec.message() +
                             ")");
}

// Whether a checkpoint of test accuracy `accuracy` is better than the one the best link names: one
// that the link names no longer, or names without an accuracy, counts as none.
bool CheckpointFolder::beats_best(double accuracy) const {
  const std::string best = (fs::path(dir_) / kBestLink).string();
  try {
    const CheckpointMetadata m = read_safetensors_metadata(best);
    const auto it = m.find(kTestAccuracyKey);
    return it == m.end() || accuracy > std::stod(it->second);
  } catch (const std::exception&) {
    return true;
  }
}

namespace {

std::string model_path_for(const std::string& optim_path) {
  return optim_path.substr(0, optim_path.size() - std::strlen(kOptimSuffix)) + kModelSuffix;
}

}  // namespace

// A checkpoint that would not load is not written, and nothing is pruned for it (Note [Checkpoints
// that load]): the run stops, naming the newest checkpoint, which loads.
std::string CheckpointFolder::save(const ResNet18& model, const SGD& sgd, const TrainingState& state,
                                   std::optional<double> test_accuracy, const ModelEma* ema) const {
  const std::string model_path = path_for(state.global_step, false);
  CheckpointMetadata metadata = model_metadata(model, state);
  if (test_accuracy) {
    char text[32];
    std::snprintf(text, sizeof text, "%.6f", *test_accuracy);
    metadata[kTestAccuracyKey] = text;
  }
  metadata.insert(description_.begin(), description_.end());  // keeps the model's own keys
  try {
    save_model(model_path, model, metadata);
    try {
      if (ema) {
        CheckpointMetadata ema_metadata = model_metadata(model, state);
        ema_metadata.insert(description_.begin(), description_.end());
        save_ema(ema_path_for(model_path), model, *ema, ema_metadata);
      }
      save_momentum(path_for(state.global_step, true), model, sgd, state.to_metadata());
    } catch (...) {
      std::error_code ignored;  // half a checkpoint is none: do not leave the model file alone
      fs::remove(ema_path_for(model_path), ignored);
      fs::remove(model_path, ignored);
      throw;
    }
  } catch (const UnfitCheckpoint& e) {
    const std::vector<std::string> saved = complete_checkpoints();
    throw UnfitCheckpoint(std::string(e.what()) +
                          "; stopping; last good checkpoint: " + (saved.empty() ? std::string("none") : saved.front()));
  }
  link(kLastLink, model_path);
  if (test_accuracy && beats_best(*test_accuracy)) link(kBestLink, model_path);
  prune();
  return model_path;
}

std::vector<std::string> CheckpointFolder::complete_checkpoints() const {
  std::vector<std::pair<int64_t, std::string>> found;  // (recorded step, model file)
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::optional<SchemeName> name = parse_scheme_name(entry.path().filename().string());
    if (!name || name->optim || name->ema || !name->writer.empty()) continue;
    const std::string optim = optim_path_for(entry.path().string());
    if (fs::exists(optim)) found.emplace_back(recorded_step(optim, name->step), entry.path().string());
  }
  // By the step recorded inside, not by name: a renamed or copied file cannot pose as the newest.
  std::sort(found.rbegin(), found.rend());
  std::vector<std::string> paths;
  for (auto& [step, path] : found) paths.push_back(std::move(path));
  return paths;
}

void CheckpointFolder::claim_for_new_run(bool start_afresh) const {
  const std::vector<std::string> old = complete_checkpoints();
  if (old.empty()) return;
  if (!start_afresh)
    throw std::runtime_error("--save " + dir_ + " holds the checkpoints of another run (the newest is " + old.front() +
                             "): go on with it with --resume auto, choose another --save folder, or add --new-run "
                             "to delete them and start afresh there");
  for (const std::string& path : old) remove_checkpoint(path);
  for (const char* name : {kLastLink, kBestLink}) {
    const fs::path at = fs::path(dir_) / name;
    std::error_code ec;
    if (fs::is_symlink(at, ec)) fs::remove(at, ec);
  }
  if (report_)
    report_("checkpoints: --new-run: removed the " + std::to_string(old.size()) +
            " checkpoint(s) of the "
            "earlier run in " +
            dir_);
}

void CheckpointFolder::claim_for_resume(const std::string& path, const std::string& run_id) const {
  const std::vector<std::string> held = complete_checkpoints();
  if (held.empty()) return;
  std::string held_run = "unknown";
  try {
    const CheckpointMetadata newest = read_safetensors_metadata(optim_path_for(held.front()));
    const auto it = newest.find("run_id");
    held_run = it == newest.end() ? std::string() : it->second;  // none before run ids, as in run_id
  } catch (const std::runtime_error&) {
  }
  if (held_run == run_id) return;
  const auto named = [](const std::string& id) { return id.empty() ? std::string("none") : id; };
  throw std::runtime_error("--resume " + path + ": a checkpoint of run " + named(run_id) + ", but --save " + dir_ +
                           " holds another run's checkpoints (run " + named(held_run) + ", the newest " + held.front() +
                           "): choose another --save folder, or go on with that run with --resume auto");
}

// The optim file first: a model file alone is half a checkpoint, which nobody resumes from. A file
// that cannot be removed (a shared sticky folder: EPERM) is said, and left; the run goes on. The
// average's file (--model-ema) goes with them where there is one.
void CheckpointFolder::remove_checkpoint(const std::string& model_path) const {
  for (const std::string& path : {optim_path_for(model_path), ema_path_for(model_path), model_path}) {
    std::error_code ec;
    if (!fs::remove(path, ec) && ec && report_)
      report_("cutrain: warning: checkpoints: cannot remove " + path + " (" + ec.message() + "); it stays");
  }
}

void CheckpointFolder::prune() const {
  const std::vector<std::string> all = complete_checkpoints();
  const fs::path best = fs::path(through_link((fs::path(dir_) / kBestLink).string())).filename();
  for (size_t i = size_t(keep_last_); i < all.size(); ++i)
    if (fs::path(all[i]).filename() != best) remove_checkpoint(all[i]);
  if (report_) remove_leftovers();
}

void CheckpointFolder::remove_leftovers() const {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    const std::optional<SchemeName> parsed = parse_scheme_name(name);
    if (!parsed || !entry.is_regular_file(ec)) continue;
    std::string why;
    if (!parsed->writer.empty()) {
      if (writer_gone(pid_t(std::stol(parsed->writer)))) why = "writer " + parsed->writer + " gone";
    } else if (parsed->optim) {
      if (!fs::exists(model_path_for(entry.path().string()))) why = "no model file";
    } else if (parsed->ema) {
      const std::string path = entry.path().string();
      if (!fs::exists(optim_path_for(path.substr(0, path.size() - std::strlen(kEmaSuffix)) + kModelSuffix)))
        why = "no optim file";
    } else if (!fs::exists(optim_path_for(entry.path().string()))) {
      why = "no optim file";
    }
    if (why.empty() || !fs::remove(entry.path(), ec)) continue;
    removed.push_back(name + " (" + why + ")");
  }
  if (removed.empty()) return;
  std::sort(removed.begin(), removed.end());
  constexpr size_t kNamed = 4;
  std::string list;
  for (size_t i = 0; i < std::min(removed.size(), kNamed); ++i) list += (i ? ", " : "") + removed[i];
  if (removed.size() > kNamed) list += " and " + std::to_string(removed.size() - kNamed) + " more";
  report_("checkpoints: removed " + std::to_string(removed.size()) + " file(s) that interrupted saves left in " + dir_ +
          ": " + list);
}

TrainingState load_checkpoint(const std::string& link_or_model_path, ResNet18& model, SGD& sgd, ModelEma* ema) {
  // Once: the writer may point a link elsewhere between two reads of it.
  const std::string model_path = through_link(link_or_model_path);
  const CheckpointMetadata model_file = read_safetensors_metadata(model_path);
  const std::string optim = optim_path_for(model_path);
  const TrainingState state = TrainingState::from_metadata(read_safetensors_metadata(optim), optim);
  // The binding of the two files; checkpoints from before run ids have it in neither.
  auto recorded = [](const CheckpointMetadata& m, const std::string& key) {
    const auto it = m.find(key);
    return it == m.end() ? std::string("none") : it->second;
  };
  const std::string model_run = recorded(model_file, "run_id"), model_step = recorded(model_file, "global_step");
  const std::string optim_run = state.run_id.empty() ? "none" : state.run_id;
  if ((model_run != "none" || optim_run != "none") &&
      (model_run != optim_run || model_step != std::to_string(state.global_step)))
    throw std::runtime_error(model_path + ": not one checkpoint with its optim file: the model file is of run " +
                             model_run + " at step " + model_step + ", the optim file of run " + optim_run +
                             " at step " + std::to_string(state.global_step));
  std::string ema_path;
  if (ema && fs::exists(ema_path_for(model_path))) {
    ema_path = ema_path_for(model_path);
    const CheckpointMetadata ema_file = read_safetensors_metadata(ema_path);
    if (recorded(ema_file, "run_id") != model_run || recorded(ema_file, "global_step") != model_step)
      throw std::runtime_error(ema_path + ": not the average of " + model_path + ": it is of run " +
                               recorded(ema_file, "run_id") + " at step " + recorded(ema_file, "global_step") +
                               ", the model file of run " + model_run + " at step " + model_step);
  }
  load_model(model_path, model);
  load_momentum(optim, model, sgd);
  if (!ema_path.empty()) {
    load_ema(ema_path, model, *ema);
  } else if (ema) {
    ema->start_over();
  }
  return state;
}

}  // namespace cutrain
