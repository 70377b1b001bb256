// cutrun, the launcher: environment, rank-prefixed output, log files, stopping on failure and on
// signals, and one-line errors. The ranks are tiny shell programs.
#include <catch2/catch.hpp>
#include <regex>
#include <thread>

#include "tests/mount.h"
#include "tests/network.h"
#include "tests/output_lines.h"
#include "tests/process.h"

using cutrain::test::HasLines;
using cutrain::test::Process;
using cutrain::test::read_file;
using cutrain::test::run;
using cutrain::test::TempDir;

namespace {

using cutrain::test::kCutrun;

std::vector<std::string> cutrun_sh(const std::vector<std::string>& flags, const std::string& script) {
  std::vector<std::string> argv{kCutrun};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"/bin/sh", "-c", script});
  return argv;
}

}  // namespace

TEST_CASE("cutrun gives every rank torchrun's environment and prefixes its output", "[dist]") {
  auto r = run(cutrun_sh({"--standalone", "--nproc-per-node", "3"},
                         "echo env $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR "
                         "omp=$OMP_NUM_THREADS run=${#CUTRAIN_RUN_ID}; echo to-stderr >&2"));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("[rank0]: env 0 0 3 3 0 127.0.0.1 omp=1 run=32"));
  CHECK_THAT(r.output, Catch::Contains("[rank1]: env 1 1 3 3 0 127.0.0.1 omp=1 run=32"));
  CHECK_THAT(r.output, Catch::Contains("[rank2]: env 2 2 3 3 0 127.0.0.1 omp=1 run=32"));
  CHECK_THAT(r.output, Catch::Contains("[rank2]: to-stderr"));
}

TEST_CASE("cutrun numbers ranks across nodes and takes torchrun's underscore spellings", "[dist]") {
  auto r = run(cutrun_sh({"--nnodes", "2", "--node_rank", "1", "--nproc_per_node", "2", "--master_port", "1234",
                          "--rdzv_id", "shared-id"},
                         "echo at $RANK of $WORLD_SIZE local $LOCAL_RANK group $GROUP_RANK port $MASTER_PORT"));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("[rank2]: at 2 of 4 local 0 group 1 port 1234"));
  CHECK_THAT(r.output, Catch::Contains("[rank3]: at 3 of 4 local 1 group 1 port 1234"));
}

TEST_CASE("cutrun --log-dir keeps one file per rank, and --local-ranks-filter picks what the console shows", "[dist]") {
  TempDir dir;
  auto r = run(cutrun_sh({"--nproc-per-node", "2", "--log-dir", dir.path().string(), "--local-ranks-filter", "1"},
                         "echo out $RANK; echo err $RANK >&2"));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("[rank1]: out 1"));
  CHECK_THAT(r.output, !Catch::Contains("[rank0]:"));
  std::string rank0 = read_file(dir.path() / "rank0.log");
  CHECK_THAT(rank0, Catch::Contains("out 0\n"));
  CHECK_THAT(rank0, Catch::Contains("err 0\n"));
  CHECK_THAT(read_file(dir.path() / "rank1.log"), Catch::Contains("out 1\n"));
}

// 20000 lines, about 200 KB: more than a pipe holds, so a copier that stopped reading would block
// the rank.
const std::string kChatty = "i=0; while [ $i -lt 20000 ]; do echo line $i; i=$((i+1)); done; echo finished >&2";

