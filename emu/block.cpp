// block.cpp: the grid and block scheduler of block.h.
#include "emu/block.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "emu/runtime.h"

#include <boost/context/detail/fcontext.hpp>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

uint3 threadIdx;
uint3 blockIdx;
dim3 blockDim;
dim3 gridDim;
const int warpSize = 32;

namespace cutrain::emu {

namespace {

constexpr int kWarp = 32;
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr size_t kStackBytes = 256 * 1024;  // per thread: room for a sanitizer's report too
constexpr size_t kGuardBytes = 4096;        // below each stack: an overflow faults at once

enum class State { runnable, at_barrier, at_grid_barrier, at_collective, exited };

using boost::context::detail::fcontext_t;

struct Fiber {
  fcontext_t context = nullptr;  // where it stopped (Note [Fiber to fiber])
  char* stack = nullptr;         // kStackBytes, above a guard page
  bool made = false;             // context set up to enter fiber_main
  State state = State::exited;
  uint3 index{};
  // The collective it waits at, and what it gets back.
  Collective op{};
  unsigned mask = 0;
  uint64_t value = 0, result = 0;
  int arg = 0, width = 0;
  void* fake_stack = nullptr;  // AddressSanitizer's, while switched away

  Fiber() {
    void* memory = mmap(nullptr, kGuardBytes + kStackBytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (memory == MAP_FAILED) throw std::bad_alloc();
    mprotect(memory, kGuardBytes, PROT_NONE);
    stack = static_cast<char*>(memory) + kGuardBytes;
  }
  ~Fiber() { munmap(stack - kGuardBytes, kGuardBytes + kStackBytes); }
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;
};

// Everything about the grid being run; one at a time.
struct Scheduler {
  std::mutex mutex;
  const Grid* grid = nullptr;
  std::vector<std::unique_ptr<Fiber>> fibers;  // a block's threads; a cooperative grid's, block after block
  Fiber* current = nullptr;
  fcontext_t host = nullptr;  // where the launching thread waits while fibers run
  // The round being run: the block's fibers in turn order, and the position of the next to take
  // its turn (Note [Fiber to fiber]).
  std::vector<Fiber*> round;
  size_t next_turn = 0;
  bool from_host = false;           // the last switch left the host (for AddressSanitizer's view of it)
  unsigned char* shared = nullptr;  // the running block's dynamic shared memory
  Schedule schedule;
  std::mt19937_64 shuffle;  // seeded with schedule.seed
  // AddressSanitizer's view of the host stack, learnt at the first switch.
  void* host_fake_stack = nullptr;
  const void* host_stack = nullptr;
  size_t host_stack_bytes = 0;
};

// Never destroyed: the device thread may still run a grid while the program exits.
Scheduler& scheduler() {
  static Scheduler& s = *new Scheduler;
  return s;
}

// ---- switching between the host and a fiber, announced to AddressSanitizer -----------------

void start_switch(void** fake_stack, const void* bottom, size_t bytes) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(fake_stack, bottom, bytes);
#endif
}

void finish_switch(void* fake_stack, const void** old_bottom, size_t* old_bytes) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake_stack, old_bottom, old_bytes);
#endif
}

void fiber_main(boost::context::detail::transfer_t from);

// Note [Fiber to fiber]
// ~~~~~~~~~~~~~~~~~~~~~
// A round gives every runnable thread of a block one turn, in the schedule's order. A thread that
// stops at a barrier, a collective or its end hands over to the next runnable thread of the round
// itself, and only the last returns to the host, which then completes collectives and barriers.
// That is one switch per turn where a return to the host between turns took two: warp shuffles,
// a switch for every lane, were most of an emulated step's time, and the test of a graph-replayed
// step took 36 CPU-seconds against 46. The threads take their turns in the same order either way:
// a thread's state changes only on its own turn within a round.
//
// Each switch is Boost.Context's jump_fcontext, which saves and restores a few registers:
// ucontext's swapcontext also makes a system call for the signal mask at every switch, which made
// it three quarters of an emulated training step's time. A jump carries where the side that
// jumps should have its own context saved, and the side that lands saves it there.

