// The emulated cuDNN's graph API (emu/cudnn_graph.cpp): a graph of each convolution gives the legacy
// call's bits, finalize refuses what cuDNN documents and what the emulation does not compute, the
// variant pack's pointers are checked, the heuristics rank the engines with their notes and
// workspaces, and CUTRAIN_EMU_CUDNN_FAIL makes an engine fail. A fused graph (a pointwise prologue on
// a forward convolution's X) computes the prologue and then the convolution, runs on an engine of its
// own, is recorded as one fused call, and is refused by the rules cuDNN documents and by
// CUTRAIN_EMU_CUDNN_REFUSE=fusion.
#include <catch2/catch.hpp>

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "emu/recording.h"
#include "kernels/base/check.h"
#include "kernels/conv2d_cpu.h"
#include "tests/device_buffer.h"
#include "tests/emu/cudnn_convolution.h"
#include "tests/gradcheck.h"

using namespace cutrain;
using test::Convolution;
using test::cudnn_type;
using test::PoisonedBuffer;
using test::FaultScope;
using test::Pass;

namespace {

// One backend descriptor, destroyed with its scope.
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type) { CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_)); }
  ~Descriptor() { cudnnBackendDestroyDescriptor(d_); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  template <typename T>
  cudnnStatus_t set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, std::vector<T> values) {
    return cudnnBackendSetAttribute(d_, name, type, int64_t(values.size()), values.data());
  }
  cudnnStatus_t set(cudnnBackendAttributeName_t name, const Descriptor& d) {
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, std::vector<cudnnBackendDescriptor_t>{d.get()});
  }
  cudnnStatus_t finalize() { return cudnnBackendFinalize(d_); }
  // Every element of a finalized descriptor's attribute that is not a descriptor.
  template <typename T>
  std::vector<T> get(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type) const {
    int64_t count = 0;
    CUDNN_CHECK(cudnnBackendGetAttribute(d_, name, type, 0, &count, nullptr));
    std::vector<T> values(static_cast<size_t>(count));
    CUDNN_CHECK(cudnnBackendGetAttribute(d_, name, type, count, &count, values.data()));
    return values;
  }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// One change each from a graph that cutrain makes, for the refusals.
struct Changes {
  int64_t dilation = 1;
  bool nchw_x = false;       // X's strides are NCHW's
  bool virtual_y = false;    // Y is virtual
  bool y_has_x_uid = false;  // Y's UID is X's
  int64_t y_width = 0;       // added to Y's width
  int64_t spatial_dims = 2;  // CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, with vectors of 2 elements
};

// A graph of one convolution pass over X (UID 1), W (UID 2) and Y (UID 3) in NHWC (W in KRSC), with
// each descriptor set and finalized in turn. `status` is the first call's that failed, if any, and
// `failed_in` the kind of descriptor it set or finalized.
struct ConvGraph {
  ConvGraph(Pass pass, const ConvShape& s, cudnnDataType_t type, float alpha, float beta, const Changes& c = {})
      : op(kOperationTypes[int(pass)]) {
    tensor(x, 1, {s.N, s.C, s.H, s.W}, type, c.nchw_x, false);
    tensor(w, 2, {s.K, s.C, s.R, s.S}, type, false, false);
    tensor(y, c.y_has_x_uid ? 1 : 3, {s.N, s.K, s.P(), s.Q() + c.y_width}, type, false, c.virtual_y);
    const std::vector<int64_t> pads(2, s.pad), strides(2, s.stride), dilations(2, c.dilation);
    stage = "convolution";
    step(conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, std::vector{CUDNN_DATA_FLOAT}));
    step(conv.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, std::vector{CUDNN_CROSS_CORRELATION}));
    step(conv.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, std::vector<int64_t>{c.spatial_dims}));
    step(conv.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, pads));
    step(conv.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, pads));
    step(conv.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, strides));
    step(conv.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dilations));
    step(conv.finalize());
    const cudnnBackendAttributeName_t* names = kOperationAttributes[int(pass)];
    stage = "operation";
    step(op.set(names[0], x));
    step(op.set(names[1], w));
    step(op.set(names[2], y));
    step(op.set(names[3], conv));
    step(op.set(names[4], CUDNN_TYPE_FLOAT, std::vector{alpha}));
    step(op.set(names[5], CUDNN_TYPE_FLOAT, std::vector{beta}));
    step(op.finalize());
    stage = "graph";
    step(graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, op));
    step(graph.finalize());
  }

  Descriptor x{CUDNN_BACKEND_TENSOR_DESCRIPTOR}, w{CUDNN_BACKEND_TENSOR_DESCRIPTOR}, y{CUDNN_BACKEND_TENSOR_DESCRIPTOR};
  Descriptor conv{CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR}, op, graph{CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR};
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  std::string failed_in;

 private:
  static constexpr cudnnBackendDescriptorType_t kOperationTypes[] = {
      CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
      CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
      CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
  // Each pass's X, W, Y (as the forward names them), CONV_DESC, ALPHA and BETA.
  static constexpr cudnnBackendAttributeName_t kOperationAttributes[][6] = {
      {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
      {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
      {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA}};
  const char* stage = "tensor";

  void step(cudnnStatus_t s) {
    if (status != CUDNN_STATUS_SUCCESS || s == CUDNN_STATUS_SUCCESS) return;
    status = s;
    failed_in = stage;
  }
  void tensor(Descriptor& t, int64_t uid, const std::vector<int64_t>& d, cudnnDataType_t type, bool nchw,
              bool is_virtual) {
    const std::vector<int64_t> strides = nchw ? std::vector<int64_t>{d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}
                                              : std::vector<int64_t>{d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]};
    step(t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, std::vector{type}));
    step(t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, d));
    step(t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides));
    step(t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, std::vector{uid}));
    step(t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, std::vector<int64_t>{16}));
    const bool flag = is_virtual;
    if (is_virtual) step(cudnnBackendSetAttribute(t.get(), CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &flag));
    step(t.finalize());
  }
};

