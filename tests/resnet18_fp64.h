// resnet18_fp64.h: one ResNet-18 training step (forward, backward, SGD) in float64, written
// from PyTorch's definitions with plain loops: the yardstick that the fp32 step on the CPU and
// the GPU's step are measured against (tests/step_parity.h).
//
// It uses nothing of kernels/ or nn/ but the model's names, weights and batch, and the shapes of
// the layer table (nn/resnet.h), on purpose: a formula wrong in the code under test and in
// its CPU twin (they share their element math) still shows here. Its own rounding (~1e-16) is far below anything the comparisons resolve,
// so for them it is the exact step.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kernels/sgd.h"
#include "nn/resnet.h"

namespace cutrain::test {

// What one step produces, every number widened to double. Tensors are keyed by their
// torchvision names and kept in cutrain's storage layout (conv weights OHWI, fc [out, in]).
struct StepResult {
  std::vector<double> logits;  // [batch, classes]
  double loss = 0;
  std::map<std::string, std::vector<double>> before;   // the weights before the step, by parameter
  std::map<std::string, std::vector<double>> grads;    // by parameter
  std::map<std::string, std::vector<double>> updates;  // new value - old value, by parameter
  std::map<std::string, std::vector<double>> buffers;  // running statistics after the step
};

// How the step computes. storage: float64 is the exact step; bf16 a model of the GPU's bf16 step
// for sizing its bounds -- the arithmetic still float64, but every number that step keeps in bf16
// rounded to bf16 where it keeps it (weights as the products read them, convolution outputs and
// their weight gradients, activations after batch norm and ReLU, activation gradients, the
// pooled features). fault: a deliberate bug, to show that the bounds catch one.
enum class Storage { float64, bf16 };
enum class Fault {
  none,
  batchnorm_backward_sign,     // dx = gamma*invstd*(dy - dbeta/M + xhat*dgamma/M): one sign wrong
  batchnorm_backward_no_mean,  // dx = gamma*invstd*(dy - xhat*dgamma/M): a term missing
  conv_backward_transposed,    // dx of a KxK convolution with as many outputs as inputs reads w[c,r,s,k]
};
struct Fp64Options {
  Storage storage = Storage::float64;
  Fault fault = Fault::none;
};

// The step `model` (on the CPU) would take now from its weights, running statistics and batch,
// as SGD's first step (momentum buffers zero) at learning rate lr. The model is not changed.
StepResult resnet18_step_fp64(const ResNet18& model, const SgdConfig& sgd, double lr, Fp64Options options = {});

}  // namespace cutrain::test
