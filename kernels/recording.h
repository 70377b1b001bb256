// recording.h: the GPU work of a training step written down instead of done, so that
// `cutrain bench-step --plan` can list what one step launches on a machine without a GPU.
//
// While a Recorder is installed on a thread (RecordingScope), the GPU work that thread enqueues
// goes to the recorder: every kernel launch (launch_kernel in kernels/launch.cuh, with the bytes
// the launcher says it moves), memset (memset_async), cuDNN and cuBLAS call (run_or_record, with
// its FLOPs), collective, and every wait of one stream for another. Because the step's own code
// runs -- layers, optimizer, reducer -- the inventory is the step's, not a table kept beside it.
//
// A Recorder that plans (Mode::plan) also stands in for the device, as PyTorch's meta tensors
// do: nothing runs, device memory is fake addresses (256-byte aligned, like cudaMalloc's, never
// dereferenced), copies to and from the host do nothing, and streams are names. A Recorder that
// observes (Mode::observe) lets everything run as usual and writes it down too (tests compare
// the two).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cutrain {

// The bytes a kernel's threads read and write in all, each element counted once.
struct Traffic {
  int64_t read = 0;
  int64_t written = 0;
};

struct RecordedOp {
  enum class Kind {
    kernel,      // a custom kernel (kernels/*.cu)
    library,     // a cuDNN or cuBLAS call (one or more kernels of the library's own)
    collective,  // an NCCL (or, on the CPU, Gloo) collective
    memset,
    memcpy,
    wait,        // `stream` waits for the work enqueued on `waits_for` so far: no work, no node
    host_wait,   // the host waits for the device (a synchronisation, a copy to or from the host)
  };
  Kind kind = Kind::kernel;
  std::string name;                // "bn_apply_kernel", "cudnnConvolutionForward", "ncclAllReduce"
  std::string detail;              // the shape of a library call, the size of a collective
  const void* function = nullptr;  // a custom kernel: the function launched
  Traffic bytes;
  double flops = 0;
  cudaStream_t stream = nullptr;
  cudaStream_t waits_for = nullptr;
  std::string phase;               // the innermost NVTX range it was enqueued in (kernels/nvtx_range.h)
};

class Recorder {
 public:
  enum class Mode { plan, observe };
  explicit Recorder(Mode mode = Mode::plan) : mode_(mode) {}

  bool plans() const { return mode_ == Mode::plan; }
  const std::vector<RecordedOp>& ops() const { return ops_; }
  void clear() { ops_.clear(); }
  void add(RecordedOp op);

  // Planning: a fake device allocation of `bytes`; a stream, known by its name.
  void* allocate(size_t bytes);
  cudaStream_t make_stream(const std::string& name);
  // The name given to `stream` ("main", "side", "comm"), or "stream <n>" for one not made here.
  std::string stream_name(cudaStream_t stream) const;

  // The NVTX ranges open now (kernels/nvtx_range.h pushes and pops them).
  void push_phase(const char* name) { phases_.emplace_back(name); }
  void pop_phase() {
    if (!phases_.empty()) phases_.pop_back();
  }

 private:
  Mode mode_;
  std::vector<RecordedOp> ops_;
  std::vector<std::string> phases_;
  std::vector<std::string> stream_names_;  // fake stream i + 1 is stream_names_[i]
  uintptr_t next_address_ = uintptr_t(1) << 44;  // far from anything real, for a reader of a dump
};

// The recorder installed on this thread, or null: the GPU work is done as usual.
Recorder* recording();
// Whether this thread plans: a recorder in Mode::plan is installed (nothing reaches a device).
bool planning();

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

// cuDNN and cuBLAS calls: records `op` (kind library, on `stream`) when recording, and makes the
// call unless planning.
//   run_or_record(stream, {.name = "cudnnConvolutionForward", .flops = ...}, [&] { CUDNN_CHECK(...); });
template <typename Call>
void run_or_record(cudaStream_t stream, RecordedOp op, Call&& call) {
  if (Recorder* r = recording()) {
    op.kind = RecordedOp::Kind::library;
    op.stream = stream;
    r->add(std::move(op));
    if (r->plans()) return;
  }
  call();
}

// Records that the host waits for the device here; true when planning (there is no device to
// wait for).
bool record_host_wait(const char* what);

// cudaMemsetAsync and cudaMemcpyAsync, recorded.
void memset_async(void* pointer, int value, size_t bytes, cudaStream_t stream);
void memcpy_async(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);

}  // namespace cutrain
