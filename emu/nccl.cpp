// nccl.cpp: the emulated NCCL of emu/include/nccl.h, between the processes of one machine.
//
// The transport is POSIX shared memory: one object per communicator, named from its unique id
// ("/cutrain-nccl-<32 hex digits>", under /dev/shm), that every rank maps. Shared memory rather
// than Unix sockets, because a collective then moves each rank's data once, with no copies
// through the kernel and no protocol of messages; ranks meet through atomics in the mapping, and
// the reduction reads every rank's contribution where it lies, which makes a fixed reduction
// order free (Note [Reduction order]). The price is that a death cannot be seen as a closed
// socket; Note [Peers that die] says how it is seen instead.
//
// The object's layout, made by whichever rank creates it first:
//   Header                     what it is and how many ranks have joined
//   Rank[nranks]               each rank's pid, status and progress (below)
//   slot[nranks][kChunkBytes]  each rank's contribution to the current chunk
// Memory is bounded: a collective of any size moves through the slots one chunk at a time.
//
// Note [Chunks]
// ~~~~~~~~~~~~~
// Each collective takes the next run of chunk numbers (counted from 1) when it
// starts, which is the same run on every rank (Note [Matching collectives]).
// Rank r moves chunk c on in two phases:
//   post:   once every rank has consumed chunk c - 1 (so r's slot is free), r writes its part of
//           chunk c into its slot, with a description of the collective, and sets posted = c;
//   reduce: once every rank has posted c, r reads all slots into its own output, checks that all
//           ranks describe the same collective, and sets consumed = c.
// No rank posts c + 1 before every rank has consumed c, so a slot is never overwritten while it
// is read. Several collectives may be in flight: a later one's first chunk waits, by the same
// rule, for the earlier ones' last.
//
// Note [Matching collectives]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// NCCL matches the collectives of one communicator across ranks in
// the order the ranks issue them. The emulation matches them in the order they start to run,
// which is the same where they run on one stream (cutrain's communication stream) or in an order
// that events fix; it has to, because a graph's replay issues nothing. Collectives that disagree
// in kind, type, op, root or count fail the communicator with ncclInvalidUsage.
//
// Note [Reduction order]
// ~~~~~~~~~~~~~~~~~~~~~~
// Every rank reduces chunk c from the same slots in rank order 0, 1, ...,
// n - 1, in the same code, so every rank gets the same bits: for a sum
// ((x_0 + x_1) + x_2) + ..., accumulated in float for ncclFloat and ncclBfloat16 and in double for
// ncclDouble; an average is that sum divided by n (as the Gloo communicator computes it); bf16 is
// rounded once, at the end. A real GPU's ring or tree reduces in another order (and rounds bf16 at
// each step), so bits may differ from it, but never between ranks.
//
// Note [Peers that die]
// ~~~~~~~~~~~~~~~~~~~~~
// Each rank's pid and start time (from /proc) are in the mapping. While a
// rank waits for a peer, and when ncclCommGetAsyncError is asked, it looks at the peer at most
// every kLookEvery: a peer whose process is gone, a zombie, or another process of the same pid
// has died, and the communicator fails with ncclRemoteError naming it. So does one that marked
// itself aborted (ncclCommAbort), and one that left (ncclCommFinalize or Destroy) while a
// collective still waits for it. A stopped process (SIGSTOP) is alive: collectives wait for it,
// and cutrain's watchdog times them out. A failed or aborted communicator finishes this
// process's pending collectives at once, leaving their outputs unreduced, so its streams go on.
//
// The object is unlinked by the last rank to join, so from then on nothing is left behind however
// the processes end; before that, the ncclCommAbort or ncclCommDestroy of a rank that has joined
// unlinks it. (So a rank that dies while the others are still joining leaves it until one of them
// aborts; only a rank killed between creating the object and joining it leaves it for good.)
#include <nccl.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include "emu/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kChunkBytes = size_t(1) << 20;  // per rank: 3 ranks map 3 MiB of slots
constexpr auto kLookEvery = std::chrono::milliseconds(50);
constexpr char kIdPrefix[] = "cutrain-emu-nccl";  // the first bytes of every unique id
constexpr uint64_t kReady = 0x6375747261696e31;   // "cutrain1": the creator has set the object up

// ---- the shared object ----