TEST_CASE("cutrun's copier survives a closed standard output and a full --log-dir, and no rank blocks", "[dist]") {
  // Before, the copier died on EPIPE and the rank then blocked on its full pipe: the job never
  // ended (here: timeout's exit status 124).
  auto closed = run({"/bin/sh", "-c", "{ timeout 15 " + kCutrun + " --nproc-per-node 1 sh -c '" + kChatty +
                                          "'; echo cutrun exited $? >&2; } | head -1"});
  INFO(closed.output);
  CHECK_THAT(closed.output, Catch::StartsWith("[rank0]: line 0\n"));
  CHECK_THAT(closed.output, Catch::Contains("cutrun: warning: cannot write to standard output (Broken pipe); the "
                                            "ranks' standard output is dropped from now on\n"));
  CHECK_THAT(closed.output, Catch::Contains("[rank0]: finished\n"));
  CHECK_THAT(closed.output, Catch::EndsWith("cutrun exited 0\n"));

  TempDir dir;
  const std::string logs = dir / "logs";
  cutrain::test::Mount full = cutrain::test::Mount::tmpfs(logs, "size=64k");
  if (!full.ok()) SKIP_WITHOUT_MOUNT(full);
  auto r = run({"/usr/bin/timeout", "15", kCutrun, "--nproc-per-node", "1", "--log-dir", logs, "sh", "-c", kChatty});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("cutrun: warning: --log-dir: cannot write " + logs + "/rank0.log (No space left "
                                       "on device); the rank's output goes on to the console\n"));
  CHECK_THAT(r.output, Catch::Contains("[rank0]: line 19999\n"));
}

TEST_CASE("a 300 MB line without a newline passes through cutrun in pieces, in bounded memory", "[dist]") {
  // Under a 200 MB address space (thread stacks of 512 KiB), before: a MemoryError in the copier,
  // then a rank blocked on its full pipe until timeout ended the job.
  auto r = run({"/bin/bash", "-c",
                "ulimit -s 512; ulimit -v 200000; exec /usr/bin/timeout 20 " + kCutrun +
                    " --nproc-per-node 2 --local-ranks-filter 1 sh -c 'if [ $RANK = 0 ]; then head -c 300000000 "
                    "/dev/zero | tr \"\\0\" x; fi; echo end'"});
  INFO(r.output.substr(0, 2000));
  CHECK(r.exit_code == 0);
  CHECK(r.output == "[rank1]: end\n");
}

TEST_CASE("a rank exiting with code 3 makes cutrun stop the others and exit 3, naming it", "[dist]") {
  auto r = run(cutrun_sh({"--nproc-per-node", "3"}, "if [ $RANK = 1 ]; then exit 3; fi; sleep 60"));
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.output, Catch::Contains("rank 1 (local rank 1, pid"));
  CHECK_THAT(r.output, Catch::Contains("exited with code 3; stopping the other ranks"));
  CHECK(r.seconds < 30);  // not the 60 s the other ranks would sleep
}

// app/run_end.h: rank 0 fails first (a full disk) but exits later; rank 1, whose collective
// broke, exits sooner. Before, cutrun named rank 1 and exited with its code. The order is made by
// events: rank 1 writes its record once rank 0's marker file exists, and rank 0 exits only when
// cutrun stops it after rank 1's exit.
TEST_CASE("the rank that failed first is named, whichever exits first, from the ranks' failure records", "[dist]") {
  TempDir dir;
  const std::string marker = (dir.path() / "rank0-failed").string();
  auto r = run(cutrun_sh({"--nproc-per-node", "2"},
                         "if [ $RANK = 0 ]; then echo \"$(date +%s%N) checkpoint: No space left on device\" > "
                         "$CUTRAIN_ERROR_FILE; touch " + marker + "; trap 'kill $!; exit 4' TERM; sleep 60 & wait; fi; "
                         "while [ ! -e " + marker + " ]; do sleep 0.01; done; "
                         "echo \"$(date +%s%N) rank 0 left\" > $CUTRAIN_ERROR_FILE; exit 5"));
  INFO(r.output);
  CHECK(r.exit_code == 4);
  CHECK_THAT(r.output, Catch::Contains("cutrun: rank 1 (local rank 1, pid") &&
                           Catch::Contains("exited with code 5; stopping the other ranks"));
  CHECK_THAT(r.output, HasLines("cutrun: rank 0 \\(local rank 0, pid [0-9]+\\) failed first, and exited with code 4: "
                                "checkpoint: No space left on device"));
}

