// `cutrain eval`: the test accuracy of a checkpoint, overall and per class.
//
// The model's shape comes from the checkpoint itself (conv1's kernel gives the stem and the
// width, fc's rows the classes), so a file exported from PyTorch works as well as our own.
#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "app/commands.h"
#include "app/datasets.h"
#include "app/device_choice.h"
#include "app/evaluator.h"
#include "nn/checkpoint.h"
#include "nn/context.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"

namespace cutrain {
namespace {

struct EvalOptions {
  std::string data, checkpoint, device = "auto", precision, tta = "none";
  int batch_size = 256;
  int synthetic_train = 50000, synthetic_test = 10000;
  double synthetic_difficulty = 1;
};

// Stem, width and classes of the ResNet-18 stored in `path`.
ResNetConfig config_from_checkpoint(const std::string& path) {
  const SafeTensorsFile file = read_safetensors(path);
  auto shape_of = [&](const std::string& name) {
    auto it = file.tensors.find(name);
    if (it == file.tensors.end()) throw std::runtime_error(path + ": no " + name + "; not a ResNet-18 checkpoint");
    return it->second.shape;
  };
  const std::vector<int64_t> conv1 = shape_of("conv1.weight"), fc = shape_of("fc.weight");
  if (conv1.size() != 4 || fc.size() != 2 || (conv1[2] != 3 && conv1[2] != 7))
    throw std::runtime_error(path + ": conv1.weight or fc.weight does not have a ResNet-18 shape");
  ResNetConfig c;
  c.stem = conv1[2] == 7 ? Stem::imagenet : Stem::cifar;
  c.width = int(conv1[0]);
  c.num_classes = int(fc[0]);
  return c;
}

int run_eval(const EvalOptions& o) {
  ContextOptions co;
  co.device = resolve_device(o.device);
  co.dtype = resolve_precision(o.precision, co.device);
  Datasets data = load_datasets(o.data, o.synthetic_train, o.synthetic_test, o.synthetic_difficulty);
  Context ctx(co);

  ResNetConfig mc = config_from_checkpoint(o.checkpoint);
  if (mc.num_classes < data.test.num_classes)
    throw std::runtime_error(o.checkpoint + ": " + std::to_string(mc.num_classes) + " classes, but " + data.source +
                             " has " + std::to_string(data.test.num_classes));
  mc.batch_size = std::min<int>(o.batch_size, int(data.test.size()));
  mc.image_size = data.test.height;
  ResNet18 model(ctx, mc);
  load_model(o.checkpoint, model);

  Evaluator evaluator(model, data.test, nullptr, 0, 1, parse_tta(o.tta));
  const EvalResult r = evaluator.run();
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
  cmd->add_option("--data", o->data, "CIFAR-10 binary folder or image folder (default: the synthetic dataset)");
  cmd->add_option("--device", o->device, "auto, cuda or cpu")->capture_default_str()
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  cmd->add_option("--precision", o->precision, "fp32 or bf16 (default: bf16 on a GPU)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--tta", o->tta, "Test-time augmentation: none, or flip (mean of the logits of the image and "
                                   "its mirror)")
      ->capture_default_str()->check(CLI::IsMember({"none", "flip"}));
  cmd->add_option("--batch-size", o->batch_size, "Images per forward pass")->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--synthetic-train", o->synthetic_train, "Size of the synthetic default's training split")
      ->capture_default_str();
  cmd->add_option("--synthetic-test", o->synthetic_test, "Size of the synthetic default's test split")
      ->capture_default_str();
  cmd->add_option("--synthetic-difficulty", o->synthetic_difficulty, "Difficulty of the synthetic default")
      ->capture_default_str()->check(CLI::Range(0.0, 2.0));
  cmd->callback([o, &exit_code] { exit_code = run_eval(*o); });
}

}  // namespace cutrain
