#include "nn/conv_engines.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/base/check.h"
#include "nn/conv_engine_cache.h"
#include "nn/device_buffer.h"

namespace cutrain {
namespace {

// One pass of one shape in this process: its graph, the usable configurations in the heuristics'
// order, every plan built for it, and which configurations failed when they ran (Note [Engine
// fallback]). Plans are never destroyed, since layers point at them.
struct Choice {
  std::unique_ptr<ConvGraph> graph;
  std::string declined;  // why no plan could be chosen, when none could
  std::vector<EngineConfig> ranked;
  std::vector<std::unique_ptr<ConvPlan>> plans;
  std::vector<EngineConfig> failed;
  const ConvPlan* current = nullptr;

  const ConvPlan* keep(std::unique_ptr<ConvPlan> plan) {
    plans.push_back(std::move(plan));
    return current = plans.back().get();
  }
  bool has_failed(const EngineConfig& config) const {
    return std::find(failed.begin(), failed.end(), config) != failed.end();
  }
};

// This process's choices, by choice_key and pass, and the disk cache, read on the first measurement.
// Never destroyed: a plan may hold resources of the CUDA context, which is torn down at exit in an
// order that static destructors cannot know.
struct Choices {
  std::mutex mutex;
  std::map<std::pair<std::string, ConvPass>, Choice> chosen;
  std::optional<ConvEngineCache> disk;
};

Choices& choices() {
  static Choices* c = new Choices;
  return *c;
}

std::string this_gpu() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return std::string(prop.name) + " sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
}

std::string disk_key(const Context& ctx, const ConvShape& shape) {
  return conv_engine_key(this_gpu(), cudnnGetVersion(), shape, ctx.dtype(), ctx.options.deterministic,
                         ctx.options.allow_tf32);
}

std::string choice_key(const Context& ctx, const ConvShape& shape) {
  return disk_key(ctx, shape) + (ctx.options.cudnn_benchmark ? "" : "|heuristics");
}

std::string what(ConvPass pass, const ConvShape& shape) {
  return std::string(conv_pass_name(pass)) + " convolution " + describe(shape);
}

// The plan of `config`, if it builds and needs at most `max_workspace`.
std::unique_ptr<ConvPlan> usable_plan(const ConvGraph& graph, const EngineConfig& config, size_t max_workspace) {
  std::unique_ptr<ConvPlan> plan = graph.build_plan(config);
  if (plan && plan->workspace() > max_workspace) plan.reset();
  return plan;
}

// The heuristics' choice: the first of the ranking whose plan is usable.
std::unique_ptr<ConvPlan> first_usable(const Choice& c) {
  for (const EngineConfig& config : c.ranked)
    if (auto plan = usable_plan(*c.graph, config, kMaxWorkspaceBytes)) return plan;
  return nullptr;
}

// Two events on the main stream around one execution, destroyed with the object.
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~EventPair() {
    (void)cudaEventDestroy(start);
    (void)cudaEventDestroy(stop);
  }
};

// --cudnn-benchmark: every usable plan, warmed up once and timed once on buffers of the
// convolution's size; the fastest, or null when none ran.
std::unique_ptr<ConvPlan> fastest(const Context& ctx, const Choice& c, const ConvShape& s) {
  std::vector<std::unique_ptr<ConvPlan>> candidates;
  size_t workspace = 0;
  for (const EngineConfig& config : c.ranked) {
    if (auto plan = usable_plan(*c.graph, config, kMaxWorkspaceBytes)) {
      workspace = std::max(workspace, plan->workspace());
      candidates.push_back(std::move(plan));
    }
  }
  const size_t element = ctx.dtype() == DType::bf16 ? 2 : 4;
  const DeviceBuffer x(Device::cuda, size_t(s.N) * s.H * s.W * s.C * element);
  const DeviceBuffer w(Device::cuda, size_t(s.K) * s.R * s.S * s.C * element);
  const DeviceBuffer y(Device::cuda, size_t(s.N) * s.P() * s.Q() * s.K * element);
  const DeviceBuffer scratch(Device::cuda, workspace);
  const bool prologue = c.graph->pass() == ConvPass::forward_scale_shift_relu;
  const DeviceBuffer scale(Device::cuda, prologue ? size_t(s.C) * sizeof(float) : 0);
  const DeviceBuffer shift(Device::cuda, prologue ? size_t(s.C) * sizeof(float) : 0);
  const BackendDescriptor pack =
      ConvGraph::variant_pack({x.data(), w.data(), y.data(), scratch.data(), static_cast<const float*>(scale.data()),
                               static_cast<const float*>(shift.data())});
  const cudaStream_t stream = ctx.main_stream();
  const cudnnHandle_t cudnn = ctx.cudnn(stream);
  const EventPair events;
  std::unique_ptr<ConvPlan> best;
  float best_ms = std::numeric_limits<float>::infinity();
  for (std::unique_ptr<ConvPlan>& plan : candidates) {
    // A plan that fails to run is left out, as PyTorch and cudnn-frontend leave it out.
    if (cudnnBackendExecute(cudnn, plan->get(), pack.get()) != CUDNN_STATUS_SUCCESS) continue;
    CUDA_CHECK(cudaEventRecord(events.start, stream));
    const cudnnStatus_t timed = cudnnBackendExecute(cudnn, plan->get(), pack.get());
    CUDA_CHECK(cudaEventRecord(events.stop, stream));
    CUDA_CHECK(cudaEventSynchronize(events.stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, events.start, events.stop));
    if (timed == CUDNN_STATUS_SUCCESS && ms < best_ms) {
      best_ms = ms;
      best = std::move(plan);
    }
  }
  return best;
}

