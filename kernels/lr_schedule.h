// lr_schedule.h: the learning rate of each step computed where SGD reads it, from a step counter
// in the same memory, so that no step waits for the host to set it (and a CUDA graph replays with
// the right rate at every step):
//
//   lr = schedule.at(*step);  *step += 1
//
// One thread on the GPU, before the step's first update; the CPU twin does the same on the host.
// The schedule's formula is kernels/lr_schedule.cuh, the one the host logs.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/lr_schedule.cuh"

namespace cutrain {

void lr_schedule_step_cpu(const LrSchedule& schedule, int64_t* step, float* lr);
void lr_schedule_step_cuda(const LrSchedule& schedule, int64_t* step, float* lr, cudaStream_t stream);

}  // namespace cutrain
