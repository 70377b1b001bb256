#include "app/device_choice.h"

#include <stdexcept>

#include "kernels/device.h"
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

}  // namespace cutrain
