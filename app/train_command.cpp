// `cutrain train`: the flags of TrainOptions, then the Trainer. Defaults: the reference recipe.
#include <cstdint>

#include "app/commands.h"
#include "app/datasets.h"
#include "app/flags.h"
#include "app/train_options.h"
#include "app/trainer.h"
#include "data/synthetic.h"
#include "kernels/lr_schedule.h"
#include "nn/resnet.h"

namespace cutrain {

void add_train_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("train", "Train ResNet-18 (one process per GPU; start several with cutrun)");
  // A flag given twice takes its last value, so presets (scripts/quickstart.sh) can be overridden.
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto opts = std::make_shared<TrainOptions>();
  TrainOptions& o = *opts;

  add_data_option(cmd, o.data, "CIFAR-10 binary folder or image folder (default: synthetic CIFAR-format data)");
  add_number(cmd, "--synthetic-train", o.synthetic_train, "Training images of the synthetic default",
             kMinSyntheticTrainImages, kMaxSyntheticImages)
      ->capture_default_str();
  add_number(cmd, "--synthetic-test", o.synthetic_test, "Test images of the synthetic default", 1, kMaxSyntheticImages)
      ->capture_default_str();
  add_number(cmd, "--synthetic-difficulty", o.synthetic_difficulty,
             "Difficulty of the synthetic default: 0 clean shapes, 1 clutter, distractors and occlusion, up to 2", 0.0,
             kSyntheticMaxDifficulty)
      ->capture_default_str();
  add_number(cmd, "--max-image-pixels", o.max_image_pixels,
             "Largest image (width x height) an image folder may hold; larger ones are refused", 1, int64_t(1) << 28)
      ->capture_default_str();
  add_number_list(cmd, "--normalize-mean", o.normalize_mean,
                  "The mean (R,G,B) that the loaders subtract from pixels in [0, 1] (default: CIFAR-10's)", 0.0, 1.0, 3,
                  3, /*increasing=*/false);
  add_number_list(cmd, "--normalize-std", o.normalize_std,
                  "The std (R,G,B) that they then divide by (default: CIFAR-10's)", 0.001, 1.0, 3, 3,
                  /*increasing=*/false);
  add_number(cmd, "--workers", o.workers, "Loader threads", 1, 64)->capture_default_str();
  add_number(cmd, "--threads", o.threads,
             "Threads of the CPU path's kernels (default 0: this node's cores shared among its processes); any "
             "count gives the same results",
             0, 1024);

