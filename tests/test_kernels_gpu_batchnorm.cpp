// Batch norm's CUDA kernels against the CPU reference, fp32 and bf16, every fusion: channel counts
// that take the 16-byte packs (64, 128) and ones that do not (10, 24), rows that are not 16-byte
// aligned, and launch plans with one block or several per group of channels, one group of
// channels or several, every row kept in shared memory or most re-read, and the device's own plan.
// Also SyncBatchNorm's staged path over two ranks, eval mode, data of mean 1000 and std 1, and
// two runs (under the emulation, in two thread orders) that must agree bit for bit. The training
// passes are tested as cooperative launches and as split ones (Note [Split batch norm]), which
// must also agree with each other bit for bit, and run grids the device cannot hold at once. And
// the two forms before a fused convolution (Note [Batch norm before a fused convolution]): the
// training forward's statistics to the bit, and the backward's results to the bit given the same mask.
#include <catch2/catch.hpp>

#include <cuda_bf16.h>

#include <cmath>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "kernels/batchnorm.h"
#include "tests/batchnorm_buffers.h"
#include "tests/device_buffer.h"
#include "tests/gpu.h"
#include "tests/gradcheck.h"

#ifdef CUTRAIN_CUDA_EMULATION
#include "emu/block.h"
#endif

using namespace cutrain;
using test::PoisonedBuffer;

namespace {

// Statistics are fp32 sums of the same (rounded) inputs in another order.
constexpr double kStatisticsTolerance = 1e-4;

// A launch plan's device: small ones give several chunks of rows per group of channels, and
// little shared memory makes most rows re-read; 0 blocks: the device's own plan.
struct TestDevice {
  int blocks, threads;
  size_t shared_bytes;
  BatchNormDevice get() const {
    return blocks == 0 ? bn_device_of_current_gpu() : BatchNormDevice{blocks, threads, shared_bytes};
  }
};

// One batch norm's inputs, rounded to T so that the CPU reference sees what the GPU sees.
template <typename T>
struct Case {
  BatchNormShape shape;
  test::BatchNormInputs in;

  Case(int64_t M, int C, BatchNormFusion fusion, std::mt19937& rng, float x_mean = 0.5f, float x_std = 0.9f)
      : shape{M, C, fusion} {
    std::normal_distribution<float> pixel(x_mean, x_std);
    in.x.resize(size_t(M * C));
    for (float& v : in.x) v = pixel(rng);
    in.x = test::rounded_to<T>(in.x);
    in.residual = test::rounded_to<T>(test::random_vector(M * C, rng));
    in.dy = test::rounded_to<T>(test::random_vector(M * C, rng));
    in.gamma = test::random_vector(C, rng, 0.5f, 1.5f);
    in.beta = test::random_vector(C, rng);
    in.running_mean = test::random_vector(C, rng);
    in.running_var = test::random_vector(C, rng, 0.5f, 2.0f);
  }
  int64_t numel() const { return shape.rows * shape.channels; }
};

// The CPU reference's forward, then its backward on what the forward kept.
template <typename T>
test::HostBatchNorm cpu_reference(const Case<T>& c) {
  test::HostBatchNorm r(c.shape, c.in);
  bn_forward_train_cpu(c.shape, r.forward());
  bn_backward_cpu(c.shape, r.backward());
  return r;
}

// What a buffer of partials for these plans starts as: NaN, but for a split plan's ticket, which
// must start at zero.
std::vector<float> partials_for(const BatchNormPlan& a, const BatchNormPlan& b) {
  std::vector<float> partials(size_t(std::max(a.partial_floats, b.partial_floats)), std::nanf(""));
  if (a.launch == BatchNormLaunch::split) std::fill(partials.begin(), partials.begin() + 4, 0.0f);
  return partials;
}

// The ticket a split plan's launches leave behind them: zero, for the next launch.
uint32_t ticket_in(const PoisonedBuffer<float>& partials) {
  const std::vector<float> host = partials.copy_to_host();
  uint32_t ticket;
  std::memcpy(&ticket, host.data(), sizeof ticket);
  return ticket;
}

// The same on the device, every output poisoned beforehand (NaN), and the partials too. The
// backward reads the CPU's statistics and mask, so that it is checked on its own.
template <typename T>
struct GpuRun {
  GpuRun(const Case<T>& c, const test::HostBatchNorm& cpu, int offset, const BatchNormDevice& device,
         BatchNormLaunch launch = BatchNormLaunch::cooperative)
      : forward_plan(bn_plan(BatchNormPass::forward_train, c.shape, sizeof(T), device, launch)),
        backward_plan(bn_plan(BatchNormPass::backward, c.shape, sizeof(T), device, launch)),
        on(c.shape, c.in, offset),
        cpu_mean(cpu.mean),
        cpu_invstd(cpu.invstd),
        partials(partials_for(forward_plan, backward_plan)),
        cpu_mask(cpu.mask) {}

  void forward() { bn_forward_train_cuda<T>(forward_plan, on.forward(), partials.get(), nullptr); }
  void backward() {
    BatchNormBackward<T> b = on.backward();
    b.relu_mask = cpu_mask.get();
    b.mean = cpu_mean.get();
    b.invstd = cpu_invstd.get();
    bn_backward_cuda<T>(backward_plan, b, partials.get(), nullptr);
  }

