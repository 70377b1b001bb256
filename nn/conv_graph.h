// conv_graph.h: one pass of a 2-D convolution (forward, backward-data or backward-filter) as an
// operation graph of cuDNN's backend API (cudnn_graph.h): the tensors x [N,C,H,W], w [K,C,R,S] and
// y [N,K,P,Q], all NHWC in memory (the filter KRSC), of the activation dtype and computed in fp32,
// cross-correlation with the shape's stride and padding. Every pass but one is that one operation.
// The forward of the fused unit bn-relu-conv (Note [The fused unit bn-relu-conv] in
// nn/bn_relu_conv.h) puts a pointwise prologue in front of it, which applies the batch norm before
// the convolution as the convolution reads x:
//
//   z = add(mul(x, scale), shift),  a = relu(z),  y = conv(a, w)
//
// with scale and shift fp32 [1,C,1,1], and z, a and the product virtual FLOAT tensors (alpha 1):
// the pattern "g1 -> ConvFwd" of cuDNN's Support Surface 90, documented for bf16 and fp32 on sm_90
// (docs/cudnn-fusion.md, section 1 (a)).
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
// whose input gradient also receives a residual branch's adds into it (beta = 1). The forward
// with the prologue above is a pass of its own, so that its plans, and the engines that
// --cudnn-benchmark keeps on disk, are never a plain forward's.
enum class ConvPass { forward, forward_scale_shift_relu, backward_data, backward_data_accumulate, backward_filter };
// "forward", "forward-scale-shift-relu", "backward-data", "backward-data-accumulate",
// "backward-filter".
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
// them and writes the third: dx is x, dw is w, dy is y), the workspace, and the prologue's scale
// and shift (fp32 [C]) for forward_scale_shift_relu, null for every other pass.
struct ConvPointers {
  const void* x = nullptr;
  const void* w = nullptr;
  const void* y = nullptr;
  void* workspace = nullptr;
  const float* scale = nullptr;
  const float* shift = nullptr;
};

class ConvGraph {
 public:
  // Throws a CudnnError when cuDNN rejects a descriptor, which for the fused pass means that this
  // cuDNN cannot express the graph (the caller then runs the unit unfused).
  ConvGraph(ConvPass pass, const ConvShape& shape, DType dtype);
  ~ConvGraph();
  ConvGraph(const ConvGraph&) = delete;
  ConvGraph& operator=(const ConvGraph&) = delete;

  ConvPass pass() const { return pass_; }

  // The configurations of Note [Engine filter], best first; empty when cuDNN has none.
  std::vector<EngineConfig> usable_configs(const Context& ctx) const;
  // The plan for `config`, or null when cuDNN declines to build it.
  std::unique_ptr<ConvPlan> build_plan(const EngineConfig& config) const;

  // A finalized variant pack for these pointers. Plans of any graph of the same pass and shape run
  // with it; the pack of a fused pass names scale and shift too.
  static BackendDescriptor variant_pack(const ConvPointers& pointers);

 private:
  // The prologue of forward_scale_shift_relu: its tensors, pointwise descriptors and operations.
  struct Prologue;
  ConvPass pass_;
  BackendDescriptor x_, w_, y_, convolution_;
  std::unique_ptr<Prologue> prologue_;  // null unless the pass has one
  BackendDescriptor operation_, graph_;
};

}  // namespace cutrain
