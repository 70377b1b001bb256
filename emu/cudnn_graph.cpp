// cudnn_graph.cpp: the emulated cuDNN's graph (backend) API of emu/include/cudnn.h, for graphs of one
// convolution and for the fused graph of a pointwise prologue on a forward convolution's X (Note
// [Emulated fusion]). The API in brief, as cutrain uses it:
//   1. TENSOR descriptors (X, W, Y), a CONVOLUTION descriptor and one OPERATION_CONVOLUTION_*
//      descriptor that names them, then an OPERATIONGRAPH of that one operation (a fused graph adds
//      POINTWISE descriptors and the OPERATION_POINTWISE descriptors that make X);
//   2. ENGINEHEUR on the graph answers a ranked list of ENGINECFGs, each naming an ENGINE with its
//      numerical and behavior notes;
//   3. an EXECUTION_PLAN of one engine config says how much workspace it needs;
//   4. cudnnBackendExecute runs the plan with a VARIANT_PACK, which maps each tensor's UID to a
//      device pointer and gives the workspace.
// Every descriptor is created empty, takes attributes, each checked against its type's table
// (kAttributes) for its element type and count, and is finalized, which checks it as a whole (Note
// [Backend finalize rules]) and derives what the next step needs. A finalized descriptor takes no
// more attributes. Execution checks the variant pack's pointers against the device's allocations and
// runs the legacy convolution's launch (cudnn_convolution.h), so a graph gives the bits of the legacy
// call with the same algorithm, is captured as the legacy call is, and is written in a step's record
// under the legacy call's name (cudnnConvolutionForward and so on; a fused graph as
// cudnnConvolutionForwardFused).
#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "emu/cudnn_convolution.h"

