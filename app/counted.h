// counted.h: a count with its noun, singular for one: counted(1, "step") is "1 step",
// counted(3, "step") "3 steps". For every count the program prints in a sentence.
#pragma once

#include <string>

namespace cutrain {

inline std::string counted(long long n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

}  // namespace cutrain
