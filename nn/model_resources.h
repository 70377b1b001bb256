// model_resources.h: what the layers of one model share while it is built and run: the context,
// the memory plan of activations, the flat parameter set, and whether batch norm synchronises
// across ranks. Layers are constructed in forward order against one ModelResources (each plans
// its outputs and registers its parameters), then allocate() makes the memory real and
// initialises the parameters. The model itself, which runs the layers, is ResNet18.
#pragma once

#include <cstdint>
#include <functional>

#include "nn/context.h"
#include "nn/memory_plan.h"
#include "nn/parameters.h"

namespace cutrain {

// SyncBatchNorm: when set, batch norm sums its per-channel statistics (and in backward its
// gradient sums) across ranks between its stages with this all-reduce-sum callback, enqueued on
// the main stream. nn/ knows nothing of dist/, so the training step supplies the callback
// (app/train_step.h), which does nothing while the step rehearses a capture. Every rank must use
// the same batch size, since the global count is the batch's rows times world_size.
struct SyncBatchNorm {
  std::function<void(float* data, size_t count)> all_reduce_sum;
  int world_size = 1;
  bool enabled() const { return static_cast<bool>(all_reduce_sum); }
};

struct ModelResources {
  explicit ModelResources(Context& ctx) : ctx(ctx), plan(ctx.device()) {}
  ModelResources(const ModelResources&) = delete;
  ModelResources& operator=(const ModelResources&) = delete;

  Context& ctx;
  MemoryPlan plan;
  ParameterSet params;
  SyncBatchNorm sync_batchnorm;

  DType act_dtype() const { return ctx.dtype(); }
  void allocate(uint64_t seed) {
    plan.allocate();
    params.allocate(ctx.device(), ctx.dtype(), seed);
  }
};

}  // namespace cutrain
