// cudnn_convolution.h: what the emulated cuDNN's two convolution APIs share, the legacy calls
// (cudnn.cpp) and the graph API (cudnn_graph.cpp): the handle, a convolution problem checked as the
// legacy descriptors give it, the algorithms' workspaces, the refusals with their reasons, the
// injected faults, and the one launch that computes a pass. A graph therefore computes the same bits
// as the legacy call of the same algorithm.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "kernels/conv2d_cpu.h"

struct cudnnContext {
  cudaStream_t stream = nullptr;  // the legacy default stream until cudnnSetStream
};

// A 4-d tensor or filter as its descriptor gives it: dims in cuDNN's order (n, c, h, w; for a
// filter k, c, r, s), the layout and the element type.
struct Dims4 {
  bool set = false;
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int n = 0, c = 0, h = 0, w = 0;
};
struct cudnnTensorStruct : Dims4 {};
struct cudnnFilterStruct : Dims4 {};

struct cudnnConvolutionStruct {
  bool set = false;
  int pad_h = 0, pad_w = 0, u = 1, v = 1, dilation_h = 1, dilation_w = 1;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

namespace cutrain::emu::cudnn {

// Returns `status` and keeps `why` as this thread's last refusal, which cudnnGetErrorString and
// cudnnGetLastErrorString then give (emu/refusal.h).
cudnnStatus_t fail(cudnnStatus_t status, const std::string& why);

size_t bytes_of(const Dims4& d);

enum class Pass { forward, backward_data, backward_filter };
extern const std::string kPassNames[3];  // forward, backward_data, backward_filter

struct Problem {
  Dims4 x, w, y;
  ConvShape shape;
  cudnnMathType_t math;
};

// The four legacy descriptors checked against each other (cudnn.cpp says by which rules).
cudnnStatus_t make_problem(const cudnnTensorStruct* x, const cudnnFilterStruct* w, const cudnnConvolutionStruct* conv,
                           const cudnnTensorStruct* y, Problem* out);

// Whether legacy algorithm `algo` of `pass` computes the problem, and if so its workspace.
cudnnStatus_t algo_workspace(Pass pass, int algo, const Problem& p, size_t* bytes);
// Whether it adds its partial sums with atomics (Note [Emulated atomics]).
bool algo_is_atomic(Pass pass, int algo);
// The heuristics' predicted time in ms of legacy algorithm `algo` on the problem with a workspace of
// `workspace` bytes: the pass's multiply-adds at an emulated 1 TFLOP/s, plus a cost for the
// workspace's traffic, plus 0.001 ms per algorithm number. The legacy heuristics rank algorithms by
// it and the graph API's rank engines by it (Note [Emulated engines]), so that both choose alike.
float predicted_time(const Problem& p, int algo, size_t workspace);

// The status that CUTRAIN_EMU_CUDNN_FAIL injects for `pass` and `kind` ("algo" or "engine") number
// `number` (Note [Emulated cuDNN faults]), as a refusal; CUDNN_STATUS_SUCCESS when none. Only
// faults with one of `statuses` count.
cudnnStatus_t injected_fault(const std::string& pass, const std::string& kind, const std::string& number,
                             std::initializer_list<cudnnStatus_t> statuses = {
                                 CUDNN_STATUS_NOT_SUPPORTED, CUDNN_STATUS_EXECUTION_FAILED, CUDNN_STATUS_BAD_PARAM});

// CUTRAIN_EMU_CUDNN_REFUSE=fusion (Note [Emulated cuDNN faults]): when set, the refusal of a graph
// of `operations` operations, more than one, as CUDNN_STATUS_NOT_SUPPORTED with the reason;
// CUDNN_STATUS_SUCCESS otherwise.
cudnnStatus_t refused_fusion(int64_t operations);

// Device memory of at least `bytes` at `p`, or CUDNN_STATUS_BAD_PARAM naming `what`.
cudnnStatus_t check_device(const void* p, size_t bytes, const char* what);

// What each pass reads and writes, in the descriptors' terms.
struct Operands {
  const void* a;  // forward: x; backward data: w; backward filter: x
  const void* b;  // forward: w; backward data: dy; backward filter: dy
  void* out;      // forward: y; backward data: dx; backward filter: dw
};

// One pointwise operation of a prologue on a forward convolution's X (Note [Emulated fusion] in
// cudnn_graph.cpp): x = x * operand[c], x = x + operand[c], or x = max(x, 0), in fp32.
struct PointwiseStep {
  cudnnPointwiseMode_t mode;  // CUDNN_POINTWISE_MUL, CUDNN_POINTWISE_ADD or CUDNN_POINTWISE_RELU_FWD
  const float* operand;       // MUL and ADD: one float per channel of X, in device memory; RELU_FWD: null
};

// Records or enqueues one pass whose arguments passed every check: the workspace's garbage, then
// the computation on the handle's stream, with alpha and beta as given (cudnn.cpp's convolve says
// how). `atomic` adds partial sums as an algorithm with atomics does. A forward pass with a
// `prologue` computes on X as the prologue leaves it, rounded to X's type, and is recorded as one
// fused call that also reads the prologue's operands.
cudnnStatus_t launch(cudnnHandle_t handle, Pass pass, const Problem& p, const Operands& o, float alpha, float beta,
                     void* workspace, size_t needed, bool atomic, const std::vector<PointwiseStep>& prologue = {});

}  // namespace cutrain::emu::cudnn
