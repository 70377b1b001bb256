// synthetic.h: a deterministic 10-class CIFAR-sized dataset, the default when no data is given.
//
// Each image is one shape or texture patch of its class (checkerboard, cross, disc, frame,
// horizontal stripes, plus, ring, square, triangle, vertical stripes: labels in the sorted
// order of the names, as in CIFAR-10, so an image folder keeps them), drawn at a random position
// and scale in a random foreground colour over a random background colour with a random
// brightness gradient, plus per-pixel noise. Since the position, colours and phase vary, no
// pixel or colour on its own says the class: a linear model on the pixels does poorly, while a
// convolutional network learns the shapes well above 90%.
//
// Image i of a split depends only on (seed, split, i): generation is repeatable, a shorter set
// is a prefix of a longer one, and the train and test images are different draws.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace cutrain {

const std::vector<std::string>& synthetic_class_names();

// `count` images of 32 x 32 x 3, labels cycling 0..9 so the classes are balanced.
Dataset make_synthetic(int64_t count, uint64_t seed, bool train);

// Makes sure `dir` holds the synthetic dataset in CIFAR-10 binary form, writing it only when it
// does not exist yet; returns true when this call wrote it. Safe when several processes (the
// ranks of one run) call it at once: each writes to a private folder beside `dir` and renames it
// into place, and whoever loses the race keeps the winner's identical copy. `dir` should name
// its parameters (e.g. ~/.cache/cutrain/synthetic-50000-10000-seed0): an existing folder is
// trusted, not regenerated.
bool ensure_synthetic_cifar10(const std::string& dir, int64_t train, int64_t test, uint64_t seed);

}  // namespace cutrain
