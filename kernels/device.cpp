#include "kernels/device.h"

#include <cuda_runtime.h>

#include <cstdio>

namespace cutrain {

const std::string& cuda_unavailable_reason() {
  static const std::string reason = [] {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      cudaGetLastError();  // clear the sticky error so later queries start clean
      return "no CUDA device: " + std::string(cudaGetErrorString(err));
    }
    if (count == 0) return std::string("no CUDA device: the driver reports zero devices");
    return std::string();
  }();
  return reason;
}

std::string cuda_device_description(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "CUDA device " + std::to_string(device);
  char memory[32];
  std::snprintf(memory, sizeof memory, "%.1f GiB", prop.totalGlobalMem / double(1ull << 30));
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " + memory + ")";
}

}  // namespace cutrain
