#include "nn/resnet.h"

#include <stdexcept>

namespace cutrain {

Stem parse_stem(const std::string& name) {
  if (name == "cifar") return Stem::cifar;
  if (name == "imagenet") return Stem::imagenet;
  throw std::runtime_error("--stem " + name + ": expected cifar or imagenet");
}

const char* stem_name(Stem stem) { return stem == Stem::cifar ? "cifar" : "imagenet"; }

namespace {
constexpr int kImageChannels = 3;
constexpr int kGpuInputChannels = 8;  // cuDNN's tensor-core kernels want channels in multiples of 8
}  // namespace

ResNet18::ResNet18(Context& ctx, const ResNetConfig& config)
    : config_(config),
      resources_(ctx),
      input_(resources_.plan.activation(ctx.dtype(),
                                  {config.batch_size, config.image_size, config.image_size,
                                   ctx.on_gpu() ? kGpuInputChannels : kImageChannels},
                                  /*with_grad=*/false)) {
  if (config.batch_size < 1 || config.width < 1 || config.num_classes < 1 || config.image_size < 1) {
    throw std::runtime_error("ResNet18: batch size, width, classes and image size must be positive");
  }
  const int w = config.width;
  if (config.stem == Stem::cifar) {
    conv1_ = std::make_unique<Conv2d>(resources_, "conv1", input_, kImageChannels, w, 3, 1, 1);
  } else {
    conv1_ = std::make_unique<Conv2d>(resources_, "conv1", input_, kImageChannels, w, 7, 2, 3);
  }
  bn1_ = std::make_unique<BatchNorm2d>(resources_, "bn1", conv1_->y, /*relu=*/true);
  Activation* x = &bn1_->y;
  if (config.stem == Stem::imagenet) {
    maxpool_ = std::make_unique<MaxPool2d>(resources_, *x);
    x = &maxpool_->y;
  }
  const int widths[4] = {w, 2 * w, 4 * w, 8 * w};
  for (int layer = 0; layer < 4; ++layer) {
    for (int block = 0; block < 2; ++block) {
      int stride = (layer > 0 && block == 0) ? 2 : 1;
      std::string name = "layer" + std::to_string(layer + 1) + "." + std::to_string(block);
      blocks_.push_back(std::make_unique<BasicBlock>(resources_, name, *x, widths[layer], stride));
      x = &blocks_.back()->y();
    }
  }
  avgpool_ = std::make_unique<GlobalAvgPool2d>(resources_, *x);
  fc_ = std::make_unique<Linear>(resources_, "fc", avgpool_->y, config.num_classes);
  loss_ = std::make_unique<CrossEntropyLoss>(resources_, fc_->y, config.label_smoothing);
  resources_.allocate(config.seed);
  sync_weight_copies();
  ctx.synchronize();
}

ResNet18::~ResNet18() = default;

int ResNet18::input_channels() const { return int(input_.value.dim(3)); }
const Tensor& ResNet18::input() const { return input_.value; }
const Tensor& ResNet18::labels() const { return loss_->labels; }
const Tensor& ResNet18::logits() const { return fc_->y.value; }
const float* ResNet18::loss() const { return loss_->loss.as<float>(); }
const int32_t* ResNet18::correct() const { return loss_->correct.as<int32_t>(); }

void ResNet18::forward(bool train, Collectives collectives) {
  const cudaStream_t stream = resources_.ctx.main_stream();
  conv1_->forward(stream);
  bn1_->forward(train, collectives);
  if (maxpool_) maxpool_->forward();
  for (auto& block : blocks_) block->forward(train, collectives);
  avgpool_->forward();
  fc_->forward();
  if (train) loss_->forward();
}

void ResNet18::backward(std::function<void(int64_t ready_end)> on_grads_ready, Collectives collectives) {
  resources_.params.begin_backward(std::move(on_grads_ready));
  fc_->backward();
  avgpool_->backward();
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) (*it)->backward(collectives);
  if (maxpool_) maxpool_->backward();
  bn1_->backward(collectives);
  conv1_->backward(0.0f);  // the weights only, since the image needs no gradient
}

void ResNet18::sync_weight_copies() {
  if (resources_.ctx.on_gpu()) resources_.params.sync_weight_copies(resources_.ctx.main_stream());
}

void ResNet18::gather_grads() {
  if (!resources_.ctx.on_gpu()) return;
  resources_.params.gather_grads(0, resources_.params.numel(), resources_.ctx.main_stream());
}

}  // namespace cutrain
