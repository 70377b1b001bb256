// Faults under cutrun, with real training ranks (CPU, a tiny model): one rank killed with SIGKILL,
// one rank stopped with SIGSTOP, in worlds of 2 and 3. cutrun must name the rank, every process
// must be gone soon after, and the exit status must be that of a death by SIGKILL. The figures
// (time from the fault until cutrun has reaped every rank) are printed as warnings.
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <regex>
#include <sstream>

#include "dist/ddp/communicator.h"
#include "dist/launch/progress_report.h"
#include "dist/launch/rendezvous.h"
#include "tests/gpu.h"
#include "tests/network.h"
#include "tests/process.h"

using cutrain::test::Process;
using Clock = std::chrono::steady_clock;

namespace {

// cutrun --standalone with `nproc` ranks training on `device` for ever (until the test's fault ends it).
Process start_training(int nproc, const std::vector<std::string>& cutrun_flags,
                       const std::vector<std::string>& train_flags = {}, const char* device = "cpu") {
  std::vector<std::string> argv{cutrain::test::binary("cutrun"), "--standalone", "--nproc-per-node",
                                std::to_string(nproc)};
  argv.insert(argv.end(), cutrun_flags.begin(), cutrun_flags.end());
  for (const char* arg : {"train", "--device", device, "--synthetic-train", "240", "--synthetic-test", "16", "--width",
                          "4", "--batch-size", "16", "--epochs", "100000", "--eval-every", "0", "--log-every", "2",
                          "--workers", "1"})
    argv.push_back(arg);
  argv.insert(argv.begin() + 4 + long(cutrun_flags.size()), cutrain::test::binary("cutrain"));
  argv.insert(argv.end(), train_flags.begin(), train_flags.end());
  return Process(argv);
}

struct InjectedFault {
  Process::Result result;
  double seconds = 0;  // from the fault until cutrun exited, every rank reaped
  pid_t victim = 0;
  std::map<int, pid_t> ranks;
};

// Starts the training, waits until steps run, sends `signum` to rank `victim`, and waits for cutrun.
InjectedFault inject(int nproc, int victim, int signum, const std::vector<std::string>& cutrun_flags,
             const std::vector<std::string>& train_flags = {}, const char* device = "cpu") {
  Process p = start_training(nproc, cutrun_flags, train_flags, device);
  // The wait is for the third step line, however long the machine takes; the deadline only ends a run
  // that never gets there. Two emulated GPU ranks beside a loaded machine's builds took more than 60 s.
  REQUIRE(p.read_until("== step:", 3, 300));
  InjectedFault f;
  f.ranks = cutrain::test::ranks_of(p.pid());
  REQUIRE(f.ranks.size() == size_t(nproc));
  f.victim = f.ranks.at(victim);
  const auto at = Clock::now();
  ::kill(f.victim, signum);
  f.result = p.finish();
  f.seconds = std::chrono::duration<double>(Clock::now() - at).count();
  INFO(f.result.output);
  for (const auto& [rank, pid] : f.ranks) CHECK(!cutrain::test::running(pid));
  return f;
}

// The quiet_ms of a heartbeat measured after the call. Older ones are dropped, and so is the next,
// which the heartbeat thread may have measured before the call and sent after it.
int next_quiet_ms(int fd) {
  char message[64];
  while (::recv(fd, message, sizeof message, MSG_DONTWAIT) > 0) {
  }
  ::recv(fd, message, sizeof message, 0);
  const ssize_t n = ::recv(fd, message, sizeof message, 0);
  std::istringstream words(std::string(message, size_t(std::max<ssize_t>(n, 0))));
  int rank = 0, step = 0, longest = 0, quiet = -1;
  words >> rank >> step >> longest >> quiet;
  return quiet;
}

}  // namespace

TEST_CASE("a rank killed with SIGKILL stops every rank of 2 and of 3, and cutrun exits 137 naming it", "[dist]") {
  for (auto [nproc, victim] : {std::pair{2, 1}, std::pair{3, 0}}) {
    // A grace period longer than the test allows: the others must stop on SIGTERM or on their own.
    InjectedFault f = inject(nproc, victim, SIGKILL, {"--grace-period", "60"});
    INFO(f.result.output);
    CHECK(f.result.exit_code == 128 + SIGKILL);
    CHECK_THAT(f.result.output, Catch::Contains("cutrun: rank " + std::to_string(victim) + " (local rank " +
                                                std::to_string(victim) + ", pid " + std::to_string(f.victim) +
                                                ") was killed by signal SIGKILL; stopping the other ranks"));
    CHECK(f.seconds < 20);
    WARN(nproc << " ranks, rank " << victim << " killed: all stopped " << f.seconds << " s later");
  }
}