TEST_CASE("a rank that ignores SIGTERM is killed after the grace period, and a death by signal is named", "[dist]") {
  auto r = run(cutrun_sh({"--nproc-per-node", "2", "--grace-period", "1"},
                         "if [ $RANK = 1 ]; then kill -SEGV $$; fi; trap '' TERM; sleep 60"));
  CHECK(r.exit_code == 128 + SIGSEGV);
  CHECK_THAT(r.output, Catch::Contains("rank 1 (local rank 1, pid"));
  CHECK_THAT(r.output, Catch::Contains("was killed by signal SIGSEGV"));
  CHECK(r.seconds < 30);
}

TEST_CASE("a program that sends no heartbeats is not judged by the stall watch", "[dist]") {
  auto r = run(cutrun_sh({"--nproc-per-node", "2", "--stall-timeout", "0.5"}, "sleep 1.5; echo finished"));
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("[rank1]: finished"));
}

namespace {

// Two Python ranks under cutrun that handle SIGTERM with `handler` (a Python expression; `stop` says
// so and exits 0), and SIGTERM to cutrun once both are ready. Python rather than sh: dash can lose
// a signal that lands while it forks its next command. They sleep rather than pause(): a signal
// that lands between Python's check for one and the pause() call would wait for another.
Process::Result sigterm_to_cutrun(const std::string& grace_period, const std::string& handler) {
  Process p({kCutrun, "--nproc-per-node", "2", "--grace-period", grace_period, "python3", "-c",
             "import os, signal, sys, time\n"
             "def stop(*_):\n"
             "    print('rank', os.environ['RANK'], 'got TERM', flush=True)\n"
             "    sys.exit(0)\n"
             "signal.signal(signal.SIGTERM, " + handler + ")\n"
             "print('ready', flush=True)\n"
             "while True:\n"
             "    time.sleep(1)\n"});
  REQUIRE(p.read_until("ready", 2));
  p.signal(SIGTERM);
  return p.finish();
}

}  // namespace

TEST_CASE("SIGTERM to cutrun reaches every rank", "[dist]") {
  auto r = sigterm_to_cutrun("20", "stop");
  CHECK_THAT(r.output, Catch::Contains("[rank0]: rank 0 got TERM"));
  CHECK_THAT(r.output, Catch::Contains("[rank1]: rank 1 got TERM"));
  CHECK(r.exit_code == 0);  // every rank stopped cleanly on the signal asked of the job
  CHECK(r.seconds < 20);  // the ranks ended on SIGTERM, not on the SIGKILL after the grace period
}

TEST_CASE("SIGTERM to cutrun with a rank that ignores it ends in that rank's kill, and exit status 128 + SIGTERM",
          "[dist]") {
  auto r = sigterm_to_cutrun("0.5", "signal.SIG_IGN if os.environ['RANK'] == '1' else stop");
  INFO(r.output);
  CHECK_THAT(r.output, Catch::Contains("rank 1 (local rank 1, pid"));
  CHECK(r.exit_code == 128 + SIGTERM);  // a stop that had to kill is no clean stop
}

namespace {

// cutrun with two ranks that sleep for a minute.
Process start_sleeping_ranks() { return Process(cutrun_sh({"--nproc-per-node", "2"}, "echo ready; exec sleep 60")); }

// Their pids, once both run; each may still be in its exec of sleep (wait_ranks_of).
std::vector<pid_t> rank_pids(Process& cutrun) {
  REQUIRE(cutrun.read_until("ready", 2));
  const std::map<int, pid_t> found = cutrain::test::wait_ranks_of(cutrun.pid(), 2);
  REQUIRE(found.size() == 2);
  std::vector<pid_t> ranks;
  for (const auto& [rank, pid] : found) ranks.push_back(pid);
  return ranks;
}

}  // namespace

