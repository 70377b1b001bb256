// cpu_threads.h: the threads the CPU path computes on (the convolutions, batch norm, pooling and
// SGD), and the rule that keeps their results independent of how many there are.
//
// Note [Fixed work split]
// Every parallel loop of the CPU path cuts its work into pieces whose bounds depend on the shapes
// alone, never on the number of threads; the threads only choose which pieces they do. A piece
// that sums does so in a fixed order, and sums over pieces are combined in piece order, so one
// thread and N threads give the same bits (tests/test_kernels_cpu_threads.cpp checks it).
// The threads are OpenMP's. The loader's threads (data/loader.h) share the same cores: a batch is
// ready long before a CPU step ends, so they run in short bursts and then block on the full ring,
// taking little from the step. Between parallel loops OpenMP's threads spin for a while before
// they sleep, which is fastest on cores of one's own; on cores shared with other programs, set
// OMP_WAIT_POLICY=PASSIVE (the tests do: tests/CMakeLists.txt), or spinning threads take the
// cores that the others need.
#pragma once

#include <cstdint>

namespace cutrain {

// The number of threads of the CPU kernels: every core by default (std::thread::hardware_concurrency).
int cpu_threads();
// count >= 1; `cutrain train --threads N` and `bench-step --threads N` set it.
void set_cpu_threads(int count);

// f(piece) for piece in [0, pieces), spread over cpu_threads() threads. The pieces may run in any
// order and at once, so each must write only its own outputs.
template <typename F>
void parallel_for(int64_t pieces, F&& f) {
#pragma omp parallel for schedule(dynamic) num_threads(cpu_threads())
  for (int64_t piece = 0; piece < pieces; ++piece) f(piece);
}

}  // namespace cutrain
