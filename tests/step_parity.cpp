// step_parity.cpp: the comparisons of step_parity.h.
#include "tests/step_parity.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <iostream>
#include <random>

#include <cuda_bf16.h>

#include "kernels/base/check.h"

namespace cutrain::test {
namespace {

std::vector<double> widen(const float* data, int64_t n) { return std::vector<double>(data, data + n); }

void poison(const Tensor& t) {
  CUDA_CHECK(cudaMemset(t.data, 0xFF, t.bytes()));
  CUDA_CHECK(cudaDeviceSynchronize());
}

double norm(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x * x;
  return std::sqrt(sum);
}

// ||got - want|| / ||want||
double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return NAN;
  std::vector<double> diff(got.size());
  for (size_t i = 0; i < got.size(); ++i) diff[i] = got[i] - want[i];
  return norm(diff) / std::max(norm(want), 1e-30);
}

// An update is read back as (new weight - old weight), both fp32: storing the new weight rounds it
// by up to 2^-24 of its size, which is a relative error of the update when the update is small
// next to the weight (batch norm's gamma = 1 moving by 1e-4). Twice that, relative to `update`.
double update_rounding(const std::vector<double>& before, const std::vector<double>& update) {
  return 2 * 0x1p-24 * norm(before) / std::max(norm(update), 1e-30);
}

double cosine(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return NAN;
  double ab = 0;
  for (size_t i = 0; i < a.size(); ++i) ab += a[i] * b[i];
  return ab / (norm(a) * norm(b));  // NaN for a zero tensor
}

std::string format(const char* pattern, double a, double b) {
  char text[64];
  std::snprintf(text, sizeof text, pattern, a, b);
  return text;
}

}  // namespace

StepBounds fp32_bounds(const ResNetConfig& c) {
  constexpr double eps = 5e-6;  // a convolution output's relative rounding (step_parity.h)
  // The smallest layer's decisions: layer4, at 1/8 of the image side (1/32 with the imagenet stem).
  const int side = c.image_size / (c.stem == Stem::cifar ? 8 : 32);
  const double smallest = double(c.batch_size) * side * side * 8 * c.width;
  StepBounds b;
  b.name = "fp32 vs float64";
  b.forward = 36 * eps;
  b.fc = 1e-4;
  b.behind = [smallest](int decisions) {
    return 1e-4 + 3 * std::sqrt(16 * eps * decisions) + 2 / std::sqrt(smallest);
  };
  return b;
}

StepBounds bf16_bounds() {
  StepBounds b;
  b.name = "bf16 vs fp32";
  b.forward = 0.1;  // three times the bf16 model's largest: the logits' 3.3e-2 (step_parity.h)
  b.fc = 0.08;      // three times 2.7e-2
  b.behind = [](int) { return 3 * 0.13; };
  b.by_cosine = true;
  return b;
}

StepBounds identical() {
  StepBounds b;
  b.name = "bit for bit";
  b.forward = b.fc = 0;
  b.behind = [](int) { return 0.0; };
  return b;
}

ResNetConfig parity_config(Stem stem, int width) {
  ResNetConfig c;
  c.stem = stem;
  c.width = width;
  c.batch_size = 8;
  c.image_size = stem == Stem::cifar ? 32 : 64;
  c.num_classes = 10;
  c.seed = 5;
  return c;
}

void fill_same_batch(const std::vector<ResNet18*>& models, uint32_t seed) {
  const ResNetConfig& c = models.front()->config();
  std::mt19937 rng(seed);
  std::normal_distribution<float> pixel(0.0f, 1.0f);
  const int64_t pixels = int64_t(c.batch_size) * c.image_size * c.image_size;
  std::vector<float> image(size_t(pixels * 3));
  for (float& v : image) v = __bfloat162float(__float2bfloat16(pixel(rng)));
  std::vector<int32_t> labels(size_t(c.batch_size));
  for (int32_t& l : labels) l = int32_t(rng() % c.num_classes);
  for (ResNet18* model : models) {
    const int channels = model->input_channels();
    std::vector<float> x(size_t(pixels * channels), 0.0f);
    for (int64_t p = 0; p < pixels; ++p) std::copy_n(&image[size_t(p * 3)], 3, &x[size_t(p * channels)]);
    write_floats(x, model->input());
    copy_from_host(labels.data(), model->labels());
  }
}

StepResult take_step(ResNet18& model, SGD& sgd, const std::function<void()>& step) {
  const std::vector<float> before = read_floats(model.params().values());
  if (model.context().on_gpu()) {
    poison(model.logits());
    poison(model.params().grads());
    for (const Parameter* p : model.params().in_layout_order())
      if (p->layer_grad) poison(*p->layer_grad);  // where backward writes it (nn/parameters.h)
  }
  if (step) {
    step();
  } else {
    model.forward(true);
    model.backward();
    sgd_step(sgd, model);
  }
  model.gather_grads();  // into the fp32 buffer, from where backward left them
  model.context().synchronize();
  StepResult r;
  const std::vector<float> logits = read_floats(model.logits());
  r.logits = widen(logits.data(), int64_t(logits.size()));
  float loss = 0;
  copy_to_host(Tensor(const_cast<float*>(model.loss()), DType::f32, model.context().device(), {1}), &loss);
  r.loss = loss;
  const std::vector<float> grads = read_floats(model.params().grads());
  const std::vector<float> after = read_floats(model.params().values());
  for (const Parameter* p : model.params().in_layout_order()) {
    r.before[p->name] = widen(before.data() + p->offset, p->numel);
    r.grads[p->name] = widen(grads.data() + p->offset, p->numel);
    std::vector<double>& update = r.updates[p->name];
    update.resize(size_t(p->numel));
    for (int64_t i = 0; i < p->numel; ++i) update[size_t(i)] = double(after[size_t(p->offset + i)]) - before[size_t(p->offset + i)];
  }
  const std::vector<float> buffers = read_floats(model.params().buffer_values());
  for (const BufferEntry& b : model.buffers()) r.buffers[b.name] = widen(buffers.data() + b.offset, b.numel);
  return r;
}