TEST_CASE("cutrun killed with SIGKILL takes its ranks with it", "[dist]") {
  Process cutrun = start_sleeping_ranks();
  const std::vector<pid_t> ranks = rank_pids(cutrun);
  cutrun.signal(SIGKILL);
  cutrun.finish();
  CHECK(cutrain::test::wait_gone(ranks, 10));  // not the minute they would sleep
}

TEST_CASE("a test killed at its timeout leaves nothing behind: not the cutrun it started, nor its ranks",
          "[dist]") {
  // CTest ends a test that runs past its timeout with SIGKILL: no destructor runs.
  Process test({cutrain::test::binary("cutrain_tests"), "[.test-killed-while-cutrun-runs]"});
  REQUIRE(test.read_until("waiting to be killed"));
  test.signal(SIGKILL);
  auto r = test.finish();
  std::smatch pids;
  REQUIRE(std::regex_search(r.output, pids, std::regex("cutrun ([0-9]+), ranks ([0-9]+) ([0-9]+)")));
  CHECK(cutrain::test::wait_gone({std::stoi(pids[1]), std::stoi(pids[2]), std::stoi(pids[3])}, 10));
}

TEST_CASE("the test that is killed", "[.test-killed-while-cutrun-runs]") {
  Process cutrun = start_sleeping_ranks();
  const std::vector<pid_t> ranks = rank_pids(cutrun);
  std::cout << "cutrun " << cutrun.pid() << ", ranks " << ranks[0] << " " << ranks[1] << ", waiting to be killed"
            << std::endl;
  std::this_thread::sleep_for(std::chrono::seconds(60));
}

TEST_CASE("cutrun refuses bad flags and missing programs in one line", "[dist]") {
  auto zero = run({kCutrun, "--nproc-per-node", "0", "/bin/true"});
  CHECK(zero.exit_code == 2);
  CHECK(zero.output == "cutrun: error: --nproc-per-node 0: must be 1..1024\n");
  auto node = run({kCutrun, "--nnodes", "2", "--node-rank", "2", "/bin/true"});
  CHECK_THAT(node.output, Catch::StartsWith("cutrun: error: --node-rank 2: must be in 0..1"));
  auto missing = run({kCutrun, "--nproc-per-node", "2", "/no/such/program"});
  CHECK(missing.exit_code == 2);
  CHECK(missing.output == "cutrun: error: program '/no/such/program' not found\n");
  auto unknown = run({kCutrun, "--nproc-per-nod", "2", "/bin/true"});
  CHECK(unknown.exit_code == 2);
  CHECK_THAT(unknown.output, Catch::StartsWith("cutrun: error: unrecognized arguments: --nproc-per-nod"));
  CHECK(std::count(unknown.output.begin(), unknown.output.end(), '\n') == 1);
}

TEST_CASE("cutrain --local_rank N means LOCAL_RANK=N, as under torch.distributed.launch", "[dist]") {
  // A world of one has a single local rank, so local rank 1 must be refused, and named.
  auto r = run({cutrain::test::binary("cutrain"), "--local_rank=1", "bench-allreduce", "--max-bytes", "4K"});
  CHECK(r.exit_code == 1);
  CHECK(r.output == "cutrain: error: LOCAL_RANK=1 is not below LOCAL_WORLD_SIZE=1\n");
  CHECK(run({cutrain::test::binary("cutrain"), "--local_rank", "0", "bench-allreduce", "--max-bytes", "4K", "--iters", "1"})
            .exit_code == 0);
}