enum RankStatus : uint32_t { rank_absent = 0, rank_joined = 1, rank_left = 2, rank_aborted = 3 };
enum Kind : uint32_t { all_reduce = 1, broadcast = 2 };

// What a rank's posted chunk belongs to: equal on every rank, or the ranks disagree.
struct Description {
  uint32_t kind, datatype, op, root;
  uint64_t count;
  bool operator==(const Description&) const = default;
};

struct alignas(64) Header {
  uint64_t ready;  // kReady, once the rest is set
  int32_t nranks;
  int32_t joined;
};

struct alignas(64) Rank {
  int32_t pid;          // 0 until the rank claims its place
  uint32_t status;      // RankStatus
  uint64_t start_time;  // the process's, from /proc/<pid>/stat, to tell a reused pid
  uint64_t posted;      // the last chunk in this rank's slot
  uint64_t consumed;    // the last chunk this rank has read from every slot
  Description posted_what;
};

template <typename T>
T load(const T& shared) {
  return std::atomic_ref<T>(const_cast<T&>(shared)).load(std::memory_order_acquire);
}
template <typename T>
void store(T& shared, T value) {
  std::atomic_ref<T>(shared).store(value, std::memory_order_release);
}

size_t object_bytes(int nranks) { return sizeof(Header) + nranks * (sizeof(Rank) + kChunkBytes); }

// ---- processes ----

// Field 22 of /proc/<pid>/stat, the start time, and whether the process is alive: neither gone nor
// a zombie. 0 when it is not.
uint64_t start_time_if_alive(int pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(file, line)) return 0;
  const size_t name_end = line.rfind(')');  // the command's name may hold spaces and parentheses
  if (name_end == std::string::npos) return 0;
  std::istringstream fields(line.substr(name_end + 1));
  std::string state, field;
  fields >> state;  // field 3
  if (state == "Z" || state == "X" || state == "x") return 0;
  for (int i = 4; i < 22; ++i) fields >> field;
  uint64_t start = 0;
  fields >> start;
  return start;
}

// NCCL_DEBUG=WARN or INFO: NCCL's warnings on stderr; INFO also each communicator's set-up.
bool debug_at_least(const char* level) {
  const char* value = std::getenv("NCCL_DEBUG");
  if (!value) return false;
  const std::string v = value;
  return v == "INFO" || v == "TRACE" || (std::string(level) == "WARN" && v == "WARN");
}

void debug(const char* level, const std::string& text) {
  if (debug_at_least(level)) std::fprintf(stderr, "%d NCCL %s %s\n", int(getpid()), level, text.c_str());
}

std::mutex global_error_mutex;
std::string global_error;  // what went wrong last, on any communicator

void remember_error(const std::string& text) {
  std::lock_guard lock(global_error_mutex);
  global_error = text;
}

// A call refused: its result, with the reason kept for ncclGetLastError and logged as NCCL does.
ncclResult_t refuse(ncclResult_t result, const std::string& why) {
  remember_error(why);
  debug("WARN", why);
  return result;
}

}  // namespace

// ---- the communicator, as this process sees it ----

// The state that pending collectives share with the handle: they keep it alive after
// ncclCommAbort or ncclCommDestroy has freed the handle.
struct Communicator {
  int rank = 0, nranks = 0;
  bool blocking = true;
  std::string name;  // the shared object's

  std::mutex mutex;  // guards all below but the atomics
  int fd = -1;
  char* base = nullptr;  // the mapping, set once, before state leaves ncclInProgress
  bool claimed = false;  // this rank has its place in the object
  bool finalizing = false;
  std::string last_error;
  uint64_t next_chunk = 1;  // Note [Chunks]
  Clock::time_point last_look{};

  std::atomic<ncclResult_t> state{ncclInProgress};  // joining, then ncclSuccess, or the failure
  std::atomic<bool> aborted{false};
  std::atomic<int> pending{0};  // collectives started and not finished

  ~Communicator() {
    if (base) munmap(base, object_bytes(nranks));
    if (fd >= 0) close(fd);
  }

  Header& header() const { return *reinterpret_cast<Header*>(base); }
  Rank& rank_at(int r) const { return reinterpret_cast<Rank*>(base + sizeof(Header))[r]; }
  char* slot(int r) const { return base + sizeof(Header) + nranks * sizeof(Rank) + r * kChunkBytes; }

