// cutrun's torchrun conveniences (--nproc-per-node gpu/cpu/auto, --max-restarts, --tee,
// --rdzv-timeout, the list of torchrun flags it does not take) and cutrun under srun, one per node,
// taking its place from Slurm's variables, with the same host lists as cutrain's dist/launch/slurm.cpp.
// The ranks are tiny shell programs.
#include <sched.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "app/version.h"
#include "dist/launch/slurm.h"
#include "tests/output_lines.h"
#include "tests/process.h"

using cutrain::test::read_file;
using cutrain::test::run;
using cutrain::test::TempDir;

namespace {

using cutrain::test::count_of;

using cutrain::test::kCutrun;

// cutrun with `variables` ("NAME=value") added to its environment, running `script` in every rank.
cutrain::test::Process::Result cutrun_with(const std::vector<std::string>& variables,
                                           const std::vector<std::string>& flags, const std::string& script) {
  std::vector<std::string> argv{"/usr/bin/env"};
  argv.insert(argv.end(), variables.begin(), variables.end());
  argv.push_back(kCutrun);
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"/bin/sh", "-c", script});
  return run(argv);
}

// srun --nodes 2 --ntasks-per-node 1: this is the task on the second node.
const std::vector<std::string> kSecondNode = {
    "SLURM_PROCID=1",          "SLURM_NTASKS=2",        "SLURM_NODEID=1",   "SLURM_NNODES=2",
    "SLURM_STEP_NUM_NODES=2",  "SLURM_STEP_NUM_TASKS=2", "SLURM_JOB_ID=12345678", "SLURM_STEP_ID=1",
    "SLURM_STEP_NODELIST=gpu[07-08]", "SLURM_JOB_NODELIST=gpu[07-08]"};

}  // namespace

TEST_CASE("cutrun --nproc-per-node gpu starts one rank per visible GPU, and auto falls back to the cores", "[dist]") {
  auto gpus = cutrun_with({"CUDA_VISIBLE_DEVICES=0,1,2"}, {"--nproc-per-node", "gpu"}, "echo of $WORLD_SIZE");
  REQUIRE(gpus.exit_code == 0);
  CHECK(count_of(gpus.output, "of 3\n") == 3);
  CHECK(count_of(cutrun_with({"CUDA_VISIBLE_DEVICES=4,5"}, {"--nproc-per-node", "auto"}, "echo of $WORLD_SIZE").output,
              "of 2\n") == 2);

  cpu_set_t cores;
  REQUIRE(sched_getaffinity(0, sizeof cores, &cores) == 0);
  const std::string cpus = std::to_string(CPU_COUNT(&cores));
  auto none = cutrun_with({"CUDA_VISIBLE_DEVICES="}, {"--nproc-per-node", "auto"}, "echo of $WORLD_SIZE");
  REQUIRE(none.exit_code == 0);
  CHECK(count_of(none.output, "of " + cpus + "\n") == size_t(CPU_COUNT(&cores)));

  auto no_gpu = cutrun_with({"CUDA_VISIBLE_DEVICES="}, {"--nproc-per-node", "gpu"}, "true");
  CHECK(no_gpu.exit_code == 2);
  CHECK(no_gpu.output ==
        "cutrun: error: --nproc-per-node gpu: no GPU visible here (CUDA_VISIBLE_DEVICES, /dev/nvidia*) "
        "(see cutrun --help)\n");
}

TEST_CASE("cutrun --max-restarts starts the group again after a failure, at most N times", "[dist]") {
  CHECK(run({kCutrun, "--max-restarts", "0", "/bin/true"}).exit_code == 0);
  // Rank 1 fails once rank 0 of its attempt has said "start" (a marker file per restart), and rank 0
  // would sleep for a minute unless cutrun stops it.
  TempDir started;
  const std::string marker = (started.path() / "started-").string() + "$TORCHELASTIC_RESTART_COUNT";
  auto restarts = run({kCutrun, "--nproc-per-node", "2", "--max_restarts", "2", "--restart-delay", "0", "/bin/sh",
                       "-c", "if [ $RANK = 0 ]; then echo start; touch " + marker + "; exec sleep 60; fi; "
                             "while [ ! -e " + marker + " ]; do sleep 0.01; done; exit 3"});
  CHECK(restarts.exit_code == 3);
  CHECK(count_of(restarts.output, "[rank0]: start") == 3);
  CHECK_THAT(restarts.output, Catch::Contains("cutrun: restart 2 of 2 in 0 s, after rank 1 exited with code 3: "
                                              "starting every rank again, which resume as their flags say"));
  CHECK(restarts.seconds < 60);  // each attempt stopped rank 0, or the first alone would take a minute
  // On several nodes too (tests/scripts/test_two_node_restarts.sh runs two), where it was refused.
  auto nodes = run({kCutrun, "--nnodes", "2", "--node-rank", "1", "--rdzv-id", "r", "--max-restarts", "1", "/bin/true"});
  CHECK(nodes.exit_code == 0);
  CHECK(nodes.output.empty());
}

TEST_CASE("cutrun --tee picks the streams in the log files, and alone logs to a fresh folder", "[dist]") {
  TempDir dir;
  auto r = run({kCutrun, "--nproc-per-node", "2", "--log-dir", dir.path().string(), "--tee", "1", "/bin/sh", "-c",
                "echo out $RANK; echo err $RANK >&2"});
  REQUIRE(r.exit_code == 0);
  CHECK(read_file(dir.path() / "rank1.log") == "out 1\n");  // stderr still on the console only
  CHECK_THAT(r.output, Catch::Contains("[rank1]: err 1"));

  auto alone = run({kCutrun, "--tee", "3", "/bin/sh", "-c", "echo hello"});
  REQUIRE(alone.exit_code == 0);
  const std::string marker = "the ranks' logs go to ";
  const size_t at = alone.output.find(marker);
  REQUIRE(at != std::string::npos);
  const size_t from = at + marker.size();
  const std::filesystem::path folder = alone.output.substr(from, alone.output.find('\n', from) - from);
  CHECK(read_file(folder / "rank0.log") == "hello\n");
  std::filesystem::remove_all(folder);
}

