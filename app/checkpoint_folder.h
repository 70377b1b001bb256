// checkpoint_folder.h: the checkpoint folder of a run (--save DIR), written by rank 0 alone.
//
// A checkpoint is two safetensors files named by the optimizer step it was taken after:
//   DIR/checkpoint-00000196.safetensors        the model (torchvision's state_dict, nn/checkpoint.h)
//   DIR/checkpoint-00000196.optim.safetensors  the momentum buffers and the training state
// and with --model-ema a third, written between the two (nn/checkpoint.h save_ema):
//   DIR/checkpoint-00000196.ema.safetensors    the moving average of the weights (nn/model_ema.h)
// The training state (where in which epoch to go on, the step count, the seed...) is the
// optim file's metadata; the model file carries the model's shape (stem, classes, width) so
// `cutrain eval` needs nothing else, and what the run describes of itself (describe(): the
// command, the version, the data, its classes and normalisation, the seed), which
// `cutrain inspect` prints and `cutrain eval` takes its default data from. Each file is written
// atomically (nn/safetensors.h), the model first, so a crash leaves at worst a model file without
// its optim file, which resume skips. After each save only the newest --keep-last checkpoints
// stay, the newest by the step the optim file records, not by name. The folder touches only names
// of this scheme: a user's checkpoint-final.safetensors is neither resumed from, pruned nor tidied.
//
// The writer holds an exclusive flock on DIR/.cutrain.lock for its whole life, and the file names
// the holder (pid, host, start), so a second writer is refused in one line naming the first. The
// two files of a checkpoint are bound to each other: both record the run's id and the step, and
// loading refuses a pair that differs (two runs' halves, a file copied from elsewhere).
//
// Note [The last and the best checkpoint]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Beside the numbered checkpoints, the writer keeps the two names that users look for, as
// Lightning's last.ckpt and best checkpoint do:
//   DIR/checkpoint-last.safetensors  the newest complete checkpoint
//   DIR/checkpoint-best.safetensors  of the best test accuracy so far, among the checkpoints taken
//                                    right after an evaluation (with evaluation on)
// Each is a symbolic link to a numbered model file, relative, so that the folder can move. A link is
// made under a temporary name and renamed over the old one, so a reader sees the old target or the
// new, never none; the pair of files needs no second link, since the optim file goes with the link's
// target (optim_path_for). `cutrain eval`, `cutrain inspect` and `--resume PATH` take either name.
// Pruning keeps best's target beyond --keep-last; last's is the newest, which it keeps anyway. The
// model file records its test accuracy ("test_acc"), so that a resumed run goes on comparing with the
// best so far. A user's own file by either name is left alone, and said.
//
// A folder holds one run. A run that starts afresh (no --resume) in a folder that already holds
// checkpoints is refused, since its checkpoints and the old ones would be pruned and resumed as
// one run; --new-run deletes the old ones first (claim_for_new_run).
//
// What interrupted saves leave behind (a kill during a write: checkpoint-*.safetensors.tmp.<pid>
// of a process that is gone; a full disk between the two files: half a checkpoint) is removed
// by the writer when it opens the folder and each time it prunes, and said in one line.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "nn/checkpoint.h"

namespace cutrain {

class ModelEma;
class ResNet18;
class SGD;

// Where a run stands; everything needed to go on exactly as if it had not stopped. The
// augmentation's randomness is keyed by (seed, epoch, sample), so no generator state is needed.
struct TrainingState {
  std::string run_id;       // made when a run starts afresh, kept by its resumes
  int epoch = 0;            // 0-based epoch to run (or finish)
  int64_t batch = 0;        // the next batch of that epoch
  int64_t global_step = 0;  // optimizer steps done
  uint64_t seed = 0;
  int world_size = 1;
  int batch_size = 0;

