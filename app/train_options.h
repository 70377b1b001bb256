// train_options.h: everything `cutrain train` can be told. The defaults are the reference
// PyTorch DDP recipe, per process: batch 256, SGD lr 0.002, momentum 0.9, Nesterov, weight
// decay 1e-4, 20 epochs, random crop (pad 4) + flip + normalize.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/image_folder.h"

namespace cutrain {

// The largest --epochs and --batch-size, and so what a checkpoint's training state may say.
inline constexpr int kMaxEpochs = 100000;
inline constexpr int kMaxBatchSize = 1 << 20;

// The flags that only a GPU run reads. Given to a run on the CPU, each is refused in one line,
// as --precision bf16 is, rather than ignored.
inline constexpr const char* kGpuOnlyFlags[] = {"--batchnorm",     "--fusion",          "--streams",
                                                "--cuda-graphs",   "--cudnn-benchmark", "--deterministic",
                                                "--profile-steps", "--gpu-tflops"};

struct TrainOptions {
  // data
  std::string data;             // CIFAR-10 binary folder or image folder; empty: synthetic
  int synthetic_train = 50000;  // size of the synthetic dataset made when no --data
  int synthetic_test = 10000;
  double synthetic_difficulty = 1;  // data/synthetic.h: 0 clean shapes .. 2
  int workers = 4;                  // loader threads (CPU loader)
  int threads = 0;  // the CPU kernels' threads (kernels/base/cpu_threads.h); 0: the node's cores / its processes
  int64_t max_image_pixels = kDefaultMaxImagePixels;              // an image folder's largest image
  std::vector<double> normalize_mean = {0.4914, 0.4822, 0.4465};  // R, G, B of pixels in [0, 1]: CIFAR-10's
  std::vector<double> normalize_std = {0.2023, 0.1994, 0.2010};
  // model
  std::string stem = "cifar";  // cifar | imagenet
  int num_classes = 0;         // 0: from the data
  int width = 64;
  // optimisation
  int epochs = 20;
  int batch_size = 256;  // per process
  double lr = 0.002;
  double momentum = 0.9;
  bool nesterov = true;
  double weight_decay = 1e-4;
  double norm_weight_decay = -1;  // batch norm's weights' and biases'; negative: weight_decay's (kernels/sgd.h)
  double clip_grad_norm = 0;      // the gradient's largest 2-norm before SGD; 0: no clipping
  std::string lr_schedule = "constant";
  double warmup_epochs = 0;
  std::vector<double> lr_milestones = {0.5, 0.75};  // the step schedule's, as fractions of the run's steps
  double lr_gamma = 0.1;                            // the step schedule's factor at each milestone
  double label_smoothing = 0;
  bool model_ema = false;            // an EMA of the weights, torchvision's (nn/model_ema.h)
  int model_ema_steps = 32;          // updated after every batch of an epoch whose index is a multiple of this
  double model_ema_decay = 0.99998;  // before the adjustment to the run's shape (Note [The EMA of the weights])
  int64_t max_steps = 0;  // 0: no limit
  uint64_t seed = 0;
  // devices and speed
  std::string device = "auto";  // auto | cuda | cpu
  std::string precision;        // fp32 | bf16; empty: bf16 on a GPU, fp32 on the CPU
  bool deterministic = false;
  bool cudnn_benchmark = false;  // measure convolution engines, cached on disk
  double bucket_cap_mb = 25;
  bool sync_bn = false;
  std::string cuda_graphs = "on";         // on | off
  int streams = 2;                        // the GPU's streams: 2, or 1 (nn/resnet.cpp, Note [Side stream])
  std::string batchnorm = "cooperative";  // the GPU's batch norm: cooperative | split | cudnn (nn/context.h)
  std::string fusion = "off";             // on | off: ContextOptions::fusion (nn/context.h)
  int collective_timeout_s = 600;         // a collective waiting longer for the other ranks fails
  std::string profile_steps;              // "A:B": those steps between cudaProfilerStart and Stop (app/profiler.h)
  double gpu_tflops = 0;                  // the GPU's peak for the MFU; 0: its known one (kernels/base/device.h)
  // evaluation, logging, checkpoints
  int eval_every = 1;             // epochs; 0: never
  int64_t eval_every_steps = 0;   // steps, instead of eval_every; 0: by epochs
  double target_accuracy = 0;     // stop at the first evaluation that reaches it; 0: no target
  std::string tta = "none";       // test-time augmentation: none | flip
  int log_every = 25;             // steps
  double log_every_seconds = 30;  // and at least this often; 0: by steps alone
  std::string metrics;            // JSON lines file
  std::string tensorboard;        // folder for TensorBoard's event files (app/tensorboard_writer.h)
  std::string save;               // checkpoint folder
  std::string resume;             // checkpoint path or "auto"
  bool inexact_resume = false;    // resume onto other data in the middle of an epoch (app/recipe.h)
  bool new_run = false;           // start afresh in a --save folder that holds another run
  int keep_last = 3;
  int64_t save_every_steps = 0;          // also save every K steps inside an epoch; 0: at epoch ends only
  std::string init_from;                 // start from these model weights (safetensors)
  std::string dump_first_step;           // write the fixed first batch's loss and gradients, then exit
  std::vector<std::string> flags_given;  // the flags that the command line set, by their long names
};

}  // namespace cutrain
