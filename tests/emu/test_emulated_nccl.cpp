// The emulated NCCL (emu/nccl.cpp) between real processes. Each test starts this binary
// once per rank with a hidden tag; the rank's part reads its rank, the world size, the unique id
// and a scenario from the environment. The parts that compute write their results into a folder,
// and the test holds them against a reference computed here in the same order, and against each
// other: every rank must get the same bits.
#include <nccl.h>
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "kernels/base/check.h"
#include "tests/process.h"

using namespace std::chrono_literals;
using cutrain::test::Process;

namespace {

using Clock = std::chrono::steady_clock;

// 300 000 floats and 600 000 bf16 span two of the emulation's 1 MiB chunks and part of a third.
constexpr size_t kFloats = 300000;
constexpr size_t kBf16s = 600000;
constexpr size_t kDoubles = 5;

// Rank r's element i: values of different magnitudes, so that the order of a sum shows in its bits.
// Not inlined: the ranks and the test's reference call one compiled copy. Inlined into both, clang
// -O3 computed one element a float ulp apart at one of the two places.
[[gnu::noinline]] float input(int r, size_t i) { return float(r + 1) * 0.1f * float(i % 97) + 1.0f / float(r + 3 + i % 5); }

std::string hex_of(const ncclUniqueId& id) {
  static const char digits[] = "0123456789abcdef";
  std::string text;
  for (char c : id.internal) {
    text += digits[(unsigned char)c >> 4];
    text += digits[(unsigned char)c & 15];
  }
  return text;
}

ncclUniqueId id_of(const std::string& hex) {
  ncclUniqueId id{};
  for (size_t i = 0; i < sizeof id.internal; ++i) id.internal[i] = char(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return id;
}

std::string variable(const char* name) {
  const char* value = std::getenv(name);
  if (!value) throw std::runtime_error(std::string("the worker needs ") + name);
  return value;
}

// The shared object of a unique id, as nccl.cpp's header describes its name.
std::filesystem::path shared_object_of(const ncclUniqueId& id) {
  return "/dev/shm/cutrain-nccl-" + std::string(id.internal + 16, 32);
}

// ---- the test's side: start the ranks, read their results ----

struct Job {
  ncclUniqueId id{};
  cutrain::test::TempDir results;
  std::vector<std::unique_ptr<Process>> ranks;

  Job() { REQUIRE(ncclGetUniqueId(&id) == ncclSuccess); }

  void start(int rank, int world, const std::string& scenario, bool blocking) {
    ranks.push_back(std::make_unique<Process>(std::vector<std::string>{
        "/usr/bin/env", "CUTRAIN_TEST_NCCL_RANK=" + std::to_string(rank),
        "CUTRAIN_TEST_NCCL_WORLD=" + std::to_string(world), "CUTRAIN_TEST_NCCL_ID=" + hex_of(id),
        "CUTRAIN_TEST_NCCL_SCENARIO=" + scenario, "CUTRAIN_TEST_NCCL_BLOCKING=" + std::string(blocking ? "1" : "0"),
        "CUTRAIN_TEST_NCCL_RESULTS=" + results.path().string(), cutrain::test::binary("cutrain_emu_nccl_tests"),
        "[.emu-nccl-rank]"}));
  }

  // Rank `rank` ended as its part wants: its checks passed.
  void check_passed(int rank) {
    Process::Result r = ranks[rank]->finish();
    INFO("rank " << rank << ":\n" << r.output);
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("All tests passed") != std::string::npos);
  }

  template <typename T>
  std::vector<T> result(const std::string& name, int rank) const {
    std::ifstream in(results / (name + "." + std::to_string(rank)), std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<T> values(bytes.size() / sizeof(T));
    std::memcpy(values.data(), bytes.data(), values.size() * sizeof(T));
    return values;
  }
};

// Note [Reduction order] of nccl.cpp, computed here for `world` ranks.
template <typename T, typename Accumulator>
std::vector<T> reference_reduction(int world, size_t count, bool average) {
  std::vector<T> out(count);
  for (size_t i = 0; i < count; ++i) {
    Accumulator sum = Accumulator(T(input(0, i)));
    for (int r = 1; r < world; ++r) sum += Accumulator(T(input(r, i)));
    out[i] = T(average ? sum / Accumulator(world) : sum);
  }
  return out;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <typename T, typename Accumulator>
void check_reduction(const Job& job, const std::string& name, int world, size_t count, bool average) {
  const std::vector<T> expected = reference_reduction<T, Accumulator>(world, count, average);
  for (int r = 0; r < world; ++r) {
    INFO(name << " on rank " << r);
    CHECK(same_bits(job.result<T>(name, r), expected));
  }
}

void check_collectives(int world, bool blocking) {
  Job job;
  if (blocking) {
    for (int r = 0; r < world; ++r) job.start(r, world, "collectives", blocking);
  } else {
    // Rank 0 joins first and alone, so its non-blocking init must say ncclInProgress.
    job.start(0, world, "collectives", blocking);
    REQUIRE(job.ranks[0]->read_until("rank 0 is joining"));
    for (int r = 1; r < world; ++r) job.start(r, world, "collectives", blocking);
  }
  for (int r = 0; r < world; ++r) job.check_passed(r);
  check_reduction<float, float>(job, "sum_f32", world, kFloats, false);
  check_reduction<float, float>(job, "avg_f32", world, kFloats, true);
  check_reduction<__nv_bfloat16, float>(job, "sum_bf16", world, kBf16s, false);
  check_reduction<__nv_bfloat16, float>(job, "avg_bf16", world, kBf16s, true);
  check_reduction<double, double>(job, "sum_f64", world, kDoubles, false);
  std::vector<float> root_input(kFloats);
  for (size_t i = 0; i < kFloats; ++i) root_input[i] = input(world - 1, i);
  for (int r = 0; r < world; ++r) {
    INFO("broadcast on rank " << r);
    CHECK(same_bits(job.result<float>("broadcast", r), root_input));
  }
  CHECK(!std::filesystem::exists(shared_object_of(job.id)));
}

// ---- a rank's side ----

struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) : bytes(bytes) { CUDA_CHECK(cudaMalloc(&data, bytes)); }
  ~DeviceBuffer() { cudaFree(data); }
  template <typename T>
  T* as() {
    return static_cast<T*>(data);
  }
  void* data = nullptr;
  size_t bytes;
};

// A device buffer holding input(rank, i) as T.
template <typename T>
std::unique_ptr<DeviceBuffer> inputs(int rank, size_t count) {
  std::vector<T> host(count);
  for (size_t i = 0; i < count; ++i) host[i] = T(input(rank, i));
  auto buffer = std::make_unique<DeviceBuffer>(count * sizeof(T));
  CUDA_CHECK(cudaMemcpy(buffer->data, host.data(), buffer->bytes, cudaMemcpyHostToDevice));
  return buffer;
}

void write_result(const std::string& name, int rank, DeviceBuffer& buffer) {
  std::vector<char> host(buffer.bytes);
  CUDA_CHECK(cudaMemcpy(host.data(), buffer.data, buffer.bytes, cudaMemcpyDeviceToHost));
  std::ofstream out(variable("CUTRAIN_TEST_NCCL_RESULTS") + "/" + name + "." + std::to_string(rank), std::ios::binary);
  out.write(host.data(), std::streamsize(host.size()));
}

// What ncclCommGetAsyncError says, once it no longer says ncclInProgress or `seconds` pass.
ncclResult_t settled_state(ncclComm_t comm, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress && Clock::now() < deadline) {
    REQUIRE(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
    std::this_thread::yield();
  }
  return state;
}

struct RankPart {
  int rank = std::stoi(variable("CUTRAIN_TEST_NCCL_RANK"));
  int world = std::stoi(variable("CUTRAIN_TEST_NCCL_WORLD"));
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;

