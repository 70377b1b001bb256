// The memory plan: one arena, every planned tensor inside it, gradients sharing bytes only when
// their lifetimes (nn/memory_plan.h) do not overlap.
#include <catch2/catch.hpp>

#include <cstdint>
#include <set>

#include "nn/memory_plan.h"

using namespace cutrain;

namespace {

bool bytes_overlap(const Tensor& a, const Tensor& b) {
  auto begin = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data); };
  return begin(a) < begin(b) + b.bytes() && begin(b) < begin(a) + a.bytes();
}

}  // namespace

TEST_CASE("Gradients share memory only when their lifetimes are disjoint", "[nn]") {
  // A chain with a residual: a1 = f(a0), a2 = g(a1), a3 = h(a2, a0).
  // Gradient lifetimes: a0 [0, 3], a1 [1, 2], a2 [2, 3], a3 [3, 3]: only a1 and a3 are disjoint.
  MemoryPlan plan(Device::cpu);
  Activation& a0 = plan.activation(DType::f32, {4, 8});
  Activation& a1 = plan.activation(DType::f32, {4, 8});
  plan.reads(a0);
  Activation& a2 = plan.activation(DType::f32, {4, 8});
  plan.reads(a1);
  Activation& a3 = plan.activation(DType::f32, {4, 8});
  plan.reads(a2);
  plan.reads(a0);
  Tensor& stats = plan.tensor(DType::f32, {8});
  plan.reserve_workspace(1000);
  plan.allocate();

  const Activation* all[] = {&a0, &a1, &a2, &a3};
  const int first[] = {0, 1, 2, 3}, last[] = {3, 2, 3, 3};
  for (int i = 0; i < 4; ++i) {
    for (int j = i + 1; j < 4; ++j) {
      INFO("gradients of a" << i << " and a" << j);
      const bool lifetimes_overlap = first[i] <= last[j] && first[j] <= last[i];
      if (lifetimes_overlap) CHECK_FALSE(bytes_overlap(all[i]->grad, all[j]->grad));
    }
    for (const Activation* other : all) CHECK_FALSE(bytes_overlap(all[i]->grad, other->value));
    CHECK_FALSE(bytes_overlap(all[i]->grad, stats));
  }
  CHECK(a3.grad.data == a1.grad.data);  // the one disjoint pair shares
  // So the four 128-byte gradients, each 256-aligned, take three slots side by side.
  std::set<const char*> slots;
  for (const Activation* a : all) slots.insert(static_cast<const char*>(a->grad.data));
  REQUIRE(slots.size() == 3);
  CHECK(*slots.rbegin() - *slots.begin() == 2 * 256);
  // The arena is the two workspaces, those three slots and the five tensors planned for the whole
  // step (the four values and stats), each rounded up to 256 bytes, and nothing more.
  CHECK(plan.bytes() == 2 * 1024 + 3 * 256 + 5 * 256);
  // Everything lies inside the arena, after the two streams' workspaces.
  auto* base = static_cast<char*>(plan.workspace(false));
  CHECK(static_cast<char*>(plan.workspace(true)) >= base + 1000);
  for (const Tensor* t : {&a0.value, &a3.value, &a2.grad, &stats}) {
    CHECK(static_cast<char*>(t->data) >= static_cast<char*>(plan.workspace(true)) + 1000);
    CHECK(static_cast<char*>(t->data) + t->bytes() <= base + plan.bytes());
  }
}
