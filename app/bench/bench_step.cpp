// `cutrain bench-step`: milliseconds per training step (forward + backward + SGD) of ResNet-18
// on one device, on a fixed synthetic batch, after a warm-up. Nothing else runs: no loader, no
// communication, no host synchronisation inside the timed steps. With --cuda-graph the step is
// captured once as a CUDA graph and replayed, as a trainer with static shapes can do.
// With --plan nothing runs: it prints what one step launches, as the emulated build's record-only
// device sees it (emu/plan/step_plan.h); the GPU build says so in one line.
//
// Each timed step is timed alone, by CUDA events on the main stream around it (on the CPU, by the
// clock), and the figure reported is the median with the fastest and slowest beside it: one slow
// step (a page fault, another process) moves a mean but not a median.
//
// With --matrix the GPU's speed choices are measured side by side in one process: each batch-norm
// implementation, on one stream and on two, eager and replayed from a graph, in one table with
// images/s, the fraction of the GPU's peak FLOP/s, and the plan's estimate where the build can plan;
// then, for each implementation, whether two streams beat one.
//
// With --layers each layer's forward and backward is timed alone, and batch norm shape by shape
// with every implementation (app/bench/layer_bench.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "app/bench/layer_bench.h"
#include "app/commands.h"
#include "app/flags.h"
#include "app/interval_times.h"
#include "app/profiler.h"
#include "app/run_log.h"
#include "app/run_start.h"
#include "app/train_step.h"
#include "kernels/base/cpu_threads.h"
#include "kernels/base/device.h"
#include "nn/resnet.h"
#ifdef CUTRAIN_CUDA_EMULATION
#include "emu/plan/step_plan.h"
#endif