  BatchNormPlan forward_plan, backward_plan;
  test::BatchNormBuffers<T> on;
  PoisonedBuffer<float> cpu_mean, cpu_invstd, partials;
  PoisonedBuffer<uint8_t> cpu_mask;
};

// Whether every mask bit is [y > 0] of the y beside it (bits past the last channel: 0).
template <typename T>
bool mask_matches_y(const BatchNormShape& shape, const std::vector<uint8_t>& mask, const std::vector<float>& y) {
  const int C = shape.channels, row_bytes = (C + 7) / 8;
  for (int64_t m = 0; m < shape.rows; ++m)
    for (int c = 0; c < row_bytes * 8; ++c) {
      const bool bit = (mask[size_t(m * row_bytes + c / 8)] >> (c % 8)) & 1;
      if (bit != (c < C && y[size_t(m * C + c)] > 0.0f)) return false;
    }
  return true;
}

// One parity case: the shape, where rows start, the plan's device, the fusion.
struct ParityCase {
  int64_t M;
  int C, offset;
  TestDevice device;
  BatchNormFusion fusion;
};

// Every fusion for each shape; the device's own plan (a cooperative grid of 1024-thread blocks,
// the emulation's slowest) for one fusion only, its code paths being the others'.
std::vector<ParityCase> parity_cases() {
  const ParityCase shapes[] = {
      {2000, 64, 0, {6, 128, 8 * 1024}, {}},   // 6 chunks of rows; a little kept, most re-read
      {1000, 128, 0, {6, 64, 64 * 1024}, {}},  // 2 groups of channels x 3 chunks; every row kept
      {333, 10, 0, {3, 32, 4 * 1024}, {}},     // 10 channels: no packs, 2 groups across a block
      {300, 24, 0, {4, 64, 4 * 1024}, {}},     // 24 channels: 3 groups, a 4th thread idle
      {200, 64, 1, {5, 128, 16 * 1024}, {}},   // rows off the 16-byte boundary
  };
  std::vector<ParityCase> cases;
  for (ParityCase c : shapes)
    for (BatchNormFusion fusion : {BatchNormFusion{false, false}, BatchNormFusion{true, false},
                                   BatchNormFusion{false, true}, BatchNormFusion{true, true}}) {
      c.fusion = fusion;
      cases.push_back(c);
    }
  cases.push_back({512, 64, 0, {0, 0, 0}, {true, true}});
  return cases;
}

const char* launch_name(BatchNormLaunch launch) { return launch == BatchNormLaunch::split ? "split" : "cooperative"; }

bool same_bits_as(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) { return a == b; }
template <typename V>
bool same_bits_as(const std::vector<V>& a, const std::vector<V>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(V)) == 0;
}

// Whether two runs' every output (forward and backward) has the same bits.
template <typename T>
void check_same_outputs(const GpuRun<T>& a, const GpuRun<T>& b) {
  CHECK(same_bits_as(a.on.y.raw(), b.on.y.raw()));
  CHECK(same_bits_as(a.on.mean.copy_to_host(), b.on.mean.copy_to_host()));
  CHECK(same_bits_as(a.on.invstd.copy_to_host(), b.on.invstd.copy_to_host()));
  CHECK(same_bits_as(a.on.running_mean.copy_to_host(), b.on.running_mean.copy_to_host()));
  CHECK(same_bits_as(a.on.running_var.copy_to_host(), b.on.running_var.copy_to_host()));
  CHECK(same_bits_as(a.on.mask.copy_to_host(), b.on.mask.copy_to_host()));
  CHECK(same_bits_as(a.on.dx.raw(), b.on.dx.raw()));
  CHECK(same_bits_as(a.on.d_residual.raw(), b.on.d_residual.raw()));
  CHECK(same_bits_as(a.on.dgamma.copy_to_host(), b.on.dgamma.copy_to_host()));
  CHECK(same_bits_as(a.on.dbeta.copy_to_host(), b.on.dbeta.copy_to_host()));
}

}  // namespace

TEMPLATE_TEST_CASE("batch norm CUDA training forward and backward match the CPU reference", CUTRAIN_GPU_TAG, float,
                   __nv_bfloat16) {
  CUTRAIN_REQUIRE_GPU();
  using T = TestType;
  const ParityCase p = GENERATE(from_range(parity_cases()));
  const BatchNormLaunch launch = GENERATE(BatchNormLaunch::cooperative, BatchNormLaunch::split);
  const auto [M, C, offset, device, fusion] = p;
  const auto [relu, residual] = fusion;
  INFO("M " << M << ", C " << C << ", offset " << offset << ", blocks " << device.blocks << ", relu " << relu
            << ", residual " << residual << ", " << launch_name(launch));
  std::mt19937 rng(21);
  const Case<T> c(M, C, fusion, rng);
  const test::HostBatchNorm cpu = cpu_reference(c);
  GpuRun<T> gpu(c, cpu, offset, device.get(), launch);
  gpu.forward();
  gpu.backward();

  CHECK(test::relative_error(test::download(gpu.on.mean), cpu.mean) <= kStatisticsTolerance);
  CHECK(test::relative_error(test::download(gpu.on.invstd), cpu.invstd) <= kStatisticsTolerance);
  CHECK(test::relative_error(test::download(gpu.on.running_mean), cpu.running_mean) <= kStatisticsTolerance);
  CHECK(test::relative_error(test::download(gpu.on.running_var), cpu.running_var) <= kStatisticsTolerance);
  const std::vector<float> y = gpu.on.y.download();
  CHECK(test::relative_error(y, cpu.y) <= test::parity_tolerance<T>());
  if (relu) CHECK(mask_matches_y<T>(c.shape, gpu.on.mask.copy_to_host(), y));
  CHECK(test::relative_error(test::download(gpu.on.dbeta), cpu.dbeta) <= kStatisticsTolerance);
  CHECK(test::relative_error(test::download(gpu.on.dgamma), cpu.dgamma) <= kStatisticsTolerance);
  CHECK(test::relative_error(gpu.on.dx.download(), cpu.dx) <= test::parity_tolerance<T>());
  if (residual) CHECK(test::relative_error(gpu.on.d_residual.download(), cpu.d_residual) == 0.0);  // dy or 0: exact
  if (launch == BatchNormLaunch::split) CHECK(ticket_in(gpu.partials) == 0);
}

