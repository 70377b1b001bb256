// device_buffer.h: owned memory on a device, and the synchronous copies that fill it and read it
// back when a model is built or saved, never inside a step.
#pragma once

#include <cstddef>
#include <vector>

#include "nn/tensor.h"

namespace cutrain {

// Every buffer starts at a multiple of this many bytes: cudaMalloc's guarantee, and a multiple of
// the cache line on the CPU. align_up rounds a size up to it.
constexpr size_t kBufferAlignment = 256;
inline size_t align_up(size_t n) { return (n + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment; }

// Owned bytes on a device: page-aligned host memory on the CPU, cudaMalloc on the GPU.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device device, size_t bytes);  // zero-filled
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  Device device_ = Device::cpu;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Fills `buffer` from host memory of its size, or host memory from it, synchronously.
void copy_bytes_from_host(const void* host, const DeviceBuffer& buffer);
void copy_bytes_to_host(const DeviceBuffer& buffer, void* host);

// A table that kernels read (the optimizer's segments, the parameters' copy lists), copied to
// `device` once, when a model is built.
template <typename T>
DeviceBuffer device_table(Device device, const std::vector<T>& table) {
  DeviceBuffer buffer(device, table.size() * sizeof(T));
  copy_bytes_from_host(table.data(), buffer);
  return buffer;
}

}  // namespace cutrain
