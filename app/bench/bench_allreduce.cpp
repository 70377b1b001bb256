// `cutrain bench-allreduce`: all-reduce speed per message size, printed as nccl-tests'
// all_reduce_perf prints it. Run it under cutrun (alone it is a world of one):
//
//   cutrun --standalone --nproc-per-node 2 build/bin/cutrain bench-allreduce --device cpu
//
// For a message of S bytes taking t seconds on n ranks:
//   algbw = S / t                    (what one rank's buffer sees)
//   busbw = algbw * 2 (n - 1) / n    (what each link carries in a ring all-reduce: every rank sends
//                                     and receives (n-1)/n of the buffer twice, reduce-scatter then
//                                     all-gather), comparable across world sizes and with nccl-tests.
// Before timing, one all-reduce of known values is checked on every rank; the "#wrong" column
// counts the elements that came back wrong, summed over the ranks, and any makes the exit status 1.
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "app/commands.h"
#include "app/flags.h"
#include "app/run_start.h"
#include "dist/ddp/communicator.h"
#include "dist/launch/env.h"
#include "dist/launch/rendezvous.h"
#include "kernels/base/check.h"
#include "kernels/base/device.h"
#include "nn/device_buffer.h"
#include "nn/tensor.h"

namespace cutrain {
namespace {

constexpr int64_t kMaxMessageBytes = int64_t(1) << 34;  // 16 GiB

struct BenchOptions {
  std::string device = "cpu";
  int64_t min_bytes = 1 << 10;
  int64_t max_bytes = 16 << 20;
  int iters = 20;
  int warmup = 5;
};

// A message where the communicator wants it (device memory for NCCL, host memory for Gloo), and
// its host copy, where filling and checking happen. The copies between the two are nn/tensor.h's,
// which wait for the whole device: the collectives run on the communicator's non-blocking stream.
class MessageBuffer {
 public:
  MessageBuffer(size_t count, Device device) : device_(device), memory_(device, count * sizeof(float)), host_(count) {}

  float* data() { return static_cast<float*>(memory_.data()); }
  std::vector<float>& host() { return host_; }
  void upload(size_t count) { copy_from_host(host_.data(), first(count)); }
  void download(size_t count) { copy_to_host(first(count), host_.data()); }

 private:
  Tensor first(size_t count) const { return Tensor(memory_.data(), DType::f32, device_, {int64_t(count)}); }

  Device device_;
  DeviceBuffer memory_;
  std::vector<float> host_;
};

// Rank r contributes (r + 1) * (i % 7 + 1) at element i, so the sum is n (n + 1) / 2 * (i % 7 + 1),
// exact in fp32 for any world size we will see.
double count_wrong(Communicator& comm, MessageBuffer& buffer, size_t count) {
  const int n = comm.world_size();
  for (size_t i = 0; i < count; ++i) buffer.host()[i] = float((comm.rank() + 1) * int(i % 7 + 1));
  buffer.upload(count);
  comm.all_reduce(buffer.data(), count, ReduceOp::sum);
  buffer.download(count);
  double wrong = 0;
  for (size_t i = 0; i < count; ++i)
    if (buffer.host()[i] != float(n * (n + 1) / 2 * int(i % 7 + 1))) ++wrong;
  comm.all_reduce_host(&wrong, 1, ReduceOp::sum);
  return wrong;
}

// Seconds per all-reduce of `count` floats, averaged over `iters` after `warmup` untimed ones.
double time_all_reduce(Communicator& comm, MessageBuffer& buffer, size_t count, const BenchOptions& o,
                       cudaStream_t stream) {
  for (int i = 0; i < o.warmup; ++i) comm.all_reduce(buffer.data(), count, ReduceOp::sum);
  comm.barrier();
  if (stream == nullptr) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < o.iters; ++i) comm.all_reduce(buffer.data(), count, ReduceOp::sum);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / o.iters;
  }
  // On the GPU the calls only enqueue: time the stream with events.
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < o.iters; ++i) comm.all_reduce(buffer.data(), count, ReduceOp::sum);
  CUDA_CHECK(cudaEventRecord(stop, stream));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return ms / 1e3 / o.iters;
}

int run_bench(const BenchOptions& o) {
  if (o.min_bytes < 4 || o.max_bytes < o.min_bytes)
    throw std::runtime_error("--min-bytes " + std::to_string(o.min_bytes) + " --max-bytes " +
                             std::to_string(o.max_bytes) + ": need 4 <= min <= max");
  if (o.iters < 1) throw std::runtime_error("--iters " + std::to_string(o.iters) + ": must be 1 or more");
  const bool on_gpu = o.device == "cuda";
  DistEnv env = dist_env_from_environment();
  cudaStream_t stream = nullptr;
  if (on_gpu) {
    if (!cuda_available()) throw std::runtime_error(cuda_unavailable_reason());
    int visible = 0;
    CUDA_CHECK(cudaGetDeviceCount(&visible));
    CUDA_CHECK(cudaSetDevice(cuda_device_for_rank(env, visible)));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  std::unique_ptr<Store> store = rendezvous(env);
  auto comm = make_communicator(env, *store, {.use_cuda = on_gpu, .compute_stream = stream});
  MessageBuffer buffer(size_t(o.max_bytes / sizeof(float)), on_gpu ? Device::cuda : Device::cpu);

  const int n = comm->world_size();
  if (env.is_main()) {
    std::printf("# all_reduce of float32 sums, %s over %d rank%s, %d iterations after %d warm-up\n", comm->backend(), n,
                n == 1 ? "" : "s", o.iters, o.warmup);
    std::printf("# %12s %12s %12s %12s %12s %8s\n", "size(B)", "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
                "#wrong");
  }
  double all_wrong = 0;
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
    const size_t count = size_t(bytes / sizeof(float));
    double wrong = count_wrong(*comm, buffer, count);
    double seconds = time_all_reduce(*comm, buffer, count, o, stream);
    double algbw = double(count * sizeof(float)) / seconds / 1e9;
    double busbw = algbw * 2.0 * (n - 1) / n;
    all_wrong += wrong;
    if (env.is_main())
      std::printf("  %12zu %12zu %12.1f %12.3f %12.3f %8.0f\n", count * sizeof(float), count, seconds * 1e6, algbw,
                  busbw, wrong);
    std::fflush(stdout);
  }
  comm.reset();
  if (stream != nullptr) CUDA_CHECK(cudaStreamDestroy(stream));
  return all_wrong == 0 ? 0 : 1;
}

}  // namespace

void add_bench_allreduce_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "bench-allreduce", "Time all-reduce per message size (run it under cutrun), like nccl-tests' all_reduce_perf");
  auto options = std::make_shared<BenchOptions>();
  cmd->add_option("--device", options->device, "cpu (Gloo) or cuda (NCCL)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  add_byte_size(cmd, "--min-bytes", options->min_bytes, "smallest message, e.g. 1K", 4, kMaxMessageBytes)
      ->capture_default_str();
  add_byte_size(cmd, "--max-bytes", options->max_bytes, "largest message, e.g. 64M; sizes double from the smallest", 4,
                kMaxMessageBytes)
      ->capture_default_str();
  add_number(cmd, "--iters", options->iters, "timed all-reduces per size", 1, 1000000)->capture_default_str();
  add_number(cmd, "--warmup", options->warmup, "untimed all-reduces per size first", 0, 1000000)->capture_default_str();
  cmd->callback([options, &exit_code] { exit_code = run_bench(*options); });
}

}  // namespace cutrain
