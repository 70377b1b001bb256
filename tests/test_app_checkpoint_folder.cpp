// The checkpoint folder of a run (app/checkpoint_folder.h): what interrupted saves leave is removed by
// the writer and said in one line; a checkpoint's training state is range-checked, and a run
// goes on from the middle of an epoch only when it splits the data the same way.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "app/checkpoint_folder.h"
#include "nn/sgd.h"
#include "tests/nn_fixtures.h"
#include "tests/temp_dir.h"

using namespace cutrain;
namespace fs = std::filesystem;

namespace {

// The pid of a process that has exited and been reaped.
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

void touch(const std::string& path) { std::ofstream(path) << "x"; }

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TrainingState state_at(int epoch, int64_t batch, int world_size, int batch_size, uint64_t seed = 0) {
  TrainingState s;
  s.epoch = epoch;
  s.batch = batch;
  s.global_step = 100;
  s.world_size = world_size;
  s.batch_size = batch_size;
  s.seed = seed;
  return s;
}

// The state after global step `step` of a run of `run_id`, at an epoch's end.
TrainingState at_step(int64_t step, std::string run_id = "") {
  TrainingState s = state_at(1, 0, 1, 4);
  s.global_step = step;
  s.run_id = std::move(run_id);
  return s;
}

std::string resume_error(const TrainingState& saved, const TrainingState& run, int64_t steps_per_epoch) {
  try {
    resume_state(saved, run, steps_per_epoch, "c.safetensors");
  } catch (const ResumeMismatch& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("the writer removes what interrupted saves left, and says so in one line", "[app]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  const std::string dead = std::to_string(dead_pid()), alive = std::to_string(::getppid());
  touch(dir / "checkpoint-00000008.safetensors");  // a complete checkpoint
  touch(dir / "checkpoint-00000008.optim.safetensors");
  touch(dir / ("checkpoint-00000016.safetensors.tmp." + dead));        // a kill during a save
  touch(dir / ("checkpoint-00000016.optim.safetensors.tmp." + alive));  // a save still going on
  touch(dir / "checkpoint-00000024.safetensors");                      // full disk before the optim file
  touch(dir / "checkpoint-00000004.optim.safetensors");                // a prune cut short
  touch(dir / "notes.txt");                                            // not ours

  CheckpointFolder reader(d, 3);  // another rank: looks, touches nothing
  CHECK(names_in(d).size() == 7);
  CHECK(reader.complete_checkpoints() == std::vector<std::string>{dir / "checkpoint-00000008.safetensors"});

  std::vector<std::string> said;
  CheckpointFolder writer(d, 3, [&](const std::string& line) { said.push_back(line); });
  CHECK(names_in(d) == std::vector<std::string>{".cutrain.lock", "checkpoint-00000008.optim.safetensors",
                                                "checkpoint-00000008.safetensors",
                                                "checkpoint-00000016.optim.safetensors.tmp." + alive, "notes.txt"});
  REQUIRE(said.size() == 1);
  CHECK(said[0] == "checkpoints: removed 3 file(s) that interrupted saves left in " + d +
                       ": checkpoint-00000004.optim.safetensors (no model file), checkpoint-00000016.safetensors.tmp." +
                       dead + " (writer " + dead + " gone), checkpoint-00000024.safetensors (no optim file)");

  // Pruning after a save tidies too; this process's own temporary files are never in flight then.
  Context ctx({});
  ResNet18 model(ctx, test::tiny_resnet());
  SGD sgd(ctx, model.params(), SgdConfig{});
  touch(dir / ("checkpoint-00000030.safetensors.tmp." + std::to_string(::getpid())));
  said.clear();
  writer.save(model, sgd, state_at(1, 0, 1, 4));
  CHECK(names_in(d) == std::vector<std::string>{".cutrain.lock", "checkpoint-00000008.optim.safetensors",
                                                "checkpoint-00000008.safetensors",
                                                "checkpoint-00000016.optim.safetensors.tmp." + alive,
                                                "checkpoint-00000100.optim.safetensors",
                                                "checkpoint-00000100.safetensors", "checkpoint-last.safetensors",
                                                "notes.txt"});
  REQUIRE(said.size() == 1);
  CHECK_THAT(said[0], Catch::Contains("removed 1 file(s)") && Catch::Contains("(writer " + std::to_string(::getpid())));
}

TEST_CASE("the folder touches only its own file names and takes the newest by the step recorded inside", "[app]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  Context ctx({});
  ResNet18 model(ctx, test::tiny_resnet());
  SGD sgd(ctx, model.params(), SgdConfig{});
  std::string four, eight;
  {
    CheckpointFolder writer(d, 2, [](const std::string&) {});
    four = writer.save(model, sgd, at_step(4));
    eight = writer.save(model, sgd, at_step(8));
  }
  // A user's copies: a named pair, a model file alone, and a numbered copy of step 4's pair.
  for (const char* copy : {"checkpoint-final", "checkpoint-99999999"}) {
    fs::copy_file(four, dir / (std::string(copy) + ".safetensors"));
    fs::copy_file(optim_path_for(four), dir / (std::string(copy) + ".optim.safetensors"));
  }
  fs::copy_file(eight, dir / "checkpoint-best.safetensors");

  // Before, checkpoint-final sorted first by name and checkpoint-best was removed as half a save.
  CheckpointFolder reopened(d, 2, [](const std::string& line) { FAIL("nothing to tidy, but: " << line); });
  CHECK(reopened.complete_checkpoints() ==
        std::vector<std::string>{eight, dir / "checkpoint-99999999.safetensors", four});
  const std::string twelve = reopened.save(model, sgd, at_step(12));
  CHECK(names_in(d) == std::vector<std::string>{".cutrain.lock", "checkpoint-00000008.optim.safetensors",
                                                "checkpoint-00000008.safetensors",
                                                "checkpoint-00000012.optim.safetensors", "checkpoint-00000012.safetensors",
                                                "checkpoint-best.safetensors", "checkpoint-final.optim.safetensors",
                                                "checkpoint-final.safetensors", "checkpoint-last.safetensors"});
  CHECK(reopened.complete_checkpoints().front() == twelve);
}

TEST_CASE("one writer holds the folder and a model file loads only with its own optim file", "[app]") {
  test::TempDir dir;
  const std::string a = dir / "a", b = dir / "b";
  Context ctx({});
  ResNet18 model(ctx, test::tiny_resnet());
  SGD sgd(ctx, model.params(), SgdConfig{});
  TrainingState state = state_at(1, 0, 1, 4);
  state.run_id = "0123456789abcdef";
  std::string path;
  {
    CheckpointFolder writer(a, 3, [](const std::string&) {});
    CheckpointFolder reader(a, 3);  // another rank only reads: no lock
    try {
      CheckpointFolder second(a, 3, [](const std::string&) {});
      FAIL("a second writer was let in");
    } catch (const std::runtime_error& e) {
      CHECK_THAT(e.what(), Catch::StartsWith("--save " + a + " is in use by another run (pid " +
                                             std::to_string(::getpid()) + " on ") &&
                               Catch::EndsWith(" UTC): wait for it to end, or choose another --save folder"));
    }
    path = writer.save(model, sgd, state);
  }
  CheckpointFolder after(a, 3, [](const std::string&) {});  // the lock went with its holder
  CHECK(load_checkpoint(path, model, sgd).run_id == "0123456789abcdef");

  // Another run's optim file of the same step beside this model file: two runs' halves.
  state.run_id = "fedcba9876543210";
  CheckpointFolder other(b, 3, [](const std::string&) {});
  fs::copy_file(optim_path_for(other.save(model, sgd, state)), optim_path_for(path), fs::copy_options::overwrite_existing);
  try {
    load_checkpoint(path, model, sgd);
    FAIL("two runs' halves loaded as one checkpoint");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == path + ": not one checkpoint with its optim file: the model file is of run "
                                          "0123456789abcdef at step 100, the optim file of run fedcba9876543210 at "
                                          "step 100");
  }
}

TEST_CASE("a checkpoint's training state is range-checked before it is used", "[app]") {
  const CheckpointMetadata good = state_at(2, 3, 1, 32, 18446744073709551615ull).to_metadata();
  const TrainingState back = TrainingState::from_metadata(good, "o.safetensors");
  CHECK(back.seed == 18446744073709551615ull);  // a full 64-bit seed round-trips
  CHECK(back.epoch == 2);
  CHECK(back.batch == 3);
  auto error = [&](const std::string& key, const std::string& value) {
    CheckpointMetadata m = good;
    m[key] = value;
    try {
      TrainingState::from_metadata(m, "o.safetensors");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error("epoch", "-1000") == "o.safetensors: training state 'epoch' is '-1000', not an integer in [0, 100000]");
  CHECK_THAT(error("epoch", "2147483648"), Catch::Contains("'epoch' is '2147483648', not an integer"));
  CHECK_THAT(error("epoch", "-2147483649"), Catch::Contains("'epoch' is '-2147483649', not an integer"));
  CHECK_THAT(error("batch", "-1"), Catch::Contains("'batch' is '-1', not an integer in [0, "));
  CHECK_THAT(error("global_step", "0x10"), Catch::Contains("'global_step' is '0x10'"));
  CHECK_THAT(error("seed", "-1"), Catch::Contains("'seed' is '-1'"));
  CHECK_THAT(error("world_size", "0"), Catch::Contains("'world_size' is '0', not an integer in [1, "));
  CHECK_THAT(error("batch_size", "-5"), Catch::Contains("'batch_size' is '-5'"));
}

TEST_CASE("a run goes on from the middle of an epoch only with the same seed, world size and batch", "[app]") {
  // Mid-epoch (after batch 5): the position counts batches of this very split of the data.
  const TrainingState mid = state_at(3, 5, 1, 32, 7);
  CHECK(resume_error(mid, state_at(0, 0, 2, 64, 7), 10) ==
        "c.safetensors: saved in the middle of epoch 4 (after batch 5) by 1 rank(s) at batch size 32 and seed 7; "
        "this run has 2 at 64 and seed 7: resume it with the same, or from a checkpoint saved at the end of an epoch");
  CHECK_THAT(resume_error(mid, state_at(0, 0, 1, 32, 8), 10), Catch::Contains("this run has 1 at 32 and seed 8"));
  CHECK_THAT(resume_error(mid, state_at(0, 0, 1, 32, 7), 5),
             Catch::Contains("saved after batch 5 of an epoch, but an epoch of this data has 5 batches"));
  TrainingState s = resume_state(mid, state_at(0, 0, 1, 32, 7), 10, "c.safetensors");
  CHECK(s.epoch == 3);
  CHECK(s.batch == 5);
  CHECK(s.global_step == 100);

  // At an epoch's end any split goes on; the state then records this run's own.
  s = resume_state(state_at(3, 0, 1, 32, 7), state_at(0, 0, 2, 64, 9), 10, "c.safetensors");
  CHECK(s.epoch == 3);
  CHECK(s.batch == 0);
  CHECK(s.world_size == 2);
  CHECK(s.batch_size == 64);
  CHECK(s.seed == 9);
}

TEST_CASE("a checkpoint that would not load is not written, nothing is pruned for it, and the line names one that loads",
          "[app]") {
  // Note [Checkpoints that load]: a diverging run (--lr 20, say) had written NaN weights or an
  // overflowed running variance, and pruned its good checkpoints for them.
  test::TempDir dir;
  Context ctx({});
  ResNet18 model(ctx, test::tiny_resnet());
  SGD sgd(ctx, model.params(), SgdConfig{});
  CheckpointFolder folder(dir.path().string(), 2, [](const std::string&) {});
  TrainingState state = state_at(1, 0, 1, 4);
  state.run_id = "0123456789abcdef";
  std::string last_good;
  for (int64_t step : {1, 2}) {
    state.global_step = step;
    last_good = folder.save(model, sgd, state);
  }
  const std::vector<std::string> before = names_in(dir.path().string());
  auto unfit_save = [&](const char* what) {
    state.global_step += 1;
    INFO(what);
    try {
      folder.save(model, sgd, state);
      FAIL("written");
    } catch (const UnfitCheckpoint& e) {
      return std::string(e.what());
    }
    return std::string();
  };

  std::vector<float> buffers = read_floats(model.params().buffer_values());
  const BufferEntry& running_var = model.params().buffers()[1];  // bn1's, after its mean
  REQUIRE(running_var.name == "bn1.running_var");
  buffers[size_t(running_var.offset)] = INFINITY;  // the overflow that a finite loss hides
  copy_from_host(buffers.data(), model.params().buffer_values());
  CHECK(unfit_save("an overflowed running variance") ==
        (dir / "checkpoint-00000003.safetensors") +
            ": not written: NaN or infinite values in bn1.running_var (1); stopping; last good checkpoint: " + last_good);
  CHECK(names_in(dir.path().string()) == before);
  buffers[size_t(running_var.offset)] = 1.0f;
  copy_from_host(buffers.data(), model.params().buffer_values());

  std::vector<float> momentum = read_floats(sgd.momentum());
  momentum[0] = std::nanf("");
  copy_from_host(momentum.data(), sgd.momentum());
  CHECK_THAT(unfit_save("a NaN momentum"),
             Catch::StartsWith((dir / "checkpoint-00000004.optim.safetensors") + ": not written: NaN or infinite values in momentum_buffer.") &&
                 Catch::EndsWith("; stopping; last good checkpoint: " + last_good));
  CHECK(names_in(dir.path().string()) == before);  // the model file written before it is gone again
  CHECK_NOTHROW(load_checkpoint(last_good, model, sgd));
}

TEST_CASE("checkpoint-last names the newest checkpoint and checkpoint-best the most accurate, which pruning keeps",
          "[app]") {
  // Note [The last and the best checkpoint] in app/checkpoint_folder.h.
  test::TempDir dir;
  const std::string d = dir.path().string();
  Context ctx({});
  ResNet18 model(ctx, test::tiny_resnet());
  SGD sgd(ctx, model.params(), SgdConfig{});
  const std::string last = dir / "checkpoint-last.safetensors", best = dir / "checkpoint-best.safetensors";
  std::string two, three;
  {
    CheckpointFolder writer(d, 1, [](const std::string& line) { FAIL("nothing to say, but: " << line); });
    writer.save(model, sgd, at_step(1, "one-run"), 0.5);
    two = writer.save(model, sgd, at_step(2, "one-run"), 0.9);
    three = writer.save(model, sgd, at_step(3, "one-run"), 0.7);
    writer.save(model, sgd, at_step(4, "one-run"));  // no evaluation right before it
    CHECK(writer.complete_checkpoints().front() == dir / "checkpoint-00000004.safetensors");  // links are not counted
  }
  CHECK(names_in(d) == std::vector<std::string>{".cutrain.lock", "checkpoint-00000002.optim.safetensors",
                                                "checkpoint-00000002.safetensors",
                                                "checkpoint-00000004.optim.safetensors", "checkpoint-00000004.safetensors",
                                                "checkpoint-best.safetensors", "checkpoint-last.safetensors"});
  CHECK(fs::read_symlink(last) == "checkpoint-00000004.safetensors");  // relative: the folder may move
  CHECK(fs::read_symlink(best) == "checkpoint-00000002.safetensors");
  CHECK(optim_path_for(best) == optim_path_for(two));
  CHECK(load_checkpoint(best, model, sgd).global_step == 2);
  CHECK(load_checkpoint(last, model, sgd).global_step == 4);

  // A resumed run compares with the accuracy the best file records; once it is beaten, its file goes.
  CheckpointFolder resumed(d, 1, [](const std::string& line) { FAIL("nothing to say, but: " << line); });
  resumed.save(model, sgd, at_step(5, "one-run"), 0.8);
  CHECK(fs::read_symlink(best) == "checkpoint-00000002.safetensors");
  resumed.save(model, sgd, at_step(6, "one-run"), 0.95);
  CHECK(fs::read_symlink(best) == "checkpoint-00000006.safetensors");
  CHECK(!fs::exists(two));
  CHECK(!fs::exists(three));
}

TEST_CASE("a user's own file named checkpoint-last or checkpoint-best is left alone, and said", "[app]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  Context ctx({});
  ResNet18 model(ctx, test::tiny_resnet());
  SGD sgd(ctx, model.params(), SgdConfig{});
  touch(dir / "checkpoint-last.safetensors");
  std::vector<std::string> said;
  CheckpointFolder writer(d, 3, [&](const std::string& line) { said.push_back(line); });
  TrainingState s = state_at(1, 0, 1, 4);
  writer.save(model, sgd, s, 0.5);
  CHECK(!fs::is_symlink(dir / "checkpoint-last.safetensors"));
  CHECK(fs::read_symlink(dir / "checkpoint-best.safetensors") == "checkpoint-00000100.safetensors");
  REQUIRE(said.size() == 1);
  CHECK(said[0] == "cutrain: warning: checkpoints: " + dir / "checkpoint-last.safetensors" +
                       " is a file, not cutrain's link: it stays");
}
