#include "nn/resnet_layout.h"

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

}  // namespace cutrain
