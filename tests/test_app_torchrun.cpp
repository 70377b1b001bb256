// [app]: `cutrain train` under PyTorch's own launcher, torchrun (`python -m torch.distributed.run`
// of the project's torch 2.11), which the ranks join through its agent's TCPStore (Note
// [torchrun's store] in dist/launch/torch_store.h).
#include <catch2/catch.hpp>

#include <csignal>
#include <map>
#include <string>
#include <vector>

#include "nn/safetensors.h"
#include "tests/checkpoint_compare.h"
#include "tests/process.h"
#include "tests/torch_python.h"

namespace {

using cutrain::test::Process;
using cutrain::test::TempDir;

// The command: two CPU ranks, a width-4 model, 4 steps of 8 images each.
std::vector<std::string> train_flags(const std::string& save) {
  return {cutrain::test::binary("cutrain"), "train", "--device", "cpu", "--width", "4", "--batch-size", "8",
          "--synthetic-train", "64", "--synthetic-test", "16", "--epochs", "1", "--workers", "1", "--threads", "1",
          "--eval-every", "0", "--save", save};
}

std::vector<std::string> torchrun(const std::string& python, const std::vector<std::string>& command) {
  std::vector<std::string> argv = {python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                                   "--no-python"};
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

}  // namespace

TEST_CASE("torchrun --no-python trains two ranks to the checkpoint cutrun's run saves, bit for bit", "[app]") {
  std::string python;
  CUTRAIN_REQUIRE_TORCH(python);
  TempDir dir;
  const std::string under_torchrun = (dir.path() / "torchrun").string(), under_cutrun = (dir.path() / "cutrun").string();
  const Process::Result torch = cutrain::test::run(torchrun(python, train_flags(under_torchrun)));
  INFO(torch.output);
  REQUIRE(torch.exit_code == 0);
  CHECK(torch.output.find("world size 2") != std::string::npos);

  std::vector<std::string> cutrun = {cutrain::test::binary("cutrun"), "--standalone", "--nproc-per-node", "2"};
  const std::vector<std::string> flags = train_flags(under_cutrun);
  cutrun.insert(cutrun.end(), flags.begin(), flags.end());
  const Process::Result ours = cutrain::test::run(cutrun);
  INFO(ours.output);
  REQUIRE(ours.exit_code == 0);
  for (const char* file : {"/checkpoint-00000004.safetensors", "/checkpoint-00000004.optim.safetensors"}) {
    INFO(file);
    cutrain::test::require_identical(under_torchrun + file, under_cutrun + file);
  }
}

TEST_CASE("a rank that fails under torchrun shows cutrain's error line in torchrun's summary", "[app]") {
  std::string python;
  CUTRAIN_REQUIRE_TORCH(python);
  TempDir dir;
  std::vector<std::string> command = train_flags((dir.path() / "save").string());
  command.insert(command.end(), {"--data", (dir.path() / "nowhere").string()});
  const Process::Result r = cutrain::test::run(torchrun(python, command));
  INFO(r.output);
  CHECK(r.exit_code == 1);
  // TORCHELASTIC_ERROR_FILE's record (app/run_end.h), where torchrun said "error_file: <N/A>".
  const std::string line = "cutrain: error: " + (dir.path() / "nowhere").string() + ": no such folder";
  CHECK(r.output.find("Root Cause (first observed failure)") != std::string::npos);
  CHECK(r.output.find("traceback : " + line) != std::string::npos);
  CHECK(r.output.find("<N/A>") == std::string::npos);
}

TEST_CASE("torchrun --max-restarts 1: after a rank is killed, the restarted group resumes and ends bit-identical",
          "[app]") {
  std::string python;
  CUTRAIN_REQUIRE_TORCH(python);
  TempDir dir;
  const std::string straight = (dir.path() / "straight").string(), faulty = (dir.path() / "faulty").string();
  // 120 steps of 4 per epoch, each saved: long enough that the kill comes well before the end.
  auto flags = [](const std::string& save) {
    std::vector<std::string> command = train_flags(save);
    command.insert(command.end(), {"--epochs", "30", "--log-every", "1", "--resume", "auto", "--save-every-steps", "1"});
    return command;
  };
  std::vector<std::string> cutrun = {cutrain::test::binary("cutrun"), "--standalone", "--nproc-per-node", "2"};
  const std::vector<std::string> uninterrupted = flags(straight);
  cutrun.insert(cutrun.end(), uninterrupted.begin(), uninterrupted.end());
  REQUIRE(cutrain::test::run(cutrun).exit_code == 0);

  std::vector<std::string> launcher = torchrun(python, flags(faulty));
  launcher.insert(launcher.begin() + 3, {"--max-restarts", "1"});
  Process p(launcher);
  REQUIRE(p.read_until("== step", 5, 60));
  const std::map<int, pid_t> ranks = cutrain::test::ranks_of(p.pid());
  REQUIRE(ranks.size() == 2);
  ::kill(ranks.at(1), SIGKILL);
  const Process::Result r = p.finish();
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  // The second group met at the agent's store under its own prefix (Note [A group's generation under torchrun]) and resumed from a checkpoint.
  CHECK(r.output.find("world size 2") != r.output.rfind("world size 2"));
  CHECK(r.output.find("resum") != std::string::npos);
  for (const char* file : {"/checkpoint-00000120.safetensors", "/checkpoint-00000120.optim.safetensors"}) {
    INFO(file);
    cutrain::test::require_identical(straight + file, faulty + file);
  }
}

TEST_CASE("torchrun --signals-to-handle SIGUSR1: the signal to torchrun finishes the step and saves a checkpoint that loads",
          "[app]") {
  std::string python;
  CUTRAIN_REQUIRE_TORCH(python);
  TempDir dir;
  const std::string save = (dir.path() / "ckpt").string();
  std::vector<std::string> flags = train_flags(save);
  flags.insert(flags.end(), {"--epochs", "1000", "--log-every", "1"});
  std::vector<std::string> launcher = torchrun(python, flags);
  // torchrun's agent catches the signals it is told to handle and passes them on to every rank
  // (Note [torchrun's signals to handle] in app/run_end.cpp). SIGUSR1's default action ends a process.
  launcher.insert(launcher.begin() + 3, {"--signals-to-handle", "SIGUSR1"});
  Process p(launcher);
  REQUIRE(p.read_until("== step", 3, 60));
  p.signal(SIGUSR1);
  const Process::Result r = p.finish();
  INFO(r.output);
  CHECK(r.exit_code != 0);  // torchrun re-raises the signal it got, as for SIGTERM
  const auto at = r.output.find("stopped by signal " + std::to_string(SIGUSR1) + " after step ");
  REQUIRE(at != std::string::npos);
  const auto path_at = r.output.find("checkpoint: ", at) + 12;
  const std::string path = r.output.substr(path_at, r.output.find('\n', path_at) - path_at);
  CHECK(path.rfind(save + "/checkpoint-", 0) == 0);
  CHECK(cutrain::read_safetensors(path).tensors.count("fc.weight") == 1);
}