TEMPLATE_TEST_CASE("batch norm CUDA split launches give the cooperative launch's bits", CUTRAIN_GPU_TAG, float,
                   __nv_bfloat16) {
  // Note [Split batch norm]: the same grid writes the same partials, and the last block merges
  // each channel's in the cooperative grid's order, so every output is the same to the bit. The
  // cases include grids whose blocks merge a channel's chunks in slices that are fewer than the
  // chunks (1000 x 128 over 6 blocks of 64 threads), where any other order would show.
  CUTRAIN_REQUIRE_GPU();
  using T = TestType;
  const ParityCase p = GENERATE(from_range(parity_cases()));
  const auto [M, C, offset, device, fusion] = p;
  INFO("M " << M << ", C " << C << ", offset " << offset << ", blocks " << device.blocks << ", relu " << fusion.relu
            << ", residual " << fusion.residual);
  std::mt19937 rng(21);
  const Case<T> c(M, C, fusion, rng);
  const test::HostBatchNorm cpu = cpu_reference(c);
  GpuRun<T> cooperative(c, cpu, offset, device.get()), split(c, cpu, offset, device.get(), BatchNormLaunch::split);
  for (GpuRun<T>* run : {&cooperative, &split}) {
    run->forward();
    run->backward();
  }
  check_same_outputs(cooperative, split);
}

TEMPLATE_TEST_CASE("batch norm CUDA gives the same bits on every run", CUTRAIN_GPU_TAG, float, __nv_bfloat16) {
  // The reduction's order is fixed by the plan, not by which block finishes first. Under the
  // emulation the second run takes the threads and the blocks in another order (so another block
  // of a split launch is the last to finish), which would change any sum that depended on it.
  CUTRAIN_REQUIRE_GPU();
  using T = TestType;
  const BatchNormLaunch launch = GENERATE(BatchNormLaunch::cooperative, BatchNormLaunch::split);
  INFO(launch_name(launch));
  std::mt19937 rng(23);
  const Case<T> c(1500, 64, BatchNormFusion{true, true}, rng);
  const test::HostBatchNorm cpu = cpu_reference(c);
  const BatchNormDevice device{6, 128, 8 * 1024};
  GpuRun<T> first(c, cpu, 0, device, launch), second(c, cpu, 0, device, launch);
  first.forward();
  first.backward();
  {
#ifdef CUTRAIN_CUDA_EMULATION
    const emu::Schedule saved = emu::schedule();
    emu::set_schedule({saved.order == emu::ThreadOrder::reverse ? emu::ThreadOrder::shuffle : emu::ThreadOrder::reverse,
                       99});
#endif
    second.forward();
    second.backward();
#ifdef CUTRAIN_CUDA_EMULATION
    emu::set_schedule(saved);
#endif
  }
  check_same_outputs(first, second);
}

TEMPLATE_TEST_CASE("batch norm statistics hold for data of mean 1000 and std 1", CUTRAIN_GPU_TAG, float,
                   __nv_bfloat16) {
  // In fp32, E[x^2] - E[x]^2 subtracts two numbers near 1e6 whose rounding (6e-8 relative each,
  // about 0.06) is as large as the variance itself: checked below on these very data. Welford's
  // merges, and the CPU's two passes in double, keep the variance to fp32's rounding of x (the
  // spacing of floats near 1000 is 6e-5, relative 6e-5 of the std): the invstd within 1e-4, the
  // mean within 1e-6 relative.
  CUTRAIN_REQUIRE_GPU();
  using T = TestType;
  const int64_t M = 4096;
  const int C = 16;
  std::mt19937 rng(29);
  const Case<T> c(M, C, BatchNormFusion{true, false}, rng, 1000.0f, 1.0f);
  std::vector<double> exact_mean(C, 0.0), exact_var(C, 0.0), naive_var(C);
  for (int ch = 0; ch < C; ++ch) {
    float s1 = 0.0f, s2 = 0.0f;  // the old formula, in fp32
    for (int64_t m = 0; m < M; ++m) {
      exact_mean[ch] += c.in.x[m * C + ch];
      s1 += c.in.x[m * C + ch];
      s2 += c.in.x[m * C + ch] * c.in.x[m * C + ch];
    }
    exact_mean[ch] /= double(M);
    for (int64_t m = 0; m < M; ++m) exact_var[ch] += std::pow(c.in.x[m * C + ch] - exact_mean[ch], 2) / double(M);
    naive_var[ch] = double(s2 / float(M) - (s1 / float(M)) * (s1 / float(M)));
  }
  const test::HostBatchNorm cpu = cpu_reference(c);
  GpuRun<T> gpu(c, cpu, 0, BatchNormDevice{6, 128, 8 * 1024});
  gpu.forward();
  const std::vector<float> mean = test::download(gpu.on.mean), invstd = test::download(gpu.on.invstd);
  double worst_naive = 0.0;
  for (int ch = 0; ch < C; ++ch) {
    const double exact_invstd = 1.0 / std::sqrt(exact_var[ch] + 1e-5);
    INFO("channel " << ch << ": variance " << exact_var[ch] << ", invstd " << exact_invstd << ", CPU "
                    << cpu.invstd[ch] << ", GPU " << invstd[ch]);
    CHECK(std::abs(cpu.mean[ch] - exact_mean[ch]) <= 1e-6 * exact_mean[ch]);
    CHECK(std::abs(mean[ch] - exact_mean[ch]) <= 1e-6 * exact_mean[ch]);
    CHECK(std::abs(cpu.invstd[ch] - exact_invstd) <= 1e-4 * exact_invstd);
    CHECK(std::abs(invstd[ch] - exact_invstd) <= 1e-4 * exact_invstd);
    worst_naive = std::max(worst_naive, std::abs(naive_var[ch] - exact_var[ch]) / exact_var[ch]);
  }
  CHECK(worst_naive > 0.05);  // these data do defeat the old formula
  // y = x - mean scaled: the rounding of x (6e-5) and of the mean carry into it, about 1e-4 of
  // its typical size 1.
  CHECK(test::relative_error(gpu.on.y.download(), cpu.y) <= std::max(2e-4, test::parity_tolerance<T>()));
}

