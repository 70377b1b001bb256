#include "app/device_choice.h"

#include <algorithm>
#include <iterator>
#include <stdexcept>

#include "app/train_options.h"
#include "kernels/base/device.h"
#include "nn/context.h"

namespace cutrain {

Device resolve_device(const std::string& flag) {
  if (flag == "cpu") return Device::cpu;
  if (flag == "cuda" && !cuda_available()) throw std::runtime_error("--device cuda: " + cuda_unavailable_reason());
  return cuda_available() ? Device::cuda : Device::cpu;
}

DType resolve_precision(const std::string& flag, Device device) {
  if (flag.empty()) return device == Device::cuda ? DType::bf16 : DType::f32;
  const DType dtype = parse_precision(flag);
  if (dtype == DType::bf16 && device == Device::cpu)
    throw std::runtime_error("--precision bf16 needs a GPU: the CPU reference computes in fp32");
  return dtype;
}

void refuse_gpu_flags_on_cpu(const std::vector<std::string>& given, Device device) {
  if (device != Device::cpu) return;
  for (const std::string& flag : given)
    if (std::find(std::begin(kGpuOnlyFlags), std::end(kGpuOnlyFlags), flag) != std::end(kGpuOnlyFlags))
      throw std::runtime_error(flag + ": needs a GPU (this run is on the CPU)");
}

int cuda_device_for_rank(const DistEnv& env, int visible) {
  if (env.from_slurm && visible >= 1 && visible < env.local_world_size) return 0;
  if (env.local_rank < visible) return env.local_rank;
  throw std::runtime_error(std::string(env.from_slurm ? "SLURM_LOCALID=" : "LOCAL_RANK=") +
                           std::to_string(env.local_rank) + " but this machine has " + std::to_string(visible) +
                           " CUDA device(s)");
}

}  // namespace cutrain
