// `bench-step --plan` against the step that runs: the step's inventory, recorded by the record-only
// emulated device (Note [Record-only device] in emu/runtime.h), is op for op what the same
// device records while the step runs, and what a CUDA graph captured from that step holds.
//
// What is compared with the graph, and why: cudaGraphGetNodes counts nodes by type. A kernel node
// is ours when its function is one of the kernels the plan names (cudaGraphKernelNodeGetParams
// gives the function launched, which for our <<<...>>> launches is the kernel's own address);
// those must match kernel by kernel. The other kernel nodes are cuDNN's, cuBLAS's (and NCCL's): a
// library call launches one kernel or more (a split-K reduction, a layout transform), so the graph
// holds at least one per call the plan counts, which is all the plan claims ("one graph node each;
// cuDNN may add more"). A library may add memsets and copies of its own too, so the graph holds at
// least the plan's; ours are counted exactly by the recording above, which every memset and copy
// of ours goes through. Waits between streams are the graph's edges, not nodes.
//
// Batch norm's launches are planned for the record-only device's H200 (kernels/batchnorm.h: how
// many rows each block keeps in shared memory depends on the GPU), so their bytes are compared on
// an H200-sized GPU only: not the emulated device's four multiprocessors. The GPU build has no
// recording device, so the file is the emulated build's only.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <iostream>
#include <map>

#include "emu/plan/step_plan.h"
#include "app/train_step.h"
#include "kernels/base/check.h"
#include "kernels/batchnorm.h"
#include "tests/gpu.h"
#include "tests/step_parity.h"

using namespace cutrain;
using Kind = RecordedOp::Kind;

TEST_CASE("the planned step is the step the GPU runs and captures, node for node", CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  const char* precision = GENERATE("bf16", "fp32");
  INFO(precision);
  StepPlanConfig pc;
  pc.precision = precision;
  pc.batch_size = 32;
  pc.width = 16;
  const Recorder plan = plan_step(pc);
  const PlanSummary planned = summarize(plan.ops(), GpuPeak{});

  ContextOptions options;
  options.device = Device::cuda;
  options.dtype = parse_precision(precision);
  Context ctx(options);
  ResNetConfig config;
  config.batch_size = pc.batch_size;
  config.width = pc.width;
  ResNet18 model(ctx, config);
  TrainStepOptions step_options;  // plan_step's: train's defaults
  step_options.broadcast_buffers = true;
  TrainStep step(model, nullptr, step_options);
  test::fill_same_batch({&model}, 3);
  step.run();  // cuDNN's and cuBLAS's first-use work, outside the capture
  ctx.synchronize();

  Recorder observed;
  cudaGraph_t graph;
  {
    RecordingScope scope(observed);
    emu::RunWhileRecording run;
    CUDA_CHECK(cudaStreamBeginCapture(ctx.main_stream(), cudaStreamCaptureModeThreadLocal));
    step.run();
    CUDA_CHECK(cudaStreamEndCapture(ctx.main_stream(), &graph));
  }

  // The plan is what the step enqueued, in order, on the same streams, with the same figures.
  const BatchNormDevice gpu = bn_device_of_current_gpu();
  const BatchNormDevice h200 = [] {  // the record-only device's
    Recorder probe;
    RecordingScope scope(probe);
    return bn_device_of_current_gpu();
  }();
  const bool planned_gpu = gpu.blocks == h200.blocks && gpu.threads == h200.threads &&
                           gpu.shared_bytes == h200.shared_bytes;
  if (!planned_gpu) std::cout << "not an H200: batch norm's bytes are not compared\n";
  REQUIRE(observed.ops().size() == plan.ops().size());
  for (size_t i = 0; i < plan.ops().size(); ++i) {
    const RecordedOp &want = plan.ops()[i], &got = observed.ops()[i];
    INFO(i << ": " << want.name << " " << want.detail);
    CHECK(got.name == want.name);
    CHECK(int(got.kind) == int(want.kind));
    CHECK(got.function == want.function);
    if (planned_gpu || !want.name.starts_with("bn_")) {
      CHECK(got.bytes.read == want.bytes.read);
      CHECK(got.bytes.written == want.bytes.written);
    }
    CHECK(got.flops == want.flops);
    CHECK((got.stream == ctx.main_stream()) == (plan.stream_name(want.stream) == "main"));
  }

  // The graph's nodes, by type and, for our kernels, by function.
  size_t count = 0;
  CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  std::map<const void*, int> ours_planned, ours_captured;
  for (const RecordedOp& op : plan.ops())
    if (op.kind == Kind::kernel) ++ours_planned[op.function];
  int memsets = 0, copies = 0, library_kernels = 0, others = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    if (type == cudaGraphNodeTypeMemset) {
      ++memsets;
    } else if (type == cudaGraphNodeTypeMemcpy) {
      ++copies;
    } else if (type == cudaGraphNodeTypeKernel) {
      cudaKernelNodeParams params{};
      const bool known = cudaGraphKernelNodeGetParams(node, &params) == cudaSuccess;
      cudaGetLastError();  // a library's node may not tell its function to the runtime API
      if (known && ours_planned.count(params.func)) {
        ++ours_captured[params.func];
      } else {
        ++library_kernels;
      }
    } else {
      ++others;
    }
  }
  std::cout << precision << ": planned " << planned.graph_nodes << " nodes (" << planned.kernels << " ours, "
            << planned.library_calls << " library calls, " << planned.memsets << " memsets); the graph has " << count
            << " (" << library_kernels << " library kernels)\n";
  // Ours exactly; the libraries' at least one kernel node per call, and whatever else they add.
  CHECK(ours_captured == ours_planned);
  CHECK(memsets >= planned.memsets);
  CHECK(copies >= planned.memcpys);
  CHECK(library_kernels >= planned.library_calls);
  const int64_t library_extra = (library_kernels - planned.library_calls) + (memsets - planned.memsets) +
                                (copies - planned.memcpys) + others;
  CHECK(int64_t(count) == planned.graph_nodes + library_extra);
  CUDA_CHECK(cudaGraphDestroy(graph));
}

