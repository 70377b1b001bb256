// accuracy_tracker.h: when `cutrain train` evaluates, what it found, and how long training took
// to reach --target-accuracy.
//
// Evaluations fall at the end of every --eval-every-th epoch and of the last one or, with
// --eval-every-steps N, after every N-th optimizer step and at the end of the last epoch. The
// first evaluation whose test accuracy reaches the target stops the run. Time to target is the
// training time (app/run_clock.h) at that evaluation: every step from the first, epoch-start waits
// included, but neither the evaluations, whose time is reported apart, nor checkpoint writes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "app/run_clock.h"

namespace cutrain {

struct EvalSchedule {
  int every_epochs = 1;     // 0: only with every_steps
  int64_t every_steps = 0;  // 0: by epochs
  int epochs = 1;           // of the whole run
};

struct TargetReached {
  double accuracy;      // the test accuracy that reached the target
  double training_s;    // time to target
  double evaluation_s;  // spent on evaluations up to and including that one
  int64_t steps;        // optimizer steps it took
  double epochs;        // steps / steps per epoch
};

class AccuracyTracker {
 public:
  // Throws std::invalid_argument when there is a target but the schedule never evaluates.
  AccuracyTracker(EvalSchedule schedule, std::optional<double> target, int64_t steps_per_epoch);

  // Is an evaluation due after global step `step`, which falls in epoch `epoch` (1-based) and
  // ends it or not?
  bool due(int epoch, bool epoch_end, int64_t step) const;
  // Takes the test accuracy measured after global step `step`; true when it is the first to reach
  // the target: the run stops.
  bool add_evaluation(double accuracy, int64_t step, const RunClock& clock);

  std::optional<double> best() const { return best_; }
  std::optional<double> final() const { return final_; }
  // The global step after which the final test accuracy was measured; 0 before any evaluation.
  int64_t final_step() const { return final_step_; }
  std::optional<double> target() const { return target_; }
  const std::optional<TargetReached>& reached() const { return reached_; }
  // "time to 94.00% test accuracy: 812.3 s of training, 17.00 epochs (3315 steps); evaluations
  // took 20.1 s more", or "target 94.00% test accuracy not reached in 20 epochs (best 92.10%)";
  // empty without a target.
  std::string summary_line(int epochs_run) const;

 private:
  EvalSchedule schedule_;
  std::optional<double> target_;
  int64_t steps_per_epoch_;
  std::optional<double> best_, final_;
  int64_t final_step_ = 0;
  std::optional<TargetReached> reached_;
};

}  // namespace cutrain
