// layer_bench.h: `cutrain bench-step --layers`, where a step's time goes. The bench runs ResNet-18's
// layers one at a time (nn/resnet.h), so that it can put CUDA events around each layer's
// forward and each layer's backward, and around SGD: eager, on one stream, after a
// warm-up, the median of several passes. Nothing in nn/ knows it is being timed, and nothing is
// allocated or waited for between the events. An event times the GPU from the end of the previous
// call's work to the end of this call's, so a call whose kernels take the GPU less time than the
// host takes to launch them (small layers, cuDNN's set-up on the host) shows the host's time: that
// is what an eager step pays for it too.
//
// Two tables come out:
//   - each layer in forward order with its output's shape, its forward and backward times, the
//     model's FLOPs, and, where the build can plan (the emulated build, emu/plan/step_plan.h), the
//     plan's bytes and the roofline fraction: the plan's estimated time on the GPU of --gpu-tflops
//     and --gpu-tbps over the measured time. Without a plan the fraction counts the FLOPs alone, so
//     it is left out for layers without products (batch norm, pooling, the loss, SGD);
//   - batch norm by shape: for each distinct shape and fused operation, the forward and backward
//     times of every implementation (--batchnorm cooperative, split and cudnn), each timed in a
//     model of its own.
// On the emulated device the timings mean nothing (its kernels run on the CPU), and the output
// says so; the shapes, the FLOPs and the plan's figures mean what they mean on a GPU.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "app/bench/gpu_peak.h"
#include "nn/context.h"
#include "nn/resnet.h"
#include "nn/sgd.h"

namespace cutrain {

// One training step of `model`, one layer at a time, as the bench times it: each layer's training
// forward in table order (Note [ResNet-18's layer table] in nn/resnet.cpp), then each layer's
// backward in reverse order, then SGD over every parameter. `mark` is called before the first call
// and after each of the 2 * model.layers().size() + 1 calls; each call is in an NVTX range named
// "<layer> forward", "<layer> backward" or "sgd" (kernels/base/nvtx_range.h), under which the
// emulated device files what it records. The bench gives the model a context with one stream
// (Note [Side stream]), so that every call runs on the main stream, one after the other.
void step_layer_by_layer(ResNet18& model, SGD& sgd, const std::function<void()>& mark);

// N(0,1) pixels in the image's 3 channels (a GPU's padding channels stay zero) and random labels
// below `num_classes`, the same on every call: the fixed batch that bench-step times.
void fill_synthetic_batch(const Tensor& input, const Tensor& labels, int num_classes);

struct LayerBenchOptions {
  ResNetConfig config;
  ContextOptions context;  // the device and the precision; the batch norm and the streams are the bench's
  std::string batchnorm = "cooperative";  // the per-layer table's implementation
  int warmup = 0;                         // untimed steps first
  int passes = 0;                         // timed steps; each time is the median over them
  GpuPeak peak;
};

// Both tables, on stdout, each followed by the line scripts read (scripts/gpu-check.sh):
//   layers: forward F ms, backward B ms, SGD S ms, T ms per step layer by layer (batch norm <name>)
//   batch norm in all (every layer's forward and backward): cooperative C ms, split S ms, cudnn D ms
void run_layer_bench(const LayerBenchOptions& options);

}  // namespace cutrain
