#include "nn/conv_graph.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace cutrain {
namespace {

// The unique ids of the graph's tensors, which a variant pack pairs with pointers, and of the
// prologue's virtual tensors, which no pack names.
constexpr int64_t kUidX = 1, kUidW = 2, kUidY = 3, kUidScale = 4, kUidShift = 5;
constexpr int64_t kUidScaled = 6, kUidShifted = 7, kUidActivated = 8;

// cuDNN's vectorised kernels want 16-byte aligned tensors; every planned tensor starts on a
// 256-byte boundary (kBufferAlignment), and parameters on a 128-byte one.
constexpr int64_t kTensorAlignment = 16;

// An NHWC tensor of logical dimensions [n, c, h, w], as the backend API describes layouts: by
// strides over dimensions given in NCHW order. A virtual one lives only inside the graph.
BackendDescriptor nhwc_tensor(int64_t uid, cudnnDataType_t type, int64_t n, int64_t c, int64_t h, int64_t w,
                              bool is_virtual = false) {
  BackendDescriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, type)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, std::vector<int64_t>{n, c, h, w})
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, std::vector<int64_t>{h * w * c, 1, w * c, c})
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, kTensorAlignment);
  if (is_virtual) t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, true);
  t.finalize();
  return t;
}

// A pointwise operation y = mode(x[, b]) computed in FLOAT, with alpha1 = alpha2 = 1, as Support
// Surface 90 requires of its pointwise operations.
BackendDescriptor pointwise(cudnnPointwiseMode_t mode, const BackendDescriptor& x, const BackendDescriptor* b,
                            const BackendDescriptor& y, BackendDescriptor& math) {
  math.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, mode)
      .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
  math.finalize();
  BackendDescriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, math)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1.0f);
  if (b) {
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b).set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1.0f);
  }
  op.finalize();
  return op;
}

// A per-channel fp32 vector [1, c, 1, 1].
BackendDescriptor channel_vector(int64_t uid, int64_t c) { return nhwc_tensor(uid, CUDNN_DATA_FLOAT, 1, c, 1, 1); }

BackendDescriptor convolution(const ConvShape& s) {
  BackendDescriptor c(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const std::vector<int64_t> pad = {s.pad, s.pad}, stride = {s.stride, s.stride}, dilation = {1, 1};
  c.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, CUDNN_CROSS_CORRELATION)
      .set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, int64_t{2})
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, pad)
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, pad)
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, stride)
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dilation);
  c.finalize();
  return c;
}

// The operation of `pass`, with its tensors' attribute names.
struct OperationAttributes {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};

OperationAttributes attributes(ConvPass pass) {
  switch (pass) {
    case ConvPass::forward:
    case ConvPass::forward_scale_shift_relu:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
    case ConvPass::backward_data:
    case ConvPass::backward_data_accumulate:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    case ConvPass::backward_filter:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
  }
  throw std::logic_error("conv_graph: no such pass");
}

bool has_note(const std::vector<cudnnBackendNumericalNote_t>& notes, cudnnBackendNumericalNote_t note) {
  return std::find(notes.begin(), notes.end(), note) != notes.end();
}

// Note [Engine filter]: whether the context rules out an engine with these numerical notes.
bool ruled_out(const Context& ctx, const std::vector<cudnnBackendNumericalNote_t>& notes) {
  if (has_note(notes, CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS)) return true;
  if (ctx.options.deterministic && has_note(notes, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)) return true;
  const bool strict_fp32 = ctx.dtype() == DType::f32 && !ctx.options.allow_tf32;
  return strict_fp32 && has_note(notes, CUDNN_NUMERICAL_NOTE_TENSOR_CORE);
}

