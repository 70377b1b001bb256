// lr_schedule.cuh: the learning rate at each optimizer step, a pure function of the step, shared
// by the host (which logs it) and the device (which computes it for SGD from its own step counter,
// kernels/lr_schedule.h), so both compute the same formula in the same double precision.
//
// With T total steps and W warm-up steps (W = warmup_epochs * steps_per_epoch), at step t
// (0-based, counted across epochs and restarts, so a resumed run sees the same values; past the
// end, the last value):
//   warm-up (t < W):  lr = base * (t + 1) / W                       (linear from ~0)
//   constant:         lr = base
//   cosine:           lr = base * (1 + cos(pi * (t - W) / (T - W))) / 2
//   step:             lr = base * 0.1^k, k = how many of the milestones 50% and 75% of T are <= t
//                     (MultiStepLR at half and three quarters of the run, gamma 0.1)
//   onecycle:         PyTorch's OneCycleLR with its defaults and no separate warm-up: cosine up
//                     from base/25 to base over the first 30% of T, then cosine down to base/25e4.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace cutrain {

enum class LrScheduleKind { constant, cosine, onecycle, step };

// Cosine interpolation from `from` (fraction 0) to `to` (fraction 1).
__host__ __device__ inline double cosine_between(double from, double to, double fraction) {
  constexpr double kPi = 3.14159265358979323846;
  return to + (from - to) * (1.0 + cos(kPi * fraction)) / 2.0;
}

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::constant;
  double base_lr = 0.002;
  int64_t total_steps = 1;
  int64_t warmup_steps = 0;

  __host__ __device__ double at(int64_t step) const {
    const int64_t last = total_steps > 1 ? total_steps - 1 : 0;
    const int64_t t = step < 0 ? 0 : step > last ? last : step;
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
        const double span = double(total_steps - warmup_steps > 1 ? total_steps - warmup_steps : 1);
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
};

}  // namespace cutrain
