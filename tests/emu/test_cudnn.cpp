// The emulated cuDNN (emu/cudnn.cpp): the three convolutions against naive loops for
// cutrain's shapes in fp32 and bf16 with alpha and beta, both layouts, the descriptor checks,
// pointers and workspaces that do not fit, the algorithm lists, and the injected faults of
// CUTRAIN_EMU_CUDNN_FAIL. Also batch norm's training calls against the CPU reference.
#include <catch2/catch.hpp>

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/base/check.h"
#include "kernels/batchnorm.h"
#include "kernels/conv2d_cpu.h"
#include "tests/batchnorm_buffers.h"
#include "tests/device_buffer.h"
#include "tests/emu/cudnn_convolution.h"
#include "tests/gradcheck.h"

using namespace cutrain;
using test::Convolution;
using test::cudnn_type;
using test::PoisonedBuffer;
using test::FaultScope;
using test::Pass;

namespace {

// Beside each sum, `magnitude` holds the sum of its terms' absolute values, which bounds the
// rounding error of adding the terms in any order (Note [Summation error] below).
struct Exact {
  std::vector<double> value, magnitude;
};

// The convolution by its definition, in double: x NHWC, w KRSC, y NHWC.
//   y[n,p,q,k] = sum_{r,s,c} x[n, p*stride - pad + r, q*stride - pad + s, c] * w[k,r,s,c]
// Each pass visits the same (output pixel, filter tap) pairs and accumulates where it writes.
Exact naive(Pass pass, const ConvShape& s, const std::vector<float>& x, const std::vector<float>& w,
            const std::vector<float>& dy) {
  const size_t size = pass == Pass::forward         ? size_t(s.N) * s.P() * s.Q() * s.K
                      : pass == Pass::backward_data ? size_t(s.N) * s.H * s.W * s.C
                                                    : size_t(s.K) * s.R * s.S * s.C;
  Exact out{std::vector<double>(size), std::vector<double>(size)};
  for (int n = 0; n < s.N; ++n)
    for (int p = 0; p < s.P(); ++p)
      for (int q = 0; q < s.Q(); ++q)
        for (int k = 0; k < s.K; ++k)
          for (int r = 0; r < s.R; ++r)
            for (int t = 0; t < s.S; ++t) {
              const int h = p * s.stride - s.pad + r, v = q * s.stride - s.pad + t;
              if (h < 0 || h >= s.H || v < 0 || v >= s.W) continue;
              for (int c = 0; c < s.C; ++c) {
                const size_t xi = ((size_t(n) * s.H + h) * s.W + v) * s.C + c;
                const size_t wi = ((size_t(k) * s.R + r) * s.S + t) * s.C + c;
                const size_t yi = ((size_t(n) * s.P() + p) * s.Q() + q) * s.K + k;
                const size_t at = pass == Pass::forward ? yi : pass == Pass::backward_data ? xi : wi;
                const double term = pass == Pass::forward         ? double(x[xi]) * w[wi]
                                    : pass == Pass::backward_data ? double(dy[yi]) * w[wi]
                                                                  : double(dy[yi]) * x[xi];
                out.value[at] += term;
                out.magnitude[at] += std::abs(term);
              }
            }
  return out;
}

// Note [Summation error]
// ~~~~~~~~~~~~~~~~~~~~~~
// A float sum of n terms, added in any order, is within (n - 1) * 2^-24 of the sum of the terms'
// absolute values from the exact sum (Higham, "Accuracy and Stability of Numerical Algorithms",
// section 4.2), and blocked, vectorised sums such as oneDNN's stay far inside that. Near zero,
// where large terms cancel, this is the error that rounding allows; a share of the result is not.
//
// Every element must be within what rounding allows of alpha * exact + beta * prior: 2^-17 of the
// terms' magnitude (128 float units; these sums have up to 196 terms), and a half unit in the last
// place of the result, which in bf16 is 1/256 (round to nearest even; truncation would be off by up
// to a whole unit). A wrong tap or a missed term is off by a whole product, most of them over 0.01.
template <typename T>
void require_close(const std::vector<float>& got, const Exact& exact, float alpha, float beta,
                   const std::vector<float>& prior) {
  REQUIRE(got.size() == exact.value.size());
  const double rounding = std::is_same_v<T, float> ? 0x1p-24 : 1.0 / 256;
  int wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double from_prior = beta != 0 ? beta * double(prior[i]) : 0.0;
    const double want = alpha * exact.value[i] + from_prior;
    const double summation = 0x1p-17 * (alpha * exact.magnitude[i] + std::abs(from_prior));
    if (!(std::abs(got[i] - want) <= rounding * std::abs(want) * 1.001 + summation)) ++wrong;
  }
  CHECK(wrong == 0);
}

