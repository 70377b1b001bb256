#include "app/train_step.h"

#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/base/check.h"
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

TrainStep::TrainStep(ResNet18& model, Communicator* comm, const TrainStepOptions& options,
                     std::unique_ptr<GraphCapture> capture)
    : model_(model),
      comm_(comm),
      broadcast_buffers_(comm && options.broadcast_buffers),
      clip_grad_norm_(options.clip_grad_norm),
      sgd_(std::make_unique<SGD>(model.context(), model.params(), options.sgd, options.schedule,
                                 comm ? SGD::Grads::gathered : SGD::Grads::as_written)),
      buckets_(plan_buckets(padded_sizes(model.params()), options.buckets)),
      graph_(std::make_unique<StepGraph>(std::move(capture), /*warmup=*/1, comm)) {
  if (comm && options.sync_batchnorm) {
    model.set_sync_batchnorm({[this](float* data, size_t count) {
                                if (collectives_) comm_->all_reduce(data, count, ReduceOp::sum);
                              },
                              comm->world_size()});
  }
}

TrainStep::~TrainStep() = default;

void TrainStep::run() {
  graph_->replay([this](bool rehearsal) { enqueue(/*collectives=*/!rehearsal); });
}

std::string TrainStep::graph_status() const { return graph_->status(); }

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

// Note [The step's graph], and StepGraph that carries it out.

namespace {

class CudaGraphCapture final : public GraphCapture {
 public:
  CudaGraphCapture(cudaStream_t stream, Communicator* comm) : stream_(stream), comm_(comm) {}
  ~CudaGraphCapture() override {
    if (exec_) cudaGraphExecDestroy(exec_);
  }

  // The thread-local mode lets other threads (NCCL's watchdog, the loader's) keep calling CUDA.
  void begin() override { CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal)); }

  std::string end() override {
    cudaGraph_t graph = nullptr;
    std::string failure;
    const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
    if (ended != cudaSuccess) failure = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(ended);
    if (exec_) cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
    if (failure.empty()) {
      const cudaError_t made = cudaGraphInstantiate(&exec_, graph, cudaGraphInstantiateFlagUseNodePriority);
      if (made != cudaSuccess) failure = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(made);
    }
    if (graph) cudaGraphDestroy(graph);
    if (!failure.empty()) {
      cudaGetLastError();  // clear the capture's error; the stream is usable again
      exec_ = nullptr;
    }
    return failure;
  }

  void launch() override {
    CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
    if (comm_) comm_->watch_replay(stream_);
  }

 private:
  cudaStream_t stream_;
  Communicator* comm_;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace

std::unique_ptr<GraphCapture> cuda_graph_capture(cudaStream_t stream, Communicator* comm) {
  return std::make_unique<CudaGraphCapture>(stream, comm);
}

StepGraph::StepGraph(std::unique_ptr<GraphCapture> capture, int warmup, Communicator* ranks)
    : capture_(std::move(capture)), warmup_(warmup), ranks_(ranks) {}

void StepGraph::replay(const Step& step) {
  if (replaying_) return capture_->launch();
  if (!capture_ || !failure_.empty() || calls_++ < warmup_) return step(/*rehearsal=*/false);
  if (ranks_) {  // with several ranks, decide before any collective is captured
    std::string rehearsal = capture(step, /*rehearsal=*/true);
    if (!every_rank_ok(rehearsal.empty()) && rehearsal.empty()) rehearsal = "another rank's capture failed";
    if (!rehearsal.empty()) {
      fall_back(rehearsal);
      return step(/*rehearsal=*/false);
    }
  }
  const std::string failure = capture(step, /*rehearsal=*/false);
  if (failure.empty()) {
    replaying_ = true;
    return capture_->launch();
  }
  if (ranks_)
    throw std::runtime_error("CUDA graph capture failed after every rank's rehearsal succeeded (" + failure +
                             "); the ranks' collectives may be out of step: run with --cuda-graphs off");
  fall_back(failure);
  step(/*rehearsal=*/false);
}

std::string StepGraph::capture(const Step& step, bool rehearsal) {
  capture_->begin();
  std::string failure;
  try {
    step(rehearsal);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  const std::string ended = capture_->end();  // always, since the stream must leave capture mode
  return failure.empty() ? ended : failure;
}

bool StepGraph::every_rank_ok(bool ok) const {
  double failed = ok ? 0.0 : 1.0;
  ranks_->all_reduce_host(&failed, 1, ReduceOp::sum);
  return failed == 0.0;
}

void StepGraph::fall_back(const std::string& why) {
  failure_ = why;
  std::fprintf(stderr, "cutrain: warning: CUDA graph capture failed, running steps eagerly: %s\n", why.c_str());
}

std::string StepGraph::status() const {
  if (!failure_.empty()) return "off (capture failed: " + failure_ + ")";
  return capture_ ? "on" : "off";
}

}  // namespace cutrain