// Reads a configuration that heuristics returned: its engine's index and notes, and its knobs.
EngineConfig read_config(const BackendDescriptor& config, std::vector<cudnnBackendNumericalNote_t>& notes) {
  std::vector<BackendDescriptor> engine;
  engine.emplace_back(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  config.get_descriptors(CUDNN_ATTR_ENGINECFG_ENGINE, engine);
  EngineConfig result;
  engine[0].get(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, result.engine);
  notes = engine[0].get_all<cudnnBackendNumericalNote_t>(CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                                         CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
  // Counted first, so that a configuration without knobs needs no knob descriptors.
  const int64_t count = config.count_descriptors(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES);
  std::vector<BackendDescriptor> knobs;
  for (int64_t i = 0; i < count; ++i) knobs.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
  if (count > 0) config.get_descriptors(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, knobs);
  for (int64_t i = 0; i < count; ++i) {
    cudnnBackendKnobType_t type = CUDNN_KNOB_TYPE_COUNTS;
    int64_t value = 0;
    knobs[size_t(i)].get(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, type);
    knobs[size_t(i)].get(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, value);
    result.knobs.emplace_back(int64_t(type), value);
  }
  return result;
}

}  // namespace

const char* conv_pass_name(ConvPass pass) {
  switch (pass) {
    case ConvPass::forward: return "forward";
    case ConvPass::forward_scale_shift_relu: return "forward-scale-shift-relu";
    case ConvPass::backward_data: return "backward-data";
    case ConvPass::backward_data_accumulate: return "backward-data-accumulate";
    case ConvPass::backward_filter: return "backward-filter";
  }
  return "?";
}

std::string describe(const EngineConfig& config) {
  std::ostringstream text;
  text << "engine " << config.engine;
  if (config.knobs.empty()) return text.str();
  text << " (knobs";
  for (const auto& [type, value] : config.knobs) text << ' ' << type << '=' << value;
  text << ')';
  return text.str();
}

ConvPlan::ConvPlan(EngineConfig config, BackendDescriptor engine, std::vector<BackendDescriptor> knobs,
                   BackendDescriptor engine_config, BackendDescriptor plan)
    : config_(std::move(config)),
      engine_(std::move(engine)),
      knobs_(std::move(knobs)),
      engine_config_(std::move(engine_config)),
      plan_(std::move(plan)) {
  int64_t bytes = 0;
  plan_.get(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, bytes);
  workspace_ = size_t(std::max<int64_t>(bytes, 0));
}

// The prologue z = x*scale + shift, a = relu(z) on the convolution's input, whose output `a` the
// convolution reads in place of x. Its intermediates are virtual FLOAT tensors of x's shape.
struct ConvGraph::Prologue {
  BackendDescriptor scale, shift, scaled, shifted, activated;
  BackendDescriptor mul_math{CUDNN_BACKEND_POINTWISE_DESCRIPTOR}, add_math{CUDNN_BACKEND_POINTWISE_DESCRIPTOR},
      relu_math{CUDNN_BACKEND_POINTWISE_DESCRIPTOR};
  BackendDescriptor mul, add, relu;

  Prologue(const BackendDescriptor& x, const ConvShape& s)
      : scale(channel_vector(kUidScale, s.C)),
        shift(channel_vector(kUidShift, s.C)),
        scaled(nhwc_tensor(kUidScaled, CUDNN_DATA_FLOAT, s.N, s.C, s.H, s.W, /*is_virtual=*/true)),
        shifted(nhwc_tensor(kUidShifted, CUDNN_DATA_FLOAT, s.N, s.C, s.H, s.W, /*is_virtual=*/true)),
        activated(nhwc_tensor(kUidActivated, CUDNN_DATA_FLOAT, s.N, s.C, s.H, s.W, /*is_virtual=*/true)),
        mul(pointwise(CUDNN_POINTWISE_MUL, x, &scale, scaled, mul_math)),
        add(pointwise(CUDNN_POINTWISE_ADD, scaled, &shift, shifted, add_math)),
        relu(pointwise(CUDNN_POINTWISE_RELU_FWD, shifted, nullptr, activated, relu_math)) {}
};

ConvGraph::ConvGraph(ConvPass pass, const ConvShape& s, DType dtype)
    : pass_(pass),
      x_(nhwc_tensor(kUidX, cudnn_type(dtype), s.N, s.C, s.H, s.W)),
      w_(nhwc_tensor(kUidW, cudnn_type(dtype), s.K, s.C, s.R, s.S)),
      y_(nhwc_tensor(kUidY, cudnn_type(dtype), s.N, s.K, s.P(), s.Q())),
      convolution_(convolution(s)),
      prologue_(pass == ConvPass::forward_scale_shift_relu ? std::make_unique<Prologue>(x_, s) : nullptr),
      operation_(attributes(pass).type),
      graph_(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR) {
  const OperationAttributes a = attributes(pass);
  const float alpha = 1.0f, beta = pass == ConvPass::backward_data_accumulate ? 1.0f : 0.0f;
  operation_.set(a.x, prologue_ ? prologue_->activated : x_)
      .set(a.w, w_)
      .set(a.y, y_)
      .set(a.conv, convolution_)
      .set(a.alpha, CUDNN_TYPE_FLOAT, alpha)
      .set(a.beta, CUDNN_TYPE_FLOAT, beta);
  operation_.finalize();
  std::vector<cudnnBackendDescriptor_t> operations;
  if (prologue_) operations = {prologue_->mul.get(), prologue_->add.get(), prologue_->relu.get()};
  operations.push_back(operation_.get());
  graph_.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, operations);
  graph_.finalize();
}

