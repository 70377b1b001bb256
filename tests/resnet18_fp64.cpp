// resnet18_fp64.cpp: the float64 step of resnet18_fp64.h. Activations are NHWC; every layer is
// a function of its inputs, and the model keeps what backward needs in plain structs.
#include "tests/resnet18_fp64.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include <cuda_bf16.h>

namespace cutrain::test {
namespace {

using Vec = std::vector<double>;

// PyTorch's nn.BatchNorm2d defaults.
constexpr double kBatchNormEps = 1e-5;
constexpr double kBatchNormMomentum = 0.1;

struct Act {  // an NHWC activation
  int N = 0, H = 0, W = 0, C = 0;
  Vec v;
  Act() = default;
  Act(int n, int h, int w, int c) : N(n), H(h), W(w), C(c), v(size_t(n) * h * w * c, 0.0) {}
  Act zeros_like() const { return Act(N, H, W, C); }
  size_t pixels() const { return size_t(N) * H * W; }
  double* at(int n, int h, int w) { return &v[((size_t(n) * H + h) * W + w) * C]; }
  const double* at(int n, int h, int w) const { return &v[((size_t(n) * H + h) * W + w) * C]; }
};

// y += a * x over n elements (the inner loop of every convolution below; it vectorizes).
void axpy(double a, const double* x, double* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

// A convolution's geometry: K filters of R x R over C channels, OHWI weights w[k][r][s][c].
struct ConvGeometry {
  int K, R, stride, pad;
  int out(int in) const { return (in + 2 * pad - R) / stride + 1; }
};

// Calls f(n, p, q, h, w, r, s) for every output pixel (n, p, q) and filter tap (r, s) whose input
// pixel (h, w) lies inside the image (zero padding contributes nothing).
template <typename F>
void for_each_tap(const Act& x, const ConvGeometry& g, F&& f) {
  const int P = g.out(x.H), Q = g.out(x.W);
  for (int n = 0; n < x.N; ++n)
    for (int p = 0; p < P; ++p)
      for (int q = 0; q < Q; ++q)
        for (int r = 0; r < g.R; ++r)
          for (int s = 0; s < g.R; ++s) {
            const int h = p * g.stride - g.pad + r, w = q * g.stride - g.pad + s;
            if (h >= 0 && h < x.H && w >= 0 && w < x.W) f(n, p, q, h, w, r, s);
          }
}

// y[n,p,q,k] = sum_{r,s,c} x[n, p*stride - pad + r, q*stride - pad + s, c] * w[k,r,s,c]
Act conv_forward(const Act& x, const Vec& w, const ConvGeometry& g) {
  const int C = x.C, K = g.K, R = g.R;
  Vec w_rsck(w.size());  // w transposed to [r][s][c][k], so the inner loop runs over k
  for (int k = 0; k < K; ++k)
    for (int rsc = 0; rsc < R * R * C; ++rsc) w_rsck[size_t(rsc) * K + k] = w[size_t(k) * R * R * C + rsc];
  Act y(x.N, g.out(x.H), g.out(x.W), K);
  for_each_tap(x, g, [&](int n, int p, int q, int h, int wi, int r, int s) {
    const double* in = x.at(n, h, wi);
    double* out = y.at(n, p, q);
    for (int c = 0; c < C; ++c) axpy(in[c], &w_rsck[(size_t(r * R + s) * C + c) * K], out, K);
  });
  return y;
}

// dw[k,r,s,c] = sum_{n,p,q} dy[n,p,q,k] * x[n, h(p,r), w(q,s), c];  dx (+)= the transpose.
void conv_backward(const Act& x, const Vec& w_in, const Act& dy, const ConvGeometry& g, Vec& dw, Act* dx,
                   Fault fault) {
  const int C = x.C, K = g.K, R = g.R;
  Vec w = w_in;
  if (fault == Fault::conv_backward_transposed && K == C) {  // backward-data reads w[c,r,s,k]
    for (int k = 0; k < K; ++k)
      for (int rs = 0; rs < R * R; ++rs)
        for (int c = 0; c < C; ++c) w[(size_t(k) * R * R + rs) * C + c] = w_in[(size_t(c) * R * R + rs) * K + k];
  }
  dw.assign(w.size(), 0.0);
  for_each_tap(x, g, [&](int n, int p, int q, int h, int wi, int r, int s) {
    const double* grad = dy.at(n, p, q);
    const double* in = x.at(n, h, wi);
    double* din = dx ? dx->at(n, h, wi) : nullptr;
    for (int k = 0; k < K; ++k) {
      const size_t tap = (size_t(k) * R * R + size_t(r) * R + s) * C;
      axpy(grad[k], in, &dw[tap], C);  // the weights' own gradient never reads w
      if (din) axpy(grad[k], &w[tap], din, C);
    }
  });
}

// Training-mode batch norm over the N*H*W pixels of each channel (two passes for the variance).
struct BatchNormCache {
  Act xhat;
  Vec invstd;
};

Act batchnorm_forward(const Act& x, const Vec& gamma, const Vec& beta, Vec& running_mean, Vec& running_var,
                      BatchNormCache& cache) {
  const int C = x.C;
  const double M = double(x.pixels());
  Vec mean(C, 0.0), var(C, 0.0);
  for (size_t m = 0; m < x.pixels(); ++m)
    for (int c = 0; c < C; ++c) mean[c] += x.v[m * C + c];
  for (double& v : mean) v /= M;
  for (size_t m = 0; m < x.pixels(); ++m)
    for (int c = 0; c < C; ++c) var[c] += (x.v[m * C + c] - mean[c]) * (x.v[m * C + c] - mean[c]);
  for (double& v : var) v /= M;  // biased, for normalising
  cache.invstd.resize(C);
  for (int c = 0; c < C; ++c) {
    cache.invstd[c] = 1.0 / std::sqrt(var[c] + kBatchNormEps);
    running_mean[c] = (1 - kBatchNormMomentum) * running_mean[c] + kBatchNormMomentum * mean[c];
    running_var[c] = (1 - kBatchNormMomentum) * running_var[c] + kBatchNormMomentum * var[c] * M / (M - 1);
  }
  cache.xhat = x.zeros_like();
  Act y = x.zeros_like();
  for (size_t m = 0; m < x.pixels(); ++m)
    for (int c = 0; c < C; ++c) {
      const size_t i = m * C + c;
      cache.xhat.v[i] = (x.v[i] - mean[c]) * cache.invstd[c];
      y.v[i] = gamma[c] * cache.xhat.v[i] + beta[c];
    }
  return y;
}

// dbeta = sum dy, dgamma = sum dy*xhat, dx = gamma*invstd*(dy - dbeta/M - xhat*dgamma/M)
Act batchnorm_backward(const Act& dy, const Vec& gamma, const BatchNormCache& cache, Vec& dgamma, Vec& dbeta,
                       Fault fault) {
  const double mean_term = fault == Fault::batchnorm_backward_no_mean ? 0 : 1;
  const double xhat_sign = fault == Fault::batchnorm_backward_sign ? -1 : 1;
  const int C = dy.C;
  const double M = double(dy.pixels());
  dgamma.assign(C, 0.0);
  dbeta.assign(C, 0.0);
  for (size_t m = 0; m < dy.pixels(); ++m)
    for (int c = 0; c < C; ++c) {
      dbeta[c] += dy.v[m * C + c];
      dgamma[c] += dy.v[m * C + c] * cache.xhat.v[m * C + c];
    }
  Act dx = dy.zeros_like();
  for (size_t m = 0; m < dy.pixels(); ++m)
    for (int c = 0; c < C; ++c) {
      const size_t i = m * C + c;
      dx.v[i] = gamma[c] * cache.invstd[c] *
                (dy.v[i] - mean_term * dbeta[c] / M - xhat_sign * cache.xhat.v[i] * dgamma[c] / M);
    }
  return dx;
}

Act relu(const Act& z) {
  Act y = z;
  for (double& v : y.v) v = std::max(v, 0.0);
  return y;
}

// dz = dy where z > 0, else 0
Act relu_backward(const Act& dy, const Act& z) {
  Act dz = dy;
  for (size_t i = 0; i < dz.v.size(); ++i)
    if (!(z.v[i] > 0)) dz.v[i] = 0;
  return dz;
}

// Max pool 3x3, stride 2, padding 1 (padding never wins); the gradient goes to the first
// position in the window, row by row, that attains the maximum.
Act maxpool_forward(const Act& x, std::vector<size_t>& argmax) {
  const ConvGeometry g{x.C, 3, 2, 1};
  Act y(x.N, g.out(x.H), g.out(x.W), x.C);
  argmax.assign(y.v.size(), 0);
  std::vector<char> seen(y.v.size(), 0);
  for_each_tap(x, g, [&](int n, int p, int q, int h, int w, int, int) {
    for (int c = 0; c < x.C; ++c) {
      const size_t out = (y.at(n, p, q) - y.v.data()) + c, in = (x.at(n, h, w) - x.v.data()) + c;
      if (!seen[out] || x.v[in] > y.v[out]) {
        seen[out] = 1;
        y.v[out] = x.v[in];
        argmax[out] = in;
      }
    }
  });
  return y;
}

Act maxpool_backward(const Act& dy, const Act& x, const std::vector<size_t>& argmax) {
  Act dx = x.zeros_like();
  for (size_t i = 0; i < dy.v.size(); ++i) dx.v[argmax[i]] += dy.v[i];
  return dx;
}

// Where the GPU's bf16 step keeps a number in bf16, the bf16 model rounds it there.
struct Store {
  Storage storage;
  double operator()(double v) const {
    return storage == Storage::bf16 ? double(__bfloat162float(__float2bfloat16(float(v)))) : v;
  }
  Vec operator()(Vec v) const {
    for (double& x : v) x = (*this)(x);
    return v;
  }
  Act operator()(Act a) const {
    a.v = (*this)(std::move(a.v));
    return a;
  }
};

// One BasicBlock: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), the shortcut a 1x1
// convolution and batch norm when the shape changes.
struct Block {
  Block(std::string name, int K, int stride, bool downsample)
      : name(std::move(name)), K(K), stride(stride), downsample(downsample) {}
  std::string name;
  int K, stride;
  bool downsample;
  Act x, c1, z1, y1, c2, ds_c, z2;
  BatchNormCache bn1, bn2, ds_bn;
};

// One training step of ResNet-18 on the model's weights and batch.
class Fp64ResNet {
 public:
  Fp64ResNet(const ResNet18& model, Fp64Options options)
      : config_(model.config()), store_{options.storage}, fault_(options.fault) {
    for (const Parameter* p : model.params().in_layout_order()) {
      const float* v = p->value.as<float>();
      w_[p->name] = Vec(v, v + p->numel);
    }
    for (const BufferEntry& b : model.buffers()) {
      const float* v = b.value.as<float>();
      buffers_[b.name] = Vec(v, v + b.numel);
    }
    const Tensor& in = model.input();
    input_ = Act(int(in.dim(0)), int(in.dim(1)), int(in.dim(2)), int(in.dim(3)));
    std::copy_n(in.as<float>(), in.numel(), input_.v.begin());
    const int32_t* labels = model.labels().as<int32_t>();
    labels_.assign(labels, labels + model.labels().numel());
  }

  StepResult step(const SgdConfig& sgd, double lr) {
    StepResult r;
    forward(r);
    backward();
    // PyTorch's SGD from zero momentum: g = grad + wd*w, buf = g, d = nesterov ? g + m*buf : buf.
    for (const auto& [name, w] : w_) {
      Vec& update = r.updates[name];
      update.resize(w.size());
      for (size_t i = 0; i < w.size(); ++i) {
        const double g = grads_[name][i] + double(sgd.weight_decay) * w[i];
        update[i] = -lr * (sgd.nesterov ? g + double(sgd.momentum) * g : g);
      }
    }
    r.before = w_;
    r.grads = grads_;
    r.buffers = buffers_;
    return r;
  }

 private:
  // The layers, with the bf16 step's roundings: weights as the products read them, convolution
  // outputs, weight gradients staged by cuDNN, activations after batch norm, activation gradients.
  Act conv(const std::string& name, const Act& x, const ConvGeometry& g) {
    return store_(conv_forward(x, store_(w_[name]), g));
  }
  void conv_back(const std::string& name, const Act& x, const Act& dy, const ConvGeometry& g, Act* dx) {
    conv_backward(x, store_(w_[name]), dy, g, grads_[name], dx, fault_);
    grads_[name] = store_(grads_[name]);
    if (dx) *dx = store_(*dx);
  }
  Act bn(const std::string& name, const Act& x, BatchNormCache& cache) {  // the pre-activation, unrounded
    return batchnorm_forward(x, w_[name + ".weight"], w_[name + ".bias"], buffers_[name + ".running_mean"],
                             buffers_[name + ".running_var"], cache);
  }
  Act bn_back(const std::string& name, const Act& dy, const BatchNormCache& cache) {
    return store_(batchnorm_backward(dy, w_[name + ".weight"], cache, grads_[name + ".weight"],
                                     grads_[name + ".bias"], fault_));
  }

  Act block_forward(Block& b, const Act& x) {
    b.x = x;
    Act shortcut = x;
    if (b.downsample) {
      b.ds_c = conv(b.name + ".downsample.0.weight", x, {b.K, 1, b.stride, 0});
      shortcut = store_(bn(b.name + ".downsample.1", b.ds_c, b.ds_bn));
    }
    b.c1 = conv(b.name + ".conv1.weight", x, {b.K, 3, b.stride, 1});
    b.z1 = bn(b.name + ".bn1", b.c1, b.bn1);
    b.y1 = store_(relu(b.z1));
    b.c2 = conv(b.name + ".conv2.weight", b.y1, {b.K, 3, 1, 1});
    b.z2 = bn(b.name + ".bn2", b.c2, b.bn2);
    for (size_t i = 0; i < b.z2.v.size(); ++i) b.z2.v[i] += shortcut.v[i];
    return store_(relu(b.z2));
  }

  Act block_backward(const Block& b, const Act& dy) {
    const Act dz2 = relu_backward(dy, b.z2);
    Act dy1 = b.y1.zeros_like();
    conv_back(b.name + ".conv2.weight", b.y1, bn_back(b.name + ".bn2", dz2, b.bn2), {b.K, 3, 1, 1}, &dy1);
    Act dx = b.x.zeros_like();
    conv_back(b.name + ".conv1.weight", b.x, bn_back(b.name + ".bn1", relu_backward(dy1, b.z1), b.bn1),
              {b.K, 3, b.stride, 1}, &dx);
    if (b.downsample) {
      conv_back(b.name + ".downsample.0.weight", b.x, bn_back(b.name + ".downsample.1", dz2, b.ds_bn),
                {b.K, 1, b.stride, 0}, &dx);
    } else {
      for (size_t i = 0; i < dx.v.size(); ++i) dx.v[i] += dz2.v[i];
    }
    return dx;
  }

  // The shapes come from the layer table (nn/resnet.h): the stem's convolution, whether a
  // max-pool follows it, and each block's width, stride and downsample. The math is this file's.
  void forward(StepResult& r) {
    const std::vector<LayerSpec> layers = resnet18_layout(config_).layers;
    auto find = [&](const std::string& name) {
      return std::find_if(layers.begin(), layers.end(), [&](const LayerSpec& l) { return l.name == name; });
    };
    const LayerSpec& stem = *find("conv1");
    maxpool_ = find("maxpool") != layers.end();
    stem_geometry_ = ConvGeometry{stem.output[3], stem.kernel, stem.stride, stem.pad};
    stem_c_ = conv("conv1.weight", input_, stem_geometry_);
    stem_z_ = bn("bn1", stem_c_, stem_bn_);
    Act y = store_(relu(stem_z_));
    if (maxpool_) {
      stem_y_ = y;
      y = maxpool_forward(stem_y_, maxpool_argmax_);
    }
    blocks_.clear();
    for (const LayerSpec& layer : layers) {
      if (!layer.name.starts_with("layer") || !layer.name.ends_with(".conv1")) continue;  // one per block
      const std::string block = layer.name.substr(0, layer.name.size() - std::string(".conv1").size());
      blocks_.emplace_back(block, layer.output[3], layer.stride, find(block + ".downsample.0") != layers.end());
      y = block_forward(blocks_.back(), y);
    }
    last_ = y;
    // Global average pool, then fc: logits = features W^T + b.
    const int N = y.N, F = y.C, classes = config_.num_classes;
    features_.assign(size_t(N) * F, 0.0);
    for (int n = 0; n < N; ++n)
      for (int hw = 0; hw < y.H * y.W; ++hw)
        for (int f = 0; f < F; ++f) features_[size_t(n) * F + f] += y.v[(size_t(n) * y.H * y.W + hw) * F + f];
    for (double& v : features_) v /= y.H * y.W;
    features_ = store_(features_);
    const Vec fc_w = store_(w_["fc.weight"]);
    const Vec& fc_b = w_["fc.bias"];
    r.logits.assign(size_t(N) * classes, 0.0);
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < classes; ++k) {
        double z = fc_b[k];
        for (int f = 0; f < F; ++f) z += features_[size_t(n) * F + f] * fc_w[size_t(k) * F + f];
        r.logits[size_t(n) * classes + k] = z;
      }
    // Softmax cross-entropy with label smoothing eps: target_k = (1 - eps)[k == label] + eps/K,
    // loss = mean_n (logsumexp(z_n) - sum_k target_k z_nk), dz = (softmax(z) - target) / N.
    const double eps = config_.label_smoothing;
    dlogits_.assign(r.logits.size(), 0.0);
    r.loss = 0;
    for (int n = 0; n < N; ++n) {
      const double* z = &r.logits[size_t(n) * classes];
      const double max = *std::max_element(z, z + classes);
      double sum_exp = 0;
      for (int k = 0; k < classes; ++k) sum_exp += std::exp(z[k] - max);
      const double logsumexp = max + std::log(sum_exp);
      for (int k = 0; k < classes; ++k) {
        const double target = (k == labels_[n] ? 1 - eps : 0.0) + eps / classes;
        r.loss += target * (logsumexp - z[k]) / N;
        dlogits_[size_t(n) * classes + k] = (std::exp(z[k] - logsumexp) - target) / N;
      }
    }
  }

  void backward() {
    const Act& y = last_;
    const int N = y.N, F = y.C, classes = config_.num_classes;
    const Vec fc_w = store_(w_["fc.weight"]);
    const Vec dlogits = store_(dlogits_);  // the products read dy in bf16; db sums it in fp32
    Vec& dw = grads_["fc.weight"];
    Vec& db = grads_["fc.bias"];
    dw.assign(fc_w.size(), 0.0);
    db.assign(size_t(classes), 0.0);
    Vec dfeatures(size_t(N) * F, 0.0);
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < classes; ++k) {
        const double g = dlogits[size_t(n) * classes + k];
        db[k] += dlogits_[size_t(n) * classes + k];
        axpy(g, &features_[size_t(n) * F], &dw[size_t(k) * F], F);
        axpy(g, &fc_w[size_t(k) * F], &dfeatures[size_t(n) * F], F);
      }
    Act dy = y.zeros_like();
    for (int n = 0; n < N; ++n)
      for (int hw = 0; hw < y.H * y.W; ++hw)
        for (int f = 0; f < F; ++f)
          dy.v[(size_t(n) * y.H * y.W + hw) * F + f] = store_(store_(dfeatures[size_t(n) * F + f]) / (y.H * y.W));
    for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) dy = block_backward(*it, dy);
    if (maxpool_) dy = maxpool_backward(dy, stem_y_, maxpool_argmax_);
    conv_back("conv1.weight", input_, bn_back("bn1", relu_backward(dy, stem_z_), stem_bn_), stem_geometry_, nullptr);
  }

  ResNetConfig config_;
  Store store_;
  Fault fault_;
  std::map<std::string, Vec> w_, grads_, buffers_;
  Act input_;
  std::vector<int> labels_;
  ConvGeometry stem_geometry_{};
  bool maxpool_ = false;  // the imagenet stem's
  Act stem_c_, stem_z_, stem_y_, last_;
  BatchNormCache stem_bn_;
  std::vector<size_t> maxpool_argmax_;
  std::vector<Block> blocks_;
  Vec features_, dlogits_;
};

}  // namespace

StepResult resnet18_step_fp64(const ResNet18& model, const SgdConfig& sgd, double lr, Fp64Options options) {
  if (model.context().on_gpu()) throw std::logic_error("resnet18_step_fp64: reads a CPU model's weights and batch");
  Fp64ResNet net(model, options);
  return net.step(sgd, lr);
}

}  // namespace cutrain::test