// The engine configs that heuristics `mode` ranks for `graph`, best first.
std::vector<std::unique_ptr<Descriptor>> ranked_configs(const Descriptor& graph, cudnnBackendHeurMode_t mode) {
  Descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  CUDNN_CHECK(heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph));
  CUDNN_CHECK(heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, std::vector{mode}));
  CUDNN_CHECK(heuristics.finalize());
  int64_t count = 0;
  CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                       0, &count, nullptr));
  std::vector<std::unique_ptr<Descriptor>> configs;
  std::vector<cudnnBackendDescriptor_t> handles;
  for (int64_t i = 0; i < count; ++i) {
    configs.push_back(std::make_unique<Descriptor>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    handles.push_back(configs.back()->get());
  }
  CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                       count, &count, handles.data()));
  return configs;
}

// The engine that a config names, finalized.
std::unique_ptr<Descriptor> engine_of(const Descriptor& config) {
  auto engine = std::make_unique<Descriptor>(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t handle = engine->get();
  int64_t count = 0;
  CUDNN_CHECK(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                       &count, &handle));
  return engine;
}

int64_t global_index(const Descriptor& config) {
  return engine_of(config)->get<int64_t>(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64)[0];
}

// Mode A's config of `graph`'s engine `index`.
std::unique_ptr<Descriptor> config_of(const Descriptor& graph, int64_t index) {
  for (auto& config : ranked_configs(graph, CUDNN_HEUR_MODE_A))
    if (global_index(*config) == index) return std::move(config);
  FAIL("mode A does not list engine " << index);
  return nullptr;
}

// An execution plan of `config`, finalized; `status` is finalize's.
struct Plan {
  explicit Plan(const Descriptor& config) {
    CUDNN_CHECK(plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config));
    status = plan.finalize();
    if (status == CUDNN_STATUS_SUCCESS)
      workspace = plan.get<int64_t>(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64)[0];
  }
  Descriptor plan{CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR};
  cudnnStatus_t status;
  int64_t workspace = 0;
};

cudnnStatus_t execute(cudnnHandle_t handle, const Plan& plan, const std::vector<void*>& pointers, void* workspace,
                      const std::vector<int64_t>& uids = {1, 2, 3}) {
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  CUDNN_CHECK(pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids));
  CUDNN_CHECK(pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, pointers));
  CUDNN_CHECK(pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, std::vector{workspace}));
  CUDNN_CHECK(pack.finalize());
  return cudnnBackendExecute(handle, plan.plan.get(), pack.get());
}

// A deterministic legacy algorithm of each pass. Every deterministic algorithm, and every engine
// that computes as one, gives the same bits (Note [Emulated engines]).
int legacy_algo(Pass pass) {
  if (pass == Pass::forward) return CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  return pass == Pass::backward_data ? int(CUDNN_CONVOLUTION_BWD_DATA_ALGO_1) : int(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
}

std::string last_error() {
  char message[512];
  cudnnGetLastErrorString(message, sizeof message);
  return message;
}

}  // namespace

TEMPLATE_TEST_CASE("emulated cuDNN: a graph of each convolution gives the legacy call's bits", "[emu]", float,
                   __nv_bfloat16) {
  // Backward data accumulates (beta = 1), as cutrain's identity shortcuts do.
  std::mt19937 rng(33);
  for (const ConvShape& s : {ConvShape{2, 9, 9, 3, 4, 3, 3, 2, 1}, ConvShape{2, 6, 6, 5, 3, 3, 3, 1, 1}}) {
    CAPTURE(s.H, s.C, s.K, s.stride);
    Convolution legacy(s, cudnn_type<TestType>());
    const size_t x_n = size_t(s.N) * s.H * s.W * s.C, w_n = size_t(s.K) * s.R * s.S * s.C,
                 y_n = size_t(s.N) * s.P() * s.Q() * s.K;
    const auto values = [&](size_t n) { return test::convert_to<TestType>(test::random_vector(n, rng)); };
    PoisonedBuffer<TestType> x(values(x_n)), w(values(w_n)), y(values(y_n));
    for (Pass pass : {Pass::forward, Pass::backward_data, Pass::backward_filter}) {
      CAPTURE(int(pass));
      const float alpha = 0.5f, beta = pass == Pass::backward_data ? 1.0f : 0.0f;
      ConvGraph g(pass, s, cudnn_type<TestType>(), alpha, beta);
      REQUIRE(g.status == CUDNN_STATUS_SUCCESS);
      const size_t out_n = pass == Pass::forward ? y_n : pass == Pass::backward_data ? x_n : w_n;
      const auto prior = values(out_n);
      const void* a = pass == Pass::backward_data ? w.get() : x.get();
      const void* b = pass == Pass::forward ? w.get() : y.get();
      // Engines 0 and 2, which every pass has deterministic (Note [Emulated engines]).
      for (int64_t index : {0, 2}) {
        CAPTURE(index);
        const Plan plan(*config_of(g.graph, index));
        REQUIRE(plan.status == CUDNN_STATUS_SUCCESS);
        PoisonedBuffer<unsigned char> workspace(std::max<size_t>(size_t(plan.workspace), 1));
        PoisonedBuffer<TestType> by_graph(prior), by_legacy(prior);
        const std::vector<void*> xwy = pass == Pass::forward         ? std::vector<void*>{x.get(), w.get(), by_graph.get()}
                                       : pass == Pass::backward_data ? std::vector<void*>{by_graph.get(), w.get(), y.get()}
                                                                     : std::vector<void*>{x.get(), by_graph.get(), y.get()};
        REQUIRE(execute(legacy.handle, plan, xwy, workspace.get()) == CUDNN_STATUS_SUCCESS);
        const int algo = legacy_algo(pass);
        const size_t legacy_bytes = legacy.workspace(pass, algo);
        PoisonedBuffer<unsigned char> legacy_workspace(std::max<size_t>(legacy_bytes, 1));
        REQUIRE(legacy.run(pass, algo, alpha, a, b, beta, by_legacy.get(), legacy_workspace.get(), legacy_bytes) ==
                CUDNN_STATUS_SUCCESS);
        CHECK(test::download(by_graph) == test::download(by_legacy));
      }
    }
  }
}