  // The first failure sticks; later ones are only logged.
  void fail(ncclResult_t result, const std::string& why) {
    const std::string text = "rank " + std::to_string(rank) + " of " + name + ": " + why;
    std::lock_guard lock(mutex);
    debug("WARN", text);
    ncclResult_t expected = state.load();
    if (expected != ncclSuccess && expected != ncclInProgress) return;
    state = result;
    last_error = text;
    remember_error(text);
  }

  void set_status(RankStatus status) { store(rank_at(rank).status, uint32_t(status)); }

  // Note [Peers that die]: what is wrong with peer r, or "" if nothing is. `waited_for`: a
  // collective needs r, so r must not have left.
  std::string trouble_with(int r, bool waited_for) const {
    const Rank& peer = rank_at(r);
    const uint32_t status = load(peer.status);
    if (status == rank_aborted) return "rank " + std::to_string(r) + " aborted its communicator";
    if (status == rank_left)
      return waited_for ? "rank " + std::to_string(r) + " left the communicator while a collective waited for it" : "";
    if (status != rank_joined) return "";
    const int pid = load(peer.pid);
    if (start_time_if_alive(pid) != peer.start_time)
      return "rank " + std::to_string(r) + " (pid " + std::to_string(pid) + ") exited";
    return "";
  }

  // Looks at every peer (at most every kLookEvery) and fails the communicator if one is in
  // trouble. `waited_for`: the rank a collective waits for, or -1.
  bool look_at_peers(int waited_for) {
    {
      std::lock_guard lock(mutex);
      const auto now = Clock::now();
      if (now - last_look < kLookEvery) return state == ncclSuccess || state == ncclInProgress;
      last_look = now;
    }
    for (int r = 0; r < nranks; ++r) {
      if (r == rank) continue;
      const std::string why = trouble_with(r, r == waited_for);
      if (!why.empty()) {
        fail(ncclRemoteError, why);
        return false;
      }
    }
    return true;
  }

  // One attempt to move the join on: the object must exist, and every rank have claimed its
  // place in it. Never waits. Called with `mutex` held; returns the failure for fail() to record
  // once the mutex is released.
  struct Failure {
    ncclResult_t result = ncclSuccess;
    std::string why;
  };
  Failure join_step();
};

struct ncclComm {
  std::shared_ptr<Communicator> communicator;
};

namespace {

// The object's name in a unique id, or "" when the bytes are not one of ours.
std::string object_name(const ncclUniqueId& id) {
  if (std::memcmp(id.internal, kIdPrefix, sizeof kIdPrefix - 1) != 0) return "";
  return std::string("/cutrain-nccl-") + std::string(id.internal + sizeof kIdPrefix - 1, 32);
}

}  // namespace

Communicator::Failure Communicator::join_step() {
  const size_t bytes = object_bytes(nranks);
  auto system_failure = [&](const char* what) {
    return Failure{ncclSystemError, std::string(what) + " " + name + ": " + std::strerror(errno)};
  };
  if (fd < 0) {
    fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd >= 0) {  // this rank creates it
      // posix_fallocate reserves the memory now: a full /dev/shm is an error here, not a SIGBUS later.
      if (ftruncate(fd, off_t(bytes)) != 0 || posix_fallocate(fd, 0, off_t(bytes)) != 0) {
        shm_unlink(name.c_str());
        return system_failure("no room in /dev/shm for");
      }
      base = static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
      if (base == MAP_FAILED) {
        base = nullptr;
        return system_failure("mmap of");
      }
      header().nranks = nranks;
      store(header().ready, kReady);
    } else if (errno == EEXIST) {
      fd = shm_open(name.c_str(), O_RDWR, 0);
      if (fd < 0) return {};  // unlinked in between: try again
    } else {
      return system_failure("shm_open of");
    }
  }
  if (!base) {
    struct stat about {};
    if (fstat(fd, &about) != 0) return system_failure("fstat of");
    if (about.st_size == 0) return {};  // the creator has not sized it yet (one ftruncate does)
    if (size_t(about.st_size) != bytes)
      return {ncclInvalidUsage,
              "the unique id belongs to a communicator of another size than " + std::to_string(nranks)};
    base = static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    if (base == MAP_FAILED) {
      base = nullptr;
      return system_failure("mmap of");
    }
  }
  if (load(header().ready) != kReady) return {};
  if (!claimed) {
    Rank& me = rank_at(rank);
    int32_t nobody = 0;
    if (!std::atomic_ref<int32_t>(me.pid).compare_exchange_strong(nobody, int32_t(getpid())))
      return {ncclInvalidUsage,
              "rank " + std::to_string(rank) + " has joined already (pid " + std::to_string(nobody) + ")"};
    me.start_time = start_time_if_alive(getpid());
    claimed = true;
    set_status(rank_joined);
    if (std::atomic_ref<int32_t>(header().joined).fetch_add(1) + 1 == nranks) shm_unlink(name.c_str());
  }
  if (load(header().joined) == nranks) {
    state = ncclSuccess;
    debug("INFO", "emulated NCCL " + std::to_string(NCCL_VERSION_CODE) + ": rank " + std::to_string(rank) + " of " +
                      std::to_string(nranks) + " joined " + name);
  }
  return {};
}

