#include "nn/resnet.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "kernels/conv2d_cpu.h"

namespace cutrain {

Stem parse_stem(const std::string& name) {
  if (name == "cifar") return Stem::cifar;
  if (name == "imagenet") return Stem::imagenet;
  throw std::runtime_error("--stem " + name + ": expected cifar or imagenet");
}

const char* stem_name(Stem stem) { return stem == Stem::cifar ? "cifar" : "imagenet"; }

namespace {

LayerSpec spec(std::string name, LayerKind kind, int input) {
  LayerSpec layer;
  layer.name = std::move(name);
  layer.kind = kind;
  layer.input = input;
  return layer;
}

}  // namespace

// Note [ResNet-18's layer table]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The table lists the layers in the order they are built: the stem (conv1, bn1, the imagenet
// stem's maxpool), then each block's downsample (downsample.0, downsample.1) when it has one,
// conv1, bn1, conv2 and bn2, which adds the shortcut before its ReLU; then avgpool, fc and the
// loss. Each layer registers its parameters as it is built, and the flat parameter buffer is laid
// out in the reverse order (nn/parameters.h), which is the order backward runs the table in. So
// after backward has run the layers from the last down to any one of them, their gradients fill a
// prefix of the flat gradient buffer, which is what lets DDP's buckets go out during backward.
//
// With --fusion on (the GPU only) each block's bn1 and conv2 are one entry of their own kind,
// bn_relu_conv (Note [The fused unit bn-relu-conv] in nn/bn_relu_conv.h), named after the batch
// norm, with the convolution's name beside it. It registers bn1's parameters and then conv2's, as
// the two entries did, so the parameters, their order and the flat layout are the same; its
// gradients become final together, once its backward has run.
//
// Forward runs the table in its order too, with one change (forward_order): a block's downsample
// runs beside the block's main path. Its convolution is marked `beside`: it runs on the side stream,
// at the start of the block, while the main stream runs conv1, bn1 and conv2 (Note [Side stream],
// below). Its batch norm runs after conv2, on the main stream, once that has joined the side
// stream, and right before bn2, which adds its output.
//
// FLOPs count each multiply and each add of a product. A convolution's forward is
// 2*N*P*Q*K*R*S*C, and its backward twice that (the data gradient and the filter gradient; the
// stem has no data gradient, since the image needs none). The stem counts its 3 image channels,
// not the 8 the GPU pads them to, so the plan's convolution FLOPs are a little higher. The
// classifier's forward is 2*N*I*O and its backward twice that. Batch norm, pooling, the loss and
// SGD count none: they are bound by memory.
ResNetLayout resnet18_layout(const ResNetConfig& c, bool fused) {
  ResNetLayout layout;
  std::vector<LayerSpec>& layers = layout.layers;
  std::vector<int>& forward_order = layout.forward_order;
  const int n = c.batch_size;
  const std::vector<int> image = {n, c.image_size, c.image_size, kImageChannels};
  auto output_of = [&](int index) -> const std::vector<int>& { return index < 0 ? image : layers[index].output; };
  auto add = [&](LayerSpec layer) {
    layers.push_back(std::move(layer));
    forward_order.push_back(int(layers.size()) - 1);
    return int(layers.size()) - 1;
  };
  auto conv = [&](std::string name, int input, int out_channels, int kernel, int stride, int pad) {
    const std::vector<int>& x = output_of(input);
    const int side = ConvShape{n, x[1], x[2], x[3], out_channels, kernel, kernel, stride, pad}.P();
    LayerSpec layer = spec(std::move(name), LayerKind::conv, input);
    layer.in_channels = x[3];
    layer.kernel = kernel, layer.stride = stride, layer.pad = pad;
    layer.output = {n, side, side, out_channels};
    layer.forward_flops = 2.0 * n * side * side * out_channels * kernel * kernel * x[3];
    layer.backward_flops = (input < 0 ? 1 : 2) * layer.forward_flops;
    return add(std::move(layer));
  };
  auto batchnorm = [&](std::string name, int input, bool relu, int residual = -1) {
    LayerSpec layer = spec(std::move(name), LayerKind::batchnorm, input);
    layer.residual = residual;
    layer.relu = relu;
    layer.output = output_of(input);
    return add(std::move(layer));
  };

  const int w = c.width;
  int x = c.stem == Stem::cifar ? conv("conv1", -1, w, 3, 1, 1) : conv("conv1", -1, w, 7, 2, 3);
  x = batchnorm("bn1", x, /*relu=*/true);
  if (c.stem == Stem::imagenet) {
    LayerSpec pool = spec("maxpool", LayerKind::maxpool, x);
    pool.kernel = 3, pool.stride = 2, pool.pad = 1;
    const std::vector<int>& in = output_of(x);
    // The pool's window slides as a convolution's does.
    const int side = ConvShape{n, in[1], in[2], in[3], in[3], pool.kernel, pool.kernel, pool.stride, pool.pad}.P();
    pool.output = {n, side, side, in[3]};
    x = add(std::move(pool));
  }
  for (int stage = 0; stage < 4; ++stage) {
    const int out = w << stage;
    for (int block = 0; block < 2; ++block) {
      const std::string name = "layer" + std::to_string(stage + 1) + "." + std::to_string(block);
      const int stride = stage > 0 && block == 0 ? 2 : 1;
      int shortcut = x;
      if (stride != 1 || output_of(x)[3] != out) {
        const int downsample = conv(name + ".downsample.0", x, out, 1, stride, 0);
        layers[downsample].beside = true;
        shortcut = batchnorm(name + ".downsample.1", downsample, /*relu=*/false);
        forward_order.pop_back();  // its batch norm runs after conv2, below
      }
      int y = conv(name + ".conv1", x, out, 3, stride, 1);
      if (fused) {
        // conv2 with the fields of bn1 that it does not have: bn1's name and its ReLU.
        const int bn_input = y;
        y = conv(name + ".conv2", y, out, 3, 1, 1);
        LayerSpec& unit = layers[size_t(y)];
        unit.conv_name = unit.name;
        unit.name = name + ".bn1";
        unit.kind = LayerKind::bn_relu_conv;
        unit.relu = true;
        unit.input = bn_input;
      } else {
        y = batchnorm(name + ".bn1", y, /*relu=*/true);
        y = conv(name + ".conv2", y, out, 3, 1, 1);
      }
      if (shortcut != x) forward_order.push_back(shortcut);
      x = batchnorm(name + ".bn2", y, /*relu=*/true, shortcut);
    }
  }
  const int channels = output_of(x)[3];
  LayerSpec pool = spec("avgpool", LayerKind::avgpool, x);
  pool.output = {n, channels};
  x = add(std::move(pool));
  LayerSpec fc = spec("fc", LayerKind::linear, x);
  fc.output = {n, c.num_classes};
  fc.forward_flops = 2.0 * n * channels * c.num_classes;
  fc.backward_flops = 2 * fc.forward_flops;
  x = add(std::move(fc));
  LayerSpec loss = spec("loss", LayerKind::loss, x);
  loss.output = {1};
  add(std::move(loss));
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i].kind != LayerKind::conv || layers[i].input < 0) continue;  // the image needs no gradient
    const int read = layers[i].input;
    for (size_t j = i + 1; j < layers.size(); ++j)
      if (layers[j].input == read || layers[j].residual == read) layers[i].adds_input_grad = true;
  }
  return layout;
}