// The context of fiber f, set up to enter fiber_main if it has none.
fcontext_t context_of(Fiber& f) {
  if (!f.made) {
#if defined(__SANITIZE_ADDRESS__)
    ASAN_UNPOISON_MEMORY_REGION(f.stack, kStackBytes);  // frames an abandoned kernel left
#endif
    f.context = boost::context::detail::make_fcontext(f.stack + kStackBytes, kStackBytes, fiber_main);
    f.made = true;
  }
  return f.context;
}

// Saves the context of the side that jumped here where that side asked.
void landed(boost::context::detail::transfer_t from) { *static_cast<fcontext_t*>(from.data) = from.fctx; }

// Tells AddressSanitizer that a fiber runs again; a switch from the host also tells where the
// host's stack is, which the last switch of a round returns to.
void landed_on_fiber(void* fake_stack) {
  Scheduler& s = scheduler();
  if (s.from_host)
    finish_switch(fake_stack, &s.host_stack, &s.host_stack_bytes);
  else
    finish_switch(fake_stack, nullptr, nullptr);
}

// The next thread of the round that may run, or null when the round is over.
Fiber* next_in_round() {
  Scheduler& s = scheduler();
  while (s.next_turn < s.round.size()) {
    Fiber* f = s.round[s.next_turn++];
    if (f->state == State::runnable) return f;
  }
  return nullptr;
}

// Gives fiber `next` its turn, from the host or from another fiber, whose context goes into `own`
// and whose AddressSanitizer stack into `own_fake_stack`; returns when that side runs again.
void enter(Fiber& next, fcontext_t* own, void** own_fake_stack, bool from_host) {
  Scheduler& s = scheduler();
  s.current = &next;
  threadIdx = next.index;
  s.from_host = from_host;
  start_switch(own_fake_stack, next.stack, kStackBytes);
  landed(boost::context::detail::jump_fcontext(context_of(next), own));
}

// Called on the host: runs the round in s.round, from its first runnable thread to the end.
void run_round() {
  Scheduler& s = scheduler();
  s.next_turn = 0;
  Fiber* f = next_in_round();
  if (!f) return;
  enter(*f, &s.host, &s.host_fake_stack, true);
  finish_switch(s.host_fake_stack, nullptr, nullptr);
  s.current = nullptr;
}

// Called on a fiber: it stops in state `state`, and the next thread of the round runs (or the host,
// after the last) until the fiber's next turn.
void suspend(State state) {
  Scheduler& s = scheduler();
  Fiber& f = *s.current;
  f.state = state;
  Fiber* next = next_in_round();
  if (next) {
    enter(*next, &f.context, &f.fake_stack, false);
  } else {
    start_switch(&f.fake_stack, s.host_stack, s.host_stack_bytes);
    landed(boost::context::detail::jump_fcontext(s.host, &f.context));
  }
  landed_on_fiber(f.fake_stack);
}

// A fiber runs one thread of the kernel after another, for as long as the program lives.
void fiber_main(boost::context::detail::transfer_t from) {
  Scheduler& s = scheduler();
  landed(from);
  landed_on_fiber(nullptr);
  for (;;) {
    s.grid->body(s.grid->arguments);
    suspend(State::exited);
  }
}

Fiber& calling_fiber(const char* what) {
  Fiber* f = scheduler().current;
  if (!f) {
    std::fprintf(stderr, "cuda emulation: %s called outside a kernel\n", what);
    std::abort();
  }
  return *f;
}

// ---- naming threads in messages ---------------------------------------------------------------

std::string describe(const uint3& v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}

const char* collective_name(Collective op) {
  switch (op) {
    case Collective::syncwarp: return "__syncwarp";
    case Collective::shfl_idx: return "__shfl_sync";
    case Collective::shfl_up: return "__shfl_up_sync";
    case Collective::shfl_down: return "__shfl_down_sync";
    case Collective::shfl_xor: return "__shfl_xor_sync";
    case Collective::ballot: return "__ballot_sync";
    case Collective::any: return "__any_sync";
    case Collective::all: return "__all_sync";
  }
  return "?";
}

std::string hex(unsigned mask) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", mask);
  return text;
}

// "thread (3,0,0) (warp 0, lane 3)"
std::string describe_thread(const Fiber& f, int linear) {
  return "thread " + describe(f.index) + " (warp " + std::to_string(linear / kWarp) + ", lane " +
         std::to_string(linear % kWarp) + ")";
}

