// Augmentation: crop, flip and normalise on hand-computed pixels, against a plain torchvision-style
// reference (pad, crop, flip, normalise in double), and the counter-based randomness.
#include <catch2/catch.hpp>

#include <cstring>
#include <set>

#include "kernels/augment.h"
#include "tests/test_data_util.h"

using namespace cutrain;

static const AugmentConfig kConfig;  // CIFAR mean and std, pad 4, flip

// torchvision's ToTensor + Normalize, in double.
static double normalized(int v, int c) { return (v / 255.0 - kConfig.mean[c]) / kConfig.std[c]; }

TEST_CASE("augment: evaluation only normalises, out = (v/255 - mean) / std", "[data]") {
  AugmentConfig config;
  config.train = false;
  AugmentParams p = make_augment_params(config, 32, 32, 3);
  std::vector<uint8_t> image(32 * 32 * 3);
  image[(5 * 32 + 6) * 3 + 0] = 255;
  image[(5 * 32 + 6) * 3 + 1] = 128;
  image[(5 * 32 + 6) * 3 + 2] = 1;
  CropFlip cf = crop_flip(p, 3, 17);
  CHECK(cf.dx == 0);
  CHECK(cf.dy == 0);
  CHECK_FALSE(cf.flip);
  CHECK(augment_pixel(image.data(), p, cf, 5, 6, 0) == Approx((1 - 0.4914) / 0.2023).epsilon(1e-6));
  CHECK(augment_pixel(image.data(), p, cf, 5, 6, 1) == Approx((128 / 255.0 - 0.4822) / 0.1994).epsilon(1e-6));
  CHECK(augment_pixel(image.data(), p, cf, 5, 6, 2) == Approx((1 / 255.0 - 0.4465) / 0.2010).epsilon(1e-6));
  CHECK(augment_pixel(image.data(), p, cf, 0, 0, 0) == Approx(-0.4914 / 0.2023).epsilon(1e-6));
}

TEST_CASE("augment: evaluation's mirrored view is every image flipped left-right, uncropped", "[data]") {
  AugmentConfig config;
  config.train = false;
  config.mirror = true;
  AugmentParams p = make_augment_params(config, 32, 32, 3);
  std::vector<uint8_t> image(32 * 32 * 3);
  for (size_t i = 0; i < image.size(); ++i) image[i] = uint8_t(i % 251 + 1);
  std::vector<float> out(image.size());
  int32_t label = 3, out_label = -1;
  const int64_t index = 0;
  for (int64_t epoch : {0, 5}) {  // the same for every epoch and sample: nothing random
    gather_augment_cpu(image.data(), &label, &index, 1, epoch, p, PixelType::f32, out.data(), &out_label);
    CHECK(out_label == 3);
    for (int y : {0, 13, 31})
      for (int x : {0, 7, 31})
        for (int c = 0; c < 3; ++c) {
          INFO("y " << y << " x " << x << " c " << c);
          CHECK(out[size_t((y * 32 + x) * 3 + c)] == Approx(normalized(image[size_t((y * 32 + 31 - x) * 3 + c)], c)));
        }
  }
}

TEST_CASE("augment: crop and flip move pixels where hand computation says", "[data]") {
  AugmentParams p = make_augment_params(kConfig, 32, 32, 3);
  std::vector<uint8_t> image(32 * 32 * 3);
  for (size_t i = 0; i < image.size(); ++i) image[i] = uint8_t(i % 251 + 1);  // never 0
  auto pixel = [&](int y, int x, int c) { return int(image[(y * 32 + x) * 3 + c]); };

  // Window's top-left at (top, left) = (0, 7) of the padded image: dy = -4, dx = 3.
  CropFlip shifted{-4, 3, false};
  CHECK(augment_pixel(image.data(), p, shifted, 0, 0, 0) == Approx(normalized(0, 0)));  // padding row
  CHECK(augment_pixel(image.data(), p, shifted, 3, 10, 1) == Approx(normalized(0, 1)));  // still padding
  CHECK(augment_pixel(image.data(), p, shifted, 4, 0, 2) == Approx(normalized(pixel(0, 3, 2), 2)));
  CHECK(augment_pixel(image.data(), p, shifted, 31, 28, 0) == Approx(normalized(pixel(27, 31, 0), 0)));
  CHECK(augment_pixel(image.data(), p, shifted, 31, 29, 0) == Approx(normalized(0, 0)));  // padding column

  // Flipped window: out[y][x] = image[y + dy][31 - x + dx].
  CropFlip flipped{1, -2, true};
  CHECK(augment_pixel(image.data(), p, flipped, 0, 0, 0) == Approx(normalized(pixel(1, 29, 0), 0)));
  CHECK(augment_pixel(image.data(), p, flipped, 0, 29, 1) == Approx(normalized(pixel(1, 0, 1), 1)));
  CHECK(augment_pixel(image.data(), p, flipped, 0, 30, 1) == Approx(normalized(0, 1)));
  CHECK(augment_pixel(image.data(), p, flipped, 31, 31, 2) == Approx(normalized(0, 2)));  // row 32: padding
}

TEST_CASE("augment: extra output channels are zero", "[data]") {
  for (int channels : {4, 8}) {
    AugmentParams p = make_augment_params(kConfig, 32, 32, channels);
    std::vector<uint8_t> images(32 * 32 * 3, 200);
    std::vector<int32_t> labels = {7};
    std::vector<int64_t> indices = {0};
    std::vector<float> out(32 * 32 * channels, -1.0f);
    int32_t label = -1;
    gather_augment_cpu(images.data(), labels.data(), indices.data(), 1, 0, p, PixelType::f32, out.data(), &label);
    CHECK(label == 7);
    for (int px = 0; px < 32 * 32; ++px)
      for (int c = 3; c < channels; ++c) REQUIRE(out[px * channels + c] == 0.0f);
    CHECK(out[(16 * 32 + 16) * channels] == Approx(normalized(200, 0)));
  }
}