TEST_CASE("emulated cuDNN: graph finalize refuses what cuDNN documents and what the emulation does not compute",
          "[emu]") {
  const ConvShape s{2, 8, 8, 4, 6, 1, 1, 1, 0};  // 1x1: dilation keeps the output's size
  struct Case {
    const char* what;
    Changes changes;
    cudnnStatus_t status;
    const char* failed_in;  // as cuDNN documents, or where the emulation refuses what it does not compute
  };
  for (const Case& c : {
           Case{"a graph cutrain makes", {}, CUDNN_STATUS_SUCCESS, ""},
           Case{"a spatial-dimension count that its vectors do not have", {.spatial_dims = 3}, CUDNN_STATUS_BAD_PARAM,
                "convolution"},
           Case{"a Y that is not the convolution's output size", {.y_width = 1}, CUDNN_STATUS_BAD_PARAM, "operation"},
           Case{"two tensors with one UID", {.y_has_x_uid = true}, CUDNN_STATUS_BAD_PARAM, "graph"},
           Case{"a virtual tensor that no operation makes", {.virtual_y = true}, CUDNN_STATUS_BAD_PARAM, "graph"},
           Case{"NCHW, which the emulation does not compute", {.nchw_x = true}, CUDNN_STATUS_NOT_SUPPORTED_LAYOUT,
                "graph"},
           Case{"dilation, which the emulation does not compute", {.dilation = 2}, CUDNN_STATUS_NOT_SUPPORTED, "graph"},
       }) {
    CAPTURE(c.what);
    const ConvGraph g(Pass::forward, s, CUDNN_DATA_FLOAT, 1.0f, 0.0f, c.changes);
    CHECK(g.status == c.status);
    CHECK(g.failed_in == c.failed_in);
  }

  // Attributes are checked as they are set: type, count, and that a finalized descriptor takes none.
  Descriptor tensor(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  CHECK(tensor.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_FLOAT, std::vector{1.0f}) == CUDNN_STATUS_BAD_PARAM);
  CHECK(last_error().find("CUDNN_ATTR_TENSOR_UNIQUE_ID takes CUDNN_TYPE_INT64, not CUDNN_TYPE_FLOAT") !=
        std::string::npos);
  CHECK(tensor.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, std::vector<int64_t>{1, 2}) ==
        CUDNN_STATUS_BAD_PARAM);
  CHECK(tensor.set(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, std::vector<int64_t>{0}) ==
        CUDNN_STATUS_BAD_PARAM);
  CHECK(tensor.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, std::vector<int64_t>{1, 4, 8, 8}) ==
        CUDNN_STATUS_SUCCESS);
  CHECK(tensor.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, std::vector<int64_t>{256, 1, 32}) ==
        CUDNN_STATUS_SUCCESS);
  CHECK(tensor.finalize() == CUDNN_STATUS_BAD_PARAM);  // no data type, UID or alignment
  CHECK(last_error().find("needs CUDNN_ATTR_TENSOR_DATA_TYPE") != std::string::npos);
  ConvGraph g(Pass::backward_filter, s, CUDNN_DATA_BFLOAT16, 1.0f, 0.0f);
  REQUIRE(g.status == CUDNN_STATUS_SUCCESS);
  CHECK(g.graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, g.op) == CUDNN_STATUS_NOT_INITIALIZED);
  // An operation takes finalized tensors only.
  Descriptor forward(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  CHECK(forward.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, tensor) == CUDNN_STATUS_BAD_PARAM);
  CHECK(forward.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, g.conv) == CUDNN_STATUS_BAD_PARAM);
  CHECK(forward.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, g.x) == CUDNN_STATUS_SUCCESS);
}

TEST_CASE("emulated cuDNN: heuristics rank three engines per pass with their notes and workspaces", "[emu]") {
  const ConvShape s{2, 8, 8, 4, 6, 3, 3, 2, 1};
  for (Pass pass : {Pass::forward, Pass::backward_data, Pass::backward_filter}) {
    CAPTURE(int(pass));
    const ConvGraph g(pass, s, CUDNN_DATA_FLOAT, 1.0f, 0.0f);
    REQUIRE(g.status == CUDNN_STATUS_SUCCESS);
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_B}) {
      const auto configs = ranked_configs(g.graph, mode);
      REQUIRE(configs.size() == 3);
      // By the legacy heuristics' predicted time of the algorithm each engine computes as: forward's
      // IMPLICIT_GEMM (2) needs no workspace; backward's atomic ALGO_0 (1) needs none and has the
      // lower number; ties by index.
      const std::vector<int64_t> order = pass == Pass::forward ? std::vector<int64_t>{2, 0, 1} : std::vector<int64_t>{1, 0, 2};
      for (size_t rank = 0; rank < 3; ++rank) {
        const Descriptor& config = *configs[rank];
        const int64_t index = global_index(config);
        CHECK(index == order[rank]);
        const auto engine = engine_of(config);
        const auto notes =
            engine->get<cudnnBackendNumericalNote_t>(CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE);
        const std::vector<cudnnBackendNumericalNote_t> expected =
            index == 0                               ? std::vector{CUDNN_NUMERICAL_NOTE_TENSOR_CORE}
            : index == 1 && pass != Pass::forward ? std::vector{CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC}
                                                    : std::vector<cudnnBackendNumericalNote_t>{};
        CHECK(notes == expected);
        CHECK(engine->get<cudnnBackendBehaviorNote_t>(CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE)
                  .empty());
        const Plan plan(config);
        REQUIRE(plan.status == CUDNN_STATUS_SUCCESS);
        const int64_t index_table = int64_t(s.R) * s.S * s.C * 4, accumulator = int64_t(s.K) * index_table;
        const int64_t workspace = pass == Pass::forward         ? (index < 2 ? index_table : 0)
                                  : pass == Pass::backward_data ? 0
                                                                : (index == 1 ? 0 : accumulator);
        CHECK(plan.workspace == workspace);
      }
    }
    const auto fallback = ranked_configs(g.graph, CUDNN_HEUR_MODE_FALLBACK);
    REQUIRE(fallback.size() == 1);
    CHECK(global_index(*fallback[0]) == 2);
  }
}