namespace cutrain::emu::cudnn {
namespace {

struct Descriptor;
using Snapshot = std::shared_ptr<const Descriptor>;

// The elements of one attribute as they were set, or as finalize derived them for an attribute that
// the descriptor answers: `count` elements of `type`, as bytes, or for CUDNN_TYPE_BACKEND_DESCRIPTOR
// as copies of the descriptors. Only a finalized descriptor can be set as an attribute, and it
// cannot change after that, so the copy is what the caller set, and the caller may destroy its own.
struct Value {
  cudnnBackendAttributeType_t type{};
  int64_t count = 0;
  std::vector<unsigned char> bytes;
  std::vector<Snapshot> descriptors;
};

// A tensor descriptor, as finalize reads it.
struct Tensor {
  cudnnDataType_t type{};
  std::vector<int64_t> dims, strides;
  int64_t uid = 0, alignment = 0;
  bool is_virtual = false;
};

// A convolution descriptor, as finalize reads it: one element per spatial dimension in each vector.
struct ConvolutionSpec {
  cudnnDataType_t compute{};
  cudnnConvolutionMode_t mode{};
  std::vector<int64_t> pre, post, strides, dilations;
};

// One pointwise operation of a fused graph's prologue, in the order it applies: its mode, and for
// MUL and ADD the [1,C,1,1] FLOAT tensor it takes (Note [Emulated fusion]).
struct PrologueOperation {
  cudnnPointwiseMode_t mode{};
  bool has_operand = false;
  Tensor operand;
};

// A graph's one convolution. Its tensors are named as the forward names them: backward data's DX is
// x and DY is y, backward filter's DW is w. The graph's finalize adds the legacy problem. In a fused
// graph, x is the graph's input, from which the prologue makes the convolution's virtual X.
struct Convolution {
  Pass pass{};
  Tensor x, w, y;
  ConvolutionSpec conv;
  float alpha = 1, beta = 0;
  Problem problem{};
  std::vector<PrologueOperation> prologue;  // empty but in a fused graph
};

// A pointwise descriptor, as finalize reads it.
struct PointwiseSpec {
  cudnnPointwiseMode_t mode{};
  cudnnDataType_t precision{};
};

// An operation other than a convolution, as the graph's finalize reads it: what it computes, and the
// tensors it reads and writes (pointwise: X, then B when set, and Y; reduction: X and Y; GenStats: X,
// and SUM and SQSUM).
struct Node {
  cudnnBackendDescriptorType_t type{};
  PointwiseSpec pointwise;       // pointwise
  float alpha1 = 1, alpha2 = 1;  // pointwise
  std::vector<Tensor> inputs, outputs;
};

struct Descriptor {
  cudnnBackendDescriptorType_t type{};
  bool finalized = false;
  std::map<cudnnBackendAttributeName_t, Value> values;
  // What finalize derives, for the types that have it.
  Tensor tensor;            // TENSOR
  ConvolutionSpec conv;     // CONVOLUTION
  PointwiseSpec pointwise;  // POINTWISE
  Node node;                // OPERATION_POINTWISE, OPERATION_REDUCTION, OPERATION_GEN_STATS
  Convolution operation;    // a convolution, and the graph's for OPERATIONGRAPH, ENGINE, ENGINECFG, EXECUTION_PLAN
  int64_t engine = -1;    // ENGINE, ENGINECFG, EXECUTION_PLAN: the global index
  size_t workspace = 0;   // EXECUTION_PLAN
};

Descriptor* descriptor_of(cudnnBackendDescriptor_t d) { return static_cast<Descriptor*>(d); }

// ---- attribute types and names ----

struct TypeInfo {
  cudnnBackendAttributeType_t type;
  const char* name;
  size_t size;  // of one element
};
const TypeInfo kTypes[] = {
    {CUDNN_TYPE_HANDLE, "CUDNN_TYPE_HANDLE", sizeof(cudnnHandle_t)},
    {CUDNN_TYPE_DATA_TYPE, "CUDNN_TYPE_DATA_TYPE", sizeof(cudnnDataType_t)},
    {CUDNN_TYPE_BOOLEAN, "CUDNN_TYPE_BOOLEAN", sizeof(bool)},
    {CUDNN_TYPE_INT64, "CUDNN_TYPE_INT64", sizeof(int64_t)},
    {CUDNN_TYPE_FLOAT, "CUDNN_TYPE_FLOAT", sizeof(float)},
    {CUDNN_TYPE_DOUBLE, "CUDNN_TYPE_DOUBLE", sizeof(double)},
    {CUDNN_TYPE_VOID_PTR, "CUDNN_TYPE_VOID_PTR", sizeof(void*)},
    {CUDNN_TYPE_CONVOLUTION_MODE, "CUDNN_TYPE_CONVOLUTION_MODE", sizeof(cudnnConvolutionMode_t)},
    {CUDNN_TYPE_HEUR_MODE, "CUDNN_TYPE_HEUR_MODE", sizeof(cudnnBackendHeurMode_t)},
    {CUDNN_TYPE_NUMERICAL_NOTE, "CUDNN_TYPE_NUMERICAL_NOTE", sizeof(cudnnBackendNumericalNote_t)},
    {CUDNN_TYPE_POINTWISE_MODE, "CUDNN_TYPE_POINTWISE_MODE", sizeof(cudnnPointwiseMode_t)},
    {CUDNN_TYPE_BACKEND_DESCRIPTOR, "CUDNN_TYPE_BACKEND_DESCRIPTOR", sizeof(cudnnBackendDescriptor_t)},
    {CUDNN_TYPE_GENSTATS_MODE, "CUDNN_TYPE_GENSTATS_MODE", sizeof(cudnnGenStatsMode_t)},
    {CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, "CUDNN_TYPE_REDUCTION_OPERATOR_TYPE", sizeof(cudnnReduceTensorOp_t)},
    {CUDNN_TYPE_BEHAVIOR_NOTE, "CUDNN_TYPE_BEHAVIOR_NOTE", sizeof(cudnnBackendBehaviorNote_t)},
};

const TypeInfo* type_info(cudnnBackendAttributeType_t type) {
  for (const TypeInfo& t : kTypes)
    if (t.type == type) return &t;
  return nullptr;
}

std::string type_name(cudnnBackendAttributeType_t type) {
  const TypeInfo* t = type_info(type);
  return t ? t->name : "attribute type " + std::to_string(int(type));
}

// ---- the attributes each descriptor type takes ----

enum class Use {
  required,  // finalize refuses the descriptor without it
  optional,
  answered,  // the finalized descriptor answers it; it cannot be set
};
constexpr int64_t kMany = int64_t(1) << 20;
constexpr int kNoDescriptor = -1, kAnyOperation = -2;  // for Attribute::points_to

struct Attribute {
  cudnnBackendDescriptorType_t owner;
  cudnnBackendAttributeName_t name;
  const char* label;
  cudnnBackendAttributeType_t type;
  int64_t min_count, max_count;
  Use use;
  int points_to = kNoDescriptor;  // for CUDNN_TYPE_BACKEND_DESCRIPTOR: the descriptor type its elements have
  bool or_double = false;         // CUDNN_TYPE_DOUBLE is taken too (alpha and beta)
};

#define ATTR(name) name, #name
// The types, counts and uses are those of cuDNN's API reference, "Backend Descriptor Types", for
// each descriptor (https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-graph-library.html),
// except where the emulation takes less: one spatial dimension per element of a convolution's
// vectors at most CUDNN_DIM_MAX - 2 = 6, and engine configs without knob choices, since the emulated
// engines have no knobs. The two handle attributes are deprecated in cuDNN 9.19 [cudnn_graph.h], so
// the emulation takes them and needs neither. Of the pointwise, reduction and GenStats descriptors
// it takes the attributes that a scale, bias and ReLU prologue and a statistics epilogue set.
const Attribute kAttributes[] = {
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, ATTR(CUDNN_ATTR_TENSOR_DATA_TYPE), CUDNN_TYPE_DATA_TYPE, 1, 1, Use::required},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, ATTR(CUDNN_ATTR_TENSOR_DIMENSIONS), CUDNN_TYPE_INT64, 1, 8, Use::required},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, ATTR(CUDNN_ATTR_TENSOR_STRIDES), CUDNN_TYPE_INT64, 1, 8, Use::required},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, ATTR(CUDNN_ATTR_TENSOR_UNIQUE_ID), CUDNN_TYPE_INT64, 1, 1, Use::required},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, ATTR(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT), CUDNN_TYPE_INT64, 1, 1, Use::required},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, ATTR(CUDNN_ATTR_TENSOR_IS_VIRTUAL), CUDNN_TYPE_BOOLEAN, 1, 1, Use::optional},

    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, ATTR(CUDNN_ATTR_CONVOLUTION_COMP_TYPE), CUDNN_TYPE_DATA_TYPE, 1, 1,
     Use::required},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, ATTR(CUDNN_ATTR_CONVOLUTION_CONV_MODE), CUDNN_TYPE_CONVOLUTION_MODE, 1, 1,
     Use::required},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, ATTR(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS), CUDNN_TYPE_INT64, 1, 1,
     Use::required},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, ATTR(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS), CUDNN_TYPE_INT64, 1, 6,
     Use::required},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, ATTR(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS), CUDNN_TYPE_INT64, 1, 6,
     Use::required},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, ATTR(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES), CUDNN_TYPE_INT64, 1, 6,
     Use::required},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, ATTR(CUDNN_ATTR_CONVOLUTION_DILATIONS), CUDNN_TYPE_INT64, 1, 6,
     Use::required},

    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::required, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::required, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::required, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::required, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA),
     CUDNN_TYPE_FLOAT, 1, 1, Use::required, kNoDescriptor, true},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA),
     CUDNN_TYPE_FLOAT, 1, 1, Use::required, kNoDescriptor, true},

    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::required, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::required, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::required, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
     ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::required,
     CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
     ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA), CUDNN_TYPE_FLOAT, 1, 1, Use::required, kNoDescriptor, true},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA),
     CUDNN_TYPE_FLOAT, 1, 1, Use::required, kNoDescriptor, true},

    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::required,
     CUDNN_BACKEND_TENSOR_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::required,
     CUDNN_BACKEND_TENSOR_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::required,
     CUDNN_BACKEND_TENSOR_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::required,
     CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA), CUDNN_TYPE_FLOAT, 1, 1, Use::required, kNoDescriptor,
     true},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA), CUDNN_TYPE_FLOAT, 1, 1, Use::required, kNoDescriptor,
     true},

    {CUDNN_BACKEND_POINTWISE_DESCRIPTOR, ATTR(CUDNN_ATTR_POINTWISE_MODE), CUDNN_TYPE_POINTWISE_MODE, 1, 1,
     Use::required},
    {CUDNN_BACKEND_POINTWISE_DESCRIPTOR, ATTR(CUDNN_ATTR_POINTWISE_MATH_PREC), CUDNN_TYPE_DATA_TYPE, 1, 1,
     Use::required},

    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::required, CUDNN_BACKEND_POINTWISE_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_POINTWISE_XDESC),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::required, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_POINTWISE_BDESC),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::optional, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_POINTWISE_YDESC),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::required, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1), CUDNN_TYPE_FLOAT, 1, 1,
     Use::optional, kNoDescriptor, true},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2), CUDNN_TYPE_FLOAT, 1, 1,
     Use::optional, kNoDescriptor, true},

    {CUDNN_BACKEND_REDUCTION_DESCRIPTOR, ATTR(CUDNN_ATTR_REDUCTION_OPERATOR), CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, 1,
     Use::required},
    {CUDNN_BACKEND_REDUCTION_DESCRIPTOR, ATTR(CUDNN_ATTR_REDUCTION_COMP_TYPE), CUDNN_TYPE_DATA_TYPE, 1, 1,
     Use::required},

    {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_REDUCTION_XDESC),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::required, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_REDUCTION_YDESC),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::required, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_REDUCTION_DESC),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::required, CUDNN_BACKEND_REDUCTION_DESCRIPTOR},

    {CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_GENSTATS_MODE), CUDNN_TYPE_GENSTATS_MODE,
     1, 1, Use::required},
    {CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC), CUDNN_TYPE_DATA_TYPE,
     1, 1, Use::required},
    {CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_GENSTATS_XDESC),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::required, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::required, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::required, CUDNN_BACKEND_TENSOR_DESCRIPTOR},

    {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATIONGRAPH_OPS), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
     kMany, Use::required, kAnyOperation},
    {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, ATTR(CUDNN_ATTR_OPERATIONGRAPH_HANDLE), CUDNN_TYPE_HANDLE, 1, 1,
     Use::optional},

    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, ATTR(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
     1, Use::required, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR},
    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, ATTR(CUDNN_ATTR_ENGINEHEUR_MODE), CUDNN_TYPE_HEUR_MODE, 1, 1, Use::required},
    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, ATTR(CUDNN_ATTR_ENGINEHEUR_RESULTS), CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, kMany,
     Use::answered, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR},

    {CUDNN_BACKEND_ENGINE_DESCRIPTOR, ATTR(CUDNN_ATTR_ENGINE_OPERATION_GRAPH), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1,
     Use::required, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR},
    {CUDNN_BACKEND_ENGINE_DESCRIPTOR, ATTR(CUDNN_ATTR_ENGINE_GLOBAL_INDEX), CUDNN_TYPE_INT64, 1, 1, Use::required},
    {CUDNN_BACKEND_ENGINE_DESCRIPTOR, ATTR(CUDNN_ATTR_ENGINE_NUMERICAL_NOTE), CUDNN_TYPE_NUMERICAL_NOTE, 0, kMany,
     Use::answered},
    {CUDNN_BACKEND_ENGINE_DESCRIPTOR, ATTR(CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE), CUDNN_TYPE_BEHAVIOR_NOTE, 0, kMany,
     Use::answered},

    {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, ATTR(CUDNN_ATTR_ENGINECFG_ENGINE), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1,
     Use::required, CUDNN_BACKEND_ENGINE_DESCRIPTOR},
    {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, ATTR(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES), CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, 0,
     Use::optional, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR},

    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, ATTR(CUDNN_ATTR_EXECUTION_PLAN_HANDLE), CUDNN_TYPE_HANDLE, 1, 1,
     Use::optional},
    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, ATTR(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, Use::required, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR},
    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, ATTR(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE), CUDNN_TYPE_INT64, 1, 1,
     Use::answered},

    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, ATTR(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS), CUDNN_TYPE_INT64, 0, kMany,
     Use::required},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, ATTR(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS), CUDNN_TYPE_VOID_PTR, 0, kMany,
     Use::required},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, ATTR(CUDNN_ATTR_VARIANT_PACK_WORKSPACE), CUDNN_TYPE_VOID_PTR, 1, 1,
     Use::optional},
};
#undef ATTR