TEMPLATE_TEST_CASE("batch norm CUDA eval mode matches the CPU reference", CUTRAIN_GPU_TAG, float, __nv_bfloat16) {
  CUTRAIN_REQUIRE_GPU();
  using T = TestType;
  const int64_t M = 2 * 7 * 7;
  const int C = 128;
  std::mt19937 rng(22);
  const Case<T> c(M, C, BatchNormFusion{true, true}, rng);
  std::vector<float> y(c.numel());
  BatchNormForward<float> f;
  f.x = c.in.x.data();
  f.residual = c.in.residual.data();
  f.gamma = c.in.gamma.data();
  f.beta = c.in.beta.data();
  f.y = y.data();
  f.running_mean = const_cast<float*>(c.in.running_mean.data());
  f.running_var = const_cast<float*>(c.in.running_var.data());
  bn_forward_eval_cpu(c.shape, f);

  test::BatchNormBuffers<T> on(c.shape, c.in);
  bn_forward_eval_cuda<T>(bn_plan(BatchNormPass::forward_eval, c.shape, sizeof(T), BatchNormDevice{}), on.forward(),
                          nullptr);
  // The same formulas on the same inputs: the twin's bits, rounded to T (Note [Rounding that
  // contraction cannot change]).
  CHECK(on.y.download() == test::rounded_to<T>(y));
  CHECK(test::download(on.running_mean) == c.in.running_mean);  // read, never written
}

TEMPLATE_TEST_CASE("batch norm CUDA SyncBatchNorm's elementwise stages give the CPU twin's bits from its statistics",
                   CUTRAIN_GPU_TAG, float, __nv_bfloat16) {
  // Given the CPU's statistics and sums, what is left of each stage is batchnorm.cuh's math per
  // channel and per element, which rounds on the device as on the host (Note [Rounding that
  // contraction cannot change]): m2's share; mean, invstd, the running statistics, y and the mask;
  // dx. Each is the twin's to the bit, rounded to T where the device stores T. One rank: the
  // whole batch.
  CUTRAIN_REQUIRE_GPU();
  using T = TestType;
  std::mt19937 rng(29);
  for (const int C : {24, 64}) {  // element by element, and in 16-byte packs
    INFO("C " << C);
    const Case<T> c(200, C, BatchNormFusion{true, true}, rng, 3.0f, 2.0f);
    const double count = double(c.shape.rows);
    test::HostBatchNorm cpu(c.shape, c.in);
    std::vector<float> stats(4 * size_t(C));
    const BatchNormRankStats s = BatchNormRankStats::in(stats.data(), C);
    bn_rank_statistics_cpu(c.shape, c.in.x.data(), s);
    PoisonedBuffer<float> device_stats(stats);  // local mean, local m2 and sum; m2 from the device below
    bn_rank_m2_cpu(c.shape, s, count);
    bn_forward_apply_cpu(c.shape, cpu.forward(), s, count);
    std::vector<float> sums(2 * size_t(C));
    bn_backward_sums_cpu(c.shape, cpu.backward(), sums.data());
    bn_backward_apply_cpu(c.shape, cpu.backward(), sums.data(), count);

    const BatchNormDevice device{4, 128, 8 * 1024};
    const BatchNormRankStats on_device = BatchNormRankStats::in(device_stats.get(), C);
    bn_rank_m2_cuda(bn_plan(BatchNormPass::rank_m2, c.shape, sizeof(T), device), on_device, count, nullptr);
    CHECK(device_stats.copy_to_host() == stats);
    test::BatchNormBuffers<T> on(c.shape, c.in);
    bn_forward_apply_cuda<T>(bn_plan(BatchNormPass::forward_apply, c.shape, sizeof(T), device), on.forward(), on_device,
                             count, nullptr);
    CHECK(test::download(on.mean) == cpu.mean);
    CHECK(test::download(on.invstd) == cpu.invstd);
    CHECK(test::download(on.running_mean) == cpu.running_mean);
    CHECK(test::download(on.running_var) == cpu.running_var);
    CHECK(on.y.download() == test::rounded_to<T>(cpu.y));
    CHECK(on.mask.copy_to_host() == cpu.mask);
    const PoisonedBuffer<float> device_sums(sums);
    bn_backward_apply_cuda<T>(bn_plan(BatchNormPass::backward_apply, c.shape, sizeof(T), device), on.backward(),
                              device_sums.get(), count, nullptr);
    CHECK(on.dx.download() == test::rounded_to<T>(cpu.dx));
  }
}