TEST_CASE("emulated cuDNN: a variant pack's pointers must lie in device allocations of the tensors' sizes",
          "[emu]") {
  const ConvShape s{2, 8, 8, 4, 6, 3, 3, 1, 1};
  Convolution legacy(s, CUDNN_DATA_FLOAT);  // for its handle
  const ConvGraph g(Pass::backward_filter, s, CUDNN_DATA_FLOAT, 1.0f, 0.0f);
  REQUIRE(g.status == CUDNN_STATUS_SUCCESS);
  const Plan plan(*config_of(g.graph, 0));
  REQUIRE(plan.workspace > 0);
  const size_t x_n = size_t(s.N) * s.H * s.W * s.C, w_n = size_t(s.K) * s.R * s.S * s.C,
               y_n = size_t(s.N) * s.P() * s.Q() * s.K;
  PoisonedBuffer<float> x(x_n), dw(w_n), dy(y_n), short_dw(w_n - 1), long_x(x_n + 1);
  PoisonedBuffer<unsigned char> workspace(size_t(plan.workspace)), short_workspace(size_t(plan.workspace) - 1);
  std::vector<float> host_x(x_n);
  CHECK(execute(legacy.handle, plan, {x.get(), dw.get(), dy.get()}, workspace.get()) == CUDNN_STATUS_SUCCESS);
  CHECK(execute(legacy.handle, plan, {host_x.data(), dw.get(), dy.get()}, workspace.get()) == CUDNN_STATUS_BAD_PARAM);
  CHECK(last_error().find("X (UID 1) is not") != std::string::npos);
  CHECK(execute(legacy.handle, plan, {x.get(), short_dw.get(), dy.get()}, workspace.get()) == CUDNN_STATUS_BAD_PARAM);
  CHECK(execute(legacy.handle, plan, {x.get(), dw.get(), dy.get()}, short_workspace.get()) == CUDNN_STATUS_BAD_PARAM);
  CHECK(execute(legacy.handle, plan, {x.get(), dw.get(), dy.get()}, nullptr) == CUDNN_STATUS_BAD_PARAM);
  CHECK(execute(legacy.handle, plan, {x.get(), dw.get()}, workspace.get(), {1, 2}) == CUDNN_STATUS_BAD_PARAM);
  CHECK(last_error().find("no pointer for DY (UID 3)") != std::string::npos);
  CHECK(execute(legacy.handle, plan, {long_x.get() + 1, dw.get(), dy.get()}, workspace.get()) ==
        CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER);  // 4 bytes past a 256-byte boundary; the tensors say 16
  CUDA_CHECK(cudaDeviceSynchronize());
}

TEST_CASE("emulated cuDNN: CUTRAIN_EMU_CUDNN_FAIL with engine=N makes that engine's plan or execution fail",
          "[emu]") {
  const ConvShape s{1, 6, 6, 4, 4, 3, 3, 1, 1};
  Convolution legacy(s, CUDNN_DATA_FLOAT);
  const ConvGraph g(Pass::backward_data, s, CUDNN_DATA_FLOAT, 1.0f, 0.0f);
  REQUIRE(g.status == CUDNN_STATUS_SUCCESS);
  const size_t n = size_t(s.N) * s.H * s.W * s.C;
  PoisonedBuffer<float> dx(n), w(size_t(s.K) * s.R * s.S * s.C), dy(n);
  const auto engine0 = config_of(g.graph, 0), engine1 = config_of(g.graph, 1), engine2 = config_of(g.graph, 2);
  FaultScope fault("backward_data:engine=0:not_supported,backward_data:engine=1:execution_failed,forward:engine=2:"
                   "execution_failed");
  CHECK(Plan(*engine0).status == CUDNN_STATUS_NOT_SUPPORTED);
  CHECK(last_error().find("CUTRAIN_EMU_CUDNN_FAIL") != std::string::npos);
  const Plan failing(*engine1), working(*engine2);
  REQUIRE(failing.status == CUDNN_STATUS_SUCCESS);
  CHECK(execute(legacy.handle, failing, {dx.get(), w.get(), dy.get()}, nullptr) == CUDNN_STATUS_EXECUTION_FAILED);
  CHECK(execute(legacy.handle, working, {dx.get(), w.get(), dy.get()}, nullptr) == CUDNN_STATUS_SUCCESS);
  CUDA_CHECK(cudaDeviceSynchronize());
}

