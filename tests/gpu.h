// gpu.h: [gpu] tests start with CUTRAIN_REQUIRE_GPU(), or CUTRAIN_REQUIRE_GPUS(n) where they need n
// devices. Without them the test prints "SKIPPED: <why>" ("no CUDA device: ...", or how many
// devices there are) and returns; CTest reports it as skipped.
//
// The kernel tests are also built against the CUDA emulation (emu/, tests/emu), which
// always has a device (two unless CUTRAIN_EMU_DEVICES says otherwise): tagged with CUTRAIN_GPU_TAG, a test is [gpu] in the GPU build and
// [emu] in the emulated one.
#pragma once

#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <iostream>
#include <string>

#include "kernels/base/check.h"
#include "kernels/base/device.h"

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

namespace cutrain::test {

// Why a test that needs `n` CUDA devices cannot run here: the reason no device is usable, or that
// there are fewer than `n`; empty when it can run.
inline std::string missing_gpus(int n) {
  if (!cuda_available()) return cuda_unavailable_reason();
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  if (count >= n) return std::string();
  return std::to_string(n) + " GPU ranks need " + std::to_string(n) + " CUDA devices, this machine has " +
         std::to_string(count);
}

}  // namespace cutrain::test

// Returns from the test, printing "SKIPPED: <why>", unless the machine has `n` usable CUDA devices.
// A test that starts n ranks with --device cuda needs n: each rank takes the device of its local
// rank, and app/run_start.cpp refuses one without its own (as on the one-GPU machine of the
// first real run, which CUTRAIN_EMU_DEVICES=1 emulates).
#define CUTRAIN_REQUIRE_GPUS(n)                                                \
  do {                                                                         \
    const std::string cutrain_missing_gpus = ::cutrain::test::missing_gpus(n); \
    if (!cutrain_missing_gpus.empty()) {                                       \
      std::cout << "SKIPPED: " << cutrain_missing_gpus << "\n";                \
      WARN("SKIPPED: " << cutrain_missing_gpus);                               \
      return;                                                                  \
    }                                                                          \
  } while (0)

#define CUTRAIN_REQUIRE_GPU() CUTRAIN_REQUIRE_GPUS(1)
