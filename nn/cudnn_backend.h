// cudnn_backend.h: one descriptor of cuDNN's backend (graph) API, cudnn_graph.h's
// cudnnBackendDescriptor_t, owned: created in the constructor and destroyed with the object.
// Setting, getting and finalizing go through CUDNN_CHECK, so a call that cuDNN rejects throws a
// CudnnError naming it. The one exception is try_finalize(), for the places where cuDNN declining a
// configuration (an engine that does not run this graph, say) is an answer and not an error.
//
//   BackendDescriptor tensor(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
//   tensor.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, int64_t{1});
//   tensor.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, std::vector<int64_t>{n, c, h, w});
//   tensor.finalize();
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <vector>

namespace cutrain {

class BackendDescriptor {
 public:
  explicit BackendDescriptor(cudnnBackendDescriptorType_t type);
  ~BackendDescriptor();
  BackendDescriptor(BackendDescriptor&& other) noexcept;
  BackendDescriptor& operator=(BackendDescriptor&& other) noexcept;
  BackendDescriptor(const BackendDescriptor&) = delete;
  BackendDescriptor& operator=(const BackendDescriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return descriptor_; }

  // Sets attribute `name` to one value, or to the values of a vector, of cuDNN's type `type`.
  template <typename T>
  BackendDescriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T& value) {
    set_raw(name, type, 1, &value);
    return *this;
  }
  template <typename T>
  BackendDescriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                         const std::vector<T>& values) {
    set_raw(name, type, int64_t(values.size()), values.data());
    return *this;
  }
  // Sets a descriptor-valued attribute to `other`.
  BackendDescriptor& set(cudnnBackendAttributeName_t name, const BackendDescriptor& other);

  // Reads attribute `name`, one value of type `type` into `value`.
  template <typename T>
  void get(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, T& value) const {
    int64_t count = 0;
    get_raw(name, type, 1, &count, &value);
  }
  // Reads up to `capacity` values of attribute `name`; returns as many as cuDNN gave.
  template <typename T>
  std::vector<T> get_all(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t capacity) const {
    std::vector<T> values(static_cast<size_t>(capacity));
    int64_t count = 0;
    get_raw(name, type, capacity, &count, values.data());
    values.resize(size_t(count < capacity ? count : capacity));
    return values;
  }
  // Fills `into`, descriptors the caller created of the attribute's type, with the descriptors
  // that attribute `name` holds; returns how many it holds (at most into.size() are filled).
  int64_t get_descriptors(cudnnBackendAttributeName_t name, const std::vector<BackendDescriptor>& into) const;
  // How many descriptors attribute `name` holds.
  int64_t count_descriptors(cudnnBackendAttributeName_t name) const;

  void finalize();
  // Finalizes, and returns cuDNN's status instead of throwing.
  cudnnStatus_t try_finalize();

 private:
  void set_raw(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values);
  void get_raw(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t capacity, int64_t* count,
               void* values) const;

  cudnnBackendDescriptor_t descriptor_ = nullptr;
};

}  // namespace cutrain
