// numeric.cuh: the two element types of activations, float and __nv_bfloat16, read and written
// through float. Every piece of shared element math computes in fp32 and converts only at the
// edges, with these two functions, on the host as on the device. And the products and sums whose
// rounding no compiler may change by fusing them (Note [Rounding that contraction cannot change]).
#pragma once

#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace cutrain {

__host__ __device__ inline float to_float(float v) { return v; }
__host__ __device__ inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__host__ __device__ inline T from_float(float v);
template <>
__host__ __device__ inline float from_float<float>(float v) {
  return v;
}
template <>  // round to nearest even
__host__ __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}

// Note [Rounding that contraction cannot change]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// nvcc fuses a product and the sum that takes it, a*b + c, into one fused multiply-add that rounds
// once instead of twice (-fmad=true, its default), across statements, wherever it finds the
// pattern; whether it finds it depends on the code around the formula (what else uses the product),
// so one inline formula can round one way in one kernel and the other way in another, and either
// way differ from the CPU twin, which never fuses. A formula whose result must have the same bits
// in two kernels, or in a kernel and its CPU twin, is therefore written with these operations,
// which round once each and are never fused: __fmul_rn, __fadd_rn, __fsub_rn and their double
// forms on the device, which the CUDA Math API documents as never merged into a multiply-add; the
// plain operators on the host, under a pragma that forbids clang to fuse them. GCC has no such
// pragma, and fuses nothing in the CPU twins: it builds them for the baseline x86-64, which has no
// fused multiply-add, or with -ffp-contract=off (batchnorm.cpp, sgd.cpp and ema.cpp, kernels/CMakeLists.txt).
// The CPU twins' rounding is the reference, and a kernel that keeps to it spends an instruction more
// where one multiply-add would do. A formula that only the kernels compute uses fmaf instead, one
// rounding everywhere. The emulated device fuses as nvcc does (Note [Contraction on the emulated
// device] in kernels/CMakeLists.txt), so that its tests show a formula left to the compiler.
#if defined(__clang__) && !defined(__CUDA_ARCH__)
#define CUTRAIN_UNFUSED _Pragma("clang fp contract(off)")
#else
#define CUTRAIN_UNFUSED
#endif

// a * b, a + b and a - b, each rounded once to T (float or double) and never fused.
template <typename T>
__host__ __device__ inline T mul_rn(T a, T b) {
  CUTRAIN_UNFUSED
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<T, double>)
    return __dmul_rn(a, b);
  else
    return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
template <typename T>
__host__ __device__ inline T add_rn(T a, T b) {
  CUTRAIN_UNFUSED
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<T, double>)
    return __dadd_rn(a, b);
  else
    return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
template <typename T>
__host__ __device__ inline T sub_rn(T a, T b) {
  CUTRAIN_UNFUSED
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<T, double>)
    return __dsub_rn(a, b);
  else
    return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

#undef CUTRAIN_UNFUSED

}  // namespace cutrain
