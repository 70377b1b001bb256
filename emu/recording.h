// recording.h: the record of what a training step launches, which `cutrain bench-step --plan`
// (emu/plan/step_plan.h) lists and sums. The emulated device writes it (Note [Record-only device] in
// emu/runtime.h): while a Recorder is installed on a thread (RecordingScope), the emulated
// CUDA runtime, cuDNN and cuBLAS write down every kernel launch (with the bytes its launcher
// declares, kernels/launch.cuh), memset, copy, library call (with the FLOPs and bytes its
// descriptors imply), wait of one stream for another and wait of the host for the device that the
// thread makes, each under the innermost NVTX range open then. Nothing else in the program knows
// that it is being recorded, and the GPU build has no such device.
//
// An installed Recorder makes the emulated device record-only, as PyTorch's meta device stands in
// for a real one. Nothing runs, device memory is addresses that are never dereferenced, and the
// device presents an H200's multiprocessors.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <utility>
#include <vector>

#include "kernels/traffic.h"

namespace cutrain {

struct RecordedOp {
  enum class Kind {
    kernel,      // a custom kernel (kernels/*.cu)
    library,     // a cuDNN or cuBLAS call (one or more kernels of the library's own)
    collective,  // an NCCL collective
    memset,
    memcpy,
    wait,       // `stream` waits for the work enqueued on `waits_for` so far: no work, no node
    host_wait,  // the host waits for the device (a synchronisation, a copy to or from the host)
  };
  Kind kind = Kind::kernel;
  std::string name;                // "bn_apply_kernel", "cudnnConvolutionForward", "ncclAllReduce"
  std::string detail;              // a kernel's launch, the shape of a library call
  const void* function = nullptr;  // a custom kernel: the function launched
  Traffic bytes;
  double flops = 0;
  cudaStream_t stream = nullptr;
  cudaStream_t waits_for = nullptr;
  std::string phase;  // the innermost NVTX range it was enqueued in (kernels/base/nvtx_range.h)
};

class Recorder {
 public:
  const std::vector<RecordedOp>& ops() const { return ops_; }
  void clear() { ops_.clear(); }
  void add(RecordedOp op);

  // Names `stream` ("main", "side", "comm") in stream_name; "unnamed" for a stream never named.
  void name_stream(cudaStream_t stream, std::string name) { stream_names_.emplace_back(stream, std::move(name)); }
  std::string stream_name(cudaStream_t stream) const;

  // The NVTX ranges open now (the emulated nvtxRangePushA and nvtxRangePop keep them).
  void push_phase(const char* name) { phases_.emplace_back(name); }
  void pop_phase() {
    if (!phases_.empty()) phases_.pop_back();
  }

 private:
  std::vector<RecordedOp> ops_;
  std::vector<std::string> phases_;
  std::vector<std::pair<cudaStream_t, std::string>> stream_names_;
};

// The recorder installed on this thread, or null.
Recorder* recording();

// For the emulated device: writes `op` down when a recorder is installed, and says whether it did.
bool record(RecordedOp op);

// Installs `recorder` on this thread for the scope's life (scopes nest).
class RecordingScope {
 public:
  explicit RecordingScope(Recorder& recorder);
  ~RecordingScope();
  RecordingScope(const RecordingScope&) = delete;
  RecordingScope& operator=(const RecordingScope&) = delete;

 private:
  Recorder* previous_;
};

}  // namespace cutrain