namespace cutrain {

namespace {

struct BenchStepOptions {
  std::string stem = "cifar";
  std::string precision;  // default: bf16 on the GPU (as `cutrain train`), fp32 on the CPU
  std::string device;     // default: cuda when there is one, else cpu
  int batch_size = 0;     // default: 256 on the GPU, 32 on the CPU
  int width = 64;
  int image_size = 32;
  int steps = 0;    // default: 50 on the GPU, 5 on the CPU
  int warmup = 0;   // default: 10 on the GPU, 2 on the CPU
  int threads = 0;  // the CPU kernels' threads; 0: every core
  bool cuda_graph = false;
  bool cudnn_benchmark = false;
  std::string batchnorm = "cooperative";
  std::string fusion = "off";
  int streams = 2;
  std::string profile_steps;  // "A:B" of the timed steps
  bool plan = false;
  bool matrix = false;
  bool layers = false;
  int world_size = 1;     // --plan: one rank of this many
  double gpu_tflops = 0;  // --plan and --matrix: 0 is the H200's for the precision
  double gpu_tbps = GpuPeak{}.tbps;
};

// The GPU that estimates and fractions of the peak are for: --gpu-tflops and --gpu-tbps, or an
// H200's peak for the precision ("fp32" or "bf16").
GpuPeak peak_for(const BenchStepOptions& o, const std::string& precision) {
  GpuPeak peak;
  peak.tflops = o.gpu_tflops > 0 ? o.gpu_tflops : (precision == "bf16" ? GpuPeak{}.tflops : kH200Fp32Tflops);
  peak.tbps = o.gpu_tbps;
  return peak;
}

#ifdef CUTRAIN_CUDA_EMULATION
// The step these options describe, as --plan plans it: bf16 at batch 256 unless told otherwise.
StepPlanConfig plan_config(const BenchStepOptions& o) {
  StepPlanConfig c;
  c.stem = o.stem;
  c.precision = o.precision.empty() ? "bf16" : o.precision;
  c.batch_size = o.batch_size > 0 ? o.batch_size : 256;
  c.width = o.width;
  c.image_size = o.image_size;
  c.world_size = o.world_size;
  c.batchnorm = o.batchnorm;
  c.streams = o.streams;
  c.fusion = o.fusion == "on";
  return c;
}
#endif

void print_step_plan(const BenchStepOptions& o) {
#ifdef CUTRAIN_CUDA_EMULATION
  const StepPlanConfig c = plan_config(o);
  print_plan(stdout, c, plan_step(c), peak_for(o, c.precision));
#else
  throw std::runtime_error(
      "bench-step --plan: the step's inventory is recorded by the emulated device; build it with "
      "scripts/build.sh --emulated and run build-emulated/bin/cutrain bench-step --plan");
#endif
}

// One configuration's measured step.
struct Measurement {
  ResNetConfig config;
  DType dtype = DType::f32;
  bool gpu = false;
  std::vector<double> step_ms;
  int warmup = 0;
  float loss = 0;
  double setup_seconds = 0;
  long long parameters = 0;
  double planned_mib = 0;
  double median_ms() const { return median(step_ms); }
};

Measurement measure(const BenchStepOptions& o) {
  ContextOptions context_options;
  context_options.device = parse_device(o.device.empty() ? (cuda_available() ? "cuda" : "cpu") : o.device);
  context_options.dtype = resolve_precision(o.precision, context_options.device);
  context_options.cudnn_benchmark = o.cudnn_benchmark;
  context_options.batchnorm = parse_batchnorm(o.batchnorm);
  context_options.fusion = o.fusion == "on";
  context_options.streams = o.streams;
  if (o.threads > 0) set_cpu_threads(o.threads);
  const auto setup_start = std::chrono::steady_clock::now();
  Context ctx(context_options);
  const bool gpu = ctx.on_gpu();
  if (o.cuda_graph && !gpu) throw std::runtime_error("--cuda-graph: needs --device cuda");
  if (context_options.fusion && !gpu) throw std::runtime_error("--fusion on: needs --device cuda");
  StepProfiler profiler(o.profile_steps.empty() ? StepRange{} : parse_step_range(o.profile_steps), gpu);

  ResNetConfig config;
  config.stem = parse_stem(o.stem);
  config.width = o.width;
  config.image_size = o.image_size;
  config.batch_size = o.batch_size > 0 ? o.batch_size : (gpu ? 256 : 32);
  ResNet18 model(ctx, config);
  const double setup_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - setup_start).count();
  TrainStepOptions step_options;
  step_options.schedule = LrSchedule{LrScheduleKind::constant, 0.01, 1, 0};
  // With --cuda-graph the step is captured as the trainer's is (Note [The step's graph]): its first
  // run is eager, so that cuBLAS and cuDNN settle their lazy state outside the capture, and its
  // second captures it. Both come before the warm-up. A capture that fails stops the benchmark
  // rather than timing eager steps under the graph's name.
  TrainStep train_step(model, nullptr, step_options,
                       o.cuda_graph ? cuda_graph_capture(ctx.main_stream(), nullptr) : nullptr);
  fill_synthetic_batch(model.input(), model.labels(), config.num_classes);
  if (o.cuda_graph) {
    train_step.run();
    train_step.run();
    if (train_step.graph_status() != "on")
      throw std::runtime_error("--cuda-graph: CUDA graphs " + train_step.graph_status());
  }

  const int warmup = o.warmup > 0 ? o.warmup : (gpu ? 10 : 2);
  const int steps = o.steps > 0 ? o.steps : (gpu ? 50 : 5);
  for (int i = 0; i < warmup; ++i) train_step.run();
  ctx.synchronize();
  IntervalTimes times(gpu, ctx.main_stream(), steps + 1);
  times.mark();
  for (int i = 0; i < steps; ++i) {
    profiler.before_step(i);
    train_step.run();
    times.mark();
    profiler.after_step(i);
  }
  ctx.synchronize();
  const std::vector<double> step_ms = times.milliseconds();

