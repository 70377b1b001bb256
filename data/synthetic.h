// synthetic.h: a deterministic 10-class CIFAR-sized dataset, the default when no data is given.
//
// Each image holds one large shape or texture patch of its class (checkerboard, cross, disc,
// frame, horizontal stripes, plus, ring, square, triangle, vertical stripes: labels in the sorted
// order of the names, as in CIFAR-10, so an image folder keeps them), drawn at a random position,
// scale, tilt and colour over a random background. With `difficulty` > 0 the image also holds
// what makes a classifier work for its answer, all label-preserving and all drawn from the same
// distributions for every class:
//   - a textured background (stripes or checks at a random angle and period), so the textures
//     of the striped and checked classes are no giveaway on their own;
//   - clutter strokes and smaller distractor shapes of other classes, so the class is the large
//     shape, not any shape;
//   - an occluder: a patch that hides part of the shape, or erases it to background;
//   - less contrast between shape and background, and more pixel noise.
// Since position, colours, tilt and phase vary, no pixel or colour on its own says the class: a
// linear model on the pixels stays near chance. At difficulty 0 none of this is drawn and a
// small ResNet solves the shapes almost perfectly in a few epochs; the default, 1, is meant to
// take many epochs, and a ResNet keeps improving on it well past the CPU quickstart's 5 epochs.
//
// Image i of a split depends only on (seed, difficulty, split, i): generation is repeatable, a
// shorter set is a prefix of a longer one, and the train and test images are different draws.
// kSyntheticVersion changes whenever the images a given (seed, difficulty) produces change, and
// cached copies are named by it, so an old copy is never taken for the current generator's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace cutrain {

inline constexpr int kSyntheticVersion = 2;
inline constexpr double kSyntheticDefaultDifficulty = 1.0;
inline constexpr double kSyntheticMaxDifficulty = 2.0;

const std::vector<std::string>& synthetic_class_names();

// `count` images of 32 x 32 x 3, labels cycling 0..9 so the classes are balanced. Throws
// std::invalid_argument for count <= 0 or a difficulty outside [0, kSyntheticMaxDifficulty].
Dataset make_synthetic(int64_t count, uint64_t seed, bool train, double difficulty = kSyntheticDefaultDifficulty);

// Makes sure `dir` holds the synthetic dataset in CIFAR-10 binary form, writing it only when it
// does not exist yet; returns true when this call wrote it. Safe when several processes (the
// ranks of one run) call it at once: each writes to a private folder beside `dir` and renames it
// into place, and whoever loses the race keeps the winner's identical copy. `dir` must name
// everything the images depend on (synthetic_folder_name): an existing folder is trusted, not
// regenerated. Private folders that a killed writer left (`<dir>.partial-<pid>`, its process
// gone) are removed first.
bool ensure_synthetic_cifar10(const std::string& dir, int64_t train, int64_t test, uint64_t seed,
                              double difficulty = kSyntheticDefaultDifficulty);

// "synthetic-v2-d1-50000-10000" (seed 0) or "synthetic-v2-d0.5-50000-10000-seed3": the
// generator's version, the difficulty, the sizes and the seed, for a cache folder.
std::string synthetic_folder_name(int64_t train, int64_t test, uint64_t seed, double difficulty);

}  // namespace cutrain
