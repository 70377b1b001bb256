// [gpu] `cutrain train` on one GPU, through the real binary: no store, no NCCL communicator, no
// reducer (NCCL, asked to say everything, says nothing); the step, with a rate that changes every
// step (computed on the device), is replayed as a CUDA graph; the device counted the steps the
// trainer did (a save checks it); and batch norm counts each step once (num_batches_tracked),
// captured or replayed.
#include <catch2/catch.hpp>

#include <cstring>

#include "nn/safetensors.h"
#include "tests/gpu.h"
#include "tests/process.h"

TEST_CASE("One GPU trains without a communicator, replays its step and counts each step once", CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  cutrain::test::TempDir dir;
  const std::string save = (dir.path() / "ckpt").string();
  auto r = cutrain::test::run({"env", "NCCL_DEBUG=INFO", cutrain::test::binary("cutrain"), "train", "--device", "cuda",
                               "--synthetic-train", "1024", "--synthetic-test", "256", "--width", "8", "--batch-size",
                               "32", "--epochs", "1", "--max-steps", "6", "--log-every", "2", "--eval-every", "0",
                               "--lr-schedule", "onecycle", "--save", save});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("gradients: straight to SGD") != std::string::npos);
  CHECK(r.output.find("NCCL INFO") == std::string::npos);
  CHECK(r.output.find("; CUDA graphs on") != std::string::npos);
  const cutrain::SafeTensorsFile file = cutrain::read_safetensors(save + "/checkpoint-00000006.safetensors");
  const cutrain::SafeTensor& tracked = file.tensors.at("layer2.0.bn1.num_batches_tracked");
  int64_t count = 0;
  REQUIRE(tracked.data.size() == sizeof count);
  std::memcpy(&count, tracked.data.data(), sizeof count);
  CHECK(count == 6);
}
