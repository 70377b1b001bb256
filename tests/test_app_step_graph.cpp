// StepGraph's decisions (Note [The step's graph] in app/train_step.cpp), with CUDA's graph API stood
// in for: when it captures, replays or falls back; that each call's step reaches the device once;
// and, with several ranks, that the fallback is agreed before any collective has been captured.
#include <catch2/catch.hpp>

#include <deque>
#include <string>
#include <vector>

#include "app/train_step.h"

using namespace cutrain;

namespace {

// What happened, in order: "eager", "rehearsal" (captured without collectives), "captured",
// "launch"; and "collective captured" for each collective issued while capturing.
struct Record {
  std::vector<std::string> events;
  bool capturing = false;
  int device_steps = 0;  // steps that ran on the device: eager ones and launches
};

class FakeCapture final : public GraphCapture {
 public:
  // end() returns the given results in turn ("" is success), then succeeds.
  FakeCapture(Record& record, std::deque<std::string> end_results) : record_(record), results_(std::move(end_results)) {}
  void begin() override { record_.capturing = true; }
  std::string end() override {
    record_.capturing = false;
    if (results_.empty()) return "";
    std::string result = results_.front();
    results_.pop_front();
    return result;
  }
  void launch() override {
    record_.events.push_back("launch");
    ++record_.device_steps;
  }

 private:
  Record& record_;
  std::deque<std::string> results_;
};

// A step with a collective in it, like the trainer's.
StepGraph::Step step_of(Record& record) {
  return [&record](bool rehearsal) {
    if (!record.capturing) {
      record.events.push_back("eager");
      ++record.device_steps;
      return;
    }
    record.events.push_back(rehearsal ? "rehearsal" : "captured");
    if (!rehearsal) record.events.push_back("collective captured");
  };
}

// The other ranks of a run, as StepGraph's agreement sees them: all_reduce_host adds this rank's
// vote (1 for a failed rehearsal) to theirs, and keeps each vote it saw.
class FakeRanks final : public Communicator {
 public:
  explicit FakeRanks(double others_failed) : others_failed_(others_failed) {}
  std::vector<bool> votes;  // true: this rank's rehearsal succeeded

  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  const char* backend() const override { return "fake"; }
  void all_reduce_host(double* data, size_t count, ReduceOp) override {
    REQUIRE(count == 1);
    votes.push_back(data[0] == 0.0);
    data[0] += others_failed_;
  }
  void all_reduce(float*, size_t, ReduceOp) override { FAIL("StepGraph issues no collective of its own"); }
  void broadcast(float*, size_t, int) override { FAIL("StepGraph issues no collective of its own"); }
  void barrier() override { FAIL("StepGraph issues no collective of its own"); }
  void all_reduce_async(float*, size_t, ReduceOp) override { FAIL("StepGraph issues no collective of its own"); }
  void wait_async() override {}

 private:
  double others_failed_;
};

std::unique_ptr<GraphCapture> fake(Record& record, std::deque<std::string> end_results = {}) {
  return std::make_unique<FakeCapture>(record, std::move(end_results));
}

using Events = std::vector<std::string>;

}  // namespace

TEST_CASE("StepGraph runs the warm-up eagerly, captures once, then replays", "[app]") {
  Record r;
  StepGraph graph(fake(r), /*warmup=*/1);
  for (int i = 0; i < 4; ++i) graph.replay(step_of(r));
  CHECK(r.events == Events{"eager", "captured", "collective captured", "launch", "launch", "launch"});
  CHECK(r.device_steps == 4);
  CHECK(graph.status() == "on");
}

TEST_CASE("StepGraph without a capture runs every step eagerly", "[app]") {
  Record r;
  StepGraph graph(nullptr);
  for (int i = 0; i < 3; ++i) graph.replay(step_of(r));
  CHECK(r.events == Events{"eager", "eager", "eager"});
  CHECK(graph.status() == "off");
}

TEST_CASE("A failed capture on one rank runs that step eagerly, once on the device, and every later one", "[app]") {
  Record r;
  StepGraph graph(fake(r, {"cudaStreamEndCapture: operation not permitted when stream is capturing"}));
  for (int i = 0; i < 4; ++i) graph.replay(step_of(r));
  // The second call ran the step's host code twice (captured, then eager): a step counter
  // belongs after run(), as the trainer keeps num_batches_tracked.
  CHECK(r.events == Events{"eager", "captured", "collective captured", "eager", "eager", "eager"});
  CHECK(r.device_steps == 4);
  CHECK(graph.status() == "off (capture failed: cudaStreamEndCapture: operation not permitted when stream is capturing)");
}

TEST_CASE("A step that throws while captured falls back like a failed capture", "[app]") {
  Record r;
  StepGraph graph(fake(r), /*warmup=*/0);
  auto step = step_of(r);
  graph.replay([&](bool rehearsal) {
    step(rehearsal);
    if (r.capturing) throw std::runtime_error("cudaMalloc during capture");
  });
  graph.replay(step);
  CHECK(r.events == Events{"captured", "collective captured", "eager", "eager"});
  CHECK(r.device_steps == 2);
  CHECK(graph.status() == "off (capture failed: cudaMalloc during capture)");
}

TEST_CASE("With several ranks the fallback is agreed before any collective is captured", "[app]") {
  Record r;
  // This rank's rehearsal succeeds; another rank's failed, so the agreement is false.
  FakeRanks ranks(/*others_failed=*/1);
  StepGraph graph(fake(r), 1, &ranks);
  for (int i = 0; i < 3; ++i) graph.replay(step_of(r));
  CHECK(ranks.votes == std::vector<bool>{true});
  CHECK(r.events == Events{"eager", "rehearsal", "eager", "eager"});
  CHECK(r.device_steps == 3);
  CHECK(graph.status() == "off (capture failed: another rank's capture failed)");
}

TEST_CASE("With several ranks a failed rehearsal votes no and falls back", "[app]") {
  Record r;
  FakeRanks ranks(/*others_failed=*/0);
  StepGraph graph(fake(r, {"cudaGraphInstantiate: out of memory"}), 1, &ranks);
  for (int i = 0; i < 3; ++i) graph.replay(step_of(r));
  CHECK(ranks.votes == std::vector<bool>{false});
  CHECK(r.events == Events{"eager", "rehearsal", "eager", "eager"});
  CHECK(graph.status() == "off (capture failed: cudaGraphInstantiate: out of memory)");
}

TEST_CASE("With several ranks agreed, the step is captured with its collectives and replayed", "[app]") {
  Record r;
  FakeRanks ranks(/*others_failed=*/0);
  StepGraph graph(fake(r), 1, &ranks);
  for (int i = 0; i < 3; ++i) graph.replay(step_of(r));
  CHECK(r.events == Events{"eager", "rehearsal", "captured", "collective captured", "launch", "launch"});
  CHECK(r.device_steps == 3);
}

TEST_CASE("With several ranks a capture that fails after the rehearsals agreed stops the run", "[app]") {
  Record r;
  FakeRanks ranks(/*others_failed=*/0);
  StepGraph graph(fake(r, {"", "NCCL: graph capture unsupported"}), 1, &ranks);
  graph.replay(step_of(r));
  CHECK_THROWS_WITH(graph.replay(step_of(r)), Catch::Contains("NCCL: graph capture unsupported") &&
                                               Catch::Contains("collectives may be out of step"));
}