const Attribute* attribute_of(cudnnBackendDescriptorType_t owner, cudnnBackendAttributeName_t name) {
  for (const Attribute& a : kAttributes)
    if (a.owner == owner && a.name == name) return &a;
  return nullptr;
}

bool is_convolution(cudnnBackendDescriptorType_t type) {
  return type == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR ||
         type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR ||
         type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR;
}

bool is_operation(cudnnBackendDescriptorType_t type) {
  return is_convolution(type) || type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR ||
         type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR || type == CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR;
}

// ---- reading a descriptor's values (each present: finalize checked the required ones) ----

template <typename T>
std::vector<T> elements_of(const Value& v) {
  std::vector<T> out(size_t(v.count));
  if (!out.empty()) std::memcpy(out.data(), v.bytes.data(), v.bytes.size());
  return out;
}

template <typename T>
std::vector<T> elements_of(const Descriptor& d, cudnnBackendAttributeName_t name) {
  return elements_of<T>(d.values.at(name));
}

template <typename T>
T one(const Descriptor& d, cudnnBackendAttributeName_t name, T fallback = T{}) {
  const auto it = d.values.find(name);
  if (it == d.values.end()) return fallback;
  T value;
  std::memcpy(&value, it->second.bytes.data(), sizeof value);
  return value;
}

const Descriptor& child(const Descriptor& d, cudnnBackendAttributeName_t name) {
  return *d.values.at(name).descriptors[0];
}

template <typename T>
Value value_of(cudnnBackendAttributeType_t type, const std::vector<T>& elements) {
  Value v{type, int64_t(elements.size()), std::vector<unsigned char>(elements.size() * sizeof(T)), {}};
  if (!elements.empty()) std::memcpy(v.bytes.data(), elements.data(), v.bytes.size());
  return v;
}

Value value_of(const Snapshot& descriptor) { return Value{CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, {}, {descriptor}}; }

// Alpha or beta, which the attribute gives as a float or a double; the emulation computes in float.
float scale_of(const Descriptor& d, cudnnBackendAttributeName_t name) {
  const Value& v = d.values.at(name);
  return v.type == CUDNN_TYPE_DOUBLE ? float(elements_of<double>(v)[0]) : elements_of<float>(v)[0];
}

// ---- the emulated engines ----

// Note [Emulated engines]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Each pass has three engines, global indices 0, 1 and 2. Each computes as one of the legacy
// algorithms (cudnn.cpp), with its workspace and its bits, so a plan gives the same result as the
// legacy call of that algorithm:
//   pass             index  numerical notes    computes as               workspace
//   forward            0    TENSOR_CORE        IMPLICIT_PRECOMP_GEMM     R*S*C*4 bytes (an index table)
//   forward            1    -                  IMPLICIT_PRECOMP_GEMM     R*S*C*4 bytes
//   forward            2    -                  IMPLICIT_GEMM             0
//   backward_data      0    TENSOR_CORE        BWD_DATA_ALGO_1           0
//   backward_data      1    NONDETERMINISTIC   BWD_DATA_ALGO_0           0
//   backward_data      2    -                  BWD_DATA_ALGO_1           0
//   backward_filter    0    TENSOR_CORE        BWD_FILTER_ALGO_1         K*R*S*C*4 bytes (an fp32 accumulator)
//   backward_filter    1    NONDETERMINISTIC   BWD_FILTER_ALGO_0         0
//   backward_filter    2    -                  BWD_FILTER_ALGO_1         K*R*S*C*4 bytes
// A NONDETERMINISTIC engine adds partial sums in an order of its own each run (Note [Emulated
// atomics]). A TENSOR_CORE engine computes the same fp32 result as the others (no TF32 rounding);
// the note is there for a caller's filter, as PyTorch refuses such engines for strict fp32. No
// engine has a behavior note: none compiles at run time. Heuristics modes A and B rank the three by
// the predicted time that the legacy heuristics give the algorithm each computes as, with its
// workspace (predicted_time in cudnn_convolution.h), fastest first and by index on ties, so that a
// caller that takes the first usable engine computes as a legacy caller that took the first usable
// algorithm: forward ranks 2, 0, 1 (IMPLICIT_GEMM needs no workspace); backward data and backward
// filter rank 1, 0, 2 (the atomic ALGO_0 needs none and has the lower number).
// CUDNN_HEUR_MODE_FALLBACK answers engine 2 alone. Every engine computes every shape that the
// graph's finalize takes. CUTRAIN_EMU_CUDNN_FAIL="pass:engine=N:status" makes engine N fail (Note
// [Emulated cuDNN faults]).
// A fused graph (Note [Emulated fusion]) has an engine of its own kind instead, as cuDNN's generic
// runtime fusion engine, which compiles for the graph when its plan is built (cuDNN's graph guide,
// "Supported Graph Patterns"): forward engine 3, with the behavior note RUNTIME_COMPILATION and no
// numerical note, which computes the prologue and then the convolution as IMPLICIT_GEMM with no
// workspace. Every mode of the heuristics answers it, ranked as above; engines 0 to 2 do not take a
// fused graph (CUDNN_STATUS_NOT_SUPPORTED at the engine's finalize), nor engine 3 a graph of one
// convolution, whose engines stay the three above.
struct Engine {
  Pass pass;
  int64_t index;  // CUDNN_ATTR_ENGINE_GLOBAL_INDEX
  int algo;       // the legacy algorithm it computes as
  bool tensor_core;
  bool fallback;  // answered by CUDNN_HEUR_MODE_FALLBACK
  bool fusion;    // the runtime fusion engine of fused graphs, not of a graph of one convolution
};
const Engine kEngines[] = {
    {Pass::forward, 0, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, true, false, false},
    {Pass::forward, 1, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, false, false, false},
    {Pass::forward, 2, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, false, true, false},
    {Pass::forward, 3, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, false, true, true},
    {Pass::backward_data, 0, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, true, false, false},
    {Pass::backward_data, 1, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, false, false, false},
    {Pass::backward_data, 2, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, false, true, false},
    {Pass::backward_filter, 0, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, true, false, false},
    {Pass::backward_filter, 1, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, false, false, false},
    {Pass::backward_filter, 2, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, false, true, false},
};
constexpr int64_t kEnginesPerPass = 3;  // of a graph of one convolution; a fused graph's are 0 to 3

const Engine* engine_of(Pass pass, int64_t index) {
  for (const Engine& e : kEngines)
    if (e.pass == pass && e.index == index) return &e;
  return nullptr;
}

std::vector<cudnnBackendNumericalNote_t> notes_of(const Engine& e) {
  std::vector<cudnnBackendNumericalNote_t> notes;
  if (e.tensor_core) notes.push_back(CUDNN_NUMERICAL_NOTE_TENSOR_CORE);
  if (algo_is_atomic(e.pass, e.algo)) notes.push_back(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC);
  return notes;
}

// ---- finalize, one function per descriptor type ----

// Note [Backend finalize rules]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Finalize refuses what cuDNN documents it refuses, with CUDNN_STATUS_BAD_PARAM, each rule citing
// its source: [ref] is cuDNN's API reference, "Backend Descriptor Types" (cudnn_graph library), at
// the descriptor's entry; [H] is cudnn_graph.h of cuDNN 9.19. Every attribute that the table marks
// required must be set ([ref]: each such attribute is "Required attribute"). What the emulation does
// not compute, which the real library may, is refused with CUDNN_STATUS_NOT_SUPPORTED (or one of its
// finer statuses) when the graph is finalized, with the reason, as a real graph that no engine
// supports is refused before a plan is made: graphs other than one convolution or the fused graph
// of Note [Emulated fusion], other than 2-d convolutions, groups, dilation, CUDNN_CONVOLUTION mode
// (a flipped filter), other than float compute, data other than float or bf16, layouts other than
// packed NHWC (a filter: KRSC), and padding that differs before and after or along height and width.
// What the engines of a fused graph document they do not support is refused there too, with
// CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN (or _DATA_TYPE), each rule citing [G], cuDNN's graph
// guide ("Graphs", docs.nvidia.com/cudnn/developer/graph-api; docs/cudnn-fusion.md, section 1).

