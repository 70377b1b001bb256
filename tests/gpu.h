// gpu.h: [gpu] tests start with CUTRAIN_REQUIRE_GPU(). Without a usable CUDA device the test
// prints "SKIPPED: no CUDA device: <why>" and returns; CTest reports it as skipped.
//
// The kernel tests are also built against the CUDA emulation (kernels/emu, tests/emu), which
// always has its one device: tagged with CUTRAIN_GPU_TAG, a test is [gpu] in the GPU build and
// [emu] in the emulated one.
#pragma once

#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <iostream>

#include "kernels/device.h"

#ifdef CUTRAIN_CUDA_EMULATION
#define CUTRAIN_GPU_TAG "[emu]"
#else
#define CUTRAIN_GPU_TAG "[gpu]"
#endif

#define CUTRAIN_REQUIRE_GPU()                                                  \
  do {                                                                         \
    if (!::cutrain::cuda_available()) {                                        \
      std::cout << "SKIPPED: " << ::cutrain::cuda_unavailable_reason() << "\n"; \
      WARN("SKIPPED: " << ::cutrain::cuda_unavailable_reason());               \
      return;                                                                  \
    }                                                                          \
  } while (0)
