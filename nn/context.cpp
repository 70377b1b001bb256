#include "nn/context.h"

#include <stdexcept>

#include "kernels/check.h"
#include "kernels/device.h"
#include "kernels/recording.h"

namespace cutrain {

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::cpu;
  if (name == "cuda") return Device::cuda;
  throw std::runtime_error("--device " + name + ": expected cpu or cuda");
}

DType parse_precision(const std::string& name) {
  if (name == "fp32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  throw std::runtime_error("--precision " + name + ": expected fp32 or bf16");
}

Context::Context(const ContextOptions& opts) : options(opts) {
  if (!on_gpu()) {
    if (opts.dtype == DType::bf16) throw std::runtime_error("--precision bf16: needs --device cuda");
    return;
  }
  if (planning()) {  // no device: the stream is a name, and there are no library handles
    planning_ = true;
    stream = recording()->make_stream("main");
    return;
  }
  if (!cuda_available()) throw std::runtime_error(cuda_unavailable_reason());
  try {
    CUDA_CHECK(cudaSetDevice(opts.cuda_device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDNN_CHECK(cudnnCreate(&cudnn));
    CUDNN_CHECK(cudnnSetStream(cudnn, stream));
    CUBLAS_CHECK(cublasCreate(&cublas));
    CUBLAS_CHECK(cublasSetStream(cublas, stream));
    // fp32 products stay fp32 (no TF32) unless asked for.
    CUBLAS_CHECK(cublasSetMathMode(cublas, opts.allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    cublas_workspace_ = DeviceBuffer(Device::cuda, kCublasWorkspaceBytes);
    CUBLAS_CHECK(cublasSetWorkspace(cublas, cublas_workspace_.data(), cublas_workspace_.bytes()));
  } catch (...) {
    release();  // a constructor that throws gets no destructor
    throw;
  }
}

Context::~Context() { release(); }

// Destroys what exists, ignoring errors: nothing can be done about them here.
void Context::release() noexcept {
  if (planning_) return;
  if (cublas) cublasDestroy(cublas);
  if (cudnn) cudnnDestroy(cudnn);
  if (stream) cudaStreamDestroy(stream);
  cublas = nullptr;
  cudnn = nullptr;
  stream = nullptr;
}

void Context::synchronize() const {
  if (on_gpu() && !planning_) CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace cutrain
