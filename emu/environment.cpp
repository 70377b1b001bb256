// environment.cpp: the CUTRAIN_EMU_* numbers of environment.h.
#include "emu/environment.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

namespace cutrain::emu {

uint64_t integer_from_environment(const char* name, uint64_t fallback, uint64_t least, uint64_t most) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  // strtoull itself takes leading spaces and a sign (and wraps "-1" around): digits only here.
  const bool digits = std::strspn(text, "0123456789") == std::strlen(text);
  if (!digits || *end != '\0' || errno == ERANGE || value < least || value > most) {
    const std::string expected = most == std::numeric_limits<uint64_t>::max() && least == 0
                                     ? "a non-negative integer"
                                     : "an integer from " + std::to_string(least) + " to " + std::to_string(most);
    std::fprintf(stderr, "%s='%s': expected %s\n", name, text, expected.c_str());
    std::exit(2);
  }
  return value;
}

}  // namespace cutrain::emu
