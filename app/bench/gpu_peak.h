// gpu_peak.h: the GPU that the benchmarks' fractions of the peak and the step plan's estimates
// (emu/plan/step_plan.h) are for.
#pragma once

namespace cutrain {

// An H200 SXM: 989 TFLOP/s dense bf16 on the tensor cores, 4.8 TB/s of HBM3e, and NVLink 4 at
// 900 GB/s, 450 GB/s each way; and its fp32 FMA peak (no tensor cores: TF32 is off in fp32),
// 67 TFLOP/s.
struct GpuPeak {
  double tflops = 989.0;
  double tbps = 4.8;
  double link_gbps = 450.0;  // one way, between two GPUs of a node
};
inline constexpr double kH200Fp32Tflops = 67.0;

}  // namespace cutrain