// cutrain's shapes: a 3x3 stride-2 padded convolution, a 1x1 stride-2 downsample, the 7x7 stem
// (three input channels padded to four, as the GPU stem's), and a 3x3 stride-1 one.
const ConvShape kShapes[] = {{2, 9, 9, 3, 4, 3, 3, 2, 1},
                             {2, 8, 8, 4, 6, 1, 1, 2, 0},
                             {1, 16, 16, 4, 4, 7, 7, 2, 3},
                             {2, 6, 6, 5, 3, 3, 3, 1, 1}};

// The algorithm each pass runs in the tests: ones that need a workspace (GEMM's im2col, the fp32
// filter accumulator) and one that needs none.
int algo_for(Pass pass) {
  if (pass == Pass::forward) return CUDNN_CONVOLUTION_FWD_ALGO_GEMM;
  if (pass == Pass::backward_filter) return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  return CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
}

}  // namespace

TEMPLATE_TEST_CASE("emulated cuDNN: the three convolutions equal naive loops, with alpha and beta", "[emu]", float,
                   __nv_bfloat16) {
  std::mt19937 rng(2024);
  for (const ConvShape& s : kShapes) {
    CAPTURE(s.N, s.H, s.W, s.C, s.K, s.R, s.S, s.stride, s.pad);
    Convolution c(s, cudnn_type<TestType>());
    const auto x = test::rounded_to<TestType>(test::random_vector(size_t(s.N) * s.H * s.W * s.C, rng));
    const auto w = test::rounded_to<TestType>(test::random_vector(size_t(s.K) * s.R * s.S * s.C, rng));
    const auto dy = test::rounded_to<TestType>(test::random_vector(size_t(s.N) * s.P() * s.Q() * s.K, rng));
    PoisonedBuffer<TestType> x_d(test::convert_to<TestType>(x)), w_d(test::convert_to<TestType>(w)),
        dy_d(test::convert_to<TestType>(dy));
    for (Pass pass : {Pass::forward, Pass::backward_data, Pass::backward_filter}) {
      CAPTURE(int(pass));
      const int algo = algo_for(pass);
      const size_t ws_bytes = c.workspace(pass, algo);
      PoisonedBuffer<unsigned char> ws(std::max<size_t>(ws_bytes, 1));
      const void* a = pass == Pass::backward_data ? w_d.get() : x_d.get();
      const void* b = pass == Pass::forward ? w_d.get() : dy_d.get();
      const Exact exact = naive(pass, s, x, w, dy);
      // beta = 0 overwrites: the output starts as NaN (PoisonedBuffer's poison) and must not be read.
      PoisonedBuffer<TestType> out(exact.value.size());
      REQUIRE(c.run(pass, algo, 1.0f, a, b, 0.0f, out.get(), ws.get(), ws_bytes) == CUDNN_STATUS_SUCCESS);
      const std::vector<float> first = test::download(out);
      require_close<TestType>(first, exact, 1.0f, 0.0f, first);
      // beta = 1 accumulates onto what is there; alpha scales the convolution only.
      REQUIRE(c.run(pass, algo, 0.5f, a, b, 1.0f, out.get(), ws.get(), ws_bytes) == CUDNN_STATUS_SUCCESS);
      require_close<TestType>(test::download(out), exact, 0.5f, 1.0f, first);
    }
  }
}