TEMPLATE_TEST_CASE("batch norm CUDA SyncBatchNorm stages over two ranks equal the CPU's whole batch", CUTRAIN_GPU_TAG,
                   float, __nv_bfloat16) {
  // Rank 0 holds rows [0, 700), rank 1 rows [700, 1600); each runs the staged kernels on its rows
  // and the test plays the all-reduce (a sum on the host). Both must compute the CPU's one-rank
  // result on all 1600 rows: statistics, running statistics, y, mask, dgamma and dbeta summed
  // over the ranks, dx.
  CUTRAIN_REQUIRE_GPU();
  using T = TestType;
  const BatchNormLaunch launch = GENERATE(BatchNormLaunch::cooperative, BatchNormLaunch::split);
  INFO(launch_name(launch));
  const int64_t M = 1600, rank_rows[2] = {700, 900};
  const int C = 64;
  std::mt19937 rng(31);
  const Case<T> c(M, C, BatchNormFusion{true, true}, rng, 3.0f, 2.0f);
  const test::HostBatchNorm cpu = cpu_reference(c);
  const BatchNormDevice device{4, 128, 8 * 1024};

  // A rank: its rows of every tensor, its own statistics and scratch.
  struct Rank {
    BatchNormShape shape;
    test::BatchNormBuffers<T> on;
    PoisonedBuffer<float> stats, sums, partials;
    Rank(const Case<T>& c, int64_t first, int64_t rows)
        : shape{rows, c.shape.channels, c.shape.fusion},
          on(shape, rows_of(c, first, rows)),
          stats(4 * size_t(c.shape.channels)),
          sums(2 * size_t(c.shape.channels)),
          partials(std::vector<float>(1 << 16, 0.0f)) {}  // a split plan's ticket starts at zero
    static test::BatchNormInputs rows_of(const Case<T>& c, int64_t first, int64_t rows) {
      const auto slice = [&](const std::vector<float>& v) {
        return std::vector<float>(v.begin() + first * c.shape.channels, v.begin() + (first + rows) * c.shape.channels);
      };
      test::BatchNormInputs in = c.in;
      in.x = slice(c.in.x);
      in.residual = slice(c.in.residual);
      in.dy = slice(c.in.dy);
      return in;
    }
  };
  Rank r0(c, 0, rank_rows[0]), r1(c, rank_rows[0], rank_rows[1]);
  // The all-reduce: both ranks' [first, first + n) replaced by their sum.
  const auto sum_over_ranks = [](PoisonedBuffer<float>& a, PoisonedBuffer<float>& b, size_t first, size_t n) {
    std::vector<float> ha = a.copy_to_host(), hb = b.copy_to_host();
    for (size_t i = first; i < first + n; ++i) ha[i] = hb[i] = ha[i] + hb[i];
    a.copy_from(ha);
    b.copy_from(hb);
  };
  const double count = double(M);
  std::vector<Rank*> ranks = {&r0, &r1};
  for (Rank* r : ranks)
    bn_rank_statistics_cuda<T>(bn_plan(BatchNormPass::rank_statistics, r->shape, sizeof(T), device, launch),
                               r->on.x.get(), BatchNormRankStats::in(r->stats.get(), C), r->partials.get(), nullptr);
  sum_over_ranks(r0.stats, r1.stats, 2 * C, C);  // sum
  for (Rank* r : ranks)
    bn_rank_m2_cuda(bn_plan(BatchNormPass::rank_m2, r->shape, sizeof(T), device),
                    BatchNormRankStats::in(r->stats.get(), C), count, nullptr);
  sum_over_ranks(r0.stats, r1.stats, 3 * C, C);  // m2
  for (Rank* r : ranks)
    bn_forward_apply_cuda<T>(bn_plan(BatchNormPass::forward_apply, r->shape, sizeof(T), device), r->on.forward(),
                             BatchNormRankStats::in(r->stats.get(), C), count, nullptr);
  for (Rank* r : ranks)
    bn_backward_sums_cuda<T>(bn_plan(BatchNormPass::backward_sums, r->shape, sizeof(T), device, launch),
                             r->on.backward(), r->sums.get(), r->partials.get(), nullptr);
  std::vector<float> dgamma = test::download(r0.on.dgamma), dbeta = test::download(r0.on.dbeta);
  const std::vector<float> dgamma1 = test::download(r1.on.dgamma), dbeta1 = test::download(r1.on.dbeta);
  for (int ch = 0; ch < C; ++ch) {  // DDP's average, times two ranks
    dgamma[ch] += dgamma1[ch];
    dbeta[ch] += dbeta1[ch];
  }
  sum_over_ranks(r0.sums, r1.sums, 0, 2 * C);
  for (Rank* r : ranks)
    bn_backward_apply_cuda<T>(bn_plan(BatchNormPass::backward_apply, r->shape, sizeof(T), device), r->on.backward(),
                              r->sums.get(), count, nullptr);

  const auto joined = [](const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> v = a;
    v.insert(v.end(), b.begin(), b.end());
    return v;
  };
  for (Rank* r : ranks) {
    CHECK(test::relative_error(test::download(r->on.mean), cpu.mean) <= kStatisticsTolerance);
    CHECK(test::relative_error(test::download(r->on.invstd), cpu.invstd) <= kStatisticsTolerance);
    CHECK(test::relative_error(test::download(r->on.running_var), cpu.running_var) <= kStatisticsTolerance);
    CHECK(test::relative_error(test::download(r->on.running_mean), cpu.running_mean) <= kStatisticsTolerance);
  }
  CHECK(test::relative_error(joined(r0.on.y.download(), r1.on.y.download()), cpu.y) <= test::parity_tolerance<T>());
  CHECK(test::relative_error(dgamma, cpu.dgamma) <= kStatisticsTolerance);
  CHECK(test::relative_error(dbeta, cpu.dbeta) <= kStatisticsTolerance);
  CHECK(test::relative_error(joined(r0.on.dx.download(), r1.on.dx.download()), cpu.dx) <=
        test::parity_tolerance<T>());
}

