// layer_bench.h: `cutrain bench-step --layers`, where a step's time goes. ResNet-18 is built from
// nn/'s layers one at a time (app/resnet_layers.h), so that the bench can put CUDA events around
// each layer's forward and each layer's backward, and around SGD: eager, on one stream, after a
// warm-up, the median of several passes. Nothing in nn/ knows it is being timed, and nothing is
// allocated or waited for between the events. An event times the GPU from the end of the previous
// call's work to the end of this call's, so a call whose kernels take the GPU less time than the
// host takes to launch them (small layers, cuDNN's set-up on the host) shows the host's time: that
// is what an eager step pays for it too.
//
// Two tables come out:
//   - each layer in forward order with its output's shape, its forward and backward times, the
//     model's FLOPs, and, where the build can plan (the emulated build, app/bench/step_plan.h), the
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
#include <memory>
#include <string>
#include <vector>

#include "app/bench/step_plan.h"
#include "app/resnet_layers.h"
#include "nn/context.h"
#include "nn/model_resources.h"
#include "nn/sgd.h"

namespace cutrain {

// ResNet-18 as resnet18_layers lists it, built from nn/'s layers in that order: the order in
// which ResNet18 (nn/resnet.h) builds its own, so the parameters, their initial values and the
// memory plan are the same, and so is the step. The bench gives it a context with one stream
// (Note [Side stream]), so that every call runs on the main stream, one after the other.
class LayerByLayerResNet {
 public:
  LayerByLayerResNet(Context& ctx, const ResNetConfig& config);
  ~LayerByLayerResNet();
  LayerByLayerResNet(const LayerByLayerResNet&) = delete;
  LayerByLayerResNet& operator=(const LayerByLayerResNet&) = delete;

  const std::vector<LayerSpec>& layers() const { return specs_; }
  const Tensor& input() const { return input_.value; }  // [B,H,W,C]: C as ResNet18::input_channels()
  const Tensor& labels() const;
  const float* loss() const;

  // One training step: each layer's training forward in order, then each layer's backward in
  // reverse order, then SGD over every parameter. `mark` is called before the first call and
  // after each of the 2 * layers().size() + 1 calls; each call is in an NVTX range named
  // "<layer> forward", "<layer> backward" or "sgd" (kernels/base/nvtx_range.h), under which the
  // emulated device files what it records.
  void step(const std::function<void()>& mark);

 private:
  struct Layer {
    std::function<void()> forward, backward;  // each owns its nn/ layer
  };
  ResNetConfig config_;
  std::vector<LayerSpec> specs_;
  ModelResources resources_;
  Activation& input_;
  std::vector<Layer> layers_;
  std::vector<std::string> forward_ranges_, backward_ranges_;
  std::function<const Tensor&()> labels_;
  std::function<const float*()> loss_;
  std::unique_ptr<SGD> sgd_;
};

// N(0,1) pixels in the image's 3 channels (a GPU's padding channels stay zero) and random labels
// below `num_classes`, the same on every call: the fixed batch that bench-step times.
void fill_synthetic_batch(const Tensor& input, const Tensor& labels, int num_classes);

struct LayerBenchOptions {
  ResNetConfig config;
  ContextOptions context;  // the device and the precision; the batch norm and the streams are the bench's
  std::string batchnorm = "cooperative";  // the per-layer table's implementation
  int warmup = 0;          // untimed steps first
  int passes = 0;          // timed steps; each time is the median over them
  GpuPeak peak;
};

// Both tables, on stdout, each followed by the line scripts read (scripts/gpu-check.sh):
//   layers: forward F ms, backward B ms, SGD S ms, T ms per step layer by layer (batch norm <name>)
//   batch norm in all (every layer's forward and backward): cooperative C ms, split S ms, cudnn D ms
void run_layer_bench(const LayerBenchOptions& options);

}  // namespace cutrain
