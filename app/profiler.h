// profiler.h: --profile-steps A:B, which brackets steps A to B (0-based, both included) with
// cudaProfilerStart and cudaProfilerStop, so that Nsight Systems records those steps only:
//
//   nsys profile --capture-range=cudaProfilerApi --cuda-graph-trace=node cutrain train ... --profile-steps 100:104
//
// The steps are named inside by NVTX ranges (data, forward, backward, each bucket's all-reduce,
// the optimizer: kernels/base/nvtx_range.h).
#pragma once

#include <cstdint>
#include <string>

namespace cutrain {

struct StepRange {
  int64_t first = -1, last = -1;  // none
  bool empty() const { return first < 0; }
  bool contains(int64_t step) const { return !empty() && step >= first && step <= last; }
};

// "A:B" with 0 <= A <= B; throws std::runtime_error naming --profile-steps and what is wrong.
StepRange parse_step_range(const std::string& text);

// Call around each step: the profiler starts before the first step of the range and stops after
// its last. Needs a GPU (the constructor says so in one line otherwise).
class StepProfiler {
 public:
  StepProfiler(StepRange range, bool on_gpu);
  ~StepProfiler();  // stops a profiler the run left started (a run stopped inside the range)
  void before_step(int64_t step);
  void after_step(int64_t step);

 private:
  StepRange range_;
  bool started_ = false;
};

}  // namespace cutrain