TEST_CASE("emulated cuDNN: an execution on a capturing stream becomes part of the CUDA graph", "[emu]") {
  std::mt19937 rng(5);
  const ConvShape s{1, 6, 6, 4, 4, 3, 3, 1, 1};
  Convolution legacy(s, CUDNN_DATA_FLOAT);  // its handle works on its stream
  const ConvGraph g(Pass::forward, s, CUDNN_DATA_FLOAT, 1.0f, 0.0f);
  REQUIRE(g.status == CUDNN_STATUS_SUCCESS);
  const Plan plan(*config_of(g.graph, 0));  // with a workspace
  const size_t n = size_t(s.N) * s.H * s.W * s.C;
  PoisonedBuffer<float> x(test::random_vector(n, rng)), w(test::random_vector(size_t(s.K) * s.R * s.S * s.C, rng)),
      direct(n), replayed(n);
  PoisonedBuffer<unsigned char> workspace(size_t(plan.workspace));
  REQUIRE(execute(legacy.handle, plan, {x.get(), w.get(), direct.get()}, workspace.get()) == CUDNN_STATUS_SUCCESS);
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(legacy.stream, cudaStreamCaptureModeThreadLocal));
  REQUIRE(execute(legacy.handle, plan, {x.get(), w.get(), replayed.get()}, workspace.get()) == CUDNN_STATUS_SUCCESS);
  CUDA_CHECK(cudaStreamEndCapture(legacy.stream, &graph));
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CHECK(std::isnan(replayed.copy_to_host()[0]));  // captured, not run
  CUDA_CHECK(cudaGraphLaunch(exec, legacy.stream));
  CUDA_CHECK(cudaStreamSynchronize(legacy.stream));
  CHECK(replayed.copy_to_host() == direct.copy_to_host());
  CUDA_CHECK(cudaGraphExecDestroy(exec));
}

namespace {

// One change each from the fused graph that cutrain makes (Note [Emulated fusion] in
// emu/cudnn_graph.cpp), for the refusals.
struct FusionChanges {
  Pass pass = Pass::forward;  // the prologue on X (backward data: on DY)
  float alpha1 = 1;                           // of the MUL
  int64_t scale_alignment = 16;               // the MUL's B
  bool written_product = false;               // the MUL's Y is not virtual
  cudnnPointwiseMode_t add = CUDNN_POINTWISE_ADD;
  int reductions = 0;                         // over Y, into [1,K,1,1] FLOAT
  bool reduction_read = false;                // one pointwise reads the (one) reduction's output
  bool gen_stats = false;                     // GenStats over Y
};

// A fused graph over tensors of type `type`: x (UID 1), MUL by scale (UID 4, [1,C,1,1] FLOAT) into
// UID 6, ADD shift (UID 5) into UID 7, RELU_FWD into UID 8, the convolution's X, virtual all three;
// W (UID 2) and Y (UID 3). Backward data takes the prologue on DY (UIDs as forward's X) and writes DX.
// `status` is the first failure of a set or finalize, and `failed_in` what it set or finalized.
struct FusedGraph {
  FusedGraph(const ConvShape& s, cudnnDataType_t type, const FusionChanges& c = {}) {
    const bool data = c.pass == Pass::backward_data;
    // The prologue's input, of the convolution's X (backward data: DY), and its other two tensors.
    const std::vector<int64_t> in = data ? std::vector<int64_t>{s.N, s.K, s.P(), s.Q()}
                                         : std::vector<int64_t>{s.N, s.C, s.H, s.W};
    const std::vector<int64_t> out = data ? std::vector<int64_t>{s.N, s.C, s.H, s.W}
                                          : std::vector<int64_t>{s.N, s.K, s.P(), s.Q()};
    const std::vector<int64_t> channel = {1, in[1], 1, 1};
    Descriptor &x = tensor(1, in, type), &w = tensor(2, {s.K, s.C, s.R, s.S}, type), &y = tensor(3, out, type);
    Descriptor &scale = tensor(4, channel, CUDNN_DATA_FLOAT, false, c.scale_alignment),
               &shift = tensor(5, channel, CUDNN_DATA_FLOAT);
    Descriptor &product = tensor(6, in, CUDNN_DATA_FLOAT, !c.written_product), &sum = tensor(7, in, CUDNN_DATA_FLOAT, true),
               &activation = tensor(8, in, type, true);
    pointwise(CUDNN_POINTWISE_MUL, x, &scale, product, c.alpha1);
    pointwise(c.add, product, &shift, sum);
    pointwise(CUDNN_POINTWISE_RELU_FWD, sum, nullptr, activation);
    Descriptor& conv = convolution(s);
    stage = "operation";
    static constexpr cudnnBackendDescriptorType_t kTypes[] = {
        CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
    Descriptor& op = make(kTypes[int(c.pass)]);
    const float one = 1, zero = 0;
    if (c.pass == Pass::forward) {
      step(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, activation));
      step(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w));
      step(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, y));
      step(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv));
      step(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, std::vector{one}));
      step(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, std::vector{zero}));
    } else if (data) {
      step(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, activation));
      step(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, w));
      step(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, y));
      step(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, conv));
      step(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, std::vector{one}));
      step(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, std::vector{zero}));
    } else {  // backward filter: the prologue on X, Y is DY, and W is DW
      step(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, activation));
      step(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, w));
      step(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, y));
      step(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, conv));
      step(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, std::vector{one}));
      step(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, std::vector{zero}));
    }
    step(op.finalize());
    ops.push_back(op.get());
    // The epilogue's statistics over Y: [1,K,1,1] FLOAT.
    const std::vector<int64_t> stats = {1, out[1], 1, 1};
    for (int i = 0; i < c.reductions; ++i) {
      Descriptor& result = tensor(20 + i, stats, CUDNN_DATA_FLOAT, c.reduction_read);
      Descriptor& reduction = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
      stage = "reduction";
      step(reduction.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE,
                         std::vector{CUDNN_REDUCE_TENSOR_ADD}));
      step(reduction.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, std::vector{CUDNN_DATA_FLOAT}));
      step(reduction.finalize());
      Descriptor& op_reduction = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
      step(op_reduction.set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, y));
      step(op_reduction.set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, result));
      step(op_reduction.set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, reduction));
      step(op_reduction.finalize());
      ops.push_back(op_reduction.get());
      if (c.reduction_read) pointwise(CUDNN_POINTWISE_RELU_FWD, result, nullptr, tensor(30, stats, CUDNN_DATA_FLOAT));
    }
    if (c.gen_stats) {
      Descriptor &sums = tensor(40, stats, CUDNN_DATA_FLOAT), &squares = tensor(41, stats, CUDNN_DATA_FLOAT);
      Descriptor& gen = make(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
      stage = "GenStats";
      step(gen.set(CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, std::vector{CUDNN_GENSTATS_SUM_SQSUM}));
      step(gen.set(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, std::vector{CUDNN_DATA_FLOAT}));
      step(gen.set(CUDNN_ATTR_OPERATION_GENSTATS_XDESC, y));
      step(gen.set(CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, sums));
      step(gen.set(CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, squares));
      step(gen.finalize());
      ops.push_back(gen.get());
    }
    stage = "graph";
    step(graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops));
    step(graph.finalize());
  }

  Descriptor graph{CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR};
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  std::string failed_in;

 private:
  std::vector<std::unique_ptr<Descriptor>> owned;
  std::vector<cudnnBackendDescriptor_t> ops;
  const char* stage = "tensor";

  void step(cudnnStatus_t s) {
    if (status != CUDNN_STATUS_SUCCESS || s == CUDNN_STATUS_SUCCESS) return;
    status = s;
    failed_in = stage;
  }
  Descriptor& make(cudnnBackendDescriptorType_t type) {
    owned.push_back(std::make_unique<Descriptor>(type));
    return *owned.back();
  }
  // A packed NHWC tensor (a filter: KRSC).
  Descriptor& tensor(int64_t uid, const std::vector<int64_t>& d, cudnnDataType_t type, bool is_virtual = false,
                     int64_t alignment = 16) {
    Descriptor& t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    stage = "tensor";
    step(t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, std::vector{type}));
    step(t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, d));
    step(t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64,
               std::vector<int64_t>{d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]}));
    step(t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, std::vector{uid}));
    step(t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, std::vector{alignment}));
    step(cudnnBackendSetAttribute(t.get(), CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual));
    step(t.finalize());
    return t;
  }
  void pointwise(cudnnPointwiseMode_t mode, const Descriptor& x, const Descriptor* b, const Descriptor& y,
                 float alpha1 = 1) {
    Descriptor& pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    stage = "pointwise";
    step(pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, std::vector{mode}));
    step(pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, std::vector{CUDNN_DATA_FLOAT}));
    step(pw.finalize());
    Descriptor& op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    step(op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw));
    step(op.set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x));
    if (b) step(op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b));
    step(op.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y));
    step(op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, std::vector{alpha1}));
    step(op.finalize());
    ops.push_back(op.get());
  }
  Descriptor& convolution(const ConvShape& s) {
    Descriptor& conv = make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    stage = "convolution";
    const std::vector<int64_t> pads(2, s.pad), strides(2, s.stride), dilations(2, 1);
    step(conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, std::vector{CUDNN_DATA_FLOAT}));
    step(conv.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, std::vector{CUDNN_CROSS_CORRELATION}));
    step(conv.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, std::vector<int64_t>{2}));
    step(conv.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, pads));
    step(conv.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, pads));
    step(conv.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, strides));
    step(conv.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dilations));
    step(conv.finalize());
    return conv;
  }
};

