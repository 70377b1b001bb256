// context.h: where and how a model runs. A Context names the device (cpu or cuda), the dtype of
// activations (f32, or bf16 on the GPU: bf16 activations and weight copies, fp32 master weights,
// statistics, logits and loss), and on the GPU owns the streams the layers enqueue on and the
// cuDNN and cuBLAS handles bound to them. One Context per process and device.
//
// Two streams. Everything runs on the main stream but what can run beside it: the weight-gradient
// convolutions (nn/conv2d.h) and the downsample convolution of a block (nn/basic_block.h) go to the
// side stream, forked from the main one and joined back with events -- in an eager step as in a
// captured one, where the events become the graph's edges:
//
//   ctx.fork();                          // the side stream waits for the main stream's work so far
//   { OnSideStream side(ctx); ... }      // layers enqueue on the side stream (ctx.stream, ctx.cudnn)
//   ...                                  // meanwhile, more work on the main stream
//   ctx.join();                          // the main stream waits for the side stream's work so far
//
// as PyTorch's `with torch.cuda.stream(side):` and wait_stream. cuBLAS runs on the main stream only,
// and each stream has its own cuDNN handle and workspace (nn/memory_plan.h).
//
// TF32: off unless allow_tf32, so fp32 on the GPU matches the CPU reference to ~1e-6.
// deterministic: convolutions use only algorithms whose results are reproducible bit for bit.
// cudnn_benchmark: convolution algorithms measured rather than predicted (nn/conv_algorithms.h).
#pragma once

#include <string>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "nn/memory_plan.h"
#include "nn/tensor.h"

namespace cutrain {

struct ContextOptions {
  Device device = Device::cpu;
  DType dtype = DType::f32;  // activation dtype; bf16 needs Device::cuda
  bool allow_tf32 = false;
  bool deterministic = false;
  bool cudnn_benchmark = false;  // measure cuDNN's algorithms and keep them on disk (nn/conv_algorithms.h)
  int cuda_device = 0;
};

Device parse_device(const std::string& name);     // "cpu" / "cuda", else throws naming the value
DType parse_precision(const std::string& name);   // "fp32" / "bf16", else throws naming the value

class Context {
 public:
  // Throws std::runtime_error("no CUDA device: ...") for Device::cuda on a machine without one.
  explicit Context(const ContextOptions& options);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const ContextOptions options;
  Device device() const { return options.device; }
  DType dtype() const { return options.dtype; }
  bool on_gpu() const { return options.device == Device::cuda; }

  // GPU only (null on the CPU). `stream` and `cudnn` are where layers enqueue now: the main
  // stream's, or the side stream's inside an OnSideStream scope.
  cudaStream_t stream = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;  // bound to the main stream

  cudaStream_t main_stream() const { return main_.stream; }
  bool on_side_stream() const { return stream != nullptr && stream == side_.stream; }
  void fork();  // the side stream waits for the main stream's work so far (a no-op on the CPU)
  void join();  // the main stream waits for the side stream's work so far

  // cuBLAS's workspace, given to it up front so that it never allocates while a CUDA graph is
  // being captured (32 MiB: NVIDIA's recommendation for Hopper).
  static constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;

  // Waits for the work enqueued so far on both streams (a no-op on the CPU). Never called inside
  // a step.
  void synchronize() const;

 private:
  friend class OnSideStream;
  struct Lane {  // a stream and what is bound to it
    cudaStream_t stream = nullptr;
    cudnnHandle_t cudnn = nullptr;
    cudaEvent_t done = nullptr;  // recorded on the stream when the other waits for it
  };
  void make_lane(Lane& lane);
  void enter(const Lane& lane) {
    stream = lane.stream;
    cudnn = lane.cudnn;
  }
  // `waiter` waits for the work enqueued on `lane` so far.
  void wait(const Lane& waiter, const Lane& lane);
  void release() noexcept;

  Lane main_, side_;
  DeviceBuffer cublas_workspace_;
};

// For its life, layers enqueue on the context's side stream (unless `enabled` is false; a no-op
// on the CPU).
class OnSideStream {
 public:
  explicit OnSideStream(Context& ctx, bool enabled = true) : ctx_(ctx), entered_(enabled && ctx.on_gpu()) {
    if (entered_) ctx.enter(ctx.side_);
  }
  ~OnSideStream() {
    if (entered_) ctx_.enter(ctx_.main_);
  }
  OnSideStream(const OnSideStream&) = delete;
  OnSideStream& operator=(const OnSideStream&) = delete;

 private:
  Context& ctx_;
  bool entered_;
};

}  // namespace cutrain
