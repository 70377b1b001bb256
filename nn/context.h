// context.h: where and how a model runs. A Context names the device (cpu or cuda), the dtype of
// activations (f32, or bf16 on the GPU: bf16 activations and weight copies, fp32 master weights,
// statistics, logits and loss), and on the GPU owns the one compute stream every layer enqueues
// on and the cuDNN and cuBLAS handles bound to it. One Context per process and device.
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

  // GPU only (null on the CPU).
  cudaStream_t stream = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;

  // cuBLAS's workspace, given to it up front so that it never allocates while a CUDA graph is
  // being captured (32 MiB: NVIDIA's recommendation for Hopper).
  static constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;

  // Waits for the work enqueued so far (a no-op on the CPU). Never called inside a step.
  void synchronize() const;

 private:
  void release() noexcept;

  DeviceBuffer cublas_workspace_;
};

}  // namespace cutrain