TEST_CASE("a rank stopped with SIGSTOP is found by its silence, named and killed, and the job stops", "[dist]") {
  for (auto [nproc, victim] : {std::pair{2, 1}, std::pair{3, 0}}) {
    // 5 s rather than 2: a step's own work must not look quiet (Note [A heartbeat means progress]),
    // and under ASan three ranks on two cores take over 2 s a step.
    InjectedFault f = inject(nproc, victim, SIGSTOP, {"--grace-period", "60", "--stall-timeout", "5"});
    INFO(f.result.output);
    CHECK(f.result.exit_code == 128 + SIGKILL);
    CHECK_THAT(f.result.output, Catch::Contains("cutrun: rank " + std::to_string(victim) + " (local rank " +
                                                std::to_string(victim) + ", pid " + std::to_string(f.victim) +
                                                ", host "));
    CHECK_THAT(f.result.output, Catch::Contains("(stopped or frozen?); killing it and stopping the other ranks"));
    CHECK_THAT(f.result.output, !Catch::Contains("was killed by signal"));  // named once, as stalled
    // Silence is counted from the last heartbeat, which came before the SIGSTOP.
    std::smatch silence;
    REQUIRE(std::regex_search(f.result.output, silence, std::regex("sent no heartbeat for ([0-9.]+) s")));
    CHECK(std::stod(silence[1]) >= 5.0);
    CHECK(f.seconds < 20);
    WARN(nproc << " ranks, rank " << victim << " stopped: all stopped " << f.seconds << " s later");
  }
}

TEST_CASE("a rank blocked writing to a full pipe is found by its quiet heartbeats, named and killed, and the job "
          "stops", "[dist]") {
  // Each rank's output goes through a wrapper into a pipe of one page that nobody reads: rank 0,
  // which prints the step lines, blocks in a write after a few dozen, while its heartbeat thread
  // lives on. Before heartbeats said how long the training thread had been quiet, one rank never
  // ended, and with two the job ended only at the collective timeout, naming rank 1.
  const std::string wrapper = R"(
import fcntl, os, subprocess, sys, time
read_end, write_end = os.pipe()
fcntl.fcntl(write_end, 1031, 4096)  # F_SETPIPE_SZ
subprocess.Popen(sys.argv[1:], stdout=write_end, pass_fds=(int(os.environ["CUTRAIN_PROGRESS_FD"]),))
time.sleep(600)
)";
  for (const int nproc : {1, 2}) {
    std::vector<std::string> argv{cutrain::test::binary("cutrun"), "--standalone", "--nproc-per-node",
                                  std::to_string(nproc), "--stall-timeout", "2", "--grace-period", "60",
                                  "/usr/bin/env", "python3", "-c", wrapper, cutrain::test::binary("cutrain")};
    for (const char* arg : {"train", "--device", "cpu", "--synthetic-train", "240", "--synthetic-test", "16", "--width",
                            "4", "--batch-size", "16", "--epochs", "100000", "--eval-every", "0", "--log-every", "1",
                            "--workers", "1", "--collective-timeout", "120"})
      argv.push_back(arg);
    Process p(argv);
    const bool named = p.read_until("made no progress for ", 1, 60);
    if (!named) p.signal(SIGKILL);
    const Process::Result r = p.finish();
    INFO(nproc << " ranks: " << r.output);
    REQUIRE(named);
    CHECK(r.exit_code == 128 + SIGKILL);
    std::smatch quiet;
    REQUIRE(std::regex_search(r.output, quiet,
                              std::regex("cutrun: rank 0 \\(local rank 0, pid [0-9]+, host [^)]*\\) made no "
                                         "progress for ([0-9.]+) s, at step [0-9]+")));
    CHECK(std::stod(quiet[1]) >= 2.0);
    CHECK_THAT(r.output, Catch::Contains("waiting for no other rank (blocked, say writing to a full pipe?); "
                                         "killing it and stopping the other ranks"));
    CHECK(r.seconds < 40);
    WARN(nproc << " ranks, rank 0 blocked on a full pipe: the job ended after " << r.seconds << " s");
  }
}

