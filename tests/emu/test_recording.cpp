// emu/recording.h's record, which the emulated device writes, against what that device itself
// did for the same launcher calls: its own count of grids run and memsets done. Every launcher of
// kernels/ is called, so a launch that the record missed would be counted by the device only; and
// every launcher must declare the bytes it moves. Then the same calls on the record-only device
// (Note [Record-only device] in emu/runtime.h): the same record, and nothing done.
#include <catch2/catch.hpp>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "emu/recording.h"
#include "kernels/augment.h"
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

struct Counts {
  long long kernels = 0, memsets = 0, copies = 0;
  bool operator==(const Counts&) const = default;
};

std::ostream& operator<<(std::ostream& out, const Counts& c) {
  return out << c.kernels << " kernels, " << c.memsets << " memsets, " << c.copies << " copies";
}

Counts recorded(const Recorder& r) {
  Counts c;
  for (const RecordedOp& op : r.ops()) {
    c.kernels += op.kind == RecordedOp::Kind::kernel;
    c.memsets += op.kind == RecordedOp::Kind::memset;
    c.copies += op.kind == RecordedOp::Kind::memcpy;
  }
  return c;
}

// What the emulated device did for launches(stream): its own counts.
template <typename Launches>
Counts seen_by_device(cudaStream_t stream, Launches&& launches) {
  const emu::WorkDone before = emu::work_done();
  launches(stream);
  const emu::WorkDone after = emu::work_done();
  return {after.grids - before.grids, after.memsets - before.memsets, after.copies - before.copies};
}

}  // namespace

