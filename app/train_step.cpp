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

// Note [The step]
// ~~~~~~~~~~~~~~~
// The batch is already in the model's input. Then, on every rank at once:
//   1. lr:        this step's learning rate, computed on the device from its step counter.
//   2. buffers:   with several ranks and without --sync-bn, batch norm's running statistics are
//                 broadcast from rank 0, as DDP's broadcast_buffers does.
//   3. forward:   ResNet-18 and the softmax cross-entropy loss.
//   4. backward:  gradients into the flat buffer, one layer at a time from the last
//                 (Note [ResNet-18's layer table] in nn/resnet.cpp). After each layer, every
//                 bucket whose gradients are now all final goes out, in bucket order, while
//                 backward goes on:
//                   one rank:  SGD for the bucket's parameters, on the side stream;
//                   several:   the bucket's gradients gathered into the fp32 buffer on the main
//                              stream, then on the communicator's stream the bucket's all-reduce
//                              (an average over the ranks) and right behind it SGD for its
//                              parameters.
//   5. join:      the main stream waits for the side stream, or for the communicator's stream,
//                 so that the next step sees every update. On the CPU, where Gloo's all-reduces
//                 run on a thread of their own and have no stream to queue SGD behind, SGD runs
//                 here, bucket by bucket, once the all-reduces are done.
// With --clip-grad-norm, every update needs the norm of the whole gradient, after the ranks'
// average, so stage 4 sends the buckets' all-reduces out as above but updates nothing, and stage 5
// is, on the main stream once every all-reduce is done (torchvision's clip_grad_norm_ between
// backward and optimizer.step()):
//   5. clip:      the gradient's total norm and from it the clip factor, on the device, into
//                 device memory (SGD::clip_grad_norm);
//      update:    SGD for every parameter, in one launch, on the gradients times that factor.
// Every rank issues the same collectives in the same order, which is what keeps the ranks'
// queues in step. Everything is enqueued, and nothing allocates or waits for the device, so on
// the GPU the step can be captured once as a CUDA graph and replayed.
//
// With one rank the buckets are planned all the same (1 MiB first, then --bucket-cap-mb, with the
// parameters in backward order), but there they only group the optimizer's launches. There is one
// launch per bucket (three for ResNet-18) rather than one per parameter (62), each right after the
// bucket's last gradient rather than after the whole backward. Which work runs on which stream is
// Note [Side stream] in nn/resnet.cpp. NVTX ranges name the parts of the step for Nsight Systems.
//
// On the GPU, TrainStep::run also captures the step as a CUDA graph and replays it: Note [The
// step's graph] below.
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

// Note [The step's graph]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A ResNet-18 step is a few hundred kernel launches; replaying them as one graph takes the CPU's
// launch cost off the critical path. The step must be static (same pointers, no allocation, no
// host synchronisation), which the memory plan guarantees. The first `warmup` calls run eagerly
// (cuDNN and NCCL finish their lazy set-up), the next one captures and launches, the rest replay.
//
// The step's host code runs whenever the step function runs, which is on eager calls, while
// capturing, and while rehearsing (below), so on one call it may run twice or not at all.
// Bookkeeping that must count steps, such as batch norm's num_batches_tracked, belongs after
// TrainStep::run, once, which is where the trainer keeps it.
//
// If capturing fails, the reason is printed once and every later step runs eagerly. The call
// that failed runs its step eagerly too, so the device sees each step once. With several ranks
// (`ranks` given), a capture that fails after a collective was captured could leave the ranks'
// collective sequences out of step, so the decision comes first. Every rank rehearses the
// capture with its collectives left out (the step is called with rehearsal = true, captured and
// thrown away), and then all agree, in one all-reduce over `ranks` of the rehearsals that
// failed. If any failed, all fall back to eager steps, with no collective captured. If all succeeded, the
// real capture follows. Should that one still fail (in NCCL's own capture), replay() throws, since
// no rank can tell whether the others' collectives are still in step.
//
// Note [Graph node priorities]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A graph launches its nodes at the priority of the stream it is launched on, unless it was
// instantiated with cudaGraphInstantiateFlagUseNodePriority: then each kernel node keeps the
// priority of the stream it was captured from. The communicator's stream has the greatest priority
// (dist/ddp/nccl_communicator.h), so that a bucket's all-reduce starts as soon as its gradients are
// ready; without the flag, the replay would lose that.

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
