#include "app/train_step.h"

#include <string>

#include "kernels/nvtx_range.h"
#include "nn/context.h"

namespace cutrain {

namespace {

std::vector<int64_t> padded_sizes(const ParameterSet& params) {
  std::vector<int64_t> sizes;  // with each parameter's alignment padding: buckets tile the buffer
  for (const Parameter* p : params.in_layout_order()) sizes.push_back(p->padded_numel);
  return sizes;
}

}  // namespace

TrainStep::TrainStep(ResNet18& model, Communicator* comm, const TrainStepOptions& options)
    : model_(model),
      comm_(comm),
      broadcast_buffers_(comm && options.broadcast_buffers),
      sgd_(std::make_unique<SGD>(model.context(), model.params(), options.sgd, options.schedule,
                                 comm ? SGD::Grads::gathered : SGD::Grads::as_written)),
      buckets_(plan_buckets(padded_sizes(model.params()), options.buckets)) {
  if (!comm) return;
  BucketHooks hooks;
  const Context& ctx = model.context();
  hooks.before = [this, &ctx](const Bucket& b) { model_.params().gather_grads(b.begin, b.end, ctx.stream); };
  hooks.after = [this](const Bucket& b, cudaStream_t stream) {
    NvtxRange range("optimizer");
    sgd_->update(b.begin, b.end, stream);
  };
  reducer_ = std::make_unique<GradReducer>(*comm, model.params().grads().as<float>(), padded_sizes(model.params()),
                                           options.buckets, std::move(hooks));
}

void TrainStep::run(bool collectives) {
  Context& ctx = model_.context();
  {
    NvtxRange range("optimizer");
    sgd_->begin_step(ctx.stream);
  }
  if (broadcast_buffers_ && collectives) {
    NvtxRange range("broadcast buffers");
    const Tensor buffers = model_.params().buffer_values();
    comm_->broadcast(buffers.as<float>(), size_t(buffers.numel()), 0);
  }
  {
    NvtxRange range("forward");
    model_.forward(true);
  }
  NvtxRange range("backward");
  if (reducer_ && collectives) {
    reducer_->begin_backward();
    model_.backward([this](int64_t ready_end) { reducer_->grads_ready(ready_end); });
    reducer_->finish();
  } else {
    next_bucket_ = 0;
    model_.backward([this](int64_t ready_end) { grads_ready(ready_end); });
    grads_ready(model_.params().numel());
    ctx.join();
  }
}

void TrainStep::grads_ready(int64_t ready_end) {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].end <= ready_end)
    update_beside(buckets_[next_bucket_++]);
}

// The bucket's parameters are final once the main stream's work so far is done: the side stream
// waits for that, then updates them while backward goes on on the main stream.
void TrainStep::update_beside(const Bucket& bucket) {
  Context& ctx = model_.context();
  NvtxRange range("optimizer");
  ctx.fork();
  OnSideStream side(ctx);
  sgd_->update(bucket.begin, bucket.end, ctx.stream);
}

}  // namespace cutrain
