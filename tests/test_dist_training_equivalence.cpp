// [dist]: data parallelism changes nothing but the speed. With --sync-bn, W processes with batch
// B each take the same steps as one process with batch W*B: the sampler gives rank r every W-th
// sample of the same permutation, so the union of the ranks' batch b is the single process's
// batch b, the augmentation is keyed by sample index, batch norm sees the global batch, and DDP
// averages the gradients of equal shards into the global mean.
#include <catch2/catch.hpp>

#include "data/load.h"
#include "data/synthetic.h"
#include "nn/safetensors.h"
#include "tests/checkpoint_compare.h"
#include "tests/gpu.h"
#include "tests/metrics_file.h"
#include "tests/process.h"

namespace {

using cutrain::test::TempDir;

struct TrainedRun {
  std::string checkpoint;
  double grad_norm;  // the last step's, from the main rank's metrics
};

// Trains `steps` steps with `world` processes of `batch` images each on `device` (fp32); with several
// processes, with --sync-bn unless `sync_bn` is false; with --clip-grad-norm when clip_grad_norm is given.
TrainedRun train(const TempDir& dir, const std::string& data, int world, int batch, int steps,
                  const std::string& device = "cpu", bool sync_bn = true, const std::string& clip_grad_norm = "") {
  const std::string save = (dir.path() / (device + "-world" + std::to_string(world) + (sync_bn ? "" : "-local-bn") +
                                          (clip_grad_norm.empty() ? "" : "-clip")))
                               .string();
  std::vector<std::string> argv = {cutrain::test::binary("cutrun"), "--standalone", "--nproc-per-node",
                                   std::to_string(world),     cutrain::test::binary("cutrain"), "train",
                                   "--data", data, "--device", device, "--precision", "fp32", "--width", "8",
                                   "--batch-size", std::to_string(batch), "--lr", "0.002", "--epochs", "1",
                                   "--max-steps", std::to_string(steps), "--eval-every", "0", "--save", save,
                                   "--workers", "1", "--metrics", save + ".jsonl"};
  // On the GPU, cuDNN's deterministic algorithms: the defaults add their partial sums in an order
  // that changes from run to run (Note [Emulated atomics] in emu/cudnn.cpp), and on the emulated
  // device two runs of one command were then up to 7e-5 apart after three steps, most of the
  // bound below, which is for the difference that the ranks make.
  if (device == "cuda") argv.push_back("--deterministic");
  if (world > 1 && sync_bn) argv.push_back("--sync-bn");
  if (!clip_grad_norm.empty()) argv.insert(argv.end(), {"--clip-grad-norm", clip_grad_norm});
  auto r = cutrain::test::run(argv);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  char name[64];
  std::snprintf(name, sizeof name, "/checkpoint-%08d.safetensors", steps);
  const nlohmann::json last = cutrain::test::read_metrics(save + ".jsonl", "step").back();
  REQUIRE(last["global_step"] == steps);
  return {save + name, last["grad_norm"].get<double>()};
}

std::string equivalence_data(const TempDir& dir) {
  const std::string data = (dir.path() / "data").string();
  cutrain::write_dataset(data, cutrain::DataFormat::cifar10, cutrain::make_synthetic(96, 0, true),
                         cutrain::make_synthetic(12, 0, false));
  return data;
}

// The sums run in another order, so results differ in their last bits, and now and then a ReLU
// input within rounding of zero falls on the other side: that element's gradient then passes or
// not, which moves the small BN biases of the early, large layers by ~1e-5 after a few steps.
// Measured on these data: the whole model within 1.5e-8 (2 ranks) and 1.5e-7 (3 ranks) of the
// single process after one step, 3.4e-6 and 1.2e-5 after three, as flips compound; without
// --sync-bn (each rank normalising its own 12 or 8 images) 7e-3 and 1e-2. Hence: each element
// within 1e-4 of the other, the whole model within 5e-5. The last step's gradient norm, which the
// main rank reads after the average, is within 1e-3 of the single process's (measured: 3e-5 after
// one step, 3.1e-4 after three, the same for 2 and 3 ranks: SyncBatchNorm sums in another order).
// On the GPU, where one process's batch norm and SyncBatchNorm are different kernels, a flipped ReLU
// moves whole gradients by more (Note [A flipped ReLU] in tests/test_app_gpu.cpp): on the emulated
// GPU, one process's norm was 1.1e-4 from 2 ranks' after one step and 1.7e-3 after three. After
// three, 2 GPU ranks with --sync-bn were 8.4e-5 from one GPU (element-wise) on an AVX-512 host and
// 1.24e-4 on an AVX2 one, whose CPU kernels round otherwise, so that comparison takes one step: 5.1e-6
// (relative 5e-7), and 5.2e-2 without --sync-bn. 2 GPU ranks against 2 CPU ranks without it were
// 6.3e-5 and 2.4e-7 apart after three steps. Each figure is the same under every stream schedule with
// --deterministic.
void check_same_steps(const TrainedRun& a, const TrainedRun& b, double grad_norm_relative = 1e-3) {
  const cutrain::test::ModelDifference d = cutrain::test::model_difference(a.checkpoint, b.checkpoint);
  CHECK(d.max_abs <= 1e-4);
  CHECK(d.relative <= 5e-5);
  CHECK(a.grad_norm == Approx(b.grad_norm).epsilon(grad_norm_relative));
}

}  // namespace

