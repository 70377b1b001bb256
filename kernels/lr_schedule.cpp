// lr_schedule.cpp: the CPU twin of lr_schedule.h.
#include "kernels/lr_schedule.h"

namespace cutrain {

void lr_schedule_step_cpu(const LrSchedule& schedule, int64_t* step, float* lr) {
  *lr = float(schedule.at(*step));
  *step += 1;
}

}  // namespace cutrain
