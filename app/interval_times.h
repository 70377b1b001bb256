// interval_times.h: the times between marks on a stream, for the benches. On the GPU each mark is
// a CUDA event recorded on the stream, and the times are read once the device has run past the
// last mark, so the host never waits between marks; on the CPU, where every call has finished
// when it returns, each mark reads the clock. `bench-step` marks around each step, and
// `bench-step --layers` around each layer's forward and backward (app/bench/layer_bench.h).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "kernels/base/check.h"

namespace cutrain {

class IntervalTimes {
 public:
  // Room for `marks` marks: the events are made here, none while marking.
  IntervalTimes(bool gpu, cudaStream_t stream, int marks) : gpu_(gpu), stream_(stream), events_(gpu ? marks : 0) {
    for (cudaEvent_t& event : events_) CUDA_CHECK(cudaEventCreate(&event));
    host_.reserve(marks);
  }
  ~IntervalTimes() {
    for (cudaEvent_t event : events_) cudaEventDestroy(event);
  }
  IntervalTimes(const IntervalTimes&) = delete;
  IntervalTimes& operator=(const IntervalTimes&) = delete;

  void mark() {
    if (gpu_) {
      CUDA_CHECK(cudaEventRecord(events_[marks_], stream_));
    } else {
      host_.push_back(std::chrono::steady_clock::now());
    }
    ++marks_;
  }
  // Once the device has run past the last mark: the milliseconds from each mark to the next.
  std::vector<double> milliseconds() const {
    std::vector<double> ms;
    for (int i = 1; i < marks_; ++i) {
      if (gpu_) {
        float elapsed = 0;
        CUDA_CHECK(cudaEventElapsedTime(&elapsed, events_[i - 1], events_[i]));
        ms.push_back(elapsed);
      } else {
        ms.push_back(std::chrono::duration<double, std::milli>(host_[i] - host_[i - 1]).count());
      }
    }
    return ms;
  }

 private:
  bool gpu_;
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
  std::vector<std::chrono::steady_clock::time_point> host_;
  int marks_ = 0;
};

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace cutrain
