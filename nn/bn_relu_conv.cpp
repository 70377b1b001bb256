#include "nn/bn_relu_conv.h"

#include <cstdio>
#include <stdexcept>

namespace cutrain {

BnReluConv::BnReluConv(ModelResources& resources, const std::string& bn_name, const std::string& conv_name,
                       Activation& x, int out_channels, int kernel, int stride, int pad)
    : batchnorm(std::make_unique<BatchNorm2d>(resources, bn_name, x, /*relu=*/true, /*residual=*/nullptr,
                                              /*before_fused_conv=*/true)),
      conv(std::make_unique<Conv2d>(resources, conv_name, batchnorm->y, int(x.value.dim(-1)), out_channels, kernel,
                                    stride, pad, /*adds_input_grad=*/false)),
      name_(bn_name + "+" + conv_name.substr(conv_name.rfind('.') + 1)),
      resources_(resources),
      scale_(resources.plan.tensor(DType::f32, {x.value.dim(-1)})),
      shift_(resources.plan.tensor(DType::f32, {x.value.dim(-1)})) {
  // bn1's backward writes dy1 before conv2's backward-filter reads dy2: dy1 must outlive conv2's
  // output as a gradient's span does, as if conv2 read y1 too.
  resources.plan.reads(x);
  if (resources.ctx.options.batchnorm == BatchNormImplementation::cudnn) return;
  std::string why;
  if (!conv->plan_prologue(x, scale_, shift_, why)) {
    fall_back(why);
    return;
  }
  fused_ = true;
}

BnReluConv::~BnReluConv() = default;

bool BnReluConv::fused() const { return fused_ && !resources_.sync_batchnorm.enabled(); }

void BnReluConv::fall_back(const std::string& why) {
  std::fprintf(stderr, "cutrain: warning: %s runs unfused: %s\n", name_.c_str(), why.c_str());
  fused_ = false;
}

void BnReluConv::bind() {
  conv->bind();
  std::string why;
  if (fused_ && !conv->try_prologue(why)) fall_back(why);
}

void BnReluConv::forward(bool train, cudaStream_t stream) {
  if (train && fused()) {
    batchnorm->forward_statistics(scale_.as<float>(), shift_.as<float>());
    conv->forward_with_prologue(stream);
    return;
  }
  batchnorm->forward(train);
  conv->forward(stream);
}

void BnReluConv::backward() {
  if (!fused()) {
    conv->backward();
    batchnorm->backward();
    return;
  }
  conv->backward_data();
  batchnorm->backward_recompute(scale_.as<float>(), shift_.as<float>());
  conv->backward_filter();
}

}  // namespace cutrain
