// Collectives, and bucketed all-reduces as the training step issues them, across real processes
// started by cutrun: Gloo here, NCCL where there are GPUs (the same checks). Each "[dist]" test runs this binary under cutrun with a
// hidden tag; the hidden test case is one rank's part and checks its own results, so any wrong
// value makes its rank, and so cutrun, fail.
#include <catch2/catch.hpp>
#include <cstdlib>

#include "dist/ddp/buckets.h"
#include "dist/ddp/communicator.h"
#include "dist/launch/env.h"
#include "dist/launch/rendezvous.h"
#include "kernels/base/check.h"
#include "tests/gpu.h"
#include "tests/process.h"

using namespace cutrain;
using namespace std::chrono_literals;

namespace {

// The test workers' rendezvous and collectives give up well before CTest would.
constexpr auto kWorkerTimeout = 20s;

void check_workers_passed(int nproc, const std::string& tag) {
  auto r = test::run_test_workers(nproc, tag);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  size_t passed = 0;
  for (size_t at = r.output.find("All tests passed"); at != std::string::npos;
       at = r.output.find("All tests passed", at + 1))
    ++passed;
  CHECK(passed == size_t(nproc));  // every rank ran its part: a hidden tag filters nothing out
}

// Rank r's contribution at element i, and the average over n ranks of it.
float contribution(int r, size_t i) { return float((r + 1) * int(i % 13 + 1)); }
float average(int n, size_t i) { return float(n + 1) / 2 * float(i % 13 + 1); }

// This process as one rank: store, rendezvous, communicator; on the GPU also its compute stream.
struct Rank {
  explicit Rank(bool on_gpu) : env(dist_env_from_environment()), on_gpu(on_gpu) {
    if (on_gpu) {
      CUDA_CHECK(cudaSetDevice(env.local_rank));
      CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    }
    env.rdzv_timeout = kWorkerTimeout;
    store = rendezvous(env);
    comm = make_communicator(env, *store, {.use_cuda = on_gpu, .compute_stream = stream, .timeout = kWorkerTimeout});
  }
  ~Rank() {
    comm.reset();
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  DistEnv env;
  bool on_gpu;
  cudaStream_t stream = nullptr;
  std::unique_ptr<Store> store;
  std::unique_ptr<Communicator> comm;
};

// Values on the host, and where the communicator wants them: the same memory for Gloo, a device
// copy for NCCL, moved on the compute stream (so the copies are ordered with the collectives).
class Buffer {
 public:
  Buffer(const Rank& rank, size_t count) : host(count), stream_(rank.stream) {
    if (rank.on_gpu) CUDA_CHECK(cudaMalloc(&device_, count * sizeof(float)));
  }
  ~Buffer() { cudaFree(device_); }