// The fused graph's prologue by hand, per element of NHWC x (Note [Emulated fusion]): each step
// rounded once in fp32, then the result rounded to T.
template <typename T>
std::vector<float> prologue_by_hand(const std::vector<float>& x, const std::vector<float>& scale,
                                    const std::vector<float>& shift) {
  std::vector<float> a(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t c = i % scale.size();
    const float z = add_rn(mul_rn(x[i], scale[c]), shift[c]);
    a[i] = z > 0 ? z : 0.0f;
  }
  return test::rounded_to<T>(a);
}

}  // namespace

TEMPLATE_TEST_CASE("emulated cuDNN: a fused graph computes its prologue in fp32, then the convolution of the result",
                   "[emu]", float, __nv_bfloat16) {
  std::mt19937 rng(34);
  for (const ConvShape& s : {ConvShape{2, 7, 7, 8, 4, 3, 3, 1, 1}, ConvShape{2, 8, 8, 8, 16, 3, 3, 2, 1}}) {
    CAPTURE(s.C, s.K, s.stride);
    Convolution legacy(s, cudnn_type<TestType>());  // for its handle
    const size_t x_n = size_t(s.N) * s.H * s.W * s.C, w_n = size_t(s.K) * s.R * s.S * s.C,
                 y_n = size_t(s.N) * s.P() * s.Q() * s.K;
    const std::vector<float> x = test::rounded_to<TestType>(test::random_vector(x_n, rng, -2.0f, 2.0f)),
                             w = test::rounded_to<TestType>(test::random_vector(w_n, rng)),
                             scale = test::random_vector(size_t(s.C), rng, 0.25f, 3.0f),
                             shift = test::random_vector(size_t(s.C), rng);
    PoisonedBuffer<TestType> x_device(test::convert_to<TestType>(x)), w_device(test::convert_to<TestType>(w)),
        y(y_n);
    PoisonedBuffer<float> scale_device(scale), shift_device(shift);
    const FusedGraph g(s, cudnn_type<TestType>());
    REQUIRE(g.status == CUDNN_STATUS_SUCCESS);
    const Plan plan(*config_of(g.graph, 3));
    REQUIRE(plan.status == CUDNN_STATUS_SUCCESS);
    REQUIRE(execute(legacy.handle, plan, {x_device.get(), w_device.get(), y.get(), scale_device.get(), shift_device.get()},
                    nullptr, {1, 2, 3, 4, 5}) == CUDNN_STATUS_SUCCESS);
    std::vector<float> expected(y_n);
    conv2d_forward_cpu(prologue_by_hand<TestType>(x, scale, shift).data(), w.data(), s, expected.data());
    CHECK(test::download(y) == test::rounded_to<TestType>(expected));
    // The prologue mattered: it is not the convolution of x.
    std::vector<float> of_x(y_n);
    conv2d_forward_cpu(x.data(), w.data(), s, of_x.data());
    CHECK(test::download(y) != test::rounded_to<TestType>(of_x));
  }
}