TEMPLATE_TEST_CASE("batch norm CUDA activation after an unfused batch norm matches the fused CPU reference",
                   CUTRAIN_GPU_TAG, float, __nv_bfloat16) {
  // bn_activation_cuda on the CPU reference's plain batch norm, then bn_activation_backward_cuda,
  // give the fused reference's y, mask and d_residual (dy behind its mask): bit for bit in fp32,
  // where z is the same sum; in bf16 the plain output is rounded before the add, so y is within the
  // parity tolerance, and its mask may differ where z is near zero.
  CUTRAIN_REQUIRE_GPU();
  using T = TestType;
  std::mt19937 rng(23);
  for (const int C : {10, 64}) {
    for (const BatchNormFusion fusion : {BatchNormFusion{true, false}, BatchNormFusion{true, true}}) {
      const Case<T> c(2 * 5 * 5, C, fusion, rng);
      const test::HostBatchNorm fused = cpu_reference(c);
      const BatchNormShape plain_shape{c.shape.rows, C, BatchNormFusion{}};
      test::HostBatchNorm plain(plain_shape, c.in);
      bn_forward_train_cpu(plain_shape, plain.forward());

      test::Activations<T> y(plain.y, 0), residual(c.in.residual, 0), dy(c.in.dy, 0), dz(size_t(c.numel()), 0);
      PoisonedBuffer<uint8_t> mask(size_t(bn_mask_bytes(c.shape)));
      bn_activation_cuda<T>(bn_plan(BatchNormPass::activation, c.shape, sizeof(T), BatchNormDevice{}), y.get(),
                            residual.get(), mask.get(), nullptr);
      bn_activation_backward_cuda<T>(bn_plan(BatchNormPass::activation_backward, c.shape, sizeof(T), BatchNormDevice{}),
                                     dy.get(), mask.get(), dz.get(), nullptr);
      const std::vector<uint8_t> bits = mask.copy_to_host();
      std::vector<float> want_dz(c.in.dy);  // dy behind the mask that the forward wrote
      for (int64_t m = 0; m < c.shape.rows; ++m)
        for (int ch = 0; ch < C; ++ch)
          if (!((bits[size_t(m * ((C + 7) / 8) + ch / 8)] >> (ch % 8)) & 1)) want_dz[size_t(m * C + ch)] = 0.0f;
      CHECK(dz.download() == want_dz);
      if constexpr (std::is_same_v<T, float>) {
        CHECK(y.download() == fused.y);
        CHECK(bits == fused.mask);
        if (fusion.residual) CHECK(want_dz == fused.d_residual);
      } else {
        CHECK(test::relative_error(y.download(), fused.y) <= test::parity_tolerance<T>());
      }
    }
  }
}

TEST_CASE("batch norm CUDA fails at launch when its plan's grid does not fit the device at once", CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  const BatchNormDevice real = bn_device_of_current_gpu();
  const BatchNormShape shape{int64_t(real.blocks) * 4 * 1024, 64, BatchNormFusion{}};
  // Twice the blocks the device holds, each with all the shared memory a block may have.
  const BatchNormPlan plan =
      bn_plan(BatchNormPass::forward_train, shape, sizeof(float), BatchNormDevice{2 * real.blocks, 1024, real.shared_bytes});
  PoisonedBuffer<float> x(size_t(shape.rows * 64)), y(size_t(shape.rows * 64)), per_channel(64 * 6),
      partials(size_t(plan.partial_floats));
  BatchNormForward<float> f;
  f.x = x.get();
  f.y = y.get();
  f.gamma = f.beta = per_channel.get();
  f.mean = per_channel.get() + 64;
  f.invstd = per_channel.get() + 128;
  f.running_mean = per_channel.get() + 192;
  f.running_var = per_channel.get() + 256;
  CHECK_THROWS_WITH(bn_forward_train_cuda<float>(plan, f, partials.get(), nullptr),
                    Catch::Contains("bn_forward_train_kernel") && Catch::Contains("too many blocks in cooperative launch"));
}

TEST_CASE("batch norm CUDA split launches run a grid that the device cannot hold at once", CUTRAIN_GPU_TAG) {
  // The grid that a cooperative launch refuses (above) runs as split launches: no block waits for
  // another, so the blocks need not be resident together (Note [Split batch norm]).
  CUTRAIN_REQUIRE_GPU();
  const BatchNormDevice real = bn_device_of_current_gpu();
  const BatchNormDevice twice{2 * real.blocks, 1024, real.shared_bytes};
  std::mt19937 rng(43);
  const Case<float> c(int64_t(twice.blocks) * 1024, 64, BatchNormFusion{true, false}, rng);
  const test::HostBatchNorm cpu = cpu_reference(c);
  GpuRun<float> gpu(c, cpu, 0, twice, BatchNormLaunch::split);
  REQUIRE(int64_t(gpu.forward_plan.grid.x) * gpu.forward_plan.grid.y > real.blocks);
  CHECK_THROWS_WITH(bn_prepare_launch(bn_plan(BatchNormPass::forward_train, c.shape, sizeof(float), twice)),
                    Catch::Contains("cannot be resident at once"));
  bn_prepare_launch(gpu.forward_plan);
  gpu.forward();
  gpu.backward();
  CHECK(test::relative_error(test::download(gpu.on.mean), cpu.mean) <= kStatisticsTolerance);
  CHECK(test::relative_error(gpu.on.y.download(), cpu.y) <= test::parity_tolerance<float>());
  CHECK(test::relative_error(gpu.on.dx.download(), cpu.dx) <= test::parity_tolerance<float>());
}

TEST_CASE("batch norm refuses, when it plans, a cooperative grid that cannot be resident at once", CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  const BatchNormDevice real = bn_device_of_current_gpu();
  const BatchNormShape shape{int64_t(real.blocks) * 4 * 1024, 64, BatchNormFusion{}};
  // A plan for a device with four times the multiprocessors of this one (Note [Cooperative launches]).
  const BatchNormPlan too_wide =
      bn_plan(BatchNormPass::backward, shape, sizeof(float), BatchNormDevice{4 * real.blocks, 1024, real.shared_bytes});
  CHECK_THROWS_WITH(bn_prepare_launch(too_wide),
                    Catch::Contains("bn_backward_kernel") && Catch::Contains("cannot be resident at once"));
  CHECK_NOTHROW(bn_prepare_launch(bn_plan(BatchNormPass::backward, shape, sizeof(float), real)));
}

namespace {

// Note [Batch norm before a fused convolution], on the device: the statistics form, then the
// recompute backward, on buffers of their own, every output poisoned beforehand.
template <typename T>
struct PrologueRun {
  PrologueRun(const Case<T>& c, int offset, const BatchNormDevice& device, BatchNormLaunch launch)
      : statistics_plan(bn_plan(BatchNormPass::forward_statistics, c.shape, sizeof(T), device, launch)),
        recompute_plan(bn_plan(BatchNormPass::backward_recompute, c.shape, sizeof(T), device, launch)),
        on(c.shape, c.in, offset),
        scale(size_t(c.shape.channels)),
        shift(size_t(c.shape.channels)),
        activation(size_t(c.numel()), offset),
        partials(partials_for(statistics_plan, recompute_plan)) {}

