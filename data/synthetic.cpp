#include "data/synthetic.h"

#include <signal.h>
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numbers>
#include <stdexcept>
#include <system_error>

#include <cerrno>

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
  bool chance(float p) { return uniform(0, 1) < p; }
};

struct Colour {
  float rgb[3];
};

Colour random_colour(Draws& draw) { return {{draw.uniform(0, 255), draw.uniform(0, 255), draw.uniform(0, 255)}}; }

// A colour whose summed channel distance from `other` is at least `contrast`.
Colour colour_apart(Draws& draw, const Colour& other, float contrast) {
  for (;;) {
    const Colour c = random_colour(draw);
    float distance = 0;
    for (int k = 0; k < 3; ++k) distance += std::fabs(c.rgb[k] - other.rgb[k]);
    if (distance >= contrast) return c;
  }
}

// A shape of class `label` centred at (cx, cy), of half-size r, tilted by an angle with cosine
// and sine (cos, sin), its texture of cells `period` pixels wide shifted by `phase`.
struct Shape {
  int label;
  float cx, cy, r;
  float cos, sin;
  float period, phase;
  Colour colour;
};

// Is pixel (x, y) inside `s`? (u, v) is the offset from the centre in the shape's own, tilted frame.
bool inside(const Shape& s, int x, int y) {
  const float ox = float(x) - s.cx, oy = float(y) - s.cy;
  const float u = s.cos * ox + s.sin * oy, v = -s.sin * ox + s.cos * oy;
  const float au = std::fabs(u), av = std::fabs(v);
  const float d2 = u * u + v * v, r = s.r, box = 0.8f * r;
  const bool in_box = au <= r && av <= r;
  const int cell_u = int(std::floor((u + s.phase) / s.period)), cell_v = int(std::floor((v + s.phase) / s.period));
  switch (s.label) {
    case 0: return in_box && ((cell_u + cell_v) & 1) == 0;                     // checkerboard
    case 1: return std::fabs(au - av) <= 1.2f && au <= box;                    // cross (X)
    case 2: return d2 <= r * r;                                                // disc
    case 3: return std::max(au, av) <= box && std::max(au, av) >= box - 2.0f;  // frame
    case 4: return in_box && (cell_v & 1) == 0;                                // horizontal stripes
    case 5: return (au <= 1.5f && av <= r) || (av <= 1.5f && au <= r);         // plus
    case 6: return d2 <= r * r && d2 >= (r - 2.5f) * (r - 2.5f);               // ring
    case 7: return au <= box && av <= box;                                     // square
    case 8: return v >= -r && v <= 0.8f * r && au <= 0.6f * (v + r);           // triangle, apex up
    default: return in_box && (cell_u & 1) == 0;                               // vertical stripes
  }
}

// A shape of class `label` and half-size in [r_lo, r_hi] with its centre in [lo, hi]^2, tilted
// by up to `max_tilt` degrees either way.
Shape random_shape(Draws& draw, int label, float r_lo, float r_hi, float lo, float hi, float max_tilt, Colour colour) {
  Shape s;
  s.label = label;
  s.cx = draw.uniform(lo, hi);
  s.cy = draw.uniform(lo, hi);
  s.r = draw.uniform(r_lo, r_hi);
  const float angle = draw.uniform(-max_tilt, max_tilt) * std::numbers::pi_v<float> / 180.0f;
  s.cos = std::cos(angle);
  s.sin = std::sin(angle);
  s.period = (label == 0 ? 3.0f : 2.0f) * draw.uniform(1.0f, 1.4f);
  s.phase = draw.uniform(0, 6);
  s.colour = colour;
  return s;
}

// A straight stroke from (x0, y0) to (x1, y1), about one pixel thick.
struct Stroke {
  float x0, y0, x1, y1;
  Colour colour;
};

bool on_stroke(const Stroke& s, int x, int y) {
  const float dx = s.x1 - s.x0, dy = s.y1 - s.y0;
  const float t = std::clamp(((float(x) - s.x0) * dx + (float(y) - s.y0) * dy) / (dx * dx + dy * dy), 0.0f, 1.0f);
  const float ex = float(x) - (s.x0 + t * dx), ey = float(y) - (s.y0 + t * dy);
  return ex * ex + ey * ey <= 0.5f;
}

