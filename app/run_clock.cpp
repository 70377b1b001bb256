#include "app/run_clock.h"

#include <cmath>

namespace cutrain {

double RunClock::since(Clock::time_point t) const { return std::chrono::duration<double>(Clock::now() - t).count(); }

void RunClock::start() {
  start_ = Clock::now();
  paused_ = false;
  paused_s_ = {};
}

void RunClock::pause(Pause reason) {
  if (paused_) return;
  paused_ = true;
  reason_ = reason;
  pause_start_ = Clock::now();
}

void RunClock::resume() {
  if (!paused_) return;
  paused_s_[size_t(reason_)] += since(pause_start_);
  paused_ = false;
}

double RunClock::paused_s(Pause reason) const {
  return paused_s_[size_t(reason)] + (paused_ && reason_ == reason ? since(pause_start_) : 0.0);
}

double RunClock::training_s() const {
  return since(start_) - paused_s(Pause::evaluation) - paused_s(Pause::checkpoint);
}

double RunClock::step_s() const { return training_s() - paused_s(Pause::epoch_start); }

void RecentPace::add(int64_t steps, double seconds) {
  constexpr double kHorizonS = 20;  // Note [A recent ETA]
  const double keep = std::exp(-seconds / kHorizonS);
  steps_ = steps_ * keep + double(steps);
  seconds_ = seconds_ * keep + seconds;
}

}  // namespace cutrain
