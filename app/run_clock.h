// run_clock.h: where a training run's wall time goes, so that images/s and time to accuracy
// count training and nothing else. bench/reference_trainer.py keeps the same clock, so the two
// programs' figures mean the same thing.
//
//   | steps | eval | steps | checkpoint | epoch-start wait | steps | eval | ...
//   training time  from the first step, less evaluations and checkpoint writes: time to accuracy
//   step time      training time less the epoch-start waits (the loader filling its pipeline
//                  before an epoch's first batch): the clock of images/s
// On a GPU the steps run behind the host: whoever pauses the clock first waits for the device,
// so the time of the steps already queued counts as training.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

namespace cutrain {

enum class Pause { evaluation, checkpoint, epoch_start };

class RunClock {
 public:
  // Training begins now.
  void start();
  // Until resume(), the time goes to `reason`. Pausing a paused clock changes nothing.
  void pause(Pause reason);
  void resume();

  double training_s() const;  // since start(), less evaluations and checkpoints
  double step_s() const;      // training_s() less the epoch-start waits
  double paused_s(Pause reason) const;

 private:
  using Clock = std::chrono::steady_clock;
  double since(Clock::time_point t) const;

  Clock::time_point start_, pause_start_;
  bool paused_ = false;
  Pause reason_ = Pause::evaluation;
  std::array<double, 3> paused_s_{};  // per Pause, finished pauses
};

// Note [A recent ETA]
// ~~~~~~~~~~~~~~~~~~~
// The step line's ETA is the remaining steps at the pace of the last 20 s or so, not of the
// whole run, so that it follows a machine whose load changes. Each logged window's steps and
// seconds are added to sums that decay by exp(-t / 20 s) over the time t of the windows after it,
// and the pace is their ratio: a window from a minute ago weighs e^-3 of one just ended.
class RecentPace {
 public:
  // A logged window of `steps` steps that took `seconds` of step time.
  void add(int64_t steps, double seconds);
  // Seconds a step; 0 before any window.
  double seconds_per_step() const { return steps_ > 0 ? seconds_ / steps_ : 0; }

 private:
  double steps_ = 0, seconds_ = 0;
};

}  // namespace cutrain