  // `first_alone`: the test starts rank 0 first and the others once it says it is joining.
  explicit RankPart(bool first_alone) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = variable("CUTRAIN_TEST_NCCL_BLOCKING") == "1";
    const ncclResult_t joined =
        ncclCommInitRankConfig(&comm, world, id_of(variable("CUTRAIN_TEST_NCCL_ID")), rank, &config);
    if (!config.blocking) {
      if (rank == 0 && first_alone) {
        REQUIRE(joined == ncclInProgress);
        std::cout << "rank 0 is joining" << std::endl;
      }
      REQUIRE(settled_state(comm, 20) == ncclSuccess);
    } else {
      REQUIRE(joined == ncclSuccess);
    }
  }
  ~RankPart() {
    cudaStreamDestroy(stream);
  }
};

void run_collectives(RankPart& part) {
  auto sum_f32 = inputs<float>(part.rank, kFloats);
  auto avg_in = inputs<float>(part.rank, kFloats);
  DeviceBuffer avg_f32(kFloats * sizeof(float));
  auto sum_bf16 = inputs<__nv_bfloat16>(part.rank, kBf16s);
  auto avg_bf16 = inputs<__nv_bfloat16>(part.rank, kBf16s);
  auto sum_f64 = inputs<double>(part.rank, kDoubles);
  auto broadcast = inputs<float>(part.rank, kFloats);
  // Several collectives in flight (once streams are deferred): in place and not, every type and op.
  ncclComm_t comm = part.comm;
  REQUIRE(ncclAllReduce(sum_f32->data, sum_f32->data, kFloats, ncclFloat, ncclSum, comm, part.stream) == ncclSuccess);
  REQUIRE(ncclAllReduce(avg_in->data, avg_f32.data, kFloats, ncclFloat, ncclAvg, comm, part.stream) == ncclSuccess);
  REQUIRE(ncclAllReduce(sum_bf16->data, sum_bf16->data, kBf16s, ncclBfloat16, ncclSum, comm, part.stream) ==
          ncclSuccess);
  REQUIRE(ncclAllReduce(avg_bf16->data, avg_bf16->data, kBf16s, ncclBfloat16, ncclAvg, comm, part.stream) ==
          ncclSuccess);
  REQUIRE(ncclAllReduce(sum_f64->data, sum_f64->data, kDoubles, ncclDouble, ncclSum, comm, part.stream) == ncclSuccess);
  REQUIRE(ncclBroadcast(broadcast->data, broadcast->data, kFloats, ncclFloat, part.world - 1, comm, part.stream) ==
          ncclSuccess);
  CUDA_CHECK(cudaStreamSynchronize(part.stream));
  ncclResult_t state = ncclInProgress;
  REQUIRE(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
  REQUIRE(state == ncclSuccess);
  write_result("sum_f32", part.rank, *sum_f32);
  write_result("avg_f32", part.rank, avg_f32);
  write_result("sum_bf16", part.rank, *sum_bf16);
  write_result("avg_bf16", part.rank, *avg_bf16);
  write_result("sum_f64", part.rank, *sum_f64);
  write_result("broadcast", part.rank, *broadcast);

  const ncclResult_t finalized = ncclCommFinalize(comm);
  REQUIRE((finalized == ncclSuccess || finalized == ncclInProgress));
  if (finalized == ncclInProgress) REQUIRE(settled_state(comm, 20) == ncclSuccess);
  REQUIRE(ncclCommDestroy(comm) == ncclSuccess);
}

// What ncclCommGetAsyncError says once it no longer says ncclSuccess, or ncclSuccess after 5 s;
// with what ncclGetLastError then says.
std::pair<ncclResult_t, std::string> failure_of(ncclComm_t comm) {
  const auto deadline = Clock::now() + 5s;
  ncclResult_t state = ncclSuccess;
  while (state == ncclSuccess && Clock::now() < deadline) {
    REQUIRE(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
    std::this_thread::sleep_for(10ms);
  }
  return {state, ncclGetLastError(comm)};
}

// The last rank dies (SIGKILL) once it has joined, and the others wait for nothing: their async
// error queries alone must find out, naming the rank.
void run_killed_idle_peer(RankPart& part) {
  if (part.rank == part.world - 1) raise(SIGKILL);
  const auto [state, why] = failure_of(part.comm);
  INFO(why);
  CHECK(state == ncclRemoteError);
  CHECK(why.find("rank " + std::to_string(part.world - 1) + " (pid") != std::string::npos);
  // Destroyed, not aborted: a survivor's abort would be news to the other survivor first.
  CHECK(ncclCommDestroy(part.comm) == ncclSuccess);
}

// Rank 1 aborts its communicator once it has joined: rank 0 must learn of it.
void run_aborting_peer(RankPart& part) {
  if (part.rank == 1) {
    CHECK(ncclCommAbort(part.comm) == ncclSuccess);
    return;
  }
  const auto [state, why] = failure_of(part.comm);
  INFO(why);
  CHECK(state == ncclRemoteError);
  CHECK(why.find("rank 1 aborted its communicator") != std::string::npos);
  CHECK(ncclCommAbort(part.comm) == ncclSuccess);
}

// Rank 0 all-reduces where rank 1 broadcasts the same count: both communicators must fail with
// ncclInvalidUsage, and both streams go on.
void run_mismatch(RankPart& part) {
  DeviceBuffer data(kFloats * sizeof(float));
  const ncclResult_t issued =
      part.rank == 0 ? ncclAllReduce(data.data, data.data, kFloats, ncclFloat, ncclSum, part.comm, part.stream)
                     : ncclBroadcast(data.data, data.data, kFloats, ncclFloat, 0, part.comm, part.stream);
  REQUIRE(issued == ncclSuccess);
  CUDA_CHECK(cudaStreamSynchronize(part.stream));
  const auto [state, why] = failure_of(part.comm);
  INFO(why);
  CHECK(state == ncclInvalidUsage);
  CHECK(why.find("called another collective") != std::string::npos);
  CHECK(ncclCommDestroy(part.comm) == ncclSuccess);
}

// A 52 MB all-reduce, as large as cutrain's largest buckets and more: 50 chunks through the slots.
void run_large(RankPart& part) {
  constexpr size_t kLarge = 13'000'000;
  auto data = inputs<float>(part.rank, kLarge);
  REQUIRE(ncclAllReduce(data->data, data->data, kLarge, ncclFloat, ncclAvg, part.comm, part.stream) == ncclSuccess);
  CUDA_CHECK(cudaStreamSynchronize(part.stream));
  std::vector<float> result(kLarge);
  CUDA_CHECK(cudaMemcpy(result.data(), data->data, data->bytes, cudaMemcpyDeviceToHost));
  CHECK(same_bits(result, reference_reduction<float, float>(part.world, kLarge, true)));
  CHECK(ncclCommFinalize(part.comm) == ncclSuccess);
  CHECK(ncclCommDestroy(part.comm) == ncclSuccess);
}

// Rank 1 dies (SIGKILL) once it has joined. Rank 0's all-reduce waits for it, must end, and the
// communicator must then report ncclRemoteError naming rank 1, all within a few seconds.
void run_killed_peer(RankPart& part) {
  if (part.rank == 1) raise(SIGKILL);
  DeviceBuffer data(kFloats * sizeof(float));
  const auto start = Clock::now();
  REQUIRE(ncclAllReduce(data.data, data.data, kFloats, ncclFloat, ncclSum, part.comm, part.stream) == ncclSuccess);
  CUDA_CHECK(cudaStreamSynchronize(part.stream));
  ncclResult_t state = ncclSuccess;
  REQUIRE(ncclCommGetAsyncError(part.comm, &state) == ncclSuccess);
  CHECK(state == ncclRemoteError);
  const std::string why = ncclGetLastError(part.comm);
  INFO(why);
  CHECK(why.find("rank 1 (pid") != std::string::npos);
  CHECK(why.find("exited") != std::string::npos);
  CHECK(Clock::now() - start < 5s);
  // A failed communicator takes no more collectives, and its abort does not wait for anyone.
  CHECK(ncclAllReduce(data.data, data.data, 1, ncclFloat, ncclSum, part.comm, part.stream) == ncclRemoteError);
  CHECK(ncclCommAbort(part.comm) == ncclSuccess);
}

// Rank 1 stops (SIGSTOP) once it has joined: alive, it is no error, but it never arrives. Rank 0's
// all-reduce waits until another thread aborts the communicator, and then its stream goes on.
void run_abort(RankPart& part) {
  if (part.rank == 1) raise(SIGSTOP);
  alarm(10);  // an abort that does not unblock the stream ends this rank, and fails the test
  DeviceBuffer data(kFloats * sizeof(float));
  ncclResult_t state_before_abort = ncclInternalError;
  std::thread aborter([&] {
    std::this_thread::sleep_for(1s);
    ncclCommGetAsyncError(part.comm, &state_before_abort);
    ncclCommAbort(part.comm);
  });
  const auto start = Clock::now();
  REQUIRE(ncclAllReduce(data.data, data.data, kFloats, ncclFloat, ncclSum, part.comm, part.stream) == ncclSuccess);
  CUDA_CHECK(cudaStreamSynchronize(part.stream));
  const auto waited = Clock::now() - start;
  aborter.join();
  alarm(0);
  CHECK(state_before_abort == ncclSuccess);
  CHECK(waited < 5s);
}

}  // namespace

TEST_CASE("one rank's part: emulated NCCL", "[.emu-nccl-rank]") {
  const std::string scenario = variable("CUTRAIN_TEST_NCCL_SCENARIO");
  RankPart part(scenario == "collectives");
  if (scenario == "collectives") run_collectives(part);
  if (scenario == "killed peer") run_killed_peer(part);
  if (scenario == "abort") run_abort(part);
  if (scenario == "killed idle peer") run_killed_idle_peer(part);
  if (scenario == "aborting peer") run_aborting_peer(part);
  if (scenario == "large") run_large(part);
  if (scenario == "mismatch") run_mismatch(part);
}

TEST_CASE("Emulated NCCL: all-reduce and broadcast across 2 processes with blocking init", "[emu][nccl]") {
  check_collectives(2, true);
}

TEST_CASE("Emulated NCCL: all-reduce and broadcast across 3 processes with non-blocking init", "[emu][nccl]") {
  check_collectives(3, false);
}

TEST_CASE("Emulated NCCL: a killed peer fails the survivor's collective and async error query", "[emu][nccl]") {
  Job job;
  job.start(0, 2, "killed peer", false);
  job.start(1, 2, "killed peer", false);
  job.check_passed(0);
  CHECK(job.ranks[1]->finish().signal == SIGKILL);
  CHECK(!std::filesystem::exists(shared_object_of(job.id)));
}

TEST_CASE("Emulated NCCL: a killed peer fails the async error query of a survivor that waits for nothing",
          "[emu][nccl]") {
  Job job;
  for (int r = 0; r < 3; ++r) job.start(r, 3, "killed idle peer", false);
  job.check_passed(0);
  job.check_passed(1);
  CHECK(job.ranks[2]->finish().signal == SIGKILL);
}

TEST_CASE("Emulated NCCL: a peer's abort fails the survivor's communicator", "[emu][nccl]") {
  Job job;
  for (int r = 0; r < 2; ++r) job.start(r, 2, "aborting peer", true);
  job.check_passed(0);
  job.check_passed(1);
}

TEST_CASE("Emulated NCCL: ranks that call different collectives fail with ncclInvalidUsage", "[emu][nccl]") {
  Job job;
  for (int r = 0; r < 2; ++r) job.start(r, 2, "mismatch", true);
  job.check_passed(0);
  job.check_passed(1);
}

TEST_CASE("Emulated NCCL: a 52 MB all-reduce across 2 processes", "[emu][nccl]") {
  Job job;
  for (int r = 0; r < 2; ++r) job.start(r, 2, "large", true);
  job.check_passed(0);
  job.check_passed(1);
}

TEST_CASE("Emulated NCCL: abort ends a collective that waits for a stopped peer", "[emu][nccl]") {
  Job job;
  job.start(0, 2, "abort", true);
  job.start(1, 2, "abort", true);
  job.check_passed(0);  // rank 1 stays stopped until the job's end kills it
}

TEST_CASE("Emulated NCCL refuses what NCCL refuses", "[emu][nccl]") {
  ncclUniqueId id{};
  ncclComm_t comm = nullptr;
  CHECK(ncclCommInitRank(&comm, 1, id, 0) == ncclInvalidArgument);  // not an id from ncclGetUniqueId
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  CHECK(ncclCommInitRank(&comm, 2, id, 2) == ncclInvalidArgument);
  REQUIRE(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);
  std::vector<float> host(4);
  DeviceBuffer device(4 * sizeof(float));
  CHECK(ncclAllReduce(host.data(), host.data(), 4, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK(std::string(ncclGetLastError(nullptr)).find("not inside one device allocation") != std::string::npos);
  CHECK(ncclAllReduce(device.data, device.data, 5, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclAllReduce(device.data, device.data, 4, ncclInt32, ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclAllReduce(device.data, device.data, 4, ncclFloat, ncclMax, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclBroadcast(device.data, device.data, 4, ncclFloat, 1, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclAllReduce(device.data, device.data, 4, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(ncclCommFinalize(comm) == ncclSuccess);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
  int version = 0;
  CHECK(ncclGetVersion(&version) == ncclSuccess);
  CHECK(version == NCCL_VERSION_CODE);
  CHECK(std::string(ncclGetErrorString(ncclRemoteError)) == "remote process exited or there was a network error");
}

TEST_CASE("Emulated NCCL: a blocking init that fails leaves no communicator and a join that never ends is aborted",
          "[emu][nccl]") {
  ncclUniqueId id{};
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t waiting = nullptr;  // rank 0 of 2, whose peer never comes
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  REQUIRE(ncclCommInitRankConfig(&waiting, 2, id, 0, &config) == ncclInProgress);
  CHECK(std::filesystem::exists(shared_object_of(id)));
  ncclComm_t comm = reinterpret_cast<ncclComm_t>(&config);  // anything but null
  CHECK(ncclCommInitRank(&comm, 2, id, 0) == ncclInvalidUsage);
  CHECK(comm == nullptr);
  CHECK(std::string(ncclGetLastError(nullptr)).find("rank 0 has joined already") != std::string::npos);
  CHECK(ncclCommInitRank(&comm, 3, id, 1) == ncclInvalidUsage);
  CHECK(comm == nullptr);
  CHECK(std::string(ncclGetLastError(nullptr)).find("another size") != std::string::npos);
  ncclResult_t state = ncclSuccess;
  REQUIRE(ncclCommGetAsyncError(waiting, &state) == ncclSuccess);
  CHECK(state == ncclInProgress);
  CHECK(ncclCommAbort(waiting) == ncclSuccess);
  CHECK(!std::filesystem::exists(shared_object_of(id)));
}
