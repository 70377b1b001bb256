// cudnn.cpp: the emulated cuDNN of emu/include/cudnn.h. Each convolution is checked when
// it is called (descriptors, pointers, workspace), reads alpha and beta then, and enqueues its
// work on the handle's stream with everything it needs captured by value. The work computes
// through the CPU twins of kernels/conv2d_cpu.h in fp32, on copies of the operands in NHWC and
// KRSC, whatever the descriptors' layouts. While a recorder is installed (emu/recording.h),
// each convolution that passes the checks is also written down with what it computes and moves,
// and not enqueued when the device is record-only (Note [Record-only device] in runtime.h). What
// the graph API (cudnn_graph.cpp) shares with these calls is declared in cudnn_convolution.h.
#include <cudnn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "emu/bf16.h"
#include "emu/cudnn_convolution.h"
#include "emu/environment.h"
#include "emu/recording.h"
#include "emu/refusal.h"
#include "emu/runtime.h"
#include "kernels/batchnorm.h"
#include "kernels/numeric.cuh"

struct cudnnActivationStruct {
  bool set = false;
  cudnnActivationMode_t mode = CUDNN_ACTIVATION_RELU;
};

namespace cutrain::emu::cudnn {
namespace {

// ---- statuses: cuDNN's status, and for the emulation's refusals, why ----

thread_local Refusal<cudnnStatus_t> refusal;

}  // namespace

cudnnStatus_t fail(cudnnStatus_t status, const std::string& why) { return refusal.refuse(status, why); }

namespace {

const char* status_name(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_BAD_PARAM_NULL_POINTER: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER: return "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER";
    case CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH: return "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_NOT_SUPPORTED_SHAPE: return "CUDNN_STATUS_NOT_SUPPORTED_SHAPE";
    case CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE: return "CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE";
    case CUDNN_STATUS_NOT_SUPPORTED_LAYOUT: return "CUDNN_STATUS_NOT_SUPPORTED_LAYOUT";
    case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_UNKNOWN_STATUS_FOUND";
  }
}

// ---- descriptors ----

bool valid_format(cudnnTensorFormat_t f) { return f >= CUDNN_TENSOR_NCHW && f <= CUDNN_TENSOR_NCHW_VECT_C; }
bool valid_type(cudnnDataType_t t) { return t >= CUDNN_DATA_FLOAT && t <= CUDNN_DATA_COMPLEX_FP64; }
// The types the emulation computes on: cutrain's two.
bool computed_type(cudnnDataType_t t) { return t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_BFLOAT16; }
size_t element_bytes(cudnnDataType_t t) { return t == CUDNN_DATA_BFLOAT16 ? 2 : 4; }
size_t elements(const Dims4& d) { return size_t(d.n) * d.c * d.h * d.w; }

// cudnnSetTensor4dDescriptor and cudnnSetFilter4dDescriptor: BAD_PARAM for a dimension that is not
// positive or an enumerant out of range (cuDNN documents negative dimensions; it rejects zero too
// when the descriptor is used); NOT_SUPPORTED past 2^31 elements, as cuDNN, and for the layouts
// and types the emulation does not compute (NCHW_VECT_C, anything but float and bf16), which
// real cuDNN accepts.
cudnnStatus_t set_dims(Dims4* d, cudnnTensorFormat_t format, cudnnDataType_t type, int n, int c, int h, int w) {
  if (!d) return fail(CUDNN_STATUS_BAD_PARAM, "the descriptor is null");
  if (n <= 0 || c <= 0 || h <= 0 || w <= 0)
    return fail(CUDNN_STATUS_BAD_PARAM, "a dimension is not positive: " + std::to_string(n) + "x" + std::to_string(c) +
                                            "x" + std::to_string(h) + "x" + std::to_string(w));
  if (!valid_format(format) || !valid_type(type)) return fail(CUDNN_STATUS_BAD_PARAM, "invalid format or data type");
  if (double(n) * c * h * w > double(std::numeric_limits<int32_t>::max()))
    return fail(CUDNN_STATUS_NOT_SUPPORTED, "more than 2^31 elements");
  if (format == CUDNN_TENSOR_NCHW_VECT_C)
    return fail(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT, "the emulation computes NCHW and NHWC only");
  if (!computed_type(type))
    return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, "the emulation computes float and bf16 only");
  *d = Dims4{true, format, type, n, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}

// Where element (n, c, h, w) lies: NCHW is row major over (n, c, h, w), NHWC over (n, h, w, c). For
// a filter the same with (k, c, r, s): NCHW is KCRS, NHWC is KRSC.
size_t offset(const Dims4& d, int n, int c, int h, int w) {
  if (d.format == CUDNN_TENSOR_NHWC) return ((size_t(n) * d.h + h) * d.w + w) * d.c + c;
  return ((size_t(n) * d.c + c) * d.h + h) * d.w + w;
}

float load(const void* p, cudnnDataType_t type, size_t i) {
  if (type == CUDNN_DATA_BFLOAT16) return cutrain_emu_bf16_bits_to_float(static_cast<const uint16_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

void store(void* p, cudnnDataType_t type, size_t i, float v) {
  if (type == CUDNN_DATA_BFLOAT16) {
    static_cast<uint16_t*>(p)[i] = cutrain_emu_float_to_bf16_bits(v);
  } else {
    static_cast<float*>(p)[i] = v;
  }
}

// The tensor as fp32 in NHWC order (a filter: KRSC), what the CPU twins take.
std::vector<float> to_nhwc(const Dims4& d, const void* p) {
  std::vector<float> out(elements(d));
  size_t i = 0;
  for (int n = 0; n < d.n; ++n)
    for (int h = 0; h < d.h; ++h)
      for (int w = 0; w < d.w; ++w)
        for (int c = 0; c < d.c; ++c) out[i++] = load(p, d.type, offset(d, n, c, h, w));
  return out;
}

// p = alpha * result + beta * p, result in NHWC order, rounded once to p's type. As cuDNN, p is
// not read when beta is 0, so whatever it held (NaN included) does not matter.
void blend(const Dims4& d, const std::vector<float>& result, float alpha, float beta, void* p) {
  size_t i = 0;
  for (int n = 0; n < d.n; ++n)
    for (int h = 0; h < d.h; ++h)
      for (int w = 0; w < d.w; ++w)
        for (int c = 0; c < d.c; ++c) {
          const size_t at = offset(d, n, c, h, w);
          const float prior = beta != 0.0f ? beta * load(p, d.type, at) : 0.0f;
          store(p, d.type, at, alpha * result[i++] + prior);
        }
}

}  // namespace

size_t bytes_of(const Dims4& d) { return elements(d) * element_bytes(d.type); }

// ---- a convolution problem: the four descriptors, checked against each other ----

const std::string kPassNames[3] = {"forward", "backward_data", "backward_filter"};

// The checks cuDNN documents for the convolutions, their heuristics and workspace queries: BAD_PARAM
// for a null or unset descriptor, a filter whose input channels are not the input's, an output
// descriptor that is not the output's size, and differing data types. NOT_SUPPORTED for a compute
// type other than float (the configurations TRUE_FLOAT_CONFIG and PSEUDO_BFLOAT16_CONFIG are the
// ones for float and bf16 data), and for what the emulation's CPU twins do not compute, which real
// cuDNN supports: dilation, CUDNN_CONVOLUTION (a flipped filter), and different strides or pads
// along height and width.
cudnnStatus_t make_problem(const cudnnTensorStruct* x, const cudnnFilterStruct* w, const cudnnConvolutionStruct* conv,
                           const cudnnTensorStruct* y, Problem* out) {
  if (!x || !w || !conv || !y) return fail(CUDNN_STATUS_BAD_PARAM, "a descriptor is null");
  if (!x->set || !w->set || !conv->set || !y->set) return fail(CUDNN_STATUS_BAD_PARAM, "a descriptor was never set");
  if (x->c != w->c)
    return fail(CUDNN_STATUS_BAD_PARAM,
                "the input has " + std::to_string(x->c) + " channels, the filter " + std::to_string(w->c));
  if (x->type != w->type || x->type != y->type)
    return fail(CUDNN_STATUS_BAD_PARAM, "the input, filter and output data types differ");
  if (conv->compute != CUDNN_DATA_FLOAT)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, "float and bf16 data need a float compute type");
  if (conv->dilation_h != 1 || conv->dilation_w != 1)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, "the emulation computes no dilated convolution");
  if (conv->mode != CUDNN_CROSS_CORRELATION)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, "the emulation computes CUDNN_CROSS_CORRELATION only");
  if (conv->pad_h != conv->pad_w || conv->u != conv->v)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, "the emulation computes equal pads and strides along height and width");
  const ConvShape s{x->n, x->h, x->w, x->c, w->n, w->h, w->w, conv->u, conv->pad_h};
  if (s.P() <= 0 || s.Q() <= 0) return fail(CUDNN_STATUS_BAD_PARAM, "the filter is larger than the padded input");
  if (y->n != s.N || y->c != s.K || y->h != s.P() || y->w != s.Q())
    return fail(CUDNN_STATUS_BAD_PARAM, "the output descriptor is " + std::to_string(y->n) + "x" +
                                            std::to_string(y->c) + "x" + std::to_string(y->h) + "x" +
                                            std::to_string(y->w) + ", the convolution gives " + std::to_string(s.N) +
                                            "x" + std::to_string(s.K) + "x" + std::to_string(s.P()) + "x" +
                                            std::to_string(s.Q()));
  *out = Problem{*x, *w, *y, s, conv->math};
  return CUDNN_STATUS_SUCCESS;
}

