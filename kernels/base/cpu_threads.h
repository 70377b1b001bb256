// cpu_threads.h: the threads the CPU path computes on (the convolutions, batch norm, pooling and
// SGD), and the rule that keeps their results independent of how many there are.
//
// Note [Fixed work split]
// ~~~~~~~~~~~~~~~~~~~~~~~
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
//
// Note [Libraries inside a piece]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// oneDNN, which computes the convolutions (kernels/conv2d_cpu.cpp), runs on OpenMP's threads too: a
// call takes as many as OpenMP's thread count for the calling thread (omp_get_max_threads), and
// oneDNN fits its plan, and with it the order of its sums, to that count when a primitive is made.
// Inside a piece of parallel_for the count is 1, so a library call made in a piece runs on the
// piece's thread alone and computes what the piece alone decides. Outside the pieces, call
// use_cpu_threads_in_libraries() first; only a copy, whose result no thread count changes, runs
// there.
#pragma once

#include <omp.h>

#include <cstdint>

namespace cutrain {

// The number of threads of the CPU kernels: every core by default (std::thread::hardware_concurrency).
int cpu_threads();
// count >= 1; `cutrain train --threads N` and `bench-step --threads N` set it.
void set_cpu_threads(int count);

// Sets OpenMP's thread count for the calling thread to cpu_threads(), for a library call made
// outside the pieces of parallel_for (Note [Libraries inside a piece]).
inline void use_cpu_threads_in_libraries() { omp_set_num_threads(cpu_threads()); }

// f(piece) for piece in [0, pieces), spread over cpu_threads() threads. The pieces may run in any
// order and at once, so each must write only its own outputs.
template <typename F>
void parallel_for(int64_t pieces, F&& f) {
#pragma omp parallel num_threads(cpu_threads())
  {
    omp_set_num_threads(1);  // Note [Libraries inside a piece]
#pragma omp for schedule(dynamic)
    for (int64_t piece = 0; piece < pieces; ++piece) f(piece);
  }
}

}  // namespace cutrain