std::string describe_wait(const Fiber& f) {
  switch (f.state) {
    case State::runnable: return "is running";
    case State::exited: return "has exited";
    case State::at_barrier: return "waits at __syncthreads";
    case State::at_grid_barrier: return "waits at the grid's barrier";
    case State::at_collective: return std::string("waits at ") + collective_name(f.op) + " with mask " + hex(f.mask);
  }
  return "?";
}

// 0, 1, ..., n - 1 in the schedule's order: the turns of a block's threads, or of a cooperative
// grid's blocks.
std::vector<int> turn_order(int n) {
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  const Schedule sched = schedule();
  if (sched.order == ThreadOrder::reverse) std::reverse(order.begin(), order.end());
  if (sched.order == ThreadOrder::shuffle) std::shuffle(order.begin(), order.end(), scheduler().shuffle);
  return order;
}

// ---- one block --------------------------------------------------------------------------------

// How far a block got: to its end, to the grid's barrier (every thread waits there), or stuck.
enum class Outcome { finished, at_grid_barrier, failed };

// The block with index `index`, whose threads are the fibers from `first_fiber` on.
class Block {
 public:
  Block(uint3 index, int first_fiber, int threads, unsigned char* shared)
      : index_(index), first_(first_fiber), threads_(threads), shared_(shared) {
    for (int i = 0; i < threads_; ++i) {
      Fiber& f = fiber(i);
      f.state = State::runnable;
      f.index = uint3{unsigned(i) % blockDim.x, unsigned(i) / blockDim.x % blockDim.y,
                      unsigned(i) / (blockDim.x * blockDim.y)};
    }
  }

  uint3 index() const { return index_; }

  // Runs the block until it ends or waits at the grid's barrier; failed, with `failure` set,
  // when a thread would wait forever.
  Outcome run(std::string& failure) {
    Scheduler& s = scheduler();
    blockIdx = index_;
    s.shared = shared_;
    for (;;) {
      s.round.clear();
      for (int i : turn_order(threads_)) s.round.push_back(&fiber(i));
      run_round();
      // Nothing can run: complete the collectives, else the barrier, else give up.
      const Progress progress = complete_collectives(failure);
      if (progress == Progress::failed) return Outcome::failed;
      if (progress == Progress::some) continue;
      int exited = 0, at_barrier = 0, at_grid_barrier = 0;
      for (int i = 0; i < threads_; ++i) {
        exited += fiber(i).state == State::exited;
        at_barrier += fiber(i).state == State::at_barrier;
        at_grid_barrier += fiber(i).state == State::at_grid_barrier;
      }
      if (exited == threads_) return Outcome::finished;
      if (at_grid_barrier > 0 && at_grid_barrier + exited == threads_) {
        if (exited == 0) return Outcome::at_grid_barrier;
        failure = describe_first(State::at_grid_barrier) + " waits at the grid's barrier, but " +
                  describe_first(State::exited) + " has exited and never comes";
        return Outcome::failed;
      }
      if (at_barrier + exited != threads_) {
        failure = describe_stuck();
        return Outcome::failed;
      }
      for (int i = 0; i < threads_; ++i)
        if (fiber(i).state == State::at_barrier) fiber(i).state = State::runnable;
    }
  }

  // After the grid's barrier: its threads go on.
  void leave_grid_barrier() {
    for (int i = 0; i < threads_; ++i)
      if (fiber(i).state == State::at_grid_barrier) fiber(i).state = State::runnable;
  }

  // Its threads left waiting are abandoned: their fibers start afresh next time.
  void abandon() {
    for (int i = 0; i < threads_; ++i)
      if (fiber(i).state != State::exited) fiber(i).made = false;
  }

 private:
  enum class Progress { none, some, failed };

  Fiber& fiber(int i) { return *scheduler().fibers[size_t(first_ + i)]; }

  // "thread (3,0,0) (warp 0, lane 3)" for the first thread in `state`.
  std::string describe_first(State state) {
    for (int i = 0; i < threads_; ++i)
      if (fiber(i).state == state) return describe_thread(fiber(i), i);
    return "?";
  }

  // The lanes of the warp of thread i that exist in this block (the last warp may be partial).
  int warp_lanes(int i) const { return std::min(kWarp, threads_ - i / kWarp * kWarp); }

