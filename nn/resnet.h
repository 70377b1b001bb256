// resnet.h: ResNet-18 on NHWC activations, built from its layer table (nn/resnet_layout.h).
//
// The model owns its memory for one batch size. That is the input [B,H,W,Cin] in the activation
// dtype on its device, where Cin = input_channels() is 3 on the CPU and 8 on the GPU (the extra
// channels are zero); the labels [B] int32, which the loader fills; every activation and
// gradient; and the flat parameter and gradient buffers.
//
// forward(true) computes the logits, the loss, the count of correct rows and the logits'
// gradient. backward_layer(i), called for each layer from the last to the first, then writes the
// gradients, and after it the gradients [0, grads_final_end(i)) of the flat buffer are final.
// Neither allocates or waits on the host. The training step walks the layers itself, so that it
// can all-reduce and update each bucket of gradients as soon as it is final: Note [The step] in
// app/train_step.h. forward(false) evaluates with batch norm's running statistics and leaves only
// the logits, which kernels/cross_entropy.h's count_correct counts.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "nn/batchnorm2d.h"
#include "nn/bn_relu_conv.h"
#include "nn/conv2d.h"
#include "nn/pooling_linear_loss.h"
#include "nn/resnet_layout.h"

namespace cutrain {

class ResNet18 {
 public:
  ResNet18(Context& ctx, const ResNetConfig& config);
  ~ResNet18();
  ResNet18(const ResNet18&) = delete;
  ResNet18& operator=(const ResNet18&) = delete;

  const ResNetConfig& config() const { return config_; }
  Context& context() const { return resources_.ctx; }

  // What the loader fills.
  int input_channels() const;
  const Tensor& input() const;   // [B, H, W, input_channels()], activation dtype
  const Tensor& labels() const;  // [B] int32

  // The layer table, in the order the layers were built (Note [ResNet-18's layer table]): with
  // ContextOptions::fusion on the GPU, the table of --fusion on.
  const std::vector<LayerSpec>& layers() const { return layout_.layers; }
  // How many fused units run fused (Note [The fused unit bn-relu-conv]), which the banner says; 0
  // without --fusion on.
  int fused_units() const;

  // Every layer in forward's order, on the main stream and, for the downsamples, the side stream.
  void forward(bool train);
  // One layer's backward. Backward runs the layers from the last to the first.
  void backward_layer(int layer);
  // Once backward_layer has run for every layer from the last down to `layer`, the flat gradients
  // [0, grads_final_end(layer)) are final, and backward reads those parameters no more, so an
  // optimizer may update them. On the GPU, final means final once the work enqueued so far on the
  // main stream has run (Note [Side stream]).
  int64_t grads_final_end(int layer) const { return built_[size_t(layer)].grads_final_end; }
  // Every layer's backward, from the last to the first.
  void backward();
  // One layer's forward alone, on the main stream: what `bench-step --layers` times, in table order.
  void forward_layer(int layer, bool train);

  const Tensor& logits() const;    // [B, num_classes] fp32
  const float* loss() const;       // training forward: mean loss (device memory on the GPU)
  const int32_t* correct() const;  // training forward: rows whose argmax is the label

  // The parameters, in flat fp32 buffers laid out in backward order (params().in_layout_order()).
  int64_t num_parameters() const { return resources_.params.parameter_count(); }
  ParameterSet& params() { return resources_.params; }
  const ParameterSet& params() const { return resources_.params; }
  // Batch norm buffers: "bn1.running_mean", "bn1.running_var" (fp32 [C]). Every BN's
  // num_batches_tracked is this one counter, which checkpoints save and load. PyTorch's training
  // forward increments it; here the trainer does, once per step, because a step replayed from a
  // CUDA graph runs no host code.
  const std::deque<BufferEntry>& buffers() const { return resources_.params.buffers(); }
  int64_t num_batches_tracked = 0;

  // On the GPU, refreshes the copies of the weights that forward reads (the bf16 weights and the
  // stem's padded filter), after something other than SGD changed the fp32 weights.
  void sync_weight_copies();
  // On the GPU, copies every gradient that backward left elsewhere (in bf16, or in the padded
  // stem's layout) into the fp32 gradient buffer, params().grads(), so that the host can read
  // them outside a step.
  void gather_grads();
  void set_sync_batchnorm(SyncBatchNorm sync);
  size_t planned_bytes() const { return resources_.plan.bytes(); }

 private:
  // One layer of the table, built: the nn/ layer of its kind (the others null).
  struct Layer {
    std::unique_ptr<Conv2d> conv;
    std::unique_ptr<BatchNorm2d> batchnorm;
    std::unique_ptr<BnReluConv> bn_relu_conv;
    std::unique_ptr<MaxPool2d> maxpool;
    std::unique_ptr<GlobalAvgPool2d> avgpool;
    std::unique_ptr<Linear> linear;
    std::unique_ptr<CrossEntropyLoss> loss;
    std::vector<const Parameter*> parameters;  // the ones it registered
    int64_t grads_final_end = 0;
  };
  void forward_layer(int layer, bool train, cudaStream_t stream);

  ResNetConfig config_;
  ResNetLayout layout_;
  ModelResources resources_;
  Activation& input_;
  std::vector<Layer> built_;  // by table index
};

}  // namespace cutrain
