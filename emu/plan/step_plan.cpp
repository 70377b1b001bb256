#include "emu/plan/step_plan.h"

#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>

#include "app/run_log.h"
#include "app/train_step.h"
#include "dist/ddp/communicator.h"
#include "kernels/base/check.h"
#include "kernels/batchnorm.h"
#include "nn/context.h"
#include "nn/resnet.h"

namespace cutrain {
namespace {

using Kind = RecordedOp::Kind;

// What bounds an operation's time in the estimate; a collective's is the link between the GPUs.
enum class Bound { compute, memory, launch, link };
const char* bound_name(Bound b) {
  switch (b) {
    case Bound::compute: return "compute";
    case Bound::memory: return "memory";
    case Bound::launch: return "launch";
    case Bound::link: return "link";
  }
  return "?";
}

// An operation's time on the GPU at `peak`, and what bounds it. A collective's time is that of the
// bytes a ring sends on each rank's link in a world of `world_size` (step_plan.h). Waits take no
// time.
std::pair<double, Bound> timed(const RecordedOp& op, const GpuPeak& peak, int world_size) {
  if (op.kind == Kind::wait || op.kind == Kind::host_wait) return {0, Bound::launch};
  if (op.kind == Kind::collective) {
    const double share = double(world_size - 1) / double(world_size), bytes = double(op.bytes.read);
    const double sent = op.name == "ncclAllReduce" ? 2 * share * bytes : share * bytes;
    return {std::max(sent / (peak.link_gbps * 1e9), kMinOperationSeconds), Bound::link};
  }
  const double compute = op.flops / (peak.tflops * 1e12);
  const double memory = double(op.bytes.read + op.bytes.written) / (peak.tbps * 1e12);
  if (compute >= memory && compute >= kMinOperationSeconds) return {compute, Bound::compute};
  if (memory >= kMinOperationSeconds) return {memory, Bound::memory};
  return {kMinOperationSeconds, Bound::launch};
}

// The step's estimate counts an operation's time, but not a collective's (it overlaps backward).
double op_seconds(const RecordedOp& op, const GpuPeak& peak) {
  return op.kind == Kind::collective ? 0 : timed(op, peak, 1).first;
}

// Rows of a table: one per name, in order of first appearance, with the time each bound holds.
struct Row {
  std::string name;
  int64_t count = 0;
  double read = 0, written = 0, flops = 0, seconds = 0;
  std::map<Bound, double> seconds_by_bound;

