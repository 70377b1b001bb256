// cpu_threads.cpp: the thread count of cpu_threads.h.
#include "kernels/base/cpu_threads.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>

namespace cutrain {

namespace {

std::atomic<int>& thread_count() {
  static std::atomic<int> count{std::max(1, int(std::thread::hardware_concurrency()))};
  return count;
}

}  // namespace

int cpu_threads() { return thread_count().load(std::memory_order_relaxed); }

void set_cpu_threads(int count) {
  if (count < 1) throw std::invalid_argument("CPU threads: " + std::to_string(count) + " is not a positive count");
  thread_count().store(count, std::memory_order_relaxed);
}

}  // namespace cutrain
