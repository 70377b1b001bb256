// device.h: the device side of CUDA for a .cu file compiled by the host compiler against the
// emulation (emu/): the function qualifiers, __shared__, the built-in index variables,
// __syncthreads and the warp collectives (which hand over to the block's other threads, see
// block.h), atomics, fences and a few intrinsics. Each does what the CUDA C++ Programming Guide
// says it does, on one thread of a block that block.h runs as a fiber.
#pragma once

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "emu/bf16.h"
#include "emu/block.h"
#include "emu/vector_types.h"

// ---- qualifiers -------------------------------------------------------------------------------

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __align__(n) alignas(n)
#define __launch_bounds__(...)
// A static __shared__ array is one variable for the whole program, which is the block's own since
// blocks run one at a time. (Dynamic shared memory: CUTRAIN_DYNAMIC_SHARED in kernels/launch.cuh.)
#define __shared__ static

// ---- synchronisation --------------------------------------------------------------------------

inline void __syncthreads() { cutrain::emu::sync_threads(); }

inline void __threadfence_block() { std::atomic_signal_fence(std::memory_order_seq_cst); }
inline void __threadfence() { std::atomic_signal_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_signal_fence(std::memory_order_seq_cst); }

// ---- warp collectives -------------------------------------------------------------------------

namespace cutrain::emu {

// What a shuffle may move: the arithmetic types and bf16, as in CUDA's overloads.
template <typename T>
concept Shufflable = (std::is_arithmetic_v<T> && sizeof(T) <= 8) || std::is_same_v<T, __nv_bfloat16>;

template <Shufflable T>
T shuffle(Collective op, unsigned mask, T var, int arg, int width) {
  uint64_t bits = 0;
  std::memcpy(&bits, &var, sizeof(T));
  bits = warp_collective(op, mask, bits, arg, width);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

}  // namespace cutrain::emu

template <cutrain::emu::Shufflable T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32) {
  return cutrain::emu::shuffle(cutrain::emu::Collective::shfl_idx, mask, var, src_lane, width);
}
template <cutrain::emu::Shufflable T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  return cutrain::emu::shuffle(cutrain::emu::Collective::shfl_up, mask, var, int(delta), width);
}
template <cutrain::emu::Shufflable T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  return cutrain::emu::shuffle(cutrain::emu::Collective::shfl_down, mask, var, int(delta), width);
}
template <cutrain::emu::Shufflable T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32) {
  return cutrain::emu::shuffle(cutrain::emu::Collective::shfl_xor, mask, var, lane_mask, width);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return unsigned(cutrain::emu::warp_collective(cutrain::emu::Collective::ballot, mask, predicate != 0, 0, 32));
}
inline int __any_sync(unsigned mask, int predicate) {
  return int(cutrain::emu::warp_collective(cutrain::emu::Collective::any, mask, predicate != 0, 0, 32));
}
inline int __all_sync(unsigned mask, int predicate) {
  return int(cutrain::emu::warp_collective(cutrain::emu::Collective::all, mask, predicate != 0, 0, 32));
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  cutrain::emu::warp_collective(cutrain::emu::Collective::syncwarp, mask, 0, 0, 32);
}

// ---- atomics ----------------------------------------------------------------------------------
// The threads of a block take turns on one host thread, so a read-modify-write is atomic as it
// stands. Each returns the old value; the overloads are CUDA's, so what compiles here compiles
// under nvcc. Integer arithmetic wraps, as on the device.

namespace cutrain::emu {

template <typename T, typename Update>
T atomic_update(T* address, Update update) {
  const T old = *address;
  *address = update(old);
  return old;
}

inline int wrapping_add(int a, int b) { return int(unsigned(a) + unsigned(b)); }
inline int wrapping_sub(int a, int b) { return int(unsigned(a) - unsigned(b)); }

}  // namespace cutrain::emu

#define CUTRAIN_EMU_ATOMIC(name, T, expression)                                            \
  inline T name(T* address, T val) {                                                       \
    return cutrain::emu::atomic_update(address, [val](T old) -> T { return expression; }); \
  }
