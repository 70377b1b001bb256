#include "app/evaluator.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include "dist/ddp/communicator.h"
#include "kernels/base/check.h"
#include "kernels/cross_entropy.h"
#include "nn/resnet.h"

namespace cutrain {
namespace {

LoaderConfig eval_loader_config(const ResNet18& model, bool mirror, const AugmentConfig& normalization) {
  LoaderConfig config;
  config.augment = normalization;
  config.batch_size = model.config().batch_size;
  config.augment.train = false;  // normalise only
  config.augment.mirror = mirror;
  config.drop_last = false;  // every test image counts
  config.workers = 2;
  return config;
}

// sum[i] += add[i] / 2 for i < n, on the model's device (cuBLAS's axpy on the GPU).
void add_half(Context& ctx, const float* add, float* sum, int n) {
  if (ctx.on_gpu()) {
    const float half = 0.5f;
    CUBLAS_CHECK(cublasSaxpy(ctx.cublas, n, &half, add, 1, sum, 1));
    return;
  }
  for (int i = 0; i < n; ++i) sum[i] += 0.5f * add[i];
}

}  // namespace

Tta parse_tta(const std::string& name) {
  if (name == "none") return Tta::none;
  if (name == "flip") return Tta::flip;
  throw std::invalid_argument("--tta " + name + ": expected none or flip");
}

Evaluator::Evaluator(ResNet18& model, const Dataset& test, Communicator* comm, int rank, int world_size, Tta tta,
                     const AugmentConfig& normalization)
    : model_(model),
      comm_(comm),
      feed_(test, eval_loader_config(model, false, normalization), model),
      counts_(model.context().device(), sizeof(int64_t) * (1 + 2 * size_t(model.config().num_classes))) {
  const Device device = model.context().device();
  const size_t logits_bytes = sizeof(float) * size_t(model.config().batch_size) * size_t(model.config().num_classes);
  if (tta == Tta::flip) {
    mirrored_ = std::make_unique<BatchFeed>(test, eval_loader_config(model, true, normalization), model);
    mean_logits_ = DeviceBuffer(device, logits_bytes);
  }
  loss_gradient_ = DeviceBuffer(device, logits_bytes + sizeof(int32_t));
  const int64_t n = int64_t(test.size());
  const int64_t begin = n * rank / world_size, end = n * (rank + 1) / world_size;
  shard_.resize(size_t(end - begin));
  std::iota(shard_.begin(), shard_.end(), begin);
  const int64_t batch = model.config().batch_size, smallest = n / world_size;
  common_batches_ = (smallest + batch - 1) / batch;
  const int64_t batches = (int64_t(shard_.size()) + batch - 1) / batch;  // this rank's
  batch_losses_ = DeviceBuffer(device, sizeof(float) * size_t(std::max<int64_t>(1, batches)));
}

std::vector<std::string> class_accuracy_lines(const EvalResult& r, const std::vector<std::string>& class_names) {
  std::vector<std::string> lines;
  for (size_t k = 0; k < r.class_total.size(); ++k) {
    if (r.class_total[k] == 0) continue;
    const std::string name = k < class_names.size() ? class_names[k] : std::to_string(k);
    char line[128];
    std::snprintf(line, sizeof line, "  %-12s %6.2f%%  (%lld/%lld)", name.c_str(),
                  100.0 * double(r.class_correct[k]) / double(r.class_total[k]),
                  static_cast<long long>(r.class_correct[k]), static_cast<long long>(r.class_total[k]));
    lines.push_back(line);
  }
  return lines;
}

EvalResult Evaluator::run(const EvalHook& after_batch) {
  const int K = model_.config().num_classes;
  Context& ctx = model_.context();
  auto* counts = static_cast<int64_t*>(counts_.data());
  int64_t* correct = counts;
  int64_t* class_total = counts + 1;
  int64_t* class_correct = counts + 1 + K;

  if (ctx.on_gpu())
    CUDA_CHECK(cudaMemsetAsync(counts, 0, counts_.bytes(), ctx.main_stream()));
  else
    std::fill(counts, counts + 1 + 2 * K, 0);

  feed_.start_epoch(shard_, 0);
  if (mirrored_) mirrored_->start_epoch(shard_, 0);
  for (int64_t b = 0; b < feed_.num_batches(); ++b) {
    const int n = feed_.load(b);
    model_.forward(false);
    const float* logits = model_.logits().as<float>();
    if (mirrored_) {
      auto* mean = static_cast<float*>(mean_logits_.data());
      const size_t bytes = sizeof(float) * size_t(n) * size_t(K);
      if (ctx.on_gpu())
        CUDA_CHECK(cudaMemsetAsync(mean, 0, bytes, ctx.main_stream()));
      else
        std::memset(mean, 0, bytes);
      add_half(ctx, logits, mean, n * K);
      mirrored_->load(b);  // the same images and labels, mirrored
      model_.forward(false);
      add_half(ctx, model_.logits().as<float>(), mean, n * K);
      logits = mean;
    }
    const int32_t* labels = model_.labels().as<int32_t>();
    float* batch_loss = static_cast<float*>(batch_losses_.data()) + b;
    auto* gradient = static_cast<float*>(loss_gradient_.data());
    auto* gradient_correct = reinterpret_cast<int32_t*>(gradient + size_t(n) * size_t(K));
    if (ctx.on_gpu()) {
      count_correct_cuda(logits, labels, n, K, correct, class_total, class_correct, ctx.main_stream());
      softmax_cross_entropy_cuda(logits, labels, n, K, 0, batch_loss, gradient, gradient_correct, ctx.main_stream());
    } else {
      count_correct_cpu(logits, labels, n, K, correct, class_total, class_correct);
      softmax_cross_entropy_cpu(logits, labels, n, K, 0, batch_loss, gradient, gradient_correct);
    }
    if (after_batch && b < common_batches_ && after_batch(double(b + 1) / double(feed_.num_batches()))) {
      ctx.synchronize();  // nothing of this evaluation may still run when the caller goes on
      EvalResult stopped;
      stopped.stopped = true;
      return stopped;
    }
  }

  std::vector<int64_t> host(1 + 2 * size_t(K));
  std::vector<float> batch_losses(batch_losses_.bytes() / sizeof(float));
  ctx.synchronize();
  // A byte copy: the view's dtype only sets its size.
  copy_to_host(Tensor(counts, DType::f32, ctx.device(), {int64_t(counts_.bytes() / 4)}), host.data());
  copy_bytes_to_host(batch_losses_, batch_losses.data());
  std::vector<double> sums(host.begin(), host.end());  // exact: counts stay far below 2^53
  double loss_sum = 0;                                 // over this rank's images: each batch's mean times its rows
  const int64_t batch = model_.config().batch_size, images = int64_t(shard_.size());
  for (int64_t b = 0; b * batch < images; ++b)
    loss_sum += double(batch_losses[size_t(b)]) * double(std::min(batch, images - b * batch));
  sums.push_back(loss_sum);
  if (comm_) comm_->all_reduce_host(sums.data(), sums.size(), ReduceOp::sum);

  EvalResult result;
  result.correct = int64_t(sums[0]);
  result.class_total.assign(sums.begin() + 1, sums.begin() + 1 + K);
  result.class_correct.assign(sums.begin() + 1 + K, sums.begin() + 1 + 2 * K);
  result.total = std::accumulate(result.class_total.begin(), result.class_total.end(), int64_t(0));
  result.loss = result.total ? sums.back() / double(result.total) : 0.0;
  return result;
}

}  // namespace cutrain
