#include "nn/tensor.h"

namespace cutrain {

size_t dtype_size(DType dtype) { return dtype == DType::f32 ? 4 : 2; }
const char* device_name(Device device) { return device == Device::cpu ? "cpu" : "cuda"; }
const char* dtype_name(DType dtype) { return dtype == DType::f32 ? "f32" : "bf16"; }

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string Tensor::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace cutrain