TEST_CASE("emulated cuDNN: the non-deterministic algorithms add in another order each call, the others never",
          "[emu]") {
  // Note [Emulated atomics]: backward-data ALGO_0 and backward-filter ALGO_0 and ALGO_3 give other
  // bits from call to call, close to the naive loops all the same; ALGO_1 gives the same bits always.
  std::mt19937 rng(7);
  const ConvShape s{8, 6, 6, 8, 16, 3, 3, 1, 1};
  Convolution c(s, CUDNN_DATA_FLOAT);
  const auto x = test::random_vector(size_t(s.N) * s.H * s.W * s.C, rng);
  const auto w = test::random_vector(size_t(s.K) * s.R * s.S * s.C, rng);
  const auto dy = test::random_vector(size_t(s.N) * s.P() * s.Q() * s.K, rng);
  PoisonedBuffer<float> x_d(x), w_d(w), dy_d(dy);
  struct Case {
    Pass pass;
    int algo;
    bool deterministic;
  };
  for (const Case& k : {Case{Pass::backward_data, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, false},
                        Case{Pass::backward_data, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, true},
                        Case{Pass::backward_filter, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, false},
                        Case{Pass::backward_filter, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, false},
                        Case{Pass::backward_filter, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, true}}) {
    CAPTURE(int(k.pass), k.algo);
    const size_t ws_bytes = c.workspace(k.pass, k.algo);
    PoisonedBuffer<unsigned char> ws(std::max<size_t>(ws_bytes, 1));
    const void* a = k.pass == Pass::backward_data ? w_d.get() : x_d.get();
    const Exact exact = naive(k.pass, s, x, w, dy);
    PoisonedBuffer<float> out(exact.value.size());
    std::vector<std::vector<float>> results;
    for (int call = 0; call < 6; ++call) {
      REQUIRE(c.run(k.pass, k.algo, 1.0f, a, dy_d.get(), 0.0f, out.get(), ws.get(), ws_bytes) == CUDNN_STATUS_SUCCESS);
      results.push_back(test::download(out));
      require_close<float>(results.back(), exact, 1.0f, 0.0f, results.back());
    }
    const bool all_same = std::all_of(results.begin(), results.end(), [&](const auto& r) { return r == results[0]; });
    CHECK(all_same == k.deterministic);
  }
}

TEST_CASE("emulated cuDNN: NCHW tensors and KCRS filters are read and written in their layout", "[emu]") {
  std::mt19937 rng(2024);
  const ConvShape s{2, 7, 6, 3, 5, 3, 3, 2, 1};
  Convolution c(s, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW);
  const auto x = test::random_vector(size_t(s.N) * s.H * s.W * s.C, rng);
  const auto w = test::random_vector(size_t(s.K) * s.R * s.S * s.C, rng);
  // The same values in NCHW and KCRS order.
  std::vector<float> x_nchw(x.size()), w_kcrs(w.size());
  for (int n = 0; n < s.N; ++n)
    for (int h = 0; h < s.H; ++h)
      for (int v = 0; v < s.W; ++v)
        for (int ch = 0; ch < s.C; ++ch)
          x_nchw[((size_t(n) * s.C + ch) * s.H + h) * s.W + v] = x[((size_t(n) * s.H + h) * s.W + v) * s.C + ch];
  for (int k = 0; k < s.K; ++k)
    for (int r = 0; r < s.R; ++r)
      for (int t = 0; t < s.S; ++t)
        for (int ch = 0; ch < s.C; ++ch)
          w_kcrs[((size_t(k) * s.C + ch) * s.R + r) * s.S + t] = w[((size_t(k) * s.R + r) * s.S + t) * s.C + ch];
  PoisonedBuffer<float> x_d(x_nchw), w_d(w_kcrs), y_d(size_t(s.N) * s.K * s.P() * s.Q());
  REQUIRE(c.run(Pass::forward, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, 1.0f, x_d.get(), w_d.get(), 0.0f, y_d.get(),
                nullptr, 0) == CUDNN_STATUS_SUCCESS);
  const std::vector<float> y_nchw = y_d.copy_to_host();
  const Exact exact = naive(Pass::forward, s, x, w, {});
  std::vector<float> y(y_nchw.size());
  for (int n = 0; n < s.N; ++n)
    for (int p = 0; p < s.P(); ++p)
      for (int q = 0; q < s.Q(); ++q)
        for (int k = 0; k < s.K; ++k)
          y[((size_t(n) * s.P() + p) * s.Q() + q) * s.K + k] = y_nchw[((size_t(n) * s.K + k) * s.P() + p) * s.Q() + q];
  require_close<float>(y, exact, 1.0f, 0.0f, y);
}