TEST_CASE("sync-bn: 2 and 3 ranks take the same steps as one process with the global batch", "[dist]") {
  TempDir dir;
  const std::string data = equivalence_data(dir);
  const int steps = 3;
  const TrainedRun single = train(dir, data, 1, 24, steps);
  for (int world : {2, 3}) {
    INFO("world size " << world);
    check_same_steps(train(dir, data, world, 24 / world, steps), single);
  }
}

TEST_CASE("with --clip-grad-norm, 2 ranks take one process's clipped steps: the norm is the averaged gradient's",
          "[dist]") {
  TempDir dir;
  const std::string data = equivalence_data(dir);
  const int steps = 3;
  const TrainedRun single = train(dir, data, 1, 24, steps, "cpu", true, "0.25");
  REQUIRE(single.grad_norm > 0.5);  // clipped to half or less: a norm of each rank's own gradient would differ
  check_same_steps(train(dir, data, 2, 12, steps, "cpu", true, "0.25"), single);
  // And the clipping is at work: the run without it is ten times further away than the ranks may be
  // (measured: 8.3e-4).
  const TrainedRun unclipped = train(dir, data, 1, 24, steps);
  CHECK(cutrain::test::model_difference(single.checkpoint, unclipped.checkpoint).relative > 10 * 5e-5);
}

TEST_CASE("GPU ranks over NCCL take one GPU's steps with --sync-bn, and the CPU ranks' steps over Gloo without it",
          "[dist][multi-gpu]" CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPUS(2);
  TempDir dir;
  const std::string data = equivalence_data(dir);
  check_same_steps(train(dir, data, 2, 12, 1, "cuda"), train(dir, data, 1, 24, 1, "cuda"), 6e-3);
  check_same_steps(train(dir, data, 2, 12, 3, "cuda", false), train(dir, data, 2, 12, 3, "cpu", false), 6e-3);
}

TEST_CASE("with --clip-grad-norm, GPU ranks over NCCL take one GPU's clipped steps", "[dist][multi-gpu]" CUTRAIN_GPU_TAG) {
  // On the GPU the buckets' all-reduces run on the communicator's stream, which the main stream waits
  // for before it computes the norm (Note [The step]).
  CUTRAIN_REQUIRE_GPUS(2);
  TempDir dir;
  const std::string data = equivalence_data(dir);
  const int steps = 3;
  const TrainedRun single = train(dir, data, 1, 24, steps, "cuda", true, "0.25");
  REQUIRE(single.grad_norm > 0.5);
  check_same_steps(train(dir, data, 2, 12, steps, "cuda", true, "0.25"), single, 6e-3);
}