namespace {

// Moves a joining communicator on, and looks at the peers of a live one.
void progress(Communicator& c) {
  if (c.state == ncclInProgress) {
    Communicator::Failure failure;
    bool claimed = false;
    {
      std::lock_guard lock(c.mutex);
      if (c.state == ncclInProgress) failure = c.join_step();
      claimed = c.claimed;
    }
    if (failure.result != ncclSuccess) c.fail(failure.result, failure.why);
    if (c.state == ncclInProgress && claimed) c.look_at_peers(-1);
    return;
  }
  if (c.state == ncclSuccess) c.look_at_peers(-1);
}

size_t element_bytes(ncclDataType_t type) {
  switch (type) {
    case ncclFloat: return sizeof(float);
    case ncclDouble: return sizeof(double);
    case ncclBfloat16: return sizeof(__nv_bfloat16);
    default: return 0;
  }
}

// Note [Reduction order]: out[i] = (slot_0[i] + slot_1[i] + ... in rank order) [/ n].
template <typename T, typename Accumulator>
void reduce(const Communicator& c, size_t count, bool average, char* out_bytes) {
  T* out = reinterpret_cast<T*>(out_bytes);
  for (size_t i = 0; i < count; ++i) {
    Accumulator sum = Accumulator(reinterpret_cast<const T*>(c.slot(0))[i]);
    for (int r = 1; r < c.nranks; ++r) sum += Accumulator(reinterpret_cast<const T*>(c.slot(r))[i]);
    out[i] = T(average ? sum / Accumulator(c.nranks) : sum);
  }
}

// One collective on its stream: Note [Chunks]'s two phases, chunk after chunk. A run takes its
// chunk numbers when it starts, and gives up its state when it finishes, so that a graph may run
// the same collective again (Note [Matching collectives]).
struct Collective {
  std::shared_ptr<Communicator> c;
  Description what;
  const char* send;
  char* recv;
  size_t chunk_elements;
  uint64_t chunks;
  // This run's.
  bool started = false;
  uint64_t first_chunk = 0, done = 0;
  bool posted = false;

  // Whether the collective has finished (the device stops calling it then).
  bool step() {
    if (c->aborted || c->state != ncclSuccess) return finish();
    if (!started) {
      std::lock_guard lock(c->mutex);
      first_chunk = c->next_chunk;
      c->next_chunk += chunks;
      ++c->pending;
      started = true;
    }
    while (done < chunks) {
      if (c->aborted || c->state != ncclSuccess) return finish();
      const uint64_t chunk = first_chunk + done;
      const size_t first = done * chunk_elements;
      const size_t count = std::min<size_t>(chunk_elements, what.count - first);
      const size_t size = element_bytes(ncclDataType_t(what.datatype));
      Rank& me = c->rank_at(c->rank);
      if (!posted) {
        for (int r = 0; r < c->nranks; ++r)
          if (load(c->rank_at(r).consumed) < chunk - 1) return wait_for(r);
        if (what.kind == all_reduce || c->rank == int(what.root))
          std::memcpy(c->slot(c->rank), send + first * size, count * size);
        me.posted_what = what;
        store(me.posted, chunk);
        posted = true;
      }
      for (int r = 0; r < c->nranks; ++r)
        if (load(c->rank_at(r).posted) < chunk) return wait_for(r);
      for (int r = 0; r < c->nranks; ++r)
        if (!(c->rank_at(r).posted_what == what)) {
          c->fail(ncclInvalidUsage, "rank " + std::to_string(r) +
                                        " called another collective (kind, type, op, root "
                                        "or count) as its collective of chunk " +
                                        std::to_string(chunk));
          return finish();
        }
      char* out = recv + first * size;
      if (what.kind == broadcast) {
        std::memcpy(out, c->slot(int(what.root)), count * size);
      } else {
        const bool average = what.op == ncclAvg;
        if (what.datatype == ncclFloat) reduce<float, float>(*c, count, average, out);
        if (what.datatype == ncclDouble) reduce<double, double>(*c, count, average, out);
        if (what.datatype == ncclBfloat16) reduce<__nv_bfloat16, float>(*c, count, average, out);
      }
      store(me.consumed, chunk);
      ++done;
      posted = false;
    }
    return finish();
  }

