#include "nn/cudnn_backend.h"

#include <utility>

#include "kernels/base/check.h"

namespace cutrain {

BackendDescriptor::BackendDescriptor(cudnnBackendDescriptorType_t type) {
  CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &descriptor_));
}

// A destructor cannot throw, and a descriptor that cuDNN fails to destroy leaves nothing to do.
BackendDescriptor::~BackendDescriptor() {
  if (descriptor_) (void)cudnnBackendDestroyDescriptor(descriptor_);
}

BackendDescriptor::BackendDescriptor(BackendDescriptor&& other) noexcept
    : descriptor_(std::exchange(other.descriptor_, nullptr)) {}

BackendDescriptor& BackendDescriptor::operator=(BackendDescriptor&& other) noexcept {
  if (this != &other) {
    if (descriptor_) (void)cudnnBackendDestroyDescriptor(descriptor_);
    descriptor_ = std::exchange(other.descriptor_, nullptr);
  }
  return *this;
}

BackendDescriptor& BackendDescriptor::set(cudnnBackendAttributeName_t name, const BackendDescriptor& other) {
  cudnnBackendDescriptor_t value = other.get();
  set_raw(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
  return *this;
}

int64_t BackendDescriptor::get_descriptors(cudnnBackendAttributeName_t name,
                                           const std::vector<BackendDescriptor>& into) const {
  std::vector<cudnnBackendDescriptor_t> raw;
  raw.reserve(into.size());
  for (const BackendDescriptor& d : into) raw.push_back(d.get());
  int64_t count = 0;
  get_raw(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(raw.size()), &count, raw.data());
  return count;
}

int64_t BackendDescriptor::count_descriptors(cudnnBackendAttributeName_t name) const {
  int64_t count = 0;
  get_raw(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
  return count;
}

void BackendDescriptor::finalize() { CUDNN_CHECK(cudnnBackendFinalize(descriptor_)); }

cudnnStatus_t BackendDescriptor::try_finalize() { return cudnnBackendFinalize(descriptor_); }

void BackendDescriptor::set_raw(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                                const void* values) {
  CUDNN_CHECK(cudnnBackendSetAttribute(descriptor_, name, type, count, values));
}

void BackendDescriptor::get_raw(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t capacity,
                                int64_t* count, void* values) const {
  CUDNN_CHECK(cudnnBackendGetAttribute(descriptor_, name, type, capacity, count, values));
}

}  // namespace cutrain
