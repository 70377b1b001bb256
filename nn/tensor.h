// tensor.h: a Tensor is a typed, shaped view of memory that someone else owns (the memory plan,
// the flat parameter buffer, a loader's ring). It never allocates or frees.
//
// Activations are NHWC on every device: shape {N, H, W, C}, C fastest. A [N, K] matrix is {N, K}.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace cutrain {

enum class Device { cpu, cuda };
enum class DType { f32, bf16, i32, u8 };  // i32: labels and counts; u8: bit masks

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);     // "f32" / "bf16" / "i32"

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  std::vector<int64_t> shape;

  Tensor() = default;
  Tensor(void* data, DType dtype, Device device, std::vector<int64_t> shape)
      : data(data), dtype(dtype), device(device), shape(std::move(shape)) {}

  int64_t numel() const;
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const { return shape.at(i < 0 ? shape.size() + i : i); }
  std::string shape_string() const;  // "[256, 32, 32, 64]"

  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// A value and the gradient of the loss with respect to it (grad empty: no gradient needed). The
// memory plan makes them, and it lets gradients share memory where their lifetimes allow.
struct Activation {
  Tensor value;
  Tensor grad;
};

// Synchronous copies between a tensor (on any device) and host memory, for set-up, checkpoints,
// benchmarks and tests; never inside a step (on the GPU they wait for the whole device). The
// first pair moves t.bytes() raw bytes; the
// second converts to and from fp32 on the host (bf16 rounds to nearest even).
void copy_to_host(const Tensor& t, void* host);
void copy_from_host(const void* host, const Tensor& t);
std::vector<float> read_floats(const Tensor& t);  // f32 or bf16 tensor
void write_floats(const std::vector<float>& values, const Tensor& t);

}  // namespace cutrain