  cmd->add_option("--stem", o.stem, "cifar (3x3 conv) or imagenet (torchvision's 7x7 conv + max-pool)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cifar", "imagenet"}));
  add_number(cmd, "--num-classes", o.num_classes, "Classes (0: from the data)", 0, kMaxResNetClasses);
  add_number(cmd, "--width", o.width, "Base width of ResNet-18 (64 is the real one)", 1, kMaxResNetWidth)
      ->capture_default_str();

  add_number(cmd, "--epochs", o.epochs, "Epochs", 1, kMaxEpochs)->capture_default_str();
  add_number(cmd, "--batch-size", o.batch_size, "Batch size per process", 1, kMaxBatchSize)->capture_default_str();
  add_number(cmd, "--lr", o.lr, "Learning rate", 0, 1e6)->capture_default_str();
  add_number(cmd, "--momentum", o.momentum, "SGD momentum", 0, 1)->capture_default_str();
  add_switch(cmd, "--nesterov,!--no-nesterov", o.nesterov, "Nesterov momentum (default on)");
  add_number(cmd, "--weight-decay", o.weight_decay, "L2 weight decay", 0, 1)->capture_default_str();
  add_number(cmd, "--norm-weight-decay", o.norm_weight_decay,
             "Weight decay of batch norm's weights and biases alone, as torchvision's reference script's (default: "
             "--weight-decay's; fc.bias keeps --weight-decay)",
             0, 1);
  add_number(cmd, "--clip-grad-norm", o.clip_grad_norm,
             "Scale the gradient, after the ranks' average, to at most this 2-norm over all parameters before SGD, "
             "as torch.nn.utils.clip_grad_norm_ in torchvision's reference script (default 0: no clipping)",
             0, 1e6);
  cmd->add_option("--lr-schedule", o.lr_schedule, "constant, cosine, onecycle or step")
      ->capture_default_str()
      ->check(CLI::IsMember({"constant", "cosine", "onecycle", "step"}));
  add_number(cmd, "--warmup-epochs", o.warmup_epochs, "Linear warm-up, in epochs", 0, kMaxEpochs);
  add_number_list(cmd, "--lr-milestones", o.lr_milestones,
                  "Where --lr-schedule step multiplies the rate by --lr-gamma, as fractions of the run's steps "
                  "(MultiStepLR's milestones over the total)",
                  0.0, 1.0, 1, kMaxLrMilestones, /*increasing=*/true);
  add_number(cmd, "--lr-gamma", o.lr_gamma, "The factor of --lr-schedule step at each milestone", 0.0, 1.0)
      ->capture_default_str();
  add_number(cmd, "--label-smoothing", o.label_smoothing, "Label smoothing of the loss", 0, 1);
  add_switch(cmd, "--model-ema,!--no-model-ema", o.model_ema,
             "Keep an exponential moving average of the weights and batch norm statistics, as torchvision's "
             "reference script does (default off); evaluate it beside the model, and save it with each checkpoint "
             "(.ema.safetensors)");
  add_number(cmd, "--model-ema-steps", o.model_ema_steps,
             "Update the average after each batch of an epoch whose index (from 0) is a multiple of N", 1, 1 << 30)
      ->capture_default_str();
  add_number(cmd, "--model-ema-decay", o.model_ema_decay,
             "The average's decay D, which each update applies as 1 - min(1, (1 - D) * world size * batch size * "
             "--model-ema-steps / --epochs), as the reference script's",
             0.0, 1.0)
      ->capture_default_str();
  add_number(cmd, "--max-steps", o.max_steps, "Stop after this many optimizer steps in all (0: no limit)", 0,
             int64_t(1e12));
  add_number(cmd, "--seed", o.seed, "Seed of the initial weights, the sampler and the augmentation", 0, UINT64_MAX)
      ->capture_default_str();

  cmd->add_option("--device", o.device, "auto, cuda or cpu")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  cmd->add_option("--precision", o.precision, "fp32 or bf16 (default: bf16 on a GPU, fp32 on the CPU)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  add_switch(cmd, "--deterministic", o.deterministic,
             "Only deterministic cuDNN engines (cutrain's own kernels always reduce in a fixed order)");
  add_switch(cmd, "--cudnn-benchmark", o.cudnn_benchmark,
             "Time cuDNN's convolution engines instead of taking its heuristics' choice; the winners "
             "are kept in ~/.cache/cutrain (or $CUTRAIN_CACHE_DIR) for later runs");
  add_number(cmd, "--bucket-cap-mb", o.bucket_cap_mb, "Gradient bucket size, MiB (0: one all-reduce per parameter)", 0,
             65536)
      ->capture_default_str();
  add_switch(cmd, "--sync-bn", o.sync_bn, "Synchronise batch norm statistics across ranks (SyncBatchNorm)");
  add_batchnorm_option(cmd, o.batchnorm);
  add_fusion_option(cmd, o.fusion);
  add_streams_option(cmd, o.streams);
  add_number(cmd, "--collective-timeout", o.collective_timeout_s,
             "Seconds a collective (Gloo or NCCL) may wait for the other ranks before the run fails", 1, 86400)
      ->capture_default_str();
  cmd->add_option("--cuda-graphs", o.cuda_graphs, "Replay each training step as a CUDA graph: on or off")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  add_number(cmd, "--gpu-tflops", o.gpu_tflops,
             "The GPU's peak TFLOP/s in the precision trained, for the step line's MFU (default 0: the peak of an "
             "H200, H100 or A100 known by name; no MFU on another GPU)",
             0.0, 1e6);
  cmd->add_option("--profile-steps", o.profile_steps,
                  "A:B: run steps A to B (0-based) between cudaProfilerStart and cudaProfilerStop, for "
                  "nsys profile --capture-range=cudaProfilerApi (NVTX ranges name the parts of each step)");

  add_number(cmd, "--eval-every", o.eval_every, "Evaluate on the test set every E epochs (0: never)", 0, kMaxEpochs)
      ->capture_default_str();
  add_number(cmd, "--eval-every-steps", o.eval_every_steps,
             "Evaluate every N optimizer steps (and at the end) instead of every --eval-every epochs", 0,
             int64_t(1) << 40);
  add_number(cmd, "--target-accuracy", o.target_accuracy,
             "Stop at the first evaluation whose test accuracy reaches this fraction (e.g. 0.94) and report the "
             "training time it took (0: no target)",
             0.0, 1.0);
  cmd->add_option("--tta", o.tta,
                  "Test-time augmentation of evaluation: none, or flip (mean of the logits of the "
                  "image and its mirror)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "flip"}));
  add_number(cmd, "--log-every", o.log_every, "Print a step line every N steps (and after the first)", 1, 1 << 30)
      ->capture_default_str();
  add_number(cmd, "--log-every-seconds", o.log_every_seconds,
             "Also print a step line, and a progress line during evaluation, when S seconds have passed since the "
             "last (0: by --log-every alone)",
             0.0, 86400.0)
      ->capture_default_str();
  cmd->add_option(
      "--metrics", o.metrics,
      "Append JSON lines of metrics to this file (a failed write: a warning, and exit status 1 at the end)");
  cmd->add_option("--tensorboard", o.tensorboard,
                  "Write TensorBoard event files into this folder (train/loss, train/accuracy, train/lr, "
                  "train/images_per_s, test/accuracy)");
  cmd->add_option("--save", o.save, "Folder for checkpoints (written by rank 0)");
  cmd->add_option("--resume", o.resume, "Checkpoint to resume from, or 'auto': the newest valid one in --save");
  add_switch(cmd, "--inexact-resume", o.inexact_resume,
             "Resume onto other data (--data, --synthetic-*) in the middle of an epoch, which is refused else: "
             "a resume takes the run's recipe from its checkpoint, and flags given again win")
      ->needs("--resume");
  add_switch(cmd, "--new-run", o.new_run,
             "Start afresh in a --save folder that holds another run's checkpoints, deleting them first")
      ->excludes("--resume");
  add_number(cmd, "--keep-last", o.keep_last, "Checkpoints kept in --save", 1, 1 << 20)->capture_default_str();
  add_number(cmd, "--save-every-steps", o.save_every_steps,
             "Also save a checkpoint every K optimizer steps inside an epoch, so a crash loses at most K steps "
             "(0: at the end of each epoch only)",
             0, int64_t(1) << 40)
      ->needs("--save");
  cmd->add_option("--init-from", o.init_from, "Start from these model weights (safetensors, torchvision names)");
  cmd->add_option("--dump-first-step", o.dump_first_step,
                  "Write the loss and gradients of the first batch (in file order, normalised only) and exit");

  cmd->callback([cmd, opts, &exit_code] {
    for (const CLI::Option* option : cmd->get_options())
      if (option->count() > 0) opts->flags_given.push_back(option->get_name());
    exit_code = run_training(*opts);
  });
}

}  // namespace cutrain
