// device.h: is there a usable CUDA device? Asked once per process, answered in one plain line.
//
// On a machine without a GPU or driver, cudaGetDeviceCount fails, and cutrain reports why in one
// line that names the cause: "no CUDA device: no NVIDIA driver was found on this machine", or the
// driver's and the build's CUDA versions when the driver is too old. The CPU path carries on.
// Nothing here throws.
#pragma once

#include <string>

namespace cutrain {

// Empty when at least one CUDA device can be used; otherwise why not, starting "no CUDA device: ".
const std::string& cuda_unavailable_reason();

inline bool cuda_available() { return cuda_unavailable_reason().empty(); }

// "NVIDIA H200 (sm_90, 139.8 GiB)" for the given device; assumes cuda_available().
std::string cuda_device_description(int device);

// The dense peak TFLOP/s of a data-center GPU known by its name (cudaDeviceProp::name): on the
// tensor cores in bf16, or on the fp32 cores, since TF32 is off in fp32. 0 for a GPU not known.
double peak_tflops_of(const std::string& gpu_name, bool bf16);
// The same for the given device; assumes cuda_available().
double cuda_peak_tflops(int device, bool bf16);

}  // namespace cutrain