TEST_CASE("emulated cuDNN: descriptors are checked as cuDNN documents", "[emu]") {
  cudnnTensorDescriptor_t t = nullptr;
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&t));
  CHECK(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, 0, 3, 8, 8) == CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, 1, -3, 8, 8) == CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetTensor4dDescriptor(t, cudnnTensorFormat_t(7), CUDNN_DATA_FLOAT, 1, 3, 8, 8) == CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NHWC, cudnnDataType_t(99), 1, 3, 8, 8) == CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, 1 << 16, 1 << 16, 2, 1) ==
        CUDNN_STATUS_NOT_SUPPORTED);
  CHECK(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, 1, 3, 8, 8) == CUDNN_STATUS_SUCCESS);
  CUDNN_CHECK(cudnnDestroyTensorDescriptor(t));

  cudnnConvolutionDescriptor_t conv = nullptr;
  CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
  CHECK(cudnnSetConvolution2dDescriptor(conv, -1, -1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
        CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetConvolution2dDescriptor(conv, 1, 1, 0, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
        CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetConvolution2dDescriptor(conv, 1, 1, 1, 1, 0, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
        CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetConvolutionMathType(conv, cudnnMathType_t(9)) == CUDNN_STATUS_BAD_PARAM);
  CUDNN_CHECK(cudnnDestroyConvolutionDescriptor(conv));

  // Descriptors that do not fit each other fail where they are used together.
  const ConvShape s{2, 8, 8, 4, 6, 3, 3, 1, 1};
  Convolution c(s, CUDNN_DATA_FLOAT);
  size_t bytes = 0;
  auto workspace_query = [&] {
    return cudnnGetConvolutionForwardWorkspaceSize(c.handle, c.x, c.w, c.conv, c.y,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, &bytes);
  };
  REQUIRE(workspace_query() == CUDNN_STATUS_SUCCESS);
  SECTION("a filter with other input channels") {
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(c.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, s.K, s.C + 1, s.R, s.S));
    CHECK(workspace_query() == CUDNN_STATUS_BAD_PARAM);
  }
  SECTION("an output of the wrong size") {
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(c.y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, s.N, s.K, s.P() + 1, s.Q()));
    CHECK(workspace_query() == CUDNN_STATUS_BAD_PARAM);
  }
  SECTION("data types that differ") {
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(c.y, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, s.N, s.K, s.P(), s.Q()));
    CHECK(workspace_query() == CUDNN_STATUS_BAD_PARAM);
  }
  SECTION("a compute type other than float") {
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(c.conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_HALF));
    CHECK(workspace_query() == CUDNN_STATUS_NOT_SUPPORTED);
  }
  SECTION("a dilation the emulation does not compute") {
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(c.conv, 2, 2, 1, 1, 2, 2, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CHECK(workspace_query() == CUDNN_STATUS_NOT_SUPPORTED);
  }
  SECTION("an algorithm that does not compute the shape, and one that does not exist") {
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(c.conv, 1, 1, 2, 2, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(c.y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, s.N, s.K, 4, 4));
    CHECK(cudnnGetConvolutionForwardWorkspaceSize(c.handle, c.x, c.w, c.conv, c.y, CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD,
                                                  &bytes) == CUDNN_STATUS_NOT_SUPPORTED);
    CHECK(cudnnGetConvolutionForwardWorkspaceSize(c.handle, c.x, c.w, c.conv, c.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                  &bytes) == CUDNN_STATUS_BAD_PARAM);
  }
}

