// The CUDA emulation itself (emu/): launches that a GPU refuses fail the same way, barriers
// and warp collectives mean what they mean on the device, a collective that a lane never reaches
// fails with the kernel's name, atomics, bf16 rounding, the runtime's checks of copies and
// handles, and cooperative launches: the grid's barrier, the emulated device's occupancy and the
// launch limit. The kernels here are small CUDA written for these checks, launched like cutrain's.
#include <catch2/catch.hpp>

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "kernels/base/check.h"
#include "kernels/launch.cuh"
#include "tests/device_buffer.h"

using namespace cutrain;
using test::PoisonedBuffer;

namespace {

// Runs the test's launches under `order`, then restores the schedule the process started with.
class ScheduleScope {
 public:
  explicit ScheduleScope(emu::ThreadOrder order) : saved_(emu::schedule()) { emu::set_schedule({order, 7}); }
  ~ScheduleScope() { emu::set_schedule(saved_); }

 private:
  emu::Schedule saved_;
};

const auto kOrders = {emu::ThreadOrder::forward, emu::ThreadOrder::reverse, emu::ThreadOrder::shuffle};

// A kernel runs later, on the emulated device: its failure comes from the next synchronising
// call, which also leaves it as the last error (cleared here, for the next launch's check).
#define LAUNCH_AND_WAIT(launch)                             \
  [&] {                                                     \
    launch;                                                 \
    const cudaError_t device_status = cudaDeviceSynchronize(); \
    cudaGetLastError();                                     \
    CUDA_CHECK(device_status);                              \
  }()

__global__ void fill_kernel(int* out, int value) {
  out[(blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x] = value;
}

// out[t] = in[n - 1 - t] through shared memory, with or without the barrier between.
__global__ void reverse_kernel(const float* in, float* out, bool barrier) {
  CUTRAIN_DYNAMIC_SHARED(float, staged);
  const unsigned t = threadIdx.x, n = blockDim.x;
  staged[t] = in[t];
  if (barrier) __syncthreads();
  out[t] = staged[n - 1 - t];
}

std::vector<float> iota_floats(size_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 1.0f);
  return v;
}

}  // namespace

