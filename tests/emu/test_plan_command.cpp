// `cutrain bench-step --plan`, recorded by the emulated device (Note [Record-only device] in
// emu/runtime.h): the step's inventory scales as the arithmetic says it must with batch,
// width and world size; its streams fork and join as Note [Side stream] and Note [The step] put
// them; its figures for the full-size step are the ones docs/emulated-gpu.md quotes; it prints
// the whole step's bytes beside the custom kernels'; and the binary's last line is the one
// scripts/gpu-check.sh reads. tests/emu/test_plan_against_graph.cpp
// holds it against a captured graph. The GPU build has no recording device
// (tests/test_app_step_plan.cpp).
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <map>
#include <regex>
#include <string>
#include <vector>

#include "emu/plan/step_plan.h"
#include "nn/context.h"
#include "nn/resnet.h"
#include "tests/gpu.h"
#include "tests/process.h"

using namespace cutrain;
using Kind = RecordedOp::Kind;

namespace {

StepPlanConfig small(int batch, int width, int world_size = 1, const char* precision = "bf16") {
  StepPlanConfig c;
  c.batch_size = batch;
  c.width = width;
  c.world_size = world_size;
  c.precision = precision;
  return c;
}

int64_t bytes_of(const Recorder& plan, const std::string& name) {
  int64_t bytes = 0;
  for (const RecordedOp& op : plan.ops())
    if (op.name == name) bytes += op.bytes.read + op.bytes.written;
  return bytes;
}

// The optimizer's kernels work on the parameters, whose number no batch changes.
bool parameter_sized(const RecordedOp& op) {
  return op.name == "sgd_update_kernel" || op.name == "lr_schedule_step_kernel" || op.name == "copy_rows_kernel";
}

int count(const Recorder& plan, const std::string& name, const std::string& stream = "") {
  int n = 0;
  for (const RecordedOp& op : plan.ops())
    n += op.name == name && (stream.empty() || plan.stream_name(op.stream) == stream);
  return n;
}

// What `bench-step --plan` prints for the full-size step, CIFAR stem, bf16, with `extra` flags.
std::string full_size_plan(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv = {test::binary("cutrain"), "bench-step", "--plan", "--stem", "cifar", "--precision",
                                   "bf16"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  const auto r = test::run(argv);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return r.output;
}

// The whole step's line of such a plan: the line before its last, "plan: ...".
std::string whole_step_line(const std::string& plan) {
  const size_t last = plan.rfind("plan: ");
  const size_t line = plan.rfind("  whole step: ", last);
  REQUIRE(line != std::string::npos);
  return plan.substr(line, last - line);
}

}  // namespace

TEST_CASE("the step's plan scales with the batch: FLOPs in proportion, bytes in step, nodes not at all",
          CUTRAIN_GPU_TAG) {
  // Batches B, 2B, 3B: the same operations; a convolution's FLOPs are proportional to the batch;
  // every operation's bytes are an activation part proportional to it plus a part that is not
  // (per-channel statistics, parameters), so they grow by the same amount from B to 2B as from 2B
  // to 3B -- and not at all for the optimizer's, which only sees parameters.
  const Recorder a = plan_step(small(16, 8)), b = plan_step(small(32, 8)), c = plan_step(small(48, 8));
  REQUIRE(a.ops().size() == b.ops().size());
  REQUIRE(a.ops().size() == c.ops().size());
  double activation_bytes = 0;
  for (size_t i = 0; i < a.ops().size(); ++i) {
    const RecordedOp &x = a.ops()[i], &y = b.ops()[i], &z = c.ops()[i];
    INFO(i << ": " << x.name << " " << x.detail);
    REQUIRE(x.name == y.name);
    REQUIRE(x.name == z.name);
    CHECK(y.flops == 2 * x.flops);
    CHECK(z.flops == 3 * x.flops);
    const int64_t fx = x.bytes.read + x.bytes.written, fy = y.bytes.read + y.bytes.written,
                  fz = z.bytes.read + z.bytes.written;
    CHECK(fz - fy == fy - fx);
    if (parameter_sized(x)) CHECK(fy == fx);
    if (x.kind == Kind::kernel) activation_bytes += double(fy - fx);
  }
  CHECK(activation_bytes > 0);
  CHECK(summarize(a.ops(), GpuPeak{}).graph_nodes == summarize(b.ops(), GpuPeak{}).graph_nodes);
}

TEST_CASE("the step's plan scales with the width: a convolution's FLOPs by four, the stem's by two",
          CUTRAIN_GPU_TAG) {
  const Recorder a = plan_step(small(16, 16)), b = plan_step(small(16, 32));
  REQUIRE(a.ops().size() == b.ops().size());
  int stems = 0;
  for (size_t i = 0; i < a.ops().size(); ++i) {
    const RecordedOp &x = a.ops()[i], &y = b.ops()[i];
    if (!x.name.starts_with("cudnnConvolution")) continue;
    INFO(x.name << " " << x.detail);
    const bool stem = x.detail.find(" C=8 ") != std::string::npos;  // the 8 input channels of the GPU's image
    stems += stem;
    CHECK(y.flops == (stem ? 2 : 4) * x.flops);
  }
  CHECK(stems == 2);  // forward and weight gradient: the image needs no gradient
  // The optimizer's bytes follow the parameters, almost all of them convolution weights: nearly
  // four times as many.
  const double ratio = double(bytes_of(b, "sgd_update_kernel")) / double(bytes_of(a, "sgd_update_kernel"));
  CHECK(ratio > 3.8);
  CHECK(ratio < 4.0);
}

TEST_CASE("the step's plan with several ranks adds the collectives and the gathers, and nothing else",
          CUTRAIN_GPU_TAG) {
  const char* precision = GENERATE("bf16", "fp32");
  INFO(precision);
  const Recorder one = plan_step(small(16, 8, 1, precision)), two = plan_step(small(16, 8, 2, precision)),
                 eight = plan_step(small(16, 8, 8, precision));
  const PlanSummary s1 = summarize(one.ops(), GpuPeak{}), s2 = summarize(two.ops(), GpuPeak{}),
                    s8 = summarize(eight.ops(), GpuPeak{});
  CHECK(s1.collectives == 0);
  const int buckets = count(two, "sgd_update_kernel");
  CHECK(buckets == count(one, "sgd_update_kernel"));
  CHECK(s2.collectives == buckets + 1);  // each bucket's all-reduce, and the BN buffers' broadcast
  // One gather per bucket that holds a gradient cuDNN wrote elsewhere: every bucket in bf16, the
  // stem's alone in fp32; none with one rank, which reads them where they are.
  CHECK(count(one, "copy_rows_kernel") == 0);
  CHECK(count(two, "copy_rows_kernel") == (std::string(precision) == "bf16" ? buckets : 1));
  CHECK(s2.graph_nodes == s1.graph_nodes + s2.collectives + count(two, "copy_rows_kernel"));
  CHECK(s2.conv_flops == s1.conv_flops);
  // Each all-reduce averages its bucket's span of the flat fp32 gradients: all of them in all.
  Context cpu({});
  ResNetConfig config;
  config.width = 8;
  config.batch_size = 2;
  const ResNet18 model(cpu, config);  // the same parameters, laid out as on the GPU
  int64_t reduced = 0;
  for (const RecordedOp& op : two.ops())
    if (op.name == "ncclAllReduce") reduced += op.bytes.read;
  CHECK(reduced == model.params().numel() * int64_t(sizeof(float)));
  // A rank of 8 plans as a rank of 2: what one rank launches does not depend on how many there are.
  CHECK(s8.graph_nodes == s2.graph_nodes);
  CHECK(s8.custom_bytes == s2.custom_bytes);
  CHECK(count(eight, "ncclAllReduce") == count(two, "ncclAllReduce"));
}

TEST_CASE("the step's plan: weight gradients and the downsample branch on the side stream, joined in time",
          CUTRAIN_GPU_TAG) {
  const int world_size = GENERATE(1, 2);
  INFO("world size " << world_size);
  const Recorder plan = plan_step(small(16, 8, world_size));
  // ResNet-18: 20 convolutions, 3 of them downsample branches; the stem's input needs no gradient.
  CHECK(count(plan, "cudnnConvolutionForward", "side") == 3);
  CHECK(count(plan, "cudnnConvolutionForward", "main") == 17);
  CHECK(count(plan, "cudnnConvolutionBackwardFilter", "side") == 19);
  CHECK(count(plan, "cudnnConvolutionBackwardFilter", "main") == 1);
  CHECK(count(plan, "cudnnConvolutionBackwardData", "main") == 19);
  CHECK(count(plan, "lr_schedule_step_kernel", "main") == 1);
  // SGD once per bucket during backward: on the side stream, or behind the bucket's all-reduce.
  const int buckets = count(plan, "sgd_update_kernel");
  CHECK(buckets >= 1);
  CHECK(count(plan, "sgd_update_kernel", world_size == 1 ? "side" : "comm") == buckets);
  CHECK(count(plan, "ncclAllReduce") == (world_size == 1 ? 0 : buckets));
  const PlanSummary summary = summarize(plan.ops(), GpuPeak{});
  CHECK(summary.host_waits == 0);  // the host never waits inside a step
  CHECK(summary.memsets == 0);     // nothing is zeroed: batch norm's partials are written before they are read
  // Batch norm: one launch forward and one backward per layer (20 in ResNet-18), all on the main
  // stream: each cooperative grid wants every multiprocessor, so two must never run at once.
  CHECK(count(plan, "bn_forward_train_kernel", "main") == 20);
  CHECK(count(plan, "bn_backward_kernel", "main") == 20);
  // Work on a stream may start only once that stream has waited for the main stream (what it
  // reads is the main stream's), and the main stream waits for every other before the step ends
  // (else a graph capture fails, and the next step could overtake this one).
  // And each weight gradient is joined before the next one starts: before the main stream can
  // write over the dy it reads (activation gradients share memory) and before it is reported.
  std::map<std::string, bool> forked, pending;
  bool unjoined_weight_gradient = false;
  for (const RecordedOp& op : plan.ops()) {
    if (op.name == "cudnnConvolutionBackwardFilter" && plan.stream_name(op.stream) == "side") {
      CHECK_FALSE(unjoined_weight_gradient);
      unjoined_weight_gradient = true;
    }
    if (op.kind == Kind::wait && plan.stream_name(op.stream) == "main" && plan.stream_name(op.waits_for) == "side")
      unjoined_weight_gradient = false;
    const std::string stream = plan.stream_name(op.stream);
    if (op.kind == Kind::wait) {
      const std::string on = plan.stream_name(op.waits_for);
      if (on == "main") forked[stream] = true;
      if (stream == "main") pending[on] = false;
      continue;
    }
    if (stream == "main") continue;
    INFO(op.name << " on the " << stream << " stream");
    CHECK(forked[stream]);
    pending[stream] = true;
  }
  for (const auto& [stream, unjoined] : pending) {
    INFO("the " << stream << " stream");
    CHECK_FALSE(unjoined);
  }
}

TEST_CASE("the step's plan on one stream: the same operations, all on the main stream, with no waits",
          CUTRAIN_GPU_TAG) {
  StepPlanConfig one_stream = small(16, 8);
  one_stream.streams = 1;
  const Recorder two = plan_step(small(16, 8)), one = plan_step(one_stream);
  const PlanSummary a = summarize(two.ops(), GpuPeak{}), b = summarize(one.ops(), GpuPeak{});
  CHECK(b.graph_nodes == a.graph_nodes);
  CHECK(b.custom_bytes == a.custom_bytes);
  CHECK(b.conv_flops == a.conv_flops);
  CHECK(a.waits > 0);
  CHECK(b.waits == 0);
  for (const RecordedOp& op : one.ops()) CHECK(one.stream_name(op.stream) == "main");
}

TEST_CASE("bench-step --plan prints the line scripts read, without a GPU", CUTRAIN_GPU_TAG) {
  auto r = test::run({test::binary("cutrain"), "bench-step", "--plan", "--precision", "bf16", "--batch-size", "32",
                      "--width", "16", "--world-size", "2"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const std::string last = r.output.substr(r.output.rfind("plan: "));
  CHECK(std::regex_match(last, std::regex("plan: [0-9]+ graph nodes, [0-9]+ memsets, [0-9]+\\.[0-9]{2} GB moved by "
                                          "custom kernels, [0-9]+\\.[0-9] GFLOP in convolutions, estimated "
                                          "[0-9]+\\.[0-9]{2} ms/step, a lower bound \\(at most [0-9]+ images/s "
                                          "per GPU\\)\n")));
  // The collectives' row has a time from the link, not 0.000 ms.
  std::smatch m;
  REQUIRE(std::regex_search(r.output, m,
                            std::regex("\n    ncclAllReduce +[0-9]+ +[0-9.]+ +[0-9.]+ +([0-9.]+)  link\n")));
  CHECK(std::stod(m[1]) > 0.001);
}

// The figures of the full-size step (batch 256, width 64), as the planning recorder of kernels/ and
// nn/ gave them before the emulated device recorded the step, and as docs/emulated-gpu.md quotes
// the first. Batch norm's rows hold the record-only device to an H200 (its launches keep as many
// rows in shared memory as an H200's 132 multiprocessors hold).
TEST_CASE("bench-step --plan keeps its figures for the full-size step", CUTRAIN_GPU_TAG) {
  struct Expected {
    std::vector<std::string> flags;
    const char* counts;
    const char* last;
  };
  const Expected expected[] = {
      {{"--stem", "cifar", "--precision", "bf16"},
       "  48 custom kernel launches, 64 library calls (one graph node each; cuDNN may add more), 0 collectives, "
       "0 memsets, 0 copies, 48 waits between streams, 0 host waits\n",
       "plan: 112 graph nodes, 0 memsets, 2.39 GB moved by custom kernels, 855.2 GFLOP in convolutions, estimated "
       "1.46 ms/step, a lower bound (at most 175834 images/s per GPU)\n"},
      {{"--stem", "cifar", "--precision", "bf16", "--world-size", "2"},
       "  51 custom kernel launches, 64 library calls (one graph node each; cuDNN may add more), 4 collectives, "
       "0 memsets, 0 copies, 50 waits between streams, 0 host waits\n",
       "plan: 119 graph nodes, 0 memsets, 2.48 GB moved by custom kernels, 855.2 GFLOP in convolutions, estimated "
       "1.47 ms/step, a lower bound (at most 173616 images/s per GPU)\n"},
      {{"--stem", "imagenet", "--precision", "fp32"},
       "  49 custom kernel launches, 64 library calls (one graph node each; cuDNN may add more), 0 collectives, "
       "0 memsets, 0 copies, 48 waits between streams, 0 host waits\n",
       "plan: 113 graph nodes, 0 memsets, 0.59 GB moved by custom kernels, 59.7 GFLOP in convolutions, estimated "
       "1.08 ms/step, a lower bound (at most 237275 images/s per GPU)\n"},
  };
  for (const Expected& e : expected) {
    std::vector<std::string> command = {test::binary("cutrain"), "bench-step", "--plan"};
    command.insert(command.end(), e.flags.begin(), e.flags.end());
    const auto r = test::run(command);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(r.output.find(e.counts) != std::string::npos);
    CHECK(r.output.substr(r.output.rfind("plan: ")) == e.last);
    if (e.flags[3] != "bf16" || e.flags.size() != 4) continue;
    // One step on one rank in bf16: batch norm's rows, and the libraries' (count, MB read and
    // written, GFLOP, least ms, and what bounds it), whose bytes and FLOPs come from the emulated
    // cuDNN and cuBLAS.
    for (const char* row : {"    bn_forward_train_kernel              20      483.1      334.5                0.171"
                            "  memory\n",
                            "    bn_backward_kernel                   20      902.8      441.8                0.280"
                            "  memory\n",
                            "    cudnnConvolutionForward              20      366.3      314.6      285.9     0.310"
                            "  compute\n",
                            "    cublasGemmEx                          3        0.6        0.3        0.0     0.006"
                            "  launch\n",
                            "    cudnnConvolutionBackwardFilter       20      658.5       22.3      285.9     0.310"
                            "  compute\n",
                            "    cudnnConvolutionBackwardData         19      458.5      339.7      283.5     0.318"
                            "  compute\n",
                            "planned for an H200 (132 multiprocessors, 227 KiB of shared memory each)"}) {
      INFO(row);
      CHECK(r.output.find(row) != std::string::npos);
    }
  }
}


TEST_CASE("bench-step --plan prints the whole step's bytes, convolutions and every library call included, beside "
          "the custom kernels'",
          CUTRAIN_GPU_TAG) {
  // The summary's whole step is every operation's bytes but the collectives', which cross the link.
  const Recorder plan = plan_step(small(16, 8, 2));
  const PlanSummary s = summarize(plan.ops(), GpuPeak{});
  double custom = 0, library = 0, convolutions = 0, others = 0;
  for (const RecordedOp& op : plan.ops()) {
    const double bytes = double(op.bytes.read + op.bytes.written);
    if (op.kind == Kind::kernel) custom += bytes;
    if (op.kind == Kind::library) library += bytes;
    if (op.name.starts_with("cudnnConvolution")) convolutions += bytes;
    if (op.kind == Kind::memset || op.kind == Kind::memcpy) others += bytes;
  }
  CHECK(s.custom_bytes == custom);
  CHECK(s.library_bytes == library);
  CHECK(s.step_bytes == custom + library + others);
  CHECK(convolutions > 0.9 * library);  // the convolutions are most of the libraries' bytes
  CHECK(count(plan, "ncclAllReduce") > 0);
  // The full-size step: the line before the last, with the custom kernels' figure of the last line.
  CHECK(whole_step_line(full_size_plan()) ==
        "  whole step: 4.56 GB moved, 2.39 GB by custom kernels, 2.16 GB by cuDNN and cuBLAS calls, 0.00 GB by "
        "memsets and copies (collectives not counted)\n");
}

// --fusion on (Note [The fused unit bn-relu-conv] in nn/bn_relu_conv.h): each basic block's bn1 computes only its
// statistics, conv2 reads y1 through its prologue, and bn1's backward writes the a1 that conv2's
// weight gradient then reads. The step keeps its nodes and its FLOPs; forward's custom kernels
// move less (no a1, no mask), backward's more (a1 written), and the whole step a little less:
// docs/cudnn-fusion.md section 5 counts why bf16 on sm_90 saves so little.
TEST_CASE("bench-step --plan --fusion on: eight fused units, the same nodes and FLOPs, fewer custom-kernel bytes",
          CUTRAIN_GPU_TAG) {
  StepPlanConfig fused = small(16, 8);
  fused.fusion = true;
  const Recorder off = plan_step(small(16, 8)), on = plan_step(fused);
  const PlanSummary a = summarize(off.ops(), GpuPeak{}), b = summarize(on.ops(), GpuPeak{});
  // ResNet-18 has eight basic blocks, so eight units; the other twelve batch norms stay as they are.
  CHECK(count(off, "bn_forward_statistics_kernel") == 0);
  CHECK(count(on, "bn_forward_statistics_kernel") == 8);
  CHECK(count(on, "bn_backward_recompute_kernel") == 8);
  CHECK(count(on, "cudnnConvolutionForwardFused") == 8);
  CHECK(count(on, "bn_forward_train_kernel") == 12);
  CHECK(count(on, "bn_backward_kernel") == 12);
  CHECK(count(on, "cudnnConvolutionForward") == 12);
  CHECK(b.graph_nodes == a.graph_nodes);
  CHECK(b.conv_flops == a.conv_flops);
  auto custom_bytes = [](const Recorder& plan, const char* phase) {
    double bytes = 0;
    for (const RecordedOp& op : plan.ops())
      if (op.kind == Kind::kernel && op.phase == phase) bytes += double(op.bytes.read + op.bytes.written);
    return bytes;
  };
  CHECK(custom_bytes(on, "forward") < custom_bytes(off, "forward"));
  CHECK(custom_bytes(on, "backward") > custom_bytes(off, "backward"));
  CHECK(b.custom_bytes < a.custom_bytes);
  CHECK(b.step_bytes < a.step_bytes);
  // The full-size step: the whole step's line with --fusion on, beside --fusion off's 4.56 and 2.39 GB
  // above. Issue 33 asked for at most 75% of off's bytes and 1.2 GB of custom kernels; the
  // documented bf16 engines allow neither (docs/cudnn-fusion.md section 5).
  const std::string plan = full_size_plan({"--fusion", "on"});
  INFO(plan);
  CHECK(plan.find("batch norm cooperative, 2 streams, fusion on\n") != std::string::npos);
  CHECK(whole_step_line(plan) ==
        "  whole step: 4.52 GB moved, 2.36 GB by custom kernels, 2.16 GB by cuDNN and cuBLAS calls, 0.00 GB by "
        "memsets and copies (collectives not counted)\n");
}