CUTRAIN_EMU_ATOMIC(atomicAdd, int, cutrain::emu::wrapping_add(old, val))
CUTRAIN_EMU_ATOMIC(atomicAdd, unsigned int, old + val)
CUTRAIN_EMU_ATOMIC(atomicAdd, unsigned long long, old + val)
CUTRAIN_EMU_ATOMIC(atomicAdd, float, old + val)
CUTRAIN_EMU_ATOMIC(atomicAdd, double, old + val)
CUTRAIN_EMU_ATOMIC(atomicSub, int, cutrain::emu::wrapping_sub(old, val))
CUTRAIN_EMU_ATOMIC(atomicSub, unsigned int, old - val)
CUTRAIN_EMU_ATOMIC(atomicExch, int, val)
CUTRAIN_EMU_ATOMIC(atomicExch, unsigned int, val)
CUTRAIN_EMU_ATOMIC(atomicExch, unsigned long long, val)
CUTRAIN_EMU_ATOMIC(atomicExch, float, val)
CUTRAIN_EMU_ATOMIC(atomicMin, int, val < old ? val : old)
CUTRAIN_EMU_ATOMIC(atomicMin, unsigned int, val < old ? val : old)
CUTRAIN_EMU_ATOMIC(atomicMin, long long, val < old ? val : old)
CUTRAIN_EMU_ATOMIC(atomicMin, unsigned long long, val < old ? val : old)
CUTRAIN_EMU_ATOMIC(atomicMax, int, val > old ? val : old)
CUTRAIN_EMU_ATOMIC(atomicMax, unsigned int, val > old ? val : old)
CUTRAIN_EMU_ATOMIC(atomicMax, long long, val > old ? val : old)
CUTRAIN_EMU_ATOMIC(atomicMax, unsigned long long, val > old ? val : old)
CUTRAIN_EMU_ATOMIC(atomicAnd, int, old& val)
CUTRAIN_EMU_ATOMIC(atomicAnd, unsigned int, old& val)
CUTRAIN_EMU_ATOMIC(atomicAnd, unsigned long long, old& val)
CUTRAIN_EMU_ATOMIC(atomicOr, int, old | val)
CUTRAIN_EMU_ATOMIC(atomicOr, unsigned int, old | val)
CUTRAIN_EMU_ATOMIC(atomicOr, unsigned long long, old | val)
CUTRAIN_EMU_ATOMIC(atomicXor, int, old ^ val)
CUTRAIN_EMU_ATOMIC(atomicXor, unsigned int, old ^ val)
CUTRAIN_EMU_ATOMIC(atomicXor, unsigned long long, old ^ val)
// ((old >= val) ? 0 : old + 1) and ((old == 0 || old > val) ? val : old - 1): counters modulo val + 1.
CUTRAIN_EMU_ATOMIC(atomicInc, unsigned int, old >= val ? 0u : old + 1)
CUTRAIN_EMU_ATOMIC(atomicDec, unsigned int, (old == 0 || old > val) ? val : old - 1)
#undef CUTRAIN_EMU_ATOMIC

#define CUTRAIN_EMU_ATOMIC_CAS(T)                                                                              \
  inline T atomicCAS(T* address, T compare, T val) {                                                           \
    return cutrain::emu::atomic_update(address, [compare, val](T old) { return old == compare ? val : old; }); \
  }
CUTRAIN_EMU_ATOMIC_CAS(int)
CUTRAIN_EMU_ATOMIC_CAS(unsigned int)
CUTRAIN_EMU_ATOMIC_CAS(unsigned long long)
CUTRAIN_EMU_ATOMIC_CAS(unsigned short)
#undef CUTRAIN_EMU_ATOMIC_CAS

// ---- intrinsics -------------------------------------------------------------------------------

inline int __popc(unsigned int x) { return std::popcount(x); }
inline int __popcll(unsigned long long x) { return std::popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __clz(int x) { return std::countl_zero(unsigned(x)); }
inline int __clzll(long long x) { return std::countl_zero((unsigned long long)x); }
inline unsigned int __brev(unsigned int x) {
  unsigned int r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline int __float_as_int(float x) { return std::bit_cast<int>(x); }
inline unsigned int __float_as_uint(float x) { return std::bit_cast<unsigned int>(x); }
inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline float __uint_as_float(unsigned int x) { return std::bit_cast<float>(x); }
template <typename T>
T __ldg(const T* address) {
  return *address;
}

// The fast-math intrinsics compute the accurate functions here: no ulp for ulp agreement.
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
