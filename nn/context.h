// context.h: where and how a model runs. A Context names the device (cpu or cuda) and the dtype
// of activations. That is f32, or bf16 on the GPU, where the activations and the weight copies
// are bf16 and the master weights, statistics, logits and loss stay fp32. On the GPU it owns the
// two streams that layers enqueue on and the cuDNN and cuBLAS handles bound to them. There is one
// Context per process and device. Which work runs on which stream is Note [Side stream] in
// nn/resnet.cpp; fork() and join() hand work from one stream to the other.
//
// TF32 is off unless allow_tf32, so fp32 on the GPU matches the CPU reference to about 1e-6.
// With deterministic, convolutions use only engines whose results are reproducible bit for bit.
// With cudnn_benchmark, convolution engines are measured rather than predicted.
// The batch-norm choice picks which of the GPU's batch-norm implementations runs. The CPU has
// only its reference.
#pragma once

#include <stdexcept>
#include <string>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "kernels/base/check.h"
#include "nn/device_buffer.h"
#include "nn/tensor.h"

namespace cutrain {

// The GPU's batch norm: cutrain's kernels as one cooperative launch per pass, or as split
// launches that do not need every multiprocessor at once (Note [Split batch norm] in
// kernels/batchnorm.h), or cuDNN's own, as a yardstick.
enum class BatchNormImplementation { cooperative, split, cudnn };

struct ContextOptions {
  Device device = Device::cpu;
  DType dtype = DType::f32;  // activation dtype; bf16 needs Device::cuda
  bool allow_tf32 = false;
  bool deterministic = false;
  bool cudnn_benchmark = false;  // measure cuDNN's engines and keep them on disk
  BatchNormImplementation batchnorm = BatchNormImplementation::cooperative;
  // --fusion on: each basic block's bn1 and conv2 run as the fused unit bn-relu-conv (Note [The
  // fused unit bn-relu-conv] in nn/bn_relu_conv.h). The GPU's only; off leaves everything as it was.
  bool fusion = false;
  int streams = 2;  // with 1, the side stream is the main stream (Note [Side stream])
  int cuda_device = 0;
};

Device parse_device(const std::string& name);    // "cpu" / "cuda", else throws naming the value
DType parse_precision(const std::string& name);  // "fp32" / "bf16", else throws naming the value
// "cooperative" / "split" / "cudnn", else throws naming the value.
BatchNormImplementation parse_batchnorm(const std::string& name);
// cuDNN's data type for tensors of `dtype`.
inline cudnnDataType_t cudnn_type(DType dtype) { return dtype == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT; }

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

  // The two streams of Note [Side stream]. They are null on the CPU, and one and the same with
  // one stream.
  cudaStream_t main_stream() const { return main_.stream; }
  cudaStream_t side_stream() const { return options.streams == 2 ? side_.stream : main_.stream; }
  // The cuDNN handle bound to `stream`, one of the two.
  cudnnHandle_t cudnn(cudaStream_t stream) const {
    if (stream == main_.stream) return main_.cudnn;
    if (stream == side_.stream) return side_.cudnn;
    throw std::logic_error("Context::cudnn: the stream is not one of the context's");
  }
  cublasHandle_t cublas = nullptr;  // bound to the main stream

  void fork() { wait(side_, main_); }  // the side stream waits for the main stream's work so far
  void join() { wait(main_, side_); }  // the main stream waits for the side stream's work so far

  // cuBLAS's workspace, given to it up front so that it never allocates while a CUDA graph is
  // being captured (32 MiB: NVIDIA's recommendation for Hopper).
  static constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;

  // Waits for the work enqueued so far on both streams (a no-op on the CPU). Never called inside
  // a step.
  void synchronize() const;

 private:
  struct Lane {  // a stream and what is bound to it
    cudaStream_t stream = nullptr;
    cudnnHandle_t cudnn = nullptr;
    cudaEvent_t done = nullptr;  // recorded on the stream when the other waits for it
  };
  void make_lane(Lane& lane);
  // `waiter` waits for the work enqueued on `lane` so far: an event that `lane` records and
  // `waiter` waits for. A no-op on the CPU, and with one stream.
  void wait(const Lane& waiter, const Lane& lane) {
    if (!on_gpu() || options.streams == 1) return;
    CUDA_CHECK(cudaEventRecord(lane.done, lane.stream));
    CUDA_CHECK(cudaStreamWaitEvent(waiter.stream, lane.done, 0));
  }
  void release() noexcept;

  Lane main_, side_;
  DeviceBuffer cublas_workspace_;
};

}  // namespace cutrain