TEST_CASE("emulation: launches a GPU refuses fail through the launch check", "[emu]") {
  PoisonedBuffer<int> out(4);
  const auto launch = [&](dim3 grid, dim3 block, size_t shared) {
    launch_kernel("fill_kernel", fill_kernel, grid, block, shared, nullptr, out.get(), 1);
  };
  CHECK_THROWS_WITH(launch(1, 1025, 0), Catch::Contains("fill_kernel<<<(1,1,1), (1025,1,1), 0>>> failed at") &&
                                            Catch::Contains("test_emulation.cpp") &&
                                            Catch::Contains("invalid configuration argument"));
  CHECK_THROWS_WITH(launch(1, dim3(32, 32, 2), 0), Catch::Contains("invalid configuration argument"));
  CHECK_THROWS_WITH(launch(dim3(1, 65536), 1, 0), Catch::Contains("invalid configuration argument"));
  CHECK_THROWS_WITH(launch(dim3(1, 1, 65536), 1, 0), Catch::Contains("invalid configuration argument"));
  CHECK_THROWS_WITH(launch(0, 32, 0), Catch::Contains("invalid configuration argument"));
  CHECK_THROWS_WITH(launch(1, 0, 0), Catch::Contains("invalid configuration argument"));
  CHECK_THROWS_WITH(launch(1, 32, 48 * 1024 + 1), Catch::Contains("invalid argument (cudaErrorInvalidValue)"));
  // The limits themselves are allowed, and a refused launch leaves no error behind.
  launch_kernel("fill_kernel", fill_kernel, dim3(2, 1, 2), 1024, 48 * 1024, nullptr, out.get(), 3);
  CHECK(out.copy_to_host() == std::vector<int>{3, 3, 3, 3});
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("emulation: __syncthreads orders shared memory, and without it every order reads garbage", "[emu]") {
  const int n = 96;
  const std::vector<float> in = iota_floats(n);
  std::vector<float> reversed(in.rbegin(), in.rend());
  PoisonedBuffer<float> gin(in), gout(n);
  for (emu::ThreadOrder order : kOrders) {
    ScheduleScope scope(order);
    for (bool barrier : {true, false}) {
      launch_kernel("reverse_kernel", reverse_kernel, 1, n, n * sizeof(float), nullptr, gin.get(), gout.get(), barrier);
      // Shared memory starts as NaN (garbage on a GPU): without the barrier some thread reads it.
      CHECK((gout.copy_to_host() == reversed) == barrier);
    }
  }
}

namespace {

enum class Shuffle { xor_sum, down, up, idx, ballot, any_all };

// One warp: each lane's result of one collective over the lane numbers.
__global__ void shuffle_kernel(Shuffle what, int arg, int width, int* out) {
  const int lane = int(threadIdx.x);
  int r = 0;
  switch (what) {
    case Shuffle::xor_sum:
      r = lane;
      for (int offset = 16; offset > 0; offset /= 2) r += __shfl_xor_sync(0xffffffffu, r, offset);
      break;
    case Shuffle::down: r = __shfl_down_sync(0xffffffffu, lane, unsigned(arg), width); break;
    case Shuffle::up: r = __shfl_up_sync(0xffffffffu, lane, unsigned(arg), width); break;
    case Shuffle::idx: r = __shfl_sync(0xffffffffu, lane, arg, width); break;
    case Shuffle::ballot: r = int(__ballot_sync(0xffffffffu, lane % 3 == 0)); break;
    case Shuffle::any_all:
      r = __any_sync(0xffffffffu, lane == 5) + 2 * __all_sync(0xffffffffu, lane < 31) +
          4 * __all_sync((0x0000ffffu & (lane < 16 ? ~0u : 0u)) | (lane < 16 ? 0u : 0xffff0000u), lane < 20);
      break;
  }
  __syncwarp();
  out[lane] = r;
}

std::vector<int> run_shuffle(Shuffle what, int arg = 0, int width = 32) {
  PoisonedBuffer<int> out(32);
  launch_kernel("shuffle_kernel", shuffle_kernel, 1, 32, 0, nullptr, what, arg, width, out.get());
  return out.copy_to_host();
}

// What CUDA's documentation says each lane gets.
std::vector<int> expected(int (*lane_result)(int lane)) {
  std::vector<int> v(32);
  for (int lane = 0; lane < 32; ++lane) v[size_t(lane)] = lane_result(lane);
  return v;
}

}  // namespace

TEST_CASE("emulation: warp shuffles, ballots and votes give each lane what CUDA documents", "[emu]") {
  for (emu::ThreadOrder order : kOrders) {
    ScheduleScope scope(order);
    CHECK(run_shuffle(Shuffle::xor_sum) == std::vector<int>(32, 31 * 32 / 2));
    // down by 3 in segments of 8: past the segment's end, a lane keeps its own value.
    CHECK(run_shuffle(Shuffle::down, 3, 8) == expected([](int l) { return l % 8 + 3 < 8 ? l + 3 : l; }));
    CHECK(run_shuffle(Shuffle::up, 5) == expected([](int l) { return l >= 5 ? l - 5 : l; }));
    // lane 13 of each 16-lane segment (the source lane modulo the width).
    CHECK(run_shuffle(Shuffle::idx, 29, 16) == expected([](int l) { return l / 16 * 16 + 13; }));
    // an offset of 32 or more keeps its low five bits: 33 moves by 1.
    CHECK(run_shuffle(Shuffle::down, 33) == expected([](int l) { return l < 31 ? l + 1 : l; }));
    CHECK(run_shuffle(Shuffle::ballot) == std::vector<int>(32, int(0x49249249u)));
    // any(lane == 5) = 1, all(lane < 31) = 0; the two half-warp votes: all(lane < 20) is 1 for
    // the lower half only.
    CHECK(run_shuffle(Shuffle::any_all) == expected([](int l) { return 1 + (l < 16 ? 4 : 0); }));
  }
}

namespace {

// Lanes from `active` on return before a full-warp shuffle: the rest wait for them forever.
__global__ void diverged_kernel(int active, int* out) {
  if (int(threadIdx.x) >= active) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, int(threadIdx.x), 1);
}

// A shuffle by half the warp, the other half at the block's barrier.
__global__ void barrier_against_shuffle_kernel(int* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_down_sync(0xffffffffu, int(threadIdx.x), 1);
  __syncthreads();
}

}  // namespace