  void statistics() {
    bn_forward_statistics_cuda<T>(statistics_plan, on.forward(), scale.get(), shift.get(), partials.get(), nullptr);
  }
  void backward() {
    bn_backward_recompute_cuda<T>(recompute_plan, on.backward(), scale.get(), shift.get(), activation.get(),
                                  partials.get(), nullptr);
  }

  BatchNormPlan statistics_plan, recompute_plan;
  test::BatchNormBuffers<T> on;
  PoisonedBuffer<float> scale, shift;
  test::Activations<T> activation;
  PoisonedBuffer<float> partials;
};


// What the prologue makes of x with these constants: the mask [z > 0], and max(z, 0) in fp32.
struct HostPrologue {
  std::vector<uint8_t> mask;
  std::vector<float> activation;
  int64_t cut = 0;  // how many z are not positive
  HostPrologue(const BatchNormShape& shape, const std::vector<float>& x, const std::vector<float>& scale,
               const std::vector<float>& shift)
      : mask(size_t(bn_mask_bytes(shape)), 0), activation(x.size()) {
    const int C = shape.channels, row_bytes = (C + 7) / 8;
    for (int64_t m = 0; m < shape.rows; ++m)
      for (int c = 0; c < C; ++c) {
        const float z = test::prologue_z(x[size_t(m * C + c)], scale[c], shift[c]);
        activation[size_t(m * C + c)] = std::max(z, 0.0f);
        if (z > 0.0f)
          mask[size_t(m * row_bytes + c / 8)] |= uint8_t(1u << (c % 8));
        else
          ++cut;
      }
  }
};

// The parity cases' shapes and plans, under the one fusion the fused unit has: a ReLU alone.
std::vector<ParityCase> prologue_cases() {
  std::vector<ParityCase> cases;
  for (const ParityCase& c : parity_cases())
    if (c.fusion.relu && !c.fusion.residual) cases.push_back(c);
  cases.push_back({512, 64, 0, {0, 0, 0}, {true, false}});
  return cases;
}

}  // namespace

TEMPLATE_TEST_CASE("batch norm CUDA statistics form gives the training forward's statistics to the bit, and scale "
                   "and shift by their formula",
                   CUTRAIN_GPU_TAG, float, __nv_bfloat16) {
  CUTRAIN_REQUIRE_GPU();
  using T = TestType;
  const ParityCase p = GENERATE(from_range(prologue_cases()));
  const BatchNormLaunch launch = GENERATE(BatchNormLaunch::cooperative, BatchNormLaunch::split);
  const auto [M, C, offset, device, fusion] = p;
  INFO("M " << M << ", C " << C << ", offset " << offset << ", blocks " << device.blocks << ", "
            << launch_name(launch));
  std::mt19937 rng(41);
  const Case<T> c(M, C, fusion, rng);
  GpuRun<T> train(c, cpu_reference(c), offset, device.get(), launch);
  train.forward();
  PrologueRun<T> fused(c, offset, device.get(), launch);
  const std::vector<T> y_before = fused.on.y.raw();
  const std::vector<uint8_t> mask_before = fused.on.mask.copy_to_host();
  fused.statistics();

  CHECK(same_bits_as(fused.on.mean.copy_to_host(), train.on.mean.copy_to_host()));
  CHECK(same_bits_as(fused.on.invstd.copy_to_host(), train.on.invstd.copy_to_host()));
  CHECK(same_bits_as(fused.on.running_mean.copy_to_host(), train.on.running_mean.copy_to_host()));
  CHECK(same_bits_as(fused.on.running_var.copy_to_host(), train.on.running_var.copy_to_host()));
  const std::vector<float> mean = fused.on.mean.copy_to_host(), invstd = fused.on.invstd.copy_to_host();
  const std::vector<float> scale = fused.scale.copy_to_host(), shift = fused.shift.copy_to_host();
  for (int ch = 0; ch < C; ++ch) {
    INFO("channel " << ch);
    const float expected_scale = c.in.gamma[ch] * invstd[ch];
    const volatile float mean_times_scale = mean[ch] * expected_scale;
    CHECK(same_bits_as(std::vector<float>{scale[ch]}, std::vector<float>{expected_scale}));
    CHECK(same_bits_as(std::vector<float>{shift[ch]}, std::vector<float>{c.in.beta[ch] - mean_times_scale}));
  }
  CHECK(same_bits_as(fused.on.y.raw(), y_before));  // no y, no mask
  CHECK(same_bits_as(fused.on.mask.copy_to_host(), mask_before));
  if (launch == BatchNormLaunch::split) CHECK(ticket_in(fused.partials) == 0);
}

