// device_buffer.h: what the [gpu] parity tests share. A device array that frees itself and starts
// poisoned (every byte 0xFF: NaN as float and as bf16, so an element a kernel forgot to write
// shows up as NaN); copies between it and host vectors of float, converting to and from the
// activation type T; inputs rounded to T, so the CPU reference sees exactly what the GPU sees;
// and the relative error that the parity tests bound.
#pragma once

#include <catch2/catch.hpp>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "kernels/base/check.h"
#include "kernels/numeric.cuh"

namespace cutrain::test {

template <typename T>
class PoisonedBuffer {
 public:
  explicit PoisonedBuffer(size_t n) : size_(n) {
    CUDA_CHECK(cudaMalloc(&data_, bytes()));
    CUDA_CHECK(cudaMemset(data_, 0xFF, bytes()));
    CUDA_CHECK(cudaDeviceSynchronize());  // before a kernel on a non-blocking stream writes it
  }
  explicit PoisonedBuffer(const std::vector<T>& host) : PoisonedBuffer(host.size()) { copy_from(host); }
  ~PoisonedBuffer() { cudaFree(data_); }
  PoisonedBuffer(const PoisonedBuffer&) = delete;
  PoisonedBuffer& operator=(const PoisonedBuffer&) = delete;

  T* get() const { return data_; }
  size_t size() const { return size_; }

  void copy_from(const std::vector<T>& host) {
    REQUIRE(host.size() == size_);
    CUDA_CHECK(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());  // a pageable upload may still be landing
  }
  // Waits for the device, so a kernel's error surfaces here rather than in a later test.
  std::vector<T> copy_to_host() const {
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> host(size_);
    CUDA_CHECK(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  size_t bytes() const { return sizeof(T) * size_; }
  T* data_ = nullptr;
  size_t size_;
};

// Activations: float vectors on the host, T on the device.
template <typename T>
std::vector<T> convert_to(const std::vector<float>& values) {
  std::vector<T> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = from_float<T>(values[i]);
  return out;
}

template <typename T>
std::vector<float> to_floats(const std::vector<T>& values) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = to_float(values[i]);
  return out;
}

template <typename T>
std::vector<float> download(const PoisonedBuffer<T>& buffer) {
  return to_floats(buffer.copy_to_host());
}

// The values as T holds them (identity for float), for the CPU reference's inputs.
template <typename T>
std::vector<float> rounded_to(const std::vector<float>& values) {
  return to_floats(convert_to<T>(values));
}

// ||a - b|| / ||b||, in double; NaN (a poisoned element left unwritten) fails every bound.
inline double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff) / std::sqrt(norm);
}

// The bound on relative_error for activations of type T: fp32 agrees to rounding of the
// summation order; bf16 keeps 8 significant bits (relative rounding 2^-9 per value).
template <typename T>
constexpr double parity_tolerance() {
  return std::is_same_v<T, float> ? 1e-4 : 2e-2;
}

}  // namespace cutrain::test
