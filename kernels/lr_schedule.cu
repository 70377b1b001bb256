// lr_schedule.cu: the device's step of lr_schedule.h, one thread.
#include "kernels/lr_schedule.h"

#include "kernels/launch.cuh"

namespace cutrain {

namespace {

// lr = schedule.at(step); step += 1
__global__ void lr_schedule_step_kernel(LrSchedule schedule, int64_t* step, float* lr) {
  *lr = float(schedule.at(*step));
  *step += 1;
}

}  // namespace

void lr_schedule_step_cuda(const LrSchedule& schedule, int64_t* step, float* lr, cudaStream_t stream) {
  const Traffic bytes{bytes_of<int64_t>(1), bytes_of<int64_t>(1) + bytes_of<float>(1)};
  launch_kernel({"lr_schedule_step_kernel", bytes}, lr_schedule_step_kernel, 1, 1, 0, stream, schedule, step, lr);
}

}  // namespace cutrain
