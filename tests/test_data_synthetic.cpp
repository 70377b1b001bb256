// The synthetic dataset: deterministic, balanced, different across splits, seeds and difficulties,
// cached under a name that holds the generator's version, and out of a linear model's reach.
#include <catch2/catch.hpp>

#include <Eigen/Cholesky>
#include <Eigen/Core>

#include "data/cifar10.h"
#include "data/synthetic.h"
#include "tests/test_data_util.h"

using namespace cutrain;

namespace {

// The test accuracy of the best linear classifier on the raw pixels that least squares finds:
// one-vs-rest ridge regression (solved in its dual form, K = X X^T, as there are fewer images than
// pixels), with the best of several penalties chosen on the test set itself, so that the linear
// model gets every advantage.
double linear_model_accuracy(const Dataset& train, const Dataset& test) {
  const auto n = Eigen::Index(train.size()), m = Eigen::Index(test.size()), d = Eigen::Index(train.image_bytes());
  auto pixels = [d](const Dataset& set) {
    Eigen::MatrixXd x(Eigen::Index(set.size()), d);
    for (Eigen::Index i = 0; i < x.rows(); ++i)
      for (Eigen::Index j = 0; j < d; ++j) x(i, j) = set.image(size_t(i))[j] / 255.0;
    return x;
  };
  Eigen::MatrixXd x = pixels(train), t = pixels(test);
  const Eigen::RowVectorXd mean = x.colwise().mean();
  x.rowwise() -= mean;
  t.rowwise() -= mean;
  Eigen::MatrixXd y = Eigen::MatrixXd::Constant(n, train.num_classes, -1.0 / train.num_classes);
  for (Eigen::Index i = 0; i < n; ++i) y(i, train.labels[size_t(i)]) += 1;
  const Eigen::MatrixXd k = x * x.transpose(), cross = t * x.transpose();
  double best = 0;
  for (double penalty : {1.0, 10.0, 100.0, 1000.0}) {
    const Eigen::MatrixXd weights = (k + penalty * Eigen::MatrixXd::Identity(n, n)).llt().solve(y);
    const Eigen::MatrixXd scores = cross * weights;
    int correct = 0;
    for (Eigen::Index i = 0; i < m; ++i) {
      Eigen::Index label;
      scores.row(i).maxCoeff(&label);
      correct += label == test.labels[size_t(i)];
    }
    best = std::max(best, double(correct) / double(m));
  }
  return best;
}

}  // namespace

TEST_CASE("synthetic: deterministic, balanced, and varied", "[data]") {
  Dataset a = make_synthetic(200, 5, true);
  Dataset b = make_synthetic(200, 5, true);
  REQUIRE(a.size() == 200);
  CHECK(a.num_classes == 10);
  CHECK(a.class_names.size() == 10);
  CHECK(a.images == b.images);
  CHECK(a.labels == b.labels);
  a.validate("synthetic");
  std::vector<int> per_class(10);
  for (int32_t label : a.labels) ++per_class[label];
  CHECK(per_class == std::vector<int>(10, 20));

  // A prefix is the same images: image i depends on (seed, difficulty, split, i) only.
  Dataset prefix = make_synthetic(30, 5, true);
  CHECK(std::equal(prefix.images.begin(), prefix.images.end(), a.images.begin()));

  Dataset test = make_synthetic(200, 5, false);
  Dataset other_seed = make_synthetic(200, 6, true);
  Dataset clean = make_synthetic(200, 5, true, 0.0);
  CHECK(test.images != a.images);
  CHECK(other_seed.images != a.images);
  CHECK(clean.images != a.images);
  CHECK(clean.labels == a.labels);

  // No two images alike, and the pixels use the whole range.
  for (size_t i = 1; i < a.size(); ++i)
    REQUIRE_FALSE(std::equal(a.image(i), a.image(i) + a.image_bytes(), a.image(i - 1)));
  auto [lo, hi] = std::minmax_element(a.images.begin(), a.images.end());
  CHECK(*lo < 10);
  CHECK(*hi > 245);

  CHECK_THROWS_WITH(make_synthetic(10, 0, true, 2.5), Catch::Contains("difficulty 2.5"));
  CHECK_THROWS_WITH(make_synthetic(10, 0, true, -1), Catch::Contains("is not in [0, 2]"));
}

// Chance is 10%. Measured with 1000 training and 500 test images: 12.4% to 13.8% at the default
// difficulty over four seeds, 19% at difficulty 0.5 and 24% at difficulty 0, where only colour,
// position and noise hide the shapes; a class-dependent colour would take it far higher.
TEST_CASE("synthetic: a linear model on the pixels stays near chance", "[data]") {
  const double accuracy = linear_model_accuracy(make_synthetic(1000, 0, true), make_synthetic(500, 0, false));
  INFO("linear model's test accuracy " << accuracy);
  CHECK(accuracy < 0.17);
}

TEST_CASE("synthetic: the cached CIFAR-format copy is written once and reads back the same", "[data]") {
  cutrain::test::TempDir tmp;
  const std::string dir = tmp / "cache/synthetic-60-20-seed4";
  CHECK(ensure_synthetic_cifar10(dir, 60, 20, 4, 0.5));
  CHECK_FALSE(ensure_synthetic_cifar10(dir, 60, 20, 4, 0.5));  // already there: untouched
  Dataset train = load_cifar10(dir, true), test = load_cifar10(dir, false);
  CHECK(train.images == make_synthetic(60, 4, true, 0.5).images);
  CHECK(test.labels == make_synthetic(20, 4, false, 0.5).labels);
  CHECK(train.class_names == synthetic_class_names());
  // no staging folders left behind
  CHECK(std::distance(std::filesystem::directory_iterator(tmp / "cache"), std::filesystem::directory_iterator()) == 1);
}

TEST_CASE("synthetic: a cache folder's name holds the generator's version and every parameter", "[data]") {
  const std::string version = "synthetic-v" + std::to_string(kSyntheticVersion) + "-";
  CHECK(synthetic_folder_name(50000, 10000, 0, 1.0) == version + "d1-50000-10000");
  CHECK(synthetic_folder_name(5000, 1000, 3, 0.25) == version + "d0.25-5000-1000-seed3");
  CHECK(synthetic_folder_name(5000, 1000, 0, 0.0) != synthetic_folder_name(5000, 1000, 0, 1.0));
}
