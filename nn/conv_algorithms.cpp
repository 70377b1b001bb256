#include "nn/conv_algorithms.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "kernels/base/cache_dir.h"
#include "kernels/base/check.h"

namespace cutrain {
namespace {

// The three passes, each with its cuDNN calls, so that one template chooses for all of them.
struct ForwardPass {
  using Algo = cudnnConvolutionFwdAlgo_t;
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  static constexpr const char* name = "forward";
  static constexpr Algo always_supported = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  static constexpr int algo_count = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  static int max_count(cudnnHandle_t h) {
    int n = 0;
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &n));
    return n;
  }
  static void heuristics(cudnnHandle_t h, const ConvDescriptors& d, int n, int* got, Perf* perf) {
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, n, got, perf));
  }
  static void measure(cudnnHandle_t h, const ConvDescriptors& d, int n, int* got, Perf* perf) {
    CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(h, d.x, d.w, d.conv, d.y, n, got, perf));
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const ConvDescriptors& d, Algo a, size_t* bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, a, bytes);
  }
};

struct BackwardDataPass {
  using Algo = cudnnConvolutionBwdDataAlgo_t;
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  static constexpr const char* name = "backward-data";
  static constexpr Algo always_supported = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  static constexpr int algo_count = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  static int max_count(cudnnHandle_t h) {
    int n = 0;
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &n));
    return n;
  }
  static void heuristics(cudnnHandle_t h, const ConvDescriptors& d, int n, int* got, Perf* perf) {
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, n, got, perf));
  }
  static void measure(cudnnHandle_t h, const ConvDescriptors& d, int n, int* got, Perf* perf) {
    CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(h, d.w, d.y, d.conv, d.x, n, got, perf));
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const ConvDescriptors& d, Algo a, size_t* bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x, a, bytes);
  }
};

struct BackwardFilterPass {
  using Algo = cudnnConvolutionBwdFilterAlgo_t;
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  static constexpr const char* name = "backward-filter";
  static constexpr Algo always_supported = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  static constexpr int algo_count = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  static int max_count(cudnnHandle_t h) {
    int n = 0;
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &n));
    return n;
  }
  static void heuristics(cudnnHandle_t h, const ConvDescriptors& d, int n, int* got, Perf* perf) {
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, n, got, perf));
  }
  static void measure(cudnnHandle_t h, const ConvDescriptors& d, int n, int* got, Perf* perf) {
    CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(h, d.x, d.y, d.conv, d.w, n, got, perf));
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const ConvDescriptors& d, Algo a, size_t* bytes) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w, a, bytes);
  }
};

// The pass whose algorithms are of type Algo.
template <typename Algo>
struct PassOf;
template <>
struct PassOf<cudnnConvolutionFwdAlgo_t> {
  using type = ForwardPass;
};
template <>
struct PassOf<cudnnConvolutionBwdDataAlgo_t> {
  using type = BackwardDataPass;
};
template <>
struct PassOf<cudnnConvolutionBwdFilterAlgo_t> {
  using type = BackwardFilterPass;
};

// The math type cuDNN may use: tensor cores for bf16; for fp32, plain FMA unless TF32 is allowed.
cudnnMathType_t allowed_math(const Context& ctx) {
  if (ctx.dtype() == DType::bf16) return CUDNN_TENSOR_OP_MATH;
  return ctx.options.allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

bool strict_fp32(const Context& ctx) { return allowed_math(ctx) == CUDNN_FMA_MATH; }

std::string describe(const ConvShape& s) {
  char text[128];
  std::snprintf(text, sizeof text, "N=%d H=%d W=%d C=%d K=%d R=%d S=%d stride=%d pad=%d", s.N, s.H, s.W, s.C, s.K, s.R,
                s.S, s.stride, s.pad);
  return text;
}

// `algo` with `math`, if cuDNN supports it here within the workspace limit.
template <typename Pass>
std::optional<ConvAlgorithm<typename Pass::Algo>> supported(const Context& ctx, const ConvDescriptors& d,
                                                            typename Pass::Algo algo, cudnnMathType_t math,
                                                            size_t max_workspace = kMaxWorkspaceBytes) {
  CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, math));
  size_t bytes = 0;
  if (Pass::workspace(ctx.cudnn(ctx.main_stream()), d, algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > max_workspace)
    return std::nullopt;
  return ConvAlgorithm<typename Pass::Algo>{algo, math, bytes};
}