TEST_CASE("emulation: a warp collective that a lane never reaches fails with the kernel's name", "[emu]") {
  PoisonedBuffer<int> out(64);
  CHECK_THROWS_WITH(LAUNCH_AND_WAIT(launch_kernel("diverged_kernel", diverged_kernel, 1, 32, 0, nullptr, 16, out.get())),
                    Catch::Contains("unspecified launch failure") &&
                        Catch::Contains("diverged_kernel: block (0,0,0)") &&
                        Catch::Contains("__shfl_xor_sync with mask 0xffffffff, but lane 16 has exited"));
  CHECK_THROWS_WITH(LAUNCH_AND_WAIT(launch_kernel("barrier_against_shuffle_kernel", barrier_against_shuffle_kernel, 1,
                                                  32, 0, nullptr, out.get())),
                    Catch::Contains("but lane 16 waits at __syncthreads"));
  // A block of 48 threads: its second warp has 16 lanes, and a full mask names lanes it lacks.
  CHECK_THROWS_WITH(LAUNCH_AND_WAIT(launch_kernel("diverged_kernel", diverged_kernel, 1, 48, 0, nullptr, 48, out.get())),
                    Catch::Contains("names lanes beyond the 16 of its warp"));
  // The emulation carries on after a failed kernel (a GPU would need a new process).
  launch_kernel("diverged_kernel", diverged_kernel, 1, 32, 0, nullptr, 32, out.get());
  CHECK(out.copy_to_host()[3] == 2);
}

namespace {

// The pattern of a one-launch reduction: every block adds its share to partial[blockIdx.x] and
// takes a ticket; the block with the last ticket adds up the partials. Blocks run one after
// another here, so the last ticket goes to the last block.
__global__ void last_block_sum_kernel(const int* in, int n, int* partial, unsigned* ticket, int* total,
                                      unsigned long long* count, float* float_sum) {
  __shared__ int block_sum;
  __shared__ bool last;
  if (threadIdx.x == 0) block_sum = 0;
  __syncthreads();
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) {
    atomicAdd(&block_sum, in[i]);
    atomicAdd(count, 1ull);
    atomicAdd(float_sum, 0.5f);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = block_sum;
    __threadfence();
    last = atomicInc(ticket, gridDim.x - 1) == gridDim.x - 1;
  }
  __syncthreads();
  if (last && threadIdx.x == 0) {
    int sum = 0;
    for (unsigned b = 0; b < gridDim.x; ++b) sum += partial[b];
    *total = sum;
  }
}

__global__ void exchange_kernel(int* value, int* old_cas, int* old_exch) {
  *old_cas = atomicCAS(value, 7, 9);  // 7 -> 9
  *old_exch = atomicExch(value, 11);  // 9 -> 11
}

}  // namespace

TEST_CASE("emulation: atomics and the last-block reduction", "[emu]") {
  const int n = 1000, threads = 128, blocks = (n + threads - 1) / threads;
  std::vector<int> in(n);
  std::iota(in.begin(), in.end(), -300);
  PoisonedBuffer<int> gin(in), partial(blocks), total(1);
  PoisonedBuffer<unsigned> ticket(std::vector<unsigned>{0});
  PoisonedBuffer<unsigned long long> count(std::vector<unsigned long long>{0});
  PoisonedBuffer<float> float_sum(std::vector<float>{0.0f});
  launch_kernel("last_block_sum_kernel", last_block_sum_kernel, blocks, threads, 0, nullptr, gin.get(), n,
                partial.get(), ticket.get(), total.get(), count.get(), float_sum.get());
  CHECK(total.copy_to_host()[0] == std::accumulate(in.begin(), in.end(), 0));
  CHECK(ticket.copy_to_host()[0] == 0u);  // atomicInc wrapped back to 0 after gridDim.x tickets
  CHECK(count.copy_to_host()[0] == unsigned(n));
  CHECK(float_sum.copy_to_host()[0] == 500.0f);

  PoisonedBuffer<int> value(std::vector<int>{7}), old_cas(1), old_exch(1);
  launch_kernel("exchange_kernel", exchange_kernel, 1, 1, 0, nullptr, value.get(), old_cas.get(), old_exch.get());
  CHECK(old_cas.copy_to_host()[0] == 7);
  CHECK(old_exch.copy_to_host()[0] == 9);
  CHECK(value.copy_to_host()[0] == 11);
}

