// launch.cuh: what the .cu files of kernels/ share to launch their kernels: the launch function
// every launch goes through (and its cooperative twin), one block size, the grid of a grid-stride
// loop, dynamic shared memory, and packs of elements moved by one (up to 16-byte) load or store.
// Device-side only: included by .cu files, never by the CPU twins.
//
// A .cu file compiles two ways: by nvcc for the GPU, and by the host compiler against the CUDA
// emulation of emu/ (see docs/emulated-gpu.md), which runs the same kernels on the CPU.
// The two differ only where __CUDACC__ is tested below (and in <cooperative_groups.h>, whose
// this_grid().sync() the emulation provides).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <utility>

#include "kernels/base/check.h"
#include "kernels/cooperative.h"
#include "kernels/traffic.h"

#ifndef __CUDACC__
#include "emu/launch.h"
#endif

namespace cutrain {

// The bytes of n elements of type T, for a launch's Traffic.
template <typename T>
constexpr int64_t bytes_of(int64_t n) {
  return n * int64_t(sizeof(T));
}

// What a launch is labelled with: the kernel's name for messages, the bytes the launch reads and
// writes in all (its launcher knows the sizes), and the file and line of the launch. The bytes are
// documentation that the emulated device hands to the step's inventory and that nvcc ignores.
struct LaunchLabel {
  const char* name;
  Traffic bytes;
  const char* file;
  int line;
  LaunchLabel(const char* name, Traffic bytes = {}, const char* file = __builtin_FILE(), int line = __builtin_LINE())
      : name(name), bytes(bytes), file(file), line(line) {}
};

// kernel<<<grid, block, dynamic_shared_bytes, stream>>>(args...), then the launch's error check:
// a launch the device refuses (over 1024 threads per block, grid.y or grid.z over 65535, too much
// shared memory, an empty grid) throws CheckError naming the kernel, its configuration and the
// launch site. Without nvcc, the emulation runs the grid on the CPU, or writes it down for the
// step's inventory (emu/recording.h).
//
//   launch_kernel({"cast_kernel", {n * 4, n * 2}}, cast_kernel<float, __nv_bfloat16>, grid_for(n), kBlockThreads,
//                 0, stream, in, out, n);
template <typename... Params, typename... Args>
void launch_kernel(LaunchLabel label, void (*kernel)(Params...), dim3 grid, dim3 block, size_t dynamic_shared_bytes,
                   cudaStream_t stream, Args&&... args) {
#ifdef __CUDACC__
  kernel<<<grid, block, dynamic_shared_bytes, stream>>>(std::forward<Args>(args)...);
#else
  emu::launch(label.name, label.bytes, false, kernel, grid, block, dynamic_shared_bytes, stream,
              std::forward<Args>(args)...);
#endif
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    check_failed(describe_launch(label.name, grid, block, dynamic_shared_bytes).c_str(), label.file, label.line,
                 CUTRAIN_CUDA_WHY(status));
}

// The default limit of a launch's dynamic shared memory; more needs the kernel's opt-in.
constexpr size_t kDefaultDynamicSharedBytes = 48 * 1024;

// launch_kernel's cooperative twin: all blocks of the grid run at once, so the kernel may wait at
// cooperative_groups::this_grid().sync(). The grid must fit the device at once (at most
// cudaOccupancyMaxActiveBlocksPerMultiprocessor blocks per multiprocessor), else the launch throws
// with "too many blocks in cooperative launch". Over 48 KiB of dynamic shared memory is allowed up
// to the device's opt-in limit, a limit that is only ever raised (Note [Cooperative launches]).
// Capturable: the launch attribute is valid for graph nodes, so a CUDA graph replays it as a
// cooperative launch.
template <typename... Params, typename... Args>
void launch_cooperative_kernel(LaunchLabel label, void (*kernel)(Params...), dim3 grid, dim3 block,
                               size_t dynamic_shared_bytes, cudaStream_t stream, Args&&... args) {
  if (dynamic_shared_bytes > kDefaultDynamicSharedBytes)  // Note [Cooperative launches]
    raise_dynamic_shared_limit(reinterpret_cast<const void*>(kernel), dynamic_shared_bytes);
#ifdef __CUDACC__
  cudaLaunchAttribute cooperative{};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = dynamic_shared_bytes;
  config.stream = stream;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  cudaError_t status = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  const cudaError_t last = cudaGetLastError();  // clears what the launch also recorded
  if (status == cudaSuccess) status = last;
#else
  emu::launch(label.name, label.bytes, true, kernel, grid, block, dynamic_shared_bytes, stream,
              std::forward<Args>(args)...);
  const cudaError_t status = cudaGetLastError();
#endif
  if (status != cudaSuccess)
    check_failed(describe_launch(label.name, grid, block, dynamic_shared_bytes).c_str(), label.file, label.line,
                 CUTRAIN_CUDA_WHY(status));
}

// In a kernel, `CUTRAIN_DYNAMIC_SHARED(float, partial);` makes partial the block's dynamic shared
// memory (the launch's dynamic_shared_bytes), as float partial[] or, emulated, a float*.
#ifdef __CUDACC__
#define CUTRAIN_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#else
#define CUTRAIN_DYNAMIC_SHARED(T, name) T* const name = static_cast<T*>(::cutrain::emu::dynamic_shared_memory())
#endif

constexpr int kBlockThreads = 256;

// Blocks for a grid-stride loop over n items: one item per thread up to a cap of 8192 blocks
// (2M threads, several waves on any GPU); beyond it each thread takes several items.
inline unsigned grid_for(int64_t n, int threads = kBlockThreads) {
  return unsigned(std::clamp<int64_t>((n + threads - 1) / threads, 1, 8192));
}

// for (int64_t i = first index of this thread; i < n; i += all threads of the grid)
#define CUTRAIN_GRID_STRIDE_LOOP(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// VEC consecutive elements, aligned so that one instruction moves them all.
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};

template <int VEC, typename T>
__device__ inline Pack<T, VEC> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, VEC>*>(p);
}

template <int VEC, typename T>
__device__ inline void store_pack(T* p, const Pack<T, VEC>& pack) {
  *reinterpret_cast<Pack<T, VEC>*>(p) = pack;
}

// The widest pack: 16 bytes, 4 floats or 8 bf16.
template <typename T>
constexpr int kWidestPack = int(16 / sizeof(T));

// Whether rows of C elements starting at these addresses (nullptr ones skipped) can be moved in
// widest packs: C a multiple of the pack, every address 16-byte aligned.
template <typename T>
bool widest_packs_fit(int C, std::initializer_list<const void*> pointers) {
  if (C % kWidestPack<T> != 0) return false;
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

}  // namespace cutrain
