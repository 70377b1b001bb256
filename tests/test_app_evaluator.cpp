// [app] The evaluator's test-time augmentation (--tta flip) against an oracle built by hand: the
// model's logits on the test images and on a copy of them mirrored byte by byte, summed, argmax; and
// its test loss, the mean cross-entropy of the logits it predicts from, against the same oracle's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "app/evaluator.h"
#include "data/synthetic.h"
#include "kernels/augment.h"
#include "nn/context.h"
#include "nn/resnet.h"
#include "nn/sgd.h"
#include "tests/nn_fixtures.h"

using namespace cutrain;

namespace {

// `d` with every image mirrored left-right.
Dataset mirrored(Dataset d) {
  const int w = d.width, c = d.channels;
  for (size_t i = 0; i < d.size(); ++i) {
    uint8_t* image = d.images.data() + i * d.image_bytes();
    for (int y = 0; y < d.height; ++y)
      for (int x = 0; x < w / 2; ++x)
        std::swap_ranges(image + (y * w + x) * c, image + (y * w + x + 1) * c, image + (y * w + w - 1 - x) * c);
  }
  return d;
}

// A few SGD steps on augmented training images: a freshly initialised model predicts nearly one class
// for everything, whatever the view, which would leave nothing for the oracle to tell apart.
void train_briefly(ResNet18& model) {
  SGD sgd(model.context(), model.params(), SgdConfig{0.9f, 0.0f, true}, test::constant_lr(0.05f));
  const int batch = model.config().batch_size, steps = 30;
  const Dataset train = make_synthetic(int64_t(batch) * steps, 1, true, 0.0);
  const AugmentParams p = make_augment_params(AugmentConfig{}, train.height, train.width, 3);
  for (int step = 0; step < steps; ++step) {
    std::vector<int64_t> indices(static_cast<size_t>(batch));
    for (int i = 0; i < batch; ++i) indices[size_t(i)] = int64_t(step) * batch + i;
    gather_augment_cpu(train.images.data(), train.labels.data(), indices.data(), batch, 0, p, PixelType::f32,
                       model.input().data, model.labels().as<int32_t>());
    model.forward(true);
    model.backward();
    test::sgd_step(sgd, model);
  }
}

// The model's logits for every image of `d` (normalised only), batch by batch.
std::vector<float> all_logits(ResNet18& model, const Dataset& d) {
  AugmentConfig config;
  config.train = false;
  const AugmentParams p = make_augment_params(config, d.height, d.width, 3);
  const int batch = model.config().batch_size, classes = model.config().num_classes;
  std::vector<float> logits;
  for (size_t start = 0; start < d.size(); start += size_t(batch)) {
    const int n = int(std::min(d.size() - start, size_t(batch)));
    std::vector<int64_t> indices(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) indices[size_t(i)] = int64_t(start) + i;
    gather_augment_cpu(d.images.data(), d.labels.data(), indices.data(), n, 0, p, PixelType::f32,
                       model.input().data, model.labels().as<int32_t>());
    model.forward(false);
    const float* out = model.logits().as<float>();
    logits.insert(logits.end(), out, out + n * classes);
  }
  return logits;
}

// Correct predictions per class of the scores `logits` (rows of `classes`).
std::vector<int64_t> correct_per_class(const std::vector<float>& logits, const Dataset& d, int classes) {
  std::vector<int64_t> correct(static_cast<size_t>(classes));
  for (size_t i = 0; i < d.size(); ++i) {
    const float* row = logits.data() + i * size_t(classes);
    const auto predicted = std::max_element(row, row + classes) - row;
    if (predicted == d.labels[i]) ++correct[size_t(predicted)];
  }
  return correct;
}

// The mean over the images of d of -log softmax(row)[label], in double, for rows of `classes`.
double mean_cross_entropy(const std::vector<float>& logits, const Dataset& d, int classes) {
  double sum = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    const float* row = logits.data() + i * size_t(classes);
    const double top = *std::max_element(row, row + classes);
    double exp_sum = 0;
    for (int k = 0; k < classes; ++k) exp_sum += std::exp(double(row[k]) - top);
    sum += std::log(exp_sum) - (double(row[d.labels[i]]) - top);
  }
  return sum / double(d.size());
}

}  // namespace

TEST_CASE("evaluator: --tta flip scores the argmax of the summed logits of each image and its mirror", "[app]") {
  Context ctx({});
  ResNetConfig config;
  config.width = 4;
  config.batch_size = 16;
  config.seed = 3;
  ResNet18 model(ctx, config);
  train_briefly(model);
  const Dataset test = make_synthetic(120, 0, false, 0.0);  // 8 batches, the last one partial

  const std::vector<float> plain = all_logits(model, test), flipped = all_logits(model, mirrored(test));
  std::vector<float> summed(plain.size());
  std::transform(plain.begin(), plain.end(), flipped.begin(), summed.begin(), std::plus<>());
  const std::vector<int64_t> expected_plain = correct_per_class(plain, test, 10);
  const std::vector<int64_t> expected_tta = correct_per_class(summed, test, 10);
  REQUIRE(expected_tta != expected_plain);  // the mirror changes the outcome, so this test can tell

  const EvalResult with_tta = Evaluator(model, test, nullptr, 0, 1, Tta::flip).run();
  CHECK(with_tta.class_correct == expected_tta);
  CHECK(with_tta.class_total == std::vector<int64_t>(10, 12));
  const EvalResult without = Evaluator(model, test, nullptr, 0, 1).run();
  CHECK(without.class_correct == expected_plain);
  // The test loss, the last batch's 8 rows weighed as 8: of the logits as they are, and of the mean
  // of the two views' under --tta flip.
  std::vector<float> mean(summed.size());
  std::transform(summed.begin(), summed.end(), mean.begin(), [](float v) { return 0.5f * v; });
  CHECK(without.loss == Approx(mean_cross_entropy(plain, test, 10)).epsilon(1e-5));
  CHECK(with_tta.loss == Approx(mean_cross_entropy(mean, test, 10)).epsilon(1e-5));
  // The two views' own losses differ, so a loss of one view would change when the mirrored images are
  // evaluated instead, and the loss of their mean does not. (The mean's loss and the first view's
  // can meet by chance: with oneDNN's AVX2 kernels they were 4.62992 both.)
  REQUIRE(mean_cross_entropy(flipped, test, 10) != Approx(mean_cross_entropy(plain, test, 10)).epsilon(1e-3));
  CHECK(Evaluator(model, mirrored(test), nullptr, 0, 1, Tta::flip).run().loss == Approx(with_tta.loss).epsilon(1e-6));
  CHECK(parse_tta("flip") == Tta::flip);
  CHECK_THROWS_WITH(parse_tta("crop"), "--tta crop: expected none or flip");
}
