#include "app/recipe.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "app/checkpoint_folder.h"
#include "nn/safetensors.h"

namespace cutrain {
namespace {

using nlohmann::json;

// What a flag given with another value than the run's does to a resume: the model's shape cannot load the
// checkpoint's weights; the data's flags make a resume from the middle of an epoch inexact (the position counts
// batches of the sampler's order over the run's data); any other is only said.
enum class Effect { said, inexact_mid_epoch, other_model };

// Visits the recipe's settings as (flag, member of `o`, effect, the model file's key for the model's shape).
template <class Options, class Visit>
void for_each_setting(Options& o, Visit&& visit) {
  visit("--data", o.data, Effect::inexact_mid_epoch, nullptr);
  visit("--synthetic-train", o.synthetic_train, Effect::inexact_mid_epoch, nullptr);
  visit("--synthetic-difficulty", o.synthetic_difficulty, Effect::inexact_mid_epoch, nullptr);
  visit("--synthetic-test", o.synthetic_test, Effect::said, nullptr);
  visit("--normalize-mean", o.normalize_mean, Effect::said, nullptr);
  visit("--normalize-std", o.normalize_std, Effect::said, nullptr);
  visit("--stem", o.stem, Effect::other_model, "stem");
  visit("--num-classes", o.num_classes, Effect::other_model, "num_classes");
  visit("--width", o.width, Effect::other_model, "width");
  visit("--epochs", o.epochs, Effect::said, nullptr);
  visit("--batch-size", o.batch_size, Effect::said, nullptr);
  visit("--lr", o.lr, Effect::said, nullptr);
  visit("--momentum", o.momentum, Effect::said, nullptr);
  visit("--nesterov", o.nesterov, Effect::said, nullptr);
  visit("--weight-decay", o.weight_decay, Effect::said, nullptr);
  visit("--norm-weight-decay", o.norm_weight_decay, Effect::said, nullptr);
  visit("--clip-grad-norm", o.clip_grad_norm, Effect::said, nullptr);
  visit("--lr-schedule", o.lr_schedule, Effect::said, nullptr);
  visit("--warmup-epochs", o.warmup_epochs, Effect::said, nullptr);
  visit("--lr-milestones", o.lr_milestones, Effect::said, nullptr);
  visit("--lr-gamma", o.lr_gamma, Effect::said, nullptr);
  visit("--label-smoothing", o.label_smoothing, Effect::said, nullptr);
  visit("--model-ema", o.model_ema, Effect::said, nullptr);
  visit("--model-ema-steps", o.model_ema_steps, Effect::said, nullptr);
  visit("--model-ema-decay", o.model_ema_decay, Effect::said, nullptr);
  visit("--seed", o.seed, Effect::said, nullptr);
  visit("--precision", o.precision, Effect::said, nullptr);
  visit("--sync-bn", o.sync_bn, Effect::said, nullptr);
}

// --data as recorded and compared: an absolute path, so that a resume from another folder names the same data;
// empty for the synthetic default.
std::string data_path(const std::string& data) {
  return data.empty() ? data : std::filesystem::absolute(data).lexically_normal().string();
}

template <class T>
json recorded_value(const char* flag, const T& value) {
  if constexpr (std::is_same_v<T, std::string>)
    if (std::string(flag) == "--data") return data_path(value);
  return value;
}

// A number as the command line would spell it: "0" for a whole one that JSON writes 0.0.
std::string number_spelled(const json& value) {
  if (value.is_number_float() && value.get<double>() == std::trunc(value.get<double>()) &&
      std::abs(value.get<double>()) < 1e15)
    return std::to_string(std::llround(value.get<double>()));
  return value.dump();
}

// A value as the command line would spell it.
std::string spelled(const char* flag, const json& value) {
  if (std::string(flag) == "--norm-weight-decay" && value.is_number() && value.get<double>() < 0)
    return "(--weight-decay's)";  // left out
  if (value.is_array()) {         // "0.5,0.75"
    std::string list;
    for (const json& item : value) {
      if (!list.empty()) list += ',';
      list += number_spelled(item);
    }
    return list;
  }
  if (!value.is_string()) return number_spelled(value);
  const std::string text = value.get<std::string>();
  if (text.empty()) return std::string(flag) == "--data" ? "(the synthetic data)" : "(the default)";
  return text;
}

// The model file's shape key as the flag's value: "16" for --width, "cifar" for --stem.
template <class T>
json shape_value(const std::string& text) {
  if constexpr (std::is_same_v<T, std::string>)
    return text;
  else
    return std::stoll(text);
}

// The checkpoints that the resume may start from, in the order it tries them: --resume PATH, or for
// --resume auto the complete ones in --save, newest first.
std::vector<std::string> checkpoints_to_resume(const TrainOptions& o) {
  if (o.resume != "auto") return {o.resume};
  if (o.save.empty() || !std::filesystem::is_directory(o.save)) return {};
  return CheckpointFolder(o.save, o.keep_last).complete_checkpoints();
}

}  // namespace

std::string recipe_json(const TrainOptions& options) {
  json recipe = json::object();
  for_each_setting(options, [&](const char* flag, const auto& value, Effect, const char*) {
    recipe[flag] = recorded_value(flag, value);
  });
  return recipe.dump();
}

AugmentConfig normalization_of(const std::vector<double>& mean, const std::vector<double>& std) {
  AugmentConfig config;
  if (mean.size() != 3 || std.size() != 3)
    throw std::runtime_error(std::string(mean.size() != 3 ? "--normalize-mean" : "--normalize-std") +
                             ": expected 3 numbers (R,G,B)");
  for (size_t c = 0; c < 3; ++c) {
    if (!(std[c] > 0)) throw std::runtime_error("--normalize-std: " + std::to_string(std[c]) + " is not positive");
    config.mean[c] = float(mean[c]);
    config.std[c] = float(std[c]);
  }
  return config;
}

AugmentConfig checkpoint_normalization(const CheckpointMetadata& metadata) {
  const auto it = metadata.find(kRecipeKey);
  if (it == metadata.end()) return AugmentConfig{};
  const json recipe = json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (!recipe.is_object() || !recipe.contains("--normalize-mean") || !recipe.contains("--normalize-std"))
    return AugmentConfig{};
  try {
    return normalization_of(recipe["--normalize-mean"].get<std::vector<double>>(),
                            recipe["--normalize-std"].get<std::vector<double>>());
  } catch (const json::exception&) {
    throw std::runtime_error(
        "the checkpoint's recipe holds a --normalize-mean or --normalize-std that is not 3 "
        "numbers");
  }
}

ResumedOptions resume_recipe(const TrainOptions& given) {
  ResumedOptions resumed{given, {}};
  if (given.resume.empty()) return resumed;
  // The first checkpoint whose metadata reads; restore() says what is wrong with those that do not.
  std::string path;
  CheckpointMetadata model;
  TrainingState saved;
  json recipe = json::object();
  for (const std::string& candidate : checkpoints_to_resume(given)) {
    try {
      model = read_safetensors_metadata(candidate);
      const std::string optim = optim_path_for(candidate);
      saved = TrainingState::from_metadata(read_safetensors_metadata(optim), optim);
      if (const auto it = model.find(kRecipeKey); it != model.end()) recipe = json::parse(it->second);
      if (!recipe.is_object()) recipe = json::object();
    } catch (const std::exception&) {
      continue;
    }
    path = candidate;
    break;
  }
  if (path.empty()) return resumed;
  const bool mid_epoch = saved.batch > 0;
  const auto& flags_given = given.flags_given;

  std::string taken;
  for_each_setting(resumed.options, [&](const char* flag, auto& value, Effect effect, const char* shape_key) {
    using T = std::decay_t<decltype(value)>;
    json run_value;
    try {
      if (shape_key != nullptr) {
        const auto it = model.find(shape_key);
        if (it == model.end()) return;
        run_value = shape_value<T>(it->second);
      } else {
        const auto it = recipe.find(flag);
        if (it == recipe.end()) return;
        run_value = *it;
        (void)run_value.get<T>();  // of the flag's type, or the recipe is not one this version wrote
      }
    } catch (const std::exception&) {
      return;
    }
    const json mine = recorded_value(flag, value);
    if (std::find(flags_given.begin(), flags_given.end(), flag) == flags_given.end()) {
      if (std::string(flag) == "--num-classes") return;  // its default, 0, takes the classes of the data again
      if (run_value != mine) taken += std::string(" ") + flag + " " + spelled(flag, run_value);
      value = run_value.get<T>();
      return;
    }
    if (run_value == mine) return;
    if (effect == Effect::other_model)
      throw std::runtime_error(std::string(flag) + " " + spelled(flag, mine) + ": " + path + " holds a model of " +
                               flag + " " + spelled(flag, run_value) +
                               ": leave the flag out to go on with it, or "
                               "start the other model in another --save folder");
    if (effect == Effect::inexact_mid_epoch && mid_epoch && !given.inexact_resume)
      throw std::runtime_error(std::string(flag) + " " + spelled(flag, mine) + ": the run in " + path + " trained on " +
                               flag + " " + spelled(flag, run_value) + " and stopped in the middle of epoch " +
                               std::to_string(saved.epoch + 1) +
                               ", where other data makes the resume inexact: leave the flag out, resume from a "
                               "checkpoint saved at the end of an epoch, or add --inexact-resume");
    resumed.lines.push_back("cutrain: warning: " + std::string(flag) + " " + spelled(flag, mine) +
                            " is not the run's " + spelled(flag, run_value) + ": going on with " + spelled(flag, mine));
  });
  if (!taken.empty())
    resumed.lines.insert(resumed.lines.begin(),
                         "resuming with the recipe of " + path + ":" + taken + " (a flag given again wins)");
  return resumed;
}

}  // namespace cutrain
