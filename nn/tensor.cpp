#include "nn/tensor.h"

#include <cstring>
#include <stdexcept>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/base/check.h"

namespace cutrain {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::u8: return 1;
  }
  return 4;
}
const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::u8: return "u8";
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

// The model's stream does not synchronise with cudaMemcpy's default stream, so the GPU copies
// wait for the whole device before and after: correct whatever stream wrote or reads the tensor.
void copy_to_host(const Tensor& t, void* host) {
  if (t.device == Device::cuda) {
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(host, t.data, t.bytes(), cudaMemcpyDeviceToHost));
  } else {
    std::memcpy(host, t.data, t.bytes());
  }
}

void copy_from_host(const void* host, const Tensor& t) {
  if (t.device == Device::cuda) {
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(t.data, host, t.bytes(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());
  } else {
    std::memcpy(t.data, host, t.bytes());
  }
}

std::vector<float> read_floats(const Tensor& t) {
  std::vector<float> out(size_t(t.numel()));
  if (t.dtype == DType::f32) {
    copy_to_host(t, out.data());
  } else if (t.dtype == DType::bf16) {
    std::vector<__nv_bfloat16> raw(out.size());
    copy_to_host(t, raw.data());
    for (size_t i = 0; i < out.size(); ++i) out[i] = __bfloat162float(raw[i]);
  } else {
    throw std::logic_error(std::string("read_floats: a ") + dtype_name(t.dtype) + " tensor");
  }
  return out;
}

void write_floats(const std::vector<float>& values, const Tensor& t) {
  if (int64_t(values.size()) != t.numel())
    throw std::logic_error("write_floats: size differs from " + t.shape_string());
  if (t.dtype == DType::f32) {
    copy_from_host(values.data(), t);
  } else if (t.dtype == DType::bf16) {
    std::vector<__nv_bfloat16> raw(values.size());
    for (size_t i = 0; i < raw.size(); ++i) raw[i] = __float2bfloat16(values[i]);
    copy_from_host(raw.data(), t);
  } else {
    throw std::logic_error(std::string("write_floats: a ") + dtype_name(t.dtype) + " tensor");
  }
}

}  // namespace cutrain