cudnnStatus_t finalize_tensor(Descriptor& d) {
  Tensor t;
  t.type = one<cudnnDataType_t>(d, CUDNN_ATTR_TENSOR_DATA_TYPE);
  t.dims = elements_of<int64_t>(d, CUDNN_ATTR_TENSOR_DIMENSIONS);
  t.strides = elements_of<int64_t>(d, CUDNN_ATTR_TENSOR_STRIDES);
  t.uid = one<int64_t>(d, CUDNN_ATTR_TENSOR_UNIQUE_ID);
  t.alignment = one<int64_t>(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT);
  t.is_virtual = one<bool>(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, false);
  // [ref] CUDNN_ATTR_TENSOR_STRIDES has as many elements as CUDNN_ATTR_TENSOR_DIMENSIONS.
  if (t.dims.size() != t.strides.size())
    return fail(CUDNN_STATUS_BAD_PARAM, "the tensor has " + std::to_string(t.dims.size()) + " dimensions and " +
                                            std::to_string(t.strides.size()) + " strides");
  // [ref] Dimensions and strides are positive.
  for (size_t i = 0; i < t.dims.size(); ++i)
    if (t.dims[i] <= 0 || t.strides[i] <= 0)
      return fail(CUDNN_STATUS_BAD_PARAM, "dimension " + std::to_string(i) + " of the tensor (UID " +
                                              std::to_string(t.uid) + ") or its stride is not positive");
  // [ref] CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT is the alignment of the tensor's pointer: a power of two.
  if (t.alignment <= 0 || (t.alignment & (t.alignment - 1)) != 0)
    return fail(CUDNN_STATUS_BAD_PARAM, "the byte alignment " + std::to_string(t.alignment) + " is not a power of two");
  d.tensor = t;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_convolution(Descriptor& d) {
  ConvolutionSpec c;
  c.compute = one<cudnnDataType_t>(d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE);
  c.mode = one<cudnnConvolutionMode_t>(d, CUDNN_ATTR_CONVOLUTION_CONV_MODE);
  c.pre = elements_of<int64_t>(d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS);
  c.post = elements_of<int64_t>(d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS);
  c.strides = elements_of<int64_t>(d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES);
  c.dilations = elements_of<int64_t>(d, CUDNN_ATTR_CONVOLUTION_DILATIONS);
  const int64_t spatial = one<int64_t>(d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS);
  // [ref] The paddings, strides and dilations have CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS elements each.
  for (const std::vector<int64_t>* v : {&c.pre, &c.post, &c.strides, &c.dilations})
    if (int64_t(v->size()) != spatial)
      return fail(CUDNN_STATUS_BAD_PARAM, "CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS is " + std::to_string(spatial) +
                                              ", but a padding, stride or dilation vector has " +
                                              std::to_string(v->size()) + " elements");
  // [ref] Paddings are not negative; strides and dilations are positive.
  for (int64_t i = 0; i < spatial; ++i)
    if (c.pre[size_t(i)] < 0 || c.post[size_t(i)] < 0 || c.strides[size_t(i)] <= 0 || c.dilations[size_t(i)] <= 0)
      return fail(CUDNN_STATUS_BAD_PARAM, "a padding is negative, or a stride or dilation not positive");
  // [H] cudnnConvolutionMode_t has CUDNN_CONVOLUTION and CUDNN_CROSS_CORRELATION.
  if (c.mode != CUDNN_CONVOLUTION && c.mode != CUDNN_CROSS_CORRELATION)
    return fail(CUDNN_STATUS_BAD_PARAM, "invalid convolution mode " + std::to_string(int(c.mode)));
  d.conv = c;
  return CUDNN_STATUS_SUCCESS;
}

// The attributes of each operation, its tensors named as the forward names them (x, w, y).
struct OperationNames {
  cudnnBackendDescriptorType_t type;
  Pass pass;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
  const char* labels[3];  // the tensors' names in this operation
};
const OperationNames kOperations[] = {
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
     Pass::forward,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
     {"X", "W", "Y"}},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
     Pass::backward_data,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
     {"DX", "W", "DY"}},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     Pass::backward_filter,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
     {"X", "DW", "DY"}},
};

const OperationNames& names_of(Pass pass) { return kOperations[int(pass)]; }

cudnnStatus_t finalize_operation(Descriptor& d) {
  const OperationNames& names = *std::find_if(std::begin(kOperations), std::end(kOperations),
                                              [&](const OperationNames& o) { return o.type == d.type; });
  Convolution op;
  op.pass = names.pass;
  op.x = child(d, names.x).tensor;
  op.w = child(d, names.w).tensor;
  op.y = child(d, names.y).tensor;
  op.conv = child(d, names.conv).conv;
  op.alpha = scale_of(d, names.alpha);
  op.beta = scale_of(d, names.beta);
  const std::vector<int64_t>&x = op.x.dims, &w = op.w.dims, &y = op.y.dims;
  const size_t spatial = op.conv.pre.size();
  // [ref] X, W and Y have the same number of dimensions, the convolution's spatial ones and two more.
  if (w.size() != x.size() || y.size() != x.size() || x.size() != spatial + 2)
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(names.labels[0]) + ", " + names.labels[1] + " and " +
                                            names.labels[2] + " do not each have " + std::to_string(spatial + 2) +
                                            " dimensions");
  // [ref] Y has X's batch and W's output channels; X's channels are W's times the groups.
  if (y[0] != x[0] || y[1] != w[0] || x[1] % w[1] != 0)
    return fail(CUDNN_STATUS_BAD_PARAM, std::string("the batch or channels of ") + names.labels[0] + ", " +
                                            names.labels[1] + " and " + names.labels[2] + " do not agree");
  // [ref] Each spatial size of Y is (x + pre + post - ((w - 1) * dilation + 1)) / stride + 1.
  for (size_t i = 0; i < spatial; ++i) {
    const int64_t span = (w[i + 2] - 1) * op.conv.dilations[i] + 1;
    const int64_t padded = x[i + 2] + op.conv.pre[i] + op.conv.post[i];
    const int64_t size = padded < span ? 0 : (padded - span) / op.conv.strides[i] + 1;
    if (size < 1 || y[i + 2] != size)
      return fail(CUDNN_STATUS_BAD_PARAM, "spatial dimension " + std::to_string(i) + " of " + names.labels[2] + " is " +
                                              std::to_string(y[i + 2]) + ", the convolution gives " +
                                              std::to_string(size));
  }
  d.operation = op;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_pointwise(Descriptor& d) {
  d.pointwise.mode = one<cudnnPointwiseMode_t>(d, CUDNN_ATTR_POINTWISE_MODE);
  d.pointwise.precision = one<cudnnDataType_t>(d, CUDNN_ATTR_POINTWISE_MATH_PREC);
  return CUDNN_STATUS_SUCCESS;
}

// Whether a pointwise mode of the emulated cudnn.h takes two inputs, X and B.
bool binary_mode(cudnnPointwiseMode_t mode) {
  return mode == CUDNN_POINTWISE_ADD || mode == CUDNN_POINTWISE_MUL || mode == CUDNN_POINTWISE_MIN ||
         mode == CUDNN_POINTWISE_MAX || mode == CUDNN_POINTWISE_SUB || mode == CUDNN_POINTWISE_CMP_GT;
}

