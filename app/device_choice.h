// device_choice.h: --device and --precision, as `train` and `eval` take them, checked against
// this machine: auto means a GPU when there is one; the precision defaults to bf16 on a GPU and
// fp32 on the CPU (the CPU reference computes in fp32 only). Errors are one line naming the flag.
#pragma once

#include <string>

#include "nn/tensor.h"

namespace cutrain {

Device resolve_device(const std::string& flag);                   // "auto" | "cuda" | "cpu"
DType resolve_precision(const std::string& flag, Device device);  // "" | "fp32" | "bf16"

}  // namespace cutrain