TEST_CASE("a rank of a newer restart ends rank 0's older group at once, its cutrun restarts it, and they meet",
          "[dist]") {
  // Note [A newer group ends an older one]: node 0's cutrun starts rank 0 (restart 0), which waits
  // for rank 1; a rank 1 started as if its node had restarted its ranks once joins rank 0's store.
  const std::string port = std::to_string(cutrain::test::free_port());
  const std::vector<std::string> train{cutrain::test::binary("cutrain"), "train", "--device", "cpu", "--width", "4",
                                       "--batch-size", "8", "--synthetic-train", "32", "--synthetic-test", "8",
                                       "--epochs", "1", "--eval-every", "0", "--workers", "1"};
  std::vector<std::string> node0{cutrain::test::binary("cutrun"), "--nnodes", "2", "--node-rank", "0",
                                 "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--store-bind", "127.0.0.1",
                                 "--master-port", port, "--rdzv-id", "newer-restart", "--rdzv-timeout", "30",
                                 "--max-restarts", "1"};
  node0.insert(node0.end(), train.begin(), train.end());
  std::vector<std::string> rank1{"/usr/bin/env", "RANK=1", "LOCAL_RANK=0", "WORLD_SIZE=2", "LOCAL_WORLD_SIZE=1",
                                 "GROUP_RANK=1", "GROUP_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port,
                                 "CUTRAIN_RUN_ID=newer-restart", "CUTRAIN_RDZV_TIMEOUT=30",
                                 "TORCHELASTIC_RESTART_COUNT=1"};
  rank1.insert(rank1.end(), train.begin(), train.end());
  Process p0(node0);
  Process p1(rank1);
  const Process::Result node = p0.finish();
  const Process::Result rank = p1.finish();
  INFO(node.output);
  INFO(rank.output);
  CHECK_THAT(node.output, Catch::Contains("[rank0]: cutrain: rank 1 joined from restart 1 while this group runs "
                                          "restart 0: a node restarted its ranks, so this group is over"));
  CHECK_THAT(node.output, Catch::Contains("cutrun: restart 1 of 1"));
  CHECK(node.exit_code == 0);
  CHECK(rank.exit_code == 0);
  CHECK(node.seconds < 25);  // well within the rendezvous timeout: nobody waited for it
}

TEST_CASE("train --collective-timeout: the others give up on a stopped rank after it, not after 10 minutes",
          "[dist]") {
  // The stall watch off, so that only the collective timeout can end this.
  InjectedFault f = inject(2, 1, SIGSTOP, {"--grace-period", "1", "--stall-timeout", "0"}, {"--collective-timeout", "2"});
  INFO(f.result.output);
  CHECK(f.result.exit_code == 1);
  CHECK_THAT(f.result.output, Catch::Contains("[rank0]: cutrain: error: gloo "));  // an all_reduce or a broadcast
  CHECK_THAT(f.result.output, Catch::Contains("failed on rank 0"));
  CHECK_THAT(f.result.output, Catch::Contains("Timed out waiting 2000ms"));
  CHECK(f.seconds < 20);
  WARN("collective timeout 2 s: all stopped " << f.seconds << " s after SIGSTOP");
}

TEST_CASE("GPU ranks: a killed one, a stopped one and a collective that hangs in a graph replay each end the job",
          "[dist][multi-gpu]" CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPUS(2);
  InjectedFault killed = inject(2, 1, SIGKILL, {"--grace-period", "60"}, {}, "cuda");
  CHECK(killed.result.exit_code == 128 + SIGKILL);
  CHECK_THAT(killed.result.output, Catch::Contains("cutrun: rank 1 (local rank 1, pid " + std::to_string(killed.victim) +
                                                   ") was killed by signal SIGKILL; stopping the other ranks"));
  // An emulated step may take longer than 2 s, and a rank is quiet between its steps' collectives.
  InjectedFault stopped = inject(2, 1, SIGSTOP, {"--grace-period", "60", "--stall-timeout", "6"}, {}, "cuda");
  CHECK(stopped.result.exit_code == 128 + SIGKILL);
  CHECK_THAT(stopped.result.output, Catch::Contains("(stopped or frozen?); killing it and stopping the other ranks"));
  // With the stall watch off, rank 0's NCCL watchdog finds its all-reduce, replayed from the step's
  // CUDA graph, waiting on the stopped rank, and aborts the communicator. (The watchdog counts from
  // when a collective is issued, and an emulated all-reduce waits for the other rank's backward,
  // which beside the test suite's builds took more than 10 s: the run ended before its third step
  // line. Hence 40 s, not 2.)
  InjectedFault hung = inject(2, 1, SIGSTOP, {"--grace-period", "1", "--stall-timeout", "0"}, {"--collective-timeout", "40"},
                      "cuda");
  CHECK(hung.result.exit_code == 1);
  CHECK_THAT(hung.result.output, Catch::Contains("cutrain: error: rank 0: a collective made no progress for 40 s"));
  CHECK_THAT(hung.result.output, Catch::Contains("aborting the NCCL communicator"));
  for (const InjectedFault* f : {&killed, &stopped}) CHECK(f->seconds < 30);
  CHECK(hung.seconds < 40 + 30);
  WARN("GPU ranks: all stopped " << killed.seconds << " s after SIGKILL, " << stopped.seconds << " s after SIGSTOP, "
                                 << hung.seconds << " s after SIGSTOP with the collective timeout of 10 s");
}