cudnnStatus_t finalize_pointwise_operation(Descriptor& d) {
  Node n;
  n.type = d.type;
  n.pointwise = child(d, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR).pointwise;
  n.inputs.push_back(child(d, CUDNN_ATTR_OPERATION_POINTWISE_XDESC).tensor);
  const bool has_b = d.values.count(CUDNN_ATTR_OPERATION_POINTWISE_BDESC) != 0;
  if (has_b) n.inputs.push_back(child(d, CUDNN_ATTR_OPERATION_POINTWISE_BDESC).tensor);
  n.outputs.push_back(child(d, CUDNN_ATTR_OPERATION_POINTWISE_YDESC).tensor);
  n.alpha1 =
      d.values.count(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1) ? scale_of(d, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1) : 1.0f;
  n.alpha2 =
      d.values.count(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2) ? scale_of(d, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2) : 1.0f;
  // [ref] CUDNN_ATTR_OPERATION_POINTWISE_BDESC is required for a mode with two inputs.
  if (binary_mode(n.pointwise.mode) && !has_b)
    return fail(CUDNN_STATUS_BAD_PARAM, "pointwise mode " + std::to_string(int(n.pointwise.mode)) +
                                            " takes two inputs, and CUDNN_ATTR_OPERATION_POINTWISE_BDESC is not set");
  d.node = n;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_reduction(Descriptor&) { return CUDNN_STATUS_SUCCESS; }

cudnnStatus_t finalize_reduction_operation(Descriptor& d) {
  d.node.type = d.type;
  d.node.inputs = {child(d, CUDNN_ATTR_OPERATION_REDUCTION_XDESC).tensor};
  d.node.outputs = {child(d, CUDNN_ATTR_OPERATION_REDUCTION_YDESC).tensor};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_gen_stats(Descriptor& d) {
  d.node.type = d.type;
  d.node.inputs = {child(d, CUDNN_ATTR_OPERATION_GENSTATS_XDESC).tensor};
  d.node.outputs = {child(d, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC).tensor,
                    child(d, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC).tensor};
  return CUDNN_STATUS_SUCCESS;
}

// Whether `t` is a packed NHWC tensor (a filter: KRSC) of dimensions (n, c, h, w).
bool packed_nhwc(const Tensor& t) {
  const std::vector<int64_t>& d = t.dims;
  const std::vector<int64_t> nhwc = {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]};
  return t.strides == nhwc;
}

// Note [Emulated fusion]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A graph of more than one operation is taken, and computed, in one form: the fused unit of
// bn-relu-conv, a chain of pointwise operations that makes a forward convolution's X from the
// graph's input x, each MUL or ADD by a [1,C,1,1] FLOAT tensor (its B) or a RELU_FWD, with every
// tensor between them virtual and the math precision FLOAT. It runs on its own engine (Note
// [Emulated engines]) as one call on the handle's stream: x is read as floats, each operation applied
// element by element in fp32 and rounded once (mul_rn, add_rn of kernels/numeric.cuh; ReLU as
// x > 0 ? x : 0), the result rounded to x's type, which make_problem requires W and Y to have too
// (bf16 for bf16: the type the tensor cores take), and then the same reference convolution as a
// graph of one convolution computes, into Y (cudnn.cpp's compute). The step's record has it as one
// call, cudnnConvolutionForwardFused, which reads x, W and each B once and writes Y.
// Finalize refuses first what cuDNN's engines document they do not support [G]; then what the
// emulation does not compute, which [G] allows: any other pattern, an epilogue, a backward pass with
// a fusion, a reduction or GenStats. CUTRAIN_EMU_CUDNN_REFUSE=fusion declines every such graph (Note
// [Emulated cuDNN faults] in cudnn.cpp).

// The tensors that an operation of a graph reads and writes, a convolution's as its pass names them.
struct GraphOperation {
  const Descriptor* d;
  std::vector<Tensor> inputs, outputs;
};

GraphOperation graph_operation(const Descriptor& d) {
  if (!is_convolution(d.type)) return {&d, d.node.inputs, d.node.outputs};
  const Convolution& c = d.operation;
  if (c.pass == Pass::forward) return {&d, {c.x, c.w}, {c.y}};
  if (c.pass == Pass::backward_data) return {&d, {c.w, c.y}, {c.x}};
  return {&d, {c.x, c.y}, {c.w}};
}

bool same_tensor(const Tensor& a, const Tensor& b) {
  return a.type == b.type && a.dims == b.dims && a.strides == b.strides && a.alignment == b.alignment &&
         a.is_virtual == b.is_virtual;
}

std::string uid_text(const Tensor& t) { return "UID " + std::to_string(t.uid); }

// The convolution of a fused graph, its x the graph's input and its prologue the chain that makes its
// X (Note [Emulated fusion]).
cudnnStatus_t fused_convolution(const std::vector<Snapshot>& descriptors, Convolution* out) {
  std::vector<GraphOperation> ops;
  for (const Snapshot& d : descriptors) ops.push_back(graph_operation(*d));
  // [ref] CUDNN_ATTR_TENSOR_UNIQUE_ID identifies a tensor within its graph: the operations that share
  // a tensor name it by one UID, and two different tensors do not share one; one operation makes each.
  std::map<int64_t, Tensor> tensors;
  std::map<int64_t, size_t> maker;
  std::vector<size_t> convolutions;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (is_convolution(ops[i].d->type)) convolutions.push_back(i);
    for (const std::vector<Tensor>* list : {&ops[i].inputs, &ops[i].outputs})
      for (const Tensor& t : *list)
        if (const auto [at, added] = tensors.emplace(t.uid, t); !added && !same_tensor(at->second, t))
          return fail(CUDNN_STATUS_BAD_PARAM, "two tensors of the graph share a UID (" + uid_text(t) + ")");
    for (const Tensor& t : ops[i].outputs)
      if (!maker.emplace(t.uid, i).second)
        return fail(CUDNN_STATUS_BAD_PARAM, "two operations of the graph write " + uid_text(t));
  }
  // [ref] A virtual tensor is an intermediate of the graph, made by one of its operations.
  for (const auto& [uid, t] : tensors)
    if (t.is_virtual && !maker.count(uid))
      return fail(CUDNN_STATUS_BAD_PARAM, uid_text(t) + " is virtual, but no operation of the graph makes it");
  if (convolutions.size() != 1)
    return fail(
        CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN,
        "the emulation runs fused graphs of one convolution; this one has " + std::to_string(convolutions.size()));
  const Convolution& conv = ops[convolutions[0]].d->operation;
  // The documented rules: cuDNN's engines support none of these [G].
  int reductions = 0;
  for (const GraphOperation& o : ops) {
    const cudnnBackendDescriptorType_t type = o.d->type;
    // [G, "Operation Specific Constraints", GenStats] GenStats' X is HALF, or FLOAT on Ampere and
    // later; never BFLOAT16.
    if (type == CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR && o.inputs[0].type == CUDNN_DATA_BFLOAT16)
      return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE,
                  "GenStats on a BFLOAT16 X (" + uid_text(o.inputs[0]) + "): its X is HALF or FLOAT [G]");
    if (type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR) {
      // [G, "Support Surface 90"] g2 holds at most one reduction, and it is the exit node.
      if (++reductions > 1)
        return fail(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN, "more than one reduction in a graph [G, SS90]");
      for (const GraphOperation& reader : ops)
        for (const Tensor& t : reader.inputs)
          if (t.uid == o.outputs[0].uid)
            return fail(
                CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN,
                "a reduction that is not the exit node: an operation reads its output (" + uid_text(t) + ") [G, SS90]");
    }
    // [G, "Operation Specific Constraints"] Support surfaces 90 and 80 take pointwise operations
    // with ALPHA1 = ALPHA2 = 1.
    if (type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR && (o.d->node.alpha1 != 1 || o.d->node.alpha2 != 1))
      return fail(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN,
                  "a pointwise operation with ALPHA1 or ALPHA2 other than 1 [G, Operation Specific Constraints]");
  }
  // g1: the operations that the convolution's inputs come from.
  std::vector<bool> in_g1(ops.size(), false);
  std::vector<Tensor> pending = ops[convolutions[0]].inputs;
  while (!pending.empty()) {
    const Tensor t = pending.back();
    pending.pop_back();
    const auto m = maker.find(t.uid);
    if (m == maker.end() || in_g1[m->second]) continue;
    in_g1[m->second] = true;
    pending.insert(pending.end(), ops[m->second].inputs.begin(), ops[m->second].inputs.end());
  }
  const size_t g1 = size_t(std::count(in_g1.begin(), in_g1.end(), true));
  // [G, "Support Surface 90"] ConvolutionBwdFilter fusions: "Fusion operation in g1 is not supported".
  if (conv.pass == Pass::backward_filter && g1 > 0)
    return fail(
        CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN,
        "a prologue (g1) on a backward-filter convolution: \"Fusion operation in g1 is not supported\" [G, SS90]");
  // [G, "Support Surface 90"] "Strided ConvolutionBwdData fusions are not supported".
  if (conv.pass == Pass::backward_data &&
      std::any_of(conv.conv.strides.begin(), conv.conv.strides.end(), [](int64_t stride) { return stride != 1; }))
    return fail(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN,
                "a fusion with a strided backward-data convolution: \"Strided ConvolutionBwdData fusions are not "
                "supported\" [G, SS90]");
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!in_g1[i]) continue;
    // [G, "Support Surface 90"] g1's inputs are 128-bit aligned, and its intermediates virtual.
    for (const Tensor& t : ops[i].inputs)
      if (!maker.count(t.uid) && t.alignment < 16)
        return fail(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN, "an input of a prologue (g1), " + uid_text(t) +
                                                                  ", aligned to " + std::to_string(t.alignment) +
                                                                  " bytes, not 16 [G, SS90]");
    for (const Tensor& t : ops[i].outputs)
      if (!t.is_virtual)
        return fail(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN,
                    "an intermediate of a prologue (g1), " + uid_text(t) + ", that is not virtual [G, SS90]");
  }
  // What the emulation computes: a chain of MUL, ADD and RELU_FWD into a forward convolution's X.
  const auto unsupported = [](const std::string& why) {
    return fail(
        CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN,
        "the emulation computes a fused graph of a pointwise prologue on a forward convolution's X alone: " + why);
  };
  if (conv.pass != Pass::forward) return unsupported("this is a " + kPassNames[int(conv.pass)] + " convolution");
  if (g1 != ops.size() - 1) return unsupported("an operation of the graph is not on the way to the convolution's X");
  Convolution fused = conv;
  Tensor t = conv.x;
  for (auto m = maker.find(t.uid); m != maker.end(); m = maker.find(t.uid)) {
    const Node& n = ops[m->second].d->node;
    if (n.type != CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) return unsupported("a reduction or GenStats in g1");
    const cudnnPointwiseMode_t mode = n.pointwise.mode;
    if (mode != CUDNN_POINTWISE_MUL && mode != CUDNN_POINTWISE_ADD && mode != CUDNN_POINTWISE_RELU_FWD)
      return unsupported("pointwise mode " + std::to_string(int(mode)) + " (it computes MUL, ADD and RELU_FWD)");
    if (n.pointwise.precision != CUDNN_DATA_FLOAT) return unsupported("a math precision other than FLOAT");
    if (n.inputs[0].dims != n.outputs[0].dims) return unsupported("a pointwise X of another shape than its Y");
    PrologueOperation step{mode, n.inputs.size() > 1, {}};
    if (step.has_operand) {
      const Tensor& b = n.inputs[1];
      const std::vector<int64_t> channel = {1, t.dims.size() > 1 ? t.dims[1] : 0, 1, 1};
      if (b.type != CUDNN_DATA_FLOAT || b.dims != channel || b.strides[1] != 1)
        return unsupported("a B (" + uid_text(b) + ") other than a packed [1,C,1,1] FLOAT tensor");
      step.operand = b;
    }
    fused.prologue.insert(fused.prologue.begin(), step);
    t = n.inputs[0];
  }
  if (fused.prologue.size() != g1) return unsupported("a prologue that is not one chain of operations on X");
  if (t.dims != conv.x.dims) return unsupported("a graph input of another shape than the convolution's X");
  fused.x = t;
  *out = fused;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_graph(Descriptor& d) {
  const Value& ops = d.values.at(CUDNN_ATTR_OPERATIONGRAPH_OPS);
  if (cudnnStatus_t s = refused_fusion(ops.count); s != CUDNN_STATUS_SUCCESS) return s;
  Convolution op;
  if (ops.count > 1) {
    if (cudnnStatus_t s = fused_convolution(ops.descriptors, &op); s != CUDNN_STATUS_SUCCESS) return s;
  } else if (!is_convolution(ops.descriptors[0]->type)) {
    return fail(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN,
                "the emulation runs no graph of one pointwise operation, reduction or GenStats");
  } else {
    op = ops.descriptors[0]->operation;
  }
  const OperationNames& names = names_of(op.pass);
  const Tensor* tensors[] = {&op.x, &op.w, &op.y};
  // [ref] CUDNN_ATTR_TENSOR_UNIQUE_ID identifies a tensor within its graph (the variant pack maps
  // UIDs to pointers), so the graph's tensors have distinct UIDs.
  if (op.x.uid == op.w.uid || op.x.uid == op.y.uid || op.w.uid == op.y.uid)
    return fail(CUDNN_STATUS_BAD_PARAM, "two tensors of the graph share a UID");
  for (int i = 0; i < 3; ++i) {
    const Tensor& t = *tensors[i];
    const std::string what = std::string(names.labels[i]) + " (UID " + std::to_string(t.uid) + ")";
    // [ref] A virtual tensor is an intermediate of the graph, never read from or written to device
    // memory; so the graph's own inputs and outputs, here every tensor, cannot be virtual (inferred).
    if (t.is_virtual) return fail(CUDNN_STATUS_BAD_PARAM, what + " is virtual, but no operation of the graph makes it");
    if (t.dims.size() != 4)
      return fail(CUDNN_STATUS_NOT_SUPPORTED_SHAPE, "the emulation computes 2-d convolutions, " + what + " has " +
                                                        std::to_string(t.dims.size()) + " dimensions");
    if (t.type != CUDNN_DATA_FLOAT && t.type != CUDNN_DATA_BFLOAT16)
      return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, "the emulation computes float and bf16 only, not " + what);
    if (!packed_nhwc(t))
      return fail(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT, "the emulation computes packed NHWC (KRSC) only, not " + what);
    if (double(t.dims[0]) * t.dims[1] * t.dims[2] * t.dims[3] > double(std::numeric_limits<int32_t>::max()))
      return fail(CUDNN_STATUS_NOT_SUPPORTED_SHAPE, what + " has more than 2^31 elements");
  }
  if (op.x.dims[1] != op.w.dims[1])
    return fail(CUDNN_STATUS_NOT_SUPPORTED, "the emulation computes no grouped convolution");
  if (op.conv.pre != op.conv.post)
    return fail(CUDNN_STATUS_NOT_SUPPORTED_PADDING, "the emulation pads as much before as after");
  // The legacy descriptors of the same convolution, which the legacy checks take from here: equal
  // pads and strides along height and width, no dilation, cross-correlation, float compute.
  const auto dims4 = [](const Tensor& t) {
    return Dims4{true, CUDNN_TENSOR_NHWC, t.type, int(t.dims[0]), int(t.dims[1]), int(t.dims[2]), int(t.dims[3])};
  };
  const cudnnTensorStruct x{dims4(op.x)}, y{dims4(op.y)};
  const cudnnFilterStruct w{dims4(op.w)};
  const ConvolutionSpec& c = op.conv;
  const cudnnConvolutionStruct conv{true,
                                    int(c.pre[0]),
                                    int(c.pre[1]),
                                    int(c.strides[0]),
                                    int(c.strides[1]),
                                    int(c.dilations[0]),
                                    int(c.dilations[1]),
                                    c.mode,
                                    c.compute,
                                    CUDNN_DEFAULT_MATH};
  if (cudnnStatus_t s = make_problem(&x, &w, &conv, &y, &op.problem); s != CUDNN_STATUS_SUCCESS) return s;
  d.operation = op;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_engine(Descriptor& d) {
  const Descriptor& graph = child(d, CUDNN_ATTR_ENGINE_OPERATION_GRAPH);
  const int64_t index = one<int64_t>(d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX);
  const bool fused = !graph.operation.prologue.empty();
  const Engine* engine = engine_of(graph.operation.pass, index);
  // [H] CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT: a graph's engines have the global indices
  // 0 to that count - 1.
  if (!engine || (engine->fusion && !fused))
    return fail(CUDNN_STATUS_BAD_PARAM, "no engine " + std::to_string(index) + ": the graph's engines are 0 to " +
                                            std::to_string(fused ? kEnginesPerPass : kEnginesPerPass - 1));
  if (fused && !engine->fusion)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, "engine " + std::to_string(index) +
                                                " is a pre-compiled single-operation engine; a fused graph takes the "
                                                "runtime fusion engine " +
                                                std::to_string(kEnginesPerPass));
  size_t workspace = 0;
  if (cudnnStatus_t s = algo_workspace(engine->pass, engine->algo, graph.operation.problem, &workspace);
      s != CUDNN_STATUS_SUCCESS)
    return s;
  d.operation = graph.operation;
  d.engine = index;
  d.values[CUDNN_ATTR_ENGINE_NUMERICAL_NOTE] = value_of(CUDNN_TYPE_NUMERICAL_NOTE, notes_of(*engine));
  d.values[CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE] =
      value_of(CUDNN_TYPE_BEHAVIOR_NOTE, engine->fusion ? std::vector{CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION}
                                                        : std::vector<cudnnBackendBehaviorNote_t>{});
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_engine_config(Descriptor& d) {
  const Descriptor& engine = child(d, CUDNN_ATTR_ENGINECFG_ENGINE);
  d.operation = engine.operation;
  d.engine = engine.engine;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize(Descriptor& d);

// An engine config of `graph`'s engine `index`, made as a caller would make it; null when the
// engine does not take the graph.
Snapshot engine_config(const Snapshot& graph, int64_t index) {
  auto engine = std::make_shared<Descriptor>();
  engine->type = CUDNN_BACKEND_ENGINE_DESCRIPTOR;
  engine->values[CUDNN_ATTR_ENGINE_OPERATION_GRAPH] = value_of(graph);
  engine->values[CUDNN_ATTR_ENGINE_GLOBAL_INDEX] = value_of(CUDNN_TYPE_INT64, std::vector<int64_t>{index});
  auto config = std::make_shared<Descriptor>();
  config->type = CUDNN_BACKEND_ENGINECFG_DESCRIPTOR;
  config->values[CUDNN_ATTR_ENGINECFG_ENGINE] = value_of(engine);
  if (finalize(*engine) != CUDNN_STATUS_SUCCESS || finalize(*config) != CUDNN_STATUS_SUCCESS) return nullptr;
  return config;
}

cudnnStatus_t finalize_heuristics(Descriptor& d) {
  const Snapshot& graph = d.values.at(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH).descriptors[0];
  const auto mode = one<cudnnBackendHeurMode_t>(d, CUDNN_ATTR_ENGINEHEUR_MODE);
  if (mode != CUDNN_HEUR_MODE_A && mode != CUDNN_HEUR_MODE_B && mode != CUDNN_HEUR_MODE_FALLBACK)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, "the emulation's heuristics have modes A, B and FALLBACK");
  const Problem& problem = graph->operation.problem;
  struct Ranked {
    float time;  // the predicted time of the legacy algorithm that the engine computes as
    Snapshot config;
  };
  std::vector<Ranked> ranked;  // in engine index order
  const bool fused = !graph->operation.prologue.empty();
  for (const Engine& e : kEngines) {
    if (e.pass != graph->operation.pass || e.fusion != fused || (mode == CUDNN_HEUR_MODE_FALLBACK && !e.fallback))
      continue;
    Snapshot config = engine_config(graph, e.index);
    size_t workspace = 0;
    if (!config || algo_workspace(e.pass, e.algo, problem, &workspace) != CUDNN_STATUS_SUCCESS) continue;
    ranked.push_back({predicted_time(problem, e.algo, workspace), config});
  }
  // Modes A and B rank as the legacy heuristics rank the algorithms (Note [Emulated engines]).
  if (mode != CUDNN_HEUR_MODE_FALLBACK)
    std::stable_sort(ranked.begin(), ranked.end(), [](const Ranked& l, const Ranked& r) { return l.time < r.time; });
  Value results{CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, {}, {}};
  for (const Ranked& r : ranked) results.descriptors.push_back(r.config);
  results.count = int64_t(results.descriptors.size());
  d.values[CUDNN_ATTR_ENGINEHEUR_RESULTS] = results;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_plan(Descriptor& d) {
  const Descriptor& config = child(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
  const Engine& engine = *engine_of(config.operation.pass, config.engine);
  size_t workspace = 0;
  if (cudnnStatus_t s = algo_workspace(engine.pass, engine.algo, config.operation.problem, &workspace);
      s != CUDNN_STATUS_SUCCESS)
    return s;
  if (cudnnStatus_t s = injected_fault(kPassNames[int(engine.pass)], "engine", std::to_string(engine.index),
                                       {CUDNN_STATUS_NOT_SUPPORTED});
      s != CUDNN_STATUS_SUCCESS)
    return s;
  d.operation = config.operation;
  d.engine = engine.index;
  d.workspace = workspace;
  d.values[CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE] =
      value_of(CUDNN_TYPE_INT64, std::vector<int64_t>{int64_t(workspace)});
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_variant_pack(Descriptor& d) {
  // [ref] CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS holds one pointer per element of
  // CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS.
  const int64_t uids = d.values.at(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS).count;
  const int64_t pointers = d.values.at(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS).count;
  if (uids != pointers)
    return fail(CUDNN_STATUS_BAD_PARAM, "the variant pack has " + std::to_string(uids) + " UIDs and " +
                                            std::to_string(pointers) + " data pointers");
  return CUDNN_STATUS_SUCCESS;
}

struct DescriptorKind {
  cudnnBackendDescriptorType_t type;
  const char* name;
  cudnnStatus_t (*finalize)(Descriptor&);
};
const DescriptorKind kKinds[] = {
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, "CUDNN_BACKEND_TENSOR_DESCRIPTOR", finalize_tensor},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR", finalize_convolution},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, "CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR",
     finalize_operation},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
     "CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR", finalize_operation},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     "CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR", finalize_operation},
    {CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "CUDNN_BACKEND_POINTWISE_DESCRIPTOR", finalize_pointwise},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR",
     finalize_pointwise_operation},
    {CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "CUDNN_BACKEND_REDUCTION_DESCRIPTOR", finalize_reduction},
    {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR",
     finalize_reduction_operation},
    {CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, "CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR", finalize_gen_stats},
    {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR", finalize_graph},
    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR", finalize_heuristics},
    {CUDNN_BACKEND_ENGINE_DESCRIPTOR, "CUDNN_BACKEND_ENGINE_DESCRIPTOR", finalize_engine},
    {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "CUDNN_BACKEND_ENGINECFG_DESCRIPTOR", finalize_engine_config},
    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR", finalize_plan},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR", finalize_variant_pack},
};

