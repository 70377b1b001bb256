#include "emu/recording.h"

namespace cutrain {
namespace {

thread_local Recorder* installed = nullptr;

}  // namespace

Recorder* recording() { return installed; }

bool record(RecordedOp op) {
  if (!installed) return false;
  installed->add(std::move(op));
  return true;
}

RecordingScope::RecordingScope(Recorder& recorder) : previous_(installed) { installed = &recorder; }
RecordingScope::~RecordingScope() { installed = previous_; }

void Recorder::add(RecordedOp op) {
  if (!phases_.empty()) op.phase = phases_.back();
  ops_.push_back(std::move(op));
}

std::string Recorder::stream_name(cudaStream_t stream) const {
  for (const auto& [named, name] : stream_names_)
    if (named == stream) return name;
  return "unnamed";
}

}  // namespace cutrain
