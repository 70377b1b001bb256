#include "app/train_step.h"

#include <stdexcept>
#include <string>

#include "kernels/base/nvtx_range.h"
#include "nn/context.h"

namespace cutrain {

namespace {

// Each parameter's size with its alignment padding, so that the buckets tile the flat buffer.
std::vector<int64_t> padded_sizes(const ParameterSet& params) {
  std::vector<int64_t> sizes;
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
      buckets_(plan_buckets(padded_sizes(model.params()), options.buckets)) {}

// Note [The step], stage by stage.
void TrainStep::run(Collectives collectives) {
  Context& ctx = model_.context();
  const bool all_reduce = comm_ && collectives == Collectives::with;
  {
    NvtxRange range("optimizer");
    sgd_->begin_step(ctx.main_stream());
  }
  if (broadcast_buffers_ && all_reduce) {
    NvtxRange range("broadcast buffers");
    const Tensor buffers = model_.params().buffer_values();
    comm_->broadcast(buffers.as<float>(), size_t(buffers.numel()), 0);
  }
  {
    NvtxRange range("forward");
    model_.forward(/*train=*/true, collectives);
  }
  NvtxRange range("backward");
  size_t next = 0;  // the first bucket not yet reduced and updated
  const auto grads_ready = [&](int64_t ready_end) {
    for (; next < buckets_.size() && buckets_[next].end <= ready_end; ++next)
      reduce_then_update(buckets_[next], all_reduce);
  };
  model_.backward(grads_ready, collectives);
  if (next != buckets_.size()) throw std::logic_error("backward did not report every gradient final");
  if (all_reduce) {
    comm_->wait_async();
  } else {
    ctx.join();
  }
}

// The bucket's gradients are final once the main stream's work so far is done.
void TrainStep::reduce_then_update(const Bucket& bucket, bool all_reduce) {
  Context& ctx = model_.context();
  if (!all_reduce) {
    // The side stream waits for that, then updates the parameters while backward goes on.
    NvtxRange range("optimizer");
    ctx.fork();
    sgd_->update(bucket.begin, bucket.end, ctx.side_stream());
    return;
  }
  // The all-reduce also starts after that work, and SGD follows it on the communicator's queue.
  // The average is taken in fp32, as DDP's under autocast is, so the gradients are gathered first.
  NvtxRange range(("all-reduce bucket " + std::to_string(&bucket - buckets_.data())).c_str());
  ParameterSet& params = model_.params();
  params.gather_grads(bucket.begin, bucket.end, ctx.main_stream());
  comm_->all_reduce_async(params.grads().as<float>() + bucket.begin, size_t(bucket.end - bucket.begin),
                          ReduceOp::average, [this, &bucket](cudaStream_t queue) {
                            NvtxRange range("optimizer");
                            sgd_->update(bucket.begin, bucket.end, queue);
                          });
}

}  // namespace cutrain