  CheckpointMetadata to_metadata() const;
  // Throws naming `path` and the key that is missing, not a number, or outside what a run can
  // be at (an epoch in [0, --epochs' largest], a world size and batch size of at least 1...).
  static TrainingState from_metadata(const CheckpointMetadata& metadata, const std::string& path);
};

// Where a run set up as `run` (its seed, world size and batch size; epochs of `steps_per_epoch`
// batches) goes on from the state `saved` in the checkpoint at `path`: the saved position, with
// the run's own seed, world size and batch size. A checkpoint from the middle of an epoch is
// refused, naming both set-ups, unless the run splits the data the same way (seed, world size
// and batch size), since its position counts batches of that split; one from an epoch's end
// goes on under any. Throws ResumeMismatch: the file is sound, this run cannot go on from it.
struct ResumeMismatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};
TrainingState resume_state(const TrainingState& saved, const TrainingState& run, int64_t steps_per_epoch,
                           const std::string& path);

// A new run's id: 16 random hex digits.
std::string new_run_id();

// The model's shape, and the run and step that bind the file to its optim file, as recorded in
// the model file's metadata.
CheckpointMetadata model_metadata(const ResNet18& model, const TrainingState& state);

class CheckpointFolder {
 public:
  using Report = std::function<void(const std::string& line)>;
  // Creates `dir` if needed. `report` is for the writer alone (rank 0): given one, the folder
  // removes what interrupted saves left, now and at each prune, and reports it there in one line.
  // The writer also takes the folder's lock, or throws naming the run that holds it.
  CheckpointFolder(std::string dir, int keep_last, Report report = nullptr);
  ~CheckpointFolder();
  CheckpointFolder(const CheckpointFolder&) = delete;
  CheckpointFolder& operator=(const CheckpointFolder&) = delete;

  // Writes the checkpoint after `state.global_step` steps, with the test accuracy measured right
  // after that step if there was one and the moving average `ema` if there is one, points the last
  // and best links at it (Note [The last and the best checkpoint]), and prunes old ones; returns the
  // model file's path.
  std::string save(const ResNet18& model, const SGD& sgd, const TrainingState& state,
                   std::optional<double> test_accuracy = std::nullopt, const ModelEma* ema = nullptr) const;
  // What every model file saved from now on also records about the run (its keys never replace
  // the model's shape or the binding to the optim file).
  void describe(CheckpointMetadata description) { description_ = std::move(description); }

  // The model files of complete checkpoints (an optim file beside them), newest first.
  std::vector<std::string> complete_checkpoints() const;

  // For a run that starts afresh here: throws, naming the choices, if the folder holds
  // checkpoints, unless `start_afresh` (--new-run), which removes them and says so.
  void claim_for_new_run(bool start_afresh) const;
  // For a run resumed from `path`, a checkpoint of run `run_id`: throws, naming the choices, if the
  // folder holds another run's checkpoints (one run per folder: its pruning would delete them, or
  // they its own).
  void claim_for_resume(const std::string& path, const std::string& run_id) const;

 private:
  std::string path_for(int64_t step, bool optim) const;
  void prune() const;
  void remove_checkpoint(const std::string& model_path) const;
  void remove_leftovers() const;
  void link(const char* name, const std::string& model_path) const;
  bool beats_best(double accuracy) const;
  void lock();

  std::string dir_;
  int keep_last_;
  Report report_;
  CheckpointMetadata description_;
  int lock_fd_ = -1;  // the writer's, held until it is destroyed
};

// The optim file that goes with a model checkpoint file, or with the target of a link to one; and the
// moving average's file, which a checkpoint of a run with --model-ema has.
std::string optim_path_for(const std::string& model_path);
std::string ema_path_for(const std::string& model_path);

// Loads model and momentum from `link_or_model_path` (and its optim file) and returns the state
// there. Given `ema`, also the average from its file; a checkpoint without one (a run that had no
// --model-ema) starts the average over from the loaded model (ModelEma::start_over). Throws naming
// the files when they record different runs or steps.
TrainingState load_checkpoint(const std::string& link_or_model_path, ResNet18& model, SGD& sgd,
                              ModelEma* ema = nullptr);

}  // namespace cutrain
