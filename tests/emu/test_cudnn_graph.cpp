// The emulated cuDNN's graph API (emu/cudnn_graph.cpp): a graph of each convolution gives the legacy
// call's bits, finalize refuses what cuDNN documents and what the emulation does not compute, the
// variant pack's pointers are checked, the heuristics rank the engines with their notes and
// workspaces, and CUTRAIN_EMU_CUDNN_FAIL makes an engine fail.
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

#include "kernels/base/check.h"
#include "kernels/conv2d_cpu.h"
#include "tests/device_buffer.h"
#include "tests/emu/cudnn_convolution.h"
#include "tests/gradcheck.h"

using namespace cutrain;
using test::Convolution;
using test::cudnn_type;
using test::DeviceBuffer;
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
    DeviceBuffer<TestType> x(values(x_n)), w(values(w_n)), y(values(y_n));
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
        DeviceBuffer<unsigned char> workspace(std::max<size_t>(size_t(plan.workspace), 1));
        DeviceBuffer<TestType> by_graph(prior), by_legacy(prior);
        const std::vector<void*> xwy = pass == Pass::forward         ? std::vector<void*>{x.get(), w.get(), by_graph.get()}
                                       : pass == Pass::backward_data ? std::vector<void*>{by_graph.get(), w.get(), y.get()}
                                                                     : std::vector<void*>{x.get(), by_graph.get(), y.get()};
        REQUIRE(execute(legacy.handle, plan, xwy, workspace.get()) == CUDNN_STATUS_SUCCESS);
        const int algo = legacy_algo(pass);
        const size_t legacy_bytes = legacy.workspace(pass, algo);
        DeviceBuffer<unsigned char> legacy_workspace(std::max<size_t>(legacy_bytes, 1));
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
  DeviceBuffer<float> x(x_n), dw(w_n), dy(y_n), short_dw(w_n - 1), long_x(x_n + 1);
  DeviceBuffer<unsigned char> workspace(size_t(plan.workspace)), short_workspace(size_t(plan.workspace) - 1);
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
  DeviceBuffer<float> dx(n), w(size_t(s.K) * s.R * s.S * s.C), dy(n);
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
  DeviceBuffer<float> x(test::random_vector(n, rng)), w(test::random_vector(size_t(s.K) * s.R * s.S * s.C, rng)),
      direct(n), replayed(n);
  DeviceBuffer<unsigned char> workspace(size_t(plan.workspace));
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