double step_flops(const ResNetConfig& config) {
  double flops = 0;
  for (const LayerSpec& layer : resnet18_layout(config).layers) flops += layer.forward_flops + layer.backward_flops;
  return flops;
}

std::string describe(const LayerSpec& layer) {
  const std::string window =
      std::to_string(layer.kernel) + "x" + std::to_string(layer.kernel) + "/" + std::to_string(layer.stride);
  switch (layer.kind) {
    case LayerKind::conv: return "conv " + window;
    case LayerKind::batchnorm: return layer.residual >= 0 ? "bn+add+relu" : layer.relu ? "bn+relu" : "bn";
    case LayerKind::bn_relu_conv: return "bn+relu+conv " + window;
    case LayerKind::maxpool: return "maxpool " + window;
    case LayerKind::avgpool: return "avgpool";
    case LayerKind::linear: return "linear";
    case LayerKind::loss: return "cross-entropy";
  }
  return "";
}

std::string shape_text(const std::vector<int>& shape) {
  std::string text;
  for (int d : shape) {
    if (!text.empty()) text += 'x';
    text += std::to_string(d);
  }
  return text;
}

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
  // The layers from the last down to any one fill a prefix of the layout (Note [ResNet-18's layer table]).
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

// Note [Side stream]
// ~~~~~~~~~~~~~~~~~~
// A GPU context has two streams. Everything runs on the main stream except three kinds of work,
// which run on the side stream at the same time as the main stream's work:
//   - the weight gradient of every convolution but the stem's, while the main stream computes its
//     data gradient (both read the same dy and x and write different things);
//   - the downsample convolution of a block, while the main stream runs the block's conv1, bn1
//     and conv2, except under SyncBatchNorm, whose all-reduces follow the main stream only;
//   - with one rank, or while several rehearse a capture, SGD for each bucket of parameters,
//     while the main stream runs the rest of backward. (With several ranks, SGD runs on the
//     communicator's own stream instead, right behind the bucket's all-reduce.)
// With --streams 1 (ContextOptions::streams) the side stream is the main stream itself, and a fork
// and a join do nothing. The same work then runs in the same order, one operation at a time, which
// measures what the second stream buys.
// The code that enqueues work passes the stream it chose, and nothing else decides. Work on the
// side stream starts after a fork, in which the side stream waits for the main stream's work so
// far, and the main stream takes it back with a join:
//
//   ctx.fork();                                  // the side stream waits for the main stream
//   conv.forward(ctx.side_stream());             // enqueued on the side stream
//   ...                                          // meanwhile, more work on the main stream
//   ctx.join();                                  // the main stream waits for the side stream
//
// as PyTorch's `with torch.cuda.stream(side):` and wait_stream do. A fork or join is an event
// recorded on one stream and waited for by the other, in an eager step as in a captured one,
// where the events become the graph's edges. A layer's backward that computes on the side stream
// joins it before it returns, so that a gradient's "final" keeps meaning "final once the main
// stream's work so far is done". Batch norm runs on the main stream only, because each of its
// cooperative grids wants every multiprocessor, so two must never run at once. cuBLAS runs on the main stream
// only, and each stream has its own cuDNN handle and cuDNN workspace.
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