  // Whether every lane that f's mask names waits at the same collective with the same mask.
  bool group_ready(int first_of_warp, const Fiber& f) {
    for (int lane = 0; lane < warp_lanes(first_of_warp); ++lane) {
      if (!(f.mask >> lane & 1u)) continue;
      const Fiber& other = fiber(first_of_warp + lane);
      if (other.state != State::at_collective || other.op != f.op || other.mask != f.mask || other.width != f.width)
        return false;
    }
    return true;
  }

  // Completes every collective whose lanes have all arrived.
  Progress complete_collectives(std::string& failure) {
    Progress progress = Progress::none;
    for (int i = 0; i < threads_; ++i) {
      Fiber& f = fiber(i);
      if (f.state != State::at_collective) continue;
      const int first = i / kWarp * kWarp, lane = i % kWarp, lanes = warp_lanes(i);
      if (!(f.mask >> lane & 1u)) {
        failure = describe_thread(f, i) + " calls " + collective_name(f.op) + " with mask " + hex(f.mask) +
                  ", which does not name its own lane";
        return Progress::failed;
      }
      if (lanes < kWarp && (f.mask >> lanes) != 0) {
        failure = describe_thread(f, i) + " calls " + collective_name(f.op) + " with mask " + hex(f.mask) +
                  ", which names lanes beyond the " + std::to_string(lanes) + " of its warp";
        return Progress::failed;
      }
      if (f.width < 1 || f.width > kWarp || (f.width & (f.width - 1)) != 0) {
        failure = describe_thread(f, i) + " calls " + collective_name(f.op) + " with width " + std::to_string(f.width) +
                  ", not a power of two up to 32";
        return Progress::failed;
      }
      if (!group_ready(first, f)) continue;
      if (!complete(first, f.mask, failure)) return Progress::failed;
      progress = Progress::some;
    }
    return progress;
  }

  // Gives each lane of the group (the lanes `mask` names in the warp from `first`) its result.
  bool complete(int first, unsigned mask, std::string& failure) {
    unsigned ballot = 0;
    for (int lane = 0; lane < kWarp; ++lane)
      if ((mask >> lane & 1u) && fiber(first + lane).value != 0) ballot |= 1u << lane;
    for (int lane = 0; lane < kWarp; ++lane) {
      if (!(mask >> lane & 1u)) continue;
      Fiber& f = fiber(first + lane);
      switch (f.op) {
        case Collective::syncwarp: f.result = 0; break;
        case Collective::ballot: f.result = ballot; break;
        case Collective::any: f.result = ballot != 0; break;
        case Collective::all: f.result = ballot == mask; break;
        default: {
          const int source = shuffle_source(f.op, lane, f.arg, f.width);
          if (!(mask >> source & 1u)) {
            failure = describe_thread(f, first + lane) + " reads lane " + std::to_string(source) + " in " +
                      collective_name(f.op) + " with mask " + hex(mask) + ", which does not name that lane";
            return false;
          }
          f.result = fiber(first + source).value;
        }
      }
    }
    for (int lane = 0; lane < kWarp; ++lane)
      if (mask >> lane & 1u) fiber(first + lane).state = State::runnable;
    return true;
  }

  // The lane a shuffle reads, as PTX's shfl.sync defines it with the operands CUDA's __shfl_*_sync
  // pass: the lane or offset's low 5 bits; `width` splits the warp into segments; a source past
  // the segment's end (or, shifting up, before its start) means the lane's own value.
  static int shuffle_source(Collective op, int lane, int arg, int width) {
    const int segment = (kWarp - width) & 31;  // high lane bits that pick the segment
    const int clamp = op == Collective::shfl_up ? 0 : 31;
    const int max_lane = (lane & segment) | (clamp & ~segment);
    const int min_lane = lane & segment;
    const int b = arg & 31;
    int j = lane;
    bool inside = false;
    switch (op) {
      case Collective::shfl_up:
        j = lane - b;
        inside = j >= max_lane;
        break;
      case Collective::shfl_down:
        j = lane + b;
        inside = j <= max_lane;
        break;
      case Collective::shfl_xor:
        j = lane ^ b;
        inside = j <= max_lane;
        break;
      case Collective::shfl_idx:
        j = min_lane | (b & ~segment);
        inside = j <= max_lane;
        break;
      default: break;
    }
    return inside ? j : lane;
  }