TEST_CASE("cutrun bounds every number it is given, in one line and without a traceback", "[dist]") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--nproc-per-node", "99999999999999999999"}, "--nproc-per-node 99999999999999999999: must be 1..1024"},
      {{"--nproc-per-node", "999999999999999999999999"}, "--nproc-per-node 999999999999999999999999: not a whole "
                                                         "number"},
      {{"--nproc-per-node", "0x10"}, "--nproc-per-node 0x10: not a whole number"},
      {{"--nnodes", "4097"}, "--nnodes 4097: must be 1..4096 (at most 4096 processes in all)"},
      {{"--nproc-per-node", "8", "--nnodes", "513"}, "--nnodes 513: must be 1..512"},
      {{"--master-port", "1_000"}, "--master-port 1_000: not a whole number"},
      {{"--grace-period", "inf"}, "--grace-period inf: not a number of seconds"},
      {{"--grace-period", "nan"}, "--grace-period nan: not a number of seconds"},
      {{"--grace-period", "1e308"}, "--grace-period 1e+308: must be 0..86400 seconds"},
      {{"--grace-period=-1"}, "--grace-period -1: must be 0..86400 seconds"},
      {{"--stall-timeout=-inf"}, "--stall-timeout -inf: not a number of seconds"},
      {{"--stall-timeout", "1e6"}, "--stall-timeout 1e+06: must be 0 (never) or 0.5..86400 seconds"},
      {{"--stall-timeout", "0.1"}, "--stall-timeout 0.1: must be 0 (never) or 0.5..86400 seconds"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> argv{kCutrun};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back("/bin/true");
    auto r = run(argv);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::StartsWith("cutrun: error: " + message));
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
}

TEST_CASE("node 0 draws an unguessable run id and prints the command for the other nodes, which must have it",
          "[dist]") {
  auto r = run(cutrun_sh({"--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "10.0.0.1"},
                         "echo id=$CUTRAIN_RUN_ID"));
  REQUIRE(r.exit_code == 0);
  const std::string announced = "CUTRAIN_RUN_ID=";
  const size_t at = r.output.find(announced);
  REQUIRE(at != std::string::npos);
  const std::string id = r.output.substr(at + announced.size(), 32);
  CHECK(id.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK_THAT(r.output, Catch::Contains("cutrun: on the other nodes, run:\n  CUTRAIN_RUN_ID=" + id +
                                       " cutrun --nnodes 2 --node-rank <1..1> --nproc-per-node 1 --master-addr "
                                       "10.0.0.1 --master-port 29500 /bin/sh -c 'echo id=$CUTRAIN_RUN_ID'\n"));
  CHECK_THAT(r.output, Catch::Contains("[rank0]: id=" + id + "\n"));
  CHECK(run(cutrun_sh({"--nnodes", "2", "--nproc-per-node", "1"}, "echo id=$CUTRAIN_RUN_ID")).output != r.output);

  auto other = run(cutrun_sh({"--nnodes", "2", "--node-rank", "1"}, "true"));
  CHECK(other.exit_code == 2);
  CHECK(other.output ==
        "cutrun: error: --rdzv-id: node 1 needs the run id of node 0; run the command node 0 printed\n");
  auto given = run({"/usr/bin/env", "CUTRAIN_RUN_ID=from-node-0", kCutrun, "--nnodes", "2", "--node-rank", "1",
                    "--store-bind", "0.0.0.0", "/bin/sh", "-c", "echo id=$CUTRAIN_RUN_ID bind=$CUTRAIN_STORE_BIND"});
  CHECK_THAT(given.output, Catch::Contains("[rank1]: id=from-node-0 bind=0.0.0.0"));
}

TEST_CASE("cutrun --master-addr ::1: the store and Gloo work over IPv6", "[dist]") {
  CUTRAIN_REQUIRE_IPV6(port);
  auto r = run({kCutrun, "--nproc-per-node", "2", "--master-addr", "::1", "--master-port", std::to_string(port),
                cutrain::test::binary("cutrain"), "train", "--device", "cpu", "--synthetic-train", "64",
                "--synthetic-test", "16", "--width", "4", "--batch-size", "16", "--epochs", "1", "--workers", "1",
                "--eval-every", "0"});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("all-reduced over gloo"));
  CHECK(r.seconds < 60);
}
