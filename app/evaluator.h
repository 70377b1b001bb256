// evaluator.h: top-1 accuracy on the test set, overall and per class, and the test loss.
//
// With test-time augmentation (--tta flip) each image is scored twice, as it is and mirrored
// left-right, and the prediction is the argmax of the mean of the two logit vectors (the fast
// CIFAR-10 trainers report their accuracy this way). The mirrored view comes from a second feed
// whose augmentation mirrors every image (kernels/augment.cuh); half of each view's logits is added
// into a buffer of their own, which then holds the mean.
//
// The test loss is the mean cross-entropy over the test images of the logits the prediction is
// made from, without label smoothing: each batch's mean (kernels/cross_entropy.h) lands in a slot
// of its own on the model's device, and the host weighs them by the batch's rows at the end.
//
// The test set is split into contiguous shards, one per rank, so each image is counted exactly
// once (no sampler padding); the last batch of a shard may be partial, and only its real rows
// are counted. Counting happens on the model's device (kernels/cross_entropy.h count_correct);
// the counts of all ranks are summed at the end, so every rank returns the same result.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "app/batch_feed.h"
#include "nn/device_buffer.h"

namespace cutrain {

class Communicator;

enum class Tta { none, flip };

// "none" or "flip"; throws std::invalid_argument naming the bad value.
Tta parse_tta(const std::string& name);

struct EvalResult {
  bool stopped = false;  // the hook stopped it: the counts are partial and mean nothing
  int64_t correct = 0;
  int64_t total = 0;
  double loss = 0;  // the mean cross-entropy over the `total` images
  std::vector<int64_t> class_correct, class_total;

  double accuracy() const { return total ? double(correct) / double(total) : 0.0; }
};

// "  airplane      93.10%  (931/1000)", one line per class that has test images; `class_names`
// may be shorter than the classes (numbers stand in).
std::vector<std::string> class_accuracy_lines(const EvalResult& r, const std::vector<std::string>& class_names);

// Called after each batch that every rank runs (the first batches, as many as the smallest shard
// has), on every rank at the same batch, with the fraction of this rank's shard done. It returns
// true to stop the evaluation there, and must return the same on every rank (it may agree through
// a collective, which is why it is called at batches every rank has).
using EvalHook = std::function<bool(double fraction_done)>;

class Evaluator {
 public:
  // `comm` may be null (a world of one). The test images are normalised with `normalization`'s mean and std.
  Evaluator(ResNet18& model, const Dataset& test, Communicator* comm, int rank, int world_size, Tta tta = Tta::none,
            const AugmentConfig& normalization = {});

  EvalResult run(const EvalHook& after_batch = {});

 private:
  ResNet18& model_;
  Communicator* comm_;
  std::vector<int64_t> shard_;  // this rank's test indices
  int64_t common_batches_ = 0;  // the batches of the smallest shard: those every rank runs
  BatchFeed feed_;
  std::unique_ptr<BatchFeed> mirrored_;  // --tta flip: the same shard, every image mirrored
  DeviceBuffer mean_logits_;             // --tta flip: the mean of the two views' logits, fp32 [B, K]
  DeviceBuffer batch_losses_;            // fp32 [batches]: each batch's mean loss
  DeviceBuffer loss_gradient_;           // fp32 [B, K] and an int32: what the loss kernel also writes, unread
  DeviceBuffer counts_;                  // int64: correct, class_total[K], class_correct[K]
};

}  // namespace cutrain