TEST_CASE("a rank's heartbeat carries its step, its longest gap and its quiet, never blocks or raises SIGPIPE once cutrun is "
          "gone, and says it is gone", "[dist]") {
  int ends[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_DGRAM, 0, ends) == 0);
  ::setenv("CUTRAIN_PROGRESS_FD", std::to_string(ends[1]).c_str(), 1);
  ::setenv("CUTRAIN_PROGRESS_EVERY_MS", "10", 1);
  {
    std::atomic<int> gone{0};
    const auto created = std::chrono::steady_clock::now();
    cutrain::ProgressReport report(3, [&gone] { ++gone; });
    report.set_step(41);
    std::this_thread::sleep_for(std::chrono::milliseconds(120));  // the longest gap between marks
    report.set_step(42);
    report.mark();
    const auto lived_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - created).count();
    std::string last;
    for (int i = 0; i < 200 && last.rfind("3 42 ", 0) != 0; ++i) {  // up to ~2 s of heartbeats
      char message[64];
      ssize_t n = ::recv(ends[0], message, sizeof message, 0);
      if (n > 0) last.assign(message, size_t(n));
    }
    INFO(last);
    REQUIRE(last.rfind("3 42 ", 0) == 0);
    std::istringstream fields(last.substr(5));
    int longest_ms = 0, quiet_ms = 0;
    fields >> longest_ms >> quiet_ms;
    CHECK(longest_ms >= 120);
    CHECK(longest_ms <= lived_ms);  // a gap between marks, not a time since something older
    // The training thread's quiet since its last mark; none while a collective waits for peers.
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    CHECK(next_quiet_ms(ends[0]) >= 150);
    {
      cutrain::WaitingOnPeers waiting;
      CHECK(next_quiet_ms(ends[0]) == 0);
    }
    CHECK(next_quiet_ms(ends[0]) >= 150);
    CHECK(gone == 0);
    ::close(ends[0]);  // cutrun is killed: the next heartbeat is refused, and said once
    for (int i = 0; i < 10'000 && gone == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // ten more heartbeats, refused in silence
    CHECK(gone == 1);
  }
  ::unsetenv("CUTRAIN_PROGRESS_FD");
  ::unsetenv("CUTRAIN_PROGRESS_EVERY_MS");
  ::close(ends[1]);
}

TEST_CASE("a rank inside a Gloo collective waits for its peers, and its heartbeats say it is not quiet", "[dist]") {
  // Two ranks in threads of this process; rank 0 enters an all-reduce 300 ms before rank 1.
  const int port = cutrain::test::free_port();
  std::promise<void> go;
  std::shared_future<void> started = go.get_future().share();
  std::atomic<int> ready{0};
  float sums[2] = {0, 0};  // checked here: Catch's assertions are for the test's own thread
  auto rank = [&](int r) {
    cutrain::DistEnv env;
    env.rank = env.local_rank = r;
    env.world_size = env.local_world_size = 2;
    env.master_port = port;
    env.run_id = "quiet";
    env.rdzv_timeout = std::chrono::seconds(10);
    auto store = cutrain::rendezvous(env);
    auto comm = cutrain::make_communicator(env, *store, {.timeout = std::chrono::seconds(10)});
    ++ready;
    if (r == 1) started.wait();
    std::vector<float> x(4, 1.0f);
    comm->all_reduce(x.data(), x.size(), cutrain::ReduceOp::sum);
    sums[r] = x[0];
  };
  std::thread rank1(rank, 1);
  std::thread rank0(rank, 0);
  int ends[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_DGRAM, 0, ends) == 0);
  ::setenv("CUTRAIN_PROGRESS_FD", std::to_string(ends[1]).c_str(), 1);
  ::setenv("CUTRAIN_PROGRESS_EVERY_MS", "10", 1);
  {
    cutrain::ProgressReport report(0);
    report.mark();
    while (ready < 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the quiet since the mark passes 300 ms
    // Rank 0 waits in its all-reduce until rank 1 goes; once it is inside, its heartbeats say 0.
    int quiet = -1;
    for (int i = 0; i < 500 && quiet != 0; ++i) quiet = next_quiet_ms(ends[0]);
    CHECK(quiet == 0);
    go.set_value();
    rank0.join();
    rank1.join();
    CHECK(sums[0] == 2.0f);
    CHECK(sums[1] == 2.0f);
    CHECK(next_quiet_ms(ends[0]) >= 300);  // no collective in flight: quiet since the mark
  }
  ::unsetenv("CUTRAIN_PROGRESS_FD");
  ::unsetenv("CUTRAIN_PROGRESS_EVERY_MS");
  ::close(ends[0]);
  ::close(ends[1]);
}