namespace {

// ---- the algorithms ----
//
// Each pass offers cuDNN's algorithms with what real cuDNN is known to require of them: FFT and
// Winograd need stride 1, Winograd a 3x3 filter (non-fused also 5x5), and DIRECT and the
// backward-filter Winograd are not implemented (Shapes::none). Their workspaces are sized after
// what each algorithm keeps (an im2col matrix, FFT planes, Winograd tiles, an fp32 accumulator), so
// that some need none and some need much. All of them compute the same result.

enum class Shapes { any, stride_one, stride_one_3x3, stride_one_3x3_or_5x5, none };

struct AlgoTraits {
  Shapes computes;
  bool deterministic;
  size_t (*workspace)(const Problem&);
};

size_t none(const Problem&) { return 0; }
size_t index_table(const Problem& p) { return size_t(p.shape.R) * p.shape.S * p.shape.C * sizeof(int); }
size_t im2col(const Problem& p) {
  const ConvShape& s = p.shape;
  return size_t(s.N) * s.P() * s.Q() * s.R * s.S * s.C * element_bytes(p.x.type);
}
size_t fft_planes(const Problem& p) {
  const ConvShape& s = p.shape;
  const size_t plane = size_t(s.H + 2 * s.pad) * (s.W + 2 * s.pad) * 8;  // complex fp32
  return (size_t(s.N) * s.C + size_t(s.K) * s.C + size_t(s.N) * s.K) * plane;
}
size_t fft_tiles(const Problem& p) {
  const ConvShape& s = p.shape;
  return (size_t(s.N) * s.C + size_t(s.K) * s.C + size_t(s.N) * s.K) * 32 * 32 * 8;
}
size_t winograd_tiles(const Problem& p) {
  const ConvShape& s = p.shape;
  const size_t tiles = size_t((s.P() + 3) / 4) * ((s.Q() + 3) / 4);
  return (size_t(s.C) * s.K + size_t(s.N) * s.C * tiles + size_t(s.N) * s.K * tiles) * 36 * sizeof(float);
}
size_t fp32_filter(const Problem& p) { return size_t(p.shape.K) * p.shape.R * p.shape.S * p.shape.C * sizeof(float); }

constexpr int kMaxAlgos = 8;
struct PassTraits {
  int count;
  AlgoTraits algos[kMaxAlgos];
};

const PassTraits& traits(Pass pass) {
  static const PassTraits forward{CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                  {{Shapes::any, true, none},                                // IMPLICIT_GEMM
                                   {Shapes::any, true, index_table},                         // IMPLICIT_PRECOMP_GEMM
                                   {Shapes::any, true, im2col},                              // GEMM
                                   {Shapes::none, true, none},                               // DIRECT
                                   {Shapes::stride_one, true, fft_planes},                   // FFT
                                   {Shapes::stride_one, true, fft_tiles},                    // FFT_TILING
                                   {Shapes::stride_one_3x3, true, none},                     // WINOGRAD
                                   {Shapes::stride_one_3x3_or_5x5, true, winograd_tiles}}};  // WINOGRAD_NONFUSED
  static const PassTraits backward_data{CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                        {{Shapes::any, false, none},                               // ALGO_0
                                         {Shapes::any, true, none},                                // ALGO_1
                                         {Shapes::stride_one, true, fft_planes},                   // FFT
                                         {Shapes::stride_one, true, fft_tiles},                    // FFT_TILING
                                         {Shapes::stride_one_3x3, true, none},                     // WINOGRAD
                                         {Shapes::stride_one_3x3_or_5x5, true, winograd_tiles}}};  // WINOGRAD_NONFUSED
  static const PassTraits backward_filter{CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                          {{Shapes::any, false, none},                             // ALGO_0
                                           {Shapes::any, true, fp32_filter},                       // ALGO_1
                                           {Shapes::stride_one, true, fft_planes},                 // FFT
                                           {Shapes::any, false, fp32_filter},                      // ALGO_3
                                           {Shapes::none, true, none},                             // WINOGRAD
                                           {Shapes::stride_one_3x3_or_5x5, true, winograd_tiles},  // WINOGRAD_NONFUSED
                                           {Shapes::stride_one, true, fft_tiles}}};                // FFT_TILING
  switch (pass) {
    case Pass::forward: return forward;
    case Pass::backward_data: return backward_data;
    default: return backward_filter;
  }
}

}  // namespace

cudnnStatus_t algo_workspace(Pass pass, int algo, const Problem& p, size_t* bytes) {
  const PassTraits& t = traits(pass);
  if (algo < 0 || algo >= t.count) return fail(CUDNN_STATUS_BAD_PARAM, "no such algorithm: " + std::to_string(algo));
  const AlgoTraits& a = t.algos[algo];
  const ConvShape& s = p.shape;
  const bool square = s.R == s.S;
  bool fits = false;
  switch (a.computes) {
    case Shapes::any: fits = true; break;
    case Shapes::stride_one: fits = s.stride == 1; break;
    case Shapes::stride_one_3x3: fits = s.stride == 1 && square && s.R == 3; break;
    case Shapes::stride_one_3x3_or_5x5: fits = s.stride == 1 && square && (s.R == 3 || s.R == 5); break;
    case Shapes::none: fits = false; break;
  }
  if (!fits)
    return fail(CUDNN_STATUS_NOT_SUPPORTED,
                kPassNames[int(pass)] + " algorithm " + std::to_string(algo) + " does not compute this shape");
  *bytes = a.workspace(p);
  return CUDNN_STATUS_SUCCESS;
}

bool algo_is_atomic(Pass pass, int algo) { return !traits(pass).algos[algo].deterministic; }

float predicted_time(const Problem& p, int algo, size_t workspace) {
  const ConvShape& s = p.shape;
  const double flops = 2.0 * s.N * s.P() * s.Q() * s.K * s.R * s.S * s.C;
  return float(flops / 1e9 + double(workspace) / 1e8 + 0.001 * algo);
}

