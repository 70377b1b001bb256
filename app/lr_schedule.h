// lr_schedule.h: the learning-rate schedules of `cutrain train --lr-schedule`. The formulas are
// kernels/lr_schedule.cuh's LrSchedule::at, which the device also evaluates (nn/sgd.h), so the
// rate the host logs is the rate SGD used.
#pragma once

#include <string>

#include "kernels/lr_schedule.cuh"

namespace cutrain {

// "constant" / "cosine" / "onecycle" / "step"; throws std::runtime_error naming the bad value.
LrScheduleKind parse_lr_schedule(const std::string& name);

}  // namespace cutrain