  float* data() { return device_ != nullptr ? device_ : host.data(); }
  // Host [begin, end) to where the communicator reads it.
  void upload(size_t begin, size_t end) {
    if (device_ != nullptr)
      CUDA_CHECK(cudaMemcpyAsync(device_ + begin, host.data() + begin, (end - begin) * sizeof(float),
                                 cudaMemcpyHostToDevice, stream_));
  }
  void upload() { upload(0, host.size()); }
  void download() {
    if (device_ == nullptr) return;
    CUDA_CHECK(cudaMemcpyAsync(host.data(), device_, host.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  std::vector<float> host;

 private:
  float* device_ = nullptr;
  cudaStream_t stream_;
};

void check_collectives(Rank& rank) {
  Communicator& comm = *rank.comm;
  const int n = rank.env.world_size, r = rank.env.rank;
  REQUIRE(comm.rank() == r);
  REQUIRE(comm.world_size() == n);
  CHECK(std::string(comm.backend()) == (rank.on_gpu ? "nccl" : "gloo"));

  Buffer x(rank, 1000);
  for (size_t i = 0; i < x.host.size(); ++i) x.host[i] = contribution(r, i);
  x.upload();
  comm.all_reduce(x.data(), x.host.size(), ReduceOp::sum);
  x.download();
  for (size_t i = 0; i < x.host.size(); ++i) REQUIRE(x.host[i] == float(n * (n + 1) / 2 * int(i % 13 + 1)));

  for (size_t i = 0; i < x.host.size(); ++i) x.host[i] = contribution(r, i);
  x.upload();
  comm.all_reduce(x.data(), x.host.size(), ReduceOp::average);
  x.download();
  for (size_t i = 0; i < x.host.size(); ++i) REQUIRE(x.host[i] == Approx(average(n, i)));

  // Broadcast from the last rank: everyone ends with its values.
  for (size_t i = 0; i < x.host.size(); ++i) x.host[i] = float(r * 10000 + int(i));
  x.upload();
  comm.broadcast(x.data(), x.host.size(), n - 1);
  x.download();
  for (size_t i = 0; i < x.host.size(); ++i) REQUIRE(x.host[i] == float((n - 1) * 10000 + int(i)));
  CHECK_THROWS_WITH(comm.broadcast(x.data(), 1, n), Catch::Contains("outside the world"));

  double counts[2] = {double(r), 1.0};
  comm.all_reduce_host(counts, 2, ReduceOp::sum);
  CHECK(counts[0] == n * (n - 1) / 2);
  CHECK(counts[1] == n);

  // Several collectives in flight at once, then joined.
  std::vector<std::unique_ptr<Buffer>> buffers;
  for (int b = 0; b < 3; ++b) {
    buffers.push_back(std::make_unique<Buffer>(rank, 5000));
    for (size_t i = 0; i < 5000; ++i) buffers.back()->host[i] = contribution(r, i);
    buffers.back()->upload();
  }
  for (auto& b : buffers) comm.all_reduce_async(b->data(), b->host.size(), ReduceOp::average);
  comm.wait_async();
  for (auto& b : buffers) {
    b->download();
    for (size_t i = 0; i < b->host.size(); ++i) REQUIRE(b->host[i] == Approx(average(n, i)));
  }
  comm.barrier();
}

// Each bucket all-reduced as soon as "backward" has written its last gradient, in bucket order,
// while later gradients are still being written (Note [The step] in app/train_step.cpp).
void check_bucketed_all_reduce(Rank& rank) {
  Communicator& comm = *rank.comm;
  const int n = rank.env.world_size, r = rank.env.rank;
  // Parameters in flat (backward) order: 1.4 MiB of fp32 gradients.
  const std::vector<int64_t> sizes{3, 1000, 70000, 5, 300000, 17};
  std::vector<int64_t> ends;
  int64_t total = 0;
  for (int64_t s : sizes) ends.push_back(total += s);
  Buffer grads(rank, size_t(total));

  // cap (MiB) -> buckets: one per parameter; 256 KiB closes after parameters 3 and 5; one.
  const std::vector<std::pair<double, size_t>> caps{{0, 6}, {0.25, 3}, {1000, 1}};
  for (auto [cap_mb, bucket_count] : caps) {
    const std::vector<Bucket> buckets = plan_buckets(sizes, {.bucket_cap_mb = cap_mb});
    REQUIRE(buckets.size() == bucket_count);
    for (int step = 0; step < 2; ++step) {
      size_t next = 0;
      for (size_t p = 0; p < sizes.size(); ++p) {
        // "Backward" writes parameter p's gradients while earlier buckets may be in flight.
        const size_t begin = size_t(ends[p] - sizes[p]), end = size_t(ends[p]);
        for (size_t i = begin; i < end; ++i) grads.host[i] = contribution(r, i) * float(step + 1);
        grads.upload(begin, end);
        for (; next < buckets.size() && buckets[next].end <= ends[p]; ++next)
          comm.all_reduce_async(grads.data() + buckets[next].begin, size_t(buckets[next].end - buckets[next].begin),
                                ReduceOp::average);
        if (p == 2) {
          // A blocking collective in the middle of backward (as SyncBN's) keeps its place in line.
          double one = 1;
          comm.all_reduce_host(&one, 1, ReduceOp::sum);
          REQUIRE(one == n);
        }
      }
      REQUIRE(next == buckets.size());
      comm.wait_async();
      grads.download();
      for (size_t i = 0; i < grads.host.size(); ++i) REQUIRE(grads.host[i] == Approx(average(n, i) * float(step + 1)));
    }
  }
}

}  // namespace

TEST_CASE("Gloo all-reduce, broadcast and barrier agree across 2 and 3 processes", "[dist]") {
  check_workers_passed(2, "[.dist-worker-collectives]");
  check_workers_passed(3, "[.dist-worker-collectives]");
}

TEST_CASE("one rank's part: Gloo collectives", "[.dist-worker-collectives]") {
  Rank rank(/*on_gpu=*/false);
  check_collectives(rank);
}

TEST_CASE("bucketed all-reduces leave every rank with the average, for caps 0, small and huge", "[dist]") {
  check_workers_passed(2, "[.dist-worker-buckets]");
  check_workers_passed(3, "[.dist-worker-buckets]");
}

TEST_CASE("one rank's part: bucketed all-reduces over Gloo", "[.dist-worker-buckets]") {
  Rank rank(/*on_gpu=*/false);
  check_bucketed_all_reduce(rank);
}

TEST_CASE("NCCL collectives and bucketed all-reduces, world of one", "[dist]" CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  Rank rank(/*on_gpu=*/true);  // no launcher: RANK 0 of 1 on cuda:0
  check_collectives(rank);
  check_bucketed_all_reduce(rank);
}

TEST_CASE("NCCL collectives and bucketed all-reduces across 2 GPUs", "[dist][multi-gpu]" CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPUS(2);
  check_workers_passed(2, "[.dist-worker-nccl]");
}

TEST_CASE("one rank's part: NCCL collectives and bucketed all-reduces", "[.dist-worker-nccl]") {
  Rank rank(/*on_gpu=*/true);
  check_collectives(rank);
  check_bucketed_all_reduce(rank);
}

TEST_CASE("a rank that never arrives makes the others fail within the timeout, naming it", "[dist]") {
  auto r = test::run_test_workers(3, "[.dist-worker-late-rank]");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.seconds < 20);
}

TEST_CASE("one rank's part: the last rank stays away", "[.dist-worker-late-rank]") {
  DistEnv env = dist_env_from_environment();
  if (env.rank == env.world_size - 1) return;
  env.rdzv_timeout = 2s;
  // Rank 0 says so when its time is up; the others, as rank 0's store closes, or at their own end.
  const std::string missing = "rank " + std::to_string(env.world_size - 1) + " of " + std::to_string(env.world_size);
  if (env.rank == 0)
    CHECK_THROWS_WITH(rendezvous(env), Catch::StartsWith("rendezvous: " + missing + " did not arrive within 2 s"));
  else
    CHECK_THROWS_WITH(rendezvous(env), Catch::StartsWith("rendezvous: ") && Catch::Contains(missing));
}

TEST_CASE("a Gloo peer that exits makes the next collective fail instead of hang", "[dist]") {
  auto r = test::run_test_workers(2, "[.dist-worker-peer-exits]");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("[rank0]: All tests passed"));
}

TEST_CASE("one rank's part: rank 1 leaves after connecting", "[.dist-worker-peer-exits]") {
  Rank rank(/*on_gpu=*/false);
  // The barrier makes sure that rank 0 has finished connecting too; without it, rank 1 may leave
  // while rank 0 is still in Gloo's handshake, and then rank 0 fails there instead.
  rank.comm->barrier();
  if (rank.env.rank == 1) std::_Exit(0);  // gone without a word: its sockets close
  std::vector<float> x(100, 1.0f);
  CHECK_THROWS_WITH(rank.comm->all_reduce(x.data(), x.size(), ReduceOp::sum),
                    Catch::StartsWith("gloo all_reduce of 100 elements failed on rank 0: "));
  // Once failed, the communicator says so again rather than waiting on the lost peer.
  CHECK_THROWS_WITH(rank.comm->all_reduce(x.data(), x.size(), ReduceOp::sum), Catch::Contains("failed on rank 0"));
}

TEST_CASE("a world of one reduces to itself, on its own free port", "[dist]") {
  DistEnv env;  // no launcher: RANK 0 of 1
  env.rdzv_timeout = 5s;
  auto store = rendezvous(env);
  auto comm = make_communicator(env, *store, {.timeout = 5s});
  std::vector<float> grads{1, 2, 3, 4, 5};
  comm->all_reduce_async(grads.data(), 2, ReduceOp::average);
  comm->all_reduce_async(grads.data() + 2, 3, ReduceOp::average);
  comm->wait_async();
  CHECK(grads == std::vector<float>{1, 2, 3, 4, 5});
  comm->all_reduce(grads.data(), grads.size(), ReduceOp::sum);
  CHECK(grads == std::vector<float>{1, 2, 3, 4, 5});
}
