#include "app/lr_schedule.h"

#include <stdexcept>

namespace cutrain {

LrScheduleKind parse_lr_schedule(const std::string& name) {
  if (name == "constant") return LrScheduleKind::constant;
  if (name == "cosine") return LrScheduleKind::cosine;
  if (name == "onecycle") return LrScheduleKind::onecycle;
  if (name == "step") return LrScheduleKind::step;
  throw std::runtime_error("--lr-schedule " + name + ": expected constant, cosine, onecycle or step");
}

}  // namespace cutrain
