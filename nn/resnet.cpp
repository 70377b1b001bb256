#include "nn/resnet.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace cutrain {

namespace {
constexpr int kGpuInputChannels = 8;  // cuDNN's tensor-core kernels want channels in multiples of 8
}  // namespace

ResNet18::ResNet18(Context& ctx, const ResNetConfig& config)
    : config_(config),
      layout_(resnet18_layout(config, ctx.on_gpu() && ctx.options.fusion)),
      resources_(ctx),
      input_(resources_.plan.activation(
          ctx.dtype(),
          {config.batch_size, config.image_size, config.image_size, ctx.on_gpu() ? kGpuInputChannels : kImageChannels},
          /*with_grad=*/false)) {
  if (config.batch_size < 1 || config.width < 1 || config.num_classes < 1 || config.image_size < 1) {
    throw std::runtime_error("ResNet18: batch size, width, classes and image size must be positive");
  }
  std::vector<Activation*> outputs;  // each layer's, by table index
  auto activation = [&](int index) -> Activation& { return index < 0 ? input_ : *outputs[size_t(index)]; };
  for (const LayerSpec& spec : layout_.layers) {
    Activation& x = activation(spec.input);
    Layer& layer = built_.emplace_back();
    switch (spec.kind) {
      case LayerKind::conv:
        layer.conv = std::make_unique<Conv2d>(resources_, spec.name, x, spec.in_channels, spec.output[3], spec.kernel,
                                              spec.stride, spec.pad, spec.adds_input_grad);
        layer.parameters = {&layer.conv->weight};
        outputs.push_back(&layer.conv->y);
        break;
      case LayerKind::batchnorm:
        layer.batchnorm = std::make_unique<BatchNorm2d>(resources_, spec.name, x, spec.relu,
                                                        spec.residual >= 0 ? &activation(spec.residual) : nullptr);
        layer.parameters = {&layer.batchnorm->weight, &layer.batchnorm->bias};
        outputs.push_back(&layer.batchnorm->y);
        break;
      case LayerKind::bn_relu_conv:
        layer.bn_relu_conv = std::make_unique<BnReluConv>(resources_, spec.name, spec.conv_name, x, spec.output[3],
                                                          spec.kernel, spec.stride, spec.pad);
        layer.parameters = {&layer.bn_relu_conv->batchnorm->weight, &layer.bn_relu_conv->batchnorm->bias,
                            &layer.bn_relu_conv->conv->weight};
        outputs.push_back(&layer.bn_relu_conv->conv->y);
        break;
      case LayerKind::maxpool:
        layer.maxpool = std::make_unique<MaxPool2d>(resources_, x);
        outputs.push_back(&layer.maxpool->y);
        break;
      case LayerKind::avgpool:
        layer.avgpool = std::make_unique<GlobalAvgPool2d>(resources_, x);
        outputs.push_back(&layer.avgpool->y);
        break;
      case LayerKind::linear:
        layer.linear = std::make_unique<Linear>(resources_, spec.name, x, spec.output[1]);
        layer.parameters = {&layer.linear->weight, &layer.linear->bias};
        outputs.push_back(&layer.linear->y);
        break;
      case LayerKind::loss:
        layer.loss = std::make_unique<CrossEntropyLoss>(resources_, x, config.label_smoothing);
        outputs.push_back(nullptr);
        break;
    }
  }
  resources_.allocate(config.seed);
  if (ctx.on_gpu() && ctx.options.fusion && ctx.options.batchnorm == BatchNormImplementation::cudnn)
    std::fprintf(stderr, "cutrain: note: --fusion on runs unfused with --batchnorm cudnn, whose batch norm has no "
                         "statistics-only form\n");
  for (Layer& layer : built_) {
    if (layer.conv) layer.conv->bind();
    if (layer.bn_relu_conv) layer.bn_relu_conv->bind();
  }
  // Backward runs the table in reverse, and the layout is the reverse of the order of
  // registration, so the layers from the last down to any one fill a prefix of the layout.
  int64_t end = 0;
  for (size_t i = built_.size(); i-- > 0;) {
    for (const Parameter* p : built_[i].parameters) end = std::max(end, p->offset + p->padded_numel);
    built_[i].grads_final_end = end;
  }
  sync_weight_copies();
  ctx.synchronize();
}