namespace {

// Note [Emulated cuDNN faults]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// CUTRAIN_EMU_CUDNN_FAIL="pass:algo=N:status[,...]" makes the convolutions of `pass` (forward,
// backward_data, backward_filter) with algorithm N (or any, with algo=any) fail with `status`:
// not_supported (CUDNN_STATUS_NOT_SUPPORTED), execution_failed (CUDNN_STATUS_EXECUTION_FAILED) or
// bad_param (CUDNN_STATUS_BAD_PARAM).
// A failing call enqueues nothing, as a real cuDNN call that fails at launch. cudnnFind* reports
// the failure in that algorithm's result, since it runs each algorithm; the _v7 heuristics do not,
// since they run nothing. The pass `batchnorm` (with algo=any) makes the batch-norm Ex calls and
// their size queries fail alike, as a cuDNN that does not take the configuration (Note [cuDNN's
// batch norm types]) refuses it when the model is built.
// "pass:engine=N:status" (or engine=any) does the same to the graph API's engine N of that pass
// (Note [Emulated engines] in cudnn_graph.cpp): not_supported refuses the finalize of an execution
// plan with that engine, as an engine that does not take the graph; execution_failed and bad_param
// make each cudnnBackendExecute of such a plan fail, as a kernel that fails at launch. Heuristics
// still list the engine, since they run nothing. The variable is read at every call, so a test may
// set and clear it. A malformed value ends the program with one line saying what is wrong.
// CUTRAIN_EMU_CUDNN_REFUSE=fusion makes the finalize of every operation graph of more than one
// operation fail with CUDNN_STATUS_NOT_SUPPORTED, before any other check, with a reason that
// cudnnGetLastErrorString gives, as a cuDNN with no engine for fused graphs (Note [Emulated fusion]
// in cudnn_graph.cpp); graphs of one operation are untouched. It too is read at every finalize, and
// any other value ends the program with one line.
[[noreturn]] void refuse_fault_spec(const std::string& entry, const char* what) {
  std::fprintf(stderr,
               "CUTRAIN_EMU_CUDNN_FAIL: '%s': %s (expected pass:algo=N:status or pass:engine=N:status, such as "
               "backward_data:algo=1:not_supported)\n",
               entry.c_str(), what);
  std::exit(2);
}

struct Fault {
  std::string pass, kind, number;  // a pass's name; "algo" or "engine"; its number, or "any"
  cudnnStatus_t status;
};

Fault parse_fault(const std::string& entry) {
  const size_t first = entry.find(':');
  const size_t equals = first == std::string::npos ? first : entry.find('=', first + 1);
  const size_t second = equals == std::string::npos ? equals : entry.find(':', equals + 1);
  if (second == std::string::npos) refuse_fault_spec(entry, "not three fields");
  Fault fault{entry.substr(0, first), entry.substr(first + 1, equals - first - 1),
              entry.substr(equals + 1, second - equals - 1), CUDNN_STATUS_SUCCESS};
  if (fault.kind != "algo" && fault.kind != "engine")
    refuse_fault_spec(entry, "the second field is algo=N or engine=N");
  const std::string status = entry.substr(second + 1);
  if (status == "not_supported") {
    fault.status = CUDNN_STATUS_NOT_SUPPORTED;
  } else if (status == "execution_failed") {
    fault.status = CUDNN_STATUS_EXECUTION_FAILED;
  } else if (status == "bad_param") {
    fault.status = CUDNN_STATUS_BAD_PARAM;
  } else {
    refuse_fault_spec(entry, "the status is not_supported, execution_failed or bad_param");
  }
  if (fault.pass != "batchnorm" &&
      std::find(std::begin(kPassNames), std::end(kPassNames), fault.pass) == std::end(kPassNames))
    refuse_fault_spec(entry, "the pass is forward, backward_data, backward_filter or batchnorm");
  if (fault.number != "any" &&
      (fault.number.empty() || fault.number.find_first_not_of("0123456789") != std::string::npos))
    refuse_fault_spec(entry, "the algorithm or engine is a number or any");
  return fault;
}

}  // namespace

// `number`: the algorithm's or engine's number, or "any" for batch norm, which has none.
cudnnStatus_t injected_fault(const std::string& pass, const std::string& kind, const std::string& number,
                             std::initializer_list<cudnnStatus_t> statuses) {
  const char* spec = std::getenv("CUTRAIN_EMU_CUDNN_FAIL");
  if (!spec || !*spec) return CUDNN_STATUS_SUCCESS;
  const std::string all = spec;
  for (size_t begin = 0; begin <= all.size();) {
    const size_t end = std::min(all.find(',', begin), all.size());
    const Fault fault = parse_fault(all.substr(begin, end - begin));
    begin = end + 1;
    if (fault.pass == pass && fault.kind == kind && (fault.number == "any" || fault.number == number) &&
        std::find(statuses.begin(), statuses.end(), fault.status) != statuses.end())
      return fail(fault.status, std::string("injected by CUTRAIN_EMU_CUDNN_FAIL=") + spec);
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t refused_fusion(int64_t operations) {
  const char* refuse = std::getenv("CUTRAIN_EMU_CUDNN_REFUSE");
  if (!refuse || !*refuse) return CUDNN_STATUS_SUCCESS;
  if (std::string(refuse) != "fusion") {
    std::fprintf(stderr, "CUTRAIN_EMU_CUDNN_REFUSE: '%s': the one value is fusion\n", refuse);
    std::exit(2);
  }
  if (operations <= 1) return CUDNN_STATUS_SUCCESS;
  return fail(CUDNN_STATUS_NOT_SUPPORTED,
              "a graph of " + std::to_string(operations) + " operations, declined by CUTRAIN_EMU_CUDNN_REFUSE=fusion");
}

namespace {

// ---- heuristics and measurement ----

// cuDNN's Perf structs share one layout; this fills any of them.
template <typename Perf>
void describe_algo(Pass pass, int algo, const Problem& p, bool measured, Perf* perf) {
  *perf = Perf{};
  perf->algo = decltype(perf->algo)(algo);
  size_t bytes = 0;
  perf->status = algo_workspace(pass, algo, p, &bytes);
  if (perf->status == CUDNN_STATUS_SUCCESS && measured)
    perf->status = injected_fault(kPassNames[int(pass)], "algo", std::to_string(algo));
  perf->memory = perf->status == CUDNN_STATUS_SUCCESS ? bytes : 0;
  perf->time = perf->status == CUDNN_STATUS_SUCCESS ? predicted_time(p, algo, bytes) : -1.0f;
  perf->determinism = traits(pass).algos[algo].deterministic ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
  perf->mathType = p.math;
}

// The pass's algorithms, best first: those that compute the problem by time, then the others,
// with their failing status (as cuDNN lists them). At most `requested` of them.
template <typename Perf>
cudnnStatus_t rank(Pass pass, const Problem& p, bool measured, int requested, int* returned, Perf* results) {
  if (!returned || !results || requested <= 0)
    return fail(CUDNN_STATUS_BAD_PARAM, "no room for results, or none requested");
  std::vector<Perf> all(size_t(traits(pass).count));
  for (int a = 0; a < int(all.size()); ++a) describe_algo(pass, a, p, measured, &all[size_t(a)]);
  std::stable_sort(all.begin(), all.end(), [](const Perf& l, const Perf& r) {
    const bool l_ok = l.status == CUDNN_STATUS_SUCCESS, r_ok = r.status == CUDNN_STATUS_SUCCESS;
    if (l_ok != r_ok) return l_ok;
    return l_ok && l.time < r.time;
  });
  *returned = std::min(requested, int(all.size()));
  std::copy(all.begin(), all.begin() + *returned, results);
  return CUDNN_STATUS_SUCCESS;
}

// ---- running a convolution ----

// Garbage for a workspace: a stream of bytes that depends on `stamp`, different for every use.
void fill_garbage(void* workspace, size_t bytes, uint64_t stamp) {
  uint64_t state = stamp * 0x9e3779b97f4a7c15ull + 1;
  auto* out = static_cast<unsigned char*>(workspace);
  for (size_t i = 0; i < bytes; ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    out[i] = static_cast<unsigned char>(state >> 56);
  }
}

bool holds_garbage(const void* workspace, size_t bytes, uint64_t stamp) {
  std::vector<unsigned char> expected(bytes);
  fill_garbage(expected.data(), bytes, stamp);
  return std::memcmp(expected.data(), workspace, bytes) == 0;
}

uint64_t next_stamp() {
  static std::atomic<uint64_t> stamps{1};
  return stamps.fetch_add(2);
}

// Note [Emulated atomics]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Real cuDNN's backward-data ALGO_0 and backward-filter ALGO_0 and ALGO_3 add their partial sums
// with atomics, so their results differ in the last bits from one call to the next (they report
// CUDNN_NON_DETERMINISTIC; cuDNN's API reference, "cudnnConvolutionBackwardData" and
// "cudnnConvolutionBackwardFilter", and "Reproducibility (Determinism)" in its developer guide).
// The emulation computes such a call as kAtomicPartials partial sums, over the batch for the filter
// gradient and over the output channels for the data gradient, and adds them in an order drawn
// afresh for each call from CUTRAIN_EMU_STREAM_SEED and a count of the calls. A test that compares
// bits without --deterministic therefore fails here as it would on a GPU.
constexpr int kAtomicPartials = 4;

// The order in which this call adds its partial sums: a permutation of 0..count-1.
std::vector<int> atomic_order(int count) {
  static std::atomic<uint64_t> calls{0};
  static const uint64_t seed =
      emu::integer_from_environment("CUTRAIN_EMU_STREAM_SEED", 0, 0, std::numeric_limits<uint64_t>::max());
  std::mt19937_64 random(seed ^ (calls.fetch_add(1) * 0x9e3779b97f4a7c15ull));
  std::vector<int> order(size_t(count), 0);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), random);
  return order;
}

// The sum of `partials`, added in the order given.
std::vector<float> add_in_order(const std::vector<std::vector<float>>& partials, const std::vector<int>& order) {
  std::vector<float> sum = partials[size_t(order[0])];
  for (size_t i = 1; i < order.size(); ++i) {
    const std::vector<float>& next = partials[size_t(order[i])];
    for (size_t j = 0; j < sum.size(); ++j) sum[j] += next[j];
  }
  return sum;
}

// The filter gradient as the sum of the images' parts in kAtomicPartials slices of the batch.
std::vector<float> backward_filter_atomic(const ConvShape& s, const float* x, const float* dy) {
  const int slices = std::min(kAtomicPartials, s.N);
  std::vector<std::vector<float>> partials(size_t(slices), std::vector<float>(size_t(s.K) * s.R * s.S * s.C));
  for (int i = 0; i < slices; ++i) {
    const int first = s.N * i / slices, last = s.N * (i + 1) / slices;
    ConvShape slice = s;
    slice.N = last - first;
    conv2d_backward_filter_cpu(x + size_t(first) * s.H * s.W * s.C, dy + size_t(first) * s.P() * s.Q() * s.K, slice,
                               0.0f, partials[size_t(i)].data());
  }
  return add_in_order(partials, atomic_order(slices));
}

// The data gradient as the sum of the parts of kAtomicPartials slices of the output channels.
std::vector<float> backward_data_atomic(const ConvShape& s, const float* dy, const float* w) {
  const int slices = std::min(kAtomicPartials, s.K);
  const size_t pixels = size_t(s.N) * s.P() * s.Q(), filter = size_t(s.R) * s.S * s.C;
  std::vector<std::vector<float>> partials(size_t(slices), std::vector<float>(size_t(s.N) * s.H * s.W * s.C));
  for (int i = 0; i < slices; ++i) {
    const int first = s.K * i / slices, last = s.K * (i + 1) / slices;
    ConvShape slice = s;
    slice.K = last - first;
    std::vector<float> dy_slice(pixels * size_t(slice.K));
    for (size_t q = 0; q < pixels; ++q)
      std::copy_n(dy + q * s.K + first, slice.K, dy_slice.data() + q * size_t(slice.K));
    conv2d_backward_data_cpu(dy_slice.data(), w + size_t(first) * filter, slice, 0.0f, partials[size_t(i)].data());
  }
  return add_in_order(partials, atomic_order(slices));
}

// Applies `prologue` to x (NHWC, fp32, `channels` per pixel) element by element in fp32, each
// operation rounded once, and rounds the result to `type`, the convolution's operand type, as the
// convolution then takes it (Note [Emulated fusion] in cudnn_graph.cpp).
void apply_prologue(const std::vector<PointwiseStep>& prologue, int channels, cudnnDataType_t type,
                    std::vector<float>& x) {
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t c = i % size_t(channels);
    float v = x[i];
    for (const PointwiseStep& step : prologue) {
      if (step.mode == CUDNN_POINTWISE_MUL) v = mul_rn(v, step.operand[c]);
      if (step.mode == CUDNN_POINTWISE_ADD) v = add_rn(v, step.operand[c]);
      if (step.mode == CUDNN_POINTWISE_RELU_FWD) v = v > 0.0f ? v : 0.0f;
    }
    x[i] = type == CUDNN_DATA_BFLOAT16 ? cutrain_emu_bf16_bits_to_float(cutrain_emu_float_to_bf16_bits(v)) : v;
  }
}

