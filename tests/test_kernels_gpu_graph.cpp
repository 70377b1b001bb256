// The CUDA launchers of kernels/ for batch norm, pooling, the loss, SGD and the bf16 cast can be
// captured in a CUDA graph: none allocates, synchronises or touches the legacy default stream, so a
// whole training step can be captured and replayed. Batch norm's launches are cooperative, and a
// replay keeps them so; their reductions have a fixed order, so a replay gives the eager bits.
#include <catch2/catch.hpp>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/batchnorm.h"
#include "kernels/cast.h"
#include "kernels/check.h"
#include "kernels/cross_entropy.h"
#include "kernels/pooling.h"
#include "kernels/sgd.h"
#include "tests/device_buffer.h"
#include "tests/gpu.h"
#include "tests/gradcheck.h"

using namespace cutrain;
using test::DeviceBuffer;

namespace {

bool all_finite(const std::vector<float>& values) {
  for (float v : values)
    if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace

TEST_CASE("the CUDA kernels can be captured in a CUDA graph and replayed", "[gpu]") {
  CUTRAIN_REQUIRE_GPU();
  using T = __nv_bfloat16;
  const int N = 4, H = 8, W = 8, C = 64, K = 10;
  const int64_t M = int64_t(N) * H * W;
  const int Ho = maxpool_out_size(H), Wo = maxpool_out_size(W);
  const BatchNormFusion fusion{true, true};
  std::mt19937 rng(61);
  DeviceBuffer<T> x(test::convert_to<T>(test::random_vector(M * C, rng))), y(M * C), dx(M * C), d_res(M * C),
      pooled(int64_t(N) * Ho * Wo * C), dpool(M * C), features(int64_t(N) * C), dfeatures(M * C);
  DeviceBuffer<float> gamma(test::random_vector(C, rng)), beta(test::random_vector(C, rng)),
      running_mean(std::vector<float>(C, 0.0f)), running_var(std::vector<float>(C, 1.0f)), mean(C), invstd(C),
      dgamma(C), dbeta(C), logits(test::random_vector(int64_t(N) * K, rng)), dlogits(int64_t(N) * K), loss(1),
      param(test::random_vector(1000, rng)), grad(test::random_vector(1000, rng)),
      momentum(std::vector<float>(1000, 0.0f)), lr(std::vector<float>{0.1f}), back(M * C);
  DeviceBuffer<int32_t> labels(std::vector<int32_t>{1, 2, 3, 4}), correct(1);
  DeviceBuffer<int64_t> total_correct(std::vector<int64_t>{0});
  DeviceBuffer<T> param_bf16(1000);
  const BatchNormShape shape{M, C, fusion};
  const BatchNormPlan forward_plan = bn_plan(BatchNormPass::forward_train, shape, sizeof(T), bn_device_of_current_gpu());
  const BatchNormPlan backward_plan = bn_plan(BatchNormPass::backward, shape, sizeof(T), bn_device_of_current_gpu());
  DeviceBuffer<float> partials(size_t(std::max(forward_plan.partial_floats, backward_plan.partial_floats)));
  DeviceBuffer<uint8_t> mask(size_t(bn_mask_bytes(shape)));
  BatchNormForward<T> f;
  f.x = x.get();
  f.residual = x.get();
  f.gamma = gamma.get();
  f.beta = beta.get();
  f.y = y.get();
  f.relu_mask = mask.get();
  f.mean = mean.get();
  f.invstd = invstd.get();
  f.running_mean = running_mean.get();
  f.running_var = running_var.get();
  BatchNormBackward<T> b;
  b.x = x.get();
  b.dy = dfeatures.get();
  b.relu_mask = mask.get();
  b.mean = mean.get();
  b.invstd = invstd.get();
  b.gamma = gamma.get();
  b.dx = dx.get();
  b.d_residual = d_res.get();
  b.dgamma = dgamma.get();
  b.dbeta = dbeta.get();

  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  bn_forward_train_cuda<T>(forward_plan, f, partials.get(), stream);
  maxpool3x3s2_forward_cuda<T>(y.get(), N, H, W, C, pooled.get(), stream);
  maxpool3x3s2_backward_cuda<T>(y.get(), pooled.get(), N, H, W, C, dpool.get(), stream);
  global_avgpool_forward_cuda<T>(y.get(), N, H, W, C, features.get(), stream);
  global_avgpool_backward_cuda<T>(features.get(), N, H, W, C, dfeatures.get(), stream);
  bn_backward_cuda<T>(backward_plan, b, partials.get(), stream);
  softmax_cross_entropy_cuda(logits.get(), labels.get(), N, K, 0.1f, loss.get(), dlogits.get(), correct.get(), stream);
  count_correct_cuda(logits.get(), labels.get(), N, K, total_correct.get(), nullptr, nullptr, stream);
  sgd_step_cuda(param.get(), grad.get(), momentum.get(), param_bf16.get(), 1000, lr.get(), SgdConfig{}, stream);
  cast_bf16_to_f32_cuda(dx.get(), back.get(), M * C, stream);
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<T> first_y = y.copy_to_host(), first_dx = dx.copy_to_host();
  CUDA_CHECK(cudaGraphLaunch(exec, stream));  // a replay: count_correct adds, the rest rewrites
  CUDA_CHECK(cudaStreamSynchronize(stream));

  CHECK(all_finite(test::download(y)));
  CHECK(all_finite(test::download(pooled)));
  CHECK(all_finite(test::download(dpool)));
  CHECK(all_finite(test::download(dx)));
  // Batch norm's reductions: the same bits on the replay (its input x is the same; the running
  // statistics it also updates do not enter y or dx).
  const auto bits = [](const std::vector<T>& v) {
    std::vector<uint16_t> out(v.size());
    std::memcpy(out.data(), v.data(), v.size() * sizeof(T));
    return out;
  };
  CHECK(bits(y.copy_to_host()) == bits(first_y));
  CHECK(bits(dx.copy_to_host()) == bits(first_dx));
  CHECK(all_finite(test::download(d_res)));
  CHECK(all_finite(back.copy_to_host()));
  CHECK(all_finite(dlogits.copy_to_host()));
  CHECK(all_finite(test::download(param_bf16)));
  CHECK(std::isfinite(loss.copy_to_host()[0]));
  CHECK(total_correct.copy_to_host()[0] == 2 * int64_t(correct.copy_to_host()[0]));
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(stream));
}