TEST_CASE("emulated cuDNN: pointers outside a device allocation of the descriptor's size are refused", "[emu]") {
  const ConvShape s{2, 8, 8, 4, 6, 3, 3, 1, 1};
  Convolution c(s, CUDNN_DATA_FLOAT);
  const size_t x_n = size_t(s.N) * s.H * s.W * s.C, w_n = size_t(s.K) * s.R * s.S * s.C,
               y_n = size_t(s.N) * s.P() * s.Q() * s.K;
  PoisonedBuffer<float> x(x_n), w(w_n), y(y_n), short_y(y_n - 1);
  std::vector<float> host_x(x_n);
  const int algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  REQUIRE(c.run(Pass::forward, algo, 1.0f, x.get(), w.get(), 0.0f, y.get(), nullptr, 0) == CUDNN_STATUS_SUCCESS);
  CHECK(c.run(Pass::forward, algo, 1.0f, host_x.data(), w.get(), 0.0f, y.get(), nullptr, 0) == CUDNN_STATUS_BAD_PARAM);
  CHECK(c.run(Pass::forward, algo, 1.0f, x.get() + 1, w.get(), 0.0f, y.get(), nullptr, 0) == CUDNN_STATUS_BAD_PARAM);
  CHECK(c.run(Pass::forward, algo, 1.0f, x.get(), w.get(), 0.0f, short_y.get(), nullptr, 0) == CUDNN_STATUS_BAD_PARAM);
  CHECK(c.run(Pass::forward, algo, 1.0f, nullptr, w.get(), 0.0f, y.get(), nullptr, 0) == CUDNN_STATUS_BAD_PARAM);
  const std::string why = cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM);
  CHECK(why.find("the first input is null") != std::string::npos);
  float* freed = nullptr;
  CUDA_CHECK(cudaMalloc(&freed, y_n * sizeof(float)));
  CUDA_CHECK(cudaFree(freed));
  CHECK(c.run(Pass::forward, algo, 1.0f, x.get(), w.get(), 0.0f, freed, nullptr, 0) == CUDNN_STATUS_BAD_PARAM);
}

// Note [Emulated cuDNN faults] and the workspace rules of cudnn.cpp's convolve.
TEST_CASE("emulated cuDNN: a workspace smaller than the algorithm asks for fails, and holds garbage after use",
          "[emu]") {
  const ConvShape s{2, 8, 8, 4, 6, 3, 3, 2, 1};
  Convolution c(s, CUDNN_DATA_FLOAT);
  PoisonedBuffer<float> x(size_t(s.N) * s.H * s.W * s.C), dy(size_t(s.N) * s.P() * s.Q() * s.K),
      dw(size_t(s.K) * s.R * s.S * s.C);
  CUDA_CHECK(cudaMemset(x.get(), 0, x.size() * sizeof(float)));
  CUDA_CHECK(cudaMemset(dy.get(), 0, dy.size() * sizeof(float)));
  for (Pass pass : {Pass::forward, Pass::backward_filter}) {
    const int algo = algo_for(pass);
    const size_t needed = c.workspace(pass, algo);
    REQUIRE(needed > 0);
    PoisonedBuffer<unsigned char> ws(needed);
    CUDA_CHECK(cudaMemset(ws.get(), 0, needed));
    // The legacy stream's memsets are not ordered before the handle's non-blocking stream: wait.
    CUDA_CHECK(cudaDeviceSynchronize());
    void* out = pass == Pass::forward ? static_cast<void*>(dy.get()) : dw.get();
    const void* b = pass == Pass::forward ? static_cast<const void*>(dw.get()) : dy.get();
    CHECK(c.run(pass, algo, 1.0f, x.get(), b, 0.0f, out, ws.get(), needed - 1) == CUDNN_STATUS_BAD_PARAM);
    CHECK(c.run(pass, algo, 1.0f, x.get(), b, 0.0f, out, nullptr, needed) == CUDNN_STATUS_BAD_PARAM);
    CHECK(c.run(pass, algo, 1.0f, x.get(), b, 0.0f, out, ws.get(), needed + 1) == CUDNN_STATUS_BAD_PARAM);
    REQUIRE(c.run(pass, algo, 1.0f, x.get(), b, 0.0f, out, ws.get(), needed) == CUDNN_STATUS_SUCCESS);
    CUDA_CHECK(cudaDeviceSynchronize());  // nor is the convolution before the legacy stream's copy
    const std::vector<unsigned char> after = ws.copy_to_host();
    CHECK(std::count(after.begin(), after.end(), 0) < long(needed / 16));
  }
}

