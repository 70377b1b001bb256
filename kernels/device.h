// device.h: is there a usable CUDA device? Asked once per process, answered in one plain line.
//
// On a machine without a GPU or driver, cudaGetDeviceCount fails ("CUDA driver version is
// insufficient for CUDA runtime version"); cutrain reports that as
//   "no CUDA device: CUDA driver version is insufficient for CUDA runtime version"
// and the CPU path carries on. Nothing here throws.
#pragma once

#include <string>

namespace cutrain {

// Empty when at least one CUDA device can be used; otherwise why not, starting "no CUDA device: ".
const std::string& cuda_unavailable_reason();

inline bool cuda_available() { return cuda_unavailable_reason().empty(); }

// "NVIDIA H200 (sm_90, 139.8 GiB)" for the given device; assumes cuda_available().
std::string cuda_device_description(int device);

}  // namespace cutrain
