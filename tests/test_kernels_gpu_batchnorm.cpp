// Batch norm's CUDA kernels against the CPU reference, fp32 and bf16, every fusion, for channel
// counts that take the 16-byte packs (64, 512), one that does not (10), and rows that are not
// 16-byte aligned.
#include <catch2/catch.hpp>

#include <cuda_bf16.h>

#include <random>
#include <vector>

#include "kernels/batchnorm.h"
#include "tests/device_buffer.h"
#include "tests/gpu.h"
#include "tests/gradcheck.h"

using namespace cutrain;
using test::DeviceBuffer;

namespace {

constexpr float kEps = 1e-5f;
constexpr float kMomentum = 0.1f;
// Statistics are fp32 sums of the same (rounded) inputs in another order.
constexpr double kStatisticsTolerance = 1e-4;

// Activations on the device that start `offset` elements into their allocation: offset 1 takes
// every row off the 16-byte boundary of the widest packs, which the launchers must notice.
template <typename T>
class Activations {
 public:
  Activations(size_t n, int offset) : buffer_(n + size_t(offset)), offset_(offset) {}
  Activations(const std::vector<float>& values, int offset) : Activations(values.size(), offset) {
    std::vector<float> padded(size_t(offset), 0.0f);
    padded.insert(padded.end(), values.begin(), values.end());
    buffer_.copy_from(test::convert_to<T>(padded));
  }
  T* get() const { return buffer_.get() + offset_; }
  std::vector<float> download() const {
    const std::vector<float> all = test::download(buffer_);
    return std::vector<float>(all.begin() + offset_, all.end());
  }

 private:
  DeviceBuffer<T> buffer_;
  int offset_;
};

}  // namespace

TEMPLATE_TEST_CASE("batch norm CUDA training forward and backward match the CPU reference", CUTRAIN_GPU_TAG, float,
                   __nv_bfloat16) {
  CUTRAIN_REQUIRE_GPU();
  using T = TestType;
  const auto [M, C, offset] =
      GENERATE(table<int64_t, int, int>({{8 * 32 * 32, 64, 0}, {1000, 512, 0}, {333, 10, 0}, {200, 64, 1}}));
  const auto [relu, residual] =
      GENERATE(table<bool, bool>({{false, false}, {true, false}, {false, true}, {true, true}}));
  const BatchNormFusion fusion{relu, residual};
  INFO("M " << M << ", C " << C << ", offset " << offset << ", relu " << relu << ", residual " << residual);
  std::mt19937 rng(21);
  const std::vector<float> x = test::rounded_to<T>(test::random_vector(M * C, rng, -1.0f, 2.0f));
  const std::vector<float> res = test::rounded_to<T>(test::random_vector(M * C, rng));
  const std::vector<float> dy = test::rounded_to<T>(test::random_vector(M * C, rng));
  const std::vector<float> gamma = test::random_vector(C, rng, 0.5f, 1.5f), beta = test::random_vector(C, rng);
  const std::vector<float> running_mean = test::random_vector(C, rng);
  const std::vector<float> running_var = test::random_vector(C, rng, 0.5f, 2.0f);

  // CPU reference.
  std::vector<float> s1(C), s2(C), mean(C), invstd(C), rm = running_mean, rv = running_var, y(M * C);
  bn_channel_sums_cpu(x.data(), M, C, s1.data(), s2.data());
  bn_finalize_stats_cpu(s1.data(), s2.data(), C, double(M), kEps, kMomentum, mean.data(), invstd.data(), rm.data(),
                        rv.data());
  bn_apply_cpu(x.data(), res.data(), M, C, mean.data(), invstd.data(), gamma.data(), beta.data(), fusion, y.data());
  // Both backward passes read the same y (the ReLU mask), as T holds it.
  const std::vector<float> y_in = test::rounded_to<T>(y);
  std::vector<float> t1(C), t2(C), d_res(M * C), dx(M * C);
  bn_backward_sums_cpu(x.data(), y_in.data(), dy.data(), M, C, mean.data(), invstd.data(), fusion, t1.data(),
                       t2.data(), d_res.data());
  bn_backward_apply_cpu(x.data(), y_in.data(), dy.data(), M, C, mean.data(), invstd.data(), gamma.data(), t1.data(),
                        t2.data(), double(M), fusion, dx.data());

  // CUDA, every output poisoned beforehand.
  Activations<T> gx(x, offset), gres(res, offset), gdy(dy, offset), gy_in(y_in, offset), gy(M * C, offset),
      gd_res(M * C, offset), gdx(M * C, offset);
  DeviceBuffer<float> ggamma(gamma), gbeta(beta), grm(running_mean), grv(running_var), gs1(C), gs2(C), gmean(C),
      ginvstd(C), gt1(C), gt2(C);
  bn_channel_sums_cuda<T>(gx.get(), M, C, gs1.get(), gs2.get(), nullptr);
  bn_finalize_stats_cuda(gs1.get(), gs2.get(), C, double(M), kEps, kMomentum, gmean.get(), ginvstd.get(), grm.get(),
                         grv.get(), nullptr);
  bn_apply_cuda<T>(gx.get(), residual ? gres.get() : nullptr, M, C, gmean.get(), ginvstd.get(), ggamma.get(),
                   gbeta.get(), fusion, gy.get(), nullptr);
  bn_backward_sums_cuda<T>(gx.get(), relu ? gy_in.get() : nullptr, gdy.get(), M, C, gmean.get(), ginvstd.get(),
                           fusion, gt1.get(), gt2.get(), residual ? gd_res.get() : nullptr, nullptr);
  bn_backward_apply_cuda<T>(gx.get(), relu ? gy_in.get() : nullptr, gdy.get(), M, C, gmean.get(), ginvstd.get(),
                            ggamma.get(), gt1.get(), gt2.get(), double(M), fusion, gdx.get(), nullptr);

  CHECK(test::relative_error(test::download(gs1), s1) <= kStatisticsTolerance);
  CHECK(test::relative_error(test::download(gs2), s2) <= kStatisticsTolerance);
  CHECK(test::relative_error(test::download(gmean), mean) <= kStatisticsTolerance);
  CHECK(test::relative_error(test::download(ginvstd), invstd) <= kStatisticsTolerance);
  CHECK(test::relative_error(test::download(grm), rm) <= kStatisticsTolerance);
  CHECK(test::relative_error(test::download(grv), rv) <= kStatisticsTolerance);
  CHECK(test::relative_error(gy.download(), y) <= test::parity_tolerance<T>());
  CHECK(test::relative_error(test::download(gt1), t1) <= kStatisticsTolerance);
  CHECK(test::relative_error(test::download(gt2), t2) <= kStatisticsTolerance);
  CHECK(test::relative_error(gdx.download(), dx) <= test::parity_tolerance<T>());
  if (residual) CHECK(test::relative_error(gd_res.download(), d_res) == 0.0);  // dz is dy or 0: exact
}

