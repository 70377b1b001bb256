// run_log.h: what rank 0 tells the user and writes for plots. Other ranks hold a silent RunLog.
//
// Console, in the reference recipe's shape plus throughput, the time spent waiting for batches and
// the peak memory (torchvision's "data" and "max mem"), the learning rate, the time since training
// began and an estimate of the time its remaining steps take (torchvision's "eta"):
//   == step: [ 25/196] [1/20] | loss: 2.101 | train acc: 23.456% | 12345 img/s | 20.7 ms/step |
//      data: 0.1 ms/step | max mem: 812 MiB | lr: 0.002 | elapsed: 0:00:04 | eta: 0:01:20  (one line)
// or, when standard output is a terminal, one progress bar line per epoch redrawn in place. A
// long evaluation shows its progress the same way: a line, or a bar in place.
// Metrics (--metrics FILE): JSON lines, appended to. Each process's first record says what it was
// started as ("kind": "run": the start time, the version and commit, what a checkpoint records of
// the run (app/run_start.h describe_run) and the settings the trainer resolved); then one per logged step
// ("kind": "step"), one per evaluation ("kind": "eval", with the test loss beside the accuracy), one
// per epoch ("kind": "epoch"), one at the end ("kind": "summary"), and one where a run resumed
// ("kind": "resume": the records after it repeat the steps since that checkpoint, and the last
// record of each step is the one that counts). Every record holds "time", when it was written, in
// seconds since the Unix epoch (Python's time.time()). A "run" record that no "resume" follows
// begins another run in the same file, whose steps count from 1 again: scripts/plot_metrics.py
// draws it as a run of its own. bench/ and scripts/plot_metrics.py read them, and so does
// bench/pytorch_reference.py write them.
// Times and images/s follow app/run_clock.h: evaluation, checkpoint writes and the epoch-start
// wait are left out of images/s, and evaluation and checkpoint writes out of the training time.
//
// TensorBoard (--tensorboard DIR): the step and evaluation records go to an event file there too
// (app/tensorboard_writer.h), on rank 0 alone.
//
// A metrics file that stops taking records (a full disk, /dev/full) does not stop the training:
// the first failed write prints one warning naming the file and why, no more records are
// written, and finish() then fails the run (exit status 1) with a line saying how many were lost.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace cutrain {

class TensorBoardWriter;

struct StepRecord {
  int epoch;  // 1-based
  int step;   // 1-based within the epoch
  int steps_per_epoch;
  int epochs;
  int64_t global_step;   // optimizer steps since the start of training
  double loss, acc, lr;  // loss and accuracy averaged over the steps since the last record
  double grad_norm;      // the last step's gradient norm (SGD::grad_norm), as llm.c prints it
  double images_per_s;   // all ranks together
  double ms_per_step;
  double data_ms_per_step;    // waiting for the batch (torchvision's "data"): the loader's, on the host
  int64_t peak_memory_bytes;  // so far: the device's memory on a GPU, the resident set on the CPU
  // Model FLOPs utilisation: the model's FLOPs per second over the GPU's peak, as llm.c and PaLM count it
  // (the model's products alone, nothing recomputed). None on the CPU or a GPU whose peak is not known.
  std::optional<double> mfu;
  double elapsed_s;  // since training began, evaluations included
  double eta_s;      // what the remaining steps take at the recent pace (Note [A recent ETA])
};

struct EpochRecord {
  int epoch;
  int epochs;
  int64_t global_step;
  double loss, acc, lr;
  double images_per_s;
  double epoch_time_s;
  std::optional<double> test_acc, test_loss;
  std::optional<double> test_acc_ema;  // --model-ema: the average's (nn/model_ema.h)
  int64_t peak_memory_bytes;
};

// One evaluation on the test set; printed when it falls inside an epoch (the epoch line has the
// others).
struct EvalRecord {
  int epoch;  // 1-based, the epoch of the last step before it
  int epochs;
  int64_t global_step;
  bool epoch_end;
  double test_acc;
  double test_loss;        // the mean cross-entropy, without label smoothing (app/evaluator.h)
  double eval_time_s;      // this evaluation, the average's included
  double training_time_s;  // the training time so far (app/run_clock.h)
  std::optional<double> test_acc_ema, test_loss_ema;  // --model-ema: the average's (nn/model_ema.h)
};

struct SummaryRecord {
  double wall_time_s;                // the whole process
  double training_time_s;            // from the first step, less evaluations and checkpoint writes
  double eval_time_s;                // all evaluations
  double mean_images_per_s;          // after the first logged interval (warm-up), on the step clock
  std::string tta;                   // test-time augmentation: "none" or "flip"
  std::optional<double> target_acc;  // --target-accuracy
  std::optional<double> time_to_target_s, target_epochs;  // null when not reached
  std::optional<int64_t> target_steps;
  std::optional<double> best_test_acc, final_test_acc;
  int64_t peak_memory_bytes;
  int world_size;
  std::string precision, stem;
  int batch_size;
};

// "0:04:07", "13:28:10": a duration in whole seconds as hours, minutes and seconds.
std::string clock_text(double seconds);

// A count with its noun, singular for one: counted(1, "step") is "1 step", counted(3, "step")
// "3 steps". For every count the program prints in a sentence.
inline std::string counted(long long n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

class RunLog {
 public:
  // `active` is true on rank 0 only; an empty metrics_path writes no JSON, an empty tensorboard_dir
  // no event file.
  RunLog(bool active, const std::string& metrics_path, const std::string& tensorboard_dir);
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  bool active() const { return active_; }
  // The run's first record: the keys of `run` (what the trainer says of itself), and the start
  // time, the version and the commit.
  void started(const nlohmann::json& run);
  // Progress is drawn in place (standard output is a terminal), rather than printed as lines.
  bool in_place() const { return progress_bar_; }
  // printf-style line to the console (rank 0 only), ending any progress bar first.
  void print(const char* format, ...) __attribute__((format(printf, 2, 3)));
  void step(const StepRecord& r);
  void epoch(const EpochRecord& r);
  void evaluation(const EvalRecord& r);
  // A long evaluation's progress: `done` of `total` images after `elapsed_s` seconds.
  void evaluation_progress(int64_t done, int64_t total, double elapsed_s);
  void summary(const SummaryRecord& r);
  // The run goes on from `checkpoint`: `epoch` (1-based) after `global_step` steps.
  void resumed(int epoch, int64_t global_step, const std::string& checkpoint);
  // The run's end: closes the metrics file; throws, naming it, if any record was not written.
  void finish();

 private:
  void write_json(nlohmann::json record);  // adds "time"
  void drop_torn_record(int fd);
  void end_progress_bar();

  bool active_;
  bool progress_bar_;  // stdout is a terminal
  bool bar_open_ = false;
  std::string metrics_path_;
  std::FILE* metrics_ = nullptr;
  std::string write_error_;  // why the first failed write failed; empty while all went well
  int64_t lost_records_ = 0;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace cutrain