std::map<std::string, int> decisions_above(const ResNet18& model) {
  // Walking the layout (backward order: fc first), a batch norm followed by a ReLU -- every one
  // but the downsample branch's -- decides from its own bias on; the imagenet stem's max pool
  // from bn1's bias on. A downsample branch is counted with its block's bn1: one too many.
  std::map<std::string, int> decisions;
  int n = 0;
  for (const Parameter* p : model.params().in_layout_order()) {
    const std::string& name = p->name;
    if (name.ends_with("bn1.bias") || name.ends_with("bn2.bias")) ++n;
    if (name == "bn1.bias" && model.config().stem == Stem::imagenet) ++n;
    decisions[name] = n;
  }
  return decisions;
}

std::vector<Comparison> compare_steps(const StepResult& got, const StepResult& want, const ResNet18& model,
                                      const StepBounds& bounds) {
  std::vector<Comparison> out;
  const std::string tag = " (" + bounds.name + ")";
  out.push_back({"logits" + tag, relative_error(got.logits, want.logits), bounds.forward});
  out.push_back({"loss" + tag, std::abs(got.loss - want.loss) / std::abs(want.loss), bounds.forward});
  for (const BufferEntry& b : model.buffers())
    out.push_back({b.name + tag, relative_error(got.buffers.at(b.name), want.buffers.at(b.name)), bounds.forward});
  const std::map<std::string, int> decisions = decisions_above(model);
  for (const Parameter* p : model.params().in_layout_order()) {
    const int behind = decisions.at(p->name);
    for (const char* kind : {"gradient", "update"}) {
      const bool gradient = kind[0] == 'g';
      const std::vector<double>& a = gradient ? got.grads.at(p->name) : got.updates.at(p->name);
      const std::vector<double>& b = gradient ? want.grads.at(p->name) : want.updates.at(p->name);
      const std::string what = p->name + " " + kind + tag;
      if (behind > 0 && bounds.by_cosine) {
        out.push_back({what + ", 1 - cosine", 1 - cosine(a, b), bounds.behind(behind)});
      } else {
        double bound = behind > 0 ? bounds.behind(behind) : bounds.fc;
        if (!gradient && bound > 0) bound += update_rounding(want.before.at(p->name), b);  // 0: bit for bit
        out.push_back({what, relative_error(a, b), bound});
      }
    }
  }
  return out;
}

std::vector<Comparison> compare_updates_with_sgd(const StepResult& got, const ResNet18& model, const SgdConfig& sgd,
                                                 double lr, double grad_scale) {
  // First step: buf = grad_scale*g + wd*w, d = nesterov ? (1 + momentum) * buf : buf, update = -lr * d. The
  // step computes it in fp32 from fp32 numbers: a few roundings of 6e-8 each, 1e-5 in all with
  // room to spare, and the rounding of the stored weight.
  std::vector<Comparison> out;
  for (const Parameter* p : model.params().in_layout_order()) {
    const std::vector<double>& g = got.grads.at(p->name);
    const std::vector<double>& w = got.before.at(p->name);
    std::vector<double> want(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      const double buf = grad_scale * g[i] + double(sgd.weight_decay) * w[i];
      want[i] = -lr * (sgd.nesterov ? (1 + double(sgd.momentum)) * buf : buf);
    }
    out.push_back({p->name + " update, SGD's formula", relative_error(got.updates.at(p->name), want),
                   1e-5 + update_rounding(w, want)});
  }
  return out;
}

double clip_grad_norm_factor(const StepResult& got, double max_norm) {
  double squares = 0;
  for (const auto& [name, g] : got.grads)
    for (double x : g) squares += x * x;
  return std::min(max_norm / (std::sqrt(squares) + 1e-6), 1.0);
}

void check_within(const std::vector<Comparison>& comparisons) {
  std::cout << closest_call(comparisons) << "\n";
  for (const Comparison& c : comparisons) {
    INFO(c.what << ": error " << c.error << ", bound " << c.bound);
    CHECK(c.passed());
  }
}

std::vector<std::string> failures(const std::vector<Comparison>& comparisons) {
  std::vector<std::string> lines;
  for (const Comparison& c : comparisons)
    if (!c.passed()) lines.push_back(c.what + format(": error %.3g, bound %.3g", c.error, c.bound));
  return lines;
}

std::string closest_call(const std::vector<Comparison>& comparisons) {
  const auto worst = std::max_element(comparisons.begin(), comparisons.end(), [](const Comparison& a, const Comparison& b) {
    return a.error / a.bound < b.error / b.bound;
  });
  if (worst == comparisons.end()) return "nothing compared";
  return "closest call: " + worst->what + format(": error %.3g of bound %.3g", worst->error, worst->bound);
}

}  // namespace cutrain::test