TEST_CASE("emulated cuDNN: a fused graph has one runtime-fusion engine, and a graph of one convolution keeps its three",
          "[emu]") {
  const ConvShape s{2, 8, 8, 8, 8, 3, 3, 1, 1};
  const FusedGraph g(s, CUDNN_DATA_BFLOAT16);
  REQUIRE(g.status == CUDNN_STATUS_SUCCESS);
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_B, CUDNN_HEUR_MODE_FALLBACK}) {
    const auto configs = ranked_configs(g.graph, mode);
    REQUIRE(configs.size() == 1);
    CHECK(global_index(*configs[0]) == 3);
    const auto engine = engine_of(*configs[0]);
    CHECK(engine->get<cudnnBackendBehaviorNote_t>(CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE) ==
          std::vector{CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION});
    CHECK(engine->get<cudnnBackendNumericalNote_t>(CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE)
              .empty());
    const Plan plan(*configs[0]);
    REQUIRE(plan.status == CUDNN_STATUS_SUCCESS);
    CHECK(plan.workspace == 0);
  }
  // The single-operation engines decline a fused graph; engine 3 is no engine of a graph of one
  // convolution, whose heuristics answer what they did before.
  for (int64_t index : {0, 1, 2, 3}) {
    CAPTURE(index);
    Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    CUDNN_CHECK(engine.set(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, g.graph));
    CUDNN_CHECK(engine.set(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, std::vector{index}));
    CHECK(engine.finalize() == (index == 3 ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED));
  }
  const ConvGraph single(Pass::forward, s, CUDNN_DATA_BFLOAT16, 1.0f, 0.0f);
  REQUIRE(single.status == CUDNN_STATUS_SUCCESS);
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  CUDNN_CHECK(engine.set(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, single.graph));
  CUDNN_CHECK(engine.set(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, std::vector<int64_t>{3}));
  CHECK(engine.finalize() == CUDNN_STATUS_BAD_PARAM);
  std::vector<int64_t> order;
  for (const auto& config : ranked_configs(single.graph, CUDNN_HEUR_MODE_A)) order.push_back(global_index(*config));
  CHECK(order == std::vector<int64_t>{2, 0, 1});
}

TEST_CASE("emulated cuDNN: graph finalize refuses the fusions that cuDNN documents no engine for, each by its rule",
          "[emu]") {
  const ConvShape s{2, 8, 8, 8, 8, 3, 3, 1, 1};
  struct Case {
    const char* what;
    FusionChanges changes;
    cudnnDataType_t type;
    cudnnStatus_t status;
    const char* reason;  // in cudnnGetLastErrorString
    int stride = 1;
  };
  const cudnnStatus_t pattern = CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN;
  for (const Case& c : {
           Case{"the fused graph cutrain makes", {}, CUDNN_DATA_BFLOAT16, CUDNN_STATUS_SUCCESS, ""},
           Case{"a prologue on backward filter", {.pass = Pass::backward_filter}, CUDNN_DATA_BFLOAT16, pattern,
                "Fusion operation in g1 is not supported"},
           Case{"a strided backward-data fusion", {.pass = Pass::backward_data}, CUDNN_DATA_FLOAT, pattern,
                "Strided ConvolutionBwdData fusions are not supported", 2},
           Case{"ALPHA1 other than 1", {.alpha1 = 2}, CUDNN_DATA_BFLOAT16, pattern, "ALPHA1 or ALPHA2 other than 1"},
           Case{"a prologue input aligned to 8 bytes", {.scale_alignment = 8}, CUDNN_DATA_FLOAT, pattern,
                "aligned to 8 bytes, not 16"},
           Case{"an intermediate that is not virtual", {.written_product = true}, CUDNN_DATA_BFLOAT16, pattern,
                "UID 6, that is not virtual"},
           Case{"two reductions", {.reductions = 2}, CUDNN_DATA_FLOAT, pattern, "more than one reduction"},
           Case{"a reduction that is not the exit node", {.reductions = 1, .reduction_read = true}, CUDNN_DATA_FLOAT,
                pattern, "a reduction that is not the exit node"},
           Case{"GenStats on BFLOAT16", {.gen_stats = true}, CUDNN_DATA_BFLOAT16, CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE,
                "GenStats on a BFLOAT16 X"},
           // What cuDNN documents as supported, which the emulation does not compute.
           Case{"one reduction, the exit node", {.reductions = 1}, CUDNN_DATA_FLOAT, pattern,
                "the emulation computes a fused graph of a pointwise prologue on a forward convolution's X alone"},
           Case{"a prologue on an unstrided backward data", {.pass = Pass::backward_data}, CUDNN_DATA_FLOAT, pattern,
                "this is a backward_data convolution"},
           Case{"SUB in the prologue", {.add = CUDNN_POINTWISE_SUB}, CUDNN_DATA_FLOAT, pattern, "pointwise mode 9"},
       }) {
    CAPTURE(c.what);
    ConvShape shape = s;
    shape.stride = c.stride;
    const FusedGraph g(shape, c.type, c.changes);
    CHECK(g.status == c.status);
    if (c.status == CUDNN_STATUS_SUCCESS) continue;
    CHECK(g.failed_in == "graph");
    CHECK_THAT(last_error(), Catch::Contains(c.reason));
  }
}