ConvGraph::~ConvGraph() = default;

std::vector<EngineConfig> ConvGraph::usable_configs(const Context& ctx) const {
  std::vector<EngineConfig> usable, listed;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    BackendDescriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph_)
        .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, mode);
    // A mode that has nothing for this graph declines to finalize; the other may still have some.
    if (heuristics.try_finalize() != CUDNN_STATUS_SUCCESS) continue;
    std::vector<BackendDescriptor> configs;
    const int64_t count = heuristics.count_descriptors(CUDNN_ATTR_ENGINEHEUR_RESULTS);
    for (int64_t i = 0; i < count; ++i) configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    const int64_t got = std::min<int64_t>(heuristics.get_descriptors(CUDNN_ATTR_ENGINEHEUR_RESULTS, configs), count);
    for (int64_t i = 0; i < got; ++i) {
      std::vector<cudnnBackendNumericalNote_t> notes;
      EngineConfig config = read_config(configs[size_t(i)], notes);
      if (std::find(listed.begin(), listed.end(), config) != listed.end()) continue;  // listed by mode A
      listed.push_back(config);
      if (!ruled_out(ctx, notes)) usable.push_back(std::move(config));
    }
  }
  return usable;
}

std::unique_ptr<ConvPlan> ConvGraph::build_plan(const EngineConfig& config) const {
  BackendDescriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  engine.set(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph_)
      .set(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, config.engine);
  if (engine.try_finalize() != CUDNN_STATUS_SUCCESS) return nullptr;
  std::vector<BackendDescriptor> knobs;
  std::vector<cudnnBackendDescriptor_t> raw_knobs;
  for (const auto& [type, value] : config.knobs) {
    BackendDescriptor& knob = knobs.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    knob.set(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, cudnnBackendKnobType_t(type))
        .set(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, value);
    if (knob.try_finalize() != CUDNN_STATUS_SUCCESS) return nullptr;
    raw_knobs.push_back(knob.get());
  }
  BackendDescriptor engine_config(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  engine_config.set(CUDNN_ATTR_ENGINECFG_ENGINE, engine);
  if (!raw_knobs.empty())
    engine_config.set(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, raw_knobs);
  if (engine_config.try_finalize() != CUDNN_STATUS_SUCCESS) return nullptr;
  BackendDescriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, engine_config);
  if (plan.try_finalize() != CUDNN_STATUS_SUCCESS) return nullptr;
  return std::unique_ptr<ConvPlan>(
      new ConvPlan(config, std::move(engine), std::move(knobs), std::move(engine_config), std::move(plan)));
}

BackendDescriptor ConvGraph::variant_pack(const ConvPointers& p) {
  BackendDescriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  std::vector<int64_t> uids = {kUidX, kUidW, kUidY};
  std::vector<void*> pointers = {const_cast<void*>(p.x), const_cast<void*>(p.w), const_cast<void*>(p.y)};
  if (p.scale) {
    uids.insert(uids.end(), {kUidScale, kUidShift});
    pointers.insert(pointers.end(), {const_cast<float*>(p.scale), const_cast<float*>(p.shift)});
  }
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids)
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, pointers)
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, p.workspace);
  pack.finalize();
  return pack;
}

}  // namespace cutrain