ResNet18::~ResNet18() = default;

int ResNet18::input_channels() const { return int(input_.value.dim(3)); }
const Tensor& ResNet18::input() const { return input_.value; }
const Tensor& ResNet18::labels() const { return built_.back().loss->labels; }
const Tensor& ResNet18::logits() const { return built_[size_t(layout_.layers.back().input)].linear->y.value; }
const float* ResNet18::loss() const { return built_.back().loss->loss.as<float>(); }
const int32_t* ResNet18::correct() const { return built_.back().loss->correct.as<int32_t>(); }

// The downsamples run beside their blocks (Note [ResNet-18's layer table]), except under
// SyncBatchNorm, whose all-reduces follow the main stream only.
void ResNet18::forward(bool train) {
  Context& ctx = resources_.ctx;
  const bool beside_allowed = !resources_.sync_batchnorm.enabled();
  for (int i : layout_.forward_order) {
    const LayerSpec& spec = layout_.layers[size_t(i)];
    const bool beside = spec.beside && beside_allowed;
    if (beside) ctx.fork();
    if (beside_allowed && spec.input >= 0 && layout_.layers[size_t(spec.input)].beside) ctx.join();
    forward_layer(i, train, beside ? ctx.side_stream() : ctx.main_stream());
  }
}

void ResNet18::forward_layer(int layer, bool train) { forward_layer(layer, train, resources_.ctx.main_stream()); }

void ResNet18::forward_layer(int index, bool train, cudaStream_t stream) {
  Layer& layer = built_[size_t(index)];
  switch (layout_.layers[size_t(index)].kind) {
    case LayerKind::conv: layer.conv->forward(stream); break;
    case LayerKind::batchnorm: layer.batchnorm->forward(train); break;
    case LayerKind::bn_relu_conv: layer.bn_relu_conv->forward(train, stream); break;
    case LayerKind::maxpool: layer.maxpool->forward(); break;
    case LayerKind::avgpool: layer.avgpool->forward(); break;
    case LayerKind::linear: layer.linear->forward(); break;
    case LayerKind::loss:
      if (train) layer.loss->forward();  // it also writes the logits' gradient
      break;
  }
}

void ResNet18::backward_layer(int index) {
  const LayerSpec& spec = layout_.layers[size_t(index)];
  Layer& layer = built_[size_t(index)];
  switch (spec.kind) {
    case LayerKind::conv: layer.conv->backward(); break;
    case LayerKind::batchnorm: layer.batchnorm->backward(); break;
    case LayerKind::bn_relu_conv: layer.bn_relu_conv->backward(); break;
    case LayerKind::maxpool: layer.maxpool->backward(); break;
    case LayerKind::avgpool: layer.avgpool->backward(); break;
    case LayerKind::linear: layer.linear->backward(); break;
    case LayerKind::loss: break;  // its forward wrote the logits' gradient
  }
}

void ResNet18::backward() {
  for (int i = int(built_.size()) - 1; i >= 0; --i) backward_layer(i);
}

int ResNet18::fused_units() const {
  return int(std::count_if(built_.begin(), built_.end(),
                           [](const Layer& layer) { return layer.bn_relu_conv && layer.bn_relu_conv->fused(); }));
}

void ResNet18::set_sync_batchnorm(SyncBatchNorm sync) {
  resources_.sync_batchnorm = std::move(sync);
  if (resources_.sync_batchnorm.enabled() && std::any_of(built_.begin(), built_.end(), [](const Layer& l) { return bool(l.bn_relu_conv); }))
    std::fprintf(stderr, "cutrain: note: --fusion on runs unfused under SyncBatchNorm, whose statistics are "
                         "all-reduced between stages\n");
}

void ResNet18::sync_weight_copies() {
  if (resources_.ctx.on_gpu()) resources_.params.sync_weight_copies(resources_.ctx.main_stream());
}

void ResNet18::gather_grads() {
  if (!resources_.ctx.on_gpu()) return;
  resources_.params.gather_grads(0, resources_.params.numel(), resources_.ctx.main_stream());
}

}  // namespace cutrain