  // Peer r has not got as far as this chunk needs: not done, unless it is in trouble.
  bool wait_for(int r) {
    if (!c->look_at_peers(r)) return finish();
    return false;
  }

  bool finish() {
    if (started) --c->pending;
    started = posted = false;
    done = 0;
    return true;
  }
};

ncclResult_t enqueue(ncclComm_t comm, const char* name, Description what, const void* sendbuff, void* recvbuff,
                     cudaStream_t stream) {
  if (!comm) return refuse(ncclInvalidArgument, std::string(name) + ": the communicator is null");
  // The collective keeps the communicator alive, and so does this call: an abort on another thread
  // may free the handle before the call returns.
  const std::shared_ptr<Communicator> keep = comm->communicator;
  Communicator& c = *keep;
  const ncclResult_t state = c.state;
  if (state == ncclInProgress)
    return refuse(ncclInvalidUsage, std::string(name) + ": the communicator is still joining");
  if (state != ncclSuccess) return refuse(state, std::string(name) + ": the communicator has failed");
  const size_t size = element_bytes(ncclDataType_t(what.datatype));
  if (size == 0)
    return refuse(ncclInvalidArgument, std::string(name) +
                                           ": the emulated NCCL takes ncclFloat, ncclDouble and "
                                           "ncclBfloat16 only, not data type " +
                                           std::to_string(what.datatype));
  if (what.kind == all_reduce && what.op != ncclSum && what.op != ncclAvg)
    return refuse(ncclInvalidArgument, std::string(name) + ": the emulated NCCL reduces with ncclSum and ncclAvg only");
  if (what.kind == broadcast && (int(what.root) < 0 || int(what.root) >= c.nranks))
    return refuse(ncclInvalidArgument, std::string(name) + ": root " + std::to_string(int(what.root)) +
                                           " is not a rank of " + std::to_string(c.nranks));
  const size_t bytes = what.count * size;
  const bool reads_send = what.kind == all_reduce || c.rank == int(what.root);
  if (what.count > 0 && ((reads_send && !cutrain::emu::inside_device_allocation(sendbuff, bytes)) ||
                         !cutrain::emu::inside_device_allocation(recvbuff, bytes)))
    return refuse(ncclInvalidArgument, std::string(name) + ": a buffer of " + std::to_string(bytes) +
                                           " bytes is not inside one device allocation");
  const size_t chunk_elements = kChunkBytes / size;
  Collective collective{keep,
                        what,
                        static_cast<const char*>(sendbuff),
                        static_cast<char*>(recvbuff),
                        chunk_elements,
                        (what.count + chunk_elements - 1) / chunk_elements};
  if (cutrain::emu::enqueue_until(stream, name, [collective]() mutable { return collective.step(); }) != cudaSuccess)
    return refuse(ncclUnhandledCudaError, std::string(name) + ": the stream is not one of the emulated device's");
  return ncclSuccess;
}

// Ends this process's part: marks it `status` for the peers and, if some rank has not joined yet,
// unlinks the object (Note [Peers that die]). A rank that never got its place leaves the object to
// those that did.
void leave(Communicator& c, RankStatus status) {
  std::lock_guard lock(c.mutex);
  if (!c.claimed) return;
  if (load(c.rank_at(c.rank).status) == rank_joined) c.set_status(status);
  if (load(c.header().joined) < c.nranks) shm_unlink(c.name.c_str());
}

}  // namespace

