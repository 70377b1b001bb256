#include "app/bench/layer_bench.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <stdexcept>
#include <utility>

#include "app/interval_times.h"
#include "app/run_log.h"
#include "kernels/base/check.h"
#include "kernels/base/device.h"
#include "kernels/base/nvtx_range.h"
#ifdef CUTRAIN_CUDA_EMULATION
#include "emu/plan/step_plan.h"
#endif

namespace cutrain {

namespace {

#ifdef CUTRAIN_CUDA_EMULATION
constexpr bool kEmulatedDevice = true;
#else
constexpr bool kEmulatedDevice = false;
#endif

}  // namespace

void step_layer_by_layer(ResNet18& model, SGD& sgd, const std::function<void()>& mark) {
  const std::vector<LayerSpec>& layers = model.layers();
  mark();
  for (size_t i = 0; i < layers.size(); ++i) {
    NvtxRange range((layers[i].name + " forward").c_str());
    model.forward_layer(int(i), /*train=*/true);
    mark();
  }
  for (size_t i = layers.size(); i-- > 0;) {
    NvtxRange range((layers[i].name + " backward").c_str());
    model.backward_layer(int(i));
    mark();
  }
  NvtxRange range("sgd");
  sgd.begin_step(model.context().main_stream());
  sgd.update(0, model.params().numel(), model.context().main_stream());
  mark();
}

void fill_synthetic_batch(const Tensor& input, const Tensor& labels, int num_classes) {
  std::mt19937 rng(0);
  std::normal_distribution<float> pixel(0.0f, 1.0f);
  std::vector<float> x(size_t(input.numel()), 0.0f);
  const int64_t channels = input.dim(3);
  for (size_t i = 0; i < x.size(); ++i) {
    if (int64_t(i) % channels < 3) x[i] = pixel(rng);
  }
  write_floats(x, input);
  std::vector<int32_t> values(size_t(labels.numel()));
  for (int32_t& label : values) label = int32_t(rng() % uint32_t(num_classes));
  copy_from_host(values.data(), labels);
}

namespace {

constexpr const char* kBatchNorms[] = {"cooperative", "split", "cudnn"};

// The optimizer of the bench's step: plain SGD at a constant rate.
SGD bench_sgd(ResNet18& model) {
  return SGD(model.context(), model.params(), SgdConfig{}, LrSchedule{LrScheduleKind::constant, 0.01, 1, 0},
             SGD::Grads::as_written);
}

// Milliseconds of each call of each timed step: [layer][pass], and SGD's [pass].
struct CallTimes {
  std::vector<std::vector<double>> forward, backward;
  std::vector<double> sgd;
};

CallTimes time_layers(const LayerBenchOptions& o, const std::string& batchnorm) {
  ContextOptions options = o.context;
  options.batchnorm = parse_batchnorm(batchnorm);
  options.streams = 1;
  Context ctx(options);
  ResNet18 model(ctx, o.config);
  SGD sgd = bench_sgd(model);
  fill_synthetic_batch(model.input(), model.labels(), o.config.num_classes);
  for (int i = 0; i < o.warmup; ++i) step_layer_by_layer(model, sgd, [] {});
  ctx.synchronize();
  const size_t layers = model.layers().size(), calls = 2 * layers + 1;
  IntervalTimes times(ctx.on_gpu(), ctx.main_stream(), int(1 + calls * size_t(o.passes)));
  for (int pass = 0; pass < o.passes; ++pass) {
    bool first = true;
    step_layer_by_layer(model, sgd, [&] {
      if (!first || pass == 0) times.mark();  // a later pass starts at the previous one's last mark
      first = false;
    });
  }
  ctx.synchronize();
  const std::vector<double> ms = times.milliseconds();
  CallTimes t;
  t.forward.assign(layers, {});
  t.backward.assign(layers, {});
  for (int pass = 0; pass < o.passes; ++pass) {
    const double* call = &ms[size_t(pass) * calls];
    for (size_t i = 0; i < layers; ++i) {
      t.forward[i].push_back(call[i]);
      t.backward[i].push_back(call[2 * layers - 1 - i]);  // backward visits the layers in reverse
    }
    t.sgd.push_back(call[2 * layers]);
  }
  return t;
}

// What the plan says of one call: the bytes its operations move, their FLOPs, and their estimated
// time on the GPU of the options' peak (emu/plan/step_plan.h).
struct Costs {
  double bytes = 0, flops = 0, seconds = 0;
};
struct PlannedCalls {
  std::vector<Costs> forward, backward;
  Costs sgd;
};

#ifdef CUTRAIN_CUDA_EMULATION
// One step layer by layer on the record-only device (Note [Record-only device]), each call's
// operations found by the NVTX range they were enqueued in.
PlannedCalls plan_layers(const LayerBenchOptions& o, const std::string& batchnorm) {
  Recorder recorder;
  RecordingScope scope(recorder);
  ContextOptions options = o.context;
  options.device = Device::cuda;
  options.batchnorm = parse_batchnorm(batchnorm);
  options.streams = 1;
  Context ctx(options);
  ResNet18 model(ctx, o.config);
  SGD sgd = bench_sgd(model);
  recorder.clear();  // what building the model enqueued is not the step's
  step_layer_by_layer(model, sgd, [] {});
  std::map<std::string, std::vector<RecordedOp>> by_range;
  for (const RecordedOp& op : recorder.ops()) by_range[op.phase].push_back(op);
  auto costs = [&](const std::string& range) {
    Costs c;
    const std::vector<RecordedOp>& ops = by_range[range];
    for (const RecordedOp& op : ops) {
      c.bytes += double(op.bytes.read + op.bytes.written);
      c.flops += op.flops;
    }
    if (!ops.empty()) c.seconds = summarize(ops, o.peak).estimated_seconds;
    return c;
  };
  PlannedCalls plan;
  for (const LayerSpec& layer : model.layers()) {
    plan.forward.push_back(costs(layer.name + " forward"));
    plan.backward.push_back(costs(layer.name + " backward"));
  }
  plan.sgd = costs("sgd");
  return plan;
}
#endif

std::string format(const char* spec, double value) {
  char text[32];
  std::snprintf(text, sizeof text, spec, value);
  return text;
}

// A column's text: the roofline fraction of a call that took `ms`, from the plan's estimate where
// there is one, else from the FLOPs alone ("-" without FLOPs).
std::string roofline(double ms, const Costs* planned, double flops, const GpuPeak& peak) {
  const double seconds = planned ? planned->seconds : flops / (peak.tflops * 1e12);
  if (seconds <= 0 || ms <= 0) return "-";
  return format("%.1f", 100.0 * seconds / (ms * 1e-3));
}

// ", fusion on" where the layer table holds the fused units (Note [The fused unit bn-relu-conv]).
const char* fusion_text(const LayerBenchOptions& o) { return o.context.fusion ? ", fusion on" : ""; }

void print_layer_table(const LayerBenchOptions& o, const std::string& batchnorm, const CallTimes& t,
                       const PlannedCalls* plan) {
  const ResNetConfig& c = o.config;
  const std::vector<LayerSpec> specs = resnet18_layout(c, o.context.fusion).layers;
  std::printf(
      "bench-step --layers: ResNet-18 %s stem, width %d, %s, batch %d, %dx%d images, batch norm %s%s, 1 stream, "
      "eager, on %s\n",
      stem_name(c.stem), c.width, o.context.dtype == DType::bf16 ? "bf16" : "fp32", c.batch_size, c.image_size,
      c.image_size, batchnorm.c_str(), fusion_text(o), cuda_device_description(0).c_str());
  std::printf(
      "  each time: the median of %s after %d warm-up, from CUDA events around the call; %.2f MFLOP per "
      "step (the model's)\n",
      counted(o.passes, "timed pass").c_str(), o.warmup, step_flops(c) / 1e6);
  if (plan) {
    std::printf(
        "  roofline %%: the plan's time for the call at %.0f TFLOP/s and %.2f TB/s (emu/plan/step_plan.h) over "
        "the measured time\n",
        o.peak.tflops, o.peak.tbps);
  } else {
    std::printf(
        "  roofline %%: the call's FLOPs at %.0f TFLOP/s over the measured time; bytes need a plan, which "
        "the emulated build makes\n",
        o.peak.tflops);
  }
  if (kEmulatedDevice)
    std::printf(
        "  EMULATED DEVICE: its kernels run on the CPU, so the times (ms, roofline %%) mean nothing; the "
        "shapes, the FLOPs and the plan's bytes mean what they mean on a GPU\n");
  std::printf("  %-24s %-18s %-15s %9s %9s %11s %11s %9s %9s %7s %7s\n", "layer", "op", "output", "fwd ms", "bwd ms",
              "fwd MFLOP", "bwd MFLOP", "fwd MB", "bwd MB", "fwd %", "bwd %");
  auto megabytes = [&](const Costs* planned) { return planned ? format("%.2f", planned->bytes / 1e6) : "-"; };
  auto row = [&](const std::string& name, const std::string& op, const std::string& output, double fwd_ms,
                 double bwd_ms, double fwd_flops, double bwd_flops, const Costs* fwd_plan, const Costs* bwd_plan) {
    std::printf("  %-24s %-18s %-15s %9s %9s %11.2f %11.2f %9s %9s %7s %7s\n", name.c_str(), op.c_str(), output.c_str(),
                fwd_ms < 0 ? "-" : format("%.3f", fwd_ms).c_str(), bwd_ms < 0 ? "-" : format("%.3f", bwd_ms).c_str(),
                fwd_flops / 1e6, bwd_flops / 1e6, megabytes(fwd_plan).c_str(), megabytes(bwd_plan).c_str(),
                fwd_ms < 0 ? "-" : roofline(fwd_ms, fwd_plan, fwd_flops, o.peak).c_str(),
                bwd_ms < 0 ? "-" : roofline(bwd_ms, bwd_plan, bwd_flops, o.peak).c_str());
  };
  double forward_ms = 0, backward_ms = 0, forward_flops = 0, backward_flops = 0;
  Costs forward_total, backward_total;
  auto add = [](Costs& total, const Costs& c) {
    total.bytes += c.bytes, total.flops += c.flops, total.seconds += c.seconds;
  };
  for (size_t i = 0; i < specs.size(); ++i) {
    const LayerSpec& layer = specs[i];
    const bool has_backward = layer.kind != LayerKind::loss;  // Its forward writes the logits' gradient.
    const double fwd = median(t.forward[i]), bwd = has_backward ? median(t.backward[i]) : -1;
    row(layer.name, describe(layer), shape_text(layer.output), fwd, bwd, layer.forward_flops, layer.backward_flops,
        plan ? &plan->forward[i] : nullptr, plan ? &plan->backward[i] : nullptr);
    forward_ms += fwd;
    forward_flops += layer.forward_flops;
    backward_flops += layer.backward_flops;
    if (has_backward) backward_ms += bwd;
    if (plan) add(forward_total, plan->forward[i]), add(backward_total, plan->backward[i]);
  }
  const double sgd_ms = median(t.sgd);
  row("sgd", "update", "-", -1, sgd_ms, 0, 0, nullptr, plan ? &plan->sgd : nullptr);
  if (plan) add(backward_total, plan->sgd);
  row("total", "", "", forward_ms, backward_ms + sgd_ms, forward_flops, backward_flops, plan ? &forward_total : nullptr,
      plan ? &backward_total : nullptr);
  std::printf(
      "layers: forward %.3f ms, backward %.3f ms, SGD %.3f ms, %.3f ms per step layer by layer (batch norm %s%s)\n",
      forward_ms, backward_ms, sgd_ms, forward_ms + backward_ms + sgd_ms, batchnorm.c_str(), fusion_text(o));
  std::fflush(stdout);
}

// Batch norm by shape and fused operation, in order of first appearance: each implementation's
// median forward and backward over every pass of every layer of that shape.
// `times`: each implementation that cuDNN took, by name.
void print_batchnorm_shapes(const LayerBenchOptions& o, const std::vector<std::pair<const char*, CallTimes>>& times) {
  const std::vector<LayerSpec> specs = resnet18_layout(o.config, o.context.fusion).layers;
  std::vector<std::string> keys;
  std::map<std::string, std::vector<size_t>> layers_of;  // "shape op" -> the layers of that key
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].kind != LayerKind::batchnorm) continue;
    const std::string key = shape_text(specs[i].output) + " " + describe(specs[i]);
    auto [it, added] = layers_of.emplace(key, std::vector<size_t>{});
    if (added) keys.push_back(key);
    it->second.push_back(i);
  }
  std::printf(
      "batch norm by shape: the median ms of a layer's forward and backward with each implementation, "
      "over %s of every layer of that shape (%d warm-up, eager, 1 stream)%s\n",
      counted(o.passes, "timed pass").c_str(), o.warmup,
      kEmulatedDevice ? "; EMULATED DEVICE: the times mean nothing" : "");
  std::printf("  %-16s %-12s %6s", "", "", "");
  for (const auto& [name, t] : times) std::printf("  %19s", name);
  std::printf("\n  %-16s %-12s %6s", "shape", "op", "layers");
  for (size_t n = 0; n < times.size(); ++n) std::printf("  %9s %9s", "fwd ms", "bwd ms");
  std::printf("  %s\n", "fastest");
  std::vector<double> totals(times.size(), 0.0);
  for (const std::string& key : keys) {
    const std::vector<size_t>& layers = layers_of[key];
    const size_t space = key.find(' ');
    std::printf("  %-16s %-12s %6zu", key.substr(0, space).c_str(), key.substr(space + 1).c_str(), layers.size());
    size_t fastest = 0;
    double fastest_ms = 0;
    for (size_t n = 0; n < times.size(); ++n) {
      std::vector<double> forward, backward;
      for (size_t i : layers) {
        const CallTimes& t = times[n].second;
        forward.insert(forward.end(), t.forward[i].begin(), t.forward[i].end());
        backward.insert(backward.end(), t.backward[i].begin(), t.backward[i].end());
      }
      const double fwd = median(forward), bwd = median(backward);
      std::printf("  %9.3f %9.3f", fwd, bwd);
      totals[n] += double(layers.size()) * (fwd + bwd);
      if (n == 0 || fwd + bwd < fastest_ms) fastest = n, fastest_ms = fwd + bwd;
    }
    std::printf("  %s\n", times[fastest].first);
  }
  std::printf("batch norm in all (every layer's forward and backward):");
  for (size_t n = 0; n < totals.size(); ++n) std::printf("%s %s %.3f ms", n ? "," : "", times[n].first, totals[n]);
  std::printf("\n");
}

}  // namespace