  Measurement m;
  m.config = config;
  m.dtype = context_options.dtype;
  m.gpu = gpu;
  m.step_ms = step_ms;
  m.warmup = warmup;
  copy_to_host(Tensor(const_cast<float*>(model.loss()), DType::f32, ctx.device(), {1}), &m.loss);
  m.setup_seconds = setup_seconds;
  m.parameters = (long long)model.num_parameters();
  m.planned_mib = model.planned_bytes() / 1048576.0;
  return m;
}

const char* precision_name(DType dtype) { return dtype == DType::bf16 ? "bf16" : "fp32"; }

void run_bench_step(const BenchStepOptions& o) {
  const Measurement m = measure(o);
  const ResNetConfig& config = m.config;
  const double ms = m.median_ms();
  const auto [fastest, slowest] = std::minmax_element(m.step_ms.begin(), m.step_ms.end());
  std::printf("bench-step: ResNet-18 %s stem, width %d, %d classes, %s, %s, batch %d, %dx%d images%s%s%s%s%s\n",
              stem_name(config.stem), config.width, config.num_classes, m.gpu ? "cuda" : "cpu", precision_name(m.dtype),
              config.batch_size, config.image_size, config.image_size, o.cuda_graph ? ", CUDA graph" : "",
              m.gpu ? ", batch norm " : "", m.gpu ? o.batchnorm.c_str() : "",
              m.gpu && o.fusion == "on" ? ", fusion on" : "",
              m.gpu ? (o.streams == 1 ? ", 1 stream" : ", 2 streams") : "");
  if (!m.gpu) std::printf("  %d CPU threads\n", cpu_threads());
  std::printf("  %lld parameters, %.1f MiB planned (activations, their gradients, workspace)\n", m.parameters,
              m.planned_mib);
  if (m.gpu)
    std::printf("  set-up %.1f s (context, model, cuDNN's engines %s)\n", m.setup_seconds,
                o.cudnn_benchmark ? "measured or read from the cache" : "by heuristics");
  std::printf("  steps took %.2f to %.2f ms (%s after %d warm-up; last loss %.4f)\n", *fastest, *slowest,
              counted(long(m.step_ms.size()), "timed step").c_str(), m.warmup, m.loss);
  std::printf("  %.2f ms/step, %.0f images/s (the median step)\n", ms, 1000.0 * config.batch_size / ms);
}

// Every batch-norm implementation x one and two streams x eager and graph, one row each; then the
// fastest. With --fusion on, every row runs the fused units, and cuDNN's batch norm, under which they
// run unfused, gets one line in place of its rows. The plan's estimate needs a build that can plan
// (the emulated one), else it shows "-".
// An implementation that cuDNN refuses (Note [cuDNN's batch norm types]) gets one line in place of its
// rows, and the others go on: cuDNN's own comes last.
void run_matrix(const BenchStepOptions& o) {
  if (o.device == "cpu") throw std::runtime_error("--matrix: measures the GPU's choices; needs --device cuda");
  if (!o.profile_steps.empty()) throw std::runtime_error("--matrix: not with --profile-steps");
  bool header = false;
  double peak_tflops = 0, best_ms = 0;
  std::string best;
  std::map<std::string, double> ms_of;  // "<batch norm> <streams> <graph>" -> the median ms/step
  std::vector<const char*> measured;    // the batch norms that cuDNN took
  for (const char* batchnorm : {"cooperative", "split", "cudnn"}) {
    // Under --batchnorm cudnn the fused unit runs unfused (Note [The fused unit bn-relu-conv]): its
    // rows would be --fusion off's, measured again.
    if (o.fusion == "on" && std::string(batchnorm) == "cudnn") {
      std::printf(
          "  cudnn: --fusion on does not apply (its batch norm has no statistics-only form): see --fusion off\n");
      std::fflush(stdout);
      continue;
    }
    bool refused = false;
    for (int streams : {2, 1}) {
      double planned_ms = -1;
      for (bool graph : {false, true}) {
        if (refused) break;
        BenchStepOptions variant = o;
        variant.device = "cuda";
        variant.batchnorm = batchnorm;
        variant.streams = streams;
        variant.cuda_graph = graph;
        Measurement m;
        try {
          m = measure(variant);
        } catch (const CudnnError& e) {
          std::printf("  %s: not supported here: %s\n", batchnorm, cudnnGetErrorString(e.status));
          std::fflush(stdout);
          refused = true;
          break;
        }
        const ResNetConfig& c = m.config;
        if (!header) {
          peak_tflops = peak_for(o, precision_name(m.dtype)).tflops;
          std::printf("bench-step --matrix: ResNet-18 %s stem, width %d, %s, batch %d, %dx%d images%s, on %s\n",
                      stem_name(c.stem), c.width, precision_name(m.dtype), c.batch_size, c.image_size, c.image_size,
                      o.fusion == "on" ? ", fusion on" : "", cuda_device_description(0).c_str());
          std::printf(
              "  each row: the median of %s after %d warm-up; %.2f GFLOP per step; %% of a peak of %.0f "
              "TFLOP/s\n",
              counted(long(m.step_ms.size()), "timed step").c_str(), m.warmup, step_flops(c) / 1e9, peak_tflops);
          std::printf("  %-12s %7s %6s %9s %9s %9s %10s %9s %8s\n", "batch norm", "streams", "graph", "ms/step",
                      "fastest", "slowest", "images/s", "% of peak", "plan ms");
          header = true;
        }
#ifdef CUTRAIN_CUDA_EMULATION
        if (planned_ms < 0) {
          StepPlanConfig plan = plan_config(variant);
          plan.precision = precision_name(m.dtype);
          plan.world_size = 1;  // the measured step has no communicator
          planned_ms = summarize(plan_step(plan).ops(), peak_for(o, plan.precision)).estimated_seconds * 1e3;
        }
#endif
        const double ms = m.median_ms();
        const auto [fastest, slowest] = std::minmax_element(m.step_ms.begin(), m.step_ms.end());
        char plan_text[16] = "-";
        if (planned_ms >= 0) std::snprintf(plan_text, sizeof plan_text, "%.2f", planned_ms);
        std::printf("  %-12s %7d %6s %9.2f %9.2f %9.2f %10.0f %9.1f %8s\n", batchnorm, streams,
                    graph ? "graph" : "eager", ms, *fastest, *slowest, 1000.0 * c.batch_size / ms,
                    100.0 * step_flops(c) / (ms * 1e-3) / (peak_tflops * 1e12), plan_text);
        std::fflush(stdout);
        ms_of[std::string(batchnorm) + " " + std::to_string(streams) + " " + (graph ? "graph" : "eager")] = ms;
        if (best.empty() || ms < best_ms) {
          best_ms = ms;
          best = std::string(batchnorm) + ", " + counted(streams, "stream") + ", " + (graph ? "graph" : "eager");
        }
      }
    }
    if (!refused) measured.push_back(batchnorm);
  }
  if (measured.empty()) throw std::runtime_error("--matrix: cuDNN refused every row");
  std::printf("  two streams against one (median ms/step; a positive figure is the time two streams save):\n");
  for (const char* batchnorm : measured) {
    std::printf("    %-12s", batchnorm);
    for (const char* mode : {"eager", "graph"}) {
      const double two = ms_of[std::string(batchnorm) + " 2 " + mode],
                   one = ms_of[std::string(batchnorm) + " 1 " + mode];
      std::printf("  %s %.2f against %.2f ms: %+.1f%%", mode, two, one, 100.0 * (one - two) / one);
    }
    std::printf("\n");
  }
  std::printf("matrix: fastest %s, %.2f ms/step\n", best.c_str(), best_ms);
}

// Each layer alone, and batch norm by shape (app/bench/layer_bench.h), at the step's size: batch 256 unless told.
void run_layers(const BenchStepOptions& o) {
  if (o.device == "cpu") throw std::runtime_error("--layers: times the GPU's layers; needs --device cuda");
  if (!o.profile_steps.empty()) throw std::runtime_error("--layers: not with --profile-steps");
  if (o.cuda_graph) throw std::runtime_error("--layers: times each layer eagerly; not with --cuda-graph");
  LayerBenchOptions options;
  options.context.device = Device::cuda;
  options.context.dtype = resolve_precision(o.precision, Device::cuda);
  options.context.cudnn_benchmark = o.cudnn_benchmark;
  options.context.fusion = o.fusion == "on";
  options.batchnorm = o.batchnorm;
  options.config.stem = parse_stem(o.stem);
  options.config.width = o.width;
  options.config.image_size = o.image_size;
  options.config.batch_size = o.batch_size > 0 ? o.batch_size : 256;
  options.warmup = o.warmup > 0 ? o.warmup : 5;
  options.passes = o.steps > 0 ? o.steps : 20;
  options.peak = peak_for(o, precision_name(options.context.dtype));
  run_layer_bench(options);
}

}  // namespace

