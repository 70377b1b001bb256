#include "app/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

namespace cutrain {
namespace {

// Cosine interpolation from `from` (fraction 0) to `to` (fraction 1).
double cosine_between(double from, double to, double fraction) {
  return to + (from - to) * (1.0 + std::cos(std::numbers::pi * fraction)) / 2.0;
}

}  // namespace

double LrSchedule::at(int64_t step) const {
  const int64_t t = std::clamp<int64_t>(step, 0, std::max<int64_t>(total_steps - 1, 0));
  if (kind == LrScheduleKind::onecycle) {
    const double peak_step = 0.3 * double(total_steps) - 1.0;  // PyTorch: pct_start * total - 1
    const double initial_lr = base_lr / 25.0, final_lr = initial_lr / 1e4;
    if (t <= peak_step) return cosine_between(initial_lr, base_lr, peak_step > 0 ? t / peak_step : 1.0);
    const double rest = double(total_steps) - 1.0 - peak_step;
    return cosine_between(base_lr, final_lr, rest > 0 ? (t - peak_step) / rest : 1.0);
  }
  if (t < warmup_steps) return base_lr * double(t + 1) / double(warmup_steps);
  switch (kind) {
    case LrScheduleKind::cosine: {
      const double span = double(std::max<int64_t>(total_steps - warmup_steps, 1));
      return cosine_between(base_lr, 0.0, double(t - warmup_steps) / span);
    }
    case LrScheduleKind::step: {
      double lr = base_lr;
      if (t >= total_steps / 2) lr *= 0.1;
      if (t >= total_steps * 3 / 4) lr *= 0.1;
      return lr;
    }
    default:
      return base_lr;
  }
}

LrScheduleKind parse_lr_schedule(const std::string& name) {
  if (name == "constant") return LrScheduleKind::constant;
  if (name == "cosine") return LrScheduleKind::cosine;
  if (name == "onecycle") return LrScheduleKind::onecycle;
  if (name == "step") return LrScheduleKind::step;
  throw std::runtime_error("--lr-schedule " + name + ": expected constant, cosine, onecycle or step");
}

}  // namespace cutrain