// An implementation that cuDNN refuses (Note [cuDNN's batch norm types]) gets one line, and the others go on.
void run_layer_bench(const LayerBenchOptions& o) {
  if (std::find(std::begin(kBatchNorms), std::end(kBatchNorms), o.batchnorm) == std::end(kBatchNorms))
    throw std::runtime_error("--batchnorm " + o.batchnorm + ": expected cooperative, split or cudnn");
  std::vector<std::pair<const char*, CallTimes>> times;
  for (const char* batchnorm : kBatchNorms) {
    try {
      times.emplace_back(batchnorm, time_layers(o, batchnorm));
    } catch (const CudnnError& e) {
      std::printf("%s: not supported here: %s\n", batchnorm, cudnnGetErrorString(e.status));
      continue;
    }
    if (batchnorm != o.batchnorm) continue;
    std::unique_ptr<PlannedCalls> plan;
#ifdef CUTRAIN_CUDA_EMULATION
    plan = std::make_unique<PlannedCalls>(plan_layers(o, batchnorm));
#endif
    print_layer_table(o, batchnorm, times.back().second, plan.get());
  }
  if (times.empty()) throw std::runtime_error("--layers: cuDNN refused every batch norm");
  std::printf("\n");
  print_batchnorm_shapes(o, times);
}

}  // namespace cutrain
