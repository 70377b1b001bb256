// nvtx_range.h: a named range of the host's timeline for Nsight Systems (NVTX, header-only, from
// the CUDA toolkit), open for the life of the object:
//
//   { NvtxRange range("backward"); model.backward(...); }
//
// The trainer names the parts of a step with them: data, forward, backward, each bucket's
// all-reduce, the optimizer (app/train_step.h). Nsight shows the GPU work each range enqueued
// beside it; for a step replayed from a CUDA graph, trace the graph's nodes
// (`nsys profile --cuda-graph-trace=node`) or run with --cuda-graphs off. Without a profiler
// attached a range costs a function call. On the emulated device the step's inventory listens
// (emu/recording.h): it files each operation under the innermost range open when it was enqueued.
#pragma once

#include <nvtx3/nvToolsExt.h>

namespace cutrain {

class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace cutrain
