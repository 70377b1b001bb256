// checkpoint.h: the model's state_dict as a safetensors file, with torchvision's names, shapes,
// layouts and dtypes (conv weights OIHW, converted from and to the OHWI in memory; F32 tensors;
// num_batches_tracked I64), so torchvision.models.resnet18(num_classes=K) loads an imagenet-stem
// checkpoint with strict=True (the cifar stem differs only in conv1.weight's shape). Training
// state (epoch, step, RNG, sampler position...) travels as string metadata.
//
// The optimizer's momentum buffers go to their own file under the same names, prefixed
// "momentum_buffer.".
//
// Loading checks every expected name, shape and dtype, that no weight is NaN or infinite and that
// every batch norm running variance is above zero,
// and reports all that do not match in ONE line ("ckpt.safetensors: missing fc.bias;
// conv1.weight has shape [64, 3, 7, 7], expected [64, 3, 3, 3]"); nothing in the model changes
// unless the whole file matches.
#pragma once

#include <map>
#include <stdexcept>
#include <string>

namespace cutrain {

class ModelEma;
class ResNet18;
class SGD;
struct ResNetConfig;
struct SafeTensorsFile;

using CheckpointMetadata = std::map<std::string, std::string>;

// Note [Checkpoints that load]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// save_model and save_momentum check what they would write as the loads check it: a tensor that
// holds NaN or infinities, or a running variance that is not positive, is refused with an
// UnfitCheckpoint naming the tensors, and nothing is written. So a diverging run never writes a
// checkpoint that its own loader refuses, and never prunes a good one for it (app/checkpoint_folder.h).
struct UnfitCheckpoint : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void save_model(const std::string& path, const ResNet18& model, const CheckpointMetadata& metadata = {});
// Returns the file's metadata. Synchronises the device; refreshes the bf16 copy in bf16 mode.
CheckpointMetadata load_model(const std::string& path, ResNet18& model);

// The stem, width and classes of the ResNet-18 whose state_dict `file` (read from `path`) holds:
// conv1's kernel gives the stem and its rows the width, fc's rows the classes, each within what
// cutrain builds (nn/resnet.h). Every tensor is then checked as load_model checks it, against
// torchvision's resnet18 of that shape, before any model exists: a small file that declares a
// huge model is refused, not allocated. Throws naming `path` and every mismatch in one line.
ResNetConfig resnet_config_of(const SafeTensorsFile& file, const std::string& path);

// The moving average of the weights (nn/model_ema.h) as a state_dict of the model's names, shapes and dtypes,
// which torchvision's resnet18 loads as it loads the model file (the prefix "module." and the count as the
// tensor "n_averaged" make it an ExponentialMovingAverage's state_dict). The metadata also records the
// average's n_averaged under kEmaCountKey. load_ema checks the file as load_model does, and refuses one
// without that count; it writes the average, never the model.
inline constexpr const char* kEmaCountKey = "n_averaged";
void save_ema(const std::string& path, const ResNet18& model, const ModelEma& ema, CheckpointMetadata metadata = {});
CheckpointMetadata load_ema(const std::string& path, const ResNet18& model, ModelEma& ema);

void save_momentum(const std::string& path, const ResNet18& model, const SGD& sgd,
                   const CheckpointMetadata& metadata = {});
CheckpointMetadata load_momentum(const std::string& path, const ResNet18& model, SGD& sgd);

// The gradients of the last backward under the names "grad.<parameter>", in torchvision
// layouts, and `loss` as the F32 tensor "loss" of shape [1]: the first-step cross-check with
// PyTorch (bench/check_parity.py).
void save_gradients(const std::string& path, const ResNet18& model, float loss);

}  // namespace cutrain
