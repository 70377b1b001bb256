// step_plan.h: `cutrain bench-step --plan`, the inventory of one training step without a GPU.
//
// The step's own code runs once on the record-only emulated device (Note [Record-only device] in
// emu/runtime.h): the model is built and the step run as on any GPU, and the device writes
// down every kernel, cuDNN and cuBLAS call, memset, copy and stream wait it is given, with what
// each reads, writes and computes (emu/recording.h), and runs none of it. The collectives of a
// planned world are written down by the planned rank's communicator, whose peers are not there.
// From that list come the figures: what a CUDA graph of the step holds, the bytes the custom
// kernels move, the bytes the whole step moves, the FLOPs of the convolutions, and a roofline
// estimate of the step's time on a GPU given by its peak FLOP/s and memory bandwidth. The whole
// step's bytes are those of every operation but the collectives: the custom kernels', the cuDNN and
// cuBLAS calls' by the simple model of each reading its inputs and writing its outputs once (a fused
// convolution reads its prologue's operands too), and the memsets' and copies'. A collective's bytes
// cross the link between the GPUs, and are counted apart.
//
// Only the emulated build (scripts/build.sh --emulated) has that device, and only it compiles
// step_plan.cpp into the cutrain binary (app/CMakeLists.txt); the GPU build's `bench-step --plan`
// says so in one line. It sits in emu/, beside the device, although it runs app/'s step.
//
// The estimate is a sum over the step's operations, one after the other, of
//   max(FLOPs / peak, bytes / bandwidth, kMinOperationSeconds)
// and each operation's table row says which of the three bounds it: compute, memory or launch.
// It is a lower bound on a step run one operation at a time, and printed as one, with the
// images/s it allows at most: real kernels reach neither peak, and the two streams' overlap is
// not credited. Collectives are estimated apart, from the link's bandwidth (NVLink between the
// GPUs of one node, as NCCL uses it): a ring all-reduce of S bytes over N ranks sends and
// receives 2 (N - 1) / N S bytes on each rank's link, a broadcast (N - 1) / N S. They are left out
// of the step's sum, since they overlap backward.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "app/bench/gpu_peak.h"
#include "emu/recording.h"

namespace cutrain {

// No operation of a replayed graph takes less (launch, ramp-up and drain of a kernel node).
inline constexpr double kMinOperationSeconds = 2e-6;

struct StepPlanConfig {
  std::string stem = "cifar";
  std::string precision = "bf16";
  int batch_size = 256;
  int width = 64;
  int image_size = 32;
  int world_size = 1;                     // plan one rank of this many
  std::string batchnorm = "cooperative";  // nn/context.h's BatchNormImplementation
  int streams = 2;                        // ContextOptions::streams
  bool fusion = false;                    // ContextOptions::fusion: the fused unit bn-relu-conv
};

struct PlanSummary {
  int64_t graph_nodes = 0;    // kernels (custom, library, collective), memsets and copies
  int64_t kernels = 0;        // custom kernel launches
  int64_t library_calls = 0;  // cuDNN and cuBLAS calls (each counted as one node)
  int64_t collectives = 0;
  int64_t memsets = 0;
  int64_t memcpys = 0;
  int64_t waits = 0;        // one stream waiting for another: edges of the graph, not nodes
  int64_t host_waits = 0;   // the host waiting for the device: none in a step
  double custom_bytes = 0;  // read + written by custom kernels
  double library_bytes = 0;  // read + written by cuDNN and cuBLAS calls
  double step_bytes = 0;     // read + written by every operation but the collectives
  double conv_flops = 0;    // cuDNN convolutions
  double estimated_seconds = 0;
};

// One step of `config` planned (the model built for it on the record-only device, then the step
// run once): the recorder holds its ops, with the names of its streams ("main", "side", "comm").
Recorder plan_step(const StepPlanConfig& config);
PlanSummary summarize(const std::vector<RecordedOp>& ops, const GpuPeak& peak);

// The inventory, one table per kind and one line per stream, then the whole step's bytes beside
// the custom kernels':
//   whole step: X.XX GB moved, Y.YY GB by custom kernels, Z.ZZ GB by cuDNN and cuBLAS calls, W.WW GB
//   by memsets and copies (collectives not counted)
// and last the line scripts read:
//   plan: N graph nodes, M memsets, X.XX GB moved by custom kernels, Y.Y GFLOP in convolutions, estimated
//   Z.ZZ ms/step, a lower bound (at most I images/s per GPU)
void print_plan(std::FILE* out, const StepPlanConfig& config, const Recorder& plan, const GpuPeak& peak);

}  // namespace cutrain
