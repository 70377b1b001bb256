// SyncBatchNorm through the model's hook: two "ranks" (threads, each with half the batch and a
// shared-memory all-reduce) must compute what one model computes on the whole batch. Batch
// statistics are global, so each rank's logits are its rows of the whole-batch logits, the
// running statistics agree, and the ranks' gradients averaged (what DDP does) are the
// whole-batch gradients, up to fp32 rounding of differently ordered sums.
#include <catch2/catch.hpp>

#include <barrier>
#include <cmath>
#include <thread>

#include "tests/nn_fixtures.h"

using namespace cutrain;

namespace {

// all_reduce_sum for threads: each rank posts its array, waits for all, and sums them all.
class ThreadAllReduce {
 public:
  explicit ThreadAllReduce(int world) : posted_(size_t(world)), barrier_(world) {}
  void operator()(int rank, float* data, size_t count) {
    posted_[size_t(rank)].assign(data, data + count);
    barrier_.arrive_and_wait();
    for (size_t i = 0; i < count; ++i) {
      float sum = 0;
      for (const auto& p : posted_) sum += p[i];  // the same order on every rank: equal results
      data[i] = sum;
    }
    barrier_.arrive_and_wait();  // nobody posts the next array before all have read this one
  }

 private:
  std::vector<std::vector<float>> posted_;
  std::barrier<> barrier_;
};

double rms_relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

}  // namespace

TEST_CASE("SyncBatchNorm over two ranks computes the whole batch's step", "[nn]") {
  constexpr int kWorld = 2;
  Context ctx({});
  ResNetConfig whole_config = test::tiny_resnet();
  whole_config.batch_size = 8;
  ResNet18 whole(ctx, whole_config);
  test::fill_random_batch(whole, 31);
  whole.forward(true);
  whole.backward();

  ResNetConfig half_config = whole_config;
  half_config.batch_size = whole_config.batch_size / kWorld;
  ThreadAllReduce all_reduce(kWorld);
  std::vector<std::unique_ptr<ResNet18>> ranks;
  for (int r = 0; r < kWorld; ++r) {
    ranks.push_back(std::make_unique<ResNet18>(ctx, half_config));
    ranks[r]->set_sync_batchnorm({[&all_reduce, r](float* data, size_t count) { all_reduce(r, data, count); }, kWorld});
    // This rank's half of the whole batch.
    const int64_t pixels = ranks[r]->input().numel(), labels = ranks[r]->labels().numel();
    std::copy_n(whole.input().as<float>() + r * pixels, pixels, ranks[r]->input().as<float>());
    std::copy_n(whole.labels().as<int32_t>() + r * labels, labels, ranks[r]->labels().as<int32_t>());
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&ranks, r] {
      ranks[r]->forward(true);
      ranks[r]->backward();
    });
  }
  for (auto& t : threads) t.join();

  const std::vector<float> whole_logits = read_floats(whole.logits());
  const std::vector<float> whole_buffers = read_floats(whole.params().buffer_values());
  std::vector<float> mean_grads(size_t(whole.params().numel()), 0.0f);
  for (int r = 0; r < kWorld; ++r) {
    std::vector<float> logits = read_floats(ranks[r]->logits());
    std::vector<float> rows(whole_logits.begin() + int64_t(r * logits.size()),
                            whole_logits.begin() + int64_t((r + 1) * logits.size()));
    CHECK(rms_relative_error(logits, rows) < 1e-5);
    CHECK(rms_relative_error(read_floats(ranks[r]->params().buffer_values()), whole_buffers) < 1e-5);
    std::vector<float> grads = read_floats(ranks[r]->params().grads());
    for (size_t i = 0; i < grads.size(); ++i) mean_grads[i] += grads[i] / kWorld;
  }
  const std::vector<float> whole_grads = read_floats(whole.params().grads());
  for (const Parameter* p : whole.params().in_layout_order()) {
    INFO(p->name);
    std::vector<float> a(mean_grads.begin() + p->offset, mean_grads.begin() + p->offset + p->numel);
    std::vector<float> b(whole_grads.begin() + p->offset, whole_grads.begin() + p->offset + p->numel);
    CHECK(rms_relative_error(a, b) < 1e-4);
  }
}
