#include "data/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <unistd.h>
#include <stdexcept>

#include "data/cifar10.h"
#include "kernels/rng.cuh"

namespace cutrain {

static constexpr int kSide = 32;
static constexpr int kClasses = 10;

const std::vector<std::string>& synthetic_class_names() {
  // In sorted order, so that an image folder of them (classes sorted by name) keeps the labels.
  static const std::vector<std::string> names = {"checker", "cross", "disc",   "frame",    "hstripes",
                                                 "plus",    "ring",  "square", "triangle", "vstripes"};
  return names;
}

namespace {

// The random numbers of one image: splitmix64 over a counter that starts at the image's key.
struct Draws {
  uint64_t counter;
  uint64_t bits() { return splitmix64(counter++); }
  float uniform(float lo, float hi) { return lo + (hi - lo) * float(bits() >> 40) * (1.0f / 16777216.0f); }
  int integer(int lo, int hi) { return lo + int(bits() % uint64_t(hi - lo + 1)); }  // in [lo, hi]
};

// Where the shape sits: centre (cx, cy), size r (about its half-width), and a texture phase.
struct Placement {
  float cx, cy, r;
  int phase;
};

// Is pixel (x, y) inside the shape of class `label`? d = offset from the centre.
bool inside(int label, const Placement& s, int x, int y) {
  const float dx = float(x) - s.cx, dy = float(y) - s.cy;
  const float ax = std::fabs(dx), ay = std::fabs(dy);
  const float d2 = dx * dx + dy * dy, box = 0.8f * s.r;
  const bool in_box = ax <= s.r && ay <= s.r;
  const int px = x + s.phase, py = y + s.phase;
  switch (label) {
    case 0: return in_box && (px / 3 + py / 3) % 2 == 0;                         // checkerboard
    case 1: return std::fabs(ax - ay) <= 1.2f && ax <= box;                        // cross (X)
    case 2: return d2 <= s.r * s.r;                                               // disc
    case 3: return std::max(ax, ay) <= box && std::max(ax, ay) >= box - 2.0f;     // frame
    case 4: return in_box && (py / 2) % 2 == 0;                                   // horizontal stripes
    case 5: return (ax <= 1.5f && ay <= s.r) || (ay <= 1.5f && ax <= s.r);        // plus
    case 6: return d2 <= s.r * s.r && d2 >= (s.r - 2.5f) * (s.r - 2.5f);          // ring
    case 7: return ax <= box && ay <= box;                                        // square
    case 8: return dy >= -s.r && dy <= 0.8f * s.r && ax <= 0.6f * (dy + s.r);     // triangle, apex up
    default: return in_box && (px / 2) % 2 == 0;                                  // vertical stripes
  }
}

// One image of class `label`: background colour with a linear brightness gradient, the class's
// shape in a foreground colour far enough from it to be seen, then uniform noise of +-20.
void draw_image(int label, uint64_t key, uint8_t* out) {
  Draws draw{key};
  float bg[3], fg[3];
  for (float& v : bg) v = draw.uniform(0, 255);
  do {
    for (float& v : fg) v = draw.uniform(0, 255);
  } while (std::fabs(fg[0] - bg[0]) + std::fabs(fg[1] - bg[1]) + std::fabs(fg[2] - bg[2]) < 150);
  // Centre and size keep the whole shape inside the 32 x 32 image.
  const Placement s{draw.uniform(11, 21), draw.uniform(11, 21), draw.uniform(6, 10), draw.integer(0, 5)};
  const float gx = draw.uniform(-2, 2), gy = draw.uniform(-2, 2);  // gradient, per pixel
  for (int y = 0; y < kSide; ++y)
    for (int x = 0; x < kSide; ++x) {
      const float* colour = inside(label, s, x, y) ? fg : bg;
      const float shade = gx * float(x - kSide / 2) + gy * float(y - kSide / 2);
      uint64_t noise = draw.bits();
      for (int c = 0; c < 3; ++c, noise >>= 16) {
        float v = colour[c] + shade + float(int(noise & 0xffff) % 41 - 20);
        out[(y * kSide + x) * 3 + c] = uint8_t(std::clamp(v, 0.0f, 255.0f) + 0.5f);
      }
    }
}

}  // namespace

Dataset make_synthetic(int64_t count, uint64_t seed, bool train) {
  if (count <= 0) throw std::invalid_argument("synthetic: the image count must be positive");
  Dataset dataset;
  dataset.num_classes = kClasses;
  dataset.class_names = synthetic_class_names();
  dataset.labels.resize(size_t(count));
  dataset.images.resize(size_t(count) * dataset.image_bytes());
  const uint64_t split_key = random_bits(seed, train ? 0 : 1, 0);
  for (int64_t i = 0; i < count; ++i) {
    dataset.labels[i] = int32_t(i % kClasses);
    draw_image(dataset.labels[i], split_key + (uint64_t(i) << 32), dataset.images.data() + i * dataset.image_bytes());
  }
  return dataset;
}

bool ensure_synthetic_cifar10(const std::string& dir, int64_t train, int64_t test, uint64_t seed) {
  namespace fs = std::filesystem;
  if (fs::is_directory(dir)) return false;
  const fs::path target = fs::path(dir).lexically_normal();
  if (target.has_parent_path()) create_dataset_folder(target.parent_path().string());
  const fs::path staging = target.string() + ".partial-" + std::to_string(getpid());
  write_cifar10(staging.string(), make_synthetic(train, seed, true), make_synthetic(test, seed, false));
  std::error_code error;
  fs::rename(staging, target, error);  // atomic; fails when another process got there first
  if (error) {
    fs::remove_all(staging);
    if (!fs::is_directory(target)) throw std::runtime_error(dir + ": cannot create: " + error.message());
    return false;
  }
  return true;
}

}  // namespace cutrain