  // What bounds most of the row's time.
  Bound bound() const {
    return std::max_element(seconds_by_bound.begin(), seconds_by_bound.end(),
                            [](const auto& a, const auto& b) { return a.second < b.second; })
        ->first;
  }
};

std::vector<Row> rows_of(const std::vector<RecordedOp>& ops, Kind kind, const GpuPeak& peak, int world_size) {
  std::vector<Row> rows;
  std::map<std::string, size_t> index;
  for (const RecordedOp& op : ops) {
    if (op.kind != kind) continue;
    auto [it, added] = index.emplace(op.name, rows.size());
    if (added) {
      rows.emplace_back();
      rows.back().name = op.name;
    }
    Row& row = rows[it->second];
    ++row.count;
    row.read += double(op.bytes.read);
    row.written += double(op.bytes.written);
    row.flops += op.flops;
    const auto [seconds, bound] = timed(op, peak, world_size);
    row.seconds += seconds;
    row.seconds_by_bound[bound] += seconds;
  }
  return rows;
}

void print_rows(std::FILE* out, const char* title, const std::vector<Row>& rows, bool flops) {
  if (rows.empty()) return;
  std::fprintf(out, "  %-34s %6s %10s %10s %10s %9s  %s\n", title, "count", "MB read", "MB written",
               flops ? "GFLOP" : "", "min. ms", "bound by");
  for (const Row& r : rows) {
    char flop_text[32] = "";
    if (flops) std::snprintf(flop_text, sizeof flop_text, "%10.1f", r.flops / 1e9);
    std::fprintf(out, "    %-32s %6lld %10.1f %10.1f %10s %9.3f  %s\n", r.name.c_str(), (long long)r.count,
                 r.read / 1e6, r.written / 1e6, flop_text, r.seconds * 1e3, bound_name(r.bound()));
  }
}

// Per stream and per NVTX range: how many operations, and their estimated time (the comm
// stream's from the link).
void print_streams(std::FILE* out, const Recorder& plan, const GpuPeak& peak, int world_size) {
  std::vector<std::string> order;
  std::map<std::string, std::pair<int64_t, double>> by;  // "stream: phase" -> operations, seconds
  for (const RecordedOp& op : plan.ops()) {
    if (op.kind == Kind::wait || op.kind == Kind::host_wait) continue;
    const std::string key = plan.stream_name(op.stream) + " stream, " + (op.phase.empty() ? "-" : op.phase);
    auto [it, added] = by.emplace(key, std::pair<int64_t, double>{0, 0});
    if (added) order.push_back(key);
    ++it->second.first;
    it->second.second += timed(op, peak, world_size).first;
  }
  std::fprintf(out, "  %-34s %6s %43s\n", "where (stream, NVTX range)", "count", "min. ms");
  for (const std::string& key : order)
    std::fprintf(out, "    %-32s %6lld %43.3f\n", key.c_str(), (long long)by[key].first, by[key].second * 1e3);
}

// One rank of a planned world, whose peers are not there: its collectives are written down (not
// run), on a communication stream of its own tied to the main stream with events, as
// NcclCommunicator ties them (dist/ddp/nccl_communicator.h); the emulated device records the waits.
class PlannedCommunicator final : public Communicator {
 public:
  PlannedCommunicator(Recorder& recorder, int world_size, cudaStream_t compute)
      : recorder_(recorder), world_size_(world_size), compute_(compute) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming));
    recorder.name_stream(comm_, "comm");
  }
  ~PlannedCommunicator() override {
    cudaEventDestroy(comm_done_);
    cudaEventDestroy(compute_ready_);
    cudaStreamDestroy(comm_);
  }

  int rank() const override { return 0; }
  int world_size() const override { return world_size_; }
  const char* backend() const override { return "nccl"; }

  void all_reduce(float* data, size_t count, ReduceOp op) override {
    all_reduce_async(data, count, op);
    wait_async();
  }
  void broadcast(float* data, size_t count, int root) override {
    collective("ncclBroadcast", count);
    wait_async();
  }
  void barrier() override { throw std::logic_error("a planned step has no barrier"); }
  void all_reduce_host(double*, size_t, ReduceOp) override {
    throw std::logic_error("a planned step reduces no host values");
  }
  void all_reduce_async(float* data, size_t count, ReduceOp op) override { collective("ncclAllReduce", count); }
  void wait_async() override { wait(compute_, comm_, comm_done_); }
  cudaStream_t comm_stream() const override { return comm_; }

 private:
  void collective(const char* name, size_t count) {
    wait(comm_, compute_, compute_ready_);
    RecordedOp op;
    op.kind = Kind::collective;
    op.name = name;
    op.bytes = {int64_t(count * sizeof(float)), int64_t(count * sizeof(float))};
    op.stream = comm_;
    recorder_.add(std::move(op));
  }
  // `waiter` waits for the work enqueued on `on` so far.
  static void wait(cudaStream_t waiter, cudaStream_t on, cudaEvent_t event) {
    CUDA_CHECK(cudaEventRecord(event, on));
    CUDA_CHECK(cudaStreamWaitEvent(waiter, event, 0));
  }

  Recorder& recorder_;
  int world_size_;
  cudaStream_t compute_, comm_ = nullptr;
  cudaEvent_t compute_ready_ = nullptr, comm_done_ = nullptr;
};

}  // namespace

Recorder plan_step(const StepPlanConfig& c) {
  Recorder recorder;
  RecordingScope scope(recorder);  // Note [Record-only device]
  ContextOptions options;
  options.device = Device::cuda;
  options.dtype = parse_precision(c.precision);
  options.batchnorm = parse_batchnorm(c.batchnorm);
  options.streams = c.streams;
  options.fusion = c.fusion;
  Context ctx(options);
  recorder.name_stream(ctx.main_stream(), "main");
  if (ctx.side_stream() != ctx.main_stream()) recorder.name_stream(ctx.side_stream(), "side");
  ResNetConfig config;
  config.stem = parse_stem(c.stem);
  config.width = c.width;
  config.image_size = c.image_size;
  config.batch_size = c.batch_size;
  ResNet18 model(ctx, config);
  std::unique_ptr<Communicator> comm;
  if (c.world_size > 1) comm = std::make_unique<PlannedCommunicator>(recorder, c.world_size, ctx.main_stream());
  TrainStepOptions options_of_train;  // `cutrain train`'s defaults: DDP broadcasts the BN buffers
  options_of_train.broadcast_buffers = true;
  TrainStep step(model, comm.get(), options_of_train);
  recorder.clear();  // what building the model enqueued (the weight copies and their waits) is not the step's
  step.run();
  return recorder;
}