// Computes one pass on NHWC fp32 copies (the CPU twins), into `out` with alpha and beta; a
// non-deterministic algorithm adds its partial sums in an order of its own (Note [Emulated atomics]).
// A forward pass first applies `prologue` to its copy of x.
void compute(Pass pass, const Problem& p, const Operands& o, float alpha, float beta, bool atomic,
             const std::vector<PointwiseStep>& prologue) {
  const ConvShape& s = p.shape;
  std::vector<float> result;
  switch (pass) {
    case Pass::forward: {
      result.resize(elements(p.y));
      std::vector<float> x = to_nhwc(p.x, o.a);
      if (!prologue.empty()) apply_prologue(prologue, p.x.c, p.x.type, x);
      conv2d_forward_cpu(x.data(), to_nhwc(p.w, o.b).data(), s, result.data());
      blend(p.y, result, alpha, beta, o.out);
      break;
    }
    case Pass::backward_data: {
      if (atomic) {
        result = backward_data_atomic(s, to_nhwc(p.y, o.b).data(), to_nhwc(p.w, o.a).data());
      } else {
        result.resize(elements(p.x));
        conv2d_backward_data_cpu(to_nhwc(p.y, o.b).data(), to_nhwc(p.w, o.a).data(), s, 0.0f, result.data());
      }
      blend(p.x, result, alpha, beta, o.out);
      break;
    }
    case Pass::backward_filter: {
      if (atomic) {
        result = backward_filter_atomic(s, to_nhwc(p.x, o.a).data(), to_nhwc(p.y, o.b).data());
      } else {
        result.resize(elements(p.w));
        conv2d_backward_filter_cpu(to_nhwc(p.x, o.a).data(), to_nhwc(p.y, o.b).data(), s, 0.0f, result.data());
      }
      blend(p.w, result, alpha, beta, o.out);
      break;
    }
  }
}

}  // namespace

// Device memory of at least `bytes` at `p`. Real cuDNN cannot tell: its kernel would read or
// write outside the buffer, and the stream would fail later with cudaErrorIllegalAddress. The
// emulation names the mistake at the call, with CUDNN_STATUS_BAD_PARAM.
cudnnStatus_t check_device(const void* p, size_t bytes, const char* what) {
  if (!p) return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + " is null");
  if (!inside_device_allocation(p, bytes))
    return fail(CUDNN_STATUS_BAD_PARAM,
                std::string(what) + " is not " + std::to_string(bytes) + " bytes inside one live device allocation");
  return CUDNN_STATUS_SUCCESS;
}

namespace {

// What one convolution call computes and moves, for the step's record: each of the three passes
// is 2*N*P*Q*K*R*S*C FLOPs; it reads its two inputs and writes its output (and reads that too when
// beta adds to what is there).
// A forward pass with a pointwise prologue is one fused call, "cudnnConvolutionForwardFused", which
// also reads each of the prologue's operands, one float per channel of x, once.
RecordedOp convolution_record(Pass pass, const Problem& p, const Dims4& a, const Dims4& b, const Dims4& out, float beta,
                              const std::vector<PointwiseStep>& prologue, cudaStream_t stream) {
  static const char* const kCalls[] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                                       "cudnnConvolutionBackwardFilter"};
  const ConvShape& s = p.shape;
  char detail[160];
  std::snprintf(detail, sizeof detail, "N=%d H=%d W=%d C=%d K=%d R=%d S=%d stride=%d pad=%d", s.N, s.H, s.W, s.C, s.K,
                s.R, s.S, s.stride, s.pad);
  const int64_t out_bytes = int64_t(bytes_of(out));
  int64_t operand_bytes = 0;
  std::string fused;
  for (const PointwiseStep& step : prologue) {
    if (step.operand) operand_bytes += int64_t(s.C) * int64_t(sizeof(float));
    fused += fused.empty() ? ", prologue on x: " : " ";
    fused += step.mode == CUDNN_POINTWISE_MUL ? "MUL" : step.mode == CUDNN_POINTWISE_ADD ? "ADD" : "RELU_FWD";
  }
  RecordedOp op;
  op.kind = RecordedOp::Kind::library;
  op.name = prologue.empty() ? kCalls[int(pass)] : "cudnnConvolutionForwardFused";
  op.detail = detail + fused;
  op.bytes = {int64_t(bytes_of(a) + bytes_of(b)) + operand_bytes + (beta != 0 ? out_bytes : 0), out_bytes};
  op.flops = 2.0 * s.N * s.P() * s.Q() * s.K * s.R * s.S * s.C;
  op.stream = stream;
  return op;
}

