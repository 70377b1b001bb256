// The CPU convolution: forward against the direct sum, both backward passes against
// finite differences, for 1x1 and 3x3 filters, stride 1 and 2, padding 0 and 1, and beta 0 and 1.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/conv2d_cpu.h"
#include "tests/gradcheck.h"

using namespace cutrain;

namespace {

size_t input_size(const ConvShape& s) { return size_t(s.N) * s.H * s.W * s.C; }
size_t output_size(const ConvShape& s) { return size_t(s.N) * s.P() * s.Q() * s.K; }
size_t filter_size(const ConvShape& s) { return size_t(s.K) * s.R * s.S * s.C; }

// y[n,p,q,o] = sum_{r,s,i} x[n, p*stride - pad + r, q*stride - pad + s, i] * w[o,r,s,i], summed
// in double.
std::vector<float> direct_conv(const std::vector<float>& x, const std::vector<float>& w, const ConvShape& sh) {
  std::vector<float> y(output_size(sh));
  for (int n = 0; n < sh.N; ++n)
    for (int p = 0; p < sh.P(); ++p)
      for (int q = 0; q < sh.Q(); ++q)
        for (int o = 0; o < sh.K; ++o) {
          double sum = 0;
          for (int r = 0; r < sh.R; ++r)
            for (int s = 0; s < sh.S; ++s) {
              const int h = p * sh.stride - sh.pad + r, ww = q * sh.stride - sh.pad + s;
              if (h < 0 || h >= sh.H || ww < 0 || ww >= sh.W) continue;
              const float* pixel = &x[((size_t(n) * sh.H + h) * sh.W + ww) * sh.C];
              const float* tap = &w[((size_t(o) * sh.R + r) * sh.S + s) * sh.C];
              for (int i = 0; i < sh.C; ++i) sum += double(pixel[i]) * tap[i];
            }
          y[((size_t(n) * sh.P() + p) * sh.Q() + q) * sh.K + o] = float(sum);
        }
  return y;
}

void check_convolution(const ConvShape& sh) {
  std::mt19937 rng(8);
  std::vector<float> x = test::random_vector(input_size(sh), rng), w = test::random_vector(filter_size(sh), rng),
                     y(output_size(sh));
  conv2d_forward_cpu(x.data(), w.data(), sh, y.data());
  // A float sum of up to R*S*C = 4608 products of values in [-1, 1) against the double sum: |y| is up
  // to ~25, and the float sum's rounding grows as sqrt(4608) * 6e-8 * 25 ~ 1e-4 in whatever order
  // oneDNN adds; a wrong tap or a missed channel is off by O(0.1).
  CHECK(test::max_abs_difference(y, direct_conv(x, w, sh)) <= 3e-4);

  const std::vector<float> r = test::random_vector(y.size(), rng);
  std::vector<float> dx(x.size(), NAN), dw(w.size(), NAN);  // beta = 0 must not read them
  conv2d_backward_data_cpu(r.data(), w.data(), sh, 0.0f, dx.data());
  conv2d_backward_filter_cpu(x.data(), r.data(), sh, 0.0f, dw.data());
  auto loss = [&] {
    conv2d_forward_cpu(x.data(), w.data(), sh, y.data());
    return test::weighted_sum(y, r);
  };
  // Linear in x and in w, so a large step costs no truncation error: h = 0.25. A nudge moves at
  // most R*S*K outputs (x) or N*P*Q outputs (w), each rounding by ~6e-8 * |y|; for the largest
  // case below (576 outputs of |y| ~ 25) that is ~sqrt(576)*1.5e-6/0.5 ~ 7e-5, against gradients
  // of size ~1-10; bound 1e-3 * (1 + |g|).
  test::check_gradient("dx", x, dx, loss, 0.25f, 1e-3);
  test::check_gradient("dw", w, dw, loss, 0.25f, 1e-3);

  // beta = 1 adds the gradient to what is there (a residual branch's input gradient).
  const std::vector<float> old_dx = test::random_vector(dx.size(), rng), old_dw = test::random_vector(dw.size(), rng);
  std::vector<float> dx_acc = old_dx, dw_acc = old_dw;
  conv2d_backward_data_cpu(r.data(), w.data(), sh, 1.0f, dx_acc.data());
  conv2d_backward_filter_cpu(x.data(), r.data(), sh, 1.0f, dw_acc.data());
  std::vector<float> dx_sum(dx.size()), dw_sum(dw.size());
  for (size_t i = 0; i < dx.size(); ++i) dx_sum[i] = old_dx[i] + dx[i];
  for (size_t i = 0; i < dw.size(); ++i) dw_sum[i] = old_dw[i] + dw[i];
  CHECK(test::max_abs_difference(dx_acc, dx_sum) <= 1e-5);
  CHECK(test::max_abs_difference(dw_acc, dw_sum) <= 1e-4);
}

}  // namespace

TEST_CASE("conv2d CPU: forward by definition, gradients by finite differences, beta 0 and 1", "[kernels]") {
  //                         N  H  W  C  K  R  S  stride pad
  const ConvShape shape = GENERATE(ConvShape{2, 5, 6, 3, 4, 3, 3, 1, 1},   // ResNet's 3x3
                                   ConvShape{2, 5, 6, 3, 4, 3, 3, 2, 1},   // 3x3 downsampling
                                   ConvShape{2, 5, 6, 3, 4, 1, 1, 1, 0},   // pointwise: no im2col
                                   ConvShape{2, 5, 6, 3, 4, 1, 1, 2, 0},   // the shortcut's 1x1/2
                                   ConvShape{2, 8, 8, 4, 8, 1, 1, 2, 0},   // a narrow model's (Note [Strided 1x1 filter gradients])
                                   ConvShape{2, 6, 5, 2, 3, 3, 3, 1, 0},   // unpadded
                                   ConvShape{1, 9, 9, 3, 2, 7, 7, 2, 3});  // the imagenet stem
  INFO("N " << shape.N << " H " << shape.H << " W " << shape.W << " C " << shape.C << " K " << shape.K << " R "
            << shape.R << " stride " << shape.stride << " pad " << shape.pad);
  check_convolution(shape);
}

TEST_CASE("conv2d CPU cuts a batch into pieces, a last smaller one among them, correctly", "[kernels]") {
  // Note [Convolution pieces]: 10 images are 10 pieces of one for the forward and the data gradient,
  // and 3 + 3 + 3 + 1 for the filter gradient, whose last piece has a primitive of its own; 17 are 8
  // pieces of two and a last of one.
  const ConvShape shape = GENERATE(ConvShape{10, 8, 8, 512, 2, 3, 3, 1, 1}, ConvShape{17, 6, 6, 16, 8, 3, 3, 1, 1});
  CAPTURE(shape.N);
  check_convolution(shape);
}
