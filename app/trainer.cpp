#include "app/trainer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/accuracy_tracker.h"
#include "app/batch_feed.h"
#include "app/checkpoint_folder.h"
#include "app/datasets.h"
#include "app/evaluator.h"
#include "app/profiler.h"
#include "app/recipe.h"
#include "app/run_clock.h"
#include "app/run_end.h"
#include "app/run_log.h"
#include "app/run_start.h"
#include "app/train_step.h"
#include "app/version.h"
#include "data/sampler.h"
#include "dist/ddp/communicator.h"
#include "dist/launch/env.h"
#include "dist/launch/network_interface.h"
#include "dist/launch/progress_report.h"
#include "dist/launch/rendezvous.h"
#include "dist/launch/store_interface.h"
#include "kernels/base/check.h"
#include "kernels/base/cpu_threads.h"
#include "kernels/base/device.h"
#include "kernels/base/nvtx_range.h"
#include "kernels/lr_schedule.h"
#include "nn/checkpoint.h"
#include "nn/context.h"
#include "nn/device_buffer.h"
#include "nn/model_ema.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"

namespace cutrain {
namespace {

using SteadyClock = std::chrono::steady_clock;

double seconds_since(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

// Bytes this process holds: on the GPU what the run allocated on the device, on the CPU the peak
// resident set.
int64_t memory_in_use(Device device) {
  if (device == Device::cuda) {
    size_t free = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return int64_t(total - free);
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;
}

// Each step's loss and correct count, collected by StepMetrics without waiting on the device.
//
// On the GPU every step enqueues two 4-byte copies (loss, correct) into slots of a device ring;
// the host reads the ring only when it logs, once per --log-every steps, which is the only point
// where it waits for the device. On the CPU the values are read at once. Either way a window
// reports the mean loss, the correct count and the first step whose loss was not finite.
struct MetricsWindow {
  int steps = 0;
  double mean_loss = 0;
  int64_t correct = 0;
  int first_nonfinite = -1;  // index within the window, or -1
  float nonfinite_value = 0;
};

class StepMetrics {
 public:
  StepMetrics(Context& ctx, int capacity);

  // After a step: remember its loss and correct count (pointers into the model's memory).
  void add_step(const float* loss, const int32_t* correct);
  bool full() const { return pending_ == capacity_; }
  // Waits for the device (GPU), returns the steps added since the last flush and forgets them.
  MetricsWindow flush();

 private:
  Context& ctx_;
  int capacity_;
  int pending_ = 0;
  DeviceBuffer device_losses_, device_correct_;  // GPU ring
  std::vector<float> losses_;
  std::vector<int32_t> correct_;
};

StepMetrics::StepMetrics(Context& ctx, int capacity)
    : ctx_(ctx), capacity_(capacity), losses_(size_t(capacity)), correct_(size_t(capacity)) {
  if (ctx.on_gpu()) {
    device_losses_ = DeviceBuffer(Device::cuda, sizeof(float) * size_t(capacity));
    device_correct_ = DeviceBuffer(Device::cuda, sizeof(int32_t) * size_t(capacity));
  }
}

void StepMetrics::add_step(const float* loss, const int32_t* correct) {
  if (full()) throw std::logic_error("StepMetrics: flush() before adding more steps");
  if (ctx_.on_gpu()) {
    auto* losses = static_cast<float*>(device_losses_.data()) + pending_;
    auto* counts = static_cast<int32_t*>(device_correct_.data()) + pending_;
    CUDA_CHECK(cudaMemcpyAsync(losses, loss, sizeof(float), cudaMemcpyDeviceToDevice, ctx_.main_stream()));
    CUDA_CHECK(cudaMemcpyAsync(counts, correct, sizeof(int32_t), cudaMemcpyDeviceToDevice, ctx_.main_stream()));
  } else {
    losses_[size_t(pending_)] = *loss;
    correct_[size_t(pending_)] = *correct;
  }
  ++pending_;
}

MetricsWindow StepMetrics::flush() {
  MetricsWindow w;
  w.steps = pending_;
  if (pending_ == 0) return w;
  if (ctx_.on_gpu()) {
    CUDA_CHECK(cudaMemcpyAsync(losses_.data(), device_losses_.data(), sizeof(float) * size_t(pending_),
                               cudaMemcpyDeviceToHost, ctx_.main_stream()));
    CUDA_CHECK(cudaMemcpyAsync(correct_.data(), device_correct_.data(), sizeof(int32_t) * size_t(pending_),
                               cudaMemcpyDeviceToHost, ctx_.main_stream()));
    ctx_.synchronize();
  }
  double loss_sum = 0;
  for (int i = 0; i < pending_; ++i) {
    const float loss = losses_[size_t(i)];
    if (!std::isfinite(loss) && w.first_nonfinite < 0) {
      w.first_nonfinite = i;
      w.nonfinite_value = loss;
    }
    loss_sum += loss;
    w.correct += correct_[size_t(i)];
  }
  w.mean_loss = loss_sum / pending_;
  pending_ = 0;
  return w;
}

enum class StopReason { none, max_steps, signal, target };

class Trainer {
 public:
  explicit Trainer(const TrainOptions& options);
  ~Trainer();
  int run();

 private:
  void connect();
  void build_model();
  void restore();
  void check_ranks_resume_alike();
  void broadcast_state();
  void gather_devices();
  void print_banner() const;
  void log_window(int epoch, int64_t batch);
  bool line_overdue() const;
  void warn_of_cpu_fallback(double seconds_per_step) const;
  bool stop_agreed(bool local_stop);
  bool signal_stop_agreed();
  int report_signal_stop(const std::string& checkpoint) const;
  std::optional<EvalResult> evaluate_if_due(int epoch, bool epoch_end, StopReason& stop);
  std::string save_checkpoint();
  nlohmann::json run_record() const;
  void print_class_accuracy(const EvalResult& r) const;
  void check_replicas_agree();

  const TrainOptions& opt_;
  DistEnv env_;
  Device device_;
  DType dtype_;
  AugmentConfig normalization_;  // --normalize-mean and --normalize-std, as the loaders take them
  ProgressReport progress_;      // heartbeats to cutrun, from the start to the very end
  StepProfiler profiler_;        // --profile-steps
  Datasets data_;
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<ResNet18> model_;
  std::unique_ptr<TrainStep> step_;
  std::unique_ptr<ModelEma> ema_;  // --model-ema
  std::unique_ptr<DistributedSampler> sampler_;
  std::unique_ptr<BatchFeed> feed_;
  std::unique_ptr<Evaluator> evaluator_;
  std::unique_ptr<StepMetrics> metrics_;
  std::unique_ptr<RunLog> log_;
  std::unique_ptr<AccuracyTracker> accuracy_;
  std::optional<CheckpointFolder> checkpoints_;
  LrSchedule schedule_;
  TrainingState state_;
  std::string resumed_from_;                 // the checkpoint restore() took, if any
  std::optional<EvalResult> last_ema_eval_;  // --model-ema: the average's, at the last evaluation
  // Once the ranks agreed to stop for a signal, what each rank had: 2 * signal + 1 where it was the
  // job's (Note [A signal to one rank]), 0 where none.
  std::vector<int> stop_signals_;
  int64_t steps_per_epoch_ = 0;
  int64_t memory_baseline_ = 0;
  int64_t peak_memory_ = 0;
  double peak_flops_per_s_ = 0;            // the GPU's, for the MFU: --gpu-tflops or its known peak; 0: none shown
  double flops_per_step_ = 0;              // the model's in one step of this rank (nn/resnet.h)
  std::vector<std::string> rank_devices_;  // rank 0: where each rank runs, for the banner

  // Throughput bookkeeping, on the step clock: the window since the last log line, and the run
  // after warm-up, which is the steps up to warm_until_ (the first --log-every steps of this
  // process, or fewer where its first epoch or --max-steps ends sooner).
  RunClock clock_;
  SteadyClock::time_point training_start_, last_line_;  // wall clock: elapsed, and --log-every-seconds
  SteadyClock::time_point last_step_end_;
  double last_step_s_ = 0;  // from the end of the step before to the end of the last, wall clock
  int64_t first_step_ = 1;  // this process's first global step (1-based), logged at once
  int64_t last_step_ = 0;   // where the run ends: the epochs' steps, or --max-steps
  int64_t warm_until_ = 0;
  double window_start_s_ = 0;
  double window_data_s_ = 0;  // waiting for batches since the last line
  int64_t warm_steps_ = 0;    // in the logged windows after warm-up
  double warm_seconds_ = 0;
  RecentPace recent_pace_;  // of the same windows, for the ETA
  double epoch_loss_sum_ = 0;
  int64_t epoch_correct_ = 0, epoch_images_ = 0, epoch_steps_ = 0;
};

Trainer::Trainer(const TrainOptions& options)
    : opt_(options),
      env_(dist_env_from_environment()),
      device_(resolve_device(options.device)),
      dtype_(resolve_precision(options.precision, device_)),
      normalization_(normalization_of(options.normalize_mean, options.normalize_std)),
      progress_(env_.rank,
                [rank = env_.rank] {
                  std::fprintf(stderr,
                               "cutrain: rank %d: cutrun is gone (its heartbeat socket is closed): stopping "
                               "as for SIGTERM\n",
                               rank);
                  request_shutdown(SIGTERM);
                }),
      profiler_(options.profile_steps.empty() ? StepRange{} : parse_step_range(options.profile_steps),
                device_ == Device::cuda) {
  refuse_gpu_flags_on_cpu(opt_.flags_given, device_);
  // The step schedule's flags would change nothing in another schedule: refused, as a GPU flag on the CPU is.
  for (const std::string flag : {"--lr-milestones", "--lr-gamma"})
    if (opt_.lr_schedule != "step" && std::ranges::find(opt_.flags_given, flag) != opt_.flags_given.end())
      throw std::runtime_error(flag + ": applies to --lr-schedule step only (this run's is " + opt_.lr_schedule + ")");
  if (opt_.lr_milestones.size() > size_t(kMaxLrMilestones))  // a recipe this version did not write
    throw std::runtime_error("--lr-milestones: more than " + std::to_string(kMaxLrMilestones) + " milestones");
  for (const std::string flag : {"--model-ema-steps", "--model-ema-decay"})
    if (!opt_.model_ema && std::ranges::find(opt_.flags_given, flag) != opt_.flags_given.end())
      throw std::runtime_error(flag + ": applies with --model-ema only");
  log_ = std::make_unique<RunLog>(env_.is_main(), opt_.metrics, opt_.tensorboard);
  state_.run_id = new_run_id();  // a resume takes the checkpoint's instead
  state_.seed = opt_.seed;
  state_.world_size = env_.world_size;
  state_.batch_size = opt_.batch_size;
}

Trainer::~Trainer() = default;

// Sets up the devices, then the store and the communicator. That is NCCL between GPUs, Gloo
// between CPU processes, and nothing for one process, whose gradients go straight to SGD with no
// store and no collective.
void Trainer::connect() {
  ContextOptions co;
  co.device = device_;
  co.dtype = dtype_;
  co.deterministic = opt_.deterministic;
  co.cudnn_benchmark = opt_.cudnn_benchmark;
  co.batchnorm = parse_batchnorm(opt_.batchnorm);
  co.fusion = opt_.fusion == "on";
  co.streams = opt_.streams;
  if (device_ == Device::cuda) {
    int count = 0;
    CUDA_CHECK(cudaGetDeviceCount(&count));
    co.cuda_device = cuda_device_for_rank(env_, count);
  }
  ctx_ = std::make_unique<Context>(co);
  const int cores = std::max(1, int(std::thread::hardware_concurrency()));
  set_cpu_threads(opt_.threads > 0 ? opt_.threads : std::max(1, cores / env_.local_world_size));
  memory_baseline_ = device_ == Device::cuda ? memory_in_use(device_) : 0;
  if (env_.is_distributed()) {
    store_ = rendezvous(env_);
    CommunicatorOptions comm_options;
    comm_options.use_cuda = device_ == Device::cuda;
    comm_options.compute_stream = ctx_->main_stream();
    comm_options.timeout = std::chrono::seconds(opt_.collective_timeout_s);
    comm_ = make_communicator(env_, *store_, comm_options);
  }
}

// "cuda:3 NVIDIA H200 (sm_90, 139.8 GiB) on node-a", or "cpu on node-a"; in a job of several
// processes also the address and interface its collectives use: "cpu on node-a, 10.0.0.1 (eth0)".
std::string this_rank_device(Device device, int cuda_device, const DistEnv& env) {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  const std::string where = device == Device::cuda
                                ? "cuda:" + std::to_string(cuda_device) + " " + cuda_device_description(cuda_device)
                                : std::string("cpu");
  if (!env.is_distributed()) return where + " on " + host;
  const NetworkInterface nic = device == Device::cuda ? nccl_interface(env) : gloo_interface(env);
  return where + " on " + host + ", " + nic.address + " (" + nic.name + ")";
}

// Every rank says through the store where it runs; rank 0 collects the answers for the banner.
void Trainer::gather_devices() {
  const std::string mine = this_rank_device(device_, ctx_->options.cuda_device, env_);
  if (!store_) {
    rank_devices_ = {mine};
    return;
  }
  store_->set("device/" + std::to_string(env_.rank), std::vector<char>(mine.begin(), mine.end()));
  if (!env_.is_main()) return;
  for (int r = 0; r < env_.world_size; ++r) {
    const std::vector<char> text = store_->get("device/" + std::to_string(r));
    rank_devices_.emplace_back(text.begin(), text.end());
  }
}

void Trainer::build_model() {
  data_ = load_datasets(opt_.data, opt_.synthetic_train, opt_.synthetic_test, opt_.synthetic_difficulty,
                        opt_.max_image_pixels, [this](const std::string& line) { log_->print("%s", line.c_str()); });
  const Dataset& train = data_.train;
  if (train.height != train.width)
    throw std::runtime_error(data_.source + ": images are " + std::to_string(train.height) + "x" +
                             std::to_string(train.width) + "; ResNet-18 here takes square images");
  if (opt_.num_classes != 0 && opt_.num_classes < train.num_classes)
    throw std::runtime_error("--num-classes " + std::to_string(opt_.num_classes) + ": the data has " +
                             std::to_string(train.num_classes) + " classes");

  sampler_ = std::make_unique<DistributedSampler>(int64_t(train.size()), env_.world_size, env_.rank,
                                                  /*shuffle=*/true, opt_.seed);
  if (opt_.batch_size > sampler_->num_samples())
    throw std::runtime_error("--batch-size " + std::to_string(opt_.batch_size) +
                             " is larger than this rank's shard of " + std::to_string(sampler_->num_samples()) +
                             " training images (" + std::to_string(train.size()) + " images over " +
                             counted(env_.world_size, "rank") + ")");
  steps_per_epoch_ = int64_t(count_batches(size_t(sampler_->num_samples()), opt_.batch_size, /*drop_last=*/true));

  ResNetConfig mc;
  mc.stem = parse_stem(opt_.stem);
  mc.num_classes = opt_.num_classes ? opt_.num_classes : train.num_classes;
  mc.width = opt_.width;
  mc.batch_size = opt_.batch_size;
  mc.image_size = train.height;
  mc.label_smoothing = float(opt_.label_smoothing);
  mc.seed = opt_.seed;
  model_ = std::make_unique<ResNet18>(*ctx_, mc);
  schedule_.kind = parse_lr_schedule(opt_.lr_schedule);
  schedule_.base_lr = opt_.lr;
  schedule_.total_steps = int64_t(opt_.epochs) * steps_per_epoch_;
  schedule_.warmup_steps = int64_t(opt_.warmup_epochs * double(steps_per_epoch_));
  schedule_.milestone_count = int(opt_.lr_milestones.size());
  std::copy(opt_.lr_milestones.begin(), opt_.lr_milestones.end(), schedule_.milestones);
  schedule_.gamma = opt_.lr_gamma;
  TrainStepOptions so;
  so.sgd = SgdConfig{float(opt_.momentum), float(opt_.weight_decay), opt_.nesterov, float(opt_.norm_weight_decay)};
  so.schedule = schedule_;
  so.buckets.bucket_cap_mb = opt_.bucket_cap_mb;
  so.broadcast_buffers = !opt_.sync_bn;
  so.sync_batchnorm = opt_.sync_bn;
  so.clip_grad_norm = opt_.clip_grad_norm;
  std::unique_ptr<GraphCapture> capture;
  if (ctx_->on_gpu() && opt_.cuda_graphs == "on") capture = cuda_graph_capture(ctx_->main_stream(), comm_.get());
  step_ = std::make_unique<TrainStep>(*model_, comm_.get(), so, std::move(capture));
  if (opt_.model_ema)
    ema_ = std::make_unique<ModelEma>(*model_, model_ema_decay(env_.world_size, opt_.batch_size, opt_.model_ema_steps,
                                                               opt_.epochs, opt_.model_ema_decay));

  LoaderConfig lc;
  lc.batch_size = opt_.batch_size;
  lc.workers = opt_.workers;
  lc.augment = normalization_;
  lc.augment.train = true;
  lc.augment.seed = opt_.seed;
  lc.drop_last = true;
  feed_ = std::make_unique<BatchFeed>(train, lc, *model_);
  evaluator_ = std::make_unique<Evaluator>(*model_, data_.test, comm_.get(), env_.rank, env_.world_size,
                                           parse_tta(opt_.tta), normalization_);
  const std::optional<double> target =
      opt_.target_accuracy > 0 ? std::optional<double>(opt_.target_accuracy) : std::nullopt;
  accuracy_ = std::make_unique<AccuracyTracker>(EvalSchedule{opt_.eval_every, opt_.eval_every_steps, opt_.epochs},
                                                target, steps_per_epoch_);
  metrics_ = std::make_unique<StepMetrics>(*ctx_, opt_.log_every);
  if (ctx_->on_gpu()) {  // the step line's MFU, where the GPU's peak is known
    const double tflops =
        opt_.gpu_tflops > 0 ? opt_.gpu_tflops : cuda_peak_tflops(ctx_->options.cuda_device, dtype_ == DType::bf16);
    peak_flops_per_s_ = tflops * 1e12;
    flops_per_step_ = step_flops(mc);
  }
  if (!opt_.save.empty()) {
    CheckpointFolder::Report report;  // rank 0 writes the folder, and tidies it
    if (env_.is_main()) report = [this](const std::string& line) { log_->print("%s", line.c_str()); };
    checkpoints_.emplace(opt_.save, opt_.keep_last, report);
    CheckpointMetadata description = describe_run(data_, opt_.seed, normalization_);
    description[kRecipeKey] = recipe_json(opt_);  // Note [A resume keeps the recipe]
    checkpoints_->describe(std::move(description));
    if (env_.is_main() && opt_.resume.empty()) checkpoints_->claim_for_new_run(opt_.new_run);
  }
  log_->started(run_record());
}

// The metrics' first record (app/run_log.h): what a checkpoint records of the run, and the
// settings as this process resolved them (the device and precision that "auto" and the default
// became, the world, the steps of an epoch).
nlohmann::json Trainer::run_record() const {
  const ResNetConfig& c = model_->config();
  nlohmann::json settings = {{"device", device_ == Device::cuda ? "cuda" : "cpu"},
                             {"precision", dtype_ == DType::bf16 ? "bf16" : "fp32"},
                             {"world_size", env_.world_size},
                             {"batch_size", opt_.batch_size},
                             {"epochs", opt_.epochs},
                             {"steps_per_epoch", steps_per_epoch_},
                             {"max_steps", opt_.max_steps},
                             {"lr", opt_.lr},
                             {"lr_schedule", opt_.lr_schedule},
                             {"warmup_epochs", opt_.warmup_epochs},
                             {"lr_milestones", opt_.lr_milestones},
                             {"lr_gamma", opt_.lr_gamma},
                             {"momentum", opt_.momentum},
                             {"nesterov", opt_.nesterov},
                             {"weight_decay", opt_.weight_decay},
                             {"norm_weight_decay", opt_.norm_weight_decay < 0 ? nlohmann::json(nullptr)
                                                                              : nlohmann::json(opt_.norm_weight_decay)},
                             {"clip_grad_norm", opt_.clip_grad_norm},
                             {"label_smoothing", opt_.label_smoothing},
                             {"model_ema", opt_.model_ema},
                             {"model_ema_steps", opt_.model_ema ? nlohmann::json(opt_.model_ema_steps) : nullptr},
                             {"model_ema_decay", opt_.model_ema ? nlohmann::json(opt_.model_ema_decay) : nullptr},
                             {"stem", stem_name(c.stem)},
                             {"width", c.width},
                             {"num_classes", c.num_classes},
                             {"seed", opt_.seed},
                             {"tta", opt_.tta},
                             {"eval_every", opt_.eval_every},
                             {"eval_every_steps", opt_.eval_every_steps},
                             {"sync_bn", opt_.sync_bn},
                             {"cpu_threads", cpu_threads()},
                             {"workers", opt_.workers},
                             {"save", opt_.save},
                             {"resume", opt_.resume}};
  // The GPU's settings are recorded as they applied: a CPU run has none of them.
  const bool gpu = device_ == Device::cuda;
  settings["cuda_graphs"] = gpu ? nlohmann::json(opt_.cuda_graphs) : nlohmann::json(nullptr);
  settings["batchnorm"] = gpu ? opt_.batchnorm : "cpu";
  settings["fusion"] = gpu ? nlohmann::json(opt_.fusion) : nlohmann::json(nullptr);
  settings["streams"] = gpu ? nlohmann::json(opt_.streams) : nlohmann::json(nullptr);
  nlohmann::json record(describe_run(data_, opt_.seed, normalization_));
  record["settings"] = settings;
  return record;
}

// Why --resume auto passed over a checkpoint, in a few words: the model it holds when that is not
// this run's ("a model of width 8"), else the loader's own message.
std::string why_skipped(const std::string& path, const std::string& error, const ResNetConfig& mine) {
  std::string other;
  try {
    const CheckpointMetadata m = read_safetensors_metadata(path);
    auto differs = [&](const char* key, const std::string& ours, const std::string& said) {
      const auto it = m.find(key);
      if (it != m.end() && it->second != ours) other += (other.empty() ? "" : ", ") + said + it->second;
    };
    differs("width", std::to_string(mine.width), "width ");
    differs("stem", stem_name(mine.stem), "stem ");
    differs("num_classes", std::to_string(mine.num_classes), "classes ");
  } catch (const std::exception&) {
  }
  return other.empty() ? error : "a model of " + other;
}

// --init-from and --resume. Every rank reads the same files, and broadcast_state() then makes sure
// that all hold the same state.
void Trainer::restore() {
  if (!opt_.init_from.empty()) {
    load_model(opt_.init_from, *model_);
    if (ema_) ema_->start_over();  // the average starts from the weights the run starts from
  }
  if (opt_.resume.empty()) return;
  // A checkpoint that does not load is skipped by 'auto'; one that loads but does not fit this
  // run (resume_state) is refused either way.
  auto resume_from = [this, run = state_](const std::string& path) {
    state_ = resume_state(load_checkpoint(path, *model_, step_->sgd(), ema_.get()), run, steps_per_epoch_, path);
    if (ema_ && !std::filesystem::exists(ema_path_for(path)))
      log_->print("%s holds no average of the weights (a run without --model-ema): the average starts from its weights",
                  path.c_str());
    step_->sgd().set_step(state_.global_step);  // the device's step counter, so the schedule goes on from there
    log_->print("resumed from %s at epoch %d, step %lld", path.c_str(), state_.epoch + 1,
                static_cast<long long>(state_.global_step));
    log_->resumed(state_.epoch + 1, state_.global_step, path);
    resumed_from_ = path;
  };
  if (opt_.resume != "auto") {
    resume_from(opt_.resume);
    if (checkpoints_) checkpoints_->claim_for_resume(opt_.resume, state_.run_id);
    return;
  }
  if (!checkpoints_) throw std::runtime_error("--resume auto: needs --save DIR to look for checkpoints in");
  std::map<std::string, int> skipped;  // why, and how many for that reason
  auto skipped_text = [&] {
    std::string why;
    int total = 0;
    for (const auto& [reason, count] : skipped) {
      why += (why.empty() ? "" : "; ") + std::to_string(count) + " " + reason;
      total += count;
    }
    const ResNetConfig& c = model_->config();
    return "--resume auto: skipped " + counted(total, "checkpoint") + " in " + opt_.save + " (" + why +
           "; this run's model: width " + std::to_string(c.width) + ", " + stem_name(c.stem) + " stem, " +
           std::to_string(c.num_classes) + " classes)";
  };
  for (const std::string& path : checkpoints_->complete_checkpoints()) {
    try {
      resume_from(path);
    } catch (const ResumeMismatch&) {
      throw;
    } catch (const std::exception& e) {
      ++skipped[why_skipped(path, e.what(), model_->config())];
      continue;
    }
    if (!skipped.empty())
      log_->print("cutrain: warning: %s: went on from the newest that fits", skipped_text().c_str());
    return;
  }
  // One run per folder: its pruning would delete the other run's checkpoints, or they this run's.
  if (!skipped.empty())
    throw std::runtime_error(skipped_text() +
                             ": none fits this run; choose another --save folder, or leave out "
                             "--resume and add --new-run to delete them and start afresh there");
  log_->print("no checkpoint in %s yet: starting from scratch", opt_.save.c_str());
}

// Before the first step, the ranks of a distributed run agree on what they resumed. That is the
// position, the seed, and with a checkpoint its run and a digest of the weights, buffers and
// momentum.
void Trainer::check_ranks_resume_alike() {
  if (!store_) return;
  std::string mine = "step " + std::to_string(state_.global_step) + " (epoch " + std::to_string(state_.epoch + 1) +
                     ", batch " + std::to_string(state_.batch) + ", seed " + std::to_string(state_.seed);
  if (resumed_from_.empty()) {
    mine += ", no checkpoint)";
  } else {
    ParameterSet& ps = model_->params();
    uint64_t digest = kFnvStart;
    ctx_->synchronize();
    for (const Tensor& t : {ps.values(), ps.buffer_values(), step_->sgd().momentum()}) {
      std::vector<float> host(size_t(t.numel()));
      copy_to_host(t, host.data());
      digest = fnv1a(host.data(), host.size() * sizeof(float), digest);
    }
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(digest));
    mine += ", run " + state_.run_id + ", digest " + hex + ")";
  }
  check_ranks_hold_alike(*store_, env_.rank, env_.world_size, mine, resumed_from_);
}

void Trainer::broadcast_state() {
  if (comm_ && env_.is_distributed()) {
    ParameterSet& ps = model_->params();
    comm_->broadcast(ps.values().as<float>(), size_t(ps.numel()), 0);
    comm_->broadcast(ps.buffer_values().as<float>(), size_t(ps.buffer_values().numel()), 0);
    comm_->broadcast(step_->sgd().momentum().as<float>(), size_t(ps.numel()), 0);
  }
  model_->sync_weight_copies();
}

void Trainer::print_banner() const {
  if (!log_->active()) return;  // rank 0 alone knows every rank's device
  const ResNetConfig& c = model_->config();
  log_->print("%s: ResNet-18, %s stem, width %d, %d classes, %lld parameters", version_line().c_str(),
              stem_name(c.stem), c.width, c.num_classes, static_cast<long long>(model_->num_parameters()));
  // With --fusion on, how many of the fused units run fused; a unit that fell back said why in a line of its own.
  std::string fusion = ", fusion " + opt_.fusion;
  if (opt_.fusion == "on") {
    const auto& layers = model_->layers();
    const auto units = std::count_if(layers.begin(), layers.end(),
                                     [](const LayerSpec& spec) { return spec.kind == LayerKind::bn_relu_conv; });
    fusion += " (" + std::to_string(model_->fused_units()) + " of " + std::to_string(units) + " units fused)";
  }
  log_->print("  world size %d, precision %s, CUDA graphs %s, batch norm %s%s%s", env_.world_size,
              dtype_ == DType::bf16 ? "bf16" : "fp32", device_ == Device::cuda ? opt_.cuda_graphs.c_str() : "n/a",
              device_ == Device::cuda ? opt_.batchnorm.c_str() : "cpu", device_ == Device::cuda ? fusion.c_str() : "",
              device_ == Device::cuda ? (", " + counted(opt_.streams, "stream")).c_str() : "");
  for (int r = 0; r < env_.world_size; ++r) log_->print("  rank %d: %s", r, rank_devices_[size_t(r)].c_str());
  if (device_ == Device::cpu)
    log_->print("  CPU threads: %d per process (--threads), beside %d loader workers (--workers)", cpu_threads(),
                opt_.workers);
  log_->print("  data %s: %zu train, %zu test images", data_.source.c_str(), data_.train.size(), data_.test.size());
  // The step schedule says where it steps: "step, x0.1 at 50%, 75% of the steps".
  std::string schedule = opt_.lr_schedule;
  if (schedule == "step") {
    char text[32];
    std::snprintf(text, sizeof text, ", x%g at", opt_.lr_gamma);
    schedule += text;
    for (size_t i = 0; i < opt_.lr_milestones.size(); ++i) {
      std::snprintf(text, sizeof text, "%s %g%%", i ? "," : "", 100 * opt_.lr_milestones[i]);
      schedule += text;
    }
    schedule += " of the steps";
  }
  char norm_decay[48] = "";
  if (opt_.norm_weight_decay >= 0)
    std::snprintf(norm_decay, sizeof norm_decay, " (batch norm's %g)", opt_.norm_weight_decay);
  log_->print(
      "  batch %d per rank (%d global), %s per epoch, %s; SGD lr %g (%s), momentum %g%s, "
      "weight decay %g%s",
      opt_.batch_size, opt_.batch_size * env_.world_size, counted(steps_per_epoch_, "step").c_str(),
      counted(opt_.epochs, "epoch").c_str(), opt_.lr, schedule.c_str(), opt_.momentum, opt_.nesterov ? " nesterov" : "",
      opt_.weight_decay, norm_decay);
  if (ema_)
    log_->print(
        "  EMA of the weights: decay %.9g per update (--model-ema-decay %g), every %s of an epoch from its first",
        ema_->decay(), opt_.model_ema_decay, counted(opt_.model_ema_steps, "step").c_str());
  const size_t buckets = step_->buckets().size();
  // What becomes of the gradients once final: each bucket updated at once, or all clipped first.
  char updated[128];
  std::snprintf(updated, sizeof updated, "%s",
                comm_ ? "each then updated by SGD" : "each updated as soon as it is final");
  if (opt_.clip_grad_norm > 0)
    std::snprintf(updated, sizeof updated,
                  "clipped to a 2-norm of %g (--clip-grad-norm) once all are final, then updated by SGD",
                  opt_.clip_grad_norm);
  if (comm_) {
    log_->print("  gradients: %zu bucket%s (cap %g MiB) all-reduced over %s%s, %s", buckets, buckets == 1 ? "" : "s",
                opt_.bucket_cap_mb, comm_->backend(), opt_.sync_bn ? ", sync batch norm" : "", updated);
  } else {
    log_->print("  gradients: straight to SGD (one process: no communicator), in %zu bucket%s (cap %g MiB), %s",
                buckets, buckets == 1 ? "" : "s", opt_.bucket_cap_mb, updated);
  }
}

// All ranks stop together. Each says whether it wants to, and all learn if any does.
bool Trainer::stop_agreed(bool local_stop) {
  if (!comm_ || !env_.is_distributed()) return local_stop;
  double votes = local_stop ? 1.0 : 0.0;
  comm_->all_reduce_host(&votes, 1, ReduceOp::sum);
  return votes > 0;
}

// stop_agreed for a signal; when the ranks stop, each learns which ranks had which signal.
bool Trainer::signal_stop_agreed() {
  if (!stop_agreed(shutdown_requested())) return false;
  const int mine = shutdown_signal() == 0 ? 0 : 2 * shutdown_signal() + (shutdown_from_job() ? 1 : 0);
  std::vector<double> had(size_t(env_.world_size), 0.0);
  had[size_t(env_.rank)] = mine;
  if (comm_ && env_.is_distributed()) comm_->all_reduce_host(had.data(), had.size(), ReduceOp::sum);
  stop_signals_.assign(had.begin(), had.end());
  return true;
}

// The line of a stop for a signal, and the exit status (Note [A signal to one rank]).
int Trainer::report_signal_stop(const std::string& checkpoint) const {
  const auto step = static_cast<long long>(state_.global_step);
  const bool every_rank = std::count(stop_signals_.begin(), stop_signals_.end(), 0) == 0;
  const auto alone = [&](int had) { return had != 0 && had % 2 == 0 && !every_rank; };  // not the job's
  const int mine = stop_signals_[size_t(env_.rank)];
  if (alone(mine)) {
    log_->print(
        "cutrain: stopped by signal %d after step %lld, which pid %d sent to this rank alone, not to the "
        "job: a failure of this rank; checkpoint: %s",
        mine / 2, step, shutdown_sender(), checkpoint.c_str());
    return 128 + mine / 2;
  }
  const auto failed = std::find_if(stop_signals_.begin(), stop_signals_.end(), alone);
  if (mine == 0 && failed != stop_signals_.end()) {
    log_->print(
        "cutrain: stopped after step %lld, since rank %d was stopped by signal %d alone (a failure of that "
        "rank); checkpoint: %s",
        step, int(failed - stop_signals_.begin()), *failed / 2, checkpoint.c_str());
    return 0;
  }
  // This rank's signal, or the first rank's that had one (the job's, which has not reached this one yet).
  const int had = mine != 0 ? mine : *std::find_if(stop_signals_.begin(), stop_signals_.end(), [](int h) { return h; });
  log_->print("cutrain: stopped by signal %d after step %lld; checkpoint: %s", had / 2, step, checkpoint.c_str());
  return 0;
}

// Reads the steps since the last log line, checks them, prints and records them.
void Trainer::log_window(int epoch, int64_t batch) {
  const MetricsWindow w = metrics_->flush();
  if (w.steps == 0) return;
  const double seconds = clock_.step_s() - window_start_s_;
  const int64_t first_step = state_.global_step - w.steps + 1;
  if (w.first_nonfinite >= 0) {
    const std::vector<std::string> saved =
        checkpoints_ ? checkpoints_->complete_checkpoints() : std::vector<std::string>{};
    const std::string last = saved.empty() ? std::string("none") : saved.front();
    throw std::runtime_error("the loss is " + std::to_string(w.nonfinite_value) + " at step " +
                             std::to_string(first_step + w.first_nonfinite) + " (epoch " + std::to_string(epoch + 1) +
                             "): stopping; last good checkpoint: " + last);
  }
  const int64_t images = int64_t(w.steps) * opt_.batch_size * env_.world_size;
  if (first_step > warm_until_) {  // warm-up (start-up, graph capture) is left out
    warm_steps_ += w.steps;
    warm_seconds_ += seconds;
    recent_pace_.add(w.steps, seconds);
  }
  peak_memory_ = std::max(peak_memory_, memory_in_use(device_) - memory_baseline_);
  epoch_loss_sum_ += w.mean_loss * w.steps;
  epoch_correct_ += w.correct;
  epoch_images_ += int64_t(w.steps) * opt_.batch_size;
  epoch_steps_ += w.steps;

  StepRecord r;
  r.epoch = epoch + 1;
  r.step = int(batch);
  r.steps_per_epoch = int(steps_per_epoch_);
  r.epochs = opt_.epochs;
  r.global_step = state_.global_step;
  r.loss = w.mean_loss;
  r.acc = double(w.correct) / (double(w.steps) * opt_.batch_size);
  // The main rank alone prints and records the step, so it alone waits for the norm's reduction.
  r.grad_norm = env_.is_main() ? step_->sgd().grad_norm(ctx_->main_stream()) : 0.0;
  r.lr = schedule_.at(state_.global_step - 1);  // the last step's, as the device computed it
  r.images_per_s = images / seconds;
  r.ms_per_step = 1000 * seconds / w.steps;
  r.data_ms_per_step = 1000 * window_data_s_ / w.steps;
  window_data_s_ = 0;
  r.peak_memory_bytes = peak_memory_;
  if (peak_flops_per_s_ > 0) r.mfu = flops_per_step_ * w.steps / seconds / peak_flops_per_s_;
  // The remaining steps at the recent pace after warm-up (Note [A recent ETA] in app/run_clock.h), or
  // at this window's before there is one.
  const double seconds_per_step = warm_steps_ > 0 ? recent_pace_.seconds_per_step() : seconds / w.steps;
  r.elapsed_s = seconds_since(training_start_);
  r.eta_s = seconds_per_step * double(last_step_ - state_.global_step);
  log_->step(r);
  window_start_s_ = clock_.step_s();
  last_line_ = SteadyClock::now();
  if (first_step == first_step_) warn_of_cpu_fallback(seconds_per_step);
}

// The main rank alone prints a line by time. It needs no other rank, so it needs no agreement
// either. The line comes at the step after which one more step like the last would pass
// --log-every-seconds, so that no gap between lines exceeds it while the steps keep their pace.
bool Trainer::line_overdue() const {
  return env_.is_main() && opt_.log_every_seconds > 0 &&
         seconds_since(last_line_) + last_step_s_ >= opt_.log_every_seconds;
}

// Without --device, a machine with no GPU trains on the CPU, which may take days at the default
// size. This says so once, after the first step, with what the run as configured would take.
void Trainer::warn_of_cpu_fallback(double seconds_per_step) const {
  if (opt_.device != "auto" || device_ != Device::cpu) return;
  const double seconds = seconds_per_step * double(last_step_ - first_step_ + 1);
  log_->print(
      "cutrain: warning: no GPU, so this run trains on the CPU (%s): at %.2f s a step, its %s take about "
      "%s (h:mm:ss); give --device cpu to choose the CPU, or --device cuda to require a GPU",
      cuda_unavailable_reason().c_str(), seconds_per_step, counted(last_step_ - first_step_ + 1, "step").c_str(),
      clock_text(seconds).c_str());
}

// Evaluates when the evaluation schedule says so, off the training clock, and sets `stop` when
// the result reaches --target-accuracy. Every rank gets the same accuracy, so all stop together.
// A signal stops an evaluation too, at a batch that all ranks agree on, so that the stop's
// checkpoint is written without waiting for the rest of the test set. `stop` then says so, and
// there is no result.
std::optional<EvalResult> Trainer::evaluate_if_due(int epoch, bool epoch_end, StopReason& stop) {
  if (!accuracy_->due(epoch + 1, epoch_end, state_.global_step)) return std::nullopt;
  ctx_->synchronize();  // the steps so far are training time
  clock_.pause(Pause::evaluation);
  const auto start = SteadyClock::now();
  auto last_progress = start;
  const double progress_every = log_->in_place() ? 1.0 : opt_.log_every_seconds;  // 0: none
  const auto test_images = int64_t(data_.test.size());
  const EvalHook hook = [&](double done) {
    if (progress_every > 0 && seconds_since(last_progress) >= progress_every) {
      log_->evaluation_progress(std::llround(done * double(test_images)), test_images, seconds_since(start));
      last_progress = SteadyClock::now();
    }
    progress_.mark();
    return signal_stop_agreed();
  };
  EvalResult result = evaluator_->run(hook);
  last_ema_eval_.reset();
  if (ema_ && !result.stopped) {  // the average, in the model's place for the while (--model-ema)
    ema_->swap_with_model();
    last_ema_eval_ = evaluator_->run(hook);
    ema_->swap_with_model();
    result.stopped = last_ema_eval_->stopped;
  }
  const double seconds = seconds_since(start);
  clock_.resume();
  if (result.stopped) {
    stop = StopReason::signal;
    return std::nullopt;
  }
  if (accuracy_->add_evaluation(result.accuracy(), state_.global_step, clock_)) stop = StopReason::target;
  std::optional<double> ema_accuracy, ema_loss;
  if (last_ema_eval_) {
    ema_accuracy = last_ema_eval_->accuracy();
    ema_loss = last_ema_eval_->loss;
  }
  log_->evaluation(EvalRecord{epoch + 1, opt_.epochs, state_.global_step, epoch_end, result.accuracy(), result.loss,
                              seconds, clock_.training_s(), ema_accuracy, ema_loss});
  return result;
}

std::string Trainer::save_checkpoint() {
  if (!checkpoints_ || !env_.is_main()) return "";
  ctx_->synchronize();
  const int64_t counted = step_->sgd().step_count();
  if (counted != state_.global_step)  // the device's count and the host's must agree for a resume to be exact
    throw std::logic_error("the device counted " + std::to_string(counted) + " steps, the trainer " +
                           std::to_string(state_.global_step));
  clock_.pause(Pause::checkpoint);
  // The test accuracy measured right after this step, if any, for the best link (Note [The last and
  // the best checkpoint] in app/checkpoint_folder.h).
  const bool evaluated = state_.global_step > 0 && accuracy_->final_step() == state_.global_step;
  std::string path =
      checkpoints_->save(*model_, step_->sgd(), state_, evaluated ? accuracy_->final() : std::nullopt, ema_.get());
  clock_.resume();
  progress_.mark();
  log_->print("checkpoint after step %lld: %s (its optimizer state beside it, .optim.safetensors%s)",
              static_cast<long long>(state_.global_step), path.c_str(),
              ema_ ? ", and the average of the weights, .ema.safetensors" : "");
  return path;
}

void Trainer::print_class_accuracy(const EvalResult& r) const {
  log_->print("test accuracy per class:");
  for (const std::string& line : class_accuracy_lines(r, data_.test.class_names)) log_->print("%s", line.c_str());
}

// DDP keeps the replicas identical by construction, with the same start, the same averaged
// gradients and the same update. This checks that it did, once at the end, with a checksum of
// every parameter.
void Trainer::check_replicas_agree() {
  if (!comm_ || !env_.is_distributed()) return;
  const Tensor values = model_->params().values();
  std::vector<float> host(size_t(values.numel()));
  ctx_->synchronize();
  copy_to_host(values, host.data());
  double sums[2] = {0, 0};  // sum of values, sum of values weighted by position
  for (size_t i = 0; i < host.size(); ++i) {
    sums[0] += host[i];
    sums[1] += host[i] * double(i % 1021 + 1);
  }
  double mean[2] = {sums[0], sums[1]};
  comm_->all_reduce_host(mean, 2, ReduceOp::average);
  double disagree = 0;
  for (int k = 0; k < 2; ++k)
    if (std::abs(mean[k] - sums[k]) > 1e-12 * std::max(1.0, std::abs(sums[k]))) disagree = 1;
  comm_->all_reduce_host(&disagree, 1, ReduceOp::sum);
  if (disagree > 0)
    throw std::runtime_error("the parameters of " + counted(int(disagree), "rank") +
                             " differ from the others' "
                             "at the end of training");
  log_->print("parameters identical on all %d ranks", env_.world_size);
}

int Trainer::run() {
  const auto run_start = SteadyClock::now();
  // A signal during the rendezvous, with nothing to save yet, ends the rank at once (the signal's
  // default action); from here on it asks for a stop that saves.
  connect();
  install_shutdown_handlers();
  build_model();
  restore();
  check_ranks_resume_alike();
  if (!opt_.dump_first_step.empty()) {
    dump_first_step(opt_.dump_first_step, *model_, data_.train, normalization_);
    log_->print("wrote the first step's loss and gradients to %s", opt_.dump_first_step.c_str());
    return 0;
  }
  // Every rank resumed the same state, so every rank returns here alike.
  if (opt_.max_steps > 0 && state_.global_step >= opt_.max_steps) {
    log_->print("cutrain: nothing to do: the run is at step %lld, and --max-steps is %lld",
                static_cast<long long>(state_.global_step), static_cast<long long>(opt_.max_steps));
    return 0;
  }
  if (state_.global_step >= int64_t(opt_.epochs) * steps_per_epoch_) {
    log_->print(
        "cutrain: nothing left to train: the run is at step %lld, the end of its %s; a larger --epochs "
        "trains on",
        static_cast<long long>(state_.global_step), counted(opt_.epochs, "epoch").c_str());
    return 0;
  }
  broadcast_state();
  gather_devices();
  print_banner();

  StopReason stop = StopReason::none;
  std::optional<EvalResult> last_eval;
  std::string saved;  // the last checkpoint's model file
  first_step_ = state_.global_step + 1;
  last_step_ = int64_t(opt_.epochs) * steps_per_epoch_;
  if (opt_.max_steps > 0) last_step_ = std::min(last_step_, opt_.max_steps);
  warm_until_ = std::min({state_.global_step + opt_.log_every, (state_.epoch + 1) * steps_per_epoch_, last_step_});
  char every_seconds[32] = "";
  if (opt_.log_every_seconds > 0)
    std::snprintf(every_seconds, sizeof every_seconds, " or %g s", opt_.log_every_seconds);
  log_->print("warming up: step %lld of %lld, whose line comes at once; then a line every %s%s",
              static_cast<long long>(first_step_), static_cast<long long>(last_step_),
              counted(opt_.log_every, "step").c_str(), every_seconds);
  clock_.start();
  training_start_ = last_line_ = last_step_end_ = SteadyClock::now();
  progress_.mark();  // from here on, cutrun learns how long this rank goes between points where it can stop
  for (int epoch = state_.epoch; epoch < opt_.epochs && stop == StopReason::none; ++epoch) {
    const double epoch_start = clock_.training_s();  // the epoch's time leaves its evaluations out
    epoch_loss_sum_ = 0;
    epoch_correct_ = epoch_images_ = epoch_steps_ = 0;
    sampler_->set_epoch(epoch);
    clock_.pause(Pause::epoch_start);  // until the epoch's first batch is in
    feed_->start_epoch(sampler_->indices(), epoch, state_.batch);
    for (int64_t b = state_.batch; b < steps_per_epoch_; ++b) {
      profiler_.before_step(state_.global_step);
      {
        NvtxRange range("data");
        const SteadyClock::time_point asked = SteadyClock::now();
        feed_->load(b);
        window_data_s_ += seconds_since(asked);
      }
      clock_.resume();
      // One step on the batch just loaded, which is Note [The step], run eagerly, captured or
      // replayed (Note [The step's graph]). Nothing here waits for the device.
      step_->run();
      ++model_->num_batches_tracked;  // here, once per step, since a replayed step runs no host code
      // Note [The EMA of the weights]: b is the reference script's i, the batch's index in the epoch. A launch
      // of its own after the step, on the same stream, which waits for nothing.
      if (ema_ && b % opt_.model_ema_steps == 0) {
        ema_->update();
        if (epoch < opt_.warmup_epochs) ema_->restart();
      }
      metrics_->add_step(model_->loss(), model_->correct());
      profiler_.after_step(state_.global_step);
      ++state_.global_step;
      last_step_s_ = seconds_since(last_step_end_);
      last_step_end_ = SteadyClock::now();
      progress_.set_step(state_.global_step);
      state_.batch = b + 1;
      const bool at_limit = opt_.max_steps > 0 && state_.global_step >= opt_.max_steps;
      // Every rank logs at the same steps, which are each --log-every-th of an epoch, its last, the
      // limit and this process's first. Signals are agreed there on the GPU, where agreeing means
      // waiting for the device, and on every step on the CPU (cheap next to a CPU step). The main
      // rank also logs when a line is overdue, which no other rank needs to know.
      const bool agreed_line =
          (b + 1) % opt_.log_every == 0 || b + 1 == steps_per_epoch_ || at_limit || state_.global_step == first_step_;
      if (agreed_line || line_overdue()) log_window(epoch, b + 1);
      if (agreed_line || device_ == Device::cpu) {
        if (signal_stop_agreed()) stop = StopReason::signal;
      }
      if (at_limit && stop == StopReason::none) stop = StopReason::max_steps;
      if (stop == StopReason::none && b + 1 < steps_per_epoch_) {
        if (auto eval = evaluate_if_due(epoch, false, stop)) last_eval = eval;
      }
      if (stop != StopReason::none) {
        log_window(epoch, b + 1);
        break;
      }
      if (opt_.save_every_steps > 0 && state_.global_step % opt_.save_every_steps == 0 && b + 1 < steps_per_epoch_)
        saved = save_checkpoint();  // mid-epoch; an epoch's end saves below anyway
    }
    if (stop != StopReason::none && state_.batch < steps_per_epoch_) break;  // mid-epoch: saved below

    // The epoch is complete.
    state_.epoch = epoch + 1;
    state_.batch = 0;
    const double epoch_time = clock_.training_s() - epoch_start;
    std::optional<EvalResult> eval = evaluate_if_due(epoch, true, stop);
    EpochRecord r;
    r.epoch = epoch + 1;
    r.epochs = opt_.epochs;
    r.global_step = state_.global_step;
    r.loss = epoch_steps_ ? epoch_loss_sum_ / double(epoch_steps_) : 0;
    r.acc = epoch_images_ ? double(epoch_correct_) / double(epoch_images_) : 0;
    r.lr = schedule_.at(state_.global_step - 1);
    r.images_per_s = double(epoch_images_) * env_.world_size / epoch_time;
    r.epoch_time_s = epoch_time;
    if (eval) {
      r.test_acc = eval->accuracy();
      r.test_loss = eval->loss;
      if (last_ema_eval_) r.test_acc_ema = last_ema_eval_->accuracy();
      last_eval = eval;
    }
    r.peak_memory_bytes = peak_memory_;
    log_->epoch(r);
    saved = save_checkpoint();
  }
  if (stop != StopReason::none && state_.batch != 0) saved = save_checkpoint();
  const char* checkpoint = saved.empty() ? "none (no --save)" : saved.c_str();
  int status = 0;
  if (stop == StopReason::signal) status = report_signal_stop(checkpoint);  // mid-epoch, or on an epoch's last step
  if (stop == StopReason::max_steps)
    log_->print("cutrain: stopped at --max-steps %lld, in epoch %d of %d; checkpoint: %s",
                static_cast<long long>(opt_.max_steps), state_.batch == 0 ? state_.epoch : state_.epoch + 1,
                opt_.epochs, checkpoint);

  const double training_time = clock_.training_s();
  check_replicas_agree();
  const double wall = seconds_since(run_start);
  SummaryRecord s;
  s.wall_time_s = wall;
  s.training_time_s = training_time;
  s.eval_time_s = clock_.paused_s(Pause::evaluation);
  s.mean_images_per_s = warm_seconds_ > 0 ? double(warm_steps_ * opt_.batch_size * env_.world_size) / warm_seconds_ : 0;
  s.tta = opt_.tta;
  s.target_acc = accuracy_->target();
  if (const auto& reached = accuracy_->reached()) {
    s.time_to_target_s = reached->training_s;
    s.target_epochs = reached->epochs;
    s.target_steps = reached->steps;
  }
  s.best_test_acc = accuracy_->best();
  s.final_test_acc = accuracy_->final();
  s.peak_memory_bytes = peak_memory_;
  s.world_size = env_.world_size;
  s.precision = dtype_ == DType::bf16 ? "bf16" : "fp32";
  s.stem = opt_.stem;
  s.batch_size = opt_.batch_size;
  log_->summary(s);
  // The final accuracy names the step it was measured after: a run stopped mid-epoch reports the
  // evaluation before the stop, not one of its last step.
  char accuracy[128] = "";
  if (s.final_test_acc) {
    const int64_t step = accuracy_->final_step();
    std::snprintf(accuracy, sizeof accuracy, ", final test accuracy %.2f%% (after step %lld, epoch %lld; best %.2f%%)",
                  100 * *s.final_test_acc, static_cast<long long>(step),
                  static_cast<long long>((step + steps_per_epoch_ - 1) / steps_per_epoch_), 100 * *s.best_test_acc);
  }
  // A run with no logged window after warm-up has no speed to report, and says why instead of 0.
  char speed[96];
  if (warm_seconds_ > 0)
    std::snprintf(speed, sizeof speed, "%.0f images/s after warm-up", s.mean_images_per_s);
  else
    std::snprintf(speed, sizeof speed, "images/s not measured: the run ended within its warm-up (steps up to %lld)",
                  static_cast<long long>(warm_until_));
  log_->print("done in %.1f s (training %.1f s, evaluation %.1f s): %s%s%s", wall, s.training_time_s, s.eval_time_s,
              speed, accuracy, device_ == Device::cuda ? ("; CUDA graphs " + step_->graph_status()).c_str() : "");
  if (accuracy_->target()) log_->print("%s", accuracy_->summary_line(state_.epoch).c_str());
  if (last_eval && (stop == StopReason::none || stop == StopReason::target)) print_class_accuracy(*last_eval);
  log_->finish();  // a metrics file that could not take every record fails the run here
  return status;
}

}  // namespace

int run_training(const TrainOptions& given) {
  // Note [A resume keeps the recipe]: before anything is built, so that the model, the data and the precision
  // are the run's.
  const ResumedOptions resumed = resume_recipe(given);
  if (dist_env_from_environment().is_main())
    for (const std::string& line : resumed.lines) std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  Trainer trainer(resumed.options);
  try {
    return trainer.run();
  } catch (const std::exception& e) {
    write_error_file(e.what());  // while the communicator still stands
    throw;
  }
}

}  // namespace cutrain
