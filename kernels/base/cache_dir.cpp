#include "kernels/base/cache_dir.h"

#include <cstdlib>

namespace cutrain {

std::string cutrain_cache_dir() {
  if (const char* dir = std::getenv("CUTRAIN_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/cutrain";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/cutrain";
}

}  // namespace cutrain
