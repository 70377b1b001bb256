// The emulation's <cuda_profiler_api.h> (emu/): there is no profiler to start, so
// cudaProfilerStart and cudaProfilerStop succeed and do nothing.
#pragma once

#include "emu/runtime.h"

inline cudaError_t cudaProfilerStart() { return cudaSuccess; }
inline cudaError_t cudaProfilerStop() { return cudaSuccess; }
