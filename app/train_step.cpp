#include "app/train_step.h"

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
      clip_grad_norm_(options.clip_grad_norm),
      sgd_(std::make_unique<SGD>(model.context(), model.params(), options.sgd, options.schedule,
                                 comm ? SGD::Grads::gathered : SGD::Grads::as_written)),
      buckets_(plan_buckets(padded_sizes(model.params()), options.buckets)) {
  if (comm && options.sync_batchnorm) {
    model.set_sync_batchnorm({[this](float* data, size_t count) {
                                if (collectives_) comm_->all_reduce(data, count, ReduceOp::sum);
                              },
                              comm->world_size()});
  }
}

// Note [The step], stage by stage.
void TrainStep::enqueue(bool collectives) {
  Context& ctx = model_.context();
  collectives_ = collectives;
  const bool all_reduce = comm_ && collectives;
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
    model_.forward(/*train=*/true);
  }
  NvtxRange range("backward");
  const bool clip = clip_grad_norm_ > 0;  // then every update waits for the whole gradient's norm
  size_t next = 0;                        // the first bucket not yet sent out
  for (int layer = int(model_.layers().size()) - 1; layer >= 0; --layer) {
    model_.backward_layer(layer);
    for (; next < buckets_.size() && buckets_[next].end <= model_.grads_final_end(layer); ++next) {
      if (clip) {
        if (all_reduce) reduce(buckets_[next]);
      } else if (all_reduce) {
        reduce_then_update(buckets_[next]);
      } else {
        update(buckets_[next]);
      }
    }
  }
  if (clip) return clip_then_update(all_reduce);
  if (!all_reduce) return ctx.join();
  comm_->wait_async();
  if (ctx.on_gpu()) return;
  NvtxRange optimizer("optimizer");
  for (const Bucket& bucket : buckets_) sgd_->update(bucket.begin, bucket.end, nullptr);
}

// The bucket's gradients are final once the main stream's work so far is done. The side stream
// waits for that, then updates the parameters while backward goes on.
void TrainStep::update(const Bucket& bucket) {
  NvtxRange range("optimizer");
  Context& ctx = model_.context();
  ctx.fork();
  sgd_->update(bucket.begin, bucket.end, ctx.side_stream());
}

// The all-reduce also starts after that work. The average is taken in fp32, as DDP's under
// autocast is, so the gradients are gathered first.
void TrainStep::reduce(const Bucket& bucket) {
  NvtxRange range(("all-reduce bucket " + std::to_string(&bucket - buckets_.data())).c_str());
  ParameterSet& params = model_.params();
  params.gather_grads(bucket.begin, bucket.end, model_.context().main_stream());
  comm_->all_reduce_async(params.grads().as<float>() + bucket.begin, size_t(bucket.end - bucket.begin),
                          ReduceOp::average);
}

// On the GPU SGD follows the all-reduce on the communicator's stream.
void TrainStep::reduce_then_update(const Bucket& bucket) {
  reduce(bucket);
  if (!model_.context().on_gpu()) return;
  NvtxRange optimizer("optimizer");
  sgd_->update(bucket.begin, bucket.end, comm_->comm_stream());
}

// Every gradient is final (averaged) once the main stream has waited for the all-reduces, or, with
// one rank, once backward's work on it is done. There the norm and its clip factor are computed,
// then every parameter is updated in one launch.
void TrainStep::clip_then_update(bool all_reduce) {
  NvtxRange range("optimizer");
  Context& ctx = model_.context();
  if (all_reduce) comm_->wait_async();
  sgd_->clip_grad_norm(clip_grad_norm_, ctx.main_stream());
  sgd_->update(0, model_.params().numel(), ctx.main_stream());
}

}  // namespace cutrain