const DescriptorKind* kind_of(cudnnBackendDescriptorType_t type) {
  for (const DescriptorKind& k : kKinds)
    if (k.type == type) return &k;
  return nullptr;
}

// The required attributes (Note [Backend finalize rules]), then the type's own rules.
cudnnStatus_t finalize(Descriptor& d) {
  const DescriptorKind& kind = *kind_of(d.type);
  for (const Attribute& a : kAttributes)
    if (a.owner == d.type && a.use == Use::required && !d.values.count(a.name))
      return fail(CUDNN_STATUS_BAD_PARAM, std::string(kind.name) + " needs " + a.label);
  if (cudnnStatus_t s = kind.finalize(d); s != CUDNN_STATUS_SUCCESS) return s;
  d.finalized = true;
  return CUDNN_STATUS_SUCCESS;
}

// ---- setting and getting ----

// [ref] cudnnBackendSetAttribute: CUDNN_STATUS_NOT_INITIALIZED for a finalized descriptor, and
// CUDNN_STATUS_BAD_PARAM for an attribute that the descriptor does not take, of another type, with
// an unexpected number of elements, or with elements that are not valid (a descriptor attribute
// takes finalized descriptors of its type).
cudnnStatus_t set_attribute(Descriptor& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                            int64_t count, const void* elements) {
  const std::string kind = kind_of(d.type)->name;
  if (d.finalized) return fail(CUDNN_STATUS_NOT_INITIALIZED, "the " + kind + " is finalized");
  const Attribute* a = attribute_of(d.type, name);
  if (!a || a->use == Use::answered)
    return fail(CUDNN_STATUS_BAD_PARAM, kind + " has no settable attribute " + std::to_string(int(name)));
  if (type != a->type && !(a->or_double && type == CUDNN_TYPE_DOUBLE))
    return fail(CUDNN_STATUS_BAD_PARAM,
                std::string(a->label) + " takes " + type_name(a->type) + ", not " + type_name(type));
  if (count < a->min_count || count > a->max_count)
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(a->label) + " takes " + std::to_string(a->min_count) + " to " +
                                            std::to_string(a->max_count) + " elements, not " + std::to_string(count));
  if (count > 0 && !elements) return fail(CUDNN_STATUS_BAD_PARAM, std::string(a->label) + ": the elements are null");
  Value v{type, count, {}, {}};
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
    for (int64_t i = 0; i < count; ++i) {
      const Descriptor* e = descriptor_of(static_cast<const cudnnBackendDescriptor_t*>(elements)[i]);
      const bool fits = e && (a->points_to == kAnyOperation ? is_operation(e->type) : int(e->type) == a->points_to);
      if (!fits || !e->finalized)
        return fail(CUDNN_STATUS_BAD_PARAM, std::string(a->label) + ": element " + std::to_string(i) +
                                                " is not a finalized descriptor of the type it takes");
      v.descriptors.push_back(std::make_shared<const Descriptor>(*e));
    }
  } else if (count > 0) {
    v.bytes.resize(size_t(count) * type_info(type)->size);
    std::memcpy(v.bytes.data(), elements, v.bytes.size());
  }
  d.values[name] = std::move(v);
  return CUDNN_STATUS_SUCCESS;
}