TEMPLATE_TEST_CASE("batch norm CUDA recompute backward is the backward with the prologue's mask to the bit, and "
                   "writes the prologue's activation",
                   CUTRAIN_GPU_TAG, float, __nv_bfloat16) {
  // The mask of z = x*scale + shift, built on the host from the device's scale and shift and given
  // to bn_backward_cuda under a plan of the same shape: the recompute form must give the same bits,
  // and max(z, 0) rounded to T as the activation. The CPU twin, given the device's statistics,
  // builds the same mask: its dx within the parity bound, its activation the same once rounded.
  CUTRAIN_REQUIRE_GPU();
  using T = TestType;
  const ParityCase p = GENERATE(from_range(prologue_cases()));
  const BatchNormLaunch launch = GENERATE(BatchNormLaunch::cooperative, BatchNormLaunch::split);
  const auto [M, C, offset, device, fusion] = p;
  INFO("M " << M << ", C " << C << ", offset " << offset << ", blocks " << device.blocks << ", "
            << launch_name(launch));
  std::mt19937 rng(43);
  const Case<T> c(M, C, fusion, rng);
  PrologueRun<T> fused(c, offset, device.get(), launch);
  fused.statistics();
  const std::vector<float> scale = fused.scale.copy_to_host(), shift = fused.shift.copy_to_host();
  const HostPrologue host(c.shape, c.in.x, scale, shift);
  CHECK(host.cut > c.numel() / 5);  // the ReLU cuts some, not all
  CHECK(host.cut < c.numel() * 4 / 5);

  test::BatchNormBuffers<T> unfused(c.shape, c.in, offset);
  const PoisonedBuffer<uint8_t> mask(host.mask);
  BatchNormBackward<T> b = unfused.backward();
  b.relu_mask = mask.get();
  b.mean = fused.on.mean.get();
  b.invstd = fused.on.invstd.get();
  const BatchNormPlan backward_plan = bn_plan(BatchNormPass::backward, c.shape, sizeof(T), device.get(), launch);
  PoisonedBuffer<float> partials(partials_for(backward_plan, backward_plan));
  bn_backward_cuda<T>(backward_plan, b, partials.get(), nullptr);
  const std::vector<T> d_residual_before = fused.on.d_residual.raw();
  fused.backward();

  CHECK(same_bits_as(fused.on.dx.raw(), unfused.dx.raw()));
  CHECK(same_bits_as(fused.on.dgamma.copy_to_host(), unfused.dgamma.copy_to_host()));
  CHECK(same_bits_as(fused.on.dbeta.copy_to_host(), unfused.dbeta.copy_to_host()));
  CHECK(fused.activation.download() == test::rounded_to<T>(host.activation));
  CHECK(same_bits_as(fused.on.d_residual.raw(), d_residual_before));  // no residual
  if (launch == BatchNormLaunch::split) CHECK(ticket_in(fused.partials) == 0);

  test::HostBatchNorm cpu(c.shape, c.in);
  cpu.mean = fused.on.mean.copy_to_host();
  cpu.invstd = fused.on.invstd.copy_to_host();
  std::vector<float> cpu_activation(size_t(c.numel()));
  bn_backward_recompute_cpu(c.shape, cpu.backward(), scale.data(), shift.data(), cpu_activation.data());
  CHECK(cpu_activation == host.activation);
  CHECK(test::relative_error(fused.on.dx.download(), cpu.dx) <= test::parity_tolerance<T>());
  CHECK(test::relative_error(test::download(fused.on.dgamma), cpu.dgamma) <= kStatisticsTolerance);
  CHECK(test::relative_error(test::download(fused.on.dbeta), cpu.dbeta) <= kStatisticsTolerance);
}

TEMPLATE_TEST_CASE("batch norm before a fused convolution holds for data of mean 1000 and std 1", CUTRAIN_GPU_TAG,
                   float, __nv_bfloat16) {
  // The statistics form's statistics are the training forward's, bit for bit, so they keep its
  // bounds (the test of mean 1000 above). The prologue then computes z = x*scale + shift, where
  // x*scale and shift are near 1000*gamma and cancel: each carries a rounding of about 3e-5
  // (half the spacing of floats near 1000), against z of typical size 1. So its activation is the
  // unfused forward's y to about 5e-5 (fp32; bf16 rounds more), and its mask may differ from the
  // unfused forward's only where z is that close to zero: here in none of the 65536 bits, and in
  // no more than a few on other data.
  CUTRAIN_REQUIRE_GPU();
  using T = TestType;
  const BatchNormLaunch launch = GENERATE(BatchNormLaunch::cooperative, BatchNormLaunch::split);
  INFO(launch_name(launch));
  std::mt19937 rng(29);
  const Case<T> c(4096, 16, BatchNormFusion{true, false}, rng, 1000.0f, 1.0f);
  const test::HostBatchNorm cpu = cpu_reference(c);
  const BatchNormDevice device{6, 128, 8 * 1024};
  GpuRun<T> train(c, cpu, 0, device, launch);
  train.forward();
  PrologueRun<T> fused(c, 0, device, launch);
  fused.statistics();
  fused.backward();
  CHECK(same_bits_as(fused.on.mean.copy_to_host(), train.on.mean.copy_to_host()));
  CHECK(same_bits_as(fused.on.invstd.copy_to_host(), train.on.invstd.copy_to_host()));
  CHECK(same_bits_as(fused.on.running_var.copy_to_host(), train.on.running_var.copy_to_host()));

  const std::vector<float> scale = fused.scale.copy_to_host(), shift = fused.shift.copy_to_host();
  const HostPrologue host(c.shape, c.in.x, scale, shift);
  const std::vector<uint8_t> train_mask = train.on.mask.copy_to_host();
  int differing_bits = 0;
  for (size_t i = 0; i < train_mask.size(); ++i) differing_bits += __builtin_popcount(train_mask[i] ^ host.mask[i]);
  const double activation_error = test::relative_error(fused.activation.download(), cpu.y);
  INFO("activation against the unfused forward's y: " << activation_error << ", mask bits that differ: "
                                                       << differing_bits);
  CHECK(activation_error <= std::max(2e-4, test::parity_tolerance<T>()));
  CHECK(differing_bits <= 4);
  CHECK(fused.activation.download() == test::rounded_to<T>(host.activation));

  // The backward with that mask: the CPU twin's, from the device's statistics.
  test::HostBatchNorm twin(c.shape, c.in);
  twin.mean = fused.on.mean.copy_to_host();
  twin.invstd = fused.on.invstd.copy_to_host();
  std::vector<float> twin_activation(size_t(c.numel()));
  bn_backward_recompute_cpu(c.shape, twin.backward(), scale.data(), shift.data(), twin_activation.data());
  CHECK(test::relative_error(fused.on.dx.download(), twin.dx) <= test::parity_tolerance<T>());
  CHECK(test::relative_error(test::download(fused.on.dgamma), twin.dgamma) <= kStatisticsTolerance);
}
