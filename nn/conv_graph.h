// conv_graph.h: one pass of a 2-D convolution (forward, backward-data or backward-filter) as an
// operation graph of cuDNN's backend API (cudnn_graph.h), with one operation and no fusion: the
// tensors x [N,C,H,W], w [K,C,R,S] and y [N,K,P,Q], all NHWC in memory (the filter KRSC), of the
// activation dtype and computed in fp32, cross-correlation with the shape's stride and padding.
//
// A ConvGraph is built and finalized once. Its heuristics rank the engine configurations that can
// run it, and build_plan() finalizes an execution plan for one of them. A plan runs with a variant
// pack, which names the device pointers of x, w, y and the workspace; since cutrain's pointers never
// move, a layer finalizes each pack once and a step is one cudnnBackendExecute per pass, which
// allocates nothing and can be captured.
//
// Note [Engine filter]
// ~~~~~~~~~~~~~~~~~~~~
// The configurations come from cuDNN's heuristics in mode A, best first, followed by those of mode
// FALLBACK that mode A did not list, as cuDNN's developer guide advises ("Heuristics": FALLBACK is
// the functional backstop). Like PyTorch's Conv_v8.cpp, cutrain drops every configuration whose
// engine carries the numerical note DOWN_CONVERT_INPUTS (it would compute in a narrower type than
// the tensors'), NONDETERMINISTIC under --deterministic, and TENSOR_CORE in fp32 without TF32
// (tensor cores round fp32 inputs to TF32). A configuration must also build into a plan whose
// workspace fits kMaxWorkspaceBytes; that is checked when its plan is built.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/conv2d_cpu.h"
#include "nn/context.h"
#include "nn/cudnn_backend.h"

namespace cutrain {

// The passes, with backward-data's beta folded in: it is an attribute of the graph, and a layer
// whose input gradient also receives a residual branch's adds into it (beta = 1).
enum class ConvPass { forward, backward_data, backward_data_accumulate, backward_filter };
// "forward", "backward-data", "backward-data-accumulate", "backward-filter".
const char* conv_pass_name(ConvPass pass);

// A workspace beyond this buys little speed for ResNet-18's shapes and would crowd out the batch.
inline constexpr size_t kMaxWorkspaceBytes = size_t(512) << 20;

// An engine configuration: the engine's global index and its knob choices, which together
// name it for a graph (what --cudnn-benchmark's disk cache keeps).
struct EngineConfig {
  int64_t engine = -1;                             // CUDNN_ATTR_ENGINE_GLOBAL_INDEX
  std::vector<std::pair<int64_t, int64_t>> knobs;  // (cudnnBackendKnobType_t, value), in cuDNN's order
  bool operator==(const EngineConfig&) const = default;
};
// "engine 12", or "engine 12 (knobs 2=1 14=3)" with knobs, for log lines.
std::string describe(const EngineConfig& config);

// A finalized execution plan and the descriptors it was built from. It refers to its graph, which
// must outlive it.
class ConvPlan {
 public:
  const EngineConfig& config() const { return config_; }
  size_t workspace() const { return workspace_; }  // bytes
  cudnnBackendDescriptor_t get() const { return plan_.get(); }

 private:
  friend class ConvGraph;
  ConvPlan(EngineConfig config, BackendDescriptor engine, std::vector<BackendDescriptor> knobs,
           BackendDescriptor engine_config, BackendDescriptor plan);
  EngineConfig config_;
  BackendDescriptor engine_;
  std::vector<BackendDescriptor> knobs_;
  BackendDescriptor engine_config_;
  BackendDescriptor plan_;
  size_t workspace_ = 0;
};

// The device pointers of one execution: x, w and y as the graph names them (the pass reads two of
// them and writes the third: dx is x, dw is w, dy is y), and the workspace.
struct ConvPointers {
  const void* x = nullptr;
  const void* w = nullptr;
  const void* y = nullptr;
  void* workspace = nullptr;
};

class ConvGraph {
 public:
  ConvGraph(ConvPass pass, const ConvShape& shape, DType dtype);
  ConvGraph(const ConvGraph&) = delete;
  ConvGraph& operator=(const ConvGraph&) = delete;

  ConvPass pass() const { return pass_; }

  // The configurations of Note [Engine filter], best first; empty when cuDNN has none.
  std::vector<EngineConfig> usable_configs(const Context& ctx) const;
  // The plan for `config`, or null when cuDNN declines to build it.
  std::unique_ptr<ConvPlan> build_plan(const EngineConfig& config) const;

  // A finalized variant pack for these pointers. Plans of any graph of the same pass and shape run
  // with it.
  static BackendDescriptor variant_pack(const ConvPointers& pointers);

 private:
  ConvPass pass_;
  BackendDescriptor x_, w_, y_, convolution_, operation_, graph_;
};

}  // namespace cutrain