// cuDNN's status in words, with the detail of its last error when it has one that the words do
// not already hold.
std::string cudnn_reason(cudnnStatus_t status) {
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof detail);
  std::string reason = cudnnGetErrorString(status);
  if (detail[0] != '\0' && reason.find(detail) == std::string::npos) reason += std::string(": ") + detail;
  return reason;
}

// The choice for a pass and shape not chosen before in this process. When none can be made, it
// says why in c.declined.
void choose(const Context& ctx, ConvPass pass, const ConvShape& shape, Choices& all, Choice& c) {
  try {
    c.graph = std::make_unique<ConvGraph>(pass, shape, ctx.dtype());
  } catch (const CudnnError& e) {
    // A fused graph that cuDNN declines is an answer (its unit runs unfused); a plain one is an
    // error, as the check macro reported it, with the call, file and line.
    if (pass != ConvPass::forward_scale_shift_relu) throw;
    c.declined = "cuDNN declines the graph (" + cudnn_reason(e.status) + ")";
    return;
  }
  c.ranked = c.graph->usable_configs(ctx);
  if (ctx.options.cudnn_benchmark) {
    if (!all.disk) {
      all.disk.emplace(conv_engine_cache_path());
      if (!all.disk->warning().empty()) std::fprintf(stderr, "cutrain: warning: %s\n", all.disk->warning().c_str());
    }
    const std::string key = disk_key(ctx, shape);
    if (auto cached = all.disk->find(key, pass)) {
      if (auto plan = usable_plan(*c.graph, *cached, kMaxWorkspaceBytes)) {
        c.keep(std::move(plan));
        return;
      }
      std::fprintf(stderr, "cutrain: warning: %s: the %s cached for the %s is not supported now; measuring again\n",
                   all.disk->path().c_str(), describe(*cached).c_str(), what(pass, shape).c_str());
    }
    if (auto measured = fastest(ctx, c, shape)) {
      const std::string failed = all.disk->put(key, pass, measured->config());
      if (!failed.empty()) std::fprintf(stderr, "cutrain: warning: %s; the measurement is not kept\n", failed.c_str());
      c.keep(std::move(measured));
      return;
    }
    std::fprintf(stderr, "cutrain: warning: no cuDNN engine ran in the measurement of the %s; taking the heuristics'\n",
                 what(pass, shape).c_str());
  }
  auto predicted = first_usable(c);
  if (!predicted) {
    c.declined = "cuDNN offers no usable engine for the " + what(pass, shape) + " (" + dtype_name(ctx.dtype()) + ")";
    return;
  }
  c.keep(std::move(predicted));
}

}  // namespace

bool replaceable_failure(cudnnStatus_t status) {
  const int kind = CUDNN_STATUS_CATEGORY(status);
  return kind == CUDNN_STATUS_BAD_PARAM || kind == CUDNN_STATUS_NOT_SUPPORTED || kind == CUDNN_STATUS_EXECUTION_FAILED;
}

const ConvPlan* try_conv_plan(const Context& ctx, ConvPass pass, const ConvShape& shape, std::string& why) {
  Choices& all = choices();
  std::lock_guard<std::mutex> lock(all.mutex);
  Choice& c = all.chosen[{choice_key(ctx, shape), pass}];
  if (!c.current && c.declined.empty()) choose(ctx, pass, shape, all, c);
  why = c.declined;
  return c.current;
}

const ConvPlan& conv_plan(const Context& ctx, ConvPass pass, const ConvShape& shape) {
  std::string why;
  const ConvPlan* plan = try_conv_plan(ctx, pass, shape, why);
  if (!plan) throw std::runtime_error(why);
  return *plan;
}

const ConvPlan* replace_failed_plan(const Context& ctx, ConvPass pass, const ConvShape& shape, const ConvPlan& failed,
                                    cudnnStatus_t status, size_t workspace_bytes) {
  const std::string why = cudnnGetErrorString(status);  // before the calls below say more
  Choices& all = choices();
  std::lock_guard<std::mutex> lock(all.mutex);
  Choice& c = all.chosen.at({choice_key(ctx, shape), pass});
  if (c.has_failed(failed.config())) {                      // already replaced, for another layer of this shape
    if (c.has_failed(c.current->config())) return nullptr;  // and nothing was left
    return c.current;
  }
  c.failed.push_back(failed.config());
  for (const EngineConfig& config : c.ranked) {
    if (c.has_failed(config)) continue;
    if (auto plan = usable_plan(*c.graph, config, workspace_bytes)) {
      std::fprintf(stderr, "cutrain: warning: cuDNN's %s %s failed for %s (%s); using %s for that shape from now on\n",
                   conv_pass_name(pass), describe(failed.config()).c_str(), describe(shape).c_str(), why.c_str(),
                   describe(config).c_str());
      return c.keep(std::move(plan));
    }
  }
  return nullptr;
}

}  // namespace cutrain
