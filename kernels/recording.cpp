#include "kernels/recording.h"

#include "kernels/check.h"

namespace cutrain {
namespace {

thread_local Recorder* installed = nullptr;

constexpr size_t kAlignment = 256;  // cudaMalloc's

}  // namespace

Recorder* recording() { return installed; }
bool planning() { return installed && installed->plans(); }

RecordingScope::RecordingScope(Recorder& recorder) : previous_(installed) { installed = &recorder; }
RecordingScope::~RecordingScope() { installed = previous_; }

void Recorder::add(RecordedOp op) {
  if (!phases_.empty()) op.phase = phases_.back();
  ops_.push_back(std::move(op));
}

void* Recorder::allocate(size_t bytes) {
  void* address = reinterpret_cast<void*>(next_address_);
  next_address_ += (bytes + kAlignment - 1) / kAlignment * kAlignment + kAlignment;  // a gap between buffers
  return address;
}

cudaStream_t Recorder::make_stream(const std::string& name) {
  stream_names_.push_back(name);
  return reinterpret_cast<cudaStream_t>(uintptr_t(stream_names_.size()));
}

std::string Recorder::stream_name(cudaStream_t stream) const {
  const auto index = reinterpret_cast<uintptr_t>(stream);
  if (index >= 1 && index <= stream_names_.size()) return stream_names_[index - 1];
  return "stream " + std::to_string(index);
}

bool record_host_wait(const char* what) {
  Recorder* r = recording();
  if (!r) return false;
  RecordedOp op;
  op.kind = RecordedOp::Kind::host_wait;
  op.name = what;
  r->add(std::move(op));
  return r->plans();
}

void memset_async(void* pointer, int value, size_t bytes, cudaStream_t stream) {
  if (Recorder* r = recording()) {
    RecordedOp op;
    op.kind = RecordedOp::Kind::memset;
    op.name = "memset";
    op.bytes.written = int64_t(bytes);
    op.stream = stream;
    r->add(std::move(op));
    if (r->plans()) return;
  }
  CUDA_CHECK(cudaMemsetAsync(pointer, value, bytes, stream));
}

void memcpy_async(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (Recorder* r = recording()) {
    RecordedOp op;
    op.kind = RecordedOp::Kind::memcpy;
    op.name = "memcpy";
    op.bytes = {int64_t(bytes), int64_t(bytes)};
    op.stream = stream;
    r->add(std::move(op));
    if (r->plans()) return;
  }
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
}

}  // namespace cutrain
