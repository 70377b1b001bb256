#include "nn/context.h"

#include <stdexcept>

#include "kernels/base/check.h"
#include "kernels/base/device.h"

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

BatchNormImplementation parse_batchnorm(const std::string& name) {
  if (name == "cooperative") return BatchNormImplementation::cooperative;
  if (name == "split") return BatchNormImplementation::split;
  if (name == "cudnn") return BatchNormImplementation::cudnn;
  throw std::runtime_error("--batchnorm " + name + ": expected cooperative, split or cudnn");
}

Context::Context(const ContextOptions& opts) : options(opts) {
  if (!on_gpu()) {
    if (opts.dtype == DType::bf16) throw std::runtime_error("--precision bf16: needs --device cuda");
    return;
  }
  if (!cuda_available()) throw std::runtime_error(cuda_unavailable_reason());
  if (opts.streams != 1 && opts.streams != 2)
    throw std::runtime_error("--streams " + std::to_string(opts.streams) + ": expected 1 or 2");
  try {
    CUDA_CHECK(cudaSetDevice(opts.cuda_device));
    make_lane(main_);
    if (opts.streams == 2) make_lane(side_);
    CUBLAS_CHECK(cublasCreate(&cublas));
    CUBLAS_CHECK(cublasSetStream(cublas, main_.stream));
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

void Context::make_lane(Lane& lane) {
  CUDA_CHECK(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&lane.done, cudaEventDisableTiming));
  CUDNN_CHECK(cudnnCreate(&lane.cudnn));
  CUDNN_CHECK(cudnnSetStream(lane.cudnn, lane.stream));
}

// Destroys what exists and ignores errors, since nothing can be done about them here.
void Context::release() noexcept {
  if (cublas) cublasDestroy(cublas);
  for (Lane* lane : {&side_, &main_}) {
    if (lane->cudnn) cudnnDestroy(lane->cudnn);
    if (lane->done) cudaEventDestroy(lane->done);
    if (lane->stream) cudaStreamDestroy(lane->stream);
    *lane = Lane{};
  }
  cublas = nullptr;
}

void Context::synchronize() const {
  if (!on_gpu()) return;
  if (side_.stream) CUDA_CHECK(cudaStreamSynchronize(side_.stream));
  CUDA_CHECK(cudaStreamSynchronize(main_.stream));
}

}  // namespace cutrain