void add_bench_step_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<BenchStepOptions>();
  auto* cmd =
      app.add_subcommand("bench-step", "Time ResNet-18 training steps (forward + backward + SGD) on one device");
  cmd->add_option("--stem", options->stem, "cifar (3x3 conv) or imagenet (7x7/2 conv + max-pool)")
      ->check(CLI::IsMember({"cifar", "imagenet"}));
  cmd->add_option("--precision", options->precision,
                  "fp32 or bf16 (default: bf16 on a GPU and for --plan, fp32 on the CPU)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--device", options->device, "cpu or cuda (default: cuda when present)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  add_number(cmd, "--batch-size", options->batch_size, "images per step (default 256 on cuda, 32 on cpu)", 1, 1 << 20);
  add_number(cmd, "--width", options->width, "base width (64 = torchvision)", 1, kMaxResNetWidth);
  add_number(cmd, "--image-size", options->image_size, "square image side", 1, 4096);
  add_number(cmd, "--steps", options->steps, "timed steps (default 50 on cuda, 5 on cpu)", 1, 1000000);
  add_number(cmd, "--warmup", options->warmup, "untimed steps first (default 10 on cuda, 2 on cpu)", 1, 1000000);
  add_number(cmd, "--threads", options->threads, "CPU threads (default 0: every core)", 0, 1024);
  add_switch(cmd, "--cuda-graph", options->cuda_graph, "capture one step as a CUDA graph and replay it");
  add_switch(cmd, "--cudnn-benchmark", options->cudnn_benchmark,
             "time cuDNN's convolution engines (kept in ~/.cache/cutrain for later runs)");
  add_batchnorm_option(cmd, options->batchnorm);
  add_fusion_option(cmd, options->fusion);
  add_streams_option(cmd, options->streams);
  cmd->add_option("--profile-steps", options->profile_steps,
                  "A:B: run timed steps A to B (0-based) between cudaProfilerStart and cudaProfilerStop, for "
                  "nsys profile --capture-range=cudaProfilerApi");
  add_switch(cmd, "--plan", options->plan,
             "run nothing: list what one step launches (kernels, cuDNN and cuBLAS calls, collectives, memsets) "
             "with its bytes and FLOPs, and a roofline estimate; needs no GPU, and the emulated build "
             "(scripts/build.sh --emulated)");
  add_switch(cmd, "--matrix", options->matrix,
             "measure every batch-norm implementation on 1 and 2 streams, eager and as a graph, in one table "
             "(GPU)");
  add_switch(cmd, "--layers", options->layers,
             "time each layer's forward and backward alone (eager, one stream) beside its FLOPs (and the plan's "
             "bytes where the build can plan), then batch norm shape by shape with every implementation (GPU)");
  add_number(cmd, "--world-size", options->world_size, "--plan: plan one rank of this many", 1, 1 << 16);
  add_number(
      cmd, "--gpu-tflops", options->gpu_tflops,
      "--plan, --matrix and --layers: the GPU's peak TFLOP/s (default 0: an H200's, 989 dense bf16 on tensor cores, "
      "67 fp32)",
      0.0, 1e6);
  add_number(cmd, "--gpu-tbps", options->gpu_tbps,
             "--plan and --layers: the GPU's memory bandwidth in TB/s (default: an H200's)", 0.001, 1e3)
      ->capture_default_str();
  cmd->callback([options, &exit_code] {
    if (options->plan) {
      print_step_plan(*options);
    } else if (options->matrix) {
      run_matrix(*options);
    } else if (options->layers) {
      run_layers(*options);
    } else {
      run_bench_step(*options);
    }
    exit_code = 0;
  });
}

}  // namespace cutrain