// The first usable candidate of a list that cuDNN ranks best first (measured or predicted), leaving
// out those in `failed` and those that need more than `max_workspace`.
template <typename Pass>
std::optional<ConvAlgorithm<typename Pass::Algo>> first_usable(const Context& ctx, const ConvDescriptors& d,
                                                               const std::vector<typename Pass::Perf>& ranked,
                                                               const std::set<int>& failed = {},
                                                               size_t max_workspace = kMaxWorkspaceBytes) {
  for (const typename Pass::Perf& p : ranked) {
    const bool tensor_op = p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    if (p.status != CUDNN_STATUS_SUCCESS || failed.count(int(p.algo))) continue;
    if (ctx.options.deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
    if (strict_fp32(ctx) && tensor_op) continue;
    // Strict fp32 pins FMA: a candidate's CUDNN_DEFAULT_MATH would let Ampere and newer use TF32.
    if (auto usable = supported<Pass>(ctx, d, p.algo, strict_fp32(ctx) ? CUDNN_FMA_MATH : p.mathType, max_workspace))
      return usable;
  }
  return std::nullopt;
}

template <typename Pass>
std::vector<typename Pass::Perf> ranked(const Context& ctx, const ConvDescriptors& d, bool measure) {
  CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, allowed_math(ctx)));
  const cudnnHandle_t cudnn = ctx.cudnn(ctx.main_stream());  // a measurement runs on the main stream
  std::vector<typename Pass::Perf> perf(size_t(std::max(Pass::max_count(cudnn), 1)));
  int got = 0;
  if (measure) {
    Pass::measure(cudnn, d, int(perf.size()), &got, perf.data());
  } else {
    Pass::heuristics(cudnn, d, int(perf.size()), &got, perf.data());
  }
  perf.resize(size_t(got));
  return perf;
}

// One pass: measured (benchmark) or predicted, then the fallbacks of conv_algorithms.h.
template <typename Pass>
ConvAlgorithm<typename Pass::Algo> choose(const Context& ctx, const ConvDescriptors& d, const ConvShape& shape,
                                          bool benchmark) {
  const std::string what = std::string(Pass::name) + " convolution " + describe(shape);
  if (benchmark) {
    if (auto measured = first_usable<Pass>(ctx, d, ranked<Pass>(ctx, d, /*measure=*/true))) return *measured;
    std::fprintf(stderr, "cutrain: warning: cuDNN measured no usable algorithm for the %s; taking its heuristics'\n",
                 what.c_str());
  }
  if (auto predicted = first_usable<Pass>(ctx, d, ranked<Pass>(ctx, d, /*measure=*/false))) return *predicted;
  auto fallback = supported<Pass>(ctx, d, Pass::always_supported, allowed_math(ctx));
  if (!fallback) throw std::runtime_error("cuDNN supports no " + what + " here (" + dtype_name(ctx.dtype()) + ")");
  std::fprintf(stderr,
               "cutrain: warning: cuDNN's heuristics offer no usable algorithm for the %s; taking algorithm %d\n",
               what.c_str(), int(Pass::always_supported));
  return *fallback;
}

ConvAlgorithms choose_all(const Context& ctx, const ConvDescriptors& d, const ConvShape& shape, bool benchmark) {
  return {choose<ForwardPass>(ctx, d, shape, benchmark), choose<BackwardDataPass>(ctx, d, shape, benchmark),
          choose<BackwardFilterPass>(ctx, d, shape, benchmark)};
}

// A cached entry, if every algorithm in it is still supported with its math type, with the
// workspaces this cuDNN asks for now.
std::optional<ConvAlgorithms> still_supported(const Context& ctx, const ConvDescriptors& d, const ConvAlgorithms& a) {
  auto forward = supported<ForwardPass>(ctx, d, a.forward.algo, a.forward.math);
  auto data = supported<BackwardDataPass>(ctx, d, a.backward_data.algo, a.backward_data.math);
  auto filter = supported<BackwardFilterPass>(ctx, d, a.backward_filter.algo, a.backward_filter.math);
  if (!forward || !data || !filter) return std::nullopt;
  return ConvAlgorithms{*forward, *data, *filter};
}

std::string this_gpu() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return std::string(prop.name) + " sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
}

// ---- the cache file's lines

constexpr const char* kCacheHeader = "cutrain cuDNN convolution algorithms v1";

template <typename Algo>
void write_algorithm(std::ostream& out, const ConvAlgorithm<Algo>& a) {
  out << ' ' << int(a.algo) << ' ' << int(a.math) << ' ' << a.workspace;
}

