// lr_schedule.h: the learning-rate schedules of `cutrain train --lr-schedule`, and the kernel
// that evaluates them on the device before each step.
//
// The rate at each optimizer step is a pure function of the step, LrSchedule::at below. The host
// calls it to log the rate, and the device calls it to compute the rate that SGD reads, so both
// evaluate the same formula in the same double precision. bench/lr_schedule.py is its twin for
// the PyTorch reference.
//
// With T total steps and W warm-up steps (W = warmup_epochs * steps_per_epoch), at step t
// (0-based, counted across epochs and restarts, so a resumed run sees the same values; past the
// end, the last value):
//   warm-up (t < W):  lr = base * (t + 1) / W                       (linear from ~0)
//   constant:         lr = base
//   cosine:           lr = base * (1 + cos(pi * (t - W) / (T - W))) / 2
//   step:             lr = base * gamma^k, k = how many milestone steps floor(m_i * T) are <= t, for the
//                     milestones m_i given as fractions of the run (PyTorch's MultiStepLR with milestones
//                     floor(m_i * T) and gamma; by default 0.5 and 0.75, gamma 0.1)
//   onecycle:         PyTorch's OneCycleLR with its defaults and no separate warm-up: cosine up
//                     from base/25 to base over the first 30% of T, then cosine down to base/25e4.
//
// The device computes each step's rate where SGD reads it, from a step counter in the same
// memory, so that no step waits for the host to set it and a CUDA graph replays with the right
// rate at every step:
//
//   lr = schedule.at(*step);  *step += 1
//
// One thread on the GPU does this before the step's first update, and the CPU twin does the same
// on the host.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

namespace cutrain {

enum class LrScheduleKind { constant, cosine, onecycle, step };

// "constant", "cosine", "onecycle" or "step"; throws std::runtime_error naming the bad value.
LrScheduleKind parse_lr_schedule(const std::string& name);

// Cosine interpolation from `from` (fraction 0) to `to` (fraction 1).
__host__ __device__ inline double cosine_between(double from, double to, double fraction) {
  constexpr double kPi = 3.14159265358979323846;
  return to + (from - to) * (1.0 + cos(kPi * fraction)) / 2.0;
}

// The most milestones of the step schedule: a fixed array, so that the schedule stays a kernel's argument.
inline constexpr int kMaxLrMilestones = 8;

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::constant;
  double base_lr = 0.002;
  int64_t total_steps = 1;
  int64_t warmup_steps = 0;
  // The step schedule's milestones, increasing fractions of total_steps in [0, 1], and its factor.
  int milestone_count = 2;
  double milestones[kMaxLrMilestones] = {0.5, 0.75};
  double gamma = 0.1;

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
        // floor(m * T) is exact for the default 0.5 and 0.75 (T < 2^51): T / 2 and 3T / 4.
        double lr = base_lr;
        for (int i = 0; i < milestone_count && i < kMaxLrMilestones; ++i)
          if (t >= int64_t(milestones[i] * double(total_steps))) lr *= gamma;
        return lr;
      }
      default: return base_lr;
    }
  }
};

// lr = schedule.at(*step); *step += 1, on the host or as one thread on `stream`.
void lr_schedule_step_cpu(const LrSchedule& schedule, int64_t* step, float* lr);
void lr_schedule_step_cuda(const LrSchedule& schedule, int64_t* step, float* lr, cudaStream_t stream);

}  // namespace cutrain