// [ref] cudnnBackendGetAttribute: `*count` is how many elements the attribute has, and the first
// `requested` of them are written. A descriptor attribute is written into the caller's descriptors,
// created beforehand with the type it has. The emulation answers finalized descriptors only.
cudnnStatus_t get_attribute(const Descriptor& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                            int64_t requested, int64_t* count, void* elements) {
  const std::string kind = kind_of(d.type)->name;
  if (!count || requested < 0) return fail(CUDNN_STATUS_BAD_PARAM, "the count pointer is null or requested negative");
  if (!d.finalized) return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "the " + kind + " is not finalized");
  const Attribute* a = attribute_of(d.type, name);
  if (!a) return fail(CUDNN_STATUS_BAD_PARAM, kind + " has no attribute " + std::to_string(int(name)));
  const auto it = d.values.find(name);
  const Value unset{type, 0, {}, {}};
  const Value& v = it == d.values.end() ? unset : it->second;
  if (type != v.type)
    return fail(CUDNN_STATUS_BAD_PARAM,
                std::string(a->label) + " is " + type_name(v.type) + ", not " + type_name(type));
  const int64_t written = std::min(requested, v.count);
  if (written > 0 && !elements) return fail(CUDNN_STATUS_BAD_PARAM, std::string(a->label) + ": the array is null");
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
    for (int64_t i = 0; i < written; ++i) {
      Descriptor* target = descriptor_of(static_cast<cudnnBackendDescriptor_t*>(elements)[i]);
      if (!target || target->type != v.descriptors[size_t(i)]->type)
        return fail(CUDNN_STATUS_BAD_PARAM, std::string(a->label) + ": element " + std::to_string(i) +
                                                " is not a descriptor of type " +
                                                kind_of(v.descriptors[size_t(i)]->type)->name);
    }
    for (int64_t i = 0; i < written; ++i)
      *descriptor_of(static_cast<cudnnBackendDescriptor_t*>(elements)[i]) = *v.descriptors[size_t(i)];
  } else if (written > 0) {
    std::memcpy(elements, v.bytes.data(), size_t(written) * type_info(type)->size);
  }
  *count = v.count;
  return CUDNN_STATUS_SUCCESS;
}