template <typename Algo>
bool read_algorithm(std::istream& in, int algo_count, ConvAlgorithm<Algo>& a) {
  int algo = -1, math = -1;
  long long workspace = -1;
  if (!(in >> algo >> math >> workspace)) return false;
  if (algo < 0 || algo >= algo_count || math < CUDNN_DEFAULT_MATH || math > CUDNN_FMA_MATH || workspace < 0 ||
      size_t(workspace) > kMaxWorkspaceBytes)
    return false;
  a = {Algo(algo), cudnnMathType_t(math), size_t(workspace)};
  return true;
}

}  // namespace

size_t ConvAlgorithms::workspace() const {
  return std::max({forward.workspace, backward_data.workspace, backward_filter.workspace});
}

std::string conv_algorithm_key(const std::string& gpu, size_t cudnn_version, const ConvShape& shape, DType dtype,
                               bool deterministic, bool tf32) {
  return gpu + "|cuDNN " + std::to_string(cudnn_version) + "|" + describe(shape) + "|" + dtype_name(dtype) +
         "|det=" + (deterministic ? "1" : "0") + "|tf32=" + (tf32 ? "1" : "0");
}

ConvAlgorithmCache::ConvAlgorithmCache(std::string path) : path_(std::move(path)) {
  std::ifstream in(path_);
  if (!in) return;  // none yet
  std::string line;
  int number = 1;
  auto corrupt = [&](const std::string& why) {
    entries_.clear();
    warning_ = path_ + ": line " + std::to_string(number) + ": " + why + "; measuring again";
  };
  if (!std::getline(in, line) || line != kCacheHeader) {
    corrupt("not a cutrain algorithm cache");
    return;
  }
  while (std::getline(in, line)) {
    ++number;
    const size_t tab = line.find('\t');
    if (tab == std::string::npos || tab == 0) {
      corrupt("no key and tab");
      return;
    }
    std::istringstream fields(line.substr(tab + 1));
    ConvAlgorithms a;
    std::string rest;
    if (!read_algorithm(fields, ForwardPass::algo_count, a.forward) ||
        !read_algorithm(fields, BackwardDataPass::algo_count, a.backward_data) ||
        !read_algorithm(fields, BackwardFilterPass::algo_count, a.backward_filter) || (fields >> rest)) {
      corrupt("expected 9 numbers in range after the key");
      return;
    }
    entries_[line.substr(0, tab)] = a;
  }
}

std::optional<ConvAlgorithms> ConvAlgorithmCache::find(const std::string& key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

std::string ConvAlgorithmCache::put(const std::string& key, const ConvAlgorithms& algorithms) {
  entries_[key] = algorithms;
  namespace fs = std::filesystem;
  std::error_code error;
  fs::create_directories(fs::path(path_).parent_path(), error);
  const std::string temporary = path_ + ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << kCacheHeader << '\n';
    for (const auto& [k, a] : entries_) {
      out << k << '\t';
      write_algorithm(out, a.forward);
      write_algorithm(out, a.backward_data);
      write_algorithm(out, a.backward_filter);
      out << '\n';
    }
    if (!out.flush()) return temporary + ": cannot write";
  }
  fs::rename(temporary, path_, error);
  if (error) {
    fs::remove(temporary, error);
    return path_ + ": cannot write";
  }
  return "";
}

std::string conv_algorithm_cache_path() { return cutrain_cache_dir() + "/cudnn-conv-algorithms.txt"; }

namespace {

// This process's choices, by choice_key; and for Note [Algorithm fallback], the algorithms that
// failed when they ran, by key and pass name (what replaced them is the choice itself).
struct Choices {
  std::mutex mutex;
  std::map<std::string, ConvAlgorithms> chosen;
  std::map<std::string, std::set<int>> failed;
};

Choices& choices() {
  static Choices c;
  return c;
}

std::string choice_key(const Context& ctx, const ConvShape& shape) {
  return conv_algorithm_key(this_gpu(), cudnnGetVersion(), shape, ctx.dtype(), ctx.options.deterministic,
                            ctx.options.allow_tf32) +
         (ctx.options.cudnn_benchmark ? "" : "|heuristics");
}

// The member of ConvAlgorithms that holds Pass's algorithm.
ConvAlgorithm<cudnnConvolutionFwdAlgo_t>& member(ConvAlgorithms& a, ForwardPass) { return a.forward; }
ConvAlgorithm<cudnnConvolutionBwdDataAlgo_t>& member(ConvAlgorithms& a, BackwardDataPass) { return a.backward_data; }
ConvAlgorithm<cudnnConvolutionBwdFilterAlgo_t>& member(ConvAlgorithms& a, BackwardFilterPass) {
  return a.backward_filter;
}

}  // namespace

