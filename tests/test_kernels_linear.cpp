// The classifier's CPU reference: forward by definition, backward by finite differences, beta.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "kernels/linear_cpu.h"
#include "tests/gradcheck.h"

using namespace cutrain;

TEST_CASE("linear: forward by definition, gradients by finite differences, beta accumulates", "[kernels]") {
  const int N = 4, I = 7, O = 5;
  std::mt19937 rng(6);
  std::vector<float> x = test::random_vector(N * I, rng), w = test::random_vector(O * I, rng),
                     b = test::random_vector(O, rng), y(N * O);
  linear_forward_cpu(x.data(), w.data(), b.data(), N, I, O, y.data());
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < O; ++o) {
      double sum = b[o];
      for (int i = 0; i < I; ++i) sum += double(x[n * I + i]) * w[o * I + i];
      CHECK(y[n * O + o] == Approx(sum).margin(1e-5));
    }

  const std::vector<float> r = test::random_vector(N * O, rng);
  const std::vector<float> old_dw = test::random_vector(O * I, rng), old_db = test::random_vector(O, rng);
  std::vector<float> dx(N * I), dw(O * I, NAN), db(O, NAN);  // beta = 0 must not read them
  linear_backward_cpu(x.data(), w.data(), r.data(), N, I, O, 0.0f, dx.data(), dw.data(), db.data());
  auto loss = [&] {
    linear_forward_cpu(x.data(), w.data(), b.data(), N, I, O, y.data());
    return test::weighted_sum(y, r);
  };
  // Linear in each argument: rounding of the O (or N) outputs that move, ~6e-8*sqrt(5)/2h ~ 1e-5.
  test::check_gradient("dx", x, dx, loss, 1e-2f, 1e-4, x.size());
  test::check_gradient("dw", w, dw, loss, 1e-2f, 1e-4, w.size());
  test::check_gradient("db", b, db, loss, 1e-2f, 1e-4, b.size());

  std::vector<float> dw_acc = old_dw, db_acc = old_db;
  linear_backward_cpu(x.data(), w.data(), r.data(), N, I, O, 1.0f, dx.data(), dw_acc.data(), db_acc.data());
  for (int i = 0; i < O * I; ++i) CHECK(dw_acc[i] == Approx(old_dw[i] + dw[i]).margin(1e-6));
  for (int o = 0; o < O; ++o) CHECK(db_acc[o] == Approx(old_db[o] + db[o]).margin(1e-6));
}
