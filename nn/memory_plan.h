// memory_plan.h: static memory. A model is built in two phases. First every layer asks the plan
// for the tensors it will need (activations, their gradients, statistics, scratch) and for its
// largest workspace; then allocate() makes ONE arena on the device and points every planned
// tensor into it. Nothing is allocated afterwards, so a training step can be captured and
// replayed as a CUDA graph.
//
// Planned tensors live as long as the plan and never move: layers keep references to them.
// Each activation pairs its value with a gradient (not beside it in memory: see below); the first
// layer to reach the gradient in backward writes it with = and residual branches add into it
// (cuDNN's beta = 1).
//
// Gradients share memory when their lifetimes do not overlap. Activations are numbered in the
// order they are planned, which is forward order, and backward visits the layers that made them
// in the reverse order. The gradient of activation k is written in backward by the last layer
// that reads k and read for the last time by the layer that made k, so it lives over the
// numbers [k, last reader] and any two gradients with disjoint spans can share bytes. (The
// loss writes the logits' gradient during forward, when no other gradient is in use.) Values,
// statistics and scratch live for the whole step. Activation gradients are backward's own
// scratch: once it is over, only the last ones written (the earliest layers') still hold theirs.
#pragma once

#include <cstddef>
#include <deque>
#include <utility>
#include <vector>

#include "nn/device_buffer.h"
#include "nn/tensor.h"

namespace cutrain {

class MemoryPlan {
 public:
  explicit MemoryPlan(Device device) : device_(device) {}
  MemoryPlan(const MemoryPlan&) = delete;
  MemoryPlan& operator=(const MemoryPlan&) = delete;

  Tensor& tensor(DType dtype, std::vector<int64_t> shape);
  Activation& activation(DType dtype, std::vector<int64_t> shape, bool with_grad = true);
  // Declares that the layer which planned the latest activation reads `input` (and so writes
  // its gradient in backward). Every layer calls it for each of its inputs.
  void reads(const Activation& input);
  // A planned fp32 tensor that allocate() fills with `value` (e.g. a vector of ones).
  Tensor& constant(std::vector<int64_t> shape, float value);
  // A workspace per stream (see Note [Side stream]), shared by the layers that run on it, since
  // one operation runs at a time on a stream. Each is as large as the largest request.
  void reserve_workspace(size_t bytes);

  void allocate();  // once, after every request; zero-fills the arena, then sets the constants
  bool allocated() const { return arena_.data() != nullptr; }
  size_t bytes() const { return arena_.bytes(); }
  void* workspace(bool side_stream) const { return side_stream ? side_workspace_ : workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  Device device_;
  std::deque<Tensor> tensors_;
  std::deque<Activation> activations_;
  // The lifetime of a gradient, in activation numbers (see the note above).
  struct GradientSpan {
    Tensor* grad;
    int first, last;
    size_t offset = 0;  // within the gradient region
  };
  size_t pack_gradients();  // sets every offset; returns the region's size

  std::vector<Tensor*> planned_;  // values, statistics, scratch: live for the whole step
  std::vector<GradientSpan> gradients_;
  std::vector<std::pair<Tensor*, float>> constants_;
  size_t workspace_bytes_ = 0;
  void* workspace_ = nullptr;
  void* side_workspace_ = nullptr;
  DeviceBuffer arena_;
};

}  // namespace cutrain
