// gpu.h: [gpu] tests start with CUTRAIN_REQUIRE_GPU(). Without a usable CUDA device the test
// prints "SKIPPED: no CUDA device: <why>" and returns; CTest reports it as skipped.
#pragma once

#include <catch2/catch.hpp>

#include <iostream>

#include "kernels/device.h"

#define CUTRAIN_REQUIRE_GPU()                                                  \
  do {                                                                         \
    if (!::cutrain::cuda_available()) {                                        \
      std::cout << "SKIPPED: " << ::cutrain::cuda_unavailable_reason() << "\n"; \
      WARN("SKIPPED: " << ::cutrain::cuda_unavailable_reason());               \
      return;                                                                  \
    }                                                                          \
  } while (0)