// ---- the API ----

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return refuse(ncclInvalidArgument, "ncclGetVersion: version is null");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (!uniqueId) return refuse(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is null");
  std::memset(uniqueId->internal, 0, sizeof uniqueId->internal);
  std::memcpy(uniqueId->internal, kIdPrefix, sizeof kIdPrefix - 1);
  std::random_device random;
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) uniqueId->internal[sizeof kIdPrefix - 1 + i] = hex[random() % 16];
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config) {
  if (!comm) return refuse(ncclInvalidArgument, "ncclCommInitRankConfig: comm is null");
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return refuse(ncclInvalidArgument,
                  "ncclCommInitRankConfig: rank " + std::to_string(rank) + " of " + std::to_string(nranks) + " ranks");
  if (config && (config->magic != 0xcafebeef || config->size != sizeof(ncclConfig_t)))
    return refuse(ncclInvalidArgument, "ncclCommInitRankConfig: the config was not set from NCCL_CONFIG_INITIALIZER");
  const std::string name = object_name(commId);
  if (name.empty())
    return refuse(ncclInvalidArgument,
                  "ncclCommInitRankConfig: the unique id is not one from the emulated "
                  "ncclGetUniqueId");
  auto c = std::make_shared<Communicator>();
  c->rank = rank;
  c->nranks = nranks;
  c->blocking = !config || config->blocking == NCCL_CONFIG_UNDEF_INT || config->blocking != 0;
  c->name = name;
  *comm = new ncclComm{c};
  if (!c->blocking) {
    progress(*c);
    return c->state;
  }
  while (c->state == ncclInProgress) {
    progress(*c);
    if (c->state == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const ncclResult_t result = c->state;
  if (result != ncclSuccess) {  // a blocking init that failed leaves no communicator behind
    ncclCommAbort(*comm);
    *comm = nullptr;
  }
  return result;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return ncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (!comm || !asyncError) return refuse(ncclInvalidArgument, "ncclCommGetAsyncError: comm or asyncError is null");
  Communicator& c = *comm->communicator;
  progress(c);
  bool finalizing = false, finalized = false;
  {
    std::lock_guard lock(c.mutex);
    finalized = c.finalizing && c.pending == 0;
    if (finalized) c.finalizing = false;
    finalizing = c.finalizing;
  }
  if (finalized) leave(c, rank_left);
  *asyncError = c.state == ncclSuccess && finalizing ? ncclInProgress : c.state.load();
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (!comm) return refuse(ncclInvalidArgument, "ncclCommFinalize: comm is null");
  Communicator& c = *comm->communicator;
  if (c.state == ncclInProgress) return refuse(ncclInvalidUsage, "ncclCommFinalize: the communicator is still joining");
  if (!c.blocking) {
    std::lock_guard lock(c.mutex);
    c.finalizing = c.pending > 0;  // ncclCommGetAsyncError leaves once they have finished
    if (c.finalizing) return ncclInProgress;
  } else {
    while (c.pending > 0 && !c.aborted) std::this_thread::yield();
  }
  leave(c, rank_left);
  return c.state == ncclSuccess ? ncclSuccess : c.state.load();
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return refuse(ncclInvalidArgument, "ncclCommDestroy: comm is null");
  leave(*comm->communicator, rank_left);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;  // as NCCL: aborting nothing is no error
  Communicator& c = *comm->communicator;
  c.aborted = true;  // the pending collectives finish at their next step
  leave(c, rank_aborted);
  delete comm;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  thread_local std::string text;  // stays valid until this thread asks again
  if (comm) {
    std::lock_guard lock(comm->communicator->mutex);
    text = comm->communicator->last_error;
  } else {
    std::lock_guard lock(global_error_mutex);
    text = global_error;
  }
  return text.c_str();
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, "ncclBroadcast", {broadcast, uint32_t(datatype), 0, uint32_t(root), count}, sendbuff, recvbuff,
                 stream);
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, "ncclAllReduce", {all_reduce, uint32_t(datatype), uint32_t(op), 0, count}, sendbuff, recvbuff,
                 stream);
}
