#include "app/accuracy_tracker.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "app/run_log.h"

namespace cutrain {

AccuracyTracker::AccuracyTracker(EvalSchedule schedule, std::optional<double> target, int64_t steps_per_epoch)
    : schedule_(schedule), target_(target), steps_per_epoch_(steps_per_epoch) {
  if (target_ && schedule_.every_epochs == 0 && schedule_.every_steps == 0)
    throw std::invalid_argument("--target-accuracy needs evaluations: --eval-every E or --eval-every-steps N");
}

bool AccuracyTracker::due(int epoch, bool epoch_end, int64_t step) const {
  const bool last = epoch_end && epoch == schedule_.epochs;
  if (schedule_.every_steps > 0) return last || step % schedule_.every_steps == 0;
  return epoch_end && schedule_.every_epochs > 0 && (epoch % schedule_.every_epochs == 0 || last);
}

bool AccuracyTracker::add_evaluation(double accuracy, int64_t step, const RunClock& clock) {
  final_ = accuracy;
  final_step_ = step;
  best_ = std::max(best_.value_or(accuracy), accuracy);
  if (!target_ || reached_ || accuracy < *target_) return false;
  reached_ = TargetReached{accuracy, clock.training_s(), clock.paused_s(Pause::evaluation), step,
                           double(step) / double(steps_per_epoch_)};
  return true;
}

std::string AccuracyTracker::summary_line(int epochs_run) const {
  if (!target_) return "";
  char line[256];
  if (reached_)
    std::snprintf(line, sizeof line,
                  "time to %.2f%% test accuracy: %.1f s of training, %.2f epochs (%s); evaluations took "
                  "%.1f s more",
                  100 * *target_, reached_->training_s, reached_->epochs, counted(reached_->steps, "step").c_str(),
                  reached_->evaluation_s);
  else if (best_)
    std::snprintf(line, sizeof line, "target %.2f%% test accuracy not reached in %s (best %.2f%%)", 100 * *target_,
                  counted(epochs_run, "epoch").c_str(), 100 * *best_);
  else
    std::snprintf(line, sizeof line, "target %.2f%% test accuracy not reached: no evaluation ran", 100 * *target_);
  return line;
}

}  // namespace cutrain
