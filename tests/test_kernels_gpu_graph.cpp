// The CUDA launchers of kernels/ for batch norm, pooling, the loss, the learning rate, SGD, the bf16
// cast and the row copies can be captured in a CUDA graph: none allocates, synchronises or touches
// the legacy default stream, so a whole training step can be captured and replayed. Batch norm's
// launches are cooperative, and a replay keeps them so; their reductions have a fixed order, so a
// replay gives the eager bits.
#include <catch2/catch.hpp>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/base/check.h"
#include "kernels/batchnorm.h"
#include "kernels/cast.h"
#include "kernels/copy_rows.h"
#include "kernels/cross_entropy.h"
#include "kernels/lr_schedule.h"
#include "kernels/pooling.h"
#include "kernels/sgd.h"
#include "tests/batchnorm_buffers.h"
#include "tests/device_buffer.h"
#include "tests/gpu.h"
#include "tests/gradcheck.h"

using namespace cutrain;
using test::PoisonedBuffer;

namespace {

bool all_finite(const std::vector<float>& values) {
  for (float v : values)
    if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace

TEST_CASE("the CUDA kernels can be captured in a CUDA graph and replayed", CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  using T = __nv_bfloat16;
  const int N = 4, H = 8, W = 8, C = 64, K = 10;
  const int64_t M = int64_t(N) * H * W;
  const int Ho = maxpool_out_size(H), Wo = maxpool_out_size(W);
  std::mt19937 rng(61);
  // Batch norm's input x is its residual too; its backward's dy is what the pooling gives back.
  const std::vector<float> x = test::random_vector(M * C, rng);
  const test::BatchNormInputs in{x, x, std::vector<float>(M * C, 0.0f), test::random_vector(C, rng),
                                 test::random_vector(C, rng), std::vector<float>(C, 0.0f), std::vector<float>(C, 1.0f)};
  const BatchNormShape shape{M, C, BatchNormFusion{true, true}};
  test::BatchNormBuffers<T> bn(shape, in);
  PoisonedBuffer<T> pooled(int64_t(N) * Ho * Wo * C), dpool(M * C), features(int64_t(N) * C), dfeatures(M * C);
  PoisonedBuffer<float> logits(test::random_vector(int64_t(N) * K, rng)), dlogits(int64_t(N) * K), loss(1),
      param(test::random_vector(1000, rng)), grad(test::random_vector(1000, rng)),
      momentum(std::vector<float>(1000, 0.0f)), lr(1), copied(1000);
  PoisonedBuffer<int32_t> labels(std::vector<int32_t>{1, 2, 3, 4}), correct(1);
  PoisonedBuffer<int64_t> total_correct(std::vector<int64_t>{0}), step(std::vector<int64_t>{0});
  PoisonedBuffer<T> param_bf16(1000), dlogits_bf16(int64_t(N) * K);
  SgdSegment segment;
  segment.numel = 1000;
  segment.grad = {grad.get()};
  segment.copy = {param_bf16.get(), true};
  segment.packed = true;
  PoisonedBuffer<SgdSegment> segments(std::vector<SgdSegment>{segment});
  RowsCopy rows;
  rows.in = param.get();
  rows.out = copied.get();
  rows.rows = 100;
  rows.cols = rows.in_pitch = rows.out_pitch = 10;
  PoisonedBuffer<RowsCopy> copies(std::vector<RowsCopy>{rows});
  const BatchNormPlan forward_plan = bn_plan(BatchNormPass::forward_train, shape, sizeof(T), bn_device_of_current_gpu());
  const BatchNormPlan backward_plan = bn_plan(BatchNormPass::backward, shape, sizeof(T), bn_device_of_current_gpu());
  PoisonedBuffer<float> partials(size_t(std::max(forward_plan.partial_floats, backward_plan.partial_floats)));
  BatchNormBackward<T> b = bn.backward();
  b.dy = dfeatures.get();
  T* const y = bn.y.get();

  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  bn_forward_train_cuda<T>(forward_plan, bn.forward(), partials.get(), stream);
  maxpool3x3s2_forward_cuda<T>(y, N, H, W, C, pooled.get(), stream);
  maxpool3x3s2_backward_cuda<T>(y, pooled.get(), N, H, W, C, dpool.get(), stream);
  global_avgpool_forward_cuda<T>(y, N, H, W, C, features.get(), stream);
  global_avgpool_backward_cuda<T>(features.get(), N, H, W, C, dfeatures.get(), stream);
  bn_backward_cuda<T>(backward_plan, b, partials.get(), stream);
  softmax_cross_entropy_cuda(logits.get(), labels.get(), N, K, 0.1f, loss.get(), dlogits.get(), correct.get(), stream);
  count_correct_cuda(logits.get(), labels.get(), N, K, total_correct.get(), nullptr, nullptr, stream);
  lr_schedule_step_cuda(LrSchedule{LrScheduleKind::cosine, 0.1, 10, 2}, step.get(), lr.get(), stream);
  sgd_update_cuda(param.get(), momentum.get(), &segment, segments.get(), 1, lr.get(), SgdConfig{}, stream);
  cast_f32_to_bf16_cuda(dlogits.get(), dlogits_bf16.get(), int64_t(N) * K, stream);
  copy_rows_cuda<float, float>(&rows, copies.get(), 1, stream);
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<T> first_y = bn.y.raw(), first_dx = bn.dx.raw();
  CUDA_CHECK(cudaGraphLaunch(exec, stream));  // a replay: count_correct adds, the rest rewrites
  CUDA_CHECK(cudaStreamSynchronize(stream));

  CHECK(all_finite(bn.y.download()));
  CHECK(all_finite(test::download(pooled)));
  CHECK(all_finite(test::download(dpool)));
  CHECK(all_finite(bn.dx.download()));
  // Batch norm's reductions: the same bits on the replay (its input x is the same; the running
  // statistics it also updates do not enter y or dx).
  const auto bits = [](const std::vector<T>& v) {
    std::vector<uint16_t> out(v.size());
    std::memcpy(out.data(), v.data(), v.size() * sizeof(T));
    return out;
  };
  CHECK(bits(bn.y.raw()) == bits(first_y));
  CHECK(bits(bn.dx.raw()) == bits(first_dx));
  CHECK(all_finite(bn.d_residual.download()));
  CHECK(all_finite(dlogits.copy_to_host()));
  CHECK(all_finite(test::download(dlogits_bf16)));
  CHECK(copied.copy_to_host() == param.copy_to_host());
  CHECK(step.copy_to_host()[0] == 2);  // the step counter advanced once per replay
  CHECK(all_finite(test::download(param_bf16)));
  CHECK(std::isfinite(loss.copy_to_host()[0]));
  CHECK(total_correct.copy_to_host()[0] == 2 * int64_t(correct.copy_to_host()[0]));
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(stream));
}