// ---- execution ----

// [ref] cudnnBackendExecute: CUDNN_STATUS_BAD_PARAM for a plan or variant pack that is not finalized
// or does not fit. The emulation checks what a GPU cannot: that every tensor's UID has a pointer,
// each inside one live device allocation of the tensor's size and aligned to its byte alignment
// (CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER), and the workspace inside one of the plan's size; a
// fused graph's prologue operands too. Then the work goes on the handle's stream, as the legacy
// call's does.
cudnnStatus_t execute(cudnnHandle_t handle, const Descriptor& plan, const Descriptor& pack) {
  const Convolution& op = plan.operation;
  const OperationNames& names = names_of(op.pass);
  const std::vector<int64_t> uids = elements_of<int64_t>(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
  const std::vector<void*> pointers = elements_of<void*>(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
  // x, w and y, then the prologue's operands, each with its label and bytes.
  std::vector<const Tensor*> tensors = {&op.x, &op.w, &op.y};
  std::vector<std::string> labels = {names.labels[0], names.labels[1], names.labels[2]};
  std::vector<size_t> bytes = {bytes_of(op.problem.x), bytes_of(op.problem.w), bytes_of(op.problem.y)};
  for (const PrologueOperation& step : op.prologue) {
    if (!step.has_operand) continue;
    tensors.push_back(&step.operand);
    labels.push_back("the prologue's B");
    bytes.push_back(size_t(step.operand.dims[1]) * sizeof(float));
  }
  std::vector<void*> data(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string what = labels[i] + " (UID " + std::to_string(tensors[i]->uid) + ")";
    const auto at = std::find(uids.begin(), uids.end(), tensors[i]->uid);
    if (at == uids.end()) return fail(CUDNN_STATUS_BAD_PARAM, "the variant pack has no pointer for " + what);
    data[i] = pointers[size_t(at - uids.begin())];
    if (cudnnStatus_t s = check_device(data[i], bytes[i], what.c_str()); s != CUDNN_STATUS_SUCCESS) return s;
    if (reinterpret_cast<uintptr_t>(data[i]) % uintptr_t(tensors[i]->alignment) != 0)
      return fail(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER,
                  what + " is not aligned to " + std::to_string(tensors[i]->alignment) + " bytes");
  }
  void* workspace = one<void*>(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, nullptr);
  if (plan.workspace > 0)
    if (cudnnStatus_t s = check_device(workspace, plan.workspace, "the workspace"); s != CUDNN_STATUS_SUCCESS) return s;
  const Engine& engine = *engine_of(op.pass, plan.engine);
  if (cudnnStatus_t s = injected_fault(kPassNames[int(op.pass)], "engine", std::to_string(engine.index),
                                       {CUDNN_STATUS_EXECUTION_FAILED, CUDNN_STATUS_BAD_PARAM});
      s != CUDNN_STATUS_SUCCESS)
    return s;
  // The operands in the legacy call's order (cudnn_convolution.h): x, w, y; w, dy, dx; x, dy, dw.
  const Operands operands = op.pass == Pass::forward         ? Operands{data[0], data[1], data[2]}
                            : op.pass == Pass::backward_data ? Operands{data[1], data[2], data[0]}
                                                             : Operands{data[0], data[2], data[1]};
  std::vector<PointwiseStep> prologue;
  size_t next_operand = 3;
  for (const PrologueOperation& step : op.prologue)
    prologue.push_back({step.mode, step.has_operand ? static_cast<const float*>(data[next_operand++]) : nullptr});
  return launch(handle, op.pass, op.problem, operands, op.alpha, op.beta, workspace, plan.workspace,
                algo_is_atomic(engine.pass, engine.algo), prologue);
}

}  // namespace
}  // namespace cutrain::emu::cudnn

using namespace cutrain::emu::cudnn;

extern "C" {

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t* descriptor) {
  if (!descriptor) return fail(CUDNN_STATUS_BAD_PARAM, "the descriptor pointer is null");
  if (!kind_of(type))
    return fail(CUDNN_STATUS_NOT_SUPPORTED,
                "the emulation has no backend descriptor type " + std::to_string(int(type)));
  auto* d = new Descriptor;
  d->type = type;
  *descriptor = d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
  delete descriptor_of(descriptor);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
  if (!descriptor) return fail(CUDNN_STATUS_BAD_PARAM, "the descriptor is null");
  return finalize(*descriptor_of(descriptor));
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count, const void* elements) {
  if (!descriptor) return fail(CUDNN_STATUS_BAD_PARAM, "the descriptor is null");
  return set_attribute(*descriptor_of(descriptor), name, type, count, elements);
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested, int64_t* count,
                                       void* elements) {
  if (!descriptor) return fail(CUDNN_STATUS_BAD_PARAM, "the descriptor is null");
  return get_attribute(*descriptor_of(descriptor), name, type, requested, count, elements);
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack) {
  if (!handle || !plan || !pack) return fail(CUDNN_STATUS_BAD_PARAM, "the handle, plan or variant pack is null");
  const Descriptor &p = *descriptor_of(plan), &v = *descriptor_of(pack);
  if (p.type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || v.type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
    return fail(CUDNN_STATUS_BAD_PARAM, "the plan or the variant pack is a descriptor of another type");
  if (!p.finalized || !v.finalized)
    return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "the plan or the variant pack is not finalized");
  return execute(handle, p, v);
}

}  // extern "C"
