// recipe.h: a run's recipe, the settings of `cutrain train` that shape what it trains (the data, the model, the
// schedule and its length, the optimizer, the precision, the seed), which each checkpoint records and a resume
// takes back.
//
// Note [A resume keeps the recipe]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A resume goes on with the recipe of the run it resumes, flag by flag,
// unless the command line gives a flag again, as torchvision's reference script does with the `args` that it
// stores in its checkpoints. A flag given with another value than the run's is taken, and one line names the
// difference. Other data in the middle of an epoch is refused, since the position there counts batches of the
// sampler's order over the run's data, unless --inexact-resume. The model's shape (stem, width, classes) is read
// from the model file's own keys, so that checkpoints from before recipes also resume without their flags.
#pragma once

#include <string>
#include <vector>

#include "app/train_options.h"
#include "kernels/augment.h"
#include "nn/checkpoint.h"

namespace cutrain {

// The metadata key under which a checkpoint holds the recipe, a JSON object keyed by flag
// ({"--lr": 0.05, "--lr-schedule": "onecycle", ...}); --data is recorded as an absolute path.
inline constexpr const char* kRecipeKey = "recipe";
std::string recipe_json(const TrainOptions& options);

// `given`, resumed (given.resume: a checkpoint, or "auto", the newest complete one in given.save): every
// recipe flag that the command line did not set (given.flags_given) takes the checkpoint's value. `lines` gets
// what was taken and each difference, one line each. Throws naming the flag for other data in the middle of an
// epoch without --inexact-resume. A checkpoint that cannot be read changes nothing: the resume itself then
// says what is wrong with it.
struct ResumedOptions {
  TrainOptions options;
  std::vector<std::string> lines;
};
ResumedOptions resume_recipe(const TrainOptions& given);

// The loaders' normalisation (kernels/augment.h) of --normalize-mean and --normalize-std: an AugmentConfig with
// that mean and std, in float as the loaders apply them. Throws naming the flag when either is not 3 positive
// numbers (a recipe that this version did not write).
AugmentConfig normalization_of(const std::vector<double>& mean, const std::vector<double>& std);

// The normalisation of the run that wrote a checkpoint with `metadata`, for `cutrain eval`: its recipe's, or
// else CIFAR-10's, which every run used before the flags.
AugmentConfig checkpoint_normalization(const CheckpointMetadata& metadata);

}  // namespace cutrain
