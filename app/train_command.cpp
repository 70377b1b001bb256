// `cutrain train`: the flags of TrainOptions, then the Trainer. Defaults: the reference recipe.
#include "app/commands.h"
#include "app/train_options.h"
#include "app/trainer.h"

namespace cutrain {

void add_train_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("train", "Train ResNet-18 (one process per GPU; start several with cutrun)");
  // A flag given twice takes its last value, so presets (scripts/quickstart.sh) can be overridden.
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto opts = std::make_shared<TrainOptions>();
  TrainOptions& o = *opts;

  cmd->add_option("--data", o.data, "CIFAR-10 binary folder or image folder (default: synthetic CIFAR-format data)");
  cmd->add_option("--synthetic-train", o.synthetic_train, "Training images of the synthetic default")->capture_default_str();
  cmd->add_option("--synthetic-test", o.synthetic_test, "Test images of the synthetic default")->capture_default_str();
  cmd->add_option("--synthetic-difficulty", o.synthetic_difficulty,
                  "Difficulty of the synthetic default: 0 clean shapes, 1 clutter, distractors and occlusion, up to 2")
      ->capture_default_str()->check(CLI::Range(0.0, 2.0));
  cmd->add_option("--workers", o.workers, "Loader threads")->capture_default_str()->check(CLI::Range(1, 64));

  cmd->add_option("--stem", o.stem, "cifar (3x3 conv) or imagenet (torchvision's 7x7 conv + max-pool)")
      ->capture_default_str()->check(CLI::IsMember({"cifar", "imagenet"}));
  cmd->add_option("--num-classes", o.num_classes, "Classes (default: from the data)")->check(CLI::Range(0, 100000));
  cmd->add_option("--width", o.width, "Base width of ResNet-18 (64 is the real one)")->capture_default_str()
      ->check(CLI::Range(1, 1024));

  cmd->add_option("--epochs", o.epochs, "Epochs")->capture_default_str()->check(CLI::Range(1, 100000));
  cmd->add_option("--batch-size", o.batch_size, "Batch size per process")->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--lr", o.lr, "Learning rate")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_flag("--nesterov,!--no-nesterov", o.nesterov, "Nesterov momentum (default on)");
  cmd->add_option("--weight-decay", o.weight_decay, "L2 weight decay")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--lr-schedule", o.lr_schedule, "constant, cosine, onecycle or step")->capture_default_str()
      ->check(CLI::IsMember({"constant", "cosine", "onecycle", "step"}));
  cmd->add_option("--warmup-epochs", o.warmup_epochs, "Linear warm-up, in epochs")->check(CLI::NonNegativeNumber);
  cmd->add_option("--label-smoothing", o.label_smoothing, "Label smoothing of the loss")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--max-steps", o.max_steps, "Stop after this many optimizer steps in all (0: no limit)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", o.seed, "Seed of the initial weights, the sampler and the augmentation")->capture_default_str();

  cmd->add_option("--device", o.device, "auto, cuda or cpu")->capture_default_str()
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  cmd->add_option("--precision", o.precision, "fp32 or bf16 (default: bf16 on a GPU, fp32 on the CPU)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_flag("--deterministic", o.deterministic,
                "Only deterministic cuDNN algorithms (batch norm's GPU sums still add with atomics)");
  cmd->add_option("--bucket-cap-mb", o.bucket_cap_mb, "Gradient bucket size, MiB (0: one all-reduce per parameter)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_flag("--sync-bn", o.sync_bn, "Synchronise batch norm statistics across ranks (SyncBatchNorm)");
  cmd->add_option("--collective-timeout", o.collective_timeout_s,
                  "Seconds a collective (Gloo or NCCL) may wait for the other ranks before the run fails")
      ->capture_default_str()->check(CLI::Range(1, 86400));
  cmd->add_option("--cuda-graphs", o.cuda_graphs, "Replay each training step as a CUDA graph: on or off")
      ->capture_default_str()->check(CLI::IsMember({"on", "off"}));

  cmd->add_option("--eval-every", o.eval_every, "Evaluate on the test set every E epochs (0: never)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--eval-every-steps", o.eval_every_steps,
                  "Evaluate every N optimizer steps (and at the end) instead of every --eval-every epochs")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  cmd->add_option("--target-accuracy", o.target_accuracy,
                  "Stop at the first evaluation whose test accuracy reaches this fraction (e.g. 0.94) and report "
                  "the training time it took (0: no target)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--tta", o.tta, "Test-time augmentation of evaluation: none, or flip (mean of the logits of the "
                                  "image and its mirror)")
      ->capture_default_str()->check(CLI::IsMember({"none", "flip"}));
  cmd->add_option("--log-every", o.log_every, "Print a step line every N steps")->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--metrics", o.metrics, "Append JSON lines of metrics to this file");
  cmd->add_option("--save", o.save, "Folder for checkpoints (written by rank 0)");
  cmd->add_option("--resume", o.resume, "Checkpoint to resume from, or 'auto': the newest valid one in --save");
  cmd->add_option("--keep-last", o.keep_last, "Checkpoints kept in --save")->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--init-from", o.init_from, "Start from these model weights (safetensors, torchvision names)");
  cmd->add_option("--dump-first-step", o.dump_first_step,
                  "Write the loss and gradients of the first batch (in file order, normalised only) and exit");

  cmd->callback([opts, &exit_code] { exit_code = run_training(*opts); });
}

}  // namespace cutrain
