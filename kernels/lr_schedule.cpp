// lr_schedule.cpp: the names of the schedules, and the CPU twin of the device's step.
#include "kernels/lr_schedule.h"

#include <stdexcept>

namespace cutrain {

LrScheduleKind parse_lr_schedule(const std::string& name) {
  if (name == "constant") return LrScheduleKind::constant;
  if (name == "cosine") return LrScheduleKind::cosine;
  if (name == "onecycle") return LrScheduleKind::onecycle;
  if (name == "step") return LrScheduleKind::step;
  throw std::runtime_error("--lr-schedule " + name + ": expected constant, cosine, onecycle or step");
}

void lr_schedule_step_cpu(const LrSchedule& schedule, int64_t* step, float* lr) {
  *lr = float(schedule.at(*step));
  *step += 1;
}

}  // namespace cutrain