template <typename Algo>
std::optional<ConvAlgorithm<Algo>> replace_failed_algorithm(const Context& ctx, const ConvDescriptors& d,
                                                            const ConvShape& shape, const ConvAlgorithm<Algo>& failed,
                                                            cudnnStatus_t status, size_t workspace_bytes) {
  using Pass = typename PassOf<Algo>::type;
  const std::string why = cudnnGetErrorString(status);  // before the queries below say more
  const std::string key = choice_key(ctx, shape);
  const std::string pass_key = key + "|" + Pass::name;
  Choices& c = choices();
  std::lock_guard<std::mutex> lock(c.mutex);
  std::set<int>& failed_here = c.failed[pass_key];
  ConvAlgorithm<Algo>& current = member(c.chosen[key], Pass{});
  if (failed_here.count(int(failed.algo))) {                        // already replaced, for another layer of this shape
    if (failed_here.count(int(current.algo))) return std::nullopt;  // and nothing was left
    return current;
  }
  failed_here.insert(int(failed.algo));
  auto next = first_usable<Pass>(ctx, d, ranked<Pass>(ctx, d, /*measure=*/false), failed_here, workspace_bytes);
  if (!next && !failed_here.count(int(Pass::always_supported)))
    next = supported<Pass>(ctx, d, Pass::always_supported, allowed_math(ctx), workspace_bytes);
  if (!next) return std::nullopt;
  current = *next;
  std::fprintf(stderr,
               "cutrain: warning: cuDNN's %s algorithm %d failed for %s (%s); using algorithm %d for that shape from "
               "now on\n",
               Pass::name, int(failed.algo), describe(shape).c_str(), why.c_str(), int(next->algo));
  return next;
}

template std::optional<ConvAlgorithm<cudnnConvolutionFwdAlgo_t>> replace_failed_algorithm(
    const Context&, const ConvDescriptors&, const ConvShape&, const ConvAlgorithm<cudnnConvolutionFwdAlgo_t>&,
    cudnnStatus_t, size_t);
template std::optional<ConvAlgorithm<cudnnConvolutionBwdDataAlgo_t>> replace_failed_algorithm(
    const Context&, const ConvDescriptors&, const ConvShape&, const ConvAlgorithm<cudnnConvolutionBwdDataAlgo_t>&,
    cudnnStatus_t, size_t);
template std::optional<ConvAlgorithm<cudnnConvolutionBwdFilterAlgo_t>> replace_failed_algorithm(
    const Context&, const ConvDescriptors&, const ConvShape&, const ConvAlgorithm<cudnnConvolutionBwdFilterAlgo_t>&,
    cudnnStatus_t, size_t);

ConvAlgorithms choose_conv_algorithms(const Context& ctx, const ConvDescriptors& d, const ConvShape& shape) {
  static std::optional<ConvAlgorithmCache> disk;  // read on the first benchmark
  const bool benchmark = ctx.options.cudnn_benchmark;
  const std::string key = choice_key(ctx, shape);
  Choices& c = choices();
  std::lock_guard<std::mutex> lock(c.mutex);
  std::map<std::string, ConvAlgorithms>& chosen = c.chosen;
  if (auto it = chosen.find(key); it != chosen.end()) return it->second;
  if (!benchmark) return chosen[key] = choose_all(ctx, d, shape, false);

  if (!disk) {
    disk.emplace(conv_algorithm_cache_path());
    if (!disk->warning().empty()) std::fprintf(stderr, "cutrain: warning: %s\n", disk->warning().c_str());
  }
  if (auto cached = disk->find(key)) {
    if (auto current = still_supported(ctx, d, *cached)) return chosen[key] = *current;
    std::fprintf(stderr, "cutrain: warning: %s: the algorithms cached for %s are not supported now; measuring again\n",
                 disk->path().c_str(), describe(shape).c_str());
  }
  const ConvAlgorithms measured = choose_all(ctx, d, shape, true);
  const std::string failed = disk->put(key, measured);
  if (!failed.empty()) std::fprintf(stderr, "cutrain: warning: %s; the measurement is not kept\n", failed.c_str());
  return chosen[key] = measured;
}

}  // namespace cutrain