TEST_CASE("emulation: bf16 rounds to nearest even as the device does", "[emu]") {
  const auto bits = [](float f) { return __bfloat16_as_ushort(__float2bfloat16(f)); };
  CHECK(bits(1.0f) == 0x3f80);
  CHECK(bits(1.0f + 0x1p-8f) == 0x3f80);             // halfway, to the even 1.0
  CHECK(bits(1.0f + 0x1p-7f + 0x1p-8f) == 0x3f82);   // halfway, to the even 1 + 2^-6
  CHECK(bits(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81);  // above halfway, up
  CHECK(bits(-2.5f) == 0xc020);
  CHECK(bits(INFINITY) == 0x7f80);
  CHECK(bits(3.4e38f) == 0x7f80);  // rounds up past the largest bf16
  CHECK(bits(NAN) == 0x7fff);      // every NaN: the canonical one
  CHECK(bits(-0.0f) == 0x8000);
  CHECK(__bfloat162float(__ushort_as_bfloat16(0x3f81)) == 1.0f + 0x1p-7f);
}

TEST_CASE("emulation: copies, memsets and handles are checked like the runtime's", "[emu]") {
  int* device = nullptr;
  CUDA_CHECK(cudaMalloc(&device, 4 * sizeof(int)));
  std::vector<int> host(8);
  CHECK(cudaMemcpy(device, host.data(), 4 * sizeof(int), cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cudaMemcpy(device, host.data(), 5 * sizeof(int), cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(host.data(), device, 4 * sizeof(int), cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaMemset(device + 1, 0, 4 * sizeof(int)) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaSuccess);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaMemsetAsync(device, 0, 4 * sizeof(int), stream));
  CUDA_CHECK(cudaStreamDestroy(stream));
  CHECK(cudaMemsetAsync(device, 0, 4 * sizeof(int), stream) == cudaErrorInvalidResourceHandle);
  CHECK_THROWS_WITH(launch_kernel("fill_kernel", fill_kernel, 1, 1, 0, stream, device, 1),
                    Catch::Contains("invalid resource handle"));
  CUDA_CHECK(cudaFree(device));
  CHECK(cudaFree(device) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
}

TEST_CASE("emulation: --thread-order names a thread order", "[emu]") {
  CHECK(emu::parse_schedule("reverse").order == emu::ThreadOrder::reverse);
  CHECK(emu::parse_schedule("shuffle:42").seed == 42);
  CHECK_THROWS_WITH(emu::parse_schedule("backwards"), Catch::Contains("expected forward, reverse, shuffle"));
  CHECK_THROWS(emu::parse_schedule("shuffle:x"));
}

namespace {

// out[i] = in[i] as one 16-byte load and store per thread, and each thread's bit counts.
__global__ void vector_copy_kernel(const float4* in, float4* out, int* bits) {
  const unsigned i = threadIdx.x;
  out[i] = in[i];
  bits[i] = __popc(i) * 100 + __ffs(int(i));
}

}  // namespace

TEST_CASE("emulation: vector types move 16 bytes at once, and the bit intrinsics count", "[emu]") {
  static_assert(alignof(float4) == 16 && alignof(int4) == 16 && alignof(uint4) == 16 && alignof(float2) == 8);
  const std::vector<float> values = iota_floats(4 * 32);
  PoisonedBuffer<float> in(values), out(values.size());
  PoisonedBuffer<int> bits(32);
  launch_kernel("vector_copy_kernel", vector_copy_kernel, 1, 32, 0, nullptr, reinterpret_cast<const float4*>(in.get()),
                reinterpret_cast<float4*>(out.get()), bits.get());
  CHECK(out.copy_to_host() == values);
  const std::vector<int> b = bits.copy_to_host();
  CHECK(b[0] == 0);           // no bits set, no first bit
  CHECK(b[12] == 200 + 3);    // 0b1100
  CHECK(b[31] == 500 + 1);    // 0b11111
}

namespace {

// Every block puts its number in its own shared memory and 1 + its number in slots[blockIdx.x];
// then (after the grid's barrier, when `barrier`) each thread adds up all the slots, plus 1000
// if its block's shared memory no longer holds the block's number.
__global__ void grid_sum_kernel(int* slots, int* sums, bool barrier) {
  CUTRAIN_DYNAMIC_SHARED(int, mine);
  if (threadIdx.x == 0) {
    mine[0] = int(blockIdx.x);
    slots[blockIdx.x] = int(blockIdx.x) + 1;
  }
  __syncthreads();
  if (barrier) cooperative_groups::this_grid().sync();
  int sum = 0;
  for (unsigned b = 0; b < gridDim.x; ++b) sum += slots[b];
  sums[blockIdx.x * blockDim.x + threadIdx.x] = sum + (mine[0] == int(blockIdx.x) ? 0 : 1000);
}

// Thread `leaver` of block 0 returns; the rest wait at the grid's barrier.
__global__ void grid_leaver_kernel(int leaver) {
  if (blockIdx.x == 0 && int(threadIdx.x) == leaver) return;
  cooperative_groups::this_grid().sync();
}

}  // namespace

TEST_CASE("emulation: a cooperative grid's barrier orders its blocks, and without it some order reads garbage",
          "[emu]") {
  const int blocks = 6, threads = 64, n = blocks * threads;
  const std::vector<int> want(n, blocks * (blocks + 1) / 2);
  for (emu::ThreadOrder order : kOrders) {
    ScheduleScope scope(order);
    for (bool barrier : {true, false}) {
      INFO("order " << int(order) << ", barrier " << barrier);
      PoisonedBuffer<int> slots(blocks), sums(n);  // slots start at -1 (every byte 0xFF)
      launch_cooperative_kernel("grid_sum_kernel", grid_sum_kernel, blocks, threads, sizeof(int), nullptr,
                                slots.get(), sums.get(), barrier);
      // With the barrier every block sees every slot, and keeps its own shared memory.
      if (barrier) CHECK(sums.copy_to_host() == want);
      // Without it, a block that runs before another reads that one's slot unwritten.
      if (!barrier && order != emu::ThreadOrder::shuffle) CHECK(sums.copy_to_host() != want);
    }
  }
}

TEST_CASE("emulation: the grid's barrier fails outside a cooperative launch, or when a thread never comes", "[emu]") {
  PoisonedBuffer<int> slots(2), sums(64);
  CHECK_THROWS_WITH(LAUNCH_AND_WAIT(launch_kernel("grid_sum_kernel", grid_sum_kernel, 2, 32, sizeof(int), nullptr,
                                                  slots.get(), sums.get(), true)),
      Catch::Contains("grid_sum_kernel: block (") &&  // the first the schedule runs
          Catch::Contains("), its threads wait at the grid's barrier, but the kernel was not launched cooperatively"));
  CHECK_THROWS_WITH(
      LAUNCH_AND_WAIT(launch_cooperative_kernel("grid_leaver_kernel", grid_leaver_kernel, 2, 32, 0, nullptr, 5)),
                    Catch::Contains("grid_leaver_kernel: block (0,0,0), thread (0,0,0) (warp 0, lane 0) waits at "
                                    "the grid's barrier, but thread (5,0,0) (warp 0, lane 5) has exited"));
  LAUNCH_AND_WAIT(launch_cooperative_kernel("grid_leaver_kernel", grid_leaver_kernel, 2, 32, 0, nullptr, -1));  // all come
}

TEST_CASE("emulation: the emulated device's occupancy bounds a cooperative grid, as on a GPU", "[emu]") {
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  CHECK(prop.multiProcessorCount == emu::kDevice.multiprocessors);
  CHECK(prop.sharedMemPerBlockOptin == 227 * 1024);
  int sms = 0, optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  CHECK(sms == 4);
  CHECK(optin == 227 * 1024);

  // 1024 threads: two blocks per multiprocessor by threads (and by the 32 registers a thread is
  // taken to use); 200 KiB of shared memory: one, since 228 KiB per multiprocessor hold one.
  const auto occupancy = [](int threads, size_t shared) {
    int blocks = -1;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, grid_sum_kernel, threads, shared));
    return blocks;
  };
  CHECK(occupancy(1024, 0) == 2);
  CHECK(occupancy(1024, 200 * 1024) == 1);
  CHECK(occupancy(64, 0) == 32);
  CHECK(occupancy(64, 228 * 1024) == 0);

  PoisonedBuffer<int> slots(9), sums(9 * 1024);
  const auto launch = [&](int blocks, size_t shared) {
    launch_cooperative_kernel("grid_sum_kernel", grid_sum_kernel, blocks, 1024, shared, nullptr, slots.get(),
                              sums.get(), true);
  };
  launch(8, sizeof(int));  // 4 multiprocessors x 2
  launch(4, 200 * 1024);   // 4 x 1, over 48 KiB: the launcher opts in
  CHECK_THROWS_WITH(launch(9, sizeof(int)), Catch::Contains("grid_sum_kernel<<<(9,1,1), (1024,1,1), 4>>>") &&
                                      Catch::Contains("too many blocks in cooperative launch"));
  CHECK_THROWS_WITH(launch(5, 200 * 1024), Catch::Contains("too many blocks in cooperative launch"));
  // An ordinary launch stays at 48 KiB unless the kernel opted in: fill_kernel never did.
  PoisonedBuffer<int> out(1);
  CHECK_THROWS_WITH(launch_kernel("fill_kernel", fill_kernel, 1, 1, 100 * 1024, nullptr, out.get(), 1),
                    Catch::Contains("invalid argument"));
}