  // Why no collective could complete: the first waiting lane and a lane it waits for in vain.
  std::string describe_stuck() {
    for (int i = 0; i < threads_; ++i) {
      const Fiber& f = fiber(i);
      if (f.state != State::at_collective) continue;
      const int first = i / kWarp * kWarp;
      for (int lane = 0; lane < warp_lanes(i); ++lane) {
        const Fiber& other = fiber(first + lane);
        if (!(f.mask >> lane & 1u) ||
            (other.state == State::at_collective && other.op == f.op && other.mask == f.mask && other.width == f.width))
          continue;
        return describe_thread(f, i) + " waits at " + collective_name(f.op) + " with mask " + hex(f.mask) +
               ", but lane " + std::to_string(lane) + " " + describe_wait(other);
      }
    }
    if (describe_first(State::at_grid_barrier) != "?")
      return describe_first(State::at_barrier) + " waits at __syncthreads, but " +
             describe_first(State::at_grid_barrier) + " waits at the grid's barrier";
    return "threads wait at __syncthreads while others wait at warp collectives";
  }

  uint3 index_;
  int first_, threads_;
  unsigned char* shared_;
};

}  // namespace

// ---- the schedule -----------------------------------------------------------------------------

Schedule parse_schedule(const std::string& text) {
  if (text == "forward") return {ThreadOrder::forward, 0};
  if (text == "reverse") return {ThreadOrder::reverse, 0};
  if (text == "shuffle") return {ThreadOrder::shuffle, 0};
  if (text.rfind("shuffle:", 0) == 0) {
    try {
      size_t end = 0;
      const uint64_t seed = std::stoull(text.substr(8), &end);
      if (end == text.size() - 8) return {ThreadOrder::shuffle, seed};
    } catch (const std::exception&) {
    }
  }
  throw std::invalid_argument("thread order '" + text + "': expected forward, reverse, shuffle or shuffle:SEED");
}

Schedule schedule() { return scheduler().schedule; }

void set_schedule(Schedule sched) {
  std::lock_guard lock(scheduler().mutex);  // not while a grid runs
  scheduler().schedule = sched;
  scheduler().shuffle.seed(sched.seed);
}

// ---- the grid ---------------------------------------------------------------------------------

namespace {

uint64_t threads_per_block(const Grid& g) { return uint64_t(g.block.x) * g.block.y * g.block.z; }

}  // namespace

cudaError_t check_grid(const Grid& g) {
  const uint64_t threads = threads_per_block(g);
  if (g.grid.x == 0 || g.grid.y == 0 || g.grid.z == 0 || threads == 0 || threads > kMaxThreadsPerBlock ||
      g.block.z > 64 || g.grid.x > 0x7fffffffu || g.grid.y > 65535 || g.grid.z > 65535)
    return cudaErrorInvalidConfiguration;
  if (g.dynamic_shared_bytes > g.max_dynamic_shared_bytes) return cudaErrorInvalidValue;
  const uint64_t blocks = uint64_t(g.grid.x) * g.grid.y * g.grid.z;
  if (g.cooperative && blocks > uint64_t(max_active_blocks_per_multiprocessor(int(threads), g.dynamic_shared_bytes)) *
                                    uint64_t(emulated_device().multiprocessors))
    return cudaErrorCooperativeLaunchTooLarge;
  return cudaSuccess;
}

