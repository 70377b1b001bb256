// LR schedules: the formulas of kernels/lr_schedule.h at the points where they are easy to know.
#include <catch2/catch.hpp>

#include "kernels/lr_schedule.h"

using cutrain::LrSchedule;
using cutrain::LrScheduleKind;

TEST_CASE("constant and warm-up schedules", "[app]") {
  LrSchedule s{LrScheduleKind::constant, 0.1, 100, 10};
  CHECK(s.at(0) == Approx(0.01));  // (0 + 1) / 10 of the rate
  CHECK(s.at(4) == Approx(0.05));
  CHECK(s.at(9) == Approx(0.1));
  CHECK(s.at(50) == Approx(0.1));
  CHECK(s.at(1000) == Approx(0.1));  // past the end: the last value
}

TEST_CASE("cosine decays from the base rate to zero after warm-up", "[app]") {
  LrSchedule s{LrScheduleKind::cosine, 0.4, 110, 10};
  CHECK(s.at(10) == Approx(0.4));
  CHECK(s.at(60) == Approx(0.2));  // half way: (1 + cos(pi/2)) / 2
  CHECK(s.at(109) == Approx(0.4 * (1 + std::cos(M_PI * 99 / 100)) / 2));
  CHECK(s.at(109) < 1e-3);
}

TEST_CASE("step decays tenfold at half and three quarters of the run", "[app]") {
  LrSchedule s{LrScheduleKind::step, 1.0, 100, 0};
  CHECK(s.at(49) == Approx(1.0));
  CHECK(s.at(50) == Approx(0.1));
  CHECK(s.at(74) == Approx(0.1));
  CHECK(s.at(75) == Approx(0.01));
}

TEST_CASE("onecycle follows PyTorch's OneCycleLR defaults", "[app]") {
  LrSchedule s{LrScheduleKind::onecycle, 1.0, 101, 0};
  // torch.optim.lr_scheduler.OneCycleLR(max_lr=1, total_steps=101): step 0 is max_lr/25, the peak
  // is at step 0.3*101-1 = 29.3 (between 29 and 30), the end is max_lr/25/1e4.
  CHECK(s.at(0) == Approx(0.04));
  CHECK(s.at(29) > 0.99);
  CHECK(s.at(30) > 0.99);
  CHECK(s.at(100) == Approx(0.04 / 1e4).margin(1e-9));
  for (int t = 1; t < 29; ++t) CHECK(s.at(t) > s.at(t - 1));
  for (int t = 31; t <= 100; ++t) CHECK(s.at(t) < s.at(t - 1));
}

TEST_CASE("an unknown schedule name is named in the error", "[app]") {
  CHECK_THROWS_WITH(cutrain::parse_lr_schedule("linear"), Catch::Contains("--lr-schedule linear"));
}