TEST_CASE("emulated cuDNN: the heuristics and Find rank the algorithms with their workspaces", "[emu]") {
  const ConvShape s{2, 8, 8, 4, 6, 3, 3, 2, 1};  // stride 2: no FFT, no Winograd
  Convolution c(s, CUDNN_DATA_BFLOAT16);
  CUDNN_CHECK(cudnnSetConvolutionMathType(c.conv, CUDNN_TENSOR_OP_MATH));
  int count = 0;
  CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(c.handle, &count));
  REQUIRE(count == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
  for (bool measure : {false, true}) {
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(count));
    int got = 0;
    if (measure) {
      CUDNN_CHECK(
          cudnnFindConvolutionBackwardFilterAlgorithm(c.handle, c.x, c.y, c.conv, c.w, count, &got, perf.data()));
    } else {
      CUDNN_CHECK(
          cudnnGetConvolutionBackwardFilterAlgorithm_v7(c.handle, c.x, c.y, c.conv, c.w, count, &got, perf.data()));
    }
    REQUIRE(got == count);
    bool failed_seen = false;
    for (const auto& p : perf) {
      CAPTURE(measure, int(p.algo), int(p.status));
      CHECK(p.mathType == CUDNN_TENSOR_OP_MATH);
      if (p.status != CUDNN_STATUS_SUCCESS) {
        failed_seen = true;
        continue;
      }
      CHECK_FALSE(failed_seen);  // those that run come first
      CHECK(p.memory == c.workspace(Pass::backward_filter, p.algo));
      CHECK(p.time >= 0.0f);
      const bool nondeterministic =
          p.algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || p.algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
      CHECK((p.determinism == CUDNN_NON_DETERMINISTIC) == nondeterministic);
    }
    CHECK(failed_seen);  // FFT and Winograd do not compute stride 2
  }
}

TEST_CASE("emulated cuDNN: CUTRAIN_EMU_CUDNN_FAIL makes a chosen pass and algorithm fail", "[emu]") {
  std::mt19937 rng(2024);
  const ConvShape s{1, 6, 6, 4, 4, 3, 3, 1, 1};
  Convolution c(s, CUDNN_DATA_FLOAT);
  const size_t x_n = size_t(s.N) * s.H * s.W * s.C, w_n = size_t(s.K) * s.R * s.S * s.C;
  PoisonedBuffer<float> x(test::random_vector(x_n, rng)), w(test::random_vector(w_n, rng)),
      dy(test::random_vector(x_n, rng)), dx(x_n), y(x_n);
  const float zero = 0.0f;
  auto backward_data = [&](int algo) {
    return c.run(Pass::backward_data, algo, 1.0f, w.get(), dy.get(), zero, dx.get(), nullptr, 0);
  };
  // Algorithm 1's status in cudnnFind's list (measure) or in the _v7 heuristics' list.
  auto listed_status = [&](bool measure) {
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
    int got = 0;
    if (measure) {
      CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(c.handle, c.w, c.y, c.conv, c.x, int(perf.size()), &got,
                                                            perf.data()));
    } else {
      CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(c.handle, c.w, c.y, c.conv, c.x, int(perf.size()), &got,
                                                              perf.data()));
    }
    for (const auto& p : perf)
      if (p.algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1) return p.status;
    return CUDNN_STATUS_INTERNAL_ERROR;
  };
  REQUIRE(backward_data(CUDNN_CONVOLUTION_BWD_DATA_ALGO_1) == CUDNN_STATUS_SUCCESS);
  {
    FaultScope fault("forward:algo=any:execution_failed,backward_data:algo=1:not_supported");
    CHECK(backward_data(CUDNN_CONVOLUTION_BWD_DATA_ALGO_1) == CUDNN_STATUS_NOT_SUPPORTED);
    CHECK(std::string(cudnnGetErrorString(CUDNN_STATUS_NOT_SUPPORTED)).find("CUTRAIN_EMU_CUDNN_FAIL") !=
          std::string::npos);
    CHECK(backward_data(CUDNN_CONVOLUTION_BWD_DATA_ALGO_0) == CUDNN_STATUS_SUCCESS);
    CHECK(listed_status(true) == CUDNN_STATUS_NOT_SUPPORTED);  // Find runs the algorithm,
    CHECK(listed_status(false) == CUDNN_STATUS_SUCCESS);       // the heuristics do not
    CHECK(c.run(Pass::forward, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, 1.0f, x.get(), w.get(), zero, y.get(),
                nullptr, 0) == CUDNN_STATUS_EXECUTION_FAILED);
    CHECK(c.run(Pass::backward_filter, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, 1.0f, x.get(), dy.get(), zero, w.get(),
                nullptr, 0) == CUDNN_STATUS_SUCCESS);
  }
  CHECK(backward_data(CUDNN_CONVOLUTION_BWD_DATA_ALGO_1) == CUDNN_STATUS_SUCCESS);
  CHECK(listed_status(true) == CUDNN_STATUS_SUCCESS);
}