// The whole recipe the slow, obvious way: zero-pad to 40 x 40, cut the window at (top, left),
// mirror it, normalise in double.
static std::vector<double> reference(const uint8_t* image, CropFlip cf) {
  const int pad = 4, side = 40;
  std::vector<int> padded(side * side * 3, 0);
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 32; ++x)
      for (int c = 0; c < 3; ++c) padded[((y + pad) * side + x + pad) * 3 + c] = image[(y * 32 + x) * 3 + c];
  const int top = cf.dy + pad, left = cf.dx + pad;
  std::vector<double> out(32 * 32 * 3);
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 32; ++x) {
      int wx = cf.flip ? 31 - x : x;
      for (int c = 0; c < 3; ++c) out[(y * 32 + x) * 3 + c] = normalized(padded[((top + y) * side + left + wx) * 3 + c], c);
    }
  return out;
}

TEST_CASE("augment: a gathered training batch matches the padded-crop-flip reference", "[data]") {
  Dataset d = test::patterned_dataset(50);
  AugmentParams p = make_augment_params(kConfig, 32, 32, 3);
  std::vector<int64_t> indices = {49, 3, 3, 17, 0, 25};
  std::vector<float> out(indices.size() * 3072);
  std::vector<int32_t> labels(indices.size());
  const int64_t epoch = 5;
  gather_augment_cpu(d.images.data(), d.labels.data(), indices.data(), int(indices.size()), epoch, p, PixelType::f32,
                     out.data(), labels.data());
  for (size_t i = 0; i < indices.size(); ++i) {
    CHECK(labels[i] == d.labels[indices[i]]);
    std::vector<double> want = reference(d.image(indices[i]), crop_flip(p, epoch, indices[i]));
    for (int k = 0; k < 3072; ++k) REQUIRE(out[i * 3072 + k] == Approx(want[k]).margin(1e-5));
  }
  // The same sample in two batch positions gets the same crop: the draw is keyed by its index.
  CHECK(std::equal(out.begin() + 3072, out.begin() + 2 * 3072, out.begin() + 2 * 3072));
}

TEST_CASE("augment: crops cover all 81 offsets, flips are about half, epochs and seeds differ", "[data]") {
  AugmentParams p = make_augment_params(kConfig, 32, 32, 3);
  std::set<std::pair<int, int>> offsets;
  int flips = 0, moved_by_epoch = 0;
  const int n = 4000;
  for (int s = 0; s < n; ++s) {
    CropFlip cf = crop_flip(p, 0, s);
    REQUIRE(cf.dy >= -4);
    REQUIRE(cf.dy <= 4);
    REQUIRE(cf.dx >= -4);
    REQUIRE(cf.dx <= 4);
    offsets.insert({cf.dy, cf.dx});
    flips += cf.flip;
    CropFlip next = crop_flip(p, 1, s);
    moved_by_epoch += next.dy != cf.dy || next.dx != cf.dx || next.flip != cf.flip;
  }
  CHECK(offsets.size() == 81);
  CHECK(flips > n * 0.45);
  CHECK(flips < n * 0.55);
  CHECK(moved_by_epoch > n * 0.95);  // 1 - 1/162 of draws change

  AugmentConfig other = kConfig;
  other.seed = 1;
  AugmentParams q = make_augment_params(other, 32, 32, 3);
  int same = 0;
  for (int s = 0; s < 200; ++s) {
    CropFlip a = crop_flip(p, 0, s), b = crop_flip(q, 0, s);
    same += a.dy == b.dy && a.dx == b.dx && a.flip == b.flip;
  }
  CHECK(same < 20);

  AugmentConfig no_flip = kConfig;
  no_flip.flip = false;
  AugmentParams r = make_augment_params(no_flip, 32, 32, 3);
  for (int s = 0; s < 100; ++s) REQUIRE_FALSE(crop_flip(r, 0, s).flip);
}

TEST_CASE("augment: bf16 output is the fp32 output rounded to nearest even", "[data]") {
  Dataset d = test::patterned_dataset(4);
  AugmentParams p = make_augment_params(kConfig, 32, 32, 4);
  std::vector<int64_t> indices = {2, 0, 3};
  std::vector<float> f32(3 * 32 * 32 * 4);
  std::vector<__nv_bfloat16> bf16(f32.size());
  std::vector<int32_t> labels(3);
  gather_augment_cpu(d.images.data(), d.labels.data(), indices.data(), 3, 2, p, PixelType::f32, f32.data(), labels.data());
  gather_augment_cpu(d.images.data(), d.labels.data(), indices.data(), 3, 2, p, PixelType::bf16, bf16.data(), labels.data());
  for (size_t i = 0; i < f32.size(); ++i) {
    __nv_bfloat16 want = __float2bfloat16_rn(f32[i]);
    REQUIRE(std::memcmp(&bf16[i], &want, 2) == 0);
  }
}

TEST_CASE("augment: bad parameters are rejected", "[data]") {
  CHECK_THROWS_WITH(make_augment_params(kConfig, 32, 32, 2), Catch::Contains("out_channels is 2"));
  AugmentConfig bad = kConfig;
  bad.pad = -1;
  CHECK_THROWS_WITH(make_augment_params(bad, 32, 32, 3), Catch::Contains("pad is -1"));
  bad = kConfig;
  bad.std[1] = 0.0f;
  CHECK_THROWS_WITH(make_augment_params(bad, 32, 32, 3), Catch::Contains("std[1] must be positive"));
}
