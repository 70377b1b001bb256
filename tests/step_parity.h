// step_parity.h: one ResNet-18 training step judged against a more exact one, tensor by tensor,
// with bounds that follow from an error model rather than being picked.
//
// THE ERROR MODEL (fp32 against the float64 step). Two correct implementations of the step
// differ by rounding, and how far depends on where a number sits.
//
// Forward -- logits, loss, batch norm's statistics. Every layer is continuous and batch norm
// renormalises, so these are off by a small multiple of a convolution output's relative
// rounding eps, which for cuDNN's fp32 algorithms is at most eps = 5e-6 (FMA-only sums of up to
// 4608 products: ~1e-6 for the GEMMs, Winograd and FFT a little worse). The multiple, measured
// on the CPU with every weight perturbed by a relative eps: 2.5 for the statistics, 3.7 for the
// logits with the cifar stem and 12 with the imagenet stem (its logits cancel more). Bound:
// three times the largest, 36 eps = 1.8e-4.
//
// Backward -- gradients. ReLU passes dy where its input z > 0 and nothing elsewhere, and a z
// near zero lands on either side: a decision "flips". z is batch norm's output, about N(0, 1),
// but its error is the convolution's rounding times |mean| / std of the convolution's output
// (inputs after a ReLU are positive, so the means are large): flips happen at a rate p of
// about 16 eps per decision (measured as above with eps from 1e-6 to 1e-5: 8 to 41 eps). A flip
// moves one element of dz by a whole dy, and the gradients below are sums over the B*H*W pixels
// of products with dz, so n flips among a layer's D = B*H*W*K decisions move them by a relative
// sqrt(n / D): sqrt(p) on average, whatever the layer's size. The change travels down with the
// gradient and adds in quadrature to the flips of each ReLU it passes, so a tensor behind L
// decisions (counted from the loss; the imagenet stem's max pool decides too) is off by about
// sqrt(L p). A few flips scatter like a Poisson count, so the bound per gradient tensor is
//     1e-4 (its own rounding) + 3 sqrt(16 eps L) + 2 / sqrt(D_min),
// the last term two flips in the smallest layer (layer4 at width 16, batch 8: 16384 decisions,
// 0.016). At width 16, cifar stem: 0.054 for L = 2, 0.13 for L = 17. Measured with every weight
// perturbed by eps, eight seeds: at most 0.81 of the bound. Updates get the same bound plus the
// rounding of the stored weight (update_rounding in step_parity.cpp), and are also held strictly
// to SGD's formula on their own gradients (compare_updates_with_sgd).
//
// bf16 (against the GPU's fp32 step). Rounding to 8 significant bits flips decisions so often
// that the gradients behind a ReLU decorrelate in part; the error model is then measured, not
// reasoned: resnet18_step_fp64 with Storage::bf16 rounds every number where the GPU's bf16 step
// stores it, and at widths 16 and 64, both stems, differs from the exact step by at most 3.3e-2
// in the logits, 1.7e-3 in the loss, 1.2e-2 in the statistics, 2.7e-2 in fc's gradients, and
// by a cosine of 0.87 or more in the gradients behind a ReLU. Bounds: three times those
// (cosine >= 1 - 3 x 0.13 = 0.61).
//
// A real bug -- a wrong sign, a missing term, a transposed weight -- moves most tensors below it
// by O(1), well past these bounds. tests/test_nn_step_parity.cpp runs the CPU half: the fp32 CPU
// step and the bf16 model within their bounds of the exact step, and three broken steps outside
// both the fp32 and the bf16 bounds.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "nn/resnet.h"
#include "nn/sgd.h"
#include "tests/nn_fixtures.h"
#include "tests/resnet18_fp64.h"

namespace cutrain::test {

// How far a step may be from the one it is judged against.
struct StepBounds {
  std::string name;  // "fp32 vs float64"
  double forward;    // logits, loss, running statistics: relative error
  double fc;         // gradients and updates with no decision in their way: relative error
  // Gradients and updates behind `decisions` decisions: relative error, or 1 - cosine.
  std::function<double(int decisions)> behind;
  bool by_cosine = false;
};

StepBounds fp32_bounds(const ResNetConfig& config);  // fp32 against the exact step
StepBounds bf16_bounds();                             // bf16 against the fp32 step
StepBounds identical();                               // bit for bit

// One comparison: what, the error measured, the bound it must not exceed (NaN fails).
struct Comparison {
  std::string what;
  double error = 0, bound = 0;
  bool passed() const { return error <= bound; }
};

// A ResNet-18 of `width` for the parity tests: batch 8, 10 classes, 32x32 images (64x64 for the
// imagenet stem, whose stem divides them by 4), weights from seed 5.
ResNetConfig parity_config(Stem stem, int width);

// The same batch in every model: N(0, 1) pixels rounded to bf16 (so every precision holds them
// exactly), zeros in the GPU's padding channels, labels in [0, 10).
void fill_same_batch(const std::vector<ResNet18*>& models, uint32_t seed);

// Runs one training step on `model` -- forward, backward and SGD, or `step` when given -- and
// reads everything back. On the GPU the logits and gradients are poisoned first (NaN bytes), so
// an element the step did not write fails the comparisons.
StepResult take_step(ResNet18& model, SGD& sgd, const std::function<void()>& step = {});

// The number of ReLU and max-pool decisions between the loss and each parameter's gradient.
std::map<std::string, int> decisions_above(const ResNet18& model);

// Logits, loss, running statistics, and each parameter's gradient and update, of `got` against
// `want`. `model` names the tensors (any model of the same configuration).
std::vector<Comparison> compare_steps(const StepResult& got, const StepResult& want, const ResNet18& model,
                                      const StepBounds& bounds);

// Each parameter's update against SGD's first step evaluated in float64 on got's own gradients
// and weights, times grad_scale: a strict bound (fp32 rounding), whatever the precision.
std::vector<Comparison> compare_updates_with_sgd(const StepResult& got, const ResNet18& model, const SgdConfig& sgd,
                                                 double lr, double grad_scale = 1);

// torch.nn.utils.clip_grad_norm_'s factor for got's gradients, in float64: min(max_norm / (norm + 1e-6), 1)
// with norm the 2-norm of every gradient together.
double clip_grad_norm_factor(const StepResult& got, double max_norm);

// CHECKs every comparison (a failure names the tensor, its error and its bound) and prints the
// closest call, for the record.
void check_within(const std::vector<Comparison>& comparisons);

// The comparisons that fail, one line each; and the closest call, for the record.
std::vector<std::string> failures(const std::vector<Comparison>& comparisons);
std::string closest_call(const std::vector<Comparison>& comparisons);

}  // namespace cutrain::test
