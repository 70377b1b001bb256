#include "nn/tensor.h"

namespace cutrain {

size_t dtype_size(DType dtype) { return dtype == DType::bf16 ? 2 : 4; }
const char* device_name(Device device) { return device == Device::cpu ? "cpu" : "cuda"; }
const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
  }
  return "?";
}

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
