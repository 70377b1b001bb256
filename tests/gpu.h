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

// The width of the ResNet-18 that the [gpu] tests of whole steps use: torchvision's 64 on a GPU,
// 16 on the emulated one, whose four multiprocessors hold batch norm's grid for at most 256
// channels, and whose kernels run thousands of times slower.
#ifdef CUTRAIN_CUDA_EMULATION
inline constexpr int kGpuTestWidth = 16;
#else
inline constexpr int kGpuTestWidth = 64;
#endif

#define CUTRAIN_REQUIRE_GPU()                                                  \
  do {                                                                         \
    if (!::cutrain::cuda_available()) {                                        \
      std::cout << "SKIPPED: " << ::cutrain::cuda_unavailable_reason() << "\n"; \
      WARN("SKIPPED: " << ::cutrain::cuda_unavailable_reason());               \
      return;                                                                  \
    }                                                                          \
  } while (0)
