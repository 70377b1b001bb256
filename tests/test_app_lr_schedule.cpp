// LR schedules: the formulas of kernels/lr_schedule.h at the points where they are easy to know.
#include <catch2/catch.hpp>

#include <algorithm>

#include "kernels/lr_schedule.h"

using cutrain::LrSchedule;
using cutrain::LrScheduleKind;

TEST_CASE("constant and warm-up schedules", "[app]") {
  LrSchedule s{LrScheduleKind::constant, 0.1, 100, 10};
  CHECK(s.at(0) == Approx(0.01));   // (0 + 1) / 10 of the rate
  CHECK(s.at(4) == Approx(0.05));
  CHECK(s.at(9) == Approx(0.1));
  CHECK(s.at(50) == Approx(0.1));
  CHECK(s.at(1000) == Approx(0.1));  // past the end: the last value
}

TEST_CASE("cosine decays from the base rate to zero after warm-up", "[app]") {
  LrSchedule s{LrScheduleKind::cosine, 0.4, 110, 10};
  CHECK(s.at(10) == Approx(0.4));
  CHECK(s.at(60) == Approx(0.2));           // half way: (1 + cos(pi/2)) / 2
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

TEST_CASE("step with its default milestones is the rate of before --lr-milestones, bit for bit", "[app]") {
  // The formula before the milestones were a setting: 0.1 at T / 2 and again at 3T / 4, in integers.
  auto before = [](int64_t T, int64_t t) {
    double lr = 0.3;
    if (t >= T / 2) lr *= 0.1;
    if (t >= T * 3 / 4) lr *= 0.1;
    return lr;
  };
  for (const int64_t T : {1, 2, 3, 4, 5, 7, 97, 390, 391, 7800, 195 * 40, 1000003}) {
    const LrSchedule s{LrScheduleKind::step, 0.3, T, 0};
    for (const int64_t t : {int64_t(0), T / 2 - 1, T / 2, T / 2 + 1, T * 3 / 4 - 1, T * 3 / 4, T * 3 / 4 + 1, T - 1}) {
      INFO("T " << T << ", t " << t);
      CHECK(s.at(t) == before(T, std::min(std::max(t, int64_t(0)), T - 1)));
    }
  }
}

TEST_CASE("step with milestones and gamma is PyTorch's MultiStepLR at the milestone steps floor(m * T)", "[app]") {
  // MultiStepLR(milestones=[2, 5, 9], gamma=0.5): lr = base * gamma ** bisect_right(milestones, t).
  LrSchedule s{LrScheduleKind::step, 1.0, 10, 0};
  s.milestone_count = 3;
  s.milestones[0] = 0.2;
  s.milestones[1] = 0.5;
  s.milestones[2] = 0.95;  // 9.5: step 9
  s.gamma = 0.5;
  const double expected[10] = {1, 1, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 0.125};
  for (int t = 0; t < 10; ++t) CHECK(s.at(t) == expected[t]);
  CHECK(s.at(100) == 0.125);  // past the end: the last value
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