namespace {

// Runs the blocks one after another, in the schedule's order (so that a kernel which leans on
// which block finishes last gives another result in another order); false with `failure` set when
// one fails.
bool run_blocks_in_turn(const Grid& g, int threads, unsigned char* shared, std::string& failure) {
  const int n = int(uint64_t(g.grid.x) * g.grid.y * g.grid.z);
  for (const int b : turn_order(n)) {
    const unsigned x = unsigned(b) % g.grid.x, y = unsigned(b) / g.grid.x % g.grid.y,
                   z = unsigned(b) / g.grid.x / g.grid.y;
    // Shared memory starts as garbage on a GPU: here all bits set, a NaN as float and bf16.
    std::memset(shared, 0xff, g.dynamic_shared_bytes);
    Block block(uint3{x, y, z}, 0, threads, shared);
    const Outcome outcome = block.run(failure);
    if (outcome == Outcome::finished) continue;
    if (outcome == Outcome::at_grid_barrier)
      failure = "its threads wait at the grid's barrier, but the kernel was not launched cooperatively";
    failure = std::string(g.kernel) + ": block " + describe(block.index()) + ", " + failure;
    block.abandon();
    return false;
  }
  return true;
}

// Runs a cooperative grid: every block alive at once, each with its own shared memory, taking
// turns between the grid's barriers; false with `failure` set when one fails.
bool run_blocks_together(const Grid& g, int threads, std::string& failure) {
  std::vector<std::unique_ptr<unsigned char[]>> shared;
  std::vector<Block> blocks;
  for (unsigned z = 0; z < g.grid.z; ++z)
    for (unsigned y = 0; y < g.grid.y; ++y)
      for (unsigned x = 0; x < g.grid.x; ++x) {
        shared.emplace_back(new unsigned char[g.dynamic_shared_bytes]);
        std::memset(shared.back().get(), 0xff, g.dynamic_shared_bytes);
        blocks.emplace_back(uint3{x, y, z}, int(blocks.size()) * threads, threads, shared.back().get());
      }
  const int n = int(blocks.size());
  for (;;) {
    int finished = 0, waiting = 0;  // at the grid's barrier
    for (int b : turn_order(n)) {
      const Outcome outcome = blocks[size_t(b)].run(failure);
      if (outcome == Outcome::failed) {
        failure = std::string(g.kernel) + ": block " + describe(blocks[size_t(b)].index()) + ", " + failure;
        for (Block& block : blocks) block.abandon();
        return false;
      }
      (outcome == Outcome::finished ? finished : waiting) += 1;
    }
    if (finished == n) return true;
    if (finished > 0) {
      failure = std::string(g.kernel) + ": blocks wait at the grid's barrier, but " + std::to_string(finished) +
                " of the " + std::to_string(n) + " blocks have finished and never come";
      for (Block& block : blocks) block.abandon();
      return false;
    }
    for (Block& block : blocks) block.leave_grid_barrier();
  }
}

}  // namespace

int max_active_blocks_per_multiprocessor(int threads, size_t dynamic_shared_bytes) {
  if (threads <= 0 || threads > int(kMaxThreadsPerBlock)) return 0;
  const EmulatedDevice& d = emulated_device();
  if (dynamic_shared_bytes > d.shared_per_block_optin) return 0;
  const int warps = (threads + kWarp - 1) / kWarp;
  const int by_threads = d.threads_per_multiprocessor / (warps * kWarp);
  const int by_registers = d.registers_per_multiprocessor / (warps * kWarp * d.registers_per_thread);
  const int by_shared = int(d.shared_per_multiprocessor / (dynamic_shared_bytes + d.reserved_shared_per_block));
  return std::min({d.blocks_per_multiprocessor, by_threads, by_registers, by_shared});
}

std::string run_grid(const Grid& g) {
  const uint64_t threads = threads_per_block(g);
  Scheduler& s = scheduler();
  std::lock_guard lock(s.mutex);
  if (s.grid) {
    std::fprintf(stderr, "cuda emulation: %s launched from inside kernel %s\n", g.kernel, s.grid->kernel);
    std::abort();
  }
  const uint64_t fibers = g.cooperative ? threads * g.grid.x * g.grid.y * g.grid.z : threads;
  while (s.fibers.size() < fibers) s.fibers.push_back(std::make_unique<Fiber>());
  s.grid = &g;
  gridDim = g.grid;
  blockDim = g.block;

  std::string failure;
  if (g.cooperative) {
    run_blocks_together(g, int(threads), failure);
  } else {
    // Exactly the launch's bytes, so that AddressSanitizer sees a kernel running past them.
    const std::unique_ptr<unsigned char[]> shared(new unsigned char[g.dynamic_shared_bytes]);
    run_blocks_in_turn(g, int(threads), shared.get(), failure);
  }
  s.grid = nullptr;
  s.shared = nullptr;
  return failure;
}

void sync_threads() {
  calling_fiber("__syncthreads");
  suspend(State::at_barrier);
}

void sync_grid() {
  calling_fiber("this_grid().sync()");
  suspend(State::at_grid_barrier);
}

uint64_t warp_collective(Collective op, unsigned mask, uint64_t value, int arg, int width) {
  Fiber& f = calling_fiber(collective_name(op));
  f.op = op;
  f.mask = mask;
  f.value = value;
  f.arg = arg;
  f.width = width;
  suspend(State::at_collective);
  return f.result;
}

void* dynamic_shared_memory() {
  calling_fiber("dynamic shared memory");
  return scheduler().shared;
}

}  // namespace cutrain::emu
