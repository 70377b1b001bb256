// The ETA's pace (Note [A recent ETA] in app/run_clock.h): the recent steps', not the whole run's.
#include <catch2/catch.hpp>

#include "app/run_clock.h"

TEST_CASE("the ETA's pace follows the recent steps after the machine slows down, not the whole run's", "[app]") {
  cutrain::RecentPace pace;
  CHECK(pace.seconds_per_step() == 0);
  for (int i = 0; i < 100; ++i) pace.add(1, 0.1);  // 10 s at 0.1 s a step
  CHECK(pace.seconds_per_step() == Approx(0.1));
  for (int i = 0; i < 60; ++i) pace.add(1, 2.0);  // then 2 minutes at 2 s a step
  // The whole run's average would be 130 s / 160 steps, 0.81 s.
  CHECK(pace.seconds_per_step() == Approx(2.0).epsilon(0.05));
  for (int i = 0; i < 600; ++i) pace.add(1, 0.1);  // and a minute at 0.1 s again (the slow steps of a minute ago still weigh a little)
  CHECK(pace.seconds_per_step() == Approx(0.1).epsilon(0.1));
}
