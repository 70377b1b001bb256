// batchnorm_buffers.h: one batch norm's tensors for the tests, with the argument structs of
// kernels/batchnorm.h that point at them: on the host for the CPU reference (HostBatchNorm), and
// on the device (BatchNormBuffers), each poisoned (NaN) until a kernel writes it. Activations on
// the device may start `offset` elements into their allocation: offset 1 takes every row off the
// 16-byte boundary of the packs, which the launchers must notice.
#pragma once

#include <utility>
#include <vector>

#include "kernels/batchnorm.h"
#include "tests/device_buffer.h"

namespace cutrain::test {

template <typename T>
class Activations {
 public:
  Activations(size_t n, int offset) : buffer_(n + size_t(offset)), offset_(offset) {}
  Activations(const std::vector<float>& values, int offset) : Activations(values.size(), offset) {
    std::vector<float> padded(size_t(offset), 0.0f);
    padded.insert(padded.end(), values.begin(), values.end());
    buffer_.copy_from(convert_to<T>(padded));
  }
  T* get() const { return buffer_.get() + offset_; }
  std::vector<float> download() const {
    const std::vector<float> all = test::download(buffer_);
    return std::vector<float>(all.begin() + offset_, all.end());
  }
  std::vector<T> raw() const {
    const std::vector<T> all = buffer_.copy_to_host();
    return std::vector<T>(all.begin() + offset_, all.end());
  }

 private:
  PoisonedBuffer<T> buffer_;
  int offset_;
};

// The host's values of a batch norm's inputs: x, residual and dy of rows*channels; the rest of
// channels.
struct BatchNormInputs {
  std::vector<float> x, residual, dy, gamma, beta, running_mean, running_var;
};

// Every output on the host, sized for the shape; the running statistics start as the inputs'.
struct HostBatchNorm {
  HostBatchNorm(const BatchNormShape& shape, BatchNormInputs inputs)
      : in(std::move(inputs)),
        y(in.x.size()),
        mean(in.gamma.size()),
        invstd(in.gamma.size()),
        running_mean(in.running_mean),
        running_var(in.running_var),
        dx(in.x.size()),
        d_residual(in.x.size()),
        dgamma(in.gamma.size()),
        dbeta(in.gamma.size()),
        mask(size_t(bn_mask_bytes(shape))) {}

  BatchNormForward<float> forward() {
    BatchNormForward<float> f;
    f.x = in.x.data();
    f.residual = in.residual.data();
    f.gamma = in.gamma.data();
    f.beta = in.beta.data();
    f.y = y.data();
    f.relu_mask = mask.data();
    f.mean = mean.data();
    f.invstd = invstd.data();
    f.running_mean = running_mean.data();
    f.running_var = running_var.data();
    return f;
  }
  // Reads the mean, invstd and mask the forward wrote here.
  BatchNormBackward<float> backward() {
    BatchNormBackward<float> b;
    b.x = in.x.data();
    b.dy = in.dy.data();
    b.relu_mask = mask.data();
    b.mean = mean.data();
    b.invstd = invstd.data();
    b.gamma = in.gamma.data();
    b.dx = dx.data();
    b.d_residual = d_residual.data();
    b.dgamma = dgamma.data();
    b.dbeta = dbeta.data();
    return b;
  }

  BatchNormInputs in;
  std::vector<float> y, mean, invstd, running_mean, running_var, dx, d_residual, dgamma, dbeta;
  std::vector<uint8_t> mask;
};

template <typename T>
struct BatchNormBuffers {
  BatchNormBuffers(const BatchNormShape& shape, const BatchNormInputs& in, int offset = 0)
      : x(in.x, offset),
        residual(in.residual, offset),
        dy(in.dy, offset),
        y(in.x.size(), offset),
        dx(in.x.size(), offset),
        d_residual(in.x.size(), offset),
        gamma(in.gamma),
        beta(in.beta),
        running_mean(in.running_mean),
        running_var(in.running_var),
        mean(in.gamma.size()),
        invstd(in.gamma.size()),
        dgamma(in.gamma.size()),
        dbeta(in.gamma.size()),
        mask(size_t(bn_mask_bytes(shape))) {}

  BatchNormForward<T> forward() const {
    BatchNormForward<T> f;
    f.x = x.get();
    f.residual = residual.get();
    f.gamma = gamma.get();
    f.beta = beta.get();
    f.y = y.get();
    f.relu_mask = mask.get();
    f.mean = mean.get();
    f.invstd = invstd.get();
    f.running_mean = running_mean.get();
    f.running_var = running_var.get();
    return f;
  }
  // Reads the mean, invstd and mask the forward wrote here.
  BatchNormBackward<T> backward() const {
    BatchNormBackward<T> b;
    b.x = x.get();
    b.dy = dy.get();
    b.relu_mask = mask.get();
    b.mean = mean.get();
    b.invstd = invstd.get();
    b.gamma = gamma.get();
    b.dx = dx.get();
    b.d_residual = d_residual.get();
    b.dgamma = dgamma.get();
    b.dbeta = dbeta.get();
    return b;
  }

  Activations<T> x, residual, dy, y, dx, d_residual;
  PoisonedBuffer<float> gamma, beta, running_mean, running_var, mean, invstd, dgamma, dbeta;
  PoisonedBuffer<uint8_t> mask;
};

// The prologue's z (Note [Batch norm before a fused convolution]), each product and sum rounded
// to fp32 on its own: the volatile keeps the compiler from fusing them.
inline float prologue_z(float x, float scale, float shift) {
  const volatile float product = x * scale;
  return product + shift;
}

}  // namespace cutrain::test