// An axis-aligned patch [x0, x1] x [y0, y1] drawn over the main shape; it either shows its own
// colour or erases what lies under it back to the background.
struct Occluder {
  float x0, y0, x1, y1;
  bool erases;
  Colour colour;
  bool covers(int x, int y) const { return float(x) >= x0 && float(x) <= x1 && float(y) >= y0 && float(y) <= y1; }
};

// The background: a colour with a linear brightness gradient and, on some images, a texture of
// stripes or checks at a random angle and period.
struct Background {
  Colour colour;
  float gx, gy;         // gradient, per pixel
  float texture = 0;    // amplitude; 0: none
  bool checks = false;  // checks, or stripes
  float cos = 1, sin = 0, period = 4, phase = 0;

  float at(int x, int y, int channel) const {
    float v = colour.rgb[channel] + gx * float(x - kSide / 2) + gy * float(y - kSide / 2);
    if (texture > 0) {
      const float u = cos * float(x) + sin * float(y), w = -sin * float(x) + cos * float(y);
      const int cell = int(std::floor((u + phase) / period)) + (checks ? int(std::floor((w + phase) / period)) : 0);
      v += (cell & 1) ? texture : -texture;
    }
    return v;
  }
};

// Everything one image shows, drawn from the same distributions whatever the class, apart from
// the main shape's label.
struct Scene {
  Background background;
  std::vector<Stroke> strokes;
  std::vector<Shape> distractors;
  Shape main;
  bool occluded = false;
  Occluder occluder;
  float noise;  // uniform pixel noise of +-noise
};

// The scene of one image of class `label`. Every amount scales with the difficulty d; at d = 0
// only the background, the main shape and noise of +-20 are drawn.
Scene random_scene(Draws& draw, int label, float d) {
  Scene scene;
  Background& bg = scene.background;
  bg.colour = random_colour(draw);
  bg.gx = draw.uniform(-2, 2);
  bg.gy = draw.uniform(-2, 2);
  if (draw.chance(0.6f * d)) {
    bg.texture = draw.uniform(8, 30) * std::min(d, 1.0f);
    bg.checks = draw.chance(0.5f);
    const float angle = draw.uniform(0, 180) * std::numbers::pi_v<float> / 180.0f;
    bg.cos = std::cos(angle);
    bg.sin = std::sin(angle);
    bg.period = draw.uniform(2, 4);
    bg.phase = draw.uniform(0, 4);
  }
  const int strokes = draw.integer(0, int(std::lround(4 * d)));
  for (int i = 0; i < strokes; ++i) {
    Stroke s;
    s.x0 = draw.uniform(0, kSide - 1);
    s.y0 = draw.uniform(0, kSide - 1);
    const float length = draw.uniform(4, 10), angle = draw.uniform(0, 2 * std::numbers::pi_v<float>);
    s.x1 = s.x0 + length * std::cos(angle);
    s.y1 = s.y0 + length * std::sin(angle);
    s.colour = random_colour(draw);
    scene.strokes.push_back(s);
  }
  const float tilt = 20 * d;
  const int distractors = draw.integer(0, int(std::lround(2 * d)));
  for (int i = 0; i < distractors; ++i) {
    const int other = (label + draw.integer(1, kClasses - 1)) % kClasses;
    scene.distractors.push_back(random_shape(draw, other, 2.5f, 4.5f, 3, kSide - 4, tilt, random_colour(draw)));
  }
  // Contrast from 150 (summed over the channels) at d = 0 down to 90 at d = 1.
  const float contrast = std::max(150.0f - 60.0f * d, 60.0f);
  scene.main = random_shape(draw, label, 6, 10, 11, 21, tilt, colour_apart(draw, bg.colour, contrast));
  if (draw.chance(0.5f * d)) {
    // A patch of 0.5 to 1 times the shape's half-size, its centre at 0.5 to 1 half-sizes from the
    // shape's, in a random direction: it hides a side of the shape, rarely the middle.
    Occluder& o = scene.occluder;
    const float side = scene.main.r * draw.uniform(0.5f, 1.0f), reach = scene.main.r * draw.uniform(0.5f, 1.0f);
    const float angle = draw.uniform(0, 2 * std::numbers::pi_v<float>);
    const float ox = scene.main.cx + reach * std::cos(angle), oy = scene.main.cy + reach * std::sin(angle);
    o.x0 = ox - side / 2;
    o.x1 = ox + side / 2;
    o.y0 = oy - side / 2;
    o.y1 = oy + side / 2;
    o.erases = draw.chance(0.5f);
    o.colour = random_colour(draw);
    scene.occluded = true;
  }
  scene.noise = 20 + 20 * d;
  return scene;
}