// What one batch-norm call moves at the least, for the step's record: x (and z), y or dy and dx
// (and dz), and the reserve space's ReLU mask. What cuDNN's own kernels move, only a profiler on a
// GPU can tell.
RecordedOp batchnorm_record(const char* name, size_t bytes_read, size_t bytes_written, cudaStream_t stream) {
  RecordedOp op;
  op.kind = RecordedOp::Kind::library;
  op.name = name;
  op.bytes = {int64_t(bytes_read), int64_t(bytes_written)};
  op.stream = stream;
  return op;
}

}  // namespace

// The work of one convolution on the handle's stream. A workspace that the algorithm needs is
// written with garbage first, in a work item of its own, which the convolution's own work item
// checks is still there: a call that shares the workspace with another at the same time (two
// streams, no event between) finds the other's garbage and writes NaN, where real cuDNN's
// corrupted intermediate results would give some wrong output.
cudnnStatus_t launch(cudnnHandle_t handle, Pass pass, const Problem& p, const Operands& o, float alpha, float beta,
                     void* workspace, size_t needed, bool atomic, const std::vector<PointwiseStep>& prologue) {
  const Dims4& a = pass == Pass::backward_data ? p.w : p.x;
  const Dims4& b = pass == Pass::forward ? p.w : p.y;
  const Dims4& out = pass == Pass::forward ? p.y : pass == Pass::backward_data ? p.x : p.w;
  if (record_instead(convolution_record(pass, p, a, b, out, beta, prologue, handle->stream)))
    return CUDNN_STATUS_SUCCESS;
  const uint64_t stamp = next_stamp();
  if (needed > 0) {
    if (enqueue(handle->stream, "cudnn workspace", [=] { fill_garbage(workspace, needed, stamp); }) != cudaSuccess)
      return fail(CUDNN_STATUS_EXECUTION_FAILED, "the handle's stream does not take work");
  }
  const cudaError_t queued = enqueue(handle->stream, "cudnnConvolution", [=] {
    if (needed > 0 && !holds_garbage(workspace, needed, stamp)) {
      std::vector<float> nan(elements(out), std::numeric_limits<float>::quiet_NaN());
      blend(out, nan, 1.0f, 0.0f, o.out);
    } else {
      compute(pass, p, o, alpha, beta, atomic, prologue);
    }
  });
  if (queued != cudaSuccess) return fail(CUDNN_STATUS_EXECUTION_FAILED, "the handle's stream does not take work");
  return CUDNN_STATUS_SUCCESS;
}

namespace {

// One convolution call: the checks at the call, then its work (launch).
cudnnStatus_t convolve(cudnnHandle_t handle, Pass pass, const void* alpha, const cudnnTensorStruct* x,
                       const cudnnFilterStruct* w, const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y,
                       int algo, const Operands& o, void* workspace, size_t workspace_bytes, const void* beta) {
  Problem p;
  if (cudnnStatus_t s = make_problem(x, w, conv, y, &p); s != CUDNN_STATUS_SUCCESS) return s;
  if (!handle) return fail(CUDNN_STATUS_BAD_PARAM, "the handle is null");
  if (!alpha || !beta) return fail(CUDNN_STATUS_BAD_PARAM, "alpha or beta is null");
  size_t needed = 0;
  if (cudnnStatus_t s = algo_workspace(pass, algo, p, &needed); s != CUDNN_STATUS_SUCCESS) return s;
  const Dims4& a = pass == Pass::backward_data ? p.w : p.x;
  const Dims4& b = pass == Pass::forward ? p.w : p.y;
  const Dims4& out = pass == Pass::forward ? p.y : pass == Pass::backward_data ? p.x : p.w;
  for (auto [ptr, dims, name] : {std::tuple{o.a, &a, "the first input"}, std::tuple{o.b, &b, "the second input"},
                                 std::tuple{static_cast<const void*>(o.out), &out, "the output"}})
    if (cudnnStatus_t s = check_device(ptr, bytes_of(*dims), name); s != CUDNN_STATUS_SUCCESS) return s;
  // A workspace smaller than the algorithm needs: cuDNN's reference names no status for this call
  // (only that Find reports CUDNN_STATUS_ALLOC_FAILED for an insufficient one); the emulation
  // answers CUDNN_STATUS_BAD_PARAM, the status of every other unfit argument.
  if (workspace_bytes < needed)
    return fail(CUDNN_STATUS_BAD_PARAM, "the workspace is " + std::to_string(workspace_bytes) + " bytes; " +
                                            kPassNames[int(pass)] + " algorithm " + std::to_string(algo) + " needs " +
                                            std::to_string(needed));
  if (needed > 0 || (workspace && workspace_bytes > 0))
    if (cudnnStatus_t s = check_device(workspace, workspace_bytes, "the workspace"); s != CUDNN_STATUS_SUCCESS)
      return s;
  if (cudnnStatus_t s = injected_fault(kPassNames[int(pass)], "algo", std::to_string(algo)); s != CUDNN_STATUS_SUCCESS)
    return s;

  return launch(handle, pass, p, o, *static_cast<const float*>(alpha), *static_cast<const float*>(beta), workspace,
                needed, algo_is_atomic(pass, algo));
}

// ---- what the passes' queries share ----

cudnnStatus_t max_count(cudnnHandle_t handle, Pass pass, int* count) {
  if (!handle || !count) return fail(CUDNN_STATUS_BAD_PARAM, "the handle or the count pointer is null");
  *count = traits(pass).count;
  return CUDNN_STATUS_SUCCESS;
}

// The _v7 heuristics (measured = false) and cudnnFind* (measured = true).
template <typename Perf>
cudnnStatus_t ranked(cudnnHandle_t handle, Pass pass, bool measured, const cudnnTensorStruct* x,
                     const cudnnFilterStruct* w, const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y,
                     int requested, int* returned, Perf* results) {
  Problem p;
  if (!handle) return fail(CUDNN_STATUS_BAD_PARAM, "the handle is null");
  if (cudnnStatus_t s = make_problem(x, w, conv, y, &p); s != CUDNN_STATUS_SUCCESS) return s;
  return rank(pass, p, measured, requested, returned, results);
}

cudnnStatus_t workspace_size(cudnnHandle_t handle, Pass pass, const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                             const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y, int algo, size_t* bytes) {
  Problem p;
  if (!handle || !bytes) return fail(CUDNN_STATUS_BAD_PARAM, "the handle or the size pointer is null");
  if (cudnnStatus_t s = make_problem(x, w, conv, y, &p); s != CUDNN_STATUS_SUCCESS) return s;
  return algo_workspace(pass, algo, p, bytes);
}

// ---- batch norm: one problem, checked as the calls take it ----

// A training batch norm as cutrain calls it: x, y (and z) NHWC of one type, the statistics float
// 1xCx1x1, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, and with a fused op a ReLU. The fused ops are refused
// where cuDNN documents them unsupported (below), and the rest the emulation does not compute with
// CUDNN_STATUS_NOT_SUPPORTED too.
struct BatchNormProblem {
  Dims4 x;
  cutrain::BatchNormShape shape;
  size_t mask_bytes = 0;  // the reserve space: the ReLU mask, kept for the backward
};

cudnnStatus_t make_batchnorm(cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const cudnnTensorStruct* x,
                             const cudnnTensorStruct* z, const cudnnTensorStruct* y, const cudnnTensorStruct* stats,
                             const cudnnActivationStruct* activation, BatchNormProblem* p) {
  if (!x || !y || !stats) return fail(CUDNN_STATUS_BAD_PARAM, "a descriptor is null");
  if (!x->set || !y->set || !stats->set) return fail(CUDNN_STATUS_BAD_PARAM, "a descriptor was never set");
  if (ops < CUDNN_BATCHNORM_OPS_BN || ops > CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION)
    return fail(CUDNN_STATUS_BAD_PARAM, "invalid batch norm ops");
  if (mode != CUDNN_BATCHNORM_SPATIAL_PERSISTENT)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, "the emulation computes CUDNN_BATCHNORM_SPATIAL_PERSISTENT only");
  if (cudnnStatus_t s = injected_fault("batchnorm", "algo", "any"); s != CUDNN_STATUS_SUCCESS) return s;
  const auto same = [](const Dims4& a, const Dims4& b) {
    return a.format == b.format && a.type == b.type && a.n == b.n && a.c == b.c && a.h == b.h && a.w == b.w;
  };
  if (!same(*x, *y)) return fail(CUDNN_STATUS_BAD_PARAM, "x and y differ in shape, layout or type");
  if (x->format != CUDNN_TENSOR_NHWC) return fail(CUDNN_STATUS_NOT_SUPPORTED, "the emulation computes NHWC only");
  if (stats->type != CUDNN_DATA_FLOAT || stats->n != 1 || stats->c != x->c || stats->h != 1 || stats->w != 1)
    return fail(CUDNN_STATUS_BAD_PARAM, "the statistics' descriptor is not float 1x" + std::to_string(x->c) + "x1x1");
  const bool relu = ops != CUDNN_BATCHNORM_OPS_BN, add = ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
  // cuDNN 8.9.2's API reference, cudnnBatchNormalizationForwardTrainingEx (the backward and the
  // size queries take the same bnOps): bnOps is the "mode of operation for the fast NHWC kernel",
  // which runs when "all tensors, namely, x, y, dz, dy, dx must be NHWC-fully packed and must be of
  // the type CUDNN_DATA_HALF" (with C a multiple of 4 for BN_ADD_ACTIVATION), at
  // https://docs.nvidia.com/deeplearning/cudnn/archives/cudnn-892/api/index.html#cudnnBatchNormalizationForwardTrainingEx
  // Since the emulation computes no half (computed_type), it refuses every fused op.
  if (relu && x->type != CUDNN_DATA_HALF)
    return fail(CUDNN_STATUS_NOT_SUPPORTED,
                "the fused batch norm ops take CUDNN_DATA_HALF only (cuDNN's API reference, "
                "cudnnBatchNormalizationForwardTrainingEx)");
  if (relu && (!activation || !activation->set || activation->mode != CUDNN_ACTIVATION_RELU))
    return fail(CUDNN_STATUS_NOT_SUPPORTED, "the fused ops need a ReLU activation descriptor");
  if (add && (!z || !z->set || !same(*x, *z))) return fail(CUDNN_STATUS_BAD_PARAM, "z is not described as x");
  p->x = *x;
  p->shape = {int64_t(x->n) * x->h * x->w, x->c, cutrain::BatchNormFusion{relu, add}};
  p->mask_bytes = relu ? size_t(cutrain::bn_mask_bytes(p->shape)) : 0;
  return CUDNN_STATUS_SUCCESS;
}

