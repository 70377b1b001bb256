// `cutrain eval`: the test accuracy of a checkpoint, overall and per class.
//
// The model's shape comes from the checkpoint itself (nn/checkpoint.h resnet_config_of: conv1
// gives the stem and the width, fc the classes), so a file exported from PyTorch works as well
// as our own; every tensor is checked before the model is built.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "app/commands.h"
#include "app/datasets.h"
#include "app/evaluator.h"
#include "app/flags.h"
#include "app/recipe.h"
#include "app/run_log.h"
#include "app/run_start.h"
#include "data/synthetic.h"
#include "nn/checkpoint.h"
#include "nn/context.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"

namespace cutrain {
namespace {

// A long evaluation (a full-width model on the CPU takes minutes) says how far it is this often.
constexpr int kProgressEverySeconds = 10;

struct EvalOptions {
  std::string data, checkpoint, device = "auto", precision, tta = "none";
  int batch_size = 256;
  int synthetic_train = 50000, synthetic_test = 10000;
  double synthetic_difficulty = kSyntheticDefaultDifficulty;
  int64_t max_image_pixels = kDefaultMaxImagePixels;
};

int run_eval(const EvalOptions& o) {
  ContextOptions co;
  co.device = resolve_device(o.device);
  co.dtype = resolve_precision(o.precision, co.device);
  const SafeTensorsFile file = read_safetensors(o.checkpoint);
  ResNetConfig mc = resnet_config_of(file, o.checkpoint);
  // Without --data, the data the checkpoint was trained on, when it names a folder that is still
  // there (app/checkpoint_folder.h describe()); a bare eval once tested on the synthetic default instead.
  std::string data_dir = o.data;
  if (const auto trained_on = file.metadata.find("data");
      data_dir.empty() && trained_on != file.metadata.end() && std::filesystem::is_directory(trained_on->second))
    data_dir = trained_on->second;
  // What will take a while is said on standard error, as it happens: standard output holds the result.
  auto say = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  Datasets data =
      load_datasets(data_dir, o.synthetic_train, o.synthetic_test, o.synthetic_difficulty, o.max_image_pixels, say);
  Context ctx(co);

  if (mc.num_classes < data.test.num_classes)
    throw std::runtime_error(o.checkpoint + ": " + std::to_string(mc.num_classes) + " classes, but " + data.source +
                             " has " + std::to_string(data.test.num_classes));
  mc.batch_size = std::min<int>(o.batch_size, int(data.test.size()));
  mc.image_size = data.test.height;
  ResNet18 model(ctx, mc);
  load_model(o.checkpoint, model);

  // The test images are normalised as the run that wrote the checkpoint normalised its own.
  Evaluator evaluator(model, data.test, nullptr, 0, 1, parse_tta(o.tta), checkpoint_normalization(file.metadata));
  say("evaluating " + o.checkpoint + " on " + std::to_string(data.test.size()) + " test images of " + data.source +
      (co.device == Device::cuda ? "" : ", on the CPU"));
  const auto start = std::chrono::steady_clock::now();
  auto last_line = start;
  const EvalResult r = evaluator.run([&](double done) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_line >= std::chrono::seconds(kProgressEverySeconds)) {
      const double elapsed = std::chrono::duration<double>(now - start).count();
      std::fprintf(stderr, "  %.0f%% after %s, about %s to go\n", 100 * done, clock_text(elapsed).c_str(),
                   clock_text(elapsed * (1 - done) / done).c_str());
      last_line = now;
    }
    return false;
  });
  std::printf("test accuracy: %.2f%% (%lld/%lld) of %s on %s%s\n", 100 * r.accuracy(),
              static_cast<long long>(r.correct), static_cast<long long>(r.total), o.checkpoint.c_str(),
              data.source.c_str(), o.tta == "flip" ? " (test-time augmentation: flip)" : "");
  for (const std::string& line : class_accuracy_lines(r, data.test.class_names)) std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("eval", "Test accuracy of a checkpoint, overall and per class");
  auto o = std::make_shared<EvalOptions>();
  cmd->add_option("--checkpoint", o->checkpoint, "Model weights (safetensors, torchvision names)")->required();
  add_data_option(cmd, o->data,
                  "CIFAR-10 binary folder or image folder (default: the data the checkpoint was trained on, when "
                  "it names a folder that is there, else the synthetic dataset)");
  cmd->add_option("--device", o->device, "auto, cuda or cpu")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  cmd->add_option("--precision", o->precision, "fp32 or bf16 (default: bf16 on a GPU)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--tta", o->tta,
                  "Test-time augmentation: none, or flip (mean of the logits of the image and "
                  "its mirror)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "flip"}));
  add_number(cmd, "--batch-size", o->batch_size, "Images per forward pass", 1, 1 << 20)->capture_default_str();
  add_number(cmd, "--synthetic-train", o->synthetic_train, "Size of the synthetic default's training split",
             kMinSyntheticTrainImages, kMaxSyntheticImages)
      ->capture_default_str();
  add_number(cmd, "--synthetic-test", o->synthetic_test, "Size of the synthetic default's test split", 1,
             kMaxSyntheticImages)
      ->capture_default_str();
  add_number(cmd, "--max-image-pixels", o->max_image_pixels,
             "Largest image (width x height) an image folder may hold; larger ones are refused", 1, int64_t(1) << 28)
      ->capture_default_str();
  add_number(cmd, "--synthetic-difficulty", o->synthetic_difficulty, "Difficulty of the synthetic default", 0.0,
             kSyntheticMaxDifficulty)
      ->capture_default_str();
  cmd->callback([o, &exit_code] { exit_code = run_eval(*o); });
}

}  // namespace cutrain
