#include "kernels/base/device.h"

#include <cuda_runtime.h>

#include <cstdio>

namespace cutrain {
namespace {

// "13.0" for CUDA's integer version 13000.
std::string cuda_version(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

}  // namespace

const std::string& cuda_unavailable_reason() {
  static const std::string reason = [] {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      cudaGetLastError();  // clear the sticky error so later queries start clean
      // The runtime says "driver version is insufficient" when there is no driver at all; the
      // driver's own version, 0 without one, tells the two cases apart.
      int driver = 0, runtime = 0;
      cudaDriverGetVersion(&driver);
      cudaRuntimeGetVersion(&runtime);
      if (driver == 0) return std::string("no CUDA device: no NVIDIA driver was found on this machine");
      if (err == cudaErrorInsufficientDriver)
        return "no CUDA device: the NVIDIA driver supports CUDA " + cuda_version(driver) +
               ", and this build needs CUDA " + cuda_version(runtime) + " (a newer driver)";
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
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " + memory +
         ")";
}

// The datasheets give bf16 with structured sparsity; the dense figure is half of it. An H200 has an
// H100 SXM's compute. The first entry whose words the name holds wins, so the PCIe and NVL forms
// come before the plain "H100".
double peak_tflops_of(const std::string& gpu_name, bool bf16) {
  struct Peak {
    const char* words[2];
    double bf16, fp32;
  };
  static constexpr Peak kPeaks[] = {
      {{"H200", ""}, 989.0, 67.0}, {{"H100", "PCIe"}, 756.0, 51.0}, {{"H100", "NVL"}, 835.0, 60.0},
      {{"H100", ""}, 989.0, 67.0}, {{"A100", ""}, 312.0, 19.5},
  };
  for (const Peak& p : kPeaks)
    if (gpu_name.find(p.words[0]) != std::string::npos && gpu_name.find(p.words[1]) != std::string::npos)
      return bf16 ? p.bf16 : p.fp32;
  return 0;
}

double cuda_peak_tflops(int device, bool bf16) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return 0;
  return peak_tflops_of(prop.name, bf16);
}

}  // namespace cutrain