// alpha 1 and beta 0, the only blend cutrain asks for.
cudnnStatus_t check_plain_blend(const void* alpha, const void* beta) {
  if (!alpha || !beta) return fail(CUDNN_STATUS_BAD_PARAM, "alpha or beta is null");
  if (*static_cast<const float*>(alpha) != 1.0f || *static_cast<const float*>(beta) != 0.0f)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, "the emulation computes batch norm with alpha 1 and beta 0 only");
  return CUDNN_STATUS_SUCCESS;
}

// The reserve space of a call: as large as the forward's ReLU mask, inside one allocation.
cudnnStatus_t check_reserve(const BatchNormProblem& p, const void* reserve, size_t reserve_bytes) {
  if (reserve_bytes < p.mask_bytes)
    return fail(CUDNN_STATUS_BAD_PARAM, "the reserve space is " + std::to_string(reserve_bytes) + " bytes, " +
                                            std::to_string(p.mask_bytes) + " needed");
  return p.mask_bytes > 0 ? check_device(reserve, p.mask_bytes, "the reserve space") : CUDNN_STATUS_SUCCESS;
}

// The device buffers a batch norm call names, each checked as check_device does.
cudnnStatus_t check_buffers(std::initializer_list<std::tuple<const void*, size_t, const char*>> buffers) {
  for (const auto& [p, bytes, what] : buffers)
    if (cudnnStatus_t s = check_device(p, bytes, what); s != CUDNN_STATUS_SUCCESS) return s;
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace
}  // namespace cutrain::emu::cudnn

using namespace cutrain::emu;
using namespace cutrain::emu::cudnn;

extern "C" {

size_t cudnnGetVersion(void) { return CUDNN_VERSION; }

// cuDNN's name of the status; for the emulation's last refusal with this status, also why.
const char* cudnnGetErrorString(cudnnStatus_t status) { return refusal.describe(status, status_name(status), "cuDNN"); }

void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (!message || max_size == 0) return;
  const cudnnStatus_t last = refusal.last_status();
  const std::string text = last == CUDNN_STATUS_SUCCESS ? "" : cudnnGetErrorString(last);
  const size_t length = std::min(text.size(), max_size - 1);
  std::memcpy(message, text.data(), length);
  message[length] = '\0';
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (!handle) return fail(CUDNN_STATUS_BAD_PARAM, "the handle pointer is null");
  *handle = new cudnnContext;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (!handle) return fail(CUDNN_STATUS_BAD_PARAM, "the handle is null");
  if (!valid_stream(stream)) return fail(CUDNN_STATUS_BAD_PARAM, "the stream is not a live stream");
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d) {
  if (!d) return fail(CUDNN_STATUS_BAD_PARAM, "the descriptor pointer is null");
  *d = new cudnnTensorStruct;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format, cudnnDataType_t type,
                                         int n, int c, int h, int w) {
  return set_dims(d, format, type, n, c, h, w);
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* d) {
  if (!d) return fail(CUDNN_STATUS_BAD_PARAM, "the descriptor pointer is null");
  *d = new cudnnFilterStruct;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type, cudnnTensorFormat_t format,
                                         int k, int c, int h, int w) {
  return set_dims(d, format, type, k, c, h, w);
}

cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* d) {
  if (!d) return fail(CUDNN_STATUS_BAD_PARAM, "the descriptor pointer is null");
  *d = new cudnnConvolutionStruct;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t math) {
  if (!d) return fail(CUDNN_STATUS_BAD_PARAM, "the descriptor is null");
  if (math < CUDNN_DEFAULT_MATH || math > CUDNN_FMA_MATH) return fail(CUDNN_STATUS_BAD_PARAM, "invalid math type");
  d->math = math;
  return CUDNN_STATUS_SUCCESS;
}

// As cuDNN documents: BAD_PARAM for a negative pad, a stride or dilation that is not positive, or
// an invalid mode or compute type. Groups stay 1: cutrain never sets another count.
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w, int u, int v,
                                              int dilation_h, int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
  if (!d) return fail(CUDNN_STATUS_BAD_PARAM, "the descriptor is null");
  if (pad_h < 0 || pad_w < 0) return fail(CUDNN_STATUS_BAD_PARAM, "a pad is negative");
  if (u <= 0 || v <= 0) return fail(CUDNN_STATUS_BAD_PARAM, "a stride is not positive");
  if (dilation_h <= 0 || dilation_w <= 0) return fail(CUDNN_STATUS_BAD_PARAM, "a dilation is not positive");
  if (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION) return fail(CUDNN_STATUS_BAD_PARAM, "invalid mode");
  if (!valid_type(compute)) return fail(CUDNN_STATUS_BAD_PARAM, "invalid compute type");
  const cudnnMathType_t math = d->math;  // the math type is set on its own
  *d = cudnnConvolutionStruct{true, pad_h, pad_w, u, v, dilation_h, dilation_w, mode, compute, math};
  return CUDNN_STATUS_SUCCESS;
}

// ---- the three passes: each names its descriptors in its own order (x, w, y as forward sees them) ----

cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  return max_count(handle, Pass::forward, count);
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                     const cudnnFilterDescriptor_t w,
                                                     const cudnnConvolutionDescriptor_t conv,
                                                     const cudnnTensorDescriptor_t y, const int requested,
                                                     int* returned, cudnnConvolutionFwdAlgoPerf_t* results) {
  return ranked(handle, Pass::forward, false, x, w, conv, y, requested, returned, results);
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithm(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                   const cudnnFilterDescriptor_t w,
                                                   const cudnnConvolutionDescriptor_t conv,
                                                   const cudnnTensorDescriptor_t y, const int requested, int* returned,
                                                   cudnnConvolutionFwdAlgoPerf_t* results) {
  return ranked(handle, Pass::forward, true, x, w, conv, y, requested, returned, results);
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                      const cudnnFilterDescriptor_t w,
                                                      const cudnnConvolutionDescriptor_t conv,
                                                      const cudnnTensorDescriptor_t y, cudnnConvolutionFwdAlgo_t algo,
                                                      size_t* bytes) {
  return workspace_size(handle, Pass::forward, x, w, conv, y, algo, bytes);
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t xDesc,
                                      const void* x, const cudnnFilterDescriptor_t wDesc, const void* w,
                                      const cudnnConvolutionDescriptor_t conv, cudnnConvolutionFwdAlgo_t algo,
                                      void* workspace, size_t workspace_bytes, const void* beta,
                                      const cudnnTensorDescriptor_t yDesc, void* y) {
  return convolve(handle, Pass::forward, alpha, xDesc, wDesc, conv, yDesc, algo, {x, w, y}, workspace, workspace_bytes,
                  beta);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  return max_count(handle, Pass::backward_data, count);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t handle, const cudnnFilterDescriptor_t w,
                                                          const cudnnTensorDescriptor_t dy,
                                                          const cudnnConvolutionDescriptor_t conv,
                                                          const cudnnTensorDescriptor_t dx, const int requested,
                                                          int* returned, cudnnConvolutionBwdDataAlgoPerf_t* results) {
  return ranked(handle, Pass::backward_data, false, dx, w, conv, dy, requested, returned, results);
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithm(cudnnHandle_t handle, const cudnnFilterDescriptor_t w,
                                                        const cudnnTensorDescriptor_t dy,
                                                        const cudnnConvolutionDescriptor_t conv,
                                                        const cudnnTensorDescriptor_t dx, const int requested,
                                                        int* returned, cudnnConvolutionBwdDataAlgoPerf_t* results) {
  return ranked(handle, Pass::backward_data, true, dx, w, conv, dy, requested, returned, results);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle, const cudnnFilterDescriptor_t w,
                                                           const cudnnTensorDescriptor_t dy,
                                                           const cudnnConvolutionDescriptor_t conv,
                                                           const cudnnTensorDescriptor_t dx,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
  return workspace_size(handle, Pass::backward_data, dx, w, conv, dy, algo, bytes);
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha, const cudnnFilterDescriptor_t wDesc,
                                           const void* w, const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                           const cudnnConvolutionDescriptor_t conv, cudnnConvolutionBwdDataAlgo_t algo,
                                           void* workspace, size_t workspace_bytes, const void* beta,
                                           const cudnnTensorDescriptor_t dxDesc, void* dx) {
  return convolve(handle, Pass::backward_data, alpha, dxDesc, wDesc, conv, dyDesc, algo, {w, dy, dx}, workspace,
                  workspace_bytes, beta);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  return max_count(handle, Pass::backward_filter, count);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                            const cudnnTensorDescriptor_t dy,
                                                            const cudnnConvolutionDescriptor_t conv,
                                                            const cudnnFilterDescriptor_t dw, const int requested,
                                                            int* returned,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t* results) {
  return ranked(handle, Pass::backward_filter, false, x, dw, conv, dy, requested, returned, results);
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithm(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                          const cudnnTensorDescriptor_t dy,
                                                          const cudnnConvolutionDescriptor_t conv,
                                                          const cudnnFilterDescriptor_t dw, const int requested,
                                                          int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* results) {
  return ranked(handle, Pass::backward_filter, true, x, dw, conv, dy, requested, returned, results);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                             const cudnnTensorDescriptor_t dy,
                                                             const cudnnConvolutionDescriptor_t conv,
                                                             const cudnnFilterDescriptor_t dw,
                                                             cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
  return workspace_size(handle, Pass::backward_filter, x, dw, conv, dy, algo, bytes);
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             const cudnnTensorDescriptor_t xDesc, const void* x,
                                             const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                             const cudnnConvolutionDescriptor_t conv,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workspace,
                                             size_t workspace_bytes, const void* beta,
                                             const cudnnFilterDescriptor_t dwDesc, void* dw) {
  return convolve(handle, Pass::backward_filter, alpha, xDesc, dwDesc, conv, dyDesc, algo, {x, dy, dw}, workspace,
                  workspace_bytes, beta);
}

// ---- batch norm ----

cudnnStatus_t cudnnCreateActivationDescriptor(cudnnActivationDescriptor_t* d) {
  if (!d) return fail(CUDNN_STATUS_BAD_PARAM, "the descriptor pointer is null");
  *d = new cudnnActivationStruct;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t d, cudnnActivationMode_t mode,
                                           cudnnNanPropagation_t nan, double) {
  if (!d) return fail(CUDNN_STATUS_BAD_PARAM, "the descriptor is null");
  if (mode < CUDNN_ACTIVATION_SIGMOID || mode > CUDNN_ACTIVATION_SWISH)
    return fail(CUDNN_STATUS_BAD_PARAM, "invalid mode");
  if (nan != CUDNN_NOT_PROPAGATE_NAN && nan != CUDNN_PROPAGATE_NAN)
    return fail(CUDNN_STATUS_BAD_PARAM, "invalid NaN propagation");
  *d = cudnnActivationStruct{true, mode};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyActivationDescriptor(cudnnActivationDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}

// The emulation needs no workspace; the reserve space holds the ReLU mask.
cudnnStatus_t cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const cudnnTensorDescriptor_t x,
    const cudnnTensorDescriptor_t z, const cudnnTensorDescriptor_t y, const cudnnTensorDescriptor_t stats,
    const cudnnActivationDescriptor_t activation, size_t* bytes) {
  BatchNormProblem p;
  if (!handle || !bytes) return fail(CUDNN_STATUS_BAD_PARAM, "the handle or the size pointer is null");
  if (cudnnStatus_t s = make_batchnorm(mode, ops, x, z, y, stats, activation, &p); s != CUDNN_STATUS_SUCCESS) return s;
  *bytes = 0;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetBatchNormalizationBackwardExWorkspaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const cudnnTensorDescriptor_t x,
    const cudnnTensorDescriptor_t y, const cudnnTensorDescriptor_t dy, const cudnnTensorDescriptor_t dz,
    const cudnnTensorDescriptor_t dx, const cudnnTensorDescriptor_t stats, const cudnnActivationDescriptor_t activation,
    size_t* bytes) {
  BatchNormProblem p, gradients;
  if (!handle || !bytes) return fail(CUDNN_STATUS_BAD_PARAM, "the handle or the size pointer is null");
  if (cudnnStatus_t s = make_batchnorm(mode, ops, x, dz, y, stats, activation, &p); s != CUDNN_STATUS_SUCCESS) return s;
  if (cudnnStatus_t s = make_batchnorm(mode, ops, dx, dz, dy, stats, activation, &gradients); s != CUDNN_STATUS_SUCCESS)
    return s;
  *bytes = 0;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetBatchNormalizationTrainingExReserveSpaceSize(cudnnHandle_t handle, cudnnBatchNormMode_t mode,
                                                                   cudnnBatchNormOps_t ops,
                                                                   const cudnnActivationDescriptor_t activation,
                                                                   const cudnnTensorDescriptor_t x, size_t* bytes) {
  if (!handle || !bytes || !x) return fail(CUDNN_STATUS_BAD_PARAM, "the handle, x or the size pointer is null");
  const cudnnTensorStruct stats{Dims4{true, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, x->c, 1, 1}};
  BatchNormProblem p;
  if (cudnnStatus_t s = make_batchnorm(mode, ops, x, x, x, &stats, activation, &p); s != CUDNN_STATUS_SUCCESS) return s;
  *bytes = p.mask_bytes;
  return CUDNN_STATUS_SUCCESS;
}

// The CPU reference's training forward on fp32 copies (kernels/batchnorm.h): the same formulas as
// cutrain's kernels, with cuDNN's arguments. The running statistics are updated with the factor
// as the momentum, and the unbiased variance, as cuDNN does.
cudnnStatus_t cudnnBatchNormalizationForwardTrainingEx(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const void* alpha, const void* beta,
    const cudnnTensorDescriptor_t xDesc, const void* x, const cudnnTensorDescriptor_t zDesc, const void* z,
    const cudnnTensorDescriptor_t yDesc, void* y, const cudnnTensorDescriptor_t statsDesc, const void* scale,
    const void* bias, double factor, void* running_mean, void* running_var, double epsilon, void* save_mean,
    void* save_invstd, cudnnActivationDescriptor_t activation, void*, size_t, void* reserve, size_t reserve_bytes) {
  BatchNormProblem p;
  if (!handle) return fail(CUDNN_STATUS_BAD_PARAM, "the handle is null");
  if (cudnnStatus_t s = make_batchnorm(mode, ops, xDesc, zDesc, yDesc, statsDesc, activation, &p);
      s != CUDNN_STATUS_SUCCESS)
    return s;
  if (cudnnStatus_t s = check_plain_blend(alpha, beta); s != CUDNN_STATUS_SUCCESS) return s;
  if (epsilon < CUDNN_BN_MIN_EPSILON) return fail(CUDNN_STATUS_BAD_PARAM, "epsilon is below CUDNN_BN_MIN_EPSILON");
  if (!save_mean || !save_invstd)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, "the emulation always saves the mean and invstd for the backward");
  const size_t tensor = bytes_of(p.x), stats = size_t(p.shape.channels) * sizeof(float);
  if (cudnnStatus_t s = check_reserve(p, reserve, reserve_bytes); s != CUDNN_STATUS_SUCCESS) return s;
  if (cudnnStatus_t s = check_buffers({{x, tensor, "x"},
                                       {y, tensor, "y"},
                                       {scale, stats, "bnScale"},
                                       {bias, stats, "bnBias"},
                                       {running_mean, stats, "resultRunningMean"},
                                       {running_var, stats, "resultRunningVariance"},
                                       {save_mean, stats, "resultSaveMean"},
                                       {save_invstd, stats, "resultSaveInvVariance"}});
      s != CUDNN_STATUS_SUCCESS)
    return s;
  if (p.shape.fusion.residual)
    if (cudnnStatus_t s = check_device(z, tensor, "z"); s != CUDNN_STATUS_SUCCESS) return s;
  const bool residual = p.shape.fusion.residual;
  if (record_instead(batchnorm_record("cudnnBatchNormalizationForwardTrainingEx", tensor * (residual ? 2 : 1),
                                      tensor + p.mask_bytes, handle->stream)))
    return CUDNN_STATUS_SUCCESS;
  const cudaError_t queued = enqueue(handle->stream, "cudnnBatchNormalizationForwardTrainingEx", [=] {
    std::vector<float> xs = to_nhwc(p.x, x), zs = p.shape.fusion.residual ? to_nhwc(p.x, z) : std::vector<float>{};
    std::vector<float> ys(xs.size());
    cutrain::BatchNormForward<float> f;
    f.x = xs.data();
    f.residual = zs.data();
    f.gamma = static_cast<const float*>(scale);
    f.beta = static_cast<const float*>(bias);
    f.eps = float(epsilon);
    f.momentum = float(factor);
    f.y = ys.data();
    f.relu_mask = static_cast<uint8_t*>(reserve);
    f.mean = static_cast<float*>(save_mean);
    f.invstd = static_cast<float*>(save_invstd);
    f.running_mean = static_cast<float*>(running_mean);
    f.running_var = static_cast<float*>(running_var);
    cutrain::bn_forward_train_cpu(p.shape, f);
    blend(p.x, ys, 1.0f, 0.0f, y);
  });
  if (queued != cudaSuccess) return fail(CUDNN_STATUS_EXECUTION_FAILED, "the handle's stream does not take work");
  return CUDNN_STATUS_SUCCESS;
}

// The CPU reference's backward, with the mask the forward left in the reserve space; dz is the
// gradient of the added z (= dy behind the ReLU).
cudnnStatus_t cudnnBatchNormalizationBackwardEx(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const void* alpha_data,
    const void* beta_data, const void* alpha_param, const void* beta_param, const cudnnTensorDescriptor_t xDesc,
    const void* x, const cudnnTensorDescriptor_t yDesc, const void*, const cudnnTensorDescriptor_t dyDesc,
    const void* dy, const cudnnTensorDescriptor_t dzDesc, void* dz, const cudnnTensorDescriptor_t dxDesc, void* dx,
    const cudnnTensorDescriptor_t statsDesc, const void* scale, const void*, void* dscale, void* dbias, double epsilon,
    const void* saved_mean, const void* saved_invstd, cudnnActivationDescriptor_t activation, void*, size_t,
    void* reserve, size_t reserve_bytes) {
  BatchNormProblem p, gradients;
  if (!handle) return fail(CUDNN_STATUS_BAD_PARAM, "the handle is null");
  if (cudnnStatus_t s = make_batchnorm(mode, ops, xDesc, dzDesc, yDesc, statsDesc, activation, &p);
      s != CUDNN_STATUS_SUCCESS)
    return s;
  if (cudnnStatus_t s = make_batchnorm(mode, ops, dxDesc, dzDesc, dyDesc, statsDesc, activation, &gradients);
      s != CUDNN_STATUS_SUCCESS)
    return s;
  if (cudnnStatus_t s = check_plain_blend(alpha_data, beta_data); s != CUDNN_STATUS_SUCCESS) return s;
  if (cudnnStatus_t s = check_plain_blend(alpha_param, beta_param); s != CUDNN_STATUS_SUCCESS) return s;
  if (epsilon < CUDNN_BN_MIN_EPSILON) return fail(CUDNN_STATUS_BAD_PARAM, "epsilon is below CUDNN_BN_MIN_EPSILON");
  if (!saved_mean || !saved_invstd)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, "the emulation takes the forward's saved mean and invstd only");
  const size_t tensor = bytes_of(p.x), stats = size_t(p.shape.channels) * sizeof(float);
  if (cudnnStatus_t s = check_reserve(p, reserve, reserve_bytes); s != CUDNN_STATUS_SUCCESS) return s;
  if (cudnnStatus_t s = check_buffers({{x, tensor, "x"},
                                       {dy, tensor, "dy"},
                                       {dx, tensor, "dx"},
                                       {scale, stats, "bnScale"},
                                       {dscale, stats, "dBnScale"},
                                       {dbias, stats, "dBnBias"},
                                       {saved_mean, stats, "savedMean"},
                                       {saved_invstd, stats, "savedInvVariance"}});
      s != CUDNN_STATUS_SUCCESS)
    return s;
  if (p.shape.fusion.residual)
    if (cudnnStatus_t s = check_device(dz, tensor, "dz"); s != CUDNN_STATUS_SUCCESS) return s;
  const bool relu = p.shape.fusion.relu, residual = p.shape.fusion.residual;
  if (record_instead(batchnorm_record("cudnnBatchNormalizationBackwardEx", tensor * (relu ? 3 : 2) + p.mask_bytes,
                                      tensor * (residual ? 2 : 1), handle->stream)))
    return CUDNN_STATUS_SUCCESS;
  const cudaError_t queued = enqueue(handle->stream, "cudnnBatchNormalizationBackwardEx", [=] {
    std::vector<float> xs = to_nhwc(p.x, x), dys = to_nhwc(p.x, dy), dxs(xs.size()), dzs(xs.size());
    cutrain::BatchNormBackward<float> b;
    b.x = xs.data();
    b.dy = dys.data();
    b.relu_mask = static_cast<const uint8_t*>(reserve);
    b.mean = static_cast<const float*>(saved_mean);
    b.invstd = static_cast<const float*>(saved_invstd);
    b.gamma = static_cast<const float*>(scale);
    b.dx = dxs.data();
    b.d_residual = dzs.data();
    b.dgamma = static_cast<float*>(dscale);
    b.dbeta = static_cast<float*>(dbias);
    cutrain::bn_backward_cpu(p.shape, b);
    blend(p.x, dxs, 1.0f, 0.0f, dx);
    if (p.shape.fusion.residual) blend(p.x, dzs, 1.0f, 0.0f, dz);
  });
  if (queued != cudaSuccess) return fail(CUDNN_STATUS_EXECUTION_FAILED, "the handle's stream does not take work");
  return CUDNN_STATUS_SUCCESS;
}

}  // extern "C"
