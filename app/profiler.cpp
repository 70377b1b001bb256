#include "app/profiler.h"

#include <cuda_profiler_api.h>

#include <cstdio>
#include <stdexcept>

#include "kernels/base/check.h"

namespace cutrain {

StepRange parse_step_range(const std::string& text) {
  long long first = 0, last = 0;
  int end = 0;
  if (std::sscanf(text.c_str(), "%lld:%lld%n", &first, &last, &end) != 2 || end != int(text.size()))
    throw std::runtime_error("--profile-steps " + text + ": expected A:B, two step numbers");
  if (first < 0 || last < first) throw std::runtime_error("--profile-steps " + text + ": expected 0 <= A <= B");
  return {first, last};
}

StepProfiler::StepProfiler(StepRange range, bool on_gpu) : range_(range) {
  if (!range.empty() && !on_gpu) throw std::runtime_error("--profile-steps: needs a GPU (the CUDA profiler API)");
}

StepProfiler::~StepProfiler() {
  if (started_) cudaProfilerStop();
}

void StepProfiler::before_step(int64_t step) {
  if (step != range_.first || started_) return;
  CUDA_CHECK(cudaProfilerStart());
  started_ = true;
}

void StepProfiler::after_step(int64_t step) {
  if (step != range_.last || !started_) return;
  CUDA_CHECK(cudaProfilerStop());
  started_ = false;
}

}  // namespace cutrain