TEST_CASE("emulated cuDNN: CUTRAIN_EMU_CUDNN_REFUSE=fusion declines every graph of more than one operation",
          "[emu]") {
  const ConvShape s{1, 6, 6, 8, 8, 3, 3, 1, 1};
  setenv("CUTRAIN_EMU_CUDNN_REFUSE", "fusion", 1);
  const FusedGraph fused(s, CUDNN_DATA_FLOAT);
  const std::string reason = last_error();
  const ConvGraph single(Pass::forward, s, CUDNN_DATA_FLOAT, 1.0f, 0.0f);
  unsetenv("CUTRAIN_EMU_CUDNN_REFUSE");
  CHECK(fused.status == CUDNN_STATUS_NOT_SUPPORTED);
  CHECK(fused.failed_in == "graph");
  CHECK_THAT(reason, Catch::Contains("a graph of 4 operations, declined by CUTRAIN_EMU_CUDNN_REFUSE=fusion"));
  CHECK(single.status == CUDNN_STATUS_SUCCESS);
  CHECK(FusedGraph(s, CUDNN_DATA_FLOAT).status == CUDNN_STATUS_SUCCESS);
}

TEST_CASE("emulated cuDNN: a fused graph's scale and shift pointers must lie in device allocations", "[emu]") {
  const ConvShape s{1, 6, 6, 8, 8, 3, 3, 1, 1};
  Convolution legacy(s, CUDNN_DATA_FLOAT);  // for its handle
  const FusedGraph g(s, CUDNN_DATA_FLOAT);
  REQUIRE(g.status == CUDNN_STATUS_SUCCESS);
  const Plan plan(*config_of(g.graph, 3));
  const size_t n = size_t(s.N) * s.H * s.W * s.C;
  PoisonedBuffer<float> x(n), w(size_t(s.K) * s.R * s.S * s.C), y(n), scale(size_t(s.C)), shift(size_t(s.C)),
      short_shift(size_t(s.C) - 1);
  std::vector<float> host_scale(size_t(s.C));
  const std::vector<int64_t> uids = {1, 2, 3, 4, 5};
  CHECK(execute(legacy.handle, plan, {x.get(), w.get(), y.get(), scale.get(), shift.get()}, nullptr, uids) ==
        CUDNN_STATUS_SUCCESS);
  CHECK(execute(legacy.handle, plan, {x.get(), w.get(), y.get(), host_scale.data(), shift.get()}, nullptr, uids) ==
        CUDNN_STATUS_BAD_PARAM);
  CHECK_THAT(last_error(), Catch::Contains("the prologue's B (UID 4) is not"));
  CHECK(execute(legacy.handle, plan, {x.get(), w.get(), y.get(), scale.get(), short_shift.get()}, nullptr, uids) ==
        CUDNN_STATUS_BAD_PARAM);
  CHECK(execute(legacy.handle, plan, {x.get(), w.get(), y.get(), scale.get()}, nullptr, {1, 2, 3, 4}) ==
        CUDNN_STATUS_BAD_PARAM);
  CHECK_THAT(last_error(), Catch::Contains("no pointer for the prologue's B (UID 5)"));
  CUDA_CHECK(cudaDeviceSynchronize());
}

TEST_CASE("emulated cuDNN: a fused graph is recorded as one fused call that reads x, W, scale and shift and writes Y",
          "[emu]") {
  const ConvShape s{4, 8, 8, 16, 32, 3, 3, 1, 1};
  Convolution legacy(s, CUDNN_DATA_BFLOAT16);  // for its handle
  const FusedGraph g(s, CUDNN_DATA_BFLOAT16);
  REQUIRE(g.status == CUDNN_STATUS_SUCCESS);
  const Plan plan(*config_of(g.graph, 3));
  const size_t x_n = size_t(s.N) * s.H * s.W * s.C, w_n = size_t(s.K) * s.R * s.S * s.C,
               y_n = size_t(s.N) * s.P() * s.Q() * s.K;
  Recorder recorder;
  {
    RecordingScope scope(recorder);
    PoisonedBuffer<__nv_bfloat16> x(x_n), w(w_n), y(y_n);
    PoisonedBuffer<float> scale(size_t(s.C)), shift(size_t(s.C));
    recorder.clear();
    REQUIRE(execute(legacy.handle, plan, {x.get(), w.get(), y.get(), scale.get(), shift.get()}, nullptr,
                    {1, 2, 3, 4, 5}) == CUDNN_STATUS_SUCCESS);
  }
  std::vector<RecordedOp> calls;
  for (const RecordedOp& op : recorder.ops())
    if (op.kind == RecordedOp::Kind::library) calls.push_back(op);
  REQUIRE(calls.size() == 1);
  const RecordedOp& op = calls[0];
  CHECK(op.name == "cudnnConvolutionForwardFused");
  CHECK(op.bytes.read == int64_t(2 * (x_n + w_n) + 2 * 4 * size_t(s.C)));
  CHECK(op.bytes.written == int64_t(2 * y_n));
  CHECK(op.flops == 2.0 * s.N * s.P() * s.Q() * s.K * s.R * s.S * s.C);
  CHECK_THAT(op.detail, Catch::Contains("prologue on x: MUL ADD RELU_FWD"));
}
