// block.h: how the emulation (emu/) runs a grid on the CPU.
//
// Blocks run one after another, in the schedule's order (below). A block's threads are
// cooperative fibers (Boost.Context) on the calling host thread: each runs until it reaches
// __syncthreads, a warp collective (__shfl_*_sync, __ballot_sync, __any_sync, __all_sync,
// __syncwarp), the grid's barrier or its end, then hands over to the next. When no thread can run, the scheduler completes what is complete:
//   - a warp collective, once every lane its mask names waits at the same collective with the
//     same mask: each lane gets its result and runs again;
//   - the barrier, once every thread that has not exited waits at it.
// If neither is possible, some thread waits for a lane or a thread that will never come (a mask
// naming an exited lane, a lane at __syncthreads, a collective against another collective): the
// kernel fails with its name and the culprit, as cudaErrorLaunchFailure.
//
// A cooperative launch (cudaLaunchCooperativeKernel, or cudaLaunchKernelEx with
// cudaLaunchAttributeCooperative) may wait at the grid's barrier, cooperative_groups'
// this_grid().sync(). Its blocks are all alive at once, as a GPU guarantees them to be: each block
// runs until all its threads wait at the grid's barrier (or have finished), then the next block
// runs; once every thread of the grid waits there, all go on. Between two grid barriers the blocks
// take turns in the schedule's order too, so a block that reads what another block writes before
// the barrier that should order them sees it unwritten in at least one order. A thread that
// exits while others wait at the grid's barrier would leave them waiting forever on a GPU: the
// kernel fails. The grid must fit the device at once (runtime.h's emulated device), else the
// launch fails with cudaErrorCooperativeLaunchTooLarge, as on a GPU. A static __shared__ variable
// is one for the whole program (device.h), so a cooperative kernel keeps its shared data in
// dynamic shared memory, which each block has its own of.
//
// The order in which the threads take turns between two such points, and in which the blocks of
// an ordinary launch run, is a Schedule: forward (thread 0 first, the default), reverse, or
// shuffle (a new seeded permutation at every turn). A kernel that leans on an order, say by
// reading shared memory before the barrier that should protect it, gives a wrong result in at
// least one of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "emu/runtime.h"
#include "emu/vector_types.h"

// The built-in variables: the scheduler sets them before a thread runs.
extern uint3 threadIdx;
extern uint3 blockIdx;
extern dim3 blockDim;
extern dim3 gridDim;
extern const int warpSize;

namespace cutrain::emu {

enum class ThreadOrder { forward, reverse, shuffle };

struct Schedule {
  ThreadOrder order = ThreadOrder::forward;
  uint64_t seed = 0;  // for shuffle
};

// "forward", "reverse", "shuffle" or "shuffle:SEED"; throws std::invalid_argument otherwise.
Schedule parse_schedule(const std::string& text);
// The schedule of the launches that follow (forward until set). Set it while the device is idle
// (after a synchronising call): the device thread reads it as it runs a grid.
Schedule schedule();
void set_schedule(Schedule schedule);

// One launch: the kernel's name (for messages), its shape, and its body, which runs one thread
// given the launch's arguments.
struct Grid {
  const char* kernel;
  dim3 grid, block;
  size_t dynamic_shared_bytes;
  size_t max_dynamic_shared_bytes;  // the kernel's limit (48 KiB unless cudaFuncSetAttribute raised it)
  bool cooperative;                 // launched cooperatively: may wait at the grid's barrier
  void (*body)(const void* arguments);
  const void* arguments;
};

// The launch checks of a GPU: cudaSuccess when the grid may run, else
// cudaErrorInvalidConfiguration for an empty grid or block, over 1024 threads, grid.y or grid.z
// over 65535; cudaErrorInvalidValue for more dynamic shared memory than the kernel may have (the
// emulation cannot see static __shared__ sizes); cudaErrorCooperativeLaunchTooLarge for a
// cooperative grid larger than the device holds at once.
cudaError_t check_grid(const Grid& grid);
// Runs every block of a grid that passed check_grid, on the calling thread (the device thread,
// Note [Deferred work] in stream_scheduler.h). Returns what went wrong, naming the kernel, the
// block and the thread (empty when nothing did): a thread that waits forever, or the grid's
// barrier in a launch that was not cooperative. That is cudaErrorLaunchFailure on a GPU.
std::string run_grid(const Grid& grid);

// ---- called by the running threads (device.h) -----------------------------------------------

enum class Collective { syncwarp, shfl_idx, shfl_up, shfl_down, shfl_xor, ballot, any, all };

void sync_threads();
// cooperative_groups::this_grid().sync(): every thread of the grid waits until all have come.
void sync_grid();
// The calling lane's result of a warp collective: `value` is its input (the variable shuffled, or
// the predicate), `arg` the source lane, delta or lane mask of a shuffle.
uint64_t warp_collective(Collective op, unsigned mask, uint64_t value, int arg, int width);
// The block's dynamic shared memory: the launch's bytes, a heap allocation of exactly that size.
void* dynamic_shared_memory();

}  // namespace cutrain::emu
