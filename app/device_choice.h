// device_choice.h: --device and --precision, as `train` and `eval` take them, checked against
// this machine: auto means a GPU when there is one; the precision defaults to bf16 on a GPU and
// fp32 on the CPU (the CPU reference computes in fp32 only). Errors are one line naming the flag.
#pragma once

#include <string>
#include <vector>

#include "dist/launch/env.h"
#include "nn/tensor.h"

namespace cutrain {

Device resolve_device(const std::string& flag);                   // "auto" | "cuda" | "cpu"
DType resolve_precision(const std::string& flag, Device device);  // "" | "fp32" | "bf16"
// Throws one line for the first of the flags `given` (those the command line set) that only a GPU run reads
// (kGpuOnlyFlags), when the run is on the CPU.
void refuse_gpu_flags_on_cpu(const std::vector<std::string>& given, Device device);

// This rank's CUDA device among the `visible` ones: LOCAL_RANK, as under torchrun. Under srun,
// Slurm may give each task GPUs of its own (--gpus-per-task, --gpu-bind) through
// CUDA_VISIBLE_DEVICES: a task started by Slurm that sees fewer devices than its node has tasks
// takes its first. Throws one line when the device does not exist.
int cuda_device_for_rank(const DistEnv& env, int visible);

}  // namespace cutrain
