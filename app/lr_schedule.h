// lr_schedule.h: the learning rate at each optimizer step, as a pure function of the step.
//
// With T total steps and W warm-up steps (W = warmup_epochs * steps_per_epoch), at step t
// (0-based, counted across epochs and restarts, so a resumed run sees the same values):
//   warm-up (t < W):  lr = base * (t + 1) / W                       (linear from ~0)
//   constant:         lr = base
//   cosine:           lr = base * (1 + cos(pi * (t - W) / (T - W))) / 2
//   step:             lr = base * 0.1^k, k = how many of the milestones 50% and 75% of T are <= t
//                     (MultiStepLR at half and three quarters of the run, gamma 0.1)
//   onecycle:         PyTorch's OneCycleLR with its defaults and no separate warm-up: cosine up
//                     from base/25 to base over the first 30% of T, then cosine down to base/25e4.
#pragma once

#include <cstdint>
#include <string>

namespace cutrain {

enum class LrScheduleKind { constant, cosine, onecycle, step };

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::constant;
  double base_lr = 0.002;
  int64_t total_steps = 1;
  int64_t warmup_steps = 0;

  double at(int64_t step) const;
};

// "constant" / "cosine" / "onecycle" / "step"; throws std::runtime_error naming the bad value.
LrScheduleKind parse_lr_schedule(const std::string& name);

}  // namespace cutrain
