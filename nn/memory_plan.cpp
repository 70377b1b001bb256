#include "nn/memory_plan.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace cutrain {

Tensor& MemoryPlan::tensor(DType dtype, std::vector<int64_t> shape) {
  if (allocated()) throw std::logic_error("MemoryPlan::tensor after allocate()");
  Tensor& t = tensors_.emplace_back(nullptr, dtype, device_, std::move(shape));
  planned_.push_back(&t);
  return t;
}

Activation& MemoryPlan::activation(DType dtype, std::vector<int64_t> shape, bool with_grad) {
  if (allocated()) throw std::logic_error("MemoryPlan::activation after allocate()");
  const int number = int(activations_.size());
  Activation& a = activations_.emplace_back();
  a.value = Tensor(nullptr, dtype, device_, shape);
  planned_.push_back(&a.value);
  if (with_grad) {
    a.grad = Tensor(nullptr, dtype, device_, std::move(shape));
    gradients_.push_back({&a.grad, number, number});
  }
  return a;
}

void MemoryPlan::reads(const Activation& input) {
  if (allocated() || activations_.empty()) throw std::logic_error("MemoryPlan::reads out of order");
  const int reader = int(activations_.size()) - 1;
  for (GradientSpan& g : gradients_) {
    if (g.grad == &input.grad) g.last = std::max(g.last, reader);
  }
}

Tensor& MemoryPlan::constant(std::vector<int64_t> shape, float value) {
  Tensor& t = tensor(DType::f32, std::move(shape));
  constants_.emplace_back(&t, value);
  return t;
}

void MemoryPlan::reserve_workspace(size_t bytes) {
  if (allocated()) throw std::logic_error("MemoryPlan::reserve_workspace after allocate()");
  workspace_bytes_ = std::max(workspace_bytes_, bytes);
}

// Greedy by size (as TensorFlow Lite's arena planner): the largest gradient first, each at the
// lowest offset where it overlaps no gradient already placed whose lifetime overlaps its own.
size_t MemoryPlan::pack_gradients() {
  std::vector<GradientSpan*> order;
  for (GradientSpan& g : gradients_) order.push_back(&g);
  std::stable_sort(order.begin(), order.end(),
                   [](const GradientSpan* a, const GradientSpan* b) { return a->grad->bytes() > b->grad->bytes(); });
  std::vector<GradientSpan*> placed;
  size_t region = 0;
  for (GradientSpan* g : order) {
    std::vector<GradientSpan*> live;  // placed gradients alive at the same time, by offset
    for (GradientSpan* p : placed) {
      if (p->first <= g->last && g->first <= p->last) live.push_back(p);
    }
    std::sort(live.begin(), live.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    const size_t size = align_up(g->grad->bytes());
    size_t offset = 0;
    for (const GradientSpan* p : live) {
      if (offset + size <= p->offset) break;  // fits in the gap below p
      offset = std::max(offset, p->offset + align_up(p->grad->bytes()));
    }
    g->offset = offset;
    placed.push_back(g);
    region = std::max(region, offset + size);
  }
  return region;
}

void MemoryPlan::allocate() {
  if (allocated()) throw std::logic_error("MemoryPlan::allocate called twice");
  const size_t gradient_bytes = pack_gradients();
  const size_t workspaces = 2 * align_up(workspace_bytes_);
  size_t total = workspaces + gradient_bytes;
  for (const Tensor* t : planned_) total += align_up(t->bytes());
  arena_ = DeviceBuffer(device_, std::max<size_t>(total, kBufferAlignment));
  auto* base = static_cast<char*>(arena_.data());
  workspace_ = workspace_bytes_ ? base : nullptr;
  side_workspace_ = workspace_bytes_ ? base + align_up(workspace_bytes_) : nullptr;
  char* gradients = base + workspaces;
  for (GradientSpan& g : gradients_) g.grad->data = gradients + g.offset;
  size_t offset = workspaces + gradient_bytes;
  for (Tensor* t : planned_) {
    t->data = base + offset;
    offset += align_up(t->bytes());
  }
  for (auto [t, value] : constants_) {
    std::vector<float> host(t->numel(), value);
    copy_from_host(host.data(), *t);
  }
}

}  // namespace cutrain