TEST_CASE("emulated cuDNN: a handle takes only a live stream", "[emu]") {
  cudnnHandle_t handle = nullptr;
  CUDNN_CHECK(cudnnCreate(&handle));
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  CHECK(cudnnSetStream(handle, stream) == CUDNN_STATUS_SUCCESS);
  CUDA_CHECK(cudaStreamDestroy(stream));
  CHECK(cudnnSetStream(handle, stream) == CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetStream(handle, nullptr) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnGetVersion() == CUDNN_VERSION);
  CUDNN_CHECK(cudnnDestroy(handle));
}

TEST_CASE("emulated cuDNN: batch norm is the CPU reference's, and refuses what it does not compute", "[emu]") {
  // cudnnBatchNormalizationForwardTrainingEx and BackwardEx as nn/cudnn_batchnorm.h calls them:
  // NHWC, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, float statistics of 1xCx1x1, the reserve space from
  // the forward to the backward. The fused ops take half only (Note [cuDNN's batch norm types]),
  // which the emulation does not compute, so it computes plain batch norm.
  const int N = 2, H = 3, W = 5, C = 16;
  const BatchNormShape shape{N * H * W, C, BatchNormFusion{}};
  const int64_t n = shape.rows * C;
  std::mt19937 rng(41);
  test::BatchNormInputs in{test::random_vector(n, rng),        test::random_vector(n, rng),
                           test::random_vector(n, rng),        test::random_vector(C, rng, 0.5f, 1.5f),
                           test::random_vector(C, rng),        test::random_vector(C, rng),
                           test::random_vector(C, rng, 0.5f, 2.0f)};
  test::HostBatchNorm cpu(shape, in);
  bn_forward_train_cpu(shape, cpu.forward());
  bn_backward_cpu(shape, cpu.backward());

  cudnnHandle_t handle = nullptr;
  CUDNN_CHECK(cudnnCreate(&handle));
  cudnnTensorDescriptor_t xd = nullptr, bf16 = nullptr, sd = nullptr, wrong = nullptr;
  cudnnActivationDescriptor_t relu = nullptr;
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&xd));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, N, C, H, W));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&bf16));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(bf16, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, N, C, H, W));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&sd));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(sd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, C, 1, 1));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&wrong));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(wrong, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, C / 2, 1, 1));
  CUDNN_CHECK(cudnnCreateActivationDescriptor(&relu));
  CUDNN_CHECK(cudnnSetActivationDescriptor(relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
  const cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
  const cudnnBatchNormOps_t ops = CUDNN_BATCHNORM_OPS_BN;
  size_t reserve_bytes = 1, workspace_bytes = 1;
  // The fused ops on fp32 and bf16, refused in each size query and call with cuDNN's status.
  for (cudnnTensorDescriptor_t d : {xd, bf16}) {
    for (cudnnBatchNormOps_t fused : {CUDNN_BATCHNORM_OPS_BN_ACTIVATION, CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION}) {
      cudnnTensorDescriptor_t z = fused == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION ? d : nullptr;
      CHECK(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(handle, mode, fused, d, z, d, sd, relu,
                                                                     &workspace_bytes) == CUDNN_STATUS_NOT_SUPPORTED);
      CHECK_THAT(cudnnGetErrorString(CUDNN_STATUS_NOT_SUPPORTED), Catch::Contains("CUDNN_DATA_HALF only"));
      CHECK(cudnnGetBatchNormalizationBackwardExWorkspaceSize(handle, mode, fused, d, d, d, z, d, sd, relu,
                                                              &workspace_bytes) == CUDNN_STATUS_NOT_SUPPORTED);
      CHECK(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, mode, fused, relu, d, &reserve_bytes) ==
            CUDNN_STATUS_NOT_SUPPORTED);
    }
    CUDNN_CHECK(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(handle, mode, ops, d, nullptr, d, sd, nullptr,
                                                                         &workspace_bytes));
  }
  CUDNN_CHECK(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, mode, ops, nullptr, xd, &reserve_bytes));
  CHECK(reserve_bytes == 0);
  // What the emulation does not compute, or what does not fit, refused with the reason.
  CHECK(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(handle, CUDNN_BATCHNORM_SPATIAL, ops, xd, nullptr, xd,
                                                                 sd, nullptr, &workspace_bytes) ==
        CUDNN_STATUS_NOT_SUPPORTED);
  CHECK_THAT(cudnnGetErrorString(CUDNN_STATUS_NOT_SUPPORTED), Catch::Contains("CUDNN_BATCHNORM_SPATIAL_PERSISTENT"));
  CHECK(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(handle, mode, ops, xd, nullptr, xd, wrong, nullptr,
                                                                 &workspace_bytes) == CUDNN_STATUS_BAD_PARAM);
  CHECK_THAT(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM), Catch::Contains("not float 1x16x1x1"));

  test::BatchNormBuffers<float> on(shape, in);
  const BatchNormForward<float> f = on.forward();
  const BatchNormBackward<float> b = on.backward();
  const float one = 1.0f, zero = 0.0f;
  const auto forward = [&](cudnnBatchNormOps_t o) {
    return cudnnBatchNormalizationForwardTrainingEx(handle, mode, o, &one, &zero, xd, f.x, nullptr, nullptr, xd, f.y,
                                                    sd, f.gamma, f.beta, 0.1, f.running_mean, f.running_var, 1e-5,
                                                    f.mean, f.invstd, o == ops ? nullptr : relu, nullptr, 0, nullptr,
                                                    0);
  };
  CHECK(forward(CUDNN_BATCHNORM_OPS_BN_ACTIVATION) == CUDNN_STATUS_NOT_SUPPORTED);
  CUDNN_CHECK(forward(ops));
  CHECK(cudnnBatchNormalizationBackwardEx(handle, mode, CUDNN_BATCHNORM_OPS_BN_ACTIVATION, &one, &zero, &one, &zero,
                                          xd, b.x, xd, f.y, xd, b.dy, nullptr, nullptr, xd, b.dx, sd, b.gamma, f.beta,
                                          b.dgamma, b.dbeta, 1e-5, b.mean, b.invstd, relu, nullptr, 0, nullptr,
                                          0) == CUDNN_STATUS_NOT_SUPPORTED);
  CUDNN_CHECK(cudnnBatchNormalizationBackwardEx(handle, mode, ops, &one, &zero, &one, &zero, xd, b.x, xd, f.y, xd,
                                                b.dy, nullptr, nullptr, xd, b.dx, sd, b.gamma, f.beta, b.dgamma,
                                                b.dbeta, 1e-5, b.mean, b.invstd, nullptr, nullptr, 0, nullptr, 0));
  CHECK(on.y.download() == cpu.y);
  CHECK(test::download(on.mean) == cpu.mean);
  CHECK(test::download(on.invstd) == cpu.invstd);
  CHECK(test::download(on.running_mean) == cpu.running_mean);
  CHECK(test::download(on.running_var) == cpu.running_var);
  CHECK(on.dx.download() == cpu.dx);
  CHECK(test::download(on.dgamma) == cpu.dgamma);
  CHECK(test::download(on.dbeta) == cpu.dbeta);
  CUDNN_CHECK(cudnnDestroyActivationDescriptor(relu));
  for (cudnnTensorDescriptor_t d : {xd, bf16, sd, wrong}) CUDNN_CHECK(cudnnDestroyTensorDescriptor(d));
  CUDNN_CHECK(cudnnDestroy(handle));
}
