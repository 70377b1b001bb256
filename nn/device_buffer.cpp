// device_buffer.cpp: DeviceBuffer's memory, and its copies to and from the host.
#include "nn/device_buffer.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include <cuda_runtime.h>

#include "kernels/base/check.h"

namespace cutrain {

DeviceBuffer::DeviceBuffer(Device device, size_t bytes) : device_(device), bytes_(bytes) {
  if (bytes == 0) return;
  if (device == Device::cuda) {
    CUDA_CHECK(cudaMalloc(&data_, bytes));
    CUDA_CHECK(cudaMemset(data_, 0, bytes));
    CUDA_CHECK(cudaDeviceSynchronize());  // done before any stream of ours touches it
  } else {
    data_ = std::aligned_alloc(kBufferAlignment, align_up(bytes));
    if (!data_) throw std::runtime_error("out of host memory allocating " + std::to_string(bytes) + " bytes");
    std::memset(data_, 0, bytes);
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (!data_) return;
  if (device_ == Device::cuda) {
    cudaFree(data_);  // no throwing from a destructor
  } else {
    std::free(data_);
  }
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_(other.device_), data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  std::swap(device_, other.device_);
  std::swap(data_, other.data_);
  std::swap(bytes_, other.bytes_);
  return *this;
}

void copy_bytes_from_host(const void* host, const DeviceBuffer& buffer) {
  if (buffer.bytes() == 0) return;
  if (buffer.device() == Device::cpu) {
    std::memcpy(buffer.data(), host, buffer.bytes());
  } else {
    CUDA_CHECK(cudaMemcpy(buffer.data(), host, buffer.bytes(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());  // before a kernel on a non-blocking stream reads it
  }
}

void copy_bytes_to_host(const DeviceBuffer& buffer, void* host) {
  if (buffer.bytes() == 0) return;
  if (buffer.device() == Device::cpu) {
    std::memcpy(host, buffer.data(), buffer.bytes());
  } else {
    CUDA_CHECK(cudaDeviceSynchronize());  // whichever stream wrote it
    CUDA_CHECK(cudaMemcpy(host, buffer.data(), buffer.bytes(), cudaMemcpyDeviceToHost));
  }
}

}  // namespace cutrain
