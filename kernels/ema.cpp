// ema.cpp: the CPU twin of ema.h, element by element in blocks on the threads of cpu_threads.h.
#include "kernels/ema.h"

#include <algorithm>

#include "kernels/base/cpu_threads.h"
#include "kernels/ema.cuh"

namespace cutrain {

namespace {

constexpr int64_t kBlock = 16384;  // elements per task on the CPU threads

void update(const EmaArrays& a, float decay, float rest, bool copy) {
  parallel_for((a.numel + kBlock - 1) / kBlock, [&](int64_t block) {
    const int64_t end = std::min(a.numel, (block + 1) * kBlock);
    for (int64_t i = block * kBlock; i < end; ++i)
      a.average[i] = copy ? a.value[i] : ema_average(a.average[i], a.value[i], decay, rest);
  });
}

}  // namespace

void ema_update_cpu(EmaArrays parameters, EmaArrays buffers, float decay, float rest, bool copy) {
  update(parameters, decay, rest, copy);
  update(buffers, decay, rest, copy);
}

}  // namespace cutrain
