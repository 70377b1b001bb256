// cooperative.h: readying a kernel for cooperative launches, once, before any of them runs or is
// captured in a CUDA graph.
//
// Note [Cooperative launches]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A cooperative grid starts only when all of its blocks fit on the device at once, and a block may
// have more than 48 KiB of dynamic shared memory only up to the limit that its kernel was given
// with cudaFuncSetAttribute. A graph's kernel node is checked against that limit when the graph is
// launched, not when it was captured, so the limit must never go down after a larger launch has
// been captured. The limit is therefore only ever raised, to the largest launch planned, and batch
// norm readies each of its kernels when it plans (bn_prepare_launch), outside any capture. A grid
// that the occupancy API says cannot be resident all at once is refused there, in one line, before
// anything runs.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace cutrain {

// Raises the dynamic shared memory that launches of `kernel` may have to `bytes`, when it is more
// than the kernel has been given so far; never lowers it.
void raise_dynamic_shared_limit(const void* kernel, size_t bytes);

// Throws std::runtime_error naming `name` when a cooperative grid of this shape cannot have all of
// its blocks resident on the current device at once.
void check_cooperative_grid_fits(const char* name, const void* kernel, dim3 grid, dim3 block, size_t shared_bytes);

}  // namespace cutrain