TEST_CASE("cutrun --rdzv-timeout reaches the ranks, with the number of nodes", "[dist]") {
  auto r = run({kCutrun, "--rdzv-timeout", "7.5", "--nnodes", "3", "--node-rank", "2", "--rdzv-id", "r1",
                "/bin/sh", "-c", "echo timeout=$CUTRAIN_RDZV_TIMEOUT nodes=$GROUP_WORLD_SIZE"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("[rank2]: timeout=7.5 nodes=3"));
  auto zero = run({kCutrun, "--rdzv-timeout", "0", "/bin/true"});
  CHECK(zero.output == "cutrun: error: --rdzv-timeout 0: must be above 0 and at most 86400 seconds\n");
}

TEST_CASE("cutrun refuses a run id too long for a join in one line", "[dist]") {
  // Before, every join failed with "too many bytes before a join", blaming the store.
  auto r = run({kCutrun, "--standalone", "--rdzv-id", std::string(5000, 'a'), "/bin/true"});
  CHECK(r.exit_code == 2);
  CHECK(r.output == "cutrun: error: --rdzv-id (or CUTRAIN_RUN_ID): 5000 bytes; a run id has at most 1024\n");
  CHECK(run({kCutrun, "--standalone", "--rdzv-id", std::string(1024, 'a'), "/bin/true"}).exit_code == 0);
}

TEST_CASE("cutrun --help names the torchrun flags it does not take", "[dist]") {
  auto r = run({kCutrun, "--help"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("torchrun flags cutrun does not take"));
  for (const char* flag : {"--rdzv-backend", "--rdzv-endpoint", "--monitor-interval", "--nnodes MIN:MAX",
                           "--redirects", "--no-python"})
    CHECK_THAT(r.output, Catch::Contains(flag));
}

TEST_CASE("cutrun under srun takes its node, the nodes and the master from Slurm", "[dist]") {
  auto r = cutrun_with(kSecondNode, {"--nproc-per-node", "2"},
                       "echo $RANK of $WORLD_SIZE node $GROUP_RANK of $GROUP_WORLD_SIZE at $MASTER_ADDR:$MASTER_PORT "
                       "run $CUTRAIN_RUN_ID");
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("cutrun: under srun: node 1 of 2, master gpu07:15678\n"));
  CHECK_THAT(r.output, Catch::Contains("[rank2]: 2 of 4 node 1 of 2 at gpu07:15678 run slurm-12345678.1\n"));
  CHECK_THAT(r.output, Catch::Contains("[rank3]: 3 of 4 node 1 of 2 at gpu07:15678 run slurm-12345678.1\n"));

  // Flags given win over Slurm's variables.
  auto flags = cutrun_with(kSecondNode, {"--node-rank", "0", "--master-addr", "10.0.0.1", "--master-port", "1234"},
                           "echo $RANK at $MASTER_ADDR:$MASTER_PORT");
  CHECK_THAT(flags.output, Catch::Contains("[rank0]: 0 at 10.0.0.1:1234\n"));

  // One cutrun per node: srun's tasks per node must be 1.
  std::vector<std::string> per_gpu = kSecondNode;
  per_gpu.push_back("SLURM_STEP_NUM_TASKS=8");
  auto many = cutrun_with(per_gpu, {}, "true");
  CHECK(many.exit_code == 2);
  CHECK_THAT(many.output, Catch::StartsWith("cutrun: error: under srun, cutrun runs once per node and starts the "
                                            "ranks itself, but this step has 8 tasks on 2 node(s)"));
}

TEST_CASE("cutrun under srun finds the master as cutrain does", "[dist]") {
  // cutrun (Python) and dist/launch/slurm.cpp (C++) each expand host lists; here both meet the same lists.
  for (const std::string list : {"gpu[01-04,07],login2", "n[098-101]", "a[1-2]-b[1,3],c", "login2", "x[5]"}) {
    INFO(list);
    auto r = cutrun_with({"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_NNODES=2", "SLURM_NODEID=0",
                          "SLURM_STEP_NODELIST=" + list, "SLURM_JOB_ID=77"},
                         {}, "echo master=$MASTER_ADDR");
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("master=" + cutrain::expand_hostlist(list).front() + "\n"));
  }
}

TEST_CASE("cutrun --version says the version and commit cutrain --version says", "[dist]") {
  const auto r = run({kCutrun, "--version"});
  CHECK(r.exit_code == 0);
  CHECK("cutrain" + r.output.substr(std::string("cutrun").size()) == cutrain::version_line() + "\n");
}

TEST_CASE("cutrain --local-rank N, torch 2.x's spelling, means LOCAL_RANK=N before or after the subcommand", "[dist]") {
  // A world of one has a single local rank, so local rank 1 must be refused, and named.
  const std::string cutrain = cutrain::test::binary("cutrain");
  for (const std::vector<std::string>& argv :
       {std::vector<std::string>{cutrain, "--local-rank=1", "bench-allreduce", "--max-bytes", "4K"},
        std::vector<std::string>{cutrain, "bench-allreduce", "--local-rank", "1", "--max-bytes", "4K"}}) {
    const auto r = run(argv);
    CHECK(r.exit_code == 1);
    CHECK(r.output == "cutrain: error: LOCAL_RANK=1 is not below LOCAL_WORLD_SIZE=1\n");
  }
}