PlanSummary summarize(const std::vector<RecordedOp>& ops, const GpuPeak& peak) {
  PlanSummary s;
  for (const RecordedOp& op : ops) {
    switch (op.kind) {
      case Kind::kernel:
        ++s.kernels;
        s.custom_bytes += double(op.bytes.read + op.bytes.written);
        break;
      case Kind::library:
        ++s.library_calls;
        s.library_bytes += double(op.bytes.read + op.bytes.written);
        if (op.name.starts_with("cudnnConvolution")) s.conv_flops += op.flops;
        break;
      case Kind::collective: ++s.collectives; break;
      case Kind::memset: ++s.memsets; break;
      case Kind::memcpy: ++s.memcpys; break;
      case Kind::wait: ++s.waits; break;
      case Kind::host_wait: ++s.host_waits; break;
    }
    if (op.kind != Kind::collective) s.step_bytes += double(op.bytes.read + op.bytes.written);
    s.estimated_seconds += op_seconds(op, peak);
  }
  s.graph_nodes = s.kernels + s.library_calls + s.collectives + s.memsets + s.memcpys;
  return s;
}

namespace {

// What batch norm's launches were planned for: the record-only device, as bn_device_of_current_gpu
// sees it there.
BatchNormDevice planned_device() {
  Recorder probe;
  RecordingScope scope(probe);
  return bn_device_of_current_gpu();
}

}  // namespace

void print_plan(std::FILE* out, const StepPlanConfig& c, const Recorder& plan, const GpuPeak& peak) {
  const std::vector<RecordedOp>& ops = plan.ops();
  const PlanSummary s = summarize(ops, peak);
  std::fprintf(out,
               "plan of one training step: ResNet-18 %s stem, width %d, %s, batch %d, %dx%d images, rank 0 of %d, "
               "batch norm %s, %s%s\n",
               c.stem.c_str(), c.width, c.precision.c_str(), c.batch_size, c.image_size, c.image_size, c.world_size,
               c.batchnorm.c_str(), counted(c.streams, "stream").c_str(), c.fusion ? ", fusion on" : "");
  const BatchNormDevice h200 = planned_device();
  std::fprintf(out,
               "  GPU: %.0f TFLOP/s, %.2f TB/s, a %.0f GB/s link each way to the others; every operation takes at "
               "least %.0f us; batch norm's launches planned for an H200 (%d multiprocessors, %zu KiB of shared "
               "memory each)\n",
               peak.tflops, peak.tbps, peak.link_gbps, kMinOperationSeconds * 1e6, h200.blocks,
               h200.shared_bytes / 1024);
  std::fprintf(out,
               "  each row's time is the least its operations take at these peaks (its bound: compute, memory, "
               "or a kernel launch's %.0f us)\n",
               kMinOperationSeconds * 1e6);
  const int world = c.world_size;
  print_rows(out, "custom kernels", rows_of(ops, Kind::kernel, peak, world), false);
  print_rows(out, "cuDNN and cuBLAS calls", rows_of(ops, Kind::library, peak, world), true);
  print_rows(out, "collectives (overlap, not summed)", rows_of(ops, Kind::collective, peak, world), false);
  print_rows(out, "memsets", rows_of(ops, Kind::memset, peak, world), false);
  print_rows(out, "copies", rows_of(ops, Kind::memcpy, peak, world), false);
  std::fprintf(out,
               "  %lld custom kernel launches, %lld library calls (one graph node each; cuDNN may add more), "
               "%lld collectives, %lld memsets, %lld copies, %lld waits between streams, %lld host waits\n",
               (long long)s.kernels, (long long)s.library_calls, (long long)s.collectives, (long long)s.memsets,
               (long long)s.memcpys, (long long)s.waits, (long long)s.host_waits);
  print_streams(out, plan, peak, world);
  std::fprintf(out,
               "  whole step: %.2f GB moved, %.2f GB by custom kernels, %.2f GB by cuDNN and cuBLAS calls, %.2f GB "
               "by memsets and copies (collectives not counted)\n",
               s.step_bytes / 1e9, s.custom_bytes / 1e9, s.library_bytes / 1e9,
               (s.step_bytes - s.custom_bytes - s.library_bytes) / 1e9);
  std::fprintf(out,
               "plan: %lld graph nodes, %lld memsets, %.2f GB moved by custom kernels, %.1f GFLOP in convolutions, "
               "estimated %.2f ms/step, a lower bound (at most %.0f images/s per GPU)\n",
               (long long)s.graph_nodes, (long long)s.memsets, s.custom_bytes / 1e9, s.conv_flops / 1e9,
               s.estimated_seconds * 1e3, double(c.batch_size) / s.estimated_seconds);
}

}  // namespace cutrain