TEST_CASE("the recording of kernels/ launches and memsets is what the device sees", CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  using T = __nv_bfloat16;
  const int N = 2, H = 8, W = 8, C = 16, K = 10;
  const int64_t M = int64_t(N) * H * W;
  std::mt19937 rng(71);
  const std::vector<float> values = test::random_vector(M * C, rng);
  const BatchNormShape shape{M, C, BatchNormFusion{true, true}};
  const test::BatchNormInputs in{values, values, test::random_vector(M * C, rng), test::random_vector(C, rng),
                                 test::random_vector(C, rng), std::vector<float>(C, 0.0f), std::vector<float>(C, 1.0f)};
  test::BatchNormBuffers<T> bn(shape, in);
  const BatchNormDevice gpu = bn_device_of_current_gpu();
  // Every pass, in the order the launches below take them.
  std::vector<BatchNormPlan> plans;
  for (BatchNormPass pass : {BatchNormPass::forward_train, BatchNormPass::forward_eval, BatchNormPass::rank_statistics,
                             BatchNormPass::rank_m2, BatchNormPass::forward_apply, BatchNormPass::backward,
                             BatchNormPass::backward_sums, BatchNormPass::backward_apply})
    plans.push_back(bn_plan(pass, shape, sizeof(T), gpu));
  int64_t partial_floats = 0;
  for (const BatchNormPlan& plan : plans) partial_floats = std::max(partial_floats, plan.partial_floats);
  T* const y = bn.y.get();
  PoisonedBuffer<T> pooled(int64_t(N) * 4 * 4 * C), dpool(M * C), features(int64_t(N) * C),
      images_out(int64_t(N) * 32 * 32 * 8);
  PoisonedBuffer<float> partials(static_cast<size_t>(partial_floats)), sync_stats(4 * C), sums(2 * C),
      logits(test::random_vector(int64_t(N) * K, rng)), dlogits(int64_t(N) * K), loss(1),
      param(test::random_vector(100, rng)), grad(test::random_vector(100, rng)), momentum(std::vector<float>(100, 0)),
      lr(1), copied(100);
  PoisonedBuffer<int32_t> labels(std::vector<int32_t>{1, 2}), correct(1), labels_out(N),
      image_labels(std::vector<int32_t>{3, 4, 5});
  PoisonedBuffer<int64_t> total(std::vector<int64_t>{0}), step(std::vector<int64_t>{0}),
      indices(std::vector<int64_t>{2, 0});
  PoisonedBuffer<uint8_t> images(std::vector<uint8_t>(3 * 32 * 32 * 3, 100));
  PoisonedBuffer<T> dlogits_bf16(int64_t(N) * K);
  SgdSegment segment;
  segment.numel = 100;
  segment.grad = {grad.get()};
  PoisonedBuffer<SgdSegment> segments(std::vector<SgdSegment>{segment});
  RowsCopy rows{param.get(), copied.get(), 10, 10, 10, 10};
  PoisonedBuffer<RowsCopy> copies(std::vector<RowsCopy>{rows});
  const AugmentParams augment = make_augment_params(AugmentConfig{}, 32, 32, 8);

  // Every launcher of kernels/, in the order a training step (and the loader) calls them.
  auto launches = [&](cudaStream_t stream) {
    gather_augment_cuda(images.get(), image_labels.get(), indices.get(), N, 0, augment, PixelType::bf16,
                        images_out.get(), labels_out.get(), stream);
    lr_schedule_step_cuda(LrSchedule{}, step.get(), lr.get(), stream);
    const BatchNormRankStats stats = BatchNormRankStats::in(sync_stats.get(), C);
    bn_forward_train_cuda<T>(plans[0], bn.forward(), partials.get(), stream);
    bn_forward_eval_cuda<T>(plans[1], bn.forward(), stream);
    bn_rank_statistics_cuda<T>(plans[2], bn.x.get(), stats, partials.get(), stream);
    bn_rank_m2_cuda(plans[3], stats, double(M), stream);
    bn_forward_apply_cuda<T>(plans[4], bn.forward(), stats, double(M), stream);
    maxpool3x3s2_forward_cuda<T>(y, N, H, W, C, pooled.get(), stream);
    maxpool3x3s2_backward_cuda<T>(y, pooled.get(), N, H, W, C, dpool.get(), stream);
    global_avgpool_forward_cuda<T>(y, N, H, W, C, features.get(), stream);
    global_avgpool_backward_cuda<T>(features.get(), N, H, W, C, dpool.get(), stream);
    softmax_cross_entropy_cuda(logits.get(), labels.get(), N, K, 0.0f, loss.get(), dlogits.get(), correct.get(),
                               stream);
    count_correct_cuda(logits.get(), labels.get(), N, K, total.get(), nullptr, nullptr, stream);
    cast_f32_to_bf16_cuda(dlogits.get(), dlogits_bf16.get(), int64_t(N) * K, stream);
    bn_backward_cuda<T>(plans[5], bn.backward(), partials.get(), stream);
    bn_backward_sums_cuda<T>(plans[6], bn.backward(), sums.get(), partials.get(), stream);
    bn_backward_apply_cuda<T>(plans[7], bn.backward(), sums.get(), double(M), stream);
    sgd_update_cuda(param.get(), momentum.get(), &segment, segments.get(), 1, lr.get(), SgdConfig{}, stream);
    copy_rows_cuda<float, float>(&rows, copies.get(), 1, stream);
  };
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // First record-only: the same calls are written down, and the device does nothing (the loss
  // keeps the NaN it was made with).
  Recorder planned;
  Counts planned_device;
  {
    RecordingScope scope(planned);
    planned_device = seen_by_device(stream, launches);
  }
  CHECK(planned_device == Counts{});
  CHECK(std::isnan(loss.copy_to_host()[0]));
  Recorder recorder;
  Counts device;
  {
    RecordingScope scope(recorder);
    emu::RunWhileRecording run;
    device = seen_by_device(stream, launches);
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaStreamDestroy(stream));
  INFO("recorded " << recorded(recorder) << "; the device saw " << device);
  CHECK(recorded(recorder) == device);
  CHECK(device.kernels >= 19);  // one or more per launcher: the record is not empty by accident
  size_t batch_norms = 0;
  for (const RecordedOp& op : recorder.ops()) {
    INFO(op.name);
    if (op.kind == RecordedOp::Kind::kernel) CHECK(op.bytes.read + op.bytes.written > 0);  // every launch says
    if (!op.name.starts_with("bn_")) continue;
    // Batch norm's launches move what their plan says (kernels/batchnorm.h: bytes kept in shared
    // memory are not read twice).
    REQUIRE(batch_norms < plans.size());
    CHECK(op.bytes.read == plans[batch_norms].bytes_read);
    CHECK(op.bytes.written == plans[batch_norms].bytes_written);
    ++batch_norms;
  }
  CHECK(batch_norms == plans.size());
  REQUIRE(planned.ops().size() == recorder.ops().size());
  for (size_t i = 0; i < planned.ops().size(); ++i) {
    INFO(i << ": " << recorder.ops()[i].name);
    CHECK(planned.ops()[i].name == recorder.ops()[i].name);
    CHECK(planned.ops()[i].bytes.read == recorder.ops()[i].bytes.read);
  }
}

TEST_CASE("the record-only device presents an H200 and allocates no memory", CUTRAIN_GPU_TAG) {
  int own = 0, planned = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&own, cudaDevAttrMultiProcessorCount, 0));
  Recorder recorder;
  void* p = nullptr;
  {
    RecordingScope scope(recorder);
    CUDA_CHECK(cudaDeviceGetAttribute(&planned, cudaDevAttrMultiProcessorCount, 0));
    CUDA_CHECK(cudaMalloc(&p, size_t(1) << 40));  // a terabyte: only an address
    CUDA_CHECK(cudaMemset(p, 0, size_t(1) << 40));
    CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(reinterpret_cast<uintptr_t>(p) % 256 == 0);
    CUDA_CHECK(cudaFree(p));
  }
  CHECK(own == emu::kDevice.multiprocessors);
  CHECK(planned == 132);
  REQUIRE(recorder.ops().size() == 1);
  CHECK(recorder.ops()[0].kind == RecordedOp::Kind::host_wait);
}