// Paints `scene` into `out` (32 x 32 x 3, HWC): background, strokes, distractors, the main shape,
// the occluder, in that order, then the noise.
void paint(const Scene& scene, Draws& draw, uint8_t* out) {
  const int noise_span = int(2 * scene.noise) + 1;
  for (int y = 0; y < kSide; ++y)
    for (int x = 0; x < kSide; ++x) {
      const Colour* colour = nullptr;  // null: the background
      for (const Stroke& s : scene.strokes)
        if (on_stroke(s, x, y)) colour = &s.colour;
      for (const Shape& s : scene.distractors)
        if (inside(s, x, y)) colour = &s.colour;
      if (inside(scene.main, x, y)) colour = &scene.main.colour;
      if (scene.occluded && scene.occluder.covers(x, y))
        colour = scene.occluder.erases ? nullptr : &scene.occluder.colour;
      uint64_t noise = draw.bits();
      for (int c = 0; c < 3; ++c, noise >>= 16) {
        const float base = colour ? colour->rgb[c] : scene.background.at(x, y, c);
        const float v = base + float(int(noise & 0xffff) % noise_span) - scene.noise;
        out[(y * kSide + x) * 3 + c] = uint8_t(std::clamp(v, 0.0f, 255.0f) + 0.5f);
      }
    }
}

}  // namespace

Dataset make_synthetic(int64_t count, uint64_t seed, bool train, double difficulty) {
  if (count <= 0) throw std::invalid_argument("synthetic: the image count must be positive");
  if (!(difficulty >= 0 && difficulty <= kSyntheticMaxDifficulty))
    throw std::invalid_argument("synthetic: difficulty " + std::to_string(difficulty) + " is not in [0, " +
                                std::to_string(int(kSyntheticMaxDifficulty)) + "]");
  Dataset dataset;
  dataset.num_classes = kClasses;
  dataset.class_names = synthetic_class_names();
  dataset.labels.resize(size_t(count));
  dataset.images.resize(size_t(count) * dataset.image_bytes());
  const uint64_t split_key = random_bits(seed, train ? 0 : 1, 0);
  for (int64_t i = 0; i < count; ++i) {
    const int label = int(i % kClasses);
    dataset.labels[i] = label;
    Draws draw{split_key + (uint64_t(i) << 32)};
    const Scene scene = random_scene(draw, label, float(difficulty));
    paint(scene, draw, dataset.images.data() + i * dataset.image_bytes());
  }
  return dataset;
}

std::string synthetic_folder_name(int64_t train, int64_t test, uint64_t seed, double difficulty) {
  char name[160];
  std::snprintf(name, sizeof name, "synthetic-v%d-d%g-%lld-%lld", kSyntheticVersion, difficulty,
                static_cast<long long>(train), static_cast<long long>(test));
  std::string result = name;
  if (seed != 0) result += "-seed" + std::to_string(seed);
  return result;
}

namespace {

// Removes the `<target>.partial-<pid>` folders whose writer is gone (killed while it wrote them);
// a live writer's, or one that cannot be told apart from a live one (EPERM), stays.
void remove_abandoned_partials(const std::filesystem::path& target) {
  namespace fs = std::filesystem;
  const std::string prefix = target.filename().string() + ".partial-";
  const fs::path folder = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string pid = name.substr(prefix.size());
    if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (::kill(pid_t(std::stol(pid)), 0) == 0 || errno != ESRCH) continue;
    fs::remove_all(entry.path(), error);
  }
}

}  // namespace

bool ensure_synthetic_cifar10(const std::string& dir, int64_t train, int64_t test, uint64_t seed, double difficulty) {
  namespace fs = std::filesystem;
  if (fs::is_directory(dir)) return false;
  const fs::path target = fs::path(dir).lexically_normal();
  if (target.has_parent_path()) create_dataset_folder(target.parent_path().string());
  remove_abandoned_partials(target);
  const fs::path staging = target.string() + ".partial-" + std::to_string(getpid());
  write_cifar10(staging.string(), make_synthetic(train, seed, true, difficulty),
                make_synthetic(test, seed, false, difficulty));
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