TEMPLATE_TEST_CASE("batch norm CUDA eval mode matches the CPU reference", CUTRAIN_GPU_TAG, float, __nv_bfloat16) {
  CUTRAIN_REQUIRE_GPU();
  using T = TestType;
  const int64_t M = 2 * 7 * 7;
  const int C = 128;
  const BatchNormFusion fusion{true, false};
  std::mt19937 rng(22);
  const std::vector<float> x = test::rounded_to<T>(test::random_vector(M * C, rng));
  const std::vector<float> gamma = test::random_vector(C, rng), beta = test::random_vector(C, rng);
  const std::vector<float> rm = test::random_vector(C, rng), rv = test::random_vector(C, rng, 0.5f, 2.0f);
  std::vector<float> mean(C), invstd(C), y(M * C);
  bn_eval_stats_cpu(rm.data(), rv.data(), C, kEps, mean.data(), invstd.data());
  bn_apply_cpu(x.data(), nullptr, M, C, mean.data(), invstd.data(), gamma.data(), beta.data(), fusion, y.data());

  DeviceBuffer<T> gx(test::convert_to<T>(x)), gy(M * C);
  DeviceBuffer<float> grm(rm), grv(rv), ggamma(gamma), gbeta(beta), gmean(C), ginvstd(C);
  bn_eval_stats_cuda(grm.get(), grv.get(), C, kEps, gmean.get(), ginvstd.get(), nullptr);
  bn_apply_cuda<T>(gx.get(), nullptr, M, C, gmean.get(), ginvstd.get(), ggamma.get(), gbeta.get(), fusion, gy.get(),
                   nullptr);
  CHECK(test::relative_error(test::download(gmean), mean) == 0.0);
  CHECK(test::relative_error(test::download(ginvstd), invstd) <= kStatisticsTolerance);
  CHECK(test::relative_error(test::download(gy), y) <= test::parity_tolerance<T>());
}
